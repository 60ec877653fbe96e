//! Where a test may step into a run. The sequence and the fronts call a run's [`Hooks`] at a
//! few fixed points (`hold` and `replicas` have their own, beside their runs:
//! `hold::HoldHooks`, `replicas::ReplicasHooks`); the lab's own runs pass [`NoHooks`], whose
//! every answer is "carry on". What a test breaks is written with the tests; the run only asks.

use std::fmt::Debug;
use std::net::SocketAddr;

use crate::label::Label;

/// The points where a run lets a test in. Every method's default leaves the run as it is.
pub trait Hooks: Debug + Send + Sync {
    /// Called inside the work section with `request`'s permit held, before its work runs; a
    /// test may panic here, and the section records the work leaving as cancelled.
    fn inside_work(&self, _request: Label) {}

    /// Whether the sequence's opening of the slow gate opens it.
    fn gate_opens(&self) -> bool {
        true
    }

    /// Whether the section's events reach the control observer.
    fn observer_hears(&self) -> bool {
        true
    }

    /// Whether `request`'s caller drops its connection once its work is held at the gate.
    fn caller_leaves(&self, _request: Label) -> bool {
        false
    }

    /// How many requests without the run's token the sequence sends while slow work is held.
    fn foreign_requests(&self) -> usize {
        0
    }

    /// Called while slow work is held, before those requests are sent, with the server's
    /// address: a test may connect as another process would. The server accepts connections
    /// in the order they came, so one made here has been accepted once a request sent after
    /// it is answered: on the async front, its handler is counted then; the threaded front
    /// counts it as its thread starts, which may be later.
    fn before_foreign_requests(&self, _server: SocketAddr) {}
}

/// The command line's hooks: none.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoHooks;

impl Hooks for NoHooks {}
