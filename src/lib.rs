//! `isolation-lab`: see bulkhead isolation work.
//!
//! A real Hyper server on `127.0.0.1:0` guards one declared work section with Tokio semaphores
//! taken without waiting: a request that finds no permit gets HTTP 503 at once, and is never
//! queued or replayed. A coordinator sends held slow requests, tries a fast one while the slow
//! gate is closed, releases the gate, sends new probes, closes everything, and only then writes
//! a report of the actual admission events and responses, compared with the policy model.
//!
//! It is not a benchmark, a queue, a production server template or a global limit: the permits
//! bound one work section in one process, not connections, handler tasks, threads or memory.
//!
//! This file is the map. Data flows one way (`docs/design.md` draws it): command line →
//! instruments → coordinator → fronts → admission; events → evidence → model → report → render.
//!
//! **The ground** every instrument stands on (it names no instrument):
//! - [`policy`], [`label`]: plain types — modes, pools, routes, fronts, request labels.
//! - [`admission`]: pools, gate, ledger and run token; it knows no front and no test.
//! - [`executor`]: how slow work waits (`--work`) and the async front's runtime shape.
//! - [`server`]: the fronts that turn HTTP into calls on the work section.
//! - [`hooks`]: where a test may step into a run (the lab itself passes none).
//! - [`coordinator`]: one policy run — its session, its sequence, its HTTP client.
//! - [`resources`], [`evidence`], [`model`], [`report`], [`outcome`]: what a run observed and
//!   cost, what it must show, the report of both, and the prediction table's cells.
//! - `child`, [`front_process`]: a child process of the lab's, and a front running in one.
//! - `redis_pool`: one limit shared by replica processes, kept in Redis.
//! - `limits`, `procfs`: the process's resource limits, and what `/proc` says it costs.
//! - `interrupts`: Ctrl-C and SIGTERM, caught while a session must close cleanly.
//! - [`draw`]: SVG and text-table primitives.
//!
//! **The instruments**, a folder each:
//! - [`lab`]: the command line's run of each policy, and `predict`.
//! - [`sweep`], [`compare`], [`record`]: every input; both fronts; a saved report checked again.
//! - [`classroom`]: a live page that steps through a real run and lets the room join in.
//! - [`hold`]: what holding N requests costs on each front, each in a child process.
//! - [`replicas`]: replica servers with their own permits or one global limit on Redis.
//!
//! [`cli`] maps the command line onto all of it; [`allocator`] is the binary's allocator (out
//! of memory in one line, a heap census by block size, a slot per async connection).

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub(crate) mod admission;
pub mod allocator;
#[cfg(unix)]
pub(crate) mod child;
pub mod classroom;
pub mod cli;
pub mod compare;
pub mod coordinator;
pub(crate) mod draw;
pub mod evidence;
pub mod executor;
#[cfg(unix)]
pub mod front_process;
#[cfg(unix)]
pub mod hold;
pub mod hooks;
#[cfg(unix)]
pub(crate) mod interrupts;
pub mod lab;
pub mod label;
#[cfg(unix)]
pub(crate) mod limits;
pub(crate) mod model;
pub mod outcome;
pub mod policy;
pub(crate) mod procfs;
pub mod record;
#[cfg(unix)]
pub(crate) mod redis_pool;
#[cfg(unix)]
pub mod replicas;
pub mod report;
pub(crate) mod resources;
pub(crate) mod server;
pub mod sweep;
