//! `hold` when a front fails: a front child SIGKILLed mid-hold is evidence of that front at
//! that count, not a failure of the lab, and leaves no process behind. In its own process, so
//! its check for leftover children sees only this test's.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use isolation_lab::hold::{Config, Faults, HoldReport, Options, Outcome, Stage, hold};
use isolation_lab::policy::Front;
use isolation_lab::render;

/// How long a killed front may take to be reported: a guard, not a measurement.
const REPORTED_WITHIN: Duration = Duration::from_secs(15);

/// `kill(pid, 0)` fails with ESRCH: no process, not even a zombie, has this pid.
fn is_gone(pid: u32) -> bool {
    let pid = libc::pid_t::try_from(pid).expect("pids fit in pid_t");
    // SAFETY: signal 0 only checks that the process exists.
    let result = unsafe { libc::kill(pid, 0) };
    result == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

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

/// Runs `hold` on a thread of its own and waits for its report, failing the test if it takes
/// longer than [`REPORTED_WITHIN`].
fn hold_within(config: Config, options: Options) -> HoldReport {
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
    let config = Config::new(&[200, 400], &Front::ALL).expect("valid counts");
    let options = Options {
        program: Some(PathBuf::from(env!("CARGO_BIN_EXE_isolation-lab"))),
        faults: Faults {
            kill_front_when_held: Some(100),
        },
    };
    let report = hold_within(config, options);
    assert_eq!(
        report.failure, None,
        "a killed front is evidence: {report:#?}"
    );
    for series in &report.fronts {
        let front = series.front;
        let Outcome::FrontFailed(failed) = &series.points[0].outcome else {
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
        assert!((100..200).contains(&failed.held_before), "{failed:?}");
        let pid = failed.pid.expect("the child had started");
        assert!(is_gone(pid), "{front:?}'s killed child {pid} is reaped");
        let Outcome::NotRun { reason } = &series.points[1].outcome else {
            panic!("{front:?} at 400: {:?}", series.points[1].outcome);
        };
        assert!(reason.contains("failed at 200"), "{reason}");
    }
    assert_eq!(children(), Vec::<String>::new(), "no child is left");
    let text = render::hold::text(&report);
    assert!(text.contains("killed by SIGKILL"), "{text}");
}
