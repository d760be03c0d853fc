//! RAID 4/5/6 placement, copied decision by decision from drivers/md/raid5.c:
//! `raid5_compute_sector` (array sector -> stripe, data index, P and Q members),
//! `raid5_compute_blocknr` (member -> data index) and `raid6_d0` / `raid6_idx_to_slot` /
//! `set_syndrome_sources` (the order of data blocks in the Q syndrome).
//!
//! Notation as in md: `n` = raid_disks, `data_disks` = n - max_degraded, chunk number
//! `c = array_sector / chunk`, stripe `s = c / data_disks`, data index `dd = c % data_disks`.
//! Every member holds stripe `s` at member sectors `s*chunk .. (s+1)*chunk`.
//!
//! Invariants: for every stripe, P, Q and the data members are pairwise distinct and together
//! are all `n` members; `data_index_of_member` inverts `data_member`.

use crate::{Raid5Algorithm, Raid6Algorithm};
use serde::Serialize;

/// Which parity level and algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase", tag = "level", content = "algorithm")]
pub enum ParityAlgorithm {
    /// Level 4: parity always on the last member (md ignores the layout number).
    Raid4,
    Raid5(Raid5Algorithm),
    Raid6(Raid6Algorithm),
}

impl ParityAlgorithm {
    /// md's `max_degraded`: members the level can lose (1 for raid4/5, 2 for raid6).
    #[inline]
    pub fn max_degraded(self) -> u32 {
        match self {
            ParityAlgorithm::Raid4 | ParityAlgorithm::Raid5(_) => 1,
            ParityAlgorithm::Raid6(_) => 2,
        }
    }

    pub fn md_level(self) -> i32 {
        match self {
            ParityAlgorithm::Raid4 => 4,
            ParityAlgorithm::Raid5(_) => 5,
            ParityAlgorithm::Raid6(_) => 6,
        }
    }

    /// md's `sh->ddf_layout`.
    #[inline]
    pub fn is_ddf(self) -> bool {
        matches!(self, ParityAlgorithm::Raid6(a) if a.is_ddf())
    }
}

/// Where P and Q sit in one stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParityMembers {
    pub p: u32,
    pub q: Option<u32>,
}

/// The P member and, for raid6, the Q member of stripe `stripe` (the `pd_idx`/`qd_idx` half of
/// raid5_compute_sector).
#[inline]
pub fn parity_members(alg: ParityAlgorithm, raid_disks: u32, stripe: u64) -> ParityMembers {
    let n = u64::from(raid_disks);
    let data_disks = n - u64::from(alg.max_degraded());
    // `stripe % n` etc. are below raid_disks, so the narrowing casts are lossless.
    let rot = |m: u64| (stripe % m) as u32;
    let n32 = raid_disks;
    let dd32 = data_disks as u32;
    use Raid5Algorithm as R5;
    use Raid6Algorithm as R6;
    match alg {
        ParityAlgorithm::Raid4 => ParityMembers { p: dd32, q: None },
        ParityAlgorithm::Raid5(a) => {
            let p = match a {
                R5::LeftAsymmetric | R5::LeftSymmetric => dd32 - rot(n),
                R5::RightAsymmetric | R5::RightSymmetric => rot(n),
                R5::ParityFirst => 0,
                R5::ParityLast => dd32,
            };
            ParityMembers { p, q: None }
        }
        ParityAlgorithm::Raid6(a) => {
            let (p, q) = match a {
                R6::LeftAsymmetric => asym6_pq(n32, n32 - 1 - rot(n)),
                R6::RightAsymmetric | R6::RotatingZeroRestart => asym6_pq(n32, rot(n)),
                R6::RotatingNRestart => {
                    // md: stripe2 += 1 before the division.
                    let r = ((stripe % n + 1) % n) as u32;
                    asym6_pq(n32, n32 - 1 - r)
                }
                R6::LeftSymmetric => {
                    let p = n32 - 1 - rot(n);
                    (p, (p + 1) % n32)
                }
                R6::RightSymmetric => {
                    let p = rot(n);
                    (p, (p + 1) % n32)
                }
                R6::ParityFirst => (0, 1),
                R6::ParityLast => (dd32, dd32 + 1),
                R6::RotatingNContinue => {
                    let p = n32 - 1 - rot(n);
                    (p, (p + n32 - 1) % n32)
                }
                R6::LeftAsymmetric6 | R6::LeftSymmetric6 => (dd32 - rot(n - 1), n32 - 1),
                R6::RightAsymmetric6 | R6::RightSymmetric6 => (rot(n - 1), n32 - 1),
                R6::ParityFirst6 => (0, n32 - 1),
            };
            ParityMembers { p, q: Some(q) }
        }
    }
}

/// raid6 asymmetric layouts: Q follows P, except that P on the last member puts Q on member 0.
#[inline]
fn asym6_pq(raid_disks: u32, p: u32) -> (u32, u32) {
    if p == raid_disks - 1 {
        (p, 0)
    } else {
        (p, p + 1)
    }
}

/// The member holding data index `dd` of a stripe whose parity sits at `pm` (the `*dd_idx`
/// half of raid5_compute_sector).
#[inline(always)]
pub fn data_member(alg: ParityAlgorithm, raid_disks: u32, pm: ParityMembers, dd: u32) -> u32 {
    let n = raid_disks;
    let pd = pm.p;
    use Raid5Algorithm as R5;
    use Raid6Algorithm as R6;
    match alg {
        ParityAlgorithm::Raid4 => dd,
        ParityAlgorithm::Raid5(a) => match a {
            R5::LeftAsymmetric | R5::RightAsymmetric => {
                if dd >= pd {
                    dd + 1
                } else {
                    dd
                }
            }
            R5::LeftSymmetric | R5::RightSymmetric => (pd + 1 + dd) % n,
            R5::ParityFirst => dd + 1,
            R5::ParityLast => dd,
        },
        ParityAlgorithm::Raid6(a) => match a {
            R6::LeftAsymmetric
            | R6::RightAsymmetric
            | R6::RotatingZeroRestart
            | R6::RotatingNRestart => {
                if pd == n - 1 {
                    dd + 1 // Q D D D P
                } else if dd >= pd {
                    dd + 2 // D D P Q D
                } else {
                    dd
                }
            }
            R6::LeftSymmetric | R6::RightSymmetric => (pd + 2 + dd) % n,
            R6::ParityFirst => dd + 2,
            R6::ParityLast => dd,
            R6::RotatingNContinue => (pd + 1 + dd) % n,
            R6::LeftAsymmetric6 | R6::RightAsymmetric6 => {
                if dd >= pd {
                    dd + 1
                } else {
                    dd
                }
            }
            R6::LeftSymmetric6 | R6::RightSymmetric6 => (pd + 1 + dd) % (n - 1),
            R6::ParityFirst6 => dd + 1,
        },
    }
}

/// The data index held by `member` in a stripe whose parity sits at `pm`, or `None` for the P
/// and Q members (raid5_compute_blocknr's switch, written independently of `data_member`).
#[inline]
pub fn data_index_of_member(
    alg: ParityAlgorithm,
    raid_disks: u32,
    pm: ParityMembers,
    member: u32,
) -> Option<u32> {
    if member == pm.p || Some(member) == pm.q {
        return None;
    }
    let n = raid_disks;
    let data_disks = n - alg.max_degraded();
    let pd = pm.p;
    let i = member;
    use Raid5Algorithm as R5;
    use Raid6Algorithm as R6;
    let dd = match alg {
        ParityAlgorithm::Raid4 => i,
        ParityAlgorithm::Raid5(a) => match a {
            R5::LeftAsymmetric | R5::RightAsymmetric => {
                if i > pd {
                    i - 1
                } else {
                    i
                }
            }
            R5::LeftSymmetric | R5::RightSymmetric => {
                let i = if i < pd { i + n } else { i };
                i - (pd + 1)
            }
            R5::ParityFirst => i - 1,
            R5::ParityLast => i,
        },
        ParityAlgorithm::Raid6(a) => match a {
            R6::LeftAsymmetric
            | R6::RightAsymmetric
            | R6::RotatingZeroRestart
            | R6::RotatingNRestart => {
                if pd == n - 1 {
                    i - 1
                } else if i > pd {
                    i - 2
                } else {
                    i
                }
            }
            R6::LeftSymmetric | R6::RightSymmetric => {
                if pd == n - 1 {
                    i - 1
                } else {
                    let i = if i < pd { i + n } else { i };
                    i - (pd + 2)
                }
            }
            R6::ParityFirst => i - 2,
            R6::ParityLast => i,
            R6::RotatingNContinue => {
                if pd == 0 {
                    i - 1
                } else {
                    let i = if i < pd { i + n } else { i };
                    i - (pd + 1)
                }
            }
            R6::LeftAsymmetric6 | R6::RightAsymmetric6 => {
                if i > pd {
                    i - 1
                } else {
                    i
                }
            }
            R6::LeftSymmetric6 | R6::RightSymmetric6 => {
                let i = if i < pd { i + data_disks + 1 } else { i };
                i - (pd + 1)
            }
            R6::ParityFirst6 => i - 1,
        },
    };
    Some(dd)
}

/// md's raid6_d0: the physical member where the walk that assigns syndrome slots starts.
#[inline]
pub fn raid6_d0(alg: ParityAlgorithm, raid_disks: u32, pm: ParityMembers) -> u32 {
    if alg.is_ddf() {
        return 0;
    }
    match pm.q {
        Some(q) if q != raid_disks - 1 => q + 1,
        _ => 0,
    }
}

/// md's set_syndrome_sources order: entry `k` is the member whose block is syndrome slot `k`
/// (Q = sum of g^k * slot_k). Non-DDF layouts have `raid_disks - 2` entries, all data members,
/// in walk order from `raid6_d0`. DDF layouts have `raid_disks` entries, indexed by physical
/// member, with `None` (a zero block) at the P and Q positions. Empty for raid4/5.
pub fn syndrome_slots(
    alg: ParityAlgorithm,
    raid_disks: u32,
    pm: ParityMembers,
) -> Vec<Option<u32>> {
    SyndromeSlots::new(alg, raid_disks, pm).collect()
}

/// The walk of md's set_syndrome_sources, one slot at a time: from `raid6_d0` round every
/// member, data members taking the next slot (`raid6_idx_to_slot`); DDF layouts give P and Q a
/// slot too, as a zero block.
#[derive(Clone, Debug)]
pub struct SyndromeSlots {
    raid_disks: u32,
    pm: ParityMembers,
    ddf: bool,
    d0: u32,
    /// Steps of the walk taken so far.
    walked: u32,
    /// Slots not handed out yet.
    left: u32,
}

impl SyndromeSlots {
    #[inline]
    fn new(alg: ParityAlgorithm, raid_disks: u32, pm: ParityMembers) -> SyndromeSlots {
        let left = match alg {
            ParityAlgorithm::Raid6(a) if a.is_ddf() => raid_disks,
            ParityAlgorithm::Raid6(_) => raid_disks - 2,
            _ => 0,
        };
        SyndromeSlots {
            raid_disks,
            pm,
            ddf: alg.is_ddf(),
            d0: raid6_d0(alg, raid_disks, pm),
            walked: 0,
            left,
        }
    }
}

impl Iterator for SyndromeSlots {
    type Item = Option<u32>;

    #[inline]
    fn next(&mut self) -> Option<Option<u32>> {
        while self.left > 0 && self.walked < self.raid_disks {
            let i = (self.d0 + self.walked) % self.raid_disks;
            self.walked += 1;
            let is_parity = i == self.pm.p || Some(i) == self.pm.q;
            if self.ddf || !is_parity {
                self.left -= 1;
                return Some((!is_parity).then_some(i));
            }
        }
        None
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for SyndromeSlots {}
impl std::iter::FusedIterator for SyndromeSlots {}

/// One raid4/5/6 stripe as a small copyable value: where its chunks start, its P and Q members,
/// and md's rules for which member holds each data index and each Q-syndrome slot, answered
/// one at a time without allocating. [`crate::StripeMap`] is the same stripe written out (and
/// is built from this).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stripe {
    algorithm: ParityAlgorithm,
    raid_disks: u32,
    chunk_sectors: u32,
    stripe: u64,
    parity: ParityMembers,
}

impl Stripe {
    /// The stripe number (md's `stripe` in raid5_compute_sector: one chunk row).
    #[inline]
    pub fn number(&self) -> u64 {
        self.stripe
    }

    /// Member sector where the stripe's chunk starts on every member.
    #[inline]
    pub fn member_sector_start(&self) -> u64 {
        self.stripe * u64::from(self.chunk_sectors)
    }

    /// First array sector of the stripe.
    #[inline]
    pub fn array_sector_start(&self) -> u64 {
        self.member_sector_start() * u64::from(self.data_disks())
    }

    pub fn algorithm(&self) -> ParityAlgorithm {
        self.algorithm
    }

    #[inline]
    pub fn parity_members(&self) -> ParityMembers {
        self.parity
    }

    #[inline]
    pub fn p_member(&self) -> u32 {
        self.parity.p
    }

    #[inline]
    pub fn q_member(&self) -> Option<u32> {
        self.parity.q
    }

    /// Data chunks in the stripe (raid_disks - max_degraded).
    #[inline]
    pub fn data_disks(&self) -> u32 {
        self.raid_disks - self.algorithm.max_degraded()
    }

    /// The member holding data index `data_index` (md's dd order), or `None` past the last one.
    #[inline]
    pub fn data_member(&self, data_index: u32) -> Option<u32> {
        (data_index < self.data_disks())
            .then(|| data_member(self.algorithm, self.raid_disks, self.parity, data_index))
    }

    /// The members holding data index 0, 1, ... in turn.
    #[inline]
    pub fn data_members(self) -> impl ExactSizeIterator<Item = u32> {
        (0..self.data_disks())
            .map(move |dd| data_member(self.algorithm, self.raid_disks, self.parity, dd))
    }

    /// The data index `member` holds, or `None` for P, Q and members beyond the array.
    #[inline]
    pub fn data_index_of(&self, member: u32) -> Option<u32> {
        if member >= self.raid_disks {
            return None;
        }
        data_index_of_member(self.algorithm, self.raid_disks, self.parity, member)
    }

    /// How many blocks md's Q syndrome takes: raid_disks - 2 for raid6, raid_disks for the DDF
    /// layouts (P and Q in it as zero blocks), 0 for raid4/5.
    #[inline]
    pub fn syndrome_slot_count(&self) -> u32 {
        match self.algorithm {
            ParityAlgorithm::Raid6(a) if a.is_ddf() => self.raid_disks,
            ParityAlgorithm::Raid6(_) => self.raid_disks - 2,
            _ => 0,
        }
    }

    /// md's set_syndrome_sources order: the member whose block is slot 0, 1, ... of the Q
    /// syndrome, `None` for a zero block (DDF layouts). Empty for raid4/5.
    #[inline]
    pub fn syndrome_slots(&self) -> SyndromeSlots {
        SyndromeSlots::new(self.algorithm, self.raid_disks, self.parity)
    }

    /// md's raid6_idx_to_slot for a data member: the Q-syndrome slot holding `member`'s block.
    /// `None` for P, Q, members beyond the array, and raid4/5.
    #[inline]
    pub fn syndrome_slot_of(&self, member: u32) -> Option<u32> {
        let n = self.raid_disks;
        let ParityAlgorithm::Raid6(_) = self.algorithm else {
            return None;
        };
        let is_parity = |i: u32| i == self.parity.p || Some(i) == self.parity.q;
        if member >= n || is_parity(member) {
            return None;
        }
        if self.algorithm.is_ddf() {
            // The walk starts at member 0 and every member, P and Q too, takes a slot.
            return Some(member);
        }
        // The walk from raid6_d0 reaches `member` after `steps` members, of which every one
        // but P and Q took a slot.
        let d0 = raid6_d0(self.algorithm, n, self.parity);
        let walk_pos = |i: u32| (i + n - d0) % n;
        let steps = walk_pos(member);
        let parity_before = [Some(self.parity.p), self.parity.q]
            .into_iter()
            .flatten()
            .filter(|&i| walk_pos(i) < steps)
            .count() as u32;
        Some(steps - parity_before)
    }
}

/// RAID 4/5/6 geometry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ParityGeometry {
    pub(crate) algorithm: ParityAlgorithm,
    pub(crate) md_layout: u32,
    pub(crate) raid_disks: u32,
    pub(crate) chunk_sectors: u32,
    /// Sectors used on every member: the smallest member rounded down to the chunk.
    pub(crate) dev_sectors: u64,
}

impl ParityGeometry {
    pub fn algorithm(&self) -> ParityAlgorithm {
        self.algorithm
    }

    #[inline]
    pub fn data_disks(&self) -> u32 {
        self.raid_disks - self.algorithm.max_degraded()
    }

    #[inline]
    pub fn stripe_count(&self) -> u64 {
        // The chunk is a power of two (checked in Geometry::from_md).
        self.dev_sectors >> self.chunk_sectors.trailing_zeros()
    }

    #[inline]
    pub fn parity_members(&self, stripe: u64) -> ParityMembers {
        parity_members(self.algorithm, self.raid_disks, stripe)
    }

    /// Stripe `stripe` as a [`Stripe`]. The number is not checked against
    /// [`ParityGeometry::stripe_count`] ([`crate::Geometry::stripe`] checks it).
    #[inline]
    pub fn stripe(&self, stripe: u64) -> Stripe {
        Stripe {
            algorithm: self.algorithm,
            raid_disks: self.raid_disks,
            chunk_sectors: self.chunk_sectors,
            stripe,
            parity: self.parity_members(stripe),
        }
    }
}
