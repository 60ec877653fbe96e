//! `compare`: admission is identical on both fronts for every input, while what a held request
//! costs differs. The test runs alone in a process of its own (`common::alone`), so no other
//! test's threads are counted.

use crate::common;

use common::bulk::{self, Resources};
use isolation_lab::compare::{compare, compare_on};
use isolation_lab::executor::{BlockingThreads, Executor, WorkStyle, Workers};
use isolation_lab::policy::Front;
use isolation_lab::policy::{Held, Slots};

/// For every allowed input, both fronts admit, refuse and answer every request the same way.
/// With every held request admitted (shared mode, four slots), the process's OS threads during
/// the hold grow by exactly one per held request on the threaded front — a blocked thread each —
/// and do not grow at all on the async front, where a held request is a parked task.
#[tokio::test]
async fn admission_is_identical_and_only_the_threaded_front_pays_a_thread_per_hold() {
    if common::alone() {
        return;
    }
    for slots in Slots::all() {
        for held in Held::all() {
            let comparison = compare(slots, held).await;
            assert!(
                comparison.identical,
                "--slots {slots} --held {held}: {comparison:?}"
            );
            assert!(comparison.matches_model, "--slots {slots} --held {held}");
            assert_eq!(comparison.failure(), None);
        }
    }

    let four = Slots::new(4).expect("4 slots is allowed");
    let mut threads = Vec::new();
    let idle = Resources::now().threads;
    for held in Held::all() {
        // The previous runs' joined threads may linger in /proc for a moment: let them go.
        let left = bulk::settled_threads(idle);
        assert_eq!(left, idle, "no thread left from the previous runs");
        let comparison = compare(four, held).await;
        let shared = &comparison.policies[0];
        let during = |front| {
            let resources = shared.resources[&front].before_fast.expect("counted");
            assert_eq!(resources.held_at_gate, held.get(), "{front:?}");
            resources.os_threads.expect("Linux counts threads")
        };
        threads.push((held.get(), during(Front::Async), during(Front::Threaded)));
        for front in Front::ALL {
            let after = shared.resources[&front].after_run.expect("counted");
            assert_eq!(
                after.connection_handlers, 0,
                "{front:?}: every handler ended"
            );
        }
    }
    let (_, async_base, threaded_base) = threads[0];
    for &(held, on_async, on_threaded) in &threads {
        assert_eq!(
            on_async, async_base,
            "async front, {held} held: {threads:?}"
        );
        assert_eq!(
            on_threaded,
            threaded_base + held - 1,
            "threaded front: {threads:?}"
        );
    }
    assert!(
        threaded_base > async_base,
        "the threaded front has its accept thread too"
    );
}

/// Slow work queued for a thread on the async front (one blocking thread, or a slow runtime of
/// one worker) is held on the threaded front: the fronts differ as the model predicts, so
/// `compare` does not fail, and says the queued request waited for a thread, and that the
/// admissions and answers agree.
#[tokio::test]
async fn work_queued_for_a_thread_differs_as_the_model_predicts() {
    let (two, two_held) = (Slots::new(2), Held::new(2));
    let (slots, held) = (two.expect("2 slots"), two_held.expect("2 held"));
    let one_thread = BlockingThreads::new(1).expect("1 blocking thread");
    for executor in [
        Executor::new(WorkStyle::SpawnBlocking, Workers::CurrentThread, one_thread),
        Executor::new(
            WorkStyle::OwnRuntime,
            Workers::Threads(1),
            BlockingThreads::default(),
        ),
    ] {
        let comparison = compare_on(slots, held, executor).await;
        assert_eq!(comparison.failure(), None, "{executor:?}: {comparison:?}");
        assert!(comparison.expected_to_differ, "{executor:?}");
        let text = isolation_lab::compare::render::render(&comparison);
        let said = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            said.contains("S2 took a permit but waited for a thread until release"),
            "{text}"
        );
        // Queued is not held, and not answered without waiting: its cell says so. The
        // admissions and answers agree, so the fronts are not said to disagree.
        assert!(said.contains("S2 queued 200 held 200"), "{text}");
        assert!(
            said.contains("Both fronts admitted and answered every request alike"),
            "{text}"
        );
        assert!(!said.contains("disagree"), "{text}");
    }
}
