//! `hold` when a front fails: a front child SIGKILLed mid-hold, or one without room for its
//! threads, is evidence of that front at that count, not a failure of the lab, and leaves no
//! process behind. Each test that runs `hold` in this process runs alone in a process of its
//! own (`common::alone`), so its check for leftover children sees only its own; the rest run
//! the binary.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use crate::common::is_gone;
use isolation_lab::hold::{
    CountOutcome, FrontSignal, HoldHooks, HoldInputs, HoldOptions, HoldReport, Stage, hold,
};
use isolation_lab::policy::Front;

/// How long a killed front may take to be reported: a guard, not a measurement.
const REPORTED_WITHIN: Duration = Duration::from_secs(15);
/// How long the lab may take to start a front's child on a loaded machine: a guard against a
/// hang, not the lab's 15 s rule, which is about a failure being reported.
const STARTED_WITHIN: Duration = Duration::from_secs(60);

/// The children of every thread of this process, from `/proc/self/task/*/children`.
fn children() -> Vec<String> {
    let tasks = std::fs::read_dir("/proc/self/task").expect("Linux /proc");
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// What a test breaks in a `hold` run: each front's child signalled once it is read to hold
/// `at` requests, or each pool `short` permits fewer than the requests sent.
#[derive(Debug, Default)]
struct Break {
    signal_at: Option<(FrontSignal, u64)>,
    /// Each child the lab finds stopped is continued (SIGCONT) before the lab ends it, as a
    /// brief stop would have passed by then.
    continue_found: bool,
    /// The children continued so.
    continued: AtomicU32,
    short: u32,
    /// The child last signalled: each front's is signalled once.
    signalled: AtomicU32,
}

impl Break {
    fn signal(signal: FrontSignal, at: u64) -> Break {
        Break {
            signal_at: Some((signal, at)),
            ..Break::default()
        }
    }
}

impl HoldHooks for Break {
    fn permits_short(&self) -> u32 {
        self.short
    }

    fn signal_front(&self, pid: u32, held: u64) -> Option<FrontSignal> {
        let (signal, at) = self.signal_at?;
        let first = held >= at && self.signalled.swap(pid, Ordering::Relaxed) != pid;
        first.then_some(signal)
    }

    fn found_stopped(&self, pid: u32) {
        if self.continue_found {
            let pid = libc::pid_t::try_from(pid).expect("a pid");
            // SAFETY: kill(2) with a pid and a signal number touches no memory of ours.
            assert_eq!(
                unsafe { libc::kill(pid, libc::SIGCONT) },
                0,
                "SIGCONT {pid}"
            );
            self.continued.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The options of a run of the built binary broken as `broken` says.
fn broken(broken: Break) -> HoldOptions {
    HoldOptions {
        program: Some(PathBuf::from(env!("CARGO_BIN_EXE_isolation-lab"))),
        hooks: Arc::new(broken),
    }
}

/// Runs `hold` on a thread of its own and waits for its report, failing the test if it takes
/// longer than [`REPORTED_WITHIN`].
fn hold_within(config: HoldInputs, options: HoldOptions) -> HoldReport {
    let (send, report) = mpsc::channel();
    let runner = std::thread::spawn(move || {
        let _ = send.send(hold(&config, &options));
    });
    let report = report
        .recv_timeout(REPORTED_WITHIN)
        .expect("hold reports a killed front within 15 s");
    runner.join().expect("the hold thread does not panic");
    report
}

/// Each front's child, SIGKILLed once 100 of 200 requests are held, is reported at 200 as a
/// front that failed while holding, killed by SIGKILL; its larger count is not run; the lab
/// itself does not fail; the killed child is reaped and no child is left.
#[test]
fn a_front_killed_mid_hold_is_reported_with_its_signal_and_reaped() {
    if common::alone() {
        return;
    }
    let config = HoldInputs::new(&[200, 400], &Front::ALL).expect("valid counts");
    let options = broken(Break::signal(FrontSignal::Kill, 100));
    let report = hold_within(config, options);
    assert_eq!(
        report.failure, None,
        "a killed front is evidence: {report:#?}"
    );
    for series in &report.fronts {
        let front = series.front;
        let CountOutcome::FrontFailed(failed) = &series.points[0].outcome else {
            panic!("{front:?} at 200: {:?}", series.points[0].outcome);
        };
        let exit = failed.exit.as_ref().expect("the killed child was reaped");
        assert_eq!(
            exit.signal.as_deref(),
            Some("SIGKILL"),
            "{front:?}: {failed:?}"
        );
        assert!(failed.reason.contains("SIGKILL"), "{}", failed.reason);
        assert_eq!(failed.stage, Stage::Holding);
        assert!((100..=200).contains(&failed.held_before), "{failed:?}");
        let pid = failed.pid.expect("the child had started");
        assert!(is_gone(pid), "{front:?}'s killed child {pid} is reaped");
        let CountOutcome::NotRun { reason } = &series.points[1].outcome else {
            panic!("{front:?} at 400: {:?}", series.points[1].outcome);
        };
        assert!(reason.contains("failed at N = 200"), "{reason}");
    }
    assert_eq!(children(), Vec::<String>::new(), "no child is left");
    let text = isolation_lab::hold::render::text(&report);
    assert!(text.contains("killed by SIGKILL"), "{text}");
}

/// A front child limited to 256 MiB of address space (`ulimit -v`, set by a wrapper script
/// that then execs the lab): the threaded front runs out of room for thread stacks before
/// 400 held and fails, which is recorded at that count as the front's failure, with how it
/// ended; the async front holds all 400 in the same room; the lab does not fail.
#[test]
fn a_front_that_runs_out_of_room_for_threads_is_evidence() {
    if common::alone() {
        return;
    }
    let wrapper = wrapper("lab-in-256-mib", "ulimit -v 262144 || exit 99");
    let config = HoldInputs::new(&[400], &Front::ALL).expect("valid counts");
    let options = HoldOptions {
        program: Some(wrapper),
        ..HoldOptions::default()
    };
    let report = hold(&config, &options);
    assert_eq!(report.failure, None, "{report:#?}");
    let outcome = |front| {
        let series = report.series(front).expect("both fronts ran");
        series.points[0].outcome.clone()
    };
    let CountOutcome::FrontFailed(failed) = outcome(Front::Threaded) else {
        panic!("threaded at 400: {:?}", outcome(Front::Threaded));
    };
    // Any way the room runs out ends it: a thread that cannot get its stack (the accept
    // loop's spawn fails and the server reports the connection it closed unserved, or its
    // spawns keep failing and it gives up, saying so, or a started thread aborts the process),
    // or an allocation the limit refuses, which the lab's allocator ends in its one line.
    let out_of_memory = failed.exit.as_ref().is_some_and(|death| {
        death.code == Some(1)
            && death
                .last_stderr
                .as_deref()
                .is_some_and(|line| line.starts_with("isolation-lab: out of memory"))
    });
    assert!(
        failed.reason.contains("could not start serving one")
            || failed.reason.contains("connection threads stayed broken")
            || failed.reason.contains("killed by")
            || out_of_memory,
        "{failed:?}"
    );
    assert!(failed.held_before < 400, "{failed:?}");
    assert!(is_gone(failed.pid.expect("it started")), "reaped");
    assert!(
        matches!(outcome(Front::Async), CountOutcome::Held(_)),
        "{:?}",
        outcome(Front::Async)
    );
    assert_eq!(children(), Vec::<String>::new(), "no child is left");
}

/// A script, `name` in the tests' own directory, that runs the shell line `first`, then execs the
/// lab with its arguments (in the same process).
fn wrapper(name: &str, first: &str) -> PathBuf {
    let wrapper = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let script = format!(
        "#!/bin/sh\n{first}\nexec '{}' \"$@\"\n",
        env!("CARGO_BIN_EXE_isolation-lab")
    );
    std::fs::write(&wrapper, script).expect("write the wrapper");
    let mut permissions = std::fs::metadata(&wrapper)
        .expect("the wrapper")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&wrapper, permissions).expect("make it executable");
    wrapper
}

/// A front's child stopped (SIGSTOP) before it is ready — here it stops itself before it execs
/// the lab — is found stopped, killed and reaped, within 15 s rather than after the start's
/// timeout and a grace: the front failed at rest, its counts are not run, and the lab does not
/// fail.
#[test]
fn a_front_stopped_before_it_is_ready_is_reported_within_15_s() {
    if common::alone() {
        return;
    }
    let config = HoldInputs::new(&[10], &[Front::Async]).expect("valid counts");
    let options = HoldOptions {
        program: Some(wrapper("lab-stopped-at-start", "kill -STOP $$")),
        ..HoldOptions::default()
    };
    let report = hold_within(config, options);
    assert_eq!(report.failure, None, "{report:#?}");
    let series = report.series(Front::Async).expect("async ran");
    let CountOutcome::NotRun { reason } = &series.points[0].outcome else {
        panic!("async at 10: {:?}", series.points[0].outcome);
    };
    assert!(
        reason.contains("failed at rest")
            && reason
                .contains("found stopped (SIGSTOP or another stop signal) before it was ready")
            && reason.contains("killed it (SIGKILL)"),
        "{reason}"
    );
    assert_eq!(children(), Vec::<String>::new(), "no child is left");
}

/// A request refused where every one must be admitted fails the lab, with the reason in one
/// line: the measurement stops there, the rest is not run, and no child is left.
#[test]
fn a_refused_request_fails_the_lab() {
    if common::alone() {
        return;
    }
    let config = HoldInputs::new(&[50, 100], &[Front::Async]).expect("valid counts");
    let options = broken(Break {
        short: 1,
        ..Break::default()
    });
    let report = hold(&config, &options);
    let failure = report.failure.clone().expect("the lab fails");
    // The caller's 503 and the front's count of the refusal race; either tells.
    assert!(
        failure.contains("refused by a pool of 49 permits") || failure.contains("answered 503"),
        "{failure}"
    );
    assert!(!failure.contains('\n'), "one line: {failure}");
    let points = &report.series(Front::Async).expect("async ran").points;
    assert!(
        matches!(points[0].outcome, CountOutcome::LabFailed { .. }),
        "{points:?}"
    );
    assert!(
        matches!(points[1].outcome, CountOutcome::NotRun { .. }),
        "{points:?}"
    );
    assert_eq!(children(), Vec::<String>::new(), "no child is left");
}

/// A front's child stopped by SIGSTOP once 100 of 200 are held answers nothing and reads no
/// command: it is found stopped, killed and reaped, and reported as a front that failed while
/// holding, within 15 s (not after a minute's stall); the lab itself does not fail.
#[test]
fn a_stopped_front_is_reported_within_15_s() {
    stopped_when_held(100);
}

/// The same for a child stopped once all 200 are held, while the lab samples it: it never
/// answers for its heap. (Stopped at 100, a child whose counts the lab reads late can have held
/// all 200 by then: this is that case, every time.)
#[test]
fn a_front_stopped_once_all_are_held_is_reported_within_15_s() {
    stopped_when_held(200);
}

/// The same for a stop that passes: the child is continued once the lab has found it stopped.
/// A stop from outside is evidence however long it lasts, worded as one that lasts: the lab
/// kills the child rather than fail itself (it once failed, "the front's process stopped").
#[test]
fn a_front_stopped_briefly_is_reported_as_stopped() {
    stopped_and_continued(100, true);
}

/// Runs `hold` at 200 on the async front, SIGSTOPped once the lab reads a count of `at` held,
/// and checks the stopped front's report.
fn stopped_when_held(at: u64) {
    stopped_and_continued(at, false);
}

/// [`stopped_when_held`], the child continued once found stopped if `continued`.
fn stopped_and_continued(at: u64, continued: bool) {
    if common::alone() {
        return;
    }
    let config = HoldInputs::new(&[200], &[Front::Async]).expect("valid counts");
    let hooks = Arc::new(Break {
        continue_found: continued,
        ..Break::signal(FrontSignal::Stop, at)
    });
    let options = HoldOptions {
        hooks: hooks.clone(),
        ..broken(Break::default())
    };
    let report = hold_within(config, options);
    assert_eq!(
        report.failure, None,
        "a stopped front is evidence: {report:#?}"
    );
    let series = report.series(Front::Async).expect("async ran");
    let CountOutcome::FrontFailed(failed) = &series.points[0].outcome else {
        panic!("async at 200: {:?}", series.points[0].outcome);
    };
    // Worded as a front stopped before it is ready is: the one stop, seen wherever it lands.
    assert!(
        failed
            .reason
            .contains("its process was found stopped (SIGSTOP or another stop signal)")
            && failed.reason.contains("killed it (SIGKILL)"),
        "{failed:?}"
    );
    assert!(failed.detail.contains("stopped at"), "{failed:?}");
    assert_eq!(failed.stage, Stage::Holding);
    let exit = failed.exit.as_ref().expect("the stopped child was reaped");
    assert_eq!(exit.signal.as_deref(), Some("SIGKILL"), "{failed:?}");
    assert!(is_gone(failed.pid.expect("it started")), "reaped");
    assert_eq!(children(), Vec::<String>::new(), "no child is left");
    let continues = hooks.continued.load(Ordering::Relaxed);
    assert_eq!(continues, u32::from(continued), "children continued");
}

/// The lab run with `args` under `resource` limited to `value`, soft and hard, as `prlimit`
/// sets it.
fn lab_under(
    resource: libc::__rlimit_resource_t,
    value: libc::rlim_t,
    args: &[&str],
) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
    common::limited(command.args(args), resource, value);
    command.output().expect("the lab runs")
}

/// Under an address-space limit too small for a front — 1 MiB above the least the binary loads
/// in, where `hold` itself starts but no front's child would — `hold` starts no child and
/// fails with one line on stderr, exit 1: no allocation failure, no backtrace. With 32 MiB it
/// ends with its report, exit 0, the async front holding 10 and 100.
#[test]
fn an_address_space_limit_fails_in_one_line() {
    if common::alone() {
        return;
    }
    let bytes = (common::load_floor_mib() + 1) << 20;
    let output = lab_under(libc::RLIMIT_AS, bytes, &["hold", "--counts", "10,100,1000"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    let said = format!("isolation-lab: RLIMIT_AS = {bytes} bytes leaves no room: a front's child");
    assert!(stderr.starts_with(&said), "{stderr}");

    let output = lab_under(
        libc::RLIMIT_AS,
        33_554_432,
        &["hold", "--counts", "10,100,1000", "--format", "json"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("a report");
    let fronts = report["fronts"].as_array().expect("fronts");
    let on_async = fronts
        .iter()
        .find(|f| f["front"] == "async")
        .expect("async");
    let outcomes: Vec<&str> = on_async["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| p["outcome"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(outcomes[..2], ["held", "held"], "{report}");
}

/// Under a private-memory limit (`prlimit --data=67108864`, 64 MiB) every thread's 2 MiB stack
/// counts: the preflight names RLIMIT_DATA as the threaded front's ceiling (24 held requests)
/// and runs no count beyond it, rather than let the front fail for want of a stack; the async
/// front, about 20 KiB a held request, holds 1 000 under the same limit.
#[test]
fn a_private_memory_limit_is_the_threaded_fronts_ceiling() {
    let args = ["hold", "--counts", "10,1000", "--format", "json"];
    let output = lab_under(libc::RLIMIT_DATA, 67_108_864, &args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("a report");
    let preflight = &report["preflight"];
    assert_eq!(preflight["limits"]["data"], 67_108_864, "{preflight}");
    let threaded = &preflight["reach"]["threaded"];
    assert_eq!(threaded["ceiling"], "RLIMIT_DATA", "{preflight}");
    assert_eq!(threaded["held"], 24, "{preflight}");
    let outcomes = |front: usize| -> Vec<&serde_json::Value> {
        let points = report["fronts"][front]["points"].as_array().into_iter();
        points.flatten().map(|p| &p["outcome"]).collect()
    };
    assert_eq!(outcomes(0), ["held", "held"], "async: {report}");
    assert_eq!(outcomes(1), ["held", "not_run"], "threaded: {report}");
    let reason = &report["fronts"][1]["points"][1]["reason"];
    let reason = reason.as_str().unwrap_or_default();
    assert!(reason.contains("RLIMIT_DATA = 67108864"), "{reason}");
}

/// Under a 64 KiB stack limit (`prlimit --stack=65536`, soft and hard), below what the lab's
/// main thread needs, the lab runs on a thread with a stack of its own: the default run matches
/// the model, and `hold`'s front children, which inherit the limit, hold every request.
#[test]
fn a_small_stack_limit_runs_the_lab_and_hold_as_usual() {
    let run = lab_under(libc::RLIMIT_STACK, 65_536, &["--format", "json"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).expect("a report");
    assert_eq!(report["matches_model"], true, "{report}");
    let args = ["hold", "--counts", "10", "--format", "json"];
    let held = lab_under(libc::RLIMIT_STACK, 65_536, &args);
    let stderr = String::from_utf8_lossy(&held.stderr);
    assert_eq!(held.status.code(), Some(0), "{stderr}");
    let report: HoldReport = serde_json::from_slice(&held.stdout).expect("a report");
    assert_eq!(report.fronts.len(), 2, "{report:?}");
    for series in &report.fronts {
        let outcome = &series.points[0].outcome;
        assert!(matches!(outcome, CountOutcome::Held(_)), "{outcome:?}");
    }
}

/// Under `prlimit --nproc=64` the threaded front holding 100 needs more threads than the limit
/// allows. The report's `nproc_enforced` says whether the kernel holds the lab to it, and the
/// count shows it is true: held, all 100, where it does not (root); not run, named by
/// RLIMIT_NPROC, where it does.
#[test]
fn a_thread_limit_is_a_ceiling_only_where_the_kernel_enforces_it() {
    if common::alone() {
        return;
    }
    let args = [
        "hold", "--counts", "100", "--server", "threaded", "--format", "json",
    ];
    let output = lab_under(libc::RLIMIT_NPROC, 64, &args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("a report");
    let point = &report["fronts"][0]["points"][0];
    match report["preflight"]["limits"]["nproc_enforced"].as_bool() {
        Some(false) => assert_eq!(
            (&point["outcome"], &point["held"]),
            (&"held".into(), &100.into())
        ),
        Some(true) => {
            assert_eq!(point["outcome"], "not_run", "{point}");
            let reason = point["reason"].as_str().unwrap_or_default();
            assert!(reason.contains("RLIMIT_NPROC = 64"), "{point}");
        }
        None => panic!("no nproc_enforced: {report}"),
    }
}

/// The binary interrupted while it holds, by SIGINT sent to its process group as a terminal's
/// Ctrl-C sends it, then by SIGTERM, SIGHUP and SIGUSR1 (a signal sent to end a program that
/// is not one of the usual three): each front child leads a process group of its own, so only
/// the lab is signalled; the measurement in progress stops there, its child is ended and reaped,
/// nothing more starts, and the lab exits 1 within 15 s, saying so in one line, after the report
/// of what it measured before. The signal goes once the second child (the async front holding
/// 4 000) is up, and the threaded front's measurements are still to come, so it always finds the
/// run in progress.
#[test]
fn an_interrupted_hold_stops_its_child_and_fails_in_one_line() {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::Instant;
    for (signal, said) in [
        (libc::SIGINT, "SIGINT"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGUSR1, "SIGUSR1"),
    ] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
        command
            .args(["hold", "--counts", "4000", "--format", "json"])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // A failed assertion below ends this thread, and with it the lab.
        common::webdriver::die_with_parent(&mut command);
        common::with_default(&mut command, signal);
        let lab = command.spawn().expect("the binary starts");
        let pid = lab.id();
        let started = Instant::now();
        // The lab's children, as each is seen once it has become the lab's binary: its pid and
        // its process group, from `/proc/<pid>/stat` (after the command's `)`: state, parent,
        // group). Before its exec a child may not have its own group yet.
        let mut seen: Vec<(String, String)> = Vec::new();
        while seen.len() < 2 {
            assert!(started.elapsed() < STARTED_WITHIN, "seen {seen:?}");
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the lab runs");
            let children = tasks
                .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("children")).ok())
                .flat_map(|list| {
                    list.split_whitespace()
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                });
            for child in children {
                let stat = std::fs::read_to_string(format!("/proc/{child}/stat"));
                let Some((command, fields)) = stat.as_deref().ok().and_then(|s| s.rsplit_once(')'))
                else {
                    continue;
                };
                let group = fields.split_whitespace().nth(2).expect("a process group");
                let new = seen.iter().all(|(pid, _)| *pid != child);
                if command.ends_with("(isolation-lab") && new {
                    seen.push((child, group.to_owned()));
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for (child, group) in &seen {
            assert_eq!(
                group, child,
                "each front child leads a process group of its own"
            );
        }
        let child: u32 = seen[1].0.parse().expect("a pid");
        let signalled = Instant::now();
        // Ctrl-C's SIGINT goes to the terminal's foreground process group: here, the lab's.
        let to = if signal == libc::SIGINT {
            -(pid as i32)
        } else {
            pid as i32
        };
        // SAFETY: `kill` has no memory effects; `to` is our unreaped child, or the group it leads.
        assert_eq!(unsafe { libc::kill(to, signal) }, 0);
        let output = lab.wait_with_output().expect("the lab ends");
        assert!(signalled.elapsed() < REPORTED_WITHIN, "ended within 15 s");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "signal {signal}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.starts_with("isolation-lab: the ")
                && stderr.contains(&format!(
                    "interrupted by {said}: the measurement was cut short"
                )),
            "{stderr}"
        );
        assert!(
            is_gone(child),
            "the interrupted front's child {child} was reaped"
        );
        let report: HoldReport = serde_json::from_slice(&output.stdout).expect("the report");
        assert_eq!(
            report.failure.as_deref(),
            stderr.trim_end().strip_prefix("isolation-lab: ")
        );
        // Counts held, then the one interrupted (unless it was a front at rest), then none.
        let at_rest = report
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("front at rest"));
        let outcomes = report.fronts.iter().flat_map(|series| &series.points);
        let mut outcomes = outcomes
            .map(|point| &point.outcome)
            .skip_while(|outcome| matches!(outcome, CountOutcome::Held(_)));
        if !at_rest {
            let interrupted = outcomes.next();
            assert!(
                matches!(interrupted, Some(CountOutcome::LabFailed { reason })
                    if reason.contains("interrupted")),
                "{interrupted:?}"
            );
        }
        for outcome in outcomes {
            let reason = match outcome {
                CountOutcome::NotRun { reason } => reason.as_str(),
                other => panic!("after the interruption: {other:?}"),
            };
            assert_eq!(reason, "the lab failed earlier");
        }
    }
}
