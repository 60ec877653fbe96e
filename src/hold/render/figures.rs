//! The tables: N down the side; for each figure, the fronts side by side. The first gives time,
//! threads and drops, the second memory, so that each fits a terminal of 100 columns. The idle
//! row gives each front's child at rest; every other memory figure is per held request, against
//! it.

use super::reading::unreadable;
use super::{NOTE_WIDTH, count, figure, seconds, stopped_holding};
use crate::draw::table::wrap;
use crate::hold::{CountOutcome, DropScope, Figures, FrontSeries, HoldReport, Sample};

/// A column group: its heading, and its cell for a held count (its figures and N) and for the
/// idle baseline.
type Column = (
    &'static str,
    fn(&Figures, u32) -> String,
    fn(&Sample) -> String,
);

const NONE: fn(&Sample) -> String = |_| String::new();

/// Time, threads and drops.
const TIME: [Column; 5] = [
    ("hold s", |f, _| hold_seconds(f), NONE),
    (
        "CPU s callers",
        |f, _| seconds(f.callers_cpu_ms as f64),
        NONE,
    ),
    ("CPU s front", |f, _| seconds(f.front_cpu_ms as f64), NONE),
    (
        "OS threads",
        |f, _| f.process.procfs.os_threads.to_string(),
        |s| s.procfs.os_threads.to_string(),
    ),
    (
        "drops",
        |f, _| match f.listen_drops.scope {
            DropScope::FrontSocket => f.listen_drops.count.to_string(),
            DropScope::Machine => format!("{}*", f.listen_drops.count),
        },
        NONE,
    ),
];

/// Memory: the idle child's in all, then per held request.
const MEMORY: [Column; 4] = [
    ("RSS KiB/req", resident, |s| mib(s.procfs.rss_kib)),
    (
        "kstack/req*",
        |f, _| figure(f.per_request.kernel_stack_kib),
        NONE,
    ),
    (
        "VmSize/req",
        |f, _| figure(f.per_request.address_space_kib),
        |s| mib(s.procfs.address_space_kib),
    ),
    (
        "maps/req",
        |f, _| figure(f.per_request.memory_maps),
        |s| s.procfs.memory_maps.to_string(),
    ),
];

/// Resident memory per held request at `held`, in parentheses where the change in all is too
/// small to read per held request (`reading::unreadable`).
fn resident(f: &Figures, held: u32) -> String {
    let rss = f.per_request.rss_kib;
    match unreadable(rss, held) {
        Some(_) => format!("({})", figure(rss)),
        None => figure(rss),
    }
}

/// The time to hold, marked `†` if it counts time the lab itself was stopped.
fn hold_seconds(f: &Figures) -> String {
    let mark = if stopped_holding(f).is_some() {
        "†"
    } else {
        ""
    };
    format!("{}{mark}", seconds(f.time_to_hold_ms))
}

/// The heading, the tables, their notes and the ceilings.
pub(super) fn render(report: &HoldReport) -> String {
    let mut out = String::from(
        "isolation-lab hold: N requests held at the closed gate, each front in a child process\n",
    );
    for columns in [&TIME[..], &MEMORY[..]] {
        out.push('\n');
        out.push_str(&table(report, columns));
    }
    out.push('\n');
    for note in [
        "Idle: the front's child at rest. Per request (/req): the change from idle, divided by \
         N; memory in KiB.",
        "hold s: from the first request sent to the N-th held. CPU s: what the callers (the \
         lab's own process) and the front's child used over that time.",
        "RSS: resident memory. kstack: kernel stack. VmSize: address space. maps: memory maps. \
         drops: connections the front's listener dropped, a full accept queue among them.",
        "* machine-wide: every program's threads and listeners count, not only the front's.",
    ] {
        out.push_str(&wrap(note, "", "", NOTE_WIDTH));
    }
    let fronts = &report.fronts;
    let too_little = fronts
        .iter()
        .flat_map(|s| &s.points)
        .any(|point| match &point.outcome {
            CountOutcome::Held(f) => unreadable(f.per_request.rss_kib, point.held).is_some(),
            _ => false,
        });
    if too_little {
        out.push_str(&wrap(
            "(RSS): under 1 MiB in all, too little to read per held request: a front's first \
             requests move it a few hundred KiB either way.",
            "",
            "",
            NOTE_WIDTH,
        ));
    }
    let notes = notes(fronts);
    if !notes.is_empty() {
        out.push('\n');
        out.push_str(&notes);
    }
    let ceilings = ceilings(report);
    if !ceilings.is_empty() {
        out.push('\n');
        out.push_str(&wrap(&ceilings, "", "", NOTE_WIDTH));
    }
    out
}

/// A table of `columns`: N down the side, the idle row first; a count without figures says why
/// in the table's first group.
fn table(report: &HoldReport, columns: &[Column]) -> String {
    let mut side = vec![String::new(), "N".to_owned(), "0 (idle)".to_owned()];
    side.extend(report.counts.iter().map(|&n| count(u64::from(n))));
    let groups: Vec<Group> = columns
        .iter()
        .enumerate()
        .map(|(i, &(heading, held, idle))| {
            let cells = report.fronts.iter().map(|series| {
                let mut cells = vec![series.front.name().to_owned()];
                cells.push(series.baseline.as_ref().map_or("-".into(), idle));
                cells.extend((0..report.counts.len()).map(|at| cell(series, at, held, i == 0)));
                cells
            });
            (heading, cells.collect())
        })
        .collect();
    layout(&side, &groups)
}

/// A figure's column group: its heading over one column of cells per front, the first cell
/// being the front's name.
type Group = (&'static str, Vec<Vec<String>>);

/// The side column, then each group with its heading spanning its fronts' columns; cells are
/// right-aligned under their front's name.
fn layout(side: &[String], groups: &[Group]) -> String {
    let side_width = side.iter().map(|s| s.chars().count()).max().unwrap_or(0);
    let mut lines: Vec<String> = side.iter().map(|s| format!("{s:<side_width$}")).collect();
    for (heading, fronts) in groups {
        let mut widths: Vec<usize> = fronts
            .iter()
            .map(|cells| cells.iter().map(|c| c.chars().count()).max().unwrap_or(0))
            .collect();
        let spanned = widths.iter().sum::<usize>() + widths.len().saturating_sub(1);
        let heading_width = heading.chars().count();
        if let Some(last) = widths.last_mut() {
            *last += heading_width.saturating_sub(spanned);
        }
        let span = spanned.max(heading_width);
        lines[0].push_str(&format!("  {heading:<span$}"));
        for (row, line) in lines.iter_mut().enumerate().skip(1) {
            line.push(' ');
            for (cells, width) in fronts.iter().zip(&widths) {
                let cell = cells.get(row - 1).map_or("", String::as_str);
                line.push_str(&format!(" {cell:>width$}"));
            }
        }
    }
    let mut out = String::new();
    for line in lines {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// KiB as MiB, one decimal.
fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// A figure's cell; a count without figures says why in its first group only (the notes
/// below the table say more).
fn cell(
    series: &FrontSeries,
    at: usize,
    shown: fn(&Figures, u32) -> String,
    first: bool,
) -> String {
    let point = series.points.get(at);
    let why = match point.map(|p| (&p.outcome, p.held)) {
        Some((CountOutcome::Held(figures), held)) => return shown(figures, held),
        Some((CountOutcome::NotRun { .. }, _)) => "not run",
        Some((CountOutcome::FrontFailed(_), _)) => "FAILED",
        Some((CountOutcome::LabFailed { .. }, _)) => "lab failed",
        None => "-",
    };
    if first { why.into() } else { "-".into() }
}

/// A line for every count that gave no figures, saying why, and for every time to hold that
/// counts the lab's own absence.
fn notes(fronts: &[FrontSeries]) -> String {
    let mut out = String::new();
    for series in fronts {
        let front = series.front.name();
        for point in &series.points {
            let why = match &point.outcome {
                CountOutcome::Held(figures) => match stopped_holding(figures) {
                    Some(ms) => format!(
                        "† its hold s counts {} s in which the lab itself was stopped (Ctrl-Z, \
                         SIGSTOP)",
                        seconds(ms)
                    ),
                    None => continue,
                },
                CountOutcome::NotRun { reason } => format!("not run: {reason}"),
                CountOutcome::FrontFailed(failure) => {
                    let stderr = failure.exit.as_ref().and_then(|d| d.last_stderr.as_ref());
                    format!(
                        "the front FAILED while {} ({} held): {}{}",
                        failure.stage.words(),
                        count(failure.held_before),
                        failure.reason,
                        stderr.map_or(String::new(), |line| format!(
                            "; its last stderr line: {line}"
                        ))
                    )
                }
                CountOutcome::LabFailed { reason } => format!("the lab failed: {reason}"),
            };
            let note = format!("{front}, {}: {why}", count(u64::from(point.held)));
            out.push_str(&wrap(&note, "", "  ", NOTE_WIDTH));
        }
    }
    out
}

/// What each front can reach here, from the preflight.
fn ceilings(report: &HoldReport) -> String {
    let Some(preflight) = &report.preflight else {
        return String::new();
    };
    let reach: Vec<String> = preflight
        .reach
        .iter()
        .map(|(front, reach)| match reach {
            Some(reach) => format!(
                "{} {} ({} = {})",
                front.name(),
                count(reach.held),
                reach.ceiling,
                reach.value
            ),
            None => format!("{} unbounded by the ceilings read", front.name()),
        })
        .collect();
    let limits = &preflight.limits;
    format!(
        "Ceilings here (the most requests each front is given, each limit less what the front \
         uses before its first and a tenth in reserve): {}. Read: vm.max_map_count {}, \
         kernel.pid_max {}, kernel.threads-max {}, RLIMIT_NPROC {}, RLIMIT_NOFILE {}, ports \
         {}-{} per source address, net.core.somaxconn {}, RLIMIT_AS {}, RLIMIT_DATA {}.",
        reach.join(", "),
        limits.max_map_count,
        limits.pid_max,
        limits.threads_max,
        match (limits.nproc, limits.nproc_enforced) {
            (None, _) => "unlimited".into(),
            (Some(n), true) => n.to_string(),
            (Some(n), false) => format!("{n} (not enforced for this user)"),
        },
        limits.nofile.map_or("unlimited".into(), |n| n.to_string()),
        limits.local_ports[0],
        limits.local_ports[1],
        limits.somaxconn,
        limits
            .address_space
            .map_or("unlimited".into(), |n| format!("{n} bytes")),
        limits
            .data
            .map_or("unlimited".into(), |n| format!("{n} bytes")),
    )
}
