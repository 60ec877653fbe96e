//! Labs in bulk: sequential, concurrent and under CPU load, with the process's open file
//! descriptors and OS threads counted before and after (Linux: `/proc/self`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use isolation_lab::policy::Front;
use isolation_lab::policy::Inputs;
use isolation_lab::report::Report;

use super::{Case, assert_matches_the_model};

/// Open file descriptors and OS threads of this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resources {
    pub fds: usize,
    pub threads: usize,
}

impl Resources {
    pub fn now() -> Self {
        let count = |dir| {
            std::fs::read_dir(dir)
                .map(Iterator::count)
                .expect("Linux /proc")
        };
        Resources {
            fds: count("/proc/self/fd"),
            threads: count("/proc/self/task"),
        }
    }
}

/// The counts once they have settled to `expected`, or as they stand after many re-reads. A
/// thread that has been joined can still be listed in `/proc/self/task` for a moment (the
/// kernel wakes the joiner before it releases the thread), so a count read right after a join
/// is re-read rather than trusted. A leak never settles, and the caller's assertion fails.
pub fn settled(expected: Resources) -> Resources {
    settle(expected, Resources::now)
}

/// The process's OS threads once they have settled to `expected`; see [`settled`].
pub fn settled_threads(expected: usize) -> usize {
    settle(expected, || Resources::now().threads)
}

fn settle<T: PartialEq>(expected: T, read: impl Fn() -> T) -> T {
    for _ in 0..100_000 {
        let now = read();
        if now == expected {
            return now;
        }
        std::thread::yield_now();
    }
    read()
}

/// Asserts a whole default report: both policies, each matching the policy model.
pub fn assert_default(report: &Report) {
    assert!(report.matches_model, "{:?}", report.failure);
    assert_eq!(report.policies.len(), 2);
    for policy in &report.policies {
        assert_matches_the_model(Case::new(policy.mode, 2, 2), policy);
    }
}

/// `runs` default labs on `front` one after another, each the way the binary runs it: its own
/// current-thread runtime, dropped before the report is read.
pub fn sequential(front: Front, runs: usize) {
    for _ in 0..runs {
        let report =
            isolation_lab::lab::block_on(isolation_lab::lab::run_on(front, Inputs::default()));
        let report = report.expect("a runtime");
        assert_default(&report);
    }
}

/// `labs` default labs on `front` at once on one two-worker runtime, each on its own server.
pub fn concurrent(front: Front, labs: usize) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let reports = runtime.block_on(async {
        let mut running = tokio::task::JoinSet::new();
        for _ in 0..labs {
            running.spawn(isolation_lab::lab::run_on(front, Inputs::default()));
        }
        running.join_all().await
    });
    drop(runtime);
    assert_eq!(reports.len(), labs);
    reports.iter().for_each(assert_default);
}

/// Every input on both fronts, `rounds` times, while one spinning thread per core keeps every
/// core busy.
pub fn under_cpu_load(rounds: usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let cores = thread::available_parallelism().map_or(2, |n| n.get());
    let spinners: Vec<_> = (0..cores)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let runtime = super::runtime();
    runtime.block_on(async {
        for _ in 0..rounds {
            for front in Front::ALL {
                for case in Case::all() {
                    let report = case.run_on(front).await;
                    assert_matches_the_model(case, &report);
                }
            }
        }
    });
    drop(runtime);
    stop.store(true, Ordering::Relaxed);
    for spinner in spinners {
        spinner.join().expect("a spinner ends");
    }
}
