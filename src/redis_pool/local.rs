//! A private `redis-server` child process on `127.0.0.1`, for tests and for a lab run that
//! has no Redis of its own: fresh port, fresh directory, no persistence, and it dies with us.
//!
//! Any local process can reach a loopback port, and a Redis that anyone could write to would
//! let them change the run's permits. So the server asks for a fresh random password
//! ([`Password`]), which never appears on a command line (another user can read those from
//! `/proc`): it reads it from a file in its private directory (mode 0700), and the lab's
//! replica processes are given it in their environment ([`PASSWORD_VAR`]).
//!
//! Its directory is removed as soon as it is ready: the server keeps it as its working
//! directory (Linux lets a process's working directory be removed), and with no persistence
//! it writes nothing there. So a lab killed with SIGKILL leaves no directory behind; one
//! killed in the few milliseconds before that is swept by the next start, which removes every
//! `isolation-lab-redis-PID-*` directory whose PID no longer runs.

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::url::LoopbackUrl;
use crate::admission::token::RunToken;
use crate::child::{Reaper, Signal, Stall, watched_within};

/// The line `redis-server` logs once its listening socket is open (7.0 and later add a suffix).
const READY_LINE: &str = "Ready to accept connections";
/// What `redis-server` logs when another process took the port between our probe and its bind.
const PORT_TAKEN: &str = "Address already in use";
/// How many fresh ports to try when another process wins the race for one.
const PORT_ATTEMPTS: usize = 5;
/// How long the server may take to report ready, or to exit once asked to stop.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// The server's last output lines kept to explain a failure.
const KEPT_LINES: usize = 40;
/// The most bytes of one output line kept as one line.
const LINE_PIECE: u64 = 4096;

/// The environment variable that carries the private server's [`Password`] to the lab's
/// replica processes (a process's environment is readable only by its own user).
pub(crate) const PASSWORD_VAR: &str = "ISOLATION_LAB_REDIS_PASSWORD";

/// A password for the private server: 32 hex digits from the operating system's randomness.
/// Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Password(String);

impl Password {
    /// A fresh one, made as a run token is.
    pub(crate) fn generate() -> Result<Password> {
        let token = RunToken::generate().context("randomness for a password")?;
        Ok(Password(token.header_value()))
    }

    /// The password a replica's environment gives it ([`PASSWORD_VAR`]), if any.
    pub(crate) fn from_env() -> Option<Password> {
        std::env::var(PASSWORD_VAR).ok().map(Password)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(..)")
    }
}

/// A `redis-server` this process started, listening on `127.0.0.1` at a free port, with a
/// private directory of its own holding only its configuration, no snapshots and no
/// append-only file, asking for its [`Password`].
///
/// It is started, signalled and reaped by the child-process seam's [`Reaper`], so it dies with
/// its parent as a front child does; dropping it kills and reaps it and removes its directory.
/// [`LocalRedis::stop`] is the orderly way.
#[derive(Debug)]
pub(crate) struct LocalRedis {
    url: LoopbackUrl,
    password: Password,
    pid: u32,
    /// `None` once killed: dropping the reaper SIGKILLs the server and reaps it.
    reaper: Option<Reaper>,
    /// Reads the server's output (stdout and stderr, one pipe) until it exits; returns the
    /// last lines.
    output: Option<JoinHandle<Vec<String>>>,
    /// Its private directory, removed as soon as the server is ready.
    dir: PathBuf,
    /// Whether `dir` is still to be removed.
    dir_exists: bool,
}

/// How one attempt to start a server ended.
enum Attempt {
    Ready(LocalRedis),
    /// Another process bound the port first; the server exited saying so.
    PortTaken(Vec<String>),
}

impl LocalRedis {
    /// Starts a server and waits until it reports that it accepts connections (at most
    /// 10 s). Fails when `redis-server` is not on `PATH`, exits, or never gets ready.
    pub(crate) async fn start() -> Result<LocalRedis> {
        let mut last_output = Vec::new();
        for _ in 0..PORT_ATTEMPTS {
            match Self::start_on(free_port()?).await? {
                Attempt::Ready(redis) => return Ok(redis),
                Attempt::PortTaken(output) => last_output = output,
            }
        }
        bail!(
            "redis-server lost the race for a free port {PORT_ATTEMPTS} times; its last output: {}",
            last_output.join(" / ")
        )
    }

    async fn start_on(port: u16) -> Result<Attempt> {
        sweep_stale_dirs();
        let password = Password::generate()?;
        let url = LoopbackUrl::from_local(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))?;
        // One pipe for stdout and stderr: the ready line comes on stdout, a bad option is
        // reported on stderr, and either explains a failure.
        let (reader, writer) = io::pipe().context("creating a pipe for redis-server's output")?;
        let errors = writer.try_clone().context("sharing the output pipe")?;
        // The configuration file comes first on the command line; the server reads it once, as
        // it starts, and the directory (with it) is removed once the server is ready.
        let config = format!("requirepass {}\n", password.as_str());
        let (dir, config) = fresh_dir(&config)?;
        let mut command = Command::new("redis-server");
        command
            .arg(&config)
            .arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1", "--protected-mode", "yes"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .args(["--daemonize", "no", "--logfile", "", "--loglevel", "notice"])
            // Redis acts on SIGTERM at its next timer tick, 10 a second by default: at 100 a
            // second, `stop` waits about 10 ms for the exit rather than up to 100.
            .args(["--hz", "100"])
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(errors);
        // The reaper drops the command, which holds the pipe's write ends, once the server has
        // started: the reader then sees the end of the output when the server exits.
        let reaper = match Reaper::start(command) {
            Ok(reaper) => reaper,
            Err(e) => {
                // Best effort: the directory is ours; the spawn error is the news.
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e).context("starting redis-server (is it on PATH?)");
            }
        };
        let (ready_tx, ready_rx) = oneshot::channel();
        let mut redis = LocalRedis {
            url,
            password,
            pid: reaper.pid,
            reaper: Some(reaper),
            output: None,
            dir,
            dir_exists: true,
        };
        // From here `redis` owns the process: any early return kills and reaps it.
        let output = pipe::Receiver::from_owned_fd(reader.into()).context("reading the pipe")?;
        redis.output = Some(tokio::spawn(read_output(output, ready_tx)));
        match tokio::time::timeout(STEP_TIMEOUT, ready_rx).await {
            Ok(Ok(())) => {
                // Ready: the server has made the directory its working directory and will
                // write nothing in it. Removed now, it cannot outlive a killed lab.
                redis.remove_dir()?;
                Ok(Attempt::Ready(redis))
            }
            Ok(Err(_)) => {
                // The reader ended without the ready line: the server exited.
                let lines = redis.collect_output().await?;
                let status = redis.wait().await?;
                if lines.iter().any(|line| line.contains(PORT_TAKEN)) {
                    return Ok(Attempt::PortTaken(lines));
                }
                bail!(
                    "redis-server exited ({status}) before it was ready; its output: {}",
                    lines.join(" / ")
                )
            }
            Err(_) => bail!(
                "redis-server did not report ready within {} s",
                STEP_TIMEOUT.as_secs()
            ),
        }
    }

    pub(crate) fn url(&self) -> &LoopbackUrl {
        &self.url
    }

    /// The password the server asks for.
    pub(crate) fn password(&self) -> &Password {
        &self.password
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's private directory (already removed once it is ready).
    #[cfg(test)]
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Asks the server to exit (SIGTERM: with no persistence it saves nothing), waits for it
    /// (at most 10 s, then SIGKILL; at once if it is found stopped), reaps it and removes its
    /// directory. Fails if it had to be killed, exited with an error, or the directory could not
    /// be removed.
    pub(crate) async fn stop(mut self) -> Result<()> {
        let mut problem = None;
        if self.reaper.is_some() {
            // ESRCH: it has exited by itself and is reaped; its status below says how.
            if let Err(e) = self.signal(Signal::Term)
                && e.raw_os_error() != Some(libc::ESRCH)
            {
                problem = Some(format!("SIGTERM failed: {e}"));
            }
            // A stopped server (SIGSTOP from outside) would never act on SIGTERM: it is seen
            // stopped within a quarter of a second and killed, not waited for.
            let pid = self.pid;
            match watched_within(pid, STEP_TIMEOUT, self.wait()).await {
                Ok(status) => {
                    let status = status?;
                    if problem.is_none() && !status.success() {
                        problem = Some(format!("redis-server exited with {status}"));
                    }
                }
                Err(Stall::Stopped) => {
                    problem = Some(
                        "redis-server was found stopped (SIGSTOP or another stop signal); killed"
                            .to_owned(),
                    );
                    self.kill();
                }
                Err(Stall::NoProgress) => {
                    problem = Some(format!(
                        "redis-server did not exit within {} s of SIGTERM; killed",
                        STEP_TIMEOUT.as_secs()
                    ));
                    self.kill();
                }
            }
        }
        // It has ended, by itself or killed: its output has ended or is about to.
        self.collect_output().await?;
        self.remove_dir()?;
        match problem {
            Some(problem) => bail!(problem),
            None => Ok(()),
        }
    }

    /// Stops (`SIGSTOP`) or continues (`SIGCONT`) the server, as a stalled machine would: it
    /// keeps its connections but answers nothing while stopped.
    pub(crate) fn stall(&self, stopped: bool) -> io::Result<()> {
        self.signal(if stopped { Signal::Stop } else { Signal::Cont })
    }

    /// Sends `signal` to the server; `ESRCH` once it is reaped.
    fn signal(&self, signal: Signal) -> io::Result<()> {
        match &self.reaper {
            Some(reaper) => reaper.signal(signal),
            None => Err(io::Error::from_raw_os_error(libc::ESRCH)),
        }
    }

    /// Kills the server at once (SIGKILL) and reaps it, as a crash would end it. Its directory
    /// stays until [`LocalRedis::stop`] or drop.
    pub(crate) fn kill(&mut self) {
        // Dropping the reaper SIGKILLs the server (unless it is reaped already) and returns
        // once the server is reaped.
        self.reaper = None;
    }

    /// Waits until the server has ended and is reaped. Cancel-safe.
    async fn wait(&mut self) -> Result<ExitStatus> {
        let reaper = self.reaper.as_mut();
        let reaper = reaper.context("redis-server was already reaped")?;
        reaper.wait().await.context("reaping redis-server")
    }

    /// Removes the server's directory, if it is still there.
    fn remove_dir(&mut self) -> Result<()> {
        if std::mem::take(&mut self.dir_exists) {
            std::fs::remove_dir_all(&self.dir).with_context(|| {
                format!("removing redis-server's directory {}", self.dir.display())
            })?;
        }
        Ok(())
    }

    /// Joins the output reader, which ends when the server has exited. Cancel-safe: the
    /// reader is forgotten only once it has been joined.
    async fn collect_output(&mut self) -> Result<Vec<String>> {
        let Some(output) = &mut self.output else {
            return Ok(Vec::new());
        };
        let joined = output.await;
        self.output = None;
        joined.context("the redis-server output reader failed")
    }
}

impl Drop for LocalRedis {
    fn drop(&mut self) {
        // Nothing to report to from a drop: kill, reap and remove are each best effort.
        self.kill();
        if let Some(output) = self.output.take() {
            output.abort();
        }
        let _ = self.remove_dir();
    }
}

/// A port that was free a moment ago on 127.0.0.1. Another process may take it before the
/// server binds it; [`LocalRedis::start`] then tries another.
fn free_port() -> Result<u16> {
    let probe = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(probe.local_addr().context("reading the free port")?.port())
}

/// The prefix of every private directory: `isolation-lab-redis-PID-RANDOM`.
const DIR_PREFIX: &str = "isolation-lab-redis-";

/// Removes the private directories of labs that no longer run (killed before their server was
/// ready). Best effort: a directory that cannot be read or removed stays for a later sweep.
fn sweep_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let ours = entry.metadata().is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            // SAFETY: `geteuid` has no preconditions and cannot fail.
            m.is_dir() && m.uid() == unsafe { libc::geteuid() }
        });
        if ours && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A new private directory under the system's temporary directory, holding only `config` in
/// `redis.conf`: the directory, and that file's path. Nothing is left behind if either fails.
fn fresh_dir(config: &str) -> Result<(PathBuf, PathBuf)> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).context("randomness for a name")?;
    let name = format!(
        "{DIR_PREFIX}{}-{:016x}",
        std::process::id(),
        u64::from_le_bytes(random)
    );
    let dir = std::env::temp_dir().join(name);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join("redis.conf");
    if let Err(e) = std::fs::write(&file, config) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e).with_context(|| format!("writing {}", file.display()));
    }
    Ok((dir, file))
}

/// Reads the server's output until it ends, says when the ready line has come, and returns the
/// last lines. A line longer than [`LINE_PIECE`] is kept in pieces rather than growing forever;
/// a read error ends the output like its end.
async fn read_output(output: pipe::Receiver, ready: oneshot::Sender<()>) -> Vec<String> {
    let mut ready = Some(ready);
    let mut lines = VecDeque::with_capacity(KEPT_LINES);
    let mut output = BufReader::new(output);
    let mut piece = Vec::new();
    while let Ok(1..) = (&mut output)
        .take(LINE_PIECE)
        .read_until(b'\n', &mut piece)
        .await
    {
        let line = String::from_utf8_lossy(&piece).trim_end().to_owned();
        piece.clear();
        if line.contains(READY_LINE)
            && let Some(ready) = ready.take()
        {
            // The starter may have given up waiting; then nobody needs to know.
            let _ = ready.send(());
        }
        if lines.len() == KEPT_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }
    lines.into()
}
