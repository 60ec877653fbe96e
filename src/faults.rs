//! Faults and intrusions that tests inject through the library, to show that every unhappy path
//! ends the run cleanly: `failure` set, everything closed and joined, every permit back. The
//! command line never sets any of them.

use crate::label::Label;

/// What to break in one policy run. The default breaks nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// The gate ignores every opening, so held work can never leave on its own.
    pub gate_stuck: bool,
    /// The work section records its events but never tells the control observer.
    pub observer_silent: bool,
    /// This slow request's caller drops its connection while its work is held at the gate.
    pub caller_disconnects: Option<Label>,
    /// The handler of this request panics inside the work section, holding its permit.
    pub handler_panics: Option<Label>,
    /// Requests without the run's token, sent to the server while slow work is held.
    pub foreign_requests: usize,
}
