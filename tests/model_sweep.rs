//! Every allowed input — 2 modes × slots 2..=4 × held 1..=4, 24 policy runs, each on its own
//! fresh server — against the policy model computed in the test from contract section 4.

mod common;

use common::{Case, assert_matches_section_4, assert_structure};
use isolation_lab::server::Front;

/// Each of the 24 runs shows exactly what section 4 says, with the structural evidence intact.
#[tokio::test]
async fn every_input_matches_section_4() {
    let cases = Case::all();
    assert_eq!(cases.len(), 24);
    for case in cases {
        let report = case.run().await;
        assert_matches_section_4(case, &report);
        assert_structure(case, &report);
        assert!(
            report.model.matches,
            "{case:?}: {:?}",
            report.model.mismatches
        );
    }
}

/// The same sweep with the lab's tasks spread over two worker threads: the outcomes do not
/// depend on the runtime's scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_input_matches_section_4_on_a_multi_thread_runtime() {
    for case in Case::all() {
        let report = case.run().await;
        assert_matches_section_4(case, &report);
        assert_structure(case, &report);
    }
}

/// The same sweep on the threaded front: an OS thread per connection, bounded semaphores and a
/// `Condvar` gate show exactly the same admissions.
#[tokio::test]
async fn every_input_matches_section_4_on_the_threaded_front() {
    for case in Case::all() {
        let report = case.run_on(Front::Threaded).await;
        assert_matches_section_4(case, &report);
        assert_structure(case, &report);
        assert!(
            report.model.matches,
            "{case:?}: {:?}",
            report.model.mismatches
        );
    }
}
