//! Admission state, independent of any server front: the pools of work permits, the slow gate,
//! the ledger of work events and the control observer that streams them to the coordinator.
//!
//! - [`gate`]: the latched slow gate.
//! - [`pools`]: one Tokio semaphore per pool, taken without waiting.
//! - [`ledger`]: the ordered work events and the snapshots derived from them.
//! - [`section`]: the protected work section that ties the three together.

pub mod gate;
pub mod ledger;
pub mod pools;
pub mod section;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks a mutex whose data stays consistent even if a holder panicked: every critical section
/// in this module is a single push or flag write, so a poisoned lock holds nothing half-done.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
