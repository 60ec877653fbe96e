//! `hold`: what a held request costs on each front, from ten to the threaded front's ceiling.
//! For each front and each count N, a fresh front runs in a child process of the lab
//! (`src/front_process/`), so the figures read from its `/proc/<pid>` are its own and a front that
//! dies cannot take the lab with it. The parent sends N callers with the run token and labels,
//! waits until the child reports all N held, samples the child and two machine-wide counters,
//! opens the gate, checks every answer is 200, then stops, checks and reaps the child. Each
//! figure is also given per held request, against the same front's child at rest (N = 0).
//!
//! Before anything starts, the preflight reads the ceilings that would stop a front and does
//! not run a count beyond one; a front that fails anyway is recorded at that N, with how its
//! process ended, and is not run at larger counts.
//!
//! - `report`: what was measured; `src/render/hold/` draws it.
//! - `preflight`: the ceilings, and the counts each front runs.
//! - `measure`: one measurement, from starting the child to reaping it.
//! - `callers`: the parent's HTTP callers.

mod callers;
mod measure;
mod preflight;
mod report;

use std::path::PathBuf;

pub use report::{
    Death, Figures, FrontFailure, FrontSeries, HoldReport, MachineLimits, Outcome, PerRequest,
    Point, Preflight, Reach, Sample, Stage,
};

use crate::limits::{self, Limits};
use crate::policy::Front;
use measure::{Broken, Setup};

/// The counts a plain `hold` measures: under half a minute on a 2-core machine.
pub const DEFAULT_COUNTS: [u32; 4] = [10, 100, 1_000, 4_000];
/// The most requests `hold` will hold.
pub const MAX_COUNT: u32 = 50_000;

/// What to measure: checked counts and fronts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    counts: Vec<u32>,
    fronts: Vec<Front>,
}

impl Config {
    /// Counts from 1 through [`MAX_COUNT`] (sorted, each once) on `fronts` (async first, each
    /// once). `Err` names what is wrong; nothing has started.
    pub fn new(counts: &[u32], fronts: &[Front]) -> Result<Config, String> {
        if let Some(bad) = counts.iter().find(|&&n| !(1..=MAX_COUNT).contains(&n)) {
            return Err(format!("--counts: {bad} is outside 1 through {MAX_COUNT}"));
        }
        let mut counts = counts.to_vec();
        counts.sort_unstable();
        counts.dedup();
        let fronts: Vec<Front> = Front::ALL
            .into_iter()
            .filter(|front| fronts.contains(front))
            .collect();
        if counts.is_empty() || fronts.is_empty() {
            return Err("--counts and --server need at least one value each".into());
        }
        Ok(Config { counts, fronts })
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

/// How `hold` starts its children, and the faults a test injects. The command line uses the
/// default: this very program, no fault.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The lab's binary to start as each front's child; `None` is this program.
    pub program: Option<PathBuf>,
    /// Faults to inject.
    pub faults: Faults,
}

/// What a test may break in a `hold` run. The command line never sets any of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// SIGKILL the front's child once it reports this many requests held.
    pub kill_front_when_held: Option<u64>,
    /// Give the front's pool this many permits fewer than the requests sent, so some are
    /// refused: a run that the lab must fail.
    pub pool_short_by: u32,
}

/// Runs `hold` for `config` on a runtime of its own, dropped before this returns, so nothing
/// it started outlives the report. Raises this process's RLIMIT_NOFILE soft limit to the hard
/// one first (the children inherit it).
pub fn hold(config: &Config, options: &Options) -> HoldReport {
    let mut report = HoldReport {
        instrument: "hold".into(),
        counts: config.counts.clone(),
        preflight: None,
        fronts: Vec::new(),
        failure: None,
    };
    if let Err(e) = start(config, options, &mut report) {
        report.failure = Some(e);
    }
    report
}

/// The preflight, then every measurement; `Err` if nothing could start.
fn start(config: &Config, options: &Options, report: &mut HoldReport) -> Result<(), String> {
    limits::raise_nofile().map_err(|e| format!("cannot raise RLIMIT_NOFILE: {e}"))?;
    let limits = Limits::read().map_err(|e| format!("cannot read the ceilings: {e}"))?;
    let (preflight, planned) = preflight::plan(&limits, &config.fronts, &config.counts);
    report.preflight = Some(preflight);
    let program = match &options.program {
        Some(program) => program.clone(),
        None => std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?,
    };
    let setup = Setup {
        program: &program,
        limits: &limits,
        faults: &options.faults,
    };
    // One thread: the parent's callers are tasks, so it stays one thread however many it
    // holds, and it leaves the other core to the front being measured.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the Tokio runtime: {e}"))?;
    runtime.block_on(async {
        for &front in &config.fronts {
            let plan = planned.iter().filter(|p| p.front == front);
            let series = measure_front(&setup, front, plan, &mut report.failure).await;
            report.fronts.push(series);
        }
    });
    drop(runtime);
    Ok(())
}

/// One front's baseline and counts. Stops measuring, marking the rest not run, once the
/// front fails or the lab does (then `failure` says why).
async fn measure_front<'a>(
    setup: &Setup<'_>,
    front: Front,
    plan: impl Iterator<Item = &'a preflight::Planned>,
    failure: &mut Option<String>,
) -> FrontSeries {
    let name = front.name();
    let mut series = FrontSeries {
        front,
        baseline: None,
        points: Vec::new(),
    };
    let mut stopped = failure
        .as_ref()
        .map(|_| "the lab failed earlier".to_owned());
    if stopped.is_none() {
        match measure::idle(setup, front).await {
            Ok(sample) => series.baseline = Some(sample),
            Err(Broken::Front(failed)) => {
                stopped = Some(format!(
                    "the {name} front failed at rest: {}",
                    failed.reason
                ));
            }
            Err(Broken::Lab(why)) => {
                *failure = Some(format!("the {name} front at rest: {why}"));
                stopped = Some("the lab failed earlier".to_owned());
            }
        }
    }
    for planned in plan {
        let held = planned.held;
        let outcome = match (&stopped, &planned.runs, series.baseline) {
            (Some(reason), _, _) => Outcome::NotRun {
                reason: reason.clone(),
            },
            (None, Err(reason), _) => Outcome::NotRun {
                reason: reason.clone(),
            },
            (None, Ok(()), None) => Outcome::NotRun {
                reason: "no baseline".into(),
            },
            (None, Ok(()), Some(baseline)) => {
                match measure::held(setup, front, held, &baseline).await {
                    Ok(figures) => Outcome::Held(figures),
                    Err(Broken::Front(failed)) => {
                        stopped = Some(format!("the {name} front failed at {held} held"));
                        Outcome::FrontFailed(failed)
                    }
                    Err(Broken::Lab(why)) => {
                        *failure = Some(format!("the {name} front, {held} held: {why}"));
                        stopped = Some("the lab failed earlier".to_owned());
                        Outcome::LabFailed { reason: why }
                    }
                }
            }
        };
        series.points.push(Point { held, outcome });
    }
    series
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts are checked, sorted and taken once; fronts come async first.
    #[test]
    fn config_checks_counts_and_orders_fronts() {
        let config =
            Config::new(&[4_000, 10, 100, 10], &[Front::Threaded, Front::Async]).expect("valid");
        assert_eq!(config.counts(), [10, 100, 4_000]);
        assert_eq!(config.fronts(), Front::ALL);
        for bad in [&[0][..], &[50_001], &[10, 0], &[]] {
            assert!(Config::new(bad, &Front::ALL).is_err(), "{bad:?}");
        }
        assert!(Config::new(&[10], &[]).is_err());
        assert!(Config::new(&[1, MAX_COUNT], &[Front::Async]).is_ok());
    }
}
