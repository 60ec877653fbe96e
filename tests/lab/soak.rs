//! Soak: the quick load test, scaled up, alone in a process of its own like it. Run it with
//! `cargo test --release --test lab soak:: -- --ignored --nocapture`.

use crate::common;

use std::time::Instant;

use common::bulk::{self, Resources};
use isolation_lab::policy::Front;

/// On each front, 1 000 default labs in a row and 32 at once ten times over; then every input
/// on both fronts ten times under CPU load. Every outcome matches, and descriptors and threads
/// return to their starting count.
#[test]
#[ignore = "a soak of several seconds; run it explicitly"]
fn a_thousand_labs_leave_nothing_behind() {
    if common::alone() {
        return;
    }
    let before = Resources::now();
    for front in Front::ALL {
        let started = Instant::now();
        bulk::sequential(front, 1_000);
        let sequential = started.elapsed();
        assert_eq!(
            bulk::settled(before),
            before,
            "after 1 000 sequential labs on {front:?}"
        );
        let started = Instant::now();
        for _ in 0..10 {
            bulk::concurrent(front, 32);
            assert_eq!(
                bulk::settled(before),
                before,
                "after 32 concurrent labs on {front:?}"
            );
        }
        let concurrent = started.elapsed();
        eprintln!(
            "soak, {} front: 1000 sequential default labs in {sequential:?}; \
             10 x 32 concurrent in {concurrent:?}",
            front.name()
        );
    }
    let started = Instant::now();
    bulk::under_cpu_load(10);
    let loaded = started.elapsed();
    let after = bulk::settled(before);
    assert_eq!(after, before, "after 480 policy runs under CPU load");
    eprintln!(
        "soak: 480 policy runs (both fronts) under CPU load in {loaded:?}; \
         fds {} -> {}, threads {} -> {}",
        before.fds, after.fds, before.threads, after.threads
    );
}
