//! The fronts started bare, as a caller outside the lab could not start them: shutdown with
//! outsiders connected, the run token at the door, a dropped server, and (each alone in its own
//! process, [`alone`](crate::child::test_child::alone)) an accept that fails for want of
//! descriptors, a thread that cannot start, and the threads a stopped front leaves.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::{FrontCensus, Hosting, Running};
use crate::admission::section::WorkSection;
use crate::admission::token::RunToken;
use crate::hooks::{Hooks, NoHooks};
use crate::policy::{Front, Held, Mode, Policy, Slots};

/// One policy run's inputs, as `tests/common`'s `Case` gives them.
#[derive(Clone, Copy, Debug)]
struct Case {
    mode: Mode,
    slots: u8,
    held: u8,
}

impl Case {
    fn new(mode: Mode, slots: u8, held: u8) -> Self {
        Case { mode, slots, held }
    }

    fn policy(self) -> Policy {
        let slots = Slots::new(self.slots).expect("test cases use allowed slots");
        Policy {
            mode: self.mode,
            slots,
        }
    }

    fn held(self) -> Held {
        Held::new(self.held).expect("test cases use allowed held counts")
    }
}

/// Binds `127.0.0.1:0` and starts `front` serving `section`, every request's slow work at the
/// run's own gate.
fn start(
    front: Front,
    section: Arc<WorkSection>,
    census: Arc<FrontCensus>,
    hooks: Arc<dyn Hooks>,
    drain_limit: Duration,
) -> std::io::Result<(SocketAddr, Running)> {
    let bound = super::bind_loopback()?;
    super::start_on(
        front,
        bound,
        section,
        census,
        hooks,
        Hosting::default(),
        drain_limit,
    )
}

/// This thread's id in the kernel.
#[cfg(unix)]
fn this_thread() -> u32 {
    super::threaded::os_thread_id().expect("a thread id from Linux's /proc")
}

/// The ids of this process's threads.
#[cfg(unix)]
fn threads() -> std::io::Result<std::collections::BTreeSet<u32>> {
    let mut ids = std::collections::BTreeSet::new();
    for task in std::fs::read_dir("/proc/self/task")? {
        let id = task?.file_name().to_string_lossy().parse();
        ids.insert(id.map_err(std::io::Error::other)?);
    }
    Ok(ids)
}

/// A work section for `front` under `policy`, and the fresh run token it admits.
fn section(front: Front, policy: Policy) -> (Arc<WorkSection>, RunToken) {
    let token = RunToken::generate().expect("the OS has randomness");
    let section = WorkSection::new(policy, super::permits(front), token.clone());
    (Arc::new(section), token)
}

/// An outside client of the fronts: reqwest, no proxy.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a client")
}

/// A front started bare on `127.0.0.1:0` with no hooks, and what a test reads of it.
struct Bare {
    section: Arc<WorkSection>,
    token: RunToken,
    census: Arc<FrontCensus>,
    address: SocketAddr,
    running: Running,
}

/// Starts `front` bare over a new section under `policy` (see [`section`]).
fn bare(front: Front, policy: Policy, drain_limit: Duration) -> Bare {
    let (section, token) = section(front, policy);
    let census = Arc::new(FrontCensus::default());
    let started = start(
        front,
        section.clone(),
        census.clone(),
        Arc::new(NoHooks),
        drain_limit,
    );
    let (address, running) = started.expect("127.0.0.1:0 binds");
    Bare {
        section,
        token,
        census,
        address,
        running,
    }
}

mod listener {
    use super::super::*;

    /// `listener_closed` is observed, not asserted: a listener is open until it is dropped, and
    /// another listener's being open says nothing of it.
    #[test]
    fn a_closed_listener_is_seen_closed() {
        let (listener, address) = bind_loopback().expect("127.0.0.1:0 binds");
        let id = ListenerId::of(&listener, address);
        assert!(id.inode.is_some());
        let (other, _) = bind_loopback().expect("127.0.0.1:0 binds");
        assert!(!id.is_closed());
        drop(listener);
        assert!(id.is_closed());
        assert!(!ListenerId::of(&other, address).is_closed());
    }

    /// A run's listener queues what `STD_BACKLOG` says, which `record` relies on: Linux's
    /// `TCP_INFO` gives a listening socket's backlog as `tcpi_sacked` (capped at
    /// `net.core.somaxconn`).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_runs_listener_queues_what_std_backlog_says() {
        use std::os::fd::AsFd;
        let (listener, _) = bind_loopback().expect("127.0.0.1:0 binds");
        let info = runtimes::tcp_info(listener.as_fd()).expect("TCP_INFO of a listener");
        let somaxconn = std::fs::read_to_string("/proc/sys/net/core/somaxconn");
        let somaxconn = somaxconn.ok().and_then(|s| s.trim().parse().ok());
        let asked = STD_BACKLOG.min(somaxconn.unwrap_or(usize::MAX));
        assert_eq!(info.tcpi_sacked as usize, asked);
    }

    /// The pauses double from 1 ms to 64 ms; the failure after the last gives up, naming how
    /// many tries and how long they took. A success starts the pauses over.
    #[test]
    fn backoff_doubles_then_gives_up() {
        let mut backoff = Backoff::default();
        let pauses: Vec<u64> = std::iter::from_fn(|| backoff.failed())
            .map(|pause| pause.as_millis() as u64)
            .collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 64]);
        let error = std::io::Error::other("no descriptors");
        assert_eq!(
            backoff.gave_up("accepting connections", &error),
            "accepting connections stayed broken through 8 tries over 127 ms: no descriptors"
        );
        backoff.succeeded();
        assert_eq!(backoff.failed(), Some(FIRST_PAUSE));
    }
}

mod owed {
    //! What a connection owes: an answer while one is made or sent, nothing while it carries an
    //! event stream, and again an answer for each request after that stream ends.

    use std::sync::Arc;

    use crate::server::connections::{Owed, Owing};

    #[test]
    fn a_connection_owes_answers_again_once_its_event_stream_ends() {
        let owed = Arc::new(Owed::default());
        let stream = Owing::new(owed.clone()).a_stream();
        assert!(!owed.busy(), "an event stream owes nothing");
        drop(stream);
        assert!(owed.idle());
        let answer = Owing::new(owed.clone());
        assert!(
            owed.busy(),
            "the next request on the connection is owed its answer"
        );
        drop(answer);
        assert!(owed.idle() && !owed.busy());
    }
}

mod shutdown {
    //! Both fronts shut down cleanly whatever outsiders do: the listener closes, a connection that
    //! is not serving a request — silent, or halfway through a head it never finishes — is closed at
    //! once rather than after the drain limit, every handler is joined, and the old port refuses.

    use std::io::{Read, Write};
    use std::net::TcpStream;

    use std::time::{Duration, Instant};

    use super::Case;

    use crate::policy::Mode;
    use crate::server::Front;

    /// A silent client and a client that stops in the middle of a request head do not hold the
    /// shutdown up on either front: both are closed, nothing is aborted, no error is reported.
    #[tokio::test]
    async fn outsiders_that_never_finish_a_request_do_not_hold_the_shutdown() {
        for front in Front::ALL {
            let policy = Case::new(Mode::Shared, 2, 1).policy();
            // A drain limit far longer than the test may take: reaching it would be the failure.
            let drain_limit = Duration::from_secs(30);
            let super::Bare {
                census,
                address,
                running,
                ..
            } = super::bare(front, policy, drain_limit);

            let silent = TcpStream::connect(address).expect("the server accepts");
            let mut partial = TcpStream::connect(address).expect("the server accepts");
            partial
                .write_all(b"GET /slow HTTP/1.1\r\nlab-request: S1\r\n")
                .expect("half a head is sent");
            // Both are served once a handler is alive for each: wait for that, not for time.
            // The drain limit bounds the wait too: only a stalled front reaches it.
            let waited = Instant::now();
            while census.live() < 2 {
                let waiting = waited.elapsed();
                assert!(waiting < drain_limit, "{front:?}: never served");
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
}

mod screening {
    //! What each front answers before admission, to the run's own token: 404 for a path it
    //! does not serve, 405 for a method its routes do not take (saying which they take), 400
    //! for a route without its request label; none reaches the section.

    use super::Case;

    use crate::admission::token::TOKEN_HEADER;
    use crate::coordinator::SAFETY_TIMEOUT;
    use crate::label::LABEL_HEADER;
    use crate::policy::Mode;
    use crate::server::Front;

    #[tokio::test]
    async fn strays_are_answered_before_admission() {
        for front in Front::ALL {
            let policy = Case::new(Mode::Shared, 2, 1).policy();
            let bare = super::bare(front, policy, SAFETY_TIMEOUT);
            let client = super::client();
            let strays = [
                (
                    reqwest::Method::GET,
                    "/nowhere",
                    Some("F1"),
                    404,
                    "not_found",
                ),
                (
                    reqwest::Method::POST,
                    "/slow",
                    Some("S1"),
                    405,
                    "method_not_allowed",
                ),
                (
                    reqwest::Method::GET,
                    "/fast",
                    None,
                    400,
                    "missing_or_wrong_request_label",
                ),
            ];
            for (method, path, label, status, error) in strays {
                let request = client.request(method, format!("http://{}{path}", bare.address));
                let mut request = request.header(TOKEN_HEADER, bare.token.header_value());
                if let Some(label) = label {
                    request = request.header(LABEL_HEADER, label);
                }
                let response = request.send().await.expect("the server answers");
                let context = format!("{front:?} {path}");
                assert_eq!(response.status().as_u16(), status, "{context}");
                let allow = response.headers().get("allow").cloned();
                let allowed = (status == 405).then(|| "GET".parse().expect("a header value"));
                assert_eq!(allow, allowed, "{context}");
                let body = response.bytes().await.expect("a whole body");
                let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
                assert_eq!(body["error"], error, "{context}: {body}");
            }
            assert_eq!(
                bare.section.events(),
                [],
                "{front:?}: none reached admission"
            );
            let stopped = bare.running.stop().await.expect("the server stops");
            assert_eq!(stopped.error, None, "{front:?}: {:?}", stopped.summary);
            drop(client);
        }
    }
}

mod foreign {
    //! Only the run's own callers can take a permit: requests without the run's token are refused
    //! with 403 before admission and leave no trace in the pools, the ledger or the model.

    use super::Case;

    use crate::admission::token::{RunToken, TOKEN_HEADER};
    use crate::coordinator::SAFETY_TIMEOUT;

    use crate::label::LABEL_HEADER;
    use crate::policy::Mode;
    use crate::server::Front;

    /// Straight at each front: no token, a wrong token, an empty one, or any path without one all
    /// get 403 and no work event; only the right token reaches admission.
    #[tokio::test]
    async fn only_the_run_token_reaches_admission() {
        for front in Front::ALL {
            let policy = Case::new(Mode::Partitioned, 2, 1).policy();
            let wrong = RunToken::generate().expect("the OS has randomness");
            let super::Bare {
                section,
                token,
                address,
                running,
                ..
            } = super::bare(front, policy, SAFETY_TIMEOUT);
            let client = super::client();

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
            assert!(
                stopped.summary.listener_closed,
                "{front:?}: the listener is still open"
            );
        }
    }
}

mod drop_front {
    //! Dropping a running threaded server without stopping it — what happens to a run cancelled by
    //! a `tokio::time::timeout` around it — returns at once, even with work held at the gate, so
    //! the Tokio runtime that drops it goes on running its other tasks; the held work is abandoned.

    use std::io::{Read, Write};
    use std::net::TcpStream;

    use std::sync::mpsc as std_mpsc;
    use std::time::Duration;

    use super::Case;
    use crate::admission::ledger::{Event, WorkEvent};

    use crate::admission::token::TOKEN_HEADER;

    use crate::label::{LABEL_HEADER, Label};
    use crate::policy::Mode;
    use crate::server::Front;
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
        let policy = Case::new(Mode::Shared, 2, 1).policy();
        let super::Bare {
            section,
            token,
            address,
            running,
            ..
        } = super::bare(Front::Threaded, policy, DRAIN);
        // Subscribed before any request is sent, so it misses nothing.
        let (_, mut events) = section.subscribe();

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
}

#[cfg(unix)]
mod accept_retry {
    //! A brief shortage of file descriptors does not end a server: its accept fails, it pauses and
    //! tries again, and the connection that was waiting is served. The test runs alone in a
    //! process of its own (`test_child::alone`), since it takes every descriptor the process may
    //! open.

    use std::fs::File;
    use std::io::{self, Read, Seek, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::sync::Arc;
    use std::sync::mpsc as std_mpsc;
    use std::thread;
    use std::time::{Duration, Instant};

    use crate::admission::section::WorkSection;

    use crate::hooks::NoHooks;
    use crate::policy::Mode;
    use crate::server::{Front, FrontCensus, Stopped, async_front};
    use tokio::sync::oneshot;

    /// A failure guard on each wait; never reached when the server works.
    const GUARD: Duration = Duration::from_secs(30);

    /// Tries of the whole scenario: one is enough unless the test itself was kept off the CPU for
    /// longer than the server's retries last (about 0.13 s), which the server's report then shows.
    const TRIES: usize = 5;

    /// On both fronts: every descriptor is taken but one, a client connects with that one, and so
    /// the server's accept fails (too many open files). The test waits until the server has
    /// handled that — the thread that accepts has blocked again, which the kernel counts — then
    /// gives the descriptors back. The server must then serve the waiting connection (a 403: it
    /// carries no token) and stop cleanly, having counted it. A server that ended at its first
    /// accept error would instead have closed its listener, resetting the waiting connection.
    #[test]
    fn a_brief_descriptor_shortage_does_not_end_the_server() {
        if crate::child::test_child::alone() {
            return;
        }
        if !cfg!(target_os = "linux") {
            let _ = writeln!(
                std::io::stderr(),
                "skipped: the test reads /proc to see the server's thread block"
            );
            return;
        }
        for front in Front::ALL {
            let mut tries = 0;
            loop {
                tries += 1;
                match shortage(front) {
                    Shortage::Served(stopped) => {
                        assert_eq!(stopped.error, None, "{front:?}");
                        assert_eq!(stopped.summary.connections_accepted, 1, "{front:?}");
                        assert!(stopped.summary.connection_tasks_stopped, "{front:?}");
                        break;
                    }
                    // The server did retry, for longer than the test was away: try again.
                    Shortage::GaveUp(reason) if tries < TRIES => {
                        eprintln!("{front:?}: inconclusive, retrying: {reason}");
                    }
                    Shortage::GaveUp(reason) | Shortage::Failed(reason) => {
                        panic!("{front:?}: the waiting connection was not served: {reason}")
                    }
                }
            }
        }
    }

    enum Shortage {
        /// The waiting connection was served; the server's report.
        Served(Stopped),
        /// The server retried until its pauses ran out.
        GaveUp(String),
        /// Anything else.
        Failed(String),
    }

    /// A server of either front, with the thread its accepting runs on, and how to stop it.
    struct Serving {
        address: SocketAddr,
        accepting_thread: u32,
        stop: Box<dyn FnOnce() -> anyhow::Result<Stopped>>,
    }

    fn shortage(front: Front) -> Shortage {
        let serving = match front {
            Front::Async => serve_async(),
            Front::Threaded => serve_threaded(),
        };
        let path = format!("/proc/self/task/{}/status", serving.accepting_thread);
        let mut status = File::open(path).expect("the thread's status");
        let before = blocked(&mut status).expect("the thread is alive");

        // Take every descriptor, then give one back for the client.
        let mut taken = Vec::new();
        loop {
            match File::open("/dev/null") {
                Ok(file) => taken.push(file),
                Err(e) if e.raw_os_error() == Some(24) => break,
                Err(e) => panic!("opening /dev/null: {e}"),
            }
        }
        taken.pop();
        let connected = TcpStream::connect(serving.address);
        let waited = connected.and_then(|mut client| {
            client.write_all(REQUEST.as_bytes())?;
            // The server wakes for this connection, fails to accept it, and blocks again: in its
            // pause, or (a server that gave up) wherever it waits next, or it is gone.
            let until = Instant::now() + GUARD;
            while blocked(&mut status).is_some_and(|now| now == before) && Instant::now() < until {
                thread::yield_now();
            }
            Ok(client)
        });
        drop(taken);

        let reply = waited.and_then(reply);
        let stopped = (serving.stop)();
        match (reply, stopped) {
            (Ok(reply), Ok(stopped)) if reply.starts_with("HTTP/1.1 403") => {
                Shortage::Served(stopped)
            }
            (_, Ok(stopped))
                if stopped
                    .error
                    .as_deref()
                    .is_some_and(|e| e.contains("stayed broken")) =>
            {
                Shortage::GaveUp(stopped.error.unwrap_or_default())
            }
            (reply, stopped) => Shortage::Failed(format!(
                "reply {reply:?}; server {:?}",
                stopped.map(|s| (s.summary, s.error))
            )),
        }
    }

    /// A request without the run's token: answered 403 on either front, then closed.
    const REQUEST: &str = "GET /fast HTTP/1.1\r\nhost: lab\r\nconnection: close\r\n\r\n";

    /// The whole reply on `client`, read until the server closes it.
    fn reply(mut client: TcpStream) -> io::Result<String> {
        client.set_read_timeout(Some(GUARD))?;
        let mut reply = String::new();
        client.read_to_string(&mut reply)?;
        Ok(reply)
    }

    /// How many times the thread has blocked (its voluntary context switches), or `None` once it
    /// has ended. Reads an already open file: no descriptor is needed.
    fn blocked(status: &mut File) -> Option<u64> {
        let mut text = String::new();
        status.rewind().ok()?;
        status.read_to_string(&mut text).ok()?;
        crate::procfs::number_field(&text, "voluntary_ctxt_switches")
    }

    fn section() -> (Arc<WorkSection>, Arc<FrontCensus>) {
        let policy = super::Case::new(Mode::Shared, 2, 1).policy();
        let (section, _) = super::section(Front::Async, policy);
        (section, Arc::new(FrontCensus::default()))
    }

    /// The async front on a current-thread runtime of its own thread, which is then the thread
    /// that accepts.
    fn serve_async() -> Serving {
        let (section, census) = section();
        let (ready, address) = std_mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let runner = thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let bound = crate::server::bind_loopback().expect("127.0.0.1:0 binds");
                let (gates, dispatch) = (Default::default(), Default::default());
                let server = async_front::AsyncListener::from_std(bound, gates, dispatch)
                    .expect("the listener serves");
                let me = super::this_thread();
                ready
                    .send((server.address(), me))
                    .expect("the test listens");
                let shutdown = async {
                    let _ = stopped.await;
                };
                let hooks = Arc::new(NoHooks);
                server.serve(section, census, hooks, shutdown, GUARD).await
            })
        });
        let (address, accepting_thread) = address.recv().expect("the server starts");
        Serving {
            address,
            accepting_thread,
            stop: Box::new(move || {
                let _ = stop.send(());
                runner
                    .join()
                    .map_err(|_| anyhow::anyhow!("the server's thread panicked"))
            }),
        }
    }

    /// The threaded front: its accept thread accepts.
    fn serve_threaded() -> Serving {
        let (section, census) = section();
        let before = super::threads().expect("Linux /proc");
        let started = super::start(Front::Threaded, section, census, Arc::new(NoHooks), GUARD);
        let (address, running) = started.expect("127.0.0.1:0 binds");
        // The one thread that starting the server added is its accept thread.
        let added: Vec<u32> = super::threads()
            .expect("Linux /proc")
            .difference(&before)
            .copied()
            .collect();
        let [accepting_thread] = added[..] else {
            panic!("starting the server added threads {added:?}, not one");
        };
        Serving {
            address,
            accepting_thread,
            stop: Box::new(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(running.stop())
            }),
        }
    }
}

#[cfg(unix)]
mod spawn_failure {
    //! A connection whose thread cannot start is closed unserved and reported, is not counted as
    //! accepted, and does not end the threaded server. The test runs alone in a process of its own
    //! (`test_child::alone`), since it limits the whole process's address space for a moment.

    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::time::{Duration, Instant};

    use crate::limits::{Resource, set_soft};
    use crate::policy::Mode;
    use crate::procfs::ProcessStat;
    use crate::server::Front;

    /// A failure guard on each read; never reached when the server works.
    const GUARD: Duration = Duration::from_secs(30);

    /// Room left in the address space while the limit holds: enough for small allocations, not for
    /// a thread's stack (2 MiB by default).
    const ROOM: u64 = 1024 * 1024;

    /// What a new thread's stack takes at least: more than [`ROOM`].
    const STACK: usize = 2 * 1024 * 1024;

    /// With the address space limited so that no new thread's stack fits, a client connects: the
    /// threaded server accepts it, cannot start its thread, and closes it. With the limit lifted, a
    /// second client is served. Stopped, the server counts one connection (the one with a thread),
    /// every counted handler joined, and reports the one it closed unserved.
    #[test]
    fn a_connection_whose_thread_cannot_start_is_closed_and_the_server_goes_on() {
        if crate::child::test_child::alone() {
            return;
        }
        let policy = super::Case::new(Mode::Shared, 2, 1).policy();
        let super::Bare {
            address, running, ..
        } = super::bare(Front::Threaded, policy, GUARD);

        // The address space is measured once no other thread can change it: the server's accept
        // thread maps memory of its own as it starts (64 MiB more here), and a figure read before
        // or while it does is not the one the limit then meets.
        until_others_wait();
        let mapped = mapped_bytes().expect("Linux /proc/self/status");
        let limit = mapped + ROOM;
        set_soft(Resource::AddressSpace, Some(limit)).expect("the soft limit is lowered");
        let room = stack_fits();
        let first = ask(address);
        let lifted = set_soft(Resource::AddressSpace, None);
        assert!(lifted.is_ok(), "the limit was not lifted: {lifted:?}");
        assert!(
            !room,
            "RLIMIT_AS {limit} (VmSize {mapped} bytes) still left room for a thread's stack"
        );
        let first = first.expect("the client connects");
        assert_eq!(first, "", "closed unserved: no reply");

        let second = ask(address).expect("the server still accepts");
        assert!(second.starts_with("HTTP/1.1 403"), "{second}");

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let stopped = runtime.block_on(running.stop()).expect("the server stops");
        let summary = stopped.summary;
        assert_eq!(summary.connections_accepted, 1, "{summary:?}");
        assert!(summary.connection_tasks_stopped, "{summary:?}");
        let error = stopped.error.unwrap_or_default();
        assert!(
            error.contains("closed 1 connection unserved"),
            "the server reports the connection it could not serve: {error:?}"
        );
    }

    /// A request without the run's token on a new connection, and whatever came back before the
    /// server closed it (a reset counts as nothing).
    fn ask(address: SocketAddr) -> std::io::Result<String> {
        let mut client = TcpStream::connect(address)?;
        client.write_all(b"GET /fast HTTP/1.1\r\nhost: lab\r\nconnection: close\r\n\r\n")?;
        client.set_read_timeout(Some(GUARD))?;
        let mut reply = Vec::new();
        match client.read_to_end(&mut reply) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            read => {
                read?;
            }
        }
        Ok(String::from_utf8_lossy(&reply).into_owned())
    }

    /// Returns once every other thread of this process is blocked in the kernel, waiting (`S`
    /// in its `/proc` stat): the harness waiting for this test, the accept thread waiting for a
    /// connection. None of them maps or unmaps memory until woken, and nothing wakes them before
    /// the limit is set. It watches their state, not a clock: the guard only fails a thread
    /// that never waits.
    fn until_others_wait() {
        let me = super::this_thread();
        let until = Instant::now() + GUARD;
        loop {
            let others = super::threads().expect("Linux /proc");
            // A thread that ended meanwhile has no stat: it maps nothing more either.
            let waiting = (others.into_iter().filter(|&id| id != me))
                .all(|id| ProcessStat::read(id).map_or(true, |stat| stat.state == 'S'));
            if waiting {
                return;
            }
            assert!(
                Instant::now() < until,
                "the process's other threads never all waited"
            );
            std::thread::yield_now();
        }
    }

    /// Whether a thread's stack could be mapped now (it is unmapped again at once).
    fn stack_fits() -> bool {
        // SAFETY: a fresh private anonymous mapping, touching no existing memory; unmapped below.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STACK,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return false;
        }
        // SAFETY: `at` is the mapping just made, of `STACK` bytes.
        unsafe { libc::munmap(at, STACK) };
        true
    }

    /// The process's mapped address space now.
    fn mapped_bytes() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        Some(crate::procfs::kib_field(&status, "VmSize")? * 1024)
    }
}

#[cfg(unix)]
mod thread_count {
    //! The threaded front's threads are all gone once it has stopped, so `after_run.os_threads`
    //! is exact: equal to the count before the run, on every run. The test runs alone in a process
    //! of its own (`test_child::alone`), so no other test's threads come and go while it counts.

    use std::io::{Read, Write};
    use std::net::TcpStream;

    use super::Case;

    use crate::coordinator::{Options, run_policy_with};

    use crate::policy::Mode;
    use crate::resources::os_threads;
    use crate::server::Front;

    /// Whole threaded policy runs, each read from its report.
    const RUNS: usize = 40;

    /// Bare start-serve-stop cycles: the accept thread is joined last, just before the count, so
    /// this is where a thread the kernel still lists would show.
    const CYCLES: usize = 400;

    /// On a current-thread runtime (no thread of its own), every threaded run reports, after it
    /// has closed everything, exactly the threads the process had before it; and after each bare
    /// cycle — one connection served, then `stop` — the count is back where it started. A thread
    /// that `join` has returned for can still be listed by the kernel for a moment, so a count
    /// taken at once was one too many in about one run in a thousand.
    #[test]
    fn every_threaded_run_ends_with_the_threads_it_started_with() {
        if crate::child::test_child::alone() {
            return;
        }
        let Some(before) = os_threads() else {
            let _ = writeln!(
                std::io::stderr(),
                "skipped: this OS does not list a process's threads in /proc/self/task"
            );
            return;
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        for run in 0..RUNS {
            let case = Case::new(Mode::ALL[run % 2], 2, 2);
            let options = Options::on(Front::Threaded);
            let ran = runtime.block_on(run_policy_with(case.policy(), case.held(), options));
            assert_eq!(ran.failure, None, "run {run}");
            let after = ran
                .report
                .resources
                .after_run
                .expect("counted after the run");
            assert_eq!(after.os_threads, Some(before), "run {run}: {after:?}");
        }
        for cycle in 0..CYCLES {
            let policy = super::Case::new(Mode::Shared, 2, 1).policy();
            let drain_limit = std::time::Duration::from_secs(5);
            let super::Bare {
                address, running, ..
            } = super::bare(Front::Threaded, policy, drain_limit);
            // One request without the run's token: answered 403, and the connection closes.
            let mut client = TcpStream::connect(address).expect("the server accepts");
            let request = "GET /fast HTTP/1.1\r\nhost: lab\r\nconnection: close\r\n\r\n";
            client.write_all(request.as_bytes()).expect("sent");
            let mut reply = String::new();
            client.read_to_string(&mut reply).expect("a reply");
            assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
            let stopped = runtime.block_on(running.stop()).expect("the server stops");
            assert_eq!(stopped.error, None);
            assert_eq!(os_threads(), Some(before), "cycle {cycle}");
        }
    }
}
