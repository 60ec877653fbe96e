//! The executor a front runs on, as plain types: how admitted slow work waits (`--work`), the
//! async front's runtime (`--workers`) and its blocking pool (`--blocking-threads`), and what
//! the model needs of them (`docs/blocking.md`). The permits are a bulkhead for the work
//! section; the runtime's threads are a second shared resource, and these types say how the
//! lab shares them.

use std::fmt;
use std::str::FromStr;

use anyhow::anyhow;
use serde::{Deserialize, Serialize};

use crate::policy::{Front, digits_only};

/// How admitted slow work waits for the gate: `--work`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum WorkStyle {
    /// The work awaits the gate: a parked task on the async front (the lab's usual run)
    #[default]
    Await,
    /// The work blocks its thread until the gate opens: a runtime worker on the async front
    Block,
    /// The blocking wait runs on Tokio's blocking pool (`spawn_blocking`), at most
    /// `--blocking-threads` at once; beyond that Tokio queues it
    SpawnBlocking,
    /// Each work class runs on a runtime of its own, the requests' connections on another: the
    /// executor partitioned like the permits
    OwnRuntime,
}

impl WorkStyle {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            WorkStyle::Await => "await",
            WorkStyle::Block => "block",
            WorkStyle::SpawnBlocking => "spawn-blocking",
            WorkStyle::OwnRuntime => "own-runtime",
        }
    }

    /// Whether `front` can run work this way: the threaded front has no runtime, so it only
    /// awaits (its threads block anyway) or blocks.
    pub(crate) fn runs_on(self, front: Front) -> bool {
        front == Front::Async || matches!(self, WorkStyle::Await | WorkStyle::Block)
    }

    /// Whether its slow work runs on Tokio's blocking pool, the one pool `--blocking-threads`
    /// sizes: every other style leaves it unused, so the flag is refused with them.
    pub(crate) fn uses_blocking_pool(self) -> bool {
        self == WorkStyle::SpawnBlocking
    }
}

/// The async front's runtime scheduler: Tokio's current-thread one, or a multi-thread one with
/// 1 through 4 workers. Either way, that many threads run its tasks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Workers {
    /// One thread runs every task (`Builder::new_current_thread`).
    #[default]
    CurrentThread,
    /// A multi-thread runtime of this many workers (1 through 4).
    Threads(u8),
}

impl Workers {
    /// The most workers `--workers` takes.
    pub const MAX: u8 = 4;

    /// Every shape: current-thread, then 1 through 4 workers.
    pub fn all() -> impl Iterator<Item = Workers> {
        std::iter::once(Workers::CurrentThread).chain((1..=Self::MAX).map(Workers::Threads))
    }

    /// How many threads run the runtime's tasks.
    pub fn threads(self) -> usize {
        match self {
            Workers::CurrentThread => 1,
            Workers::Threads(n) => usize::from(n),
        }
    }

    /// A runtime of this shape, in words: `current-thread runtime`, `runtime of 2 workers`.
    pub(crate) fn runtime(self) -> String {
        match self {
            Workers::CurrentThread => "current-thread runtime".into(),
            Workers::Threads(1) => "runtime of 1 worker".into(),
            Workers::Threads(n) => format!("runtime of {n} workers"),
        }
    }
}

impl fmt::Display for Workers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Workers::CurrentThread => f.write_str("current-thread"),
            Workers::Threads(n) => write!(f, "{n}"),
        }
    }
}

impl FromStr for Workers {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        if text == "current-thread" {
            return Ok(Workers::CurrentThread);
        }
        // Digits only, as for --slots.
        let workers = digits_only::<u8>(text).filter(|n| (1..=Self::MAX).contains(n));
        workers.map(Workers::Threads).ok_or_else(|| {
            let max = Self::MAX;
            anyhow!("expected current-thread or a whole number of workers from 1 through {max}")
        })
    }
}

/// A report's `workers`: `"current-thread"` or a number.
impl Serialize for Workers {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Workers::CurrentThread => serializer.serialize_str("current-thread"),
            Workers::Threads(n) => serializer.serialize_u8(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Workers {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum SavedWorkers {
            Count(u8),
            Name(String),
        }
        let parsed = match SavedWorkers::deserialize(deserializer)? {
            SavedWorkers::Count(n) => n.to_string().parse(),
            SavedWorkers::Name(name) => name.parse(),
        };
        parsed.map_err(serde::de::Error::custom)
    }
}

/// The most threads Tokio's blocking pool may start: `--blocking-threads`, 1 through 512
/// (Tokio's own default is 512).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(into = "u16", try_from = "u16")]
pub struct BlockingThreads(u16);

impl BlockingThreads {
    /// The most `--blocking-threads` takes: Tokio's default.
    pub const MAX: u16 = 512;

    /// The value, if it is from 1 through 512.
    pub fn new(value: u16) -> Option<Self> {
        (1..=Self::MAX).contains(&value).then_some(Self(value))
    }

    /// The value as a count.
    pub fn get(self) -> usize {
        usize::from(self.0)
    }
}

impl Default for BlockingThreads {
    /// Tokio's own default.
    fn default() -> Self {
        BlockingThreads(Self::MAX)
    }
}

impl From<BlockingThreads> for u16 {
    fn from(value: BlockingThreads) -> u16 {
        value.0
    }
}

impl TryFrom<u16> for BlockingThreads {
    type Error = anyhow::Error;

    fn try_from(value: u16) -> anyhow::Result<Self> {
        Self::new(value).ok_or_else(expected_blocking)
    }
}

fn expected_blocking() -> anyhow::Error {
    anyhow!(
        "expected a whole number from 1 through {}",
        BlockingThreads::MAX
    )
}

impl FromStr for BlockingThreads {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        digits_only::<u16>(text)
            .and_then(Self::new)
            .ok_or_else(expected_blocking)
    }
}

impl fmt::Display for BlockingThreads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The executor of one run's front: how slow work waits, and, on the async front, the runtime
/// it runs on. The default is the lab's usual run: work that awaits, on the lab's own
/// current-thread runtime, with no runtime of the front's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Executor {
    /// How admitted slow work waits for the gate.
    pub work: WorkStyle,
    /// The async front's own runtime; `None` runs it on the lab's runtime (only with `await`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Workers>,
    /// The most threads the front runtime's blocking pool may start.
    #[serde(default)]
    pub blocking_threads: BlockingThreads,
}

impl Executor {
    /// The lab's usual executor.
    pub(crate) fn is_default(&self) -> bool {
        *self == Executor::default()
    }

    /// An executor of `work` on the front's own runtime of `workers`.
    pub fn new(work: WorkStyle, workers: Workers, blocking_threads: BlockingThreads) -> Self {
        Executor {
            work,
            workers: Some(workers),
            blocking_threads,
        }
    }

    /// Whether the async front gets a runtime of its own: for every style but `await`, and
    /// for `await` when `--workers` asked for one.
    pub(crate) fn own_runtime(&self) -> bool {
        self.work != WorkStyle::Await || self.workers.is_some()
    }

    /// Whether `front` runs on runtimes of its own under this executor: only the async front
    /// does, and only when [`Executor::own_runtime`] asks for one.
    pub(crate) fn front_runtime(&self, front: Front) -> bool {
        front == Front::Async && self.own_runtime()
    }

    /// The shape of the front's own runtime (current-thread unless `--workers` said).
    pub fn workers(&self) -> Workers {
        self.workers.unwrap_or_default()
    }

    /// The threads slow work can block before the next one waits for the executor, not for a
    /// permit: what the model needs (`docs/blocking.md`).
    pub(crate) fn lane(&self, front: Front) -> Lane {
        match (front, self.work) {
            (Front::Threaded, _) | (_, WorkStyle::Await) => Lane::Unbounded,
            (Front::Async, WorkStyle::Block) => Lane::Workers(self.workers().threads()),
            (Front::Async, WorkStyle::SpawnBlocking) => {
                Lane::Own(self.blocking_threads.get(), LaneThreads::BlockingPool)
            }
            (Front::Async, WorkStyle::OwnRuntime) => {
                Lane::Own(self.workers().threads(), LaneThreads::SlowRuntime)
            }
        }
    }

    /// The flags that give this executor, empty for the default: ` --work block --workers 2`.
    pub(crate) fn flags(&self) -> String {
        let mut flags = String::new();
        if self.work != WorkStyle::Await {
            flags += &format!(" --work {}", self.work.name());
        }
        if let Some(workers) = self.workers {
            flags += &format!(" --workers {workers}");
        }
        if self.blocking_threads != BlockingThreads::default() {
            flags += &format!(" --blocking-threads {}", self.blocking_threads);
        }
        flags
    }

    /// The flags with which `isolation-lab predict`, which models the async front, expects
    /// what this executor does on `front`. On the threaded front every connection has a thread
    /// of its own whatever the work, so the lane is the usual run's, and no flag is needed.
    pub(crate) fn predict_flags(&self, front: Front) -> String {
        match front {
            Front::Async => self.flags(),
            Front::Threaded => String::new(),
        }
    }

    /// The runtime shape in words, for the report: which runtime runs what.
    pub(crate) fn describe(&self, front: Front) -> String {
        let runtime = self.workers().runtime();
        match (front, self.work) {
            (Front::Threaded, WorkStyle::Block) => {
                "slow work blocks its connection's own OS thread".into()
            }
            (Front::Threaded, _) => "slow work waits on its connection's own OS thread".into(),
            (Front::Async, WorkStyle::Await) if self.workers.is_none() => {
                "slow work awaits the gate on the lab's own runtime".into()
            }
            (Front::Async, WorkStyle::Await) => {
                format!("slow work awaits the gate; the front runs on its own {runtime}")
            }
            (Front::Async, WorkStyle::Block) => format!(
                "slow work blocks a worker of the front's own {runtime}, which also accepts \
                 and reads every request"
            ),
            (Front::Async, WorkStyle::SpawnBlocking) => format!(
                "slow work's blocking wait runs on the blocking pool (at most {} thread{}) of \
                 the front's own {runtime}",
                self.blocking_threads,
                if self.blocking_threads.get() == 1 {
                    ""
                } else {
                    "s"
                }
            ),
            (Front::Async, WorkStyle::OwnRuntime) => format!(
                "connections run on a current-thread runtime of their own; slow work on its \
                 own {runtime}, fast work on its own {runtime}"
            ),
        }
    }
}

/// What runs the slow work that holds its thread, and so how many can hold one at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Nothing the work holds is shared: a parked task, or a thread of its own.
    Unbounded,
    /// The runtime's own workers, which also accept and read requests: once this many are
    /// blocked, no request is read until the gate opens.
    Workers(usize),
    /// A pool of threads of the slow work's own: once this many are blocked, admitted work
    /// waits for a thread, its permit held.
    Own(usize, LaneThreads),
}

/// The slow work's own pool of threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneThreads {
    /// Tokio's blocking pool (`spawn_blocking`).
    BlockingPool,
    /// The slow work class's own runtime.
    SlowRuntime,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_parse_and_read_back() {
        assert_eq!("current-thread".parse().ok(), Some(Workers::CurrentThread));
        assert_eq!("3".parse().ok(), Some(Workers::Threads(3)));
        for bad in ["0", "5", "", "+2", "two", "current"] {
            assert!(bad.parse::<Workers>().is_err(), "{bad:?}");
        }
        for workers in Workers::all() {
            let json = serde_json::to_string(&workers).expect("serializes");
            assert_eq!(serde_json::from_str::<Workers>(&json).ok(), Some(workers));
        }
        assert_eq!(Workers::all().count(), 5);
    }

    #[test]
    fn blocking_threads_take_tokios_range() {
        assert_eq!(BlockingThreads::default().get(), 512);
        assert_eq!(
            "1".parse::<BlockingThreads>()
                .map(BlockingThreads::get)
                .ok(),
            Some(1)
        );
        for bad in ["0", "513", "-1", ""] {
            assert!(bad.parse::<BlockingThreads>().is_err(), "{bad:?}");
        }
    }

    /// The default executor is the lab's usual run, with no runtime of the front's own; every
    /// other style gets one.
    #[test]
    fn only_the_default_runs_on_the_labs_runtime() {
        let default = Executor::default();
        assert!(default.is_default() && !default.own_runtime());
        assert_eq!(default.flags(), "");
        assert_eq!(default.lane(Front::Async), Lane::Unbounded);
        let block = Executor::new(
            WorkStyle::Block,
            Workers::Threads(2),
            BlockingThreads::default(),
        );
        assert!(block.own_runtime());
        assert_eq!(block.lane(Front::Async), Lane::Workers(2));
        assert_eq!(block.lane(Front::Threaded), Lane::Unbounded);
        assert_eq!(block.flags(), " --work block --workers 2");
        assert!(!WorkStyle::SpawnBlocking.runs_on(Front::Threaded));
        assert!(WorkStyle::Block.runs_on(Front::Threaded));
    }
}
