//! Permits that live outside this process: a pool shared by several processes, such as the
//! replicas' Redis-backed global limit. One round trip decides, one round trip releases.
//!
//! How a section awaits a decision that needs I/O, decided once: the round trips are not made
//! by the request's handler but by the section's [`SharedDriver`], a future its owner runs and
//! joins. A handler asks the driver and awaits its answer without holding the ledger lock, then
//! records the decision under the lock. A `Work` that leaves hands its permit to the driver to
//! release. So a handler cancelled mid-round-trip (its caller left) loses nothing: an admission
//! nobody waits for any more is released by the driver at once, and a release is never dropped
//! with the handler. A refusal is still immediate for the caller: nothing queues for a permit.

use std::collections::BTreeMap;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::anyhow;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::lock;
use crate::label::Label;
use crate::policy::Pool;

/// A boxed future, as the object-safe [`SharedPool`] returns them.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A pool of permits shared with other processes: "try to admit this holder now, or refuse,
/// naming the holders".
pub(crate) trait SharedPool: Send + Sync + fmt::Debug {
    /// Tries to admit `request` to `pool` now, without waiting for a permit.
    fn try_admit(
        &self,
        pool: Pool,
        request: Label,
    ) -> BoxFuture<'static, anyhow::Result<SharedDecision>>;
}

/// A remote pool's answer.
#[derive(Debug)]
pub(crate) enum SharedDecision {
    /// Admitted: the permit, to be released when the work leaves.
    Admitted(Box<dyn SharedPermit>),
    /// Every permit was held, by these holders as the pool names them (such as `r1/S3`).
    Refused(Vec<String>),
}

/// A permit taken from a [`SharedPool`].
pub(crate) trait SharedPermit: Send + Sync + fmt::Debug {
    /// Gives the permit back: `Ok(true)` released, `Ok(false)` it was no longer held (a lease
    /// lapsed, and another holder may have been admitted in its place).
    fn release(self: Box<Self>) -> BoxFuture<'static, anyhow::Result<bool>>;
}

/// What the driver did with the section's permits, once it has ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Released {
    /// Permits given back while still held.
    pub released: Vec<Label>,
    /// Permits that were no longer held when given back: their lease had lapsed, and another
    /// holder may have been admitted in their place meanwhile.
    pub lapsed: Vec<Label>,
    /// Admissions whose handler had gone before the answer came; each was released at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orphaned: Vec<Label>,
    /// Round trips that failed, each in one line.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
}

/// A job for the driver.
enum Job {
    Admit {
        pool: Pool,
        request: Label,
        answer: oneshot::Sender<anyhow::Result<SharedDecision>>,
    },
    Release {
        request: Label,
        permit: Box<dyn SharedPermit>,
        done: Option<oneshot::Sender<()>>,
    },
    /// An admission answered to a handler that was cancelled before it read the answer.
    Orphan {
        request: Label,
        permit: Box<dyn SharedPermit>,
    },
}

/// The section's link to its remote pool: the permits it holds now, per pool, and where jobs go.
#[derive(Debug)]
pub(crate) struct SharedLink {
    held: BTreeMap<Pool, AtomicUsize>,
    /// `None` once the section is closed: the driver ends after its last job.
    jobs: Mutex<Option<mpsc::UnboundedSender<Job>>>,
}

impl SharedLink {
    /// A link for `pools`, and the driver that serves it.
    pub(crate) fn new(
        pools: impl Iterator<Item = Pool>,
        pool: Arc<dyn SharedPool>,
    ) -> (Arc<SharedLink>, SharedDriver) {
        let (jobs, queue) = mpsc::unbounded_channel();
        let link = SharedLink {
            held: pools.map(|p| (p, AtomicUsize::new(0))).collect(),
            jobs: Mutex::new(Some(jobs)),
        };
        (Arc::new(link), SharedDriver { pool, queue })
    }

    /// Permits of `pool` this section holds now.
    pub(crate) fn held(&self, pool: Pool) -> usize {
        self.held.get(&pool).map_or(0, |n| n.load(Ordering::SeqCst))
    }

    /// Asks the driver for a decision and waits for it. Cancel-safe: the driver owns the round
    /// trip, and releases an admission whose asker is gone.
    pub(crate) async fn decide(
        &self,
        pool: Pool,
        request: Label,
    ) -> anyhow::Result<SharedDecision> {
        let (answer, answered) = oneshot::channel();
        self.send(Job::Admit {
            pool,
            request,
            answer,
        })
        .map_err(|_| anyhow!("the section is closed: no remote admission any more"))?;
        let mut slot = AnswerSlot {
            link: self,
            request,
            answered,
        };
        (&mut slot.answered)
            .await
            .map_err(|_| anyhow!("the remote pool's driver stopped before answering"))?
    }

    /// Counts an admitted permit as held: called under the ledger lock, before recording.
    pub(crate) fn hold(
        self: &Arc<Self>,
        pool: Pool,
        request: Label,
        permit: Box<dyn SharedPermit>,
    ) -> SharedHeld {
        if let Some(held) = self.held.get(&pool) {
            held.fetch_add(1, Ordering::SeqCst);
        }
        SharedHeld {
            link: self.clone(),
            pool,
            request,
            permit: Some(permit),
            done: None,
        }
    }

    /// Ends the section's remote admissions: the driver finishes the jobs it has and ends.
    pub(crate) fn close(&self) {
        lock(&self.jobs).take();
    }

    fn send(&self, job: Job) -> Result<(), Job> {
        match lock(&self.jobs).as_ref() {
            Some(jobs) => jobs.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }
}

/// The answer slot of one [`SharedLink::decide`]. The driver may answer after the handler was
/// cancelled but before it read the answer: the admission would then be dropped with the slot,
/// unreleased. Dropping the slot closes it first, so that the driver either fails to answer
/// (and releases the orphan itself) or has answered, and the admission found here goes back.
struct AnswerSlot<'a> {
    link: &'a SharedLink,
    request: Label,
    answered: oneshot::Receiver<anyhow::Result<SharedDecision>>,
}

impl Drop for AnswerSlot<'_> {
    fn drop(&mut self) {
        self.answered.close();
        if let Ok(Ok(SharedDecision::Admitted(permit))) = self.answered.try_recv() {
            // The section closes only after every handler has been joined; were it closed,
            // the permit would lapse with its lease.
            let _ = self.link.send(Job::Orphan {
                request: self.request,
                permit,
            });
        }
    }
}

/// A held remote permit. Dropping it (under the ledger lock, as a `Work` leaves) counts it as
/// returned and hands it to the driver to release.
#[derive(Debug)]
pub(crate) struct SharedHeld {
    link: Arc<SharedLink>,
    pool: Pool,
    request: Label,
    /// Always `Some` until `drop` takes it.
    permit: Option<Box<dyn SharedPermit>>,
    done: Option<oneshot::Sender<()>>,
}

impl SharedHeld {
    /// A receiver that completes once the driver has made the release round trip (whatever it
    /// found), so that a response is built only after the permit is back.
    pub(crate) fn released(&mut self) -> oneshot::Receiver<()> {
        let (done, released) = oneshot::channel();
        self.done = Some(done);
        released
    }
}

impl Drop for SharedHeld {
    fn drop(&mut self) {
        if let Some(held) = self.link.held.get(&self.pool) {
            held.fetch_sub(1, Ordering::SeqCst);
        }
        if let Some(permit) = self.permit.take() {
            let job = Job::Release {
                request: self.request,
                permit,
                done: self.done.take(),
            };
            // Only after the section is closed, which its owner does once the server has
            // stopped and every handler has been joined: no work is left to drop by then. Were
            // one dropped anyway, its permit would lapse with its lease.
            let _ = self.link.send(job);
        }
    }
}

/// Makes the remote round trips of one section, concurrently, each owned by it: run it beside
/// the server, close the section once the server has stopped, then await it for the account.
#[derive(Debug)]
pub(crate) struct SharedDriver {
    pool: Arc<dyn SharedPool>,
    queue: mpsc::UnboundedReceiver<Job>,
}

/// How one job ended.
enum Done {
    Released(Label, anyhow::Result<bool>),
    Orphaned(Label, anyhow::Result<bool>),
    Failed(anyhow::Error),
    Answered,
}

impl SharedDriver {
    /// Serves the section's jobs until it is closed and every job has ended.
    pub(crate) async fn run(mut self) -> Released {
        let mut running = JoinSet::new();
        let mut released = Released::default();
        let mut open = true;
        while open || !running.is_empty() {
            tokio::select! {
                job = self.queue.recv(), if open => match job {
                    Some(job) => {
                        running.spawn(Self::perform(self.pool.clone(), job));
                    }
                    None => open = false,
                },
                Some(ended) = running.join_next() => match ended {
                    Ok(done) => released.count(done),
                    Err(e) => released.failures.push(format!("a remote round trip failed: {e}")),
                },
            }
        }
        released
    }

    async fn perform(pool: Arc<dyn SharedPool>, job: Job) -> Done {
        match job {
            Job::Admit {
                pool: which,
                request,
                answer,
            } => {
                let decision = pool.try_admit(which, request).await;
                match answer.send(decision) {
                    Ok(()) => Done::Answered,
                    // The handler was cancelled while the pool decided: give back what it got.
                    Err(Ok(SharedDecision::Admitted(permit))) => {
                        Done::Orphaned(request, permit.release().await)
                    }
                    Err(Ok(SharedDecision::Refused(_))) => Done::Answered,
                    Err(Err(why)) => Done::Failed(why.context(request.to_string())),
                }
            }
            Job::Release {
                request,
                permit,
                done,
            } => {
                let result = permit.release().await;
                if let Some(done) = done {
                    // The handler may have been cancelled meanwhile; the release stands.
                    let _ = done.send(());
                }
                Done::Released(request, result)
            }
            Job::Orphan { request, permit } => Done::Orphaned(request, permit.release().await),
        }
    }
}

impl Released {
    fn count(&mut self, done: Done) {
        match done {
            Done::Answered => {}
            Done::Failed(why) => self.failures.push(format!("{why:#}")),
            Done::Released(request, Ok(true)) => self.released.push(request),
            Done::Released(request, Ok(false)) => self.lapsed.push(request),
            Done::Orphaned(request, Ok(_)) => self.orphaned.push(request),
            Done::Released(request, Err(why)) | Done::Orphaned(request, Err(why)) => {
                self.failures.push(format!("releasing {request}: {why:#}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use tokio::sync::Semaphore;

    use super::*;
    use crate::admission::section::{Denied, Verdict, WorkSection};
    use crate::admission::token::RunToken;
    use crate::policy::{Allocation, Route};

    /// One shared pool of `capacity` permits in this process, standing in for Redis: the
    /// holders are `replica/request` names. With `hold_up`, a round trip waits for a permit
    /// of `go` before it answers.
    #[derive(Debug)]
    struct Shared {
        capacity: usize,
        holders: Mutex<Vec<String>>,
        hold_up: AtomicBool,
        go: Semaphore,
        broken: AtomicBool,
    }

    #[derive(Debug)]
    struct Replica {
        name: &'static str,
        shared: Arc<Shared>,
    }

    #[derive(Debug)]
    struct FakePermit {
        holder: String,
        shared: Arc<Shared>,
    }

    impl SharedPool for Replica {
        fn try_admit(
            &self,
            _pool: Pool,
            request: Label,
        ) -> BoxFuture<'static, anyhow::Result<SharedDecision>> {
            let (shared, holder) = (self.shared.clone(), format!("{}/{request}", self.name));
            Box::pin(async move {
                if shared.hold_up.load(Ordering::SeqCst) {
                    let _ = shared.go.acquire().await.expect("never closed");
                }
                if shared.broken.load(Ordering::SeqCst) {
                    anyhow::bail!("the shared pool is gone");
                }
                let mut holders = lock(&shared.holders);
                if holders.len() < shared.capacity {
                    holders.push(holder.clone());
                    drop(holders);
                    return Ok(SharedDecision::Admitted(Box::new(FakePermit {
                        holder,
                        shared,
                    })));
                }
                Ok(SharedDecision::Refused(holders.clone()))
            })
        }
    }

    impl SharedPermit for FakePermit {
        fn release(self: Box<Self>) -> BoxFuture<'static, anyhow::Result<bool>> {
            Box::pin(async move {
                let mut holders = lock(&self.shared.holders);
                let before = holders.len();
                holders.retain(|h| *h != self.holder);
                Ok(holders.len() < before)
            })
        }
    }

    fn replica(name: &'static str, shared: &Arc<Shared>) -> (Arc<WorkSection>, SharedDriver) {
        let pool = Arc::new(Replica {
            name,
            shared: shared.clone(),
        });
        let token = RunToken::generate().expect("the OS has randomness");
        let (section, driver) = WorkSection::with_remote(Allocation::shared(2), pool, token);
        (Arc::new(section), driver)
    }

    /// [`replica`], its driver running on a task of its own.
    fn running(
        name: &'static str,
        shared: &Arc<Shared>,
    ) -> (Arc<WorkSection>, tokio::task::JoinHandle<Released>) {
        let (section, driver) = replica(name, shared);
        (section, tokio::spawn(driver.run()))
    }

    fn shared(capacity: usize) -> Arc<Shared> {
        Arc::new(Shared {
            capacity,
            holders: Mutex::default(),
            hold_up: AtomicBool::new(false),
            go: Semaphore::new(0),
            broken: AtomicBool::new(false),
        })
    }

    fn balanced(section: &WorkSection) {
        for (pool, ledger) in section.audit() {
            let broken: Vec<_> = ledger.broken().collect();
            assert!(broken.is_empty(), "{pool}: {broken:?}");
        }
    }

    /// Two sections drawing from one shared pool of 2 hold 2 in all; the third request is
    /// refused at once, naming both holders across sections; released, the permits are back.
    #[tokio::test]
    async fn two_sections_share_one_limit_and_a_refusal_names_every_holder() {
        let pool = shared(2);
        let (r1, d1) = replica("r1", &pool);
        let (r2, d2) = replica("r2", &pool);
        let (d1, d2) = (tokio::spawn(d1.run()), tokio::spawn(d2.run()));
        let s1 = r1.admit(Label::Slow(1), Route::Slow).await.expect("first");
        let s2 = r2.admit(Label::Slow(2), Route::Slow).await.expect("second");
        let Err(Denied::Refused(refusal)) = r1.admit(Label::Slow(3), Route::Slow).await else {
            panic!("a third permit was given out");
        };
        assert_eq!(refusal.holders, ["r1/S1", "r2/S2"]);
        assert_eq!(refusal.held_by, [Label::Slow(1)], "r1's own holders");
        assert_eq!(r1.snapshot().active_work[&Pool::Shared], 1);
        r1.open_gate();
        r2.open_gate();
        assert_eq!(s1.run(r1.gate()).await, Verdict::Done(Pool::Shared));
        assert!(
            lock(&pool.holders).len() == 1,
            "released before run returned"
        );
        assert_eq!(s2.run(r2.gate()).await, Verdict::Done(Pool::Shared));
        assert!(lock(&pool.holders).is_empty());
        r1.close_remote();
        r2.close_remote();
        let (a1, a2) = (d1.await.expect("no panic"), d2.await.expect("no panic"));
        assert_eq!(
            (a1.released, a2.released),
            (vec![Label::Slow(1)], vec![Label::Slow(2)])
        );
        balanced(&r1);
        balanced(&r2);
        assert_eq!(r1.final_state().available_permits[&Pool::Shared], 2);
    }

    /// A handler cancelled while the shared pool decides loses nothing: the driver releases
    /// the permit nobody is waiting for, and the ledger records no decision.
    #[tokio::test]
    async fn a_handler_cancelled_mid_round_trip_leaks_no_permit() {
        let pool = shared(1);
        pool.hold_up.store(true, Ordering::SeqCst);
        let (r1, driver) = running("r1", &pool);
        {
            let admit = r1.admit(Label::Slow(1), Route::Slow);
            let mut admit = std::pin::pin!(admit);
            // One poll sends the job; the pool holds its answer back.
            assert!(futures_poll(admit.as_mut()).await.is_none());
        }
        pool.go.add_permits(1);
        r1.close_remote();
        let account = driver.await.expect("no panic");
        assert_eq!(account.orphaned, [Label::Slow(1)]);
        assert!(lock(&pool.holders).is_empty(), "the orphan was released");
        assert!(
            r1.events().is_empty(),
            "an undecided request leaves no event"
        );
        balanced(&r1);
    }

    /// A handler cancelled after the driver has answered but before it read the answer loses
    /// nothing either: the admission left in the answer slot goes back to the driver.
    #[tokio::test]
    async fn a_handler_cancelled_with_its_answer_unread_leaks_no_permit() {
        let pool = shared(1);
        pool.hold_up.store(true, Ordering::SeqCst);
        let (r1, driver) = running("r1", &pool);
        {
            let admit = r1.admit(Label::Slow(1), Route::Slow);
            let mut admit = std::pin::pin!(admit);
            assert!(futures_poll(admit.as_mut()).await.is_none());
            pool.go.add_permits(1);
            // Wait on the pool's own state. The driver admits and sends the answer in one poll
            // of its round trip (this test's runtime has one thread), so once a holder shows,
            // the answer is waiting, unread, in the handler's slot.
            while lock(&pool.holders).is_empty() {
                tokio::task::yield_now().await;
            }
        }
        r1.close_remote();
        let account = driver.await.expect("no panic");
        assert!(
            lock(&pool.holders).is_empty(),
            "the unread admission was released: {account:?}"
        );
        assert_eq!(account.orphaned, [Label::Slow(1)]);
        assert!(r1.events().is_empty());
        balanced(&r1);
    }

    /// Held work dropped at the gate (its caller disconnected) hands its permit to the driver.
    #[tokio::test]
    async fn cancelled_held_work_still_releases() {
        let pool = shared(1);
        let (r1, driver) = running("r1", &pool);
        {
            let work = r1.admit(Label::Slow(1), Route::Slow).await.expect("free");
            let run = std::pin::pin!(work.run(r1.gate()));
            assert!(futures_poll(run).await.is_none(), "held at the closed gate");
        }
        r1.close_remote();
        let account = driver.await.expect("no panic");
        assert_eq!(account.released, [Label::Slow(1)]);
        assert!(lock(&pool.holders).is_empty());
        let last = r1.events().pop().expect("events");
        assert!(last.cancelled, "recorded as leaving unfinished");
        balanced(&r1);
    }

    /// A pool that cannot answer fails the admission without an event; the sync path refuses
    /// to decide for remote permits at all.
    #[tokio::test]
    async fn an_unanswered_pool_fails_the_admission() {
        let pool = shared(1);
        pool.broken.store(true, Ordering::SeqCst);
        let (r1, driver) = running("r1", &pool);
        let Err(Denied::Failed(failure)) = r1.admit(Label::Slow(1), Route::Slow).await else {
            panic!("a broken pool admitted or refused");
        };
        assert!(failure.reason.contains("gone"), "{failure:?}");
        let Err(Denied::Failed(failure)) = r1.admit_now(Label::F1, Route::Fast) else {
            panic!("the sync path decided for a remote pool");
        };
        assert!(failure.reason.contains("remote"), "{failure:?}");
        r1.close_remote();
        let Err(Denied::Failed(_)) = r1.admit(Label::Slow(2), Route::Slow).await else {
            panic!("a closed section admitted");
        };
        assert!(driver.await.expect("no panic").failures.is_empty());
        assert!(r1.events().is_empty());
    }

    /// Polls `future` once (then yields, so spawned tasks run): `Some` if it completed.
    async fn futures_poll<F: Future>(future: Pin<&mut F>) -> Option<F::Output> {
        let mut future = Some(future);
        let polled = std::future::poll_fn(|cx| {
            let future = future.take().expect("polled once");
            std::task::Poll::Ready(match future.poll(cx) {
                std::task::Poll::Ready(out) => Some(out),
                std::task::Poll::Pending => None,
            })
        })
        .await;
        tokio::task::yield_now().await;
        polled
    }
}
