//! A server front in a child process: the lab starts its own binary again with the hidden
//! subcommand `isolation-lab __front <spec>`, so the front's `/proc/<pid>` figures are its own
//! and a front that dies cannot take the lab with it. Instruments (`hold`, `replicas`) drive it
//! through [`FrontProcess`]; the child dies with its parent (see
//! `src/child/`).
//!
//! The protocol, one JSON value per line each way (`protocol` has the types):
//!
//! - **Spec**, the child's one argument: [`FrontSpec`], e.g.
//!   `{"front":"async","capacity":200}` (optional: `"stream":"counts"|"events"`,
//!   `"drain_ms"`, `"backlog"`, and for a replica `"replica":"r1"` with
//!   `"global":{"url":"redis://127.0.0.1:PORT","run":"...","lease_ms":2000}`: its permits then
//!   come from that run's Redis-backed pool of `capacity`, and `stopped` also accounts for
//!   each permit it took). Unknown fields and a capacity outside 1 through
//!   [`MAX_CAPACITY`](protocol::MAX_CAPACITY) are refused like any bad command line: exit 2,
//!   before any socket exists. A field added later must have a default, so every older spec
//!   still parses.
//! - **Child → parent**, on its stdout ([`FromFront`], tagged by `"message"`): first `ready`
//!   (`address`, run `token`, `pid`) or `failed` (`reason`, then exit 1); then `counts` (running
//!   totals of the section's events, one line per batch) or `event` (every ledger event), as
//!   the spec's `stream` asks; `lease_lost` (a replica's holder whose renewals found its
//!   lease lost, and why) whenever one is; last, after a stop, `stopped` (the server summary,
//!   its error if any, the final state, the ledger audit and the totals), then exit 0.
//! - **Parent → child**, on its stdin ([`ToFront`](protocol::ToFront), tagged by
//!   `"command"`): `open_gate`, `stop`, `census` (answered by a `census` message: the child's
//!   heap blocks by size).
//!   The end of stdin is a stop with nobody left to report to. On a stop the child abandons a
//!   gate that is still closed (held work is answered 503 `work_abandoned`), stops its server
//!   (listener closed, connections drained and joined), reports and exits.
//!
//! The child's stderr is for people; the parent keeps its last line to explain a death.
//!
//! - `protocol`: the spec, commands and messages.
//! - `serve`: the child's side, [`serve()`].
//! - `replica_pool`: a replica's permits from the Redis-backed global pool.
//! - `parent`: the parent's side, `FrontProcess`.

mod parent;
mod protocol;
mod replica_pool;
mod serve;
#[cfg(test)]
mod tests;

pub(crate) use parent::{FrontError, FrontProcess, StoppedFront};
pub use protocol::FrontSpec;
pub(crate) use protocol::{FromFront, GlobalSpec, Stream};
pub use serve::serve;

/// The hidden subcommand that runs a front as a child process.
pub const SUBCOMMAND: &str = "__front";
