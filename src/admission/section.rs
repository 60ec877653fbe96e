//! The protected work section: admission by permit, the slow gate, and the ledger. A server
//! front asks it to [`admit`](WorkSection::admit) a request, then runs the admitted [`Work`] —
//! as a task (`run`) or a blocked thread (`run_blocking`).
//!
//! Admission is `async` because a pool shared with other processes decides after a round trip
//! (see [`shared_pool`](super::shared_pool)); a local pool decides without awaiting, and the threaded
//! front, which has only local pools, admits with [`admit_now`](WorkSection::admit_now).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

// Work whose blocking wait runs on another thread than its handler's.
#[path = "off_thread.rs"]
mod off_thread;

use super::audit::{self, PoolLedger};
use super::gate::{Gate, GateState};
use super::ledger::{Event, Ledger, Snapshot, WorkEvent};
use super::lock;
use super::pools::{Permit, Permits, Pools};
use super::shared_pool::{SharedDecision, SharedDriver, SharedLink, SharedPool};
use super::token::RunToken;
use crate::label::Label;
use crate::policy::{Allocation, Pool, Route};

/// A request found no free permit in its pool. It never entered the section and nothing holds
/// it for later: this is the whole of the refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub request: Label,
    /// The pool that had no permit left.
    pub pool: Pool,
    /// The requests holding that pool's permits when it refused.
    pub held_by: Vec<Label>,
    /// For a pool shared with other processes: every holder as the pool named it, such as
    /// `r1/S3` (replica and request). Empty for a local pool, whose holders are `held_by`.
    pub holders: Vec<String>,
}

/// The pool could not decide: a pool shared with other processes did not answer. The request
/// never entered the section; nothing holds it for later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PoolFailure {
    pub request: Label,
    /// The pool that could not decide.
    pub pool: Pool,
    /// Why, in one line.
    pub reason: String,
}

/// Why a request did not enter the section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Denied {
    /// No permit was free.
    Refused(Refusal),
    /// The pool could not decide.
    Failed(PoolFailure),
}

/// How a request's visit to the work section ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Admitted, and the work ran to its end; the permit is already back in this pool.
    Done(Pool),
    /// Refused at once.
    Refused(Refusal),
    /// Admitted, but the gate was abandoned while the work was held: it left unfinished.
    Abandoned(Pool),
    /// The pool could not decide, so the request did not enter.
    Failed(PoolFailure),
}

impl From<Denied> for Verdict {
    fn from(denied: Denied) -> Verdict {
        match denied {
            Denied::Refused(refusal) => Verdict::Refused(refusal),
            Denied::Failed(failure) => Verdict::Failed(failure),
        }
    }
}

/// The section's state once the run is over: what `final_state` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
/// Locks: a gate's, then the ledger's, in that order and never the other way round. None is held across an `.await`, so a std `Mutex` is the right tool. A pool's count is always
/// read under the ledger lock, so every event's `active_after` is the semaphore's own.
#[derive(Debug)]
pub(crate) struct WorkSection {
    pools: Pools,
    /// The run's slow gate: a latch the sequence opens once.
    gate: Arc<Gate>,
    ledger: Mutex<Ledger>,
    token: RunToken,
    foreign_refused: AtomicU64,
}

impl WorkSection {
    /// Full pools of `permits` for `allocation` (a lab policy, or a larger shared pool), a
    /// closed gate and an empty ledger; only requests presenting `token` may ask for a permit.
    pub(crate) fn new(
        allocation: impl Into<Allocation>,
        permits: Permits,
        token: RunToken,
    ) -> Self {
        Self::over(Pools::new(allocation.into(), permits), token)
    }

    /// `pools` behind a closed gate, with an empty ledger.
    fn over(pools: Pools, token: RunToken) -> Self {
        Self {
            pools,
            gate: Arc::new(Gate::new()),
            ledger: Mutex::default(),
            token,
            foreign_refused: AtomicU64::new(0),
        }
    }

    /// The events so far, and a stream of every event after them: the control observer's
    /// feed, or a live view's. The report reads [`WorkSection::events`] instead.
    pub(crate) fn subscribe(&self) -> (Vec<WorkEvent>, mpsc::UnboundedReceiver<WorkEvent>) {
        self.ledger().subscribe()
    }

    /// The pools this section enforces.
    pub(crate) fn allocation(&self) -> &Allocation {
        self.pools.allocation()
    }

    /// Refuses a request that does not present this run's token (a header value, if any):
    /// returns `true` and counts it. Such a request must get no further than this.
    pub(crate) fn refuse_foreign(&self, token: Option<&[u8]>) -> bool {
        let foreign = !self.token.admits(token);
        if foreign {
            self.foreign_refused.fetch_add(1, Ordering::Relaxed);
        }
        foreign
    }

    /// Pools of `allocation` whose permits all come from `pool`, a pool shared with other
    /// processes; a closed gate and an empty ledger. The returned driver makes the section's
    /// round trips: its owner runs it beside the server, calls [`WorkSection::close_remote`]
    /// once the server has stopped, and then awaits the driver's account.
    pub(crate) fn with_remote(
        allocation: impl Into<Allocation>,
        pool: Arc<dyn SharedPool>,
        token: RunToken,
    ) -> (Self, SharedDriver) {
        let allocation = allocation.into();
        let (link, driver) = SharedLink::new(allocation.pools(), pool);
        (Self::over(Pools::remote(allocation, link), token), driver)
    }

    /// Ends remote admission: later requests fail, and the driver ends once its round trips
    /// have. Call it after the server has stopped, when no work is left to release.
    pub(crate) fn close_remote(&self) {
        if let Some(link) = self.pools.link() {
            link.close();
        }
    }

    /// Requests refused so far for not presenting the run's token.
    pub(crate) fn foreign_requests_refused(&self) -> u64 {
        self.foreign_refused.load(Ordering::Relaxed)
    }

    /// Takes a permit from `route`'s pool without waiting for one, or refuses at once: a
    /// refused request never enters the section and nothing holds it for later. The decision
    /// is recorded before this returns; the admitted [`Work`] owns its permit.
    ///
    /// A local pool decides without awaiting. A pool shared with other processes decides
    /// after one round trip, made by the section's driver without the ledger lock held; the
    /// decision is then recorded under it. Cancelling this future loses no permit.
    pub(crate) async fn admit(&self, request: Label, route: Route) -> Result<Work<'_>, Denied> {
        let Some(link) = self.pools.link() else {
            return self.admit_now(request, route);
        };
        let pool = self.allocation().pool_for(route);
        let decision = link.decide(pool, request).await;
        let mut ledger = self.ledger();
        let decision = match decision {
            Ok(SharedDecision::Admitted(permit)) => {
                Ok(Permit::Remote(link.hold(pool, request, permit)))
            }
            Ok(SharedDecision::Refused(holders)) => Err(holders),
            // Undecided: neither an attempt with a decision nor an event; the run fails on it.
            Err(reason) => {
                return Err(Denied::Failed(PoolFailure {
                    request,
                    pool,
                    reason: format!("{reason:#}"),
                }));
            }
        };
        self.decided(&mut ledger, request, route, pool, decision)
    }

    /// [`WorkSection::admit`] for a section whose pools are this process's, deciding without
    /// awaiting: the threaded front's path. A section with remote permits cannot decide here
    /// and says so.
    pub(crate) fn admit_now(&self, request: Label, route: Route) -> Result<Work<'_>, Denied> {
        let pool = self.allocation().pool_for(route);
        if self.pools.link().is_some() {
            return Err(Denied::Failed(PoolFailure {
                request,
                pool,
                reason: "this section's permits are remote: admit it on the async path".into(),
            }));
        }
        // Decide and record under the ledger lock, so the ledger's order and counts are the
        // semaphore's own, whatever else runs at the same time.
        let mut ledger = self.ledger();
        let decision = self.pools.try_acquire(pool).ok_or_else(Vec::new);
        self.decided(&mut ledger, request, route, pool, decision)
    }

    /// Records a decision under the ledger lock (`ledger`), with the pool's count after it: the
    /// admitted [`Work`] owning its permit, or the refusal naming the holders (for a pool shared
    /// with other processes, as that pool names them; empty for a local pool).
    fn decided(
        &self,
        ledger: &mut Ledger,
        request: Label,
        route: Route,
        pool: Pool,
        decision: Result<Permit, Vec<String>>,
    ) -> Result<Work<'_>, Denied> {
        ledger.attempt(pool);
        let active = self.pools.active(pool);
        match decision {
            Ok(permit) => {
                ledger.record(Some(request), pool, Event::Admitted, active);
                Ok(Work {
                    section: self,
                    request,
                    route,
                    pool,
                    permit: Some(permit),
                    completed: false,
                    left: None,
                })
            }
            Err(holders) => {
                let refused = ledger.record(Some(request), pool, Event::Refused, active);
                Err(Denied::Refused(Refusal {
                    request,
                    pool,
                    held_by: refused.held_by.clone(),
                    holders,
                }))
            }
        }
    }

    /// Opens the slow gate (once), recording `gate_opened` before any held work can move.
    pub(crate) fn open_gate(&self) {
        let pool = self.allocation().pool_for(Route::Slow);
        self.gate
            .open(|| self.record(None, pool, Event::GateOpened));
    }

    /// Abandons the run's gate if it is still closed: held work leaves unfinished. For tearing
    /// down a failed run whose held work cannot be aborted (the threaded front's blocked
    /// threads).
    pub(crate) fn abandon_gate(&self) {
        self.gate.abandon();
    }

    /// The run's own slow gate: the one the sequence opens. Whoever starts a front may give it
    /// other gates for some requests; the section records `held` at whichever gate is passed.
    pub(crate) fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// What the control observer sees now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let ledger = self.ledger();
        ledger.snapshot(self.allocation().per_pool(|pool| self.pools.active(pool)))
    }

    /// The `seq` of the `gate_opened` event, once the gate has opened.
    pub(crate) fn gate_opened_at(&self) -> Option<u64> {
        let ledger = self.ledger();
        let mut events = ledger.events().iter();
        events.find(|e| e.event == Event::GateOpened).map(|e| e.seq)
    }

    /// The `seq` of the last work event recorded (0 before the first).
    pub(crate) fn last_seq(&self) -> u64 {
        self.ledger().events().last().map_or(0, |e| e.seq)
    }

    /// Every work event so far, in order.
    pub(crate) fn events(&self) -> Vec<WorkEvent> {
        self.ledger().events().to_vec()
    }

    /// Each pool's account of the run so far, with its invariants checked.
    pub(crate) fn audit(&self) -> BTreeMap<Pool, PoolLedger> {
        let capacities = self.allocation().capacities();
        let ledger = self.ledger();
        audit::audit(ledger.events(), ledger.attempts(), &capacities)
    }

    /// Taken and free permits per pool, and the gate.
    pub(crate) fn final_state(&self) -> FinalState {
        // The gate's lock before the ledger's, never the other way round.
        let gate = self.gate.state();
        let _ledger = self.ledger();
        FinalState {
            active_work: self.allocation().per_pool(|pool| self.pools.active(pool)),
            available_permits: self
                .allocation()
                .per_pool(|pool| self.pools.available(pool)),
            gate,
        }
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        lock(&self.ledger)
    }

    /// Records `event` with the pool's count, both under the ledger lock.
    fn record(&self, request: Option<Label>, pool: Pool, event: Event) {
        self.record_unless(None, request, pool, event);
    }

    /// Records `event` as [`WorkSection::record`] does, unless its work has `left` the section:
    /// read under the same lock as the work's `finished` is recorded, so the ledger never shows
    /// work that acts after it left. Whether it was recorded.
    fn record_unless(
        &self,
        left: Option<&AtomicBool>,
        request: Option<Label>,
        pool: Pool,
        event: Event,
    ) -> bool {
        let mut ledger = self.ledger();
        if left.is_some_and(|left| left.load(Ordering::Relaxed)) {
            return false;
        }
        let active = self.pools.active(pool);
        ledger.record(request, pool, event, active);
        true
    }
}

/// Admitted work inside the section. It owns its permit, so the permit lives exactly as long as
/// the work, and leaving by any path records `finished`: completing, or being dropped because
/// its handler was cancelled (the caller disconnected), panicked, or its gate was abandoned
/// (`cancelled: true`).
#[derive(Debug)]
pub(crate) struct Work<'a> {
    section: &'a WorkSection,
    request: Label,
    route: Route,
    pool: Pool,
    /// Always `Some` until `drop` takes it.
    permit: Option<Permit>,
    /// Set when the work ran to its end.
    completed: bool,
    /// For work whose wait runs on another thread ([`WorkSection::wait_elsewhere`]): set, under
    /// the ledger's lock, when the work leaves, so a wait that runs after records nothing.
    left: Option<Arc<AtomicBool>>,
}

impl Work<'_> {
    pub(crate) fn request(&self) -> Label {
        self.request
    }

    /// Runs the work as a task: slow work waits at `gate` (the one its front was given for this
    /// request; the run's own unless told otherwise), fast work has nothing to wait for. The
    /// permit is back in the pool before this returns, so the caller builds its response with it
    /// returned (a remote permit: once its release round trip is made).
    /// Dropping the future (a cancelled handler) leaves too, and still releases.
    pub(crate) async fn run(mut self, gate: &Gate) -> Verdict {
        let state = match self.route {
            Route::Slow => gate.pass(|| self.held()).await,
            Route::Fast => GateState::Open,
        };
        let released = match &mut self.permit {
            Some(Permit::Remote(held)) => Some(held.released()),
            _ => None,
        };
        let verdict = self.leave(state);
        if let Some(released) = released {
            // An error means the driver has ended, which it does only after the section is
            // closed; the release itself is the driver's to account for.
            let _ = released.await;
        }
        verdict
    }

    /// Runs the work as a blocked thread at `gate`. A thread cannot be cancelled from outside;
    /// it leaves a held section only when the gate opens or is abandoned.
    pub(crate) fn run_blocking(self, gate: &Gate) -> Verdict {
        let state = match self.route {
            Route::Slow => gate.pass_blocking(|| self.held()),
            Route::Fast => GateState::Open,
        };
        self.leave(state)
    }

    /// Records that the work is waiting at the closed gate (called under the gate's lock).
    fn held(&self) {
        (self.section).record(Some(self.request), self.pool, Event::Held);
    }

    /// Leaves the section once its wait ended with the gate in `state` (here, or on another
    /// thread: [`WorkSection::wait_elsewhere`]): the permit goes back before the caller builds
    /// its response.
    pub(crate) fn leave(mut self, state: GateState) -> Verdict {
        let pool = self.pool;
        self.completed = state == GateState::Open;
        drop(self);
        match state {
            GateState::Abandoned => Verdict::Abandoned(pool),
            GateState::Open | GateState::Closed => Verdict::Done(pool),
        }
    }
}

impl Drop for Work<'_> {
    fn drop(&mut self) {
        // Return the permit under the ledger lock, so `active_after` counts it as returned.
        let mut ledger = self.section.ledger();
        drop(self.permit.take());
        let active = self.section.pools.active(self.pool);
        ledger.push(
            Some(self.request),
            self.pool,
            Event::Finished,
            active,
            !self.completed,
        );
        if let Some(left) = &self.left {
            left.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
impl WorkSection {
    /// Admits and runs one request's work in one call, as a task: what a front does, for the
    /// unit tests that stand in for one.
    pub(crate) async fn perform(&self, request: Label, route: Route) -> Verdict {
        match self.admit(request, route).await {
            Ok(work) => work.run(&self.gate).await,
            Err(denied) => denied.into(),
        }
    }

    /// [`WorkSection::perform`] as a blocked thread.
    pub(crate) fn perform_blocking(&self, request: Label, route: Route) -> Verdict {
        match self.admit_now(request, route) {
            Ok(work) => work.run_blocking(&self.gate),
            Err(denied) => denied.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::policy::{Mode, Policy, Slots};

    fn observed(
        mode: Mode,
        slots: u8,
        permits: Permits,
    ) -> (WorkSection, mpsc::UnboundedReceiver<WorkEvent>) {
        let slots = Slots::new(slots).expect("an allowed number of slots");
        let token = RunToken::generate().expect("the OS has randomness");
        let section = WorkSection::new(Policy { mode, slots }, permits, token);
        let (so_far, events) = section.subscribe();
        assert!(so_far.is_empty(), "a new section has no events");
        (section, events)
    }

    fn section(mode: Mode, slots: u8, permits: Permits) -> WorkSection {
        observed(mode, slots, permits).0
    }

    fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    fn events(section: &WorkSection) -> Vec<(Event, bool)> {
        section
            .events()
            .iter()
            .map(|e| (e.event, e.cancelled))
            .collect()
    }

    /// A refusal holds no permit, names who holds them, and leaves the active count alone.
    #[test]
    fn a_full_pool_refuses_at_once_and_names_its_holders() {
        let section = section(Mode::Shared, 2, Permits::Tokio);
        let mut s1 = pin!(section.perform(Label::Slow(1), Route::Slow));
        let mut s2 = pin!(section.perform(Label::Slow(2), Route::Slow));
        assert!(poll_once(s1.as_mut()).is_pending());
        assert!(poll_once(s2.as_mut()).is_pending());
        let f1 = pin!(section.perform(Label::F1, Route::Fast));
        let Poll::Ready(Verdict::Refused(refusal)) = poll_once(f1) else {
            panic!("F1 was not refused at once");
        };
        assert_eq!(refusal.held_by, [Label::Slow(1), Label::Slow(2)]);
        assert_eq!(section.snapshot().active_work[&Pool::Shared], 2);
        section.open_gate();
        assert_eq!(poll_once(s1), Poll::Ready(Verdict::Done(Pool::Shared)));
        assert_eq!(poll_once(s2), Poll::Ready(Verdict::Done(Pool::Shared)));
        let end = section.final_state();
        assert_eq!(end.active_work[&Pool::Shared], 0);
        assert_eq!(end.available_permits[&Pool::Shared], 2);
        assert_eq!(end.gate, GateState::Open);
    }

    /// Dropping held work (a cancelled handler) returns its permit and records `finished`.
    #[test]
    fn cancelled_work_leaves_the_section() {
        let section = section(Mode::Partitioned, 2, Permits::Tokio);
        {
            let mut s1 = pin!(section.perform(Label::Slow(1), Route::Slow));
            assert!(poll_once(s1.as_mut()).is_pending());
            assert_eq!(section.snapshot().held_at_gate, [Label::Slow(1)]);
        }
        let cancelled = (Event::Finished, true);
        let expected = [(Event::Admitted, false), (Event::Held, false), cancelled];
        assert_eq!(events(&section), expected);
        assert_eq!(section.final_state().available_permits[&Pool::Slow], 1);
        assert!(section.audit()[&Pool::Slow].broken().next().is_none());
    }

    /// Work whose wait runs on another thread, and which leaves before a thread runs it (its
    /// handler cancelled: a failed run closes then): the wait records nothing and waits for
    /// nothing, so the ledger never shows work acting after it left.
    #[test]
    fn a_wait_run_after_its_work_left_records_nothing() {
        let section = Arc::new(section(Mode::Partitioned, 2, Permits::Tokio));
        // Fast work first: a wait that went on would record `started`, then slow work's would
        // be held at the closed gate, and block.
        for (request, route) in [(Label::F1, Route::Fast), (Label::Slow(1), Route::Slow)] {
            let mut work = section.admit_now(request, route).expect("a permit is free");
            let wait = section.wait_elsewhere(&mut work, section.gate().clone());
            drop(work);
            assert_eq!(
                wait(),
                GateState::Abandoned,
                "{request}'s wait after it left"
            );
        }
        let left = [(Event::Admitted, false), (Event::Finished, true)];
        assert_eq!(events(&section), [left, left].concat());
    }

    /// Fast work passes straight through while the gate is closed; slow work after the opening
    /// is never recorded as held.
    #[test]
    fn only_slow_work_waits_and_only_while_the_gate_is_closed() {
        let section = section(Mode::Partitioned, 2, Permits::Bounded);
        let f1 = section.perform_blocking(Label::F1, Route::Fast);
        assert_eq!(f1, Verdict::Done(Pool::Fast));
        section.open_gate();
        let after = section.perform_blocking(Label::SlowAfter, Route::Slow);
        assert_eq!(after, Verdict::Done(Pool::Slow));
        let kinds: Vec<_> = events(&section).into_iter().map(|(e, _)| e).collect();
        let expected = [
            Event::Admitted,
            Event::Finished,
            Event::GateOpened,
            Event::Admitted,
            Event::Finished,
        ];
        assert_eq!(kinds, expected);
    }

    /// A blocked thread held at an abandoned gate leaves cancelled, and its permit returns.
    #[test]
    fn an_abandoned_gate_releases_held_threads_unfinished() {
        let (section, mut observer) = observed(Mode::Shared, 2, Permits::Bounded);
        let section = Arc::new(section);
        let held = {
            let section = section.clone();
            std::thread::spawn(move || section.perform_blocking(Label::Slow(1), Route::Slow))
        };
        // The observer says when the thread is held: the hold is recorded before it blocks.
        while observer.blocking_recv().map(|e| e.event) != Some(Event::Held) {}
        section.abandon_gate();
        assert_eq!(
            held.join().expect("no panic"),
            Verdict::Abandoned(Pool::Shared)
        );
        let expected = [
            (Event::Admitted, false),
            (Event::Held, false),
            (Event::Finished, true),
        ];
        assert_eq!(events(&section), expected);
        assert_eq!(section.final_state().gate, GateState::Abandoned);
        assert_eq!(section.final_state().available_permits[&Pool::Shared], 2);
    }

    /// Many threads and tasks admitting, holding, refusing and finishing at once while the gate
    /// opens: every event's count agrees with the semaphore, so the audit never breaks.
    #[test]
    fn concurrent_fronts_keep_the_ledger_exact() {
        for round in 0..50 {
            let section = Arc::new(section(Mode::Shared, 4, Permits::Bounded));
            let workers: Vec<_> = (0..8)
                .map(|n| {
                    let section = section.clone();
                    std::thread::spawn(move || {
                        for _ in 0..20 {
                            let (request, route) = match n % 2 {
                                0 => (Label::Slow(1 + n % 4), Route::Slow),
                                _ => (Label::F1, Route::Fast),
                            };
                            let _ = section.perform_blocking(request, route);
                            if n == 3 {
                                section.open_gate();
                            }
                        }
                    })
                })
                .collect();
            section.open_gate();
            workers
                .into_iter()
                .for_each(|w| w.join().expect("no panic"));
            let audit = section.audit();
            let broken: Vec<_> = audit[&Pool::Shared].broken().collect();
            assert!(broken.is_empty(), "round {round}: {broken:?}");
        }
    }
}
