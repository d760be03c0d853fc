//! Patrol read: every member in sync is read in full; a range that does not read is narrowed
//! to 4 KiB blocks, each rebuilt from redundancy and rewritten; a block that still does not
//! read back goes into the member's bad-block log (reads then avoid it). The narrowing and
//! repair also serve foreground reads that hit an error, and check/repair/resync.

use super::io::{blocks, fit_bufs, slot_reads, RangeIo, BLOCK_SECTORS};
use super::{Cadence, StepCounts, StepResult, StepScratch, Task, TaskKind, TaskRange};
use crate::array::{lock, Array, Member, MemberId, Slot};
use crate::error::Result;
use crate::geometry::Scheme;
use crate::plan::{step, SECTOR};
use raidkit_layout::Level as RaidLevel;
use std::sync::Arc;
use std::time::Instant;

/// One patrol run.
pub(super) struct Patrol<'a> {
    array: &'a Array,
    layout: Option<&'a raidkit_layout::Geometry>,
}

impl Drop for Patrol<'_> {
    fn drop(&mut self) {
        // Whatever its outcome, the next scheduled patrol counts from this one.
        lock(&self.array.bg.state).last_patrol = Some(Instant::now());
    }
}

impl<'a> Task<'a> for Patrol<'a> {
    const CADENCE: Cadence = Cadence::AtStop;

    /// Every member sector, from where the last one stopped (or the start set).
    fn range(array: &Array, _: TaskKind, resume: Option<u64>) -> Result<TaskRange> {
        let end = array.geo.member_data_sectors;
        Ok(("member sectors", resume.unwrap_or(0).min(end), end))
    }

    fn open(array: &'a Array, _: TaskKind) -> Result<Option<Patrol<'a>>> {
        Ok(Some(Patrol {
            array,
            layout: array.raid10_layout(),
        }))
    }

    fn step(&self, ms: u64, n: u64, sc: &mut StepScratch) -> Result<StepResult> {
        let found = self.array.patrol_step(ms, n, &mut sc.bufs, self.layout)?;
        Ok(StepResult::Done(found))
    }

    fn checkpoint(&self, at: u64) -> Result<()> {
        self.array.set_resume_from(TaskKind::Patrol, Some(at));
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.array.set_resume_from(TaskKind::Patrol, None);
        Ok(())
    }
}

impl Array {
    /// One patrol step: reads `[cursor, cursor + n)` of every readable member and repairs
    /// what a member cannot read.
    fn patrol_step(
        &self,
        cursor: u64,
        n: u64,
        bufs: &mut Vec<Vec<u8>>,
        layout: Option<&raidkit_layout::Geometry>,
    ) -> Result<StepCounts> {
        let len = n as usize * SECTOR;
        let (states, members) = self.snapshot();
        let readable = step::sources(&states, &[], &[]);
        fit_bufs(bufs, self.geo.raid_disks, len);
        let mut reads = slot_reads(&members, &readable, cursor, bufs, len);
        let errors = self.range_io(&mut reads);
        let mut found = StepCounts::default();
        for (slot, _) in errors {
            let (fixed, bad) = self.patrol_narrow(slot, cursor, n, layout)?;
            found.corrected_sectors += fixed;
            found.bad_block_sectors += bad;
        }
        Ok(found)
    }

    /// Finds the unreadable 4 KiB blocks of `[ms, ms + n)` on `slot` and repairs each.
    /// Returns (sectors rewritten and readable again, sectors sent to the bad-block log).
    pub(crate) fn patrol_narrow(
        &self,
        slot: usize,
        ms: u64,
        n: u64,
        layout: Option<&raidkit_layout::Geometry>,
    ) -> Result<(u64, u64)> {
        let mut fixed = 0;
        let mut bad = 0;
        let mut probe = vec![0u8; BLOCK_SECTORS as usize * SECTOR];
        // Unreadable blocks next to each other go to the bad-block log as one range: one
        // log entry and one superblock update instead of one per block.
        let mut pending: Option<(MemberId, u64, u64)> = None;
        for (b, len) in blocks(ms, n) {
            let (states, members) = self.snapshot();
            let Some(member) = members[slot].clone().filter(|_| states[slot].usable()) else {
                break; // the member failed meanwhile
            };
            let (index, known) = {
                let st = lock(&self.state);
                let index = st.roster.slot_member[Slot(slot)];
                let known = index
                    .and_then(|i| st.bad.get(i))
                    .is_some_and(|list| list.iter().any(|&(s, l)| s <= b && b + len <= s + l));
                (index, known)
            };
            if known {
                // Already in the bad-block log: served from redundancy, nothing to find.
                continue;
            }
            let mut io = [RangeIo::read(
                slot,
                member.clone(),
                b,
                &mut probe[..len as usize * SECTOR],
            )];
            if !self.range_io(&mut io).is_empty() {
                match self.rewrite_block(slot, member, b, len, layout)? {
                    true => fixed += len,
                    false => {
                        bad += len;
                        if let Some(i) = index {
                            match pending {
                                Some((pi, from, to)) if pi == i && to == b => {
                                    pending = Some((i, from, b + len));
                                }
                                _ => {
                                    if let Some((pi, from, to)) = pending.take() {
                                        self.record_bad_block(pi, from, to - from)?;
                                    }
                                    pending = Some((i, b, b + len));
                                }
                            }
                        }
                    }
                }
            }
        }
        if let Some((i, from, to)) = pending {
            self.record_bad_block(i, from, to - from)?;
        }
        Ok((fixed, bad))
    }

    /// Rebuilds `[ms, ms + n)` of `slot` from redundancy, writes it and reads it back.
    /// Returns whether the block reads again.
    fn rewrite_block(
        &self,
        slot: usize,
        member: Arc<Member>,
        ms: u64,
        n: u64,
        layout: Option<&raidkit_layout::Geometry>,
    ) -> Result<bool> {
        if self.geo.level() == RaidLevel::Raid0 {
            return Ok(false);
        }
        let len = n as usize * SECTOR;
        let mut buf = vec![0u8; len];
        let keys = self.keys_for_member_range(layout, slot, ms, n)?;
        self.locked(&keys, || -> Result<bool> {
            let rebuilt = match self.geo.scheme() {
                Scheme::Parity { .. } => {
                    let mut bufs = Vec::new();
                    match self.reconstruct_parity_range(slot, ms, n, &mut bufs) {
                        Ok(()) => {
                            buf.copy_from_slice(&bufs[slot][..len]);
                            true
                        }
                        Err(_) => false,
                    }
                }
                Scheme::Copies { .. } => {
                    let pieces = self.mirror_pieces(layout, slot, ms, n)?;
                    self.fill_from_other_copies(slot, &pieces, &mut buf).is_ok()
                }
            };
            if !rebuilt {
                return Ok(false);
            }
            let mut w = [RangeIo::write(slot, member.clone(), ms, &mut buf)];
            if !self.range_io(&mut w).is_empty() {
                return Ok(false);
            }
            let mut check = vec![0u8; len];
            let mut r = [RangeIo::read(slot, member, ms, &mut check)];
            Ok(self.range_io(&mut r).is_empty() && check == buf)
        })
    }
}
