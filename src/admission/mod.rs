//! Admission state, independent of any server front: the pools of work permits, the slow gate,
//! the ledger of work events and the control observer that streams them to the coordinator.
//!
//! - [`audit`]: the ledger check, pool by pool.
//! - [`bounded`]: the threaded front's bounded semaphore.
//! - [`gate`]: the latched slow gate.
//! - [`pools`]: one semaphore per pool (Tokio's or the bounded one), taken without waiting.
//! - [`ledger`]: the ordered work events and the snapshots derived from them.
//! - [`shared_pool`]: permits from a pool shared with other processes, and the driver of its round
//!   trips.
//! - [`section`]: the protected work section that ties them together.
//! - [`token`]: the run token that only the run's own callers present.

pub(crate) mod audit;
pub(crate) mod bounded;
pub(crate) mod gate;
pub(crate) mod ledger;
pub(crate) mod pools;
pub(crate) mod section;
pub(crate) mod shared_pool;
pub(crate) mod token;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks a mutex whose data stays consistent even if a holder panicked: no critical section in
/// this module leaves its data half-changed across a call that can panic (each takes a permit,
/// counts, pushes or flips a flag, in that order), so a poisoned lock holds nothing torn.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
