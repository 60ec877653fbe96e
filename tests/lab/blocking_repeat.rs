//! Slow work that blocks its thread, repeated: the combinations where the executor, not a
//! permit, decides — on both fronts — run again and again with nothing differing from the
//! model, and nothing left running: the process's threads are back to what they were. Each test
//! runs alone in a process of its own (`common::alone`), so no other test's threads come and
//! go while it counts.

use crate::common;

use std::time::{Duration, Instant};

use common::Case;
use isolation_lab::coordinator::{Options, run_policy_with};
use isolation_lab::executor::{BlockingThreads, Executor, WorkStyle, Workers};
use isolation_lab::outcome::Outcome;
use isolation_lab::policy::{Front, Mode};

/// The combinations: a blocked front of one and of two workers, a short blocking pool, a
/// runtime per class, and the threaded front blocking its own threads.
fn combinations() -> Vec<(Front, Executor, Case)> {
    let shape = |work, workers, blocking| {
        let blocking = BlockingThreads::new(blocking).expect("allowed");
        Executor::new(work, workers, blocking)
    };
    let threaded = Executor {
        work: WorkStyle::Block,
        ..Executor::default()
    };
    vec![
        (
            Front::Async,
            shape(WorkStyle::Block, Workers::CurrentThread, 512),
            Case::new(Mode::Shared, 2, 2),
        ),
        (
            Front::Async,
            shape(WorkStyle::Block, Workers::CurrentThread, 512),
            Case::new(Mode::Partitioned, 2, 2),
        ),
        (
            Front::Async,
            shape(WorkStyle::Block, Workers::Threads(2), 512),
            Case::new(Mode::Partitioned, 3, 2),
        ),
        (
            Front::Async,
            shape(WorkStyle::Block, Workers::Threads(2), 512),
            Case::new(Mode::Shared, 3, 3),
        ),
        (
            Front::Async,
            shape(WorkStyle::SpawnBlocking, Workers::CurrentThread, 1),
            Case::new(Mode::Partitioned, 4, 3),
        ),
        (
            Front::Async,
            shape(WorkStyle::OwnRuntime, Workers::Threads(2), 512),
            Case::new(Mode::Partitioned, 4, 4),
        ),
        (
            Front::Threaded,
            threaded,
            Case::new(Mode::Partitioned, 2, 2),
        ),
    ]
}

/// Runs every combination `rounds` times on one current-thread runtime; each must match the
/// model and its prediction, and afterwards the process has the threads it started with.
fn repeat(rounds: usize) {
    let before = os_threads();
    let runtime = common::runtime();
    for round in 0..rounds {
        for (front, executor, case) in combinations() {
            let options = Options::on(front).with_executor(executor);
            let ran = runtime.block_on(run_policy_with(case.policy(), case.held(), options));
            let context = format!("round {round}: {case:?} on {front:?} with {executor:?}");
            assert_eq!(ran.failure, None, "{context}");
            assert!(
                ran.report.model.matches,
                "{context}: {:?}",
                ran.report.model.mismatches
            );
            let predicted = Outcome::predicted_on(case.policy(), case.held(), (front, executor));
            assert_eq!(predicted, Outcome::observed(&ran.report), "{context}");
        }
    }
    drop(runtime);
    // A joined thread can stay listed by the kernel for a moment after `join` returns: look
    // again for a bounded while before calling it left running.
    let until = Instant::now() + Duration::from_secs(2);
    while os_threads() != before && Instant::now() < until {
        std::thread::yield_now();
    }
    assert_eq!(
        os_threads(),
        before,
        "threads left running after {rounds} rounds"
    );
}

/// Twenty rounds of every combination, with nothing differing and nothing left running.
#[test]
fn blocked_runs_repeat_without_differing_or_leaving_threads() {
    if common::alone() {
        return;
    }
    repeat(20);
}

/// The same, 200 rounds: a soak, run by hand (`cargo test --release --test lab
/// blocked_runs_soak -- --ignored`).
#[test]
#[ignore = "a soak of 200 rounds; run it by hand"]
fn blocked_runs_soak() {
    if common::alone() {
        return;
    }
    repeat(200);
}

/// The process's OS threads, as the report counts them: the entries of `/proc/self/task`, on
/// Linux; `None` elsewhere.
fn os_threads() -> Option<usize> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    std::fs::read_dir("/proc/self/task")
        .ok()
        .map(Iterator::count)
}
