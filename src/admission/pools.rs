//! The pools of work permits: one Tokio semaphore per pool of the policy. A pool sheds rather
//! than waits: a permit is taken with `try_acquire_owned`, and a pool with none left refuses.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::policy::{Policy, Pool};

/// The semaphores of one policy run.
#[derive(Debug)]
pub struct Pools {
    policy: Policy,
    semaphores: BTreeMap<Pool, Arc<Semaphore>>,
}

impl Pools {
    /// Full pools for `policy`.
    pub fn new(policy: Policy) -> Self {
        let semaphores = policy
            .pools()
            .iter()
            .map(|&pool| (pool, Arc::new(Semaphore::new(policy.capacity(pool)))))
            .collect();
        Self { policy, semaphores }
    }

    /// A permit from `pool` if one is free, without waiting. The permit returns to the pool when
    /// it is dropped, so capacity is never counted by hand.
    pub fn try_acquire(&self, pool: Pool) -> Option<OwnedSemaphorePermit> {
        // `Err` is either "no permits" or "closed"; these semaphores are never closed.
        self.semaphores.get(&pool)?.clone().try_acquire_owned().ok()
    }

    /// Permits of `pool` free right now.
    pub fn available(&self, pool: Pool) -> usize {
        self.semaphores
            .get(&pool)
            .map_or(0, |semaphore| semaphore.available_permits())
    }

    /// Permits of `pool` taken right now: the work inside the section that draws from it.
    pub fn active(&self, pool: Pool) -> usize {
        self.policy
            .capacity(pool)
            .saturating_sub(self.available(pool))
    }

    /// The policy the pools were built for.
    pub fn policy(&self) -> Policy {
        self.policy
    }
}
