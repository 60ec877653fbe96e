//! Why a policy run failed: the step it was on, the request, the cause. The report prints it as
//! one line; tests match on it.

use std::fmt;
use std::time::Duration;

use crate::label::Label;

/// Why a policy run failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The step of the sequence the run was on.
    pub step: Step,
    /// The request that step was about, if one.
    pub request: Option<Label>,
    /// What went wrong.
    pub cause: Cause,
    /// Further failures with the same root, found while closing (a panicking handler breaks
    /// its caller's request and its connection task), in order; each says its own cause only.
    pub then: Vec<Failure>,
}

/// The steps of one policy run, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Drawing the run token, building the client, binding the listener.
    Start,
    /// Sending a slow request and waiting for its admission decision.
    Slow,
    /// Sending requests without the run's token (an injected intrusion).
    Intrude,
    /// Sending F1 while the slow work is held.
    Fast,
    /// Opening the gate and collecting the held callers' responses.
    Release,
    /// Sending a probe after release.
    Probe,
    /// Joining every caller and stopping the server.
    Close,
}

/// What went wrong in a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The run could not start.
    Setup(String),
    /// A wait ran out: `waiting_for` did not happen within `limit`.
    Stalled {
        /// What the step was waiting for, in words.
        waiting_for: String,
        /// The safety timeout that ran out.
        limit: Duration,
    },
    /// The control observer's stream ended before the decision it waited for.
    ObserverStopped,
    /// A caller was answered while the sequence says it must still wait.
    AnsweredEarly {
        /// The caller that was answered.
        request: Label,
        /// The status it got.
        status: u16,
        /// What the step was waiting for, in words.
        while_waiting_for: String,
    },
    /// An injected fault: a held request's caller disconnected.
    CallerLeft(Left),
    /// A request without the run's token got something other than 403.
    ForeignNotRefused(String),
    /// A caller's HTTP exchange or its task failed.
    Caller(String),
    /// The server failed, or did not stop cleanly.
    Server(String),
    /// The run was closed before its sequence ended (a live session finished early): the
    /// step it would have taken next.
    ClosedEarly(String),
}

/// What the section did when a held request's caller disconnected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// Its handler was cancelled: the work left the section at this `seq`, `finished,
    /// cancelled`, and returned its permit.
    Cancelled(u64),
    /// Nothing noticed within the safety timeout: a thread blocked at the gate cannot.
    NotNoticed(Duration),
    /// The observer's stream ended without the work leaving.
    NeverRecorded,
}

impl Failure {
    /// A failure at `step`, about `request`.
    pub(crate) fn new(step: Step, request: Option<Label>, cause: Cause) -> Self {
        Failure {
            step,
            request,
            cause,
            then: Vec::new(),
        }
    }

    /// This failure, then `also` and the failures after it.
    pub(crate) fn then(mut self, mut also: Failure) -> Self {
        let rest = std::mem::take(&mut also.then);
        for also in std::iter::once(also).chain(rest) {
            // Each cause said once: a front that gave up accepting fails the run when it does,
            // and its stop says the same again, maybe after something else.
            let said = says(&self.cause, &also.cause)
                || self.then.iter().any(|t| says(&t.cause, &also.cause));
            if !said {
                self.then.push(also);
            }
        }
        self
    }

    /// `first`, then `also`, when both failed; whichever did, when one did.
    pub(crate) fn both(first: Option<Failure>, also: Option<Failure>) -> Option<Failure> {
        match (first, also) {
            (Some(first), Some(also)) => Some(first.then(also)),
            (first, also) => first.or(also),
        }
    }

    /// Whether the run stalled: a safety timeout ran out.
    pub fn is_stall(&self) -> bool {
        matches!(self.cause, Cause::Stalled { .. })
    }
}

/// Whether `cause` says `also` already: it is the same, or a server's failure that gives it as
/// its reason ("the front's own runtime stopped serving: starting …", then "starting …").
fn says(cause: &Cause, also: &Cause) -> bool {
    match (cause, also) {
        (Cause::Server(said), Cause::Server(also)) => {
            said == also || said.ends_with(&format!(": {also}"))
        }
        _ => cause == also,
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let request = self
            .request
            .map_or_else(|| "a request".to_owned(), |r| r.to_string());
        match &self.cause {
            Cause::Setup(why) | Cause::Caller(why) | Cause::Server(why) => f.write_str(why)?,
            Cause::ForeignNotRefused(why) => f.write_str(why)?,
            Cause::ClosedEarly(next) => {
                write!(f, "the run was closed before its next step: {next}")?
            }
            Cause::Stalled { waiting_for, limit } => {
                write!(f, "stalled: {waiting_for} within {} s", limit.as_secs_f64())?;
            }
            Cause::ObserverStopped => {
                write!(f, "the control observer stopped before deciding {request}")?;
            }
            Cause::AnsweredEarly {
                request,
                status,
                while_waiting_for,
            } => write!(f, "{request} received HTTP {status} {while_waiting_for}")?,
            Cause::CallerLeft(Left::Cancelled(seq)) => write!(
                f,
                "{request}'s caller disconnected while its work was held; the work left the \
                 section (work event {seq}, finished, cancelled) and returned its permit"
            )?,
            Cause::CallerLeft(Left::NotNoticed(limit)) => write!(
                f,
                "{request}'s caller disconnected while its work was held, and its handler did \
                 not notice within {} s (a thread blocked at the gate cannot); the work leaves \
                 when the gate opens",
                limit.as_secs_f64()
            )?,
            Cause::CallerLeft(Left::NeverRecorded) => write!(
                f,
                "{request}'s caller disconnected, but the section never recorded it leaving"
            )?,
        }
        for then in &self.then {
            write!(f, "; then {then}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

/// What could not be set up for a run, in the words its failure begins with (`record` reads
/// them back: a run that could not start serves nothing).
pub(crate) mod setup {
    /// The run's token, from the OS's randomness.
    pub(crate) const TOKEN: &str = "cannot draw a random run token from the OS";
    /// The front's own runtime, with its listener.
    pub(crate) const RUNTIME: &str = "starting the front's own runtime on 127.0.0.1:0";
    /// The front's listener.
    pub(crate) const BINDING: &str = "binding 127.0.0.1:0";
}

/// What a step of the sequence waits for, in the words its stall names it by (`record` reads a
/// stall back to its step with them).
pub(crate) mod waited {
    use crate::label::Label;

    /// A slow request's step: its admission decision.
    pub(crate) fn decision(request: Label) -> String {
        format!("no admission decision for {request}")
    }

    /// A slow request's step, once admitted (its work not queued for a thread): the work held
    /// at the gate.
    pub(crate) fn gate(request: Label) -> String {
        format!("{request} was admitted but not held at the gate")
    }

    /// A slow request's step, once refused: its caller's 503.
    pub(crate) fn refusal(request: Label) -> String {
        format!("{request} was refused but its caller got no response")
    }

    /// A step whose request the blocked front cannot read: the request seen waiting unread.
    pub(crate) fn unread(request: Label) -> String {
        format!("{request} to be seen waiting unread for the blocked front")
    }

    /// F1's step, or a probe's: its response.
    pub(crate) fn response(request: Label) -> String {
        format!("{request} got no response")
    }

    /// F1's step, in a test's run that first sends requests without the run's token: each one's
    /// 403.
    pub(crate) const FOREIGN: &str = "a foreign request got no response";

    /// The release: every held caller's response.
    pub(crate) const RELEASED: &str = "a released slow caller got no response";

    /// Before S1, on a front with a runtime of its own: the first tick of its heartbeat.
    pub(crate) const HEARTBEAT: &str = "the front's own runtime never ran its heartbeat";

    /// Why that wait ended without a tick.
    pub(crate) const HEARTBEAT_STOPPED: &str =
        "the front's own runtime stopped before it ran its heartbeat";

    /// Why a later wait ended: the front's runtime stopped while the sequence went on.
    pub(crate) const RUNTIME_STOPPED: &str = "the front's own runtime stopped serving";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_one_line_and_says_what_stalled() {
        let stalled = Failure::new(
            Step::Slow,
            Some(Label::Slow(1)),
            Cause::Stalled {
                waiting_for: "no admission decision for S1".into(),
                limit: Duration::from_secs(5),
            },
        );
        let both = stalled.then(Failure::new(
            Step::Close,
            None,
            Cause::Server("a connection task panicked".into()),
        ));
        assert_eq!(
            both.to_string(),
            "stalled: no admission decision for S1 within 5 s; then a connection task panicked"
        );
        assert!(both.is_stall());
    }

    /// A front that gave up accepting fails the run when it does, and its stop says the same
    /// again: said once, with what else went wrong after it.
    #[test]
    fn the_same_cause_is_said_once() {
        let gave_up = || Cause::Server("the server: accepting connections stayed broken".into());
        let first = Failure::new(Step::Slow, Some(Label::Slow(2)), gave_up());
        let panicked = Failure::new(Step::Close, None, Cause::Caller("a panic".into()));
        // The close says a caller's panic first, then the server's error.
        let at_close = panicked.then(Failure::new(Step::Close, None, gave_up()));
        assert_eq!(
            first.then(at_close).to_string(),
            "the server: accepting connections stayed broken; then a panic"
        );
        // A failure that gives another as its reason has said it too.
        let stopped = "the front's own runtime stopped serving: starting a thread: EAGAIN";
        let stopped = Failure::new(Step::Slow, None, Cause::Server(stopped.into()));
        let reason = Failure::new(
            Step::Close,
            None,
            Cause::Server("starting a thread: EAGAIN".into()),
        );
        assert_eq!(
            stopped.then(reason).to_string(),
            "the front's own runtime stopped serving: starting a thread: EAGAIN"
        );
    }
}
