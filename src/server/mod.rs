//! The server fronts that put the work section on `127.0.0.1:0`, and what they share: how a
//! request is screened before admission, how a verdict becomes a response, the count of live
//! connection handlers, and the summary a stopped server reports.
//!
//! - [`async_front`]: Hyper on Tokio, a task per connection.
//! - [`caught`]: the panics a front expects (Tokio's, when no thread can start), kept off
//!   stderr and said in the run's failure line instead.
//! - [`connections`]: a Hyper server's connection tasks, busy or not, closed and counted at stop
//!   (the async front's and the classroom's).
//! - [`threaded`]: `std::net`, an OS thread per connection: the classic threaded server shape.
//! - [`runtimes`]: the async front on runtimes of its own (`--work`, `--workers`), and its
//!   heartbeat; `work_style`: where it runs admitted work.
//!
//! Neither bounds connections or handlers: both accept and start a handler before any permit
//! is checked. Only the declared work section is bounded.

pub(crate) mod async_front;
pub(crate) mod caught;
pub(crate) mod connections;
pub(crate) mod runtimes;
pub(crate) mod threaded;
pub(crate) mod work_style;

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::admission::gate::Gate;
use crate::admission::pools::Permits;
use crate::admission::section::{Verdict, Work, WorkSection};
pub(crate) use crate::evidence::ServerSummary;
use crate::hooks::Hooks;
use crate::label::{LABEL_HEADER, Label};
pub(crate) use crate::policy::Front;
use crate::policy::Route;

/// The permits `front`'s world uses: Tokio's semaphore for tasks, the bounded one for threads.
pub(crate) fn permits(front: Front) -> Permits {
    match front {
        Front::Async => Permits::Tokio,
        Front::Threaded => Permits::Bounded,
    }
}

/// The accept queue `std` asks for when it listens (`listen(fd, 128)` on Linux), and so the
/// listener of every run of the lab ([`bind_loopback`]; a `hold` front's is sized for its count):
/// the kernel queues at most one connection more than this (fewer where `net.core.somaxconn`
/// is lower), which bounds the accept queue a report can count.
pub(crate) const STD_BACKLOG: usize = 128;

/// Binds the lab's only address, for either front: an ephemeral port on the IPv4 loopback.
/// Nothing on the command line or in the environment changes it.
pub(crate) fn bind_loopback() -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let address = listener.local_addr()?;
    Ok((listener, address))
}

/// [`bind_loopback`], listening with an accept queue of `backlog` connections (the kernel caps
/// it at `net.core.somaxconn`) instead of the [`STD_BACKLOG`] `std` asks for: a front that is sent
/// thousands of connections at once needs room to queue them while it accepts.
pub(crate) fn bind_loopback_with_backlog(
    backlog: u32,
) -> std::io::Result<(TcpListener, SocketAddr)> {
    use std::os::fd::AsRawFd;
    let (listener, address) = bind_loopback()?;
    let backlog = libc::c_int::try_from(backlog).unwrap_or(libc::c_int::MAX);
    // Listening again on a listening socket changes its backlog (Linux, the BSDs).
    // SAFETY: the descriptor is the listener's own, open for the call.
    if unsafe { libc::listen(listener.as_raw_fd(), backlog) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((listener, address))
}

/// The first pause after a failed accept; each further failure doubles it.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause: a failure after it ends the server.
const LAST_PAUSE: Duration = Duration::from_millis(64);

/// Retrying an accept loop that failed: a failure to accept
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

    /// The next connection `listener` accepts, for a Tokio accept loop (the async front's and
    /// the classroom's): `None` once `stop` resolves, `Err` saying why the loop gives up.
    pub(crate) async fn accept(
        &mut self,
        listener: &tokio::net::TcpListener,
        mut stop: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<Option<tokio::net::TcpStream>, String> {
        loop {
            tokio::select! {
                biased;
                () = &mut stop => return Ok(None),
                incoming = listener.accept() => match incoming {
                    Ok((stream, _peer)) => {
                        self.succeeded();
                        return Ok(Some(stream));
                    }
                    // Most often a shortage of descriptors, in this process or the system: the
                    // connection stays queued, and a retry after a pause may well take it. The
                    // pause waits for the stop signal too, for at most the pause: a retry, not
                    // a step of the sequence.
                    Err(e) => match self.failed() {
                        Some(pause) => {
                            if tokio::time::timeout(pause, &mut stop).await.is_ok() {
                                return Ok(None);
                            }
                        }
                        None => return Err(self.gave_up("accepting connections", &e)),
                    },
                },
            }
        }
    }
}

/// Which gate a request's slow work waits at, given to a front by whoever starts it. By
/// default every request waits at the run's own gate (the one the sequence opens); a classroom
/// session gives its room's requests gates of their own once the run's has opened. Admission
/// knows nothing of who chose.
#[derive(Clone, Default)]
pub(crate) struct Gates(Option<Arc<GateFor>>);

/// A choice of gate by label: `None` means the run's own.
type GateFor = dyn Fn(Label) -> Option<Arc<Gate>> + Send + Sync;

impl Gates {
    /// The gate `choose` names for a request, or the run's own where it names none.
    pub(crate) fn by(choose: impl Fn(Label) -> Option<Arc<Gate>> + Send + Sync + 'static) -> Self {
        Gates(Some(Arc::new(choose)))
    }

    /// The gate `request` waits at in `section`.
    pub(crate) fn pick(&self, section: &WorkSection, request: Label) -> Arc<Gate> {
        let chosen = self.0.as_ref().and_then(|choose| choose(request));
        chosen.unwrap_or_else(|| section.gate().clone())
    }
}

/// What whoever starts a front decides of how it hosts requests: the gate each request's slow
/// work waits at, and how many connections it keeps open at most.
#[derive(Clone, Debug, Default)]
pub(crate) struct Hosting {
    pub(crate) gates: Gates,
    /// `None`: no cap, as in a run of the command line, over in milliseconds. A classroom's
    /// run, whose port is open for minutes, keeps at most this many: beyond it a stranger's
    /// connection (one that has not carried the run's token) is closed to make room, so another
    /// process cannot take every descriptor the session has through the run's port
    /// (`docs/design.md`, "The classroom's secrets").
    pub(crate) most_connections: Option<usize>,
}

impl std::fmt::Debug for Gates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let chosen = if self.0.is_some() {
            "chosen by label"
        } else {
            "the run's own"
        };
        f.debug_tuple("Gates").field(&chosen).finish()
    }
}

/// A running server of either front.
#[derive(Debug)]
pub(crate) enum Running {
    /// The Hyper front's task.
    Async(async_front::AsyncFront),
    /// The threaded front's accept thread.
    Threaded(threaded::ThreadedFront),
    /// The async front on runtimes of its own (`--work`, `--workers`).
    Owned(runtimes::FrontThread),
}

/// Starts `front` serving `section` (on a Tokio runtime) on a listener already bound (see
/// [`bind_loopback`], [`bind_loopback_with_backlog`]), hosting requests as `hosting` says.
/// Connections still open `drain_limit` after the server is told to stop are aborted (threads:
/// their held work is abandoned) and reported.
pub(crate) fn start_on(
    front: Front,
    bound: (TcpListener, SocketAddr),
    section: Arc<WorkSection>,
    census: Arc<FrontCensus>,
    hooks: Arc<dyn Hooks>,
    hosting: Hosting,
    drain_limit: Duration,
) -> std::io::Result<(SocketAddr, Running)> {
    let address = bound.1;
    let running = match front {
        Front::Async => {
            let server = async_front::AsyncListener::from_std(bound, hosting, Default::default())?;
            Running::Async(server.start(section, census, hooks, drain_limit))
        }
        Front::Threaded => {
            let server = threaded::start(bound, hosting, section, census, hooks, drain_limit)?;
            Running::Threaded(server)
        }
    };
    Ok((address, running))
}

impl Running {
    /// Stops accepting, closes the listener, drains and joins every connection handler, and
    /// reports. `Err` if the server itself died.
    pub(crate) async fn stop(self) -> anyhow::Result<Stopped> {
        match self {
            Running::Async(running) => running.stop().await,
            Running::Threaded(running) => running.stop().await,
            Running::Owned(running) => running.stop().await,
        }
    }
}

/// The server has stopped; `error` says why it did not stop cleanly, if it did not.
#[derive(Debug)]
pub(crate) struct Stopped {
    /// The report's `server` object.
    pub summary: ServerSummary,
    /// Accepting that stayed broken, a connection closed unserved, a panicked handler, or
    /// handlers that outlived the drain.
    pub error: Option<String>,
}

/// Why a server's stop, as it came (`served`), did not end cleanly, in the words a run's failure
/// says it in: its own error, or the error that kept it from reporting. A front's runtime
/// (`runtimes::Heartbeat`) and the run's close say it alike, so a failure said by both is told
/// once.
pub(crate) fn error_of(served: &anyhow::Result<Stopped>) -> Option<String> {
    match served {
        Ok(stopped) => stopped.error.clone(),
        Err(e) => Some(format!("{e:#}")),
    }
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
        listener: ListenerId,
        accepted: u64,
        section: &WorkSection,
        error: Option<String>,
    ) -> Stopped {
        let joined = self.completed + self.aborted + self.panicked.len() as u64;
        let panicked = self.panicked.into_iter().next();
        Stopped {
            summary: ServerSummary {
                address: listener.address,
                listener_closed: listener.is_closed(),
                connections_accepted: accepted,
                connection_tasks_stopped: joined == accepted,
                connection_tasks_aborted: self.aborted,
                foreign_requests_refused: section.foreign_requests_refused(),
            },
            error: error.or(panicked),
        }
    }
}

/// A front's listener, known by its socket, so that once the front has dropped it the lab can
/// observe that it is closed (the report's `listener_closed`) rather than assert it.
///
/// Why not connect to the port and expect a refusal: once the listener is closed its port is
/// free, and another server binding `127.0.0.1:0` may be given it at once (seen when many runs
/// share a machine), so a connect can reach a stranger. The socket's inode cannot be reused
/// while this process holds it: closed means no descriptor of this process is that socket.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListenerId {
    address: SocketAddr,
    /// The listening socket's device and inode; `None` where the system would not say.
    inode: Option<(u64, u64)>,
}

/// The device and inode of the open descriptor `fd`.
fn identity(fd: std::os::fd::RawFd) -> Option<(u64, u64)> {
    // SAFETY: `stat` is plain data, and fstat(2) fills it for an open descriptor (and fails,
    // touching nothing, for any other number).
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut stat) == 0).then_some((stat.st_dev, stat.st_ino))
    }
}

impl ListenerId {
    /// The identity of `listener`, bound to `address`.
    pub(crate) fn of(listener: &impl std::os::fd::AsRawFd, address: SocketAddr) -> Self {
        let inode = identity(listener.as_raw_fd());
        ListenerId { address, inode }
    }

    /// Whether the socket is closed now: no open descriptor of this process names it (each
    /// descriptor listed in `/proc/self/fd` is asked with fstat(2), not read as a link, which
    /// costs a path lookup each). Where `/proc/self/fd` cannot be read (or the inode was never
    /// known), a connect to the port must be refused instead.
    fn is_closed(&self) -> bool {
        match (self.inode, std::fs::read_dir("/proc/self/fd")) {
            (Some(socket), Ok(descriptors)) => !descriptors
                .filter_map(Result::ok)
                .filter_map(|fd| fd.file_name().to_str()?.parse().ok())
                .any(|fd| identity(fd) == Some(socket)),
            _ => matches!(
                std::net::TcpStream::connect(self.address),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
            ),
        }
    }
}

/// What a running front tells the coordinator as it serves: the connection handlers alive
/// right now, counted by a guard each handler holds, and, once it has failed a client (its
/// accept loop gave up, it closed a connection unserved, or a handler panicked), why. A run
/// whose front failed so fails (its stop says why); the coordinator fails it then, and first:
/// rather than wait out the safety timeout for a connection no one will accept, or blame the
/// caller whose connection was closed.
#[derive(Debug, Default)]
pub(crate) struct FrontCensus {
    live: AtomicUsize,
    failed: OnceLock<String>,
    changed: Notify,
}

/// Held by a connection handler for as long as it lives.
#[derive(Debug)]
pub(crate) struct Live(Arc<FrontCensus>);

impl FrontCensus {
    /// Counts a handler in until the returned guard drops (also on a panic).
    pub(crate) fn enter(self: &Arc<Self>) -> Live {
        self.live.fetch_add(1, Ordering::SeqCst);
        Live(self.clone())
    }

    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Says that the front failed a client, and why: its accept loop gave up (it accepts no
    /// more connections), it closed a connection unserved, or a handler panicked. The first
    /// said is kept. Returns `why`, the server's error.
    pub(crate) fn failed(&self, why: String) -> String {
        if self.failed.set(why.clone()).is_ok() {
            self.changed.notify_waiters();
        }
        why
    }

    /// Once the front has failed a client: why, as first said.
    pub(crate) async fn failure(&self) -> &str {
        until(&self.changed, || self.failed.get().is_some()).await;
        self.failed.get().map_or("", String::as_str)
    }

    /// Runs `serve` (a connection's handling), saying a panic in it as the front's failure
    /// before it unwinds on, while the connection is still open: its caller's broken request
    /// is the panic's doing, and the run says the panic first. `what` names the connection's
    /// task or thread, as the front's stop says it when it joins it.
    pub(crate) fn panic_said<T>(&self, what: &str, serve: impl FnOnce() -> T) -> T {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(serve)).unwrap_or_else(|panic| {
            self.failed(panicked(what, panic.as_ref()));
            std::panic::resume_unwind(panic)
        })
    }
}

/// An async front's connection, served as a task: counted live while it runs; how it ends is its
/// client's business (a client that goes away), but a panic in it is the front's failure, said
/// first ([`FrontCensus::panic_said`] around each poll). It holds the connection in place, so
/// the task is no larger than the connection and its guard (its size is the held request's
/// memory: `src/allocator/slots.rs`).
pub(crate) struct ConnectionTask<F> {
    live: Live,
    connection: F,
    /// What it owes, until its first poll has returned (`Owed::mark_polled`).
    unpolled: Option<Arc<connections::Owed>>,
}

impl<F> ConnectionTask<F> {
    pub(crate) fn new(live: Live, connection: F, owed: Arc<connections::Owed>) -> Self {
        ConnectionTask {
            live,
            connection,
            unpolled: Some(owed),
        }
    }
}

impl<F: Future> Future for ConnectionTask<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        // SAFETY: `connection` is never moved out of the pinned task; `live` and `unpolled` are
        // not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: as above, `connection` stays where it is for as long as the task lives.
        let connection = unsafe { Pin::new_unchecked(&mut this.connection) };
        let census = &this.live.0;
        let polled = census.panic_said(connections::CONNECTION_TASK, || connection.poll(cx));
        // Marked once the poll has read what had come, and screened a whole head: never while
        // another worker is still reading it.
        if let Some(owed) = this.unpolled.take() {
            owed.mark_polled();
        }
        polled.map(drop)
    }
}

/// How a front says that a connection's task or thread (`what`) panicked.
pub(crate) fn panicked(what: &str, panic: &(dyn std::any::Any + Send)) -> String {
    format!("{what} panicked: {}", caught::panic_message(panic))
}

/// Waits until `done` holds, looking again each time `changed` is notified.
pub(crate) async fn until(changed: &Notify, done: impl Fn() -> bool) {
    loop {
        // Made before the look, so a change between them still wakes it: a `Notified`
        // completes on any `notify_waiters` call after its creation (as in `Gate::pass`).
        let notified = pin!(changed.notified());
        if done() {
            return;
        }
        notified.await;
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a front knows of a request before it asks for admission.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Head<'a> {
    pub(crate) is_get: bool,
    pub(crate) path: &'a str,
    /// The `lab-token` header, if any.
    pub(crate) token: Option<&'a [u8]>,
    /// The `lab-request` header, if any.
    pub(crate) label: Option<&'a [u8]>,
}

/// A response: status and JSON body.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) body: Value,
}

/// The methods the lab's routes answer, as a 405's `Allow` header lists them.
pub(crate) const ROUTE_METHODS: &str = "GET";

impl Reply {
    /// The `Allow` header a reply carries: the routes' methods, on a 405 (which only
    /// [`screen`] gives); none on any other.
    pub(crate) fn allow(&self) -> Option<&'static str> {
        (self.status == StatusCode::METHOD_NOT_ALLOWED).then_some(ROUTE_METHODS)
    }
}

/// Screens a request before admission: 403 without the run's token, 404 for another path, 405
/// for another method (its answer saying which it allows, [`ROUTE_METHODS`]), 400 without a
/// label for the route. What passes is the request's label
/// and route, ready to ask the work section for a permit.
pub(crate) fn screen(section: &WorkSection, head: Head<'_>) -> Result<(Label, Route), Reply> {
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
        .and_then(|text| Label::read(text, route));
    match label {
        Some(label) => Ok((label, route)),
        None => reply(
            StatusCode::BAD_REQUEST,
            json!({ "error": "missing_or_wrong_request_label", "header": LABEL_HEADER }),
        ),
    }
}

/// Admits and runs one request's work as a task at the gate `gates` picks for it, calling the
/// run's hooks inside the work section.
pub(crate) async fn work(
    section: &WorkSection,
    hooks: &dyn Hooks,
    gates: &Gates,
    request: Label,
    route: Route,
) -> Verdict {
    match section.admit(request, route).await {
        Ok(work) => {
            let gate = gates.pick(section, request);
            inside(hooks, work).run(&gate).await
        }
        Err(denied) => denied.into(),
    }
}

/// [`work`] as a blocked thread.
pub(crate) fn work_blocking(
    section: &WorkSection,
    hooks: &dyn Hooks,
    gates: &Gates,
    request: Label,
    route: Route,
) -> Verdict {
    match section.admit_now(request, route) {
        Ok(work) => {
            let gate = gates.pick(section, request);
            inside(hooks, work).run_blocking(&gate)
        }
        Err(denied) => denied.into(),
    }
}

/// Lets the run's hooks in with the admitted work: a hook that panics unwinds with the work
/// (and its permit) inside the section, which records it leaving as cancelled.
pub(crate) fn inside<'a>(hooks: &dyn Hooks, work: Work<'a>) -> Work<'a> {
    hooks.inside_work(work.request());
    work
}

/// The response to a verdict: 200 naming the request and pool, or 503 `work_capacity_full`
/// (or `work_abandoned` when a failed run gave up on held work, `work_permits_unavailable` when
/// a shared pool could not decide). A refusal by a pool shared with other processes also names
/// its holders, replica and request, in `held_by`.
pub(crate) fn answer(request: Label, verdict: Verdict) -> Reply {
    let (status, body) = match verdict {
        Verdict::Done(pool) => (StatusCode::OK, json!({ "request": request, "pool": pool })),
        Verdict::Refused(refusal) => {
            let mut body =
                json!({ "error": "work_capacity_full", "pool": refusal.pool, "request": request });
            if !refusal.holders.is_empty() {
                body["held_by"] = json!(refusal.holders);
            }
            (StatusCode::SERVICE_UNAVAILABLE, body)
        }
        Verdict::Failed(failure) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": "work_permits_unavailable", "pool": failure.pool,
                    "request": request, "detail": failure.reason }),
        ),
        Verdict::Abandoned(pool) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": "work_abandoned", "pool": pool, "request": request }),
        ),
    };
    Reply { status, body }
}

#[cfg(test)]
mod tests;
