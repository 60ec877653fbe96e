//! Soak: the quick load test, scaled up. Run it with
//! `cargo test --release --test soak -- --ignored --nocapture`.

mod common;

use std::time::Instant;

use common::load::{self, Resources};

/// 1 000 default labs in a row, 32 at once ten times over, and every input ten times under
/// CPU load: every outcome matches, and descriptors and threads return to their starting count.
#[test]
#[ignore = "a soak of several seconds; run it explicitly"]
fn a_thousand_labs_leave_nothing_behind() {
    let before = Resources::now();
    let started = Instant::now();
    load::sequential(1_000);
    let sequential = started.elapsed();
    assert_eq!(Resources::now(), before, "after 1 000 sequential labs");
    let started = Instant::now();
    for _ in 0..10 {
        load::concurrent(32);
        assert_eq!(Resources::now(), before, "after 32 concurrent labs");
    }
    let concurrent = started.elapsed();
    let started = Instant::now();
    load::under_cpu_load(10);
    let loaded = started.elapsed();
    let after = Resources::now();
    assert_eq!(after, before, "after 240 labs under CPU load");
    println!(
        "soak: 1000 sequential default labs in {sequential:?}; 10 x 32 concurrent in \
         {concurrent:?}; 240 policy runs under CPU load in {loaded:?}; fds {} -> {}, threads {} -> {}",
        before.fds, after.fds, before.threads, after.threads
    );
}
