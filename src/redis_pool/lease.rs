//! A held global permit whose lease is renewed while it is held, by a task the holder owns.
//!
//! The renewal ticks every third of the lease on a Tokio interval: that timer is the lease's
//! own clock (one renewal may be missed; the third tick comes as the lease ends), not a way
//! to sequence anything. A renewal must be answered before the lease it renews would end
//! (counted from when the last confirmed round trip was sent, by this process's clock): a
//! Redis that stays silent past that point has let the lease lapse, whatever it answers later.
//! Dropping the lease stops renewing without releasing, as a holder that dies does: with a
//! lease, the permit then lapses when the lease ends; without one, it leaks.
//!
//! A lease found lost is reported once, with what is known of why, to whoever the holder was
//! given ([`Losses`]): the replica tells its parent at once, so the run can name it.

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant, MissedTickBehavior};

use super::permits::{Fence, GlobalError, GlobalPermits, Holder, Lease, Renewal, WorkEnd};

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
        /// What is known of why.
        cause: LossCause,
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

/// Why a lease was lost, as far as its holder can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum LossCause {
    /// Redis no longer had the holder although its lease had not ended by Redis's clock: the
    /// permit was lost from Redis (its key deleted or flushed).
    RemovedFromRedis,
    /// The lease ended before a renewal reached Redis: the renewal ran `late_ms` after the
    /// lease's end, so this process (or its thread) did not run in time.
    RenewedTooLate {
        /// How long after the lease's end, by Redis's clock, the renewal arrived.
        late_ms: u64,
    },
    /// Redis did not answer a renewal before the lease ended: it was unreachable (stopped,
    /// overloaded, gone) for at least `silent_ms`.
    RedisSilent {
        /// How long the renewal went unanswered while this process watched, by its clock: from
        /// the renewal's sending to the lease's end, or, for a holder that did not run past
        /// that end, from when it ran again.
        silent_ms: u64,
    },
    /// A renewal failed at once, before the lease ended (the connection broke, or Redis
    /// refused it): the holder cannot keep its lease, which lapses at its end.
    RenewalFailed {
        /// How long before the lease's end, by this process's clock, the renewal failed.
        before_end_ms: u64,
    },
    /// A renewal was sent only after the lease had ended, by this process's clock (it did not
    /// run in time), and failed: Redis could not say what became of the permit.
    RenewalFailedLate {
        /// How long after the lease's end, by this process's clock, the renewal was sent.
        after_end_ms: u64,
    },
}

impl std::fmt::Display for LossCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LossCause::RemovedFromRedis => {
                f.write_str("its permit was lost from Redis before its lease ended")
            }
            LossCause::RenewedTooLate { late_ms } => write!(
                f,
                "its renewal reached Redis {late_ms} ms after the lease had ended (the replica \
                 did not run in time)"
            ),
            LossCause::RedisSilent { silent_ms } => write!(
                f,
                "Redis was unreachable for at least {silent_ms} ms, past the lease's end"
            ),
            LossCause::RenewalFailedLate { after_end_ms } => write!(
                f,
                "its renewal was sent {after_end_ms} ms after the lease had ended (the replica \
                 did not run in time), and failed"
            ),
            LossCause::RenewalFailed { before_end_ms } => write!(
                f,
                "its renewal failed {before_end_ms} ms before the lease's end (the connection to \
                 Redis broke, or Redis refused it), so the lease could not be kept"
            ),
        }
    }
}

/// A lease found lost by its holder's renewals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseLoss {
    /// The holder, `replica/request`.
    pub holder: String,
    /// Why.
    #[serde(flatten)]
    pub cause: LossCause,
    /// The Redis time the lease ended, as last confirmed.
    pub lease_ended_at_ms: Option<u64>,
}

/// Where a holder reports a lease it found lost.
pub(crate) type Losses = mpsc::UnboundedSender<LeaseLoss>;

/// A global permit held by one holder, renewed every third of its lease until it is released
/// ([`HeldLease::release`]) or dropped. Dropping it stops the renewals but does not release
/// the permit: that takes a round trip to Redis, which `Drop` cannot await.
#[derive(Debug)]
pub(crate) struct HeldLease {
    permits: GlobalPermits,
    holder: Holder,
    /// Its slot and fencing token.
    fence: Fence,
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "a lost lease reaches the lab through the losses channel; this module's \
                      tests watch each renewal's verdict"
        )
    )]
    state: watch::Receiver<LeaseState>,
    /// Kept without a lease, so that `HeldLease::lost` (a test's) waits forever rather than ending:
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
        admitted: Confirmed,
        fence: Fence,
        losses: Option<Losses>,
    ) -> HeldLease {
        let Confirmed {
            at_ms,
            expires_at_ms,
            sent,
        } = admitted;
        let (tx, state) = watch::channel(LeaseState::Held {
            at_ms,
            expires_at_ms,
            renewals: 0,
        });
        let (renewer, unleased) = match permits.lease() {
            Lease::Millis(ms) => {
                // At least 1 ms: a zero period would make the interval panic.
                let period = Duration::from_millis((ms / 3).max(1));
                let lease = Duration::from_millis(ms);
                let task = Renewer {
                    permits: permits.clone(),
                    holder: holder.clone(),
                    period,
                    lease,
                    tx,
                    expires_at_ms,
                    sent,
                    losses,
                };
                (Some(tokio::spawn(task.run())), None)
            }
            Lease::None => (None, Some(tx)),
        };
        HeldLease {
            permits,
            holder,
            fence,
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

    /// Applies the holder's effect at `phase` of its work, with its slot and fencing token, to
    /// the run's dependency ([`GlobalPermits::effect`]).
    pub(crate) async fn effect(&self, phase: WorkEnd, fencing: bool) -> Result<bool, GlobalError> {
        let (holder, fence) = (&self.holder, self.fence);
        self.permits.effect(holder, fence, phase, fencing).await
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

/// A round trip Redis confirmed: when it decided (Redis time), until when the lease holds,
/// and when this process sent it (the lease can last no longer than a lease from then).
#[derive(Debug, Clone, Copy)]
pub(super) struct Confirmed {
    pub(super) at_ms: u64,
    pub(super) expires_at_ms: Option<u64>,
    pub(super) sent: Instant,
}

/// A renewal's deadline noticed this long after it passed was not watched: the process did not
/// run meanwhile (stopped, or starved of CPU), and cannot say Redis was the one silent.
const TIMER_LATE: Duration = Duration::from_millis(50);

/// What a holder heard of a renewal sent before its lease's end.
#[derive(Debug)]
pub(super) enum Heard<T, E> {
    /// Redis's answer, or the renewal's failure, as this process saw them.
    Answer(Result<T, E>),
    /// No answer while this process watched, for this long: from the sending to the lease's
    /// end or, woken late, from the wake to another lease on.
    Silent(Duration),
    /// This process did not run past the lease's end, and its renewal failed around then (the
    /// connection broke, or the client gave up on it, maybe only because its answer went
    /// unread): it says nothing of what Redis did.
    Unknown,
}

/// What became of `renewal`, sent at `asked`, by `deadline`, the lease's end.
///
/// A process that did not run past the deadline (its timer woke it well after it) may be woken
/// before its connection has read an answer Redis gave in time. That answer says what became of
/// the permit, so it is waited for, for another `lease` at most; only a renewal still unanswered
/// then is Redis's silence, counted from when this process woke. One that fails meanwhile says
/// nothing of Redis: [`Heard::Unknown`].
pub(super) async fn answered_by<T, E>(
    renewal: impl Future<Output = Result<T, E>>,
    asked: Instant,
    deadline: Instant,
    lease: Duration,
) -> Heard<T, E> {
    tokio::pin!(renewal);
    let first = tokio::time::timeout_at(deadline, &mut renewal).await;
    let woke = Instant::now();
    if woke.saturating_duration_since(deadline) <= TIMER_LATE {
        return match first {
            Ok(answer) => Heard::Answer(answer),
            Err(_) => Heard::Silent(woke - asked),
        };
    }
    match first {
        Ok(Ok(answer)) => Heard::Answer(Ok(answer)),
        Ok(Err(_)) => Heard::Unknown,
        Err(_) => match tokio::time::timeout(lease, &mut renewal).await {
            Ok(Ok(answer)) => Heard::Answer(Ok(answer)),
            Ok(Err(_)) => Heard::Unknown,
            Err(_) => Heard::Silent(woke.elapsed()),
        },
    }
}

/// What a renewal task needs.
struct Renewer {
    permits: GlobalPermits,
    holder: Holder,
    period: Duration,
    lease: Duration,
    tx: watch::Sender<LeaseState>,
    expires_at_ms: Option<u64>,
    /// When the last confirmed round trip was sent.
    sent: Instant,
    losses: Option<Losses>,
}

impl Renewer {
    /// Renews the holder's lease every period until a renewal finds it lost or fails; reports
    /// each outcome on the watch, and a loss to `losses`.
    async fn run(mut self) {
        // From when the admission was sent, as the lease's end is counted: an answer read
        // late leaves less than a lease to renew in, and is renewed at once when a period has
        // passed.
        let mut ticks = tokio::time::interval_at(self.sent + self.period, self.period);
        // A starved runtime renews late rather than in a burst.
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut renewals = 0u32;
        loop {
            ticks.tick().await;
            let mut asked = Instant::now();
            // Past the lease's end by this clock the lease has lapsed, answered or not.
            let deadline = self.sent + self.lease;
            let mut late = asked.checked_duration_since(deadline);
            let heard = match late {
                // Already past the lease's end before asking (this process did not run in
                // time): Redis's answer says what became of the permit.
                Some(_) => Heard::Answer(self.permits.renew(&self.holder).await),
                None => {
                    let renewal = self.permits.renew(&self.holder);
                    answered_by(renewal, asked, deadline, self.lease).await
                }
            };
            // Redis's answer (or the renewal's failure), or how long it was silent.
            let heard = match heard {
                Heard::Answer(answer) => Ok(answer),
                Heard::Silent(silent) => Err(silent),
                Heard::Unknown => {
                    // Woken past the lease's end to a renewal that failed meanwhile: ask again,
                    // as when asking late, and let Redis's answer say what became of the permit.
                    asked = Instant::now();
                    late = asked.checked_duration_since(deadline);
                    Ok(self.permits.renew(&self.holder).await)
                }
            };
            let (state, cause) = match heard {
                Ok(Ok(Renewal::Renewed {
                    at_ms,
                    expires_at_ms,
                })) => {
                    renewals = renewals.saturating_add(1);
                    self.expires_at_ms = expires_at_ms;
                    self.sent = asked;
                    self.tx.send_replace(LeaseState::Held {
                        at_ms,
                        expires_at_ms,
                        renewals,
                    });
                    continue;
                }
                Ok(Ok(Renewal::Lost { at_ms })) => {
                    let cause = match self.expires_at_ms {
                        Some(end) if at_ms >= end => LossCause::RenewedTooLate {
                            late_ms: at_ms - end,
                        },
                        _ => LossCause::RemovedFromRedis,
                    };
                    (LeaseState::Lost { at_ms, cause }, cause)
                }
                Ok(Err(error)) => {
                    // Failed, not silent: either this process asked after the lease's end (at
                    // first, or again once woken late), or the renewal failed before that end.
                    let cause = match late {
                        Some(late) => LossCause::RenewalFailedLate {
                            after_end_ms: late.as_millis() as u64,
                        },
                        None => LossCause::RenewalFailed {
                            before_end_ms: deadline
                                .saturating_duration_since(Instant::now())
                                .as_millis() as u64,
                        },
                    };
                    let state = LeaseState::Failed {
                        error: error.to_string(),
                        expires_at_ms: self.expires_at_ms,
                    };
                    (state, cause)
                }
                Err(silent) => {
                    let silent_ms = silent.as_millis() as u64;
                    let error = format!(
                        "Redis did not answer a renewal in the {silent_ms} ms this process \
                         watched for its answer"
                    );
                    let state = LeaseState::Failed {
                        error,
                        expires_at_ms: self.expires_at_ms,
                    };
                    (state, LossCause::RedisSilent { silent_ms })
                }
            };
            self.tx.send_replace(state);
            if let Some(losses) = &self.losses {
                // The replica may be stopping and no longer listening: the state still says it.
                let _ = losses.send(LeaseLoss {
                    holder: self.holder.to_string(),
                    cause,
                    lease_ended_at_ms: self.expires_at_ms,
                });
            }
            return;
        }
    }
}
