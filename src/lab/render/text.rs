//! The report for a person: the workshop's prediction table, one column per policy, filled in
//! with what happened (or, for `predict`, with what the model expects).

use std::fmt::Write;

use crate::draw::table::{columns, joined, labels, plural, row, wrap};
use crate::executor::Executor;
use crate::lab::render::timeline;
use crate::label::Label;
use crate::outcome::{Answer, Outcome};
use crate::policy::Inputs;
use crate::report::Report;

/// Fills one policy's cell of a row.
type Cell = fn(&Outcome) -> String;

/// The rows of the table: a heading and how to fill each policy's cell.
const ROWS: [(&str, Cell); 7] = [
    ("work permits", permits),
    ("held before F1", held_before_f1),
    ("refused slow requests", refused_slow),
    ("F1 before release", f1_before_release),
    ("after release", after_release),
    ("new probes S-after, F-after", probes),
    ("permits idle while refusing", idle_while_refused),
];

/// Renders a run's report: the table, whether each policy matched the model, and why the run
/// failed if it did.
pub fn render(report: &Report) -> String {
    let title = format!("isolation-lab {}", report.runner.version);
    let mut out = heading(&title, &report.flags());
    if let Some(shape) = &report.runner.front_runtime {
        let shape = format!("The {} front: {shape}.", report.runner.front.name());
        out.push_str(&wrap(&shape, "", "  ", 80));
        out.push('\n');
    }
    // A failed run says what failed first, then what it reached.
    if let Some(reason) = &report.failure {
        // One line, as the lab's own failure line is: a reader can grep it whole.
        let _ = writeln!(out, "FAILED: {reason}");
        if let Some(not_run) = report.not_run() {
            out.push_str(&wrap(&not_run, "", "  ", 80));
        }
        out.push('\n');
    }
    let outcomes: Vec<Outcome> = report.policies.iter().map(Outcome::observed).collect();
    let verdicts = report
        .policies
        .iter()
        .map(|p| match p.model.mismatches.len() {
            0 => "yes".to_owned(),
            1 => "NO: 1 difference".to_owned(),
            n => format!("NO: {n} differences"),
        });
    let verdict = ("matches the model", verdicts.collect());
    out.push_str(&table(&outcomes, Some(verdict)));
    for policy in &report.policies {
        out.push('\n');
        out.push_str(&timeline::render(policy));
    }
    out.push('\n');
    if report.failure.is_none() {
        for policy in &report.policies {
            let (executor, front) = (&report.executor, report.runner.front);
            out.push_str(&super::waits::explain(policy, executor, front));
        }
    }
    for policy in &report.policies {
        let mode = policy.mode.name();
        match (report.stopped_short(), policy.model.mismatches.as_slice()) {
            (_, []) => {}
            // After a failure most differences only say that a later step never happened:
            // the first is told, and the report lists them all.
            (true, [first, rest @ ..]) => {
                let said = format!(
                    "{mode}: {} from the model, as the run stopped short (the JSON \
                     report's model.mismatches lists them); the first: {first}",
                    plural(rest.len() + 1, "difference")
                );
                out.push_str(&wrap(&said, "", "  ", 80));
            }
            (false, mismatches) => {
                for mismatch in mismatches {
                    let _ = writeln!(out, "{mode} differs from the model: {mismatch}");
                }
            }
        }
    }
    match (&report.failure, report.not_run()) {
        (Some(_), _) => {}
        (None, Some(not_run)) => out.push_str(&wrap(&not_run, "", "  ", 80)),
        (None, None) => out.push_str("Every observation matched the policy model.\n"),
    }
    out
}

/// Renders the model's prediction for `inputs`, for slow work that waits as `executor` says on
/// the async front: the same table, before any run.
pub fn prediction_on(inputs: &Inputs, executor: &Executor, outcomes: &[Outcome]) -> String {
    let flags = inputs.flags() + &executor.flags();
    let mut out = heading("isolation-lab predict", &flags);
    if !executor.is_default() {
        let shape = executor.describe(crate::policy::Front::Async);
        out.push_str(&wrap(&format!("The async front: {shape}."), "", "  ", 80));
        out.push('\n');
    }
    out.push_str(&table(outcomes, None));
    out.push_str("\nThe policy model's prediction: no server was started. Run the same inputs\n");
    out.push_str("without `predict` to compare it with what actually happens.\n");
    out
}

fn heading(title: &str, flags: &str) -> String {
    crate::draw::table::heading(title, flags, "") + "\n\n"
}

/// The table: one column per outcome, and an optional last row of given cells.
pub(crate) fn table(outcomes: &[Outcome], last: Option<(&str, Vec<String>)>) -> String {
    let mut rows = vec![row("", outcomes.iter().map(|o| o.mode.name().into()))];
    for (heading, cell) in ROWS {
        rows.push(row(heading, outcomes.iter().map(cell)));
    }
    if outcomes.iter().any(|o| o.executor.is_some()) {
        let cells = outcomes.iter().map(waiting_for_the_executor);
        rows.push(row("waiting for the executor", cells));
    }
    if let Some((heading, cells)) = last {
        rows.push(row(heading, cells));
    }
    columns(&rows)
}

/// A cell for a step a failed run never reached.
fn or_not_reached<T>(value: Option<&T>, cell: impl FnOnce(&T) -> String) -> String {
    value.map_or_else(|| "not reached".to_owned(), cell)
}

fn permits(outcome: &Outcome) -> String {
    let pools = outcome.pool_capacities.iter();
    let pools: Vec<String> = pools.map(|(pool, n)| format!("{n} {pool}")).collect();
    pools.join(" + ")
}

fn held_before_f1(outcome: &Outcome) -> String {
    or_not_reached(outcome.held_before_f1.as_ref(), |held| labels(held))
}

fn refused_slow(outcome: &Outcome) -> String {
    or_not_reached(outcome.refused_slow.as_ref(), |refused| {
        match refused.len() {
            0 => "none".to_owned(),
            _ => format!("{} (503)", labels(refused)),
        }
    })
}

fn f1_before_release(outcome: &Outcome) -> String {
    // A permit's holder queued for a thread is not held at the gate: its permit is taken.
    let queued = outcome
        .executor
        .as_ref()
        .map_or(&[][..], |e| e.queued.as_slice());
    // Seen unread, then the run failed before it was answered.
    if outcome.f1_before_release.is_none() && unread_f1(outcome) {
        return "no answer: unread".to_owned();
    }
    or_not_reached(outcome.f1_before_release.as_ref(), |f1| match f1.status {
        status if f1.unread_until_release => format!("no answer: unread ({status} after)"),
        200 => format!("200 ({} permit)", f1.pool),
        503 if f1.held_by.iter().any(|r| queued.contains(r)) => {
            format!("503 (permits taken by {})", labels(&f1.held_by))
        }
        503 => format!("503 (held by {})", labels(&f1.held_by)),
        status => status.to_string(),
    })
}

/// Groups answers by status, in order: `S1 S2: 200`.
fn by_status(answers: &[Answer]) -> String {
    let mut groups: Vec<(u16, Vec<Label>)> = Vec::new();
    for &Answer { request, status } in answers {
        match groups.iter_mut().find(|(s, _)| *s == status) {
            Some((_, requests)) => requests.push(request),
            None => groups.push((status, vec![request])),
        }
    }
    let groups = groups
        .iter()
        .map(|(status, requests)| format!("{}: {status}", labels(requests)));
    groups.collect::<Vec<_>>().join(", ")
}

fn after_release(outcome: &Outcome) -> String {
    or_not_reached(outcome.after_release.as_ref(), |answers| by_status(answers))
}

fn probes(outcome: &Outcome) -> String {
    or_not_reached(outcome.probes.as_ref(), |probes| {
        let statuses: Vec<String> = probes.iter().map(|a| a.status.to_string()).collect();
        statuses.join(", ")
    })
}

/// Whether F1 was seen waiting unread for the executor.
fn unread_f1(outcome: &Outcome) -> bool {
    (outcome.executor.as_ref()).is_some_and(|waiting| waiting.unread.contains(&Label::F1))
}

/// The requests the executor made wait: `S2 F1 unread`, `S3 queued`, or `none` once F1, the
/// last request sent before release, was answered or seen unread.
fn waiting_for_the_executor(outcome: &Outcome) -> String {
    let Some(waiting) = &outcome.executor else {
        return "-".to_owned();
    };
    let f1_reached = outcome.f1_before_release.is_some() || unread_f1(outcome);
    if waiting.unread.is_empty() && waiting.queued.is_empty() && !f1_reached {
        return "not reached".to_owned();
    }
    let mut parts = Vec::new();
    if !waiting.unread.is_empty() {
        parts.push(format!("{} unread", labels(&waiting.unread)));
    }
    if !waiting.queued.is_empty() {
        parts.push(format!("{} queued", labels(&waiting.queued)));
    }
    joined(parts, ", ")
}

fn idle_while_refused(outcome: &Outcome) -> String {
    let idle = outcome
        .idle_before_f1
        .as_ref()
        .zip(outcome.idle_while_refused);
    or_not_reached(idle.as_ref(), |&(idle, reserved)| {
        if reserved == 0 {
            return "none".to_owned();
        }
        let pools = idle.iter().filter(|&(_, &free)| free > 0);
        let pools: Vec<String> = pools.map(|(pool, free)| format!("{free} {pool}")).collect();
        pools.join(" + ")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_without_trailing_spaces() {
        let rows = vec![
            vec![String::new(), "shared".into(), "partitioned".into()],
            vec!["held before F1".into(), "S1 S2".into(), "S1".into()],
        ];
        assert_eq!(
            columns(&rows),
            "                shared  partitioned\nheld before F1  S1 S2   S1\n"
        );
    }

    /// The heading and the picture give the command that ran: a run on the threaded front says
    /// `--server threaded` (without it, the command would run the async front); the usual front
    /// needs no flag.
    #[test]
    fn the_command_shown_names_the_front_that_ran() {
        let saved = include_str!("../../../tests/fixtures/slots-2-held-2.json");
        let mut report: Report = serde_json::from_str(saved).expect("a report");
        let heading = "isolation-lab 0.1.0: --mode both --slots 2 --held 2\n";
        assert!(render(&report).starts_with(heading), "{}", render(&report));
        assert!(!super::super::picture::render(&report).contains("--server"));
        report.runner.front = crate::policy::Front::Threaded;
        let threaded = "isolation-lab 0.1.0: --mode both --slots 2 --held 2 --server threaded\n";
        assert!(render(&report).starts_with(threaded), "{}", render(&report));
        let picture = super::super::picture::render(&report);
        let command = "isolation-lab --mode both --slots 2 --held 2 --server threaded: who holds";
        assert!(picture.contains(command), "{picture}");
    }

    #[test]
    fn answers_group_by_status_in_order() {
        let answer = |n, status| Answer {
            request: Label::Slow(n),
            status,
        };
        let answers = [answer(1, 200), answer(2, 503), answer(3, 200)];
        assert_eq!(by_status(&answers), "S1 S3: 200, S2: 503");
        assert_eq!(by_status(&[]), "");
    }

    /// F1 refused while permits' holders wait for a thread, not at the gate: the cell says
    /// their permits are taken, not that they are held.
    #[test]
    fn f1_refused_by_queued_work_says_permits_taken() {
        use crate::executor::{BlockingThreads, Executor, WorkStyle, Workers};
        use crate::policy::{Front, Held, Inputs, Slots};
        let inputs = Inputs {
            slots: Slots::new(3).expect("3 slots"),
            held: Held::new(4).expect("4 held"),
            ..Inputs::default()
        };
        let own = Executor::new(
            WorkStyle::OwnRuntime,
            Workers::CurrentThread,
            BlockingThreads::default(),
        );
        let outcomes = crate::lab::predict_on(inputs, (Front::Async, own));
        let cells: Vec<String> = outcomes.iter().map(f1_before_release).collect();
        assert_eq!(cells[0], "503 (permits taken by S1 S2 S3)");
        let awaited = crate::lab::predict_on(inputs, (Front::Async, Executor::default()));
        let cells: Vec<String> = awaited.iter().map(f1_before_release).collect();
        assert_eq!(cells[0], "503 (held by S1 S2 S3)");
    }

    /// A policy that ran to its end and only differed from the model is not said to have
    /// failed or stopped short: each difference is told, and the policy after it did not run.
    #[test]
    fn a_run_that_only_differed_tells_every_difference() {
        let mut reports = crate::lab::fixtures::reports().into_iter();
        let mut report = reports
            .find(|r| r.inputs == crate::policy::Inputs::default())
            .expect("the default run is recorded");
        report.policies.truncate(1);
        let mismatches = vec![
            "F1: 200, expected 503".to_owned(),
            "S2: 503, expected 200".into(),
        ];
        report.policies[0].model.mismatches = mismatches.clone();
        let why = crate::report::differs(&mismatches).expect("a difference");
        report.failure = Some(format!("shared: {why}"));
        report.matches_model = false;
        assert!(!report.stopped_short());
        let text = render(&report);
        let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let not_run = "partitioned did not run: the shared policy differed from the model";
        assert!(words.contains(not_run), "{text}");
        for mismatch in &mismatches {
            assert!(
                text.contains(&format!("shared differs from the model: {mismatch}\n")),
                "{text}"
            );
        }
        assert!(!words.contains("stopped short"), "{text}");
        // The same report cut short by a stall is said to have failed.
        report.failure = Some("shared: stalled: no admission decision for S1".into());
        assert!(report.stopped_short());
        let words = render(&report)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(words.contains("the shared policy failed"), "{words}");
    }

    /// A failed run says what failed first, then which policy did not run; of the model's
    /// differences, which mostly say that later steps never happened, it tells the count and
    /// the first, and never that every observation matched.
    #[test]
    fn a_failed_run_says_its_failure_first() {
        let saved = include_str!("../../../tests/fixtures/block-out-of-descriptors.json");
        let report: Report = serde_json::from_str(saved).expect("a report");
        let reason = report.failure.clone().expect("a failed run");
        let text = render(&report);
        let failed = text
            .find(&format!("FAILED: {reason}\n"))
            .expect("the failure");
        let table = text.find("work permits").expect("the table");
        assert!(failed < table, "{text}");
        let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let not_run = "partitioned did not run: the shared policy failed, and the lab stops at \
                       the first that fails or differs from the model.";
        assert!(words.contains(not_run), "{text}");
        let first = &report.policies[0].model.mismatches[0];
        let count = report.policies[0].model.mismatches.len();
        let told = format!("shared: {count} differences from the model");
        assert!(
            words.contains(&told) && words.contains(first.as_str()),
            "{text}"
        );
        assert!(!words.contains("differs from the model:"), "{text}");
        assert!(!words.contains("matched"), "{text}");
        // F1 was seen unread, then the run failed before it was answered: it was reached.
        let row = |heading: &str| {
            let line = text.lines().find(|l| l.starts_with(heading));
            line.map(|l| l[heading.len()..].trim().to_owned())
        };
        assert_eq!(
            row("F1 before release").as_deref(),
            Some("no answer: unread")
        );
        let waiting = row("waiting for the executor");
        assert_eq!(waiting.as_deref(), Some("S2 F1 unread"));
        // A run that failed before sending anything saw nothing wait, and says not reached.
        let mut outcome = Outcome::observed(&report.policies[0]);
        let executor = outcome.executor.as_mut().expect("watched");
        executor.unread.clear();
        assert_eq!(waiting_for_the_executor(&outcome), "not reached");
        assert_eq!(f1_before_release(&outcome), "not reached");
    }
}
