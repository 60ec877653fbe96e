//! The threaded front's threads are all gone once it has stopped, so `after_run.os_threads`
//! is exact: equal to the count before the run, on every run. This file holds one test, so no
//! other test's threads come and go while it counts the process's threads.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use common::Case;
use isolation_lab::admission::section::WorkSection;
use isolation_lab::admission::token::RunToken;
use isolation_lab::coordinator::{Options, run_policy_with};
use isolation_lab::hooks::NoHooks;
use isolation_lab::policy::Mode;
use isolation_lab::resources::os_threads;
use isolation_lab::server::{self, Front, HandlerCount};

/// Whole threaded policy runs, each read from its report.
const RUNS: usize = 40;

/// Bare start-serve-stop cycles: the accept thread is joined last, just before the count, so
/// this is where a thread the kernel still lists would show.
const CYCLES: usize = 400;

/// On a current-thread runtime (no thread of its own), every threaded run reports, after it
/// has closed everything, exactly the threads the process had before it; and after each bare
/// cycle — one connection served, then `stop` — the count is back where it started. A thread
/// that `join` has returned for can still be listed by the kernel for a moment, so a count
/// taken at once was one too many in about one run in a thousand.
#[test]
fn every_threaded_run_ends_with_the_threads_it_started_with() {
    let Some(before) = os_threads() else {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: this OS does not list a process's threads in /proc/self/task"
        );
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    for run in 0..RUNS {
        let case = Case::new(Mode::ALL[run % 2], 2, 2);
        let options = Options::on(Front::Threaded);
        let ran = runtime.block_on(run_policy_with(case.policy(), case.held(), options));
        assert_eq!(ran.failure, None, "run {run}");
        let after = ran
            .report
            .resources
            .after_run
            .expect("counted after the run");
        assert_eq!(after.os_threads, Some(before), "run {run}: {after:?}");
    }
    for cycle in 0..CYCLES {
        let token = RunToken::generate().expect("the OS has randomness");
        let policy = Case::new(Mode::Shared, 2, 1).policy();
        let section = WorkSection::new(policy, server::permits(Front::Threaded), token);
        let census = Arc::new(HandlerCount::default());
        let started = server::start(
            Front::Threaded,
            Arc::new(section),
            census,
            Arc::new(NoHooks),
            std::time::Duration::from_secs(5),
        );
        let (address, running) = started.expect("127.0.0.1:0 binds");
        // One request without the run's token: answered 403, and the connection closes.
        let mut client = TcpStream::connect(address).expect("the server accepts");
        let request = "GET /fast HTTP/1.1\r\nhost: lab\r\nconnection: close\r\n\r\n";
        client.write_all(request.as_bytes()).expect("sent");
        let mut reply = String::new();
        client.read_to_string(&mut reply).expect("a reply");
        assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
        let stopped = runtime.block_on(running.stop()).expect("the server stops");
        assert_eq!(stopped.error, None);
        assert_eq!(os_threads(), Some(before), "cycle {cycle}");
    }
}
