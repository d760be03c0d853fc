//! `raidkit control`: manage an array that `raidkit serve` is serving, through its control
//! socket.

use crate::CliError;

#[derive(clap::Args, Debug)]
pub struct ControlArgs {}

pub fn run(_args: ControlArgs) -> Result<(), CliError> {
    Err(CliError::failure("control: not implemented yet"))
}
