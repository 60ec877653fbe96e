//! `hold`: what a held request costs on each front, from ten to the threaded front's ceiling.
//! For each front and each count N, a fresh front runs in a child process of the lab
//! (`src/front_process/`), so the figures read from its `/proc/<pid>` are its own and a front that
//! dies cannot take the lab with it. The child listens with an accept queue sized for N. The
//! parent sends N callers with the run token and labels (raw request heads, so the instrument
//! costs less than what it measures), waits until the child reports all N held, samples the
//! child (its `/proc` figures and its heap by block size), its own and the child's CPU and
//! three machine-wide counters, opens the gate, checks every answer is 200, then stops, checks
//! and reaps the child, which reports the connections its listener dropped. Each figure is also
//! given per held request: the front's own against the same front's child at rest (N = 0), the
//! machine-wide kernel counters against their reading just before the hold.
//!
//! Before anything starts, the preflight reads the ceilings that would stop a front and does
//! not run a count beyond one; a front that fails anyway is recorded at that N, with how its
//! process ended, and is not run at larger counts.
//!
//! The rooms, as every instrument has them:
//!
//! - `run`: how it runs: the preflight, then each front's baseline and counts, in order.
//! - `evidence`: one measurement, from starting the child to reaping it, and
//!   `callers`, the parent's raw HTTP callers.
//! - `model`: the preflight: the ceilings, what each front can reach under them, and the counts
//!   each front runs.
//! - `report`: what was measured.
//! - `render`: the report drawn for a person (text, SVG).

mod callers;
mod evidence;
mod model;
pub mod render;
mod report;
mod run;

use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;

pub use report::{
    CountOutcome, Death, DropScope, Figures, FrontFailure, FrontReach, FrontSeries, HeapClass,
    HoldReport, LabStopped, ListenDrops, MachineLimits, PerRequest, Point, Preflight, Sample,
    Stage,
};

use crate::hooks::NoHooks;
use crate::policy::Front;

/// The counts a plain `hold` measures: under half a minute on a 2-core machine.
pub(crate) const DEFAULT_COUNTS: [u32; 4] = [10, 100, 1_000, 4_000];
/// The most requests `hold` will hold.
pub(crate) const MAX_COUNT: u32 = 50_000;

/// What to measure: checked counts and fronts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldInputs {
    counts: Vec<u32>,
    fronts: Vec<Front>,
}

impl HoldInputs {
    /// Counts from 1 through [`MAX_COUNT`] (sorted, each once) on `fronts` (async first, each
    /// once). `Err` names what is wrong; nothing has started.
    pub fn new(counts: &[u32], fronts: &[Front]) -> anyhow::Result<HoldInputs> {
        if let Some(bad) = counts.iter().find(|&&n| !(1..=MAX_COUNT).contains(&n)) {
            anyhow::bail!("--counts: {bad} is outside 1 through {MAX_COUNT}");
        }
        let mut counts = counts.to_vec();
        counts.sort_unstable();
        counts.dedup();
        let fronts: Vec<Front> = Front::ALL
            .into_iter()
            .filter(|front| fronts.contains(front))
            .collect();
        if counts.is_empty() || fronts.is_empty() {
            anyhow::bail!("--counts and --server need at least one value each");
        }
        Ok(HoldInputs { counts, fronts })
    }

    /// The counts, ascending.
    pub fn counts(&self) -> &[u32] {
        &self.counts
    }

    /// The fronts, async first.
    pub fn fronts(&self) -> &[Front] {
        &self.fronts
    }
}

/// How `hold` starts its children, and where a test steps in. The command line uses the
/// default: this very program, no hooks.
#[derive(Clone, Debug)]
pub struct HoldOptions {
    /// The lab's binary to start as each front's child; `None` is this program.
    pub program: Option<PathBuf>,
    /// Where a test steps into the run ([`NoHooks`] by default).
    pub hooks: Arc<dyn HoldHooks>,
}

impl Default for HoldOptions {
    fn default() -> Self {
        HoldOptions {
            program: None,
            hooks: Arc::new(NoHooks),
        }
    }
}

/// The points where a `hold` run lets a test in. Every method's default leaves the run as it
/// is.
pub trait HoldHooks: Debug + Send + Sync {
    /// How many permits fewer than the requests it sends each front's pool gets: some are then
    /// refused, a run the lab must fail.
    fn permits_short(&self) -> u32 {
        0
    }

    /// Called each time the lab, waiting for every request to be held, reads that the front's
    /// child (process `pid`: which child, not a handle) holds `held`: the signal the run then
    /// sends that child, if any.
    fn signal_front(&self, _pid: u32, _held: u64) -> Option<FrontSignal> {
        None
    }

    /// Called when the lab has found the front's child (process `pid`) stopped by a signal in
    /// one of its steps, before it kills the child.
    fn found_stopped(&self, _pid: u32) {}
}

/// A signal a `hold` run sends its front's child for a test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontSignal {
    /// SIGKILL: the child dies at once.
    Kill,
    /// SIGSTOP: the child freezes, answering nothing.
    Stop,
}

impl HoldHooks for NoHooks {}

pub use run::hold;

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts are checked, sorted and taken once; fronts come async first.
    #[test]
    fn config_checks_counts_and_orders_fronts() {
        let config = HoldInputs::new(&[4_000, 10, 100, 10], &[Front::Threaded, Front::Async])
            .expect("valid");
        assert_eq!(config.counts(), [10, 100, 4_000]);
        assert_eq!(config.fronts(), Front::ALL);
        for bad in [&[0][..], &[50_001], &[10, 0], &[]] {
            assert!(HoldInputs::new(bad, &Front::ALL).is_err(), "{bad:?}");
        }
        assert!(HoldInputs::new(&[10], &[]).is_err());
        assert!(HoldInputs::new(&[1, MAX_COUNT], &[Front::Async]).is_ok());
    }
}
