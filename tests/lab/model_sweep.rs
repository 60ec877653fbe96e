//! Every allowed input — 2 modes × slots 2..=4 × held 1..=4, 24 policy runs, each on its own
//! fresh server — against the policy model of `docs/contract.md`, computed in the test.

use crate::common;

use common::{Case, assert_matches_the_model, assert_structure};
use isolation_lab::policy::Front;

/// Each of the 24 runs on `front` shows exactly what the policy model says, with the structural
/// evidence intact.
async fn every_input_matches_the_model_on(front: Front) {
    let cases = Case::all();
    assert_eq!(cases.len(), 24);
    for case in cases {
        let report = case.run_on(front).await;
        assert_matches_the_model(case, &report);
        assert_structure(case, &report);
        let mismatches = &report.model.mismatches;
        assert!(
            report.model.matches,
            "{case:?} on {front:?}: {mismatches:?}"
        );
    }
}

/// The async front on the lab's own current-thread runtime.
#[tokio::test]
async fn every_input_matches_the_model() {
    every_input_matches_the_model_on(Front::Async).await;
}

/// The async front with its tasks spread over two worker threads: the outcomes do not depend
/// on the runtime's scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_input_matches_the_model_on_a_multi_thread_runtime() {
    every_input_matches_the_model_on(Front::Async).await;
}

/// The threaded front: an OS thread per connection, bounded semaphores and a `Condvar` gate
/// show exactly the same admissions.
#[tokio::test]
async fn every_input_matches_the_model_on_the_threaded_front() {
    every_input_matches_the_model_on(Front::Threaded).await;
}
