//! The lab's HTTP client: one caller per request, with the run token on every request, each
//! response read whole and placed on the ledger's axis.
//!
//! A caller sends on Hyper's client connection and drives that connection inside its own
//! future: no task is spawned behind it, no proxy is consulted (the lab never reads
//! `HTTP_PROXY` or `ALL_PROXY`), and nothing is parsed but the request's path. A caller whose
//! answer is whole leaves its connection open for the next caller, as a browser or any pooled
//! client would: so a front keeps one handler per connection a run has open, and the handlers
//! the report counts are the same on every run. A connection the server closed meanwhile is
//! found closed before the request leaves, which is then sent on a new one. A caller that is
//! dropped takes its connection with it; [`Client::close`] closes those left open.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HOST, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::admission::section::WorkSection;
use crate::admission::token::TOKEN_HEADER;
use crate::label::{LABEL_HEADER, Label};

/// A response as a caller received it.
#[derive(Debug)]
pub(crate) struct Received {
    pub(crate) request: Label,
    pub(crate) status: u16,
    pub(crate) body: serde_json::Value,
    /// The ledger's last `seq` when the response had arrived.
    pub(crate) after_event: u64,
}

/// The client of one policy run: requests go to the server at `address` with the run's token.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    address: SocketAddr,
    /// The run token's header.
    headers: HeaderMap,
    section: Arc<WorkSection>,
    /// Connections whose last answer was read whole, for the next caller.
    idle: Arc<Mutex<Vec<Connection>>>,
    /// The requests that have opened a connection of their own, as they connected.
    connected: Arc<Mutex<Vec<Label>>>,
}

/// An HTTP/1.1 connection to the server: the half that sends, and the half that must be
/// polled for anything to move.
#[derive(Debug)]
struct Connection {
    sender: SendRequest<Empty<Bytes>>,
    /// `None` once it has ended: the connection is closed or broken.
    driver: Option<http1::Connection<TokioIo<TcpStream>, Empty<Bytes>>>,
}

/// Whether a caller may send on a connection another caller left open.
#[derive(Clone, Copy, Debug)]
enum Reuse {
    LeftOpen,
    Never,
}

/// Why an exchange failed, with its request when that never left.
struct Failed {
    error: anyhow::Error,
    unsent: Option<Request<Empty<Bytes>>>,
}

impl Client {
    /// A client sending `headers` (the run token's, from [`token_header`]) to the server at
    /// `address`, which serves `section`.
    pub(crate) fn new(headers: HeaderMap, address: SocketAddr, section: Arc<WorkSection>) -> Self {
        Client {
            address,
            headers,
            section,
            idle: Arc::default(),
            connected: Arc::default(),
        }
    }

    /// Closes every connection left open.
    pub(crate) fn close(&self) {
        self.idle().clear();
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        // A caller that panicked holding the lock left a list of connections, still whole.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `request`'s caller has opened a connection of its own to the server: then it
    /// is there, accepted or waiting to be.
    pub(crate) fn has_connected(&self, request: Label) -> bool {
        let connected = self.connected.lock();
        let connected = connected.unwrap_or_else(PoisonError::into_inner);
        connected.contains(&request)
    }

    /// A new connection for `request`, noted as its own.
    async fn connect_for(&self, request: Label) -> anyhow::Result<Connection> {
        let connection = connect(self.address).await?;
        let connected = self.connected.lock();
        connected
            .unwrap_or_else(PoisonError::into_inner)
            .push(request);
        Ok(connection)
    }

    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    /// One caller: `GET <route>` with the request's label, and the whole JSON response, placed
    /// on the ledger's axis by the last event recorded when it arrived. An `Err` says what
    /// failed, and its sources say why.
    pub(crate) fn call(
        &self,
        request: Label,
    ) -> impl Future<Output = anyhow::Result<Received>> + Send + use<> {
        self.call_on(request, Reuse::LeftOpen)
    }

    /// One caller, as [`Client::call`], on a new connection even where one is left open: a
    /// request that must be seen waiting in the server's accept queue (a connection left open
    /// was accepted long ago).
    pub(crate) fn call_fresh(
        &self,
        request: Label,
    ) -> impl Future<Output = anyhow::Result<Received>> + Send + use<> {
        self.call_on(request, Reuse::Never)
    }

    fn call_on(
        &self,
        request: Label,
        reuse: Reuse,
    ) -> impl Future<Output = anyhow::Result<Received>> + Send + use<> {
        let client = self.clone();
        async move {
            let route = request.route();
            let (status, bytes) = client
                .get(request, reuse)
                .await
                .with_context(|| format!("{request}: GET {route} failed"))?;
            let after_event = client.section.last_seq();
            let body = serde_json::from_slice(&bytes)
                .with_context(|| format!("{request}: the {status} response is not JSON"))?;
            Ok(Received {
                request,
                status,
                body,
                after_event,
            })
        }
    }

    /// `GET` `request`'s route on a connection left open (if `reuse` allows), or on a new one:
    /// the status and the whole body. The connection is left open again once the body is read.
    async fn get(&self, request: Label, reuse: Reuse) -> anyhow::Result<(u16, Bytes)> {
        let sent = build(self.address, request.route().path(), request, &self.headers)?;
        // A connection the last caller left open. The fronts keep a connection open until the
        // client closes it or the server stops (after the client has closed its own).
        let left_open = match reuse {
            Reuse::LeftOpen => self.idle().pop(),
            Reuse::Never => None,
        };
        let reused = left_open.is_some();
        let mut connection = match left_open {
            Some(connection) => connection,
            None => self.connect_for(request).await?,
        };
        let answered = match connection.exchange(sent).await {
            // The server closed the connection while it was left open, and the request never
            // left: it goes on a new one.
            Err(Failed {
                unsent: Some(unsent),
                ..
            }) if reused => {
                connection = self.connect_for(request).await?;
                connection.exchange(unsent).await
            }
            answered => answered,
        };
        let answer = answered.map_err(|failed| failed.error)?;
        if connection.open() {
            self.idle().push(connection);
        }
        Ok(answer)
    }
}

impl Connection {
    /// Whether another request can be sent on it.
    fn open(&self) -> bool {
        self.driver.is_some() && !self.sender.is_closed()
    }

    /// Sends `request` and reads its answer whole, polling the connection meanwhile.
    async fn exchange(&mut self, request: Request<Empty<Bytes>>) -> Result<(u16, Bytes), Failed> {
        let Connection { sender, driver } = self;
        let Some(polled) = driver.as_mut() else {
            let error = anyhow::anyhow!("the connection had ended");
            return Err(Failed {
                error,
                unsent: Some(request),
            });
        };
        let exchange = async {
            if let Err(e) = sender.ready().await {
                return Err((e, Some(request)));
            }
            let response = match sender.try_send_request(request).await {
                Ok(response) => response,
                Err(mut e) => {
                    let unsent = e.take_message();
                    return Err((e.into_error(), unsent));
                }
            };
            let status = response.status().as_u16();
            let body = response.into_body().collect().await;
            let body = body.map_err(|e| (e, None))?.to_bytes();
            Ok((status, body))
        };
        tokio::pin!(exchange);
        let failed = |(e, unsent): (hyper::Error, _)| Failed {
            error: e.into(),
            unsent,
        };
        tokio::select! {
            biased;
            answer = &mut exchange => answer.map_err(failed),
            // The connection ended first (closed or broken). Dropping it ends the exchange:
            // a request it had not yet written comes back unsent.
            closed = polled => {
                *driver = None;
                match (exchange.await.map_err(failed), closed) {
                    (Err(mut failed), Err(why)) => {
                        failed.error = failed.error.context(format!("the connection failed: {why}"));
                        Err(failed)
                    }
                    (answer, _) => answer,
                }
            }
        }
    }
}

/// A new HTTP/1.1 connection to `address`.
async fn connect(address: SocketAddr) -> anyhow::Result<Connection> {
    let stream = TcpStream::connect(address)
        .await
        .with_context(|| format!("connecting to {address}"))?;
    stream.set_nodelay(true).context("setting TCP_NODELAY")?;
    let (sender, driver) = http1::handshake(TokioIo::new(stream))
        .await
        .context("starting HTTP/1.1")?;
    Ok(Connection {
        sender,
        driver: Some(driver),
    })
}

/// `GET path` as `request` (its label header) with `headers`, to the server at `address`.
fn build(
    address: SocketAddr,
    path: &str,
    request: Label,
    headers: &HeaderMap,
) -> anyhow::Result<Request<Empty<Bytes>>> {
    let mut built = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(HOST, address.to_string())
        .header(LABEL_HEADER, request.to_string());
    if let Some(all) = built.headers_mut() {
        all.extend(headers.clone());
    }
    built
        .body(Empty::<Bytes>::new())
        .context("building the request")
}

/// `GET path` as `request` (its label header) with `headers`, on a connection of its own to
/// `address`, closed once the answer is whole: the status and the whole body.
pub(crate) async fn get(
    address: SocketAddr,
    path: &str,
    request: Label,
    headers: &HeaderMap,
) -> anyhow::Result<(u16, Bytes)> {
    let sent = build(address, path, request, headers)?;
    let mut connection = connect(address).await?;
    connection
        .exchange(sent)
        .await
        .map_err(|failed| failed.error)
}

/// The header that presents a run's token (as its server wrote it) with every request.
pub(crate) fn token_header(token: &str) -> anyhow::Result<HeaderMap> {
    let value = HeaderValue::from_str(token).context("the run token is not a header value")?;
    Ok(HeaderMap::from_iter([(
        HeaderName::from_static(TOKEN_HEADER),
        value,
    )]))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    use super::*;
    use crate::admission::pools::Permits;
    use crate::admission::token::RunToken;
    use crate::policy::{Mode, Policy, Slots};

    /// How the test server ends each connection.
    #[derive(Clone)]
    enum Ends {
        /// When the client closes it.
        Never,
        /// After its first answer, which says `connection: close`.
        SayingSo,
        /// When told, after its first answer, which says nothing of it.
        Silently(Arc<tokio::sync::Notify>),
    }

    /// A server on 127.0.0.1:0 that answers every request `{}` and ends its connections as
    /// `ends` says; it counts the connections it accepted, and says on `closed` each time it
    /// has closed one.
    async fn server(ends: Ends) -> (SocketAddr, Arc<AtomicUsize>, mpsc::UnboundedReceiver<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let address = listener.local_addr().expect("an address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        let (closed, closes) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let closed = closed.clone();
                let ends = ends.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buffer = [0; 1024];
                    while let Ok(read @ 1..) = stream.read(&mut buffer).await {
                        head.extend_from_slice(&buffer[..read]);
                        if !head.ends_with(b"\r\n\r\n") {
                            continue;
                        }
                        head.clear();
                        let answer: &[u8] = match ends {
                            Ends::SayingSo => {
                                b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}"
                            }
                            _ => b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}",
                        };
                        if stream.write_all(answer).await.is_err() {
                            break;
                        }
                        match &ends {
                            Ends::Never => continue,
                            Ends::SayingSo => break,
                            Ends::Silently(told) => {
                                told.notified().await;
                                // Its end of stream sent, and taken in on the client's side:
                                // the client's kernel acknowledged the FIN (FIN_WAIT2 here),
                                // so the client's next read sees it, however loaded the machine.
                                let _ = stream.shutdown().await;
                                while !fin_acknowledged(&stream) {
                                    tokio::task::yield_now().await;
                                }
                                break;
                            }
                        }
                    }
                    drop(stream);
                    let _ = closed.send(());
                });
            }
        });
        (address, accepted, closes)
    }

    /// Whether the peer has acknowledged this socket's FIN: `TCP_INFO` no longer says
    /// FIN_WAIT1 (4 in Linux's numbering; FIN_WAIT2 is next), or cannot be read.
    fn fin_acknowledged(stream: &tokio::net::TcpStream) -> bool {
        use std::os::fd::AsFd;
        let info = crate::server::runtimes::tcp_info(stream.as_fd());
        !info.is_ok_and(|info| info.tcpi_state == 4)
    }

    fn client(address: SocketAddr) -> Client {
        let slots = Slots::new(2).expect("2 slots are allowed");
        let token = RunToken::generate().expect("the OS has randomness");
        let headers = token_header(&token.header_value()).expect("a header");
        let policy = Policy {
            mode: Mode::Shared,
            slots,
        };
        let section = Arc::new(WorkSection::new(policy, Permits::Tokio, token));
        Client::new(headers, address, section)
    }

    #[tokio::test]
    async fn a_caller_sends_on_the_connection_the_last_one_left_open() {
        let (address, accepted, _) = server(Ends::Never).await;
        let client = client(address);
        for request in [Label::Slow(1), Label::F1, Label::SlowAfter] {
            let answer = client.call(request).await.expect("answered");
            assert_eq!((answer.status, answer.body), (200, serde_json::json!({})));
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one connection for three"
        );
        // Two callers at once need two connections; both are left open, and closed by close().
        let (first, second) = tokio::join!(client.call(Label::Slow(2)), client.call(Label::F1));
        assert!(first.is_ok() && second.is_ok());
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(client.idle().len(), 2);
        client.close();
        assert_eq!(client.idle().len(), 0);
    }

    /// A fresh caller opens a connection of its own though one is left open, and leaves its
    /// own open too.
    #[tokio::test]
    async fn a_fresh_caller_opens_a_connection_of_its_own() {
        let (address, accepted, _) = server(Ends::Never).await;
        let client = client(address);
        client.call(Label::Slow(1)).await.expect("answered");
        assert_eq!(client.idle().len(), 1);
        client.call_fresh(Label::F1).await.expect("answered");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "a connection of its own"
        );
        assert!(client.has_connected(Label::F1));
        assert_eq!(client.idle().len(), 2);
    }

    #[tokio::test]
    async fn a_connection_the_server_closes_is_not_left_open() {
        let (address, accepted, _) = server(Ends::SayingSo).await;
        let client = client(address);
        for request in [Label::Slow(1), Label::F1] {
            let answer = client.call(request).await.expect("answered");
            assert_eq!(answer.status, 200);
            assert_eq!(client.idle().len(), 0, "closed by the server");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_request_on_a_connection_the_server_closed_silently_goes_on_a_new_one() {
        let told = Arc::new(tokio::sync::Notify::new());
        let (address, accepted, mut closes) = server(Ends::Silently(told.clone())).await;
        let client = client(address);
        client.call(Label::Slow(1)).await.expect("answered");
        assert_eq!(client.idle().len(), 1, "nothing said it closes");
        told.notify_one();
        closes.recv().await.expect("the server closed it");
        let answer = client
            .call(Label::F1)
            .await
            .expect("answered on a new connection");
        assert_eq!(answer.status, 200);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }
}
