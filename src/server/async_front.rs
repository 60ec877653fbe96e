//! The async front: a Hyper HTTP/1 server on Tokio, a task per connection. A held request
//! parks its task; the thread is free for everything else.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::FutureExt;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::connections::{Connections, Owed, Owing};
use super::work_style::Dispatch;
use super::{
    Backoff, ConnectionTask, FrontCensus, Gates, Head, Hosting, ListenerId, Reply, Stopped, answer,
    screen,
};
use crate::admission::section::WorkSection;
use crate::admission::token::TOKEN_HEADER;
use crate::allocator::slots::{Placed, Placement, Slot};
use crate::hooks::Hooks;
use crate::label::{LABEL_HEADER, Label};
use crate::policy::Route;

/// A bound listener on the lab's only address: an ephemeral port on the IPv4 loopback.
#[derive(Debug)]
pub(crate) struct AsyncListener {
    listener: TcpListener,
    address: SocketAddr,
    /// The listener's socket, to see it closed.
    id: ListenerId,
    /// The gate each request's slow work waits at.
    gates: Gates,
    /// The most connections kept open, if any.
    most: Option<usize>,
    /// Where admitted work runs (`--work`).
    dispatch: Arc<Dispatch>,
}

/// The server task, and how to tell it to stop.
#[derive(Debug)]
pub(crate) struct AsyncFront {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Stopped>,
}

impl AsyncListener {
    /// Serves on `listener`, bound to `address`, hosting requests as `hosting` says and running
    /// their admitted work as `dispatch` says; must be called on a Tokio runtime.
    pub(crate) fn from_std(
        (listener, address): (std::net::TcpListener, SocketAddr),
        hosting: Hosting,
        dispatch: Dispatch,
    ) -> std::io::Result<Self> {
        let Hosting {
            gates,
            most_connections: most,
        } = hosting;
        listener.set_nonblocking(true)?;
        crate::allocator::slots::reserve();
        let id = ListenerId::of(&listener, address);
        let listener = TcpListener::from_std(listener)?;
        Ok(AsyncListener {
            listener,
            address,
            id,
            gates,
            most,
            dispatch: Arc::new(dispatch),
        })
    }

    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    /// A second descriptor of the listening socket, to read its accept queue with. It keeps
    /// the socket listening while it is open: close it before the server stops.
    pub(crate) fn listening(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        std::os::fd::AsFd::as_fd(&self.listener).try_clone_to_owned()
    }

    /// Serves on a task of its own until [`AsyncFront::stop`].
    pub(crate) fn start(
        self,
        section: Arc<WorkSection>,
        census: Arc<FrontCensus>,
        hooks: Arc<dyn Hooks>,
        drain_limit: Duration,
    ) -> AsyncFront {
        let (stop, stopped) = oneshot::channel::<()>();
        // A dropped sender also means stop.
        let shutdown = stopped.map(drop);
        let task = tokio::spawn(self.serve(section, census, hooks, shutdown, drain_limit));
        AsyncFront { stop, task }
    }

    /// Serves `section` until `shutdown` resolves. Then stops accepting, closes the listener,
    /// closes every connection that is not serving a request (idle between requests, or still
    /// receiving a head a client may never finish), asks the rest to finish gracefully, and
    /// joins every connection task. Connections still open after `drain_limit` are aborted and
    /// reported as an error.
    pub(crate) async fn serve(
        self,
        section: Arc<WorkSection>,
        census: Arc<FrontCensus>,
        hooks: Arc<dyn Hooks>,
        shutdown: impl Future<Output = ()>,
        drain_limit: Duration,
    ) -> Stopped {
        let AsyncListener {
            listener,
            address: _,
            id,
            gates,
            most,
            dispatch,
        } = self;
        let graceful = GracefulShutdown::new();
        let mut connections = Connections::default();
        let mut accepted = 0;
        let mut retry = Backoff::default();
        let mut error = None;
        let mut shutdown = pin!(shutdown);
        loop {
            let stream = match retry.accept(&listener, shutdown.as_mut()).await {
                Ok(Some(stream)) => stream,
                Ok(None) => break,
                Err(gave_up) => {
                    error = Some(census.failed(format!("the server: {gave_up}")));
                    break;
                }
            };
            connections.reap();
            // At the cap, a stranger's connection makes room (the oldest that owes no answer
            // and never carried the run's token); with none, the new one is closed at once:
            // the run's own connections are never closed to make room.
            if let Some(most) = most
                && !connections.room_for_one(most).await
            {
                drop(stream);
                continue;
            }
            let owed = Arc::new(Owed::default());
            let given = (
                section.clone(),
                hooks.clone(),
                gates.clone(),
                dispatch.clone(),
            );
            let connection_owes = owed.clone();
            let service = service_fn(move |request| {
                // Screened before the handler's future exists, and dropped: the request's head
                // points into Hyper's read buffer, and while it lived Hyper's next read
                // (watching for the client going away while the work is held) had to take a
                // second buffer.
                let (section, hooks, gates, dispatch) = given.clone();
                let screened = screen_request(&section, &request);
                drop(request);
                let owed = connection_owes.clone();
                if screened.is_ok() {
                    // It carried the run's token: the run's own, never closed to make room.
                    owed.mark_the_runs();
                }
                // The handler's blocks are shared beyond its connection (ledger events,
                // channels, threads its work starts): outside the slot.
                Placed::outside(async move {
                    let _owing = Owing::new(owed);
                    let reply = match screened {
                        Ok((label, route)) => {
                            let verdict = dispatch.work(&section, &*hooks, &gates, label, route);
                            answer(label, verdict.await)
                        }
                        Err(reply) => reply,
                    };
                    Ok::<_, Infallible>(respond(reply))
                })
            });
            // What the connection itself allocates (Hyper's state and buffers, its task, the
            // box for its handler) goes into its slot, as far as it fits: one page resident
            // while a request is held (`src/allocator/slots.rs`).
            let slot = Slot::take();
            let connection = slot.enter(Placement::Unwritten, || {
                http1::Builder::new().serve_connection(TokioIo::new(stream), service)
            });
            let connection = graceful.watch(connection);
            let live = census.enter();
            let task = ConnectionTask::new(live, connection, owed.clone());
            let task = Placed::in_slot(slot.clone(), task);
            connections.reserve_entry();
            slot.enter(Placement::Written, || connections.spawn(owed, task));
            // Counted once its handler exists, as on the threaded front.
            accepted += 1;
        }
        // Stop accepting: from here on the port refuses connections.
        drop(listener);

        // A connection not serving a request has nothing to finish: closed at once, so no one
        // outside the run can hold the shutdown up.
        let drained = connections
            .drain(graceful, drain_limit, "connections")
            .await;
        error = error.or(drained);
        connections.ended.stopped(id, accepted, &section, error)
    }
}

impl AsyncFront {
    /// Tells the server to stop and waits for its report.
    pub(crate) async fn stop(self) -> anyhow::Result<Stopped> {
        let _ = self.stop.send(());
        // The server task itself panicked: its listener and connections were dropped with it,
        // but nothing is left to count them.
        self.task.await.context("the server task failed")
    }
}

/// Screens one request (see [`super::screen`]): its label and route, or the reply that refuses
/// it. Keeps nothing of the request.
fn screen_request(
    section: &WorkSection,
    request: &Request<Incoming>,
) -> Result<(Label, Route), Reply> {
    let headers = request.headers();
    let head = Head {
        is_get: request.method() == Method::GET,
        path: request.uri().path(),
        token: headers.get(TOKEN_HEADER).map(HeaderValue::as_bytes),
        label: headers.get(LABEL_HEADER).map(HeaderValue::as_bytes),
    };
    screen(section, head)
}

/// A complete JSON response. The body is whole because a connection counts as busy only while
/// its handler runs (`Owing`): at stop, a connection that is not busy is closed at once, so a
/// body still streaming after its handler returned could be cut off mid-response. (The permit
/// is not the reason: the work left the section, and returned it, before this reply was built.)
fn respond(reply: Reply) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(reply.body.to_string())));
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(methods) = reply.allow() {
        headers.insert(ALLOW, HeaderValue::from_static(methods));
    }
    response
}
