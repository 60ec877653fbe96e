//! The check of one policy of a report: its ledger is replayed first (`replay`), and every other
//! part is read against that replay — the sequence's order (`order`), the pools, counts and
//! threads (`accounts`), the responses and snapshots (`responses`); here, the parts of the
//! sequence reached, the final state, and the model's check re-run on the rebuilt evidence.

use std::collections::{BTreeMap, BTreeSet};

use crate::admission::audit;
use crate::admission::gate::GateState;
use crate::admission::ledger::{Event, Snapshot, WorkEvent};
use crate::draw::table::{labels, plural, plural_was};
use crate::evidence::{Decision, Evidence, Phase};
use crate::label::Label;
use crate::model;
use crate::policy::{Mode, Policy, Route};
use crate::report::{PolicyReport, Report};

use super::answers::unreached;
use super::{Finding, RoomOfRun, counts, failed_caller, said_of};

mod accounts;
mod order;
mod replay;
mod responses;

/// A decision the ledger recorded.
#[derive(Clone, Copy, Debug)]
struct Decided {
    seq: u64,
    index: usize,
    decision: Decision,
}

/// What the replay of a policy's ledger leaves for the other checks.
struct Replayed<'a> {
    /// The events, each refusal with the requests that held its pool then.
    events: Vec<WorkEvent>,
    /// Each request's first decision.
    decided: BTreeMap<Label, Decided>,
    /// Each request's work leaving the section: its `seq`, and whether it was cancelled.
    finished: BTreeMap<Label, (u64, bool)>,
    /// The `seq` of the gate's first opening.
    gate: Option<u64>,
    /// The state after the last event.
    end: Snapshot,
    /// The snapshots, and whether the ledger showed each at a moment of its step.
    watch: Vec<Watch<'a>>,
}

/// A snapshot of the observer's, watched for along the replay between two positions.
struct Watch<'a> {
    name: &'static str,
    /// What ends its window: F1's decision, or the gate's opening where that came first.
    ends: &'static str,
    when: &'static str,
    snapshot: &'a Snapshot,
    from: usize,
    to: usize,
    /// The ledger showed it at a position in the window.
    seen: bool,
    /// Whether the refusals so far equal the snapshot's, for the last length compared: they
    /// only grow, so one comparison serves every position at that length.
    refused: Option<(usize, bool)>,
    /// The state at the window's end, for the message.
    last: Option<Snapshot>,
    /// From the first position that shows the snapshot to the window's end, the ledger's held
    /// work and taken permits at each: what a count taken after the snapshot may see.
    since: Vec<Position>,
}

/// The ledger's held work and taken permits at one position.
#[derive(Clone, Copy)]
struct Position {
    held: usize,
    taken: usize,
}

impl Watch<'_> {
    /// Looks at `state`, the ledger after `k` events.
    fn look(&mut self, k: usize, state: &Snapshot) {
        if k < self.from || k > self.to {
            return;
        }
        if k == self.to {
            self.last = Some(state.clone());
        }
        self.seen = self.seen || self.shows(state);
        if self.seen {
            self.since.push(Position {
                held: state.held_at_gate.len(),
                taken: state.active_work.values().sum(),
            });
        }
    }

    /// Whether `state` is what the snapshot shows.
    fn shows(&mut self, state: &Snapshot) -> bool {
        if state.active_work != self.snapshot.active_work
            || state.held_at_gate != self.snapshot.held_at_gate
            || state.refused.len() != self.snapshot.refused.len()
        {
            return false;
        }
        match self.refused {
            Some((len, same)) if len == state.refused.len() => same,
            _ => {
                let same = state.refused == self.snapshot.refused;
                self.refused = Some((state.refused.len(), same));
                same
            }
        }
    }
}

/// The check of one policy of a report.
pub(super) struct PolicyCheck<'a> {
    pub(super) report: &'a Report,
    pub(super) file: &'a PolicyReport,
    pub(super) policy: Policy,
    pub(super) room: Option<&'a RoomOfRun<'a>>,
    /// The room's gates of this policy, read once for the questions each event asks of them.
    pub(super) room_gates: GateIndex,
    /// Where the policy is in the file.
    pub(super) base: String,
    /// The run failed in this policy: steps after the failure are missing, not contradicted.
    pub(super) cut_short: bool,
    pub(super) findings: Vec<Finding>,
    /// Findings left out beyond [`MAX_FINDINGS`].
    pub(super) dropped: usize,
    pub(super) differences: Vec<String>,
}

/// A policy's room gates, each as `(closed_after_event, opened_after_event)`, sorted by where
/// they closed, each paired with the latest opening among it and those before it: which gate a
/// request met at a seq is then a search, not a walk through every gate.
#[derive(Debug, Default)]
pub(super) struct GateIndex {
    /// Every gate, one that never opened as opening at the end of time.
    closed: Vec<(u64, (u64, u64))>,
    /// The gates that opened.
    opened: Vec<(u64, (u64, u64))>,
}

impl GateIndex {
    /// The room gates closed on `mode`'s policy of the run `room` is of.
    pub(super) fn of(room: Option<&RoomOfRun<'_>>, mode: Mode) -> Self {
        let gates: Vec<(u64, Option<u64>)> = (room.into_iter())
            .flat_map(|room| room.gates_of(mode))
            .map(|g| (g.closed_after_event, g.opened_after_event))
            .collect();
        Self::new(&gates)
    }

    /// `gates`, each as `(closed_after_event, opened_after_event)`, indexed.
    fn new(gates: &[(u64, Option<u64>)]) -> Self {
        let never = gates
            .iter()
            .map(|&(closed, opened)| (closed, opened.unwrap_or(u64::MAX)));
        let opened = (gates.iter()).filter_map(|&(closed, opened)| Some((closed, opened?)));
        GateIndex {
            closed: Self::latest_so_far(never),
            opened: Self::latest_so_far(opened),
        }
    }

    /// `gates` sorted by where they closed, each with the `(opened, closed)` of the gate that
    /// opened latest among it and those before it.
    fn latest_so_far(gates: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, (u64, u64))> {
        let mut gates: Vec<(u64, u64)> = gates.collect();
        gates.sort_unstable();
        // No gate is earlier than `(0, 0)`: the first takes its place.
        let mut latest = (0, 0);
        (gates.into_iter())
            .map(|(closed, opened)| {
                latest = latest.max((opened, closed));
                (closed, latest)
            })
            .collect()
    }

    /// Of `gates` closed before `seq`, the one that opened latest, if it opened at `seq` or
    /// after: `(closed, opened)`. Any gate closed before `seq` and open until it opened no later.
    fn around(gates: &[(u64, (u64, u64))], seq: u64) -> Option<(u64, u64)> {
        let before = gates.partition_point(|&(closed, _)| closed < seq);
        let (_, (opened, closed)) = *gates.get(before.checked_sub(1)?)?;
        (seq <= opened).then_some((closed, opened))
    }

    /// Whether a gate was closed at `seq`: closed before it, and opened (if ever) at it or after.
    fn closed_at(&self, seq: u64) -> bool {
        Self::around(&self.closed, seq).is_some()
    }

    /// The gate met at `seq` that opened latest, of those that opened: `(closed, opened)`.
    fn met_at(&self, seq: u64) -> Option<(u64, u64)> {
        Self::around(&self.opened, seq)
    }
}

/// The most findings listed for one policy.
const MAX_FINDINGS: usize = 40;

impl<'a> PolicyCheck<'a> {
    /// The caller this policy's failure names, if it names one: it was sent, and it ended
    /// with its error.
    fn failed_caller(&self) -> Option<Label> {
        failed_caller(self.failure()?).0
    }

    /// What the report's failure says of this policy, if it is said of it.
    fn failure(&self) -> Option<&'a str> {
        let (mode, rest) = self.report.failure.as_deref().and_then(said_of)?;
        (mode == self.policy.mode).then_some(rest)
    }

    /// The lab's own requests before the release (S1…, F1) the run is seen to have sent:
    /// decided by the ledger, seen waiting unread or queued for a thread, or named by the
    /// failure as the caller that failed.
    fn sent(&self) -> BTreeSet<Label> {
        let file = self.file;
        let decided = (file.work_events.iter())
            .filter(|e| e.event.is_decision())
            .filter_map(|e| e.request);
        let watched = file.observed.executor.iter();
        let waiting =
            watched.flat_map(|w| (w.unread.iter().map(|u| u.request)).chain(w.queued.clone()));
        (decided.chain(waiting).chain(self.failed_caller()))
            .filter(|r| matches!(r, Label::Slow(_) | Label::F1))
            .collect()
    }

    pub(super) fn find(&mut self, path: &[&str], says: String) {
        // A report edited at its root contradicts itself everywhere after; the first ones say
        // what a reader needs.
        if self.findings.len() == MAX_FINDINGS {
            self.dropped += 1;
            return;
        }
        let says = format!("{}: {says}", self.policy.mode.name());
        self.findings.push(Finding::at(&self.base, path, says));
    }

    /// The route `request` was sent to: its own, or for a room request the one the classroom
    /// report lists.
    fn route(&self, request: Label) -> Option<Route> {
        match request {
            Label::Room(..) => self.room?.routes.get(&request).copied(),
            _ => Some(request.route()),
        }
    }

    /// The sequence takes its evidence in order ([`unreached`]). A run stopped before a step has
    /// none of what the step makes: no F1 before the snapshot before F1, no response after the
    /// release and no probe before the slow callers still waiting are noted.
    fn reached(&mut self) {
        let file = self.file;
        let observed = &file.observed;
        // F1's step writes these in pairs, with nothing awaited in between: both, or neither.
        let f1_answered = (observed.responses.iter())
            .any(|r| r.request == Label::F1 && r.phase == Phase::BeforeRelease);
        let pairs: [[(&str, &[&str], bool); 2]; 3] = [
            [
                (
                    "observer_before_fast",
                    &["observer_before_fast"],
                    observed.observer_before_fast.is_some(),
                ),
                (
                    "resources.before_fast",
                    &["resources", "before_fast"],
                    file.resources.before_fast.is_some(),
                ),
            ],
            [
                (
                    "observer_after_fast_before_release",
                    &["observer_after_fast_before_release"],
                    observed.observer_after_fast_before_release.is_some(),
                ),
                (
                    "slow_callers_pending_before_release",
                    &["slow_callers_pending_before_release"],
                    observed.slow_callers_pending_before_release.is_some(),
                ),
            ],
            [
                (
                    "fast_response_before_release",
                    &["fast_response_before_release"],
                    observed.fast_response_before_release.is_some(),
                ),
                ("F1's response before release", &["responses"], f1_answered),
            ],
        ];
        for [one, other] in pairs {
            if one.2 != other.2 {
                let (there, missing) = if one.2 { (one, other) } else { (other, one) };
                self.find(
                    there.1,
                    format!(
                        "the report records {} but not {}: F1's step writes both at one moment",
                        there.0, missing.0
                    ),
                );
            }
        }
        let release = unreached(&file.observed, None);
        for (i, r) in file.observed.responses.iter().enumerate() {
            let after_release = release.filter(|_| r.phase == Phase::AfterRelease);
            let unreached = unreached(&file.observed, Some(r.request)).or(after_release);
            if let Some((step, missing)) = unreached {
                let request = r.request;
                self.find(&["responses", &i.to_string()], format!("{request} is answered, but the run stopped before {step}: it records no {missing}"));
            }
        }
        for (i, e) in file.work_events.iter().enumerate() {
            if let (Some(request), Some((step, missing))) =
                (e.request, unreached(&file.observed, e.request))
            {
                let (event, seq) = (e.event.name(), e.seq);
                self.find(&["work_events", &i.to_string()], format!("{request} is {event} at seq {seq}, but the run stopped before {step}: it records no {missing}"));
            }
        }
    }

    pub(super) fn run(&mut self) {
        let policy = self.policy;
        let file = self.file;
        let capacities = policy.capacities();
        if file.pool_capacities != capacities {
            self.find(
                &["pool_capacities"],
                format!(
                    "its pools hold {}, but {} with {} slots has {}",
                    counts(&file.pool_capacities),
                    policy.mode.name(),
                    policy.slots,
                    counts(&capacities)
                ),
            );
        }
        // The pools a run writes are its policy's: a count for any other is made up.
        let observed = &file.observed;
        let by_pool = |s: &'a Option<Snapshot>| s.as_ref().map(|s| &s.active_work);
        let maps = [
            (
                ["final_state", "active_work"].as_slice(),
                Some(&file.final_state.active_work),
            ),
            (
                &["final_state", "available_permits"],
                Some(&file.final_state.available_permits),
            ),
            (&["peak_active_work"], Some(&file.peak_active_work)),
            (
                &["observer_before_fast", "active_work"],
                by_pool(&observed.observer_before_fast),
            ),
            (
                &["observer_after_fast_before_release", "active_work"],
                by_pool(&observed.observer_after_fast_before_release),
            ),
        ];
        for (path, map) in maps {
            let mut pools = map.into_iter().flat_map(BTreeMap::keys);
            if let Some(other) = pools.find(|pool| !capacities.contains_key(pool)) {
                let mode = policy.mode.name();
                self.find(
                    path,
                    format!("it counts a {other} pool, which {mode} does not have"),
                );
            }
        }
        for route in [Route::Slow, Route::Fast] {
            let pool = policy.pool_for(route);
            if file.route_pools.get(&route) != Some(&pool) {
                self.find(
                    &["route_pools", route.path()],
                    format!(
                        "{route} draws from the {pool} pool in {}",
                        policy.mode.name()
                    ),
                );
            }
        }
        self.reached();
        if let Some(server) = &file.server {
            let address = server.address;
            if address.ip() != std::net::Ipv4Addr::LOCALHOST || address.port() == 0 {
                self.find(
                    &["server", "address"],
                    format!(
                        "the server listened on {address}, but the lab binds 127.0.0.1 only, on \
                         the port the OS gives it"
                    ),
                );
            }
            let handlers = file.resources.before_fast.map(|r| r.connection_handlers);
            if let Some(handlers) = handlers.filter(|&h| server.connections_accepted < h as u64) {
                self.find(
                    &["server", "connections_accepted"],
                    format!(
                        "the server accepted {}, fewer than the {} alive before F1",
                        plural(server.connections_accepted, "connection"),
                        plural(handlers, "connection handler")
                    ),
                );
            }
            // While F1 is sent, each slow caller still waiting keeps a connection of its own,
            // and F1's is another: the server accepts every one of them, at the latest once the
            // gate opens.
            let pending = file.observed.slow_callers_pending_before_release.as_ref();
            let f1_sent = file.observed.observer_after_fast_before_release.is_some();
            // (A run that failed may close before it accepts those it had not yet read.)
            let least = pending.filter(|_| f1_sent && !self.cut_short);
            let least = least.map(|p| p.len() as u64 + 1);
            if let Some(least) = least.filter(|&l| server.connections_accepted < l) {
                self.find(
                    &["server", "connections_accepted"],
                    format!(
                        "the server accepted {}, but {} still waiting, each on its own \
                         connection, when F1 was sent on another: at least {least}",
                        plural(server.connections_accepted, "connection"),
                        plural_was(least - 1, "slow caller")
                    ),
                );
            } else if let Some(least) = least.filter(|&l| {
                server.foreign_requests_refused > 0 && server.connections_accepted == l
            }) {
                // The lab's callers send the run's token on every request of their connections.
                self.find(
                    &["server", "foreign_requests_refused"],
                    format!(
                        "the server refused {} without the run's token, but it accepted only {}, \
                         as many as the lab's own callers had open when F1 was sent, and those \
                         send the token on every request: a foreign request comes on a \
                         connection of its own",
                        plural(server.foreign_requests_refused, "request"),
                        plural(least, "connection")
                    ),
                );
            }
            // A connection carries one request at a time: each request decided while others
            // are inside the section came on a connection of its own, the lab's client's (the
            // room's requests go out on it too), which sends the run's token on each.
            let said = least.filter(|&l| server.connections_accepted < l).is_some();
            if let Some((seq, at_once)) = at_once(&file.work_events) {
                let (accepted, lab) = (server.connections_accepted, at_once.len() as u64);
                if accepted < lab && !said {
                    self.find(
                        &["server", "connections_accepted"],
                        format!(
                            "the server accepted {}, but at seq {seq} {} are on connections at \
                             once: a connection carries one request at a time",
                            plural(accepted, "connection"),
                            labels(&at_once)
                        ),
                    );
                } else if accepted == lab
                    && server.foreign_requests_refused > 0
                    && least != Some(accepted)
                {
                    self.find(
                        &["server", "foreign_requests_refused"],
                        format!(
                            "the server refused {} without the run's token, but it accepted \
                             only {}, and at seq {seq} {} are on that many at once, the lab's \
                             client's, which sends the token on every request: a foreign request \
                             comes on a connection of its own",
                            plural(server.foreign_requests_refused, "request"),
                            plural(accepted, "connection"),
                            labels(&at_once)
                        ),
                    );
                }
            }
            let responses = file.observed.responses.len();
            if server.connections_accepted == 0 && responses > 0 {
                self.find(
                    &["server", "connections_accepted"],
                    format!(
                        "the server accepted no connection, yet {} came from it",
                        plural(responses, "response")
                    ),
                );
            }
        }

        self.resources();

        // The close joins every caller it started before the report is assembled.
        if !file.client_threads_stopped {
            self.find(
                &["client_threads_stopped"],
                "the report says some of the lab's callers were not joined, but the run's close \
                 joins every caller it started before the report is written"
                    .into(),
            );
        }
        // Tasks are aborted only when a run fails.
        let aborted = [
            (&["client_tasks_aborted"][..], file.client_tasks_aborted),
            (
                &["server", "connection_tasks_aborted"],
                file.server
                    .as_ref()
                    .map_or(0, |s| s.connection_tasks_aborted),
            ),
        ];
        for (path, count) in aborted {
            if count > 0 && self.report.failure.is_none() {
                self.find(
                    path,
                    format!("{} is {count}, yet the report records no failure: tasks are aborted only when a run fails", path.join("/")),
                );
            }
        }
        // A connection task serves one accepted connection.
        if let Some(server) = &file.server
            && server.connection_tasks_aborted > server.connections_accepted
        {
            self.find(
                &["server", "connection_tasks_aborted"],
                format!(
                    "{} aborted, but the server accepted {}, one task each",
                    plural_was(server.connection_tasks_aborted, "connection task"),
                    plural(server.connections_accepted, "connection")
                ),
            );
        }
        // The callers are the slow requests' (and F1's, where it waits for release); one that
        // was answered was joined, not aborted.
        let answered = |r: &Label| file.observed.responses.iter().any(|a| a.request == *r);
        let callers = self.report.inputs.held.get() as u64 + 1;
        let joined = (file.observed.responses.iter())
            .filter(|r| matches!(r.request, Label::Slow(_) | Label::F1))
            .count() as u64;
        let abortable = callers.saturating_sub(joined);
        // In a run cut short, the close aborts the callers still waiting, then joins them: those
        // sent with no answer but the one the failure names (it ended with its error), and at
        // most one more, sent in the step that failed before its request reached the ledger.
        // No caller is sent before the server is up.
        let failed = self.failed_caller();
        let waiting: Vec<Label> = (self.sent().into_iter())
            .filter(|r| !answered(r) && Some(*r) != failed)
            .collect();
        let still_waiting = match &file.server {
            None => 0,
            Some(_) => waiting.len() as u64 + u64::from(failed.is_none()),
        };
        let aborted = file.client_tasks_aborted;
        if aborted > abortable {
            self.find(
                &["client_tasks_aborted"],
                format!(
                    "client_tasks_aborted is {aborted}, but the run starts at most {callers} \
                     callers (each slow request's, and F1's where it waits for the release), and \
                     {joined} of them were answered: at most {abortable} could be aborted"
                ),
            );
        } else if self.cut_short && aborted > still_waiting {
            let why = match (&file.server, failed) {
                (None, _) => "its server never started, and no caller is sent before".to_owned(),
                (Some(_), Some(failed)) => format!(
                    "{} sent and never answered, besides {failed}, which ended with its error",
                    labels(&waiting)
                ),
                (Some(_), None) => format!(
                    "{} sent and never answered, and one more, sent in the step that failed",
                    labels(&waiting)
                ),
            };
            self.find(
                &["client_tasks_aborted"],
                format!(
                    "client_tasks_aborted is {aborted}, but the close aborts only the callers \
                     still waiting, at most {still_waiting}: {why}"
                ),
            );
        }

        let Some(replayed) = self.replay() else {
            return;
        };
        // The evidence, rebuilt from the file alone: the replayed events, each refusal with its
        // holders, and their audit, from the attempts the section counted.
        let attempts = file.ledger.iter().map(|(&p, l)| (p, l.attempts)).collect();
        let evidence = Evidence {
            ledger: audit::audit(&replayed.events, &attempts, &capacities),
            work_events: replayed.events.clone(),
            observed: file.observed.clone(),
            final_state: file.final_state.clone(),
            client_threads_stopped: file.client_threads_stopped,
            client_tasks_aborted: file.client_tasks_aborted,
            resources: file.resources,
            server: file.server.clone(),
        };
        self.admissions(&evidence);
        self.ledger(&evidence.ledger);
        self.responses(&replayed);
        self.snapshots(&replayed);
        self.counted_before_fast(&replayed);
        self.watched(&replayed);
        self.sent_in_order(&replayed);
        self.decided_in_one_poll(&replayed);
        self.final_state(&replayed.end, replayed.gate);

        // The model's check of that evidence.
        let held = self.report.inputs.held;
        // The model of the front and executor the report says ran: slow work that blocks its
        // thread leaves later requests unread until release (`model::expect_on`).
        let shape = (self.report.runner.front, self.report.executor);
        let expected = model::expect_on(policy, held, shape);
        self.differences = model::check(policy, &expected, &evidence);
        if file.model.expected != expected {
            self.find(
                &["model", "expected"],
                format!(
                    "the model block's expectations are not the policy model's for --slots {} \
                     --held {}",
                    policy.slots, held
                ),
            );
        }
        let stored = &file.model;
        let listed = !stored.mismatches.is_empty();
        let says = match (stored.matches, listed, self.differences.first()) {
            (true, true, _) => {
                "the model block says the run matched, and lists differences too".into()
            }
            (false, false, _) => {
                "the model block says the run did not match, but lists no difference".into()
            }
            (true, false, Some(first)) => {
                format!("the model block says the run matched, but its evidence does not: {first}")
            }
            (false, true, None) => {
                "the model block lists differences from the model, but its evidence shows none"
                    .into()
            }
            // The report lists exactly the model's check of its own evidence.
            _ if stored.mismatches != self.differences => {
                let says = format!(
                    "model.mismatches lists {} differences, but the model's check of this \
                     evidence finds {}: the report lists exactly those",
                    stored.mismatches.len(),
                    self.differences.len()
                );
                self.find(&["model", "mismatches"], says);
                return;
            }
            _ => return,
        };
        self.find(&["model", "matches"], says);
    }

    /// The final state must be where the ledger ends: its permits, and the gate.
    fn final_state(&mut self, at_end: &Snapshot, gate: Option<u64>) {
        let end = &self.file.final_state;
        let last = &at_end.active_work;
        for (pool, capacity) in self.policy.capacities() {
            let taken = last.get(&pool).copied().unwrap_or(0);
            let active = end.active_work.get(&pool).copied();
            let available = end.available_permits.get(&pool).copied();
            let returned = capacity.saturating_sub(taken);
            if active != Some(taken) {
                self.find(
                    &["final_state", "active_work"],
                    format!(
                        "final_state says {} of the {pool} pool's permits are taken, but its work events leave {taken}",
                        active.map_or("none".to_owned(), |a| a.to_string())
                    ),
                );
            }
            if available != Some(returned) {
                self.find(
                    &["final_state", "available_permits"],
                    format!(
                        "final_state says {} of the {pool} pool's {capacity} permits are back, but its work events return {returned}",
                        available.map_or("none".to_owned(), |a| a.to_string()),
                    ),
                );
            }
        }
        let says = match (end.gate, gate) {
            (GateState::Closed | GateState::Abandoned, Some(seq)) => {
                format!("final_state says the gate is not open, but it opened at seq {seq}")
            }
            (GateState::Open, None) => {
                "final_state says the gate is open, but the ledger has no gate_opened event".into()
            }
            _ => return,
        };
        self.find(&["final_state", "gate"], says);
    }
}

/// The most requests the ledger has on connections at once, and the seq where it first has
/// them: those inside the section (admitted, their work not yet left) and the one it is
/// deciding, each on its own connection.
fn at_once(events: &[WorkEvent]) -> Option<(u64, Vec<Label>)> {
    let mut inside: Vec<Label> = Vec::new();
    let mut most: Option<(u64, Vec<Label>)> = None;
    for e in events {
        let Some(request) = e.request else { continue };
        match e.event {
            Event::Admitted | Event::Refused => {
                let mut now = inside.clone();
                now.push(request);
                if most.as_ref().is_none_or(|(_, m)| now.len() > m.len()) {
                    most = Some((e.seq, now));
                }
                if e.event == Event::Admitted {
                    inside.push(request);
                }
            }
            Event::Finished => inside.retain(|&r| r != request),
            _ => {}
        }
    }
    most
}

#[cfg(test)]
mod tests {
    use super::GateIndex;

    /// The walk through every gate that the index replaces: a gate closed at `seq` (closed
    /// before it, opened at it or after, or never), and the gate met at `seq` that opened
    /// latest.
    fn walked(gates: &[(u64, Option<u64>)], seq: u64) -> (bool, Option<u64>) {
        let closed = (gates.iter()).any(|&(c, o)| c < seq && o.is_none_or(|o| seq <= o));
        let met = (gates.iter())
            .filter_map(|&(c, o)| Some((c, o?)))
            .filter(|&(c, o)| c < seq && seq <= o)
            .map(|(_, o)| o)
            .max();
        (closed, met)
    }

    /// Over every list of up to three gates on seqs 0 to 4 (overlapping, out of order, never
    /// opened), the index answers as the walk does, at every seq.
    #[test]
    fn the_index_of_room_gates_answers_as_a_walk_through_them() {
        let one: Vec<(u64, Option<u64>)> = (0..5)
            .flat_map(|c| (0..5).map(move |o| (c, Some(o))).chain([(c, None)]))
            .collect();
        let mut lists: Vec<Vec<(u64, Option<u64>)>> = vec![Vec::new()];
        for _ in 0..3 {
            let longer: Vec<_> = (lists.iter())
                .flat_map(|list| {
                    one.iter()
                        .map(move |&gate| [list.as_slice(), &[gate]].concat())
                })
                .collect();
            lists.extend(longer);
            lists.dedup();
        }
        for gates in &lists {
            let index = GateIndex::new(gates);
            for seq in 0..6 {
                let found = (index.closed_at(seq), index.met_at(seq).map(|(_, o)| o));
                assert_eq!(found, walked(gates, seq), "{gates:?} at {seq}");
            }
        }
    }
}
