//! Dropping a running threaded server without stopping it — what happens to a run cancelled by
//! a `tokio::time::timeout` around it — returns at once, even with work held at the gate, so
//! the Tokio runtime that drops it goes on running its other tasks; the held work is abandoned.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use common::Case;
use isolation_lab::admission::ledger::{Event, WorkEvent};
use isolation_lab::admission::section::WorkSection;
use isolation_lab::admission::token::{RunToken, TOKEN_HEADER};
use isolation_lab::hooks::NoHooks;
use isolation_lab::label::{LABEL_HEADER, Label};
use isolation_lab::policy::Mode;
use isolation_lab::server::{self, Front, HandlerCount};
use tokio::sync::{mpsc, oneshot};

/// How long the test waits for the runtime to answer a message before calling it blocked: far
/// longer than a free current-thread runtime takes to answer, far shorter than [`DRAIN`].
const GUARD: Duration = Duration::from_secs(30);

/// The server's drain limit. A drop that waited for held work to drain would block for this
/// long, far past [`GUARD`].
const DRAIN: Duration = Duration::from_secs(3600);

/// The ticker's messages: each must be answered while the dropped server still has S1 held.
const TICKS: usize = 3;

/// A current-thread runtime drops a threaded server whose S1 is held at a closed gate, in the
/// middle of a task, as a cancelled run does. A ticker task on that runtime must then answer
/// the test's messages: it can only run once the drop has returned, so an answer shows the
/// drop did not block — no clock is read. Were the drop to wait for the drain, no answer
/// would come; the test would then open the gate itself (so the drop can return and the test
/// end) and fail. Afterwards S1's caller is answered or closed, and S1's work leaves.
#[test]
fn dropping_a_threaded_server_never_blocks_its_runtime() {
    let token = RunToken::generate().expect("the OS has randomness");
    let policy = Case::new(Mode::Shared, 2, 1).policy();
    let section = WorkSection::new(policy, server::permits(Front::Threaded), token.clone());
    let (_, mut events) = section.subscribe();
    let section = Arc::new(section);
    let census = Arc::new(HandlerCount::default());
    let started = server::start(
        Front::Threaded,
        section.clone(),
        census,
        Arc::new(NoHooks),
        DRAIN,
    );
    let (address, running) = started.expect("127.0.0.1:0 binds");

    // S1, sent by hand, and held at the gate: the observer says so.
    let mut s1 = TcpStream::connect(address).expect("the server accepts");
    let request = format!(
        "GET /slow HTTP/1.1\r\nhost: lab\r\n{TOKEN_HEADER}: {}\r\n{LABEL_HEADER}: S1\r\n\r\n",
        token.header_value()
    );
    s1.write_all(request.as_bytes()).expect("S1 is sent");
    wait_for(&mut events, Event::Held);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (ping, mut pings) = mpsc::unbounded_channel::<()>();
    let (pong, pongs) = std_mpsc::channel::<()>();
    let (dropping, dropped) = std_mpsc::channel::<()>();
    let (finish, finished) = oneshot::channel::<()>();
    let answered = std::thread::scope(|scope| {
        let runner = scope.spawn(move || {
            runtime.block_on(async move {
                let ticker = tokio::spawn(async move {
                    while pings.recv().await.is_some() {
                        let _ = pong.send(());
                    }
                });
                dropping.send(()).expect("the test listens");
                // On the runtime's only thread: nothing else on it runs until this returns.
                drop(running);
                let _ = finished.await;
                ticker.abort();
                let _ = ticker.await;
            });
        });
        dropped.recv().expect("the runtime runs");
        let mut answered = 0;
        for _ in 0..TICKS {
            ping.send(()).expect("the ticker listens");
            match pongs.recv_timeout(GUARD) {
                Ok(()) => answered += 1,
                Err(_) => {
                    // The drop is blocked: let the held work finish so it can return.
                    section.open_gate();
                    break;
                }
            }
        }
        let _ = finish.send(());
        runner.join().expect("the runtime thread ends");
        answered
    });
    assert_eq!(
        answered, TICKS,
        "dropping the threaded server blocked its runtime: the ticker on it answered {answered} \
         of {TICKS} messages within {GUARD:?}, with S1 held and a {DRAIN:?} drain limit"
    );

    // The dropped server abandoned the held work: S1's caller hears back (503 or a close) and
    // its work leaves the section.
    s1.set_read_timeout(Some(GUARD)).expect("a read timeout");
    let mut reply = Vec::new();
    let read = s1.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    let timed_out = read
        .as_ref()
        .is_err_and(|e| matches!(e.kind(), std::io::ErrorKind::WouldBlock));
    assert!(!timed_out, "S1's caller heard nothing after the drop");
    assert!(
        reply.is_empty() || reply.starts_with("HTTP/1.1 503"),
        "S1 after the drop: {reply}"
    );
    let left = wait_for(&mut events, Event::Finished);
    assert_eq!(left, Label::Slow(1));
}

/// The next `event` on the observer channel, as the server records it; fails instead of
/// hanging if the server never does.
fn wait_for(events: &mut mpsc::UnboundedReceiver<WorkEvent>, event: Event) -> Label {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let next = async {
            while let Some(seen) = events.recv().await {
                if seen.event == event {
                    return seen.request;
                }
            }
            None
        };
        let seen = tokio::time::timeout(GUARD, next).await;
        let seen = seen.unwrap_or_else(|_| panic!("no {event:?} event within {GUARD:?}"));
        seen.unwrap_or_else(|| panic!("the observer channel closed before {event:?}"))
    })
}
