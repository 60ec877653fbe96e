//! The ledger check: replays a run's work events pool by pool and tests the invariants that make
//! over-release and leaked permits visible. A broken invariant fails the run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ledger::{Event, WorkEvent};
use crate::label::Label;
use crate::policy::Pool;

/// One pool's account of a run: the report's `ledger` entry for that pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolLedger {
    /// Permits the pool holds.
    pub capacity: usize,
    /// Requests that asked the pool for a permit and got its decision.
    pub attempts: u64,
    /// Requests that took a permit.
    pub admitted: u64,
    /// Requests refused at once.
    pub refused: u64,
    /// Admitted work that left the section.
    pub finished: u64,
    /// Of `finished`, the work that was dropped rather than completed.
    pub cancelled: u64,
    /// The most permits taken at once.
    pub peak: usize,
    /// Each refusal, with the requests that held every permit at that moment.
    pub refusals: Vec<RefusalRecord>,
    /// The invariants, each with whether it held.
    pub invariants: Vec<Invariant>,
}

/// A refusal and who held the pool's permits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefusalRecord {
    /// The refused request.
    pub request: Label,
    /// The requests holding the permits.
    pub held_by: Vec<Label>,
}

/// A rule the ledger must obey, and whether it did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Invariant {
    /// The rule, in words.
    pub rule: String,
    /// Whether it held over the whole run.
    pub holds: bool,
}

/// Every attempt got exactly one decision.
pub(crate) const DECIDED: &str = "attempts = admitted + refused";
/// Every admitted request left the section: no permit leaked.
pub(crate) const RETURNED: &str = "admitted = finished";
/// No permit was taken beyond capacity or returned twice.
pub(crate) const BOUNDED: &str = "0 <= active <= capacity after every event";
/// The count replayed from the events equals the semaphore's own after every event.
pub(crate) const AGREES: &str = "active counted from the events = the pool's taken permits";

/// Replays `events` for every pool in `capacities`. `attempts` are counted by the section as
/// each pool decides, under the ledger lock, beside the event that records the decision (its
/// own count, not one taken from the events): [`DECIDED`] checks that every decision was
/// recorded as exactly one admission or refusal.
pub(crate) fn audit(
    events: &[WorkEvent],
    attempts: &BTreeMap<Pool, u64>,
    capacities: &BTreeMap<Pool, usize>,
) -> BTreeMap<Pool, PoolLedger> {
    let audit_pool = |(&pool, &capacity): (&Pool, &usize)| {
        let mut ledger = PoolLedger {
            capacity,
            attempts: attempts.get(&pool).copied().unwrap_or(0),
            ..PoolLedger::default()
        };
        let (mut active, mut bounded, mut agrees) = (0_i64, true, true);
        for event in events.iter().filter(|e| e.pool == pool) {
            match event.event {
                Event::Admitted => {
                    ledger.admitted += 1;
                    active += 1;
                }
                Event::Refused => {
                    ledger.refused += 1;
                    ledger
                        .refusals
                        .extend(event.request.map(|request| RefusalRecord {
                            request,
                            held_by: event.held_by.clone(),
                        }));
                }
                Event::Finished => {
                    ledger.finished += 1;
                    ledger.cancelled += u64::from(event.cancelled);
                    active -= 1;
                }
                Event::Held | Event::Started | Event::GateOpened => {}
            }
            bounded &= (0..=capacity as i64).contains(&active);
            agrees &= active == event.active_after as i64;
            ledger.peak = ledger.peak.max(event.active_after);
        }
        let invariants = [
            (DECIDED, ledger.attempts == ledger.admitted + ledger.refused),
            (RETURNED, ledger.admitted == ledger.finished),
            (BOUNDED, bounded),
            (AGREES, agrees),
        ];
        ledger.invariants = (invariants.into_iter())
            .map(|(rule, holds)| Invariant {
                rule: rule.into(),
                holds,
            })
            .collect();
        (pool, ledger)
    };
    capacities.iter().map(audit_pool).collect()
}

impl PoolLedger {
    /// The rules that did not hold.
    pub fn broken(&self) -> impl Iterator<Item = &str> + '_ {
        self.invariants
            .iter()
            .filter(|i| !i.holds)
            .map(|i| i.rule.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(request: u16, event: Event, active_after: usize) -> WorkEvent {
        WorkEvent {
            seq: 0,
            request: Some(Label::Slow(request)),
            pool: Pool::Shared,
            event,
            active_after,
            cancelled: false,
            held_by: Vec::new(),
        }
    }

    fn broken(events: &[WorkEvent], attempts: u64) -> Vec<String> {
        let ledgers = audit(
            events,
            &BTreeMap::from([(Pool::Shared, attempts)]),
            &BTreeMap::from([(Pool::Shared, 2)]),
        );
        ledgers[&Pool::Shared].broken().map(str::to_owned).collect()
    }

    use Event::{Admitted, Finished, Refused};

    #[test]
    fn a_sound_run_breaks_nothing() {
        let events = [
            event(1, Admitted, 1),
            event(2, Admitted, 2),
            event(3, Refused, 2),
            event(1, Finished, 1),
            event(2, Finished, 0),
        ];
        assert_eq!(broken(&events, 3), Vec::<&str>::new());
        let ledgers = audit(
            &events,
            &BTreeMap::from([(Pool::Shared, 3)]),
            &BTreeMap::from([(Pool::Shared, 2)]),
        );
        let shared = &ledgers[&Pool::Shared];
        let counts = (
            shared.attempts,
            shared.admitted,
            shared.refused,
            shared.finished,
        );
        assert_eq!(counts, (3, 2, 1, 2));
        assert_eq!(shared.peak, 2);
    }

    /// A permit returned twice: the replayed count goes below zero and stops agreeing with the
    /// pool, and more work finished than was admitted.
    #[test]
    fn an_over_release_is_caught() {
        let events = [
            event(1, Admitted, 1),
            event(1, Finished, 0),
            event(1, Finished, 0),
        ];
        assert_eq!(broken(&events, 1), [RETURNED, BOUNDED, AGREES]);
    }

    /// More permits taken than the pool holds.
    #[test]
    fn an_over_admission_is_caught() {
        let events = [
            event(1, Admitted, 1),
            event(2, Admitted, 2),
            event(3, Admitted, 2),
            event(1, Finished, 1),
            event(2, Finished, 0),
            event(3, Finished, 0),
        ];
        assert_eq!(broken(&events, 3), [BOUNDED, AGREES]);
    }

    /// A leaked permit and an attempt that never got a decision.
    #[test]
    fn a_leak_and_a_lost_decision_are_caught() {
        let events = [event(1, Admitted, 1)];
        assert_eq!(broken(&events, 2), [DECIDED, RETURNED]);
    }
}
