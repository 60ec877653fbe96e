//! The sequence steps one at a time, as a live view drives it, and says which step it took;
//! driven to the end it gives the same report as a whole run; closed early it fails, saying
//! which step it never took, and still closes everything.

use crate::common;

use common::{Case, assert_matches_the_model, assert_port_closed};
use isolation_lab::coordinator::{Cause, Options, Planned, Run};
use isolation_lab::label::Label;
use isolation_lab::policy::Mode;

#[tokio::test]
async fn one_step_at_a_time_is_the_whole_sequence() {
    let case = Case::new(Mode::Partitioned, 2, 2);
    let opened = Run::open(case.policy(), case.held(), Options::default());
    let mut run = opened.unwrap_or_else(|early| panic!("the run starts: {:?}", early.failure));
    let mut steps = Vec::new();
    while let Some(step) = run.next_step().await {
        steps.push(step.expect("each step succeeds"));
        // After each step, the observed responses are what that step produced so far.
        let answered: Vec<Label> = run.observed().responses.iter().map(|r| r.request).collect();
        if steps.last() == Some(&Planned::Slow(Label::Slow(2))) {
            assert_eq!(
                answered,
                [Label::Slow(2)],
                "S2's 503 is in before F1 is sent"
            );
        }
    }
    let expected = [
        Planned::Slow(Label::Slow(1)),
        Planned::Slow(Label::Slow(2)),
        Planned::Fast,
        Planned::Release,
        Planned::Probe(Label::SlowAfter),
        Planned::Probe(Label::FastAfter),
    ];
    assert_eq!(steps, expected);
    assert_eq!(run.upcoming(), None);
    let closed = run.close().await;
    assert_eq!(closed.failure, None);
    assert_matches_the_model(case, &closed.report);
}

#[tokio::test]
async fn closing_before_the_end_fails_and_still_closes_everything() {
    let case = Case::new(Mode::Shared, 2, 2);
    let opened = Run::open(case.policy(), case.held(), Options::default());
    let mut run = opened.unwrap_or_else(|early| panic!("the run starts: {:?}", early.failure));
    let first = run.next_step().await.expect("a first step");
    assert_eq!(first.expect("S1 is held"), Planned::Slow(Label::Slow(1)));
    let closed = run.close().await;
    let failure = closed.failure.expect("an unfinished run is a failed run");
    assert!(
        matches!(failure.cause, Cause::ClosedEarly(_)),
        "{failure:?}"
    );
    let report = closed.report;
    assert!(!report.model.matches);
    let server = report.server.expect("the server started and stopped");
    assert!(server.listener_closed && server.connection_tasks_stopped);
    assert_port_closed(&server);
    let end = report.final_state;
    assert_eq!(
        end.active_work.values().sum::<usize>(),
        0,
        "S1 left the section"
    );
}
