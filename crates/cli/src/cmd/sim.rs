//! `raidkit sim`: the seeded simulator with fault injection.

use crate::CliError;

#[derive(clap::Args, Debug)]
pub struct SimArgs {}

pub fn run(_args: SimArgs) -> Result<(), CliError> {
    Err(CliError::failure("sim: not implemented yet"))
}
