//! The parent's side: a child process that speaks JSON lines, and how it ended.

use std::fmt;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::unix::pipe;

use super::reaper::Reaper;
use super::stderr::StderrTail;
use super::{JsonLines, write_json_line};

/// The parent's side of a child process that speaks JSON lines.
///
/// Dropping it SIGKILLs the child if it still runs and reaps it before returning; that blocks
/// the calling thread for as long as the kernel takes to end a killed process.
#[derive(Debug)]
pub(crate) struct ChildProcess {
    /// `None` once closed: the child reads end of file, its cue to stop.
    stdin: Option<pipe::Sender>,
    stdout: JsonLines<pipe::Receiver>,
    stderr: StderrTail,
    reaper: Reaper,
}

impl ChildProcess {
    /// Starts `command` with its stdin, stdout and stderr piped to this process (replacing any
    /// stdio it set) and, on Linux, with SIGKILL as its parent-death signal. Blocks the calling
    /// thread until the child has started, as [`Command::spawn`] does. Must be called within a
    /// Tokio runtime, which the pipes and the stderr reader use from then on. Puts an ignored
    /// SIGCHLD back to its default first, so that the child is this process's to reap.
    pub(crate) fn spawn_command(mut command: Command) -> io::Result<ChildProcess> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other(
                "a child process must be started within a Tokio runtime",
            ));
        }
        let (child_stdin, stdin) = io::pipe()?;
        let (stdout, child_stdout) = io::pipe()?;
        let (stderr, child_stderr) = io::pipe()?;
        command
            .stdin(child_stdin)
            .stdout(child_stdout)
            .stderr(child_stderr);
        let reaper = Reaper::start(command)?;
        // From here on an error drops `reaper`, which kills and reaps the child.
        let stdin = pipe::Sender::from_owned_fd(stdin.into())?;
        let stdout = pipe::Receiver::from_owned_fd(stdout.into())?;
        let stderr = pipe::Receiver::from_owned_fd(stderr.into())?;
        Ok(ChildProcess {
            stdin: Some(stdin),
            stdout: JsonLines::new(stdout),
            stderr: StderrTail::start(stderr),
            reaper,
        })
    }

    /// The child's process id: its `/proc/<pid>` lasts until it ends (it is reaped at once).
    pub(crate) fn pid(&self) -> u32 {
        self.reaper.pid
    }

    /// The child's next message; `None` once its stdout has ended (it exited or closed it).
    /// An error names a line that is not the JSON of a `T`, or one far too long. Cancel-safe.
    pub(crate) async fn recv<T: DeserializeOwned>(&mut self) -> io::Result<Option<T>> {
        self.stdout.next().await
    }

    /// Sends `message` to the child as one line. Not cancel-safe: a cancelled send may leave
    /// half a line in the pipe.
    pub(crate) async fn send<T: Serialize>(&mut self, message: &T) -> io::Result<()> {
        let stdin = self.stdin.as_mut().ok_or_else(|| {
            io::Error::new(io::ErrorKind::BrokenPipe, "the child's stdin is closed")
        })?;
        write_json_line(stdin, message).await
    }

    /// The next line of the child's stdout as it is: for tests whose child, the test harness,
    /// writes lines of its own before its messages.
    #[cfg(test)]
    pub(super) async fn next_line(&mut self) -> io::Result<Option<String>> {
        self.stdout.next_line().await
    }

    /// Closes the child's stdin: it reads end of file, which tells it to stop. Its messages can
    /// still be read.
    pub(crate) fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Sends `signal` to the child. Fails with `ESRCH` once the child has been reaped: its pid
    /// may then belong to another process, so it is never signalled.
    pub(crate) fn signal(&self, signal: Signal) -> io::Result<()> {
        self.reaper.signal(signal)
    }

    /// Waits until the child has ended and is reaped, then says how, with its last stderr line.
    /// Returns the same again if called again. Cancel-safe. A stopped child (SIGSTOP) has not
    /// ended: this waits until it is continued and exits, or is killed.
    pub(crate) async fn wait(&mut self) -> io::Result<Exit> {
        let status = self.reaper.wait().await?;
        let last_stderr = self.stderr.finish().await;
        Ok(Exit::new(status, last_stderr))
    }

    /// SIGKILLs the child now, one that cannot be told to exit (it is stopped, say), and reaps
    /// it.
    pub(crate) async fn kill_and_reap(mut self) -> io::Result<Exit> {
        let killed = match self.signal(Signal::Kill) {
            // It ended before the signal: its exit is waiting below.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => false,
            result => result.map(|()| true)?,
        };
        let mut exit = self.wait().await?;
        exit.killed_by_lab = killed && exit.signal.is_some_and(|s| s.number == libc::SIGKILL);
        Ok(exit)
    }

    /// Closes the child's stdin and waits up to `timeout` for it to exit; then SIGKILLs it.
    /// Either way the child is reaped when this returns.
    pub(crate) async fn close(mut self, timeout: Duration) -> io::Result<Exit> {
        self.close_stdin();
        if let Ok(exit) = tokio::time::timeout(timeout, self.wait()).await {
            return exit;
        }
        // It may end between the timeout and the signal: then its own exit is said.
        self.kill_and_reap().await
    }
}

/// The signals the lab sends a child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// SIGKILL: ends it at once; it cannot be caught, and works on a stopped process too.
    Kill,
    /// SIGTERM: asks it to exit.
    Term,
    /// SIGSTOP: freezes it, sockets and all, until [`Signal::Cont`].
    Stop,
    /// SIGCONT: resumes a stopped child.
    Cont,
}

impl Signal {
    pub(super) fn number(self) -> libc::c_int {
        match self {
            Signal::Kill => libc::SIGKILL,
            Signal::Term => libc::SIGTERM,
            Signal::Stop => libc::SIGSTOP,
            Signal::Cont => libc::SIGCONT,
        }
    }
}

/// How a child process ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Exit {
    /// Its exit code, if it exited by itself.
    pub(crate) code: Option<i32>,
    /// The signal that ended it, if one did.
    pub(crate) signal: Option<ExitSignal>,
    /// The last non-empty line it wrote to stderr, if any. The standard library's hint after a
    /// panic message ("note: run with `RUST_BACKTRACE=1` ...") is skipped, so for a panic this
    /// is the panic message (without a backtrace in the environment).
    pub(crate) last_stderr: Option<String>,
    /// Whether the SIGKILL that ended it was this process's: sent by [`ChildProcess::close`]
    /// because the child did not exit within its grace, or by [`ChildProcess::kill_and_reap`]
    /// because it could not be told to (it was stopped). A child that stopped responding, not
    /// one that crashed.
    pub(crate) killed_by_lab: bool,
}

/// A signal that ended a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct ExitSignal {
    /// Its number on this OS.
    pub(crate) number: i32,
    /// Its name, such as `SIGKILL`; `unnamed` for a real-time signal.
    pub(crate) name: &'static str,
}

impl Exit {
    fn new(status: ExitStatus, last_stderr: Option<String>) -> Exit {
        Exit {
            code: status.code(),
            signal: status.signal().map(|number| ExitSignal {
                number,
                name: signal_name(number),
            }),
            last_stderr,
            killed_by_lab: false,
        }
    }
}

impl Exit {
    /// How it ended, as the rest of a sentence whose subject is the process: `exited with
    /// code 1`, `was killed by SIGKILL (9)`.
    pub(crate) fn said(&self) -> String {
        match (self.code, self.signal) {
            (None, Some(_)) => format!("was {self}"),
            _ => self.to_string(),
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exited with code {code}")?,
            (None, Some(signal)) => write!(f, "killed by {} ({})", signal.name, signal.number)?,
            (None, None) => write!(f, "ended")?,
        }
        match &self.last_stderr {
            Some(line) => write!(f, "; its last stderr line: {line}"),
            None => Ok(()),
        }
    }
}

/// The names of the signals whose default action ends a process.
pub(crate) fn signal_name(number: i32) -> &'static str {
    match number {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGSYS => "SIGSYS",
        _ => "unnamed",
    }
}
