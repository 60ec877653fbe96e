//! The individual record for a person: the lab's lines filled in, each evidence pointer under
//! the line it supports with what it points at, and the person's lines left blank. Within 80
//! columns but for the pointers, which are never cut.

use std::fmt::Write;

use crate::admission::section::GateState;
use crate::draw::table::labels;
use crate::evidence::Decision;
use crate::lab::render::text::table;
use crate::record::{Line, OWN_PREDICTION, PARTICIPANT, Record, Says, TO_FILL_IN};

/// Renders `record` as text.
pub fn render(record: &Record) -> String {
    let mut out = format!("isolation-lab record of {}\n\n", record.report);
    let _ = writeln!(out, "{PARTICIPANT}:");
    let _ = writeln!(out, "Command: {}", record.command);
    let _ = writeln!(out, "Version: {}, {}", record.version, record.runner);
    let inputs = &record.inputs;
    let flags = inputs.flags() + &record.executor_flags;
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

    let _ = writeln!(
        out,
        "\nEvidence pointers: JSON Pointers into {}, each under what it shows.\n\
         /policies/0/admissions/1 is policies[0].admissions[1], counting from 0.",
        record.report
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
            let _ = writeln!(out, "{indent}{}", says(&c.says));
            let _ = writeln!(out, "{indent}  {}", c.pointer);
        }
    }
    let _ = writeln!(
        out,
        "\nThe run {} the policy model.",
        if record.matches_model {
            "matched"
        } else {
            "did NOT match"
        }
    );

    let _ = writeln!(out, "\nTo fill in yourself:");
    for blank in TO_FILL_IN {
        let _ = writeln!(out, "{blank}:");
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
            ..
        } => {
            format!("{request} admitted: took a {pool} permit, {active_after} of {capacity} taken")
        }
        Says::Admission {
            request,
            pool,
            held_by,
            ..
        } => format!(
            "{request} refused: no {pool} permit free, held by {}",
            labels(held_by)
        ),
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
        Says::StillHeld { requests } => match requests.len() {
            0 => "no slow work held at the gate after F1's response".to_owned(),
            _ => format!(
                "{} still held at the gate after F1's response",
                labels(requests)
            ),
        },
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
        Says::Failure { reason } => format!("FAILED: {reason}"),
        Says::Mismatches { count: 1, first } => format!("1 difference from the model: {first}"),
        Says::Mismatches { count, first } => {
            format!("{count} differences from the model, the first: {first}")
        }
    }
}
