//! The child process seam, with real child processes: this test binary, started again.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::link::FromParent;
use super::process::ExitSignal;
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
    /// How a child's own child ended: its exit code, or why waiting for it failed.
    Exited(Result<Option<i32>, String>),
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
            "sigchld_ignored" => sigchld_ignored().await,
            "flood" => flood().await,
            "shout" => {
                // 8 MiB on stderr, with no end of line.
                let shout = vec![b'y'; 8 << 20];
                let written = std::io::Write::write_all(&mut std::io::stderr(), &shout);
                i32::from(written.is_err())
            }
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
    let mut from_parent = FromParent::stdin().expect("the parent's stdin");
    let mut to_parent = ToParent::stdout().expect("the parent's stdout");
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

/// Inherits SIGCHLD ignored (as from a parent that ignored it: the disposition survives
/// exec), starts an echo child of its own, closes it and reports how it ended.
async fn sigchld_ignored() -> i32 {
    // SAFETY: sets one signal's disposition; no handler runs.
    let ignored = unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    assert_ne!(
        ignored,
        libc::SIG_ERR,
        "{}",
        std::io::Error::last_os_error()
    );
    let mut to_parent = ToParent::stdout().expect("the parent's stdout");
    let grandchild = test_child::spawn(ENTRY, "echo").await;
    let exit = step("close", grandchild.close(Duration::from_secs(60))).await;
    let exited = Message::Exited(exit.map(|exit| exit.code).map_err(|e| e.to_string()));
    i32::from(to_parent.send(&exited).await.is_err())
}

/// Writes bytes that never end a line until the parent stops reading.
async fn flood() -> i32 {
    let mut stdout = ToParent::stdout().expect("the parent's stdout");
    let chunk = vec![b'x'; 1 << 20];
    while stdout.send_raw(&chunk).await.is_ok() {}
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
    exit.signal.map(|ExitSignal { name, .. }| name)
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
    assert!(!exit.killed_by_lab, "killed by the test, not by a close");
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
    let exit = exit.expect("closed");
    assert_eq!(signal_name(&exit), Some("SIGKILL"));
    assert!(exit.killed_by_lab, "{exit:?}");
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

/// A child that writes without ever ending a line is refused once the line passes
/// [`MAX_LINE`](super::MAX_LINE), rather than buffered for as long as it keeps writing.
#[tokio::test]
async fn an_endless_line_is_an_error_not_a_buffer() {
    let mut child = test_child::spawn(ENTRY, "flood").await;
    let error = step("the endless line", child.recv::<Message>())
        .await
        .expect_err("too long");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    assert!(error.to_string().contains("longer than"), "{error}");
    // It blocks writing the rest, so only the kill after the grace ends it.
    let exit = step("close", child.close(Duration::from_millis(100))).await;
    assert_eq!(signal_name(&exit.expect("closed")), Some("SIGKILL"));
}

/// Lines end at `\n` or `\r\n`; a last line without either still counts; a line of exactly
/// `MAX_LINE` bytes is read, one byte more is refused.
#[tokio::test]
async fn lines_are_read_as_they_end_and_bounded() {
    let mut lines = super::JsonLines::new(&b"1\r\n2\n\n3"[..]);
    for expected in ["1", "2", "", "3"] {
        let line = lines.next_line().await.expect("a line");
        assert_eq!(line.as_deref(), Some(expected));
    }
    assert_eq!(lines.next_line().await.expect("the end"), None);
    let mut longest = vec![b'7'; super::MAX_LINE];
    longest.push(b'\n');
    let mut lines = super::JsonLines::new(&longest[..]);
    let line = lines.next_line().await.expect("the longest line");
    assert_eq!(line.map(|line| line.len()), Some(super::MAX_LINE));
    longest.insert(0, b'7');
    let mut lines = super::JsonLines::new(&longest[..]);
    let error = lines.next_line().await.expect_err("one byte too long");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
}

/// A child's stderr line is kept only up to a bound, however long it runs.
#[tokio::test]
async fn a_long_stderr_line_is_kept_in_part() {
    let mut child = test_child::spawn(ENTRY, "shout").await;
    let exit = step("exit", child.wait()).await.expect("waited");
    assert_eq!(exit.code, Some(0));
    let last = exit.last_stderr.expect("its line");
    assert!(last.len() <= 4_096, "{} bytes kept", last.len());
    assert!(last.starts_with("yyyy"), "{last:.20}");
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

/// A lab started with SIGCHLD ignored still waits for its children and learns how they
/// ended: an ignored SIGCHLD would have the kernel reap them at once, so that waiting fails
/// (`ECHILD`) and a child's pid may be reused while the lab still means to signal it.
#[tokio::test]
async fn children_are_reaped_by_the_lab_even_if_sigchld_was_ignored() {
    let mut child = test_child::spawn(ENTRY, "sigchld_ignored").await;
    let exited = step("the grandchild's exit", child.recv::<Message>()).await;
    assert_eq!(exited.expect("read"), Some(Message::Exited(Ok(Some(0)))));
    let exit = step("exit", child.wait()).await.expect("waited");
    assert_eq!(exit.code, Some(0), "{exit}");
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
