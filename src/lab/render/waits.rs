//! What the front's executor did in one policy run, in sentences read off its evidence: the
//! requests it left unread or queued, and the heartbeat of its runtime (`docs/blocking.md`).
//! Empty for the lab's usual run, which records no executor evidence.

use std::fmt::Write;

use crate::admission::ledger::Event;
use crate::draw::table::{labels, wrap};
use crate::evidence::Phase;
use crate::label::Label;
use crate::policy::Route;
use crate::report::PolicyReport;

/// The sentences for one policy, each ending in a newline; empty when nothing waited.
pub(crate) fn explain(policy: &PolicyReport) -> String {
    let Some(watched) = &policy.observed.executor else {
        return String::new();
    };
    let mode = policy.mode.name();
    let mut out = String::new();
    let held = policy.observed.observer_before_fast.as_ref();
    let held = held.map_or(&[][..], |s| s.held_at_gate.as_slice());
    let seq_of = |request: Label, event: Event| {
        let mut events = policy.work_events.iter();
        let found = events.find(|e| e.request == Some(request) && e.event == event);
        found.map(|e| e.seq)
    };
    let answer = |request: Label| {
        let mut responses = policy.observed.responses.iter();
        let found = responses.find(|r| r.request == request && r.phase == Phase::AfterRelease);
        found.map(|r| r.status)
    };
    if let Some(last) = watched.unread.last() {
        // From the last slow request held to the release: the model checks they are equal.
        let still = watched.since_last_held();
        let _ = write!(
            out,
            "{mode}: the slow work held at the gate ({}) blocked every worker of the front's \
             runtime",
            labels(held)
        );
        if let (Some(from), Some(to)) = (still.first(), still.last())
            && from.ticks == to.ticks
        {
            let ticks = from.ticks;
            let noun = if ticks == 1 { "tick" } else { "ticks" };
            let _ = write!(
                out,
                "; its heartbeat stood at {ticks} {noun} until the release"
            );
        }
        out.push_str(".\n");
        let requests: Vec<Label> = watched.unread.iter().map(|u| u.request).collect();
        let _ = writeln!(
            out,
            "  {} arrived and sat unread: the kernel queued each connection, and the \
             listener's accept queue grew to {} while no worker was free to accept.",
            labels(&requests),
            last.accept_queue,
        );
        if requests.contains(&Label::F1) {
            let pool = policy.route_pools[&Route::Fast];
            let before = policy.observed.observer_after_fast_before_release.as_ref();
            let taken = before.and_then(|s| s.active_work.get(&pool).copied());
            let capacity = policy.pool_capacities.get(&pool).copied().unwrap_or(0);
            if let Some(taken) = taken {
                let _ = writeln!(
                    out,
                    "  The {pool} pool had {} of {capacity} permit(s) free meanwhile: the \
                     executor, not a permit, kept F1 out.",
                    capacity.saturating_sub(taken)
                );
            }
        }
        for request in requests {
            if let (Some(seq), Some(status)) = (seq_of(request, Event::Admitted), answer(request)) {
                let _ = writeln!(
                    out,
                    "  {request} was admitted only after release (work event {seq}) and \
                     answered {status}."
                );
            }
        }
    }
    for &request in &watched.queued {
        let _ = write!(
            out,
            "{mode}: {request} was admitted and took its permit, but its work waited for a \
             thread while {} held every thread it could run on: a queue the permits do not \
             show",
            labels(held)
        );
        match seq_of(request, Event::Started) {
            Some(seq) => {
                let _ = writeln!(out, "; it started only after release (work event {seq}).");
            }
            None => out.push_str(".\n"),
        }
    }
    if watched.unread.is_empty() && watched.queued.is_empty() && !held.is_empty() {
        let ticks: Vec<u64> = watched.heartbeat.iter().map(|b| b.ticks).collect();
        if let (Some(from), Some(to)) = (ticks.first(), ticks.last()) {
            let _ = writeln!(
                out,
                "{mode}: the slow work ({}) held threads of its own, not the front's workers; \
                 the front's heartbeat read {from} then {to} ticks while it was held.",
                labels(held)
            );
        }
    }
    within_80(&out)
}

/// Each line of `text` (a sentence, maybe indented) broken to fit 80 columns, its later lines
/// indented two more.
fn within_80(text: &str) -> String {
    let lines = text.lines().map(|line| {
        let words = line.trim_start();
        let lead = &line[..line.len() - words.len()];
        wrap(words, lead, &format!("{lead}  "), 80)
    });
    lines.collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::Options;
    use crate::executor::{BlockingThreads, Executor, WorkStyle, Workers};
    use crate::policy::{Front, Inputs};

    /// A heartbeat that stood still is said with its count and the noun in the right number.
    #[test]
    fn a_heartbeat_that_stood_at_one_tick_says_tick() {
        let blocked = Executor::new(
            WorkStyle::Block,
            Workers::CurrentThread,
            BlockingThreads::default(),
        );
        let options = Options::on(Front::Async).with_executor(blocked);
        let run = crate::lab::run_with(Inputs::default(), options);
        let report = crate::lab::block_on(run).expect("a runtime");
        let mut policy = report.policies[0].clone();
        for (ticks, noun) in [(1, "tick"), (7, "ticks")] {
            let watched = policy.observed.executor.as_mut();
            let watched = watched.expect("the executor's evidence");
            for beat in &mut watched.heartbeat {
                beat.ticks = ticks;
            }
            let text = explain(&policy);
            let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let said = format!("its heartbeat stood at {ticks} {noun} until the release");
            assert!(words.contains(&said), "{words}");
        }
    }
}
