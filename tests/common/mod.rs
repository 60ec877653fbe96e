//! Helpers shared by the integration scenarios: the policy model computed here from
//! `docs/contract.md` ("The policy model"; never read from the report's own `model` field),
//! and checks whose failures print what was expected, what was observed, and for which run.

#![allow(dead_code, unreachable_pub)]

pub mod alone;
pub mod bulk;
pub mod webdriver;

pub(crate) use alone::{alone, alone_beside};
pub use tempfile::TempDir;
use webdriver::die_with_parent;

/// Sets `command`'s child's `resource` to `value`, soft and hard, before it runs, as `prlimit`
/// or `ulimit` would, without starting either of them.
#[cfg(unix)]
pub fn limited(
    command: &mut std::process::Command,
    resource: libc::__rlimit_resource_t,
    value: libc::rlim_t,
) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe and allocates nothing, as `pre_exec` needs.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            if libc::setrlimit(resource, &limit) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Puts `signal` back to its default action in `command`'s child before it runs: a test that
/// sends the binary `signal` expects it caught, and the binary leaves a signal it inherits
/// ignored ignored (`nohup`'s SIGHUP, a background job's SIGINT), as this test may have.
#[cfg(unix)]
pub fn with_default(
    command: &mut std::process::Command,
    signal: libc::c_int,
) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal(2) is async-signal-safe and allocates nothing, as `pre_exec` needs.
    unsafe {
        command.pre_exec(move || {
            libc::signal(signal, libc::SIG_DFL);
            Ok(())
        })
    }
}

/// The smallest address space, in MiB, under which the binary loads and answers `predict`
/// (which starts no runtime, thread or socket).
#[cfg(unix)]
pub fn load_floor_mib() -> u64 {
    let loads = |mib: u64| {
        let mut lab = std::process::Command::new(env!("CARGO_BIN_EXE_isolation-lab"));
        limited(&mut lab, libc::RLIMIT_AS, mib << 20);
        let status = standard_descriptors_only(&mut lab)
            .arg("predict")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        status.is_ok_and(|s| s.success())
    };
    (4..=256)
        .find(|&mib| loads(mib))
        .expect("the lab loads in 256 MiB")
}

/// Leaves `command`'s child only the standard descriptors 0, 1 and 2, whatever this process
/// inherited: a run under a descriptor limit (`ulimit -n 4`, `prlimit --nofile`) counts on them
/// alone. (`/usr/bin/time -o FILE cargo test` leaves FILE open as descriptor 3; under `ulimit -n
/// 4` the binary then cannot even load its libraries.)
#[cfg(unix)]
pub fn standard_descriptors_only(
    command: &mut std::process::Command,
) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    let cloexec = libc::CLOSE_RANGE_CLOEXEC as libc::c_int;
    // SAFETY: `close_range` allocates nothing and is async-signal-safe, as `pre_exec` needs.
    // Marked close-on-exec rather than closed, the descriptors std itself uses until the exec
    // (the pipe that reports a failed one) keep working. A kernel without it changes nothing.
    unsafe {
        command.pre_exec(move || {
            libc::close_range(3, libc::c_uint::MAX, cloexec);
            Ok(())
        })
    }
}

use isolation_lab::classroom::{self, ClassroomReport};
use isolation_lab::coordinator::{Options, run_policy_with};
use isolation_lab::evidence::Event;
use isolation_lab::evidence::GateState;
use isolation_lab::evidence::{Phase, ServerSummary};
use isolation_lab::hooks::Hooks;
use isolation_lab::label::Label;
use isolation_lab::policy::Front;
use isolation_lab::policy::{Held, Inputs, Mode, Policy, Slots};
use isolation_lab::report::PolicyReport;

/// One policy run's inputs.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub mode: Mode,
    pub slots: u8,
    pub held: u8,
}

impl Case {
    pub fn new(mode: Mode, slots: u8, held: u8) -> Self {
        Case { mode, slots, held }
    }

    pub fn policy(self) -> Policy {
        let slots = Slots::new(self.slots).expect("test cases use allowed slots");
        Policy {
            mode: self.mode,
            slots,
        }
    }

    pub fn held(self) -> Held {
        Held::new(self.held).expect("test cases use allowed held counts")
    }

    /// Every allowed input: 2 modes × 3 slot counts × 4 held counts.
    pub fn all() -> Vec<Case> {
        let mut cases = Vec::new();
        for mode in [Mode::Shared, Mode::Partitioned] {
            for slots in 2..=4 {
                for held in 1..=4 {
                    cases.push(Case::new(mode, slots, held));
                }
            }
        }
        cases
    }

    /// The policy model (`docs/contract.md`): `/slow`'s capacity is all slots when shared, all but one when partitioned.
    pub fn slow_capacity(self) -> u8 {
        match self.mode {
            Mode::Shared => self.slots,
            Mode::Partitioned => self.slots - 1,
        }
    }

    /// `S1..S<admitted>` where admitted = min(held, slow capacity).
    pub fn admitted(self) -> Vec<Label> {
        (1..=self.held.min(self.slow_capacity()))
            .map(|n| Label::Slow(n.into()))
            .collect()
    }

    /// `S<admitted+1>..S<held>`.
    pub fn refused(self) -> Vec<Label> {
        (self.held.min(self.slow_capacity()) + 1..=self.held)
            .map(|n| Label::Slow(n.into()))
            .collect()
    }

    /// F1 before release: shared gets 200 when held < slots, else 503; partitioned always 200.
    pub fn f1_status(self) -> u16 {
        match self.mode {
            Mode::Shared if self.held >= self.slots => 503,
            _ => 200,
        }
    }

    /// Runs this case through the library: a real async server on 127.0.0.1:0, real HTTP.
    pub async fn run(self) -> PolicyReport {
        self.run_on(Front::Async).await
    }

    /// Runs this case on either server front.
    pub async fn run_on(self, front: Front) -> PolicyReport {
        let run = run_policy_with(self.policy(), self.held(), Options::on(front)).await;
        assert_eq!(run.failure, None, "{self:?} on {front:?}: the run failed");
        run.report
    }
}

/// Asserts every outcome the policy model names for `case`, from the report's observations.
pub fn assert_matches_the_model(case: Case, report: &PolicyReport) {
    let decided = |request: Label| {
        report
            .admissions
            .iter()
            .find(|a| a.request == request)
            .map(|a| format!("{:?}", a.decision).to_lowercase())
    };
    let answered = |request: Label| {
        report
            .observed
            .responses
            .iter()
            .find(|r| r.request == request)
            .map(|r| (r.status, r.phase))
    };
    for request in case.admitted() {
        assert_eq!(
            decided(request).as_deref(),
            Some("admitted"),
            "{case:?}: {request}"
        );
        assert_eq!(
            answered(request),
            Some((200, Phase::AfterRelease)),
            "{case:?}: {request} should be answered 200 only after release"
        );
    }
    for request in case.refused() {
        assert_eq!(
            decided(request).as_deref(),
            Some("refused"),
            "{case:?}: {request}"
        );
        assert_eq!(
            answered(request),
            Some((503, Phase::BeforeRelease)),
            "{case:?}: {request} should get its 503 before F1 is sent"
        );
    }
    let f1 = report
        .observed
        .fast_response_before_release
        .as_ref()
        .unwrap_or_else(|| panic!("{case:?}: no F1 response recorded"));
    assert_eq!(f1.status, case.f1_status(), "{case:?}: F1 before release");
    assert_eq!(
        answered(Label::F1),
        Some((case.f1_status(), Phase::BeforeRelease))
    );
    for probe in [Label::SlowAfter, Label::FastAfter] {
        assert_eq!(
            decided(probe).as_deref(),
            Some("admitted"),
            "{case:?}: {probe}"
        );
        assert_eq!(
            answered(probe),
            Some((200, Phase::AfterRelease)),
            "{case:?}: {probe}"
        );
    }
    let pending = report.observed.slow_callers_pending_before_release.as_ref();
    assert_eq!(
        pending,
        Some(&case.admitted()),
        "{case:?}: pending slow callers"
    );
    let before = report.observed.observer_before_fast.as_ref();
    let before = before.unwrap_or_else(|| panic!("{case:?}: no observer_before_fast"));
    assert_eq!(
        before.held_at_gate,
        case.admitted(),
        "{case:?}: held before F1"
    );
    assert_eq!(
        before.refused,
        case.refused(),
        "{case:?}: refused before F1"
    );
    let after = report.observed.observer_after_fast_before_release.as_ref();
    let after = after.unwrap_or_else(|| panic!("{case:?}: no observer_after_fast"));
    assert_eq!(
        after.held_at_gate,
        case.admitted(),
        "{case:?}: held work after F1"
    );
    assert_eq!(
        report.observed.responses.len(),
        case.held as usize + 3,
        "{case:?}: one response per request"
    );
}

/// Asserts the structural evidence: the order of the ledger, a balanced final state, and
/// everything closed and joined.
pub fn assert_structure(case: Case, report: &PolicyReport) {
    let events = &report.work_events;
    let seq = |request: Option<Label>, event: Event| {
        let found = events
            .iter()
            .find(|e| e.request == request && e.event == event);
        found.map(|e| e.seq)
    };
    let openings: Vec<_> = events
        .iter()
        .filter(|e| e.event == Event::GateOpened)
        .collect();
    assert_eq!(openings.len(), 1, "{case:?}: one gate_opened event");
    let opened = openings[0].seq;
    if case.f1_status() == 200 {
        let admitted = seq(Some(Label::F1), Event::Admitted).expect("F1 admitted");
        let finished = seq(Some(Label::F1), Event::Finished).expect("F1 finished");
        assert!(
            admitted < finished && finished < opened,
            "{case:?}: F1 admitted at {admitted} and finished at {finished}, gate opened at {opened}"
        );
    } else {
        assert_eq!(
            seq(Some(Label::F1), Event::Admitted),
            None,
            "{case:?}: F1 never entered"
        );
        assert!(seq(Some(Label::F1), Event::Refused).expect("F1 refused") < opened);
    }
    for request in case.admitted() {
        let held = seq(Some(request), Event::Held).expect("admitted slow work is held");
        let finished = seq(Some(request), Event::Finished).expect("held work finishes");
        assert!(
            held < opened && opened < finished,
            "{case:?}: {request} held at {held}, finished at {finished}, gate opened at {opened}"
        );
    }
    for request in case.refused() {
        assert_eq!(
            seq(Some(request), Event::Held),
            None,
            "{case:?}: {request} never held"
        );
        assert_eq!(
            seq(Some(request), Event::Finished),
            None,
            "{case:?}: {request} never in"
        );
    }
    for event in events {
        let capacity = report.pool_capacities[&event.pool];
        assert!(
            event.active_after <= capacity,
            "{case:?}: over capacity at {event:?}"
        );
    }
    for (pool, capacity) in &report.pool_capacities {
        assert_eq!(
            report.final_state.active_work[pool], 0,
            "{case:?}: {pool} active"
        );
        assert_eq!(
            report.final_state.available_permits[pool], *capacity,
            "{case:?}: {pool} permits back"
        );
        assert!(report.peak_active_work[pool] <= *capacity);
    }
    assert_eq!(report.final_state.gate, GateState::Open);
    assert!(report.client_threads_stopped, "{case:?}: callers joined");
    let server = report.server.as_ref().expect("the server started");
    assert!(
        server.listener_closed && server.connection_tasks_stopped,
        "{case:?}: {server:?}"
    );
    assert_eq!(server.connection_tasks_aborted, 0, "{case:?}: {server:?}");
    assert_eq!(
        report.client_tasks_aborted, 0,
        "{case:?}: no caller needed aborting"
    );
    assert!(server.connections_accepted >= 1);
    let after = report.resources.after_run.expect("counted after the run");
    assert_eq!(
        (after.connection_handlers, after.held_at_gate),
        (0, 0),
        "{case:?}: {after:?}"
    );
    let before = report.resources.before_fast.expect("counted before F1");
    assert_eq!(
        before.held_at_gate,
        case.admitted().len(),
        "{case:?}: {before:?}"
    );
    assert!(
        before.connection_handlers >= case.admitted().len(),
        "{case:?}: {before:?}"
    );
    assert_port_closed(server);
}

/// A stopped server's listener is gone, as the server observed it (its socket is no longer
/// among this process's descriptors). A connect to the port is no check: once free, the port
/// may be given at once to another test's server in this process.
pub fn assert_port_closed(server: &ServerSummary) {
    assert!(
        server.listener_closed,
        "{}: the listener is still open after the run",
        server.address
    );
}

/// A classroom session served by the library, as the binary serves it: the instructor's URL it
/// announced (`http://127.0.0.1:PORT/#control=TOKEN`), the sender that ends it (as Ctrl-C does
/// the binary's), and the task that returns its report.
pub struct Classroom {
    pub url: String,
    pub leave: tokio::sync::oneshot::Sender<()>,
    pub task: tokio::task::JoinHandle<anyhow::Result<ClassroomReport>>,
}

/// Starts a classroom session of `inputs` on `front` and waits (at most 10 s, a failure guard)
/// for the instructor's URL it announces.
pub async fn serve_classroom(inputs: Inputs, front: Front) -> Classroom {
    serve_classroom_with(inputs, Options::on(front)).await
}

/// [`serve_classroom`] with every run on `options` (a front and its executor).
pub async fn serve_classroom_with(inputs: Inputs, options: Options) -> Classroom {
    serve_classroom_config(classroom::Config {
        inputs,
        options,
        show_predictions: false,
        timeouts: classroom::Timeouts::default(),
        room_requests: classroom::ROOM_REQUESTS,
    })
    .await
}

/// [`serve_classroom`] of `config`.
pub async fn serve_classroom_config(config: classroom::Config) -> Classroom {
    let (announced, url) = tokio::sync::oneshot::channel();
    let (leave, left) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(classroom::serve(
        config,
        async move {
            let _ = left.await;
        },
        move |urls: &classroom::Urls| {
            let _ = announced.send(urls.instructor.clone());
            Ok(())
        },
    ));
    let url = tokio::time::timeout(std::time::Duration::from_secs(10), url)
        .await
        .expect("the session announces its URL within 10 s (failure guard)")
        .expect("the session announces its URL");
    Classroom { url, leave, task }
}

/// A runtime on the test's own thread (current-thread, with I/O and time).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A client that goes to the lab directly, never through a proxy.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a client")
}

/// The address a classroom serves on, from an instructor's URL: what comes before `/#`.
pub fn base_url(url: &str) -> &str {
    url.split("/#").next().unwrap_or(url)
}

/// The control token in an instructor's URL: what follows `#control=`.
pub fn control_token(url: &str) -> String {
    let token = url.split("#control=").nth(1);
    token
        .expect("the instructor's URL carries the control token")
        .to_owned()
}

/// What a test breaks in one policy run, given to the run as its hooks. The default breaks
/// nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// The gate ignores every opening, so held work can never leave on its own.
    pub gate_stuck: bool,
    /// The work section records its events but never tells the control observer.
    pub observer_silent: bool,
    /// This slow request's caller drops its connection while its work is held at the gate.
    pub caller_disconnects: Option<Label>,
    /// The handler of this request panics inside the work section, holding its permit.
    pub handler_panics: Option<Label>,
    /// Requests without the run's token, sent to the server while slow work is held.
    pub foreign_requests: usize,
}

impl Hooks for Faults {
    fn inside_work(&self, request: Label) {
        if self.handler_panics == Some(request) {
            // A panic's unwinding without the panic hook: the hook would print it, with a
            // backtrace where RUST_BACKTRACE is set, and reading the test binary's debug
            // information for one held the runtime's workers long enough (under load) that
            // the other runs of the same test stalled. What the run sees is the same: a
            // handler that unwound, its payload the message.
            let message = format!("the handler of {request} panicked inside the work section");
            std::panic::resume_unwind(Box::new(format!("injected fault: {message}")));
        }
    }

    fn gate_opens(&self) -> bool {
        !self.gate_stuck
    }

    fn observer_hears(&self) -> bool {
        !self.observer_silent
    }

    fn caller_leaves(&self, request: Label) -> bool {
        self.caller_disconnects == Some(request)
    }

    fn foreign_requests(&self) -> usize {
        self.foreign_requests
    }
}

/// Holds S1's work between its admission and the gate until the run closes (the close's
/// opening of the gate lets it go): the coordinator hears S1 admitted, and never held. Where
/// S1's handler waits here matters: on the threaded front it is S1's own thread.
#[derive(Debug, Default)]
pub struct StuckBeforeTheGate {
    closing: std::sync::Mutex<bool>,
    closed: std::sync::Condvar,
}

impl Hooks for StuckBeforeTheGate {
    fn inside_work(&self, request: Label) {
        if request == Label::Slow(1) {
            let closing = self.closing.lock().unwrap_or_else(|e| e.into_inner());
            let closing = self.closed.wait_while(closing, |closing| !*closing);
            drop(closing.unwrap_or_else(|e| e.into_inner()));
        }
    }

    fn gate_opens(&self) -> bool {
        *self.closing.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.closed.notify_all();
        true
    }
}

/// Stops `pid`, a child of this process not yet reaped (SIGSTOP), and waits until it is
/// stopped: every one of its threads has taken the stop.
pub fn stop_child(pid: u32) {
    let pid = libc::pid_t::try_from(pid).expect("pids fit in pid_t");
    let mut stopped = 0;
    // SAFETY: `kill` and `waitpid` take plain integers and a pointer to a local; the child is
    // ours and not yet reaped, and a stop's status leaves it so.
    unsafe {
        assert_eq!(libc::kill(pid, libc::SIGSTOP), 0);
        assert_eq!(libc::waitpid(pid, &mut stopped, libc::WUNTRACED), pid);
    }
    assert!(libc::WIFSTOPPED(stopped), "stopped: {stopped:#x}");
}

/// `kill(pid, 0)` fails with ESRCH: no process, not even a zombie, has this pid.
pub fn is_gone(pid: u32) -> bool {
    let pid = libc::pid_t::try_from(pid).expect("pids fit in pid_t");
    // SAFETY: signal 0 only checks that the process exists.
    let result = unsafe { libc::kill(pid, 0) };
    result == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// The room's token in `command`, one the classroom shows the room (`curl -s -H 'lab-room:
/// <token>' …`).
pub fn room_token_in(command: &str) -> &str {
    let token = command.split("lab-room: ").nth(1).expect("a token");
    &token[..32]
}

/// A new, empty directory under the system's temporary directory whose name starts with
/// `prefix`: only this user may enter it, and it is removed with everything in it when dropped.
pub fn temp_dir(prefix: &str) -> std::io::Result<TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("{prefix}-"))
        .tempdir()
}
