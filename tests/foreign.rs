//! Only the run's own callers can take a permit: requests without the run's token are refused
//! with 403 before admission and leave no trace in the pools, the ledger or the model.

mod common;

use std::sync::Arc;

use common::{Case, assert_matches_section_4, assert_structure};
use isolation_lab::admission::section::WorkSection;
use isolation_lab::admission::token::{RunToken, TOKEN_HEADER};
use isolation_lab::coordinator::run_policy_with;
use isolation_lab::faults::Faults;
use isolation_lab::label::LABEL_HEADER;
use isolation_lab::policy::Mode;
use isolation_lab::server::Server;
use tokio::sync::{mpsc, oneshot};

/// A full run with outsiders knocking while slow work is held: every outcome is still the
/// model's, and the report counts the refused outsiders.
#[tokio::test]
async fn foreign_requests_during_a_run_change_nothing() {
    for mode in [Mode::Shared, Mode::Partitioned] {
        let case = Case::new(mode, 2, 2);
        let faults = Faults {
            foreign_requests: 4,
            ..Faults::default()
        };
        let run = run_policy_with(case.policy(), case.held(), faults).await;
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

/// Straight at the server: no token, a wrong token, or the right token in the wrong header all
/// get 403 and no work event; only the right token reaches admission.
#[tokio::test]
async fn only_the_run_token_reaches_admission() {
    let case = Case::new(Mode::Partitioned, 2, 1);
    let token = RunToken::generate().expect("the OS has randomness");
    let wrong = RunToken::generate().expect("the OS has randomness");
    let (observer, _events) = mpsc::unbounded_channel();
    let section = Arc::new(WorkSection::new(case.policy(), token.clone(), observer));
    let server = Server::bind().await.expect("127.0.0.1:0 binds");
    let base = format!("http://{}", server.address());
    let (stop, stopped) = oneshot::channel::<()>();
    let stop_signal = async {
        let _ = stopped.await;
    };
    let drain_limit = std::time::Duration::from_secs(5);
    let serving = tokio::spawn(server.serve(section.clone(), stop_signal, drain_limit));
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
        let mut request = client
            .get(format!("{base}{path}"))
            .header(LABEL_HEADER, "F1");
        if let Some(presented) = presented {
            request = request.header(TOKEN_HEADER, presented);
        }
        let response = request.send().await.expect("the server answers");
        assert_eq!(response.status().as_u16(), expected, "{path}");
        let body: serde_json::Value = response.json_body().await;
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
        "only the token holder reached admission"
    );
    assert_eq!(section.foreign_requests_refused(), 4);

    let _ = stop.send(());
    let stopped = serving.await.expect("the server task ends");
    assert_eq!(stopped.error, None, "{:?}", stopped.summary);
    assert!(stopped.summary.connection_tasks_stopped);
    drop(client);
    assert_eq!(stopped.summary.foreign_requests_refused, 4);
    common::assert_port_closed(stopped.summary.address);
}

/// reqwest 0.13 without its `json` feature: parse the body with serde_json.
trait JsonBody {
    async fn json_body(self) -> serde_json::Value;
}

impl JsonBody for reqwest::Response {
    async fn json_body(self) -> serde_json::Value {
        let bytes = self.bytes().await.expect("a whole body");
        serde_json::from_slice(&bytes).expect("a JSON body")
    }
}
