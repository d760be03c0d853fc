//! The array's geometry as the engine plans with it: a thin wrapper around raidkit_layout's
//! typed [`Geometry`], which is the one statement of md's placement in raidkit (raid0.c zones,
//! raid5.c `raid5_compute_sector` and the Q-syndrome order, raid10.c `__raid10_find_phys` and
//! `calc_sectors`), tested with inverses and golden tables and checked against md-written
//! arrays. No placement formula lives here.
//!
//! What the wrapper adds is the engine's side: the planner's index type (`usize` members), the
//! two views the planner takes of a sector ([`Geo::copies`] for RAID 0/1/10, [`Geo::stripe`]
//! for RAID 4/5/6, with the Q-syndrome slots named by data index as the planner walks them),
//! and the engine's own limits on what it runs. `raid_disks`, `chunk_sectors` and
//! `member_data_sectors` are read on every request and by the engine's callers, so they are
//! copied out of the geometry once, as fields.
//!
//! Invariants: a `Geo` is checked once in [`Geo::new`]; afterwards every method is total for
//! sectors below [`Geo::array_sectors`] and stripes below the last one, and every RAID-6 stripe
//! fits the parity kernels ([`raidkit_parity::MAX_DATA_SLOTS`] syndrome slots).

use raidkit_layout::{Geometry, GeometryError, Level, MdParams};
use std::fmt;

pub use raidkit_layout::Scheme;

/// The most members the engine runs in one array.
pub const MAX_RAID_DISKS: usize = 256;

/// The smallest chunk the engine runs: one 4 KiB page (md's own minimum for RAID 4/5/6/10).
pub const MIN_CHUNK_SECTORS: u64 = 8;

/// Why a geometry is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GeoError {
    /// md (or mdadm) refuses the shape; the layout crate names the rule.
    Md(GeometryError),
    /// More members than the engine runs.
    TooManyMembers { raid_disks: usize, max: usize },
    /// A chunk below one 4 KiB page. md's raid0 would take it, but the engine's member I/O
    /// (direct I/O among it) moves whole 4 KiB pages.
    ChunkBelowPage { chunk_sectors: u64 },
    /// A RAID-6 stripe whose Q syndrome takes more blocks than GF(2^8) has coefficients g^i
    /// (the DDF layouts give every member a slot, so they stop one member earlier).
    TooManySyndromeSlots { slots: u32, max: usize },
}

impl fmt::Display for GeoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GeoError::Md(e) => e.fmt(f),
            GeoError::TooManyMembers { raid_disks, max } => write!(
                f,
                "{raid_disks} raid devices: raidkit runs arrays of at most {max}"
            ),
            GeoError::ChunkBelowPage { chunk_sectors } => write!(
                f,
                "chunk of {} bytes: raidkit needs chunks of at least 4 KiB",
                chunk_sectors * 512
            ),
            GeoError::TooManySyndromeSlots { slots, max } => write!(
                f,
                "a stripe of this RAID 6 layout puts {slots} blocks in its Q syndrome, more than \
                 the {max} distinct coefficients of GF(2^8)"
            ),
        }
    }
}

impl std::error::Error for GeoError {}

impl From<GeometryError> for GeoError {
    fn from(e: GeometryError) -> GeoError {
        GeoError::Md(e)
    }
}

/// The array's geometry, as the planner uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geo {
    geometry: Geometry,
    /// Members (md's raid_disks). A copy of the geometry's; changing it changes nothing else.
    pub raid_disks: usize,
    /// Chunk size in sectors; 0 for RAID 1, which has none. A copy of the geometry's.
    pub chunk_sectors: u64,
    /// Sectors every member holds array data in, from its data offset (whole chunks): what
    /// rebuild and resync cover. A copy of the geometry's.
    pub member_data_sectors: u64,
}

/// One stripe of a parity level, in the planner's terms: which member holds what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeInfo {
    /// `data_members[dd]` is the member holding data index `dd`.
    pub data_members: Vec<usize>,
    pub p_member: usize,
    pub q_member: Option<usize>,
    /// Q syndrome slots in md's order: `Some(dd)` is data index `dd`, `None` a zero block
    /// (DDF layouts put P and Q positions in the slot list as zeroes). Empty for RAID 4/5.
    pub syndrome_slots: Vec<Option<usize>>,
    /// Member sector where this stripe's chunks start (relative to the data offset).
    pub member_sector_start: u64,
}

impl Geo {
    /// Checks md's numbers as the superblock holds them; `member_data_sectors` is the usable
    /// size of the smallest member (every level is planned over equal members).
    pub fn new(
        level: i32,
        layout: u32,
        raid_disks: usize,
        chunk_sectors: u64,
        member_data_sectors: u64,
    ) -> Result<Geo, GeoError> {
        if raid_disks > MAX_RAID_DISKS {
            return Err(GeoError::TooManyMembers {
                raid_disks,
                max: MAX_RAID_DISKS,
            });
        }
        let geometry = Geometry::from_md(&MdParams {
            level,
            layout,
            raid_disks: raid_disks as u32,
            // A chunk beyond u32 is no chunk md has; the layout crate refuses it as too small.
            chunk_sectors: u32::try_from(chunk_sectors).unwrap_or(0),
            member_data_sectors: vec![member_data_sectors; raid_disks],
        })?;
        Geo::from_geometry(geometry)
    }

    /// Wraps a geometry the layout crate built, checking the engine's own limits.
    pub fn from_geometry(geometry: Geometry) -> Result<Geo, GeoError> {
        let raid_disks = geometry.raid_disks() as usize;
        if raid_disks > MAX_RAID_DISKS {
            return Err(GeoError::TooManyMembers {
                raid_disks,
                max: MAX_RAID_DISKS,
            });
        }
        let chunk_sectors = u64::from(geometry.chunk_sectors());
        if chunk_sectors != 0 && chunk_sectors < MIN_CHUNK_SECTORS {
            return Err(GeoError::ChunkBelowPage { chunk_sectors });
        }
        if let Ok(stripe) = geometry.stripe(0) {
            // Every stripe of a layout has the same number of slots.
            let slots = stripe.syndrome_slot_count();
            if slots as usize > raidkit_parity::MAX_DATA_SLOTS {
                return Err(GeoError::TooManySyndromeSlots {
                    slots,
                    max: raidkit_parity::MAX_DATA_SLOTS,
                });
            }
        }
        Ok(Geo {
            raid_disks,
            chunk_sectors,
            member_data_sectors: geometry.member_used_sectors(0),
            geometry,
        })
    }

    /// The typed geometry every placement question goes to.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn level(&self) -> Level {
        self.geometry.level()
    }

    /// md's level number, as the superblock holds it.
    pub fn md_level(&self) -> i32 {
        self.geometry.md_level()
    }

    /// md's layout number, as the superblock holds it.
    pub fn md_layout(&self) -> u32 {
        self.geometry.md_layout()
    }

    pub fn array_sectors(&self) -> u64 {
        self.geometry.array_sectors()
    }

    /// Copies or parity, which decides how a request is planned.
    pub fn scheme(&self) -> Scheme {
        self.geometry.scheme()
    }

    /// Data chunks per stripe of RAID 4/5/6; for RAID 0/1/10, which have no stripes, the
    /// members' worth of distinct data in a row of chunks (raid_disks / copies).
    pub fn data_disks(&self) -> usize {
        match self.geometry.data_disks() {
            Some(d) => d as usize,
            None => self.raid_disks / self.geometry.copies() as usize,
        }
    }

    /// Every copy of `array_sector` as (member, member sector), in md's order, and how many
    /// sectors from there stay contiguous on every copy.
    ///
    /// Panics when `array_sector` is not below [`Geo::array_sectors`]: the planner only asks
    /// about sectors of requests it has checked against the array size.
    pub fn copies(&self, array_sector: u64) -> (Vec<(usize, u64)>, u64) {
        let placements = self
            .geometry
            .placements(array_sector)
            .unwrap_or_else(|e| panic!("the planner asked beyond the array: {e}"));
        let run = placements.run_sectors();
        // Pushed by hand into an exact-size Vec: `collect` through the adapter takes Vec's
        // generic from_iter path, which counted more instructions per call under callgrind.
        let mut copies = Vec::with_capacity(placements.len());
        for p in placements {
            copies.push((p.member as usize, p.member_sector));
        }
        (copies, run)
    }

    /// Stripe `stripe` of a parity level: its members by data index, P, Q and md's
    /// Q-syndrome order by data index.
    ///
    /// Panics for a level without parity (and, in debug builds, for a stripe beyond the last):
    /// the planner asks only about stripes of a parity array's checked requests and member
    /// ranges.
    pub fn stripe(&self, stripe: u64) -> StripeInfo {
        let Geometry::Parity(g) = &self.geometry else {
            panic!("the planner asked for stripe {stripe} of a level without parity");
        };
        // Unchecked (`Geometry::stripe` would divide to count the stripes on every call);
        // stripes beyond the array come only from a planner bug.
        debug_assert!(
            stripe < g.stripe_count(),
            "stripe {stripe} beyond the array"
        );
        let st = g.stripe(stripe);
        let mut data_members = Vec::with_capacity(st.data_disks() as usize);
        // Slot -> data index, filled from each data member's slot (md's raid6_idx_to_slot);
        // slots no data member takes are DDF's zero blocks.
        data_members.extend(st.data_members().map(|m| m as usize));
        let mut syndrome_slots = vec![None; st.syndrome_slot_count() as usize];
        if !syndrome_slots.is_empty() {
            for (dd, &m) in data_members.iter().enumerate() {
                if let Some(slot) = st.syndrome_slot_of(m as u32) {
                    syndrome_slots[slot as usize] = Some(dd);
                }
            }
        }
        StripeInfo {
            data_members,
            p_member: st.p_member() as usize,
            q_member: st.q_member().map(|q| q as usize),
            syndrome_slots,
            member_sector_start: st.member_sector_start(),
        }
    }

    /// Whether the array still has every sector with the members `failed[m]` gone.
    pub fn survives(&self, failed: &[bool]) -> bool {
        self.geometry.survives(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_limits_are_errors() {
        assert!(matches!(
            Geo::new(5, 2, 257, 8, 64),
            Err(GeoError::TooManyMembers {
                raid_disks: 257,
                ..
            })
        ));
        // ddf-N-continue on 256 members: every member is a syndrome slot.
        assert_eq!(
            Geo::new(6, 10, 256, 8, 64),
            Err(GeoError::TooManySyndromeSlots {
                slots: 256,
                max: 255
            })
        );
        // The md layouts on 256 members have 254 slots, and run.
        assert!(Geo::new(6, 2, 256, 8, 64).is_ok());
        assert!(Geo::new(6, 10, 255, 8, 64).is_ok());
        assert_eq!(
            Geo::new(0, 0, 4, 4, 64),
            Err(GeoError::ChunkBelowPage { chunk_sectors: 4 })
        );
        assert!(Geo::new(0, 0, 4, 8, 64).is_ok());
        assert!(matches!(
            Geo::new(5, 6, 4, 8, 64),
            Err(GeoError::Md(GeometryError::InvalidRaid5Layout {
                layout: 6
            }))
        ));
    }

    #[test]
    fn the_fields_are_the_geometrys() {
        // RAID 10 n2 on 5 members of 1000 sectors, chunk 16: calc_sectors uses 992 per member.
        let g = Geo::new(10, 0x102, 5, 16, 1000).unwrap();
        assert_eq!(
            (g.raid_disks, g.chunk_sectors, g.member_data_sectors),
            (5, 16, 992)
        );
        assert_eq!(g.array_sectors(), 992 * 5 / 2);
        assert_eq!(g.level(), Level::Raid10);
        assert_eq!((g.md_level(), g.md_layout()), (10, 0x102));
        let g = Geo::new(1, 0, 3, 0, 1000).unwrap();
        assert_eq!(
            (g.chunk_sectors, g.member_data_sectors, g.data_disks()),
            (0, 1000, 1)
        );
        let (copies, run) = g.copies(10);
        assert_eq!((copies, run), (vec![(0, 10), (1, 10), (2, 10)], 990));
    }
}
