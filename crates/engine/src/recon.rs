//! Whole-range work of the background tasks, sans-IO: what lost members of a parity level
//! should hold (rebuild), and whether parity agrees with data (check, repair, resync).
//!
//! Owns the arithmetic over *member ranges*: on RAID 4/5/6 every member holds chunk `k` of
//! stripe `k` at the same member sectors, so reading one member-sector range `[start, end)`
//! from every member gives whole stripes' bands side by side. The caller reads, this module
//! computes, the caller writes. Buffers are indexed by raid slot and cover the range exactly.
//!
//! Invariants: nothing here does I/O or allocates per byte; a stripe with more unreadable
//! members than the level tolerates is an error naming the stripe, never a guess; check
//! counts mismatches the way md's `mismatch_cnt` does (in 512-byte sectors, per 4 KiB page
//! of the stripe whose P or Q disagrees).

use crate::geometry::{Geo, Scheme};
use crate::plan::SECTOR;

/// md's stripe page: mismatches are counted per page of this many bytes.
pub const CHECK_PAGE_BYTES: usize = 4096;

/// Why a range cannot be reconstructed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReconError {
    /// More members of `stripe` are unreadable than the level can rebuild from.
    TooManyLost { stripe: u64, lost: Vec<usize> },
    /// The geometry has no parity (RAID 0/1/10 are copied, not computed).
    NotParity,
    /// The parity kernel refused the blocks (a bug: lengths and slots are ours).
    Arithmetic(String),
}

impl std::fmt::Display for ReconError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReconError::TooManyLost { stripe, lost } => write!(
                f,
                "stripe {stripe} has lost slots {lost:?}, more than its parity can rebuild"
            ),
            ReconError::NotParity => write!(f, "the level has no parity"),
            ReconError::Arithmetic(e) => write!(f, "parity arithmetic refused: {e}"),
        }
    }
}

/// One stripe's part of a member range: `[member_sector, member_sector + sectors)`, at byte
/// `offset` of every buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub stripe: u64,
    pub member_sector: u64,
    pub sectors: u64,
    pub offset: usize,
}

/// The stripes' segments of member range `[start, start + sectors)`.
pub fn segments(geo: &Geo, start: u64, sectors: u64) -> impl Iterator<Item = Segment> + '_ {
    let chunk = geo.chunk_sectors.max(1);
    let end = start + sectors;
    let mut s = start;
    std::iter::from_fn(move || {
        if s >= end {
            return None;
        }
        let stripe = s / chunk;
        let seg_end = end.min((stripe + 1) * chunk);
        let seg = Segment {
            stripe,
            member_sector: s,
            sectors: seg_end - s,
            offset: ((s - start) as usize) * SECTOR,
        };
        s = seg_end;
        Some(seg)
    })
}

fn max_degraded(geo: &Geo) -> Result<usize, ReconError> {
    match geo.scheme() {
        Scheme::Parity { max_degraded } => Ok(max_degraded as usize),
        Scheme::Copies { .. } => Err(ReconError::NotParity),
    }
}

/// Fills the buffers of every unreadable slot with what it should hold over member range
/// `[start, start + sectors)`, from the readable slots' buffers. `bufs[slot]` is
/// `sectors * 512` bytes for every slot; `readable[slot]` says which hold member contents.
pub fn parity_recover(
    geo: &Geo,
    start: u64,
    sectors: u64,
    bufs: &mut [Vec<u8>],
    readable: &[bool],
) -> Result<(), ReconError> {
    let max_degraded = max_degraded(geo)?;
    let lost_slots: Vec<usize> = (0..geo.raid_disks).filter(|&m| !readable[m]).collect();
    if lost_slots.is_empty() {
        return Ok(());
    }
    for seg in segments(geo, start, sectors) {
        if lost_slots.len() > max_degraded {
            return Err(ReconError::TooManyLost {
                stripe: seg.stripe,
                lost: lost_slots.clone(),
            });
        }
        let len = seg.sectors as usize * SECTOR;
        let info = geo.stripe(seg.stripe);
        let mut views: Vec<Option<&mut [u8]>> = bufs
            .iter_mut()
            .map(|b| Some(&mut b[seg.offset..seg.offset + len]))
            .collect();
        match info.q_member {
            None => {
                // RAID 4/5: the one lost block is the XOR of all the others.
                let lost = lost_slots[0];
                let Some(target) = views[lost].take() else {
                    continue;
                };
                let sources: Vec<&[u8]> = views.iter().flatten().map(|v| &**v).collect();
                raidkit_parity::gen_p(&sources, target).map_err(arithmetic(seg.stripe))?;
            }
            Some(q_member) => {
                // RAID 6: data in md's syndrome order, then P, then Q.
                let nslots = info.syndrome_slots.len();
                let mut blocks: Vec<&mut [u8]> = Vec::with_capacity(nslots + 2);
                let mut missing = Vec::with_capacity(2);
                for entry in &info.syndrome_slots {
                    match entry {
                        None => blocks.push(&mut []),
                        Some(dd) => {
                            let m = info.data_members[*dd];
                            if !readable[m] {
                                missing.push(blocks.len());
                            }
                            blocks.push(views[m].take().unwrap_or(&mut []));
                        }
                    }
                }
                for m in [info.p_member, q_member] {
                    if !readable[m] {
                        missing.push(blocks.len());
                    }
                    blocks.push(views[m].take().unwrap_or(&mut []));
                }
                raidkit_parity::recover(&mut blocks, &missing).map_err(arithmetic(seg.stripe))?;
            }
        }
    }
    Ok(())
}

/// A refusal of the parity kernel, which only happens when the buffers break the rules the
/// caller promised (one length for every slot): surfaced as an error naming the stripe.
fn arithmetic(stripe: u64) -> impl Fn(raidkit_parity::ParityError) -> ReconError {
    move |e| ReconError::Arithmetic(format!("stripe {stripe}: {e}"))
}

/// What a check of one range found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckOutcome {
    /// Sectors counted as md counts `mismatch_cnt`: 8 per 4 KiB page whose P or Q disagrees.
    pub mismatch_sectors: u64,
    /// Parity ranges that were recomputed into the buffers (when asked to repair): (slot,
    /// member sector, sectors, byte offset in the buffers).
    pub rewrite: Vec<(usize, u64, u64, usize)>,
}

/// Compares P (and Q) with the data over a member range whose every slot was read. With
/// `repair`, the correct parity replaces the wrong one in `bufs` and the ranges to write back
/// are listed. `scratch` is reused between calls.
pub fn parity_check(
    geo: &Geo,
    start: u64,
    sectors: u64,
    bufs: &mut [Vec<u8>],
    repair: bool,
    scratch: &mut (Vec<u8>, Vec<u8>),
) -> Result<CheckOutcome, ReconError> {
    max_degraded(geo)?;
    let mut out = CheckOutcome::default();
    for seg in segments(geo, start, sectors) {
        let len = seg.sectors as usize * SECTOR;
        let info = geo.stripe(seg.stripe);
        if scratch.0.len() < len {
            scratch.0.resize(len, 0);
            scratch.1.resize(len, 0);
        }
        let (p, q) = (&mut scratch.0[..len], &mut scratch.1[..len]);
        {
            let view = |m: usize| &bufs[m][seg.offset..seg.offset + len];
            match info.q_member {
                None => {
                    let data: Vec<&[u8]> = info.data_members.iter().map(|&m| view(m)).collect();
                    raidkit_parity::gen_p(&data, p).map_err(arithmetic(seg.stripe))?;
                }
                Some(_) => {
                    let data: Vec<&[u8]> = info
                        .syndrome_slots
                        .iter()
                        .map(|e| match e {
                            Some(dd) => view(info.data_members[*dd]),
                            None => &[][..],
                        })
                        .collect();
                    raidkit_parity::gen_syndrome(&data, p, q).map_err(arithmetic(seg.stripe))?;
                }
            }
        }
        let mut p_bad = false;
        let mut q_bad = false;
        let mut pages = 0u64;
        let mut page = 0;
        while page < len {
            let end = (page + CHECK_PAGE_BYTES).min(len);
            let pm = &bufs[info.p_member][seg.offset + page..seg.offset + end];
            let p_diff = pm != &p[page..end];
            let q_diff = info
                .q_member
                .is_some_and(|qm| bufs[qm][seg.offset + page..seg.offset + end] != q[page..end]);
            if p_diff || q_diff {
                pages += 1;
            }
            p_bad |= p_diff;
            q_bad |= q_diff;
            page = end;
        }
        out.mismatch_sectors += pages * (CHECK_PAGE_BYTES / SECTOR) as u64;
        if repair {
            if p_bad {
                bufs[info.p_member][seg.offset..seg.offset + len].copy_from_slice(p);
                out.rewrite
                    .push((info.p_member, seg.member_sector, seg.sectors, seg.offset));
            }
            if let (true, Some(qm)) = (q_bad, info.q_member) {
                bufs[qm][seg.offset..seg.offset + len].copy_from_slice(q);
                out.rewrite
                    .push((qm, seg.member_sector, seg.sectors, seg.offset));
            }
        }
    }
    Ok(out)
}

/// Sectors counted for a mirror range whose copies disagree: 8 per differing 4 KiB page.
pub fn copies_mismatch_sectors(a: &[u8], b: &[u8]) -> u64 {
    a.chunks(CHECK_PAGE_BYTES)
        .zip(b.chunks(CHECK_PAGE_BYTES))
        .filter(|(x, y)| x != y)
        .count() as u64
        * (CHECK_PAGE_BYTES / SECTOR) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(geo: &Geo, start: u64, sectors: u64, seed: u8) -> Vec<Vec<u8>> {
        // Data chunks get a pattern; parity computed per stripe with the same module.
        let len = sectors as usize * SECTOR;
        let mut bufs: Vec<Vec<u8>> = (0..geo.raid_disks)
            .map(|m| {
                (0..len)
                    .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed ^ m as u8))
                    .collect()
            })
            .collect();
        let mut scratch = (Vec::new(), Vec::new());
        parity_check(geo, start, sectors, &mut bufs, true, &mut scratch).unwrap();
        bufs
    }

    #[test]
    fn recover_rebuilds_every_pair_and_single() {
        for (level, layout, n) in [
            (5, 0, 4),
            (5, 2, 5),
            (4, 0, 4),
            (6, 2, 6),
            (6, 1, 5),
            (6, 9, 7),
        ] {
            let geo = Geo::new(level, layout, n, 16, 16 * 64).unwrap();
            let (start, sectors) = (8, 16 * 5 + 3);
            let good = fill(&geo, start, sectors, 7);
            let mut scratch = (Vec::new(), Vec::new());
            let mut again = good.clone();
            assert_eq!(
                parity_check(&geo, start, sectors, &mut again, false, &mut scratch)
                    .unwrap()
                    .mismatch_sectors,
                0
            );
            let Scheme::Parity { max_degraded: max } = geo.scheme() else {
                unreachable!("parity levels only")
            };
            for a in 0..n {
                for b in a..n {
                    if (a != b) && max < 2 {
                        continue;
                    }
                    let mut bufs = good.clone();
                    let mut readable = vec![true; n];
                    for &x in &[a, b] {
                        readable[x] = false;
                        bufs[x].iter_mut().for_each(|v| *v = 0xA5);
                    }
                    parity_recover(&geo, start, sectors, &mut bufs, &readable).unwrap();
                    assert_eq!(bufs, good, "level {level} layout {layout} lost {a},{b}");
                }
            }
        }
    }

    #[test]
    fn too_many_lost_is_an_error() {
        let geo = Geo::new(5, 2, 4, 16, 16 * 8).unwrap();
        let mut bufs = vec![vec![0u8; 16 * SECTOR]; 4];
        let r = parity_recover(&geo, 0, 16, &mut bufs, &[false, false, true, true]);
        assert!(matches!(r, Err(ReconError::TooManyLost { .. })));
    }

    #[test]
    fn check_counts_pages_and_repair_fixes_them() {
        let geo = Geo::new(6, 2, 6, 32, 32 * 16).unwrap();
        let good = fill(&geo, 0, 64, 3);
        let mut bad = good.clone();
        let info = geo.stripe(1);
        // one byte of Q in stripe 1's second page, and one of P in stripe 0's first page
        let qm = info.q_member.unwrap();
        bad[qm][32 * SECTOR + 4096 + 5] ^= 1;
        bad[geo.stripe(0).p_member][100] ^= 0x80;
        let mut scratch = (Vec::new(), Vec::new());
        let mut probe = bad.clone();
        let found = parity_check(&geo, 0, 64, &mut probe, false, &mut scratch).unwrap();
        assert_eq!(found.mismatch_sectors, 16);
        assert!(found.rewrite.is_empty());
        assert_eq!(probe, bad, "check alone changes nothing");
        let fixed = parity_check(&geo, 0, 64, &mut bad, true, &mut scratch).unwrap();
        assert_eq!(fixed.mismatch_sectors, 16);
        assert_eq!(fixed.rewrite.len(), 2);
        assert_eq!(bad, good);
    }

    #[test]
    fn data_corruption_is_counted_not_fixed_in_data() {
        // md's repair rewrites parity, never data: a flipped data byte is a mismatch, and the
        // repaired parity then agrees with the (wrong) data.
        let geo = Geo::new(5, 2, 4, 16, 16 * 8).unwrap();
        let good = fill(&geo, 0, 16, 9);
        let mut bad = good.clone();
        let dm = geo.stripe(0).data_members[0];
        bad[dm][7] ^= 0xff;
        let mut scratch = (Vec::new(), Vec::new());
        let r = parity_check(&geo, 0, 16, &mut bad, true, &mut scratch).unwrap();
        assert_eq!(r.mismatch_sectors, 8);
        assert_eq!(bad[dm][7], good[dm][7] ^ 0xff);
        let again = parity_check(&geo, 0, 16, &mut bad, false, &mut scratch).unwrap();
        assert_eq!(again.mismatch_sectors, 0);
    }

    #[test]
    fn mirror_pages_counted() {
        let a = vec![0u8; 3 * 4096];
        let mut b = a.clone();
        b[4096 + 1] = 1;
        assert_eq!(copies_mismatch_sectors(&a, &b), 8);
        assert_eq!(copies_mismatch_sectors(&a, &a), 0);
    }
}
