//! A self-contained SVG picture of one run, for projecting in class. Per policy: a lane per
//! request on an axis of work-event order, the gate opening as a vertical line, and each pool's
//! permits below the lanes. Plain SVG 1.1, with no script and no font, image or link from
//! outside. It has a `viewBox` and no fixed size, so it scales to its window; the viewBox is as
//! wide as a 1920-pixel window, where a unit is a pixel and the smallest text is 17 pixels.
//!
//! The x-axis is the ledger's `seq`: an order, never a clock. Every event has a column of the
//! same width, so no gap between marks claims a duration. Labels are placed, not just drawn:
//! each goes where it stays inside its panel's plot and clear of every other mark on its lane.
//! A status with no room beside its mark moves to the nearest free stretch and says in words
//! which event it followed; a word the legend already gives is left out where it has no room.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write};
use std::iter;

use crate::admission::ledger::Event;
use crate::evidence::{ExecutorEvidence, Moment};
use crate::label::Label;
use crate::policy::Pool;
use crate::report::{PolicyReport, Report};

use crate::draw::svg::*;

/// The viewBox's width, whether it holds one panel or two: a 1920-pixel projector window's, so
/// there every size below is the size the room sees.
const WIDTH: f64 = 1920.0;
const MARGIN: f64 = 16.0;
const PANEL_GAP: f64 = 32.0;
/// Room at the left of a panel for the lane and pool names; the panel's plot starts after it.
const NAME_WIDTH: f64 = 96.0;
/// The widest a column gets, when a panel has few events.
const MAX_COLUMN: f64 = 160.0;
const LANE_HEIGHT: f64 = 52.0;
const BAR_HEIGHT: f64 = 22.0;
/// A bar's paint while its request holds a permit.
const PERMIT: Paint = Paint::fill(SKY).stroke(BLUE, 1.5);
/// A bar's paint while its work is held at the gate.
const HELD: Paint = Paint::fill(BLUE);
/// The admitted circle's radius.
const CIRCLE: f64 = 7.5;
/// Half the side of the finished square.
const SQUARE: f64 = 6.0;
/// Half the side of a refusal's cross.
const CROSS: f64 = 6.0;
/// Half the gate line's width.
const GATE_HALF: f64 = 1.5;
/// The room between a label and anything else on its line, its own mark included.
const CLEAR: f64 = 4.0;
const TAG_HEIGHT: f64 = 26.0;
/// Padding inside a tag, each side of its words.
const TAG_PAD: f64 = 4.0;
const CELL_HEIGHT: f64 = 24.0;
const CELL_GAP: f64 = 4.0;
/// A pool's row is at least this tall, for its name and its size in words.
const POOL_MIN_HEIGHT: f64 = 54.0;
const POOL_SPACING: f64 = 10.0;
const LEGEND_ROW: f64 = 38.0;

// No text is set below 17 units: 17 pixels in a 1920-pixel window, above the 16 a room at the
// back reads. Labels inside the plot are held to 17 by the width of a column, the rest larger.
const TITLE: Type = Type::size(34.0).bold();
const ABOUT: Type = Type::size(20.0);
const VERDICT: Type = Type::size(22.0).class("verdict");
const HEADING: Type = Type::size(28.0).bold();
const POOLS: Type = Type::size(20.0);
const GATE: Type = Type::size(19.0).bold().class("gate-label");
const NAME: Type = Type::size(21.0).bold().class("name");
const ROUTE: Type = Type::size(17.0).colour(GREY).class("name");
const POOL_NAME: Type = Type::size(20.0).bold().class("name");
const POOL_SIZE: Type = Type::size(17.0).colour(GREY).class("name");
const CELL_WORD: Type = Type::size(17.0).bold().anchor("middle");
const HELD_WORDS: Type = Type::size(17.0).bold().colour("white").anchor("middle");
const REFUSED: Type = Type::size(19.0).bold().colour(VERMILLION);
const STATUS: Type = Type::size(17.0).bold().anchor("middle");
const NOTE: Type = Type::size(17.0);
const CANCELLED: Type = Type::size(19.0).bold().colour(VERMILLION);
const SEQ: Type = Type::size(17.0).anchor("middle");
const CAPTION: Type = Type::size(18.0).colour(GREY).anchor("middle");
const LEGEND_WORDS: Type = Type::size(19.0);
/// The legend of the executor's marks (`--work`), below the usual legend.
const WAITING_LEGEND: &str = "Dashed outline: waiting for the executor";
/// What each word on a dashed outline means.
const UNREAD_LEGEND: &str = "unread: no worker was free to read the request";
const QUEUED_LEGEND: &str = "queued: admitted, its permit held, no thread to run its work";
/// The legend of the heartbeat lane, and of its red line where one is drawn.
const TICKS_LEGEND: &str = "ticks: the front runtime's heartbeat at each reading";
const STILL_LEGEND: &str = "red: no tick came while every worker was blocked";
const WAITING: Type = Type::size(17.0).bold().colour(INK).anchor("middle");
/// Said on a lane the run never reached.
const NOTHING: &str = "no event, no response";
/// Said under the event axis.
const AXIS_CAPTION: &str = "work event seq: the order of events, not time";
const BEAT: Type = Type::size(17.0).colour(GREY);

/// Renders `report` as an SVG document: a title, one panel per policy side by side, and a
/// legend.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    draw(&mut out, report).expect("formatting into a String cannot fail");
    out
}

/// What happened to one request: the `seq` of each of its work events, and its responses.
#[derive(Debug)]
struct RequestLane {
    request: Label,
    admitted: Option<u64>,
    refused: Option<u64>,
    held: Option<u64>,
    finished: Option<u64>,
    /// The work left the section cancelled: its caller disconnected or its handler panicked.
    cancelled: bool,
    /// `(after_event, status)` of each response its caller received.
    answers: Vec<(u64, u16)>,
    /// Waiting for the executor, not a permit (`--work`): from the event it was seen after to
    /// the one it ended at (`None`: it had not when the run ended), and the word for it
    /// (`unread`, `queued`).
    waiting: Option<(u64, Option<u64>, &'static str)>,
}

/// One policy's panel: what to draw, and where its event axis lies.
#[derive(Debug)]
struct Panel<'a> {
    policy: &'a PolicyReport,
    lanes: Vec<RequestLane>,
    /// Each pool's taken permits from an event on: `(seq, taken per pool)`, starting with
    /// every permit free before the first event.
    occupancy: Vec<(u64, BTreeMap<Pool, usize>)>,
    gate: Option<u64>,
    /// Where the heartbeat stood still from the last slow request held to the release, every
    /// worker blocked: the event it was read after. Told only of a run that did not fail.
    still: Option<u64>,
    /// The axis has one column for each `seq` from 1 through `last`.
    last: u64,
    /// Every column's width.
    column: f64,
    left: f64,
    /// Where the plot starts, right of the names: every mark and label of a lane or a pool
    /// stays between `plot_left` and `plot_right`.
    plot_left: f64,
    plot_right: f64,
}

impl<'a> Panel<'a> {
    fn new(policy: &'a PolicyReport, left: f64, width: f64, failed: bool) -> Self {
        let events = policy.work_events.iter().map(|e| e.seq);
        let answered = policy.observed.responses.iter().map(|r| r.after_event);
        let last = events.chain(answered).max().unwrap_or(0).max(1);
        let events = &policy.work_events;
        let gate = events.iter().find(|e| e.event == Event::GateOpened);
        // Marks sit at column centres. After the last centre the plot keeps room for the
        // finished square and status tag of the request that finishes there, or for the gate's
        // label if the gate opened last (when a failed run is closed).
        let mut tail = SQUARE + CLEAR + tag_width(200) + CLEAR;
        if gate.is_some_and(|g| g.seq == last) {
            tail = tail.max(GATE_HALF + 2.0 * CLEAR + text_width("gate opened", GATE));
        }
        let plot_left = left + NAME_WIDTH;
        // Few events do not stretch across the picture: a column is a step, not a span.
        let column = (width - NAME_WIDTH - tail) / (last as f64 - 0.5);
        let column = column.min(MAX_COLUMN);
        // A run that stopped before its first event still has room for its lanes' note and
        // the axis caption, which are centred on the plot.
        let least = text_width(AXIS_CAPTION, CAPTION).max(2.0 * CLEAR + text_width(NOTHING, NOTE));
        let plot_right = (plot_left + (last as f64 - 0.5) * column + tail).max(plot_left + least);
        let still = (policy.observed.executor.as_ref())
            .and_then(still)
            .filter(|_| !failed && gate.is_some());
        Panel {
            policy,
            lanes: lanes(policy),
            occupancy: occupancy(policy),
            gate: gate.map(|e| e.seq),
            still,
            last,
            column,
            left,
            plot_left,
            plot_right,
        }
    }

    /// The centre of the column of `seq`: where its event is marked.
    fn x(&self, seq: u64) -> f64 {
        let seq = seq.clamp(1, self.last);
        self.plot_left + (seq as f64 - 0.5) * self.column
    }

    /// The gate line's left edge, for a response that came after event `after_event`, before
    /// the gate opened; `None` for one after it, or where the gate never opened.
    fn before_gate(&self, after_event: u64) -> Option<f64> {
        let gate = self.gate.filter(|&gate| after_event < gate)?;
        Some(self.x(gate) - GATE_HALF)
    }

    /// Where the last column ends, within the plot.
    fn end(&self) -> f64 {
        (self.x(self.last) + self.column / 2.0).min(self.plot_right)
    }

    fn pools_height(&self) -> f64 {
        let capacities = self.policy.pool_capacities.values();
        capacities.map(|&c| pool_height(c)).sum()
    }
}

fn pool_height(capacity: usize) -> f64 {
    (capacity as f64 * (CELL_HEIGHT + CELL_GAP)).max(POOL_MIN_HEIGHT) + POOL_SPACING
}

/// The requests of a policy run in lane order (`Label`'s order: S1.., F1, S-after, F-after),
/// each with what happened to it. A request the model expects has a lane even when a failed
/// run never sent it.
fn lanes(policy: &PolicyReport) -> Vec<RequestLane> {
    let expected = policy.model.expected.iter().map(|e| e.request);
    let recorded = policy.work_events.iter().filter_map(|e| e.request);
    let answered = policy.observed.responses.iter().map(|r| r.request);
    let requests: BTreeSet<Label> = expected.chain(recorded).chain(answered).collect();
    let lane = |request| {
        let mut lane = RequestLane {
            request,
            admitted: None,
            refused: None,
            held: None,
            finished: None,
            cancelled: false,
            answers: Vec::new(),
            waiting: None,
        };
        let events = policy.work_events.iter();
        for event in events.filter(|e| e.request == Some(request)) {
            let slot = match event.event {
                Event::Admitted => &mut lane.admitted,
                Event::Refused => &mut lane.refused,
                Event::Held => &mut lane.held,
                Event::Finished => &mut lane.finished,
                Event::Started | Event::GateOpened => continue,
            };
            slot.get_or_insert(event.seq);
            lane.cancelled |= event.event == Event::Finished && event.cancelled;
        }
        let responses = policy.observed.responses.iter();
        let answers = responses.filter(|r| r.request == request);
        lane.answers = answers.map(|r| (r.after_event, r.status)).collect();
        if let Some(watched) = &policy.observed.executor {
            let unread = watched.unread.iter().find(|u| u.request == request);
            // Unread until read (admitted or refused), or to the end of a run that failed first.
            if let Some(unread) = unread {
                let read = lane.admitted.or(lane.refused);
                lane.waiting = Some((unread.after_event.max(1), read, "unread"));
            }
            let started = policy
                .work_events
                .iter()
                .find(|e| e.request == Some(request) && e.event == Event::Started);
            if let (true, Some(admitted), Some(started)) =
                (watched.queued.contains(&request), lane.admitted, started)
            {
                lane.waiting = Some((admitted, Some(started.seq), "queued"));
            }
        }
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

/// Where the rows of the panels lie, top to bottom: panels share them, so lanes and pools line
/// up side by side.
#[derive(Debug)]
struct Rows {
    /// The baseline of the panel headings.
    heading: f64,
    /// The baseline of the first line of each panel's pools in words.
    pools_words: f64,
    /// The baseline of the gate labels.
    gate_labels: f64,
    lanes_top: f64,
    /// Where the heartbeat lane starts, below the requests' lanes, when a panel has one.
    heartbeat_top: Option<f64>,
    pools_top: f64,
    axis: f64,
}

fn draw(out: &mut String, report: &Report) -> fmt::Result {
    let count = report.policies.len().max(1) as f64;
    let panel_width = (WIDTH - 2.0 * MARGIN - (count - 1.0) * PANEL_GAP) / count;
    let panel = |(i, policy)| {
        let left = MARGIN + i as f64 * (panel_width + PANEL_GAP);
        Panel::new(policy, left, panel_width, report.failure.is_some())
    };
    let panels: Vec<Panel> = report.policies.iter().enumerate().map(panel).collect();

    let mut verdict = match &report.failure {
        Some(reason) => format!("FAILED: {reason}"),
        None if report.matches_model => "Every observation matched the policy model.".to_owned(),
        None => "Observations differ from the policy model.".to_owned(),
    };
    if let Some(not_run) = report.not_run() {
        // Two sentences: a failure's reason has no full stop of its own.
        let stop = if verdict.ends_with('.') { "" } else { "." };
        verdict = format!("{verdict}{stop} {not_run}");
    }
    let verdict_style = match report.matches_model {
        true => VERDICT,
        false => VERDICT.bold().colour(VERMILLION),
    };
    // A long reason is wrapped, never cut off at the picture's edge.
    let verdict = wrap(&verdict, verdict_style, WIDTH - 2.0 * MARGIN);
    let pools_words: Vec<Vec<String>> = panels
        .iter()
        .map(|p| wrap(&pools_in_words(p.policy), POOLS, panel_width))
        .collect();
    let pools_lines = pools_words.iter().map(Vec::len).max().unwrap_or(1);
    // Panels share their rows, so lanes and pools line up side by side.
    let requests = panels.iter().map(|p| p.lanes.len()).max().unwrap_or(0);
    // A run on the front's own runtime read its heartbeat: one more lane, below the requests.
    let beats = report
        .policies
        .iter()
        .any(|p| p.observed.executor.is_some());
    let lanes = requests + usize::from(beats);
    let pools_height = panels.iter().map(Panel::pools_height).fold(0.0, f64::max);
    let entries = legend_layout(&panels);
    let legend_rows = entries.last().map_or(0, |&(row, _, _)| row + 1);

    // Baselines a line's height apart at least (DejaVu Sans spans 1.17 of its size), so no
    // two lines' boxes overlap.
    let verdict_y = |line: usize| 118.0 + 30.0 * line as f64;
    let heading = verdict_y(verdict.len().saturating_sub(1)) + 52.0;
    let pools_first = heading + 34.0;
    let gate_labels = pools_first + 26.0 * (pools_lines - 1) as f64 + 38.0;
    let lanes_top = gate_labels + 12.0;
    let pools_top = lanes_top + lanes as f64 * LANE_HEIGHT + 14.0;
    let axis = pools_top + pools_height;
    // The centre of the legend's first row.
    let legend = axis + 92.0;
    // What the executor's marks mean, each only in a picture that has it.
    let lanes = || panels.iter().flat_map(|p| &p.lanes);
    let drawn = |word| lanes().any(|l| l.waiting.is_some_and(|(_, _, w)| w == word));
    let words: Vec<&str> = [("unread", UNREAD_LEGEND), ("queued", QUEUED_LEGEND)]
        .into_iter()
        .filter(|&(word, _)| drawn(word))
        .map(|(_, legend)| legend)
        .collect();
    let mut said = Vec::new();
    if !words.is_empty() {
        said.push(format!("{WAITING_LEGEND} ({}).", words.join("; ")));
    }
    if beats {
        match panels.iter().any(|p| p.still.is_some()) {
            true => said.push(format!("{TICKS_LEGEND}; {STILL_LEGEND}.")),
            false => said.push(format!("{TICKS_LEGEND}.")),
        }
    }
    let executor_legend = match said.is_empty() {
        true => Vec::new(),
        false => wrap(&said.join(" "), LEGEND_WORDS, WIDTH - 2.0 * MARGIN),
    };
    let rows = Rows {
        heading,
        pools_words: pools_first,
        gate_labels,
        lanes_top,
        heartbeat_top: beats.then_some(lanes_top + requests as f64 * LANE_HEIGHT),
        pools_top,
        axis,
    };
    let legend_lines = legend_rows.max(1) - 1 + executor_legend.len();
    let height = (legend + legend_lines as f64 * LEGEND_ROW + 30.0).ceil();

    writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    // No fixed size: the viewBox scales to the window's width, the top kept at the top.
    writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="100%" viewBox="0 0 {WIDTH} {height}" preserveAspectRatio="xMidYMin meet" font-family="{FONT_FAMILY}">"#
    )?;
    let command = report.flags();
    let title = format!("isolation-lab {command}: who holds the work permits");
    writeln!(out, "<title>{}</title>", Escaped(&title))?;
    rect(out, (0.0, 0.0), (WIDTH, height), Paint::fill("white"))?;
    text(out, (MARGIN, 46.0), TITLE, "Work permits, event by event")?;
    let about = format!(
        "isolation-lab {} {command}. Left to right: the order of work events (seq), not time.",
        report.runner.version
    );
    text(out, (MARGIN, 84.0), ABOUT, &about)?;
    for (line, words) in verdict.iter().enumerate() {
        text(out, (MARGIN, verdict_y(line)), verdict_style, words)?;
    }
    for (panel, words) in panels.iter().zip(&pools_words) {
        draw_panel(out, panel, words, &rows)?;
    }
    draw_legend(out, &entries, legend)?;
    for (i, words) in executor_legend.iter().enumerate() {
        let y = legend + (legend_rows + i) as f64 * LEGEND_ROW + 7.0;
        text(
            out,
            (MARGIN, y),
            LEGEND_WORDS.class("executor-legend"),
            words,
        )?;
    }
    writeln!(out, "</svg>")
}

fn draw_panel(out: &mut String, panel: &Panel, pools_words: &[String], rows: &Rows) -> fmt::Result {
    let policy = panel.policy;
    let mode = policy.mode.name();
    writeln!(
        out,
        r#"<g class="policy" data-mode="{}" data-plot="{:.1} {:.1}">"#,
        Escaped(mode),
        panel.plot_left,
        panel.plot_right
    )?;
    let left = panel.left;
    text(out, (left, rows.heading), HEADING, &format!("{mode} mode"))?;
    for (i, line) in pools_words.iter().enumerate() {
        let y = rows.pools_words + 26.0 * i as f64;
        text(out, (left, y), POOLS, line)?;
    }

    // The closed gate shades everything before its opening, lanes and pools alike; its line
    // runs up between its two labels.
    let (top, bottom) = (rows.gate_labels - 20.0, rows.axis);
    let labels = rows.gate_labels;
    match panel.gate {
        Some(gate) => {
            let (x0, x) = (panel.plot_left, panel.x(gate));
            let shade_top = rows.lanes_top - 4.0;
            rect(
                out,
                (x0, shade_top),
                (x - x0, bottom - shade_top),
                Paint::fill(SHADE),
            )?;
            let closed = text_width("gate closed", GATE);
            let start = x - GATE_HALF - 2.0 * CLEAR - closed;
            if start >= panel.plot_left {
                text(out, (start, labels), GATE, "gate closed")?;
            }
            let start = x + GATE_HALF + 2.0 * CLEAR;
            if start + text_width("gate opened", GATE) <= panel.plot_right {
                text(out, (start, labels), GATE, "gate opened")?;
            }
        }
        None => text(
            out,
            (panel.plot_left, labels),
            GATE,
            "the gate never opened",
        )?,
    }
    for (i, lane) in panel.lanes.iter().enumerate() {
        draw_lane(out, panel, lane, rows.lanes_top + i as f64 * LANE_HEIGHT)?;
    }
    if let (Some(top), Some(watched)) = (rows.heartbeat_top, &policy.observed.executor) {
        draw_heartbeat(out, panel, watched, top)?;
    }
    let mut row_top = rows.pools_top;
    for (&pool, &capacity) in &policy.pool_capacities {
        draw_pool(out, panel, (pool, capacity), row_top)?;
        row_top += pool_height(capacity);
    }
    if let Some(gate) = panel.gate {
        // Drawn after the lanes and pools, so nothing covers it.
        let x = panel.x(gate);
        let paint = Paint::line(INK, 2.0 * GATE_HALF).dashed("8 5");
        writeln!(
            out,
            r#"<line class="gate" x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}" {paint}/>"#
        )?;
    }
    draw_axis(out, panel, rows.axis)?;
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

/// The stretches of one lane's line already taken by marks and labels, so that a label goes
/// only where it overlaps nothing and stays inside the plot.
#[derive(Debug)]
struct Row {
    from: f64,
    to: f64,
    taken: Vec<(f64, f64)>,
}

impl Row {
    fn new(from: f64, to: f64) -> Self {
        Row {
            from,
            to,
            taken: Vec::new(),
        }
    }

    fn take(&mut self, from: f64, to: f64) {
        self.taken.push((from, to));
    }

    /// `from..to` lies inside the row, and `CLEAR` or more from everything taken.
    fn fits(&self, from: f64, to: f64) -> bool {
        // Positions are sums of a few floats: a millionth of a unit is rounding, not overlap.
        const SLACK: f64 = 1e-6;
        let inside = from >= self.from - SLACK && to <= self.to + SLACK;
        let apart = |&(a, b): &(f64, f64)| to + CLEAR <= a + SLACK || from + SLACK >= b + CLEAR;
        inside && self.taken.iter().all(apart)
    }

    /// The start of the leftmost free stretch `width` wide that starts at `from` or later.
    fn right_of(&self, from: f64, width: f64) -> Option<f64> {
        let after = self.taken.iter().map(|&(_, b)| b + CLEAR);
        let mut starts: Vec<f64> = iter::once(from)
            .chain(after.filter(|&x| x > from))
            .collect();
        starts.sort_by(f64::total_cmp);
        starts.into_iter().find(|&x| self.fits(x, x + width))
    }

    /// The start of the rightmost free stretch `width` wide that ends at `to` or earlier.
    fn left_of(&self, to: f64, width: f64) -> Option<f64> {
        let before = self.taken.iter().map(|&(a, _)| a - CLEAR);
        let mut ends: Vec<f64> = iter::once(to).chain(before.filter(|&x| x < to)).collect();
        ends.sort_by(|a, b| b.total_cmp(a));
        let starts = ends.into_iter().map(|x| x - width);
        starts.into_iter().find(|&x| self.fits(x, x + width))
    }
}

/// A lane's rule and its two names, at `top`: its centre line, and its row with the gate line
/// already taken.
fn lane_frame(
    out: &mut String,
    panel: &Panel,
    top: f64,
    (name, below): (&str, &str),
) -> Result<(f64, Row), fmt::Error> {
    let (left, y, bottom) = (panel.left, top + LANE_HEIGHT / 2.0, top + LANE_HEIGHT);
    line(
        out,
        (left, bottom),
        (panel.plot_right, bottom),
        Paint::line(RULE, 1.0),
    )?;
    text(out, (left + 4.0, y - 3.0), NAME, name)?;
    text(out, (left + 4.0, y + 19.0), ROUTE, below)?;
    let mut row = Row::new(panel.plot_left, panel.plot_right);
    if let Some(gate) = panel.gate {
        let x = panel.x(gate);
        row.take(x - GATE_HALF, x + GATE_HALF);
    }
    Ok((y, row))
}

fn draw_lane(out: &mut String, panel: &Panel, lane: &RequestLane, top: f64) -> fmt::Result {
    let request = lane.request;
    let name = request.to_string();
    writeln!(out, r#"<g class="lane" data-request="{}">"#, Escaped(&name))?;
    let (y, mut row) = lane_frame(out, panel, top, (&name, request.route().path()))?;
    let mut finished_at = None;
    if let Some(admitted) = lane.admitted {
        // The permit is taken from admission until the work finishes.
        let x0 = panel.x(admitted);
        let x1 = lane.finished.map_or(panel.end(), |f| panel.x(f));
        bar(out, x0, y, x1 - x0, PERMIT)?;
        let square = if lane.finished.is_some() { SQUARE } else { 0.0 };
        row.take(x0 - CIRCLE, x1 + square);
        if let Some(held) = lane.held {
            // Held only while the gate is closed; once it opens the work goes on to finish.
            let until = panel.gate.map_or(x1, |g| panel.x(g).min(x1));
            let from = panel.x(held);
            bar(out, from, y, until - from, HELD)?;
            if text_width("held at gate", HELD_WORDS) + 2.0 * CLEAR <= until - from {
                text(
                    out,
                    ((from + until) / 2.0, y + 6.0),
                    HELD_WORDS,
                    "held at gate",
                )?;
            }
        }
        admitted_mark(out, x0, y)?;
        if lane.finished.is_some() {
            finished_mark(out, x1, y)?;
            finished_at = Some(x1 + SQUARE);
        }
    }
    if let Some((from, to, words)) = lane.waiting {
        // Waiting for a thread, not a permit: a dashed outline (over the permit bar when the
        // work holds one); the pools below show what sat free meanwhile.
        let (x0, x1) = (panel.x(from), to.map_or(panel.end(), |to| panel.x(to)));
        writeln!(out, r#"<g class="waiting" data-words="{words}">"#)?;
        let paint = Paint::fill("none").stroke(INK, 2.0).dashed("6 4");
        bar(out, x0, y, x1 - x0, paint)?;
        // Said inside the bar, before the gate line, where it fits clear of the marks.
        let until = panel.gate.map_or(x1, |g| panel.x(g).min(x1)) - GATE_HALF;
        let room = (x0 + CIRCLE + CLEAR, until - CLEAR);
        if text_width(words, WAITING) <= room.1 - room.0 {
            let centre = (room.0 + room.1) / 2.0;
            text(out, (centre, y + 6.0), WAITING, words)?;
        }
        writeln!(out, "</g>")?;
    }
    let mut answers = lane.answers.iter().copied();
    if let Some(refused) = lane.refused {
        // A refused request's response is its refusal's.
        let answer = answers.next();
        let gate = answer.and_then(|(after_event, _)| panel.before_gate(after_event));
        draw_refusal(out, &mut row, (panel.x(refused), y), answer, gate)?;
    }
    for answer in answers {
        let after = finished_at.unwrap_or(panel.plot_left - CLEAR);
        let gate = panel.before_gate(answer.0);
        draw_answer(out, &mut row, (after, y), answer, gate)?;
    }
    let nothing = lane.admitted.is_none()
        && lane.refused.is_none()
        && lane.answers.is_empty()
        && lane.waiting.is_none();
    if nothing {
        // A lane the model expects and the run never reached (it stopped first): say so, so
        // that an empty lane is not read as a request that waited.
        let start = panel.plot_left + CLEAR;
        if row.fits(start, start + text_width(NOTHING, NOTE)) {
            text(out, (start, y + 6.0), NOTE.colour(GREY), NOTHING)?;
        }
    }
    if let Some(after) = finished_at.filter(|_| lane.cancelled) {
        // Said after the square where there is room: the run's reason says it too.
        let words = text_width("cancelled", CANCELLED);
        if let Some(x) = row.right_of(after + CLEAR, words) {
            row.take(x, x + words);
            text(out, (x, y + 6.0), CANCELLED, "cancelled")?;
        }
    }
    writeln!(out, "</g>")
}

/// Where no tick came from the last slow request held to the release, with requests left
/// unread meanwhile: the event the stretch starts after.
fn still(watched: &ExecutorEvidence) -> Option<u64> {
    let still = watched.since_last_held();
    let released = still.last().map(|b| b.moment) == Some(Moment::Release);
    let ticked = still.iter().any(|b| b.ticks != still[0].ticks);
    (released && !watched.unread.is_empty() && !ticked).then(|| still[0].after_event)
}

/// The heartbeat of the front's runtime: its tick count at each reading, placed at the event it
/// followed, and, where no tick came from the last slow request held to the release (every
/// worker blocked), a line saying so.
fn draw_heartbeat(
    out: &mut String,
    panel: &Panel,
    watched: &ExecutorEvidence,
    top: f64,
) -> fmt::Result {
    writeln!(out, r#"<g class="heartbeat">"#)?;
    let (y, mut row) = lane_frame(out, panel, top, ("ticks", "runtime"))?;
    let beats = &watched.heartbeat;
    if let (Some(from), Some(gate)) = (panel.still, panel.gate) {
        let (x0, x1) = (panel.x(from), panel.x(gate) - GATE_HALF);
        let paint = Paint::line(VERMILLION, 4.0);
        writeln!(
            out,
            r#"<line class="still" x1="{x0:.1}" y1="{y:.1}" x2="{x1:.1}" y2="{y:.1}" {paint}/>"#
        )?;
        row.take(x0, x1);
    }
    // The last reading at each event: the ticks so far.
    let mut shown: Vec<(u64, u64)> = Vec::new();
    for beat in beats {
        match shown.last_mut() {
            Some(last) if last.0 == beat.after_event => last.1 = beat.ticks,
            _ => shown.push((beat.after_event, beat.ticks)),
        }
    }
    for (seq, ticks) in shown {
        let words = ticks.to_string();
        let width = text_width(&words, BEAT);
        let x = panel.x(seq) - width / 2.0;
        let spot = [x, x - width / 2.0 - CLEAR, x + width / 2.0 + CLEAR];
        if let Some(x) = spot.into_iter().find(|&x| row.fits(x, x + width)) {
            row.take(x, x + width);
            text(out, (x, y - 10.0), BEAT, &words)?;
        }
    }
    writeln!(out, "</g>")
}

/// A refusal at `x` and the status its caller got, as one badge centred on the refusal's
/// column, with the word "refused" beside it where there is room. Without a status, or without
/// room for the badge, the cross alone, and the status placed as any other.
fn draw_refusal(
    out: &mut String,
    row: &mut Row,
    (x, y): (f64, f64),
    answer: Option<(u64, u16)>,
    gate: Option<f64>,
) -> fmt::Result {
    if let Some((_, status)) = answer {
        let badge = badge_width(status);
        let x0 = x - badge / 2.0;
        if row.fits(x0, x0 + badge) {
            row.take(x0, x0 + badge);
            refusal_badge(out, x0, y, status)?;
            let words = text_width("refused", REFUSED);
            let sides = [x0 - CLEAR - words, x0 + badge + CLEAR];
            if let Some(x) = sides.into_iter().find(|&x| row.fits(x, x + words)) {
                row.take(x, x + words);
                text(out, (x, y + 6.0), REFUSED, "refused")?;
            }
            return Ok(());
        }
    }
    // A cross alone where the request found no permit.
    writeln!(out, r#"<g class="refused">"#)?;
    cross(out, x, y)?;
    writeln!(out, "</g>")?;
    row.take(x - CROSS, x + CROSS);
    match answer {
        Some(answer) => draw_answer(out, row, (x + CROSS, y), answer, gate),
        None => Ok(()),
    }
}

/// A response's status tag, beside the mark that ends at `after` when it fits there. Otherwise
/// (the gate line or the plot's edge in the way) it goes to the nearest free stretch with the
/// event it followed in words, so its place claims nothing; a response that came before the
/// gate opened stays on the closed side of the gate line, ending at `gate` or before, where
/// there is room, so its place does not say the opposite either.
fn draw_answer(
    out: &mut String,
    row: &mut Row,
    (after, y): (f64, f64),
    (after_event, status): (u64, u16),
    gate: Option<f64>,
) -> fmt::Result {
    let tag = tag_width(status);
    let beside = after + CLEAR;
    writeln!(out, r#"<g class="answer" data-status="{status}">"#)?;
    if row.fits(beside, beside + tag) {
        row.take(beside, beside + tag);
        answer_tag(out, beside, y, tag, status)?;
    } else {
        let words = format!("after event {after_event}");
        let room = tag + CLEAR + text_width(&words, NOTE);
        let closed_side = gate.and_then(|gate| row.left_of(gate, room));
        let place = closed_side.or_else(|| row.right_of(beside, room));
        if let Some(x) = place.or_else(|| row.left_of(row.to, room)) {
            row.take(x, x + room);
            answer_tag(out, x, y, tag, status)?;
            text(out, (x + tag + CLEAR, y + 6.0), NOTE, &words)?;
        }
    }
    writeln!(out, "</g>")
}

/// A pool's permits as stacked cells, one column per stretch between two events: taken or
/// free.
fn draw_pool(out: &mut String, panel: &Panel, pool: (Pool, usize), top: f64) -> fmt::Result {
    let (pool, capacity) = pool;
    let name = Escaped(pool.name());
    writeln!(out, r#"<g class="pool" data-pool="{name}">"#)?;
    text(out, (panel.left + 4.0, top + 22.0), POOL_NAME, pool.name())?;
    let size = format!("pool of {capacity}");
    text(out, (panel.left + 4.0, top + 45.0), POOL_SIZE, &size)?;
    let bottom = top + pool_height(capacity) - POOL_SPACING;
    // What is true from one event until the next: before the first event, between each two,
    // and after the last until the last column ends.
    let starts = panel.occupancy.iter().map(|(seq, _)| match seq {
        0 => panel.plot_left,
        &seq => panel.x(seq),
    });
    let ends = panel.occupancy.iter().skip(1).map(|&(seq, _)| panel.x(seq));
    let ends = ends.chain([panel.end()]);
    for (((from, taken), x0), x1) in panel.occupancy.iter().zip(starts).zip(ends) {
        let taken = taken.get(&pool).copied().unwrap_or(0);
        let (x0, x1) = (x0 + 1.5, x1 - 1.5);
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
            if text_width(words, CELL_WORD) + 4.0 <= x1 - x0 {
                text(out, ((x0 + x1) / 2.0, y + 18.0), CELL_WORD, words)?;
            }
        }
    }
    writeln!(out, "</g>")
}

/// The axis: a tick and a number at the centre of every event's column.
fn draw_axis(out: &mut String, panel: &Panel, y: f64) -> fmt::Result {
    let (x0, x1) = (panel.plot_left, panel.plot_right);
    line(out, (x0, y), (x1, y), Paint::line(INK, 1.5))?;
    for seq in 1..=panel.last {
        let x = panel.x(seq);
        let paint = Paint::line(INK, 1.0);
        writeln!(
            out,
            r#"<line class="tick" data-seq="{seq}" x1="{x:.1}" y1="{y:.1}" x2="{x:.1}" y2="{:.1}" {paint}/>"#,
            y + 6.0
        )?;
        text(out, (x, y + 24.0), SEQ, &seq.to_string())?;
    }
    text(out, ((x0 + x1) / 2.0, y + 52.0), CAPTION, AXIS_CAPTION)
}

/// A legend entry's sample: the same marks the panels draw.
#[derive(Clone, Copy, Debug)]
enum LegendMark {
    Permit,
    Held,
    Admitted,
    Finished,
    Refused,
    Answer,
    Cells,
    Gate,
}

const LEGEND: [(LegendMark, &str); 8] = [
    (LegendMark::Permit, "holds a work permit"),
    (LegendMark::Held, "held at the closed gate"),
    (LegendMark::Admitted, "admitted"),
    (LegendMark::Finished, "finished: permit back"),
    (LegendMark::Refused, "refused: 503 at once, not queued"),
    (LegendMark::Answer, "response, HTTP status"),
    (LegendMark::Cells, "pool permit: taken, free"),
    (LegendMark::Gate, "gate closed, then opened"),
];

impl LegendMark {
    /// Whether the mark is drawn in any of `panels`, so its entry has something to explain.
    fn drawn_in(self, panels: &[Panel]) -> bool {
        let lanes = || panels.iter().flat_map(|p| &p.lanes);
        match self {
            LegendMark::Permit | LegendMark::Admitted => lanes().any(|l| l.admitted.is_some()),
            LegendMark::Held => lanes().any(|l| l.held.is_some()),
            LegendMark::Finished => lanes().any(|l| l.finished.is_some()),
            LegendMark::Refused => lanes().any(|l| l.refused.is_some()),
            // A refusal's response is its badge (or, with no room for one, a tag beside the
            // cross, which the refusal's entry explains too).
            LegendMark::Answer => {
                lanes().any(|l| l.answers.len() > usize::from(l.refused.is_some()))
            }
            LegendMark::Cells => true,
            LegendMark::Gate => panels.iter().any(|p| p.gate.is_some()),
        }
    }

    /// How wide the sample is.
    fn width(self) -> f64 {
        match self {
            LegendMark::Permit | LegendMark::Held => 40.0,
            LegendMark::Admitted => 2.0 * CIRCLE,
            LegendMark::Finished => 2.0 * SQUARE,
            LegendMark::Refused => badge_width(503),
            LegendMark::Answer => tag_width(200),
            LegendMark::Cells => 32.0,
            LegendMark::Gate => 24.0,
        }
    }

    /// Draws the sample from `x` rightwards, centred on `y`.
    fn draw(self, out: &mut String, x: f64, y: f64) -> fmt::Result {
        match self {
            LegendMark::Permit => bar(out, x, y, 40.0, PERMIT),
            LegendMark::Held => bar(out, x, y, 40.0, HELD),
            LegendMark::Admitted => admitted_mark(out, x + CIRCLE, y),
            LegendMark::Finished => finished_mark(out, x + SQUARE, y),
            LegendMark::Refused => refusal_badge(out, x, y, 503),
            LegendMark::Answer => answer_tag(out, x, y, tag_width(200), 200),
            LegendMark::Cells => {
                let size = (14.0, CELL_HEIGHT);
                rect(out, (x, y - 12.0), size, Paint::fill(SKY).stroke(BLUE, 1.0))?;
                rect(
                    out,
                    (x + 18.0, y - 12.0),
                    size,
                    Paint::fill("white").stroke(GREY, 1.0),
                )
            }
            LegendMark::Gate => {
                rect(out, (x, y - 13.0), (16.0, 26.0), Paint::fill(SHADE))?;
                let paint = Paint::line(INK, 2.0 * GATE_HALF).dashed("5 3");
                line(out, (x + 17.0, y - 13.0), (x + 17.0, y + 13.0), paint)
            }
        }
    }
}

/// The entries of the marks drawn in `panels`, each with where it goes: `(row, x, entry)`,
/// filling rows left to right.
fn legend_layout(panels: &[Panel]) -> Vec<(usize, f64, (LegendMark, &'static str))> {
    let mut placed = Vec::new();
    let (mut row, mut x) = (0, MARGIN);
    let shown = LEGEND.into_iter().filter(|(mark, _)| mark.drawn_in(panels));
    for (sample, words) in shown {
        let entry = sample.width() + 10.0 + text_width(words, LEGEND_WORDS);
        if x + entry > WIDTH - MARGIN && x > MARGIN {
            row += 1;
            x = MARGIN;
        }
        placed.push((row, x, (sample, words)));
        x += entry + 40.0;
    }
    placed
}

fn draw_legend(
    out: &mut String,
    entries: &[(usize, f64, (LegendMark, &str))],
    top: f64,
) -> fmt::Result {
    writeln!(out, r#"<g class="legend">"#)?;
    for &(row, x, (sample, words)) in entries {
        let y = top + row as f64 * LEGEND_ROW;
        sample.draw(out, x, y)?;
        text(
            out,
            (x + sample.width() + 10.0, y + 7.0),
            LEGEND_WORDS,
            words,
        )?;
    }
    writeln!(out, "</g>")
}

/// A bar on a lane's line from `x` rightwards: a permit held, work held at the gate, or
/// waiting for the executor.
fn bar(out: &mut String, x: f64, y: f64, width: f64, paint: Paint) -> fmt::Result {
    rect(out, (x, y - BAR_HEIGHT / 2.0), (width, BAR_HEIGHT), paint)
}

/// An open circle where the request took its permit.
fn admitted_mark(out: &mut String, x: f64, y: f64) -> fmt::Result {
    let paint = Paint::fill("white").stroke(INK, 2.5);
    writeln!(
        out,
        r#"<circle class="admitted" cx="{x:.1}" cy="{y:.1}" r="{CIRCLE}" {paint}/>"#
    )
}

/// A solid square where the work left the section.
fn finished_mark(out: &mut String, x: f64, y: f64) -> fmt::Result {
    let (x0, y0, side) = (x - SQUARE, y - SQUARE, 2.0 * SQUARE);
    writeln!(
        out,
        r#"<rect class="finished" x="{x0:.1}" y="{y0:.1}" width="{side:.1}" height="{side:.1}" fill="{INK}"/>"#
    )
}

fn cross(out: &mut String, x: f64, y: f64) -> fmt::Result {
    let (x0, x1, y0, y1) = (x - CROSS, x + CROSS, y - CROSS, y + CROSS);
    let paint = Paint::line(VERMILLION, 4.0);
    writeln!(
        out,
        r#"<path d="M{x0:.1},{y0:.1} L{x1:.1},{y1:.1} M{x0:.1},{y1:.1} L{x1:.1},{y0:.1}" {paint} stroke-linecap="round"/>"#
    )
}

fn tag_width(status: u16) -> f64 {
    text_width(&status.to_string(), STATUS) + 2.0 * TAG_PAD
}

/// How wide a refusal's badge is: a cross, then the status.
fn badge_width(status: u16) -> f64 {
    TAG_PAD + 2.0 * CROSS + CLEAR + tag_width(status)
}

/// The status a caller received, in a tag from `x` rightwards: a solid outline for a success,
/// dashed otherwise.
fn answer_tag(out: &mut String, x: f64, y: f64, width: f64, status: u16) -> fmt::Result {
    let colour = status_colour(status);
    tag_outline(out, x, y, width, status)?;
    let style = STATUS.colour(colour);
    text(out, (x + width / 2.0, y + 6.0), style, &status.to_string())
}

/// A refusal with the status its caller got, in one tag from `x` rightwards: a cross, then
/// the status.
fn refusal_badge(out: &mut String, x: f64, y: f64, status: u16) -> fmt::Result {
    let width = badge_width(status);
    writeln!(out, r#"<g class="refusal" data-status="{status}">"#)?;
    tag_outline(out, x, y, width, status)?;
    cross(out, x + TAG_PAD + CROSS + 2.0, y)?;
    let digits = tag_width(status);
    let style = STATUS.colour(status_colour(status));
    let centre = x + width - digits / 2.0;
    text(out, (centre, y + 6.0), style, &status.to_string())?;
    writeln!(out, "</g>")
}

fn status_colour(status: u16) -> &'static str {
    match status {
        200..=299 => INK,
        _ => VERMILLION,
    }
}

fn tag_outline(out: &mut String, x: f64, y: f64, width: f64, status: u16) -> fmt::Result {
    let dash = match status {
        200..=299 => "",
        _ => "5 3",
    };
    let paint = Paint::fill("white")
        .stroke(status_colour(status), 2.0)
        .dashed(dash);
    let (y0, height) = (y - TAG_HEIGHT / 2.0, TAG_HEIGHT);
    writeln!(
        out,
        r#"<rect x="{x:.1}" y="{y0:.1}" width="{width:.1}" height="{height}" rx="4" {paint}/>"#
    )
}
#[cfg(test)]
mod tests {
    use roxmltree::{Document, Node};

    use super::*;
    use crate::policy::Inputs;

    /// Positions are written with one decimal: a twentieth of a unit is rounding.
    const ROUNDING: f64 = 0.05;

    /// The picture parsed by a real XML parser: a well-formedness check that means something.
    fn parse(svg: &str) -> Document<'_> {
        Document::parse(svg).unwrap_or_else(|e| panic!("not well-formed XML: {e}"))
    }

    /// The elements named `tag` with `class` under `node`.
    fn classed<'a, 'i>(node: Node<'a, 'i>, tag: &str, class: &str) -> Vec<Node<'a, 'i>> {
        let matching = |n: &Node| n.tag_name().name() == tag && n.attribute("class") == Some(class);
        node.descendants().filter(matching).collect()
    }

    fn number(node: Node, name: &str) -> f64 {
        let value = node.attribute(name);
        let value = value.unwrap_or_else(|| panic!("<{}> has no {name}", node.tag_name().name()));
        value
            .parse()
            .unwrap_or_else(|e| panic!("{name}={value:?}: {e}"))
    }

    /// Where a text element reaches, left to right, by the picture's own estimate of its
    /// width. The estimate is checked against a real browser in tests/lab/picture.rs.
    fn extent(node: Node) -> (f64, f64) {
        let mut style = Type::size(number(node, "font-size"));
        if node.attribute("font-weight") == Some("bold") {
            style = style.bold();
        }
        let width = text_width(node.text().unwrap_or(""), style);
        let x = number(node, "x");
        match node.attribute("text-anchor") {
            Some("middle") => (x - width / 2.0, x + width / 2.0),
            Some("end") => (x - width, x),
            _ => (x, x + width),
        }
    }

    /// Every allowed input, both policies, recorded from real runs, and its picture.
    fn every_picture() -> Vec<(String, Report, String)> {
        let reports = crate::lab::fixtures::reports().into_iter();
        let pictures = reports.map(|report| {
            let (slots, held) = (report.inputs.slots, report.inputs.held);
            let svg = render(&report);
            (format!("--slots {slots} --held {held}"), report, svg)
        });
        pictures.collect()
    }

    /// The recorded report of the workshop's default run.
    fn default_run() -> Report {
        let reports = crate::lab::fixtures::reports().into_iter();
        let mut default = reports.filter(|r| r.inputs == Inputs::default());
        default.next().expect("the default run is recorded")
    }

    /// For every allowed input, both policies: the picture is well-formed, each policy's panel
    /// has one lane per request in order S1.., F1, S-after, F-after, and exactly one gate line;
    /// nothing in it reaches outside the file.
    #[test]
    fn each_policy_has_its_lanes_and_one_gate_line() {
        for (context, report, svg) in every_picture() {
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

    /// The picture scales to its window: a viewBox 1920 wide, no fixed size, and at most 1080
    /// high, so a 1920×1080 window shows all of it at one unit per pixel, where no text is
    /// smaller than 17 pixels.
    #[test]
    fn it_scales_to_the_window_with_no_text_under_17_pixels_at_1920() {
        for (context, _, svg) in every_picture() {
            let document = parse(&svg);
            let root = document.root_element();
            assert_eq!(root.attribute("width"), Some("100%"), "{context}");
            assert_eq!(root.attribute("height"), None, "{context}");
            let view_box = root.attribute("viewBox").expect("a viewBox");
            let view_box: Vec<f64> = view_box.split(' ').filter_map(|n| n.parse().ok()).collect();
            let [x, y, width, height] = view_box[..] else {
                panic!("{context}: viewBox {view_box:?}");
            };
            assert_eq!((x, y, width), (0.0, 0.0, 1920.0), "{context}");
            assert!(height <= 1080.0, "{context}: {height} high");
            for text in root.descendants().filter(|n| n.has_tag_name("text")) {
                let size = number(text, "font-size");
                assert!(size >= 17.0, "{context}: {:?} at {size}", text.text());
            }
        }
    }

    /// Every event has a column of the same width: the ticks, one per `seq` from 1, are evenly
    /// spaced, so no gap between two events reads as a longer time.
    #[test]
    fn every_event_has_a_column_of_the_same_width() {
        for (context, report, svg) in every_picture() {
            let document = parse(&svg);
            let panels = classed(document.root(), "g", "policy");
            for (panel, policy) in panels.iter().zip(&report.policies) {
                let ticks = classed(*panel, "line", "tick");
                let seqs: Vec<f64> = ticks.iter().map(|t| number(*t, "data-seq")).collect();
                let last = policy.work_events.iter().map(|e| e.seq).max().unwrap_or(0);
                let expected: Vec<f64> = (1..=last).map(|seq| seq as f64).collect();
                assert_eq!(seqs, expected, "{context} {:?}", policy.mode);
                let xs: Vec<f64> = ticks.iter().map(|t| number(*t, "x1")).collect();
                let steps: Vec<f64> = xs.windows(2).map(|w| w[1] - w[0]).collect();
                let (least, most) = steps
                    .iter()
                    .fold((f64::MAX, f64::MIN), |(a, b), &s| (a.min(s), b.max(s)));
                assert!(
                    most - least <= 2.0 * ROUNDING + 1e-9 && least > 0.0,
                    "{context} {:?}: column widths from {least} to {most}",
                    policy.mode
                );
            }
        }
    }

    /// No label lies outside its panel's plot, none crosses the gate line, and every response
    /// is shown: a refusal's status in its badge, any other beside its request's finished
    /// square, or, where that has no room, with the event it followed in words.
    #[test]
    fn labels_stay_in_the_plot_clear_of_the_gate_and_beside_their_marks() {
        for (context, report, svg) in every_picture() {
            let document = parse(&svg);
            let panels = classed(document.root(), "g", "policy");
            for (panel, policy) in panels.iter().zip(&report.policies) {
                let context = format!("{context} {:?}", policy.mode);
                let plot = panel.attribute("data-plot").expect("the plot's extent");
                let plot: Vec<f64> = plot.split(' ').filter_map(|n| n.parse().ok()).collect();
                let [left, right] = plot[..] else {
                    panic!("{context}: data-plot {plot:?}")
                };
                let gate = classed(*panel, "line", "gate");
                let gate = number(gate[0], "x1");
                let lanes = classed(*panel, "g", "lane");
                let pools = classed(*panel, "g", "pool");
                let labels = lanes.iter().chain(&pools).flat_map(|g| g.descendants());
                let labels = labels.filter(|n| n.has_tag_name("text"));
                let labels = labels.filter(|n| n.attribute("class") != Some("name"));
                let gate_labels = classed(*panel, "text", "gate-label");
                for label in labels.chain(gate_labels) {
                    let (x0, x1) = extent(label);
                    let words = label.text();
                    assert!(
                        x0 >= left - ROUNDING && x1 <= right + ROUNDING,
                        "{context}: {words:?} at {x0:.1}..{x1:.1}, plot {left}..{right}"
                    );
                    let clear = x1 <= gate - GATE_HALF || x0 >= gate + GATE_HALF;
                    assert!(
                        clear,
                        "{context}: {words:?} at {x0:.1}..{x1:.1}, gate at {gate}"
                    );
                }
                for lane in &lanes {
                    let request = lane.attribute("data-request").expect("a request");
                    let context = format!("{context} {request}");
                    let answers = classed(*lane, "g", "answer");
                    let badges = classed(*lane, "g", "refusal");
                    let responses = policy.observed.responses.iter();
                    let responses = responses.filter(|r| r.request.to_string() == request);
                    let mut statuses: Vec<&str> = responses.map(|r| status(r.status)).collect();
                    let mut shown: Vec<&str> = answers
                        .iter()
                        .chain(&badges)
                        .map(|g| g.attribute("data-status").expect("a status"))
                        .collect();
                    statuses.sort();
                    shown.sort();
                    assert_eq!(shown, statuses, "{context}: every response shown");
                    let finished = classed(*lane, "rect", "finished");
                    // A lane answered before the release keeps its tags on the gate's closed
                    // side: the place does not say the opposite of the words.
                    let responses = policy.observed.responses.iter();
                    let before = responses
                        .filter(|r| r.request.to_string() == request)
                        .all(|r| r.phase == crate::evidence::Phase::BeforeRelease);
                    for tag in answers.iter().chain(&badges) {
                        let outline = tag.children().find(|n| n.has_tag_name("rect"));
                        let outline = outline.expect("a tag has an outline");
                        let (x0, width) = (number(outline, "x"), number(outline, "width"));
                        let x1 = x0 + width;
                        let clear = x1 + CLEAR <= gate - GATE_HALF + ROUNDING
                            || x0 + ROUNDING >= gate + GATE_HALF + CLEAR;
                        assert!(clear, "{context}: tag at {x0}..{x1}, gate at {gate}");
                        assert!(
                            !before || x1 <= gate + ROUNDING,
                            "{context}: answered before the release, a tag at {x0}..{x1}, \
                             past the gate at {gate}"
                        );
                        assert!(x0 >= left - ROUNDING && x1 <= right + ROUNDING, "{context}");
                    }
                    for answer in &answers {
                        let outline = answer.children().find(|n| n.has_tag_name("rect"));
                        let x0 = number(outline.expect("an outline"), "x");
                        let square = finished.first().map(|s| number(*s, "x") + 2.0 * SQUARE);
                        let beside = square.is_some_and(|s| (x0 - (s + CLEAR)).abs() <= ROUNDING);
                        let texts = answer.descendants().filter_map(|n| n.text());
                        let noted = texts.into_iter().any(|t| t.starts_with("after event "));
                        assert!(
                            beside || noted,
                            "{context}: a tag at {x0}, its finished square ends at {square:?}"
                        );
                    }
                }
            }
        }
    }

    /// The legend explains the marks drawn, and only those: a run with no refusal has no
    /// refusal's entry, one with refusals has it; a run that stopped before any event has
    /// neither responses nor a gate line to explain.
    #[test]
    fn the_legend_tells_only_the_marks_drawn() {
        let legend = |report: &Report| {
            let svg = render(report);
            let document = parse(&svg);
            let legend = classed(document.root(), "g", "legend");
            let texts = legend[0].descendants().filter_map(|n| n.text());
            texts.map(str::to_owned).collect::<Vec<String>>()
        };
        let refused = "refused: 503 at once, not queued".to_owned();
        let answer = "response, HTTP status".to_owned();
        let gate = "gate closed, then opened".to_owned();
        let mut without = 0;
        for (context, report, _) in every_picture() {
            let events = report.policies.iter().flat_map(|p| &p.work_events);
            let refusals = events.filter(|e| e.event == Event::Refused).count();
            without += usize::from(refusals == 0);
            let said = legend(&report);
            assert_eq!(said.contains(&refused), refusals > 0, "{context}: {said:?}");
            assert!(said.contains(&answer) && said.contains(&gate), "{said:?}");
        }
        assert!(without > 0, "a recorded run without a refusal");
        let mut stopped = default_run();
        for policy in &mut stopped.policies {
            policy.work_events.clear();
            policy.observed.responses.clear();
        }
        let said = legend(&stopped);
        assert!(!said.contains(&answer) && !said.contains(&gate), "{said:?}");
        assert!(
            said.contains(&"pool permit: taken, free".to_owned()),
            "{said:?}"
        );
    }

    fn status(status: u16) -> &'static str {
        match status {
            200 => "200",
            503 => "503",
            _ => "other",
        }
    }

    /// A failure's reason, however long, is wrapped onto lines that fit the picture: all of it
    /// is there, in order, and no line is wider than the picture less its margins.
    #[test]
    fn a_long_failure_is_wrapped_within_the_picture() {
        let mut report = default_run();
        let reason = "shared: S1: GET /slow failed: error sending request for url \
                      (http://127.0.0.1:40991/slow): client error (SendRequest): connection \
                      closed before message completed; then a connection task panicked: task 9 \
                      panicked with message \"injected fault: the handler of S1 panicked inside \
                      the work section\"";
        report.failure = Some(reason.to_owned());
        report.matches_model = false;
        let svg = render(&report);
        let document = parse(&svg);
        let lines = classed(document.root(), "text", "verdict");
        assert!(lines.len() >= 2, "{} lines", lines.len());
        for line in &lines {
            let (x0, x1) = extent(*line);
            assert!(
                x0 >= MARGIN - ROUNDING && x1 <= WIDTH - MARGIN,
                "{:?} at {x0:.1}..{x1:.1}",
                line.text()
            );
        }
        let words: Vec<&str> = lines.iter().filter_map(|l| l.text()).collect();
        assert_eq!(words.join(" "), format!("FAILED: {reason}"));
        let verdict_bottom = lines.iter().map(|l| number(*l, "y")).fold(0.0, f64::max);
        let headings = document
            .descendants()
            .filter(|n| n.text() == Some("shared mode"));
        let heading = headings
            .into_iter()
            .next()
            .expect("the shared panel's heading");
        assert!(
            number(heading, "y") > verdict_bottom + 22.0,
            "below the verdict"
        );
    }

    /// A run that failed before its first event (its front never started): every lane says
    /// it has nothing, the axis caption stays in the picture, and the verdict says which
    /// policy did not run.
    #[test]
    fn a_run_that_stopped_before_any_event_says_so_on_every_lane() {
        let mut report = default_run();
        report.policies.truncate(1);
        let policy = &mut report.policies[0];
        policy.work_events.clear();
        policy.admissions.clear();
        policy.observed = crate::evidence::Observed::default();
        report.failure = Some("shared: starting the front's own runtime: refused".into());
        report.matches_model = false;
        let svg = render(&report);
        let document = parse(&svg);
        let root = document.root();
        let lanes = classed(root, "g", "lane");
        assert!(!lanes.is_empty());
        for lane in &lanes {
            let said = lane.descendants().filter_map(|n| n.text());
            assert!(
                said.into_iter().any(|t| t == NOTHING),
                "{:?}",
                lane.attribute("data-request")
            );
        }
        let texts = root.descendants().filter(|n| n.has_tag_name("text"));
        let caption = texts.into_iter().find(|t| t.text() == Some(AXIS_CAPTION));
        let (x0, x1) = extent(caption.expect("the axis caption"));
        assert!(
            x0 >= MARGIN - ROUNDING && x1 <= WIDTH - MARGIN,
            "{x0:.1}..{x1:.1}"
        );
        let verdict = classed(root, "text", "verdict");
        let words: Vec<&str> = verdict.iter().filter_map(|l| l.text()).collect();
        let words = words.join(" ");
        // Two sentences, the failure's ended by a full stop.
        let said = "FAILED: shared: starting the front's own runtime: refused. partitioned did \
                    not run: the shared policy failed";
        assert!(words.contains(said), "{words}");
    }

    /// A word too long for a line is broken between characters rather than run off the edge.
    #[test]
    fn a_word_longer_than_a_line_is_broken() {
        let word = "x".repeat(400);
        let lines = wrap(&format!("a {word} b"), VERDICT, 300.0);
        assert!(lines.len() > 3, "{lines:?}");
        assert!(
            lines.iter().all(|l| text_width(l, VERDICT) <= 300.0),
            "{lines:?}"
        );
        assert_eq!(lines.concat().replace(' ', ""), format!("a{word}b"));
    }

    /// A label goes to the first free stretch: beside its mark when that is clear, past an
    /// obstacle when not, and nowhere outside the row.
    #[test]
    fn a_row_places_labels_only_where_they_are_clear() {
        let mut row = Row::new(100.0, 300.0);
        row.take(150.0, 160.0);
        assert!(row.fits(100.0, 146.0));
        assert!(!row.fits(100.0, 147.0), "closer than CLEAR to a mark");
        assert!(!row.fits(99.0, 120.0), "left of the plot");
        assert_eq!(row.right_of(120.0, 40.0), Some(164.0));
        assert_eq!(row.right_of(200.0, 101.0), None);
        assert_eq!(row.left_of(300.0, 40.0), Some(260.0));
        assert_eq!(row.left_of(170.0, 40.0), Some(106.0));
    }

    /// Text from the report is escaped: a failure reason full of markup reads back, through a
    /// real parser, as the same text (less the control character XML cannot carry).
    #[test]
    fn text_is_escaped() {
        let mut report = default_run();
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
