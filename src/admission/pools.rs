//! The pools of work permits, one semaphore per pool of the policy. A pool sheds rather than
//! waits: a permit is taken without waiting, and a pool with none left refuses.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::bounded::{BoundedPermit, BoundedSemaphore};
use crate::policy::{Allocation, Pool};

/// Which semaphore backs the pools: each server front uses its own world's primitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permits {
    /// `tokio::sync::Semaphore`, taken with `try_acquire_owned` (the async front).
    Tokio,
    /// A [`BoundedSemaphore`] on a std `Mutex` (the threaded front).
    Bounded,
}

#[derive(Debug)]
enum Semaphores {
    Tokio(BTreeMap<Pool, Arc<Semaphore>>),
    Bounded(BTreeMap<Pool, Arc<BoundedSemaphore>>),
}

/// A permit of either kind. It returns to its pool when dropped, so capacity is never counted
/// by hand.
#[derive(Debug)]
// Never read: a permit is held only for its `Drop`, which returns it to its pool.
#[expect(dead_code, reason = "a permit is held for its Drop alone")]
pub(crate) enum Permit {
    /// From a Tokio semaphore.
    Tokio(OwnedSemaphorePermit),
    /// From a bounded semaphore.
    Bounded(BoundedPermit),
}

/// The semaphores of one work section.
#[derive(Debug)]
pub(crate) struct Pools {
    allocation: Allocation,
    semaphores: Semaphores,
}

impl Pools {
    /// Full pools for `allocation`.
    pub(crate) fn new(allocation: Allocation, permits: Permits) -> Self {
        let pools = allocation.capacities().into_iter();
        let semaphores = match permits {
            Permits::Tokio => Semaphores::Tokio(
                pools
                    .map(|(p, n)| (p, Arc::new(Semaphore::new(n))))
                    .collect(),
            ),
            Permits::Bounded => {
                Semaphores::Bounded(pools.map(|(p, n)| (p, BoundedSemaphore::new(n))).collect())
            }
        };
        Self {
            allocation,
            semaphores,
        }
    }

    /// A permit from `pool` if one is free, without waiting.
    pub(crate) fn try_acquire(&self, pool: Pool) -> Option<Permit> {
        match &self.semaphores {
            // `Err` is either "no permits" or "closed"; these semaphores are never closed.
            Semaphores::Tokio(s) => s
                .get(&pool)?
                .clone()
                .try_acquire_owned()
                .ok()
                .map(Permit::Tokio),
            Semaphores::Bounded(s) => s.get(&pool)?.try_acquire().map(Permit::Bounded),
        }
    }

    /// Permits of `pool` free right now.
    pub(crate) fn available(&self, pool: Pool) -> usize {
        match &self.semaphores {
            Semaphores::Tokio(s) => s.get(&pool).map_or(0, |s| s.available_permits()),
            Semaphores::Bounded(s) => s.get(&pool).map_or(0, |s| s.available()),
        }
    }

    /// Permits of `pool` taken right now: the work inside the section that draws from it.
    pub(crate) fn active(&self, pool: Pool) -> usize {
        let capacity = self.allocation.capacities().get(&pool).copied();
        capacity.unwrap_or(0).saturating_sub(self.available(pool))
    }

    /// The allocation the pools were built for.
    pub(crate) fn allocation(&self) -> &Allocation {
        &self.allocation
    }
}
