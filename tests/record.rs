//! `isolation-lab record`, through the binary: every evidence pointer in a record resolves in
//! the saved report and points at what its line says; the record's command reproduces the run;
//! a failed run's report is recorded too; a file that is not a lab report is refused with exit
//! status 2 before anything is printed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use isolation_lab::coordinator::Options;
use isolation_lab::faults::Faults;
use isolation_lab::label::Label;
use isolation_lab::policy::{Inputs, ModeChoice};
use serde_json::{Value, json};

const LAB: &str = env!("CARGO_BIN_EXE_isolation-lab");

/// A fresh directory of this test's own under the target's scratch space.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("record")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the scratch directory can be made");
    dir
}

/// Runs the lab with `args` in `dir` and says what it printed.
fn lab(dir: &Path, args: &[&str]) -> Output {
    let output = Command::new(LAB).args(args).current_dir(dir).output();
    output.expect("the binary starts")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("the lab writes UTF-8")
}

/// Saves a report of a run with `args` as `file` in `dir`; returns it parsed.
fn save(dir: &Path, args: &[&str], file: &str) -> Value {
    let output = lab(dir, args);
    assert!(
        output.status.success(),
        "isolation-lab {args:?}: {}",
        text(&output.stderr)
    );
    std::fs::write(dir.join(file), &output.stdout).expect("the report can be saved");
    serde_json::from_slice(&output.stdout).expect("the report is JSON")
}

/// `record file` in both formats, which must exit 0.
fn record(dir: &Path, file: &str) -> (Value, String) {
    let json = lab(dir, &["record", file, "--format", "json"]);
    let shown = lab(dir, &["record", file]);
    for output in [&json, &shown] {
        assert!(
            output.status.success(),
            "record {file}: {}",
            text(&output.stderr)
        );
    }
    let record = serde_json::from_slice(&json.stdout).expect("record --format json is JSON");
    (record, text(&shown.stdout))
}

/// The value at `pointer` in `report`, or a failure naming the pointer.
fn at<'a>(report: &'a Value, pointer: &str) -> &'a Value {
    report
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{pointer} does not resolve in the report"))
}

/// The policy `/policies/<n>` a pointer falls in.
fn policy_of(pointer: &str) -> String {
    let mut parts = pointer.split('/').skip(1);
    let (Some("policies"), Some(n)) = (parts.next(), parts.next()) else {
        panic!("{pointer} is not inside a policy");
    };
    format!("/policies/{n}")
}

fn sum(object: &Value) -> u64 {
    let values = object.as_object().expect("an object of counts").values();
    values.map(|v| v.as_u64().expect("a count")).sum()
}

/// Checks that `cited`'s pointer resolves in `report` to a value with the fields its `says`
/// states, read straight from the report's JSON; and that the text record prints the pointer
/// right under a line that says the same. Returns the pointer.
fn check(report: &Value, cited: &Value, lines: &[&str]) -> String {
    let pointer = cited["pointer"].as_str().expect("a pointer");
    let says = &cited["says"];
    let here = at(report, pointer);
    let context = format!("{pointer}: {says} but the report holds {here}");
    let same = |field: &str, value: &Value| assert_eq!(&here[field], value, "{field}: {context}");
    let ends = |suffix: &str| assert!(pointer.ends_with(suffix), "{suffix}: {context}");
    let mut words: Vec<String> = Vec::new();
    let word = |value: &Value| value.as_str().map_or(value.to_string(), str::to_owned);
    let labels = |value: &Value| {
        let list = value.as_array().expect("a list of labels");
        list.iter().map(word).collect::<Vec<_>>().join(" ")
    };
    if pointer != "/failure" {
        let policy = policy_of(pointer);
        assert_eq!(
            at(report, &format!("{policy}/mode")),
            &cited["mode"],
            "{context}"
        );
    }
    match says["kind"].as_str().expect("a kind") {
        "admission" => {
            assert!(pointer.contains("/admissions/"), "{context}");
            for field in ["request", "pool", "decision", "active_after"] {
                same(field, &says[field]);
            }
            let held_by = here.get("held_by").cloned().unwrap_or(json!([]));
            assert_eq!(held_by, says["held_by"], "held_by: {context}");
            let capacities = at(report, &format!("{}/pool_capacities", policy_of(pointer)));
            let pool = says["pool"].as_str().expect("a pool");
            assert_eq!(capacities[pool], says["capacity"], "capacity: {context}");
            words.extend([word(&says["request"]), word(&says["decision"])]);
        }
        "pending" => {
            ends("/slow_callers_pending_before_release");
            assert_eq!(here, &says["requests"], "{context}");
            words.extend([labels(&says["requests"]), "waiting".into()]);
        }
        "response" => {
            assert!(pointer.contains("/responses/"), "{context}");
            for field in ["request", "status", "phase"] {
                same(field, &says[field]);
            }
            let phase = word(&says["phase"]).replace('_', " ");
            words.extend([word(&says["request"]), word(&says["status"]), phase]);
        }
        "fast_response" => {
            ends("/fast_response_before_release");
            same("request", &json!("F1"));
            same("status", &says["status"]);
            words.extend(["F1".into(), word(&says["status"])]);
        }
        "still_held" => {
            ends("/observer_after_fast_before_release/held_at_gate");
            assert_eq!(here, &says["requests"], "{context}");
            words.push(labels(&says["requests"]));
        }
        "idle_permits" => {
            let pool = word(&says["pool"]);
            ends(&format!("/observer_before_fast/active_work/{pool}"));
            assert_eq!(here, &says["taken"], "{context}");
            let capacities = at(report, &format!("{}/pool_capacities", policy_of(pointer)));
            assert_eq!(capacities[&pool], says["capacity"], "capacity: {context}");
            assert!(
                says["capacity"].as_u64() > says["taken"].as_u64(),
                "a permit was idle: {context}"
            );
            let refused = at(
                report,
                &format!("{}/observer_before_fast/refused", policy_of(pointer)),
            );
            assert_eq!(refused, &says["refused"], "refused meanwhile: {context}");
            words.extend([pool, labels(&says["refused"])]);
        }
        "gate_opened" => {
            assert!(pointer.contains("/work_events/"), "{context}");
            same("event", &json!("gate_opened"));
            same("seq", &says["seq"]);
            words.push(format!("seq {}", says["seq"]));
        }
        "final_state" => {
            ends("/final_state");
            same("gate", &says["gate"]);
            assert_eq!(
                json!(sum(&here["active_work"])),
                says["active"],
                "{context}"
            );
            let available = json!(sum(&here["available_permits"]));
            assert_eq!(available, says["available"], "{context}");
            let capacities = at(report, &format!("{}/pool_capacities", policy_of(pointer)));
            assert_eq!(json!(sum(capacities)), says["capacity"], "{context}");
            words.push(format!("gate {}", word(&says["gate"])));
        }
        "failure" => {
            assert_eq!(pointer, "/failure", "{context}");
            assert_eq!(here, &says["reason"], "{context}");
            words.push(word(&says["reason"]));
        }
        "mismatches" => {
            ends("/model/mismatches");
            let all = here.as_array().expect("a list of differences");
            assert_eq!(json!(all.len()), says["count"], "{context}");
            assert_eq!(all.first(), Some(&says["first"]), "{context}");
            words.push(word(&says["first"]));
        }
        kind => panic!("a kind this test does not know: {kind}"),
    }
    // In the text, the pointer sits on its own line, right under the line that says it.
    let at_line = lines
        .iter()
        .position(|line| line.trim() == pointer)
        .unwrap_or_else(|| panic!("{pointer} is not printed on a line of its own"));
    let said = lines[at_line - 1];
    for word in &words {
        assert!(
            said.contains(word.as_str()),
            "{pointer}: {said:?} does not say {word:?}"
        );
    }
    pointer.to_owned()
}

/// Checks every pointer of a record of `report`; returns them.
fn check_all(report: &Value, record: &Value, shown: &str) -> Vec<String> {
    let lines: Vec<&str> = shown.lines().collect();
    let evidence = record["evidence"].as_array().expect("evidence");
    assert!(!evidence.is_empty(), "a record cites evidence");
    evidence.iter().map(|c| check(report, c, &lines)).collect()
}

/// The lesson's four runs and the threaded front: every pointer of every record resolves
/// to what its line says, every policy's admissions, F1, release and final state are cited,
/// and the command the record gives, run again, reproduces the run.
#[test]
fn every_pointer_points_at_what_its_line_says() {
    let dir = scratch("runs");
    let runs: [(&[&str], &str); 5] = [
        (&[], "default.json"),
        (&["--mode", "shared", "--slots", "3"], "more-slots.json"),
        (&["--held", "1"], "less-held.json"),
        (&["--held", "4"], "held 4.json"),
        (
            &["--server", "threaded", "--mode", "partitioned"],
            "threaded.json",
        ),
    ];
    for (args, file) in runs {
        let report = save(&dir, args, file);
        let (record, shown) = record(&dir, file);
        let pointers = check_all(&report, &record, &shown);
        let policies = report["policies"].as_array().expect("policies").len();
        for n in 0..policies {
            for wanted in [
                "admissions/0",
                "fast_response_before_release",
                "final_state",
            ] {
                let pointer = format!("/policies/{n}/{wanted}");
                assert!(pointers.contains(&pointer), "{file}: {pointer} is cited");
            }
        }
        assert_eq!(record["matches_model"], true, "{file}");
        for blank in ["Participant:", "My own prediction, written before the run:"] {
            assert!(
                shown.lines().any(|l| l == blank),
                "{file}: {blank}\n{shown}"
            );
        }
        assert!(
            shown.ends_with("Next bounded test / receiving role / evidence still needed:\n"),
            "{file}: the person's lines come last\n{shown}"
        );

        // The command reproduces the run: the same inputs, front and outcomes.
        let command = record["command"].as_str().expect("a command");
        let again = dir.join("again");
        let _ = std::fs::remove_dir_all(&again);
        std::fs::create_dir_all(&again).expect("a directory for the rerun");
        let bin = Path::new(LAB).parent().expect("the binary's directory");
        let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
        ))
        .expect("a PATH");
        let rerun = Command::new("sh")
            .args(["-c", command])
            .env("PATH", path)
            .current_dir(&again)
            .output()
            .expect("sh starts");
        assert!(rerun.status.success(), "{command}: {}", text(&rerun.stderr));
        let rerun = std::fs::read(again.join(file)).expect("the command saved the report");
        let rerun: Value = serde_json::from_slice(&rerun).expect("a report");
        assert_eq!(rerun["inputs"], report["inputs"], "{command}");
        assert_eq!(
            rerun["runner"]["front"], report["runner"]["front"],
            "{command}"
        );
        let decisions = |report: &Value| {
            let policies = report["policies"].as_array().expect("policies").iter();
            policies
                .map(|p| p["admissions"].clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(decisions(&rerun), decisions(&report), "{command}");
    }

    // The issue's own example: partitioned S2's refusal in the default run.
    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.join("default.json")).expect("saved"))
            .expect("a report");
    let s2 = at(&report, "/policies/1/admissions/1");
    assert_eq!(
        (&s2["request"], &s2["decision"]),
        (&json!("S2"), &json!("refused"))
    );
    let (_, shown) = record(&dir, "default.json");
    assert!(
        shown.contains(
            "    S2 refused: no slow permit free, held by S1\n      /policies/1/admissions/1\n"
        ),
        "{shown}"
    );
}

/// A run that failed (S1's caller hangs up while held) is recorded too: its failure is cited
/// at `/failure`, and every pointer into the policy it reached resolves.
#[test]
fn a_failed_runs_report_is_recorded() {
    let dir = scratch("failed");
    let inputs = Inputs {
        mode: ModeChoice::Both,
        ..Inputs::default()
    };
    let options = Options {
        faults: Faults {
            caller_disconnects: Some(Label::Slow(1)),
            ..Faults::default()
        },
        ..Options::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let report = runtime.block_on(isolation_lab::run_with(inputs, options));
    drop(runtime);
    assert!(
        report.failure.is_some(),
        "a caller that hangs up fails the run"
    );
    let json = serde_json::to_string_pretty(&report).expect("a report serializes");
    std::fs::write(dir.join("failed.json"), &json).expect("saved");
    let report: Value = serde_json::from_str(&json).expect("JSON");
    let (record, shown) = record(&dir, "failed.json");
    let pointers = check_all(&report, &record, &shown);
    assert!(pointers.contains(&"/failure".to_owned()), "{pointers:?}");
    assert_eq!(record["matches_model"], false);
    assert!(
        shown.contains("The run did NOT match the policy model."),
        "{shown}"
    );
    assert!(shown.contains("FAILED: shared: "), "{shown}");
    assert!(
        pointers.contains(&"/policies/0/model/mismatches".to_owned()),
        "{pointers:?}"
    );
}

/// A missing file, a directory, text that is not JSON, the lab's text report or picture, JSON
/// that is not a lab report, a report of another lab and one cut short: each exits 2 naming
/// the file and what is wrong with it, and prints nothing on stdout.
#[test]
fn what_is_not_a_lab_report_is_refused_with_exit_status_2() {
    let dir = scratch("refused");
    save(&dir, &[], "real.json");
    let real = std::fs::read_to_string(dir.join("real.json")).expect("saved");
    let shown = |args: &[&str]| text(&lab(&dir, args).stdout);
    let files = [
        ("not-json.json", "S1 admitted".to_owned()),
        ("text.txt", shown(&["--format", "text"])),
        ("picture.svg", shown(&["--format", "svg"])),
        ("predict.json", shown(&["predict", "--format", "json"])),
        (
            "other-lab.json",
            real.replace("concurrency-isolation", "another-lab"),
        ),
        ("cut.json", real[..real.len() / 2].to_owned()),
        ("no-runner.json", {
            let mut value: Value = serde_json::from_str(&real).expect("JSON");
            value.as_object_mut().expect("an object").remove("runner");
            value.to_string()
        }),
    ];
    for (file, contents) in &files {
        std::fs::write(dir.join(file), contents).expect("written");
    }
    let cases = [
        ("missing.json", "cannot be read"),
        (".", "cannot be read"),
        ("not-json.json", "is not JSON"),
        ("text.txt", "is a text report, not the JSON one"),
        ("picture.svg", "is a picture, not the JSON report"),
        ("predict.json", "is not a lab report"),
        ("other-lab.json", "is not a lab report"),
        ("cut.json", "is not JSON"),
        ("no-runner.json", "missing field `runner`"),
    ];
    for (file, says) in cases {
        let output = lab(&dir, &["record", file]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{file}: {stderr}");
        assert_eq!(text(&output.stdout), "", "{file}: nothing on stdout");
        assert!(
            stderr.starts_with(&format!("error: {file} ")),
            "{file}: {stderr}"
        );
        assert!(stderr.contains(says), "{file}: {says:?} in {stderr}");
        assert!(
            stderr.contains("isolation-lab > r.json"),
            "{file}: {stderr}"
        );
    }
}

/// A file with no end (`/dev/zero`) is refused for its size, exit 2, rather than read into
/// memory until the process runs out. Run under an address-space limit so that a lab that does
/// read it whole fails with "out of memory" instead of taking the machine's memory.
#[test]
fn a_file_larger_than_any_report_is_refused_unread() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: prlimit (util-linux) is not installed"
        );
        return;
    }
    let output = Command::new("prlimit")
        .args(["--as=1073741824", "--", LAB, "record", "/dev/zero"])
        .output()
        .expect("prlimit starts");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(text(&output.stdout), "", "nothing on stdout");
    assert!(
        stderr.starts_with("error: /dev/zero is larger than any lab report"),
        "{stderr}"
    );
}
