//! The accounts a report keeps beside its ledger: the admissions, each pool's account and peak,
//! and the process's counts before F1 and after the run, with the fewest threads a front runs.

use std::collections::BTreeMap;

use crate::admission::audit::PoolLedger;
use crate::coordinator::failure::setup;
use crate::draw::table::{labels, plural};
use crate::evidence::Evidence;
use crate::executor::{Executor, WorkStyle, Workers};
use crate::label::{Label, listed};
use crate::policy::{Front, Pool};
use crate::record::check::stopped::unstarted;
use crate::report::PolicyReport;
use crate::resources::Resources;

use super::PolicyCheck;

impl<'a> PolicyCheck<'a> {
    /// The process's counts before F1 and after the run: what the fronts and the sequence make
    /// of them in every run.
    pub(super) fn resources(&mut self) {
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
        // A run that did not fail counts both. Every run counts the second once its work
        // section exists, on every path: after the close, or at once if its front could not
        // start; a run that could not draw its token has none.
        let tokenless = self.failure().and_then(unstarted) == Some(setup::TOKEN);
        let due = |when: &str| !self.cut_short || (when == "after_run" && !tokenless);
        if let Some((when, _)) = (counts.iter()).find(|(when, count)| count.is_none() && due(when))
        {
            let says = if self.cut_short {
                "the lab counts the process's resources once the run's work section exists, on \
                 every path"
            } else {
                "a run that did not fail counts the process's resources before F1 and after it \
                 closed"
            };
            self.find(
                &["resources"],
                format!("resources.{when} is missing: {says}"),
            );
        }
        if tokenless && file.resources.after_run.is_some() {
            self.find(
                &["resources", "after_run"],
                "resources.after_run is counted, but the run could not draw its token: no run \
                 exists before it to count them"
                    .into(),
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
                        "resources.before_fast counts {} held at the gate, but \
                         observer_before_fast, taken at the same moment, holds {held}",
                        plural(before.held_at_gate, "request")
                    ),
                );
            }
            if self.room.is_none() && before.connection_handlers < before.held_at_gate {
                self.find(
                    &["resources", "before_fast", "connection_handlers"],
                    format!(
                        "resources.before_fast counts {}, fewer than the {} held at the gate, \
                         each inside one",
                        plural(before.connection_handlers, "connection handler"),
                        plural(before.held_at_gate, "request")
                    ),
                );
            }
            // Before F1, of the lab's callers only the slow ones have connected, each at most
            // once (a refused one's connection is reused by the next caller). A slow caller seen
            // unread sat in the kernel's accept queue until release, every worker that could
            // accept it blocked: connected, but with no handler yet. Another process may have
            // connected too, with a request without the run's token or with none at all: at
            // most the connections the server accepted in the whole run beyond those the lab's
            // callers surely had accepted (`lab_accepted`).
            let sent = self.report.inputs.held.get();
            let unread: Vec<Label> = (file.observed.executor.iter().flat_map(|w| &w.unread))
                .map(|u| u.request)
                .filter(|request| matches!(request, Label::Slow(_)))
                .collect();
            let accepted = (file.server.as_ref()).map_or(0, |s| s.connections_accepted);
            let accepted = usize::try_from(accepted).unwrap_or(usize::MAX);
            let (lab, lab_words) = lab_accepted(file, &before, &unread);
            let strangers = accepted.saturating_sub(lab);
            let unread = unread.len();
            let callers = (sent.saturating_sub(unread)).saturating_add(strangers);
            let handlers = before.connection_handlers;
            if self.room.is_none() && handlers > callers {
                let besides = match strangers {
                    0 => String::new(),
                    n => format!(
                        ", and at most {} of another process (the server accepted {accepted} in \
                         the whole run, {lab} of them surely the lab's callers': {lab_words})",
                        plural(n, "connection"),
                    ),
                };
                let queued = match unread {
                    0 => String::new(),
                    n => format!(
                        ", and {n} of them waited unread in the accept queue, no handler yet"
                    ),
                };
                self.find(
                    &["resources", "before_fast", "connection_handlers"],
                    format!(
                        "resources.before_fast counts {}, but before F1 only {} connected, \
                         each at most once{queued}{besides}",
                        plural(handlers, "connection handler"),
                        match sent {
                            1 => "the 1 slow caller".to_owned(),
                            n => format!("the {n} slow callers"),
                        }
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
                        "resources.before_fast counts {}, but observer_before_fast, taken just \
                         before, has {} taken, each kept by the handler of its request's \
                         connection until its work leaves{}",
                        plural(before.connection_handlers, "connection handler"),
                        plural(taken - kept, "permit"),
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
                        "resources.before_fast counts {}, but the sequence's thread{whose} make at \
                         least {least}",
                        plural(threads, "OS thread")
                    ),
                );
            }
            // A process that counts one thread once the run has closed ran nothing but the
            // sequence (a test's process runs more), so before F1 it ran the run's threads and
            // no others but those still starting or ending: on the threaded front, one for each
            // connection accepted without a handler counted then (a stranger's, say), and the
            // threads of the policies run before this one.
            let alone = (file.resources.after_run).and_then(|a| a.os_threads) == Some(1);
            if let Some(threads) = threads.filter(|_| alone && self.room.is_none()) {
                let earlier = (self.report.policies.iter())
                    .take_while(|p| !std::ptr::eq(*p, file))
                    .filter_map(|p| p.resources.before_fast?.os_threads)
                    .fold(0, |sum: usize, t| sum.saturating_add(t.saturating_sub(1)));
                let unhandled = match (front, file.server.as_ref()) {
                    (Front::Threaded, Some(server)) => {
                        let accepted = usize::try_from(server.connections_accepted);
                        accepted
                            .unwrap_or(usize::MAX)
                            .saturating_sub(before.connection_handlers)
                    }
                    _ => 0,
                };
                let ending = earlier.saturating_add(unhandled);
                if threads > least.saturating_add(ending) {
                    let ending = match ending {
                        0 => String::new(),
                        n => format!(", with at most {n} more still starting or ending"),
                    };
                    self.find(
                        &["resources", "before_fast", "os_threads"],
                        format!(
                            "resources.before_fast counts {}, but the run had its process to \
                             itself (1 thread once it closed), where the sequence's \
                             thread{whose} make {least}{ending}",
                            plural(threads, "OS thread")
                        ),
                    );
                }
            }
        }
        // Each handler is counted out as its connection's task or thread ends, failed runs
        // included; held work has left once a run that did not fail has closed. A run whose
        // server never started has neither.
        let server = file.server.as_ref();
        if let Some(after) =
            (file.resources.after_run).filter(|_| server.is_none_or(|s| s.connection_tasks_stopped))
        {
            let why = match server {
                None => ", yet the run's server never started",
                Some(_) if self.cut_short => ", yet every connection task stopped",
                Some(_) => ", yet every connection task stopped and the run records no failure",
            };
            let held = Some(("held_at_gate", after.held_at_gate))
                .filter(|_| !self.cut_short || server.is_none());
            let left = [("connection_handlers", after.connection_handlers)]
                .into_iter()
                .chain(held);
            for (field, left) in left.filter(|&(_, left)| left > 0) {
                let left = match field {
                    "held_at_gate" => format!("{} held at the gate", plural(left, "request")),
                    _ => plural(left, "connection handler"),
                };
                self.find(
                    &["resources", "after_run", field],
                    format!("resources.after_run counts {left}{why}"),
                );
            }
        }
    }

    /// `admissions` must be the decisions among the work events, as the report derives them.
    pub(super) fn admissions(&mut self, evidence: &Evidence) {
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
                format!(
                    "{} took \"{} of {capacity}\" {} permits, but its work event says {} of {capacity}",
                    a.request, a.active_after, a.pool, d.active_after
                )
            } else if a.held_by != d.held_by {
                let (request, pool) = (a.request, a.pool);
                match (&a.held_by, &d.held_by) {
                    (Some(said), Some(held)) => format!(
                        "{request}'s refusal says the {pool} pool was held by {}, but at that moment the ledger shows it held by {}",
                        labels(said.iter()),
                        labels(held.iter())
                    ),
                    (Some(said), None) => format!(
                        "{request}'s admission says the {pool} pool was held by {}, but only a refusal says who held its pool",
                        labels(said.iter())
                    ),
                    (None, held) => format!(
                        "{request}'s refusal does not say who held the {pool} pool, but at that moment the ledger shows it held by {}",
                        labels(held.iter().flatten())
                    ),
                }
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
    pub(super) fn ledger(&mut self, audited: &BTreeMap<Pool, PoolLedger>) {
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
                        "the ledger's account of the {pool} pool counts {}, but its work events \
                         decide {decided}: the section counts an attempt as it records its \
                         decision",
                        plural(stored.attempts, "attempt")
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
            let same = stated.len() == audits.len() && audits.iter().all(|r| stated.contains(r));
            if let Some((said, audit)) = (stated.iter().zip(&audits)).find(|(s, a)| s != a)
                && same
            {
                self.find(
                    &["ledger", name, "invariants"],
                    format!("the ledger of the {pool} pool states \"{said}\" where its audit states \"{audit}\": the audit states its rules in one order"),
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
}

/// The connections the lab's callers surely had the server accept in a run, and the words for
/// them: one for each request held before F1 (each in its own), one for each slow caller queued
/// for a thread then (admitted, not yet at the gate), one for each slow caller then unread in
/// the accept queue and answered later, and one more once F1, or a slow caller refused before
/// it, was answered (F1's own connection, or the refused caller's that F1 reused).
fn lab_accepted(file: &PolicyReport, before: &Resources, unread: &[Label]) -> (usize, String) {
    let observed = &file.observed;
    let answered = |request: &Label| (observed.responses.iter()).any(|r| r.request == *request);
    let refused = (observed.observer_before_fast.as_ref()).is_some_and(|o| !o.refused.is_empty());
    let queued = (observed.executor.iter().flat_map(|w| &w.queued))
        .filter(|request| matches!(request, Label::Slow(_)))
        .count();
    let unread_answered = unread.iter().filter(|request| answered(request)).count();
    let f1 = usize::from(refused || answered(&Label::F1));
    let counted = [
        (before.held_at_gate, "held before F1"),
        (queued, "queued for a thread"),
        (unread_answered, "read only after release"),
    ];
    let counts = (counted.iter())
        .filter(|&&(n, _)| n > 0)
        .map(|&(n, whose)| format!("{n} {whose}"));
    let f1s = (f1 > 0).then(|| "F1's (its own, or a refused caller's it reused)".to_owned());
    let lab = counted.iter().map(|&(n, _)| n).sum::<usize>() + f1;
    (lab, listed(counts.chain(f1s)))
}

/// The fewest OS threads the lab's process runs before F1 on `front` with `executor`, with the
/// resources counted then, and whose they are besides the sequence's thread: the sequence's thread, and on the threaded
/// front its accept thread and a thread per connection; with a front runtime of its own, the
/// thread that drives it and its workers, each work class's driver and workers
/// (`own-runtime`), and a blocking thread for each slow request held (`spawn-blocking`).
fn least_threads(front: Front, executor: Executor, before: Resources) -> (usize, String) {
    if front == Front::Threaded {
        let handlers = before.connection_handlers;
        let whose = match handlers {
            1 => " with the accept thread and 1 connection's thread".to_owned(),
            n => format!(" with the accept thread and {n} connections' threads"),
        };
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
            format!(
                "each work class's runtime's {}",
                plural(1 + workers, "thread")
            ),
        ),
        WorkStyle::SpawnBlocking => (
            workers,
            before.held_at_gate,
            match before.held_at_gate {
                1 => "1 held slow request's blocking thread".to_owned(),
                n => format!("{n} held slow requests' blocking threads"),
            },
        ),
        WorkStyle::Block | WorkStyle::Await => (workers, 0, String::new()),
    };
    let mut words = format!(
        " with the front runtime's {}",
        plural(1 + front_workers, "thread")
    );
    if !whose.is_empty() {
        words = format!("{words} and {whose}");
    }
    (2 + front_workers + others, words)
}
