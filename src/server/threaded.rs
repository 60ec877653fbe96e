//! The threaded front: `std::net::TcpListener`, one OS thread per accepted connection, request
//! heads parsed with `httparse` (Hyper's own parser), blocking bounded semaphores and the gate's
//! `Condvar` wait. A held request blocks its thread. Connections are kept alive between
//! requests, as the async front's are, so a thread lives exactly as long as its connection.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc as std_mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::json;
use tokio::sync::oneshot;

use super::{Census, Handlers, Head, Reply, Stopped, answer, screen, work_blocking};
use crate::admission::section::WorkSection;
use crate::admission::token::TOKEN_HEADER;
use crate::faults::Faults;
use crate::label::LABEL_HEADER;

/// The most a request head may take; the lab's own are a few hundred bytes.
const MAX_HEAD: usize = 8 * 1024;

/// A bound listener on the lab's only address: an ephemeral port on the IPv4 loopback.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    address: SocketAddr,
}

/// The accept thread, and how to tell it to stop. Dropping it without [`Running::stop`] still
/// stops and joins the thread, so an abandoned run leaves nothing behind.
#[derive(Debug)]
pub struct Running {
    address: SocketAddr,
    stopping: Arc<AtomicBool>,
    stopped: Option<oneshot::Receiver<Stopped>>,
    thread: Option<JoinHandle<()>>,
}

/// One accepted connection, as its accept thread keeps it until the thread ends.
struct Connection {
    thread: JoinHandle<()>,
    /// A second handle on the socket, to unblock a read at shutdown.
    stream: TcpStream,
    /// Set while the connection has a whole request and is serving it; clear while it waits
    /// for (the rest of) a request, which is when shutdown may close it.
    in_work: Arc<AtomicBool>,
}

/// What a connection thread shares with the accept thread.
struct Shared {
    section: Arc<WorkSection>,
    faults: Arc<Faults>,
    census: Arc<Census>,
    stopping: Arc<AtomicBool>,
    /// Each connection thread sends its id here as its last act.
    ended: std_mpsc::Sender<u64>,
}

impl Server {
    /// Binds `127.0.0.1:0`.
    pub fn bind() -> io::Result<Self> {
        let (listener, address) = super::bind_loopback()?;
        Ok(Server { listener, address })
    }

    /// The address the server listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Starts the accept thread, which serves until [`Running::stop`].
    pub fn start(
        self,
        section: Arc<WorkSection>,
        census: Arc<Census>,
        faults: Arc<Faults>,
        drain_limit: Duration,
    ) -> io::Result<Running> {
        let address = self.address;
        let stopping = Arc::new(AtomicBool::new(false));
        let (report, stopped) = oneshot::channel();
        let flag = stopping.clone();
        let thread = thread::Builder::new()
            .name("lab-accept".into())
            .spawn(move || {
                let summary = self.serve(section, census, faults, flag, drain_limit);
                // The receiver is gone only if the coordinator itself went away.
                let _ = report.send(summary);
            })?;
        Ok(Running {
            address,
            stopping,
            stopped: Some(stopped),
            thread: Some(thread),
        })
    }

    /// The accept loop, then the drain: see [`Running::stop`].
    fn serve(
        self,
        section: Arc<WorkSection>,
        census: Arc<Census>,
        faults: Arc<Faults>,
        stopping: Arc<AtomicBool>,
        drain_limit: Duration,
    ) -> Stopped {
        let Server { listener, address } = self;
        let (ended, finished) = std_mpsc::channel();
        let shared = Arc::new(Shared {
            section: section.clone(),
            faults,
            census,
            stopping: stopping.clone(),
            ended,
        });
        let mut connections = Connections::default();
        let mut accepted = 0;
        let mut error = None;
        for incoming in listener.incoming() {
            if stopping.load(Ordering::SeqCst) {
                // The wake-up connection from `stop`, or one that came too late: not served.
                break;
            }
            // Join the connections that ended, so nothing grows with their number.
            connections.reap(&finished);
            let spawned = incoming.and_then(|stream| {
                accepted += 1;
                spawn_connection(accepted, stream, shared.clone())
            });
            match spawned {
                Ok(connection) => {
                    connections.open.insert(accepted, connection);
                }
                Err(e) => {
                    error = Some(format!(
                        "the threaded server could not serve a connection: {e}"
                    ));
                    break;
                }
            }
        }
        // Stop accepting: from here on the port refuses connections.
        drop(listener);
        drop(shared);

        // `stopping` is set, so a connection between requests ends by itself; one that is not
        // serving a request (waiting for one, or for the rest of a head a client may never
        // finish) is closed now. The two checks are ordered (SeqCst) so one of them catches it.
        for connection in connections.open.values() {
            if !connection.in_work.load(Ordering::SeqCst) {
                let _ = connection.stream.shutdown(Shutdown::Both);
            }
        }
        let deadline = Instant::now() + drain_limit;
        while !connections.open.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match finished.recv_timeout(left) {
                Ok(id) => connections.join(id, false),
                Err(_) => break,
            }
        }
        if !connections.open.is_empty() {
            // A thread cannot be aborted from outside. What can keep one busy this long is
            // work at a gate that never opened: abandon the gate, and break every socket's
            // blocking I/O, then wait for each to end.
            section.abandon_gate();
            for connection in connections.open.values() {
                let _ = connection.stream.shutdown(Shutdown::Both);
            }
            error.get_or_insert(format!(
                "connection threads were still busy {} s after the server stopped accepting; \
                 their held work was abandoned",
                drain_limit.as_secs()
            ));
            let forced: Vec<u64> = connections.open.keys().copied().collect();
            for id in forced {
                connections.join(id, true);
            }
        }
        connections
            .ended
            .stopped(address, accepted, &section, error)
    }
}

/// The accept thread's connections: the open ones, and how the ended ones ended.
#[derive(Default)]
struct Connections {
    open: HashMap<u64, Connection>,
    ended: Handlers,
}

impl Connections {
    /// Joins every connection that has said it ended.
    fn reap(&mut self, finished: &std_mpsc::Receiver<u64>) {
        while let Ok(id) = finished.try_recv() {
            self.join(id, false);
        }
    }

    /// Joins connection `id`: one that said it ended (its thread is returning), or one that
    /// was `forced` to stop after the drain limit, which counts as aborted. A panic counts as
    /// a panic either way.
    fn join(&mut self, id: u64, forced: bool) {
        let Some(connection) = self.open.remove(&id) else {
            return;
        };
        match connection.thread.join() {
            Err(panic) => self.ended.panicked.push(format!(
                "a connection thread panicked: {}",
                panic_message(panic.as_ref())
            )),
            Ok(()) if forced => self.ended.aborted += 1,
            Ok(()) => self.ended.completed += 1,
        }
    }
}

impl Running {
    /// Stops accepting (a flag, and one connection of its own to wake the blocked `accept`),
    /// closes the listener, closes connections that are not serving a request, waits for the
    /// rest to finish their work within the drain limit (then abandons the gate and breaks
    /// their sockets), joins every thread, and reports.
    pub async fn stop(mut self) -> Result<Stopped, String> {
        self.signal();
        let stopped = match self.stopped.take() {
            Some(stopped) => stopped.await,
            None => return Err("the threaded server was already stopped".into()),
        };
        // The thread sends its report as its last act, so this join returns at once.
        let joined = self.thread.take().map_or(Ok(()), JoinHandle::join);
        match (stopped, joined) {
            (Ok(stopped), Ok(())) => Ok(stopped),
            (_, Err(panic)) => Err(format!(
                "the accept thread panicked: {}",
                panic_message(panic.as_ref())
            )),
            (Err(_), Ok(())) => Err("the accept thread ended without a report".into()),
        }
    }

    /// Tells the accept thread to stop, once.
    fn signal(&self) {
        if !self.stopping.swap(true, Ordering::SeqCst) {
            // Refused if the accept thread already left its loop (an accept error): then there
            // is nothing to wake. A loopback connect to a listening socket does not wait.
            let _ = TcpStream::connect(self.address);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.signal();
            let _ = thread.join();
        }
    }
}

/// Starts the thread that serves connection `id`: request after request until the client
/// closes, a request asks to close, or the server stops.
fn spawn_connection(id: u64, stream: TcpStream, shared: Arc<Shared>) -> io::Result<Connection> {
    // Each response is one small write; send it at once rather than wait to coalesce.
    stream.set_nodelay(true)?;
    let handle = stream.try_clone()?;
    let in_work = Arc::new(AtomicBool::new(false));
    let working = in_work.clone();
    let thread = thread::Builder::new()
        .name("lab-connection".into())
        .spawn(move || {
            // Both guards also act while a panic unwinds: the census counts the handler out,
            // and the connection closes and tells the accept thread it ended.
            let _live = shared.census.enter();
            let mut ending = Ending {
                id,
                stream,
                shared: shared.clone(),
            };
            serve_connection(&mut ending.stream, &shared, &working);
        })?;
    Ok(Connection {
        thread,
        stream: handle,
        in_work,
    })
}

/// A connection's last act, on every way out of its thread: shut the socket down (the accept
/// thread holds a second handle, so dropping this one would not close it, and a caller would
/// wait for an answer that never comes), then tell the accept thread it ended.
struct Ending {
    id: u64,
    stream: TcpStream,
    shared: Arc<Shared>,
}

impl Drop for Ending {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
        let _ = self.shared.ended.send(self.id);
    }
}

fn serve_connection(stream: &mut TcpStream, shared: &Shared, in_work: &AtomicBool) {
    let mut buffer = Vec::with_capacity(1024);
    loop {
        let head = match read_head(stream, &mut buffer) {
            // The peer closed, or the server shut the socket, before a whole request arrived.
            Ok(None) | Err(_) => return,
            Ok(Some(head)) => head,
        };
        in_work.store(true, Ordering::SeqCst);
        let (reply, keep_alive) = match head {
            Ok(request) => {
                let head = Head {
                    is_get: request.method == "GET",
                    path: &request.path,
                    token: request.token.as_deref(),
                    label: request.label.as_deref(),
                };
                let reply = match screen(&shared.section, head) {
                    Ok((label, route)) => {
                        let verdict = work_blocking(&shared.section, &shared.faults, label, route);
                        answer(label, verdict)
                    }
                    Err(reply) => reply,
                };
                (reply, request.keep_alive)
            }
            Err(reply) => (reply, false),
        };
        // A caller that went away while its work was held cannot be told; the work is done.
        let written = write_reply(stream, &reply, keep_alive);
        in_work.store(false, Ordering::SeqCst);
        if written.is_err() || !keep_alive || shared.stopping.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// The parts of a request head the lab reads.
struct RequestHead {
    method: String,
    path: String,
    token: Option<Vec<u8>>,
    label: Option<Vec<u8>>,
    /// HTTP/1.1 without `Connection: close`, and no body to skip.
    keep_alive: bool,
}

/// Reads one request head from `stream`, keeping in `buffer` whatever follows it: `None` if
/// the stream ends first, an error reply if it is not HTTP or too large.
fn read_head(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
) -> io::Result<Option<Result<RequestHead, Reply>>> {
    let mut chunk = [0; 1024];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        let refuse = |status, error| {
            Ok(Some(Err(Reply {
                status,
                body: json!({ "error": error }),
            })))
        };
        match request.parse(buffer) {
            Ok(httparse::Status::Complete(length)) => {
                let head = RequestHead::from(&request);
                buffer.drain(..length);
                return Ok(Some(Ok(head)));
            }
            Ok(httparse::Status::Partial) if buffer.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => {
                return refuse(
                    StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                    "request_head_too_large",
                );
            }
            Err(_) => return refuse(StatusCode::BAD_REQUEST, "malformed_request"),
        }
        let read = stream.read(&mut chunk)?;
        if read == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

impl From<&httparse::Request<'_, '_>> for RequestHead {
    fn from(request: &httparse::Request<'_, '_>) -> Self {
        let header = |name: &str| {
            let found = request
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name));
            found.map(|h| h.value)
        };
        let says = |name: &str, value: &str| {
            header(name).is_some_and(|v| String::from_utf8_lossy(v).eq_ignore_ascii_case(value))
        };
        // A body would have to be read past before the next request; the lab's requests have
        // none, so a request that has one closes its connection instead.
        let body = header("content-length").is_some_and(|v| v != b"0")
            || header("transfer-encoding").is_some();
        RequestHead {
            method: request.method.unwrap_or_default().to_owned(),
            // The path without a query string, as Hyper's `uri().path()` gives it.
            path: request
                .path
                .unwrap_or_default()
                .split('?')
                .next()
                .unwrap_or_default()
                .to_owned(),
            token: header(TOKEN_HEADER).map(<[u8]>::to_vec),
            label: header(LABEL_HEADER).map(<[u8]>::to_vec),
            keep_alive: request.version == Some(1) && !says("connection", "close") && !body,
        }
    }
}

fn write_reply(stream: &mut TcpStream, reply: &Reply, keep_alive: bool) -> io::Result<()> {
    let body = reply.body.to_string();
    let status = reply.status;
    let reason = status.canonical_reason().unwrap_or("");
    let connection = if keep_alive { "keep-alive" } else { "close" };
    // One write for head and body: two small writes on a kept-alive connection would let
    // Nagle's algorithm hold the second until the client's delayed ACK.
    let response = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: {connection}\r\n\r\n{body}",
        status.as_u16(),
        body.len()
    );
    stream.write_all(response.as_bytes())?;
    stream.flush()
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic.downcast_ref::<&str>().copied();
    let text = text.or_else(|| panic.downcast_ref::<String>().map(String::as_str));
    text.unwrap_or("(not a message)").to_owned()
}
