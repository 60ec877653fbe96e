//! A held global permit whose lease is renewed while it is held, by a task the holder owns.
//!
//! The renewal ticks every third of the lease on a Tokio interval: that timer is the lease's
//! own clock (two renewals may be missed before the lease lapses), not a way to sequence
//! anything. Dropping the lease stops renewing without releasing, as a holder that dies does:
//! with a lease, the permit then lapses when the lease ends; without one, it leaks.

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant, MissedTickBehavior};

use super::permits::{GlobalError, GlobalPermits, Holder, Lease, Renewal};

/// What the renewals of a held lease have found so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseState {
    /// Held: Redis confirmed it at `at_ms`, until `expires_at_ms` (`None`: no lease).
    Held {
        /// The Redis time of the admission or of the last renewal.
        at_ms: u64,
        /// The end of the lease then.
        expires_at_ms: Option<u64>,
        /// How many renewals succeeded.
        renewals: u32,
    },
    /// A renewal found the holder gone at Redis time `at_ms`: its lease had lapsed (or it was
    /// removed), and another holder may hold its permit. Renewing has stopped.
    Lost {
        /// The Redis time of the renewal that found it gone.
        at_ms: u64,
    },
    /// A renewal failed (Redis gone or too slow): the lease lapses at `expires_at_ms` unless
    /// Redis is back and the holder releases it. Renewing has stopped; treat the permit as lost.
    Failed {
        /// The renewal's error.
        error: String,
        /// The end of the lease as last confirmed.
        expires_at_ms: Option<u64>,
    },
}

/// A global permit held by one holder, renewed every third of its lease until it is released
/// ([`HeldLease::release`]) or dropped. Dropping it stops the renewals but does not release
/// the permit: that takes a round trip to Redis, which `Drop` cannot await.
#[derive(Debug)]
pub(crate) struct HeldLease {
    permits: GlobalPermits,
    holder: Holder,
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "the lab acts on no renewal's verdict: a lapsed lease shows in Redis's \
                      holders; this module's tests watch the verdicts"
        )
    )]
    state: watch::Receiver<LeaseState>,
    /// Kept without a lease, so that [`HeldLease::lost`] waits forever rather than ending:
    /// a permit without a lease is never lost to expiry.
    _unleased: Option<watch::Sender<LeaseState>>,
    renewer: Option<JoinHandle<()>>,
}

impl HeldLease {
    /// Starts renewing the lease `holder` was just admitted with. Must run inside a Tokio
    /// runtime; the renewals run on it.
    pub(super) fn start(
        permits: GlobalPermits,
        holder: Holder,
        at_ms: u64,
        expires_at_ms: Option<u64>,
    ) -> HeldLease {
        let (tx, state) = watch::channel(LeaseState::Held {
            at_ms,
            expires_at_ms,
            renewals: 0,
        });
        let (renewer, unleased) = match permits.lease() {
            Lease::Millis(ms) => {
                // At least 1 ms: a zero period would make the interval panic.
                let period = Duration::from_millis((ms / 3).max(1));
                let task = renew(permits.clone(), holder.clone(), period, tx, expires_at_ms);
                (Some(tokio::spawn(task)), None)
            }
            Lease::None => (None, Some(tx)),
        };
        HeldLease {
            permits,
            holder,
            state,
            _unleased: unleased,
            renewer,
        }
    }

    /// Who holds the permit.
    #[cfg(test)]
    pub(crate) fn holder(&self) -> &Holder {
        &self.holder
    }

    /// What the renewals have found so far.
    #[cfg(test)]
    pub(crate) fn state(&self) -> LeaseState {
        self.state.borrow().clone()
    }

    /// A receiver that sees each renewal's outcome as it happens.
    #[cfg(test)]
    pub(crate) fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.state.clone()
    }

    /// Waits until a renewal finds the lease lost or fails, and returns that state. Never
    /// returns for a permit without a lease.
    #[cfg(test)]
    pub(crate) async fn lost(&mut self) -> LeaseState {
        let ended = self
            .state
            .wait_for(|state| !matches!(state, LeaseState::Held { .. }))
            .await
            // Clone at once: the guard must not live across an await.
            .map(|state| state.clone());
        ended.unwrap_or_else(|_| LeaseState::Failed {
            error: "the renewal task ended without a verdict".to_owned(),
            expires_at_ms: None,
        })
    }

    /// Stops renewing, waits for the renewal task to end, then releases the permit. `false`
    /// when it was no longer held (its lease had lapsed, or it was cleaned up).
    pub(crate) async fn release(mut self) -> Result<bool, GlobalError> {
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
            // A renewal in flight is either sent before the release (and done first, on the one
            // connection) or never sent; and a renewal never re-adds a released holder.
            if let Err(e) = renewer.await
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        self.permits.release(&self.holder).await
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
        }
    }
}

/// Renews `holder`'s lease every `period` until a renewal finds it lost or fails; reports each
/// outcome on `tx`.
async fn renew(
    permits: GlobalPermits,
    holder: Holder,
    period: Duration,
    tx: watch::Sender<LeaseState>,
    mut expires_at_ms: Option<u64>,
) {
    let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
    // A starved runtime renews late rather than in a burst.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut renewals = 0u32;
    loop {
        ticks.tick().await;
        match permits.renew(&holder).await {
            Ok(Renewal::Renewed {
                at_ms,
                expires_at_ms: expiry,
            }) => {
                renewals = renewals.saturating_add(1);
                expires_at_ms = expiry;
                tx.send_replace(LeaseState::Held {
                    at_ms,
                    expires_at_ms,
                    renewals,
                });
            }
            Ok(Renewal::Lost { at_ms }) => {
                tx.send_replace(LeaseState::Lost { at_ms });
                return;
            }
            Err(error) => {
                tx.send_replace(LeaseState::Failed {
                    error: error.to_string(),
                    expires_at_ms,
                });
                return;
            }
        }
    }
}
