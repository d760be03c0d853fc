//! Array subcommands in mdadm's vocabulary: create, examine, detail, read, write, fail, remove,
//! add, stop, and the demo.

use crate::CliError;

#[derive(clap::Subcommand, Debug)]
pub enum ArrayCommand {
    /// Create an array of image files, write and verify data, fail members, read degraded.
    Demo,
}

pub fn run(_cmd: ArrayCommand) -> Result<(), CliError> {
    Err(CliError::failure("not implemented yet"))
}
