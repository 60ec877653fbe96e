//! Waiting for a child that may be stopped by a signal (SIGSTOP): a stopped process sends
//! nothing and reads nothing, and its reaper waits for its exit alone (`WEXITED`), which a stop
//! does not end. So a wait for it looks at its state in `/proc/<pid>/stat` as it goes.
//!
//! The lab itself may be stopped too (Ctrl-Z, then `fg`; SIGSTOP, then SIGCONT). Its children
//! go on meanwhile, but nothing that needs the lab can: a hold's callers are its own tasks. So a
//! wait counts a stop of the lab's as time it was not there: once the lab has been continued
//! (SIGCONT, counted by [`note_continued`] in the lab's binary and while a session catches
//! signals), the next look moves the wait's deadline by the time since the look before, if
//! that is [`AWAY`] (a third of a second) or more, and adds it to the watch's
//! [`StopWatch::stopped`]; a shorter stop is not counted. A lab that is merely busy, or not run
//! on a loaded machine, has not been continued: its waits end at their deadlines. A wait of the
//! lab's own, with no child to look at, counts a stop more simply ([`awake_within`]).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::procfs;

/// How often a [`watched`] wait looks whether its child is stopped.
const STOPPED_WATCH: Duration = Duration::from_millis(250);
/// A stop shorter than this, seen from one look to the next, is not counted: a look a tick
/// after the last, and a little late, is the lab at work (a `kill -CONT` with no stop, say).
/// Longer, each stop counts, however many come one after another.
const AWAY: Duration = Duration::from_millis(350);
/// A wait of the lab's own woken this long or more after its deadline may have been stopped
/// ([`awake_within`]); a timer is otherwise due within a millisecond or so.
const LATE: Duration = Duration::from_millis(100);

/// How many times this process has been continued (SIGCONT) while it counted continues.
static CONTINUED: AtomicU64 = AtomicU64::new(0);

/// The SIGCONT handler the lab's binary and a session install (`interrupts`): one atomic add,
/// async-signal-safe.
pub(crate) extern "C" fn note_continued(_: libc::c_int) {
    CONTINUED.fetch_add(1, Ordering::SeqCst);
}

/// How many times [`note_continued`] has run in this process.
pub(crate) fn times_continued() -> u64 {
    CONTINUED.load(Ordering::SeqCst)
}

/// A wait of the lab's own, with no child to look at (a run's step, a front's close):
/// `future`'s output, or `None` once `timeout` has passed with the lab awake, as
/// [`AwakeDeadline`] tells it.
pub(crate) async fn awake_within<T>(
    timeout: Duration,
    future: impl Future<Output = T>,
) -> Option<T> {
    tokio::pin!(future);
    let mut deadline = AwakeDeadline::after(timeout);
    loop {
        if let Ok(done) = tokio::time::timeout(deadline.left(), &mut future).await {
            return Some(done);
        }
        if deadline.passed() {
            return None;
        }
    }
}

/// A deadline `limit` of the lab's own time from when it is made, for [`awake_within`] and for
/// a thread that waits without a runtime (`recv_timeout`). A stop of the lab's (Ctrl-Z, then
/// fg) is not a stall, as nothing of the lab's could run meanwhile: once the lab has been
/// continued, the deadline is `limit` from then. One woken [`LATE`] or more after it with no
/// continue counted yet is a tick later, once, as the continue's handler may run on another
/// thread a moment after the waiting one wakes. A continue without a stop (`kill -CONT`)
/// restarts it too: sent again and again, it keeps a stalled run waiting.
#[derive(Debug)]
pub(crate) struct AwakeDeadline {
    limit: Duration,
    at: Instant,
    continued: u64,
    /// Whether it has looked once more a tick later, woken [`LATE`] with no continue counted.
    looked_again: bool,
}

impl AwakeDeadline {
    pub(crate) fn after(limit: Duration) -> Self {
        AwakeDeadline {
            limit,
            at: Instant::now() + limit,
            continued: times_continued(),
            looked_again: false,
        }
    }

    /// How long a wait may take before it looks at [`AwakeDeadline::passed`] again.
    pub(crate) fn left(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// Whether the deadline has passed with the lab awake; if not, [`AwakeDeadline::left`]
    /// says how long to wait before looking again.
    pub(crate) fn passed(&mut self) -> bool {
        let now = Instant::now();
        if now < self.at {
            return false;
        }
        let continued = times_continued();
        if continued != self.continued {
            *self = AwakeDeadline {
                continued,
                ..AwakeDeadline::after(self.limit)
            };
            return false;
        }
        if !self.looked_again && now - self.at >= LATE {
            self.looked_again = true;
            self.at = now + STOPPED_WATCH;
            return false;
        }
        true
    }
}

/// Why a [`watched`] wait gave up.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stall {
    /// Nothing came by its deadline.
    NoProgress,
    /// The child was found stopped.
    Stopped,
}

/// The looks a [`watched`] wait takes, and how long they found the lab stopped: one watch may
/// serve a loop of waits.
#[derive(Debug)]
pub(crate) struct StopWatch {
    ticks: tokio::time::Interval,
    /// When it last looked, and how many times the lab had been continued by then.
    looked: (Instant, u64),
    /// Time the looks have not yet told as a stop or as the lab being busy: a gap of [`AWAY`]
    /// or more found without a continue counted yet (the handler may run on another thread a
    /// moment after this one wakes from the stop), and the looks that came quicker than a tick
    /// after it. The next look counts it if it sees the continue; while it is not zero, a
    /// [`watched`] wait does not end at its deadline.
    unsettled: Duration,
    stopped: Duration,
}

impl StopWatch {
    /// How long the lab was stopped, by the looks of this watch since it was made: each stop
    /// of [`AWAY`] or more, from the look before it to the look after, so within a look (a
    /// quarter of a second) of the stop itself. [`StopWatch::restart`] keeps it: a caller
    /// that wants a stretch's stops subtracts an earlier reading.
    pub(crate) fn stopped(&self) -> Duration {
        self.stopped
    }

    /// Counts from now: a stop before now is not this watch's.
    pub(crate) fn restart(&mut self) {
        self.looked = (Instant::now(), times_continued());
        self.unsettled = Duration::ZERO;
    }

    /// Looks at the clock: if the lab has been continued since the last look, the time between
    /// the two looks was (mostly) a stop, and `deadline` moves by as much when it is [`AWAY`]
    /// or more.
    fn look(&mut self, deadline: &mut Instant) {
        let (then, continued) = self.looked;
        self.looked = (Instant::now(), times_continued());
        let gap = self.looked.0 - then;
        let unsettled = std::mem::take(&mut self.unsettled);
        if self.looked.1 != continued {
            let stop = unsettled + gap;
            if stop >= AWAY {
                *deadline += stop;
                self.stopped += stop;
            }
        } else if gap >= AWAY {
            self.unsettled = gap;
        } else if gap < STOPPED_WATCH && !unsettled.is_zero() {
            // Too soon after a long gap to tell; a look a tick later, still without a
            // continue, finds the gap was the lab being busy, not stopped. Short gaps alone
            // are not kept: they would hold off the deadline, and count as a later stop.
            self.unsettled = unsettled + gap;
        }
    }
}

/// A watch that looks now, then every [`STOPPED_WATCH`].
pub(crate) fn stop_watch() -> StopWatch {
    let mut ticks = tokio::time::interval(STOPPED_WATCH);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    StopWatch {
        ticks,
        looked: (Instant::now(), times_continued()),
        unsettled: Duration::ZERO,
        stopped: Duration::ZERO,
    }
}

/// One wait of its own, [`watched`]: awaits `future` for up to `timeout` from now, on a watch
/// of its own.
pub(crate) async fn watched_within<T>(
    pid: u32,
    timeout: Duration,
    future: impl Future<Output = T>,
) -> Result<T, Stall> {
    let mut deadline = Instant::now() + timeout;
    watched(pid, &mut stop_watch(), &mut deadline, future).await
}

/// Whether the child's process (`pid`) is seen stopped within `timeout` from now, looked at
/// at the watch's pace: a signal stops a process only once one of its threads takes it.
pub(crate) async fn seen_stopped_within(pid: u32, timeout: Duration) -> bool {
    let never = std::future::pending::<()>();
    watched_within(pid, timeout, never).await == Err(Stall::Stopped)
}

/// Awaits `future`, looking at the child's process (`pid`) at every tick of `watch`
/// meanwhile: `Err(Stall::Stopped)` once it is found stopped; `Err(Stall::NoProgress)` at
/// `deadline`, which a stop of the lab's own moves later (see [`StopWatch::look`]).
pub(crate) async fn watched<T>(
    pid: u32,
    watch: &mut StopWatch,
    deadline: &mut Instant,
    future: impl Future<Output = T>,
) -> Result<T, Stall> {
    tokio::pin!(future);
    loop {
        // In this order: what came is taken first, and each branch looks at the clock before
        // the deadline is read again, so a stop of the lab's is counted wherever it fell.
        tokio::select! {
            biased;
            done = &mut future => {
                watch.look(deadline);
                return Ok(done);
            }
            _ = watch.ticks.tick() => {
                if procfs::is_stopped(pid) {
                    return Err(Stall::Stopped);
                }
                watch.look(deadline);
            }
            // A long gap not yet told a stop is settled first, at the next tick's look.
            () = tokio::time::sleep_until(*deadline), if watch.unsettled.is_zero() => {
                watch.look(deadline);
                if Instant::now() >= *deadline && watch.unsettled.is_zero() {
                    return Err(Stall::NoProgress);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test's own process: running, never stopped.
    fn this_process() -> u32 {
        std::process::id()
    }

    /// Held by each test here: the count of continues is the process's, so one test's
    /// `note_continued` must not land in another's wait.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// A wait's setting: this test alone ([`ONE_AT_A_TIME`]), a deadline 10 s from now, and a
    /// fresh watch.
    async fn alone_for_ten_seconds() -> (tokio::sync::MutexGuard<'static, ()>, Instant, StopWatch) {
        let alone = ONE_AT_A_TIME.lock().await;
        (
            alone,
            Instant::now() + Duration::from_secs(10),
            stop_watch(),
        )
    }

    /// A wait of the lab's own that runs out after the lab was stopped and continued waits its
    /// timeout again from then; one that runs out with no continue gives up: a stall is still
    /// a stall.
    #[tokio::test(start_paused = true)]
    async fn a_wait_of_the_labs_own_outlasts_a_stop_not_a_stall() {
        let _alone = ONE_AT_A_TIME.lock().await;
        let started = Instant::now();
        let waiting = awake_within(Duration::from_secs(5), std::future::pending::<()>());
        tokio::pin!(waiting);
        let first = tokio::time::timeout(Duration::from_secs(3), &mut waiting).await;
        assert!(first.is_err(), "still waiting after 3 s");
        // Stopped for 20 s, then continued: the clock jumps, then SIGCONT.
        tokio::time::advance(Duration::from_secs(20)).await;
        note_continued(libc::SIGCONT);
        assert_eq!(waiting.await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(23 + 5));
        let never = std::future::pending::<()>();
        assert_eq!(awake_within(Duration::from_secs(5), never).await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(23 + 5 + 5));
    }

    /// The continue counted only after the wait has woken from the stop (its handler ran on
    /// another thread a moment later): the wait looks again a tick later, and waits on.
    #[tokio::test(start_paused = true)]
    async fn a_wait_of_the_labs_own_sees_a_continue_counted_late() {
        let _alone = ONE_AT_A_TIME.lock().await;
        let waiting = awake_within(Duration::from_secs(5), std::future::pending::<()>());
        tokio::pin!(waiting);
        let first = tokio::time::timeout(Duration::from_secs(3), &mut waiting).await;
        assert!(first.is_err(), "still waiting after 3 s");
        // Stopped for 2.2 s, across the deadline: it wakes 0.2 s after it, and finds no
        // continue counted yet.
        tokio::time::advance(Duration::from_millis(2_200)).await;
        let woken = tokio::time::timeout(Duration::from_millis(100), &mut waiting).await;
        assert!(woken.is_err(), "gave up before looking again");
        note_continued(libc::SIGCONT);
        let back = Instant::now();
        assert_eq!(waiting.await, None);
        assert_eq!(
            back.elapsed(),
            Duration::from_millis(150) + Duration::from_secs(5)
        );
    }

    /// A deadline for a thread without a runtime: passed once its time is up, unless the lab
    /// has been continued meanwhile, which makes it its limit from then.
    #[tokio::test]
    async fn an_awake_deadline_outlasts_a_continue() {
        let _alone = ONE_AT_A_TIME.lock().await;
        let limit = Duration::from_millis(20);
        // Waited on as the threaded front's accept thread waits, for a message that never
        // comes here.
        let (_sender, never) = std::sync::mpsc::channel::<()>();
        let mut deadline = AwakeDeadline::after(limit);
        let _ = never.recv_timeout(deadline.left());
        note_continued(libc::SIGCONT);
        assert!(!deadline.passed(), "the lab was continued");
        // At most two more waits: one to its time, and one tick more if it woke late.
        let mut waits = 0;
        while !deadline.passed() {
            waits += 1;
            assert!(waits <= 2, "{deadline:?}");
            let _ = never.recv_timeout(deadline.left());
        }
    }

    /// Nothing comes: the wait ends at its deadline, having looked all along.
    #[tokio::test(start_paused = true)]
    async fn a_wait_with_nothing_coming_ends_at_its_deadline() {
        let _alone = ONE_AT_A_TIME.lock().await;
        let started = Instant::now();
        let never = std::future::pending::<()>();
        let waited = watched_within(this_process(), Duration::from_secs(10), never).await;
        assert_eq!(waited, Err(Stall::NoProgress));
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    /// A deadline between two ticks ends the wait then, though a tick has just looked.
    #[tokio::test(start_paused = true)]
    async fn a_deadline_between_two_looks_ends_the_wait_then() {
        let _alone = ONE_AT_A_TIME.lock().await;
        let started = Instant::now();
        let never = std::future::pending::<()>();
        let timeout = Duration::from_millis(10_100);
        let waited = watched_within(this_process(), timeout, never).await;
        assert_eq!(waited, Err(Stall::NoProgress));
        assert_eq!(started.elapsed(), timeout);
    }

    /// A lab that looks often (what it waits for has come each time its clock has moved
    /// 10 ms) and is then stopped for 3 s is counted stopped for those 3 s, not for the time
    /// it spent looking as well.
    #[tokio::test(start_paused = true)]
    async fn quick_looks_are_not_counted_as_a_stop() {
        let (_alone, mut deadline, mut watch) = alone_for_ten_seconds().await;
        for _ in 0..500 {
            tokio::time::advance(Duration::from_millis(10)).await;
            let came = std::future::ready(());
            let came = watched(this_process(), &mut watch, &mut deadline, came).await;
            assert_eq!(came, Ok(()));
        }
        tokio::time::advance(Duration::from_secs(3)).await;
        note_continued(libc::SIGCONT);
        let now = std::future::ready(());
        assert_eq!(
            watched(this_process(), &mut watch, &mut deadline, now).await,
            Ok(())
        );
        assert_eq!(watch.stopped(), Duration::from_secs(3));
    }

    /// Waits 6 s on `waiting`, which must still be waiting then, and then jumps the clock
    /// 20 s, as a stop of the lab's does: nothing is looked at meanwhile.
    async fn six_seconds_then_a_stop<T: std::fmt::Debug>(
        waiting: &mut (impl Future<Output = Result<T, Stall>> + Unpin),
    ) {
        let first = tokio::time::timeout(Duration::from_secs(6), &mut *waiting).await;
        assert!(first.is_err(), "still waiting after 6 s: {first:?}");
        tokio::time::advance(Duration::from_secs(20)).await;
    }

    /// The lab stopped for 20 s in the middle of a 10 s wait, then continued (its clock jumps,
    /// then SIGCONT): the wait lasts 10 s of the lab's own time, 4 s more after it is back,
    /// and the watch counts the stop.
    #[tokio::test(start_paused = true)]
    async fn a_stop_of_the_labs_own_does_not_count() {
        let (_alone, mut deadline, mut watch) = alone_for_ten_seconds().await;
        let never = std::future::pending::<()>();
        let back = {
            let waiting = watched(this_process(), &mut watch, &mut deadline, never);
            tokio::pin!(waiting);
            six_seconds_then_a_stop(&mut waiting).await;
            note_continued(libc::SIGCONT);
            let back = Instant::now();
            let soon = tokio::time::timeout(Duration::from_millis(3_700), &mut waiting).await;
            assert!(soon.is_err(), "still waiting 3.7 s after the lab is back");
            assert_eq!(waiting.await, Err(Stall::NoProgress));
            back
        };
        // From the last look before the stop, at 6 s, to the first after it.
        assert_eq!(watch.stopped(), Duration::from_secs(20));
        let after = back.elapsed();
        assert_eq!(after, Duration::from_secs(4), "gave up {after:?} after");
    }

    /// The continue counted only after the wait has woken from the stop (its handler ran on
    /// another thread a moment later): the wait does not give up at that look, and the next
    /// one counts the stop.
    #[tokio::test(start_paused = true)]
    async fn a_continue_counted_a_moment_late_still_counts() {
        let (_alone, mut deadline, mut watch) = alone_for_ten_seconds().await;
        let never = std::future::pending::<()>();
        {
            let waiting = watched(this_process(), &mut watch, &mut deadline, never);
            tokio::pin!(waiting);
            six_seconds_then_a_stop(&mut waiting).await;
            // It wakes, looks, and finds its deadline passed with no continue counted yet.
            let woken = tokio::time::timeout(Duration::from_millis(100), &mut waiting).await;
            assert!(woken.is_err(), "gave up before the next look");
            note_continued(libc::SIGCONT);
            let soon = tokio::time::timeout(Duration::from_millis(3_500), &mut waiting).await;
            assert!(soon.is_err(), "still waiting 3.6 s after the lab is back");
            assert_eq!(waiting.await, Err(Stall::NoProgress));
        }
        let stopped = watch.stopped();
        assert!(stopped >= Duration::from_secs(20), "{stopped:?}");
    }

    /// Stops shorter than a second, one after another (0.9 s stopped, 50 ms running, 25
    /// times), are each counted: a 10 s wait is still waiting after 23.75 s, 1.25 s of them
    /// with the lab there, and the watch counts the stops, each to within a look.
    #[tokio::test(start_paused = true)]
    async fn short_stops_one_after_another_are_each_counted() {
        let (_alone, mut deadline, mut watch) = alone_for_ten_seconds().await;
        let never = std::future::pending::<()>();
        {
            let waiting = watched(this_process(), &mut watch, &mut deadline, never);
            tokio::pin!(waiting);
            for _ in 0..25 {
                tokio::time::advance(Duration::from_millis(900)).await;
                note_continued(libc::SIGCONT);
                let running = tokio::time::timeout(Duration::from_millis(50), &mut waiting).await;
                assert!(running.is_err(), "still waiting: {running:?}");
            }
        }
        let stopped = watch.stopped();
        let (least, most) = (Duration::from_millis(22_500), Duration::from_millis(23_750));
        assert!((least..=most).contains(&stopped), "{stopped:?}");
    }

    /// A stop the wait ends on (what it waited for came meanwhile) is counted too.
    #[tokio::test(start_paused = true)]
    async fn a_stop_that_ends_a_wait_is_counted() {
        let (_alone, mut deadline, mut watch) = alone_for_ten_seconds().await;
        let (send, comes) = tokio::sync::oneshot::channel::<()>();
        {
            let waiting = watched(this_process(), &mut watch, &mut deadline, comes);
            tokio::pin!(waiting);
            six_seconds_then_a_stop(&mut waiting).await;
            // It came while the lab was stopped.
            send.send(()).expect("the wait is there");
            note_continued(libc::SIGCONT);
            assert_eq!(waiting.await, Ok(Ok(())));
        }
        assert_eq!(watch.stopped(), Duration::from_secs(20));
    }

    /// A lab that was late to look without being continued (busy, or not run) was not
    /// stopped: the wait ends at its deadline, and nothing is counted.
    #[tokio::test(start_paused = true)]
    async fn a_busy_lab_is_not_stopped() {
        let (_alone, mut deadline, mut watch) = alone_for_ten_seconds().await;
        let never = std::future::pending::<()>();
        {
            let waiting = watched(this_process(), &mut watch, &mut deadline, never);
            tokio::pin!(waiting);
            six_seconds_then_a_stop(&mut waiting).await;
            assert_eq!(waiting.await, Err(Stall::NoProgress));
        }
        assert_eq!(watch.stopped(), Duration::ZERO);
    }
}
