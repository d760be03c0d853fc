//! A reshape's decisions on numbers alone (no I/O): how far each member's data must move so
//! that no step overwrites data it still needs (mdadm's `compute_backup_blocks` and
//! `min_offset_change`), how much room a member has in front of its data (mdadm's
//! `space_before`), and how far the next step may write before the position recorded in the
//! superblocks must advance (raid5.c `reshape_request`: the write position may not pass the
//! read position the superblocks promise).
//!
//! A forward reshape (more data members) moves data to lower member addresses: it writes the
//! new layout at `new data offset + w` while the old layout of every sector at or above the
//! recorded `reshape_position` must stay readable at `old data offset + r`. With the data
//! offset lowered by `diff`, a step may write up to `r + diff`.

/// Greatest common divisor.
fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// mdadm's `compute_backup_blocks`: the fewest array sectors that are a whole number of old
/// and of new stripes (data only).
pub fn unit_sectors(old_chunk: u64, old_data: u64, new_chunk: u64, new_data: u64) -> u64 {
    let (a, b) = (old_chunk * old_data, new_chunk * new_data);
    a / gcd(a, b) * b
}

/// mdadm's `min_offset_change`: how far (member sectors) the data offset moves, down for a
/// forward reshape: one unit's share of each old data member.
pub fn min_offset_change(old_chunk: u64, old_data: u64, new_chunk: u64, new_data: u64) -> u64 {
    unit_sectors(old_chunk, old_data, new_chunk, new_data) / old_data
}

/// mdadm's `space_before` for metadata 1.1/1.2 (superblock in front of the data) without a
/// bitmap or partial parity log (a reshape refuses both): the sectors between the end of the
/// superblock area or bad-block log and the data offset.
pub fn space_before(data_offset: u64, super_offset: u64, bblog_end: Option<u64>) -> u64 {
    if data_offset <= super_offset {
        // Metadata 1.0: the superblock sits behind the data; mdadm moves nothing down.
        return 0;
    }
    // The kernel's own bound: superblock plus 36 KiB.
    let earliest = (super_offset + (32 + 4) * 2).max(bblog_end.unwrap_or(0));
    data_offset.saturating_sub(earliest)
}

/// mdadm's `choose_offset`: a value in `[min, max]` near the middle of `[lo, hi]`, rounded
/// towards a 1 MiB boundary (sectors). mdadm moves the data offset this way when the number
/// of data members stays (a chunk or layout change): by about half the room there is, so
/// each step of the reshape can move that much before progress must be recorded.
pub fn choose_offset(lo: u64, hi: u64, min: u64, max: u64) -> u64 {
    let mut choice = (lo + hi) / 2;
    let mut bit = 1u64;
    while bit < 2 * 1024 {
        if bit & choice != 0 {
            let (bigger, smaller) = (choice + bit, choice - bit);
            if bigger > max && smaller < min {
                break;
            }
            // Up when down is out of range, or both are in and up is further from the edge.
            choice = if bigger <= max && (smaller < min || hi - bigger > smaller - lo) {
                bigger
            } else {
                smaller
            };
        }
        bit <<= 1;
    }
    choice
}

/// Where a layout puts array sectors on its members, in the terms md's raid10 reasons in
/// (`first_dev_address`, `last_dev_address`): chunk `k` lies in the member rows from
/// `floor(k * near / disks) * far` chunks on. A striped level is the case of one copy over
/// its data members (`near` = `far` = 1, `disks` its data members); a RAID 10 of near copies
/// need not be a whole number of copies (5 members, 2 copies: two rows hold 5 chunks); an
/// offset layout's `far` rows hold one row's chunks and their shifted copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lay {
    pub chunk: u64,
    pub near: u64,
    pub disks: u64,
    pub far: u64,
    /// The chunks a step's writes must cover whole (their start and end positions fall on
    /// them): a striped level's stripe (its parity covers it), an offset layout's row of
    /// `disks / gcd(disks, near)` chunks (its shifted copies), one chunk of near copies (each
    /// copy is a cell of its own).
    pub step_chunks: u64,
}

impl Lay {
    /// A striped level (RAID 0, 4, 5, 6): `data` members' chunks per stripe.
    pub fn striped(chunk: u64, data: u64) -> Lay {
        Lay {
            chunk,
            near: 1,
            disks: data,
            far: 1,
            step_chunks: data,
        }
    }

    /// A RAID 10 of `near` copies over `disks` members, in groups of `far` rows when its
    /// layout is offset (1 otherwise).
    pub fn mirrored(chunk: u64, near: u64, disks: u64, far: u64) -> Lay {
        Lay {
            chunk,
            near,
            disks,
            far,
            step_chunks: if far > 1 { disks / gcd(disks, near) } else { 1 },
        }
    }

    /// md's `first_dev_address`: the first member sector (from the data offset) that can hold
    /// array sector `s` or any after it.
    pub fn first_dev(&self, s: u64) -> u64 {
        s / self.chunk * self.near / self.disks * self.far * self.chunk
    }

    /// md's `last_dev_address`: the member sector past every one that can hold an array
    /// sector below `e`.
    pub fn last_dev(&self, e: u64) -> u64 {
        (e.div_ceil(self.chunk) * self.near).div_ceil(self.disks) * self.far * self.chunk
    }

    /// The furthest array sector `e` (on a chunk) whose sectors below it all lie below member
    /// sector `m`: the largest `e` with `last_dev(e) <= m`.
    fn end_below(&self, m: u64) -> u64 {
        m / (self.far * self.chunk) * self.disks / self.near * self.chunk
    }

    /// The lowest array sector `s` (on a chunk) whose sectors from it on all lie at or above
    /// member sector `m`: the least `s` with `first_dev(s) >= m`.
    fn start_above(&self, m: u64) -> u64 {
        (m.div_ceil(self.far * self.chunk) * self.disks).div_ceil(self.near) * self.chunk
    }

    /// Whether each copy of a chunk is a cell of its own, which a step writes alone: near
    /// copies, not an offset layout's rows.
    fn cells(&self) -> bool {
        self.far == 1 && self.step_chunks == 1
    }

    /// Whether this layout holds more array sectors per member sector than `other`.
    pub fn wider_than(&self, other: &Lay) -> bool {
        self.disks * other.near * other.far > other.disks * self.near * self.far
    }
}

/// A reshape's geometry in the numbers the safety rule needs (sectors). Forward (more data
/// members, or as many) it runs up from 0 with the data offset moved down by `diff`
/// ([`Rule::step_end`]); backward (fewer, md's `reshape_backwards`) down from the end with the
/// offset moved up: sectors at or above the recorded position are in the new layout, those
/// below still in the old, which a step may not overwrite ([`Rule::step_start`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub old: Lay,
    pub new: Lay,
    /// How far the data offset moved (the least over the members).
    pub diff: u64,
    /// Array sectors the reshape covers: the new geometry's whole size.
    pub end: u64,
}

impl Rule {
    /// The unit a step covers and a position recorded falls on: whole steps of the new
    /// layout (a striped level's stripes) of the larger chunk (md's raid5_run insists:
    /// "reshape_position not on a stripe boundary").
    fn unit(&self) -> u64 {
        self.old.chunk.max(self.new.chunk) * self.new.step_chunks
    }

    /// The furthest array sector a step from `pos` may reach, in whole units and at most
    /// `max_step` sectors, while the superblocks record `recorded`: its new layout must end
    /// at or before the first member sector the old layout may hold a sector at or above
    /// `recorded` in (offsets included; md's raid10 `reshape_request`, whose rule this is for
    /// every level). `pos` itself when no unit fits: the position recorded must advance
    /// first.
    pub fn step_end(&self, pos: u64, recorded: u64, max_step: u64) -> u64 {
        let read_safe = self.old.first_dev(recorded) + self.diff;
        let unit = self.unit();
        let mut fits = (self.new.end_below(read_safe) / unit * unit).max(pos);
        let cap = pos.saturating_add((max_step / unit).max(1).saturating_mul(unit));
        let last = cap.min(self.end);
        // Near copies on both sides: md's rows alone would stall at some counts (3 copies
        // over 4 members to 5: the next row is never clear) where md, once the position is
        // recorded, writes on; each cell it writes is then clear of the old data still
        // needed. So the step goes on chunk by chunk while every cell is.
        if self.old.cells() && self.new.cells() {
            while fits < last
                && (fits..fits + unit)
                    .step_by(self.new.chunk as usize)
                    .all(|at| self.cells_clear(at / self.new.chunk, recorded))
            {
                fits += unit;
            }
        }
        fits.min(last).max(pos)
    }

    /// Near copies: whether every copy of the new layout's chunk `k`, written (offsets
    /// included) over the old layout's member rows, lands below the member's first old copy
    /// of a chunk at or above `recorded`. Copy `j` of chunk `k` is the `k * near + j`-th
    /// cell of a walk along the rows (md's raid10 `__raid10_find_phys`); members the old
    /// layout did not have hold nothing old.
    fn cells_clear(&self, k: u64, recorded: u64) -> bool {
        let (o, n) = (&self.old, &self.new);
        let p0 = recorded / o.chunk * o.near;
        (0..n.near).all(|j| {
            let q = k * n.near + j;
            let member = q % n.disks;
            if member >= o.disks {
                return true;
            }
            let p = p0 + (member + o.disks - p0 % o.disks) % o.disks;
            (q / n.disks) * n.chunk + n.chunk <= (p / o.disks) * o.chunk + self.diff
        })
    }

    /// Whether a reshape recorded at `pos` can go on (md's "reshape_position too early for
    /// auto-recovery" test): `pos` is on a unit and the next unit fits.
    pub fn can_resume(&self, pos: u64) -> bool {
        pos.is_multiple_of(self.unit()) && (pos >= self.end || self.step_end(pos, pos, 1) > pos)
    }

    /// The lowest array sector a step down from `pos` may start at, in whole units and at
    /// most `max_step` sectors, while the superblocks record `recorded`: its new layout must
    /// start at or above the end of the old layout's sectors below `recorded` (offsets
    /// included). `pos` itself when no unit fits: the position recorded must come down
    /// first.
    pub fn step_start(&self, pos: u64, recorded: u64, max_step: u64) -> u64 {
        let needed = self.old.last_dev(recorded);
        let unit = self.unit();
        let fits = self
            .new
            .start_above(needed.saturating_sub(self.diff))
            .div_ceil(unit)
            * unit;
        let cap = pos.saturating_sub((max_step / unit).max(1).saturating_mul(unit));
        fits.max(cap).min(pos)
    }

    /// Whether a reshape recorded at `pos` can go on: `pos` is on a unit (or the end) and the
    /// next unit down fits.
    pub fn can_resume_down(&self, pos: u64) -> bool {
        (pos.is_multiple_of(self.unit()) || pos == self.end)
            && (pos == 0 || self.step_start(pos, pos, 1) < pos)
    }
}

/// Which way a reshape runs, and its rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Up from 0 (more data members, or as many).
    Forward(Rule),
    /// Down from the end (fewer data members).
    Backward(Rule),
}

impl Way {
    /// Array sectors the new layout holds.
    pub fn end(&self) -> u64 {
        match self {
            Way::Forward(f) => f.end,
            Way::Backward(b) => b.end,
        }
    }

    /// How far the data offset moved (either way).
    pub fn diff(&self) -> u64 {
        match self {
            Way::Forward(f) => f.diff,
            Way::Backward(b) => b.diff,
        }
    }

    /// Where a new reshape starts and where it ends.
    pub fn first(&self) -> u64 {
        match self {
            Way::Forward(_) => 0,
            Way::Backward(b) => b.end,
        }
    }

    pub fn last(&self) -> u64 {
        match self {
            Way::Forward(f) => f.end,
            Way::Backward(_) => 0,
        }
    }

    /// Array sectors reshaped once the position is at `pos`.
    pub fn done(&self, pos: u64) -> u64 {
        match self {
            Way::Forward(_) => pos,
            Way::Backward(b) => b.end - pos,
        }
    }

    /// The array sectors `[from, to)` of the next step from `pos` (empty when the recorded
    /// position must move first), at most `max_step` sectors.
    pub fn step(&self, pos: u64, recorded: u64, max_step: u64) -> (u64, u64) {
        match self {
            Way::Forward(f) => (pos, f.step_end(pos, recorded, max_step)),
            Way::Backward(b) => (b.step_start(pos, recorded, max_step), pos),
        }
    }

    /// The position once step `[from, to)` is done.
    pub fn after(&self, (from, to): (u64, u64)) -> u64 {
        match self {
            Way::Forward(_) => to,
            Way::Backward(_) => from,
        }
    }

    pub fn can_resume(&self, pos: u64) -> bool {
        match self {
            Way::Forward(f) => f.can_resume(pos),
            Way::Backward(b) => b.can_resume_down(pos),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_offset_changes_are_mdadms() {
        // RAID 5 4 -> 5 members, 512 KiB chunks: lcm(3, 4) chunks of 1024 sectors.
        assert_eq!(unit_sectors(1024, 3, 1024, 4), 12288);
        assert_eq!(min_offset_change(1024, 3, 1024, 4), 4096);
        // 64 KiB chunks, RAID 6 5 -> 6 members (3 -> 4 data).
        assert_eq!(min_offset_change(128, 3, 128, 4), 512);
        // A chunk change: 64 KiB -> 512 KiB over 3 data members.
        assert_eq!(unit_sectors(128, 3, 1024, 3), 3072);
    }

    #[test]
    fn offsets_are_chosen_as_mdadm_chooses_them() {
        // 2048 sectors of data offset, 1968 free in front, a move of at least 1024: mdadm
        // goes as far as the room allows on a 1 MiB boundary (offset 0 is below `lo`, so the
        // rounding stops at the bit that would cross it).
        let (off, before, min) = (2048u64, 1968u64, 1024u64);
        let new = choose_offset(off - before, off, off - before, off - min);
        assert!((off - before..=off - min).contains(&new), "{new}");
        // Wide room: the middle, on a 1 MiB boundary.
        let (off, before, min) = (262144u64, 262000u64, 1024u64);
        let new = choose_offset(off - before, off, off - before, off - min);
        assert!((off - before..=off - min).contains(&new));
        assert!(new.is_multiple_of(2048), "{new}");
    }

    #[test]
    fn space_before_counts_what_sits_in_front_of_the_data() {
        assert_eq!(space_before(4096, 8, None), 4096 - 80);
        assert_eq!(space_before(4096, 8, Some(8 + 2056)), 4096 - 2064);
        assert_eq!(space_before(4096, 8, Some(8 + 4096 - 8)), 0);
        assert_eq!(space_before(0, 1 << 20, None), 0, "metadata 1.0");
    }

    #[test]
    fn a_step_never_writes_over_old_data_the_superblocks_still_point_at() {
        let f = Rule {
            old: Lay::striped(1024, 3),
            new: Lay::striped(1024, 4),
            diff: 4096,
            end: 4 * 1024 * 1024,
        };
        // From the start: new stripes up to member sector 4096 (4 of them).
        assert_eq!(f.step_end(0, 0, u64::MAX), 4 * 4096);
        // A cap of one stripe; a cap below one stripe still moves one.
        assert_eq!(f.step_end(0, 0, 4096), 4096);
        assert_eq!(f.step_end(0, 0, 1), 4096);
        // Nothing fits until the recorded position advances.
        assert_eq!(f.step_end(4 * 4096, 0, u64::MAX), 4 * 4096);
        // Recorded at 16384: the old stripe holding it starts at member sector 5 * 1024.
        assert_eq!(
            f.step_end(16384, 16384, u64::MAX),
            (5 * 1024 + 4096) / 1024 * 4096
        );
        // Every step ends where its writes stay in front of the old data still needed.
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let recorded = (rng % f.end) / 4096 * 4096;
            let pos = (recorded + (rng >> 40) % 8 * 4096).min(f.end);
            let to = f.step_end(pos, recorded, (rng >> 20) % 100_000);
            assert!(to >= pos && to <= f.end && to.is_multiple_of(4096));
            if to > pos {
                let write_end = to / 4;
                let read_start = 4096 + recorded / 3072 * 1024;
                assert!(write_end <= read_start, "{pos} {recorded} {to}");
            }
        }
    }

    /// md's near layout cell by cell: copy `j` of chunk `k` is the `k * near + j`-th cell of
    /// a walk along the rows, `disks` cells a row: (member, row).
    fn cell(k: u64, j: u64, near: u64, disks: u64) -> (u64, u64) {
        ((k * near + j) % disks, (k * near + j) / disks)
    }

    #[test]
    fn first_and_last_dev_bound_every_copy_of_near_layouts_over_any_count() {
        for (near, disks) in [(2, 3), (2, 4), (2, 5), (3, 4), (3, 5), (3, 3), (2, 7)] {
            let lay = Lay::mirrored(8, near, disks, 1);
            for k in 0..60 {
                let rows = (0..near).map(|j| cell(k, j, near, disks).1);
                let (lo, hi) = (rows.clone().min().unwrap(), rows.max().unwrap());
                // Every copy of chunk k and of any chunk after it lies at or above
                // first_dev(k); every copy of chunks up to k below last_dev(k + 1).
                assert!(lay.first_dev(k * 8) <= lo * 8, "{near} {disks} {k}");
                assert_eq!(lay.first_dev(k * 8), cell(k, 0, near, disks).1 * 8);
                assert!(lay.last_dev((k + 1) * 8) >= (hi + 1) * 8);
                assert_eq!(lay.last_dev((k + 1) * 8), (hi + 1) * 8);
            }
        }
    }

    #[test]
    fn near_copies_over_any_count_reshape_chunk_by_chunk_without_overwriting() {
        // More members, as many copies, the data offset moved down by one chunk (md's
        // raid10 `before_length`, mdadm's move): each step, recorded before it (the worst
        // case), writes only cells of the old layout whose chunks it has already moved.
        let c = 8;
        for (near, od, nd) in [
            (2, 4, 5),
            (2, 3, 4),
            (2, 5, 6),
            (2, 4, 7),
            (3, 4, 5),
            (3, 3, 5),
        ] {
            let rule = Rule {
                old: Lay::mirrored(c, near, od, 1),
                new: Lay::mirrored(c, near, nd, 1),
                diff: c,
                end: 200 * c,
            };
            for cap in [1, 5 * c, u64::MAX] {
                let (mut pos, mut steps) = (0, 0);
                while pos < rule.end {
                    let to = rule.step_end(pos, pos, cap);
                    assert!(to > pos, "{near} {od}->{nd}: stuck at {pos}");
                    assert!(
                        to.is_multiple_of(c) && rule.can_resume(to),
                        "{near} {od}->{nd} cap {cap}: {pos}..{to}"
                    );
                    for k in pos / c..to / c {
                        for j in 0..near {
                            // Written one row down (the offset moved by a chunk): that
                            // cell of the old layout holds a chunk already moved, or none.
                            let (member, row) = cell(k, j, near, nd);
                            let old_chunk =
                                (row > 0 && member < od).then(|| ((row - 1) * od + member) / near);
                            assert!(
                                old_chunk.is_none_or(|o| o < pos / c),
                                "{near} {od}->{nd}: chunk {k} copy {j} at {pos}..{to}"
                            );
                        }
                    }
                    pos = to;
                    steps += 1;
                }
                assert!(steps >= 2);
            }
        }
    }

    #[test]
    fn a_chunk_change_steps_in_the_larger_chunk() {
        // 512 KiB -> 64 KiB chunks over 3 data members: positions on 3 x 1024 sectors.
        let f = Rule {
            old: Lay::striped(1024, 3),
            new: Lay::striped(128, 3),
            diff: 1024,
            end: 3 * 1024 * 64,
        };
        assert_eq!(f.step_end(0, 0, 1), 3072);
        assert!(
            !f.can_resume(384),
            "a new stripe, but not of the larger chunk"
        );
        assert!(f.can_resume(3072));
        // The rule holds for any position and cap.
        for recorded in (0..f.end).step_by(3072) {
            for cap in [1, 5000, 1 << 20] {
                let to = f.step_end(recorded, recorded, cap);
                if to > recorded {
                    assert!(to / 3 <= 1024 + recorded / 3072 * 1024);
                }
            }
        }
    }

    #[test]
    fn a_backward_step_never_writes_over_old_data_the_superblocks_still_point_at() {
        // RAID 5 from 5 to 4 members (4 -> 3 data), 64 KiB chunks, offset up by 512.
        let b = Rule {
            old: Lay::striped(128, 4),
            new: Lay::striped(128, 3),
            diff: 512,
            end: 3 * 128 * 200,
        };
        assert!(b.can_resume_down(b.end));
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..10_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let recorded = (rng % b.end) / 384 * 384;
            let pos = recorded - (rng >> 40) % 4 * 384 * (recorded >= 4 * 384) as u64;
            let from = b.step_start(pos, recorded, (rng >> 20) % 100_000);
            assert!(from <= pos && from.is_multiple_of(384));
            if from < pos {
                // The new layout from `from` starts at or above the old data below `recorded`.
                let write_start = 512 + from / 3;
                let read_end = recorded.div_ceil(512) * 128;
                assert!(write_start >= read_end, "{pos} {recorded} {from}");
            }
        }
        // From the end, steps come down to 0.
        let (mut pos, mut n) = (b.end, 0);
        while pos > 0 {
            let from = b.step_start(pos, pos, 1 << 20);
            assert!(from < pos, "stuck at {pos}");
            pos = from;
            n += 1;
        }
        assert!(n > 1);
    }

    #[test]
    fn resuming_needs_a_stripe_boundary_and_room_for_the_next_stripe() {
        let f = Rule {
            old: Lay::striped(128, 3),
            new: Lay::striped(128, 4),
            diff: 512,
            end: 4 * 8192,
        };
        assert!(f.can_resume(0));
        assert!(f.can_resume(512 * 10));
        assert!(!f.can_resume(100), "not on a new stripe");
        assert!(f.can_resume(f.end));
        let none = Rule { diff: 0, ..f };
        assert!(
            !none.can_resume(0),
            "in place, the first stripe overwrites what it reads"
        );
    }
}
