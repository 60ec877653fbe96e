//! `replicas`: can two servers' permits make one limit? Two to four replica servers, each its
//! own child process (the lab's hidden `__front` subcommand) with its own work section and
//! closed gate, behind a coordinator that balances slow requests round robin. With their own
//! permits (`--global off`) each admits up to `slots`, so together they hold replicas × slots.
//! With every permit from one Redis-backed semaphore (`--global local` or a loopback
//! `redis://` URL) exactly `slots` are held across all of them, and a refusal names the
//! holders. Then a replica holding permits is paused past its lease (its permits go to another
//! replica while its work still runs: over-admission) and another is killed (its permits are
//! refused to everyone until its lease ends, or leak without one). Every admission carries a
//! fencing token, and the work writes to a shared dependency that refuses a stale one
//! (`--fencing off`: accepts it), so the paused holder's late write is refused where it lands.
//! Every lease a replica finds lost is reported, and the report names each over-admission.
//!
//! - `inputs`: the checked flags.
//! - `model`: what the inputs predict, and the check of the evidence.
//! - `evidence`: what a run observed.
//! - `report`: inputs, prediction, evidence, over-admissions, the dependency's account and
//!   differences, as one report.
//! - `run`: how it runs: the replicas, the engine, the pause and the crash.
//! - `render`: the report as text for a person.

pub(crate) mod evidence;
pub(crate) mod inputs;
pub(crate) mod model;
pub mod render;
pub(crate) mod report;
pub(crate) mod run;

pub use inputs::{Engine, Fencing, LeaseMs, ReplicaCount, ReplicaId, ReplicasInputs, Requests};
pub use report::ReplicasReport;
// What a replicas report carries, named where the report is.
pub use crate::redis_pool::{Effect, LoopbackUrl, LossCause, WorkEnd};
pub use evidence::Sent;
pub use model::{CountedAt, Lapsed, OverAdmission};
pub use run::{ReplicasHooks, ReplicasOptions, run, run_with};
