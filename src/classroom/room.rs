//! The room's requests. A student's `GET /slow` or `/fast` with the room token reaches the
//! classroom's server, which numbers it (`R1`, `R2`, …) and sends it on to the current run's own
//! front with the run's token, through the run's own client: it is admitted, held or refused by
//! the same work section as the sequence's requests, on the same front (with `--server
//! threaded`, a held room request blocks a thread of that front), and its answer goes back to
//! the student. The classroom's handler waits for it, so a student who gives up (Ctrl-C)
//! cancels the request on the async front just as the lab's own callers would.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::journal::Journal;
use crate::admission::section::WorkSection;
use crate::admission::token::RunToken;
use crate::coordinator::client::{Client, Received};
use crate::label::Label;
use crate::policy::{Mode, Route};

/// The header that carries the room token.
pub(crate) const ROOM_HEADER: &str = "lab-room";

/// One request from the room, as the session's report lists it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoomRequest {
    /// `R<n>`, numbered by the classroom across the session.
    pub request: Label,
    /// Where it was sent.
    pub route: Route,
    /// The session's run it reached: its number among the report's `runs`, counted from 1.
    pub run: usize,
    /// The policy of the run it reached.
    pub mode: Mode,
    /// The status the run's front answered; `None` if no answer came (see `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The front's JSON body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// Why there was no answer: the run closed while the request was on its way, or the
    /// student gave up waiting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last work event of the run's ledger when the answer came: order evidence.
    pub after_event: u64,
}

/// Where the room's requests go while a run is open.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) client: Client,
    pub(crate) section: Arc<WorkSection>,
    /// The run's number among the report's `runs`, counted from 1.
    pub(crate) run: usize,
    pub(crate) mode: Mode,
}

/// The room: its token, whether it may send, where to, and what it sent.
#[derive(Debug)]
pub(crate) struct Room {
    token: RunToken,
    /// The most of the room's requests waiting for their answers at once: each holds a
    /// connection, and the classroom keeps the rest of its connections for the instructor's page.
    most_waiting: usize,
    /// The most requests it may send in the session.
    most_sent: u32,
    state: Mutex<State>,
    /// Told when the last request waiting for its answer is listed.
    settled: Notify,
    /// Where each request's answer (or why it has none) is told to the page, as it is listed:
    /// a request whose student gave up is told as well as an answered one.
    journal: Arc<Journal>,
}

#[derive(Debug, Default)]
struct State {
    open: bool,
    target: Option<Target>,
    issued: u32,
    /// Requests sent on and not yet listed.
    waiting: usize,
    requests: Vec<RoomRequest>,
}

/// Why the room's request was not sent on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotSent {
    /// The instructor has not opened the lab to the room.
    NotOpen,
    /// Between runs: none is open to send to.
    NoRun,
    /// As many of the room's requests as it may have are waiting for their answers.
    Full,
    /// The room has sent as many requests as a session keeps: this many.
    Spent(u32),
}

impl Room {
    /// The room of `token`, which may have at most `most_waiting` requests waiting for their
    /// answers at once and send at most `most_sent` in all.
    pub(crate) fn new(
        token: RunToken,
        journal: Arc<Journal>,
        (most_waiting, most_sent): (usize, u32),
    ) -> Self {
        Room {
            token,
            most_waiting,
            most_sent,
            state: Mutex::new(State::default()),
            settled: Notify::new(),
            journal,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Each change under this lock is one assignment or push.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `presented` (a header value) is the room token.
    pub(crate) fn admits(&self, presented: Option<&[u8]>) -> bool {
        self.token.admits(presented)
    }

    /// The commands a student runs, one per route, for the page to show.
    pub(crate) fn commands(&self, base: &str) -> Vec<String> {
        let token = self.token.header_value();
        [Route::Slow, Route::Fast]
            .iter()
            .map(|route| format!("curl -s -H '{ROOM_HEADER}: {token}' {base}{route}"))
            .collect()
    }

    pub(crate) fn is_open(&self) -> bool {
        self.state().open
    }

    pub(crate) fn set_open(&self, open: bool) {
        self.state().open = open;
    }

    /// Points the room at a run's front, or at none (between runs, or while a run closes).
    pub(crate) fn aim(&self, target: Option<Target>) {
        self.state().target = target;
    }

    /// Numbers the room's next request to `route` and says where it goes, if the room may send.
    pub(crate) fn admit(&self, route: Route) -> Result<(Label, Target), NotSent> {
        let mut state = self.state();
        if !state.open {
            return Err(NotSent::NotOpen);
        }
        let target = state.target.clone().ok_or(NotSent::NoRun)?;
        if state.issued >= self.most_sent {
            return Err(NotSent::Spent(self.most_sent));
        }
        if state.waiting >= self.most_waiting {
            return Err(NotSent::Full);
        }
        state.waiting += 1;
        state.issued += 1;
        Ok((Label::Room(state.issued, route), target))
    }

    /// Sends `request` on to the run's front and waits for its answer (held work waits for a
    /// gate). The record is kept for the report and returned for the journal.
    pub(crate) async fn send(&self, request: Label, target: Target) -> RoomRequest {
        let call = target.client.call(request);
        // A student who gives up drops this future: the request is listed all the same, since
        // its work may be in the run's ledger.
        let unanswered = Unanswered {
            room: self,
            request,
            target: Some(target),
        };
        let called = call.await.map_err(|why| format!("{why:#}"));
        unanswered.answered(called)
    }

    /// Lists `request`, sent to `target`, with its answer or why none came.
    fn list(
        &self,
        request: Label,
        target: &Target,
        called: Result<Received, String>,
    ) -> RoomRequest {
        let (status, body, error, after_event) = match called {
            Ok(reply) => (
                Some(reply.status),
                Some(reply.body),
                None,
                reply.after_event,
            ),
            Err(why) => (None, None, Some(why), target.section.last_seq()),
        };
        let record = RoomRequest {
            request,
            route: request.route(),
            run: target.run,
            mode: target.mode,
            status,
            body,
            error,
            after_event,
        };
        // Told to the page before it stops waiting: once none waits, the page has heard all.
        self.journal.push(&message(&record));
        let mut state = self.state();
        state.waiting = state.waiting.saturating_sub(1);
        state.requests.push(record.clone());
        let settled = state.waiting == 0;
        drop(state);
        if settled {
            self.settled.notify_waiters();
        }
        record
    }

    /// Once no request of the room's is waiting for its answer: each sent on has been listed,
    /// and told to the page.
    pub(crate) async fn settled(&self) {
        crate::server::until(&self.settled, || self.state().waiting == 0).await;
    }

    /// Every request the room sent, in the order their answers came.
    pub(crate) fn requests(&self) -> Vec<RoomRequest> {
        self.state().requests.clone()
    }
}

/// Why a room request is listed without an answer when its student gave up before it came.
pub(crate) const GAVE_UP: &str = "the student gave up before the answer came";

/// A room request on its way: listed, with no answer, if it is dropped before one comes.
struct Unanswered<'a> {
    room: &'a Room,
    request: Label,
    /// Until it is listed.
    target: Option<Target>,
}

impl Unanswered<'_> {
    fn answered(mut self, called: Result<Received, String>) -> RoomRequest {
        let target = self.target.take().expect("listed once");
        self.room.list(self.request, &target, called)
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(target) = self.target.take() {
            let why = GAVE_UP.to_owned();
            self.room.list(self.request, &target, Err(why));
        }
    }
}

/// A room request's answer as the journal tells the page.
pub(crate) fn message(record: &RoomRequest) -> Value {
    json!({
        "kind": "response",
        "room": true,
        "request": record.request,
        "route": record.route,
        "status": record.status,
        "body": record.body,
        "error": record.error,
        "after_event": record.after_event,
    })
}

impl NotSent {
    /// What the student is told.
    pub(crate) fn words(self) -> String {
        match self {
            NotSent::NotOpen => "the instructor has not opened the lab to the room yet: wait for \
                                 the command on the screen"
                .into(),
            NotSent::NoRun => "no run is open right now: wait for the next one".into(),
            NotSent::Full => "the room has as many requests waiting as the classroom keeps room \
                              for: try again once some are answered"
                .into(),
            NotSent::Spent(most) => format!(
                "the room has sent the {most} requests a session keeps for its report: a new \
                 session takes more"
            ),
        }
    }
}
