//! A session: the server, the client and the callers of one policy run — opened before the
//! first step, closed after the last on every path, so nothing the run started outlives it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinError, JoinSet};

use super::Options;
use super::client::{self, Client, Received};
use super::failure::{self, Cause, Failure, Step, waited};
use crate::admission::ledger::{Event, WorkEvent};
use crate::admission::section::WorkSection;
use crate::admission::token::RunToken;
use crate::child::awake_within;
use crate::evidence::{Phase, ResponseRecord, ServerSummary};
use crate::hooks::Hooks;
use crate::label::Label;
use crate::resources::{self, Resources};
use crate::server::runtimes::Heartbeat;
use crate::server::{self, FrontCensus, Hosting, Running};

/// The server, client and callers of one policy run.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) section: Arc<WorkSection>,
    /// The control observer: every ledger event after the session opened.
    events: mpsc::UnboundedReceiver<WorkEvent>,
    /// Kept open while an injected fault silences the observer, so it waits rather than ends.
    _silenced: Option<mpsc::UnboundedSender<WorkEvent>>,
    pub(crate) client: Client,
    /// The callers; each returns its reply.
    callers: JoinSet<anyhow::Result<Received>>,
    /// How many were spawned, joined and aborted.
    account: CallerTasks,
    /// The admitted slow callers, to check which are still waiting for their response.
    held: Vec<(Label, AbortHandle)>,
    server: Running,
    hooks: Arc<dyn Hooks>,
    /// What ends each wait of the session other than its step.
    bounds: Bounds,
}

/// The callers' account: every spawned task must be joined.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CallerTasks {
    pub(crate) spawned: u64,
    /// Joined by any path: answered, failed, or aborted and then joined.
    pub(crate) joined: u64,
    /// Aborted at close, after a failure.
    pub(crate) aborted: u64,
}

/// What is left once a session has closed.
#[derive(Debug)]
pub(crate) struct SessionEnd {
    pub(crate) callers: CallerTasks,
    pub(crate) server: Option<ServerSummary>,
    pub(crate) failure: Option<Failure>,
}

impl Session {
    /// Binds `127.0.0.1:0`, starts the options' front serving `section` on their executor,
    /// hosting requests as `hosting` says, and builds the client.
    pub(crate) fn open(
        options: &Options,
        hosting: Hosting,
        section: Arc<WorkSection>,
        census: Arc<FrontCensus>,
        token: &RunToken,
    ) -> Result<Self, Failure> {
        let Options {
            front,
            executor,
            ref hooks,
            safety_timeout: timeout,
        } = *options;
        let hooks = hooks.clone();
        let setup = |why: String| Failure::new(Step::Start, None, Cause::Setup(why));
        // The observer subscribes before the server exists, so it misses nothing.
        let (_, events) = section.subscribe();
        let (events, silenced) = if !hooks.observer_hears() {
            let (keep, never) = mpsc::unbounded_channel();
            (never, Some(keep))
        } else {
            (events, None)
        };
        // Everything that can fail before the server starts is done first: once it runs, only
        // `close` stops and joins it.
        let headers = client::token_header(&token.header_value());
        let headers = headers.map_err(|e| setup(format!("{e:#}")))?;
        let (address, server) = if executor.front_runtime(front) {
            let started = server::runtimes::start(
                executor,
                section.clone(),
                census.clone(),
                hooks.clone(),
                hosting,
                timeout,
            );
            let (address, running) =
                started.map_err(|e| setup(format!("{}: {e}", failure::setup::RUNTIME)))?;
            (address, Running::Owned(running))
        } else {
            let started = server::bind_loopback().and_then(|bound| {
                let (section, census) = (section.clone(), census.clone());
                server::start_on(
                    front,
                    bound,
                    section,
                    census,
                    hooks.clone(),
                    hosting,
                    timeout,
                )
            });
            started.map_err(|e| setup(format!("{}: {e}", failure::setup::BINDING)))?
        };
        let heartbeat = match &server {
            Running::Owned(running) => Some(running.heartbeat()),
            _ => None,
        };
        let client = Client::new(headers, address, section.clone());
        Ok(Session {
            section,
            events,
            _silenced: silenced,
            client,
            callers: JoinSet::new(),
            account: CallerTasks::default(),
            held: Vec::new(),
            server,
            hooks,
            bounds: Bounds {
                timeout,
                census,
                heartbeat,
            },
        })
    }

    /// What ends the session's waits other than their steps.
    pub(crate) fn bounds(&self) -> Bounds {
        self.bounds.clone()
    }

    /// The heartbeat of the front's own runtime, if it has one.
    pub(crate) fn heartbeat(&self) -> Option<&Arc<Heartbeat>> {
        self.bounds.heartbeat.as_ref()
    }

    /// The longest any one wait may take before the run is failed as stalled.
    pub(crate) fn timeout(&self) -> Duration {
        self.bounds.timeout
    }

    /// Connections waiting in the front's accept queue now, when it runs on runtimes of its own.
    pub(crate) fn accept_queue(&self) -> Option<std::io::Result<usize>> {
        match &self.server {
            Running::Owned(running) => Some(running.accept_queue()),
            _ => None,
        }
    }

    /// Wakes a parked worker of the front's own runtime, if it has one: see
    /// [`crate::server::runtimes::FrontThread`]'s `wake_a_worker`.
    pub(crate) fn wake_a_worker(&self) {
        if let Running::Owned(running) = &self.server {
            running.wake_a_worker();
        }
    }

    /// The run's hooks (none on the command line).
    pub(crate) fn hooks(&self) -> &dyn Hooks {
        &*self.hooks
    }

    /// Starts `request`'s caller as a task of this session.
    pub(crate) fn send(&mut self, request: Label) -> AbortHandle {
        self.account.spawned += 1;
        self.callers.spawn(self.client.call(request))
    }

    /// Starts `request`'s caller on a new connection of its own, to be seen waiting in the
    /// front's accept queue, however many connections other callers left open (the room's
    /// requests go through this client too).
    pub(crate) fn send_fresh(&mut self, request: Label) -> AbortHandle {
        self.account.spawned += 1;
        self.callers.spawn(self.client.call_fresh(request))
    }

    /// Marks `request`'s caller as held: its response must wait for the gate.
    pub(crate) fn hold(&mut self, request: Label, caller: AbortHandle) {
        self.held.push((request, caller));
    }

    /// The held callers still waiting for their response.
    pub(crate) fn pending(&self) -> Vec<Label> {
        let pending = self.held.iter().filter(|(_, caller)| !caller.is_finished());
        pending.map(|&(request, _)| request).collect()
    }

    /// Whether any caller task is still running or unjoined.
    pub(crate) fn has_callers(&self) -> bool {
        !self.callers.is_empty()
    }

    /// Sends `request` and waits for its response, within the safety timeout.
    pub(crate) async fn exchange(&self, step: Step, request: Label) -> Result<Received, Failure> {
        let reply = self.client.call(request);
        let reply = self
            .bounds()
            .within(reply, (step, Some(request)), || waited::response(request))
            .await?;
        reply.map_err(|why| caller_failed((step, Some(request)), why))
    }

    /// The next caller to end, joined and counted, and its reply, within the safety timeout:
    /// `at` is the step and request waiting, `waiting_for` what it waits for in words.
    pub(crate) async fn next_reply(
        &mut self,
        at: (Step, Option<Label>),
        waiting_for: impl FnOnce() -> String,
    ) -> Result<Received, Failure> {
        let bounds = self.bounds();
        let reply = bounds.within(self.join_caller(), at, waiting_for).await?;
        joined(reply).map_err(|why| caller_failed(at, why))
    }

    /// The next caller to end, joined and counted.
    pub(crate) async fn join_caller(
        &mut self,
    ) -> Option<Result<anyhow::Result<Received>, JoinError>> {
        let joined = self.callers.join_next().await;
        self.account.joined += u64::from(joined.is_some());
        joined
    }

    /// Waits for the observer's decision on `request`: `held` or `refused` — or, when
    /// `queued_if_admitted` (every thread its work could run on is held at the gate),
    /// `admitted`: the work then waits for a thread, its permit held. Otherwise an admission
    /// heard on the way sets `admitted`, so a stall can say the work never reached the gate.
    /// A caller that ends first fails the run at once: while the gate is closed, no caller has a
    /// reason to.
    pub(crate) async fn decision(
        &mut self,
        request: Label,
        queued_if_admitted: bool,
        admitted: &AtomicBool,
    ) -> Result<Event, Failure> {
        let at = |cause| Failure::new(Step::Slow, Some(request), cause);
        loop {
            tokio::select! {
                // Events first: a refusal is recorded before its 503 is even built.
                biased;
                event = self.events.recv() => match event {
                    Some(e) if e.request == Some(request) => match e.event {
                        Event::Held | Event::Refused => return Ok(e.event),
                        Event::Admitted if queued_if_admitted => return Ok(e.event),
                        Event::Admitted => admitted.store(true, Ordering::Relaxed),
                        _ => {}
                    },
                    Some(_) => {}
                    None => return Err(at(Cause::ObserverStopped)),
                },
                ended = self.callers.join_next(), if !self.callers.is_empty() => {
                    let waiting = format!("while waiting for {request}'s admission decision");
                    return Err(self.ended_early(ended, at, waiting));
                }
            }
        }
    }

    /// A caller that has ended by now, joined and counted, as the failure it makes
    /// ([`Session::ended_early`]); `None` while every caller is still out.
    pub(crate) fn caller_ended(
        &mut self,
        at: impl Fn(Cause) -> Failure,
        while_waiting_for: impl FnOnce() -> String,
    ) -> Option<Failure> {
        let ended = self.callers.try_join_next()?;
        Some(self.ended_early(Some(ended), at, while_waiting_for()))
    }

    /// The failure a caller that `ended` before the release makes, joined and counted: while
    /// the gate is closed no caller has a reason to end. Its own failure, or the answer it got.
    fn ended_early(
        &mut self,
        ended: Option<Result<anyhow::Result<Received>, JoinError>>,
        at: impl Fn(Cause) -> Failure,
        while_waiting_for: String,
    ) -> Failure {
        self.account.joined += 1;
        match joined(ended) {
            Err(why) => at(Cause::Caller(format!("{why:#}"))),
            Ok(reply) => at(Cause::AnsweredEarly {
                request: reply.request,
                status: reply.status,
                while_waiting_for,
            }),
        }
    }

    /// Waits for the section to record `request`'s work leaving: `Some(seq)` of its
    /// `finished` event, with whether it was cancelled; `None` if the observer's stream ended.
    pub(crate) async fn left(&mut self, request: Label) -> Option<(u64, bool)> {
        while let Some(event) = self.events.recv().await {
            if event.request == Some(request) && event.event == Event::Finished {
                return Some((event.seq, event.cancelled));
            }
        }
        None
    }

    /// Opens the slow gate — unless a test's hook keeps it shut.
    pub(crate) fn open_gate(&self) {
        if self.hooks.gate_opens() {
            self.section.open_gate();
        }
    }

    /// A reply as the report records it. Its phase is read off the ledger's axis: after
    /// release when the gate had opened by the time the response arrived.
    pub(crate) fn record(&self, reply: Received) -> ResponseRecord {
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

    /// The last step, on every path: opens the gate so held work can leave, stops and joins
    /// every caller, then stops the server and joins it (it drains its connections within the
    /// safety timeout and aborts what is left).
    pub(crate) async fn close(mut self, failed: bool) -> SessionEnd {
        // Graceful shutdown waits for handlers, and a held handler waits for the gate: open it
        // first. After a failure the gate may not open (it may be what failed): then abandon
        // it, so held work leaves on either front at once — a task would be cancelled anyway,
        // but a blocked thread can only be told.
        self.open_gate();
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
        // The client closes the connections its callers left open, so the server's handlers end
        // on their own rather than at its shutdown.
        self.client.close();
        let callers = self.account;
        let closing = |why: String| Failure::new(Step::Close, None, Cause::Server(why));
        let stopped = self.server.stop().await;
        let error = server::error_of(&stopped);
        let server = stopped.ok().map(|stopped| stopped.summary);
        SessionEnd {
            callers,
            server,
            // A caller that panicked and a server that did not stop cleanly are both said, in
            // order.
            failure: Failure::both(failure.map(closing), error.map(closing)),
        }
    }
}

/// What ends a wait of the sequence other than the step it waits for: the safety timeout, the
/// front's failing a client (giving up accepting connections, closing one unserved, a handler's
/// panic), or its own runtime's stopping.
#[derive(Clone, Debug)]
pub(crate) struct Bounds {
    timeout: Duration,
    census: Arc<FrontCensus>,
    /// The heartbeat of the front's own runtime, if it has one.
    heartbeat: Option<Arc<Heartbeat>>,
}

impl Bounds {
    /// These bounds, for a wait that ends by itself, and says so, when the front's own runtime
    /// stops (its first tick): the runtime's stop is left to it.
    pub(crate) fn leaving_the_runtime_to_the_step(mut self) -> Bounds {
        self.heartbeat = None;
        self
    }

    /// Waits for `step`. Fails as stalled after the safety timeout, counted in the lab's own
    /// time (a stop of the lab's, Ctrl-Z then fg, is not a stall); or at once, saying why,
    /// once the front has failed a client (given up accepting connections, closed one unserved,
    /// or seen a handler panic), or its own runtime has stopped serving before the close: the run fails for
    /// either anyway, and a request no one will accept or decide would otherwise wait out the
    /// timeout. Either is looked at before the step, so a step that ended because of it (a
    /// caller's connection reset as the front gave up) is not said to have failed first.
    pub(crate) async fn within<T>(
        &self,
        step: impl Future<Output = T>,
        (at, request): (Step, Option<Label>),
        waiting_for: impl FnOnce() -> String,
    ) -> Result<T, Failure> {
        let limit = self.timeout;
        tokio::select! {
            biased;
            why = self.census.failure() => {
                Err(Failure::new(at, request, Cause::Server(why.to_owned())))
            }
            why = front_stopped(self.heartbeat.as_deref()) => {
                Err(Failure::new(at, request, Cause::Server(why)))
            }
            done = awake_within(limit, step) => done.ok_or_else(|| {
                let waiting_for = waiting_for();
                Failure::new(at, request, Cause::Stalled { waiting_for, limit })
            }),
        }
    }
}

/// Once the front's own runtime has stopped serving: that it stopped, with its error if it
/// stopped on one; never for a front without one.
async fn front_stopped(heartbeat: Option<&Heartbeat>) -> String {
    match heartbeat {
        Some(heartbeat) => {
            heartbeat.stopped().await;
            heartbeat.stopped_for(waited::RUNTIME_STOPPED)
        }
        None => std::future::pending().await,
    }
}

/// The resources of the process now.
pub(crate) fn count(section: &WorkSection, census: &FrontCensus) -> Resources {
    Resources {
        os_threads: resources::os_threads(),
        connection_handlers: census.live(),
        held_at_gate: section.snapshot().held_at_gate.len(),
    }
}

/// A caller's HTTP exchange or its task failed, at `step` about `request`.
fn caller_failed((step, request): (Step, Option<Label>), why: anyhow::Error) -> Failure {
    Failure::new(step, request, Cause::Caller(format!("{why:#}")))
}

/// The reply of a joined caller task, or why there is none.
fn joined(joined: Option<Result<anyhow::Result<Received>, JoinError>>) -> anyhow::Result<Received> {
    match joined {
        Some(Ok(reply)) => reply,
        Some(Err(e)) => Err(anyhow::Error::new(e).context("a client task did not finish")),
        None => Err(anyhow::anyhow!("no client task was left to answer")),
    }
}
