//! `raidkit grow --size`: the array takes room its members have beyond what it uses (after
//! every member was replaced by a larger one, or its device grew), as `mdadm --grow --size`.
//! The new room is zeroed on every member first, with progress, and only then recorded, so the
//! new region is consistent without a resync (see the engine's `array/grow.rs`).

use super::tasks::ProgressBar;
use raidkit_cli::common::{engine_error, open_members, parse_size_bytes, print_json, RUN_HELP};
use raidkit_cli::CliError;
use raidkit_engine::{Array, AssembleOptions, GrowSize};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct GrowArgs {
    /// All members of the (stopped) array.
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
    /// Data to use on each member: `max` (all the room every member has, as mdadm's
    /// `--size max`) or a size (K, M, G, T suffix; a bare number is KiB, as mdadm's), rounded
    /// down to whole chunks. It may only grow.
    #[arg(long, short = 'z', value_name = "SIZE|max")]
    pub size: String,
    /// Accept stale members, as mdadm --force.
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long, help = RUN_HELP)]
    pub run: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// No progress display.
    #[arg(long)]
    pub quiet: bool,
}

pub fn grow(args: GrowArgs) -> Result<(), CliError> {
    let size = match args.size.trim() {
        "max" => GrowSize::Max,
        s => GrowSize::Sectors(parse_size_bytes(s, 1024)? / 512),
    };
    let members = open_members(&args.members, false)?;
    let opts = AssembleOptions {
        force: args.force,
        run: args.run,
        ..Default::default()
    };
    let bar = Mutex::new(ProgressBar::new(args.quiet || args.json));
    let start = Instant::now();
    let report = Array::grow_size(members, size, &opts, &|done, total| {
        let secs = start.elapsed().as_secs_f64().max(1e-3);
        let rate = done as f64 / secs;
        let percent = if total == 0 {
            100.0
        } else {
            done as f64 * 100.0 / total as f64
        };
        let eta = (rate > 0.0).then(|| (total - done) as f64 / rate);
        if let Ok(mut bar) = bar.lock() {
            bar.draw("zero", percent, rate, eta, false);
        }
    })
    .map_err(engine_error)?;
    if let Ok(mut bar) = bar.lock() {
        bar.finish();
    }
    if args.json {
        return print_json(&report);
    }
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    println!(
        "raidkit: grew the array from {:.1} MiB to {:.1} MiB ({:.1} MiB to {:.1} MiB of each member); the new room ({:.1} MiB over the members) was zeroed first, so it needs no resync",
        mib(report.old_array_bytes),
        mib(report.new_array_bytes),
        mib(report.old_member_sectors * 512),
        mib(report.new_member_sectors * 512),
        mib(report.zeroed_bytes),
    );
    Ok(())
}
