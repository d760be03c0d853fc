//! RAID 10 placement, copied from drivers/md/raid10.c: `setup_geo` (layout word -> geometry),
//! `calc_sectors` (used sectors per member and the far stride), `raid10_size`,
//! `__raid10_find_phys` (array sector -> every copy) and `raid10_find_virt` (member sector ->
//! array sector).
//!
//! md's own quirks are kept on purpose, since arrays written by md must read back. In two kinds
//! of shapes md's find_phys and find_virt disagree, and `unmap` then reports the member chunk as
//! `Unused` rather than guess: an offset layout with near copies > 1 on a device count that is not
//! a multiple of the near copies (a wrapped near copy lands on another chunk's offset copy), and
//! far sets (layout bits 17-18) that do not divide the devices evenly when near copies > 1
//! (find_phys moves a far copy across into the last, larger set). mdadm creates neither shape.

use crate::{GeometryError, MemberChunkRole, Placement, Raid10Layout};
use serde::Serialize;

/// RAID 10 geometry (md's `struct geom` plus calc_sectors' results).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Raid10Geometry {
    pub(crate) layout: Raid10Layout,
    pub(crate) raid_disks: u32,
    pub(crate) chunk_sectors: u32,
    pub(crate) chunk_shift: u32,
    pub(crate) far_set_size: u32,
    /// calc_sectors' `dev_sectors`: sectors used on every member.
    pub(crate) dev_sectors: u64,
    /// calc_sectors' `stride`: distance between far copies on a member.
    pub(crate) stride_sectors: u64,
    /// raid10_size.
    pub(crate) array_sectors: u64,
}

impl Raid10Geometry {
    /// setup_geo + calc_sectors + raid10_size. `chunk_sectors` is a checked power of two, and
    /// `dev_sectors` is the smallest member's usable size.
    pub(crate) fn new(
        layout: Raid10Layout,
        raid_disks: u32,
        chunk_sectors: u32,
        dev_sectors: u64,
    ) -> Result<Raid10Geometry, GeometryError> {
        let copies = layout.copies();
        if copies < 2 || copies > raid_disks {
            return Err(GeometryError::Raid10CopiesOutOfRange { copies, raid_disks });
        }
        let nc = u32::from(layout.near);
        let fc = u32::from(layout.far);
        let far_set_size = match layout.far_set_mode {
            0 => raid_disks,
            1 => raid_disks / fc,
            _ => fc * nc,
        };
        if far_set_size == 0 {
            return Err(GeometryError::InvalidRaid10Layout {
                layout: layout.md_layout(),
                reason: "far-set mode 1 with more far copies than devices",
            });
        }
        let chunk_shift = chunk_sectors.trailing_zeros();
        let disks = u64::from(raid_disks);
        // calc_sectors
        let chunks_per_dev = dev_sectors >> chunk_shift;
        let array_chunks = (chunks_per_dev / u64::from(fc))
            .checked_mul(disks)
            .ok_or(GeometryError::SizeOverflow)?
            / u64::from(nc);
        let used_chunks = array_chunks
            .checked_mul(u64::from(copies))
            .ok_or(GeometryError::SizeOverflow)?
            .div_ceil(disks);
        let used_sectors = used_chunks << chunk_shift;
        let stride_sectors = if layout.offset {
            1u64 << chunk_shift
        } else {
            (used_chunks / u64::from(fc)) << chunk_shift
        };
        // raid10_size on the used sectors
        let size_chunks = (used_chunks / u64::from(fc)) * disks / u64::from(nc);
        let array_sectors = size_chunks
            .checked_mul(u64::from(chunk_sectors))
            .ok_or(GeometryError::SizeOverflow)?;
        if array_sectors == 0 {
            return Err(GeometryError::MemberTooSmall {
                member: 0,
                sectors: dev_sectors,
                min_sectors: u64::from(chunk_sectors) * u64::from(fc),
            });
        }
        Ok(Raid10Geometry {
            layout,
            raid_disks,
            chunk_sectors,
            chunk_shift,
            far_set_size,
            dev_sectors: used_sectors,
            stride_sectors,
            array_sectors,
        })
    }

    pub fn layout(&self) -> Raid10Layout {
        self.layout
    }

    pub fn far_set_size(&self) -> u32 {
        self.far_set_size
    }

    pub fn stride_sectors(&self) -> u64 {
        self.stride_sectors
    }

    /// (last_far_set_start, last_far_set_size) as __raid10_find_phys computes them.
    #[inline]
    fn last_far_set(&self) -> (u32, u32) {
        let start = (self.raid_disks / self.far_set_size - 1) * self.far_set_size;
        let size = self.far_set_size + self.raid_disks % self.far_set_size;
        (start, size)
    }

    /// __raid10_find_phys: every copy of `array_sector`, in md's slot order (near copies in
    /// turn, each followed by its far copies), handed out one at a time without allocating.
    #[inline]
    pub(crate) fn find_phys(&self, array_sector: u64) -> FindPhys<'_> {
        let nc = u64::from(self.layout.near);
        let disks = u64::from(self.raid_disks);
        let chunk_mask = u64::from(self.chunk_sectors) - 1;
        let (last_far_set_start, last_far_set_size) = self.last_far_set();

        let chunk = (array_sector >> self.chunk_shift) * nc;
        let mut sector = array_sector & chunk_mask;
        let mut stripe = chunk / disks;
        // dev < raid_disks, so it fits in u32.
        let dev = (chunk % disks) as u32;
        if self.layout.offset {
            stripe *= u64::from(self.layout.far);
        }
        sector += stripe << self.chunk_shift;
        FindPhys {
            g: self,
            last_far_set_start,
            last_far_set_size,
            dev,
            sector,
            near_left: self.layout.near,
            far_done: 0,
            d: dev,
            s: sector,
        }
    }

    /// raid10_find_virt: the array sector whose copy md expects at (`member`, `member_sector`).
    /// Only meaningful for member sectors below `dev_sectors`.
    pub(crate) fn find_virt(&self, member: u32, member_sector: u64) -> u64 {
        let nc = i64::from(self.layout.near);
        let fc = u64::from(self.layout.far);
        let mut dev = i64::from(member);
        let mut far_set_start = i64::from(member / self.far_set_size * self.far_set_size);
        let mut far_set_size = i64::from(self.far_set_size);
        if !self.raid_disks.is_multiple_of(self.far_set_size) {
            let (last_start, last_size) = self.last_far_set();
            if member >= last_start {
                far_set_size = i64::from(last_size);
                far_set_start = i64::from(last_start);
            }
        }
        let chunk_mask = u64::from(self.chunk_sectors) - 1;
        let offset = member_sector & chunk_mask;
        let chunk;
        if self.layout.offset {
            let c = member_sector >> self.chunk_shift;
            let f = (c % fc) as i64;
            chunk = c / fc;
            dev -= f * nc;
            if dev < far_set_start {
                dev += far_set_size;
            }
        } else {
            let mut sector = member_sector;
            while sector >= self.stride_sectors {
                sector -= self.stride_sectors;
                if dev < nc + far_set_start {
                    dev += far_set_size - nc;
                } else {
                    dev -= nc;
                }
            }
            chunk = sector >> self.chunk_shift;
        }
        // md's arithmetic keeps dev within 0..raid_disks for in-range input.
        let vchunk = (chunk * u64::from(self.raid_disks) + dev.max(0) as u64) / nc as u64;
        (vchunk << self.chunk_shift) + offset
    }

    pub(crate) fn unmap(&self, member: u32, member_sector: u64) -> MemberChunkRole {
        if member_sector >= self.dev_sectors {
            return MemberChunkRole::Unused;
        }
        let array_sector = self.find_virt(member, member_sector);
        if array_sector >= self.array_sectors {
            return MemberChunkRole::Unused;
        }
        match self
            .find_phys(array_sector)
            .position(|p| p.member == member && p.member_sector == member_sector)
        {
            Some(copy) => MemberChunkRole::Data {
                array_sector,
                copy: copy as u32,
            },
            None => MemberChunkRole::Unused,
        }
    }
}

/// The iterator of [`Raid10Geometry::find_phys`]: md's two nested loops (`for n in near
/// copies { for f in 1..far copies }`) unrolled into a state that advances one copy per call.
#[derive(Clone, Debug)]
pub(crate) struct FindPhys<'a> {
    g: &'a Raid10Geometry,
    last_far_set_start: u32,
    last_far_set_size: u32,
    /// Device and sector of the current near copy (md's `dev` and `sector`).
    dev: u32,
    sector: u64,
    /// Near copies not yet finished, the current one included.
    near_left: u8,
    /// Copies of the current near copy handed out so far (it, then its far copies).
    far_done: u8,
    /// The copy handed out last (md's `d` and `s`), from which the next far copy follows.
    d: u32,
    s: u64,
}

impl Iterator for FindPhys<'_> {
    type Item = Placement;

    #[inline]
    fn next(&mut self) -> Option<Placement> {
        if self.near_left == 0 {
            return None;
        }
        let g = self.g;
        if self.far_done == 0 {
            self.d = self.dev;
            self.s = self.sector;
        } else {
            let set = self.d / g.far_set_size;
            let mut d = self.d + u32::from(g.layout.near);
            if !g.raid_disks.is_multiple_of(g.far_set_size) && d > self.last_far_set_start {
                d -= self.last_far_set_start;
                d %= self.last_far_set_size;
                d += self.last_far_set_start;
            } else {
                d %= g.far_set_size;
                d += g.far_set_size * set;
            }
            self.d = d;
            self.s += g.stride_sectors;
        }
        let out = Placement {
            member: self.d,
            member_sector: self.s,
        };
        self.far_done += 1;
        if self.far_done == g.layout.far {
            self.far_done = 0;
            self.near_left -= 1;
            self.dev += 1;
            if self.dev >= g.raid_disks {
                self.dev = 0;
                self.sector += u64::from(g.chunk_sectors);
            }
        }
        Some(out)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let far = usize::from(self.g.layout.far);
        let left = match self.near_left {
            0 => 0,
            n => usize::from(n) * far - usize::from(self.far_done),
        };
        (left, Some(left))
    }
}

impl ExactSizeIterator for FindPhys<'_> {}
impl std::iter::FusedIterator for FindPhys<'_> {}
