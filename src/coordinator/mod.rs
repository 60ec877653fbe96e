//! The coordinator: one policy run, step by step (`docs/contract.md`, "The sequence").
//!
//! - [`session`]: opens the server and client of a run, and closes them on every path.
//! - [`sequence`]: the steps, one `next_step().await` at a time.
//! - [`client`]: the loopback HTTP client and its callers.
//! - [`failure`]: why a run failed, as a type.

pub(crate) mod client;
pub(crate) mod failure;
pub(crate) mod sequence;
pub(crate) mod session;

use std::sync::Arc;
use std::time::Duration;

pub use failure::{Cause, Failure, Left, Step};
pub use sequence::{Planned, Run};

use crate::executor::Executor;
use crate::hooks::{Hooks, NoHooks};
use crate::policy::{Front, Held, Policy};
use crate::report::PolicyReport;

/// The longest any one step may wait before the run is failed as stalled, unless a run is
/// given another: a stalled run exits within three of them, with everything it opened closed.
pub const SAFETY_TIMEOUT: Duration = Duration::from_secs(5);

/// How to run a policy: on which front and executor, with which hooks, and the safety timeout.
#[derive(Clone, Debug)]
pub struct Options {
    /// The server front.
    pub front: Front,
    /// How its admitted slow work waits, and the async front's runtime (`--work`,
    /// `--workers`, `--blocking-threads`).
    pub executor: Executor,
    /// Where a test steps in (the command line's run: [`NoHooks`]).
    pub hooks: Arc<dyn Hooks>,
    /// The longest any one wait may take before the run fails as stalled.
    pub safety_timeout: Duration,
}

impl Default for Options {
    /// The command line's run: the async front, nothing broken, [`SAFETY_TIMEOUT`].
    fn default() -> Self {
        Options {
            front: Front::Async,
            executor: Executor::default(),
            hooks: Arc::new(NoHooks),
            safety_timeout: SAFETY_TIMEOUT,
        }
    }
}

impl Options {
    /// The default options on `front`.
    pub fn on(front: Front) -> Self {
        Options {
            front,
            ..Options::default()
        }
    }

    /// These options with `executor`.
    pub fn with_executor(self, executor: Executor) -> Self {
        Options { executor, ..self }
    }

    /// These options with a test's `hooks`.
    pub fn with_hooks(self, hooks: impl Hooks + 'static) -> Self {
        Options {
            hooks: Arc::new(hooks),
            ..self
        }
    }
}

/// One policy run: its report, and why it failed if it did.
#[derive(Debug)]
pub struct PolicyRun {
    /// The policy's report, partial where a failure cut the sequence short.
    pub report: PolicyReport,
    /// Why the run failed (a stall, an error, a task that did not stop).
    pub failure: Option<Failure>,
}

impl PolicyRun {
    /// Why this run does not count as a match, in one line: its failure, or else its first
    /// difference from the model. `None` when it ran to the end and matched.
    pub fn reason(&self) -> Option<String> {
        if let Some(failure) = &self.failure {
            return Some(failure.to_string());
        }
        crate::report::differs(&self.report.model.mismatches)
    }
}

/// Runs one policy on its own fresh server, pools and gate, with `options` (the front, the
/// executor, a test's hooks, the safety timeout), then closes everything it opened before
/// assembling the report. With a test's hooks, this is how tests show that every unhappy path
/// ends the run with `failure` set and everything closed, joined and returned.
pub async fn run_policy_with(policy: Policy, held: Held, options: Options) -> PolicyRun {
    match Run::open(policy, held, options) {
        Ok(mut run) => {
            run.run_to_end().await;
            run.close().await
        }
        Err(never_started) => *never_started,
    }
}
