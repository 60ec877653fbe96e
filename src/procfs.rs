//! Measured figures from Linux's `/proc`: what one process holds (threads, memory, memory maps,
//! open files) and machine-wide counters (the kernel's thread stacks and slab, listen-queue
//! overflows). Each file is parsed by a pure function, tested on text copied from a real
//! machine (`tests/data/proc/`). On other OSes every reader fails with
//! [`io::ErrorKind::Unsupported`].

use std::io;

use serde::{Deserialize, Serialize};

/// What one process holds, read file after file (not one atomic snapshot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessFigures {
    /// Its OS threads (`Threads` in `/proc/<pid>/status`).
    pub os_threads: u64,
    /// Its resident memory in KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Its address space in KiB (`VmSize`): reserved, not necessarily resident.
    pub address_space_kib: u64,
    /// Its memory mappings (lines of `/proc/<pid>/maps`), which `vm.max_map_count` bounds.
    pub memory_maps: u64,
    /// Its open file descriptors (entries of `/proc/<pid>/fd`). For this process that includes
    /// the one used to list them.
    pub open_fds: u64,
}

impl ProcessFigures {
    /// Reads the figures of process `pid`. Fails if it is gone, is a zombie (which has no
    /// memory figures), or belongs to another user.
    pub(crate) fn read(pid: u32) -> io::Result<ProcessFigures> {
        let status_path = format!("/proc/{pid}/status");
        let status = read_proc(&status_path)?;
        let status = StatusFigures::parse(&status).ok_or_else(|| {
            invalid(format!(
                "{status_path} lacks Threads, VmRSS or VmSize (a zombie?)"
            ))
        })?;
        let maps = read_proc_bytes(&format!("/proc/{pid}/maps"))?;
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?;
        Ok(ProcessFigures {
            os_threads: status.threads,
            rss_kib: status.rss_kib,
            address_space_kib: status.size_kib,
            memory_maps: line_count(&maps),
            open_fds: u64::try_from(fds.count()).unwrap_or(u64::MAX),
        })
    }
}

/// The fields `keys` of one reading of `/proc/meminfo`, in KiB, for the whole machine:
/// `KernelStack` (the kernel-side stacks of every thread, which no process's resident memory
/// counts), `Slab` (the kernel's object caches, sockets among them).
pub(crate) fn meminfo_kib<const N: usize>(keys: [&str; N]) -> io::Result<[u64; N]> {
    let meminfo = read_proc("/proc/meminfo")?;
    let mut kib = [0; N];
    for (value, key) in kib.iter_mut().zip(keys) {
        *value = kib_field(&meminfo, key)
            .ok_or_else(|| invalid(format!("/proc/meminfo has no {key}")))?;
    }
    Ok(kib)
}

/// `TcpExt: ListenOverflows` in `/proc/net/netstat`: how often, since boot, a listener's accept
/// queue was full when a connection completed its handshake. Counts every listener in this
/// network namespace, so compare two readings around a run.
pub(crate) fn listen_overflows() -> io::Result<u64> {
    let netstat = read_proc("/proc/net/netstat")?;
    netstat_field(&netstat, "TcpExt", "ListenOverflows")
        .ok_or_else(|| invalid("/proc/net/netstat has no TcpExt ListenOverflows".into()))
}

/// What `/proc/<pid>/stat` says of a process: its state and the CPU it has used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcessStat {
    /// The state letter: `R` running, `S` sleeping, `T` stopped (SIGSTOP), `Z` zombie, ...
    pub(crate) state: char,
    /// CPU time used, user and system, in milliseconds (the kernel counts clock ticks).
    pub(crate) cpu_ms: u64,
}

impl ProcessStat {
    /// Reads `/proc/<pid>/stat`; `pid` may be this process's own.
    pub(crate) fn read(pid: u32) -> io::Result<ProcessStat> {
        let path = format!("/proc/{pid}/stat");
        let text = read_proc(&path)?;
        // SAFETY: sysconf only reads a constant of the system.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let ticks = u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100);
        parse_stat(&text, ticks).ok_or_else(|| invalid(format!("{path}: not a stat line")))
    }

    /// Whether the process is stopped by a signal (`T`: SIGSTOP, SIGTSTP). A process under a
    /// tracer shows `t` at each traced step, `strace` too, so that is not counted as stopped.
    pub(crate) fn stopped(&self) -> bool {
        self.state == 'T'
    }
}

/// Whether a read of a process's stat says it is dead: a zombie, or gone (already reaped).
pub(crate) fn dead(read: &io::Result<ProcessStat>) -> bool {
    match read {
        Ok(stat) => stat.state == 'Z',
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// Whether process `pid` is stopped by a signal (SIGSTOP).
pub(crate) fn is_stopped(pid: u32) -> bool {
    ProcessStat::read(pid).is_ok_and(|stat| stat.stopped())
}

/// The state and `utime + stime` of a `/proc/<pid>/stat` line. The command name, in
/// parentheses, may hold spaces and parentheses itself: the fields start after the last `)`.
fn parse_stat(text: &str, ticks_per_second: u64) -> Option<ProcessStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // After the name: state, ppid, pgrp, session, tty_nr, tpgid, flags, minflt, cminflt,
    // majflt, cmajflt, utime, stime.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let cpu_ms = (utime + stime).saturating_mul(1000) / ticks_per_second;
    Some(ProcessStat { state, cpu_ms })
}

/// Connections a listening socket dropped since it was made: the kernel's `sk_drops`, which a
/// listener counts up on every `ListenDrops` of its own (a full accept queue included), read
/// with `SO_MEMINFO` (Linux 3.6 and later). `fd` must be the listener, or a duplicate of it.
pub(crate) fn listen_drops(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    /// `SO_MEMINFO` in `asm-generic/socket.h` (x86, Arm, RISC-V; MIPS and SPARC differ).
    const SO_MEMINFO: libc::c_int = 55;
    /// `SK_MEMINFO_VARS` in `linux/sock_diag.h`; the kernel writes at most as many as given.
    const VARS: usize = 9;
    const DROPS: usize = libc::SK_MEMINFO_DROPS as usize;
    if !cfg!(target_os = "linux") {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a socket's drops are read on Linux only",
        ));
    }
    let mut meminfo = [0u32; VARS];
    let mut len = libc::socklen_t::try_from(std::mem::size_of_val(&meminfo))
        .expect("36 bytes fit in socklen_t");
    // SAFETY: `meminfo` is writable for `len` bytes, and the kernel writes at most `len`.
    let result = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MEMINFO,
            meminfo.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if result == -1 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < (DROPS + 1) * std::mem::size_of::<u32>() {
        return Err(invalid("SO_MEMINFO gave no drop count".into()));
    }
    Ok(u64::from(meminfo[DROPS]))
}

/// The three figures `ProcessFigures` takes from `/proc/<pid>/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StatusFigures {
    threads: u64,
    rss_kib: u64,
    size_kib: u64,
}

impl StatusFigures {
    fn parse(status: &str) -> Option<StatusFigures> {
        Some(StatusFigures {
            threads: number_field(status, "Threads")?,
            rss_kib: kib_field(status, "VmRSS")?,
            size_kib: kib_field(status, "VmSize")?,
        })
    }
}

/// The real uid in a `/proc/<pid>/status`.
pub(crate) fn real_uid(status: &str) -> Option<u32> {
    let ids = status.lines().find_map(|line| line.strip_prefix("Uid:"))?;
    ids.split_whitespace().next()?.parse().ok()
}

/// The threads of every process whose real uid is `uid`, from each `/proc/<pid>/status`: what
/// RLIMIT_NPROC counts; `None` if `/proc` cannot be listed. A process that ends while it is
/// read is skipped.
pub(crate) fn threads_of_user(uid: u32) -> Option<u64> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let pids = entries.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok());
    let threads = pids.filter_map(|pid| {
        let status = read_proc(&format!("/proc/{pid}/status")).ok()?;
        (real_uid(&status)? == uid).then(|| number_field(&status, "Threads"))?
    });
    Some(threads.sum())
}

/// The value of a `Key:  <number>` line, as in `/proc/<pid>/status`.
pub(crate) fn number_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix(':')?;
        value.trim().parse().ok()
    })
}

/// The value of a `Key:  <number> kB` line, as in `/proc/meminfo`; the kernel's "kB" is KiB.
pub(crate) fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix(':')?;
        value.trim().strip_suffix("kB")?.trim_end().parse().ok()
    })
}

/// A counter from `/proc/net/netstat`, where each group is a line of names (`TcpExt: A B ...`)
/// followed by a line of values in the same order (`TcpExt: 0 7 ...`).
fn netstat_field(text: &str, group: &str, key: &str) -> Option<u64> {
    let prefix = format!("{group}:");
    let mut lines = text.lines().filter_map(|line| line.strip_prefix(&prefix));
    let names = lines.next()?;
    let values = lines.next()?;
    let index = names.split_whitespace().position(|name| name == key)?;
    values.split_whitespace().nth(index)?.parse().ok()
}

fn line_count(text: &[u8]) -> u64 {
    text.iter().map(|&byte| u64::from(byte == b'\n')).sum()
}

/// The text of the `/proc` file at `path`; its errors name the path.
pub(crate) fn read_proc(path: &str) -> io::Result<String> {
    read_proc_bytes(path).and_then(|bytes| {
        String::from_utf8(bytes).map_err(|e| invalid(format!("{path} is not UTF-8: {e}")))
    })
}

fn read_proc_bytes(path: &str) -> io::Result<Vec<u8>> {
    if !cfg!(target_os = "linux") {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{path}: /proc figures are read on Linux only"),
        ));
    }
    std::fs::read(path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))
}

pub(crate) fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/self/status` of a small Rust program with two threads besides its main one.
    const STATUS: &str = include_str!("../tests/data/proc/status");
    const MEMINFO: &str = include_str!("../tests/data/proc/meminfo");
    const NETSTAT: &str = include_str!("../tests/data/proc/netstat");

    /// The status figures come from their own lines, in KiB, and nothing else.
    #[test]
    fn status_figures_parse_real_text() {
        let figures = StatusFigures::parse(STATUS);
        let expected = StatusFigures {
            threads: 3,
            rss_kib: 2104,
            size_kib: 138_220,
        };
        assert_eq!(figures, Some(expected));
        // A longer name that starts with the key's is another field.
        assert_eq!(kib_field("VmRSSx: 5 kB\nVmRSS: 7 kB\n", "VmRSS"), Some(7));
        assert_eq!(
            number_field("Threadsx:\t9\nThreads:\t4\n", "Threads"),
            Some(4)
        );
    }

    /// A zombie's status has no memory lines: no figures rather than zeros.
    #[test]
    fn status_without_memory_lines_has_no_figures() {
        let zombie: String = STATUS
            .lines()
            .filter(|line| !line.starts_with("Vm"))
            .map(|line| format!("{line}\n"))
            .collect();
        assert_eq!(StatusFigures::parse(&zombie), None);
    }

    /// `KernelStack` is read in KiB from real `/proc/meminfo` text.
    #[test]
    fn kernel_stack_parses_real_meminfo() {
        assert_eq!(kib_field(MEMINFO, "KernelStack"), Some(1912));
        assert_eq!(kib_field(MEMINFO, "NoSuchField"), None);
        assert!(kib_field(MEMINFO, "Slab").is_some_and(|kib| kib > 0));
    }

    /// A netstat counter is the value in its name's column, in its own group.
    #[test]
    fn netstat_counters_parse_real_text() {
        assert_eq!(netstat_field(NETSTAT, "TcpExt", "ListenOverflows"), Some(0));
        // Columns with non-zero values show that the column is the name's.
        assert_eq!(netstat_field(NETSTAT, "TcpExt", "TW"), Some(22_412));
        assert_eq!(netstat_field(NETSTAT, "TcpExt", "DelayedACKs"), Some(133));
        assert_eq!(
            netstat_field(NETSTAT, "IpExt", "InOctets").map(|n| n > 0),
            Some(true)
        );
        assert_eq!(netstat_field(NETSTAT, "TcpExt", "NoSuchCounter"), None);
        let overflowed = "TcpExt: ListenDrops ListenOverflows\nTcpExt: 9 7\n";
        assert_eq!(
            netstat_field(overflowed, "TcpExt", "ListenOverflows"),
            Some(7)
        );
        assert_eq!(
            netstat_field("TcpExt: ListenOverflows\n", "TcpExt", "ListenOverflows"),
            None
        );
    }

    /// A stat line's state and CPU time, past a name with spaces and parentheses in it.
    #[test]
    fn stat_parses_past_an_awkward_name() {
        let line = "4242 (isolation (lab) x) T 1 4242 4242 0 -1 4194560 131 0 0 0 150 25 0 0 \
                    20 0 1 0 83 10485760 1600 18446744073709551615\n";
        let stat = parse_stat(line, 100).expect("a stat line");
        assert_eq!(
            stat,
            ProcessStat {
                state: 'T',
                cpu_ms: 1750
            }
        );
        assert!(stat.stopped());
        let traced = parse_stat(&line.replace(") T ", ") t "), 100).expect("a stat line");
        assert!(!traced.stopped(), "a traced step is not a stop");
        assert_eq!(parse_stat("4242 (x) S 1 2", 100), None);
    }

    /// Memory maps are counted by line.
    #[test]
    fn maps_are_counted_by_line() {
        let maps = b"5605cb2f6000-5605cb30d000 r--p 00000000 fe:00 10018880 /tmp/m\n\
                     7ffea3d13000-7ffea3d34000 rw-p 00000000 00:00 0 [stack]\n";
        assert_eq!(line_count(maps), 2);
        assert_eq!(line_count(b""), 0);
    }

    /// This process's own figures, read from the real `/proc/self`, are plausible.
    #[test]
    fn reads_this_process() {
        if !cfg!(target_os = "linux") {
            let error = ProcessFigures::read(std::process::id()).expect_err("Linux only");
            assert_eq!(error.kind(), io::ErrorKind::Unsupported);
            return;
        }
        let figures = ProcessFigures::read(std::process::id()).expect("read /proc/self");
        // The test harness runs this test on a thread of its own, besides the main one.
        assert!(figures.os_threads >= 2, "{figures:?}");
        assert!(figures.rss_kib > 0 && figures.address_space_kib > figures.rss_kib);
        // The program, its libraries, the heap and the stacks: dozens of maps.
        assert!(figures.memory_maps > 10, "{figures:?}");
        // stdin, stdout, stderr and the directory being listed.
        assert!(figures.open_fds >= 4, "{figures:?}");
        let [stack] = meminfo_kib(["KernelStack"]).expect("read /proc/meminfo");
        assert!(stack > 0);
        listen_overflows().expect("read /proc/net/netstat");
        let own = ProcessStat::read(std::process::id()).expect("read /proc/self/stat");
        assert!(!own.stopped(), "{own:?}");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        use std::os::fd::AsFd;
        assert_eq!(listen_drops(listener.as_fd()).expect("SO_MEMINFO"), 0);
    }
}
