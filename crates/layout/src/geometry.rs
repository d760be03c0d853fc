//! `Geometry`: one value per array shape, built once from md's numbers, then asked pure
//! questions (map, unmap, stripe_map, segments). No I/O, no mutation, no hidden state.

use crate::parity::{self, ParityAlgorithm, ParityGeometry, ParityMembers, Stripe};
use crate::raid0::Raid0Geometry;
use crate::raid10::{FindPhys, Raid10Geometry};
use crate::{GeometryError, Level, Raid0Layout, Raid10Layout, Raid5Algorithm, Raid6Algorithm};
use serde::Serialize;

/// md's limit on devices in an array (v1 superblock: `max_dev` up to 1920).
pub const MAX_RAID_DISKS: u32 = 1920;

/// The smallest chunk md accepts for raid4/5/6/10: one 4 KiB page.
pub const MIN_CHUNK_SECTORS_PARITY_RAID10: u32 = 8;

/// The numbers md keeps about an array's shape (superblock `level`, `layout`, `raid_disks`,
/// `chunksize`), plus the usable size of every member role.
///
/// `member_data_sectors[role]` is counted from the member's data_offset. raid0 uses each
/// member's own size (md uses `data_size`); the other levels use the smallest one, so pass the
/// superblock's `size` field for every role to reproduce md's size exactly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MdParams {
    pub level: i32,
    pub layout: u32,
    pub raid_disks: u32,
    pub chunk_sectors: u32,
    pub member_data_sectors: Vec<u64>,
}

/// RAID 1: every member is a full copy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Raid1Geometry {
    pub(crate) raid_disks: u32,
    pub(crate) dev_sectors: u64,
}

/// The shape of an md array. Build it with [`Geometry::from_md`] or one of the constructors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Geometry {
    Raid0(Raid0Geometry),
    Raid1(Raid1Geometry),
    /// RAID 4, 5 and 6.
    Parity(ParityGeometry),
    Raid10(Raid10Geometry),
}

/// One place a piece of array data lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Placement {
    /// Member role (index into md's `dev_roles`).
    pub member: u32,
    /// Sector on the member, relative to its data_offset.
    pub member_sector: u64,
}

/// How a level keeps its data safe, which decides how a request against it is planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "scheme", rename_all = "lowercase")]
pub enum Scheme {
    /// raid0, raid1, raid10: every array sector has `copies` places holding its bytes (one for
    /// raid0), found with [`Geometry::placements`]; no parity.
    Copies { copies: u32 },
    /// raid4/5/6: stripes of data chunks plus P (and Q), found with [`Geometry::stripe`]; any
    /// `max_degraded` members may be lost.
    Parity { max_degraded: u32 },
}

/// Every place one array sector lives, one at a time and without allocating, in md's copy
/// order (the order of [`Mapping::placements`]), with the length of the run from that sector
/// on which every place stays contiguous. Made by [`Geometry::placements`].
#[derive(Clone, Debug)]
pub struct Placements<'a> {
    run_sectors: u64,
    inner: PlacementIter<'a>,
}

#[derive(Clone, Debug)]
enum PlacementIter<'a> {
    /// raid0 and raid4/5/6: one place.
    One(Option<Placement>),
    /// raid1: members `next..raid_disks`, at the array sector itself.
    Mirror {
        next: u32,
        raid_disks: u32,
        member_sector: u64,
    },
    /// raid10: md's __raid10_find_phys.
    Raid10(FindPhys<'a>),
}

impl Placements<'_> {
    /// Sectors from the sector asked about to the end of its chunk (to the end of the array
    /// for raid1, which has no chunk): every place holds them contiguously. The same number as
    /// [`Mapping::sectors_to_chunk_end`].
    #[inline]
    pub fn run_sectors(&self) -> u64 {
        self.run_sectors
    }
}

impl Iterator for Placements<'_> {
    type Item = Placement;

    #[inline]
    fn next(&mut self) -> Option<Placement> {
        match &mut self.inner {
            PlacementIter::One(p) => p.take(),
            PlacementIter::Mirror {
                next,
                raid_disks,
                member_sector,
            } => (*next < *raid_disks).then(|| {
                *next += 1;
                Placement {
                    member: *next - 1,
                    member_sector: *member_sector,
                }
            }),
            PlacementIter::Raid10(f) => f.next(),
        }
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = match &self.inner {
            PlacementIter::One(p) => usize::from(p.is_some()),
            PlacementIter::Mirror {
                next, raid_disks, ..
            } => (raid_disks - next) as usize,
            PlacementIter::Raid10(f) => f.len(),
        };
        (left, Some(left))
    }
}

impl ExactSizeIterator for Placements<'_> {}
impl std::iter::FusedIterator for Placements<'_> {}

/// For raid4/5/6: the stripe an array sector falls in and where its parity lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ParityPlacement {
    pub stripe: u64,
    /// md's `dd_idx` before it is turned into a member: the logical data index in the stripe.
    pub data_index: u32,
    pub p_member: u32,
    pub q_member: Option<u32>,
}

/// Where one array sector lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mapping {
    pub array_sector: u64,
    /// One placement for raid0/4/5/6; every copy for raid1/10, in md's copy order.
    pub placements: Vec<Placement>,
    /// Sectors from `array_sector` to the end of its chunk (to the end of the array for raid1).
    pub sectors_to_chunk_end: u64,
    pub parity: Option<ParityPlacement>,
}

/// What a member sector holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum MemberChunkRole {
    /// Array data; `copy` is the index into `Mapping::placements` (always 0 without mirroring).
    Data {
        array_sector: u64,
        copy: u32,
    },
    Parity {
        stripe: u64,
    },
    Q {
        stripe: u64,
    },
    /// Not part of the array (beyond the used area, or beyond the member's raid0 zones).
    Unused,
}

/// One raid4/5/6 stripe: which member holds what. A stripe here is one chunk row (the `stripe`
/// of md's raid5_compute_sector), not md's 4 KiB `stripe_head`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StripeMap {
    pub stripe: u64,
    /// Member sector where the stripe's chunk starts on every member.
    pub member_sector_start: u64,
    /// First array sector of the stripe.
    pub array_sector_start: u64,
    /// Member holding logical data index 0, 1, ... (md's dd order).
    pub data_members: Vec<u32>,
    pub p_member: u32,
    pub q_member: Option<u32>,
    /// raid6 only: the member for each Q-syndrome slot in md's order; `None` is a zero block
    /// (DDF layouts). Empty for raid4/5.
    pub syndrome_slots: Vec<Option<u32>>,
}

/// A piece of an array request that stays within one chunk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Segment {
    pub array_sector: u64,
    pub len_sectors: u64,
    /// Every placement of the segment's first sector; the segment is contiguous on each.
    pub placements: Vec<Placement>,
    pub parity: Option<ParityPlacement>,
}

/// The part of an array request that falls in one raid4/5/6 stripe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StripeSpan {
    pub stripe: StripeMap,
    /// The pieces of the request in this stripe, in array order, one per touched chunk.
    pub segments: Vec<Segment>,
    /// The request covers every data chunk of the stripe entirely (a full-stripe write needs
    /// no reads).
    pub full_stripe: bool,
}

fn check_chunk(level: i32, chunk_sectors: u32, min_sectors: u32) -> Result<(), GeometryError> {
    if chunk_sectors == 0 {
        return Err(GeometryError::ChunkNotSet { level });
    }
    if !chunk_sectors.is_power_of_two() {
        return Err(GeometryError::ChunkNotPowerOfTwo {
            level,
            chunk_sectors,
        });
    }
    if chunk_sectors < min_sectors {
        return Err(GeometryError::ChunkTooSmall {
            level,
            chunk_sectors,
            min_sectors,
        });
    }
    Ok(())
}

fn check_disks(level: i32, raid_disks: u32, min: u32) -> Result<(), GeometryError> {
    if raid_disks < min {
        return Err(GeometryError::TooFewDisks {
            level,
            raid_disks,
            min,
        });
    }
    Ok(())
}

impl Geometry {
    /// Build a geometry from md's numbers, refusing what md (or mdadm, for disk counts) refuses.
    pub fn from_md(params: &MdParams) -> Result<Geometry, GeometryError> {
        let level = params.level;
        let raid_disks = params.raid_disks;
        let lvl = Level::from_md(level)?;
        if params.member_data_sectors.len() != raid_disks as usize {
            return Err(GeometryError::MemberCountMismatch {
                raid_disks,
                members: params.member_data_sectors.len(),
            });
        }
        if raid_disks > MAX_RAID_DISKS {
            return Err(GeometryError::TooManyDisks {
                raid_disks,
                max: MAX_RAID_DISKS,
            });
        }
        let min_dev = params.member_data_sectors.iter().copied().min();
        match lvl {
            Level::Raid0 => {
                check_disks(level, raid_disks, 1)?;
                check_chunk(level, params.chunk_sectors, 1)?;
                Ok(Geometry::Raid0(Raid0Geometry::new(
                    params.layout,
                    params.chunk_sectors,
                    &params.member_data_sectors,
                )?))
            }
            Level::Raid1 => {
                check_disks(level, raid_disks, 1)?;
                let dev_sectors = min_dev.unwrap_or(0);
                if dev_sectors == 0 {
                    return Err(GeometryError::MemberTooSmall {
                        member: 0,
                        sectors: 0,
                        min_sectors: 1,
                    });
                }
                Ok(Geometry::Raid1(Raid1Geometry {
                    raid_disks,
                    dev_sectors,
                }))
            }
            Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                let algorithm = match lvl {
                    Level::Raid4 => ParityAlgorithm::Raid4,
                    Level::Raid5 => ParityAlgorithm::Raid5(Raid5Algorithm::from_md(params.layout)?),
                    _ => ParityAlgorithm::Raid6(Raid6Algorithm::from_md(params.layout)?),
                };
                let min_disks = if level == 6 { 4 } else { 2 };
                check_disks(level, raid_disks, min_disks)?;
                check_chunk(level, params.chunk_sectors, MIN_CHUNK_SECTORS_PARITY_RAID10)?;
                let chunk = u64::from(params.chunk_sectors);
                let dev_sectors = min_dev.unwrap_or(0) / chunk * chunk;
                if dev_sectors == 0 {
                    return Err(GeometryError::MemberTooSmall {
                        member: 0,
                        sectors: min_dev.unwrap_or(0),
                        min_sectors: chunk,
                    });
                }
                let data_disks = u64::from(raid_disks - algorithm.max_degraded());
                dev_sectors
                    .checked_mul(data_disks)
                    .ok_or(GeometryError::SizeOverflow)?;
                Ok(Geometry::Parity(ParityGeometry {
                    algorithm,
                    md_layout: params.layout,
                    raid_disks,
                    chunk_sectors: params.chunk_sectors,
                    dev_sectors,
                }))
            }
            Level::Raid10 => {
                let layout = Raid10Layout::from_md(params.layout)?;
                check_disks(level, raid_disks, 2)?;
                check_chunk(level, params.chunk_sectors, MIN_CHUNK_SECTORS_PARITY_RAID10)?;
                Ok(Geometry::Raid10(Raid10Geometry::new(
                    layout,
                    raid_disks,
                    params.chunk_sectors,
                    min_dev.unwrap_or(0),
                )?))
            }
            // Level::from_md only returns md's own levels.
            Level::Raid1E | Level::Raid50 | Level::Raid60 => {
                Err(GeometryError::UnsupportedLevel { level })
            }
        }
    }

    /// RAID 0 over members of the given usable sizes.
    pub fn raid0(
        layout: Raid0Layout,
        chunk_sectors: u32,
        member_data_sectors: &[u64],
    ) -> Result<Geometry, GeometryError> {
        Geometry::from_md(&MdParams {
            level: 0,
            layout: layout.md_layout(),
            raid_disks: member_data_sectors.len() as u32,
            chunk_sectors,
            member_data_sectors: member_data_sectors.to_vec(),
        })
    }

    /// RAID 1 with `raid_disks` copies of `dev_sectors`.
    pub fn raid1(raid_disks: u32, dev_sectors: u64) -> Result<Geometry, GeometryError> {
        Geometry::from_md(&MdParams {
            level: 1,
            layout: 0,
            raid_disks,
            chunk_sectors: 0,
            member_data_sectors: vec![dev_sectors; raid_disks as usize],
        })
    }

    /// RAID 4 (parity on the last member), equal members.
    pub fn raid4(
        raid_disks: u32,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<Geometry, GeometryError> {
        Geometry::from_md(&MdParams {
            level: 4,
            layout: Raid5Algorithm::ParityLast.md_layout(),
            raid_disks,
            chunk_sectors,
            member_data_sectors: vec![dev_sectors; raid_disks as usize],
        })
    }

    /// RAID 5, equal members.
    pub fn raid5(
        algorithm: Raid5Algorithm,
        raid_disks: u32,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<Geometry, GeometryError> {
        Geometry::from_md(&MdParams {
            level: 5,
            layout: algorithm.md_layout(),
            raid_disks,
            chunk_sectors,
            member_data_sectors: vec![dev_sectors; raid_disks as usize],
        })
    }

    /// RAID 6, equal members.
    pub fn raid6(
        algorithm: Raid6Algorithm,
        raid_disks: u32,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<Geometry, GeometryError> {
        Geometry::from_md(&MdParams {
            level: 6,
            layout: algorithm.md_layout(),
            raid_disks,
            chunk_sectors,
            member_data_sectors: vec![dev_sectors; raid_disks as usize],
        })
    }

    /// RAID 10, equal members.
    pub fn raid10(
        layout: Raid10Layout,
        raid_disks: u32,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<Geometry, GeometryError> {
        Geometry::from_md(&MdParams {
            level: 10,
            layout: layout.md_layout(),
            raid_disks,
            chunk_sectors,
            member_data_sectors: vec![dev_sectors; raid_disks as usize],
        })
    }

    /// RAID 1E: md's raid10 with two near copies, on any number of devices (3 and up gives the
    /// classic 1E pattern; 2 devices is plain mirroring).
    pub fn raid1e(
        raid_disks: u32,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<Geometry, GeometryError> {
        Geometry::raid10(
            Raid10Layout::near(2),
            raid_disks,
            chunk_sectors,
            dev_sectors,
        )
    }

    /// md's level number.
    pub fn md_level(&self) -> i32 {
        match self {
            Geometry::Raid0(_) => 0,
            Geometry::Raid1(_) => 1,
            Geometry::Parity(g) => g.algorithm.md_level(),
            Geometry::Raid10(_) => 10,
        }
    }

    /// md's layout number, as it would be written to the superblock.
    pub fn md_layout(&self) -> u32 {
        match self {
            Geometry::Raid0(g) => g.md_layout,
            Geometry::Raid1(_) => 0,
            Geometry::Parity(g) => g.md_layout,
            Geometry::Raid10(g) => g.layout.md_layout(),
        }
    }

    pub fn level(&self) -> Level {
        match self {
            Geometry::Raid0(_) => Level::Raid0,
            Geometry::Raid1(_) => Level::Raid1,
            Geometry::Parity(g) => match g.algorithm {
                ParityAlgorithm::Raid4 => Level::Raid4,
                ParityAlgorithm::Raid5(_) => Level::Raid5,
                ParityAlgorithm::Raid6(_) => Level::Raid6,
            },
            Geometry::Raid10(_) => Level::Raid10,
        }
    }

    #[inline]
    pub fn raid_disks(&self) -> u32 {
        match self {
            Geometry::Raid0(g) => g.raid_disks,
            Geometry::Raid1(g) => g.raid_disks,
            Geometry::Parity(g) => g.raid_disks,
            Geometry::Raid10(g) => g.raid_disks,
        }
    }

    /// Chunk size in sectors (0 for raid1, which has none).
    #[inline]
    pub fn chunk_sectors(&self) -> u32 {
        match self {
            Geometry::Raid0(g) => g.chunk_sectors,
            Geometry::Raid1(_) => 0,
            Geometry::Parity(g) => g.chunk_sectors,
            Geometry::Raid10(g) => g.chunk_sectors,
        }
    }

    /// How many members hold each array sector: raid_disks for raid1, near x far for raid10,
    /// 1 otherwise.
    #[inline]
    pub fn copies(&self) -> u32 {
        match self {
            Geometry::Raid1(g) => g.raid_disks,
            Geometry::Raid10(g) => g.layout.copies(),
            Geometry::Raid0(_) | Geometry::Parity(_) => 1,
        }
    }

    /// Data chunks per stripe for raid4/5/6 (raid_disks - max_degraded); `None` otherwise.
    #[inline]
    pub fn data_disks(&self) -> Option<u32> {
        match self {
            Geometry::Parity(g) => Some(g.data_disks()),
            _ => None,
        }
    }

    /// Members that can fail without losing data, in the best case for the worst placement:
    /// raid0 0, raid1 n-1, raid4/5 1, raid6 2, raid10 copies-1.
    #[inline]
    pub fn max_degraded(&self) -> u32 {
        match self {
            Geometry::Raid0(_) => 0,
            Geometry::Raid1(g) => g.raid_disks - 1,
            Geometry::Parity(g) => g.algorithm.max_degraded(),
            Geometry::Raid10(g) => g.layout.copies() - 1,
        }
    }

    /// Copies or parity, and how many of either.
    #[inline]
    pub fn scheme(&self) -> Scheme {
        match self {
            Geometry::Parity(g) => Scheme::Parity {
                max_degraded: g.algorithm.max_degraded(),
            },
            _ => Scheme::Copies {
                copies: self.copies(),
            },
        }
    }

    /// Whether every array sector can still be read with the members `m` for which
    /// `failed[m]` is true gone (members beyond the end of `failed` are present): raid0 loses
    /// data with any member, raid1 with all of them, raid4/5/6 with more than `max_degraded`,
    /// and raid10 when some chunk loses every copy, whichever members those are.
    pub fn survives(&self, failed: &[bool]) -> bool {
        let gone = |m: u32| failed.get(m as usize).copied().unwrap_or(false);
        let lost = (0..self.raid_disks()).filter(|&m| gone(m)).count() as u32;
        match self {
            Geometry::Raid0(_) => lost == 0,
            Geometry::Raid1(g) => lost < g.raid_disks,
            Geometry::Parity(g) => lost <= g.algorithm.max_degraded(),
            Geometry::Raid10(g) => {
                // Counting is not enough (`lost < copies`): in some shapes md puts two copies
                // of a chunk on one member. The members holding array chunk c follow from md's
                // `dev = (c * near) % raid_disks` alone (__raid10_find_phys derives every copy
                // from it), so the first raid_disks chunks show every set of copies there is.
                let chunk = u64::from(g.chunk_sectors);
                let chunks = (g.array_sectors / chunk).min(u64::from(g.raid_disks));
                (0..chunks).all(|c| g.find_phys(c * chunk).any(|p| !gone(p.member)))
            }
        }
    }

    /// The array's size in sectors, as md computes it.
    #[inline]
    pub fn array_sectors(&self) -> u64 {
        match self {
            Geometry::Raid0(g) => g.array_sectors(),
            Geometry::Raid1(g) => g.dev_sectors,
            // Checked not to overflow at construction.
            Geometry::Parity(g) => g.dev_sectors * u64::from(g.data_disks()),
            Geometry::Raid10(g) => g.array_sectors,
        }
    }

    /// Sectors used on `member` from its data_offset (what resync and rebuild must cover).
    pub fn member_used_sectors(&self, member: u32) -> u64 {
        if member >= self.raid_disks() {
            return 0;
        }
        match self {
            Geometry::Raid0(g) => g
                .zones
                .iter()
                .filter(|z| z.members.contains(&member))
                .map(|z| z.dev_sectors())
                .sum(),
            Geometry::Raid1(g) => g.dev_sectors,
            Geometry::Parity(g) => g.dev_sectors,
            Geometry::Raid10(g) => g.dev_sectors,
        }
    }

    #[inline]
    fn check_range(&self, array_sector: u64, len_sectors: u64) -> Result<(), GeometryError> {
        let array_sectors = self.array_sectors();
        let end = array_sector.checked_add(len_sectors);
        match end {
            Some(end) if array_sector < array_sectors && end <= array_sectors => Ok(()),
            _ => Err(GeometryError::ArraySectorOutOfRange {
                array_sector,
                len_sectors,
                array_sectors,
            }),
        }
    }

    /// Where `array_sector` lives.
    pub fn map(&self, array_sector: u64) -> Result<Mapping, GeometryError> {
        self.check_range(array_sector, 1)?;
        Ok(self.map_in_range(array_sector))
    }

    /// Every place `array_sector` lives and how far the run goes from there, without
    /// allocating: what [`Geometry::map`] returns as `placements` and
    /// `sectors_to_chunk_end`, for callers that plan many requests.
    #[inline]
    pub fn placements(&self, array_sector: u64) -> Result<Placements<'_>, GeometryError> {
        self.check_range(array_sector, 1)?;
        Ok(self.placements_in_range(array_sector))
    }

    /// `placements` for a sector already known to be inside the array.
    #[inline]
    fn placements_in_range(&self, array_sector: u64) -> Placements<'_> {
        let run_sectors = self.run_sectors_in_range(array_sector);
        let inner = match self {
            // map_in_range only fails beyond the last zone, which check_range excluded.
            Geometry::Raid0(g) => PlacementIter::One(g.map_in_range(array_sector)),
            Geometry::Raid1(g) => PlacementIter::Mirror {
                next: 0,
                raid_disks: g.raid_disks,
                member_sector: array_sector,
            },
            Geometry::Parity(g) => PlacementIter::One(Some(compute_sector(g, array_sector).0)),
            Geometry::Raid10(g) => PlacementIter::Raid10(g.find_phys(array_sector)),
        };
        Placements { run_sectors, inner }
    }

    /// Sectors from `array_sector` to the end of its chunk, or of the array for raid1.
    #[inline]
    fn run_sectors_in_range(&self, array_sector: u64) -> u64 {
        match u64::from(self.chunk_sectors()) {
            0 => self.array_sectors() - array_sector,
            // Every chunk is a power of two (checked in from_md).
            chunk => chunk - (array_sector & (chunk - 1)),
        }
    }

    /// `map` for a sector already known to be inside the array: the answers of
    /// `placements_in_range`, collected level by level (a `Vec` fills faster from each level's
    /// own iterator than from the `Placements` enum).
    fn map_in_range(&self, array_sector: u64) -> Mapping {
        let sectors_to_chunk_end = self.run_sectors_in_range(array_sector);
        match self {
            Geometry::Raid0(g) => Mapping {
                array_sector,
                // map_in_range only fails beyond the last zone, which check_range excluded.
                placements: g.map_in_range(array_sector).into_iter().collect(),
                sectors_to_chunk_end,
                parity: None,
            },
            Geometry::Raid1(g) => Mapping {
                array_sector,
                placements: (0..g.raid_disks)
                    .map(|member| Placement {
                        member,
                        member_sector: array_sector,
                    })
                    .collect(),
                sectors_to_chunk_end,
                parity: None,
            },
            Geometry::Parity(g) => {
                let (placement, parity) = compute_sector(g, array_sector);
                Mapping {
                    array_sector,
                    placements: vec![placement],
                    sectors_to_chunk_end,
                    parity: Some(parity),
                }
            }
            Geometry::Raid10(g) => {
                // Pushed by hand: `collect` from this iterator took Vec's generic from_iter
                // path, about a third more instructions per raid10 map (callgrind, map_rate).
                let copies = g.find_phys(array_sector);
                let mut placements = Vec::with_capacity(copies.len());
                for p in copies {
                    placements.push(p);
                }
                Mapping {
                    array_sector,
                    placements,
                    sectors_to_chunk_end,
                    parity: None,
                }
            }
        }
    }

    /// What `member_sector` on `member` holds.
    pub fn unmap(&self, member: u32, member_sector: u64) -> Result<MemberChunkRole, GeometryError> {
        let raid_disks = self.raid_disks();
        if member >= raid_disks {
            return Err(GeometryError::MemberOutOfRange { member, raid_disks });
        }
        Ok(match self {
            Geometry::Raid0(g) => g.unmap(member, member_sector),
            Geometry::Raid1(g) => {
                if member_sector < g.dev_sectors {
                    MemberChunkRole::Data {
                        array_sector: member_sector,
                        copy: member,
                    }
                } else {
                    MemberChunkRole::Unused
                }
            }
            Geometry::Parity(g) => compute_blocknr(g, member, member_sector),
            Geometry::Raid10(g) => g.unmap(member, member_sector),
        })
    }

    /// Number of raid4/5/6 stripes (chunk rows) in the array.
    pub fn stripe_count(&self) -> Result<u64, GeometryError> {
        match self {
            Geometry::Parity(g) => Ok(g.stripe_count()),
            _ => Err(GeometryError::NotAParityLevel {
                level: self.md_level(),
            }),
        }
    }

    /// Raid4/5/6 stripe `stripe` as a small value that answers which member holds what
    /// without allocating ([`Geometry::stripe_map`] writes the same out).
    #[inline]
    pub fn stripe(&self, stripe: u64) -> Result<Stripe, GeometryError> {
        let Geometry::Parity(g) = self else {
            return Err(GeometryError::NotAParityLevel {
                level: self.md_level(),
            });
        };
        let stripe_count = g.stripe_count();
        if stripe >= stripe_count {
            return Err(GeometryError::StripeOutOfRange {
                stripe,
                stripe_count,
            });
        }
        Ok(g.stripe(stripe))
    }

    /// Which member holds what in raid4/5/6 stripe `stripe`.
    pub fn stripe_map(&self, stripe: u64) -> Result<StripeMap, GeometryError> {
        self.stripe(stripe).map(StripeMap::from)
    }

    /// Split `len_sectors` from `array_sector` into pieces that never cross a chunk boundary.
    pub fn segments(
        &self,
        array_sector: u64,
        len_sectors: u64,
    ) -> Result<Segments<'_>, GeometryError> {
        if len_sectors > 0 {
            self.check_range(array_sector, len_sectors)?;
        }
        Ok(Segments {
            geometry: self,
            next_sector: array_sector,
            end_sector: array_sector + len_sectors,
        })
    }

    /// Group a request by raid4/5/6 stripe, for planning full-stripe versus partial writes.
    pub fn stripe_spans(
        &self,
        array_sector: u64,
        len_sectors: u64,
    ) -> Result<Vec<StripeSpan>, GeometryError> {
        let Geometry::Parity(g) = self else {
            return Err(GeometryError::NotAParityLevel {
                level: self.md_level(),
            });
        };
        let chunk = u64::from(g.chunk_sectors);
        let stripe_data_sectors = chunk * u64::from(g.data_disks());
        let mut spans: Vec<StripeSpan> = Vec::new();
        for segment in self.segments(array_sector, len_sectors)? {
            let Some(parity) = segment.parity else {
                continue;
            };
            let need_new = match spans.last() {
                Some(span) => span.stripe.stripe != parity.stripe,
                None => true,
            };
            if need_new {
                spans.push(StripeSpan {
                    stripe: stripe_map_of(g, parity.stripe),
                    segments: Vec::new(),
                    full_stripe: false,
                });
            }
            if let Some(span) = spans.last_mut() {
                span.segments.push(segment);
            }
        }
        for span in &mut spans {
            let covered: u64 = span.segments.iter().map(|s| s.len_sectors).sum();
            span.full_stripe = covered == stripe_data_sectors;
        }
        Ok(spans)
    }
}

/// raid5_compute_sector for an in-range array sector.
#[inline]
fn compute_sector(g: &ParityGeometry, array_sector: u64) -> (Placement, ParityPlacement) {
    let chunk = u64::from(g.chunk_sectors);
    // The chunk is a power of two (checked in Geometry::from_md): shifts, not divisions.
    let chunk_offset = array_sector & (chunk - 1);
    let chunk_number = array_sector >> g.chunk_sectors.trailing_zeros();
    let data_disks = u64::from(g.data_disks());
    let stripe = chunk_number / data_disks;
    // Below data_disks, so it fits in u32.
    let dd = (chunk_number % data_disks) as u32;
    let pm = g.parity_members(stripe);
    let member = parity::data_member(g.algorithm, g.raid_disks, pm, dd);
    (
        Placement {
            member,
            member_sector: stripe * chunk + chunk_offset,
        },
        ParityPlacement {
            stripe,
            data_index: dd,
            p_member: pm.p,
            q_member: pm.q,
        },
    )
}

/// raid5_compute_blocknr: what a member sector holds.
fn compute_blocknr(g: &ParityGeometry, member: u32, member_sector: u64) -> MemberChunkRole {
    if member_sector >= g.dev_sectors {
        return MemberChunkRole::Unused;
    }
    let chunk = u64::from(g.chunk_sectors);
    let stripe = member_sector / chunk;
    let chunk_offset = member_sector % chunk;
    let pm: ParityMembers = g.parity_members(stripe);
    if member == pm.p {
        return MemberChunkRole::Parity { stripe };
    }
    if Some(member) == pm.q {
        return MemberChunkRole::Q { stripe };
    }
    match parity::data_index_of_member(g.algorithm, g.raid_disks, pm, member) {
        Some(dd) => {
            let chunk_number = stripe * u64::from(g.data_disks()) + u64::from(dd);
            MemberChunkRole::Data {
                array_sector: chunk_number * chunk + chunk_offset,
                copy: 0,
            }
        }
        None => MemberChunkRole::Unused,
    }
}

fn stripe_map_of(g: &ParityGeometry, stripe: u64) -> StripeMap {
    StripeMap::from(g.stripe(stripe))
}

impl From<Stripe> for StripeMap {
    fn from(st: Stripe) -> StripeMap {
        StripeMap {
            stripe: st.number(),
            member_sector_start: st.member_sector_start(),
            array_sector_start: st.array_sector_start(),
            data_members: st.data_members().collect(),
            p_member: st.p_member(),
            q_member: st.q_member(),
            syndrome_slots: st.syndrome_slots().collect(),
        }
    }
}

/// Iterator over the chunk-bounded pieces of a request (see [`Geometry::segments`]).
#[derive(Clone, Debug)]
pub struct Segments<'a> {
    geometry: &'a Geometry,
    next_sector: u64,
    end_sector: u64,
}

impl Iterator for Segments<'_> {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        if self.next_sector >= self.end_sector {
            return None;
        }
        let mapping = self.geometry.map_in_range(self.next_sector);
        let len_sectors = mapping
            .sectors_to_chunk_end
            .min(self.end_sector - self.next_sector);
        let segment = Segment {
            array_sector: self.next_sector,
            len_sectors,
            placements: mapping.placements,
            parity: mapping.parity,
        };
        self.next_sector += len_sectors;
        Some(segment)
    }
}
