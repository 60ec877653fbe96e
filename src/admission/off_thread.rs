//! Admitted work whose blocking wait runs on another thread than its handler's: a thread of
//! Tokio's blocking pool (`--work spawn-blocking`) or a worker of the work class's own runtime
//! (`--work own-runtime`). The handler admits and keeps the [`Work`] (and so its permit); the
//! wait is a closure that owns what it needs, records `started` when a thread runs it, and
//! `held` if the gate is closed. Until a thread runs it, the work is admitted, its permit
//! held, and not running: a queue the permits cannot see.
//!
//! The handler may be cancelled while its wait is queued (a failed run closes then): the work
//! leaves, and the wait, when a thread runs it at last, finds that it left and records nothing.
//! A wait already running when its work leaves goes on: a thread blocked at the gate stays
//! blocked until the gate opens, or is abandoned (a failed run's close).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::super::gate::{Gate, GateState};
use super::super::ledger::Event;
use super::{Work, WorkSection};
use crate::policy::Route;

impl WorkSection {
    /// The wait of admitted `work`, for another thread to run: it records `started`, then, for
    /// slow work, waits at the gate (recording `held` if it is closed) and says how the gate
    /// left; fast work has nothing to wait for. Hand the result to [`Work::leave`].
    ///
    /// If the work has left by the time a thread runs the wait, it records nothing and waits
    /// for nothing: no one is there to take its answer. (If it leaves while the wait blocks at
    /// the gate, the thread stays blocked until the gate opens or is abandoned, recording nothing
    /// more.)
    pub(crate) fn wait_elsewhere(
        self: &Arc<Self>,
        work: &mut Work<'_>,
        gate: Arc<Gate>,
    ) -> impl FnOnce() -> GateState + Send + 'static {
        let section = self.clone();
        let (request, pool, route) = (work.request, work.pool, work.route);
        let left = work.left.insert(Arc::new(AtomicBool::new(false))).clone();
        let gate = (route == Route::Slow).then_some(gate);
        move || {
            let record = |event| section.record_unless(Some(&left), Some(request), pool, event);
            if !record(Event::Started) {
                return GateState::Abandoned;
            }
            match gate {
                Some(gate) => gate.pass_blocking(|| {
                    record(Event::Held);
                }),
                None => GateState::Open,
            }
        }
    }
}
