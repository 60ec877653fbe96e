//! The threaded front shuts down cleanly: the listener closes, a connection still waiting for
//! its request is closed at once (not after the drain limit), every connection thread is
//! joined, and the old port refuses connections.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Case, assert_port_closed};
use isolation_lab::admission::section::WorkSection;
use isolation_lab::admission::token::RunToken;
use isolation_lab::policy::Mode;
use isolation_lab::server::{self, Census, Front};
use tokio::sync::mpsc;

/// An outsider that connects and never sends a request does not hold the shutdown up: its
/// thread is told to stop, its socket closes, and nothing is aborted.
#[tokio::test]
async fn an_idle_connection_does_not_hold_the_shutdown() {
    let case = Case::new(Mode::Shared, 2, 1);
    let token = RunToken::generate().expect("the OS has randomness");
    let (observer, _events) = mpsc::unbounded_channel();
    let section = WorkSection::new(case.policy(), Front::Threaded.permits(), token, observer);
    let census = Arc::new(Census::default());
    // A drain limit far longer than the test may take: reaching it would be the failure.
    let drain_limit = Duration::from_secs(30);
    let started = server::start(
        Front::Threaded,
        Arc::new(section),
        census.clone(),
        drain_limit,
    );
    let (address, running) = started.expect("127.0.0.1:0 binds");

    let mut idle = TcpStream::connect(address).expect("the server accepts");
    // The accept loop has it once a handler is alive for it: wait for that, not for time.
    let waited = Instant::now();
    while census.live() == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(5),
            "the connection was never served"
        );
        tokio::task::yield_now().await;
    }

    let stopping = Instant::now();
    let stopped = running.stop().await.expect("the server stops");
    assert!(
        stopping.elapsed() < drain_limit,
        "stopping waited for the drain limit"
    );
    assert_eq!(stopped.error, None);
    let summary = stopped.summary;
    assert!(
        summary.listener_closed && summary.connection_tasks_stopped,
        "{summary:?}"
    );
    assert_eq!(
        (
            summary.connections_accepted,
            summary.connection_tasks_aborted
        ),
        (1, 0)
    );
    assert_eq!(census.live(), 0, "every connection thread has ended");
    let mut rest = Vec::new();
    assert_eq!(
        idle.read_to_end(&mut rest).expect("a clean close"),
        0,
        "closed, no reply"
    );
    assert_port_closed(address);
}
