//! The binary under resource limits set from outside (on its process before it runs, as
//! `prlimit` sets them): with too few descriptors, too little address space or too little
//! private memory, a run on either front still ends — correctly, or with exit status 1 and one
//! line on stderr — and never hangs.
//! Stopping a server must not need a new socket, descriptor or thread, since the run may be
//! failing for want of exactly those.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::common::{limited, standard_descriptors_only};

/// A limit a run is started under, set on its process as `prlimit` sets it.
#[derive(Clone, Copy, Debug)]
enum Limit {
    /// At most this many open descriptors.
    Descriptors(u64),
    /// At most this many bytes of address space.
    AddressSpace(u64),
    /// At most this many bytes of private writable memory (`ulimit -d`): the heap, and every
    /// thread's stack.
    Data(u64),
}

impl Limit {
    /// A limit on memory (address space or private memory), not descriptors.
    fn is_memory(self) -> bool {
        !matches!(self, Limit::Descriptors(_))
    }

    /// Sets this limit, soft and hard, on `command`'s child.
    fn on(self, command: &mut Command) -> &mut Command {
        match self {
            Limit::Descriptors(n) => limited(command, libc::RLIMIT_NOFILE, n),
            Limit::AddressSpace(bytes) => limited(command, libc::RLIMIT_AS, bytes),
            Limit::Data(bytes) => limited(command, libc::RLIMIT_DATA, bytes),
        }
    }
}

/// As `prlimit`'s option for it, so a failure names the command that repeats it.
impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Descriptors(n) => write!(f, "--nofile={n}:{n}"),
            Limit::AddressSpace(bytes) => write!(f, "--as={bytes}"),
            Limit::Data(bytes) => write!(f, "--data={bytes}"),
        }
    }
}

/// A run still going after this is killed and counted as hung: a stalled run fails within the
/// lab's own bound of 15 s.
const KILL_AFTER: Duration = Duration::from_secs(20);

/// A thread that could not start, as the panic std prints says it, and how the lab's own last
/// line then starts. (Tokio's panics for a thread it cannot start are the lab's to catch, and
/// it says them in its one line: `src/server/caught.rs`.)
const THREAD_PANIC: (&str, &str) = (
    "failed to allocate an alternative stack",
    "isolation-lab: out of memory",
);

/// The shapes run under each limit: both fronts, and the async front on runtimes of its own
/// (the lab builds them inside its own runtime, where dropping one that a failed start leaves
/// would panic): own-runtime's three, current-thread and multi-thread (`--workers`); and a
/// front its held work blocks (`--work block`), whose unread requests the lab watches for in
/// the accept queue.
const SHAPES: [&[&str]; 5] = [
    &["--server", "async"],
    &["--server", "threaded"],
    &["--work", "own-runtime"],
    &["--work", "own-runtime", "--workers", "2"],
    &["--work", "block"],
];

/// Slow work on the blocking pool, which Tokio starts a thread for when the pool has none to
/// spare: run under the private-memory limits only, where it cannot start even the first.
/// (With room for one blocking thread and not two, S2's work would wait for S1's thread, and
/// the run would fail as stalled after 5 s.)
const BLOCKING_POOL: &[&str] = &["--work", "spawn-blocking"];

/// Runs at once. Most end in milliseconds; those whose server retries a failing accept wait
/// out its pauses (about 0.13 s) without using a core.
const AT_ONCE: usize = 8;

/// Address-space limits are set this far above the smallest one the binary loads under (a
/// debug build needs several times a release build's): there the threaded front's threads
/// cannot get their stacks while the process itself runs. Limits right at the floor can land
/// where the standard library aborts the process before any code of the lab's runs, so the test
/// stays a few MiB above it.
const ABOVE_FLOOR_MIB: [u64; 2] = [2, 6];

/// Private-memory limits, in MiB. A thread's stack is 2 MiB of it: under these the front's own
/// runtime of two workers (`--workers 2`) cannot start both, nor the blocking pool a thread
/// beside the front's thread and the heap, and Tokio panics, which the lab catches and says in
/// its one line.
const DATA_MIB: [u64; 2] = [3, 4];

/// Every front under every open-file limit from 4 to 16, under small address-space limits and
/// under small private-memory limits, once each. Each run must exit 0 with a matching JSON
/// report, or exit 1 with exactly one line on stderr (and a report, if it printed one, that says
/// every handler was joined). A run killed after [`KILL_AFTER`] or ended by a signal fails the
/// test — but under a memory limit for an abort no code of the lab's can catch: the allocator's
/// or the C library's, or std's when a thread cannot map its signal stack.
#[test]
fn runs_under_resource_limits_end_with_a_report_or_one_line() {
    every_shape_under_every_limit(1);
}

/// Under a private-memory limit with room for a thread's stack and not for the signal stack
/// std maps as the thread starts, std aborts the process before any code of the lab's runs
/// there; the lab looks for room for both first (`limits::spawn_thread`). Found on the threaded
/// front's accept thread: the band of limits where it cannot start (its line names it) and the
/// first limit above where it can; every limit from 320 KiB below that edge to just above it,
/// in steps smaller than the abort's band (about 12 KiB), ends in one line or a report, never
/// an abort. (Before, one limit in every such step aborted, "failed to allocate an alternative
/// stack".)
#[test]
fn a_thread_without_room_for_its_signal_stack_is_not_started() {
    const KIB: u64 = 1024;
    let shape: &[&str] = &["--server", "threaded"];
    let refused_accept = |kib: u64| -> Result<bool, String> {
        let mut child = (lab_under(shape, Limit::Data(kib * KIB)).spawn())
            .map_err(|e| format!("the lab did not start: {e}"))?;
        let (_, stderr, ended) = output_or_kill(&mut child)?;
        let _ = child.wait();
        match ended {
            true => Ok(stderr.contains("starting the threaded server's thread")),
            false => Err(format!("still running after {KILL_AFTER:?}: killed")),
        }
    };
    // Up from 1 MiB to the band where the accept thread is refused, then the band's top.
    let mut below = (1024..16 * 1024)
        .step_by(64)
        .find(|&kib| refused_accept(kib).expect("a run"))
        .expect("a limit under which the accept thread cannot start");
    let mut above = 64 * 1024;
    assert!(
        !refused_accept(above).expect("a run"),
        "the accept thread starts under 64 MiB"
    );
    while above - below > 4 {
        let middle = (below + above) / 2;
        match refused_accept(middle).expect("a run") {
            true => below = middle,
            false => above = middle,
        }
    }
    for kib in (above.saturating_sub(320)..=above + 16).step_by(8) {
        let limit = Limit::Data(kib * KIB);
        if let Err(why) = run_once(shape, limit, StdMayEndIt::No) {
            panic!("prlimit {limit} isolation-lab {}: {why}", shape.join(" "));
        }
    }
}

/// The lab's binary with `shape`'s flags under `limit`, its output piped and no stdin.
fn lab_under(shape: &[&str], limit: Limit) -> Command {
    let mut lab = Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
    limit.on(standard_descriptors_only(&mut lab));
    lab.args(shape)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    lab
}

/// The same runs, ten times each: a run that ends one way most times and hangs now and then is
/// found by repeating it, which a soak does. Run it with
/// `cargo test --release --test lab limits:: -- --ignored`.
#[test]
#[ignore = "a soak of every run under limits, ten times over; run it explicitly"]
fn runs_under_resource_limits_end_the_same_way_ten_times_over() {
    every_shape_under_every_limit(10);
}

/// Output past the file-size limit (`ulimit -f`): the run, or `hold`, says it cannot write it,
/// in one line, exit 1 (after the run's own failure, if it failed), rather than being killed
/// without a word by the SIGXFSZ the kernel sends with the failed write. The limit leaves room
/// for that line on stderr (a file too), not for the report.
#[test]
fn output_past_the_file_size_limit_fails_in_one_line() {
    let dir = crate::common::temp_dir("fsize").expect("a scratch directory");
    let file = |name: &str| std::fs::File::create(dir.path().join(name)).expect("a file");
    // The lab with `args`, its output and errors to files: how it ended, and its stderr.
    let run = |args: &[&str]| {
        let mut lab = Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
        let ran = limited(&mut lab, libc::RLIMIT_FSIZE, 512)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file("out"))
            .stderr(file("err"))
            .status()
            .expect("the lab starts");
        let said = std::fs::read_to_string(dir.path().join("err")).expect("its stderr");
        (ran, said)
    };
    for args in [&[][..], &["hold", "--counts", "10"]] {
        let (ran, said) = run(args);
        let command = format!("isolation-lab {}", args.join(" "));
        let context = format!("{}: {ran}, stderr {said:?}", command.trim_end());
        assert_eq!(ran.code(), Some(1), "{context}");
        assert_eq!(
            said, "isolation-lab: cannot write to stdout: File too large (os error 27)\n",
            "{context}"
        );
    }
    // The record of a failed run: its failure first, as it came first, then the write's.
    let failed = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/block-out-of-descriptors.json"
    );
    let (ran, said) = run(&["record", failed]);
    assert_eq!(ran.code(), Some(1), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    let failure = "the run did not match the policy model; its report says why: shared: stalled:";
    assert!(said.contains(failure), "{said}");
    let then = "; then cannot write to stdout: File too large (os error 27)\n";
    assert!(said.ends_with(then), "{said}");
}

/// Under a CPU time limit (`prlimit --cpu=1`) the lab sets a timer to stop itself in one line
/// just before the kernel would kill it without a word (`cli::stop_before_the_cpu_time_limit`;
/// the time left is checked in `cli`'s unit tests). A run and a `hold`, whose children set
/// their own, well within the limit end as they would without it.
#[test]
fn runs_within_a_cpu_time_limit_end_as_usual() {
    for args in [&[][..], &["hold", "--counts", "10", "--format", "json"]] {
        let mut lab = Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
        let ran = limited(&mut lab, libc::RLIMIT_CPU, 1)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("the lab starts");
        let stderr = String::from_utf8_lossy(&ran.stderr);
        let context = format!(
            "isolation-lab {}: {}, stderr {stderr:?}",
            args.join(" "),
            ran.status
        );
        assert_eq!(
            (ran.status.code(), stderr.as_ref()),
            (Some(0), ""),
            "{context}"
        );
        let report: serde_json::Value = serde_json::from_slice(&ran.stdout).expect("a report");
        assert_eq!(report["failure"], serde_json::Value::Null, "{context}");
    }
}

/// Under a CPU time limit the lab catches the limit's signals (SIGXCPU, and SIGPROF from the
/// timer it sets) to stop in one line; the same signal sent by a process says nothing of the
/// limit, so the line says it was sent. A classroom session under `prlimit --cpu=60`, once it
/// has announced its page, is sent each; and without a limit, where only a process sends them,
/// they end it in the same line. (The kernel's own, which no other process can forge, ends the
/// lab with "out of CPU time": `cli::at_the_limit` tells the two by `si_code`.)
#[test]
fn a_cpu_limits_signal_sent_by_a_process_is_not_called_the_limit() {
    use std::io::{BufRead, BufReader};
    let signals = [(libc::SIGXCPU, "SIGXCPU"), (libc::SIGPROF, "SIGPROF")];
    for ((signal, name), cpu_limit) in signals.into_iter().flat_map(|s| [(s, true), (s, false)]) {
        let mut lab = Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
        if cpu_limit {
            limited(&mut lab, libc::RLIMIT_CPU, 60);
        }
        let mut child = lab
            .arg("classroom")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the lab starts");
        let mut stderr = BufReader::new(child.stderr.take().expect("piped")).lines();
        // The session has started once it has said how it ends, its announcement's last line.
        let announced = stderr
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("ends the session"));
        assert!(announced, "the classroom announces its page");
        let pid = libc::pid_t::try_from(child.id()).expect("a pid");
        // SAFETY: kill(2) with a pid and a signal number touches no memory of ours.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let rest: Vec<String> = stderr.map_while(Result::ok).collect();
        let status = child.wait().expect("the lab ends");
        assert_eq!(status.code(), Some(1), "{cpu_limit}: {status}: {rest:?}");
        let line = format!(
            "isolation-lab: interrupted by {name}, sent by a process, not the CPU time limit: \
             stopped at once, its report unwritten or cut short"
        );
        assert_eq!(rest, [line]);
    }
}

/// A signal that comes while the lab writes its report, once its run is over (here: blocked on
/// a pipe nobody reads), ends it in one line naming the signal, exit 1, rather than without a
/// word by the signal's default action, its report cut short: SIGTERM, and two whose default
/// ends a program though nothing sends them to end one, SIGIO and SIGSTKFLT.
#[test]
fn a_signal_while_the_report_is_written_ends_the_lab_in_one_line() {
    let signals = [
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGIO, "SIGIO"),
        (libc::SIGSTKFLT, "SIGSTKFLT"),
    ];
    for (signal, name) in signals {
        ends_the_lab_writing_its_report(signal, name);
    }
}

fn ends_the_lab_writing_its_report(signal: libc::c_int, name: &str) {
    use std::os::fd::AsRawFd;
    let mut lab = Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
    crate::common::with_default(&mut lab, signal);
    // The smallest pipe the kernel gives, sized before the lab can write to it (a pipe that
    // already holds more cannot shrink): the picture, about 27 KB, cannot fit it.
    let (stdout, into) = std::io::pipe().expect("a pipe");
    // SAFETY: fcntl on our own open descriptor, with an integer argument.
    let sized = unsafe { libc::fcntl(stdout.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    assert!(
        sized > 0,
        "the pipe resized: {}",
        std::io::Error::last_os_error()
    );
    let mut child = lab
        .args(["--format", "svg"])
        .stdin(Stdio::null())
        .stdout(into)
        .stderr(Stdio::piped())
        .spawn()
        .expect("the lab starts");
    // Only the lab writes to the pipe: nothing then keeps it open once the lab has ended.
    drop(lab);
    let pid = child.id();
    // Blocked on the full pipe: a thread of its waits in the kernel's pipe_write (named
    // anon_pipe_write in some kernels, pipe_wait in older ones).
    let blocked = || {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten();
        tasks.flatten().any(|task| {
            std::fs::read_to_string(task.path().join("wchan")).is_ok_and(|w| w.contains("pipe"))
        })
    };
    let started = std::time::Instant::now();
    while !blocked() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the lab never blocked on its stdout"
        );
        thread::yield_now();
    }
    let pid = libc::pid_t::try_from(pid).expect("a pid");
    // SAFETY: kill(2) with a pid and a signal number touches no memory of ours.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let mut stderr = String::new();
    let mut pipe = child.stderr.take().expect("piped");
    pipe.read_to_string(&mut stderr).expect("stderr");
    let status = child.wait().expect("the lab ends");
    drop(stdout);
    assert_eq!(status.code(), Some(1), "{status}: {stderr}");
    let line = format!(
        "isolation-lab: interrupted by {name}: stopped at once, its report unwritten or cut \
         short\n"
    );
    assert_eq!(stderr, line);
}

/// Every shape under every limit, `runs` times each, [`AT_ONCE`] at a time.
fn every_shape_under_every_limit(runs: usize) {
    let floor = crate::common::load_floor_mib();
    let address_space = ABOVE_FLOOR_MIB.map(|above| Limit::AddressSpace((floor + above) << 20));
    let data = DATA_MIB.map(|mib| Limit::Data(mib << 20));
    let limits = (4..=16)
        .map(Limit::Descriptors)
        .chain(address_space)
        .chain(data);
    let mut jobs = Vec::new();
    for limit in limits {
        let pool = matches!(limit, Limit::Data(_)).then_some(BLOCKING_POOL);
        for shape in SHAPES.into_iter().chain(pool) {
            jobs.extend(std::iter::repeat_n((shape, limit), runs));
        }
    }
    let jobs = Mutex::new(jobs);
    let failures = Mutex::new(Vec::new());
    thread::scope(|scope| {
        for _ in 0..AT_ONCE {
            scope.spawn(|| {
                while let Some((shape, limit)) = next(&jobs) {
                    if let Err(failure) = run_once(shape, limit, StdMayEndIt::Yes) {
                        let context = format!("{} under prlimit {limit}", shape.join(" "));
                        lock(&failures).push(format!("{context}: {failure}"));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(
        failures.is_empty(),
        "{} runs did not end as they must:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

type Job = (&'static [&'static str], Limit);

fn next(jobs: &Mutex<Vec<Job>>) -> Option<Job> {
    lock(jobs).pop()
}

/// Whether a run under a memory limit may be ended by std's or the C library's own code, where
/// none of the lab's can act: a thread Tokio starts that cannot map its signal stack, an
/// allocation std makes with the system allocator.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StdMayEndIt {
    Yes,
    /// Only the lab ends it: the threads it starts itself.
    No,
}

/// One run of the binary under `limit`, checked: exit 0 with a matching report, or exit 1 with
/// one line (and a report, if any, that `record` reads as genuine); or, where `std_may` says
/// so, ended by std under a memory limit.
fn run_once(shape: &[&str], limit: Limit, std_may: StdMayEndIt) -> Result<(), String> {
    let mut child = lab_under(shape, limit)
        // The reported hang came with backtraces on: with them, a failing run captures one.
        .env("RUST_BACKTRACE", "1")
        .spawn()
        .map_err(|e| format!("the lab did not start: {e}"))?;
    let std_may_end_it = std_may == StdMayEndIt::Yes && limit.is_memory();
    let (stdout, stderr, ended) = output_or_kill(&mut child)?;
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the run: {e}"))?;
    if !ended {
        return Err(format!(
            "still running after {KILL_AFTER:?}: killed; stderr: {stderr}"
        ));
    }
    match status.code() {
        Some(0) => {
            let report: serde_json::Value = serde_json::from_str(&stdout)
                .map_err(|e| format!("exit 0 without a JSON report ({e}); stderr: {stderr}"))?;
            if report["matches_model"] != true || !stderr.is_empty() {
                return Err(format!("exit 0 but no clean match; stderr: {stderr}"));
            }
            Ok(())
        }
        // Under a memory limit std's own code can run out where no code of the lab's can act,
        // and std prints what it does before it aborts: a new thread cannot map its signal
        // stack (a panic), or an allocation std makes with the system allocator, not the lab's
        // (its thread-local destructor list), fails. Another thread's allocation then failing
        // in the lab's allocator can end the run first, with its line last. That is an end,
        // not a hang, so it passes — only there, and only with the lab's own line last.
        Some(1)
            if std_may_end_it
                && std_said(&stderr)
                && last_line(&stderr).starts_with(THREAD_PANIC.1) =>
        {
            Ok(())
        }
        Some(1) => {
            // No panic printed (the hook's "thread '…' panicked at …"): the lab's one line may
            // say that a task panicked, as Tokio's `spawn_blocking` does when it can start no
            // thread, and the lab catches at the connection task's join.
            let lines = stderr.lines().count();
            if lines != 1 || !stderr.ends_with('\n') || stderr.contains(" panicked at ") {
                return Err(format!("exit 1 with {lines} lines on stderr: {stderr}"));
            }
            // Short of descriptors, a step fails as it happens: a caller's connect, the front's
            // accept loop giving up (which ends every wait at once). Short of private memory,
            // the front cannot start the threads it needs at all. Nothing is awaited that
            // cannot come, so no run waits out the safety timeout.
            if !matches!(limit, Limit::AddressSpace(_)) && stderr.contains("stalled:") {
                return Err(format!("a stall under prlimit {limit}: {stderr}"));
            }
            // What failed first is said first: a caller's request that broke because the front
            // gave up accepting, closed its connection unserved or panicked is not.
            let front_failed = ["the server", "the threaded server", "a connection t"];
            if let Some((first, then)) = stderr.split_once("; then ")
                && first.contains(": GET /")
                && front_failed.iter().any(|f| then.starts_with(f))
            {
                return Err(format!("a consequence said first: {stderr}"));
            }
            if stdout.is_empty() {
                return Ok(());
            }
            let report: serde_json::Value = serde_json::from_str(&stdout)
                .map_err(|e| format!("exit 1 with output that is not JSON ({e})"))?;
            joined_everything(&report).map_err(|e| format!("{e}; stderr: {stderr}"))?;
            genuine(&stdout, &stderr)
        }
        // Under a memory limit, the allocator or the C library aborts the process when memory
        // runs out ("memory allocation of N bytes failed", "Fatal glibc error: ... out of
        // memory"), before any code of the lab's can act; so does std when a thread it starts
        // for Tokio cannot map its signal stack (its panic, printed, cannot unwind out of the
        // thread's start). A panic of the lab's own unwinds instead (exit 101). The abort ends
        // the run at once, which is what this test guards (no hang), so it passes there — and
        // only there, never under a descriptor limit.
        _ if std_may_end_it
            && std::os::unix::process::ExitStatusExt::signal(&status) == Some(6)
            && (!stderr.contains("panicked") || stderr.contains(THREAD_PANIC.0)) =>
        {
            Ok(())
        }
        _ => Err(format!("ended with {status}; stderr: {stderr}")),
    }
}

/// Whether std printed that its own code ran out of memory: a thread's signal stack, or an
/// allocation of its own with the system allocator ("memory allocation of 48 bytes failed").
fn std_said(stderr: &str) -> bool {
    let allocation = |line: &str| {
        let size = line.strip_prefix("memory allocation of ");
        let size = size.and_then(|rest| rest.strip_suffix(" bytes failed"));
        size.is_some_and(|n| n.parse::<u64>().is_ok())
    };
    stderr.contains(THREAD_PANIC.0) || stderr.lines().any(allocation)
}

fn last_line(text: &str) -> &str {
    text.lines().last().unwrap_or_default()
}

/// `record` reads a failed run's report as what it is: a run that did not match, for the
/// reason the lab gave (`stderr`'s one line), and nothing in it edited or impossible.
fn genuine(report: &str, stderr: &str) -> Result<(), String> {
    let dir = crate::common::temp_dir("isolation-lab-limits").map_err(|e| e.to_string())?;
    let saved = dir.path().join("r.json");
    std::fs::write(&saved, report).map_err(|e| e.to_string())?;
    let loaded = isolation_lab::record::load(&saved).map_err(|e| format!("record: {e}"))?;
    let shown = isolation_lab::record::Shown::of(&loaded, &saved);
    let said = shown.failure().unwrap_or_default();
    let reason = stderr.trim_end().trim_start_matches("isolation-lab: ");
    match said.ends_with(&format!(
        "did not match the policy model; its report says why: {reason}"
    )) {
        true => Ok(()),
        false => Err(format!("record says: {said}; the lab said: {stderr}")),
    }
}

/// A failed run's report still accounts for every handler it started: each connection it
/// counted was joined, and none is alive.
fn joined_everything(report: &serde_json::Value) -> Result<(), String> {
    let policies = report["policies"].as_array().ok_or("no policies")?;
    for policy in policies {
        let server = &policy["server"];
        if !server.is_null() && server["connection_tasks_stopped"] != true {
            return Err(format!("a handler was not joined: server {server}"));
        }
        let handlers = &policy["resources"]["after_run"]["connection_handlers"];
        if *handlers != 0 {
            return Err(format!("{handlers} handlers alive after the run"));
        }
    }
    Ok(())
}

/// The child's stdout and stderr once it has closed both (it ended), or, if it has not within
/// [`KILL_AFTER`], after killing it; and whether it ended by itself.
fn output_or_kill(child: &mut Child) -> Result<(String, String, bool), String> {
    let mut stdout = child.stdout.take().ok_or("no stdout pipe")?;
    let mut stderr = child.stderr.take().ok_or("no stderr pipe")?;
    let (done, finished) = mpsc::channel();
    let readers = thread::spawn(move || {
        let mut err = String::new();
        let reading = thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        err.push_str(&reading.join().unwrap_or_default());
        // The test may have given up waiting; then no one listens.
        let _ = done.send(());
        (out, err)
    });
    let ended = finished.recv_timeout(KILL_AFTER).is_ok();
    if !ended {
        // Killing it closes its pipes, which ends the readers.
        let _ = child.kill();
    }
    let (out, err) = readers
        .join()
        .map_err(|_| "a reader thread panicked".to_owned())?;
    Ok((out, err, ended))
}
