//! The lab's HTTP client: loopback only, with the run token on every request, one caller per
//! request, each response read whole and placed on the ledger's axis.

use std::sync::Arc;

use anyhow::Context;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::admission::section::WorkSection;
use crate::admission::token::{RunToken, TOKEN_HEADER};
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

/// The client of one policy run: requests go to `base` with the run's token.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    section: Arc<WorkSection>,
}

impl Client {
    /// A client sending with `http` (see [`with_token`]) to the server at `base`
    /// (`http://127.0.0.1:PORT`), which serves `section`.
    pub(crate) fn new(http: reqwest::Client, base: String, section: Arc<WorkSection>) -> Self {
        Client {
            http,
            base,
            section,
        }
    }

    /// The server's base URL.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// One caller: `GET <route>` with the request's label, and the whole JSON response, placed
    /// on the ledger's axis by the last event recorded when it arrived. An `Err` says what
    /// failed, and its sources say why (a reqwest error's own text rarely does: refused, reset).
    pub(crate) fn call(
        &self,
        request: Label,
    ) -> impl Future<Output = anyhow::Result<Received>> + Send + use<> {
        let client = self.clone();
        async move {
            let route = request.route();
            let url = format!("{}{route}", client.base);
            let sent = client
                .http
                .get(url)
                .header(LABEL_HEADER, request.to_string());
            let response = sent
                .send()
                .await
                .with_context(|| format!("{request}: GET {route} failed"))?;
            let status = response.status().as_u16();
            let bytes = response
                .bytes()
                .await
                .with_context(|| format!("{request}: reading the {status} response failed"))?;
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
}

/// The HTTP client of a run, presenting `token` on every request. Built before the server
/// starts, so that a run that cannot build it has nothing to stop.
pub(crate) fn with_token(token: &RunToken) -> anyhow::Result<reqwest::Client> {
    let headers = token_header(&token.header_value())?;
    loopback(headers).context("building the HTTP client")
}

/// The header that presents a run's token (as its server wrote it) with every request.
pub(crate) fn token_header(token: &str) -> anyhow::Result<HeaderMap> {
    let value = HeaderValue::from_str(token).context("the run token is not a header value")?;
    Ok(HeaderMap::from_iter([(
        HeaderName::from_static(TOKEN_HEADER),
        value,
    )]))
}

/// A client for loopback only: inherited proxy settings (`HTTP_PROXY`, `ALL_PROXY`, either
/// case) would send the lab's requests elsewhere, so they are ignored. `headers` go with every
/// request.
pub(crate) fn loopback(headers: HeaderMap) -> reqwest::Result<reqwest::Client> {
    loopback_builder(headers).build()
}

/// [`loopback`]'s builder, for a client that needs more settings (a source address, no idle
/// pool).
pub(crate) fn loopback_builder(headers: HeaderMap) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .default_headers(headers)
}
