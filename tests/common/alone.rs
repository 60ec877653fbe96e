//! A test alone in a process of its own: for a test that counts or changes what belongs to the
//! whole process (its descriptors, its threads, its children, its address space), so that no
//! other test's come and go while it looks. The scenarios stay one crate, linked once, and such
//! a test still runs beside the others, only in its own process: this test binary started
//! again, running that one test and nothing else.

use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::webdriver::die_with_parent;

/// The environment variable naming the test a child process is to run.
const ALONE: &str = "ISOLATION_LAB_ALONE";
/// Fails a child that stalls. Generous: the machine may be busy building.
const LIMIT: Duration = Duration::from_secs(120);

/// Call first in a test that must be alone in its process. In the test run, it starts this
/// test binary again to run only this test, waits for it, fails the test with the child's
/// output if the child failed, and returns `true`: the test then returns. In that child it
/// returns `false`, and the test's body runs.
///
/// The test is named by its thread: libtest runs each test on a thread named after it.
pub fn alone() -> bool {
    let thread = std::thread::current();
    let test = thread
        .name()
        .expect("libtest names a test's thread after the test");
    if std::env::var(ALONE).is_ok_and(|name| name == test) {
        return false;
    }
    let program = std::env::current_exe().expect("a test binary has a path");
    let mut command = Command::new(program);
    command
        // `--include-ignored`: a test run by hand with `--ignored` runs in its child too.
        // `--nocapture`: what the test writes to stderr is passed on below, where this
        // process's harness captures it or shows it as it would the test's own.
        .args(["--exact", test, "--include-ignored", "--nocapture"])
        .args(["--test-threads=1"])
        .env(ALONE, test)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // This thread waits below until the child has ended, so the child dies with it.
    die_with_parent(&mut command);
    let child = command.spawn().expect("the test binary starts again");
    let pid = child.id();
    // The output is read to its end on a thread of its own, so a child that stalls is killed
    // after LIMIT rather than holding the run up.
    let (done, ended) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let ran = ended.recv_timeout(LIMIT).unwrap_or_else(|_| {
        // SAFETY: kill takes plain integers; the child is not yet reaped (the reader waits on
        // it), so its pid is still its own.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        ended.recv().expect("the reader reaps the child")
    });
    reader.join().expect("the reader ends");
    let ran = ran.expect("the child's output is read");
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    eprint!("{stderr}");
    assert!(
        ran.status.success() && stdout.contains("1 passed"),
        "{test}, alone in its own process: {}\n{stdout}",
        ran.status,
    );
    true
}
