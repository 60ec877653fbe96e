//! The front child seam with real child processes (this test binary, started again, running
//! [`serve`] as `__front` would) and real HTTP on loopback.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::task::JoinSet;

use super::protocol::Counts;
use super::*;
use crate::admission::gate::GateState;
use crate::admission::ledger::Event;
use crate::admission::token::TOKEN_HEADER;
use crate::child::test_child::{self, step};
use crate::label::Label;
use crate::policy::{Front, Pool};

const ENTRY: &str = "front_process::tests::front_entry";
const START: Duration = Duration::from_secs(60);
const STOP: Duration = Duration::from_secs(60);

/// Not a test: the body of the front children below. The role is the spec.
#[test]
#[ignore = "runs only as a child process of this module's tests"]
fn front_entry() {
    let Some(role) = test_child::role() else {
        return;
    };
    let spec = FrontSpec::parse(&role).expect("the tests give valid specs");
    // Exit here, so the test harness adds nothing to stdout after the front's messages.
    std::process::exit(i32::from(serve(&spec)))
}

async fn start(spec: &FrontSpec) -> FrontProcess {
    let child = test_child::spawn(ENTRY, &spec.to_arg()).await;
    FrontProcess::attach(child, START)
        .await
        .expect("the front child starts")
}

/// What a caller got: the status and the body's `error`, else its `request`; or why it got
/// nothing.
type CallerGot = Result<(u16, String), String>;

/// Sends `GET /slow` as each of `labels` to the front at `address`, each on its own
/// connection, presenting `token`.
fn hold(address: SocketAddr, token: &str, labels: &[Label]) -> JoinSet<CallerGot> {
    let token = HeaderValue::from_str(token).expect("a token is a header value");
    let headers = HeaderMap::from_iter([(HeaderName::from_static(TOKEN_HEADER), token)]);
    let mut callers = JoinSet::new();
    for &label in labels {
        let headers = headers.clone();
        callers.spawn(async move {
            let got = crate::coordinator::client::get(address, "/slow", label, &headers).await;
            let (status, bytes) = got.map_err(|e| format!("{e:#}"))?;
            let body: serde_json::Value =
                serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
            let said = body.get("error").or_else(|| body.get("request"));
            Ok((
                status,
                said.and_then(|v| v.as_str()).unwrap_or("").to_owned(),
            ))
        });
    }
    callers
}

fn callers_of(front: &FrontProcess, labels: &[Label]) -> JoinSet<CallerGot> {
    hold(front.address(), front.token(), labels)
}

async fn next_answer(callers: &mut JoinSet<CallerGot>) -> CallerGot {
    let joined = step("an answer", callers.join_next()).await;
    joined
        .expect("a caller is left")
        .expect("a caller does not panic")
}

/// Reads counts until `held` requests are held.
async fn until_held(front: &mut FrontProcess, held: u64) -> Counts {
    loop {
        match step("counts", front.next()).await {
            Ok(Some(FromFront::Counts(counts))) if counts.held >= held => return counts,
            Ok(Some(FromFront::Counts(_))) => {}
            other => panic!("expected counts, got {other:?}"),
        }
    }
}

/// On both fronts a child serves, says when requests are held, opens its gate when told,
/// and on stop reports a clean server, an exact ledger and full pools, then exits 0.
#[tokio::test]
async fn a_front_child_holds_releases_and_reports_its_stop() {
    for front in Front::ALL {
        let mut child = start(&FrontSpec::new(front, 3)).await;
        assert!(child.address().ip().is_loopback());
        let labels = [Label::Slow(1), Label::Slow(2)];
        let mut callers = callers_of(&child, &labels);
        let counts = until_held(&mut child, 2).await;
        assert_eq!(
            (counts.admitted, counts.finished, counts.refused),
            (2, 0, 0)
        );
        assert!(!counts.gate_opened);
        child.open_gate().await.expect("open the gate");
        let mut answers = vec![
            next_answer(&mut callers).await,
            next_answer(&mut callers).await,
        ];
        answers.sort();
        assert_eq!(
            answers,
            [Ok((200, "S1".into())), Ok((200, "S2".into()))],
            "{front:?}"
        );
        let closed: StoppedFront = step("stop", child.stop(STOP)).await.expect("a clean stop");
        let stopped = closed.stopped;
        assert_eq!(stopped.error, None, "{front:?}");
        assert_eq!(stopped.server.connections_accepted, 2);
        assert!(stopped.server.connection_tasks_stopped);
        let ledger = &stopped.ledger[&Pool::Shared];
        assert_eq!(
            (ledger.admitted, ledger.finished, ledger.cancelled),
            (2, 2, 0)
        );
        assert!(ledger.invariants.iter().all(|i| i.holds), "{ledger:?}");
        assert_eq!(stopped.final_state.available_permits[&Pool::Shared], 3);
        assert_eq!(stopped.final_state.gate, GateState::Open);
        assert_eq!(
            (stopped.counts.finished, stopped.counts.gate_opened),
            (2, true)
        );
        assert_eq!((closed.exit.code, closed.exit.signal), (Some(0), None));
    }
}

/// With `"stream":"events"` the child sends every ledger event, in ledger order.
#[tokio::test]
async fn a_front_child_can_stream_every_event() {
    let spec = FrontSpec {
        stream: Stream::Events,
        ..FrontSpec::new(Front::Async, 1)
    };
    let mut child = start(&spec).await;
    let mut callers = callers_of(&child, &[Label::Slow(1)]);
    let mut events = Vec::new();
    while events.last() != Some(&Event::Held) {
        match step("an event", child.next()).await {
            Ok(Some(FromFront::Event(event))) => events.push(event.event),
            other => panic!("expected an event, got {other:?}"),
        }
    }
    child.open_gate().await.expect("open the gate");
    assert_eq!(next_answer(&mut callers).await, Ok((200, "S1".into())));
    let closed = step("stop", child.stop(STOP)).await.expect("a clean stop");
    for message in closed.trailing {
        let FromFront::Event(event) = message else {
            panic!("only events stream: {message:?}");
        };
        events.push(event.event);
    }
    let expected = [
        Event::Admitted,
        Event::Held,
        Event::GateOpened,
        Event::Finished,
    ];
    assert_eq!(events, expected);
}

/// A child whose stdin ends (its parent is gone) stops at once: held work is abandoned and
/// answered 503, the server drains, and the child exits 0.
#[tokio::test]
async fn the_end_of_stdin_stops_a_front_child() {
    for front in Front::ALL {
        let mut child = test_child::spawn(ENTRY, &FrontSpec::new(front, 1).to_arg()).await;
        let Ok(Some(FromFront::Ready(ready))) = step("ready", child.recv()).await else {
            panic!("{front:?}: no ready message");
        };
        let mut callers = hold(ready.address, &ready.token, &[Label::Slow(1)]);
        loop {
            match step("counts", child.recv()).await {
                Ok(Some(FromFront::Counts(counts))) if counts.held == 1 => break,
                Ok(Some(FromFront::Counts(_))) => {}
                other => panic!("expected counts, got {other:?}"),
            }
        }
        child.close_stdin();
        let answer = next_answer(&mut callers).await;
        assert_eq!(answer, Ok((503, "work_abandoned".into())), "{front:?}");
        let exit = step("exit", child.wait()).await.expect("reaped");
        assert_eq!(
            (exit.code, exit.signal),
            (Some(0), None),
            "{front:?}: {exit}"
        );
    }
}

/// A front child with two permits on `front`, holding S1, and S1's caller.
async fn holding_s1(front: Front) -> (FrontProcess, JoinSet<CallerGot>) {
    let mut child = start(&FrontSpec::new(front, 2)).await;
    let callers = callers_of(&child, &[Label::Slow(1)]);
    until_held(&mut child, 1).await;
    (child, callers)
}

/// The front child `pid` is reaped, and the caller it held saw its connection end: it is not
/// left waiting.
async fn reaped_and_let_go(pid: u32, mut callers: JoinSet<CallerGot>) {
    // SAFETY: signal 0 only checks whether the process exists.
    let gone = unsafe { libc::kill(libc::pid_t::try_from(pid).expect("a pid"), 0) } == -1;
    assert!(gone, "pid {pid} is reaped");
    let answer = next_answer(&mut callers).await;
    assert!(
        answer.is_err(),
        "the caller saw its connection end: {answer:?}"
    );
}

/// A front child killed mid-hold is seen as ended and reported with its signal; a stop sent
/// to it then fails naming the same signal. Its callers are not left waiting.
#[tokio::test]
async fn a_killed_front_child_is_reported_with_its_signal() {
    let (mut child, callers) = holding_s1(Front::Threaded).await;
    let pid = child.pid();
    child.kill().expect("kill the child");
    loop {
        match step("the end of its stdout", child.next()).await {
            Ok(None) => break,
            Ok(Some(FromFront::Counts(_))) => {}
            other => panic!("expected the end, got {other:?}"),
        }
    }
    let exit = step("exit", child.wait()).await.expect("reaped");
    assert_eq!(exit.signal.map(|s| s.name), Some("SIGKILL"), "{exit}");
    let error = step("stop", child.stop(STOP))
        .await
        .expect_err("a dead front cannot stop");
    assert_eq!(
        error.exit.and_then(|e| e.signal).map(|s| s.name),
        Some("SIGKILL")
    );
    reaped_and_let_go(pid, callers).await;
}

/// A front child stopped (SIGSTOP) mid-hold reads no command: told to stop, it is found
/// stopped, killed and reaped at once, and the error says so, as a start would. Its caller is
/// not left waiting.
#[tokio::test]
async fn a_stopped_front_child_is_killed_when_told_to_stop() {
    let (child, callers) = holding_s1(Front::Async).await;
    let pid = child.pid();
    child.pause().expect("SIGSTOP the child");
    // A signal stops a process only once one of its threads takes it: until then its other
    // threads run on, and one of them could read the stop command first. Seen stopped, it
    // reads none.
    assert!(crate::child::seen_stopped_within(pid, START).await);
    // Given less than the module's long STOP, a stop that waits for the stopped child fails
    // sooner, with another reason.
    let error = step("stop", child.stop(Duration::from_secs(10)))
        .await
        .expect_err("a stopped front cannot stop");
    assert_eq!(
        error.reason,
        "its process was found stopped (SIGSTOP or another stop signal)"
    );
    assert!(error.found_stopped, "{error:?}");
    let exit = error.exit.expect("reaped");
    assert!(exit.killed_by_lab, "{exit}");
    assert_eq!(exit.signal.map(|s| s.name), Some("SIGKILL"), "{exit}");
    reaped_and_let_go(pid, callers).await;
}

/// A program that is not a front, or no program at all, is a failed start that says why;
/// a process that did start is reaped.
#[tokio::test]
async fn a_child_that_is_not_a_front_fails_to_start() {
    let spec = FrontSpec::new(Front::Async, 1);
    let missing = std::path::Path::new("/nonexistent/isolation-lab");
    let error: FrontError = FrontProcess::start(missing, &spec, START)
        .await
        .expect_err("no such program");
    assert!(error.reason.contains("cannot start a process"), "{error}");
    assert!(error.exit.is_none());
    // `true __front <spec>` exits 0 without a word.
    let silent = std::path::Path::new("true");
    let error = step("start", FrontProcess::start(silent, &spec, START))
        .await
        .expect_err("not a front");
    assert!(
        error.reason.contains("ended before it was ready"),
        "{error}"
    );
    assert_eq!(error.exit.map(|e| e.code), Some(Some(0)));
}

/// The spec is checked where the command line is: capacity in range, no unknown field; the
/// optional fields have defaults.
#[test]
fn a_spec_is_checked_like_a_command_line() {
    let spec = FrontSpec::parse(r#"{"front":"threaded","capacity":5}"#).expect("a valid spec");
    assert_eq!(spec, FrontSpec::new(Front::Threaded, 5));
    assert_eq!(FrontSpec::parse(&spec.to_arg()).ok(), Some(spec));
    for refused in [
        r#"{"front":"async","capacity":0}"#,
        r#"{"front":"async","capacity":1000001}"#,
        r#"{"front":"async","capacity":1,"colour":"red"}"#,
        r#"{"front":"forked","capacity":1}"#,
        r#"{"capacity":1}"#,
        "async",
    ] {
        assert!(FrontSpec::parse(refused).is_err(), "{refused}");
    }
    let events = FrontSpec::parse(r#"{"front":"async","capacity":1,"stream":"events"}"#);
    assert_eq!(events.map(|s| s.stream).ok(), Some(Stream::Events));
}

/// The private Redis's password never goes on the command line: the spec leaves it out, and a
/// spec that carries one is refused.
#[test]
fn a_spec_never_carries_the_redis_password() {
    let password = crate::redis_pool::Password::generate().expect("randomness");
    let mut spec = FrontSpec::new(Front::Async, 2);
    spec.replica = Some("r1".into());
    spec.global = Some(GlobalSpec {
        url: "redis://127.0.0.1:6379".into(),
        run: "replicas-1".into(),
        lease_ms: 2000,
        fencing: true,
        password: Some(password.clone()),
    });
    let arg = spec.to_arg();
    assert!(!arg.contains(password.as_str()), "{arg}");
    let read = FrontSpec::parse(&arg).expect("the spec reads back");
    assert_eq!(read.global.and_then(|g| g.password), None);
    let carried = arg.replace(r#""fencing":true"#, r#""fencing":true,"password":"x""#);
    assert!(FrontSpec::parse(&carried).is_err(), "{carried}");
}
