//! What callers pass in and get back: the driver's bounds ([`EngineConfig`]), create and
//! assemble options, the assembly report, and [`Status`] with its per-member rows.

use super::*;

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

/// How `create` makes a new array's parity and copies consistent with its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Init {
    /// Every member's data area is known to read as zeroes (freshly created sparse image
    /// files): all-zero data has all-zero P and Q, so the array is consistent as is.
    Zeroed,
    /// Create writes zeroes over the data areas before it returns (on members that offload
    /// zeroing, a file's hole or a device's write-zeroes, this is the fast initialisation).
    Zero,
    /// Nothing is written but the metadata: the array is recorded not in sync from its
    /// start, usable at once, and a resync builds parity and copies behind it (md's initial
    /// resync; a controller's background initialisation). RAID 0 has nothing to build.
    Background,
    /// Nothing is written but the metadata and the array is recorded in sync (mdadm's
    /// `--assume-clean`): for members known consistent, or a check that repairs later.
    AssumeClean,
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
    /// How the new array is made consistent (see [`Init`]).
    pub init: Init,
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
    /// What else assembly found or did (a log replayed, a resync needed), in order; each
    /// one's `Display` is its sentence. They are in the array's event log too
    /// ([`Array::events_since`]), after any event assembly logged itself.
    pub events: Vec<ArrayEvent>,
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
    /// Requests that reached the member since assembly, counted as `iostat -x` counts them.
    pub io: MemberIo,
    /// What the member's drive said at the last [`Array::poll_health`] (`None`: not asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<raidkit_disk::Health>,
    /// The warnings that answer gave (see [`Array::poll_health`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_warnings: Vec<String>,
}

/// A member's counters as [`Array::member_io`] reads them.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct MemberIoReading {
    /// Member index (as in [`MemberStatus::index`]).
    pub index: usize,
    /// The slot it fills (or is the replacement for); `None` for spares.
    pub slot: Option<usize>,
    pub name: String,
    pub io: MemberIo,
}

/// One reading of a member's I/O counters (totals since it joined the array): what
/// `raidkit iostat` turns into per-second rates (see [`raidkit_disk::IoRates`]). `at_ns` is
/// the reading process's monotonic clock, so rates come from two readings of one process.
pub type MemberIo = raidkit_disk::IoSnapshot;

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
    /// The read policy and what its cache has done (see `array/read_ahead.rs`).
    pub read_ahead: super::ReadAheadCounters,
    /// The write policy and what its cache has done (see `array/write_back.rs`).
    pub write_back: super::WriteBackCounters,
    /// What happened to the array since assembly (what assembly found, member failures and
    /// such), oldest first: the newest [`crate::events::EVENTS_KEPT`] of
    /// [`Array::events_since`]. Each one's `Display` is its sentence.
    pub log: Vec<ArrayEvent>,
    /// A RAID 50/60 stack's level and spans (this array is the RAID 0 over them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<super::StackStatus>,
}
