//! Check, repair and resync: parity (or mirror copies) compared with data; repair and resync
//! rewrite what disagrees. Check and repair walk the whole space and keep where a stopped one
//! got to in memory (md's `sync_min`); resync walks from md's `resync_offset`, skips what the
//! write-intent bitmap says was not written, and clears the pending resync at its end.

use super::io::{blocks, copy_block, fit_bufs, slot_reads, RangeIo, Round};
use super::rebuild::Prefetch;
use super::{Cadence, StepCounts, StepResult, StepScratch, Task, TaskKind, TaskRange};
use crate::array::{lock, Array, Member, Slot};
use crate::error::{EngineError, Result};
use crate::geometry::Scheme;
use crate::plan::{step, SECTOR};
use crate::recon;
use raidkit_layout::Level as RaidLevel;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A check (`fix` false) or repair run.
pub(super) struct Scrub<'a> {
    array: &'a Array,
    kind: TaskKind,
    fix: bool,
    ahead: ReadAhead,
}

// Whatever way a run ends (an error included), a read-ahead in flight is abandoned, so its
// stripe locks are never left held.
impl Drop for Scrub<'_> {
    fn drop(&mut self) {
        self.ahead.settle(self.array);
    }
}

impl Drop for Resync<'_> {
    fn drop(&mut self) {
        self.ahead.settle(self.array);
    }
}

impl<'a> Task<'a> for Scrub<'a> {
    const CADENCE: Cadence = Cadence::AtStop;

    /// The scrub space, from where the last one stopped (or the start set).
    fn range(array: &Array, kind: TaskKind, resume: Option<u64>) -> Result<TaskRange> {
        let (unit, end) = array.scrub_range_of(kind)?;
        Ok((unit, resume.unwrap_or(0).min(end), end))
    }

    fn open(array: &'a Array, kind: TaskKind) -> Result<Option<Scrub<'a>>> {
        array.scrub_can_compare(kind)?;
        Ok(Some(Scrub {
            array,
            kind,
            fix: kind == TaskKind::Repair,
            ahead: ReadAhead::new(array),
        }))
    }

    fn step(&self, s: u64, n: u64, sc: &mut StepScratch) -> Result<StepResult> {
        self.array.scrub_step(s, n, self.fix, sc)
    }

    fn step_alone(&mut self, s: u64, n: u64, sc: &mut StepScratch) -> Result<StepResult> {
        self.ahead.step(self.array, self.kind, s, n, self.fix, sc)
    }

    fn settle(&mut self) {
        self.ahead.settle(self.array);
    }

    fn checkpoint(&self, at: u64) -> Result<()> {
        self.array.set_resume_from(self.kind, Some(at));
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.array.set_resume_from(self.kind, None);
        Ok(())
    }
}

/// A resync run after an unclean stop.
pub(super) struct Resync<'a> {
    array: &'a Array,
    ahead: ReadAhead,
}

impl<'a> Task<'a> for Resync<'a> {
    const CADENCE: Cadence = Cadence::EveryStep;

    /// The scrub space, from the pending resync's cursor.
    fn range(array: &Array, kind: TaskKind, _: Option<u64>) -> Result<TaskRange> {
        let (unit, end) = array.scrub_range_of(kind)?;
        let start = lock(&array.state).resync_from.unwrap_or(end).min(end);
        Ok((unit, start, end))
    }

    /// A resync from where the pending one stands; `None` when none is pending.
    fn open(array: &'a Array, kind: TaskKind) -> Result<Option<Resync<'a>>> {
        if lock(&array.state).resync_from.is_none() {
            return Ok(None);
        }
        array.scrub_can_compare(kind)?;
        Ok(Some(Resync {
            array,
            ahead: ReadAhead::new(array),
        }))
    }

    fn skip(&self, s: u64, n: u64) -> Result<bool> {
        // The write-intent bitmap says nothing was written here: nothing to resync.
        Ok(!self.array.intent_covers(s, n))
    }

    fn step(&self, s: u64, n: u64, sc: &mut StepScratch) -> Result<StepResult> {
        self.array.scrub_step(s, n, true, sc)
    }

    fn step_alone(&mut self, s: u64, n: u64, sc: &mut StepScratch) -> Result<StepResult> {
        // With a bitmap most steps are skipped: reading ahead would read them anyway.
        if self.array.bitmap_dirty_bits().is_some() {
            return self.step(s, n, sc);
        }
        self.ahead
            .step(self.array, TaskKind::Resync, s, n, true, sc)
    }

    fn settle(&mut self) {
        self.ahead.settle(self.array);
    }

    fn checkpoint(&self, at: u64) -> Result<()> {
        lock(&self.array.state).resync_from = Some(at);
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        let a = self.array;
        a.flush()?;
        let mut st = lock(&a.state);
        st.resync_from = None;
        a.resync_pending.store(false, Ordering::Relaxed);
        Ok(())
    }
}

/// The next step's reads, started before this step is compared (check, repair and resync of
/// a parity level, while nothing else uses the array): on disks, a member then reads on
/// while the step's parity is computed and rewritten, instead of waiting for the next
/// request with its head past the place (a rotation lost per step), as a rebuild does.
pub(super) struct ReadAhead {
    next: Option<Prefetch>,
    step: u64,
    end: u64,
}

impl ReadAhead {
    fn new(array: &Array) -> ReadAhead {
        ReadAhead {
            next: None,
            step: array.step_sectors(),
            end: array.geo.member_data_sectors,
        }
    }

    /// One step over member range `[ms, ms + n)`, its reads taken from the read-ahead when
    /// they were started, the next step's started before this one is compared.
    fn step(
        &mut self,
        a: &Array,
        kind: TaskKind,
        ms: u64,
        n: u64,
        fix: bool,
        sc: &mut StepScratch,
    ) -> Result<StepResult> {
        let pipelined =
            matches!(a.geo.scheme(), Scheme::Parity { .. }) && !a.yields(a.task_rates(), kind);
        if !pipelined {
            self.settle(a);
            return a.scrub_step(ms, n, fix, sc);
        }
        let current = a.read_ahead(&mut self.next, ms, n, self.step, self.end, sc);
        let (mismatch_sectors, used) = a.scrub_finish_prefetch(current, fix, &mut sc.parity)?;
        sc.bufs = used;
        Ok(StepResult::Done(StepCounts {
            mismatch_sectors,
            ..StepCounts::default()
        }))
    }

    /// Lets a read-ahead still in flight go (its locks too).
    fn settle(&mut self, a: &Array) {
        if let Some(p) = self.next.take() {
            p.abandon(a);
        }
    }
}

/// Why a locked parity scrub step gave up.
enum ScrubError {
    /// These slots could not read part of the range (repaired without the locks).
    Unreadable(Vec<usize>),
    Engine(EngineError),
}

impl From<EngineError> for ScrubError {
    fn from(e: EngineError) -> ScrubError {
        ScrubError::Engine(e)
    }
}

impl Array {
    /// The space check, repair and resync walk: member sectors for parity levels and RAID 1,
    /// array sectors for RAID 10 (md's raid10 resyncs by virtual address).
    pub(crate) fn scrub_space(&self) -> (&'static str, u64) {
        match self.geo.level() {
            RaidLevel::Raid10 => ("array sectors", self.geo.array_sectors()),
            _ => ("member sectors", self.geo.member_data_sectors),
        }
    }

    /// The scrub space, for a level that has redundancy to compare.
    fn scrub_range_of(&self, kind: TaskKind) -> Result<(&'static str, u64)> {
        if self.geo.level() == RaidLevel::Raid0 {
            return Err(EngineError::Invalid(format!(
                "{kind}: RAID 0 has no redundancy to compare"
            )));
        }
        Ok(self.scrub_space())
    }

    /// Parity can be compared with data only while every member is in sync.
    fn scrub_can_compare(&self, kind: TaskKind) -> Result<()> {
        let st = lock(&self.state);
        if matches!(self.geo.scheme(), Scheme::Parity { .. })
            && !step::parity_comparable(st.roster.slot_state.as_slice())
        {
            let missing: Vec<usize> = st
                .roster
                .slot_state
                .enumerate()
                .filter(|(_, s)| !s.usable())
                .map(|(s, _)| s.0)
                .collect();
            return Err(EngineError::Invalid(format!(
                "{kind} compares parity with data and needs every member in sync; slots {missing:?} are missing or being rebuilt"
            )));
        }
        Ok(())
    }

    /// One check, repair or resync step over `[s, s + n)` of the scrub space.
    fn scrub_step(&self, s: u64, n: u64, fix: bool, sc: &mut StepScratch) -> Result<StepResult> {
        let mismatch_sectors = match self.geo.scheme() {
            Scheme::Parity { .. } => {
                self.scrub_parity_step(s, n, fix, &mut sc.bufs, &mut sc.parity)?
            }
            Scheme::Copies { .. } => self.scrub_copies_step(s, n, fix, &mut sc.bufs)?,
        };
        Ok(StepResult::Done(StepCounts {
            mismatch_sectors,
            ..StepCounts::default()
        }))
    }

    fn scrub_parity_step(
        &self,
        ms: u64,
        n: u64,
        fix: bool,
        bufs: &mut Vec<Vec<u8>>,
        scratch: &mut (Vec<u8>, Vec<u8>),
    ) -> Result<u64> {
        let len = n as usize * SECTOR;
        fit_bufs(bufs, self.geo.raid_disks, len);
        let keys = self.keys_for_parity_range(ms, n);
        // A member that cannot read part of the range has those sectors rebuilt from the
        // others and rewritten, as md does during check, repair and resync, and the step is
        // read again; one that still fails is failed. (After a crash with the partial parity
        // log, the only stripes whose parity may be stale are those the replay could not
        // read a modified member of: rebuilding that member's sectors from parity gives what
        // the crash left there, old or new.)
        let mut narrowed = false;
        loop {
            let narrow = !narrowed;
            let r = self.locked(&keys, || {
                self.scrub_parity_locked(ms, n, fix, bufs, scratch, len, narrow)
            });
            match r {
                Err(ScrubError::Unreadable(slots)) => {
                    narrowed = true;
                    for slot in slots {
                        if let Err(e) = self.patrol_narrow(slot, ms, n, None) {
                            self.member_failed(
                                Slot(slot),
                                &format!("repairing a read error failed: {e}"),
                            );
                        }
                    }
                }
                Err(ScrubError::Engine(e)) => return Err(e),
                Ok(m) => return Ok(m),
            }
        }
    }

    /// Reads of `[ms, ms + len)` from every member, for comparing parity with data, which
    /// needs every one of them; with the members they read from.
    fn scrub_reads<'b>(
        &self,
        ms: u64,
        bufs: &'b mut [Vec<u8>],
        len: usize,
    ) -> Result<Round<'b, Vec<Option<Arc<Member>>>>> {
        let (states, members) = self.snapshot();
        self.check_failed()?;
        if !step::parity_comparable(&states) {
            return Err(EngineError::Invalid(
                "a member failed: parity can no longer be compared with data".into(),
            ));
        }
        let every = vec![true; members.len()];
        let reads = slot_reads(&members, &every, ms, bufs, len);
        Ok((members, reads))
    }

    /// [`Self::scrub_parity_step`] with the range's stripe locks held. With `narrow`, read
    /// errors are handed back (to be narrowed and repaired without the locks) instead of
    /// failing their members.
    #[allow(clippy::too_many_arguments)]
    fn scrub_parity_locked(
        &self,
        ms: u64,
        n: u64,
        fix: bool,
        bufs: &mut [Vec<u8>],
        scratch: &mut (Vec<u8>, Vec<u8>),
        len: usize,
        narrow: bool,
    ) -> std::result::Result<u64, ScrubError> {
        let members = if narrow {
            let (members, mut reads) = self.scrub_reads(ms, bufs, len)?;
            let errors = self.range_io(&mut reads);
            if !errors.is_empty() {
                return Err(ScrubError::Unreadable(
                    errors.into_iter().map(|(slot, _)| slot).collect(),
                ));
            }
            members
        } else {
            self.read_retrying(bufs, |bufs| self.scrub_reads(ms, bufs, len))?
        };
        Ok(self.scrub_parity_compare(ms, n, fix, bufs, scratch, &members)?)
    }

    /// Completes a scrub step whose reads were started ahead ([`ReadAhead`]): waits for
    /// them, compares (and with `fix` rewrites) and lets the locks go. A read error, or a
    /// member that changed state meanwhile, sends the step to the plain path, which reads
    /// again and repairs what a member cannot read. Returns the mismatched sectors and the
    /// buffers.
    fn scrub_finish_prefetch(
        &self,
        p: Prefetch,
        fix: bool,
        scratch: &mut (Vec<u8>, Vec<u8>),
    ) -> Result<(u64, Vec<Vec<u8>>)> {
        let Prefetch {
            ms,
            n,
            keys,
            mut bufs,
            batch,
            states,
        } = p;
        let errors = batch.wait();
        let (now, members) = self.snapshot();
        if !errors.is_empty() || now != states || !step::parity_comparable(&states) {
            self.locks.release(&keys);
            let m = self.scrub_parity_step(ms, n, fix, &mut bufs, scratch)?;
            return Ok((m, bufs));
        }
        let r = self
            .check_failed()
            .and_then(|_| self.scrub_parity_compare(ms, n, fix, &mut bufs, scratch, &members));
        self.locks.release(&keys);
        Ok((r?, bufs))
    }

    /// The rest of a parity scrub step once `bufs` hold `[ms, ms + n)` of every member:
    /// compare, and with `fix` rewrite the parity that disagrees. Returns the mismatched
    /// sectors.
    fn scrub_parity_compare(
        &self,
        ms: u64,
        n: u64,
        fix: bool,
        bufs: &mut [Vec<u8>],
        scratch: &mut (Vec<u8>, Vec<u8>),
        members: &[Option<Arc<Member>>],
    ) -> Result<u64> {
        let bad = self.bad_slots_in(ms, n);
        if !bad.is_empty() {
            return self.scrub_blocks_around_bad(ms, n, fix, bufs, scratch, members, &bad);
        }
        let out = recon::parity_check(&self.geo, ms, n, bufs, fix, scratch)
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        if !out.rewrite.is_empty() {
            // One write per slot and stripe segment; parity members differ per stripe.
            let mut rest: Vec<Option<&mut [u8]>> =
                bufs.iter_mut().map(|b| Some(&mut b[..])).collect();
            let mut writes: Vec<RangeIo<'_>> = Vec::new();
            // Segments of one slot are disjoint and in order: cut them off front to back.
            let mut taken: Vec<usize> = vec![0; self.geo.raid_disks];
            for &(slot, sector, sectors, offset) in &out.rewrite {
                let Some(m) = members[slot].clone() else {
                    continue;
                };
                let whole = rest[slot].take().unwrap_or(&mut []);
                let (_, from) = whole.split_at_mut(offset - taken[slot]);
                let (seg, tail) = from.split_at_mut(sectors as usize * SECTOR);
                taken[slot] = offset + seg.len();
                rest[slot] = Some(tail);
                writes.push(RangeIo::write(slot, m, sector, seg));
            }
            let errors = self.range_io(&mut writes);
            self.fail_erred(errors, Some("parity rewrite"));
        }
        Ok(out.mismatch_sectors)
    }

    /// [`Self::scrub_parity_step`] where members list bad blocks in the range: 4 KiB at a
    /// time, a block some member's bad-block log lists is left alone (what the member holds
    /// there is not data: comparing or recomputing parity from it would write garbage into
    /// parity); the others are checked and, with `fix`, repaired as usual.
    #[allow(clippy::too_many_arguments)]
    fn scrub_blocks_around_bad(
        &self,
        ms: u64,
        n: u64,
        fix: bool,
        bufs: &[Vec<u8>],
        scratch: &mut (Vec<u8>, Vec<u8>),
        members: &[Option<Arc<Member>>],
        bad: &[(usize, Vec<(u64, u64)>)],
    ) -> Result<u64> {
        let mut mismatched = 0;
        for (b, len) in blocks(ms, n) {
            if !step::block_listed(bad, b, len) {
                let (_, mut block) = copy_block(bufs, ms, b, len);
                let out = recon::parity_check(&self.geo, b, len, &mut block, fix, scratch)
                    .map_err(|e| EngineError::Invalid(e.to_string()))?;
                mismatched += out.mismatch_sectors;
                for &(slot, sector, sectors, offset) in &out.rewrite {
                    let Some(m) = members[slot].clone() else {
                        continue;
                    };
                    let mut w = [RangeIo::write(
                        slot,
                        m,
                        sector,
                        &mut block[slot][offset..offset + sectors as usize * SECTOR],
                    )];
                    let errors = self.range_io(&mut w);
                    self.fail_erred(errors, Some("parity rewrite"));
                }
            }
        }
        Ok(mismatched)
    }

    /// Check/repair/resync of RAID 1/10 over `[s, s + n)` of the scrub space (member sectors
    /// for RAID 1, array sectors for RAID 10): every live copy is compared with the first
    /// live copy, which is what md's resync copies from.
    fn scrub_copies_step(&self, s: u64, n: u64, fix: bool, bufs: &mut Vec<Vec<u8>>) -> Result<u64> {
        let mut mismatched = 0;
        let mut a = s;
        while a < s + n {
            let (copies, run) = self.geo.copies(a);
            let len_sectors = run.min(s + n - a);
            let len = len_sectors as usize * SECTOR;
            fit_bufs(bufs, copies.len(), len);
            let keys = self.keys_for_array_range(a, len_sectors);
            mismatched += self.locked(&keys, || -> Result<u64> {
                // (index into `copies`, slot, member sector, member) of each live copy.
                let live = self.read_retrying(bufs, |bufs| {
                    let (states, members) = self.snapshot();
                    self.check_failed()?;
                    let can_read = |m: usize| members[m].is_some() && states[m].usable();
                    let live: Vec<(usize, usize, u64, Arc<Member>)> =
                        step::compared_copies(&copies, can_read)
                            .into_iter()
                            .filter_map(|(k, m, ms)| Some((k, m, ms, members[m].clone()?)))
                            .collect();
                    if live.len() < 2 {
                        return Ok((live, Vec::new()));
                    }
                    let reads = bufs
                        .iter_mut()
                        .enumerate()
                        .filter_map(|(k, buf)| {
                            let (_, m, ms, member) = live.iter().find(|l| l.0 == k)?;
                            Some(RangeIo::read(*m, member.clone(), *ms, &mut buf[..len]))
                        })
                        .collect();
                    Ok((live, reads))
                })?;
                if live.len() < 2 {
                    return Ok(0);
                }
                let first = live[0].0;
                let (head, tail) = bufs.split_at_mut(first + 1);
                let reference = &head[first][..len];
                let mut found = 0;
                let mut writes: Vec<RangeIo<'_>> = Vec::new();
                for (k, buf) in tail.iter_mut().enumerate() {
                    let k = k + first + 1;
                    let Some((_, m, ms, member)) = live.iter().find(|l| l.0 == k) else {
                        continue;
                    };
                    let d = recon::copies_mismatch_sectors(reference, &buf[..len]);
                    if d > 0 {
                        found = found.max(d);
                        if fix {
                            buf[..len].copy_from_slice(reference);
                            writes.push(RangeIo::write(*m, member.clone(), *ms, &mut buf[..len]));
                        }
                    }
                }
                let errors = self.range_io(&mut writes);
                self.fail_erred(errors, Some("copy rewrite"));
                Ok(found)
            })?;
            a += len_sectors;
        }
        Ok(mismatched)
    }
}
