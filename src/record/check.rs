//! The check of a saved report: `record` believes nothing it reads. It replays each policy's
//! ledger (`work_events`) as the work section wrote it, checks every other part of the report
//! against that replay — the admissions, the pool accounts, each response's status, body and
//! phase, the observer's snapshots, the final state — rebuilds the run's [`Evidence`] from the
//! file, and re-runs [`model::check`] on it with the model's expectations for the report's
//! inputs. The report's own verdict (`matches_model`, `model.matches`) is only compared with
//! that re-check. A contradiction is a [`Finding`]: the report was edited, or no run of the lab
//! could have written it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::admission::audit::{self, PoolLedger};
use crate::admission::ledger::{Event, Snapshot, WorkEvent};
use crate::admission::section::{GateState, Refusal, Verdict};
use crate::classroom::room::GAVE_UP;
use crate::coordinator::differs;
use crate::coordinator::failure::{Cause, Failure, Step, setup, waited};
use crate::coordinator::sequence::Planned;
use crate::draw::table::labels;
use crate::evidence::{Decision, Evidence, Moment, Observed, Phase};
use crate::executor::{Executor, Lane, LaneThreads, WorkStyle, Workers};
use crate::label::Label;
use crate::model;
use crate::policy::{Front, Mode, Policy, Pool, Route};
use crate::report::{PolicyReport, Report, Runner};
use crate::resources::Resources;
use crate::server;

use super::read::{SavedRoomGate, SavedRoomRequest, SavedSession};
use super::{Recheck, pointer};

/// A contradiction in a saved report, in words a student reads, and where it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// A JSON Pointer (RFC 6901) into the saved file, at the part that contradicts the rest.
    pub pointer: String,
    /// What contradicts what.
    pub says: String,
}

/// What the check of one lab report found.
#[derive(Debug)]
pub(crate) struct Checked {
    /// The verdict of the re-check.
    pub(crate) verdict: Recheck,
    /// The model's differences, re-checked, for each policy of the report in order.
    pub(crate) differences: Vec<Vec<String>>,
}

/// The room's part in one run of a classroom session: the route of each room request (the
/// session's, read once), and the session's room gates, of which those closed on this run's
/// ledger apply.
#[derive(Debug)]
pub(crate) struct RoomOfRun<'a> {
    pub(crate) routes: &'a BTreeMap<Label, Route>,
    pub(crate) gates: &'a [SavedRoomGate],
    pub(crate) run: usize,
}

/// Checks `report`, found at `prefix` in the file (`""`, or `/runs/<i>` in a classroom report);
/// `room` is the room's part in it when it is a classroom session's run.
pub(crate) fn report(report: &Report, room: Option<&RoomOfRun<'_>>, prefix: &str) -> Checked {
    let mut findings = Vec::new();
    let mut differences = Vec::new();
    let last = report.policies.len().saturating_sub(1);
    // The policy the failure is said of: a run's failure names the policy it stopped.
    let failed = (report.failure.as_deref())
        .and_then(said_of)
        .map(|(mode, _)| mode);
    for (i, policy) in report.policies.iter().enumerate() {
        let mut check = PolicyCheck {
            report,
            file: policy,
            policy: report.inputs.policy(policy.mode),
            room,
            base: format!("{prefix}{}", pointer(&["policies", &i.to_string()])),
            // The lab stops at the first policy that fails, so only the last one can be cut
            // short, and only if the failure is its own (a session may end before the next).
            cut_short: i == last && failed == Some(policy.mode),
            findings: Vec::new(),
            dropped: 0,
            differences: Vec::new(),
        };
        check.run();
        if !check.differences.is_empty() && i != last {
            check.find(
                &["model"],
                "it differs from the model, yet another policy follows it: the lab stops at \
                 the first policy that differs"
                    .into(),
            );
        } else if !check.differences.is_empty() && failed.is_some_and(|m| m != policy.mode) {
            check.find(
                &["model"],
                "it differs from the model, but the run's failure is another policy's: a \
                 policy that differs ends its run with its own failure"
                    .into(),
            );
        }
        if check.dropped > 0 {
            check.findings.push(Finding {
                pointer: check.base.clone(),
                says: format!(
                    "{}: and {} more contradictions, left out",
                    policy.mode.name(),
                    check.dropped
                ),
            });
        }
        findings.extend(check.findings);
        differences.push(check.differences);
    }

    let mut find = |path: &[&str], says: String| {
        let pointer = format!("{prefix}{}", pointer(path));
        findings.push(Finding { pointer, says });
    };
    // The version is this one (`read` refuses another's).
    runner(report, &mut find);
    // A failure is said of the policy it stopped (the lab runs no policy after it), and a
    // caller that failed got no response.
    if report.failure.is_some()
        && !failed.is_some_and(|mode| report.inputs.mode.modes().contains(&mode))
    {
        find(
            &["failure"],
            format!(
                "the failure is said of no policy --mode {} runs: a run's failure begins with \
                 the policy it stopped, or the one its session did not reach",
                report.inputs.mode.name()
            ),
        );
    }
    if let Some(failure) = &report.failure {
        // The policy the failure names, read once.
        let named = said_of(failure);
        let said = named.and_then(|(mode, rest)| {
            let (i, p) = (report.policies.iter().enumerate()).find(|(_, p)| p.mode == mode)?;
            Some((i, p, rest))
        });
        // A policy that fails keeps its entry; only a classroom session's run may name one
        // it never ran, when the session ended first.
        let absent = named
            .map(|(mode, _)| mode)
            .filter(|mode| report.inputs.mode.modes().contains(mode));
        if let (None, Some(absent)) = (&said, absent) {
            let mode = absent.name();
            let not_run = format!("{mode}: not run, the session ended before it");
            let before = report
                .inputs
                .mode
                .modes()
                .iter()
                .take_while(|&&m| m != absent);
            let skipped = before
                .copied()
                .find(|m| !report.policies.iter().any(|p| p.mode == *m));
            if room.is_none() || *failure != not_run {
                find(
                    &["failure"],
                    format!(
                        "the failure is the {mode} policy's, but the report has no {mode} \
                         policy: the lab keeps the entry of a policy that fails"
                    ),
                );
            } else if let Some(skipped) = skipped {
                // The closing session names the first policy still to run; each one before it
                // was opened, and is kept.
                find(
                    &["failure"],
                    format!(
                        "the failure says the {mode} policy was not run, but the report has no {} \
                         policy either, which runs before it: a session that ends names the first \
                         policy it did not open",
                        skipped.name()
                    ),
                );
            }
        }
        if let Some((i, policy, rest)) = said {
            let mode = policy.mode.name();
            let (caller, why) = match rest.split_once(": GET ") {
                Some((label, after)) => (label.parse::<Label>().ok(), after),
                None => (None, ""),
            };
            let answered = caller
                .filter(|&label| policy.observed.responses.iter().any(|r| r.request == label));
            // A caller that could not connect never sent its request: the client sends again on
            // a new connection only a request that never left a reused one.
            let dialled = (why.split_once(" failed: "))
                .and_then(|(_, why)| why.strip_prefix("connecting to "))
                .map(|to| to.split_once(": ").map_or(to, |(address, _)| address));
            let unconnected = dialled.is_some();
            let elsewhere = dialled
                .zip(policy.server.as_ref())
                .filter(|(dialled, server)| *dialled != server.address.to_string());
            let decided = caller.filter(|_| unconnected).and_then(|label| {
                let mut events = policy.work_events.iter();
                let event = events.find(|e| e.request == Some(label));
                event.map(|e| (label, e.seq))
            });
            let unsent = caller.and_then(|label| {
                let (_, missing) = unreached(&policy.observed, Some(label))?;
                Some((label, format!("it records no {missing}")))
            });
            // A slow request is sent in its turn: once the one before it is decided, or seen
            // waiting unread; and only the --held first ones are.
            let held = report.inputs.held.get();
            let unsent = unsent.or_else(|| match caller? {
                Label::Slow(k) if usize::from(k) > held => Some((
                    Label::Slow(k),
                    format!("--held {held} sends S1 to S{held}"),
                )),
                Label::Slow(k) if k > 1 => {
                    let before = Label::Slow(k - 1);
                    let decided = (policy.work_events.iter())
                        .any(|e| e.request == Some(before) && e.event.is_decision());
                    let unread = (policy.observed.executor.iter())
                        .any(|w| w.unread.iter().any(|u| u.request == before));
                    (!decided && !unread).then(|| {
                        let why = format!("it sends S{k} only once {before} is decided or seen unread, and records neither");
                        (Label::Slow(k), why)
                    })
                }
                _ => None,
            });
            if i != last {
                find(
                    &["failure"],
                    format!(
                        "the failure is the {mode} policy's, yet another policy follows it: the \
                         lab stops at the first policy that fails"
                    ),
                );
            } else if let Some((label, why)) = unsent {
                find(
                    &["failure"],
                    format!(
                        "the failure says {label}'s request failed, yet {mode} stopped before the \
                         lab sent it: {why}"
                    ),
                );
            } else if let Some(label) = answered {
                find(
                    &["failure"],
                    format!(
                        "the failure says {label}'s request failed, yet {mode} records its \
                         response"
                    ),
                );
            } else if let (Some(label), Some((dialled, server))) = (caller, elsewhere) {
                find(
                    &["failure"],
                    format!(
                        "the failure says {label} failed connecting to {dialled}, but {mode}'s \
                         server listened on {}: a caller connects only to its own run's server",
                        server.address
                    ),
                );
            } else if let Some((label, seq)) = decided {
                find(
                    &["failure"],
                    format!(
                        "the failure says {label} could not connect, yet {mode}'s ledger has \
                         {label} at seq {seq}: a request never sent reaches no work section"
                    ),
                );
            }
        }
        if let Some((_, policy, rest)) = said {
            stopped(report, policy, rest, room, &mut find);
        }
    }
    // A run that ran to the end and differs says so with its first difference, as re-checked.
    if let (Some(failure), Some((policy, found))) = (
        &report.failure,
        report.policies.last().zip(differences.last()),
    ) {
        let mode = policy.mode.name();
        let differ = differs(&["".into()]).unwrap_or_default();
        let says_differs = (said_of(failure))
            .is_some_and(|(of, rest)| of == policy.mode && rest.starts_with(&differ));
        let recheck = differs(found).map(|why| format!("{mode}: {why}"));
        if says_differs && recheck.as_ref() != Some(failure) {
            find(
                &["failure"],
                match recheck {
                    Some(recheck) => format!(
                        "the failure says \"{failure}\", but the re-check of the evidence says \
                         \"{recheck}\""
                    ),
                    None => format!(
                        "the failure says {mode}'s observations differ from the policy model, \
                         but the re-check of its evidence finds no difference"
                    ),
                },
            );
        }
    }
    match (report.matches_model, &report.failure) {
        (true, Some(_)) => find(
            &["matches_model"],
            "the report says it matched the policy model, and also that it failed".into(),
        ),
        (false, None) => find(
            &["matches_model"],
            "the report says it did not match the policy model, but records no failure: a run \
             that differs says why in \"failure\""
                .into(),
        ),
        _ => {}
    }
    if report.failure.is_none() {
        let first = differences
            .iter()
            .zip(&report.policies)
            .find_map(|(d, p)| d.first().map(|d| format!("{}: {d}", p.mode.name())));
        if let Some(first) = first {
            find(
                &["matches_model"],
                format!(
                    "the report says it matched the policy model, but its own evidence does not: \
                     {first}"
                ),
            );
        }
        let modes = report.inputs.mode.modes();
        if report.policies.len() < modes.len() {
            let ran: Vec<&str> = report.policies.iter().map(|p| p.mode.name()).collect();
            find(
                &["policies"],
                format!(
                    "--mode {} runs {} policies, but the report holds {} ({}) and records no \
                     failure that stopped it",
                    report.inputs.mode.name(),
                    modes.len(),
                    report.policies.len(),
                    if ran.is_empty() {
                        "none".into()
                    } else {
                        ran.join(", ")
                    }
                ),
            );
        }
    }
    Checked {
        verdict: Recheck::of(findings, report.failure.clone()),
        differences,
    }
}

/// The step of `policy`'s sequence under way when its ledger's last event was `seq`, if one
/// was: the release, from the gate's opening until the last answer it collects came, or a
/// probe, from its decision until its answer came (each step waits for its answers, and each
/// answer is placed by the ledger's last seq as it came).
fn in_step(policy: &PolicyReport, seq: u64) -> Option<String> {
    let events = &policy.work_events;
    let answered = |request: Label| {
        (policy.observed.responses.iter())
            .find(|r| r.request == request)
            .map(|r| r.after_event)
    };
    let opened = events
        .iter()
        .find(|e| e.event == Event::GateOpened)
        .map(|e| e.seq);
    // The release collects the held callers' answers, and F1's if it waited for the release.
    let collected = (policy.observed.responses.iter())
        .filter(|r| r.phase == Phase::AfterRelease)
        .filter(|r| matches!(r.request, Label::Slow(_) | Label::F1))
        .map(|r| r.after_event)
        .max();
    if let (Some(opened), Some(last)) = (opened, collected)
        && (opened..last).contains(&seq)
    {
        return Some(format!(
            "the release was under way (the gate opened at seq {opened}, the last answer it \
             collects came after event {last})"
        ));
    }
    [Label::SlowAfter, Label::FastAfter].into_iter().find_map(|probe| {
        let decided = (events.iter())
            .find(|e| e.request == Some(probe) && e.event.is_decision())?
            .seq;
        let answered = answered(probe)?;
        (decided..answered).contains(&seq).then(|| {
            format!("{probe}'s step was under way (decided at seq {decided}, answered after event {answered})")
        })
    })
}

/// The most requests the ledger has on connections at once, and the seq where it first has
/// them: those inside the section (admitted, their work not yet left) and the one it is
/// deciding, each on its own connection.
fn at_once(events: &[WorkEvent]) -> Option<(u64, Vec<Label>)> {
    let mut inside: Vec<Label> = Vec::new();
    let mut most: Option<(u64, Vec<Label>)> = None;
    for e in events {
        let Some(request) = e.request else { continue };
        match e.event {
            Event::Admitted | Event::Refused => {
                let mut now = inside.clone();
                now.push(request);
                if most.as_ref().is_none_or(|(_, m)| now.len() > m.len()) {
                    most = Some((e.seq, now));
                }
                if e.event == Event::Admitted {
                    inside.push(request);
                }
            }
            Event::Finished => inside.retain(|&r| r != request),
            _ => {}
        }
    }
    most
}

/// Where a run stopped, as its failure (`rest`, said of `policy`) names it: unable to start
/// (then it served nothing), closed before a step (the first it did not take), or stalled in
/// one (a failed step ends the sequence).
/// Every step before it was taken, and none after it: a step's requests are sent only in it.
/// Only a classroom closes a run early: the command line runs every step, or stops at one that
/// fails. And no order of the instructor's reaches a run once it closes, so a run stopped
/// before its release has no room gate: the room's gate closes only once the run's own has
/// opened.
fn stopped(
    report: &Report,
    policy: &PolicyReport,
    rest: &str,
    room: Option<&RoomOfRun<'_>>,
    find: &mut impl FnMut(&[&str], String),
) {
    let held = report.inputs.held;
    let plan: Vec<Planned> = Planned::all(held).collect();
    let mode = policy.mode.name();
    let closed = |step: String| Failure::new(Step::Close, None, Cause::ClosedEarly(step));
    let limit = Duration::from_millis(report.runner.safety_timeout_ms);
    let stalled =
        |waiting_for| Failure::new(Step::Close, None, Cause::Stalled { waiting_for, limit });
    let says = |failure: Failure| rest.starts_with(&failure.to_string());
    // Before any step: a run that could not start serves nothing.
    let unstarted = [setup::TOKEN, setup::RUNTIME, setup::BINDING]
        .into_iter()
        .find(|what| rest.strip_prefix(what).is_some_and(|r| r.starts_with(": ")));
    if let Some(what) = unstarted {
        let served = !policy.work_events.is_empty()
            || !policy.observed.responses.is_empty()
            || policy.server.is_some();
        if served {
            find(
                &["failure"],
                format!(
                    "the failure says {mode} could not start ({what}), but it records a server, \
                     work events or responses: a run that cannot start serves nothing"
                ),
            );
        }
        return;
    }
    // What each step waits for, in a stall's words.
    let waits = |step: Planned| match step {
        Planned::Slow(r) => vec![waited::decision(r), waited::refusal(r), waited::unread(r)],
        Planned::Fast => vec![waited::unread(Label::F1), waited::response(Label::F1)],
        Planned::Release => vec![waited::RELEASED.into()],
        Planned::Probe(r) => vec![waited::response(r)],
    };
    // The step it stopped at, and how: before it, in it, or before its runtime could start it.
    let (at, stop) = if says(closed(String::new())) {
        if room.is_none() {
            find(
                &["failure"],
                format!(
                    "the failure says {mode} was closed before its next step, but only a \
                     classroom closes a run early: the command line runs every step, or stops at \
                     one that fails"
                ),
            );
            return;
        }
        let Some(at) = plan.iter().position(|&p| says(closed(p.to_string()))) else {
            find(
                &["failure"],
                format!("the failure names a step that is not in {mode}'s sequence"),
            );
            return;
        };
        (at, Stop::Before)
    } else if says(stalled(waited::HEARTBEAT.into())) || rest.starts_with(waited::HEARTBEAT_STOPPED)
    {
        // Before S1's step sends S1, and only where the front has a runtime of its own.
        let (front, executor) = (report.runner.front, report.executor);
        if !executor.front_runtime(front) {
            find(
                &["failure"],
                format!(
                    "the failure says {mode}'s front runtime ran no heartbeat, but the {} \
                     front{} has no runtime of its own to run one",
                    front.name(),
                    on_executor(executor)
                ),
            );
            return;
        }
        (0, Stop::Unstarted)
    } else {
        let at = (plan.iter()).position(|&p| waits(p).into_iter().any(|w| says(stalled(w))));
        let Some(at) = at else {
            // A stall's limit is the run's safety timeout, which bounds every wait.
            let limit = format!(" within {} s", limit.as_secs_f64());
            if rest.starts_with("stalled: ") && !rest.contains(&limit) {
                find(
                    &["failure"],
                    format!(
                        "the failure says {mode} stalled, but not{limit}: the run's safety \
                         timeout, which bounds every wait"
                    ),
                );
            }
            return;
        };
        (at, Stop::In)
    };
    let observed = &policy.observed;
    let answered = |label: Label| observed.responses.iter().any(|r| r.request == label);
    let seen = |label: Label| {
        answered(label) || (policy.work_events.iter()).any(|e| e.request == Some(label))
    };
    let unanswered = || Label::held(held).find(|&s| !answered(s));
    let gated = || {
        (room
            .into_iter()
            .flat_map(|room| room.gates.iter().map(move |g| (g, room))))
        .any(|(g, room)| (g.run, g.mode) == (room.run, policy.mode))
    };
    let contradiction = plan.iter().enumerate().find_map(|(k, &step)| {
        let which = if k == at { "that step" } else { "a later step" };
        match step {
            _ if k == at && stop == Stop::In => None,
            Planned::Fast if k < at && observed.slow_callers_pending_before_release.is_none() => {
                Some("it records none of F1's step, which comes before it".to_owned())
            }
            Planned::Release if k < at => unanswered()
                .map(|s| format!("{s} has no response, which the release before it collects")),
            Planned::Probe(probe) if k < at && !answered(probe) => Some(format!(
                "{probe} has no response, which its step before it waits for"
            )),
            Planned::Slow(request) | Planned::Probe(request) if k >= at && seen(request) => {
                Some(format!("it records {request}, which {which} sends"))
            }
            Planned::Fast
                if k >= at && (observed.observer_before_fast.is_some() || seen(Label::F1)) =>
            {
                Some(format!("it records F1's step, which {which} takes"))
            }
            Planned::Release if k >= at && gated() => Some(
                "a room gate of it closed, which only the release makes possible: the room's \
                 gate closes once the run's own gate has opened, and no order reaches a run \
                 once it closes"
                    .to_owned(),
            ),
            _ => None,
        }
    });
    if let Some(why) = contradiction {
        let step = plan[at];
        let stop = match stop {
            Stop::Before => {
                format!("was closed before its step \"{step}\", the first it did not take")
            }
            Stop::In => format!("stalled in its step \"{step}\", which ends the sequence"),
            Stop::Unstarted => format!(
                "stopped as its front's runtime ran no heartbeat, before its step \"{step}\""
            ),
        };
        find(
            &["failure"],
            format!("the failure says {mode} {stop}, but {why}"),
        );
    }
}

/// The policy a failure is said of (`"<mode>: …"`), and what it says of it.
fn said_of(failure: &str) -> Option<(Mode, &str)> {
    Mode::ALL.into_iter().find_map(|mode| {
        let rest = failure.strip_prefix(mode.name())?.strip_prefix(": ")?;
        Some((mode, rest))
    })
}

/// How a run stopped at a step of its sequence.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Closed before it (a classroom's run).
    Before,
    /// Stalled in it.
    In,
    /// Before the front's own runtime ran its first tick, which S1's step waits for.
    Unstarted,
}

/// Where `executor` runs, in a sentence's words: " on the lab's usual executor", or the flags
/// that name it (" with --work block").
fn on_executor(executor: Executor) -> String {
    match executor.flags() {
        flags if flags.is_empty() => " on the lab's usual executor".to_owned(),
        flags => format!(" with{flags}"),
    }
}

/// Whether `report`'s runner is the one this version writes for its front and executor (and
/// the scheduler it ran on); `find` is told each field that is not.
fn runner(report: &Report, find: &mut impl FnMut(&[&str], String)) {
    let runner = &report.runner;
    // The safety timeout is the run's own (a library's run may choose another), so the runner
    // is compared with the one written with it.
    let timeout = Duration::from_millis(runner.safety_timeout_ms);
    let wrote = Runner::on(runner.front, report.executor, timeout);
    if runner.server != wrote.server {
        find(
            &["runner", "server"],
            format!(
                "the runner says the {} front ran, but describes another front's server: {}",
                runner.front.name(),
                runner.server
            ),
        );
    }
    for (field, said, written) in [
        ("language", &runner.language, &wrote.language),
        ("client", &runner.client, &wrote.client),
    ] {
        if said != written {
            find(
                &["runner", field],
                format!("the runner's {field} is {said:?}, but this lab writes {written:?}"),
            );
        }
    }
    if runner.runtime != Runner::LAB_RUNTIME {
        find(
            &["runner", "runtime"],
            format!(
                "the runner's runtime is {:?}, but this lab's runs run on {:?}",
                runner.runtime,
                Runner::LAB_RUNTIME
            ),
        );
    }
    // Only another executor than the usual has a front runtime, so `flags` is never empty
    // where it is shown.
    let flags = report.executor.flags();
    match (&runner.front_runtime, &wrote.front_runtime) {
        (None, Some(written)) => find(
            // The runner itself, which names none.
            &["runner"],
            format!(
                "the report's executor is{flags}, but its runner names no runtime of the front's \
                 own; a run with that executor says: {written}"
            ),
        ),
        (Some(said), None) => find(
            &["runner", "front_runtime"],
            format!(
                "the runner says the front ran on a runtime of its own ({said}), but the report's \
                 executor is the lab's usual one"
            ),
        ),
        (Some(said), Some(written)) if said != written => find(
            &["runner", "front_runtime"],
            format!("the runner says {said:?}, but the report's executor{flags} runs: {written}"),
        ),
        _ => {}
    }
}

/// Checks a classroom session as a whole: its runs' shape, its room's gates and requests
/// against the runs' ledgers, and its own verdict.
pub(crate) fn session(session: &SavedSession) -> Vec<Finding> {
    let mut findings = room_requests(session);
    let mut find = |path: &[&str], says: String| {
        findings.push(Finding {
            pointer: pointer(path),
            says,
        })
    };
    // One command line, one front and executor: `classroom --server/--work` apply to every
    // run, and a new run changes only its inputs.
    if let Some(first) = session.runs.first() {
        let shape = |r: &Report| (r.runner.front, r.executor);
        for (i, run) in session.runs.iter().enumerate().skip(1) {
            let timeout = |r: &Report| r.runner.safety_timeout_ms;
            if timeout(run) != timeout(first) {
                find(
                    &["runs", &i.to_string(), "runner", "safety_timeout_ms"],
                    format!(
                        "run {} has a safety timeout of {} ms, but run 1 of {} ms: every run of \
                         a session runs with the session's options",
                        i + 1,
                        timeout(run),
                        timeout(first)
                    ),
                );
            }
            if shape(run) != shape(first) {
                find(
                    &["runs", &i.to_string(), "runner"],
                    format!(
                        "run {} ran with --server {}{}, but run 1 with --server {}{}: every run \
                         of a session runs on the front and executor its command line names",
                        i + 1,
                        run.runner.front.name(),
                        run.executor.flags(),
                        first.runner.front.name(),
                        first.executor.flags()
                    ),
                );
            }
        }
    }
    // A run is reported once a Next was pressed in it, and the first Next opens its first
    // policy, which the run keeps however it ends.
    for (i, run) in session.runs.iter().enumerate() {
        let first = run.inputs.mode.modes().first().copied();
        if run.policies.first().map(|p| p.mode) != first {
            let has = match run.policies.first() {
                Some(p) => format!("begins with the {} policy", p.mode.name()),
                None => "has no policy".into(),
            };
            find(
                &["runs", &i.to_string(), "policies"],
                format!(
                    "run {} {has}, but a run is reported once a Next was pressed in it, and the \
                     first Next opens its first policy ({}), which it keeps",
                    i + 1,
                    first.map_or("none", Mode::name)
                ),
            );
        }
    }
    // The session lists a run's room gates as it closes the run's policies, one after another.
    let place = |run: usize, mode: Mode| {
        let modes = session.runs.get(run).map(|r| r.inputs.mode.modes());
        (run, modes.and_then(|m| m.iter().position(|&m| m == mode)))
    };
    for (i, pair) in session.room_gates.windows(2).enumerate() {
        let [before, gate] = pair else { continue };
        if place(gate.run, gate.mode) < place(before.run, before.mode) {
            find(
                &["room_gates", &(i + 1).to_string()],
                format!(
                    "a room gate of run {}'s {} policy is listed after one of run {}'s {} \
                     policy, which closed after it: the session lists each policy's room gates \
                     as it closes the policy",
                    gate.run + 1,
                    gate.mode.name(),
                    before.run + 1,
                    before.mode.name()
                ),
            );
        }
    }
    // A room gate closes only once the run's own gate has opened, and once the room's last gate
    // of that policy has opened again; then opens after it closed.
    for (i, gate) in session.room_gates.iter().enumerate() {
        let same = |g: &&SavedRoomGate| (g.run, g.mode) == (gate.run, gate.mode);
        let earlier = session.room_gates[..i].iter().filter(same).count();
        if usize::try_from(gate.generation).ok() != Some(earlier + 1) {
            find(
                &["room_gates", &i.to_string(), "generation"],
                format!(
                    "it is generation {}, but it is room gate {} of run {}'s {} policy: a run's \
                     room gates are numbered 1, 2, … in the order they closed",
                    gate.generation,
                    earlier + 1,
                    gate.run + 1,
                    gate.mode.name()
                ),
            );
        }
        let last = session.room_gates[..i].iter().rfind(same);
        if let Some(last) = last
            && last
                .opened_after_event
                .is_none_or(|o| gate.closed_after_event < o)
        {
            find(
                &["room_gates", &i.to_string()],
                "it closed while the room's gate before it was still closed: one room gate at a \
                 time, each closing once the last has opened"
                    .into(),
            );
        }
        let policy = session.runs[gate.run]
            .policies
            .iter()
            .find(|p| p.mode == gate.mode);
        let opened = policy.and_then(|p| {
            (p.work_events.iter())
                .find(|e| e.event == Event::GateOpened)
                .map(|e| e.seq)
        });
        let last = policy
            .and_then(|p| p.work_events.last())
            .map_or(0, |e| e.seq);
        // The instructor's orders run between the sequence's steps, and a run that failed may
        // leave work finishing after its last step.
        let run = &session.runs[gate.run];
        let failed =
            run.failure.is_some() && run.policies.last().map(|p| p.mode) == Some(gate.mode);
        let busy = policy.filter(|_| !failed).and_then(|p| {
            let at = [Some(gate.closed_after_event), gate.opened_after_event];
            at.into_iter()
                .flatten()
                .find_map(|seq| Some((seq, in_step(p, seq)?)))
        });
        let why = match (opened, gate.opened_after_event) {
            _ if policy.is_none() => format!(
                "it names the {} policy of run {}, which has no such policy",
                gate.mode.name(),
                gate.run + 1
            ),
            _ if gate.closed_after_event > last
                || gate.opened_after_event.is_some_and(|o| o > last) =>
            {
                format!("it names events after seq {last}, where its run's ledger ends")
            }
            (None, _) => format!(
                "it closed in run {}'s {} policy, whose own gate never opened: the room's gate \
                 closes only once the run's has opened",
                gate.run + 1,
                gate.mode.name()
            ),
            (Some(seq), _) if gate.closed_after_event < seq => format!(
                "it closed after event {}, before the run's own gate opened at seq {seq}: the \
                 room's gate closes only once the run's has opened",
                gate.closed_after_event
            ),
            _ if let Some((seq, step)) = &busy => format!(
                "it names event {seq}, when {step}: the instructor's orders run between the \
                 sequence's steps"
            ),
            (_, Some(reopened)) if reopened < gate.closed_after_event => format!(
                "it opened after event {reopened}, before it closed after event {}",
                gate.closed_after_event
            ),
            (_, None) => "it never opened, but the session opens the room's gate as it closes \
                          a run, whichever way the run ends"
                .into(),
            _ => continue,
        };
        find(&["room_gates", &i.to_string()], why);
    }
    // A session's own failure is its close's (its page, its server, its journal): a run's is
    // said in the run, of its policy.
    if let Some((mode, _)) = session.failure.as_deref().and_then(said_of) {
        find(
            &["failure"],
            format!(
                "the session's failure is said of the {} policy, but a session fails only as it \
                 closes, for its page, server or journal; a run's failure is the run's own",
                mode.name()
            ),
        );
    }
    // Nor is it told in the words the record tells a run's in ("run 1: …").
    if let Some(failure) = &session.failure
        && let Some((run, _)) = failure
            .strip_prefix("run ")
            .and_then(|r| r.split_once(": "))
        && run.parse::<usize>().is_ok()
    {
        find(
            &["failure"],
            format!(
                "the session's failure is told as run {run}'s, but a session fails only as it \
                 closes, for its page, server or journal; a run's failure is the run's own"
            ),
        );
    }
    if session.runs.is_empty() && session.matches_model {
        find(
            &["matches_model"],
            "the session says it matched the policy model, but it made no run: a session \
             matches only once a run was made"
                .into(),
        );
    }
    // The session's verdict is its runs' and its close's: it did not match only for a reason.
    let claims_all = session.runs.iter().all(|r| r.matches_model);
    if !session.matches_model && session.failure.is_none() && !session.runs.is_empty() && claims_all
    {
        find(
            &["matches_model"],
            "the session says it did not match the policy model, but records no failure, and \
             every run says it matched"
                .into(),
        );
    }
    findings
}

/// Checks the room's requests of a classroom session against the runs' ledgers.
fn room_requests(session: &SavedSession) -> Vec<Finding> {
    let mut findings = Vec::new();
    // The room's requests are numbered as they arrive, and go to the run open then: a later
    // number never reached an earlier run.
    let mut by_number: Vec<(u32, usize, usize)> = (session.room_requests.iter().enumerate())
        .filter_map(|(i, r)| match r.request {
            Label::Room(n, _) => Some((n, r.run, i)),
            _ => None,
        })
        .collect();
    // Where a run's policy comes in its run, for a policy of a run the session has.
    let place = |r: &SavedRoomRequest| {
        let modes = session.runs.get(r.run).map(|run| run.inputs.mode.modes());
        modes.and_then(|m| m.iter().position(|&m| m == r.mode))
    };
    by_number.sort_unstable();
    // Each number the classroom gave is listed, answered or not: the request is listed even
    // when its student gives up.
    let mut numbers: Vec<u32> = by_number.iter().map(|&(n, _, _)| n).collect();
    numbers.dedup();
    if let Some(missing) = (1..).zip(numbers).find_map(|(k, n)| (k < n).then_some(k)) {
        findings.push(Finding {
            pointer: pointer(&["room_requests"]),
            says: format!(
                "no R{missing} is listed, but a later number is: the classroom numbers the room's \
                 requests 1, 2, … and lists each, answered or not"
            ),
        });
    }
    for pair in by_number.windows(2) {
        let [(earlier, run, earlier_at), (later, later_run, i)] = pair else {
            continue;
        };
        if later_run < run {
            findings.push(Finding {
                pointer: pointer(&["room_requests", &i.to_string()]),
                says: format!(
                    "R{later} reached run {}, but R{earlier}, numbered before it, reached run {}: \
                     the room's requests are numbered as they arrive, run after run",
                    later_run + 1,
                    run + 1
                ),
            });
        } else if later_run == run {
            let (first, second) = (
                &session.room_requests[*earlier_at],
                &session.room_requests[*i],
            );
            if place(second) < place(first) {
                findings.push(Finding {
                    pointer: pointer(&["room_requests", &i.to_string()]),
                    says: format!(
                        "R{later} reached run {}'s {} policy, but R{earlier}, numbered before \
                         it, reached its {} policy, which runs after it: the room's requests are \
                         numbered as they arrive, policy after policy",
                        run + 1,
                        second.mode.name(),
                        first.mode.name()
                    ),
                });
            }
        }
    }
    // Each in the ledger of the run and policy it reached, and of no other.
    for (j, run) in session.runs.iter().enumerate() {
        let mut rooms =
            (run.policies.iter()).flat_map(|p| p.work_events.iter().map(move |e| (p.mode, e)));
        let elsewhere = rooms.find_map(|(mode, e)| {
            let request = e.request.filter(|r| r.from_room())?;
            let listed = session
                .room_requests
                .iter()
                .find(|r| r.request == request)?;
            ((listed.run, listed.mode) != (j, mode)).then_some((request, mode, listed))
        });
        if let Some((request, mode, listed)) = elsewhere {
            findings.push(Finding {
                pointer: pointer(&["runs", &j.to_string(), "policies"]),
                says: format!(
                    "{request} is in the ledger of run {} ({}), but it reached run {} ({}): a \
                     room's request reaches one server",
                    j + 1,
                    mode.name(),
                    listed.run + 1,
                    listed.mode.name()
                ),
            });
        }
    }
    // Listed as their answers came, each placed by the ledger's last seq then, with no wait in
    // between (the session runs on one thread): along the list, a policy's seqs never go back.
    let mut placed: BTreeMap<(usize, &str), u64> = BTreeMap::new();
    for (i, room) in session.room_requests.iter().enumerate() {
        let last = placed
            .entry((room.run, room.mode.name()))
            .or_insert(room.after_event);
        if room.after_event < *last {
            findings.push(Finding {
                pointer: pointer(&["room_requests", &i.to_string(), "after_event"]),
                says: format!(
                    "{} is listed after a request of run {}'s {} policy placed after event {}, but \
                     it is placed after event {}: the room's requests are listed as their answers \
                     came",
                    room.request,
                    room.run + 1,
                    room.mode.name(),
                    *last,
                    room.after_event
                ),
            });
        }
        *last = (*last).max(room.after_event);
    }
    let mut seen = BTreeSet::new();
    // Each policy's decisions by request, read once for all the room's requests.
    let mut decisions: BTreeMap<(usize, &str), BTreeMap<Label, &WorkEvent>> = BTreeMap::new();
    for (i, room) in session.room_requests.iter().enumerate() {
        let mut find = |says: String| {
            findings.push(Finding {
                pointer: pointer(&["room_requests", &i.to_string()]),
                says,
            });
        };
        let request = room.request;
        if !seen.insert(request) {
            find(format!(
                "{request} is listed twice: the classroom numbers each request of the room once"
            ));
            continue;
        }
        let run = &session.runs[room.run];
        let Some(policy) = run.policies.iter().find(|p| p.mode == room.mode) else {
            find(format!(
                "{request} reached the {} policy of runs[{}], which has no such policy",
                room.mode.name(),
                room.run
            ));
            continue;
        };
        let decided = decisions
            .entry((room.run, room.mode.name()))
            .or_insert_with(|| {
                let events = policy.work_events.iter().rev();
                let events = events.filter(|e| e.event.is_decision());
                // Reversed, so that a request's first decision is the one kept.
                events.filter_map(|e| Some((e.request?, e))).collect()
            })
            .get(&request)
            .copied();
        let last = policy.work_events.last().map_or(0, |e| e.seq);
        match (room.status, decided) {
            (Some(_), _) if room.error.is_some() => find(format!(
                "{request} has both an answer and an error: the classroom lists one or the other"
            )),
            // Listed when its student gave up or its run closed, at the ledger's last seq then.
            (None, _) if room.error.is_some() && room.after_event > last => find(format!(
                "{request} is listed without an answer after event {}, but the ledger of runs[{}] \
                 ({}) ends at seq {last}",
                room.after_event,
                room.run,
                room.mode.name()
            )),
            // Its student gave up, or the run's client said why no answer came, naming it.
            (None, _) if let Some(error) = &room.error => {
                let words = error == GAVE_UP || error.starts_with(&format!("{request}: "));
                if room.body.is_some() {
                    find(format!(
                        "{request} is listed with a body but no answer: the classroom lists a \
                         body only with the status it came with"
                    ));
                } else if !words {
                    find(format!(
                        "{request} is listed without an answer, for a reason no classroom gives: \
                         {error:?}; its student gave up, or its request failed, in the words of \
                         the run's client, which name it"
                    ));
                }
            }
            (None, _) => find(format!("{request} has neither an answer nor an error")),
            (Some(status), None) => find(format!(
                "{request}'s evidence says {status}, but the ledger of runs[{}] ({}) shows no \
                 admission decision for {request}",
                room.run,
                room.mode.name()
            )),
            (Some(status), Some(event)) => {
                let body = room.body.as_ref().unwrap_or(&Value::Null);
                if let Some(says) = answer_differs(request, status, body, event, room.route) {
                    find(says);
                }
                // Answered once its work left the section (or once refused), within the run.
                let events = &policy.work_events;
                let left = events
                    .iter()
                    .find(|e| e.request == Some(request) && e.event == Event::Finished);
                let gate = policy.final_state.gate;
                let left_as = left.map(|e| e.cancelled);
                if let Some(says) = abandoned_differs(request, body, room.mode, gate, left_as) {
                    find(says);
                }
                if let Some(left) = left.filter(|e| e.cancelled && status == 200) {
                    find(answered_though_cancelled(request, left.seq));
                }
                let earliest = left.unwrap_or(event).seq;
                if !(earliest..=last).contains(&room.after_event) {
                    find(format!(
                        "{request} is answered after event {}, but the ledger of runs[{}] ({}) \
                         lets it be answered only from seq {earliest}, when its work {}, to its \
                         last event, seq {last}",
                        room.after_event,
                        room.run,
                        room.mode.name(),
                        if left.is_some() {
                            "left the section"
                        } else {
                            "was decided"
                        },
                    ));
                }
            }
        }
    }
    findings
}

/// Why an answer that `request`'s work was abandoned cannot be, if it cannot: only the run's own
/// gate is ever abandoned (the room's are opened), once a failed run closes at a gate that never
/// opened, and its held work then leaves cancelled. `left_cancelled`: how its work left, if it
/// did.
fn abandoned_differs(
    request: Label,
    body: &Value,
    mode: Mode,
    gate: GateState,
    left_cancelled: Option<bool>,
) -> Option<String> {
    if body["error"] != "work_abandoned" {
        return None;
    }
    let mode = mode.name();
    if gate != GateState::Abandoned {
        return Some(format!(
            "{request} is answered that its work was abandoned, but the {mode} policy's gate was \
             not abandoned: only a failed run's close abandons work, at a gate that never opened"
        ));
    }
    (left_cancelled == Some(false)).then(|| {
        format!(
            "{request} is answered that its work was abandoned, but its work left the section \
             done, not cancelled: abandoned work leaves cancelled"
        )
    })
}

/// What a 200 for work that was cancelled at `seq` is.
fn answered_though_cancelled(request: Label, seq: u64) -> String {
    format!(
        "{request} was answered 200, but its work was cancelled (seq {seq}): work that is dropped \
         sends no answer"
    )
}

/// The step of the sequence `request` is sent in, and the evidence the lab takes as that step
/// begins, if `observed` has none of it: the run stopped before it. The snapshot before F1 is
/// taken as F1 is sent; the slow callers still waiting are noted as F1's step ends, before the
/// release and the probes after it.
fn unreached(observed: &Observed, request: Option<Label>) -> Option<(&'static str, &'static str)> {
    const F1: (&str, &str) = ("the lab sent F1", "snapshot taken as the lab sends F1");
    const RELEASE: (&str, &str) = (
        "the release",
        "slow callers noted as still waiting, which ends F1's step",
    );
    match request {
        Some(Label::F1) if observed.observer_before_fast.is_none() => Some(F1),
        Some(Label::SlowAfter | Label::FastAfter)
            if observed.slow_callers_pending_before_release.is_none() =>
        {
            Some(RELEASE)
        }
        // Any response after the release (`None`: not a request's own step).
        None if observed.slow_callers_pending_before_release.is_none() => Some(RELEASE),
        _ => None,
    }
}

/// How `status` and `body` differ from what the lab's front answers `request` after the
/// ledger's decision `event` ([`server::answer`], both fronts' reply), if they do.
fn answer_differs(
    request: Label,
    status: u16,
    body: &Value,
    event: &WorkEvent,
    route: Route,
) -> Option<String> {
    let pool = event.pool;
    let kind = route.path().trim_start_matches('/');
    let verdict = match (event.event, status) {
        (Event::Admitted, 200) => Verdict::Done(pool),
        // A refusal by a pool of this process: its holders are in the ledger, not the body.
        (Event::Refused, 503) => Verdict::Refused(Refusal {
            request,
            pool,
            held_by: Vec::new(),
            holders: Vec::new(),
        }),
        // A failed run gives up on the work it holds, and says so.
        (Event::Admitted, 503) if body["error"] == "work_abandoned" => Verdict::Abandoned(pool),
        (Event::Refused, 200) => {
            return Some(format!(
                "{request}'s evidence says 200 but the ledger shows no {kind} admission: the \
                 {pool} pool refused {request} at seq {}",
                event.seq
            ));
        }
        (Event::Admitted, 503) => {
            return Some(format!(
                "{request}'s evidence says 503 but the ledger shows the {pool} pool admitted \
                 {request} at seq {}",
                event.seq
            ));
        }
        _ => {
            return Some(format!(
                "{request}'s evidence says HTTP {status}, which the lab's front never answers a \
                 request the ledger {}",
                event.event.name()
            ));
        }
    };
    let expected = server::answer(request, verdict).body;
    (*body != expected).then(|| {
        format!(
            "{request}'s response is {status}, but its body {body} is not the one the lab's front \
             sends with it: {expected}"
        )
    })
}

/// Words for what a snapshot, the observer's or the replay's, shows.
fn showing(state: &Snapshot) -> String {
    format!(
        "held at the gate {}, refused {}, permits taken {}",
        labels(&state.held_at_gate),
        labels(&state.refused),
        counts(&state.active_work)
    )
}

/// A decision the ledger recorded.
#[derive(Clone, Copy, Debug)]
struct Decided {
    seq: u64,
    index: usize,
    decision: Decision,
}

/// What the replay of a policy's ledger leaves for the other checks.
struct Replayed<'a> {
    /// The events, each refusal with the requests that held its pool then.
    events: Vec<WorkEvent>,
    /// Each request's first decision.
    decided: BTreeMap<Label, Decided>,
    /// Each request's work leaving the section: its `seq`, and whether it was cancelled.
    finished: BTreeMap<Label, (u64, bool)>,
    /// The `seq` of the gate's first opening.
    gate: Option<u64>,
    /// The state after the last event.
    end: Snapshot,
    /// The snapshots, and whether the ledger showed each at a moment of its step.
    watch: Vec<Watch<'a>>,
}

/// A snapshot of the observer's, watched for along the replay between two positions.
struct Watch<'a> {
    name: &'static str,
    when: &'static str,
    snapshot: &'a Snapshot,
    from: usize,
    to: usize,
    /// The ledger showed it at a position in the window.
    seen: bool,
    /// Whether the refusals so far equal the snapshot's, for the last length compared: they
    /// only grow, so one comparison serves every position at that length.
    refused: Option<(usize, bool)>,
    /// The state at the window's end, for the message.
    last: Option<Snapshot>,
    /// From the first position that shows the snapshot to the window's end, the ledger's held
    /// work and taken permits at each: what a count taken after the snapshot may see.
    since: Vec<Position>,
}

/// The ledger's held work and taken permits at one position.
#[derive(Clone, Copy)]
struct Position {
    held: usize,
    taken: usize,
}

impl Watch<'_> {
    /// Looks at `state`, the ledger after `k` events.
    fn look(&mut self, k: usize, state: &Snapshot) {
        if k < self.from || k > self.to {
            return;
        }
        if k == self.to {
            self.last = Some(state.clone());
        }
        self.seen = self.seen || self.shows(state);
        if self.seen {
            self.since.push(Position {
                held: state.held_at_gate.len(),
                taken: state.active_work.values().sum(),
            });
        }
    }

    /// Whether `state` is what the snapshot shows.
    fn shows(&mut self, state: &Snapshot) -> bool {
        if state.active_work != self.snapshot.active_work
            || state.held_at_gate != self.snapshot.held_at_gate
            || state.refused.len() != self.snapshot.refused.len()
        {
            return false;
        }
        match self.refused {
            Some((len, same)) if len == state.refused.len() => same,
            _ => {
                let same = state.refused == self.snapshot.refused;
                self.refused = Some((state.refused.len(), same));
                same
            }
        }
    }
}

/// The check of one policy of a report.
struct PolicyCheck<'a> {
    report: &'a Report,
    file: &'a PolicyReport,
    policy: Policy,
    room: Option<&'a RoomOfRun<'a>>,
    /// Where the policy is in the file.
    base: String,
    /// The run failed in this policy: steps after the failure are missing, not contradicted.
    cut_short: bool,
    findings: Vec<Finding>,
    /// Findings left out beyond [`MAX_FINDINGS`].
    dropped: usize,
    differences: Vec<String>,
}

/// The most findings listed for one policy.
const MAX_FINDINGS: usize = 40;

impl<'a> PolicyCheck<'a> {
    fn find(&mut self, path: &[&str], says: String) {
        // A report edited at its root contradicts itself everywhere after; the first ones say
        // what a reader needs.
        if self.findings.len() == MAX_FINDINGS {
            self.dropped += 1;
            return;
        }
        let says = format!("{}: {says}", self.policy.mode.name());
        self.findings.push(Finding {
            pointer: format!("{}{}", self.base, pointer(path)),
            says,
        });
    }

    /// The route `request` was sent to: its own, or for a room request the one the classroom
    /// report lists.
    fn route(&self, request: Label) -> Option<Route> {
        match request {
            Label::Room(..) => self.room?.routes.get(&request).copied(),
            _ => Some(request.route()),
        }
    }

    /// The sequence takes its evidence in order ([`unreached`]). A run stopped before a step has
    /// none of what the step makes: no F1 before the snapshot before F1, no response after the
    /// release and no probe before the slow callers still waiting are noted.
    fn reached(&mut self) {
        let file = self.file;
        let observed = &file.observed;
        // F1's step writes these in pairs, with nothing awaited in between: both, or neither.
        let f1_answered = (observed.responses.iter())
            .any(|r| r.request == Label::F1 && r.phase == Phase::BeforeRelease);
        let pairs: [[(&str, &[&str], bool); 2]; 3] = [
            [
                (
                    "observer_before_fast",
                    &["observer_before_fast"],
                    observed.observer_before_fast.is_some(),
                ),
                (
                    "resources.before_fast",
                    &["resources", "before_fast"],
                    file.resources.before_fast.is_some(),
                ),
            ],
            [
                (
                    "observer_after_fast_before_release",
                    &["observer_after_fast_before_release"],
                    observed.observer_after_fast_before_release.is_some(),
                ),
                (
                    "slow_callers_pending_before_release",
                    &["slow_callers_pending_before_release"],
                    observed.slow_callers_pending_before_release.is_some(),
                ),
            ],
            [
                (
                    "fast_response_before_release",
                    &["fast_response_before_release"],
                    observed.fast_response_before_release.is_some(),
                ),
                ("F1's response before release", &["responses"], f1_answered),
            ],
        ];
        for [one, other] in pairs {
            if one.2 != other.2 {
                let (there, missing) = if one.2 { (one, other) } else { (other, one) };
                self.find(
                    there.1,
                    format!(
                        "the report records {} but not {}: F1's step writes both at one moment",
                        there.0, missing.0
                    ),
                );
            }
        }
        let release = unreached(&file.observed, None);
        for (i, r) in file.observed.responses.iter().enumerate() {
            let after_release = release.filter(|_| r.phase == Phase::AfterRelease);
            let unreached = unreached(&file.observed, Some(r.request)).or(after_release);
            if let Some((step, missing)) = unreached {
                let request = r.request;
                self.find(&["responses", &i.to_string()], format!("{request} is answered, but the run stopped before {step}: it records no {missing}"));
            }
        }
        for (i, e) in file.work_events.iter().enumerate() {
            if let (Some(request), Some((step, missing))) =
                (e.request, unreached(&file.observed, e.request))
            {
                let (event, seq) = (e.event.name(), e.seq);
                self.find(&["work_events", &i.to_string()], format!("{request} is {event} at seq {seq}, but the run stopped before {step}: it records no {missing}"));
            }
        }
    }

    fn run(&mut self) {
        let policy = self.policy;
        let file = self.file;
        let capacities = policy.capacities();
        if file.pool_capacities != capacities {
            self.find(
                &["pool_capacities"],
                format!(
                    "its pools hold {}, but {} with {} slots has {}",
                    counts(&file.pool_capacities),
                    policy.mode.name(),
                    policy.slots,
                    counts(&capacities)
                ),
            );
        }
        // The pools a run writes are its policy's: a count for any other is made up.
        let observed = &file.observed;
        let by_pool = |s: &'a Option<Snapshot>| s.as_ref().map(|s| &s.active_work);
        let maps = [
            (
                ["final_state", "active_work"].as_slice(),
                Some(&file.final_state.active_work),
            ),
            (
                &["final_state", "available_permits"],
                Some(&file.final_state.available_permits),
            ),
            (&["peak_active_work"], Some(&file.peak_active_work)),
            (
                &["observer_before_fast", "active_work"],
                by_pool(&observed.observer_before_fast),
            ),
            (
                &["observer_after_fast_before_release", "active_work"],
                by_pool(&observed.observer_after_fast_before_release),
            ),
        ];
        for (path, map) in maps {
            let mut pools = map.into_iter().flat_map(BTreeMap::keys);
            if let Some(other) = pools.find(|pool| !capacities.contains_key(pool)) {
                let mode = policy.mode.name();
                self.find(
                    path,
                    format!("it counts a {other} pool, which {mode} does not have"),
                );
            }
        }
        for route in [Route::Slow, Route::Fast] {
            let pool = policy.pool_for(route);
            if file.route_pools.get(&route) != Some(&pool) {
                self.find(
                    &["route_pools", route.path()],
                    format!(
                        "{route} draws from the {pool} pool in {}",
                        policy.mode.name()
                    ),
                );
            }
        }
        self.reached();
        if let Some(server) = &file.server {
            let address = server.address;
            if address.ip() != std::net::Ipv4Addr::LOCALHOST || address.port() == 0 {
                self.find(
                    &["server", "address"],
                    format!(
                        "the server listened on {address}, but the lab binds 127.0.0.1 only, on \
                         the port the OS gives it"
                    ),
                );
            }
            let handlers = file.resources.before_fast.map(|r| r.connection_handlers);
            if let Some(handlers) = handlers.filter(|&h| server.connections_accepted < h as u64) {
                self.find(
                    &["server", "connections_accepted"],
                    format!(
                        "the server accepted {} connections, fewer than the {handlers} \
                         connection handlers alive before F1",
                        server.connections_accepted
                    ),
                );
            }
            // While F1 is sent, each slow caller still waiting keeps a connection of its own,
            // and F1's is another: the server accepts every one of them, at the latest once the
            // gate opens.
            let pending = file.observed.slow_callers_pending_before_release.as_ref();
            let f1_sent = file.observed.observer_after_fast_before_release.is_some();
            // (A run that failed may close before it accepts those it had not yet read.)
            let least = pending.filter(|_| f1_sent && !self.cut_short);
            let least = least.map(|p| p.len() as u64 + 1);
            if let Some(least) = least.filter(|&l| server.connections_accepted < l) {
                self.find(
                    &["server", "connections_accepted"],
                    format!(
                        "the server accepted {} connections, but {} slow callers were still \
                         waiting, each on its own connection, when F1 was sent on another: at \
                         least {least}",
                        server.connections_accepted,
                        least - 1
                    ),
                );
            } else if let Some(least) = least.filter(|&l| {
                server.foreign_requests_refused > 0 && server.connections_accepted == l
            }) {
                // The lab's callers send the run's token on every request of their connections.
                self.find(
                    &["server", "foreign_requests_refused"],
                    format!(
                        "the server refused {} requests without the run's token, but it accepted \
                         only {least} connections, as many as the lab's own callers had open \
                         when F1 was sent, and those send the token on every request: a foreign \
                         request comes on a connection of its own",
                        server.foreign_requests_refused
                    ),
                );
            }
            // A connection carries one request at a time: each request decided while others
            // are inside the section came on a connection of its own, the lab's client's (the
            // room's requests go out on it too), which sends the run's token on each.
            let said = least.filter(|&l| server.connections_accepted < l).is_some();
            if let Some((seq, at_once)) = at_once(&file.work_events) {
                let (accepted, lab) = (server.connections_accepted, at_once.len() as u64);
                if accepted < lab && !said {
                    self.find(
                        &["server", "connections_accepted"],
                        format!(
                            "the server accepted {accepted} connections, but at seq {seq} {} are \
                             on connections at once: a connection carries one request at a time",
                            labels(&at_once)
                        ),
                    );
                } else if accepted == lab
                    && server.foreign_requests_refused > 0
                    && least != Some(accepted)
                {
                    self.find(
                        &["server", "foreign_requests_refused"],
                        format!(
                            "the server refused {} requests without the run's token, but it \
                             accepted only {accepted} connections, and at seq {seq} {} are on \
                             that many at once, the lab's client's, which sends the token on \
                             every request: a foreign request comes on a connection of its own",
                            server.foreign_requests_refused,
                            labels(&at_once)
                        ),
                    );
                }
            }
            let responses = file.observed.responses.len();
            if server.connections_accepted == 0 && responses > 0 {
                self.find(
                    &["server", "connections_accepted"],
                    format!(
                        "the server accepted no connection, yet {responses} responses came from it"
                    ),
                );
            }
        }

        self.resources();

        // The close joins every caller it started before the report is assembled.
        if !file.client_threads_stopped {
            self.find(
                &["client_threads_stopped"],
                "the report says some of the lab's callers were not joined, but the run's close \
                 joins every caller it started before the report is written"
                    .into(),
            );
        }
        // Tasks are aborted only when a run fails.
        let aborted = [
            (&["client_tasks_aborted"][..], file.client_tasks_aborted),
            (
                &["server", "connection_tasks_aborted"],
                file.server
                    .as_ref()
                    .map_or(0, |s| s.connection_tasks_aborted),
            ),
        ];
        for (path, count) in aborted {
            if count > 0 && self.report.failure.is_none() {
                self.find(
                    path,
                    format!("{} is {count}, yet the report records no failure: tasks are aborted only when a run fails", path.join("/")),
                );
            }
        }
        // A connection task serves one accepted connection.
        if let Some(server) = &file.server
            && server.connection_tasks_aborted > server.connections_accepted
        {
            self.find(
                &["server", "connection_tasks_aborted"],
                format!(
                    "{} connection tasks were aborted, but the server accepted {} connections, one \
                     task each",
                    server.connection_tasks_aborted, server.connections_accepted
                ),
            );
        }
        // The callers are the slow requests' (and F1's, where it waits for release); one that
        // was answered was joined, not aborted.
        let answered = (file.observed.responses.iter())
            .filter(|r| matches!(r.request, Label::Slow(_) | Label::F1))
            .count() as u64;
        let callers = self.report.inputs.held.get() as u64 + 1;
        let abortable = callers.saturating_sub(answered);
        if file.client_tasks_aborted > abortable {
            self.find(
                &["client_tasks_aborted"],
                format!(
                    "client_tasks_aborted is {}, but the run starts at most {callers} callers \
                     (each slow request's, and F1's where it waits for the release), and {answered} \
                     of them were answered: at most {abortable} could be aborted",
                    file.client_tasks_aborted
                ),
            );
        }

        let Some(replayed) = self.replay() else {
            return;
        };
        // The evidence, rebuilt from the file alone: the replayed events, each refusal with its
        // holders, and their audit, from the attempts the section counted.
        let attempts = file.ledger.iter().map(|(&p, l)| (p, l.attempts)).collect();
        let evidence = Evidence {
            ledger: audit::audit(&replayed.events, &attempts, &capacities),
            work_events: replayed.events.clone(),
            observed: file.observed.clone(),
            final_state: file.final_state.clone(),
            client_threads_stopped: file.client_threads_stopped,
            client_tasks_aborted: file.client_tasks_aborted,
            resources: file.resources,
            server: file.server.clone(),
        };
        self.admissions(&evidence);
        self.ledger(&evidence.ledger);
        self.responses(&replayed);
        self.snapshots(&replayed);
        self.counted_before_fast(&replayed);
        self.watched(&replayed);
        self.sent_in_order(&replayed);
        self.final_state(&replayed.end, replayed.gate);

        // The model's check of that evidence.
        let held = self.report.inputs.held;
        // The model of the front and executor the report says ran: slow work that blocks its
        // thread leaves later requests unread until release (`model::expect_on`).
        let shape = (self.report.runner.front, self.report.executor);
        let expected = model::expect_on(policy, held, shape);
        self.differences = model::check(policy, &expected, &evidence);
        if file.model.expected != expected {
            self.find(
                &["model", "expected"],
                format!(
                    "the model block's expectations are not the policy model's for --slots {} \
                     --held {}",
                    policy.slots, held
                ),
            );
        }
        let stored = &file.model;
        let listed = !stored.mismatches.is_empty();
        let says = match (stored.matches, listed, self.differences.first()) {
            (true, true, _) => {
                "the model block says the run matched, and lists differences too".into()
            }
            (false, false, _) => {
                "the model block says the run did not match, but lists no difference".into()
            }
            (true, false, Some(first)) => {
                format!("the model block says the run matched, but its evidence does not: {first}")
            }
            (false, true, None) => {
                "the model block lists differences from the model, but its evidence shows none"
                    .into()
            }
            // The report lists exactly the model's check of its own evidence.
            _ if stored.mismatches != self.differences => {
                let says = format!(
                    "model.mismatches lists {} differences, but the model's check of this \
                     evidence finds {}: the report lists exactly those",
                    stored.mismatches.len(),
                    self.differences.len()
                );
                self.find(&["model", "mismatches"], says);
                return;
            }
            _ => return,
        };
        self.find(&["model", "matches"], says);
    }

    /// The process's counts before F1 and after the run: what the fronts and the sequence make
    /// of them in every run.
    fn resources(&mut self) {
        let file = self.file;
        let counts = [
            ("before_fast", file.resources.before_fast),
            ("after_run", file.resources.after_run),
        ];
        // Counted from inside the process, by one of its threads.
        for (when, count) in counts {
            if count.is_some_and(|c| c.os_threads == Some(0)) {
                self.find(
                    &["resources", when, "os_threads"],
                    format!(
                        "resources.{when} counts 0 OS threads, but the lab counts them from \
                         inside its process, on one of them"
                    ),
                );
            }
        }
        let counted = counts.map(|(when, count)| (when, count.is_some()));
        if let Some((when, _)) = counted
            .iter()
            .find(|(_, counted)| !counted && !self.cut_short)
        {
            self.find(
                &["resources"],
                format!(
                    "resources.{when} is missing: a run that did not fail counts the process's \
                     resources before F1 and after it closed"
                ),
            );
        }
        if let Some(before) = file.resources.before_fast {
            let held = file.observed.observer_before_fast.as_ref();
            let held = held.map(|o| o.held_at_gate.len());
            // Counted right after the observer's snapshot, both before F1 is sent. In a
            // classroom the room's requests may change the held work between the two: checked
            // against the ledger's moments in between, once replayed (`counted_before_fast`).
            if let Some(held) = held.filter(|&h| self.room.is_none() && h != before.held_at_gate) {
                self.find(
                    &["resources", "before_fast", "held_at_gate"],
                    format!(
                        "resources.before_fast counts {} requests held at the gate, but \
                         observer_before_fast, taken at the same moment, holds {held}",
                        before.held_at_gate
                    ),
                );
            }
            // Held work is inside the section, each holding a permit of the pool /slow draws
            // from.
            let slow_pool = self.policy.pool_for(Route::Slow);
            let permits = self.policy.capacity(slow_pool);
            if before.held_at_gate > permits {
                self.find(
                    &["resources", "before_fast", "held_at_gate"],
                    format!(
                        "resources.before_fast counts {} requests held at the gate, but each \
                         holds one of the {slow_pool} pool's {permits} permits",
                        before.held_at_gate
                    ),
                );
            }
            if self.room.is_none() && before.connection_handlers < before.held_at_gate {
                self.find(
                    &["resources", "before_fast", "connection_handlers"],
                    format!(
                        "resources.before_fast counts {} connection handlers, fewer than the {} \
                         requests held at the gate, each inside one",
                        before.connection_handlers, before.held_at_gate
                    ),
                );
            }
            // Each admitted request's permit stays with its connection's handler until its work
            // leaves, held or queued for a thread. (In a classroom, see `counted_before_fast`.)
            let taken = (file.observed.observer_before_fast.as_ref())
                .filter(|_| self.room.is_none())
                .map(|o| o.active_work.values().sum::<usize>());
            // A refused caller read its 503 and left its connection open for the next caller,
            // who reuses it: one more handler.
            let refused = (file.observed.observer_before_fast.as_ref())
                .is_some_and(|o| !o.refused.is_empty());
            let kept = usize::from(refused && !self.cut_short);
            let taken = taken.map(|t| t + kept);
            if let Some(taken) = taken.filter(|&t| before.connection_handlers < t) {
                self.find(
                    &["resources", "before_fast", "connection_handlers"],
                    format!(
                        "resources.before_fast counts {} connection handlers, but \
                         observer_before_fast, taken just before, has {} permits taken, each \
                         kept by the handler of its request's connection until its work leaves{}",
                        before.connection_handlers,
                        taken - kept,
                        if kept > 0 {
                            ", and a refused caller's connection left open for the next caller"
                        } else {
                            ""
                        }
                    ),
                );
            }
            let (front, executor) = (self.report.runner.front, self.report.executor);
            let (least, whose) = least_threads(front, executor, before);
            // (A run that failed may have lost a front thread already.)
            let threads = before.os_threads.filter(|_| !self.cut_short);
            if let Some(threads) = threads.filter(|&t| t < least) {
                self.find(
                    &["resources", "before_fast", "os_threads"],
                    format!(
                        "resources.before_fast counts {threads} OS threads, but the sequence's \
                         thread{whose} make at least {least}"
                    ),
                );
            }
        }
        let stopped = file
            .server
            .as_ref()
            .is_some_and(|s| s.connection_tasks_stopped);
        if let Some(after) = file
            .resources
            .after_run
            .filter(|_| stopped && !self.cut_short)
        {
            if after.os_threads == Some(0) {
                self.find(
                    &["resources", "after_run", "os_threads"],
                    "resources.after_run counts no OS thread, but the thread counting them is one"
                        .into(),
                );
            }
            for (field, left) in [
                ("connection_handlers", after.connection_handlers),
                ("held_at_gate", after.held_at_gate),
            ] {
                if left > 0 {
                    self.find(
                        &["resources", "after_run", field],
                        format!(
                            "resources.after_run counts {left} {}, yet every connection task \
                             stopped and the run records no failure",
                            field.replace('_', " ")
                        ),
                    );
                }
            }
        }
    }

    /// What the front's runtime was seen doing, read against the ledger: the heartbeat read in
    /// the sequence's order (at the start, after each slow request held, after each request
    /// seen unread or queued, just before the gate opened), never going back; and each request
    /// seen unread before any decision about it, and before the release.
    fn watched(&mut self, replayed: &Replayed<'_>) {
        let (front, executor) = (self.report.runner.front, self.report.executor);
        let Some(watched) = &self.file.observed.executor else {
            // A run whose front has a runtime of its own watches it from the moment it opens:
            // S1's step waits for the heartbeat's first tick.
            let opened =
                !self.file.work_events.is_empty() || !self.file.observed.responses.is_empty();
            if opened && executor.front_runtime(front) {
                self.find(
                    &[],
                    format!(
                        "the report's executor is{}, whose front runs on a runtime of its own, \
                         but it records no evidence of that runtime (\"executor\"): a run on one \
                         reads its heartbeat from the start",
                        executor.flags()
                    ),
                );
            }
            return;
        };
        if !executor.front_runtime(front) {
            let on = on_executor(executor);
            self.find(
                &["executor"],
                format!(
                    "the report watches the front's own runtime, but the {} front{on} runs on \
                     none of its own: there is no heartbeat to read",
                    front.name(),
                ),
            );
            return;
        }
        let beats = &watched.heartbeat;
        // The start and the release are the run's; every other reading follows a request.
        if let Some(i) = beats.iter().position(|b| {
            let run_wide = matches!(b.moment, Moment::Start | Moment::Release);
            run_wide == b.request.is_some()
        }) {
            let beat = &beats[i];
            let moment = beat.moment.name();
            let says = match beat.request {
                Some(request) => format!(
                    "the {moment} reading names {request}, but it is the run's, read for no request"
                ),
                None => format!("the {moment} reading names no request, but it is read after one"),
            };
            self.find(&["executor", "heartbeat", &i.to_string()], says);
        }
        if let Some(i) = (1..beats.len()).find(|&i| {
            beats[i].after_event < beats[i - 1].after_event || beats[i].ticks < beats[i - 1].ticks
        }) {
            let (was, now) = (&beats[i - 1], &beats[i]);
            self.find(
                &["executor", "heartbeat", &i.to_string()],
                format!(
                    "the heartbeat goes back: read after event {} with {} ticks, after a reading \
                     after event {} with {}",
                    now.after_event, now.ticks, was.after_event, was.ticks
                ),
            );
        }
        // A run cut short stops reading where it failed: its readings begin the full run's.
        let moments: Vec<Moment> = beats.iter().map(|b| b.moment).collect();
        let once = |m: Moment| moments.iter().filter(|&&n| n == m).count() == 1;
        let framed = moments.first() == Some(&Moment::Start)
            && moments.last() == Some(&Moment::Release)
            && once(Moment::Start)
            && once(Moment::Release);
        if !framed && !self.cut_short {
            self.find(
                &["executor", "heartbeat"],
                format!(
                    "the heartbeat is read once at the start and once just before the gate \
                     opens, first and last; its readings here are: {}",
                    moments
                        .iter()
                        .map(|m| m.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        // The release's reading is taken as the release begins: after F1's answer, where F1
        // was answered before it.
        let release = beats.iter().rposition(|b| b.moment == Moment::Release);
        let f1 = (self.file.observed.responses.iter())
            .find(|r| r.request == Label::F1 && r.phase == Phase::BeforeRelease);
        if let (Some(i), Some(f1)) = (release, f1)
            && beats[i].after_event < f1.after_event
        {
            self.find(
                &["executor", "heartbeat", &i.to_string()],
                format!(
                    "the release's reading is taken after event {}, but F1's answer, which comes \
                     before the release, after event {}",
                    beats[i].after_event, f1.after_event
                ),
            );
        }
        let gate = replayed.gate.unwrap_or(u64::MAX);
        let held: Vec<(Label, u64)> = (replayed.events.iter())
            .filter(|e| e.event == Event::Held && e.seq < gate)
            .filter_map(|e| e.request.filter(|r| !r.from_room()).map(|r| (r, e.seq)))
            .collect();
        let read = |moment: Moment| -> Vec<(Label, u64)> {
            (beats.iter().filter(|b| b.moment == moment))
                .filter_map(|b| b.request.map(|r| (r, b.after_event)))
                .collect()
        };
        let names =
            |seen: &[(Label, u64)]| -> Vec<Label> { seen.iter().map(|&(r, _)| r).collect() };
        let read_held = read(Moment::Held);
        let (read_names, held_names) = (names(&read_held), names(&held));
        let agrees = match self.cut_short {
            true => held_names.starts_with(&read_names),
            false => read_names == held_names,
        };
        if !agrees {
            self.find(
                &["executor", "heartbeat"],
                format!(
                    "the heartbeat is read after each slow request is held, in order: the ledger \
                     holds {} before the release, the readings name {}",
                    labels(&names(&held)),
                    labels(&names(&read_held))
                ),
            );
        } else if let Some(((request, at), (_, seq))) = read_held
            .iter()
            .zip(&held)
            .find(|((_, at), (_, seq))| at < seq)
        {
            self.find(
                &["executor", "heartbeat"],
                format!(
                    "the heartbeat is read after {request} is held, after event {at}, but the \
                     ledger holds {request} only at seq {seq}"
                ),
            );
        }
        // One thread takes the work queued for it first in, first out, and the lab sends each
        // request only once the one before it is seen queued.
        if let (Lane::Own(1, _), false) = (executor.lane(front), self.cut_short) {
            let started: Vec<Label> = (replayed.events.iter())
                .filter(|e| e.event == Event::Started)
                .filter_map(|e| e.request)
                .filter(|r| watched.queued.contains(r))
                .collect();
            let queued = watched.queued.iter().copied();
            let in_order: Vec<Label> = queued.filter(|r| started.contains(r)).collect();
            if started != in_order {
                self.find(
                    &["executor", "queued"],
                    format!(
                        "{} were seen queued for the slow work's one thread in that order, but \
                         the ledger starts them as {}: one thread takes queued work first in, \
                         first out",
                        labels(&in_order),
                        labels(&started)
                    ),
                );
            }
        }
        let unread: Vec<Label> = watched.unread.iter().map(|u| u.request).collect();
        let (read_unread, read_queued) =
            (names(&read(Moment::Unread)), names(&read(Moment::Queued)));
        if read_unread != unread || read_queued != watched.queued {
            self.find(
                &["executor", "heartbeat"],
                format!(
                    "the heartbeat is read after each request seen unread or queued: the \
                     readings name {} unread and {} queued, the executor's evidence {} unread \
                     and {} queued",
                    labels(&read_unread),
                    labels(&read_queued),
                    labels(&unread),
                    labels(&watched.queued)
                ),
            );
        }
        for (request, after_event) in read(Moment::Queued) {
            let admitted = replayed.decided.get(&request).map(|d| d.seq);
            if admitted.is_none_or(|seq| after_event < seq) {
                let at = admitted.map_or("never".to_owned(), |seq| format!("only at seq {seq}"));
                self.find(
                    &["executor", "heartbeat"],
                    format!(
                        "the heartbeat is read after {request} is queued, after event \
                         {after_event}, but the ledger admits {request} {at}: it is seen queued \
                         once admitted"
                    ),
                );
            }
        }
        for (i, seen) in watched.unread.iter().enumerate() {
            // It was sent once every request before it was decided, or seen unread (decided
            // only later).
            let before = (replayed.decided.iter())
                .filter(|(r, _)| sent_before(**r, seen.request) && !unread.contains(r));
            let last_before = before.max_by_key(|(_, d)| d.seq);
            let decided = replayed.decided.get(&seen.request).map(|d| d.seq);
            let why = match decided {
                _ if let Some((earlier, d)) = last_before
                    && seen.after_event < d.seq =>
                {
                    format!(
                        "it is sent only once {earlier} is decided, and the ledger decides \
                         {earlier} at seq {}",
                        d.seq
                    )
                }
                // Its connection waits in the accept queue, the last of those seen so far.
                _ if seen.accept_queue <= i => {
                    let before = match i {
                        0 => String::new(),
                        _ => format!(", after the {i} seen unread before it"),
                    };
                    format!(
                        "its connection waits in the accept queue{before}, yet the queue is \
                         counted at {}",
                        seen.accept_queue
                    )
                }
                Some(seq) if seq <= seen.after_event => {
                    format!("the ledger decided it at seq {seq}: it had been read")
                }
                _ if seen.after_event >= gate => {
                    format!("the gate had opened at seq {gate}: it is seen before the release")
                }
                _ => continue,
            };
            let at = i.to_string();
            self.find(
                &["executor", "unread", &at],
                format!(
                    "{} is seen unread after event {}, but {why}",
                    seen.request, seen.after_event
                ),
            );
        }
    }

    /// The sequence sends its requests before the release one at a time: the next only once
    /// the last is held (or refused, or admitted to wait for a thread, or seen unread). So no
    /// request is decided before the one sent ahead of it has come that far, and each reading
    /// of the heartbeat comes before the next request's decision, the release's before the
    /// gate opens.
    fn sent_in_order(&mut self, replayed: &Replayed<'_>) {
        let gate = replayed.gate.unwrap_or(u64::MAX);
        let watched = self.file.observed.executor.as_ref();
        let unread: Vec<Label> =
            watched.map_or(Vec::new(), |w| w.unread.iter().map(|u| u.request).collect());
        // Where the sequence went on from each request it sent before the release.
        let mut went_on: BTreeMap<Label, u64> = BTreeMap::new();
        for e in replayed.events.iter().filter(|e| e.seq < gate) {
            let Some(request) = e
                .request
                .filter(|r| matches!(r, Label::Slow(_) | Label::F1))
            else {
                continue;
            };
            if unread.contains(&request) {
                continue;
            }
            match e.event {
                Event::Held | Event::Refused => {
                    went_on.insert(request, e.seq);
                }
                Event::Admitted => {
                    went_on.entry(request).or_insert(e.seq);
                }
                _ => {}
            }
        }
        // Decisions of requests read when sent (not seen unread), by request.
        let decided: Vec<(Label, u64)> = (replayed.decided.iter())
            .filter(|(r, _)| matches!(r, Label::Slow(_) | Label::F1) && !unread.contains(r))
            .map(|(&r, d)| (r, d.seq))
            .collect();
        if let Some((later, seq, earlier, on)) = decided.iter().find_map(|&(later, seq)| {
            let ahead = went_on.iter().filter(|(e, _)| sent_before(**e, later));
            let (&earlier, &on) = ahead.max_by_key(|(_, on)| **on)?;
            (seq <= on).then_some((later, seq, earlier, on))
        }) {
            let at = replayed.decided[&later].index.to_string();
            self.find(
                &["work_events", &at],
                format!(
                    "{later} is decided at seq {seq}, but the lab sends {later} only once \
                     {earlier}, sent before it, is held, refused or queued for a thread, and \
                     the ledger has that at seq {on}"
                ),
            );
        }
        let Some(watched) = watched else {
            return;
        };
        for (i, seen) in watched.unread.iter().enumerate() {
            let ahead = went_on
                .iter()
                .filter(|(e, _)| sent_before(**e, seen.request));
            if let Some((earlier, &on)) = ahead.max_by_key(|(_, on)| **on)
                && seen.after_event < on
            {
                self.find(
                    &["executor", "unread", &i.to_string()],
                    format!(
                        "{} is seen unread after event {}, but the lab sends it only once \
                         {earlier}, sent before it, is held, refused or queued for a thread, at \
                         seq {on}",
                        seen.request, seen.after_event
                    ),
                );
            }
        }
        for (i, beat) in watched.heartbeat.iter().enumerate() {
            let next = |after: Option<Label>| {
                (decided.iter())
                    .filter(|&&(b, _)| after.is_none_or(|a| sent_before(a, b)))
                    .min_by_key(|&&(_, seq)| seq)
                    .copied()
            };
            let limit = match beat.moment {
                Moment::Start => next(None),
                Moment::Release => (gate < u64::MAX).then_some((Label::F1, gate)),
                Moment::Held | Moment::Queued | Moment::Unread => match beat.request {
                    Some(request) => next(Some(request)),
                    None => None,
                },
            };
            let moment = beat.moment.name();
            if let Some((b, seq)) = limit.filter(|&(_, seq)| beat.after_event >= seq) {
                let then = match beat.moment {
                    Moment::Release => format!("the gate opens at seq {seq}"),
                    _ => format!("{b} is decided at seq {seq}"),
                };
                self.find(
                    &["executor", "heartbeat", &i.to_string()],
                    format!(
                        "the {moment} reading is after event {}, but it is read before {then}",
                        beat.after_event
                    ),
                );
            }
            if beat.moment == Moment::Start && beat.ticks == 0 {
                self.find(
                    &["executor", "heartbeat", &i.to_string()],
                    "the start reading has 0 ticks, but the lab reads it once the heartbeat has \
                     ticked"
                        .into(),
                );
            }
        }
    }

    /// Replays the ledger: checks each event's order, request, pool, place in its request's
    /// life and count of taken permits, and watches for the observer's snapshots along the way.
    /// `None` once a pool admits beyond its capacity: nothing after that can be replayed.
    fn replay(&mut self) -> Option<Replayed<'a>> {
        let policy = self.policy;
        let slow_pool = policy.pool_for(Route::Slow);
        let mut events = self.file.work_events.clone();
        // The ledger's state after the events so far, in the observer's terms.
        let mut state = Snapshot {
            active_work: policy.per_pool(|_| 0),
            held_at_gate: Vec::new(),
            refused: Vec::new(),
        };
        let mut watch = self.watches(&events);
        for w in &mut watch {
            w.look(0, &state);
        }
        let mut holders: BTreeMap<Pool, Vec<Label>> = BTreeMap::new();
        let mut decided: BTreeMap<Label, Decided> = BTreeMap::new();
        let mut inside = BTreeSet::new();
        // Work a thread of the slow work's own pool began to run, where the executor hands it to
        // one (`--work spawn-blocking` or `own-runtime`): it reaches the gate only then.
        let lane = self.report.executor.lane(self.report.runner.front);
        let handed = matches!(lane, Lane::Own(..));
        // Whether held work blocks the thread that reads its request: the threaded front's, or
        // a worker's with `--work block`.
        let blocking =
            self.report.runner.front == Front::Threaded || matches!(lane, Lane::Workers(_));
        // Which routes' work is handed to one: `own-runtime` (its slow runtime) hands both
        // routes, `spawn-blocking` (the blocking pool) the slow one.
        let hands = |route: Option<Route>| match lane {
            Lane::Own(_, LaneThreads::SlowRuntime) => true,
            Lane::Own(_, LaneThreads::BlockingPool) => route == Some(Route::Slow),
            _ => false,
        };
        let mut started = BTreeSet::new();
        // Slow work started: until the gate opens, each keeps its thread blocked at it, even
        // once its work was cancelled.
        let mut running: Vec<Label> = Vec::new();
        // A gate that never opened and was abandoned at the close (a run that failed for it)
        // freed its threads without a `gate_opened` event.
        let abandoned = self.file.final_state.gate == GateState::Abandoned;
        let mut finished = BTreeMap::new();
        // Where each request was held at a gate.
        let mut held_at = BTreeMap::new();
        let mut gate: Option<u64> = None;
        let mut order_broken = false;
        let file = self.file;
        for (i, e) in events.iter_mut().enumerate() {
            let at = i.to_string();
            let path = ["work_events", at.as_str()];
            let seq = e.seq;
            let want = i as u64 + 1;
            if seq != want && !order_broken {
                order_broken = true;
                let says = match i {
                    _ if seq > want
                        && file.work_events[i..].iter().any(|later| later.seq == want) =>
                    {
                        format!("work_events are out of order: seq {seq} comes before seq {want}")
                    }
                    0 => format!(
                        "work_events start at seq {seq}; the ledger numbers its events from 1"
                    ),
                    _ if seq < want => format!(
                        "work_events are out of order: seq {seq} comes after seq {}",
                        want - 1
                    ),
                    _ => format!(
                        "work_events skip from seq {} to seq {seq}: the ledger numbers every \
                         event, with no gap",
                        want - 1
                    ),
                };
                self.find(&path, says);
            }
            let event = e.event.name();
            match (e.event, e.request) {
                (Event::GateOpened, None) => {
                    if e.pool != slow_pool {
                        self.find(
                            &path,
                            format!("the gate opens on the {} pool, but it holds the {slow_pool} pool's work", e.pool),
                        );
                    }
                    if let Some(first) = gate {
                        self.find(
                            &path,
                            format!("the gate opens again at seq {seq}, after it opened at seq {first}: it never closes"),
                        );
                    }
                    gate.get_or_insert(seq);
                }
                (Event::GateOpened, Some(request)) => {
                    self.find(
                        &path,
                        format!(
                            "a gate_opened event names {request}; the gate opens for no request"
                        ),
                    );
                }
                (_, None) => self.find(&path, format!("a {event} event names no request")),
                (_, Some(request)) => {
                    let route = self.route(request);
                    match route {
                        None if self.room.is_some() => self.find(
                            &path,
                            format!("the ledger names {request}, but the room's requests list no {request}"),
                        ),
                        None => self.find(
                            &path,
                            format!("the ledger names {request}, a request from a classroom's room, in the report of a command-line run"),
                        ),
                        Some(route) if policy.pool_for(route) != e.pool => self.find(
                            &path,
                            format!(
                                "{request}'s {event} event is on the {} pool, but {route} draws from the {} pool",
                                e.pool,
                                policy.pool_for(route)
                            ),
                        ),
                        Some(_) => {}
                    }
                    if e.cancelled && e.event != Event::Finished {
                        self.find(&path, format!("{request}'s {event} event says its work was cancelled; only work that leaves is"));
                    }
                    let before = decided.get(&request).copied();
                    match e.event {
                        Event::Admitted | Event::Refused => {
                            if let Some(first) = before {
                                self.find(
                                    &path,
                                    format!(
                                        "{request} is {event} at seq {seq} after it was already {} at seq {}: a request is decided once, and a refusal is never queued or replayed",
                                        first.decision.name(),
                                        first.seq
                                    ),
                                );
                            } else {
                                let decision = match e.event {
                                    Event::Admitted => Decision::Admitted,
                                    _ => Decision::Refused,
                                };
                                let index = i;
                                decided.insert(
                                    request,
                                    Decided {
                                        seq,
                                        index,
                                        decision,
                                    },
                                );
                            }
                            if e.event == Event::Admitted {
                                inside.insert(request);
                                holders.entry(e.pool).or_default().push(request);
                                let active = state.active_work.entry(e.pool).or_default();
                                *active += 1;
                                let capacity = policy.capacity(e.pool);
                                if *active > capacity {
                                    // Nothing after this can be replayed as the section would
                                    // have run it; stopping here also keeps the replay's lists
                                    // as short as the pools.
                                    self.find(
                                        &path,
                                        format!(
                                            "{request} is admitted at seq {seq} with every one of the {} pool's {capacity} permits already taken: a pool never admits beyond its capacity",
                                            e.pool
                                        ),
                                    );
                                    return None;
                                }
                            } else {
                                // Decided under the ledger's lock, as the semaphore's own
                                // try-acquire: refused only when no permit is free.
                                let taken = state.active_work.get(&e.pool).copied().unwrap_or(0);
                                let capacity = policy.capacity(e.pool);
                                if taken < capacity {
                                    self.find(
                                        &path,
                                        format!(
                                            "{request} is refused at seq {seq} with {taken} of the {} pool's {capacity} permits taken: a request is refused only when no permit is free",
                                            e.pool
                                        ),
                                    );
                                }
                                e.held_by = holders.get(&e.pool).cloned().unwrap_or_default();
                                state.refused.push(request);
                            }
                        }
                        Event::Started => {
                            // Admitted work that a thread of another pool or runtime began to
                            // run (`--work spawn-blocking` or `own-runtime`): it must be inside.
                            let work = self.report.executor.work.name();
                            if !handed {
                                self.find(&path, format!("{request} is started at seq {seq} by a thread of another pool or runtime, but with --work {work} no work is handed to one"));
                            } else if !hands(route) {
                                self.find(&path, format!("{request} is started at seq {seq}, but with --work {work} only /slow work is handed to another thread: /fast work runs on its connection's task"));
                            } else if started.contains(&request) {
                                self.find(&path, format!("{request} is started at seq {seq} a second time: a thread runs a request's work once"));
                            } else if let Lane::Own(threads, _) = lane
                                && gate.is_none()
                                && !abandoned
                                && route == Some(Route::Slow)
                                && running.len() >= threads
                            {
                                let (n, names) = (running.len(), labels(&running));
                                self.find(&path, format!("{request} is started at seq {seq}, before the gate opened, but {n} of the slow work's {threads} threads already run {names}, each blocked at the closed gate: none is free"));
                            } else if !inside.contains(&request) {
                                self.find(&path, format!("{request} is started at seq {seq}, but it is not inside the work section: no admission before it"));
                            }
                            started.insert(request);
                            if route == Some(Route::Slow) {
                                running.push(request);
                            }
                        }
                        Event::Held => {
                            if state.held_at_gate.contains(&request) {
                                self.find(&path, format!("{request} is held at seq {seq} a second time: it reached the gate already and has not left it"));
                            } else if handed && !started.contains(&request) {
                                let work = self.report.executor.work.name();
                                self.find(&path, format!("{request} is held at seq {seq}, but with --work {work} its work reaches the gate only once a thread starts it, and no started event came before"));
                            } else if !inside.contains(&request) {
                                self.find(&path, format!("{request} is held at seq {seq}, but it is not inside the work section: no admission before it"));
                            } else if route == Some(Route::Fast) {
                                self.find(&path, format!("{request} is held at the gate, but only /slow work waits there"));
                            } else if let Some(opened) = gate
                                && !self.room_gate_closed(request, seq)
                            {
                                self.find(
                                    &path,
                                    format!("{request} is held at seq {seq}, after the gate opened at seq {opened}: once open, it never closes"),
                                );
                            }
                            if inside.contains(&request) && !state.held_at_gate.contains(&request) {
                                state.held_at_gate.push(request);
                            }
                            held_at.entry(request).or_insert(seq);
                        }
                        Event::Finished => {
                            // Work handed to another thread runs, and so leaves, once started
                            // (unless it is cancelled before).
                            if hands(route)
                                && inside.contains(&request)
                                && !e.cancelled
                                && !started.contains(&request)
                            {
                                let work = self.report.executor.work.name();
                                self.find(&path, format!("{request} finishes at seq {seq}, not cancelled, but with --work {work} its work runs only once a thread starts it, and no started event came before"));
                            }
                            // Held work blocking its thread cannot be cancelled there:
                            // nothing polls or wakes it until the gate opens.
                            if blocking
                                && e.cancelled
                                && gate.is_none()
                                && !abandoned
                                && state.held_at_gate.contains(&request)
                            {
                                self.find(&path, format!("{request} finishes at seq {seq}, before the gate opened, but it was held blocking its thread, which nothing wakes until the gate opens"));
                            }
                            // Until the gate opens, /slow work can only wait at it, or be
                            // cancelled there.
                            if route == Some(Route::Slow)
                                && gate.is_none()
                                && !e.cancelled
                                && inside.contains(&request)
                            {
                                self.find(&path, format!("{request} finishes at seq {seq}, not cancelled, before the gate opened: /slow work waits at the closed gate until it opens"));
                            }
                            let held = held_at.get(&request).copied();
                            if route == Some(Route::Slow) && !e.cancelled {
                                let met = [decided.get(&request).map(|d| d.seq), held];
                                if let Some((closed, opened)) = self.room_gate_met(request, met)
                                    && seq <= opened
                                {
                                    self.find(&path, format!("{request} finishes at seq {seq}, not cancelled, but it met the room's gate that closed after event {closed} and opened only after event {opened}: the room's /slow work waits there until it opens"));
                                }
                            }
                            // Room gates are opened, never abandoned: a thread blocked at one
                            // leaves as it opens, its work done.
                            if blocking
                                && e.cancelled
                                && let Some((closed, opened)) =
                                    self.room_gate_met(request, [None, held])
                            {
                                self.find(&path, format!("{request} finishes at seq {seq}, cancelled, but it was held blocking its thread at the room's gate that closed after event {closed} and opened after event {opened}: nothing wakes that thread until the gate opens, and then its work is done"));
                            }
                            if inside.remove(&request) {
                                finished.insert(request, (seq, e.cancelled));
                                if let Some(h) = holders.get_mut(&e.pool) {
                                    h.retain(|&r| r != request);
                                }
                                state.held_at_gate.retain(|&r| r != request);
                                let active = state.active_work.entry(e.pool).or_default();
                                *active = active.saturating_sub(1);
                            } else if finished.contains_key(&request) {
                                self.find(
                                    &path,
                                    format!(
                                        "{request} finishes twice: its permit would go back twice"
                                    ),
                                );
                            } else {
                                self.find(&path, format!("{request} finishes at seq {seq}, but was never admitted: a finished without an admitted"));
                            }
                        }
                        Event::GateOpened => {}
                    }
                }
            }
            let taken = state.active_work.get(&e.pool).copied().unwrap_or(0);
            if e.active_after != taken {
                let capacity = policy.capacity(e.pool);
                let who = e.request.map_or("the gate".to_owned(), |r| r.to_string());
                let says = if e.active_after > capacity {
                    format!(
                        "seq {seq} says {who} {event} with {} of the {} pool's {capacity} permits taken: more than the pool holds; the events before it leave {taken} taken",
                        e.active_after, e.pool
                    )
                } else {
                    format!(
                        "seq {seq} says {} of the {} pool's permits are taken after {who} {event}, but the events before it leave {taken}",
                        e.active_after, e.pool
                    )
                };
                self.find(&path, says);
            }
            for w in &mut watch {
                w.look(i + 1, &state);
            }
        }
        Some(Replayed {
            events,
            decided,
            finished,
            gate,
            end: state,
            watch,
        })
    }

    /// Where the observer's snapshots must show the ledger's state: before F1 once every held
    /// slow request was decided, and after F1's answer before the gate opened. Positions count
    /// events: `k` is the state after the first `k`.
    fn watches(&self, events: &[WorkEvent]) -> Vec<Watch<'a>> {
        let observed = &self.file.observed;
        let is_f1 = |e: &WorkEvent| e.request == Some(Label::F1);
        let opened = events.iter().position(|e| e.event == Event::GateOpened);
        let opened = opened.unwrap_or(events.len());
        let first_f1 = events.iter().position(is_f1).unwrap_or(opened);
        let held_sent = events[..opened.min(first_f1)]
            .iter()
            .rposition(|e| matches!(e.request, Some(Label::Slow(_))))
            .map_or(0, |i| i + 1);
        // After F1's last event before the gate opened; an F1 left unread until release (slow
        // work blocking the front's workers) has none, and the window starts where the held
        // requests' ends.
        let after_f1 = events[..opened]
            .iter()
            .rposition(is_f1)
            .map_or(held_sent, |i| i + 1);
        // And after the evidence the sequence took before it: the responses it waited for and
        // the heartbeat's readings, each placed by the ledger's last seq then (a position: the
        // ledger numbers its events from 1, with no gap). In a classroom the room's requests
        // may move the ledger on in between.
        let taken_before = |of: fn(Label) -> bool| {
            let answers = (observed.responses.iter())
                .filter(|r| r.phase == Phase::BeforeRelease && of(r.request))
                .map(|r| r.after_event);
            let beats = observed.executor.iter().flat_map(|w| w.heartbeat.iter());
            let beats = beats
                .filter(|b| b.moment != Moment::Release && b.request.is_none_or(of))
                .map(|b| b.after_event);
            let latest = answers.chain(beats).max().unwrap_or(0);
            usize::try_from(latest).unwrap_or(usize::MAX)
        };
        let before_f1 = taken_before(|r| matches!(r, Label::Slow(_)));
        let with_f1 = taken_before(|r| matches!(r, Label::Slow(_) | Label::F1));
        let windows = [
            (
                "observer_before_fast",
                &observed.observer_before_fast,
                held_sent.max(before_f1),
                first_f1,
                "just before F1",
            ),
            (
                "observer_after_fast_before_release",
                &observed.observer_after_fast_before_release,
                after_f1.max(with_f1),
                opened,
                "just before the gate opened",
            ),
        ];
        windows
            .into_iter()
            .filter_map(|(name, snapshot, from, to, when)| {
                Some(Watch {
                    name,
                    when,
                    snapshot: snapshot.as_ref()?,
                    from,
                    to: to.max(from),
                    seen: false,
                    refused: None,
                    last: None,
                    since: Vec::new(),
                })
            })
            .collect()
    }

    /// The room's gates of this run's policy, as `(closed_after_event, opened_after_event)`,
    /// for a request of the room's; none for the lab's own.
    fn room_gates(&self, request: Label) -> impl Iterator<Item = (u64, Option<u64>)> + '_ {
        let (room, mode) = (self.room.filter(|_| request.from_room()), self.policy.mode);
        let gates = room.into_iter().flat_map(move |room| {
            let ours = move |g: &&SavedRoomGate| (g.run, g.mode) == (room.run, mode);
            room.gates.iter().filter(ours)
        });
        gates.map(|g| (g.closed_after_event, g.opened_after_event))
    }

    /// Whether a room gate of this run was closed at `seq`: a room request may wait there after
    /// the run's own gate opened.
    fn room_gate_closed(&self, request: Label, seq: u64) -> bool {
        (self.room_gates(request))
            .any(|(closed, opened)| closed < seq && opened.is_none_or(|o| seq <= o))
    }

    /// The room's gate of this run that a room request met, closed, at one of the seqs `met`
    /// (its admission, its `held`), the last to open of those it met: as
    /// `(closed_after_event, opened_after_event)`. Admitted after a gate closed, the request
    /// picks it, or a later one (its front picks a gate after admitting); held after it closed,
    /// it waited there. Either way its work goes on only once that gate opens, which reads the
    /// ledger's last seq before it wakes anyone. (A gate that never opened is named apart: the
    /// session opens every room gate as it closes the run.)
    fn room_gate_met(&self, request: Label, met: [Option<u64>; 2]) -> Option<(u64, u64)> {
        let gates =
            (self.room_gates(request)).filter_map(|(closed, opened)| Some((closed, opened?)));
        let met = |&(closed, opened): &(u64, u64)| {
            let mut seqs = met.into_iter().flatten();
            seqs.any(|seq| closed < seq && seq <= opened)
        };
        gates.filter(met).max_by_key(|&(_, opened)| opened)
    }

    /// `admissions` must be the decisions among the work events, as the report derives them.
    fn admissions(&mut self, evidence: &Evidence) {
        let mut derived = evidence.admissions();
        for a in &mut derived {
            // A room request's label does not carry its route: the classroom report does.
            a.route = self.route(a.request).unwrap_or(a.route);
        }
        let file = &self.file.admissions;
        for (i, (a, d)) in file.iter().zip(&derived).enumerate() {
            if a == d {
                continue;
            }
            let at = i.to_string();
            let path = ["admissions", at.as_str()];
            let capacity = self.policy.capacity(a.pool);
            let says = if (a.request, a.decision, a.pool) != (d.request, d.decision, d.pool) {
                format!(
                    "admissions[{i}] says {} was {} by the {} pool, but the work events say {} was {} by the {} pool",
                    a.request,
                    a.decision.name(),
                    a.pool,
                    d.request,
                    d.decision.name(),
                    d.pool
                )
            } else if a.active_after != d.active_after {
                let beyond = if a.active_after > capacity {
                    ": more than the pool holds"
                } else {
                    ""
                };
                format!(
                    "{} took \"{} of {capacity}\" {} permits, but its work event says {} of {capacity}{beyond}",
                    a.request, a.active_after, a.pool, d.active_after
                )
            } else if a.held_by != d.held_by {
                format!(
                    "{}'s refusal says the {} pool was held by {}, but at that moment the ledger shows it held by {}",
                    a.request,
                    a.pool,
                    labels(a.held_by.iter().flatten()),
                    labels(d.held_by.iter().flatten())
                )
            } else {
                format!(
                    "{} was sent to {}, but its route is {}",
                    a.request, a.route, d.route
                )
            };
            self.find(&path, says);
        }
        if file.len() != derived.len() {
            self.find(
                &["admissions"],
                format!(
                    "admissions lists {} decisions, but the work events hold {}",
                    file.len(),
                    derived.len()
                ),
            );
        }
    }

    /// Each pool's account and peak must be what the work events give.
    fn ledger(&mut self, audited: &BTreeMap<Pool, PoolLedger>) {
        let file = self.file;
        for (pool, own) in audited {
            let name = pool.name();
            let Some(stored) = file.ledger.get(pool) else {
                self.find(
                    &["ledger"],
                    format!("the ledger has no account of the {pool} pool"),
                );
                continue;
            };
            let fields = [
                ("admitted", stored.admitted, own.admitted),
                ("refused", stored.refused, own.refused),
                ("finished", stored.finished, own.finished),
                ("cancelled", stored.cancelled, own.cancelled),
                ("capacity", stored.capacity as u64, own.capacity as u64),
                ("peak", stored.peak as u64, own.peak as u64),
            ];
            for (field, said, counted) in fields {
                if said != counted {
                    self.find(
                        &["ledger", name, field],
                        format!("the ledger's account of the {pool} pool says {field} {said}, but its work events give {counted}"),
                    );
                }
            }
            // The section counts an attempt as it records the attempt's decision, under one
            // lock: no attempt goes undecided, in any run.
            let decided = own.admitted + own.refused;
            if stored.attempts != decided {
                self.find(
                    &["ledger", name, "attempts"],
                    format!(
                        "the ledger's account of the {pool} pool counts {} attempts, but its work \
                         events decide {decided}: the section counts an attempt as it records its \
                         decision",
                        stored.attempts
                    ),
                );
            }
            if stored.refusals != own.refusals {
                self.find(
                    &["ledger", name, "refusals"],
                    format!("the ledger's refusals on the {pool} pool are not the refusals in its work events, with the requests holding the pool at each"),
                );
            }
            let rules = |ledger: &PoolLedger| -> Vec<String> {
                ledger.invariants.iter().map(|i| i.rule.clone()).collect()
            };
            let (stated, audits) = (rules(stored), rules(own));
            if let Some(rule) = audits.iter().find(|r| !stated.contains(r)) {
                self.find(
                    &["ledger", name, "invariants"],
                    format!("the ledger of the {pool} pool leaves out the rule \"{rule}\", which its audit always checks"),
                );
            }
            let twice = (stated.iter().enumerate()).find(|&(i, r)| stated[..i].contains(r));
            if let Some((_, rule)) = twice {
                self.find(
                    &["ledger", name, "invariants"],
                    format!("the ledger of the {pool} pool states the rule \"{rule}\" twice; its audit states each rule once"),
                );
            }
            if let Some(rule) = stated.iter().find(|r| !audits.contains(r)) {
                self.find(
                    &["ledger", name, "invariants"],
                    format!("the ledger of the {pool} pool states a rule its audit does not check: \"{rule}\""),
                );
            }
            for rule in &own.invariants {
                let said = stored.invariants.iter().find(|i| i.rule == rule.rule);
                if said.is_some_and(|s| s.holds != rule.holds) {
                    self.find(
                        &["ledger", name, "invariants"],
                        format!(
                            "the ledger says \"{}\" {} on the {pool} pool, but its work events show it {}",
                            rule.rule,
                            if rule.holds { "does not hold" } else { "holds" },
                            if rule.holds { "holds" } else { "broken" }
                        ),
                    );
                }
            }
            if file.peak_active_work.get(pool) != Some(&own.peak) {
                self.find(
                    &["peak_active_work", name],
                    format!("peak_active_work of the {pool} pool is not the peak of its work events, {}", own.peak),
                );
            }
        }
        let extra = file.ledger.keys().chain(file.peak_active_work.keys());
        if let Some(pool) = extra.copied().find(|p| !audited.contains_key(p)) {
            self.find(
                &["ledger"],
                format!(
                    "the report accounts for a {pool} pool, which {} does not have",
                    self.policy.mode.name()
                ),
            );
        }
    }

    /// Each response must be what the front answers after the ledger's decision, in the phase
    /// the gate's opening gives it; every decision of the sequence has its response.
    fn responses(&mut self, replayed: &Replayed<'_>) {
        let (events, decided, gate) = (&replayed.events, &replayed.decided, replayed.gate);
        let observed = &self.file.observed;
        let last = events.len() as u64;
        let finished_at = |request: Label| replayed.finished.get(&request).map(|&(seq, _)| seq);
        let answered: BTreeSet<Label> = observed.responses.iter().map(|r| r.request).collect();
        for (i, r) in observed.responses.iter().enumerate() {
            let at = i.to_string();
            let path = ["responses", at.as_str()];
            let request = r.request;
            // The sequence's own callers' replies: the room's are listed apart.
            if request.from_room() {
                self.find(
                    &path,
                    format!("{request} is listed among the sequence's responses, but the room's requests are listed only in room_requests"),
                );
                continue;
            }
            // Each request is sent once, and its caller's reply recorded once.
            if observed.responses[..i]
                .iter()
                .any(|earlier| earlier.request == request)
            {
                self.find(
                    &path,
                    format!("{request}'s response is listed a second time: each request is sent once, and its reply recorded once"),
                );
                continue;
            }
            if r.route != self.route(request).unwrap_or(request.route()) {
                self.find(
                    &path,
                    format!(
                        "{request}'s response came from {}, but {request} is sent to {}",
                        r.route,
                        request.route()
                    ),
                );
            }
            let Some(d) = decided.get(&request) else {
                self.find(
                    &path,
                    format!("{request} has a response ({}) but the ledger shows no admission decision for {request}: a response with no admission", r.status),
                );
                continue;
            };
            let event = &events[d.index];
            if let Some(says) = answer_differs(request, r.status, &r.body, event, r.route) {
                self.find(&path, says);
            }
            let left_as = replayed
                .finished
                .get(&request)
                .map(|&(_, cancelled)| cancelled);
            let gate_state = self.file.final_state.gate;
            let mode = self.policy.mode;
            if let Some(says) = abandoned_differs(request, &r.body, mode, gate_state, left_as) {
                self.find(&path, says);
            }
            let phase = match gate {
                Some(opened) if opened <= r.after_event => Phase::AfterRelease,
                _ => Phase::BeforeRelease,
            };
            if r.after_event > last {
                self.find(
                    &path,
                    format!("{request}'s response arrived after seq {}, but the ledger ends at seq {last}", r.after_event),
                );
            } else if r.phase != phase {
                let opened =
                    gate.map_or("never opened".to_owned(), |g| format!("opened at seq {g}"));
                self.find(
                    &path,
                    format!(
                        "{request}'s response is marked {}, but it arrived after seq {} and the gate {opened}: it came {}",
                        r.phase.words(),
                        r.after_event,
                        phase.words()
                    ),
                );
            }
            let (decisive, what) = match d.decision {
                Decision::Admitted => (finished_at(request), "its work left the section"),
                Decision::Refused => (Some(d.seq), "its refusal"),
            };
            match decisive {
                Some(seq) if r.after_event < seq => self.find(
                    &path,
                    format!(
                        "{request}'s response arrived after seq {}, before {what} at seq {seq}: the permit leaves before the response is sent",
                        r.after_event,
                    ),
                ),
                None if r.status == 200 => self.find(
                    &path,
                    format!("{request} was answered 200, but its work never left the section"),
                ),
                _ => {}
            }
            if let Some(&(seq, true)) = replayed.finished.get(&request)
                && r.status == 200
            {
                self.find(&path, answered_though_cancelled(request, seq));
            }
        }
        // Listed as they arrived, each placed by the last event then: the ledger only grows.
        if let Some(i) = (1..observed.responses.len())
            .find(|&i| observed.responses[i].after_event < observed.responses[i - 1].after_event)
        {
            let (was, now) = (&observed.responses[i - 1], &observed.responses[i]);
            self.find(
                &["responses", &i.to_string()],
                format!(
                    "{}'s response, listed after {}'s, arrived after seq {}, before {}'s after \
                     seq {}: responses are listed as they arrive",
                    now.request, was.request, now.after_event, was.request, was.after_event
                ),
            );
        }
        // The lab sends each request only once it has the responses it waits for: a refusal's,
        // before the next request; every response of the release, before the probes; S-after's,
        // before F-after.
        for (i, r) in observed.responses.iter().enumerate() {
            let awaited_before = |later: Label| match r.request {
                Label::SlowAfter => later == Label::FastAfter,
                Label::Slow(_) | Label::F1 => {
                    matches!(later, Label::SlowAfter | Label::FastAfter)
                        || r.phase == Phase::BeforeRelease && sent_before(r.request, later)
                }
                _ => false,
            };
            let first = (decided.iter())
                .filter(|&(&later, d)| awaited_before(later) && d.seq <= r.after_event)
                .min_by_key(|(_, d)| d.seq);
            if let Some((later, d)) = first {
                let request = r.request;
                self.find(
                    &["responses", &i.to_string()],
                    format!(
                        "{request}'s response arrived after seq {}, but the lab sends {later} only once it has {request}'s response, and the ledger decides {later} at seq {}",
                        r.after_event, d.seq
                    ),
                );
            }
        }
        if !self.cut_short {
            for (&request, d) in decided {
                if request.from_room() || answered.contains(&request) {
                    continue;
                }
                self.find(
                    &["work_events", &d.index.to_string()],
                    format!(
                        "{request} was {} at seq {} but no response to it is recorded: an admission with no response",
                        d.decision.name(),
                        d.seq
                    ),
                );
            }
        }
        // F1 decided before the gate opened is answered before release; one left unread until
        // release (slow work blocking the front's workers) is decided, and answered, after it.
        let f1_unread = match (decided.get(&Label::F1), gate) {
            (Some(f1), Some(opened)) => f1.seq > opened,
            _ => false,
        };
        if observed.fast_response_before_release.is_none() && !self.cut_short && !f1_unread {
            self.find(
                &["fast_response_before_release"],
                "F1's response before release is missing, though the run went to its end".into(),
            );
        }
        if let Some(f1) = &observed.fast_response_before_release {
            let answered = observed.responses.iter().find(|r| r.request == Label::F1);
            let agrees = answered.is_some_and(|r| {
                f1.request == Label::F1
                    && (r.status, &r.body, r.phase) == (f1.status, &f1.body, Phase::BeforeRelease)
            });
            if !agrees {
                let there = answered.map_or("none".to_owned(), |r| {
                    format!("{} {}", r.status, r.phase.words())
                });
                self.find(
                    &["fast_response_before_release"],
                    format!("fast_response_before_release says {} {}, but F1's response in responses is {there}", f1.request, f1.status),
                );
            }
        }
        if let (Some(pending), Some(opened)) = (&observed.slow_callers_pending_before_release, gate)
        {
            // Slow callers of the sequence with no response yet when the gate opened: admitted
            // before it and not yet left, or not decided until after it (unread while slow work
            // blocked the front's workers).
            // A run that failed may never read one seen unread: its caller waited all the same.
            let never_read = (observed.executor.iter())
                .flat_map(|w| w.unread.iter().map(|u| u.request))
                .filter(|r| matches!(r, Label::Slow(_)) && !decided.contains_key(r));
            let mut waiting: Vec<Label> = decided
                .iter()
                .filter(|(r, d)| {
                    matches!(r, Label::Slow(_))
                        && (d.seq > opened
                            || d.decision == Decision::Admitted
                                && finished_at(**r).is_none_or(|f| f > opened))
                })
                .map(|(&r, _)| r)
                .chain(never_read)
                .collect();
            waiting.sort();
            let mut said = pending.clone();
            said.sort();
            if said == waiting && said != *pending {
                self.find(
                    &["slow_callers_pending_before_release"],
                    format!(
                        "slow_callers_pending_before_release lists {}, but the lab notes its held \
                         callers in the order it sent them: {}",
                        labels(pending),
                        labels(&said)
                    ),
                );
            }
            if said != waiting {
                let (unread, held): (Vec<Label>, Vec<Label>) =
                    (waiting.iter()).partition(|r| decided.get(*r).is_none_or(|d| d.seq > opened));
                let mut says = format!(
                    "slow_callers_pending_before_release lists {}, but when the gate opened the ledger held {}",
                    labels(pending),
                    labels(&held)
                );
                if !unread.is_empty() {
                    says.push_str(&format!(
                        ", and the front had not yet read {}",
                        labels(&unread)
                    ));
                }
                self.find(&["slow_callers_pending_before_release"], says);
            }
        }
    }

    /// The observer's snapshots must be the ledger's state at some moment of their step.
    fn snapshots(&mut self, replayed: &Replayed<'_>) {
        for watch in replayed.watch.iter().filter(|w| !w.seen) {
            let (name, snapshot) = (watch.name, watch.snapshot);
            let says = match &watch.last {
                Some(s) => format!(
                    "{name} disagrees with the ledger: it shows {}, but {} the ledger shows {}",
                    showing(snapshot),
                    watch.when,
                    showing(s)
                ),
                None => format!("{name} was recorded at no moment the ledger reached"),
            };
            self.find(&[name], says);
        }
    }

    /// In a classroom, `resources.before_fast` against the ledger's moments from the observer's
    /// snapshot before F1 to F1's first event: it is counted in between, after the snapshot
    /// and before F1 is sent, while the room's requests may arrive, be held or leave. Its held
    /// work is the ledger's at one of those moments; its handlers, counted a moment before,
    /// at least the permits taken at one of them (each kept by its request's handler until its
    /// work leaves). Without a room the two are counted with nothing in between (`resources`).
    fn counted_before_fast(&mut self, replayed: &Replayed<'_>) {
        let before = self.file.resources.before_fast;
        let watch = (replayed.watch.iter()).find(|w| w.name == "observer_before_fast");
        let (Some(before), Some(_), Some(watch)) = (before, self.room, watch) else {
            return;
        };
        let mut held: Vec<usize> = watch.since.iter().map(|m| m.held).collect();
        held.sort_unstable();
        held.dedup();
        if !held.is_empty() && !held.contains(&before.held_at_gate) {
            let held: Vec<String> = held.iter().map(usize::to_string).collect();
            self.find(
                &["resources", "before_fast", "held_at_gate"],
                format!(
                    "resources.before_fast counts {} requests held at the gate, but from \
                     observer_before_fast to F1's decision the ledger holds {}: it is counted \
                     in between",
                    before.held_at_gate,
                    held.join(" or ")
                ),
            );
        }
        let least = watch.since.iter().map(|m| m.taken).min();
        if let Some(least) = least.filter(|&t| before.connection_handlers < t) {
            self.find(
                &["resources", "before_fast", "connection_handlers"],
                format!(
                    "resources.before_fast counts {} connection handlers, but from \
                     observer_before_fast to F1's decision the ledger has at least {least} \
                     permits taken, each kept by the handler of its request's connection until \
                     its work leaves",
                    before.connection_handlers
                ),
            );
        }
    }

    /// The final state must be where the ledger ends: its permits, and the gate.
    fn final_state(&mut self, at_end: &Snapshot, gate: Option<u64>) {
        let end = &self.file.final_state;
        let last = &at_end.active_work;
        for (pool, capacity) in self.policy.capacities() {
            let taken = last.get(&pool).copied().unwrap_or(0);
            let active = end.active_work.get(&pool).copied();
            let available = end.available_permits.get(&pool).copied();
            let returned = capacity.saturating_sub(taken);
            if active != Some(taken) {
                self.find(
                    &["final_state", "active_work"],
                    format!(
                        "final_state says {} of the {pool} pool's permits are taken, but its work events leave {taken}",
                        active.map_or("none".to_owned(), |a| a.to_string())
                    ),
                );
            }
            if available != Some(returned) {
                self.find(
                    &["final_state", "available_permits"],
                    format!(
                        "final_state says {} of the {pool} pool's {capacity} permits are back, but its work events return {returned}",
                        available.map_or("none".to_owned(), |a| a.to_string()),
                    ),
                );
            }
        }
        let says = match (end.gate, gate) {
            (GateState::Closed | GateState::Abandoned, Some(seq)) => {
                format!("final_state says the gate is not open, but it opened at seq {seq}")
            }
            (GateState::Open, None) => {
                "final_state says the gate is open, but the ledger has no gate_opened event".into()
            }
            _ => return,
        };
        self.find(&["final_state", "gate"], says);
    }
}

/// The fewest OS threads the lab's process runs before F1 on `front` with `executor`, with the
/// resources counted then, and whose they are besides the sequence's thread: the sequence's thread, and on the threaded
/// front its accept thread and a thread per connection; with a front runtime of its own, the
/// thread that drives it and its workers, each work class's driver and workers
/// (`own-runtime`), and a blocking thread for each slow request held (`spawn-blocking`).
fn least_threads(front: Front, executor: Executor, before: Resources) -> (usize, String) {
    if front == Front::Threaded {
        let handlers = before.connection_handlers;
        let whose = format!(" with the accept thread and {handlers} connections' threads");
        return (handlers.saturating_add(2), whose);
    }
    if !executor.own_runtime() {
        return (1, " alone would".into());
    }
    let workers = match executor.workers() {
        Workers::CurrentThread => 0,
        Workers::Threads(n) => usize::from(n),
    };
    // `own-runtime` gives `--workers` to each work class's runtime; its connections run on a
    // current-thread one.
    let (front_workers, others, whose) = match executor.work {
        WorkStyle::OwnRuntime => (
            0,
            2 * (1 + workers),
            format!("each work class's runtime's {} threads", 1 + workers),
        ),
        WorkStyle::SpawnBlocking => (
            workers,
            before.held_at_gate,
            format!(
                "{} held slow requests' blocking threads",
                before.held_at_gate
            ),
        ),
        WorkStyle::Block | WorkStyle::Await => (workers, 0, String::new()),
    };
    let mut words = format!(" with the front runtime's {} threads", 1 + front_workers);
    if !whose.is_empty() {
        words = format!("{words} and {whose}");
    }
    (2 + front_workers + others, words)
}

/// Whether the sequence sends `earlier` before `later`, both before the release: S1, S2, …,
/// then F1.
fn sent_before(earlier: Label, later: Label) -> bool {
    match (earlier, later) {
        (Label::Slow(a), Label::Slow(b)) => a < b,
        (Label::Slow(_), Label::F1) => true,
        _ => false,
    }
}

fn counts(map: &BTreeMap<Pool, usize>) -> String {
    let parts: Vec<String> = map.iter().map(|(p, n)| format!("{p} {n}")).collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::lab::fixtures;

    fn findings(checked: &Checked) -> Vec<String> {
        match &checked.verdict {
            Recheck::DoesNotHold { findings } => findings.iter().map(|f| f.says.clone()).collect(),
            _ => Vec::new(),
        }
    }

    /// Every report recorded from a real run re-checks as matched, with no difference.
    #[test]
    fn every_recorded_report_rechecks_as_matched() {
        for recorded in fixtures::reports() {
            let checked = report(&recorded, None, "");
            assert_eq!(
                checked.verdict,
                Recheck::Matched,
                "{:?}",
                findings(&checked)
            );
            assert!(checked.differences.iter().all(Vec::is_empty));
        }
    }

    /// The default run's shared F1, refused, edited to read 200 in its response (status and
    /// body) while the ledger still refuses it: named at the response, and the stored verdict
    /// is not believed.
    #[test]
    fn a_refusal_edited_into_a_200_is_named_where_it_was_edited() {
        let mut edited = fixtures::reports().swap_remove(1);
        let shared = &mut edited.policies[0];
        let f1 = shared
            .observed
            .responses
            .iter_mut()
            .find(|r| r.request == Label::F1);
        let f1 = f1.expect("the default run answers F1");
        f1.status = 200;
        f1.body = json!({ "request": "F1", "pool": "shared" });
        let checked = report(&edited, None, "/runs/3");
        let Recheck::DoesNotHold { findings } = &checked.verdict else {
            panic!("an edited report is not vouched for: {:?}", checked.verdict);
        };
        assert_eq!(findings[0].pointer, "/runs/3/policies/0/responses/0");
        assert!(
            findings[0].says.starts_with(
                "shared: F1's evidence says 200 but the ledger shows no fast admission"
            ),
            "{findings:?}"
        );
        assert!(!checked.differences[0].is_empty(), "the model differs too");
    }
}
