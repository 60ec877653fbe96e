//! Classroom mode over real HTTP: a session served on `127.0.0.1:0`, driven through its control
//! API as its page drives it, watched through its event stream as its page watches it, and the
//! room's requests sent as a student's `curl` sends them. The last tests run the binary itself
//! and end it with SIGINT.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use isolation_lab::classroom::{self, ClassroomReport, Timeouts};
use isolation_lab::coordinator::Options;
use isolation_lab::executor::{BlockingThreads, Executor, WorkStyle, Workers};
use isolation_lab::policy::{Front, Held, Inputs, ModeChoice, Slots};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The bound on any one wait in these tests: a failure guard, never a way to sequence.
const GUARD: Duration = Duration::from_secs(10);

fn inputs(mode: ModeChoice, slots: u8, held: u8) -> Inputs {
    Inputs {
        mode,
        slots: Slots::new(slots).expect("test slots are allowed"),
        held: Held::new(held).expect("test held counts are allowed"),
    }
}

/// A session served by the library, as the binary serves it, ended by `leave`.
struct Session {
    base: String,
    address: SocketAddr,
    control: String,
    http: reqwest::Client,
    leave: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<ClassroomReport>>,
}

impl Session {
    async fn start(inputs: Inputs, front: Front) -> Session {
        Session::start_with(inputs, Options::on(front)).await
    }

    /// A session whose every run is on `options`: a front and its executor.
    async fn start_with(inputs: Inputs, options: Options) -> Session {
        Session::start_config(classroom::Config {
            inputs,
            options,
            show_predictions: false,
            timeouts: Timeouts::default(),
            room_requests: classroom::ROOM_REQUESTS,
        })
        .await
    }

    /// Partitioned at the defaults, with `--work block` on one worker: S1's held work blocks
    /// the front runtime's only worker.
    async fn blocking_its_only_worker() -> Session {
        let block = Executor::new(
            WorkStyle::Block,
            Workers::CurrentThread,
            BlockingThreads::default(),
        );
        let options = Options::on(Front::Async).with_executor(block);
        Session::start_with(inputs(ModeChoice::Partitioned, 2, 2), options).await
    }

    /// A session of `config`.
    async fn start_config(config: classroom::Config) -> Session {
        let common::Classroom { url, leave, task } = common::serve_classroom_config(config).await;
        assert!(
            url.starts_with("http://127.0.0.1:") && url.contains("/#control="),
            "{url}"
        );
        let (base, control) = base_and_control(&url);
        let address = base["http://".len()..].parse().expect("an address");
        // A connection per request: the server closes a connection idle for its header timeout,
        // and a request sent on one at that very moment would fail (a browser resends it; this
        // client does not).
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .build()
            .expect("a client");
        let page = http.get(format!("{base}/")).send().await.expect("the page");
        assert_eq!(page.status(), 200);
        let page = page.text().await.expect("the page's text");
        assert!(
            !page.contains(&control),
            "the page carries the control token"
        );
        Session {
            base,
            address,
            control,
            http,
            leave: Some(leave),
            task,
        }
    }

    /// A control action as the page sends it: the token, and the page's own Origin.
    async fn control(&self, action: &str, body: Value) -> (u16, Value) {
        let sent = self
            .http
            .post(format!("{}/control/{action}", self.base))
            .header("lab-control", &self.control)
            .header("origin", &self.base)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send();
        answered(within(sent).await).await
    }

    async fn next(&self) -> Value {
        let (status, body) = self.control("next", json!({})).await;
        assert_eq!(status, 200, "next: {body}");
        body
    }

    /// A request from the room, as its `curl` command sends it.
    fn room(&self, route: &str, token: &str) -> JoinHandle<(u16, Value)> {
        let sent = self
            .http
            .get(format!("{}{route}", self.base))
            .header("lab-room", token)
            .send();
        tokio::spawn(async move { answered(sent.await).await })
    }

    /// Opens the run's server (its first step) and the room, and sends R1 to `/slow`, from the
    /// room's command as `events` showed it; returns once R1 is held at the gate.
    async fn open_and_hold_r1(&self, events: &mut Events) -> JoinHandle<(u16, Value)> {
        let token = room_token(&events.until(|m| kind(m) == "state").await);
        assert_eq!(self.next().await["step"], "open");
        assert_eq!(self.control("open-room", json!({})).await.0, 200);
        let r1 = self.room("/slow", &token);
        events.until(is_work("R1", "held")).await;
        r1
    }

    async fn events(&self) -> Events {
        Events::open(&self.http, &self.base).await
    }

    async fn end(mut self) -> ClassroomReport {
        let _ = self.leave.take().expect("ended once").send(());
        let report = within(self.task).await.expect("the session ends");
        let report = report.expect("the session started");
        // The listener is closed: nothing there serves this session's page any more.
        assert_not_serving(self.address, &self.control);
        report
    }
}

/// The session's listener is closed: a connection to its address is refused, or — when a server
/// of another test running at the same time has since been given the same port by the OS —
/// what answers there is not this session's page (it does not carry this session's token).
fn assert_not_serving(address: std::net::SocketAddr, control: &str) {
    use std::io::{Read, Write};
    let Ok(mut stream) = TcpStream::connect(address) else {
        return;
    };
    let head = format!("GET / HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    let _ = stream.set_read_timeout(Some(GUARD));
    let _ = stream.write_all(head.as_bytes());
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        !answer.contains(control),
        "{address} still serves this session's page after it ended"
    );
}

async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, future)
        .await
        .expect("a step stalled (failure guard)")
}

async fn answered(response: reqwest::Result<reqwest::Response>) -> (u16, Value) {
    let response = response.expect("an HTTP answer");
    let status = response.status().as_u16();
    let body = response.bytes().await.expect("a whole body");
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    (status, body)
}

/// A page's view of the event stream: one JSON message per `data:` line.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    /// The event stream of the session at `base`, as its page opens it.
    async fn open(http: &reqwest::Client, base: &str) -> Events {
        let response = http.get(format!("{base}/events")).send();
        let response = within(response).await.expect("the event stream");
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "{response:?}"
        );
        Events {
            response,
            buffer: String::new(),
        }
    }

    async fn next(&mut self) -> Value {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                if let Some(data) = frame.trim_end().strip_prefix("data: ") {
                    return serde_json::from_str(data).expect("each message is JSON");
                }
                continue;
            }
            let chunk = within(self.response.chunk()).await.expect("the stream");
            let chunk = chunk.expect("the stream has not ended");
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }

    /// Messages up to and including the first for which `stop` holds.
    async fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let message = self.next().await;
            let done = stop(&message);
            seen.push(message);
            if done {
                return seen;
            }
        }
    }
}

fn kind(message: &Value) -> &str {
    message["kind"].as_str().unwrap_or_default()
}

/// A student who gives up on a room request held at the gate (the async front drops its
/// handler, and the work leaves cancelled): the request is listed all the same, with no answer
/// and why, the page is told so too, the session still matches, and `record` re-checks the saved report as matched
/// (it named the ledger's R1 a request the room never sent).
#[tokio::test]
async fn a_room_request_its_student_gives_up_on_is_listed_and_recorded() {
    let session = Session::start(inputs(ModeChoice::Partitioned, 3, 1), Front::Async).await;
    let mut events = session.events().await;
    let r1 = session.open_and_hold_r1(&mut events).await;
    r1.abort();
    // The page is told why R1 has no answer, before or after its work left cancelled.
    let told = |m: &Value| kind(m) == "response" && m["request"] == "R1";
    let mut seen = events.until(is_work("R1", "finished")).await;
    if !seen.iter().any(told) {
        seen = events.until(told).await;
    }
    let told = seen.iter().find(|m| told(m)).expect("R1's answer is told");
    let why = told["error"].as_str().unwrap_or_default();
    assert!(why.contains("gave up"), "{told}");
    for step in ["S1", "F1", "release", "S-after", "F-after", "close"] {
        assert_eq!(session.next().await["step"], step);
    }
    let report = session.end().await;
    assert!(report.matches_model, "{:?}", report.runs);
    let listed = report
        .room_requests
        .iter()
        .find(|r| r.request.to_string() == "R1");
    let listed = listed.expect("R1 is listed");
    assert_eq!(listed.status, None);
    let why = listed.error.as_deref().unwrap_or_default();
    assert!(why.contains("gave up"), "{why}");
    let dir = common::temp_dir("isolation-lab-session").expect("a scratch directory");
    let saved = dir.path().join("s.json");
    let json = serde_json::to_string(&report).expect("the report serializes");
    std::fs::write(&saved, json).expect("saved");
    let recorded = Command::new(env!("CARGO_BIN_EXE_isolation-lab"))
        .arg("record")
        .arg(&saved)
        .output()
        .expect("record runs");
    let stderr = String::from_utf8_lossy(&recorded.stderr);
    assert_eq!(recorded.status.code(), Some(0), "{stderr}");
}

/// The room's token, read from the command the last of `states` shows a student.
fn room_token(states: &[Value]) -> String {
    let commands = &states.last().expect("a state")["room"]["commands"];
    let command = commands[0].as_str().expect("the room's command");
    assert!(command.starts_with("curl -s -H 'lab-room: "), "{command}");
    common::room_token_in(command).to_owned()
}

fn is_work(request: &str, event: &str) -> impl Fn(&Value) -> bool {
    move |m| kind(m) == "work" && m["request"] == request && m["event"] == event
}

/// The control API steps through the whole default sequence — both policies, one step per
/// call — and the event stream tells every ledger event and every response, in ledger order,
/// exactly as the report records them; each run is checked against the model as the command
/// line checks it. On both fronts.
#[tokio::test]
async fn the_control_api_steps_through_the_sequence_and_the_stream_tells_every_event() {
    for front in Front::ALL {
        let session = Session::start(Inputs::default(), front).await;
        let mut events = session.events().await;
        let mut steps = Vec::new();
        loop {
            let (status, body) = session.control("next", json!({})).await;
            if status == 409 {
                assert!(body["detail"].as_str().unwrap_or("").contains("complete"));
                break;
            }
            assert_eq!(status, 200, "{body}");
            steps.push(body["step"].as_str().unwrap_or("?").to_owned());
        }
        // The page opens at the first step: the first Next opens the first policy's server.
        let run = [
            "open", "S1", "S2", "F1", "release", "S-after", "F-after", "close",
        ];
        let expected: Vec<&str> = run.iter().chain(&run).copied().collect();
        assert_eq!(steps, expected, "{front:?}");
        let seen = events
            .until(|m| kind(m) == "state" && m["complete"] == true)
            .await;
        let report = session.end().await;
        assert!(report.matches_model, "{front:?}: {report:?}");
        assert_eq!(report.runs.len(), 1);
        let policies = &report.runs[0].policies;
        assert_eq!(policies.len(), 2);
        // The stream, split at each run's `run` message once its server is open; the first
        // policy is shown before it opens, with nothing on its ledger.
        assert_eq!(seen[0]["kind"], "run", "{:?}", seen[0]);
        assert_eq!(seen[0]["opened"], false, "{:?}", seen[0]);
        let mut runs: Vec<Vec<&Value>> = Vec::new();
        for message in &seen {
            if kind(message) == "run" && message["opened"] == true {
                runs.push(Vec::new());
            }
            match runs.last_mut() {
                Some(run) => run.push(message),
                None => assert_ne!(kind(message), "work", "{message}"),
            }
        }
        assert_eq!(runs.len(), 2, "{front:?}");
        for (policy, told) in policies.iter().zip(&runs) {
            let streamed: Vec<(u64, String, String)> = told
                .iter()
                .filter(|m| kind(m) == "work")
                .map(|m| {
                    let request = m["request"].as_str().unwrap_or("").to_owned();
                    (
                        m["seq"].as_u64().unwrap_or(0),
                        request,
                        m["event"].to_string(),
                    )
                })
                .collect();
            let recorded: Vec<(u64, String, String)> = policy
                .work_events
                .iter()
                .map(|e| {
                    let request = e.request.map(|r| r.to_string()).unwrap_or_default();
                    let event = serde_json::to_value(e.event).expect("an event").to_string();
                    (e.seq, request, event)
                })
                .collect();
            assert_eq!(streamed, recorded, "{front:?} {:?}", policy.mode);
            let responses: Vec<(String, u64)> = told
                .iter()
                .filter(|m| kind(m) == "response")
                .map(|m| {
                    let request = m["request"].as_str().unwrap_or("").to_owned();
                    (request, m["status"].as_u64().unwrap_or(0))
                })
                .collect();
            let recorded: Vec<(String, u64)> = policy
                .observed
                .responses
                .iter()
                .map(|r| (r.request.to_string(), u64::from(r.status)))
                .collect();
            assert_eq!(responses, recorded, "{front:?}");
            // A response comes after the event it followed on the ledger.
            for (at, message) in told.iter().enumerate() {
                if kind(message) == "response" {
                    let after = message["after_event"].as_u64().unwrap_or(0);
                    let told_by_then = told[..at]
                        .iter()
                        .filter(|m| kind(m) == "work")
                        .filter_map(|m| m["seq"].as_u64())
                        .max()
                        .unwrap_or(0);
                    assert!(told_by_then >= after, "{message} before event {after}");
                }
            }
            let verdict = told.iter().find(|m| kind(m) == "verdict");
            let verdict = verdict.expect("a verdict when the run closes");
            assert_eq!(verdict["verdict"]["matches"], true, "{verdict}");
        }
        // The lab's usual executor: the page is told nothing of one.
        assert!(seen.iter().all(|m| kind(m) != "executor"), "{front:?}");
        assert!(
            seen.iter()
                .all(|m| kind(m) != "run" || m["executor"].is_null())
        );
        // Threads: the threaded front holds one per held request, and the page is told.
        if front == Front::Threaded {
            let told = seen.iter().filter(|m| kind(m) == "resources");
            let most = told.filter_map(|m| m["os_threads"].as_u64()).max();
            assert!(most.unwrap_or(0) >= 3, "{most:?}");
        }
    }
}

/// `--work block` on one worker, partitioned at the defaults: S1 blocks the front runtime's only
/// worker, so S2 and F1 arrive and sit unread. After each step the stream carries the run's
/// executor evidence: before release F1 unread, the heartbeat stopped, no ledger event of F1;
/// after release F1 admitted, after the gate opened. The run matches the model.
#[tokio::test]
async fn the_stream_shows_f1_unread_while_slow_work_blocks_the_only_worker() {
    let session = Session::blocking_its_only_worker().await;
    let mut events = session.events().await;
    for step in ["open", "S1", "S2", "F1"] {
        assert_eq!(session.next().await["step"], step);
    }
    let before = events
        .until(|m| kind(m) == "step" && m["done"] == "F1")
        .await;
    let run = before.iter().rfind(|m| kind(m) == "run").expect("a run");
    assert_eq!(
        run["executor"]["flags"],
        "--work block --workers current-thread"
    );
    assert_eq!(
        run["predicted"]["f1_before_release"]["unread_until_release"],
        true
    );
    let told = before.iter().rfind(|m| kind(m) == "executor");
    let told = told.expect("the executor's evidence after the step");
    let unread: Vec<&Value> = told["unread"].as_array().expect("a list").iter().collect();
    let unread: Vec<&str> = unread
        .iter()
        .filter_map(|u| u["request"].as_str())
        .collect();
    assert_eq!(unread, ["S2", "F1"], "{told}");
    assert_eq!(told["stopped"]["moment"], "held", "{told}");
    assert_eq!(told["stopped"]["request"], "S1", "{told}");
    assert_eq!(told["released"], false, "{told}");
    let ticks: Vec<u64> = told["heartbeat"]
        .as_array()
        .expect("readings")
        .iter()
        .filter_map(|b| b["ticks"].as_u64())
        .collect();
    assert!(
        ticks.len() >= 4 && ticks[1..].iter().all(|&t| t == ticks[1]),
        "{told}"
    );
    assert!(
        !before
            .iter()
            .any(|m| kind(m) == "work" && m["request"] == "F1"),
        "F1 is on the ledger before release"
    );

    assert_eq!(session.next().await["step"], "release");
    let after = events
        .until(|m| kind(m) == "step" && m["done"] == "release")
        .await;
    let told = after
        .iter()
        .rfind(|m| kind(m) == "executor")
        .expect("evidence");
    assert_eq!(told["released"], true, "{told}");
    assert_eq!(told["stopped"]["request"], "S1", "{told}");
    let seq = |request: &str, event: &str| {
        let found = after
            .iter()
            .find(|m| is_work(request, event)(m) || (request.is_empty() && m["event"] == event));
        found.and_then(|m| m["seq"].as_u64())
    };
    let opened = seq("", "gate_opened").expect("the gate opened");
    let admitted = seq("F1", "admitted").expect("F1 admitted after release");
    assert!(
        admitted > opened,
        "F1 admitted at #{admitted}, gate opened at #{opened}"
    );
    let f1 = after
        .iter()
        .find(|m| kind(m) == "response" && m["request"] == "F1");
    assert_eq!(f1.expect("F1 answered")["status"], 200);

    for step in ["S-after", "F-after", "close"] {
        assert_eq!(session.next().await["step"], step);
    }
    // New run: the same executor.
    let again = json!({ "mode": "shared", "slots": 2, "held": 1 });
    assert_eq!(session.control("new-run", again).await.0, 200);
    let run = events.until(|m| kind(m) == "run").await;
    let run = run.last().expect("a run");
    assert_eq!(
        run["executor"]["flags"],
        "--work block --workers current-thread"
    );
    assert_eq!(run["mode"], "shared", "{run}");
    let report = session.end().await;
    assert!(report.matches_model, "{:?}", report.verdict());
}

/// `--work spawn-blocking --blocking-threads 1`: S1's wait takes the blocking pool's only
/// thread, so S2 and S3 are admitted and queued with their permits; the stream says so after
/// their steps, and F1 is answered before release (nothing is unread).
#[tokio::test]
async fn the_stream_shows_work_queued_for_a_thread() {
    let threads = BlockingThreads::new(1).expect("1 is allowed");
    let executor = Executor::new(WorkStyle::SpawnBlocking, Workers::CurrentThread, threads);
    let options = Options::on(Front::Async).with_executor(executor);
    let session = Session::start_with(inputs(ModeChoice::Partitioned, 4, 3), options).await;
    let mut events = session.events().await;
    for step in ["open", "S1", "S2", "S3", "F1"] {
        assert_eq!(session.next().await["step"], step);
    }
    let before = events
        .until(|m| kind(m) == "step" && m["done"] == "F1")
        .await;
    let told = before.iter().rfind(|m| kind(m) == "executor");
    let told = told.expect("the executor's evidence after the step");
    assert_eq!(told["queued"], json!(["S2", "S3"]), "{told}");
    assert_eq!(told["unread"], json!([]), "{told}");
    assert!(told["stopped"].is_null(), "{told}");
    let f1 = before
        .iter()
        .find(|m| kind(m) == "response" && m["request"] == "F1");
    let f1 = f1.expect("F1 answered before release");
    assert_eq!(
        (f1["status"].as_u64(), f1["phase"].as_str()),
        (Some(200), Some("before_release"))
    );
    for step in ["release", "S-after", "F-after", "close"] {
        assert_eq!(session.next().await["step"], step);
    }
    let report = session.end().await;
    assert!(report.matches_model, "{:?}", report.verdict());
}

/// A request from the room is numbered by the server, held at the run's gate with the
/// sequence's own slow work, and answered when the sequence releases it; after the sequence,
/// the room's own gate holds the next one until the instructor opens it. The room's requests
/// are in the run's ledger and never in its model check.
#[tokio::test]
async fn a_room_request_is_held_and_then_answered() {
    // Partitioned, 3 permits: the slow pool has room for S1 and one request from the room.
    let session = Session::start(inputs(ModeChoice::Partitioned, 3, 1), Front::Async).await;
    let mut events = session.events().await;
    let token = room_token(&events.until(|m| kind(m) == "state").await);

    let (status, refused) = within(session.room("/slow", &token))
        .await
        .expect("answered");
    assert_eq!(
        (status, refused["error"].as_str()),
        (409, Some("room_closed"))
    );
    assert_eq!(session.next().await["step"], "open");
    assert_eq!(session.control("open-room", json!({})).await.0, 200);
    let r1 = session.room("/slow", &token);
    events.until(is_work("R1", "held")).await;
    assert!(!r1.is_finished(), "R1 is held: its caller waits");
    for step in ["S1", "F1", "release"] {
        assert_eq!(session.next().await["step"], step);
    }
    let (status, body) = within(r1).await.expect("R1 answered");
    assert_eq!(
        (status, body),
        (200, json!({ "request": "R1", "pool": "slow" }))
    );
    for step in ["S-after", "F-after"] {
        assert_eq!(session.next().await["step"], step);
    }

    // The room's own gate, once the run's has opened.
    assert_eq!(session.control("close-gate", json!({})).await.0, 200);
    let (status, body) = session.control("close-gate", json!({})).await;
    assert_eq!(status, 409, "{body}");
    let r2 = session.room("/slow", &token);
    events.until(is_work("R2", "held")).await;
    let r3 = session.room("/fast", &token);
    let (status, _) = within(r3).await.expect("R3 answered");
    assert_eq!(status, 200, "fast work never waits at a gate");
    assert!(!r2.is_finished(), "R2 is held at the room's gate");
    assert_eq!(session.control("open-gate", json!({})).await.0, 200);
    assert_eq!(within(r2).await.expect("R2 answered").0, 200);
    assert_eq!(session.next().await["step"], "close");
    let verdict = events.until(|m| kind(m) == "verdict").await;
    let verdict = &verdict.last().expect("a verdict")["verdict"];
    assert_eq!(verdict["matches"], true, "{verdict}");

    let report = session.end().await;
    assert!(report.matches_model, "{:?}", report.runs);
    let requests: Vec<(String, Option<u16>)> = report
        .room_requests
        .iter()
        .map(|r| (r.request.to_string(), r.status))
        .collect();
    let expected = [("R1", 200), ("R3", 200), ("R2", 200)];
    let expected: Vec<_> = expected.map(|(r, s)| (r.to_owned(), Some(s))).into();
    assert_eq!(requests, expected);
    assert_eq!(report.room_gates.len(), 1);
    let gate = report.room_gates[0].gate;
    assert!(gate.opened_after_event > Some(gate.closed_after_event));
    let policy = &report.runs[0].policies[0];
    let in_ledger = policy
        .work_events
        .iter()
        .filter(|e| e.request.is_some_and(|r| r.from_room()));
    assert_eq!(
        in_ledger.count(),
        3 + 3 + 2,
        "admitted, held, finished; R3 never held"
    );
    let ledger = &policy.ledger;
    assert!(
        ledger.values().all(|l| l.broken().next().is_none()),
        "{ledger:?}"
    );
    assert!(policy.model.mismatches.is_empty(), "{:?}", policy.model);
}

/// Control without the token, with the room's token, from a foreign Origin, or to another
/// Host; the room's door without its token; an oversized body or head: all refused, and none
/// of them changes anything — the first step taken afterwards is still S1.
#[tokio::test]
async fn strangers_are_refused_and_change_nothing() {
    let session = Session::start(inputs(ModeChoice::Shared, 2, 2), Front::Async).await;
    let url = |path: &str| format!("{}{path}", session.base);
    let http = &session.http;
    let forbidden = [
        http.post(url("/control/next")),
        http.post(url("/control/next"))
            .header("lab-control", "0".repeat(32)),
        http.post(url("/control/run-to-end"))
            .header("lab-control", &session.control)
            .header("origin", "http://evil.example"),
        http.post(url("/control/next"))
            .header("lab-control", &session.control)
            .header("origin", "null"),
        http.post(url("/control/next"))
            .header("lab-control", &session.control)
            .header("host", "evil.example"),
        http.post(url("/control/next"))
            .header("lab-control", &session.control)
            .header("host", format!("localhost:{}", session.address.port())),
        http.get(url("/")).header("host", "rebound.example"),
        http.get(url("/events"))
            .header("origin", "http://evil.example"),
        http.get(url("/slow")),
        http.get(url("/fast")).header("lab-room", &session.control),
    ];
    for request in forbidden {
        let described = format!("{request:?}");
        let (status, body) = answered(within(request.send()).await).await;
        assert_eq!(status, 403, "{described}: {body}");
    }
    let (status, _) = session
        .control("new-run", json!({ "mode": "both", "slots": 9, "held": 2 }))
        .await;
    assert_eq!(status, 400, "slots out of range");
    let big = json!({ "padding": "x".repeat(4096) });
    assert_eq!(session.control("next", big).await.0, 413);
    let head = http
        .get(url("/"))
        .header("x-padding", "y".repeat(20 * 1024))
        .send();
    let status = within(head).await.map(|r| r.status().as_u16());
    assert!(matches!(status, Ok(431) | Err(_)), "{status:?}");
    assert!(
        !format!(
            "{:?}",
            within(http.get(url("/")).send())
                .await
                .expect("page")
                .headers()
        )
        .contains("access-control"),
        "no CORS header"
    );
    // No Host, or two: 400, as HTTP/1.1 asks. Another method than a path takes: 405, saying
    // which it takes.
    let address = session.address;
    let host = format!("Host: {address}\r\n");
    let raws = [
        (
            "GET / HTTP/1.1\r\nConnection: close\r\n\r\n".to_owned(),
            "400",
            None,
        ),
        (
            format!("GET / HTTP/1.1\r\n{host}{host}Connection: close\r\n\r\n"),
            "400",
            None,
        ),
        (
            format!("OPTIONS /control/next HTTP/1.1\r\n{host}Connection: close\r\n\r\n"),
            "405",
            Some("post"),
        ),
        (
            format!(
                "POST /events HTTP/1.1\r\n{host}Content-Length: 0\r\nConnection: close\r\n\r\n"
            ),
            "405",
            Some("get"),
        ),
        (
            format!("DELETE /slow HTTP/1.1\r\n{host}Connection: close\r\n\r\n"),
            "405",
            Some("get"),
        ),
    ];
    for (request, status, allow) in raws {
        let sent = request.clone();
        let answer = tokio::task::spawn_blocking(move || raw_whole(address, sent));
        let answer = within(answer).await.expect("joined").to_ascii_lowercase();
        assert!(
            answer.starts_with(&format!("http/1.1 {status} ")),
            "{request:?}: {answer}"
        );
        if let Some(allow) = allow {
            let allow = format!("\r\nallow: {allow}\r\n");
            assert!(answer.contains(&allow), "{request:?}: {answer}");
        }
    }
    assert_eq!(session.next().await["step"], "open");
    assert_eq!(session.next().await["step"], "S1");
    let report = session.end().await;
    let first = report.runs[0].policies[0].work_events.first().cloned();
    assert_eq!(
        first.and_then(|e| e.request).map(|r| r.to_string()),
        Some("S1".into())
    );
    assert!(report.room_requests.is_empty());
}

/// A client that opens the event stream and never reads it does not hold the run up, nor the
/// end of the session.
#[tokio::test]
async fn a_stalled_event_stream_does_not_block_the_run() {
    let session = Session::start(Inputs::default(), Front::Async).await;
    let mut stalled = TcpStream::connect(session.address).expect("connect");
    let head = format!("GET /events HTTP/1.1\r\nHost: {}\r\n\r\n", session.address);
    stalled.write_all(head.as_bytes()).expect("a request");
    let mut reader = session.events().await;
    let (status, body) = session.control("run-to-end", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let steps = body["steps"].as_array().map_or(0, Vec::len);
    assert_eq!(steps, 16, "{body}");
    reader
        .until(|m| kind(m) == "state" && m["complete"] == true)
        .await;
    let report = session.end().await;
    assert!(report.matches_model);
    // The session closed the stalled stream: reading it now reaches its end.
    let (read, _) = read_rest(&mut stalled);
    assert!(read.is_ok(), "{read:?}");
}

/// Finish on the page ends the session as Ctrl-C does: a run closed before its end is reported
/// as failed; a session in which no step was taken reports no run at all, and does not match
/// the model (nothing was shown). Either way the page is told the session failed, not that it
/// differed from the model.
#[tokio::test]
async fn finish_closes_the_session_and_reports_an_unfinished_run() {
    for steps in [0, 2] {
        let mut session = Session::start(Inputs::default(), Front::Async).await;
        let mut events = session.events().await;
        for _ in 0..steps {
            session.next().await;
        }
        let (status, body) = session.control("finish", json!({})).await;
        assert_eq!((status, &body), (202, &json!({ "finishing": true })));
        let ended = events.until(|m| kind(m) == "ended").await;
        let ended = ended.last().expect("the last message");
        assert_eq!(ended["failed"], true, "{ended}");
        let report = within(&mut session.task).await.expect("joined");
        let report = report.expect("the session ran");
        assert_not_serving(session.address, &session.control);
        if steps == 0 {
            assert!(
                report.runs.is_empty() && !report.matches_model,
                "{report:?}"
            );
            let verdict = report.verdict().unwrap_or_default();
            assert!(verdict.contains("no run was made"), "{verdict}");
        } else {
            assert!(!report.matches_model);
            let failure = report.runs[0].failure.as_deref().unwrap_or("");
            assert!(failure.contains("closed before its next step"), "{failure}");
        }
    }
}

/// The binary: prints the URL, serves until SIGINT, then prints the report and exits 0 when
/// every run matched — nothing left running, the port closed.
#[test]
fn sigint_ends_the_session_with_its_report() {
    let (mut child, url, lines) = spawn(&["classroom", "--mode", "partitioned"]);
    let (base, control) = base_and_control(&url);
    let runtime = common::runtime();
    runtime.block_on(async {
        let http = common::client();
        let done = http
            .post(format!("{base}/control/run-to-end"))
            .header("lab-control", &control)
            .send()
            .await
            .expect("run to the end");
        assert_eq!(done.status(), 200);
    });
    let (status, report, stderr) = interrupt(&mut child, lines);
    assert_eq!(status, Some(0), "{report}");
    assert_eq!(report["matches_model"], true, "{report}");
    // The terminal says the page's verdict, last.
    let verdict = "isolation-lab classroom: session over: matches the model, every run matched; \
                   its JSON report went to stdout";
    assert_eq!(
        stderr.last().map(String::as_str),
        Some(verdict),
        "{stderr:?}"
    );
    assert_eq!(report["runs"][0]["policies"][0]["mode"], "partitioned");
    let address = base.trim_start_matches("http://");
    assert!(
        TcpStream::connect(address).is_err(),
        "the port still listens"
    );
}

/// SIGINT while a request from the room is held at the gate of a run that is not over (on the
/// threaded front, where it blocks a thread): the gate opens, the room is answered, the run
/// is reported as closed before its end, and the exit status is 1.
#[test]
fn sigint_mid_run_answers_the_room_and_reports_the_unfinished_run() {
    let (mut child, url, lines) = spawn(&["classroom", "--server", "threaded", "--mode", "shared"]);
    let (base, control) = base_and_control(&url);
    let runtime = common::runtime();
    let (answer, (status, report, stderr)) = runtime.block_on(async move {
        let http = common::client();
        let post = |action: &str| {
            http.post(format!("{base}/control/{action}"))
                .header("lab-control", &control)
                .send()
        };
        assert_eq!(post("next").await.expect("open the run").status(), 200);
        assert_eq!(post("open-room").await.expect("open").status(), 200);
        let mut events = Events::open(&http, &base).await;
        let state = events
            .until(|m| kind(m) == "state" && m["room"]["open"] == true)
            .await;
        let token = room_token(&state);
        let held = http
            .get(format!("{base}/slow"))
            .header("lab-room", token)
            .send();
        let held = tokio::spawn(held);
        events.until(is_work("R1", "held")).await;
        // The wait for the exit blocks: off the runtime, which goes on reading R1's answer.
        let ended = tokio::task::spawn_blocking(move || interrupt(&mut child, lines));
        let ended = within(ended).await.expect("the exit is awaited");
        (within(held).await.expect("joined"), ended)
    });
    let answer = answer.expect("the room's request was answered");
    assert_eq!(answer.status(), 200);
    assert_eq!(status, Some(1), "{report}");
    let failure = report["runs"][0]["failure"].as_str().unwrap_or("");
    assert!(failure.contains("closed before its next step"), "{report}");
    // The terminal says the page's verdict: the run's failure, in one line.
    assert_eq!(
        stderr.last(),
        Some(&format!("isolation-lab: {failure}")),
        "{stderr:?}"
    );
    assert_eq!(report["room_requests"][0]["status"], 200);
    // Run 1 on the page is run 1 in the report: `runs[0]`.
    assert_eq!(report["room_requests"][0]["run"], 1, "{report}");
}

/// The address the binary serves on and the control token, from the instructor's URL it
/// printed.
fn base_and_control(url: &str) -> (String, String) {
    (common::base_url(url).to_owned(), common::control_token(url))
}

/// What the binary writes, line by line as it comes: stdout (the JSON report), and stderr after
/// the instructor's URL (the room's, the ways to end the session, then the verdict).
struct Output {
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

/// Starts the binary with `args`; returns it, the instructor's URL it printed on stderr, and
/// what it writes then.
fn spawn(args: &[&str]) -> (Child, String, Output) {
    spawn_command(Command::new(env!("CARGO_BIN_EXE_isolation-lab")), args)
}

/// [`spawn`], the binary limited to `descriptors` open files, soft and hard, so it cannot raise
/// the limit.
fn spawn_with_descriptors(descriptors: libc::rlim_t, args: &[&str]) -> (Child, String, Output) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
    common::limited(&mut command, libc::RLIMIT_NOFILE, descriptors);
    spawn_command(command, args)
}

fn spawn_command(mut command: Command, args: &[&str]) -> (Child, String, Output) {
    // A failed test's session (its thread panics, the binary keeps serving) ends with it.
    common::webdriver::die_with_parent(&mut command);
    // Its SIGINT caught, as the tests end it with one.
    common::with_default(&mut command, libc::SIGINT);
    let mut child = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let (send, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let (found, url) = mpsc::channel();
    let (said, after) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stderr).lines().map_while(Result::ok);
        for line in lines.by_ref() {
            if let Some(at) = line.find("http://")
                && line.contains("#control=")
            {
                let _ = found.send(line[at..].trim().to_owned());
                break;
            }
        }
        for line in lines {
            let _ = said.send(line);
        }
    });
    let url = url
        .recv_timeout(GUARD)
        .expect("the instructor's URL on stderr");
    let output = Output {
        stdout: lines,
        stderr: after,
    };
    (child, url, output)
}

/// Sends SIGINT and waits (bounded) for the exit; returns the status, the JSON report, and
/// what the binary wrote on stderr after its URL.
fn interrupt(child: &mut Child, output: Output) -> (Option<i32>, Value, Vec<String>) {
    let pid = i32::try_from(child.id()).expect("a pid");
    // SAFETY: `kill` takes plain integers; the child is ours and not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let started = Instant::now();
    let mut text = String::new();
    // The report ends the output; the reader thread ends with the pipe.
    let left = || GUARD.saturating_sub(started.elapsed());
    while let Ok(line) = output.stdout.recv_timeout(left()) {
        text.push_str(&line);
        text.push('\n');
    }
    let status = child.wait().expect("the child is reaped").code();
    let report = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    // The reader thread ends with the pipe, which the exit closed.
    let stderr = std::iter::from_fn(|| output.stderr.recv_timeout(left()).ok()).collect();
    (status, report, stderr)
}

/// Measured, not asserted (run with `cargo test --release --test lab -- classroom --ignored
/// --nocapture`): how long from a room request being sent until the page's stream tells its
/// `admitted` event — an upper bound on the section-to-stream delay, since it includes the
/// request's own way to the section — over 200 requests; the median and the 90th percentile.
#[tokio::test]
#[ignore = "a measurement; prints figures"]
async fn measure_event_to_stream_delay() {
    let session = Session::start(Inputs::default(), Front::Async).await;
    let mut events = session.events().await;
    let state = events.until(|m| kind(m) == "state").await;
    let token = room_token(&state);
    session.next().await;
    assert_eq!(session.control("open-room", json!({})).await.0, 200);
    let mut delays = Vec::new();
    for n in 1..=200 {
        let sent = Instant::now();
        let request = session.room("/fast", &token);
        let label = format!("R{n}");
        events.until(is_work(&label, "admitted")).await;
        delays.push(sent.elapsed());
        within(request).await.expect("answered");
    }
    delays.sort();
    let at = |q: usize| delays[delays.len() * q / 100];
    println!(
        "room request sent -> its admitted event on the stream: median {:?}, p90 {:?}, max {:?}",
        at(50),
        at(90),
        delays[delays.len() - 1]
    );
    session.end().await;
}

/// Measured, not asserted: the resident memory of a classroom session (the binary) before and
/// after 1 000 requests from the room (half /slow, half /fast, the run's gate open), with the
/// page's stream following all along.
#[test]
#[ignore = "a measurement; prints figures"]
fn measure_memory_after_a_thousand_room_requests() {
    let (mut child, url, lines) = spawn(&["classroom", "--mode", "shared"]);
    let rss = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .expect("VmRSS");
        line.split_whitespace().nth(1).expect("kB").to_owned() + " kB"
    };
    let pid = child.id();
    let (base, control) = base_and_control(&url);
    let runtime = common::runtime();
    let before = rss(pid);
    let (page_bytes, after) = runtime.block_on(async {
        let http = common::client();
        let page = http
            .get(format!("{base}/"))
            .send()
            .await
            .expect("the page")
            .bytes()
            .await;
        let page = page.expect("bytes");
        let mut events = Events::open(&http, &base).await;
        let post = |action: &'static str| {
            http.post(format!("{base}/control/{action}"))
                .header("lab-control", &control)
                .send()
        };
        for _ in 0..6 {
            post("next").await.expect("a step");
        }
        post("open-room").await.expect("open");
        let state = events
            .until(|m| kind(m) == "state" && m["room"]["open"] == true)
            .await;
        let token = room_token(&state);
        for n in 0..1000 {
            let route = if n % 2 == 0 { "/slow" } else { "/fast" };
            let sent = http
                .get(format!("{base}{route}"))
                .header("lab-room", &token)
                .send();
            assert_eq!(sent.await.expect("answered").status(), 200);
        }
        events.until(is_work("R1000", "finished")).await;
        (page.len(), rss(pid))
    });
    println!(
        "page: {page_bytes} bytes; VmRSS before the room: {before}, after 1 000 room requests: {after}"
    );
    let (status, report, _) = interrupt(&mut child, lines);
    assert_eq!(report["room_requests"].as_array().map(Vec::len), Some(1000));
    println!("exit status {status:?}");
}

/// A stranger who sends half a request head and then nothing does not hold the session's end:
/// Finish closes the session cleanly, with no failure, and the stranger's connection is closed.
#[tokio::test]
async fn a_half_sent_request_does_not_hold_the_end_of_the_session() {
    let mut session = Session::start(Inputs::default(), Front::Async).await;
    let mut stranger = TcpStream::connect(session.address).expect("connect");
    stranger
        .write_all(b"GET / HTTP/1.1\r\nHost: ")
        .expect("half a head");
    // The page's own request is served after it: the server has read the stranger's bytes.
    assert_eq!(session.next().await["step"], "open");
    let (status, _) = session.control("finish", json!({})).await;
    assert_eq!(status, 202);
    let report = within(&mut session.task).await.expect("joined");
    let report = report.expect("the session ran");
    assert_eq!(report.failure, None, "{report:?}");
    let (read, _) = read_rest(&mut stranger);
    assert!(
        read.is_ok(),
        "the stranger's connection was closed: {read:?}"
    );
}

/// One request as `curl` would send it, over a raw socket: `head` is the request line and
/// headers (without the blank line); the answer is read to its end (the server closes).
fn raw(address: SocketAddr, head: &str) -> String {
    raw_whole(
        address,
        format!("{head}\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
    )
}

/// `request`, whole, over a raw socket; the answer is read to its end.
fn raw_whole(address: SocketAddr, request: String) -> String {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream.write_all(request.as_bytes()).expect("a request");
    let (_, answer) = read_rest(&mut stream);
    String::from_utf8_lossy(&answer).into_owned()
}

/// Takes the first step, then runs to the end, from the instructor's page; each must answer 200.
fn run_to_end(base: &str, control: &str) {
    for action in ["next", "run-to-end"] {
        assert_eq!(post_control(base, control, action), 200, "{action}");
    }
}

/// Control `action` of the session at `base`, as the instructor's page sends it: its status.
fn post_control(base: &str, control: &str, action: &str) -> u16 {
    let sent = (common::client().post(format!("{base}/control/{action}")))
        .header("lab-control", control)
        .send();
    let answered = common::runtime().block_on(async { within(sent).await.expect("answered") });
    answered.status().as_u16()
}

/// Whether a read that ended did so because the server closed the connection or reset it.
fn closed_by_the_server(read: &std::io::Result<usize>) -> bool {
    match read {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// Reads `stream` to its end, within [`GUARD`]: how the read ended, and what it read.
fn read_rest(stream: &mut TcpStream) -> (std::io::Result<usize>, Vec<u8>) {
    stream
        .set_read_timeout(Some(GUARD))
        .expect("a read timeout");
    let mut rest = Vec::new();
    let read = stream.read_to_end(&mut rest);
    (read, rest)
}

/// From another local process with no token (raw HTTP, as `curl` sends it), no URL the server
/// answers carries the control token: not the page, nor its event stream (read to its end, a
/// whole session long), nor anything else; the room's view still gets the room's commands.
#[tokio::test]
async fn no_answer_without_the_token_carries_the_control_token() {
    let session = Session::start(Inputs::default(), Front::Async).await;
    let address = session.address;
    let stream = tokio::task::spawn_blocking(move || raw(address, "GET /events HTTP/1.1"));
    let mut events = session.events().await;
    events.until(|m| kind(m) == "state").await;
    session.next().await;
    assert_eq!(session.control("open-room", json!({})).await.0, 200);
    let paths = [
        "GET / HTTP/1.1",
        "GET /?control=1 HTTP/1.1",
        "GET /room HTTP/1.1",
        "GET /control/next HTTP/1.1",
        "POST /control/next HTTP/1.1\r\nContent-Length: 0",
        "GET /slow HTTP/1.1",
        "GET /fast HTTP/1.1",
        "GET /favicon.ico HTTP/1.1",
        "OPTIONS / HTTP/1.1",
        "GET http://127.0.0.1/ HTTP/1.1",
    ];
    let answers: Vec<String> =
        tokio::task::spawn_blocking(move || paths.iter().map(|head| raw(address, head)).collect())
            .await
            .expect("joined");
    for (head, answer) in paths.iter().zip(&answers) {
        assert!(answer.starts_with("HTTP/1.1 "), "{head}: {answer}");
        assert!(
            !answer.contains(&session.control),
            "{head} carries the token"
        );
    }
    assert!(answers[0].contains("sessionStorage"), "the page");
    let control = session.control.clone();
    let report = session.end().await;
    assert!(report.room_requests.is_empty());
    let stream = within(stream).await.expect("joined");
    assert!(
        stream.contains("lab-room: "),
        "the room's commands: {stream}"
    );
    assert!(stream.contains("\"kind\":\"ended\""), "{stream}");
    assert!(
        !stream.contains(&control),
        "the event stream carries the token"
    );
}

/// Every answer the server makes — the page, its events, JSON, a refusal — is kept from
/// caches, frames, other origins' pages, type sniffing and referrers; each page's script runs
/// by a nonce of its own, which its Content-Security-Policy names.
#[tokio::test]
async fn every_answer_is_unframed_and_each_page_has_its_own_nonce() {
    let session = Session::start(Inputs::default(), Front::Async).await;
    let address = session.address;
    let heads = [
        "GET / HTTP/1.1",
        "GET / HTTP/1.1",
        "GET /nowhere HTTP/1.1",
        "POST /control/next HTTP/1.1\r\nContent-Length: 0",
        "DELETE / HTTP/1.1",
    ];
    let answers: Vec<String> =
        tokio::task::spawn_blocking(move || heads.iter().map(|head| raw(address, head)).collect())
            .await
            .expect("joined");
    // The event stream's head, read while the stream is open.
    let stream = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(address).expect("connect");
        let head = format!("GET /events HTTP/1.1\r\nHost: {address}\r\n\r\n");
        stream.write_all(head.as_bytes()).expect("a request");
        stream
            .set_read_timeout(Some(GUARD))
            .expect("a read timeout");
        let mut head = Vec::new();
        let mut byte = [0; 1];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).expect("the stream's head");
            head.push(byte[0]);
        }
        String::from_utf8_lossy(&head).into_owned()
    });
    let stream = within(stream).await.expect("joined");
    session.end().await;
    for answer in answers.iter().chain([&stream]) {
        let head = answer
            .split("\r\n\r\n")
            .next()
            .unwrap_or_default()
            .to_lowercase();
        for header in [
            "cache-control: no-store",
            "x-frame-options: deny",
            "cross-origin-resource-policy: same-origin",
            "referrer-policy: no-referrer",
            "x-content-type-options: nosniff",
        ] {
            assert!(head.contains(header), "{header} missing: {head}");
        }
    }
    // Every answer but the stream is whole, and says its length rather than coming in chunks.
    for answer in &answers {
        let head = answer.split("\r\n\r\n").next().unwrap_or_default();
        let head = head.to_lowercase();
        let framed = head.contains("\r\ncontent-length: ") && !head.contains("transfer-encoding");
        assert!(framed, "no length: {head}");
    }
    let nonce = |page: &str| {
        let policy = page.split("'nonce-").nth(1).unwrap_or_default();
        let nonce = policy.split('\'').next().unwrap_or_default().to_owned();
        assert_eq!(nonce.len(), 32, "{page}");
        assert!(page.contains(&format!("nonce=\"{nonce}\"")), "{page}");
        nonce
    };
    assert_ne!(nonce(&answers[0]), nonce(&answers[1]), "a nonce used twice");
}

/// A control request's head whose body never arrives: its connection, to read with
/// [`read_rest`].
fn stall(address: SocketAddr, control: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).expect("connect");
    let head = format!(
        "POST /control/next HTTP/1.1\r\nHost: {address}\r\nlab-control: {control}\r\n\
         Content-Length: 10\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).expect("a head");
    stream
}

/// A session whose server waits `timeouts` (2 s each by default) for what a client sends at
/// once: shorter ones let a test see them pass without waiting long.
fn with_timeouts(inputs: Inputs, timeouts: Timeouts) -> classroom::Config {
    classroom::Config {
        inputs,
        options: Options::on(Front::Async),
        show_predictions: false,
        timeouts,
        room_requests: classroom::ROOM_REQUESTS,
    }
}

/// A control request whose body never arrives is answered 408 once the body timeout passes
/// (200 ms here), while the run goes on; and one still waiting for its body when the session
/// ends is closed unanswered: neither fails the session's report.
#[tokio::test]
async fn a_stalled_control_body_ends_at_its_timeout_and_fails_nothing() {
    let short = Timeouts {
        body: Duration::from_millis(200),
        ..Timeouts::default()
    };
    let session = Session::start_config(with_timeouts(inputs(ModeChoice::Shared, 2, 1), short));
    let session = session.await;
    let mut timed_out = stall(session.address, &session.control);
    let (status, body) = session.control("run-to-end", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let answer = tokio::task::spawn_blocking(move || {
        let (_, answer) = read_rest(&mut timed_out);
        String::from_utf8_lossy(&answer).into_owned()
    });
    let answer = within(answer).await.expect("joined");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    assert!(answer.contains("within 200 ms"), "{answer}");
    let report = session.end().await;
    assert_eq!(report.failure, None, "{report:?}");
    assert!(report.matches_model, "{:?}", report.verdict());

    // A body timeout the end of the session comes before however loaded the machine is (at
    // the default 2 s, a starved session once answered 408 before it ended).
    let long = Timeouts {
        body: Duration::from_secs(600),
        ..Timeouts::default()
    };
    let session = Session::start_config(with_timeouts(inputs(ModeChoice::Shared, 2, 1), long));
    let session = session.await;
    assert_eq!(session.control("run-to-end", json!({})).await.0, 200);
    let mut at_end = stall(session.address, &session.control);
    // Whether or not the server has read the stalled head when the session ends, the
    // connection owes no answer: it is closed, and nothing waits for it.
    assert_eq!(session.control("reveal", json!({})).await.0, 409);
    let report = session.end().await;
    assert_eq!(report.failure, None, "{report:?}");
    assert!(report.matches_model, "{:?}", report.verdict());
    let (read, rest) = read_rest(&mut at_end);
    assert!(
        read.is_ok() && rest.is_empty(),
        "closed unanswered: {read:?}"
    );
}

/// A connection that never sends a byte, and one that sends half a request head, are each
/// closed at the header timeout (200 ms here, 2 s by default) while the session runs: not by
/// the cap (no connection was refused), nor by its end, which comes after; it ends cleanly.
#[tokio::test]
async fn idle_connections_are_closed_at_the_header_timeout() {
    let short = Timeouts {
        header: Duration::from_millis(200),
        ..Timeouts::default()
    };
    let served = common::serve_classroom_config(with_timeouts(Inputs::default(), short)).await;
    let base = common::base_url(&served.url);
    let address: SocketAddr = base["http://".len()..].parse().expect("an address");
    // Raw sockets only: a client that sends its head at once is never at risk of a timeout
    // this short, but nothing here depends on it.
    let closed = tokio::task::spawn_blocking(move || {
        let silent = TcpStream::connect(address).expect("connect");
        let mut half = TcpStream::connect(address).expect("connect");
        half.write_all(b"GET / HTTP/1.1\r\nHost: ")
            .expect("half a head");
        [silent, half].map(|mut idle| {
            let (read, rest) = read_rest(&mut idle);
            (read.map_err(|e| e.kind()), rest.len())
        })
    });
    let closed = within(closed).await.expect("joined");
    assert_eq!(
        closed,
        [(Ok(0), 0), (Ok(0), 0)],
        "closed unanswered: {closed:?}"
    );
    let _ = served.leave.send(());
    let report = within(served.task).await.expect("joined");
    let report = report.expect("the session ran");
    assert_eq!(report.failure, None, "{report:?}");
    assert_eq!(report.connections_refused, 0, "{report:?}");
}

/// A local process with no token that opens more event streams than the cap does not lock the
/// page's controls out: with no idle connection to close, the oldest stream makes room (its
/// client would reconnect), and the oldest of the flood are closed. Nor does a new connection
/// accepted right behind a control request push it out before it is read (it did: a control
/// not yet read counted as the oldest connection with no request in progress).
#[test]
fn a_flood_of_event_streams_under_1024_descriptors_does_not_lock_the_controls_out() {
    let (mut child, url, lines) =
        spawn_with_descriptors(1024, &["classroom", "--mode", "shared", "--held", "1"]);
    let (base, control) = base_and_control(&url);
    let address: SocketAddr = base["http://".len()..].parse().expect("an address");
    let head = format!("GET /events HTTP/1.1\r\nHost: {address}\r\n\r\n");
    // Each stream is answered before the next is opened, so every open connection is a stream.
    let flood: Vec<TcpStream> = (0..1100)
        .map(|_| {
            let mut stream = TcpStream::connect(address).expect("connect");
            stream.write_all(head.as_bytes()).expect("a request");
            stream
                .set_read_timeout(Some(GUARD))
                .expect("a read timeout");
            let mut first = [0; 12];
            stream.read_exact(&mut first).expect("an answer");
            assert_eq!(&first, b"HTTP/1.1 200", "a stream");
            stream
        })
        .collect();
    // A whole control request and then a stranger's connection wait in the accept queue, so
    // the lab accepts both in one burst.
    let (mut instructor, stranger) = stopped_while(&child, || {
        let instructor = control_sent(address, &control, "next");
        (instructor, TcpStream::connect(address).expect("connect"))
    });
    let (_, answer) = read_rest(&mut instructor);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    drop(stranger);
    run_to_end(&base, &control);
    // The cap under 1024 descriptors (`connection_cap` in src/classroom/mod.rs): the oldest of
    // the flood were closed to make room for the newer ones.
    const CAP: usize = 320;
    let mut oldest = flood;
    let newest = oldest.split_off(1100 - CAP);
    for mut stream in oldest {
        let (read, _) = read_rest(&mut stream);
        assert!(
            closed_by_the_server(&read),
            "an old stream was not closed: {read:?}"
        );
    }
    let (status, report, _) = interrupt(&mut child, lines);
    assert_eq!(status, Some(0), "{report}");
    assert_eq!(report["failure"], Value::Null, "{report}");
    assert_eq!(report["matches_model"], true, "{report}");
    let refused = report["connections_refused"].as_u64().unwrap_or(0);
    assert!(
        refused >= 1100 - CAP as u64,
        "the cap was reached: {report}"
    );
    drop(newest);
}

/// The room cannot lock the instructor out with requests a front leaves unread: with `--work
/// block` S1 holds the front's one worker, and each room request sent then waits, holding its
/// connection. Under 100 descriptors the server keeps at most 12 connections
/// (`connection_cap`), and the room at most half of them waiting: beyond that a room request
/// is answered 503 `room_full` at once. The instructor's controls still get in, the run goes on,
/// and the waiting ones are answered after the release.
#[test]
fn the_rooms_waiting_requests_cannot_lock_the_controls_out() {
    let args = ["classroom", "--mode", "partitioned", "--work", "block"];
    let (mut child, url, lines) = spawn_with_descriptors(100, &args);
    let (base, control) = base_and_control(&url);
    let address: SocketAddr = base["http://".len()..].parse().expect("an address");
    let runtime = common::runtime();
    let http = common::client();
    let post = |action: &str| {
        let sent = (http.post(format!("{base}/control/{action}")))
            .header("lab-control", &control)
            .send();
        async { within(sent).await.expect("answered").status() }
    };
    let token = runtime.block_on(async {
        let mut events = Events::open(&http, &base).await;
        for step in ["a fresh server", "S1 held"] {
            assert_eq!(post("next").await, 200, "{step}");
        }
        assert_eq!(post("open-room").await, 200);
        let state = events
            .until(|m| kind(m) == "state" && m["room"]["open"] == true)
            .await;
        room_token(&state)
    });
    const MOST_WAITING: usize = 6;
    let head = format!("GET /fast HTTP/1.1\r\nHost: {address}\r\nlab-room: {token}\r\n\r\n");
    let sent = |n: usize| -> Vec<TcpStream> {
        (0..n)
            .map(|_| {
                let mut stream = TcpStream::connect(address).expect("connect");
                stream.write_all(head.as_bytes()).expect("a request");
                stream
            })
            .collect()
    };
    // Whichever the server handles last beyond the first six is answered 503 at once; the six
    // it let through wait, unanswered.
    let mut unanswered = sent(MOST_WAITING + 4);
    for _ in 0..4 {
        let at = answered_first(&unanswered);
        let (_, answer) = read_rest_of_one(&mut unanswered.remove(at));
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("room_full"), "{answer}");
    }
    let waiting = unanswered;
    // The controls get in, and the run goes on to its end.
    assert_eq!(runtime.block_on(post("run-to-end")), 200);
    for mut stream in waiting {
        let (_, answer) = read_rest_of_one(&mut stream);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let (status, report, _) = interrupt(&mut child, lines);
    assert_eq!(status, Some(0), "{report}");
    let answered = report["room_requests"].as_array().map(Vec::len);
    assert_eq!(answered, Some(MOST_WAITING), "{report}");
}

/// Which of `streams` has something to read first, waiting for one within [`GUARD`].
fn answered_first(streams: &[TcpStream]) -> usize {
    use std::os::fd::AsRawFd;
    let mut polled: Vec<libc::pollfd> = (streams.iter())
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let timeout = libc::c_int::try_from(GUARD.as_millis()).expect("a timeout");
    let count = libc::nfds_t::try_from(polled.len()).expect("a count");
    // SAFETY: `polled` is a valid array of `count` pollfds for the call.
    let ready = unsafe { libc::poll(polled.as_mut_ptr(), count, timeout) };
    assert!(ready > 0, "no answer within {GUARD:?}");
    let at = polled.iter().position(|p| p.revents & libc::POLLIN != 0);
    at.expect("a stream with an answer")
}

/// The first answer on `stream`, its head and as much as has come with it, within [`GUARD`].
fn read_rest_of_one(stream: &mut TcpStream) -> (usize, String) {
    stream
        .set_read_timeout(Some(GUARD))
        .expect("a read timeout");
    let mut answer = [0; 1024];
    let read = stream.read(&mut answer).expect("an answer");
    (read, String::from_utf8_lossy(&answer[..read]).into_owned())
}

/// A run's port is open as long as the run, and any local process may connect to it: a flood
/// of connections to the run's front, under 100 descriptors, more than the session has left,
/// does not take them all. Beyond the front's cap (`front_cap` in src/classroom/mod.rs: 22
/// here) the oldest strangers' connections are closed to make room, the run's own never, so the
/// page still gets in and the run goes on and matches, and `record` says so (without the cap,
/// the front ran out of descriptors and failed the run). On each front.
#[test]
fn a_flood_of_connections_to_a_run_s_front_ends_nothing() {
    for front in ["async", "threaded"] {
        flood_a_run_s_front(front);
    }
}

/// A classroom session of one shared policy, one request held.
const SHARED_HELD_1: [&str; 5] = ["classroom", "--mode", "shared", "--held", "1"];

fn flood_a_run_s_front(front: &str) {
    let args = [&SHARED_HELD_1[..], &["--server", front]].concat();
    let (mut child, url, lines) = spawn_with_descriptors(100, &args);
    let (base, control) = base_and_control(&url);
    let page: SocketAddr = base["http://".len()..].parse().expect("an address");
    let status = post_control(&base, &control, "next");
    assert_eq!(status, 200, "the first step opens the run's front");
    let front = front_of(&child, page);
    let mut flood: Vec<TcpStream> = (0..150)
        .map(|_| TcpStream::connect(front).expect("connect"))
        .collect();
    let (read, _) = read_rest(&mut flood[0]);
    assert!(
        closed_by_the_server(&read),
        "the oldest was closed: {read:?}"
    );
    // The cap under 100 descriptors (`front_cap(connection_cap(Some(100)))`), and the one the
    // front may have just accepted while it makes room for it.
    const FRONT_CAP: usize = 12 / 2 + 16;
    let held = accepted_on(child.id(), front.port());
    assert!(
        held <= FRONT_CAP + 1,
        "{held} connections open on the front"
    );
    run_to_end(&base, &control);
    let (status, report, _) = interrupt(&mut child, lines);
    assert_eq!(status, Some(0), "{report}");
    assert_eq!(report["failure"], Value::Null, "{report}");
    assert_eq!(report["matches_model"], true, "{report}");
    drop(flood);
    recorded_as_matched(&report);
}

/// A run's own request queued in the accept queue beside strangers' connections is not pushed
/// out by them, nor kept out: with `--work block` S1 holds the async front's one worker, so F1
/// waits unread, and 40 strangers' connections queue behind it, or ahead of it; at the release
/// the front accepts them all in one burst, beyond its cap (22 under 100 descriptors). It
/// closes no connection before it has been polled (F1's was, every time, when they came
/// after), and lets those accepted first be polled before it refuses a later one (F1 was
/// refused, every time, when they came before). The run matches, and `record` agrees.
#[test]
fn strangers_queued_beside_f1_neither_push_it_out_nor_keep_it_out() {
    for strangers_first in [false, true] {
        strangers_queued_beside_f1(strangers_first);
    }
}

fn strangers_queued_beside_f1(strangers_first: bool) {
    let args = [&SHARED_HELD_1[..], &["--work", "block"]].concat();
    let (mut child, url, lines) = spawn_with_descriptors(100, &args);
    let (base, control) = base_and_control(&url);
    let page: SocketAddr = base["http://".len()..].parse().expect("an address");
    let post = |action: &str| post_control(&base, &control, action);
    for step in ["a fresh server", "S1 held"] {
        assert_eq!(post("next"), 200, "{step}");
    }
    let front = front_of(&child, page);
    let connect = || -> Vec<TcpStream> {
        (0..40)
            .map(|_| TcpStream::connect(front).expect("connect"))
            .collect()
    };
    let ahead = strangers_first.then(connect);
    assert_eq!(post("next"), 200, "F1 unread");
    let behind = (!strangers_first).then(connect);
    assert_eq!(post("run-to-end"), 200);
    let (status, report, _) = interrupt(&mut child, lines);
    assert_eq!(status, Some(0), "{report}");
    assert_eq!(report["failure"], Value::Null, "{report}");
    drop((ahead, behind));
    recorded_as_matched(&report);
}

/// The address of the open run's front of the session `child` serves its page on at `page`.
fn front_of(child: &Child, page: SocketAddr) -> SocketAddr {
    let ports = listening_ports(child.id());
    let front = ports.iter().find(|&&port| port != page.port());
    SocketAddr::from(([127, 0, 0, 1], *front.expect("the front listens")))
}

/// `record` re-checks a saved session `report` as matched.
fn recorded_as_matched(report: &Value) {
    let dir = common::temp_dir("isolation-lab-session").expect("a scratch directory");
    let saved = dir.path().join("s.json");
    std::fs::write(&saved, report.to_string()).expect("saved");
    let recorded = crate::record::record_here(dir.path(), "s.json", false);
    assert_eq!(recorded.code, 0, "{}", recorded.stdout);
}

/// Nor does a control request queued behind more strangers' connections than the cap (12 under
/// 100 descriptors) find itself refused: the lab lets those it accepted first run, and closes
/// them to make room, rather than refuse the control (it did, every time).
#[test]
fn a_control_queued_behind_strangers_beyond_the_cap_is_answered() {
    let (mut child, url, lines) = spawn_with_descriptors(100, &SHARED_HELD_1);
    let (base, control) = base_and_control(&url);
    let address: SocketAddr = base["http://".len()..].parse().expect("an address");
    let (strangers, mut instructor) = stopped_while(&child, || {
        let strangers: Vec<TcpStream> = (0..20)
            .map(|_| TcpStream::connect(address).expect("connect"))
            .collect();
        (strangers, control_sent(address, &control, "next"))
    });
    let (_, answer) = read_rest(&mut instructor);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    drop(strangers);
    let (status, report, _) = interrupt(&mut child, lines);
    assert_eq!(status, Some(1), "a run cut short: {report}");
    assert!(report["connections_refused"].as_u64() > Some(0), "{report}");
}

/// What `connect` returns, made while `child` is stopped (SIGSTOP, waited for): the lab accepts
/// whatever it connected in one burst when it goes on (SIGCONT).
fn stopped_while<T>(child: &Child, connect: impl FnOnce() -> T) -> T {
    common::stop_child(child.id());
    let connected = connect();
    let pid = libc::pid_t::try_from(child.id()).expect("a pid");
    // SAFETY: kill(2) signals our own unreaped child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    connected
}

/// A connection that has sent the whole request for control `action` of the session at
/// `address`, and asks to close once answered.
fn control_sent(address: SocketAddr, control: &str, action: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).expect("connect");
    let request = format!(
        "POST /control/{action} HTTP/1.1\r\nHost: {address}\r\nlab-control: {control}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("a request");
    stream
}

/// The sockets process `pid` holds, as their descriptors' links name them (`socket:[inode]`).
fn sockets_of(pid: u32) -> Vec<String> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("its descriptors");
    (fds.flatten())
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|target| target.to_str().map(str::to_owned))
        .collect()
}

/// How many connections accepted on `port` child `pid` holds open: each of its sockets is
/// copied into this process (`pidfd_getfd`, allowed on a child) and asked its addresses. (Reading
/// `/proc/net/tcp` instead took 0.4 s, behind the suite's thousands of sockets in TIME-WAIT.)
fn accepted_on(pid: u32, port: u16) -> usize {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let pid = libc::pid_t::try_from(pid).expect("a pid");
    // SAFETY: pidfd_open takes a pid and flags, and returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let pidfd = libc::c_int::try_from(pidfd).expect("a descriptor");
    assert!(
        pidfd >= 0,
        "pidfd_open: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a descriptor just opened, owned here alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("its descriptors");
    let numbers = fds
        .flatten()
        .filter_map(|fd| fd.file_name().to_str()?.parse().ok());
    let accepted = numbers.filter(|&number: &libc::c_int| {
        // SAFETY: pidfd_getfd takes a pidfd, a descriptor number in that process and flags,
        // and returns a new descriptor of ours or -1 (the descriptor closed meanwhile).
        let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), number, 0) };
        let Ok(copy) = libc::c_int::try_from(copy) else {
            return false;
        };
        if copy < 0 {
            return false;
        }
        // SAFETY: a descriptor just made, owned here alone; a socket or not, std only asks it
        // its addresses, and closes it.
        let socket = TcpStream::from(unsafe { OwnedFd::from_raw_fd(copy) });
        let accepted = socket.local_addr().is_ok_and(|a| a.port() == port);
        accepted && socket.peer_addr().is_ok()
    });
    accepted.count()
}

/// The TCP ports process `pid` listens on, from its descriptors and `/proc/net/tcp`, where the
/// kernel lists every listening socket before any other.
fn listening_ports(pid: u32) -> Vec<u16> {
    let sockets = sockets_of(pid);
    let table = std::fs::File::open("/proc/net/tcp").expect("/proc/net/tcp");
    let mut ports = Vec::new();
    // The kernel writes the table as it is read: reading stops at the first socket that is not
    // listening, so the connections the suite leaves in TIME-WAIT are neither written nor read.
    for line in BufReader::new(table).lines().skip(1).map_while(Result::ok) {
        // local address, state (0A is LISTEN), inode
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() <= 9 || fields[3] != "0A" {
            break;
        }
        let inode = format!("socket:[{}]", fields[9]);
        let port = fields[1].rsplit_once(':').map(|(_, port)| port);
        let port = port.and_then(|port| u16::from_str_radix(port, 16).ok());
        if let Some(port) = port.filter(|_| sockets.contains(&inode)) {
            ports.push(port);
        }
    }
    ports
}

/// The binary under a 1024-descriptor limit (soft and hard, so it cannot raise it): 1 100 idle
/// connections that never send a byte do not end the session. While they are open the page can
/// still connect and the run goes on: the oldest idle connections make room, closed by the cap
/// (at most 320 stay open under this limit) while the session runs; the session then ends
/// cleanly with the rest still open. (The header timeout, which closes those too, is
/// `idle_connections_are_closed_at_the_header_timeout`.)
#[test]
fn a_flood_of_idle_connections_under_1024_descriptors_is_closed_and_ends_nothing() {
    let (mut child, url, lines) =
        spawn_with_descriptors(1024, &["classroom", "--mode", "shared", "--held", "1"]);
    let (base, control) = base_and_control(&url);
    let address: SocketAddr = base["http://".len()..].parse().expect("an address");
    let flood: Vec<TcpStream> = (0..1100)
        .map(|_| TcpStream::connect(address).expect("connect"))
        .collect();
    // The flood is open: the page still gets in, and the run goes on.
    run_to_end(&base, &control);
    // The cap under 1024 descriptors (`connection_cap` in src/classroom/mod.rs): each
    // connection accepted beyond it closed the oldest idle one, so all but the newest of the
    // flood are closed while the session runs (by the cap at once, else at the header
    // timeout). The newest stay open until the session has ended.
    const CAP: usize = 320;
    let mut oldest = flood;
    let newest = oldest.split_off(1100 - CAP);
    for mut idle in oldest {
        let (read, rest) = read_rest(&mut idle);
        assert!(
            closed_by_the_server(&read) && rest.is_empty(),
            "an idle connection was not closed: {read:?}"
        );
    }
    let (status, report, _) = interrupt(&mut child, lines);
    assert_eq!(status, Some(0), "{report}");
    assert_eq!(report["failure"], Value::Null, "{report}");
    assert_eq!(report["matches_model"], true, "{report}");
    let refused = report["connections_refused"].as_u64().unwrap_or(0);
    assert!(refused > 0, "the cap was reached: {report}");
    drop(newest);
}

/// New run while a policy of the invocation is still to run: that run is cut short with the
/// reason it was, not as if the session had ended, and `record` reads the saved session as
/// genuine: it did not match, for that reason, and nothing in it is called edited.
#[tokio::test]
async fn a_new_run_cuts_the_last_one_short_and_says_so() {
    let session = Session::start(inputs(ModeChoice::Both, 2, 2), Front::Async).await;
    // The shared policy, from its opening to its close; the partitioned one is not opened.
    loop {
        let stepped = session.next().await;
        if stepped["step"] == "close" {
            break;
        }
        assert!(stepped["step"].is_string(), "{stepped}");
    }
    let again = json!({ "mode": "shared", "slots": 2, "held": 1 });
    assert_eq!(session.control("new-run", again).await.0, 200);
    assert_eq!(session.control("run-to-end", json!({})).await.0, 200);
    let report = session.end().await;
    let why = "partitioned: not run, the instructor started a new run before it";
    assert_eq!(report.runs.len(), 2);
    assert_eq!(report.runs[0].failure.as_deref(), Some(why));
    assert!(report.runs[1].matches_model, "{:?}", report.runs[1]);
    assert_eq!(report.verdict().as_deref(), Some(why));

    let dir = common::temp_dir("isolation-lab-new-run").expect("a scratch directory");
    let saved = dir.path().join("session.json");
    let json = serde_json::to_string(&report).expect("the report serializes");
    std::fs::write(&saved, json).expect("saved");
    let recorded = crate::record::record_here(dir.path(), "session.json", false);
    assert_eq!(recorded.code, 1, "the session did not match");
    let failure = recorded.stderr.trim_end();
    assert!(
        failure.contains("did not match the policy model"),
        "{failure}"
    );
    assert!(failure.ends_with(why), "{failure}");
}

/// A room request held at the run's gate when the instructor presses Finish: the close opens
/// the gate, the student gets the answer, and the page is told it before it is told the end,
/// as the report lists it.
#[tokio::test]
async fn a_room_request_held_at_finish_is_told_before_the_end() {
    let mut session = Session::start(inputs(ModeChoice::Shared, 4, 1), Front::Async).await;
    let mut events = session.events().await;
    let token = room_token(&events.until(|m| kind(m) == "state").await);
    // Before a run is open the room is not opened: it would be told to send, and refused.
    assert_eq!(session.control("open-room", json!({})).await.0, 409);
    assert_eq!(session.next().await["step"], "open");
    assert_eq!(session.control("open-room", json!({})).await.0, 200);
    let r1 = session.room("/slow", &token);
    events.until(is_work("R1", "held")).await;
    let (status, _) = session.control("finish", json!({})).await;
    assert_eq!(status, 202);
    let seen = events.until(|m| kind(m) == "ended").await;
    let told = seen
        .iter()
        .find(|m| kind(m) == "response" && m["request"] == "R1");
    let told = told.expect("R1's answer is told before the end");
    assert_eq!(told["status"], 200, "{told}");
    assert_eq!(within(r1).await.expect("R1 answered").0, 200);
    let report = within(&mut session.task).await.expect("joined");
    let report = report.expect("the session ran");
    let listed = report.room_requests.iter().map(|r| r.request.to_string());
    assert_eq!(listed.collect::<Vec<_>>(), ["R1"]);
}

/// A room request held at the room's gate is answered as its run closes; the page is told its
/// answer before the next policy's board, so it is drawn on its own run's board, never on the
/// next one's (it was, when Run to end closed one policy and began the next at once).
#[tokio::test]
async fn a_room_answer_at_a_run_s_close_is_told_before_the_next_board() {
    let session = Session::start(inputs(ModeChoice::Both, 4, 1), Front::Async).await;
    let mut events = session.events().await;
    let token = room_token(&events.until(|m| kind(m) == "state").await);
    for step in ["open", "S1", "F1", "release", "S-after", "F-after"] {
        assert_eq!(session.next().await["step"], step);
    }
    assert_eq!(session.control("close-gate", json!({})).await.0, 200);
    let r1 = session.room("/slow", &token);
    events.until(is_work("R1", "held")).await;
    assert_eq!(session.control("run-to-end", json!({})).await.0, 200);
    assert_eq!(within(r1).await.expect("R1 answered").0, 200);
    let next_board = |m: &Value| kind(m) == "run" && m["mode"] == "partitioned";
    let seen = events.until(next_board).await;
    let told = seen
        .iter()
        .find(|m| kind(m) == "response" && m["request"] == "R1");
    let told = told.expect("R1's answer is told before the partitioned board");
    assert_eq!(told["status"], 200, "{told}");
    let report = session.end().await;
    let listed = report
        .room_requests
        .iter()
        .map(|r| (r.request.to_string(), r.run));
    assert_eq!(listed.collect::<Vec<_>>(), [("R1".to_owned(), 1)]);
}

/// The room may send at most as many requests as the session keeps for its report (10 000 from
/// the command line; two here): past them a request is answered 429 `room_spent` at once, sent
/// nowhere and listed nowhere, so a room that sends on and on cannot grow the lab without end.
#[tokio::test]
async fn the_room_sends_at_most_the_requests_a_session_keeps() {
    let mut config = with_timeouts(inputs(ModeChoice::Shared, 4, 1), Timeouts::default());
    config.room_requests = 2;
    let session = Session::start_config(config).await;
    let mut events = session.events().await;
    let token = room_token(&events.until(|m| kind(m) == "state").await);
    assert_eq!(session.next().await["step"], "open");
    assert_eq!(session.control("open-room", json!({})).await.0, 200);
    for _ in 0..2 {
        let (status, _) = within(session.room("/fast", &token))
            .await
            .expect("answered");
        assert_eq!(status, 200);
    }
    let (status, body) = within(session.room("/fast", &token))
        .await
        .expect("answered");
    assert_eq!(
        (status, &body["error"]),
        (429, &json!("room_spent")),
        "{body}"
    );
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("the 2 requests a session keeps"), "{body}");
    let report = session.end().await;
    let listed = report.room_requests.iter().map(|r| r.request.to_string());
    assert_eq!(listed.collect::<Vec<_>>(), ["R1", "R2"]);
}

/// `--work block` on one worker, the room open before S1: the room's slow request, held at the
/// gate, blocks the front's only worker, so S1 can no longer be read. The sequence counts every
/// request held at the gate, the room's too, as a blocked worker: S1 is seen unread at once
/// rather than awaited as a decision until the safety timeout, and the run ends, not matching
/// the model (the room took the worker and the slow permit), without stalling.
#[tokio::test]
async fn a_room_request_that_blocks_the_only_worker_stalls_nothing() {
    let session = Session::blocking_its_only_worker().await;
    let mut events = session.events().await;
    let r1 = session.open_and_hold_r1(&mut events).await;
    for step in ["S1", "S2", "F1", "release", "S-after", "F-after"] {
        assert_eq!(session.next().await["step"], step);
    }
    assert_eq!(within(r1).await.expect("R1 answered").0, 200);
    let report = session.end().await;
    let run = &report.runs[0];
    let policy = &run.policies[0];
    let failure = run.failure.as_ref();
    assert!(
        failure.is_none_or(|f| !f.contains("stalled")),
        "{failure:?}"
    );
    let unread: Vec<String> = (policy.observed.executor.iter())
        .flat_map(|e| e.unread.iter().map(|u| u.request.to_string()))
        .collect();
    assert_eq!(unread, ["S1", "S2", "F1"]);
    assert!(!report.matches_model);
}
