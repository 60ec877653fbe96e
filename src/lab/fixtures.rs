//! Reports recorded from real runs, for the rendering tests: every allowed input, both policies,
//! on the async front. `tests/lab/fixtures.rs` checks they still match what the lab does today, and
//! rewrites them when asked to.

use crate::report::Report;

/// The recorded reports, `--slots 2 --held 1` first, then by slots, then by held.
const RECORDED: [&str; 12] = [
    include_str!("../../tests/fixtures/slots-2-held-1.json"),
    include_str!("../../tests/fixtures/slots-2-held-2.json"),
    include_str!("../../tests/fixtures/slots-2-held-3.json"),
    include_str!("../../tests/fixtures/slots-2-held-4.json"),
    include_str!("../../tests/fixtures/slots-3-held-1.json"),
    include_str!("../../tests/fixtures/slots-3-held-2.json"),
    include_str!("../../tests/fixtures/slots-3-held-3.json"),
    include_str!("../../tests/fixtures/slots-3-held-4.json"),
    include_str!("../../tests/fixtures/slots-4-held-1.json"),
    include_str!("../../tests/fixtures/slots-4-held-2.json"),
    include_str!("../../tests/fixtures/slots-4-held-3.json"),
    include_str!("../../tests/fixtures/slots-4-held-4.json"),
];

/// Every recorded report.
pub(crate) fn reports() -> Vec<Report> {
    RECORDED
        .iter()
        .map(|json| serde_json::from_str(json).expect("a fixture is a report the lab wrote"))
        .collect()
}
