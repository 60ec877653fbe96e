//! The report (contract section 5): what a run actually showed, assembled only after the server
//! and every caller are closed. [`text`] renders it for a person.

pub mod svg;
pub mod text;
pub mod timeline;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::admission::audit::{self, PoolLedger};
use crate::admission::ledger::{Event, Snapshot, WorkEvent};
use crate::admission::section::{FinalState, GateState};
use crate::label::Label;
use crate::model::{self, Decision, Expected, Phase};
use crate::policy::{Held, Inputs, Mode, Policy, Pool, Route};
use crate::resources::ResourceEvidence;
use crate::server::{Front, ServerSummary};

/// The whole report of one invocation.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Always `"concurrency-isolation"`.
    pub lab: &'static str,
    /// What produced the report.
    pub runner: Runner,
    /// The inputs as run.
    pub inputs: Inputs,
    /// One object per policy run, in run order.
    pub policies: Vec<PolicyReport>,
    /// Every policy's observations match the model and nothing failed.
    pub matches_model: bool,
    /// Why the run failed, in one line; absent when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// What produced a report.
#[derive(Clone, Debug, Serialize)]
pub struct Runner {
    /// `isolation-lab`.
    pub name: &'static str,
    /// The crate version.
    pub version: &'static str,
    /// `Rust`.
    pub language: &'static str,
    /// The async runtime and its scheduler.
    pub runtime: String,
    /// Which server front ran: `async` or `threaded`.
    pub front: Front,
    /// The HTTP server.
    pub server: &'static str,
    /// The HTTP client.
    pub client: &'static str,
}

impl Runner {
    /// This runner, serving on `front`, on the Tokio runtime it is called from.
    pub fn current(front: Front) -> Self {
        let scheduler = match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread) => "current-thread scheduler",
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => "multi-thread scheduler",
            _ => "scheduler unknown",
        };
        Runner {
            name: env!("CARGO_PKG_NAME"),
            version: env!("CARGO_PKG_VERSION"),
            language: "Rust",
            runtime: format!("Tokio 1, {scheduler}"),
            front,
            server: front.describe(),
            client: "reqwest 0.13, inherited proxy settings ignored",
        }
    }
}

/// One policy run.
#[derive(Clone, Debug, Serialize)]
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

/// What the coordinator observed along the sequence. A field is `None` when a failed run
/// never reached the step that records it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Observed {
    /// The observer's snapshot after the held slow requests were decided, before F1 is sent.
    pub observer_before_fast: Option<Snapshot>,
    /// Admitted slow callers with no response yet, checked just before release.
    pub slow_callers_pending_before_release: Option<Vec<Label>>,
    /// F1's actual response.
    pub fast_response_before_release: Option<FastResponse>,
    /// The observer's snapshot after F1's response, before release.
    pub observer_after_fast_before_release: Option<Snapshot>,
    /// Every response as its caller received it, in order.
    pub responses: Vec<ResponseRecord>,
}

/// One admission decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AdmissionRecord {
    /// The request.
    pub request: Label,
    /// Its route.
    pub route: Route,
    /// The pool it drew from.
    pub pool: Pool,
    /// Admitted or refused.
    pub decision: Decision,
    /// The pool's taken permits right after the decision.
    pub active_after: usize,
    /// For a refusal: the requests holding the pool's permits at that moment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<Vec<Label>>,
}

/// A response as its caller received it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResponseRecord {
    /// The request.
    pub request: Label,
    /// Its route.
    pub route: Route,
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: serde_json::Value,
    /// Received before or after the gate opened.
    pub phase: Phase,
    /// The `seq` of the last work event recorded when the response had arrived: where it
    /// falls on the ledger's axis. Order evidence, not time.
    pub after_event: u64,
}

/// F1's response, as `fast_response_before_release` reports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FastResponse {
    /// `F1`.
    pub request: Label,
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: serde_json::Value,
}

/// The model block: what section 4 expects and whether the run showed it.
#[derive(Clone, Debug, Serialize)]
pub struct ModelCheck {
    /// What the model expects for each request.
    pub expected: Vec<Expected>,
    /// No difference was found.
    pub matches: bool,
    /// Each difference, in words.
    pub mismatches: Vec<String>,
}

/// Everything a policy run produced, before it is compared with the model.
#[derive(Debug)]
pub struct Evidence {
    /// The ledger, in order.
    pub work_events: Vec<WorkEvent>,
    /// Each pool's audited account.
    pub ledger: BTreeMap<Pool, PoolLedger>,
    /// What the coordinator observed.
    pub observed: Observed,
    /// The section after the run.
    pub final_state: FinalState,
    /// Every client task was joined.
    pub client_threads_stopped: bool,
    /// Client tasks aborted after a failure.
    pub client_tasks_aborted: u64,
    /// Resource evidence.
    pub resources: ResourceEvidence,
    /// The stopped server, if it started.
    pub server: Option<ServerSummary>,
}

impl Evidence {
    /// The evidence of a run that never started: no events, full pools, a closed gate.
    pub fn nothing_ran(policy: Policy) -> Self {
        let capacities = policy.capacities();
        Evidence {
            work_events: Vec::new(),
            ledger: audit::audit(&[], &BTreeMap::new(), &capacities),
            observed: Observed::default(),
            final_state: FinalState {
                active_work: policy.per_pool(|_| 0),
                available_permits: capacities,
                gate: GateState::Closed,
            },
            client_threads_stopped: true,
            client_tasks_aborted: 0,
            resources: ResourceEvidence::default(),
            server: None,
        }
    }
}

impl PolicyReport {
    /// Assembles a policy's report from its evidence and compares it with the model.
    pub fn assemble(policy: Policy, held: Held, evidence: Evidence) -> Self {
        let mut report = PolicyReport {
            mode: policy.mode,
            pool_capacities: policy.capacities(),
            route_pools: [Route::Slow, Route::Fast]
                .into_iter()
                .map(|route| (route, policy.pool_for(route)))
                .collect(),
            admissions: admissions(&evidence.work_events),
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
                expected: model::expect(policy, held),
                matches: false,
                mismatches: Vec::new(),
            },
        };
        report.model.mismatches = model::check(&report.model.expected, &report);
        report.model.matches = report.model.mismatches.is_empty();
        report
    }
}

/// The admission decisions among the work events, in order.
fn admissions(events: &[WorkEvent]) -> Vec<AdmissionRecord> {
    let decisions = events.iter().filter_map(|e| {
        let decision = match e.event {
            Event::Admitted => Decision::Admitted,
            Event::Refused => Decision::Refused,
            _ => return None,
        };
        let request = e.request?;
        Some(AdmissionRecord {
            request,
            route: request.route(),
            pool: e.pool,
            decision,
            active_after: e.active_after,
            held_by: (decision == Decision::Refused).then(|| e.held_by.clone()),
        })
    });
    decisions.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, request: Label, pool: Pool, event: Event, active: usize) -> WorkEvent {
        WorkEvent {
            seq,
            request: Some(request),
            pool,
            event,
            active_after: active,
            cancelled: false,
            held_by: if event == Event::Refused {
                vec![Label::Slow(1)]
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn admissions_are_read_off_the_ledger() {
        let events = [
            event(1, Label::Slow(1), Pool::Slow, Event::Admitted, 1),
            event(2, Label::Slow(1), Pool::Slow, Event::Held, 1),
            event(3, Label::Slow(2), Pool::Slow, Event::Refused, 1),
            event(4, Label::F1, Pool::Fast, Event::Admitted, 1),
            event(5, Label::F1, Pool::Fast, Event::Finished, 0),
        ];
        let decided: Vec<_> = admissions(&events)
            .into_iter()
            .map(|a| (a.request, a.decision, a.held_by))
            .collect();
        assert_eq!(
            decided,
            [
                (Label::Slow(1), Decision::Admitted, None),
                (
                    Label::Slow(2),
                    Decision::Refused,
                    Some(vec![Label::Slow(1)])
                ),
                (Label::F1, Decision::Admitted, None),
            ]
        );
    }
}
