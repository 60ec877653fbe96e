//! `record`: the short individual record of one saved lab report, with what the lab knows
//! filled in — the command that reproduces the run, the version that ran it, the policy model's
//! prediction for its inputs, and evidence pointers: JSON Pointers (RFC 6901) into the saved
//! report, each with what it points at — and the lines only the person who ran it can write
//! left blank. `docs/handout.md` says how a student uses it.
//!
//! It vouches for nothing it reads. `read` takes a regular file only and refuses what no run
//! could have written in its shape (exit status 2); `check` replays the report's ledger,
//! checks the rest of it against that, rebuilds the evidence and re-runs the model's check, so
//! the record says "matched" only when that re-check does; an edited or impossible report is
//! named as such (exit status 1). A classroom session's report is read run by run, with the
//! room's requests listed beside them. `render` writes it all for a person.
//!
//! The rooms, as every instrument has them (how it runs: [`load`] the file, then
//! [`Shown::of`] it):
//!
//! - `read`: its evidence: the file, its size and kind, parsed into the lab's report types.
//! - `check`: its model: the replay, the consistency checks and the model's re-check.
//! - its report, [`Record`], here; `render`: the record as text.
//! - `shell`: file names as words the shell reads back as the same file.

mod check;
mod read;
mod render;
mod shell;

use std::path::Path;

use serde::Serialize;

pub use self::check::Finding;
use self::check::{Checked, RoomOfRun};
pub use self::read::{Refused, Saved, SavedRoomGate, SavedRoomRequest, SavedSession, load};
pub(crate) use self::shell::shell_word;
use crate::admission::gate::GateState;
use crate::admission::ledger::Event;
use crate::evidence::{AdmissionRecord, Decision, Phase, ResponseRecord};
use crate::lab;
use crate::label::Label;
use crate::outcome::Outcome;
use crate::policy::{Inputs, Mode, Pool, Route};
use crate::report::{PolicyReport, Report};

/// The first line of the individual record: who ran it (the lab fills in the rest of it).
pub(crate) const PARTICIPANT: &str = "Participant";

/// The person's own prediction, written before the run, beside the model's.
pub(crate) const OWN_PREDICTION: &str = "My own prediction, written before the run";

/// The last lines of the individual record, which only a person can fill in, in order.
pub(crate) const TO_FILL_IN: [&str; 5] = [
    "One changed input / new observation / original retained",
    "My own action / assistance / first explanation and correction",
    "Protected work resource / resource limits not tested",
    "Application / service-platform / dependency owner question",
    "Next bounded test / receiving role / evidence still needed",
];

/// What the re-check of a saved report found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Recheck {
    /// Every internal check passed, and the model's check, re-run on the evidence rebuilt from
    /// the file, found no difference.
    Matched,
    /// The report holds together, and says the run failed or differed from the model.
    DidNotMatch {
        /// Why, in one line.
        reason: String,
    },
    /// The report contradicts itself: it was edited, or no run of the lab could have written
    /// it. Nothing in it is vouched for.
    DoesNotHold {
        /// Each contradiction, where it is.
        findings: Vec<Finding>,
    },
}

impl Recheck {
    /// The verdict of a re-check that found `findings`, and otherwise the failure `failed`, if
    /// the report records one.
    fn of(findings: Vec<Finding>, failed: Option<String>) -> Recheck {
        if !findings.is_empty() {
            Recheck::DoesNotHold { findings }
        } else if let Some(reason) = failed {
            Recheck::DidNotMatch { reason }
        } else {
            Recheck::Matched
        }
    }
}

/// What `record` shows of a saved file: the record of a lab report, or of a classroom session.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Shown {
    /// A command-line run's report.
    Lab(Record),
    /// A classroom session's report.
    Classroom(SessionRecord),
}

/// The record of a classroom session's report: each run's record, and the room's requests.
#[derive(Clone, Debug, Serialize)]
pub struct SessionRecord {
    /// The report's file, as a word the shell reads back as the same file.
    pub report: String,
    /// Each run's record, in the session's order; its pointers start `/runs/<i>`.
    pub runs: Vec<Record>,
    /// The room's requests, outside every run's model.
    pub room_requests: Vec<RoomLine>,
    /// The re-check of the whole session: every run, the room's requests, its own verdict.
    pub verdict: Recheck,
    /// The re-check's verdict is [`Recheck::Matched`].
    pub matches_model: bool,
}

/// One request from the room, as the record lists it.
#[derive(Clone, Debug, Serialize)]
pub struct RoomLine {
    /// `R<n>`.
    pub request: Label,
    /// Where it was sent.
    pub route: Route,
    /// The run it reached, from 1 as the record numbers them.
    pub run: usize,
    /// The policy of that run.
    pub mode: Mode,
    /// Its answer's status; `None` when no answer came.
    pub status: Option<u16>,
    /// Where it is in the file.
    pub pointer: String,
}

impl Shown {
    /// What `record` shows of `saved`, read from the file at `path`: re-checked, never trusted.
    pub fn of(saved: &Saved, path: &Path) -> Shown {
        let file = shell_word(path.as_os_str());
        match saved {
            Saved::Lab(report) => {
                let checked = check::report(report, None, "");
                Shown::Lab(Record::of(report, &file, "", &checked))
            }
            Saved::Classroom(session) => Shown::Classroom(SessionRecord::of(session, &file)),
        }
    }

    /// The record as text, for a person.
    pub fn text(&self) -> String {
        match self {
            Shown::Lab(record) => render::render(record),
            Shown::Classroom(session) => render::session(session),
        }
    }

    /// Why `record` exits 1: the report does not hold together, or it holds together and its
    /// run did not match the model. `None` when it matched. It quotes the report's own text,
    /// which the binary writes as one line (`draw::terminal::one_line`).
    pub fn failure(&self) -> Option<String> {
        let (file, verdict, what) = match self {
            Shown::Lab(record) => (&record.report, &record.verdict, "run"),
            Shown::Classroom(session) => (&session.report, &session.verdict, "session"),
        };
        match verdict {
            Recheck::Matched => None,
            Recheck::DidNotMatch { reason } => Some(format!(
                "{file}: the {what} did not match the policy model; its report says why: {reason}"
            )),
            Recheck::DoesNotHold { findings } => {
                let first = findings.first().map_or(String::new(), |f| {
                    format!(": {} (at {})", f.says, f.pointer)
                });
                let more = match findings.len() {
                    0 | 1 => String::new(),
                    n => format!(", and {} more", n - 1),
                };
                Some(format!(
                    "{file} was edited, or no run of the lab wrote it{first}{more}"
                ))
            }
        }
    }
}

impl SessionRecord {
    /// The record of a classroom `session` saved in `file` (a shell word).
    fn of(session: &read::SavedSession, file: &str) -> SessionRecord {
        let mut findings = Vec::new();
        let mut failed = None;
        let mut runs = Vec::new();
        let routes = session.room_requests.iter();
        let routes = routes.map(|r| (r.request, r.route)).collect();
        for (i, run) in session.runs.iter().enumerate() {
            let room = RoomOfRun {
                routes: &routes,
                gates: &session.room_gates,
                run: i,
            };
            let prefix = pointer(&["runs", &i.to_string()]);
            let checked = check::report(run, Some(&room), &prefix);
            match &checked.verdict {
                Recheck::Matched => {}
                Recheck::DidNotMatch { reason } => {
                    failed.get_or_insert_with(|| format!("run {}: {reason}", i + 1));
                }
                Recheck::DoesNotHold { findings: found } => findings.extend(found.iter().cloned()),
            }
            runs.push(Record::of(run, file, &prefix, &checked));
        }
        findings.extend(check::session(session));
        let every_run = runs.iter().all(|r| r.verdict == Recheck::Matched);
        // A claim of a match must be borne out by the runs as re-checked here; a claim of no
        // match needs a reason in the file itself (a failure, or a run that says it differed),
        // which `check::session` asks for.
        if session.matches_model && !(session.failure.is_none() && every_run) {
            let says = "the session says every run matched the policy model, but its runs do not";
            findings.push(Finding::at("", &["matches_model"], says.into()));
        }
        if let Some(failure) = &session.failure {
            failed.get_or_insert_with(|| failure.clone());
        }
        if session.runs.is_empty() {
            failed.get_or_insert_with(|| "the session ran nothing, so nothing was checked".into());
        }
        let verdict = Recheck::of(findings, failed);
        if let Recheck::DoesNotHold { findings } = &verdict {
            // An edited session vouches for none of its runs, even those whose own parts agree.
            // Each run lists the findings that point into it, so that every finding is listed
            // once under the session and at most once under a run, however many runs the file
            // holds.
            let mut each_runs = vec![Vec::new(); runs.len()];
            for finding in findings {
                let run = finding.pointer.strip_prefix("/runs/");
                let run = run.and_then(|p| p.split('/').next()?.parse::<usize>().ok());
                if let Some(its) = run.and_then(|i| each_runs.get_mut(i)) {
                    its.push(finding.clone());
                }
            }
            // A run nothing points into lists none: it is not vouched for all the same.
            for (run, findings) in runs.iter_mut().zip(each_runs) {
                run.evidence.clear();
                run.verdict = Recheck::DoesNotHold { findings };
                run.matches_model = false;
            }
        }
        let room_requests = session
            .room_requests
            .iter()
            .enumerate()
            .map(|(i, r)| RoomLine {
                request: r.request,
                route: r.route,
                run: r.run + 1,
                mode: r.mode,
                status: r.status,
                pointer: pointer(&["room_requests", &i.to_string()]),
            })
            .collect();
        SessionRecord {
            report: file.to_owned(),
            runs,
            room_requests,
            matches_model: verdict == Recheck::Matched,
            verdict,
        }
    }
}

/// The individual record of one saved report.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    /// The report's file, as a word the shell reads back as the same file.
    pub report: String,
    /// The command line that reproduces the run, writing its report to the same file (for a
    /// classroom session's run: the same inputs, run from the command line).
    pub command: String,
    /// The flags of the run's executor (`--work …`), empty for the lab's usual run.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub executor_flags: String,
    /// The executor's flags with which `isolation-lab predict` prints [`Record::prediction`].
    #[serde(skip)]
    predict_flags: String,
    /// The lab and version that wrote the report: `isolation-lab 0.1.0`.
    pub version: String,
    /// The language and runtime that ran it.
    pub runner: String,
    /// The run's inputs.
    pub inputs: Inputs,
    /// What the policy model predicts for those inputs, one outcome per policy: what
    /// `isolation-lab predict` prints.
    pub prediction: Vec<Outcome>,
    /// The re-check of the report: never its own verdict.
    pub verdict: Recheck,
    /// The re-check's verdict is [`Recheck::Matched`].
    pub matches_model: bool,
    /// Where the report's evidence of each step is, in the order the record prints it; none
    /// for a report that does not hold together, whose evidence is vouched for by nothing.
    pub evidence: Vec<Cited>,
    /// The lines left for the person to fill in: [`PARTICIPANT`], [`OWN_PREDICTION`], then
    /// [`TO_FILL_IN`].
    pub to_fill_in: Vec<&'static str>,
    /// Where the report is in its file: `""`, or `/runs/<i>` in a classroom session's report.
    #[serde(skip)]
    prefix: String,
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
    pub(crate) fn heading(self) -> &'static str {
        match self {
            Line::Admission => "Actual admission event / pending caller / response evidence",
            Line::FastBeforeRelease => "Fast request before release / held work still present",
            Line::AfterRelease => "After release / final state",
            Line::Failure => "Failure / differences from the model",
        }
    }
}

/// What an evidence pointer points at, as the record states it. Each variant names the fields
/// of the value at the pointer that it states; `tests/lab/record.rs` checks them there.
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
        /// Whether the decision came after the gate opened (`work_events`: its `seq` after
        /// `gate_opened`'s), as a request left unread until release is decided.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        after_release: bool,
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
    /// An entry of `executor/unread`: a request its front could not read before release
    /// (`--work block`), its connection waiting in the listener's accept queue.
    Unread {
        /// The request.
        request: Label,
        /// Connections in the accept queue when it was seen there, this one the last.
        accept_queue: usize,
    },
    /// `observer_after_fast_before_release/held_at_gate`: the slow work still held after F1.
    StillHeld {
        /// The held requests.
        requests: Vec<Label>,
        /// Whether F1 sat unread then, with no response (`fast_response_before_release` is
        /// null and `executor/unread` names F1): the snapshot follows F1's sending, not a
        /// response.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        f1_unread: bool,
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
    /// `failure`: why the run failed, as its report says. `record` quotes it: what it can
    /// re-check of it (the policy, the step, the caller, a difference from the model) it has.
    Failure {
        /// The report's one-line reason.
        reason: String,
    },
    /// `model/mismatches`: how the run differed from the model, in words, as the re-check of
    /// its evidence finds it.
    Mismatches {
        /// How many differences there are.
        count: usize,
        /// The first of them.
        first: String,
    },
}

impl Record {
    /// The record of `report`, found at `prefix` (`""`, or `/runs/<i>` in a classroom
    /// session's report) in the file named `file` (a shell word), as `checked` found it.
    pub(crate) fn of(report: &Report, file: &str, prefix: &str, checked: &Checked) -> Self {
        let (inputs, runner) = (report.inputs, &report.runner);
        let mut evidence = Vec::new();
        if !matches!(checked.verdict, Recheck::DoesNotHold { .. }) {
            if let Some(reason) = &report.failure {
                evidence.push(Cited {
                    line: Line::Failure,
                    mode: None,
                    pointer: format!("{prefix}/failure"),
                    says: Says::Failure {
                        reason: reason.clone(),
                    },
                });
            }
            for (index, (policy, differences)) in
                report.policies.iter().zip(&checked.differences).enumerate()
            {
                evidence.extend(cite_policy(prefix, index, policy, differences));
            }
        }
        // Printed line by line: a stable sort keeps each line's pointers in policy order.
        evidence.sort_by_key(|cited| Line::ALL.iter().position(|&line| line == cited.line));
        let mut command = format!(
            "isolation-lab {} --server {}{}",
            inputs.flags(),
            runner.front.name(),
            report.executor.flags(),
        );
        if prefix.is_empty() {
            command = format!("{command} > {file}");
        }
        // `read` refuses another version's report, so the command reproduces the run with
        // the binary at hand.
        // The lab's own runtime; a front on runtimes of its own is described beside it.
        let described = match &runner.front_runtime {
            None => format!("{}, {}", runner.language, runner.runtime),
            Some(shape) => format!(
                "{}, {} for the lab; the {} front: {shape}",
                runner.language,
                runner.runtime,
                runner.front.name()
            ),
        };
        Record {
            report: file.to_owned(),
            command,
            executor_flags: report.executor.flags(),
            predict_flags: report.executor.predict_flags(runner.front),
            version: format!("{} {}", runner.name, runner.version),
            runner: described,
            inputs,
            // The executor's wait (`--work`) changes what the model expects.
            prediction: lab::predict_on(inputs, (runner.front, report.executor)),
            verdict: checked.verdict.clone(),
            matches_model: checked.verdict == Recheck::Matched,
            evidence,
            to_fill_in: [PARTICIPANT, OWN_PREDICTION]
                .into_iter()
                .chain(TO_FILL_IN)
                .collect(),
            prefix: prefix.to_owned(),
        }
    }
}

/// Every evidence pointer into the policy at `<prefix>/policies/<index>`, for whatever steps
/// it reached; `differences` are the model's, re-checked.
fn cite_policy(
    prefix: &str,
    index: usize,
    policy: &PolicyReport,
    differences: &[String],
) -> Vec<Cited> {
    let at = index.to_string();
    let mut cited = Vec::new();
    let mut cite = |line, path: &[&str], says| {
        let segments = [&["policies", at.as_str()], path].concat();
        cited.push(Cited {
            line,
            mode: Some(policy.mode),
            pointer: format!("{prefix}{}", pointer(&segments)),
            says,
        });
    };
    let observed = &policy.observed;
    let capacity = |pool: Pool| policy.pool_capacities.get(&pool).copied().unwrap_or(0);
    // A request left unread until release (`--work block`) is decided after the gate opened:
    // its decision is cited after release, not among the held work's or F1's.
    let gate = policy
        .work_events
        .iter()
        .find(|e| e.event == Event::GateOpened);
    let after_release = |request: Label| {
        let decided = policy
            .work_events
            .iter()
            .find(|e| e.request == Some(request) && e.event.is_decision());
        matches!((gate, decided), (Some(gate), Some(decided)) if decided.seq > gate.seq)
    };
    let admission = |a: &AdmissionRecord| Says::Admission {
        request: a.request,
        pool: a.pool,
        decision: a.decision,
        active_after: a.active_after,
        capacity: capacity(a.pool),
        held_by: a.held_by.clone().unwrap_or_default(),
        after_release: after_release(a.request),
    };
    let unread = observed
        .executor
        .iter()
        .flat_map(|w| w.unread.iter().enumerate());
    let f1_unread = unread.clone().find(|(_, u)| u.request == Label::F1);
    // The slow callers' responses received in `phase`, in the order they arrived.
    let slow_responses = |phase: Phase| {
        let found = observed.responses.iter().enumerate();
        found.filter(move |(_, r)| matches!(r.request, Label::Slow(_)) && r.phase == phase)
    };
    let response = |r: &ResponseRecord| Says::Response {
        request: r.request,
        status: r.status,
        phase: r.phase,
    };

    // The held slow requests' decisions, in the order they were sent.
    for (i, a) in policy.admissions.iter().enumerate() {
        if matches!(a.request, Label::Slow(_)) && !after_release(a.request) {
            cite(
                Line::Admission,
                &["admissions", &i.to_string()],
                admission(a),
            );
        }
    }
    if let Some(pending) = &observed.slow_callers_pending_before_release {
        let says = Says::Pending {
            requests: pending.clone(),
            unread: unread
                .clone()
                .map(|(_, u)| u.request)
                .filter(|r| pending.contains(r))
                .collect(),
        };
        let path = ["slow_callers_pending_before_release"];
        cite(Line::Admission, &path, says);
    }
    for (i, r) in slow_responses(Phase::BeforeRelease) {
        cite(Line::Admission, &["responses", &i.to_string()], response(r));
    }
    if let Some(before) = &observed.observer_before_fast {
        let slow_pool = policy.route_pools.get(&Route::Slow).copied();
        let refused: Vec<Label> = policy
            .admissions
            .iter()
            .filter(|a| matches!(a.request, Label::Slow(_)) && a.decision == Decision::Refused)
            .filter(|a| !after_release(a.request))
            .map(|a| a.request)
            .collect();
        for (&pool, &taken) in &before.active_work {
            if Some(pool) != slow_pool && capacity(pool) > taken && !refused.is_empty() {
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

    // F1 while the slow work is held: its decision, or its connection left unread.
    let mut admissions = policy.admissions.iter().enumerate();
    let f1 = admissions.find(|(_, a)| a.request == Label::F1);
    if let Some((i, a)) = f1.filter(|(_, a)| !after_release(a.request)) {
        let path = ["admissions", &i.to_string()];
        cite(Line::FastBeforeRelease, &path, admission(a));
    }
    if let Some((i, u)) = f1_unread {
        let says = Says::Unread {
            request: u.request,
            accept_queue: u.accept_queue,
        };
        let path = ["executor", "unread", &i.to_string()];
        cite(Line::FastBeforeRelease, &path, says);
    }
    if let Some(f1) = &observed.fast_response_before_release {
        let says = Says::FastResponse { status: f1.status };
        let path = ["fast_response_before_release"];
        cite(Line::FastBeforeRelease, &path, says);
    }
    if let Some(after) = &observed.observer_after_fast_before_release {
        let says = Says::StillHeld {
            requests: after.held_at_gate.clone(),
            f1_unread: f1_unread.is_some() && observed.fast_response_before_release.is_none(),
        };
        let path = ["observer_after_fast_before_release", "held_at_gate"];
        cite(Line::FastBeforeRelease, &path, says);
    }

    // Release, the decisions it let be made, and the end.
    let mut events = policy.work_events.iter().enumerate();
    if let Some((i, event)) = events.find(|(_, e)| e.event == Event::GateOpened) {
        let says = Says::GateOpened { seq: event.seq };
        cite(Line::AfterRelease, &["work_events", &i.to_string()], says);
    }
    for (i, a) in policy.admissions.iter().enumerate() {
        if matches!(a.request, Label::Slow(_) | Label::F1) && after_release(a.request) {
            let path = ["admissions", &i.to_string()];
            cite(Line::AfterRelease, &path, admission(a));
        }
    }
    for (i, r) in slow_responses(Phase::AfterRelease) {
        cite(
            Line::AfterRelease,
            &["responses", &i.to_string()],
            response(r),
        );
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
    if let Some(first) = differences.first() {
        let says = Says::Mismatches {
            count: differences.len(),
            first: first.clone(),
        };
        cite(Line::Failure, &["model", "mismatches"], says);
    }
    cited
}

/// A JSON Pointer (RFC 6901) from reference tokens: each is prefixed with `/`, with `~`
/// written `~0` and `/` written `~1`, so any key can be named.
pub(crate) fn pointer(tokens: &[&str]) -> String {
    let mut out = String::new();
    for token in tokens {
        out.push('/');
        out.push_str(&token.replace('~', "~0").replace('/', "~1"));
    }
    out
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
        let record = Record::of(default, "r.json", "", &check::report(default, None, ""));
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
        let lines: Vec<Line> = record.evidence.iter().map(|c| c.line).collect();
        let mut sorted = lines.clone();
        sorted.sort_by_key(|line| Line::ALL.iter().position(|l| l == line));
        assert_eq!(lines, sorted, "cited line by line");
    }
}
