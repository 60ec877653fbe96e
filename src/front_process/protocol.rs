//! What the parent and a front child say to each other: the child's spec (its one command-line
//! argument), the parent's commands and the child's messages, each one JSON value per line.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::admission::audit::PoolLedger;
use crate::admission::ledger::{Event, WorkEvent};
use crate::admission::section::FinalState;
use crate::admission::shared_pool::Released;
use crate::evidence::ServerSummary;
use crate::policy::{Front, Pool};
use crate::redis_pool::{LeaseLoss, Password};

/// The most permits a child's shared pool may have: far above any count an instrument holds
/// (`hold` stops at 50 000), low enough that a typo cannot ask for an absurd pool.
pub(super) const MAX_CAPACITY: usize = 1_000_000;

/// How long a child's server waits for held work to finish after it is told to stop, unless
/// the spec says otherwise.
pub(super) const DEFAULT_DRAIN_MS: u64 = 10_000;

/// What the child serves: the one argument of `isolation-lab __front`, as JSON, for example
/// `{"front":"async","capacity":200}`. Unknown fields are refused, so a parent newer than its
/// child fails loudly; a field added later must have a default, so an older spec still parses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrontSpec {
    /// The server front to run.
    pub front: Front,
    /// Permits of the one shared pool both routes draw from, 1 through [`MAX_CAPACITY`].
    pub capacity: usize,
    /// What the child tells the parent about the work section as it happens.
    #[serde(default)]
    pub stream: Stream,
    /// How long, in milliseconds, the server waits for held work when told to stop before it
    /// aborts it and reports so.
    #[serde(default = "default_drain_ms")]
    pub drain_ms: u64,
    /// The replica this front is, such as `r1`: how a global pool names its holders
    /// (`r1/S3`). 1 to 64 of `A-Z a-z 0-9 _ - .`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// Take the permits from one Redis-backed global pool of `capacity` permits instead of
    /// the child's own (async front only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<GlobalSpec>,
    /// The listener's accept queue, 1 through [`MAX_BACKLOG`] (the kernel caps it at
    /// `net.core.somaxconn`); without it, the 128 `std` asks for. With it, the child also
    /// reports the connections its listener dropped (`listen_drops` in `stopped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<u32>,
}

/// The longest accept queue a spec may ask for: the kernel's own ceiling for `somaxconn`.
pub(super) const MAX_BACKLOG: u32 = 65_535;

/// Where a replica's global permits come from: `{"url":"redis://127.0.0.1:6379",
/// "run":"replicas-1a2b","lease_ms":2000}`. Every replica of a run names the same run id,
/// capacity and lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalSpec {
    /// The Redis, on this machine only: `redis://127.0.0.1:PORT`.
    pub url: String,
    /// The run id that namespaces the pool's keys.
    pub run: String,
    /// Each holder's lease in milliseconds; 0 for none.
    pub lease_ms: u64,
    /// Whether the run's dependency refuses an effect whose fencing token is older than the
    /// newest it accepted for the slot (the default), or accepts any.
    #[serde(default = "fencing_on")]
    pub fencing: bool,
    /// The password of the lab's private Redis. Never on the command line, where another user
    /// could read it: [`FrontProcess::start`](super::FrontProcess::start) puts it in the
    /// child's environment, and the child reads it from there.
    #[serde(skip)]
    pub(crate) password: Option<Password>,
}

fn fencing_on() -> bool {
    true
}

fn default_drain_ms() -> u64 {
    DEFAULT_DRAIN_MS
}

impl FrontSpec {
    /// A spec for `front` with a shared pool of `capacity` permits, streaming counts.
    pub fn new(front: Front, capacity: usize) -> FrontSpec {
        FrontSpec {
            front,
            capacity,
            stream: Stream::default(),
            drain_ms: DEFAULT_DRAIN_MS,
            replica: None,
            global: None,
            backlog: None,
        }
    }

    /// Reads and checks a spec: what the command line's parser for `__front` checks.
    pub fn parse(text: &str) -> anyhow::Result<FrontSpec> {
        let spec: FrontSpec = serde_json::from_str(text).context("not a front spec")?;
        if !(1..=MAX_CAPACITY).contains(&spec.capacity) {
            bail!(
                "capacity {} is outside 1 through {MAX_CAPACITY}",
                spec.capacity
            );
        }
        if let Some(backlog) = spec.backlog
            && !(1..=MAX_BACKLOG).contains(&backlog)
        {
            bail!("backlog {backlog} is outside 1 through {MAX_BACKLOG}");
        }
        if let Some(global) = &spec.global {
            if spec.front != Front::Async {
                bail!("global permits need the async front");
            }
            if u32::try_from(spec.capacity).is_err() {
                bail!("capacity {} is too large for a global pool", spec.capacity);
            }
            crate::redis_pool::LoopbackUrl::parse(&global.url)?;
            if spec.replica.is_none() {
                bail!("global permits need a replica name for their holders");
            }
        }
        if let Some(replica) = &spec.replica {
            crate::redis_pool::Holder::new(replica, "S1")?;
        }
        Ok(spec)
    }

    /// The spec as the child's argument.
    pub(crate) fn to_arg(&self) -> String {
        serde_json::to_string(self).expect("a spec is plain data, always serializable")
    }
}

/// What the child streams about its work section.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    /// [`FromFront::Counts`]: running totals, one message for whatever happened since the
    /// last, so thousands of held requests cost a handful of lines.
    #[default]
    Counts,
    /// [`FromFront::Event`]: every ledger event, one line each.
    Events,
}

/// The parent's commands, on the child's stdin. The end of stdin means [`ToFront::Stop`], and
/// more: nobody is left to read the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub(super) enum ToFront {
    /// Open the slow gate: held work proceeds and is answered.
    OpenGate,
    /// Stop: abandon the gate if it is still closed, stop the server (drained and joined),
    /// send [`FromFront::Stopped`] and exit 0.
    Stop,
    /// Send [`FromFront::Census`]: the blocks the child's heap holds now.
    Census,
}

/// The child's messages, on its stdout. The first is [`FromFront::Ready`] or
/// [`FromFront::Failed`]; the last, after [`ToFront::Stop`], is [`FromFront::Stopped`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "message", rename_all = "snake_case")]
pub(crate) enum FromFront {
    /// The server listens.
    Ready(Ready),
    /// Running totals of the work section's events ([`Stream::Counts`]).
    Counts(Counts),
    /// One ledger event ([`Stream::Events`]).
    Event(WorkEvent),
    /// With global permits: a holder's renewals found its lease lost, while its work went on.
    LeaseLost(LeaseLoss),
    /// The blocks alive in the child's heap, by size, as [`ToFront::Census`] asked.
    Census(crate::allocator::HeapCensus),
    /// The server has stopped; the child exits 0 next.
    Stopped(Box<StopReport>),
    /// The child could not start or serve, and exits 1 next.
    Failed {
        /// Why, in one line.
        reason: String,
    },
}

/// The child is serving.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Ready {
    /// Where it listens: `127.0.0.1:<port>`.
    pub address: SocketAddr,
    /// The run token its callers must present in the `lab-token` header.
    pub token: String,
    /// The child's process id, as it sees it.
    pub pid: u32,
}

/// The work section's events so far, counted by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Counts {
    /// Requests that took a permit.
    pub admitted: u64,
    /// Requests refused at once.
    pub refused: u64,
    /// Admitted work that waited at the closed gate.
    pub held: u64,
    /// Admitted work that left the section.
    pub finished: u64,
    /// Of `finished`, work that was dropped rather than completed.
    pub cancelled: u64,
    /// Whether the gate has opened.
    pub gate_opened: bool,
}

impl Counts {
    /// Counts `event` in.
    pub(crate) fn add(&mut self, event: &WorkEvent) {
        match event.event {
            Event::Admitted => self.admitted += 1,
            Event::Refused => self.refused += 1,
            Event::Held => self.held += 1,
            Event::Finished => {
                self.finished += 1;
                self.cancelled += u64::from(event.cancelled);
            }
            Event::GateOpened => self.gate_opened = true,
            // A front child's work awaits the gate: it never hands work to a pool.
            Event::Started => {}
        }
    }
}

/// What a stopped child reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StopReport {
    /// The server's summary.
    pub server: ServerSummary,
    /// Why the server did not stop cleanly, if it did not: an accept or thread-spawn error, a
    /// panicked handler, handlers that outlived the drain.
    pub error: Option<String>,
    /// Taken and free permits, and the gate, once everything stopped.
    pub final_state: FinalState,
    /// Each pool's account of the run, with its invariants checked.
    pub ledger: BTreeMap<Pool, PoolLedger>,
    /// Every event's totals.
    pub counts: Counts,
    /// With global permits: what became of each permit the child took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<Released>,
    /// With a `backlog` in the spec: connections the front's own listener dropped while it
    /// listened (its `sk_drops`, a full accept queue included), if the kernel says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen_drops: Option<u64>,
}
