//! The `replicas` coordinator: starts the engine (with global permits) and the replica
//! processes, balances the requests round robin — each sent only once the previous one is held
//! or refused, as the lab does — pauses and kills replicas holding permits, releases every
//! gate, stops everything it started on every path, and only then assembles the report.
//!
//! Every step waits on a replica's event, a caller's response, a process's exit or the
//! engine's answer, under the safety timeout. Timers pace only looking: the probes of a lease
//! that has not lapsed yet, Redis's holders read until they drop, the leak watch's probes, and
//! a look at the replicas' processes while an answer is awaited. What is seen, not the pace,
//! decides.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use hyper::header::HeaderMap;
use serde_json::Value;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use super::evidence::{
    CONTINUED_FROM_OUTSIDE, Cleanup, CrashEvidence, EngineEvidence, EngineHolder, LapseSeen,
    PauseEvidence, ReleasedAnswer, ReplicaEvidence, ReplicasEvidence, Sent,
};
use super::inputs::{Engine, ReplicaId, ReplicasInputs};
use super::model::{self, CrashPlan, PausePlan, holder, holds};
use super::report::ReplicasReport;
use crate::admission::ledger::{Event, WorkEvent};
use crate::child::{Stall, seen_stopped_within, watched_within};
use crate::coordinator::SAFETY_TIMEOUT;
use crate::evidence::Decision;
use crate::front_process::{FromFront, FrontProcess, FrontSpec, GlobalSpec, Stream};
use crate::hooks::NoHooks;
// The lab's one catcher of Ctrl-C: a pipe opened only while a run catches, rather than
// Tokio's `signal` feature, which holds descriptors open in every process of the binary.
use crate::interrupts::Interrupts;
use crate::label::Label;
use crate::policy::Front;
use crate::procfs::{self, ProcessStat, is_stopped};
use crate::redis_pool::{GlobalPermits, LocalRedis};

/// How to run: which binary the replicas run, the safety timeout, how long a leak is watched,
/// and where a test steps in.
#[derive(Clone, Debug)]
pub struct ReplicasOptions {
    /// The lab's binary, started once per replica with its hidden `__front` subcommand;
    /// `None`: this process's own executable.
    pub program: Option<PathBuf>,
    /// The longest any one wait may take.
    pub safety_timeout: Duration,
    /// Without a lease: how long a crash's refusals are watched before the run moves on.
    pub leak_watch: Duration,
    /// Where a test steps into the run ([`NoHooks`] by default).
    pub hooks: Arc<dyn ReplicasHooks>,
}

impl Default for ReplicasOptions {
    fn default() -> Self {
        ReplicasOptions {
            program: None,
            safety_timeout: SAFETY_TIMEOUT,
            leak_watch: Duration::from_millis(2000),
            hooks: Arc::new(NoHooks),
        }
    }
}

/// The points where a `replicas` run lets a test in. Each answer is a step the run then takes
/// and the evidence it waits for before it goes on: a signal or a Redis command, then a
/// replica's own report that it took effect. Every method's default takes none.
pub trait ReplicasHooks: Debug + Send + Sync {
    /// Whether the run's own `redis-server` (`--global local`) is stopped (SIGSTOP) just before
    /// `request` is sent, and continued once the first request's replica reports its holder's
    /// lease lost; once `request` is decided, the run goes on when Redis no longer names that
    /// holder.
    fn redis_stops_at(&self, _request: Label) -> bool {
        false
    }

    /// Whether, once every request is decided, the holders key is deleted (`DEL`); the run
    /// waits until each holder's replica reports its lease lost.
    fn holders_deleted(&self) -> bool {
        false
    }

    /// The replica, if any, starved once every request is decided (stopped, unannounced) until
    /// Redis no longer names its holders, then continued; the run waits until it reports its
    /// leases lost.
    fn replica_starved(&self) -> Option<ReplicaId> {
        None
    }

    /// Whether, once every request is decided (and after a starved replica's leases are lost),
    /// the run's own `redis-server` (`--global local`) is killed.
    fn redis_dies(&self) -> bool {
        false
    }

    /// The replica, if any, whose process is then killed, unannounced.
    fn replica_dies(&self) -> Option<ReplicaId> {
        None
    }

    /// The replica, if any, whose process is then stopped (SIGSTOP), unannounced, as a signal
    /// from outside the lab would stop it.
    fn replica_stopped(&self) -> Option<ReplicaId> {
        None
    }

    /// Whether the replica `request` goes to is stopped (SIGSTOP), unannounced, just before
    /// `request` is sent: as a signal from outside the lab would stop it. The run goes on once
    /// the replica's process is seen stopped.
    fn replica_stops_at(&self, _request: Label) -> bool {
        false
    }

    /// Whether the replica the run pauses past its lease is killed, unannounced, once the
    /// pause's probes are done and before the run continues it.
    fn paused_replica_dies(&self) -> bool {
        false
    }

    /// Whether the replica the run pauses is continued (SIGCONT), unannounced, once it is seen
    /// stopped: as a signal from outside the lab would continue it.
    fn paused_replica_continued(&self) -> bool {
        false
    }
}

impl ReplicasHooks for NoHooks {}

/// Runs `inputs` with the default options.
pub async fn run(inputs: ReplicasInputs) -> ReplicasReport {
    run_with(inputs, ReplicasOptions::default()).await
}

/// Runs `inputs` with `options`, and reports. Whatever happens, every replica process and a
/// `redis-server` the run started are stopped and reaped, and the run's keys deleted, before
/// this returns.
pub async fn run_with(inputs: ReplicasInputs, options: ReplicasOptions) -> ReplicasReport {
    let mut run = ReplicasRun {
        started: Instant::now(),
        next_probe: inputs.held.get() as u16 + 1,
        inputs,
        options,
        replicas: Vec::new(),
        local: None,
        permits: None,
        evidence: ReplicasEvidence::default(),
    };
    // Ctrl-C, SIGTERM, SIGHUP and the other signals sent to end a program (`interrupts`) end
    // the run as a failure, then close it as any run closes: replicas stopped and reaped, the
    // run's keys deleted, a private redis-server stopped. They stay caught through the close,
    // so a second Ctrl-C cannot cut it short. Only one run of a process catches them (another
    // run in the same process, as in tests, goes without).
    let interrupts = Interrupts::catch().ok();
    let mut interrupted = false;
    let ended = match &interrupts {
        Some(interrupts) => tokio::select! {
            ended = run.steps() => ended,
            signal = interrupts.caught() => {
                interrupted = true;
                Err(anyhow!("interrupted by {signal}"))
            }
        },
        None => run.steps().await,
    };
    // Read as the steps end: a stop during the close came after what failed.
    let continued = interrupts.as_ref().is_some_and(Interrupts::continued);
    let trouble = run.close(ended.is_err()).await;
    drop(interrupts);
    // The first failure; after an interruption, also how the close went, which is what the
    // person who pressed Ctrl-C waits for.
    let failure = match ended {
        Err(e) if interrupted => Some(match trouble {
            Some(trouble) => format!("{e}; then {trouble}"),
            None if run
                .evidence
                .engine
                .as_ref()
                .is_some_and(|e| e.cleanup.is_some()) =>
            {
                format!("{e}: everything the run started was stopped and its keys deleted")
            }
            None => format!("{e}: everything the run started was stopped"),
        }),
        // A lab stopped and continued meanwhile (Ctrl-Z, then `fg`) timed the stop with the
        // leases: what failed may be only that.
        Err(e) if continued => Some(format!(
            "the lab itself was continued (SIGCONT) during the run, as after a stop (Ctrl-Z, \
             then fg), and what it timed may count the stop: {e:#}"
        )),
        Err(e) => Some(format!("{e:#}")),
        Ok(()) => trouble,
    };
    let mut evidence = run.evidence;
    evidence.replicas = run.replicas.into_iter().map(|r| r.evidence).collect();
    evidence.lab_continued = continued;
    ReplicasReport::assemble(run.inputs, evidence, failure)
}

/// One replica process and its callers.
struct Replica {
    id: ReplicaId,
    /// `None` once stopped or killed.
    front: Option<FrontProcess>,
    /// The run token's header, sent with every request.
    headers: HeaderMap,
    callers: JoinSet<Call>,
    /// Admitted and not yet finished, as the replica's events say.
    inside: Vec<Label>,
    paused: bool,
    /// When the run began: lease losses and answers are timed from it.
    started: Instant,
    /// The run's safety timeout: how long a process that ended may take to be reaped, and a
    /// reported lost lease to come.
    safety_timeout: Duration,
    evidence: ReplicaEvidence,
}

/// A caller's request and what it got, and when.
struct Call {
    request: Label,
    reply: Result<(u16, Value)>,
    at: Instant,
}

struct ReplicasRun {
    started: Instant,
    inputs: ReplicasInputs,
    options: ReplicasOptions,
    replicas: Vec<Replica>,
    /// A `redis-server` the run started (`--global local`).
    local: Option<LocalRedis>,
    /// With global permits, the coordinator's own connection to the engine: to read holders
    /// and to clean up. Its address and the run's id are in the engine's evidence.
    permits: Option<GlobalPermits>,
    evidence: ReplicasEvidence,
    next_probe: u16,
}

impl ReplicasRun {
    async fn steps(&mut self) -> Result<()> {
        self.start_engine().await?;
        self.start_replicas().await?;
        for (n, request) in Label::slow(self.inputs.held.get()).enumerate() {
            let replica = ReplicaId::round_robin(n + 1, self.inputs.replicas);
            if self.options.hooks.replica_stops_at(request) {
                self.stop_unannounced(replica).await?;
            }
            let sent = if self.options.hooks.redis_stops_at(request) {
                self.decide_with_redis_stalled(replica, request).await?
            } else {
                self.decide(replica, request, None).await?
            };
            self.evidence.sent.push(sent);
        }
        self.evidence.held_at_once = self.in_sections();
        if self.permits.is_some() {
            let holders = self.engine_holders("reading who holds the permits").await?;
            if let Some(engine) = &mut self.evidence.engine {
                engine.holders_after_requests = holders;
            }
        }
        self.inject().await?;
        let prediction = model::predict(&self.inputs);
        if let Some(plan) = prediction.pause {
            self.pause(plan).await?;
        }
        if let Some(plan) = prediction.crash {
            self.crash(plan).await?;
        }
        self.release().await
    }

    fn timeout(&self) -> Duration {
        self.options.safety_timeout
    }

    fn lease(&self) -> Duration {
        Duration::from_millis(u64::from(self.inputs.lease_ms.get()))
    }

    /// How long a permit may take to come free once its holder stops renewing: its lease, and
    /// the safety timeout on top.
    fn lapse_limit(&self) -> Duration {
        self.lease() + self.timeout()
    }

    /// Between probes: a fortieth of the lease, from 5 to 50 ms.
    fn probe_pace(&self) -> Duration {
        let lease = self.lease();
        let pace = if lease.is_zero() {
            self.options.leak_watch / 40
        } else {
            lease / 40
        };
        pace.clamp(Duration::from_millis(5), Duration::from_millis(50))
    }

    /// The requests inside each live replica's work section, by its own ledger. A replica's
    /// front is taken only when the crash kills it or the run finishes, so before the pause
    /// every replica is live: the requests held at once then are every replica's.
    fn in_sections(&self) -> BTreeMap<ReplicaId, Vec<Label>> {
        let live = self.replicas.iter().filter(|r| r.front.is_some());
        live.map(|r| (r.id, r.inside.clone())).collect()
    }

    fn replica(&mut self, id: ReplicaId) -> Result<&mut Replica> {
        self.replicas
            .iter_mut()
            .find(|r| r.id == id)
            .ok_or_else(|| anyhow!("{id} is not one of the run's replicas"))
    }

    async fn start_engine(&mut self) -> Result<()> {
        let (url, local) = match self.inputs.global {
            Engine::Off => return Ok(()),
            Engine::Url(url) => (url, None),
            Engine::Local => {
                let redis = LocalRedis::start()
                    .await
                    .context("cannot start a private redis-server")?;
                (*redis.url(), Some(redis))
            }
        };
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).context("no randomness for a run id")?;
        let run = format!("replicas-{:016x}", u64::from_le_bytes(random));
        self.evidence.engine = Some(EngineEvidence {
            address: url.to_string(),
            started_by_the_run: local.is_some(),
            pid: local.as_ref().map(LocalRedis::pid),
            run: run.clone(),
            ..EngineEvidence::default()
        });
        self.local = local;
        let slots = u32::try_from(self.inputs.slots.get()).expect("slots are 2 through 4");
        let password = self.local.as_ref().map(LocalRedis::password);
        let lease = self.inputs.lease_ms.lease();
        let permits = GlobalPermits::connect(&url, password, &run, slots, lease)
            .await
            .with_context(|| format!("cannot use the Redis at {url}"))?;
        self.permits = Some(permits);
        Ok(())
    }

    async fn start_replicas(&mut self) -> Result<()> {
        let program = match &self.options.program {
            Some(program) => program.clone(),
            None => {
                std::env::current_exe().context("cannot find this program to start replicas")?
            }
        };
        let password = self.local.as_ref().map(|local| local.password().clone());
        let global = self.evidence.engine.as_ref().map(|engine| GlobalSpec {
            url: engine.address.clone(),
            password,
            run: engine.run.clone(),
            lease_ms: u64::from(self.inputs.lease_ms.get()),
            fencing: self.inputs.fencing.on(),
        });
        for id in ReplicaId::all(self.inputs.replicas) {
            let mut spec = FrontSpec::new(Front::Async, self.inputs.slots.get());
            spec.stream = Stream::Events;
            spec.drain_ms = self.timeout().as_millis() as u64;
            spec.replica = Some(id.to_string());
            spec.global = global.clone();
            let front = FrontProcess::start(&program, &spec, self.timeout())
                .await
                .with_context(|| format!("{id} did not come up"))?;
            let headers = crate::coordinator::client::token_header(front.token())
                .with_context(|| id.to_string())?;
            self.replicas.push(Replica {
                id,
                headers,
                callers: JoinSet::new(),
                inside: Vec::new(),
                paused: false,
                started: self.started,
                safety_timeout: self.options.safety_timeout,
                evidence: ReplicaEvidence {
                    id,
                    pid: front.pid(),
                    address: front.address(),
                    signals: Vec::new(),
                    ledger: None,
                    final_state: None,
                    permits: None,
                    lease_losses: Vec::new(),
                    exit: None,
                    problem: None,
                },
                front: Some(front),
            });
        }
        Ok(())
    }

    /// Sends `request` to `replica` and waits until it is held or refused. `since`: when the
    /// part began, for a probe's time.
    async fn decide(
        &mut self,
        replica: ReplicaId,
        request: Label,
        since: Option<Instant>,
    ) -> Result<Sent> {
        self.replica(replica)?.send(request);
        self.decision(replica, request, since).await
    }

    /// Waits until `request`, sent to `replica`, is held or refused.
    async fn decision(
        &mut self,
        replica: ReplicaId,
        request: Label,
        since: Option<Instant>,
    ) -> Result<Sent> {
        let (timeout, global) = (self.timeout(), self.permits.is_some());
        let replica = self.replica(replica)?;
        let id = replica.id;
        let pid = replica.front.as_ref().map(FrontProcess::pid);
        let pid = pid.ok_or_else(|| anyhow!("{id} is gone"))?;
        // The run never waits on a replica it paused itself: one found stopped was stopped
        // from outside, and would answer nothing until continued.
        let decided = watched_within(pid, timeout, replica.decision(request, global)).await;
        let (decision, held_by) = decided.map_err(|stall| match stall {
            Stall::NoProgress => anyhow!(
                "{id} gave no decision on {request} within {} s",
                timeout.as_secs()
            ),
            Stall::Stopped => {
                anyhow!("{id} gave no decision on {request}: its process was found stopped (SIGSTOP or another stop signal)")
            }
        })??;
        Ok(Sent {
            request,
            replica: replica.id,
            decision,
            held_by,
            at_ms: since.map(|since| millis(since.elapsed())),
        })
    }

    /// A new probe to `replica`: the next slow label after the requests.
    async fn probe(&mut self, replica: ReplicaId, since: Instant) -> Result<Sent> {
        let request = Label::Slow(self.next_probe);
        self.next_probe = self.next_probe.saturating_add(1);
        self.decide(replica, request, Some(since)).await
    }

    /// The engine's holders on replica `id` now, with their lease left by its clock.
    async fn holders_on(&self, id: ReplicaId, doing: &str) -> Result<Vec<EngineHolder>> {
        let mut holders = self.engine_holders(doing).await?;
        holders.retain(|h| holds(id, &h.holder));
        Ok(holders)
    }

    /// The engine's holders now, with their lease left by its clock.
    async fn engine_holders(&self, doing: &str) -> Result<Vec<EngineHolder>> {
        let permits = self.permits.as_ref();
        let permits = permits.ok_or_else(|| anyhow!("{doing}: no engine"))?;
        let (now, holdings) = permits.holders().await.context(doing.to_owned())?;
        Ok(holdings
            .into_iter()
            .map(|h| EngineHolder {
                holder: h.holder.to_string(),
                lease_left_ms: h.expires_at_ms.map(|end| end.saturating_sub(now)),
            })
            .collect())
    }

    /// [`ReplicasRun::decide`] with the run's own Redis stopped while `request` is sent:
    /// continued once the first request's replica reports its holder's lease lost (Redis
    /// silent past it).
    /// Returns once `request` is decided and Redis no longer names that holder.
    async fn decide_with_redis_stalled(
        &mut self,
        replica: ReplicaId,
        request: Label,
    ) -> Result<Sent> {
        let local = self.local.as_ref();
        let local = local.context("stalling Redis needs --global local")?;
        local.stall(true).context("cannot stop redis-server")?;
        let first = ReplicaId::round_robin(1, self.inputs.replicas);
        let waited = async {
            self.replica(replica)?.send(request);
            self.replica(first)?.await_loss().await
        };
        let waited = waited.await;
        if let Some(local) = &self.local {
            local.stall(false).context("cannot continue redis-server")?;
        }
        waited?;
        let sent = self.decision(replica, request, None).await?;
        // The replica's lease clock runs from when it sent its last confirmed renewal, Redis's
        // from when it ran it, a little later; and the renewal the replica gave up on is still
        // queued in Redis, which runs it once continued, renewing the holder once more if
        // Redis's lease had not ended by then. Either way Redis may still hold the lost permit
        // now: the next request is sent once it has let it go.
        let lost = self.replica(first)?.evidence.lease_losses.last();
        let lost = lost.map(|seen| seen.loss.holder.clone());
        let lost = lost.context("the first replica's lost lease is not recorded")?;
        let lapsed = format!("{lost}'s lost lease did not lapse in Redis");
        self.until_redis_drops(|holder| holder == lost, lapsed)
            .await?;
        Ok(sent)
    }

    /// What a test breaks once every request is decided (its hooks say what).
    async fn inject(&mut self) -> Result<()> {
        let hooks = self.options.hooks.clone();
        if hooks.holders_deleted() {
            let permits = self.permits.as_ref();
            let permits = permits.context("deleting the holders needs --global")?;
            permits
                .forget_holders()
                .await
                .context("deleting the holders")?;
            // Each replica holding permits, by its own ledger.
            for replica in self.replicas.iter_mut().filter(|r| !r.inside.is_empty()) {
                replica.await_loss().await?;
            }
        }
        if let Some(id) = hooks.replica_starved() {
            self.starve(id).await?;
        }
        if hooks.redis_dies()
            && let Some(local) = &mut self.local
        {
            local.kill();
        }
        if let Some(id) = hooks.replica_dies()
            && let Ok(replica) = self.replica(id)
            && let Some(front) = &replica.front
        {
            let _ = front.kill();
        }
        if let Some(id) = hooks.replica_stopped() {
            self.stop_unannounced(id).await?;
        }
        Ok(())
    }

    /// Stops replica `id` (SIGSTOP) unannounced, and waits until its process is seen stopped:
    /// a process of several threads runs on until one of them takes the signal.
    async fn stop_unannounced(&mut self, id: ReplicaId) -> Result<()> {
        let timeout = self.timeout();
        let front = self.replica(id)?.front.as_ref();
        let front = front.context("the replica is gone")?;
        front.pause().with_context(|| format!("cannot stop {id}"))?;
        if !seen_stopped_within(front.pid(), timeout).await {
            bail!("{id} was not seen stopped after SIGSTOP");
        }
        Ok(())
    }

    /// Stops replica `id` unannounced ([`ReplicasRun::stop_unannounced`]) until Redis no longer
    /// names its holders (read at the probes' pace), then continues it and waits for it to
    /// report its leases lost.
    async fn starve(&mut self, id: ReplicaId) -> Result<()> {
        self.stop_unannounced(id).await?;
        let lapsed = format!("{id}'s holders did not lapse while it was stopped");
        let lapsed = self
            .until_redis_drops(|holder| holds(id, holder), lapsed)
            .await;
        let replica = self.replica(id)?;
        if let Some(front) = &replica.front {
            front
                .resume()
                .with_context(|| format!("cannot continue {id}"))?;
        }
        lapsed?;
        replica.await_loss().await
    }

    /// Reads Redis's holders at the probes' pace until it names none that `matches`; fails
    /// saying `otherwise` if it still does after the lease and the safety timeout.
    async fn until_redis_drops(
        &self,
        matches: impl Fn(&str) -> bool,
        otherwise: String,
    ) -> Result<()> {
        let (since, limit) = (Instant::now(), self.lapse_limit());
        let mut pace = pace(self.probe_pace());
        loop {
            let holders = self.engine_holders("reading the holders").await?;
            if !holders.iter().any(|h| matches(&h.holder)) {
                return Ok(());
            }
            if since.elapsed() > limit {
                bail!(otherwise);
            }
            pace.tick().await;
        }
    }

    /// A replica holding permits is paused past its lease; another is probed until it has
    /// taken the paused holders' permits while their work still runs; then the paused replica
    /// is continued.
    async fn pause(&mut self, plan: PausePlan) -> Result<()> {
        // The pause's clock starts before its holders' lease left is read, so that no probe
        // can be admitted sooner on it than that lease left: the model checks exactly that.
        let since = Instant::now();
        let doing = "reading who holds the permits before the pause";
        let holders = self.holders_on(plan.paused, doing).await?;
        let names: Vec<String> = holders.iter().map(|h| h.holder.clone()).collect();
        let continued = self.options.hooks.paused_replica_continued();
        let replica = self.replica(plan.paused)?;
        let front = replica
            .front
            .as_ref()
            .context("the replica to pause is gone")?;
        let pid = front.pid();
        front
            .pause()
            .with_context(|| format!("cannot pause {}", plan.paused))?;
        replica.paused = true;
        replica
            .evidence
            .signals
            .push("SIGSTOP: paused while it held permits".into());
        let timeout = replica.safety_timeout;
        self.evidence.pause = Some(PauseEvidence {
            replica: Some(plan.paused),
            pid,
            holders,
            probed: Some(plan.probed),
            ..PauseEvidence::default()
        });
        // Seen stopped before it is probed, so that found running later is a continue from
        // outside, not a stop still on its way (one of its threads must take the signal): looked
        // at until then, as it comes within moments. A replica that died meanwhile is named at
        // the first probe.
        let stopped = async {
            while !(is_stopped(pid) || dead(pid)) {
                tokio::task::yield_now().await;
            }
        };
        if tokio::time::timeout(timeout, stopped).await.is_err() {
            bail!(
                "{} was never seen stopped within {} s of the run's SIGSTOP: another process \
                 continued it (SIGCONT), or it could not run to take the signal",
                plan.paused,
                timeout.as_secs()
            );
        }
        if continued {
            let front = self.replica(plan.paused)?.front.as_ref();
            let front = front.context("the paused replica is gone")?;
            front
                .resume()
                .with_context(|| format!("cannot continue {}", plan.paused))?;
        }
        let limit = self.lapse_limit();
        let mut probes = Vec::new();
        // The paused holders' permits are all taken again once a refusal names live holders
        // only.
        let retaken = |p: &Sent| {
            p.decision == Decision::Refused && !p.held_by.iter().any(|h| names.contains(h))
        };
        let probed = self.probe_until(plan.probed, since, limit, &mut probes, retaken);
        let admitted = |p: &&Sent| p.decision == Decision::Admitted;
        let ended = match probed.await {
            Ok(true) => Ok(()),
            Ok(false) => Err(match probes.iter().filter(admitted).count() {
                0 => anyhow!(
                    "no probe to {} was admitted within {} ms of pausing {}",
                    plan.probed,
                    limit.as_millis(),
                    plan.paused
                ),
                n => anyhow!(
                    "probes to {} were still admitted {} ms into the pause ({n} in all): \
                     permits kept coming free",
                    plan.probed,
                    limit.as_millis()
                ),
            }),
            Err(why) => Err(why),
        };
        let admitted_after_ms = model::until_admitted(&probes).1.and_then(|p| p.at_ms);
        let in_sections = self.in_sections();
        if let Some(pause) = &mut self.evidence.pause {
            pause.probes = probes;
            pause.admitted_after_ms = admitted_after_ms;
            pause.in_sections = in_sections;
            pause.ended = true;
        }
        ended?;
        let engine_holders = self
            .engine_holders("reading who holds the permits during the pause")
            .await?;
        // Kept before the resume, which fails if the paused replica died meanwhile: the model
        // reads who was inside against who Redis said held the permits then.
        if let Some(pause) = &mut self.evidence.pause {
            pause.engine_holders = Some(engine_holders.into_iter().map(|h| h.holder).collect());
        }
        let dies = self.options.hooks.paused_replica_dies();
        let replica = self.replica(plan.paused)?;
        if dies && let Some(front) = &replica.front {
            let _ = front.kill();
            // Dead before the continue, as a replica killed during the pause would be.
            let pid = front.pid();
            let died = async {
                while !dead(pid) {
                    tokio::task::yield_now().await;
                }
            };
            tokio::time::timeout(replica.safety_timeout, died)
                .await
                .context("the paused replica killed did not die")?;
        }
        replica.resume().await?;
        if let Some(pause) = &mut self.evidence.pause {
            pause.resumed = true;
        }
        Ok(())
    }

    /// A replica holding permits is killed; another is probed until a probe is admitted (with
    /// a lease) or for the leak watch (without).
    async fn crash(&mut self, plan: CrashPlan) -> Result<()> {
        let timeout = self.timeout();
        let replica = self.replica(plan.killed)?;
        let mut front = replica
            .front
            .take()
            .context("the replica to kill is gone")?;
        let pid = front.pid();
        front
            .kill()
            .with_context(|| format!("cannot kill {}", plan.killed))?;
        let since = Instant::now();
        replica
            .evidence
            .signals
            .push("SIGKILL: crashed holding permits".into());
        // The engine is read and probed at once, as the lease the killed process left is short:
        // it starts nothing more (a renewal already on its way only lengthens the refusals).
        // It is reaped once the probes are done.
        let doing = "reading who holds the permits after the kill";
        let dead_holders = self.holders_on(plan.killed, doing).await?;
        self.evidence.crash = Some(CrashEvidence {
            replica: Some(plan.killed),
            pid,
            dead_holders,
            read_ms: Some(millis(since.elapsed())),
            probed: Some(plan.probed),
            ..CrashEvidence::default()
        });
        let limit = if plan.lapses {
            self.lapse_limit()
        } else {
            self.options.leak_watch
        };
        let mut probes = Vec::new();
        let admitted = |p: &Sent| p.decision == Decision::Admitted;
        let probed = self.probe_until(plan.probed, since, limit, &mut probes, admitted);
        let ended = match probed.await {
            Ok(false) if plan.lapses => Err(anyhow!(
                "no probe to {} was admitted within {} ms of the kill",
                plan.probed,
                limit.as_millis()
            )),
            ended => ended.map(drop),
        };
        if let Some(crash) = &mut self.evidence.crash {
            crash.window_ms = model::until_admitted(&probes).1.and_then(|p| p.at_ms);
            crash.watched_ms = (!plan.lapses).then(|| millis(since.elapsed()));
            crash.probes = probes;
        }
        let (exit, failed) = match tokio::time::timeout(timeout, front.wait()).await {
            Ok(Ok(exit)) => (exit.to_string(), None),
            Ok(Err(e)) => (
                "sent SIGKILL (its end could not be waited for)".to_owned(),
                Some(anyhow!("waiting for the killed {}: {e}", plan.killed)),
            ),
            Err(_) => (
                format!("sent SIGKILL (its end not seen within {timeout:?})"),
                Some(anyhow!("the killed {} did not end", plan.killed)),
            ),
        };
        self.replica(plan.killed)?.evidence.exit = Some(exit.clone());
        if let Some(crash) = &mut self.evidence.crash {
            crash.exit = exit;
        }
        // What failed first: the probes, then the wait for the killed replica's end.
        ended?;
        if let Some(failed) = failed {
            return Err(failed);
        }
        let evidence = &self.evidence;
        let before = evidence.holders_after_requests();
        let missed = (evidence.crash.as_ref())
            .and_then(|crash| model::crash_window_missed(plan.lapses, crash, before));
        match missed {
            Some(why) => bail!(
                "the crash's window was missed: {why}; a longer --lease-ms gives the run time \
                 to see it"
            ),
            None => Ok(()),
        }
    }

    /// Probes `probed` (each probe into `probes`) until one is `done`: `true` then; `false`
    /// once `limit` has passed since `since`. After a refusal that is not done, the next probe
    /// waits for the probes' pace.
    async fn probe_until(
        &mut self,
        probed: ReplicaId,
        since: Instant,
        limit: Duration,
        probes: &mut Vec<Sent>,
        done: impl Fn(&Sent) -> bool,
    ) -> Result<bool> {
        let mut pace = pace(self.probe_pace());
        // At least one probe, however late this process ran.
        let mut first = true;
        while std::mem::take(&mut first) || since.elapsed() <= limit {
            // Probes may go on for a lease: a replica that dies or is stopped meanwhile is
            // named now, not only when the release reaches it.
            self.all_still_there(probed).await?;
            let sent = self.probe(probed, since).await?;
            let (done, refused) = (done(&sent), sent.decision == Decision::Refused);
            probes.push(sent);
            if done {
                return Ok(true);
            }
            if refused {
                pace.tick().await;
            }
        }
        Ok(false)
    }

    /// Fails naming the first replica whose process has died or been stopped from outside (a
    /// replica the run paused is stopped by the run), while the run probes `probed`.
    async fn all_still_there(&mut self, probed: ReplicaId) -> Result<()> {
        let doing = format!("while the run probed {probed}");
        for replica in &mut self.replicas {
            let Some(front) = &replica.front else {
                continue;
            };
            let id = replica.id;
            let read = ProcessStat::read(front.pid());
            if procfs::dead(&read) {
                return Err(replica.died(doing).await);
            }
            match read {
                Ok(stat) if stat.stopped() && !replica.paused => {
                    bail!("{id} was found stopped ({doing}), by SIGSTOP or another stop signal");
                }
                Ok(stat) if !stat.stopped() && replica.paused => {
                    // Running: the close has no pause of the run's to end.
                    replica.paused = false;
                    replica.evidence.signals.push(CONTINUED_FROM_OUTSIDE.into());
                    bail!(
                        "{id}, which the run had paused, was found running ({doing}): another \
                         process continued it (SIGCONT)"
                    );
                }
                Ok(_) => {}
                Err(e) => bail!("reading {id}'s state ({doing}): {e}"),
            }
        }
        Ok(())
    }

    /// Opens every live replica's gate and collects every held caller's response.
    async fn release(&mut self) -> Result<()> {
        let timeout = self.timeout();
        for replica in &mut self.replicas {
            if let Some(front) = &mut replica.front {
                let opened = tokio::time::timeout(timeout, front.open_gate()).await;
                match opened {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(replica.died(format!("opening its gate: {e}")).await),
                    Err(_) => return Err(anyhow!("{}: opening its gate stalled", replica.id)),
                }
            }
        }
        for replica in &mut self.replicas {
            while !replica.callers.is_empty() {
                let joined = tokio::time::timeout(timeout, replica.callers.join_next()).await;
                let call = match joined {
                    Ok(Some(Ok(call))) => call,
                    Ok(Some(Err(e))) => return Err(e).context("a caller task failed"),
                    Ok(None) => break,
                    Err(_) => {
                        return Err(anyhow!(
                            "a released caller of {} got no response within {} s",
                            replica.id,
                            timeout.as_secs()
                        ));
                    }
                };
                let (status, error) = match call.reply {
                    // A live replica's held caller must be answered; only a killed one's may not.
                    Err(why) if replica.front.is_some() => {
                        let doing = format!("{}'s caller got no response: {why:#}", call.request);
                        return Err(replica.died(doing).await);
                    }
                    Ok((status, _)) => (Some(status), None),
                    Err(why) => (None, Some(format!("{why:#}"))),
                };
                self.evidence.released.push(ReleasedAnswer {
                    request: call.request,
                    replica: replica.id,
                    status,
                    at_ms: Some(millis(call.at.duration_since(self.started))),
                    error,
                });
            }
        }
        Ok(())
    }

    /// Closes everything on every path (`failed`: the run stopped early): continues a paused
    /// replica, lets held work leave, stops every replica (at once, each within the safety
    /// timeout, then killed), deletes the run's keys and stops a `redis-server` the run
    /// started. Returns the first thing that went wrong in the close, if anything did.
    async fn close(&mut self, failed: bool) -> Option<String> {
        let mut trouble = None;
        let timeout = self.timeout();
        // After a failure a replica that cannot stop soon is killed sooner (within 2 s, not the
        // safety timeout): the run's failure is already known, and each replica's stop adds
        // to the time the failed run takes to end.
        let stop_within = if failed {
            timeout.min(Duration::from_secs(2))
        } else {
            timeout
        };
        for replica in &mut self.replicas {
            if let Err(why) = replica.resume().await {
                trouble.get_or_insert(format!("{why:#}"));
            }
        }
        if failed || trouble.is_some() {
            // The run stopped early: held work must still leave so the replicas can drain.
            for replica in &mut self.replicas {
                if let Some(front) = &mut replica.front {
                    // A replica stopped from outside opens nothing; its stop below kills it.
                    let _ = watched_within(front.pid(), timeout, front.open_gate()).await;
                }
                replica.callers.abort_all();
                while replica.callers.join_next().await.is_some() {}
            }
        }
        let mut stops = JoinSet::new();
        for replica in &mut self.replicas {
            if let Some(front) = replica.front.take() {
                let id = replica.id;
                stops.spawn(async move { (id, front.stop(stop_within).await) });
            }
        }
        while let Some(stopped) = stops.join_next().await {
            let problem = match stopped {
                Ok((id, stopped)) => self.stopped(id, stopped),
                Err(e) => Some(format!("stopping a replica failed: {e}")),
            };
            if let Some(problem) = problem {
                trouble.get_or_insert(problem);
            }
        }
        // The evidence of the engine is there whenever the engine is (see `start_engine`). A
        // private server stopped from outside answers nothing: its log and keys go with it when
        // it is killed below, rather than each read waiting out Redis's timeout first.
        let permits = self.permits.take();
        let silent = self
            .local
            .as_ref()
            .is_some_and(|local| is_stopped(local.pid()));
        if silent {
            trouble.get_or_insert_with(|| {
                "the private redis-server was found stopped (SIGSTOP or another stop signal): its log and the run's keys \
                 went with it"
                    .to_owned()
            });
        }
        if !silent && let (Some(permits), Some(seen)) = (&permits, &mut self.evidence.engine) {
            match permits.effects().await {
                Ok(effects) => seen.effects = Some(effects),
                Err(e) => {
                    trouble.get_or_insert(format!("reading the dependency's log: {e}"));
                }
            }
            let cleaned = async {
                Ok::<_, crate::redis_pool::GlobalError>(Cleanup {
                    holders_removed: permits.cleanup().await?,
                    keys_left: permits.keys_left().await?,
                })
            };
            match cleaned.await {
                Ok(cleanup) => seen.cleanup = Some(cleanup),
                Err(e) => {
                    trouble.get_or_insert(format!("deleting the run's keys: {e}"));
                }
            }
        }
        if let Some(local) = self.local.take()
            && let Err(e) = local.stop().await
        {
            trouble.get_or_insert(format!("stopping the private redis-server: {e:#}"));
        }
        trouble
    }

    /// Records a replica's stop; returns what went wrong, if anything.
    fn stopped(
        &mut self,
        id: ReplicaId,
        stopped: Result<crate::front_process::StoppedFront, crate::front_process::FrontError>,
    ) -> Option<String> {
        let replica = self.replica(id).ok()?;
        let error = match stopped {
            Ok(closed) => {
                for message in closed.trailing {
                    // No failure trails a stop: the front's stop would have failed instead.
                    let _ = replica.take(message);
                }
                let (stopped, evidence) = (closed.stopped, &mut replica.evidence);
                evidence.ledger = Some(stopped.ledger);
                evidence.final_state = Some(stopped.final_state);
                evidence.permits = stopped.permits;
                evidence.exit = Some(closed.exit.to_string());
                stopped.error
            }
            Err(e) => {
                replica.evidence.exit = e.exit.as_ref().map(ToString::to_string);
                Some(e.to_string())
            }
        };
        let problem = error.map(|e| format!("{id} did not stop cleanly: {e}"));
        replica.evidence.problem.clone_from(&problem);
        problem
    }
}

impl Replica {
    /// Starts a caller: `GET /slow` as `request`.
    fn send(&mut self, request: Label) {
        let address = self.evidence.address;
        let headers = self.headers.clone();
        self.callers.spawn(async move {
            let reply = async {
                let got = crate::coordinator::client::get(address, "/slow", request, &headers);
                let (status, bytes) = got.await.context("GET /slow")?;
                let body = serde_json::from_slice(&bytes)
                    .with_context(|| format!("the {status} response is not JSON"))?;
                Ok((status, body))
            };
            let reply = reply.await;
            Call {
                request,
                reply,
                at: Instant::now(),
            }
        });
    }

    /// Records a lease the replica found lost.
    fn lost(&mut self, loss: crate::redis_pool::LeaseLoss) {
        self.evidence.lease_losses.push(LapseSeen {
            loss,
            seen_at_ms: millis(self.started.elapsed()),
        });
    }

    /// Reads the replica's messages until it reports a lease lost (under the safety timeout).
    async fn await_loss(&mut self) -> Result<()> {
        let (id, timeout) = (self.id, self.safety_timeout);
        let before = self.evidence.lease_losses.len();
        let waited = tokio::time::timeout(timeout, async {
            while self.evidence.lease_losses.len() == before {
                let front = self.front.as_mut().ok_or_else(|| anyhow!("{id} is gone"))?;
                let message = front.next().await;
                match message.with_context(|| format!("reading {id}'s messages"))? {
                    Some(message) => self.take(message)?,
                    None => bail!("{id} ended its messages"),
                };
            }
            Ok(())
        });
        waited.await.map_err(|_| {
            anyhow!(
                "{id} reported no lost lease within {} s of the fault",
                timeout.as_secs()
            )
        })?
    }

    /// Takes in one of the replica's messages: follows its own ledger (what is inside its
    /// work section) and records the leases it found lost. Returns the message's ledger event,
    /// if it was one; an error if the replica failed.
    fn take(&mut self, message: FromFront) -> Result<Option<WorkEvent>> {
        match message {
            FromFront::Event(event) => {
                match (event.event, event.request) {
                    (Event::Admitted, Some(request)) => self.inside.push(request),
                    (Event::Finished, Some(request)) => self.inside.retain(|&r| r != request),
                    _ => {}
                }
                Ok(Some(event))
            }
            FromFront::LeaseLost(loss) => {
                self.lost(loss);
                Ok(None)
            }
            FromFront::Failed { reason } => Err(anyhow!("{} failed: {reason}", self.id)),
            _ => Ok(None),
        }
    }

    /// Waits until `request` is held (the replica's event) or refused (its caller's 503),
    /// with who holds the permits: the engine's holders from the 503 body, or the replica's
    /// own.
    async fn decision(&mut self, request: Label, global: bool) -> Result<(Decision, Vec<String>)> {
        let id = self.id;
        loop {
            let front = self.front.as_mut().ok_or_else(|| anyhow!("{id} is gone"))?;
            tokio::select! {
                // Events first: a hold is recorded before anything else can answer.
                biased;
                message = front.next() => {
                    let message = message.with_context(|| format!("reading {id}'s messages"))?;
                    let Some(message) = message else {
                        return Err(self.died(format!("waiting for {request}")).await);
                    };
                    if let Some(event) = self.take(message)?
                        && event.request == Some(request)
                        && event.event == Event::Held
                    {
                        return Ok((Decision::Admitted, Vec::new()));
                    }
                }
                Some(joined) = self.callers.join_next() => {
                    let call = joined.context("a caller task failed")?;
                    if call.reply.is_err() {
                        // No response at all: the replica is gone or going; say how it ended.
                        let doing = format!("while {} waited for its answer", call.request);
                        return Err(self.died(doing).await);
                    }
                    return self.refused(call, request, global);
                }
            }
        }
    }

    /// A caller answered while `request` was being decided: its 503, if it is `request`'s.
    fn refused(&self, call: Call, request: Label, global: bool) -> Result<(Decision, Vec<String>)> {
        let id = self.id;
        let (status, body) = call
            .reply
            .with_context(|| format!("{}'s call to {id} failed", call.request))?;
        let error = body.get("error").and_then(Value::as_str);
        match (status, error) {
            (503, Some("work_capacity_full")) if call.request == request => {
                let held_by = if global {
                    let named = body.get("held_by").and_then(Value::as_array);
                    let named = named.into_iter().flatten().filter_map(Value::as_str);
                    named.map(str::to_owned).collect()
                } else {
                    self.inside.iter().map(|&r| holder(id, r)).collect()
                };
                Ok((Decision::Refused, held_by))
            }
            (503, Some("work_permits_unavailable")) => Err(anyhow!(
                "{id} could not decide on {}: {}",
                call.request,
                body.get("detail")
                    .and_then(Value::as_str)
                    .unwrap_or("no detail")
            )),
            _ => Err(anyhow!(
                "{} was answered {status} {body} by {id} while its work should be held",
                call.request
            )),
        }
    }

    /// Says that the replica's process ended when it should not have, and how.
    async fn died(&mut self, doing: String) -> anyhow::Error {
        let id = self.id;
        let Some(front) = &mut self.front else {
            return anyhow!("{id} is gone ({doing})");
        };
        match tokio::time::timeout(self.safety_timeout, front.wait()).await {
            Ok(Ok(exit)) => {
                self.evidence.exit = Some(exit.to_string());
                anyhow!(
                    "{id} died unexpectedly ({doing}): its process {}",
                    exit.said()
                )
            }
            _ => anyhow!("{id} stopped answering ({doing})"),
        }
    }

    /// Continues a paused replica.
    async fn resume(&mut self) -> Result<()> {
        if !self.paused {
            return Ok(());
        }
        self.paused = false;
        // SIGCONT fails on our own child once it is reaped, and succeeds on one killed and not
        // yet reaped: a dead one is a zombie, or gone.
        if let Some(front) = &self.front
            && (front.resume().is_err() || dead(front.pid()))
        {
            return Err(self.died("while it was paused".into()).await);
        }
        self.evidence.signals.push("SIGCONT: continued".into());
        Ok(())
    }
}

/// Whether process `pid`, a child of the lab's, has died: a zombie not yet reaped, or gone.
fn dead(pid: u32) -> bool {
    procfs::dead(&ProcessStat::read(pid))
}

/// A pace for probes: the first tick after one `period`.
fn pace(period: Duration) -> tokio::time::Interval {
    let mut pace = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    pace.set_missed_tick_behavior(MissedTickBehavior::Delay);
    pace
}

fn millis(elapsed: Duration) -> f64 {
    (elapsed.as_secs_f64() * 10_000.0).round() / 10.0
}
