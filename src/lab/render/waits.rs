//! What the front's executor did in one policy run, in sentences read off its evidence: the
//! requests it left unread or queued, and the heartbeat of its runtime (`docs/blocking.md`).
//! Empty for the lab's usual run, which records no executor evidence.

use std::fmt::Write;

use crate::admission::ledger::Event;
use crate::draw::table::{labels, plural, wrap};
use crate::evidence::{Moment, Phase};
use crate::executor::{Executor, Lane, LaneThreads};
use crate::label::Label;
use crate::policy::{Front, Route};
use crate::report::PolicyReport;

/// The sentences for one policy run by `executor` on `front`, each ending in a newline; empty
/// when the run recorded no executor evidence.
pub(crate) fn explain(policy: &PolicyReport, executor: &Executor, front: Front) -> String {
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
            match taken.map(|taken| capacity.saturating_sub(taken)) {
                Some(0) => {
                    let _ = writeln!(
                        out,
                        "  The {pool} pool had none of its {} free meanwhile either: the \
                         executor kept F1 out before a permit could.",
                        plural(capacity, "permit")
                    );
                }
                Some(free) => {
                    let _ = writeln!(
                        out,
                        "  The {pool} pool had {free} of {} free meanwhile: the executor, \
                         not a permit, kept F1 out.",
                        plural(capacity, "permit")
                    );
                }
                None => {}
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
        let n = held.len();
        let holds = match executor.lane(front) {
            Lane::Unbounded if front == Front::Threaded => match n {
                1 => "blocked its connection's own thread".to_owned(),
                _ => "each blocked its connection's own thread".to_owned(),
            },
            Lane::Unbounded => {
                let parked = match n {
                    1 => "a parked task",
                    _ => "parked tasks",
                };
                format!("awaited the gate as {parked}, holding no thread of the front's runtime")
            }
            Lane::Workers(threads) => {
                format!(
                    "blocked {} of the front's runtime",
                    some_of(n, threads, "worker")
                )
            }
            Lane::Own(most, LaneThreads::BlockingPool) => format!(
                "blocked {} of the blocking pool (at most {most}), not the front's workers",
                plural(n, "thread")
            ),
            Lane::Own(threads, LaneThreads::SlowRuntime) => format!(
                "blocked {} of its own runtime, not the front's",
                some_of(n, threads, "worker")
            ),
        };
        let _ = write!(out, "{mode}: the slow work ({}) {holds}", labels(held));
        if policy.observed.fast_response_before_release.is_some() {
            out.push_str(", and F1 was read and answered before release");
        }
        // The heartbeat, from the first slow request held to the release, when it moved: the
        // front's runtime ran tasks meanwhile. Ticks come each millisecond, so a quick run
        // may read the same count twice, which says nothing either way.
        let beats = &watched.heartbeat;
        let first_held = beats.iter().find(|b| b.moment == Moment::Held);
        let release = beats.iter().find(|b| b.moment == Moment::Release);
        if let (Some(from), Some(to)) = (first_held, release)
            && to.ticks > from.ticks
        {
            let _ = write!(
                out,
                "; the front's heartbeat went on ticking meanwhile, {} at {}'s hold and {} at \
                 the release",
                from.ticks,
                from.request.map_or_else(String::new, |r| r.to_string()),
                to.ticks
            );
        }
        out.push_str(".\n");
    }
    within_80(&out)
}

/// `n` of `all`: `the one worker`, `all 2 workers`, `2 of the 4 workers`.
fn some_of(n: usize, all: usize, noun: &str) -> String {
    match (n, all) {
        (_, 1) => format!("the one {noun}"),
        _ if n == all => format!("all {all} {noun}s"),
        _ => format!("{n} of the {all} {noun}s"),
    }
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
            let text = explain(&policy, &blocked, Front::Async);
            let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let said = format!("its heartbeat stood at {ticks} {noun} until the release");
            assert!(words.contains(&said), "{words}");
        }
    }

    /// Where no request waited, the sentence names what the held work held, by the executor
    /// that ran it; says F1 was answered only when it was; and gives the heartbeat's readings
    /// only when they moved, as they are in the evidence.
    #[test]
    fn what_the_held_work_held_is_told_by_its_executor() {
        use crate::policy::ModeChoice;
        let shared = Inputs {
            mode: ModeChoice::Shared,
            ..Inputs::default()
        };
        let both = Inputs::default();
        let one_held = Inputs {
            held: crate::policy::Held::new(1).expect("1 is allowed"),
            ..Inputs::default()
        };
        let cases = [
            (
                WorkStyle::Await,
                Some(2),
                both,
                "awaited the gate as parked tasks",
            ),
            (
                WorkStyle::Await,
                Some(1),
                one_held,
                "(S1) awaited the gate as a parked task,",
            ),
            (
                WorkStyle::Block,
                Some(4),
                both,
                "blocked 2 of the 4 workers of the front's",
            ),
            (
                WorkStyle::SpawnBlocking,
                None,
                both,
                "blocked 2 threads of the blocking pool",
            ),
            (
                WorkStyle::OwnRuntime,
                Some(2),
                both,
                "blocked all 2 workers of its own runtime",
            ),
            (
                WorkStyle::Block,
                Some(2),
                shared,
                "none of its 2 permits free meanwhile either",
            ),
        ];
        for (work, workers, inputs, said) in cases {
            let executor = Executor {
                work,
                workers: workers.map(Workers::Threads),
                blocking_threads: BlockingThreads::default(),
            };
            let options = Options::on(Front::Async).with_executor(executor);
            let run = crate::lab::run_with(inputs, options);
            let report = crate::lab::block_on(run).expect("a runtime");
            let policy = &report.policies[0];
            let text = explain(policy, &executor, Front::Async);
            let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(words.contains(said), "{work:?}: {words}");
            assert!(!words.contains("threads of its own, not"), "{words}");
            let answered = policy.observed.fast_response_before_release.is_some();
            assert_eq!(
                words.contains("F1 was read and answered"),
                answered,
                "{words}"
            );
            let watched = policy
                .observed
                .executor
                .as_ref()
                .expect("executor evidence");
            let beat = |moment| watched.heartbeat.iter().find(|b| b.moment == moment);
            let (from, to) = (beat(Moment::Held), beat(Moment::Release));
            let (from, to) = (
                from.expect("a held reading"),
                to.expect("a release reading"),
            );
            let moved = format!(
                "{} at S1's hold and {} at the release",
                from.ticks, to.ticks
            );
            // Where F1 waited, the heartbeat is told from the last slow request held.
            let waited = !watched.unread.is_empty() || !watched.queued.is_empty();
            let moved_on = !waited && to.ticks > from.ticks;
            assert_eq!(words.contains("went on ticking"), moved_on, "{words}");
            if moved_on {
                assert!(words.contains(&moved), "{words}");
            }
        }
    }
}
