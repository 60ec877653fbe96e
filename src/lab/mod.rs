//! The lab's own experiment: the policies the command line selects, each run on a fresh server
//! and checked against the model, gathered into one report; and `predict`, the model's answers
//! for the same inputs with no server at all.
//!
//! - [`render`]: the report for a person: text, timeline, picture.

#[cfg(test)]
pub(crate) mod fixtures;
pub mod render;

use crate::coordinator::{self, Options};
use crate::executor::Executor;
use crate::outcome;
use crate::policy::{self, Front, Inputs};
use crate::report::{self, Report, Runner};

/// Runs the policies `inputs` selects, each on its own fresh async server, and reports what
/// happened. Stops at the first policy that fails or differs from the model; the report then
/// carries `failure` and `matches_model: false`.
pub async fn run(inputs: Inputs) -> Report {
    run_on(Front::Async, inputs).await
}

/// [`run`] on either server front.
pub async fn run_on(front: Front, inputs: Inputs) -> Report {
    run_with(inputs, Options::on(front)).await
}

/// [`run`] with `options`: a front, injected faults, a safety timeout.
pub async fn run_with(inputs: Inputs, options: Options) -> Report {
    let mut invocation = Invocation::new(inputs, &options);
    for &mode in inputs.mode.modes() {
        let policy = inputs.policy(mode);
        let run = coordinator::run_policy_with(policy, inputs.held, options.clone()).await;
        if !invocation.push(mode, run) {
            break;
        }
    }
    invocation.report()
}

/// The policy runs of one invocation, gathered into its report: the command line's run, or one
/// run of a classroom session, stepped by hand. The first policy that fails or differs from the
/// model stops the invocation, and the report carries its reason in `failure`.
#[derive(Debug)]
pub(crate) struct Invocation {
    inputs: Inputs,
    executor: Executor,
    runner: Runner,
    policies: Vec<report::PolicyReport>,
    failure: Option<String>,
}

impl Invocation {
    /// An invocation of `inputs` with `options`, before any policy ran.
    pub(crate) fn new(inputs: Inputs, options: &Options) -> Self {
        Invocation {
            inputs,
            executor: options.executor,
            runner: Runner::on(options.front, options.executor, options.safety_timeout),
            policies: Vec::new(),
            failure: None,
        }
    }

    /// Adds a finished policy run; `false` if it failed or differed, which ends the invocation.
    pub(crate) fn push(&mut self, mode: policy::Mode, run: coordinator::PolicyRun) -> bool {
        let reason = run.reason();
        self.policies.push(run.report);
        if let Some(reason) = reason {
            self.failure = Some(format!("{}: {reason}", mode.name()));
        }
        self.failure.is_none()
    }

    /// Ends the invocation before its last policy ran, saying why (unless one already failed).
    pub(crate) fn cut_short(&mut self, why: String) {
        self.failure.get_or_insert(why);
    }

    pub(crate) fn report(self) -> Report {
        Report {
            lab: "concurrency-isolation".into(),
            runner: self.runner,
            inputs: self.inputs,
            executor: self.executor,
            // A policy that failed or differed stops the run with its reason in `failure`.
            matches_model: self.failure.is_none(),
            policies: self.policies,
            failure: self.failure,
        }
    }
}

/// What the policy model predicts for `inputs`, policy by policy, without starting any server:
/// the same expectations as each run's `model` block.
pub fn predict(inputs: Inputs) -> Vec<outcome::Outcome> {
    predict_on(inputs, (Front::Async, Executor::default()))
}

/// [`predict`] for a run on `front` with `executor`.
pub fn predict_on(inputs: Inputs, shape: (Front, Executor)) -> Vec<outcome::Outcome> {
    let policies = inputs.mode.modes().iter().map(|&mode| inputs.policy(mode));
    policies
        .map(|policy| outcome::Outcome::predicted_on(policy, inputs.held, shape))
        .collect()
}

/// Runs `future` (a lab run, a sweep) on a fresh current-thread Tokio runtime, and drops the
/// runtime before returning, so nothing the run started outlives its result.
///
/// One thread is enough: the sequence is one step at a time by design, and on the async front
/// with the usual executor a held request is a parked task, not a blocked thread. It is also
/// the quicker start, and it keeps the resource evidence plain: there the whole lab is one OS
/// thread. (Another `--work` or `--workers` gives the front a runtime of its own, its threads
/// counted as the front's.)
pub fn block_on<F: Future>(future: F) -> std::io::Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let output = runtime.block_on(future);
    drop(runtime);
    Ok(output)
}
