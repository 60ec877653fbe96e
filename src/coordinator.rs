//! The coordinator: one policy run, step by step (contract section 3). Every step waits on an
//! observer event, a response or a join; the only timer is the safety timeout that fails a
//! stalled step.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail, ensure};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinError, JoinSet};

use crate::admission::ledger::{Event, WorkEvent};
use crate::admission::section::WorkSection;
use crate::admission::token::{RunToken, TOKEN_HEADER};
use crate::faults::Faults;
use crate::label::{LABEL_HEADER, Label};
use crate::model::Phase;
use crate::policy::{Held, Policy};
use crate::report::{Evidence, FastResponse, Observed, PolicyReport, ResponseRecord};
use crate::resources::{self, ResourceEvidence, Resources};
use crate::server::{self, Census, Front, Running, ServerSummary};

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

impl PolicyRun {
    /// Why this run does not count as a match, in one line: its failure, or else its first
    /// difference from the model. `None` when it ran to the end and matched.
    pub fn reason(&self) -> Option<String> {
        if let Some(failure) = &self.failure {
            return Some(failure.clone());
        }
        let mismatches = &self.report.model.mismatches;
        let first = mismatches.first()?;
        let more = match mismatches.len() {
            1 => String::new(),
            n => format!(" (and {} more in model.mismatches)", n - 1),
        };
        Some(format!(
            "observations differ from the policy model: {first}{more}"
        ))
    }
}

/// Runs one policy on its own fresh async server, pools and gate, then closes everything it
/// opened before assembling the report.
pub async fn run_policy(policy: Policy, held: Held) -> PolicyRun {
    run_policy_with(Front::Async, policy, held, Faults::default()).await
}

/// [`run_policy`] on either server `front`, with `faults` injected: how tests show that every
/// unhappy path ends the run with `failure` set and everything closed, joined and returned.
pub async fn run_policy_with(
    front: Front,
    policy: Policy,
    held: Held,
    faults: Faults,
) -> PolicyRun {
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
    let permits = front.permits();
    let section =
        WorkSection::with_faults(policy, permits, token.clone(), observer, faults.clone());
    let section = Arc::new(section);
    let census = Arc::new(Census::default());
    let mut observed = Observed::default();
    let mut resources = ResourceEvidence::default();
    let (failure, callers, server) =
        match Session::open(front, section.clone(), census.clone(), events, &token) {
            Err(e) => (Some(format!("{e:#}")), Callers::default(), None),
            Ok(mut session) => {
                let sequence = session.sequence(held, &faults, &mut observed, &mut resources);
                let sequence = sequence.await;
                let closed = session.close(sequence.is_err()).await;
                // Both can fail for one cause: a panicking handler breaks its caller's request
                // (the sequence's error) and its connection task (the close's). Say both.
                let failure = match (sequence.err(), closed.failure) {
                    (Some(e), Some(also)) => Some(format!("{e:#}; then {also}")),
                    (Some(e), None) => Some(format!("{e:#}")),
                    (None, failure) => failure,
                };
                (failure, closed.callers, closed.server)
            }
        };
    resources.after_run = Some(count(&section, &census));
    let evidence = Evidence {
        resources,
        work_events: section.events(),
        ledger: section.audit(),
        observed,
        final_state: section.final_state(),
        client_threads_stopped: callers.joined == callers.spawned,
        client_tasks_aborted: callers.aborted,
        server,
    };
    PolicyRun {
        report: PolicyReport::assemble(policy, held, evidence),
        failure,
    }
}

/// The resources of the process now.
fn count(section: &WorkSection, census: &Census) -> Resources {
    Resources {
        os_threads: resources::os_threads(),
        connection_handlers: census.live(),
        held_at_gate: section.snapshot().held_at_gate.len(),
    }
}

/// The server, client and callers of one policy run.
struct Session {
    section: Arc<WorkSection>,
    census: Arc<Census>,
    events: mpsc::UnboundedReceiver<WorkEvent>,
    client: reqwest::Client,
    base: String,
    /// The slow callers; each returns its reply.
    callers: JoinSet<anyhow::Result<Reply>>,
    /// How many were spawned, joined and aborted.
    account: Callers,
    /// The admitted slow callers, to check which are still waiting for their response.
    held: Vec<(Label, AbortHandle)>,
    server: Running,
}

/// The slow callers' account: every spawned task must be joined.
#[derive(Clone, Copy, Debug, Default)]
struct Callers {
    spawned: u64,
    /// Joined by any path: answered, failed, or aborted and then joined.
    joined: u64,
    /// Aborted at close, after a failure.
    aborted: u64,
}

/// What is left once a session has closed.
struct Closed {
    callers: Callers,
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
    /// Builds the client, binds `127.0.0.1:0` and starts serving on `front`.
    fn open(
        front: Front,
        section: Arc<WorkSection>,
        census: Arc<Census>,
        events: mpsc::UnboundedReceiver<WorkEvent>,
        token: &RunToken,
    ) -> anyhow::Result<Self> {
        let value = HeaderValue::from_str(&token.header_value()).context("the run token")?;
        let headers = HeaderMap::from_iter([(HeaderName::from_static(TOKEN_HEADER), value)]);
        let client = client(headers).context("building the HTTP client")?;
        let started = server::start(front, section.clone(), census.clone(), SAFETY_TIMEOUT);
        let (address, server) = started.context("binding 127.0.0.1:0")?;
        Ok(Session {
            section,
            census,
            events,
            client,
            base: format!("http://{address}"),
            callers: JoinSet::new(),
            account: Callers::default(),
            held: Vec::new(),
            server,
        })
    }

    /// Steps 2 to 8 of the sequence, recording what is observed as it happens.
    async fn sequence(
        &mut self,
        held: Held,
        faults: &Faults,
        observed: &mut Observed,
        resources: &mut ResourceEvidence,
    ) -> anyhow::Result<()> {
        // 2–3. Slow requests one after another, each until the server has decided it.
        for request in Label::held(held) {
            let caller = self.callers.spawn(self.call(request));
            self.account.spawned += 1;
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
            let reply = within(self.join_caller(), || {
                format!("{request} was refused but its caller got no response")
            })
            .await
            .and_then(joined)?;
            ensure!(
                reply.request == request,
                "{} received a response while its work was held at the gate",
                reply.request
            );
            observed.responses.push(self.record(reply));
        }

        if faults.foreign_requests > 0 {
            self.intrude(faults.foreign_requests).await?;
        }

        // 4. What the observer sees with the slow work held, and what holding it costs.
        observed.observer_before_fast = Some(self.section.snapshot());
        resources.before_fast = Some(count(&self.section, &self.census));

        // 5. F1, and its actual response.
        let f1 = self.call(Label::F1);
        let f1 = within(f1, || "F1 got no response".into()).await??;
        observed.fast_response_before_release = Some(FastResponse {
            request: f1.request,
            status: f1.status,
            body: f1.body.clone(),
        });
        observed.responses.push(self.record(f1));

        // 6. The held work is still there, and its callers still wait.
        observed.observer_after_fast_before_release = Some(self.section.snapshot());
        let pending = self.held.iter().filter(|(_, caller)| !caller.is_finished());
        observed.slow_callers_pending_before_release =
            Some(pending.map(|&(request, _)| request).collect());

        // 7. Release, then every held caller's response and every caller task joined.
        self.section.open_gate();
        while !self.callers.is_empty() {
            let reply = within(self.join_caller(), || {
                "a released slow caller got no response".into()
            })
            .await
            .and_then(joined)?;
            observed.responses.push(self.record(reply));
        }

        // 8. New probes after release: not replays of refused work.
        for probe in [Label::SlowAfter, Label::FastAfter] {
            let reply = self.call(probe);
            let reply = within(reply, || format!("{probe} got no response")).await??;
            observed.responses.push(self.record(reply));
        }
        Ok(())
    }

    /// The next caller to end, joined and counted.
    async fn join_caller(&mut self) -> Option<Result<anyhow::Result<Reply>, JoinError>> {
        let joined = self.callers.join_next().await;
        self.account.joined += u64::from(joined.is_some());
        joined
    }

    /// A reply as the report records it. Its phase is read off the ledger's axis: after
    /// release when the gate had opened by the time the response arrived.
    fn record(&self, reply: Reply) -> ResponseRecord {
        let opened = self.section.gate_opened_at();
        let phase = match opened {
            Some(opened) if opened <= reply.after_event => Phase::AfterRelease,
            _ => Phase::BeforeRelease,
        };
        ResponseRecord {
            request: reply.request,
            route: reply.request.route(),
            status: reply.status,
            body: reply.body,
            phase,
            after_event: reply.after_event,
        }
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
                    self.account.joined += 1;
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
    /// for the server to record the work leaving the section, then fails the run. A handler
    /// blocked at the gate (the threaded front) cannot notice: then the wait runs out, and the
    /// work leaves only when closing opens the gate.
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
        let Ok(left) = tokio::time::timeout(SAFETY_TIMEOUT, left).await else {
            bail!(
                "{request}'s caller disconnected while its work was held, and its handler did \
                 not notice within {} s (a thread blocked at the gate cannot); the work leaves \
                 when the gate opens",
                SAFETY_TIMEOUT.as_secs()
            );
        };
        match left {
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
    async fn close(mut self, failed: bool) -> Closed {
        // Graceful shutdown waits for handlers, and a held handler waits for the gate
        // (NOTES.md pitfall 4): open it first. After a failure the gate may not open (it may be
        // what failed): then abandon it, so held work leaves on either front at once — a task
        // would be cancelled anyway, but a blocked thread can only be told.
        self.section.open_gate();
        if failed {
            self.section.abandon_gate();
        }
        // After a complete sequence every caller has been joined; after a failure, abort the
        // rest. Their connections close and the server's handlers leave the section.
        self.callers.abort_all();
        let mut failure = None;
        while let Some(joined) = self.join_caller().await {
            match joined {
                Err(e) if e.is_cancelled() => self.account.aborted += 1,
                Err(e) => {
                    failure.get_or_insert(format!("a client task panicked: {e}"));
                }
                Ok(_) => {}
            }
        }
        let callers = self.account;

        match self.server.stop().await {
            Ok(stopped) => Closed {
                callers,
                server: Some(stopped.summary),
                failure: failure.or(stopped.error),
            },
            Err(e) => Closed {
                callers,
                server: None,
                failure: failure.or(Some(e)),
            },
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
