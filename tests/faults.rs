//! Every injected fault ends the run cleanly: `failure` set with a one-line reason, within the
//! contract's 15 s, with the listener closed, every task joined or aborted and accounted for,
//! and every permit back in its pool.

mod common;

use std::time::{Duration, Instant};

use common::{Case, assert_port_closed};
use isolation_lab::admission::ledger::Event;
use isolation_lab::coordinator::{PolicyRun, run_policy_with};
use isolation_lab::faults::Faults;
use isolation_lab::label::Label;
use isolation_lab::policy::Mode;

/// The contract's bound on a stalled run.
const STALL_BOUND: Duration = Duration::from_secs(15);

/// Runs the default shared case (S1, S2 held) with `faults`, and checks what every failed run
/// must show. Returns the run and how long it took to fail.
async fn fail_with(mode: Mode, faults: Faults) -> (PolicyRun, Duration) {
    let case = Case::new(mode, 2, 2);
    let started = Instant::now();
    let run = run_policy_with(case.policy(), case.held(), faults.clone()).await;
    let took = started.elapsed();
    let report = &run.report;
    let failure = run
        .failure
        .as_deref()
        .unwrap_or_else(|| panic!("{faults:?}: the run did not fail"));
    assert!(
        !failure.contains('\n'),
        "{faults:?}: one line, got {failure:?}"
    );
    assert!(took < STALL_BOUND, "{faults:?}: took {took:?}");
    for (pool, capacity) in &report.pool_capacities {
        assert_eq!(
            report.final_state.active_work[pool], 0,
            "{faults:?}: {pool} active"
        );
        assert_eq!(
            report.final_state.available_permits[pool], *capacity,
            "{faults:?}: {pool}"
        );
        let ledger = &report.ledger[pool];
        assert_eq!(
            ledger.admitted, ledger.finished,
            "{faults:?}: {pool} ledger {ledger:?}"
        );
        assert_eq!(
            ledger.broken().count(),
            0,
            "{faults:?}: {pool} ledger {ledger:?}"
        );
    }
    assert!(
        report.client_threads_stopped,
        "{faults:?}: callers not all joined"
    );
    let server = report.server.as_ref().expect("the server started");
    assert!(
        server.listener_closed && server.connection_tasks_stopped,
        "{faults:?}: {server:?}"
    );
    assert_port_closed(server.address);
    assert!(
        !report.model.matches,
        "{faults:?}: a failed run does not match the model"
    );
    eprintln!("{faults:?} failed the run in {took:?}: {failure}");
    (run, took)
}

/// A gate that never opens: the wait for the released callers stalls, the run fails on the
/// safety timeout, and the held handlers are cancelled when their callers are stopped, which
/// returns their permits.
#[tokio::test]
async fn a_gate_that_never_opens_fails_the_run() {
    let faults = Faults {
        gate_stuck: true,
        ..Faults::default()
    };
    let (run, took) = fail_with(Mode::Shared, faults).await;
    let failure = run.failure.expect("failed");
    assert!(
        failure.contains("stalled") && failure.contains("5 s"),
        "{failure}"
    );
    assert!(
        took >= Duration::from_secs(5),
        "the stall is detected by the 5 s timeout"
    );
    let events = &run.report.work_events;
    assert!(
        !events.iter().any(|e| e.event == Event::GateOpened),
        "the gate never opened"
    );
    for held in [Label::Slow(1), Label::Slow(2)] {
        let left = events
            .iter()
            .find(|e| e.request == Some(held) && e.event == Event::Finished);
        assert!(
            left.is_some_and(|e| e.cancelled),
            "{held} left the section cancelled: {events:?}"
        );
    }
}

/// A handler that never tells the observer: the coordinator never learns S1's decision and the
/// run fails on the safety timeout.
#[tokio::test]
async fn a_silent_observer_fails_the_run() {
    let faults = Faults {
        observer_silent: true,
        ..Faults::default()
    };
    let (run, _) = fail_with(Mode::Shared, faults).await;
    let failure = run.failure.expect("failed");
    assert!(
        failure.contains("no admission decision for S1"),
        "{failure}"
    );
    // The ledger still holds what happened: S1 admitted and held, then released at close.
    let s1 = run
        .report
        .work_events
        .iter()
        .filter(|e| e.request == Some(Label::Slow(1)));
    let s1: Vec<_> = s1.map(|e| e.event).collect();
    assert_eq!(s1, [Event::Admitted, Event::Held, Event::Finished]);
}

/// A slow caller that disconnects while held: the handler is cancelled, its permit returns,
/// and the ledger records `finished` with `cancelled: true` before the gate ever opens.
#[tokio::test]
async fn a_caller_that_disconnects_while_held_returns_its_permit() {
    for mode in [Mode::Shared, Mode::Partitioned] {
        let faults = Faults {
            caller_disconnects: Some(Label::Slow(1)),
            ..Faults::default()
        };
        let (run, _) = fail_with(mode, faults).await;
        let failure = run.failure.expect("failed");
        assert!(
            failure.contains("S1's caller disconnected while its work was held"),
            "{failure}"
        );
        let events = &run.report.work_events;
        let left = events
            .iter()
            .find(|e| e.request == Some(Label::Slow(1)) && e.event == Event::Finished)
            .expect("S1 left the section");
        assert!(left.cancelled, "{left:?}");
        let opened = events
            .iter()
            .find(|e| e.event == Event::GateOpened)
            .map(|e| e.seq);
        assert!(
            opened.is_none_or(|opened| left.seq < opened),
            "left before any opening"
        );
    }
}

/// A handler that panics inside the work section, holding its permit: its caller's connection
/// breaks, the run fails at once, the permit returns while the panic unwinds, and the panicked
/// connection task is accounted for.
#[tokio::test]
async fn a_panicking_handler_fails_the_run() {
    for request in [Label::Slow(1), Label::F1] {
        let faults = Faults {
            handler_panics: Some(request),
            ..Faults::default()
        };
        let (run, took) = fail_with(Mode::Partitioned, faults).await;
        let failure = run.failure.expect("failed");
        assert!(failure.contains(&format!("{request}: GET")), "{failure}");
        assert!(failure.contains("a connection task panicked"), "{failure}");
        assert!(
            took < Duration::from_secs(5),
            "a panic is not a stall: {took:?}"
        );
        let events = &run.report.work_events;
        let left = events
            .iter()
            .find(|e| e.request == Some(request) && e.event == Event::Finished);
        assert!(
            left.is_some_and(|e| e.cancelled),
            "{request} left cancelled: {events:?}"
        );
    }
}
