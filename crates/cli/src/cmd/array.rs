//! Array subcommands in mdadm's vocabulary: create, examine, detail, read, write, fail, remove,
//! add, stop, and the demo.
//!
//! Parse, then act: flags become plain values (levels, layout numbers, sizes in bytes or
//! sectors) before any member is opened. Commands that only look (examine, detail, read) open
//! every member read-only, so they never change a member, whatever the array's state; given only
//! some members, `read` runs degraded where the level allows and says so on stderr.
//!
//! Commands that could destroy data decide before they write: `create` refuses members that
//! hold an md superblock (unless `--force`) and rehearses the engine's create on size-only
//! devices before creating a file, removing the files it created should the real create
//! still fail; `fail` refuses, on a read-only assembly, a failure the level cannot survive
//! (unless `--force`). `write` streams its input, so its memory does not grow with it.

/// `create`, and creating arrays for the demo and the NBD benchmark.
mod assemble;
pub mod create;
mod demo;
mod grow;
pub mod tasks;
mod util;

use create::open_new_member;
use raidkit_cli::common::{
    assemble, assemble_volume, assemble_volume_writable, assemble_writable, engine_error,
    open_members, open_or_create, parse_size_bytes, print_json, random_uuid, report_notes,
    stack_level_of, Insist, MembersArgs, RUN_HELP,
};
use raidkit_cli::server::control;
use raidkit_cli::view::{layout_name, print_detail, StatusView};
use raidkit_cli::{CliError, ExitCode};
use raidkit_disk::Disk;
use raidkit_engine::{Array, TaskKind};
use raidkit_metadata::ExamineReport;
use std::io::{Read, Write};
use std::path::PathBuf;

/// Shown under the help of the commands that also act on served arrays.
const CONTROL_EXAMPLES: &str = "\
Stopped arrays are named by their member files; an array that `raidkit serve` is serving is
reached through the server's control socket instead:
  raidkit fail --member m2.img m0.img m1.img m2.img m3.img          (stopped array)
  raidkit serve --socket /run/md0.sock m0.img m1.img m2.img m3.img   (control: /run/md0.sock.ctl)
  raidkit detail --control /run/md0.sock.ctl [--json]
  raidkit fail   --control /run/md0.sock.ctl --member m2.img
  raidkit remove --control /run/md0.sock.ctl --member m2.img
  raidkit add    --control /run/md0.sock.ctl --member new.img --size 1G --wait
Give --array NAME when the server serves several arrays.";

#[derive(clap::Subcommand, Debug)]
pub enum ArrayCommand {
    /// Create an array of image files, write and verify data, fail members, read degraded.
    Demo(demo::DemoArgs),
    /// Create a new array on members (image files are created with --image-size when
    /// missing). Refuses members that already hold an md superblock unless --force.
    Create(create::CreateArgs),
    /// Print the md superblock of each member, like mdadm --examine; a damaged superblock is
    /// printed too, with what is wrong with it (exit code 3).
    Examine(ExamineArgs),
    /// Assemble the members read-only and print the array's state, like mdadm --detail; with
    /// --control, ask a running `raidkit serve` about an array it serves.
    #[command(after_help = CONTROL_EXAMPLES)]
    Detail(DetailArgs),
    /// Copy array contents to a file or stdout (read-only; runs degraded with missing members).
    Read(ReadArgs),
    /// Write a file (or stdin, streamed) into the array at an offset.
    Write(WriteArgs),
    /// Mark a member faulty in the superblocks of the others (of a served array with --control).
    /// Refuses (exit code 3) when the array cannot lose the member, unless --force.
    #[command(after_help = CONTROL_EXAMPLES)]
    Fail(FailArgs),
    /// Remove a faulty or spare member from the array's superblocks (of a served array with
    /// --control).
    #[command(after_help = CONTROL_EXAMPLES)]
    Remove(MemberArgs),
    /// Add a member as a spare; if a slot is missing it is rebuilt onto the new member (in a
    /// served array with --control).
    #[command(after_help = CONTROL_EXAMPLES)]
    Add(AddArgs),
    /// Assemble and stop cleanly (marks the superblocks clean).
    Stop(MembersArgs),
    /// Bring stopped arrays (one by its members, or with --scan every one the configuration
    /// names) to a consistent state, as mdadm --assemble does: logs replayed, an interrupted
    /// superblock round finished, superblocks written clean; one line each says what it is
    /// made of. `raidkit serve --scan` then serves them. --read-only only looks.
    Assemble(assemble::AssembleArgs),
    /// Count stripes whose parity or copies disagree with the data (md's check); changes
    /// nothing. Exit code 5 when mismatches are found.
    Check(tasks::ScanArgs),
    /// Like check, and rewrite parity (or copies) that disagree (md's repair).
    Repair(tasks::ScanArgs),
    /// Finish pending background work: rebuild onto spares, replacements, resync after an
    /// unclean stop; resumes from the checkpoint a stopped run recorded.
    Rebuild(tasks::TaskArgs),
    /// Read every member; unreadable sectors are rewritten from redundancy.
    Patrol(tasks::ScanArgs),
    /// Copy a member onto a new one while the array stays whole (mdadm --replace); the old
    /// member is marked faulty when the copy is complete.
    Replace(ReplaceArgs),
    /// Grow the space the array uses on each member (mdadm --grow --size: after its members
    /// were replaced by larger ones or their devices grew; the new room is zeroed first), or
    /// change the number of slots of a RAID 1 (--raid-devices).
    Grow(grow::GrowArgs),
}

#[derive(clap::Args, Debug)]
pub struct ReplaceArgs {
    /// The (stopped) array's members.
    #[arg(required_unless_present = "control")]
    pub members: Vec<PathBuf>,
    /// The member to replace (one of the members).
    #[arg(long, short = 'm')]
    pub member: PathBuf,
    /// The new member (an image file is created with --image-size when missing).
    #[arg(long = "with", short = 'w')]
    pub with: PathBuf,
    /// Size of the image file to create when the new member does not exist (K, M, G, T
    /// suffix; a bare number is KiB).
    #[arg(long = "image-size", alias = "size", value_name = "SIZE")]
    pub image_size: Option<String>,
    /// Accept stale members / a dirty degraded array when assembling, as mdadm --force.
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long, help = RUN_HELP)]
    pub run: bool,
    #[command(flatten)]
    pub target: ControlTarget,
    /// With --control: return only once the copy is complete and the new member holds the
    /// slot. Without --control the copy always finishes before the command returns.
    #[arg(long, requires = "control", conflicts_with = "members")]
    pub wait: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub speed: tasks::SpeedArgs,
}

#[derive(clap::Args, Debug)]
pub struct ExamineArgs {
    /// Member image files or block devices (opened read-only).
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
    /// Print the superblocks as JSON: a list of {member, superblock}; a damaged superblock's
    /// report lists its problems.
    #[arg(long)]
    pub json: bool,
}

/// Where a served array is: the control socket of `raidkit serve`, and which of its arrays.
#[derive(clap::Args, Debug)]
pub struct ControlTarget {
    /// Act on an array that `raidkit serve` is serving, through its control socket, instead
    /// of on stopped member files (the server prints the socket's path when it starts).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["members", "force"])]
    pub control: Option<PathBuf>,
    /// Export name of the served array (needed only when the server serves several).
    // `requires` alone is not enough: clap drops the requirement of an argument that
    // conflicts with one given (control conflicts with members), so say it both ways.
    #[arg(
        long = "array",
        value_name = "NAME",
        requires = "control",
        conflicts_with = "members"
    )]
    pub array: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct DetailArgs {
    /// All members of the (stopped) array.
    #[arg(required_unless_present = "control")]
    pub members: Vec<PathBuf>,
    /// Accept stale members / a dirty degraded array, as mdadm --force.
    #[arg(long, short = 'f')]
    pub force: bool,
    #[command(flatten)]
    pub target: ControlTarget,
    /// Print the status as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct ReadArgs {
    /// Members of the (stopped) array; leave out missing or dead ones to read degraded.
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
    /// Byte offset in the array (K, M, G suffixes allowed).
    #[arg(long, default_value = "0")]
    pub offset: String,
    /// Bytes to read (default: to the end of the array).
    #[arg(long)]
    pub length: Option<String>,
    /// Output file (default: stdout).
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Accept stale members / a dirty degraded array.
    #[arg(long, short = 'f')]
    pub force: bool,
    /// Print a JSON summary on stderr instead of sentences.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct WriteArgs {
    /// All members of the (stopped) array.
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
    /// Byte offset in the array (K, M, G suffixes allowed).
    #[arg(long, default_value = "0")]
    pub offset: String,
    /// File to write into the array ("-" for stdin). It is streamed in 4 MiB blocks: memory
    /// use does not grow with its size. A regular file that does not fit is refused before
    /// anything is written; a pipe's length is known only at its end, so blocks up to the
    /// first that does not fit are written, and the error says how many bytes were.
    #[arg(long, short = 'i')]
    pub input: PathBuf,
    /// Accept stale members / a dirty degraded array, as mdadm --force.
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long, help = RUN_HELP)]
    pub run: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct MemberArgs {
    /// All members of the (stopped) array.
    #[arg(required_unless_present = "control")]
    pub members: Vec<PathBuf>,
    /// The member to act on (one of the members).
    #[arg(long, short = 'm')]
    pub member: PathBuf,
    /// Accept stale members / a dirty degraded array, as mdadm --force.
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long, help = RUN_HELP)]
    pub run: bool,
    #[command(flatten)]
    pub target: ControlTarget,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct FailArgs {
    /// All members of the (stopped) array.
    #[arg(required_unless_present = "control")]
    pub members: Vec<PathBuf>,
    /// The member to mark faulty (one of the members).
    #[arg(long, short = 'm')]
    pub member: PathBuf,
    /// Fail the member even when the array cannot lose it (its data then becomes
    /// unavailable, exit code 4); also accept stale members / a dirty degraded array, as
    /// mdadm --force. Without it such a fail is refused with exit code 3, as md refuses it
    /// ("set device faulty failed ... Device or resource busy").
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long, help = RUN_HELP)]
    pub run: bool,
    #[command(flatten)]
    pub target: ControlTarget,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct AddArgs {
    /// The (stopped) array's members.
    #[arg(required_unless_present = "control")]
    pub members: Vec<PathBuf>,
    /// The new member (an image file is created with --image-size when missing).
    #[arg(long, short = 'm')]
    pub member: PathBuf,
    /// Size of the image file to create when the new member does not exist (K, M, G, T
    /// suffix; a bare number is KiB).
    #[arg(long = "image-size", alias = "size", value_name = "SIZE")]
    pub image_size: Option<String>,
    /// Accept stale members / a dirty degraded array, as mdadm --force.
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long, help = RUN_HELP)]
    pub run: bool,
    #[command(flatten)]
    pub target: ControlTarget,
    /// With --control: return only once the new member is rebuilt (or is a plain spare).
    /// Without --control the rebuild always finishes before the command returns.
    #[arg(long, requires = "control", conflicts_with = "members")]
    pub wait: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub speed: tasks::SpeedArgs,
}

pub fn run(cmd: ArrayCommand) -> Result<(), CliError> {
    match cmd {
        ArrayCommand::Demo(args) => demo::run(args),
        ArrayCommand::Create(args) => create::run(args),
        ArrayCommand::Examine(args) => examine(args),
        ArrayCommand::Detail(args) => detail(args),
        ArrayCommand::Read(args) => read(args),
        ArrayCommand::Write(args) => write(args),
        ArrayCommand::Fail(args) => fail(args),
        ArrayCommand::Remove(args) => remove(args),
        ArrayCommand::Add(args) => add(args),
        ArrayCommand::Grow(args) => grow::grow(args),
        ArrayCommand::Stop(args) => stop(args),
        ArrayCommand::Assemble(args) => assemble::run(args),
        ArrayCommand::Check(args) => tasks::run_scan_command(TaskKind::Check, args),
        ArrayCommand::Repair(args) => tasks::run_scan_command(TaskKind::Repair, args),
        ArrayCommand::Rebuild(args) => tasks::run_task_command(None, args),
        ArrayCommand::Patrol(args) => tasks::run_scan_command(TaskKind::Patrol, args),
        ArrayCommand::Replace(args) => replace(args),
    }
}

fn examine(args: ExamineArgs) -> Result<(), CliError> {
    let disks = open_members(&args.members, true)?;
    let mut reports = Vec::new();
    let mut errors = Vec::new();
    for d in &disks {
        match util::probe_superblock(d.as_ref())? {
            util::Probe::Valid(found) => reports.push((
                d.name().to_string(),
                ExamineReport::from_superblock(&found.sb, Some(found.device_sectors), None),
            )),
            util::Probe::Damaged {
                examined,
                device_sectors,
                ..
            } => {
                let report = ExamineReport::from_examined(&examined, Some(device_sectors), None);
                errors.push(CliError::new(
                    ExitCode::Refused,
                    format!(
                        "{}: md superblock is damaged ({}); md will not assemble this member",
                        d.name(),
                        report.problems.join("; ")
                    ),
                ));
                reports.push((d.name().to_string(), report));
            }
            util::Probe::Absent(e) => errors.push(engine_error(e)),
        }
    }
    if args.json {
        let map: Vec<serde_json::Value> = reports
            .iter()
            .map(|(n, r)| serde_json::json!({ "member": n, "superblock": r }))
            .collect();
        print_json(&map)?;
    } else {
        for (n, r) in &reports {
            println!("{n}:");
            print!("{}", r.to_text());
            println!();
        }
    }
    // Each error is printed once, by main: several are joined into one.
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(CliError::new(
            errors[0].code,
            errors
                .iter()
                .map(|e| e.message.as_str())
                .collect::<Vec<_>>()
                .join("\nraidkit: "),
        )),
    }
}

fn detail(args: DetailArgs) -> Result<(), CliError> {
    if let Some(control) = &args.target.control {
        return control::detail(control, args.target.array.as_deref(), args.json);
    }
    // A reshape in progress: what the superblocks record (the array runs once it is done).
    let opts = raidkit_engine::AssembleOptions {
        force: args.force,
        read_only: true,
        ..Default::default()
    };
    let members = open_members(&args.members, true)?;
    // A stack's spans are reshaped by no one: there is no reshape to look for.
    let stacked = stack_level_of(&members).is_some();
    if let Some(r) = (!stacked)
        .then(|| Array::reshape_status(&members, &opts))
        .transpose()
        .map_err(engine_error)?
        .flatten()
    {
        drop(members);
        if args.json {
            return print_json(&serde_json::json!({ "reshape": r }));
        }
        print_reshape(&r);
        return Ok(());
    }
    drop(members);
    let (array, report) = assemble_volume(&args.members, true, Insist::force(args.force))?;
    // What each member's drive says of itself (SMART), with the default thresholds.
    array.poll_health(&raidkit_disk::Thresholds::default());
    let status = array.status();
    if args.json {
        return print_json(&serde_json::json!({ "status": status, "assembly": report }));
    }
    report_notes(&report);
    let view = StatusView::of(&status)?;
    let state = match (report.was_dirty, status.degraded) {
        (false, false) => "clean",
        (false, true) => "clean, degraded",
        (true, false) => "active (not stopped cleanly)",
        (true, true) => "active, degraded (not stopped cleanly)",
    };
    print_detail(&view, state);
    Ok(())
}

/// `detail` of an array with a reshape in progress: old and new geometry, the cursor.
fn print_reshape(r: &raidkit_engine::ReshapeStatus) {
    let mib = |b: u64| b as f64 / 1048576.0;
    let done = if r.backwards {
        r.end_sectors.saturating_sub(r.position_sectors)
    } else {
        r.position_sectors
    };
    let percent = done as f64 * 100.0 / r.end_sectors.max(1) as f64;
    println!("     Raid Level : raid{}", r.level);
    println!(
        "   Raid Devices : {} (reshaping from {})",
        r.new_raid_devices, r.old_raid_devices
    );
    // mdadm --detail's lines for a reshape: the new values next to the old.
    if r.new_level != r.level {
        println!("      New Level : raid{}", r.new_level);
    }
    let name = |level, layout| layout_name(level, layout).unwrap_or_else(|| layout.to_string());
    if r.level != 4 {
        println!("         Layout : {}", name(r.level, r.layout));
    }
    if (r.new_level, r.new_layout) != (r.level, r.layout) && r.new_level != 4 {
        println!("     New Layout : {}", name(r.new_level, r.new_layout));
    }
    println!("     Chunk Size : {}K", r.chunk_sectors / 2);
    if r.new_chunk_sectors != r.chunk_sectors {
        println!("  New Chunksize : {}K", r.new_chunk_sectors / 2);
    }
    println!(
        "     Array Size : {:.2} MiB now, {:.2} MiB once reshaped",
        mib(r.old_array_bytes),
        mib(r.new_array_bytes)
    );
    println!(
        "  Reshape pos'n : {} sectors of {} ({percent:.1} % reshaped{})",
        r.position_sectors,
        r.end_sectors,
        if r.backwards {
            ", from the end down"
        } else {
            ""
        }
    );
    println!(
        "    Data Offset : {} sectors (old layout), {} sectors (new layout)",
        r.old_data_offset, r.new_data_offset
    );
    println!("          State : reshaping (stopped)");
    match &r.refusal {
        None => println!(
            "raidkit: `raidkit grow --continue` with the same members goes on (so does md)"
        ),
        Some(why) => println!("raidkit: raidkit cannot go on with it: {why}"),
    }
}

fn read(args: ReadArgs) -> Result<(), CliError> {
    let offset = parse_size_bytes(&args.offset, 1)?;
    let length = match &args.length {
        Some(l) => Some(parse_size_bytes(l, 1)?),
        None => None,
    };
    let (array, report) = assemble_volume(&args.members, true, Insist::force(args.force))?;
    let status = array.status();
    if !args.json {
        report_notes(&report);
        if let Some(stack) = &status.stack {
            for (i, span) in stack.spans.iter().enumerate() {
                if span.degraded {
                    eprintln!(
                        "raidkit: reading degraded: span {i} of the RAID {} stack (RAID {}) has slots {:?} missing; their data is rebuilt from the others",
                        stack.level, span.level, span.missing_slots
                    );
                }
            }
        } else if status.degraded {
            eprintln!(
                "raidkit: reading degraded: RAID {} with slots {:?} missing; their data is rebuilt from the others",
                status.level, status.missing_slots
            );
        }
    }
    let size = array.size_bytes();
    if offset > size {
        return Err(CliError::usage(format!(
            "--offset {offset} is past the end of the array ({size} bytes)"
        )));
    }
    let length = length.unwrap_or(size - offset);
    if offset + length > size {
        return Err(CliError::usage(format!(
            "--offset {offset} + --length {length} is past the end of the array ({size} bytes)"
        )));
    }
    let mut out: Box<dyn Write> = match &args.output {
        Some(p) => Box::new(
            std::fs::File::create(p)
                .map_err(|e| CliError::failure(format!("{}: {e}", p.display())))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    let step = 4usize << 20;
    let mut buf = vec![0u8; step];
    let mut done = 0u64;
    while done < length {
        let n = ((length - done) as usize).min(step);
        array
            .read_at(&mut buf[..n], offset + done)
            .map_err(engine_error)?;
        out.write_all(&buf[..n])?;
        done += n as u64;
    }
    out.flush()?;
    if args.json {
        eprintln!(
            "{}",
            serde_json::json!({ "bytes": length, "offset": offset, "degraded": status.degraded, "missing_slots": status.missing_slots, "assembly": report })
        );
    }
    Ok(())
}

/// Bytes `write` moves per request (rounded to whole stripes on parity levels): the only
/// buffer it holds, whatever the input's size.
const WRITE_STEP_BYTES: usize = 4 << 20;

/// Reads until `buf` is full or the input ends; returns how many bytes were read.
fn read_full(input: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn write(args: WriteArgs) -> Result<(), CliError> {
    let offset = parse_size_bytes(&args.offset, 1)?;
    let input_name = args.input.display().to_string();
    let input_err = |e: std::io::Error| CliError::failure(format!("{input_name}: {e}"));
    // A regular file's length is known up front; a pipe's only at its end.
    let (mut input, known_len): (Box<dyn Read>, Option<u64>) = if args.input.as_os_str() == "-" {
        (Box::new(std::io::stdin().lock()), None)
    } else {
        let file = std::fs::File::open(&args.input).map_err(input_err)?;
        let meta = file.metadata().map_err(input_err)?;
        let len = meta.file_type().is_file().then_some(meta.len());
        (Box::new(file), len)
    };
    let (array, report) = assemble_volume_writable(&args.members, args.force, args.run)?;
    if !args.json {
        report_notes(&report);
    }
    let size = array.size_bytes();
    let fits = |len: u64| offset.checked_add(len).is_some_and(|end| end <= size);
    if let Some(len) = known_len.filter(|&l| !fits(l)) {
        return Err(CliError::usage(format!(
            "{len} bytes at offset {offset} do not fit in the array ({size} bytes); nothing was written"
        )));
    }
    if !fits(0) {
        return Err(CliError::usage(format!(
            "--offset {offset} is past the end of the array ({size} bytes)"
        )));
    }
    // On parity levels every request but the first and last covers whole stripes, so it is
    // written without reading anything back (and, with a partial parity log, logs no partial
    // parity).
    let unit = array.full_stripe_bytes().unwrap_or(1);
    let step = ((WRITE_STEP_BYTES as u64 / unit).max(1) * unit) as usize;
    let mut buf = vec![0u8; step];
    let mut done = 0u64;
    loop {
        let want = step - ((offset + done) % unit) as usize;
        let n = read_full(input.as_mut(), &mut buf[..want]).map_err(input_err)?;
        if n == 0 {
            break;
        }
        if !fits(done + n as u64) {
            array.flush().map_err(engine_error)?;
            array.stop().map_err(engine_error)?;
            return Err(CliError::usage(format!(
                "{input_name} is longer than the array has room for from offset {offset} ({} bytes): the first {done} bytes were written, the rest refused",
                size - offset
            )));
        }
        array
            .write_at(&buf[..n], offset + done, false)
            .map_err(engine_error)?;
        done += n as u64;
    }
    array.flush().map_err(engine_error)?;
    array.stop().map_err(engine_error)?;
    if args.json {
        return print_json(
            &serde_json::json!({ "bytes": done, "offset": offset, "status": array.status() }),
        );
    }
    println!("raidkit: wrote {done} bytes at offset {offset}");
    Ok(())
}

fn member_index(args_members: &[PathBuf], member: &PathBuf) -> Result<usize, CliError> {
    let canon = |p: &PathBuf| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
    let want = canon(member);
    args_members
        .iter()
        .position(|p| canon(p) == want)
        .ok_or_else(|| {
            CliError::usage(format!(
                "--member {} is not one of the members given",
                member.display()
            ))
        })
}

/// Why failing member `index` would leave the array without some of its data, if it would:
/// the slots already missing plus the member's own slot, against the level's redundancy.
fn fail_would_lose_data(array: &Array, index: usize) -> Option<String> {
    let status = array.status();
    let geo = array.geometry();
    let member = status.members.iter().find(|m| m.index == index)?;
    // Only an in-sync member carries data the array still needs from it: a spare, a member
    // being rebuilt or a replacement being filled adds nothing to what is missing.
    let slot = member.slot.filter(|_| member.role == "active")?;
    let mut failed = vec![false; geo.raid_disks];
    for &s in &status.missing_slots {
        failed[s] = true;
    }
    failed[slot] = true;
    if geo.survives(&failed) {
        return None;
    }
    let missing = if status.missing_slots.is_empty() {
        "no slot missing".to_string()
    } else {
        format!("slots {:?} missing already", status.missing_slots)
    };
    Some(format!(
        "refusing to fail {}: RAID {} with {missing} cannot also lose slot {slot}; its data would be unavailable (md refuses this too: \"set device faulty failed ... Device or resource busy\"). Nothing was written; give --force to fail it anyway",
        member.name, status.level
    ))
}

fn fail(args: FailArgs) -> Result<(), CliError> {
    if let Some(control) = &args.target.control {
        let array = args.target.array.as_deref();
        return control::fail(control, array, &args.member, args.json);
    }
    let index = member_index(&args.members, &args.member)?;
    if !args.force {
        // Decide on a read-only assembly: a refusal leaves every member as it was.
        let (array, _) = assemble(&args.members, true, Insist::default())?;
        if let Some(why) = fail_would_lose_data(&array, index) {
            return Err(CliError::new(ExitCode::Refused, why));
        }
    }
    let (array, report) = assemble_writable(&args.members, args.force, args.run)?;
    report_notes(&report);
    array.fail_member(index).map_err(engine_error)?;
    // A spare attached to the array takes the slot at once; rebuild it now (md would start
    // recovery by itself).
    let reports = if array.pending_tasks().contains(&TaskKind::Rebuild) {
        tasks::run_with_progress(&array, None, &tasks::SpeedArgs::default())?
    } else {
        Vec::new()
    };
    let result = array.stop();
    let status = array.status();
    if args.json {
        print_json(&serde_json::json!({ "status": status, "tasks": reports }))?;
    } else {
        for r in &reports {
            println!("raidkit: {}", tasks::describe(r));
        }
        println!(
            "raidkit: {} marked faulty; array is {}",
            args.member.display(),
            if status.failed {
                "FAILED"
            } else if status.degraded {
                "degraded"
            } else {
                "whole"
            }
        );
    }
    result.map_err(engine_error)?;
    if status.failed {
        return Err(CliError::new(
            ExitCode::Unavailable,
            "the array has lost more members than it can",
        ));
    }
    Ok(())
}

fn remove(args: MemberArgs) -> Result<(), CliError> {
    if let Some(control) = &args.target.control {
        let array = args.target.array.as_deref();
        return control::remove(control, array, &args.member, args.json);
    }
    let index = member_index(&args.members, &args.member)?;
    let (array, report) = assemble_writable(&args.members, args.force, args.run)?;
    report_notes(&report);
    array.remove_member(index).map_err(engine_error)?;
    array.stop().map_err(engine_error)?;
    if args.json {
        return print_json(&array.status());
    }
    println!("raidkit: {} removed", args.member.display());
    Ok(())
}

fn add(args: AddArgs) -> Result<(), CliError> {
    let size = match &args.image_size {
        Some(s) => Some(parse_size_bytes(s, 1024)?),
        None => None,
    };
    if let Some(control) = &args.target.control {
        let array = args.target.array.as_deref();
        return control::add(
            control,
            array,
            &args.member,
            size,
            args.force,
            args.wait,
            args.json,
        );
    }
    if args.members.iter().any(|m| m == &args.member) {
        return Err(CliError::usage(format!(
            "{} is already a member",
            args.member.display()
        )));
    }
    let (disk, mut created) = open_new_member(&args.member, size)?;
    let (array, report) = assemble_volume_writable(&args.members, args.force, args.run)?;
    report_notes(&report);
    // A stack's new member goes to the span that misses one (a stack takes no spares).
    let target: &Array = if array.spans().is_empty() {
        &array
    } else {
        match array
            .spans()
            .iter()
            .position(|s| !s.status().missing_slots.is_empty())
        {
            Some(i) => {
                if !args.json {
                    println!(
                        "raidkit: span {i} misses a member: {} goes there",
                        args.member.display()
                    );
                }
                &array.spans()[i]
            }
            None => {
                array.stop().map_err(engine_error)?;
                return Err(CliError::new(
                    ExitCode::Refused,
                    format!(
                        "no span of the RAID {} stack misses a member, and a stack takes no spares; nothing was written",
                        array.stack_level().unwrap_or_default()
                    ),
                ));
            }
        }
    };
    let re_added =
        raidkit_cli::common::add_or_re_add(target, disk, &args.member, args.force, || {
            open_or_create(&args.member, size)
        })?;
    created.keep = true;
    let rebuilding = target.pending_tasks().contains(&TaskKind::Rebuild);
    if !args.json {
        println!(
            "raidkit: {} {}{}",
            args.member.display(),
            match re_added {
                Some(slot) => format!("re-added into slot {slot}"),
                None => "added".to_string(),
            },
            match (rebuilding, re_added.is_some()) {
                (true, true) => "; what it missed is rebuilt now (Ctrl-C stops; `raidkit rebuild` resumes)",
                (true, false) => "; it takes a missing slot and is rebuilt now (Ctrl-C stops; `raidkit rebuild` resumes)",
                _ => " as a spare",
            }
        );
    }
    let reports = if rebuilding {
        tasks::run_with_progress(target, None, &args.speed)?
    } else {
        Vec::new()
    };
    tasks::conclude(&array, &reports, args.json, false)
}

fn replace(args: ReplaceArgs) -> Result<(), CliError> {
    let size = match &args.image_size {
        Some(s) => Some(parse_size_bytes(s, 1024)?),
        None => None,
    };
    if let Some(control) = &args.target.control {
        let array = args.target.array.as_deref();
        return control::replace(
            control,
            array,
            &args.member,
            &args.with,
            size,
            args.wait,
            args.json,
        );
    }
    let index = member_index(&args.members, &args.member)?;
    if args.members.iter().any(|m| m == &args.with) {
        return Err(CliError::usage(format!(
            "{} is already a member",
            args.with.display()
        )));
    }
    let (disk, mut created) = open_new_member(&args.with, size)?;
    let (array, report) = assemble_writable(&args.members, args.force, args.run)?;
    report_notes(&report);
    array
        .replace_member(index, disk, random_uuid()?)
        .map_err(engine_error)?;
    created.keep = true;
    if !args.json {
        println!(
            "raidkit: copying {} onto {} while the array stays whole (Ctrl-C stops; `raidkit rebuild` with both resumes)",
            args.member.display(),
            args.with.display()
        );
    }
    let reports = tasks::run_with_progress(&array, None, &args.speed)?;
    tasks::conclude(&array, &reports, args.json, false)
}

fn stop(args: MembersArgs) -> Result<(), CliError> {
    let (array, report) = assemble_volume_writable(&args.members, args.force, args.run)?;
    report_notes(&report);
    array.stop().map_err(engine_error)?;
    if args.json {
        return print_json(&array.status());
    }
    println!(
        "raidkit: array stopped clean (events {})",
        array.status().events
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Parses like the binary does (the array commands are flattened into the top level).
    #[derive(clap::Parser, Debug)]
    struct Top {
        #[command(subcommand)]
        cmd: ArrayCommand,
    }

    fn run_args(args: &[&str]) -> Result<(), CliError> {
        let mut full = vec!["raidkit"];
        full.extend_from_slice(args);
        let top = Top::try_parse_from(full).map_err(|e| CliError::usage(e.to_string()))?;
        run(top.cmd)
    }

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn temp_dir(tag: &str) -> Dir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let p =
            std::env::temp_dir().join(format!("raidkit-cli-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    fn s(p: &Path) -> &str {
        p.to_str().unwrap()
    }

    use std::path::Path;

    #[test]
    fn control_flags_exclude_member_files() {
        let parse = |args: &[&str]| {
            let mut full = vec!["raidkit"];
            full.extend_from_slice(args);
            Top::try_parse_from(full).map(|t| t.cmd)
        };
        match parse(&["fail", "--control", "x.ctl", "--member", "m.img"]).unwrap() {
            ArrayCommand::Fail(a) => {
                assert_eq!(a.target.control, Some(PathBuf::from("x.ctl")));
                assert!(a.members.is_empty());
            }
            other => panic!("{other:?}"),
        }
        match parse(&[
            "add",
            "--control",
            "x.ctl",
            "--array",
            "md1",
            "-m",
            "n.img",
            "--wait",
        ])
        .unwrap()
        {
            ArrayCommand::Add(a) => assert!(a.wait && a.target.array.as_deref() == Some("md1")),
            other => panic!("{other:?}"),
        }
        // Member files and a control socket at once, --array or --wait without --control,
        // --force with --control, and no target at all are refused.
        assert!(parse(&["fail", "--control", "x.ctl", "-m", "a", "a", "b"]).is_err());
        assert!(parse(&["detail", "--array", "md0", "a.img"]).is_err());
        assert!(parse(&["add", "--wait", "-m", "n.img", "a.img"]).is_err());
        assert!(parse(&["detail", "--control", "x.ctl", "--force"]).is_err());
        assert!(parse(&["detail"]).is_err());
    }

    #[test]
    fn create_write_read_degraded_and_refusals() {
        let dir = temp_dir("cli");
        let m: Vec<PathBuf> = (0..5).map(|i| dir.0.join(format!("m{i}.img"))).collect();
        let ms: Vec<&str> = m.iter().map(|p| s(p)).collect();
        let mut args = vec![
            "create",
            "--level",
            "6",
            "--image-size",
            "8M",
            "--chunk",
            "64K",
        ];
        args.extend(&ms);
        run_args(&args).unwrap();

        let input = dir.0.join("in.bin");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&input, &data).unwrap();
        let mut args = vec!["write", "--offset", "4096", "--input", s(&input)];
        args.extend(&ms);
        run_args(&args).unwrap();

        // read with two members missing: degraded, read-only, members unchanged
        let before: Vec<Vec<u8>> = m.iter().map(|p| std::fs::read(p).unwrap()).collect();
        let out = dir.0.join("out.bin");
        let len = data.len().to_string();
        let mut args = vec![
            "read",
            "--offset",
            "4096",
            "--length",
            &len,
            "--output",
            s(&out),
        ];
        args.extend(&ms[1..4]);
        run_args(&args).unwrap();
        assert!(
            std::fs::read(&out).unwrap() == data,
            "degraded read returns what was written"
        );
        let after: Vec<Vec<u8>> = m.iter().map(|p| std::fs::read(p).unwrap()).collect();
        assert!(before == after, "read must not change any member");

        // one more missing: unavailable (exit 4)
        let mut args = vec!["read", "--output", s(&out)];
        args.extend(&ms[2..4]);
        assert_eq!(run_args(&args).unwrap_err().code, ExitCode::Unavailable);

        // a member twice: refused (exit 3)
        let mut args = vec!["detail"];
        args.extend(&ms);
        args.push(ms[0]);
        assert_eq!(run_args(&args).unwrap_err().code, ExitCode::Refused);

        // fail a member: the others record it; detail still works and reads are degraded
        let mut args = vec!["fail", "--member", ms[2]];
        args.extend(&ms);
        run_args(&args).unwrap();
        let (array, report) = assemble(&m, true, Insist::default()).unwrap();
        assert_eq!(array.status().missing_slots, vec![2]);
        assert!(report.excluded.iter().any(|(n, _)| n.ends_with("m2.img")));
        drop(array);

        // add a new member: rebuilt into the failed slot
        let new = dir.0.join("new.img");
        let mut args = vec!["add", "--member", s(&new), "--image-size", "8M"];
        args.extend(&ms);
        run_args(&args).unwrap();
        let mut whole: Vec<PathBuf> = m
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 2)
            .map(|(_, p)| p.clone())
            .collect();
        whole.push(new.clone());
        let (array, _) = assemble(&whole, true, Insist::default()).unwrap();
        assert!(!array.status().degraded);
        let mut back = vec![0u8; data.len()];
        array.read_at(&mut back, 4096).unwrap();
        assert!(back == data);

        // examine works on every member and refuses a non-member (exit 3)
        let mut args = vec!["examine", "--json"];
        args.extend(&ms);
        run_args(&args).unwrap();
        assert_eq!(
            run_args(&["examine", s(&input)]).unwrap_err().code,
            ExitCode::Refused
        );

        // a wrong flag value is a usage error (exit 2)
        let mut args = vec!["create", "--level", "7", "--size", "8M"];
        args.extend(&ms);
        assert_eq!(run_args(&args).unwrap_err().code, ExitCode::Usage);
    }
}
