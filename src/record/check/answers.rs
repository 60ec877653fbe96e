//! What an answer must say, whoever sent the request: a policy's own responses and the room's
//! requests are both read with these — the status and body a decision gives, a cancelled
//! request that was answered anyway, a state shown as the page's table shows it.

use serde_json::Value;

use crate::admission::gate::GateState;
use crate::admission::ledger::{Event, Snapshot, WorkEvent};
use crate::admission::section::{Refusal, Verdict};
use crate::draw::table::labels;
use crate::evidence::Observed;
use crate::label::Label;
use crate::policy::{Mode, Route};
use crate::server;

use super::counts;

/// Why an answer that `request`'s work was abandoned cannot be, if it cannot: only the run's own
/// gate is ever abandoned (the room's are opened), once a failed run closes at a gate that never
/// opened, and its held work then leaves cancelled. `left_cancelled`: how its work left, if it
/// did.
pub(super) fn abandoned_differs(
    request: Label,
    body: &Value,
    mode: Mode,
    gate: GateState,
    left_cancelled: Option<bool>,
) -> Option<String> {
    if body["error"] != "work_abandoned" {
        return None;
    }
    let mode = mode.name();
    if gate != GateState::Abandoned {
        return Some(format!(
            "{request} is answered that its work was abandoned, but the {mode} policy's gate was \
             not abandoned: only a failed run's close abandons work, at a gate that never opened"
        ));
    }
    (left_cancelled == Some(false)).then(|| {
        format!(
            "{request} is answered that its work was abandoned, but its work left the section \
             done, not cancelled: abandoned work leaves cancelled"
        )
    })
}

/// What a 200 for work that was cancelled at `seq` is.
pub(super) fn answered_though_cancelled(request: Label, seq: u64) -> String {
    format!(
        "{request} was answered 200, but its work was cancelled (seq {seq}): work that is dropped \
         sends no answer"
    )
}

/// The step of the sequence `request` is sent in, and the evidence the lab takes as that step
/// begins, if `observed` has none of it: the run stopped before it. The snapshot before F1 is
/// taken as F1 is sent; the slow callers still waiting are noted as F1's step ends, before the
/// release and the probes after it.
pub(super) fn unreached(
    observed: &Observed,
    request: Option<Label>,
) -> Option<(&'static str, &'static str)> {
    const F1: (&str, &str) = ("the lab sent F1", "snapshot taken as the lab sends F1");
    const RELEASE: (&str, &str) = (
        "the release",
        "slow callers noted as still waiting, which ends F1's step",
    );
    match request {
        Some(Label::F1) if observed.observer_before_fast.is_none() => Some(F1),
        Some(Label::SlowAfter | Label::FastAfter)
            if observed.slow_callers_pending_before_release.is_none() =>
        {
            Some(RELEASE)
        }
        // Any response after the release (`None`: not a request's own step).
        None if observed.slow_callers_pending_before_release.is_none() => Some(RELEASE),
        _ => None,
    }
}

/// How `status` and `body` differ from what the lab's front answers `request` after the
/// ledger's decision `event` ([`server::answer`], both fronts' reply), if they do.
pub(super) fn answer_differs(
    request: Label,
    status: u16,
    body: &Value,
    event: &WorkEvent,
    route: Route,
) -> Option<String> {
    let pool = event.pool;
    let kind = route.path().trim_start_matches('/');
    let verdict = match (event.event, status) {
        (Event::Admitted, 200) => Verdict::Done(pool),
        // A refusal by a pool of this process: its holders are in the ledger, not the body.
        (Event::Refused, 503) => Verdict::Refused(Refusal {
            request,
            pool,
            held_by: Vec::new(),
            holders: Vec::new(),
        }),
        // A failed run gives up on the work it holds, and says so.
        (Event::Admitted, 503) if body["error"] == "work_abandoned" => Verdict::Abandoned(pool),
        (Event::Refused, 200) => {
            return Some(format!(
                "{request}'s evidence says 200 but the ledger shows no {kind} admission: the \
                 {pool} pool refused {request} at seq {}",
                event.seq
            ));
        }
        (Event::Admitted, 503) => {
            return Some(format!(
                "{request}'s evidence says 503 but the ledger shows the {pool} pool admitted \
                 {request} at seq {}",
                event.seq
            ));
        }
        _ => {
            return Some(format!(
                "{request}'s evidence says HTTP {status}, which the lab's front never answers a \
                 request the ledger {}",
                event.event.name()
            ));
        }
    };
    let expected = server::answer(request, verdict).body;
    (*body != expected).then(|| {
        format!(
            "{request}'s response is {status}, but its body {body} is not the one the lab's front \
             sends with it: {expected}"
        )
    })
}

/// Words for what a snapshot, the observer's or the replay's, shows.
pub(super) fn showing(state: &Snapshot) -> String {
    format!(
        "held at the gate {}, refused {}, permits taken {}",
        labels(&state.held_at_gate),
        labels(&state.refused),
        counts(&state.active_work)
    )
}
