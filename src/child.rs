//! A front in another process: the lab starts its own binary again as a child process and talks
//! to it in JSON lines, one value per line each way: parent to child on the child's stdin, child
//! to parent on its stdout. The child's stderr is for people; the parent keeps its last line to
//! explain an abort. [`ChildProcess`] is the parent's side: it starts the child, signals it, and
//! always reaps it, also when dropped. [`FromParent`] and [`ToParent`] are the child's side. A
//! child dies with its parent twice over: its stdin ends when the parent does (it must then stop
//! at once), and on Linux the kernel SIGKILLs it when its parent goes, even a SIGKILLed parent.

#![cfg_attr(
    not(test),
    expect(dead_code, reason = "used by the hold and replicas instruments, next")
)]

use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::pipe;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long [`ChildProcess::wait`] waits, once the child has exited, for the rest of its stderr.
/// The pipe normally ends with the child; only a process the child started and let inherit its
/// stderr can keep it open, and the last line read by then stands.
const STDERR_AFTER_EXIT: Duration = Duration::from_secs(2);

/// The parent's side of a child process that speaks JSON lines.
///
/// Dropping it SIGKILLs the child if it still runs and reaps it before returning; that blocks
/// the calling thread for as long as the kernel takes to end a killed process.
#[derive(Debug)]
pub(crate) struct ChildProcess {
    /// `None` once closed: the child reads end of file, its cue to stop.
    stdin: Option<pipe::Sender>,
    stdout: Lines<BufReader<pipe::Receiver>>,
    stderr: StderrTail,
    reaper: Reaper,
}

impl ChildProcess {
    /// Starts this program again with `args` (the lab's hidden subcommand). See
    /// [`ChildProcess::spawn_command`].
    pub(crate) fn spawn(args: &[String]) -> io::Result<ChildProcess> {
        let mut command = Command::new(std::env::current_exe()?);
        command.args(args);
        ChildProcess::spawn_command(command)
    }

    /// Starts `command` with its stdin, stdout and stderr piped to this process (replacing any
    /// stdio it set) and, on Linux, with SIGKILL as its parent-death signal. Blocks the calling
    /// thread until the child has started, as [`Command::spawn`] does. Must be called within a
    /// Tokio runtime, which the pipes and the stderr reader use from then on.
    pub(crate) fn spawn_command(mut command: Command) -> io::Result<ChildProcess> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other(
                "a child process must be started within a Tokio runtime",
            ));
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(&mut command);
        let (reaper, pipes) = Reaper::start(command)?;
        // From here on an error drops `reaper`, which kills and reaps the child.
        let stdin = pipe::Sender::from_owned_fd(pipes.stdin.into())?;
        let stdout = pipe::Receiver::from_owned_fd(pipes.stdout.into())?;
        let stderr = pipe::Receiver::from_owned_fd(pipes.stderr.into())?;
        Ok(ChildProcess {
            stdin: Some(stdin),
            stdout: BufReader::new(stdout).lines(),
            stderr: StderrTail::start(stderr),
            reaper,
        })
    }

    /// The child's process id: its `/proc/<pid>` lasts until it ends (it is reaped at once).
    pub(crate) fn pid(&self) -> u32 {
        self.reaper.pid
    }

    /// The child's next message; `None` once its stdout has ended (it exited or closed it).
    /// An error names a line that is not the JSON of a `T`. Cancel-safe.
    pub(crate) async fn recv<T: DeserializeOwned>(&mut self) -> io::Result<Option<T>> {
        read_json_line(&mut self.stdout).await
    }

    /// Sends `message` to the child as one line. Not cancel-safe: a cancelled send may leave
    /// half a line in the pipe.
    pub(crate) async fn send<T: Serialize>(&mut self, message: &T) -> io::Result<()> {
        let stdin = self.stdin.as_mut().ok_or_else(|| {
            io::Error::new(io::ErrorKind::BrokenPipe, "the child's stdin is closed")
        })?;
        write_json_line(stdin, message).await
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

    /// Closes the child's stdin and waits up to `timeout` for it to exit; then SIGKILLs it.
    /// Either way the child is reaped when this returns.
    pub(crate) async fn close(mut self, timeout: Duration) -> io::Result<Exit> {
        self.close_stdin();
        if let Ok(exit) = tokio::time::timeout(timeout, self.wait()).await {
            return exit;
        }
        match self.signal(Signal::Kill) {
            // It ended between the timeout and the signal: its exit is waiting below.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            result => result?,
        }
        self.wait().await
    }
}

/// The signals the lab sends a child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// SIGKILL: ends it at once; it cannot be caught, and works on a stopped process too.
    Kill,
    /// SIGSTOP: freezes it, sockets and all, until [`Signal::Cont`].
    Stop,
    /// SIGCONT: resumes a stopped child.
    Cont,
}

impl Signal {
    fn number(self) -> libc::c_int {
        match self {
            Signal::Kill => libc::SIGKILL,
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
fn signal_name(number: i32) -> &'static str {
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
        libc::SIGSYS => "SIGSYS",
        _ => "unnamed",
    }
}

/// Asks the kernel to SIGKILL the child when its parent goes. On Linux the "parent" is the
/// thread that forked it, not the process: that is why [`Reaper`] forks from its own thread,
/// which lives exactly as long as the child is unreaped, whatever thread owns the
/// [`ChildProcess`] or later drops it.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec. It calls only prctl and
    // getppid, which are async-signal-safe, and allocates nothing: its errors are OS codes.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                return Err(io::Error::last_os_error());
            }
            // A parent that died before the line above will never send the signal.
            if u32::try_from(libc::getppid()) != Ok(parent) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Elsewhere only the end of its stdin tells a child that its parent is gone.
#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut Command) {}

/// The child's end of the three pipes, as the reaper thread hands them over.
struct Pipes {
    stdin: std::process::ChildStdin,
    stdout: std::process::ChildStdout,
    stderr: std::process::ChildStderr,
}

/// The thread that forks the child, waits for it to end, and reaps it: so the child's
/// parent-death signal follows this thread (see [`die_with_parent`]), and the child is reaped
/// promptly whatever the runtime does. Dropping it SIGKILLs the child and joins the thread.
#[derive(Debug)]
struct Reaper {
    pid: u32,
    /// `true` once the child is reaped, after which its pid may be reused: held while
    /// signalling, so a signal reaches the child or nothing.
    reaped: Arc<Mutex<bool>>,
    /// The child's exit status, sent once by the thread.
    exited: oneshot::Receiver<io::Result<ExitStatus>>,
    /// What `exited` brought, once it has.
    status: Option<io::Result<ExitStatus>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Reaper {
    fn start(mut command: Command) -> io::Result<(Reaper, Pipes)> {
        let (started, start) = mpsc::sync_channel(1);
        let (report_exit, exited) = oneshot::channel();
        let reaped = Arc::new(Mutex::new(false));
        let reaping = reaped.clone();
        let thread = thread::Builder::new()
            .name("lab-child-reaper".into())
            .spawn(move || {
                let mut child = match command.spawn() {
                    Ok(child) => child,
                    Err(e) => {
                        let _ = started.send(Err(e));
                        return;
                    }
                };
                let pipes = Pipes {
                    stdin: child.stdin.take().expect("stdin is set to Stdio::piped()"),
                    stdout: child
                        .stdout
                        .take()
                        .expect("stdout is set to Stdio::piped()"),
                    stderr: child
                        .stderr
                        .take()
                        .expect("stderr is set to Stdio::piped()"),
                };
                // The spawner waits for this message; if it is gone, so is the child's stdin,
                // and the child stops by itself.
                let _ = started.send(Ok((child.id(), pipes)));
                let status = reap(&mut child, &reaping);
                // The owner may have gone without waiting: then nobody needs the status.
                let _ = report_exit.send(status);
            })?;
        let (pid, pipes) = match start.recv() {
            Ok(Ok(started)) => started,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(mpsc::RecvError) => {
                let _ = thread.join();
                return Err(io::Error::other(
                    "the reaper thread ended before starting the child",
                ));
            }
        };
        let reaper = Reaper {
            pid,
            reaped,
            exited,
            status: None,
            thread: Some(thread),
        };
        Ok((reaper, pipes))
    }

    fn signal(&self, signal: Signal) -> io::Result<()> {
        let reaped = lock(&self.reaped);
        if *reaped {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        let pid = libc::pid_t::try_from(self.pid)
            .map_err(|_| io::Error::other(format!("pid {} is out of range", self.pid)))?;
        // SAFETY: kill has no memory-safety preconditions. `pid` is this reaper's child, alive
        // or a zombie, as `reaped` is held: the thread cannot reap it meanwhile.
        if unsafe { libc::kill(pid, signal.number()) } == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    async fn wait(&mut self) -> io::Result<ExitStatus> {
        if self.status.is_none() {
            // Polled only while `status` is unset, and set in the same poll that completes it,
            // so never polled after completion.
            let reported = (&mut self.exited).await;
            self.status = Some(reported.unwrap_or_else(|_| {
                Err(io::Error::other(
                    "the reaper thread ended without the child's exit status",
                ))
            }));
        }
        match self.status.as_ref().expect("set above when it was unset") {
            Ok(status) => Ok(*status),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // `ESRCH` means it is already reaped; no other error can come from signalling our own
        // child, and a destructor could not act on one anyway.
        let _ = self.signal(Signal::Kill);
        if let Some(thread) = self.thread.take() {
            // Returns once the thread has reaped the child, which SIGKILL ends promptly (unless
            // it sleeps uninterruptibly in the kernel). A panic in the thread has nowhere to go.
            let _ = thread.join();
        }
    }
}

/// Waits until `child` has ended, then reaps it with `reaped` held.
fn reap(child: &mut std::process::Child, reaped: &Mutex<bool>) -> io::Result<ExitStatus> {
    let ended = wait_until_ended(child.id());
    let mut reaped = lock(reaped);
    // After a failed wait the child's state is unknown: never signal that pid again.
    *reaped = true;
    ended?;
    child.wait()
}

/// Blocks until process `pid`, a child of this process, has ended, without reaping it: it stays
/// a zombie, so its pid stays its own, until [`reap`] reaps it.
fn wait_until_ended(pid: u32) -> io::Result<()> {
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value, and waitid only writes to it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is valid and writable for the call.
        let result = unsafe {
            libc::waitid(
                libc::P_PID,
                libc::id_t::from(pid),
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if result == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// The child's stderr, read as it comes so the child never blocks on a full pipe, keeping the
/// last line worth showing.
#[derive(Debug)]
struct StderrTail {
    last: Arc<Mutex<Option<String>>>,
    /// Aborted on drop; `None` once finished.
    reader: Option<JoinHandle<()>>,
}

impl StderrTail {
    fn start(pipe: pipe::Receiver) -> StderrTail {
        let last = Arc::new(Mutex::new(None));
        let keep = last.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(pipe).split(b'\n');
            // A read error ends the tail like the end of the pipe: the line kept so far stands.
            while let Ok(Some(line)) = lines.next_segment().await {
                let line = String::from_utf8_lossy(&line);
                let line = line.trim_end();
                if !line.is_empty() && !line.starts_with(BACKTRACE_HINT) {
                    *lock(&keep) = Some(line.to_owned());
                }
            }
        });
        StderrTail {
            last,
            reader: Some(reader),
        }
    }

    /// Once the child has ended: reads the rest of its stderr (for at most
    /// [`STDERR_AFTER_EXIT`]) and returns the last line kept. Cancel-safe.
    async fn finish(&mut self) -> Option<String> {
        if let Some(reader) = &mut self.reader {
            if tokio::time::timeout(STDERR_AFTER_EXIT, &mut *reader)
                .await
                .is_err()
            {
                reader.abort();
            }
            self.reader = None;
        }
        lock(&self.last).clone()
    }
}

impl Drop for StderrTail {
    fn drop(&mut self) {
        if let Some(reader) = &self.reader {
            reader.abort();
        }
    }
}

/// What the standard library writes after a panic message when no backtrace is asked for.
const BACKTRACE_HINT: &str = "note: run with `RUST_BACKTRACE=1`";

/// Locks `mutex`. Its holders only read or write plain values, so a panic while holding it
/// (which poisons it) cannot have left the value half-changed.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The child's side: the parent's commands, one JSON value per line on stdin.
#[derive(Debug)]
pub(crate) struct FromParent {
    lines: Lines<BufReader<pipe::Receiver>>,
}

impl FromParent {
    /// Reads this process's stdin, which must be the pipe [`ChildProcess`] gives it. Makes it
    /// non-blocking, so nothing else in the process may read stdin. Within a Tokio runtime.
    pub(crate) fn stdin() -> io::Result<FromParent> {
        let stdin = io::stdin().as_fd().try_clone_to_owned()?;
        let pipe = pipe::Receiver::from_owned_fd(stdin)?;
        Ok(FromParent {
            lines: BufReader::new(pipe).lines(),
        })
    }

    /// The parent's next command; `None` when the parent is gone (or closed the child's stdin):
    /// stop now. An error names a line that is not the JSON of a `T`. Cancel-safe.
    pub(crate) async fn next<T: DeserializeOwned>(&mut self) -> io::Result<Option<T>> {
        read_json_line(&mut self.lines).await
    }
}

/// The child's side: messages to the parent, one JSON value per line on stdout.
#[derive(Debug)]
pub(crate) struct ToParent {
    stdout: pipe::Sender,
}

impl ToParent {
    /// Writes to this process's stdout, which must be the pipe [`ChildProcess`] gives it. Makes
    /// it non-blocking: nothing else may write there (stdout is the parent's channel anyway).
    /// Within a Tokio runtime.
    pub(crate) fn stdout() -> io::Result<ToParent> {
        let stdout = io::stdout().as_fd().try_clone_to_owned()?;
        Ok(ToParent {
            stdout: pipe::Sender::from_owned_fd(stdout)?,
        })
    }

    /// Sends `message` as one line, written straight to the pipe. An error means the parent is
    /// gone: stop. Not cancel-safe: a cancelled send may leave half a line in the pipe.
    pub(crate) async fn send<T: Serialize>(&mut self, message: &T) -> io::Result<()> {
        write_json_line(&mut self.stdout, message).await
    }
}

/// The child's side of both pipes: [`FromParent::stdin`] and [`ToParent::stdout`].
pub(crate) fn parent_link() -> io::Result<(FromParent, ToParent)> {
    Ok((FromParent::stdin()?, ToParent::stdout()?))
}

async fn read_json_line<T, R>(lines: &mut Lines<R>) -> io::Result<Option<T>>
where
    T: DeserializeOwned,
    R: AsyncBufRead + Unpin,
{
    let Some(line) = lines.next_line().await? else {
        return Ok(None);
    };
    serde_json::from_str(&line).map(Some).map_err(|e| {
        let message = format!("not a message ({e}): {line:.200}");
        io::Error::new(io::ErrorKind::InvalidData, message)
    })
}

async fn write_json_line<T, W>(out: &mut W, message: &T) -> io::Result<()>
where
    T: Serialize,
    W: AsyncWrite + Unpin,
{
    // Compact JSON has no newline (strings escape theirs), so the line holds one message.
    let mut line =
        serde_json::to_vec(message).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    line.push(b'\n');
    // A pipe has no buffer of ours to flush: the line is written once this returns.
    out.write_all(&line).await
}

/// Test children: this test binary started again, running one ignored test as a child process.
#[cfg(test)]
pub(crate) mod test_child {
    use std::future::Future;
    use std::io::Write;
    use std::process::Command;
    use std::time::Duration;

    use super::ChildProcess;

    /// The environment variable that gives a test child its role.
    const ROLE: &str = "ISOLATION_LAB_TEST_CHILD_ROLE";
    /// A test child writes this line first: everything before it on stdout is the test
    /// harness's, such as "running 1 test".
    const READY: &str = "isolation-lab test child ready";
    /// Fails a stalled step. Generous: the machine may be busy building.
    const STEP: Duration = Duration::from_secs(60);

    /// Starts this test binary again, running only the ignored test `entry` (its full path,
    /// such as `child::tests::child_entry`) with `role`, and reads up to its ready line.
    pub(crate) async fn spawn(entry: &str, role: &str) -> ChildProcess {
        let program = std::env::current_exe().expect("a test binary has a path");
        let mut command = Command::new(program);
        command
            // One test thread: then the harness never prints "has been running for over 60
            // seconds", which would end a long-lived child whose stdout is closed.
            .args([
                "--exact",
                entry,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role)
            // So that a panic's last stderr line is its message, not a backtrace.
            .env_remove("RUST_BACKTRACE");
        let mut child = ChildProcess::spawn_command(command).expect("the test child starts");
        let ready = async {
            while let Some(line) = child.stdout.next_line().await? {
                // The harness may have started a line of its own ("test ... ") before it.
                if line.ends_with(READY) {
                    return Ok(true);
                }
            }
            Ok::<_, std::io::Error>(false)
        };
        match step("the test child's ready line", ready).await {
            Ok(true) => child,
            other => panic!("test child {role}: no ready line ({other:?})"),
        }
    }

    /// In a test child: its role, once it has written its ready line. `None` in an ordinary test
    /// run, where the entry test does nothing.
    pub(crate) fn role() -> Option<String> {
        let role = std::env::var(ROLE).ok()?;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{READY}")
            .and_then(|()| stdout.flush())
            .expect("the parent test reads this child's stdout");
        Some(role)
    }

    /// Runs `future` on a new current-thread runtime: a test child's body.
    pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a test child can start a runtime")
            .block_on(future)
    }

    /// Awaits `future`, failing the test if it stalls.
    pub(crate) async fn step<F: Future>(what: &str, future: F) -> F::Output {
        tokio::time::timeout(STEP, future)
            .await
            .unwrap_or_else(|_| panic!("stalled for {STEP:?}: {what}"))
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    use serde::{Deserialize, Serialize};
    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;

    use super::test_child::{self, step};
    use super::{ChildProcess, Exit, Signal, ToParent, parent_link};

    const ENTRY: &str = "child::tests::child_entry";

    /// What the tests and their children say to each other.
    #[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
    enum Message {
        Ping(u32),
        Pong(u32),
        /// The child read the end of its stdin and is about to exit.
        Bye,
        /// The pid of a child's own child.
        Grandchild(u32),
    }

    /// Not a test: the body of the child processes the tests below start, by role.
    #[test]
    #[ignore = "runs only as a child process of this module's tests"]
    fn child_entry() {
        let Some(role) = test_child::role() else {
            return;
        };
        let code = test_child::block_on(async {
            match role.as_str() {
                "echo" => echo().await,
                "stubborn" => stubborn().await,
                "spawner" => spawner().await,
                "garbage" => {
                    let (_, mut to_parent) = parent_link().expect("the parent's pipes");
                    // A JSON string, but not a `Message`.
                    let sent = to_parent.send(&"not a message").await;
                    i32::from(sent.is_err())
                }
                "abort" => {
                    eprintln!("child: giving up on purpose");
                    std::process::abort()
                }
                "panic" => panic!("child: panicking on purpose"),
                other => panic!("no test child role {other:?}"),
            }
        });
        // Exit here, so the test harness adds nothing to stdout after the child's messages.
        std::process::exit(code)
    }

    /// Answers each `Ping(n)` with `Pong(n)`; says `Bye` and exits 0 at the end of stdin.
    async fn echo() -> i32 {
        let (mut from_parent, mut to_parent) = parent_link().expect("the parent's pipes");
        loop {
            let reply = match from_parent.next::<Message>().await {
                Ok(Some(Message::Ping(n))) => Message::Pong(n),
                Ok(None) => {
                    return i32::from(to_parent.send(&Message::Bye).await.is_err());
                }
                other => panic!("echo: unexpected {other:?}"),
            };
            if to_parent.send(&reply).await.is_err() {
                return 1;
            }
        }
    }

    /// Says it is up, then ignores its stdin and waits forever: only a signal ends it.
    async fn stubborn() -> i32 {
        let mut to_parent = ToParent::stdout().expect("the parent's stdout");
        to_parent
            .send(&Message::Pong(0))
            .await
            .expect("the parent reads");
        std::future::pending().await
    }

    /// Starts a stubborn child of its own, reports its pid, then waits for the end of stdin.
    async fn spawner() -> i32 {
        let (mut from_parent, mut to_parent) = parent_link().expect("the parent's pipes");
        let mut grandchild = test_child::spawn(ENTRY, "stubborn").await;
        let up = grandchild.recv::<Message>().await;
        assert_eq!(
            up.ok().flatten(),
            Some(Message::Pong(0)),
            "grandchild is up"
        );
        let pid = Message::Grandchild(grandchild.pid());
        to_parent.send(&pid).await.expect("the parent reads");
        let end = from_parent.next::<Message>().await;
        assert!(matches!(end, Ok(None)), "got {end:?}");
        0
    }

    async fn ping(child: &mut ChildProcess, n: u32) {
        child.send(&Message::Ping(n)).await.expect("send a ping");
        let answer = step("the pong", child.recv::<Message>()).await;
        assert_eq!(answer.expect("read a pong"), Some(Message::Pong(n)));
    }

    /// `kill(pid, 0)` fails with ESRCH: no process, not even a zombie, has this pid.
    fn is_gone(pid: u32) -> bool {
        let pid = libc::pid_t::try_from(pid).expect("pids fit in pid_t");
        // SAFETY: signal 0 only checks that the process exists.
        let result = unsafe { libc::kill(pid, 0) };
        result == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }

    fn signal_name(exit: &Exit) -> Option<&'static str> {
        exit.signal.map(|signal| signal.name)
    }

    /// `spawn` starts this very program again: here the test binary, which lists its tests.
    #[tokio::test]
    async fn spawn_starts_this_program_again() {
        let args = ["--list", "--exact", ENTRY, "--ignored"].map(String::from);
        let mut child = ChildProcess::spawn(&args).expect("start this program");
        let listed = step("the listing", child.stdout.next_line()).await;
        assert_eq!(
            listed.expect("read").as_deref(),
            Some("child::tests::child_entry: test")
        );
        let exit = step("exit", child.wait()).await.expect("waited");
        assert_eq!(exit.code, Some(0), "{exit}");
    }

    /// Messages go both ways as JSON lines.
    #[tokio::test]
    async fn messages_flow_both_ways() {
        let mut child = test_child::spawn(ENTRY, "echo").await;
        for n in 1..=3 {
            ping(&mut child, n).await;
        }
        let exit = step("close", child.close(Duration::from_secs(60))).await;
        assert_eq!(exit.expect("closed").code, Some(0));
    }

    /// The child sees the end of its stdin, can still say so, and exits by itself.
    #[tokio::test]
    async fn child_stops_at_the_end_of_its_stdin() {
        let mut child = test_child::spawn(ENTRY, "echo").await;
        ping(&mut child, 1).await;
        child.close_stdin();
        let last = step("bye", child.recv::<Message>()).await;
        assert_eq!(last.expect("read bye"), Some(Message::Bye));
        let end = step("end of stdout", child.recv::<Message>()).await;
        assert_eq!(end.expect("read the end"), None);
        let exit = step("exit", child.wait()).await.expect("waited");
        assert_eq!((exit.code, exit.signal), (Some(0), None), "{exit}");
        let send = child.send(&Message::Ping(2)).await;
        assert!(send.is_err(), "a closed stdin takes no more messages");
    }

    /// A child SIGKILLed mid-run is reported as such, and reaped.
    #[tokio::test]
    async fn sigkill_is_reported_and_reaped() {
        let mut child = test_child::spawn(ENTRY, "echo").await;
        ping(&mut child, 1).await;
        child.signal(Signal::Kill).expect("kill");
        let exit = step("exit", child.wait()).await.expect("waited");
        assert_eq!((exit.code, signal_name(&exit)), (None, Some("SIGKILL")));
        assert!(is_gone(child.pid()), "pid {} is reaped", child.pid());
        let again = child
            .signal(Signal::Kill)
            .expect_err("a reaped child is never signalled");
        assert_eq!(again.raw_os_error(), Some(libc::ESRCH));
        assert_eq!(step("wait again", child.wait()).await.ok(), Some(exit));
    }

    /// A stopped child answers nothing until continued, then carries on.
    #[tokio::test]
    async fn stopped_child_resumes_on_cont() {
        let mut child = test_child::spawn(ENTRY, "echo").await;
        child.signal(Signal::Stop).expect("stop");
        let pid = child.pid();
        step(
            "stopped",
            tokio::task::spawn_blocking(move || wait_stopped(pid)),
        )
        .await
        .expect("the waiter thread")
        .expect("the child stopped");
        child
            .send(&Message::Ping(7))
            .await
            .expect("a stopped child's pipe takes a line");
        child.signal(Signal::Cont).expect("cont");
        let answer = step("the pong", child.recv::<Message>()).await;
        assert_eq!(answer.expect("read a pong"), Some(Message::Pong(7)));
    }

    /// Blocks until child `pid` has stopped, leaving that news for any other waiter.
    fn wait_stopped(pid: u32) -> std::io::Result<()> {
        loop {
            // SAFETY: an all-zero siginfo_t is valid, and waitid only writes to it.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let flags = libc::WSTOPPED | libc::WNOWAIT;
            // SAFETY: `info` is valid and writable for the call.
            if unsafe { libc::waitid(libc::P_PID, pid, &mut info, flags) } == 0 {
                return Ok(());
            }
            let error = std::io::Error::last_os_error();
            if error.kind() != std::io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }

    /// `close` SIGKILLs a child that does not stop when its stdin ends, and reaps it.
    #[tokio::test]
    async fn close_kills_a_child_that_does_not_stop() {
        let mut child = test_child::spawn(ENTRY, "stubborn").await;
        let up = step("up", child.recv::<Message>()).await;
        assert_eq!(up.expect("read up"), Some(Message::Pong(0)));
        let pid = child.pid();
        let exit = step("close", child.close(Duration::from_millis(100))).await;
        assert_eq!(signal_name(&exit.expect("closed")), Some("SIGKILL"));
        assert!(is_gone(pid), "pid {pid} is reaped");
    }

    /// A child that aborts is reported with its signal and its last stderr line.
    #[tokio::test]
    async fn abort_is_reported_with_the_last_stderr_line() {
        let mut child = test_child::spawn(ENTRY, "abort").await;
        let exit = step("exit", child.wait()).await.expect("waited");
        assert_eq!(signal_name(&exit), Some("SIGABRT"), "{exit}");
        assert_eq!(
            exit.last_stderr.as_deref(),
            Some("child: giving up on purpose")
        );
    }

    /// A child that panics is reported with its exit code and its panic message.
    #[tokio::test]
    async fn panic_is_reported_with_its_message() {
        let mut child = test_child::spawn(ENTRY, "panic").await;
        let exit = step("exit", child.wait()).await.expect("waited");
        // 101: the test harness's code for a failed test, as for a panic in `main`.
        assert_eq!((exit.code, exit.signal), (Some(101), None), "{exit}");
        assert_eq!(
            exit.last_stderr.as_deref(),
            Some("child: panicking on purpose")
        );
    }

    /// A line that is not a message is an error that shows the line.
    #[tokio::test]
    async fn a_line_that_is_not_a_message_is_an_error() {
        let mut child = test_child::spawn(ENTRY, "garbage").await;
        let error = step("garbage", child.recv::<Message>())
            .await
            .expect_err("not a message");
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
        assert!(error.to_string().contains("\"not a message\""), "{error}");
    }

    /// Dropping a running child kills and reaps it before `drop` returns.
    #[tokio::test]
    async fn drop_kills_and_reaps() {
        let mut child = test_child::spawn(ENTRY, "echo").await;
        ping(&mut child, 1).await;
        let pid = child.pid();
        assert!(!is_gone(pid), "pid {pid} runs");
        drop(child);
        assert!(is_gone(pid), "pid {pid} is reaped");
    }

    /// A parent killed with SIGKILL takes its child down: the parent-death signal. The test
    /// starts A, A starts B (which ignores its stdin, so only a signal ends it), the test
    /// SIGKILLs A, waits for B's pidfd to say that B has ended, and reaps B to see how.
    #[tokio::test]
    async fn a_killed_parent_takes_its_child_down() {
        // Orphans go to their nearest "subreaper" ancestor, else to PID 1: with this, B comes
        // to this test process, which can then reap it and read how it ended.
        // SAFETY: prctl with integer arguments; this one only marks this process.
        let adopting = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) };
        assert_eq!(adopting, 0, "{}", std::io::Error::last_os_error());
        let mut parent = test_child::spawn(ENTRY, "spawner").await;
        let grandchild = match step("the grandchild's pid", parent.recv::<Message>()).await {
            Ok(Some(Message::Grandchild(pid))) => pid,
            other => panic!("expected the grandchild's pid, got {other:?}"),
        };
        let pidfd = pidfd(grandchild).expect("the grandchild runs");
        assert!(
            !has_ended(&pidfd),
            "the grandchild runs before its parent is killed"
        );
        parent.signal(Signal::Kill).expect("kill the parent");
        let exit = step("the parent's exit", parent.wait())
            .await
            .expect("waited");
        assert_eq!(signal_name(&exit), Some("SIGKILL"));
        // SAFETY: the `OwnedFd` keeps the pidfd open, and the same, for as long as it is polled.
        let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
            .expect("a pidfd can be polled");
        let ended = tokio::time::timeout(Duration::from_secs(60), pidfd.readable()).await;
        if ended.is_err() {
            // Not left behind: it would ignore its closed stdin forever.
            kill_by_pidfd(pidfd.get_ref());
            reap_by_pidfd(pidfd.get_ref());
            panic!("the grandchild {grandchild} outlived its SIGKILLed parent");
        }
        let (how, status) = reap_by_pidfd(pidfd.get_ref());
        assert_eq!(
            (how, status),
            (libc::CLD_KILLED, libc::SIGKILL),
            "how B ended"
        );
    }

    fn kill_by_pidfd(pidfd: &OwnedFd) {
        let no_info: *const libc::siginfo_t = std::ptr::null();
        // SAFETY: a valid pidfd, a signal number, no siginfo and no flags.
        let sent = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.as_raw_fd(),
                libc::SIGKILL,
                no_info,
                0,
            )
        };
        assert_eq!(
            sent,
            0,
            "pidfd_send_signal: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Reaps the (adopted) child of `pidfd`: how it ended (`CLD_*`) and its signal or code.
    fn reap_by_pidfd(pidfd: &OwnedFd) -> (i32, i32) {
        // SAFETY: an all-zero siginfo_t is valid, and waitid only writes to it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let fd = libc::id_t::try_from(pidfd.as_raw_fd()).expect("an open fd is not negative");
        // SAFETY: `info` is valid and writable for the call.
        let reaped = unsafe { libc::waitid(libc::P_PIDFD, fd, &mut info, libc::WEXITED) };
        assert_eq!(reaped, 0, "waitid: {}", std::io::Error::last_os_error());
        // SAFETY: waitid filled `info` in for a child that ended.
        (info.si_code, unsafe { info.si_status() })
    }

    /// A pidfd for `pid`: readable once that process has ended, whoever its parent is. Opened
    /// while the process runs, it can never refer to another process.
    fn pidfd(pid: u32) -> std::io::Result<OwnedFd> {
        let pid = libc::pid_t::try_from(pid).expect("pids fit in pid_t");
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd, or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = i32::try_from(fd).expect("file descriptors fit in i32");
        // SAFETY: `fd` is a new file descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Whether a pidfd says its process has ended, without waiting.
    fn has_ended(pidfd: &OwnedFd) -> bool {
        let mut poll = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, and a zero timeout.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        assert!(ready >= 0, "poll: {}", std::io::Error::last_os_error());
        ready == 1
    }
}
