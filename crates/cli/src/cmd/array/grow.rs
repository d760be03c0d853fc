//! `raidkit grow`, in mdadm's vocabulary:
//! - `--size`: the array takes room its members have beyond what it uses (after every member
//!   was replaced by a larger one, or its device grew), as `mdadm --grow --size`. The new room
//!   is zeroed on every member first, with progress, and only then recorded, so the new region
//!   is consistent without a resync (see the engine's `array/grow.rs`).
//! - `--raid-devices` (RAID 1): more slots, filled by the spares given and rebuilt at once, or
//!   fewer, once no more members than that are in slots.

use super::tasks::{self, ProgressBar, SpeedArgs};
use raidkit_cli::common::{
    assemble_writable, engine_error, open_members, parse_size_bytes, print_json, report_notes,
    MembersArgs,
};
use raidkit_cli::CliError;
use raidkit_engine::{Array, AssembleOptions, GrowSize, TaskKind, TaskOutcome};
use std::sync::Mutex;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct GrowArgs {
    #[command(flatten)]
    pub array: MembersArgs,
    /// Data to use on each member: `max` (all the room every member has, as mdadm's
    /// `--size max`) or a size (K, M, G, T suffix; a bare number is KiB, as mdadm's), rounded
    /// down to whole chunks. It may only grow.
    #[arg(
        long,
        short = 'z',
        value_name = "SIZE|max",
        required_unless_present = "raid_devices",
        conflicts_with = "raid_devices"
    )]
    pub size: Option<String>,
    /// RAID 1: the number of slots from now on. More: the spares among the members take the
    /// new slots and are rebuilt now (slots left over stay missing until `raidkit add`).
    /// Fewer: only once no more members than that are in slots (`raidkit fail` and `raidkit
    /// remove` the others first); members above the new count move down.
    #[arg(long = "raid-devices", short = 'n', value_name = "N")]
    pub raid_devices: Option<usize>,
    #[command(flatten)]
    pub speed: SpeedArgs,
}

pub fn grow(args: GrowArgs) -> Result<(), CliError> {
    match (&args.size, args.raid_devices) {
        (Some(size), _) => grow_size(&args, size),
        (None, Some(n)) => grow_mirrors(&args, n),
        (None, None) => Err(CliError::usage("give --size or --raid-devices")),
    }
}

fn grow_mirrors(args: &GrowArgs, raid_devices: usize) -> Result<(), CliError> {
    let members = open_members(&args.array.members, false)?;
    let opts = AssembleOptions {
        force: args.array.force,
        run: args.array.run,
        ..Default::default()
    };
    let report = Array::grow_mirrors(members, raid_devices, &opts).map_err(engine_error)?;
    if !args.array.json {
        println!(
            "raidkit: RAID 1 now has {} slots (was {})",
            report.new_raid_devices, report.old_raid_devices
        );
        for (name, slot) in &report.new_slots {
            println!("raidkit: {name} takes slot {slot} and is rebuilt now (Ctrl-C stops; `raidkit rebuild` resumes)");
        }
        for (name, from, to) in &report.moved {
            println!("raidkit: {name} moves from slot {from} to slot {to}");
        }
        if !report.empty_slots.is_empty() {
            println!(
                "raidkit: slots {:?} have no member: the array runs degraded until `raidkit add` gives them one",
                report.empty_slots
            );
        }
    }
    if report.new_slots.is_empty() {
        if args.array.json {
            print_json(&report)?;
        }
        return Ok(());
    }
    let (array, assembled) =
        assemble_writable(&args.array.members, args.array.force, args.array.run)?;
    report_notes(&assembled);
    let reports = tasks::run_with_progress(&array, Some(TaskKind::Rebuild), &args.speed)?;
    if !args.array.json {
        return tasks::conclude(&array, &reports, false, false);
    }
    array.stop().map_err(engine_error)?;
    print_json(&serde_json::json!({ "grow": report, "tasks": reports, "status": array.status() }))?;
    match reports
        .iter()
        .map(|r| &r.outcome)
        .find(|o| **o != TaskOutcome::Completed)
    {
        Some(TaskOutcome::Failed { error }) => Err(CliError::failure(error.clone())),
        Some(other) => Err(CliError::failure(format!("rebuild: {other:?}"))),
        None => Ok(()),
    }
}

fn grow_size(args: &GrowArgs, size: &str) -> Result<(), CliError> {
    let size = match size.trim() {
        "max" => GrowSize::Max,
        s => GrowSize::Sectors(parse_size_bytes(s, 1024)? / 512),
    };
    let members = open_members(&args.array.members, false)?;
    let opts = AssembleOptions {
        force: args.array.force,
        run: args.array.run,
        ..Default::default()
    };
    let bar = Mutex::new(ProgressBar::new(args.speed.quiet || args.array.json));
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
    if args.array.json {
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
