//! The individual record for a person: the lab's lines filled in, each evidence pointer under
//! the line it supports with what it points at, the re-check's verdict, and the person's lines
//! left blank. A report that does not hold together shows what contradicts what instead of its
//! evidence. Within 80 columns but for the pointers, which are never cut.

use std::fmt::Write;

use super::{Line, OWN_PREDICTION, PARTICIPANT, Recheck, Record, Says, SessionRecord, TO_FILL_IN};
use crate::admission::gate::GateState;
use crate::draw::table::labels;
use crate::draw::terminal::one_line;
use crate::evidence::Decision;
use crate::lab::render::text::table;

pub(crate) fn render(record: &Record) -> String {
    let mut out = format!("isolation-lab record of {}\n\n", record.report);
    let _ = writeln!(out, "{PARTICIPANT}:");
    let _ = writeln!(out, "Command: {}", record.command);
    // The runner's words are the report's own: shown as they are, as every finding and
    // failure below (`one_line`), so a report's text draws nothing on the terminal.
    let runner = one_line(&record.runner);
    let _ = writeln!(out, "Version: {}, {runner}", record.version);
    let inputs = &record.inputs;
    let flags = inputs.flags() + &record.predict_flags;
    let _ = writeln!(
        out,
        "\nPrediction / mode / slots / held requests: {} / {} / {}",
        inputs.mode.name(),
        inputs.slots,
        inputs.held
    );
    let _ = writeln!(out, "{OWN_PREDICTION}:");
    let _ = writeln!(
        out,
        "The policy model's, from isolation-lab predict {flags}:"
    );
    out.push_str(&table(&record.prediction, None));

    if let Recheck::DoesNotHold { findings } = &record.verdict {
        contradictions(&mut out, "run", findings);
        let _ = writeln!(
            out,
            "\nThe run is not shown to match the policy model: run it again, and record the new \
             report."
        );
        fill_in(&mut out);
        return out;
    }
    // `/runs/2` reads `runs[2].`, so the example names the same place both ways.
    let dotted =
        (record.prefix.strip_prefix("/runs/")).map_or(String::new(), |i| format!("runs[{i}]."));
    let _ = writeln!(
        out,
        "\nEvidence pointers: JSON Pointers into {}, each under what it shows.\n\
         {}/policies/0/admissions/1 is {dotted}policies[0].admissions[1], counting from 0.",
        record.report, record.prefix
    );
    for line in Line::ALL {
        let cited: Vec<_> = record.evidence.iter().filter(|c| c.line == line).collect();
        if cited.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n{}:", line.heading());
        let mut mode = None;
        for c in cited {
            let indent = if c.mode.is_some() { "    " } else { "  " };
            if c.mode != mode {
                if let Some(m) = c.mode {
                    let _ = writeln!(out, "  {}", m.name());
                }
                mode = c.mode;
            }
            let _ = writeln!(out, "{indent}{}", one_line(&says(&c.says)));
            let _ = writeln!(out, "{indent}  {}", c.pointer);
        }
    }
    let matched = if record.matches_model {
        "matched"
    } else {
        "did NOT match"
    };
    let _ = writeln!(out, "\nThe run {matched} the policy model.");
    fill_in(&mut out);
    out
}

/// What contradicts what in a report no `what` (run, session) of the lab wrote, each under
/// where it is.
fn contradictions(out: &mut String, what: &str, findings: &[super::Finding]) {
    let _ = writeln!(
        out,
        "\nThis report does not hold together: it was edited, or no {what} of the lab wrote \
         it.\nNothing in it is vouched for. What contradicts what, with where it is:"
    );
    for finding in findings {
        let _ = writeln!(
            out,
            "  {}\n    {}",
            one_line(&finding.says),
            finding.pointer
        );
    }
}

/// The lines only the person can fill in, last.
fn fill_in(out: &mut String) {
    let _ = writeln!(out, "\nTo fill in yourself:");
    for blank in TO_FILL_IN {
        let _ = writeln!(out, "{blank}:");
    }
}

/// Renders the record of a classroom session: each run's record, the room's requests, and the
/// session's verdict.
pub(crate) fn session(session: &SessionRecord) -> String {
    let runs = session.runs.len();
    let mut out = format!(
        "isolation-lab record of {}: a classroom session of {runs} run{}\n",
        session.report,
        if runs == 1 { "" } else { "s" }
    );
    if let Recheck::DoesNotHold { findings } = &session.verdict {
        // An edited session vouches for none of its runs, even those whose own parts agree.
        contradictions(&mut out, "session", findings);
        let _ = writeln!(out, "\nNo run of it is shown to match the policy model.");
        return out;
    }
    for (i, record) in session.runs.iter().enumerate() {
        let _ = writeln!(out, "\n== Run {} of {runs} ==\n", i + 1);
        out.push_str(&render(record));
    }
    let _ = writeln!(
        out,
        "\nThe room's requests (outside the policy model; their work is in each run's ledger):"
    );
    if session.room_requests.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for room in &session.room_requests {
        let answer = room
            .status
            .map_or("no answer".to_owned(), |s| format!("answered {s}"));
        let _ = writeln!(
            out,
            "  {} {} in run {} ({}): {answer}\n    {}",
            room.request,
            room.route,
            room.run,
            room.mode.name(),
            room.pointer
        );
    }
    match &session.verdict {
        Recheck::Matched => {
            let _ = writeln!(out, "\nEvery run of the session matched the policy model.");
        }
        Recheck::DidNotMatch { reason } => {
            let reason = one_line(reason);
            let _ = writeln!(
                out,
                "\nThe session did NOT match the policy model; its report says why: {reason}"
            );
        }
        // Shown above, instead of the runs.
        Recheck::DoesNotHold { .. } => {}
    }
    out
}

/// What a pointer points at, in one sentence.
fn says(says: &Says) -> String {
    match says {
        Says::Admission {
            request,
            pool,
            decision: Decision::Admitted,
            active_after,
            capacity,
            after_release,
            ..
        } => {
            let when = if *after_release { " after release" } else { "" };
            format!(
                "{request} admitted{when}: took a {pool} permit, {active_after} of {capacity} taken"
            )
        }
        Says::Admission {
            request,
            pool,
            held_by,
            after_release,
            ..
        } => {
            let when = if *after_release { " after release" } else { "" };
            format!(
                "{request} refused{when}: no {pool} permit free, held by {}",
                labels(held_by)
            )
        }
        Says::Pending { requests, unread } => match requests.len() {
            0 => "no admitted slow caller waiting for its response before release".to_owned(),
            _ if !unread.is_empty() => {
                let admitted = requests.iter().filter(|r| !unread.contains(r));
                format!(
                    "{} admitted, {} unread, all still waiting for a response before release",
                    labels(admitted),
                    labels(unread)
                )
            }
            _ => format!(
                "{} admitted, still waiting for a response before release",
                labels(requests)
            ),
        },
        Says::Response {
            request,
            status,
            phase,
        } => format!("{request} answered {status} {}", phase.words()),
        Says::FastResponse { status } => {
            format!("F1's actual response before release: {status}")
        }
        Says::Unread {
            request,
            accept_queue,
        } => format!(
            "{request} not read before release: its connection waited in the listener's accept \
             queue ({accept_queue} there)"
        ),
        Says::StillHeld {
            requests,
            f1_unread,
        } => {
            let after = if *f1_unread {
                "while F1 sat unread"
            } else {
                "after F1's response"
            };
            match requests.len() {
                0 => format!("no slow work held at the gate {after}"),
                _ => format!("{} still held at the gate {after}", labels(requests)),
            }
        }
        Says::IdlePermits {
            pool,
            taken,
            capacity,
            refused,
        } => format!(
            "{pool} pool: {taken} of {capacity} taken while {} refused",
            labels(refused)
        ),
        Says::GateOpened { seq } => format!("the slow gate opened (seq {seq})"),
        Says::FinalState {
            active,
            available,
            capacity,
            gate,
        } => {
            let gate = match gate {
                GateState::Open => "open",
                GateState::Closed => "closed",
                GateState::Abandoned => "abandoned",
            };
            format!(
                "final state: {active} active, {available} of {capacity} permits back, gate {gate}"
            )
        }
        Says::Failure { reason } => format!("FAILED, its report says: {reason}"),
        Says::Mismatches { count: 1, first } => format!("1 difference from the model: {first}"),
        Says::Mismatches { count, first } => {
            format!("{count} differences from the model, the first: {first}")
        }
    }
}
