//! A test alone in a process of its own: for a test that counts or changes what belongs to the
//! whole process (its descriptors, its threads, its children, its address space), so that no
//! other test's come and go while it looks. Such a test still runs beside the others, only in
//! its own process: this test binary started again, running that one test and nothing else.
//! One file for both test binaries: the scenarios' (`tests/common`) and the unit tests'
//! (`child::test_child`), each giving it its own `die_with_parent`.

use std::io::{BufRead, BufReader, Read};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::die_with_parent;

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
pub(crate) fn alone() -> bool {
    alone_beside(|_, _, _| {})
}

/// [`alone`], with `beside` run in this process while the child runs, before it is waited for:
/// it is given the child's pid, the lines the child writes to stderr as they come (the lines
/// end when the child's stderr does), and the child's stdin, closed when `beside` drops it.
pub(crate) fn alone_beside(beside: impl FnOnce(u32, &mpsc::Receiver<String>, ChildStdin)) -> bool {
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
        // process's harness captures it or shows it as it would the test's own (what it prints
        // to stdout is shown only if it fails, beside the child harness's own lines).
        .args(["--exact", test, "--include-ignored", "--nocapture"])
        .args(["--test-threads=1"])
        .env(ALONE, test)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // This thread waits below until the child has ended, so the child dies with it.
    die_with_parent(&mut command);
    let mut child = command.spawn().expect("the test binary starts again");
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    // Each pipe is read to its end on a thread of its own; both ends mean the child has gone.
    // One that stalls is killed after LIMIT rather than holding the run up: it is still this
    // thread's unreaped child then, so the signal cannot reach another process.
    let (done, ended) = mpsc::channel();
    let (said, lines) = mpsc::channel();
    let (stdout, stderr) = (
        read(stdout, done.clone(), None),
        read(stderr, done, Some(said)),
    );
    let deadline = Instant::now() + LIMIT;
    if let Some(stdin) = child.stdin.take() {
        beside(child.id(), &lines, stdin);
    }
    let both = (0..2).all(|_| ended.recv_timeout(deadline - Instant::now()).is_ok());
    if !both {
        let _ = child.kill();
    }
    let status = child.wait().expect("the child is reaped");
    let stdout = stdout.join().expect("the stdout reader ends");
    let stderr = stderr.join().expect("the stderr reader ends");
    // What the test wrote, for this process's harness to capture or show as the test's own.
    eprint!("{stderr}");
    let killed = if both {
        String::new()
    } else {
        format!(" (killed after {LIMIT:?})")
    };
    assert!(
        status.success() && stdout.contains("test result: ok. 1 passed;"),
        "{test}, alone in its own process: {status}{killed}\n{stdout}"
    );
    true
}

/// Reads `pipe` to its end on a thread of its own, sending each line on `lines` if given as it
/// comes, then says so on `done`.
fn read<R: Read + Send + 'static>(
    pipe: Option<R>,
    done: mpsc::Sender<()>,
    lines: Option<mpsc::Sender<String>>,
) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(pipe) = pipe {
            let mut pipe = BufReader::new(pipe);
            let mut line = Vec::new();
            while pipe.read_until(b'\n', &mut line).is_ok_and(|read| read > 0) {
                let said = String::from_utf8_lossy(&line);
                if let Some(lines) = &lines {
                    let _ = lines.send(said.clone().into_owned());
                }
                text.push_str(&said);
                line.clear();
            }
        }
        let _ = done.send(());
        text
    })
}
