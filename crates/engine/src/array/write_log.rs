//! The write-log seam: what the write path asks of a log that closes the write hole, in one
//! place, as md's `raid5-log.h` puts its journal and its partial parity log behind
//! `log_stripe`, `log_stripe_write_finished`, `log_handle_flush_request`, `log_quiesce`, ....
//!
//! An array has at most one write log (md's are exclusive): the partial parity log
//! (`array/ppl.rs`, RAID 5) or the write journal (`array/journal.rs`, RAID 4/5/6). Both
//! implement [`WriteLog`]; the array holds it as `Array::log` and calls it at these points of
//! a write request, in this order:
//!
//! 1. the write-intent bitmap's [`IntentHooks::start_write`]: the request's bits are set and
//!    durable before any of its writes (md's `md_bitmap_startwrite`);
//! 2. planning: bands no wider than [`WriteLog::max_band_sectors`], and batches cut by
//!    [`PhaseCut`] so that each phase's logging fits one log write per log device;
//! 3. for every write phase of a batch, [`WriteLog::log_phase`] before the phase's member
//!    writes are issued (md's `log_stripe`), and [`PhaseHold::written`] once they completed
//!    or failed (md's `log_stripe_write_finished`);
//! 4. the bitmap's [`IntentHooks::end_write`]: the request's bits may be cleared once idle
//!    and flushed (md's `md_bitmap_endwrite`).
//!
//! Around the writes: [`WriteLog::start`] at creation and at assembly (the replay after a
//! crash), [`WriteLog::before_dirty`] and [`WriteLog::keeps_array_clean`] when the first write
//! marks the array dirty, [`WriteLog::flush`] with every flush, [`WriteLog::member_joins`] for
//! a member added to the array (md's `log_modify`), [`WriteLog::stop`] at a clean stop (md's
//! `log_quiesce` and `log_exit`), and [`WriteLog::device_failed`] when a log write fails.
//!
//! The bitmap is a second, smaller seam ([`IntentHooks`]) and not a third [`WriteLog`]: it
//! brackets a whole request's range of the resync space, not a phase's member writes, it
//! replays nothing (the resync reads its bits), and it serves RAID 1 and 10 too, which have no
//! write log.

use super::{Array, ConsistencyPolicy, Member, Result, State};
use crate::events::ArrayEvent;
use crate::geometry::Geo;
use crate::plan::{MemberIo, MemberState, Piece, PieceOp};
use raidkit_disk::Disk;
use raidkit_metadata::{DataLayout, DevRole, FeatureMap, Superblock};
use std::sync::Arc;

/// How a log starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LogStart {
    /// A new array: its log areas were written empty when it was created.
    Created,
    /// An assembled array; `dirty` when it was not stopped cleanly, `resync_offset` as its
    /// superblocks record it.
    Assembled { dirty: bool, resync_offset: u64 },
}

/// One write phase, as the log sees it before any of its member writes are issued.
pub(super) struct Phase<'p> {
    /// The batch's ops (the journal logs pages from their scratch).
    pub(super) ops: &'p mut [PieceOp],
    /// The phase's member I/Os: (op, I/O).
    pub(super) ios: &'p [(usize, MemberIo)],
    /// Per op: it writes in this phase.
    pub(super) writing: &'p [bool],
    /// The caller's buffer (a write's data).
    pub(super) user: &'p [u8],
    /// Member states and members by slot the phase was planned against. A log that fails a
    /// member takes them again, so the phase no longer writes it.
    pub(super) states: &'p mut Vec<MemberState>,
    pub(super) members: &'p mut Vec<Option<Arc<Member>>>,
}

/// What a log holds over a write phase until its member writes are done.
pub(super) trait PhaseHold {
    /// The phase's member writes have completed (or failed, which failed their members).
    fn written(self: Box<Self>);
}

pub(super) type LogHold<'a> = Box<dyn PhaseHold + 'a>;

/// A log that closes the write hole (see the module comment for when each call comes).
pub(super) trait WriteLog: Send + Sync {
    /// The consistency policy this log is.
    fn policy(&self) -> ConsistencyPolicy;

    /// The write journal, when this log is one (the write-back cache logs through it).
    fn journal(&self) -> Option<&super::journal::Journal> {
        None
    }

    /// The widest band (in sectors) one phase may log.
    fn max_band_sectors(&self, geo: &Geo) -> u64;

    /// Where logging the write `piece` goes and what it costs there: (log device, bytes), or
    /// `None` when the piece is not logged.
    fn piece_cost(&self, geo: &Geo, piece: &Piece) -> Option<(usize, u64)>;

    /// Whether `entries` pieces costing `bytes` between them fit one log write of a phase on
    /// one log device.
    fn fits(&self, entries: usize, bytes: u64) -> bool;

    /// Before a write phase: logs what it writes, durably. Returns what is held until the
    /// phase's member writes complete, or `None` when nothing needed logging.
    fn log_phase<'a>(&'a self, array: &Array, phase: Phase<'_>) -> Result<Option<LogHold<'a>>>;

    /// With every flush of the array, before the members' flushes: what [`WriteLog::flush`]
    /// needs to know of the log as it was then.
    fn flush_mark(&self) -> Vec<u64> {
        Vec::new()
    }

    /// With every flush of the array, after the members' flushes (md's
    /// `log_handle_flush_request`); `mark` is what [`WriteLog::flush_mark`] returned before
    /// them. Both logs here write through (a phase's member writes are issued once it is
    /// logged, and nothing waits in the log); the partial parity log retires entries whose
    /// writes the flush made durable, and md's journal in write-back mode would write back.
    fn flush(&self, _array: &Array, _mark: &[u64]) -> Result<()> {
        Ok(())
    }

    /// A log write to `device` (as [`WriteLog::piece_cost`] names it) failed: `Ok` when the
    /// array carries on without it, else the error that refuses the write.
    fn device_failed(&self, array: &Array, device: usize, why: &str) -> Result<()>;

    /// At creation and at assembly: readies the log, replaying it after a crash. Returns
    /// true when the log leaves every stripe consistent, so no resync is needed.
    /// What it found and did goes to `events`.
    fn start(&self, array: &Array, how: LogStart, events: &mut Vec<ArrayEvent>) -> Result<bool>;

    /// Whether the array stays marked clean while it runs (md's MD_JOURNAL_CLEAN: after a
    /// crash the log's replay, not a resync, makes the stripes consistent).
    fn keeps_array_clean(&self) -> bool {
        false
    }

    /// The `resync_offset` the first write records (md's super_1_sync writes 0 while the
    /// array is not in sync: after a crash, a write in flight anywhere may have left its
    /// stripe inconsistent), given the resync cursor in memory (`None`: in sync).
    fn dirty_resync_offset(&self, _resync_from: Option<u64>) -> u64 {
        0
    }

    /// Before the first write marks the array dirty (superblock lock and state held).
    /// Returns what happened.
    fn before_dirty(&self, _array: &Array, _st: &mut State) -> Vec<ArrayEvent> {
        Vec::new()
    }

    /// A member joins the array on `disk` with superblock `sb` and placement `dl` (md's
    /// `log_modify`): gives it what the log needs on it.
    fn member_joins(&self, _disk: &dyn Disk, _sb: &mut Superblock, _dl: &DataLayout) -> Result<()> {
        Ok(())
    }

    /// At a clean stop, the members already flushed: nothing is left to replay.
    fn stop(&self, _array: &Array) -> Result<()> {
        Ok(())
    }
}

/// The write log of an array whose superblocks are `sbs`, if it has one.
pub(super) fn open(
    geo: &Geo,
    sbs: &[Superblock],
    members: &[Option<Arc<Member>>],
) -> Result<Option<Box<dyn WriteLog>>> {
    // md refuses superblocks with both; its log_init takes the journal first.
    if !sbs
        .iter()
        .any(|sb| sb.feature_map.contains(FeatureMap::JOURNAL))
    {
        let ppl = super::ppl::Ppl::from_superblocks(sbs, geo.raid_disks);
        return Ok(ppl.map(|p| Box::new(p) as Box<dyn WriteLog>));
    }
    let Some(i) = sbs.iter().position(|sb| sb.role() == DevRole::Journal) else {
        return Err(super::EngineError::Invalid(
            "the array has a write journal but no journal device was given; md does not start it without one either (give the journal device too)".into(),
        ));
    };
    let Some(m) = members[i].clone() else {
        return Err(super::EngineError::Invalid(
            "the journal device is gone".into(),
        ));
    };
    Ok(Some(Box::new(super::journal::Journal::new(
        super::MemberId(i),
        m,
        &sbs[i].set_uuid.0,
        sbs[i].data_size_sectors,
        sbs[i].recovery_offset_sectors,
    )?)))
}

/// The planner's tally of a write batch against the log: per log device, the entries and
/// bytes its log write for the phase holds. A batch's pieces are logged on their own log
/// devices, each in one log write, so pieces on different devices share a phase.
pub(super) struct PhaseCut<'a> {
    log: Option<&'a dyn WriteLog>,
    geo: &'a Geo,
    per_device: Vec<(usize, u64)>,
}

impl<'a> PhaseCut<'a> {
    /// A tally for a batch of `log`'s writes (`None`: nothing is logged).
    pub(super) fn new(log: Option<&'a dyn WriteLog>, geo: &'a Geo) -> PhaseCut<'a> {
        PhaseCut {
            log,
            geo,
            per_device: Vec::new(),
        }
    }

    /// Counts `piece` into the batch; false when the batch's logging no longer fits one log
    /// write per device (the planner then ends the batch before it, unless it is the first).
    pub(super) fn admit(&mut self, piece: &Piece) -> bool {
        let Some(log) = self.log else {
            return true;
        };
        let Some((device, bytes)) = log.piece_cost(self.geo, piece) else {
            return true;
        };
        if self.per_device.len() <= device {
            self.per_device.resize(device + 1, (0, 0));
        }
        let t = &mut self.per_device[device];
        t.0 += 1;
        t.1 += bytes;
        log.fits(t.0, t.1)
    }
}

/// The write-intent side of the seam: marks a request's range before its first write and
/// releases it after its last (md's `md_bitmap_startwrite` / `md_bitmap_endwrite`), outside
/// the log's per-phase calls. The write-intent bitmap implements it.
pub(super) trait IntentHooks {
    /// Before a write of array sectors `[a, a + n)`: its intent is durable.
    fn start_write(&self, array: &Array, a: u64, n: u64);
    /// After the write of array sectors `[a, a + n)` completed (or failed).
    fn end_write(&self, array: &Array, a: u64, n: u64);
}

impl Array {
    /// The consistency policy the array runs with.
    pub fn consistency_policy(&self) -> ConsistencyPolicy {
        if let Some(log) = &self.log {
            log.policy()
        } else if let Some(b) = &self.bitmap {
            ConsistencyPolicy::Bitmap {
                chunk_bytes: b.sectors_per_bit * crate::plan::SECTOR as u64,
            }
        } else {
            ConsistencyPolicy::Resync
        }
    }

    /// Starts the write log, if the array has one (see [`WriteLog::start`]); false without.
    pub(super) fn start_log(&self, how: LogStart, events: &mut Vec<ArrayEvent>) -> Result<bool> {
        match &self.log {
            Some(log) => log.start(self, how, events),
            None => Ok(false),
        }
    }
}
