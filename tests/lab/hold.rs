//! `hold` with real front children (the lab's binary, started with its hidden `__front`) and
//! real HTTP on loopback. The test runs alone in a process of its own (`common::alone`), so no
//! other test's threads or descriptors are counted with the parent's.

use crate::common;

use std::path::PathBuf;

use common::bulk::{Resources, settled};
use isolation_lab::hold::{CountOutcome, HoldInputs, HoldOptions, hold};
use isolation_lab::policy::Front;

/// The lab's own binary, as each front's child.
fn options() -> HoldOptions {
    HoldOptions {
        program: Some(PathBuf::from(env!("CARGO_BIN_EXE_isolation-lab"))),
        ..HoldOptions::default()
    }
}

/// N = 50 and 200 on both fronts: every request held and answered 200 (the instrument checks
/// each answer and the child's ledger, or fails); the threaded front's child gains at least a
/// thread per held request, the async front's none, and its heap per held request is Hyper's
/// two buffers and blocks under 1 KiB; every child is reaped; and the parent ends with the
/// descriptors and threads it started with.
#[test]
fn holding_50_and_200_costs_a_thread_each_only_on_the_threaded_front() {
    if common::alone() {
        return;
    }
    // The instrument raises the parent's RLIMIT_NOFILE first, which opens nothing.
    let start = Resources::now();
    let config = HoldInputs::new(&[50, 200], &Front::ALL).expect("valid counts");
    let report = hold(&config, &options());
    assert_eq!(report.failure, None, "{report:#?}");
    assert!(report.preflight.is_some());
    assert_eq!(report.fronts.len(), 2);
    for series in &report.fronts {
        let front = series.front;
        let idle = series.baseline.expect("the idle child was measured");
        assert_eq!(series.points.len(), 2, "{front:?}");
        for point in &series.points {
            let CountOutcome::Held(figures) = &point.outcome else {
                panic!("{front:?}, {} held: {:?}", point.held, point.outcome);
            };
            let held = u64::from(point.held);
            let threads = figures.process.procfs.os_threads;
            match front {
                Front::Threaded => assert!(
                    threads >= idle.procfs.os_threads + held,
                    "threaded, {held} held: {threads} threads, {} at rest",
                    idle.procfs.os_threads
                ),
                Front::Async => {
                    assert_eq!(
                        threads, idle.procfs.os_threads,
                        "async, {held} held: the threads do not grow with N"
                    );
                    // The connection's task holds Hyper's connection once, in under 1 KiB: no
                    // block of 1 to 4 KiB per held request (one copy too many measured 1.9).
                    let class = |name: &str| {
                        let mut classes = figures.heap_per_request.iter();
                        classes.find(|c| c.class == name).map_or(0.0, |c| c.blocks)
                    };
                    let heap = &figures.heap_per_request;
                    assert!(class("1 to 4 KiB") < 0.5, "{heap:?}");
                    assert!((class("8 KiB") - 2.0).abs() < 0.1, "{heap:?}");
                }
            }
            assert!(
                figures.process.procfs.open_fds >= idle.procfs.open_fds + held,
                "{figures:?}"
            );
            assert!(
                common::is_gone(figures.pid),
                "{front:?}'s child {} is reaped",
                figures.pid
            );
        }
    }
    assert_eq!(
        settled(start),
        start,
        "the parent's descriptors and threads"
    );
}
