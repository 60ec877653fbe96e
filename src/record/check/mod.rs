//! The check of a saved report: `record` believes nothing it reads. It replays each policy's
//! ledger (`work_events`) as the work section wrote it, checks every other part of the report
//! against that replay — the admissions, the pool accounts, each response's status, body and
//! phase, the observer's snapshots, the final state — rebuilds the run's
//! [`Evidence`](crate::evidence::Evidence) from the file, and re-runs
//! [`model::check`](crate::model::check) on it with the model's expectations for the report's
//! inputs. The report's own verdict (`matches_model`, `model.matches`) is only compared with
//! that re-check. A contradiction is a [`Finding`]: the report was edited, or no run of the lab
//! could have written it.
//!
//! - here: the report as a whole — each policy's check in turn, the runner, the failure's
//!   policy, and the verdict;
//! - [`policy_check`]: one policy of a report, read against the replay of its ledger;
//! - [`stopped`](mod@stopped): where a failed run stopped, against what its failure says;
//! - [`saved_session`]: a classroom session as a whole, its runs and the room's requests;
//! - [`answers`]: what an answer must say, shared by a policy's responses and the room's.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::classroom::run::{NEW_RUN, SESSION_ENDED, not_run};
use crate::executor::Executor;
use crate::label::{Label, joined};
use crate::policy::{Front, Mode, Pool, Route};
use crate::report::differs;
use crate::report::{Report, Runner};

use super::read::SavedRoomGate;
use super::{Recheck, pointer};

mod answers;
mod policy_check;
mod saved_session;
mod stopped;

pub(crate) use saved_session::session;

use answers::unreached;
use policy_check::PolicyCheck;
use stopped::stopped;

/// A contradiction in a saved report, in words a student reads, and where it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// A JSON Pointer (RFC 6901) into the saved file, at the part that contradicts the rest.
    pub pointer: String,
    /// What contradicts what.
    pub says: String,
}

impl Finding {
    /// `says`, found at `path` under `prefix` (`""`, `/runs/<i>`, or a policy's pointer).
    pub(crate) fn at(prefix: &str, path: &[&str], says: String) -> Finding {
        let pointer = format!("{prefix}{}", pointer(path));
        Finding { pointer, says }
    }
}

/// What the check of one lab report found.
#[derive(Debug)]
pub(crate) struct Checked {
    /// The verdict of the re-check.
    pub(crate) verdict: Recheck,
    /// The model's differences, re-checked, for each policy of the report in order.
    pub(crate) differences: Vec<Vec<String>>,
}

/// The room's part in one run of a classroom session: the route of each room request (the
/// session's, read once), and the session's room gates, of which those closed on this run's
/// ledger apply.
#[derive(Debug)]
pub(crate) struct RoomOfRun<'a> {
    pub(crate) routes: &'a BTreeMap<Label, Route>,
    pub(crate) gates: &'a [SavedRoomGate],
    pub(crate) run: usize,
}

impl<'a> RoomOfRun<'a> {
    /// The room gates closed on this run's `mode` policy.
    pub(crate) fn gates_of(&self, mode: Mode) -> impl Iterator<Item = &'a SavedRoomGate> {
        let run = self.run;
        self.gates
            .iter()
            .filter(move |g| (g.run, g.mode) == (run, mode))
    }
}

/// Checks `report`, found at `prefix` in the file (`""`, or `/runs/<i>` in a classroom report);
/// `room` is the room's part in it when it is a classroom session's run.
pub(crate) fn report(report: &Report, room: Option<&RoomOfRun<'_>>, prefix: &str) -> Checked {
    let mut findings = Vec::new();
    let mut differences = Vec::new();
    let last = report.policies.len().saturating_sub(1);
    let modes = report.inputs.mode.modes();
    // The policy the failure is said of: a run's failure names the policy it stopped.
    let failed = (report.failure.as_deref())
        .and_then(said_of)
        .map(|(mode, _)| mode);
    for (i, policy) in report.policies.iter().enumerate() {
        let mut check = PolicyCheck {
            report,
            file: policy,
            policy: report.inputs.policy(policy.mode),
            room,
            room_gates: policy_check::GateIndex::of(room, policy.mode),
            base: format!("{prefix}{}", pointer(&["policies", &i.to_string()])),
            // The lab stops at the first policy that fails, so only the last one can be cut
            // short, and only if the failure is its own (a session may end before the next).
            cut_short: i == last && failed == Some(policy.mode),
            findings: Vec::new(),
            dropped: 0,
            differences: Vec::new(),
        };
        check.run();
        let misplaced = if i != last {
            Some(
                "it differs from the model, yet another policy follows it: the lab stops at the \
                 first policy that differs",
            )
        } else if failed.is_some_and(|m| m != policy.mode) {
            Some(
                "it differs from the model, but the run's failure is another policy's: a policy \
                 that differs ends its run with its own failure",
            )
        } else {
            None
        };
        if let Some(says) = misplaced.filter(|_| !check.differences.is_empty()) {
            check.find(&["model"], says.into());
        }
        if check.dropped > 0 {
            let (mode, dropped) = (policy.mode.name(), check.dropped);
            let says = format!("{mode}: and {dropped} more contradictions, left out");
            check.findings.push(Finding::at(&check.base, &[], says));
        }
        findings.extend(check.findings);
        differences.push(check.differences);
    }

    let mut find = |path: &[&str], says: String| findings.push(Finding::at(prefix, path, says));
    // The version is this one (`read` refuses another's).
    runner(report, &mut find);
    // A failure is said of the policy it stopped (the lab runs no policy after it), and a
    // caller that failed got no response.
    if report.failure.is_some() && !failed.is_some_and(|mode| modes.contains(&mode)) {
        find(
            &["failure"],
            format!(
                "the failure is said of no policy --mode {} runs: a run's failure begins with \
                 the policy it stopped, or the one its session did not reach",
                report.inputs.mode.name()
            ),
        );
    }
    if let Some(failure) = &report.failure {
        // The policy the failure names, read once.
        let named = said_of(failure);
        let said = named.and_then(|(mode, rest)| {
            let (i, p) = (report.policies.iter().enumerate()).find(|(_, p)| p.mode == mode)?;
            Some((i, p, rest))
        });
        // A policy that fails keeps its entry; only a classroom session's run may name one
        // it never ran, when the session ended first.
        let absent = named
            .map(|(mode, _)| mode)
            .filter(|mode| modes.contains(mode));
        if let (None, Some(absent)) = (&said, absent) {
            let mode = absent.name();
            let not_run = [SESSION_ENDED, NEW_RUN].map(|before| not_run(absent, before));
            let mut before = modes.iter().copied().take_while(|&m| m != absent);
            let skipped = before.find(|m| !report.policies.iter().any(|p| p.mode == *m));
            let says = if room.is_none() || !not_run.contains(failure) {
                Some(format!(
                    "the failure is the {mode} policy's, but the report has no {mode} policy: the \
                     lab keeps the entry of a policy that fails"
                ))
            } else {
                // The closing session names the first policy still to run; each one before it
                // was opened, and is kept.
                skipped.map(|skipped| {
                    format!(
                        "the failure says the {mode} policy was not run, but the report has no {} \
                         policy either, which runs before it: a run cut short names the first \
                         policy it did not open",
                        skipped.name()
                    )
                })
            };
            if let Some(says) = says {
                find(&["failure"], says);
            }
        }
        if let Some((i, policy, rest)) = said {
            let mode = policy.mode.name();
            let (caller, why) = failed_caller(rest);
            let answered = caller
                .filter(|&label| policy.observed.responses.iter().any(|r| r.request == label));
            // A caller that could not connect never sent its request: the client sends again on
            // a new connection only a request that never left a reused one.
            let dialled = (why.split_once(" failed: "))
                .and_then(|(_, why)| why.strip_prefix("connecting to "))
                .map(|to| to.split_once(": ").map_or(to, |(address, _)| address));
            let unconnected = dialled.is_some();
            let elsewhere = dialled
                .zip(policy.server.as_ref())
                .filter(|(dialled, server)| *dialled != server.address.to_string());
            let decided = caller.filter(|_| unconnected).and_then(|label| {
                let mut events = policy.work_events.iter();
                let event = events.find(|e| e.request == Some(label));
                event.map(|e| (label, e.seq))
            });
            let unsent = caller.and_then(|label| {
                let (_, missing) = unreached(&policy.observed, Some(label))?;
                Some((label, format!("it records no {missing}")))
            });
            // A slow request is sent in its turn: once the one before it is decided, or seen
            // waiting unread; and only the --held first ones are.
            let held = report.inputs.held.get();
            let unsent = unsent.or_else(|| match caller? {
                Label::Slow(k) if usize::from(k) > held => Some((
                    Label::Slow(k),
                    format!("--held {held} sends S1 to S{held}"),
                )),
                Label::Slow(k) if k > 1 => {
                    let before = Label::Slow(k - 1);
                    let decided = (policy.work_events.iter())
                        .any(|e| e.request == Some(before) && e.event.is_decision());
                    let unread = (policy.observed.executor.iter())
                        .any(|w| w.unread.iter().any(|u| u.request == before));
                    (!decided && !unread).then(|| {
                        let why = format!("it sends S{k} only once {before} is decided or seen unread, and records neither");
                        (Label::Slow(k), why)
                    })
                }
                _ => None,
            });
            let says = if i != last {
                Some(format!(
                    "the failure is the {mode} policy's, yet another policy follows it: the lab \
                     stops at the first policy that fails"
                ))
            } else if let Some((label, why)) = unsent {
                Some(format!(
                    "the failure says {label}'s request failed, yet {mode} stopped before the lab \
                     sent it: {why}"
                ))
            } else if let Some(label) = answered {
                Some(format!(
                    "the failure says {label}'s request failed, yet {mode} records its response"
                ))
            } else if let (Some(label), Some((dialled, server))) = (caller, elsewhere) {
                Some(format!(
                    "the failure says {label} failed connecting to {dialled}, but {mode}'s server \
                     listened on {}: a caller connects only to its own run's server",
                    server.address
                ))
            } else {
                decided.map(|(label, seq)| {
                    format!(
                        "the failure says {label} could not connect, yet {mode}'s ledger has \
                         {label} at seq {seq}: a request never sent reaches no work section"
                    )
                })
            };
            if let Some(says) = says {
                find(&["failure"], says);
            }
            stopped(report, policy, rest, room, &mut |says| {
                find(&["failure"], says)
            });
        }
    }
    // A run that ran to the end and differs says so with its first difference, as re-checked.
    if let (Some(failure), Some((policy, found))) = (
        &report.failure,
        report.policies.last().zip(differences.last()),
    ) {
        let mode = policy.mode.name();
        let differ = differs(&["".into()]).unwrap_or_default();
        let says_differs = (said_of(failure))
            .is_some_and(|(of, rest)| of == policy.mode && rest.starts_with(&differ));
        let recheck = differs(found).map(|why| format!("{mode}: {why}"));
        if says_differs && recheck.as_ref() != Some(failure) {
            find(
                &["failure"],
                match recheck {
                    Some(recheck) => format!(
                        "the failure says \"{failure}\", but the re-check of the evidence says \
                         \"{recheck}\""
                    ),
                    None => format!(
                        "the failure says {mode}'s observations differ from the policy model, \
                         but the re-check of its evidence finds no difference"
                    ),
                },
            );
        }
    }
    match (report.matches_model, &report.failure) {
        (true, Some(_)) => find(
            &["matches_model"],
            "the report says it matched the policy model, and also that it failed".into(),
        ),
        (false, None) => find(
            &["matches_model"],
            "the report says it did not match the policy model, but records no failure: a run \
             that differs says why in \"failure\""
                .into(),
        ),
        _ => {}
    }
    if report.failure.is_none() {
        let first = differences
            .iter()
            .zip(&report.policies)
            .find_map(|(d, p)| d.first().map(|d| format!("{}: {d}", p.mode.name())));
        if let Some(first) = first {
            find(
                &["matches_model"],
                format!(
                    "the report says it matched the policy model, but its own evidence does not: \
                     {first}"
                ),
            );
        }
        if report.policies.len() < modes.len() {
            let ran: Vec<&str> = report.policies.iter().map(|p| p.mode.name()).collect();
            find(
                &["policies"],
                format!(
                    "--mode {} runs {} policies, but the report holds {} ({}) and records no \
                     failure that stopped it",
                    report.inputs.mode.name(),
                    modes.len(),
                    report.policies.len(),
                    joined(ran, ", ")
                ),
            );
        }
    }
    Checked {
        verdict: Recheck::of(findings, report.failure.clone()),
        differences,
    }
}

/// The policy a failure is said of (`"<mode>: …"`), and what it says of it.
fn said_of(failure: &str) -> Option<(Mode, &str)> {
    Mode::ALL.into_iter().find_map(|mode| {
        let rest = failure.strip_prefix(mode.name())?.strip_prefix(": ")?;
        Some((mode, rest))
    })
}

/// The caller a failure (what it says of its policy) names, and what it says of its request:
/// `"S2: GET /slow failed: …"`.
fn failed_caller(rest: &str) -> (Option<Label>, &str) {
    match rest.split_once(": GET ") {
        Some((label, after)) => (label.parse::<Label>().ok(), after),
        None => (None, ""),
    }
}

/// Whether `report`'s run recorded every event on the lab's own thread: the async front on the
/// lab's runtime, with no runtime of its own. Nothing else runs between two polls there, so
/// what one poll does comes whole; elsewhere other threads record too (a connection's
/// thread, a blocking thread, a runtime's workers).
fn on_the_labs_own_thread(report: &Report) -> bool {
    report.runner.front == Front::Async && !report.executor.own_runtime()
}

/// Where `executor` runs, in a sentence's words: " on the lab's usual executor", or the flags
/// that name it (" with --work block").
fn on_executor(executor: Executor) -> String {
    match executor.flags() {
        flags if flags.is_empty() => " on the lab's usual executor".to_owned(),
        flags => format!(" with{flags}"),
    }
}

/// Whether `report`'s runner is the one this version writes for its front and executor (and
/// the scheduler it ran on); `find` is told each field that is not.
fn runner(report: &Report, find: &mut impl FnMut(&[&str], String)) {
    let runner = &report.runner;
    // The safety timeout is the run's own (a library's run may choose another), so the runner
    // is compared with the one written with it.
    let timeout = Duration::from_millis(runner.safety_timeout_ms);
    let wrote = Runner::on(runner.front, report.executor, timeout);
    if runner.server != wrote.server {
        find(
            &["runner", "server"],
            format!(
                "the runner says the {} front ran, but describes another front's server: {}",
                runner.front.name(),
                runner.server
            ),
        );
    }
    for (field, said, written) in [
        ("language", &runner.language, &wrote.language),
        ("client", &runner.client, &wrote.client),
    ] {
        if said != written {
            find(
                &["runner", field],
                format!("the runner's {field} is {said:?}, but this lab writes {written:?}"),
            );
        }
    }
    if runner.runtime != Runner::LAB_RUNTIME {
        find(
            &["runner", "runtime"],
            format!(
                "the runner's runtime is {:?}, but this lab's runs run on {:?}",
                runner.runtime,
                Runner::LAB_RUNTIME
            ),
        );
    }
    // Only another executor than the usual has a front runtime, so `flags` is never empty
    // where it is shown.
    let flags = report.executor.flags();
    match (&runner.front_runtime, &wrote.front_runtime) {
        (None, Some(written)) => find(
            // The runner itself, which names none.
            &["runner"],
            format!(
                "the report's executor is{flags}, but its runner names no runtime of the front's \
                 own; a run with that executor says: {written}"
            ),
        ),
        (Some(said), None) => find(
            &["runner", "front_runtime"],
            format!(
                "the runner says the front ran on a runtime of its own ({said}), but the report's \
                 executor is the lab's usual one"
            ),
        ),
        (Some(said), Some(written)) if said != written => find(
            &["runner", "front_runtime"],
            format!("the runner says {said:?}, but the report's executor{flags} runs: {written}"),
        ),
        _ => {}
    }
}

/// Whether the sequence sends `earlier` before `later`, both before the release: S1, S2, …,
/// then F1.
fn sent_before(earlier: Label, later: Label) -> bool {
    match (earlier, later) {
        (Label::Slow(a), Label::Slow(b)) => a < b,
        (Label::Slow(_), Label::F1) => true,
        _ => false,
    }
}

fn counts(map: &BTreeMap<Pool, usize>) -> String {
    let parts: Vec<String> = map.iter().map(|(p, n)| format!("{p} {n}")).collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::lab::fixtures;

    fn findings(checked: &Checked) -> Vec<String> {
        match &checked.verdict {
            Recheck::DoesNotHold { findings } => findings.iter().map(|f| f.says.clone()).collect(),
            _ => Vec::new(),
        }
    }

    /// Every report recorded from a real run re-checks as matched, with no difference.
    #[test]
    fn every_recorded_report_rechecks_as_matched() {
        for recorded in fixtures::reports() {
            let checked = report(&recorded, None, "");
            assert_eq!(
                checked.verdict,
                Recheck::Matched,
                "{:?}",
                findings(&checked)
            );
            assert!(checked.differences.iter().all(Vec::is_empty));
        }
    }

    /// The default run's shared F1, refused, edited to read 200 in its response (status and
    /// body) while the ledger still refuses it: named at the response, and the stored verdict
    /// is not believed.
    #[test]
    fn a_refusal_edited_into_a_200_is_named_where_it_was_edited() {
        let mut edited = fixtures::reports().swap_remove(1);
        let shared = &mut edited.policies[0];
        let f1 = shared
            .observed
            .responses
            .iter_mut()
            .find(|r| r.request == Label::F1);
        let f1 = f1.expect("the default run answers F1");
        f1.status = 200;
        f1.body = json!({ "request": "F1", "pool": "shared" });
        let checked = report(&edited, None, "/runs/3");
        let Recheck::DoesNotHold { findings } = &checked.verdict else {
            panic!("an edited report is not vouched for: {:?}", checked.verdict);
        };
        assert_eq!(findings[0].pointer, "/runs/3/policies/0/responses/0");
        assert!(
            findings[0].says.starts_with(
                "shared: F1's evidence says 200 but the ledger shows no fast admission"
            ),
            "{findings:?}"
        );
        assert!(!checked.differences[0].is_empty(), "the model differs too");
    }
}
