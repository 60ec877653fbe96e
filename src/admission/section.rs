//! The protected work section: admission by permit, the slow gate, and the ledger, behind one
//! call that any server front makes per request.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::audit::{self, PoolLedger};
use super::gate::Gate;
use super::ledger::{Event, Ledger, Snapshot, WorkEvent};
use super::lock;
use super::pools::Pools;
use super::token::RunToken;
use crate::faults::Faults;
use crate::label::Label;
use crate::policy::{Policy, Pool, Route};

/// A request found no free permit in its pool. It never entered the section and nothing holds
/// it for later: this is the whole of the refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The refused request.
    pub request: Label,
    /// The pool that had no permit left.
    pub pool: Pool,
    /// The requests holding that pool's permits when it refused.
    pub held_by: Vec<Label>,
}

/// Whether the slow gate is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GateState {
    /// Slow work waits.
    Closed,
    /// Slow work passes; the gate never closes again.
    Open,
}

/// The section's state once the run is over: what `final_state` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FinalState {
    /// Taken permits per pool; 0 when everything left the section.
    pub active_work: BTreeMap<Pool, usize>,
    /// Free permits per pool; equal to the capacity when everything was returned.
    pub available_permits: BTreeMap<Pool, usize>,
    /// The slow gate.
    pub gate: GateState,
}

/// The pools, gate and ledger of one policy run, and the token its callers must present.
///
/// Locks: the gate's lock may be taken before the ledger's, never the other way round. Neither
/// is held across an `.await`, so a std `Mutex` is the right tool.
#[derive(Debug)]
pub struct WorkSection {
    pools: Pools,
    gate: Gate,
    ledger: Mutex<Ledger>,
    token: RunToken,
    foreign_refused: AtomicU64,
    faults: Faults,
}

impl WorkSection {
    /// Full pools for `policy`, a closed gate, and a ledger that streams to `observer`; only
    /// requests presenting `token` may ask for a permit.
    pub fn new(
        policy: Policy,
        token: RunToken,
        observer: mpsc::UnboundedSender<WorkEvent>,
    ) -> Self {
        Self::with_faults(policy, token, observer, Faults::default())
    }

    /// The same, with `faults` injected (tests only; the command line never sets any).
    pub fn with_faults(
        policy: Policy,
        token: RunToken,
        observer: mpsc::UnboundedSender<WorkEvent>,
        faults: Faults,
    ) -> Self {
        Self {
            pools: Pools::new(policy),
            gate: Gate::new(),
            ledger: Mutex::new(Ledger::new(observer, faults.observer_silent)),
            token,
            foreign_refused: AtomicU64::new(0),
            faults,
        }
    }

    /// Whether a request presenting `token` (a header value, if any) belongs to this run. A
    /// request that does not is counted, and its front must refuse it before admission.
    pub fn admits_caller(&self, token: Option<&[u8]>) -> bool {
        let admitted = self.token.admits(token);
        if !admitted {
            self.foreign_refused.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    /// Requests refused so far for not presenting the run's token.
    pub fn foreign_requests_refused(&self) -> u64 {
        self.foreign_refused.load(Ordering::Relaxed)
    }

    /// The policy this section enforces.
    pub fn policy(&self) -> Policy {
        self.pools.policy()
    }

    /// Performs one request's work. Takes a permit from the route's pool without waiting, or
    /// refuses at once. Admitted slow work then waits at the gate; fast work has nothing to wait
    /// for. The permit is returned when the work leaves the section, before this returns, so
    /// the caller builds its response with the permit already back in the pool.
    ///
    /// Dropping the returned future (a client that disconnects cancels its handler) also leaves
    /// the section: the permit returns and the ledger records `finished`.
    pub async fn perform(&self, request: Label, route: Route) -> Result<Pool, Refusal> {
        let mut work = self.enter(request, route)?;
        if self.faults.handler_panics == Some(request) {
            panic!("injected fault: the handler of {request} panicked inside the work section");
        }
        if route == Route::Slow {
            self.gate
                .pass(|| {
                    self.record(request, work.pool, Event::Held);
                })
                .await;
        }
        let pool = work.pool;
        // Leave the section: the permit goes back before the caller builds its response.
        work.completed = true;
        drop(work);
        Ok(pool)
    }

    /// Opens the slow gate (once), recording `gate_opened` before any held work can move.
    pub fn open_gate(&self) {
        if self.faults.gate_stuck {
            return;
        }
        self.gate.open(|| {
            let pool = self.policy().pool_for(Route::Slow);
            let active = self.pools.active(pool);
            self.ledger().record(None, pool, Event::GateOpened, active);
        });
    }

    /// What the control observer sees now.
    pub fn snapshot(&self) -> Snapshot {
        self.ledger()
            .snapshot(self.per_pool(|pool| self.pools.active(pool)))
    }

    /// The `seq` of the last work event recorded (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.ledger().events().last().map_or(0, |e| e.seq)
    }

    /// Every work event so far, in order.
    pub fn events(&self) -> Vec<WorkEvent> {
        self.ledger().events().to_vec()
    }

    /// Each pool's account of the run so far, with its invariants checked.
    pub fn audit(&self) -> BTreeMap<Pool, PoolLedger> {
        let policy = self.policy();
        let capacities = self.per_pool(|pool| policy.capacity(pool));
        let ledger = self.ledger();
        audit::audit(ledger.events(), ledger.attempts(), &capacities)
    }

    /// Taken and free permits per pool, and the gate.
    pub fn final_state(&self) -> FinalState {
        FinalState {
            active_work: self.per_pool(|pool| self.pools.active(pool)),
            available_permits: self.per_pool(|pool| self.pools.available(pool)),
            gate: if self.gate.is_open() {
                GateState::Open
            } else {
                GateState::Closed
            },
        }
    }

    fn enter(&self, request: Label, route: Route) -> Result<Work<'_>, Refusal> {
        let pool = self.policy().pool_for(route);
        // Decide and record under the ledger lock, so the ledger's order and counts are the
        // semaphore's own, whatever else runs at the same time.
        let mut ledger = self.ledger();
        ledger.attempt(pool);
        match self.pools.try_acquire(pool) {
            Some(permit) => {
                ledger.record(
                    Some(request),
                    pool,
                    Event::Admitted,
                    self.pools.active(pool),
                );
                Ok(Work {
                    section: self,
                    request,
                    pool,
                    permit: Some(permit),
                    completed: false,
                })
            }
            None => {
                let refused =
                    ledger.record(Some(request), pool, Event::Refused, self.pools.active(pool));
                Err(Refusal {
                    request,
                    pool,
                    held_by: refused.held_by.clone(),
                })
            }
        }
    }

    fn record(&self, request: Label, pool: Pool, event: Event) {
        let active = self.pools.active(pool);
        self.ledger().record(Some(request), pool, event, active);
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        lock(&self.ledger)
    }

    fn per_pool(&self, count: impl Fn(Pool) -> usize) -> BTreeMap<Pool, usize> {
        let pools = self.policy().pools().iter();
        pools.map(|&pool| (pool, count(pool))).collect()
    }
}

/// Admitted work inside the section. It owns its permit, so the permit lives exactly as long as
/// the work, and leaving by any path records `finished`: completing, or being dropped because
/// its handler was cancelled (the caller disconnected) or panicked (`cancelled: true`).
#[derive(Debug)]
struct Work<'a> {
    section: &'a WorkSection,
    request: Label,
    pool: Pool,
    /// Always `Some` until `drop` takes it.
    permit: Option<OwnedSemaphorePermit>,
    /// Set when the work ran to its end; still `false` when it is dropped by a cancelled or
    /// panicking handler.
    completed: bool,
}

impl Drop for Work<'_> {
    fn drop(&mut self) {
        // Return the permit under the ledger lock, so `active_after` counts it as returned.
        let mut ledger = self.section.ledger();
        drop(self.permit.take());
        let active = self.section.pools.active(self.pool);
        ledger.finish(self.request, self.pool, active, !self.completed);
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::policy::{Mode, Slots};

    fn section(mode: Mode) -> (WorkSection, mpsc::UnboundedReceiver<WorkEvent>) {
        let slots = Slots::new(2).expect("2 is an allowed number of slots");
        let (observer, events) = mpsc::unbounded_channel();
        let token = RunToken::generate().expect("the OS has randomness");
        (
            WorkSection::new(Policy { mode, slots }, token, observer),
            events,
        )
    }

    fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    /// A refusal holds no permit, names who holds them, and leaves the active count alone.
    #[test]
    fn a_full_pool_refuses_at_once_and_names_its_holders() {
        let (section, _events) = section(Mode::Shared);
        let mut s1 = pin!(section.perform(Label::Slow(1), Route::Slow));
        let mut s2 = pin!(section.perform(Label::Slow(2), Route::Slow));
        assert!(poll_once(s1.as_mut()).is_pending());
        assert!(poll_once(s2.as_mut()).is_pending());
        let f1 = pin!(section.perform(Label::F1, Route::Fast));
        let Poll::Ready(Err(refusal)) = poll_once(f1) else {
            panic!("F1 was not refused at once");
        };
        assert_eq!(refusal.held_by, [Label::Slow(1), Label::Slow(2)]);
        assert_eq!(section.snapshot().active_work[&Pool::Shared], 2);
        section.open_gate();
        assert_eq!(poll_once(s1), Poll::Ready(Ok(Pool::Shared)));
        assert_eq!(poll_once(s2), Poll::Ready(Ok(Pool::Shared)));
        let end = section.final_state();
        assert_eq!(end.active_work[&Pool::Shared], 0);
        assert_eq!(end.available_permits[&Pool::Shared], 2);
        assert_eq!(end.gate, GateState::Open);
    }

    /// Dropping held work (a cancelled handler) returns its permit and records `finished`.
    #[test]
    fn cancelled_work_leaves_the_section() {
        let (section, _events) = section(Mode::Partitioned);
        {
            let mut s1 = pin!(section.perform(Label::Slow(1), Route::Slow));
            assert!(poll_once(s1.as_mut()).is_pending());
            assert_eq!(section.snapshot().held_at_gate, [Label::Slow(1)]);
        }
        let events: Vec<_> = section
            .events()
            .iter()
            .map(|e| (e.event, e.cancelled))
            .collect();
        let cancelled = (Event::Finished, true);
        let expected = [(Event::Admitted, false), (Event::Held, false), cancelled];
        assert_eq!(events, expected);
        assert_eq!(section.final_state().available_permits[&Pool::Slow], 1);
        assert!(section.audit()[&Pool::Slow].broken().next().is_none());
        assert!(section.snapshot().held_at_gate.is_empty());
    }

    /// Fast work passes straight through while the gate is closed; slow work after the opening
    /// is never recorded as held.
    #[test]
    fn only_slow_work_waits_and_only_while_the_gate_is_closed() {
        let (section, _events) = section(Mode::Partitioned);
        let f1 = pin!(section.perform(Label::F1, Route::Fast));
        assert_eq!(poll_once(f1), Poll::Ready(Ok(Pool::Fast)));
        section.open_gate();
        let after = pin!(section.perform(Label::SlowAfter, Route::Slow));
        assert_eq!(poll_once(after), Poll::Ready(Ok(Pool::Slow)));
        let events: Vec<_> = section.events().iter().map(|e| e.event).collect();
        assert_eq!(
            events,
            [
                Event::Admitted,
                Event::Finished,
                Event::GateOpened,
                Event::Admitted,
                Event::Finished
            ]
        );
    }
}
