//! `hold`'s report drawn for a person: tables with N down the side and both fronts side by
//! side, a reading computed from their figures, and an SVG of the curves against N.
//!
//! - `figures`: the text tables, their notes and the ceilings.
//! - `reading`: what the figures show, in sentences built from them.
//! - `curves`: the SVG of the curves on log axes, each front's ceiling as a line.

mod curves;
mod figures;
mod reading;
#[cfg(test)]
mod tests;

use crate::draw::table::thousands as count;
use crate::draw::table::wrap;
use crate::hold::{Figures, HoldReport};

/// How wide the text's sentences and notes run, in columns: within a terminal of 100, as the
/// tables are.
const NOTE_WIDTH: usize = 96;

/// The text report: the tables, their notes, the ceilings, and the reading. A run the lab
/// itself failed (interrupted, say) says so first, then shows only what it measured: no
/// reading.
pub fn text(report: &HoldReport) -> String {
    let mut out = figures::render(report);
    if let Some(failure) = &report.failure {
        return format!("FAILED: {failure}\n\n{out}");
    }
    let sections = [
        (
            "Where a held request's memory goes, at each front's largest count:",
            reading::breakdown(report),
        ),
        ("What the figures show:", reading::sentences(report)),
    ];
    for (heading, sentences) in sections.iter().filter(|(_, s)| !s.is_empty()) {
        out.push_str(&format!("\n{heading}\n"));
        for sentence in sentences {
            out.push_str(&wrap(sentence, "- ", "  ", NOTE_WIDTH));
        }
    }
    out
}

/// A count of held requests in the number it asks for, its thousands grouped: `1 held
/// request`, `14 680 held requests`.
fn held_requests(n: u64) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{} held request{s}", count(n))
}

/// The SVG picture.
pub fn svg(report: &HoldReport) -> String {
    let mut out = String::new();
    curves::draw(&mut out, report).expect("formatting into a String cannot fail");
    out
}

/// A figure with as many decimals as its size deserves: `0.25`, `16.0`, `2052`. A change too
/// small to show reads `0.00`, not `-0.00`.
fn figure(value: f64) -> String {
    // Chosen by the size as it will be shown: 9.996 shows as `10.0`, not `10.00`.
    let size = value.abs();
    let decimals = match size {
        999.95.. => 0,
        9.995.. => 1,
        _ => 2,
    };
    let shown = format!("{value:.decimals$}");
    match shown.strip_prefix('-') {
        Some(zero) if zero.bytes().all(|b| b == b'0' || b == b'.') => zero.to_owned(),
        _ => shown,
    }
}

/// How long the lab itself was stopped while it held, if it was: its time to hold counts that.
fn stopped_holding(f: &Figures) -> Option<f64> {
    f.lab_stopped
        .map(|stopped| stopped.holding_ms)
        .filter(|&ms| ms > 0.0)
}

/// Seconds from milliseconds: `0.21`, `14.3`.
fn seconds(ms: f64) -> String {
    let s = ms / 1000.0;
    if s >= 10.0 {
        format!("{s:.1}")
    } else {
        format!("{s:.2}")
    }
}
