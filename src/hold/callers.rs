//! The callers of one measurement: a task per held request, each on its own loopback
//! connection, with the run token and its label, spread over 127.0.0.x source addresses so no
//! address runs out of ephemeral ports. Each checks its own answer: 200 naming its label.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use tokio::task::JoinSet;

use crate::coordinator::client;
use crate::label::{LABEL_HEADER, Label};

/// The most source addresses used: 127.0.0.1 through 127.0.0.254.
const MAX_SOURCES: u64 = crate::limits::MAX_SOURCE_ADDRESSES;

/// The callers of one measurement. Dropping it aborts those still waiting; [`Callers::abort`]
/// also waits until each has ended, so their connections are closed.
#[derive(Debug)]
pub(crate) struct Callers {
    url: String,
    /// One client per source address.
    clients: Vec<reqwest::Client>,
    tasks: JoinSet<Result<(), String>>,
}

impl Callers {
    /// Callers of the front at `address` presenting `token`, going out from `sources`
    /// addresses, 127.0.0.1 onwards.
    pub(crate) fn new(address: SocketAddr, token: &str, sources: u64) -> Result<Callers, String> {
        // At least one client, so that every caller has one.
        let sources = sources.max(1);
        if sources > MAX_SOURCES {
            return Err(format!(
                "{sources} source addresses are needed; the lab uses at most {MAX_SOURCES}"
            ));
        }
        let headers = client::token_header(token).map_err(|e| format!("{e:#}"))?;
        let clients = (1..=sources)
            .map(|n| {
                let last = u8::try_from(n).expect("at most MAX_SOURCES, checked above");
                let source = Ipv4Addr::new(127, 0, 0, last);
                // Loopback only, inherited proxy settings ignored, the token on every request.
                let builder = client::loopback_builder(headers.clone());
                // Binding a source address takes a port at bind time, a search that slows
                // down as thousands are taken; one address needs no binding: connect picks.
                let builder = if sources > 1 {
                    builder.local_address(IpAddr::V4(source))
                } else {
                    builder
                };
                builder
                    // A connection that has answered closes rather than idles in a pool, so
                    // the parent's descriptors come back as the answers do.
                    .pool_max_idle_per_host(0)
                    .build()
                    .map_err(|e| format!("building the HTTP client for {source}: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Callers {
            url: format!("http://{address}/slow"),
            clients,
            tasks: JoinSet::new(),
        })
    }

    /// Sends `S1` through `S<count>`, a task each, round-robin over the source addresses.
    pub(crate) fn send(&mut self, count: u32) {
        let labels = Label::slow(usize::try_from(count).unwrap_or(usize::MAX));
        for (n, label) in labels.enumerate() {
            let client = &self.clients[n % self.clients.len()];
            let request = client
                .get(&self.url)
                .header(LABEL_HEADER, label.to_string());
            self.tasks.spawn(async move {
                let response = request.send().await.map_err(|e| {
                    format!("{label}: GET /slow failed: {:#}", anyhow::Error::new(e))
                })?;
                let status = response.status().as_u16();
                let body = response.bytes().await.map_err(|e| {
                    format!(
                        "{label}: reading its {status} answer: {:#}",
                        anyhow::Error::new(e)
                    )
                })?;
                let body: serde_json::Value = serde_json::from_slice(&body)
                    .map_err(|e| format!("{label}: its {status} answer is not JSON: {e}"))?;
                let named = body.get("request").and_then(|v| v.as_str());
                if status != 200 || named != Some(label.to_string().as_str()) {
                    return Err(format!("{label}: answered {status} {body}, not 200"));
                }
                Ok(())
            });
        }
    }

    /// The next caller to end: `Ok` if it was answered 200; `None` once all have ended.
    /// Cancel-safe.
    pub(crate) async fn next(&mut self) -> Option<Result<(), String>> {
        let joined = self.tasks.join_next().await?;
        Some(joined.unwrap_or_else(|e| Err(format!("a caller task failed: {e}"))))
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use tokio::net::TcpListener;

    use super::*;

    /// Past one address's ports the callers go out from 127.0.0.1, 127.0.0.2, ... in turn:
    /// seen from a plain listener, which accepts their connections and answers nothing.
    #[tokio::test]
    async fn callers_spread_over_source_addresses() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("an address");
        let mut callers = Callers::new(address, "token", 2).expect("callers");
        callers.send(4);
        let mut sources = BTreeSet::new();
        let mut streams = Vec::new();
        for _ in 0..4 {
            let accepted = tokio::time::timeout(Duration::from_secs(60), listener.accept()).await;
            let (stream, peer) = accepted.expect("a caller connects").expect("accepted");
            sources.insert(peer.ip());
            streams.push(stream);
        }
        let expected =
            BTreeSet::from(["127.0.0.1", "127.0.0.2"].map(|ip| ip.parse().expect("an IP")));
        assert_eq!(sources, expected);
        assert_eq!(callers.waiting(), 4);
        callers.abort().await;
        assert!(
            Callers::new(address, "token", 255).is_err(),
            "at most 254 sources"
        );
    }
}
