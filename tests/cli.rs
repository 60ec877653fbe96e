//! The binary as a user runs it: refused command lines, inherited proxies, and both formats.

use std::net::TcpListener;
use std::process::{Command, Output};

fn lab(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
    command.args(args);
    command
}

fn run(command: &mut Command) -> (Option<i32>, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().expect("the binary starts");
    let text = |bytes| String::from_utf8(bytes).expect("output is UTF-8");
    (status.code(), text(stdout), text(stderr))
}

/// Every refused input exits 2 with a message naming the flag and prints no report.
#[test]
fn bad_input_exits_2_with_a_clear_message_and_no_report() {
    let cases: [(&[&str], &str); 9] = [
        (&["--slots", "1"], "2 through 4"),
        (&["--slots", "5"], "2 through 4"),
        (&["--held", "0"], "1 through 4"),
        (&["--held", "5"], "1 through 4"),
        (&["--mode", "bogus"], "shared, partitioned, both"),
        (&["--slots", "abc"], "2 through 4"),
        (&["--port", "8080"], "--port"),
        (&["--host", "0.0.0.0"], "--host"),
        (&["--format", "xml"], "json, text"),
    ];
    for (args, hint) in cases {
        let (code, stdout, stderr) = run(&mut lab(args));
        assert_eq!(code, Some(2), "{args:?}: stderr {stderr}");
        assert_eq!(
            stdout, "",
            "{args:?}: a refused command line prints no report"
        );
        assert!(
            stderr.contains(args[0]),
            "{args:?}: the message names the flag: {stderr}"
        );
        assert!(
            stderr.contains(hint),
            "{args:?}: the message says {hint:?}: {stderr}"
        );
    }
}

/// The default run exits 0 with a JSON report that matches the model.
#[test]
fn default_run_prints_a_matching_json_report() {
    let (code, stdout, stderr) = run(&mut lab(&[]));
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is JSON");
    assert_eq!(report["lab"], "concurrency-isolation");
    assert_eq!(report["matches_model"], true);
    assert_eq!(
        report["inputs"],
        serde_json::json!({"mode": "both", "slots": 2, "held": 2})
    );
    let modes: Vec<_> = report["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .map(|p| &p["mode"])
        .collect();
    assert_eq!(modes, ["shared", "partitioned"]);
    assert!(report.get("failure").is_none());
}

/// Proxy variables pointing at a closed port change nothing: the lab talks only to itself.
#[test]
fn inherited_proxies_are_ignored() {
    let closed = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port");
    // The listener is dropped: nothing listens there any more.
    let proxy = format!("http://{closed}");
    let mut command = lab(&[]);
    for name in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        command.env(name, &proxy);
    }
    command.env_remove("NO_PROXY").env_remove("no_proxy");
    let (code, stdout, stderr) = run(&mut command);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is JSON");
    assert_eq!(report["matches_model"], true);
}

/// `--format text` is a table for a person: the workshop's questions, one column per policy.
#[test]
fn text_format_is_a_readable_table() {
    let (code, stdout, stderr) = run(&mut lab(&["--format", "text"]));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        serde_json::from_str::<serde_json::Value>(&stdout).is_err(),
        "not JSON"
    );
    let row = |heading: &str| {
        // The header row is the one that starts with the blank heading column.
        let header = |l: &&str| heading.is_empty() && l.starts_with(' ');
        let line = stdout
            .lines()
            .find(|l| header(l) || !heading.is_empty() && l.starts_with(heading));
        let line = line.unwrap_or_else(|| panic!("no {heading:?} row in\n{stdout}"));
        line[heading.len()..]
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect::<Vec<_>>()
    };
    assert_eq!(row(""), ["shared", "partitioned"]);
    assert_eq!(row("held before F1"), ["S1 S2", "S1"]);
    assert_eq!(row("refused slow requests"), ["none", "S2 (503)"]);
    assert_eq!(
        row("F1 before release"),
        ["503 (held by S1 S2)", "200 (fast permit)"]
    );
    assert_eq!(row("after release"), ["S1 S2: 200", "S1: 200"]);
    assert_eq!(row("matches the model"), ["yes", "yes"]);
    assert!(stdout.contains("Every observation matched the policy model."));
}

/// `--help` and `--version` answer and exit 0 without running anything.
#[test]
fn help_and_version_exit_0() {
    let (code, stdout, _) = run(&mut lab(&["--help"]));
    assert_eq!(code, Some(0));
    for flag in ["--mode", "--slots", "--held", "--format"] {
        assert!(stdout.contains(flag), "--help lists {flag}");
    }
    let (code, stdout, _) = run(&mut lab(&["--version"]));
    assert_eq!(code, Some(0));
    assert!(stdout.starts_with("isolation-lab "), "{stdout}");
}
