//! The threaded front: `std::net::TcpListener`, one OS thread per accepted connection, request
//! heads parsed with `httparse` (Hyper's own parser), blocking bounded semaphores and the gate's
//! `Condvar` wait. A held request blocks its thread. Every response closes its connection, as
//! the workshop's Python runner (HTTP/1.0 style) does, so no connection outlives its request.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc as std_mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::json;
use tokio::sync::oneshot;

use super::{Census, Handlers, Head, Reply, Stopped, answer, screen};
use crate::admission::section::WorkSection;
use crate::admission::token::TOKEN_HEADER;
use crate::label::LABEL_HEADER;

/// The most a request head may take; the lab's own are a few hundred bytes.
const MAX_HEAD: usize = 8 * 1024;

/// A bound listener on the lab's only address: an ephemeral port on the IPv4 loopback.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    address: SocketAddr,
}

/// The accept thread, and how to tell it to stop.
#[derive(Debug)]
pub struct Running {
    address: SocketAddr,
    stopping: Arc<AtomicBool>,
    stopped: oneshot::Receiver<Stopped>,
    thread: JoinHandle<()>,
}

/// One accepted connection, as its accept thread keeps it.
struct Connection {
    thread: JoinHandle<()>,
    /// A second handle on the socket, to unblock a read at shutdown.
    stream: TcpStream,
    /// Set once the connection has a whole request: from then on it is finishing work, and
    /// shutdown lets it; before, it is only waiting for bytes, and shutdown closes it.
    in_work: Arc<AtomicBool>,
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
        drain_limit: Duration,
    ) -> io::Result<Running> {
        let address = self.address;
        let stopping = Arc::new(AtomicBool::new(false));
        let (report, stopped) = oneshot::channel();
        let flag = stopping.clone();
        let thread = thread::Builder::new()
            .name("lab-accept".into())
            .spawn(move || {
                let summary = self.serve(&section, &census, &flag, drain_limit);
                // The receiver is gone only if the coordinator itself went away.
                let _ = report.send(summary);
            })?;
        Ok(Running {
            address,
            stopping,
            stopped,
            thread,
        })
    }

    /// The accept loop, then the drain: see [`Running::stop`].
    fn serve(
        self,
        section: &Arc<WorkSection>,
        census: &Arc<Census>,
        stopping: &AtomicBool,
        drain_limit: Duration,
    ) -> Stopped {
        let Server { listener, address } = self;
        let (done, finished) = std_mpsc::channel::<()>();
        let mut connections = Vec::new();
        let mut accepted = 0;
        let mut error = None;
        for incoming in listener.incoming() {
            if stopping.load(Ordering::SeqCst) {
                // The wake-up connection from `stop`, or one that came too late: not served.
                break;
            }
            let spawned = incoming.and_then(|stream| {
                accepted += 1;
                spawn_connection(stream, section.clone(), census.clone(), done.clone())
            });
            match spawned {
                Ok(connection) => connections.push(connection),
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
        drop(done);

        // A connection still waiting for its request closes now; one with work finishes it.
        for connection in &connections {
            if !connection.in_work.load(Ordering::SeqCst) {
                let _ = connection.stream.shutdown(Shutdown::Both);
            }
        }
        let mut handlers = Handlers::default();
        let deadline = Instant::now() + drain_limit;
        let mut ended = 0;
        while ended < connections.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            match finished.recv_timeout(left) {
                Ok(()) => ended += 1,
                Err(_) => break,
            }
        }
        if ended < connections.len() {
            // A thread cannot be aborted from outside. What can hold one this long is work at
            // a gate that never opened: abandon the gate, and break every socket's blocking I/O.
            section.abandon_gate();
            for connection in &connections {
                let _ = connection.stream.shutdown(Shutdown::Both);
            }
            handlers.aborted = (connections.len() - ended) as u64;
            error.get_or_insert(format!(
                "connection threads were still busy {} s after the server stopped accepting; \
                 their held work was abandoned",
                drain_limit.as_secs()
            ));
        }
        for connection in connections {
            match connection.thread.join() {
                Ok(()) => handlers.completed += 1,
                Err(panic) => handlers.panicked.push(format!(
                    "a connection thread panicked: {}",
                    panic_message(panic.as_ref())
                )),
            }
        }
        // The aborted threads were also joined above; count each once.
        handlers.completed -= handlers.aborted.min(handlers.completed);
        handlers.stopped(address, accepted, section, error)
    }
}

impl Running {
    /// Stops accepting (a flag, and one connection of its own to wake the blocked `accept`),
    /// closes the listener, closes connections still waiting for a request, waits for the rest
    /// to finish their work within the drain limit (then abandons the gate and breaks their
    /// sockets), joins every thread, and reports.
    pub async fn stop(self) -> Result<Stopped, String> {
        self.stopping.store(true, Ordering::SeqCst);
        // Refused if the accept thread already left its loop (an accept error): then there is
        // nothing to wake.
        let _ = tokio::net::TcpStream::connect(self.address).await;
        let stopped = self.stopped.await;
        // The thread sends its report as its last act, so this join returns at once.
        let joined = self.thread.join();
        match (stopped, joined) {
            (Ok(stopped), Ok(())) => Ok(stopped),
            (_, Err(panic)) => Err(format!(
                "the accept thread panicked: {}",
                panic_message(panic.as_ref())
            )),
            (Err(_), Ok(())) => Err("the accept thread ended without a report".into()),
        }
    }
}

/// Starts the thread that serves one connection: one request, one response, close.
fn spawn_connection(
    stream: TcpStream,
    section: Arc<WorkSection>,
    census: Arc<Census>,
    done: std_mpsc::Sender<()>,
) -> io::Result<Connection> {
    let handle = stream.try_clone()?;
    let in_work = Arc::new(AtomicBool::new(false));
    let working = in_work.clone();
    let thread = thread::Builder::new()
        .name("lab-connection".into())
        .spawn(move || {
            // Both guards also act while a panic unwinds: the census counts the handler out,
            // and the connection closes and tells the accept thread it ended.
            let _live = census.enter();
            let mut ending = Ending { stream, done };
            serve_connection(&mut ending.stream, &section, &working);
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
    stream: TcpStream,
    done: std_mpsc::Sender<()>,
}

impl Drop for Ending {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
        let _ = self.done.send(());
    }
}

fn serve_connection(stream: &mut TcpStream, section: &WorkSection, in_work: &AtomicBool) {
    let reply = match read_head(stream) {
        // The peer closed, or the server shut the socket, before a whole request arrived.
        Ok(None) | Err(_) => return,
        Ok(Some(Ok(request))) => {
            in_work.store(true, Ordering::SeqCst);
            let head = Head {
                is_get: request.method == "GET",
                path: &request.path,
                token: request.token.as_deref(),
                label: request.label.as_deref(),
            };
            match screen(section, head) {
                Ok((label, route)) => answer(label, section.perform_blocking(label, route)),
                Err(reply) => reply,
            }
        }
        Ok(Some(Err(reply))) => reply,
    };
    // A caller that went away while its work was held cannot be told; the work is done.
    let _ = write_reply(stream, &reply);
}

/// The parts of a request head the lab reads.
struct RequestHead {
    method: String,
    path: String,
    token: Option<Vec<u8>>,
    label: Option<Vec<u8>>,
}

/// Reads one request head: `None` if the stream ends first, an error reply if it is not HTTP
/// or too large. A body is never read: the lab's requests are GETs, and the connection closes
/// after the response anyway.
fn read_head(stream: &mut TcpStream) -> io::Result<Option<Result<RequestHead, Reply>>> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0; 1024];
    loop {
        let read = stream.read(&mut chunk)?;
        if read == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..read]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        let refuse = |status, error| {
            Ok(Some(Err(Reply {
                status,
                body: json!({ "error": error }),
            })))
        };
        match request.parse(&buffer) {
            Ok(httparse::Status::Complete(_)) => {
                let header = |name: &str| {
                    let found = request
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name));
                    found.map(|h| h.value.to_vec())
                };
                return Ok(Some(Ok(RequestHead {
                    method: request.method.unwrap_or_default().to_owned(),
                    // The path without a query string, as Hyper's `uri().path()` gives it.
                    path: request
                        .path
                        .unwrap_or_default()
                        .split('?')
                        .next()
                        .unwrap_or_default()
                        .to_owned(),
                    token: header(TOKEN_HEADER),
                    label: header(LABEL_HEADER),
                })));
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
    }
}

fn write_reply(stream: &mut TcpStream, reply: &Reply) -> io::Result<()> {
    let body = reply.body.to_string();
    let status = reply.status;
    let reason = status.canonical_reason().unwrap_or("");
    let head = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        status.as_u16(),
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic.downcast_ref::<&str>().copied();
    let text = text.or_else(|| panic.downcast_ref::<String>().map(String::as_str));
    text.unwrap_or("(not a message)").to_owned()
}
