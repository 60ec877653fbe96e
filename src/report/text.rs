//! The report for a person: the workshop's prediction table filled in with what actually
//! happened, one column per policy, then whether every observation matched the model.

use std::fmt::Write;

use crate::label::Label;
use crate::model::Phase;
use crate::report::{PolicyReport, Report};

/// Fills one policy's cell of a row from its report.
type Cell = fn(&PolicyReport) -> String;

/// The rows of the table: a heading and how to fill each policy's cell.
const ROWS: [(&str, Cell); 7] = [
    ("work permits", permits),
    ("held before F1", held_before_f1),
    ("refused slow requests", refused_slow),
    ("F1 before release", f1_before_release),
    ("after release", after_release),
    ("new probes S-after, F-after", probes),
    ("matches the model", matches),
];

/// Renders `report` as a short table, one column per policy.
pub fn render(report: &Report) -> String {
    let inputs = &report.inputs;
    let mut out = format!(
        "isolation-lab {}: --mode {} --slots {} --held {}\n\n",
        report.runner.version,
        inputs.mode.name(),
        inputs.slots,
        inputs.held
    );
    let header = std::iter::once(String::new())
        .chain(report.policies.iter().map(|p| p.mode.name().to_owned()));
    let mut rows = vec![header.collect::<Vec<_>>()];
    for (heading, cell) in ROWS {
        let cells = report.policies.iter().map(cell);
        rows.push(std::iter::once(heading.to_owned()).chain(cells).collect());
    }
    out.push_str(&table(&rows));
    out.push('\n');
    for policy in &report.policies {
        for mismatch in &policy.model.mismatches {
            let _ = writeln!(
                out,
                "{} differs from the model: {mismatch}",
                policy.mode.name()
            );
        }
    }
    match &report.failure {
        Some(reason) => {
            let _ = writeln!(out, "FAILED: {reason}");
        }
        None => out.push_str("Every observation matched the policy model.\n"),
    }
    out
}

/// Left-aligned columns, two spaces apart, no trailing spaces.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<width$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn labels(labels: impl IntoIterator<Item = Label>) -> String {
    let text: Vec<String> = labels.into_iter().map(|l| l.to_string()).collect();
    if text.is_empty() {
        "none".to_owned()
    } else {
        text.join(" ")
    }
}

fn not_reached() -> String {
    "not reached".to_owned()
}

fn permits(report: &PolicyReport) -> String {
    let pools = report.pool_capacities.iter();
    let pools: Vec<String> = pools.map(|(pool, n)| format!("{n} {pool}")).collect();
    pools.join(" + ")
}

fn held_before_f1(report: &PolicyReport) -> String {
    let snapshot = report.observed.observer_before_fast.as_ref();
    snapshot.map_or_else(not_reached, |s| labels(s.held_at_gate.iter().copied()))
}

fn refused_slow(report: &PolicyReport) -> String {
    let refused = report
        .observed
        .responses
        .iter()
        .filter(|r| matches!(r.request, Label::Slow(_)) && r.status == 503)
        .map(|r| r.request);
    match labels(refused) {
        none if none == "none" => none,
        refused => format!("{refused} (503)"),
    }
}

fn f1_before_release(report: &PolicyReport) -> String {
    let Some(f1) = &report.observed.fast_response_before_release else {
        return not_reached();
    };
    let decision = report.admissions.iter().find(|a| a.request == Label::F1);
    match (f1.status, decision) {
        (200, Some(a)) => format!("200 ({} permit)", a.pool),
        (503, Some(a)) => {
            let holders = a.held_by.iter().flatten().copied();
            format!("503 (held by {})", labels(holders))
        }
        (status, _) => status.to_string(),
    }
}

/// Groups responses by status, in order: `S1 S2: 200`.
fn by_status(responses: impl Iterator<Item = (Label, u16)>) -> String {
    let mut groups: Vec<(u16, Vec<Label>)> = Vec::new();
    for (request, status) in responses {
        match groups.iter_mut().find(|(s, _)| *s == status) {
            Some((_, requests)) => requests.push(request),
            None => groups.push((status, vec![request])),
        }
    }
    if groups.is_empty() {
        return not_reached();
    }
    let groups: Vec<String> = groups
        .into_iter()
        .map(|(status, requests)| format!("{}: {status}", labels(requests)))
        .collect();
    groups.join(", ")
}

fn after_release(report: &PolicyReport) -> String {
    let released = report
        .observed
        .responses
        .iter()
        .filter(|r| matches!(r.request, Label::Slow(_)) && r.phase == Phase::AfterRelease);
    by_status(released.map(|r| (r.request, r.status)))
}

fn probes(report: &PolicyReport) -> String {
    let probes = report
        .observed
        .responses
        .iter()
        .filter(|r| matches!(r.request, Label::SlowAfter | Label::FastAfter));
    let statuses: Vec<String> = probes.map(|r| r.status.to_string()).collect();
    if statuses.is_empty() {
        not_reached()
    } else {
        statuses.join(", ")
    }
}

fn matches(report: &PolicyReport) -> String {
    match report.model.mismatches.len() {
        0 => "yes".to_owned(),
        1 => "NO: 1 difference".to_owned(),
        n => format!("NO: {n} differences"),
    }
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
            table(&rows),
            "                shared  partitioned\nheld before F1  S1 S2   S1\n"
        );
    }

    #[test]
    fn responses_group_by_status_in_order() {
        let responses = [
            (Label::Slow(1), 200),
            (Label::Slow(2), 503),
            (Label::Slow(3), 200),
        ];
        assert_eq!(by_status(responses.into_iter()), "S1 S3: 200, S2: 503");
        assert_eq!(by_status(std::iter::empty()), "not reached");
    }
}
