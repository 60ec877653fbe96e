//! The classroom's own HTTP server: the page, its event stream, its controls, and the door for
//! the room's requests, on `127.0.0.1:0`. Every request is screened first:
//!
//! - `Host` must be `127.0.0.1:PORT` and an `Origin`, if sent, the page's own: this stops a web
//!   page in the same browser from driving the lab by DNS rebinding or a cross-site request
//!   (403). No CORS header is ever sent, so no other origin may read an answer, and every
//!   answer of this server's says `Cross-Origin-Resource-Policy: same-origin`, so none may
//!   embed one either (the 400 and 431 Hyper writes itself for a head it cannot read have no
//!   body to embed).
//! - `POST /control/<action>` needs the session's control token in `lab-control`. No answer of
//!   this server carries it: it is printed on the terminal, in the instructor's URL after `#`
//!   (a fragment, which a browser never sends), and the page keeps it in the tab's
//!   `sessionStorage` (see `docs/design.md`, "The classroom's secrets"). `GET /` without it is
//!   the room's view: the board, and the room's commands, no controls.
//! - `GET /slow` and `/fast` need the room token in `lab-room`; the page shows it to the room,
//!   and it lets the room do nothing else.
//! - A request head is at most 16 KiB (Hyper's limit, 431 past it) and must arrive within
//!   the header timeout ([`HEADER_TIMEOUT`] unless the session's [`Timeouts`] say otherwise)
//!   of the connection opening or of the last answer, or the connection is closed; a control
//!   body is at most 1 KiB and must arrive within the body timeout ([`BODY_TIMEOUT`]; 408).
//! - At most a limit of connections are open at once (from the descriptors this process may
//!   open). Beyond it, the oldest connection with no request in progress (idle, or a head not
//!   yet whole) is closed to make room, else the oldest event stream (its page reconnects),
//!   never one not yet read at all (accepted in the same burst as the new one), so a flood of
//!   idle connections or of streams cannot lock the page out, nor a flood of new ones push out
//!   a control request before it is read; only when none of the open ones may be closed is the
//!   new one closed as soon as it is accepted. The room may have at
//!   most half the limit of its requests waiting for answers (`Room::admit`); beyond that one is
//!   answered 503 `room_full` at once, so the room cannot fill the limit with requests a front
//!   leaves unread (`--work block`) and lock the instructor out.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, oneshot};

use super::Timeouts;
use super::journal::Journal;
use super::render;
use super::room::{NotSent, ROOM_HEADER, Room};
use super::run::{Action, Order};
use crate::admission::token::RunToken;
use crate::policy::{Inputs, Route};
use crate::server::Backoff;
use crate::server::connections::{Connections, Owed, Owing};

/// The header that keeps an answer from being embedded by a page of another origin (the `http`
/// crate names no constant for it).
const CROSS_ORIGIN_RESOURCE_POLICY: header::HeaderName =
    header::HeaderName::from_static("cross-origin-resource-policy");
/// The header that carries the control token.
pub(crate) const CONTROL_HEADER: &str = "lab-control";
/// The largest request head Hyper reads.
const MAX_HEAD: usize = 16 * 1024;
/// The largest control body read.
const MAX_BODY: usize = 1024;
/// How long a connection may take to send a whole request head, from its opening or from its
/// last answer, unless the session says otherwise: idle connections are closed after it. A
/// browser or `curl` sends its head at once; anything slower is holding a descriptor.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a control request's body may take to arrive after its head, unless the session
/// says otherwise.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(2);

type Body = BoxBody<Bytes, Infallible>;

/// What the server's handlers share.
#[derive(Debug)]
pub(crate) struct App {
    /// `127.0.0.1:PORT`: the only `Host` served.
    host: String,
    /// `http://127.0.0.1:PORT`: the only `Origin` accepted.
    origin: String,
    control: RunToken,
    pub(crate) room: Arc<Room>,
    pub(crate) journal: Arc<Journal>,
    orders: mpsc::Sender<Order>,
    /// Told when the page presses Finish.
    pub(crate) finish: Notify,
    /// Why the server stopped accepting before the session ended, if it did.
    pub(crate) broken: std::sync::Mutex<Option<String>>,
    timeouts: Timeouts,
}

impl App {
    pub(crate) fn new(
        address: SocketAddr,
        control: RunToken,
        room: Arc<Room>,
        journal: Arc<Journal>,
        orders: mpsc::Sender<Order>,
        timeouts: Timeouts,
    ) -> Self {
        App {
            host: address.to_string(),
            origin: format!("http://{address}"),
            control,
            room,
            journal,
            orders,
            finish: Notify::new(),
            broken: std::sync::Mutex::default(),
            timeouts,
        }
    }

    /// Whether the request is addressed to this server as the page's own origin would address
    /// it: its one `Host` exactly `127.0.0.1:PORT`; an absolute target naming the same; every
    /// `Origin` the page's own.
    fn addressed_here(&self, request: &Request<Incoming>) -> bool {
        let headers = request.headers();
        let host_ok = headers
            .get(header::HOST)
            .is_some_and(|h| h == self.host.as_str());
        let target_ok = request
            .uri()
            .authority()
            .is_none_or(|a| a.as_str() == self.host);
        let origin_ok = headers
            .get_all(header::ORIGIN)
            .iter()
            .all(|o| o == self.origin.as_str());
        host_ok && target_ok && origin_ok
    }

    /// Answers one request on a connection that owes its client what `owed` counts. The answer
    /// is owed from the moment the request is whole: a control request whose body is still on
    /// its way owes nothing yet, so a session that ends meanwhile closes its connection.
    async fn handle(
        &self,
        request: Request<Incoming>,
        owed: &Arc<Owed>,
    ) -> (Response<Body>, Owing) {
        // HTTP/1.1 asks every request for exactly one `Host`; a server answers 400 otherwise.
        if request.headers().get_all(header::HOST).iter().count() != 1 {
            let detail = "a request names its host in exactly one Host header";
            let refused = refuse(StatusCode::BAD_REQUEST, "host_header", detail);
            return (refused, Owing::new(owed.clone()));
        }
        if !self.addressed_here(&request) {
            let detail = "only the page served at this address, from this address, may use it";
            let refused = refuse(StatusCode::FORBIDDEN, "wrong_host_or_origin", detail);
            return (refused, Owing::new(owed.clone()));
        }
        let path = request.uri().path().to_owned();
        if request.method() == Method::POST
            && let Some(action) = path.strip_prefix("/control/")
        {
            return self.control(action, request, owed).await;
        }
        let mut owing = Owing::new(owed.clone());
        let answer = match (request.method(), path.as_str(), Route::from_path(&path)) {
            (&Method::GET, "/", _) => self.page(),
            (&Method::GET, "/events", _) => match self.journal.follow() {
                Some(stream) => {
                    owing = owing.a_stream();
                    uncached(stream.boxed(), "text/event-stream")
                }
                None => answer(StatusCode::CONFLICT, json!({ "error": "session_ended" })),
            },
            (&Method::GET, _, Some(route)) => self.room_request(route, request.headers()).await,
            (_, "/" | "/events", _) | (_, _, Some(_)) => not_allowed("GET"),
            (_, path, _) if path.starts_with("/control/") => not_allowed("POST"),
            _ => answer(StatusCode::NOT_FOUND, json!({ "error": "not_found" })),
        };
        (answer, owing)
    }

    /// The page, its one script allowed by a nonce drawn for this answer alone.
    fn page(&self) -> Response<Body> {
        let Ok(nonce) = RunToken::generate() else {
            let detail = "the server could not draw a random nonce for the page's script";
            return refuse(StatusCode::INTERNAL_SERVER_ERROR, "no_nonce", detail);
        };
        let nonce = nonce.header_value();
        let policy = format!(
            "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; \
             connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'"
        );
        let body = Full::new(Bytes::from(render::page(&nonce))).boxed();
        let mut response = uncached(body, "text/html; charset=utf-8");
        let policy = HeaderValue::from_str(&policy).expect("hex digits and ASCII punctuation");
        response
            .headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, policy);
        response
    }

    /// A control action from the instructor's page; see [`App::handle`] for `owed`.
    async fn control(
        &self,
        action: &str,
        request: Request<Incoming>,
        owed: &Arc<Owed>,
    ) -> (Response<Body>, Owing) {
        let token = request
            .headers()
            .get(CONTROL_HEADER)
            .map(HeaderValue::as_bytes);
        if !self.control.admits(token) {
            let detail = "controls need this session's control token, which only the \
                          instructor's URL printed on the terminal carries";
            let refused = refuse(StatusCode::FORBIDDEN, "control_token", detail);
            return (refused, Owing::new(owed.clone()));
        }
        let whole = Limited::new(request.into_body(), MAX_BODY).collect();
        let body = tokio::time::timeout(self.timeouts.body, whole).await;
        let owing = Owing::new(owed.clone());
        let body = match body {
            Ok(Ok(body)) => body.to_bytes(),
            Ok(Err(_)) => {
                let detail = format!("a control body is at most {MAX_BODY} bytes");
                let refused = refuse(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", detail);
                return (refused, owing);
            }
            Err(_) => {
                let detail = format!(
                    "the control body did not arrive within {}",
                    in_words(self.timeouts.body)
                );
                let mut refused = refuse(StatusCode::REQUEST_TIMEOUT, "body_timeout", detail);
                // The rest of the body may still come: the connection cannot be reused.
                (refused.headers_mut())
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                return (refused, owing);
            }
        };
        (self.order(action, &body).await, owing)
    }

    /// Performs the control `action` with its whole `body`.
    async fn order(&self, action: &str, body: &Bytes) -> Response<Body> {
        let command = match action {
            "next" => Action::Next,
            "run-to-end" => Action::RunToEnd,
            "open-room" => Action::Room(true),
            "close-room" => Action::Room(false),
            "open-gate" => Action::OpenGate,
            "close-gate" => Action::CloseGate,
            "reveal" => Action::Reveal,
            "new-run" => match serde_json::from_slice::<Inputs>(body) {
                Ok(inputs) => Action::NewRun(inputs),
                Err(e) => {
                    let detail = format!(
                        "expected {{\"mode\": \"shared|partitioned|both\", \"slots\": 2..4, \"held\": 1..4}}: {e}"
                    );
                    return refuse(StatusCode::BAD_REQUEST, "bad_inputs", detail);
                }
            },
            "finish" => {
                // The session closes once this answer is on its way: answering after would
                // wait for this very connection to drain.
                self.finish.notify_one();
                return answer(StatusCode::ACCEPTED, json!({ "finishing": true }));
            }
            _ => return answer(StatusCode::NOT_FOUND, json!({ "error": "no_such_control" })),
        };
        let (reply, replied) = oneshot::channel();
        let sent = self.orders.send(Order { command, reply }).await;
        let done = match sent {
            Ok(()) => replied.await.ok(),
            Err(_) => None,
        };
        match done {
            Some(Ok(done)) => answer(StatusCode::OK, done),
            Some(Err(why)) => refuse(StatusCode::CONFLICT, "not_now", format!("{why:#}")),
            None => answer(StatusCode::CONFLICT, json!({ "error": "session_ending" })),
        }
    }

    /// A request from the room, sent on to the run's front; its answer goes back to the room.
    async fn room_request(&self, route: Route, headers: &HeaderMap) -> Response<Body> {
        if !self
            .room
            .admits(headers.get(ROOM_HEADER).map(HeaderValue::as_bytes))
        {
            let detail = "the room's requests carry the room token shown on the page";
            return refuse(StatusCode::FORBIDDEN, "room_token", detail);
        }
        let (request, target) = match self.room.admit(route) {
            Ok(admitted) => admitted,
            Err(not_sent) => {
                let (status, error) = match not_sent {
                    NotSent::Full => (StatusCode::SERVICE_UNAVAILABLE, "room_full"),
                    NotSent::Spent(_) => (StatusCode::TOO_MANY_REQUESTS, "room_spent"),
                    NotSent::NotOpen | NotSent::NoRun => (StatusCode::CONFLICT, "room_closed"),
                };
                return refuse(status, error, not_sent.words());
            }
        };
        let record = self.room.send(request, target).await;
        match (
            record.status.and_then(|s| StatusCode::from_u16(s).ok()),
            record.body,
        ) {
            (Some(status), Some(body)) => answer(status, body),
            _ => answer(
                StatusCode::BAD_GATEWAY,
                json!({ "error": "run_closed", "request": request, "detail": record.error }),
            ),
        }
    }
}

/// A timeout as a person reads it: whole seconds as `2 s`, anything else in milliseconds.
pub(super) fn in_words(timeout: Duration) -> String {
    if timeout.subsec_nanos() == 0 {
        format!("{} s", timeout.as_secs())
    } else {
        format!("{} ms", timeout.as_millis())
    }
}

/// 405, saying which method the path takes.
fn not_allowed(allow: &'static str) -> Response<Body> {
    let mut response = answer(
        StatusCode::METHOD_NOT_ALLOWED,
        json!({ "error": "method_not_allowed" }),
    );
    let allow = HeaderValue::from_static(allow);
    response.headers_mut().insert(header::ALLOW, allow);
    response
}

/// A refusal: its `error` code and, in words, its `detail`.
fn refuse(status: StatusCode, error: &str, detail: impl Into<Value>) -> Response<Body> {
    answer(status, json!({ "error": error, "detail": detail.into() }))
}

/// A whole JSON answer.
fn answer(status: StatusCode, body: Value) -> Response<Body> {
    let body = Full::new(Bytes::from(body.to_string())).boxed();
    let mut response = uncached(body, "application/json");
    *response.status_mut() = status;
    response
}

/// A 200 response of `content_type` that no cache keeps, no page frames or embeds from another
/// origin, no browser sniffs as another type and no link refers onward: everything this server
/// says belongs to one live session, and the page holds the control token once the
/// instructor's URL has given it.
fn uncached(body: Body, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
        // A page of another origin cannot load an answer as its script, image or media either
        // (a request that sends no `Origin` for the screen above to check).
        (CROSS_ORIGIN_RESOURCE_POLICY, "same-origin"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// How the server's connections ended.
#[derive(Debug, Default)]
pub(crate) struct Served {
    /// Connections closed because `cap` were open: the oldest idle one or event stream, or the
    /// new one.
    pub(crate) refused: u64,
    /// What did not stop cleanly.
    pub(crate) error: Option<String>,
}

/// Serves `app` until `stop_accepting`; then closes the listener and keeps serving the open
/// connections (a room request waiting for its answer) until `drain`. Then it closes the event
/// streams at once — a stream owes nothing, and a client that stopped reading would never let
/// it finish — and every connection with no answer owed (idle, or a head never finished), asks
/// the rest to finish, and joins every connection task; any still open after `limit` are aborted
/// and reported. While `cap` connections are open, one more is closed as soon as it is accepted.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    (stop_accepting, drain): (impl Future<Output = ()>, impl Future<Output = ()>),
    limit: Duration,
    cap: usize,
) -> Served {
    let graceful = GracefulShutdown::new();
    let mut connections = Connections::default();
    let mut served = Served::default();
    let mut stop_accepting = pin!(stop_accepting);
    let mut retry = Backoff::default();
    let header_timeout = app.timeouts.header;
    loop {
        let stream = match retry.accept(&listener, stop_accepting.as_mut()).await {
            Ok(Some(stream)) => stream,
            Ok(None) => break,
            // A shortage that outlasts every pause ends the session, which would otherwise go
            // on with nobody able to reach it.
            Err(gave_up) => {
                let why = format!("the classroom's server: {gave_up}");
                served.error = Some(why.clone());
                // Told before the session ends, so the page can say it too.
                *app.broken.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
                app.finish.notify_one();
                break;
            }
        };
        connections.reap();
        // The oldest connection with no request in progress makes room, else the oldest event
        // stream (`Connections::close_oldest_not_busy`), its task joined before the new one's
        // starts; with neither, the new one is refused, closed at once. Either way this server
        // holds at most `cap` connections, and idle ones end at the header timeout.
        if connections.open() >= cap {
            served.refused += 1;
            if !connections.room_for_one(cap).await {
                drop(stream);
                continue;
            }
        }
        let owed = Arc::new(Owed::default());
        let (app, connection_owes) = (app.clone(), owed.clone());
        let service = service_fn(move |request| {
            let (app, owed) = (app.clone(), connection_owes.clone());
            async move {
                let (response, owing) = app.handle(request, &owed).await;
                // The closure owns `owing` and goes with the body: the answer is owed until the
                // body is dropped. (`inspect_frame` passes on the body's size, so a whole answer
                // still says its length.)
                let body = |body: Body| {
                    body.inspect_frame(move |_| {
                        let _ = &owing;
                    })
                    .boxed()
                };
                Ok::<_, Infallible>(response.map(body))
            }
        });
        let mut builder = http1::Builder::new();
        builder
            .max_buf_size(MAX_HEAD)
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout);
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        let polled = owed.clone();
        connections.spawn(owed, async move {
            // On the lab's current-thread runtime nothing else runs until this poll returns,
            // having read what had come.
            polled.mark_polled();
            // A client's broken connection is its own business, not the session's.
            let _ = connection.await;
        });
    }
    drop(listener);
    drain.await;
    let drained = connections
        .drain(graceful, limit, "classroom connections")
        .await;
    let panicked = connections.ended.panicked.into_iter().next();
    served.error = served.error.or(drained).or(panicked);
    served
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default body timeout reads as it always has, and a shorter one in milliseconds.
    #[test]
    fn a_timeout_reads_in_seconds_or_milliseconds() {
        assert_eq!(in_words(BODY_TIMEOUT), "2 s");
        assert_eq!(in_words(Duration::from_millis(200)), "200 ms");
    }
}
