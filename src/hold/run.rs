//! How `hold` runs: the preflight, then for each front its baseline and each count in turn, on
//! a runtime of its own.

use std::future::Future;

use anyhow::{Context, anyhow, bail};

use super::evidence::{self, Broken, Setup};
use super::model;
use super::report::{CountOutcome, FrontSeries, HoldReport, Point};
use super::{HoldInputs, HoldOptions};
use crate::draw::table::thousands;
// The lab's one catcher of Ctrl-C (see `crate::interrupts` for why not Tokio's).
use crate::interrupts::Interrupts;
use crate::limits::{self, Limits};
use crate::policy::Front;

/// Runs `hold` for `config` on a runtime of its own, dropped before this returns, so nothing
/// it started outlives the report. Raises this process's RLIMIT_NOFILE soft limit to the hard
/// one first (the children inherit it).
pub fn hold(config: &HoldInputs, options: &HoldOptions) -> HoldReport {
    let mut report = HoldReport {
        instrument: "hold".into(),
        counts: config.counts.clone(),
        preflight: None,
        fronts: Vec::new(),
        failure: None,
    };
    if let Err(e) = start(config, options, &mut report) {
        report.failure = Some(format!("{e:#}"));
    }
    report
}

/// The preflight, then every measurement; `Err` if nothing could start.
fn start(
    config: &HoldInputs,
    options: &HoldOptions,
    report: &mut HoldReport,
) -> anyhow::Result<()> {
    limits::raise_nofile().context("cannot raise RLIMIT_NOFILE")?;
    let limits = Limits::read().context("cannot read the ceilings")?;
    // Below this not even a front at rest fits: say so once, before any child starts.
    let base = limits.base_address_space_kib();
    if let Some(bytes) = limits.address_space.soft
        && bytes / 1024 < base
    {
        bail!(
            "RLIMIT_AS = {bytes} bytes leaves no room: a front's child takes about {:.1} MiB \
             of address space before it holds anything (this process, {:.1} MiB so far, and \
             its runtime and threads)",
            base as f64 / 1024.0,
            limits.own_address_space_kib as f64 / 1024.0
        );
    }
    let (preflight, planned) = model::plan(&limits, &config.fronts, &config.counts);
    report.preflight = Some(preflight);
    let program = match &options.program {
        Some(program) => program.clone(),
        None => std::env::current_exe().context("cannot find this program")?,
    };
    let setup = Setup {
        program: &program,
        limits: &limits,
        hooks: options.hooks.as_ref(),
    };
    // One thread: the parent's callers are tasks, so it stays one thread however many it
    // holds, and it leaves the other core to the front being measured.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the Tokio runtime")?;
    runtime.block_on(async {
        // Ctrl-C, SIGTERM, SIGHUP and the other signals sent to end a program (`interrupts`)
        // are caught from before the first child starts until the last is reaped, so a second
        // one cannot cut the close short; SIGCONT is counted, so a wait can tell the lab's own
        // stop from a front's stall. Where they cannot be caught (no descriptor left for the
        // catcher's pipe), a signal ends the binary in one line at once (`last_words`), and each
        // child dies with it.
        let interrupts = Interrupts::catch().ok();
        for &front in &config.fronts {
            let plan = planned.iter().filter(|p| p.front == front);
            let caught = interrupts.as_ref();
            let series = measure_front(&setup, front, plan, caught, &mut report.failure).await;
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
    plan: impl Iterator<Item = &'a model::HoldPlan>,
    interrupts: Option<&Interrupts>,
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
        match unless_interrupted(interrupts, evidence::idle(setup, front)).await {
            Ok(sample) => series.baseline = Some(sample),
            Err(Broken::Front(failed)) => {
                stopped = Some(format!(
                    "the {name} front failed at rest: {}",
                    failed.reason
                ));
            }
            Err(Broken::Lab(why)) => {
                *failure = Some(format!("the {name} front at rest: {why:#}"));
                stopped = Some("the lab failed earlier".to_owned());
            }
        }
    }
    for planned in plan {
        let held = planned.held;
        let outcome = match (&stopped, &planned.runs, series.baseline) {
            (Some(reason), _, _) => CountOutcome::NotRun {
                reason: reason.clone(),
            },
            (None, Err(refusal), _) => CountOutcome::NotRun {
                reason: refusal.to_string(),
            },
            (None, Ok(()), None) => CountOutcome::NotRun {
                reason: "no baseline".into(),
            },
            (None, Ok(()), Some(baseline)) => {
                let measured = evidence::held(setup, front, planned, &baseline);
                match unless_interrupted(interrupts, measured).await {
                    Ok(figures) => CountOutcome::Held(figures),
                    Err(Broken::Front(failed)) => {
                        let n = thousands(u64::from(held));
                        stopped = Some(format!("the {name} front failed at N = {n}"));
                        CountOutcome::FrontFailed(failed)
                    }
                    Err(Broken::Lab(why)) => {
                        let why = format!("{why:#}");
                        let n = thousands(u64::from(held));
                        *failure = Some(format!("the {name} front, N = {n}: {why}"));
                        stopped = Some("the lab failed earlier".to_owned());
                        CountOutcome::LabFailed { reason: why }
                    }
                }
            }
        };
        series.points.push(Point { held, outcome });
    }
    series
}

/// What `measurement` gives, unless Ctrl-C, SIGTERM or another signal comes first: then the lab
/// fails, and the measurement is dropped before this returns, which aborts its callers (if it
/// sent any) and kills and reaps its child (`child::Reaper`'s drop).
async fn unless_interrupted<T>(
    interrupts: Option<&Interrupts>,
    measurement: impl Future<Output = Result<T, Broken>>,
) -> Result<T, Broken> {
    let Some(interrupts) = interrupts else {
        return measurement.await;
    };
    // The signal first: once the runtime has seen it, no further measurement starts a child.
    tokio::select! {
        biased;
        signal = interrupts.caught() => Err(Broken::Lab(anyhow!(
            "interrupted by {signal}: the measurement was cut short, and its child was ended \
             and reaped"
        ))),
        measured = measurement => measured,
    }
}
