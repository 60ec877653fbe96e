//! The thread that forks the child, waits for it to end and reaps it.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use tokio::sync::oneshot;

use super::{Signal, lock};

/// Asks the kernel to SIGKILL the child when its parent goes. On Linux the "parent" is the
/// thread that forked it, not the process: that is why [`Reaper`] forks from its own thread,
/// which lives exactly as long as the child is unreaped, whatever thread owns the
/// [`ChildProcess`](super::ChildProcess) or later drops it.
#[cfg(target_os = "linux")]
pub(super) fn die_with_parent(command: &mut Command) {
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
pub(super) fn die_with_parent(_command: &mut Command) {}

/// The thread that forks the child, waits for it to end, and reaps it: so the child's
/// parent-death signal follows this thread (see [`die_with_parent`]), and the child is reaped
/// promptly whatever the runtime does. Dropping it SIGKILLs the child and joins the thread.
#[derive(Debug)]
pub(crate) struct Reaper {
    pub(crate) pid: u32,
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
    /// Starts `command` on the reaper thread, with SIGKILL as its parent-death signal (see
    /// [`die_with_parent`]), in a process group of its own: a Ctrl-C at the terminal reaches
    /// the lab alone, which stops its children in order (`hold` ends the measurement and reaps
    /// its front, `replicas` stops every replica and its private Redis in turn),
    /// rather than killing each at once as if it had failed. The command is dropped there once
    /// the child is started: its stdio (the child's ends of any pipes) then closes in this
    /// process.
    pub(crate) fn start(mut command: Command) -> io::Result<Reaper> {
        keep_children_waitable()?;
        die_with_parent(&mut command);
        command.process_group(0);
        let (started, start) = mpsc::sync_channel(1);
        let (report_exit, exited) = oneshot::channel();
        let reaped = Arc::new(Mutex::new(false));
        let reaping = reaped.clone();
        let thread = crate::limits::spawn_thread("lab-child-reaper", move || {
            let spawned = command.spawn();
            drop(command);
            let mut child = match spawned {
                Ok(child) => child,
                Err(e) => {
                    let _ = started.send(Err(e));
                    return;
                }
            };
            // The spawner waits for this message; if it is gone, so is the child's stdin,
            // and the child stops by itself.
            let _ = started.send(Ok(child.id()));
            let status = reap(&mut child, &reaping);
            // The owner may have gone without waiting: then nobody needs the status.
            let _ = report_exit.send(status);
        })?;
        let pid = match start.recv() {
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
        Ok(Reaper {
            pid,
            reaped,
            exited,
            status: None,
            thread: Some(thread),
        })
    }

    /// Sends `signal` to the child; `ESRCH` once it is reaped.
    pub(crate) fn signal(&self, signal: Signal) -> io::Result<()> {
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

    /// Waits until the child has ended and is reaped; the same status again if called again.
    /// Cancel-safe.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
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

/// Makes sure this process's children stay waitable. A SIGCHLD that is ignored, or handled
/// with `SA_NOCLDWAIT`, has the kernel reap each child as it exits: waiting for it then fails
/// (`ECHILD`), and its pid may be reused while [`Reaper::signal`] still takes it for the
/// child's. An ignored disposition survives `exec`, so the lab inherits one from a parent that
/// ignored SIGCHLD: it is put back to the default (which discards the signal but keeps the
/// zombie for its parent to reap). A handler, if one is installed, is kept.
fn keep_children_waitable() -> io::Result<()> {
    // SAFETY: an all-zero sigaction is a valid value, and sigaction only writes to it.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reads SIGCHLD's disposition into `action`, which is valid and writable.
    if unsafe { libc::sigaction(libc::SIGCHLD, std::ptr::null(), &mut action) } == -1 {
        return Err(io::Error::last_os_error());
    }
    let ignored = action.sa_sigaction == libc::SIG_IGN;
    if !ignored && action.sa_flags & libc::SA_NOCLDWAIT == 0 {
        return Ok(());
    }
    if ignored {
        action.sa_sigaction = libc::SIG_DFL;
    }
    action.sa_flags &= !libc::SA_NOCLDWAIT;
    // SAFETY: `action` is the disposition just read, with its handler and mask kept.
    if unsafe { libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut()) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
