//! The workshop's prediction table for one policy run — what was held, what was refused, what
//! F1 got, what happened after release, and which permits sat idle — either predicted from the
//! model or read off a run's report. `predict`, the text report and `sweep` all print this.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::evidence::{Decision, Phase};
use crate::executor::Executor;
use crate::label::Label;
use crate::model::{self, Expected, Wait};
use crate::policy::{Front, Held, Mode, Policy, Pool, Route};
use crate::report::PolicyReport;

/// One row of the prediction table. A field is `None` where a failed run never got that far.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// The policy.
    pub mode: Mode,
    /// Permits per pool.
    pub pool_capacities: BTreeMap<Pool, usize>,
    /// Admitted slow requests held at the gate before F1.
    pub held_before_f1: Option<Vec<Label>>,
    /// Slow requests refused (503) before F1.
    pub refused_slow: Option<Vec<Label>>,
    /// F1's answer while the slow work is held.
    pub f1_before_release: Option<FastOutcome>,
    /// Each held slow request's answer once the gate opened, in label order.
    pub after_release: Option<Vec<Answer>>,
    /// The answers to the new probes `S-after` and `F-after`.
    pub probes: Option<Vec<Answer>>,
    /// Free permits per pool while the slow work is held, before F1.
    pub idle_before_f1: Option<BTreeMap<Pool, usize>>,
    /// Of those, the permits the refused slow requests could not use: the price of the
    /// reservation (0 when no slow request was refused).
    pub idle_while_refused: Option<usize>,
    /// What the front's executor made wait, when it is not the lab's usual one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor: Option<ExecutorOutcome>,
}

/// The requests the executor, not a permit, made wait until the gate opened.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExecutorOutcome {
    /// Sent while every worker was blocked: unread until release, then admitted.
    pub unread: Vec<Label>,
    /// Admitted with their permit, their work waiting for a thread until release.
    pub queued: Vec<Label>,
}

/// A request's HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Answer {
    /// The request.
    pub request: Label,
    /// Its status.
    pub status: u16,
}

/// F1's answer before release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FastOutcome {
    /// 200 admitted, 503 refused.
    pub status: u16,
    /// The pool it drew from, or that refused it.
    pub pool: Pool,
    /// When refused, the requests holding that pool's permits.
    pub held_by: Vec<Label>,
    /// F1 was never read before release: `status` is its answer after release.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unread_until_release: bool,
}

impl Outcome {
    /// What the model predicts for `policy` with `held` slow requests: the same expectations
    /// as a run's `model` block, without starting any server.
    pub fn predicted(policy: Policy, held: Held) -> Self {
        Self::predicted_on(policy, held, (Front::Async, Executor::default()))
    }

    /// [`Outcome::predicted`] for a run on `front` with `executor`.
    pub fn predicted_on(policy: Policy, held: Held, shape: (Front, Executor)) -> Self {
        let expected = model::expect_on(policy, held, shape);
        let all_admitted = model::held_slow(&expected, Decision::Admitted);
        let unread = model::waiting(&expected, Wait::Unread);
        let queued = model::waiting(&expected, Wait::Queued);
        // Held at the gate: admitted and running. Queued work holds its permit too.
        let admitted: Vec<Label> = all_admitted
            .iter()
            .copied()
            .filter(|r| !unread.contains(r) && !queued.contains(r))
            .collect();
        let refused = model::held_slow(&expected, Decision::Refused);
        let find = |request: Label| expected.iter().find(|e| e.request == request);
        let f1 = find(Label::F1).expect("the model expects F1");
        let slow_pool = policy.pool_for(Route::Slow);
        let idle = policy.per_pool(|pool| {
            let taken = match pool == slow_pool {
                true => admitted.len() + queued.len(),
                false => 0,
            };
            policy.capacity(pool) - taken
        });
        let statuses = |requests: &[Label]| {
            let status = |&request: &Label| {
                let status = find(request).map(|e: &Expected| e.status)?;
                Some(Answer { request, status })
            };
            requests.iter().filter_map(status).collect::<Vec<_>>()
        };
        Outcome {
            mode: policy.mode,
            pool_capacities: policy.capacities(),
            f1_before_release: Some(FastOutcome {
                status: f1.status,
                pool: f1.pool,
                held_by: match f1.decision {
                    Decision::Refused => admitted.iter().chain(&queued).copied().collect(),
                    Decision::Admitted => Vec::new(),
                },
                unread_until_release: unread.contains(&Label::F1),
            }),
            after_release: Some(statuses(&all_admitted)),
            probes: Some(statuses(&[Label::SlowAfter, Label::FastAfter])),
            idle_while_refused: Some(idle_while_refused(&idle, slow_pool, &refused)),
            idle_before_f1: Some(idle),
            held_before_f1: Some(admitted),
            refused_slow: Some(refused),
            // Watched only where the front runs on runtimes of its own.
            executor: shape
                .1
                .front_runtime(shape.0)
                .then_some(ExecutorOutcome { unread, queued }),
        }
    }

    /// What a run actually showed, read off its report.
    pub fn observed(report: &PolicyReport) -> Self {
        let observed = &report.observed;
        let responses = &observed.responses;
        let before = observed.observer_before_fast.as_ref();
        let slow_pool = report.route_pools[&Route::Slow];
        let idle: Option<BTreeMap<Pool, usize>> = before.map(|snapshot| {
            let free = |(&pool, &capacity): (&Pool, &usize)| {
                let active = snapshot.active_work.get(&pool).copied().unwrap_or(0);
                (pool, capacity.saturating_sub(active))
            };
            report.pool_capacities.iter().map(free).collect()
        });
        let refused = before.map(|_| {
            let refused = responses.iter().filter(|r| {
                matches!(r.request, Label::Slow(_))
                    && r.status == 503
                    && r.phase == Phase::BeforeRelease
            });
            refused.map(|r| r.request).collect::<Vec<_>>()
        });
        let unread = observed.executor.as_ref().map_or(Vec::new(), |watched| {
            watched.unread.iter().map(|u| u.request).collect::<Vec<_>>()
        });
        let f1_unread = unread.contains(&Label::F1);
        // F1 left unread is answered only after release: that answer is its outcome.
        let f1_answer = match f1_unread {
            false => observed
                .fast_response_before_release
                .as_ref()
                .map(|f1| f1.status),
            true => (responses.iter())
                .find(|r| r.request == Label::F1 && r.phase == Phase::AfterRelease)
                .map(|r| r.status),
        };
        let f1 = f1_answer.and_then(|status| {
            let decided = report.admissions.iter().find(|a| a.request == Label::F1)?;
            Some(FastOutcome {
                status,
                pool: decided.pool,
                held_by: decided.held_by.clone().unwrap_or_default(),
                unread_until_release: f1_unread,
            })
        });
        let answered = |wanted: fn(&Label) -> bool| {
            let mut found: Vec<Answer> = responses
                .iter()
                .filter(|r| r.phase == Phase::AfterRelease && wanted(&r.request))
                .map(|r| Answer {
                    request: r.request,
                    status: r.status,
                })
                .collect();
            found.sort();
            found
        };
        let after_release = observed
            .slow_callers_pending_before_release
            .as_ref()
            .map(|_| answered(|l| matches!(l, Label::Slow(_))));
        let probes = answered(|l| matches!(l, Label::SlowAfter | Label::FastAfter));
        Outcome {
            mode: report.mode,
            pool_capacities: report.pool_capacities.clone(),
            held_before_f1: before.map(|s| s.held_at_gate.clone()),
            idle_while_refused: idle
                .as_ref()
                .zip(refused.as_ref())
                .map(|(idle, refused)| idle_while_refused(idle, slow_pool, refused)),
            refused_slow: refused,
            f1_before_release: f1,
            after_release,
            probes: (probes.len() == 2).then_some(probes),
            idle_before_f1: idle,
            executor: observed.executor.as_ref().map(|watched| ExecutorOutcome {
                unread,
                queued: watched.queued.clone(),
            }),
        }
    }
}

/// Free permits outside the slow pool while some slow request was refused: reserved for
/// another class, so the refused work could not use them.
fn idle_while_refused(idle: &BTreeMap<Pool, usize>, slow_pool: Pool, refused: &[Label]) -> usize {
    if refused.is_empty() {
        return 0;
    }
    let reserved = idle.iter().filter(|&(&pool, _)| pool != slow_pool);
    reserved.map(|(_, &free)| free).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Slots;

    fn predict(mode: Mode, slots: u8, held: u8) -> Outcome {
        let slots = Slots::new(slots).expect("allowed");
        Outcome::predicted(Policy { mode, slots }, Held::new(held).expect("allowed"))
    }

    use Label::Slow as S;

    /// The workshop's default table, predicted.
    #[test]
    fn the_default_prediction_is_the_workshops_table() {
        let shared = predict(Mode::Shared, 2, 2);
        assert_eq!(shared.held_before_f1, Some(vec![S(1), S(2)]));
        assert_eq!(shared.refused_slow, Some(vec![]));
        let f1 = shared.f1_before_release.expect("F1");
        assert_eq!(
            (f1.status, f1.pool, f1.held_by),
            (503, Pool::Shared, vec![S(1), S(2)])
        );
        let ok = |request| Answer {
            request,
            status: 200,
        };
        assert_eq!(shared.after_release, Some(vec![ok(S(1)), ok(S(2))]));
        assert_eq!(shared.idle_while_refused, Some(0));

        let partitioned = predict(Mode::Partitioned, 2, 2);
        assert_eq!(partitioned.held_before_f1, Some(vec![S(1)]));
        assert_eq!(partitioned.refused_slow, Some(vec![S(2)]));
        let f1 = partitioned.f1_before_release.expect("F1");
        assert_eq!((f1.status, f1.pool), (200, Pool::Fast));
        let idle = partitioned.idle_before_f1.expect("idle");
        assert_eq!(idle, BTreeMap::from([(Pool::Slow, 0), (Pool::Fast, 1)]));
        assert_eq!(
            partitioned.idle_while_refused,
            Some(1),
            "the fast permit sits idle"
        );
        let probes = Some(vec![ok(Label::SlowAfter), ok(Label::FastAfter)]);
        assert_eq!(partitioned.probes, probes);
    }

    /// Shared mode never reserves: whatever is idle, nothing was refused while it was.
    #[test]
    fn shared_mode_never_leaves_a_permit_idle_while_refusing() {
        for slots in 2..=4 {
            for held in 1..=4 {
                let outcome = predict(Mode::Shared, slots, held);
                assert_eq!(
                    outcome.idle_while_refused,
                    Some(0),
                    "{slots} slots, {held} held"
                );
            }
        }
    }
}
