//! The real driver: an [`Array`] runs the sans-IO core on worker threads over member [`Disk`]s
//! and keeps md's superblocks up to date.
//!
//! `Array`'s whole public surface, by what it is for (every method takes `&self`; one array
//! is shared by many threads):
//! - make one: [`Array::create`], [`Array::create_with_policy`] (array/create.rs),
//!   [`Array::assemble`] (array/assemble.rs, with its [`AssembleReport`]);
//! - the block device: [`Array::read_at`], [`Array::write_at`] (with `fua`), [`Array::flush`],
//!   [`Array::trim`], [`Array::write_zeroes`], [`Array::size_bytes`],
//!   [`Array::full_stripe_bytes`], [`Array::is_read_only`], [`Array::stop`];
//! - what it is and what happened: [`Array::status`], [`Array::events_since`] (typed
//!   [`crate::events::ArrayEvent`]s), [`Array::geometry`], [`Array::config`],
//!   [`Array::consistency_policy`], [`Array::bitmap_dirty_bits`];
//! - membership (array/members.rs): [`Array::fail_member`], [`Array::remove_member`],
//!   [`Array::add_spare`], [`Array::re_add`], [`Array::replace_member`];
//! - background work (rebuild, replace, check/repair, resync, patrol):
//!   [`Array::pending_tasks`], [`Array::run_task`], [`Array::run_pending`],
//!   [`Array::request_task`], [`Array::cancel_task`], [`Array::start_background`],
//!   [`Array::set_task_rates`], [`Array::task_rates`], [`Array::set_task_start`],
//!   [`Array::set_checkpoint_interval`], [`Array::set_patrol_interval`].
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

mod assemble;
pub(crate) mod bitmap;
mod create;
mod journal;
mod members;
mod ppl;
mod write_log;
use crate::error::AbsentMember;
use crate::events::{ArrayEvent, EventLog};
pub use crate::tasks::{TaskKind, TaskOutcome, TaskProgress, TaskRates, TaskReport};
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

pub(crate) struct Member {
    pub(crate) disk: Arc<dyn Disk>,
    pub(crate) worker: Worker,
    pub(crate) data_offset_bytes: u64,
}

pub(crate) struct State {
    /// Every device attached, in the order given (spares and faulty ones too); `None` once
    /// removed.
    pub(crate) members: Vec<Option<Arc<Member>>>,
    /// Each attached member's superblock (kept in memory, written on every change).
    pub(crate) sbs: Vec<Superblock>,
    pub(crate) slot_member: Vec<Option<usize>>,
    pub(crate) slot_state: Vec<MemberState>,
    dirty: bool,
    pub(crate) failed: Option<String>,
    pub(crate) events: EventLog,
    /// Per slot: a member being copied from the slot's member (md's replacement).
    pub(crate) replacement: Vec<Option<usize>>,
    /// Per slot: read errors corrected from redundancy since the slot's member joined; past
    /// [`MAX_CORRECTED_READ_ERRORS`] the member is failed (md's max_corrected_read_errors).
    read_errors: Vec<u32>,
    /// A resync after an unclean stop is pending from here (member sectors, or array sectors
    /// for RAID 10); `None` when parity and copies are known consistent.
    pub(crate) resync_from: Option<u64>,
    /// Per member (index as in `members`): ranges md's bad-block log lists, in member data
    /// sectors (the log itself stores device sectors). Reads never go there.
    pub(crate) bad: Vec<Vec<(u64, u64)>>,
    /// Per slot: the member being rebuilt came back and only needs what the write-intent
    /// bitmap marks (md's bitmap-based recovery after a re-add).
    pub(crate) bitmap_recovery: Vec<bool>,
}

/// An assembled array. All methods take `&self` and may be called from many threads.
pub struct Array {
    pub(crate) geo: Geo,
    version: SuperblockVersion,
    pub(crate) read_only: bool,
    pub(crate) config: EngineConfig,
    max_band_sectors: u64,
    batch_budget_bytes: usize,
    pub(crate) state: Mutex<State>,
    pub(crate) locks: StripeLocks,
    inflight: Semaphore,
    /// Serialises superblock updates (dirty marking, failures) without blocking data I/O.
    pub(crate) sb_lock: Mutex<()>,
    /// Background tasks (rebuild, resync, check, patrol) and their service thread.
    pub(crate) bg: crate::tasks::Bg,
    /// A resync is pending: mirror reads then go to the first live copy, as md's do, so a
    /// read never sees two different versions of a sector the crash left unsynced.
    pub(crate) resync_pending: AtomicBool,
    /// Some slot has a replacement (checked on every write without taking the state lock).
    has_replacement: AtomicBool,
    /// Some member has bad blocks (checked on every request without taking the state lock).
    pub(crate) has_bad: AtomicBool,
    /// md's internal write-intent bitmap, when the array has one.
    bitmap: Option<bitmap::WriteIntent>,
    /// The log that closes the write hole, when the array has one: md's partial parity log
    /// or its write journal (see `array/write_log.rs`).
    log: Option<Box<dyn write_log::WriteLog>>,
    /// A write was refused for want of space and none has succeeded since.
    no_space: AtomicBool,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
            bg: crate::tasks::Bg::new(),
            resync_pending: AtomicBool::new(false),
            has_replacement: AtomicBool::new(false),
            has_bad: AtomicBool::new(false),
            no_space: AtomicBool::new(false),
            bitmap: None,
            log,
            geo,
        })
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

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(EngineError::ReadOnly);
        }
        self.check_failed()
    }

    pub(crate) fn check_failed(&self) -> Result<()> {
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

    pub(crate) fn snapshot(&self) -> (Vec<MemberState>, Vec<Option<Arc<Member>>>) {
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
