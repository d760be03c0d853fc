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

mod replay;
use replay::*;

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
    /// Log writes issued so far, and (under its lock) how many of them a sync of the journal
    /// device has made durable: writers that come while a sync runs share the next one (group
    /// commit, as md's io units do).
    issued: std::sync::atomic::AtomicU64,
    synced: Mutex<u64>,
}

struct Ring {
    head: u64,
    seq: u64,
    tail: u64,
    /// Log writes not yet behind the checkpoint, oldest first; their sequence numbers follow
    /// on one from the next.
    units: VecDeque<Unit>,
    /// Those whose member writes are not done.
    pending: std::collections::BTreeSet<u64>,
    /// Set when a log write failed: the array takes no more writes.
    failed: Option<String>,
    /// The oldest log write holding data the write-back cache has not written to the members
    /// yet (`u64::MAX`: none): the checkpoint stays at or before it.
    floor: u64,
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
        for &seq in &self.seqs {
            if let Some(u) = st.unit_mut(seq) {
                u.done = true;
            }
            st.pending.remove(&seq);
        }
        drop(st);
        self.journal.finished.notify_all();
    }
}

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
                pending: Default::default(),
                failed: None,
                floor: u64::MAX,
            }),
            finished: Condvar::new(),
            io: Mutex::new(()),
            issued: std::sync::atomic::AtomicU64::new(0),
            synced: Mutex::new(0),
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

impl Ring {
    /// The log write numbered `seq`, if it is not behind the checkpoint.
    fn unit_mut(&mut self, seq: u64) -> Option<&mut Unit> {
        let first = self.units.front()?.seq;
        self.units.get_mut(seq.checked_sub(first)? as usize)
    }

    /// The oldest log write still needed: by member writes not done, or by the write-back
    /// cache (at its floor).
    fn needed(&self) -> Option<Unit> {
        let seq = self
            .pending
            .first()
            .copied()
            .unwrap_or(u64::MAX)
            .min(self.floor);
        let first = self.units.front()?.seq;
        self.units.get(seq.saturating_sub(first) as usize).copied()
    }
}

/// Sequence number for a new chain when the log holds none (md draws a random one).
fn fresh_seq() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::from((t.as_nanos() as u32) ^ std::process::id().rotate_left(16))
}

impl WriteLog for Journal {
    fn policy(&self) -> ConsistencyPolicy {
        ConsistencyPolicy::Journal
    }

    fn journal(&self) -> Option<&Journal> {
        Some(self)
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
        let chunks = self.encode_rows(rows.into_iter().collect(), parity_pages);
        let seqs = self.append(array, chunks, false)?;
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
    /// Encodes whole stripe rows (data pages, then the parity pages of each) into log
    /// writes: meta blocks of at most one 4 KiB block of descriptors each, with their pages in
    /// one buffer of the exact size.
    fn encode_rows(
        &self,
        rows: Vec<(u64, Row)>,
        parity_pages: usize,
    ) -> Vec<(Vec<Payload>, Vec<u8>)> {
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
                if parity_pages == 0 {
                    continue;
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
        chunks
    }

    /// Writes log writes (`chunks`: descriptors and their pages) at the head, one after
    /// another, and syncs the journal device. `done`: nothing waits on member writes of
    /// theirs (the write-back cache's data, which the floor keeps instead). Returns their
    /// sequence numbers.
    fn append(
        &self,
        array: &Array,
        chunks: Vec<(Vec<Payload>, Vec<u8>)>,
        done: bool,
    ) -> Result<Vec<u64>> {
        let _io = lock(&self.io);
        let total: u64 = chunks
            .iter()
            .map(|(_, pages)| PAGE_SECTORS + (pages.len() / PAGE) as u64 * PAGE_SECTORS)
            .sum();
        self.room(array, total)?;
        let mut seqs = Vec::with_capacity(chunks.len());
        for (payloads, pages) in chunks {
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
            // The meta block and its pages in one write (md's io unit): its checksums tell a
            // replay whether all of it arrived.
            let mut block = mb.encode(self.seed).map_err(super::meta_err)?;
            block.extend_from_slice(&pages);
            crate::buffers::keep_buffer(pages);
            if let Err(e) = self.ring_io(pos, &mut block, true) {
                return Err(self.failed(array, &e.to_string()));
            }
            let mut st = lock(&self.st);
            st.head = self.add(pos, span);
            st.seq = seq + 1;
            st.units.push_back(Unit {
                seq,
                start: pos,
                done,
            });
            if !done {
                st.pending.insert(seq);
            }
            seqs.push(seq);
        }
        let mine = self
            .issued
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        drop(_io);
        self.sync(array, mine)?;
        Ok(seqs)
    }

    /// Makes log writes up to number `mine` durable: one sync of the journal device covers
    /// every log write issued before it started.
    fn sync(&self, array: &Array, mine: u64) -> Result<()> {
        let mut synced = lock(&self.synced);
        if *synced >= mine {
            return Ok(());
        }
        let upto = self.issued.load(std::sync::atomic::Ordering::SeqCst);
        if let Err(e) = self.disk.disk.flush() {
            return Err(self.failed(array, &e.to_string()));
        }
        *synced = upto;
        Ok(())
    }

    /// Logs 4 KiB data pages alone, durably: `pages` are (array sector, bytes), in the order
    /// they are to be replayed. The write-back cache's log write (md's data-only stripes):
    /// their parity is logged when the cache writes them to the members. Returns the sequence
    /// number of the first log write.
    pub(super) fn log_data(&self, array: &Array, pages: &[(u64, &[u8])]) -> Result<u64> {
        let per_block = (PAGE - 32) / 20;
        let mut chunks = Vec::with_capacity(pages.len().div_ceil(per_block));
        for group in pages.chunks(per_block) {
            let mut buf = crate::buffers::take_buffer(group.len() * PAGE);
            let payloads = group
                .iter()
                .map(|(a, page)| {
                    buf.extend_from_slice(page);
                    Payload::Data {
                        flags: 0,
                        location: *a,
                        checksums: vec![page_checksum(self.seed, page)],
                    }
                })
                .collect();
            chunks.push((payloads, buf));
        }
        let seqs = self.append(array, chunks, true)?;
        Ok(seqs.first().copied().unwrap_or(0))
    }

    /// (sectors of the ring in use from the checkpoint to the head, sectors of the ring).
    pub(super) fn usage(&self) -> (u64, u64) {
        let st = lock(&self.st);
        (self.used(&st), self.ring)
    }

    /// (sectors from the oldest log write still needed, by a member write not done or by the
    /// write-back cache, to the head; sectors of the ring): what the checkpoint could not pass
    /// if it moved now.
    pub(super) fn pinned(&self) -> (u64, u64) {
        let st = lock(&self.st);
        let pinned = st
            .needed()
            .map_or(0, |u| (st.head + self.ring - u.start) % self.ring);
        (pinned, self.ring)
    }

    /// Sets the floor (see [`Ring::floor`]) and wakes whoever waits for room.
    pub(super) fn set_floor(&self, floor: u64) {
        lock(&self.st).floor = floor;
        self.finished.notify_all();
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
            // The new checkpoint: the oldest write not done or holding data the write-back
            // cache still has to write to the members, else the newest write.
            let floor = st.floor;
            let target = st.needed().or(st.units.back().copied());
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
                Some(u) if u.done && u.seq < floor => {
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
                    // The checkpoint is at the oldest write in flight, or at data the
                    // write-back cache is writing to the members: wait for it.
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
