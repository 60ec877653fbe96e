//! Waiting for a child that may be stopped by a signal (SIGSTOP): a stopped process sends
//! nothing and reads nothing, and its reaper waits for its exit alone (`WEXITED`), which a stop
//! does not end. So a wait for it looks at its state in `/proc/<pid>/stat` as it goes.

use std::future::Future;
use std::time::Duration;

use crate::procfs;

/// How often a [`watched`] wait looks whether its child is stopped.
const STOPPED_WATCH: Duration = Duration::from_millis(250);

/// Why a [`watched`] wait gave up.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stall {
    /// Nothing came by its deadline.
    NoProgress,
    /// The child was found stopped.
    Stopped,
}

/// The ticks a [`watched`] wait looks at: one may serve a loop of waits.
pub(crate) fn stop_watch() -> tokio::time::Interval {
    let mut watch = tokio::time::interval(STOPPED_WATCH);
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    watch
}

/// One wait of its own, [`watched`]: awaits `future` for up to `timeout` from now, on a watch
/// of its own.
pub(crate) async fn watched_within<T>(
    pid: u32,
    timeout: Duration,
    future: impl Future<Output = T>,
) -> Result<T, Stall> {
    let deadline = tokio::time::Instant::now() + timeout;
    watched(pid, &mut stop_watch(), deadline, future).await
}

/// Whether the child's process (`pid`) is seen stopped within `timeout` from now, looked at
/// at the watch's pace: a signal stops a process only once one of its threads takes it.
pub(crate) async fn seen_stopped_within(pid: u32, timeout: Duration) -> bool {
    let never = std::future::pending::<()>();
    watched_within(pid, timeout, never).await == Err(Stall::Stopped)
}

/// Awaits `future`, looking at the child's process (`pid`) at every tick of `watch`
/// meanwhile: `Err(Stall::Stopped)` once it is found stopped; `Err(Stall::NoProgress)` at
/// `deadline`.
pub(crate) async fn watched<T>(
    pid: u32,
    watch: &mut tokio::time::Interval,
    deadline: tokio::time::Instant,
    future: impl Future<Output = T>,
) -> Result<T, Stall> {
    tokio::pin!(future);
    let waited = tokio::time::timeout_at(deadline, async {
        loop {
            tokio::select! {
                done = &mut future => return Ok(done),
                _ = watch.tick() => if procfs::is_stopped(pid) {
                    return Err(Stall::Stopped);
                },
            }
        }
    });
    waited.await.unwrap_or(Err(Stall::NoProgress))
}
