//! What `hold` measured: the preflight, each front's idle baseline, and per count of held
//! requests either the figures or why there are none. Render reads only these types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::Front;
use crate::procfs::ProcessFigures;

/// Everything one `hold` found, in the order it was measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HoldReport {
    /// `"hold"`.
    pub instrument: String,
    /// The counts of held requests asked for, ascending.
    pub counts: Vec<u32>,
    /// The ceilings read before anything started, and what each front can reach under them.
    /// `None` if they could not be read (then nothing ran: see `failure`).
    pub preflight: Option<Preflight>,
    /// One series per front asked for, async first.
    pub fronts: Vec<FrontSeries>,
    /// Why the lab failed (exit 1), if it did. A front that died is not a failure of the lab:
    /// its point says how it died.
    pub failure: Option<String>,
}

/// The ceilings that could stop a front, as read from this machine and process before
/// anything started, and what each front can reach under them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preflight {
    /// The ceilings.
    pub limits: MachineLimits,
    /// The most requests each front can hold here, and the ceiling that stops it; `None` if
    /// no ceiling applies.
    pub reach: BTreeMap<Front, Option<FrontReach>>,
    /// Connections one source address may open to the front: the half of its ephemeral ports
    /// `connect` tries first, less a margin. Callers beyond it go out from 127.0.0.2,
    /// 127.0.0.3, ...
    pub ports_per_address: u64,
}

/// The ceilings, as `sysctl` and `getrlimit` give them; `None` is unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineLimits {
    /// `vm.max_map_count`: memory maps per process; each thread takes 4.
    pub max_map_count: u64,
    /// `kernel.pid_max`: machine-wide; each thread takes a pid.
    pub pid_max: u64,
    /// `kernel.threads-max`: threads, machine-wide.
    pub threads_max: u64,
    /// Threads on the machine when read.
    pub threads_now: u64,
    /// RLIMIT_NPROC, soft: threads of this user.
    pub nproc: Option<u64>,
    /// Threads of this user's processes when read, which RLIMIT_NPROC counts (the machine's,
    /// `threads_now`, where that limit does not hold the lab).
    #[serde(default)]
    pub user_threads_now: u64,
    /// Whether the kernel holds the lab to `nproc`: not root, nor a process with
    /// `CAP_SYS_ADMIN` or `CAP_SYS_RESOURCE` (in the initial user namespace).
    pub nproc_enforced: bool,
    /// RLIMIT_NOFILE, soft, after raising it to the hard limit: descriptors per process.
    pub nofile: Option<u64>,
    /// RLIMIT_NOFILE's hard limit.
    pub nofile_hard: Option<u64>,
    /// `net.ipv4.ip_local_port_range`: the first and last ephemeral port.
    pub local_ports: [u16; 2],
    /// `net.core.somaxconn`: the longest accept queue a listener may have.
    pub somaxconn: u64,
    /// RLIMIT_AS, soft, in bytes: address space per process.
    pub address_space: Option<u64>,
    /// The address space, in KiB, counted for a front's child before its first held request:
    /// `hold`'s own when read, and room for a front's runtime and threads.
    #[serde(default)]
    pub base_address_space_kib: u64,
    /// RLIMIT_DATA, soft, in bytes: private writable memory per process (the heap, and every
    /// thread's stack but the main one's).
    pub data: Option<u64>,
}

/// The most requests a front can hold here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontReach {
    /// The most held requests.
    pub held: u64,
    /// The ceiling that stops one more, by its `sysctl` or `getrlimit` name.
    pub ceiling: String,
    /// That ceiling's value.
    pub value: u64,
}

/// One front's measurements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrontSeries {
    /// The front.
    pub front: Front,
    /// The front's child at rest, with nothing held (N = 0): what each figure is compared
    /// with. `None` if it could not be measured.
    pub baseline: Option<Sample>,
    /// One point per count asked for, ascending.
    pub points: Vec<Point>,
}

/// What holding `held` requests on one front gave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Requests held at the closed gate.
    pub held: u32,
    /// What happened.
    #[serde(flatten)]
    pub outcome: CountOutcome,
}

/// What happened at one count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CountOutcome {
    /// Every request was admitted, held, released and answered 200, and the front stopped
    /// cleanly: the figures.
    Held(Figures),
    /// Not run: beyond a ceiling, or after the front failed at a smaller count.
    NotRun {
        /// Why, naming the ceiling and its value, or the earlier failure.
        reason: String,
    },
    /// The front failed (evidence, not a failure of the lab): how.
    FrontFailed(FrontFailure),
    /// The lab failed here: it stopped, and exits 1.
    LabFailed {
        /// Why, in one line.
        reason: String,
    },
}

/// The figures of one held count, each measured, never estimated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// The front's process.
    pub pid: u32,
    /// From the first request sent to the N-th `held` the front reported.
    pub time_to_hold_ms: f64,
    /// From the gate opened to the last response received.
    pub time_to_release_ms: f64,
    /// How long the lab itself was stopped (Ctrl-Z, SIGSTOP, then continued) while it held and
    /// while it released, as its watch saw it: from its last look before each stop to its
    /// first after, so within a quarter of a second. The two times above count it. Absent when
    /// no stop of a third of a second or more was seen (a shorter one is not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lab_stopped: Option<LabStopped>,
    /// The front's process with every request held.
    #[serde(flatten)]
    pub process: Sample,
    /// Change of `KernelStack` in `/proc/meminfo` over the hold: machine-wide, so other
    /// programs' threads count too.
    pub kernel_stack_kib: i64,
    /// The accept queue the front's listener had: `backlog` asked of the kernel, at most
    /// `somaxconn`.
    pub listen_backlog: u32,
    /// Connections dropped at the front's listener over the measurement.
    pub listen_drops: ListenDrops,
    /// CPU the parent (the callers and nothing else) used from the first request sent to the
    /// N-th held, from `/proc/self/stat`, in milliseconds.
    pub callers_cpu_ms: u64,
    /// CPU the front's child used over the same span, from `/proc/<pid>/stat`.
    pub front_cpu_ms: u64,
    /// Change of `Slab` in `/proc/meminfo` over the hold: machine-wide, so both ends of every
    /// connection (the callers' sockets too) and other programs' objects count.
    pub kernel_slab_kib: i64,
    /// The front's heap per held request, by block size: its blocks alive with every request
    /// held, less those at rest, divided by N. What is allocated, not what is resident.
    pub heap_per_request: Vec<HeapClass>,
    /// Source addresses the callers went out from (127.0.0.1 onwards).
    pub source_addresses: u64,
    /// Each figure's change, divided by the requests held: the front's own from its idle
    /// baseline, the machine-wide kernel figures from before the hold.
    pub per_request: PerRequest,
}

/// How long the lab was stopped while holding and while releasing, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabStopped {
    /// Within `time_to_hold_ms`.
    pub holding_ms: f64,
    /// Within `time_to_release_ms`.
    pub releasing_ms: f64,
}

/// Connections a listener dropped (a full accept queue among them), and whose count it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenDrops {
    /// How many.
    pub count: u64,
    /// Whose count.
    pub scope: DropScope,
}

/// Where a count of listen drops comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropScope {
    /// The front's own listener (`SO_MEMINFO`'s drops, read by the front's child): this run's
    /// and nothing else's.
    FrontSocket,
    /// `TcpExt: ListenOverflows` of `/proc/net/netstat` over the hold, for every listener on
    /// the machine: what is left where the kernel does not give the socket's own.
    Machine,
}

impl DropScope {
    /// Whose count, in words.
    pub fn words(self) -> &'static str {
        match self {
            DropScope::FrontSocket => "the front's own listener",
            DropScope::Machine => "every listener on the machine",
        }
    }
}

/// One size class of the heap per held request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeapClass {
    /// Which blocks: `8 KiB`, `1 to 4 KiB`, ...
    pub class: String,
    /// Blocks per held request.
    pub blocks: f64,
    /// Their KiB per held request.
    pub kib: f64,
}

/// What a process holds, from `/proc/<pid>`, and its heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Its figures from `/proc/<pid>`, as fields of the sample itself in the report.
    #[serde(flatten)]
    pub procfs: ProcessFigures,
    /// The blocks alive in its heap, by size (the lab's allocator counts them).
    #[serde(default)]
    pub heap: crate::allocator::HeapCensus,
}

/// Each figure's change per held request: the front's own figures from its idle baseline (the
/// same front's child at rest), the machine-wide kernel figures from just before the hold.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerRequest {
    /// OS threads.
    pub os_threads: f64,
    /// Resident memory, KiB.
    pub rss_kib: f64,
    /// Address space, KiB.
    pub address_space_kib: f64,
    /// Memory mappings.
    pub memory_maps: f64,
    /// Open file descriptors.
    pub open_fds: f64,
    /// Kernel stack, KiB (machine-wide, from before the hold).
    pub kernel_stack_kib: f64,
    /// Kernel slab, KiB (machine-wide, from before the hold: both ends of each connection).
    pub kernel_slab_kib: f64,
}

/// How a front failed at one count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontFailure {
    /// The front's process, if it started.
    pub pid: Option<u32>,
    /// The step it failed in.
    pub stage: Stage,
    /// Requests it had reported held by then.
    pub held_before: u64,
    /// What failed, in one line: how its process ended, or its server's error.
    pub reason: String,
    /// What the lab was doing when it found out, in one line.
    pub detail: String,
    /// How its process ended, if it was reaped.
    pub exit: Option<Death>,
}

/// A step of one measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Starting the front's process.
    Starting,
    /// Sending requests until all are held.
    Holding,
    /// Opening the gate and reading every response.
    Releasing,
    /// Stopping the front.
    Stopping,
}

impl Stage {
    /// The stage in words.
    pub fn words(self) -> &'static str {
        match self {
            Stage::Starting => "starting",
            Stage::Holding => "holding",
            Stage::Releasing => "releasing",
            Stage::Stopping => "stopping",
        }
    }
}

/// How a front's process ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Death {
    /// Its exit code, if it exited.
    pub code: Option<i32>,
    /// The signal that ended it (`SIGKILL`, `SIGABRT`, ...), if one did.
    pub signal: Option<String>,
    /// The last line it wrote to stderr.
    pub last_stderr: Option<String>,
}

impl Death {
    /// Whether it ended as a front told to stop does: exit code 0.
    pub(crate) fn clean(&self) -> bool {
        self.code == Some(0)
    }

    /// How it ended, without its stderr: `was killed by SIGABRT`, `exited with code 1`.
    pub(crate) fn how(&self) -> String {
        match (&self.signal, self.code) {
            (Some(signal), _) => format!("was killed by {signal}"),
            (None, Some(code)) => format!("exited with code {code}"),
            (None, None) => "ended".to_owned(),
        }
    }
}

impl HoldReport {
    /// The series of `front`, if it was asked for.
    pub fn series(&self, front: Front) -> Option<&FrontSeries> {
        self.fronts.iter().find(|s| s.front == front)
    }
}

impl FrontSeries {
    /// The points where every request was held, with their figures.
    pub fn held(&self) -> impl Iterator<Item = (u32, &Figures)> {
        self.points.iter().filter_map(|point| match &point.outcome {
            CountOutcome::Held(figures) => Some((point.held, figures)),
            _ => None,
        })
    }
}
