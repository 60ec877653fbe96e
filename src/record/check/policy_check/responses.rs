//! The responses and snapshots: each response as the front answers the ledger's decision, in the
//! phase the gate's opening gives it, and each snapshot as the ledger's state at a moment of its
//! step.

use std::collections::BTreeSet;

use crate::draw::table::labels;
use crate::evidence::{Decision, Phase};
use crate::label::Label;
use crate::record::check::answers::{
    abandoned_differs, answer_differs, answered_though_cancelled, showing,
};
use crate::record::check::sent_before;

use super::{PolicyCheck, Replayed};

impl<'a> PolicyCheck<'a> {
    /// Each response must be what the front answers after the ledger's decision, in the phase
    /// the gate's opening gives it; every decision of the sequence has its response.
    pub(super) fn responses(&mut self, replayed: &Replayed<'_>) {
        let (events, decided, gate) = (&replayed.events, &replayed.decided, replayed.gate);
        let observed = &self.file.observed;
        let last = events.len() as u64;
        let finished_at = |request: Label| replayed.finished.get(&request).map(|&(seq, _)| seq);
        let answered: BTreeSet<Label> = observed.responses.iter().map(|r| r.request).collect();
        for (i, r) in observed.responses.iter().enumerate() {
            let at = i.to_string();
            let path = ["responses", at.as_str()];
            let request = r.request;
            // The sequence's own callers' replies: the room's are listed apart.
            if request.from_room() {
                self.find(
                    &path,
                    format!("{request} is listed among the sequence's responses, but the room's requests are listed only in room_requests"),
                );
                continue;
            }
            // Each request is sent once, and its caller's reply recorded once.
            if observed.responses[..i]
                .iter()
                .any(|earlier| earlier.request == request)
            {
                self.find(
                    &path,
                    format!("{request}'s response is listed a second time: each request is sent once, and its reply recorded once"),
                );
                continue;
            }
            if r.route != self.route(request).unwrap_or(request.route()) {
                self.find(
                    &path,
                    format!(
                        "{request}'s response came from {}, but {request} is sent to {}",
                        r.route,
                        request.route()
                    ),
                );
            }
            let Some(d) = decided.get(&request) else {
                self.find(
                    &path,
                    format!("{request} has a response ({}) but the ledger shows no admission decision for {request}: a response with no admission", r.status),
                );
                continue;
            };
            let event = &events[d.index];
            if let Some(says) = answer_differs(request, r.status, &r.body, event, r.route) {
                self.find(&path, says);
            }
            let left_as = replayed
                .finished
                .get(&request)
                .map(|&(_, cancelled)| cancelled);
            let gate_state = self.file.final_state.gate;
            let mode = self.policy.mode;
            if let Some(says) = abandoned_differs(request, &r.body, mode, gate_state, left_as) {
                self.find(&path, says);
            }
            let phase = match gate {
                Some(opened) if opened <= r.after_event => Phase::AfterRelease,
                _ => Phase::BeforeRelease,
            };
            if r.after_event > last {
                self.find(
                    &path,
                    format!("{request}'s response arrived after seq {}, but the ledger ends at seq {last}", r.after_event),
                );
            } else if r.phase != phase {
                let opened =
                    gate.map_or("never opened".to_owned(), |g| format!("opened at seq {g}"));
                self.find(
                    &path,
                    format!(
                        "{request}'s response is marked {}, but it arrived after seq {} and the gate {opened}: it came {}",
                        r.phase.words(),
                        r.after_event,
                        phase.words()
                    ),
                );
            }
            let (decisive, what) = match d.decision {
                Decision::Admitted => (finished_at(request), "its work left the section"),
                Decision::Refused => (Some(d.seq), "its refusal"),
            };
            match decisive {
                Some(seq) if r.after_event < seq => self.find(
                    &path,
                    format!(
                        "{request}'s response arrived after seq {}, before {what} at seq {seq}: the permit leaves before the response is sent",
                        r.after_event,
                    ),
                ),
                None if r.status == 200 => self.find(
                    &path,
                    format!("{request} was answered 200, but its work never left the section"),
                ),
                _ => {}
            }
            if let Some(&(seq, true)) = replayed.finished.get(&request)
                && r.status == 200
            {
                self.find(&path, answered_though_cancelled(request, seq));
            }
        }
        // Listed as they arrived, each placed by the last event then: the ledger only grows.
        if let Some(i) = (1..observed.responses.len())
            .find(|&i| observed.responses[i].after_event < observed.responses[i - 1].after_event)
        {
            let (was, now) = (&observed.responses[i - 1], &observed.responses[i]);
            self.find(
                &["responses", &i.to_string()],
                format!(
                    "{}'s response, listed after {}'s, arrived after seq {}, before {}'s after \
                     seq {}: responses are listed as they arrive",
                    now.request, was.request, now.after_event, was.request, was.after_event
                ),
            );
        }
        // The lab sends each request only once it has the responses it waits for: a refusal's,
        // before the next request; every response of the release, before the probes; S-after's,
        // before F-after.
        for (i, r) in observed.responses.iter().enumerate() {
            let awaited_before = |later: Label| match r.request {
                Label::SlowAfter => later == Label::FastAfter,
                Label::Slow(_) | Label::F1 => {
                    matches!(later, Label::SlowAfter | Label::FastAfter)
                        || r.phase == Phase::BeforeRelease && sent_before(r.request, later)
                }
                _ => false,
            };
            let first = (decided.iter())
                .filter(|&(&later, d)| awaited_before(later) && d.seq <= r.after_event)
                .min_by_key(|(_, d)| d.seq);
            if let Some((later, d)) = first {
                let request = r.request;
                self.find(
                    &["responses", &i.to_string()],
                    format!(
                        "{request}'s response arrived after seq {}, but the lab sends {later} only once it has {request}'s response, and the ledger decides {later} at seq {}",
                        r.after_event, d.seq
                    ),
                );
            }
        }
        if !self.cut_short {
            for (&request, d) in decided {
                if request.from_room() || answered.contains(&request) {
                    continue;
                }
                self.find(
                    &["work_events", &d.index.to_string()],
                    format!(
                        "{request} was {} at seq {} but no response to it is recorded: an admission with no response",
                        d.decision.name(),
                        d.seq
                    ),
                );
            }
        }
        // F1 decided before the gate opened is answered before release; one left unread until
        // release (slow work blocking the front's workers) is decided, and answered, after it.
        let f1_unread = match (decided.get(&Label::F1), gate) {
            (Some(f1), Some(opened)) => f1.seq > opened,
            _ => false,
        };
        if observed.fast_response_before_release.is_none() && !self.cut_short && !f1_unread {
            self.find(
                &["fast_response_before_release"],
                "F1's response before release is missing, though the run went to its end".into(),
            );
        }
        if let Some(f1) = &observed.fast_response_before_release {
            let answered = observed.responses.iter().find(|r| r.request == Label::F1);
            let agrees = answered.is_some_and(|r| {
                f1.request == Label::F1
                    && (r.status, &r.body, r.phase) == (f1.status, &f1.body, Phase::BeforeRelease)
            });
            if !agrees {
                let says = match answered {
                    // The same answer at the same moment, with another body.
                    Some(r)
                        if (f1.request, f1.status) == (Label::F1, r.status)
                            && r.phase == Phase::BeforeRelease =>
                    {
                        format!(
                            "fast_response_before_release says F1's body is {}, but F1's response in responses has the body {}",
                            f1.body, r.body
                        )
                    }
                    _ => {
                        let there = answered.map_or("none".to_owned(), |r| {
                            format!("{} {}", r.status, r.phase.words())
                        });
                        format!(
                            "fast_response_before_release says {} {}, but F1's response in responses is {there}",
                            f1.request, f1.status
                        )
                    }
                };
                self.find(&["fast_response_before_release"], says);
            }
        }
        if let (Some(pending), Some(opened)) = (&observed.slow_callers_pending_before_release, gate)
        {
            // Slow callers of the sequence with no response yet when the gate opened: admitted
            // before it and not yet left, or not decided until after it (unread while slow work
            // blocked the front's workers).
            // A run that failed may never read one seen unread: its caller waited all the same.
            let never_read = (observed.executor.iter())
                .flat_map(|w| w.unread.iter().map(|u| u.request))
                .filter(|r| matches!(r, Label::Slow(_)) && !decided.contains_key(r));
            let mut waiting: Vec<Label> = decided
                .iter()
                .filter(|(r, d)| {
                    matches!(r, Label::Slow(_))
                        && (d.seq > opened
                            || d.decision == Decision::Admitted
                                && finished_at(**r).is_none_or(|f| f > opened))
                })
                .map(|(&r, _)| r)
                .chain(never_read)
                .collect();
            waiting.sort();
            let mut said = pending.clone();
            said.sort();
            if said == waiting && said != *pending {
                self.find(
                    &["slow_callers_pending_before_release"],
                    format!(
                        "slow_callers_pending_before_release lists {}, but the lab notes its held \
                         callers in the order it sent them: {}",
                        labels(pending),
                        labels(&said)
                    ),
                );
            }
            if said != waiting {
                let (unread, held): (Vec<Label>, Vec<Label>) =
                    (waiting.iter()).partition(|r| decided.get(*r).is_none_or(|d| d.seq > opened));
                let mut says = format!(
                    "slow_callers_pending_before_release lists {}, but when the gate opened the ledger held {}",
                    labels(pending),
                    labels(&held)
                );
                if !unread.is_empty() {
                    says.push_str(&format!(
                        ", and the front had not yet read {}",
                        labels(&unread)
                    ));
                }
                self.find(&["slow_callers_pending_before_release"], says);
            }
        }
    }

    /// The observer's snapshots must be the ledger's state at some moment of their step.
    pub(super) fn snapshots(&mut self, replayed: &Replayed<'_>) {
        for watch in replayed.watch.iter().filter(|w| !w.seen) {
            let (name, snapshot) = (watch.name, watch.snapshot);
            let says = match &watch.last {
                Some(s) => format!(
                    "{name} disagrees with the ledger: it shows {}, but {} the ledger shows {}",
                    showing(snapshot),
                    watch.when,
                    showing(s)
                ),
                None => format!("{name} was recorded at no moment the ledger reached"),
            };
            self.find(&[name], says);
        }
    }
}
