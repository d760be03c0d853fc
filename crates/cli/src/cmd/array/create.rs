//! `raidkit create`, and creating an array for the other commands that make one (the demo, the
//! NBD benchmark).
//!
//! Owns the create plan (flags become plain values: level, layout, chunk, metadata version,
//! sizes) and the order in which create touches members: look at every member first (refusing
//! md superblocks and filesystems without `--force`), rehearse the engine's create on size-only
//! devices, and only then create image files and write superblocks, removing the files it
//! created should the real create still fail.

use super::util;
use raidkit_cli::common::{
    disk_error, engine_error, identity, now_seconds, open_or_create, parse_chunk_sectors,
    parse_layout, parse_level, parse_size_bytes, print_json, random_uuid,
};
use raidkit_cli::{CliError, ExitCode};
use raidkit_disk::{DirectIo, Disk, FileDisk, OpenOptions};
use raidkit_engine::array::split_stack;
use raidkit_engine::{
    Array, ConsistencyPolicy, CreateOptions, EngineConfig, EngineError, Init, StackOptions,
};
use raidkit_metadata::SuperblockVersion;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// Member image files or block devices.
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
    /// RAID level: 0, 1, 4, 5, 6, 10, 1E (RAID 10 with two near copies, any member count),
    /// or 50 and 60 (with --spans: a RAID 0 over RAID 5 or 6 arrays, as md stacks them).
    #[arg(long, short = 'l')]
    pub level: String,
    /// RAID 50 and 60: the number of RAID 5 (or 6) arrays, "spans", the RAID 0 stripes
    /// over. Span i is made of the i-th run of members/spans members, in the order given;
    /// --layout and --chunk are the spans'; the RAID 0's chunk is a span's whole stripe of
    /// data (--chunk times its data members), so each RAID 0 chunk is one full-stripe write
    /// on a span. Md assembles the same stack (the spans from their members, then the RAID 0
    /// on the spans).
    #[arg(long, value_name = "N")]
    pub spans: Option<usize>,
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
    /// Space of each member the array uses, as mdadm --size (K, M, G, T suffix; a bare number
    /// is KiB; "max" for all that fits). Default: all that fits on the smallest member.
    #[arg(long, short = 'z')]
    pub size: Option<String>,
    /// Size of the image files to create for members that do not exist (K, M, G, T suffix; a
    /// bare number is KiB). Existing members are used at the size they have.
    #[arg(long = "image-size", value_name = "SIZE")]
    pub image_size: Option<String>,
    /// Array name (stored as "hostname:name", as mdadm does).
    #[arg(long, short = 'N', default_value = "raidkit")]
    pub name: String,
    /// Overwrite members that already hold an md superblock (of another array or of this
    /// one). Without it create refuses (exit code 3), names each such member and the array
    /// it belongs to, and writes nothing.
    #[arg(long, short = 'f')]
    pub force: bool,
    /// What keeps parity and copies consistent across a crash, as mdadm's
    /// --consistency-policy: resync (nothing on disk: a full resync after an unclean stop),
    /// bitmap (an internal write-intent bitmap: resync and re-add only what was written),
    /// ppl (RAID 5's partial parity log: closes the write hole), journal (see
    /// --write-journal). Default: ppl for RAID 5 when the members have room for its 1 MiB
    /// log area, resync otherwise.
    #[arg(long = "consistency-policy", value_name = "POLICY")]
    pub consistency_policy: Option<String>,
    /// mdadm's --write-journal: a device (or image file) of its own that logs every write,
    /// data and parity, before the members are written (RAID 4/5/6), closing the write hole
    /// even when a member is lost after a crash. Implies --consistency-policy journal. A
    /// missing image file is created with --image-size.
    #[arg(long = "write-journal", value_name = "PATH", conflicts_with = "bitmap")]
    pub write_journal: Option<PathBuf>,
    /// mdadm's --bitmap: "internal" for a write-intent bitmap, "none" for none.
    #[arg(
        long,
        short = 'b',
        value_name = "internal|none",
        conflicts_with = "consistency_policy"
    )]
    pub bitmap: Option<String>,
    /// Bytes of the array per bitmap bit (K, M, G suffix); default mdadm's choice.
    #[arg(long = "bitmap-chunk", value_name = "SIZE")]
    pub bitmap_chunk: Option<String>,
    /// How the new array is made consistent: auto (the default: nothing to do on new image
    /// files, fast where every member zeroes without writing, background otherwise), fast
    /// (zero the members where that writes nothing: image files, devices that offload
    /// zeroing; refused otherwise), background (md's initial resync: the array is usable at
    /// once and a resync builds parity and copies behind it, with progress, a rate limit and
    /// resume, under `raidkit serve`), zero (write zeroes over every member now), none (as
    /// --assume-clean).
    #[arg(long, value_name = "auto|fast|background|zero|none")]
    pub init: Option<String>,
    /// mdadm's --assume-clean: write nothing but the metadata and record the array in sync.
    /// Only for members known consistent (all zeroes, or an array being recreated over its
    /// own members); a later check finds and repair fixes what is not.
    #[arg(long = "assume-clean", conflicts_with = "init")]
    pub assume_clean: bool,
    /// The array's read policy when it is served (none, always, adaptive: the PERC6's NORA,
    /// RA, ARA). md's superblock has no place for it, so it goes on the array's ARRAY line
    /// in `--config`, which `serve --scan` reads.
    #[arg(long = "read-ahead", value_name = "POLICY", requires = "config")]
    pub read_ahead: Option<String>,
    /// The array's write policy when it is served (through or back; back needs
    /// --write-journal), kept as --read-ahead is.
    #[arg(long = "write-policy", value_name = "POLICY", requires = "config")]
    pub write_policy: Option<String>,
    /// A configuration file (mdadm.conf's form) to add the new array's ARRAY line to, with
    /// its read and write policies; created when missing.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The policies `create` records on the ARRAY line, checked before anything is written.
fn line_policies(args: &CreateArgs) -> Result<Vec<String>, CliError> {
    let mut words = Vec::new();
    if let Some(p) = &args.read_ahead {
        let ra = raidkit_engine::ReadAhead::parse(p).ok_or_else(|| {
            CliError::usage(format!("--read-ahead {p}: none, always or adaptive"))
        })?;
        words.push(format!("read-ahead={}", ra.name()));
    }
    if let Some(p) = &args.write_policy {
        let wp = raidkit_engine::WritePolicy::parse(p)
            .ok_or_else(|| CliError::usage(format!("--write-policy {p}: through or back")))?;
        if wp == raidkit_engine::WritePolicy::Back && args.write_journal.is_none() {
            return Err(CliError::usage(
                "--write-policy back: the write-back cache is md's journal in write-back mode; give --write-journal DEV",
            ));
        }
        words.push(format!("write-policy={}", wp.name()));
    }
    Ok(words)
}

/// Appends the new array's ARRAY line (as `raidkit scan` prints it, with `policies`) to
/// `config`, creating the file when missing.
fn record_in_config(
    config: &std::path::Path,
    members: &[PathBuf],
    policies: &[String],
) -> Result<String, CliError> {
    use std::io::Write;
    // Absolute paths: the file may be read from anywhere.
    let members: Vec<PathBuf> = members
        .iter()
        .map(|m| std::fs::canonicalize(m).unwrap_or_else(|_| m.clone()))
        .collect();
    let arrays = raidkit_cli::config::group(raidkit_cli::config::scan(&members));
    let Some(array) = arrays.into_iter().find(|a| !a.members.is_empty()) else {
        return Err(CliError::failure(
            "the new array was not found on its members to write its ARRAY line",
        ));
    };
    let mut line = array.config_line();
    if !policies.is_empty() {
        let at = line.find('\n').unwrap_or(line.len());
        line.insert_str(at, &format!(" {}", policies.join(" ")));
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(config)
        .map_err(|e| CliError::failure(format!("{}: {e}", config.display())))?;
    writeln!(f, "{line}").map_err(|e| CliError::failure(format!("{}: {e}", config.display())))?;
    Ok(line)
}

/// `create --init`: how the new array is made consistent (see [`CreateArgs::init`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitMode {
    #[default]
    Auto,
    Fast,
    Background,
    Zero,
    AssumeClean,
}

impl InitMode {
    fn parse(text: &str) -> Result<InitMode, CliError> {
        Ok(match text {
            "auto" => InitMode::Auto,
            "fast" => InitMode::Fast,
            "background" | "bgi" => InitMode::Background,
            "zero" | "foreground" => InitMode::Zero,
            "none" | "assume-clean" => InitMode::AssumeClean,
            other => {
                return Err(CliError::usage(format!(
                    "--init {other}: one of auto, fast, background, zero, none"
                )))
            }
        })
    }
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
    /// Size of the image files to create for members that do not exist.
    pub image_bytes: Option<u64>,
    pub name: String,
}

/// What `create` adds to a [`CreatePlan`]: mdadm's `--size` and `--force`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateChecks {
    /// Sectors of each member the array uses (mdadm `--size`); `None` for all that fits.
    pub size_sectors: Option<u64>,
    /// Overwrite members that already hold an md superblock.
    pub force: bool,
    /// mdadm's --consistency-policy; `None` for the default.
    pub consistency: Option<ConsistencyPolicy>,
    /// How the new array is made consistent.
    pub init: InitMode,
    /// Draw a progress bar while members are zeroed in the foreground.
    pub progress: bool,
    /// RAID 50 and 60: the number of spans (see [`CreateArgs::spans`]).
    pub spans: Option<usize>,
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

/// mdadm's `--size`: KiB unless suffixed, "max" for all that fits.
fn parse_used_size(text: &str) -> Result<Option<u64>, CliError> {
    if text.eq_ignore_ascii_case("max") {
        return Ok(None);
    }
    let bytes = parse_size_bytes(text, 1024)?;
    if bytes < 4096 || bytes % 512 != 0 {
        return Err(CliError::usage(format!(
            "--size {text}: give a whole number of KiB, at least 4K (it is the space of each member the array uses)"
        )));
    }
    Ok(Some(bytes / 512))
}

fn plan_create(args: &CreateArgs) -> Result<(CreatePlan, CreateChecks), CliError> {
    let stack_level = match args.level.parse::<raidkit_layout::Level>() {
        Ok(raidkit_layout::Level::Raid50) => Some(50),
        Ok(raidkit_layout::Level::Raid60) => Some(60),
        _ => None,
    };
    let level = match stack_level {
        Some(l) => l,
        None => parse_level(&args.level)?,
    };
    // A stack's layout is its spans'.
    let layout = match &args.layout {
        Some(l) => Some(parse_layout(stack_level.map_or(level, |s| s / 10), l)?),
        None => None,
    };
    // RAID 1E is RAID 10 with two near copies, and nothing else.
    let one_e = args.level.parse::<raidkit_layout::Level>() == Ok(raidkit_layout::Level::Raid1E);
    if one_e && layout.is_some_and(|l| l != 0x102) {
        return Err(CliError::usage(format!(
            "--level 1E --layout {}: RAID 1E is RAID 10 with two near copies (n2); give --level 10 for other layouts",
            args.layout.as_deref().unwrap_or_default()
        )));
    }
    let chunk_sectors = parse_chunk_sectors(&args.chunk)?;
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
    let spans = match (stack_level, args.spans) {
        (Some(l), Some(spans)) => {
            split_stack(l, raid_devices, spans).map_err(|e| {
                CliError::usage(format!(
                    "--level {l} --spans {spans}: {e}; nothing was written"
                ))
            })?;
            if args.spare_devices > 0 {
                return Err(CliError::usage(format!(
                    "--level {l}: a stack takes no spares (a spare belongs to a span); give the span's members to `raidkit add` to add one to a span"
                )));
            }
            if args.write_journal.is_some() {
                return Err(CliError::usage(format!(
                    "--level {l}: a stack has no write journal (each span would need a journal device of its own)"
                )));
            }
            Some(spans)
        }
        (Some(l), None) => {
            return Err(CliError::usage(format!(
                "--level {l} needs --spans N: the number of RAID {} arrays the RAID 0 stripes over",
                l / 10
            )))
        }
        (None, Some(_)) => {
            return Err(CliError::usage(
                "--spans is for --level 50 and 60 (a RAID 0 over RAID 5 or 6 arrays)",
            ))
        }
        (None, None) => None,
    };
    let image_bytes = match &args.image_size {
        Some(s) => Some(parse_size_bytes(s, 1024)?),
        None => None,
    };
    let size_sectors = match &args.size {
        Some(s) => parse_used_size(s)?,
        None => None,
    };
    let bitmap_chunk = match &args.bitmap_chunk {
        Some(s) => parse_size_bytes(s, 1024)?,
        None => 0,
    };
    let policy = match (args.consistency_policy.as_deref(), args.bitmap.as_deref()) {
        _ if args.write_journal.is_some()
            && !matches!(args.consistency_policy.as_deref(), None | Some("journal")) =>
        {
            return Err(CliError::usage(
                "--write-journal implies --consistency-policy journal, as in mdadm",
            ))
        }
        _ if args.write_journal.is_some() => Some(ConsistencyPolicy::Journal),
        (Some("journal"), _) => {
            return Err(CliError::usage(
                "--consistency-policy journal needs --write-journal PATH (the journal device)",
            ))
        }
        (Some("resync"), _) | (None, Some("none")) => Some(ConsistencyPolicy::Resync),
        (Some("bitmap"), _) | (None, Some("internal")) => Some(ConsistencyPolicy::Bitmap {
            chunk_bytes: bitmap_chunk,
        }),
        (Some("ppl"), _) => Some(ConsistencyPolicy::Ppl),
        (None, None) => None,
        (Some(other), _) => {
            return Err(CliError::usage(format!(
                "--consistency-policy {other}: one of resync, bitmap, ppl, journal"
            )))
        }
        (None, Some(other)) => {
            return Err(CliError::usage(format!(
                "--bitmap {other}: internal or none (bitmap files are not supported)"
            )))
        }
    };
    if args.bitmap_chunk.is_some() && !matches!(policy, Some(ConsistencyPolicy::Bitmap { .. })) {
        return Err(CliError::usage(
            "--bitmap-chunk needs --bitmap internal (or --consistency-policy bitmap)",
        ));
    }
    let host = hostname();
    let name = if host.is_empty() {
        args.name.clone()
    } else {
        format!("{host}:{}", args.name)
    };
    Ok((
        CreatePlan {
            level,
            layout,
            chunk_sectors,
            raid_devices,
            metadata: parse_metadata(&args.metadata)?,
            image_bytes,
            name,
        },
        CreateChecks {
            size_sectors,
            force: args.force,
            consistency: policy,
            init: match (&args.init, args.assume_clean) {
                (_, true) => InitMode::AssumeClean,
                (Some(t), false) => InitMode::parse(t)?,
                (None, false) => InitMode::Auto,
            },
            progress: !args.json,
            spans,
        },
    ))
}

/// Opens or creates the new member of add or replace, before the array is assembled, so
/// that a member that cannot be used (held by someone, no disk, missing without a size)
/// refuses the command before anything else is touched. A file created here is removed again
/// unless the caller sets `keep` once the command succeeded.
pub fn open_new_member(
    path: &Path,
    image_bytes: Option<u64>,
) -> Result<(Box<dyn Disk>, CreatedFiles), CliError> {
    let mut created = CreatedFiles {
        paths: Vec::new(),
        keep: false,
    };
    if !path.exists() && image_bytes.is_some() {
        created.paths.push(path.to_path_buf());
    }
    let disk = open_or_create(path, image_bytes)?;
    Ok((disk, created))
}

/// What one member looked like before create touched anything.
enum Before {
    /// Not there: an image file of this size is to be created.
    Missing { image_bytes: u64 },
    /// There, holding no md superblock (or, with --force, one that is overwritten).
    Exists {
        size_bytes: u64,
        logical_block_size: u32,
        /// Zeroing it writes no data ([`Disk::zeroes_cheaply`]).
        zeroes_cheaply: bool,
        /// It reads as zeroes already: an emulated drive whose image file create makes now
        /// (or that keeps its bytes in memory).
        fresh: bool,
    },
}

/// Image files this command created, removed again unless the command succeeds.
pub struct CreatedFiles {
    paths: Vec<PathBuf>,
    /// Set once the command succeeded: the files stay.
    pub keep: bool,
}

impl Drop for CreatedFiles {
    fn drop(&mut self) {
        if !self.keep {
            for p in &self.paths {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// Creates an array on `paths` with the checks `create` makes; see [`create_array_checked`].
pub fn create_array(
    paths: &[PathBuf],
    plan: &CreatePlan,
    config: EngineConfig,
) -> Result<Array, CliError> {
    create_array_checked(paths, plan, CreateChecks::default(), config)
}

/// Creates an array on `paths`, in three steps so that a refusal changes nothing:
/// 1. look: every path given once; existing members opened read-only and refused when they
///    hold an md superblock (unless `checks.force`); missing ones need an image size;
/// 2. rehearse: the engine's own create runs on [`util::DryRunDisk`]s of the same names and
///    sizes, so its every rule (level, member count, chunk, layout, fit, `--size`) is checked
///    before any file is created;
/// 3. act: image files are created and the real create runs. Should it still fail, the files
///    this call created are removed (files that existed are never removed).
pub fn create_array_checked(
    paths: &[PathBuf],
    plan: &CreatePlan,
    checks: CreateChecks,
    config: EngineConfig,
) -> Result<Array, CliError> {
    // 1. Look.
    let mut seen: Vec<(PathBuf, &PathBuf)> = Vec::new();
    for p in paths {
        let id = identity(p);
        if let Some((_, prev)) = seen.iter().find(|(c, _)| *c == id) {
            return Err(CliError::usage(format!(
                "{}: listed twice (same file as {}); each member may be given once",
                p.display(),
                prev.display()
            )));
        }
        seen.push((id, p));
    }
    let mut before = Vec::with_capacity(paths.len());
    let mut in_use = Vec::new();
    for p in paths {
        let emulated = raidkit_cli::common::is_spelled(p);
        let fresh = raidkit_disk::emu::EmuSpec::parse(&p.to_string_lossy())
            .is_ok_and(|spec| spec.path.is_none_or(|image| !image.exists()));
        if !p.exists() && !emulated {
            let Some(image_bytes) = plan.image_bytes else {
                return Err(CliError::usage(format!(
                    "{}: does not exist; give --image-size to create image files (--size is the space of each member the array uses, as in mdadm)",
                    p.display()
                )));
            };
            before.push(Before::Missing { image_bytes });
            continue;
        }
        let disk: Box<dyn Disk> = if let Some(d) = raidkit_cli::common::open_spelled(p, true) {
            d?
        } else {
            Box::new(
                FileDisk::open(
                    p,
                    OpenOptions {
                        read_only: true,
                        direct: DirectIo::Auto,
                        map_memory: false,
                        ..Default::default()
                    },
                )
                .map_err(disk_error)?,
            )
        };
        if let Some(owner) = util::md_owner(&disk)? {
            in_use.push(format!("{}: {owner}", p.display()));
        } else if let Some(what) = util::foreign_content(&disk)? {
            in_use.push(format!("{}: holds {what}", p.display()));
        }
        before.push(Before::Exists {
            size_bytes: disk.size_bytes(),
            logical_block_size: disk.logical_block_size(),
            zeroes_cheaply: disk.zeroes_cheaply(),
            fresh,
        });
    }
    if !in_use.is_empty() && !checks.force {
        return Err(CliError::new(
            ExitCode::Refused,
            format!(
                "refusing to create: {} already {} an md superblock or other data (a filesystem, a partition table), and create would overwrite it; nothing was written (give --force to overwrite)\n  {}",
                if in_use.len() == 1 { "a member" } else { "members" },
                if in_use.len() == 1 { "holds" } else { "hold" },
                in_use.join("\n  ")
            ),
        ));
    }
    for line in &in_use {
        eprintln!("raidkit: --force: overwriting what {line}");
    }
    let init = choose_init(paths, &before, checks.init)?;
    let options = |disks: &[Box<dyn Disk>]| -> Result<CreateOptions, CliError> {
        let mut device_uuids = Vec::new();
        for _ in disks {
            device_uuids.push(random_uuid()?);
        }
        Ok(CreateOptions {
            level: plan.level,
            layout: plan.layout,
            chunk_sectors: plan.chunk_sectors,
            raid_devices: plan.raid_devices,
            metadata: plan.metadata,
            size_sectors: checks.size_sectors,
            name: plan.name.clone(),
            set_uuid: random_uuid()?,
            device_uuids,
            ctime_seconds: now_seconds(),
            init,
            consistency: checks.consistency.unwrap_or(ConsistencyPolicy::Auto),
            config,
        })
    };

    // 2. Rehearse.
    let dry: Vec<Box<dyn Disk>> = paths
        .iter()
        .zip(&before)
        .map(|(p, b)| {
            let (size_bytes, lbs) = match *b {
                Before::Missing { image_bytes } => (image_bytes, 512),
                Before::Exists {
                    size_bytes,
                    logical_block_size,
                    ..
                } => (size_bytes, logical_block_size),
            };
            Box::new(util::DryRunDisk::new(
                &p.display().to_string(),
                size_bytes,
                lbs,
            )) as Box<dyn Disk>
        })
        .collect();
    let stack_options = || -> Result<Option<StackOptions>, CliError> {
        let Some(spans) = checks.spans else {
            return Ok(None);
        };
        let mut span_set_uuids = Vec::new();
        let mut span_device_uuids = Vec::new();
        for _ in 0..spans {
            span_set_uuids.push(random_uuid()?);
            span_device_uuids.push(random_uuid()?);
        }
        Ok(Some(StackOptions {
            spans,
            span_set_uuids,
            span_device_uuids,
        }))
    };
    let make = |disks: Vec<Box<dyn Disk>>,
                opts: CreateOptions,
                stack: Option<StackOptions>,
                progress: &(dyn Fn(u64, u64) + Sync)| match stack {
        Some(stack) => Array::create_stack(disks, opts, stack, progress),
        None => Array::create_observed(disks, opts, progress),
    };
    let opts = options(&dry)?;
    match make(dry, opts, stack_options()?, &|_, _| {}) {
        Ok(array) => drop(array),
        // Nothing was read from a member here: metadata the engine cannot build comes from
        // the flags (a chunk md cannot use, say).
        Err(EngineError::Metadata(m)) => return Err(CliError::usage(m)),
        Err(e) => return Err(engine_error(e)),
    }

    // 3. Act.
    let mut created = CreatedFiles {
        paths: Vec::new(),
        keep: false,
    };
    let mut disks: Vec<Box<dyn Disk>> = Vec::with_capacity(paths.len());
    for (p, b) in paths.iter().zip(&before) {
        match *b {
            Before::Missing { image_bytes } => {
                // create_new: a file that appeared since step 1 is not ours to remove.
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(p)
                    .map_err(|e| CliError::failure(format!("{}: {e}", p.display())))?;
                created.paths.push(p.clone());
                disks.push(Box::new(
                    FileDisk::create(p, image_bytes).map_err(disk_error)?,
                ));
            }
            Before::Exists { .. } if raidkit_cli::common::is_spelled(p) => {
                let d = raidkit_cli::common::open_spelled(p, false).expect("a spelled member");
                disks.push(d?)
            }
            Before::Exists { .. } => disks.push(Box::new(
                FileDisk::open(p, OpenOptions::default()).map_err(disk_error)?,
            )),
        }
    }
    let opts = options(&disks)?;
    // A foreground zeroing that writes every byte takes as long as writing the members
    // whole: it shows its progress.
    let slow_zeroing = init == Init::Zero && disks.iter().any(|d| !d.zeroes_cheaply());
    let bar = std::sync::Mutex::new(super::tasks::ProgressBar::new(
        !(checks.progress && slow_zeroing),
    ));
    let start = std::time::Instant::now();
    let stack = stack_options()?;
    let array = make(disks, opts, stack, &|done, total| {
        let secs = start.elapsed().as_secs_f64().max(1e-3);
        let rate = done as f64 / secs;
        let percent = done as f64 * 100.0 / total.max(1) as f64;
        let eta = (rate > 0.0).then(|| (total - done) as f64 / rate);
        if let Ok(mut b) = bar.lock() {
            b.draw("zeroing", percent, rate, eta, false);
        }
    })
    .map_err(engine_error)?;
    if let Ok(mut b) = bar.lock() {
        b.finish();
    }
    created.keep = true;
    Ok(array)
}

/// The engine's [`Init`] for `mode` on members that looked like `before`: new sparse image
/// files read as zeroes already (P and Q of zero data are zero); `fast` zeroes members only
/// where that writes no data, and is refused, before anything is written, on a member where
/// it would write every byte.
fn choose_init(paths: &[PathBuf], before: &[Before], mode: InitMode) -> Result<Init, CliError> {
    let all_new = before.iter().all(|b| {
        matches!(
            b,
            Before::Missing { .. } | Before::Exists { fresh: true, .. }
        )
    });
    let slow: Vec<String> = paths
        .iter()
        .zip(before)
        .filter(|(_, b)| {
            matches!(
                b,
                Before::Exists {
                    zeroes_cheaply: false,
                    ..
                }
            )
        })
        .map(|(p, _)| p.display().to_string())
        .collect();
    Ok(match mode {
        InitMode::AssumeClean => Init::AssumeClean,
        InitMode::Background => Init::Background,
        _ if all_new => Init::Zeroed,
        InitMode::Zero => Init::Zero,
        InitMode::Fast | InitMode::Auto if slow.is_empty() => Init::Zero,
        InitMode::Auto => Init::Background,
        InitMode::Fast => {
            return Err(CliError::usage(format!(
                "--init fast: zeroing {} means writing every byte (a hard disk, an emulated drive, or a device that does not offload zeroing); nothing was written. Use --init background (usable at once, parity built behind it) or --init zero",
                slow.join(", ")
            )))
        }
    })
}

/// `raidkit create`.
pub fn run(args: CreateArgs) -> Result<(), CliError> {
    let policies = line_policies(&args)?;
    let (plan, checks) = plan_create(&args)?;
    let mut paths = args.members.clone();
    if let Some(j) = &args.write_journal {
        // The engine takes the journal as the last device.
        paths.push(j.clone());
    }
    let array = create_array_checked(&paths, &plan, checks, EngineConfig::default())?;
    let spinning = array.has_spinning_members();
    // A stack's spans initialise themselves (the RAID 0 over them has nothing to build).
    let initialising = std::iter::once(&array)
        .chain(array.spans().iter().map(|s| s.as_ref()))
        .any(|a| {
            a.pending_tasks()
                .contains(&raidkit_engine::TaskKind::Resync)
        });
    let stack_level = array.stack_level();
    let span_policy = array.spans().first().map(|s| s.status().consistency_policy);
    array.stop().map_err(engine_error)?;
    let status = array.status();
    // Its claims on the members go with it, so the scan below can read them.
    drop(array);
    let recorded = match &args.config {
        Some(config) => Some((config, record_in_config(config, &paths, &policies)?)),
        None => None,
    };
    if args.json {
        return print_json(&status);
    }
    match &status.stack {
        Some(stack) => println!(
            "raidkit: created RAID {} ({} data bytes): a RAID 0, UUID {}, over {} RAID {} spans of {} members ({})",
            stack.level,
            status.array_bytes,
            status.uuid,
            stack.spans.len(),
            stack.level / 10,
            stack.spans.first().map_or(0, |s| s.raid_disks),
            stack
                .spans
                .iter()
                .map(|s| format!("UUID {}", s.uuid))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => println!(
            "raidkit: created RAID {} ({} data bytes) over {} members, UUID {}",
            status.level,
            status.array_bytes,
            status.members.len(),
            status.uuid
        ),
    }
    if let Some((config, line)) = &recorded {
        println!("raidkit: added to {}:\n{line}", config.display());
    }
    warn_if_sparse_members_may_not_fit(&paths);
    if initialising {
        println!(
            "raidkit: initialising in the background: the array is usable now; a resync builds its {} from the start when it runs (`raidkit serve` starts it at once, `raidkit task --control SOCK status` shows its progress, a stop records where it got to). Until it finishes, a member lost is data lost where it has not passed",
            if status.level == 1 || status.level == 10 { "copies" } else { "parity" }
        );
    } else if checks_assumed_clean(&args) {
        println!("raidkit: --assume-clean: recorded in sync, nothing written but the metadata");
    }
    // A stack's write hole is its spans'.
    let level = stack_level.map_or(status.level, |l| l / 10);
    let policy = span_policy.unwrap_or(status.consistency_policy).name();
    if (4..=6).contains(&level) && policy != "journal" && policy != "ppl" {
        eprintln!(
            "raidkit: note: consistency policy {policy}: a crash followed by the loss of a member can corrupt stripes that were being written (the write hole); --write-journal DEV closes it{}",
            if level == 5 { ", as does --consistency-policy ppl" } else { "" }
        );
    }
    if policy == "ppl" && spinning && !args.json {
        eprintln!(
            "raidkit: note: members spin: the partial parity log writes to each stripe's parity member's log area, near the start of the disk, before the stripe, so a sequential write pays a seek there and back per stripe (RAID 5 on 6 emulated HDS72101, 1 MiB writes at queue depth 4: about 0.2x of the drives' rate, `raidkit bench disks`); --write-journal DEV on a fast device keeps the write hole closed without it, --consistency-policy bitmap is faster and leaves the hole open"
        );
    }
    Ok(())
}

fn checks_assumed_clean(args: &CreateArgs) -> bool {
    args.assume_clean || args.init.as_deref() == Some("none")
}

/// Warns when sparse image members could grow past the free space of their filesystem:
/// writes would then fail with "no space left" (the members are not failed for it, but the
/// array cannot take the data).
fn warn_if_sparse_members_may_not_fit(paths: &[PathBuf]) {
    let mut by_fs: Vec<(raidkit_disk::SparseGrowth, u64, usize)> = Vec::new();
    for p in paths {
        let Some(g) = raidkit_disk::sparse_growth(p) else {
            continue;
        };
        match by_fs.iter_mut().find(|(f, _, _)| f.device == g.device) {
            Some((_, grow, count)) => {
                *grow += g.unallocated_bytes;
                *count += 1;
            }
            None => {
                let grow = g.unallocated_bytes;
                by_fs.push((g, grow, 1));
            }
        }
    }
    for (fs, grow, count) in by_fs {
        if grow > fs.free_bytes {
            eprintln!(
                "raidkit: warning: {count} sparse member image{} on {} could outgrow it: {} MiB still to allocate, {} MiB free. Once it is full, writes fail with \"no space left\" (the members are not failed); allocate the images in full (fallocate -l SIZE FILE) or make room",
                if count == 1 { "" } else { "s" },
                fs.filesystem,
                grow >> 20,
                fs.free_bytes >> 20
            );
        }
    }
}
