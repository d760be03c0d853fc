//! The `raidkit` binary: parse, then act.
//!
//! Every subcommand lives in its own module under `cmd/`, defines its flags as a clap `Args`
//! struct, and returns `Result<(), CliError>`. This file only dispatches and maps errors to the
//! documented exit codes below, which every subcommand's `--help` shows too (added to the whole
//! command tree in [`cli_command`], so no subcommand can forget them). An error is printed once,
//! here; commands return it rather than printing it.

mod cmd;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Shown by `raidkit --help` and by every subcommand's `--help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  runtime failure (I/O error on a member, internal error, no server on the control socket)
  2  usage error (bad flags or values)
  3  refused: members or metadata failed validation (foreign, stale, malformed, mismatched,
     damaged superblock), or the command would destroy data and --force was not given
     (create over members of an array, fail a member the array cannot lose)
  4  data unavailable: more members missing or failed than the level can lose
  5  a check found mismatches or a verification failed
  6  interrupted by SIGINT/SIGTERM: background work stopped at a recorded checkpoint; run the
     same command again to resume
141  standard output or error was closed before everything was written (`| head`), as a
     process ended by SIGPIPE; nothing is printed about it

With --control (detail, fail, remove, add on an array that `raidkit serve` is serving) the
server checks the request and the command exits with the same codes.";

#[derive(Parser, Debug)]
#[command(
    name = "raidkit",
    version,
    about = "User-space software RAID, on-disk compatible with Linux md"
)]
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
    /// Each member's load of a served array over each interval, in `iostat -x`'s columns,
    /// from the server's control socket: `raidkit iostat --control SOCK 3`.
    Iostat(cmd::bench::IostatArgs),
    /// Export arrays as Network Block Device disks (unix socket or TCP on loopback).
    Serve(cmd::serve::ServeArgs),
    /// Predict an array's speed and risk before buying its drives, and check the model
    /// against the studies' measurements (`raidkit model validate`).
    Model(ModelTop),
    /// Rank configurations of the catalog's drives by speed, capacity or risk under
    /// constraints, with the reason for the first.
    Plan(cmd::model::PlanArgs),
    /// Watch served arrays and report failures, degradation and task progress (mdadm
    /// --monitor's events) to a program, a mail address, syslog and standard output.
    Monitor(cmd::monitor::MonitorArgs),
    /// Background work on a served array through its control socket: start a check, repair,
    /// patrol, rebuild or resync, stop it, follow it, change the task rates.
    Task(cmd::task::TaskArgs),
    /// Write the systemd units that serve the configuration's arrays and monitor them.
    InstallUnits(cmd::units::UnitsArgs),
    /// Find md members (raidkit's or md's) on the paths given or every block device, and print
    /// ARRAY lines for the configuration file (mdadm --examine --scan).
    Scan(cmd::scan::ScanArgs),
    /// Seeded simulation: random geometry, workload and faults checked against a reference model.
    Sim(cmd::sim::SimArgs),
    #[command(flatten)]
    Array(cmd::array::ArrayCommand),
}

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
struct ModelTop {
    #[command(subcommand)]
    command: Option<ModelCommand>,
    #[command(flatten)]
    args: cmd::model::ModelArgs,
}

#[derive(Subcommand, Debug)]
enum ModelCommand {
    /// Predictions against every cell of the studies' measurements, with the error.
    Validate(cmd::model::ValidateArgs),
}

/// Puts the exit codes under `cmd`'s help and under every subcommand's, at every depth.
fn with_exit_codes(cmd: clap::Command) -> clap::Command {
    cmd.after_help(EXIT_CODES_HELP)
        .mut_subcommands(with_exit_codes)
}

/// The whole command tree as the binary parses it.
fn cli_command() -> clap::Command {
    with_exit_codes(Cli::command())
}

/// Exit code of a command whose output was cut off (128 + SIGPIPE, what a shell shows for a
/// process SIGPIPE ended).
const OUTPUT_CLOSED: u8 = 141;

/// Whether a panic is `print!`'s on a closed stdout or stderr. Rust ignores SIGPIPE, so a
/// write to a pipe whose reader left (`raidkit detail --json | head -1`) returns EPIPE, and
/// `println!` panics on it. Restoring SIGPIPE instead would also let a client that drops a
/// socket kill the server, which writes to sockets outside the NBD code too.
fn output_closed(payload: &(dyn std::any::Any + Send)) -> bool {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    text.starts_with("failed printing to std") && text.contains("Broken pipe")
}

fn main() -> std::process::ExitCode {
    let matches = cli_command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if output_closed(info.payload()) {
            // Quiet: whoever read the output stopped reading; there is no one to tell.
            std::process::exit(OUTPUT_CLOSED.into());
        }
        default_hook(info)
    }));
    let result = match cli.command {
        Command::Layout(args) => cmd::layout::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Iostat(args) => cmd::bench::iostat(args),
        Command::Sim(args) => cmd::sim::run(args),
        Command::Monitor(args) => cmd::monitor::run(args),
        Command::Task(args) => cmd::task::run(args),
        Command::InstallUnits(args) => cmd::units::run(args),
        Command::Scan(args) => cmd::scan::run(args),
        Command::Model(ModelTop {
            command: Some(ModelCommand::Validate(args)),
            ..
        }) => cmd::model::validate(args),
        Command::Model(ModelTop { args, .. }) => cmd::model::run(args),
        Command::Plan(args) => cmd::model::plan(args),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command at every depth, with its path ("raidkit create").
    fn all_commands(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
        let path = if path.is_empty() {
            cmd.get_name().to_string()
        } else {
            format!("{path} {}", cmd.get_name())
        };
        out.push((path.clone(), cmd.clone()));
        for sub in cmd.get_subcommands() {
            if sub.get_name() != "help" {
                all_commands(sub, &path, out);
            }
        }
    }

    /// clap's own consistency checks, then ours: every subcommand's help shows the exit codes
    /// and every flag and positional says what it is for.
    #[test]
    fn every_command_documents_exit_codes_and_every_argument() {
        let mut root = cli_command();
        root.build();
        root.clone().debug_assert();
        let mut commands = Vec::new();
        all_commands(&root, "", &mut commands);
        assert!(
            commands.len() > 15,
            "found only {} commands",
            commands.len()
        );
        let mut undocumented = Vec::new();
        for (path, mut cmd) in commands {
            let help = cmd.render_long_help().to_string();
            assert!(
                help.contains("Exit codes:"),
                "`{path} --help` does not show the exit codes:\n{help}"
            );
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                let documented = arg
                    .get_help()
                    .or(arg.get_long_help())
                    .is_some_and(|h| !h.to_string().trim().is_empty());
                if !documented {
                    undocumented.push(format!("{path}: {id}"));
                }
            }
        }
        assert!(
            undocumented.is_empty(),
            "arguments without help text:\n  {}",
            undocumented.join("\n  ")
        );
    }
}
