//! The command line (contract section 1). clap checks every value against its allowed range, so
//! a refused command line exits 2 with a message naming the flag, before any socket is opened.

use std::convert::Infallible;

use clap::{Parser, ValueEnum};

use crate::policy::{Held, Inputs, ModeChoice, Slots};

/// See bulkhead isolation work: shared vs partitioned work permits on a real loopback HTTP
/// server, and a report of the actual admission events and responses.
///
/// The server binds 127.0.0.1 on a port the OS picks; nothing here selects a host, URL or port,
/// and inherited proxy settings are ignored.
#[derive(Debug, Parser)]
#[command(name = "isolation-lab", version)]
pub struct Cli {
    /// Which policy to run (both runs shared first, then partitioned)
    #[arg(long, value_enum, default_value_t = ModeChoice::Both)]
    pub mode: ModeChoice,

    /// Total work permits of a policy, 2 through 4
    #[arg(long, value_name = "N", default_value_t = Inputs::default().slots)]
    pub slots: Slots,

    /// Slow requests sent and held at the gate, 1 through 4
    #[arg(long, value_name = "N", default_value_t = Inputs::default().held)]
    pub held: Held,

    /// The report on stdout: json for machines, text for a person reading it
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,

    // Flags a user may reach for but that the lab refuses with its reason, rather than with a
    // "similar argument" tip: the address is not the user's to choose. They can hold no value.
    #[arg(long, hide = true, value_name = "HOST", value_parser = refuse_address)]
    host: Option<Infallible>,
    #[arg(long, hide = true, value_name = "PORT", value_parser = refuse_address)]
    port: Option<Infallible>,
    #[arg(long, hide = true, value_name = "URL", value_parser = refuse_address)]
    url: Option<Infallible>,
}

fn refuse_address(_: &str) -> Result<Infallible, String> {
    Err("the lab always serves 127.0.0.1 on a port the OS picks; nothing selects a host, URL or port".into())
}

/// How the report is written to stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The full report of admission events and responses, as JSON
    Json,
    /// The workshop's prediction table, filled in with what happened
    Text,
}

impl Cli {
    /// The checked inputs of the run.
    pub fn inputs(&self) -> Inputs {
        Inputs {
            mode: self.mode,
            slots: self.slots,
            held: self.held,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("isolation-lab").chain(args.iter().copied()))
    }

    #[test]
    fn the_defaults_are_the_workshops_run() {
        let cli = parse(&[]).expect("no arguments is a valid command line");
        assert_eq!(cli.inputs(), Inputs::default());
        assert_eq!(cli.format, Format::Json);
        assert_eq!(cli.inputs().mode, ModeChoice::Both);
        assert_eq!(cli.inputs().slots.get(), 2);
        assert_eq!(cli.inputs().held.get(), 2);
    }

    #[test]
    fn every_allowed_value_is_taken() {
        let cli = parse(&[
            "--mode",
            "partitioned",
            "--slots",
            "4",
            "--held",
            "1",
            "--format",
            "text",
        ])
        .expect("all values are in range");
        assert_eq!(cli.mode, ModeChoice::Partitioned);
        assert_eq!((cli.slots.get(), cli.held.get()), (4, 1));
        assert_eq!(cli.format, Format::Text);
        let cli = parse(&["--slots=3", "--mode=shared"]).expect("--flag=value is accepted");
        assert_eq!((cli.mode, cli.slots.get()), (ModeChoice::Shared, 3));
    }

    #[test]
    fn out_of_range_values_name_the_flag_and_the_range() {
        for (args, flag, range) in [
            (["--slots", "1"], "--slots", "2 through 4"),
            (["--slots", "5"], "--slots", "2 through 4"),
            (["--held", "0"], "--held", "1 through 4"),
            (["--held", "5"], "--held", "1 through 4"),
            (["--slots", "abc"], "--slots", "2 through 4"),
        ] {
            let error = parse(&args).expect_err("out of range");
            assert_eq!(error.kind(), ErrorKind::ValueValidation, "{args:?}");
            let message = error.to_string();
            assert!(
                message.contains(flag) && message.contains(range),
                "{message}"
            );
        }
    }

    #[test]
    fn nothing_selects_a_host_a_port_or_an_unknown_mode() {
        for args in [
            &["--port", "8080"][..],
            &["--host", "0.0.0.0"],
            &["--url", "http://example.com"],
            &["--mode", "bogus"],
            &["--format", "xml"],
            &["--slots", "2", "--slots", "3"],
        ] {
            let error = parse(args).expect_err("refused");
            assert_eq!(error.exit_code(), 2, "{args:?}: {error}");
        }
    }
}
