//! The async front on runtimes of its own (`--work` other than `await`, or `--workers`): built
//! and driven on threads of their own in the lab's process, so work that blocks them cannot
//! stop the coordinator, which stays on the lab's current-thread runtime. A heartbeat task on
//! the front's runtime counts its ticks: they stop while every worker is blocked.
//! `docs/blocking.md` tells what each shape shows.
//!
//! Every runtime is owned by one thread, "lab-front": it drives the front's runtime, starts a
//! thread to drive each work class's (`own-runtime`), and stops and joins them all. Stopping
//! the server stops the accept loop, drains its connections (held work has left by then: the
//! gate opens first), shuts every runtime down, joining its workers and blocking threads, and
//! only then reports.

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use futures_util::FutureExt;
use tokio::runtime::{Builder, Runtime};
use tokio::sync::{Notify, oneshot};

use super::Hosting;
use super::async_front::AsyncListener;
use super::caught::{panic_message, quietly};
use super::work_style::Dispatch;
use super::{FrontCensus, Stopped};
use crate::admission::section::WorkSection;
use crate::child::awake_within;
use crate::executor::{Executor, WorkStyle, Workers};
use crate::hooks::Hooks;

/// How often the heartbeat ticks while its runtime can run it. The ticks are evidence that
/// the runtime runs tasks, never a clock the lab waits on.
const BEAT: Duration = Duration::from_millis(1);

/// How much longer than its drain limit the front's thread may take to report.
const REPORT_SLACK: Duration = Duration::from_secs(2);

/// The heartbeat of the front's runtime: ticks counted by a task of that runtime, and whether
/// the front's thread has stopped, and why if it stopped on an error.
#[derive(Debug, Default)]
pub(crate) struct Heartbeat {
    ticks: AtomicU64,
    stopped: AtomicBool,
    /// The front's error, in the words its stop reports it in, if it stopped on one.
    why: OnceLock<String>,
    /// Told at the first tick, and when the front's thread stops.
    changed: Notify,
}

impl Heartbeat {
    pub(crate) fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::SeqCst)
    }

    /// Waits until the runtime has run the heartbeat once (true), or the front's thread has
    /// stopped without (false: starting it failed).
    pub(crate) async fn first_tick(&self) -> bool {
        super::until(&self.changed, || self.ticks() > 0 || self.has_stopped()).await;
        self.ticks() > 0
    }

    /// Waits until the front's thread has stopped serving: told to, or because it could not
    /// go on (its listener broken, say).
    pub(crate) async fn stopped(&self) {
        super::until(&self.changed, || self.has_stopped()).await;
    }

    fn has_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Why the front's thread stopped, if it has stopped on an error.
    fn why(&self) -> Option<&str> {
        self.why.get().map(String::as_str)
    }

    /// `stopped` (what stopped, in a run's failure's words), with the error it stopped on if
    /// any: `"{stopped}: {why}"`, the form in which a failure giving another as its reason is
    /// told once (`Failure::then`).
    pub(crate) fn stopped_for(&self, stopped: &str) -> String {
        self.why()
            .map_or_else(|| stopped.into(), |why| format!("{stopped}: {why}"))
    }

    fn tick(&self) {
        if self.ticks.fetch_add(1, Ordering::SeqCst) == 0 {
            self.changed.notify_waiters();
        }
    }

    fn stop(&self, why: Option<String>) {
        if let Some(why) = why {
            let _ = self.why.set(why);
        }
        self.stopped.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }
}

/// The front's thread, and how to tell it to stop.
#[derive(Debug)]
pub(crate) struct FrontThread {
    stop: Option<oneshot::Sender<()>>,
    report: Option<oneshot::Receiver<anyhow::Result<Stopped>>>,
    thread: Option<JoinHandle<()>>,
    drain_limit: Duration,
    heartbeat: Arc<Heartbeat>,
    /// The front's runtime, to wake a parked worker of (see [`FrontThread::wake_a_worker`]).
    front: tokio::runtime::Handle,
    /// A second descriptor of the listening socket, to read its accept queue; closed before
    /// the server is told to stop, so the listener closes when the server drops its own.
    listening: Option<OwnedFd>,
}

/// Builds the front's runtimes for `executor`, binds `127.0.0.1:0` on the front's, and serves
/// `section` from a thread of its own.
pub(crate) fn start(
    executor: Executor,
    section: Arc<WorkSection>,
    census: Arc<FrontCensus>,
    hooks: Arc<dyn Hooks>,
    hosting: Hosting,
    drain_limit: Duration,
) -> std::io::Result<(SocketAddr, FrontThread)> {
    let workers = executor.workers();
    // One runtime for everything, its blocking pool as `--blocking-threads` says.
    let alone = |dispatch| {
        let front = Built::runtime(workers, executor.blocking_threads.get(), "lab-front")?;
        std::io::Result::Ok((front, None, dispatch))
    };
    let (front, classes, dispatch) = match executor.work {
        WorkStyle::Await => alone(Dispatch::Await)?,
        WorkStyle::Block => alone(Dispatch::Block)?,
        WorkStyle::SpawnBlocking => alone(Dispatch::SpawnBlocking)?,
        WorkStyle::OwnRuntime => {
            let slow = Built::runtime(workers, 1, "lab-slow-work")?;
            let fast = Built::runtime(workers, 1, "lab-fast-work")?;
            let connections = Built::runtime(Workers::CurrentThread, 1, "lab-front")?;
            let dispatch = Dispatch::OwnRuntime {
                slow: slow.handle().clone(),
                fast: fast.handle().clone(),
            };
            (connections, Some((slow, fast)), dispatch)
        }
    };
    let server = {
        // The listener registers with the reactor of the runtime it is made in: the front's.
        let _inside = front.enter();
        AsyncListener::from_std(super::bind_loopback()?, hosting, dispatch)?
    };
    let address = server.address();
    let listening = server.listening()?;
    let handle = front.handle().clone();
    let heartbeat = Arc::new(Heartbeat::default());
    let (stop, stopped) = oneshot::channel::<()>();
    let (report, reported) = oneshot::channel();
    let beating = heartbeat.clone();
    let thread = crate::limits::spawn_thread("lab-front", move || {
        // A dropped sender also means stop.
        let shutdown = stopped.map(drop);
        let serving = server.serve(section, census, hooks, shutdown, drain_limit);
        let classes = classes.map(|(slow, fast)| (slow.take(), fast.take()));
        let served = serve(front.take(), classes, beating.clone(), serving);
        beating.stop(super::error_of(&served));
        // The receiver is gone only if the coordinator itself went away.
        let _ = report.send(served);
    })?;
    let running = FrontThread {
        stop: Some(stop),
        report: Some(reported),
        thread: Some(thread),
        drain_limit,
        heartbeat,
        front: handle,
        listening: Some(listening),
    };
    Ok((address, running))
}

/// A runtime built on the lab's own thread, inside its runtime, until the front's thread takes
/// it. Dropping a runtime there would panic, since it waits for its threads: when starting
/// fails before the front's thread takes it (a limit on descriptors or threads), it is shut
/// down without waiting, and its threads, which ran nothing, end on their own.
struct Built(Option<Runtime>);

impl Built {
    fn runtime(workers: Workers, blocking: usize, name: &str) -> std::io::Result<Built> {
        runtime(workers, blocking, name).map(|runtime| Built(Some(runtime)))
    }

    /// The runtime, on the thread that will drop it.
    fn take(mut self) -> Runtime {
        self.0.take().expect("taken once")
    }
}

impl std::ops::Deref for Built {
    type Target = Runtime;

    fn deref(&self) -> &Runtime {
        self.0
            .as_ref()
            .expect("taken only by `take`, which consumes it")
    }
}

impl Drop for Built {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// A runtime of `workers`, whose blocking pool starts at most `blocking` threads, its threads
/// named `name`.
fn runtime(workers: Workers, blocking: usize, name: &str) -> std::io::Result<Runtime> {
    let mut builder = match workers {
        Workers::CurrentThread => Builder::new_current_thread(),
        Workers::Threads(n) => {
            let mut builder = Builder::new_multi_thread();
            builder.worker_threads(usize::from(n));
            builder
        }
    };
    builder
        .max_blocking_threads(blocking)
        .thread_name(name)
        .enable_all();
    // A multi-thread runtime starts its workers as it is built, and panics (rather than
    // failing) when the system cannot start a thread, as under a memory limit: the run then
    // fails with its own line, which says what the panic said.
    let build = std::panic::AssertUnwindSafe(|| builder.build());
    std::panic::catch_unwind(|| quietly(build))
        .unwrap_or_else(|panic| Err(std::io::Error::other(panic_message(panic.as_ref()))))
}

/// The front thread's life: the heartbeat and the server on the front's runtime, each work
/// class's runtime driven by a thread of its own, then every runtime shut down and joined.
fn serve(
    front: Runtime,
    classes: Option<(Runtime, Runtime)>,
    heartbeat: Arc<Heartbeat>,
    server: impl Future<Output = Stopped> + Send + 'static,
) -> anyhow::Result<Stopped> {
    let drivers = match classes {
        Some((slow, fast)) => vec![drive(slow, "lab-slow-work")?, drive(fast, "lab-fast-work")?],
        None => Vec::new(),
    };
    let beat = front.spawn(async move {
        let mut interval = tokio::time::interval(BEAT);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        // The first tick counts as soon as the task runs at all: the lab waits for it
        // before its first request, as evidence that the runtime runs tasks.
        loop {
            heartbeat.tick();
            interval.tick().await;
        }
    });
    // Spawned rather than run by `block_on`, so that on a multi-thread runtime the server runs
    // on the workers that the slow work blocks, as a real service's would.
    let serving = front.spawn(server);
    let served = front.block_on(serving);
    beat.abort();
    // Joins the front's workers and blocking threads: the held work has left, so none waits.
    drop(front);
    let mut error = None;
    for (stop, driver) in drivers {
        let _ = stop.send(());
        if driver.join().is_err() {
            error = Some("a work class's runtime thread panicked".to_owned());
        }
    }
    let mut stopped = served.context("the server task failed")?;
    stopped.error = stopped.error.or(error);
    Ok(stopped)
}

/// Drives `runtime` from a thread of its own until told to stop, then shuts it down.
fn drive(runtime: Runtime, name: &str) -> anyhow::Result<(oneshot::Sender<()>, JoinHandle<()>)> {
    let (stop, stopped) = oneshot::channel::<()>();
    let thread = crate::limits::spawn_thread(name, move || {
        // A current-thread runtime runs its tasks only while it is driven here.
        let _ = runtime.block_on(stopped);
        drop(runtime);
    })
    .with_context(|| format!("starting the {name} thread"))?;
    Ok((stop, thread))
}

impl FrontThread {
    pub(crate) fn heartbeat(&self) -> Arc<Heartbeat> {
        self.heartbeat.clone()
    }

    /// Connections waiting in the listener's accept queue now: completed by the kernel, not yet
    /// accepted by the server.
    pub(crate) fn accept_queue(&self) -> std::io::Result<usize> {
        let listening = self.listening.as_ref();
        let listening = listening.ok_or_else(|| std::io::Error::other("the front has stopped"))?;
        accept_queue(listening.as_fd())
    }

    /// Wakes a parked worker of the front's runtime, if one is parked, with a task that does
    /// nothing: spawned from outside the runtime, it goes to the runtime's shared queue, which
    /// wakes a parked worker. A multi-thread runtime polls its I/O driver only from a worker
    /// that parks; one that went to sleep while a worker now blocked held the driver would
    /// sleep on, and no connection would be read. Woken, it parks again holding the driver.
    /// The coordinator calls it before sending a request a free worker must read.
    pub(crate) fn wake_a_worker(&self) {
        // The task ends as soon as it runs; the runtime's shutdown ends it if it never does.
        drop(self.front.spawn(async {}));
    }

    /// Tells the server to stop and waits for its report, then joins its thread.
    pub(crate) async fn stop(mut self) -> anyhow::Result<Stopped> {
        drop(self.listening.take());
        drop(self.stop.take());
        let Some(report) = self.report.take() else {
            bail!("the front was already stopped");
        };
        let limit = self.drain_limit + REPORT_SLACK;
        let Some(reported) = awake_within(limit, report).await else {
            bail!(
                "the front's runtimes did not stop within {} s; left running",
                limit.as_secs()
            );
        };
        let reported =
            reported.unwrap_or_else(|_| Err(anyhow!("the front's thread ended without a report")));
        // The thread reports as its last act, so this join returns at once.
        match self.thread.take().map(JoinHandle::join) {
            Some(Err(_)) => Err(anyhow!("the front's thread panicked")),
            _ => reported,
        }
    }
}

impl Drop for FrontThread {
    /// Never blocks: a front dropped without `stop` is told to stop (its sender drops) and
    /// left to shut its runtimes down on its own thread.
    fn drop(&mut self) {
        drop(self.listening.take());
        drop(self.stop.take());
    }
}

/// The accept queue of a listening socket: Linux's `TCP_INFO` reports it, for a socket in
/// `LISTEN`, as `tcpi_unacked` (`sk_ack_backlog`, which `/proc/net/tcp` prints as the
/// listener's `rx_queue`). One system call, where re-reading `/proc/net/tcp` lists every TCP
/// socket of the machine each time.
#[cfg(target_os = "linux")]
fn accept_queue(listening: BorrowedFd<'_>) -> std::io::Result<usize> {
    Ok(tcp_info(listening)?.tcpi_unacked as usize)
}

/// What Linux's `TCP_INFO` says of `socket`: its state, queues and counters.
#[cfg(target_os = "linux")]
pub(crate) fn tcp_info(socket: BorrowedFd<'_>) -> std::io::Result<libc::tcp_info> {
    let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
    let mut length = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `socket` is an open socket for the call's duration; `info` is a zeroed
    // `tcp_info` of `length` bytes, which the kernel fills at most.
    let done = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut length,
        )
    };
    if done != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: zeroed, then written by the kernel: every field is a plain integer.
    Ok(unsafe { info.assume_init() })
}

/// Elsewhere the kernel does not say.
#[cfg(not(target_os = "linux"))]
fn accept_queue(_: BorrowedFd<'_>) -> std::io::Result<usize> {
    Err(std::io::Error::other(
        "only Linux reports a listener's accept queue",
    ))
}
