//! The report: what a run actually showed, assembled only after the server and every caller are
//! closed, from the run's [`Evidence`] and the model's check of it. The fields are described in
//! `docs/contract.md`; [`crate::lab::render`] draws reports for people.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::admission::audit::PoolLedger;
use crate::admission::ledger::WorkEvent;
use crate::admission::section::FinalState;
use crate::evidence::{AdmissionRecord, Evidence, Observed, ServerSummary};
use crate::executor::Executor;
use crate::model::{self, Expected};
use crate::policy::{Front, Held, Inputs, Mode, Policy, Pool, Route};
use crate::resources::ResourceEvidence;

/// The whole report of one invocation.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// Always `"concurrency-isolation"`.
    pub lab: String,
    /// What produced the report.
    pub runner: Runner,
    /// The inputs as run.
    pub inputs: Inputs,
    /// How slow work waited and the async front's runtime (`--work`, `--workers`,
    /// `--blocking-threads`); absent for the lab's usual run, which awaits on the lab's own
    /// runtime.
    #[serde(default, skip_serializing_if = "Executor::is_default")]
    pub executor: Executor,
    /// One object per policy run, in run order.
    pub policies: Vec<PolicyReport>,
    /// Every policy's observations match the model and nothing failed.
    pub matches_model: bool,
    /// Why the run failed, in one line; absent when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl Report {
    /// The report as the lab writes it: JSON, pretty-printed. The binary's output and
    /// `record`'s comparison of a report it read with the same report written again.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }

    /// Whether the run failed short of its end (a stall, an error, Ctrl-C), rather than only
    /// differing from the model: its failure is not the one a policy that ran to its end and
    /// differed is given ([`differs`] of that policy's own mismatches).
    pub(crate) fn stopped_short(&self) -> bool {
        let Some(failure) = &self.failure else {
            return false;
        };
        let differed = self.policies.last().and_then(|last| {
            let why = differs(&last.model.mismatches)?;
            Some(format!("{}: {why}", last.mode.name()))
        });
        differed.as_ref() != Some(failure)
    }

    /// The flags that gave this run, as a command line takes them: the inputs, the front when it
    /// is not the usual one, and the executor: `--mode both --slots 4 --held 2 --server
    /// threaded --work block`.
    pub(crate) fn flags(&self) -> String {
        let front = match self.runner.front {
            Front::Async => String::new(),
            front => format!(" --server {}", front.name()),
        };
        format!("{}{front}{}", self.inputs.flags(), self.executor.flags())
    }

    /// The sentence for the policies the inputs asked for that did not run, as the lab stops
    /// at the first that fails or differs from the model; `None` when every one ran.
    pub(crate) fn not_run(&self) -> Option<String> {
        let ran = |mode: &Mode| self.policies.iter().any(|p| p.mode == *mode);
        let missing: Vec<&str> = self
            .inputs
            .mode
            .modes()
            .iter()
            .filter(|m| !ran(m))
            .map(|m| m.name())
            .collect();
        let verb = match self.stopped_short() {
            true => "failed",
            false => "differed from the model",
        };
        let stopped = "fails or differs from the model";
        let last = self.policies.last()?;
        (!missing.is_empty()).then(|| {
            format!(
                "{} did not run: the {} policy {verb}, and the lab stops at the first that \
                 {stopped}.",
                missing.join(" and "),
                last.mode.name()
            )
        })
    }
}

/// What produced a report.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runner {
    /// `isolation-lab`.
    pub name: String,
    /// The crate version.
    pub version: String,
    /// `Rust`.
    pub language: String,
    /// The async runtime and its scheduler.
    pub runtime: String,
    /// Which server front ran: `async` or `threaded`.
    pub front: Front,
    /// The HTTP server.
    pub server: String,
    /// The HTTP client.
    pub client: String,
    /// The safety timeout of every wait, in milliseconds: a stalled step fails after it.
    pub safety_timeout_ms: u64,
    /// The front's runtime shape in words, when it is not the lab's usual one: which runtime
    /// runs the connections and which the slow work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front_runtime: Option<String>,
}

/// A runner's `runtime`, on each scheduler: the current-thread one, the multi-thread one, or
/// none known (called outside a runtime).
const RUNTIMES: [&str; 3] = [
    "Tokio 1, current-thread scheduler",
    "Tokio 1, multi-thread scheduler",
    "Tokio 1, scheduler unknown",
];

impl Runner {
    /// The runtime every run of the binary runs on, on the command line or in a classroom
    /// (`lab::block_on`).
    pub(crate) const LAB_RUNTIME: &str = RUNTIMES[0];

    /// This runner, serving on `front` with `executor` and `safety_timeout`, on the Tokio
    /// runtime it is called from.
    pub(crate) fn on(front: Front, executor: Executor, safety_timeout: Duration) -> Self {
        let [current_thread, multi_thread, unknown] = RUNTIMES;
        let runtime = match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread) => current_thread,
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => multi_thread,
            _ => unknown,
        };
        Runner {
            name: env!("CARGO_PKG_NAME").into(),
            version: env!("CARGO_PKG_VERSION").into(),
            language: "Rust".into(),
            runtime: runtime.into(),
            front,
            server: front.describe().into(),
            // The coordinator's client (`coordinator/client.rs`).
            client: "Hyper 1 client connection; a caller reuses one left open; no proxy".into(),
            safety_timeout_ms: u64::try_from(safety_timeout.as_millis()).unwrap_or(u64::MAX),
            front_runtime: (!executor.is_default()).then(|| executor.describe(front)),
        }
    }
}

/// One policy run.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyReport {
    /// `shared` or `partitioned`.
    pub mode: Mode,
    /// Permits per pool.
    pub pool_capacities: BTreeMap<Pool, usize>,
    /// The pool each route draws from.
    pub route_pools: BTreeMap<Route, Pool>,
    /// Admission decisions, in order.
    pub admissions: Vec<AdmissionRecord>,
    /// What the coordinator observed along the sequence.
    #[serde(flatten)]
    pub observed: Observed,
    /// The server's work events, in order.
    pub work_events: Vec<WorkEvent>,
    /// The highest observed active work per pool, inside the work section only.
    pub peak_active_work: BTreeMap<Pool, usize>,
    /// Each pool's account: attempts, admitted, refused, finished, peak, refusals and the
    /// invariants checked over the whole run.
    pub ledger: BTreeMap<Pool, PoolLedger>,
    /// The section after the run: no active work, every permit back, gate open.
    pub final_state: FinalState,
    /// Every client task was joined, counted against those spawned (the name is the threaded
    /// runner's; these are Tokio tasks).
    pub client_threads_stopped: bool,
    /// Of those, the tasks aborted after a failure (0 on a clean run).
    pub client_tasks_aborted: u64,
    /// What holding the slow work cost the process, and what was left after the run.
    pub resources: ResourceEvidence,
    /// The server after it stopped; `None` if it never started.
    pub server: Option<ServerSummary>,
    /// The model's expectations and how the observations compare.
    pub model: ModelCheck,
}

/// The model block: what the policy model expects and whether the run showed it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCheck {
    /// What the model expects for each request.
    pub expected: Vec<Expected>,
    /// No difference was found.
    pub matches: bool,
    /// Each difference, in words.
    pub mismatches: Vec<String>,
}

impl PolicyReport {
    /// Assembles a policy's report from its evidence, for a run on `front` with `executor`
    /// (the model's expectations depend on them), and compares it with the model.
    pub(crate) fn assemble_on(
        policy: Policy,
        held: Held,
        shape: (Front, Executor),
        evidence: Evidence,
    ) -> Self {
        let expected = model::expect_on(policy, held, shape);
        let mismatches = model::check(policy, &expected, &evidence);
        PolicyReport {
            mode: policy.mode,
            pool_capacities: policy.capacities(),
            route_pools: [Route::Slow, Route::Fast]
                .into_iter()
                .map(|route| (route, policy.pool_for(route)))
                .collect(),
            admissions: evidence.admissions(),
            observed: evidence.observed,
            peak_active_work: evidence.ledger.iter().map(|(&p, l)| (p, l.peak)).collect(),
            ledger: evidence.ledger,
            work_events: evidence.work_events,
            final_state: evidence.final_state,
            client_threads_stopped: evidence.client_threads_stopped,
            client_tasks_aborted: evidence.client_tasks_aborted,
            resources: evidence.resources,
            server: evidence.server,
            model: ModelCheck {
                expected,
                matches: mismatches.is_empty(),
                mismatches,
            },
        }
    }
}

/// Why a run that ran to the end does not match, from the model's `mismatches`: the first, and
/// how many more. `None` when there are none.
pub(crate) fn differs(mismatches: &[String]) -> Option<String> {
    let first = mismatches.first()?;
    let more = match mismatches.len() {
        1 => String::new(),
        n => format!(" (and {} more in model.mismatches)", n - 1),
    };
    Some(format!(
        "observations differ from the policy model: {first}{more}"
    ))
}
