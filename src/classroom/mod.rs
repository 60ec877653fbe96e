//! Classroom mode: a page that steps through a real run of the lab, live, and lets the room send
//! requests of its own. Nothing on the page is authored: it draws the section's own events, sent
//! as Server-Sent Events as the ledger records them, and each "Next" is one step of the same
//! [`Run`](crate::coordinator::Run) the command line drives to its end. When the session ends
//! (Ctrl-C, or Finish on the page) every run is closed and checked against the model as the
//! command line checks it, and the report is written: the class ends with its evidence. The
//! page and the terminal say the same verdict ([`ClassroomReport::verdict`]).
//!
//! The rooms, as every instrument has them (its evidence, model and report are the lab's own,
//! one [`Report`] per run, gathered here in [`ClassroomReport`]):
//!
//! - [`mod@run`]: how it runs: the driver that owns the runs and performs the page's orders.
//! - [`render`]: the page itself.
//!
//! And what only a classroom has:
//!
//! - [`gates`]: the room's own gates, which the run's front is given for the room's requests.
//! - [`journal`]: what the page is told, in ledger order, and its event streams.
//! - [`room`]: the room's requests, numbered and sent on to the run's own front.
//! - [`http`]: the classroom's server, its screening and its tokens.

pub(crate) mod gates;
pub(crate) mod http;
pub(crate) mod journal;
pub(crate) mod render;
pub(crate) mod room;
pub(crate) mod run;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::FutureExt;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use self::http::App;
use self::journal::{Journal, STREAM_BUFFER};
use self::room::{Room, RoomRequest};
use self::run::{Action, Driver, Order, RoomGateRecord};
use crate::admission::token::RunToken;
use crate::coordinator::Options;
use crate::policy::Inputs;
use crate::report::Report;

/// What a classroom session runs first: the command line's inputs and front. The page can start
/// new runs with other inputs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The first run's inputs, and those the page's New run starts from.
    pub inputs: Inputs,
    /// The front, its executor, the safety timeout (and, in tests only, their hooks) of every
    /// run, New run included.
    pub options: Options,
    /// Show the model's predictions at once, rather than each as its evidence arrives (or the
    /// instructor presses Reveal).
    pub show_predictions: bool,
    /// How long the session's server waits for what a client sends at once; the command line's
    /// are the defaults.
    pub timeouts: Timeouts,
    /// The most requests the room may send in the session ([`ROOM_REQUESTS`] from the command
    /// line): each is kept for the report, so a room that sends on and on cannot make the
    /// instructor's process grow without end. Past it a room request is answered 429.
    pub room_requests: u32,
}

/// The most requests the room may send in a session run from the command line: about 16 MiB
/// of the lab's memory and 8 MB of its report (measured: 1.6 KiB resident and 800 bytes of
/// report each), and a hundred requests for each of a hundred students.
pub const ROOM_REQUESTS: u32 = 10_000;

/// How long the classroom's server waits for what a browser or `curl` sends at once: anything
/// slower is holding a descriptor. Both are 2 s by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// From a connection's opening, or its last answer, until a whole request head has
    /// arrived: a connection idle for longer is closed.
    pub header: Duration,
    /// From a control request's head until its whole body has arrived: 408 after it.
    pub body: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header: http::HEADER_TIMEOUT,
            body: http::BODY_TIMEOUT,
        }
    }
}

/// The two addresses of a session, as the terminal shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Urls {
    /// The instructor's page: `http://127.0.0.1:PORT/#control=TOKEN`. The token after `#` is a
    /// fragment, which a browser never sends; it is this session's only key to its controls.
    pub instructor: String,
    /// The room's view, `http://127.0.0.1:PORT/`: the same page with no controls.
    pub room: String,
}

/// The report of a classroom session: each run, exactly as the command line reports a run of
/// the same inputs, and the room's requests and gates in lists of their own. Its shape is in
/// `docs/design.md` ("The classroom's report").
#[derive(Debug, Serialize)]
pub struct ClassroomReport {
    /// Every run of the session, in order: run `n` on the page is `runs[n - 1]`. A run in which
    /// no step was taken is left out.
    pub runs: Vec<Report>,
    /// Every request from the room, in the order their answers came. They are not part of any
    /// run's model check; their work events are in that run's ledger, labelled `R<n>`.
    pub room_requests: Vec<RoomRequest>,
    /// The gates the instructor closed for the room after a run's own gate had opened.
    pub room_gates: Vec<RoomGateRecord>,
    /// Event streams dropped because their client stopped reading (each may have reconnected).
    pub event_streams_dropped: u64,
    /// Connections closed because the server's cap of open connections was reached: the oldest
    /// idle one to make room, else the oldest event stream, else the new one.
    pub connections_refused: u64,
    /// At least one run was made, every run matched the model, and the session closed
    /// cleanly: [`ClassroomReport::verdict`] is `None`.
    pub matches_model: bool,
    /// Why the session did not close cleanly, in one line; absent when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl ClassroomReport {
    /// Why the session does not match the model, in the one line the terminal prints and the
    /// page shows at the end; `None` when it does.
    pub fn verdict(&self) -> Option<String> {
        verdict(&self.runs, self.failure.as_deref())
    }
}

/// The session's verdict from its runs and the failure of its own close, if any: the first
/// reason found, or `None` when at least one run was made and every run matched.
fn verdict(runs: &[Report], failure: Option<&str>) -> Option<String> {
    if let Some(failure) = failure {
        return Some(failure.to_owned());
    }
    if runs.is_empty() {
        return Some("no run was made: the session ended before its first step".into());
    }
    let differs = runs.iter().find(|r| !r.matches_model)?;
    Some((differs.failure.clone()).unwrap_or_else(|| "a run differed from the policy model".into()))
}

/// Connections the server keeps open at most: enough for a room's browsers and requests, and
/// within the descriptors the process may open (see [`connection_cap`]).
const MOST_CONNECTIONS: usize = 1024;
/// Descriptors kept back from the connection cap for everything else the process opens.
const RESERVED_DESCRIPTORS: u64 = 64;

/// The connection cap under a soft descriptor limit of `soft` (`None`: unlimited). A held room
/// request costs three descriptors here: its connection to the classroom, and the run's
/// client's connection to the run's front and that front's end of it.
fn connection_cap(soft: Option<u64>) -> usize {
    let usable = soft.map_or(u64::MAX, |soft| {
        soft.saturating_sub(RESERVED_DESCRIPTORS) / 3
    });
    usize::try_from(usable).map_or(MOST_CONNECTIONS, |n| n.clamp(8, MOST_CONNECTIONS))
}

/// The most connections a run's front keeps open beside a classroom server of `cap`: the room's
/// requests waiting for their answers (at most half the cap, `Room::admit`) and the run's own
/// callers (at most seven: four held, F1 and two probes), with room to spare for strangers'
/// connections, which make room for new ones beyond it. A run's port is open for minutes, and
/// any local process may connect to it: without this, one that opened enough connections would
/// take every descriptor the session has, and end it. The front's end of each connection is
/// one descriptor, and the run's client's end of the room's and the run's another: within the
/// three a held room request is budgeted, and the 64 kept back.
fn front_cap(cap: usize) -> usize {
    cap / 2 + 16
}

/// Raises the soft descriptor limit to the hard one, as `hold` does, and returns the cap on
/// the server's connections under the limit now in force.
fn descriptors() -> usize {
    // A limit that cannot be read or raised leaves the cap of the common default, 1024.
    let soft = crate::limits::raise_nofile().map_or(Some(1024), |limit| limit.soft);
    connection_cap(soft)
}

/// The listener: `127.0.0.1:0`, with a listen backlog as deep as a burst of a room's
/// connections (std's default is 128).
fn bind() -> std::io::Result<tokio::net::TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((Ipv4Addr::LOCALHOST, 0).into())?;
    socket.listen(1024)
}

/// Serves a classroom session on `127.0.0.1:0`: tells `announce` the page's two addresses, and
/// serves until `leave` resolves or the page presses Finish. The page opens at the first run's
/// first step. Then it stops accepting, closes the open run (its gates open, so held requests
/// are answered), ends the event streams with the session's verdict, joins every connection,
/// the driver and the journal's pump, and returns the report. `Err` only if the session could
/// not start.
pub async fn serve(
    config: Config,
    leave: impl Future<Output = ()>,
    announce: impl FnOnce(&Urls) -> std::io::Result<()>,
) -> anyhow::Result<ClassroomReport> {
    let token = || RunToken::generate().context("cannot draw a random token");
    let (control, room_token) = (token()?, token()?);
    let cap = descriptors();
    let listener = bind().context("binding 127.0.0.1:0")?;
    let address: SocketAddr = listener.local_addr().context("reading the bound address")?;
    let base = format!("http://{address}");
    let urls = Urls {
        instructor: format!("{base}/#control={}", control.header_value()),
        room: format!("{base}/"),
    };
    let journal = Arc::new(Journal::new(STREAM_BUFFER));
    // Half the connections at most for the room's requests waiting for answers: the rest
    // stay for the instructor's page and controls.
    let most = (cap / 2, config.room_requests);
    let room = Arc::new(Room::new(room_token, journal.clone(), most));
    let (orders, ordered) = mpsc::channel(16);
    let app = Arc::new(App::new(
        address,
        control,
        room.clone(),
        journal.clone(),
        orders.clone(),
        config.timeouts,
    ));
    let (limit, first) = (config.options.safety_timeout, config.inputs);
    let shared = (journal.clone(), room.clone());
    let mut driver = Driver::new(config, shared, base.clone(), front_cap(cap));
    driver.start(first).await;
    let driver = tokio::spawn(driver.drive(ordered));
    let pump = tokio::spawn({
        let journal = journal.clone();
        async move { journal.pump().await }
    });
    let (stop_accepting, stopped) = oneshot::channel::<()>();
    let (drain, drained) = oneshot::channel::<()>();
    // A dropped sender also means stop.
    let signals = (stopped.map(drop), drained.map(drop));
    let server = tokio::spawn(http::serve(listener, app.clone(), signals, limit, cap));

    let mut failure = None;
    match announce(&urls) {
        Ok(()) => {
            tokio::select! {
                () = leave => {}
                () = app.finish.notified() => {}
            }
        }
        Err(e) => failure = Some(format!("cannot announce the page's URL: {e}")),
    }

    // Stop accepting, but keep serving: a room request held at a gate is answered when the
    // driver closes its run.
    let _ = stop_accepting.send(());
    let (reply, _) = oneshot::channel();
    // A driver that is gone has closed what it held already.
    let _ = orders
        .send(Order {
            command: Action::Leave,
            reply,
        })
        .await;
    drop(orders);
    let driven = driver.await;
    room.aim(None);
    // The room's requests still on their way are answered, or fail, now that the runs are
    // closed: the page is told each before it is told the end, as the report lists it.
    let settled = crate::child::awake_within(limit, room.settled()).await;
    let unsettled = settled.is_none().then(|| {
        format!(
            "the room's requests were not all answered within {} of the close",
            http::in_words(limit)
        )
    });
    let broken = app.broken.lock().map_or(None, |b| b.clone());
    let mut failure = failure.or(broken).or(unsettled);
    let (told, failed) = match &driven {
        Ok(driven) => {
            let cut_short = driven.runs.iter().any(Report::stopped_short);
            let failed = failure.is_some() || driven.runs.is_empty() || cut_short;
            (verdict(&driven.runs, failure.as_deref()), failed)
        }
        Err(e) => (Some(format!("the classroom's driver failed: {e}")), true),
    };
    // The page is told the verdict the terminal will print, unless closing the connections
    // that follow fails too; the report then says so.
    journal.end(told.as_deref(), failed);
    let _ = drain.send(());
    let served = server.await;
    let pumped = pump.await;

    let driven = driven.context("the classroom's driver failed")?;
    let served = served.unwrap_or_else(|e| http::Served {
        refused: 0,
        error: Some(format!("the classroom's server task failed: {e}")),
    });
    if let Some(error) = served.error {
        failure.get_or_insert(error);
    }
    if let Err(e) = pumped {
        failure.get_or_insert(format!("the journal's pump failed: {e}"));
    }
    Ok(ClassroomReport {
        matches_model: verdict(&driven.runs, failure.as_deref()).is_none(),
        runs: driven.runs,
        room_requests: room.requests(),
        room_gates: driven.room_gates,
        event_streams_dropped: journal.dropped(),
        connections_refused: served.refused,
        failure,
    })
}

/// [`serve`] until the process is interrupted (SIGINT, Ctrl-C), terminated (SIGTERM), hung up
/// on (SIGHUP), or sent another signal that ends a program (SIGQUIT, SIGUSR1, ...: the ones
/// `interrupts` catches). The handlers are in place before the URLs are announced, so a signal sent as
/// soon as they are read ends the session rather than the process; the previous handlers are
/// back once it returns.
pub async fn run(
    config: Config,
    announce: impl FnOnce(&Urls) -> std::io::Result<()>,
) -> anyhow::Result<ClassroomReport> {
    let interrupts = crate::interrupts::Interrupts::catch().context("cannot catch Ctrl-C")?;
    let caught = async {
        interrupts.caught().await;
    };
    let report = serve(config, caught, announce).await;
    drop(interrupts);
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three descriptors per held room request, 64 kept back, never fewer than 8 connections
    /// nor more than 1024.
    #[test]
    fn the_connection_cap_follows_the_descriptor_limit() {
        assert_eq!(connection_cap(Some(1024)), 320);
        assert_eq!(connection_cap(Some(20_000)), 1024);
        assert_eq!(connection_cap(None), 1024);
        assert_eq!(connection_cap(Some(10)), 8);
    }
}
