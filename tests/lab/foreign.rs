//! Only the run's own callers can take a permit: requests without the run's token are refused
//! with 403 before admission and leave no trace in the pools, the ledger or the model.

use crate::common;

use std::sync::Arc;

use common::{Case, Faults, assert_matches_section_4, assert_structure};
use isolation_lab::admission::section::WorkSection;
use isolation_lab::admission::token::{RunToken, TOKEN_HEADER};
use isolation_lab::coordinator::{Options, SAFETY_TIMEOUT, run_policy_with};
use isolation_lab::hooks::NoHooks;
use isolation_lab::label::LABEL_HEADER;
use isolation_lab::policy::Mode;
use isolation_lab::server::{self, Front, HandlerCount};

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
            assert_matches_section_4(case, &report);
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

/// Straight at each front: no token, a wrong token, an empty one, or any path without one all
/// get 403 and no work event; only the right token reaches admission.
#[tokio::test]
async fn only_the_run_token_reaches_admission() {
    for front in Front::ALL {
        let case = Case::new(Mode::Partitioned, 2, 1);
        let token = RunToken::generate().expect("the OS has randomness");
        let wrong = RunToken::generate().expect("the OS has randomness");
        let section = WorkSection::new(case.policy(), server::permits(front), token.clone());
        let section = Arc::new(section);
        let census = Arc::new(HandlerCount::default());
        let hooks = Arc::new(NoHooks);
        let started = server::start(front, section.clone(), census, hooks, SAFETY_TIMEOUT);
        let (address, running) = started.expect("127.0.0.1:0 binds");
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("a client");

        let attempts = [
            ("/fast", None, 403),
            ("/fast", Some(wrong.header_value()), 403),
            ("/slow", Some(String::new()), 403),
            ("/nowhere", None, 403),
            ("/fast", Some(token.header_value()), 200),
        ];
        for (path, presented, expected) in attempts {
            let request = client.get(format!("http://{address}{path}"));
            let mut request = request.header(LABEL_HEADER, "F1");
            if let Some(presented) = presented {
                request = request.header(TOKEN_HEADER, presented);
            }
            let response = request.send().await.expect("the server answers");
            assert_eq!(response.status().as_u16(), expected, "{front:?} {path}");
            let bytes = response.bytes().await.expect("a whole body");
            let body: serde_json::Value = serde_json::from_slice(&bytes).expect("a JSON body");
            if expected == 403 {
                assert_eq!(body["error"], "foreign_request", "{path}: {body}");
            }
        }
        let decided: Vec<String> = section
            .events()
            .iter()
            .map(|e| format!("{:?}", e.event))
            .collect();
        assert_eq!(
            decided,
            ["Admitted", "Finished"],
            "only the token holder got in"
        );
        assert_eq!(section.foreign_requests_refused(), 4);

        let stopped = running.stop().await.expect("the server stops");
        assert_eq!(stopped.error, None, "{front:?}: {:?}", stopped.summary);
        assert!(stopped.summary.connection_tasks_stopped);
        assert_eq!(stopped.summary.foreign_requests_refused, 4);
        drop(client);
        common::assert_port_closed(&stopped.summary);
    }
}
