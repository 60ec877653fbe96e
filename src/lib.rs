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
//! **The public surface** — what a library user, and the integration tests in `tests/`, which
//! run the lab as a user would (real servers on `127.0.0.1:0`, real HTTP), may name. Every
//! other module and item is `pub(crate)`; `missing_docs` covers exactly this surface, and
//! `tests/lab/architecture.rs` checks that the list of public modules below is the one
//! `docs/design.md` ("The public surface") documents, so it cannot grow silently.
//! - Inputs: [`policy`], [`label`] (modes, pools, routes, fronts, request labels), [`executor`]
//!   (how slow work waits), [`coordinator`] (`Options`, one policy run and its steppable
//!   sequence), [`hooks`] (`Hooks`, where a test steps into a lab run; `hold` and `replicas`
//!   have their own).
//! - What a run gives back: [`report`], the [`evidence`] it carries (with the section's
//!   records and the run's resources), and [`outcome`] (the prediction table's cells).
//! - The instruments' entry points, a folder each: [`lab`] (`run*`, `predict*`, `block_on`,
//!   its renderings), [`sweep`], [`compare`], [`record`], [`classroom`] (`serve`, `run` and
//!   their `Config`), [`hold`], [`replicas`].
//! - For the binary: [`cli`], [`allocator`] (out of memory in one line, a heap census by block
//!   size, a slot per async connection) and [`front_process`] (`serve`, the hidden `__front`).
//!
//! **Inside the crate**, the ground under the instruments (it names no instrument):
//! - `admission`: pools, gate, ledger and run token; it knows no front and no test.
//! - `server`: the fronts that turn HTTP into calls on the work section.
//! - `model`, `resources`: what a run must show, and what it cost.
//! - `child`: a child process of the lab's; `redis_pool`: one limit shared by replica
//!   processes, kept in Redis.
//! - `limits`, `procfs`: the process's resource limits, and what `/proc` says it costs.
//! - `interrupts`: Ctrl-C, SIGTERM, SIGHUP and the other signals sent to end a program, caught
//!   while a session must close cleanly, and one line at once anywhere else.
//! - `draw`: SVG and text-table primitives, and text for a terminal (`terminal`, which `cli`
//!   passes on to the binary).

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
// The maps in module docs (this one, and each folder's) link the private rooms they name, for
// a reader of `cargo doc --document-private-items`, where those links resolve; every other
// rustdoc lint stays on, and that command is warning-free.
#![allow(rustdoc::private_intra_doc_links)]

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
