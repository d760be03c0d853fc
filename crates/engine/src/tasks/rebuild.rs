//! Rebuild (md's recovery): every slot in the `Rebuilding` state is computed from the others,
//! step by step, and written; the cursor is md's `recovery_offset` in the superblock of each
//! member being rebuilt. Running alone, a parity rebuild reads the next step on the member
//! workers while it computes and writes the current one.

use super::io::{blocks, copy_block, fit_bufs, member_job, slot_reads, MirrorPiece, RangeIo};
use super::{Cadence, StepResult, StepScratch, Task, TaskKind, TaskRange};
use crate::array::{lock, Array, Member, MemberId, Slot, Transition};
use crate::error::{EngineError, Result};
use crate::events::ArrayEvent;
use crate::geometry::Scheme;
use crate::plan::{step, MemberState, SECTOR};
use crate::pool::Batch;
use crate::recon::{self, ReconError};
use std::sync::Arc;

/// (slot, member index, member) of a slot being rebuilt.
type Target = (Slot, MemberId, Arc<Member>);

/// Slots being rebuilt; slot states; slot members.
type RebuildView = (Vec<Target>, Vec<MemberState>, Vec<Option<Arc<Member>>>);

/// One rebuild pass: the slots being rebuilt when it started (a spare that takes a slot
/// during the pass is rebuilt by the next pass, from its own start).
pub(super) struct Rebuild<'a> {
    array: &'a Array,
    slots: Vec<usize>,
    layout: Option<&'a raidkit_layout::Geometry>,
    /// Every member being rebuilt came back (re-add) and needs only bitmap-marked regions.
    bitmap_only: bool,
    end: u64,
    step: u64,
    /// The next step's reads, in flight while this one is computed and written.
    ahead: Option<Prefetch>,
}

/// A rebuild step whose reads are in flight: it holds the step's stripe locks, and its buffers
/// stay untouched until the batch completes.
pub(super) struct Prefetch {
    pub(super) ms: u64,
    pub(super) n: u64,
    pub(super) keys: Vec<u64>,
    pub(super) bufs: Vec<Vec<u8>>,
    pub(super) batch: Arc<Batch>,
    /// Slot states the reads were planned with.
    pub(super) states: Vec<MemberState>,
}

impl Prefetch {
    /// Waits for the reads and lets the locks go without using them.
    pub(super) fn abandon(self, array: &Array) {
        let _ = self.batch.wait();
        array.locks.release(&self.keys);
    }
}

impl Drop for Rebuild<'_> {
    fn drop(&mut self) {
        // Whatever way the pass ends (an error included), a read-ahead still in flight is
        // abandoned, so its stripe locks are never left held.
        self.settle();
        lock(&self.array.bg.state).rebuild_pass = None;
    }
}

impl<'a> Task<'a> for Rebuild<'a> {
    const CADENCE: Cadence = Cadence::Timed;
    const DEAD: &'static str = "every member being rebuilt failed";

    /// From the lowest `recovery_offset` of the members being rebuilt.
    fn range(array: &Array, _: TaskKind, _: Option<u64>) -> Result<TaskRange> {
        let st = lock(&array.state);
        let rebuilding = st.roster.rebuilding(None).into_iter().map(|(_, i)| i);
        Ok(array.recovery_range(&st, rebuilding))
    }

    /// A pass over the slots being rebuilt now.
    fn open(array: &'a Array, _: TaskKind) -> Result<Option<Rebuild<'a>>> {
        lock(&array.bg.state).rebuild_pass = None;
        let (targets, _, _) = array.rebuild_view();
        if targets.is_empty() {
            return Ok(None);
        }
        lock(&array.bg.state).rebuild_pass = Some(targets.iter().map(|t| t.1).collect());
        Ok(Some(Rebuild {
            array,
            slots: targets.iter().map(|t| t.0 .0).collect(),
            layout: array.raid10_layout(),
            bitmap_only: array.bitmap_only_recovery(),
            end: array.geo.member_data_sectors,
            step: array.step_sectors(),
            ahead: None,
        }))
    }

    fn slots(&self) -> Vec<usize> {
        self.slots.clone()
    }

    fn skip(&self, ms: u64, n: u64) -> Result<bool> {
        // Members that came back need only what the bitmap marks as written since.
        Ok(self.bitmap_only && !self.array.member_range_marked(ms, n, self.layout)?)
    }

    fn step(&self, ms: u64, n: u64, sc: &mut StepScratch) -> Result<StepResult> {
        let a = self.array;
        let live = match a.geo.scheme() {
            Scheme::Parity { .. } => a.rebuild_parity_step(ms, n, &mut sc.bufs)?,
            Scheme::Copies { .. } => a.rebuild_copies_step(ms, n, &mut sc.bufs, self.layout)?,
        };
        Ok(alive(live))
    }

    /// Reads of the next step run on the member workers while this thread computes and
    /// writes the current one (only while nothing else uses the array: a read-ahead holds
    /// the next step's stripe locks).
    fn step_alone(&mut self, ms: u64, n: u64, sc: &mut StepScratch) -> Result<StepResult> {
        let a = self.array;
        let pipelined = matches!(a.geo.scheme(), Scheme::Parity { .. })
            && !self.bitmap_only
            && !a.yields(a.task_rates(), TaskKind::Rebuild);
        if !pipelined {
            self.settle();
            return self.step(ms, n, sc);
        }
        let current = a.read_ahead(&mut self.ahead, ms, n, self.step, self.end, sc);
        let (live, used) = a.finish_prefetch(current)?;
        sc.bufs = used;
        Ok(alive(live))
    }

    fn settle(&mut self) {
        if let Some(p) = self.ahead.take() {
            p.abandon(self.array);
        }
    }

    fn checkpoint(&self, at: u64) -> Result<()> {
        self.array.checkpoint_recovery(at, false)
    }

    fn finish(&mut self) -> Result<()> {
        self.array.checkpoint_recovery(self.end, true)
    }
}

/// The slots of `targets`.
fn target_slots(targets: &[Target]) -> Vec<usize> {
    targets.iter().map(|t| t.0 .0).collect()
}

/// A step's result from how many members being rebuilt are still alive.
fn alive(live: usize) -> StepResult {
    if live == 0 {
        StepResult::Dead
    } else {
        StepResult::done()
    }
}

impl Array {
    /// Slots being rebuilt with their member, and the members able to serve reads.
    fn rebuild_view(&self) -> RebuildView {
        let pass = lock(&self.bg.state).rebuild_pass.clone();
        let st = lock(&self.state);
        let targets = st
            .roster
            .rebuilding(pass.as_deref())
            .into_iter()
            .filter_map(|(s, i)| Some((s, i, st.members[i].clone()?)))
            .collect();
        let members = st.slot_members();
        (targets, st.roster.slot_state.to_vec(), members)
    }

    /// Every member being rebuilt came back (re-add) and needs only bitmap-marked regions.
    fn bitmap_only_recovery(&self) -> bool {
        let st = lock(&self.state);
        let mut any = false;
        for slot in st.roster.slot_state.ids() {
            if st.roster.slot_state[slot] == MemberState::Rebuilding {
                if !st.roster.bitmap_recovery[slot] {
                    return false;
                }
                any = true;
            }
        }
        // `None` without a bitmap.
        any && self.bitmap_dirty_bits().is_some()
    }

    /// Whether the bitmap marks any part of member range `[ms, ms + n)` (of any slot).
    fn member_range_marked(
        &self,
        ms: u64,
        n: u64,
        layout: Option<&raidkit_layout::Geometry>,
    ) -> Result<bool> {
        match (self.geo.scheme(), layout) {
            (Scheme::Copies { .. }, Some(layout)) => {
                // RAID 10's bitmap covers array sectors: look at what every slot holds here.
                for slot in 0..self.geo.raid_disks {
                    for (_, len, a) in self.mirror_pieces(Some(layout), slot, ms, n)? {
                        if a.is_some_and(|a| self.intent_covers(a, len)) {
                            return Ok(true);
                        }
                    }
                }
                Ok(false)
            }
            _ => Ok(self.intent_covers(ms, n)),
        }
    }

    /// The prefetch of step `[ms, ms + n)` (the one `ahead` holds, or started now), with the
    /// next step's reads (of at most `step` sectors, below `end`) started into `sc`'s buffers
    /// and kept in `ahead`, unless its stripe locks would meet this step's.
    pub(super) fn read_ahead(
        &self,
        ahead: &mut Option<Prefetch>,
        ms: u64,
        n: u64,
        step: u64,
        end: u64,
        sc: &mut StepScratch,
    ) -> Prefetch {
        let current = match ahead.take() {
            Some(p) if p.ms == ms => p,
            other => {
                if let Some(p) = other {
                    p.abandon(self);
                }
                self.prefetch(ms, n, Vec::new())
            }
        };
        let next = ms + n;
        if next < end && current.keys.last() < Some(&(next / self.geo.chunk_sectors.max(1))) {
            let spare = std::mem::take(&mut sc.bufs);
            *ahead = Some(self.prefetch(next, step.min(end - next), spare));
        }
        current
    }

    /// Takes the stripe locks of member range `[ms, ms + n)` and starts reading it from every
    /// readable member on their workers.
    pub(super) fn prefetch(&self, ms: u64, n: u64, mut bufs: Vec<Vec<u8>>) -> Prefetch {
        let len = n as usize * SECTOR;
        fit_bufs(&mut bufs, self.geo.raid_disks, len);
        let keys = self.keys_for_parity_range(ms, n);
        self.locks.acquire(&keys);
        let (states, members) = self.snapshot();
        let sources = step::sources(&states, &[], &[]);
        let batch = Batch::new();
        for (slot, b) in bufs.iter_mut().enumerate() {
            if let (true, Some(m)) = (sources[slot], &members[slot]) {
                batch.add(1);
                let job = member_job(m, false, ms, b.as_mut_ptr(), len, &batch, slot);
                m.worker.submit(job, m.disk.name());
            }
        }
        Prefetch {
            ms,
            n,
            keys,
            bufs,
            batch,
            states,
        }
    }

    /// Completes a prefetched rebuild step: waits for its reads, computes the members being
    /// rebuilt, writes them and releases the locks. Falls back to the plain step when a
    /// member failed or changed state meanwhile. Returns (targets alive, the buffers).
    fn finish_prefetch(&self, p: Prefetch) -> Result<(usize, Vec<Vec<u8>>)> {
        let Prefetch {
            ms,
            n,
            keys,
            mut bufs,
            batch,
            states,
        } = p;
        let errors = batch.wait();
        let (targets, now, _) = self.rebuild_view();
        if !errors.is_empty() || now != states {
            self.locks.release(&keys);
            self.fail_erred(errors, None);
            let live = self.rebuild_parity_step(ms, n, &mut bufs)?;
            return Ok((live, bufs));
        }
        let r = (|| -> Result<usize> {
            if targets.is_empty() {
                return Ok(0);
            }
            self.check_failed()?;
            let readable = step::sources(&states, &target_slots(&targets), &[]);
            self.recover_and_write(ms, n, &mut bufs, &readable, &targets)
        })();
        self.locks.release(&keys);
        Ok((r?, bufs))
    }

    /// One rebuild step of a parity level: read `[ms, ms + n)` from every readable member,
    /// compute the rebuilding ones, write them. Returns how many targets are still alive.
    fn rebuild_parity_step(&self, ms: u64, n: u64, bufs: &mut Vec<Vec<u8>>) -> Result<usize> {
        let len = n as usize * SECTOR;
        fit_bufs(bufs, self.geo.raid_disks, len);
        let keys = self.keys_for_parity_range(ms, n);
        self.locked(&keys, || {
            let round = self.read_retrying(bufs, |bufs| {
                let (targets, states, members) = self.rebuild_view();
                if targets.is_empty() {
                    return Ok((None, Vec::new()));
                }
                self.check_failed()?;
                let readable = step::sources(&states, &target_slots(&targets), &[]);
                let reads = slot_reads(&members, &readable, ms, bufs, len);
                Ok((Some((targets, readable)), reads))
            })?;
            match round {
                Some((targets, readable)) => {
                    self.recover_and_write(ms, n, bufs, &readable, &targets)
                }
                None => Ok(0),
            }
        })
    }

    /// Computes the members being rebuilt over `[ms, ms + n)` from what `bufs` holds of the
    /// `readable` ones and writes them. Returns how many targets are still alive.
    fn recover_and_write(
        &self,
        ms: u64,
        n: u64,
        bufs: &mut [Vec<u8>],
        readable: &[bool],
        targets: &[Target],
    ) -> Result<usize> {
        // What a member's bad-block log lists is not its data, whatever a read returns there.
        let bad = self.bad_slots_in(ms, n);
        if bad.iter().any(|&(slot, _)| readable[slot]) {
            return self.recover_and_write_around_bad_blocks(ms, n, bufs, readable, targets, &bad);
        }
        recon::parity_recover(&self.geo, ms, n, bufs, readable).map_err(|e| match e {
            ReconError::TooManyLost { .. } => EngineError::ArrayFailed {
                detail: e.to_string(),
            },
            other => EngineError::Invalid(other.to_string()),
        })?;
        Ok(self.write_targets(ms, n, bufs, targets))
    }

    /// Writes what `bufs` holds for each target over `[ms, ms + n)`; fails targets whose write
    /// fails. Returns how many targets are still alive.
    fn write_targets(&self, ms: u64, n: u64, bufs: &mut [Vec<u8>], targets: &[Target]) -> usize {
        let len = n as usize * SECTOR;
        let mut writes: Vec<RangeIo<'_>> = Vec::new();
        for (slot, buf) in bufs.iter_mut().enumerate() {
            if let Some((_, _, m)) = targets.iter().find(|t| t.0 == Slot(slot)) {
                writes.push(RangeIo::write(slot, m.clone(), ms, &mut buf[..len]));
            }
        }
        let errors = self.range_io(&mut writes);
        let failed = errors.len();
        self.fail_erred(errors, Some("rebuild write"));
        targets.len() - failed
    }

    /// [`Self::recover_and_write`] for a range where some readable members list bad blocks:
    /// 4 KiB at a time, those members count as lost where their log lists the block; a block
    /// that then has too few sources is not made up but recorded in each target's bad-block
    /// log (md does the same when recovery meets an unreadable source), so reads of it fail
    /// instead of returning wrong data.
    fn recover_and_write_around_bad_blocks(
        &self,
        ms: u64,
        n: u64,
        bufs: &mut [Vec<u8>],
        readable: &[bool],
        targets: &[Target],
        bad: &[(usize, Vec<(u64, u64)>)],
    ) -> Result<usize> {
        let mut lost_blocks: Vec<(u64, u64)> = Vec::new();
        for (b, len) in blocks(ms, n) {
            let r = step::block_sources(readable, bad, b, len);
            let (off, mut block) = copy_block(bufs, ms, b, len);
            match recon::parity_recover(&self.geo, b, len, &mut block, &r) {
                Ok(()) => {
                    for (slot, ..) in targets {
                        bufs[slot.0][off..off + block[slot.0].len()]
                            .copy_from_slice(&block[slot.0]);
                    }
                }
                Err(ReconError::TooManyLost { .. }) => lost_blocks.push((b, len)),
                Err(e) => return Err(EngineError::Invalid(e.to_string())),
            }
        }
        for &(b, len) in &lost_blocks {
            // Zeroes, never another member's data, where nothing could be computed.
            let off = ((b - ms) as usize) * SECTOR;
            for (slot, ..) in targets {
                bufs[slot.0][off..off + len as usize * SECTOR].fill(0);
            }
        }
        let alive = self.write_targets(ms, n, bufs, targets);
        for &(b, len) in &lost_blocks {
            for (_, index, _) in targets {
                if !self.record_bad_block(*index, b, len)? {
                    break;
                }
            }
        }
        if !lost_blocks.is_empty() {
            let sectors = lost_blocks.iter().map(|(_, l)| l).sum::<u64>();
            lock(&self.state)
                .events
                .push(ArrayEvent::RebuildUnreadable {
                    member_sector: ms,
                    sectors,
                });
        }
        Ok(alive)
    }

    /// One rebuild step of RAID 1/10: copy every rebuilding slot's range from a live copy.
    fn rebuild_copies_step(
        &self,
        ms: u64,
        n: u64,
        bufs: &mut Vec<Vec<u8>>,
        layout: Option<&raidkit_layout::Geometry>,
    ) -> Result<usize> {
        let len = n as usize * SECTOR;
        fit_bufs(bufs, 1, len);
        let (targets, _, _) = self.rebuild_view();
        let mut alive = 0;
        for (slot, _, _) in targets {
            let pieces = self.mirror_pieces(layout, slot.0, ms, n)?;
            let keys = self.keys_for_mirror_pieces(&pieces);
            let buf = &mut bufs[0][..len];
            if self.locked(&keys, || self.copy_into_slot(slot.0, ms, &pieces, buf))? {
                alive += 1;
            }
        }
        Ok(alive)
    }

    /// Fills `buf` (member range starting at `ms` of `slot`) from live copies other than
    /// `slot` and writes it to `slot` while the slot is still being rebuilt. Returns whether
    /// the slot's member is still alive.
    fn copy_into_slot(
        &self,
        slot: usize,
        ms: u64,
        pieces: &[MirrorPiece],
        buf: &mut [u8],
    ) -> Result<bool> {
        let target = self.read_retrying(buf, |buf| {
            let (states, members) = self.snapshot();
            let rebuilding = states[slot] == MemberState::Rebuilding;
            let Some(target) = members[slot].clone().filter(|_| rebuilding) else {
                return Ok((None, Vec::new()));
            };
            self.check_failed()?;
            let reads = self.other_copy_reads(slot, pieces, &states, &members, buf)?;
            Ok((Some(target), reads))
        })?;
        let Some(target) = target else {
            return Ok(false);
        };
        let mut w = [RangeIo::write(slot, target, ms, buf)];
        let errors = self.range_io(&mut w);
        Ok(self.fail_erred(errors, Some("rebuild write")))
    }

    /// Records the rebuild cursor in the superblocks of the members being rebuilt (after
    /// flushing them); with `done`, they become in sync.
    fn checkpoint_recovery(&self, cursor: u64, done: bool) -> Result<()> {
        let (targets, _, _) = self.rebuild_view();
        let mut ok = Vec::new();
        for (slot, index, m) in targets {
            match m.disk.flush() {
                Ok(()) => ok.push((slot, index)),
                Err(e) => self.member_failed(slot, &format!("flush after rebuild: {e}")),
            }
        }
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        let names = Self::names(&st);
        let mut t = Transition {
            write: !self.read_only,
            ..Transition::default()
        };
        for (slot, index) in ok {
            t = t.then(
                st.roster
                    .rebuild_progress(slot, index, cursor, done, &names),
            );
        }
        self.apply(&mut st, t);
        Ok(())
    }
}
