//! Global permits: one limit shared by separate replica processes, kept in Redis. A
//! [`GlobalPermits`] is a semaphore of `capacity` permits in one Redis sorted set per run; a
//! try-acquire is one atomic Lua script that admits a [`Holder`] or refuses at once naming
//! the holders, and per-holder leases timed by Redis's clock ([`Lease`], renewed by a
//! [`HeldLease`]) bound how long a dead holder keeps its permit. [`LoopbackUrl`] keeps every
//! connection on this machine; [`LocalRedis`] starts a private `redis-server` for tests and
//! runs. A leaf: it uses none of the lab's other modules.

// The replicas instrument uses the permits, the URL and the private server; the rest of the
// interface (a lease's state as it is renewed, a holder's parts, the server's pid and
// directory, the raw decisions) serves this module's tests and the instruments to come.
#![cfg_attr(
    not(test),
    expect(
        dead_code,
        unused_imports,
        reason = "part of the interface is used only by the module's tests so far"
    )
)]

mod lease;
mod local;
mod permits;
mod scripts;
mod url;

#[cfg(test)]
mod tests;

pub(crate) use lease::{HeldLease, LeaseState};
pub(crate) use local::{LocalRedis, redis_server_available};
pub(crate) use permits::{
    Decision, GlobalError, GlobalPermits, Hold, Holder, Holding, Lease, MAX_LEASE_MS,
    REDIS_TIMEOUT, Renewal,
};
pub(crate) use url::LoopbackUrl;
