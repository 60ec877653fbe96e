//! The connection tasks of a Hyper server on Tokio — the async front's, and the classroom's —
//! with whether each is busy answering a request, so a stopping server can close at once the
//! ones that are not, drain the rest, and count how every one ended.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper_util::server::graceful::GracefulShutdown;
use tokio::task::{self, AbortHandle, JoinError, JoinSet};

use super::Handlers;

/// Whether a connection is answering a request right now: while it is, closing it would drop
/// an answer its client is owed.
pub(crate) trait Busy: Send + Sync {
    /// Busy answering.
    fn busy(&self) -> bool;
}

/// A flag set while a request's handler runs (the async front's answers are whole, so the
/// handler's life is the answer's).
impl Busy for AtomicBool {
    fn busy(&self) -> bool {
        self.load(Ordering::SeqCst)
    }
}

/// The connection tasks, whether each is busy, and how the ended ones ended.
#[derive(Default)]
pub(crate) struct Connections {
    tasks: JoinSet<()>,
    open: HashMap<task::Id, (Arc<dyn Busy>, AbortHandle)>,
    closed_idle: HashSet<task::Id>,
    /// How the joined tasks ended.
    pub(crate) ended: Handlers,
}

impl Connections {
    /// Runs one connection as a task of its own; `busy` says when it is answering. Returns
    /// a handle that can close it (it then counts as aborted).
    pub(crate) fn spawn(
        &mut self,
        busy: Arc<dyn Busy>,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> AbortHandle {
        let handle = self.tasks.spawn(task);
        self.open.insert(handle.id(), (busy, handle.clone()));
        handle
    }

    /// Makes room for one more connection before it is spawned, so the bookkeeping's own
    /// growth is not placed in that connection's slot (see `src/allocator/slots.rs`).
    pub(crate) fn make_room(&mut self) {
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
        if tokio::time::timeout(limit, graceful.shutdown())
            .await
            .is_err()
        {
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
        for (&id, (busy, handle)) in &self.open {
            if !busy.busy() && !handle.is_finished() {
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
                (self.ended.panicked).push(format!("a connection task panicked: {e}"))
            }
            Err(_) if !closed_idle => self.ended.aborted += 1,
            Ok(_) | Err(_) => self.ended.completed += 1,
        }
    }
}
