//! `record`: the short individual record of one saved lab report, with what the lab knows
//! filled in — the command that reproduces the run, the version that ran it, the policy model's
//! prediction for its inputs, and evidence pointers: JSON Pointers (RFC 6901) into the saved
//! report, each with what it points at — and the lines only the person who ran it can write
//! left blank. `docs/handout.md` says how a student uses it.

use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::admission::ledger::Event;
use crate::admission::section::GateState;
use crate::evidence::{AdmissionRecord, Decision, Phase};
use crate::label::Label;
use crate::outcome::Outcome;
use crate::policy::{Inputs, Mode, Policy, Pool, Route};
use crate::report::{PolicyReport, Report};

/// The `lab` field of every report this lab writes.
const LAB: &str = "concurrency-isolation";

/// The first line of the individual record: who ran it (the lab fills in the rest of it).
pub const PARTICIPANT: &str = "Participant";

/// The person's own prediction, written before the run, beside the model's.
pub const OWN_PREDICTION: &str = "My own prediction, written before the run";

/// The last lines of the individual record, which only a person can fill in, in order.
pub const TO_FILL_IN: [&str; 5] = [
    "One changed input / new observation / original retained",
    "My own action / assistance / first explanation and correction",
    "Protected work resource / resource limits not tested",
    "Application / service-platform / dependency owner question",
    "Next bounded test / receiving role / evidence still needed",
];

/// A saved report the record cannot be made from: the file could not be read, or it is not a
/// lab report. The command line refuses it with exit status 2, as it refuses a bad flag.
#[derive(Debug)]
pub struct Refused {
    /// The file as it was named.
    pub file: String,
    /// What was wrong with it.
    pub reason: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}; record reads a report saved from a run, e.g. isolation-lab > r.json",
            self.file, self.reason
        )
    }
}

impl std::error::Error for Refused {}

/// Reads the lab report saved in `path`: a report of a run that succeeded or failed, as the
/// lab wrote it with `--format json`.
pub fn load(path: &Path) -> Result<Report, Refused> {
    let file = path.display().to_string();
    let refuse = |reason: String| Refused {
        file: file.clone(),
        reason,
    };
    let text =
        read_at_most(path, MAX_REPORT).map_err(|e| refuse(format!("cannot be read: {e}")))?;
    if text.len() > MAX_REPORT {
        return Err(refuse(format!(
            "is larger than any lab report (over {} MiB)",
            MAX_REPORT >> 20
        )));
    }
    let json: serde_json::Value = serde_json::from_slice(&text).map_err(|e| {
        // The lab's other formats, saved by mistake, are named for what they are.
        let start = String::from_utf8_lossy(&text[..text.len().min(64)]).into_owned();
        let start = start.trim_start();
        if start.starts_with("isolation-lab ") {
            refuse("is a text report, not the JSON one: save a run without --format".into())
        } else if start.starts_with("<?xml") || start.starts_with("<svg") {
            refuse("is a picture, not the JSON report: save a run without --format".into())
        } else {
            refuse(format!("is not JSON: {e}"))
        }
    })?;
    // Checked before the whole report, so that other JSON (`predict --format json`, say) is
    // named for what it lacks rather than for the first field serde trips on.
    match json.get("lab") {
        Some(lab) if lab == LAB => {}
        Some(lab) => {
            return Err(refuse(format!(
                "is not a lab report: its \"lab\" is {lab}, not \"{LAB}\""
            )));
        }
        None => {
            return Err(refuse(format!(
                "is not a lab report: it has no \"lab\": \"{LAB}\""
            )));
        }
    }
    serde_json::from_value(json).map_err(|e| refuse(format!("is not a whole lab report: {e}")))
}

/// The most a saved report may hold. A lab report is tens of kilobytes; the cap keeps a file
/// with no end (`/dev/zero`, a pipe whose writer never stops) from being
/// read into memory until the process runs out.
const MAX_REPORT: usize = 16 << 20;

/// Up to `limit + 1` bytes of `path`: one more than allowed says it is too large.
fn read_at_most(path: &Path, limit: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut text = Vec::new();
    let file = std::fs::File::open(path)?;
    file.take(limit as u64 + 1).read_to_end(&mut text)?;
    Ok(text)
}

/// The individual record of one saved report.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    /// The report's file, as it was named.
    pub report: String,
    /// The command line that reproduces the run, writing its report to the same file.
    pub command: String,
    /// The flags of the run's executor (`--work …`), empty for the lab's usual run.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub executor_flags: String,
    /// The lab and version that wrote the report: `isolation-lab 0.1.0`.
    pub version: String,
    /// The language and runtime that ran it, and this binary's version when it differs.
    pub runner: String,
    /// The run's inputs.
    pub inputs: Inputs,
    /// What the policy model predicts for those inputs, one outcome per policy: what
    /// `isolation-lab predict` prints.
    pub prediction: Vec<Outcome>,
    /// The report's own verdict: every observation matched the model and nothing failed.
    pub matches_model: bool,
    /// Where the report's evidence of each step is, in the order the record prints it.
    pub evidence: Vec<Cited>,
    /// The lines left for the person to fill in: [`PARTICIPANT`], [`OWN_PREDICTION`], then
    /// [`TO_FILL_IN`].
    pub to_fill_in: Vec<&'static str>,
}

/// One evidence pointer: a place in the report, and what is there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cited {
    /// The line of the record it belongs to.
    pub line: Line,
    /// The policy it concerns; `None` for the run as a whole.
    pub mode: Option<Mode>,
    /// A JSON Pointer (RFC 6901) into the report.
    pub pointer: String,
    /// What the report holds there.
    pub says: Says,
}

/// The lines of the record that the lab fills with evidence pointers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    /// Each held slow request's admission decision, the callers still pending, the refusals'
    /// actual responses, and a reserved permit left idle meanwhile.
    Admission,
    /// F1's decision and actual response while the slow work is held, and the held work still
    /// there afterwards.
    FastBeforeRelease,
    /// The gate opening, the held callers' responses, and the state the run ended in.
    AfterRelease,
    /// How the run failed, and where it differed from the model.
    Failure,
}

impl Line {
    /// Every line, in the order the record prints them.
    pub const ALL: [Line; 4] = [
        Line::Admission,
        Line::FastBeforeRelease,
        Line::AfterRelease,
        Line::Failure,
    ];

    /// The line's heading, in the words of the individual record.
    pub fn heading(self) -> &'static str {
        match self {
            Line::Admission => "Actual admission event / pending caller / response evidence",
            Line::FastBeforeRelease => "Fast request before release / held work still present",
            Line::AfterRelease => "After release / final state",
            Line::Failure => "Failure / differences from the model",
        }
    }
}

/// What an evidence pointer points at, as the record states it. Each variant names the fields
/// of the value at the pointer that it states; `tests/record.rs` checks them there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Says {
    /// An entry of `admissions`: `request`, `pool`, `decision`, `active_after` and, for a
    /// refusal, `held_by`.
    Admission {
        /// The request.
        request: Label,
        /// The pool it drew from.
        pool: Pool,
        /// Admitted or refused.
        decision: Decision,
        /// The pool's taken permits right after the decision.
        active_after: usize,
        /// The pool's capacity (from `pool_capacities`).
        capacity: usize,
        /// For a refusal, the requests holding the pool's permits.
        held_by: Vec<Label>,
    },
    /// `slow_callers_pending_before_release`: admitted slow callers with no response yet.
    Pending {
        /// The callers.
        requests: Vec<Label>,
        /// Of those, the ones whose requests sat unread until release (`--work block`):
        /// not yet admitted.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        unread: Vec<Label>,
    },
    /// An entry of `responses`: `request`, `status`, `phase`.
    Response {
        /// The request.
        request: Label,
        /// Its HTTP status.
        status: u16,
        /// Before or after the gate opened.
        phase: Phase,
    },
    /// `fast_response_before_release`: F1's actual `status`.
    FastResponse {
        /// F1's HTTP status.
        status: u16,
    },
    /// `observer_after_fast_before_release/held_at_gate`: the slow work still held after F1.
    StillHeld {
        /// The held requests.
        requests: Vec<Label>,
    },
    /// `observer_before_fast/active_work/<pool>`: a pool other than the slow one, with
    /// permits free while slow requests were refused — the price of the reservation.
    IdlePermits {
        /// The pool.
        pool: Pool,
        /// Its taken permits: the value at the pointer.
        taken: usize,
        /// Its capacity.
        capacity: usize,
        /// The slow requests refused meanwhile.
        refused: Vec<Label>,
    },
    /// The `gate_opened` entry of `work_events`, with its `seq`.
    GateOpened {
        /// Its position in the ledger.
        seq: u64,
    },
    /// `final_state`: `active_work`, `available_permits` and `gate`.
    FinalState {
        /// Taken permits, summed over the pools.
        active: usize,
        /// Free permits, summed over the pools.
        available: usize,
        /// Permits, summed over the pools.
        capacity: usize,
        /// The gate: `open`, or `abandoned` after a failure.
        gate: GateState,
    },
    /// `failure`: why the run failed.
    Failure {
        /// The report's one-line reason.
        reason: String,
    },
    /// `model/mismatches`: how the run differed from the model, in words.
    Mismatches {
        /// How many differences there are.
        count: usize,
        /// The first of them.
        first: String,
    },
}

impl Record {
    /// The record of `report`, saved in the file named `file`.
    pub fn of(report: &Report, file: &str) -> Self {
        let inputs = report.inputs;
        let prediction = inputs.mode.modes().iter().map(|&mode| {
            let policy = Policy {
                mode,
                slots: inputs.slots,
            };
            // The executor's wait (`--work`) changes what the model expects.
            let shape = (report.runner.front, report.executor);
            Outcome::predicted_on(policy, inputs.held, shape)
        });
        let runner = &report.runner;
        let mut evidence = Vec::new();
        if let Some(reason) = &report.failure {
            evidence.push(Cited {
                line: Line::Failure,
                mode: None,
                pointer: pointer(&["failure"]),
                says: Says::Failure {
                    reason: reason.clone(),
                },
            });
        }
        for (index, policy) in report.policies.iter().enumerate() {
            evidence.extend(cite_policy(index, policy));
        }
        // Printed line by line: a stable sort keeps each line's pointers in policy order.
        evidence.sort_by_key(|cited| Line::ALL.iter().position(|&line| line == cited.line));
        Record {
            report: file.to_owned(),
            command: format!(
                "isolation-lab {} --server {}{} > {}",
                inputs.flags(),
                runner.front.name(),
                report.executor.flags(),
                shell_word(file)
            ),
            executor_flags: report.executor.flags(),
            version: format!("{} {}", runner.name, runner.version),
            runner: match runner.version.as_str() {
                // The command reproduces the run with the binary at hand: say so if it is
                // another version.
                env!("CARGO_PKG_VERSION") => format!("{}, {}", runner.language, runner.runtime),
                _ => format!(
                    "{}, {}; read by isolation-lab {}",
                    runner.language,
                    runner.runtime,
                    env!("CARGO_PKG_VERSION")
                ),
            },
            inputs,
            prediction: prediction.collect(),
            matches_model: report.matches_model,
            evidence,
            to_fill_in: [PARTICIPANT, OWN_PREDICTION]
                .into_iter()
                .chain(TO_FILL_IN)
                .collect(),
        }
    }
}

/// Every evidence pointer into the policy at `/policies/<index>`, for whatever steps it
/// reached.
fn cite_policy(index: usize, policy: &PolicyReport) -> Vec<Cited> {
    let at = index.to_string();
    let mut cited = Vec::new();
    let mut cite = |line, path: &[&str], says| {
        let mut segments = vec!["policies", at.as_str()];
        segments.extend_from_slice(path);
        cited.push(Cited {
            line,
            mode: Some(policy.mode),
            pointer: pointer(&segments),
            says,
        });
    };
    let observed = &policy.observed;
    let capacity = |pool: Pool| policy.pool_capacities.get(&pool).copied().unwrap_or(0);
    let admission = |i: usize, a: &AdmissionRecord| {
        let says = Says::Admission {
            request: a.request,
            pool: a.pool,
            decision: a.decision,
            active_after: a.active_after,
            capacity: capacity(a.pool),
            held_by: a.held_by.clone().unwrap_or_default(),
        };
        (i.to_string(), says)
    };
    // The slow callers' responses received in `phase`, in the order they arrived.
    let slow_responses = |phase: Phase| {
        let found = observed.responses.iter().enumerate();
        let found = found.filter(|(_, r)| matches!(r.request, Label::Slow(_)) && r.phase == phase);
        let found = found.map(|(i, r)| {
            let says = Says::Response {
                request: r.request,
                status: r.status,
                phase: r.phase,
            };
            (i.to_string(), says)
        });
        found.collect::<Vec<_>>()
    };

    // The held slow requests' decisions, in the order they were sent.
    for (i, a) in policy.admissions.iter().enumerate() {
        if matches!(a.request, Label::Slow(_)) {
            let (i, says) = admission(i, a);
            cite(Line::Admission, &["admissions", &i], says);
        }
    }
    if let Some(pending) = &observed.slow_callers_pending_before_release {
        let unread = observed.executor.iter().flat_map(|w| &w.unread);
        let unread = unread.map(|u| u.request).filter(|r| pending.contains(r));
        let says = Says::Pending {
            requests: pending.clone(),
            unread: unread.collect(),
        };
        cite(
            Line::Admission,
            &["slow_callers_pending_before_release"],
            says,
        );
    }
    for (i, says) in slow_responses(Phase::BeforeRelease) {
        cite(Line::Admission, &["responses", &i], says);
    }
    if let Some(before) = &observed.observer_before_fast {
        let slow_pool = policy.route_pools.get(&Route::Slow).copied();
        let refused: Vec<Label> = policy
            .admissions
            .iter()
            .filter(|a| matches!(a.request, Label::Slow(_)) && a.decision == Decision::Refused)
            .map(|a| a.request)
            .collect();
        for (&pool, &taken) in &before.active_work {
            let idle = capacity(pool).saturating_sub(taken);
            if Some(pool) != slow_pool && idle > 0 && !refused.is_empty() {
                let says = Says::IdlePermits {
                    pool,
                    taken,
                    capacity: capacity(pool),
                    refused: refused.clone(),
                };
                let path = ["observer_before_fast", "active_work", pool.name()];
                cite(Line::Admission, &path, says);
            }
        }
    }

    // F1 while the slow work is held.
    let f1 = policy.admissions.iter().enumerate();
    if let Some((i, says)) = f1
        .filter(|(_, a)| a.request == Label::F1)
        .map(|(i, a)| admission(i, a))
        .next()
    {
        cite(Line::FastBeforeRelease, &["admissions", &i], says);
    }
    if let Some(f1) = &observed.fast_response_before_release {
        let says = Says::FastResponse { status: f1.status };
        cite(
            Line::FastBeforeRelease,
            &["fast_response_before_release"],
            says,
        );
    }
    if let Some(after) = &observed.observer_after_fast_before_release {
        let says = Says::StillHeld {
            requests: after.held_at_gate.clone(),
        };
        let path = ["observer_after_fast_before_release", "held_at_gate"];
        cite(Line::FastBeforeRelease, &path, says);
    }

    // Release, and the end.
    let opened = policy
        .work_events
        .iter()
        .enumerate()
        .find(|(_, e)| e.event == Event::GateOpened);
    if let Some((i, event)) = opened {
        let says = Says::GateOpened { seq: event.seq };
        cite(Line::AfterRelease, &["work_events", &i.to_string()], says);
    }
    for (i, says) in slow_responses(Phase::AfterRelease) {
        cite(Line::AfterRelease, &["responses", &i], says);
    }
    let state = &policy.final_state;
    let says = Says::FinalState {
        active: state.active_work.values().sum(),
        available: state.available_permits.values().sum(),
        capacity: policy.pool_capacities.values().sum(),
        gate: state.gate,
    };
    cite(Line::AfterRelease, &["final_state"], says);

    // One pointer for all the differences: after a failure most of them only say that a
    // later step never happened.
    if let Some(first) = policy.model.mismatches.first() {
        let says = Says::Mismatches {
            count: policy.model.mismatches.len(),
            first: first.clone(),
        };
        cite(Line::Failure, &["model", "mismatches"], says);
    }
    cited
}

/// A JSON Pointer (RFC 6901) from reference tokens: each is prefixed with `/`, with `~`
/// written `~0` and `/` written `~1`, so any key can be named.
pub fn pointer(tokens: &[&str]) -> String {
    let mut out = String::new();
    for token in tokens {
        out.push('/');
        out.push_str(&token.replace('~', "~0").replace('/', "~1"));
    }
    out
}

/// `word` as one word of a POSIX shell command: as it is when it holds no character the shell
/// treats specially, otherwise in single quotes.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._-/+,:=@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::fixtures;

    #[test]
    fn pointers_escape_tilde_and_slash() {
        assert_eq!(
            pointer(&["policies", "1", "admissions", "1"]),
            "/policies/1/admissions/1"
        );
        assert_eq!(pointer(&["route_pools", "/slow"]), "/route_pools/~1slow");
        assert_eq!(pointer(&["a~b"]), "/a~0b");
        assert_eq!(pointer(&[]), "");
        let value = serde_json::json!({"route_pools": {"/slow": "slow"}, "a~b": 1});
        assert_eq!(
            value.pointer(&pointer(&["route_pools", "/slow"])),
            Some(&"slow".into())
        );
        assert_eq!(value.pointer(&pointer(&["a~b"])), Some(&1.into()));
    }

    #[test]
    fn file_names_are_quoted_for_the_shell_only_when_needed() {
        assert_eq!(shell_word("r.json"), "r.json");
        assert_eq!(shell_word("runs/held-4.json"), "runs/held-4.json");
        assert_eq!(shell_word("my run.json"), "'my run.json'");
        assert_eq!(shell_word("it's.json"), r"'it'\''s.json'");
        assert_eq!(shell_word(""), "''");
    }

    /// Partitioned S2's refusal in the default run is `/policies/1/admissions/1`, with the
    /// fast permit idle beside it; the command reproduces the run.
    #[test]
    fn the_default_run_cites_partitioned_s2s_refusal() {
        let reports = fixtures::reports();
        let default = &reports[1];
        assert_eq!(
            (default.inputs.slots.get(), default.inputs.held.get()),
            (2, 2)
        );
        let record = Record::of(default, "r.json");
        assert_eq!(
            record.command,
            "isolation-lab --mode both --slots 2 --held 2 --server async > r.json"
        );
        let s2 = record
            .evidence
            .iter()
            .find(|c| c.pointer == "/policies/1/admissions/1")
            .expect("partitioned S2's admission is cited");
        assert_eq!(s2.line, Line::Admission);
        let Says::Admission {
            request, decision, ..
        } = &s2.says
        else {
            panic!("an admission: {s2:?}");
        };
        assert_eq!((*request, *decision), (Label::Slow(2), Decision::Refused));
        let idle = record
            .evidence
            .iter()
            .find(|c| c.pointer == "/policies/1/observer_before_fast/active_work/fast");
        assert!(idle.is_some(), "the idle fast permit is cited");
        assert_eq!(record.runner, "Rust, Tokio 1, current-thread scheduler");
        let mut older = default.clone();
        older.runner.version = "0.0.1".into();
        let older = Record::of(&older, "r.json");
        let reader = format!("; read by isolation-lab {}", env!("CARGO_PKG_VERSION"));
        assert!(older.runner.ends_with(&reader), "{older:?}");
        let lines: Vec<Line> = record.evidence.iter().map(|c| c.line).collect();
        let mut sorted = lines.clone();
        sorted.sort_by_key(|line| Line::ALL.iter().position(|l| l == line));
        assert_eq!(lines, sorted, "cited line by line");
    }
}
