//! A replica's permits from the Redis-backed global pool: the admission seam's
//! [`SharedPool`] over [`GlobalPermits`]. Each admitted holder (`replica/request`) keeps its
//! lease renewed until its work leaves and the section's driver releases it. A lease its
//! renewals find lost is reported at once on the pool's channel of losses, which the child
//! relays to its parent.

use tokio::sync::mpsc;

use crate::admission::shared_pool::{BoxFuture, SharedDecision, SharedPermit, SharedPool};
use crate::label::Label;
use crate::policy::Pool;
use crate::redis_pool::{GlobalPermits, HeldLease, Hold, Holder, LeaseLoss, Losses, WorkEnd};

/// One replica's view of the global pool: its holders are named after it.
#[derive(Debug)]
pub(crate) struct ReplicaPool {
    permits: GlobalPermits,
    replica: String,
    losses: Losses,
    /// Whether the dependency checks fencing tokens.
    fencing: bool,
}

impl ReplicaPool {
    /// The pool `permits`, for replica `replica`, and the channel its lost leases come on.
    pub(crate) fn new(
        permits: GlobalPermits,
        replica: String,
        fencing: bool,
    ) -> (ReplicaPool, mpsc::UnboundedReceiver<LeaseLoss>) {
        let (losses, lost) = mpsc::unbounded_channel();
        let pool = ReplicaPool {
            permits,
            replica,
            losses,
            fencing,
        };
        (pool, lost)
    }
}

impl SharedPool for ReplicaPool {
    fn try_admit(
        &self,
        _pool: Pool,
        request: Label,
    ) -> BoxFuture<'static, anyhow::Result<SharedDecision>> {
        let (permits, replica) = (self.permits.clone(), self.replica.clone());
        let (losses, fencing) = (self.losses.clone(), self.fencing);
        Box::pin(async move {
            let holder = Holder::new(&replica, &request.to_string())?;
            match permits.try_hold(holder, Some(losses)).await? {
                Hold::Held(lease) => {
                    // The work begins by writing to the dependency with its token. Its answer
                    // is the dependency's log; the work goes on either way, as work that
                    // cannot see the lock service does.
                    match lease.effect(WorkEnd::Begin, fencing).await {
                        Ok(_) => Ok(SharedDecision::Admitted(Box::new(GlobalPermit {
                            lease,
                            fencing,
                        }))),
                        Err(e) => {
                            // Dropping the permit stops its renewals; give it back first.
                            let _ = lease.release().await;
                            Err(e.into())
                        }
                    }
                }
                Hold::Refused { holders } => Ok(SharedDecision::Refused(
                    holders.iter().map(|h| h.holder.to_string()).collect(),
                )),
            }
        })
    }
}

/// A held global permit, its lease renewed until it is released.
#[derive(Debug)]
struct GlobalPermit {
    lease: HeldLease,
    fencing: bool,
}

impl SharedPermit for GlobalPermit {
    /// The work's end: its last effect lands on the dependency (with its token, which a
    /// fencing dependency refuses if a newer holder of the slot has written since), then the
    /// permit goes back.
    fn release(self: Box<Self>) -> BoxFuture<'static, anyhow::Result<bool>> {
        Box::pin(async move {
            let ended = self.lease.effect(WorkEnd::End, self.fencing).await;
            let released = self.lease.release().await;
            ended?;
            Ok(released?)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::front_process::FrontSpec;

    /// A replica's global spec is checked like the rest of the command line: loopback only,
    /// a valid replica name, the async front.
    #[test]
    fn a_global_spec_is_checked_before_anything_starts() {
        let global = r#""global":{"url":"redis://127.0.0.1:6379","run":"r","lease_ms":200}"#;
        let ok = format!(r#"{{"front":"async","capacity":2,"replica":"r1",{global}}}"#);
        let spec = FrontSpec::parse(&ok).expect("a valid replica spec");
        assert_eq!(spec.replica.as_deref(), Some("r1"));
        assert_eq!(FrontSpec::parse(&spec.to_arg()).ok(), Some(spec));
        for (bad, says) in [
            (ok.replace("127.0.0.1", "10.0.0.1"), "loopback"),
            (ok.replace(r#""replica":"r1","#, ""), "replica name"),
            (ok.replace("r1", "r/1"), "replica"),
            (ok.replace("async", "threaded"), "async front"),
            (
                ok.replace(r#""run""#, r#""bogus":1,"run""#),
                "unknown field",
            ),
        ] {
            let why = format!("{:#}", FrontSpec::parse(&bad).expect_err("refused"));
            assert!(why.contains(says), "{bad}: {why}");
        }
    }
}
