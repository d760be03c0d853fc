//! The partial parity log (md's PPL, `--consistency-policy=ppl`, RAID 5 only), sans-IO: what
//! a log write holds for a set of band writes, and how a logged entry recomputes its stripe's
//! parity after an unclean stop (drivers/md/raid5-ppl.c: `ppl_log_stripe`, `ppl_recover`,
//! `ppl_recover_entry`, `ppl_load_distributed`).
//!
//! Owns the meaning of an entry for our geometry. An entry names contiguous data indices
//! `dd..dd+k` of one stripe and the in-chunk rows `[lo, lo+n)` they are written over, exactly a
//! band of the core ([`crate::plan::Piece`]): `data_sector` is the array sector of `(dd, lo)`,
//! `data_size` is `k * n` sectors, `pp_size` is `n` sectors of *partial parity*, the XOR of the
//! stripe's data indices the write leaves alone over those rows (0 for a full-stripe write).
//! The log of a stripe lives on the member holding its parity.
//!
//! Invariant the driver keeps (see `array/ppl.rs`): before any data or parity of a band is
//! written, an entry for it is durable in the newest log write of its parity member, and a log
//! write replaces the previous one only after the members written under the previous one were
//! flushed, or names again every entry of the previous one (full-stripe entries only, which
//! carry no partial parity: md's chain of logs). So after a crash every stripe whose parity may disagree with its data is named in
//! the newest log of its parity member, and recomputing parity as partial parity XOR the
//! current modified data makes the stripe consistent again with the data the write did not
//! touch: that data then survives the loss of any member. Data the write was modifying reads
//! back per sector as it is on the surviving members (old or new). On a lost member it is
//! parity XOR the other data: where the lost member was the only one the entry modified in a
//! row, that is old or new per sector too; where another data member was modified with it
//! (any full-stripe write, and a partial-stripe write over several data members), it can be
//! neither, so the driver records those rows as bad blocks on the parity member
//! ([`EntryRecovery::lost_rows`]) and they read as errors. md skips such rows and returns the
//! mix.
//!
//! RAID 4 and RAID 6 have no partial parity log: md's PPL is RAID 5 only (`ppl_init_log`
//! refuses other levels). Their guard is md's write journal.
//!
//! Cost: every write phase first writes a log with FUA on each parity member it touches, and
//! the members a log covers are flushed before it is replaced, except along a chain of
//! whole-stripe logs; see docs/design.md for figures.
//!
//! Entries are parsed the way md parses them, including shapes md itself never writes, and
//! checked against the geometry: an entry that does not fit is refused (counted as a mismatch,
//! as md counts a bad checksum), never a panic.

use crate::geometry::Geo;
use crate::plan::{kernel_ok, BandWriteView, PlanKind, SECTOR};
use raidkit_metadata::ppl::{pp_checksum, PplEntry, PplHeader, PPL_HEADER_SECTORS};
use raidkit_metadata::ppl::{PPL_HDR_MAX_ENTRIES, PPL_HEADER_SIZE};

/// One parity member's log write being put together.
#[derive(Debug, Default)]
pub struct LogBuilder {
    entries: Vec<PplEntry>,
    pp: Vec<u8>,
}

/// A log write that does not fit the header or the area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFull {
    pub entries: usize,
    pub bytes: u64,
    pub area_bytes: u64,
}

impl LogBuilder {
    pub fn new() -> LogBuilder {
        LogBuilder::default()
    }

    /// Adds the entry of one band write. `user` is the request's buffer the band's new data
    /// lies in. Bands that write no parity need no entry and are skipped (returns false).
    pub fn add(&mut self, geo: &Geo, band: &BandWriteView<'_>, user: &[u8]) -> bool {
        if !band.parity_written || band.kind == PlanKind::Direct {
            return false;
        }
        let d = geo.data_disks() as u64;
        let chunk = geo.chunk_sectors;
        let k = (band.dd_last + 1 - band.dd_first) as u64;
        let len = band.sectors as usize * SECTOR;
        let full = k == d;
        let mut entry = PplEntry {
            data_sector: band.stripe * d * chunk + band.dd_first as u64 * chunk + band.lo,
            pp_size_bytes: 0,
            data_size_bytes: (k * band.sectors * SECTOR as u64) as u32,
            parity_disk: band.p_member as u32,
            checksum: 0,
        };
        if !full {
            // Partial parity = new parity XOR the new data of the modified indices, which is
            // the XOR of the indices left alone whatever plan computed the parity.
            let at = self.pp.len();
            if self.pp.capacity() == 0 {
                self.pp = crate::buffers::take_buffer(len);
            }
            self.pp.extend_from_slice(&band.new_p[..len]);
            let pp = &mut self.pp[at..];
            for dd in band.dd_first..=band.dd_last {
                let off = band.user_offset_bytes + (dd - band.dd_first) * band.chunk_bytes;
                kernel_ok(raidkit_parity::xor_into(pp, &[&user[off..off + len]]));
            }
            entry.pp_size_bytes = len as u32;
            entry.checksum = pp_checksum(pp);
        }
        self.entries.push(entry);
        true
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entries(&self) -> &[PplEntry] {
        &self.entries
    }

    /// Bytes of partial parity the entries hold.
    pub fn pp_len(&self) -> usize {
        self.pp.len()
    }

    /// Puts `carried` (full-stripe entries of earlier logs, with no partial parity) before
    /// the entries added so far, as md's replay takes them in order.
    pub fn carry(&mut self, carried: impl IntoIterator<Item = PplEntry>) {
        let before: Vec<PplEntry> = carried.into_iter().collect();
        debug_assert!(before.iter().all(|e| e.pp_size_bytes == 0));
        self.entries.splice(0..0, before);
    }

    /// The bytes to write at the start of the log area: the header, the partial parity, and
    /// (where the area has room) one zeroed header-sized block, so that md's scan of the area
    /// for later headers stops right after this one whatever was there before.
    pub fn finish(
        self,
        signature: u32,
        generation: u64,
        area_bytes: u64,
    ) -> Result<Vec<u8>, LogFull> {
        let used = (PPL_HEADER_SIZE + self.pp.len()) as u64;
        if self.entries.len() > PPL_HDR_MAX_ENTRIES || used > area_bytes {
            return Err(LogFull {
                entries: self.entries.len(),
                bytes: used,
                area_bytes,
            });
        }
        let header = PplHeader {
            signature,
            generation,
            entries: self.entries,
        };
        let encoded = header.encode().map_err(|_| LogFull {
            entries: header.entries.len(),
            bytes: used,
            area_bytes,
        })?;
        let tail = (area_bytes - used).min(PPL_HEADER_SIZE as u64) as usize;
        let mut out = crate::buffers::take_buffer(encoded.len() + self.pp.len() + tail);
        out.extend_from_slice(&encoded);
        out.extend_from_slice(&self.pp);
        out.resize(out.len() + tail, 0);
        crate::buffers::keep_buffer(self.pp);
        Ok(out)
    }
}

/// The newest valid header in a log area, as md finds it (`ppl_load_distributed`): headers
/// follow one another (each after its partial parity) for as long as they are valid and their
/// generation does not go down. Returns the header and its offset in sectors.
pub fn newest_header(area: &[u8], signature: u32) -> Option<(u64, PplHeader)> {
    let size_sectors = (area.len() / SECTOR) as u64;
    let mut best: Option<(u64, PplHeader)> = None;
    let mut offset = 0u64;
    while offset + PPL_HEADER_SECTORS <= size_sectors {
        let at = (offset as usize) * SECTOR;
        let Ok(h) = PplHeader::decode(&area[at..at + PPL_HEADER_SIZE], signature) else {
            break;
        };
        if best
            .as_ref()
            .is_some_and(|(_, b)| b.generation > h.generation)
        {
            break;
        }
        let next = offset.saturating_add(h.span_sectors());
        best = Some((offset, h));
        offset = next;
    }
    best
}

/// How to recompute the parity of one logged entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryRecovery {
    pub stripe: u64,
    /// Member sector (relative to the data offset) of row 0 on every member involved.
    pub member_sector: u64,
    /// Rows (sectors) whose parity the entry recomputes.
    pub rows: u64,
    pub parity_member: usize,
    /// Each modified data member with the number of rows (from row 0) it was written over.
    pub data: Vec<(usize, u64)>,
    /// Partial parity rows present (`pp_size > 0`); otherwise the data alone gives parity.
    pub has_pp: bool,
}

/// Parses `entry` of the log on slot `log_slot` the way `ppl_recover_entry` does, and checks
/// it against the geometry.
pub fn plan_entry(
    geo: &Geo,
    entry: &PplEntry,
    log_slot: usize,
) -> Result<EntryRecovery, &'static str> {
    let s = SECTOR as u64;
    let pp_size = u64::from(entry.pp_size_bytes);
    let data_size = u64::from(entry.data_size_bytes);
    if pp_size % s != 0 || data_size % s != 0 {
        return Err("sizes are not whole sectors");
    }
    let chunk = geo.chunk_sectors;
    let d = geo.data_disks() as u64;
    if chunk == 0 || d == 0 {
        return Err("not a parity level");
    }
    let (pp_sectors, data_sectors) = (pp_size / s, data_size / s);
    let first = entry.data_sector;
    let (data_disks, strip, last) = if pp_sectors < chunk {
        let (dd, strip) = if pp_sectors > 0 {
            (data_size / pp_size, pp_sectors)
        } else {
            (d, data_sectors / d)
        };
        if dd == 0 {
            return Err("no data member");
        }
        (dd, strip, first + (dd - 1) * chunk + strip)
    } else {
        (d, chunk, first.saturating_add(data_sectors))
    };
    if data_disks > d {
        return Err("more data members than the stripe has");
    }
    if first >= geo.array_sectors() {
        return Err("data_sector beyond the array");
    }
    let row_stripe = first / chunk / d;
    let off = first % chunk;
    let info = geo.stripe(row_stripe);
    if info.p_member != log_slot || entry.parity_disk as usize != log_slot {
        return Err("parity_disk is not the member holding the log and the stripe's parity");
    }
    let mut data = Vec::new();
    let mut rows = 0;
    for k in 0..data_disks {
        let base = first + k * chunk;
        let n = strip.min(last.saturating_sub(base));
        if n == 0 {
            continue;
        }
        if base / chunk / d != row_stripe || off + n > chunk {
            return Err("entry reaches outside its stripe");
        }
        let dd = ((base / chunk) % d) as usize;
        data.push((info.data_members[dd], n));
        rows = rows.max(n);
    }
    if pp_sectors > 0 && pp_sectors < rows {
        return Err("less partial parity than rows");
    }
    Ok(EntryRecovery {
        stripe: row_stripe,
        member_sector: info.member_sector_start + off,
        rows,
        parity_member: info.p_member,
        data,
        has_pp: pp_sectors > 0,
    })
}

impl EntryRecovery {
    /// Rows (from row 0) that cannot be recomputed: where a modified data member that is
    /// missing (`present[k]` false for `data[k]`) was written together with another data
    /// member. There parity and the other member may each hold old or new contents, so the
    /// missing member's sectors read back as neither. Where it was the only member written,
    /// parity alone holds old or new per sector and so does the missing member: md skips
    /// those rows and so does this. 0 when nothing is lost.
    pub fn lost_rows(&self, present: &[bool]) -> u64 {
        let mut lost = 0;
        for (k, &(_, n)) in self.data.iter().enumerate() {
            if present.get(k).copied().unwrap_or(true) {
                continue;
            }
            let others = self
                .data
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != k)
                .map(|(_, &(_, m))| m)
                .max()
                .unwrap_or(0);
            lost = lost.max(n.min(others));
        }
        lost
    }

    /// The new parity of the entry's rows: `data[k]` is the current contents of the k-th
    /// modified member over its rows (`None` when the member is missing), `pp` the logged
    /// partial parity. Rows that need a missing member are left alone (md skips them), so the
    /// result covers rows `first..self.rows`; `None` when no row can be recomputed.
    pub fn recompute(&self, data: &[Option<&[u8]>], pp: Option<&[u8]>) -> Option<(u64, Vec<u8>)> {
        let first = self
            .data
            .iter()
            .zip(data)
            .filter(|(_, b)| b.is_none())
            .map(|((_, n), _)| *n)
            .max()
            .unwrap_or(0);
        if first >= self.rows {
            return None;
        }
        let from = first as usize * SECTOR;
        let to = self.rows as usize * SECTOR;
        let mut out = vec![0u8; to - from];
        if self.has_pp {
            kernel_ok(raidkit_parity::xor_into(&mut out, &[&pp?[from..to]]));
        }
        for ((_, n), b) in self.data.iter().zip(data) {
            let end = (*n as usize * SECTOR).min(to);
            if end > from {
                kernel_ok(raidkit_parity::xor_into(
                    &mut out[..end - from],
                    &[&(*b)?[from..end]],
                ));
            }
        }
        Some((first, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{split, Dir, MemberState, PieceOp, Step, UserBuf};
    use raidkit_metadata::ppl::ppl_signature;

    /// Runs one write request through the core on an in-memory RAID 5 and returns each band's
    /// log entry with its partial parity, and the member images after the write.
    fn write_and_log(
        geo: &Geo,
        members: &mut [Vec<u8>],
        start: u64,
        data: &[u8],
    ) -> Vec<(PplEntry, Vec<u8>)> {
        let states = vec![MemberState::InSync; geo.raid_disks];
        let mut out = Vec::new();
        for p in split(geo, start, (data.len() / SECTOR) as u64, 64) {
            let mut op = PieceOp::new(geo, &p, Dir::Write, &states).unwrap();
            loop {
                match op.next(UserBuf::Write(data)) {
                    Step::Done => break,
                    Step::Io { dir, ios } => {
                        if dir == Dir::Write {
                            let mut b = LogBuilder::new();
                            assert!(b.add(geo, &op.band_write().unwrap(), data));
                            let e = b.entries()[0];
                            out.push((e, b.pp.clone()));
                        }
                        for io in ios {
                            let at = io.member_sector as usize * SECTOR;
                            let n = io.sectors as usize * SECTOR;
                            let buf: &mut [u8] = match io.buf {
                                crate::plan::BufRef::Scratch { index } => {
                                    &mut op.scratch_mut()[index][..n]
                                }
                                crate::plan::BufRef::User { offset_bytes } => {
                                    // Writes only: reads of a write plan go to scratch.
                                    assert_eq!(dir, Dir::Write);
                                    let m = &mut members[io.member][at..at + n];
                                    m.copy_from_slice(&data[offset_bytes..offset_bytes + n]);
                                    continue;
                                }
                            };
                            if dir == Dir::Read {
                                buf.copy_from_slice(&members[io.member][at..at + n]);
                            } else {
                                members[io.member][at..at + n].copy_from_slice(buf);
                            }
                        }
                    }
                }
            }
        }
        out
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn entries_recover_parity_for_every_shape_and_layout() {
        for layout in [0u32, 1, 2, 3, 4, 5] {
            for (n, chunk) in [(3usize, 16u64), (5, 16), (4, 8)] {
                let geo = Geo::new(5, layout, n, chunk, chunk * 6).unwrap();
                let bytes = geo.member_data_sectors as usize * SECTOR;
                let d = geo.data_disks() as u64;
                for (start, len) in [
                    (0u64, 1u64),
                    (3, 5),
                    (5, chunk),
                    (0, chunk * d),
                    (7, 2 * chunk),
                    (chunk * d + 1, chunk * d),
                ] {
                    // Old contents: a consistent array of pattern data.
                    let mut members: Vec<Vec<u8>> = vec![vec![0; bytes]; n];
                    let fill = pattern(geo.array_sectors() as usize * SECTOR, 9);
                    write_and_log(&geo, &mut members, 0, &fill);
                    let before = members.clone();
                    let new = pattern(len as usize * SECTOR, 200);
                    let logged = write_and_log(&geo, &mut members, start, &new);
                    // A crash left the new data in place but every parity block old: entries
                    // recompute it.
                    for (e, pp) in &logged {
                        let slot = e.parity_disk as usize;
                        let r = plan_entry(&geo, e, slot).unwrap();
                        let at = r.member_sector as usize * SECTOR;
                        let rows = r.rows as usize * SECTOR;
                        members[slot][at..at + rows].copy_from_slice(&before[slot][at..at + rows]);
                        let data: Vec<Vec<u8>> = r
                            .data
                            .iter()
                            .map(|&(m, k)| members[m][at..at + k as usize * SECTOR].to_vec())
                            .collect();
                        let refs: Vec<Option<&[u8]>> = data.iter().map(|b| Some(&b[..])).collect();
                        let (first, parity) = r.recompute(&refs, Some(pp)).unwrap();
                        assert_eq!(first, 0);
                        members[slot][at..at + rows].copy_from_slice(&parity);
                    }
                    // Every stripe is consistent again.
                    for stripe in 0..6 {
                        let info = geo.stripe(stripe);
                        let at = info.member_sector_start as usize * SECTOR;
                        let len = chunk as usize * SECTOR;
                        let mut x = members[info.p_member][at..at + len].to_vec();
                        for &m in &info.data_members {
                            raidkit_parity::xor_into(&mut x, &[&members[m][at..at + len]]).unwrap();
                        }
                        assert!(
                            x.iter().all(|&b| b == 0),
                            "layout {layout} n {n} start {start} len {len} stripe {stripe}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn entry_fields_are_mds() {
        // RAID 5, 4 members, chunk 8: one band over data indices 1..=2, rows 2..5 of stripe 1.
        let geo = Geo::new(5, 2, 4, 8, 64).unwrap();
        let mut members: Vec<Vec<u8>> = vec![vec![0; 64 * SECTOR]; 4];
        let start = 24 + 8 + 2; // stripe 1, data index 1, row 2
        let logged = write_and_log(
            &geo,
            &mut members,
            start,
            &pattern(8 * SECTOR + 3 * SECTOR, 1),
        );
        // Bands: rows 0..2 of index 2, rows 2..5 of indices 1..=2, rows 5..8 of index 1.
        assert_eq!(logged.len(), 3);
        let (e, _) = logged[1];
        assert_eq!(e.data_sector, start);
        assert_eq!(e.pp_size_bytes, 3 * 512);
        assert_eq!(e.data_size_bytes, 2 * 3 * 512);
        assert_eq!(e.parity_disk as usize, geo.stripe(1).p_member);
        // A full-stripe band carries no partial parity.
        let logged = write_and_log(&geo, &mut members, 0, &pattern(24 * SECTOR, 2));
        assert!(logged
            .iter()
            .all(|(e, pp)| e.pp_size_bytes == 0 && pp.is_empty() && e.checksum == 0));
        assert_eq!(logged[0].0.data_size_bytes, 24 * 512);
    }

    #[test]
    fn bad_entries_are_refused() {
        let geo = Geo::new(5, 2, 4, 8, 64).unwrap();
        let p0 = geo.stripe(0).p_member;
        let ok = PplEntry {
            data_sector: 2,
            pp_size_bytes: 1024,
            data_size_bytes: 1024,
            parity_disk: p0 as u32,
            checksum: 0,
        };
        assert!(plan_entry(&geo, &ok, p0).is_ok());
        let bad = [
            PplEntry {
                pp_size_bytes: 100,
                ..ok
            },
            PplEntry {
                parity_disk: (p0 as u32 + 1) % 4,
                ..ok
            },
            PplEntry {
                data_sector: 1 << 50,
                ..ok
            },
            PplEntry {
                data_sector: 7,
                ..ok
            },
            PplEntry {
                data_size_bytes: 1024 * 9,
                ..ok
            },
            PplEntry {
                pp_size_bytes: 512,
                data_size_bytes: 0,
                ..ok
            },
        ];
        for e in bad {
            assert!(plan_entry(&geo, &e, p0).is_err(), "{e:?}");
        }
        // Not this log's stripe.
        assert!(plan_entry(&geo, &ok, (p0 + 1) % 4).is_err());
    }

    #[test]
    fn arbitrary_entries_never_panic() {
        let geo = Geo::new(5, 2, 5, 16, 160).unwrap();
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..20000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let e = PplEntry {
                data_sector: x % 1000,
                pp_size_bytes: ((x >> 10) % 40) as u32 * 256,
                data_size_bytes: ((x >> 20) % 200) as u32 * 256,
                parity_disk: ((x >> 30) % 6) as u32,
                checksum: 0,
            };
            if let Ok(r) = plan_entry(&geo, &e, e.parity_disk as usize) {
                let bufs: Vec<Vec<u8>> = r
                    .data
                    .iter()
                    .map(|&(_, n)| vec![1; n as usize * SECTOR])
                    .collect();
                let refs: Vec<Option<&[u8]>> = bufs.iter().map(|b| Some(&b[..])).collect();
                let pp = vec![0u8; r.rows as usize * SECTOR];
                let _ = r.recompute(&refs, Some(&pp));
            }
        }
    }

    #[test]
    fn missing_members_leave_their_rows_alone() {
        let r = EntryRecovery {
            stripe: 0,
            member_sector: 0,
            rows: 4,
            parity_member: 3,
            data: vec![(0, 4), (1, 2)],
            has_pp: true,
        };
        let a = vec![1u8; 4 * SECTOR];
        let pp = vec![4u8; 4 * SECTOR];
        // Member 1 (rows 0..2) missing: rows 2..4 still come back from member 0 and pp.
        let (first, p) = r.recompute(&[Some(&a), None], Some(&pp)).unwrap();
        assert_eq!(first, 2);
        assert!(p.iter().all(|&b| b == 5));
        assert!(r
            .recompute(&[None, Some(&a[..2 * SECTOR])], Some(&pp))
            .is_none());
        let (first, p) = r
            .recompute(&[Some(&a), Some(&a[..2 * SECTOR])], Some(&pp))
            .unwrap();
        assert_eq!(first, 0);
        assert!(p[..2 * SECTOR].iter().all(|&b| b == 4) && p[2 * SECTOR..].iter().all(|&b| b == 5));
    }

    #[test]
    fn log_writes_and_the_scan_agree() {
        let sig = ppl_signature(&[3; 16]);
        let area = 64 * 1024u64;
        let mut b = LogBuilder::new();
        b.entries.push(PplEntry {
            data_sector: 0,
            pp_size_bytes: 1024,
            data_size_bytes: 1024,
            parity_disk: 0,
            checksum: pp_checksum(&[7; 1024]),
        });
        b.pp.extend_from_slice(&[7; 1024]);
        let bytes = b.finish(sig, 5, area).unwrap();
        assert_eq!(bytes.len(), 4096 + 1024 + 4096);
        let mut disk = vec![0u8; area as usize];
        // A stale, newer-looking header where md would look next is cut off by the zero block.
        let stale = PplHeader {
            signature: sig,
            generation: 99,
            entries: vec![],
        }
        .encode()
        .unwrap();
        disk[4096 + 1024..4096 + 1024 + 4096].copy_from_slice(&stale);
        disk[..bytes.len()].copy_from_slice(&bytes);
        let (off, h) = newest_header(&disk, sig).unwrap();
        assert_eq!((off, h.generation), (0, 5));
        // md's ring: two headers in a row, the later one newer.
        let mut ring = vec![0u8; area as usize];
        let h1 = PplHeader {
            signature: sig,
            generation: 7,
            entries: vec![],
        }
        .encode()
        .unwrap();
        let h2 = PplHeader {
            signature: sig,
            generation: 8,
            entries: vec![],
        }
        .encode()
        .unwrap();
        ring[..4096].copy_from_slice(&h1);
        ring[4096..8192].copy_from_slice(&h2);
        assert_eq!(newest_header(&ring, sig).unwrap().0, 8);
        // Older after newer: the scan stops at the newer.
        ring[..4096].copy_from_slice(&h2);
        ring[4096..8192].copy_from_slice(&h1);
        assert_eq!(newest_header(&ring, sig).unwrap().0, 0);
        assert!(newest_header(&vec![0u8; 8192], sig).is_none());
        // Too much for the area.
        let mut big = LogBuilder::new();
        big.pp = vec![0; area as usize];
        big.entries.push(PplEntry {
            data_sector: 0,
            pp_size_bytes: 0,
            data_size_bytes: 0,
            parity_disk: 0,
            checksum: 0,
        });
        assert!(big.finish(sig, 1, area).is_err());
    }
}
