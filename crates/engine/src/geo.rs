//! Array geometry as the engine plans with it: where each array sector lives on which members.
//!
//! Owns the translation from md's (level, layout, raid_disks, chunk_sectors, member data size)
//! to two views: *copies* for levels without parity (RAID 0, 1, 10: one or more (member,
//! member_sector) places holding the same bytes) and *stripes* for RAID 4/5/6 (which member holds
//! data index `dd`, P and Q, and the order md uses for the Q syndrome). The formulas are md's
//! (raid0.c for equal-sized members, raid5.c `raid5_compute_sector`, raid10.c
//! `__raid10_find_phys` and `calc_sectors`). Invariants: a `Geo` is validated once in
//! [`Geo::new`]; afterwards every method is total for sectors below `array_sectors()`.

use std::fmt;

/// The redundancy scheme, which decides how requests are planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// RAID 0, 1, 10: every sector has `copies` places; no parity.
    Copies,
    /// RAID 4, 5, 6: stripes of data chunks plus P (and Q).
    Parity { max_degraded: usize },
}

/// Why a geometry is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GeoError {
    UnsupportedLevel(i32),
    UnsupportedLayout {
        level: i32,
        layout: u32,
    },
    TooFewDisks {
        level: i32,
        raid_disks: usize,
        min: usize,
    },
    BadChunk {
        chunk_sectors: u64,
        why: &'static str,
    },
    TooSmall {
        member_data_sectors: u64,
    },
}

impl fmt::Display for GeoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GeoError::UnsupportedLevel(l) => {
                write!(f, "RAID level {l} is not supported (0, 1, 4, 5, 6, 10 are)")
            }
            GeoError::UnsupportedLayout { level, layout } => {
                write!(
                    f,
                    "layout {layout} (0x{layout:x}) is not valid for RAID {level}"
                )
            }
            GeoError::TooFewDisks {
                level,
                raid_disks,
                min,
            } => {
                write!(
                    f,
                    "RAID {level} needs at least {min} raid devices, got {raid_disks}"
                )
            }
            GeoError::BadChunk { chunk_sectors, why } => {
                write!(f, "chunk of {chunk_sectors} sectors is invalid: {why}")
            }
            GeoError::TooSmall {
                member_data_sectors,
            } => write!(
                f,
                "members hold {member_data_sectors} data sectors, too few for one chunk per member"
            ),
        }
    }
}

/// RAID10 layout fields (md's `setup_geo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct R10 {
    near: usize,
    far: usize,
    offset: bool,
    far_set_size: usize,
    stride_sectors: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geo {
    pub level: i32,
    pub layout: u32,
    pub raid_disks: usize,
    pub chunk_sectors: u64,
    /// Sectors per member that hold array data (after rounding to whole chunks).
    pub member_data_sectors: u64,
    array_sectors: u64,
    r10: Option<R10>,
}

/// One stripe of a parity level: which member holds what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeInfo {
    /// `data_members[dd]` is the member holding data index `dd`.
    pub data_members: Vec<usize>,
    pub p_member: usize,
    pub q_member: Option<usize>,
    /// Q syndrome slots in md's order: `Some(dd)` is data index `dd`, `None` a zero block
    /// (DDF layouts put P and Q positions in the slot list as zeroes).
    pub syndrome_slots: Vec<Option<usize>>,
    /// Member sector where this stripe's chunks start (relative to the data offset).
    pub member_sector_start: u64,
}

pub const MAX_COPIES: usize = 8;

impl Geo {
    /// Validates md's parameters. `member_data_sectors` is the usable size of the smallest member.
    pub fn new(
        level: i32,
        layout: u32,
        raid_disks: usize,
        chunk_sectors: u64,
        member_data_sectors: u64,
    ) -> Result<Geo, GeoError> {
        let min = match level {
            0 => 1,
            1 => 1,
            4 | 5 => 2,
            6 => 4,
            10 => 2,
            _ => return Err(GeoError::UnsupportedLevel(level)),
        };
        if raid_disks < min || raid_disks > 256 {
            return Err(GeoError::TooFewDisks {
                level,
                raid_disks,
                min,
            });
        }
        let uses_chunk = level != 1;
        if uses_chunk && (chunk_sectors == 0 || !chunk_sectors.is_multiple_of(8)) {
            return Err(GeoError::BadChunk {
                chunk_sectors,
                why: "must be a non-zero multiple of 4 KiB",
            });
        }
        let mut r10 = None;
        let (array_sectors, used) = match level {
            0 => {
                if layout > 2 {
                    return Err(GeoError::UnsupportedLayout { level, layout });
                }
                let chunks = member_data_sectors / chunk_sectors;
                (
                    chunks * chunk_sectors * raid_disks as u64,
                    chunks * chunk_sectors,
                )
            }
            1 => (member_data_sectors, member_data_sectors),
            4..=6 => {
                let ok = match level {
                    4 => layout == 0 || layout == 5,
                    5 => layout <= 5,
                    _ => matches!(layout, 0..=5 | 8..=10 | 16..=20),
                };
                if !ok {
                    return Err(GeoError::UnsupportedLayout { level, layout });
                }
                let max_degraded = if level == 6 { 2 } else { 1 };
                let chunks = member_data_sectors / chunk_sectors;
                (
                    chunks * chunk_sectors * (raid_disks - max_degraded) as u64,
                    chunks * chunk_sectors,
                )
            }
            _ => {
                if !chunk_sectors.is_power_of_two() {
                    return Err(GeoError::BadChunk {
                        chunk_sectors,
                        why: "RAID 10 needs a power of two",
                    });
                }
                let near = (layout & 0xff) as usize;
                let far = ((layout >> 8) & 0xff) as usize;
                let offset = layout & 0x10000 != 0;
                let copies = near * far;
                if near == 0 || far == 0 || copies < 2 || copies > raid_disks || copies > MAX_COPIES
                {
                    return Err(GeoError::UnsupportedLayout { level, layout });
                }
                let far_set_size = match layout >> 17 {
                    0 => raid_disks,
                    1 => raid_disks / far,
                    2 => far * near,
                    _ => return Err(GeoError::UnsupportedLayout { level, layout }),
                };
                if far_set_size == 0 {
                    return Err(GeoError::UnsupportedLayout { level, layout });
                }
                // calc_sectors
                let mut size = member_data_sectors / chunk_sectors;
                size /= far as u64;
                size *= raid_disks as u64;
                size /= near as u64;
                let array = size * chunk_sectors;
                let used_chunks = (size * copies as u64).div_ceil(raid_disks as u64);
                let stride_sectors = if offset {
                    chunk_sectors
                } else {
                    used_chunks / far as u64 * chunk_sectors
                };
                r10 = Some(R10 {
                    near,
                    far,
                    offset,
                    far_set_size,
                    stride_sectors,
                });
                (array, used_chunks * chunk_sectors)
            }
        };
        if array_sectors == 0 {
            return Err(GeoError::TooSmall {
                member_data_sectors,
            });
        }
        Ok(Geo {
            level,
            layout,
            raid_disks,
            chunk_sectors: if uses_chunk { chunk_sectors } else { 0 },
            member_data_sectors: used,
            array_sectors,
            r10,
        })
    }

    pub fn array_sectors(&self) -> u64 {
        self.array_sectors
    }

    pub fn scheme(&self) -> Scheme {
        match self.level {
            4 | 5 => Scheme::Parity { max_degraded: 1 },
            6 => Scheme::Parity { max_degraded: 2 },
            _ => Scheme::Copies,
        }
    }

    /// Members that may be lost with the array still whole, in the best case (the worst-case
    /// check is [`Geo::survives`]).
    pub fn data_disks(&self) -> usize {
        match self.scheme() {
            Scheme::Parity { max_degraded } => self.raid_disks - max_degraded,
            Scheme::Copies => match self.level {
                0 => self.raid_disks,
                1 => 1,
                _ => {
                    let r = self.r10.as_ref().map(|r| r.near * r.far).unwrap_or(1);
                    self.raid_disks / r
                }
            },
        }
    }

    /// Copies of `array_sector` and how many sectors from there stay contiguous on every copy.
    pub fn copies(&self, array_sector: u64) -> (Vec<(usize, u64)>, u64) {
        match self.level {
            0 => {
                let c = array_sector / self.chunk_sectors;
                let off = array_sector % self.chunk_sectors;
                let n = self.raid_disks as u64;
                let dev = (c % n) as usize;
                let ms = (c / n) * self.chunk_sectors + off;
                (vec![(dev, ms)], self.chunk_sectors - off)
            }
            1 => (
                (0..self.raid_disks).map(|d| (d, array_sector)).collect(),
                self.array_sectors - array_sector,
            ),
            _ => {
                let r = self.r10.unwrap_or(R10 {
                    near: 2,
                    far: 1,
                    offset: false,
                    far_set_size: self.raid_disks,
                    stride_sectors: 0,
                });
                let off = array_sector % self.chunk_sectors;
                (
                    self.r10_find_phys(&r, array_sector),
                    self.chunk_sectors - off,
                )
            }
        }
    }

    fn r10_find_phys(&self, g: &R10, array_sector: u64) -> Vec<(usize, u64)> {
        let disks = self.raid_disks;
        let last_far_set_start = (disks / g.far_set_size - 1) * g.far_set_size;
        let last_far_set_size = g.far_set_size + disks % g.far_set_size;
        let chunk = array_sector / self.chunk_sectors * g.near as u64;
        let mut sector = array_sector % self.chunk_sectors;
        let mut stripe = chunk / disks as u64;
        let mut dev = (chunk % disks as u64) as usize;
        if g.offset {
            stripe *= g.far as u64;
        }
        sector += stripe * self.chunk_sectors;
        let mut out = Vec::with_capacity(g.near * g.far);
        for _ in 0..g.near {
            let mut d = dev;
            let mut s = sector;
            out.push((d, s));
            for _ in 1..g.far {
                let set = d / g.far_set_size;
                d += g.near;
                if !disks.is_multiple_of(g.far_set_size) && d > last_far_set_start {
                    d -= last_far_set_start;
                    d %= last_far_set_size;
                    d += last_far_set_start;
                } else {
                    d %= g.far_set_size;
                    d += g.far_set_size * set;
                }
                s += g.stride_sectors;
                out.push((d, s));
            }
            dev += 1;
            if dev >= disks {
                dev = 0;
                sector += self.chunk_sectors;
            }
        }
        out
    }

    /// Stripe `stripe` of a parity level (md's `raid5_compute_sector` for every data index).
    pub fn stripe(&self, stripe: u64) -> StripeInfo {
        let n = self.raid_disks;
        let max_degraded = if self.level == 6 { 2 } else { 1 };
        let data_disks = n - max_degraded;
        let s_mod = |m: usize| (stripe % m as u64) as usize;
        let mut data_members = Vec::with_capacity(data_disks);
        let mut ddf = false;
        let (pd, qd): (usize, Option<usize>);
        if self.level == 4 {
            pd = data_disks;
            qd = None;
            data_members.extend(0..data_disks);
        } else if self.level == 5 {
            let p = match self.layout {
                0 | 2 => data_disks - s_mod(n),
                1 | 3 => s_mod(n),
                4 => 0,
                _ => data_disks,
            };
            pd = p;
            qd = None;
            for dd in 0..data_disks {
                data_members.push(match self.layout {
                    0 | 1 => {
                        if dd >= p {
                            dd + 1
                        } else {
                            dd
                        }
                    }
                    2 | 3 => (p + 1 + dd) % n,
                    4 => dd + 1,
                    _ => dd,
                });
            }
        } else {
            let (p, q) = match self.layout {
                0 | 1 | 8 | 9 => {
                    let p = match self.layout {
                        0 => n - 1 - s_mod(n),
                        9 => n - 1 - ((stripe + 1) % n as u64) as usize,
                        _ => s_mod(n),
                    };
                    ddf = self.layout >= 8;
                    (p, if p == n - 1 { 0 } else { p + 1 })
                }
                2 => (n - 1 - s_mod(n), (n - 1 - s_mod(n) + 1) % n),
                3 => (s_mod(n), (s_mod(n) + 1) % n),
                4 => (0, 1),
                5 => (data_disks, data_disks + 1),
                10 => {
                    ddf = true;
                    let p = n - 1 - s_mod(n);
                    (p, (p + n - 1) % n)
                }
                16 | 18 => (data_disks - s_mod(n - 1), n - 1),
                17 | 19 => (s_mod(n - 1), n - 1),
                _ => (0, n - 1), // 20: PARITY_0_6
            };
            pd = p;
            qd = Some(q);
            for dd in 0..data_disks {
                data_members.push(match self.layout {
                    0 | 1 | 8 | 9 => {
                        if p == n - 1 {
                            dd + 1
                        } else if dd >= p {
                            dd + 2
                        } else {
                            dd
                        }
                    }
                    2 | 3 => (p + 2 + dd) % n,
                    4 => dd + 2,
                    5 => dd,
                    10 => (p + 1 + dd) % n,
                    16 | 17 => {
                        if dd >= p {
                            dd + 1
                        } else {
                            dd
                        }
                    }
                    18 | 19 => (p + 1 + dd) % (n - 1),
                    _ => dd + 1,
                });
            }
        }
        let syndrome_slots = match qd {
            None => Vec::new(),
            Some(q) => {
                let mut role = vec![None; n];
                for (dd, &m) in data_members.iter().enumerate() {
                    role[m] = Some(dd);
                }
                if ddf {
                    role
                } else {
                    let d0 = if q == n - 1 { 0 } else { q + 1 };
                    (0..n)
                        .filter_map(|i| role[(d0 + i) % n])
                        .map(Some)
                        .collect()
                }
            }
        };
        StripeInfo {
            data_members,
            p_member: pd,
            q_member: qd,
            syndrome_slots,
            member_sector_start: stripe * self.chunk_sectors,
        }
    }

    /// Whether the array still has every sector with `failed[m]` members gone.
    pub fn survives(&self, failed: &[bool]) -> bool {
        let lost = failed.iter().filter(|&&f| f).count();
        match self.scheme() {
            Scheme::Parity { max_degraded } => lost <= max_degraded,
            Scheme::Copies => match self.level {
                0 => lost == 0,
                1 => lost < self.raid_disks,
                _ => {
                    // RAID10: every chunk must keep a live copy; the copy sets repeat with a
                    // period of at most raid_disks * far chunks, so checking that many suffices.
                    let period =
                        (self.raid_disks * self.r10.map(|r| r.far).unwrap_or(1) * 2) as u64;
                    let chunks = (self.array_sectors / self.chunk_sectors).min(period);
                    (0..chunks).all(|c| {
                        self.copies(c * self.chunk_sectors)
                            .0
                            .iter()
                            .any(|&(m, _)| !failed[m])
                    })
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(g: &Geo, stripes: u64) -> Vec<String> {
        (0..stripes)
            .map(|s| {
                let st = g.stripe(s);
                let mut row = vec![String::from("?"); g.raid_disks];
                for (dd, &m) in st.data_members.iter().enumerate() {
                    row[m] = format!("{}", s * st.data_members.len() as u64 + dd as u64);
                }
                row[st.p_member] = "P".into();
                if let Some(q) = st.q_member {
                    row[q] = "Q".into();
                }
                row.join(" ")
            })
            .collect()
    }

    #[test]
    fn raid5_left_symmetric_table() {
        let g = Geo::new(5, 2, 4, 8, 64).unwrap();
        assert_eq!(table(&g, 4), ["0 1 2 P", "4 5 P 3", "8 P 6 7", "P 9 10 11"]);
    }

    #[test]
    fn raid5_left_asymmetric_table() {
        let g = Geo::new(5, 0, 4, 8, 64).unwrap();
        assert_eq!(table(&g, 4), ["0 1 2 P", "3 4 P 5", "6 P 7 8", "P 9 10 11"]);
    }

    #[test]
    fn raid6_left_symmetric_table_and_slots() {
        let g = Geo::new(6, 2, 5, 8, 64).unwrap();
        // md: P on the last disk first, Q right after it (wrapping to disk 0), data after Q.
        assert_eq!(
            table(&g, 5),
            [
                "Q 0 1 2 P",
                "3 4 5 P Q",
                "7 8 P Q 6",
                "11 P Q 9 10",
                "P Q 12 13 14"
            ]
        );
        // left-symmetric: slot == dd
        for s in 0..5 {
            assert_eq!(g.stripe(s).syndrome_slots, vec![Some(0), Some(1), Some(2)]);
        }
    }

    #[test]
    fn raid6_left_asymmetric_slots_follow_disk_order_after_q() {
        let g = Geo::new(6, 0, 5, 8, 64).unwrap();
        // stripe 1: P on 3, Q on 4 -> d0 = 0: disks 0,1,2 in order
        let st = g.stripe(1);
        assert_eq!((st.p_member, st.q_member), (3, Some(4)));
        // stripe 2: P on 2, Q on 3; data on 0,1,4 as dd 0,1,2; walk from disk 4: 4,0,1
        let st = g.stripe(2);
        assert_eq!((st.p_member, st.q_member), (2, Some(3)));
        assert_eq!(st.data_members, vec![0, 1, 4]);
        assert_eq!(st.syndrome_slots, vec![Some(2), Some(0), Some(1)]);
    }

    #[test]
    fn raid10_near_far_offset_tables() {
        // md.4: n2 on 4 disks: chunk 0 on disks 0,1; chunk 1 on 2,3
        let g = Geo::new(10, 0x102, 4, 8, 800).unwrap();
        assert_eq!(g.copies(0).0, vec![(0, 0), (1, 0)]);
        assert_eq!(g.copies(8).0, vec![(2, 0), (3, 0)]);
        assert_eq!(g.copies(16).0, vec![(0, 8), (1, 8)]);
        // f2 on 4 disks: second copy shifted by one disk in the far half
        let g = Geo::new(10, 0x201, 4, 8, 800).unwrap();
        let half = g.member_data_sectors / 2;
        assert_eq!(g.copies(0).0, vec![(0, 0), (1, half)]);
        assert_eq!(g.copies(24).0, vec![(3, 0), (0, half)]);
        // o2: copy right below, rotated
        let g = Geo::new(10, 0x10201, 4, 8, 800).unwrap();
        assert_eq!(g.copies(0).0, vec![(0, 0), (1, 8)]);
        assert_eq!(g.copies(8 * 4).0, vec![(0, 16), (1, 24)]);
    }

    #[test]
    fn every_stripe_uses_each_member_once() {
        for (level, layouts, n) in [
            (4, vec![0u32, 5], 4usize),
            (5, vec![0, 1, 2, 3, 4, 5], 5),
            (6, vec![0, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 18, 19, 20], 6),
        ] {
            for layout in layouts {
                let g = Geo::new(level, layout, n, 8, 8 * 40).unwrap();
                for s in 0..20 {
                    let st = g.stripe(s);
                    let mut seen = vec![0; n];
                    for &m in &st.data_members {
                        seen[m] += 1;
                    }
                    seen[st.p_member] += 1;
                    if let Some(q) = st.q_member {
                        seen[q] += 1;
                    }
                    assert!(
                        seen.iter().all(|&c| c == 1),
                        "level {level} layout {layout} stripe {s}: {seen:?}"
                    );
                    if level == 6 {
                        let mut dds: Vec<_> = st.syndrome_slots.iter().flatten().copied().collect();
                        dds.sort();
                        assert_eq!(dds, (0..st.data_members.len()).collect::<Vec<_>>());
                    }
                }
            }
        }
    }

    #[test]
    fn raid10_copies_are_distinct_members() {
        for layout in [0x102u32, 0x103, 0x201, 0x202, 0x10201, 0x20201] {
            for n in [4usize, 5, 6] {
                let g = match Geo::new(10, layout, n, 8, 8 * 50) {
                    Ok(g) => g,
                    Err(_) => continue,
                };
                let mut used = std::collections::HashSet::new();
                for c in 0..g.array_sectors() / 8 {
                    let (copies, _) = g.copies(c * 8);
                    let members: std::collections::HashSet<_> =
                        copies.iter().map(|x| x.0).collect();
                    assert_eq!(
                        members.len(),
                        copies.len(),
                        "layout {layout:x} n {n} chunk {c}"
                    );
                    for (m, s) in copies {
                        assert!(s + 8 <= g.member_data_sectors, "layout {layout:x} n {n}");
                        assert!(
                            used.insert((m, s)),
                            "two chunks share a place: layout {layout:x} n {n}"
                        );
                    }
                }
            }
        }
    }
}
