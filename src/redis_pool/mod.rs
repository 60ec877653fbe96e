//! Global permits: one limit shared by separate replica processes, kept in Redis. A
//! [`GlobalPermits`] is a semaphore of `capacity` permits in one Redis sorted set per run; a
//! try-acquire is one atomic Lua script that admits a [`Holder`] or refuses at once naming
//! the holders, and per-holder leases timed by Redis's clock ([`Lease`], renewed by a
//! [`HeldLease`]) bound how long a dead holder keeps its permit. [`LoopbackUrl`] keeps every
//! connection on this machine; [`LocalRedis`] starts a private `redis-server` for tests and
//! runs, asking for a fresh password. Of the lab's other modules it uses only `child` (which
//! starts and reaps that server), `admission`'s run token (made as its password is),
//! `draw::terminal` (which quotes what a server says) and `policy::digits_only` (a port is
//! read as every number on the command line is).
//!
//! - [`permits`]: the semaphore, its holders and its try-acquire.
//! - [`scripts`]: the Lua scripts that make each operation one atomic step inside Redis.
//! - [`lease`]: a held permit, renewed while it is held.
//! - [`local`]: the private `redis-server` child process.
//! - [`url`]: the Redis URL, kept on this machine.

mod lease;
mod local;
mod permits;
mod scripts;
mod url;

#[cfg(test)]
mod tests;

pub use lease::LossCause;
pub(crate) use lease::{HeldLease, LeaseLoss, Losses};
pub(crate) use local::{LocalRedis, PASSWORD_VAR, Password};
#[cfg(test)]
pub(crate) use permits::Fence;
pub use permits::{Effect, WorkEnd};
pub(crate) use permits::{GlobalError, GlobalPermits, Hold, Holder, Lease};
pub use url::LoopbackUrl;
