//! Slow work that blocks its thread (`docs/blocking.md`), on real servers on loopback: with
//! `--work block` the async front's workers are taken by held slow work and F1 sits unread
//! until release, the fast permit idle; the threaded front admits F1 at once; with
//! `spawn-blocking` and `own-runtime` F1 is decided at once, and work beyond the slow work's
//! threads is queued, its permit held. Every combination matches the model, and `predict`
//! says what each shows. Nothing here waits on time: the sequence advances on the ledger, the
//! listener's accept queue and the runtime's heartbeat.

use isolation_lab::coordinator::{Options, run_policy_with};
use isolation_lab::evidence::Event;
use isolation_lab::evidence::Moment;
use isolation_lab::executor::{BlockingThreads, Executor, WorkStyle, Workers};
use isolation_lab::label::Label;
use isolation_lab::outcome::Outcome;
use isolation_lab::policy::{Front, Held, Mode, Policy, Pool, Slots};
use isolation_lab::report::PolicyReport;

use crate::common::{Case, assert_port_closed};

fn policy(mode: Mode, slots: u8) -> Policy {
    let slots = Slots::new(slots).expect("allowed slots");
    Policy { mode, slots }
}

fn held(n: u8) -> Held {
    Held::new(n).expect("allowed held count")
}

fn executor(work: WorkStyle, workers: Workers, blocking: u16) -> Executor {
    let blocking = BlockingThreads::new(blocking).expect("allowed blocking threads");
    Executor::new(work, workers, blocking)
}

async fn run(front: Front, executor: Executor, policy: Policy, held: Held) -> PolicyReport {
    let options = Options::on(front).with_executor(executor);
    let run = run_policy_with(policy, held, options).await;
    let context = format!("{policy:?} held {held} on {front:?} with {executor:?}");
    assert_eq!(run.failure, None, "{context}: the run failed");
    let report = run.report;
    assert!(
        report.model.matches,
        "{context}: {:?}",
        report.model.mismatches
    );
    let server = report.server.as_ref().expect("the server started");
    assert!(
        server.connection_tasks_stopped && server.listener_closed,
        "{context}"
    );
    assert_port_closed(server);
    let after = report.resources.after_run.expect("counted after the run");
    assert_eq!(
        (after.connection_handlers, after.held_at_gate),
        (0, 0),
        "{context}"
    );
    report
}

fn seq(report: &PolicyReport, request: Option<Label>, event: Event) -> Option<u64> {
    let events = report.work_events.iter();
    let mut found = events.filter(|e| e.request == request && e.event == event);
    found.next().map(|e| e.seq)
}

/// F1 is admitted only after the gate opened, with the fast permit idle in every snapshot
/// before, while the kernel held its connection unread; the heartbeat stood still from the
/// last slow request held to the release.
fn assert_f1_waited_for_the_executor(report: &PolicyReport, blocked: &[Label]) {
    let opened = seq(report, None, Event::GateOpened).expect("the gate opened");
    let f1 = seq(report, Some(Label::F1), Event::Admitted).expect("F1 admitted");
    assert!(
        f1 > opened,
        "F1 admitted at {f1}, the gate opened at {opened}"
    );
    let fast = report.route_pools[&isolation_lab::policy::Route::Fast];
    let snapshots = [
        &report.observed.observer_before_fast,
        &report.observed.observer_after_fast_before_release,
    ];
    for snapshot in snapshots.into_iter().map(|s| s.as_ref().expect("recorded")) {
        assert_eq!(snapshot.held_at_gate, blocked);
        if fast == Pool::Fast {
            assert_eq!(
                snapshot.active_work[&Pool::Fast],
                0,
                "the fast permit idles"
            );
        }
    }
    assert!(report.observed.fast_response_before_release.is_none());
    let f1_answer = report
        .observed
        .responses
        .iter()
        .find(|r| r.request == Label::F1);
    let f1_answer = f1_answer.expect("F1 answered");
    assert_eq!(f1_answer.status, 200);
    assert!(f1_answer.after_event > opened);
    let watched = report
        .observed
        .executor
        .as_ref()
        .expect("executor evidence");
    let unread = watched.unread.iter().find(|u| u.request == Label::F1);
    let unread = unread.expect("F1 seen unread");
    assert!(unread.accept_queue >= 1 && unread.after_event < opened);
    let last_held = watched
        .heartbeat
        .iter()
        .rposition(|b| b.moment == Moment::Held);
    let still = &watched.heartbeat[last_held.expect("a hold was read")..];
    assert_eq!(still.last().map(|b| b.moment), Some(Moment::Release));
    assert!(
        still.iter().all(|b| b.ticks == still[0].ticks),
        "the heartbeat ticked while every worker was blocked: {still:?}"
    );
    let started = &watched.heartbeat[0];
    assert!(started.moment == Moment::Start && started.ticks >= 1);
}

/// One worker at the defaults: S1 blocks the front's only thread, S2 and F1 sit unread until
/// release, under both policies, and the threaded front admits partitioned F1 at once.
#[tokio::test]
async fn one_blocked_worker_keeps_f1_out_until_release() {
    let block = executor(WorkStyle::Block, Workers::CurrentThread, 512);
    for mode in Mode::ALL {
        let report = run(Front::Async, block, policy(mode, 2), held(2)).await;
        assert_f1_waited_for_the_executor(&report, &[Label::Slow(1)]);
        let watched = report.observed.executor.as_ref().expect("evidence");
        let unread: Vec<Label> = watched.unread.iter().map(|u| u.request).collect();
        assert_eq!(unread, [Label::Slow(2), Label::F1], "{mode:?}");
    }
    let threaded = run(
        Front::Threaded,
        block,
        policy(Mode::Partitioned, 2),
        held(2),
    )
    .await;
    let f1 = threaded
        .observed
        .fast_response_before_release
        .expect("F1 answered at once");
    assert_eq!(f1.status, 200);
    assert!(threaded.observed.executor.is_none(), "no runtime to watch");
}

/// Two workers, a slow pool of two holding both while the fast permit stays idle: F1 waits
/// for the executor, not for a permit.
#[tokio::test]
async fn two_blocked_workers_keep_f1_out_until_release() {
    let block = executor(WorkStyle::Block, Workers::Threads(2), 512);
    let report = run(Front::Async, block, policy(Mode::Partitioned, 3), held(2)).await;
    assert_f1_waited_for_the_executor(&report, &[Label::Slow(1), Label::Slow(2)]);
    // With a worker to spare, F1 gets its fast permit at once.
    let report = run(Front::Async, block, policy(Mode::Partitioned, 2), held(2)).await;
    let f1 = report
        .observed
        .fast_response_before_release
        .expect("F1 at once");
    assert_eq!(f1.status, 200);
}

/// With the blocking wait on threads of its own — the blocking pool with room for every held
/// request, or the slow class's own runtime — F1 is admitted before release.
#[tokio::test]
async fn spawn_blocking_and_own_runtime_admit_f1_before_release() {
    for executor in [
        executor(WorkStyle::SpawnBlocking, Workers::CurrentThread, 2),
        executor(WorkStyle::OwnRuntime, Workers::Threads(2), 512),
    ] {
        let report = run(
            Front::Async,
            executor,
            policy(Mode::Partitioned, 3),
            held(2),
        )
        .await;
        let opened = seq(&report, None, Event::GateOpened).expect("opened");
        let f1 = seq(&report, Some(Label::F1), Event::Finished).expect("F1 finished");
        assert!(f1 < opened, "{executor:?}");
        let held = &report.observed.observer_before_fast.as_ref().expect("seen");
        assert_eq!(held.held_at_gate, [Label::Slow(1), Label::Slow(2)]);
        for request in [Label::Slow(1), Label::Slow(2)] {
            let started = seq(&report, Some(request), Event::Started).expect("started");
            assert!(started < opened, "{executor:?}: {request} ran at once");
        }
    }
}

/// Fewer blocking threads than held requests: the rest are admitted, their permits held, and
/// queued — never held at the gate, started only after release.
#[tokio::test]
async fn work_beyond_the_blocking_threads_is_queued_with_its_permit() {
    let one = executor(WorkStyle::SpawnBlocking, Workers::CurrentThread, 1);
    let report = run(Front::Async, one, policy(Mode::Partitioned, 4), held(3)).await;
    let opened = seq(&report, None, Event::GateOpened).expect("opened");
    let watched = report.observed.executor.as_ref().expect("evidence");
    assert_eq!(watched.queued, [Label::Slow(2), Label::Slow(3)]);
    for &request in &watched.queued {
        let admitted = seq(&report, Some(request), Event::Admitted).expect("admitted");
        let started = seq(&report, Some(request), Event::Started).expect("started");
        assert!(admitted < opened && opened < started, "{request}");
        assert_eq!(seq(&report, Some(request), Event::Held), None, "{request}");
    }
    let before = report.observed.observer_before_fast.as_ref().expect("seen");
    assert_eq!(before.held_at_gate, [Label::Slow(1)]);
    assert_eq!(
        before.active_work[&Pool::Slow],
        3,
        "queued work holds its permits"
    );
    let f1 = report
        .observed
        .fast_response_before_release
        .expect("F1 at once");
    assert_eq!(f1.status, 200);
}

/// The executors the sweep test runs every input on: each style, each runtime shape that
/// changes what the model says, on the front that can run it.
fn executors() -> Vec<(Front, Executor)> {
    let mut all = vec![
        (
            Front::Async,
            executor(WorkStyle::Await, Workers::Threads(2), 512),
        ),
        (
            Front::Threaded,
            Executor {
                work: WorkStyle::Block,
                ..Executor::default()
            },
        ),
    ];
    for workers in [
        Workers::CurrentThread,
        Workers::Threads(2),
        Workers::Threads(3),
    ] {
        all.push((Front::Async, executor(WorkStyle::Block, workers, 512)));
    }
    for blocking in [1, 2, 512] {
        all.push((
            Front::Async,
            executor(WorkStyle::SpawnBlocking, Workers::CurrentThread, blocking),
        ));
    }
    for workers in [Workers::CurrentThread, Workers::Threads(2)] {
        all.push((Front::Async, executor(WorkStyle::OwnRuntime, workers, 512)));
    }
    all
}

/// Every input (2 modes × slots 2–4 × held 1–4) on every executor above matches the model,
/// and `predict`'s outcome is the observed one.
#[tokio::test]
async fn every_combination_matches_the_model() {
    for (front, executor) in executors() {
        for case in Case::all() {
            let (policy, held) = (case.policy(), case.held());
            let report = run(front, executor, policy, held).await;
            let predicted = Outcome::predicted_on(policy, held, (front, executor));
            let observed = Outcome::observed(&report);
            assert_eq!(
                predicted, observed,
                "{case:?} on {front:?} with {executor:?}"
            );
        }
    }
}

/// A gate that never opens fails a blocked run as stalled, and still closes everything: the
/// blocked workers are let go when the run abandons the gate.
#[tokio::test]
async fn a_stalled_blocked_run_fails_and_closes() {
    let block = executor(WorkStyle::Block, Workers::CurrentThread, 512);
    let faults = crate::common::Faults {
        gate_stuck: true,
        ..Default::default()
    };
    let mut options = Options::on(Front::Async)
        .with_executor(block)
        .with_hooks(faults);
    options.safety_timeout = std::time::Duration::from_secs(1);
    let run = run_policy_with(policy(Mode::Partitioned, 2), held(2), options).await;
    let failure = run.failure.expect("the run fails");
    assert!(failure.is_stall(), "{failure}");
    let server = run.report.server.expect("the server stopped");
    assert!(server.listener_closed);
    assert_port_closed(&server);
}

/// The picture of a blocked run draws what waited for the executor: F1's lane outlined
/// `unread` up to its admission after the gate, a heartbeat lane whose red line says no tick
/// came while every worker was blocked; a queued run's lanes outlined `queued`. The usual
/// run's picture has none of these.
#[test]
fn the_picture_draws_the_wait_and_the_heartbeat() {
    use isolation_lab::lab::render::picture;
    use isolation_lab::policy::{Inputs, ModeChoice};

    let draw = |inputs: Inputs, executor: Executor| {
        let options = Options::on(Front::Async).with_executor(executor);
        let run = isolation_lab::lab::run_with(inputs, options);
        let report = isolation_lab::lab::block_on(run).expect("a runtime");
        assert!(report.matches_model, "{:?}", report.failure);
        picture::render(&report)
    };
    let count = |svg: &str, element: &str, class: &str, words: Option<&str>| {
        let document = roxmltree::Document::parse(svg).expect("well-formed SVG");
        let found = document.descendants().filter(|n| {
            n.has_tag_name(element)
                && n.attribute("class") == Some(class)
                && words.is_none_or(|w| n.attribute("data-words") == Some(w))
        });
        found.count()
    };
    let block = executor(WorkStyle::Block, Workers::CurrentThread, 512);
    let blocked = draw(Inputs::default(), block);
    // S2 and F1 in each of the two panels.
    assert_eq!(count(&blocked, "g", "waiting", Some("unread")), 4);
    assert_eq!(count(&blocked, "g", "heartbeat", None), 2);
    assert_eq!(count(&blocked, "line", "still", None), 2);
    let queued = executor(WorkStyle::SpawnBlocking, Workers::CurrentThread, 1);
    let inputs = Inputs {
        mode: ModeChoice::Partitioned,
        slots: Slots::new(4).expect("allowed"),
        held: held(3),
    };
    let svg = draw(inputs, queued);
    assert_eq!(count(&svg, "g", "waiting", Some("queued")), 2);
    assert_eq!(
        count(&svg, "line", "still", None),
        0,
        "the workers stayed free"
    );
    // The legend tells each mark only where one is drawn.
    let legend = |svg: &str| {
        let document = roxmltree::Document::parse(svg).expect("well-formed SVG");
        let lines = document
            .descendants()
            .filter(|n| n.has_tag_name("text") && n.attribute("class") == Some("executor-legend"));
        let lines: Vec<&str> = lines.filter_map(|n| n.text()).collect();
        lines.join(" ")
    };
    assert!(legend(&svg).contains("queued: admitted"), "{svg}");
    assert!(!legend(&svg).contains("unread:"), "{svg}");
    assert!(!legend(&svg).contains("red:"), "{svg}");
    assert!(legend(&blocked).contains("unread: no worker"), "{blocked}");
    assert!(!legend(&blocked).contains("queued:"), "{blocked}");
    assert!(legend(&blocked).contains("red: no tick came"), "{blocked}");
    let usual = draw(Inputs::default(), Executor::default());
    assert_eq!(count(&usual, "g", "heartbeat", None), 0);
    assert_eq!(count(&usual, "g", "waiting", None), 0);
    assert_eq!(legend(&usual), "");
    // A blocked run that failed after S2 and F1 were seen unread: they are drawn unread to its
    // end, not as never reached, and the lesson's red line is not drawn.
    let saved = include_str!("../fixtures/block-out-of-descriptors.json");
    let failed: isolation_lab::report::Report = serde_json::from_str(saved).expect("a report");
    let svg = picture::render(&failed);
    assert_eq!(count(&svg, "g", "waiting", Some("unread")), 2);
    assert_eq!(count(&svg, "line", "still", None), 0);
    assert!(!legend(&svg).contains("red:"), "{svg}");
    let document = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    for request in ["S2", "F1"] {
        let lane = document.descendants().find(|n| {
            n.attribute("class") == Some("lane") && n.attribute("data-request") == Some(request)
        });
        let lane = lane.expect("a lane");
        let words = lane.descendants().filter_map(|n| n.text());
        assert!(words.clone().all(|w| !w.contains("no event")), "{request}");
    }
}
