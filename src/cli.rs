//! The command line (`docs/contract.md`, "Command line"), and the teaching instruments. clap
//! checks every value against its allowed range, so a refused command line exits 2 with a
//! message naming the flag, before any runtime or socket exists. The flag types here are the
//! command line's own; each maps onto a library type, so no library type carries clap.

use std::convert::Infallible;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::policy::{Front, Held, Inputs, ModeChoice, Slots};

/// See bulkhead isolation work: shared vs partitioned work permits on a real loopback HTTP
/// server, and a report of the actual admission events and responses.
///
/// The server binds 127.0.0.1 on a port the OS picks; nothing here selects a host, URL or port,
/// and inherited proxy settings are ignored.
#[derive(Debug, Parser)]
#[command(
    name = "isolation-lab",
    version,
    args_conflicts_with_subcommands = true
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

/// The teaching instruments.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print what the policy model expects for these inputs, without starting any server
    Predict {
        /// The inputs to predict.
        #[command(flatten)]
        inputs: InputArgs,
        /// The prediction on stdout
        #[arg(long, value_enum, default_value_t = TableFormat::Text)]
        format: TableFormat,
    },
    /// Run every allowed input (24 policy runs, each on its own server) and print a matrix per
    /// policy; exits 1 if any run differs from the model
    Sweep {
        /// The server front to run on
        #[arg(long, value_enum, default_value_t = ServerArg::Async)]
        server: ServerArg,
        /// The matrices on stdout
        #[arg(long, value_enum, default_value_t = TableFormat::Text)]
        format: TableFormat,
    },
    /// Run both policies on both server fronts with the same inputs and print them side by
    /// side: identical admissions, different costs; exits 1 if the admissions differ
    Compare {
        /// Total work permits of a policy, 2 through 4
        #[arg(long, value_name = "N", default_value_t = Inputs::default().slots)]
        slots: Slots,
        /// Slow requests sent and held at the gate, 1 through 4
        #[arg(long, value_name = "N", default_value_t = Inputs::default().held)]
        held: Held,
        /// The comparison on stdout
        #[arg(long, value_enum, default_value_t = TableFormat::Text)]
        format: TableFormat,
    },
}

/// The inputs of one lab run.
#[derive(Debug, Args)]
pub struct InputArgs {
    /// Which policy to run (both runs shared first, then partitioned)
    #[arg(long, value_enum, default_value_t = ModeArg::Both)]
    pub mode: ModeArg,

    /// Total work permits of a policy, 2 through 4
    #[arg(long, value_name = "N", default_value_t = Inputs::default().slots)]
    pub slots: Slots,

    /// Slow requests sent and held at the gate, 1 through 4
    #[arg(long, value_name = "N", default_value_t = Inputs::default().held)]
    pub held: Held,
}

/// The flags of a lab run.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The inputs.
    #[command(flatten)]
    pub inputs: InputArgs,

    /// The server front: async (Hyper, a task per connection) or threaded (a thread per
    /// connection, like the workshop's Python runner)
    #[arg(long, value_enum, default_value_t = ServerArg::Async)]
    pub server: ServerArg,

    /// The report on stdout: json for machines, text for a person, svg for a projector
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
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

/// `--mode`: which policies to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// One pool of all permits, for /slow and /fast alike
    Shared,
    /// A slow pool of all permits but one, and one permit reserved for /fast
    Partitioned,
    /// Shared, then partitioned, each on its own fresh server
    Both,
}

impl From<ModeArg> for ModeChoice {
    fn from(mode: ModeArg) -> ModeChoice {
        match mode {
            ModeArg::Shared => ModeChoice::Shared,
            ModeArg::Partitioned => ModeChoice::Partitioned,
            ModeArg::Both => ModeChoice::Both,
        }
    }
}

/// `--server`: which front serves the work section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ServerArg {
    /// Hyper on Tokio: a held request parks a task
    Async,
    /// std::net with an OS thread per connection: a held request blocks a thread
    Threaded,
}

impl From<ServerArg> for Front {
    fn from(server: ServerArg) -> Front {
        match server {
            ServerArg::Async => Front::Async,
            ServerArg::Threaded => Front::Threaded,
        }
    }
}

impl InputArgs {
    /// The checked inputs.
    pub fn inputs(&self) -> Inputs {
        Inputs {
            mode: self.mode.into(),
            slots: self.slots,
            held: self.held,
        }
    }
}

fn refuse_address(_: &str) -> Result<Infallible, String> {
    Err("the lab always serves 127.0.0.1 on a port the OS picks; nothing selects a host, URL or port".into())
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
        assert!(cli.command.is_none());
        assert_eq!(cli.run.inputs.inputs(), Inputs::default());
        assert_eq!(cli.run.format, Format::Json);
        assert_eq!(cli.run.inputs.mode, ModeArg::Both);
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
        assert_eq!(Front::from(cli.run.server), Front::Async);
        let cli = parse(&["--server", "threaded"]).expect("a front");
        assert_eq!(Front::from(cli.run.server), Front::Threaded);
        let cli = parse(&["--slots=3", "--mode=shared"]).expect("--flag=value is accepted");
        assert_eq!(
            (cli.run.inputs.mode, cli.run.inputs.slots.get()),
            (ModeArg::Shared, 3)
        );
    }

    #[test]
    fn instruments_take_their_own_flags() {
        let cli = parse(&["predict", "--held", "4", "--format", "json"]).expect("valid");
        let Some(Command::Predict { inputs, format }) = cli.command else {
            panic!("predict");
        };
        assert_eq!((inputs.held.get(), format), (4, TableFormat::Json));
        let cli = parse(&["sweep", "--server", "threaded"]).expect("valid");
        let Some(Command::Sweep { server, format }) = cli.command else {
            panic!("sweep");
        };
        assert_eq!((server, format), (ServerArg::Threaded, TableFormat::Text));
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
