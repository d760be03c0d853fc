//! What several `raidkit` commands share: opening members, assembling an array from them,
//! mapping engine and disk errors to the documented exit codes, parsing sizes, levels, layouts
//! and chunk sizes, and the member flags of the commands that act on stopped arrays.
//!
//! Owns these helpers so that each command module imports them from one place and no two
//! command modules import each other. Everything here returns [`CliError`] with the exit code
//! the command ends with; nothing here prints except [`report_notes`] and [`print_json`],
//! which every command prints the same way.

use crate::error::{CliError, ExitCode};
use raidkit_disk::{DirectIo, Disk, FileDisk, OpenOptions};
use raidkit_engine::{Array, AssembleOptions, AssembleReport, EngineError};
use raidkit_layout::{Raid0Layout, Raid10Layout, Raid5Algorithm, Raid6Algorithm};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The help of `--run`, on every command that writes to an assembled array.
pub const RUN_HELP: &str = "Start writable even when members the superblocks list as active were not given (mdadm's --run): they are recorded faulty for good and can only come back through a full rebuild. Without it such a command refuses (exit code 4) and writes nothing";

#[derive(clap::Args, Debug)]
pub struct MembersArgs {
    /// All members of the (stopped) array.
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
    /// Accept stale members / a dirty degraded array, as mdadm --force.
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long, help = RUN_HELP)]
    pub run: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
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
        | EngineError::Metadata(_)
        | EngineError::CannotGrow(_)
        | EngineError::ReshapeInProgress { .. } => ExitCode::Refused,
        EngineError::Unavailable { .. }
        | EngineError::ArrayFailed { .. }
        | EngineError::Incomplete { .. } => ExitCode::Unavailable,
        EngineError::Invalid(_) | EngineError::Stack(_) => ExitCode::Usage,
        EngineError::Disk(_) | EngineError::ReadOnly | EngineError::Busy(_) => ExitCode::Failure,
    };
    CliError::new(code, err.to_string())
}

/// Maps a member's error to the documented exit codes: a member someone else holds, and a
/// path that is no disk (a directory, /dev/null), are refused input (3), with what to do
/// instead; anything else is a runtime failure (1).
pub fn disk_error(err: raidkit_disk::DiskError) -> CliError {
    use raidkit_disk::{DiskErrorKind, Holder};
    match &err.kind {
        DiskErrorKind::NotADisk => CliError::new(ExitCode::Refused, err.to_string()),
        DiskErrorKind::BadSpec(_) => CliError::new(ExitCode::Usage, err.to_string()),
        DiskErrorKind::Claimed { holder, .. } => {
            let hint = match holder {
                Holder::Process { pid, argv }
                    if holder.program() == Some("raidkit")
                        && argv.get(1).map(String::as_str) == Some("serve") =>
                {
                    match served_control_socket(holder, *pid) {
                        Some(ctl) => format!(
                            "the array is served: manage it through the server's control socket, e.g. `raidkit detail --control {}` (fail, remove and add take --control too)",
                            ctl.display()
                        ),
                        None => "the array is served without a control socket: stop the server (SIGTERM) first".into(),
                    }
                }
                Holder::Process { .. } => {
                    "wait until that process is done with it, or stop it first".into()
                }
                Holder::Kernel(_) => {
                    "unmount it, or stop the md or dm device that holds it, first".into()
                }
                Holder::Unknown => "find and stop the process that has it open first".into(),
            };
            CliError::new(ExitCode::Refused, format!("{err}\n  {hint}"))
        }
        _ => CliError::failure(err.to_string()),
    }
}

/// The control socket of the `raidkit serve` process `pid` (from its command line, resolved
/// against its working directory): `--control PATH`, else its `--socket` path plus ".ctl";
/// `None` when it runs without one.
fn served_control_socket(holder: &raidkit_disk::Holder, pid: u32) -> Option<PathBuf> {
    if matches!(holder, raidkit_disk::Holder::Process { argv, .. } if argv.iter().any(|a| a == "--no-control"))
    {
        return None;
    }
    let path = match (holder.argument("--control"), holder.argument("--socket")) {
        (Some(c), _) => PathBuf::from(c),
        (None, Some(s)) => PathBuf::from(format!("{s}.ctl")),
        (None, None) => return None,
    };
    if path.is_absolute() {
        return Some(path);
    }
    match std::fs::read_link(format!("/proc/{pid}/cwd")) {
        Ok(cwd) => Some(cwd.join(path).components().collect()),
        Err(_) => Some(path),
    }
}

/// Opens an existing member, or creates an image file of `image_bytes` when it does not exist
/// (`None`: refused, naming the flag that gives the size).
pub fn open_or_create(path: &Path, image_bytes: Option<u64>) -> Result<Box<dyn Disk>, CliError> {
    if let Some(d) = open_spelled(path, false) {
        return d;
    }
    let disk = if path.exists() {
        FileDisk::open(path, OpenOptions::default())
    } else {
        let Some(size) = image_bytes else {
            return Err(CliError::usage(format!(
                "{}: does not exist; give --image-size to create an image file",
                path.display()
            )));
        };
        FileDisk::create(path, size)
    };
    Ok(Box::new(disk.map_err(disk_error)?))
}

/// Opens members; read-only ones never get a write. `map_memory`: long-lived users (the
/// server) map fully allocated tmpfs members ([`OpenOptions::map_memory`]); the paths mapped
/// are returned beside the disks, for the caller to say so.
pub fn open_members_mapped(
    paths: &[PathBuf],
    read_only: bool,
    map_memory: bool,
) -> Result<(Members, Vec<PathBuf>), CliError> {
    let mut seen = Vec::new();
    let mut out: Vec<Box<dyn Disk>> = Vec::new();
    let mut mapped = Vec::new();
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
        if let Some(d) = open_spelled(p, read_only) {
            out.push(d?);
            continue;
        }
        let d = FileDisk::open(
            p,
            OpenOptions {
                read_only,
                direct: DirectIo::Auto,
                map_memory,
                ..Default::default()
            },
        )
        .map_err(disk_error)?;
        if d.is_mapped() {
            mapped.push(p.clone());
        }
        out.push(Box::new(d));
    }
    Ok((out, mapped))
}

/// An emulated drive (`emu:NAME[,OPTION...][:SIZE][:PATH]`) with the catalog built in and
/// the user's (`RAIDKIT_CATALOG`). `read_only` opens its image file read-only; a memory
/// drive starts empty either way.
pub fn open_emulated(p: &Path, read_only: bool) -> Result<Box<dyn Disk>, CliError> {
    let catalog = raidkit_disk::emu::catalog::Catalog::load(None)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let d = raidkit_disk::EmuDisk::open_with(&p.to_string_lossy(), &catalog, read_only)
        .map_err(disk_error)?;
    Ok(Box::new(d))
}

/// True when `p` spells a member that is no path: an emulated drive (`emu:...`) or an NBD
/// export (`nbd://...`, `nbd+unix://...`).
pub fn is_spelled(p: &Path) -> bool {
    let s = p.to_string_lossy();
    raidkit_disk::emu::is_emu(&s) || raidkit_nbd::member::is_nbd(&s)
}

/// Opens a member spelled as [`is_spelled`] says (`None` for a path). An NBD export gives
/// up after `RAIDKIT_NBD_TIMEOUT` seconds without an answer (30 by default).
pub fn open_spelled(p: &Path, read_only: bool) -> Option<Result<Box<dyn Disk>, CliError>> {
    let s = p.to_string_lossy();
    if raidkit_disk::emu::is_emu(&s) {
        return Some(open_emulated(p, read_only));
    }
    if raidkit_nbd::member::is_nbd(&s) {
        let t = raidkit_nbd::member::timeout_from_env();
        return Some(
            raidkit_nbd::member::NbdDisk::open(&s, read_only, t)
                .map(|d| Box::new(d) as Box<dyn Disk>)
                .map_err(disk_error),
        );
    }
    None
}

/// Opened members, in the order given.
pub type Members = Vec<Box<dyn Disk>>;

/// [`open_members_mapped`] without mapping.
pub fn open_members(paths: &[PathBuf], read_only: bool) -> Result<Vec<Box<dyn Disk>>, CliError> {
    Ok(open_members_mapped(paths, read_only, false)?.0)
}

/// mdadm's insisting flags of a command that assembles.
#[derive(Clone, Copy, Debug, Default)]
pub struct Insist {
    /// Accept stale members / a dirty degraded array.
    pub force: bool,
    /// Start writable without members the superblocks list as active.
    pub run: bool,
}

impl Insist {
    pub fn force(force: bool) -> Insist {
        Insist { force, run: false }
    }
}

/// A writable assembly with the command's `--force` and `--run`.
pub fn assemble_writable(
    paths: &[PathBuf],
    force: bool,
    run: bool,
) -> Result<(Array, AssembleReport), CliError> {
    assemble(paths, false, Insist { force, run })
}

/// [`assemble_volume`], writable, with the command's `--force` and `--run`.
pub fn assemble_volume_writable(
    paths: &[PathBuf],
    force: bool,
    run: bool,
) -> Result<(Array, AssembleReport), CliError> {
    assemble_volume(paths, false, Insist { force, run })
}

/// Assembles the one array `paths` are the members of. The members of a RAID 50/60 stack
/// are refused (exit code 3): the command acts on one array, and a stack is several (see
/// [`assemble_volume`] for the commands that take a stack as one array).
pub fn assemble(
    paths: &[PathBuf],
    read_only: bool,
    insist: Insist,
) -> Result<(Array, AssembleReport), CliError> {
    let disks = open_members(paths, read_only)?;
    if let Some(level) = stack_level_of(&disks) {
        return Err(CliError::new(
            ExitCode::Refused,
            format!(
                "the members form a RAID {level} stack (a RAID 0 over RAID {} spans): this command acts on one array, not on a stack yet; give the members of one span to act on that span",
                level / 10
            ),
        ));
    }
    Array::assemble(disks, assemble_options(read_only, insist))
        .map_err(|e| assembly_error(e, paths))
}

/// Assembles what `paths` are the members of: one array, or a RAID 50/60 stack (its spans
/// from their members, then the RAID 0 over them), which is then one array to read, write,
/// show and stop ([`Array::stop`] stops its spans too).
pub fn assemble_volume(
    paths: &[PathBuf],
    read_only: bool,
    insist: Insist,
) -> Result<(Array, AssembleReport), CliError> {
    let disks = open_members(paths, read_only)?;
    let opts = assemble_options(read_only, insist);
    if stack_level_of(&disks).is_some() {
        return Array::assemble_stack(disks, opts).map_err(|e| assembly_error(e, paths));
    }
    Array::assemble(disks, opts).map_err(|e| assembly_error(e, paths))
}

fn assemble_options(read_only: bool, insist: Insist) -> AssembleOptions {
    AssembleOptions {
        force: insist.force,
        run: insist.run,
        read_only,
        ..Default::default()
    }
}

/// 50 or 60 when `disks` look like the members of a stack's spans (members of several
/// RAID 5, or RAID 6, arrays of one shape); members without a superblock are passed over.
pub fn stack_level_of(disks: &[Box<dyn Disk>]) -> Option<i32> {
    let found: Vec<_> = disks
        .iter()
        .filter_map(|d| raidkit_engine::read_superblock(d.as_ref()).ok())
        .collect();
    raidkit_engine::array::looks_stacked(&found).then(|| found[0].sb.level.to_md() * 10)
}

/// [`engine_error`], and for members not given, where they may be: image files beside the
/// given ones that hold the missing device numbers of the same array.
pub fn assembly_error(err: EngineError, given: &[PathBuf]) -> CliError {
    let EngineError::Incomplete {
        set_uuid, absent, ..
    } = &err
    else {
        return engine_error(err);
    };
    let mut hints = Vec::new();
    for a in absent {
        match find_member(given, *set_uuid, a.dev_number) {
            Some((path, events)) => hints.push(format!(
                "slot {} (device {}): {} holds it (events {events}); add it to the command line",
                a.slot,
                a.dev_number,
                path.display()
            )),
            None => hints.push(format!(
                "slot {} (device {}): not found beside the given members",
                a.slot, a.dev_number
            )),
        }
    }
    CliError::new(
        ExitCode::Unavailable,
        format!("{err}\n  {}", hints.join("\n  ")),
    )
}

/// Looks in the folders of `given` for a file that holds device `dev_number` of array
/// `set_uuid` (md records no member paths, so this is where a forgotten image file usually
/// is). Files someone else holds, or that hold no superblock, are passed over.
fn find_member(given: &[PathBuf], set_uuid: [u8; 16], dev_number: u32) -> Option<(PathBuf, u64)> {
    let mut folders: Vec<PathBuf> = Vec::new();
    for p in given {
        let folder = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !folders.contains(&folder) {
            folders.push(folder);
        }
    }
    let given: Vec<PathBuf> = given.iter().map(|p| identity(p)).collect();
    for folder in folders {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        // Bounded: a folder of thousands of files is not worth reading through.
        for entry in entries.flatten().take(1024) {
            let path = entry.path();
            if given.contains(&identity(&path)) || !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let Ok(disk) = FileDisk::open(
                &path,
                OpenOptions {
                    read_only: true,
                    ..Default::default()
                },
            ) else {
                continue;
            };
            if let Ok(found) = raidkit_engine::read_superblock(&disk) {
                if found.sb.set_uuid.0 == set_uuid && found.sb.dev_number == dev_number {
                    let shown = path.strip_prefix("./").unwrap_or(&path).to_path_buf();
                    return Some((shown, found.sb.events));
                }
            }
        }
    }
    None
}

/// A path's identity for "listed twice": the canonical path, or for a file still to be
/// created, its canonical folder joined with its name.
pub fn identity(p: &Path) -> PathBuf {
    if let Ok(c) = std::fs::canonicalize(p) {
        return c;
    }
    let parent = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(parent), p.file_name()) {
        (Ok(d), Some(name)) => d.join(name),
        _ => p.to_path_buf(),
    }
}

pub fn report_notes(report: &AssembleReport) {
    for (m, why) in &report.excluded {
        eprintln!("raidkit: {m}: not used: {why}");
    }
    for e in &report.events {
        eprintln!("raidkit: {e}");
    }
}

pub fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CliError> {
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

/// "5", "raid5", "mirror" -> md level number. RAID 1E, 50 and 60 are not array levels of
/// their own in md and are refused here.
pub fn parse_level(text: &str) -> Result<i32, CliError> {
    let level: raidkit_layout::Level = text
        .parse()
        .map_err(|e| CliError::usage(format!("--level {text}: {e}")))?;
    use raidkit_layout::Level as L;
    match level {
        // RAID 1E (striped mirroring over any member count) is md's RAID 10 with two near
        // copies, the RAID 10 default layout: `create --level 1E` makes that.
        L::Raid0 | L::Raid1 | L::Raid4 | L::Raid5 | L::Raid6 | L::Raid10 | L::Raid1E => {
            Ok(level.md_level())
        }
        _ => Err(CliError::usage(format!(
            "--level {text}: not an md array level (use 0, 1, 1E, 4, 5, 6 or 10)"
        ))),
    }
}

/// A layout name as mdadm spells it, or md's number, for `level`.
pub fn parse_layout(level: i32, text: &str) -> Result<u32, CliError> {
    let bad = |e: String| CliError::usage(format!("--layout {text} for RAID {level}: {e}"));
    let number = text
        .strip_prefix("0x")
        .map(|h| u32::from_str_radix(h, 16).ok())
        .unwrap_or_else(|| text.parse::<u32>().ok());
    match level {
        5 => match number {
            Some(n) => Raid5Algorithm::from_md(n).map(|a| a.md_layout()),
            None => text.parse::<Raid5Algorithm>().map(|a| a.md_layout()),
        }
        .map_err(|e| bad(e.to_string())),
        6 => match number {
            Some(n) => Raid6Algorithm::from_md(n).map(|a| a.md_layout()),
            None => text.parse::<Raid6Algorithm>().map(|a| a.md_layout()),
        }
        .map_err(|e| bad(e.to_string())),
        10 => text
            .parse::<Raid10Layout>()
            .map(|l| l.md_layout())
            .map_err(|e| bad(e.to_string())),
        0 => match number {
            Some(n) => Ok(Raid0Layout::from_md(n).md_layout()),
            None => text
                .parse::<Raid0Layout>()
                .map(|l| l.md_layout())
                .map_err(|e| bad(e.to_string())),
        },
        _ => match number {
            Some(0) => Ok(0),
            _ => Err(bad("this level has no layouts".into())),
        },
    }
}

/// A size with an optional K, M, G or T suffix (powers of 1024); a bare number is multiplied
/// by `bare_unit` (1 for byte offsets, 1024 for mdadm-style KiB sizes).
pub fn parse_size_bytes(text: &str, bare_unit: u64) -> Result<u64, CliError> {
    let t = text.trim();
    let bad = || {
        CliError::usage(format!(
            "invalid size '{text}' (examples: 4096, 64K, 64M, 1G)"
        ))
    };
    let (digits, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        Some('t' | 'T') => (&t[..t.len() - 1], 1 << 40),
        Some(c) if c.is_ascii_digit() => (t, bare_unit),
        _ => return Err(bad()),
    };
    let v: u64 = digits.parse().map_err(|_| bad())?;
    v.checked_mul(mult).ok_or_else(bad)
}

/// Parse a chunk size like mdadm: `64K`, `1M`, `512` (KiB). Returns sectors.
pub fn parse_chunk_sectors(text: &str) -> Result<u32, CliError> {
    let t = text.trim();
    let bad = || {
        CliError::usage(format!(
            "invalid chunk size '{text}' (examples: 64K, 512K, 1M)"
        ))
    };
    let (digits, multiplier_kib): (&str, u64) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1),
        Some('m' | 'M') => (&t[..t.len() - 1], 1024),
        Some('g' | 'G') => (&t[..t.len() - 1], 1024 * 1024),
        Some(c) if c.is_ascii_digit() => (t, 1),
        _ => return Err(bad()),
    };
    let value: u64 = digits.parse().map_err(|_| bad())?;
    let sectors = value
        .checked_mul(multiplier_kib)
        .and_then(|kib| kib.checked_mul(2))
        .ok_or_else(bad)?;
    if sectors == 0 {
        return Err(CliError::usage("chunk size must not be zero"));
    }
    u32::try_from(sectors).map_err(|_| bad())
}

/// Adds `disk` (opened from `path`) to `array`: a former member of this array comes back
/// through re-add (only what it missed is rebuilt, with a write-intent bitmap); a device
/// holding another array's superblock, or a former member that cannot be re-added, is
/// refused unless `force`, as mdadm does, since adding it as a spare overwrites it (with
/// `force` the device is opened again through `reopen` and added as a new spare). Returns the
/// slot a re-added member took, `None` for a spare.
pub fn add_or_re_add(
    array: &Array,
    disk: Box<dyn Disk>,
    path: &Path,
    force: bool,
    reopen: impl FnOnce() -> Result<Box<dyn Disk>, CliError>,
) -> Result<Option<usize>, CliError> {
    let disk = match raidkit_engine::read_superblock(disk.as_ref()) {
        Ok(found) if array.status().uuid == found.sb.set_uuid.to_mdadm_string() => {
            match array.re_add(disk) {
                Ok(slot) => return Ok(Some(slot)),
                Err(e) if force => {
                    eprintln!(
                        "raidkit: re-add not possible ({e}); --force: adding it as a new spare"
                    );
                    reopen()?
                }
                Err(e) => {
                    return Err(CliError::new(
                        ExitCode::Refused,
                        format!(
                            "{}: a former member of this array, but it cannot be re-added: {e}. Adding it as a spare would overwrite it; give --force to do that",
                            path.display()
                        ),
                    ))
                }
            }
        }
        Ok(found) if !force => {
            return Err(CliError::new(
                ExitCode::Refused,
                format!(
                    "{}: holds an md superblock of another array (UUID {}); adding it would overwrite that array's member. Give --force to do it anyway",
                    path.display(),
                    found.sb.set_uuid.to_mdadm_string()
                ),
            ))
        }
        _ => disk,
    };
    array
        .add_spare(disk, random_uuid()?)
        .map_err(engine_error)?;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size_bytes("64M", 1024).unwrap(), 64 << 20);
        assert_eq!(parse_size_bytes("100", 1024).unwrap(), 102400);
        assert_eq!(parse_size_bytes("100", 1).unwrap(), 100);
        assert!(parse_size_bytes("x1", 1).is_err());
        assert!(parse_size_bytes("99999999999999999999G", 1).is_err());
    }

    #[test]
    fn levels_and_layouts() {
        assert_eq!(parse_level("raid6").unwrap(), 6);
        assert!(parse_level("50").is_err());
        assert_eq!(parse_layout(5, "left-symmetric").unwrap(), 2);
        assert_eq!(parse_layout(5, "ra").unwrap(), 1);
        assert_eq!(parse_layout(6, "left-symmetric-6").unwrap(), 18);
        assert_eq!(parse_layout(10, "f2").unwrap(), 0x201);
        assert_eq!(parse_layout(10, "o2").unwrap(), 0x10201);
        assert!(parse_layout(5, "bogus").is_err());
        assert!(parse_layout(1, "n2").is_err());
    }
}
