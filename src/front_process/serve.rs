//! The child's side: `isolation-lab __front <spec>` serves one front on `127.0.0.1:0` and obeys
//! its parent until told to stop or until its stdin ends. Its stdout is the parent's channel:
//! nothing else in this process may print there.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::protocol::{
    Counts, FromFront, FrontSpec, GlobalSpec, Ready, StopReport, Stream, ToFront,
};
use super::replica_pool::ReplicaPool;
use crate::admission::ledger::WorkEvent;
use crate::admission::section::WorkSection;
use crate::admission::shared_pool::Released;
use crate::admission::token::RunToken;
use crate::child::{ToParent, parent_link};
use crate::hooks::NoHooks;
use crate::policy::Allocation;
use crate::redis_pool::{GlobalPermits, Lease, LeaseLoss, LoopbackUrl, Password};
use crate::server::{self, FrontCensus, Running};

/// Serves `spec` until the parent says stop or goes away; returns the process's exit code: 0
/// once it has reported its stop, 1 if it could not start or serve (after saying why, if the
/// parent can still hear it).
pub fn serve(spec: &FrontSpec) -> u8 {
    // Before any socket exists: a front may hold as many connections as the hard limit allows.
    // If raising fails the front still serves, within the soft limit; its figures say so.
    if let Err(e) = crate::limits::raise_nofile() {
        eprintln!("isolation-lab __front: RLIMIT_NOFILE stays as it was: {e}");
    }
    // One thread: on the async front the whole child is then one OS thread plus whatever the
    // front itself starts, which is what an instrument measures.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("isolation-lab __front: cannot start the Tokio runtime: {e}");
            return 1;
        }
    };
    let code = runtime.block_on(run(spec));
    drop(runtime);
    code
}

/// The section and server of a started front.
struct Serving {
    section: Arc<WorkSection>,
    running: Running,
    ready: Ready,
    /// With global permits: the task that makes the section's round trips to Redis.
    driver: Option<JoinHandle<Released>>,
    /// With global permits: leases the renewals found lost.
    lost: Option<mpsc::UnboundedReceiver<LeaseLoss>>,
    /// With a backlog in the spec: a second descriptor of the listener, to read its drops.
    /// It keeps the socket listening, so it is closed before the server stops.
    listener: Option<std::net::TcpListener>,
}

impl Serving {
    async fn start(spec: &FrontSpec) -> anyhow::Result<Serving> {
        let token = RunToken::generate().context("no run token")?;
        let ready_token = token.header_value();
        let allocation = Allocation::shared(spec.capacity);
        let (section, driver, lost) = match (&spec.global, &spec.replica) {
            (Some(global), Some(replica)) => {
                let permits = connect(global, spec.capacity).await?;
                let (pool, lost) = ReplicaPool::new(permits, replica.clone(), global.fencing);
                let (section, driver) = WorkSection::with_remote(allocation, Arc::new(pool), token);
                (section, Some(tokio::spawn(driver.run())), Some(lost))
            }
            _ => {
                let permits = server::permits(spec.front);
                (WorkSection::new(allocation, permits, token), None, None)
            }
        };
        let section = Arc::new(section);
        let cannot = || format!("cannot start the {} front", spec.front.name());
        let (bound, listener) = match spec.backlog {
            Some(backlog) => {
                let bound = server::bind_loopback_with_backlog(backlog).with_context(cannot)?;
                let listener = bound.0.try_clone().with_context(cannot)?;
                (bound, Some(listener))
            }
            None => (server::bind_loopback().with_context(cannot)?, None),
        };
        let (address, running) = server::start_on(
            spec.front,
            bound,
            section.clone(),
            Arc::new(FrontCensus::default()),
            Arc::new(NoHooks),
            server::Hosting::default(),
            Duration::from_millis(spec.drain_ms),
        )
        .with_context(cannot)?;
        let ready = Ready {
            address,
            token: ready_token,
            pid: std::process::id(),
        };
        Ok(Serving {
            section,
            running,
            ready,
            driver,
            lost,
            listener,
        })
    }
}

/// Joins the run's global pool, as every replica of the run does with the same settings.
async fn connect(global: &GlobalSpec, capacity: usize) -> anyhow::Result<GlobalPermits> {
    let url = LoopbackUrl::parse(&global.url)?;
    let capacity = u32::try_from(capacity).map_err(|_| anyhow!("capacity too large"))?;
    let lease = Lease::from_millis(global.lease_ms);
    let password = Password::from_env();
    GlobalPermits::connect(&url, password.as_ref(), &global.run, capacity, lease)
        .await
        .with_context(|| format!("cannot join the global pool at {url}"))
}

async fn run(spec: &FrontSpec) -> u8 {
    let (mut from_parent, mut to_parent) = match parent_link() {
        Ok(link) => link,
        Err(e) => {
            eprintln!("isolation-lab __front: no pipes to a parent: {e}");
            return 1;
        }
    };
    let Serving {
        section,
        running,
        ready,
        driver,
        mut lost,
        listener,
    } = match Serving::start(spec).await {
        Ok(serving) => serving,
        Err(e) => {
            let reason = format!("{e:#}");
            eprintln!("isolation-lab __front: {reason}");
            let _ = to_parent.send(&FromFront::Failed { reason }).await;
            return 1;
        }
    };
    // Subscribed before the parent learns the address: no request can come before it.
    let (_, mut events) = section.subscribe();
    let mut forward = Forward {
        stream: spec.stream,
        counts: Counts::default(),
    };
    let mut problem = None;
    let mut batch = Vec::new();
    if to_parent.send(&FromFront::Ready(ready)).await.is_ok() {
        loop {
            tokio::select! {
                command = from_parent.next::<ToFront>() => match command {
                    Ok(Some(ToFront::OpenGate)) => section.open_gate(),
                    Ok(Some(ToFront::Census)) => {
                        let census = FromFront::Census(crate::allocator::census());
                        if to_parent.send(&census).await.is_err() {
                            break;
                        }
                    }
                    // Told to stop, or the parent is gone: either way, stop now.
                    Ok(Some(ToFront::Stop) | None) => break,
                    Err(e) => {
                        problem = Some(format!("a line from the parent is not a command: {e}"));
                        break;
                    }
                },
                // Every event waiting, in one batch.
                1.. = events.recv_many(&mut batch, usize::MAX) => {
                    if forward.send(&mut to_parent, std::mem::take(&mut batch)).await.is_err() {
                        // The parent stopped reading: it is gone.
                        break;
                    }
                }
                Some(loss) = next_loss(&mut lost) => {
                    if to_parent.send(&FromFront::LeaseLost(loss)).await.is_err() {
                        break;
                    }
                }
            }
        }
    }
    // Read before the server stops, and closed, so the stop closes the socket.
    let listen_drops = listener.and_then(|listener| {
        use std::os::fd::AsFd;
        crate::procfs::listen_drops(listener.as_fd()).ok()
    });
    // Held work that was never released leaves now, answered 503 `work_abandoned`, so the
    // drain below does not wait for a gate nobody will open.
    section.abandon_gate();
    let stopped = running.stop().await;
    // Every handler has been joined, so every permit has been handed to the driver: close the
    // section and wait for the last releases.
    section.close_remote();
    let permits = match driver {
        Some(driver) => match driver.await {
            Ok(released) => Some(released),
            Err(e) => {
                problem.get_or_insert(format!("the global permits' driver failed: {e}"));
                None
            }
        },
        None => None,
    };
    let rest = std::iter::from_fn(|| events.try_recv().ok()).collect();
    // From here on a failed send means the parent is gone, and nobody is left to tell.
    let _ = forward.send(&mut to_parent, rest).await;
    if let Some(lost) = &mut lost {
        while let Ok(loss) = lost.try_recv() {
            let _ = to_parent.send(&FromFront::LeaseLost(loss)).await;
        }
    }
    let failed = |reason: String| {
        eprintln!("isolation-lab __front: {reason}");
        FromFront::Failed { reason }
    };
    let message = match (stopped, problem) {
        (Ok(stopped), None) => FromFront::Stopped(Box::new(StopReport {
            server: stopped.summary,
            error: stopped.error,
            final_state: section.final_state(),
            ledger: section.audit(),
            counts: forward.counts,
            permits,
            listen_drops,
        })),
        (Err(e), _) => failed(format!("{e:#}")),
        (Ok(_), Some(reason)) => failed(reason),
    };
    let code = u8::from(matches!(message, FromFront::Failed { .. }));
    let _ = to_parent.send(&message).await;
    code
}

/// The next lost lease, or never without global permits.
async fn next_loss(lost: &mut Option<mpsc::UnboundedReceiver<LeaseLoss>>) -> Option<LeaseLoss> {
    match lost {
        Some(lost) => lost.recv().await,
        None => std::future::pending().await,
    }
}

/// What the parent is told about the section's events.
struct Forward {
    stream: Stream,
    counts: Counts,
}

impl Forward {
    /// Tells the parent about `batch`: one line of running totals, or a line per event.
    async fn send(
        &mut self,
        to_parent: &mut ToParent,
        batch: Vec<WorkEvent>,
    ) -> std::io::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        batch.iter().for_each(|event| self.counts.add(event));
        match self.stream {
            Stream::Counts => to_parent.send(&FromFront::Counts(self.counts)).await,
            Stream::Events => {
                for event in batch {
                    to_parent.send(&FromFront::Event(event)).await?;
                }
                Ok(())
            }
        }
    }
}
