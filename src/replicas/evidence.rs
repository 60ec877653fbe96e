//! What a `replicas` run observed: each request's decision as its replica and its caller saw
//! it, what the shared engine said, the pause and the crash, and each replica's own ledger once
//! it stopped. The model checks it; the report presents it.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::inputs::ReplicaId;
use crate::admission::audit::PoolLedger;
use crate::admission::section::FinalState;
use crate::admission::shared_pool::Released;
use crate::evidence::Decision;
use crate::label::Label;
use crate::policy::Pool;
use crate::redis_pool::{Effect, LeaseLoss};

/// Everything a run observed. A part a failed run never reached is `None` or empty.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReplicasEvidence {
    /// The shared engine, when permits were global.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineEvidence>,
    /// Each replica, in order.
    pub replicas: Vec<ReplicaEvidence>,
    /// The slow requests sent round robin, each until held or refused, in order.
    pub sent: Vec<Sent>,
    /// Once every request was decided: the requests held inside each replica's work section.
    pub held_at_once: BTreeMap<ReplicaId, Vec<Label>>,
    /// A replica holding a permit paused (SIGSTOP) past its lease, if that part ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseEvidence>,
    /// A replica holding a permit killed (SIGKILL), if that part ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash: Option<CrashEvidence>,
    /// The held callers' responses after every gate opened.
    pub released: Vec<ReleasedAnswer>,
    /// Whether the lab itself was continued (SIGCONT) during the run, as after a stop (Ctrl-Z,
    /// then `fg`): the replicas, Redis and the leases went on meanwhile, and every time the
    /// lab took counts the stop.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lab_continued: bool,
}

impl ReplicasEvidence {
    /// The requests held at once, across every replica.
    pub(crate) fn held_in_all(&self) -> usize {
        self.held_at_once.values().map(Vec::len).sum()
    }

    /// The engine's holders once every request was decided; none without an engine.
    pub(crate) fn holders_after_requests(&self) -> &[EngineHolder] {
        (self.engine.as_ref()).map_or(&[], |engine| &engine.holders_after_requests)
    }
}

/// One request sent to a replica, and the decision on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sent {
    /// The request.
    pub request: Label,
    /// The replica it was sent to.
    pub replica: ReplicaId,
    /// Held inside the work section, or refused with 503.
    pub decision: Decision,
    /// For a refusal, who held the permits, as `replica/request`: the shared engine's holders
    /// (from the 503 body) with global permits, the replica's own holders without.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<String>,
    /// Milliseconds since the part began (the pause or the kill): for probes only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<f64>,
}

/// A holder in the shared engine and what was left of its lease when read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineHolder {
    /// `replica/request`.
    pub holder: String,
    /// Milliseconds of lease left, by the engine's clock; `None`: no lease, never lapses.
    pub lease_left_ms: Option<u64>,
}

/// The Redis-backed engine of a run with global permits.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EngineEvidence {
    /// Where it listened.
    pub address: String,
    /// Whether the run started it (`--global local`) and stopped it.
    pub started_by_the_run: bool,
    /// The process id of the `redis-server` the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The run's namespace: every key is `isolation-lab:{RUN}:...`.
    pub run: String,
    /// The engine's holders once every request was decided.
    pub holders_after_requests: Vec<EngineHolder>,
    /// The dependency's log, read just before the cleanup: every effect the replicas' work
    /// applied, with its slot and token, and whether it was accepted. Absent if it could not
    /// be read (the run then fails saying so): nothing is said of the effects then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effects: Option<Vec<Effect>>,
    /// At the end: the run's keys deleted, and how many holders still held then (a leaked
    /// permit is removed here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<Cleanup>,
}

/// The run's cleanup of its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cleanup {
    /// Holders that still held a permit when the keys were deleted.
    pub holders_removed: usize,
    /// Keys of the run left afterwards (0).
    pub keys_left: usize,
}

/// A replica paused past its lease while it held permits.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PauseEvidence {
    /// The paused replica.
    pub replica: Option<ReplicaId>,
    /// Its process.
    pub pid: u32,
    /// Its holders in the engine when it was paused, with their lease left.
    pub holders: Vec<EngineHolder>,
    /// The replica the probes went to.
    pub probed: Option<ReplicaId>,
    /// The probes, until the paused holders' permits were taken by others.
    pub probes: Vec<Sent>,
    /// Milliseconds from the pause (from just before its holders were read) to the first
    /// admitted probe.
    pub admitted_after_ms: Option<f64>,
    /// Then: the requests inside each replica's work section (the paused one's still there).
    pub in_sections: BTreeMap<ReplicaId, Vec<Label>>,
    /// Then: the engine's holders; absent if they could not be read (the run then failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_holders: Option<Vec<String>>,
    /// The replica was continued (SIGCONT) afterwards.
    pub resumed: bool,
    /// The probing ended (a refusal named live holders only, the wait for it ran out, or a
    /// probe failed) and what it saw is recorded here; false only if the run was cut short
    /// first (Ctrl-C), and then nothing of the pause past its holders is evidence.
    #[serde(default)]
    pub ended: bool,
}

/// A replica killed while it held permits.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CrashEvidence {
    /// The killed replica.
    pub replica: Option<ReplicaId>,
    /// Its process.
    pub pid: u32,
    /// How it ended, as its reaper saw it.
    pub exit: String,
    /// Its holders in the engine right after the kill, with their lease left.
    pub dead_holders: Vec<EngineHolder>,
    /// Milliseconds from the kill to the end of that read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_ms: Option<f64>,
    /// The replica the probes went to.
    pub probed: Option<ReplicaId>,
    /// The probes after the kill.
    pub probes: Vec<Sent>,
    /// Milliseconds from the kill to the first admitted probe: the window in which a dead
    /// holder's permit was still refused to everyone.
    pub window_ms: Option<f64>,
    /// Without a lease: how long the refusals were watched.
    pub watched_ms: Option<f64>,
}

/// A held caller's response after release.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReleasedAnswer {
    /// The request.
    pub request: Label,
    /// Its replica.
    pub replica: ReplicaId,
    /// The HTTP status, if a response came.
    pub status: Option<u16>,
    /// When it came (or the call failed), in milliseconds since the run began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<f64>,
    /// Why none came (its replica was killed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A lease a replica found lost, and when the run heard of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LapseSeen {
    /// What the replica said: the holder, why, when its lease had ended.
    #[serde(flatten)]
    pub loss: LeaseLoss,
    /// Milliseconds since the run began when the run heard of it.
    pub seen_at_ms: f64,
}

/// A paused replica's signal the run did not send: it was found running again.
pub(crate) const CONTINUED_FROM_OUTSIDE: &str =
    "SIGCONT: found running while paused, continued by another process";

/// One replica's process and, once it stopped, its own account.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReplicaEvidence {
    /// `r1`..`r4`.
    pub id: ReplicaId,
    /// Its process id.
    pub pid: u32,
    /// Where it listened.
    pub address: SocketAddr,
    /// What the run did to it, beyond starting and stopping it, and a continue it found another
    /// process had sent ([`CONTINUED_FROM_OUTSIDE`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
    /// Its ledger, pool by pool, with the invariants checked; `None` if it never reported.
    pub ledger: Option<BTreeMap<Pool, PoolLedger>>,
    /// Its section once it stopped.
    pub final_state: Option<FinalState>,
    /// With global permits: what became of the permits it took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<Released>,
    /// With global permits: its holders whose renewals found their lease lost, as it told the
    /// run, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lease_losses: Vec<LapseSeen>,
    /// How its process ended.
    pub exit: Option<String>,
    /// Why it did not stop cleanly, if it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}
