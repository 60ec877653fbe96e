//! `replicas` end to end: real replica processes (the lab's binary), real HTTP on loopback, and
//! a real `redis-server` started per test on a free loopback port (skipped with one line where
//! `redis-server` is not installed). Every test whose run started replicas also checks that
//! nothing it started is left running or listening (`nothing_left`: the replicas, and a private
//! `redis-server`, whose keys go with it); every test with a Redis of its own, that no key of
//! the run is left in it, or, of a killed lab, that each key expires.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::common::is_gone;

use isolation_lab::evidence::Decision;
use isolation_lab::label::Label;
use isolation_lab::policy::Slots;
use isolation_lab::replicas::{
    CountedAt, Effect, Engine, Lapsed, LeaseMs, LossCause, OverAdmission, ReplicaCount, ReplicaId,
    ReplicasHooks, ReplicasInputs, ReplicasOptions, ReplicasReport, Requests, Sent, WorkEnd,
    run_with,
};

/// The tests' lease: short, so a test is quick, yet renewed every 133 ms, so a replica keeps
/// its permits on a busy machine.
const LEASE_MS: u32 = 400;

/// A guard against a hang; every test ends well within it.
const GUARD: Duration = Duration::from_secs(60);

fn inputs(replicas: u8, slots: u8, held: u8, global: Engine, lease_ms: u32) -> ReplicasInputs {
    ReplicasInputs {
        replicas: ReplicaCount::new(replicas).expect("an allowed replica count"),
        slots: Slots::new(slots).expect("allowed slots"),
        held: Requests::new(held).expect("an allowed request count"),
        global,
        lease_ms: LeaseMs::new(lease_ms).expect("an allowed lease"),
        fencing: isolation_lab::replicas::Fencing::On,
    }
}

/// The lab's binary runs the replicas; a leak is watched briefly.
fn options() -> ReplicasOptions {
    ReplicasOptions {
        program: Some(env!("CARGO_BIN_EXE_isolation-lab").into()),
        leak_watch: Duration::from_millis(300),
        ..ReplicasOptions::default()
    }
}

/// What a test breaks in a run: each field answers the hook of its name.
#[derive(Debug, Default)]
struct Break {
    redis_stops_at: Option<Label>,
    holders_deleted: bool,
    replica_starved: Option<ReplicaId>,
    redis_dies: bool,
    replica_dies: Option<ReplicaId>,
    replica_stopped: Option<ReplicaId>,
    replica_stops_at: Option<Label>,
    paused_replica_dies: bool,
    paused_replica_continued: bool,
}

impl ReplicasHooks for Break {
    fn redis_stops_at(&self, request: Label) -> bool {
        self.redis_stops_at == Some(request)
    }

    fn holders_deleted(&self) -> bool {
        self.holders_deleted
    }

    fn replica_starved(&self) -> Option<ReplicaId> {
        self.replica_starved
    }

    fn redis_dies(&self) -> bool {
        self.redis_dies
    }

    fn replica_dies(&self) -> Option<ReplicaId> {
        self.replica_dies
    }

    fn replica_stopped(&self) -> Option<ReplicaId> {
        self.replica_stopped
    }

    fn replica_stops_at(&self, request: Label) -> bool {
        self.replica_stops_at == Some(request)
    }

    fn paused_replica_dies(&self) -> bool {
        self.paused_replica_dies
    }

    fn paused_replica_continued(&self) -> bool {
        self.paused_replica_continued
    }
}

/// [`options`], broken as `broken` says.
fn broken(broken: Break) -> ReplicasOptions {
    ReplicasOptions {
        hooks: Arc::new(broken),
        ..options()
    }
}

/// A run of `inputs` broken as `broken` says, which fails with a line starting with `said`.
async fn failing(inputs: ReplicasInputs, broken: Break, said: &str) -> ReplicasReport {
    let report = run(inputs, self::broken(broken)).await;
    let failure = report.failure.as_deref().unwrap_or("(no failure)");
    assert!(failure.starts_with(said), "{failure}");
    report
}

async fn run(inputs: ReplicasInputs, options: ReplicasOptions) -> ReplicasReport {
    tokio::time::timeout(GUARD, run_with(inputs, options))
        .await
        .expect("the run ended within its guard")
}

/// [`run`] with [`options`], run again (three runs at most) while its crash's window was
/// missed: whether this process keeps up with a short lease is the machine's load, not the
/// lab's, and the run says so rather than what it could not see. Every other outcome is the
/// test's to judge.
async fn run_seen(inputs: ReplicasInputs) -> ReplicasReport {
    let missed = |report: &ReplicasReport| {
        (report.failure.as_deref()).is_some_and(|f| f.contains("the crash's window was missed"))
    };
    let mut report = run(inputs.clone(), options()).await;
    for _ in 1..3 {
        if !missed(&report) {
            break;
        }
        report = run(inputs.clone(), options()).await;
    }
    report
}

/// The processes that hold a listening TCP socket on `address`'s port, from `/proc/net/tcp*`
/// and every process's descriptors.
fn listeners(address: &str) -> Vec<u32> {
    let port: u16 = address
        .trim_start_matches("redis://")
        .parse::<SocketAddr>()
        .expect("an address")
        .port();
    let suffix = format!(":{port:04X}");
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(file) = std::fs::File::open(table) else {
            continue;
        };
        // The kernel lists every listening socket before any other, and writes the table as it
        // is read: reading stops at the first socket that is not listening, so the thousands of
        // connections the suite leaves in TIME-WAIT are neither written nor parsed.
        for line in BufReader::new(file).lines().skip(1).map_while(Result::ok) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local address, state (0A is LISTEN), inode
            if fields.len() <= 9 || fields[3] != "0A" {
                break;
            }
            if fields[1].ends_with(&suffix) {
                inodes.push(format!("socket:[{}]", fields[9]));
            }
        }
    }
    let mut owners = Vec::new();
    // No listener on the port: nobody to look for among the processes' descriptors.
    if inodes.is_empty() {
        return owners;
    }
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
        });
        if holds {
            owners.push(pid);
        }
    }
    owners
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Nothing that outlived the run listens on `address`. Tests run side by side, so another test's
/// server (in this process, or in a process it started, however deep: a `hold` front under a
/// test alone in its own process) may have been given the same port since: only a listener
/// held by some other process, such as an orphan of a replica, is a leak. A connection attempt
/// could not tell them apart.
fn refuses(address: &str) -> bool {
    listeners(address).into_iter().all(descends_from_me)
}

/// Whether `pid` is this process or one it started, directly or not. An orphan has been given
/// to init or a subreaper, above this process, so it is not.
fn descends_from_me(pid: u32) -> bool {
    let me = std::process::id();
    let mut pid = Some(pid);
    while let Some(p) = pid.filter(|&p| p > 1) {
        if p == me {
            return true;
        }
        pid = parent_of(p);
    }
    false
}

/// Every replica process is gone and its port closed; a private redis-server too.
fn nothing_left(report: &ReplicasReport) {
    assert!(!report.evidence.replicas.is_empty(), "replicas started");
    for replica in &report.evidence.replicas {
        let proc = format!("/proc/{}", replica.pid);
        assert!(
            !Path::new(&proc).exists(),
            "{} ({proc}) still runs",
            replica.id
        );
        assert!(
            refuses(&replica.address.to_string()),
            "{} still listens on {}",
            replica.id,
            replica.address
        );
    }
    if let Some(engine) = report
        .evidence
        .engine
        .as_ref()
        .filter(|e| e.started_by_the_run)
    {
        let pid = engine.pid.expect("a private redis-server's pid");
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "the private redis-server ({pid}) still runs"
        );
        assert!(
            refuses(&engine.address),
            "the private redis-server still listens"
        );
    }
}

fn held(report: &ReplicasReport, id: u8) -> Vec<Label> {
    report.evidence.held_at_once[&ReplicaId(id)].clone()
}

fn balanced(report: &ReplicasReport, skip: Option<ReplicaId>) {
    for replica in report
        .evidence
        .replicas
        .iter()
        .filter(|r| Some(r.id) != skip)
    {
        let ledger = replica
            .ledger
            .as_ref()
            .expect("a stopped replica reports its ledger");
        for (pool, account) in ledger {
            let broken: Vec<_> = account.broken().collect();
            assert!(broken.is_empty(), "{} {pool}: {broken:?}", replica.id);
            assert_eq!(account.admitted, account.finished, "{}", replica.id);
        }
    }
}

/// Whether `redis-server` is on `PATH`; if not, says in one line that `test` is skipped.
fn redis_or_skip(test: &str) -> bool {
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| dir.join("redis-server").is_file())
    });
    if !on_path {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped {test}: redis-server is not on PATH"
        );
    }
    on_path
}

/// A `redis-server` of the test's own on a free loopback port, killed and reaped on drop.
struct TestRedis {
    child: Child,
    port: u16,
    /// Its working directory, removed after the server is reaped (fields drop after `drop`).
    _dir: crate::common::TempDir,
}

impl TestRedis {
    /// Starts one, or says in one line why the test is skipped.
    fn start(test: &str) -> Option<TestRedis> {
        if !redis_or_skip(test) {
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = crate::common::temp_dir("lab-test-redis").expect("a scratch directory");
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--logfile", ""])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let stdout = child.stdout.take().expect("piped");
        // Its log says when it accepts connections: wait for that line, not for a time.
        let ready = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains("Ready to accept connections"));
        assert!(ready, "redis-server on port {port} never said it was ready");
        Some(TestRedis {
            child,
            port,
            _dir: dir,
        })
    }

    fn engine(&self) -> Engine {
        format!("redis://127.0.0.1:{}", self.port)
            .parse()
            .expect("a loopback URL")
    }

    /// Every key the lab left in this Redis.
    fn lab_keys(&self) -> Vec<String> {
        let client =
            redis::Client::open(format!("redis://127.0.0.1:{}", self.port)).expect("a client");
        let mut conn = client.get_connection().expect("the test's Redis answers");
        redis::cmd("KEYS")
            .arg("isolation-lab:*")
            .query(&mut conn)
            .expect("KEYS answers")
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn refused_naming(probes: &[Sent], holder: &str) -> bool {
    probes
        .iter()
        .any(|p| p.decision == Decision::Refused && p.held_by.iter().any(|h| h == holder))
}

/// Own permits: 2 replicas × 2 slots hold all 4 requests at once — the "global" two-permit
/// limit exceeded — and each replica's own ledger balances.
#[tokio::test]
async fn own_permits_two_replicas_of_two_hold_four() {
    let report = run(inputs(2, 2, 4, Engine::Off, 2000), options()).await;
    assert_eq!(report.failure, None);
    assert_eq!(held(&report, 1), [Label::Slow(1), Label::Slow(3)]);
    assert_eq!(held(&report, 2), [Label::Slow(2), Label::Slow(4)]);
    assert!(report.matches_model, "{:?}", report.mismatches);
    balanced(&report, None);
    let ok = report
        .evidence
        .released
        .iter()
        .all(|a| a.status == Some(200));
    assert!(
        ok && report.evidence.released.len() == 4,
        "{:?}",
        report.evidence.released
    );
    let text = isolation_lab::replicas::render::render(&report);
    assert!(
        text.contains("the global two-permit limit is exceeded"),
        "{text}"
    );
    let together = "Each ledger balances on its own; together they admitted more than any one";
    assert!(text.contains(together), "{text}");
    // Nothing continued this test's process: the report says nothing of a stop. Had the lab
    // been stopped and continued (Ctrl-Z, then fg), its report would say its times count that.
    assert!(!report.evidence.lab_continued);
    let json = serde_json::to_value(&report).expect("JSON");
    assert!(json["evidence"].get("lab_continued").is_none(), "{json}");
    assert!(!text.contains("SIGCONT"), "{text}");
    let mut continued = report.clone();
    continued.evidence.lab_continued = true;
    let json = serde_json::to_value(&continued).expect("JSON");
    assert_eq!(json["evidence"]["lab_continued"], true, "{json}");
    let text = isolation_lab::replicas::render::render(&continued);
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let said = "The lab itself was continued (SIGCONT) during the run, as after a stop (Ctrl-Z, \
                then fg): the replicas, Redis and the leases went on meanwhile, and the times \
                above may count the stop.";
    assert!(words.contains(said), "{text}");
    nothing_left(&report);
}

/// Own permits: 3 replicas × 2 slots hold 6; the 7th and 8th are refused by a full replica.
#[tokio::test]
async fn own_permits_three_replicas_of_two_hold_six() {
    let report = run(inputs(3, 2, 8, Engine::Off, 2000), options()).await;
    assert_eq!(report.failure, None);
    let total: usize = report.evidence.held_at_once.values().map(Vec::len).sum();
    assert_eq!(total, 6);
    let refused: Vec<_> = report
        .evidence
        .sent
        .iter()
        .filter(|s| s.decision == Decision::Refused)
        .map(|s| (s.request, s.held_by.clone()))
        .collect();
    assert_eq!(
        refused,
        [
            (Label::Slow(7), vec!["r1/S1".to_owned(), "r1/S4".to_owned()]),
            (Label::Slow(8), vec!["r2/S2".to_owned(), "r2/S5".to_owned()]),
        ]
    );
    assert!(report.matches_model, "{:?}", report.mismatches);
    balanced(&report, None);
    let text = isolation_lab::replicas::render::render(&report);
    let row = |first: &str| {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(first));
        line.unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    // A refusal is marked in its replica's column, its holders in a column of their own.
    assert_eq!(
        row("sent"),
        [
            "sent", "round", "robin", "r1", "r2", "r3", "503,", "held", "by"
        ]
    );
    assert_eq!(row("S7"), ["S7", "503", "r1/S1", "r1/S4"], "{text}");
    fits_100_columns(&text);
    nothing_left(&report);
}

/// The widest run without Redis, 4 replicas of 4 permits and 16 requests, fits 100 columns, and
/// so do its ledgers when no replica reported one.
#[tokio::test]
async fn four_replicas_of_four_fit_100_columns() {
    let report = run(inputs(4, 4, 16, Engine::Off, 2000), options()).await;
    assert!(report.matches_model, "{:?}", report.mismatches);
    fits_100_columns(&isolation_lab::replicas::render::render(&report));
    let mut unreported = report.clone();
    for replica in &mut unreported.evidence.replicas {
        replica.ledger = None;
    }
    let text = isolation_lab::replicas::render::render(&unreported);
    assert!(text.contains("- (no report)"), "{text}");
    fits_100_columns(&text);
    nothing_left(&report);
}

/// Every line of a replicas report in 100 columns, as a terminal shows it, but its first: the
/// command that reproduces the run, kept whole to be copied.
fn fits_100_columns(text: &str) {
    for line in text.lines().skip(1) {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}\n{text}",
            line.chars().count()
        );
    }
}

/// One Redis-backed limit of 2 over 2 replicas: exactly 2 held in all, the rest refused naming
/// both holders. Paused past its lease, r2's permit goes to r1 while r2's work still runs
/// (over-admission); killed, r1's permits are refused to everyone, naming the dead holder,
/// until their lease lapses, and then a probe is admitted. No key of the run is left.
#[tokio::test]
async fn a_global_limit_holds_then_a_pause_over_admits_and_a_crash_lapses() {
    let test = "a_global_limit_holds_then_a_pause_over_admits_and_a_crash_lapses";
    let Some(redis) = TestRedis::start(test) else {
        return;
    };
    let report = run_seen(inputs(2, 2, 4, redis.engine(), LEASE_MS)).await;
    assert_eq!(report.failure, None);
    assert_eq!(held(&report, 1), [Label::Slow(1)]);
    assert_eq!(held(&report, 2), [Label::Slow(2)]);
    for refused in report
        .evidence
        .sent
        .iter()
        .filter(|s| s.decision == Decision::Refused)
    {
        let mut named = refused.held_by.clone();
        named.sort();
        assert_eq!(named, ["r1/S1", "r2/S2"], "{}", refused.request);
    }

    let pause = report.evidence.pause.as_ref().expect("the pause ran");
    assert!(refused_naming(&pause.probes, "r2/S2"), "{:?}", pause.probes);
    let inside: usize = pause.in_sections.values().map(Vec::len).sum();
    assert_eq!(
        inside, 3,
        "the limit 2, plus the paused S2: {:?}",
        pause.in_sections
    );
    assert!(!pause.engine_holders.iter().flatten().any(|h| h == "r2/S2"));
    let r2 = &report.evidence.replicas[1];
    assert_eq!(
        r2.permits.as_ref().expect("global").lapsed,
        [Label::Slow(2)]
    );

    let crash = report.evidence.crash.as_ref().expect("the crash ran");
    assert!(crash.exit.contains("SIGKILL"), "{}", crash.exit);
    assert!(crash.dead_holders.iter().any(|h| h.holder == "r1/S1"));
    assert!(refused_naming(&crash.probes, "r1/S1"), "{:?}", crash.probes);
    let last = crash.probes.last().expect("probes");
    assert_eq!(last.decision, Decision::Admitted, "{:?}", crash.probes);
    assert!(crash.window_ms.is_some());

    // Fenced at the dependency: the paused holder's late write is refused, naming the newer
    // token the probe wrote for the same slot; never more than 2 writes stood at once.
    let late = late_write(&report, "r2/S2");
    assert!(!late.accepted && late.newest > late.fence.token, "{late:?}");
    let dependency = report.dependency.as_ref().expect("global");
    assert!(dependency.stale_accepted.is_empty(), "{dependency:?}");
    assert!(dependency.standing_at_most <= 2, "{dependency:?}");

    assert!(report.matches_model, "{:?}", report.mismatches);
    balanced(&report, Some(ReplicaId(1)));
    let cleanup = report.evidence.engine.as_ref().and_then(|e| e.cleanup);
    assert_eq!(cleanup.map(|c| c.keys_left), Some(0));
    assert_eq!(redis.lab_keys(), Vec::<String>::new());
    let text = isolation_lab::replicas::render::render(&report);
    assert!(text.contains("OVER-ADMISSION by 1"), "{text}");
    assert!(text.contains("left at the signal"), "{text}");
    // The window's sentence says how far apart this run's last refused probe and its admitted
    // one came, from their times: the lease lapsed in between.
    let times: Vec<f64> = crash.probes.iter().filter_map(|p| p.at_ms).collect();
    let apart = times[times.len() - 1] - times[times.len() - 2];
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let said = format!(
        "plus up to the time from the last probe refused to the one admitted ({apart:.0} ms here)."
    );
    assert!(words.contains(&said), "{said}\n{text}");
    fits_100_columns(&text);
    // Cut short while it probed (a signal ended the run): no probe was recorded, and the
    // report says so rather than that none was refused or admitted.
    let mut cut = report.clone();
    let crashed = cut.evidence.crash.as_mut().expect("a crash");
    (crashed.probes, crashed.exit, crashed.window_ms) = (Vec::new(), String::new(), None);
    cut.failure = Some("interrupted by SIGTERM".into());
    cut.matches_model = false;
    let text = isolation_lab::replicas::render::render(&cut);
    let crash_row = text.lines().find(|l| l.starts_with("crash r1"));
    let crash_row: Vec<&str> = crash_row
        .expect("the crash row")
        .split_whitespace()
        .collect();
    assert_eq!(
        crash_row[crash_row.len() - 6..],
        ["?", "cut", "short:", "nothing", "more", "seen"]
    );
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let said = "Crash: r1 was sent SIGKILL holding r1/S1";
    assert!(words.contains(said), "{text}");
    assert!(
        words.contains("what the probes met is not recorded"),
        "{text}"
    );
    nothing_left(&report);
}

/// Without a lease a killed holder's permit leaks: every probe is refused naming it for the
/// whole watch, and the run's cleanup removes it with the run's keys.
#[tokio::test]
async fn without_a_lease_a_dead_holders_permit_leaks_until_cleanup() {
    let test = "without_a_lease_a_dead_holders_permit_leaks_until_cleanup";
    let Some(redis) = TestRedis::start(test) else {
        return;
    };
    let report = run(inputs(2, 2, 4, redis.engine(), 0), options()).await;
    assert_eq!(report.failure, None);
    assert!(
        report.evidence.pause.is_none(),
        "nothing lapses without a lease"
    );
    let crash = report.evidence.crash.as_ref().expect("the crash ran");
    assert!(!crash.probes.is_empty());
    assert!(crash.probes.iter().all(|p| p.decision == Decision::Refused));
    assert!(refused_naming(&crash.probes, "r1/S1"));
    assert!(crash.dead_holders.iter().all(|h| h.lease_left_ms.is_none()));
    let cleanup = report
        .evidence
        .engine
        .as_ref()
        .and_then(|e| e.cleanup)
        .expect("cleaned up");
    assert_eq!(
        (cleanup.holders_removed, cleanup.keys_left),
        (1, 0),
        "the leaked r1/S1"
    );
    assert_eq!(redis.lab_keys(), Vec::<String>::new());
    assert!(report.matches_model, "{:?}", report.mismatches);
    nothing_left(&report);
}

/// The run's own redis-server killed mid-run: the run fails with one line, and still stops
/// and reaps every replica.
#[tokio::test]
async fn redis_killed_mid_run_fails_cleanly() {
    if !redis_or_skip("redis_killed_mid_run_fails_cleanly") {
        return;
    }
    let options = broken(Break {
        redis_dies: true,
        ..Break::default()
    });
    let report = run(inputs(2, 2, 4, Engine::Local, 200), options).await;
    let failure = report.failure.clone().expect("the run failed");
    assert!(!failure.contains('\n'), "one line: {failure}");
    assert!(failure.contains("Redis"), "{failure}");
    assert!(!report.matches_model);
    nothing_left(&report);
}

/// A replica that dies unannounced fails the run with one line naming it.
#[tokio::test]
async fn a_replica_that_dies_fails_the_run_cleanly() {
    let options = broken(Break {
        replica_dies: Some(ReplicaId(2)),
        ..Break::default()
    });
    let report = run(inputs(2, 2, 4, Engine::Off, 2000), options).await;
    let failure = report.failure.clone().expect("the run failed");
    assert!(
        failure.contains("r2") && failure.contains("SIGKILL"),
        "{failure}"
    );
    assert!(!failure.contains('\n'));
    nothing_left(&report);
}

/// Three replicas under one limit of two with a 10 s lease, four slow requests: r3 holds nothing
/// while the run probes r1 for a lease, and is broken as `broken` says (`replica_dies`,
/// `replica_stopped`). The run fails with a line starting `said`, and leaves nothing behind.
async fn idle_r3_while_r1_is_probed(broken: Break, said: &str) -> ReplicasReport {
    let report = failing(inputs(3, 2, 4, Engine::Local, 10_000), broken, said).await;
    nothing_left(&report);
    report
}

/// A replica with nothing to do killed while the run probes another for a lease (10 s here): it
/// is named at the next probe, not when the release reaches it a lease later.
#[tokio::test]
async fn an_idle_replica_that_dies_is_named_while_the_run_probes() {
    if !redis_or_skip("an_idle_replica_that_dies_is_named_while_the_run_probes") {
        return;
    }
    let broken = Break {
        replica_dies: Some(ReplicaId(3)),
        ..Break::default()
    };
    let said = "r3 died unexpectedly (while the run probed r1): its process was killed by SIGKILL";
    idle_r3_while_r1_is_probed(broken, said).await;
}

/// The same replica stopped (SIGSTOP) instead: it is named as found stopped at the next probe,
/// and the close kills and reaps it.
#[tokio::test]
async fn an_idle_replica_stopped_is_named_while_the_run_probes() {
    if !redis_or_skip("an_idle_replica_stopped_is_named_while_the_run_probes") {
        return;
    }
    let broken = Break {
        replica_stopped: Some(ReplicaId(3)),
        ..Break::default()
    };
    let said = "r3 was found stopped (while the run probed r1), by SIGSTOP or another stop signal";
    let report = idle_r3_while_r1_is_probed(broken, said).await;
    let r3 = &report.evidence.replicas[2];
    let exit = r3.exit.as_deref().unwrap_or_default();
    assert!(exit.contains("SIGKILL"), "{exit}");
}

/// The paused replica (r2) continued by another process while the run probes r1 for its lease:
/// named as found running at the next probe, and the text says no probe was admitted before
/// then, not "while it was stopped".
#[tokio::test]
async fn a_paused_replica_continued_from_outside_is_named() {
    if !redis_or_skip("a_paused_replica_continued_from_outside_is_named") {
        return;
    }
    let broken = Break {
        paused_replica_continued: true,
        ..Break::default()
    };
    let said = "r2, which the run had paused, was found running (while the run probed r1): \
                another process continued it (SIGCONT)";
    let report = failing(inputs(2, 2, 4, Engine::Local, 10_000), broken, said).await;
    nothing_left(&report);
    let signals = &report.evidence.replicas[1].signals;
    assert!(
        signals[1].starts_with("SIGCONT: found running"),
        "{signals:?}"
    );
    let text = isolation_lab::replicas::render::render(&report);
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let said = "No probe to r1 was admitted before r2 was found running again.";
    assert!(words.contains(said), "{text}");
    // Found running, it is not continued again at the close.
    assert_eq!(signals.len(), 2, "{signals:?}");
}

/// The paused replica (r2) killed before the run continues it: the run fails naming it, and what
/// was read during the pause stands — Redis's holders then, which the model reads the paused
/// holders against — rather than an empty list saying every lease had lapsed.
#[tokio::test]
async fn a_paused_replica_that_dies_leaves_the_pause_as_it_was_read() {
    if !redis_or_skip("a_paused_replica_that_dies_leaves_the_pause_as_it_was_read") {
        return;
    }
    let broken = Break {
        paused_replica_dies: true,
        ..Break::default()
    };
    let said = "r2 died unexpectedly (while it was paused): its process was killed by SIGKILL";
    let report = failing(inputs(2, 2, 4, Engine::Local, 200), broken, said).await;
    let pause = report
        .evidence
        .pause
        .as_ref()
        .expect("the run paused a replica");
    assert!(!pause.resumed, "{pause:?}");
    assert!(
        pause.engine_holders.as_ref().is_some_and(|h| !h.is_empty()),
        "{pause:?}"
    );
    let text = isolation_lab::replicas::render::render(&report);
    assert!(!text.contains("had lapsed, live"), "{text}");
    nothing_left(&report);
}

/// A replica stopped (SIGSTOP) from outside while its request is decided: the run does not
/// wait its safety timeout out, but fails at once with one line saying the process was
/// stopped; then the stopped replica is killed and every replica reaped.
#[tokio::test]
async fn a_replica_stopped_from_outside_is_named_as_stopped() {
    let options = broken(Break {
        replica_stops_at: Some(Label::Slow(3)),
        ..Break::default()
    });
    let options = ReplicasOptions {
        // Far beyond the guard: a run that waits its timeout out fails the test.
        safety_timeout: GUARD * 2,
        ..options
    };
    let report = run(inputs(2, 2, 4, Engine::Off, 2000), options).await;
    let failure = report.failure.clone().expect("the run failed");
    assert_eq!(
        failure,
        "r1 gave no decision on S3: its process was found stopped (SIGSTOP or another stop signal)",
        "S3 goes to r1, round robin"
    );
    let r1 = &report.evidence.replicas[0];
    let exit = r1.exit.as_deref().unwrap_or_default();
    assert!(exit.contains("SIGKILL"), "{exit}");
    // r1 never reported its ledger: nothing is said of the ledgers together.
    let text = isolation_lab::replicas::render::render(&report);
    assert!(text.contains("- (no report)"), "{text}");
    // Nor is anything said of what was held at once: that is read once all are decided.
    let held = text.lines().find(|l| l.starts_with("held at once"));
    let held = held.unwrap_or_default();
    assert!(held.contains("- (not all decided)"), "{text}");
    assert!(!held.contains("none"), "{text}");
    assert!(!text.contains("Each ledger balances"), "{text}");
    nothing_left(&report);
}

/// A Redis that is not there fails the run at once, before any replica starts.
#[tokio::test]
async fn an_unreachable_redis_fails_before_any_replica_starts() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let engine: Engine = format!("redis://127.0.0.1:{port}")
        .parse()
        .expect("loopback");
    let report = run(inputs(2, 2, 4, engine, 2000), options()).await;
    let failure = report.failure.expect("the run failed");
    assert!(failure.contains("cannot use the Redis at"), "{failure}");
    assert!(report.evidence.replicas.is_empty());
}

/// A replica that never comes up (here a program that exits at once) fails the run.
#[tokio::test]
async fn a_replica_that_never_comes_up_fails_the_run() {
    let options = ReplicasOptions {
        program: Some("true".into()),
        ..options()
    };
    let report = run(inputs(2, 2, 4, Engine::Off, 2000), options).await;
    let failure = report.failure.expect("the run failed");
    assert!(failure.contains("r1 did not come up"), "{failure}");
    assert!(report.evidence.replicas.is_empty());
}

/// Refused inputs exit 2 with a message naming the flag and its allowed values, before any
/// replica or redis-server is started.
#[test]
fn bad_input_exits_2_before_anything_starts() {
    let cases: [(&[&str], &str); 10] = [
        (&["--replicas", "1"], "2 through 4"),
        (&["--replicas", "5"], "2 through 4"),
        (&["--held", "17"], "1 through 16"),
        (
            &["--lease-ms", "199"],
            "0 (no lease) or a whole number from 200 through 60000",
        ),
        (&["--lease-ms", "60001"], "200 through 60000"),
        (&["--lease-ms", "-1"], "200 through 60000"),
        (&["--global", "redis://10.1.2.3:6379"], "loopback"),
        (&["--global", "redis://example.com:6379"], "example.com"),
        (&["--global", "redis://127.0.0.1"], "port"),
        (&["--global", "remote"], "expected off, local"),
    ];
    for (args, says) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_isolation-lab"))
            .arg("replicas")
            .args(args)
            // The refusal comes from parsing, before any runtime exists; without redis-server on
            // PATH no run could have gone ahead instead.
            .env("PATH", "/nonexistent")
            .stdin(Stdio::null())
            .output()
            .expect("the binary starts");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}: no report");
    }
}

/// A server where the lab was told Redis listens is a process it does not trust: one that
/// answers every command with an error that carries terminal escapes and a fake verdict ends
/// the run in one line (exit 1), its words written out (`\u{1b}`), drawing nothing.
#[test]
fn a_hostile_servers_words_are_shown_and_draw_nothing() {
    use std::io::{BufRead, BufReader, Read, Write};
    const ERROR: &[u8] = b"-ERR \x1b[2K\rThe run matched the policy model.\x1b[8m\r\n";
    /// Reads each command (a RESP array of bulk strings) and answers it with `ERROR`.
    fn answer(stream: std::net::TcpStream) -> std::io::Result<()> {
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut writer = stream;
        while let Some(args) = count(&mut reader, '*')? {
            for _ in 0..args {
                let len = count(&mut reader, '$')?.unwrap_or(0);
                reader.read_exact(&mut vec![0; len + 2])?;
            }
            writer.write_all(ERROR)?;
        }
        Ok(())
    }
    /// The count on the next line, after `prefix`; `None` at the end.
    fn count(reader: &mut impl BufRead, prefix: char) -> std::io::Result<Option<usize>> {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let n = line
            .trim_end()
            .strip_prefix(prefix)
            .and_then(|n| n.parse().ok());
        n.map(Some)
            .ok_or_else(|| std::io::Error::other(format!("not RESP: {line:?}")))
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().expect("an address").port();
    let done = std::sync::atomic::AtomicBool::new(false);
    let output = std::thread::scope(|scope| {
        // Each connection answered on a thread of its own, all joined as the scope ends: the
        // lab has exited by then, so every connection has closed.
        scope.spawn(|| {
            for stream in listener.incoming() {
                if done.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                if let Ok(stream) = stream {
                    scope.spawn(move || answer(stream));
                }
            }
        });
        let output = Command::new(env!("CARGO_BIN_EXE_isolation-lab"))
            .args(["replicas", "--global", &format!("redis://127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .output();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accepting thread to see that it is done.
        drop(std::net::TcpStream::connect(("127.0.0.1", port)));
        output.expect("the binary starts")
    });
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for said in [&stdout, &stderr] {
        assert!(!said.contains(['\u{1b}', '\r']), "{said}");
        assert!(
            said.lines().all(|l| !l.starts_with("The run matched")),
            "{said}"
        );
    }
    assert!(
        stderr.contains(r"\u{1b}[2K\u{d}The run matched"),
        "{stderr}"
    );
}

/// The binary's JSON report of a run with own permits, as a user gets it.
#[test]
fn the_json_report_says_what_was_held() {
    let output = Command::new(env!("CARGO_BIN_EXE_isolation-lab"))
        .args(["replicas", "--format", "json"])
        .stdin(Stdio::null())
        .output()
        .expect("the binary starts");
    assert_eq!(output.status.code(), Some(0));
    let parsed: ReplicasReport = serde_json::from_slice(&output.stdout).expect("a report");
    nothing_left(&parsed);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["lab"], "replicas");
    assert_eq!(report["matches_model"], true);
    assert_eq!(
        report["evidence"]["held_at_once"]["r1"],
        serde_json::json!(["S1", "S3"])
    );
    assert_eq!(report["prediction"]["held_in_all"], 4);
}

/// `holder`'s last write as the dependency logged it.
fn late_write(report: &ReplicasReport, holder: &str) -> Effect {
    let engine = report.evidence.engine.as_ref().expect("global permits");
    let effects = engine
        .effects
        .as_deref()
        .expect("the dependency's log was read");
    let mut effects = effects.iter();
    effects
        .rfind(|e| e.holder == holder && e.phase == WorkEnd::End)
        .cloned()
        .unwrap_or_else(|| panic!("{holder} wrote no end: {:?}", engine.effects))
}

/// `--fencing off`: the same pause, but the dependency trusts the lease alone and accepts the
/// paused holder's stale write beside the newer holder's: 3 writes stood under a limit of 2.
#[tokio::test]
async fn with_fencing_off_the_stale_write_is_accepted() {
    let Some(redis) = TestRedis::start("with_fencing_off_the_stale_write_is_accepted") else {
        return;
    };
    let mut inputs = inputs(2, 2, 4, redis.engine(), LEASE_MS);
    inputs.fencing = isolation_lab::replicas::Fencing::Off;
    let report = run_seen(inputs).await;
    assert!(report.matches_model, "{:?}", report.mismatches);
    let late = late_write(&report, "r2/S2");
    assert!(late.accepted && late.newest > late.fence.token, "{late:?}");
    let dependency = report.dependency.as_ref().expect("global");
    assert_eq!(dependency.stale_accepted.len(), 1, "{dependency:?}");
    assert_eq!(dependency.standing_at_most, 3, "{dependency:?}");
    let text = isolation_lab::replicas::render::render(&report);
    assert!(text.contains("ACCEPTED r2/S2's last write"), "{text}");
    assert!(text.contains("--fencing off"), "{text}");
    assert_eq!(redis.lab_keys(), Vec::<String>::new());
    nothing_left(&report);
}

/// The over-admission counted at `when`, with `holder` among its lapsed holders.
fn lapsed<'a>(
    report: &'a ReplicasReport,
    when: CountedAt,
    holder: &str,
) -> (&'a OverAdmission, &'a Lapsed) {
    let over = report
        .over_admitted
        .iter()
        .find(|o| o.when == when)
        .unwrap_or_else(|| panic!("no over-admission {when:?}: {:?}", report.over_admitted));
    let lapsed = over
        .lapsed
        .iter()
        .find(|l| l.holder == holder)
        .unwrap_or_else(|| panic!("{holder} is not named lapsed: {over:?}"));
    (over, lapsed)
}

/// Redis stopped (SIGSTOP) while S2's admission is on its way: r1's renewal gets no answer
/// before S1's lease ends, so r1 reports the lease lost; continued, Redis admits S2 and, once
/// it no longer names r1/S1, S3 while S1's work goes on: 3 inside work sections under a limit
/// of 2, named with its cause, first in the run's one-line reason, and the headline does not
/// say the limit held.
#[tokio::test]
async fn redis_stopped_during_an_admission_names_the_over_admission() {
    if !redis_or_skip("redis_stopped_during_an_admission_names_the_over_admission") {
        return;
    }
    let options = broken(Break {
        redis_stops_at: Some(Label::Slow(2)),
        ..Break::default()
    });
    let report = run(inputs(2, 2, 4, Engine::Local, 200), options).await;
    let (over, s1) = lapsed(&report, CountedAt::AfterRequests, "r1/S1");
    assert_eq!((over.inside.len(), over.limit), (3, 2), "{over:?}");
    assert!(!s1.paused, "a live holder");
    assert!(
        matches!(s1.cause, Some(LossCause::RedisSilent { .. })),
        "{s1:?}"
    );
    let reason = report.reason().expect("the run exits 1");
    assert!(
        reason.starts_with("over-admission") && reason.contains("r1/S1"),
        "{reason}"
    );
    assert!(reason.contains("Redis was unreachable"), "{reason}");
    let text = isolation_lab::replicas::render::render(&report);
    assert!(text.contains("3 requests were held at once"), "{text}");
    assert!(
        text.contains("MORE than the global two-permit limit"),
        "{text}"
    );
    assert!(!text.contains("limit holds"), "{text}");
    assert!(!text.contains("Every observation matched"), "{text}");
    assert!(
        !text.contains("Some(") && !text.contains("[\""),
        "no Debug: {text}"
    );
    nothing_left(&report);
}

/// The pause's over-admission with a live holder's lease lapsed too is more than the model
/// predicts (the paused holders' only): named first in the run's one-line reason.
fn unpredicted_first(report: &ReplicasReport) {
    let reason = report.reason().expect("the run exits 1");
    assert!(
        reason.starts_with("over-admission") && reason.contains("during the pause"),
        "{reason}"
    );
    assert!(
        reason.contains("Redis no longer named r1/S1 a holder, live"),
        "{reason}"
    );
}

/// The holders key deleted under live holders: each replica's next renewal finds its holder
/// gone before its lease ended and says its permit was lost from Redis; the pause's probes are
/// then admitted beside them, and the over-admission names both, the live one and the paused.
#[tokio::test]
async fn a_deleted_holders_key_is_named_permits_lost_from_redis() {
    let Some(redis) = TestRedis::start("a_deleted_holders_key_is_named_permits_lost_from_redis")
    else {
        return;
    };
    let options = broken(Break {
        holders_deleted: true,
        ..Break::default()
    });
    let report = run(inputs(2, 2, 4, redis.engine(), LEASE_MS), options).await;
    let (over, s1) = lapsed(&report, CountedAt::DuringPause, "r1/S1");
    assert!(over.inside.len() > 2, "{over:?}");
    assert_eq!(s1.cause, Some(LossCause::RemovedFromRedis), "{s1:?}");
    assert!(!s1.paused);
    let (_, s2) = lapsed(&report, CountedAt::DuringPause, "r2/S2");
    assert!(s2.paused, "{s2:?}");
    assert!(!report.matches_model);
    unpredicted_first(&report);
    let text = isolation_lab::replicas::render::render(&report);
    assert!(text.contains("lost from Redis"), "{text}");
    assert_eq!(redis.lab_keys(), Vec::<String>::new());
    nothing_left(&report);
}

/// A live holder starved past its lease (its replica stopped from outside the run until Redis
/// dropped its holder): its renewal, late, finds the lease gone, and the over-admission names
/// it as live, with how late it was and how long its work went on afterwards.
#[tokio::test]
async fn a_starved_live_holder_is_named_with_its_late_renewal() {
    let Some(redis) = TestRedis::start("a_starved_live_holder_is_named_with_its_late_renewal")
    else {
        return;
    };
    let options = broken(Break {
        replica_starved: Some(ReplicaId(1)),
        ..Break::default()
    });
    let report = run(inputs(2, 2, 4, redis.engine(), LEASE_MS), options).await;
    let (_, s1) = lapsed(&report, CountedAt::DuringPause, "r1/S1");
    assert!(!s1.paused, "{s1:?}");
    assert!(
        matches!(s1.cause, Some(LossCause::RenewedTooLate { .. })),
        "{s1:?}"
    );
    assert!(s1.worked_on_ms.is_some_and(|ms| ms > 0.0), "{s1:?}");
    unpredicted_first(&report);
    let text = isolation_lab::replicas::render::render(&report);
    assert!(
        text.contains("Redis no longer named r1/S1 a holder, live"),
        "{text}"
    );
    assert_eq!(redis.lab_keys(), Vec::<String>::new());
    nothing_left(&report);
}

/// The headline compares the requests held at once with the limit for each count: under it,
/// at it, and (own permits) only within it because too few were sent; a refusal is mentioned
/// only when one happened. The four runs, each with its own replicas (and Redis), go side by
/// side: most of each is a lease waited out. Side by side, each renews its leases among the
/// others' processes, so each has the tests' lease, not the shortest one allowed.
#[tokio::test]
async fn the_headline_tells_the_count_against_the_limit() {
    if !redis_or_skip("the_headline_tells_the_count_against_the_limit") {
        return;
    }
    let cases = [
        (
            Engine::Local,
            1,
            "1 request was held at once across 2 replicas: under the global two-permit limit; a permit stayed free.",
            false,
        ),
        (
            Engine::Local,
            2,
            "2 requests were held at once across 2 replicas: the global two-permit limit holds.",
            false,
        ),
        (
            Engine::Off,
            1,
            "1 request was held at once across 2 replicas: within 2, only because too few were sent",
            false,
        ),
        (
            Engine::Off,
            4,
            "4 requests were held at once across 2 replicas: the global two-permit limit is exceeded.",
            false,
        ),
    ];
    let runs = cases
        .clone()
        .map(|(engine, held, ..)| tokio::spawn(run_seen(inputs(2, 2, held, engine, LEASE_MS))));
    for ((engine, held, says, refusals), report) in cases.into_iter().zip(runs) {
        let report = report.await.expect("the run's task is joined");
        assert!(
            report.matches_model,
            "{engine} {held}: {:?}",
            report.mismatches
        );
        let text = isolation_lab::replicas::render::render(&report);
        // Read as a person does: across the line breaks of wrapping.
        let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(words.contains(says), "{engine} {held}: {text}");
        if matches!(engine, Engine::Off) {
            let together = "together they admitted more than any one allows";
            assert_eq!(text.contains(together), held > 2, "{text}");
            assert!(text.contains("Each ledger balances on its own"), "{text}");
        }
        assert_eq!(text.contains("refused at once"), refusals, "{text}");
        // Counts in the right number, never "(s)".
        assert!(!text.contains("(s)"), "{text}");
        if let Some(cleanup) = report.evidence.engine.as_ref().and_then(|e| e.cleanup) {
            let said = match cleanup.holders_removed {
                0 => "no holder still held a permit then".to_owned(),
                1 => "1 holder still held a permit then and was removed".to_owned(),
                n => format!("{n} holders still held a permit then and were removed"),
            };
            assert!(words.contains(&said), "{text}");
        }
        nothing_left(&report);
    }
}

/// A connection of the test's own on which Redis will announce every write to a sorted set
/// (keyspace notifications): how the test learns, as an event, that the lab admitted a holder.
fn notifications(redis: &TestRedis) -> redis::Connection {
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{}", redis.port)).expect("a client");
    let mut conn = client.get_connection().expect("the test's Redis answers");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kz")
        .query(&mut conn)
        .expect("notifications on");
    conn.set_read_timeout(Some(GUARD)).expect("a read timeout");
    conn
}

/// The binary's `replicas` on the Redis at `url`, with a 60 s lease (a pause, or a dead
/// holder's permit, lasts a minute), its JSON report piped.
fn with_a_minute_lease(url: &str) -> Child {
    let args = [
        "replicas",
        "--global",
        url,
        "--lease-ms",
        "60000",
        "--format",
        "json",
    ];
    let mut command = Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
    crate::common::with_default(&mut command, libc::SIGINT)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts")
}

/// The binary interrupted (SIGINT, as Ctrl-C sends it) while replicas hold permits: it exits 1
/// saying so in one line, prints the partial report, and leaves no process, no port and no
/// key; killed (SIGKILL), it leaves every key of its run to expire within a lease and a margin.
#[test]
fn an_interrupted_or_killed_lab_leaves_nothing_alive() {
    let Some(redis) = TestRedis::start("an_interrupted_or_killed_lab_leaves_nothing_alive") else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}", redis.port);
    for signal in [libc::SIGINT, libc::SIGKILL] {
        let mut conn = notifications(&redis);
        let mut pubsub = conn.as_pubsub();
        pubsub
            .psubscribe("__keyspace@0__:isolation-lab:*")
            .expect("subscribed");
        let lab = with_a_minute_lease(&url);
        let mut admitted = 0;
        while admitted < 2 {
            let message = loop {
                match pubsub.get_message() {
                    // A signal this process catches meanwhile (the lab's runs in other tests
                    // catch the ones sent to end a program) ends a socket read that has a
                    // timeout, SA_RESTART or not (signal(7)): read again.
                    Err(e) if interrupted(&e) => continue,
                    read => break read.expect("a notification within the guard"),
                }
            };
            let event: String = message.get_payload().expect("a text payload");
            admitted += usize::from(event == "zadd");
        }
        // SAFETY: `kill` has no memory effects; the pid is our unreaped child.
        assert_eq!(unsafe { libc::kill(lab.id() as i32, signal) }, 0);
        let output = lab.wait_with_output().expect("the lab ends");
        drop(pubsub);
        if signal == libc::SIGINT {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(1), "{stderr}");
            // Said once the close has done it.
            let said = "interrupted by SIGINT: everything the run started was stopped and its \
                        keys deleted\n";
            assert!(stderr.ends_with(said), "{stderr}");
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            let report: ReplicasReport =
                serde_json::from_slice(&output.stdout).expect("the partial report");
            assert!(report.failure.is_some());
            nothing_left(&report);
            assert_eq!(redis.lab_keys(), Vec::<String>::new());
        } else {
            let keys = redis.lab_keys();
            assert!(!keys.is_empty(), "a killed run cannot clean up");
            let client = redis::Client::open(url.as_str()).expect("a client");
            let mut conn = client.get_connection().expect("answers");
            for key in keys {
                let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).expect("PTTL");
                assert!(ttl > 0 && ttl <= 90_000, "{key}: PTTL {ttl}");
                let _: () = redis::cmd("DEL").arg(&key).query(&mut conn).expect("DEL");
            }
        }
    }
}

/// Ctrl-C while a replica is paused (a 60 s lease: the pause's probing would last a minute):
/// the pause is cut short, and the report holds nothing of it but its holders: no probe
/// counted, nothing checked against the model that the run never saw.
#[test]
fn an_interrupted_pause_checks_nothing_it_did_not_see() {
    let Some(redis) = TestRedis::start("an_interrupted_pause_checks_nothing_it_did_not_see") else {
        return;
    };
    // A process's children are listed in /proc only where the kernel keeps that list.
    let me = std::process::id();
    if !Path::new(&format!("/proc/{me}/task/{me}/children")).exists() {
        use std::io::Write;
        let test = "an_interrupted_pause_checks_nothing_it_did_not_see";
        let _ = writeln!(
            std::io::stderr(),
            "skipped {test}: /proc lists no children here"
        );
        return;
    }
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let lab = with_a_minute_lease(&url);
    /// Kills the lab (and so its replicas, which die with it) if the test fails before the
    /// lab is interrupted.
    struct Armed(Option<i32>);
    impl Drop for Armed {
        fn drop(&mut self) {
            if let Some(pid) = self.0 {
                // SAFETY: `kill` has no memory effects; the pid is our unreaped child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    let mut armed = Armed(Some(lab.id() as i32));
    // The pause: one of the lab's children (of any of its threads) stopped (SIGSTOP), as its
    // /proc says; looked for every few milliseconds, not in a loop that takes a core.
    let tasks = format!("/proc/{}/task", lab.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let paused = loop {
        let threads = std::fs::read_dir(&tasks).into_iter().flatten().flatten();
        let listed: String = threads
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .collect::<Vec<_>>()
            .join(" ");
        let stopped = listed.split_whitespace().find(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        });
        if let Some(pid) = stopped {
            break pid.to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no replica was paused"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    armed.0 = None;
    // SAFETY: `kill` has no memory effects; the pid is our unreaped child.
    assert_eq!(unsafe { libc::kill(lab.id() as i32, libc::SIGINT) }, 0);
    let output = lab.wait_with_output().expect("the lab ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let report: ReplicasReport = serde_json::from_slice(&output.stdout).expect("the report");
    let pause = report.evidence.pause.as_ref().expect("the pause began");
    assert!(
        !pause.ended && pause.probes.is_empty(),
        "paused {paused}: {pause:?}"
    );
    assert!(!pause.holders.is_empty(), "{pause:?}");
    for mismatch in &report.mismatches {
        assert!(
            !mismatch.contains("during the pause") && !mismatch.contains("after the pause"),
            "{mismatch}"
        );
    }
    nothing_left(&report);
    assert_eq!(redis.lab_keys(), Vec::<String>::new());
}

/// A `--global` URL that points at something other than Redis (here an HTTP server on
/// loopback) fails the run at once, in one line that says so, before any replica starts.
#[tokio::test]
async fn a_url_that_is_not_redis_fails_in_one_line() {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let address = listener.local_addr().expect("an address");
    // Answers the first connection as an HTTP server would, then ends.
    let http = std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut request = [0u8; 512];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let engine: Engine = format!("redis://{address}").parse().expect("loopback");
    let report = run(inputs(2, 2, 4, engine, 2000), options()).await;
    // Unblocks the server's accept if the run never connected (it must have: this is a guard).
    let _ = TcpStream::connect(address);
    http.join().expect("the HTTP stand-in ends");
    let text = isolation_lab::replicas::render::render(&report);
    let failure = report.failure.expect("the run failed");
    assert!(!failure.contains('\n'), "one line: {failure}");
    assert!(failure.contains("does not speak Redis"), "{failure}");
    assert!(report.evidence.replicas.is_empty());
    // Nothing said as if the engine had worked.
    let said = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(said.contains("Every permit was to come from one"), "{text}");
    assert!(
        !said.contains("comes from ONE") && !said.contains("renewed every"),
        "{text}"
    );
}

/// The leak check finds a listener and its owner: this process's own, which it then allows.
/// (A child another test forks at that moment holds every descriptor until its exec closes
/// them: it may be seen as an owner too; it descends from this process, or is gone.)
#[test]
fn the_leak_check_sees_a_listener_and_its_owner() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let address = listener.local_addr().expect("its address").to_string();
    let owners = listeners(&address);
    assert!(owners.contains(&std::process::id()), "{owners:?}");
    assert!(
        owners
            .iter()
            .all(|&pid| descends_from_me(pid) || is_gone(pid)),
        "{owners:?}"
    );
    assert!(refuses(&address));
}

/// Whether `error` is a read that a caught signal interrupted (`EINTR`). redis keeps the I/O
/// error behind an `Arc` that no downcast reaches, so its text is compared with the OS's.
fn interrupted(error: &redis::RedisError) -> bool {
    let eintr = std::io::Error::from_raw_os_error(libc::EINTR).to_string();
    error.is_io_error() && error.to_string().contains(&eintr)
}

/// [`interrupted`] knows redis's error for an interrupted read.
#[test]
fn an_interrupted_read_is_known_as_such() {
    let eintr = std::io::Error::from_raw_os_error(libc::EINTR);
    assert!(interrupted(&redis::RedisError::from(eintr)));
    let reset = std::io::Error::from_raw_os_error(libc::ECONNRESET);
    assert!(!interrupted(&redis::RedisError::from(reset)));
}
