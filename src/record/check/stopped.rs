//! Where a run stopped, as its failure says and as its evidence shows: the step under way when
//! the ledger's last event came, and whether the steps taken agree with the failure's step.

use std::time::Duration;

use crate::admission::ledger::Event;
use crate::coordinator::failure::{Cause, Failure, Step, setup, waited};
use crate::coordinator::sequence::Planned;
use crate::evidence::Phase;
use crate::label::Label;
use crate::report::{PolicyReport, Report};

use super::{RoomOfRun, on_executor};

/// The steps of a policy's sequence that run across the ledger's events: the release, from the
/// gate's opening until the last answer it collects came, and each probe, from its decision
/// until its answer came (each step waits for its answers, and each answer is placed by the
/// ledger's last seq as it came). Read once per policy, so that each look is short.
pub(super) struct Steps {
    /// The gate's opening and the last answer the release collects.
    release: Option<(u64, u64)>,
    /// Each probe's decision and answer.
    probes: Vec<(Label, u64, u64)>,
}

impl Steps {
    /// `policy`'s steps, as its evidence places them.
    pub(super) fn of(policy: &PolicyReport) -> Self {
        let events = &policy.work_events;
        let responses = &policy.observed.responses;
        let opened = (events.iter())
            .find(|e| e.event == Event::GateOpened)
            .map(|e| e.seq);
        // The release collects the held callers' answers, and F1's if it waited for the release.
        let collected = (responses.iter())
            .filter(|r| r.phase == Phase::AfterRelease)
            .filter(|r| matches!(r.request, Label::Slow(_) | Label::F1))
            .map(|r| r.after_event)
            .max();
        let probes = [Label::SlowAfter, Label::FastAfter]
            .into_iter()
            .filter_map(|probe| {
                let decided = (events.iter())
                    .find(|e| e.request == Some(probe) && e.event.is_decision())?
                    .seq;
                let answered = responses.iter().find(|r| r.request == probe)?.after_event;
                Some((probe, decided, answered))
            });
        Steps {
            release: opened.zip(collected),
            probes: probes.collect(),
        }
    }

    /// The step under way when the ledger's last event was `seq`, if one was, in words.
    pub(super) fn under_way(&self, seq: u64) -> Option<String> {
        if let Some((opened, last)) = self.release
            && (opened..last).contains(&seq)
        {
            return Some(format!(
                "the release was under way (the gate opened at seq {opened}, the last answer it \
                 collects came after event {last})"
            ));
        }
        (self.probes.iter()).find_map(|&(probe, decided, answered)| {
            (decided..answered).contains(&seq).then(|| {
                format!("{probe}'s step was under way (decided at seq {decided}, answered after event {answered})")
            })
        })
    }
}

/// Where a run stopped, as its failure (`rest`, said of `policy`) names it: unable to start
/// (then it served nothing), closed before a step (the first it did not take), or stalled in
/// one (a failed step ends the sequence); `find` is told each way the failure is contradicted.
/// Every step before it was taken, and none after it: a step's requests are sent only in it.
/// Only a classroom closes a run early: the command line runs every step, or stops at one that
/// fails. And no order of the instructor's reaches a run once it closes, so a run stopped
/// before its release has no room gate: the room's gate closes only once the run's own has
/// opened.
pub(super) fn stopped(
    report: &Report,
    policy: &PolicyReport,
    rest: &str,
    room: Option<&RoomOfRun<'_>>,
    find: &mut impl FnMut(String),
) {
    let held = report.inputs.held;
    let plan: Vec<Planned> = Planned::all(held).collect();
    let mode = policy.mode.name();
    let closed = |step: String| Failure::new(Step::Close, None, Cause::ClosedEarly(step));
    let limit = Duration::from_millis(report.runner.safety_timeout_ms);
    let stalled =
        |waiting_for| Failure::new(Step::Close, None, Cause::Stalled { waiting_for, limit });
    let says = |failure: Failure| rest.starts_with(&failure.to_string());
    // Before any step: a run that could not start serves nothing (and counts nothing served:
    // `resources`).
    if let Some(what) = unstarted(rest) {
        let served = !policy.work_events.is_empty()
            || !policy.observed.responses.is_empty()
            || policy.server.is_some();
        if served {
            find(format!(
                "the failure says {mode} could not start ({what}), but it records a server, \
                 work events or responses: a run that cannot start serves nothing"
            ));
        }
        return;
    }
    // Past its setup, a run's server started, and its summary is kept when it stops; but a
    // front's own runtime whose thread ended on an error before it served (it never ran its
    // heartbeat) reports none.
    let ended_unserved = rest.starts_with(waited::HEARTBEAT_STOPPED)
        && report.executor.front_runtime(report.runner.front);
    if policy.server.is_none() && !ended_unserved {
        find(format!(
            "the failure says {mode} got past its setup, but it records no server: only a run \
             that could not start (its token, its front's runtime or its listener) has none, \
             and its failure says which"
        ));
        return;
    }
    // What each step waits for, in a stall's words.
    let waits = |step: Planned| match step {
        Planned::Slow(r) => vec![
            waited::decision(r),
            waited::gate(r),
            waited::refusal(r),
            waited::unread(r),
        ],
        // Requests without the run's token (a test's) go first, then the snapshot, then F1.
        Planned::Fast => vec![
            waited::FOREIGN.into(),
            waited::unread(Label::F1),
            waited::response(Label::F1),
        ],
        Planned::Release => vec![waited::RELEASED.into()],
        Planned::Probe(r) => vec![waited::response(r)],
    };
    // The step it stopped at, and how: before it, in it, or before its runtime could start it.
    let (at, stop) = if says(closed(String::new())) {
        if room.is_none() {
            find(format!(
                "the failure says {mode} was closed before its next step, but only a \
                 classroom closes a run early: the command line runs every step, or stops at \
                 one that fails"
            ));
            return;
        }
        let Some(at) = plan.iter().position(|&p| says(closed(p.to_string()))) else {
            find(format!(
                "the failure names a step that is not in {mode}'s sequence"
            ));
            return;
        };
        (at, Stop::Before)
    } else if says(stalled(waited::HEARTBEAT.into())) || rest.starts_with(waited::HEARTBEAT_STOPPED)
    {
        // Before S1's step sends S1, and only where the front has a runtime of its own.
        let (front, executor) = (report.runner.front, report.executor);
        if !executor.front_runtime(front) {
            find(format!(
                "the failure says {mode}'s front runtime ran no heartbeat, but the {} front{} has \
                 no runtime of its own to run one",
                front.name(),
                on_executor(executor)
            ));
            return;
        }
        (0, Stop::Unstarted)
    } else {
        let at = (plan.iter()).position(|&p| waits(p).into_iter().any(|w| says(stalled(w))));
        let Some(at) = at else {
            // A stall's limit is the run's safety timeout, which bounds every wait.
            if rest.starts_with("stalled: ") {
                let within = format!(" within {} s", limit.as_secs_f64());
                let why = if rest.contains(&within) {
                    format!(" waiting for what no step of its sequence (--held {held}) waits for")
                } else {
                    format!(", but not{within}: the run's safety timeout, which bounds every wait")
                };
                find(format!("the failure says {mode} stalled{why}"));
            }
            return;
        };
        // The coordinator heard the admission it names from the ledger, which keeps every event.
        if let Planned::Slow(request) = plan[at]
            && says(stalled(waited::gate(request)))
            && !(policy.work_events.iter())
                .any(|e| e.request == Some(request) && e.event == Event::Admitted)
        {
            find(format!(
                "the failure says {mode} stalled with {request} admitted, but the ledger shows \
                 no admission of {request}"
            ));
        }
        // F1 is sent, and so waited for, only after the step's snapshot of the section: of the
        // step's waits, only the tokenless requests' comes before it.
        if plan[at] == Planned::Fast
            && !says(stalled(waited::FOREIGN.into()))
            && policy.observed.observer_before_fast.is_none()
        {
            find(format!(
                "the failure says {mode} stalled waiting for F1, but it records no snapshot of \
                 the section before F1 (observer_before_fast), which its step takes before it \
                 sends F1"
            ));
        }
        (at, Stop::In)
    };
    let observed = &policy.observed;
    let answered = |label: Label| observed.responses.iter().any(|r| r.request == label);
    let seen = |label: Label| {
        answered(label) || (policy.work_events.iter()).any(|e| e.request == Some(label))
    };
    let unanswered = || Label::held(held).find(|&s| !answered(s));
    let gated = || room.is_some_and(|room| room.gates_of(policy.mode).next().is_some());
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
        find(format!("the failure says {mode} {stop}, but {why}"));
    }
}

/// What a run that could not start failed to set up, as its failure (`rest`, said of its
/// policy) begins: its token, its front's runtime or its listener.
pub(super) fn unstarted(rest: &str) -> Option<&'static str> {
    [setup::TOKEN, setup::RUNTIME, setup::BINDING]
        .into_iter()
        .find(|what| rest.strip_prefix(what).is_some_and(|r| r.starts_with(": ")))
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
