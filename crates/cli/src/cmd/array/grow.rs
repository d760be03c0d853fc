//! `raidkit grow`, in mdadm's vocabulary:
//! - `--size`: the array takes room its members have beyond what it uses (after every member
//!   was replaced by a larger one, or its device grew), as `mdadm --grow --size`. The new room
//!   is zeroed on every member first, with progress, and only then recorded, so the new region
//!   is consistent without a resync (see the engine's `array/grow.rs`).
//! - `--raid-devices` (RAID 1): more slots, filled by the spares given and rebuilt at once, or
//!   fewer, once no more members than that are in slots.
//! - `--raid-devices` (RAID 4/5/6): more members, the spares given; every stripe is rewritten
//!   in the wider layout (a reshape), crash-safe without a backup file (see the engine's
//!   `array/reshape.rs`); `--continue` goes on with a reshape a crash, Ctrl-C or md left.
//! - `--level`, `--layout`, `--chunk`: md's level migrations, restripes and takeovers (see
//!   `--level`'s help).

use super::tasks::{self, ProgressBar, SpeedArgs};
use raidkit_cli::common::{
    assemble_writable, engine_error, open_members, parse_chunk_sectors, parse_layout, parse_level,
    parse_size_bytes, print_json, report_notes,
};
use raidkit_cli::view::layout_name;
use raidkit_cli::CliError;
use raidkit_engine::ReshapeReport;
use raidkit_engine::{
    Array, AssembleOptions, EngineError, GrowRefusal, GrowSize, ReshapeControl, ReshapeTarget,
    TaskKind, TaskOutcome,
};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

/// The members of a stopped array, or (`--control`) a served one.
#[derive(clap::Args, Debug)]
pub struct GrowMembers {
    /// All members of the (stopped) array, spares to take new slots included.
    #[arg(required_unless_present = "control")]
    pub members: Vec<PathBuf>,
    /// Accept stale members / a dirty degraded array, as mdadm --force.
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long, help = raidkit_cli::common::RUN_HELP)]
    pub run: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct GrowArgs {
    #[command(flatten)]
    pub array: GrowMembers,
    /// Reshape an array `raidkit serve` is serving, through its control socket: it keeps
    /// serving reads and writes throughout (--raid-devices, --level, --layout, --chunk; add
    /// the spares first with `raidkit add --control`).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["members", "force", "size", "continue_reshape", "pause_at"])]
    pub control: Option<PathBuf>,
    /// Export name of the served array (when the server serves several).
    #[arg(long = "array", value_name = "NAME", requires = "control")]
    pub served: Option<String>,
    /// With --control: follow the reshape until it is done.
    #[arg(long, requires = "control")]
    pub wait: bool,
    /// Data to use on each member: `max` (all the room every member has, as mdadm's
    /// `--size max`) or a size (K, M, G, T suffix; a bare number is KiB, as mdadm's), rounded
    /// down to whole chunks. It may only grow.
    #[arg(
        long,
        short = 'z',
        value_name = "SIZE|max",
        required_unless_present_any = ["raid_devices", "continue_reshape", "level", "layout", "chunk"],
        conflicts_with_all = ["raid_devices", "continue_reshape", "level", "layout", "chunk", "array_size"]
    )]
    pub size: Option<String>,
    /// The number of members from now on. RAID 1: more slots, which the spares among the
    /// members take and which are rebuilt now (slots left over stay missing until `raidkit
    /// add`), or fewer, only once no more members than that are in slots (`raidkit fail` and
    /// `raidkit remove` the others first; members above the new count move down). RAID
    /// 0/4/5/6 and 10: more members, the spares given (`raidkit add` them first); the data
    /// is reshaped over all of them and the array grows by their share (RAID 10 near copies
    /// to any count, 4 to 5 members of 2 copies too; offset copies to a whole number of their
    /// near copies). RAID 4/5/6: fewer, once the array was shrunk to fit (--array-size).
    #[arg(
        long = "raid-devices",
        short = 'n',
        value_name = "N",
        conflicts_with = "continue_reshape"
    )]
    pub raid_devices: Option<usize>,
    /// The level from now on, as md changes it: RAID 0 to 4, 5 or 6 (spares become the
    /// parity), 4 to 5 (give a --layout: a RAID 4 is a RAID 5 with its parity last), 4 or 5 to
    /// 6 (a spare becomes the new Q, one more member unless --raid-devices says otherwise; the
    /// layout keeps its name, as mdadm's; with a `*-6` layout only the Q is rebuilt), 6 to 5
    /// (the Q member leaves as a spare), 5 to 4 (restriped parity-last), 5 or 4 to 0 (the
    /// parity member leaves as a spare). Without moving data (md's takeovers): a two-member
    /// RAID 1 to 5 and back, a RAID 0 to 10 near 2 (member k takes slot 2k; spares given take
    /// the odd slots and are rebuilt now, slots without one stay missing), a RAID 10 near 2 of
    /// an even count to 0 (one member of each pair stays; the others leave the array,
    /// recorded faulty).
    #[arg(long, value_name = "LEVEL", conflicts_with = "continue_reshape")]
    pub level: Option<String>,
    /// RAID 4/5/6: the layout from now on (mdadm's names: left-symmetric, right-asymmetric,
    /// parity-last, ...); the data is restriped.
    #[arg(long, value_name = "LAYOUT", conflicts_with = "continue_reshape")]
    pub layout: Option<String>,
    /// RAID 0/4/5/6/10: the chunk size from now on (K, M suffix; a bare number is KiB, as
    /// mdadm's); the data is restriped (a RAID 0 as mdadm does it: as a RAID 4 without its
    /// parity member, a RAID 0 again at the end). Each member's data must be a whole number of
    /// it.
    #[arg(
        long,
        short = 'c',
        value_name = "SIZE",
        conflicts_with = "continue_reshape"
    )]
    pub chunk: Option<String>,
    /// Fewer data members shrink the array (RAID 4/5/6 `--raid-devices` below the count):
    /// the array's size from now on (K, M, G, T suffix; a bare number is KiB, as mdadm's
    /// `--array-size`), at or below the new size. Your word that nothing past it is needed:
    /// shrink the filesystem first. Without it such a reshape is refused.
    #[arg(
        long = "array-size",
        value_name = "SIZE",
        conflicts_with = "continue_reshape"
    )]
    pub array_size: Option<String>,
    /// Go on with the reshape the members record (one a crash or Ctrl-C interrupted, or one
    /// md started), from where it was recorded.
    #[arg(long = "continue")]
    pub continue_reshape: bool,
    /// Reshapes: stop once this much of the array is reshaped (K, M, G, T suffix; md's
    /// `sync_max`), recorded, to go on later with --continue (Ctrl-C stops the same way).
    #[arg(long = "pause-at", value_name = "SIZE", conflicts_with = "size")]
    pub pause_at: Option<String>,
    #[command(flatten)]
    pub speed: SpeedArgs,
}

pub fn grow(args: GrowArgs) -> Result<(), CliError> {
    if let Some(control) = &args.control {
        return grow_served(&args, control);
    }
    if args.level.is_some()
        || args.layout.is_some()
        || args.chunk.is_some()
        || args.array_size.is_some()
    {
        let target = target(&args)?;
        return reshape(&args, Some(target));
    }
    match (&args.size, args.raid_devices) {
        (Some(size), _) => grow_size(&args, size),
        (None, Some(n)) => grow_mirrors(&args, n),
        (None, None) if args.continue_reshape => reshape(&args, None),
        (None, None) => Err(CliError::usage(
            "give --size, --raid-devices, --level, --layout, --chunk or --continue",
        )),
    }
}

/// The reshape the flags ask for.
fn target(args: &GrowArgs) -> Result<ReshapeTarget, CliError> {
    let level = args.level.as_deref().map(parse_level).transpose()?;
    let layout = match &args.layout {
        None => None,
        // The RAID 5 and RAID 6 layouts share their names and' numbers.
        Some(text) => Some(match level {
            Some(l) => parse_layout(l, text)?,
            None => parse_layout(5, text).or_else(|_| parse_layout(6, text))?,
        }),
    };
    let chunk_sectors = match &args.chunk {
        Some(c) => Some(u64::from(parse_chunk_sectors(c)?)),
        None => None,
    };
    let array_sectors = match &args.array_size {
        Some(s) => Some(parse_size_bytes(s, 1024)? / 512),
        None => None,
    };
    Ok(ReshapeTarget {
        raid_devices: args.raid_devices,
        level,
        layout,
        chunk_sectors,
        array_sectors,
    })
}

/// `grow --control`: starts an online reshape of a served array; with --wait, follows it.
fn grow_served(args: &GrowArgs, control: &std::path::Path) -> Result<(), CliError> {
    use raidkit_cli::server::control::{ControlClient, Request};
    let t = target(args)?;
    if t.raid_devices.is_none()
        && t.level.is_none()
        && t.layout.is_none()
        && t.chunk_sectors.is_none()
    {
        return Err(CliError::usage(
            "--control: give --raid-devices, --level, --layout or --chunk",
        ));
    }
    let mut client = ControlClient::connect(control)?;
    let reply = client.call(&Request::Grow {
        array: args.served.clone(),
        raid_devices: t.raid_devices,
        level: t.level,
        layout: t.layout,
        chunk_sectors: t.chunk_sectors,
        array_sectors: t.array_sectors,
    })?;
    let name = reply["array"].as_str().unwrap_or("array").to_string();
    if reply["reshape"].is_null() {
        println!(
            "raidkit: {name}: done at once (nothing moves): RAID {} over {} members",
            reply["status"]["level"], reply["status"]["raid_disks"]
        );
        return Ok(());
    }
    println!("raidkit: {name}: online reshape started; the array serves throughout");
    if !args.wait {
        println!(
            "raidkit: `raidkit detail --control {}` shows its progress",
            control.display()
        );
        return Ok(());
    }
    let (bar, _) = progress_bar(args);
    let start = Instant::now();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let d = client.call(&Request::Detail {
            array: args.served.clone(),
        })?;
        let r = &d["reshape"];
        if r.is_null() {
            if let Ok(mut b) = bar.lock() {
                b.finish();
            }
            println!(
                "raidkit: {name}: reshaped online in {:.1} s: RAID {} over {} members, {} bytes (clients see the new size when they reconnect)",
                start.elapsed().as_secs_f64(),
                d["status"]["level"],
                d["status"]["raid_disks"],
                d["status"]["array_bytes"]
            );
            return Ok(());
        }
        if let Some(e) = r["error"].as_str() {
            return Err(CliError::failure(format!(
                "{name}: the online reshape stopped: {e}"
            )));
        }
        let (pos, end) = (
            r["position_sectors"].as_u64().unwrap_or(0),
            r["end_sectors"].as_u64().unwrap_or(1),
        );
        // A shrink runs down from the end.
        let done = if r["backwards"].as_bool() == Some(true) {
            end.saturating_sub(pos)
        } else {
            pos
        };
        draw(&bar, "reshape", done * 512, end * 512);
    }
}

/// A progress bar (hidden for --quiet and --json), when it started, and how many bytes were
/// done then (a continued reshape starts part way).
struct Bar {
    bar: Mutex<ProgressBar>,
    start: Instant,
    base: std::sync::OnceLock<u64>,
}

fn progress_bar(args: &GrowArgs) -> (Bar, Instant) {
    let start = Instant::now();
    let bar = Bar {
        bar: Mutex::new(ProgressBar::new(args.speed.quiet || args.array.json)),
        start,
        base: std::sync::OnceLock::new(),
    };
    (bar, start)
}

impl Bar {
    fn lock(&self) -> std::sync::LockResult<std::sync::MutexGuard<'_, ProgressBar>> {
        self.bar.lock()
    }
}

/// Draws the bar: `label`, percent, and the rate and ETA of this run, from `done` of `total`
/// bytes.
fn draw(bar: &Bar, label: &'static str, done: u64, total: u64) {
    let base = *bar.base.get_or_init(|| done);
    let secs = bar.start.elapsed().as_secs_f64().max(1e-3);
    let rate = done.saturating_sub(base) as f64 / secs;
    let percent = if total == 0 {
        100.0
    } else {
        done as f64 * 100.0 / total as f64
    };
    let eta = (rate > 0.0).then(|| (total - done) as f64 / rate);
    if let Ok(mut bar) = bar.bar.lock() {
        bar.draw(label, percent, rate, eta, false);
    }
}

/// Reshapes a RAID 4/5/6 to `target` or continues a recorded reshape (`None`).
fn reshape(args: &GrowArgs, target: Option<ReshapeTarget>) -> Result<(), CliError> {
    let members = open_members(&args.array.members, false)?;
    let opts = assemble_opts(args);
    let (bar, start) = progress_bar(args);
    let progress = |done, total| draw(&bar, "reshape", done, total);
    let ctl = ReshapeControl {
        progress: &progress,
        stop: tasks::stop_flag()?,
        pause_at_bytes: match &args.pause_at {
            Some(s) => Some(parse_size_bytes(s, 1024)?),
            None => None,
        },
    };
    let report = match &target {
        Some(t) => Array::reshape(members, t, &opts, &ctl),
        None => Array::continue_reshape(members, &opts, &ctl),
    }
    .map_err(|e| match e {
        EngineError::CannotGrow(GrowRefusal::CountNotMirror { level: 1 }) => CliError::usage(
            "--pause-at is for reshapes (RAID 4/5/6); a RAID 1's slot count changes without one",
        ),
        e => engine_error(e),
    })?;
    if let Ok(mut bar) = bar.lock() {
        bar.finish();
    }
    if !report.rebuild_slots.is_empty() {
        // md's takeover: the level changed; the new parity is rebuilt now.
        if !args.array.json {
            for (name, slot) in &report.new_members {
                println!("raidkit: {name} takes slot {slot}");
            }
            println!(
                "raidkit: now {}; slots {:?} hold the new {} and are rebuilt now (Ctrl-C stops; `raidkit rebuild` resumes)",
                shape_change(&report),
                report.rebuild_slots,
                if report.new_level == 10 { "copies" } else { "parity" },
            );
            report_empty_mirrors(&report);
        }
        return rebuild_now(args, &report);
    }
    if args.array.json {
        return print_json(&report);
    }
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    for (name, slot) in &report.new_members {
        println!("raidkit: {name} takes slot {slot}");
    }
    if report.finished && report.written_bytes == 0 && report.old_level != report.new_level {
        // md's takeover: each member already holds what the new level puts there.
        println!(
            "raidkit: took over: now {}; nothing moved, no data rewritten",
            shape_change(&report)
        );
        report_empty_mirrors(&report);
        if !report.left_members.is_empty() {
            println!(
                "raidkit: {} left the array (recorded faulty; their superblocks keep the old state: `raidkit create --force` reuses them)",
                report.left_members.join(", ")
            );
        }
        return Ok(());
    }
    if !report.finished {
        let end = report.new_array_bytes;
        let pos = report.position_sectors * 512;
        println!(
            "raidkit: reshape stopped with {:.1} MiB of {:.1} MiB reshaped{}, recorded in the superblocks; `raidkit grow --continue` with the same members goes on (so does md)",
            mib(if report.backwards { end - pos } else { pos }),
            mib(end),
            if report.backwards { " (from the end down)" } else { "" },
        );
        return Ok(());
    }
    let secs = start.elapsed().as_secs_f64().max(1e-3);
    println!(
        "raidkit: reshaped {}{}: {:.1} MiB now {:.1} MiB; data offset {} -> {} sectors; {:.1} MiB read and {:.1} MiB written on the members in {:.1} s ({:.0} MB/s written), progress recorded {} times",
        shape_change(&report),
        if report.started_at_sectors > 0 {
            format!(" (continued from array sector {})", report.started_at_sectors)
        } else {
            String::new()
        },
        mib(report.old_array_bytes),
        mib(report.new_array_bytes),
        report.old_data_offset,
        report.new_data_offset,
        mib(report.read_bytes),
        mib(report.written_bytes),
        secs,
        report.written_bytes as f64 / secs / 1e6,
        report.checkpoints,
    );
    Ok(())
}

fn assemble_opts(args: &GrowArgs) -> AssembleOptions {
    AssembleOptions {
        force: args.array.force,
        run: args.array.run,
        ..Default::default()
    }
}

fn grow_mirrors(args: &GrowArgs, raid_devices: usize) -> Result<(), CliError> {
    if args.pause_at.is_some() {
        // Only a reshape pauses: never change a mirror's slots ignoring it.
        return reshape(args, Some(ReshapeTarget::members(raid_devices)));
    }
    let members = open_members(&args.array.members, false)?;
    let opts = assemble_opts(args);
    let report = match Array::grow_mirrors(members, raid_devices, &opts) {
        Err(EngineError::CannotGrow(GrowRefusal::CountNotMirror {
            level: 0 | 4..=6 | 10,
        })) => {
            return reshape(args, Some(ReshapeTarget::members(raid_devices)));
        }
        other => other.map_err(engine_error)?,
    };
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
    rebuild_now(args, &report)
}

/// Assembles the array and rebuilds its slots to rebuild now, with progress; `report` (what
/// the grow did) goes into the JSON output.
fn rebuild_now<T: serde::Serialize>(args: &GrowArgs, report: &T) -> Result<(), CliError> {
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
    let opts = assemble_opts(args);
    let (bar, _) = progress_bar(args);
    let report = Array::grow_size(members, size, &opts, &|done, total| {
        draw(&bar, "zero", done, total)
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

/// "from 4 to 5 members", "RAID 6 left-symmetric-6 to left-symmetric", "chunk 64K to 512K".
/// A RAID 0 taken over as a RAID 10 with fewer spares than members runs without the copies
/// nobody took: say so.
fn report_empty_mirrors(r: &ReshapeReport) {
    if (r.old_level, r.new_level) != (0, 10) {
        return;
    }
    let empty: Vec<usize> = (0..r.new_raid_devices / 2)
        .map(|k| 2 * k + 1)
        .filter(|s| !r.rebuild_slots.contains(s))
        .collect();
    if !empty.is_empty() {
        println!(
            "raidkit: slots {empty:?} have no member: the array runs without those copies until `raidkit add` gives them one"
        );
    }
}

fn shape_change(r: &ReshapeReport) -> String {
    let mut parts = Vec::new();
    if r.old_raid_devices != r.new_raid_devices {
        parts.push(format!(
            "from {} to {} members",
            r.old_raid_devices, r.new_raid_devices
        ));
    }
    // RAID 0 and 1 have no layout, RAID 1 no chunk, to speak of.
    let name = |level: i32, layout| {
        (!matches!(level, 0 | 1))
            .then(|| layout_name(level, layout).unwrap_or_else(|| layout.to_string()))
    };
    if r.old_level != r.new_level {
        parts.push(format!("RAID {} to RAID {}", r.old_level, r.new_level));
    }
    if (r.old_level, r.old_layout) != (r.new_level, r.new_layout) && r.new_level != 4 {
        match (
            name(r.old_level, r.old_layout),
            name(r.new_level, r.new_layout),
        ) {
            (Some(o), Some(n)) => parts.push(format!("layout {o} to {n}")),
            (None, Some(n)) => parts.push(format!("layout {n}")),
            _ => {}
        }
    }
    match (r.old_chunk_sectors, r.new_chunk_sectors) {
        (o, n) if o == n || n == 0 => {}
        (0, n) => parts.push(format!("chunk {}K", n / 2)),
        (o, n) => parts.push(format!("chunk {}K to {}K", o / 2, n / 2)),
    }
    parts.join(", ")
}
