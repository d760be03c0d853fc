//! Replace (md's `--replace`): each member marked for replacement is copied onto its
//! replacement while it stays in service; a range the old member cannot read is rebuilt from
//! the others instead. The cursor is md's `recovery_offset` in each replacement's superblock.

use super::io::RangeIo;
use super::{Cadence, StepResult, StepScratch, Task, TaskKind, TaskRange};
use crate::array::{lock, Array, Member, MemberId, Slot, Transition};
use crate::error::Result;
use crate::geometry::Scheme;
use crate::plan::SECTOR;
use std::sync::Arc;

/// (slot, replacement index, replacement member, member being replaced).
type Replacing = (Slot, MemberId, Arc<Member>, Option<Arc<Member>>);

/// One replace run over every slot that has a replacement.
pub(super) struct Replace<'a> {
    array: &'a Array,
    slots: Vec<usize>,
    layout: Option<&'a raidkit_layout::Geometry>,
    end: u64,
}

impl<'a> Task<'a> for Replace<'a> {
    const CADENCE: Cadence = Cadence::Timed;
    const DEAD: &'static str = "no replacement left to copy to (failed, or continued as a rebuild)";

    /// From the lowest `recovery_offset` of the replacements.
    fn range(array: &Array, _: TaskKind, _: Option<u64>) -> Result<TaskRange> {
        let st = lock(&array.state);
        Ok(array.recovery_range(&st, st.roster.replacement.iter().flatten().copied()))
    }

    /// A run over the replacements there are now.
    fn open(array: &'a Array, _: TaskKind) -> Result<Option<Replace<'a>>> {
        let view = array.replace_view();
        if view.is_empty() {
            return Ok(None);
        }
        Ok(Some(Replace {
            array,
            slots: view.iter().map(|r| r.0 .0).collect(),
            layout: array.raid10_layout(),
            end: array.geo.member_data_sectors,
        }))
    }

    fn slots(&self) -> Vec<usize> {
        self.slots.clone()
    }

    fn step(&self, ms: u64, n: u64, sc: &mut StepScratch) -> Result<StepResult> {
        self.array.replace_step(ms, n, sc, self.layout)
    }

    fn checkpoint(&self, at: u64) -> Result<()> {
        self.array.checkpoint_replacements(at, false)
    }

    fn finish(&mut self) -> Result<()> {
        self.array.checkpoint_replacements(self.end, true)
    }
}

impl Array {
    /// (slot, replacement index, replacement member, old member) of every replacement.
    fn replace_view(&self) -> Vec<Replacing> {
        let st = lock(&self.state);
        st.roster
            .replacement
            .ids()
            .filter_map(|slot| {
                let r = st.roster.replacement[slot]?;
                let old = st.roster.slot_member[slot].and_then(|i| st.members[i].clone());
                Some((slot, r, st.members[r].clone()?, old))
            })
            .collect()
    }

    /// One replace step: copies `[cursor, cursor + n)` of every replaced member onto its
    /// replacement (rebuilding what the old member cannot read). `Dead` when no replacement
    /// is left (every one failed, or took over its slot as a rebuild).
    fn replace_step(
        &self,
        cursor: u64,
        n: u64,
        sc: &mut StepScratch,
        layout: Option<&raidkit_layout::Geometry>,
    ) -> Result<StepResult> {
        let view = self.replace_view();
        if view.is_empty() {
            return Ok(StepResult::Dead);
        }
        let StepScratch { bufs, buf, .. } = sc;
        for (at, r_index, r_member, old) in view {
            let slot = at.0;
            let done_to = lock(&self.state).roster.sbs[r_index]
                .recovery_offset()
                .unwrap_or(0);
            if done_to >= cursor + n {
                continue;
            }
            let len = n as usize * SECTOR;
            buf.resize(len, 0);
            let keys = self.keys_for_member_range(layout, slot, cursor, n)?;
            self.locked(&keys, || -> Result<()> {
                let mut got = false;
                if let Some(old) = old {
                    let mut io = [RangeIo::read(slot, old, cursor, &mut buf[..len])];
                    got = self.range_io(&mut io).is_empty();
                }
                if !got {
                    // The old member cannot give this range: rebuild it from the others.
                    match self.geo.scheme() {
                        Scheme::Parity { .. } => {
                            self.reconstruct_parity_range(slot, cursor, n, bufs)?;
                            buf[..len].copy_from_slice(&bufs[slot][..len]);
                        }
                        Scheme::Copies { .. } => {
                            let pieces = self.mirror_pieces(layout, slot, cursor, n)?;
                            self.fill_from_other_copies(slot, &pieces, &mut buf[..len])?;
                        }
                    }
                }
                let mut w = [RangeIo::write(slot, r_member, cursor, &mut buf[..len])];
                if let Some((_, e)) = self.range_io(&mut w).into_iter().next() {
                    self.replacement_failed(at, &format!("replacement write: {e}"));
                }
                Ok(())
            })?;
        }
        Ok(StepResult::done())
    }

    /// Records the replacements' progress; with `done`, each replacement takes its slot and
    /// the member it replaced is marked faulty (md's end of a replace).
    fn checkpoint_replacements(&self, cursor: u64, done: bool) -> Result<()> {
        let view = self.replace_view();
        let mut ok = Vec::new();
        for (slot, r, m, _) in view {
            match m.disk.flush() {
                Ok(()) => ok.push((slot, r)),
                Err(e) => self.replacement_failed(slot, &format!("flush: {e}")),
            }
        }
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        let names = Self::names(&st);
        let mut t = Transition {
            write: !self.read_only,
            ..Transition::default()
        };
        for (slot, r) in ok {
            t = t.then(st.roster.copy_progress(slot, r, cursor, done, &names));
        }
        t.write &= !self.read_only;
        self.apply(&mut st, t);
        Ok(())
    }
}
