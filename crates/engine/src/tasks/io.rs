//! Member I/O and ranges the task steps share: a step's member I/O at once (on the member
//! workers, or on the calling thread in a burst), md's "fail the member whose read erred and
//! read again" in one place, the stripe-lock keys of a range, where a mirror member's range
//! lives in the array, and rebuilding one member's range from the others.

use crate::array::{lock, Array, Member, Slot};
use crate::error::{EngineError, Result};
use crate::plan::step::{self, AfterReads};
use crate::plan::{self, MemberState, SECTOR};
use crate::pool::{Batch, Job, JobKind};
use crate::recon;
use raidkit_disk::DiskError;
use raidkit_layout::Level as RaidLevel;
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One member I/O of a background step.
pub(super) struct RangeIo<'a> {
    pub(super) slot: usize,
    pub(super) member: Arc<Member>,
    pub(super) write: bool,
    pub(super) member_sector: u64,
    pub(super) buf: &'a mut [u8],
}

impl<'a> RangeIo<'a> {
    /// A read of `buf.len()` bytes at `member_sector` of `member` (in `slot`) into `buf`.
    pub(super) fn read(
        slot: usize,
        member: Arc<Member>,
        member_sector: u64,
        buf: &'a mut [u8],
    ) -> RangeIo<'a> {
        RangeIo {
            slot,
            member,
            write: false,
            member_sector,
            buf,
        }
    }

    /// A write of `buf` at `member_sector` of `member` (in `slot`).
    pub(super) fn write(
        slot: usize,
        member: Arc<Member>,
        member_sector: u64,
        buf: &'a mut [u8],
    ) -> RangeIo<'a> {
        RangeIo {
            write: true,
            ..RangeIo::read(slot, member, member_sector, buf)
        }
    }
}

/// Where each part of a member range of a mirror slot lives in the array: (member sector,
/// sectors, array sector or `None` where the member range holds no array data).
pub(super) type MirrorPiece = (u64, u64, Option<u64>);

/// One round of a step's reads ([`Array::read_retrying`]): what the round was planned with,
/// and the reads.
pub(super) type Round<'b, C> = (C, Vec<RangeIo<'b>>);

thread_local! {
    /// Set while a thread runs steps of a burst: its steps do every member I/O on the thread
    /// itself instead of handing it to the member workers.
    static IO_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as a burst thread while it lives.
pub(super) struct IoHere(());

impl IoHere {
    pub(super) fn enter() -> IoHere {
        IO_HERE.with(|h| h.set(true));
        IoHere(())
    }
}

impl Drop for IoHere {
    fn drop(&mut self) {
        IO_HERE.with(|h| h.set(false));
    }
}

/// A worker job for `len` bytes at `buf` of member range starting at `member_sector`; the
/// buffer must stay untouched until `batch` completes.
pub(super) fn member_job(
    m: &Member,
    write: bool,
    member_sector: u64,
    buf: *mut u8,
    len: usize,
    batch: &Arc<Batch>,
    tag: usize,
) -> Job {
    Job {
        kind: if write { JobKind::Write } else { JobKind::Read },
        offset_bytes: m.data_offset_bytes + member_sector * SECTOR as u64,
        ptr: buf,
        len,
        batch: batch.clone(),
        tag,
        pieces: Vec::new(),
    }
}

/// Sectors of the 4 KiB blocks a range is narrowed to (bad blocks, unreadable sectors).
pub(super) const BLOCK_SECTORS: u64 = 8;

/// The 4 KiB blocks of `[ms, ms + n)` as (start, sectors); the last one may be shorter.
pub(super) fn blocks(ms: u64, n: u64) -> impl Iterator<Item = (u64, u64)> {
    (ms..ms + n)
        .step_by(BLOCK_SECTORS as usize)
        .map(move |b| (b, BLOCK_SECTORS.min(ms + n - b)))
}

/// Block `[b, b + len)` copied out of every buffer of a step that starts at `ms`, with the
/// block's byte offset in those buffers.
pub(super) fn copy_block(bufs: &[Vec<u8>], ms: u64, b: u64, len: u64) -> (usize, Vec<Vec<u8>>) {
    let off = ((b - ms) as usize) * SECTOR;
    let bytes = len as usize * SECTOR;
    (
        off,
        bufs.iter().map(|v| v[off..off + bytes].to_vec()).collect(),
    )
}

/// Sizes `bufs` to `count` buffers of `len` bytes each.
pub(super) fn fit_bufs(bufs: &mut Vec<Vec<u8>>, count: usize, len: usize) {
    bufs.resize_with(count, Vec::new);
    for b in bufs.iter_mut() {
        b.resize(len, 0);
    }
}

/// Reads of member range `[ms, ms + len)` from every slot `readable` marks (and that has a
/// member), each into `bufs[slot]`.
pub(super) fn slot_reads<'b>(
    members: &[Option<Arc<Member>>],
    readable: &[bool],
    ms: u64,
    bufs: &'b mut [Vec<u8>],
    len: usize,
) -> Vec<RangeIo<'b>> {
    bufs.iter_mut()
        .enumerate()
        .filter_map(|(slot, buf)| {
            let member = members[slot].clone().filter(|_| readable[slot])?;
            Some(RangeIo::read(slot, member, ms, &mut buf[..len]))
        })
        .collect()
}

impl Array {
    /// Runs member I/O of one step in parallel on the members' workers and waits; returns the
    /// failed ones as (slot, error).
    pub(super) fn range_io(&self, ios: &mut [RangeIo<'_>]) -> Vec<(usize, DiskError)> {
        if ios.is_empty() {
            return Vec::new();
        }
        let batch = Batch::new();
        batch.add(ios.len());
        let mut jobs: Vec<(Arc<Member>, Job)> = ios
            .iter_mut()
            .enumerate()
            .map(|(tag, io)| {
                let (ptr, len) = (io.buf.as_mut_ptr(), io.buf.len());
                let job = member_job(
                    &io.member,
                    io.write,
                    io.member_sector,
                    ptr,
                    len,
                    &batch,
                    tag,
                );
                (io.member.clone(), job)
            })
            .collect();
        let errors = if IO_HERE.with(|h| h.get()) {
            for (m, job) in jobs {
                m.worker.execute_here(job);
            }
            batch.wait()
        } else {
            let inline = jobs.pop();
            for (m, job) in jobs {
                m.worker.submit(job, m.disk.name());
            }
            if let Some((m, job)) = inline {
                // Through the worker's sampling, so a member only ever written here (a
                // rebuild's target) still learns whether its I/O waits.
                m.worker.execute_here(job);
            }
            // The buffers stay borrowed (through `ios`) until every job has completed.
            batch.wait()
        };
        errors
            .into_iter()
            .map(|(tag, e)| (ios[tag].slot, e))
            .collect()
    }

    /// Fails the member of every slot whose I/O erred (`what` names the I/O in the reason;
    /// `None` for reads); returns whether none erred.
    pub(super) fn fail_erred(&self, errors: Vec<(usize, DiskError)>, what: Option<&str>) -> bool {
        let clean = errors.is_empty();
        for (slot, e) in errors {
            let why = match what {
                Some(what) => format!("{what}: {e}"),
                None => e.to_string(),
            };
            self.member_failed(Slot(slot), &why);
        }
        clean
    }

    /// md's answer to a read error in background work, in one place: runs the reads `plan`
    /// lists into `bufs`, fails every member whose read erred and plans again (without them),
    /// until a round reads clean; returns what `plan` gave with that round. `plan` looks at
    /// the members afresh every round, and may end the loop with an error (the array failed,
    /// no source left).
    pub(super) fn read_retrying<B: ?Sized, C>(
        &self,
        bufs: &mut B,
        mut plan: impl for<'b> FnMut(&'b mut B) -> Result<Round<'b, C>>,
    ) -> Result<C> {
        loop {
            let (planned, mut reads) = plan(bufs)?;
            let errors = self.range_io(&mut reads);
            let erred: Vec<usize> = errors.iter().map(|&(slot, _)| slot).collect();
            match step::after_reads(&erred) {
                AfterReads::Proceed => return Ok(planned),
                AfterReads::FailAndReplan(_) => {
                    self.fail_erred(errors, None);
                }
            }
        }
    }

    /// Runs `f` holding the stripe locks `keys`.
    pub(super) fn locked<R>(&self, keys: &[u64], f: impl FnOnce() -> R) -> R {
        self.locks.acquire(keys);
        let r = f();
        self.locks.release(keys);
        r
    }

    /// Step size in sectors: up to 1 MiB per member, bounded by the stripe cache setting.
    /// Larger is not faster: measured on tmpfs members (RAID 5 over 4, 512 KiB chunks), a
    /// rebuild ran at 3.4-4.4 GB/s with 1 MiB steps, 3.5-4.2 with 2 MiB and 2.6-2.9 with
    /// 4 MiB, whose buffers (two steps over every member, the next one being read ahead) no
    /// longer stay in the CPU caches between the reads, the parity and the write.
    ///
    /// On spinning members a step is up to 8 MiB per member: there a step's fixed costs (all
    /// members' reads finishing together, a rotation lost when one of them is late, and
    /// under foreground I/O a seek to the task's position and back on every member) weigh
    /// more than the CPU caches, and the buffers are filled at disk speed anyway. Measured
    /// on 6 emulated HDS72101 with foreground reads at the default task share, those reads
    /// kept 0.46-0.51 of their healthy rate with 1 MiB steps, 0.55-0.68 with 4 MiB and
    /// 0.65-0.66 with 8 MiB (the stripe cache setting bounds it: 64 MiB over 6 + 2 buffers).
    pub(super) fn step_sectors(&self) -> u64 {
        let most = if self.has_spinning_members() {
            8 << 20
        } else {
            1 << 20
        };
        let per_member =
            (self.config.stripe_cache_bytes / (self.geo.raid_disks + 2)).clamp(64 << 10, most);
        let mut s = (per_member / SECTOR) as u64;
        let chunk = self.geo.chunk_sectors.max(8);
        if s >= chunk {
            s = s / chunk * chunk;
        } else {
            s = s / 8 * 8;
        }
        s.max(8)
    }

    /// Lock keys (as `plan::split` assigns them) covering member sectors `[ms, ms + n)` of a
    /// parity level, or array sectors `[s, s + n)` of a mirror level.
    pub(super) fn keys_for_parity_range(&self, ms: u64, n: u64) -> Vec<u64> {
        let chunk = self.geo.chunk_sectors.max(1);
        (ms / chunk..=(ms + n - 1) / chunk).collect()
    }

    pub(super) fn keys_for_array_range(&self, s: u64, n: u64) -> Vec<u64> {
        let unit = plan::copies_lock_unit(&self.geo);
        let mut keys: Vec<u64> = (s / unit..=(s + n - 1) / unit).collect();
        keys.dedup();
        keys
    }

    /// Lock keys of the array sectors that `pieces` (of [`Self::mirror_pieces`]) hold.
    pub(super) fn keys_for_mirror_pieces(&self, pieces: &[MirrorPiece]) -> Vec<u64> {
        let mut keys: Vec<u64> = pieces
            .iter()
            .filter_map(|(_, len, a)| a.map(|a| self.keys_for_array_range(a, *len)))
            .flatten()
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// RAID 10's geometry, which maps a member range back to the array sectors it holds
    /// (`unmap`); `None` for the other levels (RAID 1's member sectors are array sectors).
    pub(crate) fn raid10_layout(&self) -> Option<&raidkit_layout::Geometry> {
        (self.geo.level() == RaidLevel::Raid10).then(|| self.geo.geometry())
    }

    /// Where each part of member range `[ms, ms + n)` of `slot` lives in the array.
    pub(super) fn mirror_pieces(
        &self,
        layout: Option<&raidkit_layout::Geometry>,
        slot: usize,
        ms: u64,
        n: u64,
    ) -> Result<Vec<MirrorPiece>> {
        let Some(layout) = layout else {
            // RAID 1: member sector = array sector.
            return Ok(vec![(ms, n, Some(ms))]);
        };
        let chunk = self.geo.chunk_sectors;
        let mut out = Vec::new();
        let mut s = ms;
        while s < ms + n {
            let len = (chunk - s % chunk).min(ms + n - s);
            let a = match layout.unmap(slot as u32, s) {
                Ok(raidkit_layout::MemberChunkRole::Data { array_sector, .. })
                    if array_sector < self.geo.array_sectors() =>
                {
                    Some(array_sector)
                }
                Ok(_) => None,
                Err(e) => return Err(EngineError::Invalid(e.to_string())),
            };
            out.push((s, len, a));
            s += len;
        }
        Ok(out)
    }

    /// Lock keys of member range `[ms, ms + n)` of `slot`, whatever the level.
    pub(super) fn keys_for_member_range(
        &self,
        layout: Option<&raidkit_layout::Geometry>,
        slot: usize,
        ms: u64,
        n: u64,
    ) -> Result<Vec<u64>> {
        Ok(match self.geo.scheme() {
            crate::geometry::Scheme::Parity { .. } => self.keys_for_parity_range(ms, n),
            crate::geometry::Scheme::Copies { .. } => {
                self.keys_for_mirror_pieces(&self.mirror_pieces(layout, slot, ms, n)?)
            }
        })
    }

    /// Slots whose member's bad-block log lists part of `[ms, ms + n)`, with those ranges.
    pub(super) fn bad_slots_in(&self, ms: u64, n: u64) -> Vec<(usize, Vec<(u64, u64)>)> {
        if !self.has_bad.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let st = lock(&self.state);
        (0..self.geo.raid_disks)
            .filter_map(|slot| {
                let i = st.roster.slot_member[Slot(slot)]?;
                let hits: Vec<(u64, u64)> = st
                    .bad
                    .get(i)?
                    .iter()
                    .copied()
                    .filter(|&(b, len)| step::overlaps(b, len, ms, n))
                    .collect();
                (!hits.is_empty()).then_some((slot, hits))
            })
            .collect()
    }

    /// Reads every other readable member over `[ms, ms + n)` and computes what `slot` holds
    /// there into `bufs[slot]`. A member whose bad-block log lists part of the range is not
    /// read: what it holds there is not data (the partial parity log records parity it could
    /// not recompute that way, and it may still read without error).
    pub(crate) fn reconstruct_parity_range(
        &self,
        slot: usize,
        ms: u64,
        n: u64,
        bufs: &mut Vec<Vec<u8>>,
    ) -> Result<()> {
        let len = n as usize * SECTOR;
        fit_bufs(bufs, self.geo.raid_disks, len);
        let readable = self.read_retrying(bufs, |bufs| {
            let (states, members) = self.snapshot();
            self.check_failed()?;
            let listed: Vec<usize> = self.bad_slots_in(ms, n).into_iter().map(|b| b.0).collect();
            let readable = step::sources(&states, &[slot], &listed);
            let reads = slot_reads(&members, &readable, ms, bufs, len);
            Ok((readable, reads))
        })?;
        recon::parity_recover(&self.geo, ms, n, bufs, &readable).map_err(|e| {
            EngineError::ArrayFailed {
                detail: e.to_string(),
            }
        })
    }

    /// Fills `buf` (the pieces of a member range of `slot`) from live copies on other slots.
    pub(super) fn fill_from_other_copies(
        &self,
        slot: usize,
        pieces: &[MirrorPiece],
        buf: &mut [u8],
    ) -> Result<()> {
        self.read_retrying(buf, |buf| {
            let (states, members) = self.snapshot();
            self.check_failed()?;
            Ok((
                (),
                self.other_copy_reads(slot, pieces, &states, &members, buf)?,
            ))
        })
    }

    /// Reads filling `buf` (the pieces of a member range of `slot`) from a live copy on
    /// another slot each; a piece that holds no array data is zeroed instead.
    pub(super) fn other_copy_reads<'b>(
        &self,
        slot: usize,
        pieces: &[MirrorPiece],
        states: &[MemberState],
        members: &[Option<Arc<Member>>],
        buf: &'b mut [u8],
    ) -> Result<Vec<RangeIo<'b>>> {
        let mut reads = Vec::new();
        let mut rest: &mut [u8] = buf;
        for &(s, len, a) in pieces {
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len as usize * SECTOR);
            rest = tail;
            let Some(a) = a else {
                piece.fill(0);
                continue;
            };
            let (copies, _) = self.geo.copies(a);
            let can_read = |m: usize| members[m].is_some() && states[m].usable();
            let source = step::copy_source(&copies, slot, can_read)
                .and_then(|(m, member_sector)| Some((m, members[m].clone()?, member_sector)));
            let Some((m, member, member_sector)) = source else {
                return Err(EngineError::ArrayFailed {
                    detail: format!(
                        "no other live copy of array sector {a} (member sector {s} of slot {slot})"
                    ),
                });
            };
            reads.push(RangeIo::read(m, member, member_sector, piece));
        }
        Ok(reads)
    }
}
