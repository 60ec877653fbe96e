//! The work ledger: every admission event of one policy run, in the order it happened, each
//! also sent to the control observer as it is recorded. Snapshots are derived from the events.

use std::collections::BTreeMap;

use serde::Serialize;
use tokio::sync::mpsc;

use crate::label::Label;
use crate::policy::Pool;

/// What happened to a request (or to the gate) inside the work section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// The request took a permit and entered the work section.
    Admitted,
    /// The request found no permit and was refused at once; it never entered.
    Refused,
    /// Admitted slow work is waiting at the closed gate.
    Held,
    /// The work left the section and its permit went back to the pool.
    Finished,
    /// The coordinator opened the slow gate.
    GateOpened,
}

/// One entry of the ledger, as the report's `work_events` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
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
    /// On `finished` only: the work did not complete but was dropped — its handler was
    /// cancelled (the caller disconnected) or panicked. The permit still went back.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
    /// For a refusal, the requests holding the pool's permits at that moment.
    #[serde(skip)]
    pub held_by: Vec<Label>,
}

/// What the control observer sees at one moment of the sequence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Taken permits per pool: work inside the section.
    pub active_work: BTreeMap<Pool, usize>,
    /// Slow work waiting at the closed gate.
    pub held_at_gate: Vec<Label>,
    /// Requests refused so far.
    pub refused: Vec<Label>,
}

/// The ordered events of one policy run and the observer they are streamed to.
#[derive(Debug)]
pub struct Ledger {
    events: Vec<WorkEvent>,
    /// Requests that asked each pool for a permit, counted before the decision.
    attempts: BTreeMap<Pool, u64>,
    /// Unbounded, so a coordinator that stops reading can never stall a handler (NOTES.md 10).
    observer: mpsc::UnboundedSender<WorkEvent>,
    /// Set only by an injected fault: events are recorded, the observer is never told.
    silent: bool,
}

impl Ledger {
    /// An empty ledger that reports to `observer`, or keeps it waiting forever if `silent`.
    pub fn new(observer: mpsc::UnboundedSender<WorkEvent>, silent: bool) -> Self {
        Self {
            events: Vec::new(),
            attempts: BTreeMap::new(),
            observer,
            silent,
        }
    }

    /// Counts a request asking `pool` for a permit; its decision is recorded next.
    pub fn attempt(&mut self, pool: Pool) {
        *self.attempts.entry(pool).or_default() += 1;
    }

    /// Requests that asked each pool for a permit.
    pub fn attempts(&self) -> &BTreeMap<Pool, u64> {
        &self.attempts
    }

    /// Records an event and tells the observer. Returns the recorded event.
    pub fn record(
        &mut self,
        request: Option<Label>,
        pool: Pool,
        event: Event,
        active_after: usize,
    ) -> &WorkEvent {
        let held_by = match event {
            Event::Refused => self.holders(pool),
            _ => Vec::new(),
        };
        self.push(WorkEvent {
            seq: 0,
            request,
            pool,
            event,
            active_after,
            cancelled: false,
            held_by,
        })
    }

    /// Records that `request`'s work left the section, completed or `cancelled`.
    pub fn finish(&mut self, request: Label, pool: Pool, active_after: usize, cancelled: bool) {
        self.push(WorkEvent {
            seq: 0,
            request: Some(request),
            pool,
            event: Event::Finished,
            active_after,
            cancelled,
            held_by: Vec::new(),
        });
    }

    fn push(&mut self, mut event: WorkEvent) -> &WorkEvent {
        event.seq = self.events.len() as u64 + 1;
        if !self.silent {
            // A closed observer means the coordinator has stopped listening; the ledger still
            // keeps the event for the report.
            let _ = self.observer.send(event.clone());
        }
        self.events.push(event);
        &self.events[self.events.len() - 1]
    }

    /// Every event so far, in order.
    pub fn events(&self) -> &[WorkEvent] {
        &self.events
    }

    /// The requests inside the section on `pool`'s permits: admitted and not yet finished.
    pub fn holders(&self, pool: Pool) -> Vec<Label> {
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
    pub fn snapshot(&self, active_work: BTreeMap<Pool, usize>) -> Snapshot {
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
        let (observer, events) = mpsc::unbounded_channel();
        (Ledger::new(observer, false), events)
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
