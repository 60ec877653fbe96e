//! `sweep`'s matrices: one per policy, within 80 columns.

use std::fmt::Write;

use crate::draw::table::{columns, row, wrap};
use crate::label::Label;
use crate::outcome::ExecutorOutcome;
use crate::policy::{Held, Mode, Slots};
use crate::sweep::{Sweep, SweepRun};

/// The matrices, within 80 columns.
pub fn render(sweep: &Sweep) -> String {
    let all = Mode::ALL.len() * Slots::all().count() * Held::all().count();
    let runs = match sweep.runs.len() {
        n if n < all => format!("{n} of {all} policy runs"),
        n => format!("{n} policy runs"),
    };
    let mut out = format!(
        "isolation-lab sweep: {runs}, each on its own {} server\n",
        sweep.front.name(),
    );
    if !sweep.executor.is_default() {
        let shape = format!(
            "With{}: {}.",
            sweep.executor.flags(),
            sweep.executor.describe(sweep.front)
        );
        out.push_str(&wrap(&shape, "", "  ", 80));
    }
    for mode in Mode::ALL {
        let _ = writeln!(out, "\n{}", describe(mode));
        let mut rows = vec![row("", Held::all().map(|h| format!("held {h}")))];
        for slots in Slots::all() {
            let cells = Held::all().map(|held| {
                let run = sweep
                    .runs
                    .iter()
                    .find(|r| (r.mode, r.slots, r.held) == (mode, slots, held));
                run.map_or_else(|| "not run".to_owned(), cell)
            });
            rows.push(row(format!("slots {slots}"), cells));
        }
        out.push_str(&columns(&rows));
    }
    out.push_str(
        "\nEach cell: slow requests admitted/refused, F1's status before release, and the\n\
         permits left idle while slow work was refused (- when none was refused).\n",
    );
    if !sweep.matches_model {
        out.push_str(
            "!: the run differed from the model or failed (below); ?: a step it never reached;\n\
             not run: after a run that failed, the sweep stopped.\n",
        );
    }
    // The marks a cell shows, each told only where some cell shows it.
    let shown = |mark: fn(&ExecutorOutcome) -> bool| {
        (sweep.runs.iter()).any(|run| run.outcome.executor.as_ref().is_some_and(mark))
    };
    let mut marks = Vec::new();
    if shown(|waiting| !waiting.unread.is_empty()) {
        marks.push(
            "u: requests unread until release, every worker blocked, and so neither admitted \
             nor refused before it (F1 (200): answered only after release)",
        );
    }
    if shown(|waiting| !waiting.queued.is_empty()) {
        marks.push("q: admitted work queued for a thread, its permit held");
    }
    if !marks.is_empty() {
        out.push_str(&wrap(&format!("{}.", marks.join("; ")), "", "", 80));
    }
    // A run that did not match carries its reason (`PolicyRun::reason`).
    let differing: Vec<(&SweepRun, &str)> = sweep
        .runs
        .iter()
        .filter_map(|run| Some((run, run.failure.as_deref()?)))
        .collect();
    if differing.is_empty() {
        let _ = writeln!(
            out,
            "All {} runs matched the policy model.",
            sweep.runs.len()
        );
    }
    for (run, reason) in differing {
        let (mode, slots, held) = (run.mode.name(), run.slots, run.held);
        let _ = writeln!(out, "! {mode} --slots {slots} --held {held}: {reason}");
    }
    out
}

fn describe(mode: Mode) -> &'static str {
    match mode {
        Mode::Shared => "shared: one pool of all the slots, for /slow and /fast",
        Mode::Partitioned => "partitioned: slots - 1 for /slow, one permit reserved for /fast",
    }
}

/// `2/1 503 0`: admitted/refused, F1's status, idle while refusing; `!` marks a run that
/// differed from the model or failed.
fn cell(run: &SweepRun) -> String {
    let outcome = &run.outcome;
    let count =
        |labels: &Option<Vec<_>>| labels.as_ref().map_or("?".into(), |l| l.len().to_string());
    let f1 = outcome
        .f1_before_release
        .as_ref()
        .map_or("?".into(), |f1| f1.status.to_string());
    let refused_any = outcome.refused_slow.as_ref().is_some_and(|r| !r.is_empty());
    let idle = match (
        &outcome.refused_slow,
        refused_any,
        outcome.idle_while_refused,
    ) {
        (None, ..) => "?".to_owned(),
        (_, false, _) => "-".to_owned(),
        (_, true, idle) => idle.map_or("?".into(), |n| n.to_string()),
    };
    let unread_f1 = (outcome.f1_before_release.as_ref()).is_some_and(|f1| f1.unread_until_release);
    let f1 = if unread_f1 { format!("({f1})") } else { f1 };
    // Queued slow work was admitted too, its permit held.
    let queued = outcome.executor.as_ref().map_or(0, |w| {
        let slow = w.queued.iter().filter(|l| matches!(l, Label::Slow(_)));
        slow.count()
    });
    let waiting = outcome.executor.as_ref().map_or(String::new(), |waiting| {
        let mut marks = String::new();
        if !waiting.unread.is_empty() {
            marks += &format!(" u{}", waiting.unread.len());
        }
        if !waiting.queued.is_empty() {
            marks += &format!(" q{queued}");
        }
        marks
    });
    let admitted = outcome
        .held_before_f1
        .as_ref()
        .map_or("?".into(), |held| (held.len() + queued).to_string());
    let flag = if run.matches_model { "" } else { " !" };
    format!(
        "{admitted}/{} {f1} {idle}{waiting}{flag}",
        count(&outcome.refused_slow)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::{BlockingThreads, Executor, WorkStyle, Workers};
    use crate::outcome::Outcome;
    use crate::policy::{Front, Policy};
    use crate::sweep::Sweep;

    /// The sweep the model predicts on `front` with `executor`: every run as it should go.
    fn predicted(front: Front, executor: Executor) -> Sweep {
        let mut runs = Vec::new();
        for mode in Mode::ALL {
            for (slots, held) in Slots::all().flat_map(|s| Held::all().map(move |h| (s, h))) {
                let outcome =
                    Outcome::predicted_on(Policy { mode, slots }, held, (front, executor));
                runs.push(SweepRun {
                    mode,
                    slots,
                    held,
                    outcome,
                    matches_model: true,
                    failure: None,
                    failed: false,
                });
            }
        }
        let matches_model = true;
        Sweep {
            front,
            executor,
            runs,
            matches_model,
        }
    }

    /// The legend tells a mark exactly where some cell shows it.
    #[test]
    fn the_legend_tells_only_the_marks_shown() {
        let shape = |work, workers, blocking| {
            let blocking = BlockingThreads::new(blocking).expect("in range");
            Executor::new(work, workers, blocking)
        };
        let one = Workers::CurrentThread;
        for (front, executor, unread, queued) in [
            (Front::Async, shape(WorkStyle::Block, one, 512), true, false),
            (
                Front::Async,
                shape(WorkStyle::SpawnBlocking, one, 1),
                false,
                true,
            ),
            (
                Front::Async,
                shape(WorkStyle::Await, Workers::Threads(2), 512),
                false,
                false,
            ),
            (
                Front::Threaded,
                Executor {
                    work: WorkStyle::Block,
                    ..Executor::default()
                },
                false,
                false,
            ),
        ] {
            let text = render(&predicted(front, executor));
            let cells = text.lines().filter(|l| l.starts_with("slots "));
            let cells: String = cells.collect();
            let said = format!("{front:?} {executor:?}:\n{text}");
            assert_eq!(cells.contains(" u"), unread, "{said}");
            assert_eq!(text.contains("u: requests unread"), unread, "{said}");
            assert_eq!(cells.contains(" q"), queued, "{said}");
            assert_eq!(text.contains("q: admitted work queued"), queued, "{said}");
        }
    }
}
