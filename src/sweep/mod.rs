//! `sweep`: every allowed input — 2 policies × slots 2–4 × held 1–4, each on its own fresh
//! server — as one matrix per policy: the useful work, the refused work, whether F1 got in, and
//! what the reservation cost. Its table is drawn in [`render`].

pub mod render;

use serde::Serialize;

use crate::coordinator::{self, Options};
use crate::executor::Executor;
use crate::outcome::Outcome;
use crate::policy::Front;
use crate::policy::{Held, Mode, Policy, Slots};

/// Every run of a sweep, and whether all of them matched the model.
#[derive(Clone, Debug, Serialize)]
pub struct Sweep {
    /// The server front every run used.
    pub front: Front,
    /// How slow work waited on it (`--work`), when not the lab's usual way.
    #[serde(skip_serializing_if = "Executor::is_default")]
    pub executor: Executor,
    /// One entry per policy run, policy by policy, then by slots, then by held.
    pub runs: Vec<SweepRun>,
    /// Every run matched the model and none failed.
    pub matches_model: bool,
}

/// One policy run of a sweep.
#[derive(Clone, Debug, Serialize)]
pub struct SweepRun {
    /// The policy.
    pub mode: Mode,
    /// Total permits.
    pub slots: Slots,
    /// Slow requests held.
    pub held: Held,
    /// What it showed.
    pub outcome: Outcome,
    /// It matched the model and did not fail.
    pub matches_model: bool,
    /// Why it failed or differed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// It failed (a stall, an error) rather than only differing from the model: the sweep
    /// stopped there.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

impl Sweep {
    /// The sweep's one-line failure, if it has one: the run that failed, or that some run
    /// differed from the model.
    pub fn failure(&self) -> Option<String> {
        let failed = self.runs.iter().find(|run| run.failed);
        match failed {
            Some(run) => Some(format!(
                "the {} run with --slots {} --held {} failed, and the sweep stopped there: {}",
                run.mode.name(),
                run.slots,
                run.held,
                run.failure.as_deref().unwrap_or_default()
            )),
            None => (!self.matches_model).then(|| "a run differed from the policy model".into()),
        }
    }
}

/// Runs every allowed input on `front`, one after another, each on its own server. Stops at
/// the first run that fails (a stall, an error), as a lab run does, so a broken sweep ends
/// within a run's 15 s rather than 24 of them.
pub async fn sweep(front: Front) -> Sweep {
    sweep_on(front, Executor::default()).await
}

/// [`sweep`] with slow work waiting as `executor` says.
pub async fn sweep_on(front: Front, executor: Executor) -> Sweep {
    let mut runs = Vec::new();
    let inputs = Mode::ALL.into_iter().flat_map(|mode| {
        Slots::all().flat_map(move |slots| Held::all().map(move |held| (mode, slots, held)))
    });
    for (mode, slots, held) in inputs {
        let policy = Policy { mode, slots };
        let options = Options::on(front).with_executor(executor);
        let run = coordinator::run_policy_with(policy, held, options).await;
        let failed = run.failure.is_some();
        let failure = run.reason();
        runs.push(SweepRun {
            mode,
            slots,
            held,
            outcome: Outcome::observed(&run.report),
            matches_model: failure.is_none(),
            failure,
            failed,
        });
        if failed {
            break;
        }
    }
    let matches_model = runs.iter().all(|r| r.matches_model);
    Sweep {
        front,
        executor,
        runs,
        matches_model,
    }
}
