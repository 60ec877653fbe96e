//! Run with `cargo run --release -- [--mode shared|partitioned|both] [--slots N] [--held N]
//! [--server async|threaded] [--format json|text|svg]`, or `predict`, `sweep`, `compare`,
//! `record REPORT`, `classroom`, `hold`, `replicas`.
//! Exit status: 0 the run matched the policy model, 1 it failed (a one-line reason on stderr;
//! for `record`, the report's re-check did not match or found it edited), 2 the command line
//! (or the report given to `record`) was refused.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::error::ContextValue;

#[cfg(unix)]
use isolation_lab::cli::HoldFormat;
use isolation_lab::cli::{Command, Format, TableFormat, terminal};
use isolation_lab::coordinator::Options;
#[cfg(unix)]
use isolation_lab::hold;
use isolation_lab::lab::render::{picture as svg, text};
use isolation_lab::policy::Front;
use isolation_lab::{classroom, compare, record, sweep};

/// Out of memory is one line and exit 1.
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: isolation_lab::allocator::LabAllocator = isolation_lab::allocator::LabAllocator;

fn main() -> ExitCode {
    #[cfg(unix)]
    isolation_lab::allocator::one_arena_under_an_address_space_limit();
    #[cfg(unix)]
    isolation_lab::cli::fail_writes_past_the_file_size_limit();
    let lab = || {
        // A refused command line exits 2 here, with a message naming the flag, before anything
        // else.
        let cli = match isolation_lab::cli::parse(std::env::args_os()) {
            Ok(cli) => cli,
            Err(refused) => return refuse(&refused),
        };
        // The lab's own limit, not a front child's: a child's CPU limit ends it as the kernel
        // ends it, and the lab reports how (its signal), as the front's evidence.
        #[cfg(unix)]
        if !matches!(cli.command, Some(Command::Front { .. })) {
            isolation_lab::cli::stop_before_the_cpu_time_limit();
            isolation_lab::cli::one_line_at_a_signal();
        }
        // `Err`: an exit status already explained on stderr.
        instrument(cli).unwrap_or_else(|status| status)
    };
    isolation_lab::cli::on_a_full_stack(lab)
        .unwrap_or_else(|e| fail(&format!("cannot start a thread with a full stack: {e}")))
}

/// Runs the lab, or the instrument the command line names, and writes what it shows.
fn instrument(cli: isolation_lab::cli::Cli) -> Result<ExitCode, ExitCode> {
    Ok(match cli.command {
        None => {
            let options = Options::on(cli.run.server).with_executor(cli.run.executor.executor());
            let run = isolation_lab::lab::run_with(cli.run.inputs.inputs(), options);
            let report = runtime(run)?;
            let rendered = match cli.run.format {
                Format::Json => json(report.to_json()),
                Format::Text => Ok(shown(text::render(&report))),
                Format::Svg => Ok(svg::render(&report)),
            };
            emit(rendered, report.failure.as_deref())
        }
        Some(Command::Predict {
            inputs,
            executor,
            format,
        }) => {
            let (inputs, executor) = (inputs.inputs(), executor.executor());
            let predictions = isolation_lab::lab::predict_on(inputs, (Front::Async, executor));
            let rendered = table(format, &predictions, || {
                text::prediction_on(&inputs, &executor, &predictions)
            });
            emit(rendered, None)
        }
        Some(Command::Sweep {
            server,
            executor,
            format,
        }) => {
            let sweep = runtime(sweep::sweep_on(server, executor.executor()))?;
            let rendered = table(format, &sweep, || sweep::render::render(&sweep));
            emit(rendered, sweep.failure().as_deref())
        }
        Some(Command::Classroom {
            inputs,
            server,
            executor,
            show_predictions,
        }) => {
            let config = classroom::Config {
                inputs: inputs.inputs(),
                options: Options::on(server).with_executor(executor.executor()),
                show_predictions,
                timeouts: classroom::Timeouts::default(),
                room_requests: classroom::ROOM_REQUESTS,
            };
            // On stderr, the terminal's: stdout is the JSON report alone, which
            // `classroom > session.json` saves.
            let announce = |urls: &classroom::Urls| {
                let said = format!(
                    "isolation-lab classroom: open the instructor's page (its controls: keep \
                     this address off the projector and to yourself):\n  {}\n\
                     the room's view, without controls: {}\n\
                     Finish on the page, or Ctrl-C here, ends the session; its JSON report goes \
                     to stdout.\n",
                    urls.instructor, urls.room
                );
                let mut stderr = std::io::stderr().lock();
                stderr
                    .write_all(said.as_bytes())
                    .and_then(|()| stderr.flush())
            };
            let session = runtime(classroom::run(config, announce))?;
            let report = session.map_err(|reason| fail(&format!("{reason:#}")))?;
            let verdict = report.verdict();
            // The page's verdict, said on the terminal too, once the report is out; a match is
            // said only once the report went out whole.
            match (
                write_out(
                    json(serde_json::to_string_pretty(&report)),
                    verdict.as_deref(),
                )?,
                verdict,
            ) {
                (_, Some(verdict)) => fail(&verdict),
                (true, None) => say(
                    "isolation-lab classroom",
                    "session over: matches the model, every run matched; its JSON report went \
                     to stdout",
                    0,
                ),
                (false, None) => ExitCode::SUCCESS,
            }
        }
        Some(Command::Compare {
            slots,
            held,
            executor,
            format,
        }) => {
            let comparison = runtime(compare::compare_on(slots, held, executor.executor()))?;
            let rendered = table(format, &comparison, || compare::render::render(&comparison));
            emit(rendered, comparison.failure().as_deref())
        }
        Some(Command::Record { report, format }) => {
            // A report that cannot be read is refused input, like a bad flag: exit 2, before
            // anything is printed.
            let saved =
                record::load(&report).map_err(|refused| say("error", &refused.to_string(), 2))?;
            // Re-checked, never trusted: exit 1 when it does not hold together or did not match.
            let shown = record::Shown::of(&saved, &report);
            let rendered = table(format, &shown, || shown.text());
            emit(rendered, shown.failure().as_deref())
        }
        #[cfg(unix)]
        Some(Command::Replicas {
            replicas,
            slots,
            held,
            global,
            lease_ms,
            fencing,
            format,
        }) => {
            let inputs = isolation_lab::replicas::ReplicasInputs {
                replicas,
                slots,
                held,
                global,
                lease_ms,
                fencing,
            };
            let report = runtime(isolation_lab::replicas::run(inputs))?;
            let rendered = table(format, &report, || {
                isolation_lab::replicas::render::render(&report)
            });
            emit(rendered, report.reason().as_deref())
        }
        #[cfg(unix)]
        Some(Command::Hold {
            counts,
            server,
            format,
        }) => {
            // The command line's parser checked the same: this is a safety net.
            let config = hold::HoldInputs::new(&counts, &server.fronts())
                .map_err(|reason| say("isolation-lab hold", &format!("{reason:#}"), 2))?;
            let report = hold::hold(&config, &hold::HoldOptions::default());
            let rendered = match format {
                HoldFormat::Text => Ok(shown(hold::render::text(&report))),
                HoldFormat::Json => json(serde_json::to_string_pretty(&report)),
                HoldFormat::Svg => Ok(hold::render::svg(&report)),
            };
            emit(rendered, report.failure.as_deref())
        }
        // A child process of the lab: its stdout is its parent's channel, so it prints nothing.
        #[cfg(unix)]
        Some(Command::Front { spec }) => ExitCode::from(isolation_lab::front_process::serve(&spec)),
    })
}

/// Runs `future` on the lab's runtime; exit status 1 (after saying why) if the runtime cannot
/// start.
fn runtime<F: Future>(future: F) -> Result<F::Output, ExitCode> {
    isolation_lab::lab::block_on(future)
        .map_err(|e| fail(&format!("cannot start the Tokio runtime: {e}")))
}

/// The rendering `format` asks for: `text`'s, or `value` as JSON.
fn table(
    format: TableFormat,
    value: &impl serde::Serialize,
    text: impl FnOnce() -> String,
) -> anyhow::Result<String> {
    match format {
        TableFormat::Text => Ok(shown(text())),
        TableFormat::Json => json(serde_json::to_string_pretty(value)),
    }
}

/// A text rendering as the terminal shows it: what it quotes from outside the process (a
/// report's file, a Redis server's words) draws nothing.
fn shown(text: String) -> String {
    terminal::lines(&text).into_owned()
}

/// JSON as written (pretty-printed), as the terminal shows it, with its last newline.
fn json(written: serde_json::Result<String>) -> anyhow::Result<String> {
    let json = written.context("cannot write JSON")?;
    Ok(terminal::json(json) + "\n")
}

/// Writes the rendered output, then exits 1 with `failure` if there is one (and with it what
/// could not be written, if the output could not).
fn emit(rendered: anyhow::Result<String>, failure: Option<&str>) -> ExitCode {
    match write_out(rendered, failure) {
        Ok(_) => failure.map_or(ExitCode::SUCCESS, fail),
        Err(status) => status,
    }
}

/// Writes the rendered output: `Ok(true)` when it was written whole, `Ok(false)` when its
/// reader left before its end; `Err` with exit status 1 once it has said why it could not be
/// rendered or written (after `failure`, if the run failed).
fn write_out(rendered: anyhow::Result<String>, failure: Option<&str>) -> Result<bool, ExitCode> {
    // The run's own failure, if it failed, comes first: it happened first.
    let after_failure = |then: String| match failure {
        Some(failure) => format!("{failure}; then {then}"),
        None => then,
    };
    let rendered = rendered.map_err(|reason| fail(&after_failure(format!("{reason:#}"))))?;
    let mut stdout = std::io::stdout().lock();
    match writable(&stdout)
        .and_then(|()| stdout.write_all(rendered.as_bytes()))
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(true),
        // A reader that closed the pipe early (`| head`) has what it wanted: not a crash.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(fail(&after_failure(format!("cannot write to stdout: {e}")))),
    }
}

/// `Err` if `stdout` is open for reading only (`1</etc/hostname`): std takes a write that
/// fails there (EBADF) as done, for a closed stdout, and the report would be lost without a
/// word.
#[cfg(unix)]
fn writable(stdout: &impl std::os::fd::AsRawFd) -> std::io::Result<()> {
    // SAFETY: F_GETFL only reads the descriptor's flags; any number is safe to ask about.
    let flags = unsafe { libc::fcntl(stdout.as_raw_fd(), libc::F_GETFL) };
    match flags {
        -1 => Err(std::io::Error::last_os_error()),
        _ if flags & libc::O_ACCMODE == libc::O_RDONLY => {
            Err(std::io::Error::other("it is open for reading only"))
        }
        _ => Ok(()),
    }
}

#[cfg(not(unix))]
fn writable<T>(_stdout: &T) -> std::io::Result<()> {
    Ok(())
}

/// The one-line reason on stderr, exit status 1.
fn fail(reason: &str) -> ExitCode {
    say("isolation-lab", reason, 1)
}

/// `reason` on stderr after `who`, as one line that shows what it quotes, and exit status
/// `status`. A stderr that cannot be written to is not a reason to panic: the status still
/// says it.
fn say(who: &str, reason: &str, status: u8) -> ExitCode {
    let reason = terminal::one_line(reason);
    let _ = writeln!(std::io::stderr(), "{who}: {reason}");
    ExitCode::from(status)
}

/// clap's words for a refused command line on stderr, exit status 2 (or the help or version
/// asked for, on stdout, 0), with what they quote of the command line shown as it is.
fn refuse(refused: &clap::Error) -> ExitCode {
    let mut said = refused.render().to_string();
    // clap's words keep their own line breaks; one inside a value they quote is written out,
    // so a refused value cannot add a line the lab did not write.
    for (_, value) in refused.context() {
        let quoted = match value {
            ContextValue::String(one) => std::slice::from_ref(one),
            ContextValue::Strings(many) => many.as_slice(),
            _ => &[],
        };
        for quoted in quoted.iter().filter(|q| q.contains('\n')) {
            // Only where it is quoted: a value of only a line break is in clap's own words too.
            let written_out = format!("'{}'", terminal::one_line(quoted));
            said = said.replace(&format!("'{quoted}'"), &written_out);
        }
    }
    let said = terminal::lines(&said);
    if refused.use_stderr() {
        let _ = write!(std::io::stderr(), "{said}");
    } else {
        // The help or version asked for: lost on a stdout open for reading only, as a report is.
        let stdout = std::io::stdout();
        if let Err(e) = writable(&stdout).and_then(|()| write!(stdout.lock(), "{said}")) {
            return fail(&format!("cannot write to stdout: {e}"));
        }
    }
    ExitCode::from(u8::try_from(refused.exit_code()).unwrap_or(2))
}
