//! Ctrl-C for a session that must close cleanly (a classroom, a replicas run, a hold): SIGINT,
//! SIGTERM, SIGHUP (the terminal closed) and every other signal sent to end a program (see
//! [`SIGNALS`]) are caught while such a session runs; anywhere else in the binary, they end it
//! at once in one line ([`last_words`]). A session's handler writes the signal's number, one
//! byte, to a pipe — about all a signal handler may safely do — and the session awaits the
//! pipe's other end, and says which signal ended it. SIGCONT is counted too (one atomic add),
//! as a session that was stopped and continued has timed the stop.
//!
//! Tokio's `signal` feature does the same, but it opens its socket pair in the first runtime of
//! every process of the binary, whatever the command, and panics if it cannot, as it cannot
//! in a process at its descriptor limit
//! (`tests/lab/limits.rs`); this opens a pipe only here, says so when it cannot, and puts the
//! previous handlers back when it is done.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use tokio::net::unix::pipe;

use crate::child::{note_continued, signal_name, times_continued};

/// The write end of the pipe the handler wakes the session through; -1 when none.
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// How many handler calls are between reading [`WAKE`] and their write: the pipe is closed only
/// when none is, so a handler never writes to a descriptor that has since been closed and
/// opened again for something else.
static WRITING: AtomicUsize = AtomicUsize::new(0);

/// The process that catches: [`WAKE`] is its pipe.
static OWNER: AtomicI32 = AtomicI32::new(0);

/// The signals whose default action ends a process and which are sent to end one: by a terminal
/// (SIGINT at Ctrl-C, SIGQUIT at Ctrl-\\, SIGHUP when it closes), by `kill` and the tools that
/// stop programs, or by a stray timer or request meant for another program (SIGIO for I/O a
/// program asked to hear of; SIGSTKFLT, which Linux itself no longer sends). Not SIGKILL, which
/// cannot be caught; not the faults a process raises on itself (SIGSEGV, SIGABRT, ...); not
/// SIGPIPE, which Rust ignores; not SIGXCPU, SIGPROF and SIGXFSZ, which belong to the limits
/// (`cli::stop_before_the_cpu_time_limit` catches the first two, the CPU time limit's signal and
/// its own timer's just before it; `cli::fail_writes_past_the_file_size_limit` the third).
const SIGNALS: [libc::c_int; 11] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGVTALRM,
    libc::SIGPWR,
    libc::SIGIO,
    libc::SIGSTKFLT,
];

extern "C" fn caught(signal: libc::c_int) {
    // A child forked but not yet running its own program (a front, a replica) has this handler
    // and the pipe too: a signal sent to it is its own, not the session's, so it takes the
    // default action there (the child ends by it, as it would a moment later) rather than wake
    // the session as if Ctrl-C had been pressed.
    // SAFETY: getpid(2), signal(2) and raise(3) are async-signal-safe. Raised in its own
    // handler, the signal is blocked until the handler returns, then acts by default.
    if unsafe { libc::getpid() } != OWNER.load(Ordering::SeqCst) {
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
        return;
    }
    WRITING.fetch_add(1, Ordering::SeqCst);
    let fd = WAKE.load(Ordering::SeqCst);
    if fd >= 0 {
        // Every signal's number is below 65 on Linux: one byte holds it.
        let number = signal as u8;
        // SAFETY: write(2) is async-signal-safe and the byte is on this stack; errno is saved
        // and put back, so the interrupted code never sees the handler's. A full pipe (the
        // session has been woken already) is fine: the write fails and nothing waits on it.
        unsafe {
            let errno = *libc::__errno_location();
            libc::write(fd, (&raw const number).cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
    WRITING.fetch_sub(1, Ordering::SeqCst);
}

/// [`SIGNALS`], caught until this is dropped; and SIGCONT, counted (`child::note_continued`),
/// so that a wait can tell the lab's own stop from a child's stall.
pub(crate) struct Interrupts {
    read: pipe::Receiver,
    /// The first signal read from the pipe.
    first: std::sync::OnceLock<libc::c_int>,
    /// How many times the process had been continued when catching began.
    continued_before: u64,
    /// Closed on drop, after the previous handlers are back.
    _write: OwnedFd,
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

impl Interrupts {
    /// Starts catching; must be called on a Tokio runtime. Only one session catches at a time.
    pub(crate) fn catch() -> io::Result<Self> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just opened and nothing else owns them.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let read = pipe::Receiver::from_owned_fd(read)?;
        if WAKE
            .compare_exchange(-1, write.as_raw_fd(), Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Err(io::Error::other("another session already catches Ctrl-C"));
        }
        // SAFETY: getpid(2) cannot fail.
        OWNER.store(unsafe { libc::getpid() }, Ordering::SeqCst);
        let mut interrupts = Interrupts {
            read,
            first: std::sync::OnceLock::new(),
            continued_before: times_continued(),
            _write: write,
            previous: Vec::new(),
        };
        let handlers = SIGNALS.map(|signal| (signal, caught as extern "C" fn(libc::c_int)));
        let continuing = (libc::SIGCONT, note_continued as extern "C" fn(libc::c_int));
        for (signal, handler) in handlers.into_iter().chain([continuing]) {
            // SAFETY: the handlers only write to the pipe or add to an atomic (see `caught`,
            // `note_continued`). On an error, dropping `interrupts` puts back what was
            // replaced so far.
            if let Some(previous) = unsafe { install(signal, handler)? } {
                interrupts.previous.push((signal, previous));
            }
        }
        Ok(interrupts)
    }

    /// Waits until one of [`SIGNALS`] arrives (or has arrived since catching began), and says
    /// which came first: "SIGINT", "SIGTERM" (not how it was sent: a `kill -INT` is not a
    /// Ctrl-C). Cancel-safe, and the same again if called again.
    pub(crate) async fn caught(&self) -> String {
        loop {
            if let Some(&number) = self.first.get() {
                return signal_name(number).to_owned();
            }
            // An error here would mean the pipe broke: nothing could wake the session then, so
            // it is taken as the signal to leave.
            if self.read.readable().await.is_err() {
                return "a signal".into();
            }
            let mut number = [0u8];
            match self.read.try_read(&mut number) {
                Ok(1) => {
                    let _ = self.first.set(libc::c_int::from(number[0]));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                _ => return "a signal".into(),
            }
        }
    }

    /// Whether the process was continued (SIGCONT) since catching began: as after a stop, or
    /// a `kill -CONT` alone, which cannot be told apart.
    pub(crate) fn continued(&self) -> bool {
        times_continued() != self.continued_before
    }
}

impl Drop for Interrupts {
    /// Puts the previous handlers back: in the binary, [`last_words`].
    fn drop(&mut self) {
        for (signal, previous) in &self.previous {
            // SAFETY: `previous` is the action sigaction returned for this signal.
            unsafe {
                libc::sigaction(*signal, previous, std::ptr::null_mut());
            }
        }
        // From here no new handler call can start, and one that starts on another thread now
        // reads -1. One that read the descriptor before is waited for: its write takes
        // microseconds (on this thread, it ran to its end before this went on). The pipe
        // closes after this.
        WAKE.store(-1, Ordering::SeqCst);
        while WRITING.load(Ordering::SeqCst) != 0 {
            std::hint::spin_loop();
        }
    }
}

/// The process [`last_words`] speaks for.
static SPEAKER: AtomicI32 = AtomicI32::new(0);

/// Whether a last word is being said: the first signal says it, and any other waits for the
/// exit, so two signals at once still make one line.
static SPEAKING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What the lab says when one of [`SIGNALS`] ends it outside a session, around the signal's
/// name ([`signal_name`]).
const LAST_WORDS: [&str; 2] = [
    "isolation-lab: interrupted by ",
    ": stopped at once, its report unwritten or cut short\n",
];

extern "C" fn last_word(signal: libc::c_int) {
    // SAFETY: getpid(2), signal(2), raise(3), write(2) and _exit(2) are async-signal-safe; the
    // line is put together from static words on the stack, allocating nothing, and written at
    // once, so that it stays one line. A forked child's signal is its own, as in `caught`.
    unsafe {
        if libc::getpid() != SPEAKER.load(Ordering::SeqCst) {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
            return;
        }
        if SPEAKING.swap(true, Ordering::SeqCst) {
            // pause(2) is async-signal-safe: the first speaker's _exit ends this thread too.
            loop {
                libc::pause();
            }
        }
        let [before, after] = LAST_WORDS;
        let mut line = [0u8; 128];
        let mut length = 0;
        for words in [before, signal_name(signal), after] {
            let end = (length + words.len()).min(line.len());
            line[length..end].copy_from_slice(&words.as_bytes()[..end - length]);
            length = end;
        }
        libc::write(libc::STDERR_FILENO, line.as_ptr().cast(), length);
        libc::_exit(1)
    }
}

/// For the binary, outside a session's own catching: one of [`SIGNALS`] ends the lab at once
/// with one line naming it, exit 1, rather than without a word by its default action — a
/// default run halfway, or the report being written after a session has closed (its children
/// reaped: nothing is left to close). A signal ignored when the lab started stays ignored. A
/// session's [`Interrupts`] catches over this, and puts it back when done. SIGCONT is counted,
/// as a session counts it. Not for a front's child, whose end by a signal is that front's
/// evidence.
pub(crate) fn last_words() {
    // SAFETY: getpid(2) cannot fail.
    SPEAKER.store(unsafe { libc::getpid() }, Ordering::SeqCst);
    for signal in SIGNALS {
        // SAFETY: the handler writes a static line and exits (see `last_word`). A signal that
        // cannot be set keeps its default action: the lab ends by it, as it did before.
        let _ = unsafe { install(signal, last_word) };
    }
    // Counted, not caught: a run's waits tell a stop of the lab's (Ctrl-Z, then fg) from a
    // stall (`child::awake_within`). SAFETY: the handler adds to an atomic (`note_continued`).
    let _ = unsafe { install(libc::SIGCONT, note_continued) };
}

/// Sets `handler` for `signal`, with [`SIGNALS`] blocked while it runs (so one handler of
/// theirs runs at a time on a thread), and returns the disposition it replaced. A signal
/// ignored when the lab started stays ignored, as `nohup` (SIGHUP) and a shell's background
/// job (SIGINT, SIGQUIT) asked: `None`, and nothing set. Not SIGCONT: ignoring it never stops
/// a continue. Counting it runs a handler at each continue, on one thread: a wait there in
/// `epoll_wait`, `poll` or a sleep returns early (EINTR), and each of the lab's retries.
///
/// # Safety
///
/// `handler` must make only async-signal-safe calls.
unsafe fn install(
    signal: libc::c_int,
    handler: extern "C" fn(libc::c_int),
) -> io::Result<Option<libc::sigaction>> {
    // SAFETY: zeroed sigactions are valid values to fill in; sigaction(2) reads `action` and
    // writes `previous`; the handler is async-signal-safe, as the caller promised.
    unsafe {
        let mut previous: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, std::ptr::null(), &mut previous) != 0 {
            return Err(io::Error::last_os_error());
        }
        if previous.sa_sigaction == libc::SIG_IGN && signal != libc::SIGCONT {
            return Ok(None);
        }
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        for other in SIGNALS {
            libc::sigaddset(&mut action.sa_mask, other);
        }
        if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Some(previous))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `true` in the test run, once the calling test has run alone in a process of its own (as
    /// the signals it raises are the whole process's): the test then returns. In that process,
    /// `false`, with every signal back to its default ([`defaults`]).
    fn elsewhere() -> bool {
        if crate::child::test_child::alone() {
            return true;
        }
        defaults();
        false
    }

    /// Every signal [`SIGNALS`] names back to its default, as a test child may inherit one
    /// ignored (`nohup`, a background job), which catching then leaves ignored.
    fn defaults() {
        for signal in SIGNALS {
            // SAFETY: signal(2) changes only the disposition of a valid signal.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    }

    /// Each signal sent to end the lab wakes the session, which names the first: the same
    /// however often it asks, and after another signal. Alone in its process, as the signals
    /// it raises are the whole process's.
    #[tokio::test]
    async fn each_signal_is_caught_and_named() {
        if elsewhere() {
            return;
        }
        let names = [
            "SIGINT",
            "SIGTERM",
            "SIGHUP",
            "SIGQUIT",
            "SIGUSR1",
            "SIGUSR2",
            "SIGALRM",
            "SIGVTALRM",
            "SIGPWR",
            "SIGIO",
            "SIGSTKFLT",
        ];
        assert_eq!(names.len(), SIGNALS.len());
        for (signal, name) in SIGNALS.into_iter().zip(names) {
            defaults();
            let interrupts = Interrupts::catch().expect("catching");
            // SAFETY (here and below): raise(3) has no memory effects; the signal is caught (its
            // handler writes one byte to the pipe).
            assert_eq!(unsafe { libc::raise(signal) }, 0);
            assert_eq!(interrupts.caught().await, name);
            assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
            assert_eq!(interrupts.caught().await, name, "the first, again");
            drop(interrupts);
        }
        defaults();
        let interrupts = Interrupts::catch().expect("catching");
        assert_eq!(unsafe { libc::raise(libc::SIGINT) }, 0);
        assert_eq!(interrupts.caught().await, "SIGINT");
    }

    /// SIGCONT is noted, not taken as a signal to end: the session goes on, and can say that
    /// what it timed may count a stop. Alone in its process, as above.
    #[tokio::test]
    async fn a_continue_is_noted_and_ends_nothing() {
        if elsewhere() {
            return;
        }
        let interrupts = Interrupts::catch().expect("catching");
        assert!(!interrupts.continued());
        // SAFETY (here and below): raise(3) has no memory effects; both signals are caught.
        assert_eq!(unsafe { libc::raise(libc::SIGCONT) }, 0);
        assert!(interrupts.continued());
        // The first signal the session reads is the next one: SIGCONT wrote nothing.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
        assert_eq!(interrupts.caught().await, "SIGUSR2");
        drop(interrupts);
        let again = Interrupts::catch().expect("catching again");
        assert!(!again.continued(), "a new session starts without it");
    }

    /// A signal ignored when catching begins (`nohup`'s SIGHUP) stays ignored, and wakes
    /// nothing; the others are caught beside it. Alone in its process, as above.
    #[tokio::test]
    async fn an_ignored_signal_stays_ignored() {
        if elsewhere() {
            return;
        }
        // SAFETY (here and below): signal(2) and raise(3) have no memory effects; SIGHUP is
        // ignored, SIGTERM caught.
        unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
        let interrupts = Interrupts::catch().expect("catching");
        assert_eq!(unsafe { libc::raise(libc::SIGHUP) }, 0);
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        assert_eq!(interrupts.caught().await, "SIGTERM");
        drop(interrupts);
        let still = unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
        assert_eq!(still, libc::SIG_IGN, "ignored after catching ends");
    }

    /// SIGINT sent to a child forked while a session catches, before the child runs another
    /// program, ends the child and does not wake the session.
    #[tokio::test]
    async fn a_forked_childs_signal_is_its_own() {
        if elsewhere() {
            return;
        }
        let interrupts = Interrupts::catch().expect("catching");
        // SAFETY: the child calls only raise(3) and _exit(2), both async-signal-safe, so
        // forking a process with other threads is sound here.
        let child = unsafe { libc::fork() };
        if child == 0 {
            unsafe {
                libc::raise(libc::SIGINT);
                libc::_exit(0);
            }
        }
        assert!(child > 0, "fork: {}", io::Error::last_os_error());
        let mut status = 0;
        // SAFETY: `status` is ours to write; the child is ours to reap.
        let reaped = unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(reaped, child);
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGINT,
            "the child ended by SIGINT: status {status:#x}"
        );
        // The pipe is read directly: a byte written by the child's handler would be there now.
        let mut byte = 0u8;
        // SAFETY: the descriptor is the pipe's read end, open while `interrupts` lives, and
        // `byte` has room for the one byte asked for.
        let read = unsafe { libc::read(interrupts.read.as_raw_fd(), (&raw mut byte).cast(), 1) };
        let error = io::Error::last_os_error();
        assert_eq!(
            (read, error.kind()),
            (-1, io::ErrorKind::WouldBlock),
            "nothing woke the session"
        );
    }
}
