//! Only the run's own callers can take a permit: requests without the run's token are refused
//! with 403 before admission and leave no trace in the pools, the ledger or the model.

use std::net::{SocketAddr, TcpStream};
use std::sync::{Mutex, PoisonError};

use crate::common;

use common::{Case, Faults, assert_matches_the_model, assert_structure};
use isolation_lab::coordinator::{Options, run_policy_with};
use isolation_lab::hooks::Hooks;
use isolation_lab::policy::{Front, Inputs, Mode};

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

/// Connects twice before the run's requests without its token, and never sends a request: the
/// server gives each connection a handler, counted before F1.
#[derive(Debug, Default)]
struct SilentStrangers(Mutex<Vec<TcpStream>>);

impl Hooks for SilentStrangers {
    fn foreign_requests(&self) -> usize {
        1
    }

    fn before_foreign_requests(&self, server: SocketAddr) {
        let connected = [(); 2].map(|()| TcpStream::connect(server).expect("connect"));
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        open.extend(connected);
    }
}

/// Another process's connections that never send a request are a genuine run's too: the run
/// matches the model, and `record` re-checks its saved report as matched, the strangers'
/// handlers counted before F1 among the connections the server accepted beyond the lab's (it
/// called such a report edited: "3 connection handlers, but before F1 only the 2 slow
/// callers connected"). On each front, both policies.
#[tokio::test]
async fn silent_strangers_connected_before_f1_leave_a_genuine_report() {
    let dir = common::temp_dir("isolation-lab-strangers").expect("a scratch directory");
    for front in Front::ALL {
        let options = Options::on(front).with_hooks(SilentStrangers::default());
        let report = isolation_lab::lab::run_with(Inputs::default(), options).await;
        assert!(report.matches_model, "{:?}", report.failure);
        // The async front counts a handler as it accepts a connection; the threaded front, as
        // the connection's thread starts, which may come later.
        for policy in report.policies.iter().filter(|_| front == Front::Async) {
            let before = policy.resources.before_fast.expect("counted before F1");
            assert!(
                before.connection_handlers >= before.held_at_gate + 2,
                "the strangers' handlers are counted: {before:?}"
            );
        }
        let file = format!("{}.json", front.name());
        let saved = dir.path().join(&file);
        let json = serde_json::to_string(&report).expect("the report serializes");
        std::fs::write(&saved, json).expect("saved");
        let recorded = crate::record::record_here(dir.path(), &file, false);
        assert_eq!(recorded.code, 0, "{}", recorded.stdout);
        // As many handlers as connections accepted, the lab's own included, are more than the
        // strangers' can explain: named, with what the lab's callers surely had accepted.
        let accepted = report.policies[0].server.as_ref().expect("served");
        let accepted = accepted.connections_accepted;
        let mut edited = serde_json::to_value(&report).expect("the report serializes");
        let handlers = "/policies/0/resources/before_fast/connection_handlers";
        *edited.pointer_mut(handlers).expect("counted") = serde_json::json!(accepted);
        std::fs::write(&saved, edited.to_string()).expect("saved");
        let text = crate::record::record_here(dir.path(), &file, false).stdout;
        let named = format!(
            "resources.before_fast counts {accepted} connection handlers, but before F1 only the \
             2 slow callers connected, each at most once, and at most {} connections of another \
             process (the server accepted {accepted} in the whole run, 3 of them surely the \
             lab's callers': 2 held before F1 and F1's (its own, or a refused caller's it \
             reused))",
            accepted - 3
        );
        assert!(text.contains(&named), "{text}");
    }
}

/// Connects once while slow work is held, just before F1, and sends nothing.
#[derive(Debug, Default)]
struct QueuedStranger(Mutex<Vec<TcpStream>>);

impl Hooks for QueuedStranger {
    fn before_foreign_requests(&self, server: SocketAddr) {
        let connected = TcpStream::connect(server).expect("connect");
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        open.push(connected);
    }
}

/// With every worker of the front blocked (`--work block` on one worker), another process's
/// connection waits in the accept queue ahead of F1: F1 is seen unread only once its own
/// connection waits there too, behind S2's and the stranger's, and not at the first look,
/// before F1's caller has even connected (the queue then already held one more than the
/// requests seen so far). The run matches, and `record` re-checks it as matched.
#[tokio::test]
async fn a_strangers_queued_connection_is_not_taken_for_f1() {
    use isolation_lab::executor::{BlockingThreads, Executor, WorkStyle, Workers};
    let dir = common::temp_dir("isolation-lab-queued").expect("a scratch directory");
    let block = Executor::new(
        WorkStyle::Block,
        Workers::CurrentThread,
        BlockingThreads::default(),
    );
    let options = Options::on(Front::Async)
        .with_executor(block)
        .with_hooks(QueuedStranger::default());
    let report = isolation_lab::lab::run_with(Inputs::default(), options).await;
    assert!(report.matches_model, "{:?}", report.failure);
    for policy in &report.policies {
        let executor = policy.observed.executor.as_ref().expect("watched");
        let seen: Vec<_> = (executor.unread.iter())
            .map(|u| (u.request.to_string(), u.accept_queue))
            .collect();
        // S2 unread alone (S1 blocks the worker); then the stranger's connection, and F1's
        // behind it.
        let expected = [("S2".to_owned(), 1), ("F1".to_owned(), 3)];
        assert_eq!(seen, expected, "{:?}", policy.mode);
    }
    let saved = dir.path().join("queued.json");
    let json = serde_json::to_string(&report).expect("the report serializes");
    std::fs::write(&saved, json).expect("saved");
    let recorded = crate::record::record_here(dir.path(), "queued.json", false);
    assert_eq!(recorded.code, 0, "{}", recorded.stdout);
}
