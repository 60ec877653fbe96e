//! The room's own gates. Once a run's gate has opened (a latch the sequence opens once and
//! relies on), the instructor may close a fresh gate for the room's slow work, and open it
//! again, as often as they like. The classroom gives the run's front the choice of gate by
//! label ([`Gates`]): the room's requests (`R<n>`) wait at the room's gate while one is in
//! force; everything else at the run's own. Admission only records the `held` and `finished`
//! events, as at any gate.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};

use crate::admission::gate::{Gate, GateState};
use crate::admission::section::WorkSection;
use crate::server::Gates;

/// One generation of the room's gate in a run. Its changes are placed on the ledger's axis, as
/// responses are: `closed_after_event` is the `seq` of the last work event recorded before it
/// closed, so every `held` after that `seq` (and before `opened_after_event`) waited here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoomGate {
    /// 1 for the first room gate of a run, then 2, 3, …
    pub generation: u32,
    /// The last work event before the gate closed.
    pub closed_after_event: u64,
    /// The last work event before it opened; `None` while it is closed.
    pub opened_after_event: Option<u64>,
}

/// Why the room's gate cannot close now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CannotClose {
    /// The run's own gate is still closed: slow work already waits.
    RunGateClosed,
    /// A room gate is closed already.
    AlreadyClosed,
}

/// The room's gates of one run: the generation in force (if any), and the record of every one.
#[derive(Debug, Default)]
pub(crate) struct RoomGates {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    current: Option<Arc<Gate>>,
    record: Vec<RoomGate>,
}

impl RoomGates {
    fn state(&self) -> MutexGuard<'_, State> {
        // Each change under this lock is one assignment or push.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The choice of gate to give the run's front: the room's, for the room's requests while
    /// one is in force.
    pub(crate) fn chooser(self: &Arc<Self>) -> Gates {
        let gates = self.clone();
        Gates::by(move |request| {
            if request.from_room() {
                gates.state().current.clone()
            } else {
                None
            }
        })
    }

    /// Closes a fresh gate for the room's slow work in `section`'s run, once the run's own gate
    /// has opened. Returns the new generation.
    pub(crate) fn close(&self, section: &WorkSection) -> Result<RoomGate, CannotClose> {
        // This lock, then a gate's, then the ledger's: the order the section keeps too.
        let mut state = self.state();
        if section.gate().state() == GateState::Closed {
            return Err(CannotClose::RunGateClosed);
        }
        if (state.current.as_ref()).is_some_and(|g| g.state() == GateState::Closed) {
            return Err(CannotClose::AlreadyClosed);
        }
        let closed = RoomGate {
            generation: state.record.len() as u32 + 1,
            closed_after_event: section.last_seq(),
            opened_after_event: None,
        };
        state.current = Some(Arc::new(Gate::new()));
        state.record.push(closed);
        Ok(closed)
    }

    /// Opens the room's gate if one is closed, releasing the room's held work; `None` if none
    /// was closed.
    pub(crate) fn open(&self, section: &WorkSection) -> Option<RoomGate> {
        let mut state = self.state();
        let gate = state.current.clone()?;
        let mut at = None;
        gate.open(|| at = Some(section.last_seq()));
        let opened_after = at?;
        let last = state.record.last_mut()?;
        last.opened_after_event = Some(opened_after);
        Some(*last)
    }

    /// Every room gate of the run, in order.
    pub(crate) fn record(&self) -> Vec<RoomGate> {
        self.state().record.clone()
    }

    /// The latest, if any.
    pub(crate) fn last(&self) -> Option<RoomGate> {
        self.state().record.last().copied()
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::admission::pools::Permits;
    use crate::admission::section::Verdict;
    use crate::admission::token::RunToken;
    use crate::label::Label;
    use crate::policy::{Mode, Policy, Pool, Route, Slots};

    fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    /// The room's gate closes only after the run's has opened; only the room's slow work waits
    /// at it, and its closing and opening are placed on the ledger's axis.
    #[test]
    fn the_rooms_gate_holds_only_the_rooms_work() {
        let slots = Slots::new(3).expect("3 slots are allowed");
        let token = RunToken::generate().expect("the OS has randomness");
        let policy = Policy {
            mode: Mode::Shared,
            slots,
        };
        let section = WorkSection::new(policy, Permits::Tokio, token);
        let gates = Arc::new(RoomGates::default());
        let chooser = gates.chooser();
        // As every front does: the gate is picked once the request is admitted.
        let perform = |request: Label| {
            let (section, chooser) = (&section, &chooser);
            async move {
                match section.admit(request, Route::Slow).await {
                    Ok(work) => work.run(&chooser.pick(section, request)).await,
                    Err(denied) => denied.into(),
                }
            }
        };
        assert_eq!(gates.close(&section), Err(CannotClose::RunGateClosed));
        section.open_gate();
        let closed = gates.close(&section).expect("the run's gate is open");
        assert_eq!((closed.generation, closed.closed_after_event), (1, 1));
        assert_eq!(gates.close(&section), Err(CannotClose::AlreadyClosed));
        let mut r1 = pin!(perform(Label::Room(1, Route::Slow)));
        assert!(
            poll_once(r1.as_mut()).is_pending(),
            "R1 waits at the room's gate"
        );
        let after = pin!(perform(Label::SlowAfter));
        assert_eq!(poll_once(after), Poll::Ready(Verdict::Done(Pool::Shared)));
        let opened = gates.open(&section).expect("a room gate was closed");
        assert_eq!(opened.opened_after_event, Some(5));
        assert_eq!(poll_once(r1), Poll::Ready(Verdict::Done(Pool::Shared)));
        let second = gates.close(&section).expect("the first one is open");
        assert_eq!(second.generation, 2);
        assert_eq!(gates.record().len(), 2);
        assert_eq!(gates.open(&section).map(|g| g.generation), Some(2));
        assert!(section.audit()[&Pool::Shared].broken().next().is_none());
    }
}
