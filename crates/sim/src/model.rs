//! The flat reference model of the logical device: for every array sector, which contents a
//! read may return now, and which may be there after a crash.
//!
//! Contents are named by write ids: id 0 is all zeroes (the initial state, trim and
//! write-zeroes); any other id is the write's pattern, which also encodes the id and the array
//! sector ([`sector_pattern`]), so a misplaced sector is caught as well as a stale one.
//!
//! Rules (the durability contract): an acknowledged write is the only acceptable content until
//! overwritten; a write that failed may or may not have landed (old or new, per sector); after
//! a crash a sector holds its content as of the last completed flush or any write made since
//! (all candidates are kept, as a write-back cache may persist any of them); a completed flush
//! (or an acknowledged FUA write, for its own sectors) makes the current content the only one
//! a crash may leave.

use crate::rng::mix;

/// Bytes of one sector.
pub const SECTOR: usize = 512;

/// The "write id" of a sector that was never written on an array initialised in the
/// background over old data: any content is right there (md's initial resync makes parity
/// and copies agree with whatever the members held, it does not define the data).
pub const UNDEFINED: u32 = u32::MAX;

/// The contents write `id` puts at `array_sector`.
pub fn sector_pattern(id: u32, array_sector: u64, out: &mut [u8]) {
    if id == 0 {
        out.fill(0);
        return;
    }
    out[..4].copy_from_slice(&id.to_le_bytes());
    out[4..12].copy_from_slice(&array_sector.to_le_bytes());
    let mut h = mix(id as u64, array_sector);
    for c in out[12..].chunks_mut(8) {
        h = mix(h, 0x5bd1_e995);
        let b = h.to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
}

#[derive(Clone, Debug)]
struct Cell {
    now: Vec<u32>,
    crash: Vec<u32>,
    /// Written since the last flush (by a write not made durable on its own by FUA).
    unflushed: bool,
    /// Was unflushed at the last crash.
    unflushed_at_crash: bool,
}

fn push_unique(v: &mut Vec<u32>, id: u32) {
    if !v.contains(&id) {
        v.push(id);
    }
}

/// What a read returned for one sector, judged against the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Ok(u32),
    Wrong {
        array_sector: u64,
        expected: Vec<u32>,
        /// The id the bytes claim to be (if they carry a valid pattern), for the report.
        found: Option<(u32, u64)>,
    },
}

pub struct Model {
    cells: Vec<Cell>,
}

impl Model {
    pub fn new(sectors: u64) -> Model {
        Model {
            cells: vec![
                Cell {
                    now: vec![0],
                    crash: vec![0],
                    unflushed: false,
                    unflushed_at_crash: false,
                };
                sectors as usize
            ],
        }
    }

    /// A model of an array created over old data without writing it (a background
    /// initialisation): no sector has a defined content until written.
    pub fn undefined(sectors: u64) -> Model {
        let mut m = Model::new(sectors);
        for c in &mut m.cells {
            c.now = vec![UNDEFINED];
            c.crash = vec![UNDEFINED];
        }
        m
    }

    /// The array grew to `sectors`: the new room holds zeros, durably.
    pub fn grow(&mut self, sectors: u64) {
        if sectors > self.sectors() {
            self.cells.resize(
                sectors as usize,
                Cell {
                    now: vec![0],
                    crash: vec![0],
                    unflushed: false,
                    unflushed_at_crash: false,
                },
            );
        }
    }

    pub fn sectors(&self) -> u64 {
        self.cells.len() as u64
    }

    /// An acknowledged write of `id` over `[start, start+n)`.
    pub fn write_acked(&mut self, start: u64, n: u64, id: u32, fua: bool) {
        for c in &mut self.cells[start as usize..(start + n) as usize] {
            c.now.clear();
            c.now.push(id);
            if fua {
                c.crash.clear();
            }
            c.unflushed = !fua;
            push_unique(&mut c.crash, id);
        }
    }

    /// A write that returned an error: each sector may hold old or new.
    pub fn write_failed(&mut self, start: u64, n: u64, id: u32) {
        for c in &mut self.cells[start as usize..(start + n) as usize] {
            push_unique(&mut c.now, id);
            push_unique(&mut c.crash, id);
            c.unflushed = true;
        }
    }

    /// A completed flush.
    pub fn flushed(&mut self) {
        for c in &mut self.cells {
            if c.crash != c.now {
                c.crash.clone_from(&c.now);
            }
            c.unflushed = false;
        }
    }

    /// A crash: every sector may now hold any of its crash candidates. Returns the sectors left
    /// in doubt (more than one candidate).
    pub fn crashed(&mut self) -> Vec<u64> {
        let mut doubt = Vec::new();
        for (i, c) in self.cells.iter_mut().enumerate() {
            c.now.clone_from(&c.crash);
            if c.now.len() > 1 {
                doubt.push(i as u64);
            }
            c.unflushed_at_crash = c.unflushed;
            c.unflushed = false;
        }
        doubt
    }

    /// Whether a write not yet flushed covered `array_sector` at the last crash: the only
    /// sectors a crash may leave unrecoverable when a member goes with it.
    pub fn unflushed_at_crash(&self, array_sector: u64) -> bool {
        self.cells[array_sector as usize].unflushed_at_crash
    }

    /// The single acceptable content of a sector, if it is certain (never for a sector
    /// whose content is [`UNDEFINED`]).
    pub fn certain(&self, array_sector: u64) -> Option<u32> {
        let c = &self.cells[array_sector as usize];
        (c.now.len() == 1 && c.now[0] != UNDEFINED).then(|| c.now[0])
    }

    /// After a read observed `id` at a certain-to-be-stable place: nothing to narrow (mirrors
    /// left diverged by a crash may return either copy later), so reads never change the model.
    /// Checks `bytes` (one sector read at `array_sector`).
    pub fn judge(&self, array_sector: u64, bytes: &[u8], scratch: &mut [u8]) -> Verdict {
        let c = &self.cells[array_sector as usize];
        if c.now.contains(&UNDEFINED) {
            return Verdict::Ok(UNDEFINED);
        }
        for &id in &c.now {
            sector_pattern(id, array_sector, scratch);
            if scratch == bytes {
                return Verdict::Ok(id);
            }
        }
        let mut idb = [0u8; 4];
        idb.copy_from_slice(&bytes[..4]);
        let mut sb = [0u8; 8];
        sb.copy_from_slice(&bytes[4..12]);
        let claimed = (u32::from_le_bytes(idb), u64::from_le_bytes(sb));
        sector_pattern(claimed.0, claimed.1, scratch);
        Verdict::Wrong {
            array_sector,
            expected: c.now.clone(),
            found: (scratch == bytes).then_some(claimed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undefined_sector_takes_anything_until_written() {
        let mut m = Model::undefined(2);
        let mut s = vec![0u8; SECTOR];
        let junk = vec![0xa5u8; SECTOR];
        assert_eq!(m.judge(0, &junk, &mut s), Verdict::Ok(UNDEFINED));
        assert_eq!(m.certain(0), None);
        m.write_acked(0, 1, 7, false);
        assert!(matches!(m.judge(0, &junk, &mut s), Verdict::Wrong { .. }));
        assert_eq!(m.certain(0), Some(7));
        // Unflushed, a crash may leave the old (undefined) content: anything again.
        m.crashed();
        assert_eq!(m.judge(0, &junk, &mut s), Verdict::Ok(UNDEFINED));
        m.write_acked(1, 1, 8, true);
        m.crashed();
        assert!(matches!(m.judge(1, &junk, &mut s), Verdict::Wrong { .. }));
    }

    #[test]
    fn durability_rules() {
        let mut m = Model::new(4);
        let mut s = vec![0u8; SECTOR];
        let mut b = vec![0u8; SECTOR];
        m.write_acked(0, 2, 5, false);
        m.flushed();
        m.write_acked(1, 2, 6, false);
        sector_pattern(5, 1, &mut b);
        assert!(matches!(m.judge(1, &b, &mut s), Verdict::Wrong { .. }));
        let doubt = m.crashed();
        assert_eq!(doubt, vec![1, 2]);
        assert_eq!(m.judge(1, &b, &mut s), Verdict::Ok(5));
        sector_pattern(6, 1, &mut b);
        assert_eq!(m.judge(1, &b, &mut s), Verdict::Ok(6));
        assert_eq!(m.certain(0), Some(5));
        // Misplaced data is named.
        sector_pattern(6, 2, &mut b);
        match m.judge(1, &b, &mut s) {
            Verdict::Wrong { found, .. } => assert_eq!(found, Some((6, 2))),
            v => panic!("{v:?}"),
        }
        m.write_failed(3, 1, 9);
        sector_pattern(0, 3, &mut b);
        assert_eq!(m.judge(3, &b, &mut s), Verdict::Ok(0));
        m.write_acked(3, 1, 10, true);
        m.crashed();
        assert_eq!(m.certain(3), Some(10));
    }
}
