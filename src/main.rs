//! Run with `cargo run --release -- [--mode shared|partitioned|both] [--slots N] [--held N]
//! [--format json|text]`. Exit status: 0 the run matched the policy model, 1 it failed (a
//! one-line reason on stderr), 2 the command line was refused.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use isolation_lab::cli::{Cli, Format};
use isolation_lab::report::text;

fn main() -> ExitCode {
    // A refused command line exits 2 here, with a message naming the flag, before any socket.
    let cli = Cli::parse();
    let report = match isolation_lab::run_blocking(cli.inputs()) {
        Ok(report) => report,
        Err(e) => return fail(&format!("cannot start the Tokio runtime: {e}")),
    };
    let rendered = match cli.format {
        Format::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => json + "\n",
            Err(e) => return fail(&format!("cannot write the report as JSON: {e}")),
        },
        Format::Text => text::render(&report),
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(rendered.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // A reader that closed the pipe early (`| head`) has what it wanted: not a crash.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return fail(&format!("cannot write the report: {e}"));
        }
        _ => {}
    }
    match &report.failure {
        Some(reason) => fail(reason),
        None => ExitCode::SUCCESS,
    }
}

/// The one-line reason on stderr, exit status 1. A stderr that cannot be written to is not a
/// reason to panic: the exit status still says it.
fn fail(reason: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "isolation-lab: {reason}");
    ExitCode::from(1)
}
