//! The slow gate: a latch that admitted slow work waits at until the coordinator opens it. Once
//! opened it stays open, and no waiter can miss the opening. Async waiters park on a
//! `tokio::sync::Notify`; threads block on a `Condvar`. Both share one `Mutex`-guarded state.

use std::pin::pin;
use std::sync::{Condvar, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::lock;

/// Where the slow gate stands (the report's `final_state.gate`). It leaves `Closed` once and
/// never returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GateState {
    /// Slow work waits.
    #[default]
    Closed,
    /// Slow work passes; the gate never closes again.
    Open,
    /// The run was torn down without opening it: waiters give up. A thread cannot be aborted
    /// from outside, so this is how a threaded front stops work held at a stuck gate.
    Abandoned,
}

/// The latch and its two ways of waking waiters.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    /// A std `Mutex` rather than an atomic so that what the caller records on holding or
    /// opening is ordered with the state itself.
    state: Mutex<GateState>,
    woken: Notify,
    woken_threads: Condvar,
}

impl Gate {
    /// A closed gate.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Where the gate stands now.
    pub(crate) fn state(&self) -> GateState {
        *lock(&self.state)
    }

    /// Opens a closed gate for every present and future waiter. `on_open` runs once, on the
    /// opening, before any waiter can move: it is ordered before every later `pass`.
    pub(crate) fn open(&self, on_open: impl FnOnce()) {
        self.leave_closed(GateState::Open, on_open);
    }

    /// Tells every present and future waiter of a closed gate to give up.
    pub(crate) fn abandon(&self) {
        self.leave_closed(GateState::Abandoned, || {});
    }

    fn leave_closed(&self, to: GateState, on_change: impl FnOnce()) {
        {
            let mut state = lock(&self.state);
            if *state != GateState::Closed {
                return;
            }
            *state = to;
            on_change();
        }
        self.woken.notify_waiters();
        self.woken_threads.notify_all();
    }

    /// Waits (as a task) until the gate is no longer closed, and says how it left: `Open` or
    /// `Abandoned`. If it is closed on arrival, `on_hold` runs first, ordered before the change.
    pub(crate) async fn pass(&self, on_hold: impl FnOnce()) -> GateState {
        // Create the `Notified` future before looking at the state. Tokio counts
        // `notify_waiters` calls: a `Notified` completes once any call is made after its
        // creation, whether or not it had been enabled or polled by then. So a change after the
        // look still reaches this waiter, while looking first and creating it second would lose
        // a change made in between. `enable()` is not what makes this safe: it only queues the
        // future for `notify_one`, which the gate never calls.
        let mut woken = pin!(self.woken.notified());
        woken.as_mut().enable();
        {
            let state = lock(&self.state);
            if *state != GateState::Closed {
                return *state;
            }
            on_hold();
        }
        woken.await;
        // The state leaves `Closed` before any wake-up and never returns to it.
        self.state()
    }

    /// Waits (as a blocked thread) until the gate is no longer closed; as [`Gate::pass`].
    pub(crate) fn pass_blocking(&self, on_hold: impl FnOnce()) -> GateState {
        let mut state = lock(&self.state);
        if *state == GateState::Closed {
            on_hold();
        }
        // The check and the wait are under one lock, so no change can slip between them.
        while *state == GateState::Closed {
            state = self
                .woken_threads
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *state
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc as std_mpsc;
    use std::time::Duration;

    use tokio::sync::mpsc;
    use tokio::task::JoinSet;

    use super::*;

    /// Step by step: a waiter polled once is registered and holding; an opening between its
    /// polls wakes it, and its next poll passes. A waiter that checked the state and only then
    /// registered, with a scheduling point between, would sleep through this opening.
    #[test]
    fn a_holding_waiter_wakes_at_the_opening() {
        use std::task::{Context, Poll, Wake, Waker};

        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let gate = Gate::new();
        let woken = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(woken.clone());
        let mut context = Context::from_waker(&waker);
        let mut holds = 0;
        let mut waiter = Box::pin(gate.pass(|| holds += 1));
        assert_eq!(waiter.as_mut().poll(&mut context), Poll::Pending);
        gate.open(|| {});
        assert_eq!(
            woken.0.load(Ordering::SeqCst),
            1,
            "the opening woke the waiter"
        );
        assert_eq!(
            waiter.as_mut().poll(&mut context),
            Poll::Ready(GateState::Open)
        );
        drop(waiter);
        assert_eq!(holds, 1);
    }

    /// A smoke test of the same under real concurrency: waiters arriving while the gate opens,
    /// on a multi-threaded runtime, are all released; each either held first or passed.
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
                    gate.pass(|| {}).await
                });
            }
            // Open while the waiters are still arriving: half of them have said so.
            for _ in 0..8 {
                arrivals.recv().await.expect("waiters are alive");
            }
            let mut opened = 0;
            gate.open(|| opened += 1);
            gate.open(|| opened += 1);
            gate.abandon();
            assert_eq!(
                opened, 1,
                "on_open runs once; an open gate cannot be abandoned"
            );
            // A waiter that missed the opening would wait forever: the timeout turns that into
            // a failure instead of a hang.
            let all_released = tokio::time::timeout(Duration::from_secs(5), async {
                while let Some(joined) = waiters.join_next().await {
                    assert_eq!(joined.expect("a waiter panicked"), GateState::Open);
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
        assert_eq!(gate.pass(|| held = true).await, GateState::Open);
        assert_eq!(gate.pass_blocking(|| held = true), GateState::Open);
        assert!(!held);
    }

    /// Many blocked threads, all held before the opening (each said so from `on_hold`): every
    /// one of them wakes. No sleeps: the test waits for their hold messages, then opens.
    #[test]
    fn blocked_threads_all_wake_at_the_opening() {
        const THREADS: usize = 64;
        let gate = Arc::new(Gate::new());
        let (held, holds) = std_mpsc::channel();
        let (done, dones) = std_mpsc::channel();
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (gate, held, done) = (gate.clone(), held.clone(), done.clone());
                std::thread::spawn(move || {
                    let passed = gate.pass_blocking(|| held.send(()).expect("the test listens"));
                    done.send(passed).expect("the test listens");
                })
            })
            .collect();
        for _ in 0..THREADS {
            holds.recv().expect("a thread held");
        }
        gate.open(|| {});
        for _ in 0..THREADS {
            // A thread that missed the opening would never answer: fail instead of hanging.
            let passed = dones.recv_timeout(Duration::from_secs(5));
            assert_eq!(
                passed,
                Ok(GateState::Open),
                "a blocked thread missed the opening"
            );
        }
        threads
            .into_iter()
            .for_each(|t| t.join().expect("a waiter panicked"));
    }

    /// Abandoning a closed gate releases its waiters, telling them so, and it stays abandoned.
    #[test]
    fn abandoning_releases_blocked_threads() {
        let gate = Arc::new(Gate::new());
        let (held, holds) = std_mpsc::channel();
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || gate.pass_blocking(|| held.send(()).expect("listening")))
        };
        holds.recv().expect("the thread held");
        gate.abandon();
        assert_eq!(waiter.join().expect("no panic"), GateState::Abandoned);
        gate.open(|| panic!("an abandoned gate does not open"));
        assert_eq!(gate.state(), GateState::Abandoned);
    }
}
