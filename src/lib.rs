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
//! - [`cli`]: the command line, checked into [`policy::Inputs`].
//! - [`policy`]: modes, pools, routes and their capacities.
//! - [`label`]: request labels (`S1`, `F1`, ...) and how requests carry them.
//! - [`admission`]: pools, gate, ledger, observer, audit and run token, independent of any
//!   server front.
//! - [`server`]: the server fronts: Hyper on Tokio, and a thread per connection.
//! - [`resources`]: what a held request costs: threads, handlers.
//! - [`coordinator`]: the sequence of one policy run.
//! - [`faults`]: what tests may break, to show each unhappy path fails cleanly.
//! - [`model`]: what every run must show, and the comparison.
//! - [`outcome`]: the workshop's prediction table, predicted or observed.
//! - [`report`]: the JSON report and its text rendering.
//! - [`sweep`]: every allowed input, as a matrix per policy.
//! - [`compare`]: both policies on both server fronts, side by side.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod admission;
#[cfg(unix)]
pub(crate) mod child;
pub mod cli;
pub mod compare;
pub mod coordinator;
pub mod faults;
pub mod label;
#[cfg(unix)]
pub(crate) mod limits;
pub mod model;
pub mod outcome;
pub mod policy;
pub(crate) mod procfs;
pub mod report;
pub mod resources;
pub mod server;
pub mod sweep;

use faults::Faults;
use policy::{Inputs, Policy};
use report::{Report, Runner};
use server::Front;

/// Runs the policies `inputs` selects, each on its own fresh async server, and reports what
/// happened. Stops at the first policy that fails or differs from the model; the report then
/// carries `failure` and `matches_model: false`.
pub async fn run(inputs: Inputs) -> Report {
    run_on(Front::Async, inputs).await
}

/// [`run`] on either server front.
pub async fn run_on(front: Front, inputs: Inputs) -> Report {
    let mut policies = Vec::new();
    let mut failure = None;
    for &mode in inputs.mode.modes() {
        let policy = Policy {
            mode,
            slots: inputs.slots,
        };
        let run = coordinator::run_policy_with(front, policy, inputs.held, Faults::default()).await;
        let reason = run.reason();
        policies.push(run.report);
        if let Some(reason) = reason {
            failure = Some(format!("{}: {reason}", mode.name()));
            break;
        }
    }
    Report {
        lab: "concurrency-isolation",
        runner: Runner::current(front),
        inputs,
        // A policy that failed or differed stops the run with its reason in `failure`.
        matches_model: failure.is_none(),
        policies,
        failure,
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
