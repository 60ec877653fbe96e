//! A self-contained SVG picture of one run, for projecting in class. Per policy: a lane per
//! request on an axis of work-event order, the gate opening as a vertical line, and each pool's
//! permits below the lanes. Plain SVG 1.1, with no script and no font, image or link from
//! outside.
//!
//! The x-axis is the ledger's `seq`: an order, never a clock. A bar spans events, not a
//! duration; columns where responses arrived are wider only to make room for their statuses.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write};

use crate::admission::ledger::Event;
use crate::label::Label;
use crate::policy::Pool;
use crate::report::{PolicyReport, Report};

// Okabe–Ito colours, distinguishable with the common colour-vision deficiencies. Colour never
// carries a meaning alone: every mark also differs in shape, or is labelled in words.
const BLUE: &str = "#0072B2";
const SKY: &str = "#56B4E9";
const VERMILLION: &str = "#D55E00";
const INK: &str = "#1A1A1A";
const GREY: &str = "#6E6E6E";
const RULE: &str = "#C8C8C8";
const SHADE: &str = "#E8E8E8";

/// The picture's width, whether it holds one panel or two: a projector's.
const WIDTH: f64 = 1200.0;
const MARGIN: f64 = 30.0;
const PANEL_GAP: f64 = 40.0;
/// Room at the left of a panel for the lane and pool names.
const LABEL_WIDTH: f64 = 80.0;
const PANEL_TOP: f64 = 118.0;
/// Lanes start below the panel's title, its pools in words, and the gate labels.
const LANES_TOP: f64 = PANEL_TOP + 62.0;
const LANE_HEIGHT: f64 = 42.0;
const BAR_HEIGHT: f64 = 18.0;
const CELL_HEIGHT: f64 = 16.0;
const CELL_GAP: f64 = 3.0;
/// Extra steps for a column in which responses arrived, so their statuses fit.
const ANSWER_ROOM: f64 = 1.0;
const BADGE_WIDTH: f64 = 36.0;
const LEGEND_ROW: f64 = 30.0;

const TITLE: Type = Type::size(26.0).bold();
const BODY: Type = Type::size(15.0);
const HEADING: Type = Type::size(21.0).bold();
const NAME: Type = Type::size(17.0).bold();
const POOL_NAME: Type = Type::size(15.0).bold();
const LABEL: Type = Type::size(14.0).bold();
const NOTE: Type = Type::size(12.0).colour(GREY);
const CELL_WORD: Type = Type::size(11.0).bold().anchor("middle");

/// Renders `report` as an SVG document: a title, one panel per policy side by side, and a
/// legend.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    draw(&mut out, report).expect("formatting into a String cannot fail");
    out
}

/// What happened to one request: the `seq` of each of its work events, and its responses.
#[derive(Debug)]
struct Lane {
    request: Label,
    admitted: Option<u64>,
    refused: Option<u64>,
    held: Option<u64>,
    finished: Option<u64>,
    /// `(after_event, status)` of each response its caller received.
    answers: Vec<(u64, u16)>,
}

/// One policy's panel: what to draw, and where its event axis lies.
#[derive(Debug)]
struct Panel<'a> {
    policy: &'a PolicyReport,
    lanes: Vec<Lane>,
    /// Each pool's taken permits from an event on: `(seq, taken per pool)`, starting with
    /// every permit free before the first event.
    occupancy: Vec<(u64, BTreeMap<Pool, usize>)>,
    gate: Option<u64>,
    /// Where the column of each `seq` starts, in steps from the axis origin, plus one entry
    /// for the axis end. The column of `seq` k holds what is true from event k until k + 1.
    columns: Vec<f64>,
    /// One step, in pixels.
    step: f64,
    left: f64,
    width: f64,
}

impl<'a> Panel<'a> {
    fn new(policy: &'a PolicyReport, left: f64, width: f64) -> Self {
        let responses = &policy.observed.responses;
        let answered: BTreeSet<u64> = responses.iter().map(|r| r.after_event).collect();
        let last_event = policy.work_events.iter().map(|e| e.seq).max();
        let last = last_event.max(answered.last().copied()).unwrap_or(0);
        let mut columns = vec![0.0];
        for seq in 0..=last {
            // Before the first event nothing happens: half a step shows it.
            let base = if seq == 0 { 0.5 } else { 1.0 };
            // Columns where responses arrived are wider. The axis is an order, not a scale,
            // so uneven columns claim nothing.
            let arrived = answered.contains(&seq);
            let room = if arrived { ANSWER_ROOM } else { 0.0 };
            columns.push(columns[columns.len() - 1] + base + room);
        }
        let steps = columns[columns.len() - 1];
        let events = &policy.work_events;
        let gate = events.iter().find(|e| e.event == Event::GateOpened);
        Panel {
            policy,
            lanes: lanes(policy),
            occupancy: occupancy(policy),
            gate: gate.map(|e| e.seq),
            columns,
            step: (width - LABEL_WIDTH - 8.0) / steps,
            left,
            width,
        }
    }

    /// The `seq` just past the last column: where the axis ends.
    fn end(&self) -> u64 {
        self.columns.len() as u64 - 1
    }

    /// Where the column of `seq` starts: for an event, where it happened.
    fn x(&self, seq: u64) -> f64 {
        let column = (seq as usize).min(self.columns.len() - 1);
        self.left + LABEL_WIDTH + self.columns[column] * self.step
    }

    fn pools_height(&self) -> f64 {
        let capacities = self.policy.pool_capacities.values();
        capacities.map(|&c| pool_height(c)).sum()
    }
}

fn pool_height(capacity: usize) -> f64 {
    (capacity as f64 * (CELL_HEIGHT + CELL_GAP)).max(38.0) + 14.0
}

/// The requests of a policy run in lane order (`Label`'s order: S1.., F1, S-after, F-after),
/// each with what happened to it. A request the model expects has a lane even when a failed
/// run never sent it.
fn lanes(policy: &PolicyReport) -> Vec<Lane> {
    let expected = policy.model.expected.iter().map(|e| e.request);
    let recorded = policy.work_events.iter().filter_map(|e| e.request);
    let answered = policy.observed.responses.iter().map(|r| r.request);
    let requests: BTreeSet<Label> = expected.chain(recorded).chain(answered).collect();
    let lane = |request| {
        let mut lane = Lane {
            request,
            admitted: None,
            refused: None,
            held: None,
            finished: None,
            answers: Vec::new(),
        };
        let events = policy.work_events.iter();
        for event in events.filter(|e| e.request == Some(request)) {
            let slot = match event.event {
                Event::Admitted => &mut lane.admitted,
                Event::Refused => &mut lane.refused,
                Event::Held => &mut lane.held,
                Event::Finished => &mut lane.finished,
                Event::GateOpened => continue,
            };
            slot.get_or_insert(event.seq);
        }
        let responses = policy.observed.responses.iter();
        let answers = responses.filter(|r| r.request == request);
        lane.answers = answers.map(|r| (r.after_event, r.status)).collect();
        lane
    };
    requests.into_iter().map(lane).collect()
}

fn occupancy(policy: &PolicyReport) -> Vec<(u64, BTreeMap<Pool, usize>)> {
    let pools = policy.pool_capacities.keys();
    let mut taken: BTreeMap<Pool, usize> = pools.map(|&p| (p, 0)).collect();
    let mut steps = vec![(0, taken.clone())];
    for event in &policy.work_events {
        // `active_after` is the event's own pool; the others keep their last value.
        taken.insert(event.pool, event.active_after);
        steps.push((event.seq, taken.clone()));
    }
    steps
}

fn draw(out: &mut String, report: &Report) -> fmt::Result {
    let count = report.policies.len().max(1) as f64;
    let panel_width = (WIDTH - 2.0 * MARGIN - (count - 1.0) * PANEL_GAP) / count;
    let panel = |(i, policy)| {
        let left = MARGIN + i as f64 * (panel_width + PANEL_GAP);
        Panel::new(policy, left, panel_width)
    };
    let panels: Vec<Panel> = report.policies.iter().enumerate().map(panel).collect();
    // Panels share their rows, so lanes and pools line up side by side.
    let lanes = panels.iter().map(|p| p.lanes.len()).max().unwrap_or(0);
    let pools_top = LANES_TOP + lanes as f64 * LANE_HEIGHT + 12.0;
    let pools_height = panels.iter().map(Panel::pools_height).fold(0.0, f64::max);
    let axis_y = pools_top + pools_height;
    let legend_top = axis_y + 64.0;
    let legend_rows = legend_layout().last().map_or(0, |&(row, _, _)| row + 1);
    let height = legend_top + legend_rows as f64 * LEGEND_ROW + 12.0;

    writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="DejaVu Sans, Verdana, Arial, sans-serif">"#
    )?;
    let inputs = &report.inputs;
    let command = format!(
        "--mode {} --slots {} --held {}",
        inputs.mode.name(),
        inputs.slots,
        inputs.held
    );
    let title = format!("isolation-lab {command}: who holds the work permits");
    writeln!(out, "<title>{}</title>", Escaped(&title))?;
    rect(out, (0.0, 0.0), (WIDTH, height), Paint::fill("white"))?;
    text(out, (MARGIN, 38.0), TITLE, "Work permits, event by event")?;
    let about = format!(
        "isolation-lab {} {command}. Left to right: the order of work events (seq), not time.",
        report.runner.version
    );
    text(out, (MARGIN, 64.0), BODY, &about)?;
    let verdict = match &report.failure {
        Some(reason) => format!("FAILED: {reason}"),
        None if report.matches_model => "Every observation matched the policy model.".to_owned(),
        None => "Observations differ from the policy model.".to_owned(),
    };
    let style = match report.matches_model {
        true => BODY,
        false => BODY.bold().colour(VERMILLION),
    };
    text(out, (MARGIN, 88.0), style, &verdict)?;
    for panel in &panels {
        draw_panel(out, panel, pools_top, axis_y)?;
    }
    draw_legend(out, legend_top)?;
    writeln!(out, "</svg>")
}

fn draw_panel(out: &mut String, panel: &Panel, pools_top: f64, axis_y: f64) -> fmt::Result {
    let policy = panel.policy;
    let mode = policy.mode.name();
    writeln!(out, r#"<g class="policy" data-mode="{}">"#, Escaped(mode))?;
    let left = panel.left;
    text(out, (left, PANEL_TOP), HEADING, &format!("{mode} mode"))?;
    let pools = pools_in_words(policy);
    text(out, (left, PANEL_TOP + 22.0), Type::size(14.0), &pools)?;

    // The closed gate shades everything before its opening, lanes and pools alike.
    let (top, bottom) = (LANES_TOP - 4.0, axis_y);
    let labels = LANES_TOP - 12.0;
    match panel.gate {
        Some(gate) => {
            let (x0, x) = (panel.x(0), panel.x(gate));
            rect(out, (x0, top), (x - x0, bottom - top), Paint::fill(SHADE))?;
            text(out, (x - 6.0, labels), LABEL.anchor("end"), "gate closed")?;
            text(out, (x + 6.0, labels), LABEL, "gate opened")?;
        }
        None => text(out, (panel.x(0), labels), LABEL, "the gate never opened")?,
    }
    for (i, lane) in panel.lanes.iter().enumerate() {
        draw_lane(out, panel, lane, LANES_TOP + i as f64 * LANE_HEIGHT)?;
    }
    let mut row_top = pools_top;
    for (&pool, &capacity) in &policy.pool_capacities {
        draw_pool(out, panel, (pool, capacity), row_top)?;
        row_top += pool_height(capacity);
    }
    if let Some(gate) = panel.gate {
        // Drawn after the lanes and pools, so nothing covers it.
        let x = panel.x(gate);
        let paint = Paint::line(INK, 3.0).dashed("8 5");
        writeln!(
            out,
            r#"<line class="gate" x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}" {paint}/>"#
        )?;
    }
    draw_axis(out, panel, axis_y)?;
    writeln!(out, "</g>")
}

/// Each pool with its permits and the routes that draw from it, in words.
fn pools_in_words(policy: &PolicyReport) -> String {
    let pools = policy.pool_capacities.iter().map(|(&pool, &capacity)| {
        let routes = policy.route_pools.iter().filter(|&(_, &p)| p == pool);
        let routes: Vec<&str> = routes.map(|(route, _)| route.path()).collect();
        let plural = if capacity == 1 { "" } else { "s" };
        let routes = routes.join(" and ");
        format!("{pool} pool: {capacity} permit{plural} for {routes}")
    });
    pools.collect::<Vec<_>>().join("; ")
}

fn draw_lane(out: &mut String, panel: &Panel, lane: &Lane, top: f64) -> fmt::Result {
    let request = lane.request;
    let name = request.to_string();
    writeln!(out, r#"<g class="lane" data-request="{}">"#, Escaped(&name))?;
    let (left, y, bottom) = (panel.left, top + LANE_HEIGHT / 2.0, top + LANE_HEIGHT);
    line(
        out,
        (left, bottom),
        (left + panel.width, bottom),
        Paint::line(RULE, 1.0),
    )?;
    text(out, (left + 4.0, y + 1.0), NAME, &name)?;
    text(out, (left + 4.0, y + 16.0), NOTE, request.route().path())?;

    if let Some(admitted) = lane.admitted {
        // The permit is taken from admission until the work finishes.
        let finished = lane.finished.unwrap_or(panel.end());
        let (x0, x1) = (panel.x(admitted), panel.x(finished));
        permit_bar(out, x0, y, x1 - x0)?;
        if let Some(held) = lane.held {
            // Held only while the gate is closed; once it opens the work goes on to finish.
            let until = panel.gate.map_or(finished, |g| g.min(finished));
            let (x0, x1) = (panel.x(held), panel.x(until));
            held_bar(out, x0, y, x1 - x0)?;
            if x1 - x0 > 96.0 {
                let style = Type::size(12.0).bold().colour("white").anchor("middle");
                text(out, ((x0 + x1) / 2.0, y + 4.5), style, "held at gate")?;
            }
        }
        admitted_mark(out, x0, y)?;
        if lane.finished.is_some() {
            finished_mark(out, x1, y)?;
        }
    }
    if let Some(refused) = lane.refused {
        let x = panel.x(refused);
        refused_mark(out, x, y)?;
        let style = LABEL.colour(VERMILLION).anchor("end");
        text(out, (x - 11.0, y + 5.0), style, "refused")?;
    }
    for &(after_event, status) in &lane.answers {
        // A response arrived after event `after_event` and before the next one: its badge
        // stays clear of both, and so of a gate line that follows.
        let (x0, x1) = (panel.x(after_event) + 9.0, panel.x(after_event + 1) - 4.0);
        let width = (x1 - x0).min(BADGE_WIDTH);
        answer_badge(out, x0 + width / 2.0, y, width, status)?;
    }
    writeln!(out, "</g>")
}

/// A pool's permits as stacked cells, one column per event: taken or free.
fn draw_pool(out: &mut String, panel: &Panel, pool: (Pool, usize), top: f64) -> fmt::Result {
    let (pool, capacity) = pool;
    let name = Escaped(pool.name());
    writeln!(out, r#"<g class="pool" data-pool="{name}">"#)?;
    text(out, (panel.left + 4.0, top + 16.0), POOL_NAME, pool.name())?;
    let size = format!("pool of {capacity}");
    text(out, (panel.left + 4.0, top + 32.0), NOTE, &size)?;
    let bottom = top + pool_height(capacity) - 14.0;
    let ends = panel.occupancy.iter().skip(1).map(|&(seq, _)| seq);
    let ends = ends.chain([panel.end()]);
    for ((from, taken), to) in panel.occupancy.iter().zip(ends) {
        let taken = taken.get(&pool).copied().unwrap_or(0);
        let (x0, x1) = (panel.x(*from) + 1.5, panel.x(to) - 1.5);
        // Where a request was refused, say why: its pool full, and any other pool's free
        // permits idle, because the refused request may not borrow them.
        let event = panel.policy.work_events.iter().find(|e| e.seq == *from);
        let refused = event.filter(|e| e.event == Event::Refused).map(|e| e.pool);
        for cell in 0..capacity {
            let y = bottom - (cell + 1) as f64 * (CELL_HEIGHT + CELL_GAP) + CELL_GAP;
            let paint = match (cell < taken, taken > capacity) {
                // A pool over its capacity is drawn in the warning colour, never hidden.
                (true, true) => Paint::fill(VERMILLION).stroke(INK, 1.0),
                (true, false) if refused == Some(pool) => Paint::fill(SKY).stroke(VERMILLION, 3.0),
                (true, false) => Paint::fill(SKY).stroke(BLUE, 1.0),
                (false, _) => Paint::fill("white").stroke(GREY, 1.0),
            };
            rect(out, (x0, y), (x1 - x0, CELL_HEIGHT), paint)?;
            let words = match refused {
                Some(p) if p == pool && cell + 1 == capacity => "full",
                Some(p) if p != pool && cell >= taken => "idle",
                _ => continue,
            };
            if x1 - x0 >= 24.0 {
                text(out, ((x0 + x1) / 2.0, y + 12.0), CELL_WORD, words)?;
            }
        }
    }
    writeln!(out, "</g>")
}

fn draw_axis(out: &mut String, panel: &Panel, y: f64) -> fmt::Result {
    let (x0, x1) = (panel.x(0), panel.x(panel.end()));
    line(out, (x0, y), (x1, y), Paint::line(INK, 1.5))?;
    for event in &panel.policy.work_events {
        let x = panel.x(event.seq);
        line(out, (x, y), (x, y + 5.0), Paint::line(INK, 1.0))?;
        let style = Type::size(12.0).anchor("middle");
        text(out, (x, y + 19.0), style, &event.seq.to_string())?;
    }
    let style = Type::size(13.0).colour(GREY).anchor("middle");
    let words = "work event seq: the order of events, not time";
    text(out, ((x0 + x1) / 2.0, y + 40.0), style, words)
}

/// A legend entry's sample: the same marks the panels draw.
#[derive(Clone, Copy, Debug)]
enum Sample {
    Permit,
    Held,
    Admitted,
    Finished,
    Refused,
    Answer,
    Cells,
    Gate,
}

const LEGEND: [(Sample, &str); 8] = [
    (Sample::Permit, "holds a work permit"),
    (Sample::Held, "held at the closed gate"),
    (Sample::Admitted, "admitted"),
    (Sample::Finished, "finished: permit back"),
    (Sample::Refused, "refused: 503 at once, not queued"),
    (Sample::Answer, "response, HTTP status"),
    (Sample::Cells, "pool permit: taken, free"),
    (Sample::Gate, "gate closed, then opened"),
];

impl Sample {
    /// Draws the sample in the 30 pixels right of `x`, centred on `y`.
    fn draw(self, out: &mut String, x: f64, y: f64) -> fmt::Result {
        match self {
            Sample::Permit => permit_bar(out, x, y, 30.0),
            Sample::Held => held_bar(out, x, y, 30.0),
            Sample::Admitted => admitted_mark(out, x + 15.0, y),
            Sample::Finished => finished_mark(out, x + 15.0, y),
            Sample::Refused => refused_mark(out, x + 15.0, y),
            Sample::Answer => answer_badge(out, x + 15.0, y, BADGE_WIDTH, 200),
            Sample::Cells => {
                let size = (13.0, CELL_HEIGHT);
                rect(out, (x, y - 8.0), size, Paint::fill(SKY).stroke(BLUE, 1.0))?;
                rect(
                    out,
                    (x + 16.0, y - 8.0),
                    size,
                    Paint::fill("white").stroke(GREY, 1.0),
                )
            }
            Sample::Gate => {
                rect(out, (x, y - 11.0), (14.0, 22.0), Paint::fill(SHADE))?;
                let paint = Paint::line(INK, 3.0).dashed("4 3");
                line(out, (x + 15.0, y - 11.0), (x + 15.0, y + 11.0), paint)
            }
        }
    }
}

/// Where each legend entry goes: `(row, x, entry)`, filling rows left to right.
fn legend_layout() -> Vec<(usize, f64, usize)> {
    let mut placed = Vec::new();
    let (mut row, mut x) = (0, MARGIN);
    for (i, (_, words)) in LEGEND.iter().enumerate() {
        // A generous estimate of the words' width at 14px, enough to keep entries apart.
        let entry = 38.0 + words.chars().count() as f64 * 7.6 + 26.0;
        if x + entry > WIDTH - MARGIN && x > MARGIN {
            row += 1;
            x = MARGIN;
        }
        placed.push((row, x, i));
        x += entry;
    }
    placed
}

fn draw_legend(out: &mut String, top: f64) -> fmt::Result {
    writeln!(out, r#"<g class="legend">"#)?;
    for (row, x, i) in legend_layout() {
        let (sample, words) = LEGEND[i];
        let y = top + row as f64 * LEGEND_ROW;
        sample.draw(out, x, y)?;
        text(out, (x + 38.0, y + 5.0), Type::size(14.0), words)?;
    }
    writeln!(out, "</g>")
}

fn permit_bar(out: &mut String, x: f64, y: f64, width: f64) -> fmt::Result {
    let paint = Paint::fill(SKY).stroke(BLUE, 1.5);
    rect(out, (x, y - BAR_HEIGHT / 2.0), (width, BAR_HEIGHT), paint)
}

fn held_bar(out: &mut String, x: f64, y: f64, width: f64) -> fmt::Result {
    let paint = Paint::fill(BLUE);
    rect(out, (x, y - BAR_HEIGHT / 2.0), (width, BAR_HEIGHT), paint)
}

/// An open circle where the request took its permit.
fn admitted_mark(out: &mut String, x: f64, y: f64) -> fmt::Result {
    let paint = Paint::fill("white").stroke(INK, 2.5);
    writeln!(out, r#"<circle cx="{x:.1}" cy="{y:.1}" r="6.5" {paint}/>"#)
}

/// A solid square where the work left the section.
fn finished_mark(out: &mut String, x: f64, y: f64) -> fmt::Result {
    rect(out, (x - 6.0, y - 6.0), (12.0, 12.0), Paint::fill(INK))
}

/// A cross where the request found no permit.
fn refused_mark(out: &mut String, x: f64, y: f64) -> fmt::Result {
    let (x0, x1, y0, y1) = (x - 7.0, x + 7.0, y - 7.0, y + 7.0);
    let paint = Paint::line(VERMILLION, 4.0);
    writeln!(
        out,
        r#"<path d="M{x0:.1},{y0:.1} L{x1:.1},{y1:.1} M{x0:.1},{y1:.1} L{x1:.1},{y0:.1}" {paint} stroke-linecap="round"/>"#
    )
}

/// The status a caller received, in a tag: a solid outline for a success, dashed otherwise.
fn answer_badge(out: &mut String, x: f64, y: f64, width: f64, status: u16) -> fmt::Result {
    let (colour, dash) = match status {
        200..=299 => (INK, ""),
        _ => (VERMILLION, "4 2"),
    };
    let paint = Paint::fill("white").stroke(colour, 2.0).dashed(dash);
    let (x0, y0) = (x - width / 2.0, y - 11.0);
    writeln!(
        out,
        r#"<rect x="{x0:.1}" y="{y0:.1}" width="{width:.1}" height="22" rx="4" {paint}/>"#
    )?;
    // As large as the badge allows: three digits take about 2.2 font sizes.
    let size = (width / 2.4).clamp(10.0, 13.0).floor();
    let style = Type::size(size).bold().colour(colour).anchor("middle");
    text(out, (x, y + size / 2.6), style, &status.to_string())
}

/// How a shape is painted: its fill, and its outline if it has one.
#[derive(Clone, Copy, Debug)]
struct Paint {
    fill: &'static str,
    stroke: Option<(&'static str, f64)>,
    dash: &'static str,
}

impl Paint {
    const fn fill(fill: &'static str) -> Self {
        Paint {
            fill,
            stroke: None,
            dash: "",
        }
    }

    /// A line, or an outline with nothing inside.
    const fn line(colour: &'static str, width: f64) -> Self {
        Paint::fill("none").stroke(colour, width)
    }

    const fn stroke(self, colour: &'static str, width: f64) -> Self {
        Paint {
            stroke: Some((colour, width)),
            ..self
        }
    }

    const fn dashed(self, dash: &'static str) -> Self {
        Paint { dash, ..self }
    }
}

impl fmt::Display for Paint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, r#"fill="{}""#, self.fill)?;
        if let Some((colour, width)) = self.stroke {
            write!(f, r#" stroke="{colour}" stroke-width="{width}""#)?;
        }
        if !self.dash.is_empty() {
            write!(f, r#" stroke-dasharray="{}""#, self.dash)?;
        }
        Ok(())
    }
}

/// How a piece of text is set.
#[derive(Clone, Copy, Debug)]
struct Type {
    size: f64,
    bold: bool,
    colour: &'static str,
    /// `start`, `middle` or `end`: which end of the text sits at its x.
    anchor: &'static str,
}

impl Type {
    const fn size(size: f64) -> Self {
        Type {
            size,
            bold: false,
            colour: INK,
            anchor: "start",
        }
    }

    const fn bold(self) -> Self {
        Type { bold: true, ..self }
    }

    const fn colour(self, colour: &'static str) -> Self {
        Type { colour, ..self }
    }

    const fn anchor(self, anchor: &'static str) -> Self {
        Type { anchor, ..self }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let weight = if self.bold { "bold" } else { "normal" };
        write!(
            f,
            r#"font-size="{}" font-weight="{weight}" fill="{}" text-anchor="{}""#,
            self.size, self.colour, self.anchor
        )
    }
}

fn rect(out: &mut String, (x, y): (f64, f64), (w, h): (f64, f64), paint: Paint) -> fmt::Result {
    let w = w.max(0.0);
    writeln!(
        out,
        r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" {paint}/>"#
    )
}

fn line(out: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), paint: Paint) -> fmt::Result {
    writeln!(
        out,
        r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" {paint}/>"#
    )
}

/// A text element. `words` is escaped here, so every piece of text passes through one door.
fn text(out: &mut String, (x, y): (f64, f64), style: Type, words: &str) -> fmt::Result {
    let words = Escaped(words);
    writeln!(out, r#"<text x="{x:.1}" y="{y:.1}" {style}>{words}</text>"#)
}

/// Text made safe for XML character data and quoted attribute values.
struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&apos;")?,
                // XML 1.0 forbids these control characters even as references: leave them out.
                c if c < ' ' && !matches!(c, '\t' | '\n' | '\r') => {}
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use roxmltree::{Document, Node};

    use super::*;
    use crate::policy::{Held, Inputs, ModeChoice, Slots};

    /// The picture parsed by a real XML parser: a well-formedness check that means something.
    fn parse(svg: &str) -> Document<'_> {
        Document::parse(svg).unwrap_or_else(|e| panic!("not well-formed XML: {e}"))
    }

    /// The elements named `tag` with `class` under `node`.
    fn classed<'a, 'i>(node: Node<'a, 'i>, tag: &str, class: &str) -> Vec<Node<'a, 'i>> {
        let matching = |n: &Node| n.tag_name().name() == tag && n.attribute("class") == Some(class);
        node.descendants().filter(matching).collect()
    }

    /// For every allowed input, both policies: the picture is well-formed, each policy's panel
    /// has one lane per request in order S1.., F1, S-after, F-after, and exactly one gate line;
    /// nothing in it reaches outside the file.
    #[tokio::test]
    async fn each_policy_has_its_lanes_and_one_gate_line() {
        for slots in Slots::all() {
            for held in Held::all() {
                let inputs = Inputs {
                    mode: ModeChoice::Both,
                    slots,
                    held,
                };
                let report = crate::run(inputs).await;
                assert!(report.matches_model, "{:?}", report.failure);
                let svg = render(&report);
                let context = format!("--slots {slots} --held {held}");
                let document = parse(&svg);
                let root = document.root();
                let panels = classed(root, "g", "policy");
                assert_eq!(panels.len(), report.policies.len(), "{context}");
                for (panel, policy) in panels.iter().zip(&report.policies) {
                    let lanes = classed(*panel, "g", "lane");
                    let lanes = lanes.iter().filter_map(|l| l.attribute("data-request"));
                    let lanes: Vec<_> = lanes.collect();
                    let requests = policy.model.expected.iter();
                    let expected: Vec<String> = requests.map(|e| e.request.to_string()).collect();
                    assert_eq!(lanes, expected, "{context} {:?}", policy.mode);
                    let gates = classed(*panel, "line", "gate").len();
                    assert_eq!(gates, 1, "{context} {:?}", policy.mode);
                }
                for node in root.descendants() {
                    let name = node.tag_name().name();
                    assert!(
                        !["script", "image", "foreignObject"].contains(&name),
                        "{context}"
                    );
                    let linked = node.attributes().any(|a| a.name() == "href");
                    assert!(!linked, "{context}: <{name}> links outside the file");
                }
            }
        }
    }

    /// Text from the report is escaped: a failure reason full of markup reads back, through a
    /// real parser, as the same text (less the control character XML cannot carry).
    #[tokio::test]
    async fn text_is_escaped() {
        let mut report = crate::run(Inputs::default()).await;
        report.failure = Some("shared: <script>x</script> & \"q\" 'a' \u{1}".to_owned());
        report.matches_model = false;
        let svg = render(&report);
        let document = parse(&svg);
        let texts = document.descendants().filter_map(|n| n.text());
        let failure = texts.into_iter().find(|t| t.starts_with("FAILED:"));
        let expected = "FAILED: shared: <script>x</script> & \"q\" 'a' ";
        assert_eq!(failure, Some(expected));
        let elements = document.descendants().map(|n| n.tag_name().name());
        assert!(!elements.into_iter().any(|name| name == "script"));
    }

    /// The five characters XML gives meaning to are all replaced.
    #[test]
    fn escaping_covers_the_five_xml_characters() {
        let escaped = Escaped(r#"a<b>&"c"'d'"#).to_string();
        assert_eq!(escaped, "a&lt;b&gt;&amp;&quot;c&quot;&apos;d&apos;");
    }
}
