//! The policy model: what every run must show, computed from the inputs alone, and the
//! comparison of a run's evidence with it (`docs/contract.md`, "The policy model").

use serde::{Deserialize, Serialize};

use crate::admission::gate::GateState;
use crate::admission::ledger::Event;
use crate::evidence::{Decision, Evidence, Moment, Phase};
use crate::executor::{Executor, Lane};
use crate::label::Label;
use crate::label::list as labels;
use crate::policy::{Front, Held, Policy, Pool, Route};

/// What the model expects for one request of the sequence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    /// The request.
    pub request: Label,
    /// Where it is sent.
    pub route: Route,
    /// The pool it draws from.
    pub pool: Pool,
    /// Whether it gets a permit.
    pub decision: Decision,
    /// The HTTP status its caller receives: 200 admitted, 503 refused.
    pub status: u16,
    /// When its caller receives it.
    pub answered: Phase,
    /// What its work waits for besides a permit, when the front's executor makes it wait
    /// (`docs/blocking.md`); absent when nothing does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits: Option<Wait>,
}

/// What a request waits for that no permit decides: the executor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wait {
    /// It sits unread until the gate opens: every worker that could read it is blocked by held
    /// slow work, so the executor, not a permit, keeps it out — admitted only after release.
    Unread,
    /// Admitted, its permit held, its work waits for a thread until the gate opens: every
    /// thread of its pool (the blocking pool, or the slow class's runtime) is held.
    Queued,
}

/// The model's expectations for one policy run on `front` with `executor`, in the order the
/// requests are sent: `S1..S<held>`, `F1`, `S-after`, `F-after`. The executor can make a
/// request wait where no permit would (`docs/blocking.md`, "The model").
///
/// - Work that awaits, and every request on the threaded front: each request is decided by
///   its pool alone, as the contract's policy model says.
/// - `block` on the async front with W workers: each admitted slow request blocks a worker.
///   Once W are blocked, every later request (slow or F1) sits unread until the gate opens,
///   then is admitted and answered 200: its pool has room by then, since a worker that runs
///   it has let its own held work go, and each of the other W − 1 holds at most one permit
///   of a pool that the W blocked requests fitted in. F1's fast permit idles meanwhile.
/// - `spawn-blocking` with K threads, `own-runtime` with W workers for slow work: admission is
///   as with `await`; admitted slow work beyond K (or W) is queued, its permit held.
pub(crate) fn expect_on(
    policy: Policy,
    held: Held,
    (front, executor): (Front, Executor),
) -> Vec<Expected> {
    let lane = executor.lane(front);
    let slow_pool = policy.pool_for(Route::Slow);
    let fast_pool = policy.pool_for(Route::Fast);
    let expected = |request: Label, admitted: bool, answered: Phase, waits| Expected {
        request,
        route: request.route(),
        pool: policy.pool_for(request.route()),
        decision: if admitted {
            Decision::Admitted
        } else {
            Decision::Refused
        },
        status: if admitted { 200 } else { 503 },
        answered,
        waits,
    };
    // Slow requests are sent one after another, so the first ones take every slow permit.
    let (mut admitted, mut blocked) = (0, 0);
    let mut all = Vec::new();
    let saturated = |blocked: usize| matches!(lane, Lane::Workers(w) if blocked >= w);
    for request in Label::held(held) {
        if saturated(blocked) {
            all.push(expected(
                request,
                true,
                Phase::AfterRelease,
                Some(Wait::Unread),
            ));
        } else if admitted < policy.capacity(slow_pool) {
            admitted += 1;
            let waits = match lane {
                Lane::Own(threads, _) if blocked >= threads => Some(Wait::Queued),
                _ => {
                    blocked += 1;
                    None
                }
            };
            all.push(expected(request, true, Phase::AfterRelease, waits));
        } else {
            all.push(expected(request, false, Phase::BeforeRelease, None));
        }
    }
    // F1 finds the admitted slow work in its pool only when the two routes share one.
    let taken_before_f1 = if fast_pool == slow_pool { admitted } else { 0 };
    let f1 = if saturated(blocked) {
        expected(Label::F1, true, Phase::AfterRelease, Some(Wait::Unread))
    } else {
        let f1_admitted = taken_before_f1 < policy.capacity(fast_pool);
        expected(Label::F1, f1_admitted, Phase::BeforeRelease, None)
    };
    all.extend([
        f1,
        expected(Label::SlowAfter, true, Phase::AfterRelease, None),
        expected(Label::FastAfter, true, Phase::AfterRelease, None),
    ]);
    all
}

/// The requests the executor makes wait `waits`, in sending order.
pub(crate) fn waiting(expected: &[Expected], waits: Wait) -> Vec<Label> {
    let waiting = expected.iter().filter(|e| e.waits == Some(waits));
    waiting.map(|e| e.request).collect()
}

/// The held slow requests (`S1..S<held>`) with `decision`, in order.
pub(crate) fn held_slow(expected: &[Expected], decision: Decision) -> Vec<Label> {
    expected
        .iter()
        .filter(|e| matches!(e.request, Label::Slow(_)) && e.decision == decision)
        .map(|e| e.request)
        .collect()
}

/// Every way the `evidence` of a `policy` run differs from `expected`, in words; empty when it
/// matches.
///
/// Requests from the room of a classroom session (`R<n>`) are the room's, not the sequence's:
/// the model neither expects nor counts them. What they did to the pools still shows — a permit
/// the room held is a permit the sequence did not find — and the ledger's invariants cover them.
pub(crate) fn check(policy: Policy, expected: &[Expected], evidence: &Evidence) -> Vec<String> {
    let mut differences = Vec::new();
    let mut differ = |text: String| differences.push(text);
    let observed = &evidence.observed;
    let mut admissions = evidence.admissions();
    admissions.retain(|a| !a.request.from_room());

    for e in expected {
        let decided = admissions.iter().find(|a| a.request == e.request);
        match decided {
            None => differ(format!("{}: no admission decision was recorded", e.request)),
            Some(a) if (a.decision, a.pool) != (e.decision, e.pool) => differ(format!(
                "{}: expected {} by the {} pool, observed {} by the {} pool",
                e.request,
                e.decision.name(),
                e.pool,
                a.decision.name(),
                a.pool
            )),
            Some(_) => {}
        }
        let answered = observed.responses.iter().find(|r| r.request == e.request);
        match answered {
            None => differ(format!("{}: no response was received", e.request)),
            Some(r) if (r.status, r.phase) != (e.status, e.answered) => differ(format!(
                "{}: expected HTTP {} {}, received HTTP {} {}",
                e.request,
                e.status,
                e.answered.words(),
                r.status,
                r.phase.words()
            )),
            Some(_) => {}
        }
    }
    for a in &admissions {
        if !expected.iter().any(|e| e.request == a.request) {
            differ(format!(
                "{}: an admission decision the sequence never asked for",
                a.request
            ));
        }
    }
    // Each request is sent once and never queued or replayed: a second decision or response
    // for it (a refusal admitted later, say) is a difference even when the first matched.
    let scripted = observed.responses.iter().filter(|r| !r.request.from_room());
    for r in scripted.clone() {
        if !expected.iter().any(|e| e.request == r.request) {
            differ(format!(
                "{}: a response to a request the sequence never sent",
                r.request
            ));
        }
    }
    for e in expected {
        let decisions = admissions.iter().filter(|a| a.request == e.request).count();
        if decisions > 1 {
            differ(format!(
                "{}: {decisions} admission decisions for a request sent once",
                e.request
            ));
        }
        let responses = scripted.clone().filter(|r| r.request == e.request).count();
        if responses > 1 {
            differ(format!(
                "{}: {responses} responses to a request sent once",
                e.request
            ));
        }
    }

    // Every admitted slow caller waits for release; only those the executor lets run are
    // held at the gate.
    let pending = held_slow(expected, Decision::Admitted);
    let held: Vec<Label> = pending
        .iter()
        .copied()
        .filter(|&r| expected.iter().any(|e| e.request == r && e.waits.is_none()))
        .collect();
    let refused = held_slow(expected, Decision::Refused);
    let f1_refused = expected
        .iter()
        .filter(|e| e.request == Label::F1 && e.decision == Decision::Refused)
        .map(|e| e.request);
    let refused_after_f1: Vec<Label> = refused.iter().copied().chain(f1_refused).collect();
    let snapshots = [
        (
            "observer_before_fast",
            &observed.observer_before_fast,
            &refused,
        ),
        (
            "observer_after_fast_before_release",
            &observed.observer_after_fast_before_release,
            &refused_after_f1,
        ),
    ];
    for (name, snapshot, refused) in snapshots {
        let scripted = |labels: &[Label]| -> Vec<Label> {
            labels.iter().copied().filter(|l| !l.from_room()).collect()
        };
        match snapshot {
            None => differ(format!("{name} was not recorded")),
            Some(s) if scripted(&s.held_at_gate) != held || &scripted(&s.refused) != refused => {
                differ(format!(
                    "{name}: expected held {} and refused {}, observed held {} and refused {}",
                    labels(&held),
                    labels(refused),
                    labels(&s.held_at_gate),
                    labels(&s.refused)
                ))
            }
            Some(_) => {}
        }
    }
    match &observed.slow_callers_pending_before_release {
        None => differ("slow_callers_pending_before_release was not recorded".into()),
        Some(observed) if *observed != pending => differ(format!(
            "slow callers pending before release: expected {}, observed {}",
            labels(&pending),
            labels(observed)
        )),
        Some(_) => {}
    }

    check_order(evidence, expected, &held, &mut differ);
    check_executor(policy, expected, evidence, &held, &mut differ);

    let end = &evidence.final_state;
    for (pool, capacity) in policy.capacities() {
        let (active, available) = (end.active_work.get(&pool), end.available_permits.get(&pool));
        if active != Some(&0) || available != Some(&capacity) {
            differ(format!(
                "final state of the {pool} pool: expected 0 active and {capacity} available, observed {} active and {} available",
                count(active),
                count(available)
            ));
        }
    }
    for (pool, ledger) in &evidence.ledger {
        for rule in ledger.broken() {
            differ(format!("ledger of the {pool} pool: {rule} does not hold"));
        }
    }
    if end.gate != GateState::Open {
        differ("final state: the slow gate is not open".into());
    }
    if !evidence.client_threads_stopped {
        differ("not every client task was joined".into());
    }
    match &evidence.server {
        Some(s) if s.listener_closed && s.connection_tasks_stopped => {}
        Some(_) => differ("the server did not close its listener and join its connections".into()),
        None => differ("no server summary: the server never started or its task failed".into()),
    }
    differences
}

/// The order of the ledger: one gate opening; F1, if admitted, in and out before it (after it,
/// when the executor left it unread); every held slow request out only after it.
fn check_order(
    evidence: &Evidence,
    expected: &[Expected],
    held: &[Label],
    differ: &mut impl FnMut(String),
) {
    let events = &evidence.work_events;
    let seq_of = |request: Option<Label>, event: Event| {
        events
            .iter()
            .find(|e| e.request == request && e.event == event)
            .map(|e| e.seq)
    };
    let openings = events
        .iter()
        .filter(|e| e.event == Event::GateOpened)
        .count();
    let Some(opened) = seq_of(None, Event::GateOpened).filter(|_| openings == 1) else {
        differ(format!("expected one gate_opened event, found {openings}"));
        return;
    };
    let unread = waiting(expected, Wait::Unread);
    if let Some(admitted) = seq_of(Some(Label::F1), Event::Admitted)
        && !unread.contains(&Label::F1)
    {
        match seq_of(Some(Label::F1), Event::Finished) {
            Some(finished) if admitted < opened && finished < opened => {}
            _ => differ("F1 was admitted but did not finish before the gate opened".into()),
        }
    }
    for &request in &unread {
        if seq_of(Some(request), Event::Admitted).is_none_or(|admitted| admitted <= opened) {
            differ(format!(
                "{request}: expected unread until the gate opened and admitted after it"
            ));
        }
    }
    for request in waiting(expected, Wait::Queued) {
        let admitted = seq_of(Some(request), Event::Admitted);
        let held_at = seq_of(Some(request), Event::Held);
        let started = seq_of(Some(request), Event::Started);
        let finished = seq_of(Some(request), Event::Finished);
        let queued = matches!((admitted, held_at, started, finished),
            (Some(a), None, Some(s), Some(f)) if a < opened && opened < s && s < f);
        if !queued {
            differ(format!(
                "{request}: expected admitted before the gate opened, never held, and started on \
                 a thread only after it"
            ));
        }
    }
    for &request in held {
        let held_at = seq_of(Some(request), Event::Held);
        let finished = seq_of(Some(request), Event::Finished);
        if !matches!((held_at, finished), (Some(h), Some(f)) if h < opened && opened < f) {
            differ(format!(
                "{request}: expected held before the gate opened and finished after it"
            ));
        }
    }
}

/// What the executor evidence must show when the executor makes requests wait: exactly the
/// expected requests seen unread and queued; the heartbeat still from the last slow request
/// held to the release when no worker was free; the permits the waiting work holds (queued) or
/// does not hold (unread) in every snapshot before release.
fn check_executor(
    policy: Policy,
    expected: &[Expected],
    evidence: &Evidence,
    held: &[Label],
    differ: &mut impl FnMut(String),
) {
    let (unread, queued) = (
        waiting(expected, Wait::Unread),
        waiting(expected, Wait::Queued),
    );
    let observed = &evidence.observed;
    let Some(watched) = &observed.executor else {
        // A run where the executor decides nothing may watch nothing (work that awaits).
        if !unread.is_empty() || !queued.is_empty() {
            differ("no executor evidence was recorded".into());
        }
        return;
    };
    let seen: Vec<Label> = watched.unread.iter().map(|u| u.request).collect();
    if seen != unread {
        differ(format!(
            "expected {} seen unread before release, observed {}",
            labels(&unread),
            labels(&seen)
        ));
    }
    if watched.queued != queued {
        differ(format!(
            "expected {} queued for a thread, observed {}",
            labels(&queued),
            labels(&watched.queued)
        ));
    }
    if !unread.is_empty() {
        // From the last slow request held to the release, no worker was free to tick.
        let ticks: Vec<u64> = watched.since_last_held().iter().map(|b| b.ticks).collect();
        let released = watched.heartbeat.last().map(|b| b.moment) == Some(Moment::Release);
        if ticks.is_empty() || !released || ticks.iter().any(|&t| t != ticks[0]) {
            differ(format!(
                "expected the heartbeat still from the last slow request held to the release, \
                 observed ticks {}",
                ticks
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
    }
    let slow_pool = policy.pool_for(Route::Slow);
    let expected_active = held.len() + queued.len();
    let snapshots = [
        &observed.observer_before_fast,
        &observed.observer_after_fast_before_release,
    ];
    for snapshot in snapshots.into_iter().flatten() {
        let active = snapshot.active_work.get(&slow_pool).copied().unwrap_or(0);
        let fast = policy.pool_for(Route::Fast);
        let fast_active = snapshot.active_work.get(&fast).copied().unwrap_or(0);
        let f1_idle = fast == slow_pool || fast_active == 0;
        if active != expected_active || (unread.contains(&Label::F1) && !f1_idle) {
            differ(format!(
                "a snapshot before release: expected {} taken and F1's permit idle, observed {}",
                match expected_active {
                    1 => format!("1 {slow_pool} permit"),
                    n => format!("{n} {slow_pool} permits"),
                },
                snapshot
                    .active_work
                    .iter()
                    .map(|(pool, n)| format!("{n} {pool}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
}

/// A count from the evidence, or `none` where it has none.
fn count(value: Option<&usize>) -> String {
    value.map_or_else(|| "none".into(), usize::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Mode, Slots};

    /// The model's expectations when work awaits, on the async front.
    fn expect(policy: Policy, held: Held) -> Vec<Expected> {
        expect_on(policy, held, (Front::Async, Executor::default()))
    }

    fn outcomes(mode: Mode, slots: u8, held: u8) -> (Vec<Label>, Vec<Label>, u16) {
        let slots = Slots::new(slots).expect("test slots are in range");
        let held = Held::new(held).expect("test held counts are in range");
        let expected = expect(Policy { mode, slots }, held);
        let f1 = expected
            .iter()
            .find(|e| e.request == Label::F1)
            .map(|e| e.status);
        (
            held_slow(&expected, Decision::Admitted),
            held_slow(&expected, Decision::Refused),
            f1.expect("the model has F1"),
        )
    }

    use Label::Slow as S;

    /// The evidence of a policy of a recorded report, as the model first checked it.
    fn recorded(report: usize, policy: usize) -> (Policy, Held, Evidence) {
        let reports = crate::lab::fixtures::reports();
        let report = &reports[report];
        let p = &report.policies[policy];
        let policy = report.inputs.policy(p.mode);
        let evidence = Evidence {
            work_events: p.work_events.clone(),
            ledger: p.ledger.clone(),
            observed: p.observed.clone(),
            final_state: p.final_state.clone(),
            client_threads_stopped: p.client_threads_stopped,
            client_tasks_aborted: p.client_tasks_aborted,
            resources: p.resources,
            server: p.server.clone(),
        };
        (policy, report.inputs.held, evidence)
    }

    fn differences(policy: Policy, held: Held, evidence: &Evidence) -> Vec<String> {
        check(policy, &expect(policy, held), evidence)
    }

    /// A refused request is never queued or replayed: the default run's partitioned S2, refused
    /// and then admitted once the gate opened (its ledger still balanced, its first decision
    /// and response still as the model expects), does not match the model.
    #[test]
    fn a_replayed_refusal_does_not_match() {
        let (policy, held, mut evidence) = recorded(1, 1);
        assert_eq!(differences(policy, held, &evidence), Vec::<String>::new());
        let last = evidence.work_events.last().map_or(0, |e| e.seq);
        for (seq, event, active_after) in [(1, Event::Admitted, 1), (2, Event::Finished, 0)] {
            evidence
                .work_events
                .push(crate::admission::ledger::WorkEvent {
                    seq: last + seq,
                    request: Some(S(2)),
                    pool: Pool::Slow,
                    event,
                    active_after,
                    cancelled: false,
                    held_by: Vec::new(),
                });
        }
        let mut attempts: std::collections::BTreeMap<Pool, u64> = evidence
            .ledger
            .iter()
            .map(|(&p, l)| (p, l.attempts))
            .collect();
        *attempts.entry(Pool::Slow).or_default() += 1;
        evidence.ledger =
            crate::admission::audit::audit(&evidence.work_events, &attempts, &policy.capacities());
        let mut replayed = evidence.observed.responses[0].clone();
        assert_eq!((replayed.request, replayed.status), (S(2), 503));
        (replayed.status, replayed.phase, replayed.after_event) =
            (200, Phase::AfterRelease, last + 2);
        evidence.observed.responses.push(replayed);
        let found = differences(policy, held, &evidence);
        assert!(
            found.iter().any(|d| d.starts_with("S2: ")),
            "the replay of S2 is a difference: {found:?}"
        );
    }

    /// A response to a request the sequence never sent does not match the model.
    #[test]
    fn a_response_nobody_asked_for_does_not_match() {
        let (policy, held, mut evidence) = recorded(1, 0);
        let mut stray = evidence.observed.responses[0].clone();
        stray.request = S(3);
        evidence.observed.responses.push(stray);
        let found = differences(policy, held, &evidence);
        assert!(
            found.iter().any(|d| d.starts_with("S3: ")),
            "the response to S3 is a difference: {found:?}"
        );
    }

    /// The executor rule (`docs/blocking.md`): what waits, and for what, per style and shape.
    #[test]
    fn the_executor_decides_what_waits() {
        use crate::executor::{BlockingThreads, Executor, WorkStyle, Workers};
        let shape = |front, work, workers, blocking| {
            let blocking = BlockingThreads::new(blocking).expect("allowed");
            (front, Executor::new(work, workers, blocking))
        };
        let waits = |mode, slots, held, shape| {
            let slots = Slots::new(slots).expect("allowed");
            let held = Held::new(held).expect("allowed");
            let expected = expect_on(Policy { mode, slots }, held, shape);
            (
                waiting(&expected, Wait::Unread),
                waiting(&expected, Wait::Queued),
            )
        };
        let one = shape(Front::Async, WorkStyle::Block, Workers::CurrentThread, 512);
        assert_eq!(
            waits(Mode::Partitioned, 2, 2, one),
            (vec![S(2), Label::F1], vec![])
        );
        assert_eq!(waits(Mode::Shared, 2, 1, one), (vec![Label::F1], vec![]));
        let two = shape(Front::Async, WorkStyle::Block, Workers::Threads(2), 512);
        assert_eq!(
            waits(Mode::Partitioned, 3, 2, two),
            (vec![Label::F1], vec![])
        );
        // A slow pool of one blocks one of two workers: the other reads F1 (and refuses S2).
        assert_eq!(waits(Mode::Partitioned, 2, 2, two), (vec![], vec![]));
        let pool = shape(
            Front::Async,
            WorkStyle::SpawnBlocking,
            Workers::CurrentThread,
            1,
        );
        assert_eq!(
            waits(Mode::Partitioned, 4, 3, pool),
            (vec![], vec![S(2), S(3)])
        );
        let own = shape(
            Front::Async,
            WorkStyle::OwnRuntime,
            Workers::CurrentThread,
            512,
        );
        assert_eq!(
            waits(Mode::Shared, 4, 4, own),
            (vec![], vec![S(2), S(3), S(4)])
        );
        // The threaded front blocks a thread of its own per request: nothing waits.
        let threaded = shape(
            Front::Threaded,
            WorkStyle::Block,
            Workers::CurrentThread,
            512,
        );
        assert_eq!(waits(Mode::Partitioned, 2, 2, threaded), (vec![], vec![]));
        for mode in Mode::ALL {
            for slots in Slots::all() {
                for held in Held::all() {
                    let policy = Policy { mode, slots };
                    let usual = expect(policy, held);
                    assert_eq!(expect_on(policy, held, threaded), usual);
                    // Whatever waited for the executor is answered 200 after release.
                    for shape in [one, two, pool, own] {
                        for e in expect_on(policy, held, shape) {
                            if e.waits.is_some() {
                                assert_eq!((e.status, e.answered), (200, Phase::AfterRelease));
                            }
                        }
                    }
                }
            }
        }
    }

    /// The runs the handout asks students to predict (`docs/handout.md`, answered in
    /// `docs/answers.md`): the default, more slots, less and more held.
    #[test]
    fn the_handout_examples() {
        assert_eq!(
            outcomes(Mode::Shared, 2, 2),
            (vec![S(1), S(2)], vec![], 503)
        );
        assert_eq!(
            outcomes(Mode::Partitioned, 2, 2),
            (vec![S(1)], vec![S(2)], 200)
        );
        assert_eq!(
            outcomes(Mode::Shared, 3, 2),
            (vec![S(1), S(2)], vec![], 200)
        );
        assert_eq!(outcomes(Mode::Shared, 2, 1), (vec![S(1)], vec![], 200));
        assert_eq!(outcomes(Mode::Partitioned, 2, 1), (vec![S(1)], vec![], 200));
        assert_eq!(
            outcomes(Mode::Shared, 2, 4),
            (vec![S(1), S(2)], vec![S(3), S(4)], 503)
        );
        assert_eq!(
            outcomes(Mode::Partitioned, 2, 4),
            (vec![S(1)], vec![S(2), S(3), S(4)], 200)
        );
    }

    /// The policy model (`docs/contract.md`) for every input: admitted = min(held, slow
    /// capacity); shared F1 gets in only when held < slots; partitioned F1 always; the probes
    /// after release always.
    #[test]
    fn the_policy_model_for_every_input() {
        for mode in Mode::ALL {
            for slots in Slots::all() {
                for held in Held::all() {
                    let policy = Policy { mode, slots };
                    let expected = expect(policy, held);
                    let cap_slow = policy.capacity(policy.pool_for(Route::Slow));
                    let admitted = held.get().min(cap_slow);
                    assert_eq!(held_slow(&expected, Decision::Admitted).len(), admitted);
                    assert_eq!(
                        held_slow(&expected, Decision::Refused).len(),
                        held.get() - admitted
                    );
                    let f1 = &expected[held.get()];
                    let f1_in = mode == Mode::Partitioned || held.get() < slots.get();
                    assert_eq!(f1.request, Label::F1);
                    assert_eq!(f1.status, if f1_in { 200 } else { 503 });
                    let probes: Vec<_> = expected[held.get() + 1..]
                        .iter()
                        .map(|e| (e.request, e.status))
                        .collect();
                    assert_eq!(probes, [(Label::SlowAfter, 200), (Label::FastAfter, 200)]);
                }
            }
        }
    }
}
