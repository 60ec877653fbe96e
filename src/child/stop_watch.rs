//! Waiting for a child that may be stopped by a signal (SIGSTOP): a stopped process sends
//! nothing and reads nothing, and its reaper waits for its exit alone (`WEXITED`), which a stop
//! does not end. So a wait for it looks at its state in `/proc/<pid>/stat` as it goes.
//!
//! The lab itself may be stopped too (Ctrl-Z, then `fg`; SIGSTOP, then SIGCONT), or not run for
//! a while on a busy machine. Nothing it waits for can come while it is away: the callers of a
//! hold are its own tasks. So the same look measures the lab's absence, as a look that comes
//! late, and a wait's deadline moves by as much: a child is called stalled only for time the
//! lab was there to see it move.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::procfs;

/// How often a [`watched`] wait looks whether its child is stopped.
const STOPPED_WATCH: Duration = Duration::from_millis(250);
/// A look this much later than due means the lab was away, rather than merely busy.
const AWAY: Duration = Duration::from_secs(1);

/// Why a [`watched`] wait gave up.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stall {
    /// Nothing came by its deadline.
    NoProgress,
    /// The child was found stopped.
    Stopped,
}

/// The looks a [`watched`] wait takes, and how long they found the lab away: one watch may
/// serve a loop of waits.
#[derive(Debug)]
pub(crate) struct StopWatch {
    ticks: tokio::time::Interval,
    away: Duration,
}

impl StopWatch {
    /// How long the lab was away (see [`AWAY`]) while this watch looked, in all.
    pub(crate) fn away(&self) -> Duration {
        self.away
    }
}

/// A watch that looks now, then every [`STOPPED_WATCH`].
pub(crate) fn stop_watch() -> StopWatch {
    let mut ticks = tokio::time::interval(STOPPED_WATCH);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    StopWatch {
        ticks,
        away: Duration::ZERO,
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
/// `deadline`. A look that comes [`AWAY`] or more late moves `deadline` as late, and counts in
/// [`StopWatch::away`]: the lab was stopped, or not run, for that long.
pub(crate) async fn watched<T>(
    pid: u32,
    watch: &mut StopWatch,
    deadline: &mut Instant,
    future: impl Future<Output = T>,
) -> Result<T, Stall> {
    tokio::pin!(future);
    loop {
        // In this order: what came is taken first, and a late look moves the deadline before
        // the deadline is read.
        tokio::select! {
            biased;
            done = &mut future => return Ok(done),
            due = watch.ticks.tick() => {
                if procfs::is_stopped(pid) {
                    return Err(Stall::Stopped);
                }
                let late = due.elapsed();
                if late >= AWAY {
                    *deadline += late;
                    watch.away += late;
                }
            }
            () = tokio::time::sleep_until(*deadline) => return Err(Stall::NoProgress),
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

    /// Nothing comes: the wait ends at its deadline, having looked all along.
    #[tokio::test(start_paused = true)]
    async fn a_wait_with_nothing_coming_ends_at_its_deadline() {
        let started = Instant::now();
        let never = std::future::pending::<()>();
        let waited = watched_within(this_process(), Duration::from_secs(10), never).await;
        assert_eq!(waited, Err(Stall::NoProgress));
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        let mut watch = stop_watch();
        let mut deadline = Instant::now() + Duration::from_secs(10);
        let never = std::future::pending::<()>();
        let waited = watched(this_process(), &mut watch, &mut deadline, never).await;
        assert_eq!(
            (waited, watch.away()),
            (Err(Stall::NoProgress), Duration::ZERO)
        );
    }

    /// The lab away for 20 s in the middle of a 10 s wait (its clock jumps, as across SIGSTOP
    /// and SIGCONT): the wait lasts 10 s of the lab's own time, 4 s more after its return,
    /// rather than giving up the moment it is back.
    #[tokio::test(start_paused = true)]
    async fn time_the_lab_was_away_does_not_count() {
        let mut deadline = Instant::now() + Duration::from_secs(10);
        let mut watch = stop_watch();
        let never = std::future::pending::<()>();
        let back = {
            let waiting = watched(this_process(), &mut watch, &mut deadline, never);
            tokio::pin!(waiting);
            // It waits 6 s, then the lab is away for 20 s: nothing is looked at meanwhile.
            let first = tokio::time::timeout(Duration::from_secs(6), &mut waiting).await;
            assert!(first.is_err(), "still waiting after 6 s");
            tokio::time::advance(Duration::from_secs(20)).await;
            let back = Instant::now();
            let soon = tokio::time::timeout(Duration::from_millis(3_500), &mut waiting).await;
            assert!(soon.is_err(), "still waiting 3.5 s after the lab is back");
            assert_eq!(waiting.await, Err(Stall::NoProgress));
            back
        };
        assert_eq!(
            watch.away(),
            Duration::from_millis(19_750),
            "from the look due at 6.25 s"
        );
        // Within one look of the 4 s it had left: the absence is measured from a look.
        let after = back.elapsed();
        assert!(
            after <= Duration::from_millis(4_250),
            "gave up {after:?} after"
        );
    }
}
