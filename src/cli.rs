//! The command line (`docs/contract.md`, "Command line"), and the teaching instruments. clap
//! checks every value against its allowed range, so a refused command line exits 2 with a
//! message naming the flag, before any runtime or socket exists. The flag types here are the
//! command line's own; each maps onto a library type, so no library type carries clap.

use std::convert::Infallible;
#[cfg(unix)]
use std::time::Duration;

use anyhow::anyhow;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use crate::executor::{BlockingThreads, Executor, WorkStyle, Workers};
#[cfg(unix)]
use crate::front_process::FrontSpec;
#[cfg(unix)]
use crate::hold;
#[cfg(unix)]
use crate::policy::digits_only;
use crate::policy::{Front, Held, Inputs, ModeChoice, Slots};
#[cfg(unix)]
use crate::replicas::{Engine, Fencing, LeaseMs, ReplicaCount, ReplicasInputs, Requests};

/// For the binary: what it prints to a terminal, with the text it quotes from outside the
/// process (a file, a Redis server, a child, the command line itself) shown as it is.
pub use crate::draw::terminal;

/// See bulkhead isolation work: shared vs partitioned work permits on a real loopback HTTP
/// server, and a report of the actual admission events and responses.
///
/// The server binds 127.0.0.1 on a port the OS picks; nothing here selects a host, URL or port,
/// and inherited proxy settings are ignored.
#[derive(Debug, Parser)]
#[command(
    name = "isolation-lab",
    version,
    args_conflicts_with_subcommands = true,
    after_help = EXAMPLES
)]
pub struct Cli {
    /// An instrument to use instead of running the lab once.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// The lab run's flags.
    #[command(flatten)]
    pub run: RunArgs,

    // Flags a user may reach for but that the lab refuses with its reason, rather than with a
    // "similar argument" tip: the address is not the user's to choose. They can hold no value.
    #[arg(long, global = true, hide = true, value_name = "HOST", value_parser = refuse_address)]
    host: Option<Infallible>,
    #[arg(long, global = true, hide = true, value_name = "PORT", value_parser = refuse_address)]
    port: Option<Infallible>,
    #[arg(long, global = true, hide = true, value_name = "URL", value_parser = refuse_address)]
    url: Option<Infallible>,
}

/// The examples at the end of `--help`.
const EXAMPLES: &str = "Examples:
  isolation-lab --format text                 both policies, the workshop's table
  isolation-lab --mode shared --slots 3       F1 gets the third permit
  isolation-lab --held 4 --format svg > r.svg a picture to project
  isolation-lab predict --held 1              the model's answer, no server started
  isolation-lab sweep                         every input, one matrix per policy
  isolation-lab compare --held 4              the async and threaded fronts side by side
  isolation-lab --work block --format text    slow work that blocks: F1 waits for a worker
  isolation-lab --held 4 > r.json && isolation-lab record r.json
                                              the individual record of a saved report
  isolation-lab replicas                      2 replicas' own permits: 4 held, not 2
  isolation-lab replicas --global local       one limit on Redis; a pause and a crash
  isolation-lab classroom                     a live page to step through with a room
  isolation-lab hold --counts 10000           what holding 10 000 requests costs each front

Flags of a subcommand go after it: isolation-lab predict --held 4.";

/// The teaching instruments.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print what the policy model expects for these inputs, without starting any server
    Predict {
        /// The inputs to predict.
        #[command(flatten)]
        inputs: InputArgs,
        /// How slow work waits, on the async front.
        #[command(flatten)]
        executor: ExecutorArgs,
        /// The prediction on stdout
        #[arg(long, value_enum, default_value_t = TableFormat::Text)]
        format: TableFormat,
    },
    /// Run every allowed input (24 policy runs, each on its own server) and print a matrix per
    /// policy; exits 1 if any run differs from the model
    Sweep {
        /// The server front to run on
        #[arg(long, value_enum, default_value_t = Front::Async)]
        server: Front,
        /// How slow work waits, and the async front's runtime.
        #[command(flatten)]
        executor: ExecutorArgs,
        /// The matrices on stdout
        #[arg(long, value_enum, default_value_t = TableFormat::Text)]
        format: TableFormat,
    },
    /// Run both policies on both server fronts with the same inputs and print them side by
    /// side: identical admissions, different costs; exits 1 if the admissions differ in a way
    /// the model does not predict for the work style, or a run failed
    Compare {
        /// Total work permits of a policy, 2 through 4
        #[arg(long, value_name = "N", default_value_t = Inputs::default().slots, allow_negative_numbers = true)]
        slots: Slots,
        /// Slow requests sent and held at the gate, 1 through 4
        #[arg(long, value_name = "N", default_value_t = Inputs::default().held, allow_negative_numbers = true)]
        held: Held,
        /// How slow work waits on both fronts, and the async front's runtime.
        #[command(flatten)]
        executor: ExecutorArgs,
        /// The comparison on stdout
        #[arg(long, value_enum, default_value_t = TableFormat::Text)]
        format: TableFormat,
    },
    /// Teach it live: serve a page on 127.0.0.1 that steps through a real run (Next, Space or
    /// →) and lets the room send requests; prints the page's addresses on stderr, then, at
    /// Ctrl-C or Finish, the JSON report of the runs on stdout and the page's verdict on
    /// stderr; exits 1 if a run differed from the model or none was made
    Classroom {
        /// The first run's inputs (the page can start others).
        #[command(flatten)]
        inputs: InputArgs,
        /// The server front every run uses
        #[arg(long, value_enum, default_value_t = Front::Async)]
        server: Front,
        /// How slow work waits, and the async front's runtime, in every run of the session.
        #[command(flatten)]
        executor: ExecutorArgs,
        /// Show the model's predictions from the start, rather than each as its evidence
        /// arrives or Reveal is pressed
        #[arg(long)]
        show_predictions: bool,
    },
    /// Print the individual record of a saved report (or of each run of a classroom session's
    /// report): the command that reproduces it, the model's prediction, JSON Pointers to the
    /// evidence, and lines left to fill in. It re-checks the report from its evidence and says
    /// "matched" only when that re-check does; exits 1 if it did not match, or names what was
    /// edited or could not have happened
    Record {
        /// A report saved from a run, e.g. isolation-lab > r.json, or from isolation-lab classroom
        #[arg(value_name = "REPORT")]
        report: std::path::PathBuf,
        /// The record on stdout
        #[arg(long, value_enum, default_value_t = TableFormat::Text)]
        format: TableFormat,
    },
    /// Run 2 to 4 replica servers, each its own process, and balance slow requests over them:
    /// with their own permits they exceed one "global" limit; with one Redis-backed limit
    /// (--global) they keep it, and a replica paused or killed while holding permits shows what
    /// a lease trades; exits 1 if the evidence differs from the model
    #[cfg(unix)]
    Replicas {
        /// Replica servers, each its own child process, 2 through 4
        #[arg(long, value_name = "N", default_value_t = ReplicasInputs::default().replicas, allow_negative_numbers = true)]
        replicas: ReplicaCount,
        /// Permits: each replica's own (--global off) or the one global limit, 2 through 4
        #[arg(long, value_name = "N", default_value_t = ReplicasInputs::default().slots, allow_negative_numbers = true)]
        slots: Slots,
        /// Slow requests sent round robin, each until held or refused, 1 through 16
        #[arg(long, value_name = "N", default_value_t = ReplicasInputs::default().held, allow_negative_numbers = true)]
        held: Requests,
        /// Where permits come from: off (each replica's own), local (a private redis-server
        /// from PATH, started and stopped by the run), or redis://127.0.0.1:PORT (this
        /// machine only)
        #[arg(long, value_name = "off|local|redis://127.0.0.1:PORT", default_value_t = Engine::Off)]
        global: Engine,
        /// Each global holder's lease in milliseconds: 0 (none: a dead holder's permit leaks)
        /// or 200 through 60000
        #[arg(long, value_name = "MS", default_value_t = LeaseMs::default(), allow_negative_numbers = true)]
        lease_ms: LeaseMs,
        /// Whether the shared dependency the work writes to refuses a stale fencing token
        /// (on) or accepts every write (off)
        #[arg(long, value_enum, default_value_t = Fencing::On)]
        fencing: Fencing,
        /// The report on stdout
        #[arg(long, value_enum, default_value_t = TableFormat::Text)]
        format: TableFormat,
    },
    /// Hold N requests at the closed gate on each front, each front in a child process, and
    /// measure what holding them costs: threads, memory, maps, kernel stack and time
    #[cfg(unix)]
    Hold {
        /// Counts of held requests to measure, each 1 through 50000, given once
        #[arg(
            long,
            value_name = "N,N,...",
            value_delimiter = ',',
            // Given once, like every other flag: a second `--counts` is refused, not added.
            action = clap::ArgAction::Set,
            // `-1` is its value, refused as a count, as `--slots -1` is: not a flag the
            // subcommand does not take. (Not any value led by a hyphen: `--counts --server`
            // would take `--server` for its value.)
            allow_negative_numbers = true,
            value_parser = hold_count,
            default_values_t = hold::DEFAULT_COUNTS
        )]
        counts: Vec<u32>,
        /// The server fronts to measure
        #[arg(long, value_enum, default_value_t = FrontsArg::Both)]
        server: FrontsArg,
        /// The report on stdout
        #[arg(long, value_enum, default_value_t = HoldFormat::Text)]
        format: HoldFormat,
    },
    /// Serve one front as a child process of the lab, speaking JSON lines on stdin and stdout
    /// (internal: the instruments start it; `src/front_process/` documents the protocol)
    #[cfg(unix)]
    #[command(name = "__front", hide = true)]
    Front {
        /// The front to serve, as JSON: {"front":"async","capacity":200}
        #[arg(value_name = "SPEC", value_parser = front_spec)]
        spec: FrontSpec,
    },
}

/// `__front`'s spec, refused in one message: clap prints a parser's error with `{}`, which shows
/// anyhow's outermost context alone.
#[cfg(unix)]
fn front_spec(text: &str) -> anyhow::Result<FrontSpec> {
    FrontSpec::parse(text).map_err(|refused| anyhow!("{refused:#}"))
}

/// A count of `--counts`: digits only (`u32`'s own parser would also take a leading `+`), 1
/// through [`hold::MAX_COUNT`].
#[cfg(unix)]
fn hold_count(text: &str) -> anyhow::Result<u32> {
    digits_only::<u32>(text)
        .filter(|n| (1..=hold::MAX_COUNT).contains(n))
        .ok_or_else(|| anyhow!("expected a whole number from 1 through {}", hold::MAX_COUNT))
}

/// The inputs of one lab run.
#[derive(Debug, Args)]
pub struct InputArgs {
    /// Which policy: shared, partitioned, or both (shared first, then partitioned)
    #[arg(long, value_enum, default_value_t = ModeChoice::Both)]
    pub mode: ModeChoice,

    /// Total work permits of a policy, 2 through 4
    #[arg(long, value_name = "N", default_value_t = Inputs::default().slots, allow_negative_numbers = true)]
    pub slots: Slots,

    /// Slow requests sent and held at the gate, 1 through 4
    #[arg(long, value_name = "N", default_value_t = Inputs::default().held, allow_negative_numbers = true)]
    pub held: Held,
}

/// The flags of a lab run.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The inputs.
    #[command(flatten)]
    pub inputs: InputArgs,

    /// The server front: async (Hyper, a task per connection) or threaded (a thread per
    /// connection, like the workshop's original runner, a threaded Python program)
    #[arg(long, value_enum, default_value_t = Front::Async)]
    pub server: Front,

    /// How slow work waits, and the async front's runtime.
    #[command(flatten)]
    pub executor: ExecutorArgs,

    /// The report on stdout: json for machines, text for a person, svg for a projector
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
}

/// How admitted slow work waits, and the async front's runtime (`docs/blocking.md`).
#[derive(Debug, Args)]
pub struct ExecutorArgs {
    /// How admitted slow work waits for the gate: await (a parked task), block (it blocks its
    /// thread), spawn-blocking (on Tokio's blocking pool), own-runtime (each work class on a
    /// runtime of its own)
    #[arg(long, value_enum, default_value_t = WorkArg::Await)]
    pub work: WorkArg,

    /// The async front's own runtime: current-thread, or 1 through 4 workers (default:
    /// current-thread; with --work await and no --workers, the lab's own runtime)
    #[arg(long, value_name = "current-thread|N", allow_negative_numbers = true)]
    pub workers: Option<Workers>,

    /// The most threads the front runtime's blocking pool starts (Tokio's
    /// max_blocking_threads), 1 through 512; only with --work spawn-blocking, the one style
    /// whose work runs there
    #[arg(long, value_name = "K", default_value_t = BlockingThreads::default(), allow_negative_numbers = true)]
    pub blocking_threads: BlockingThreads,
}

impl ExecutorArgs {
    /// The checked executor.
    pub fn executor(&self) -> Executor {
        Executor {
            work: self.work.into(),
            workers: self.workers,
            blocking_threads: self.blocking_threads,
        }
    }
}

/// `--work`: how admitted slow work waits for the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WorkArg {
    /// It awaits the gate: a parked task (the lab's usual run)
    Await,
    /// It blocks its thread until the gate opens: on the async front, a runtime worker
    Block,
    /// Its blocking wait runs on Tokio's blocking pool (async front only)
    SpawnBlocking,
    /// Each work class runs on its own runtime, connections on another (async front only)
    OwnRuntime,
}

impl From<WorkArg> for WorkStyle {
    fn from(work: WorkArg) -> WorkStyle {
        match work {
            WorkArg::Await => WorkStyle::Await,
            WorkArg::Block => WorkStyle::Block,
            WorkArg::SpawnBlocking => WorkStyle::SpawnBlocking,
            WorkArg::OwnRuntime => WorkStyle::OwnRuntime,
        }
    }
}

/// Why `executor` is refused on `front` (`None`: `predict` or `compare`, which take it as the
/// async front's): `--blocking-threads` without `--work spawn-blocking`, on any front;
/// and on the threaded front, which has no runtime to shape, any flag or style that shapes one.
/// `blocking_given`: `--blocking-threads` was on the command line, whatever its value.
fn refuse_executor(
    front: Option<Front>,
    executor: &ExecutorArgs,
    blocking_given: bool,
) -> Option<String> {
    let work = WorkStyle::from(executor.work);
    if front != Some(Front::Threaded) {
        return (blocking_given && !work.uses_blocking_pool()).then(|| {
            "--blocking-threads sizes Tokio's blocking pool, which only --work spawn-blocking \
             uses: add --work spawn-blocking, or leave it out"
                .to_owned()
        });
    }
    if !work.runs_on(Front::Threaded) {
        return Some(format!(
            "--work {} needs a runtime, and the threaded front has none: use --server async, \
             or --work block (a threaded front's held request always blocks its own thread)",
            work.name()
        ));
    }
    let flag = match (executor.workers, blocking_given) {
        (Some(_), _) => "--workers",
        (None, true) => "--blocking-threads",
        (None, false) => return None,
    };
    // Advice that is taken as given: a blocking pool is sized only for spawn-blocking work.
    let instead = match (blocking_given, work) {
        (true, WorkStyle::Block) => {
            "--server async, and --work spawn-blocking in place of --work block"
        }
        (true, _) => "--server async --work spawn-blocking",
        (false, _) => "--server async",
    };
    Some(format!(
        "{flag} shapes the async front's runtime; the threaded front has none (a thread per \
         connection): use {instead}"
    ))
}

/// How a run's report is written to stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The full report of admission events and responses, as JSON
    Json,
    /// The workshop's prediction table filled in with what happened, and a timeline
    Text,
    /// A self-contained SVG picture of the run, for a browser or a projector
    Svg,
}

/// How an instrument writes its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TableFormat {
    /// A table for a person
    Text,
    /// The same, as JSON
    Json,
}

/// `--server` of `hold`: which fronts to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FrontsArg {
    /// The async front only
    Async,
    /// The threaded front only
    Threaded,
    /// Both, async first
    Both,
}

impl FrontsArg {
    /// The fronts chosen, async first.
    pub fn fronts(self) -> Vec<Front> {
        match self {
            FrontsArg::Async => vec![Front::Async],
            FrontsArg::Threaded => vec![Front::Threaded],
            FrontsArg::Both => Front::ALL.to_vec(),
        }
    }
}

/// How `hold` writes its report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HoldFormat {
    /// One table, N down the side, both fronts side by side, and a reading of it
    Text,
    /// Every figure and the preflight, as JSON
    Json,
    /// The figures as curves against N on a log axis, each front's ceiling as a line
    Svg,
}

impl InputArgs {
    /// The checked inputs.
    pub fn inputs(&self) -> Inputs {
        Inputs {
            mode: self.mode,
            slots: self.slots,
            held: self.held,
        }
    }
}

/// What a subcommand does instead of taking a flag it was given: the teaching half of a refusal.
fn instead(subcommand: &str) -> Option<&'static str> {
    Some(match subcommand {
        "predict" => {
            "predict takes --mode, --slots, --held, --work, --workers, --blocking-threads and --format text|json; it starts no server"
        }
        "sweep" => {
            "sweep runs every --slots/--held input itself; it takes --server, --work, --workers, --blocking-threads and --format text|json"
        }
        "compare" => {
            "compare runs both policies on both fronts; it takes --slots, --held, --work, --workers, --blocking-threads and --format text|json"
        }
        "record" => {
            "record reads a saved report (isolation-lab --held 4 > r.json, then isolation-lab record r.json); it takes the report's file and --format text|json"
        }
        "replicas" => {
            "replicas takes --replicas, --slots, --held, --global, --lease-ms, --fencing on|off and --format text|json"
        }
        "classroom" => {
            "classroom serves a live page and prints its report as JSON; it takes --mode, --slots, --held, --server, --work, --workers, --blocking-threads and --show-predictions"
        }
        "hold" => {
            "hold takes --counts N,N,..., --server async|threaded|both and --format text|json|svg"
        }
        _ => return None,
    })
}

/// Runs `lab` on this thread, the main one; or, where the stack limit (`ulimit -s`,
/// RLIMIT_STACK) lets the main thread's stack grow to less than the stack of every thread the
/// lab starts (`limits::THREAD_STACK`: a release build's main thread needs up to 128 KiB, a
/// debug build's about 350 KiB), on a thread started with a stack of that size (a thread's
/// stack is reserved when it starts, whatever the limit), and waits for it. `Err`: that thread
/// could not start.
pub fn on_a_full_stack<T: Send + 'static>(
    lab: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    #[cfg(unix)]
    if crate::limits::Rlimit::get(crate::limits::Resource::Stack)
        .is_ok_and(|limit| (limit.soft).is_some_and(|s| s < crate::limits::THREAD_STACK as u64))
    {
        // Named as the main thread is, so a panic reads as it would there.
        let thread = crate::limits::spawn_thread("main", lab)?;
        return Ok(thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
    }
    Ok(lab())
}

/// Makes a write past the file-size limit (`ulimit -f`, RLIMIT_FSIZE) fail with EFBIG, which
/// the binary reports as it reports a full disk (`cannot write to stdout: File too large`, exit
/// 1), rather than end the process without a word: the kernel also sends SIGXFSZ, whose default
/// action kills. The lab's children inherit the ignored signal: such a write fails in them too.
#[cfg(unix)]
pub fn fail_writes_past_the_file_size_limit() {
    // SAFETY: ignoring a signal changes only its disposition, and SIGXFSZ is a valid signal.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
}

/// Ends the process with one line on stderr, exit 1, just before its CPU time reaches
/// RLIMIT_CPU (`ulimit -t`, `prlimit --cpu`), rather than let the kernel end it without a word:
/// SIGKILL at the hard limit, SIGXCPU (whose default action kills) at the soft one. A profiling
/// timer on the process's CPU clock rings [`CPU_MARGIN`] before the lower of the two (a process
/// keeps its CPU time across `exec`, so what it has used is counted); SIGXCPU, should it come
/// first, is caught the same way. The run is cut short there, its report unwritten; the
/// children die with the process, as they do whenever it ends. Without a limit no timer is set,
/// and the two signals are caught all the same: only a process sends them then, and the line
/// says so. For the lab itself, once its command line is parsed: a front's child, ended by its
/// own limit, is the front's evidence, told by the signal that ended it.
#[cfg(unix)]
pub fn stop_before_the_cpu_time_limit() {
    use crate::limits::{Resource, Rlimit};
    // SAFETY: the handler only writes a static line and exits (see `at_the_limit`); the
    // sigaction is a plain struct, read for the calls.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = at_the_limit as extern "C" fn(_, _, _) -> ! as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(libc::SIGXCPU, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGPROF, &action, std::ptr::null_mut());
    }
    let Ok(limit) = Rlimit::get(Resource::Cpu) else {
        return;
    };
    let Some(lowest) = limit.soft.into_iter().chain(limit.hard).min() else {
        return;
    };
    let mut used = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills in the plain struct given, and fails touching nothing.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut used) } != 0 {
        return;
    }
    let used = Duration::new(
        u64::try_from(used.tv_sec).unwrap_or(0),
        u32::try_from(used.tv_nsec).unwrap_or(0),
    );
    let Some(left) = cpu_left(lowest, used) else {
        out_of_cpu_time();
    };
    let timer = libc::itimerval {
        it_interval: libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
        it_value: libc::timeval {
            tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
            // Under a million: it fits `suseconds_t` wherever that is 32 bits.
            tv_usec: left.subsec_micros() as libc::suseconds_t,
        },
    };
    // SAFETY: the timer is a plain struct, read for the call.
    unsafe { libc::setitimer(libc::ITIMER_PROF, &timer, std::ptr::null_mut()) };
}

/// Ends the lab in one line naming the signal, exit 1, at SIGINT, SIGTERM, SIGHUP or another
/// signal sent to end a program, wherever no session catches it (`interrupts::last_words`).
/// For the lab itself, once its command line is parsed; not for a front's child.
#[cfg(unix)]
pub fn one_line_at_a_signal() {
    crate::interrupts::last_words();
}

/// How long before the CPU time limit the lab stops itself. The kernel checks the limit and
/// the timer in one pass at its clock ticks, usually a few milliseconds of CPU apart; a pass put
/// off until more than this has run (many busy threads, a long system call) finds the limit
/// passed too. Where that is the soft limit, its SIGXCPU is caught as the timer's signal is;
/// where the hard limit is as low (`ulimit -t` and `prlimit --cpu=N` set both), its SIGKILL
/// comes first.
#[cfg(unix)]
const CPU_MARGIN: Duration = Duration::from_millis(100);

/// The CPU time left before [`CPU_MARGIN`] short of a limit of `limit` seconds, for a process
/// that has used `used`; `None` if there is none.
#[cfg(unix)]
fn cpu_left(limit: u64, used: Duration) -> Option<Duration> {
    let left = Duration::from_secs(limit)
        .checked_sub(used)?
        .checked_sub(CPU_MARGIN)?;
    (!left.is_zero()).then_some(left)
}

/// The handler for the CPU time limit: the kernel's SIGXCPU, or the profiling timer's SIGPROF.
/// The same signal sent by a process (`kill -XCPU`) says nothing of the limit: it ends the lab
/// at once too, in a line saying it was sent. (Should the kernel find no room to queue the
/// signal's details, it delivers the limit's own signal as sent by a process.) Only
/// async-signal-safe calls.
#[cfg(unix)]
extern "C" fn at_the_limit(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) -> ! {
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t. A code above zero is the
    // kernel's own (SI_KERNEL, the limit's and the timer's); at or below it, a process sent it
    // (SI_USER from kill, SI_QUEUE, SI_TKILL).
    if unsafe { (*info).si_code } > 0 {
        out_of_cpu_time();
    }
    let line: &[u8] = if signal == libc::SIGXCPU {
        b"isolation-lab: interrupted by SIGXCPU, sent by a process, not the CPU time limit: \
          stopped at once, its report unwritten or cut short\n"
    } else {
        b"isolation-lab: interrupted by SIGPROF, sent by a process, not the CPU time limit: \
          stopped at once, its report unwritten or cut short\n"
    };
    last_line(line)
}

/// One line on stderr for the CPU time limit, exit 1. Only async-signal-safe calls.
#[cfg(unix)]
fn out_of_cpu_time() -> ! {
    last_line(
        b"isolation-lab: out of CPU time: the lab stopped itself at its CPU time limit \
          (RLIMIT_CPU, ulimit -t), before the kernel would kill it without a word\n",
    )
}

/// Writes `line` to stderr and exits 1 at once: only async-signal-safe calls.
#[cfg(unix)]
fn last_line(line: &[u8]) -> ! {
    // SAFETY: write(2) and _exit(2) are async-signal-safe; the line is static.
    unsafe {
        libc::write(libc::STDERR_FILENO, line.as_ptr().cast(), line.len());
        libc::_exit(1)
    }
}

/// Parses the command line, or says what was wrong in words that teach: where a subcommand's
/// flags go, the allowed range of a number, what a subcommand does instead of a flag it does not
/// take, which flag carried a value that is not UTF-8. `Err` holds clap's own error (help and
/// version included) with the message rewritten where it can say more.
pub fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::FromArgMatches;
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::parser::ValueSource;

    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let parsed = Cli::command()
        .try_get_matches_from(&args)
        .and_then(|matches| {
            let cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut Cli::command()))?;
            Ok((cli, matches))
        });
    let error = match parsed {
        Ok((cli, matches)) => {
            // The run's flags or its subcommand's; `--blocking-threads` is given even at its
            // default value.
            let own = matches.subcommand().map_or(&matches, |(_, sub)| sub);
            let blocking =
                || own.value_source("blocking_threads") == Some(ValueSource::CommandLine);
            let refused = match &cli.command {
                None => refuse_executor(Some(cli.run.server), &cli.run.executor, blocking()),
                Some(Command::Sweep {
                    server, executor, ..
                })
                | Some(Command::Classroom {
                    server, executor, ..
                }) => refuse_executor(Some(*server), executor, blocking()),
                // The async front's executor; compare runs the threaded front its own way.
                Some(Command::Predict { executor, .. })
                | Some(Command::Compare { executor, .. }) => {
                    refuse_executor(None, executor, blocking())
                }
                // A lease and fencing shape the global permits and the dependency, which
                // `--global off` has neither of: given, they would change nothing.
                Some(Command::Replicas { global, .. }) if !global.is_global() => {
                    let given = |id: &str| own.value_source(id) == Some(ValueSource::CommandLine);
                    let flags = [("lease_ms", "lease-ms"), ("fencing", "fencing")];
                    let flag = flags.into_iter().find(|&(id, _)| given(id));
                    flag.map(|(_, flag)| {
                        format!(
                            "--{flag} shapes the global permits, which --global off does not \
                             have (each replica's own permits neither lapse nor fence): add \
                             --global local, or leave it out"
                        )
                    })
                }
                _ => None,
            };
            let sub = matches.subcommand_name().unwrap_or_default();
            return match refused {
                None => Ok(cli),
                Some(message) => Err(refusal(sub, ErrorKind::ArgumentConflict, message)),
            };
        }
        Err(error) => error,
    };
    // The instruments a person names; `__front` is the lab's own.
    let command = Cli::command();
    let subcommands: Vec<&str> = (command.get_subcommands())
        .filter(|sub| !sub.is_hide_set())
        .map(|sub| sub.get_name())
        .collect();
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // Where the subcommand is among the words (0: none is named), and its name.
    let at = words
        .iter()
        .skip(1)
        .position(|w| subcommands.contains(&w.as_str()))
        .map_or(0, |i| i + 1);
    let sub = if at == 0 { "" } else { words[at].as_str() };
    let message = match error.kind() {
        // `isolation-lab --held 4 predict`: flags before the subcommand.
        // `isolation-lab --held 4 record r.json`: the run's flags belong to the run that
        // saves the report, not to `record`.
        ErrorKind::ArgumentConflict if at > 1 && sub == "record" => {
            // Shell words, so that the suggested command names the same file, whatever its
            // name's bytes.
            let word = |arg: &std::ffi::OsString| crate::record::shell_word(arg);
            let file = args.get(at + 1).map_or("r.json".into(), word);
            let flags: Vec<String> = args[1..at].iter().map(word).collect();
            Some(format!(
                "record reads a saved report and takes no run flags; save the run, then record \
                 it: isolation-lab {} > {file} && isolation-lab record {file}",
                flags.join(" ")
            ))
        }
        ErrorKind::ArgumentConflict if at > 1 => {
            let mut order = vec![words[at].clone()];
            order.extend(words[1..at].iter().chain(&words[at + 1..]).cloned());
            // Suggested only if it would be taken: otherwise its own refusal says what the
            // subcommand takes (`--held 4 sweep`: sweep takes no --held).
            let reordered = std::iter::once(words[0].clone()).chain(order.iter().cloned());
            if let Err(refused) = parse(reordered)
                && refused.use_stderr()
            {
                return Err(refused);
            }
            Some(format!(
                "flags of a subcommand go after it: isolation-lab {}",
                order.join(" ")
            ))
        }
        ErrorKind::UnknownArgument => {
            let flag = match error.get(ContextKind::InvalidArg) {
                Some(ContextValue::String(flag)) => flag.as_str(),
                _ => "",
            };
            // Written out here, in this message of the lab's own: a line break in it too.
            let flag = crate::draw::terminal::one_line(flag);
            instead(sub).map(|instead| format!("{sub} does not take {flag}: {instead}"))
        }
        // `isolation-lab record` with no report.
        ErrorKind::MissingRequiredArgument => {
            instead(sub).map(|instead| format!("{sub} is missing its argument: {instead}"))
        }
        ErrorKind::InvalidUtf8 => {
            // The flag whose value it is: the word's own (`--held=…`), or the word before it
            // (`--held …`). A flag's name itself is ASCII, so it survives `to_string_lossy`.
            let bad = args.iter().position(|a| a.to_str().is_none()).unwrap_or(0);
            let own = (words[bad].split_once('=').map(|(flag, _)| flag))
                .filter(|flag| flag.starts_with("--") && flag.is_ascii());
            let before = (bad.checked_sub(1).map(|before| words[before].as_str()))
                .filter(|before| before.starts_with("--") && !before.contains('='));
            let flag = own.or(before);
            Some(match flag {
                Some(flag) => format!(
                    "the value of {flag} is not UTF-8 text; it takes plain digits or a name"
                ),
                None => "an argument is not UTF-8 text".to_owned(),
            })
        }
        _ => None,
    };
    Err(match message {
        Some(message) => refusal(sub, ErrorKind::ValueValidation, message),
        None => error,
    })
}

/// A refusal of the command line in clap's words, with the usage of the subcommand `sub` (the
/// run's own when `sub` names none), as clap's own refusals of it show.
fn refusal(sub: &str, kind: clap::error::ErrorKind, message: String) -> clap::Error {
    let mut command = Cli::command();
    command.build();
    match command.find_subcommand_mut(sub) {
        Some(sub) => sub.error(kind, message),
        None => command.error(kind, message),
    }
}

fn refuse_address(_: &str) -> anyhow::Result<Infallible> {
    Err(anyhow!(
        "the lab always serves 127.0.0.1 on a port the OS picks; nothing selects a host, URL or port"
    ))
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;

    use super::*;

    /// The lab stops itself 100 ms of CPU before its limit, counting what it used before.
    #[cfg(unix)]
    #[test]
    fn the_cpu_time_left_is_counted_from_the_limit() {
        let ms = Duration::from_millis;
        assert_eq!(cpu_left(1, Duration::ZERO), Some(ms(900)));
        assert_eq!(cpu_left(2, ms(1_500)), Some(ms(400)));
        assert_eq!(cpu_left(1, ms(900)), None, "nothing left");
        assert_eq!(cpu_left(1, ms(950)), None);
        assert_eq!(cpu_left(0, Duration::ZERO), None);
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("isolation-lab").chain(args.iter().copied()))
    }

    #[test]
    fn the_defaults_are_the_workshops_run() {
        let cli = parse(&[]).expect("no arguments is a valid command line");
        assert!(cli.command.is_none());
        assert_eq!(cli.run.inputs.inputs(), Inputs::default());
        assert_eq!(cli.run.format, Format::Json);
        assert_eq!(cli.run.inputs.mode, ModeChoice::Both);
        assert_eq!(
            (cli.run.inputs.slots.get(), cli.run.inputs.held.get()),
            (2, 2)
        );
    }

    #[test]
    fn every_allowed_value_is_taken() {
        let args = [
            "--mode",
            "partitioned",
            "--slots",
            "4",
            "--held",
            "1",
            "--format",
            "svg",
        ];
        let cli = parse(&args).expect("all values are in range");
        let inputs = cli.run.inputs.inputs();
        assert_eq!(inputs.mode, ModeChoice::Partitioned);
        assert_eq!((inputs.slots.get(), inputs.held.get()), (4, 1));
        assert_eq!(cli.run.format, Format::Svg);
        assert_eq!(cli.run.server, Front::Async);
        let cli = parse(&["--server", "threaded"]).expect("a front");
        assert_eq!(cli.run.server, Front::Threaded);
        let cli = parse(&["--slots=3", "--mode=shared"]).expect("--flag=value is accepted");
        assert_eq!(
            (cli.run.inputs.mode, cli.run.inputs.slots.get()),
            (ModeChoice::Shared, 3)
        );
    }

    #[test]
    fn instruments_take_their_own_flags() {
        let cli = parse(&["predict", "--held", "4", "--format", "json"]).expect("valid");
        let Some(Command::Predict { inputs, format, .. }) = cli.command else {
            panic!("predict");
        };
        assert_eq!((inputs.held.get(), format), (4, TableFormat::Json));
        let cli = parse(&["sweep", "--server", "threaded"]).expect("valid");
        let Some(Command::Sweep { server, format, .. }) = cli.command else {
            panic!("sweep");
        };
        assert_eq!((server, format), (Front::Threaded, TableFormat::Text));
        let cli = parse(&["record", "r.json", "--format", "json"]).expect("valid");
        let Some(Command::Record { report, format }) = cli.command else {
            panic!("record");
        };
        assert_eq!(
            (report, format),
            (std::path::PathBuf::from("r.json"), TableFormat::Json)
        );
        let cli = parse(&["compare", "--held", "4"]).expect("valid");
        let Some(Command::Compare { slots, held, .. }) = cli.command else {
            panic!("compare");
        };
        assert_eq!((slots.get(), held.get()), (2, 4));
        for refused in [
            &["sweep", "--held", "2"][..],
            &["--held", "2", "predict"],
            &["predict", "--format", "svg"],
            &["compare", "--mode", "shared"],
            &["predict", "--server", "threaded"],
            &["--server", "forked"],
            &["sweep", "--port", "80"],
        ] {
            assert_eq!(
                parse(refused).expect_err("refused").exit_code(),
                2,
                "{refused:?}"
            );
        }
    }

    #[test]
    fn out_of_range_values_name_the_flag_and_the_range() {
        for (args, flag, range) in [
            (&["--slots", "1"][..], "--slots", "2 through 4"),
            (&["--slots", "5"], "--slots", "2 through 4"),
            (&["--held", "0"], "--held", "1 through 4"),
            (&["--held", "5"], "--held", "1 through 4"),
            (&["--slots", "abc"], "--slots", "2 through 4"),
            (&["predict", "--held", "9"], "--held", "1 through 4"),
        ] {
            let error = parse(args).expect_err("out of range");
            assert_eq!(error.kind(), ErrorKind::ValueValidation, "{args:?}");
            let message = error.to_string();
            assert!(
                message.contains(flag) && message.contains(range),
                "{message}"
            );
        }
    }

    /// The refusals a student meets say what to do: where flags go, the allowed range, what a
    /// subcommand does instead, which flag carried bytes that are not text.
    #[test]
    fn refusals_teach() {
        use std::os::unix::ffi::OsStrExt;

        let said = |args: Vec<std::ffi::OsString>| {
            let mut all = vec![std::ffi::OsString::from("isolation-lab")];
            all.extend(args);
            let error = super::parse(all).expect_err("refused");
            assert_eq!(error.exit_code(), 2);
            error.to_string()
        };
        let words = |text: &str| text.split(' ').map(Into::into).collect::<Vec<_>>();
        // Each refusal, and the usage it shows: the subcommand's, as clap's own refusals of a
        // subcommand show (none for a bad value, as clap shows none).
        for (args, says, usage) in [
            (
                "--held 4 predict",
                "flags of a subcommand go after it: isolation-lab predict --held 4",
                Some("isolation-lab predict [OPTIONS]"),
            ),
            // The flags moved after the subcommand would be refused too: that refusal, not
            // a suggestion to run it.
            (
                "--held 3 sweep",
                "sweep does not take --held: sweep runs every --slots/--held input itself",
                Some("isolation-lab sweep [OPTIONS]"),
            ),
            (
                "--slots -1",
                "expected a whole number from 2 through 4",
                None,
            ),
            (
                "--held -3",
                "expected a whole number from 1 through 4",
                None,
            ),
            (
                "--work block --workers -0",
                "expected current-thread or a whole number of workers from 1 through 4",
                None,
            ),
            (
                "predict --work block --workers -1",
                "expected current-thread or a whole number of workers from 1 through 4",
                None,
            ),
            (
                "--work spawn-blocking --blocking-threads -0",
                "expected a whole number from 1 through 512",
                None,
            ),
            (
                "sweep --held 3",
                "sweep runs every --slots/--held input itself",
                Some("isolation-lab sweep [OPTIONS]"),
            ),
            (
                "compare --mode shared",
                "compare runs both policies on both fronts",
                Some("isolation-lab compare [OPTIONS]"),
            ),
            (
                "--held 4 record r.json",
                "isolation-lab --held 4 > r.json && isolation-lab record r.json",
                Some("isolation-lab record [OPTIONS] <REPORT>"),
            ),
            (
                "record --held 4 r.json",
                "record reads a saved report",
                Some("isolation-lab record [OPTIONS] <REPORT>"),
            ),
            (
                "record",
                "record is missing its argument: record reads a saved report",
                Some("isolation-lab record [OPTIONS] <REPORT>"),
            ),
            (
                "sweep --server threaded --blocking-threads 512",
                "the threaded front has none",
                Some("isolation-lab sweep [OPTIONS]"),
            ),
            (
                "--server threaded --blocking-threads 512",
                "the threaded front has none",
                Some("isolation-lab [OPTIONS]"),
            ),
        ] {
            let message = said(words(args));
            assert!(message.contains(says), "{args}: {message}");
            let shown = message.lines().find_map(|l| l.strip_prefix("Usage: "));
            assert_eq!(shown, usage, "{args}: {message}");
        }
        // The threaded front's advice, followed, is taken.
        for args in [
            "sweep --server threaded --blocking-threads 1",
            "--server threaded --workers 2",
            "--server threaded --workers 2 --blocking-threads 4",
        ] {
            let message = said(words(args));
            let (_, advice) = message.split_once(": use ").expect("advice");
            let advice = advice.lines().next().expect("a line");
            let followed = args.replace("--server threaded", advice);
            let followed = std::iter::once("isolation-lab").chain(followed.split(' '));
            assert!(super::parse(followed).is_ok(), "{args}: {message}");
        }
        let args = "--server threaded --work block --blocking-threads 4";
        let message = said(words(args));
        let advice = "use --server async, and --work spawn-blocking in place of --work block";
        assert!(message.contains(advice), "{message}");
        let followed = "isolation-lab --server async --work spawn-blocking --blocking-threads 4";
        assert!(super::parse(followed.split(' ')).is_ok());
        // The flag named is the one whose value is not UTF-8, however it is given.
        let bytes = |b: &[u8]| std::ffi::OsStr::from_bytes(b).to_owned();
        for (args, says) in [
            (
                vec!["--slots".into(), bytes(b"\xff")],
                "the value of --slots is not",
            ),
            (vec![bytes(b"--slots=\xff")], "the value of --slots is not"),
            (
                vec!["--slots".into(), bytes(b"\xff=3")],
                "the value of --slots is not",
            ),
            (
                vec![
                    "predict".into(),
                    "--work".into(),
                    "block".into(),
                    bytes(b"--held=\xff"),
                ],
                "the value of --held is not",
            ),
            (vec![bytes(b"--sl\xffots=3")], "unexpected argument"),
        ] {
            let message = said(args);
            assert!(message.contains(says), "{message}");
        }
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("Examples:"), "{help}");
    }

    /// `hold` measures the default counts on both fronts as a table unless told otherwise.
    #[cfg(unix)]
    #[test]
    fn hold_defaults_to_its_counts_on_both_fronts() {
        let cli = parse(&["hold"]).expect("valid");
        let Some(Command::Hold {
            counts,
            server,
            format,
        }) = cli.command
        else {
            panic!("hold");
        };
        assert_eq!(counts, hold::DEFAULT_COUNTS);
        assert_eq!(
            (server.fronts(), format),
            (Front::ALL.to_vec(), HoldFormat::Text)
        );
        // Digits only, and the flag once, as every other count and flag.
        for refused in [
            &["hold", "--counts", "+10"][..],
            &["hold", "--counts", "10,+20"],
            &["hold", "--counts", "0"],
            &["hold", "--counts", "50001"],
            &["hold", "--counts", "10", "--counts", "20"],
            &["hold", "--counts", "-1"],
        ] {
            let error = parse(refused).expect_err("refused");
            assert_eq!(error.exit_code(), 2, "{refused:?}: {error}");
            // Each refused as a value of `--counts`, but the flag given twice.
            let said = error.to_string();
            let twice = refused.iter().filter(|a| **a == "--counts").count() > 1;
            assert!(
                twice || said.contains("for '--counts"),
                "{refused:?}: {said}"
            );
        }
        let cli = parse(&["hold", "--counts", "5,50000", "--server", "threaded"]).expect("valid");
        let Some(Command::Hold { counts, server, .. }) = cli.command else {
            panic!("hold");
        };
        assert_eq!(
            (counts, server.fronts()),
            (vec![5, 50_000], vec![Front::Threaded])
        );
    }

    /// The front child's subcommand takes one checked spec and stays out of the help.
    #[cfg(unix)]
    #[test]
    fn the_front_child_subcommand_is_hidden_and_checked() {
        let spec = crate::front_process::FrontSpec::new(Front::Threaded, 7);
        let cli = parse(&[crate::front_process::SUBCOMMAND, &spec.to_arg()]).expect("a valid spec");
        assert!(matches!(cli.command, Some(Command::Front { spec: parsed }) if parsed == spec));
        for refused in [
            &[crate::front_process::SUBCOMMAND][..],
            &[
                crate::front_process::SUBCOMMAND,
                r#"{"front":"async","capacity":0}"#,
            ],
            &[crate::front_process::SUBCOMMAND, "threaded"],
        ] {
            let error = parse(refused).expect_err("refused");
            assert_eq!(error.exit_code(), 2, "{refused:?}: {error}");
        }
        let help = Cli::command().render_long_help().to_string();
        assert!(!help.contains(crate::front_process::SUBCOMMAND), "{help}");
    }

    /// `--work`, `--workers` and `--blocking-threads` are checked before anything starts: their
    /// ranges, and that the threaded front, which has no runtime, takes only await and block.
    #[test]
    fn executor_flags_are_checked_against_their_range_and_front() {
        let said = |args: &[&str]| {
            let all = std::iter::once("isolation-lab").chain(args.iter().copied());
            super::parse(all).map(|cli| cli.run.executor.executor())
        };
        let block = said(&["--work", "block", "--workers", "2"]).expect("valid");
        assert_eq!(block.work, WorkStyle::Block);
        assert_eq!(block.workers, Some(Workers::Threads(2)));
        assert_eq!(said(&[]).expect("valid"), Executor::default());
        for (args, says) in [
            (&["--workers", "5"][..], "1 through 4"),
            (&["--workers", "0"], "current-thread"),
            (&["--blocking-threads", "0"], "1 through 512"),
            (&["--blocking-threads", "513"], "1 through 512"),
            (&["--work", "forked"], "possible values"),
            (
                &["--server", "threaded", "--work", "spawn-blocking"],
                "has none",
            ),
            (
                &["--server", "threaded", "--work", "own-runtime"],
                "has none",
            ),
            (&["--server", "threaded", "--workers", "2"], "--workers"),
            (
                &["--server", "threaded", "--blocking-threads", "3"],
                "--blocking-threads",
            ),
            // Given, even at its default, it shapes nothing on the threaded front.
            (
                &["--server", "threaded", "--blocking-threads", "512"],
                "--blocking-threads",
            ),
            (
                &["sweep", "--server", "threaded", "--blocking-threads", "512"],
                "--blocking-threads",
            ),
            (
                &["sweep", "--server", "threaded", "--work", "own-runtime"],
                "has none",
            ),
            (
                &["classroom", "--server", "threaded", "--work", "own-runtime"],
                "has none",
            ),
            (&["classroom", "--workers", "5"], "1 through 4"),
        ] {
            let error = said(args).expect_err("refused");
            assert_eq!(error.exit_code(), 2, "{args:?}");
            assert!(error.to_string().contains(says), "{args:?}: {error}");
        }
        let threaded = said(&["--server", "threaded", "--work", "block"]).expect("valid");
        assert_eq!(threaded.work, WorkStyle::Block);
        for args in [
            &["predict", "--work", "block", "--workers", "2"][..],
            &[
                "compare",
                "--work",
                "spawn-blocking",
                "--blocking-threads",
                "1",
            ],
            &["sweep", "--work", "own-runtime"],
            &["classroom", "--work", "block", "--workers", "1"],
        ] {
            assert!(parse(args).is_ok(), "{args:?}");
        }
    }

    #[test]
    fn nothing_selects_a_host_a_port_or_an_unknown_mode() {
        for args in [
            &["--port", "8080"][..],
            &["--host", "0.0.0.0"],
            &["--url", "http://example.com"],
            &["predict", "--port", "8080"],
            &["--mode", "bogus"],
            &["--format", "xml"],
            &["--slots", "2", "--slots", "3"],
        ] {
            let error = parse(args).expect_err("refused");
            assert_eq!(error.exit_code(), 2, "{args:?}: {error}");
        }
    }
}
