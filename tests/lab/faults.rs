//! Every injected fault ends the run cleanly: `failure` set with a one-line reason, within the
//! contract's 15 s, with the listener closed, every task or thread joined (or aborted, then
//! joined) and accounted for, and every permit back in its pool. Each fault runs on both
//! server fronts (a disconnect under both policies, a stuck gate and a silent observer under
//! the shared one, a panic under the partitioned one), but admitted work short of the gate on
//! the threaded front only (below). Every case of every fault runs at once, each on its own
//! server; the ones that stall do so with a safety timeout of [`GUARD`], and waited out side by
//! side they cost one of it; then each fault's own checks read its runs. The command line's
//! own timeout is pinned apart, without a stall (`the_command_line_waits_five_seconds`), and a
//! run stopped past its timeout and continued is shown not to be a stall
//! (`a_run_stopped_past_its_safety_timeout_and_continued_goes_on`).

use crate::common;

use std::io::Write;
use std::process::ChildStdin;
use std::time::Duration;

use common::{Case, Faults, StuckBeforeTheGate, assert_port_closed};
use isolation_lab::coordinator::{
    Cause, Failure, Left, Options, PolicyRun, SAFETY_TIMEOUT, Step, run_policy_with,
};
use isolation_lab::evidence::GateState;
use isolation_lab::evidence::{Event, WorkEvent};
use isolation_lab::hooks::Hooks;
use isolation_lab::label::Label;
use isolation_lab::policy::Front;
use isolation_lab::policy::Mode;
use tokio::task::JoinSet;

/// The safety timeout of the runs that stall on purpose: shorter than the command line's 5 s, so
/// the stalls cost the suite less, yet hundreds of times what a real step of these runs takes on
/// a busy machine (a few milliseconds; a stalled one is the only one near it). Runs that must
/// fail without a stall keep the command line's [`SAFETY_TIMEOUT`]: they never wait it out, and
/// on a machine loaded far beyond the suite's own work a step of theirs once took over 2 s and
/// was called a stall.
const GUARD: Duration = Duration::from_secs(2);

/// A failed run, with its typed failure.
struct Failed {
    front: Front,
    mode: Mode,
    run: PolicyRun,
    failure: Failure,
}

/// Runs the default case of every `(front, mode)` at once with `faults` and the safety timeout
/// `guard`, and checks what every failed run must show. The one limit fails a deliberate stall
/// and every real step before it, so it stays far above what a real step takes, lest a run whose
/// real step is only slow fail at the wrong step for the wrong reason.
async fn fail_with<H: Hooks + 'static>(
    cases: &[(Front, Mode)],
    faults: impl Fn() -> H,
    guard: Duration,
) -> Vec<Failed> {
    let mut runs = JoinSet::new();
    for &(front, mode) in cases {
        let faults = faults();
        runs.spawn(async move {
            let case = Case::new(mode, 2, 2);
            let options = Options {
                safety_timeout: guard,
                ..Options::on(front).with_hooks(faults)
            };
            let run = run_policy_with(case.policy(), case.held(), options).await;
            (front, mode, run)
        });
    }
    let mut failed = Vec::new();
    let faults = format!("{:?}", faults());
    for (front, mode, run) in runs.join_all().await {
        let context = format!("{faults} on {front:?} {mode:?}");
        let failure = run.failure.clone();
        let failure = failure.unwrap_or_else(|| panic!("{context}: the run did not fail"));
        let line = failure.to_string();
        assert!(!line.contains('\n'), "{context}: one line, got {line:?}");
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
        assert_port_closed(server);
        assert!(
            !report.model.matches,
            "{context}: a failed run does not match the model"
        );
        eprintln!("{context} failed the run: {failure}");
        failed.push(Failed {
            front,
            mode,
            run,
            failure,
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
    // Threaded only: there S1's handler waits on a thread of its own, where the async front's
    // would hold up a worker of the test's runtime.
    let threaded = [(Front::Threaded, Mode::Shared)];
    let (stuck, silent, short_of_gate, disconnect, slow_panics, fast_panics) = tokio::join!(
        fail_with(&shared, || stuck.clone(), GUARD),
        fail_with(&shared, || silent.clone(), GUARD),
        fail_with(&threaded, StuckBeforeTheGate::default, GUARD),
        fail_with(&every_mode, || disconnect.clone(), GUARD),
        // Not stalls: a panic breaks its caller's connection, so the timeout never runs out.
        fail_with(&partitioned, || panics(Label::Slow(1)), SAFETY_TIMEOUT),
        fail_with(&partitioned, || panics(Label::F1), SAFETY_TIMEOUT),
    );
    a_gate_that_never_opens(stuck);
    a_silent_observer(silent);
    work_admitted_but_not_held(short_of_gate);
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
            matches!(&failure.cause, Cause::Stalled { limit, .. } if *limit == GUARD),
            "{failure:?}"
        );
        assert_eq!(failure.step, Step::Release, "{failure}");
        assert!(failure.to_string().starts_with("stalled:"), "{failure}");
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
        let (line, s1) = stalled_in_s1s_step(&failed);
        assert!(line.contains("no admission decision for S1"), "{line}");
        assert_eq!(s1, [Event::Admitted, Event::Held, Event::Finished]);
    }
}

/// S1 admitted, its work never held at the gate: the step stalls saying so, not that S1 had no
/// decision; closing lets the work go, and it finishes.
fn work_admitted_but_not_held(runs: Vec<Failed>) {
    for failed in runs {
        let (line, s1) = stalled_in_s1s_step(&failed);
        let said = "stalled: S1 was admitted but not held at the gate within";
        assert!(line.starts_with(said), "{line}");
        assert_eq!(s1.first(), Some(&Event::Admitted), "{s1:?}");
        assert_eq!(s1.last(), Some(&Event::Finished), "{s1:?}");
    }
}

/// A run that stalled in S1's step: its failure's line, and S1's events in its ledger.
fn stalled_in_s1s_step(failed: &Failed) -> (String, Vec<Event>) {
    let failure = &failed.failure;
    assert!(failure.is_stall(), "{failure:?}");
    assert_eq!(
        (failure.step, failure.request),
        (Step::Slow, Some(Label::Slow(1)))
    );
    let events = failed.run.report.work_events.iter();
    let s1 = events.filter(|e| e.request == Some(Label::Slow(1)));
    (failure.to_string(), s1.map(|e| e.event).collect())
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
                let cause = Cause::CallerLeft(Left::Cancelled(left.seq));
                assert_eq!(failure.cause, cause, "{failure}");
                assert!(left.cancelled, "{context}");
                let opened = gate_opened(events);
                assert!(opened.is_none_or(|opened| left.seq < opened), "{context}");
            }
            Front::Threaded => {
                let cause = Cause::CallerLeft(Left::NotNoticed(GUARD));
                assert_eq!(failure.cause, cause, "{failure}");
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
        assert!(!failure.is_stall(), "not a stall: {failure}");
        assert_eq!(failure.request, Some(request), "{failure}");
        // The panic is what failed first: its caller's broken request follows from it.
        assert!(matches!(failure.cause, Cause::Server(_)), "{failure:?}");
        let line = failure.to_string();
        let front = match failed.front {
            Front::Async => "task",
            Front::Threaded => "thread",
        };
        let said = format!("a connection {front} panicked: injected fault: the handler of");
        assert!(line.starts_with(&said), "{line}");
        assert!(!line.contains("GET"), "told once, as the panic: {line}");
        let left = finished(&failed.run.report.work_events, request);
        let front = failed.front;
        assert!(
            left.is_some_and(|e| e.cancelled),
            "{front:?}: {request} left cancelled"
        );
    }
}

/// What S1's thread says, with the id of the thread the run's runtime is on, once it waits
/// inside its work (`StoppedInsideS1`).
const INSIDE: &str = "S1 waits inside its work; the run's runtime is on thread ";

/// S1 waits inside its work, on its own thread (the threaded front), for a line on stdin.
#[derive(Debug)]
struct StoppedInsideS1 {
    runtime_thread: libc::pid_t,
}

impl Hooks for StoppedInsideS1 {
    fn inside_work(&self, request: Label) {
        if request == Label::Slow(1) {
            eprintln!("{INSIDE}{}", self.runtime_thread);
            let _ = std::io::stdin().read_line(&mut String::new());
        }
    }
}

/// Thread `thread` of process `pid`: its state (`S` while it waits) and how many times it has
/// given up its core to wait (its voluntary context switches).
fn thread_status(pid: libc::pid_t, thread: libc::pid_t) -> (char, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{thread}/status"));
    let status = status.expect("the thread's status");
    let field = |name: &str| {
        let line = status.lines().find_map(|line| line.strip_prefix(name));
        line.expect("a field of the status").trim().to_owned()
    };
    let state = field("State:").chars().next().expect("a state");
    let switches = field("voluntary_ctxt_switches:").parse().expect("a count");
    (state, switches)
}

/// A run stopped (Ctrl-Z; here SIGSTOP) past its safety timeout, then continued (`fg`;
/// SIGCONT), goes on to its end and matches: nothing of the lab's could run while it was
/// stopped, so its waits count only the time it was not. The run is alone in a process of its
/// own, with the binary's signal handling, on the threaded front. While S1's thread waits
/// inside its work and the run waits for S1 to be held, this test's process stops the run's,
/// waits for the stop, keeps it stopped past the safety timeout, continues it, and only then
/// lets S1's thread go on. The continue is sent to the thread the run's runtime is on, so that
/// it is counted before that thread looks at its timers; one counted a moment later, on
/// another thread, is `child::stop_watch`'s unit test
/// (`a_wait_of_the_labs_own_sees_a_continue_counted_late`).
#[test]
fn a_run_stopped_past_its_safety_timeout_and_continued_goes_on() {
    let beside = |pid: u32, said: &std::sync::mpsc::Receiver<String>, mut stdin: ChildStdin| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let thread = loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            // A child that ends or stalls first fails on its own, with its output.
            let Ok(line) = said.recv_timeout(left) else {
                return;
            };
            if let Some(thread) = line.trim_end().strip_prefix(INSIDE) {
                break thread.parse::<libc::pid_t>().expect("a thread id");
            }
        };
        common::stop_child(pid);
        let pid = libc::pid_t::try_from(pid).expect("pids fit in pid_t");
        // The run's wait for S1 began before S1's thread spoke: its deadline passes meanwhile.
        std::thread::sleep(GUARD + Duration::from_secs(1));
        let (_, parked) = thread_status(pid, thread);
        // SAFETY: tgkill(2) signals a thread of this test's own unreaped child.
        let continued = unsafe { libc::syscall(libc::SYS_tgkill, pid, thread, libc::SIGCONT) };
        assert_eq!(continued, 0);
        // S1 goes on only once the runtime's thread has woken, seen the deadline passed, and
        // waits again: a lab that took the stop for a stall has failed the run by then.
        loop {
            let (state, switches) = thread_status(pid, thread);
            if state == 'S' && switches > parked {
                break;
            }
            let late = std::time::Instant::now() > deadline;
            assert!(!late, "the runtime's thread never waited again");
            std::thread::sleep(Duration::from_millis(1));
        }
        stdin.write_all(b"go on\n").expect("S1's thread reads on");
    };
    if common::alone_beside(beside) {
        return;
    }
    isolation_lab::cli::one_line_at_a_signal();
    // SAFETY: gettid(2) cannot fail.
    let runtime_thread = unsafe { libc::gettid() };
    let case = Case::new(Mode::Shared, 2, 2);
    let options = Options {
        safety_timeout: GUARD,
        ..Options::on(Front::Threaded).with_hooks(StoppedInsideS1 { runtime_thread })
    };
    let run = common::runtime().block_on(run_policy_with(case.policy(), case.held(), options));
    if let Some(failure) = &run.failure {
        panic!("the run failed: {failure}");
    }
    common::assert_matches_the_model(case, &run.report);
}

/// The command line's runs wait 5 s before failing a stalled step: the binary's own report
/// says which timeout it ran with, without anything having to stall.
#[test]
fn the_command_line_waits_five_seconds() {
    assert_eq!(SAFETY_TIMEOUT, Duration::from_secs(5));
    assert_eq!(Options::default().safety_timeout, SAFETY_TIMEOUT);
    let lab = std::process::Command::new(env!("CARGO_BIN_EXE_isolation-lab"))
        .args(["--mode", "shared"])
        .output()
        .expect("the lab runs");
    assert!(lab.status.success(), "{lab:?}");
    let report: serde_json::Value = serde_json::from_slice(&lab.stdout).expect("a JSON report");
    assert_eq!(
        report["runner"]["safety_timeout_ms"], 5000,
        "{}",
        report["runner"]
    );
}
