//! The teaching instruments: `predict` is the model and equals what every run shows; `sweep`
//! runs exactly the 24 inputs and fits an 80-column terminal.

use crate::common;

use std::collections::BTreeSet;
use std::process::Command;

use common::Case;
use isolation_lab::outcome::Outcome;
use isolation_lab::policy::{Inputs, ModeChoice};

/// For every input, the prediction is exactly what a real run shows, cell by cell.
#[tokio::test]
async fn predict_equals_the_observed_outcome_for_every_input() {
    for case in Case::all() {
        let report = case.run().await;
        let observed = Outcome::observed(&report);
        let predicted = Outcome::predicted(case.policy(), case.held());
        assert_eq!(observed, predicted, "{case:?}");
    }
}

/// `predict` for `--mode both` is the two policies' predictions in run order.
#[test]
fn predict_follows_the_mode() {
    let inputs = Inputs {
        mode: ModeChoice::Both,
        ..Inputs::default()
    };
    let modes: Vec<_> = isolation_lab::lab::predict(inputs)
        .iter()
        .map(|o| o.mode.name())
        .collect();
    assert_eq!(modes, ["shared", "partitioned"]);
    let shared_only = Inputs {
        mode: ModeChoice::Shared,
        ..inputs
    };
    assert_eq!(isolation_lab::lab::predict(shared_only).len(), 1);
}

/// The sweep runs each of the 24 inputs once, all matching, and its text stays within 80
/// columns.
#[tokio::test]
async fn sweep_covers_exactly_the_24_runs_within_80_columns() {
    let sweep = isolation_lab::sweep::sweep(isolation_lab::policy::Front::Async).await;
    assert!(sweep.matches_model);
    let inputs: BTreeSet<_> = sweep
        .runs
        .iter()
        .map(|r| (r.mode.name(), r.slots.get(), r.held.get()))
        .collect();
    let expected: BTreeSet<_> = Case::all()
        .into_iter()
        .map(|c| (c.mode.name(), usize::from(c.slots), usize::from(c.held)))
        .collect();
    assert_eq!(sweep.runs.len(), 24);
    assert_eq!(inputs, expected);
    for run in &sweep.runs {
        let case = Case::new(run.mode, run.slots.get() as u8, run.held.get() as u8);
        assert_eq!(
            run.outcome,
            Outcome::predicted(case.policy(), case.held()),
            "{case:?}"
        );
    }
    let text = isolation_lab::sweep::render::render(&sweep);
    for line in text.lines() {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line:?}",
            line.chars().count()
        );
    }
    assert!(
        text.contains("All 24 runs matched the policy model."),
        "{text}"
    );
    // The workshop's held-4 column: shared 2 in 2 out, F1 refused; partitioned 1 in 3 out,
    // F1 admitted, the fast permit idle while slow work was refused.
    let row = |heading: &str| {
        text.lines()
            .filter(|l| l.starts_with(heading))
            .collect::<Vec<_>>()
    };
    let slots2 = row("slots 2");
    assert_eq!(slots2.len(), 2, "{text}");
    assert!(slots2[0].ends_with("2/2 503 0"), "{}", slots2[0]);
    assert!(slots2[1].ends_with("1/3 200 1"), "{}", slots2[1]);
}

/// `predict` starts no server: it answers even where the process may open only one more file
/// descriptor — where a real run cannot even start its runtime.
#[cfg(unix)]
#[test]
fn predict_starts_no_server() {
    let mut lab = Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
    lab.args(["predict", "--held", "4", "--format", "json"]);
    crate::common::limited(&mut lab, libc::RLIMIT_NOFILE, 4);
    let output = crate::common::standard_descriptors_only(&mut lab)
        .output()
        .expect("the lab starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let predictions: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("stdout is JSON");
    let partitioned = &predictions[1];
    assert_eq!(partitioned["mode"], "partitioned");
    assert_eq!(
        partitioned["refused_slow"],
        serde_json::json!(["S2", "S3", "S4"])
    );
    assert_eq!(partitioned["idle_while_refused"], 1);
}

/// `sweep` as a user runs it: exit 0, the matrices on stdout.
#[test]
fn the_sweep_command_exits_0() {
    let output = Command::new(env!("CARGO_BIN_EXE_isolation-lab"))
        .arg("sweep")
        .output()
        .expect("the binary starts");
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let heading = "isolation-lab sweep: 24 policy runs, each on its own async server";
    assert!(text.starts_with(heading), "{text}");
}

/// A sweep whose first run fails (too few descriptors for its server) says that run failed
/// and the sweep stopped there, not that it differed from the model; its matrix counts the one
/// run it made and marks what that run never reached as unknown.
#[cfg(unix)]
#[test]
fn a_sweep_that_fails_says_which_run_failed() {
    let mut lab = Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
    lab.arg("sweep");
    crate::common::limited(&mut lab, libc::RLIMIT_NOFILE, 8);
    let output = crate::common::standard_descriptors_only(&mut lab)
        .output()
        .expect("the lab starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let failed = "isolation-lab: the shared run with --slots 2 --held 1 failed, and the sweep \
                  stopped there: ";
    assert!(stderr.starts_with(failed), "{stderr}");
    assert!(!stderr.contains("differed"), "{stderr}");
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let heading = "isolation-lab sweep: 1 of 24 policy runs, each on its own async server";
    assert!(text.starts_with(heading), "{text}");
    assert!(text.contains("slots 2  ?/? ? ? !  not run"), "{text}");
    assert!(
        text.contains("not run: after a run that failed, the sweep stopped."),
        "{text}"
    );
}
