//! The slow gate: a latch built on `tokio::sync::Notify`. Once opened it stays open, and no
//! waiter can miss the opening.

use std::pin::pin;
use std::sync::Mutex;

use tokio::sync::Notify;

use super::lock;

/// A one-way latch that admitted slow work waits at until the coordinator opens it.
#[derive(Debug, Default)]
pub struct Gate {
    /// Whether the gate has been opened. A std `Mutex` rather than an atomic so that what the
    /// caller records on holding or opening is ordered with the flag itself.
    open: Mutex<bool>,
    opened: Notify,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the gate has been opened.
    pub fn is_open(&self) -> bool {
        *lock(&self.open)
    }

    /// Opens the gate for every present and future waiter. `on_open` runs once, on the first
    /// opening, while no waiter can decide to hold: it is ordered before every later `pass`.
    pub fn open(&self, on_open: impl FnOnce()) {
        {
            let mut open = lock(&self.open);
            if *open {
                return;
            }
            *open = true;
            on_open();
        }
        self.opened.notify_waiters();
    }

    /// Waits until the gate is open. If it is closed on arrival, `on_hold` runs first, ordered
    /// before the opening; if it is already open, the caller passes without holding.
    pub async fn pass(&self, on_hold: impl FnOnce()) {
        // Register for the wake-up before looking at the flag: an opening that happens after the
        // look then finds this waiter registered (`notify_waiters` wakes only registered waiters,
        // and checking first and registering second loses wake-ups; NOTES.md pitfall 1).
        let mut opened = pin!(self.opened.notified());
        opened.as_mut().enable();
        {
            let open = lock(&self.open);
            if *open {
                return;
            }
            on_hold();
        }
        opened.await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::mpsc;
    use tokio::task::JoinSet;

    use super::*;

    /// Every waiter that held before the opening is released, even when the opening races their
    /// arrival on a multi-threaded runtime; waiters after the opening pass without holding.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_waiter_misses_the_opening() {
        for _ in 0..200 {
            let gate = Arc::new(Gate::new());
            let (arrived, mut arrivals) = mpsc::unbounded_channel();
            let mut waiters = JoinSet::new();
            for _ in 0..16 {
                let (gate, arrived) = (gate.clone(), arrived.clone());
                waiters.spawn(async move {
                    let _ = arrived.send(());
                    gate.pass(|| {}).await;
                });
            }
            // Open while the waiters are still arriving: half of them have said so.
            for _ in 0..8 {
                arrivals.recv().await.expect("waiters are alive");
            }
            let mut opened = 0;
            gate.open(|| opened += 1);
            gate.open(|| opened += 1);
            assert_eq!(opened, 1, "on_open runs once");
            // A waiter that missed the opening would wait forever: the timeout turns that into
            // a failure instead of a hang.
            let all_released = tokio::time::timeout(Duration::from_secs(5), async {
                while let Some(joined) = waiters.join_next().await {
                    joined.expect("a waiter panicked");
                }
            });
            assert!(all_released.await.is_ok(), "a waiter missed the opening");
        }
    }

    /// A waiter that arrives after the opening neither holds nor waits.
    #[tokio::test]
    async fn an_open_gate_is_passed_without_holding() {
        let gate = Gate::new();
        gate.open(|| {});
        let mut held = false;
        gate.pass(|| held = true).await;
        assert!(!held);
        assert!(gate.is_open());
    }
}
