//! `raidkit scan`: finds md members (raidkit's or md's) on the paths given, or on every block
//! device, groups them by array, and prints mdadm.conf-style ARRAY lines for the saved
//! configuration (see `raidkit_cli::config`), as `mdadm --examine --scan --verbose` does.

use raidkit_cli::common::print_json;
use raidkit_cli::config::{candidates, group, group_stacks, scan};
use raidkit_cli::{CliError, ExitCode};

#[derive(clap::Args, Debug)]
pub struct ScanArgs {
    /// Image files, block devices or glob patterns (quoted) to look at; none: every block
    /// device of the machine.
    pub paths: Vec<String>,
    /// Print the arrays and their members as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ScanArgs) -> Result<(), CliError> {
    let paths = candidates(&args.paths)?;
    // A RAID 50/60 stack is one line: the RAID 0 over its spans, with every span's members.
    let arrays = group_stacks(group(scan(&paths)));
    if args.json {
        return print_json(&arrays);
    }
    if arrays.is_empty() {
        return Err(CliError::new(
            ExitCode::Unavailable,
            format!("no md member among {} paths looked at", paths.len()),
        ));
    }
    for a in &arrays {
        println!("{}", a.config_line());
    }
    Ok(())
}
