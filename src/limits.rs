//! Preflight: the ceilings that stop a server front from holding N requests, read before any
//! socket, thread or process exists, and a pure judgement of whether N is reachable on each
//! front and, if not, which ceiling stops it. Every held request costs a connection on each
//! side; on the thread-per-request front it also costs a thread and its memory maps, which is
//! where the two fronts part. Reading the ceilings needs Linux's `/proc/sys`.

use std::fmt;
use std::io;

use serde::Serialize;

use crate::policy::Front;
use crate::procfs::{invalid, kib_field, read_proc, real_uid, threads_of_user};

/// The ceilings, as read from this machine and process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Limits {
    /// `vm.max_map_count`: memory maps per process.
    pub(crate) max_map_count: u64,
    /// `kernel.pid_max`: machine-wide; every thread takes a pid.
    pub(crate) pid_max: u64,
    /// `kernel.threads-max`: threads, machine-wide.
    pub(crate) threads_max: u64,
    /// Threads on the machine when read (from `/proc/loadavg`): already taken from both ceilings
    /// above.
    pub(crate) threads_now: u64,
    /// RLIMIT_NPROC: threads of all processes of this user.
    pub(crate) nproc: Rlimit,
    /// Threads of this user's processes when read (those whose real uid is this process's):
    /// what RLIMIT_NPROC counts. Read only where that limit holds the lab; the machine's
    /// `threads_now` otherwise, which is never fewer.
    pub(crate) user_threads_now: u64,
    /// Whether the kernel holds this process to `nproc` (see [`nproc_enforced`]).
    pub(crate) nproc_enforced: bool,
    /// RLIMIT_NOFILE: open file descriptors per process, sockets included; a child inherits it.
    pub(crate) nofile: Rlimit,
    /// Descriptors this process had open when read (`/proc/self/fd`) beyond stdio and the one
    /// that read them: those a shell left open to it, which a child inherits as well.
    pub(crate) fds_now: u64,
    /// `net.ipv4.ip_local_port_range`: the first and last ephemeral port, per source address.
    pub(crate) local_ports: (u16, u16),
    /// `net.core.somaxconn`: the longest accept queue a listener may ask for.
    pub(crate) somaxconn: u64,
    /// RLIMIT_AS: address space per process, in bytes; a child inherits it.
    pub(crate) address_space: Rlimit,
    /// This process's address space when read, in KiB (`VmSize`): the same program as a
    /// front's child, its libraries and its heap. See [`Limits::base_address_space_kib`].
    pub(crate) own_address_space_kib: u64,
    /// RLIMIT_DATA: private writable memory per process (the heap, and every thread's stack
    /// but the main one's), in bytes; a child inherits it.
    pub(crate) data: Rlimit,
}

/// A resource limit of this process; `None` is unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Rlimit {
    /// The limit in force, which the process may raise up to `hard`.
    pub(crate) soft: Option<u64>,
    /// The most the soft limit may be raised to without privilege.
    pub(crate) hard: Option<u64>,
}

impl Limits {
    /// Address space a front's child takes before its first held request, in KiB: this
    /// process's own, and [`BASE_ADDRESS_SPACE_ROOM_KIB`] more for a front's runtime and
    /// threads.
    pub(crate) fn base_address_space_kib(&self) -> u64 {
        self.own_address_space_kib + BASE_ADDRESS_SPACE_ROOM_KIB
    }

    /// Reads the ceilings of this machine and process.
    pub(crate) fn read() -> io::Result<Limits> {
        let loadavg = read_proc("/proc/loadavg")?;
        let port_range = read_proc("/proc/sys/net/ipv4/ip_local_port_range")?;
        let threads_now = parse_threads_now(&loadavg)
            .ok_or_else(|| invalid(format!("/proc/loadavg: no thread count in {loadavg:?}")))?;
        let status = read_proc("/proc/self/status")?;
        let nproc = Rlimit::get(Resource::Nproc)?;
        let nproc_enforced = nproc_enforced(&status, &read_proc("/proc/self/uid_map")?);
        let user_threads_now = match (nproc_enforced, nproc.soft, real_uid(&status)) {
            (true, Some(_), Some(uid)) => threads_of_user(uid).unwrap_or(threads_now),
            _ => threads_now,
        };
        let own_address_space_kib = kib_field(&status, "VmSize")
            .ok_or_else(|| invalid("/proc/self/status: no VmSize".into()))?;
        Ok(Limits {
            own_address_space_kib,
            max_map_count: sysctl("vm/max_map_count")?,
            pid_max: sysctl("kernel/pid_max")?,
            threads_max: sysctl("kernel/threads-max")?,
            threads_now,
            nproc,
            user_threads_now,
            nproc_enforced,
            nofile: Rlimit::get(Resource::Nofile)?,
            fds_now: open_descriptors()?,
            local_ports: parse_port_range(&port_range).ok_or_else(|| {
                invalid(format!("ip_local_port_range: not a range: {port_range:?}"))
            })?,
            somaxconn: sysctl("net/core/somaxconn")?,
            address_space: Rlimit::get(Resource::AddressSpace)?,
            data: Rlimit::get(Resource::Data)?,
        })
    }
}

/// Whether starting a thread is held to RLIMIT_NPROC, as the kernel decides it at fork: not for
/// root, nor for a process with `CAP_SYS_ADMIN` or `CAP_SYS_RESOURCE`, in the initial user
/// namespace (the one whose `uid_map` maps every uid to itself). Read from this process's
/// `/proc/self/status` (its real uid and effective capabilities) and `/proc/self/uid_map`.
fn nproc_enforced(status: &str, uid_map: &str) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_SYS_RESOURCE: u32 = 24;
    let initial = uid_map.split_whitespace().eq(["0", "0", "4294967295"]);
    let field = |key| status.lines().find_map(|line| line.strip_prefix(key));
    let root = real_uid(status) == Some(0);
    let effective = field("CapEff:").and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok());
    let privileged =
        effective.is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN | 1 << CAP_SYS_RESOURCE) != 0);
    !(initial && (root || privileged))
}

/// The stack of every thread the lab starts: std's default, set rather than left to std, which
/// takes `RUST_MIN_STACK` from the environment.
pub(crate) const THREAD_STACK: usize = 2 << 20;

/// Room beyond a thread's stack that starting it takes: the signal stack std maps in the new
/// thread before any of the lab's code runs there (a page and the larger of `SIGSTKSZ` and the
/// kernel's minimum, under 64 KiB on every machine), and what std allocates to start it, for
/// which `malloc` may grow its heap by its top pad (128 KiB) and more.
const THREAD_EXTRA: usize = 256 << 10;

/// Starts `run` on a thread named `name`, with a stack of [`THREAD_STACK`], once the process
/// has room for it.
///
/// Under a memory limit (`ulimit -v` or `-d`, RLIMIT_AS or RLIMIT_DATA) a thread's stack may
/// fit while the signal stack std maps in the new thread does not: std then aborts the whole
/// process as the thread starts, before any code of the lab's runs there. So, only under such
/// a limit, the room for both is mapped first and unmapped at once (nothing is touched): where
/// it is missing, the thread is not started, and the caller says so in its one line. Another
/// thread that maps memory between the look and the start could still take that room: a
/// window of a few system calls, where before it was every limit that fits a stack and not
/// its signal stack.
pub(crate) fn spawn_thread<T: Send + 'static>(
    name: &str,
    run: impl FnOnce() -> T + Send + 'static,
) -> io::Result<std::thread::JoinHandle<T>> {
    if memory_limited() {
        room_for(THREAD_STACK + THREAD_EXTRA)?;
    }
    let thread = std::thread::Builder::new().name(name.into());
    thread.stack_size(THREAD_STACK).spawn(run)
}

/// Whether this process runs under a limit of its address space or private memory, as read
/// the first time it is asked (a limit is set before the lab starts).
fn memory_limited() -> bool {
    static LIMITED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LIMITED.get_or_init(|| {
        [Resource::AddressSpace, Resource::Data]
            .into_iter()
            .any(|limit| Rlimit::get(limit).is_ok_and(|limit| limit.soft.is_some()))
    })
}

/// `Ok` if `bytes` of private writable memory can be mapped now: mapped, untouched, and
/// unmapped at once.
fn room_for(bytes: usize) -> io::Result<()> {
    // SAFETY: a new anonymous mapping of the process's own, which nothing else refers to,
    // never read or written, and unmapped before returning.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        libc::munmap(at, bytes);
    }
    Ok(())
}

/// How many descriptors this process has open beyond stdio, less the one that lists them.
fn open_descriptors() -> io::Result<u64> {
    let listed = std::fs::read_dir("/proc/self/fd")?.count();
    Ok((listed as u64).saturating_sub(1 + 3))
}

/// Raises this process's RLIMIT_NOFILE soft limit to its hard limit, so that a front and its
/// callers may hold as many connections as allowed; child processes started afterwards inherit
/// it. Returns the limit now in force.
pub(crate) fn raise_nofile() -> io::Result<Rlimit> {
    let limit = Rlimit::get(Resource::Nofile)?;
    if limit.soft == limit.hard {
        return Ok(limit);
    }
    set_soft(Resource::Nofile, None)?;
    Ok(Rlimit {
        soft: limit.hard,
        ..limit
    })
}

/// Sets this process's soft limit of `resource` to `soft`, or back up to its hard limit
/// (`None`); the hard limit stays. A process may lower its soft limit and raise it again up to
/// the hard one without privilege, and the call allocates nothing, so it can lift a limit the
/// process has run out under.
pub(crate) fn set_soft(resource: Resource, soft: Option<u64>) -> io::Result<()> {
    let mut limit = raw(resource)?;
    limit.rlim_cur = soft.unwrap_or(limit.rlim_max);
    // SAFETY: `limit` is a valid rlimit, only read by the call.
    if unsafe { libc::setrlimit(resource.id(), &limit) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A resource limit of a process, as `getrlimit` names it.
#[derive(Clone, Copy)]
pub(crate) enum Resource {
    Nproc,
    Nofile,
    AddressSpace,
    /// Private writable memory (`ulimit -d`).
    Data,
    /// How far the main thread's stack may grow (`ulimit -s`).
    Stack,
    /// CPU time, in seconds (`ulimit -t`).
    Cpu,
}

impl Resource {
    fn id(self) -> libc::__rlimit_resource_t {
        match self {
            Resource::Nproc => libc::RLIMIT_NPROC,
            Resource::Nofile => libc::RLIMIT_NOFILE,
            Resource::AddressSpace => libc::RLIMIT_AS,
            Resource::Data => libc::RLIMIT_DATA,
            Resource::Stack => libc::RLIMIT_STACK,
            Resource::Cpu => libc::RLIMIT_CPU,
        }
    }
}

/// This process's limit of `resource`, as `getrlimit` gives it.
fn raw(resource: Resource) -> io::Result<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit, writable for the call.
    if unsafe { libc::getrlimit(resource.id(), &mut limit) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(limit)
}

impl Rlimit {
    /// This process's limit of `resource`.
    pub(crate) fn get(resource: Resource) -> io::Result<Rlimit> {
        let limit = raw(resource)?;
        let finite = |value| (value != libc::RLIM_INFINITY).then_some(value);
        Ok(Rlimit {
            soft: finite(limit.rlim_cur),
            hard: finite(limit.rlim_max),
        })
    }
}

/// What one held request costs, beyond what the processes hold before the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cost {
    /// Threads in the server.
    threads: u64,
    /// Memory maps in the server.
    maps: u64,
    /// File descriptors in the server, and as many in the caller's process (its client is
    /// async: no thread).
    fds: u64,
    /// Address space in the server, KiB.
    address_space_kib: u64,
    /// Private writable memory in the server, KiB.
    data_kib: u64,
}

/// Memory maps each Rust thread adds, measured on this kind of machine (Linux, glibc, Rust
/// 1.95) by `thread_maps_match_the_cost` below: its stack and the guard page below it (two
/// maps, as the guard is mapped inaccessible), and the alternate signal stack with its own
/// guard page that Rust sets up on every thread to report a stack overflow (two more). A
/// thread's first allocation may also create a malloc arena (two maps), but glibc makes at most
/// eight per core, so that does not grow with the number of threads held.
const MAPS_PER_THREAD: u64 = 4;

impl Front {
    fn cost(self) -> Cost {
        match self {
            Front::Threaded => Cost {
                threads: 1,
                maps: MAPS_PER_THREAD,
                // The socket: the accept thread shuts it down through a shared handle, not a
                // second descriptor (`hold` measures 1.00 per held request).
                fds: 1,
                address_space_kib: THREAD_ADDRESS_SPACE_KIB,
                data_kib: THREAD_DATA_KIB,
            },
            Front::Async => Cost {
                threads: 0,
                maps: 0,
                fds: 1,
                address_space_kib: TASK_ADDRESS_SPACE_KIB,
                data_kib: TASK_DATA_KIB,
            },
        }
    }
}

/// Address space each held thread reserves: Rust's default 2 MiB stack, its guard page and the
/// alternate signal stack with its guard.
const THREAD_ADDRESS_SPACE_KIB: u64 = 2 * 1024 + 32;
/// Address space each held task adds, with room to spare: `hold` measures ≈ 20 KiB.
const TASK_ADDRESS_SPACE_KIB: u64 = 32;
/// Address space a front's child takes at rest beyond what the lab's process takes before it
/// starts anything: the front's runtime and listener, and the threaded front's accept thread
/// (a 2 MiB stack), with room to spare. Measured with the release build under a limit (the
/// heap then has one arena: `allocator::one_arena_under_an_address_space_limit`): `hold` at
/// its preflight 6.9 MiB, the async front's child at rest 6.9 MiB, the threaded one's 8.9 MiB.
const BASE_ADDRESS_SPACE_ROOM_KIB: u64 = 4 * 1024;
/// Private writable memory each held thread takes: its 2 MiB stack and its signal stack (their
/// guard pages are not writable, so not counted). The threaded front's child measures ≈ 2 061
/// KiB per held request at N = 1 000, its malloc arenas included.
const THREAD_DATA_KIB: u64 = 2 * 1024 + 16;
/// Private writable memory each held task takes, with room to spare: its connection's blocks
/// from the heap (the async front's child measures ≈ 19.6 KiB per held request at N = 10 000).
const TASK_DATA_KIB: u64 = 24;
/// Private writable memory a front's child takes before its first held request: ≈ 0.2 MiB at
/// rest on the async front, ≈ 2.4 MiB on the threaded one (its accept thread's stack).
const BASE_DATA_KIB: u64 = 8 * 1024;

/// A ceiling that can stop a front from holding more requests. Serialized as its
/// [`name`](Ceiling::name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ceiling {
    /// Memory maps per process.
    MaxMapCount,
    /// Pids, machine-wide.
    PidMax,
    /// Threads, machine-wide.
    ThreadsMax,
    /// Threads of this user.
    Nproc,
    /// Open files per process.
    Nofile,
    /// Ephemeral ports per source address, over at most [`MAX_SOURCE_ADDRESSES`] addresses.
    LocalPorts,
    /// Address space per process.
    AddressSpace,
    /// Private writable memory per process.
    Data,
}

impl Ceiling {
    /// Its name, as `sysctl` or `getrlimit` knows it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Ceiling::MaxMapCount => "vm.max_map_count",
            Ceiling::PidMax => "kernel.pid_max",
            Ceiling::ThreadsMax => "kernel.threads-max",
            Ceiling::Nproc => "RLIMIT_NPROC",
            Ceiling::Nofile => "RLIMIT_NOFILE",
            Ceiling::LocalPorts => "net.ipv4.ip_local_port_range",
            Ceiling::AddressSpace => "RLIMIT_AS",
            Ceiling::Data => "RLIMIT_DATA",
        }
    }
}

impl Serialize for Ceiling {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// The most requests a front can hold under some limits, and the ceiling that stops one more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Reach {
    /// The most held requests.
    pub(crate) held: u64,
    /// The ceiling that stops one more.
    pub(crate) ceiling: Ceiling,
    /// That ceiling's value.
    pub(crate) value: u64,
}

/// Why a number of held requests is refused before anything starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct TooMany {
    /// The number asked for.
    pub(crate) held: u64,
    /// The front asked for.
    pub(crate) front: Front,
    /// What that front can reach.
    pub(crate) reach: Reach,
}

impl fmt::Display for TooMany {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let front = match self.front {
            Front::Threaded => "thread-per-request",
            Front::Async => "task-per-request",
        };
        write!(
            f,
            "{} held {} on the {front} front exceed{} what {} = {} leaves once the front's own \
             use and a tenth in reserve are set aside: at most {}",
            self.held,
            if self.held == 1 {
                "request"
            } else {
                "requests"
            },
            if self.held == 1 { "s" } else { "" },
            self.reach.ceiling.name(),
            self.reach.value,
            self.reach.held,
        )
    }
}

impl std::error::Error for TooMany {}

/// Memory maps a process has before its first held request: the program, its libraries, heap,
/// stacks and malloc arenas: 41 in a test child at rest here, more with runtime threads and
/// arenas; `thread_maps_match_the_cost` checks the bound.
const BASE_MAPS: u64 = 256;
/// File descriptors a process has before its first held request, beyond those the lab had
/// open when the limits were read (a child inherits those a shell left open): the listener,
/// the runtime's epoll and waker, the pipes to a child: 6 in a test child at rest here.
const BASE_FDS: u64 = 64;
/// Threads a measurement starts besides one per held request, on top of those counted when the
/// limits were read: the threaded front's child at rest runs two (its main thread and its
/// accept thread), and the lab one more while a child runs (`lab-child-reaper`). Under
/// `prlimit --nproc=12` for a user of one thread, the threaded front held 8 and failed at 9.
const BASE_THREADS: u64 = 3;

/// What a ceiling leaves for held requests: its value, less what is taken before the first
/// (`in_use`), less a tenth of the value. The tenth is the safety margin: it absorbs what the
/// base figures miss (runtime threads, another program's threads or sockets, ports still in
/// TIME_WAIT from an earlier run) and what changes between this check and the run.
fn usable(value: u64, in_use: u64) -> u64 {
    value.saturating_sub(in_use).saturating_sub(value / 10)
}

/// The most requests `front` can hold under `limits`, and the ceiling that stops one more;
/// `None` if none of them applies (the ephemeral ports always do, though on an ordinary range
/// they allow millions). Uses RLIMIT_NOFILE's soft limit: call
/// [`raise_nofile`] before reading the limits.
///
/// Server and caller are separate processes with the same RLIMIT_NOFILE (a child inherits it),
/// each with one descriptor per request, so it stops both sides alike. RLIMIT_NPROC counts the
/// threads of this user's processes, as many as were running when the limits were read.
pub(crate) fn reach(limits: &Limits, front: Front) -> Option<Reach> {
    let cost = front.cost();
    let ceilings = [
        (
            Ceiling::MaxMapCount,
            Some(limits.max_map_count),
            BASE_MAPS,
            cost.maps,
        ),
        (
            Ceiling::PidMax,
            Some(limits.pid_max),
            limits.threads_now + BASE_THREADS,
            cost.threads,
        ),
        (
            Ceiling::ThreadsMax,
            Some(limits.threads_max),
            limits.threads_now + BASE_THREADS,
            cost.threads,
        ),
        (
            Ceiling::Nproc,
            limits.nproc.soft.filter(|_| limits.nproc_enforced),
            limits.user_threads_now + BASE_THREADS,
            cost.threads,
        ),
        (
            Ceiling::Nofile,
            limits.nofile.soft,
            BASE_FDS + limits.fds_now,
            cost.fds,
        ),
        // In KiB; the limit is in bytes.
        (
            Ceiling::AddressSpace,
            limits.address_space.soft.map(|bytes| bytes / 1024),
            limits.base_address_space_kib(),
            cost.address_space_kib,
        ),
        (
            Ceiling::Data,
            limits.data.soft.map(|bytes| bytes / 1024),
            BASE_DATA_KIB,
            cost.data_kib,
        ),
    ];
    // Every held request is a connection from one of the caller's source addresses.
    let (first, last) = limits.local_ports;
    let ports = Reach {
        held: ports_per_address(limits).saturating_mul(MAX_SOURCE_ADDRESSES),
        ceiling: Ceiling::LocalPorts,
        value: u64::from(last.saturating_sub(first)) + 1,
    };
    ceilings
        .into_iter()
        .filter_map(|(ceiling, value, in_use, per_request)| {
            let value = value?;
            (per_request > 0).then(|| Reach {
                held: usable(value, in_use) / per_request,
                ceiling,
                value,
            })
        })
        .map(|reach| {
            // Counted in KiB above; the limit itself is given in bytes, as `prlimit` takes it.
            let bytes = match reach.ceiling {
                Ceiling::AddressSpace => limits.address_space.soft,
                Ceiling::Data => limits.data.soft,
                _ => return reach,
            };
            Reach {
                value: bytes.unwrap_or(reach.value * 1024),
                ..reach
            }
        })
        .chain([ports])
        .min_by_key(|reach| reach.held)
}

/// Whether `front` can hold `held` requests under `limits`; if not, the ceiling that stops it.
/// See [`reach`].
pub(crate) fn check(limits: &Limits, front: Front, held: u64) -> Result<(), TooMany> {
    match reach(limits, front) {
        Some(reach) if held > reach.held => Err(TooMany { held, front, reach }),
        _ => Ok(()),
    }
}

/// The most source addresses the caller goes out from: 127.0.0.1 through 127.0.0.254.
pub(crate) const MAX_SOURCE_ADDRESSES: u64 = 254;

/// Connections the caller may open from one source address to the server: each takes an
/// ephemeral port of that address, from the half of the range `connect` tries first, less the
/// margin of [`usable`]. At least one.
///
/// Linux's `connect` first tries the ports of the parity of the range's first port (the even
/// ones, in the usual 32768–60999) and leaves the others to `bind`; once those are taken, each
/// connect passes over all of them before it finds one of the others, so the callers' time
/// grows with the square of the count: measured here, 14 000 held from one address in 1.27 s
/// (0.81 s of the callers' CPU), 17 936 in 6.20 s (5.77 s).
pub(crate) fn ports_per_address(limits: &Limits) -> u64 {
    let (first, last) = limits.local_ports;
    let ports = u64::from(last.saturating_sub(first)) + 1;
    usable(ports / 2, 0).max(1)
}

/// Source addresses (`127.0.0.1`, `127.0.0.2`, ...) the caller needs to hold `held` connections
/// to one server address, at most [`ports_per_address`] from each. At least one.
pub(crate) fn source_addresses_needed(held: u64, limits: &Limits) -> u64 {
    held.div_ceil(ports_per_address(limits)).max(1)
}

/// The number of threads on the machine: `total` in the fourth field, `running/total`.
fn parse_threads_now(loadavg: &str) -> Option<u64> {
    let field = loadavg.split_whitespace().nth(3)?;
    field.split_once('/')?.1.parse().ok()
}

/// `first<whitespace>last`, as in `ip_local_port_range`.
fn parse_port_range(text: &str) -> Option<(u16, u16)> {
    let mut ports = text.split_whitespace().map(str::parse::<u16>);
    let (Some(Ok(first)), Some(Ok(last)), None) = (ports.next(), ports.next(), ports.next()) else {
        return None;
    };
    (first <= last).then_some((first, last))
}

fn sysctl(name: &str) -> io::Result<u64> {
    let path = format!("/proc/sys/{name}");
    let text = read_proc(&path)?;
    text.trim()
        .parse()
        .map_err(|e| invalid(format!("{path}: not a number ({e}): {text:?}")))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::{Arc, Barrier};

    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::child::test_child::{self, step};
    use crate::child::{Exit, ToParent};
    use crate::procfs::ProcessFigures;

    /// A ceiling is written in a report by the name `sysctl` or `getrlimit` knows it by.
    #[test]
    fn a_ceiling_serializes_as_its_name() {
        let names = [Ceiling::MaxMapCount, Ceiling::Nofile, Ceiling::AddressSpace]
            .map(|ceiling| serde_json::to_string(&ceiling).ok());
        let expected = [
            r#""vm.max_map_count""#,
            r#""RLIMIT_NOFILE""#,
            r#""RLIMIT_AS""#,
        ];
        assert_eq!(names, expected.map(|name| Some(name.to_owned())));
    }

    /// This machine's defaults: 65 530 maps, 32 768 pids, RLIMIT_NOFILE 20 000.
    pub(crate) fn limits() -> Limits {
        Limits {
            max_map_count: 65_530,
            pid_max: 32_768,
            threads_max: 192_730,
            threads_now: 137,
            nproc: Rlimit {
                soft: Some(96_365),
                hard: Some(96_365),
            },
            user_threads_now: 137,
            own_address_space_kib: 12 * 1024,
            nproc_enforced: true,
            nofile: Rlimit {
                soft: Some(20_000),
                hard: Some(20_000),
            },
            fds_now: 0,
            local_ports: (32_768, 60_999),
            somaxconn: 4_096,
            address_space: UNLIMITED,
            data: UNLIMITED,
        }
    }

    /// A resource limit with no limit, soft or hard.
    pub(crate) const UNLIMITED: Rlimit = Rlimit {
        soft: None,
        hard: None,
    };

    /// `vm.max_map_count` refuses 20 000 held threads, but not 20 000 held tasks.
    #[test]
    fn max_map_count_refuses_threads_not_tasks() {
        let limits = Limits {
            nofile: Rlimit {
                soft: Some(1_048_576),
                hard: Some(1_048_576),
            },
            ..limits()
        };
        let refusal = check(&limits, Front::Threaded, 20_000).expect_err("too many maps");
        // (65 530 - 256 - 6 553) / 4 maps per thread.
        let by_maps = Reach {
            held: 14_680,
            ceiling: Ceiling::MaxMapCount,
            value: 65_530,
        };
        assert_eq!(refusal.reach, by_maps);
        assert!(
            refusal.to_string().contains("vm.max_map_count = 65530"),
            "{refusal}"
        );
        assert_eq!(check(&limits, Front::Threaded, 14_680), Ok(()));
        assert_eq!(check(&limits, Front::Async, 20_000), Ok(()));
    }

    /// With this machine's RLIMIT_NOFILE (20 000, hard and soft) descriptors stop the async
    /// front first; the threaded one, one descriptor per connection too, meets its memory maps
    /// sooner.
    #[test]
    fn nofile_stops_tasks_and_maps_stop_threads_on_this_machine() {
        let limits = limits();
        // (20 000 - 64 - 2 000) fds, one per request on each side.
        let by_fds = Reach {
            held: 17_936,
            ceiling: Ceiling::Nofile,
            value: 20_000,
        };
        assert_eq!(reach(&limits, Front::Async), Some(by_fds));
        assert_eq!(check(&limits, Front::Async, 17_936), Ok(()));
        assert!(check(&limits, Front::Async, 17_937).is_err());
        let threads = Reach {
            held: 14_680,
            ceiling: Ceiling::MaxMapCount,
            value: 65_530,
        };
        assert_eq!(reach(&limits, Front::Threaded), Some(threads));
    }

    /// A low RLIMIT_NOFILE stops both fronts alike: one descriptor per connection on each side.
    #[test]
    fn nofile_refuses_both_fronts() {
        let limits = Limits {
            nofile: Rlimit {
                soft: Some(1_024),
                hard: Some(4_096),
            },
            ..limits()
        };
        let tasks = check(&limits, Front::Async, 2_000).expect_err("too few fds");
        // 1 024 - 64 - 102.
        assert_eq!(
            (tasks.reach.ceiling, tasks.reach.held),
            (Ceiling::Nofile, 858)
        );
        let threads = check(&limits, Front::Threaded, 2_000).expect_err("too few fds");
        assert_eq!(
            (threads.reach.ceiling, threads.reach.held),
            (Ceiling::Nofile, 858)
        );
        assert_eq!(check(&limits, Front::Async, 500), Ok(()));
        // Descriptors a shell left open to the lab (`exec 10</dev/null` …, eighty of them),
        // which its child inherits too, leave fewer: 1 024 - 64 - 80 - 102.
        let inherited = Limits {
            fds_now: 80,
            ..limits
        };
        let fewer = check(&inherited, Front::Async, 2_000).expect_err("too few fds");
        assert_eq!(fewer.reach.held, 778);
    }

    /// RLIMIT_AS (here 64 MiB, as `prlimit --as=67108864`) leaves room for a few threads, each
    /// reserving its stack, and for hundreds of tasks; the refusal names it in bytes.
    #[test]
    fn an_address_space_limit_stops_threads_long_before_tasks() {
        let limits = Limits {
            address_space: Rlimit {
                soft: Some(67_108_864),
                hard: None,
            },
            ..limits()
        };
        // (65 536 - 16 384 - 6 553) KiB.
        let threads = check(&limits, Front::Threaded, 100).expect_err("no room for stacks");
        assert_eq!(
            (
                threads.reach.ceiling,
                threads.reach.held,
                threads.reach.value
            ),
            (Ceiling::AddressSpace, 42_599 / 2_080, 67_108_864)
        );
        assert!(
            threads.to_string().contains("RLIMIT_AS = 67108864"),
            "{threads}"
        );
        let tasks = reach(&limits, Front::Async).expect("a ceiling");
        assert_eq!(
            (tasks.ceiling, tasks.held),
            (Ceiling::AddressSpace, 42_599 / 32)
        );
    }

    /// RLIMIT_DATA (here 64 MiB, as `prlimit --data=67108864`) counts every thread's stack but
    /// the main one's, and the heap, so it too stops threads long before tasks; the refusal names it in bytes.
    #[test]
    fn a_private_memory_limit_stops_threads_long_before_tasks() {
        let limits = Limits {
            data: Rlimit {
                soft: Some(67_108_864),
                hard: None,
            },
            ..limits()
        };
        // (65 536 - 8 192 - 6 553) KiB.
        let threads = check(&limits, Front::Threaded, 100).expect_err("no room for stacks");
        let stops = threads.reach;
        let ceiling = (stops.ceiling, stops.held, stops.value);
        assert_eq!(ceiling, (Ceiling::Data, 50_791 / 2_064, 67_108_864));
        let said = threads.to_string();
        assert!(said.contains("RLIMIT_DATA = 67108864"), "{said}");
        let tasks = reach(&limits, Front::Async).expect("a ceiling");
        assert_eq!((tasks.ceiling, tasks.held), (Ceiling::Data, 50_791 / 24));
    }

    /// Threads also count against pids and threads on the whole machine, less those running.
    #[test]
    fn threads_count_against_machine_ceilings() {
        let limits = Limits {
            max_map_count: 1_000_000,
            threads_now: 10_000,
            nofile: Rlimit {
                soft: Some(1_000_000),
                hard: Some(1_000_000),
            },
            ..limits()
        };
        let refusal = check(&limits, Front::Threaded, 20_000).expect_err("too few pids");
        // 32 768 - 10 000 - 3 (the front's and the lab's own) - 3 276.
        assert_eq!(
            (refusal.reach.ceiling, refusal.reach.held),
            (Ceiling::PidMax, 19_489)
        );
        let nproc = Limits {
            nproc: Rlimit {
                soft: Some(20_000),
                hard: None,
            },
            user_threads_now: 10_000,
            ..limits
        };
        let refusal = check(&nproc, Front::Threaded, 9_000).expect_err("too few procs");
        assert_eq!(
            (refusal.reach.ceiling, refusal.reach.held),
            (Ceiling::Nproc, 7_997)
        );
        // RLIMIT_NPROC counts this user's threads, not the machine's: 20 000 - 100 - 3 - 2 000.
        let few = Limits {
            user_threads_now: 100,
            ..nproc
        };
        assert_eq!(check(&few, Front::Threaded, 9_000), Ok(()));
        let refusal = check(&few, Front::Threaded, 18_000).expect_err("too few procs");
        assert_eq!(
            (refusal.reach.ceiling, refusal.reach.held),
            (Ceiling::Nproc, 17_897)
        );
        // A small limit: 12 - 1 - 3 - a tenth (1). Under `prlimit --nproc=12` a user of one
        // thread held 8 on the threaded front, failing at 9.
        let twelve = Limits {
            nproc: Rlimit {
                soft: Some(12),
                hard: Some(12),
            },
            user_threads_now: 1,
            ..nproc
        };
        let refusal = check(&twelve, Front::Threaded, 9).expect_err("too few procs");
        assert_eq!(
            (refusal.reach.ceiling, refusal.reach.held),
            (Ceiling::Nproc, 7)
        );
        assert_eq!(check(&nproc, Front::Async, 100_000), Ok(()));
        // Root is not held to it: the next ceiling stops the threads.
        let root = Limits {
            nproc_enforced: false,
            ..nproc
        };
        assert_eq!(check(&root, Front::Threaded, 9_000), Ok(()));
    }

    /// RLIMIT_NPROC binds a user's process, not root's or a process with `CAP_SYS_ADMIN` or
    /// `CAP_SYS_RESOURCE`, and those only in the initial user namespace.
    #[test]
    fn nproc_is_enforced_as_the_kernel_decides() {
        let status = |uid: u32, caps: &str| {
            format!("Name:\tlab\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapEff:\t{caps}\n")
        };
        let initial = "         0          0 4294967295\n";
        let mapped = "         0     100000      65536\n";
        let none = "0000000000000000";
        let admin = "0000000000200000";
        let resource = "0000000001000000";
        let every_other_capability = "000001fffedfffff";
        assert!(nproc_enforced(&status(1000, none), initial));
        assert!(!nproc_enforced(&status(0, none), initial));
        assert!(!nproc_enforced(&status(1000, admin), initial));
        assert!(!nproc_enforced(&status(1000, resource), initial));
        assert!(nproc_enforced(
            &status(1000, every_other_capability),
            initial
        ));
        assert!(nproc_enforced(&status(0, admin), mapped));
    }

    /// With the rlimits unlimited, only the ephemeral ports bind: millions of requests.
    #[test]
    fn unlimited_ceilings_refuse_nothing() {
        let limits = Limits {
            nofile: UNLIMITED,
            ..limits()
        };
        let ports = Reach {
            held: 12_705 * MAX_SOURCE_ADDRESSES,
            ceiling: Ceiling::LocalPorts,
            value: 28_232,
        };
        assert_eq!(reach(&limits, Front::Async), Some(ports));
        assert_eq!(check(&limits, Front::Async, 3_227_070), Ok(()));
    }

    /// One source address has the half of the ephemeral range `connect` tries first, less a
    /// tenth; beyond it, more addresses.
    #[test]
    fn source_addresses_spread_the_ports() {
        let limits = limits();
        // 14 116 of 28 232 ports, less 1 411.
        assert_eq!(ports_per_address(&limits), 12_705);
        assert_eq!(source_addresses_needed(0, &limits), 1);
        assert_eq!(source_addresses_needed(12_705, &limits), 1);
        assert_eq!(source_addresses_needed(12_706, &limits), 2);
        assert_eq!(source_addresses_needed(100_000, &limits), 8);
        let one_port = Limits {
            local_ports: (40_000, 40_000),
            ..limits
        };
        assert_eq!(source_addresses_needed(3, &one_port), 3);
    }

    /// The small files parse as the kernel writes them.
    #[test]
    fn proc_text_parses() {
        assert_eq!(parse_threads_now("3.65 1.29 0.54 4/137 10536\n"), Some(137));
        assert_eq!(parse_threads_now("3.65 1.29 0.54\n"), None);
        assert_eq!(parse_port_range("32768\t60999\n"), Some((32_768, 60_999)));
        assert_eq!(parse_port_range("60999\t32768\n"), None);
        assert_eq!(parse_port_range("32768\n"), None);
        assert_eq!(parse_port_range("1 2 3\n"), None);
    }

    /// This user's threads, counted from `/proc` as RLIMIT_NPROC counts them: this test's own
    /// threads are among them, and no user has more than the machine.
    #[test]
    fn counts_this_users_threads() {
        use crate::procfs::number_field;
        let status = std::fs::read_to_string("/proc/self/status").expect("our status");
        let uid = real_uid(&status).expect("a real uid");
        let mine = number_field(&status, "Threads").expect("our threads");
        let counted = threads_of_user(uid).expect("/proc is listed");
        assert!(
            counted >= mine,
            "{counted} threads of uid {uid}, we alone have {mine}"
        );
        let machine = parse_threads_now(&read_proc("/proc/loadavg").expect("loadavg"));
        // Threads start and end meanwhile: a margin, not an exact count.
        assert!(counted <= machine.expect("a count") + 64, "{counted}");
    }

    /// The real limits of this machine read, and raising RLIMIT_NOFILE reaches the hard limit.
    #[test]
    fn reads_and_raises_the_real_limits() {
        if !cfg!(target_os = "linux") {
            assert_eq!(
                Limits::read().map_err(|e| e.kind()),
                Err(io::ErrorKind::Unsupported)
            );
            return;
        }
        let limits = Limits::read().expect("read the limits");
        assert!(limits.max_map_count > 0 && limits.pid_max > 0 && limits.threads_now > 0);
        assert!(limits.local_ports.0 <= limits.local_ports.1);
        let raised = raise_nofile().expect("raise RLIMIT_NOFILE");
        assert_eq!(raised.soft, raised.hard);
        assert_eq!(raised.hard, limits.nofile.hard);
    }

    const ENTRY: &str = "limits::tests::child_entry";
    /// Enough threads that the malloc arenas some of them create (two maps each, at most eight
    /// per core) cannot hide the per-thread figure.
    const THREADS: u64 = 1_000;

    #[derive(Debug, Serialize, Deserialize)]
    struct Measured {
        before: ProcessFigures,
        with_threads: ProcessFigures,
    }

    /// Not a test: the body of the child process `thread_maps_match_the_cost` starts, which
    /// counts its own memory maps with and without `THREADS` idle threads.
    #[test]
    #[ignore = "runs only as a child process of this module's tests"]
    fn child_entry() {
        if test_child::role().is_none() {
            return;
        }
        let pid = std::process::id();
        let before = ProcessFigures::read(pid).expect("read /proc/self");
        let started = Arc::new(Barrier::new(1 + THREADS as usize));
        let release = Arc::new(Barrier::new(1 + THREADS as usize));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (started, release) = (started.clone(), release.clone());
                std::thread::spawn(move || {
                    started.wait();
                    release.wait();
                })
            })
            .collect();
        started.wait();
        let with_threads = ProcessFigures::read(pid).expect("read /proc/self");
        release.wait();
        for thread in threads {
            thread.join().expect("an idle thread does not panic");
        }
        let measured = Measured {
            before,
            with_threads,
        };
        test_child::block_on(async {
            let mut to_parent = ToParent::stdout().expect("the parent's stdout");
            to_parent.send(&measured).await.expect("the parent reads");
        });
        std::process::exit(0)
    }

    /// Each held thread adds `MAPS_PER_THREAD` maps: measured in a child process, where no
    /// other test starts threads meanwhile.
    #[tokio::test]
    async fn thread_maps_match_the_cost() {
        let mut child = test_child::spawn(ENTRY, "threads").await;
        let measured = step("the measurement", child.recv::<Measured>()).await;
        let Measured {
            before,
            with_threads,
        } = measured.expect("read").expect("a measurement");
        let exit: Exit = step("exit", child.wait()).await.expect("waited");
        assert_eq!(exit.code, Some(0), "{exit}");
        assert_eq!(with_threads.os_threads - before.os_threads, THREADS);
        let added = with_threads.memory_maps - before.memory_maps;
        // glibc makes up to 8 malloc arenas per CPU, two maps each. This glibc (Debian's 2.36)
        // counts the online CPUs, not the ones this process may run on
        // (`available_parallelism`, 1 under `taskset -c 0`); a glibc that counts those has
        // fewer arenas, still under this bound.
        // SAFETY: sysconf reads a system value and touches no memory of ours.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        let arenas = 2 * 8 * u64::try_from(online).unwrap_or(1).max(1);
        assert!(
            (THREADS * MAPS_PER_THREAD..=THREADS * MAPS_PER_THREAD + arenas).contains(&added),
            "{THREADS} threads added {added} maps; {before:?} then {with_threads:?}"
        );
        assert!(before.memory_maps <= BASE_MAPS, "{before:?}");
        assert!(before.open_fds <= BASE_FDS, "{before:?}");
    }
}
