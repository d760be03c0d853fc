//! The real driver: an [`Array`] runs the sans-IO core on worker threads over member [`Disk`]s
//! and keeps md's superblocks up to date.
//!
//! Owns: create (mdadm's placement, clean and consistent from the start), assemble (md's
//! rules: newest events wins; foreign, mismatched, duplicated, stale and undersized members are
//! refused with the member named; dirty + degraded RAID 4/5/6 needs force), the clean/dirty
//! state (dirty before the first write, clean on [`Array::stop`]), members failing (role 0xfffe
//! in the survivors' superblocks, events + 1), spares, and the blocking request API.
//!
//! Concurrency: each member has a worker thread with a queue; one request's member I/O runs on
//! all members at once, except where it is CPU work (page cache, tmpfs) and the CPUs are busy
//! anyway or the phase is small: then the calling thread does it (see `pool`); requests lock
//! only the stripes they touch, so requests on different stripes never wait on each other. Memory: requests in flight are bounded by
//! `EngineConfig::max_inflight` and each request's scratch by `stripe_cache_bytes /
//! max_inflight` (large requests are split into bounded batches), independent of array size.
//!
//! Durability and write ordering: a write returns once every member write of it has completed
//! (not necessarily durable). `flush()` fdatasyncs every in-sync member; a write with `fua`
//! does the same before it returns. The dirty mark reaches every member (written and flushed)
//! before the first data write after a clean state, so a crash afterwards is always detected
//! as an unclean stop at the next assembly. RAID 5 arrays with md's partial parity log (the
//! default for new RAID 5 arrays, see [`ConsistencyPolicy`] and `array/ppl.rs`) log every
//! stripe write on the stripe's parity member first and recompute parity from the log at the
//! next assembly, which closes the write hole and lets a dirty array start degraded. Other
//! RAID 4/5/6 arrays have no write-hole guard: after an unclean stop, stripes written at the
//! time may have parity that disagrees with data until the resync has run.

use crate::error::{EngineError, Result};
use crate::geometry::{Geo, Scheme};
use crate::plan::{
    self, BufRef, Dir, MemberState, Piece, PieceKind, PieceOp, PlanError, Step, UserBuf, SECTOR,
};
// The layout crate's level, beside the superblock's `Level` imported above.
use crate::meta::{read_superblock, write_superblock};
use crate::pool::{self, Batch, Job, JobKind, Semaphore, StripeLocks, Worker};
use raidkit_disk::Disk;
use raidkit_layout::Level as RaidLevel;
use raidkit_metadata::{
    mdadm_max_dev, CreateShape, DataLayout, DevRole, FeatureMap, Level, MdTime, NewMember, SetName,
    Superblock, SuperblockVersion, Uuid,
};
use serde::Serialize;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

mod bitmap;
mod health;
mod journal;
mod ppl;
mod write_log;
use crate::error::AbsentMember;
use crate::events::{ArrayEvent, EventLog};
pub use health::{TaskKind, TaskOutcome, TaskProgress, TaskRates, TaskReport};
use write_log::IntentHooks;

/// Memory and concurrency bounds of the driver.
#[derive(Clone, Copy, Debug)]
pub struct EngineConfig {
    /// Bytes of scratch (stripe) memory all requests in flight may hold together.
    pub stripe_cache_bytes: usize,
    /// Requests processed at the same time; further callers wait.
    pub max_inflight: usize,
    /// Threads a full-rate rebuild, replace, check, repair, resync or patrol runs its steps on. `None`: one
    /// per CPU while every member involved does memory copies (tmpfs, page cache), one
    /// otherwise (members that wait get their parallelism from the member workers instead).
    /// `Some(1)`: always one (the simulator's choice, so that a seed replays the same member
    /// I/O in the same order); `Some(k)`: k whenever the task runs at full rate, whatever the
    /// members.
    pub task_threads: Option<usize>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            stripe_cache_bytes: 64 << 20,
            max_inflight: 16,
            task_threads: None,
        }
    }
}

/// Parameters of a new array. UUIDs and the creation time come from the caller (the CLI reads
/// /dev/urandom and the clock), so creating is deterministic given them.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    pub level: i32,
    /// md layout number; `None` for mdadm's default (left-symmetric for RAID 5/6, n2 for 10).
    pub layout: Option<u32>,
    /// Chunk in sectors (ignored for RAID 1); mdadm's default is 1024 (512 KiB).
    pub chunk_sectors: u32,
    /// Active members; the remaining given members become spares.
    pub raid_devices: usize,
    pub metadata: SuperblockVersion,
    /// Sectors of each member to use (mdadm --size); `None` for all that fits.
    pub size_sectors: Option<u64>,
    /// The set name as stored (mdadm stores "homehost:name").
    pub name: String,
    pub set_uuid: [u8; 16],
    /// One per member.
    pub device_uuids: Vec<[u8; 16]>,
    pub ctime_seconds: u64,
    /// True when every member's data area is known to read as zeroes (freshly created sparse
    /// image files): all-zero data has all-zero P and Q, so the array is consistent as is.
    /// When false, create writes zeroes over the data areas to make it so.
    pub members_zeroed: bool,
    /// How parity and copies are kept consistent across a crash (mdadm's
    /// --consistency-policy).
    pub consistency: ConsistencyPolicy,
    pub config: EngineConfig,
}

/// mdadm's `--consistency-policy`: what keeps parity (or mirror copies) consistent with data
/// across an unclean stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConsistencyPolicy {
    /// Nothing on disk: after an unclean stop the whole array is resynced (md's "resync").
    Resync,
    /// An internal write-intent bitmap with one bit per `chunk_bytes` of the resync space:
    /// only regions with bits set are resynced, and a member that comes back is brought up
    /// to date from its bits (md's "bitmap").
    Bitmap { chunk_bytes: u64 },
    /// md's partial parity log (RAID 5 only): every write to a stripe is first logged on the
    /// stripe's parity member, and parity is recomputed from the log at the next assembly,
    /// which closes the write hole (md's "ppl").
    Ppl,
    /// md's write journal on a separate device (RAID 4/5/6): every write is first logged,
    /// data and parity, and replayed after a crash, which closes the write hole whichever
    /// member is lost (md's "journal").
    Journal,
    /// raidkit's default for the level: the partial parity log for RAID 5 when the members
    /// have room for md's log area next to the data, a resync otherwise.
    Auto,
}

impl ConsistencyPolicy {
    /// raidkit's default for a new array: the partial parity log for RAID 5 (the only level
    /// md has it for), a resync otherwise.
    pub fn default_for(level: i32) -> ConsistencyPolicy {
        if RaidLevel::from_md(level) == Ok(RaidLevel::Raid5) {
            ConsistencyPolicy::Ppl
        } else {
            ConsistencyPolicy::Resync
        }
    }

    /// The name mdadm uses.
    pub fn name(self) -> &'static str {
        match self {
            ConsistencyPolicy::Resync => "resync",
            ConsistencyPolicy::Bitmap { .. } => "bitmap",
            ConsistencyPolicy::Ppl => "ppl",
            ConsistencyPolicy::Journal => "journal",
            ConsistencyPolicy::Auto => "auto",
        }
    }
}

/// How to assemble.
#[derive(Clone, Debug, Default)]
pub struct AssembleOptions {
    /// Accept stale members and start a dirty degraded RAID 4/5/6 (mdadm --force).
    pub force: bool,
    /// Refuse unless the members form this level.
    pub level: Option<i32>,
    /// Never write anything to the members (no dirty mark, failures only in memory).
    pub read_only: bool,
    /// Refuse members whose array UUID differs from this one.
    pub uuid: Option<[u8; 16]>,
    /// mdadm's `--run`: start writable even when members the superblocks list as active were
    /// not given (they are then recorded faulty). Without it such an assembly is refused with
    /// [`EngineError::Incomplete`] unless `read_only`.
    pub run: bool,
    pub config: EngineConfig,
}

/// What assembly found, for the caller to report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AssembleReport {
    /// The array was not stopped cleanly (resync_offset != ~0).
    pub was_dirty: bool,
    /// Members not used, with why.
    pub excluded: Vec<(String, String)>,
    /// Other observations, one sentence each.
    pub notes: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArrayState {
    /// Stopped cleanly and not written since assembly.
    Clean,
    /// Written since assembly (superblocks say dirty until stop).
    Active,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemberStatus {
    pub index: usize,
    pub name: String,
    /// Raid slot for active members.
    pub slot: Option<usize>,
    /// "active", "spare", "faulty", "journal".
    pub role: String,
    pub state: Option<MemberState>,
    pub device_uuid: String,
    pub data_offset_sectors: u64,
    pub events: u64,
    /// Ranges the member's md bad-block log lists (reads there come from redundancy).
    pub bad_block_ranges: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Status {
    pub uuid: String,
    pub name: String,
    pub metadata: String,
    pub level: i32,
    pub layout: u32,
    pub raid_disks: usize,
    pub chunk_sectors: u64,
    pub member_data_sectors: u64,
    pub array_bytes: u64,
    pub state: ArrayState,
    pub degraded: bool,
    pub failed: bool,
    pub read_only: bool,
    /// How parity is kept consistent across an unclean stop ("resync" or "ppl").
    pub consistency_policy: ConsistencyPolicy,
    pub events: u64,
    /// Slots without a working member.
    pub missing_slots: Vec<usize>,
    pub members: Vec<MemberStatus>,
    /// The background task running now.
    pub task: Option<TaskProgress>,
    /// Work the array needs (rebuild, replace, resync), most urgent first.
    pub pending: Vec<TaskKind>,
    /// Tasks finished since assembly, oldest first.
    pub finished_tasks: Vec<TaskReport>,
    /// Where a resync after an unclean stop stands (member or array sectors, see the task).
    pub resync_from_sectors: Option<u64>,
    /// What happened to the array since assembly (member failures and such), oldest first,
    /// as sentences: the newest [`crate::events::EVENTS_KEPT`] of [`Array::events_since`].
    pub log: Vec<String>,
}

struct Member {
    disk: Arc<dyn Disk>,
    worker: Worker,
    data_offset_bytes: u64,
}

struct State {
    /// Every device attached, in the order given (spares and faulty ones too); `None` once
    /// removed.
    members: Vec<Option<Arc<Member>>>,
    /// Each attached member's superblock (kept in memory, written on every change).
    sbs: Vec<Superblock>,
    slot_member: Vec<Option<usize>>,
    slot_state: Vec<MemberState>,
    dirty: bool,
    failed: Option<String>,
    events: EventLog,
    /// Per slot: a member being copied from the slot's member (md's replacement).
    replacement: Vec<Option<usize>>,
    /// Per slot: read errors corrected from redundancy since the slot's member joined; past
    /// [`MAX_CORRECTED_READ_ERRORS`] the member is failed (md's max_corrected_read_errors).
    read_errors: Vec<u32>,
    /// A resync after an unclean stop is pending from here (member sectors, or array sectors
    /// for RAID 10); `None` when parity and copies are known consistent.
    resync_from: Option<u64>,
    /// Per member (index as in `members`): ranges md's bad-block log lists, in member data
    /// sectors (the log itself stores device sectors). Reads never go there.
    bad: Vec<Vec<(u64, u64)>>,
    /// Per slot: the member being rebuilt came back and only needs what the write-intent
    /// bitmap marks (md's bitmap-based recovery after a re-add).
    bitmap_recovery: Vec<bool>,
}

/// An assembled array. All methods take `&self` and may be called from many threads.
pub struct Array {
    geo: Geo,
    version: SuperblockVersion,
    read_only: bool,
    config: EngineConfig,
    max_band_sectors: u64,
    batch_budget_bytes: usize,
    state: Mutex<State>,
    locks: StripeLocks,
    inflight: Semaphore,
    /// Serialises superblock updates (dirty marking, failures) without blocking data I/O.
    sb_lock: Mutex<()>,
    /// Background tasks (rebuild, resync, check, patrol) and their service thread.
    bg: health::Bg,
    /// A resync is pending: mirror reads then go to the first live copy, as md's do, so a
    /// read never sees two different versions of a sector the crash left unsynced.
    resync_pending: AtomicBool,
    /// Some slot has a replacement (checked on every write without taking the state lock).
    has_replacement: AtomicBool,
    /// Some member has bad blocks (checked on every request without taking the state lock).
    has_bad: AtomicBool,
    /// md's internal write-intent bitmap, when the array has one.
    bitmap: Option<bitmap::WriteIntent>,
    /// The log that closes the write hole, when the array has one: md's partial parity log
    /// or its write journal (see `array/write_log.rs`).
    log: Option<Box<dyn write_log::WriteLog>>,
    /// A write was refused for want of space and none has succeeded since.
    no_space: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // State stays consistent across a panic in another thread: every update is applied whole.
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn now() -> MdTime {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // Whole seconds: the kernel reads utime as plain seconds (microseconds in the top bits
    // make it show a date in 2106), and md itself writes seconds only.
    MdTime::new(d.as_secs(), 0)
}

fn meta_err(e: impl std::fmt::Display) -> EngineError {
    EngineError::Metadata(e.to_string())
}

/// mdadm's default layout for a level: left-symmetric for RAID 5 and 6, n2 for RAID 10.
pub fn default_layout(level: i32) -> u32 {
    match RaidLevel::from_md(level) {
        Ok(RaidLevel::Raid5) => raidkit_layout::Raid5Algorithm::LeftSymmetric.md_layout(),
        Ok(RaidLevel::Raid6) => raidkit_layout::Raid6Algorithm::LeftSymmetric.md_layout(),
        Ok(RaidLevel::Raid10) => raidkit_layout::Raid10Layout::near(2).md_layout(),
        _ => 0,
    }
}

fn level_from_md(level: i32) -> Level {
    Level::from_md(level)
}

impl Array {
    /// Creates a new array on `members` (the first `raid_devices` active, the rest spares),
    /// with raidkit's default consistency policy for the level
    /// ([`ConsistencyPolicy::default_for`]: the partial parity log for RAID 5).
    ///
    /// Members too small for md's log area next to the data (mdadm reserves 1 MiB for it,
    /// which moves data 1 MiB further in) get the resync policy instead; [`Status`] and
    /// `examine` show which one an array has.
    pub fn create(members: Vec<Box<dyn Disk>>, opts: CreateOptions) -> Result<Array> {
        if opts.consistency != ConsistencyPolicy::Auto {
            let policy = opts.consistency;
            return Self::create_with_policy(members, opts, policy);
        }
        let mut policy = ConsistencyPolicy::default_for(opts.level);
        if policy == ConsistencyPolicy::Ppl {
            let fits = members.iter().all(|m| {
                DataLayout::mdadm_create_ppl(&CreateShape {
                    version: opts.metadata,
                    device_sectors: m.size_bytes() / 512,
                    level: level_from_md(opts.level),
                    layout: opts.layout.unwrap_or_else(|| default_layout(opts.level)),
                    raid_disks: opts.raid_devices as u32,
                    chunk_sectors: opts.chunk_sectors,
                    with_bitmap: false,
                })
                .is_ok_and(|dl| {
                    dl.size_sectors > 0
                        && !matches!(opts.size_sectors, Some(s) if s > dl.size_sectors)
                })
            });
            if !fits {
                policy = ConsistencyPolicy::Resync;
            }
        }
        Self::create_with_policy(members, opts, policy)
    }

    /// Creates a new array with the given consistency policy (mdadm's
    /// `--consistency-policy`); `Ppl` is refused for levels other than RAID 5, as mdadm does.
    pub fn create_with_policy(
        members: Vec<Box<dyn Disk>>,
        mut opts: CreateOptions,
        policy: ConsistencyPolicy,
    ) -> Result<Array> {
        if policy == ConsistencyPolicy::Auto {
            opts.consistency = ConsistencyPolicy::Auto;
            return Self::create(members, opts);
        }
        opts.consistency = policy;
        // The checks before there is a geometry ask the level as a type too.
        let raid_level =
            RaidLevel::from_md(opts.level).map_err(|e| EngineError::Invalid(e.to_string()))?;
        let with_ppl = policy == ConsistencyPolicy::Ppl;
        if with_ppl && raid_level != RaidLevel::Raid5 {
            return Err(EngineError::Invalid(format!(
                "the partial parity log (consistency policy ppl) is for RAID 5 only, as in md; RAID {} has none",
                opts.level
            )));
        }
        let place = |shape: &CreateShape| {
            if with_ppl {
                DataLayout::mdadm_create_ppl(shape)
            } else {
                DataLayout::mdadm_create(shape)
            }
        };
        let n = members.len();
        if opts.raid_devices == 0 || opts.raid_devices > n {
            return Err(EngineError::Invalid(format!(
                "{} raid devices asked for but {} members given",
                opts.raid_devices, n
            )));
        }
        if opts.device_uuids.len() != n {
            return Err(EngineError::Invalid(format!(
                "{} device UUIDs for {} members",
                opts.device_uuids.len(),
                n
            )));
        }
        for (i, m) in members.iter().enumerate() {
            if m.is_read_only() {
                return Err(EngineError::Invalid(format!(
                    "{}: opened read-only; create writes to it",
                    m.name()
                )));
            }
            for other in &members[..i] {
                if other.name() == m.name() {
                    return Err(EngineError::Invalid(format!("{}: listed twice", m.name())));
                }
            }
        }
        let level = opts.level;
        match opts.consistency {
            ConsistencyPolicy::Resync => {}
            ConsistencyPolicy::Bitmap { .. } if raid_level == RaidLevel::Raid0 => {
                return Err(EngineError::Invalid(
                    "RAID 0 has no redundancy to keep consistent: no bitmap".into(),
                ))
            }
            ConsistencyPolicy::Bitmap { chunk_bytes } => {
                if chunk_bytes != 0 && (chunk_bytes < 4096 || !chunk_bytes.is_power_of_two()) {
                    return Err(EngineError::Invalid(format!(
                        "bitmap chunk of {chunk_bytes} bytes: md needs a power of two of at least 4 KiB (0 for mdadm's default)"
                    )));
                }
            }
            ConsistencyPolicy::Journal
                if !matches!(
                    raid_level,
                    RaidLevel::Raid4 | RaidLevel::Raid5 | RaidLevel::Raid6
                ) =>
            {
                return Err(EngineError::Invalid(format!(
                    "the write journal is for RAID 4, 5 and 6, as in md; RAID {level} has none"
                )))
            }
            ConsistencyPolicy::Journal if n < opts.raid_devices + 1 => {
                return Err(EngineError::Invalid(
                    "the write journal needs a device of its own after the members".into(),
                ))
            }
            ConsistencyPolicy::Ppl | ConsistencyPolicy::Auto | ConsistencyPolicy::Journal => {}
        }
        // With a journal, the last device given is the journal.
        let with_journal = opts.consistency == ConsistencyPolicy::Journal;
        let journal_index = with_journal.then_some(n - 1);
        let layout = opts.layout.unwrap_or_else(|| default_layout(level));
        let chunk_sectors = if raid_level == RaidLevel::Raid1 {
            0
        } else {
            opts.chunk_sectors
        };
        let device_sectors = members
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != journal_index)
            .map(|(_, m)| m.size_bytes() / 512)
            .min()
            .unwrap_or(0);
        let dl = place(&CreateShape {
            version: opts.metadata,
            device_sectors,
            level: level_from_md(level),
            layout,
            raid_disks: opts.raid_devices as u32,
            chunk_sectors,
            with_bitmap: false,
        })
        .map_err(meta_err)?;
        let fits = if chunk_sectors > 0 {
            dl.data_size_sectors / chunk_sectors as u64 * chunk_sectors as u64
        } else {
            dl.data_size_sectors
        };
        let size_sectors = match opts.size_sectors {
            Some(s) if s > fits => {
                return Err(EngineError::SizeMismatch {
                    member: members
                        .iter()
                        .min_by_key(|m| m.size_bytes())
                        .map(|m| m.name().to_string())
                        .unwrap_or_default(),
                    detail: format!("--size of {s} sectors does not fit: at most {fits} sectors per member are free"),
                })
            }
            Some(s) => {
                if chunk_sectors > 0 {
                    s / chunk_sectors as u64 * chunk_sectors as u64
                } else {
                    s
                }
            }
            None if dl.size_sectors > 0 => dl.size_sectors,
            None => fits,
        };
        let geo = Geo::new(
            level,
            layout,
            opts.raid_devices,
            chunk_sectors as u64,
            size_sectors,
        )
        .map_err(|e| EngineError::Invalid(e.to_string()))?;
        let total = n as u32;
        let max_dev = mdadm_max_dev(total);
        let roles: Vec<(u32, DevRole)> = (0..total)
            .map(|i| {
                let r = if (i as usize) < opts.raid_devices {
                    DevRole::Active(i as u16)
                } else if Some(i as usize) == journal_index {
                    DevRole::Journal
                } else {
                    DevRole::Spare
                };
                (i, r)
            })
            .collect();
        let ctime = MdTime::new(opts.ctime_seconds, 0);
        let mut sbs = Vec::with_capacity(n);
        let with_bitmap = matches!(opts.consistency, ConsistencyPolicy::Bitmap { .. });
        // (offset from the superblock, mdadm's default chunk) of the internal bitmap.
        let mut bitmap_place: Option<(i32, u64)> = None;
        for (i, disk) in members.iter().enumerate() {
            let dl_i = place(&CreateShape {
                version: opts.metadata,
                device_sectors: disk.size_bytes() / 512,
                level: level_from_md(level),
                layout,
                raid_disks: opts.raid_devices as u32,
                chunk_sectors,
                with_bitmap,
            })
            .map_err(meta_err)?;
            if let Some(p) = dl_i.bitmap {
                bitmap_place.get_or_insert((p.offset_sectors, p.chunk_bytes));
            }
            let sb = Superblock::new_member(&NewMember {
                set_uuid: Uuid(opts.set_uuid),
                device_uuid: Uuid(opts.device_uuids[i]),
                set_name: SetName::new(&opts.name),
                ctime,
                level: level_from_md(level),
                layout,
                chunk_sectors,
                raid_disks: opts.raid_devices as u32,
                max_dev,
                dev_number: i as u32,
                role: roles[i].1,
                roles: roles.clone(),
                size_sectors: geo.member_data_sectors,
                data_offset_sectors: dl_i.data_offset_sectors,
                // RAID 0 records only the part it uses: md builds RAID 0 zones from each
                // member's data size, and members of unequal recorded sizes would make a
                // multi-zone array, which md refuses without a zone layout flag.
                data_size_sectors: if geo.level() == RaidLevel::Raid0 {
                    geo.member_data_sectors.min(dl_i.data_size_sectors)
                } else {
                    dl_i.data_size_sectors
                },
                super_offset_sectors: dl_i.super_offset_sectors,
                bitmap_offset: dl_i.bitmap.map(|p| p.offset_sectors),
                bblog: if dl_i.bblog_size_sectors > 0 {
                    Some((dl_i.bblog_offset, dl_i.bblog_size_sectors))
                } else {
                    None
                },
                events: 0,
                clean: true,
            })
            .map_err(meta_err)?;
            let mut sb = sb;
            if let Some(area) = dl_i.ppl {
                sb.feature_map.insert(FeatureMap::PPL);
                sb.set_ppl_area(area);
            }
            if with_journal {
                sb.feature_map.insert(FeatureMap::JOURNAL);
            }
            if Some(i) == journal_index {
                // The whole data area is log; journal_tail (recovery_offset) starts at 0.
                sb.data_size_sectors = dl_i.data_size_sectors;
                sb.recovery_offset_sectors = 0;
            } else if sb.data_size_sectors < geo.member_data_sectors {
                return Err(EngineError::SizeMismatch {
                    member: disk.name().to_string(),
                    detail: format!(
                        "only {} data sectors, the array needs {}",
                        sb.data_size_sectors, geo.member_data_sectors
                    ),
                });
            }
            sbs.push(sb);
        }
        // Space for everything that is not data (superblock, bitmap, bad-block log, partial
        // parity log, the whole journal device), before anything is written: metadata writes
        // then never meet a full filesystem, and create fails cleanly when there is no room.
        for (disk, sb) in members.iter().zip(&sbs) {
            let size = disk.size_bytes();
            let start = (sb.data_offset_sectors * 512).min(size);
            let end = if sb.role() == DevRole::Journal {
                start
            } else {
                ((sb.data_offset_sectors + sb.data_size_sectors) * 512).min(size)
            };
            disk.reserve(0, start)?;
            // Metadata after the data: v1.0's superblock at the end of the device.
            if sb.super_offset_sectors * 512 >= end {
                disk.reserve(end, size - end)?;
            }
        }
        // Make the array consistent: zero data areas unless known zero already.
        if !opts.members_zeroed {
            for (i, disk) in members.iter().enumerate().take(opts.raid_devices) {
                disk.write_zeroes(
                    sbs[i].data_offset_sectors * 512,
                    geo.member_data_sectors * 512,
                )?;
            }
        }
        let intent = match (opts.consistency, bitmap_place) {
            (ConsistencyPolicy::Bitmap { chunk_bytes }, Some((offset, default_chunk))) => {
                let chunk = if chunk_bytes == 0 {
                    default_chunk
                } else {
                    chunk_bytes
                };
                let sync = if geo.level() == RaidLevel::Raid10 {
                    geo.array_sectors()
                } else {
                    geo.member_data_sectors
                };
                let space =
                    raidkit_metadata::data_layout::calc_bitmap_size_bytes(sync, chunk, 4096) / 512;
                for sb in &sbs {
                    // 1.1/1.2: the bitmap sits between the superblock and the data.
                    let room = if offset > 0 {
                        sb.data_offset_sectors as i64
                            - sb.super_offset_sectors as i64
                            - offset as i64
                    } else {
                        -(offset as i64)
                    };
                    if (space as i64) > room {
                        return Err(EngineError::Invalid(format!(
                            "a bitmap chunk of {chunk} bytes needs {space} sectors of bitmap, but only {room} are reserved; use a larger chunk"
                        )));
                    }
                }
                Some(bitmap::WriteIntent::create(
                    opts.set_uuid,
                    offset,
                    sync,
                    chunk,
                    0,
                )?)
            }
            (ConsistencyPolicy::Bitmap { .. }, None) => {
                return Err(EngineError::Invalid(
                    "mdadm's placement gave no room for an internal bitmap on these members".into(),
                ))
            }
            _ => None,
        };
        for (disk, sb) in members.iter().zip(&sbs) {
            write_superblock(disk.as_ref(), sb, opts.metadata)?;
            if let Some(area) = ppl::area_of(sb) {
                ppl::write_empty_log(
                    disk.as_ref(),
                    area,
                    raidkit_metadata::ppl::ppl_signature(&opts.set_uuid),
                )?;
            }
        }
        if let Some(wi) = &intent {
            let image = wi.image_for_create();
            for (disk, sb) in members.iter().zip(&sbs) {
                let at = (sb.super_offset_sectors as i64 + wi.offset_sectors() as i64) as u64 * 512;
                disk.write_at(&image, at)?;
            }
        }
        for disk in &members {
            disk.flush()?;
        }
        let slot_member = (0..opts.raid_devices).map(Some).collect();
        let slot_state = vec![MemberState::InSync; opts.raid_devices];
        let mut array = Self::build(
            geo,
            opts.metadata,
            false,
            opts.config,
            members,
            sbs,
            slot_member,
            slot_state,
            false,
        )?;
        array.bitmap = intent;
        let mut notes = Vec::new();
        array.start_log(write_log::LogStart::Created, &mut notes)?;
        Ok(array)
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        geo: Geo,
        version: SuperblockVersion,
        read_only: bool,
        config: EngineConfig,
        disks: Vec<Box<dyn Disk>>,
        sbs: Vec<Superblock>,
        slot_member: Vec<Option<usize>>,
        slot_state: Vec<MemberState>,
        dirty: bool,
    ) -> Result<Array> {
        let mut members = Vec::with_capacity(disks.len());
        for (i, (disk, sb)) in disks.into_iter().zip(&sbs).enumerate() {
            let disk: Arc<dyn Disk> = Arc::from(disk);
            let worker = Worker::spawn(format!("raidkit-m{i}"), disk.clone()).map_err(|e| {
                EngineError::Invalid(format!("cannot start a member worker thread: {e}"))
            })?;
            members.push(Some(Arc::new(Member {
                disk,
                worker,
                data_offset_bytes: sb.data_offset_sectors * 512,
            })));
        }
        let config = EngineConfig {
            stripe_cache_bytes: config.stripe_cache_bytes.max(1 << 20),
            max_inflight: config.max_inflight.max(1),
            task_threads: config.task_threads.map(|k| k.max(1)),
        };
        let batch_budget_bytes = config.stripe_cache_bytes / config.max_inflight;
        let per_block = batch_budget_bytes / (geo.raid_disks + 2);
        let mut max_band_sectors = (per_block / SECTOR) as u64 / 8 * 8;
        max_band_sectors = max_band_sectors.clamp(8, 4096);
        let log = write_log::open(&geo, &sbs, &members)?;
        if let Some(l) = &log {
            // A band must fit what one write phase may log.
            max_band_sectors = max_band_sectors.min(l.max_band_sectors(&geo)).max(8);
        }
        Ok(Array {
            version,
            read_only,
            config,
            max_band_sectors,
            batch_budget_bytes,
            state: Mutex::new(State {
                members,
                sbs,
                slot_member,
                slot_state,
                dirty,
                failed: None,
                events: EventLog::default(),
                replacement: vec![None; geo.raid_disks],
                read_errors: vec![0; geo.raid_disks],
                resync_from: None,
                bad: Vec::new(),
                bitmap_recovery: vec![false; geo.raid_disks],
            }),
            locks: StripeLocks::default(),
            inflight: Semaphore::new(config.max_inflight),
            sb_lock: Mutex::new(()),
            bg: health::Bg::new(),
            resync_pending: AtomicBool::new(false),
            has_replacement: AtomicBool::new(false),
            has_bad: AtomicBool::new(false),
            no_space: AtomicBool::new(false),
            bitmap: None,
            log,
            geo,
        })
    }

    /// Assembles an array from its members, validating them the way md and mdadm do.
    pub fn assemble(
        members: Vec<Box<dyn Disk>>,
        opts: AssembleOptions,
    ) -> Result<(Array, AssembleReport)> {
        let mut report = AssembleReport::default();
        if members.is_empty() {
            return Err(EngineError::Invalid("no members given".into()));
        }
        // 1. Superblocks.
        let mut found = Vec::with_capacity(members.len());
        for m in &members {
            found.push(read_superblock(m.as_ref())?);
        }
        // 2. Same member twice.
        for i in 0..members.len() {
            for j in 0..i {
                if members[i].name() == members[j].name()
                    || found[i].sb.device_uuid == found[j].sb.device_uuid
                {
                    return Err(EngineError::Duplicate {
                        member: members[i].name().to_string(),
                        other: members[j].name().to_string(),
                        device_uuid: found[i].sb.device_uuid.to_mdadm_string(),
                    });
                }
            }
        }
        // 3. One array: the given UUID or the first member's.
        let (ref_uuid, ref_name) = match opts.uuid {
            Some(u) => (Uuid(u), "the UUID asked for".to_string()),
            None => (found[0].sb.set_uuid, members[0].name().to_string()),
        };
        for (m, f) in members.iter().zip(&found) {
            if f.sb.set_uuid != ref_uuid {
                return Err(EngineError::Foreign {
                    member: m.name().to_string(),
                    member_uuid: f.sb.set_uuid.to_mdadm_string(),
                    array_uuid: ref_uuid.to_mdadm_string(),
                    reference: ref_name,
                });
            }
        }
        // 4. The members must agree on the array's shape. The shape most members share is
        //    the reference (ties go to the newest), so the odd member out is the one named.
        let newest = (0..found.len())
            .max_by_key(|&i| found[i].sb.events)
            .unwrap_or(0);
        let shape = |f: &crate::meta::FoundSuperblock| {
            (
                f.sb.level.to_md(),
                f.sb.layout,
                f.sb.chunk_sectors,
                f.sb.raid_disks,
                f.version.name(),
            )
        };
        let count =
            |k: &(i32, u32, u32, u32, &str)| found.iter().filter(|f| shape(f) == *k).count();
        let mut reference = newest;
        for i in 0..found.len() {
            if count(&shape(&found[i])) > count(&shape(&found[reference])) {
                reference = i;
            }
        }
        let rsb = found[reference].sb.clone();
        let rname = members[reference].name().to_string();
        for (m, f) in members.iter().zip(&found) {
            let s = &f.sb;
            let checks: [(&'static str, String, String); 5] = [
                (
                    "level",
                    s.level.to_md().to_string(),
                    rsb.level.to_md().to_string(),
                ),
                ("layout", s.layout.to_string(), rsb.layout.to_string()),
                (
                    "chunk size (sectors)",
                    s.chunk_sectors.to_string(),
                    rsb.chunk_sectors.to_string(),
                ),
                (
                    "raid devices",
                    s.raid_disks.to_string(),
                    rsb.raid_disks.to_string(),
                ),
                (
                    "metadata version",
                    f.version.name().to_string(),
                    found[reference].version.name().to_string(),
                ),
            ];
            for (field, a, b) in checks {
                if a != b {
                    return Err(EngineError::Mismatched {
                        member: m.name().to_string(),
                        field,
                        member_value: a,
                        array_value: b,
                        reference: rname.clone(),
                    });
                }
            }
        }
        // The newest superblock speaks for the array's state.
        let nsb = found[newest].sb.clone();
        let version = found[newest].version;
        let level = nsb.level.to_md();
        if let Some(asked) = opts.level {
            if asked != level {
                return Err(EngineError::WrongLevel {
                    asked,
                    found: level,
                });
            }
        }
        if nsb.reshape().is_some() {
            return Err(EngineError::Invalid(
                "a reshape is in progress on these members; raidkit does not continue reshapes"
                    .into(),
            ));
        }
        let raid_disks = nsb.raid_disks as usize;
        // 5. Sizes.
        let is_journal = |f: &crate::meta::FoundSuperblock| f.sb.role() == DevRole::Journal;
        let used = if nsb.size_sectors > 0 {
            nsb.size_sectors
        } else {
            let min = found
                .iter()
                .filter(|f| !is_journal(f))
                .map(|f| f.sb.data_size_sectors)
                .min()
                .unwrap_or(0);
            if nsb.chunk_sectors > 0 {
                min / nsb.chunk_sectors as u64 * nsb.chunk_sectors as u64
            } else {
                min
            }
        };
        for (m, f) in members.iter().zip(&found) {
            if is_journal(f) {
                if f.sb.data_offset_sectors + f.sb.data_size_sectors > f.device_sectors {
                    return Err(EngineError::SizeMismatch {
                        member: m.name().to_string(),
                        detail: format!(
                            "the journal's data area ends at sector {} of a {}-sector device",
                            f.sb.data_offset_sectors + f.sb.data_size_sectors,
                            f.device_sectors
                        ),
                    });
                }
                continue;
            }
            let need = f.sb.data_offset_sectors + used;
            if f.sb.data_size_sectors < used || need > f.device_sectors {
                return Err(EngineError::SizeMismatch {
                    member: m.name().to_string(),
                    detail: format!(
                        "holds {} data sectors from sector {} on a {}-sector device, the array needs {} per member; the member is too small or truncated",
                        f.sb.data_size_sectors, f.sb.data_offset_sectors, f.device_sectors, used
                    ),
                });
            }
        }
        let geo = Geo::new(
            level,
            nsb.layout,
            raid_disks,
            nsb.chunk_sectors as u64,
            used,
        )
        .map_err(|e| EngineError::Invalid(e.to_string()))?;
        // 6. Roles from the newest superblock.
        let mut slot_member: Vec<Option<usize>> = vec![None; raid_disks];
        let mut slot_state = vec![MemberState::Missing; raid_disks];
        let mut stale: Vec<usize> = Vec::new();
        let mut use_member = vec![true; members.len()];
        // Newest members first, so that when two claim one slot (a removed member whose
        // device number was reused for its replacement), the newer keeps it, as mdadm does.
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(found[i].sb.events));
        // Members being copied onto (md's replacement) share their slot's role number.
        let mut replacements: Vec<(usize, usize)> = Vec::new();
        // Device numbers already claimed, by member: md reuses the number of a removed member
        // for the next one added, so an old member may carry its successor's number.
        let mut dev_owner: std::collections::HashMap<u32, usize> = Default::default();
        for i in order {
            let (m, f) = (&members[i], &found[i]);
            if let Some(&newer) = dev_owner.get(&f.sb.dev_number) {
                if f.sb.events < found[newer].sb.events {
                    report.excluded.push((
                        m.name().into(),
                        format!(
                            "device number {} now belongs to {} (events {} > {}); this member was replaced",
                            f.sb.dev_number,
                            members[newer].name(),
                            found[newer].sb.events,
                            f.sb.events
                        ),
                    ));
                    // Never written again: its number is its successor's.
                    use_member[i] = false;
                    continue;
                }
                return Err(EngineError::Invalid(format!(
                    "{} and {} both claim device number {} at the same events ({}); \
                     leave out the one that no longer belongs to the array",
                    m.name(),
                    members[newer].name(),
                    f.sb.dev_number,
                    f.sb.events
                )));
            }
            dev_owner.insert(f.sb.dev_number, i);
            let role = nsb.role_of(f.sb.dev_number);
            match role {
                DevRole::Active(slot)
                    if f.sb.feature_map.contains(FeatureMap::REPLACEMENT)
                        && (slot as usize) < raid_disks =>
                {
                    if f.sb.events < nsb.events {
                        report.excluded.push((
                            m.name().into(),
                            format!(
                                "replacement for slot {slot} is out of date (events {} < {}); left out",
                                f.sb.events, nsb.events
                            ),
                        ));
                        use_member[i] = false;
                    } else {
                        replacements.push((i, slot as usize));
                    }
                }
                DevRole::Active(slot) => {
                    let slot = slot as usize;
                    if slot >= raid_disks {
                        report.excluded.push((
                            m.name().into(),
                            format!("role {slot} is beyond raid devices"),
                        ));
                        use_member[i] = false;
                        continue;
                    }
                    if let Some(other) = slot_member[slot] {
                        if f.sb.events < found[other].sb.events {
                            report.excluded.push((
                                m.name().into(),
                                format!(
                                    "slot {slot} is held by {} (events {} > {}); this member was replaced",
                                    members[other].name(),
                                    found[other].sb.events,
                                    f.sb.events
                                ),
                            ));
                            // Left out entirely, as mdadm does: it must never be written with
                            // the array's superblock (its device number may be its successor's).
                            use_member[i] = false;
                            continue;
                        }
                        return Err(EngineError::DuplicateRole {
                            member: m.name().to_string(),
                            other: members[other].name().to_string(),
                            slot,
                        });
                    }
                    if f.sb.events < nsb.events && f.sb.role() != DevRole::Active(slot as u16) {
                        report.excluded.push((
                            m.name().into(),
                            "its own superblock no longer gives it this slot".into(),
                        ));
                        use_member[i] = false;
                        continue;
                    }
                    slot_member[slot] = Some(i);
                    // mdadm's event margin: one event behind is an interrupted superblock
                    // update (they are written member by member), not missed data.
                    if f.sb.events + 1 < nsb.events {
                        stale.push(i);
                        slot_state[slot] = MemberState::Faulty;
                    } else if let Some(at) = f.sb.recovery_offset() {
                        report.notes.push(format!(
                            "{}: being rebuilt into slot {slot}, {at} of {used} sectors done; the rebuild resumes there",
                            m.name()
                        ));
                        slot_state[slot] = MemberState::Rebuilding;
                    } else {
                        slot_state[slot] = MemberState::InSync;
                    }
                }
                DevRole::Faulty => {
                    report.excluded.push((
                        m.name().into(),
                        "marked faulty in the newest superblock".into(),
                    ));
                    use_member[i] = false;
                }
                DevRole::Spare => {
                    report.notes.push(format!("{}: spare", m.name()));
                }
                DevRole::Journal if nsb.feature_map.contains(FeatureMap::JOURNAL) => {
                    if f.sb.events + 1 < nsb.events && opts.force {
                        report.excluded.push((
                            m.name().into(),
                            format!(
                                "stale write journal (events {} < {}); left out",
                                f.sb.events, nsb.events
                            ),
                        ));
                        use_member[i] = false;
                        continue;
                    }
                    if f.sb.events + 1 < nsb.events {
                        return Err(EngineError::Stale {
                            member: m.name().to_string(),
                            events: f.sb.events,
                            newest_events: nsb.events,
                        });
                    }
                    report.notes.push(format!("{}: write journal", m.name()));
                }
                other => {
                    report
                        .excluded
                        .push((m.name().into(), format!("role {other:?} is not supported")));
                    use_member[i] = false;
                }
            }
        }
        let failed_now =
            |states: &[MemberState]| states.iter().map(|s| !s.usable()).collect::<Vec<bool>>();
        // Stale members --force took back: their superblocks get the array's events.
        let mut forced_back = false;
        if !stale.is_empty() {
            if !opts.force {
                let i = stale[0];
                return Err(EngineError::Stale {
                    member: members[i].name().to_string(),
                    events: found[i].sb.events,
                    newest_events: nsb.events,
                });
            }
            if geo.survives(&failed_now(&slot_state)) {
                for &i in &stale {
                    report.excluded.push((
                        members[i].name().into(),
                        format!(
                            "stale (events {} < {}); left out: the array runs without it, and --force takes a stale member back only where the array cannot start otherwise (as mdadm --force); `raidkit add` brings it back up to date",
                            found[i].sb.events, nsb.events
                        ),
                    ));
                }
            } else {
                // md --force: take stale members back, newest first, until the array can run.
                let mut by_events = stale.clone();
                by_events.sort_by_key(|&i| std::cmp::Reverse(found[i].sb.events));
                for i in by_events {
                    if geo.survives(&failed_now(&slot_state)) {
                        report.excluded.push((
                            members[i].name().into(),
                            "stale; left out (the array can start without it)".into(),
                        ));
                        continue;
                    }
                    if let Some(slot) = slot_member.iter().position(|&m| m == Some(i)) {
                        slot_state[slot] = MemberState::InSync;
                        forced_back = true;
                        report.notes.push(format!(
                            "{}: stale (events {} < {}) but taken back because of --force (the array cannot start without it; its events are raised to the array's, as mdadm does)",
                            members[i].name(),
                            found[i].sb.events,
                            nsb.events
                        ));
                    }
                }
            }
        }
        // A replacement whose slot has no member in sync carries on as the slot's rebuild;
        // otherwise it stays the slot's replacement and the copy resumes.
        let mut keep_replacing: Vec<(usize, usize)> = Vec::new();
        let mut displaced: Vec<u32> = Vec::new();
        for (i, slot) in replacements {
            if slot_state[slot] == MemberState::InSync {
                report.notes.push(format!(
                    "{}: replacing slot {slot}, {} sectors copied; the copy resumes",
                    members[i].name(),
                    found[i].sb.recovery_offset().unwrap_or(0)
                ));
                keep_replacing.push((i, slot));
            } else if slot_member[slot].is_none() || slot_state[slot] != MemberState::Rebuilding {
                report.notes.push(format!(
                    "{}: was replacing slot {slot}, whose member is gone; it continues as the slot's rebuild",
                    members[i].name()
                ));
                if let Some(old) = slot_member[slot] {
                    displaced.push(found[old].sb.dev_number);
                }
                slot_member[slot] = Some(i);
                slot_state[slot] = MemberState::Rebuilding;
            } else {
                report.excluded.push((
                    members[i].name().into(),
                    format!("replacement for slot {slot}, which another member is rebuilding"),
                ));
                use_member[i] = false;
            }
        }
        // Members not in use (stale/faulty) keep their place in the members list but never
        // get I/O: only slots in sync are planned with.
        let failed = failed_now(&slot_state);
        let degraded = failed.iter().any(|&f| f);
        if !geo.survives(&failed) {
            let missing: Vec<String> = (0..raid_disks)
                .filter(|&s| failed[s])
                .map(|s| s.to_string())
                .collect();
            return Err(EngineError::Unavailable {
                detail: format!(
                    "RAID {level} over {raid_disks} devices cannot run without slots {}",
                    missing.join(", ")
                ),
            });
        }
        // mdadm's --run: members the superblocks list as active but that were not given are
        // not assumed dead. Writing would record them faulty for good (they could then only
        // come back through a full rebuild), so a writable assembly without them needs `run`.
        if !(opts.read_only || opts.run || members.iter().any(|m| m.is_read_only())) {
            let nsb = &nsb;
            let absent: Vec<AbsentMember> = (0..raid_disks)
                .filter(|&slot| slot_member[slot].is_none())
                .flat_map(|slot| {
                    (0..nsb.max_dev())
                        .filter(move |&d| nsb.role_of(d) == DevRole::Active(slot as u16))
                        .map(move |d| AbsentMember {
                            slot,
                            dev_number: d,
                        })
                })
                .filter(|a| !found.iter().any(|f| f.sb.dev_number == a.dev_number))
                .collect();
            if !absent.is_empty() {
                return Err(EngineError::Incomplete {
                    level,
                    raid_disks,
                    set_uuid: nsb.set_uuid.0,
                    absent,
                });
            }
        }
        if geo.level() == RaidLevel::Raid0 && nsb.chunk_sectors > 0 {
            let sizes: Vec<u64> = found
                .iter()
                .map(|f| f.sb.data_size_sectors / nsb.chunk_sectors as u64)
                .collect();
            if sizes.iter().min() != sizes.iter().max() {
                report.notes.push(format!(
                    "RAID 0 over members of different sizes: only the first zone ({} bytes, where md's ORIGINAL and ALTERNATE layouts agree) is served",
                    geo.array_sectors() * 512
                ));
            }
        }
        // Dirty if any member in use says so: an update interrupted half-way may have left
        // the newest superblock clean and an older one dirty, or the other way round.
        let current = |f: &crate::meta::FoundSuperblock| f.sb.events + 1 >= nsb.events;
        let resync_offset = found
            .iter()
            .filter(|f| current(f))
            .map(|f| f.sb.resync_offset_sectors)
            .min()
            .unwrap_or(nsb.resync_offset_sectors);
        report.was_dirty = found
            .iter()
            .filter(|f| current(f))
            .any(|f| !f.sb.is_clean());
        if report.was_dirty {
            report
                .notes
                .push("the array was not stopped cleanly (superblock dirty)".into());
            if degraded && matches!(geo.scheme(), Scheme::Parity { .. }) && nsb.ppl().is_some() {
                // md starts a dirty degraded array with a partial parity log: the log makes
                // the parity of every stripe written at the crash agree with its data.
                report.notes.push(
                    "dirty and degraded, started with the partial parity log (as md does)".into(),
                );
            } else if degraded
                && matches!(geo.scheme(), Scheme::Parity { .. })
                && nsb.feature_map.contains(FeatureMap::JOURNAL)
            {
                // The write journal holds data and parity of every stripe written at the
                // crash; its replay makes them whole before anything reads them.
                report.notes.push(
                    "dirty and degraded, started with the write journal (its replay makes every stripe written at the crash whole)".into(),
                );
            } else if degraded && matches!(geo.scheme(), Scheme::Parity { .. }) {
                if !opts.force {
                    return Err(EngineError::DirtyDegraded {
                        detail: format!(
                            "missing slots {:?}",
                            (0..raid_disks).filter(|&s| failed[s]).collect::<Vec<_>>()
                        ),
                    });
                }
                report
                    .notes
                    .push("dirty and degraded, started because of --force".into());
            }
        }
        if degraded {
            report.notes.push(format!(
                "running degraded: slots {:?} missing or failed",
                (0..raid_disks).filter(|&s| failed[s]).collect::<Vec<_>>()
            ));
        }
        let read_only = opts.read_only || members.iter().any(|m| m.is_read_only());
        // Superblocks in memory follow the newest one's shared state; each keeps its own
        // identity and placement.
        let sbs: Vec<Superblock> = found
            .iter()
            .map(|f| {
                let mut sb = nsb.clone();
                sb.device_uuid = f.sb.device_uuid;
                sb.dev_number = f.sb.dev_number;
                sb.data_offset_sectors = f.sb.data_offset_sectors;
                sb.data_size_sectors = f.sb.data_size_sectors;
                sb.super_offset_sectors = f.sb.super_offset_sectors;
                sb.bblog_offset = f.sb.bblog_offset;
                sb.bblog_size_sectors = f.sb.bblog_size_sectors;
                sb.bblog_shift = f.sb.bblog_shift;
                sb.bitmap_offset = f.sb.bitmap_offset;
                sb.recovery_offset_sectors = f.sb.recovery_offset_sectors;
                // Feature bits that describe the device, not the array, stay the member's own.
                for own in [
                    FeatureMap::RECOVERY_OFFSET,
                    FeatureMap::REPLACEMENT,
                    FeatureMap::RECOVERY_BITMAP,
                    FeatureMap::BAD_BLOCKS,
                ] {
                    sb.feature_map.set(own, f.sb.feature_map.contains(own));
                }
                sb.devflags = f.sb.devflags;
                sb.cnt_corrected_read = f.sb.cnt_corrected_read;
                sb
            })
            .collect();
        // md's journal rule: without its journal (or with a stale one) the array does not
        // start, except read-only with --force (mdadm: "Journal is missing or stale, starting
        // array read only").
        let mut sbs = sbs;
        let mut read_only = read_only;
        if nsb.feature_map.contains(FeatureMap::JOURNAL)
            && !found
                .iter()
                .zip(&use_member)
                .any(|(f, &used)| used && f.sb.role() == DevRole::Journal)
        {
            if !opts.force {
                return Err(EngineError::Invalid(
                    "the array has a write journal but its journal device was not given (or is stale); md does not start it either. Give the journal device too, or --force to assemble read-only without it".into(),
                ));
            }
            read_only = true;
            for sb in &mut sbs {
                sb.feature_map.remove(FeatureMap::JOURNAL);
            }
            report.notes.push(
                "the write journal is missing: assembled read-only (--force), as mdadm does; writes logged only in the journal are not on the members".into(),
            );
        }
        let mut array = Self::build(
            geo,
            version,
            read_only,
            opts.config,
            members,
            sbs,
            slot_member,
            slot_state,
            report.was_dirty,
        )?;
        if nsb.bitmap_offset().is_some() {
            let disk = lock(&array.state).members[newest].clone();
            if let Some(m) = disk {
                let (_, space) = array.scrub_space();
                let (wi, note) = bitmap::WriteIntent::load(
                    m.disk.as_ref(),
                    &found[newest].sb,
                    nsb.events,
                    space,
                )?;
                report.notes.push(format!(
                    "internal write-intent bitmap: {} KiB per bit, {} bits set",
                    wi.sectors_per_bit / 2,
                    wi.set_bits()
                ));
                report.notes.extend(note);
                array.bitmap = Some(wi);
            }
        }
        {
            let mut st = lock(&array.state);
            // Members left out are not attached: nothing is ever written to them.
            for (i, used) in use_member.iter().enumerate() {
                if !used {
                    st.members[i] = None;
                }
            }
            for (i, slot) in keep_replacing {
                st.replacement[slot] = Some(i);
            }
            for slot in 0..raid_disks {
                if let (MemberState::Rebuilding, Some(i)) =
                    (st.slot_state[slot], st.slot_member[slot])
                {
                    st.bitmap_recovery[slot] = array.bitmap.is_some()
                        && st.sbs[i].feature_map.contains(FeatureMap::RECOVERY_BITMAP);
                    st.sbs[i].feature_map.remove(FeatureMap::REPLACEMENT);
                    if st.sbs[i].recovery_offset().is_none() {
                        st.sbs[i].set_recovery_offset(0);
                    }
                }
            }
            array.note_replacements(&st);
            // md's bad-block logs: reads avoid what they list.
            let count = st.members.len();
            st.bad = vec![Vec::new(); count];
            for i in 0..count {
                let sb = st.sbs[i].clone();
                let Some(m) = st.members[i].clone() else {
                    continue;
                };
                if !sb.feature_map.contains(FeatureMap::BAD_BLOCKS)
                    || sb.bblog_offset == 0
                    || sb.bblog_size_sectors == 0
                {
                    continue;
                }
                let at = (sb.super_offset_sectors as i64 + sb.bblog_offset as i64) as u64 * 512;
                let mut page = vec![0u8; sb.bblog_size_sectors as usize * 512];
                m.disk.read_at(&mut page, at)?;
                let list =
                    raidkit_metadata::badblocks::decode(&page, sb.bblog_shift).map_err(|e| {
                        EngineError::Metadata(format!("{}: bad-block log: {e}", m.disk.name()))
                    })?;
                if !list.is_empty() {
                    report.notes.push(format!(
                        "{}: {} bad-block ranges recorded; reads there come from redundancy",
                        m.disk.name(),
                        list.len()
                    ));
                    array
                        .has_bad
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
                st.bad[i] = data_ranges(&list, sb.data_offset_sectors);
            }
        }
        let consistent = array.start_log(
            write_log::LogStart::Assembled {
                dirty: report.was_dirty,
                resync_offset: nsb.resync_offset_sectors,
            },
            &mut report.notes,
        )?;
        if report.was_dirty && array.geo.level() != RaidLevel::Raid0 && !consistent {
            // md's resync_offset: in sync below it (0 after a crash, the cursor when a resync
            // was stopped cleanly part-way).
            let (_, space) = array.scrub_space();
            let from = resync_offset.min(space);
            lock(&array.state).resync_from = Some(from);
            array
                .resync_pending
                .store(true, std::sync::atomic::Ordering::Relaxed);
            report.notes.push(format!(
                "a resync is needed from sector {from} (parity or copies may disagree where writes were in flight)"
            ));
        }
        if forced_back && !read_only {
            // mdadm's force_array writes the raised event count at once, so the next
            // assembly takes the member without --force.
            let _g = lock(&array.sb_lock);
            let mut st = lock(&array.state);
            array.update_superblocks(&mut st, |_| {});
        }
        if (degraded || !displaced.is_empty()) && !read_only {
            // Record the lost slots as faulty in the survivors, as md does when it starts
            // degraded (super_1_sync writes 0xfffe for every device it does not have).
            // A slot whose member was not given at all is named by the device number that
            // holds its role; md's super_1_sync marks every device it does not have faulty,
            // so such a member, offered again later with an event count one behind, is not
            // taken back as in sync.
            let st = lock(&array.state);
            let roles = st
                .sbs
                .iter()
                .find(|sb| sb.events == nsb.events)
                .unwrap_or(&nsb);
            let mut lost: Vec<u32> = st
                .slot_state
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.writable())
                .flat_map(|(slot, _)| match st.slot_member[slot] {
                    Some(i) => vec![st.sbs[i].dev_number],
                    None => (0..roles.max_dev())
                        .filter(|&d| roles.role_of(d) == DevRole::Active(slot as u16))
                        .filter(|&d| !st.sbs.iter().any(|sb| sb.dev_number == d))
                        .collect(),
                })
                .collect();
            lost.extend(displaced);
            // Only what the superblocks do not say already: assembling an array that is
            // known degraded writes nothing.
            lost.retain(|&d| st.sbs.iter().any(|sb| sb.role_of(d) != DevRole::Faulty));
            if !lost.is_empty() {
                drop(st);
                let _g = lock(&array.sb_lock);
                let mut st = lock(&array.state);
                array.update_superblocks(&mut st, |sb| {
                    for &d in &lost {
                        let _ = sb.set_role(d, DevRole::Faulty);
                    }
                });
            }
        }
        Ok((array, report))
    }

    /// Events numbered `since` and later (see [`crate::events`]): the number of the first
    /// one returned (past `since` when older ones were dropped from the bounded log), and the
    /// events. Waits up to `wait` for one to happen when there is none yet.
    pub fn events_since(
        &self,
        since: u64,
        wait: std::time::Duration,
    ) -> (u64, Vec<crate::events::ArrayEvent>) {
        let mut st = lock(&self.state);
        if st.events.next_seq() <= since && !wait.is_zero() {
            let cv = st.events.pushed.clone();
            st = match cv.wait_timeout(st, wait) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        st.events.since(since)
    }

    pub fn geometry(&self) -> &Geo {
        &self.geo
    }

    pub fn size_bytes(&self) -> u64 {
        self.geo.array_sectors() * SECTOR as u64
    }

    /// RAID 4/5/6: the data bytes of one stripe, the write that needs no reads (and no
    /// partial parity). `None` for the mirror and stripe levels, where any write is direct.
    pub fn full_stripe_bytes(&self) -> Option<u64> {
        match self.geo.scheme() {
            Scheme::Parity { .. } => {
                Some(self.geo.data_disks() as u64 * self.geo.chunk_sectors * SECTOR as u64)
            }
            Scheme::Copies { .. } => None,
        }
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    pub fn config(&self) -> EngineConfig {
        self.config
    }

    /// Reads `buf.len()` bytes at `offset_bytes` of the array.
    pub fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<()> {
        self.check_range(offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let (start, len) = aligned_window(offset_bytes, buf.len());
        if start == offset_bytes && len == buf.len() {
            return self.run(
                Dir::Read,
                start / SECTOR as u64,
                buf.as_mut_ptr(),
                buf.len(),
                false,
            );
        }
        let mut bounce = vec![0u8; len];
        self.run(
            Dir::Read,
            start / SECTOR as u64,
            bounce.as_mut_ptr(),
            len,
            false,
        )?;
        let skip = (offset_bytes - start) as usize;
        buf.copy_from_slice(&bounce[skip..skip + buf.len()]);
        Ok(())
    }

    /// Writes `buf` at `offset_bytes`; with `fua` the data is durable when this returns.
    /// Unaligned edges are read, patched and written back (not atomic against a concurrent
    /// write to the same sectors).
    pub fn write_at(&self, buf: &[u8], offset_bytes: u64, fua: bool) -> Result<()> {
        self.check_writable()?;
        self.check_range(offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        self.ensure_dirty()?;
        let (start, len) = aligned_window(offset_bytes, buf.len());
        if start == offset_bytes && len == buf.len() {
            self.run(
                Dir::Write,
                start / SECTOR as u64,
                buf.as_ptr() as *mut u8,
                buf.len(),
                fua,
            )?;
        } else {
            let mut bounce = vec![0u8; len];
            self.run(
                Dir::Read,
                start / SECTOR as u64,
                bounce.as_mut_ptr(),
                len,
                false,
            )?;
            let skip = (offset_bytes - start) as usize;
            bounce[skip..skip + buf.len()].copy_from_slice(buf);
            self.run(
                Dir::Write,
                start / SECTOR as u64,
                bounce.as_mut_ptr(),
                len,
                fua,
            )?;
        }
        if fua {
            self.flush()?;
        }
        if self.no_space.load(std::sync::atomic::Ordering::Relaxed)
            && self
                .no_space
                .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            lock(&self.state).events.push(ArrayEvent::Note {
                text: "writes go through again: there is room on the members' filesystems".into(),
            });
        }
        Ok(())
    }

    /// Makes every completed write durable on every member that receives writes: in sync,
    /// being rebuilt (below its recovery offset it counts as current after a crash) and being
    /// copied onto as a replacement.
    pub fn flush(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        // (slot, is a replacement, member)
        let targets: Vec<(usize, bool, Arc<Member>)> = {
            let st = lock(&self.state);
            let slots = st
                .slot_member
                .iter()
                .enumerate()
                .filter(|(s, _)| st.slot_state[*s].writable())
                .filter_map(|(s, m)| {
                    m.and_then(|i| st.members[i].clone())
                        .map(|mm| (s, false, mm))
                });
            let replacements = st.replacement.iter().enumerate().filter_map(|(s, r)| {
                r.and_then(|i| st.members[i].clone())
                    .map(|mm| (s, true, mm))
            });
            slots.chain(replacements).collect()
        };
        let batch = Batch::new();
        batch.add(targets.len());
        pool::run_phase(
            targets
                .iter()
                .enumerate()
                .map(|(tag, (_, _, m))| {
                    let job = Job {
                        kind: JobKind::Flush,
                        offset_bytes: 0,
                        ptr: std::ptr::null_mut(),
                        len: 0,
                        batch: batch.clone(),
                        tag,
                    };
                    (&m.worker, m.disk.name(), job)
                })
                .collect(),
            &batch,
        );
        for (tag, err) in batch.wait() {
            let (slot, replacement, _) = targets[tag];
            if replacement {
                self.replacement_failed(slot, &err.to_string());
            } else {
                self.member_failed(slot, &err.to_string());
            }
        }
        if let Some(log) = &self.log {
            log.flush(self)?;
        }
        self.check_failed()
    }

    /// Discards a range: afterwards it reads as zeroes (written as zeroes through the normal
    /// write path, so parity stays consistent).
    pub fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        self.write_zeroes(offset_bytes, len_bytes)
    }

    /// Makes a range read as zeroes.
    pub fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        self.check_writable()?;
        self.check_range(offset_bytes, len_bytes)?;
        let step = 1usize << 20;
        let zeros = vec![0u8; step];
        let mut done = 0u64;
        while done < len_bytes {
            let n = ((len_bytes - done) as usize).min(step);
            self.write_at(&zeros[..n], offset_bytes + done, false)?;
            done += n as u64;
        }
        Ok(())
    }

    /// Marks the member at `index` (in the order given at create/assemble) faulty.
    pub fn fail_member(&self, index: usize) -> Result<()> {
        let slot = {
            let st = lock(&self.state);
            if index >= st.members.len() || st.members[index].is_none() {
                return Err(EngineError::Invalid(format!("no member {index}")));
            }
            st.slot_member.iter().position(|&m| m == Some(index))
        };
        let replacing = lock(&self.state)
            .replacement
            .iter()
            .position(|&r| r == Some(index));
        match (slot, replacing) {
            (Some(slot), _) => {
                self.member_failed(slot, "failed on request");
                Ok(())
            }
            (None, Some(slot)) => {
                self.replacement_failed(slot, "failed on request");
                Ok(())
            }
            (None, None) => {
                let st = lock(&self.state);
                let sb = &st.sbs[index];
                if sb.role_of(sb.dev_number) == DevRole::Faulty {
                    // Already faulty: failing it again changes nothing.
                    return Ok(());
                }
                Err(EngineError::Invalid(format!(
                    "member {index} is not an active member (a spare); remove it instead"
                )))
            }
        }
    }

    /// Detaches a faulty member or a spare (md refuses to remove an active in-sync member).
    pub fn remove_member(&self, index: usize) -> Result<()> {
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        if index >= st.members.len() {
            return Err(EngineError::Invalid(format!("no member {index}")));
        }
        if st.members[index].is_none() {
            // Left out at assembly or removed earlier: already out of the array if the
            // superblocks record its device faulty (what md writes for a removed device too),
            // so there is nothing left to write.
            let dev_number = st.sbs[index].dev_number;
            let recorded_faulty = st
                .sbs
                .iter()
                .zip(&st.members)
                .filter(|(_, m)| m.is_some())
                .all(|(sb, _)| sb.role_of(dev_number) == DevRole::Faulty);
            if recorded_faulty {
                let member = format!("member {index}");
                st.events.push(ArrayEvent::MemberRemoved { member });
                return Ok(());
            }
            return Err(EngineError::Invalid(format!(
                "member {index} was left out of the array at assembly and is not recorded faulty; nothing to remove"
            )));
        }
        if let Some(slot) = st.replacement.iter().position(|&r| r == Some(index)) {
            return Err(EngineError::Invalid(format!(
                "member {index} is replacing slot {slot}; fail it first to stop the replacement"
            )));
        }
        if let Some(slot) = st.slot_member.iter().position(|&m| m == Some(index)) {
            if st.slot_state[slot].writable() {
                return Err(EngineError::Invalid(format!(
                    "member {index} is {} in slot {slot}; fail it first (md refuses to remove an active member)",
                    if st.slot_state[slot].usable() { "active" } else { "being rebuilt" }
                )));
            }
            st.slot_member[slot] = None;
            st.slot_state[slot] = MemberState::Missing;
        }
        let dev_number = st.sbs[index].dev_number;
        let name = st.members[index]
            .as_ref()
            .map(|m| m.disk.name().to_string())
            .unwrap_or_default();
        st.members[index] = None;
        st.events.push(ArrayEvent::MemberRemoved { member: name });
        self.update_superblocks(&mut st, |sb| {
            let _ = sb.set_role(dev_number, DevRole::Faulty);
        });
        Ok(())
    }

    /// Adds `disk` as a spare (it gets a superblock of this array with role spare). When a slot
    /// is missing, the spare takes it at once and is rebuilt by the rebuild task (the
    /// background service runs it by itself; otherwise call [`Array::run_pending`]).
    pub fn add_spare(&self, disk: Box<dyn Disk>, device_uuid: [u8; 16]) -> Result<()> {
        self.check_writable()?;
        let disk: Arc<dyn Disk> = Arc::from(disk);
        {
            let _g = lock(&self.sb_lock);
            let mut st = lock(&self.state);
            let (_, dev_number) = self.attach_locked(&mut st, disk.clone(), device_uuid)?;
            st.events.push(ArrayEvent::SpareAdded {
                member: disk.name().to_string(),
            });
            let assigned = self.assign_spare_locked(&mut st);
            self.update_superblocks(&mut st, |sb| {
                let _ = sb.set_role(dev_number, DevRole::Spare);
                for &(slot, d) in &assigned {
                    let _ = sb.set_role(d, DevRole::Active(slot as u16));
                }
            });
        }
        self.bg.wake();
        Ok(())
    }

    /// Takes back a member that left the array (failed, or pulled) into its old slot, keeping
    /// its data: with a write-intent bitmap, only the regions written since it left are
    /// rebuilt (md's re-add). Refused, with the reason, when the array has no bitmap, the
    /// member belongs elsewhere, its slot is taken, or it left before the bitmap's bits were
    /// last cleared; then add it as a new spare instead.
    pub fn re_add(&self, disk: Box<dyn Disk>) -> Result<usize> {
        self.check_writable()?;
        let found = read_superblock(disk.as_ref())?;
        let name = disk.name().to_string();
        let Some(wi) = &self.bitmap else {
            return Err(EngineError::Invalid(format!(
                "{name}: the array has no write-intent bitmap, so a returning member cannot be brought up to date from it; add it as a new spare"
            )));
        };
        let disk: Arc<dyn Disk> = Arc::from(disk);
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        let Some(template) = st
            .sbs
            .iter()
            .zip(&st.members)
            .find(|(_, m)| m.is_some())
            .map(|(sb, _)| sb.clone())
        else {
            return Err(EngineError::Invalid(
                "no member left to copy the superblock from".into(),
            ));
        };
        if found.sb.set_uuid != template.set_uuid {
            return Err(EngineError::Foreign {
                member: name,
                member_uuid: found.sb.set_uuid.to_mdadm_string(),
                array_uuid: template.set_uuid.to_mdadm_string(),
                reference: "the running array".into(),
            });
        }
        if let Some(i) = (0..st.members.len())
            .find(|&i| st.members[i].is_some() && st.sbs[i].device_uuid == found.sb.device_uuid)
        {
            let in_use = st.slot_member.contains(&Some(i)) || st.replacement.contains(&Some(i));
            if in_use {
                return Err(EngineError::Duplicate {
                    member: name,
                    other: st.members[i]
                        .as_ref()
                        .map(|m| m.disk.name().to_string())
                        .unwrap_or_default(),
                    device_uuid: found.sb.device_uuid.to_mdadm_string(),
                });
            }
            // The same device is still attached as faulty: the returning copy replaces it.
            st.members[i] = None;
        }
        let DevRole::Active(slot) = found.sb.role() else {
            return Err(EngineError::Invalid(format!(
                "{name}: it was not an active member (role {:?}); add it as a spare",
                found.sb.role()
            )));
        };
        let slot = slot as usize;
        if slot >= self.geo.raid_disks || st.slot_state[slot].writable() {
            return Err(EngineError::Invalid(format!(
                "{name}: its slot {slot} is held by another member now; add it as a new spare"
            )));
        }
        let cleared = wi.events_cleared();
        if found.sb.events < cleared {
            return Err(EngineError::Invalid(format!(
                "{name}: it left at events {}, before the bitmap was last cleared (events {cleared}); the bitmap no longer shows everything it missed, so add it as a new spare (full rebuild)",
                found.sb.events
            )));
        }
        if found.sb.data_size_sectors < self.geo.member_data_sectors {
            return Err(EngineError::SizeMismatch {
                member: name,
                detail: "its data area is smaller than the array's members'".into(),
            });
        }
        let used: Vec<u32> = st
            .sbs
            .iter()
            .zip(&st.members)
            .filter(|(_, m)| m.is_some())
            .map(|(sb, _)| sb.dev_number)
            .collect();
        let dev_number = if used.contains(&found.sb.dev_number) {
            (0..).find(|d| !used.contains(d)).unwrap_or(0)
        } else {
            found.sb.dev_number
        };
        let mut sb = template;
        sb.device_uuid = found.sb.device_uuid;
        sb.dev_number = dev_number;
        sb.data_offset_sectors = found.sb.data_offset_sectors;
        sb.data_size_sectors = found.sb.data_size_sectors;
        sb.super_offset_sectors = found.sb.super_offset_sectors;
        sb.bblog_offset = found.sb.bblog_offset;
        sb.bblog_size_sectors = found.sb.bblog_size_sectors;
        sb.bblog_shift = found.sb.bblog_shift;
        sb.feature_map.remove(FeatureMap::REPLACEMENT);
        sb.feature_map.remove(FeatureMap::BAD_BLOCKS);
        sb.set_role(dev_number, DevRole::Active(slot as u16))
            .map_err(meta_err)?;
        sb.set_recovery_offset(0);
        sb.feature_map.insert(FeatureMap::RECOVERY_BITMAP);
        let worker = Worker::spawn(format!("raidkit-m{}", st.members.len()), disk.clone())
            .map_err(|e| {
                EngineError::Invalid(format!("cannot start a member worker thread: {e}"))
            })?;
        st.members.push(Some(Arc::new(Member {
            disk,
            worker,
            data_offset_bytes: found.sb.data_offset_sectors * 512,
        })));
        st.sbs.push(sb);
        let index = st.members.len() - 1;
        st.slot_member[slot] = Some(index);
        st.slot_state[slot] = MemberState::Rebuilding;
        st.bitmap_recovery[slot] = true;
        st.events.push(ArrayEvent::ReAdded {
            member: name.clone(),
            slot,
            bitmap_regions: wi.set_bits(),
        });
        self.update_superblocks(&mut st, |sb| {
            let _ = sb.set_role(dev_number, DevRole::Active(slot as u16));
        });
        drop(st);
        drop(_g);
        self.bg.wake();
        Ok(slot)
    }

    /// Starts copying the active member at `index` onto `disk` while it stays in service
    /// (md's `--replace`): the new member is the slot's replacement, gets every write the slot
    /// gets, and is filled by the replace task; when the copy is complete it takes the slot
    /// and the old member is marked faulty. Should the old member fail first, the copy
    /// carries on as an ordinary rebuild.
    pub fn replace_member(
        &self,
        index: usize,
        disk: Box<dyn Disk>,
        device_uuid: [u8; 16],
    ) -> Result<()> {
        self.check_writable()?;
        if self.geo.level() == RaidLevel::Raid0 {
            return Err(EngineError::Invalid(
                "RAID 0 cannot replace a member in service (md has no replacement for it); copy the array instead".into(),
            ));
        }
        let disk: Arc<dyn Disk> = Arc::from(disk);
        {
            let _g = lock(&self.sb_lock);
            let mut st = lock(&self.state);
            let slot = match st.slot_member.iter().position(|&m| m == Some(index)) {
                Some(slot) if st.slot_state[slot].usable() => slot,
                _ => {
                    return Err(EngineError::Invalid(format!(
                        "member {index} is not an active member in sync; only those can be replaced (add a spare to rebuild a missing one)"
                    )))
                }
            };
            if st.replacement[slot].is_some() {
                return Err(EngineError::Invalid(format!(
                    "slot {slot} is already being replaced"
                )));
            }
            let (new, dev_number) = self.attach_locked(&mut st, disk.clone(), device_uuid)?;
            st.sbs[new]
                .set_role(dev_number, DevRole::Active(slot as u16))
                .map_err(meta_err)?;
            st.sbs[new].feature_map.insert(FeatureMap::REPLACEMENT);
            st.sbs[new].set_recovery_offset(0);
            st.replacement[slot] = Some(new);
            self.note_replacements(&st);
            st.events.push(ArrayEvent::ReplaceStarted {
                member: disk.name().to_string(),
                slot,
            });
            self.update_superblocks(&mut st, |sb| {
                let _ = sb.set_role(dev_number, DevRole::Active(slot as u16));
            });
        }
        self.bg.wake();
        Ok(())
    }

    /// Attaches `disk` as a new member with a superblock of this array (role spare) and a
    /// worker; returns its index and device number. Caller holds `sb_lock`.
    fn attach_locked(
        &self,
        st: &mut State,
        disk: Arc<dyn Disk>,
        device_uuid: [u8; 16],
    ) -> Result<(usize, u32)> {
        let Some(template) = st
            .sbs
            .iter()
            .zip(&st.members)
            .find(|(_, m)| m.is_some())
            .map(|(sb, _)| sb.clone())
        else {
            return Err(EngineError::Invalid(
                "no member left to copy the superblock from".into(),
            ));
        };
        let used: Vec<u32> = st
            .sbs
            .iter()
            .zip(&st.members)
            .filter(|(_, m)| m.is_some())
            .map(|(sb, _)| sb.dev_number)
            .collect();
        let dev_number = (0..).find(|d| !used.contains(d)).unwrap_or(0);
        let shape = CreateShape {
            version: self.version,
            device_sectors: disk.size_bytes() / 512,
            level: level_from_md(self.geo.md_level()),
            layout: self.geo.md_layout(),
            raid_disks: self.geo.raid_disks as u32,
            chunk_sectors: self.geo.chunk_sectors as u32,
            with_bitmap: false,
        };
        // A member of an array with a partial parity log gets mdadm's placement for one, so
        // its log area stays clear of its data.
        let dl = if self.consistency_policy() == ConsistencyPolicy::Ppl {
            DataLayout::mdadm_create_ppl(&shape)
        } else {
            DataLayout::mdadm_create(&shape)
        }
        .map_err(meta_err)?;
        if dl.data_size_sectors < self.geo.member_data_sectors {
            return Err(EngineError::SizeMismatch {
                member: disk.name().to_string(),
                detail: format!(
                    "only {} data sectors, the array needs {} per member",
                    dl.data_size_sectors, self.geo.member_data_sectors
                ),
            });
        }
        // Space for all of it before anything is written: its metadata now, and the data a
        // rebuild onto it writes, so a full filesystem refuses the add rather than failing
        // the rebuild half-way.
        let used_end = (dl.data_offset_sectors + self.geo.member_data_sectors) * 512;
        disk.reserve(0, used_end.min(disk.size_bytes()))?;
        if dl.super_offset_sectors * 512 >= used_end {
            disk.reserve(used_end, disk.size_bytes() - used_end)?;
        }
        let mut sb = template;
        sb.device_uuid = Uuid(device_uuid);
        sb.dev_number = dev_number;
        sb.data_offset_sectors = dl.data_offset_sectors;
        sb.data_size_sectors = dl.data_size_sectors;
        sb.super_offset_sectors = dl.super_offset_sectors;
        sb.bblog_offset = dl.bblog_offset;
        sb.bblog_size_sectors = dl.bblog_size_sectors;
        sb.set_role(dev_number, DevRole::Spare).map_err(meta_err)?;
        sb.clear_recovery_offset();
        sb.feature_map.remove(FeatureMap::REPLACEMENT);
        sb.feature_map.remove(FeatureMap::BAD_BLOCKS);
        if let Some(log) = &self.log {
            log.member_joins(disk.as_ref(), &mut sb, &dl)?;
        }
        let worker = Worker::spawn(format!("raidkit-m{}", st.members.len()), disk.clone())
            .map_err(|e| {
                EngineError::Invalid(format!("cannot start a member worker thread: {e}"))
            })?;
        st.members.push(Some(Arc::new(Member {
            disk,
            worker,
            data_offset_bytes: dl.data_offset_sectors * 512,
        })));
        st.sbs.push(sb);
        Ok((st.members.len() - 1, dev_number))
    }

    /// Gives every slot without a working member a spare, if one is attached: the spare
    /// becomes `Rebuilding` in that slot with recovery from sector 0 (md's recovery start).
    /// Returns (slot, dev_number) of each assignment; the caller writes the superblocks.
    fn assign_spare_locked(&self, st: &mut State) -> Vec<(usize, u32)> {
        let mut out = Vec::new();
        if self.read_only || st.failed.is_some() || self.geo.level() == RaidLevel::Raid0 {
            return out;
        }
        for slot in 0..self.geo.raid_disks {
            if st.slot_state[slot].writable() {
                continue;
            }
            let in_use = |st: &State, i: usize| {
                st.slot_member.contains(&Some(i)) || st.replacement.contains(&Some(i))
            };
            let Some(i) = (0..st.members.len()).find(|&i| {
                st.members[i].is_some()
                    && !in_use(st, i)
                    && st.sbs[i].role_of(st.sbs[i].dev_number) == DevRole::Spare
            }) else {
                break;
            };
            let d = st.sbs[i].dev_number;
            if st.sbs[i].set_role(d, DevRole::Active(slot as u16)).is_err() {
                continue;
            }
            st.sbs[i].set_recovery_offset(0);
            st.slot_member[slot] = Some(i);
            st.slot_state[slot] = MemberState::Rebuilding;
            st.bitmap_recovery[slot] = false;
            let name = st.members[i]
                .as_ref()
                .map(|m| m.disk.name().to_string())
                .unwrap_or_default();
            st.events
                .push(ArrayEvent::SpareTaken { member: name, slot });
            out.push((slot, d));
        }
        out
    }

    /// Flushes and marks the array clean (resync_offset = ~0, events + 1). Dropping an array
    /// without `stop` leaves it dirty, exactly like a crash.
    ///
    /// A background task stops first at its next step, with its checkpoint recorded: a
    /// rebuild's `recovery_offset`, and a pending resync's cursor as `resync_offset` (so the
    /// array is not marked clean while a resync is unfinished, as md does).
    pub fn stop(&self) -> Result<()> {
        self.stop_background();
        self.flush()?;
        if let Some(log) = &self.log {
            log.stop(self)?;
        }
        self.intent_sweep(std::time::Duration::ZERO, true);
        if self.read_only {
            return Ok(());
        }
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        if st.failed.is_some() {
            return Ok(());
        }
        self.skip_resync_when_fully_degraded(&mut st);
        let resync = st.resync_from;
        if st.dirty || resync.is_some() {
            self.update_superblocks(&mut st, |sb| match resync {
                Some(at) => sb.mark_dirty(at),
                None => sb.mark_clean(),
            });
            st.dirty = false;
        }
        Ok(())
    }

    pub fn status(&self) -> Status {
        let st = lock(&self.state);
        let any = st
            .sbs
            .iter()
            .zip(&st.members)
            .find(|(_, m)| m.is_some())
            .map(|(sb, _)| sb)
            .or(st.sbs.first());
        let missing_slots: Vec<usize> = (0..self.geo.raid_disks)
            .filter(|&s| !st.slot_state[s].usable())
            .collect();
        let members = st
            .members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let m = m.as_ref()?;
                let replacing = st.replacement.iter().position(|&x| x == Some(i));
                let slot = st
                    .slot_member
                    .iter()
                    .position(|&x| x == Some(i))
                    .or(replacing);
                let state = slot.map(|s| st.slot_state[s]);
                let role = match state {
                    _ if replacing.is_some() => "replacement",
                    Some(MemberState::InSync) => "active",
                    Some(MemberState::Rebuilding) => "rebuilding",
                    Some(_) => "faulty",
                    None => {
                        if any.is_some_and(|sb| sb.role_of(st.sbs[i].dev_number) == DevRole::Faulty)
                        {
                            "faulty"
                        } else if st.sbs[i].role() == DevRole::Journal {
                            "journal"
                        } else {
                            "spare"
                        }
                    }
                };
                Some(MemberStatus {
                    index: i,
                    name: m.disk.name().to_string(),
                    slot,
                    role: role.to_string(),
                    state,
                    device_uuid: st.sbs[i].device_uuid.to_mdadm_string(),
                    data_offset_sectors: st.sbs[i].data_offset_sectors,
                    events: st.sbs[i].events,
                    bad_block_ranges: st.bad.get(i).map_or(0, Vec::len),
                })
            })
            .collect();
        let mut out = Status {
            uuid: any
                .map(|sb| sb.set_uuid.to_mdadm_string())
                .unwrap_or_default(),
            name: any.map(|sb| sb.set_name.as_string()).unwrap_or_default(),
            metadata: self.version.name().to_string(),
            level: self.geo.md_level(),
            layout: self.geo.md_layout(),
            raid_disks: self.geo.raid_disks,
            chunk_sectors: self.geo.chunk_sectors,
            member_data_sectors: self.geo.member_data_sectors,
            array_bytes: self.size_bytes(),
            state: if st.dirty {
                ArrayState::Active
            } else {
                ArrayState::Clean
            },
            degraded: !missing_slots.is_empty(),
            failed: st.failed.is_some(),
            read_only: self.read_only,
            consistency_policy: self.consistency_policy(),
            events: st.sbs.iter().map(|sb| sb.events).max().unwrap_or(0),
            missing_slots,
            members,
            task: self.bg.running(),
            pending: Vec::new(),
            finished_tasks: self.bg.history(),
            resync_from_sectors: st.resync_from,
            log: st.events.sentences(),
        };
        drop(st);
        out.pending = self.pending_tasks();
        out
    }

    fn check_range(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        match offset_bytes.checked_add(len_bytes) {
            Some(end) if end <= self.size_bytes() => Ok(()),
            _ => Err(EngineError::Invalid(format!(
                "request of {len_bytes} bytes at byte {offset_bytes} reaches past the end of the array ({} bytes)",
                self.size_bytes()
            ))),
        }
    }

    fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(EngineError::ReadOnly);
        }
        self.check_failed()
    }

    fn check_failed(&self) -> Result<()> {
        match &lock(&self.state).failed {
            Some(d) => Err(EngineError::ArrayFailed { detail: d.clone() }),
            None => Ok(()),
        }
    }

    fn ensure_dirty(&self) -> Result<()> {
        if lock(&self.state).dirty {
            return Ok(());
        }
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        if st.dirty {
            return Ok(());
        }
        if let Some(log) = &self.log {
            if log.keeps_array_clean() {
                st.dirty = true;
                return Ok(());
            }
            for text in log.before_dirty(self, &mut st) {
                st.events.push(ArrayEvent::Note { text });
            }
        }
        self.update_superblocks(&mut st, |sb| sb.mark_dirty(0));
        st.dirty = true;
        match &st.failed {
            Some(d) => Err(EngineError::ArrayFailed { detail: d.clone() }),
            None => Ok(()),
        }
    }

    /// Applies `change` to every working member's superblock, bumps events and writes them
    /// (then flushes). A member whose superblock cannot be written is failed in turn.
    /// Caller holds `sb_lock` and passes the state guard.
    fn update_superblocks(&self, st: &mut State, change: impl Fn(&mut Superblock)) {
        let t = now();
        for sb in st.sbs.iter_mut() {
            change(sb);
            sb.bump_events(t);
        }
        if self.read_only || st.failed.is_some() {
            return;
        }
        let mut failures = Vec::new();
        for i in 0..st.members.len() {
            let Some(m) = st.members[i].clone() else {
                continue;
            };
            let slot = st.slot_member.iter().position(|&x| x == Some(i));
            if let Some(s) = slot {
                if !st.slot_state[s].writable() {
                    continue;
                }
            } else if st.sbs[i].role_of(st.sbs[i].dev_number) == DevRole::Faulty {
                continue;
            }
            let r = write_superblock(m.disk.as_ref(), &st.sbs[i], self.version)
                .and_then(|_| m.disk.flush().map_err(EngineError::from));
            if let Err(e) = r {
                failures.push((slot, m.disk.name().to_string(), e.to_string()));
            }
        }
        self.intent_follow_events(st);
        for (slot, name, err) in failures {
            if let Some(s) = slot {
                self.fail_locked(st, s, &format!("{name}: superblock write failed: {err}"));
            }
        }
    }

    /// Member states for `piece` with every member whose bad-block list covers part of the
    /// piece's range treated as lost (its data there comes from redundancy); `None` when no
    /// listed range is involved.
    fn bad_block_states(&self, piece: &Piece, states: &[MemberState]) -> Option<Vec<MemberState>> {
        if !self.has_bad.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let st = lock(&self.state);
        let hits = |slot: usize, from: u64, n: u64| {
            st.slot_member[slot]
                .and_then(|i| st.bad.get(i))
                .is_some_and(|list| list.iter().any(|&(b, len)| b < from + n && from < b + len))
        };
        let mut out: Option<Vec<MemberState>> = None;
        let mut mark = |slot: usize| {
            let v = out.get_or_insert_with(|| states.to_vec());
            if v[slot].usable() {
                v[slot] = MemberState::Faulty;
            }
        };
        match &piece.kind {
            PieceKind::Copies {
                copies, sectors, ..
            } => {
                for &(m, s) in copies {
                    if hits(m, s, *sectors) {
                        mark(m);
                    }
                }
            }
            PieceKind::Band {
                stripe,
                lo,
                sectors,
                ..
            } => {
                let from = stripe * self.geo.chunk_sectors + lo;
                for slot in 0..self.geo.raid_disks {
                    if hits(slot, from, *sectors) {
                        mark(slot);
                    }
                }
            }
        }
        out
    }

    /// Records `[ms, ms + n)` of member `index` in its md bad-block log (and in memory, so
    /// reads avoid it). Without a log, or with a full one, the member is failed instead, as
    /// md does. Caller holds no locks.
    fn record_bad_block(&self, index: usize, ms: u64, n: u64) -> Result<bool> {
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        let slot = st.slot_member.iter().position(|&m| m == Some(index));
        let sb = st.sbs[index].clone();
        let Some(member) = st.members[index].clone() else {
            return Ok(false);
        };
        let unit = 1u64 << sb.bblog_shift;
        let first = (sb.data_offset_sectors + ms) / unit * unit;
        let last = (sb.data_offset_sectors + ms + n).div_ceil(unit) * unit;
        let count = st.members.len();
        if st.bad.len() < count {
            st.bad.resize(count, Vec::new());
        }
        let mut list: Vec<raidkit_metadata::BadBlock> = st.bad[index]
            .iter()
            .map(|&(b, len)| raidkit_metadata::BadBlock {
                sector: sb.data_offset_sectors + b,
                len_sectors: len,
            })
            .collect();
        list.push(raidkit_metadata::BadBlock {
            sector: first,
            len_sectors: last - first,
        });
        list.sort();
        let list = merge_bad_blocks(list, unit);
        let encoded = if sb.bblog_offset != 0 && sb.bblog_size_sectors > 0 {
            raidkit_metadata::badblocks::encode(&list, sb.bblog_shift, sb.bblog_size_sectors).ok()
        } else {
            None
        };
        let Some(page) = encoded else {
            drop(st);
            drop(_g);
            if let Some(slot) = slot {
                self.member_failed(
                    slot,
                    "an unreadable range could not be rewritten and there is no room to record it as a bad block",
                );
            }
            return Ok(false);
        };
        let at = (sb.super_offset_sectors as i64 + sb.bblog_offset as i64) as u64 * 512;
        member.disk.write_at(&page, at)?;
        st.bad[index] = data_ranges(&list, sb.data_offset_sectors);
        st.sbs[index].feature_map.insert(FeatureMap::BAD_BLOCKS);
        self.has_bad
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let name = member.disk.name().to_string();
        st.events.push(ArrayEvent::BadBlocksRecorded {
            member: name,
            first_sector: first,
            last_sector: last,
        });
        self.update_superblocks(&mut st, |_| {});
        Ok(true)
    }

    /// Slot states and members, and for writes the members being copied onto per slot
    /// (empty when there are none), all under one lock.
    #[allow(clippy::type_complexity)]
    fn snapshot_for(
        &self,
        dir: Dir,
    ) -> (
        Vec<MemberState>,
        Vec<Option<Arc<Member>>>,
        Vec<Option<Arc<Member>>>,
    ) {
        let st = lock(&self.state);
        let members = st
            .slot_member
            .iter()
            .map(|m| m.and_then(|i| st.members[i].clone()))
            .collect();
        let replacements = if dir == Dir::Write
            && self
                .has_replacement
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            st.replacement
                .iter()
                .map(|r| r.and_then(|i| st.members[i].clone()))
                .collect()
        } else {
            Vec::new()
        };
        (st.slot_state.clone(), members, replacements)
    }

    /// Keeps the lock-free "any replacement?" flag in step with the state.
    fn note_replacements(&self, st: &State) {
        self.has_replacement.store(
            st.replacement.iter().any(|r| r.is_some()),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The replacement of `slot` failed: it is marked faulty and the slot's member stays.
    fn replacement_failed(&self, slot: usize, why: &str) {
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        let Some(r) = st.replacement[slot].take() else {
            return;
        };
        self.note_replacements(&st);
        let d = st.sbs[r].dev_number;
        let name = st.members[r]
            .as_ref()
            .map(|m| m.disk.name().to_string())
            .unwrap_or_default();
        st.events.push(ArrayEvent::MemberFaulty {
            member: name,
            slot: None,
            reason: format!("replacement: {why}"),
        });
        self.update_superblocks(&mut st, |sb| {
            let _ = sb.set_role(d, DevRole::Faulty);
        });
    }

    /// Marks slot `slot` faulty after an error (or on request).
    fn member_failed(&self, slot: usize, why: &str) {
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        self.fail_locked(&mut st, slot, why);
    }

    /// md skips a resync that cannot run because a parity array has lost as many members as
    /// its level can lose (`raid5_sync_request`: degraded >= max_degraded), and counts it done:
    /// parity is then the only record of the missing members' data, and recomputing it from
    /// the data left would destroy that. (Stripes a crash left inconsistent were made whole
    /// by the partial parity log or the journal where the array has one.)
    fn skip_resync_when_fully_degraded(&self, st: &mut State) {
        let Scheme::Parity { max_degraded } = self.geo.scheme() else {
            return;
        };
        let lost = st.slot_state.iter().filter(|s| !s.usable()).count();
        if st.resync_from.is_some() && lost >= max_degraded as usize {
            st.resync_from = None;
            self.resync_pending
                .store(false, std::sync::atomic::Ordering::Relaxed);
            st.events.push(ArrayEvent::Note {
                text: format!(
                    "resync skipped: {lost} member(s) missing, parity is their only copy (md skips it too)"
                ),
            });
        }
    }

    fn fail_locked(&self, st: &mut State, slot: usize, why: &str) {
        if !st.slot_state[slot].writable() {
            return;
        }
        st.slot_state[slot] = MemberState::Faulty;
        let (name, dev_number) = match st.slot_member[slot] {
            Some(i) => (
                st.members[i]
                    .as_ref()
                    .map(|m| m.disk.name().to_string())
                    .unwrap_or_default(),
                Some(st.sbs[i].dev_number),
            ),
            None => (format!("slot {slot}"), None),
        };
        st.events.push(ArrayEvent::MemberFaulty {
            member: name.clone(),
            slot: Some(slot),
            reason: why.to_string(),
        });
        st.read_errors[slot] = 0; // the count belongs to the member leaving the slot
        let failed: Vec<bool> = st.slot_state.iter().map(|s| !s.usable()).collect();
        if !self.geo.survives(&failed) && st.failed.is_none() {
            let lost: Vec<usize> = (0..failed.len()).filter(|&s| failed[s]).collect();
            let detail =
                format!(
                "RAID {} over {} devices has lost slots {:?}, more than it can; no further writes",
                self.geo.md_level(), self.geo.raid_disks, lost
            );
            st.events.push(ArrayEvent::ArrayFailed {
                detail: detail.clone(),
            });
            st.failed = Some(detail);
        }
        if st.failed.is_none() {
            let missing_slots = (0..failed.len()).filter(|&s| failed[s]).collect();
            st.events.push(ArrayEvent::ArrayDegraded { missing_slots });
        }
        st.slot_member[slot] = None;
        // A replacement being copied from the failed member carries on as a normal rebuild
        // of the slot from where the copy got to (md does the same); otherwise a hot spare
        // takes the slot at once and the rebuild task brings it in sync.
        let mut assigned = Vec::new();
        if let Some(r) = st.replacement[slot].take() {
            self.note_replacements(st);
            let d = st.sbs[r].dev_number;
            st.sbs[r].feature_map.remove(FeatureMap::REPLACEMENT);
            if st.sbs[r].recovery_offset().is_none() {
                st.sbs[r].set_recovery_offset(0);
            }
            st.slot_member[slot] = Some(r);
            st.slot_state[slot] = MemberState::Rebuilding;
            st.events
                .push(ArrayEvent::ReplacementContinuesAsRebuild { slot });
            assigned.push((slot, d));
        }
        assigned.extend(self.assign_spare_locked(st));
        if !assigned.is_empty() || dev_number.is_some() {
            self.update_superblocks(st, |sb| {
                if let Some(d) = dev_number {
                    let _ = sb.set_role(d, DevRole::Faulty);
                }
                for &(s, d) in &assigned {
                    let _ = sb.set_role(d, DevRole::Active(s as u16));
                }
            });
        }
        if !assigned.is_empty() {
            self.bg.wake();
        }
    }

    /// Runs one request through the core: split, then batches of pieces phase by phase.
    fn run(
        &self,
        dir: Dir,
        array_sector: u64,
        user_ptr: *mut u8,
        user_len: usize,
        _fua: bool,
    ) -> Result<()> {
        self.bg.note_foreground();
        let sectors = (user_len / SECTOR) as u64;
        let mut suspects = Vec::new();
        if let (Dir::Write, Some(wi)) = (dir, &self.bitmap) {
            wi.start_write(self, array_sector, sectors);
            let r = self.run_pieces(
                dir,
                array_sector,
                sectors,
                user_ptr,
                user_len,
                &mut suspects,
            );
            wi.end_write(self, array_sector, sectors);
            return r;
        }
        let r = self.run_pieces(
            dir,
            array_sector,
            sectors,
            user_ptr,
            user_len,
            &mut suspects,
        );
        if !suspects.is_empty() {
            self.fix_read_errors(suspects);
        }
        r
    }

    /// md's answer to a read error: the data was already served from redundancy; now the
    /// unreadable blocks are rewritten from redundancy and read back (patrol's repair), and
    /// what stays unreadable goes to the bad-block log. A member with more than
    /// [`MAX_CORRECTED_READ_ERRORS`] such errors, or whose repair fails, is failed.
    fn fix_read_errors(&self, suspects: Vec<(usize, u64, u64)>) {
        let layout = self.raid10_layout();
        for (slot, ms, n) in suspects {
            let name = {
                let mut st = lock(&self.state);
                st.read_errors[slot] += 1;
                let name = st.slot_member[slot]
                    .and_then(|i| st.members[i].as_ref().map(|m| m.disk.name().to_string()));
                let Some(name) = name.filter(|_| st.slot_state[slot].usable()) else {
                    continue; // failed or replaced meanwhile
                };
                if st.read_errors[slot] > MAX_CORRECTED_READ_ERRORS {
                    drop(st);
                    self.member_failed(
                        slot,
                        &format!(
                            "more than {MAX_CORRECTED_READ_ERRORS} read errors corrected; failing it, as md does"
                        ),
                    );
                    continue;
                }
                st.events.push(ArrayEvent::ReadError {
                    member: name.clone(),
                    first_sector: ms,
                    end_sector: ms + n,
                    repaired: !self.read_only,
                });
                name
            };
            if self.read_only || self.check_writable().is_err() {
                continue;
            }
            match self.patrol_narrow(slot, ms, n, layout) {
                Ok((fixed, bad)) => {
                    let mut st = lock(&self.state);
                    st.events.push(ArrayEvent::ReadErrorsRepaired {
                        member: name,
                        rewritten_sectors: fixed,
                        bad_block_sectors: bad,
                    });
                }
                Err(e) => self.member_failed(slot, &format!("repairing a read error failed: {e}")),
            }
        }
    }

    fn run_pieces(
        &self,
        dir: Dir,
        array_sector: u64,
        sectors: u64,
        user_ptr: *mut u8,
        user_len: usize,
        suspects: &mut Vec<(usize, u64, u64)>,
    ) -> Result<()> {
        let mut pieces = plan::split(&self.geo, array_sector, sectors, self.max_band_sectors);
        let log = match dir {
            Dir::Write => self.log.as_deref(),
            Dir::Read => None,
        };
        let one_member_bands = log.is_some_and(|l| l.one_data_member_per_band());
        if one_member_bands {
            pieces = plan::one_data_member_per_band(&self.geo, pieces);
        }
        let healthy = {
            let st = lock(&self.state);
            st.slot_state.iter().all(|s| *s == MemberState::InSync)
        };
        let mut i = 0;
        while i < pieces.len() {
            // One batch: consecutive pieces within the scratch budget (at least one).
            let mut j = i;
            let mut bytes = 0usize;
            let mut cut = write_log::PhaseCut::new(log, &self.geo);
            while j < pieces.len() {
                let b = piece_scratch_estimate(&self.geo, &pieces[j], healthy);
                let log_fits = cut.admit(&pieces[j]);
                if j > i
                    && (bytes + b > self.batch_budget_bytes
                        || (one_member_bands
                            && pieces[i..j].iter().any(|p| plan::same_rows(p, &pieces[j])))
                        || !log_fits)
                {
                    break;
                }
                bytes += b;
                j += 1;
                if j - i >= 256 {
                    break;
                }
            }
            self.inflight.acquire();
            let mut keys: Vec<u64> = pieces[i..j].iter().map(|p| p.lock_key).collect();
            keys.sort_unstable();
            keys.dedup();
            self.locks.acquire(&keys);
            let r = self.run_batch(dir, &pieces[i..j], user_ptr, user_len, suspects);
            self.locks.release(&keys);
            self.inflight.release();
            r?;
            i = j;
        }
        Ok(())
    }

    fn snapshot(&self) -> (Vec<MemberState>, Vec<Option<Arc<Member>>>) {
        let st = lock(&self.state);
        let members = st
            .slot_member
            .iter()
            .map(|m| m.and_then(|i| st.members[i].clone()))
            .collect();
        (st.slot_state.clone(), members)
    }

    fn plan(&self, piece: &Piece, dir: Dir, states: &[MemberState]) -> Result<PieceOp> {
        let first_copy;
        let piece = match &piece.kind {
            // While a resync is pending, mirror reads go to the first live copy (the one the
            // resync copies from), as md's do.
            PieceKind::Copies { .. }
                if dir == Dir::Read
                    && self
                        .resync_pending
                        .load(std::sync::atomic::Ordering::Relaxed) =>
            {
                let mut p = piece.clone();
                if let PieceKind::Copies { read_hint, .. } = &mut p.kind {
                    *read_hint = 0;
                }
                first_copy = p;
                &first_copy
            }
            _ => piece,
        };
        let avoid;
        let states = match self.bad_block_states(piece, states) {
            Some(s) => {
                avoid = s;
                &avoid[..]
            }
            None => states,
        };
        PieceOp::new(&self.geo, piece, dir, states).map_err(|e| match e {
            PlanError::Unrecoverable { lost_members } => EngineError::ArrayFailed {
                detail: format!(
                    "RAID {} cannot {} this range without slots {:?}",
                    self.geo.md_level(),
                    if dir == Dir::Read { "read" } else { "write" },
                    lost_members
                ),
            },
        })
    }

    /// Runs a batch of pieces. A read error on a member during a read request does not fail
    /// the member: the piece is planned again without it (served from redundancy) and the
    /// range goes to `suspects`, repaired after the stripe locks are released. Read errors
    /// during a write, and write errors, fail the member.
    fn run_batch(
        &self,
        dir: Dir,
        pieces: &[Piece],
        user_ptr: *mut u8,
        user_len: usize,
        suspects: &mut Vec<(usize, u64, u64)>,
    ) -> Result<()> {
        // Members and replacements are taken together: a write planned against a slot's
        // member also reaches the replacement that may take the slot over meanwhile.
        let (mut states, mut members, mut replacements) = self.snapshot_for(dir);
        let mut ops: Vec<PieceOp> = Vec::with_capacity(pieces.len());
        for p in pieces {
            ops.push(self.plan(p, dir, &states)?);
        }
        let mut done = vec![false; ops.len()];
        // Per op: slots it must not read again (they returned a read error to it).
        let mut unreadable: Vec<Vec<usize>> = vec![Vec::new(); ops.len()];
        let _active = pool::ActiveGuard::enter();
        loop {
            // Collect the next phase of every op.
            let mut ios: Vec<(usize, plan::MemberIo)> = Vec::new();
            let mut phase_dir = vec![Dir::Read; ops.len()];
            for (k, op) in ops.iter_mut().enumerate() {
                if done[k] {
                    continue;
                }
                // SAFETY: no member I/O is in flight on the user buffer between phases; the
                // caller's buffer is valid for user_len bytes for the whole call.
                let user = unsafe {
                    match dir {
                        Dir::Read => {
                            UserBuf::Read(std::slice::from_raw_parts_mut(user_ptr, user_len))
                        }
                        Dir::Write => UserBuf::Write(std::slice::from_raw_parts(
                            user_ptr as *const u8,
                            user_len,
                        )),
                    }
                };
                match op.next(user) {
                    Step::Done => done[k] = true,
                    Step::Io { dir: d, ios: list } => {
                        phase_dir[k] = d;
                        ios.extend(list.into_iter().map(|io| (k, io)));
                    }
                }
            }
            if ios.is_empty() {
                return Ok(());
            }
            // Space first: on sparse image files every block this phase writes is allocated
            // before anything is written, so a full filesystem fails the request here, with
            // every stripe whole, instead of half-way through a stripe (and it is not a member
            // failure: writing works again once there is room).
            if dir == Dir::Write {
                self.reserve_phase(&ios, &states, &members, &replacements)?;
            }
            // The write log goes first: what the phase writes is durable in the log before
            // any member is written.
            let hold = match (dir, self.log.as_deref()) {
                (Dir::Write, Some(log)) => {
                    let writing: Vec<bool> = (0..ops.len())
                        .map(|k| !done[k] && phase_dir[k] == Dir::Write)
                        .collect();
                    // SAFETY: as above; no member I/O of this phase has been issued yet.
                    let user =
                        unsafe { std::slice::from_raw_parts(user_ptr as *const u8, user_len) };
                    log.log_phase(
                        self,
                        write_log::Phase {
                            ops: &mut ops,
                            ios: &ios,
                            writing: &writing,
                            user,
                            states: &mut states,
                            members: &mut members,
                        },
                    )?
                }
                _ => None,
            };
            let batch = Batch::new();
            // (op, slot, to the slot's replacement, member sector, sectors)
            let mut submitted: Vec<(usize, usize, bool, u64, u64)> = Vec::with_capacity(ios.len());
            let mut skipped_reads: Vec<usize> = Vec::new();
            // Members borrowed from the snapshot: no reference-count traffic per I/O. Members
            // being copied onto replacements get every write their slot gets.
            let mut jobs: Vec<(&Member, Job)> = Vec::with_capacity(ios.len());
            for (k, io) in &ios {
                let live = if io.dir == Dir::Read {
                    states[io.member].usable()
                } else {
                    states[io.member].writable()
                };
                let member = match (&members[io.member], live) {
                    (Some(m), true) => &**m,
                    _ => {
                        // The member went away after planning: a read must be replanned,
                        // a write to it is simply no longer needed.
                        if io.dir == Dir::Read {
                            skipped_reads.push(*k);
                        }
                        continue;
                    }
                };
                let len = io.sectors as usize * SECTOR;
                let ptr = match io.buf {
                    BufRef::User { offset_bytes } => {
                        debug_assert!(offset_bytes + len <= user_len);
                        // SAFETY: in bounds of the caller's buffer (the core plans within it).
                        unsafe { user_ptr.add(offset_bytes) }
                    }
                    BufRef::Scratch { index } => ops[*k].scratch_mut()[index].as_mut_ptr(),
                };
                if io.dir == Dir::Write {
                    if let Some(Some(r)) = replacements.get(io.member) {
                        submitted.push((*k, io.member, true, io.member_sector, io.sectors));
                        jobs.push((
                            &**r,
                            Job {
                                kind: JobKind::Write,
                                offset_bytes: r.data_offset_bytes
                                    + io.member_sector * SECTOR as u64,
                                ptr,
                                len,
                                batch: batch.clone(),
                                tag: submitted.len() - 1,
                            },
                        ));
                    }
                }
                let tag = submitted.len();
                submitted.push((*k, io.member, false, io.member_sector, io.sectors));
                jobs.push((
                    member,
                    Job {
                        kind: if io.dir == Dir::Read {
                            JobKind::Read
                        } else {
                            JobKind::Write
                        },
                        offset_bytes: member.data_offset_bytes + io.member_sector * SECTOR as u64,
                        ptr,
                        len,
                        batch: batch.clone(),
                        tag,
                    },
                ));
            }
            batch.add(jobs.len());
            pool::run_phase(
                jobs.into_iter()
                    .map(|(m, job)| (&m.worker, m.disk.name(), job))
                    .collect(),
                &batch,
            );
            let errors = batch.wait();
            if let Some(hold) = hold {
                hold.written();
            }
            let mut replan: Vec<usize> = skipped_reads;
            let mut no_space = None;
            for (tag, err) in errors {
                let (k, slot, replacement, ms, n) = submitted[tag];
                if err.is_no_space() {
                    // Only where space could not be reserved (a copy-on-write filesystem
                    // full on an overwrite): the member is fine, but the stripe may now hold
                    // new data beside old parity, so it is resynced, as after a crash.
                    self.needs_resync_from(ms);
                    self.report_no_space(&err);
                    no_space.get_or_insert(err);
                    continue;
                }
                if replacement {
                    self.replacement_failed(slot, &err.to_string());
                    continue;
                }
                if dir == Dir::Read
                    && self.geo.level() != RaidLevel::Raid0
                    && !unreadable[k].contains(&slot)
                {
                    unreadable[k].push(slot);
                    suspects.push((slot, ms, n));
                    replan.push(k);
                    continue;
                }
                self.member_failed(slot, &err.to_string());
                if phase_dir[k] == Dir::Read {
                    replan.push(k);
                }
            }
            if !replan.is_empty() {
                replan.sort_unstable();
                replan.dedup();
                (states, members, replacements) = self.snapshot_for(dir);
                for k in replan {
                    let mut local;
                    let states = if unreadable[k].is_empty() {
                        &states
                    } else {
                        local = states.clone();
                        for &s in &unreadable[k] {
                            local[s] = MemberState::Faulty;
                        }
                        &local
                    };
                    ops[k] = self.plan(&pieces[k], dir, states)?;
                    done[k] = false;
                }
            }
            if let Some(err) = no_space {
                return Err(EngineError::Disk(err));
            }
            if dir == Dir::Write {
                self.check_failed()?;
            }
        }
    }

    /// Reserves the space of a write phase on every member (and replacement) it writes; the
    /// first member without room ends the request with its [`DiskError`] (`NoSpace`), before
    /// anything of the phase is written. Other errors are left to the writes themselves.
    fn reserve_phase(
        &self,
        ios: &[(usize, plan::MemberIo)],
        states: &[MemberState],
        members: &[Option<Arc<Member>>],
        replacements: &[Option<Arc<Member>>],
    ) -> Result<()> {
        for (_, io) in ios {
            if io.dir != Dir::Write || !states[io.member].writable() {
                continue;
            }
            let len = io.sectors * SECTOR as u64;
            let targets = [
                &members[io.member],
                replacements.get(io.member).unwrap_or(&None),
            ];
            for m in targets.into_iter().flatten() {
                let at = m.data_offset_bytes + io.member_sector * SECTOR as u64;
                if let Err(e) = m.disk.reserve(at, len) {
                    if e.is_no_space() {
                        self.report_no_space(&e);
                        return Err(EngineError::Disk(e));
                    }
                }
            }
        }
        Ok(())
    }

    /// Records a write refused for want of space, once until writing works again (a client
    /// retrying into a full filesystem does not flood the log).
    fn report_no_space(&self, err: &raidkit_disk::DiskError) {
        if !self
            .no_space
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            lock(&self.state).events.push(ArrayEvent::NoSpace {
                member: err.member.clone(),
                detail: err.to_string(),
            });
        }
    }

    /// A write left stripes at member sector `ms` (array sector for RAID 10) possibly
    /// inconsistent without a crash: a resync from there is pending, as after an unclean stop.
    fn needs_resync_from(&self, ms: u64) {
        if self.geo.level() == RaidLevel::Raid0 {
            return;
        }
        let at = if self.geo.level() == RaidLevel::Raid10 {
            // RAID 10's resync runs over array sectors: from the start is always safe.
            0
        } else {
            ms
        };
        let mut st = lock(&self.state);
        st.resync_from = Some(st.resync_from.map_or(at, |r| r.min(at)));
        self.resync_pending
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Sorted bad-block entries with overlapping and adjacent ones joined, each at most md's
/// `BB_MAX_LEN` units long (longer runs are split), so the log holds as many sectors as it can.
fn merge_bad_blocks(
    sorted: Vec<raidkit_metadata::BadBlock>,
    unit: u64,
) -> Vec<raidkit_metadata::BadBlock> {
    let max = raidkit_metadata::badblocks::BB_MAX_LEN_UNITS * unit;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for b in sorted {
        let end = b.sector + b.len_sectors;
        match runs.last_mut() {
            Some((_, e)) if b.sector <= *e => *e = (*e).max(end),
            _ => runs.push((b.sector, end)),
        }
    }
    let mut out = Vec::new();
    for (mut start, end) in runs {
        while start < end {
            let len = (end - start).min(max);
            out.push(raidkit_metadata::BadBlock {
                sector: start,
                len_sectors: len,
            });
            start += len;
        }
    }
    out
}

/// A bad-block log's entries (device sectors) as (data sector, length) ranges.
fn data_ranges(list: &[raidkit_metadata::BadBlock], data_offset_sectors: u64) -> Vec<(u64, u64)> {
    list.iter()
        .map(|b| (b.sector.saturating_sub(data_offset_sectors), b.len_sectors))
        .collect()
}

/// Read errors corrected from redundancy before a member is failed (md's default for
/// max_corrected_read_errors).
pub const MAX_CORRECTED_READ_ERRORS: u32 = 20;

/// Scratch bytes a piece's plan may allocate (see `PieceOp::plan_band_write`). On a healthy
/// array the plan is known from the piece's shape: a full-stripe write needs only new parity,
/// a read-modify-write the old data and old and new parity, a reconstruct-write the data it
/// does not write and new parity, whichever reads less. Degraded plans may need every block.
fn piece_scratch_estimate(geo: &Geo, p: &Piece, healthy: bool) -> usize {
    match &p.kind {
        PieceKind::Copies { .. } => 0,
        PieceKind::Band {
            sectors,
            dd_first,
            dd_last,
            ..
        } => {
            let (n, d) = (geo.raid_disks, geo.data_disks());
            let parity = n - d;
            let k = dd_last + 1 - dd_first;
            let blocks = if !healthy {
                n + 2
            } else if k >= d {
                parity
            } else if k + parity < d - k {
                k + 2 * parity
            } else {
                d - k + parity
            };
            blocks * *sectors as usize * SECTOR
        }
    }
}

fn aligned_window(offset: u64, len: usize) -> (u64, usize) {
    let s = SECTOR as u64;
    let start = offset / s * s;
    let end = (offset + len as u64).div_ceil(s) * s;
    (start, (end - start) as usize)
}

impl Drop for Array {
    fn drop(&mut self) {
        // Workers are joined when their Member is dropped (last Arc).
        let mut st = lock(&self.state);
        st.members.clear();
    }
}

/// Names of the members, for messages.
pub fn member_names(members: &[Box<dyn Disk>]) -> Vec<String> {
    members.iter().map(|m| m.name().to_string()).collect()
}

/// The NBD server calls one `Array` from many connection threads.
#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Array>();
}

#[cfg(test)]
mod tests {
    use super::merge_bad_blocks;
    use raidkit_metadata::BadBlock;

    fn bb(sector: u64, len_sectors: u64) -> BadBlock {
        BadBlock {
            sector,
            len_sectors,
        }
    }

    #[test]
    fn adjacent_and_overlapping_bad_blocks_join_and_long_runs_split_at_md_max() {
        let merged = merge_bad_blocks(vec![bb(0, 8), bb(8, 8), bb(12, 8), bb(40, 8)], 1);
        assert_eq!(merged, vec![bb(0, 20), bb(40, 8)]);
        // 600 adjacent 1-sector entries with 1-sector units: split at 512.
        let many = (0..600).map(|s| bb(1000 + s, 1)).collect();
        assert_eq!(merge_bad_blocks(many, 1), vec![bb(1000, 512), bb(1512, 88)]);
        // With 8-sector units the limit is 4096 sectors.
        assert_eq!(
            merge_bad_blocks(vec![bb(0, 4096), bb(4096, 8)], 8),
            vec![bb(0, 4096), bb(4096, 8)]
        );
    }
}
