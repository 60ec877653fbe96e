//! The pools of work permits, one semaphore per pool of the policy, or a pool shared with other
//! processes. A pool sheds rather than waits: a permit is taken without waiting, and a pool
//! with none left refuses.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::bounded::{BoundedPermit, BoundedSemaphore};
use super::shared_pool::{SharedHeld, SharedLink};
use crate::policy::{Allocation, Pool};

/// Which semaphore backs the pools: each server front uses its own world's primitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Permits {
    /// `tokio::sync::Semaphore`, taken with `try_acquire_owned` (the async front).
    Tokio,
    /// A [`BoundedSemaphore`] on a std `Mutex` (the threaded front).
    Bounded,
}

#[derive(Debug)]
enum Semaphores {
    Tokio(BTreeMap<Pool, Arc<Semaphore>>),
    Bounded(BTreeMap<Pool, Arc<BoundedSemaphore>>),
    /// Every pool's permits come from a pool shared with other processes; the link counts the
    /// ones this section holds.
    Remote(Arc<SharedLink>),
}

/// A permit of either kind. It returns to its pool when dropped, so capacity is never counted
/// by hand.
#[derive(Debug)]
#[expect(dead_code, reason = "a permit is held for its Drop alone")]
pub(crate) enum Permit {
    /// From a Tokio semaphore.
    Tokio(OwnedSemaphorePermit),
    /// From a bounded semaphore.
    Bounded(BoundedPermit),
    /// From a pool shared with other processes.
    Remote(SharedHeld),
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

    /// Pools whose permits come from a pool shared with other processes, through `link`.
    pub(crate) fn remote(allocation: Allocation, link: Arc<SharedLink>) -> Self {
        Self {
            allocation,
            semaphores: Semaphores::Remote(link),
        }
    }

    /// The link to the shared pool, if the permits are remote.
    pub(crate) fn link(&self) -> Option<&Arc<SharedLink>> {
        match &self.semaphores {
            Semaphores::Remote(link) => Some(link),
            Semaphores::Tokio(_) | Semaphores::Bounded(_) => None,
        }
    }

    /// A permit from `pool` if one is free, without waiting; never one of a remote pool,
    /// which decides after a round trip.
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
            Semaphores::Remote(_) => None,
        }
    }

    /// Permits of `pool` free right now.
    pub(crate) fn available(&self, pool: Pool) -> usize {
        match &self.semaphores {
            Semaphores::Tokio(s) => s.get(&pool).map_or(0, |s| s.available_permits()),
            Semaphores::Bounded(s) => s.get(&pool).map_or(0, |s| s.available()),
            // This section's view: the capacity less the permits it holds. Other processes may
            // hold the rest; only the shared pool knows.
            Semaphores::Remote(link) => {
                let capacity = self.allocation.capacities().get(&pool).copied();
                capacity.unwrap_or(0).saturating_sub(link.held(pool))
            }
        }
    }

    /// Permits of `pool` taken right now: the work inside the section that draws from it.
    pub(crate) fn active(&self, pool: Pool) -> usize {
        let capacity = self.allocation.capacities().get(&pool).copied();
        capacity.unwrap_or(0).saturating_sub(self.available(pool))
    }

    pub(crate) fn allocation(&self) -> &Allocation {
        &self.allocation
    }
}
