//! The evidence of one policy run: what the coordinator observed, what the section recorded and
//! what the server reported once it stopped. The model checks it; the report presents it. It
//! names no front and no report, so both can build on it.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::admission::audit;
use crate::label::Label;
use crate::policy::{Policy, Pool, Route};

// What the work section recorded, as a run's evidence and report carry it.
pub use crate::admission::audit::PoolLedger;
pub use crate::admission::gate::GateState;
pub use crate::admission::ledger::{Event, Snapshot, WorkEvent};
pub use crate::admission::section::FinalState;
// What the run cost, counted beside it.
pub use crate::resources::{ResourceEvidence, Resources};

/// An admission decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Took a permit and entered the work section.
    Admitted,
    /// Found no permit: HTTP 503, never entered, never queued.
    Refused,
}

/// When a caller receives its response, relative to the opening of the slow gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// While the gate is still closed.
    BeforeRelease,
    /// After the coordinator opened the gate.
    AfterRelease,
}

impl Decision {
    /// The decision's name, as the report spells it.
    pub fn name(self) -> &'static str {
        match self {
            Decision::Admitted => "admitted",
            Decision::Refused => "refused",
        }
    }
}

impl Phase {
    /// The phase in words, for messages and the text report.
    pub fn words(self) -> &'static str {
        match self {
            Phase::BeforeRelease => "before release",
            Phase::AfterRelease => "after release",
        }
    }
}

/// What the coordinator observed along the sequence. A field is `None` when a failed run
/// never reached the step that records it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observed {
    /// The observer's snapshot after the held slow requests were decided, before F1 is sent.
    pub observer_before_fast: Option<Snapshot>,
    /// Admitted slow callers with no response yet, checked just before release.
    pub slow_callers_pending_before_release: Option<Vec<Label>>,
    /// F1's actual response.
    pub fast_response_before_release: Option<FastResponse>,
    /// The observer's snapshot after F1's response, before release.
    pub observer_after_fast_before_release: Option<Snapshot>,
    /// Every response as its caller received it, in order.
    pub responses: Vec<ResponseRecord>,
    /// What the lab saw of the front's own runtime (`--work` other than `await`, or
    /// `--workers`); absent from the usual run's report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<ExecutorEvidence>,
}

/// What the lab observed of the front's executor along the sequence (`docs/blocking.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorEvidence {
    /// The front runtime's heartbeat, read at each of the sequence's observations.
    pub heartbeat: Vec<Beat>,
    /// Requests seen arriving and sitting unread in the kernel, in the order they were sent:
    /// every worker that could read them was blocked.
    pub unread: Vec<Unread>,
    /// Admitted requests whose work waited for a thread to run on, their permits held.
    pub queued: Vec<Label>,
}

impl ExecutorEvidence {
    /// The heartbeat's readings from the last slow request held on; empty if none was held.
    /// When every worker is blocked, they stand still from there to the release.
    pub(crate) fn since_last_held(&self) -> &[Beat] {
        let from = self
            .heartbeat
            .iter()
            .rposition(|b| b.moment == Moment::Held);
        from.map_or(&[][..], |from| &self.heartbeat[from..])
    }
}

/// One reading of the heartbeat of the front's runtime.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Beat {
    /// When it was read.
    pub moment: Moment,
    /// The request the moment is about, if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Label>,
    /// The ledger's last `seq` at the reading: its place on the ledger's axis.
    pub after_event: u64,
    /// The heartbeat's ticks so far.
    pub ticks: u64,
}

/// A moment of the sequence at which the heartbeat is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Moment {
    /// Before the first request: the heartbeat has ticked, so the runtime runs tasks.
    Start,
    /// Right after a slow request was seen held at the gate.
    Held,
    /// Right after a request was seen queued for a thread.
    Queued,
    /// Right after a request was seen sitting unread.
    Unread,
    /// Just before the gate opened.
    Release,
}

impl Moment {
    /// The moment's name, as the report spells it.
    pub fn name(self) -> &'static str {
        match self {
            Moment::Start => "start",
            Moment::Held => "held",
            Moment::Queued => "queued",
            Moment::Unread => "unread",
            Moment::Release => "release",
        }
    }
}

/// A request seen arriving and sitting unread: its connection, made by the kernel, waiting in
/// the listener's accept queue for a server that cannot accept it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unread {
    /// The request.
    pub request: Label,
    /// The ledger's last `seq` when it was seen: no decision about it had been recorded.
    pub after_event: u64,
    /// Connections in the listener's accept queue then, this one the last: the kernel's count
    /// (`TCP_INFO` of the listening socket; `/proc/net/tcp` prints it as the listener's
    /// `rx_queue`).
    pub accept_queue: usize,
}

/// One admission decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionRecord {
    /// The request.
    pub request: Label,
    /// Its route.
    pub route: Route,
    /// The pool it drew from.
    pub pool: Pool,
    /// Admitted or refused.
    pub decision: Decision,
    /// The pool's taken permits right after the decision.
    pub active_after: usize,
    /// For a refusal: the requests holding the pool's permits at that moment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<Vec<Label>>,
}

/// A response as its caller received it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseRecord {
    /// The request.
    pub request: Label,
    /// Its route.
    pub route: Route,
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: serde_json::Value,
    /// Received before or after the gate opened.
    pub phase: Phase,
    /// The `seq` of the last work event recorded when the response had arrived: where it
    /// falls on the ledger's axis. Order evidence, not time.
    pub after_event: u64,
}

/// F1's response, as `fast_response_before_release` reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FastResponse {
    /// `F1`.
    pub request: Label,
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: serde_json::Value,
}

/// What the server reports once it has stopped: the report's `server` object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSummary {
    /// Where it listened: `127.0.0.1:<port>`.
    pub address: SocketAddr,
    /// The listener is closed, as observed once the server has returned: no descriptor of this
    /// process is the listening socket any longer (or, where `/proc/self/fd` cannot be read,
    /// a connection to the port is refused).
    pub listener_closed: bool,
    /// Connections accepted over the run.
    pub connections_accepted: u64,
    /// Every connection handler (task or thread) has ended and been joined: counted, as
    /// completed, aborted or panicked, against the connections accepted.
    pub connection_tasks_stopped: bool,
    /// Of those, the handlers that had to be aborted after the drain limit (0 on a clean run).
    pub connection_tasks_aborted: u64,
    /// Requests refused with 403 for not presenting the run's token. They never reached
    /// admission: no permit, no work event, no part of the model.
    pub foreign_requests_refused: u64,
}

/// Everything a policy run produced, before it is compared with the model.
#[derive(Debug)]
pub(crate) struct Evidence {
    /// The ledger, in order.
    pub work_events: Vec<WorkEvent>,
    /// Each pool's audited account.
    pub ledger: BTreeMap<Pool, PoolLedger>,
    /// What the coordinator observed.
    pub observed: Observed,
    /// The section after the run.
    pub final_state: FinalState,
    /// Every client task was joined.
    pub client_threads_stopped: bool,
    /// Client tasks aborted after a failure.
    pub client_tasks_aborted: u64,
    /// Resource evidence.
    pub resources: ResourceEvidence,
    /// The stopped server, if it started.
    pub server: Option<ServerSummary>,
}

impl Evidence {
    /// The evidence of a run that never started: no events, full pools, a closed gate.
    pub(crate) fn nothing_ran(policy: Policy) -> Self {
        let capacities = policy.capacities();
        Evidence {
            work_events: Vec::new(),
            ledger: audit::audit(&[], &BTreeMap::new(), &capacities),
            observed: Observed::default(),
            final_state: FinalState {
                active_work: policy.per_pool(|_| 0),
                available_permits: capacities,
                gate: GateState::Closed,
            },
            client_threads_stopped: true,
            client_tasks_aborted: 0,
            resources: ResourceEvidence::default(),
            server: None,
        }
    }

    /// The admission decisions among the work events, in order.
    pub(crate) fn admissions(&self) -> Vec<AdmissionRecord> {
        let decisions = self.work_events.iter().filter_map(|e| {
            let decision = match e.event {
                Event::Admitted => Decision::Admitted,
                Event::Refused => Decision::Refused,
                _ => return None,
            };
            let request = e.request?;
            Some(AdmissionRecord {
                request,
                route: request.route(),
                pool: e.pool,
                decision,
                active_after: e.active_after,
                held_by: (decision == Decision::Refused).then(|| e.held_by.clone()),
            })
        });
        decisions.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Mode, Slots};

    fn event(seq: u64, request: Label, pool: Pool, event: Event, active: usize) -> WorkEvent {
        WorkEvent {
            seq,
            request: Some(request),
            pool,
            event,
            active_after: active,
            cancelled: false,
            held_by: if event == Event::Refused {
                vec![Label::Slow(1)]
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn admissions_are_read_off_the_ledger() {
        let events = [
            event(1, Label::Slow(1), Pool::Slow, Event::Admitted, 1),
            event(2, Label::Slow(1), Pool::Slow, Event::Held, 1),
            event(3, Label::Slow(2), Pool::Slow, Event::Refused, 1),
            event(4, Label::F1, Pool::Fast, Event::Admitted, 1),
            event(5, Label::F1, Pool::Fast, Event::Finished, 0),
        ];
        let slots = Slots::new(2).expect("an allowed number of slots");
        let policy = Policy {
            mode: Mode::Partitioned,
            slots,
        };
        let evidence = Evidence {
            work_events: events.to_vec(),
            ..Evidence::nothing_ran(policy)
        };
        let decided: Vec<_> = evidence
            .admissions()
            .into_iter()
            .map(|a| (a.request, a.decision, a.held_by))
            .collect();
        assert_eq!(
            decided,
            [
                (Label::Slow(1), Decision::Admitted, None),
                (
                    Label::Slow(2),
                    Decision::Refused,
                    Some(vec![Label::Slow(1)])
                ),
                (Label::F1, Decision::Admitted, None),
            ]
        );
    }
}
