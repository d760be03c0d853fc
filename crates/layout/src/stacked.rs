//! RAID 50 and 60 as mdadm builds them: an outer md raid0 whose members are equal md raid5 (or
//! raid6) arrays ("sets"). Each set is a whole md array with its own members, chunk and layout;
//! the outer raid0 sees each set as one member device whose data starts at
//! `set_data_offset_sectors` (the outer array's data_offset on the set).
//!
//! Invariants: all sets have the same geometry; the outer raid0 has one zone (equal sets), so its
//! layout number does not matter.

use crate::{
    Geometry, GeometryError, Level, Mapping, MemberChunkRole, ParityAlgorithm, Raid0Layout,
    Raid5Algorithm, Raid6Algorithm,
};
use serde::Serialize;

/// Geometry of a RAID 50/60 stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StackedGeometry {
    outer: Geometry,
    set: Geometry,
    sets: u32,
    set_data_offset_sectors: u64,
}

/// A place in a stack: member `member` of set `set`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct StackedPlacement {
    pub set: u32,
    pub member: u32,
    /// Sector on the set's member, relative to that member's data_offset.
    pub member_sector: u64,
}

/// Where one array sector of a stack lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StackedMapping {
    pub array_sector: u64,
    pub set: u32,
    /// Sector in the set's own array (after adding the outer data offset).
    pub set_sector: u64,
    /// The set's own mapping of `set_sector`.
    pub inner: Mapping,
}

impl StackedMapping {
    pub fn placements(&self) -> Vec<StackedPlacement> {
        self.inner
            .placements
            .iter()
            .map(|p| StackedPlacement {
                set: self.set,
                member: p.member,
                member_sector: p.member_sector,
            })
            .collect()
    }
}

impl StackedGeometry {
    /// `sets` copies of the raid5/raid6 array `set`, striped by an outer raid0 with
    /// `outer_chunk_sectors`, whose data starts `set_data_offset_sectors` into each set.
    pub fn new(
        set: Geometry,
        sets: u32,
        outer_chunk_sectors: u32,
        set_data_offset_sectors: u64,
    ) -> Result<StackedGeometry, GeometryError> {
        let outer_member = set.array_sectors().saturating_sub(set_data_offset_sectors);
        StackedGeometry::with_outer_member_sectors(
            set,
            sets,
            outer_chunk_sectors,
            set_data_offset_sectors,
            outer_member,
        )
    }

    /// Like [`StackedGeometry::new`], with the outer array's usable sectors per set given
    /// explicitly (the outer superblocks' `data_size`), which may be less than what the set
    /// holds after the data offset.
    pub fn with_outer_member_sectors(
        set: Geometry,
        sets: u32,
        outer_chunk_sectors: u32,
        set_data_offset_sectors: u64,
        outer_member_data_sectors: u64,
    ) -> Result<StackedGeometry, GeometryError> {
        if sets < 2 {
            return Err(GeometryError::TooFewSets { sets });
        }
        match &set {
            Geometry::Parity(p)
                if matches!(
                    p.algorithm(),
                    ParityAlgorithm::Raid5(_) | ParityAlgorithm::Raid6(_)
                ) => {}
            _ => return Err(GeometryError::UnequalSets),
        }
        let available = set.array_sectors().saturating_sub(set_data_offset_sectors);
        let outer_member = outer_member_data_sectors.min(available);
        let outer = Geometry::raid0(
            Raid0Layout::Unset,
            outer_chunk_sectors,
            &vec![outer_member; sets as usize],
        )?;
        Ok(StackedGeometry {
            outer,
            set,
            sets,
            set_data_offset_sectors,
        })
    }

    /// RAID 50 from equal raid5 sets of `disks_per_set` members, one chunk size for both layers,
    /// no outer data offset.
    pub fn raid50(
        algorithm: Raid5Algorithm,
        sets: u32,
        disks_per_set: u32,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<StackedGeometry, GeometryError> {
        let set = Geometry::raid5(algorithm, disks_per_set, chunk_sectors, dev_sectors)?;
        StackedGeometry::new(set, sets, chunk_sectors, 0)
    }

    /// RAID 60 from equal raid6 sets; see [`StackedGeometry::raid50`].
    pub fn raid60(
        algorithm: Raid6Algorithm,
        sets: u32,
        disks_per_set: u32,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<StackedGeometry, GeometryError> {
        let set = Geometry::raid6(algorithm, disks_per_set, chunk_sectors, dev_sectors)?;
        StackedGeometry::new(set, sets, chunk_sectors, 0)
    }

    pub fn level(&self) -> Level {
        match self.set.level() {
            Level::Raid6 => Level::Raid60,
            _ => Level::Raid50,
        }
    }

    pub fn sets(&self) -> u32 {
        self.sets
    }

    /// The geometry shared by every set.
    pub fn set_geometry(&self) -> &Geometry {
        &self.set
    }

    /// The outer raid0 over the sets.
    pub fn outer_geometry(&self) -> &Geometry {
        &self.outer
    }

    pub fn set_data_offset_sectors(&self) -> u64 {
        self.set_data_offset_sectors
    }

    pub fn array_sectors(&self) -> u64 {
        self.outer.array_sectors()
    }

    pub fn map(&self, array_sector: u64) -> Result<StackedMapping, GeometryError> {
        let outer = self.outer.map(array_sector)?;
        let Some(p) = outer.placements.first() else {
            // raid0 always yields exactly one placement.
            return Err(GeometryError::ArraySectorOutOfRange {
                array_sector,
                len_sectors: 1,
                array_sectors: self.array_sectors(),
            });
        };
        let set_sector = p.member_sector + self.set_data_offset_sectors;
        Ok(StackedMapping {
            array_sector,
            set: p.member,
            set_sector,
            inner: self.set.map(set_sector)?,
        })
    }

    /// What `member_sector` on member `member` of set `set` holds, in stack terms: data gives
    /// the stack's array sector; parity gives the set's stripe; the outer superblock area and
    /// anything beyond are `Unused`.
    pub fn unmap(
        &self,
        set: u32,
        member: u32,
        member_sector: u64,
    ) -> Result<MemberChunkRole, GeometryError> {
        if set >= self.sets {
            return Err(GeometryError::MemberOutOfRange {
                member: set,
                raid_disks: self.sets,
            });
        }
        match self.set.unmap(member, member_sector)? {
            MemberChunkRole::Data { array_sector, .. } => {
                if array_sector < self.set_data_offset_sectors {
                    return Ok(MemberChunkRole::Unused);
                }
                self.outer
                    .unmap(set, array_sector - self.set_data_offset_sectors)
            }
            other => Ok(other),
        }
    }
}
