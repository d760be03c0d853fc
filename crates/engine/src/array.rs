//! The real driver: an [`Array`] runs the sans-IO core on worker threads over member [`Disk`]s
//! and keeps md's superblocks up to date.
//!
//! `Array`'s whole public surface, by what it is for (every method takes `&self`; one array
//! is shared by many threads):
//! - make one: [`Array::create`], [`Array::create_with_policy`] (array/create.rs),
//!   [`Array::assemble`] (array/assemble.rs, with its [`AssembleReport`]);
//! - the types callers pass and get back (array/options.rs): [`EngineConfig`],
//!   [`CreateOptions`], [`AssembleOptions`], [`AssembleReport`], [`Status`];
//! - the block device (request path in array/datapath.rs): [`Array::read_at`], [`Array::write_at`] (with `fua`), [`Array::flush`],
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
use raidkit_disk::{Disk, IoCounters};
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
mod datapath;
mod drive_health;
mod gather;
mod grow;
mod journal;
mod members;
mod online;
mod options;
mod ppl;
mod read_ahead;
mod reshape;
mod stack;
mod write_back;
mod write_log;

/// The read cache's bound (`array/read_ahead.rs`): a controller's cache is of this order
/// (the PERC6 has 256 MiB for reads and writes together).
const READ_CACHE_BYTES: u64 = 64 << 20;
use crate::events::{ArrayEvent, EventLog};
pub(crate) use crate::membership::assembly::{self, Assembly};
pub(crate) use crate::membership::{ByMember, BySlot, MemberId, Names, Roster, Slot, Transition};
pub use crate::tasks::{TaskKind, TaskOutcome, TaskProgress, TaskRates, TaskReport};
use datapath::aligned_window;
pub use drive_health::MemberHealth;
pub use gather::GatherCounters;
pub use grow::{GrowMirrorsReport, GrowSize, GrowSizeReport};
pub use online::{shared_disks, OnlineReshape};
pub use options::*;
pub use read_ahead::{ReadAhead, ReadAheadCounters};
pub use reshape::{ReshapeControl, ReshapeReport, ReshapeStatus, ReshapeTarget};
pub use stack::{looks_stacked, split_stack, ArrayDisk, StackOptions, StackSplit, StackStatus};
pub use write_back::{WriteBackCounters, WritePolicy};
use write_log::IntentHooks;

pub(crate) struct Member {
    pub(crate) disk: Arc<dyn Disk>,
    pub(crate) worker: Worker,
    pub(crate) data_offset_bytes: u64,
    /// Every request that reaches the member's device, counted as `iostat -x` counts them.
    pub(crate) io: Arc<IoCounters>,
    /// The device spins ([`Disk::is_rotational`]): mirror reads mind where its head is.
    pub(crate) rotational: bool,
    /// The member sector where the last read sent to it ends (`u64::MAX`: none yet).
    pub(crate) read_head: std::sync::atomic::AtomicU64,
    /// What its drive said at the last [`Array::poll_health`], and the warnings already
    /// raised for it.
    pub(crate) health: Mutex<drive_health::Seen>,
}

/// Whether members' I/O is counted ([`raidkit_disk::Counted`]): always, unless the
/// environment says `RAIDKIT_MEMBER_COUNTERS=off`. That switch exists to measure what counting
/// costs, side by side (`scripts/compare/counters.sh`); the members' figures then stay 0.
fn count_member_io() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("RAIDKIT_MEMBER_COUNTERS").map_or(true, |v| v != "off"))
}

impl Member {
    /// Puts `disk` in service as member number `index`: its I/O is counted and a worker
    /// thread takes its requests.
    pub(crate) fn start(
        index: usize,
        disk: Arc<dyn Disk>,
        data_offset_bytes: u64,
    ) -> Result<Member> {
        let (disk, io): (Arc<dyn Disk>, Arc<IoCounters>) = if count_member_io() {
            let counted = raidkit_disk::Counted::new(disk);
            let io = counted.counters().clone();
            (Arc::new(counted), io)
        } else {
            (disk, Arc::default())
        };
        let worker = Worker::spawn(format!("raidkit-m{index}"), disk.clone()).map_err(|e| {
            EngineError::Invalid(format!("cannot start a member worker thread: {e}"))
        })?;
        Ok(Member {
            read_head: std::sync::atomic::AtomicU64::new(u64::MAX),
            rotational: disk.is_rotational(),
            disk,
            worker,
            data_offset_bytes,
            io,
            health: Mutex::default(),
        })
    }
}

pub(crate) struct State {
    /// Every device attached, in the order given (spares and faulty ones too); `None` once
    /// removed.
    pub(crate) members: ByMember<Option<Arc<Member>>>,
    /// Who fills which slot, and each member's superblock: what membership changes act on
    /// (see `membership.rs`).
    pub(crate) roster: Roster,
    dirty: bool,
    pub(crate) events: EventLog,
    /// A resync after an unclean stop is pending from here (member sectors, or array sectors
    /// for RAID 10); `None` when parity and copies are known consistent.
    pub(crate) resync_from: Option<u64>,
    /// Per member (index as in `members`): ranges md's bad-block log lists, in member data
    /// sectors (the log itself stores device sectors). Reads never go there.
    pub(crate) bad: ByMember<Vec<(u64, u64)>>,
}

impl State {
    /// The member in each slot (`None`: no member, or it is no longer attached).
    pub(crate) fn slot_members(&self) -> Vec<Option<Arc<Member>>> {
        self.roster
            .slot_member
            .iter()
            .map(|m| m.and_then(|i| self.members[i].clone()))
            .collect()
    }
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
    /// Partial stripes of sequential writes gathered into whole ones (parity levels).
    gather: Option<gather::Gather>,
    /// The read policy's cache (`array/read_ahead.rs`).
    read_cache: read_ahead::ReadCache,
    /// The write policy's cache (`array/write_back.rs`).
    write_back: write_back::WriteBack,
    /// One layout's view of an array being reshaped online (see `array/online.rs`): it
    /// writes no superblock (the reshape records the array's state), so a member failing in
    /// it is failed in memory and recorded by the reshape's next step.
    pub(crate) frozen: bool,
    /// A RAID 50/60 stack's top array keeps its spans here (see `array/stack.rs`).
    stack: Option<stack::Spans>,
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
        sbs: ByMember<Superblock>,
        slot_member: BySlot<Option<MemberId>>,
        slot_state: BySlot<MemberState>,
        dirty: bool,
    ) -> Result<Array> {
        let mut members = Vec::with_capacity(disks.len());
        for (i, (disk, sb)) in disks.into_iter().zip(sbs.iter()).enumerate() {
            members.push(Some(Arc::new(Member::start(
                i,
                Arc::from(disk),
                sb.data_offset_sectors * 512,
            )?)));
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
        let log = write_log::open(&geo, sbs.as_slice(), &members)?;
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
                members: ByMember::from_vec(members),
                roster: Roster {
                    sbs,
                    slot_member,
                    slot_state,
                    failed: None,
                    replacement: BySlot::filled(None, geo.raid_disks),
                    read_errors: BySlot::filled(0, geo.raid_disks),
                    bitmap_recovery: BySlot::filled(false, geo.raid_disks),
                },
                dirty,
                events: EventLog::default(),
                resync_from: None,
                bad: ByMember::from_vec(Vec::new()),
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
            read_cache: read_ahead::ReadCache::new(READ_CACHE_BYTES),
            write_back: write_back::WriteBack::new(),
            gather: matches!(geo.scheme(), Scheme::Parity { .. })
                .then(|| gather::Gather::new(geo.data_disks() as u64 * geo.chunk_sectors)),
            geo,
            frozen: false,
            stack: None,
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

    /// Records an event the layer above caused (a spare moved here from another array by
    /// the server): it reaches [`Array::events_since`] like the array's own.
    pub fn record_event(&self, event: ArrayEvent) {
        lock(&self.state).events.push(event);
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

    /// Whether any member spins (what its device reports, or its emulated model).
    pub fn has_spinning_members(&self) -> bool {
        self.snapshot().1.iter().flatten().any(|m| m.rotational)
    }

    /// What gathering partial-stripe writes into whole stripes has done (zero on levels
    /// without parity).
    pub fn gather_counters(&self) -> GatherCounters {
        self.gather
            .as_ref()
            .map(|g| g.counters())
            .unwrap_or_default()
    }

    pub fn config(&self) -> EngineConfig {
        self.config
    }

    /// Reads `buf.len()` bytes at `offset_bytes` of the array (through the read cache when
    /// a read-ahead policy is set, see `array/read_ahead.rs`).
    pub fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<()> {
        self.check_range(offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        self.read_cached(buf, offset_bytes)
    }

    /// A read as asked, from the members and the write-back cache.
    fn read_direct(&self, buf: &mut [u8], offset_bytes: u64) -> Result<()> {
        // The cache's pages are taken before the members are read: a page written back
        // meanwhile is the same on both.
        let cached = self.cached_snapshot(offset_bytes, buf.len() as u64);
        self.read_members(buf, offset_bytes)?;
        Array::overlay(buf, offset_bytes, &cached);
        Ok(())
    }

    /// A read as asked, from the members.
    fn read_members(&self, buf: &mut [u8], offset_bytes: u64) -> Result<()> {
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
        // Dropped from the read cache before the write (nothing older is served after it)
        // and again after it (a read-ahead that ran meanwhile keeps nothing).
        self.read_cache.invalidate(offset_bytes, buf.len() as u64);
        let written = if self.write_back_active() {
            self.write_back_at(buf, offset_bytes, fua)
        } else {
            self.write_uncached(buf, offset_bytes, fua)
        };
        self.read_cache.invalidate(offset_bytes, buf.len() as u64);
        written
    }

    /// [`Array::write_at`] past the read cache.
    fn write_uncached(&self, buf: &[u8], offset_bytes: u64, fua: bool) -> Result<()> {
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
            lock(&self.state).events.push(ArrayEvent::SpaceAgain);
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
        // The members of writable slots, then replacements.
        let targets: Vec<Arc<Member>> = {
            let st = lock(&self.state);
            let slots = st
                .roster
                .slot_member
                .enumerate()
                .filter(|(s, _)| st.roster.slot_state[*s].writable())
                .filter_map(|(_, m)| m.and_then(|i| st.members[i].clone()));
            let replacements = st
                .roster
                .replacement
                .iter()
                .filter_map(|r| r.and_then(|i| st.members[i].clone()));
            slots.chain(replacements).collect()
        };
        let mark = self
            .log
            .as_ref()
            .map(|l| l.flush_mark())
            .unwrap_or_default();
        let batch = Batch::new();
        batch.add(targets.len());
        pool::run_phase(
            targets
                .iter()
                .enumerate()
                .map(|(tag, m)| {
                    let job = Job {
                        kind: JobKind::Flush,
                        offset_bytes: 0,
                        ptr: std::ptr::null_mut(),
                        len: 0,
                        batch: batch.clone(),
                        tag,
                        pieces: Vec::new(),
                    };
                    (&m.worker, m.disk.name(), job)
                })
                .collect(),
            &batch,
        );
        for (tag, err) in batch.wait() {
            // The device that erred, in the role it has now (an earlier error of this flush
            // may have handed its slot to a spare, or made a replacement the slot's member).
            self.io_failed(&targets[tag], &err.to_string());
        }
        if let Some(log) = &self.log {
            log.flush(self, &mark)?;
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
    ///
    /// A RAID 50/60 stack's top array stops its spans after itself.
    pub fn stop(&self) -> Result<()> {
        let stopped = self.stop_self();
        let spans = self.stop_spans();
        stopped.and(spans)
    }

    /// [`Array::stop`] of this array alone.
    fn stop_self(&self) -> Result<()> {
        self.stop_background();
        self.drain_write_back()?;
        self.stop_destaging();
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
        if st.roster.failed.is_some() {
            return Ok(());
        }
        self.skip_resync_when_fully_degraded(&mut st);
        let resync = st.resync_from;
        // The superblocks may record a resync cursor the array finished since (assembled
        // after a clean stop part-way through a resync): they are written clean then too.
        let recorded_unclean = st.roster.sbs.iter().any(|sb| !sb.is_clean());
        if st.dirty || resync.is_some() || recorded_unclean {
            self.update_superblocks(&mut st, |sb| match resync {
                Some(at) => sb.mark_dirty(at),
                None => sb.mark_clean(),
            });
            st.dirty = false;
        }
        Ok(())
    }

    /// Stops the array ([`Array::stop`]) and hands over its members' disks, every attached
    /// member in member order, to go on with them elsewhere (an online reshape); the array
    /// keeps none, so nothing reaches them through it any more.
    pub fn stop_and_release(&self) -> Result<Vec<Arc<dyn Disk>>> {
        self.stop()?;
        let mut st = lock(&self.state);
        let disks = st
            .members
            .iter()
            .flatten()
            .map(|m| m.disk.clone())
            .collect();
        for m in st.members.iter_mut() {
            *m = None;
        }
        st.roster.failed = Some("the array was stopped and its members handed over".into());
        Ok(disks)
    }

    /// Each attached member's I/O counters now, by member index, with its slot (the cheap
    /// part of [`Array::status`], for sampling many times a second).
    pub fn member_io(&self) -> Vec<MemberIoReading> {
        let st = lock(&self.state);
        st.members
            .enumerate()
            .filter_map(|(i, m)| {
                let m = m.as_ref()?;
                let slot = st
                    .roster
                    .slot_member
                    .find(&Some(i))
                    .or(st.roster.replacement.find(&Some(i)));
                Some(MemberIoReading {
                    index: i.0,
                    slot: slot.map(|s| s.0),
                    name: m.disk.name().to_string(),
                    io: m.io.snapshot(),
                })
            })
            .collect()
    }

    pub fn status(&self) -> Status {
        let st = lock(&self.state);
        let any = st
            .roster
            .sbs
            .iter()
            .zip(&st.members)
            .find(|(_, m)| m.is_some())
            .map(|(sb, _)| sb)
            .or(st.roster.sbs.first());
        let missing_slots: Vec<usize> = st
            .roster
            .slot_state
            .enumerate()
            .filter(|(_, s)| !s.usable())
            .map(|(s, _)| s.0)
            .collect();
        let members = st
            .members
            .enumerate()
            .filter_map(|(i, m)| {
                let m = m.as_ref()?;
                let replacing = st.roster.replacement.find(&Some(i));
                let slot = st.roster.slot_member.find(&Some(i)).or(replacing);
                let state = slot.map(|s| st.roster.slot_state[s]);
                let role = match state {
                    _ if replacing.is_some() => "replacement",
                    Some(MemberState::InSync) => "active",
                    Some(MemberState::Rebuilding) => "rebuilding",
                    Some(_) => "faulty",
                    None => {
                        if any.is_some_and(|sb| {
                            sb.role_of(st.roster.sbs[i].dev_number) == DevRole::Faulty
                        }) {
                            "faulty"
                        } else if st.roster.sbs[i].role() == DevRole::Journal {
                            "journal"
                        } else {
                            "spare"
                        }
                    }
                };
                let (health, health_warnings) = {
                    let seen = lock(&m.health);
                    (seen.last.clone(), seen.warnings.clone())
                };
                Some(MemberStatus {
                    index: i.0,
                    name: m.disk.name().to_string(),
                    slot: slot.map(|s| s.0),
                    role: role.to_string(),
                    state,
                    device_uuid: st.roster.sbs[i].device_uuid.to_mdadm_string(),
                    data_offset_sectors: st.roster.sbs[i].data_offset_sectors,
                    events: st.roster.sbs[i].events,
                    bad_block_ranges: st.bad.get(i).map_or(0, Vec::len),
                    io: m.io.snapshot(),
                    health,
                    health_warnings,
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
            failed: st.roster.failed.is_some(),
            read_only: self.read_only,
            consistency_policy: self.consistency_policy(),
            events: st.roster.sbs.iter().map(|sb| sb.events).max().unwrap_or(0),
            missing_slots,
            members,
            task: self.bg.running(),
            pending: Vec::new(),
            finished_tasks: self.bg.history(),
            resync_from_sectors: st.resync_from,
            read_ahead: self.read_cache.counters(),
            write_back: self.write_back_counters(),
            log: st.events.kept(),
            stack: None,
        };
        drop(st);
        out.pending = self.pending_tasks();
        out.stack = self.stack_status();
        if let Some(stack) = &out.stack {
            // A span's lost member is redundancy the stack has lost.
            out.degraded |= stack.spans.iter().any(|s| s.degraded);
            out.failed |= stack.spans.iter().any(|s| s.failed);
        }
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
        match &lock(&self.state).roster.failed {
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
        let mut at = 0;
        if let Some(log) = &self.log {
            if log.keeps_array_clean() {
                st.dirty = true;
                return Ok(());
            }
            for event in log.before_dirty(self, &mut st) {
                st.events.push(event);
            }
            at = log.dirty_resync_offset(st.resync_from);
        }
        self.update_superblocks(&mut st, |sb| sb.mark_dirty(at));
        st.dirty = true;
        match &st.roster.failed {
            Some(d) => Err(EngineError::ArrayFailed { detail: d.clone() }),
            None => Ok(()),
        }
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
