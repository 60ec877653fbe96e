//! The parent's side: [`FrontProcess`], a front serving in a child process of the lab.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};

use super::SUBCOMMAND;
use super::protocol::{FromFront, FrontSpec, Ready, StopReport, ToFront};
use crate::child::{ChildProcess, Exit, Signal, Stall, watched_within};
use crate::redis_pool::PASSWORD_VAR;

/// How long a child that failed, or was told to stop and did not, gets to exit before it is
/// killed: it has nothing left to do but exit.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// A server front in a child process: started, told to open its gate and to stop, and reaped.
/// It dies with the parent (see [`ChildProcess`]); dropping it kills and reaps the child.
#[derive(Debug)]
pub(crate) struct FrontProcess {
    child: ChildProcess,
    ready: Ready,
}

/// A step with a front child failed. If the child ended (or had to be killed), it is reaped
/// and `exit` says how it ended.
#[derive(Debug)]
pub(crate) struct FrontError {
    /// What went wrong, in one line.
    pub(crate) reason: String,
    /// How the child ended, once reaped.
    pub(crate) exit: Option<Exit>,
    /// The child was found stopped by a signal (SIGSTOP), so it was killed: `reason` says so.
    pub(crate) found_stopped: bool,
}

impl fmt::Display for FrontError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.exit {
            Some(exit) => write!(f, "{}; the front's process {}", self.reason, exit.said()),
            None => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for FrontError {}

/// A front that stopped when told to: its report, how its process ended, and the messages
/// it sent between the stop command and its report (the last counts or events).
#[derive(Debug)]
pub(crate) struct StoppedFront {
    pub(crate) stopped: StopReport,
    pub(crate) exit: Exit,
    pub(crate) trailing: Vec<FromFront>,
}

impl FrontProcess {
    /// Starts `program __front <spec>` (`program` is this lab's binary) and waits up to
    /// `timeout` for it to be ready.
    pub(crate) async fn start(
        program: &Path,
        spec: &FrontSpec,
        timeout: Duration,
    ) -> Result<FrontProcess, FrontError> {
        let mut command = Command::new(program);
        command.arg(SUBCOMMAND).arg(spec.to_arg());
        // The private Redis's password, in the environment rather than on the command line;
        // and none from ours for a child that is not given one.
        match spec.global.as_ref().and_then(|g| g.password.as_ref()) {
            Some(password) => command.env(PASSWORD_VAR, password.as_str()),
            None => command.env_remove(PASSWORD_VAR),
        };
        let child = ChildProcess::spawn_command(command).map_err(|e| FrontError {
            reason: format!(
                "cannot start a process for the {} front: {e}",
                spec.front.name()
            ),
            exit: None,
            found_stopped: false,
        })?;
        FrontProcess::attach(child, timeout).await
    }

    /// Takes over a started child whose next message is its first, and waits up to `timeout`
    /// for it to be ready. A child stopped by a signal (SIGSTOP) before then is killed at once
    /// (the exit says the lab killed it): it would neither say anything nor exit when told.
    pub(crate) async fn attach(
        mut child: ChildProcess,
        timeout: Duration,
    ) -> Result<FrontProcess, FrontError> {
        let first = watched_within(child.pid(), timeout, child.recv::<FromFront>()).await;
        let reason = match first {
            Ok(Ok(Some(FromFront::Ready(ready)))) => return Ok(FrontProcess { child, ready }),
            Ok(Ok(Some(FromFront::Failed { reason }))) => reason,
            Ok(Ok(Some(other))) => format!("the front's first message was not ready: {other:?}"),
            Ok(Ok(None)) => "the front's process ended before it was ready".to_owned(),
            Ok(Err(e)) => format!("reading the front's first message: {e}"),
            Err(Stall::Stopped) => {
                let reason = "its process was found stopped (SIGSTOP or another stop signal) before it was ready";
                return Err(killed_stopped(reason, child).await);
            }
            Err(Stall::NoProgress) => {
                format!("the front was not ready within {} s", timeout.as_secs())
            }
        };
        Err(end(child, reason).await)
    }

    /// The child's process id: its `/proc/<pid>` figures are the front's alone.
    pub(crate) fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Where the front listens: `127.0.0.1:<port>`.
    pub(crate) fn address(&self) -> SocketAddr {
        self.ready.address
    }

    /// The run token its callers must present.
    pub(crate) fn token(&self) -> &str {
        &self.ready.token
    }

    /// The front's next message: counts or events as its section records them. `None` once
    /// its stdout has ended: it has exited (see [`FrontProcess::wait`]). Cancel-safe.
    pub(crate) async fn next(&mut self) -> io::Result<Option<FromFront>> {
        self.child.recv().await
    }

    /// Tells the front to open its slow gate.
    pub(crate) async fn open_gate(&mut self) -> io::Result<()> {
        self.child.send(&ToFront::OpenGate).await
    }

    /// Asks the front for the blocks its heap holds now, and reads up to its answer, past any
    /// counts sent before it.
    pub(crate) async fn census(&mut self) -> anyhow::Result<crate::allocator::HeapCensus> {
        self.child
            .send(&ToFront::Census)
            .await
            .context("asking the front for its heap")?;
        loop {
            match self.child.recv::<FromFront>().await {
                Ok(Some(FromFront::Census(census))) => return Ok(census),
                Ok(Some(FromFront::Counts(_))) => {}
                Ok(Some(other)) => bail!("the front said {other:?}, not its heap"),
                Ok(None) => bail!("the front's process ended before its heap"),
                Err(e) => return Err(e).context("reading the front's heap"),
            }
        }
    }

    /// SIGKILLs the child now (a test's fault, or a replica's crash); [`FrontProcess::wait`]
    /// then says so.
    pub(crate) fn kill(&self) -> io::Result<()> {
        self.child.signal(Signal::Kill)
    }

    /// SIGSTOPs the child: it freezes, sockets, timers and all, as a long pause would freeze
    /// it. Its messages stop until [`FrontProcess::resume`].
    pub(crate) fn pause(&self) -> io::Result<()> {
        self.child.signal(Signal::Stop)
    }

    /// SIGCONTs a paused child.
    pub(crate) fn resume(&self) -> io::Result<()> {
        self.child.signal(Signal::Cont)
    }

    /// Waits until the child has ended and is reaped, and says how. For a child that ended on
    /// its own, or was killed.
    pub(crate) async fn wait(&mut self) -> io::Result<Exit> {
        self.child.wait().await
    }

    /// Tells the front to stop and waits up to `timeout` for its report and its exit (killed,
    /// if no report came by then). An `Err` means the front did not stop cleanly; the child is
    /// reaped either way. A child stopped by a signal (SIGSTOP) reads no command: found
    /// stopped, it is killed at once (the exit says the lab killed it), as in
    /// [`FrontProcess::attach`].
    pub(crate) async fn stop(mut self, timeout: Duration) -> Result<StoppedFront, FrontError> {
        let reported = watched_within(self.pid(), timeout, self.stop_and_read()).await;
        let reason = match reported {
            Ok(Ok((stopped, trailing))) => {
                return match self.child.close(EXIT_GRACE).await {
                    Ok(exit) if exit.code == Some(0) => Ok(StoppedFront {
                        stopped,
                        exit,
                        trailing,
                    }),
                    Ok(exit) => Err(FrontError {
                        reason: "the front reported its stop but did not exit cleanly".into(),
                        exit: Some(exit),
                        found_stopped: false,
                    }),
                    Err(e) => Err(FrontError {
                        reason: format!("waiting for the front's process: {e}"),
                        exit: None,
                        found_stopped: false,
                    }),
                };
            }
            Ok(Err(e)) => format!("{e:#}"),
            Err(Stall::Stopped) => return Err(killed_stopped(STOPPED, self.child).await),
            // Told to stop and silent for all that time, it is killed at once: a grace to exit
            // as well would keep a stuck front past the lab's 15 s.
            Err(Stall::NoProgress) => {
                let reason = format!("the front did not stop within {} s", timeout.as_secs());
                return Err(ended(reason, self.child.kill_and_reap().await));
            }
        };
        Err(end(self.child, reason).await)
    }

    /// Kills and reaps the child, which a step of the caller's found stopped by a signal
    /// (SIGSTOP), whether or not it has been continued since: ended in the same terms as a child
    /// [`FrontProcess::stop`] finds stopped, wherever the stop landed.
    pub(crate) async fn kill_found_stopped(self) -> FrontError {
        killed_stopped(STOPPED, self.child).await
    }

    /// Sends stop, then reads up to the report.
    async fn stop_and_read(&mut self) -> anyhow::Result<(StopReport, Vec<FromFront>)> {
        self.child
            .send(&ToFront::Stop)
            .await
            .context("telling the front to stop")?;
        let mut trailing = Vec::new();
        loop {
            match self.child.recv::<FromFront>().await {
                Ok(Some(FromFront::Stopped(stopped))) => return Ok((*stopped, trailing)),
                Ok(Some(FromFront::Failed { reason })) => bail!(reason),
                Ok(Some(other)) => trailing.push(other),
                Ok(None) => bail!("the front's process ended before its report"),
                Err(e) => return Err(e).context("reading the front's report"),
            }
        }
    }
}

/// Ends `child` (it gets [`EXIT_GRACE`] to exit by itself, then SIGKILL), reaps it, and says
/// why the step failed and how the child ended.
async fn end(child: ChildProcess, reason: String) -> FrontError {
    ended(reason, child.close(EXIT_GRACE).await)
}

/// Why a child found stopped by a signal, once ready, was ended.
const STOPPED: &str = "its process was found stopped (SIGSTOP or another stop signal)";

/// Kills and reaps `child`, found stopped by a signal: it would neither answer nor exit when
/// told. `reason` says it was found stopped.
async fn killed_stopped(reason: &str, child: ChildProcess) -> FrontError {
    FrontError {
        found_stopped: true,
        ..ended(reason.to_owned(), child.kill_and_reap().await)
    }
}

/// Why a step failed, and how the child, reaped, ended.
fn ended(reason: String, exit: io::Result<Exit>) -> FrontError {
    match exit {
        Ok(exit) => FrontError {
            reason,
            exit: Some(exit),
            found_stopped: false,
        },
        Err(e) => FrontError {
            reason: format!("{reason}; then waiting for the front's process failed: {e}"),
            exit: None,
            found_stopped: false,
        },
    }
}
