//! mdadm's placement rules for a new v1.x member: where data starts, how much of the device
//! it may use, and where the bitmap and the bad-block log go.
//!
//! Owns: a pure re-statement of what `mdadm --create` computes, rule by rule, from mdadm
//! super1.c (`choose_bm_space`, `validate_geometry1`, `add_internal_bitmap1`,
//! `calc_bitmap_size`, `write_init_super1`) and Create.c (size rounding, bitmap size). Each
//! step below names the function it restates. Inputs are the device size and the array shape;
//! no I/O. Invariant of the result: data never overlaps the superblock, bitmap or log, and
//! `data_offset + data_size <= device` (1.1/1.2) or `data_size <= super_offset` (1.0).
//!
//! All members are assumed to be the same size (mdadm takes the data offset from the first
//! device and the used size from the smallest).

use crate::bitmap::{bitmap_bits, BITMAP_SUPER_BYTES};
use crate::error::MetadataError;
use crate::superblock::{Level, PplArea, SuperblockVersion};
use serde::{Deserialize, Serialize};

/// mdadm's default chunk size in sectors (`DEFAULT_CHUNK` 512 KiB).
pub const DEFAULT_CHUNK_SECTORS: u32 = 1024;
/// mdadm's default bitmap daemon sleep in seconds (`DEFAULT_BITMAP_DELAY`).
pub const DEFAULT_BITMAP_DELAY_SECS: u32 = 5;
/// mdadm's minimum default bitmap chunk for internal bitmaps: 64 MiB (`add_internal_bitmap1`).
pub const DEFAULT_INTERNAL_BITMAP_CHUNK_BYTES: u64 = 64 * 1024 * 1024;
/// Largest device (or bitmap) size these rules accept: 2^52 sectors (2 EiB), so that byte
/// counts (`sectors * 512`) cannot overflow.
pub const MAX_DEVICE_SECTORS: u64 = 1 << 52;
/// One MiB in sectors: mdadm rounds data offsets up to this (`validate_geometry1`, ONE_MEG).
pub const ONE_MEG_SECTORS: u64 = 2048;
/// Space mdadm reserves for partial parity logs: 1 MiB (`MULTIPLE_PPL_AREA_SIZE_SUPER1`).
pub const PPL_AREA_SECTORS: u64 = 2048;
/// mdadm reserves 8 sectors (4 KiB) for the bad-block log (`write_init_super1`).
pub const BBLOG_SECTORS: u16 = 8;

/// Space mdadm reserves for a bitmap on a device of `device_sectors` (`choose_bm_space` in
/// super1.c; the kernel's `super_1_choose_bm_space` is identical): none below 64 sectors,
/// 4 KiB up to 8 GiB, 64 KiB above, 128 KiB from 200 GiB.
pub fn choose_bm_space(device_sectors: u64) -> u64 {
    if device_sectors < 64 * 2 {
        0
    } else if device_sectors - 64 * 2 >= 200 * 1024 * 1024 * 2 {
        128 * 2
    } else if device_sectors - 4 * 2 > 8 * 1024 * 1024 * 2 {
        64 * 2
    } else {
        4 * 2
    }
}

/// Reshape headroom mdadm leaves before data on 1.1/1.2 (`validate_geometry1`): start at
/// 128 MiB and halve while it exceeds ~0.1% of the device, but never below two chunks
/// (the loop stops once a further halving would drop under two chunks).
pub fn mdadm_headroom_sectors(device_sectors: u64, chunk_sectors: u32) -> u64 {
    let mut headroom: u64 = 128 * 1024 * 2;
    // mdadm: `headroom / 2 >= ((unsigned)(*chunk)*2)*2` with *chunk in KiB, i.e. two chunks
    // in sectors.
    let two_chunks = 2 * u64::from(chunk_sectors);
    while (headroom << 10) > device_sectors && (chunk_sectors == 0 || headroom / 2 >= two_chunks) {
        headroom >>= 1;
    }
    headroom
}

/// mdadm's default data offset for 1.1/1.2 (`validate_geometry1`):
/// `roundup(12*2 + bm_space + headroom, 1 MiB)`. 1.0 keeps data at sector 0.
pub fn mdadm_default_data_offset(
    version: SuperblockVersion,
    device_sectors: u64,
    chunk_sectors: u32,
) -> u64 {
    data_offset_for(version, device_sectors, chunk_sectors, false)
}

/// Space `validate_geometry1` reserves for a bitmap, or for PPL when that policy is chosen.
fn reserved_bm_space(device_sectors: u64, ppl: bool) -> u64 {
    if ppl {
        PPL_AREA_SECTORS
    } else {
        choose_bm_space(device_sectors)
    }
}

fn data_offset_for(
    version: SuperblockVersion,
    device_sectors: u64,
    chunk_sectors: u32,
    ppl: bool,
) -> u64 {
    match version {
        SuperblockVersion::V1_0 => 0,
        SuperblockVersion::V1_1 | SuperblockVersion::V1_2 => {
            let raw = 12 * 2
                + reserved_bm_space(device_sectors, ppl)
                + mdadm_headroom_sectors(device_sectors, chunk_sectors);
            raw.div_ceil(ONE_MEG_SECTORS) * ONE_MEG_SECTORS
        }
    }
}

/// Space per device mdadm offers for data before size rounding (`validate_geometry1`'s
/// `freesize`, in sectors).
pub fn mdadm_free_sectors(
    version: SuperblockVersion,
    device_sectors: u64,
    chunk_sectors: u32,
) -> Result<u64, MetadataError> {
    free_sectors_for(version, device_sectors, chunk_sectors, false)
}

fn free_sectors_for(
    version: SuperblockVersion,
    device_sectors: u64,
    chunk_sectors: u32,
    ppl: bool,
) -> Result<u64, MetadataError> {
    match version {
        SuperblockVersion::V1_0 => {
            // Metadata at the end: round down to 4 KiB, then 8 KiB superblock area, 4 KiB
            // bad-block log and the bitmap space.
            let rounded = device_sectors & !7;
            let overhead = 8 * 2 + 8 + reserved_bm_space(device_sectors, ppl);
            rounded
                .checked_sub(overhead)
                .ok_or(MetadataError::DeviceTooSmall {
                    device_sectors,
                    needed_sectors: overhead,
                })
        }
        SuperblockVersion::V1_1 | SuperblockVersion::V1_2 => {
            let data_offset = data_offset_for(version, device_sectors, chunk_sectors, ppl);
            device_sectors
                .checked_sub(data_offset)
                .ok_or(MetadataError::DeviceTooSmall {
                    device_sectors,
                    needed_sectors: data_offset,
                })
        }
    }
}

/// The shape of the array being created, as far as placement depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateShape {
    /// Superblock placement.
    pub version: SuperblockVersion,
    /// Size of each member in sectors.
    pub device_sectors: u64,
    /// RAID level.
    pub level: Level,
    /// md layout word (only raid10's copies matter here).
    pub layout: u32,
    /// Number of raid devices (only raid10's bitmap size uses it).
    pub raid_disks: u32,
    /// Chunk size in sectors (0 for raid1 / linear without rounding).
    pub chunk_sectors: u32,
    /// True to add an internal write-intent bitmap (`--bitmap=internal`).
    pub with_bitmap: bool,
}

/// Internal bitmap geometry chosen at create time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BitmapPlacement {
    /// Signed sectors from the superblock to the bitmap superblock.
    pub offset_sectors: i32,
    /// Bitmap chunk in bytes.
    pub chunk_bytes: u64,
    /// Sectors the bitmap covers (`sync_size`).
    pub sync_size_sectors: u64,
    /// Sectors the bitmap superblock + bits occupy, rounded to 4 KiB (`calc_bitmap_size`).
    pub space_sectors: u64,
}

/// Where everything goes on one member: the result of mdadm's create rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataLayout {
    /// Superblock placement.
    pub version: SuperblockVersion,
    /// Member size in sectors.
    pub device_sectors: u64,
    /// `super_offset`.
    pub super_offset_sectors: u64,
    /// `data_offset`.
    pub data_offset_sectors: u64,
    /// `data_size`.
    pub data_size_sectors: u64,
    /// `size`: used sectors per member as mdadm records it (0 for linear and raid0, whose
    /// size mdadm leaves to the kernel).
    pub size_sectors: u64,
    /// Internal bitmap, if requested.
    pub bitmap: Option<BitmapPlacement>,
    /// Partial parity log area (`--consistency-policy=ppl`), stored in the superblock's
    /// `bitmap_offset` union with the `PPL` feature bit.
    pub ppl: Option<PplArea>,
    /// `bblog_offset` (signed sectors from the superblock), 0 when there is no log.
    pub bblog_offset: i32,
    /// `bblog_size` in sectors, 0 when there is no log.
    pub bblog_size_sectors: u16,
}

impl DataLayout {
    /// mdadm's defaults for a redundant array (level > 0) on members of `device_sectors`:
    /// with `chunk_sectors > 0` the used size is rounded down to the chunk (raid4/5/6/10);
    /// with `chunk_sectors == 0` it is rounded down to 64 KiB as mdadm does for raid1.
    pub fn mdadm_default(
        version: SuperblockVersion,
        device_sectors: u64,
        chunk_sectors: u32,
        with_bitmap: bool,
    ) -> Result<DataLayout, MetadataError> {
        let level = if chunk_sectors == 0 {
            Level::Raid1
        } else {
            Level::Raid5
        };
        Self::mdadm_create(&CreateShape {
            version,
            device_sectors,
            level,
            layout: 2,
            raid_disks: 3,
            chunk_sectors,
            with_bitmap,
        })
    }

    /// mdadm's create-time placement for `shape`.
    pub fn mdadm_create(shape: &CreateShape) -> Result<DataLayout, MetadataError> {
        Self::create(shape, false)
    }

    /// mdadm's placement for a RAID5 array with `--consistency-policy=ppl`: a 1 MiB partial
    /// parity log area takes the place of the bitmap space (`validate_geometry1`,
    /// `write_init_super1`). The caller records it with [`crate::Superblock::set_ppl_area`]
    /// and the `PPL` feature bit.
    pub fn mdadm_create_ppl(shape: &CreateShape) -> Result<DataLayout, MetadataError> {
        Self::create(shape, true)
    }

    fn create(shape: &CreateShape, ppl: bool) -> Result<DataLayout, MetadataError> {
        let dsize = shape.device_sectors;
        if dsize > MAX_DEVICE_SECTORS {
            return Err(MetadataError::InvalidGeometry {
                rule: "device larger than 2^52 sectors (2 EiB)",
            });
        }
        if ppl && shape.level != Level::Raid5 {
            return Err(MetadataError::InvalidGeometry {
                rule: "the PPL consistency policy is only supported for raid5 (mdadm)",
            });
        }
        if ppl && shape.with_bitmap {
            return Err(MetadataError::InvalidGeometry {
                rule: "PPL and a write-intent bitmap exclude each other (md super_1_validate)",
            });
        }
        // store_super1 / write_init_super1: "if (dsize < 24) return 2".
        if dsize < 24 {
            return Err(MetadataError::DeviceTooSmall {
                device_sectors: dsize,
                needed_sectors: 24,
            });
        }
        if shape.chunk_sectors != 0 && !shape.chunk_sectors.is_power_of_two() {
            // Create.c rounds with `& ~(chunk - 1)`, which only means something for powers
            // of two.
            return Err(MetadataError::InvalidGeometry {
                rule: "chunk size must be a power of two (mdadm rounds sizes with a mask)",
            });
        }
        let version = shape.version;
        // validate_geometry1: data offset (1.1/1.2) and free size.
        let data_offset = data_offset_for(version, dsize, shape.chunk_sectors, ppl);
        let free_sectors = free_sectors_for(version, dsize, shape.chunk_sectors, ppl)?;

        // Create.c: freesize in KiB, rounded down to the chunk; raid1 to 64 KiB; linear and
        // raid0 leave `size` unset (0) for the kernel to fill.
        let size_meaningful = matches!(
            shape.level,
            Level::Raid1
                | Level::Raid4
                | Level::Raid5
                | Level::Raid6
                | Level::Raid10
                | Level::Multipath
                | Level::Faulty
        );
        let mut size_kib = free_sectors / 2;
        if shape.chunk_sectors != 0 {
            let chunk_kib = u64::from(shape.chunk_sectors / 2).max(1);
            size_kib &= !(chunk_kib - 1);
        }
        if size_kib == 0 {
            return Err(MetadataError::DeviceTooSmall {
                device_sectors: dsize,
                needed_sectors: dsize - free_sectors + u64::from(shape.chunk_sectors.max(2)),
            });
        }
        if shape.level == Level::Raid1 {
            size_kib &= !63;
        }
        let size_sectors = if size_meaningful { size_kib * 2 } else { 0 };

        // add_internal_bitmap1 (creating): choose offset and chunk.
        let bitmap = if shape.with_bitmap {
            if !size_meaningful {
                return Err(MetadataError::InvalidGeometry {
                    rule: "bitmaps are not meaningful for linear or raid0 (Create.c)",
                });
            }
            // Create.c: raid10's bitmap covers the array, others one member.
            let bitmap_size_sectors = if shape.level == Level::Raid10 {
                let copies = u64::from(shape.layout & 255) * u64::from((shape.layout >> 8) & 255);
                if copies == 0 {
                    return Err(MetadataError::InvalidGeometry {
                        rule: "raid10 layout has zero copies",
                    });
                }
                let sectors =
                    u128::from(size_kib) * u128::from(shape.raid_disks) / u128::from(copies) * 2;
                u64::try_from(sectors)
                    .ok()
                    .filter(|s| *s <= MAX_DEVICE_SECTORS)
                    .ok_or(MetadataError::InvalidGeometry {
                        rule: "raid10 array too large for a bitmap",
                    })?
            } else {
                size_sectors
            };
            Some(internal_bitmap_at_create(
                version,
                size_sectors,
                bitmap_size_sectors,
            )?)
        } else {
            None
        };

        // write_init_super1: bitmap space, then per-version placement.
        let mut ppl_area = None;
        let (mut bm_space, bm_offset): (u64, i64) = match &bitmap {
            Some(b) => (b.space_sectors, i64::from(b.offset_sectors)),
            None if ppl => {
                let offset = match version {
                    SuperblockVersion::V1_0 => -(PPL_AREA_SECTORS as i64) - 8,
                    _ => 8,
                };
                ppl_area = Some(PplArea {
                    offset_sectors: offset as i16,
                    size_sectors: PPL_AREA_SECTORS as u16,
                });
                (PPL_AREA_SECTORS, offset)
            }
            None => (choose_bm_space(size_sectors), 8),
        };
        let super_offset = version.superblock_sector(dsize);
        let (data_offset, data_size, bblog_offset, bblog_size) = match version {
            SuperblockVersion::V1_0 => {
                // "Add 8 sectors for bad block log".
                bm_space += 8;
                if super_offset < size_sectors + bm_space {
                    bm_space = super_offset - size_sectors;
                }
                let data_size = super_offset - bm_space;
                if bm_space >= 8 {
                    (0, data_size, -8, BBLOG_SECTORS)
                } else {
                    (0, data_size, 0, 0)
                }
            }
            SuperblockVersion::V1_1 | SuperblockVersion::V1_2 => {
                let data_size = dsize - data_offset;
                let sb = super_offset as i64;
                let d = data_offset as i64;
                if d >= sb + bm_offset + bm_space as i64 + 8 {
                    (
                        data_offset,
                        data_size,
                        (bm_offset + bm_space as i64) as i32,
                        BBLOG_SECTORS,
                    )
                } else if d >= sb + 16 {
                    (data_offset, data_size, (d - 8 - sb) as i32, BBLOG_SECTORS)
                } else {
                    (data_offset, data_size, 0, 0)
                }
            }
        };
        Ok(DataLayout {
            version,
            device_sectors: dsize,
            super_offset_sectors: super_offset,
            data_offset_sectors: data_offset,
            data_size_sectors: data_size,
            size_sectors,
            bitmap,
            ppl: ppl_area,
            bblog_offset,
            bblog_size_sectors: bblog_size,
        })
    }
}

/// Space for a bitmap of `sync_size_sectors` at `chunk_bytes`, rounded to `boundary_bytes`
/// (`calc_bitmap_size` in super1.c), in bytes.
pub fn calc_bitmap_size_bytes(
    sync_size_sectors: u64,
    chunk_bytes: u64,
    boundary_bytes: u64,
) -> u64 {
    let bits = bitmap_bits(sync_size_sectors, chunk_bytes);
    let bytes = bits.div_ceil(8) + BITMAP_SUPER_BYTES as u64;
    let boundary = boundary_bytes.max(1);
    bytes.div_ceil(boundary).saturating_mul(boundary)
}

/// mdadm's default bitmap chunk when `room_sectors` are available for bits and
/// `bitmap_size_sectors` must be covered (`add_internal_bitmap1` with no chunk requested):
/// start at 4 KiB and double until the bits fit, then raise to at least 64 MiB.
pub fn default_internal_bitmap_chunk_bytes(
    room_sectors: u64,
    bitmap_size_sectors: u64,
) -> Result<u64, MetadataError> {
    if bitmap_size_sectors > MAX_DEVICE_SECTORS {
        return Err(MetadataError::InvalidGeometry {
            rule: "bitmap larger than 2^52 sectors",
        });
    }
    // "Limit to 128K of bitmap when chunk size not requested".
    let room = room_sectors.min(128 * 2);
    if room <= 1 {
        return Err(MetadataError::InvalidGeometry {
            rule: "no room for an internal bitmap",
        });
    }
    let max_bits = (room * 512 - BITMAP_SUPER_BYTES as u64) * 8;
    let mut min_chunk: u64 = 4096;
    let mut bits = (bitmap_size_sectors * 512) / min_chunk + 1;
    while bits > max_bits {
        min_chunk *= 2;
        bits = bits.div_ceil(2);
    }
    Ok(min_chunk.max(DEFAULT_INTERNAL_BITMAP_CHUNK_BYTES))
}

/// `add_internal_bitmap1` when creating: offset 8 sectors after the superblock for 1.1/1.2;
/// for 1.0 just before the bad-block log that precedes the superblock.
fn internal_bitmap_at_create(
    version: SuperblockVersion,
    size_sectors: u64,
    bitmap_size_sectors: u64,
) -> Result<BitmapPlacement, MetadataError> {
    let bbl_size: u64 = 8;
    let room = choose_bm_space(size_sectors) + bbl_size - bbl_size;
    let chunk = default_internal_bitmap_chunk_bytes(room, bitmap_size_sectors)?;
    let offset: i64 = match version {
        SuperblockVersion::V1_1 | SuperblockVersion::V1_2 => 4 * 2,
        SuperblockVersion::V1_0 => {
            let bits = (bitmap_size_sectors * 512) / chunk + 1;
            let blocks = (bits.div_ceil(8) + BITMAP_SUPER_BYTES as u64).div_ceil(4096);
            -((blocks * 8) as i64) - bbl_size as i64
        }
    };
    let offset_sectors = i32::try_from(offset).map_err(|_| MetadataError::InvalidGeometry {
        rule: "bitmap offset out of range",
    })?;
    Ok(BitmapPlacement {
        offset_sectors,
        chunk_bytes: chunk,
        sync_size_sectors: bitmap_size_sectors,
        space_sectors: calc_bitmap_size_bytes(bitmap_size_sectors, chunk, 4096) / 512,
    })
}
