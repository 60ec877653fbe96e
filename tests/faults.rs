//! Every injected fault ends the run cleanly, on both server fronts: `failure` set with a
//! one-line reason, within the contract's 15 s, with the listener closed, every task or thread
//! joined (or aborted, then joined) and accounted for, and every permit back in its pool.
//! Every case of every fault runs at once, each on its own server, so the deliberate 5 s stalls
//! overlap; then each fault's own checks read its runs.

mod common;

use std::time::{Duration, Instant};

use common::{Case, assert_port_closed};
use isolation_lab::admission::ledger::{Event, WorkEvent};
use isolation_lab::admission::section::GateState;
use isolation_lab::coordinator::{PolicyRun, run_policy_with};
use isolation_lab::faults::Faults;
use isolation_lab::label::Label;
use isolation_lab::policy::Mode;
use isolation_lab::server::Front;
use tokio::task::JoinSet;

/// The contract's bound on a stalled run.
const STALL_BOUND: Duration = Duration::from_secs(15);

/// A failed run, with its one-line reason and how long it took to fail.
struct Failed {
    front: Front,
    mode: Mode,
    run: PolicyRun,
    failure: String,
    took: Duration,
}

/// Runs the default case of every `(front, mode)` at once with `faults`, and checks what every
/// failed run must show.
async fn fail_with(cases: &[(Front, Mode)], faults: Faults) -> Vec<Failed> {
    let mut runs = JoinSet::new();
    for &(front, mode) in cases {
        let faults = faults.clone();
        runs.spawn(async move {
            let case = Case::new(mode, 2, 2);
            let started = Instant::now();
            let run = run_policy_with(front, case.policy(), case.held(), faults).await;
            (front, mode, run, started.elapsed())
        });
    }
    let mut failed = Vec::new();
    for (front, mode, run, took) in runs.join_all().await {
        let context = format!("{faults:?} on {front:?} {mode:?}");
        let failure = run.failure.clone();
        let failure = failure.unwrap_or_else(|| panic!("{context}: the run did not fail"));
        assert!(
            !failure.contains('\n'),
            "{context}: one line, got {failure:?}"
        );
        assert!(took < STALL_BOUND, "{context}: took {took:?}");
        let report = &run.report;
        for (pool, capacity) in &report.pool_capacities {
            let (active, available) = (&report.final_state.active_work, &report.final_state);
            assert_eq!(active[pool], 0, "{context}: {pool} active");
            assert_eq!(
                available.available_permits[pool], *capacity,
                "{context}: {pool}"
            );
            let ledger = &report.ledger[pool];
            assert_eq!(
                ledger.admitted, ledger.finished,
                "{context}: {pool} ledger {ledger:?}"
            );
            assert_eq!(
                ledger.broken().count(),
                0,
                "{context}: {pool} ledger {ledger:?}"
            );
        }
        assert!(
            report.client_threads_stopped,
            "{context}: callers not all joined"
        );
        let server = report.server.as_ref().expect("the server started");
        let closed = server.listener_closed && server.connection_tasks_stopped;
        assert!(closed, "{context}: {server:?}");
        let after = report.resources.after_run.expect("counted after the run");
        assert_eq!(after.connection_handlers, 0, "{context}: {after:?}");
        assert_port_closed(server.address);
        assert!(
            !report.model.matches,
            "{context}: a failed run does not match the model"
        );
        eprintln!("{context} failed the run in {took:?}: {failure}");
        failed.push(Failed {
            front,
            mode,
            run,
            failure,
            took,
        });
    }
    failed
}

fn on_both_fronts(mode: Mode) -> Vec<(Front, Mode)> {
    Front::ALL.into_iter().map(|front| (front, mode)).collect()
}

fn finished(events: &[WorkEvent], request: Label) -> Option<&WorkEvent> {
    events
        .iter()
        .find(|e| e.request == Some(request) && e.event == Event::Finished)
}

fn gate_opened(events: &[WorkEvent]) -> Option<u64> {
    let opened = events.iter().find(|e| e.event == Event::GateOpened);
    opened.map(|e| e.seq)
}

/// Every fault, on both fronts, each failing its run cleanly and for its own reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_fails_the_run_cleanly() {
    let stuck = Faults {
        gate_stuck: true,
        ..Faults::default()
    };
    let silent = Faults {
        observer_silent: true,
        ..Faults::default()
    };
    let disconnect = Faults {
        caller_disconnects: Some(Label::Slow(1)),
        ..Faults::default()
    };
    let panics = |request| Faults {
        handler_panics: Some(request),
        ..Faults::default()
    };
    let every_mode: Vec<_> = Front::ALL
        .into_iter()
        .flat_map(|front| Mode::ALL.map(|mode| (front, mode)))
        .collect();
    let (shared, partitioned) = (
        on_both_fronts(Mode::Shared),
        on_both_fronts(Mode::Partitioned),
    );
    let (stuck, silent, disconnect, slow_panics, fast_panics) = tokio::join!(
        fail_with(&shared, stuck),
        fail_with(&shared, silent),
        fail_with(&every_mode, disconnect),
        fail_with(&partitioned, panics(Label::Slow(1))),
        fail_with(&partitioned, panics(Label::F1)),
    );
    a_gate_that_never_opens(stuck);
    a_silent_observer(silent);
    a_caller_that_disconnects_while_held(disconnect);
    a_panicking_handler(Label::Slow(1), slow_panics);
    a_panicking_handler(Label::F1, fast_panics);
}

/// A gate that never opens: the wait for the released callers stalls and the run fails on the
/// safety timeout. Closing abandons the stuck gate, so the held work leaves `cancelled` on both
/// fronts — a blocked thread included — and every permit returns.
fn a_gate_that_never_opens(runs: Vec<Failed>) {
    for failed in runs {
        let (failure, report) = (&failed.failure, &failed.run.report);
        assert!(
            failure.starts_with("stalled:") && failure.contains("5 s"),
            "{failure}"
        );
        assert!(
            failed.took >= Duration::from_secs(5),
            "a stall detected by the timeout"
        );
        assert_eq!(
            gate_opened(&report.work_events),
            None,
            "the gate never opened"
        );
        assert_eq!(report.final_state.gate, GateState::Abandoned);
        for held in [Label::Slow(1), Label::Slow(2)] {
            let left = finished(&report.work_events, held);
            let front = failed.front;
            assert!(
                left.is_some_and(|e| e.cancelled),
                "{front:?}: {held} left cancelled"
            );
        }
    }
}

/// A handler that never tells the observer: the coordinator never learns S1's decision and the
/// run fails on the safety timeout; closing opens the gate and the held work finishes.
fn a_silent_observer(runs: Vec<Failed>) {
    for failed in runs {
        let failure = &failed.failure;
        assert!(
            failure.contains("no admission decision for S1"),
            "{failure}"
        );
        let events = failed.run.report.work_events.iter();
        let s1 = events.filter(|e| e.request == Some(Label::Slow(1)));
        let s1: Vec<_> = s1.map(|e| e.event).collect();
        assert_eq!(s1, [Event::Admitted, Event::Held, Event::Finished]);
    }
}

/// A slow caller that disconnects while held. On the async front Hyper drops the handler: the
/// permit returns at once and the ledger records `finished` with `cancelled: true` before the
/// gate ever opens. On the threaded front the blocked thread cannot notice: the work stays in
/// the section until the gate opens at close, then finishes and returns its permit — nothing
/// leaks, but the run waits out the safety timeout first.
fn a_caller_that_disconnects_while_held(runs: Vec<Failed>) {
    for failed in runs {
        let (failure, events) = (&failed.failure, &failed.run.report.work_events);
        let left = finished(events, Label::Slow(1)).expect("S1 left the section");
        let context = format!("{:?} {:?}: {left:?}", failed.front, failed.mode);
        match failed.front {
            Front::Async => {
                assert!(failure.contains("S1's caller disconnected while its work was held"));
                assert!(left.cancelled, "{context}");
                let opened = gate_opened(events);
                assert!(opened.is_none_or(|opened| left.seq < opened), "{context}");
            }
            Front::Threaded => {
                let blocked = "S1's caller disconnected while its work was held, and its \
                               handler did not notice within 5 s";
                assert!(failure.contains(blocked), "{failure}");
                let opened = gate_opened(events).expect("closing opened the gate");
                assert!(opened < left.seq && !left.cancelled, "{context}");
            }
        }
    }
}

/// A handler that panics inside the work section, holding its permit: its caller's connection
/// breaks, the run fails at once, the permit returns while the panic unwinds, and the panicked
/// task or thread is joined and named in the reason.
fn a_panicking_handler(request: Label, runs: Vec<Failed>) {
    for failed in runs {
        let failure = &failed.failure;
        assert!(failure.contains(&format!("{request}: GET")), "{failure}");
        assert!(failure.contains("panicked"), "{failure}");
        let took = failed.took;
        assert!(took < Duration::from_secs(5), "not a stall: {took:?}");
        let left = finished(&failed.run.report.work_events, request);
        let front = failed.front;
        assert!(
            left.is_some_and(|e| e.cancelled),
            "{front:?}: {request} left cancelled"
        );
    }
}
