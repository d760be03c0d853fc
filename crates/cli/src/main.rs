//! The `raidkit` binary: parse, then act.
//!
//! Every subcommand lives in its own module under `cmd/`, defines its flags as a clap `Args`
//! struct, and returns `Result<(), CliError>`. This file only dispatches and maps errors to the
//! documented exit codes below.

mod cmd;
mod error;

use clap::{Parser, Subcommand};
pub use error::{CliError, ExitCode};

const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  runtime failure (I/O error on a member, internal error)
  2  usage error (bad flags or values)
  3  refused: members or metadata failed validation (foreign, stale, malformed, mismatched)
  4  data unavailable: more members missing or failed than the level can lose
  5  a check found mismatches or a verification failed";

#[derive(Parser, Debug)]
#[command(name = "raidkit", version, about = "User-space software RAID, on-disk compatible with Linux md", after_help = EXIT_CODES_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the layout table of a geometry: which member holds which chunk of every stripe.
    Layout(cmd::layout::LayoutArgs),
    /// Benchmarks that print figures.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Export arrays as Network Block Device disks (unix socket or TCP on loopback).
    Serve(cmd::serve::ServeArgs),
    /// Manage a served array (status, fail, remove, add) through the server's control socket.
    Control(cmd::control::ControlArgs),
    /// Seeded simulation: random geometry, workload and faults checked against a reference model.
    Sim(cmd::sim::SimArgs),
    #[command(flatten)]
    Array(cmd::array::ArrayCommand),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Layout(args) => cmd::layout::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Control(args) => cmd::control::run(args),
        Command::Sim(args) => cmd::sim::run(args),
        Command::Array(args) => cmd::array::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("raidkit: {err}");
            std::process::ExitCode::from(err.code as u8)
        }
    }
}
