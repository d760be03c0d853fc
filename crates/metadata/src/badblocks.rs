//! The md bad-block log: one page (at most 8 sectors) of little-endian u64 entries at
//! `super_offset + bblog_offset`.
//!
//! Entry encoding (md.c `super_1_load` / `super_1_sync`): `bb = (sector_units << 10) | len_units`
//! where the units are `2^bblog_shift` sectors, so `sector = (bb >> 10) << shift` and
//! `len = (bb & 0x3ff) << shift`. An all-ones entry ends the list (md fills the page with 0xff
//! before writing entries). Entries of length zero carry nothing and are skipped, as current
//! kernels do. The kernel's in-memory list keeps each entry at most 512 units long
//! (`BB_MAX_LEN`), so encoding refuses longer ones rather than writing what md would not.

use crate::error::MetadataError;
use serde::{Deserialize, Serialize};

/// Largest log md reads: one 4 KiB page.
pub const BBLOG_MAX_BYTES: usize = 4096;
/// Longest entry md keeps, in units of `2^shift` sectors (`BB_MAX_LEN`).
pub const BB_MAX_LEN_UNITS: u64 = 512;
/// Largest sector (in units) an entry can hold: 54 bits.
pub const BB_MAX_SECTOR_UNITS: u64 = (1 << 54) - 1;

/// One bad range on a member device, in sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BadBlock {
    /// First bad sector (member sector, absolute on the device as md records it).
    pub sector: u64,
    /// Length in sectors.
    pub len_sectors: u64,
}

/// Number of entries a log of `bblog_size_sectors` holds (mdadm examine: `size*512/8`).
pub fn capacity(bblog_size_sectors: u16) -> usize {
    (usize::from(bblog_size_sectors) * 512 / 8).min(BBLOG_MAX_BYTES / 8)
}

/// Decodes a log page. `bytes` is the log as read (`bblog_size` sectors, at most 4 KiB).
pub fn decode(bytes: &[u8], bblog_shift: u8) -> Result<Vec<BadBlock>, MetadataError> {
    if bytes.len() > BBLOG_MAX_BYTES {
        return Err(MetadataError::BadBlockLogField {
            rule: "bad-block log is larger than one 4 KiB page",
        });
    }
    if bytes.len() & 7 != 0 {
        return Err(MetadataError::BadBlockLogField {
            rule: "bad-block log length is not a whole number of 8-byte entries",
        });
    }
    if bblog_shift >= 54 {
        return Err(MetadataError::BadBlockLogField {
            rule: "bblog_shift must be below 54",
        });
    }
    let mut out = Vec::new();
    for (index, chunk) in bytes.chunks_exact(8).enumerate() {
        let mut a = [0u8; 8];
        a.copy_from_slice(chunk);
        let bb = u64::from_le_bytes(a);
        if bb == u64::MAX {
            break;
        }
        let len_units = bb & 0x3ff;
        if len_units == 0 {
            continue;
        }
        let sector_units = bb >> 10;
        let sector = sector_units
            .checked_shl(u32::from(bblog_shift))
            .filter(|s| s >> bblog_shift == sector_units);
        let Some(sector) = sector else {
            return Err(MetadataError::BadBlockEntry {
                index,
                rule: "sector overflows 64 bits after applying bblog_shift",
            });
        };
        out.push(BadBlock {
            sector,
            len_sectors: len_units << bblog_shift,
        });
    }
    Ok(out)
}

/// Encodes `entries` into a log of `bblog_size_sectors` (a full page image, 0xff after the
/// last entry, as `super_1_sync` writes it).
pub fn encode(
    entries: &[BadBlock],
    bblog_shift: u8,
    bblog_size_sectors: u16,
) -> Result<Vec<u8>, MetadataError> {
    let bytes = usize::from(bblog_size_sectors) * 512;
    if bytes > BBLOG_MAX_BYTES {
        return Err(MetadataError::BadBlockLogField {
            rule: "bblog_size exceeds one 4 KiB page (8 sectors)",
        });
    }
    if bblog_shift >= 54 {
        return Err(MetadataError::BadBlockLogField {
            rule: "bblog_shift must be below 54",
        });
    }
    let cap = capacity(bblog_size_sectors);
    // The terminator needs no slot when the page is exactly full.
    if entries.len() > cap {
        return Err(MetadataError::BadBlockLogFull {
            entries: entries.len(),
            capacity: cap,
        });
    }
    let unit_mask = (1u64 << bblog_shift) - 1;
    let mut out = vec![0xffu8; bytes];
    for (index, e) in entries.iter().enumerate() {
        if e.sector & unit_mask != 0 || e.len_sectors & unit_mask != 0 {
            return Err(MetadataError::BadBlockEntry {
                index,
                rule: "sector and length must be multiples of 2^bblog_shift",
            });
        }
        let sector_units = e.sector >> bblog_shift;
        let len_units = e.len_sectors >> bblog_shift;
        if len_units == 0 || len_units > BB_MAX_LEN_UNITS {
            return Err(MetadataError::BadBlockEntry {
                index,
                rule: "length must be 1..=512 units (md's BB_MAX_LEN)",
            });
        }
        if sector_units > BB_MAX_SECTOR_UNITS {
            return Err(MetadataError::BadBlockEntry {
                index,
                rule: "sector does not fit the 54-bit field",
            });
        }
        let bb = (sector_units << 10) | len_units;
        out[index * 8..index * 8 + 8].copy_from_slice(&bb.to_le_bytes());
    }
    Ok(out)
}
