//! Both fronts shut down cleanly whatever outsiders do: the listener closes, a connection that
//! is not serving a request — silent, or halfway through a head it never finishes — is closed at
//! once rather than after the drain limit, every handler is joined, and the old port refuses.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Case;
use isolation_lab::admission::section::WorkSection;
use isolation_lab::admission::token::RunToken;
use isolation_lab::hooks::NoHooks;
use isolation_lab::policy::Mode;
use isolation_lab::server::{self, Front, HandlerCount};

/// A silent client and a client that stops in the middle of a request head do not hold the
/// shutdown up on either front: both are closed, nothing is aborted, no error is reported.
#[tokio::test]
async fn outsiders_that_never_finish_a_request_do_not_hold_the_shutdown() {
    for front in Front::ALL {
        let case = Case::new(Mode::Shared, 2, 1);
        let token = RunToken::generate().expect("the OS has randomness");
        let section = WorkSection::new(case.policy(), server::permits(front), token);
        let census = Arc::new(HandlerCount::default());
        // A drain limit far longer than the test may take: reaching it would be the failure.
        let drain_limit = Duration::from_secs(30);
        let hooks = Arc::new(NoHooks);
        let started = server::start(front, Arc::new(section), census.clone(), hooks, drain_limit);
        let (address, running) = started.expect("127.0.0.1:0 binds");

        let silent = TcpStream::connect(address).expect("the server accepts");
        let mut partial = TcpStream::connect(address).expect("the server accepts");
        partial
            .write_all(b"GET /slow HTTP/1.1\r\nlab-request: S1\r\n")
            .expect("half a head is sent");
        // Both are served once a handler is alive for each: wait for that, not for time.
        let waited = Instant::now();
        while census.live() < 2 {
            let waiting = waited.elapsed();
            assert!(waiting < Duration::from_secs(5), "{front:?}: never served");
            tokio::task::yield_now().await;
        }

        let stopping = Instant::now();
        let stopped = running.stop().await.expect("the server stops");
        let took = stopping.elapsed();
        assert!(took < drain_limit, "{front:?}: stopping waited {took:?}");
        assert_eq!(stopped.error, None, "{front:?}");
        let summary = stopped.summary;
        let closed = summary.listener_closed && summary.connection_tasks_stopped;
        assert!(closed, "{front:?}: {summary:?}");
        let counts = (
            summary.connections_accepted,
            summary.connection_tasks_aborted,
        );
        assert_eq!(counts, (2, 0), "{front:?}: {summary:?}");
        assert_eq!(census.live(), 0, "{front:?}: every handler has ended");
        for mut client in [silent.try_clone().expect("a handle"), partial] {
            let mut rest = Vec::new();
            // Closed without a reply: either a clean end of stream or a reset.
            let read = client.read_to_end(&mut rest);
            assert!(read.is_err() || rest.is_empty(), "{front:?}: {rest:?}");
        }
        let _ = silent.shutdown(std::net::Shutdown::Both);
    }
}
