//! md's write journal for RAID 4/5/6 (`--write-journal`, raid5-cache.c in write-through
//! mode): every write phase is first logged, data and parity of each 4 KiB stripe row, on a
//! separate journal device, and made durable there before any member is written. After a
//! crash the log is replayed onto the members, so a stripe is either wholly old or wholly new
//! whichever member is lost afterwards: the write hole is closed, also for RAID 4 and 6.
//!
//! Owns the ring on the journal device and its ordering:
//! 1. a log write (meta block, then its pages) goes at the head and is synced before the
//!    phase's member writes are issued;
//! 2. the checkpoint (`journal_tail` in the journal device's superblock) always points at a
//!    meta block of the current chain: the oldest log write whose member writes may not have
//!    completed, or else the newest one. Before it moves forward, the members are flushed, so
//!    everything behind it is durable on the members;
//! 3. at assembly the chain is read from the checkpoint while sequence numbers and positions
//!    follow on and every page checksum matches; the stripes found are written to the members,
//!    then an empty meta block with the sequence number raised by 10000 starts a new chain and
//!    the checkpoint moves there, as md's `r5l_recovery_log` does.

use super::write_log::{LogHold, LogStart, Phase, PhaseHold, WriteLog};
use super::{lock, Array, ConsistencyPolicy, EngineError, Member, MemberId, Result, Slot};
use crate::events::ArrayEvent;
use crate::geometry::{Geo, Scheme};
use crate::plan::step::{row_source, RowSource};
use crate::plan::{BufRef, Dir, MemberIo, MemberState, Piece, PieceKind, SECTOR};
use raidkit_metadata::journal::{
    page_checksum, uuid_checksum, MetaBlock, Payload, JOURNAL_BLOCK_BYTES, JOURNAL_BLOCK_SECTORS,
};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};

const PAGE: usize = JOURNAL_BLOCK_BYTES;

type DiskResult = std::result::Result<(), raidkit_disk::DiskError>;
const PAGE_SECTORS: u64 = JOURNAL_BLOCK_SECTORS;

/// The journal of an array.
pub(super) struct Journal {
    /// The journal device among the array's members.
    member: MemberId,
    disk: Arc<Member>,
    seed: u32,
    /// Sectors of the ring (the journal device's data area rounded down to 4 KiB).
    ring: u64,
    st: Mutex<Ring>,
    finished: Condvar,
    /// Serialises log writes.
    io: Mutex<()>,
}

struct Ring {
    head: u64,
    seq: u64,
    tail: u64,
    /// Log writes not yet behind the checkpoint, oldest first.
    units: VecDeque<Unit>,
    /// Set when a log write failed: the array takes no more writes.
    failed: Option<String>,
}

#[derive(Clone, Copy)]
struct Unit {
    seq: u64,
    start: u64,
    done: bool,
}

/// A log write held over a write phase, until its member writes are done: then (or when it is
/// dropped on an error) its log writes may go behind the checkpoint.
struct JournalHold<'a> {
    journal: &'a Journal,
    seqs: Vec<u64>,
}

impl PhaseHold for JournalHold<'_> {
    fn written(self: Box<Self>) {}
}

impl Drop for JournalHold<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.journal.st);
        for u in st.units.iter_mut() {
            if self.seqs.contains(&u.seq) {
                u.done = true;
            }
        }
        drop(st);
        self.journal.finished.notify_all();
    }
}

/// One 4 KiB stripe row of a log write: data pages by array sector, and parity pages.
#[derive(Default)]
struct Row {
    data: BTreeMap<u64, (usize, Vec<u8>)>,
    p: Option<Vec<u8>>,
    q: Option<Vec<u8>>,
}

/// What a replayed row writes: (slot, member sector, page).
type RowWrites = Vec<(usize, u64, Vec<u8>)>;

impl Journal {
    /// The journal on `disk` (the member at index `member`, its data area `data_sectors`
    /// long), with the checkpoint `tail` from its superblock. Nothing is read yet.
    pub(super) fn new(
        member: MemberId,
        disk: Arc<Member>,
        set_uuid: &[u8; 16],
        data_sectors: u64,
        tail: u64,
    ) -> Result<Journal> {
        let ring = data_sectors / PAGE_SECTORS * PAGE_SECTORS;
        if ring < 64 * PAGE_SECTORS {
            return Err(EngineError::Invalid(format!(
                "the write journal {} has {} KiB of log space; at least 256 KiB is needed",
                disk.disk.name(),
                ring / 2
            )));
        }
        Ok(Journal {
            member,
            disk,
            seed: uuid_checksum(set_uuid),
            ring,
            st: Mutex::new(Ring {
                head: 0,
                seq: 0,
                tail: if tail < ring && tail.is_multiple_of(PAGE_SECTORS) {
                    tail
                } else {
                    0
                },
                units: VecDeque::new(),
                failed: None,
            }),
            finished: Condvar::new(),
            io: Mutex::new(()),
        })
    }

    fn add(&self, pos: u64, sectors: u64) -> u64 {
        (pos + sectors) % self.ring
    }

    fn used(&self, st: &Ring) -> u64 {
        (st.head + self.ring - st.tail) % self.ring
    }

    /// Reads or writes `buf` at ring sector `pos`, wrapping at the end of the ring.
    fn ring_io(&self, pos: u64, buf: &mut [u8], write: bool) -> DiskResult {
        let mut done = 0usize;
        let mut pos = pos;
        while done < buf.len() {
            let room = ((self.ring - pos) * SECTOR as u64) as usize;
            let n = room.min(buf.len() - done);
            let at = self.disk.data_offset_bytes + pos * SECTOR as u64;
            if write {
                self.disk.disk.write_at(&buf[done..done + n], at)?;
            } else {
                self.disk.disk.read_at(&mut buf[done..done + n], at)?;
            }
            done += n;
            pos = self.add(pos, (n / SECTOR) as u64);
        }
        Ok(())
    }

    fn read_meta(&self, pos: u64) -> Option<MetaBlock> {
        let mut b = vec![0u8; PAGE];
        self.ring_io(pos, &mut b, false).ok()?;
        MetaBlock::decode(&b, self.seed).ok()
    }

    fn write_empty(&self, pos: u64, seq: u64) -> DiskResult {
        let mb = MetaBlock {
            seq,
            position: pos,
            payloads: Vec::new(),
        };
        let mut b = mb.encode(self.seed).map_err(|e| {
            raidkit_disk::DiskError::io(
                self.disk.disk.name(),
                "write",
                pos * SECTOR as u64,
                std::io::Error::other(e.to_string()),
            )
        })?;
        self.ring_io(pos, &mut b, true)?;
        self.disk.disk.flush()
    }
}

/// Sequence number for a new chain when the log holds none (md draws a random one).
fn fresh_seq() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::from((t.as_nanos() as u32) ^ std::process::id().rotate_left(16))
}

impl Array {
    /// Where array sector `a` of a parity level lives: (slot, member sector).
    fn data_place(&self, a: u64) -> (usize, u64) {
        let chunk = self.geo.chunk_sectors;
        let width = chunk * self.geo.data_disks() as u64;
        let stripe = a / width;
        let within = a % width;
        let info = self.geo.stripe(stripe);
        (
            info.data_members[(within / chunk) as usize],
            stripe * chunk + within % chunk,
        )
    }

    /// The rows of one log write that carry parity, as member writes.
    fn rows_of(&self, mb: &MetaBlock, data: &[u8]) -> Vec<RowWrites> {
        let chunk = self.geo.chunk_sectors;
        let mut rows: BTreeMap<u64, (RowWrites, bool)> = BTreeMap::new();
        let mut page = 0usize;
        for p in &mb.payloads {
            match p {
                Payload::Data {
                    location,
                    checksums,
                    ..
                } => {
                    for i in 0..checksums.len() {
                        let a = location + i as u64 * PAGE_SECTORS;
                        let bytes = data[page * PAGE..(page + 1) * PAGE].to_vec();
                        page += 1;
                        if a + PAGE_SECTORS > self.geo.array_sectors() {
                            continue;
                        }
                        let (slot, ms) = self.data_place(a);
                        rows.entry(ms).or_default().0.push((slot, ms, bytes));
                    }
                }
                Payload::Parity {
                    location,
                    checksums,
                    ..
                } => {
                    let info = self.geo.stripe(location / chunk);
                    let slots = [Some(info.p_member), info.q_member];
                    for (i, slot) in slots.iter().enumerate().take(checksums.len()) {
                        let bytes = data[page * PAGE..(page + 1) * PAGE].to_vec();
                        page += 1;
                        if let Some(s) = slot {
                            let row = rows.entry(*location).or_default();
                            row.0.push((*s, *location, bytes));
                            row.1 = true;
                        } else {
                            let _ = i;
                        }
                    }
                }
                Payload::Flush { .. } => {}
            }
        }
        // Rows with parity are whole. (md skips rows with parity alone, which its write-back
        // mode leaves once the data is on the members; in write-through mode a row always
        // carries its data, also that of a missing member, and raidkit writes it so too.)
        rows.into_values()
            .filter(|(_, parity)| *parity)
            .map(|(w, _)| w)
            .collect()
    }

    /// Fills the missing parity pages of `row` (stripe row at member sector `ms`) from its new
    /// data and the current data of the members it does not write.
    fn complete_parity(
        &self,
        ms: u64,
        row: &mut Row,
        states: &[MemberState],
        members: &[Option<Arc<Member>>],
    ) -> Result<()> {
        let chunk = self.geo.chunk_sectors;
        let stripe = ms / chunk;
        let info = self.geo.stripe(stripe);
        let n = self.geo.raid_disks;
        let mut bufs: Vec<Vec<u8>> = vec![vec![0u8; PAGE]; n];
        let mut readable = vec![true; n];
        for (dd, &slot) in info.data_members.iter().enumerate() {
            let a = (stripe * self.geo.data_disks() as u64 + dd as u64) * chunk + ms % chunk;
            let logged = row.data.get(&a);
            let mut source = row_source(
                logged.is_some(),
                states[slot],
                members[slot].is_some(),
                false,
            );
            if let (RowSource::Member, Some(m)) = (source, &members[slot]) {
                let at = m.data_offset_bytes + ms * SECTOR as u64;
                let failed = m.disk.read_at(&mut bufs[slot], at).is_err();
                source = row_source(false, states[slot], true, failed);
            }
            match (source, logged) {
                (RowSource::Logged, Some((_, page))) => bufs[slot].copy_from_slice(page),
                (RowSource::Rebuild, _) => {
                    let mut rebuilt = Vec::new();
                    self.reconstruct_parity_range(slot, ms, PAGE_SECTORS, &mut rebuilt)?;
                    bufs[slot].copy_from_slice(&rebuilt[slot][..PAGE]);
                }
                _ => {}
            }
        }
        match &row.p {
            Some(p) => bufs[info.p_member].copy_from_slice(p),
            None => readable[info.p_member] = false,
        }
        if let Some(q) = info.q_member {
            match &row.q {
                Some(page) => bufs[q].copy_from_slice(page),
                None => readable[q] = false,
            }
        }
        crate::recon::parity_recover(&self.geo, ms, PAGE_SECTORS, &mut bufs, &readable).map_err(
            |e| EngineError::ArrayFailed {
                detail: format!("write journal: parity of row {ms}: {e}"),
            },
        )?;
        if row.p.is_none() {
            row.p = Some(std::mem::take(&mut bufs[info.p_member]));
        }
        if let (Some(q), None) = (info.q_member, &row.q) {
            row.q = Some(std::mem::take(&mut bufs[q]));
        }
        Ok(())
    }
}

impl WriteLog for Journal {
    fn policy(&self) -> ConsistencyPolicy {
        ConsistencyPolicy::Journal
    }

    /// One band's rows (data and parity of every member) must fit a quarter of the journal,
    /// the most one write phase may log.
    fn max_band_sectors(&self, geo: &Geo) -> u64 {
        (self.ring / 4 / geo.raid_disks as u64).saturating_sub(16) / 8 * 8
    }

    /// Every write piece goes to the one journal device: its rows, data and parity of every
    /// member, with room for a page of each on either side.
    fn piece_cost(&self, geo: &Geo, piece: &Piece) -> Option<(usize, u64)> {
        let sectors = match &piece.kind {
            PieceKind::Band { sectors, .. } => (sectors + 2 * PAGE_SECTORS) * geo.raid_disks as u64,
            PieceKind::Copies { .. } => 0,
        };
        Some((0, sectors * SECTOR as u64))
    }

    /// Whether a phase's pieces, with a meta page each, fit a quarter of the journal.
    fn fits(&self, entries: usize, bytes: u64) -> bool {
        bytes / SECTOR as u64 + PAGE_SECTORS * entries as u64 <= self.ring / 4
    }

    /// Before a write phase: logs what the phase writes (`ios` of `ops`, from the caller's
    /// buffer or the ops' scratch) as stripe rows, durably. Returns the log write, held until
    /// the phase's member writes complete.
    fn log_phase<'a>(&'a self, array: &Array, phase: Phase<'_>) -> Result<Option<LogHold<'a>>> {
        let (ops, ios, user) = (phase.ops, phase.ios, phase.user);
        // The journal fails no member: the phase's states stand.
        let (states, members) = (&*phase.states, &*phase.members);
        let chunk = array.geo.chunk_sectors;
        let mut rows: BTreeMap<u64, Row> = BTreeMap::new();
        // The phase's member writes, and the new data of members that cannot be written
        // (the rest of a partial page of theirs is reconstructed below).
        let mut extra: Vec<(usize, MemberIo)> = Vec::new();
        let mut writing: Vec<usize> = ios
            .iter()
            .filter(|(_, io)| io.dir == Dir::Write)
            .map(|(k, _)| *k)
            .collect();
        writing.dedup();
        for &k in &writing {
            for (m, ms, off, bytes) in ops[k].unwritten_data() {
                extra.push((
                    k,
                    MemberIo {
                        member: m,
                        dir: Dir::Write,
                        member_sector: ms,
                        sectors: (bytes / SECTOR) as u64,
                        buf: BufRef::User { offset_bytes: off },
                    },
                ));
            }
        }
        for (k, io) in ios
            .iter()
            .chain(extra.iter())
            .filter(|(_, io)| io.dir == Dir::Write)
        {
            let len = io.sectors as usize * SECTOR;
            let src: &[u8] = match io.buf {
                BufRef::User { offset_bytes } => &user[offset_bytes..offset_bytes + len],
                BufRef::Scratch { index } => &ops[*k].scratch_mut()[index][..len],
            };
            let end = io.member_sector + io.sectors;
            let mut s = io.member_sector / PAGE_SECTORS * PAGE_SECTORS;
            let mut stripe_info = None;
            while s < end {
                let lo = s.max(io.member_sector);
                let hi = (s + PAGE_SECTORS).min(end);
                let stripe = s / chunk;
                // An I/O stays within one chunk: one stripe lookup per I/O, not per page.
                if stripe_info.as_ref().is_none_or(|(n, _)| *n != stripe) {
                    stripe_info = Some((stripe, array.geo.stripe(stripe)));
                }
                let info = &stripe_info.as_ref().expect("just set").1;
                let row = rows.entry(s).or_default();
                let page: &mut Vec<u8> = if io.member == info.p_member {
                    row.p.get_or_insert_with(Vec::new)
                } else if Some(io.member) == info.q_member {
                    row.q.get_or_insert_with(Vec::new)
                } else {
                    let dd = info
                        .data_members
                        .iter()
                        .position(|&m| m == io.member)
                        .unwrap_or(0);
                    let a =
                        (stripe * array.geo.data_disks() as u64 + dd as u64) * chunk + s % chunk;
                    &mut row.data.entry(a).or_insert((io.member, Vec::new())).1
                };
                if page.is_empty() {
                    *page = vec![0u8; PAGE];
                    if lo > s || hi < s + PAGE_SECTORS {
                        // A partial page: the rest is what the member holds now (the stripe
                        // is locked, so nothing else changes it), or what redundancy says it
                        // holds where the member cannot read it.
                        // A member being rebuilt may not hold its page yet: reconstruct it.
                        // Nor does one that failed a write of an earlier phase of the batch
                        // (the rest of its page may be what that write lost): `states` are
                        // taken again after such a phase, so it is not in sync here.
                        let read = states[io.member] == MemberState::InSync
                            && members[io.member].as_ref().is_some_and(|m| {
                                let at = m.data_offset_bytes + s * SECTOR as u64;
                                m.disk.read_at(page, at).is_ok()
                            });
                        if !read {
                            let mut bufs = Vec::new();
                            array.reconstruct_parity_range(
                                io.member,
                                s,
                                PAGE_SECTORS,
                                &mut bufs,
                            )?;
                            page.copy_from_slice(&bufs[io.member][..PAGE]);
                        }
                    }
                }
                let from = ((lo - io.member_sector) as usize) * SECTOR;
                let to = ((hi - io.member_sector) as usize) * SECTOR;
                let off = ((lo - s) as usize) * SECTOR;
                page[off..off + (to - from)].copy_from_slice(&src[from..to]);
                s += PAGE_SECTORS;
            }
        }
        if rows.is_empty() {
            return Ok(None);
        }
        // Meta blocks of at most one 4 KiB block of descriptors each, all in one log write
        // per block.
        let parity_pages = match array.geo.scheme() {
            Scheme::Parity { max_degraded } => max_degraded as usize,
            Scheme::Copies { .. } => 0,
        };
        // A parity member that cannot be written gets no page from the phase; md logs its
        // page anyway, and a replay must never write a made-up page to whatever member holds
        // the slot by then. So compute it from the row as it will be.
        for (&ms, row) in rows.iter_mut() {
            if row.p.is_none() || (parity_pages == 2 && row.q.is_none()) {
                array.complete_parity(ms, row, states, members)?;
            }
        }
        // Split the rows over meta blocks (each holds at most 4 KiB of descriptors), then
        // fill each block's pages into one buffer of the exact size.
        let rows: Vec<(u64, Row)> = rows.into_iter().collect();
        let mut bounds: Vec<(usize, usize, usize)> = Vec::new(); // (first row, end, pages)
        let (mut first, mut meta, mut pages) = (0usize, 32usize, 0usize);
        for (i, (_, row)) in rows.iter().enumerate() {
            let need = row.data.len() * 20 + 16 + 4 * parity_pages;
            if meta + need > PAGE && i > first {
                bounds.push((first, i, pages));
                (first, meta, pages) = (i, 32, 0);
            }
            meta += need;
            pages += row.data.len() + parity_pages;
        }
        bounds.push((first, rows.len(), pages));
        let mut rows = rows.into_iter();
        let mut chunks: Vec<(Vec<Payload>, Vec<u8>)> = Vec::with_capacity(bounds.len());
        for (from, to, count) in bounds {
            let mut payloads = Vec::with_capacity((to - from) * 4);
            let mut buf = crate::buffers::take_buffer(count * PAGE);
            for (ms, row) in rows.by_ref().take(to - from) {
                for (a, (_, page)) in row.data {
                    payloads.push(Payload::Data {
                        flags: 0,
                        location: a,
                        checksums: vec![page_checksum(self.seed, &page)],
                    });
                    buf.extend_from_slice(&page);
                }
                let mut sums = Vec::with_capacity(parity_pages);
                for page in [row.p, row.q].into_iter().take(parity_pages) {
                    let at = buf.len();
                    match page {
                        Some(p) => buf.extend_from_slice(&p),
                        None => buf.resize(at + PAGE, 0),
                    }
                    sums.push(page_checksum(self.seed, &buf[at..]));
                }
                payloads.push(Payload::Parity {
                    flags: 0,
                    location: ms,
                    checksums: sums,
                });
            }
            chunks.push((payloads, buf));
        }
        let _io = lock(&self.io);
        let total: u64 = chunks
            .iter()
            .map(|(_, pages)| PAGE_SECTORS + (pages.len() / PAGE) as u64 * PAGE_SECTORS)
            .sum();
        self.room(array, total)?;
        let mut seqs = Vec::with_capacity(chunks.len());
        for (payloads, mut pages) in chunks {
            let span = PAGE_SECTORS + (pages.len() / PAGE) as u64 * PAGE_SECTORS;
            let (pos, seq) = {
                let st = lock(&self.st);
                if let Some(why) = &st.failed {
                    return Err(EngineError::ArrayFailed {
                        detail: format!("the write journal failed: {why}"),
                    });
                }
                (st.head, st.seq)
            };
            let mb = MetaBlock {
                seq,
                position: pos,
                payloads,
            };
            let mut block = mb.encode(self.seed).map_err(super::meta_err)?;
            let r = self
                .ring_io(self.add(pos, PAGE_SECTORS), &mut pages, true)
                .and_then(|_| self.ring_io(pos, &mut block, true));
            if let Err(e) = r {
                return Err(self.failed(array, &e.to_string()));
            }
            crate::buffers::keep_buffer(pages);
            let mut st = lock(&self.st);
            st.head = self.add(pos, span);
            st.seq = seq + 1;
            st.units.push_back(Unit {
                seq,
                start: pos,
                done: false,
            });
            seqs.push(seq);
        }
        if let Err(e) = self.disk.disk.flush() {
            return Err(self.failed(array, &e.to_string()));
        }
        Ok(Some(Box::new(JournalHold {
            journal: self,
            seqs,
        })))
    }

    /// The journal device failed: the array takes no more writes (md's
    /// `r5l_log_disk_error`), as nothing could close the write hole any more.
    fn device_failed(&self, array: &Array, _device: usize, why: &str) -> Result<()> {
        Err(self.failed(array, why))
    }

    /// Reads the log from the checkpoint and writes every complete stripe row it holds to
    /// the members, then starts a new chain (see the module comment). The journal leaves
    /// every stripe consistent: no resync is needed after a crash.
    fn start(&self, array: &Array, how: LogStart, events: &mut Vec<ArrayEvent>) -> Result<bool> {
        let rows_replayed = self.replay(array, events)?;
        // The journal keeps the array clean (`keeps_array_clean`): recorded not in sync, it
        // is a resync not finished (a background initialisation's), which replay does not
        // make up for.
        if let LogStart::Assembled {
            dirty: true,
            resync_offset,
        } = how
        {
            events.push(ArrayEvent::JournalMadeConsistent { rows_replayed });
            return Ok(resync_offset == u64::MAX);
        }
        Ok(true)
    }

    fn keeps_array_clean(&self) -> bool {
        true
    }

    /// At a clean stop (members already flushed): a new chain with nothing in it starts at
    /// the head and the checkpoint moves there, so the next start has nothing to replay.
    fn stop(&self, array: &Array) -> Result<()> {
        if array.read_only {
            return Ok(());
        }
        let _io = lock(&self.io);
        let (pos, seq) = {
            let st = lock(&self.st);
            if st.failed.is_some() {
                return Ok(());
            }
            (st.head, st.seq)
        };
        if let Err(e) = self.write_empty(pos, seq) {
            return Err(self.failed(array, &e.to_string()));
        }
        self.set_tail(array, pos)?;
        let mut st = lock(&self.st);
        st.tail = pos;
        st.head = self.add(pos, PAGE_SECTORS);
        st.seq = seq + 1;
        st.units.clear();
        Ok(())
    }
}

impl Journal {
    /// At assembly: reads the log from the checkpoint and writes every complete stripe row
    /// it holds to the members, then starts a new chain (see the module comment). Returns
    /// the number of rows replayed.
    fn replay(&self, array: &Array, events: &mut Vec<ArrayEvent>) -> Result<usize> {
        let tail = lock(&self.st).tail;
        let name = self.disk.disk.name().to_string();
        let Some(first) = self.read_meta(tail).filter(|m| m.position == tail) else {
            // No chain (a new journal, or one md never wrote): start one at 0.
            let seq = fresh_seq();
            if !array.read_only {
                self.write_empty(0, seq)?;
                self.set_tail(array, 0)?;
            }
            let mut st = lock(&self.st);
            st.tail = 0;
            st.head = PAGE_SECTORS;
            st.seq = seq + 1;
            events.push(ArrayEvent::JournalStartedEmpty { member: name });
            return Ok(0);
        };
        // Walk the chain.
        let mut pos = tail;
        let mut seq = first.seq;
        let mut units: Vec<(MetaBlock, Vec<u8>)> = Vec::new();
        let mut scanned = 0u64;
        while let Some(mb) = self.read_meta(pos) {
            if mb.seq != seq || mb.position != pos {
                break;
            }
            let pages = mb.pages();
            let span = PAGE_SECTORS * (1 + pages);
            if scanned + span > self.ring {
                break;
            }
            let mut data = vec![0u8; pages as usize * PAGE];
            if self
                .ring_io(self.add(pos, PAGE_SECTORS), &mut data, false)
                .is_err()
            {
                break;
            }
            let mut ok = true;
            let mut page = 0usize;
            for p in &mb.payloads {
                if let Payload::Data { checksums, .. } | Payload::Parity { checksums, .. } = p {
                    for c in checksums {
                        let b = &data[page * PAGE..(page + 1) * PAGE];
                        if page_checksum(self.seed, b) != *c {
                            ok = false;
                        }
                        page += 1;
                    }
                }
            }
            if !ok {
                // md: a log write whose pages do not all match is where the log ends.
                break;
            }
            scanned += span;
            pos = self.add(pos, span);
            seq += 1;
            units.push((mb, data));
        }
        // Replay, oldest first, rows that carry their parity (write-through never writes a
        // member before the row's parity is in the log, so a row without it was never
        // written to the members).
        let mut replayed = 0usize;
        let (states, members) = array.snapshot();
        let replacements: Vec<Option<Arc<Member>>> = {
            let st = lock(&array.state);
            st.roster
                .replacement
                .iter()
                .map(|r| r.and_then(|i| st.members[i].clone()))
                .collect()
        };
        for (mb, data) in &units {
            for writes in array.rows_of(mb, data) {
                replayed += 1;
                if array.read_only {
                    continue;
                }
                for (slot, ms, page) in writes {
                    let targets = [
                        members[slot]
                            .clone()
                            .filter(|_| states[slot] != MemberState::Missing),
                        replacements.get(slot).cloned().flatten(),
                    ];
                    for m in targets.into_iter().flatten() {
                        let at = m.data_offset_bytes + ms * SECTOR as u64;
                        if let Err(e) = m.disk.write_at(&page, at) {
                            array.member_failed(Slot(slot), &format!("journal replay: {e}"));
                        }
                    }
                }
            }
        }
        let next_seq = seq + 10_000;
        if !array.read_only {
            if replayed > 0 {
                array.flush()?;
            }
            self.write_empty(pos, next_seq)?;
            self.set_tail(array, pos)?;
        }
        let mut st = lock(&self.st);
        st.tail = pos;
        st.head = self.add(pos, PAGE_SECTORS);
        st.seq = next_seq + 1;
        drop(st);
        let log_writes = units
            .iter()
            .filter(|(mb, _)| !mb.payloads.is_empty())
            .count();
        events.push(if log_writes == 0 {
            ArrayEvent::JournalClean { member: name }
        } else {
            ArrayEvent::JournalReplayed {
                member: name,
                log_writes,
                rows_replayed: replayed,
            }
        });
        Ok(replayed)
    }

    /// Writes `tail` into the journal device's superblock (md's `r5l_write_super`).
    fn set_tail(&self, array: &Array, tail: u64) -> Result<()> {
        let _g = lock(&array.sb_lock);
        let mut st = lock(&array.state);
        st.roster.sbs[self.member].recovery_offset_sectors = tail;
        let sb = st.roster.sbs[self.member].clone();
        drop(st);
        crate::meta::write_superblock(self.disk.disk.as_ref(), &sb, array.version)?;
        self.disk.disk.flush()?;
        Ok(())
    }

    /// A log write failed (`why`): the array takes no more writes.
    fn failed(&self, array: &Array, why: &str) -> EngineError {
        let why = format!("{}: {why}", self.disk.disk.name());
        lock(&self.st).failed = Some(why.clone());
        lock(&array.state).events.push(ArrayEvent::ArrayFailed {
            detail: format!("write journal failed ({why}); the array takes no more writes"),
        });
        EngineError::ArrayFailed {
            detail: format!("the write journal failed: {why}"),
        }
    }

    /// Makes room for `span` sectors at the head: moves the checkpoint past log writes whose
    /// member writes are done, flushing the members first; waits for writes in flight when
    /// nothing can move yet.
    fn room(&self, array: &Array, span: u64) -> Result<()> {
        if span + PAGE_SECTORS >= self.ring {
            return Err(EngineError::Invalid(format!(
                "a log write of {} KiB does not fit the {} KiB write journal",
                span / 2,
                self.ring / 2
            )));
        }
        loop {
            let mut st = lock(&self.st);
            if self.ring > self.used(&st) + span {
                return Ok(());
            }
            // The new checkpoint: the oldest write not done, else the newest write.
            let target = st
                .units
                .iter()
                .find(|u| !u.done)
                .or(st.units.back())
                .copied();
            match target {
                Some(u) if u.start != st.tail => {
                    drop(st);
                    array.flush()?;
                    self.set_tail(array, u.start)?;
                    let mut st = lock(&self.st);
                    st.tail = u.start;
                    while st.units.front().is_some_and(|f| f.seq < u.seq) {
                        st.units.pop_front();
                    }
                }
                Some(u) if u.done => {
                    // Everything is done and the checkpoint is at the newest write: start
                    // the chain anew at the head with an empty meta block, then move there.
                    let (pos, seq) = (st.head, st.seq);
                    drop(st);
                    if let Err(e) = self.write_empty(pos, seq) {
                        return Err(self.failed(array, &e.to_string()));
                    }
                    array.flush()?;
                    self.set_tail(array, pos)?;
                    let mut st = lock(&self.st);
                    st.tail = pos;
                    st.head = self.add(pos, PAGE_SECTORS);
                    st.seq = seq + 1;
                    st.units.clear();
                    st.units.push_back(Unit {
                        seq,
                        start: pos,
                        done: true,
                    });
                }
                Some(_) => {
                    // The checkpoint is at the oldest write in flight: wait for it.
                    st = self
                        .finished
                        .wait_timeout(st, std::time::Duration::from_millis(50))
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0);
                    drop(st);
                }
                None => {
                    return Err(EngineError::Invalid(
                        "the write journal is full with nothing to reclaim".into(),
                    ))
                }
            }
        }
    }
}
