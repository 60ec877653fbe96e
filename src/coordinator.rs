//! The coordinator: one policy run, step by step (contract section 3). Every step waits on an
//! observer event, a response or a join; the only timer is the safety timeout that fails a
//! stalled step.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail, ensure};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinError, JoinSet};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::admission::ledger::{Event, WorkEvent};
use crate::admission::section::WorkSection;
use crate::admission::token::{RunToken, TOKEN_HEADER};
use crate::faults::Faults;
use crate::label::{LABEL_HEADER, Label};
use crate::model::Phase;
use crate::policy::{Held, Policy};
use crate::report::{Evidence, FastResponse, Observed, PolicyReport, ResponseRecord};
use crate::server::{Server, ServerSummary, Stopped};

/// The longest any one step may wait before the run is failed as stalled.
pub const SAFETY_TIMEOUT: Duration = Duration::from_secs(5);

/// One policy run: its report, and why it failed if it did.
#[derive(Debug)]
pub struct PolicyRun {
    /// The policy's report, partial where a failure cut the sequence short.
    pub report: PolicyReport,
    /// The one-line reason the run failed (a stall, an error, a task that did not stop).
    pub failure: Option<String>,
}

/// Runs one policy on its own fresh server, pools and gate, then closes everything it opened
/// before assembling the report.
pub async fn run_policy(policy: Policy, held: Held) -> PolicyRun {
    run_policy_with(policy, held, Faults::default()).await
}

/// [`run_policy`] with `faults` injected: how tests show that every unhappy path ends the run
/// with `failure` set and everything closed, joined and returned.
pub async fn run_policy_with(policy: Policy, held: Held, faults: Faults) -> PolicyRun {
    let token = match RunToken::generate() {
        Ok(token) => token,
        Err(e) => {
            return PolicyRun {
                report: PolicyReport::assemble(policy, held, Evidence::nothing_ran(policy)),
                failure: Some(format!("cannot draw a random run token from the OS: {e}")),
            };
        }
    };
    let (observer, events) = mpsc::unbounded_channel();
    let section = WorkSection::with_faults(policy, token.clone(), observer, faults.clone());
    let section = Arc::new(section);
    let mut observed = Observed::default();
    let (failure, client_threads_stopped, server) =
        match Session::open(section.clone(), events, &token).await {
            Err(e) => (Some(format!("{e:#}")), true, None),
            Ok(mut session) => {
                let sequence = session.sequence(held, &faults, &mut observed).await;
                let closed = session.close().await;
                // Both can fail for one cause: a panicking handler breaks its caller's request
                // (the sequence's error) and its connection task (the close's). Say both.
                let failure = match (sequence.err(), closed.failure) {
                    (Some(e), Some(also)) => Some(format!("{e:#}; then {also}")),
                    (Some(e), None) => Some(format!("{e:#}")),
                    (None, failure) => failure,
                };
                (failure, closed.callers_stopped, closed.server)
            }
        };
    let evidence = Evidence {
        work_events: section.events(),
        ledger: section.audit(),
        observed,
        final_state: section.final_state(),
        client_threads_stopped,
        server,
    };
    PolicyRun {
        report: PolicyReport::assemble(policy, held, evidence),
        failure,
    }
}

/// The server, client and callers of one policy run.
struct Session {
    section: Arc<WorkSection>,
    events: mpsc::UnboundedReceiver<WorkEvent>,
    client: reqwest::Client,
    base: String,
    /// The slow callers; each returns its reply.
    callers: JoinSet<anyhow::Result<Reply>>,
    /// The admitted slow callers, to check which are still waiting for their response.
    held: Vec<(Label, AbortHandle)>,
    stop_server: oneshot::Sender<()>,
    server: tokio::task::JoinHandle<Stopped>,
}

/// What is left once a session has closed.
struct Closed {
    callers_stopped: bool,
    server: Option<ServerSummary>,
    failure: Option<String>,
}

/// A response as a caller received it.
#[derive(Debug)]
struct Reply {
    request: Label,
    status: u16,
    body: serde_json::Value,
    /// The ledger's last `seq` when the response had arrived.
    after_event: u64,
}

impl Session {
    /// Builds the client, binds `127.0.0.1:0` and starts serving.
    async fn open(
        section: Arc<WorkSection>,
        events: mpsc::UnboundedReceiver<WorkEvent>,
        token: &RunToken,
    ) -> anyhow::Result<Self> {
        let value = HeaderValue::from_str(&token.header_value()).context("the run token")?;
        let headers = HeaderMap::from_iter([(HeaderName::from_static(TOKEN_HEADER), value)]);
        let client = client(headers).context("building the HTTP client")?;
        let server = Server::bind().await.context("binding 127.0.0.1:0")?;
        let base = format!("http://{}", server.address());
        let (stop_server, stop) = oneshot::channel::<()>();
        let shutdown = async {
            // A dropped sender also means stop.
            let _ = stop.await;
        };
        let server = tokio::spawn(server.serve(section.clone(), shutdown, SAFETY_TIMEOUT));
        Ok(Session {
            section,
            events,
            client,
            base,
            callers: JoinSet::new(),
            held: Vec::new(),
            stop_server,
            server,
        })
    }

    /// Steps 2 to 8 of the sequence, recording what is observed as it happens.
    async fn sequence(
        &mut self,
        held: Held,
        faults: &Faults,
        observed: &mut Observed,
    ) -> anyhow::Result<()> {
        // 2–3. Slow requests one after another, each until the server has decided it.
        for request in Label::held(held) {
            let caller = self.callers.spawn(self.call(request));
            let decision = within(self.decision(request), || {
                format!("no admission decision for {request}")
            })
            .await??;
            if decision == Event::Held {
                self.held.push((request, caller.clone()));
                if faults.caller_disconnects == Some(request) {
                    return self.disconnect(request, caller).await;
                }
                continue;
            }
            // Refused: wait for its caller's actual 503. While the gate is closed the refused
            // caller is the only one that can finish.
            let reply = within(self.callers.join_next(), || {
                format!("{request} was refused but its caller got no response")
            })
            .await
            .and_then(joined)?;
            ensure!(
                reply.request == request,
                "{} received a response while its work was held at the gate",
                reply.request
            );
            observed.responses.push(reply.record(Phase::BeforeRelease));
        }

        if faults.foreign_requests > 0 {
            self.intrude(faults.foreign_requests).await?;
        }

        // 4. What the observer sees with the slow work held.
        observed.observer_before_fast = Some(self.section.snapshot());

        // 5. F1, and its actual response.
        let f1 = self.call(Label::F1);
        let f1 = within(f1, || "F1 got no response".into()).await??;
        observed.fast_response_before_release = Some(FastResponse {
            request: f1.request,
            status: f1.status,
            body: f1.body.clone(),
        });
        observed.responses.push(f1.record(Phase::BeforeRelease));

        // 6. The held work is still there, and its callers still wait.
        observed.observer_after_fast_before_release = Some(self.section.snapshot());
        let pending = self.held.iter().filter(|(_, caller)| !caller.is_finished());
        observed.slow_callers_pending_before_release =
            Some(pending.map(|&(request, _)| request).collect());

        // 7. Release, then every held caller's response and every caller task joined.
        self.section.open_gate();
        while !self.callers.is_empty() {
            let reply = within(self.callers.join_next(), || {
                "a released slow caller got no response".into()
            })
            .await
            .and_then(joined)?;
            observed.responses.push(reply.record(Phase::AfterRelease));
        }

        // 8. New probes after release: not replays of refused work.
        for probe in [Label::SlowAfter, Label::FastAfter] {
            let reply = self.call(probe);
            let reply = within(reply, || format!("{probe} got no response")).await??;
            observed.responses.push(reply.record(Phase::AfterRelease));
        }
        Ok(())
    }

    fn call(&self, request: Label) -> impl Future<Output = anyhow::Result<Reply>> + use<> {
        call(
            self.client.clone(),
            &self.base,
            request,
            self.section.clone(),
        )
    }

    /// Waits for the observer's decision on `request`: `held` or `refused`. A caller that ends
    /// first fails the run at once: while the gate is closed, no caller has a reason to.
    async fn decision(&mut self, request: Label) -> anyhow::Result<Event> {
        loop {
            tokio::select! {
                // Events first: a refusal is recorded before its 503 is even built.
                biased;
                event = self.events.recv() => match event {
                    Some(e) if e.request == Some(request)
                        && matches!(e.event, Event::Held | Event::Refused) => return Ok(e.event),
                    Some(_) => {}
                    None => bail!("the control observer stopped before deciding {request}"),
                },
                ended = self.callers.join_next(), if !self.callers.is_empty() => {
                    let reply = joined(ended)?;
                    bail!(
                        "{} received HTTP {} while waiting for {request}'s admission decision",
                        reply.request,
                        reply.status
                    );
                }
            }
        }
    }

    /// Injected fault: `request`'s caller drops its connection while its work is held. Waits
    /// for the server to record the work leaving the section, then fails the run.
    async fn disconnect(&mut self, request: Label, caller: AbortHandle) -> anyhow::Result<()> {
        caller.abort();
        let left = async {
            while let Some(event) = self.events.recv().await {
                if event.request == Some(request) && event.event == Event::Finished {
                    return Some(event);
                }
            }
            None
        };
        let left = within(left, || format!("{request}'s work never left the section"));
        match left.await? {
            Some(event) if event.cancelled => bail!(
                "{request}'s caller disconnected while its work was held; the work left the \
                 section (work event {}, finished, cancelled) and returned its permit",
                event.seq
            ),
            _ => {
                bail!("{request}'s caller disconnected, but the section never recorded it leaving")
            }
        }
    }

    /// Intrusion: `count` requests without the run's token, as another local process might
    /// send. Each must be refused with 403 before admission.
    async fn intrude(&self, count: usize) -> anyhow::Result<()> {
        let outsider = client(HeaderMap::new()).context("building the outsider's client")?;
        let intruders = [Label::Slow(1), Label::F1].into_iter().cycle().take(count);
        for request in intruders {
            let url = format!("{}{}", self.base, request.route());
            let sent = outsider
                .get(url)
                .header(LABEL_HEADER, request.to_string())
                .send();
            let response = within(sent, || "a foreign request got no response".into()).await?;
            let status = response.context("a foreign request failed")?.status();
            ensure!(
                status == reqwest::StatusCode::FORBIDDEN,
                "a request without the run's token got HTTP {status}, not 403"
            );
        }
        Ok(())
    }

    /// Step 9, on every path: opens the gate so held work can leave, stops and joins every
    /// caller, then stops the server and joins it (it drains its connections within the safety
    /// timeout and aborts what is left).
    async fn close(mut self) -> Closed {
        // Graceful shutdown waits for handlers, and a held handler waits for the gate
        // (NOTES.md pitfall 4): open it first.
        self.section.open_gate();
        // After a complete sequence every caller has been joined; after a failure, abort the
        // rest. Their connections close and the server's handlers leave the section.
        self.callers.abort_all();
        let mut failure = None;
        while let Some(joined) = self.callers.join_next().await {
            if let Err(e) = joined
                && e.is_panic()
            {
                failure.get_or_insert(format!("a client task panicked: {e}"));
            }
        }
        let callers_stopped = self.callers.is_empty();

        let _ = self.stop_server.send(());
        match self.server.await {
            Ok(stopped) => Closed {
                callers_stopped,
                server: Some(stopped.summary),
                failure: failure.or(stopped.error),
            },
            // The server task panicked: its listener and connections were dropped with it, but
            // nothing is left to count them.
            Err(e) => Closed {
                callers_stopped,
                server: None,
                failure: failure.or(Some(format!("the server task failed: {e}"))),
            },
        }
    }
}

impl Reply {
    fn record(self, phase: Phase) -> ResponseRecord {
        ResponseRecord {
            request: self.request,
            route: self.request.route(),
            status: self.status,
            body: self.body,
            phase,
            after_event: self.after_event,
        }
    }
}

/// A client for loopback only: inherited proxy settings would send the lab's requests elsewhere
/// (NOTES.md pitfall 2). `headers` go with every request.
fn client(headers: HeaderMap) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .default_headers(headers)
        .build()
}

/// One caller: `GET <route>` with the request's label, and the whole JSON response, placed on
/// the ledger's axis by the last event recorded when it arrived.
fn call(
    client: reqwest::Client,
    base: &str,
    request: Label,
    section: Arc<WorkSection>,
) -> impl Future<Output = anyhow::Result<Reply>> + use<> {
    let route = request.route();
    let url = format!("{base}{route}");
    async move {
        let response = client
            .get(url)
            .header(LABEL_HEADER, request.to_string())
            .send()
            .await
            .with_context(|| format!("{request}: GET {route} failed"))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .with_context(|| format!("{request}: reading the {status} response failed"))?;
        let after_event = section.last_seq();
        let body = serde_json::from_slice(&bytes)
            .with_context(|| format!("{request}: the {status} response is not JSON"))?;
        Ok(Reply {
            request,
            status,
            body,
            after_event,
        })
    }
}

/// Waits for `step`, or fails the run as stalled after the safety timeout.
async fn within<T>(
    step: impl Future<Output = T>,
    stalled: impl FnOnce() -> String,
) -> anyhow::Result<T> {
    tokio::time::timeout(SAFETY_TIMEOUT, step)
        .await
        .map_err(|_| {
            anyhow!(
                "stalled: {} within {} s",
                stalled(),
                SAFETY_TIMEOUT.as_secs()
            )
        })
}

/// The reply of a joined caller task, or why there is none.
fn joined(joined: Option<Result<anyhow::Result<Reply>, JoinError>>) -> anyhow::Result<Reply> {
    match joined {
        Some(Ok(reply)) => reply,
        Some(Err(e)) => Err(anyhow!("a client task did not finish: {e}")),
        None => Err(anyhow!("no client task was left to answer")),
    }
}
