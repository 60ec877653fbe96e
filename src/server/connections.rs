//! The connection tasks of a Hyper server on Tokio — the async front's, and the classroom's —
//! with whether each is busy answering a request, so a full server can close the oldest one
//! that owes nothing, a stopping server can close at once the ones that are not busy and drain
//! the rest, and every one's end is counted.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use hyper_util::server::graceful::GracefulShutdown;
use tokio::task::{self, AbortHandle, JoinError, JoinSet};

use super::Handlers;
use crate::child::awake_within;

/// The most times [`Connections::room_for_one`] yields for connections not yet polled.
const POLL_YIELDS: usize = 4;

/// What the async fronts call a connection's task when it panics.
pub(crate) const CONNECTION_TASK: &str = "a connection task";

/// What one connection owes its client: how many answers are being made or sent, and whether
/// one of them is an event stream (the classroom's).
#[derive(Debug, Default)]
pub(crate) struct Owed {
    answers: AtomicUsize,
    /// Set while an answer is an event stream.
    streaming: AtomicBool,
    /// Set once its task has been polled: what its client had sent by then has been read.
    polled: AtomicBool,
    /// Set once it carried a run's token (a front's): the run's own connection.
    the_runs: AtomicBool,
}

impl Owed {
    /// Busy answering: it owes an answer that is not an event stream. Closing it now would drop
    /// an answer its client is owed; an event stream owes nothing (a client that stopped
    /// reading would never let it finish).
    pub(super) fn busy(&self) -> bool {
        self.answers.load(Ordering::SeqCst) > 0 && !self.streaming.load(Ordering::SeqCst)
    }

    /// No request in progress: between requests, or a head not yet whole.
    pub(crate) fn idle(&self) -> bool {
        self.answers.load(Ordering::SeqCst) == 0
    }

    /// Its task has been polled once: what its client had sent by then has been read.
    pub(crate) fn mark_polled(&self) {
        self.polled.store(true, Ordering::SeqCst);
    }

    /// It carried the run's token: the run's own connection, which is never closed to make
    /// room (an idle one may be the run's client's, kept for its next request).
    pub(crate) fn mark_the_runs(&self) {
        self.the_runs.store(true, Ordering::SeqCst);
    }

    /// Not yet polled: accepted in the burst the new one came in, it may hold a whole request
    /// unread (a page's control, or a run's F1, queued behind a flood).
    fn unpolled(&self) -> bool {
        self.idle() && !self.polled.load(Ordering::SeqCst)
    }

    /// Whether it may be closed to make room, and which first: an idle connection whose task
    /// has been polled (between requests, or a head not yet whole), then an event stream.
    /// Never one answering, one of a run's own, or one not yet polled (then the new one is
    /// refused instead).
    fn closing_order(&self) -> Option<u8> {
        if self.busy() || self.the_runs.load(Ordering::SeqCst) || self.unpolled() {
            return None;
        }
        Some(u8::from(!self.idle()))
    }
}

/// One answer owed, for as long as this lives: on the async front, the request's handler
/// (its answers are whole, so the handler's life is the answer's); on the classroom's, from
/// the moment its request is whole until its body is dropped (sent, or the connection gone).
#[derive(Debug)]
pub(crate) struct Owing {
    owed: Arc<Owed>,
    /// This answer is an event stream.
    stream: bool,
}

impl Owing {
    pub(crate) fn new(owed: Arc<Owed>) -> Self {
        owed.answers.fetch_add(1, Ordering::SeqCst);
        Owing {
            owed,
            stream: false,
        }
    }

    /// This answer is an event stream: while it lasts the connection owes nothing. Once it
    /// ends, the next request on the connection is owed its answer as any other.
    pub(crate) fn a_stream(mut self) -> Self {
        self.owed.streaming.store(true, Ordering::SeqCst);
        self.stream = true;
        self
    }
}

impl Drop for Owing {
    fn drop(&mut self) {
        if self.stream {
            self.owed.streaming.store(false, Ordering::SeqCst);
        }
        self.owed.answers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An open connection's task: spawned `age`-th, what it owes, and whether it is being closed
/// to make room.
struct Open {
    age: u64,
    owed: Arc<Owed>,
    handle: AbortHandle,
    closing: bool,
}

/// The connection tasks, whether each is busy, and how the ended ones ended.
#[derive(Default)]
pub(crate) struct Connections {
    tasks: JoinSet<()>,
    open: HashMap<task::Id, Open>,
    spawned: u64,
    closed_idle: HashSet<task::Id>,
    /// How the joined tasks ended.
    pub(crate) ended: Handlers,
}

impl Connections {
    /// Runs one connection as a task of its own; `owed` says when it is answering.
    pub(crate) fn spawn(
        &mut self,
        owed: Arc<Owed>,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        let handle = self.tasks.spawn(task);
        self.spawned += 1;
        let open = Open {
            age: self.spawned,
            owed,
            handle,
            closing: false,
        };
        self.open.insert(open.handle.id(), open);
    }

    /// Closes an open connection that owes no answer, to make room for a new one: the oldest
    /// with no request in progress, else the oldest event stream (its client reconnects, and
    /// a flood of streams cannot then lock every other client out); never one not yet polled,
    /// nor one of a run's own (`Owed::closing_order`). False when there is none. Owing nothing, it counts as completed, as one closed idle at a stop, and
    /// as open until its task is joined.
    pub(crate) fn close_oldest_not_busy(&mut self) -> bool {
        let open = self.open.iter_mut();
        let free = open.filter(|(_, c)| !c.closing && !c.handle.is_finished());
        let free = free.filter_map(|(id, c)| Some(((c.owed.closing_order()?, c.age), id, c)));
        let Some((_, &id, oldest)) = free.min_by_key(|&(order, _, _)| order) else {
            return false;
        };
        oldest.closing = true;
        oldest.handle.abort();
        self.closed_idle.insert(id);
        true
    }

    /// Makes room for one more connection while `most` are open: closes one that owes no answer
    /// ([`Connections::close_oldest_not_busy`]) and joins its task, which ends at once, so no
    /// more than `most` are ever open. With none to close but some not yet polled, accepted in
    /// the burst the new one came in, it first lets them run (a few yields), as each may then
    /// be closed, or end. False when there is none to close even so (every open one answering,
    /// or a run's own): then the new one is closed instead.
    pub(crate) async fn room_for_one(&mut self, most: usize) -> bool {
        let mut yields = 0;
        loop {
            self.reap();
            if self.open() < most {
                return true;
            }
            if self.close_oldest_not_busy() {
                break;
            }
            if yields == POLL_YIELDS || !self.any_unpolled() {
                return false;
            }
            // On the lab's current-thread runtime one yield runs every task woken before it.
            task::yield_now().await;
            yields += 1;
        }
        while self.open() >= most {
            match self.tasks.join_next_with_id().await {
                Some(ended) => self.count(ended),
                None => break,
            }
        }
        true
    }

    /// Whether an open connection has not yet been polled.
    fn any_unpolled(&self) -> bool {
        (self.open.values()).any(|c| !c.closing && c.owed.unpolled())
    }

    /// Makes room for one more entry before a connection is spawned, so the bookkeeping's own
    /// growth is not placed in that connection's slot (see `src/allocator/slots.rs`).
    pub(crate) fn reserve_entry(&mut self) {
        self.open.reserve(1);
    }

    /// How many connection tasks are open (as of the last [`Connections::reap`]).
    pub(crate) fn open(&self) -> usize {
        self.open.len()
    }

    /// Joins the tasks that have ended, so nothing grows with the number of connections.
    pub(crate) fn reap(&mut self) {
        while let Some(ended) = self.tasks.try_join_next_with_id() {
            self.count(ended);
        }
    }

    /// Stops the connections, the listener already closed: closes at once every one not busy —
    /// Hyper's graceful shutdown would close an idle one, but it waits for ever for a head a
    /// client started and never finished — asks the rest to finish through `graceful`, aborts
    /// what is still open after `limit`, and joins every task. Says why it could not finish
    /// cleanly, naming the connections as `what` (e.g. "connections").
    pub(crate) async fn drain(
        &mut self,
        graceful: GracefulShutdown,
        limit: Duration,
        what: &str,
    ) -> Option<String> {
        self.close_idle();
        let mut error = None;
        if awake_within(limit, graceful.shutdown()).await.is_none() {
            self.tasks.abort_all();
            error = Some(format!(
                "{what} were still open {} s after the server asked them to close; aborted",
                limit.as_secs()
            ));
        }
        while let Some(ended) = self.tasks.join_next_with_id().await {
            self.count(ended);
        }
        error
    }

    /// Aborts every connection task that is not busy; they count as completed.
    fn close_idle(&mut self) {
        for (&id, Open { owed, handle, .. }) in &self.open {
            if !owed.busy() && !handle.is_finished() {
                handle.abort();
                self.closed_idle.insert(id);
            }
        }
    }

    /// Counts how one task ended. A connection's own error (a client that went away) is not
    /// the server's failure; a panic in a handler is.
    fn count(&mut self, ended: Result<(task::Id, ()), JoinError>) {
        let id = match &ended {
            Ok((id, ())) => *id,
            Err(e) => e.id(),
        };
        self.open.remove(&id);
        let closed_idle = self.closed_idle.remove(&id);
        match ended {
            Err(e) if e.is_panic() => {
                let panic = e.into_panic();
                (self.ended.panicked).push(super::panicked(CONNECTION_TASK, panic.as_ref()))
            }
            Err(_) if !closed_idle => self.ended.aborted += 1,
            Ok(_) | Err(_) => self.ended.completed += 1,
        }
    }
}
