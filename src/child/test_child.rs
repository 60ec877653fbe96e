//! Test children: this test binary started again, running one test as a child process: an
//! ignored entry test in a role the parent gives it ([`spawn`]), or a test alone ([`alone`]).

use std::future::Future;
use std::io::Write;
use std::process::Command;
use std::time::Duration;

use super::ChildProcess;
use super::reaper::die_with_parent;

/// The environment variable that gives a test child its role.
const ROLE: &str = "ISOLATION_LAB_TEST_CHILD_ROLE";
/// A test child writes this line first: everything before it on stdout is the test
/// harness's, such as "running 1 test".
const READY: &str = "isolation-lab test child ready";
/// Fails a stalled step. Generous: the machine may be busy building.
const STEP: Duration = Duration::from_secs(60);

/// This test binary again, to run only the test `entry` in `role`.
fn this_test_binary(entry: &str, role: &str) -> Command {
    let program = std::env::current_exe().expect("a test binary has a path");
    let mut command = Command::new(program);
    command
        // One test thread: then the harness never prints "has been running for over 60
        // seconds", which would end a long-lived child whose stdout is closed.
        .args(["--exact", entry, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        // So that a panic's last stderr line is its message, not a backtrace.
        .env_remove("RUST_BACKTRACE");
    command
}

/// Starts this test binary again, running only the ignored test `entry` (its full path,
/// such as `child::tests::child_entry`) with `role`, and reads up to its ready line.
pub(crate) async fn spawn(entry: &str, role: &str) -> ChildProcess {
    let mut command = this_test_binary(entry, role);
    command.arg("--ignored");
    let mut child = ChildProcess::spawn_command(command).expect("the test child starts");
    let ready = async {
        while let Some(line) = child.next_line().await? {
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

/// Runs the calling test alone, in this test binary started again: the scenarios' own
/// `alone`, one file for both test binaries.
#[path = "../../tests/common/alone.rs"]
mod alone_in_process;
pub(crate) use alone_in_process::alone;
