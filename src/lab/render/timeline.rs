//! A text timeline of one policy run: the work ledger one event a line, in `seq` order, with
//! each pool's occupancy after the event drawn as a small bar, and each response placed where
//! its caller had it. The lines are an order, never a clock.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::admission::ledger::{Event, WorkEvent};
use crate::evidence::{ResponseRecord, Unread};
use crate::policy::Pool;
use crate::report::PolicyReport;

/// Width of the event column: fits the longest description, `F-after admitted: takes a shared
/// permit` (39 characters), so the bars line up.
const EVENT_WIDTH: usize = 40;

/// An entry of the timeline, one line: a work event, a response that arrived after one, or a
/// request seen sitting unread (the front's workers all blocked).
enum Entry<'a> {
    Event(&'a WorkEvent),
    Answer(&'a ResponseRecord),
    Unread(&'a Unread),
}

/// Renders one policy run as a timeline: a header naming each pool, then one line per work
/// event with every pool's occupancy after it (`[#.]`: one of two permits taken), and one
/// line per response right after the event its `after_event` names.
pub(crate) fn render(policy: &PolicyReport) -> String {
    // Each pool's column is as wide as its name or its bar, whichever is wider.
    let column =
        |(&pool, &capacity): (&Pool, &usize)| (pool, capacity, pool.name().len().max(capacity + 2));
    let columns: Vec<_> = policy.pool_capacities.iter().map(column).collect();
    let mut active: BTreeMap<Pool, usize> = columns.iter().map(|&(p, ..)| (p, 0)).collect();

    let mut out = format!(
        "{} mode: work events in ledger order (seq), not time\n",
        policy.mode.name()
    );
    let mut header = format!("{:>3}  {:<EVENT_WIDTH$}", "seq", "event");
    for &(pool, _, width) in &columns {
        // Writing to a String cannot fail.
        let _ = write!(header, "  {:<width$}", pool.name());
    }
    push_line(&mut out, &header);

    for line in lines(policy) {
        let text = match line {
            Entry::Event(event) => {
                // `active_after` is the occupancy of the event's own pool; the others keep
                // their last value.
                active.insert(event.pool, event.active_after);
                let mut text = format!("{:>3}  {:<EVENT_WIDTH$}", event.seq, describe(event));
                for &(pool, capacity, width) in &columns {
                    let taken = active.get(&pool).copied().unwrap_or(0);
                    let _ = write!(text, "  {:<width$}", bar(taken, capacity));
                }
                text
            }
            Entry::Answer(response) => {
                format!("        {} answered {}", response.request, response.status)
            }
            Entry::Unread(unread) => format!(
                "        {} arrived unread: {} in the accept queue",
                unread.request, unread.accept_queue
            ),
        };
        push_line(&mut out, &text);
    }
    out
}

/// The work events and responses merged: each response right after the event whose `seq` is
/// its `after_event`, responses keeping the order their callers received them in.
fn lines(policy: &PolicyReport) -> Vec<Entry<'_>> {
    let events = policy.work_events.iter();
    let events = events.map(|e| ((e.seq, 0), Entry::Event(e)));
    let answers = policy.observed.responses.iter();
    let answers = answers.map(|r| ((r.after_event, 1), Entry::Answer(r)));
    let unread = policy.observed.executor.iter().flat_map(|w| &w.unread);
    let unread = unread.map(|u| ((u.after_event, 1), Entry::Unread(u)));
    let mut lines: Vec<_> = events.chain(answers).chain(unread).collect();
    // A stable sort, so responses after the same event stay in the order they were received.
    lines.sort_by_key(|&(key, _)| key);
    lines.into_iter().map(|(_, line)| line).collect()
}

/// What one work event means, in words.
fn describe(event: &WorkEvent) -> String {
    let request = event.request.map_or_else(String::new, |r| r.to_string());
    let pool = event.pool;
    match event.event {
        Event::Admitted => format!("{request} admitted: takes a {pool} permit"),
        Event::Refused => format!("{request} refused: no {pool} permit free"),
        Event::Held => format!("{request} held at the closed gate"),
        Event::Started => format!("{request} started on a thread"),
        Event::Finished if event.cancelled => format!("{request} cancelled: {pool} permit back"),
        Event::Finished => format!("{request} finished: {pool} permit back"),
        Event::GateOpened => "== slow gate opened ==".to_owned(),
    }
}

/// A pool's occupancy: one `#` per taken permit, one `.` per free one. Drawn as observed, so a
/// pool over its capacity would show a bar longer than the others rather than be hidden.
fn bar(taken: usize, capacity: usize) -> String {
    let free = capacity.saturating_sub(taken);
    format!("[{}{}]", "#".repeat(taken), ".".repeat(free))
}

fn push_line(out: &mut String, line: &str) {
    out.push_str(line.trim_end());
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::gate::GateState;
    use crate::admission::section::FinalState;
    use crate::evidence::Phase;
    use crate::evidence::{Evidence, Observed};
    use crate::label::Label;
    use crate::policy::{Held, Mode, Policy, Slots};

    fn policy(mode: Mode, slots: u8) -> Policy {
        let slots = Slots::new(slots).expect("tests use allowed slot counts");
        Policy { mode, slots }
    }

    fn held(held: u8) -> Held {
        Held::new(held).expect("tests use allowed held counts")
    }

    /// Every allowed input, both modes: one policy report each, recorded from real runs.
    fn recorded() -> Vec<PolicyReport> {
        let reports = crate::lab::fixtures::reports().into_iter();
        reports.flat_map(|report| report.policies).collect()
    }

    /// The bars of one timeline line: `(pool, '#' count, inner width)` per pool.
    fn bars(line: &str, pools: &[Pool]) -> Vec<(Pool, usize, usize)> {
        let drawn = line.split_whitespace().filter(|w| w.starts_with('['));
        let drawn = drawn.map(|bar| {
            let inner = bar.trim_start_matches('[').trim_end_matches(']');
            (inner.matches('#').count(), inner.len())
        });
        pools
            .iter()
            .zip(drawn)
            .map(|(&p, (t, w))| (p, t, w))
            .collect()
    }

    /// Against recorded real runs of every input: no bar ever shows more taken permits than its pool
    /// holds, and every bar is exactly its pool's capacity wide.
    #[test]
    fn drawn_occupancy_never_exceeds_capacity() {
        for report in recorded() {
            let pools: Vec<Pool> = report.pool_capacities.keys().copied().collect();
            let text = render(&report);
            let event_lines = text.lines().filter(|l| l.contains('['));
            assert_eq!(
                event_lines.clone().count(),
                report.work_events.len(),
                "{text}"
            );
            for line in event_lines {
                let drawn = bars(line, &pools);
                assert_eq!(drawn.len(), pools.len(), "one bar per pool in {line:?}");
                for (pool, taken, width) in drawn {
                    let capacity = report.pool_capacities[&pool];
                    assert!(
                        taken <= capacity,
                        "{pool} over capacity in {line:?}\n{text}"
                    );
                    assert_eq!(width, capacity, "{pool} bar width in {line:?}");
                }
            }
        }
    }

    /// The gate opens exactly once per run, and every line fits 80 columns, for every input.
    #[test]
    fn one_gate_line_and_every_line_fits_80_columns() {
        for report in recorded() {
            let text = render(&report);
            let gates = text.lines().filter(|l| l.contains("gate opened")).count();
            assert_eq!(gates, 1, "{text}");
            for line in text.lines() {
                assert!(
                    line.chars().count() <= 80,
                    "{} columns: {line:?}",
                    line.len()
                );
            }
        }
    }

    fn event(
        seq: u64,
        request: Option<Label>,
        pool: Pool,
        event: Event,
        active: usize,
    ) -> WorkEvent {
        WorkEvent {
            seq,
            request,
            pool,
            event,
            active_after: active,
            cancelled: false,
            held_by: Vec::new(),
        }
    }

    fn answer(request: Label, status: u16, phase: Phase, after_event: u64) -> ResponseRecord {
        ResponseRecord {
            request,
            route: request.route(),
            status,
            body: serde_json::Value::Null,
            phase,
            after_event,
        }
    }

    /// A hand-built partitioned run renders exactly: F1 takes and returns the fast permit, and
    /// is answered, before the gate line; S1's answer follows its finish.
    #[test]
    fn a_hand_built_run_renders_exactly() {
        use Event::*;
        use Label::{F1, Slow as S};
        let (slow, fast) = (Pool::Slow, Pool::Fast);
        let work_events = vec![
            event(1, Some(S(1)), slow, Admitted, 1),
            event(2, Some(S(1)), slow, Held, 1),
            event(3, Some(S(2)), slow, Refused, 1),
            event(4, Some(F1), fast, Admitted, 1),
            event(5, Some(F1), fast, Finished, 0),
            event(6, None, slow, GateOpened, 1),
            event(7, Some(S(1)), slow, Finished, 0),
        ];
        let observed = Observed {
            responses: vec![
                answer(S(2), 503, Phase::BeforeRelease, 3),
                answer(F1, 200, Phase::BeforeRelease, 5),
                answer(S(1), 200, Phase::AfterRelease, 7),
            ],
            ..Observed::default()
        };
        let pools = BTreeMap::from([(slow, 0), (fast, 0)]);
        let partitioned = policy(Mode::Partitioned, 2);
        let evidence = Evidence {
            work_events,
            observed,
            final_state: FinalState {
                active_work: pools.clone(),
                available_permits: BTreeMap::from([(slow, 1), (fast, 1)]),
                gate: GateState::Open,
            },
            ..Evidence::nothing_ran(partitioned)
        };
        let report = PolicyReport::assemble_on(partitioned, held(2), Default::default(), evidence);
        let expected = "\
partitioned mode: work events in ledger order (seq), not time
seq  event                                     slow  fast
  1  S1 admitted: takes a slow permit          [#]   [.]
  2  S1 held at the closed gate                [#]   [.]
  3  S2 refused: no slow permit free           [#]   [.]
        S2 answered 503
  4  F1 admitted: takes a fast permit          [#]   [#]
  5  F1 finished: fast permit back             [#]   [.]
        F1 answered 200
  6  == slow gate opened ==                    [#]   [.]
  7  S1 finished: slow permit back             [.]   [.]
        S1 answered 200
";
        assert_eq!(render(&report), expected);
    }
}
