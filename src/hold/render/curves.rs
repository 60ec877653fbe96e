//! `hold` as a picture: six panels, one per figure, each front's curve against N on log–log
//! axes, and each front's ceiling here (from the preflight) as a dashed vertical line. Plain
//! SVG 1.1 with no script and nothing from outside; a `viewBox` as wide as a 1920-pixel
//! window and no text under 17 units, like the run's picture (`src/lab/render/picture.rs`).

use std::fmt::Write;

use super::{count, held_requests, seconds, stopped_holding};
use crate::draw::svg::{
    BLUE, FONT_FAMILY, GREY, Paint, RULE, Type, VERMILLION, rect, text, text_width, wrap,
};
use crate::hold::{CountOutcome, Figures, FrontSeries, HoldReport};
use crate::policy::Front;

const WIDTH: f64 = 1920.0;
const MARGIN: f64 = 32.0;
const GAP: f64 = 48.0;
const HEADER: f64 = 200.0;
const PANEL_HEIGHT: f64 = 430.0;
/// Room inside a panel: its title above the plot, tick labels left of and below it.
const TITLE_ROOM: f64 = 44.0;
const LEFT_ROOM: f64 = 86.0;
const BOTTOM_ROOM: f64 = 62.0;
const RIGHT_ROOM: f64 = 16.0;
const FOOTER: f64 = 70.0;

// No text is set below 17 units: 17 pixels in a 1920-pixel window.
const TITLE: Type = Type::size(34.0).bold();
const ABOUT: Type = Type::size(20.0).colour(GREY);
const LEGEND: Type = Type::size(20.0);
const PANEL_TITLE: Type = Type::size(24.0).bold();
const TICK_X: Type = Type::size(17.0).colour(GREY).anchor("middle");
const TICK_Y: Type = Type::size(17.0).colour(GREY).anchor("end").class("y-tick");
const AXIS: Type = Type::size(18.0).colour(GREY).anchor("middle");
const FOOT: Type = Type::size(18.0).colour(GREY);
const FAILED: Type = Type::size(20.0).bold().colour(VERMILLION);
/// The distance between the baselines of the failure's lines.
const FAILED_LINE: f64 = 28.0;

/// One figure drawn against N: its panel's title, and its value in a point's figures.
type Panel = (&'static str, fn(&Figures) -> f64);

const PANELS: [Panel; 6] = [
    ("Time to hold N (ms)", |f| f.time_to_hold_ms),
    ("OS threads", |f| f.process.procfs.os_threads as f64),
    ("Resident memory (MiB)", |f| {
        f.process.procfs.rss_kib as f64 / 1024.0
    }),
    ("Address space (MiB)", |f| {
        f.process.procfs.address_space_kib as f64 / 1024.0
    }),
    ("Memory maps", |f| f.process.procfs.memory_maps as f64),
    ("Kernel stack added (MiB, machine-wide)", |f| {
        f.kernel_stack_kib as f64 / 1024.0
    }),
];

pub(super) fn draw(out: &mut String, report: &HoldReport) -> std::fmt::Result {
    let rows = PANELS.len().div_ceil(3) as f64;
    // A run that failed says why first, in full, under the title, as the run's picture does;
    // the legend and the panels move down to make room.
    let failed = report.failure.as_ref().map_or_else(Vec::new, |reason| {
        wrap(&format!("FAILED: {reason}"), FAILED, WIDTH - 2.0 * MARGIN)
    });
    let failed_room = FAILED_LINE * failed.len() as f64;
    let header = HEADER + failed_room;
    let height = header + rows * PANEL_HEIGHT + (rows - 1.0) * GAP + FOOTER;
    writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" viewBox="0 0 {WIDTH} {height}" font-family="{FONT_FAMILY}" role="img">"#
    )?;
    writeln!(out, "<title>isolation-lab hold</title>")?;
    writeln!(
        out,
        r#"<rect width="{WIDTH}" height="{height}" fill="white"/>"#
    )?;
    text(
        out,
        (MARGIN, 50.0),
        TITLE,
        "What holding N requests costs each front",
    )?;
    text(
        out,
        (MARGIN, 86.0),
        ABOUT,
        "Each point: N requests held at the closed gate, the front in a child process of its own. \
         Both axes logarithmic. Dashed: the most the front is given here (preflight, with a margin).",
    )?;
    for (i, line) in failed.iter().enumerate() {
        text(out, (MARGIN, 122.0 + FAILED_LINE * i as f64), FAILED, line)?;
    }
    let ceilings = ceilings(report);
    legend(out, report, &ceilings, failed_room)?;
    // The axis range of N: the counts held and the ceilings, with some room.
    let counts = report.counts.iter().map(|&n| f64::from(n));
    // A run always has counts (`hold` refuses none); only a report with none falls back to a
    // decade.
    let x_range = range(counts.chain(ceilings.iter().map(|&(_, held, _)| held)));
    let x_range = x_range.unwrap_or((1.0, 10.0));
    let panel_width = (WIDTH - 2.0 * MARGIN - 2.0 * GAP) / 3.0;
    for (i, &panel) in PANELS.iter().enumerate() {
        let left = MARGIN + (i % 3) as f64 * (panel_width + GAP);
        let top = header + (i / 3) as f64 * (PANEL_HEIGHT + GAP);
        let at = (left, top, panel_width);
        draw_panel(out, report, &ceilings, panel, x_range, at)?;
    }
    let notes = footnote(report);
    text(out, (MARGIN, height - 28.0), FOOT, &notes)?;
    writeln!(out, "</svg>")
}

/// A line per front: its marker and curve, what a held request is there, and its ceiling.
fn legend(
    out: &mut String,
    report: &HoldReport,
    ceilings: &[FrontCeiling],
    failed_room: f64,
) -> std::fmt::Result {
    for (i, series) in report.fronts.iter().enumerate() {
        let y = 128.0 + failed_room + 32.0 * i as f64;
        let (colour, _) = style(series.front);
        writeln!(
            out,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{colour}" stroke-width="3"/>"#,
            MARGIN,
            y - 6.0,
            MARGIN + 36.0,
            y - 6.0
        )?;
        marker(out, series.front, MARGIN + 18.0, y - 6.0)?;
        let held = match series.front {
            Front::Async => "a held request parks a task",
            Front::Threaded => "a held request blocks a thread",
        };
        let words = format!("{} front: {held}", series.front.name());
        text(out, (MARGIN + 48.0, y), LEGEND, &words)?;
        let dash = MARGIN + 560.0;
        writeln!(
            out,
            r#"<line x1="{dash}" y1="{}" x2="{}" y2="{}" stroke="{colour}" stroke-width="2" stroke-dasharray="8 6"/>"#,
            y - 6.0,
            dash + 36.0,
            y - 6.0
        )?;
        let ceiling = ceilings.iter().find(|(f, _, _)| *f == series.front);
        let words = match ceiling {
            Some((_, held, name)) => format!(
                "its ceiling here: {}, set by {name}",
                held_requests(*held as u64)
            ),
            None => "no ceiling read applies".to_owned(),
        };
        text(out, (dash + 48.0, y), LEGEND, &words)?;
    }
    Ok(())
}

/// A front's ceiling: its front, the most requests, and the ceiling's name.
type FrontCeiling<'a> = (Front, f64, &'a str);

/// Each front's ceiling.
fn ceilings(report: &HoldReport) -> Vec<FrontCeiling<'_>> {
    let Some(preflight) = &report.preflight else {
        return Vec::new();
    };
    report
        .fronts
        .iter()
        .filter_map(|series| {
            let reach = preflight.reach.get(&series.front)?.as_ref()?;
            Some((series.front, reach.held as f64, reach.ceiling.as_str()))
        })
        .collect()
}

/// A log range around `values` (those above zero): a little beyond the smallest and largest;
/// none where no value is above zero.
fn range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (low, high) = values
        .filter(|v| *v > 0.0)
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if low > high {
        return None;
    }
    let (low, high) = (low / 1.6, high * 1.6);
    Some(if high / low < 10.0 {
        let middle = (low * high).sqrt();
        (middle / 3.2, middle * 3.2)
    } else {
        (low, high)
    })
}

/// One panel, at `(left, top)` and `width` wide.
fn draw_panel(
    out: &mut String,
    report: &HoldReport,
    ceilings: &[FrontCeiling],
    (title, value): Panel,
    x_range: (f64, f64),
    (left, top, width): (f64, f64, f64),
) -> std::fmt::Result {
    writeln!(out, r#"<g class="panel">"#)?;
    text(out, (left, top + 26.0), PANEL_TITLE, title)?;
    let plot = Plot {
        left: left + LEFT_ROOM,
        right: left + width - RIGHT_ROOM,
        top: top + TITLE_ROOM,
        bottom: top + PANEL_HEIGHT - BOTTOM_ROOM,
        x: x_range,
        y: range(
            report
                .fronts
                .iter()
                .flat_map(|s| s.held().map(|(_, f)| value(f))),
        ),
    };
    plot.axes(out)?;
    if plot.y.is_none() {
        // No value to draw, so no scale to invent: the panel says why it is empty.
        let held = report.fronts.iter().any(|s| s.held().next().is_some());
        let why = if held {
            "no value above zero"
        } else {
            "nothing was held"
        };
        let (x, y) = (
            (plot.left + plot.right) / 2.0,
            (plot.top + plot.bottom) / 2.0,
        );
        // On white, over the grid's lines.
        let width = text_width(why, AXIS) + 16.0;
        rect(
            out,
            (x - width / 2.0, y - 20.0),
            (width, 28.0),
            Paint::fill("white"),
        )?;
        text(out, (x, y), AXIS, why)?;
    }
    // A ceiling of none has no place on a log axis: the legend says it.
    for &(front, held, _) in ceilings.iter().filter(|&&(_, held, _)| held >= 1.0) {
        let (colour, _) = style(front);
        let x = plot.x_of(held);
        writeln!(
            out,
            r#"<line class="ceiling" x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="{colour}" stroke-width="2" stroke-dasharray="8 6"/>"#,
            plot.top, plot.bottom
        )?;
    }
    for series in &report.fronts {
        draw_series(out, series, value, &plot)?;
    }
    writeln!(out, "</g>")
}

fn draw_series(
    out: &mut String,
    series: &FrontSeries,
    value: fn(&Figures) -> f64,
    plot: &Plot,
) -> std::fmt::Result {
    let (colour, class) = style(series.front);
    let points: Vec<(f64, f64)> = series
        .held()
        .map(|(n, f)| (f64::from(n), value(f)))
        .filter(|&(_, v)| v > 0.0)
        .filter_map(|(n, v)| Some((plot.x_of(n), plot.y_of(v)?)))
        .collect();
    if points.len() > 1 {
        let path: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        writeln!(
            out,
            r#"<polyline class="{class}" points="{}" fill="none" stroke="{colour}" stroke-width="3"/>"#,
            path.join(" ")
        )?;
    }
    for &(x, y) in &points {
        marker(out, series.front, x, y)?;
    }
    for point in &series.points {
        if let CountOutcome::FrontFailed(_) = point.outcome {
            let x = plot.x_of(f64::from(point.held));
            let y = plot.top + 14.0;
            writeln!(
                out,
                r#"<path class="failed" d="M{:.1},{:.1} l16,16 m0,-16 l-16,16" stroke="{colour}" stroke-width="4"/>"#,
                x - 8.0,
                y - 8.0
            )?;
            let failed = Type::size(17.0).bold().colour(colour);
            text(out, (x + 12.0, y + 26.0), failed, "failed")?;
        }
    }
    Ok(())
}

/// A front's colour (the run's picture's Okabe–Ito palette) and class. Each front also has
/// its own marker shape ([`marker`]), so colour is never alone.
fn style(front: Front) -> (&'static str, &'static str) {
    match front {
        Front::Async => (BLUE, "async"),
        Front::Threaded => (VERMILLION, "threaded"),
    }
}

/// A circle for async, a square for threaded.
fn marker(out: &mut String, front: Front, x: f64, y: f64) -> std::fmt::Result {
    let (colour, class) = style(front);
    match front {
        Front::Async => writeln!(
            out,
            r#"<circle class="{class} point" cx="{x:.1}" cy="{y:.1}" r="7" fill="{colour}"/>"#
        ),
        Front::Threaded => writeln!(
            out,
            r#"<rect class="{class} point" x="{:.1}" y="{:.1}" width="13" height="13" fill="{colour}"/>"#,
            x - 6.5,
            y - 6.5
        ),
    }
}

/// Where a panel plots, and its log ranges.
struct Plot {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    x: (f64, f64),
    /// None where the panel has no value above zero to draw.
    y: Option<(f64, f64)>,
}

impl Plot {
    fn x_of(&self, value: f64) -> f64 {
        self.left + (self.right - self.left) * fraction(value, self.x)
    }

    fn y_of(&self, value: f64) -> Option<f64> {
        let y = self.y?;
        Some(self.bottom - (self.bottom - self.top) * fraction(value, y))
    }

    /// The frame, the ticks with their labels, and the x-axis title.
    fn axes(&self, out: &mut String) -> std::fmt::Result {
        let size = (self.right - self.left, self.bottom - self.top);
        rect(out, (self.left, self.top), size, Paint::line(RULE, 1.5))?;
        for tick in ticks(self.x) {
            let x = self.x_of(tick);
            writeln!(
                out,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{RULE}"/>"#,
                self.top, self.bottom
            )?;
            text(out, (x, self.bottom + 24.0), TICK_X, &label(tick))?;
        }
        // A panel with nothing to draw has no scale, so no ticks.
        let y_ticks = self.y.map_or_else(Vec::new, ticks).into_iter();
        for (tick, y) in y_ticks.filter_map(|tick| Some((tick, self.y_of(tick)?))) {
            writeln!(
                out,
                r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{RULE}"/>"#,
                self.left, self.right
            )?;
            text(out, (self.left - 8.0, y + 6.0), TICK_Y, &label(tick))?;
        }
        let middle = (self.left + self.right) / 2.0;
        text(out, (middle, self.bottom + 52.0), AXIS, "N held")
    }
}

/// Where `value` lies in a log `range`, from 0 to 1.
fn fraction(value: f64, (low, high): (f64, f64)) -> f64 {
    (value.ln() - low.ln()) / (high.ln() - low.ln())
}

/// Ticks at 1, 2 and 5 times the powers of ten in `range`; only the powers if that would make
/// too many.
fn ticks((low, high): (f64, f64)) -> Vec<f64> {
    let first = low.log10().floor() as i32;
    let last = high.log10().ceil() as i32;
    let all = |steps: &[f64]| -> Vec<f64> {
        (first..=last)
            .flat_map(|power| steps.iter().map(move |step| step * 10f64.powi(power)))
            .filter(|tick| (low..=high).contains(tick))
            .collect()
    };
    let fine = all(&[1.0, 2.0, 5.0]);
    if fine.len() <= 7 { fine } else { all(&[1.0]) }
}

/// A tick's label: `0.5`, `20`, `10 000`.
fn label(tick: f64) -> String {
    if tick >= 1.0 {
        count(tick.round() as u64)
    } else {
        format!("{tick}")
    }
}

/// Counts that gave no point, and why, in one line; and times to hold that count the lab's
/// own absence.
fn footnote(report: &HoldReport) -> String {
    let mut missing = Vec::new();
    let mut stopped = Vec::new();
    for series in &report.fronts {
        for point in &series.points {
            let what = match &point.outcome {
                CountOutcome::Held(figures) => {
                    if let Some(ms) = stopped_holding(figures) {
                        let (front, n) = (series.front.name(), count(u64::from(point.held)));
                        stopped.push(format!("{front} {n}, {} s", seconds(ms)));
                    }
                    continue;
                }
                CountOutcome::NotRun { .. } => "not run",
                CountOutcome::FrontFailed(_) => "the front failed",
                CountOutcome::LabFailed { .. } => "the lab failed",
            };
            missing.push(format!(
                "{} {}: {what}",
                series.front.name(),
                count(u64::from(point.held))
            ));
        }
    }
    let points = if report.fronts.is_empty() {
        "Nothing was held: no front was measured.".into()
    } else if missing.is_empty() {
        "Every count was held on every front. Values at or below zero (a machine-wide change) are not drawn.".into()
    } else {
        format!(
            "No point: {}. Values at or below zero are not drawn.",
            missing.join("; ")
        )
    };
    if stopped.is_empty() {
        points
    } else {
        let stopped = stopped.join("; ");
        format!("{points} Time to hold counts time the lab itself was stopped: {stopped}.")
    }
}
