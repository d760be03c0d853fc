//! `raidkit layout`: print which member holds which chunk of each stripe.

use crate::CliError;

#[derive(clap::Args, Debug)]
pub struct LayoutArgs {}

pub fn run(_args: LayoutArgs) -> Result<(), CliError> {
    Err(CliError::failure("layout: not implemented yet"))
}
