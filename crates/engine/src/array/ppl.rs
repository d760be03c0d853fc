//! The partial parity log driver (md's `--consistency-policy=ppl` for RAID 5): where each
//! member's log lives, the log write before a write phase, and the replay at assembly.
//!
//! Owns the ordering that closes the write hole (the meaning of entries is [`crate::ppl`]):
//! 1. before a write phase writes data or parity of a band whose parity member is in sync, an
//!    entry for the band (with its partial parity) is written to the start of that member's log
//!    area with FUA, as md writes it (durable on its own, not waiting for the member's cache);
//! 2. the log of a member stays locked until the writes it covers have completed, and before
//!    it is overwritten the members written under it are flushed (md flushes them before the
//!    next io_unit when a member has a write-back cache), so a log only ever stops covering a
//!    stripe once that stripe's writes are durable. Whole-stripe writes need no flush: while
//!    every entry of the newest log is a full-stripe entry (no partial parity), the next log
//!    of only full-stripe entries is written after it in the area and names its entries again
//!    with its own (md's chain of logs, of which md replays the newest; [`Chain`]). A torn
//!    log there leaves the one before it the newest, and the stripes it would have named were
//!    not written yet. An array flush drops the entries it made durable from the chain;
//! 3. logs are taken in ascending slot order, after the stripe locks, and nothing takes a stripe
//!    lock while holding a log, so writers never deadlock.
//!
//! Every write of a stripe with an in-sync parity member is logged as md logs it, one entry per
//! band over all the data members it modifies, full-stripe writes too (with no partial
//! parity): otherwise an older entry could be replayed over a stripe that a later, unlogged
//! write changed. A stripe whose parity member is being rebuilt is logged where that member is
//! already recovered (md's R5_Insync). An array flush retires the logs that cover only writes
//! it made durable (an empty log write), so a replay never concerns durable data.
//!
//! At assembly of a dirty array the newest log of every member in sync or being rebuilt is
//! replayed (`ppl_recover`); a modified member that is missing or unreadable there counts as
//! missing for its entry, and rows where it was written together with another data member are
//! recorded as bad blocks on the parity member ([`EntryRecovery::lost_rows`]): its in-flight
//! sectors there read as errors, never as a mix of versions (md returns whatever parity and
//! the other member make of them). Then, as md does at every start, each area is zeroed and
//! given an empty header; a clean array gets its empty headers just before its first write
//! instead, so that assembling it writes nothing.

use super::write_log::{LogHold, LogStart, Phase, PhaseHold, WriteLog};
use super::{lock, Array, ConsistencyPolicy, EngineError, Member, Result, Slot, State};
use crate::events::ArrayEvent;
use crate::geometry::Geo;
use crate::plan::{step, MemberState, Piece, PieceKind, SECTOR};
use crate::pool::{run_phase, Batch, Job, JobKind};
use crate::ppl::{newest_header, plan_entry, EntryRecovery, LogBuilder};
use raidkit_metadata::ppl::{pp_checksum, ppl_signature, PplEntry, PplHeader, PPL_HDR_MAX_ENTRIES};
use raidkit_metadata::ppl::{PPL_HEADER_SECTORS, PPL_HEADER_SIZE};
use raidkit_metadata::{DataLayout, Superblock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The array's partial parity log state.
pub(super) struct Ppl {
    signature: u32,
    generation: AtomicU64,
    /// Per raid slot, the log on that slot's member (held by a phase until its writes are
    /// done).
    logs: Vec<Mutex<SlotLog>>,
    /// Per raid slot, log writes made to its member so far (changed under its log's lock).
    log_seq: Vec<AtomicU64>,
    /// Bytes of the smallest member's log area (entries of one log write must fit).
    area_bytes: u64,
    /// The logs still hold what the last run left; they are emptied before the first write
    /// (see `WriteLog::before_dirty`).
    reset_pending: AtomicBool,
}

/// The log on one slot's member, as the engine last wrote it.
#[derive(Default)]
struct SlotLog {
    /// Slots written under the entries the member's logs still name: flushed before a log
    /// is written at the start of the area again.
    written: Vec<usize>,
    /// Where the next log may follow the newest one without a flush first, when it can.
    chain: Option<Chain>,
    /// Entries ever carried in a chain on this slot (numbers the next one).
    appended: u64,
}

/// md's chain of logs in one area (`ppl_load_distributed` replays the newest of the headers
/// that follow one another with rising generations): while every entry the newest log names
/// is a full-stripe entry (no partial parity to keep), the next log is written after it and
/// names those entries again with its own, instead of flushing the members and replacing it.
/// A sequential stream then costs one log write per stripe and no flush.
struct Chain {
    /// The member the chain is on: another member in the slot starts over. (A `Weak` keeps
    /// the allocation, so a new member cannot take the old one's address.)
    member: Weak<Member>,
    /// Byte offset in the area where the next log goes.
    next_at: u64,
    /// Entries the newest log names whose writes may not be durable yet, each with its
    /// number ([`SlotLog::appended`]).
    carried: Vec<(u64, PplEntry)>,
}

fn on_member(c: &Chain, m: &Arc<Member>) -> bool {
    std::ptr::eq(c.member.as_ptr(), Arc::as_ptr(m))
}

/// Byte offset and length of a member's log area, as md validates it (`ppl_validate_rdev`:
/// the space after the header rounded down to 4 KiB).
pub(super) fn area_of(sb: &Superblock) -> Option<(u64, u64)> {
    let area = sb.ppl()?;
    let data = u64::from(area.size_sectors).checked_sub(PPL_HEADER_SECTORS)? / 8 * 8;
    if data == 0 {
        return None;
    }
    let start = (sb.super_offset_sectors as i64).checked_add(i64::from(area.offset_sectors))?;
    let start = u64::try_from(start).ok()?;
    Some((
        start * SECTOR as u64,
        (data + PPL_HEADER_SECTORS) * SECTOR as u64,
    ))
}

impl Ppl {
    /// The log state of an array whose superblocks are `sbs`, if it has one.
    pub(super) fn from_superblocks(sbs: &[Superblock], raid_disks: usize) -> Option<Ppl> {
        let first = sbs.first()?;
        // MD_FEATURE_PPL as mdadm creates it, or MD_FEATURE_MULTIPLE_PPLS as the kernel
        // records a log area with room for more than one log write once it ran the array.
        first.ppl()?;
        let area_bytes = sbs.iter().filter_map(area_of).map(|(_, len)| len).min()?;
        Some(Ppl {
            signature: ppl_signature(&first.set_uuid.0),
            generation: AtomicU64::new(1),
            logs: (0..raid_disks)
                .map(|_| Mutex::new(SlotLog::default()))
                .collect(),
            log_seq: (0..raid_disks).map(|_| AtomicU64::new(0)).collect(),
            area_bytes,
            reset_pending: AtomicBool::new(false),
        })
    }
}

/// One log write of a phase (see `log_phase`).
struct LogWrite {
    /// Index of the slot in the phase's slots.
    k: usize,
    member: Arc<Member>,
    /// Byte offset on the member.
    at: u64,
    bytes: Vec<u8>,
    /// The phase's own entries, all full-stripe ones when `full_only`.
    new_entries: Vec<PplEntry>,
    full_only: bool,
    /// Bytes of the area the log spans (header and partial parity).
    span: u64,
}

/// Logs held over a write phase; [`PplHold::finish`] records what the phase wrote.
pub(super) struct PplHold<'a> {
    logs: Vec<MutexGuard<'a, SlotLog>>,
    written: Vec<usize>,
}

impl PhaseHold for PplHold<'_> {
    /// The phase's writes have completed: each held log now covers them until they are
    /// flushed, before a log is next written at the start of the area.
    fn written(mut self: Box<Self>) {
        let written = std::mem::take(&mut self.written);
        for g in &mut self.logs {
            g.written.extend_from_slice(&written);
            g.written.sort_unstable();
            g.written.dedup();
        }
    }
}

impl Array {
    /// Per slot, the member sectors a member being rebuilt holds current data below (its
    /// recovery offset as the superblocks record it; a crash resumes the rebuild there, so
    /// stripes above it are rebuilt again); 0 for other slots.
    fn recovered_sectors(&self) -> Vec<u64> {
        let st = lock(&self.state);
        st.roster
            .slot_member
            .ids()
            .map(|slot| {
                st.roster.slot_member[slot]
                    .filter(|_| st.roster.slot_state[slot] == MemberState::Rebuilding)
                    .and_then(|i| st.roster.sbs[i].recovery_offset())
                    .unwrap_or(0)
            })
            .collect()
    }
}

impl WriteLog for Ppl {
    fn policy(&self) -> ConsistencyPolicy {
        ConsistencyPolicy::Ppl
    }

    /// Largest band (in sectors) whose partial parity fits one log write.
    fn max_band_sectors(&self, _geo: &Geo) -> u64 {
        ((self.area_bytes - PPL_HEADER_SIZE as u64) / SECTOR as u64) / 8 * 8
    }

    /// A write band is logged on the slot holding its stripe's parity, with its partial
    /// parity bytes (0 for full-stripe bands); mirror pieces are not logged.
    fn piece_cost(&self, geo: &Geo, piece: &Piece) -> Option<(usize, u64)> {
        let PieceKind::Band {
            stripe,
            sectors,
            dd_first,
            dd_last,
            ..
        } = &piece.kind
        else {
            return None;
        };
        let pp = if dd_last + 1 - dd_first < geo.data_disks() {
            sectors * SECTOR as u64
        } else {
            0
        };
        Some((geo.stripe(*stripe).p_member, pp))
    }

    /// Whether `count` entries with `pp_bytes` of partial parity between them fit one log
    /// write of one member.
    fn fits(&self, count: usize, pp_bytes: u64) -> bool {
        count <= PPL_HDR_MAX_ENTRIES && pp_bytes + PPL_HEADER_SIZE as u64 <= self.area_bytes
    }

    /// Logs every band of the phase that is about to be written on its parity member,
    /// durably, and holds those logs until the phase completes. A member whose log cannot be
    /// written is failed, and the phase's member states are taken again.
    fn log_phase<'a>(&'a self, array: &Array, phase: Phase<'_>) -> Result<Option<LogHold<'a>>> {
        let Phase {
            ops,
            writing,
            user,
            states,
            members: phase_members,
            ..
        } = phase;
        let n = array.geo.raid_disks;
        // Only a member being rebuilt needs its recovery offset looked up.
        let recovered = if states.contains(&MemberState::Rebuilding) {
            array.recovered_sectors()
        } else {
            Vec::new()
        };
        let mut builders: Vec<LogBuilder> = (0..n).map(|_| LogBuilder::new()).collect();
        let mut written = Vec::new();
        for (op, _) in ops.iter().zip(writing).filter(|(_, &w)| w) {
            let Some(bw) = op.band_write() else {
                continue;
            };
            // md logs only stripes whose parity member is in sync there (`ppl_write_stripe`:
            // R5_Insync, which a member being rebuilt has below its recovery offset).
            if !step::current_below(
                states,
                &recovered,
                bw.p_member,
                bw.member_sector + bw.sectors,
            ) {
                continue;
            }
            if builders[bw.p_member].add(&array.geo, &bw, user) {
                written.push(bw.p_member);
                written.extend_from_slice(&bw.data_members[bw.dd_first..=bw.dd_last]);
            }
        }
        let slots: Vec<usize> = (0..n).filter(|&s| !builders[s].is_empty()).collect();
        if slots.is_empty() {
            return Ok(None);
        }
        written.sort_unstable();
        written.dedup();
        let mut logs: Vec<MutexGuard<'_, SlotLog>> =
            slots.iter().map(|&s| lock(&self.logs[s])).collect();
        let (_, members) = array.snapshot();
        let areas: Vec<Option<(u64, u64)>> = {
            let st = lock(&array.state);
            slots.iter().map(|&s| slot_area(&st, Slot(s))).collect()
        };
        // Per slot: the offset of its new log in the area when it follows the newest in the
        // chain (no flush first), else None (at the start of the area, after a flush).
        let chained: Vec<Option<u64>> = slots
            .iter()
            .zip(&logs)
            .zip(&areas)
            .map(|((&s, g), area)| {
                let (c, m, (_, len)) = (g.chain.as_ref()?, members[s].as_ref()?, (*area)?);
                // Only full-stripe entries follow: a partial parity was computed from the
                // data the write leaves alone, which earlier writes in the chain may have
                // changed without its being durable yet; the flush first makes it so.
                let b = &builders[s];
                let used = c.next_at + PPL_HEADER_SIZE as u64;
                (on_member(c, m)
                    && b.pp_len() == 0
                    && c.carried.len() + b.entries().len() <= PPL_HDR_MAX_ENTRIES
                    && used <= len)
                    .then_some(c.next_at)
            })
            .collect();
        // Writes the logs to be replaced covered become durable before those logs go.
        let mut to_flush: Vec<usize> = logs
            .iter()
            .zip(&chained)
            .filter(|(_, c)| c.is_none())
            .flat_map(|(g, _)| g.written.iter().copied())
            .collect();
        to_flush.sort_unstable();
        to_flush.dedup();
        let flushes: Vec<(usize, Arc<Member>)> = to_flush
            .iter()
            .filter_map(|&s| members[s].clone().map(|m| (s, m)))
            .collect();
        let batch = Batch::new();
        batch.add(flushes.len());
        run_phase(
            flushes
                .iter()
                .enumerate()
                .map(|(tag, (_, m))| {
                    let j = job(JobKind::Flush, 0, &mut [], &batch, tag);
                    (&m.worker, m.disk.name(), j)
                })
                .collect(),
            &batch,
        );
        for (tag, err) in batch.wait() {
            array.member_failed(Slot(flushes[tag].0), &err.to_string());
        }
        for (g, c) in logs.iter_mut().zip(&chained) {
            if c.is_none() {
                g.written.clear();
            }
        }
        // The new log writes: (index in `slots`, member, byte offset, bytes, its new entries,
        // whether they are all full-stripe entries, bytes it spans).
        let mut bufs: Vec<LogWrite> = Vec::new();
        for (k, &slot) in slots.iter().enumerate() {
            let (Some(m), Some((at, len))) = (members[slot].clone(), areas[k]) else {
                continue;
            };
            let mut builder = std::mem::take(&mut builders[slot]);
            let new_entries = builder.entries().to_vec();
            let full_only = builder.pp_len() == 0;
            let span = (PPL_HEADER_SIZE + builder.pp_len()) as u64;
            let offset = chained[k].unwrap_or(0);
            if let (Some(_), Some(c)) = (chained[k], logs[k].chain.as_ref()) {
                builder.carry(c.carried.iter().map(|(_, e)| *e));
            }
            let generation = self.generation.fetch_add(1, Ordering::Relaxed);
            let bytes = builder
                .finish(self.signature, generation, len - offset)
                .map_err(|f| {
                    EngineError::Invalid(format!(
                        "partial parity log write of {} entries and {} bytes does not fit the {}-byte log area",
                        f.entries, f.bytes, f.area_bytes
                    ))
                })?;
            bufs.push(LogWrite {
                k,
                member: m,
                at: at + offset,
                bytes,
                new_entries,
                full_only,
                span,
            });
        }
        // Each member's log write with FUA, as md's (durable on its own: the member's other
        // cached writes are not waited for); on the calling thread when it does not wait.
        let batch = Batch::new();
        batch.add(bufs.len());
        let inline = bufs
            .iter()
            .all(|w| w.member.worker.does_not_wait(JobKind::WriteFua));
        for (i, w) in bufs.iter_mut().enumerate() {
            let j = job(JobKind::WriteFua, w.at, &mut w.bytes, &batch, i);
            if inline {
                w.member.worker.execute_here(j);
            } else {
                w.member.worker.submit(j, w.member.disk.name());
            }
        }
        let mut failed: Vec<usize> = batch.wait().into_iter().map(|(t, _)| t).collect();
        failed.sort_unstable();
        failed.dedup();
        let mut failed_slots = Vec::new();
        for (i, w) in bufs.into_iter().enumerate() {
            let g = &mut logs[w.k];
            crate::buffers::keep_buffer(w.bytes);
            self.log_seq[slots[w.k]].fetch_add(1, Ordering::Relaxed);
            if failed.binary_search(&i).is_ok() {
                g.chain = None;
                failed_slots.push(slots[w.k]);
                continue;
            }
            // What the next log of this slot may carry.
            let mut chain = match (chained[w.k], g.chain.take(), w.full_only) {
                (_, _, false) => None,
                (Some(_), Some(mut c), true) => {
                    c.next_at += w.span;
                    Some(c)
                }
                (_, _, true) => Some(Chain {
                    member: Arc::downgrade(&w.member),
                    next_at: w.span,
                    carried: Vec::new(),
                }),
            };
            if let Some(c) = chain.as_mut() {
                for e in w.new_entries {
                    c.carried.push((g.appended, e));
                    g.appended += 1;
                }
            }
            g.chain = chain;
        }
        for slot in failed_slots {
            self.device_failed(
                array,
                slot,
                "the partial parity log could not be written to it",
            )?;
        }
        let hold: LogHold<'a> = Box::new(PplHold { logs, written });
        // A member whose log failed is no longer written.
        (*states, *phase_members) = array.snapshot();
        Ok(Some(hold))
    }

    /// Per slot, the log writes made so far and the entries carried so far, each read under
    /// its log's lock: a phase that holds a log has completed its member writes once the
    /// lock is free.
    fn flush_mark(&self) -> Vec<u64> {
        self.logs
            .iter()
            .zip(&self.log_seq)
            .flat_map(|(l, seq)| {
                let g = lock(l);
                [seq.load(Ordering::Relaxed), g.appended]
            })
            .collect()
    }

    /// Retires the entries the flush made durable. A log not written since `mark` covers
    /// only writes that completed before the members' flushes, so it is replaced by an empty
    /// one (md keeps them until its next log write); a chain whose newest log still names
    /// entries carried from before `mark` gets a log naming only the later ones. A log that
    /// holds entries after a flush would be replayed after a crash over data that was
    /// durable; with a member of its rows missing, rows written over several members would
    /// then be given up as lost ([`EntryRecovery::lost_rows`]) although they are whole.
    fn flush(&self, array: &Array, mark: &[u64]) -> Result<()> {
        for (slot, seen) in mark.chunks_exact(2).enumerate() {
            let (seen_seq, seen_appended) = (seen[0], seen[1]);
            let mut g = lock(&self.logs[slot]);
            if g.written.is_empty() {
                continue;
            }
            let (member, area) = {
                let st = lock(&array.state);
                let m = st.roster.slot_member[Slot(slot)].and_then(|i| st.members[i].clone());
                (m, slot_area(&st, Slot(slot)))
            };
            let (Some(m), Some((at, len))) = (member, area) else {
                continue;
            };
            let mut builder = LogBuilder::new();
            let offset = if self.log_seq[slot].load(Ordering::Relaxed) == seen_seq {
                0
            } else {
                let Some(c) = g.chain.as_mut().filter(|c| on_member(c, &m)) else {
                    continue;
                };
                let before = c.carried.len();
                c.carried.retain(|(n, _)| *n >= seen_appended);
                if c.carried.len() == before {
                    continue;
                }
                if c.next_at + (2 * PPL_HEADER_SIZE) as u64 <= len {
                    builder.carry(c.carried.iter().map(|(_, e)| *e));
                    c.next_at
                } else {
                    // No room after the newest: what it names since the mark completed
                    // (the lock is free), so a flush of its members lets it go altogether.
                    if !flush_slots(array, &g.written) {
                        continue;
                    }
                    0
                }
            };
            let generation = self.generation.fetch_add(1, Ordering::Relaxed);
            let bytes = builder
                .finish(self.signature, generation, len - offset)
                .map_err(|f| {
                    EngineError::Invalid(format!(
                        "a partial parity log of {} entries and {} bytes does not fit the {}-byte log area",
                        f.entries, f.bytes, f.area_bytes
                    ))
                })?;
            let r = m.disk.write_fua(&bytes, at + offset);
            crate::buffers::keep_buffer(bytes);
            if let Err(e) = r {
                g.chain = None;
                drop(g);
                array.member_failed(Slot(slot), &format!("retiring its partial parity log: {e}"));
                continue;
            }
            if offset == 0 {
                g.written.clear();
                g.chain = None;
            } else if let Some(c) = g.chain.as_mut() {
                c.next_at += PPL_HEADER_SIZE as u64;
            }
            self.log_seq[slot].fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The member holding the log leaves the array (md fails a member whose log write
    /// fails); the stripes whose parity it held run degraded.
    fn device_failed(&self, array: &Array, device: usize, why: &str) -> Result<()> {
        array.member_failed(Slot(device), why);
        Ok(())
    }

    /// At assembly: replays the newest log of every in-sync member when the array was not
    /// stopped cleanly, then zeroes every log area and writes an empty header (as md does at
    /// every start). Returns true when the replay leaves every stripe consistent, so no resync
    /// is needed: no entry mismatched and no resync was under way (md also wants at least one
    /// recovered entry). A new array's logs were written empty at creation.
    fn start(&self, array: &Array, how: LogStart, events: &mut Vec<ArrayEvent>) -> Result<bool> {
        let LogStart::Assembled {
            dirty,
            resync_offset,
        } = how
        else {
            return Ok(false);
        };
        let consistent = self.replay(array, dirty, resync_offset, events)?;
        if consistent {
            events.push(ArrayEvent::PplMadeConsistent);
        }
        Ok(consistent)
    }

    /// Before the first write after a clean assembly: md's empty log on every writable
    /// member, as md writes it at every start.
    fn before_dirty(&self, array: &Array, st: &mut State) -> Vec<ArrayEvent> {
        if self.reset_pending.swap(false, Ordering::SeqCst) {
            self.reset_locked(array, st)
        } else {
            Vec::new()
        }
    }

    /// The resync cursor, not 0: a write in flight at a crash is in the log, whose replay
    /// makes its stripe consistent wherever it lies, so only what the resync has not reached
    /// needs it after a crash. With 0 here, a crash during an initial resync (a background
    /// initialisation) would lose it: md's rule takes a dirty array from 0 whose log
    /// replayed cleanly as consistent, and stripes never written would keep the old data's
    /// parity, which a later partial write updates as if it were right. md reads the
    /// cursor the same way (it resyncs from there and replays the log first). A resync not
    /// begun (0) stays 0; create does the first step of a background initialisation
    /// itself, so that the cursor is past 0 before anything is written.
    fn dirty_resync_offset(&self, resync_from: Option<u64>) -> u64 {
        resync_from.unwrap_or(0)
    }

    /// md's `ppl_modify_log`: a member joining the array starts with an empty log.
    fn member_joins(
        &self,
        disk: &dyn raidkit_disk::Disk,
        sb: &mut Superblock,
        dl: &DataLayout,
    ) -> Result<()> {
        if let (Some(area), true) = (dl.ppl, sb.ppl().is_some()) {
            sb.set_ppl_area(area);
            if let Some(at) = area_of(sb) {
                write_empty_log(disk, at, ppl_signature(&sb.set_uuid.0))?;
            }
        }
        Ok(())
    }
}

impl Ppl {
    /// The replay of [`WriteLog::start`] at assembly.
    fn replay(
        &self,
        array: &Array,
        dirty: bool,
        resync_offset: u64,
        events: &mut Vec<ArrayEvent>,
    ) -> Result<bool> {
        let (states, members) = array.snapshot();
        let areas: Vec<Option<(u64, u64)>> = {
            let st = lock(&array.state);
            st.roster
                .slot_member
                .ids()
                .map(|s| slot_area(&st, s))
                .collect()
        };
        let (mut recovered, mut mismatched) = (0usize, 0usize);
        if dirty && array.read_only {
            events.push(ArrayEvent::PplNotReplayed);
        } else if dirty {
            // md replays the log of every member it has, one being rebuilt too, and reads a
            // modified member where it is in sync (below its recovery offset when rebuilt).
            let rebuilt_to = array.recovered_sectors();
            for slot in 0..array.geo.raid_disks {
                let (Some(m), Some((at, len)), true) =
                    (&members[slot], areas[slot], states[slot].writable())
                else {
                    continue;
                };
                let mut area = vec![0u8; len as usize];
                if let Err(e) = m.disk.read_at(&mut area, at) {
                    events.push(ArrayEvent::PplUnreadable {
                        member: m.disk.name().into(),
                        error: e.to_string(),
                    });
                    mismatched += 1;
                    continue;
                }
                let Some((offset, header)) = newest_header(&area, self.signature) else {
                    events.push(ArrayEvent::PplNoValidHeader {
                        member: m.disk.name().into(),
                    });
                    mismatched += 1;
                    continue;
                };
                let mut pp_at = ((offset + PPL_HEADER_SECTORS) as usize) * SECTOR;
                let mut failed_at_replay = None;
                for e in &header.entries {
                    let pp_len = e.pp_size_bytes as usize;
                    let pp = area.get(pp_at..pp_at.saturating_add(pp_len));
                    pp_at = pp_at.saturating_add(pp_len);
                    let Some(pp) = pp.filter(|pp| pp_checksum(pp) == e.checksum) else {
                        mismatched += 1;
                        continue;
                    };
                    let plan = match plan_entry(&array.geo, e, slot) {
                        Ok(p) => p,
                        Err(why) => {
                            events.push(ArrayEvent::PplEntryRefused {
                                member: m.disk.name().into(),
                                array_sector: e.data_sector,
                                reason: why.to_string(),
                            });
                            mismatched += 1;
                            continue;
                        }
                    };
                    // A modified member that is missing, or unreadable here, counts as
                    // missing for the entry: its rows are left as the crash left them
                    // where it was the only member written, and given up where it was
                    // written with others (so a stripe is never left waiting for a resync
                    // that a second crash would forget).
                    let mut data: Vec<Option<Vec<u8>>> = Vec::with_capacity(plan.data.len());
                    for &(dm, rows) in &plan.data {
                        let buf = members[dm]
                            .as_ref()
                            .filter(|_| {
                                step::current_below(
                                    &states,
                                    &rebuilt_to,
                                    dm,
                                    plan.member_sector + rows,
                                )
                            })
                            .and_then(|dmm| {
                                let mut b = vec![0u8; rows as usize * SECTOR];
                                match dmm.disk.read_at(
                                    &mut b,
                                    dmm.data_offset_bytes + plan.member_sector * SECTOR as u64,
                                ) {
                                    Ok(()) => Some(b),
                                    Err(e) => {
                                        events.push(ArrayEvent::PplReplayReadFailed {
                                            member: dmm.disk.name().into(),
                                            error: e.to_string(),
                                        });
                                        // Not consistent from the log alone: a resync
                                        // follows, which reads around the error.
                                        mismatched += 1;
                                        None
                                    }
                                }
                            });
                        data.push(buf);
                    }
                    let present: Vec<bool> = data.iter().map(|b| b.is_some()).collect();
                    let lost = plan.lost_rows(&present);
                    if lost > 0 {
                        self.rows_lost(array, slot, &plan, &present, lost, events)?;
                    }
                    let refs: Vec<Option<&[u8]>> = data.iter().map(|b| b.as_deref()).collect();
                    if let Some((first, parity)) = plan.recompute(&refs, Some(pp)) {
                        if let Err(e) = m.disk.write_at(
                            &parity,
                            m.data_offset_bytes + (plan.member_sector + first) * SECTOR as u64,
                        ) {
                            failed_at_replay = Some(e.to_string());
                            break;
                        }
                    }
                    recovered += 1;
                }
                let failed = failed_at_replay
                    .take()
                    .or_else(|| m.disk.flush().err().map(|e| e.to_string()));
                if let Some(e) = failed {
                    // As any member write error: the member leaves the array, and the
                    // stripes whose parity it held run degraded.
                    events.push(ArrayEvent::PplReplayWriteFailed {
                        member: m.disk.name().into(),
                        error: e.clone(),
                    });
                    array.member_failed(Slot(slot), &format!("partial parity log replay: {e}"));
                }
            }
            events.push(ArrayEvent::PplReplayed {
                recovered,
                mismatched,
            });
        }
        if dirty && !array.read_only {
            // The replayed entries must not be replayed again over later writes.
            let _g = lock(&array.sb_lock);
            let mut st = lock(&array.state);
            events.extend(self.reset_locked(array, &mut st));
        } else if !array.read_only {
            // A clean array: the logs are emptied before its first write marks it dirty
            // (`before_dirty`), so an assembly that writes nothing leaves every
            // member as it was (a refused command must not change a member).
            self.reset_pending.store(true, Ordering::SeqCst);
        }
        // md's ppl_init_log: at least one entry recovered and none mismatched. An empty log
        // on a dirty array is not proof of consistency: an array created to be initialised
        // in the background (md's initial resync) is dirty from 0 with empty logs. The logs
        // are emptied only at assembly and a member's joining, so an array written since
        // has entries.
        Ok(dirty && !array.read_only && recovered > 0 && mismatched == 0 && resync_offset == 0)
    }

    /// Records rows of an entry that cannot be recomputed ([`EntryRecovery::lost_rows`]) as
    /// bad blocks on the parity member (`slot`), so that the missing member's sectors there
    /// read as errors; md honours the same bad blocks. A member with no room for them is
    /// failed instead, which loses the stripes it held parity for as unreadable, never as
    /// wrong data.
    fn rows_lost(
        &self,
        array: &Array,
        slot: usize,
        plan: &EntryRecovery,
        present: &[bool],
        rows: u64,
        events: &mut Vec<ArrayEvent>,
    ) -> Result<()> {
        let (member, index) = {
            let st = lock(&array.state);
            let Some(i) = st.roster.slot_member[Slot(slot)] else {
                return Ok(());
            };
            let name = st.members[i]
                .as_ref()
                .map(|m| m.disk.name().to_string())
                .unwrap_or_default();
            (name, i)
        };
        let geo = &array.geo;
        let info = geo.stripe(plan.stripe);
        let chunk = geo.chunk_sectors;
        let off = plan.member_sector - info.member_sector_start;
        for (k, &(dm, n)) in plan.data.iter().enumerate() {
            if present[k] {
                continue;
            }
            let Some(dd) = info.data_members.iter().position(|&m| m == dm) else {
                continue;
            };
            let sectors = n.min(rows);
            if sectors == 0 {
                continue;
            }
            events.push(ArrayEvent::PplRowsLost {
                member: member.clone(),
                missing_slot: dm,
                array_sector: (plan.stripe * geo.data_disks() as u64 + dd as u64) * chunk + off,
                sectors,
            });
        }
        array.record_bad_block(index, plan.member_sector, rows)?;
        Ok(())
    }

    /// Writes an empty log on every writable slot's member; a member that cannot take it is
    /// failed. Returns an event per failure.
    fn reset_locked(&self, array: &Array, st: &mut State) -> Vec<ArrayEvent> {
        let mut events = Vec::new();
        for slot in st.roster.slot_member.ids() {
            let member = st.roster.slot_member[slot].and_then(|i| st.members[i].clone());
            let (Some(m), Some(area), true) = (
                member,
                slot_area(st, slot),
                st.roster.slot_state[slot].writable(),
            ) else {
                continue;
            };
            if let Err(e) = write_empty_log(m.disk.as_ref(), area, self.signature) {
                events.push(ArrayEvent::PplResetFailed {
                    member: m.disk.name().into(),
                    error: e.to_string(),
                });
                array.fail_locked(st, slot, &format!("empty partial parity log: {e}"));
            }
        }
        events
    }
}

/// Zeroes a log area and writes md's empty header at its start (`ppl_write_empty_header`).
pub(super) fn write_empty_log(
    disk: &dyn raidkit_disk::Disk,
    (at, len): (u64, u64),
    signature: u32,
) -> Result<()> {
    disk.write_zeroes(at, len)?;
    let header = PplHeader::empty(signature)
        .encode()
        .map_err(|e| EngineError::Metadata(e.to_string()))?;
    disk.write_at(&header, at)?;
    disk.flush()?;
    Ok(())
}

/// Flushes the members of `slots`, failing those that cannot; false if any could not.
fn flush_slots(array: &Array, slots: &[usize]) -> bool {
    let (_, members) = array.snapshot();
    let mut all = true;
    for &s in slots {
        let Some(m) = members.get(s).cloned().flatten() else {
            continue;
        };
        if let Err(e) = m.disk.flush() {
            array.member_failed(
                Slot(s),
                &format!("flushing before its partial parity log goes: {e}"),
            );
            all = false;
        }
    }
    all
}

fn slot_area(st: &State, slot: Slot) -> Option<(u64, u64)> {
    let i = st.roster.slot_member.get(slot).copied().flatten()?;
    area_of(&st.roster.sbs[i])
}

fn job(kind: JobKind, offset_bytes: u64, buf: &mut [u8], batch: &Arc<Batch>, tag: usize) -> Job {
    Job {
        kind,
        offset_bytes,
        ptr: if buf.is_empty() {
            std::ptr::null_mut()
        } else {
            buf.as_mut_ptr()
        },
        len: buf.len(),
        batch: batch.clone(),
        tag,
        pieces: Vec::new(),
    }
}
