//! The replay of a policy's ledger: each event's order, request, pool, place in its request's life
//! and count of taken permits, with the observer's snapshots watched for along the way, and the
//! room's gates a room request met.

use std::collections::{BTreeMap, BTreeSet};

use crate::admission::gate::GateState;
use crate::admission::ledger::{Event, Snapshot, WorkEvent};
use crate::draw::table::{labels, plural};
use crate::evidence::{Decision, Moment, Phase};
use crate::executor::{Lane, LaneThreads};
use crate::label::Label;
use crate::policy::{Front, Pool, Route};

use super::{Decided, PolicyCheck, Replayed, Watch};

impl<'a> PolicyCheck<'a> {
    /// Replays the ledger: checks each event's order, request, pool, place in its request's
    /// life and count of taken permits, and watches for the observer's snapshots along the way.
    /// `None` once a pool admits beyond its capacity: nothing after that can be replayed.
    pub(super) fn replay(&mut self) -> Option<Replayed<'a>> {
        let policy = self.policy;
        let slow_pool = policy.pool_for(Route::Slow);
        let mut events = self.file.work_events.clone();
        // The ledger's state after the events so far, in the observer's terms.
        let mut state = Snapshot {
            active_work: policy.per_pool(|_| 0),
            held_at_gate: Vec::new(),
            refused: Vec::new(),
        };
        let mut watch = self.watches(&events);
        for w in &mut watch {
            w.look(0, &state);
        }
        let mut holders: BTreeMap<Pool, Vec<Label>> = BTreeMap::new();
        let mut decided: BTreeMap<Label, Decided> = BTreeMap::new();
        let mut inside = BTreeSet::new();
        // Work a thread of the slow work's own pool began to run, where the executor hands it to
        // one (`--work spawn-blocking` or `own-runtime`): it reaches the gate only then.
        let lane = self.report.executor.lane(self.report.runner.front);
        let handed = matches!(lane, Lane::Own(..));
        // Whether held work blocks the thread that reads its request: the threaded front's, or
        // a worker's with `--work block`.
        let blocking =
            self.report.runner.front == Front::Threaded || matches!(lane, Lane::Workers(_));
        // Which routes' work is handed to one: `own-runtime` (its slow runtime) hands both
        // routes, `spawn-blocking` (the blocking pool) the slow one.
        let hands = |route: Option<Route>| match lane {
            Lane::Own(_, LaneThreads::SlowRuntime) => true,
            Lane::Own(_, LaneThreads::BlockingPool) => route == Some(Route::Slow),
            _ => false,
        };
        // One thread for the slow work, handed it in the order of admission (by the one thread
        // that runs the connections): it takes queued work first in, first out.
        let fifo = matches!(lane, Lane::Own(1, LaneThreads::SlowRuntime))
            || (matches!(lane, Lane::Own(1, LaneThreads::BlockingPool))
                && self.report.executor.workers().threads() == 1);
        let mut started = BTreeSet::new();
        // Slow work started: until the gate opens, each keeps its thread blocked at it, even
        // once its work was cancelled.
        let mut running: Vec<Label> = Vec::new();
        // A gate that never opened and was abandoned at the close (a run that failed for it)
        // freed its threads without a `gate_opened` event.
        let abandoned = self.file.final_state.gate == GateState::Abandoned;
        let mut finished = BTreeMap::new();
        // Where each request was held at a gate.
        let mut held_at = BTreeMap::new();
        let mut gate: Option<u64> = None;
        let mut order_broken = false;
        let file = self.file;
        for (i, e) in events.iter_mut().enumerate() {
            let at = i.to_string();
            let path = ["work_events", at.as_str()];
            let seq = e.seq;
            let want = i as u64 + 1;
            if seq != want && !order_broken {
                order_broken = true;
                let says = match i {
                    _ if seq > want
                        && file.work_events[i..].iter().any(|later| later.seq == want) =>
                    {
                        format!("work_events are out of order: seq {seq} comes before seq {want}")
                    }
                    0 => format!(
                        "work_events start at seq {seq}; the ledger numbers its events from 1"
                    ),
                    _ if seq < want => format!(
                        "work_events are out of order: seq {seq} comes after seq {}",
                        want - 1
                    ),
                    _ => format!(
                        "work_events skip from seq {} to seq {seq}: the ledger numbers every \
                         event, with no gap",
                        want - 1
                    ),
                };
                self.find(&path, says);
            }
            let event = e.event.name();
            match (e.event, e.request) {
                (Event::GateOpened, None) => {
                    if e.pool != slow_pool {
                        self.find(
                            &path,
                            format!("the gate opens on the {} pool, but it holds the {slow_pool} pool's work", e.pool),
                        );
                    }
                    if let Some(first) = gate {
                        self.find(
                            &path,
                            format!("the gate opens again at seq {seq}, after it opened at seq {first}: it never closes"),
                        );
                    }
                    if e.cancelled {
                        self.find(
                            &path,
                            "the gate's opening says work was cancelled; only work that leaves is"
                                .to_owned(),
                        );
                    }
                    gate.get_or_insert(seq);
                }
                (Event::GateOpened, Some(request)) => {
                    self.find(
                        &path,
                        format!(
                            "a gate_opened event names {request}; the gate opens for no request"
                        ),
                    );
                }
                (_, None) => self.find(&path, format!("a {event} event names no request")),
                (_, Some(request)) => {
                    let route = self.route(request);
                    match route {
                        None if self.room.is_some() => self.find(
                            &path,
                            format!("the ledger names {request}, but the room's requests list no {request}"),
                        ),
                        None => self.find(
                            &path,
                            format!("the ledger names {request}, a request from a classroom's room, in the report of a command-line run"),
                        ),
                        Some(route) if policy.pool_for(route) != e.pool => self.find(
                            &path,
                            format!(
                                "{request}'s {event} event is on the {} pool, but {route} draws from the {} pool",
                                e.pool,
                                policy.pool_for(route)
                            ),
                        ),
                        Some(_) => {}
                    }
                    if e.cancelled && e.event != Event::Finished {
                        self.find(&path, format!("{request}'s {event} event says its work was cancelled; only work that leaves is"));
                    }
                    let before = decided.get(&request).copied();
                    match e.event {
                        Event::Admitted | Event::Refused => {
                            if let Some(first) = before {
                                self.find(
                                    &path,
                                    format!(
                                        "{request} is {event} at seq {seq} after it was already {} at seq {}: a request is decided once, and a refusal is never queued or replayed",
                                        first.decision.name(),
                                        first.seq
                                    ),
                                );
                            } else {
                                let decision = match e.event {
                                    Event::Admitted => Decision::Admitted,
                                    _ => Decision::Refused,
                                };
                                let index = i;
                                decided.insert(
                                    request,
                                    Decided {
                                        seq,
                                        index,
                                        decision,
                                    },
                                );
                            }
                            // With --work block a worker decides a request and runs its work
                            // to its end in one call, blocked: each request inside holds one.
                            if let Lane::Workers(workers) = lane
                                && inside.len() >= workers
                            {
                                let running: Vec<Label> = inside.iter().copied().collect();
                                let taken = busy(workers, &running, "the front's", "worker");
                                self.find(&path, format!("{request} is {event} at seq {seq}, but {taken}: with --work block a worker runs each admitted request's work to its end, blocked, and reads no other request meanwhile"));
                            }
                            if e.event == Event::Admitted {
                                inside.insert(request);
                                holders.entry(e.pool).or_default().push(request);
                                let active = state.active_work.entry(e.pool).or_default();
                                *active += 1;
                                let capacity = policy.capacity(e.pool);
                                if *active > capacity {
                                    // Nothing after this can be replayed as the section would
                                    // have run it; stopping here also keeps the replay's lists
                                    // as short as the pools.
                                    self.find(
                                        &path,
                                        format!(
                                            "{request} is admitted at seq {seq} with every one of the {} pool's {capacity} permits already taken: a pool never admits beyond its capacity",
                                            e.pool
                                        ),
                                    );
                                    return None;
                                }
                            } else {
                                // Decided under the ledger's lock, as the semaphore's own
                                // try-acquire: refused only when no permit is free.
                                let taken = state.active_work.get(&e.pool).copied().unwrap_or(0);
                                let capacity = policy.capacity(e.pool);
                                if taken < capacity {
                                    self.find(
                                        &path,
                                        format!(
                                            "{request} is refused at seq {seq} with {taken} of the {} pool's {capacity} permits taken: a request is refused only when no permit is free",
                                            e.pool
                                        ),
                                    );
                                }
                                e.held_by = holders.get(&e.pool).cloned().unwrap_or_default();
                                state.refused.push(request);
                            }
                        }
                        Event::Started => {
                            // Admitted work that a thread of another pool or runtime began to
                            // run (`--work spawn-blocking` or `own-runtime`): it must be inside.
                            let work = self.report.executor.work.name();
                            if !handed {
                                self.find(&path, format!("{request} is started at seq {seq} by a thread of another pool or runtime, but with --work {work} no work is handed to one"));
                            } else if !hands(route) {
                                self.find(&path, format!("{request} is started at seq {seq}, but with --work {work} only /slow work is handed to another thread: /fast work runs on its connection's task"));
                            } else if started.contains(&request) {
                                self.find(&path, format!("{request} is started at seq {seq} a second time: a thread runs a request's work once"));
                            } else if let Lane::Own(threads, _) = lane
                                && route == Some(Route::Slow)
                                && let blocked =
                                    self.blocked(seq, (gate, abandoned), &running, &held_at)
                                && blocked.len() >= threads
                            {
                                let taken = busy(threads, &blocked, "the slow work's", "thread");
                                let (when, at) = match gate {
                                    None => (", before the gate opened", "the closed gate"),
                                    Some(_) => ("", "a closed room gate"),
                                };
                                let each = if blocked.len() == 1 { "" } else { "each " };
                                self.find(&path, format!("{request} is started at seq {seq}{when}, but {taken}, {each}blocked at {at}: none is free"));
                            } else if !inside.contains(&request) {
                                self.find(&path, format!("{request} is started at seq {seq}, but it is not inside the work section: no admission before it"));
                            }
                            if route == Some(Route::Slow)
                                && fifo
                                && let Some(at) = decided.get(&request).map(|d| d.seq)
                            {
                                // The first still waiting its turn: admitted before it,
                                // neither started nor left.
                                let waiting = decided.iter().filter(|&(r, d)| {
                                    d.decision == Decision::Admitted
                                        && d.seq < at
                                        && self.route(*r) == Some(Route::Slow)
                                        && !started.contains(r)
                                        && !finished.contains_key(r)
                                });
                                let skipped = waiting.min_by_key(|(_, d)| d.seq);
                                if let Some((skipped, d)) = skipped {
                                    self.find(&path, format!("{request} is started at seq {seq}, but {skipped}, admitted before it (seq {}), had neither started nor left: the slow work's one thread takes queued work first in, first out", d.seq));
                                }
                            }
                            started.insert(request);
                            if route == Some(Route::Slow) {
                                running.push(request);
                            }
                        }
                        Event::Held => {
                            if state.held_at_gate.contains(&request) {
                                self.find(&path, format!("{request} is held at seq {seq} a second time: it reached the gate already and has not left it"));
                            } else if handed && !started.contains(&request) {
                                let work = self.report.executor.work.name();
                                self.find(&path, format!("{request} is held at seq {seq}, but with --work {work} its work reaches the gate only once a thread starts it, and no started event came before"));
                            } else if !inside.contains(&request) {
                                self.find(&path, format!("{request} is held at seq {seq}, but it is not inside the work section: no admission before it"));
                            } else if route == Some(Route::Fast) {
                                self.find(&path, format!("{request} is held at the gate, but only /slow work waits there"));
                            } else if let Some(opened) = gate
                                && !self.room_gate_closed(request, seq)
                            {
                                self.find(
                                    &path,
                                    format!("{request} is held at seq {seq}, after the gate opened at seq {opened}: once open, it never closes"),
                                );
                            }
                            if inside.contains(&request) && !state.held_at_gate.contains(&request) {
                                state.held_at_gate.push(request);
                            }
                            held_at.entry(request).or_insert(seq);
                        }
                        Event::Finished => {
                            // Work handed to another thread runs, and so leaves, once started
                            // (unless it is cancelled before).
                            if hands(route)
                                && inside.contains(&request)
                                && !e.cancelled
                                && !started.contains(&request)
                            {
                                let work = self.report.executor.work.name();
                                self.find(&path, format!("{request} finishes at seq {seq}, not cancelled, but with --work {work} its work runs only once a thread starts it, and no started event came before"));
                            }
                            // Held work blocking its thread cannot be cancelled there:
                            // nothing polls or wakes it until the gate opens.
                            if blocking
                                && e.cancelled
                                && gate.is_none()
                                && !abandoned
                                && state.held_at_gate.contains(&request)
                            {
                                self.find(&path, format!("{request} finishes at seq {seq}, before the gate opened, but it was held blocking its thread, which nothing wakes until the gate opens"));
                            }
                            // Until the gate opens, /slow work can only wait at it, or be
                            // cancelled there.
                            if route == Some(Route::Slow)
                                && gate.is_none()
                                && !e.cancelled
                                && inside.contains(&request)
                            {
                                self.find(&path, format!("{request} finishes at seq {seq}, not cancelled, before the gate opened: /slow work waits at the closed gate until it opens"));
                            }
                            let held = held_at.get(&request).copied();
                            if route == Some(Route::Slow) && !e.cancelled {
                                let met = [decided.get(&request).map(|d| d.seq), held];
                                if let Some((closed, opened)) = self.room_gate_met(request, met)
                                    && seq <= opened
                                {
                                    self.find(&path, format!("{request} finishes at seq {seq}, not cancelled, but it met the room's gate that closed after event {closed} and opened only after event {opened}: the room's /slow work waits there until it opens"));
                                }
                            }
                            // Room gates are opened, never abandoned: a thread blocked at one
                            // leaves as it opens, its work done.
                            if blocking
                                && e.cancelled
                                && let Some((closed, opened)) =
                                    self.room_gate_met(request, [None, held])
                            {
                                self.find(&path, format!("{request} finishes at seq {seq}, cancelled, but it was held blocking its thread at the room's gate that closed after event {closed} and opened after event {opened}: nothing wakes that thread until the gate opens, and then its work is done"));
                            }
                            if inside.remove(&request) {
                                finished.insert(request, (seq, e.cancelled));
                                if let Some(h) = holders.get_mut(&e.pool) {
                                    h.retain(|&r| r != request);
                                }
                                state.held_at_gate.retain(|&r| r != request);
                                let active = state.active_work.entry(e.pool).or_default();
                                *active = active.saturating_sub(1);
                            } else if finished.contains_key(&request) {
                                self.find(
                                    &path,
                                    format!(
                                        "{request} finishes twice: its permit would go back twice"
                                    ),
                                );
                            } else {
                                self.find(&path, format!("{request} finishes at seq {seq}, but was never admitted: a finished without an admitted"));
                            }
                        }
                        Event::GateOpened => {}
                    }
                }
            }
            let taken = state.active_work.get(&e.pool).copied().unwrap_or(0);
            if e.active_after != taken {
                let who = e.request.map_or("the gate".to_owned(), |r| r.to_string());
                self.find(
                    &path,
                    format!(
                        "seq {seq} says {} of the {} pool's permits are taken after {who} {event}, but the events before it leave {taken}",
                        e.active_after, e.pool
                    ),
                );
            }
            for w in &mut watch {
                w.look(i + 1, &state);
            }
        }
        Some(Replayed {
            events,
            decided,
            finished,
            gate,
            end: state,
            watch,
        })
    }

    /// Where the observer's snapshots must show the ledger's state: before F1 once every held
    /// slow request was decided, and after F1's answer before the gate opened. Positions count
    /// events: `k` is the state after the first `k`.
    pub(super) fn watches(&self, events: &[WorkEvent]) -> Vec<Watch<'a>> {
        let observed = &self.file.observed;
        let is_f1 = |e: &WorkEvent| e.request == Some(Label::F1);
        let opened = events.iter().position(|e| e.event == Event::GateOpened);
        let opened = opened.unwrap_or(events.len());
        // F1 is sent before the gate opens, even where it is first decided after (left unread
        // while slow work blocks the front's workers): its snapshot is taken before both.
        let (first_f1, f1_or_gate) = match events.iter().position(is_f1) {
            Some(first) if first < opened => (first, "F1's decision"),
            _ => (opened, "the gate's opening"),
        };
        let held_sent = events[..first_f1]
            .iter()
            .rposition(|e| matches!(e.request, Some(Label::Slow(_))))
            .map_or(0, |i| i + 1);
        // After F1's last event before the gate opened; an F1 left unread until release (slow
        // work blocking the front's workers) has none, and the window starts where the held
        // requests' ends.
        let after_f1 = events[..opened]
            .iter()
            .rposition(is_f1)
            .map_or(held_sent, |i| i + 1);
        // And after the evidence the sequence took before it: the responses it waited for and
        // the heartbeat's readings, each placed by the ledger's last seq then (a position: the
        // ledger numbers its events from 1, with no gap). In a classroom the room's requests
        // may move the ledger on in between.
        let taken_before = |of: fn(Label) -> bool| {
            let answers = (observed.responses.iter())
                .filter(|r| r.phase == Phase::BeforeRelease && of(r.request))
                .map(|r| r.after_event);
            let beats = observed.executor.iter().flat_map(|w| w.heartbeat.iter());
            let beats = beats
                .filter(|b| b.moment != Moment::Release && b.request.is_none_or(of))
                .map(|b| b.after_event);
            let latest = answers.chain(beats).max().unwrap_or(0);
            usize::try_from(latest).unwrap_or(usize::MAX)
        };
        let before_f1 = taken_before(|r| matches!(r, Label::Slow(_)));
        let with_f1 = taken_before(|r| matches!(r, Label::Slow(_) | Label::F1));
        let windows = [
            (
                "observer_before_fast",
                &observed.observer_before_fast,
                held_sent.max(before_f1),
                first_f1,
                f1_or_gate,
                "just before F1",
            ),
            (
                "observer_after_fast_before_release",
                &observed.observer_after_fast_before_release,
                after_f1.max(with_f1),
                opened,
                "the gate's opening",
                "just before the gate opened",
            ),
        ];
        windows
            .into_iter()
            .filter_map(|(name, snapshot, from, to, ends, when)| {
                Some(Watch {
                    name,
                    ends,
                    when,
                    snapshot: snapshot.as_ref()?,
                    from,
                    to: to.max(from),
                    seen: false,
                    refused: None,
                    last: None,
                    since: Vec::new(),
                })
            })
            .collect()
    }

    /// Whether a room gate of this run was closed at `seq`, for a request of the room's (the
    /// lab's own meet none): a room request may wait there after the run's own gate opened.
    pub(super) fn room_gate_closed(&self, request: Label, seq: u64) -> bool {
        request.from_room() && self.room_gates.closed_at(seq)
    }

    /// The room's gate of this run that a room request met, closed, at one of the seqs `met`
    /// (its admission, its `held`), the last to open of those it met: as
    /// `(closed_after_event, opened_after_event)`. Admitted after a gate closed, the request
    /// picks it, or a later one (its front picks a gate after admitting); held after it closed,
    /// it waited there. Either way its work goes on only once that gate opens, which reads the
    /// ledger's last seq before it wakes anyone. (A gate that never opened is named apart: the
    /// session opens every room gate as it closes the run.)
    pub(super) fn room_gate_met(
        &self,
        request: Label,
        met: [Option<u64>; 2],
    ) -> Option<(u64, u64)> {
        let met = met.into_iter().flatten().filter(|_| request.from_room());
        met.filter_map(|seq| self.room_gates.met_at(seq))
            .max_by_key(|&(_, opened)| opened)
    }

    /// Of the slow work `running` on threads of its own, that still blocked at a closed gate at
    /// `seq`: all of it before the run's gate opens (unless the run abandoned it); after, the
    /// work held (`held_at`) at a room gate that opens only after `seq`, even if it has left
    /// (its student gone): a wait blocked at a gate stays blocked until the gate opens.
    fn blocked(
        &self,
        seq: u64,
        (gate, abandoned): (Option<u64>, bool),
        running: &[Label],
        held_at: &BTreeMap<Label, u64>,
    ) -> Vec<Label> {
        if gate.is_none() {
            return if abandoned {
                Vec::new()
            } else {
                running.to_vec()
            };
        }
        let at_a_room_gate = |request: &Label| {
            let held = held_at.get(request).copied();
            held.is_some()
                && (self.room_gate_met(*request, [None, held]))
                    .is_some_and(|(_, opened)| opened >= seq)
        };
        running.iter().copied().filter(at_a_room_gate).collect()
    }
}

/// That `threads` of `whose` (`"the front's"`) are already running `running`, in words:
/// "the front's one worker is already running S1".
fn busy(threads: usize, running: &[Label], whose: &str, noun: &str) -> String {
    let names = labels(running);
    match (threads, running.len()) {
        (1, 1) => format!("{whose} one {noun} is already running {names}"),
        (2, 2) => format!("both of {whose} {noun}s are already running {names}"),
        (t, n) if t == n => format!("all {t} of {whose} {noun}s are already running {names}"),
        (t, _) => format!("{names} already run on {whose} {}", plural(t, noun)),
    }
}
