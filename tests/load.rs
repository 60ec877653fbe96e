//! Quick load: labs in bulk leave nothing behind. One test in its own process, so nothing else
//! runs while the process's file descriptors and threads are counted.

mod common;

use common::load::{self, Resources};
use isolation_lab::policy::Front;

/// On each front: 20 default labs in a row and 16 at once; then every input on both fronts
/// while every core is kept busy. Every outcome matches the model, and descriptors and threads
/// return to their starting count.
#[test]
fn labs_in_bulk_match_the_model_and_leave_nothing_behind() {
    let before = Resources::now();
    for front in Front::ALL {
        load::sequential(front, 20);
        assert_eq!(
            load::settled(before),
            before,
            "after 20 sequential labs on {front:?}"
        );
        load::concurrent(front, 16);
        assert_eq!(
            load::settled(before),
            before,
            "after 16 concurrent labs on {front:?}"
        );
    }
    load::under_cpu_load(1);
    assert_eq!(
        load::settled(before),
        before,
        "after the sweeps under CPU load"
    );
}
