//! The server fronts that put the work section on `127.0.0.1:0`, and what they share: how a
//! request is screened before admission, how a verdict becomes a response, the count of live
//! connection handlers, and the summary a stopped server reports.
//!
//! - [`async_front`]: Hyper on Tokio, a task per connection.
//! - [`threaded`]: `std::net`, an OS thread per connection, like the workshop's Python runner.
//!
//! Neither bounds connections or handlers: both accept and start a handler before any permit
//! is checked. Only the declared work section is bounded.

pub mod async_front;
pub mod threaded;

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hyper::StatusCode;
use serde::Serialize;
use serde_json::{Value, json};

use crate::admission::pools::Permits;
use crate::admission::section::{Verdict, WorkSection};
use crate::label::{LABEL_HEADER, Label};
use crate::policy::Route;

/// Which server front serves a run.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Front {
    /// Hyper on Tokio: a held request parks a task
    #[default]
    Async,
    /// std::net with an OS thread per connection: a held request blocks a thread
    Threaded,
}

impl Front {
    /// Both fronts, async first.
    pub const ALL: [Front; 2] = [Front::Async, Front::Threaded];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Front::Async => "async",
            Front::Threaded => "threaded",
        }
    }

    /// The permits this front's world uses.
    pub fn permits(self) -> Permits {
        match self {
            Front::Async => Permits::Tokio,
            Front::Threaded => Permits::Bounded,
        }
    }

    /// The report's description of the front.
    pub fn describe(self) -> &'static str {
        match self {
            Front::Async => "Hyper 1, HTTP/1.1 on 127.0.0.1: a Tokio task per connection",
            Front::Threaded => {
                "std::net and httparse, HTTP/1.1 on 127.0.0.1: an OS thread per connection"
            }
        }
    }
}

/// Binds the lab's only address, for either front: an ephemeral port on the IPv4 loopback.
/// Nothing on the command line or in the environment changes it.
fn bind_loopback() -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let address = listener.local_addr()?;
    Ok((listener, address))
}

/// The first pause after a failed accept; each further failure doubles it.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause: a failure after it ends the server.
const LAST_PAUSE: Duration = Duration::from_millis(64);

/// Retrying an accept loop that failed, as mini-redis's accept loop does: a failure to accept
/// (or to start a handler) is usually a shortage that passes — descriptors or threads that
/// another process or a closing connection is about to give back — so the loop pauses, longer
/// each time, and tries again. The pause is a retry, not sequencing: nothing waits for it. Only
/// if the failures outlast every pause does the server give up, saying so.
#[derive(Debug)]
pub(crate) struct Backoff {
    /// The next pause, or `None` once the longest has been waited.
    next: Option<Duration>,
    failures: u32,
    paused: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            next: Some(FIRST_PAUSE),
            failures: 0,
            paused: Duration::ZERO,
        }
    }
}

impl Backoff {
    /// Counts a failure: the pause to wait before trying again, or `None` to give up.
    pub(crate) fn failed(&mut self) -> Option<Duration> {
        self.failures += 1;
        let pause = self.next?;
        self.next = (pause < LAST_PAUSE).then(|| pause * 2);
        self.paused += pause;
        Some(pause)
    }

    /// Something worked: the next failure starts again from the first pause.
    pub(crate) fn succeeded(&mut self) {
        *self = Backoff::default();
    }

    /// Why the server gave up: `what` kept failing, the last time with `error`.
    pub(crate) fn gave_up(&self, what: &str, error: &std::io::Error) -> String {
        format!(
            "{what} stayed broken through {} tries over {} ms: {error}",
            self.failures,
            self.paused.as_millis()
        )
    }
}

/// A running server of either front.
#[derive(Debug)]
pub enum Running {
    /// The Hyper front's task.
    Async(async_front::Running),
    /// The threaded front's accept thread.
    Threaded(threaded::Running),
}

/// Binds `127.0.0.1:0` and starts `front` serving `section` (on a Tokio runtime). Connections
/// still open `drain_limit` after the server is told to stop are aborted (threads: their held
/// work is abandoned) and reported.
pub fn start(
    front: Front,
    section: Arc<WorkSection>,
    census: Arc<Census>,
    drain_limit: Duration,
) -> std::io::Result<(SocketAddr, Running)> {
    match front {
        Front::Async => {
            let server = async_front::Server::bind()?;
            let address = server.address();
            let running = server.start(section, census, drain_limit);
            Ok((address, Running::Async(running)))
        }
        Front::Threaded => {
            let server = threaded::Server::bind()?;
            let address = server.address();
            let running = server.start(section, census, drain_limit)?;
            Ok((address, Running::Threaded(running)))
        }
    }
}

impl Running {
    /// Stops accepting, closes the listener, drains and joins every connection handler, and
    /// reports. `Err` if the server itself died.
    pub async fn stop(self) -> Result<Stopped, String> {
        match self {
            Running::Async(running) => running.stop().await,
            Running::Threaded(running) => running.stop().await,
        }
    }
}

/// What the server reports once it has stopped: the report's `server` object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerSummary {
    /// Where it listened: `127.0.0.1:<port>`.
    pub address: SocketAddr,
    /// The listener was dropped: the port refuses new connections. True once the server has
    /// returned, since the listener is a value it owned; the tests check the port refuses.
    pub listener_closed: bool,
    /// Connections accepted over the run.
    pub connections_accepted: u64,
    /// Every connection handler (task or thread) has ended and been joined: counted, as
    /// completed, aborted or panicked, against the connections accepted.
    pub connection_tasks_stopped: bool,
    /// Of those, the handlers that had to be aborted after the drain limit (0 on a clean run).
    pub connection_tasks_aborted: u64,
    /// Requests refused with 403 for not presenting the run's token. They never reached
    /// admission: no permit, no work event, no part of the model.
    pub foreign_requests_refused: u64,
}

/// The server has stopped; `error` says why it did not stop cleanly, if it did not.
#[derive(Debug)]
pub struct Stopped {
    /// The report's `server` object.
    pub summary: ServerSummary,
    /// Accepting that stayed broken, a connection closed unserved, a panicked handler, or
    /// handlers that outlived the drain.
    pub error: Option<String>,
}

/// How the handlers of a stopped server ended.
#[derive(Debug, Default)]
pub(crate) struct Handlers {
    pub(crate) completed: u64,
    pub(crate) aborted: u64,
    pub(crate) panicked: Vec<String>,
}

impl Handlers {
    /// The summary, and the first thing that went wrong.
    pub(crate) fn stopped(
        self,
        address: SocketAddr,
        accepted: u64,
        section: &WorkSection,
        error: Option<String>,
    ) -> Stopped {
        let joined = self.completed + self.aborted + self.panicked.len() as u64;
        let panicked = self.panicked.into_iter().next();
        Stopped {
            summary: ServerSummary {
                address,
                listener_closed: true,
                connections_accepted: accepted,
                connection_tasks_stopped: joined == accepted,
                connection_tasks_aborted: self.aborted,
                foreign_requests_refused: section.foreign_requests_refused(),
            },
            error: error.or(panicked),
        }
    }
}

/// The connection handlers alive right now, counted by a guard each handler holds.
#[derive(Debug, Default)]
pub struct Census {
    live: AtomicUsize,
}

/// Held by a connection handler for as long as it lives.
#[derive(Debug)]
pub struct Live(Arc<Census>);

impl Census {
    /// Counts a handler in until the returned guard drops (also on a panic).
    pub fn enter(self: &Arc<Self>) -> Live {
        self.live.fetch_add(1, Ordering::SeqCst);
        Live(self.clone())
    }

    /// Handlers alive now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a front knows of a request before it asks for admission.
#[derive(Clone, Copy, Debug)]
pub struct Head<'a> {
    /// Whether the method is GET.
    pub is_get: bool,
    /// The URL path.
    pub path: &'a str,
    /// The `lab-token` header, if any.
    pub token: Option<&'a [u8]>,
    /// The `lab-request` header, if any.
    pub label: Option<&'a [u8]>,
}

/// A response: status and JSON body.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// The JSON body.
    pub body: Value,
}

/// Screens a request before admission: 403 without the run's token, 404 for another path, 405
/// for another method, 400 without a label for the route. What passes is the request's label
/// and route, ready to ask the work section for a permit.
pub fn screen(section: &WorkSection, head: Head<'_>) -> Result<(Label, Route), Reply> {
    let reply = |status, body| Err(Reply { status, body });
    if section.refuse_foreign(head.token) {
        let detail = "only this lab run's own callers may ask for a work permit";
        return reply(
            StatusCode::FORBIDDEN,
            json!({ "error": "foreign_request", "detail": detail }),
        );
    }
    let Some(route) = Route::from_path(head.path) else {
        return reply(StatusCode::NOT_FOUND, json!({ "error": "not_found" }));
    };
    if !head.is_get {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({ "error": "method_not_allowed" }),
        );
    }
    let label = head
        .label
        .and_then(|value| std::str::from_utf8(value).ok())
        .and_then(|text| text.parse::<Label>().ok())
        .filter(|label| label.route() == route);
    match label {
        Some(label) => Ok((label, route)),
        None => reply(
            StatusCode::BAD_REQUEST,
            json!({ "error": "missing_or_wrong_request_label", "header": LABEL_HEADER }),
        ),
    }
}

/// The response to a verdict: 200 naming the request and pool, or 503 `work_capacity_full`
/// (or `work_abandoned` when a failed run gave up on held work).
pub fn answer(request: Label, verdict: Verdict) -> Reply {
    let (status, body) = match verdict {
        Verdict::Done(pool) => (StatusCode::OK, json!({ "request": request, "pool": pool })),
        Verdict::Refused(refusal) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": "work_capacity_full", "pool": refusal.pool, "request": request }),
        ),
        Verdict::Abandoned(pool) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": "work_abandoned", "pool": pool, "request": request }),
        ),
    };
    Reply { status, body }
}

#[cfg(test)]
mod tests {
    use super::*;

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
