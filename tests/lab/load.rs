//! Quick load: labs in bulk leave nothing behind. The test runs alone in a process of its own
//! (`common::alone`), so nothing else runs there while its file descriptors and threads are
//! counted.

use crate::common;

use common::bulk::{self, Resources};
use isolation_lab::policy::Front;

/// On each front: 20 default labs in a row and 16 at once; then every input on both fronts
/// while every core is kept busy. Every outcome matches the model, and descriptors and threads
/// return to their starting count.
#[test]
fn labs_in_bulk_match_the_model_and_leave_nothing_behind() {
    if common::alone() {
        return;
    }
    let before = Resources::now();
    for front in Front::ALL {
        bulk::sequential(front, 20);
        assert_eq!(
            bulk::settled(before),
            before,
            "after 20 sequential labs on {front:?}"
        );
        bulk::concurrent(front, 16);
        assert_eq!(
            bulk::settled(before),
            before,
            "after 16 concurrent labs on {front:?}"
        );
    }
    bulk::under_cpu_load(1);
    assert_eq!(
        bulk::settled(before),
        before,
        "after the sweeps under CPU load"
    );
}
