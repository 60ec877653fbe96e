//! `compare`'s two tables, and what they mean in plain sentences.

use std::fmt::Write;

use crate::compare::{Comparison, RequestOutcome};
use crate::draw::table::{columns, heading, labels, row, wrap};
use crate::executor::{Executor, WorkStyle};
use crate::label::Label;
use crate::policy::Front;
use crate::resources::Resources;

/// The comparison as two tables within 80 columns, and what it means in plain sentences.
pub fn render(comparison: &Comparison) -> String {
    let executor = comparison.executors.get(&Front::Async).copied();
    let flags = format!(
        "--slots {} --held {}{},",
        comparison.slots,
        comparison.held,
        executor.map_or(String::new(), |e| e.flags())
    );
    let title = "isolation-lab compare";
    let mut out = heading(title, &flags, "each policy on each server front") + "\n\n";
    if !comparison.executors.is_empty() {
        // Each front's shape, the one that runs as usual too: the flags above are the async
        // front's, and the threaded front takes only `--work block` of them.
        for front in Front::ALL {
            let executor = comparison.executors.get(&front).copied();
            let executor = executor.unwrap_or_default();
            let shape = format!("The {} front: {}.", front.name(), executor.describe(front));
            out.push_str(&wrap(&shape, "", "  ", 80));
        }
        out.push('\n');
    }
    let mut header = vec![String::new()];
    let mut fronts = vec![String::new()];
    for policy in &comparison.policies {
        header.extend([policy.mode.name().to_owned(), String::new()]);
        fronts.extend(Front::ALL.map(|f| f.name().to_owned()));
    }
    let mut rows = vec![header, fronts];
    let requests = comparison
        .policies
        .first()
        .and_then(|p| p.outcomes.values().next());
    for (i, request) in requests.into_iter().flatten().enumerate() {
        let cells = comparison.policies.iter().flat_map(|policy| {
            Front::ALL.map(|front| {
                let outcome = policy.outcomes.get(&front).and_then(|o| o.get(i));
                outcome.map_or_else(|| "-".to_owned(), cell)
            })
        });
        rows.push(row(request.request.to_string(), cells));
    }
    type Count = fn(&Resources) -> String;
    let threads: Count = |r| r.os_threads.map_or("n/a".into(), |n| n.to_string());
    let handlers: Count = |r| r.connection_handlers.to_string();
    let evidence = [
        ("OS threads, held", false, threads),
        ("handlers, held", false, handlers),
        ("OS threads after", true, threads),
        ("handlers after", true, handlers),
    ];
    for (heading, after, count) in evidence {
        let cells = comparison.policies.iter().flat_map(|policy| {
            Front::ALL.map(|front| {
                let resources = policy.resources.get(&front);
                let moment =
                    resources.and_then(|r| if after { r.after_run } else { r.before_fast });
                moment.as_ref().map_or_else(|| "-".to_owned(), count)
            })
        });
        rows.push(row(heading, cells));
    }
    out.push_str(&columns(&rows));
    out.push('\n');
    for (front, failure) in &comparison.failures {
        let _ = writeln!(out, "FAILED on the {} front: {failure}", front.name());
    }
    if !comparison.failures.is_empty() {
        // A failed run was cut short: its rows are incomplete, not a different admission.
        out.push_str(
            "The comparison is incomplete: a run failed (above), so its rows stop where it did.\n",
        );
    } else if comparison.identical {
        out.push_str(&identical(comparison, executor));
    } else if comparison.expected_to_differ && comparison.matches_model {
        out.push_str(&disagreement(comparison));
    } else {
        out.push_str("The fronts DISAGREE about admission: see the rows above.\n");
    }
    out
}

/// Why admission was identical on both fronts, and what holding cost each, as far as the thread
/// counts show it.
fn identical(comparison: &Comparison, executor: Option<Executor>) -> String {
    const DECIDED: &str = "Admission is identical on both fronts: the same requests were held, \
                           refused\nand answered, because one model, one coordinator and one \
                           work section decide.\n";
    match (
        threads_show_holding(comparison),
        executor.and_then(|e| holding(e.work)),
    ) {
        (None, _) => format!(
            "{DECIDED}The OS threads were not counted here, so what holding cost is not shown.\n"
        ),
        (Some(false), _) => format!(
            "{DECIDED}The threaded front's OS threads did not grow by one per held request here:\n\
             see the rows above.\n"
        ),
        (Some(true), Some(held)) => {
            let words = format!(
                "{}On the async front {held}; on the threaded one each blocks an OS thread of \
                 its own. Neither front bounds connections or handlers; only the declared work \
                 section is bounded.",
                DECIDED.replace('\n', " ")
            );
            wrap(&words, "", "", 80)
        }
        (Some(true), None) => format!(
            "{DECIDED}What differs is the cost of holding: each held request parks a task on the\n\
             async front but blocks an OS thread on the threaded one. Neither front bounds\n\
             connections or handlers; only the declared work section is bounded.\n"
        ),
    }
}

/// Whether the thread counts show what holding costs the threaded front: while holding, at
/// least one OS thread more per request held at its gate than once the run had closed, in every
/// policy. `None` where the OS counted no threads.
fn threads_show_holding(comparison: &Comparison) -> Option<bool> {
    let mut shown = true;
    for policy in &comparison.policies {
        let resources = policy.resources.get(&Front::Threaded)?;
        let (holding, after) = (resources.before_fast?, resources.after_run?);
        let grew = (holding.os_threads?).saturating_sub(after.os_threads?);
        shown &= grew >= holding.held_at_gate;
    }
    Some(shown)
}

/// What a held request holds on the async front when its work does not await the gate.
fn holding(work: WorkStyle) -> Option<&'static str> {
    Some(match work {
        WorkStyle::Await => return None,
        WorkStyle::Block => {
            "each held request blocks a worker of the front's runtime, and a worker was \
             left to read F1"
        }
        WorkStyle::SpawnBlocking => {
            "each held request blocks a thread of the runtime's blocking pool, and its \
             workers stay free"
        }
        WorkStyle::OwnRuntime => {
            "each held request blocks a worker of the slow work's own runtime, and the \
             connections' runtime stays free"
        }
    })
}

/// Why the fronts disagree as the model predicts, read off the rows: what the async front's
/// executor left unread, and F1 on each front.
fn disagreement(comparison: &Comparison) -> String {
    // Queued work is admitted and answered as held work is: the fronts then differ only in
    // where admitted work waited.
    let answered_alike = comparison.policies.iter().all(|policy| {
        let answers = |front| {
            let outcomes = policy.outcomes.get(&front).into_iter().flatten();
            outcomes
                .map(|o| (o.request, o.decision, o.status, o.phase))
                .collect::<Vec<_>>()
        };
        answers(Front::Async) == answers(Front::Threaded)
    });
    let mut out = wrap(
        if answered_alike {
            "Both fronts admitted and answered every request alike; as the model predicts, \
             they differ in where admitted work waited: the executor, not a permit, decided."
        } else {
            "The fronts disagree, as the model predicts: the executor, not a permit, decided."
        },
        "",
        "",
        80,
    );
    for policy in &comparison.policies {
        let (Some(on_async), Some(threaded)) = (
            policy.outcomes.get(&Front::Async),
            policy.outcomes.get(&Front::Threaded),
        ) else {
            continue;
        };
        let requests = |kept: fn(&RequestOutcome) -> bool| {
            let kept = on_async.iter().filter(|&o| kept(o));
            kept.map(|o| o.request).collect::<Vec<_>>()
        };
        let (held, unread) = (requests(|o| o.held), requests(|o| o.unread));
        let queued = requests(|o| o.queued);
        if unread.is_empty() && queued.is_empty() {
            continue;
        }
        let f1 = |outcomes: &[RequestOutcome]| {
            let f1 = outcomes.iter().find(|o| o.request == Label::F1);
            let status = f1
                .and_then(|o| o.status)
                .map_or("-".into(), |s| s.to_string());
            let phase = f1.and_then(|o| o.phase).map_or("", |p| p.words());
            format!("{status} {phase}")
        };
        let waited = if unread.is_empty() {
            format!(
                "held every thread its slow work could run on, so {} took a permit but waited \
                 for a thread",
                labels(&queued)
            )
        } else {
            format!(
                "blocked every worker of its runtime, so {} sat unread",
                labels(&unread)
            )
        };
        let why = format!(
            "{}: on the async front {} {waited} until release (F1: {}); on the threaded front \
             each held request blocked only its own thread (F1: {}).",
            policy.mode.name(),
            labels(&held),
            f1(on_async),
            f1(threaded),
        );
        out.push_str(&wrap(&why, "", "  ", 80));
    }
    out
}

/// `held 200`, `503`, `200`: whether the work was held (or left unread, or queued for a thread,
/// until release), and the status its caller received.
fn cell(outcome: &RequestOutcome) -> String {
    let status = outcome.status.map_or("-".to_owned(), |s| s.to_string());
    if outcome.unread {
        format!("unread {status}")
    } else if outcome.queued {
        format!("queued {status}")
    } else if outcome.held {
        format!("held {status}")
    } else {
        status
    }
}
