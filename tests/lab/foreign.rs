//! Only the run's own callers can take a permit: requests without the run's token are refused
//! with 403 before admission and leave no trace in the pools, the ledger or the model.

use crate::common;

use common::{Case, Faults, assert_matches_the_model, assert_structure};
use isolation_lab::coordinator::{Options, run_policy_with};
use isolation_lab::policy::{Front, Mode};

/// A full run with outsiders knocking while slow work is held, on each front: every outcome is
/// still the model's, and the report counts the refused outsiders.
#[tokio::test]
async fn foreign_requests_during_a_run_change_nothing() {
    for front in Front::ALL {
        for mode in Mode::ALL {
            let case = Case::new(mode, 2, 2);
            let faults = Faults {
                foreign_requests: 4,
                ..Faults::default()
            };
            let options = Options::on(front).with_hooks(faults);
            let run = run_policy_with(case.policy(), case.held(), options).await;
            assert_eq!(run.failure, None);
            let report = run.report;
            assert_matches_the_model(case, &report);
            assert_structure(case, &report);
            let server = report.server.as_ref().expect("served");
            assert_eq!(server.foreign_requests_refused, 4);
            // Five requests of the sequence, each decided once; nothing else reached a pool.
            assert_eq!(report.admissions.len(), 5);
            let attempts: u64 = report.ledger.values().map(|l| l.attempts).sum();
            assert_eq!(attempts, 5);
        }
    }
}
