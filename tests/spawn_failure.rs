//! A connection whose thread cannot start is closed unserved and reported, is not counted as
//! accepted, and does not end the threaded server. This file holds one test, since the test
//! limits the whole process's address space for a moment.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use isolation_lab::admission::section::WorkSection;
use isolation_lab::admission::token::RunToken;
use isolation_lab::hooks::NoHooks;
use isolation_lab::policy::{Mode, Policy, Slots};
use isolation_lab::server::{self, Front, HandlerCount};

/// A failure guard on each read; never reached when the server works.
const GUARD: Duration = Duration::from_secs(30);

/// Room left in the address space while the limit holds: enough for small allocations, not for
/// a thread's stack (2 MiB by default).
const ROOM: u64 = 1024 * 1024;

/// What a new thread's stack takes at least: more than [`ROOM`].
const STACK: usize = 2 * 1024 * 1024;

/// With the address space limited so that no new thread's stack fits, a client connects: the
/// threaded server accepts it, cannot start its thread, and closes it. With the limit lifted, a
/// second client is served. Stopped, the server counts one connection (the one with a thread),
/// every counted handler joined, and reports the one it closed unserved.
#[test]
fn a_connection_whose_thread_cannot_start_is_closed_and_the_server_goes_on() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: prlimit (util-linux) is not installed"
        );
        return;
    }
    let token = RunToken::generate().expect("the OS has randomness");
    let slots = Slots::new(2).expect("2 slots are allowed");
    let policy = Policy {
        mode: Mode::Shared,
        slots,
    };
    let section = WorkSection::new(policy, server::permits(Front::Threaded), token);
    let census = Arc::new(HandlerCount::default());
    let hooks = Arc::new(NoHooks);
    let started = server::start(Front::Threaded, Arc::new(section), census, hooks, GUARD);
    let (address, running) = started.expect("127.0.0.1:0 binds");

    // Under the limit this process cannot start the process that lifts it: start it first,
    // waiting for a line on its stdin.
    let pid = std::process::id();
    let mut lifter = Command::new("sh")
        .arg("-c")
        .arg(r#"read _ && exec prlimit --pid "$0" --as=unlimited:unlimited"#)
        .arg(pid.to_string())
        .stdin(Stdio::piped())
        .spawn()
        .expect("sh starts");
    // The address space is measured once no other thread can change it: the server's accept
    // thread maps memory of its own as it starts (64 MiB more here), and a figure read before
    // or while it does is not the one the limit then meets.
    others_asleep();
    let mapped = mapped_bytes().expect("Linux /proc/self/status");
    let limit = format!("--as={}:unlimited", mapped + ROOM);
    let set = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &limit])
        .status()
        .expect("prlimit runs");
    assert!(set.success(), "prlimit {limit}: {set}");
    let room = stack_fits();
    let first = ask(address);
    let lift = lifter.stdin.take().expect("piped").write_all(b"\n");
    let lifted = lifter.wait().expect("the lifter ends");
    assert!(
        lift.is_ok() && lifted.success(),
        "the limit was not lifted: {lifted}"
    );
    assert!(
        !room,
        "{limit} (VmSize {mapped} bytes) still left room for a thread's stack"
    );
    let first = first.expect("the client connects");
    assert_eq!(first, "", "closed unserved: no reply");

    let second = ask(address).expect("the server still accepts");
    assert!(second.starts_with("HTTP/1.1 403"), "{second}");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let stopped = runtime.block_on(running.stop()).expect("the server stops");
    let summary = stopped.summary;
    assert_eq!(summary.connections_accepted, 1, "{summary:?}");
    assert!(summary.connection_tasks_stopped, "{summary:?}");
    let error = stopped.error.unwrap_or_default();
    assert!(
        error.contains("closed 1 connection(s) unserved"),
        "the server reports the connection it could not serve: {error:?}"
    );
}

/// A request without the run's token on a new connection, and whatever came back before the
/// server closed it (a reset counts as nothing).
fn ask(address: SocketAddr) -> std::io::Result<String> {
    let mut client = TcpStream::connect(address)?;
    client.write_all(b"GET /fast HTTP/1.1\r\nhost: lab\r\nconnection: close\r\n\r\n")?;
    client.set_read_timeout(Some(GUARD))?;
    let mut reply = Vec::new();
    match client.read_to_end(&mut reply) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        read => {
            read?;
        }
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Waits until every other thread of this process sleeps (`S` in its `/proc` stat): the
/// harness's waiting for this test, the accept thread waiting for a connection. None of them
/// maps or unmaps memory until woken, and nothing wakes them before the limit is set.
fn others_asleep() {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() }.to_string();
    let until = Instant::now() + GUARD;
    loop {
        let tasks = std::fs::read_dir("/proc/self/task").expect("Linux /proc");
        let mut others = tasks.filter_map(|task| {
            let task = task.ok()?;
            (task.file_name() != me.as_str()).then(|| task.path())
        });
        let asleep = others.all(|task| {
            let stat = std::fs::read_to_string(task.join("stat")).unwrap_or_default();
            // A thread that ended meanwhile has no stat: it maps nothing more either.
            stat.is_empty()
                || stat
                    .rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('S'))
        });
        if asleep {
            return;
        }
        assert!(
            Instant::now() < until,
            "the process's other threads never all slept"
        );
        std::thread::yield_now();
    }
}

/// Whether a thread's stack could be mapped now (it is unmapped again at once).
fn stack_fits() -> bool {
    // SAFETY: a fresh private anonymous mapping, touching no existing memory; unmapped below.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return false;
    }
    // SAFETY: `at` is the mapping just made, of `STACK` bytes.
    unsafe { libc::munmap(at, STACK) };
    true
}

/// The process's mapped address space now.
fn mapped_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmSize:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}
