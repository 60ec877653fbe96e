//! `hold`'s evidence, one measurement: a fresh front child, N callers sent until the child
//! reports N held, the child and the machine sampled, the gate opened, every answer checked,
//! the child stopped, checked and reaped. Whatever goes wrong, the callers are aborted and
//! joined and the child is reaped before this returns; a front that failed is told apart from
//! a lab that did.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use super::callers::Callers;
use super::model::HoldPlan;
use super::report::{
    Death, DropScope, Figures, FrontFailure, HeapClass, LabStopped, ListenDrops, PerRequest,
    Sample, Stage,
};
use super::{FrontSignal, HoldHooks};
use crate::admission::gate::GateState;
use crate::child::{Exit, Stall, StopWatch, stop_watch, watched, watched_within};
use crate::draw::table::plural;
use crate::front_process::{FromFront, FrontError, FrontProcess, FrontSpec, StoppedFront};
use crate::limits::{self, Limits};
use crate::policy::{Front, Pool};
use crate::procfs::{self, ProcessFigures, ProcessStat};

/// Fails a front that is not ready by then (the machine may be busy).
const START: Duration = Duration::from_secs(15);
/// Fails a hold or a release that makes no progress for this long (no request newly held, no
/// caller answered), and a front that does not answer for its heap by then. The listener's
/// accept queue has room for every caller up to `somaxconn` (see `model::backlog`); a caller
/// beyond it whose SYN is dropped tries again after 1 s, then waits twice as long each time:
/// each of its first four waits (1, 2, 4 and 8 s) is shorter than this, a fifth would not be.
/// A front that moves nothing for this long is stuck, or stopped.
const STALL: Duration = Duration::from_secs(10);
/// Fails a front that has not reported its stop by then, and kills it.
const STOP: Duration = Duration::from_secs(8);
/// The same, for a front that was silent for [`STALL`] (a step failed as [`Stuck::Silent`]):
/// it is killed within the lab's 15 s of its silence.
const STOP_SILENT: Duration = Duration::from_secs(3);

/// What every measurement needs.
#[derive(Debug)]
pub(crate) struct Setup<'a> {
    /// The lab's binary, started as `<program> __front <spec>`.
    pub(crate) program: &'a Path,
    pub(crate) limits: &'a Limits,
    pub(crate) hooks: &'a dyn HoldHooks,
}

/// A measurement that gave no figures.
#[derive(Debug)]
pub(crate) enum Broken {
    /// The front failed: evidence of where it stops.
    Front(FrontFailure),
    /// The lab failed: the run stops here and exits 1.
    Lab(anyhow::Error),
}

/// The figures of the front at rest: started, nothing sent, stopped.
pub(crate) async fn idle(setup: &Setup<'_>, front: Front) -> Result<Sample, Broken> {
    let mut remote = start(setup, &FrontSpec::new(front, 1)).await?;
    let sampled = async {
        let procfs =
            ProcessFigures::read(remote.pid()).context("reading the front's /proc figures")?;
        anyhow::Ok(Sample {
            procfs,
            heap: census(&mut remote, "rest").await?,
        })
    }
    .await;
    match sampled {
        Ok(sample) => {
            stop(remote, 0).await?;
            Ok(sample)
        }
        Err(why) => Err(end_early(remote, None, Stage::Starting, 0, why, setup.hooks).await),
    }
}

/// Holds `held` requests on a fresh `front` child and measures what that costs, against the
/// front's idle `baseline`.
pub(crate) async fn held(
    setup: &Setup<'_>,
    front: Front,
    planned: &HoldPlan,
    baseline: &Sample,
) -> Result<Figures, Broken> {
    let held = planned.held;
    let permits = held.saturating_sub(setup.hooks.permits_short()).max(1);
    let capacity = usize::try_from(permits).expect("a count of at most 50 000 fits in usize");
    let spec = FrontSpec {
        backlog: Some(planned.backlog),
        ..FrontSpec::new(front, capacity)
    };
    let mut remote = start(setup, &spec).await?;
    let pid = remote.pid();
    let sources = limits::source_addresses_needed(u64::from(held), setup.limits);
    let mut callers = match Callers::new(remote.address(), remote.token(), sources) {
        Ok(callers) => callers,
        Err(why) => return Err(end_early(remote, None, Stage::Holding, 0, why, setup.hooks).await),
    };
    let mut seen = 0;
    // One watch over the hold, then over the release: how long the lab was stopped in each.
    let mut watch = stop_watch();
    let holding = async {
        let before = Machine::read()?;
        let cpu_before = Cpu::read(pid)?;
        let sent = Instant::now();
        watch.restart();
        callers.send(held);
        let counts = (held, permits);
        hold_all(
            &mut remote,
            &mut callers,
            &mut watch,
            counts,
            setup.hooks,
            &mut seen,
        )
        .await?;
        let time_to_hold = sent.elapsed();
        let stopped_holding = watch.stopped();
        let cpu = Cpu::read(pid)?.since(cpu_before);
        let procfs = ProcessFigures::read(pid).with_context(|| format!("reading /proc/{pid}"))?;
        let after = Machine::read()?;
        // Asked after the figures: its answer is a few hundred bytes of the child's heap.
        let heap = census(&mut remote, &format!("{seen} of {held} held")).await?;
        let sample = Sample { procfs, heap };
        anyhow::Ok((before, after, cpu, sample, (time_to_hold, stopped_holding)))
    }
    .await;
    let (before, after, cpu, process, (time_to_hold, stopped_holding)) = match holding {
        Ok(sampled) => sampled,
        Err(why) => {
            let callers = Some(callers);
            let stage = Stage::Holding;
            return Err(end_early(remote, callers, stage, seen, why, setup.hooks).await);
        }
    };
    let opened = Instant::now();
    watch.restart();
    let released = match remote.open_gate().await {
        Ok(()) => answer_all(&mut remote, &mut callers, &mut watch).await,
        Err(e) => Err(anyhow::Error::new(e).context("opening the gate")),
    };
    if let Err(why) = released {
        let (callers, stage) = (Some(callers), Stage::Releasing);
        return Err(end_early(remote, callers, stage, seen, why, setup.hooks).await);
    }
    let time_to_release = opened.elapsed();
    let lab_stopped = (watch.stopped() > Duration::ZERO).then(|| LabStopped {
        holding_ms: millis(stopped_holding),
        releasing_ms: millis(watch.stopped() - stopped_holding),
    });
    // Every caller has ended: the clients and their connections go now, before the stop.
    drop(callers);
    let closed = stop(remote, held).await?;
    let listen_drops = match closed.stopped.listen_drops {
        Some(count) => ListenDrops {
            count,
            scope: DropScope::FrontSocket,
        },
        None => ListenDrops {
            count: after
                .listen_overflows
                .saturating_sub(before.listen_overflows),
            scope: DropScope::Machine,
        },
    };
    let kernel_stack_kib = signed(after.kernel_stack_kib) - signed(before.kernel_stack_kib);
    let kernel_slab_kib = signed(after.kernel_slab_kib) - signed(before.kernel_slab_kib);
    let heap_per_request = crate::allocator::CLASSES
        .iter()
        .enumerate()
        .map(|(at, class)| HeapClass {
            class: (*class).to_owned(),
            blocks: (process.heap.blocks[at] - baseline.heap.blocks[at]) as f64 / f64::from(held),
            kib: (process.heap.bytes[at] - baseline.heap.bytes[at]) as f64
                / 1024.0
                / f64::from(held),
        })
        .collect();
    let per = |now: u64, idle: u64| (signed(now) - signed(idle)) as f64 / f64::from(held);
    let (now, idle) = (process.procfs, baseline.procfs);
    Ok(Figures {
        pid,
        time_to_hold_ms: millis(time_to_hold),
        time_to_release_ms: millis(time_to_release),
        lab_stopped,
        process,
        kernel_stack_kib,
        kernel_slab_kib,
        heap_per_request,
        listen_backlog: planned
            .backlog
            .min(u32::try_from(setup.limits.somaxconn).unwrap_or(u32::MAX)),
        listen_drops,
        callers_cpu_ms: cpu.callers_ms,
        front_cpu_ms: cpu.front_ms,
        source_addresses: sources,
        per_request: PerRequest {
            os_threads: per(now.os_threads, idle.os_threads),
            rss_kib: per(now.rss_kib, idle.rss_kib),
            address_space_kib: per(now.address_space_kib, idle.address_space_kib),
            memory_maps: per(now.memory_maps, idle.memory_maps),
            open_fds: per(now.open_fds, idle.open_fds),
            kernel_stack_kib: kernel_stack_kib as f64 / f64::from(held),
            kernel_slab_kib: kernel_slab_kib as f64 / f64::from(held),
        },
    })
}

async fn start(setup: &Setup<'_>, spec: &FrontSpec) -> Result<FrontProcess, Broken> {
    FrontProcess::start(setup.program, spec, START)
        .await
        .map_err(|e| match e.exit {
            // A process that started and ended is the front's doing; one that never started
            // is the lab's.
            Some(_) => Broken::Front(failure(None, Stage::Starting, 0, e)),
            None => Broken::Lab(e.into()),
        })
}

/// One thing that happened while waiting.
enum Heard {
    Front(std::io::Result<Option<FromFront>>),
    Caller(Option<anyhow::Result<()>>),
}

/// Waits for the next thing heard (see [`watched`]). `callers_first`: take an ended caller
/// before a message.
async fn next_heard(
    remote: &mut FrontProcess,
    callers: &mut Callers,
    watch: &mut StopWatch,
    deadline: &mut tokio::time::Instant,
    callers_first: bool,
) -> Result<Heard, Stall> {
    let pid = remote.pid();
    let heard = async {
        if callers_first {
            tokio::select! {
                biased;
                ended = callers.next() => Heard::Caller(ended),
                message = remote.next() => Heard::Front(message),
            }
        } else {
            tokio::select! {
                message = remote.next() => Heard::Front(message),
                ended = callers.next() => Heard::Caller(ended),
            }
        }
    };
    watched(pid, watch, deadline, heard).await
}

/// Asks the front for its heap, `at` (how far the measurement is), [`watched`]: it can be
/// stopped after [`hold_all`] has returned, as the counts are read behind the front: a stop on
/// reading one count can come after the front has sent the full count, which [`hold_all`]
/// reads next. `Err` if the front is stopped, or has not answered within [`STALL`].
async fn census(
    remote: &mut FrontProcess,
    at: &str,
) -> anyhow::Result<crate::allocator::HeapCensus> {
    match watched_within(remote.pid(), STALL, remote.census()).await {
        Ok(answer) => answer,
        Err(Stall::Stopped) => Err(Stuck::Stopped(format!("at {at}, asked for its heap")).into()),
        Err(Stall::NoProgress) => Err(Stuck::Silent(format!(
            "the front did not answer for its heap within {} s, at {at}",
            STALL.as_secs()
        ))
        .into()),
    }
}

/// Waits until the front reports `held` requests held (`seen` follows its count). `Err` if a
/// caller ends first, the front says anything else, ends or is stopped, or nothing moves for
/// [`STALL`].
async fn hold_all(
    remote: &mut FrontProcess,
    callers: &mut Callers,
    watch: &mut StopWatch,
    (held, permits): (u32, u32),
    hooks: &dyn HoldHooks,
    seen: &mut u64,
) -> anyhow::Result<()> {
    let mut deadline = tokio::time::Instant::now() + STALL;
    while *seen < u64::from(held) {
        match next_heard(remote, callers, watch, &mut deadline, false).await {
            Err(Stall::NoProgress) => {
                return Err(Stuck::Silent(format!(
                    "stalled: {seen} of {held} held, and none more for {} s",
                    STALL.as_secs()
                ))
                .into());
            }
            Err(Stall::Stopped) => {
                return Err(Stuck::Stopped(format!("at {seen} of {held} held")).into());
            }
            Ok(Heard::Front(Ok(Some(FromFront::Counts(counts))))) => {
                if counts.refused > 0 {
                    let verb = if counts.refused == 1 { "was" } else { "were" };
                    bail!(
                        "{} of {} {verb} refused by a pool of {}",
                        counts.refused,
                        plural(held, "request"),
                        plural(permits, "permit")
                    );
                }
                if counts.held > *seen {
                    deadline = tokio::time::Instant::now() + STALL;
                }
                *seen = counts.held;
                match hooks.signal_front(remote.pid(), *seen) {
                    Some(FrontSignal::Kill) => remote.kill().context("killing the front")?,
                    Some(FrontSignal::Stop) => remote.pause().context("stopping the front")?,
                    None => {}
                }
            }
            Ok(Heard::Front(message)) => return Err(unexpected(message)),
            Ok(Heard::Caller(Some(Ok(())))) => {
                bail!("a caller was answered 200 while the gate was closed");
            }
            Ok(Heard::Caller(Some(Err(why)))) => return Err(why),
            Ok(Heard::Caller(None)) => bail!("no caller is left waiting"),
        }
    }
    Ok(())
}

/// Waits until every caller has been answered 200. `Err` at the first that was not, if the
/// front ends, is stopped or says anything but counts, or if nothing moves for [`STALL`].
async fn answer_all(
    remote: &mut FrontProcess,
    callers: &mut Callers,
    watch: &mut StopWatch,
) -> anyhow::Result<()> {
    let mut deadline = tokio::time::Instant::now() + STALL;
    while callers.waiting() > 0 {
        match next_heard(remote, callers, watch, &mut deadline, true).await {
            Err(Stall::NoProgress) => {
                return Err(Stuck::Silent(format!(
                    "stalled: {} still waiting, none answered for {} s after the gate opened",
                    plural(callers.waiting(), "caller"),
                    STALL.as_secs()
                ))
                .into());
            }
            Err(Stall::Stopped) => {
                let waiting = plural(callers.waiting(), "caller");
                return Err(Stuck::Stopped(format!("with {waiting} still waiting")).into());
            }
            Ok(Heard::Caller(Some(Ok(())))) => deadline = tokio::time::Instant::now() + STALL,
            Ok(Heard::Front(Ok(Some(FromFront::Counts(_))))) => {}
            Ok(Heard::Caller(Some(Err(why)))) => return Err(why),
            Ok(Heard::Caller(None)) => break,
            Ok(Heard::Front(message)) => return Err(unexpected(message)),
        }
    }
    Ok(())
}

fn unexpected(message: std::io::Result<Option<FromFront>>) -> anyhow::Error {
    match message {
        Ok(None) => anyhow!("the front's process ended"),
        Ok(Some(message)) => {
            let said = serde_json::to_string(&message).unwrap_or_else(|e| e.to_string());
            anyhow!("the front sent {said} mid-run")
        }
        Err(e) => anyhow::Error::new(e).context("reading the front's messages"),
    }
}

/// Stops the front and checks its report: a clean stop, an exact ledger with every one of
/// `held` admitted, held and finished, none refused or cancelled, and full pools.
async fn stop(remote: FrontProcess, held: u32) -> Result<StoppedFront, Broken> {
    let pid = remote.pid();
    let closed = remote
        .stop(STOP)
        .await
        .map_err(|e| Broken::Front(failure(Some(pid), Stage::Stopping, u64::from(held), e)))?;
    check(&closed, u64::from(held)).map_err(Broken::Lab)?;
    Ok(closed)
}

fn check(closed: &StoppedFront, held: u64) -> anyhow::Result<()> {
    let stopped = &closed.stopped;
    if let Some(error) = &stopped.error {
        bail!("the front did not stop cleanly: {error}");
    }
    let server = &stopped.server;
    if !server.connection_tasks_stopped || server.connection_tasks_aborted > 0 {
        bail!(
            "the front's connection handlers did not all end by themselves: of {} accepted, {} \
             aborted{}",
            server.connections_accepted,
            server.connection_tasks_aborted,
            if server.connection_tasks_stopped {
                ""
            } else {
                ", and not every one was joined"
            }
        );
    }
    let ledger = stopped
        .ledger
        .get(&Pool::Shared)
        .context("the front's ledger has no shared pool")?;
    if let Some(broken) = ledger.invariants.iter().find(|i| !i.holds) {
        bail!("the front's ledger broke its rule \"{}\"", broken.rule);
    }
    let counts = (
        ledger.admitted,
        ledger.refused,
        ledger.finished,
        ledger.cancelled,
    );
    if counts != (held, 0, held, 0) || stopped.counts.held != held {
        bail!(
            "the front's ledger shows {} admitted, {} refused, {} held, {} finished ({} \
             cancelled), not {held} of each and none refused or cancelled",
            ledger.admitted,
            ledger.refused,
            stopped.counts.held,
            ledger.finished,
            ledger.cancelled
        );
    }
    let state = &stopped.final_state;
    let active = state.active_work.get(&Pool::Shared).copied();
    // At rest the gate is never opened: the stop abandons it.
    let gate_ok = held == 0 || state.gate == GateState::Open;
    if active != Some(0) || !gate_ok {
        let state = serde_json::to_string(state).unwrap_or_else(|e| e.to_string());
        bail!("the front ended with {state}: work still active, or its gate not opened");
    }
    Ok(())
}

/// A step of the lab's that the front held up: how, in words.
#[derive(Debug)]
enum Stuck {
    /// Silent for [`STALL`] (nothing held, answered or said): what the step was waiting for.
    Silent(String),
    /// Its process found stopped by a signal: where.
    Stopped(String),
}

impl std::fmt::Display for Stuck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stuck::Silent(waiting) => f.write_str(waiting),
            Stuck::Stopped(at) => write!(f, "the front's process stopped {at}"),
        }
    }
}

impl std::error::Error for Stuck {}

/// Aborts and joins the callers, then stops the front (or reaps it, if it is gone), and says
/// whose failure it was: the front's if its process was found stopped, died or its server
/// failed, else the lab's, for `why`.
async fn end_early(
    remote: FrontProcess,
    callers: Option<Callers>,
    stage: Stage,
    held: u64,
    why: anyhow::Error,
    hooks: &dyn HoldHooks,
) -> Broken {
    if let Some(callers) = callers {
        callers.abort().await;
    }
    let pid = remote.pid();
    // Found stopped, it is killed whether or not it has been continued since (a brief stop is
    // still a stop from outside): the same evidence wherever and however long the stop.
    let stuck = why.downcast_ref::<Stuck>();
    if let Some(Stuck::Stopped(_)) = stuck {
        hooks.found_stopped(pid);
        return Broken::Front(FrontFailure {
            detail: format!("{why:#}"),
            ..failure(Some(pid), stage, held, remote.kill_found_stopped().await)
        });
    }
    // A front silent for so long gets little more; one stopped for another step's failure (a
    // caller's, the lab's), however many connections it has to close, gets the usual time.
    let timeout = match stuck {
        Some(Stuck::Silent(_)) => STOP_SILENT,
        _ => STOP,
    };
    match remote.stop(timeout).await {
        Err(e) => {
            // What went wrong first, then what the stop found; a process found stopped is the
            // reason itself.
            let detail = if e.found_stopped {
                format!("{why:#}")
            } else {
                format!("{why:#}; then {}", e.reason)
            };
            Broken::Front(FrontFailure {
                detail,
                ..failure(Some(pid), stage, held, e)
            })
        }
        Ok(closed) => match closed.stopped.error {
            Some(error) => Broken::Front(FrontFailure {
                pid: Some(pid),
                stage,
                // The front's own count, which may be ahead of the last one read.
                held_before: held.max(closed.stopped.counts.held),
                reason: format!("its server failed: {error}"),
                detail: format!("{why:#}"),
                exit: Some(death(&closed.exit)),
            }),
            None => Broken::Lab(why),
        },
    }
}

/// A front that could not do its step: how its process ended when that was not clean, else
/// the step's error.
fn failure(pid: Option<u32>, stage: Stage, held: u64, error: FrontError) -> FrontFailure {
    let exit = error.exit.as_ref().map(death);
    let reason = match (&error.exit, &exit) {
        // The lab's own SIGKILL, after it found the front's process stopped, which says so.
        (Some(ended), _) if ended.killed_by_lab && error.found_stopped => {
            format!("{}, so the lab killed it (SIGKILL)", error.reason)
        }
        // The lab's own SIGKILL, after the front stopped answering: say what it stopped doing.
        (Some(ended), _) if ended.killed_by_lab => format!(
            "it stopped responding ({}), so the lab killed it (SIGKILL)",
            error.reason
        ),
        (_, Some(death)) if !death.clean() => format!("its process {}", death.how()),
        _ => error.to_string(),
    };
    FrontFailure {
        pid,
        stage,
        held_before: held,
        reason,
        detail: error.reason,
        exit,
    }
}

fn death(exit: &Exit) -> Death {
    Death {
        code: exit.code,
        signal: exit.signal.map(|signal| signal.name.to_owned()),
        last_stderr: exit.last_stderr.clone(),
    }
}

/// CPU used so far by this process (the callers') and by the front's child.
#[derive(Clone, Copy)]
struct Cpu {
    callers_ms: u64,
    front_ms: u64,
}

impl Cpu {
    fn read(front: u32) -> anyhow::Result<Cpu> {
        let read = |pid| ProcessStat::read(pid).map(|stat| stat.cpu_ms);
        Ok(Cpu {
            callers_ms: read(std::process::id()).context("reading this process's CPU time")?,
            front_ms: read(front).context("reading the front's CPU time")?,
        })
    }

    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            callers_ms: self.callers_ms.saturating_sub(before.callers_ms),
            front_ms: self.front_ms.saturating_sub(before.front_ms),
        }
    }
}

/// The three machine-wide counters.
struct Machine {
    kernel_stack_kib: u64,
    kernel_slab_kib: u64,
    listen_overflows: u64,
}

impl Machine {
    fn read() -> anyhow::Result<Machine> {
        let counters = "reading the machine's counters";
        let [kernel_stack_kib, kernel_slab_kib] =
            procfs::meminfo_kib(["KernelStack", "Slab"]).context(counters)?;
        Ok(Machine {
            kernel_stack_kib,
            kernel_slab_kib,
            listen_overflows: procfs::listen_overflows().context(counters)?,
        })
    }
}

fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child::{Exit, ExitSignal};

    fn killed(after_grace: bool) -> FrontError {
        FrontError {
            reason: "the front did not stop within 60 s".into(),
            exit: Some(Exit {
                code: None,
                signal: Some(ExitSignal {
                    number: libc::SIGKILL,
                    name: "SIGKILL",
                }),
                last_stderr: None,
                killed_by_lab: after_grace,
            }),
            found_stopped: false,
        }
    }

    /// A front the lab had to kill because it stopped answering is reported as such, not as a
    /// process that something else killed; one killed from outside still says so.
    #[test]
    fn a_front_the_lab_killed_says_it_stopped_responding() {
        let stalled = failure(Some(7), Stage::Holding, 10, killed(true));
        assert!(
            stalled.reason.contains("stopped responding")
                && stalled.reason.contains("did not stop within 60 s"),
            "{stalled:?}"
        );
        let exit = stalled.exit.expect("reaped");
        assert_eq!(exit.signal.as_deref(), Some("SIGKILL"));
        let killed = failure(Some(7), Stage::Holding, 10, killed(false));
        assert_eq!(killed.reason, "its process was killed by SIGKILL");
    }

    /// A front that ended on its own with an error status says so plainly: its process
    /// exited with that code.
    #[test]
    fn a_front_that_exited_says_it_exited() {
        let exited = FrontError {
            reason: "the front's output ended".into(),
            exit: Some(Exit {
                code: Some(1),
                signal: None,
                last_stderr: Some("isolation-lab: out of memory".into()),
                killed_by_lab: false,
            }),
            found_stopped: false,
        };
        let exited = failure(Some(7), Stage::Holding, 10, exited);
        assert_eq!(exited.reason, "its process exited with code 1");
    }

    /// A front found stopped (SIGSTOP), then killed by the lab, says just that.
    #[test]
    fn a_front_found_stopped_says_so_and_that_the_lab_killed_it() {
        let stopped = FrontError {
            reason: "its process was found stopped (SIGSTOP or another stop signal)".into(),
            found_stopped: true,
            ..killed(true)
        };
        let stopped = failure(Some(7), Stage::Holding, 10, stopped);
        assert_eq!(
            stopped.reason,
            "its process was found stopped (SIGSTOP or another stop signal), so the lab killed it (SIGKILL)"
        );
    }
}
