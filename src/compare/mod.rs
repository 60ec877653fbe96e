//! `compare`: both policies on both server fronts with the same inputs, side by side. The
//! admission outcomes must be identical — they come from the same model, coordinator and
//! section — unless the model predicts otherwise for the fronts' executors (work one front
//! leaves unread or queued), while the resource evidence differs: a held request parks a task
//! on the async front and blocks an OS thread on the threaded one. Its table is drawn in
//! [`render`].

pub mod render;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::admission::ledger::Event;
use crate::evidence::{Decision, Phase};
use crate::executor::{Executor, WorkStyle};
use crate::label::Label;
use crate::policy::Front;
use crate::policy::{Held, Inputs, Mode, ModeChoice, Slots};
use crate::report::PolicyReport;
use crate::resources::ResourceEvidence;

/// Both fronts' runs of the same inputs, compared.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// Total permits of each policy.
    pub slots: Slots,
    /// Slow requests held.
    pub held: Held,
    /// How slow work waited on each front, when not the lab's usual way.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub executors: BTreeMap<Front, Executor>,
    /// The model predicts different outcomes on the two fronts: their executors, not their
    /// permits, differ (work left unread with `--work block`, or queued with `spawn-blocking`
    /// and `own-runtime`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub expected_to_differ: bool,
    /// One comparison per policy, shared first.
    pub policies: Vec<PolicyComparison>,
    /// Every request's outcome was the same on both fronts.
    pub identical: bool,
    /// Every run matched the policy model.
    pub matches_model: bool,
    /// Why a run failed, per front, if one did.
    pub failures: BTreeMap<Front, String>,
}

/// One policy on both fronts.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyComparison {
    /// The policy.
    pub mode: Mode,
    /// Each request's outcome, per front, in the order the requests were sent.
    pub outcomes: BTreeMap<Front, Vec<RequestOutcome>>,
    /// What holding the slow work cost, per front.
    pub resources: BTreeMap<Front, ResourceEvidence>,
    /// The outcomes were the same on both fronts.
    pub identical: bool,
}

/// What happened to one request, as far as admission goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RequestOutcome {
    /// The request.
    pub request: Label,
    /// Admitted or refused, if decided.
    pub decision: Option<Decision>,
    /// Whether its work waited at the closed gate.
    pub held: bool,
    /// The status its caller received, if any.
    pub status: Option<u16>,
    /// Whether that was before or after release.
    pub phase: Option<Phase>,
    /// It sat unread until release: every worker that could read it was blocked.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unread: bool,
    /// It was admitted, its permit held, and its work waited for a thread until release.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
}

/// Runs both policies with `slots` and `held` on each front, each run on its own server.
pub async fn compare(slots: Slots, held: Held) -> Comparison {
    compare_on(slots, held, Executor::default()).await
}

/// The executor each front runs `executor`'s work on: the threaded front has no runtime, so
/// it runs its own way (a thread per connection, which a held request blocks) unless asked to
/// block, which it always does.
pub(crate) fn executor_of(front: Front, executor: Executor) -> Executor {
    match front {
        Front::Async => executor,
        Front::Threaded if executor.work == WorkStyle::Block => Executor {
            work: WorkStyle::Block,
            ..Executor::default()
        },
        Front::Threaded => Executor::default(),
    }
}

/// [`compare`] with slow work waiting as `executor` says, on each front as it can.
pub async fn compare_on(slots: Slots, held: Held, executor: Executor) -> Comparison {
    let inputs = Inputs {
        mode: ModeChoice::Both,
        slots,
        held,
    };
    let shapes = Front::ALL.map(|front| (front, executor_of(front, executor)));
    let mut reports = BTreeMap::new();
    for (front, executor) in shapes {
        let options = crate::coordinator::Options::on(front).with_executor(executor);
        reports.insert(front, crate::lab::run_with(inputs, options).await);
    }
    let predicted = shapes.map(|shape| crate::lab::predict_on(inputs, shape));
    // What the rows compare: who was held, refused or left unread, and every answer.
    let strip = |outcomes: &[crate::outcome::Outcome]| {
        let rows = outcomes.iter().map(|o| {
            let unread = o.executor.as_ref().map(|e| e.unread.clone());
            (
                (o.held_before_f1.clone(), o.refused_slow.clone()),
                (o.f1_before_release.clone(), o.after_release.clone()),
                (o.probes.clone(), unread.unwrap_or_default()),
            )
        });
        rows.collect::<Vec<_>>()
    };
    let expected_to_differ = strip(&predicted[0]) != strip(&predicted[1]);
    let executors = shapes.into_iter();
    let executors = executors
        .filter(|(_, executor)| !executor.is_default())
        .collect();
    let failures = reports
        .iter()
        .filter_map(|(&front, report)| Some((front, report.failure.clone()?)))
        .collect();
    let policies: Vec<PolicyComparison> = Mode::ALL
        .into_iter()
        .map(|mode| {
            let runs = reports.iter().filter_map(|(&front, report)| {
                let policy = report.policies.iter().find(|p| p.mode == mode)?;
                Some((front, policy))
            });
            let runs: Vec<(Front, &PolicyReport)> = runs.collect();
            let outcomes: BTreeMap<_, _> = runs.iter().map(|&(f, p)| (f, outcomes(p))).collect();
            let mut distinct = outcomes.values();
            let first = distinct.next();
            PolicyComparison {
                mode,
                identical: outcomes.len() == Front::ALL.len() && distinct.all(|o| Some(o) == first),
                resources: runs.iter().map(|&(f, p)| (f, p.resources)).collect(),
                outcomes,
            }
        })
        .collect();
    Comparison {
        slots,
        held,
        executors,
        expected_to_differ,
        identical: policies.iter().all(|p| p.identical),
        matches_model: reports.values().all(|r| r.matches_model),
        failures,
        policies,
    }
}

/// Each request's admission outcome, read off a policy's report, in sending order.
fn outcomes(report: &PolicyReport) -> Vec<RequestOutcome> {
    let requests = report.model.expected.iter().map(|e| e.request);
    requests
        .map(|request| {
            let decided = report.admissions.iter().find(|a| a.request == request);
            let answered = report
                .observed
                .responses
                .iter()
                .find(|r| r.request == request);
            let mut events = report.work_events.iter();
            let watched = report.observed.executor.as_ref();
            let unread = watched.is_some_and(|w| w.unread.iter().any(|u| u.request == request));
            let queued = watched.is_some_and(|w| w.queued.contains(&request));
            RequestOutcome {
                unread,
                queued,
                request,
                decision: decided.map(|a| a.decision),
                held: events.any(|e| e.request == Some(request) && e.event == Event::Held),
                status: answered.map(|r| r.status),
                phase: answered.map(|r| r.phase),
            }
        })
        .collect()
}

impl Comparison {
    /// The one-line reason `compare` fails, if it does.
    pub fn failure(&self) -> Option<String> {
        if let Some((front, failure)) = self.failures.iter().next() {
            return Some(format!(
                "the {} front's run failed: {failure}",
                front.name()
            ));
        }
        if !self.identical && !self.expected_to_differ {
            return Some("the two fronts' admission outcomes differ".into());
        }
        (!self.matches_model).then(|| "a run differed from the policy model".into())
    }
}

#[cfg(test)]
mod tests;
