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
//! Data flows one way (`docs/design.md` draws it):
//! command line → instruments → coordinator → fronts → admission; events → report → render.
//!
//! - [`policy`], [`label`]: the ground floor — modes, pools, routes, fronts, request labels.
//! - [`admission`]: pools, gate, ledger and run token; it knows no front and no test.
//! - [`server`]: the fronts that turn HTTP into calls on the work section.
//! - [`coordinator`]: one policy run — its session, its sequence, its HTTP client.
//! - [`faults`]: what tests may break, given to the coordinator and the fronts from outside.
//! - [`resources`], [`evidence`]: what a run observed and cost.
//! - [`model`]: what every run must show, checked against the evidence.
//! - [`report`]: the evidence and the model's check, as one serializable report.
//! - [`outcome`], [`sweep`], [`compare`], [`record`]: the teaching instruments' data.
//! - [`front_process`]: a front in a child process of the lab, and the protocol it speaks.
//! - [`replicas`]: replica servers in child processes, with their own permits or one global
//!   limit on Redis (`redis_pool`), paused and killed while they hold permits.
//! - [`classroom`]: a live page that steps through a real run and lets the room join in.
//! - [`hold`]: what holding N requests costs on each front, each in a child process.
//! - [`render`]: every text, table, timeline and SVG drawn from reports.
//! - [`cli`]: the command line, mapped onto the library's types.
//! - [`allocator`]: the binary's allocator: out of memory is one line; a heap census by block
//!   size; unwritten buffers placed on whole pages.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod admission;
pub mod allocator;
#[cfg(unix)]
pub(crate) mod child;
pub mod classroom;
pub mod cli;
pub mod compare;
pub mod coordinator;
pub mod evidence;
pub mod faults;
#[cfg(unix)]
pub mod front_process;
#[cfg(unix)]
pub mod hold;
pub mod label;
#[cfg(unix)]
pub(crate) mod limits;
pub mod model;
pub mod outcome;
pub mod policy;
pub(crate) mod procfs;
pub mod record;
#[cfg(unix)]
pub(crate) mod redis_pool;
pub mod render;
#[cfg(unix)]
pub mod replicas;
pub mod report;
pub mod resources;
pub mod server;
pub mod sweep;

use coordinator::Options;
use policy::{Front, Inputs, Policy};
use report::{Report, Runner};

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
        let policy = Policy {
            mode,
            slots: inputs.slots,
        };
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
    runner: Runner,
    policies: Vec<report::PolicyReport>,
    failure: Option<String>,
}

impl Invocation {
    /// An invocation of `inputs` with `options`, before any policy ran.
    pub(crate) fn new(inputs: Inputs, options: &Options) -> Self {
        Invocation {
            inputs,
            runner: Runner::current(options.front, options.safety_timeout),
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

    /// The report.
    pub(crate) fn report(self) -> Report {
        Report {
            lab: "concurrency-isolation".into(),
            runner: self.runner,
            inputs: self.inputs,
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
    let policies = inputs.mode.modes().iter().map(|&mode| Policy {
        mode,
        slots: inputs.slots,
    });
    policies
        .map(|policy| outcome::Outcome::predicted(policy, inputs.held))
        .collect()
}

/// Runs `future` (a lab run, a sweep) on a fresh current-thread Tokio runtime, and drops the
/// runtime before returning, so nothing the run started outlives its result.
///
/// One thread is enough: the sequence is one step at a time by design, and a held request is a
/// parked task, not a blocked thread. It is also the quicker start, and it keeps the resource
/// evidence plain: on the async front the whole lab is one OS thread.
pub fn block_on<F: Future>(future: F) -> std::io::Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let output = runtime.block_on(future);
    drop(runtime);
    Ok(output)
}
