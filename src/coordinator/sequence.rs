//! The lab's sequence as an explicit, steppable thing: `next_step().await` performs exactly one
//! step and says what it was. The command line runs it to the end; a live view can run it one
//! step at a time. Every step waits on an observer event, a response or a join — or, for a front
//! on runtimes of its own, on a reading of its heartbeat or accept queue; the only timer is the
//! safety timeout that fails a stalled step.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::anyhow;
use hyper::header::HeaderMap;

use super::client::Received;
use super::failure::{Cause, Failure, Left, Step, setup, waited};
use super::session::{self, CallerTasks, Session};
use super::{Options, PolicyRun};
use crate::admission::ledger::Event;
use crate::admission::section::WorkSection;
use crate::admission::token::RunToken;
use crate::child::awake_within;
use crate::evidence::{
    Beat, Evidence, ExecutorEvidence, FastResponse, Moment, Observed, ServerSummary, Unread,
};
use crate::executor::{Executor, Lane};
use crate::label::Label;
use crate::policy::{Front, Held, Policy};
use crate::report::PolicyReport;
use crate::resources::ResourceEvidence;
use crate::server::{self, FrontCensus, Hosting};

/// One step of the sequence, as planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planned {
    /// Send `S<n>` and wait for its admission decision (and, if refused, its 503).
    Slow(Label),
    /// Record what the observer sees, send F1 while the slow work is held, and wait for its
    /// response.
    Fast,
    /// Open the gate, and wait for every held caller's response.
    Release,
    /// Send a new probe after release (`S-after`, `F-after`) and wait for its response.
    Probe(Label),
}

impl Planned {
    /// The steps of a policy run that holds `held` slow requests, in order.
    pub fn all(held: Held) -> impl Iterator<Item = Planned> {
        let slow = Label::held(held).map(Planned::Slow);
        slow.chain([
            Planned::Fast,
            Planned::Release,
            Planned::Probe(Label::SlowAfter),
            Planned::Probe(Label::FastAfter),
        ])
    }
}

impl std::fmt::Display for Planned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Planned::Slow(request) => {
                write!(f, "send {request} and wait for its admission decision")
            }
            Planned::Fast => f.write_str("send F1 while the slow work is held"),
            Planned::Release => f.write_str("open the gate and collect the held responses"),
            Planned::Probe(request) => write!(f, "send the probe {request}"),
        }
    }
}

/// One policy run in progress: its session and where it is in the sequence.
#[derive(Debug)]
pub struct Run {
    policy: Policy,
    held: Held,
    /// The front and its executor: what the model expects depends on both.
    shape: (Front, Executor),
    /// How many admitted slow requests can hold a thread before the next waits for one.
    lane: Lane,
    session: Session,
    census: Arc<FrontCensus>,
    plan: VecDeque<Planned>,
    observed: Observed,
    resources: ResourceEvidence,
    failure: Option<Failure>,
}

impl Run {
    /// Opens a fresh server, pools and gate for `policy`: step 1. `Err` is the finished
    /// report of a run that could not start.
    pub fn open(policy: Policy, held: Held, options: Options) -> Result<Run, Box<PolicyRun>> {
        Run::open_at(policy, held, options, Hosting::default())
    }

    /// [`Run::open`], its front hosting requests as `hosting` says (the gates their slow work
    /// waits at, the most connections it keeps open).
    pub(crate) fn open_at(
        policy: Policy,
        held: Held,
        options: Options,
        hosting: Hosting,
    ) -> Result<Run, Box<PolicyRun>> {
        let (front, executor) = (options.front, options.executor);
        let shape = (front, executor);
        let token = RunToken::generate().map_err(|e| {
            let why = format!("{}: {e}", setup::TOKEN);
            let failure = Failure::new(Step::Start, None, Cause::Setup(why));
            unfinished(policy, held, shape, Evidence::nothing_ran(policy), failure)
        })?;
        let section = WorkSection::new(policy, server::permits(front), token.clone());
        let (section, census) = (Arc::new(section), Arc::new(FrontCensus::default()));
        let session = Session::open(&options, hosting, section.clone(), census.clone(), &token);
        let session = session.map_err(|failure| {
            // The section exists: report it as it stands, and what the process holds now.
            let resources = ResourceEvidence {
                before_fast: None,
                after_run: Some(session::count(&section, &census)),
            };
            let nobody = CallerTasks::default();
            let evidence = evidence(&section, Observed::default(), resources, nobody, None);
            unfinished(policy, held, shape, evidence, failure)
        })?;
        // The front's own runtime is watched: its heartbeat, what it leaves unread or queued.
        let watched = session
            .heartbeat()
            .is_some()
            .then(ExecutorEvidence::default);
        Ok(Run {
            policy,
            held,
            shape,
            lane: executor.lane(front),
            session,
            census,
            plan: Planned::all(held).collect(),
            observed: Observed {
                executor: watched,
                ..Observed::default()
            },
            resources: ResourceEvidence::default(),
            failure: None,
        })
    }

    /// The work section this run's server guards: to subscribe to its events.
    pub(crate) fn section(&self) -> &Arc<WorkSection> {
        &self.session.section
    }

    /// The policy this run enforces, and how many slow requests it holds.
    pub fn inputs(&self) -> (Policy, Held) {
        (self.policy, self.held)
    }

    /// The run's own client (it presents the run's token): a classroom sends the room's
    /// requests through it, so they meet the run's front exactly as the sequence's do.
    pub(crate) fn client(&self) -> &super::client::Client {
        &self.session.client
    }

    /// The count of the front's live connection handlers.
    pub(crate) fn census(&self) -> &Arc<FrontCensus> {
        &self.census
    }

    /// The step `next_step` would perform, if any is left and nothing failed.
    pub fn upcoming(&self) -> Option<Planned> {
        self.plan
            .front()
            .copied()
            .filter(|_| self.failure.is_none())
    }

    /// What has been observed so far.
    pub fn observed(&self) -> &Observed {
        &self.observed
    }

    /// Performs the next step: `None` when none is left (or an earlier one failed), else the
    /// step with its failure if it failed. A failed step ends the sequence.
    pub async fn next_step(&mut self) -> Option<Result<Planned, Failure>> {
        let step = self.upcoming()?;
        self.plan.pop_front();
        let done = match step {
            Planned::Slow(request) => self.slow(request).await,
            Planned::Fast => self.fast().await,
            Planned::Release => self.release().await,
            Planned::Probe(request) => self.probe(request).await,
        };
        Some(done.map(|()| step).inspect_err(|failure| {
            self.failure = Some(failure.clone());
        }))
    }

    /// Runs every step left, stopping at the first that fails.
    pub(crate) async fn run_to_end(&mut self) {
        while let Some(Ok(_)) = self.next_step().await {}
    }

    /// Step 9 and 10: closes everything the run opened, on every path, then assembles the
    /// report from the evidence. A run closed before its last step is a failed run.
    pub async fn close(mut self) -> PolicyRun {
        if self.failure.is_none()
            && let Some(&step) = self.plan.front()
        {
            let next = Cause::ClosedEarly(step.to_string());
            self.failure = Some(Failure::new(Step::Close, None, next));
        }
        let section = self.session.section.clone();
        let closed = self.session.close(self.failure.is_some()).await;
        // Both can fail for one cause: a panicking handler breaks its caller's request (the
        // sequence's failure) and its connection task (the close's). Say both.
        let failure = Failure::both(self.failure, closed.failure);
        self.resources.after_run = Some(session::count(&section, &self.census));
        let (observed, resources) = (self.observed, self.resources);
        let evidence = evidence(&section, observed, resources, closed.callers, closed.server);
        PolicyRun {
            report: PolicyReport::assemble_on(self.policy, self.held, self.shape, evidence),
            failure,
        }
    }

    /// Steps 2–3: a slow request, until the server has decided it. Sent one after another, so
    /// the first ones take every slow permit.
    async fn slow(&mut self, request: Label) -> Result<(), Failure> {
        self.heartbeat_started(request).await?;
        if self.saturated() {
            // Every worker that could read it is blocked: it is answered after release.
            let queued = accept_queue(&self.session, Step::Slow, request)?;
            let caller = self.session.send_fresh(request);
            self.session.hold(request, caller);
            return self.unread(Step::Slow, request, queued).await;
        }
        self.keep_a_worker_listening();
        let caller = self.session.send(request);
        let (at, bounds) = ((Step::Slow, Some(request)), self.session.bounds());
        // Every thread the slow work can run on is held: admitted work waits for one.
        let lane_full = matches!(self.lane, Lane::Own(threads, _) if self.blocked() >= threads);
        let admitted = AtomicBool::new(false);
        let decision = self.session.decision(request, lane_full, &admitted);
        let decision = bounds
            .within(decision, at, || {
                if admitted.load(Ordering::Relaxed) {
                    waited::gate(request)
                } else {
                    waited::decision(request)
                }
            })
            .await??;
        if decision == Event::Admitted {
            self.session.hold(request, caller);
            if let Some(watched) = &mut self.observed.executor {
                watched.queued.push(request);
            }
            self.beat(Moment::Queued, Some(request));
            return Ok(());
        }
        if decision == Event::Held {
            self.beat(Moment::Held, Some(request));
            self.session.hold(request, caller.clone());
            if self.session.hooks().caller_leaves(request) {
                return Err(self.disconnect(request, caller).await);
            }
            return Ok(());
        }
        // Refused: wait for its caller's actual 503. While the gate is closed the refused caller
        // is the only one that can finish.
        let reply = self.session.next_reply(at, || waited::refusal(request));
        let reply = reply.await?;
        if reply.request != request {
            return Err(Failure::new(
                at.0,
                at.1,
                Cause::AnsweredEarly {
                    request: reply.request,
                    status: reply.status,
                    while_waiting_for: "while its work was held at the gate".into(),
                },
            ));
        }
        self.respond(reply);
        Ok(())
    }

    /// Steps 4–6: what the observer sees with the slow work held and what holding it costs;
    /// F1 and its actual response; then the held work still there and its callers waiting.
    async fn fast(&mut self) -> Result<(), Failure> {
        let hooks = self.session.hooks();
        hooks.before_foreign_requests(self.session.client.address());
        let foreign = hooks.foreign_requests();
        if foreign > 0 {
            self.intrude(foreign).await?;
        }
        self.observed.observer_before_fast = Some(self.session.section.snapshot());
        self.resources.before_fast = Some(session::count(&self.session.section, &self.census));

        if self.saturated() {
            // F1 cannot be read, let alone admitted or refused: its caller waits for release,
            // with the lab's other callers.
            let queued = accept_queue(&self.session, Step::Fast, Label::F1)?;
            self.session.send_fresh(Label::F1);
            self.unread(Step::Fast, Label::F1, queued).await?;
        } else {
            self.keep_a_worker_listening();
            let f1 = self.session.exchange(Step::Fast, Label::F1).await?;
            self.observed.fast_response_before_release = Some(FastResponse {
                request: f1.request,
                status: f1.status,
                body: f1.body.clone(),
            });
            self.respond(f1);
        }
        self.observed.observer_after_fast_before_release = Some(self.session.section.snapshot());
        self.observed.slow_callers_pending_before_release = Some(self.session.pending());
        Ok(())
    }

    /// Step 7: release, then every held caller's response and every caller task joined.
    async fn release(&mut self) -> Result<(), Failure> {
        self.beat(Moment::Release, None);
        self.session.open_gate();
        while self.session.has_callers() {
            let reply = self
                .session
                .next_reply((Step::Release, None), || waited::RELEASED.into());
            let reply = reply.await?;
            self.respond(reply);
        }
        Ok(())
    }

    /// Step 8: a new probe after release — not a replay of refused work.
    async fn probe(&mut self, request: Label) -> Result<(), Failure> {
        let reply = self.session.exchange(Step::Probe, request).await?;
        self.respond(reply);
        Ok(())
    }

    /// Records `reply` among the responses, placed before or after release.
    fn respond(&mut self, reply: Received) {
        let record = self.session.record(reply);
        self.observed.responses.push(record);
    }

    /// With some but not all of the front's workers blocked (`--work block`), wakes a parked
    /// one before a request it must read is sent, so that it holds the runtime's I/O driver.
    fn keep_a_worker_listening(&self) {
        if matches!(self.lane, Lane::Workers(_)) && self.blocked() > 0 && !self.saturated() {
            self.session.wake_a_worker();
        }
    }

    /// Whether every worker of the front's runtime is blocked by held slow work, so that no
    /// request sent now can be read before the gate opens (`--work block` on the async front).
    fn saturated(&self) -> bool {
        matches!(self.lane, Lane::Workers(workers) if self.blocked() >= workers)
    }

    /// How many threads held slow work blocks: every request held at the gate, the sequence's
    /// and (in a classroom) the room's, each on a thread of its own until the gate opens.
    fn blocked(&self) -> usize {
        self.session.section.snapshot().held_at_gate.len()
    }

    /// Waits to see `request` arrive and sit unread: its caller connected, and one more
    /// connection in the listener's accept queue than the `queued` before it was sent (so
    /// another process's connection is not taken for it), and records it with the heartbeat.
    /// Each look is one system call; between looks the run's callers go on sending.
    async fn unread(&mut self, step: Step, request: Label, queued: usize) -> Result<(), Failure> {
        let waiting = || format!("while waiting to see {request} wait unread");
        let fail = |cause| Failure::new(step, Some(request), cause);
        let (bounds, session) = (self.session.bounds(), &mut self.session);
        let arrived = async {
            loop {
                if session.client.has_connected(request) {
                    let now = accept_queue(session, step, request)?;
                    if now > queued {
                        return Ok(now);
                    }
                }
                // A caller that ended (its connection refused, say) will never be seen.
                if let Some(failed) = session.caller_ended(fail, waiting) {
                    return Err(failed);
                }
                tokio::task::yield_now().await;
            }
        };
        let at = (step, Some(request));
        let accept_queue = bounds
            .within(arrived, at, || waited::unread(request))
            .await??;
        let after_event = self.session.section.last_seq();
        if let Some(watched) = &mut self.observed.executor {
            watched.unread.push(Unread {
                request,
                after_event,
                accept_queue,
            });
        }
        self.beat(Moment::Unread, Some(request));
        Ok(())
    }

    /// Before the first request, waits to see the front runtime's heartbeat tick: its
    /// runtime runs tasks. Later readings are compared with this one.
    async fn heartbeat_started(&mut self, request: Label) -> Result<(), Failure> {
        let unstarted = (self.observed.executor.as_ref()).is_some_and(|w| w.heartbeat.is_empty());
        let Some(heartbeat) = self.session.heartbeat().cloned().filter(|_| unstarted) else {
            return Ok(());
        };
        let at = (Step::Start, Some(request));
        let never = || waited::HEARTBEAT.into();
        let bounds = self.session.bounds().leaving_the_runtime_to_the_step();
        let ticked = bounds.within(heartbeat.first_tick(), at, never).await?;
        if !ticked {
            let why = heartbeat.stopped_for(waited::HEARTBEAT_STOPPED);
            return Err(Failure::new(at.0, at.1, Cause::Server(why)));
        }
        self.beat(Moment::Start, None);
        Ok(())
    }

    /// Reads the heartbeat of the front's own runtime, if it has one, at `moment`.
    fn beat(&mut self, moment: Moment, request: Option<Label>) {
        let (Some(heartbeat), Some(watched)) =
            (self.session.heartbeat(), &mut self.observed.executor)
        else {
            return;
        };
        watched.heartbeat.push(Beat {
            moment,
            request,
            after_event: self.session.section.last_seq(),
            ticks: heartbeat.ticks(),
        });
    }

    /// Injected fault: `request`'s caller drops its connection while its work is held. Waits
    /// for the server to record the work leaving the section, then fails the run. A handler
    /// blocked at the gate (the threaded front) cannot notice: then the wait runs out, and the
    /// work leaves only when closing opens the gate.
    async fn disconnect(&mut self, request: Label, caller: tokio::task::AbortHandle) -> Failure {
        caller.abort();
        let timeout = self.session.timeout();
        let left = awake_within(timeout, self.session.left(request)).await;
        let left = match left {
            None => Left::NotNoticed(timeout),
            Some(Some((seq, true))) => Left::Cancelled(seq),
            Some(_) => Left::NeverRecorded,
        };
        Failure::new(Step::Slow, Some(request), Cause::CallerLeft(left))
    }

    /// Intrusion: `count` requests without the run's token, as another local process might
    /// send. Each must be refused with 403 before admission.
    async fn intrude(&self, count: usize) -> Result<(), Failure> {
        let failed = |why: String| Failure::new(Step::Intrude, None, Cause::ForeignNotRefused(why));
        let address = self.session.client.address();
        let no_token = HeaderMap::new();
        let intruders = [Label::Slow(1), Label::F1].into_iter().cycle().take(count);
        for request in intruders {
            let sent = super::client::get(address, request.route().path(), request, &no_token);
            let at = (Step::Intrude, None);
            let response = self
                .session
                .bounds()
                .within(sent, at, || waited::FOREIGN.into())
                .await?;
            let (status, _) =
                response.map_err(|e| failed(format!("a foreign request failed: {e:#}")))?;
            if status != 403 {
                return Err(failed(format!(
                    "a request without the run's token got HTTP {status}, not 403"
                )));
            }
        }
        Ok(())
    }
}

/// The evidence of a run once everything it opened is closed: the section as it stands, what
/// the sequence observed and counted, and how its callers and server ended.
fn evidence(
    section: &WorkSection,
    observed: Observed,
    resources: ResourceEvidence,
    callers: CallerTasks,
    server: Option<ServerSummary>,
) -> Evidence {
    Evidence {
        resources,
        work_events: section.events(),
        ledger: section.audit(),
        observed,
        final_state: section.final_state(),
        client_threads_stopped: callers.joined == callers.spawned,
        client_tasks_aborted: callers.aborted,
        server,
    }
}

/// The report of a run that failed to start, from the `evidence` it left.
fn unfinished(
    policy: Policy,
    held: Held,
    shape: (Front, Executor),
    evidence: Evidence,
    failure: Failure,
) -> Box<PolicyRun> {
    Box::new(PolicyRun {
        report: PolicyReport::assemble_on(policy, held, shape, evidence),
        failure: Some(failure),
    })
}

/// How many connections wait in the front's accept queue, counted before `request` is sent:
/// the requests seen unread so far, and any other process's connection.
fn accept_queue(session: &Session, step: Step, request: Label) -> Result<usize, Failure> {
    let counted = match session.accept_queue() {
        Some(counted) => counted.map_err(anyhow::Error::from),
        None => Err(anyhow!("the front has no runtime of its own to watch")),
    };
    counted.map_err(|why| {
        let why = why.context(format!("reading the front's accept queue for {request}"));
        Failure::new(step, Some(request), Cause::Setup(format!("{why:#}")))
    })
}
