//! The binary as a user runs it: refused command lines, inherited proxies, and both formats.

use std::io::Write as _;
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};

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
    let cases: [(&[&str], &str); 10] = [
        (&["--slots", "1"], "2 through 4"),
        (&["--slots", "5"], "2 through 4"),
        (&["--held", "0"], "1 through 4"),
        (&["--held", "5"], "1 through 4"),
        (&["--mode", "bogus"], "shared, partitioned, both"),
        (&["--slots", "abc"], "2 through 4"),
        (&["--port", "8080"], "nothing selects a host, URL or port"),
        (
            &["--host", "0.0.0.0"],
            "nothing selects a host, URL or port",
        ),
        (&["--format", "xml"], "json, text"),
        (
            &["--url", "http://10.0.0.1/"],
            "nothing selects a host, URL or port",
        ),
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

/// Hostile values for every flag — negative, huge, empty, repeated, non-ASCII, wrong case —
/// and unknown subcommands: each exits 2 with a message before anything else happens. The
/// process may open only one more file descriptor than stdio: the Tokio runtime (the first
/// thing a run creates, before any socket) cannot start, and a run fails with status 1 — so a
/// refusal with status 2 and its message shows it came before any runtime or socket.
#[cfg(unix)]
#[test]
fn hostile_command_lines_are_refused_before_any_socket() {
    let limited = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
        crate::common::limited(command.args(args), libc::RLIMIT_NOFILE, 4);
        run(crate::common::standard_descriptors_only(&mut command))
    };
    // The control: with that limit a valid run cannot even start its runtime.
    let (code, stdout, stderr) = limited(&["--held", "1"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("Too many open files"), "{stderr}");

    let hostile: &[&[&str]] = &[
        &["--slots", "-1"],
        &["--slots=-1"],
        &["--held", "-4"],
        &["--slots", "258"],
        &["--held", "99999999999999999999999999"],
        &["--slots", ""],
        &["--held="],
        &["--mode", ""],
        &["--format", ""],
        &["--slots", "2", "--slots", "3"],
        &["--held", "1", "--held", "1"],
        &["--mode", "shared", "--mode", "partitioned"],
        &["--format", "json", "--format", "text"],
        &["--slots", "３"],
        &["--held", "٢"],
        &["--held", "2\u{200b}"],
        &["--mode", "shäred"],
        &["--mode", "SHARED"],
        &["--format", "JSON"],
        &["--format", "😀"],
        &["--slots"],
        &["bogus"],
        &["serve", "--port", "80"],
        &["--", "shared"],
        &["--held", "+2"],
        &["--workers", "0"],
        &["--workers", "9"],
        &["--blocking-threads", "0"],
        &["--work", "BLOCK"],
        &["--server", "threaded", "--work", "spawn-blocking"],
        &["--server", "threaded", "--workers", "2"],
        &["sweep", "--server", "threaded", "--work", "own-runtime"],
        // The blocking pool's size with work that never uses the pool.
        &["--blocking-threads", "2"],
        &["--work", "block", "--blocking-threads", "512"],
        &[
            "predict",
            "--work",
            "own-runtime",
            "--blocking-threads",
            "1",
        ],
        &["compare", "--blocking-threads", "3"],
        &["classroom", "--workers", "2", "--blocking-threads", "3"],
        // A lease or fencing without the global permits they shape.
        &["replicas", "--lease-ms", "60000"],
        &["replicas", "--global", "off", "--fencing", "on"],
    ];
    for args in hostile {
        let (code, stdout, stderr) = limited(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// Bytes that are not UTF-8 are refused like any other bad value.
#[cfg(unix)]
#[test]
fn non_utf8_values_exit_2() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let mut command = lab(&["--slots"]);
    command.arg(OsStr::from_bytes(&[0xff, 0xfe]));
    let (code, stdout, stderr) = run(&mut command);
    assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
    assert!(stderr.contains("UTF-8"), "{stderr}");
}

/// What a refused command line quotes of itself draws nothing on the terminal: an escape, a
/// carriage return and a line break in a value, in an unknown argument and in a subcommand's
/// unknown flag are each written out (`\u{1b}`).
#[test]
fn refused_values_are_quoted_as_they_are_and_draw_nothing() {
    let drawn = "2\u{1b}[2K\rFAKE\u{1b}[8m\nY";
    let flag = format!("--x{drawn}");
    for args in [&["--slots", drawn][..], &[drawn], &["predict", &flag]] {
        let (code, stdout, stderr) = run(&mut lab(args));
        assert_eq!((code, stdout.as_str()), (Some(2), ""), "{args:?}: {stderr}");
        assert!(!stderr.contains(['\u{1b}', '\r']), "{args:?}: {stderr}");
        assert!(
            stderr.contains(r"2\u{1b}[2K\u{d}FAKE\u{1b}[8m\u{a}Y"),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.lines().any(|l| l.starts_with('Y')),
            "{args:?}: {stderr}"
        );
    }
    // A value of a line break alone is written out where it is quoted, and clap's own lines
    // stay lines.
    let (code, _, stderr) = run(&mut lab(&["--slots", "\n"]));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(r"invalid value '\u{a}' for"), "{stderr}");
    assert!(
        stderr.lines().count() > 1 && stderr.ends_with('\n'),
        "{stderr}"
    );
}

/// A stdout open for reading only (`isolation-lab 1</etc/hostname`) loses the report: the lab
/// says so in one line, exit 1, rather than exit 0 having written nothing (std takes the failed
/// write, EBADF, as done).
#[test]
fn a_stdout_open_for_reading_only_fails_in_one_line() {
    let read_only = std::fs::File::open(env!("CARGO_MANIFEST_DIR")).expect("a directory opens");
    let output = lab(&[])
        .stdout(read_only)
        .stderr(Stdio::piped())
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        "isolation-lab: cannot write to stdout: it is open for reading only\n"
    );
}

/// A reader that is gone before the report is written (`isolation-lab | head -c 1`, at its
/// most abrupt) is not a crash: no panic, and the run's own status.
#[test]
fn a_closed_stdout_is_not_a_crash() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let child = lab(&["--format", "text"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let output = child.wait_with_output().expect("the binary ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The same through a real shell pipeline: `isolation-lab | head -c 1` prints one byte, and
/// the lab itself — not `head`, whose status a pipeline reports — exits 0 without a panic.
/// Bash's `PIPESTATUS` carries the lab's own status out of the pipeline.
#[cfg(unix)]
#[test]
fn piping_into_head_prints_one_byte() {
    if Command::new("bash").arg("--version").output().is_err() {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: bash is not installed (PIPESTATUS needs it)"
        );
        return;
    }
    let output = Command::new("bash")
        .arg("-c")
        .arg(r#""$0" | head -c 1; exit "${PIPESTATUS[0]}""#)
        .arg(env!("CARGO_BIN_EXE_isolation-lab"))
        .stdin(Stdio::null())
        .output()
        .expect("bash starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(0),
        "the lab's own status; {stderr}"
    );
    assert_eq!(stdout, "{");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The hidden front child, run as the lab runs it: a stdin that ends at once is a stop, so it
/// says it is ready, reports its stop and exits 0, with nothing but JSON lines on stdout.
#[test]
fn the_front_child_reports_ready_then_stopped() {
    let mut child = lab(&["__front", r#"{"front":"async","capacity":1}"#])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    drop(child.stdin.take());
    let output = child.wait_with_output().expect("the child exits");
    let stdout = String::from_utf8(output.stdout).expect("UTF-8");
    let messages: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("every line is JSON"))
        .collect();
    let kinds: Vec<_> = messages.iter().map(|m| m["message"].clone()).collect();
    assert_eq!(kinds, ["ready", "stopped"], "{stdout}");
    assert!(
        messages[0]["address"]
            .as_str()
            .is_some_and(|a| a.starts_with("127.0.0.1:"))
    );
    assert_eq!(output.status.code(), Some(0));
}

/// `hold` refuses a count outside 1 through 50 000, a count with a sign, a second `--counts`,
/// or anything that is not a count, a front or a format it knows, with exit 2 and a message
/// naming the flag, and prints nothing.
#[test]
fn hold_refuses_what_it_cannot_measure() {
    for (args, flag) in [
        (&["hold", "--counts", "0"][..], "--counts"),
        (&["hold", "--counts", "50001"], "--counts"),
        (&["hold", "--counts", "10,abc"], "--counts"),
        (&["hold", "--counts", ""], "--counts"),
        (&["hold", "--server", "forked"], "--server"),
        (&["hold", "--format", "png"], "--format"),
        (&["hold", "--held", "4"], "--held"),
        (&["hold", "--counts", "+10"], "--counts"),
        (&["hold", "--counts", "10", "--counts", "20"], "--counts"),
    ] {
        let (code, stdout, stderr) = run(&mut lab(args));
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
    let (_, _, stderr) = run(&mut lab(&["hold", "--counts", "50001"]));
    assert!(stderr.contains("from 1 through 50000"), "{stderr}");
}

/// `hold` as a user runs it, on small counts: a table and its reading, the same as JSON with
/// the preflight, and a picture; each front in a child of the binary itself.
#[test]
fn hold_prints_a_table_json_and_a_picture() {
    let (code, stdout, stderr) = run(&mut lab(&["hold", "--counts", "10,20"]));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("0 (idle)") && stdout.contains("What the figures show"),
        "{stdout}"
    );
    let (code, stdout, stderr) = run(&mut lab(&["hold", "--counts", "10", "--format", "json"]));
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(report["instrument"], "hold");
    assert!(report["preflight"]["limits"]["max_map_count"].is_number());
    assert_eq!(report["fronts"][1]["points"][0]["outcome"], "held");
    let args = [
        "hold", "--counts", "10", "--server", "async", "--format", "svg",
    ];
    let (code, stdout, stderr) = run(&mut lab(&args));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("<svg"), "{stdout:.100}");
}
