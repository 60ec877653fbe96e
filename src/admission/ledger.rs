//! The work ledger: every admission event of one policy run, in the order it happened, each
//! also sent to the control observer as it is recorded. Snapshots are derived from the events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::label::Label;
use crate::policy::Pool;

/// What happened to a request (or to the gate) inside the work section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// The request took a permit and entered the work section.
    Admitted,
    /// The request found no permit and was refused at once; it never entered.
    Refused,
    /// Admitted slow work is waiting at the closed gate.
    Held,
    /// Admitted work handed to a pool of threads of its own (`--work spawn-blocking` or
    /// `own-runtime`) got a thread and started: until then it waited, its permit held.
    Started,
    /// The work left the section and its permit went back to the pool.
    Finished,
    /// The coordinator opened the slow gate.
    GateOpened,
}

impl Event {
    /// Whether it is an admission decision: admitted or refused.
    pub fn is_decision(self) -> bool {
        matches!(self, Event::Admitted | Event::Refused)
    }

    /// The event's name, as the report spells it.
    pub fn name(self) -> &'static str {
        match self {
            Event::Admitted => "admitted",
            Event::Refused => "refused",
            Event::Held => "held",
            Event::Started => "started",
            Event::Finished => "finished",
            Event::GateOpened => "gate_opened",
        }
    }
}

/// One entry of the ledger, as the report's `work_events` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkEvent {
    /// Position in the ledger, from 1. Evidence of order, not of time.
    pub seq: u64,
    /// The request, or `None` for `gate_opened`.
    pub request: Option<Label>,
    /// The pool the event concerns (for `gate_opened`, the pool `/slow` draws from).
    pub pool: Pool,
    /// What happened.
    pub event: Event,
    /// The pool's taken permits right after the event.
    pub active_after: usize,
    /// On `finished` only: the work did not complete — its handler was cancelled (the caller
    /// disconnected) or panicked, or the gate it waited at was abandoned. The permit still
    /// went back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
    /// For a refusal, the requests holding the pool's permits at that moment.
    #[serde(skip)]
    pub held_by: Vec<Label>,
}

/// What the control observer sees at one moment of the sequence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// Taken permits per pool: work inside the section.
    pub active_work: BTreeMap<Pool, usize>,
    /// Slow work waiting at the closed gate.
    pub held_at_gate: Vec<Label>,
    /// Requests refused so far.
    pub refused: Vec<Label>,
}

/// The ordered events of one policy run, and the streams they are sent to as they happen.
///
/// One source, many readers: the report reads the whole list at the end, and each subscriber
/// (the coordinator's control observer, a live page) receives every event after the ones it
/// was handed when it subscribed — under one lock, so none is missed or seen twice.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    events: Vec<WorkEvent>,
    /// Requests that asked each pool for a permit, counted as the pool decides, apart from the
    /// event that records the decision.
    attempts: BTreeMap<Pool, u64>,
    /// Unbounded, so a reader that stops reading can never stall a handler; a reader that is
    /// gone is dropped at the next event.
    subscribers: Vec<mpsc::UnboundedSender<WorkEvent>>,
}

impl Ledger {
    /// The events so far, and a stream of every event after them.
    pub(crate) fn subscribe(&mut self) -> (Vec<WorkEvent>, mpsc::UnboundedReceiver<WorkEvent>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.subscribers.push(sender);
        (self.events.clone(), receiver)
    }

    /// Counts a request asking `pool` for a permit, once the pool has decided; the decision is
    /// recorded next.
    pub(crate) fn attempt(&mut self, pool: Pool) {
        *self.attempts.entry(pool).or_default() += 1;
    }

    /// Requests that asked each pool for a permit and got its decision.
    pub(crate) fn attempts(&self) -> &BTreeMap<Pool, u64> {
        &self.attempts
    }

    /// Records an event and tells the observer. Returns the recorded event.
    pub(crate) fn record(
        &mut self,
        request: Option<Label>,
        pool: Pool,
        event: Event,
        active_after: usize,
    ) -> &WorkEvent {
        self.push(request, pool, event, active_after, false)
    }

    /// Records an event, `cancelled` for work that left without completing, and tells the
    /// observer. Returns the recorded event.
    pub(crate) fn push(
        &mut self,
        request: Option<Label>,
        pool: Pool,
        event: Event,
        active_after: usize,
        cancelled: bool,
    ) -> &WorkEvent {
        let held_by = match event {
            Event::Refused => self.holders(pool),
            _ => Vec::new(),
        };
        let event = WorkEvent {
            seq: self.events.len() as u64 + 1,
            request,
            pool,
            event,
            active_after,
            cancelled,
            held_by,
        };
        // A closed stream means its reader has stopped listening; the ledger still keeps the
        // event for the report.
        self.subscribers
            .retain(|subscriber| subscriber.send(event.clone()).is_ok());
        self.events.push(event);
        &self.events[self.events.len() - 1]
    }

    /// Every event so far, in order.
    pub(crate) fn events(&self) -> &[WorkEvent] {
        &self.events
    }

    /// The requests inside the section on `pool`'s permits: admitted and not yet finished.
    fn holders(&self, pool: Pool) -> Vec<Label> {
        let mut holders = Vec::new();
        for event in self.events.iter().filter(|e| e.pool == pool) {
            match (event.event, event.request) {
                (Event::Admitted, Some(request)) => holders.push(request),
                (Event::Finished, Some(request)) => holders.retain(|&h| h != request),
                _ => {}
            }
        }
        holders
    }

    /// What the observer sees now, given each pool's taken permits.
    pub(crate) fn snapshot(&self, active_work: BTreeMap<Pool, usize>) -> Snapshot {
        let mut held_at_gate = Vec::new();
        let mut refused = Vec::new();
        for event in &self.events {
            match (event.event, event.request) {
                (Event::Held, Some(request)) => held_at_gate.push(request),
                (Event::Finished, Some(request)) => held_at_gate.retain(|&h| h != request),
                (Event::Refused, Some(request)) => refused.push(request),
                _ => {}
            }
        }
        Snapshot {
            active_work,
            held_at_gate,
            refused,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> (Ledger, mpsc::UnboundedReceiver<WorkEvent>) {
        let mut ledger = Ledger::default();
        let (so_far, events) = ledger.subscribe();
        assert!(so_far.is_empty());
        (ledger, events)
    }

    #[test]
    fn refusals_name_the_holders_at_that_moment() {
        let (mut ledger, _events) = ledger();
        ledger.record(Some(Label::Slow(1)), Pool::Shared, Event::Admitted, 1);
        ledger.record(Some(Label::Slow(2)), Pool::Shared, Event::Admitted, 2);
        let refused = ledger.record(Some(Label::F1), Pool::Shared, Event::Refused, 2);
        assert_eq!(refused.held_by, [Label::Slow(1), Label::Slow(2)]);
        ledger.record(Some(Label::Slow(1)), Pool::Shared, Event::Finished, 1);
        let refused = ledger.record(Some(Label::Slow(3)), Pool::Shared, Event::Refused, 1);
        assert_eq!(refused.held_by, [Label::Slow(2)]);
    }

    #[test]
    fn every_event_reaches_the_observer_in_order() {
        let (mut ledger, mut events) = ledger();
        ledger.record(Some(Label::Slow(1)), Pool::Slow, Event::Admitted, 1);
        ledger.record(Some(Label::Slow(1)), Pool::Slow, Event::Held, 1);
        ledger.record(None, Pool::Slow, Event::GateOpened, 1);
        let seen: Vec<_> = std::iter::from_fn(|| events.try_recv().ok())
            .map(|e| (e.seq, e.event))
            .collect();
        assert_eq!(
            seen,
            [
                (1, Event::Admitted),
                (2, Event::Held),
                (3, Event::GateOpened)
            ]
        );
    }

    /// A late subscriber is handed the events so far, then streamed the rest: none missed, none
    /// twice — how a page that reloads rebuilds itself.
    #[test]
    fn a_late_subscriber_gets_the_past_then_the_future() {
        let (mut ledger, _first) = ledger();
        ledger.record(Some(Label::Slow(1)), Pool::Shared, Event::Admitted, 1);
        let (past, mut future) = ledger.subscribe();
        ledger.record(Some(Label::Slow(1)), Pool::Shared, Event::Held, 1);
        let future: Vec<_> = std::iter::from_fn(|| future.try_recv().ok()).collect();
        let seqs: Vec<_> = past.iter().chain(&future).map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2]);
    }

    #[test]
    fn snapshots_follow_holding_finishing_and_refusing() {
        let (mut ledger, _events) = ledger();
        ledger.record(Some(Label::Slow(1)), Pool::Slow, Event::Admitted, 1);
        ledger.record(Some(Label::Slow(1)), Pool::Slow, Event::Held, 1);
        ledger.record(Some(Label::Slow(2)), Pool::Slow, Event::Refused, 1);
        let before = ledger.snapshot(BTreeMap::new());
        assert_eq!(before.held_at_gate, [Label::Slow(1)]);
        assert_eq!(before.refused, [Label::Slow(2)]);
        ledger.record(Some(Label::Slow(1)), Pool::Slow, Event::Finished, 0);
        let after = ledger.snapshot(BTreeMap::new());
        assert!(after.held_at_gate.is_empty());
        assert_eq!(after.refused, [Label::Slow(2)]);
    }
}
