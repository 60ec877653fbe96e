//! The async server front: a Hyper HTTP/1 server on `127.0.0.1:0` whose handler asks the work
//! section for admission. It bounds nothing but that section: connections and handler tasks are
//! accepted before any permit is checked.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use serde::Serialize;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::admission::section::WorkSection;
use crate::admission::token::TOKEN_HEADER;
use crate::label::{LABEL_HEADER, Label};
use crate::policy::Route;

/// A bound listener on the lab's only address: an ephemeral port on the IPv4 loopback.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    address: SocketAddr,
}

/// What the server reports once it has stopped: the report's `server` object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerSummary {
    /// Where it listened: `127.0.0.1:<port>`.
    pub address: SocketAddr,
    /// The listener was dropped: the port refuses new connections.
    pub listener_closed: bool,
    /// Connections accepted over the run.
    pub connections_accepted: u64,
    /// Every connection task has ended and been joined.
    pub connection_tasks_stopped: bool,
    /// Requests refused with 403 for not presenting the run's token. They never reached
    /// admission: no permit, no work event, no part of the model.
    pub foreign_requests_refused: u64,
}

/// The server has stopped; `error` says why it did not stop cleanly, if it did not.
#[derive(Debug)]
pub struct Stopped {
    /// The report's `server` object.
    pub summary: ServerSummary,
    /// An accept error, a panicked connection task, or connections that outlived the drain.
    pub error: Option<String>,
}

impl Server {
    /// Binds `127.0.0.1:0`. Nothing on the command line or in the environment changes this.
    pub async fn bind() -> std::io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let address = listener.local_addr()?;
        Ok(Server { listener, address })
    }

    /// The address the server listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Serves `section` until `shutdown` resolves. Then stops accepting, closes the listener,
    /// asks every connection to finish gracefully (an idle keep-alive connection closes at
    /// once), and joins every connection task. Connections still open after `drain_limit` are
    /// aborted and reported as an error.
    pub async fn serve(
        self,
        section: Arc<WorkSection>,
        shutdown: impl Future<Output = ()>,
        drain_limit: Duration,
    ) -> Stopped {
        let Server { listener, address } = self;
        let graceful = GracefulShutdown::new();
        let mut connections = JoinSet::new();
        let mut connections_accepted = 0;
        let mut error = None;
        let mut shutdown = pin!(shutdown);
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _peer)) => {
                        connections_accepted += 1;
                        let section = section.clone();
                        let service = service_fn(move |request| {
                            let section = section.clone();
                            async move { Ok::<_, Infallible>(handle(&section, request).await) }
                        });
                        let connection =
                            http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                        connections.spawn(graceful.watch(connection));
                    }
                    Err(e) => {
                        error = Some(format!("the server could not accept a connection: {e}"));
                        break;
                    }
                },
            }
        }
        // Stop accepting: from here on the port refuses connections.
        drop(listener);

        if tokio::time::timeout(drain_limit, graceful.shutdown())
            .await
            .is_err()
        {
            connections.abort_all();
            error.get_or_insert(format!(
                "connections were still open {} s after the server asked them to close; aborted",
                drain_limit.as_secs()
            ));
        }
        while let Some(joined) = connections.join_next().await {
            // A connection's own error (a client that went away) is not the run's failure; a
            // panic in a handler is.
            if let Err(e) = joined
                && e.is_panic()
            {
                error.get_or_insert(format!("a connection task panicked: {e}"));
            }
        }
        Stopped {
            summary: ServerSummary {
                address,
                listener_closed: true,
                connections_accepted,
                connection_tasks_stopped: connections.is_empty(),
                foreign_requests_refused: section.foreign_requests_refused(),
            },
            error,
        }
    }
}

/// Answers one request: 403 without the run's token, 404 for another path, 405 for another
/// method, 400 without a label for the route; otherwise the work section's decision, 200 or 503.
async fn handle(section: &WorkSection, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let token = request.headers().get(TOKEN_HEADER).map(|v| v.as_bytes());
    if !section.admits_caller(token) {
        return reply(
            StatusCode::FORBIDDEN,
            json!({
                "error": "foreign_request",
                "detail": "only this lab run's own callers may ask for a work permit",
            }),
        );
    }
    let Some(route) = Route::from_path(request.uri().path()) else {
        return reply(StatusCode::NOT_FOUND, json!({ "error": "not_found" }));
    };
    if request.method() != Method::GET {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({ "error": "method_not_allowed" }),
        );
    }
    let label = request
        .headers()
        .get(LABEL_HEADER)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse::<Label>().ok())
        .filter(|label| label.route() == route);
    let Some(label) = label else {
        return reply(
            StatusCode::BAD_REQUEST,
            json!({ "error": "missing_or_wrong_request_label", "header": LABEL_HEADER }),
        );
    };
    match section.perform(label, route).await {
        Ok(pool) => reply(StatusCode::OK, json!({ "request": label, "pool": pool })),
        Err(refusal) => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": "work_capacity_full", "pool": refusal.pool, "request": label }),
        ),
    }
}

/// A complete JSON response. The body is whole, so nothing outlives the handler (NOTES.md 7).
fn reply(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
