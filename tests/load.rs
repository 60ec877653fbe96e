//! Quick load: labs in bulk leave nothing behind. One test in its own process, so nothing else
//! runs while the process's file descriptors and threads are counted.

mod common;

use common::load::{self, Resources};

/// 200 default labs in a row, 32 at once, and every input while every core is kept busy:
/// every outcome matches the model, and descriptors and threads return to their starting count.
#[test]
fn labs_in_bulk_match_the_model_and_leave_nothing_behind() {
    let before = Resources::now();
    load::sequential(200);
    assert_eq!(Resources::now(), before, "after 200 sequential labs");
    load::concurrent(32);
    assert_eq!(Resources::now(), before, "after 32 concurrent labs");
    load::under_cpu_load(1);
    assert_eq!(Resources::now(), before, "after the sweep under CPU load");
}
