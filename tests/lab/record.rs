//! `isolation-lab record`: every evidence pointer in a record resolves in
//! the saved report and points at what its line says; the record's command reproduces the run;
//! a failed run's report is recorded too, and says it did not match; an edited or impossible
//! report is named as such, exit status 1, and never said to match; a file that is not a lab
//! report, or is malformed, or is not a regular file, is refused with exit status 2 before
//! anything is printed; a classroom session's report is read run by run.
//!
//! The hundreds of reports read here are read as the binary reads them, by the library calls
//! it makes, in this process ([`record_here`]): a process each would be most of the suite's
//! CPU. `the_binary_prints_what_record_here_says` pins that the binary prints exactly that,
//! byte for byte, with the same exit status, for every kind of report.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use crate::common::{self, Faults, StuckBeforeTheGate};
use isolation_lab::cli::terminal::{self, one_line};
use isolation_lab::coordinator::Options;
use isolation_lab::hooks::Hooks;
use isolation_lab::label::Label;
use isolation_lab::policy::{Front, Inputs, ModeChoice};
use isolation_lab::record;
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

/// What `isolation-lab record file [--format json]`, run in `dir`, prints and exits with.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Recorded {
    /// What the binary printed and exited with.
    fn of(output: &Output) -> Recorded {
        Recorded {
            code: output.status.code().expect("the binary exits, not killed"),
            stdout: text(&output.stdout),
            stderr: text(&output.stderr),
        }
    }
}

/// What `record file` in `dir` prints, in text or JSON, made by the library calls the binary
/// makes (`record::load`, then `record::Shown`), in this process, and worded as the binary
/// words it: a refusal exits 2 with `error: ` before it, a record that does not match or hold
/// together exits 1 with its one line after `isolation-lab: `.
pub(crate) fn record_here(dir: &Path, file: &str, json: bool) -> Recorded {
    let saved = match record::load(&dir.join(file)) {
        Ok(saved) => saved,
        Err(mut refused) => {
            // The binary names the file as it was given, from the directory it ran in (the
            // names here are plain words, which the shell reads as they are).
            refused.file = file.to_owned();
            return Recorded {
                code: 2,
                stdout: String::new(),
                stderr: format!("error: {}\n", one_line(&refused.to_string())),
            };
        }
    };
    let shown = record::Shown::of(&saved, Path::new(file));
    let stdout = if json {
        terminal::json(serde_json::to_string_pretty(&shown).expect("a record serializes")) + "\n"
    } else {
        shown.text()
    };
    // As the binary writes it: one line that shows what it quotes.
    let (code, stderr) = match shown.failure() {
        Some(failure) => (1, format!("isolation-lab: {}\n", one_line(&failure))),
        None => (0, String::new()),
    };
    Recorded {
        code,
        stdout,
        stderr,
    }
}

/// The fixture `base` edited by `edit` and saved as `file` in `dir`: what `record file` prints,
/// and the edited report.
fn record_edited(dir: &Path, base: &str, edit: fn(&mut Value), file: &str) -> (Recorded, Value) {
    let mut report = fixture(base);
    edit(&mut report);
    std::fs::write(dir.join(file), report.to_string()).expect("saved");
    (record_here(dir, file, false), report)
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
    record_exiting(dir, file, 0, |_| true)
}

/// `record file` of a run that failed, in both formats: each exits 1, saying on stderr that
/// the run did not match, and not that the report was edited.
fn record_failed(dir: &Path, file: &str) -> (Value, String) {
    let said = format!(
        "isolation-lab: {file}: the run did not match the policy model; its report says why: "
    );
    record_exiting(dir, file, 1, |stderr| stderr.starts_with(&said))
}

/// `record file` in both formats, each exiting with `code` and a stderr that `says` holds of:
/// the record as JSON, and as text.
fn record_exiting(
    dir: &Path,
    file: &str,
    code: i32,
    says: impl Fn(&str) -> bool,
) -> (Value, String) {
    let (json, shown) = (record_here(dir, file, true), record_here(dir, file, false));
    for output in [&json, &shown] {
        let stderr = &output.stderr;
        assert_eq!(output.code, code, "record {file}: {stderr}");
        assert!(says(stderr), "{stderr}");
    }
    let record = serde_json::from_str(&json.stdout).expect("record --format json is JSON");
    (record, shown.stdout)
}

/// The value at `pointer` in `report`, or a failure naming the pointer.
fn at<'a>(report: &'a Value, pointer: &str) -> &'a Value {
    report
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{pointer} does not resolve in the report"))
}

/// The policy `/policies/<n>` a pointer falls in.
fn policy_of(pointer: &str) -> String {
    // In a classroom session's report, a run's pointers start `/runs/<i>`.
    let (run, rest) = match pointer.strip_prefix("/runs/") {
        Some(rest) => {
            let (n, rest) = rest.split_once('/').unwrap_or((rest, ""));
            (format!("/runs/{n}"), format!("/{rest}"))
        }
        None => (String::new(), pointer.to_owned()),
    };
    let mut parts = rest.split('/').skip(1);
    let (Some("policies"), Some(n)) = (parts.next(), parts.next()) else {
        panic!("{pointer} is not inside a policy");
    };
    format!("{run}/policies/{n}")
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
            // Cited after release exactly when the ledger decided it after the gate opened.
            let events = at(report, &format!("{}/work_events", policy_of(pointer)));
            let seq_of = |wanted: &dyn Fn(&Value) -> bool| {
                let events = events.as_array().expect("work events");
                events.iter().find(|e| wanted(e)).map(|e| e["seq"].clone())
            };
            let gate = seq_of(&|e| e["event"] == "gate_opened");
            let decided = seq_of(&|e| {
                e["request"] == says["request"]
                    && (e["event"] == "admitted" || e["event"] == "refused")
            });
            let after = matches!((gate, decided), (Some(g), Some(d)) if d.as_u64() > g.as_u64());
            assert_eq!(says["after_release"] == true, after, "{context}");
            if after {
                assert_eq!(cited["line"], "after_release", "{context}");
                words.push("after release".into());
            }
        }
        "unread" => {
            assert!(pointer.contains("/executor/unread/"), "{context}");
            for field in ["request", "accept_queue"] {
                same(field, &says[field]);
            }
            words.extend([word(&says["request"]), "not read".into()]);
        }
        "pending" => {
            ends("/slow_callers_pending_before_release");
            assert_eq!(here, &says["requests"], "{context}");
            let requests = says["requests"].as_array().expect("requests");
            words.extend(requests.iter().map(word).chain(["waiting".into()]));
            if let Some(unread) = says.get("unread") {
                let policy = policy_of(pointer);
                let seen = at(report, &format!("{policy}/executor/unread"));
                let seen = seen.as_array().expect("unread requests");
                for request in unread.as_array().expect("a list of labels") {
                    assert!(seen.iter().any(|u| &u["request"] == request), "{context}");
                    assert!(requests.contains(request), "{context}");
                }
                words.push(format!("{} unread", labels(unread)));
            }
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
            // After F1's response, or, when it had none, while F1 sat unread.
            let policy = policy_of(pointer);
            let f1 = at(report, &format!("{policy}/fast_response_before_release"));
            let unread = report
                .pointer(&format!("{policy}/executor/unread"))
                .and_then(Value::as_array)
                .is_some_and(|u| u.iter().any(|u| u["request"] == "F1"));
            assert_eq!(
                says["f1_unread"] == true,
                f1.is_null() && unread,
                "{context}"
            );
            words.push(
                if unread {
                    "F1 sat unread"
                } else {
                    "F1's response"
                }
                .into(),
            );
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

    // Partitioned S2's refusal in the default run, as `docs/instructor-guide.md` explains
    // `/policies/1/admissions/1`.
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
/// at `/failure`, every pointer into the policy it reached resolves, and the record says it did
/// not match, exit 1, without calling the report edited.
#[test]
fn a_failed_runs_report_is_recorded() {
    let dir = scratch("failed");
    let inputs = Inputs {
        mode: ModeChoice::Both,
        ..Inputs::default()
    };
    let options = Options::default().with_hooks(Faults {
        caller_disconnects: Some(Label::Slow(1)),
        ..Faults::default()
    });
    let runtime = common::runtime();
    let report = runtime.block_on(isolation_lab::lab::run_with(inputs, options));
    drop(runtime);
    assert!(
        report.failure.is_some(),
        "a caller that hangs up fails the run"
    );
    let json = serde_json::to_string_pretty(&report).expect("a report serializes");
    std::fs::write(dir.join("failed.json"), &json).expect("saved");
    let report: Value = serde_json::from_str(&json).expect("JSON");
    let (record, shown) = record_failed(&dir, "failed.json");
    assert_eq!(record["verdict"]["verdict"], "did_not_match", "{record}");
    let pointers = check_all(&report, &record, &shown);
    assert!(pointers.contains(&"/failure".to_owned()), "{pointers:?}");
    assert_eq!(record["matches_model"], false);
    assert!(
        shown.contains("The run did NOT match the policy model."),
        "{shown}"
    );
    assert!(
        shown.contains("FAILED, its report says: shared: "),
        "{shown}"
    );
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
        // Another instrument's runs, which a classroom report's are not.
        (
            "runs.json",
            json!({ "front": "async", "runs": [], "matches_model": true }).to_string(),
        ),
        (
            "other-lab.json",
            real.replace("concurrency-isolation", "another-lab"),
        ),
        ("cut.json", real[..real.len() / 2].to_owned()),
        // The same key twice: a reader of the file may see the 200 where the record reads 503.
        (
            "twice.json",
            real.replacen("\"status\": 503", "\"status\": 200, \"status\": 503", 1),
        ),
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
        (".", "is a directory, not a report file"),
        ("not-json.json", "is not JSON"),
        ("text.txt", "is a text report, not the JSON one"),
        ("picture.svg", "is a picture, not the JSON report"),
        ("predict.json", "is not a lab report"),
        ("runs.json", "is not a lab report: it has no \"lab\""),
        ("other-lab.json", "is not a lab report"),
        ("cut.json", "is not JSON"),
        ("no-runner.json", "missing field `runner`"),
        (
            "twice.json",
            "is not what the lab writes: an object has the key \"status\" twice",
        ),
    ];
    for (file, says) in cases {
        let output = record_here(&dir, file, false);
        let stderr = &output.stderr;
        assert_eq!(output.code, 2, "{file}: {stderr}");
        assert_eq!(output.stdout, "", "{file}: nothing on stdout");
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

/// A file larger than any report (a sparse one, so it takes no disk) is refused for its size,
/// exit 2, unread; a device (`/dev/zero`, which has no end) and a FIFO with no writer are
/// refused at once, for what they are, rather than read or waited on.
#[cfg(unix)]
#[test]
fn only_a_regular_file_of_a_reports_size_is_read() {
    let dir = scratch("not-regular");
    let large = std::fs::File::create(dir.join("large.json")).expect("created");
    large.set_len(17 << 20).expect("a sparse file");
    let fifo = dir.join("fifo.json");
    let made = Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo makes a FIFO");
    let cases = [
        ("large.json", "is larger than any lab report"),
        ("/dev/zero", "is a device, not a report file"),
        ("fifo.json", "is a FIFO (a named pipe), not a report file"),
    ];
    for (file, says) in cases {
        let mut child = Command::new(LAB)
            .args(["record", file])
            .current_dir(&dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let (sent, done) = std::sync::mpsc::channel();
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        std::thread::spawn(move || {
            let read = |pipe: Option<std::process::ChildStdout>| {
                let mut out = Vec::new();
                let _ = std::io::Read::read_to_end(&mut pipe.expect("piped"), &mut out);
                out
            };
            let out = read(stdout);
            let mut err = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stderr.expect("piped"), &mut err);
            let _ = sent.send((out, err));
        });
        // A failure guard: a record that blocks on the FIFO is unblocked by a writer, then
        // fails the test.
        let Ok((out, err)) = done.recv_timeout(std::time::Duration::from_secs(10)) else {
            let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
            let _ = child.kill();
            let _ = child.wait();
            panic!("record {file} blocked");
        };
        let status = child.wait().expect("the binary ends");
        let stderr = text(&err);
        assert_eq!(status.code(), Some(2), "{file}: {stderr}");
        assert_eq!(text(&out), "", "{file}: nothing on stdout");
        assert!(
            stderr.starts_with(&format!("error: {file} {says}")),
            "{file}: {stderr}"
        );
    }
}

/// A report recorded from a real run, from `tests/fixtures/`.
fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("a recorded fixture");
    serde_json::from_str(&text).expect("a fixture is JSON")
}

/// Sets the value at `pointer`.
fn set(report: &mut Value, pointer: &str, value: Value) {
    *report
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("{pointer} resolves")) = value;
}

/// The run told as one that failed, saying `failure`.
fn failed(report: &mut Value, failure: &str) {
    set(report, "/matches_model", json!(false));
    report["failure"] = json!(failure);
}

/// The array at `pointer`.
fn list<'a>(report: &'a mut Value, pointer: &str) -> &'a mut Vec<Value> {
    let found = report.pointer_mut(pointer);
    let found = found.unwrap_or_else(|| panic!("{pointer} resolves"));
    found.as_array_mut().expect("a list")
}

/// The ledger at `pointer` with events `i` and `i + 1`, which name `requests`, told in the other
/// order, each place keeping its seq.
fn swap_events<'a>(
    report: &'a mut Value,
    pointer: &str,
    i: usize,
    requests: [&str; 2],
) -> &'a mut Vec<Value> {
    let events = list(report, pointer);
    let named = [&events[i]["request"], &events[i + 1]["request"]];
    assert_eq!(named, requests.map(|r| json!(r)).each_ref(), "{pointer}");
    events.swap(i, i + 1);
    let (first, second) = events.split_at_mut(i + 1);
    std::mem::swap(&mut first[i]["seq"], &mut second[0]["seq"]);
    events
}

/// In [`SESSION`], the room's R2, held at the room's gate (seq 15), told as given up: listed
/// without an answer after event `after`, its work cancelled where it left the section (seq 18),
/// as the ledger then counts it.
fn r2_gave_up(report: &mut Value, after: u64) {
    let requests = list(report, "/room_requests");
    let r2 = requests.iter_mut().find(|r| r["request"] == "R2");
    *r2.expect("R2 is listed") = json!({
        "request": "R2", "route": "/slow", "run": 1, "mode": "partitioned",
        "error": "the student gave up before the answer came", "after_event": after,
    });
    let events = list(report, "/runs/0/policies/0/work_events");
    let left = events.iter_mut().find(|e| e["seq"] == 18);
    let left = left.expect("R2's work left at seq 18");
    assert_eq!(
        (&left["request"], &left["event"]),
        (&json!("R2"), &json!("finished"))
    );
    left["cancelled"] = json!(true);
    set(report, "/runs/0/policies/0/ledger/slow/cancelled", json!(1));
}

/// An edit of a real report, and what the record must say of it.
type Edit = (&'static str, &'static str, fn(&mut Value), &'static str);

const DEFAULT: &str = "slots-2-held-2.json";
const HELD_1: &str = "slots-2-held-1.json";
/// Saved from `isolation-lab classroom --mode partitioned --slots 3 --held 1`, driven through
/// its page's control API as `a_room_request_is_held_and_then_answered` in `tests/lab/classroom.rs`
/// drives it, and ended with SIGINT. (Since then the classroom's report counts runs from 1, as
/// its page does, and counts the connections it refused: both fixtures were brought to that
/// shape by adding 1 to each `run` and a `connections_refused` of 0.)
const SESSION: &str = "classroom-partitioned-3-1.json";
/// A genuine session of `--mode both --slots 3 --held 1` (`isolation-lab classroom`): the room's
/// requests in the shared policy, a room gate closed and opened there; none in the partitioned.
const ROOM_GATE: &str = "classroom-both-3-1-room-gate.json";
/// A genuine session of `--server threaded --mode shared --slots 3 --held 1`: the room's R2 held
/// at a room gate, its student gone, its thread blocked there until the gate opened.
const THREADED_ROOM_GATE: &str = "classroom-threaded-shared-3-1-room-gate.json";
/// A genuine session of `--mode both --slots 3 --held 1`, then a new run of `shared 2 1`: in
/// each of the three policies, after the release, a room gate closed, a room request held there
/// and the gate opened (R1 in run 1's shared, R2 in its partitioned, R3 in run 2).
const TWO_RUNS: &str = "classroom-two-runs-room-gates.json";
/// A genuine session of `--mode both`, closed while its shared policy was held at S1.
const CLOSED_MID_RUN: &str = "session-closed-mid-run.json";
/// A genuine session of `--mode partitioned --slots 3 --held 1 --work spawn-blocking`: the
/// room's R1 held after F1's answer, before the release; two room gates after it, the second
/// closed as the first opened.
const SPAWNED_SESSION: &str = "classroom-spawn-blocking-partitioned-3-1.json";
/// A genuine session of `--mode partitioned --slots 3 --held 1 --work spawn-blocking
/// --blocking-threads 1`, driven through its control API: the sequence to its end, New run, the
/// sequence again, then the room opened and its gate closed; the room's R1 and R2 sent to /slow
/// and R3 to /fast; the gate opened, and Finish. R1 held the one blocking thread at the room's
/// gate, R2 waiting for it, until the gate opened.
const ONE_THREAD_SESSION: &str = "classroom-spawn-blocking-one-thread-room-gate.json";
/// A genuine session of `--mode shared --slots 3 --held 1 --workers current-thread`, driven as
/// [`ONE_THREAD_SESSION`] in one run: the front on a current-thread runtime of its own, the
/// room's R1 and R2 held at the room's gate, each in the poll that admitted it.
const OWN_THREAD_SESSION: &str = "classroom-own-current-thread-room-gate.json";
/// A genuine session of `--mode shared --slots 2 --held 1 --work own-runtime --workers 1`: the
/// sequence to its end, the room's gate closed, R1 sent to /slow and its student gone while it
/// was held there, R2 sent to /slow, the gate opened, Finish. R1's wait kept the slow runtime's
/// one worker blocked at the room's gate until it opened; R2 started only then.
const GAVE_UP_SESSION: &str = "classroom-own-runtime-gave-up-at-room-gate.json";
/// A genuine session of `--mode shared --slots 4 --held 1 --work own-runtime --workers 1`: the
/// sequence to its end, the room's gate closed, R1 R2 R3 sent to /slow, the gate opened, Finish.
/// R2 and R3 waited for the slow runtime's one worker, and started in that order.
const QUEUED_SESSION: &str = "classroom-own-runtime-queued-room-work.json";
/// A genuine session of `--mode shared --slots 4 --held 1 --work spawn-blocking`: the sequence to
/// its end, the room's gate closed, R1 R2 to /slow and R3 to /fast, R1's student gone, the gate
/// opened; closed again, R4 to /slow and R5 to /fast, opened, Finish.
const ROOM_FAST_SESSION: &str = "classroom-spawn-blocking-room-fast.json";
/// A genuine session of `--work block` (one worker, `--mode both --slots 2 --held 2`): Run to
/// end, then Finish. F1 is left unread behind S1 until the gate opens, so it is first decided
/// after.
const BLOCKED_SESSION: &str = "classroom-block-both-2-2.json";
/// A genuine session of `--mode shared` under `prlimit --nofile=10`: Next pressed once, its
/// policy's server could not bind, then Finish.
const NEVER_STARTED: &str = "session-never-started.json";

/// A genuine run of `--mode both --slots 2 --held 2 --work block` under a descriptor limit: S2
/// seen unread behind S1 on the one worker, then a stall at the release.
const BLOCKED_STALL: &str = "block-out-of-descriptors.json";
/// A genuine run of `--work spawn-blocking` whose S2 could not connect: S1 held, then the run
/// failed in S2's step.
const S2_UNCONNECTED: &str = "spawn-blocking-s2-out-of-descriptors.json";

/// Edits a reviewer makes to a real report (the default run's, `--held 1`'s, a classroom
/// session's), each with the words its record must name it with. In the default run, shared
/// refuses F1 (`/policies/0/responses/0`) and partitioned refuses S2
/// (`/policies/1/admissions/1`); under `--held 1`, shared F1 takes the second of 2 permits.
const EDITS: &[Edit] = &[
    (
        "slow work started while the one thread waits, its student gone, at the room's gate",
        GAVE_UP_SESSION,
        |r| set(r, "/room_gates/0/opened_after_event", json!(20)),
        "R2 is started at seq 20, but the slow work's one thread is already running R1, \
         blocked at a closed room gate: none is free",
    ),
    (
        "queued room work started out of turn on the one thread",
        QUEUED_SESSION,
        |r| {
            let events = list(r, "/runs/0/policies/0/work_events");
            assert_eq!(
                (&events[19]["request"], &events[20]["request"]),
                (&json!("R2"), &json!("R3"))
            );
            events[19]["request"] = json!("R3");
            events[20]["request"] = json!("R2");
        },
        "R3 is started at seq 20, but R2, admitted before it (seq 18), had neither started nor \
         left: the slow work's one thread takes queued work first in, first out",
    ),
    (
        "another request's work left between a /fast request's admission and its leaving",
        ROOM_FAST_SESSION,
        |r| {
            let events = swap_events(r, "/runs/0/policies/0/work_events", 19, ["R3", "R1"]);
            (events[19]["active_after"], events[20]["active_after"]) = (json!(2), json!(1));
            let rooms = list(r, "/room_requests");
            let r3 = rooms.iter_mut().find(|q| q["request"] == "R3");
            r3.expect("R3 is the room's")["after_event"] = json!(21);
        },
        "R3 is admitted at seq 19, and the next, seq 20, is R1's finished; but on the async front \
         on a runtime of its own that runs its connections on one thread",
    ),
    (
        "a second blocking thread started while the one thread waits at the room's gate",
        ONE_THREAD_SESSION,
        |r| {
            // R2's start moved before R3's finish, while the room's gate (opened after event
            // 18) still held R1 on the one thread; R3 answered after its finish.
            swap_events(r, "/runs/1/policies/0/work_events", 17, ["R3", "R2"]);
            let rooms = list(r, "/room_requests");
            let r3 = rooms.iter_mut().find(|q| q["request"] == "R3");
            r3.expect("R3 is the room's")["after_event"] = json!(19);
        },
        "R2 is started at seq 18, but the slow work's one thread is already running R1, \
         blocked at a closed room gate: none is free",
    ),
    (
        "another request admitted between a request's admission and its hold on one thread",
        OWN_THREAD_SESSION,
        |r| {
            let events = swap_events(r, "/runs/0/policies/0/work_events", 11, ["R1", "R2"]);
            events[12]["active_after"] = json!(2);
        },
        "R1 is admitted at seq 11, and the next, seq 12, is R2's admitted; but on the async \
         front on a runtime of its own that runs its connections on one thread a request is \
         held, or its work leaves, in the poll that admits it",
    ),
    (
        "a stall within another limit than the run's safety timeout",
        DEFAULT,
        |r| {
            failed(
                r,
                "partitioned: stalled: no admission decision for S1 within 4 s",
            )
        },
        "the failure says partitioned stalled, but not within 5 s",
    ),
    (
        "a setup failure said of a run that served",
        DEFAULT,
        |r| {
            failed(
                r,
                "partitioned: binding 127.0.0.1:0: Too many open files (os error 24)",
            )
        },
        "the failure says partitioned could not start (binding 127.0.0.1:0), but it records a \
         server, work events or responses",
    ),
    (
        "a heartbeat failure on a front with no runtime of its own",
        DEFAULT,
        |r| {
            failed(
                r,
                "partitioned: the front's own runtime stopped before it ran its heartbeat",
            )
        },
        "has no runtime of its own to run one",
    ),
    (
        "the snapshot after F1 dropped, the callers noted with it kept",
        DEFAULT,
        |r| {
            set(
                r,
                "/policies/0/observer_after_fast_before_release",
                json!(null),
            )
        },
        "the report records slow_callers_pending_before_release but not \
         observer_after_fast_before_release: F1's step writes both at one moment",
    ),
    (
        "a caller failure of a request --held never sends",
        DEFAULT,
        |r| {
            failed(
                r,
                "partitioned: S3: GET /slow failed: connection closed before message completed",
            )
        },
        "the failure says S3's request failed, yet partitioned stopped before the lab sent it: \
         --held 2 sends S1 to S2",
    ),
    (
        "a room gate closed while the release still waited for an answer",
        TWO_RUNS,
        |r| set(r, "/room_gates/0/closed_after_event", json!(5)),
        "it names event 5, when the release was under way (the gate opened at seq 5, the last \
         answer it collects came after event 6)",
    ),
    (
        "a room gate closed between a request's admission and its held, on the async front",
        SESSION,
        |r| set(r, "/room_gates/0/closed_after_event", json!(14)),
        "R2 is admitted at seq 14, and the room's gate 1 closed after event 14, before R2's next \
         event; but on the async front on the lab's own thread a request is held, or its work \
         leaves, in the poll that admits it",
    ),
    (
        "a room request listed among the sequence's responses",
        SESSION,
        |r| {
            let room = json!({ "request": "R1", "route": "/slow", "status": 200,
                               "body": { "request": "R1", "pool": "slow" },
                               "phase": "after_release", "after_event": 8 });
            list(r, "/runs/0/policies/0/responses").push(room);
        },
        "R1 is listed among the sequence's responses, but the room's requests are listed only in \
         room_requests",
    ),
    (
        "a room request given up with a body",
        THREADED_ROOM_GATE,
        |r| r["room_requests"][0]["body"] = json!({ "request": "R1", "pool": "shared" }),
        "R1 is listed with a body but no answer",
    ),
    (
        "a room request given up after its work was cancelled, on the async front",
        SESSION,
        |r| r2_gave_up(r, 18),
        "R2 is listed as given up after event 18, but its work was cancelled at seq 18: on the \
         async front on the lab's own thread a student who gives up is listed before the front \
         can see the closed connection and cancel the work",
    ),
    (
        "a room request without an answer, for a reason no classroom gives",
        THREADED_ROOM_GATE,
        |r| r["room_requests"][0]["error"] = json!("the server exploded"),
        "R1 is listed without an answer, for a reason no classroom gives",
    ),
    (
        "a policy that differs, in a run whose failure says the next was not run",
        ROOM_GATE,
        |r| {
            list(r, "/runs/0/policies").truncate(1);
            list(r, "/runs/0/policies/0/responses").retain(|x| x["request"] != "F-after");
            let run = r.pointer_mut("/runs/0").expect("a run");
            failed(run, "partitioned: not run, the session ended before it");
            set(r, "/matches_model", json!(false));
        },
        "it differs from the model, but the run's failure is another policy's",
    ),
    (
        "a room gate in a policy whose server never started",
        NEVER_STARTED,
        |r| {
            let gate = json!({ "run": 1, "mode": "shared", "generation": 1,
                               "closed_after_event": 0, "opened_after_event": 0 });
            list(r, "/room_gates").push(gate);
        },
        "it closed in run 1's shared policy, whose own gate never opened",
    ),
    (
        "a run's failure said of a policy its mode does not run",
        SESSION,
        |r| {
            let run = r.pointer_mut("/runs/0").expect("a run");
            failed(run, "shared: not run, the session ended before it");
            set(r, "/matches_model", json!(false));
        },
        "the failure is said of no policy --mode partitioned runs",
    ),
    (
        "a run's failure said of no policy",
        SESSION,
        |r| {
            failed(
                r.pointer_mut("/runs/0").expect("a run"),
                "the run was unplugged",
            );
            set(r, "/matches_model", json!(false));
        },
        "the failure is said of no policy --mode partitioned runs",
    ),
    (
        "a run's failure told as the session's, in the record's words",
        SESSION,
        |r| {
            failed(
                r,
                "run 1: partitioned: stalled: no admission decision for S1 within 5 s",
            )
        },
        "the session's failure is told as run 1's",
    ),
    (
        "F1's answer placed after the moment the snapshot after it shows",
        SPAWNED_SESSION,
        |r| {
            let responses = list(r, "/runs/0/policies/0/responses");
            let f1 = responses.iter_mut().find(|x| x["request"] == "F1");
            f1.expect("F1 is answered")["after_event"] = json!(8);
        },
        "observer_after_fast_before_release disagrees with the ledger",
    ),
    (
        "a refusal's answer placed after the moment the snapshot before F1 shows",
        DEFAULT,
        |r| {
            let responses = list(r, "/policies/1/responses");
            let s2 = responses.iter_mut().find(|x| x["request"] == "S2");
            s2.expect("S2 is answered")["after_event"] = json!(4);
        },
        "observer_before_fast disagrees with the ledger",
    ),
    (
        "a foreign request refused where every connection was the lab's client's",
        THREADED_ROOM_GATE,
        |r| {
            set(
                r,
                "/runs/0/policies/0/server/foreign_requests_refused",
                json!(1),
            )
        },
        "the server refused 1 request without the run's token, but it accepted only 3 \
         connections, and at seq 5 R1 S1 F1 are on that many at once",
    ),
    (
        "a response listed twice",
        DEFAULT,
        |r| {
            let responses = list(r, "/policies/0/responses");
            let first = responses[0].clone();
            responses.push(first);
        },
        "response is listed a second time: each request is sent once, and its reply recorded once",
    ),
    (
        "held callers noted out of the order they were sent",
        DEFAULT,
        |r| list(r, "/policies/0/slow_callers_pending_before_release").reverse(),
        "slow_callers_pending_before_release lists S2 S1, but the lab notes its held callers in \
         the order it sent them: S1 S2",
    ),
    (
        "more connection tasks aborted than connections accepted",
        DEFAULT,
        |r| set(r, "/policies/0/server/connection_tasks_aborted", json!(99)),
        "99 connection tasks were aborted, but the server accepted",
    ),
    (
        "the gate's opening marked cancelled",
        DEFAULT,
        |r| {
            let events = list(r, "/policies/0/work_events");
            let opened = events.iter_mut().find(|e| e["event"] == "gate_opened");
            opened.expect("the gate opens")["cancelled"] = json!(true);
        },
        "the gate's opening says work was cancelled; only work that leaves is",
    ),
    (
        "more client tasks aborted than callers",
        DEFAULT,
        |r| set(r, "/policies/0/client_tasks_aborted", json!(9)),
        "client_tasks_aborted is 9, but the run starts at most 3 callers",
    ),
    (
        "a run's failure told as the session's",
        SESSION,
        |r| {
            let stall = "partitioned: stalled: no admission decision for S1 within 5 s";
            failed(r, stall);
        },
        "the session's failure is said of the partitioned policy, but a session fails only as it \
         closes",
    ),
    (
        "a session of no run said to match",
        SESSION,
        |r| {
            for list in ["runs", "room_requests", "room_gates"] {
                r[list] = json!([]);
            }
        },
        "the session says it matched the policy model, but it made no run",
    ),
    (
        "a blocked classroom run's held work and handlers counted as none before F1, which is \
         decided only after the gate opened",
        BLOCKED_SESSION,
        |r| {
            let before = "/runs/0/policies/1/resources/before_fast";
            set(r, &format!("{before}/held_at_gate"), json!(0));
            set(r, &format!("{before}/connection_handlers"), json!(0));
        },
        "resources.before_fast counts 0 requests held at the gate, but from observer_before_fast \
         to the gate's opening the ledger holds 1: it is counted in between",
    ),
    (
        "a classroom run's held work counted below anything the ledger held after the snapshot",
        ROOM_GATE,
        |r| {
            let before = "/runs/0/policies/0/resources/before_fast";
            set(r, &format!("{before}/held_at_gate"), json!(1));
        },
        "resources.before_fast counts 1 request held at the gate, but from observer_before_fast \
         to F1's decision the ledger holds 2: it is counted in between",
    ),
    (
        "the room's numbers going back from one policy of a run to the next",
        TWO_RUNS,
        |r| {
            let swapped = r.to_string().replace("\"R1\"", "\"R@\"");
            let swapped = swapped
                .replace("\"R2\"", "\"R1\"")
                .replace("\"R@\"", "\"R2\"");
            *r = serde_json::from_str(&swapped).expect("JSON");
        },
        "R2 reached run 1's shared policy, but R1, numbered before it, reached its partitioned \
         policy, which runs after it",
    ),
    (
        "a run of the session with no policy",
        SESSION,
        |r| {
            let mut run = r["runs"][0].clone();
            run["policies"] = json!([]);
            failed(
                &mut run,
                "partitioned: not run, the session ended before it",
            );
            list(r, "/runs").push(run);
            set(r, "/matches_model", json!(false));
        },
        "run 2 has no policy, but a run is reported once a Next was pressed in it, and the first \
         Next opens its first policy (partitioned), which it keeps",
    ),
    (
        "two runs of a session with different safety timeouts",
        TWO_RUNS,
        |r| set(r, "/runs/1/runner/safety_timeout_ms", json!(60_000)),
        "run 2 has a safety timeout of 60000 ms, but run 1 of 5000 ms",
    ),
    (
        "the room's gates listed out of the order the session closed them",
        TWO_RUNS,
        |r| list(r, "/room_gates").reverse(),
        "a room gate of run 1's partitioned policy is listed after one of run 2's shared policy",
    ),
    (
        "a room gate closed and opened in the middle of a probe's step",
        TWO_RUNS,
        |r| {
            let gate = json!({ "run": 1, "mode": "shared", "generation": 2,
                               "closed_after_event": 10, "opened_after_event": 12 });
            list(r, "/room_gates").insert(1, gate);
        },
        "it names event 10, when S-after's step was under way (decided at seq 10, answered after \
         event 11): the instructor's orders run between the sequence's steps",
    ),
    (
        "fewer connections accepted than the room's and the lab's requests at once",
        THREADED_ROOM_GATE,
        |r| {
            set(
                r,
                "/runs/0/policies/0/server/connections_accepted",
                json!(2),
            )
        },
        "the server accepted 2 connections, but at seq 5 R1 S1 F1 are on connections at once: a \
         connection carries one request at a time",
    ),
    (
        "a room gate in a run closed before its release",
        CLOSED_MID_RUN,
        |r| {
            let gate = json!({ "run": 1, "mode": "shared", "generation": 1,
                               "closed_after_event": 7, "opened_after_event": 9 });
            list(r, "/room_gates").push(gate);
        },
        "but a room gate of it closed, which only the release makes possible",
    ),
    (
        "a run that ran to its end told as closed before S1",
        SESSION,
        |r| {
            let closed = "partitioned: the run was closed before its next step: send S1 and wait \
                          for its admission decision";
            failed(r.pointer_mut("/runs/0").expect("a run"), closed);
            set(r, "/matches_model", json!(false));
        },
        "the failure says partitioned was closed before its step \"send S1 and wait for its \
         admission decision\", the first it did not take, but it records S1, which that step \
         sends",
    ),
    (
        "a run closed before S2 told as closed before its last probe",
        CLOSED_MID_RUN,
        |r| {
            let closed = "shared: the run was closed before its next step: send the probe F-after";
            r["runs"][0]["failure"] = json!(closed);
        },
        "the failure says shared was closed before its step \"send the probe F-after\", the \
         first it did not take, but it records none of F1's step, which comes before it",
    ),
    (
        "a run of the command line told as closed early",
        DEFAULT,
        |r| {
            let closed = "partitioned: the run was closed before its next step: send the probe \
                          F-after";
            failed(r, closed);
        },
        "the failure says partitioned was closed before its next step, but only a classroom \
         closes a run early",
    ),
    (
        "a stall at S1 in a run that went on to its end",
        DEFAULT,
        |r| {
            failed(
                r,
                "partitioned: stalled: no admission decision for S1 within 5 s",
            )
        },
        "the failure says partitioned stalled in its step \"send S1 and wait for its admission \
         decision\", which ends the sequence, but it records S2, which a later step sends",
    ),
    (
        "a difference from the model made up for a run that matched",
        DEFAULT,
        |r| {
            let differs = "partitioned: observations differ from the policy model: F1: expected \
                           HTTP 200 before release, received HTTP 503 before release";
            failed(r, differs);
        },
        "the failure says partitioned's observations differ from the policy model, but the \
         re-check of its evidence finds no difference",
    ),
    (
        "an attempt with no decision",
        DEFAULT,
        |r| {
            let attempts = "/policies/0/ledger/shared/attempts";
            let more = r
                .pointer(attempts)
                .and_then(Value::as_u64)
                .expect("a count")
                + 1;
            set(r, attempts, json!(more));
        },
        "attempts, but its work events decide",
    ),
    (
        "callers left unjoined",
        DEFAULT,
        |r| set(r, "/policies/0/client_threads_stopped", json!(false)),
        "the report says some of the lab's callers were not joined",
    ),
    (
        "no OS thread counted before F1",
        DEFAULT,
        |r| set(r, "/policies/0/resources/before_fast/os_threads", json!(0)),
        "resources.before_fast counts 0 OS threads, but the lab counts them from inside its \
         process, on one of them",
    ),
    (
        "a room request's work cancelled, and its answer kept",
        SESSION,
        |r| {
            let events = list(r, "/runs/0/policies/0/work_events");
            let r3 = events
                .iter_mut()
                .find(|e| e["request"] == "R3" && e["event"] == "finished");
            r3.expect("R3 finishes")["cancelled"] = json!(true);
            set(r, "/runs/0/policies/0/ledger/fast/cancelled", json!(1));
        },
        "R3 was answered 200, but its work was cancelled (seq 17): work that is dropped sends no \
         answer",
    ),
    (
        "a caller's failure made up for a request that was answered",
        DEFAULT,
        |r| {
            let failure = "partitioned: F1: GET /fast failed: connection closed before message \
                           completed";
            failed(r, failure);
        },
        "the failure says F1's request failed, yet partitioned records its response",
    ),
    (
        "a policy that ran and matched taken out, and the failure said of it",
        DEFAULT,
        |r| {
            list(r, "/policies").remove(1);
            let failure = "partitioned: starting the front's own runtime on 127.0.0.1:0: Too \
                           many open files (os error 24)";
            failed(r, failure);
        },
        "the failure is the partitioned policy's, but the report has no partitioned policy",
    ),
    (
        "a failure of the first policy, the second one run after it",
        DEFAULT,
        |r| {
            failed(
                r,
                "shared: stalled: no admission decision for S1 within 5 s",
            );
        },
        "the failure is the shared policy's, yet another policy follows it",
    ),
    (
        "a room gate on a policy the run does not have",
        SESSION,
        |r| set(r, "/room_gates/0/mode", json!("shared")),
        "it names the shared policy of run 1, which has no such policy",
    ),
    (
        "a room gate after the run's last event",
        SESSION,
        |r| set(r, "/room_gates/0/closed_after_event", json!(500)),
        "it names events after seq 18, where its run's ledger ends",
    ),
    (
        "a room request gone through the room's gate before it opened",
        SESSION,
        |r| set(r, "/room_gates/0/opened_after_event", json!(18)),
        "R2 finishes at seq 18, not cancelled, but it met the room's gate that closed after event \
         13 and opened only after event 18: the room's /slow work waits there until it opens",
    ),
    (
        "a room request's blocked thread cancelled at the room's gate",
        THREADED_ROOM_GATE,
        |r| {
            set(r, "/room_gates/0/opened_after_event", json!(16));
            r["runs"][0]["policies"][0]["work_events"][13]["cancelled"] = json!(true);
            set(r, "/runs/0/policies/0/ledger/shared/cancelled", json!(1));
        },
        "R2 finishes at seq 14, cancelled, but it was held blocking its thread at the room's gate \
         that closed after event 11 and opened after event 16: nothing wakes that thread until the \
         gate opens, and then its work is done",
    ),
    (
        "a room request held at a second room gate gone through it before it opened",
        ROOM_GATE,
        |r| {
            set(r, "/room_gates/0/opened_after_event", json!(14));
            let second = json!({ "run": 1, "mode": "shared", "generation": 2,
                                 "closed_after_event": 14, "opened_after_event": 18 });
            list(r, "/room_gates").push(second);
        },
        "R3 finishes at seq 18, not cancelled, but it met the room's gate that closed after event \
         14 and opened only after event 18",
    ),
    (
        "a room gate that never opened",
        ROOM_GATE,
        |r| set(r, "/room_gates/0/opened_after_event", Value::Null),
        "it never opened, but the session opens the room's gate as it closes a run, whichever way \
         the run ends",
    ),
    (
        "a room request with both an answer and an error",
        SESSION,
        |r| r["room_requests"][0]["error"] = json!("the student gave up before the answer came"),
        "R1 has both an answer and an error: the classroom lists one or the other",
    ),
    (
        "a room request without an answer listed after its ledger ends",
        THREADED_ROOM_GATE,
        |r| set(r, "/room_requests/0/after_event", json!(999)),
        "R1 is listed without an answer after event 999, but the ledger of runs[0] (shared) ends \
         at seq 16",
    ),
    (
        "a room request's number skipped",
        SESSION,
        |r| {
            let renumbered = r.to_string().replace("\"R3\"", "\"R4\"");
            *r = serde_json::from_str(&renumbered).expect("JSON");
        },
        "no R3 is listed, but a later number is: the classroom numbers the room's requests 1, 2, \
         … and lists each, answered or not",
    ),
    (
        "a room request answered abandoned in a run whose gate opened",
        SESSION,
        |r| {
            set(r, "/room_requests/0/status", json!(503));
            let body = json!({ "error": "work_abandoned", "pool": "slow", "request": "R1" });
            set(r, "/room_requests/0/body", body);
        },
        "R1 is answered that its work was abandoned, but the partitioned policy's gate was not \
         abandoned: only a failed run's close abandons work, at a gate that never opened",
    ),
    (
        "a session's run that skipped its first policy",
        ROOM_GATE,
        |r| {
            let run = r.pointer_mut("/runs/0").expect("a run");
            run["policies"] = json!([]);
            run["failure"] = json!("partitioned: not run, the session ended before it");
            run["matches_model"] = json!(false);
            r["matches_model"] = json!(false);
            r["room_gates"] = json!([]);
            r["room_requests"] = json!([]);
        },
        "the failure says the partitioned policy was not run, but the report has no shared policy \
         either, which runs before it: a run cut short names the first policy it did not open",
    ),
    (
        "work answered abandoned that left done",
        DEFAULT,
        |r| {
            let responses = list(r, "/policies/0/responses");
            let s1 = responses.iter_mut().find(|x| x["request"] == "S1");
            let s1 = s1.expect("S1 is answered");
            s1["status"] = json!(503);
            s1["body"] = json!({ "error": "work_abandoned", "pool": "shared", "request": "S1" });
        },
        "S1 is answered that its work was abandoned, but the shared policy's gate was not \
         abandoned: only a failed run's close abandons work, at a gate that never opened",
    ),
    (
        "work answered abandoned that left done, its gate told as abandoned",
        DEFAULT,
        |r| {
            set(r, "/policies/0/final_state/gate", json!("abandoned"));
            let responses = list(r, "/policies/0/responses");
            let s1 = responses.iter_mut().find(|x| x["request"] == "S1");
            let s1 = s1.expect("S1 is answered");
            s1["status"] = json!(503);
            s1["body"] = json!({ "error": "work_abandoned", "pool": "shared", "request": "S1" });
        },
        "S1 is answered that its work was abandoned, but its work left the section done, not \
         cancelled: abandoned work leaves cancelled",
    ),
    (
        "a refused caller's connection left uncounted",
        DEFAULT,
        |r| {
            set(
                r,
                "/policies/1/resources/before_fast/connection_handlers",
                json!(1),
            )
        },
        "resources.before_fast counts 1 connection handler, but observer_before_fast, taken just \
         before, has 1 permit taken, each kept by the handler of its request's connection until \
         its work leaves, and a refused caller's connection left open for the next caller",
    ),
    (
        "a ledger rule stated twice, holding and broken",
        DEFAULT,
        |r| {
            let broken = json!({ "rule": "admitted = finished", "holds": false });
            list(r, "/policies/0/ledger/shared/invariants").push(broken);
        },
        "the ledger of the shared pool states the rule \"admitted = finished\" twice; its audit \
         states each rule once",
    ),
    (
        "the room's answers listed out of the order they came",
        SESSION,
        |r| list(r, "/room_requests").swap(1, 2),
        "R3 is listed after a request of run 1's partitioned policy placed after event 18, but it \
         is placed after event 17: the room's requests are listed as their answers came",
    ),
    (
        "a room gate numbered 0",
        SESSION,
        |r| set(r, "/room_gates/0/generation", json!(0)),
        "it is generation 0, but it is room gate 1 of run 1's partitioned policy: a run's room \
         gates are numbered 1, 2, … in the order they closed",
    ),
    (
        "a classroom run's held work counted beyond what the room added",
        ROOM_GATE,
        |r| {
            let before = "/runs/0/policies/1/resources/before_fast";
            set(r, &format!("{before}/held_at_gate"), json!(2));
            set(r, &format!("{before}/connection_handlers"), json!(2));
        },
        "resources.before_fast counts 2 requests held at the gate, but from observer_before_fast \
         to F1's decision the ledger holds 1: it is counted in between",
    ),
    (
        "foreign requests refused on no connection of their own",
        DEFAULT,
        |r| set(r, "/policies/0/server/foreign_requests_refused", json!(3)),
        "the server refused 3 requests without the run's token, but it accepted only 3 \
         connections, as many as the lab's own callers had open when F1 was sent, and those send \
         the token on every request: a foreign request comes on a connection of its own",
    ),
    (
        "a room gate listed twice",
        SESSION,
        |r| {
            let gate = r["room_gates"][0].clone();
            list(r, "/room_gates").push(gate);
        },
        "it closed while the room's gate before it was still closed",
    ),
    (
        "no OS thread counted",
        DEFAULT,
        |r| set(r, "/policies/0/resources/before_fast/os_threads", json!(0)),
        "resources.before_fast counts 0 OS threads, but the sequence's thread alone would make at \
         least 1",
    ),
    (
        "a refusal while a permit is free",
        HELD_1,
        |r| set(r, "/policies/0/work_events/2/event", json!("refused")),
        "F1 is refused at seq 3 with 1 of the shared pool's 2 permits taken: a request is \
         refused only when no permit is free",
    ),
    (
        "S2 admitted before S1 was held",
        DEFAULT,
        |r| {
            set(r, "/policies/0/work_events/1/request", json!("S2"));
            set(r, "/policies/0/work_events/1/event", json!("admitted"));
            set(r, "/policies/0/work_events/1/active_after", json!(2));
            set(r, "/policies/0/work_events/2/request", json!("S1"));
            set(r, "/policies/0/work_events/2/event", json!("held"));
            set(r, "/policies/0/work_events/2/active_after", json!(2));
        },
        "S2 is decided at seq 2, but the lab sends S2 only once S1, sent before it, is held, \
         refused or queued for a thread, and the ledger has that at seq 3",
    ),
    (
        "responses listed in another order than they came",
        DEFAULT,
        |r| list(r, "/policies/0/responses").reverse(),
        "responses are listed as they arrive",
    ),
    (
        "a room request in the ledger of a policy it did not reach",
        SESSION,
        |r| set(r, "/room_requests/1/mode", json!("shared")),
        "R3 is in the ledger of run 1 (partitioned), but it reached run 1 (shared): a room's \
         request reaches one server",
    ),
    (
        "a room's /slow request let through the closed gate",
        SESSION,
        |r| {
            set(
                r,
                "/runs/0/policies/0/work_events/1/event",
                json!("finished"),
            )
        },
        "R1 finishes at seq 2, not cancelled, before the gate opened: /slow work waits at the \
         closed gate until it opens",
    ),
    (
        "fewer connections accepted than callers waiting",
        DEFAULT,
        |r| set(r, "/policies/0/server/connections_accepted", json!(2)),
        "the server accepted 2 connections, but 2 slow callers were still waiting, each on its \
         own connection, when F1 was sent on another: at least 3",
    ),
    (
        "a classroom run's held work counted below the observer's",
        SESSION,
        |r| {
            set(
                r,
                "/runs/0/policies/0/resources/before_fast/held_at_gate",
                json!(0),
            )
        },
        "resources.before_fast counts 0 requests held at the gate, but from observer_before_fast \
         to F1's decision the ledger holds 2: it is counted in between",
    ),
    (
        "a refusal's 503 moved after the next request",
        DEFAULT,
        |r| set(r, "/policies/1/responses/0/after_event", json!(5)),
        "S2's response arrived after seq 5, but the lab sends F1 only once it has S2's \
         response, and the ledger decides F1 at seq 4",
    ),
    (
        "a front runtime of its own watched, on the usual executor",
        DEFAULT,
        |r| r["policies"][0]["executor"] = json!({ "heartbeat": [], "unread": [], "queued": [] }),
        "the report watches the front's own runtime, but the async front on the lab's usual \
         executor runs on none of its own",
    ),
    (
        "a pool the policy does not have, in the final state",
        DEFAULT,
        |r| r["policies"][0]["final_state"]["active_work"]["slow"] = json!(1),
        "it counts a slow pool, which shared does not have",
    ),
    (
        "a pool the policy does not have, among the permits back",
        DEFAULT,
        |r| r["policies"][1]["final_state"]["available_permits"]["shared"] = json!(2),
        "it counts a shared pool, which partitioned does not have",
    ),
    (
        "the lab's runtime relabelled multi-thread",
        DEFAULT,
        |r| {
            set(
                r,
                "/runner/runtime",
                json!("Tokio 1, multi-thread scheduler"),
            )
        },
        "the runner's runtime is \"Tokio 1, multi-thread scheduler\", but this lab's runs run on \
         \"Tokio 1, current-thread scheduler\"",
    ),
    (
        "F1's 503 reads 200",
        DEFAULT,
        |r| {
            let body = json!({ "request": "F1", "pool": "shared" });
            set(r, "/policies/0/responses/0/status", json!(200));
            set(r, "/policies/0/responses/0/body", body.clone());
            set(
                r,
                "/policies/0/fast_response_before_release/status",
                json!(200),
            );
            set(r, "/policies/0/fast_response_before_release/body", body);
        },
        "F1's evidence says 200 but the ledger shows no fast admission",
    ),
    (
        "a third permit taken from a pool of 2",
        DEFAULT,
        |r| {
            set(r, "/policies/0/work_events/4/event", json!("admitted"));
        },
        "F1 is admitted at seq 5 with every one of the shared pool's 2 permits already taken",
    ),
    (
        "a cancelled handler answered 200",
        DEFAULT,
        |r| r["policies"][0]["work_events"][9]["cancelled"] = json!(true),
        "S-after was answered 200, but its work was cancelled (seq 10)",
    ),
    (
        "another front named",
        DEFAULT,
        |r| set(r, "/runner/front", json!("threaded")),
        "the runner says the threaded front ran, but describes another front's server",
    ),
    (
        "the inputs edited",
        DEFAULT,
        |r| set(r, "/inputs/held", json!(1)),
        "the report says it matched the policy model, but its own evidence does not",
    ),
    (
        "F1's answer before release removed",
        DEFAULT,
        |r| set(r, "/policies/1/fast_response_before_release", json!(null)),
        "F1's response before release is missing, though the run went to its end",
    ),
    (
        "client tasks aborted in a clean run",
        DEFAULT,
        |r| set(r, "/policies/0/client_tasks_aborted", json!(2)),
        "client_tasks_aborted is 2, yet the report records no failure",
    ),
    (
        "a response with no admission",
        DEFAULT,
        |r| {
            let mut stray = r["policies"][1]["responses"][0].clone();
            stray["request"] = json!("S3");
            stray["body"]["request"] = json!("S3");
            list(r, "/policies/1/responses").push(stray);
        },
        "S3 has a response (503) but the ledger shows no admission decision for S3",
    ),
    (
        "an admission with no response",
        DEFAULT,
        |r| {
            list(r, "/policies/0/responses").retain(|x| x["request"] != "S-after");
        },
        "S-after was admitted at seq 9 but no response to it is recorded",
    ),
    (
        "held_by names a request not holding",
        DEFAULT,
        |r| {
            set(r, "/policies/1/admissions/1/held_by", json!(["F1"]));
        },
        "S2's refusal says the slow pool was held by F1, but at that moment the ledger shows it held by S1",
    ),
    (
        "held_by given to an admission",
        DEFAULT,
        |r| {
            r["policies"][0]["admissions"][0]["held_by"] = json!([]);
        },
        "S1's admission says the shared pool was held by none, but only a refusal says who held its pool",
    ),
    (
        "held_by taken from a refusal",
        DEFAULT,
        |r| {
            let f1 = r
                .pointer_mut("/policies/0/admissions/2")
                .expect("F1's refusal");
            f1.as_object_mut().expect("an object").remove("held_by");
        },
        "F1's refusal does not say who held the shared pool, but at that moment the ledger shows it held by S1 S2",
    ),
    (
        "work events out of seq order",
        DEFAULT,
        |r| {
            list(r, "/policies/0/work_events").swap(2, 3);
        },
        "work_events are out of order: seq 4 comes before seq 3",
    ),
    (
        "a gap in the work events",
        DEFAULT,
        |r| {
            for event in list(r, "/policies/0/work_events").iter_mut().skip(5) {
                event["seq"] = json!(event["seq"].as_u64().expect("a seq") + 1);
            }
        },
        "work_events skip from seq 5 to seq 7",
    ),
    (
        "a finished without an admitted",
        DEFAULT,
        |r| {
            set(r, "/policies/0/work_events/8/event", json!("finished"));
        },
        "S-after finishes at seq 9, but was never admitted",
    ),
    (
        "final state not back to capacity",
        DEFAULT,
        |r| {
            set(
                r,
                "/policies/0/final_state/available_permits/shared",
                json!(1),
            );
        },
        "final_state says 1 of the shared pool's 2 permits are back, but its work events return 2",
    ),
    (
        "a snapshot that disagrees with the ledger",
        DEFAULT,
        |r| {
            set(r, "/policies/1/observer_before_fast/refused", json!([]));
        },
        "observer_before_fast disagrees with the ledger",
    ),
    (
        "a body that disagrees with its status",
        DEFAULT,
        |r| {
            set(
                r,
                "/policies/1/responses/0/body",
                json!({ "request": "S2", "pool": "slow" }),
            );
        },
        "S2's response is 503, but its body {\"pool\":\"slow\",\"request\":\"S2\"} is not the one the lab's front sends",
    ),
    (
        "a phase wrong for the gate's opening",
        DEFAULT,
        |r| {
            set(r, "/policies/0/responses/0/phase", json!("after_release"));
        },
        "F1's response is marked after release, but it arrived after seq 5 and the gate opened at seq 6",
    ),
    (
        "a refusal replayed",
        DEFAULT,
        |r| {
            for (seq, event, active) in [(12, "admitted", 1), (13, "finished", 0)] {
                let replayed = json!({ "seq": seq, "request": "S2", "pool": "slow",
                                   "event": event, "active_after": active });
                list(r, "/policies/1/work_events").push(replayed);
            }
        },
        "S2 is admitted at seq 12 after it was already refused at seq 3",
    ),
    (
        "matches_model edited to false",
        DEFAULT,
        |r| {
            set(r, "/matches_model", json!(false));
        },
        "the report says it did not match the policy model, but records no failure",
    ),
    (
        "a model block edited to say it did not match",
        DEFAULT,
        |r| {
            set(r, "/policies/1/model/matches", json!(false));
        },
        "the model block says the run did not match, but lists no difference",
    ),
    (
        "the model's expectations edited",
        DEFAULT,
        |r| {
            set(r, "/policies/0/model/expected/2/status", json!(200));
        },
        "the model block's expectations are not the policy model's for --slots 2 --held 2",
    ),
    (
        "a pool's capacity edited",
        DEFAULT,
        |r| {
            set(r, "/policies/0/pool_capacities/shared", json!(3));
        },
        "its pools hold shared 3, but shared with 2 slots has shared 2",
    ),
    (
        "a route's pool edited",
        DEFAULT,
        |r| {
            set(r, "/policies/1/route_pools/~1fast", json!("slow"));
        },
        "/fast draws from the fast pool in partitioned",
    ),
    (
        "the ledger's account edited",
        DEFAULT,
        |r| {
            set(r, "/policies/0/ledger/shared/refused", json!(0));
        },
        "the ledger's account of the shared pool says refused 0, but its work events give 1",
    ),
    (
        "the peak edited",
        DEFAULT,
        |r| {
            set(r, "/policies/0/peak_active_work/shared", json!(1));
        },
        "peak_active_work of the shared pool is not the peak of its work events, 2",
    ),
    (
        "the gate's opening removed",
        HELD_1,
        |r| {
            set(r, "/policies/0/work_events/4/event", json!("held"));
            set(r, "/policies/0/work_events/4/request", json!("S1"));
        },
        "final_state says the gate is open, but the ledger has no gate_opened event",
    ),
    (
        "a pending caller dropped",
        DEFAULT,
        |r| {
            set(
                r,
                "/policies/0/slow_callers_pending_before_release",
                json!(["S1"]),
            );
        },
        "slow_callers_pending_before_release lists S1, but when the gate opened the ledger held S1 S2",
    ),
    (
        "F1's answer edited in one place only",
        DEFAULT,
        |r| {
            set(
                r,
                "/policies/0/fast_response_before_release/status",
                json!(200),
            );
        },
        "fast_response_before_release says F1 200, but F1's response in responses is 503 before release",
    ),
    (
        "F1's body edited in one place only",
        DEFAULT,
        |r| {
            set(
                r,
                "/policies/0/fast_response_before_release/body/pool",
                json!("fast"),
            );
        },
        "fast_response_before_release says F1's body is {\"error\":\"work_capacity_full\",\"pool\":\"fast\",\"request\":\"F1\"}, but F1's response in responses has the body {\"error\":\"work_capacity_full\",\"pool\":\"shared\",\"request\":\"F1\"}",
    ),
    (
        "a response after the ledger's end",
        DEFAULT,
        |r| {
            set(r, "/policies/0/responses/4/after_event", json!(99));
        },
        "F-after's response arrived after seq 99, but the ledger ends at seq 12",
    ),
    (
        "a response before its work left",
        DEFAULT,
        |r| {
            set(r, "/policies/0/responses/1/after_event", json!(6));
        },
        "S1's response arrived after seq 6, before its work left the section at seq 7",
    ),
    (
        "a server off loopback",
        DEFAULT,
        |r| {
            set(r, "/policies/0/server/address", json!("10.0.0.1:80"));
        },
        "the server listened on 10.0.0.1:80, but the lab binds 127.0.0.1 only",
    ),
    (
        "a room's request in a command-line run",
        DEFAULT,
        |r| {
            for i in [0, 1] {
                set(
                    r,
                    &format!("/policies/0/work_events/{i}/request"),
                    json!("R1"),
                );
            }
            set(r, "/policies/0/admissions/0/request", json!("R1"));
        },
        "the ledger names R1, a request from a classroom's room, in the report of a command-line run",
    ),
    (
        "a policy left out",
        DEFAULT,
        |r| {
            list(r, "/policies").pop();
        },
        "--mode both runs 2 policies, but the report holds 1 (shared) and records no failure",
    ),
    (
        "a room gate closed before the run's own gate opened",
        SESSION,
        |r| set(r, "/room_gates/0/closed_after_event", json!(2)),
        "it closed after event 2, before the run's own gate opened at seq 7",
    ),
    (
        "a session that matched said not to have",
        SESSION,
        |r| set(r, "/matches_model", json!(false)),
        "the session says it did not match the policy model, but records no failure, and every \
         run says it matched",
    ),
    (
        "a second run on another front",
        SESSION,
        |r| {
            let mut second = r["runs"][0].clone();
            second["runner"]["front"] = json!("threaded");
            list(r, "/runs").push(second);
        },
        "run 2 ran with --server threaded, but run 1 with --server async",
    ),
    (
        "a room request in the ledgers of two runs, numbered out of order",
        SESSION,
        |r| {
            let second = r["runs"][0].clone();
            list(r, "/runs").push(second);
            set(r, "/room_requests/0/run", json!(2));
        },
        "R2 reached run 1, but R1, numbered before it, reached run 2",
    ),
    (
        "a room request in the ledger of a run it did not reach",
        SESSION,
        |r| {
            let second = r["runs"][0].clone();
            list(r, "/runs").push(second);
        },
        "R1 is in the ledger of run 2 (partitioned), but it reached run 1 (partitioned): a room's \
         request reaches one server",
    ),
    (
        "a room request's 200 reads 503",
        SESSION,
        |r| {
            set(r, "/room_requests/0/status", json!(503));
        },
        "R1's evidence says 503 but the ledger shows the slow pool admitted R1",
    ),
    (
        "a room request dropped from the list",
        SESSION,
        |r| {
            list(r, "/room_requests").pop();
        },
        "the ledger names R2, but the room's requests list no R2",
    ),
    (
        "a room request held after the room's gate opened",
        SESSION,
        |r| {
            list(r, "/room_gates").clear();
        },
        "R2 is held at seq 15, after the gate opened at seq 7: once open, it never closes",
    ),
    (
        "a classroom run's F1 edited",
        SESSION,
        |r| {
            set(r, "/runs/0/policies/0/responses/0/status", json!(503));
        },
        "F1's evidence says 503 but the ledger shows the fast pool admitted F1",
    ),
    (
        "a classroom session's verdict edited",
        SESSION,
        |r| {
            r["runs"][0]["failure"] = json!("partitioned: S1: no response was received");
            set(r, "/runs/0/matches_model", json!(false));
        },
        "the session says every run matched the policy model, but its runs do not",
    ),
    (
        "a front's own runtime watched, in a run that awaits",
        DEFAULT,
        |r| {
            let unread = json!([{ "request": "S2", "after_event": 4, "accept_queue": 1 }]);
            let watched = json!({ "heartbeat": [], "unread": unread, "queued": [] });
            r["policies"][0]["executor"] = watched;
        },
        "expected none seen unread before release, observed S2",
    ),
    (
        "a run that awaits relabelled as spawn-blocking",
        DEFAULT,
        |r| r["executor"] = json!({ "work": "spawn-blocking", "blocking_threads": 4 }),
        "the report's executor is --work spawn-blocking --blocking-threads 4, but its runner \
         names no runtime of the front's own",
    ),
    (
        "the runner's language",
        DEFAULT,
        |r| set(r, "/runner/language", json!("Python 3.12")),
        "the runner's language is \"Python 3.12\", but this lab writes \"Rust\"",
    ),
    (
        "S1 held twice",
        DEFAULT,
        |r| set(r, "/policies/0/work_events/3/request", json!("S1")),
        "S1 is held at seq 4 a second time",
    ),
    (
        "work started by another thread, in a run that awaits",
        DEFAULT,
        |r| set(r, "/policies/0/work_events/1/event", json!("started")),
        "S1 is started at seq 2 by a thread of another pool or runtime, but with --work await \
         no work is handed to one",
    ),
    (
        "a rule left out of the ledger",
        DEFAULT,
        |r| list(r, "/policies/0/ledger/shared/invariants").clear(),
        "the ledger of the shared pool leaves out the rule",
    ),
    (
        "a rule added to the ledger",
        DEFAULT,
        |r| {
            let rule = json!({ "rule": "no permit leaked", "holds": false });
            list(r, "/policies/0/ledger/shared/invariants").push(rule);
        },
        "the ledger of the shared pool states a rule its audit does not check",
    ),
    (
        "a room request answered after the run's last event",
        SESSION,
        |r| set(r, "/room_requests/0/after_event", json!(999)),
        "R1 is answered after event 999, but the ledger of runs[0] (partitioned) lets it be \
         answered only from seq",
    ),
    (
        "resources left uncounted after a run that closed",
        DEFAULT,
        |r| set(r, "/policies/0/resources/after_run", json!(null)),
        "resources.after_run is missing: a run that did not fail counts the process's resources",
    ),
    (
        "no request held when F1 was sent, by the resources",
        DEFAULT,
        |r| {
            set(
                r,
                "/policies/0/resources/before_fast/held_at_gate",
                json!(0),
            )
        },
        "resources.before_fast counts 0 requests held at the gate, but observer_before_fast, \
         taken at the same moment, holds 2",
    ),
    (
        "held requests without a connection handler",
        DEFAULT,
        |r| {
            set(
                r,
                "/policies/0/resources/before_fast/connection_handlers",
                json!(0),
            )
        },
        "resources.before_fast counts 0 connection handlers, fewer than the 2 requests held at \
         the gate",
    ),
    (
        "more connection handlers before F1 than callers had connected",
        DEFAULT,
        |r| {
            set(
                r,
                "/policies/0/resources/before_fast/connection_handlers",
                json!(3),
            )
        },
        "resources.before_fast counts 3 connection handlers, but before F1 only the 2 slow \
         callers connected, each at most once",
    ),
    (
        "requests still held after the run",
        DEFAULT,
        |r| set(r, "/policies/0/resources/after_run/held_at_gate", json!(2)),
        "resources.after_run counts 2 requests held at the gate, yet every connection task stopped",
    ),
    (
        "one connection accepted for two held requests",
        DEFAULT,
        |r| set(r, "/policies/0/server/connections_accepted", json!(1)),
        "the server accepted 1 connection, fewer than the 2 connection handlers alive before F1",
    ),
    (
        "a server on another address",
        DEFAULT,
        |r| set(r, "/policies/0/server/address", json!("127.0.0.2:80")),
        "the server listened on 127.0.0.2:80, but the lab binds 127.0.0.1 only",
    ),
    (
        "the async front's run told as the threaded front's",
        DEFAULT,
        |r| {
            set(r, "/runner/front", json!("threaded"));
            let server =
                "std::net and httparse, HTTP/1.1 on 127.0.0.1: an OS thread per connection";
            set(r, "/runner/server", json!(server));
        },
        "resources.before_fast counts 1 OS thread, but the sequence's thread with the accept \
         thread and 2 connections' threads make at least 4",
    ),
    (
        "the ledger's rules stated out of the audit's order",
        DEFAULT,
        |r| list(r, "/policies/0/ledger/shared/invariants").swap(0, 1),
        "the audit states its rules in one order",
    ),
    (
        "a request's heartbeat reading before the reading of the one sent ahead of it",
        BLOCKED_STALL,
        |r| list(r, "/policies/0/executor/heartbeat").swap(1, 2),
        "the heartbeat is read after S2, then after S1",
    ),
    (
        "a heartbeat reading taken twice in a run cut short",
        S2_UNCONNECTED,
        |r| {
            let beats = list(r, "/policies/0/executor/heartbeat");
            beats.push(beats[1].clone());
        },
        "the heartbeat is read after S1, then after S1",
    ),
    (
        "a heartbeat reading left out, though the run sent the next request",
        S2_UNCONNECTED,
        |r| {
            list(r, "/policies/0/executor/heartbeat").remove(1);
        },
        "the heartbeat is never read after S1, yet the lab sent S2 after it",
    ),
    (
        "a heartbeat reading placed after the gate opened",
        BLOCKED_STALL,
        |r| set(r, "/policies/0/executor/heartbeat/4/after_event", json!(3)),
        "the release reading is taken after event 3, but the gate opened at seq 3",
    ),
    (
        "a stall with S2 admitted, where the ledger has no S2",
        S2_UNCONNECTED,
        |r| {
            failed(
                r,
                "shared: stalled: S2 was admitted but not held at the gate within 5 s",
            )
        },
        "the failure says shared stalled with S2 admitted, but the ledger shows no admission \
         of S2",
    ),
    (
        "a failed run's start reading left out",
        S2_UNCONNECTED,
        |r| {
            list(r, "/policies/0/executor/heartbeat").remove(0);
        },
        "the heartbeat is read once at the start and once just before the gate opens",
    ),
    (
        "more callers aborted than a failed run left waiting",
        S2_UNCONNECTED,
        |r| set(r, "/policies/0/client_tasks_aborted", json!(2)),
        "the close aborts only the callers still waiting, at most 1: S1 sent and never \
         answered, besides S2",
    ),
    (
        "a failed run's count after the close left out",
        S2_UNCONNECTED,
        |r| set(r, "/policies/0/resources/after_run", Value::Null),
        "resources.after_run is missing: the lab counts the process's resources once the run's \
         work section exists",
    ),
    (
        "a handler counted after every connection task of a failed run stopped",
        S2_UNCONNECTED,
        |r| {
            set(
                r,
                "/policies/0/resources/after_run/connection_handlers",
                json!(1),
            )
        },
        "resources.after_run counts 1 connection handler, yet every connection task stopped",
    ),
    (
        "a handler counted after a run that could not start",
        NEVER_STARTED,
        |r| {
            set(
                r,
                "/runs/0/policies/0/resources/after_run/connection_handlers",
                json!(1),
            )
        },
        "resources.after_run counts 1 connection handler, yet the run's server never started",
    ),
    (
        "a later policy's room request listed before an earlier one's",
        TWO_RUNS,
        |r| list(r, "/room_requests").swap(0, 1),
        "R1 (run 1, shared) is listed after R2 (run 1, partitioned), which came later",
    ),
];

/// The binary prints what [`record_here`] says, byte for byte, and exits with its status, in
/// both formats, for every kind of file: a lab report and a classroom session that match, an
/// edited report (one of them quoting what a terminal would act on), a run and a session that
/// did not match, a report of a shape no run writes, and what is not a report at all (text, a
/// directory, no file).
#[test]
fn the_binary_prints_what_record_here_says() {
    let dir = scratch("binary");
    let copies = [
        DEFAULT,
        TWO_RUNS,
        "spawn-blocking-s2-out-of-descriptors.json",
        "session-closed-mid-run.json",
    ];
    for name in copies {
        std::fs::write(dir.join(name), fixture(name).to_string()).expect("saved");
    }
    let (_, base, edit, _) = EDITS[0];
    record_edited(&dir, base, edit, "edited.json");
    let twice = |r: &mut Value| {
        let shared = r["policies"][0].clone();
        list(r, "/policies").push(shared);
    };
    record_edited(&dir, DEFAULT, twice, "twice.json");
    // A bidirectional override, a C1 control, DEL and a tag character, which JSON leaves raw.
    let quoting =
        |r: &mut Value| r["runner"]["server"] = json!("hyper\u{202e}\u{9b}\u{7f}\u{e0041}");
    record_edited(&dir, DEFAULT, quoting, "hidden.json");
    let escaped = Recorded::of(&lab(&dir, &["record", "hidden.json", "--format", "json"]));
    let said = r"hyper\u202e\u009b\u007f\udb40\udc41";
    assert!(escaped.stdout.contains(said), "{}", escaped.stdout);
    std::fs::write(dir.join("text.json"), "not a report\n").expect("saved");
    std::fs::create_dir_all(dir.join("a-directory.json")).expect("made");
    let files = copies.into_iter().chain([
        "edited.json",
        "hidden.json",
        "twice.json",
        "text.json",
        "a-directory.json",
        "missing.json",
    ]);
    let mut codes = Vec::new();
    for file in files {
        for json in [false, true] {
            let mut args = vec!["record", file];
            args.extend(if json { &["--format", "json"][..] } else { &[] });
            let binary = Recorded::of(&lab(&dir, &args));
            assert_eq!(binary, record_here(&dir, file, json), "{args:?}");
            codes.push(binary.code);
        }
    }
    codes.dedup();
    assert_eq!(
        codes,
        [0, 1, 2],
        "every exit status, in the order of the files"
    );
}

/// Every edit of [`EDITS`] is named in the record's words, on stdout and in the one line on
/// stderr, exit status 1, in both formats; no edited report is said to match. Every recorded
/// fixture, unedited, still matches (exit 0).
#[test]
fn edited_reports_are_named_and_none_is_vouched_for() {
    let dir = scratch("edited");
    // Every recorded lab report and classroom session, unedited, matches.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut unedited = 0;
    for entry in std::fs::read_dir(&fixtures).expect("the fixtures are listed") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).expect("a name");
        if !(name.starts_with("slots-") || name.starts_with("classroom-")) {
            continue;
        }
        let output = record_here(&fixtures, name, false);
        assert_eq!(output.code, 0, "{name}: {}", output.stderr);
        assert!(
            output.stdout.contains("matched the policy model."),
            "{name}"
        );
        unedited += 1;
    }
    assert_eq!(unedited, 23, "12 lab reports and eleven classroom sessions");
    for (i, &(name, base, edit, says)) in EDITS.iter().enumerate() {
        let file = format!("edit-{i}.json");
        let (shown, report) = record_edited(&dir, base, edit, &file);
        let (stdout, stderr) = (&shown.stdout, &shown.stderr);
        let context = format!("{name} ({file}):\n{stdout}{stderr}");
        assert_eq!(shown.code, 1, "{context}");
        assert!(stdout.contains(says), "{says:?} in {context}");
        assert!(!stdout.contains("matched the policy model."), "{context}");
        assert!(
            stderr.starts_with(&format!(
                "isolation-lab: {file} was edited, or no run of the lab wrote it: "
            )) && stderr.lines().count() == 1,
            "{context}"
        );
        let json = record_here(&dir, &file, true);
        assert_eq!(json.code, 1, "{context}");
        let json: Value = serde_json::from_str(&json.stdout).expect("record JSON");
        assert_eq!(json["verdict"]["verdict"], "does_not_hold", "{context}");
        assert_eq!(json["matches_model"], false, "{context}");
        let findings = json["verdict"]["findings"].as_array().expect("findings");
        for finding in findings {
            let pointer = finding["pointer"].as_str().expect("a pointer");
            assert!(report.pointer(pointer).is_some(), "{pointer}: {context}");
        }
    }
}

/// Runs whose slow work blocks its thread, or waits for a thread, on each front: requests the
/// front leaves unread until release, and work queued for a thread. Each genuine report
/// matches on re-check (exit 0); edited where the executor decides (F1 answered before a
/// release it waited for, an unread caller dropped from the pending, the model block's
/// expectations made those of work that awaits, an accept queue that shrinks or outgrows the
/// connections accepted, a threaded run's threads told as the async front's), each is named,
/// exit 1.
#[test]
fn runs_where_the_executor_decides_are_rechecked_with_its_model() {
    let dir = scratch("executors");
    let shapes: [&[&str]; 6] = [
        &["--work", "block"],
        &["--work", "block", "--workers", "2", "--held", "4"],
        &["--work", "block", "--server", "threaded"],
        &["--work", "spawn-blocking", "--blocking-threads", "1"],
        &["--work", "own-runtime", "--workers", "1", "--held", "3"],
        &[
            "--mode",
            "partitioned",
            "--work",
            "block",
            "--workers",
            "3",
            "--held",
            "4",
        ],
    ];
    for (i, args) in shapes.iter().enumerate() {
        let file = format!("shape-{i}.json");
        let report = save(&dir, args, &file);
        let (record, shown) = record(&dir, &file);
        assert!(
            shown.contains("matched the policy model."),
            "{args:?}: {shown}"
        );
        // Every pointer says what is there, and a request read only after release is told
        // after release, not among the held work or F1 before it.
        check_all(&report, &record, &shown);
        // The model's table is what the `predict` command cited above it prints (which models
        // the async front: a threaded run's is cited without its `--work`).
        let (cited, table) = shown
            .split_once("The policy model's, from isolation-lab ")
            .and_then(|(_, after)| after.split_once(":\n"))
            .expect("the model's table is cited");
        let table = table.split("\n\n").next().expect("a table");
        let predicted = lab(&dir, &cited.split(' ').collect::<Vec<_>>());
        assert!(predicted.status.success(), "{cited}");
        let predicted = text(&predicted.stdout);
        assert!(
            predicted.contains(table),
            "{args:?}: {cited}:\n{predicted}\n{shown}"
        );
        // The version line tells the lab's runtime from the front's own.
        if let Some(shape) = report["runner"]["front_runtime"].as_str() {
            let front = report["runner"]["front"].as_str().expect("a front");
            let said = format!("for the lab; the {front} front: {shape}\n");
            assert!(shown.contains(&said), "{args:?}: {shown}");
        }
    }
    let blocked = save(&dir, &["--work", "block"], "blocked.json");
    let f1_before_release = |report: &mut Value| {
        let responses = list(report, "/policies/0/responses");
        let f1 = responses.iter_mut().find(|r| r["request"] == "F1");
        let f1 = f1.expect("F1 is answered");
        f1["phase"] = json!("before_release");
        let f1 = json!({ "request": f1["request"], "status": f1["status"], "body": f1["body"] });
        set(report, "/policies/0/fast_response_before_release", f1);
    };
    let unread_dropped = |report: &mut Value| {
        set(
            report,
            "/policies/0/slow_callers_pending_before_release",
            json!(["S1"]),
        );
    };
    let awaits = |report: &mut Value| {
        for expected in list(report, "/policies/0/model/expected") {
            expected.as_object_mut().expect("an object").remove("waits");
        }
    };
    let spawned = save(
        &dir,
        &["--work", "spawn-blocking", "--blocking-threads", "1"],
        "spawned.json",
    );
    let s1_not_started = |report: &mut Value| {
        let events = list(report, "/policies/0/work_events");
        let started = events.iter_mut().find(|e| e["event"] == "started");
        started.expect("S1 is started")["request"] = json!("S2");
    };
    /// A real report, an edit of it, and what the record must say of the edit.
    type OnReport<'a> = (&'a Value, fn(&mut Value), &'static str);
    let unread_reading_dropped = |report: &mut Value| {
        list(report, "/policies/0/executor/heartbeat").remove(2);
    };
    let release_names_f1 = |report: &mut Value| {
        let beats = list(report, "/policies/0/executor/heartbeat");
        let release = beats.iter_mut().find(|b| b["moment"] == "release");
        release.expect("a release reading")["request"] = json!("F1");
    };
    let queued_before_admitted = |report: &mut Value| {
        let beats = list(report, "/policies/0/executor/heartbeat");
        let queued = beats.iter_mut().find(|b| b["moment"] == "queued");
        queued.expect("S2 queued")["after_event"] = json!(1);
    };
    // S-after's `started` taken out, and the ledger numbered again after it.
    let s_after_not_started = |report: &mut Value| {
        let events = list(report, "/policies/0/work_events");
        let at = events
            .iter()
            .position(|e| e["event"] == "started" && e["request"] == "S-after");
        let gone = events.remove(at.expect("S-after is started"));
        let seq = gone["seq"].as_u64().expect("a seq");
        renumber(report, seq + 1, -1);
    };
    // Fast work handed to a blocking thread, which spawn-blocking never does.
    let f_after_started =
        |report: &mut Value| insert_event(report, "F-after", "admitted", "started");
    let s1_started_twice = |report: &mut Value| insert_event(report, "S1", "held", "started");
    // S1, held blocking the one worker, told as cancelled there, before the gate opened: its
    // caller gone, and the run failed for it at once, every count agreeing.
    let s1_cancelled_while_blocking = |report: &mut Value| {
        list(report, "/policies").truncate(1);
        let events = list(report, "/policies/0/work_events");
        events.truncate(2);
        let event = |seq, request: Option<&str>, event| json!({ "seq": seq, "request": request, "pool": "shared", "event": event, "active_after": 0 });
        let mut cancelled = event(3, Some("S1"), "finished");
        cancelled["cancelled"] = json!(true);
        events.extend([cancelled, event(4, None, "gate_opened")]);
        list(report, "/policies/0/admissions").truncate(1);
        for (count, n) in [
            ("attempts", 1),
            ("admitted", 1),
            ("finished", 1),
            ("cancelled", 1),
        ] {
            set(
                report,
                &format!("/policies/0/ledger/shared/{count}"),
                json!(n),
            );
        }
        let policy = report.pointer_mut("/policies/0").expect("a policy");
        for step in [
            "observer_before_fast",
            "slow_callers_pending_before_release",
            "fast_response_before_release",
            "observer_after_fast_before_release",
        ] {
            policy[step] = Value::Null;
        }
        policy["responses"] = json!([]);
        policy["resources"]["before_fast"] = Value::Null;
        policy["executor"]["unread"] = json!([]);
        list(report, "/policies/0/executor/heartbeat").truncate(2);
        set(report, "/policies/0/model/matches", json!(false));
        let differs = json!(["S1: no response was received"]);
        set(report, "/policies/0/model/mismatches", differs);
        let failure = "shared: S1's caller disconnected while its work was held; the work left \
                       the section (work event 3, finished, cancelled) and returned its permit";
        failed(report, failure);
    };
    let never_ticked =
        |report: &mut Value| set(report, "/policies/0/executor/heartbeat/0/ticks", json!(0));
    // S1 held on the one blocking thread, S2 queued for it: each keeps its connection's handler.
    let one_handler = |report: &mut Value| {
        set(
            report,
            "/policies/0/resources/before_fast/connection_handlers",
            json!(1),
        );
    };
    // Two requests queued for the one thread, started after the gate in the other order.
    let queued_two = save(
        &dir,
        &[
            "--mode",
            "shared",
            "--slots",
            "4",
            "--held",
            "3",
            "--work",
            "spawn-blocking",
            "--blocking-threads",
            "1",
        ],
        "queued-two.json",
    );
    let started_out_of_order = |report: &mut Value| {
        let events = list(report, "/policies/0/work_events");
        let opened = events.iter().position(|e| e["event"] == "gate_opened");
        let after = &mut events[opened.expect("the gate opens")..];
        let mut started = after
            .iter_mut()
            .filter(|e| e["event"] == "started" && (e["request"] == "S2" || e["request"] == "S3"));
        let (first, second) = (started.next(), started.next());
        let (first, second) = (first.expect("S2 starts"), second.expect("S3 starts"));
        std::mem::swap(&mut first["request"], &mut second["request"]);
    };
    // The release's reading moved before F1's answer.
    let release_before_f1 = |report: &mut Value| {
        let responses = list(report, "/policies/0/responses");
        let f1 = responses.iter().find(|r| r["request"] == "F1");
        let answered = f1.and_then(|f1| f1["after_event"].as_u64());
        let before = answered.expect("F1 is answered") - 1;
        let beats = list(report, "/policies/0/executor/heartbeat");
        let release = beats.iter_mut().find(|b| b["moment"] == "release");
        release.expect("a release reading")["after_event"] = json!(before);
    };
    // A second handler alive before F1, while S2 sat unread in the kernel's accept queue.
    let unread_handled = |report: &mut Value| {
        set(
            report,
            "/policies/0/resources/before_fast/connection_handlers",
            json!(2),
        );
    };
    // The request admitted after S1 left (S2 or F1, as the worker read them) told as admitted
    // while S1 still ran on the front's one worker, S1 leaving after it.
    let two_on_one_worker = |report: &mut Value| {
        let events = list(report, "/policies/0/work_events");
        let opened = events.iter().position(|e| e["event"] == "gate_opened");
        let s1 = opened.expect("the gate opens") + 1;
        assert_eq!(events[s1]["request"], "S1");
        let next = events[s1 + 1]["request"].clone();
        events[s1..s1 + 2].rotate_left(1);
        for (event, (seq, active)) in events[s1..s1 + 2].iter_mut().zip([(4, 2), (5, 1)]) {
            (event["seq"], event["active_after"]) = (json!(seq), json!(active));
        }
        let admissions = list(report, "/policies/0/admissions");
        let admitted = admissions.iter_mut().find(|a| a["request"] == next);
        admitted.expect("it is admitted")["active_after"] = json!(2);
        set(report, "/policies/0/ledger/shared/peak", json!(2));
        set(report, "/policies/0/peak_active_work/shared", json!(2));
    };
    // The run of two workers (shape 1) told as a run of one: in its partitioned policy S2 is
    // refused while S1 blocks the one worker that would have to read it.
    let two_workers: Value = serde_json::from_slice(
        &std::fs::read(dir.join("shape-1.json")).expect("shape 1 was saved"),
    )
    .expect("a report");
    let one_worker = |report: &mut Value| set(report, "/executor/workers", json!("current-thread"));
    let unwatched = |report: &mut Value| {
        for policy in list(report, "/policies") {
            policy.as_object_mut().expect("a policy").remove("executor");
        }
    };
    let edits: [OnReport; 19] = [
        (
            &two_workers,
            one_worker,
            "partitioned: S2 is refused at seq 3, but the front's one worker is already running \
             S1: with --work block",
        ),
        (
            &blocked,
            two_on_one_worker,
            "is admitted at seq 4, but the front's one worker is already running S1: with \
             --work block a worker runs each admitted request's work to its end, blocked, and \
             reads no other request meanwhile",
        ),
        (
            &blocked,
            unread_handled,
            "resources.before_fast counts 2 connection handlers, but before F1 only the 2 slow \
             callers connected, each at most once, and 1 of them waited unread in the \
             accept queue, no handler yet",
        ),
        (
            &spawned,
            release_before_f1,
            "the release's reading is taken after event",
        ),
        (
            &spawned,
            unwatched,
            "the report's executor is --work spawn-blocking --blocking-threads 1, whose front runs \
             on a runtime of its own, but it records no evidence of that runtime",
        ),
        (
            &spawned,
            one_handler,
            "resources.before_fast counts 1 connection handler, but observer_before_fast, taken \
             just before, has 2 permits taken, each kept by the handler of its request's \
             connection until its work leaves",
        ),
        (
            &queued_two,
            started_out_of_order,
            "S2 S3 were seen queued for the slow work's one thread in that order, but the ledger \
             starts them as S3 S2: one thread takes queued work first in, first out",
        ),
        (
            &blocked,
            s1_cancelled_while_blocking,
            "S1 finishes at seq 3, before the gate opened, but it was held blocking its thread",
        ),
        (
            &spawned,
            f_after_started,
            "but with --work spawn-blocking only /slow work is handed to another thread",
        ),
        (
            &spawned,
            s1_started_twice,
            "S1 is started at seq 4 a second time: a thread runs a request's work once",
        ),
        (
            &blocked,
            never_ticked,
            "the start reading has 0 ticks, but the lab reads it once the heartbeat has ticked",
        ),
        (
            &blocked,
            release_names_f1,
            "the release reading names F1, but it is the run's, read for no request",
        ),
        (
            &spawned,
            queued_before_admitted,
            "the heartbeat is read after S2 is queued, after event 1, but the ledger admits S2 \
             only at seq 4",
        ),
        (
            &spawned,
            s_after_not_started,
            "S-after finishes at seq 11, not cancelled, but with --work spawn-blocking its work \
             runs only once a thread starts it",
        ),
        (
            &blocked,
            unread_reading_dropped,
            "the heartbeat is read after each request seen unread or queued",
        ),
        (
            &spawned,
            s1_not_started,
            "S1 is held at seq 3, but with --work spawn-blocking its work reaches the gate only \
             once a thread starts it",
        ),
        (
            &blocked,
            f1_before_release,
            "F1's response is marked before release, but it arrived after seq",
        ),
        (
            &blocked,
            unread_dropped,
            "slow_callers_pending_before_release lists S1, but when the gate opened the ledger \
             held S1, and the front had not yet read S2",
        ),
        (
            &blocked,
            awaits,
            "the model block's expectations are not the policy model's",
        ),
    ];
    // Edits that set one value.
    // A threaded front's run (four threads before F1) told as the async front's.
    let threaded = save(&dir, &["--server", "threaded"], "threaded.json");
    let sets: [(&Value, &str, Value, &str); 12] = [
        (
            &threaded,
            "/runner",
            fixture(DEFAULT)["runner"].clone(),
            "resources.before_fast counts 4 OS threads, but the run had its process to itself (1 \
             thread once it closed), where the sequence's thread alone would make 1",
        ),
        // S2's look counts one more connection than the server accepted beside S1's and F1's.
        (
            &blocked,
            "/policies/0/executor/unread/0/accept_queue",
            json!(2),
            "S2 is seen unread after event 2, but the accept queue is counted at 2, and with the 1 \
             sent after it and the 1 held by then the server would have accepted more than the 3 \
             connections it did",
        ),
        // The last look, which a stranger's connections may follow, counts more than the
        // listener queues.
        (
            &blocked,
            "/policies/0/executor/unread/1/accept_queue",
            json!(130),
            "F1 is seen unread after event 2, but the accept queue is counted at 130, more than \
             the 129 connections a run's listener queues (its backlog of 128, and one more)",
        ),
        // The accept queue shrinks between two looks while the one worker blocks.
        (
            &blocked,
            "/policies/0/executor/unread/0/accept_queue",
            json!(3),
            "F1 is seen unread after event 2, but the accept queue is counted at 2, fewer than the \
             3 counted when S2 was seen unread before it, and no connection is accepted while \
             every worker is blocked",
        ),
        (
            &blocked,
            "/policies/0/executor/unread/0/after_event",
            json!(1),
            "S2 is seen unread after event 1, but the lab sends it only once S1, sent before it, is \
             held, refused or queued for a thread, at seq 2",
        ),
        (
            &blocked,
            "/policies/0/executor/heartbeat/0/after_event",
            json!(2),
            "the start reading is after event 2, but it is read before S1 is decided at seq 1",
        ),
        (
            &blocked,
            "/policies/0/resources/before_fast/os_threads",
            json!(1),
            "resources.before_fast counts 1 OS thread, but the sequence's thread with the \
             front runtime's 1 thread make at least 2",
        ),
        (
            &blocked,
            "/policies/0/executor/unread/0/after_event",
            json!(0),
            "S2 is seen unread after event 0, but it is sent only once S1 is decided, and the \
             ledger decides S1 at seq 1",
        ),
        (
            &blocked,
            "/policies/0/executor/unread/0/accept_queue",
            json!(0),
            "S2 is seen unread after event 2, but its connection waits in the accept queue, yet \
             the queue is counted at 0",
        ),
        (
            &blocked,
            "/policies/0/executor/heartbeat/0/ticks",
            json!(1_000_000),
            // The ticks of the reading after it vary with the run (it ticks until its worker
            // blocks); the start's are made more than any run ticks.
            "ticks, after a reading after event 0 with 1000000",
        ),
        (
            &blocked,
            "/policies/0/executor/unread/0/after_event",
            json!(3),
            "S2 is seen unread after event 3, but the gate had opened at seq 3",
        ),
        (
            &blocked,
            "/policies/0/executor/heartbeat/1/after_event",
            json!(1),
            "the heartbeat is read after S1 is held, after event 1, but the ledger holds S1 only at \
             seq 2",
        ),
    ];
    let edited = edits.into_iter().map(|(base, edit, says)| {
        let mut report = base.clone();
        edit(&mut report);
        (report, says)
    });
    let set_one = sets.into_iter().map(|(base, pointer, value, says)| {
        let mut report = base.clone();
        set(&mut report, pointer, value);
        (report, says)
    });
    for (i, (report, says)) in edited.chain(set_one).enumerate() {
        let file = format!("blocked-edit-{i}.json");
        std::fs::write(dir.join(&file), report.to_string()).expect("written");
        let shown = record_here(&dir, &file, false);
        let (stdout, stderr) = (&shown.stdout, &shown.stderr);
        assert_eq!(shown.code, 1, "{file}: {stdout}{stderr}");
        assert!(stdout.contains(says), "{says:?} in {file}: {stdout}");
        assert!(
            stderr.contains("was edited, or no run of the lab wrote it"),
            "{stderr}"
        );
    }
}

/// Every `seq` and `after_event` of the first policy at `from` or later moved by `by`: its
/// ledger numbered again after an event taken out (-1) or put in (+1).
fn renumber(report: &mut Value, from: u64, by: i64) {
    let shift = |n: &mut Value| {
        if let Some(k) = n.as_u64().filter(|&k| k >= from) {
            *n = json!(k.saturating_add_signed(by));
        }
    };
    list(report, "/policies/0/work_events")
        .iter_mut()
        .for_each(|e| shift(&mut e["seq"]));
    list(report, "/policies/0/responses")
        .iter_mut()
        .for_each(|r| shift(&mut r["after_event"]));
    for readings in ["heartbeat", "unread"] {
        let pointer = format!("/policies/0/executor/{readings}");
        let readings = report.pointer_mut(&pointer).and_then(Value::as_array_mut);
        for reading in readings.into_iter().flatten() {
            shift(&mut reading["after_event"]);
        }
    }
}

/// `request`'s `event` put in the first policy's ledger just after its `after` event, the
/// ledger numbered again after it.
fn insert_event(report: &mut Value, request: &str, after: &str, event: &str) {
    let events = list(report, "/policies/0/work_events");
    let at = events
        .iter()
        .position(|e| e["request"] == request && e["event"] == after);
    let at = at.unwrap_or_else(|| panic!("{request} is {after}"));
    let before = events[at].clone();
    let seq = before["seq"].as_u64().expect("a seq") + 1;
    renumber(report, seq, 1);
    let inserted = json!({
        "seq": seq,
        "request": request,
        "pool": before["pool"],
        "event": event,
        "active_after": before["active_after"],
    });
    list(report, "/policies/0/work_events").insert(at + 1, inserted);
}

/// Runs that failed out of descriptors, where the executor decides, are recorded as not
/// matching, exit 1, and not called edited:
/// - `--work block` with requests still unread (saved from `(ulimit -n 16; isolation-lab
///   --work block)`): after release the front could accept no connection, so S2 and F1 were
///   never read. Its unread callers waited, and the connections it never accepted are not owed.
/// - `--work spawn-blocking` with work queued for a thread (saved from `(ulimit -n 18;
///   isolation-lab --work spawn-blocking --workers 1 --blocking-threads 2 --mode partitioned
///   --slots 4 --held 3)` beside four CPU hogs): closing cancelled S3 while it waited, so its
///   wait, when a thread ran it, found it gone and recorded nothing.
/// - `--work spawn-blocking` stopped before F1 (saved from `(ulimit -n 14; isolation-lab --work
///   spawn-blocking --blocking-threads 2 --held 3)`): S2 could not connect.
///
/// Edits of them telling what no such run does are named as edited: S3 started after it left
/// (as the lab once wrote it), or started before the gate opened while every thread was held;
/// F1 decided although it never connected; F1 or a release named in a run that stopped before
/// either.
#[test]
fn runs_that_failed_where_the_executor_decides_are_not_called_edited() {
    let dir = scratch("executor-failed");
    for (file, mode) in [
        ("block-out-of-descriptors.json", "shared"),
        (
            "spawn-blocking-cancelled-before-started.json",
            "partitioned",
        ),
        ("spawn-blocking-s2-out-of-descriptors.json", "shared"),
    ] {
        std::fs::write(dir.join(file), fixture(file).to_string()).expect("saved");
        let output = record_here(&dir, file, false);
        let stderr = &output.stderr;
        assert_eq!(output.code, 1, "{stderr}");
        let failed = format!(
            "isolation-lab: {file}: the run did not match the policy model; its report says why: {mode}: "
        );
        assert!(stderr.starts_with(&failed), "{stderr}");
    }
    let queued = "spawn-blocking-cancelled-before-started.json";
    let before_f1 = "spawn-blocking-s2-out-of-descriptors.json";
    /// A fixture, an edit of it, and what the record must say of the edit.
    type OnFixture = (&'static str, fn(&mut Value), &'static str);
    let edits: [OnFixture; 12] = [
        (
            before_f1,
            |r| {
                set(
                    r,
                    "/failure",
                    json!("shared: stalled: F1 got no response within 5 s"),
                )
            },
            "the failure says shared stalled waiting for F1, but it records no snapshot of the \
             section before F1",
        ),
        (
            before_f1,
            |r| {
                let stall = "shared: stalled: no admission decision for S4 within 5 s";
                set(r, "/failure", json!(stall));
            },
            "the failure says shared stalled waiting for what no step of its sequence (--held 3) \
             waits for",
        ),
        (
            before_f1,
            |r| set(r, "/policies/0/server", Value::Null),
            "the failure says shared got past its setup, but it records no server",
        ),
        (
            "block-out-of-descriptors.json",
            |r| {
                let made_up = json!(["F1: expected HTTP 200 before release, received none"]);
                set(r, "/policies/0/model/mismatches", made_up);
            },
            "model.mismatches lists 1 differences, but the model's check of this evidence finds",
        ),
        (
            before_f1,
            |r| {
                let failure = r["failure"].as_str().expect("a failure");
                let dialled =
                    failure.replace("connecting to 127.0.0.1:40297", "connecting to 10.0.0.1:80");
                r["failure"] = json!(dialled);
            },
            "the failure says S2 failed connecting to 10.0.0.1:80, but shared's server listened \
             on 127.0.0.1:40297",
        ),
        (
            before_f1,
            |r| set(r, "/policies/0/resources/after_run/os_threads", json!(0)),
            "resources.after_run counts 0 OS threads",
        ),
        (
            queued,
            |r| {
                // F1 decided, in every count, although its caller never connected.
                renumber(r, 8, 2);
                let event = |seq, event, active| json!({ "seq": seq, "request": "F1", "pool": "fast", "event": event, "active_after": active });
                let events = list(r, "/policies/0/work_events");
                events.splice(7..7, [event(8, "admitted", 1), event(9, "finished", 0)]);
                let admitted = json!({ "request": "F1", "route": "/fast", "pool": "fast", "decision": "admitted", "active_after": 1 });
                list(r, "/policies/0/admissions").push(admitted);
                for count in ["attempts", "admitted", "finished", "peak"] {
                    set(r, &format!("/policies/0/ledger/fast/{count}"), json!(1));
                }
                set(r, "/policies/0/peak_active_work/fast", json!(1));
            },
            "the failure says F1 could not connect, yet partitioned's ledger has F1 at seq 8",
        ),
        (
            queued,
            |r| {
                let events = list(r, "/policies/0/work_events");
                let seq = events.len() + 1;
                let started = json!({ "seq": seq, "request": "S3", "pool": "slow", "event": "started", "active_after": 0 });
                events.push(started);
            },
            "S3 is started at seq 12, but it is not inside the work section",
        ),
        (
            queued,
            |r| insert_event(r, "S3", "admitted", "started"),
            "S3 is started at seq 8, before the gate opened, but both of the slow work's threads \
             are already running S1 S2",
        ),
        (
            before_f1,
            |r| {
                let failure = "shared: F1: GET /fast failed: connecting to 127.0.0.1:40297: Too \
                               many open files (os error 24)";
                r["failure"] = json!(failure);
            },
            "the failure says F1's request failed, yet shared stopped before the lab sent it",
        ),
        (
            before_f1,
            |r| {
                // S1 completed and answered, rather than cancelled at the close.
                let events = list(r, "/policies/0/work_events");
                events[4]
                    .as_object_mut()
                    .expect("S1 finished")
                    .remove("cancelled");
                set(r, "/policies/0/ledger/shared/cancelled", json!(0));
                let answered = json!({
                    "request": "S1", "route": "/slow", "status": 200,
                    "body": { "request": "S1", "pool": "shared" },
                    "phase": "after_release", "after_event": 5,
                });
                list(r, "/policies/0/responses").push(answered);
            },
            "S1 is answered, but the run stopped before the release",
        ),
        (
            before_f1,
            |r| {
                // F1 admitted and gone after the close opened the gate, in every count.
                let events = list(r, "/policies/0/work_events");
                let event = |seq, event, active| json!({ "seq": seq, "request": "F1", "pool": "shared", "event": event, "active_after": active });
                events.extend([event(6, "admitted", 1), event(7, "finished", 0)]);
                let admitted = json!({ "request": "F1", "route": "/fast", "pool": "shared", "decision": "admitted", "active_after": 1 });
                list(r, "/policies/0/admissions").push(admitted);
                for count in ["attempts", "admitted", "finished"] {
                    set(r, &format!("/policies/0/ledger/shared/{count}"), json!(2));
                }
            },
            "F1 is admitted at seq 6, but the run stopped before the lab sent F1",
        ),
    ];
    for (i, (base, edit, named)) in edits.into_iter().enumerate() {
        let file = format!("failed-edit-{i}.json");
        let (output, _) = record_edited(&dir, base, edit, &file);
        let (stdout, stderr) = (&output.stdout, &output.stderr);
        assert_eq!(output.code, 1, "{file}: {stderr}");
        let edited = stderr.contains("was edited, or no run of the lab wrote it");
        // Every contradiction is on stdout; stderr's one line names the first.
        assert!(
            edited && stdout.contains(named),
            "{named:?} in {file}: {stderr}"
        );
    }
}

/// A file's name, how it is made from the default run's report, and what its refusal says.
type Malformed = (&'static str, fn(&mut Value), &'static str);

/// A report no run could have written in its shape is refused, exit 2, naming the file and
/// what is wrong, with nothing on stdout.
#[test]
fn a_malformed_report_is_refused_with_exit_status_2() {
    let dir = scratch("malformed");
    let cases: [Malformed; 32] = [
        // A count of permits beyond its pool, wherever it is.
        (
            "three-of-two",
            |r| set(r, "/policies/0/work_events/2/active_after", json!(3)),
            "/policies/0/work_events/2/active_after counts 3, beyond the shared pool's 2 \
             permits: no run counts more than a pool holds",
        ),
        (
            "admission-three-of-two",
            |r| set(r, "/policies/0/admissions/1/active_after", json!(3)),
            "/policies/0/admissions/1/active_after counts 3, beyond the shared pool's 2 permits",
        ),
        (
            "held-beyond",
            |r| {
                set(
                    r,
                    "/policies/0/resources/before_fast/held_at_gate",
                    json!(5),
                )
            },
            "/policies/0/resources/before_fast/held_at_gate counts 5, beyond the shared pool's",
        ),
        (
            "free-beyond",
            |r| {
                set(
                    r,
                    "/policies/1/final_state/available_permits/fast",
                    json!(2),
                )
            },
            "/policies/1/final_state/available_permits/fast counts 2, beyond the fast pool's 1 \
             permit",
        ),
        (
            "peak-beyond",
            |r| set(r, "/policies/1/ledger/slow/peak", json!(2)),
            "/policies/1/ledger/slow/peak counts 2, beyond the slow pool's 1 permit",
        ),
        (
            "session-snapshot-beyond",
            |r| {
                set(
                    r,
                    "/policies/1/observer_before_fast/active_work/slow",
                    json!(4),
                );
                let session = json!({ "runs": [r.clone()], "matches_model": true,
                "room_requests": [], "room_gates": [], "event_streams_dropped": 0, "connections_refused": 0 });
                *r = session;
            },
            "is not a whole classroom report: runs[0]: \
             /runs/0/policies/1/observer_before_fast/active_work/slow counts 4, beyond the slow \
             pool's 1",
        ),
        // A field no run writes, however natural it reads, is not read past: the report is
        // not one the lab wrote.
        (
            "unknown-verdict",
            |r| r["verdict"] = json!("edited"),
            "unknown field `verdict`",
        ),
        (
            "unknown-policy-failure",
            |r| r["policies"][0]["failure"] = json!("shared: F1 was answered 200"),
            "unknown field `failure`",
        ),
        (
            "unknown-event-field",
            |r| r["policies"][0]["work_events"][3]["held_by"] = json!(["S9"]),
            "unknown field `held_by`",
        ),
        (
            "unknown-session-field",
            |r| {
                let session = json!({ "runs": [r.clone()], "matches_model": true,
                "room_requests": [], "room_gates": [], "event_streams_dropped": 0, "connections_refused": 0,
                "verdict": "edited" });
                *r = session;
            },
            "unknown field `verdict`",
        ),
        (
            "unused-blocking-pool",
            |r| {
                let executor = json!({ "work": "block", "workers": 2, "blocking_threads": 1 });
                r["executor"] = executor;
            },
            "runs --work block --workers 2 --blocking-threads 1, which the command line \
             refuses: --blocking-threads sizes the blocking pool only --work spawn-blocking uses",
        ),
        (
            "threaded-runtime",
            |r| {
                set(r, "/runner/front", json!("threaded"));
                let executor =
                    json!({ "work": "own-runtime", "workers": 3, "blocking_threads": 7 });
                r["executor"] = executor;
            },
            "runs the threaded front with --work own-runtime --workers 3 --blocking-threads 7, \
             which the command line refuses",
        ),
        (
            "twice",
            |r| {
                let shared = r["policies"][0].clone();
                list(r, "/policies").push(shared);
            },
            "lists the shared policy twice",
        ),
        (
            "out-of-order",
            |r| list(r, "/policies").reverse(),
            "has the partitioned policy as policies[0], but --mode both runs shared then partitioned",
        ),
        (
            "foreign-policy",
            |r| set(r, "/inputs/mode", json!("shared")),
            "has the partitioned policy as policies[1], but --mode shared runs shared",
        ),
        (
            "slots",
            |r| set(r, "/inputs/slots", json!(9)),
            "expected a whole number from 2 through 4",
        ),
        (
            "held",
            |r| set(r, "/inputs/held", json!(0)),
            "expected a whole number from 1 through 4",
        ),
        (
            "mode",
            |r| set(r, "/inputs/mode", json!("isolated")),
            "unknown variant `isolated`",
        ),
        (
            "no-events",
            |r| {
                r["policies"][0]
                    .as_object_mut()
                    .expect("a policy")
                    .remove("work_events");
            },
            "missing field `work_events`",
        ),
        (
            "label",
            |r| set(r, "/policies/0/work_events/0/request", json!("S0")),
            "not a lab request label: \"S0\"",
        ),
        (
            "other-version",
            |r| set(r, "/runner/version", json!("0.1.0\u{200b}")),
            "which re-checks only the reports its own version writes",
        ),
        (
            "other-name",
            |r| set(r, "/runner/name", json!("workshop-python-runner")),
            "was written by workshop-python-runner ",
        ),
        // A field every run writes (as `null`, where it has no value), left out; a value of
        // another type that reads as the same.
        (
            "left-out",
            |r| {
                let resources = r.pointer_mut("/policies/0/resources").expect("resources");
                resources
                    .as_object_mut()
                    .expect("an object")
                    .remove("after_run");
            },
            "has no /policies/0/resources/after_run, which every run writes",
        ),
        (
            "workers-as-text",
            |r| {
                let executor =
                    json!({ "work": "own-runtime", "workers": "2", "blocking_threads": 512 });
                r["executor"] = executor;
            },
            "has /executor/workers as \"2\", where a run writes 2 for the same value",
        ),
        (
            "threads-beyond",
            |r| {
                set(
                    r,
                    "/policies/1/resources/after_run/os_threads",
                    json!(u64::MAX),
                )
            },
            "/policies/1/resources/after_run/os_threads counts 18446744073709551615, but no \
             Linux process has more than 4194304 threads",
        ),
        (
            "no-room-gates",
            |r| {
                let session = json!({ "runs": [r.clone()], "matches_model": true,
                "room_requests": [], "event_streams_dropped": 0, "connections_refused": 0 });
                *r = session;
            },
            "is not a whole classroom report: missing field `room_gates`",
        ),
        (
            "room-beyond",
            |r| {
                let requests: Vec<Value> = (1..=10_001)
                    .map(|n| {
                        json!({ "request": format!("R{n}"), "route": "/fast", "run": 1,
                                     "mode": "shared", "after_event": 1 })
                    })
                    .collect();
                let session = json!({ "runs": [r.clone()], "matches_model": true,
                "room_requests": requests, "room_gates": [], "event_streams_dropped": 0,
                "connections_refused": 0 });
                *r = session;
            },
            "is not a whole classroom report: room_requests lists 10 001 requests, but a \
             session answers at most 10 000",
        ),
        // A field the lab leaves out when it has no value, written as `null`; one it writes as
        // `null`, left out.
        (
            "null-error",
            |r| {
                let session = json!({ "runs": [r.clone()], "matches_model": true,
                "room_requests": [{ "request": "R1", "route": "/slow", "run": 1,
                                    "mode": "shared", "after_event": 1, "error": null }],
                "room_gates": [], "event_streams_dropped": 0, "connections_refused": 0 });
                *r = session;
            },
            "is not a whole classroom report: null, where the lab leaves out a field it has no \
             value for",
        ),
        (
            "null-failure",
            |r| {
                let session = json!({ "runs": [r.clone()], "matches_model": true,
                "room_requests": [], "room_gates": [], "event_streams_dropped": 0,
                "connections_refused": 0, "failure": null });
                *r = session;
            },
            "is not a whole classroom report: null, where the lab leaves out a field",
        ),
        (
            "gate-never-said",
            |r| {
                let gate = json!({ "run": 1, "mode": "shared", "generation": 1,
                                   "closed_after_event": 1 });
                let session = json!({ "runs": [r.clone()], "matches_model": true,
                "room_requests": [], "room_gates": [gate], "event_streams_dropped": 0,
                "connections_refused": 0 });
                *r = session;
            },
            "is not a whole classroom report: missing field `opened_after_event`",
        ),
        (
            "room-run",
            |r| {
                let session = json!({ "runs": [r.clone()], "matches_model": true,
                "room_requests": [{ "request": "R1", "route": "/slow", "run": 3,
                                    "mode": "shared", "after_event": 1 }],
                "room_gates": [], "event_streams_dropped": 0, "connections_refused": 0 });
                *r = session;
            },
            "is not a whole classroom report: room_requests[0] names run 3, but the session has 1 run",
        ),
        (
            "session-count",
            |r| {
                let session = json!({ "runs": [r.clone()], "matches_model": true,
                "room_requests": [], "room_gates": [], "event_streams_dropped": -1, "connections_refused": 0 });
                *r = session;
            },
            "is not a whole classroom report: invalid value: integer `-1`, expected u64",
        ),
    ];
    for (name, edit, says) in cases {
        let file = format!("{name}.json");
        let (output, _) = record_edited(&dir, DEFAULT, edit, &file);
        let stderr = &output.stderr;
        assert_eq!(output.code, 2, "{file}: {stderr}");
        assert_eq!(output.stdout, "", "{file}: nothing on stdout");
        assert!(stderr.starts_with(&format!("error: {file} ")), "{stderr}");
        assert!(stderr.contains(says), "{says:?} in {stderr}");
    }
}

/// Runs that really failed — a handler that panics, a gate that never opens, the observer
/// gone silent — are recorded as not matching, exit 1, and never called edited; and a real
/// failed report whose verdicts are edited to say it matched is named.
#[test]
fn failed_runs_are_not_called_edited_and_their_verdicts_cannot_be_edited() {
    let dir = scratch("faults");
    let runtime = common::runtime();
    let faults = [
        (
            Front::Async,
            Faults {
                handler_panics: Some(Label::F1),
                ..Faults::default()
            },
        ),
        (
            Front::Async,
            Faults {
                gate_stuck: true,
                ..Faults::default()
            },
        ),
        (
            Front::Async,
            Faults {
                observer_silent: true,
                ..Faults::default()
            },
        ),
        (
            Front::Threaded,
            Faults {
                handler_panics: Some(Label::F1),
                ..Faults::default()
            },
        ),
        (
            Front::Threaded,
            Faults {
                caller_disconnects: Some(Label::Slow(1)),
                ..Faults::default()
            },
        ),
        (
            Front::Threaded,
            Faults {
                gate_stuck: true,
                ..Faults::default()
            },
        ),
    ];
    // The runs wait out their stuck steps side by side.
    let _inside = runtime.enter();
    let mut runs = tokio::task::JoinSet::new();
    let faults = (faults.into_iter())
        .map(|(front, faults)| (front, Arc::new(faults) as Arc<dyn Hooks>))
        .chain([(
            Front::Threaded,
            Arc::new(StuckBeforeTheGate::default()) as Arc<dyn Hooks>,
        )]);
    for (front, hooks) in faults {
        let options = Options {
            hooks,
            // A failure guard that fires quickly: the stuck step is the test.
            safety_timeout: std::time::Duration::from_secs(1),
            ..Options::on(front)
        };
        runs.spawn(isolation_lab::lab::run_with(Inputs::default(), options));
    }
    let reports = runtime.block_on(runs.join_all());
    for (i, report) in reports.into_iter().enumerate() {
        assert!(report.failure.is_some(), "fault {i} fails the run");
        let file = format!("fault-{i}.json");
        let json = serde_json::to_value(&report).expect("a report serializes");
        std::fs::write(dir.join(&file), json.to_string()).expect("saved");
        record_failed(&dir, &file);

        // Its verdicts edited to say it matched.
        let mut lie = json;
        lie.as_object_mut().expect("a report").remove("failure");
        set(&mut lie, "/matches_model", json!(true));
        for policy in list(&mut lie, "/policies") {
            policy["model"]["matches"] = json!(true);
            policy["model"]["mismatches"] = json!([]);
        }
        let file = format!("fault-{i}-lie.json");
        std::fs::write(dir.join(&file), lie.to_string()).expect("saved");
        let output = record_here(&dir, &file, false);
        let stdout = &output.stdout;
        assert_eq!(output.code, 1, "{file}: {stdout}");
        assert!(!stdout.contains("matched the policy model."), "{stdout}");
        assert!(
            stdout.contains("the model block says the run matched, but its evidence does not"),
            "{stdout}"
        );
    }
}

/// A report in a file whose name is not UTF-8 (`r\xff.json`): the record names it, and the
/// command it prints, in `$'…'` quotes that bash reads back as the same file — the command,
/// run by bash, writes that very file.
#[cfg(unix)]
#[test]
fn a_file_name_that_is_not_utf8_is_shown_as_the_shell_reads_it() {
    use std::os::unix::ffi::OsStrExt;
    let bash = Command::new("bash").arg("-c").arg("true").status();
    if !bash.is_ok_and(|s| s.success()) {
        let _ = writeln!(std::io::stderr(), "skipped: bash is not installed");
        return;
    }
    let dir = scratch("non-utf8");
    let name = std::ffi::OsStr::from_bytes(b"r\xff.json");
    std::fs::write(dir.join(name), fixture(DEFAULT).to_string()).expect("saved");
    let output = Command::new(LAB)
        .arg("record")
        .arg(name)
        .current_dir(&dir)
        .output()
        .expect("the binary starts");
    let shown = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        shown.starts_with("isolation-lab record of $'r\\xff.json'\n"),
        "{shown}"
    );
    // A run's flags given to `record` are refused with the command to use, the file quoted.
    let misplaced = Command::new(LAB)
        .args(["--held", "4", "record"])
        .arg(name)
        .output()
        .expect("the binary starts");
    let refused = text(&misplaced.stderr);
    assert_eq!(misplaced.status.code(), Some(2), "{refused}");
    assert!(
        refused.contains(
            "isolation-lab --held 4 > $'r\\xff.json' && isolation-lab record $'r\\xff.json'"
        ),
        "{refused}"
    );
    let command = shown
        .lines()
        .find_map(|l| l.strip_prefix("Command: "))
        .expect("a command line");
    assert!(command.ends_with(" > $'r\\xff.json'"), "{command}");

    let again = dir.join("again");
    std::fs::create_dir_all(&again).expect("a directory for the rerun");
    let bin = Path::new(LAB).parent().expect("the binary's directory");
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("a PATH");
    let rerun = Command::new("bash")
        .args(["-c", command])
        .env("PATH", path)
        .current_dir(&again)
        .output()
        .expect("bash starts");
    assert!(rerun.status.success(), "{command}: {}", text(&rerun.stderr));
    let written: Vec<_> = std::fs::read_dir(&again)
        .expect("listed")
        .map(|e| e.expect("an entry").file_name())
        .collect();
    assert_eq!(written, [name.to_owned()], "{command} writes the same file");
}

/// A classroom session's report (recorded from a real session in which the room sent three
/// requests, one held at the run's gate and one at the room's) is read run by run: its run
/// matches, the room's requests are listed with pointers, exit 0. A session built from two real
/// runs matches too; one closed mid-run does not, and one with no run is not said to match.
#[test]
fn a_classroom_report_is_recorded_run_by_run_with_the_rooms_requests() {
    let dir = scratch("classroom");
    std::fs::write(dir.join("s.json"), fixture(SESSION).to_string()).expect("saved");
    let (record, shown) = record(&dir, "s.json");
    assert_eq!(record["verdict"]["verdict"], "matched", "{record}");
    let requests: Vec<_> = record["room_requests"]
        .as_array()
        .expect("the room's requests")
        .iter()
        .map(|r| {
            (
                r["request"].clone(),
                r["status"].clone(),
                r["pointer"].clone(),
            )
        })
        .collect();
    assert_eq!(
        requests,
        [
            (json!("R1"), json!(200), json!("/room_requests/0")),
            (json!("R3"), json!(200), json!("/room_requests/1")),
            (json!("R2"), json!(200), json!("/room_requests/2")),
        ]
    );
    assert!(
        shown.contains("  R1 /slow in run 1 (partitioned): answered 200\n"),
        "{shown}"
    );
    assert!(
        shown.ends_with("Every run of the session matched the policy model.\n"),
        "{shown}"
    );
    // R2's student gave up while it was held, and the front cancelled its work after the
    // classroom listed it: as a real session writes it.
    let mut gave_up = fixture(SESSION);
    r2_gave_up(&mut gave_up, 17);
    std::fs::write(dir.join("gave-up.json"), gave_up.to_string()).expect("saved");
    let (gave_up, shown_gave_up) = self::record(&dir, "gave-up.json");
    assert_eq!(gave_up["verdict"]["verdict"], "matched", "{gave_up}");
    assert!(
        shown_gave_up.contains("R2 /slow in run 1 (partitioned): "),
        "{shown_gave_up}"
    );

    let session = fixture(SESSION);
    let runs = record["runs"].as_array().expect("runs");
    let lines: Vec<&str> = shown.lines().collect();
    for cited in runs[0]["evidence"].as_array().expect("evidence") {
        let pointer = check(&session, cited, &lines);
        assert!(pointer.starts_with("/runs/0/policies/0/"), "{pointer}");
    }

    let built = json!({
        "runs": [fixture(DEFAULT), fixture(HELD_1)],
        "room_requests": [], "room_gates": [], "event_streams_dropped": 0,
        "connections_refused": 0, "matches_model": true,
    });
    std::fs::write(dir.join("built.json"), built.to_string()).expect("saved");
    let (built, shown) = self::record(&dir, "built.json");
    assert_eq!(built["runs"].as_array().map(Vec::len), Some(2));
    assert!(shown.contains("== Run 2 of 2 =="), "{shown}");

    // A session closed mid-run (saved from `isolation-lab classroom`: S1 sent, the room's R1
    // to /fast answered and its R2 to /slow held, then SIGINT): it did not match, and it is
    // not called edited.
    let closed = "session-closed-mid-run.json";
    std::fs::write(dir.join(closed), fixture(closed).to_string()).expect("saved");
    let output = record_here(&dir, closed, false);
    let stderr = &output.stderr;
    assert_eq!(output.code, 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "isolation-lab: {closed}: the session did not match the policy model; its report says \
             why: run 1: shared: \
             the run was closed before its next step"
        )),
        "{stderr}"
    );
    assert!(
        output
            .stdout
            .contains("  R2 /slow in run 1 (shared): answered 200\n"),
        "{}",
        output.stdout
    );

    // As a session ended before its first step writes it.
    let empty = json!({ "runs": [], "room_requests": [], "room_gates": [], "matches_model": false,
                        "event_streams_dropped": 0, "connections_refused": 0 });
    std::fs::write(dir.join("empty.json"), empty.to_string()).expect("saved");
    let output = record_here(&dir, "empty.json", false);
    assert_eq!(output.code, 1);
    assert!(
        output.stderr.contains("the session ran nothing"),
        "{}",
        output.stderr
    );
}

/// An edited session lists each contradiction once, and each of its runs (none vouched for)
/// lists those that point into it and only those, so the runs' lists together hold each
/// finding once more: a session of many runs, each edited, lists in proportion to its runs,
/// not their square.
#[test]
fn an_edited_sessions_runs_each_list_their_own_findings() {
    let dir = scratch("edited-session");
    let mut session = fixture("classroom-two-runs-room-gates.json");
    let runs = list(&mut session, "/runs");
    for run in runs.iter_mut() {
        set(
            run,
            "/policies/0/fast_response_before_release/status",
            json!(503),
        );
    }
    let edited = runs[0].clone();
    runs.extend(std::iter::repeat_n(edited, 8));
    std::fs::write(dir.join("edited.json"), session.to_string()).expect("saved");
    let output = record_here(&dir, "edited.json", true);
    assert_eq!(output.code, 1, "{}", output.stderr);
    let record: Value = serde_json::from_str(&output.stdout).expect("record JSON");
    let pointers = |verdict: &Value| -> Vec<String> {
        assert_eq!(verdict["verdict"], "does_not_hold", "{verdict}");
        let findings = verdict["findings"].as_array().expect("findings");
        (findings.iter())
            .map(|f| f["pointer"].as_str().expect("a pointer").to_owned())
            .collect()
    };
    let all = pointers(&record["verdict"]);
    let runs = record["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 10);
    let mut listed = 0;
    for (i, run) in runs.iter().enumerate() {
        let own = pointers(&run["verdict"]);
        assert!(!own.is_empty(), "run {i} was edited too");
        let prefix = format!("/runs/{i}/");
        assert!(own.iter().all(|p| p.starts_with(&prefix)), "{own:?}");
        assert!(own.iter().all(|p| all.contains(p)), "{own:?} in {all:?}");
        assert_eq!(run["matches_model"], false);
        assert_eq!(run["evidence"], json!([]));
        listed += own.len();
    }
    let into_runs = all.iter().filter(|p| p.starts_with("/runs/")).count();
    assert_eq!(
        listed, into_runs,
        "each finding in a run is listed under it once"
    );
}

/// Text a report quotes cannot draw on the instructor's terminal: a server's description, a
/// runtime and a failure's reason (a run's, and a session's run's) that carry an escape (erase the line, hide what follows), a
/// carriage return or a line break, each with a fake verdict after it, are shown written out
/// (`\u{1b}`), each on its line, in the record and in its one-line verdict, and so is a
/// version that makes the file refused.
#[test]
fn text_from_a_report_is_shown_and_draws_nothing() {
    let dir = scratch("escapes");
    const LIE: &str = "The run matched the policy model.";
    const SESSION_LIE: &str = "Every run of the session matched the policy model.";
    let drawn = format!("x\u{1b}[2K\r{LIE}\u{1b}[8m\n{LIE}\n{SESSION_LIE}");
    let cases: [(&str, &str, i32); 5] = [
        (DEFAULT, "/runner/server", 1),
        (DEFAULT, "/runner/runtime", 1),
        ("spawn-blocking-s2-out-of-descriptors.json", "/failure", 1),
        (CLOSED_MID_RUN, "/runs/0/failure", 1),
        (DEFAULT, "/runner/version", 2),
    ];
    for (i, (base, pointer, code)) in cases.into_iter().enumerate() {
        let mut report = fixture(base);
        let text = match report.pointer(pointer).and_then(Value::as_str) {
            Some(said) if pointer.ends_with("/failure") => format!("{said}{drawn}"),
            _ => drawn.clone(),
        };
        set(&mut report, pointer, json!(text));
        let file = format!("drawn-{i}.json");
        std::fs::write(dir.join(&file), report.to_string()).expect("saved");
        let shown = record_here(&dir, &file, false);
        let (stdout, stderr) = (&shown.stdout, &shown.stderr);
        let context = format!("{pointer} in {base}:\n{stdout}{stderr}");
        assert_eq!(shown.code, code, "{context}");
        for output in [stdout, stderr] {
            assert!(!output.contains(['\u{1b}', '\r']), "{context}");
            assert!(
                output
                    .lines()
                    .all(|line| line != LIE && line != SESSION_LIE),
                "{context}"
            );
        }
        assert_eq!(stderr.lines().count(), 1, "{context}");
        assert!(stderr.contains(r"x\u{1b}[2K"), "{context}");
    }
}
