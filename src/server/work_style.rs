//! How the async front runs admitted work, by `--work` (`docs/blocking.md`): awaiting the gate
//! (the lab's usual run), blocking the worker thread, handing the blocking wait to Tokio's
//! blocking pool, or running each work class on a runtime of its own. Every style admits the
//! same way, on the request's own connection task, so a refusal is as immediate as ever; what
//! differs is which thread the admitted work then holds.

use std::sync::Arc;

use tokio::runtime::Handle;

use super::{Gates, caught, inside, work, work_blocking};
use crate::admission::gate::GateState;
use crate::admission::section::{Verdict, WorkSection};
use crate::hooks::Hooks;
use crate::label::Label;
use crate::policy::Route;

/// Where the async front's admitted work runs.
#[derive(Clone, Debug, Default)]
pub(crate) enum Dispatch {
    /// The work awaits the gate on its connection task.
    #[default]
    Await,
    /// The work blocks the worker thread its connection task runs on until the gate opens.
    Block,
    /// Slow work's blocking wait runs on the runtime's blocking pool (`spawn_blocking`).
    SpawnBlocking,
    /// Each class's work runs as a task of that class's own runtime, which it may block.
    OwnRuntime {
        /// The runtime slow work runs (and blocks) on.
        slow: Handle,
        /// The runtime fast work runs on.
        fast: Handle,
    },
}

impl Dispatch {
    /// Admits `request` and runs its work this way; see [`super::work`].
    pub(crate) async fn work(
        &self,
        section: &Arc<WorkSection>,
        hooks: &dyn Hooks,
        gates: &Gates,
        request: Label,
        route: Route,
    ) -> Verdict {
        let elsewhere = match self {
            Dispatch::Await => return work(section, hooks, gates, request, route).await,
            // A blocking wait inside a task: the worker thread polling this connection is held
            // until the gate opens, and runs nothing else meanwhile.
            Dispatch::Block => {
                // Yield once first. A multi-thread runtime's workers poll its I/O driver only
                // when they park; a free worker already asleep without it would stay asleep,
                // and every connection would go unread with one worker blocked. The yield
                // wakes a parked worker, which parks again holding the driver (the coordinator
                // also wakes one before a request while some but not all workers are blocked,
                // `FrontThread::wake_a_worker`): then only as
                // many workers as there are blocked requests are lost (`docs/blocking.md`).
                tokio::task::yield_now().await;
                return work_blocking(section, hooks, gates, request, route);
            }
            Dispatch::SpawnBlocking if route == Route::Fast => {
                return work(section, hooks, gates, request, route).await;
            }
            Dispatch::SpawnBlocking => None,
            Dispatch::OwnRuntime { slow, fast } => Some(match route {
                Route::Slow => slow,
                Route::Fast => fast,
            }),
        };
        // Admitted here, on the connection task, so a refusal is immediate; the permit stays
        // with the handler (in `work`) while the wait runs elsewhere.
        let mut work = match section.admit(request, route).await {
            Ok(work) => inside(hooks, work),
            Err(denied) => return denied.into(),
        };
        let wait = section.wait_elsewhere(&mut work, gates.pick(section, request));
        let waited = match elsewhere {
            // Tokio panics when it can start no blocking thread; the connection task's panic
            // is caught at its join and said in the run's failure line.
            None => caught::quietly(|| tokio::task::spawn_blocking(wait)).await,
            Some(runtime) => runtime.spawn(async move { wait() }).await,
        };
        // A wait that could not finish (its runtime shut down under it) left the work
        // unfinished, as an abandoned gate does.
        work.leave(waited.unwrap_or(GateState::Abandoned))
    }
}
