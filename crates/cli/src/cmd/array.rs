//! Array subcommands in mdadm's vocabulary: create, examine, detail, read, write, fail, remove,
//! add, stop, and the demo.
//!
//! Parse, then act: flags become plain values (levels, layout numbers, sizes in bytes or
//! sectors) before any member is opened. Commands that only look (examine, detail, read) open
//! every member read-only, so they never change a member, whatever the array's state; given only
//! some members, `read` runs degraded where the level allows and says so on stderr.

mod demo;
mod util;

use crate::{CliError, ExitCode};
use raidkit_disk::{DirectIo, Disk, FileDisk, OpenOptions};
use raidkit_engine::{
    Array, AssembleOptions, AssembleReport, CreateOptions, EngineConfig, EngineError,
};
use raidkit_metadata::{ExamineReport, SuperblockVersion};
use std::io::{Read, Write};
use std::path::PathBuf;
pub use util::{parse_layout, parse_level, parse_size_bytes};

#[derive(clap::Subcommand, Debug)]
pub enum ArrayCommand {
    /// Create an array of image files, write and verify data, fail members, read degraded.
    Demo(demo::DemoArgs),
    /// Create a new array on members (image files are created with --size when missing).
    Create(CreateArgs),
    /// Print the md superblock of each member, like mdadm --examine.
    Examine(ExamineArgs),
    /// Assemble the members read-only and print the array's state, like mdadm --detail.
    Detail(MembersArgs),
    /// Copy array contents to a file or stdout (read-only; runs degraded with missing members).
    Read(ReadArgs),
    /// Write a file into the array at an offset.
    Write(WriteArgs),
    /// Mark a member faulty in the superblocks of the others.
    Fail(MemberArgs),
    /// Remove a faulty or spare member from the array's superblocks.
    Remove(MemberArgs),
    /// Add a member as a spare; if a slot is missing it is rebuilt onto the new member.
    Add(AddArgs),
    /// Assemble and stop cleanly (marks the superblocks clean).
    Stop(MembersArgs),
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// Member image files or block devices.
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
    /// RAID level: 0, 1, 4, 5, 6, 10.
    #[arg(long, short = 'l')]
    pub level: String,
    /// Number of active members (the rest of the given members become spares).
    #[arg(long = "raid-devices", short = 'n')]
    pub raid_devices: Option<usize>,
    /// Number of spare members (taken from the end of the member list).
    #[arg(long = "spare-devices", short = 'x', default_value_t = 0)]
    pub spare_devices: usize,
    /// Chunk size (K, M, G suffix; a bare number is KiB, as in mdadm).
    #[arg(long, short = 'c', default_value = "512K")]
    pub chunk: String,
    /// Layout, as mdadm names it (left-symmetric, la, n2, f2, o2, ...) or md's number.
    #[arg(long, short = 'p')]
    pub layout: Option<String>,
    /// Superblock version: 1.0, 1.1 or 1.2.
    #[arg(long, short = 'e', default_value = "1.2")]
    pub metadata: String,
    /// Size of image files to create when a member does not exist (K, M, G, T suffix; a bare
    /// number is KiB).
    #[arg(long, short = 'z')]
    pub size: Option<String>,
    /// Array name (stored as "hostname:name", as mdadm does).
    #[arg(long, short = 'N', default_value = "raidkit")]
    pub name: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct ExamineArgs {
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct MembersArgs {
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
    /// Accept stale members / a dirty degraded array, as mdadm --force.
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct ReadArgs {
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
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
    /// Byte offset in the array (K, M, G suffixes allowed).
    #[arg(long, default_value = "0")]
    pub offset: String,
    /// File to write into the array ("-" for stdin).
    #[arg(long, short = 'i')]
    pub input: PathBuf,
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct MemberArgs {
    /// All members of the array.
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
    /// The member to act on (one of the members).
    #[arg(long, short = 'm')]
    pub member: PathBuf,
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct AddArgs {
    /// The array's members.
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
    /// The new member (an image file is created with --size when missing).
    #[arg(long, short = 'm')]
    pub member: PathBuf,
    /// Size of the image file to create when the new member does not exist.
    #[arg(long, short = 'z')]
    pub size: Option<String>,
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: ArrayCommand) -> Result<(), CliError> {
    match cmd {
        ArrayCommand::Demo(args) => demo::run(args),
        ArrayCommand::Create(args) => create(args),
        ArrayCommand::Examine(args) => examine(args),
        ArrayCommand::Detail(args) => detail(args),
        ArrayCommand::Read(args) => read(args),
        ArrayCommand::Write(args) => write(args),
        ArrayCommand::Fail(args) => fail(args),
        ArrayCommand::Remove(args) => remove(args),
        ArrayCommand::Add(args) => add(args),
        ArrayCommand::Stop(args) => stop(args),
    }
}

/// Maps an engine error to the documented exit codes.
pub fn engine_error(err: EngineError) -> CliError {
    let code = match &err {
        EngineError::NoSuperblock { .. }
        | EngineError::Foreign { .. }
        | EngineError::Mismatched { .. }
        | EngineError::Duplicate { .. }
        | EngineError::DuplicateRole { .. }
        | EngineError::Stale { .. }
        | EngineError::WrongLevel { .. }
        | EngineError::SizeMismatch { .. }
        | EngineError::DirtyDegraded { .. }
        | EngineError::Metadata(_) => ExitCode::Refused,
        EngineError::Unavailable { .. } | EngineError::ArrayFailed { .. } => ExitCode::Unavailable,
        EngineError::Invalid(_) => ExitCode::Usage,
        EngineError::Disk(_) | EngineError::ReadOnly => ExitCode::Failure,
    };
    CliError::new(code, err.to_string())
}

fn disk_error(err: raidkit_disk::DiskError) -> CliError {
    CliError::failure(err.to_string())
}

/// Opens members; read-only ones never get a write.
pub fn open_members(paths: &[PathBuf], read_only: bool) -> Result<Vec<Box<dyn Disk>>, CliError> {
    let mut seen = Vec::new();
    let mut out: Vec<Box<dyn Disk>> = Vec::new();
    for p in paths {
        let canon = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        if let Some(prev) = seen.iter().find(|(c, _): &&(PathBuf, PathBuf)| *c == canon) {
            return Err(CliError::new(
                ExitCode::Refused,
                format!(
                    "{}: listed twice (same file as {}); each member may be given once",
                    p.display(),
                    prev.1.display()
                ),
            ));
        }
        seen.push((canon, p.clone()));
        let d = FileDisk::open(
            p,
            OpenOptions {
                read_only,
                direct: DirectIo::Auto,
            },
        )
        .map_err(disk_error)?;
        out.push(Box::new(d));
    }
    Ok(out)
}

fn assemble(
    paths: &[PathBuf],
    read_only: bool,
    force: bool,
) -> Result<(Array, AssembleReport), CliError> {
    let disks = open_members(paths, read_only)?;
    Array::assemble(
        disks,
        AssembleOptions {
            force,
            read_only,
            ..Default::default()
        },
    )
    .map_err(engine_error)
}

fn report_notes(report: &AssembleReport) {
    for (m, why) in &report.excluded {
        eprintln!("raidkit: {m}: not used: {why}");
    }
    for n in &report.notes {
        eprintln!("raidkit: {n}");
    }
}

fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| CliError::failure(e.to_string()))?;
    println!("{text}");
    Ok(())
}

/// 16 random bytes from the kernel.
pub fn random_uuid() -> Result<[u8; 16], CliError> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| CliError::failure(format!("/dev/urandom: {e}")))?;
    Ok(b)
}

pub fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Plain values for creating an array.
pub struct CreatePlan {
    pub level: i32,
    pub layout: Option<u32>,
    pub chunk_sectors: u32,
    pub raid_devices: usize,
    pub metadata: SuperblockVersion,
    pub image_bytes: Option<u64>,
    pub name: String,
}

fn parse_metadata(text: &str) -> Result<SuperblockVersion, CliError> {
    match text {
        "1.0" => Ok(SuperblockVersion::V1_0),
        "1.1" => Ok(SuperblockVersion::V1_1),
        "1.2" | "1" | "default" => Ok(SuperblockVersion::V1_2),
        _ => Err(CliError::usage(format!(
            "metadata '{text}' is not supported (1.0, 1.1, 1.2)"
        ))),
    }
}

fn plan_create(args: &CreateArgs) -> Result<CreatePlan, CliError> {
    let level = parse_level(&args.level)?;
    let layout = match &args.layout {
        Some(l) => Some(parse_layout(level, l)?),
        None => None,
    };
    let chunk_sectors = super::layout::parse_chunk_sectors(&args.chunk)?;
    let n = args.members.len();
    let raid_devices = args
        .raid_devices
        .unwrap_or(n.saturating_sub(args.spare_devices));
    if raid_devices + args.spare_devices != n {
        return Err(CliError::usage(format!(
            "{n} members given but --raid-devices {raid_devices} + --spare-devices {} = {}",
            args.spare_devices,
            raid_devices + args.spare_devices
        )));
    }
    let image_bytes = match &args.size {
        Some(s) => Some(parse_size_bytes(s, 1024)?),
        None => None,
    };
    let host = hostname();
    let name = if host.is_empty() {
        args.name.clone()
    } else {
        format!("{host}:{}", args.name)
    };
    Ok(CreatePlan {
        level,
        layout,
        chunk_sectors,
        raid_devices,
        metadata: parse_metadata(&args.metadata)?,
        image_bytes,
        name,
    })
}

/// Opens or creates image members for create; returns the disks and whether all were new.
pub fn open_for_create(
    paths: &[PathBuf],
    image_bytes: Option<u64>,
) -> Result<(Vec<Box<dyn Disk>>, bool), CliError> {
    let mut all_new = true;
    let mut disks: Vec<Box<dyn Disk>> = Vec::new();
    for p in paths {
        if p.exists() {
            all_new = false;
            disks.push(Box::new(
                FileDisk::open(p, OpenOptions::default()).map_err(disk_error)?,
            ));
        } else {
            let Some(size) = image_bytes else {
                return Err(CliError::usage(format!(
                    "{}: does not exist; give --size to create image files",
                    p.display()
                )));
            };
            disks.push(Box::new(FileDisk::create(p, size).map_err(disk_error)?));
        }
    }
    Ok((disks, all_new))
}

pub fn create_array(
    paths: &[PathBuf],
    plan: &CreatePlan,
    config: EngineConfig,
) -> Result<Array, CliError> {
    let (disks, all_new) = open_for_create(paths, plan.image_bytes)?;
    let mut device_uuids = Vec::new();
    for _ in 0..disks.len() {
        device_uuids.push(random_uuid()?);
    }
    Array::create(
        disks,
        CreateOptions {
            level: plan.level,
            layout: plan.layout,
            chunk_sectors: plan.chunk_sectors,
            raid_devices: plan.raid_devices,
            metadata: plan.metadata,
            size_sectors: None,
            name: plan.name.clone(),
            set_uuid: random_uuid()?,
            device_uuids,
            ctime_seconds: now_seconds(),
            // Freshly created sparse image files read as zeroes: P and Q of zero data are zero.
            members_zeroed: all_new,
            config,
        },
    )
    .map_err(engine_error)
}

fn create(args: CreateArgs) -> Result<(), CliError> {
    let plan = plan_create(&args)?;
    let array = create_array(&args.members, &plan, EngineConfig::default())?;
    array.stop().map_err(engine_error)?;
    let status = array.status();
    if args.json {
        return print_json(&status);
    }
    println!(
        "raidkit: created RAID {} ({} data bytes) over {} members, UUID {}",
        status.level,
        status.array_bytes,
        status.members.len(),
        status.uuid
    );
    Ok(())
}

fn examine(args: ExamineArgs) -> Result<(), CliError> {
    let disks = open_members(&args.members, true)?;
    let mut reports = Vec::new();
    let mut first_err = None;
    for d in &disks {
        match raidkit_engine::read_superblock(d.as_ref()) {
            Ok(found) => reports.push((
                d.name().to_string(),
                ExamineReport::from_superblock(&found.sb, Some(found.device_sectors), None),
            )),
            Err(e) => {
                eprintln!("raidkit: {e}");
                first_err.get_or_insert(engine_error(e));
            }
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
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn detail(args: MembersArgs) -> Result<(), CliError> {
    let (array, report) = assemble(&args.members, true, args.force)?;
    let status = array.status();
    if args.json {
        return print_json(&serde_json::json!({ "status": status, "assembly": report }));
    }
    report_notes(&report);
    println!("     Raid Level : raid{}", status.level);
    println!(
        "     Array Size : {} bytes ({:.2} MiB)",
        status.array_bytes,
        status.array_bytes as f64 / 1048576.0
    );
    println!("   Raid Devices : {}", status.raid_disks);
    let layout_name = match status.level {
        5 => raidkit_metadata::examine::raid5_layout_name(status.layout).map(str::to_string),
        6 => raidkit_metadata::examine::raid6_layout_name(status.layout).map(str::to_string),
        10 => Some(raidkit_metadata::examine::raid10_layout_name(status.layout)),
        _ => None,
    };
    if let Some(name) = layout_name {
        println!("         Layout : {name}");
    }
    println!("     Chunk Size : {}K", status.chunk_sectors / 2);
    println!("           UUID : {}", status.uuid);
    println!("           Name : {}", status.name);
    println!("         Events : {}", status.events);
    let state = match (report.was_dirty, status.degraded) {
        (false, false) => "clean",
        (false, true) => "clean, degraded",
        (true, false) => "active (not stopped cleanly)",
        (true, true) => "active, degraded (not stopped cleanly)",
    };
    println!("          State : {state}");
    println!();
    println!("    Number   RaidDevice State");
    for m in &status.members {
        let slot = m.slot.map(|s| s.to_string()).unwrap_or_else(|| "-".into());
        println!("    {:>6}   {:>10} {:<8} {}", m.index, slot, m.role, m.name);
    }
    for s in &status.missing_slots {
        if !status.members.iter().any(|m| m.slot == Some(*s)) {
            println!("    {:>6}   {:>10} {:<8}", "-", s, "removed");
        }
    }
    Ok(())
}

fn read(args: ReadArgs) -> Result<(), CliError> {
    let offset = parse_size_bytes(&args.offset, 1)?;
    let length = match &args.length {
        Some(l) => Some(parse_size_bytes(l, 1)?),
        None => None,
    };
    let (array, report) = assemble(&args.members, true, args.force)?;
    let status = array.status();
    if !args.json {
        report_notes(&report);
        if status.degraded {
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

fn write(args: WriteArgs) -> Result<(), CliError> {
    let offset = parse_size_bytes(&args.offset, 1)?;
    let data = if args.input.as_os_str() == "-" {
        let mut v = Vec::new();
        std::io::stdin().read_to_end(&mut v)?;
        v
    } else {
        std::fs::read(&args.input)
            .map_err(|e| CliError::failure(format!("{}: {e}", args.input.display())))?
    };
    let (array, report) = assemble(&args.members, false, args.force)?;
    if !args.json {
        report_notes(&report);
    }
    if offset + data.len() as u64 > array.size_bytes() {
        return Err(CliError::usage(format!(
            "{} bytes at offset {offset} do not fit in the array ({} bytes)",
            data.len(),
            array.size_bytes()
        )));
    }
    let step = 4usize << 20;
    for (i, chunk) in data.chunks(step).enumerate() {
        array
            .write_at(chunk, offset + (i * step) as u64, false)
            .map_err(engine_error)?;
    }
    array.flush().map_err(engine_error)?;
    array.stop().map_err(engine_error)?;
    if args.json {
        return print_json(
            &serde_json::json!({ "bytes": data.len(), "offset": offset, "status": array.status() }),
        );
    }
    println!("raidkit: wrote {} bytes at offset {offset}", data.len());
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

fn fail(args: MemberArgs) -> Result<(), CliError> {
    let index = member_index(&args.members, &args.member)?;
    let (array, report) = assemble(&args.members, false, args.force)?;
    report_notes(&report);
    array.fail_member(index).map_err(engine_error)?;
    let result = array.stop();
    let status = array.status();
    if args.json {
        print_json(&status)?;
    } else {
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
    let index = member_index(&args.members, &args.member)?;
    let (array, report) = assemble(&args.members, false, args.force)?;
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
    let size = match &args.size {
        Some(s) => Some(parse_size_bytes(s, 1024)?),
        None => None,
    };
    if args.members.iter().any(|m| m == &args.member) {
        return Err(CliError::usage(format!(
            "{} is already a member",
            args.member.display()
        )));
    }
    let (array, report) = assemble(&args.members, false, args.force)?;
    report_notes(&report);
    let (mut disks, _) = open_for_create(std::slice::from_ref(&args.member), size)?;
    let disk = disks.remove(0);
    let degraded = array.status().degraded;
    array
        .add_spare(disk, random_uuid()?)
        .map_err(engine_error)?;
    array.stop().map_err(engine_error)?;
    if args.json {
        return print_json(&array.status());
    }
    if degraded {
        println!(
            "raidkit: {} added and rebuilt into the missing slot",
            args.member.display()
        );
    } else {
        println!("raidkit: {} added as a spare", args.member.display());
    }
    Ok(())
}

fn stop(args: MembersArgs) -> Result<(), CliError> {
    let (array, report) = assemble(&args.members, false, args.force)?;
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
    fn create_write_read_degraded_and_refusals() {
        let dir = temp_dir("cli");
        let m: Vec<PathBuf> = (0..5).map(|i| dir.0.join(format!("m{i}.img"))).collect();
        let ms: Vec<&str> = m.iter().map(|p| s(p)).collect();
        let mut args = vec!["create", "--level", "6", "--size", "8M", "--chunk", "64K"];
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
        let (array, report) = assemble(&m, true, false).unwrap();
        assert_eq!(array.status().missing_slots, vec![2]);
        assert!(report.excluded.iter().any(|(n, _)| n.ends_with("m2.img")));
        drop(array);

        // add a new member: rebuilt into the failed slot
        let new = dir.0.join("new.img");
        let mut args = vec!["add", "--member", s(&new), "--size", "8M"];
        args.extend(&ms);
        run_args(&args).unwrap();
        let mut whole: Vec<PathBuf> = m
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 2)
            .map(|(_, p)| p.clone())
            .collect();
        whole.push(new.clone());
        let (array, _) = assemble(&whole, true, false).unwrap();
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
