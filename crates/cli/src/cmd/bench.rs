//! `raidkit bench …`: benchmarks that print figures.

use crate::CliError;

#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Parity kernels against ISA-L.
    Parity,
}

pub fn run(_cmd: BenchCommand) -> Result<(), CliError> {
    Err(CliError::failure("bench: not implemented yet"))
}
