//! The workshop's cases, each asserting the outcomes the workshop names, through real HTTP on
//! loopback.

use crate::common;

use common::{Case, assert_matches_the_model, assert_structure};
use isolation_lab::label::Label::{self, F1, Slow as S};
use isolation_lab::policy::{Inputs, Mode, ModeChoice};

fn f1_held_by(report: &isolation_lab::report::PolicyReport) -> Option<Vec<Label>> {
    let f1 = report.admissions.iter().find(|a| a.request == F1)?;
    f1.held_by.clone()
}

/// Default run: shared admits S1 and S2 and refuses F1 because both permits are held;
/// partitioned admits S1, refuses S2 although the fast permit is idle, and admits F1.
#[tokio::test]
async fn default_run_shows_both_policies() {
    let report = isolation_lab::lab::run(Inputs::default()).await;
    assert!(report.matches_model, "{:?}", report.failure);
    assert_eq!(report.failure, None);
    let [shared, partitioned] = &report.policies[..] else {
        panic!(
            "both runs shared then partitioned, got {} policies",
            report.policies.len()
        );
    };
    assert_eq!(
        (shared.mode, partitioned.mode),
        (Mode::Shared, Mode::Partitioned)
    );

    let held = shared
        .observed
        .observer_before_fast
        .as_ref()
        .map(|s| &s.held_at_gate);
    assert_eq!(held, Some(&vec![S(1), S(2)]));
    assert_eq!(
        shared
            .observed
            .fast_response_before_release
            .as_ref()
            .map(|r| r.status),
        Some(503)
    );
    assert_eq!(
        f1_held_by(shared),
        Some(vec![S(1), S(2)]),
        "F1 refused by the held work"
    );
    let f1 = shared
        .observed
        .fast_response_before_release
        .as_ref()
        .expect("F1 answered");
    assert_eq!(f1.body["error"], "work_capacity_full");
    assert_eq!(f1.body["pool"], "shared");
    assert_eq!(f1.body["request"], "F1");

    let before = partitioned
        .observed
        .observer_before_fast
        .as_ref()
        .expect("snapshot");
    assert_eq!(before.held_at_gate, [S(1)]);
    assert_eq!(before.refused, [S(2)]);
    assert_eq!(
        before.active_work.values().copied().collect::<Vec<_>>(),
        [1, 0],
        "fast idle"
    );
    let s2 = partitioned
        .admissions
        .iter()
        .find(|a| a.request == S(2))
        .expect("S2 decided");
    assert_eq!(
        s2.held_by,
        Some(vec![S(1)]),
        "S2 refused by the slow pool, not the fast one"
    );
    let f1 = partitioned
        .observed
        .fast_response_before_release
        .as_ref()
        .expect("F1 answered");
    assert_eq!((f1.status, &f1.body["pool"]), (200, &"fast".into()));

    for (report, mode) in [(shared, Mode::Shared), (partitioned, Mode::Partitioned)] {
        let case = Case::new(mode, 2, 2);
        assert_matches_the_model(case, report);
        assert_structure(case, report);
    }
}

/// `--mode shared --slots 3`: S1 and S2 are still held, and F1 enters the third permit.
#[tokio::test]
async fn a_third_shared_permit_lets_f1_in() {
    let case = Case::new(Mode::Shared, 3, 2);
    let report = case.run().await;
    let before = report
        .observed
        .observer_before_fast
        .as_ref()
        .expect("snapshot");
    assert_eq!(before.held_at_gate, [S(1), S(2)]);
    let f1 = report
        .admissions
        .iter()
        .find(|a| a.request == F1)
        .expect("F1 decided");
    assert_eq!(f1.active_after, 3, "F1 took the third permit");
    let f1 = report.observed.fast_response_before_release.as_ref();
    assert_eq!(f1.map(|r| r.status), Some(200));
    assert_matches_the_model(case, &report);
    assert_structure(case, &report);
}

/// `--held 1`: with one held slow request, F1 is admitted under both policies.
#[tokio::test]
async fn one_held_request_admits_f1_under_both() {
    let inputs = Inputs {
        held: "1".parse().expect("1 is allowed"),
        ..Inputs::default()
    };
    let report = isolation_lab::lab::run(inputs).await;
    assert!(report.matches_model);
    assert_eq!(report.policies.len(), 2);
    for policy in &report.policies {
        let case = Case::new(policy.mode, 2, 1);
        let f1 = policy
            .observed
            .fast_response_before_release
            .as_ref()
            .map(|r| r.status);
        assert_eq!(f1, Some(200), "{:?}", policy.mode);
        assert_matches_the_model(case, policy);
        assert_structure(case, policy);
    }
}

/// `--held 4`: shared admits 2 and refuses 2; partitioned admits 1, refuses 3 and keeps the
/// fast permit for F1.
#[tokio::test]
async fn four_held_requests_explain_useful_and_refused_work() {
    let inputs = Inputs {
        mode: ModeChoice::Both,
        held: "4".parse().expect("4 is allowed"),
        ..Inputs::default()
    };
    let report = isolation_lab::lab::run(inputs).await;
    assert!(report.matches_model);
    let [shared, partitioned] = &report.policies[..] else {
        panic!("two policies");
    };
    let outcome = |p: &isolation_lab::report::PolicyReport| {
        let s = p.observed.observer_before_fast.clone().expect("snapshot");
        let f1 = p
            .observed
            .fast_response_before_release
            .as_ref()
            .map(|r| r.status);
        (s.held_at_gate, s.refused, f1)
    };
    assert_eq!(
        outcome(shared),
        (vec![S(1), S(2)], vec![S(3), S(4)], Some(503))
    );
    assert_eq!(
        outcome(partitioned),
        (vec![S(1)], vec![S(2), S(3), S(4)], Some(200))
    );
    for policy in [shared, partitioned] {
        let case = Case::new(policy.mode, 2, 4);
        assert_matches_the_model(case, policy);
        assert_structure(case, policy);
    }
}
