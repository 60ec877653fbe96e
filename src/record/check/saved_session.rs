//! The check of a classroom session as a whole: its runs in order and what holds across them,
//! the room's gates, and each request the room sent, against the run whose ledger decided it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::admission::ledger::{Event, WorkEvent};
use crate::classroom::room::GAVE_UP;
use crate::label::Label;
use crate::policy::Mode;
use crate::record::read::{SavedRoomGate, SavedRoomRequest, SavedSession};
use crate::report::Report;

use super::answers::{abandoned_differs, answer_differs, answered_though_cancelled};
use super::stopped::Steps;
use super::{Finding, on_the_labs_own_thread, said_of};

/// Checks a classroom session as a whole: its runs' shape, its room's gates and requests
/// against the runs' ledgers, and its own verdict.
pub(crate) fn session(session: &SavedSession) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut find = |path: &[&str], says: String| findings.push(Finding::at("", path, says));
    room_requests(session, &mut find);
    // One command line, one front and executor: `classroom --server/--work` apply to every
    // run, and a new run changes only its inputs.
    if let Some(first) = session.runs.first() {
        let shape = |r: &Report| (r.runner.front, r.executor);
        for (i, run) in session.runs.iter().enumerate().skip(1) {
            let timeout = |r: &Report| r.runner.safety_timeout_ms;
            if timeout(run) != timeout(first) {
                find(
                    &["runs", &i.to_string(), "runner", "safety_timeout_ms"],
                    format!(
                        "run {} has a safety timeout of {} ms, but run 1 of {} ms: every run of \
                         a session runs with the session's options",
                        i + 1,
                        timeout(run),
                        timeout(first)
                    ),
                );
            }
            if shape(run) != shape(first) {
                find(
                    &["runs", &i.to_string(), "runner"],
                    format!(
                        "run {} ran with --server {}{}, but run 1 with --server {}{}: every run \
                         of a session runs on the front and executor its command line names",
                        i + 1,
                        run.runner.front.name(),
                        run.executor.flags(),
                        first.runner.front.name(),
                        first.executor.flags()
                    ),
                );
            }
        }
    }
    // A run is reported once a Next was pressed in it, and the first Next opens its first
    // policy, which the run keeps however it ends.
    for (i, run) in session.runs.iter().enumerate() {
        let first = run.inputs.mode.modes().first().copied();
        if run.policies.first().map(|p| p.mode) != first {
            let has = match run.policies.first() {
                Some(p) => format!("begins with the {} policy", p.mode.name()),
                None => "has no policy".into(),
            };
            find(
                &["runs", &i.to_string(), "policies"],
                format!(
                    "run {} {has}, but a run is reported once a Next was pressed in it, and the \
                     first Next opens its first policy ({}), which it keeps",
                    i + 1,
                    first.map_or("none", Mode::name)
                ),
            );
        }
    }
    // The session lists a run's room gates as it closes the run's policies, one after another.
    for (i, pair) in session.room_gates.windows(2).enumerate() {
        let [before, gate] = pair else { continue };
        if place(session, gate.run, gate.mode) < place(session, before.run, before.mode) {
            find(
                &["room_gates", &(i + 1).to_string()],
                format!(
                    "a room gate of run {}'s {} policy is listed after one of run {}'s {} \
                     policy, which closed after it: the session lists each policy's room gates \
                     as it closes the policy",
                    gate.run + 1,
                    gate.mode.name(),
                    before.run + 1,
                    before.mode.name()
                ),
            );
        }
    }
    // A room gate closes only once the run's own gate has opened, and once the room's last gate
    // of that policy has opened again; then opens after it closed.
    // Each policy's room gates so far (how many, and the last), and what its ledger says of
    // them, read once per policy: a session may list many gates.
    let mut gates_so_far: BTreeMap<(usize, &str), (usize, &SavedRoomGate)> = BTreeMap::new();
    let mut ledgers = BTreeMap::new();
    for (i, gate) in session.room_gates.iter().enumerate() {
        let (earlier, last) = match gates_so_far.get(&(gate.run, gate.mode.name())) {
            Some(&(earlier, last)) => (earlier, Some(last)),
            None => (0, None),
        };
        gates_so_far.insert((gate.run, gate.mode.name()), (earlier + 1, gate));
        if usize::try_from(gate.generation).ok() != Some(earlier + 1) {
            find(
                &["room_gates", &i.to_string(), "generation"],
                format!(
                    "it is generation {}, but it is room gate {} of run {}'s {} policy: a run's \
                     room gates are numbered 1, 2, … in the order they closed",
                    gate.generation,
                    earlier + 1,
                    gate.run + 1,
                    gate.mode.name()
                ),
            );
        }
        if let Some(last) = last
            && last
                .opened_after_event
                .is_none_or(|o| gate.closed_after_event < o)
        {
            find(
                &["room_gates", &i.to_string()],
                "it closed while the room's gate before it was still closed: one room gate at a \
                 time, each closing once the last has opened"
                    .into(),
            );
        }
        let (policy, opened, last, steps) = ledgers
            .entry((gate.run, gate.mode.name()))
            .or_insert_with(|| {
                let policy = (session.runs[gate.run].policies.iter()).find(|p| p.mode == gate.mode);
                let opened = policy.and_then(|p| {
                    (p.work_events.iter())
                        .find(|e| e.event == Event::GateOpened)
                        .map(|e| e.seq)
                });
                let last = policy
                    .and_then(|p| p.work_events.last())
                    .map_or(0, |e| e.seq);
                (policy, opened, last, policy.map(Steps::of))
            });
        let (policy, opened, last) = (*policy, *opened, *last);
        // The instructor's orders run between the sequence's steps, and a run that failed may
        // leave work finishing after its last step.
        let run = &session.runs[gate.run];
        let failed =
            run.failure.is_some() && run.policies.last().map(|p| p.mode) == Some(gate.mode);
        let busy = steps.as_ref().filter(|_| !failed).and_then(|steps| {
            let at = [Some(gate.closed_after_event), gate.opened_after_event];
            at.into_iter()
                .flatten()
                .find_map(|seq| Some((seq, steps.under_way(seq)?)))
        });
        let why = match (opened, gate.opened_after_event, &busy) {
            _ if policy.is_none() => format!(
                "it names the {} policy of run {}, which has no such policy",
                gate.mode.name(),
                gate.run + 1
            ),
            _ if gate.closed_after_event > last
                || gate.opened_after_event.is_some_and(|o| o > last) =>
            {
                format!("it names events after seq {last}, where its run's ledger ends")
            }
            (None, _, _) => format!(
                "it closed in run {}'s {} policy, whose own gate never opened: the room's gate \
                 closes only once the run's has opened",
                gate.run + 1,
                gate.mode.name()
            ),
            (Some(seq), _, _) if gate.closed_after_event < seq => format!(
                "it closed after event {}, before the run's own gate opened at seq {seq}: the \
                 room's gate closes only once the run's has opened",
                gate.closed_after_event
            ),
            (_, _, Some((seq, step))) => format!(
                "it names event {seq}, when {step}: the instructor's orders run between the \
                 sequence's steps"
            ),
            (_, Some(reopened), _) if reopened < gate.closed_after_event => format!(
                "it opened after event {reopened}, before it closed after event {}",
                gate.closed_after_event
            ),
            (_, None, _) => "it never opened, but the session opens the room's gate as it closes \
                          a run, whichever way the run ends"
                .into(),
            _ => continue,
        };
        find(&["room_gates", &i.to_string()], why);
    }
    // A session's own failure is its close's (its page, its server, its journal): a run's is
    // said in the run, of its policy, nor told in the words the record tells a run's in
    // ("run 1: …").
    let failure = session.failure.as_deref();
    let run = failure.and_then(|f| f.strip_prefix("run ")?.split_once(": "));
    let told = match (failure.and_then(said_of), run) {
        (Some((mode, _)), _) => Some(format!("said of the {} policy", mode.name())),
        (None, Some((run, _))) if run.parse::<usize>().is_ok() => {
            Some(format!("told as run {run}'s"))
        }
        _ => None,
    };
    if let Some(told) = told {
        find(
            &["failure"],
            format!(
                "the session's failure is {told}, but a session fails only as it closes, for its \
                 page, server or journal; a run's failure is the run's own"
            ),
        );
    }
    // The session's verdict is its runs' and its close's: it matched only once a run was made,
    // and it did not match only for a reason.
    let claims_all = session.runs.iter().all(|r| r.matches_model);
    let says = if session.runs.is_empty() && session.matches_model {
        Some(
            "the session says it matched the policy model, but it made no run: a session matches \
             only once a run was made",
        )
    } else if !session.matches_model && failure.is_none() && !session.runs.is_empty() && claims_all
    {
        Some(
            "the session says it did not match the policy model, but records no failure, and \
             every run says it matched",
        )
    } else {
        None
    };
    if let Some(says) = says {
        find(&["matches_model"], says.into());
    }
    findings
}

/// Where `mode` comes in the session's `run`: the run, then the policy's place in its run, for a
/// policy of a run the session has.
fn place(session: &SavedSession, run: usize, mode: Mode) -> (usize, Option<usize>) {
    let modes = session.runs.get(run).map(|r| r.inputs.mode.modes());
    (run, modes.and_then(|m| m.iter().position(|&m| m == mode)))
}

/// Checks the room's requests of a classroom session against the runs' ledgers.
fn room_requests(session: &SavedSession, find: &mut impl FnMut(&[&str], String)) {
    // The room's requests are numbered as they arrive, and go to the run open then: a later
    // number never reached an earlier run.
    let mut by_number: Vec<(u32, usize, usize)> = (session.room_requests.iter().enumerate())
        .filter_map(|(i, r)| match r.request {
            Label::Room(n, _) => Some((n, r.run, i)),
            _ => None,
        })
        .collect();
    let order = |r: &SavedRoomRequest| place(session, r.run, r.mode);
    by_number.sort_unstable();
    // Listed as they end, and a run's policy ends with its requests answered or given up: a
    // later run's or policy's request is never listed before an earlier one's.
    let listed = session
        .room_requests
        .windows(2)
        .position(|w| order(&w[1]) < order(&w[0]));
    if let Some(i) = listed {
        let (first, second) = (&session.room_requests[i], &session.room_requests[i + 1]);
        find(
            &["room_requests", &(i + 1).to_string()],
            format!(
                "{} (run {}, {}) is listed after {} (run {}, {}), which came later: the room's \
                 requests are listed as they end, run after run and policy after policy",
                second.request,
                second.run + 1,
                second.mode.name(),
                first.request,
                first.run + 1,
                first.mode.name()
            ),
        );
    }
    // Each number the classroom gave is listed, answered or not: the request is listed even
    // when its student gives up.
    let mut numbers: Vec<u32> = by_number.iter().map(|&(n, _, _)| n).collect();
    numbers.dedup();
    if let Some(missing) = (1..).zip(numbers).find_map(|(k, n)| (k < n).then_some(k)) {
        find(
            &["room_requests"],
            format!(
                "no R{missing} is listed, but a later number is: the classroom numbers the room's \
                 requests 1, 2, … and lists each, answered or not"
            ),
        );
    }
    for pair in by_number.windows(2) {
        let [(earlier, run, earlier_at), (later, later_run, i)] = pair else {
            continue;
        };
        let (first, second) = (
            &session.room_requests[*earlier_at],
            &session.room_requests[*i],
        );
        let says = if later_run < run {
            format!(
                "R{later} reached run {}, but R{earlier}, numbered before it, reached run {}: the \
                 room's requests are numbered as they arrive, run after run",
                later_run + 1,
                run + 1
            )
        } else if later_run == run && order(second) < order(first) {
            format!(
                "R{later} reached run {}'s {} policy, but R{earlier}, numbered before it, reached \
                 its {} policy, which runs after it: the room's requests are numbered as they \
                 arrive, policy after policy",
                run + 1,
                second.mode.name(),
                first.mode.name()
            )
        } else {
            continue;
        };
        find(&["room_requests", &i.to_string()], says);
    }
    // Each in the ledger of the run and policy it reached, and of no other. (Looked up by
    // label, the first listed: one listed twice is named below.)
    let mut by_label = BTreeMap::new();
    for room in &session.room_requests {
        by_label.entry(room.request).or_insert(room);
    }
    for (j, run) in session.runs.iter().enumerate() {
        let mut rooms =
            (run.policies.iter()).flat_map(|p| p.work_events.iter().map(move |e| (p.mode, e)));
        let elsewhere = rooms.find_map(|(mode, e)| {
            let request = e.request.filter(|r| r.from_room())?;
            let listed = by_label.get(&request)?;
            ((listed.run, listed.mode) != (j, mode)).then_some((request, mode, listed))
        });
        if let Some((request, mode, listed)) = elsewhere {
            find(
                &["runs", &j.to_string(), "policies"],
                format!(
                    "{request} is in the ledger of run {} ({}), but it reached run {} ({}): a \
                     room's request reaches one server",
                    j + 1,
                    mode.name(),
                    listed.run + 1,
                    listed.mode.name()
                ),
            );
        }
    }
    // Listed as their answers came, each placed by the ledger's last seq then, with no wait in
    // between (the session runs on one thread): along the list, a policy's seqs never go back.
    let mut placed: BTreeMap<(usize, &str), u64> = BTreeMap::new();
    for (i, room) in session.room_requests.iter().enumerate() {
        let last = placed
            .entry((room.run, room.mode.name()))
            .or_insert(room.after_event);
        if room.after_event < *last {
            find(
                &["room_requests", &i.to_string(), "after_event"],
                format!(
                    "{} is listed after a request of run {}'s {} policy placed after event {}, but \
                     it is placed after event {}: the room's requests are listed as their answers \
                     came",
                    room.request,
                    room.run + 1,
                    room.mode.name(),
                    *last,
                    room.after_event
                ),
            );
        }
        *last = (*last).max(room.after_event);
    }
    let mut seen = BTreeSet::new();
    // Each policy's decisions by request, and where each request's work left the section, read
    // once for all the room's requests.
    let mut decisions: BTreeMap<(usize, &str), BTreeMap<Label, &WorkEvent>> = BTreeMap::new();
    let mut leaving: BTreeMap<(usize, &str), BTreeMap<Label, &WorkEvent>> = BTreeMap::new();
    for (i, room) in session.room_requests.iter().enumerate() {
        let at = i.to_string();
        let mut here = |says: String| find(&["room_requests", &at], says);
        let request = room.request;
        if !seen.insert(request) {
            here(format!(
                "{request} is listed twice: the classroom numbers each request of the room once"
            ));
            continue;
        }
        let run = &session.runs[room.run];
        let Some(policy) = run.policies.iter().find(|p| p.mode == room.mode) else {
            here(format!(
                "{request} reached the {} policy of runs[{}], which has no such policy",
                room.mode.name(),
                room.run
            ));
            continue;
        };
        let events = &policy.work_events;
        let key = (room.run, room.mode.name());
        let decided = (decisions.entry(key))
            .or_insert_with(|| first_by_request(events, |e| e.event.is_decision()))
            .get(&request)
            .copied();
        let last = policy.work_events.last().map_or(0, |e| e.seq);
        // Where its work left the section, if it did.
        let left = (leaving.entry(key))
            .or_insert_with(|| first_by_request(events, |e| e.event == Event::Finished))
            .get(&request)
            .copied();
        match (room.status, decided, &room.error) {
            (Some(_), _, Some(_)) => here(format!(
                "{request} has both an answer and an error: the classroom lists one or the other"
            )),
            // Listed when its student gave up or its run closed, at the ledger's last seq then.
            (None, _, Some(_)) if room.after_event > last => here(format!(
                "{request} is listed without an answer after event {}, but the ledger of runs[{}] \
                 ({}) ends at seq {last}",
                room.after_event,
                room.run,
                room.mode.name()
            )),
            // Its student gave up, or the run's client said why no answer came, naming it.
            (None, _, Some(error)) => {
                let words = error == GAVE_UP || error.starts_with(&format!("{request}: "));
                if room.body.is_some() {
                    here(format!(
                        "{request} is listed with a body but no answer: the classroom lists a \
                         body only with the status it came with"
                    ));
                } else if !words {
                    here(format!(
                        "{request} is listed without an answer, for a reason no classroom gives: \
                         {error:?}; its student gave up, or its request failed, in the words of \
                         the run's client, which name it"
                    ));
                } else if error == GAVE_UP
                    && on_the_labs_own_thread(run)
                    && let Some(cancelled) = left.filter(|e| e.cancelled)
                    && cancelled.seq <= room.after_event
                {
                    // The student's call is dropped, and the request listed, in one poll of
                    // the classroom's connection; the front sees the closed connection and
                    // cancels the work only in a later one. Nothing else cancels a room's work
                    // in a session the binary runs: its runs' gates open before they close,
                    // and room gates only open (a test's hook that abandons a gate, or panics
                    // in work, could; the report does not carry hooks).
                    here(format!(
                        "{request} is listed as given up after event {}, but its work was \
                         cancelled at seq {}: on the async front on the lab's own thread a \
                         student who gives up is listed before the front can see the closed \
                         connection and cancel the work",
                        room.after_event, cancelled.seq
                    ));
                }
            }
            (None, _, None) => here(format!("{request} has neither an answer nor an error")),
            (Some(status), None, _) => here(format!(
                "{request}'s evidence says {status}, but the ledger of runs[{}] ({}) shows no \
                 admission decision for {request}",
                room.run,
                room.mode.name()
            )),
            (Some(status), Some(event), _) => {
                let body = room.body.as_ref().unwrap_or(&Value::Null);
                if let Some(says) = answer_differs(request, status, body, event, room.route) {
                    here(says);
                }
                // Answered once its work left the section (or once refused), within the run.
                let gate = policy.final_state.gate;
                let left_as = left.map(|e| e.cancelled);
                if let Some(says) = abandoned_differs(request, body, room.mode, gate, left_as) {
                    here(says);
                }
                if let Some(left) = left.filter(|e| e.cancelled && status == 200) {
                    here(answered_though_cancelled(request, left.seq));
                }
                let earliest = left.unwrap_or(event).seq;
                if !(earliest..=last).contains(&room.after_event) {
                    here(format!(
                        "{request} is answered after event {}, but the ledger of runs[{}] ({}) \
                         lets it be answered only from seq {earliest}, when its work {}, to its \
                         last event, seq {last}",
                        room.after_event,
                        room.run,
                        room.mode.name(),
                        if left.is_some() {
                            "left the section"
                        } else {
                            "was decided"
                        },
                    ));
                }
            }
        }
    }
}

/// The first of `events` that `keeps` for each request it names.
fn first_by_request(
    events: &[WorkEvent],
    keeps: impl Fn(&WorkEvent) -> bool,
) -> BTreeMap<Label, &WorkEvent> {
    // Reversed, so that a request's first is the one kept.
    let kept = events.iter().rev().filter(|e| keeps(e));
    kept.filter_map(|e| Some((e.request?, e))).collect()
}
