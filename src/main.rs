//! Run with `cargo run --release -- [--mode shared|partitioned|both] [--slots N] [--held N]
//! [--format json|text|svg]`, or `predict` / `sweep`. Exit status: 0 the run matched the policy
//! model, 1 it failed (a one-line reason on stderr), 2 the command line was refused.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use isolation_lab::cli::{Cli, Command, Format, TableFormat};
use isolation_lab::report::text;
use isolation_lab::sweep;

fn main() -> ExitCode {
    // A refused command line exits 2 here, with a message naming the flag, before anything else.
    let cli = Cli::parse();
    match cli.command {
        None => run(cli.run.inputs.inputs(), cli.run.format),
        Some(Command::Predict { inputs, format }) => {
            let inputs = inputs.inputs();
            let predictions = isolation_lab::predict(inputs);
            let rendered = match format {
                TableFormat::Text => Ok(text::prediction(&inputs, &predictions)),
                TableFormat::Json => json(&predictions),
            };
            emit(rendered, None)
        }
        Some(Command::Sweep { format }) => {
            let sweep = match isolation_lab::block_on(sweep::sweep()) {
                Ok(sweep) => sweep,
                Err(e) => return fail(&format!("cannot start the Tokio runtime: {e}")),
            };
            let rendered = match format {
                TableFormat::Text => Ok(sweep::render(&sweep)),
                TableFormat::Json => json(&sweep),
            };
            let failure = (!sweep.matches_model).then_some("a run differed from the policy model");
            emit(rendered, failure)
        }
    }
}

fn run(inputs: isolation_lab::policy::Inputs, format: Format) -> ExitCode {
    let report = match isolation_lab::block_on(isolation_lab::run(inputs)) {
        Ok(report) => report,
        Err(e) => return fail(&format!("cannot start the Tokio runtime: {e}")),
    };
    let rendered = match format {
        Format::Json => json(&report),
        Format::Text => Ok(text::render(&report)),
    };
    emit(rendered, report.failure.as_deref())
}

fn json(value: &impl serde::Serialize) -> Result<String, String> {
    let json = serde_json::to_string_pretty(value);
    json.map(|json| json + "\n")
        .map_err(|e| format!("cannot write JSON: {e}"))
}

/// Writes the rendered output, then exits 1 with `failure` if there is one.
fn emit(rendered: Result<String, String>, failure: Option<&str>) -> ExitCode {
    let rendered = match rendered {
        Ok(rendered) => rendered,
        Err(reason) => return fail(&reason),
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(rendered.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // A reader that closed the pipe early (`| head`) has what it wanted: not a crash.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return fail(&format!("cannot write to stdout: {e}"));
        }
        _ => {}
    }
    failure.map_or(ExitCode::SUCCESS, fail)
}

/// The one-line reason on stderr, exit status 1. A stderr that cannot be written to is not a
/// reason to panic: the exit status still says it.
fn fail(reason: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "isolation-lab: {reason}");
    ExitCode::from(1)
}
