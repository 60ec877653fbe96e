//! The recorded reports of the command line's every input under `tests/fixtures/`
//! (`slots-S-held-H.json`, twelve), which the rendering tests draw, still match what the lab
//! does today: each is read back as a report, and a real run of the same inputs
//! has the same fields, the same outcome per policy and the same ledger, event for event (the
//! order among slow callers answered after release is not fixed, so events are compared as a
//! multiset). `ISOLATION_LAB_RECORD=1 cargo test --test lab -- fixtures` records them again.

use std::collections::BTreeSet;
use std::path::PathBuf;

use isolation_lab::outcome::Outcome;
use isolation_lab::policy::{Held, Inputs, ModeChoice, Slots};
use isolation_lab::report::Report;
use serde_json::Value;

fn path(slots: Slots, held: Held) -> PathBuf {
    let name = format!("slots-{slots}-held-{held}.json");
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Every key path in a JSON value, arrays by position: the shape of a report.
fn shape(value: &Value, at: String, into: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => map.iter().for_each(|(key, value)| {
            shape(value, format!("{at}/{key}"), into);
        }),
        Value::Array(items) => items.iter().enumerate().for_each(|(i, value)| {
            shape(value, format!("{at}/{i}"), into);
        }),
        _ => {
            into.insert(at);
        }
    }
}

fn ledger(report: &Report) -> Vec<Vec<String>> {
    let policies = report.policies.iter().map(|policy| {
        let events = policy.work_events.iter();
        let mut events: Vec<String> = events
            .map(|e| format!("{:?} {:?} {:?}", e.request, e.pool, e.event))
            .collect();
        events.sort();
        events
    });
    policies.collect()
}

#[test]
fn recorded_reports_still_match_real_runs() {
    let record = std::env::var_os("ISOLATION_LAB_RECORD").is_some();
    for slots in Slots::all() {
        for held in Held::all() {
            let inputs = Inputs {
                mode: ModeChoice::Both,
                slots,
                held,
            };
            let real =
                isolation_lab::lab::block_on(isolation_lab::lab::run(inputs)).expect("a runtime");
            assert!(real.matches_model, "{inputs:?}: {:?}", real.failure);
            let json = serde_json::to_string_pretty(&real).expect("a report serializes");
            let path = path(slots, held);
            if record {
                std::fs::write(&path, json + "\n").expect("the fixture is written");
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("the fixture is recorded");
            let recorded: Report = serde_json::from_str(&text).expect("a fixture reads back");
            let context = path.display();
            let outcomes =
                |r: &Report| -> Vec<Outcome> { r.policies.iter().map(Outcome::observed).collect() };
            assert_eq!(outcomes(&recorded), outcomes(&real), "{context}: outcomes");
            assert_eq!(ledger(&recorded), ledger(&real), "{context}: ledger");
            let (mut was, mut is) = (BTreeSet::new(), BTreeSet::new());
            let recorded_value: Value = serde_json::from_str(&text).expect("JSON");
            let real_value = serde_json::to_value(&real).expect("JSON");
            shape(&recorded_value, String::new(), &mut was);
            shape(&real_value, String::new(), &mut is);
            let gone: Vec<_> = was.difference(&is).collect();
            let new: Vec<_> = is.difference(&was).collect();
            assert!(
                gone.is_empty() && new.is_empty(),
                "{context}: fields no longer written {gone:?}, fields not recorded {new:?}; \
                 record again with ISOLATION_LAB_RECORD=1"
            );
        }
    }
}
