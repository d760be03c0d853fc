//! RAID 0 striping with md's zones (drivers/md/raid0.c `create_strip_zones`, `find_zone`,
//! `map_sector`).
//!
//! Members of different sizes are handled the way md does: each member's size is rounded down to
//! a whole number of chunks; every distinct size ends a zone; zone `k` stripes over the members
//! still larger than zone `k-1`'s boundary, starting at member sector `dev_start`. Within a zone
//! the member is picked from the array sector (layout 1, "original") or the zone-relative sector
//! (layout 2, "alt-multizone"); the two agree when there is a single zone.
//!
//! Invariants: zones are contiguous and in order; each zone's `array_start_sector`,
//! `array_end_sector` and `dev_start_sector` are multiples of the chunk, so no chunk crosses a
//! zone boundary.

use crate::{GeometryError, MemberChunkRole, Placement, Raid0Layout};
use serde::Serialize;

/// One of md's `strip_zone`s.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Raid0Zone {
    /// First array sector of the zone (md: the previous zone's `zone_end`).
    pub array_start_sector: u64,
    /// One past the last array sector of the zone (md: `zone_end`).
    pub array_end_sector: u64,
    /// Member sector where this zone starts on each of its members (md: `dev_start`).
    pub dev_start_sector: u64,
    /// The members striped in this zone, in role order (md: the zone's slice of `devlist`).
    pub members: Vec<u32>,
}

impl Raid0Zone {
    /// Sectors this zone uses on each of its members.
    pub fn dev_sectors(&self) -> u64 {
        (self.array_end_sector - self.array_start_sector) / self.members.len() as u64
    }
}

/// RAID 0 geometry: chunk, layout and md's zones.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Raid0Geometry {
    pub(crate) raid_disks: u32,
    pub(crate) chunk_sectors: u32,
    pub(crate) layout: Raid0Layout,
    pub(crate) md_layout: u32,
    pub(crate) zones: Vec<Raid0Zone>,
}

impl Raid0Geometry {
    /// Build md's zones. `chunk_sectors` has already been checked to be a non-zero power of two.
    pub(crate) fn new(
        md_layout: u32,
        chunk_sectors: u32,
        member_data_sectors: &[u64],
    ) -> Result<Raid0Geometry, GeometryError> {
        let chunk = u64::from(chunk_sectors);
        let rounded: Vec<u64> = member_data_sectors
            .iter()
            .map(|s| s / chunk * chunk)
            .collect();
        for (member, &sectors) in rounded.iter().enumerate() {
            if sectors == 0 {
                return Err(GeometryError::MemberTooSmall {
                    member: member as u32,
                    sectors: member_data_sectors[member],
                    min_sectors: chunk,
                });
            }
        }
        let zones = build_zones(&rounded)?;
        let layout = Raid0Layout::from_md(md_layout);
        if zones.len() > 1 && layout == Raid0Layout::Unset {
            return Err(GeometryError::Raid0MultiZoneNeedsLayout {
                layout: md_layout,
                zones: zones.len(),
            });
        }
        Ok(Raid0Geometry {
            raid_disks: member_data_sectors.len() as u32,
            chunk_sectors,
            layout,
            md_layout,
            zones,
        })
    }

    pub fn zones(&self) -> &[Raid0Zone] {
        &self.zones
    }

    pub fn layout(&self) -> Raid0Layout {
        self.layout
    }

    /// md's raid0_size: the sum of the members rounded down to the chunk (= the last zone end).
    #[inline]
    pub fn array_sectors(&self) -> u64 {
        self.zones.last().map_or(0, |z| z.array_end_sector)
    }

    /// md's find_zone: the zone holding `array_sector` (which must be in range).
    #[inline]
    pub fn find_zone(&self, array_sector: u64) -> Option<&Raid0Zone> {
        self.zones
            .iter()
            .find(|z| array_sector < z.array_end_sector)
    }

    /// The sector md uses to choose the member inside a zone: the absolute array sector for the
    /// original layout, the zone-relative one otherwise (identical with one zone).
    #[inline]
    fn selector_sector(&self, zone: &Raid0Zone, array_sector: u64) -> u64 {
        match self.layout {
            Raid0Layout::Original => array_sector,
            Raid0Layout::AltMultizone | Raid0Layout::Unset => {
                array_sector - zone.array_start_sector
            }
        }
    }

    /// md's map_sector. `array_sector` must be below `array_sectors()`.
    #[inline]
    pub(crate) fn map_in_range(&self, array_sector: u64) -> Option<Placement> {
        // The chunk is a power of two (checked in Geometry::from_md), so md's sector_div by
        // the chunk is a shift here; only the division by the zone's member count remains.
        let chunk_shift = self.chunk_sectors.trailing_zeros();
        let zone = self.find_zone(array_sector)?;
        let nb_dev = zone.members.len() as u64;
        let zone_offset = array_sector - zone.array_start_sector;
        let sector_in_chunk = array_sector & (u64::from(self.chunk_sectors) - 1);
        let chunk_in_dev = (zone_offset >> chunk_shift) / nb_dev;
        let selector = self.selector_sector(zone, array_sector);
        let member = zone.members[((selector >> chunk_shift) % nb_dev) as usize];
        Some(Placement {
            member,
            member_sector: zone.dev_start_sector + (chunk_in_dev << chunk_shift) + sector_in_chunk,
        })
    }

    /// The inverse of `map_in_range`: which array sector a member sector holds.
    pub(crate) fn unmap(&self, member: u32, member_sector: u64) -> MemberChunkRole {
        let chunk = u64::from(self.chunk_sectors);
        for zone in &self.zones {
            let dev_end = zone.dev_start_sector + zone.dev_sectors();
            if member_sector < zone.dev_start_sector || member_sector >= dev_end {
                continue;
            }
            let Some(index) = zone.members.iter().position(|&m| m == member) else {
                return MemberChunkRole::Unused;
            };
            let nb_dev = zone.members.len() as u64;
            let index = index as u64;
            let dev_offset = member_sector - zone.dev_start_sector;
            let chunk_in_dev = dev_offset / chunk;
            let sector_in_chunk = dev_offset % chunk;
            // Position of the chunk within its row of nb_dev chunks in the zone.
            let column = match self.layout {
                Raid0Layout::Original => {
                    let row_first_chunk = zone.array_start_sector / chunk + chunk_in_dev * nb_dev;
                    (index + nb_dev - row_first_chunk % nb_dev) % nb_dev
                }
                Raid0Layout::AltMultizone | Raid0Layout::Unset => index,
            };
            let zone_chunk = chunk_in_dev * nb_dev + column;
            return MemberChunkRole::Data {
                array_sector: zone.array_start_sector + zone_chunk * chunk + sector_in_chunk,
                copy: 0,
            };
        }
        MemberChunkRole::Unused
    }
}

/// md's create_strip_zones on sizes already rounded down to the chunk.
fn build_zones(rounded: &[u64]) -> Result<Vec<Raid0Zone>, GeometryError> {
    let mut distinct: Vec<u64> = rounded.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let mut zones = Vec::with_capacity(distinct.len());
    let mut dev_start = 0u64;
    let mut array_start = 0u64;
    for &zone_top in &distinct {
        let members: Vec<u32> = rounded
            .iter()
            .enumerate()
            .filter(|&(_, &s)| s > dev_start)
            .map(|(i, _)| i as u32)
            .collect();
        let per_dev = zone_top - dev_start;
        let zone_sectors = per_dev
            .checked_mul(members.len() as u64)
            .ok_or(GeometryError::SizeOverflow)?;
        let array_end = array_start
            .checked_add(zone_sectors)
            .ok_or(GeometryError::SizeOverflow)?;
        zones.push(Raid0Zone {
            array_start_sector: array_start,
            array_end_sector: array_end,
            dev_start_sector: dev_start,
            members,
        });
        array_start = array_end;
        dev_start = zone_top;
    }
    Ok(zones)
}
