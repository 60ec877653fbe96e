//! Classroom mode: a page that steps through a real run of the lab, live, and lets the room send
//! requests of its own. Nothing on the page is authored: it draws the section's own events, sent
//! as Server-Sent Events as the ledger records them, and each "Next" is one step of the same
//! [`Run`](crate::coordinator::Run) the command line drives to its end. When the session ends
//! (Ctrl-C, or Finish on the page) every run is closed and checked against the model as the
//! command line checks it, and the report is written: the class ends with its evidence.
//!
//! - [`control`]: the driver that owns the runs and performs the page's orders.
//! - [`journal`]: what the page is told, in ledger order, and its event streams.
//! - [`room`]: the room's requests, numbered and sent on to the run's own front.
//! - [`http`]: the classroom's server, its screening and its tokens.
//! - [`page`]: the page itself.
//! - [`signal`]: Ctrl-C, caught while a session serves.

pub mod control;
pub(crate) mod http;
pub(crate) mod journal;
pub(crate) mod page;
pub mod room;
pub(crate) mod signal;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use self::control::{Command, Driver, Order, RoomGateRecord};
use self::http::App;
use self::journal::{Journal, STREAM_BUFFER};
use self::room::{Room, RoomRequest};
use crate::admission::token::RunToken;
use crate::coordinator::Options;
use crate::policy::Inputs;
use crate::report::Report;

/// What a classroom session runs first: the command line's inputs and front. The page can start
/// new runs with other inputs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The first run's inputs.
    pub inputs: Inputs,
    /// The front, the safety timeout (and, in tests only, their hooks) of every run.
    pub options: Options,
}

/// The report of a classroom session: each run, exactly as the command line reports a run of
/// the same inputs, and the room's requests and gates in lists of their own.
#[derive(Debug, Serialize)]
pub struct ClassroomReport {
    /// Every run of the session, in order. A run in which nothing was sent is left out.
    pub runs: Vec<Report>,
    /// Every request from the room, in the order their answers came. They are not part of any
    /// run's model check; their work events are in that run's ledger, labelled `R<n>`.
    pub room_requests: Vec<RoomRequest>,
    /// The gates the instructor closed for the room after a run's own gate had opened.
    pub room_gates: Vec<RoomGateRecord>,
    /// Event streams dropped because their client stopped reading (each may have reconnected).
    pub event_streams_dropped: u64,
    /// Every run matched the model, and the session closed cleanly.
    pub matches_model: bool,
    /// Why the session did not close cleanly, in one line; absent when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// Serves a classroom session on `127.0.0.1:0`: opens the first run, tells `announce` the page's
/// URL (`http://127.0.0.1:PORT/`), and serves until `leave` resolves or the page presses Finish.
/// Then it stops accepting, closes the open run (its gates open, so held requests are answered),
/// ends the event streams, joins every connection, the driver and the journal's pump, and
/// returns the report. `Err` only if the session could not start.
pub async fn serve(
    config: Config,
    leave: impl Future<Output = ()>,
    announce: impl FnOnce(&str) -> std::io::Result<()>,
) -> Result<ClassroomReport, String> {
    let token = || RunToken::generate().map_err(|e| format!("cannot draw a random token: {e}"));
    let (control, room_token, nonce) = (token()?, token()?, token()?);
    let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(tokio::net::TcpListener::from_std)
        .map_err(|e| format!("binding 127.0.0.1:0: {e}"))?;
    let address: SocketAddr = listener
        .local_addr()
        .map_err(|e| format!("reading the bound address: {e}"))?;
    let base = format!("http://{address}");
    let journal = Arc::new(Journal::new(STREAM_BUFFER));
    let room = Arc::new(Room::new(room_token));
    let (orders, ordered) = mpsc::channel(16);
    let app = Arc::new(App::new(
        address,
        control,
        &nonce,
        room.clone(),
        journal.clone(),
        orders.clone(),
    ));
    let limit = config.options.safety_timeout;

    let mut driver = Driver::new(config.options, journal.clone(), room.clone(), base.clone());
    driver.start(config.inputs).await;
    let driver = tokio::spawn(driver.drive(ordered));
    let pump = tokio::spawn({
        let journal = journal.clone();
        async move { journal.pump().await }
    });
    let (stop_accepting, stopped) = oneshot::channel::<()>();
    let (drain, drained) = oneshot::channel::<()>();
    let server = tokio::spawn(http::serve(
        listener,
        app.clone(),
        async move {
            let _ = stopped.await;
        },
        async move {
            let _ = drained.await;
        },
        limit,
    ));

    let mut failure = None;
    match announce(&format!("{base}/")) {
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
            command: Command::Leave,
            reply,
        })
        .await;
    drop(orders);
    let driven = driver.await;
    room.aim(None);
    journal.end();
    let _ = drain.send(());
    let served = server.await;
    let pumped = pump.await;

    let driven = driven.map_err(|e| format!("the classroom's driver failed: {e}"))?;
    match served {
        Ok(served) => {
            if let Some(error) = served.error {
                failure.get_or_insert(error);
            }
        }
        Err(e) => {
            failure.get_or_insert(format!("the classroom's server task failed: {e}"));
        }
    }
    if let Err(e) = pumped {
        failure.get_or_insert(format!("the journal's pump failed: {e}"));
    }
    Ok(ClassroomReport {
        matches_model: failure.is_none() && driven.runs.iter().all(|r| r.matches_model),
        runs: driven.runs,
        room_requests: room.requests(),
        room_gates: driven.room_gates,
        event_streams_dropped: journal.dropped(),
        failure,
    })
}

/// [`serve`] until the process is interrupted (SIGINT, Ctrl-C) or terminated (SIGTERM). The
/// handlers are in place before the URL is announced, so a signal sent as soon as it is read
/// ends the session rather than the process; the previous handlers are back once it returns.
pub async fn run(
    config: Config,
    announce: impl FnOnce(&str) -> std::io::Result<()>,
) -> Result<ClassroomReport, String> {
    let interrupts =
        signal::Interrupts::catch().map_err(|e| format!("cannot catch Ctrl-C: {e}"))?;
    let report = serve(config, interrupts.caught(), announce).await;
    drop(interrupts);
    report
}
