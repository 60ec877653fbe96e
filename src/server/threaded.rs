//! The threaded front: `std::net` sockets, one OS thread per accepted connection, request heads
//! parsed with `httparse` (Hyper's own parser), the bounded semaphores tried once (a refusal,
//! never a queue) and the gate's `Condvar` wait. A held request blocks its thread. Connections are kept alive between
//! requests, as the async front's are, so a thread lives exactly as long as its connection. The
//! accept thread waits on a `mio` poller rather than in a blocking `accept`, so that stopping it
//! needs no new socket, descriptor or thread: everything it takes is made before it starts.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, mpsc as std_mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use hyper::StatusCode;
use mio::{Events, Interest, Poll, Token, Waker};
use serde_json::json;
use tokio::sync::oneshot;

use super::{
    Backoff, FrontCensus, Gates, Handlers, Head, Hosting, ListenerId, Reply, Stopped, answer,
    screen, work_blocking,
};
use crate::admission::section::WorkSection;
use crate::admission::token::TOKEN_HEADER;
use crate::child::{AwakeDeadline, awake_within};
use crate::draw::table::plural;
use crate::hooks::Hooks;
use crate::label::{LABEL_HEADER, Label};
use crate::policy::Route;

/// What the threaded front calls a connection's thread when it panics.
const CONNECTION_THREAD: &str = "a connection thread";

/// The most a request head may take; the lab's own are a few hundred bytes.
const MAX_HEAD: usize = 8 * 1024;

/// How long connection threads that were forced to stop (their gate abandoned, their sockets
/// shut down) may take to end. Either makes a thread return at once; one that still has not
/// after this cannot be stopped at all, and the server stops waiting for it.
const FORCED_LIMIT: Duration = Duration::from_secs(2);

/// How much longer than its own bounded waits (the drain, then the forced stop) the accept
/// thread may take to report before `stop` gives up on it.
const REPORT_SLACK: Duration = Duration::from_secs(2);

/// The most [`await_release`] waits for the kernel to let go of a joined thread.
const RELEASE_LIMIT: Duration = Duration::from_secs(1);

/// The poller's token for the listener.
const LISTENER: Token = Token(0);
/// The poller's token for the stop signal.
const STOP: Token = Token(1);

/// The accept thread, and how to tell it to stop. Dropping it without [`ThreadedFront::stop`] tells
/// the thread to abandon held work and close every connection, and returns at once: the
/// thread, left to finish on its own, joins every connection thread that ends within the
/// forced stop's limit, and leaves any other to end with the process.
#[derive(Debug)]
pub(crate) struct ThreadedFront {
    signal: Arc<StopSignal>,
    drain_limit: Duration,
    stopped: Option<oneshot::Receiver<(Stopped, Option<u32>)>>,
    thread: Option<JoinHandle<()>>,
}

// Where the server stands. It only moves forward: serving, then stopping or abandoned.
/// Accepting connections.
const SERVING: u8 = 0;
/// Told by [`ThreadedFront::stop`]: stop accepting, let held work finish within the drain limit.
const STOPPING: u8 = 1;
/// Dropped without `stop`: stop accepting, abandon held work, close every connection.
const ABANDONED: u8 = 2;

/// How the accept thread and its connection threads are told to stop. Raising it writes to a
/// waker and a channel made before the accept thread started: no descriptor, socket or thread
/// is needed then, so a process that has run out of them can still stop its server.
#[derive(Debug)]
struct StopSignal {
    state: AtomicU8,
    /// Ends the accept thread's wait for connections.
    waker: Waker,
    /// Ends the accept thread's wait for its connections to end.
    notes: std_mpsc::Sender<Note>,
}

impl StopSignal {
    fn stopping(&self) -> bool {
        self.state.load(Ordering::SeqCst) != SERVING
    }

    fn abandoned(&self) -> bool {
        self.state.load(Ordering::SeqCst) == ABANDONED
    }

    /// Moves the state forward to `to`, and wakes the accept thread wherever it waits.
    fn raise(&self, to: u8) {
        if self.state.fetch_max(to, Ordering::SeqCst) < to {
            // A waker cannot fail for want of resources: it writes to a descriptor it owns.
            let _ = self.waker.wake();
            // Refused only once the accept thread has left: then no one needs waking.
            let _ = self.notes.send(Note::Raised);
        }
    }
}

/// What the accept thread hears while it waits for its connections to end.
enum Note {
    /// Connection `id` has ended; its thread (`tid`, if known) is returning.
    Ended { id: u64, tid: Option<u32> },
    /// A connection's thread has started (told only where the server keeps a cap).
    Started,
    /// The signal was raised.
    Raised,
}

/// The listener, registered with the poller that the accept thread waits on.
struct Poller {
    poll: Poll,
    events: Events,
    listener: mio::net::TcpListener,
}

impl Poller {
    /// Registers `listener` and a waker for the stop signal.
    fn new(listener: TcpListener) -> io::Result<(Self, Waker)> {
        listener.set_nonblocking(true)?;
        let mut listener = mio::net::TcpListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Waker::new(poll.registry(), STOP)?;
        let poller = Poller {
            poll,
            events: Events::with_capacity(4),
            listener,
        };
        Ok((poller, waker))
    }

    /// Waits until a connection may be waiting, the signal is raised, or `limit` has passed.
    fn wait(&mut self, limit: Option<Duration>) -> io::Result<()> {
        match self.poll.poll(&mut self.events, limit) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            waited => waited,
        }
    }

    /// Pauses before a retry, for `pause` or until the signal is raised.
    fn pause(&mut self, pause: Duration, signal: &StopSignal) {
        let until = Instant::now() + pause;
        while !signal.stopping() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.wait(Some(left)).is_err() {
                return;
            }
        }
    }
}

/// One accepted connection, as its accept thread keeps it until the thread ends.
struct Connection {
    thread: JoinHandle<()>,
    /// The socket its thread serves, shared so that shutdown can unblock the thread's read.
    stream: Arc<TcpStream>,
    /// What its thread says of it.
    seen: Arc<Seen>,
}

/// What the accept thread can see of a connection's thread: where it is with its request (its
/// `state`), whether it has started, and whether it is the run's own.
#[derive(Debug, Default)]
struct Seen {
    /// [`WAITING`], [`ANSWERING`], [`REFUSING`] or [`CLOSING`], moved by compare-and-swap: the
    /// accept thread closing it and its own thread taking a request cannot both win.
    state: AtomicU8,
    /// Set as its thread starts, before it reads what its client sends.
    started: AtomicBool,
    /// Set once it carried the run's token: the run's own connection.
    the_runs: AtomicBool,
}

/// Waiting for (the rest of) a request: the accept thread may close it.
const WAITING: u8 = 0;
/// A whole request, being screened and served: closing it would drop what its client is owed.
const ANSWERING: u8 = 1;
/// Answering a request without the run's token with a refusal: a stranger's may be closed, to
/// make room or at a stop (one that never reads its answer would otherwise keep its thread,
/// and its place, for ever).
const REFUSING: u8 = 2;
/// Shut down by the accept thread: to make room, or at a stop.
const CLOSING: u8 = 3;

impl Seen {
    /// Its thread takes a whole request, unless the connection is being closed.
    fn take_request(&self) -> bool {
        self.moved(WAITING, ANSWERING)
    }

    /// Its thread has answered, and waits for the next request, unless the connection is being
    /// closed.
    fn answered(&self) -> bool {
        self.moved(ANSWERING, WAITING) || self.moved(REFUSING, WAITING)
    }

    /// The accept thread closes it, if it is in `from`.
    fn close_from(&self, from: u8) -> bool {
        self.moved(from, CLOSING)
    }

    fn moved(&self, from: u8, to: u8) -> bool {
        let (order, failed) = (Ordering::SeqCst, Ordering::SeqCst);
        self.state.compare_exchange(from, to, order, failed).is_ok()
    }
}

/// What a connection thread shares with the accept thread.
struct Shared {
    section: Arc<WorkSection>,
    hooks: Arc<dyn Hooks>,
    gates: Gates,
    /// The most connections kept open, if any (`Hosting`).
    most: Option<usize>,
    census: Arc<FrontCensus>,
    signal: Arc<StopSignal>,
}

/// Starts the accept thread serving `section` on `listener`, bound to `address` (see
/// `super::bind_loopback`), hosting requests as `hosting` says; it serves until
/// [`ThreadedFront::stop`].
pub(crate) fn start(
    (listener, address): (TcpListener, SocketAddr),
    hosting: Hosting,
    section: Arc<WorkSection>,
    census: Arc<FrontCensus>,
    hooks: Arc<dyn Hooks>,
    drain_limit: Duration,
) -> io::Result<ThreadedFront> {
    let id = ListenerId::of(&listener, address);
    let starting = |what: &str| {
        let what = format!("starting the threaded server's {what}");
        move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"))
    };
    let (poller, waker) = Poller::new(listener).map_err(starting("poller"))?;
    let (notes, heard) = std_mpsc::channel();
    let signal = Arc::new(StopSignal {
        state: AtomicU8::new(SERVING),
        waker,
        notes,
    });
    let shared = Arc::new(Shared {
        section,
        hooks,
        gates: hosting.gates,
        most: hosting.most_connections,
        census,
        signal: signal.clone(),
    });
    let (report, stopped) = oneshot::channel();
    let thread = crate::limits::spawn_thread("lab-accept", move || {
        let tid = os_thread_id();
        let summary = serve(poller, heard, shared, id, drain_limit);
        // The receiver is gone only if the coordinator itself went away.
        let _ = report.send((summary, tid));
    })
    .map_err(starting("thread"))?;
    Ok(ThreadedFront {
        signal,
        drain_limit,
        stopped: Some(stopped),
        thread: Some(thread),
    })
}

/// The accept thread's life: the accept loop on `poller`, hearing its connections end on
/// `heard`, then the drain: see [`ThreadedFront::stop`].
fn serve(
    mut poller: Poller,
    heard: std_mpsc::Receiver<Note>,
    shared: Arc<Shared>,
    id: ListenerId,
    drain_limit: Duration,
) -> Stopped {
    let signal = shared.signal.clone();
    let section = shared.section.clone();
    let mut connections = ConnectionTable::default();
    let mut retry = Backoff::default();
    let mut error = None;
    while !signal.stopping() {
        // Join the connections that ended, so nothing grows with their number.
        connections.reap(&heard);
        // The poller reports a listener's readiness once, as it changes: accept until the
        // queue is empty before waiting again.
        let (what, e) = match poller.listener.accept() {
            // At the cap, a stranger's connection makes room (the oldest that is not serving a
            // request and never carried the run's token); with none, the new one is closed at
            // once: the run's own connections are never closed to make room.
            Ok((stream, _peer))
                if shared
                    .most
                    .is_some_and(|most| !connections.make_room(most, &heard)) =>
            {
                drop(stream);
                retry.succeeded();
                continue;
            }
            Ok((stream, _peer)) => match connections.spawn(stream, &shared) {
                Ok(()) => {
                    retry.succeeded();
                    continue;
                }
                // The connection was closed unserved (its client sees the close). A thread
                // that cannot start now may start after a pause, as threads end.
                Err(e) => ("starting connection threads", e),
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => match poller.wait(None) {
                Ok(()) => continue,
                Err(e) => ("waiting for connections", e),
            },
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Most often a shortage of descriptors, in this process or the system: the
            // connection stays queued, and a retry after a pause may well take it.
            Err(e) => ("accepting connections", e),
        };
        match retry.failed() {
            Some(pause) => poller.pause(pause, &signal),
            None => {
                let why = format!("the threaded server: {}", retry.gave_up(what, &e));
                error = Some(shared.census.failed(why));
                break;
            }
        }
    }
    // Stop accepting: from here on the port refuses connections.
    drop(poller);
    drop(shared);
    if let Some(unserved) = connections.unserved.take() {
        error.get_or_insert(unserved);
    }

    // Once stopping, a connection between requests ends by itself; one that is not
    // serving a request (waiting for one, or for the rest of a head a client may never
    // finish) is closed now: either its thread takes a request first, and sees the stop once
    // it has answered, or this closes it first, and its thread takes no request. So is one
    // refusing a request without the run's token: a stranger that never reads its refusal
    // cannot hold the stop up (the async front, too, closes a connection once its handler has
    // made the refusal).
    // A server dropped without `stop` closes every connection and waits for no work.
    let abandoned = signal.abandoned();
    if abandoned {
        section.abandon_gate();
    }
    for connection in connections.open.values() {
        let seen = &connection.seen;
        if abandoned || seen.close_from(WAITING) || seen.close_from(REFUSING) {
            let _ = connection.stream.shutdown(Shutdown::Both);
        }
    }
    let drain_until = AwakeDeadline::after(drain_limit);
    connections.wait(&heard, drain_until, false, || signal.abandoned());
    if !connections.open.is_empty() {
        // A thread cannot be aborted from outside. What can keep one busy this long is
        // work at a gate that never opened: abandon the gate, and break every socket's
        // blocking I/O, then wait (briefly) for each to end.
        section.abandon_gate();
        for connection in connections.open.values() {
            let _ = connection.stream.shutdown(Shutdown::Both);
        }
        if !signal.abandoned() {
            error.get_or_insert(format!(
                "connection threads were still busy {} s after the server stopped \
                 accepting; their held work was abandoned",
                drain_limit.as_secs()
            ));
        }
        let forced_until = AwakeDeadline::after(FORCED_LIMIT);
        connections.wait(&heard, forced_until, true, || false);
    }
    if let Some(stuck) = connections.give_up() {
        error.get_or_insert(stuck);
    }
    connections
        .ended
        .stopped(id, connections.accepted, &section, error)
}

/// The accept thread's connections: the open ones, and how the ended ones ended.
#[derive(Default)]
struct ConnectionTable {
    /// In the order they were accepted (by id).
    open: BTreeMap<u64, Connection>,
    /// Connections with a running handler: counted once their thread exists.
    accepted: u64,
    ended: Handlers,
    /// Why a connection was closed without being served, if one was.
    unserved: Option<String>,
    unserved_count: u64,
}

impl ConnectionTable {
    /// Starts the thread that serves `stream`: request after request until the client closes,
    /// a request asks to close, or the server stops. On an error the connection is closed
    /// unserved, and noted.
    fn spawn(&mut self, stream: mio::net::TcpStream, shared: &Arc<Shared>) -> io::Result<()> {
        match start_connection(self.accepted + 1, stream, shared) {
            Ok(connection) => {
                self.accepted += 1;
                self.open.insert(self.accepted, connection);
                Ok(())
            }
            Err(Unserved { error, stream }) => {
                self.unserved_count += 1;
                let closed = plural(self.unserved_count, "connection");
                let why = format!(
                    "the threaded server closed {closed} unserved: could not start serving one: \
                     {error}"
                );
                // Its client's request fails: the server's failure, said before the close.
                self.unserved = Some(shared.census.failed(why));
                drop(stream);
                Err(error)
            }
        }
    }

    /// Makes room for one more connection while `most` are open: shuts down the oldest
    /// stranger's, one that never carried the run's token and is waiting for a request or
    /// refusing one, and joins its thread, which ends as its socket does. It counts as
    /// completed. One whose thread has not started, accepted in the burst the new one came in,
    /// may hold a whole request unread (a run's F1, queued behind a flood): never closed. With
    /// none to close but some not started, it waits for them to start (or end), as each may
    /// then be closed. False when there is none, or it waited [`FORCED_LIMIT`] of the lab's own
    /// time in vain: then the new one is closed instead, and no more than `most` are ever open.
    fn make_room(&mut self, most: usize, heard: &std_mpsc::Receiver<Note>) -> bool {
        let mut until = AwakeDeadline::after(FORCED_LIMIT);
        let mut closed = false;
        while self.open.len() >= most {
            closed = closed || self.close_oldest_stranger();
            let starting = || (self.open.values()).any(|c| !c.seen.started.load(Ordering::SeqCst));
            if !closed && !starting() {
                return false;
            }
            match heard.recv_timeout(until.left()) {
                Ok(Note::Ended { id, tid }) => self.join(id, tid, false),
                Ok(Note::Started) => {}
                Err(std_mpsc::RecvTimeoutError::Timeout) if !until.passed() => {}
                // Stopping: the accept loop stops at its next look.
                Ok(Note::Raised) | Err(_) => return false,
            }
        }
        true
    }

    /// Shuts down the oldest connection whose thread has started, that never carried the run's
    /// token, and is waiting for a request or refusing one; false when there is none.
    fn close_oldest_stranger(&self) -> bool {
        let closed = (self.open.values())
            .filter(|c| {
                let seen = &c.seen;
                seen.started.load(Ordering::SeqCst) && !seen.the_runs.load(Ordering::SeqCst)
            })
            .find(|c| c.seen.close_from(WAITING) || c.seen.close_from(REFUSING));
        if let Some(c) = closed {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
        closed.is_some()
    }

    /// Joins every connection that has said it ended.
    fn reap(&mut self, heard: &std_mpsc::Receiver<Note>) {
        while let Ok(note) = heard.try_recv() {
            if let Note::Ended { id, tid } = note {
                self.join(id, tid, false);
            }
        }
    }

    /// Joins connections as they say they ended, until none is open, `until` passes (in the
    /// lab's own time: a stop of the lab's is not the threads being busy), or `cut_short` says
    /// to stop waiting. `forced`: they were forced to stop.
    fn wait(
        &mut self,
        heard: &std_mpsc::Receiver<Note>,
        mut until: AwakeDeadline,
        forced: bool,
        cut_short: impl Fn() -> bool,
    ) {
        while !self.open.is_empty() && !cut_short() {
            match heard.recv_timeout(until.left()) {
                Ok(Note::Ended { id, tid }) => self.join(id, tid, forced),
                Ok(Note::Started | Note::Raised) => {}
                Err(std_mpsc::RecvTimeoutError::Timeout) if !until.passed() => {}
                Err(_) => return,
            }
        }
    }

    /// Joins connection `id`: one that said it ended (its thread is returning), or one that
    /// was `forced` to stop after the drain limit, which counts as aborted. A panic counts as
    /// a panic either way.
    fn join(&mut self, id: u64, tid: Option<u32>, forced: bool) {
        let Some(connection) = self.open.remove(&id) else {
            return;
        };
        count(&mut self.ended, connection.thread.join(), forced);
        await_release(tid);
    }

    /// The threads still open after being forced to stop. One that has finished by now is
    /// joined and counted. Any other is one whose start failed inside the standard library
    /// before it could serve (and say it ended), or one stuck where neither the gate nor its
    /// socket reaches: joining it could wait forever, so it is left to end with the process,
    /// uncounted, and the reason says how many.
    fn give_up(&mut self) -> Option<String> {
        let mut stuck = 0;
        for connection in std::mem::take(&mut self.open).into_values() {
            if connection.thread.is_finished() {
                count(&mut self.ended, connection.thread.join(), true);
            } else {
                stuck += 1;
            }
        }
        (stuck > 0).then(|| {
            let (threads, did) = match stuck {
                1 => ("1 connection thread".to_owned(), "it is"),
                n => (format!("{n} connection threads"), "they are"),
            };
            format!(
                "{threads} did not end within {} s of being forced to stop; {did} left to end \
                 with the process",
                FORCED_LIMIT.as_secs()
            )
        })
    }
}

/// Counts how a joined connection thread ended: a panic as a panic; otherwise aborted if it
/// was `forced` to stop, completed if not.
fn count(ended: &mut Handlers, joined: thread::Result<()>, forced: bool) {
    match joined {
        Err(panic) => (ended.panicked).push(super::panicked(CONNECTION_THREAD, panic.as_ref())),
        Ok(()) if forced => ended.aborted += 1,
        Ok(()) => ended.completed += 1,
    }
}

impl ThreadedFront {
    /// Stops accepting (a flag, and a waker that ends the accept thread's wait), closes the
    /// listener, closes connections that are not serving a request, waits for the rest to
    /// finish their work within the drain limit (then abandons the gate and breaks their
    /// sockets), joins every thread, and reports.
    pub(crate) async fn stop(mut self) -> anyhow::Result<Stopped> {
        self.signal.raise(STOPPING);
        let Some(stopped) = self.stopped.take() else {
            bail!("the threaded server was already stopped");
        };
        // Every wait of the accept thread is bounded, so its report comes within this limit
        // unless the thread never got to run (its start can fail inside the standard library).
        let limit = self.drain_limit + FORCED_LIMIT + REPORT_SLACK;
        let Some(stopped) = awake_within(limit, stopped).await else {
            // Dropping `self` tells it to abandon its work, should it ever run, and leaves it.
            bail!(
                "the accept thread did not report within {} s of being told to stop; left \
                 running",
                limit.as_secs()
            );
        };
        // The thread sends its report as its last act, so this join returns at once.
        let joined = self.thread.take().map_or(Ok(()), JoinHandle::join);
        match (stopped, joined) {
            (Ok((stopped, tid)), Ok(())) => {
                await_release(tid);
                Ok(stopped)
            }
            (_, Err(panic)) => Err(anyhow!(super::panicked(
                "the accept thread",
                panic.as_ref()
            ))),
            (Err(_), Ok(())) => Err(anyhow!("the accept thread ended without a report")),
        }
    }
}

impl Drop for ThreadedFront {
    /// Never blocks: joining here would hold whichever thread dropped the server — a Tokio
    /// runtime's, typically, when a run is cancelled — for as long as held work takes. The
    /// owner is gone and no one will read a report, so the accept thread is told to abandon
    /// held work at once, and is left to close, join the connection threads that end, and end.
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.signal.raise(ABANDONED);
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }
}

/// Makes the thread for connection `id`. The thread starts only if everything before it
/// worked; on an error the socket comes back in [`Unserved`], open until it is dropped.
fn start_connection(
    id: u64,
    stream: mio::net::TcpStream,
    shared: &Arc<Shared>,
) -> Result<Connection, Unserved> {
    let stream = Arc::new(TcpStream::from(stream));
    // mio accepts every socket non-blocking (`SOCK_NONBLOCK`); this one's thread blocks on it.
    if let Err(error) = stream.set_nonblocking(false) {
        return Err(Unserved { error, stream });
    }
    // Each response is one small write; send it at once rather than wait to coalesce. Only a
    // speed-up, so a socket that refuses it is served all the same.
    let _ = stream.set_nodelay(true);
    let seen = Arc::new(Seen::default());
    let (mine, working, shared) = (stream.clone(), seen.clone(), shared.clone());
    let started = crate::limits::spawn_thread("lab-connection", move || {
        // Both guards also act while a panic unwinds: the census counts the handler out,
        // and the connection closes and tells the accept thread it ended.
        let _live = shared.census.enter();
        working.started.store(true, Ordering::SeqCst);
        if shared.most.is_some() {
            let _ = shared.signal.notes.send(Note::Started);
        }
        let ending = Ending {
            id,
            tid: os_thread_id(),
            stream: mine,
            shared: shared.clone(),
        };
        let census = &shared.census;
        census.panic_said(CONNECTION_THREAD, || {
            serve_connection(&ending.stream, &shared, &working)
        });
    });
    match started {
        Ok(thread) => Ok(Connection {
            thread,
            stream,
            seen,
        }),
        Err(error) => Err(Unserved { error, stream }),
    }
}

/// A connection whose thread could not start: why, and its socket, open until this drops, so
/// the failure is said before its client sees the connection close.
struct Unserved {
    error: io::Error,
    stream: Arc<TcpStream>,
}

/// A connection's last act, on every way out of its thread: shut the socket down (the accept
/// thread holds the socket too, so dropping this handle would not close it, and a caller would
/// wait for an answer that never comes), then tell the accept thread it ended.
struct Ending {
    id: u64,
    tid: Option<u32>,
    stream: Arc<TcpStream>,
    shared: Arc<Shared>,
}

impl Drop for Ending {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
        let ended = Note::Ended {
            id: self.id,
            tid: self.tid,
        };
        let _ = self.shared.signal.notes.send(ended);
    }
}

/// This thread's id in the kernel, where `/proc` tells it (Linux).
pub(super) fn os_thread_id() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// Waits until the kernel no longer lists the joined thread `tid` in `/proc/self/task`, so that
/// a count of the process's threads taken after a server stops is exact. `JoinHandle::join`
/// returns when the kernel wakes the joiner, partway through the thread's exit and before it
/// releases the thread: a count taken at once could still include it (about one threaded run
/// in a thousand counted one thread too many). No event marks the release without a
/// descriptor per thread, so this re-reads, yielding between reads; it is almost always gone
/// at the first. The limit only keeps a reused id from holding the caller.
fn await_release(tid: Option<u32>) {
    let Some(tid) = tid else {
        return;
    };
    let task = PathBuf::from(format!("/proc/self/task/{tid}"));
    let until = Instant::now() + RELEASE_LIMIT;
    while task.exists() && Instant::now() < until {
        thread::yield_now();
    }
}

fn serve_connection(stream: &TcpStream, shared: &Shared, seen: &Seen) {
    let mut buffer = Vec::with_capacity(1024);
    loop {
        let head = read_head(stream, &mut buffer, &shared.section, seen);
        let RequestHead {
            screened,
            keep_alive,
        } = match head {
            // The peer closed, or the server shut the socket, before a whole request arrived.
            Ok(None) | Err(_) => return,
            Ok(Some(head)) => head,
        };
        let reply = match screened {
            Ok((label, route)) => {
                // It carried the run's token: the run's own, never closed to make room.
                seen.the_runs.store(true, Ordering::SeqCst);
                let (section, hooks, gates) = (&shared.section, &*shared.hooks, &shared.gates);
                answer(label, work_blocking(section, hooks, gates, label, route))
            }
            Err(reply) => {
                // Only this thread moves it on from answering.
                seen.state.store(REFUSING, Ordering::SeqCst);
                reply
            }
        };
        // A caller that went away while its work was held cannot be told; the work is done.
        let written = write_reply(stream, &reply, keep_alive);
        let waiting = seen.answered();
        if !waiting || written.is_err() || !keep_alive || shared.signal.stopping() {
            return;
        }
    }
}

/// A request as the lab reads it: screened while its head is parsed (see `super::screen`), so
/// nothing of the head is kept, or the reply that refuses a head that is not HTTP or too large.
struct RequestHead {
    screened: Result<(Label, Route), Reply>,
    /// HTTP/1.1 without `Connection: close`, and no body to skip.
    keep_alive: bool,
}

/// Reads one request head from `stream`, keeping in `buffer` whatever follows it, and screens
/// it for `section`: `None` if the stream ends first, or the connection is being closed. A head
/// read takes the request (`Seen::take_request`) before it is screened: a connection being
/// closed screens, and so counts, nothing more.
fn read_head(
    mut stream: &TcpStream,
    buffer: &mut Vec<u8>,
    section: &WorkSection,
    seen: &Seen,
) -> io::Result<Option<RequestHead>> {
    let mut chunk = [0; 1024];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        let refuse = |status, error| {
            if !seen.take_request() {
                return Ok(None);
            }
            let body = json!({ "error": error });
            Ok(Some(RequestHead {
                screened: Err(Reply { status, body }),
                keep_alive: false,
            }))
        };
        match request.parse(buffer) {
            Ok(httparse::Status::Complete(length)) => {
                if !seen.take_request() {
                    return Ok(None);
                }
                let head = RequestHead::read(&request, section);
                buffer.drain(..length);
                return Ok(Some(head));
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

impl RequestHead {
    fn read(request: &httparse::Request<'_, '_>, section: &WorkSection) -> Self {
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
        let head = Head {
            is_get: request.method == Some("GET"),
            // The path without a query string, as Hyper's `uri().path()` gives it.
            path: (request.path.unwrap_or_default().split('?').next()).unwrap_or_default(),
            token: header(TOKEN_HEADER),
            label: header(LABEL_HEADER),
        };
        RequestHead {
            screened: screen(section, head),
            keep_alive: request.version == Some(1) && !says("connection", "close") && !body,
        }
    }
}

fn write_reply(mut stream: &TcpStream, reply: &Reply, keep_alive: bool) -> io::Result<()> {
    let body = reply.body.to_string();
    let status = reply.status;
    let reason = status.canonical_reason().unwrap_or("");
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let allow = reply
        .allow()
        .map_or_else(String::new, |methods| format!("allow: {methods}\r\n"));
    // One write for head and body: two small writes on a kept-alive connection would let
    // Nagle's algorithm hold the second until the client's delayed ACK.
    let response = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         {allow}connection: {connection}\r\n\r\n{body}",
        status.as_u16(),
        body.len()
    );
    stream.write_all(response.as_bytes())?;
    stream.flush()
}
