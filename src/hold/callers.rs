//! The callers of one measurement: a task per held request on one small `JoinSet`, each a plain
//! loopback `TcpStream` that writes one request head (the run token, its label,
//! `connection: close`) and reads the answer to the end, spread over 127.0.0.x source
//! addresses so no address runs out of ephemeral ports. Each checks its own answer: 200 naming
//! its label.
//!
//! Why not an HTTP client library: the instrument must cost less than what it measures. A
//! pooled client keeps per-connection state, timers and a second buffer layer on the caller's
//! side, and on a two-core machine its CPU competed with the front it measured. A raw head on
//! a socket is what a load generator writes; Hyper's client connection without a pool would be
//! the next lightest, at the price of a task and two buffers per caller.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
use std::sync::Arc;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;

use crate::admission::token::TOKEN_HEADER;
use crate::label::{LABEL_HEADER, Label};

/// The most source addresses used: 127.0.0.1 through 127.0.0.254.
const MAX_SOURCES: u64 = crate::limits::MAX_SOURCE_ADDRESSES;

/// The most bytes of an answer read: the front's answers are a few hundred bytes.
const MAX_ANSWER: u64 = 16 * 1024;

/// The callers of one measurement. Dropping it aborts those still waiting; [`Callers::abort`]
/// also waits until each has ended, so their connections are closed.
#[derive(Debug)]
pub(crate) struct Callers {
    address: SocketAddr,
    /// Every head's fixed part: the request line, host and token.
    head: Arc<str>,
    sources: u64,
    tasks: JoinSet<anyhow::Result<()>>,
}

impl Callers {
    /// Callers of the front at `address` presenting `token`, going out from `sources`
    /// addresses, 127.0.0.1 onwards.
    pub(crate) fn new(address: SocketAddr, token: &str, sources: u64) -> anyhow::Result<Callers> {
        // At least one address, so that every caller has one.
        let sources = sources.max(1);
        if sources > MAX_SOURCES {
            bail!("{sources} source addresses are needed; the lab uses at most {MAX_SOURCES}");
        }
        // The token comes from the front's child: a line break in it would write a header of
        // its choosing.
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            bail!("the front's run token is not a plain header value");
        }
        let head = format!("GET /slow HTTP/1.1\r\nhost: {address}\r\n{TOKEN_HEADER}: {token}\r\n");
        Ok(Callers {
            address,
            head: head.into(),
            sources,
            tasks: JoinSet::new(),
        })
    }

    /// Sends `S1` through `S<count>`, a task each, round-robin over the source addresses.
    pub(crate) fn send(&mut self, count: u32) {
        let labels = Label::slow(usize::try_from(count).unwrap_or(usize::MAX));
        for (n, label) in labels.enumerate() {
            // One address needs no binding: connect picks the port. (More are bound, each
            // leaving the port to connect too: see `port_at_connect`.)
            let source = (self.sources > 1).then(|| {
                let last = (n as u64 % self.sources) + 1;
                let last = u8::try_from(last).expect("at most MAX_SOURCES, checked in new");
                Ipv4Addr::new(127, 0, 0, last)
            });
            let (address, head) = (self.address, self.head.clone());
            self.tasks.spawn(async move {
                call(address, source, &head, label)
                    .await
                    .with_context(|| format!("{label}: GET /slow"))
            });
        }
    }

    /// The next caller to end: `Ok` if it was answered 200; `None` once all have ended.
    /// Cancel-safe.
    pub(crate) async fn next(&mut self) -> Option<anyhow::Result<()>> {
        let joined = self.tasks.join_next().await?;
        Some(joined.unwrap_or_else(|e| Err(anyhow::Error::new(e).context("a caller task failed"))))
    }

    /// Callers still waiting.
    pub(crate) fn waiting(&self) -> usize {
        self.tasks.len()
    }

    /// Aborts every caller still waiting and waits until each has ended.
    pub(crate) async fn abort(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// One caller: connect, write the head, read the answer to its end, check it.
async fn call(
    address: SocketAddr,
    source: Option<Ipv4Addr>,
    head: &str,
    label: Label,
) -> anyhow::Result<()> {
    let mut stream = connect(address, source).await.context("connecting")?;
    let request = format!("{head}{LABEL_HEADER}: {label}\r\nconnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .context("writing the request")?;
    let mut answer = Vec::new();
    (&mut stream)
        .take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .await
        .context("reading the answer")?;
    check(&answer, label)
}

async fn connect(address: SocketAddr, source: Option<Ipv4Addr>) -> std::io::Result<TcpStream> {
    match source {
        None => TcpStream::connect(address).await,
        Some(source) => {
            let socket = TcpSocket::new_v4()?;
            port_at_connect(&socket)?;
            socket.bind(SocketAddrV4::new(source, 0).into())?;
            socket.connect(address).await
        }
    }
}

/// Leaves the choice of `socket`'s port to `connect` (`IP_BIND_ADDRESS_NO_PORT`):
/// bound to a source address, it takes a port there only once the destination is known, as an
/// unbound socket does. Otherwise `bind` would pick one first, among the half of the range
/// `connect` leaves to it, a search that slows down as thousands are taken.
#[cfg(target_os = "linux")]
fn port_at_connect(socket: &TcpSocket) -> std::io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: the descriptor is the socket's own, open for the call, and the option's value is
    // a `c_int` that outlives it, passed with its size.
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&raw const on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    match set {
        -1 => Err(std::io::Error::last_os_error()),
        _ => Ok(()),
    }
}

/// Elsewhere `bind` picks the port.
#[cfg(not(target_os = "linux"))]
fn port_at_connect(_socket: &TcpSocket) -> std::io::Result<()> {
    Ok(())
}

/// Whether `answer`, read to the connection's end, is a 200 whose JSON body names `label`.
fn check(answer: &[u8], label: Label) -> anyhow::Result<()> {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut response = httparse::Response::new(&mut headers);
    let parsed = response.parse(answer).context("the answer is not HTTP")?;
    let httparse::Status::Complete(head_len) = parsed else {
        bail!(
            "the connection closed after {} bytes, mid-head",
            answer.len()
        );
    };
    let status = response.code.unwrap_or(0);
    let body = &answer[head_len..];
    let json: serde_json::Value =
        serde_json::from_slice(body).with_context(|| format!("its {status} answer is not JSON"))?;
    let named = json.get("request").and_then(|v| v.as_str());
    if status != 200 || named != Some(label.to_string().as_str()) {
        bail!("answered {status} {json}, not 200");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use tokio::net::TcpListener;

    use super::*;

    /// Past one address's ports the callers go out from 127.0.0.1, 127.0.0.2, ... in turn:
    /// seen from a plain listener, which accepts their connections and reads their heads.
    #[tokio::test]
    async fn callers_spread_over_source_addresses() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("an address");
        let mut callers = Callers::new(address, "token", 2).expect("callers");
        callers.send(4);
        let mut sources = BTreeSet::new();
        let mut streams = Vec::new();
        for _ in 0..4 {
            let accepted = tokio::time::timeout(Duration::from_secs(15), listener.accept()).await;
            let (stream, peer) = accepted.expect("a caller connects").expect("accepted");
            sources.insert(peer.ip());
            streams.push(stream);
        }
        let expected =
            BTreeSet::from(["127.0.0.1", "127.0.0.2"].map(|ip| ip.parse().expect("an IP")));
        assert_eq!(sources, expected);
        // Each head carries the token and a label of its own, and asks to close.
        let mut head = vec![0; 512];
        let read = tokio::time::timeout(Duration::from_secs(15), streams[0].read(&mut head)).await;
        let head = String::from_utf8_lossy(&head[..read.expect("a head").expect("read")]);
        assert!(head.starts_with("GET /slow HTTP/1.1\r\n"), "{head}");
        assert!(head.contains("\r\nlab-token: token\r\n"), "{head}");
        assert!(head.contains("\r\nlab-request: S"), "{head}");
        assert!(head.ends_with("\r\nconnection: close\r\n\r\n"), "{head}");
        assert_eq!(callers.waiting(), 4);
        callers.abort().await;
        assert!(
            Callers::new(address, "token", 255).is_err(),
            "at most 254 sources"
        );
        assert!(
            Callers::new(address, "to\r\nken", 1).is_err(),
            "a plain token"
        );
    }

    /// Only a 200 that names the caller's own label passes.
    #[test]
    fn an_answer_passes_only_as_200_naming_its_label() {
        let label = Label::slow(1).next().expect("S1");
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 33\r\n\r\n{\"request\":\"S1\",\"pool\":\"shared\"}";
        assert!(check(ok, label).is_ok());
        let other = b"HTTP/1.1 200 OK\r\n\r\n{\"request\":\"S2\"}";
        assert!(check(other, label).is_err());
        let refused = b"HTTP/1.1 503 Service Unavailable\r\n\r\n{\"request\":\"S1\"}";
        let refusal = check(refused, label).expect_err("503");
        assert!(refusal.to_string().contains("503"), "{refusal:#}");
        assert!(check(b"HTTP/1.1 200 OK\r\ncontent-le", label).is_err());
        assert!(check(b"", label).is_err());
    }
}
