//! The few md v1.2 superblock fields the oracle needs, read straight from a member image.
//!
//! Deliberately independent of raidkit-metadata: the oracle takes md's geometry from the bytes
//! md wrote (offsets from include/uapi/linux/raid/md_p.h) and cross-checks them against
//! `mdadm --examine` and sysfs, so a metadata bug cannot hide a layout bug or vice versa.

use std::fmt;

/// Byte offset of the v1.2 superblock (sector 8).
pub const SB_OFFSET_BYTES: usize = 4096;
const MAGIC: u32 = 0xa92b_4efc;
const MAX_DEV_LIMIT: u32 = 1920;

/// Selected fields of one member's superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberSuperblock {
    pub level: i32,
    pub layout: u32,
    /// Sectors used on each member (`size`).
    pub size_sectors: u64,
    pub chunk_sectors: u32,
    pub raid_disks: u32,
    pub data_offset_sectors: u64,
    pub data_size_sectors: u64,
    pub feature_map: u32,
    /// `recovery_offset`, which on a write journal device is `journal_tail` (the log sector
    /// of the meta block md starts its recovery from).
    pub recovery_offset_sectors: u64,
    pub dev_number: u32,
    /// `dev_roles[dev_number]`: the member's role (slot) in the array, or 0xfffe/0xffff
    /// (0xfffd: the write journal).
    pub role: u16,
}

/// Why a member's superblock was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SuperblockError {
    TooShort { len_bytes: usize },
    BadMagic { found: u32 },
    BadVersion { found: u32 },
    BadMaxDev { max_dev: u32 },
    BadChecksum { stored: u32, computed: u32 },
    DevNumberOutOfRange { dev_number: u32, max_dev: u32 },
}

impl fmt::Display for SuperblockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SuperblockError::TooShort { len_bytes } => {
                write!(
                    f,
                    "image of {len_bytes} bytes is too short for a v1.2 superblock"
                )
            }
            SuperblockError::BadMagic { found } => {
                write!(f, "superblock magic {found:#x} is not md's {MAGIC:#x}")
            }
            SuperblockError::BadVersion { found } => {
                write!(f, "superblock major_version {found} is not 1")
            }
            SuperblockError::BadMaxDev { max_dev } => {
                write!(f, "superblock max_dev {max_dev} exceeds {MAX_DEV_LIMIT}")
            }
            SuperblockError::BadChecksum { stored, computed } => {
                write!(
                    f,
                    "superblock checksum {stored:#x} != computed {computed:#x}"
                )
            }
            SuperblockError::DevNumberOutOfRange {
                dev_number,
                max_dev,
            } => {
                write!(
                    f,
                    "superblock dev_number {dev_number} not below max_dev {max_dev}"
                )
            }
        }
    }
}

impl std::error::Error for SuperblockError {}

fn le32(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(w)
}

fn le64(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(w)
}

/// md's calc_sb_1_csum over `sb` (256 + 2*max_dev bytes), with the checksum field as zero.
pub fn checksum(sb: &[u8]) -> u32 {
    let mut sum: u64 = 0;
    let mut i = 0;
    while i + 4 <= sb.len() {
        let word = if i == 0xd8 { 0 } else { le32(sb, i) };
        sum += u64::from(word);
        i += 4;
    }
    if i + 2 <= sb.len() {
        sum += u64::from(u16::from_le_bytes([sb[i], sb[i + 1]]));
    }
    ((sum & 0xffff_ffff) + (sum >> 32)) as u32
}

/// Read the v1.2 superblock at byte 4096 of a member image.
pub fn read_v12(image: &[u8]) -> Result<MemberSuperblock, SuperblockError> {
    let too_short = SuperblockError::TooShort {
        len_bytes: image.len(),
    };
    let head = image
        .get(SB_OFFSET_BYTES..SB_OFFSET_BYTES + 256)
        .ok_or(too_short.clone())?;
    let magic = le32(head, 0);
    if magic != MAGIC {
        return Err(SuperblockError::BadMagic { found: magic });
    }
    let major = le32(head, 4);
    if major != 1 {
        return Err(SuperblockError::BadVersion { found: major });
    }
    let max_dev = le32(head, 0xdc);
    if max_dev > MAX_DEV_LIMIT {
        return Err(SuperblockError::BadMaxDev { max_dev });
    }
    let sb_len = 256 + 2 * max_dev as usize;
    let sb = image
        .get(SB_OFFSET_BYTES..SB_OFFSET_BYTES + sb_len)
        .ok_or(too_short)?;
    let stored = le32(sb, 0xd8);
    let computed = checksum(sb);
    if stored != computed {
        return Err(SuperblockError::BadChecksum { stored, computed });
    }
    let dev_number = le32(sb, 0xa0);
    if dev_number >= max_dev {
        return Err(SuperblockError::DevNumberOutOfRange {
            dev_number,
            max_dev,
        });
    }
    let role_off = 0x100 + 2 * dev_number as usize;
    Ok(MemberSuperblock {
        level: le32(sb, 0x48) as i32,
        layout: le32(sb, 0x4c),
        size_sectors: le64(sb, 0x50),
        chunk_sectors: le32(sb, 0x58),
        raid_disks: le32(sb, 0x5c),
        data_offset_sectors: le64(sb, 0x80),
        data_size_sectors: le64(sb, 0x88),
        feature_map: le32(sb, 0x08),
        recovery_offset_sectors: le64(sb, 0x98),
        dev_number,
        role: u16::from_le_bytes([sb[role_off], sb[role_off + 1]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn synthetic() -> Vec<u8> {
        let mut img = vec![0u8; 8192];
        let sb = &mut img[SB_OFFSET_BYTES..];
        put32(sb, 0, MAGIC);
        put32(sb, 4, 1);
        put32(sb, 0x48, 6);
        put32(sb, 0x4c, 2);
        sb[0x50..0x58].copy_from_slice(&14336u64.to_le_bytes());
        put32(sb, 0x58, 128);
        put32(sb, 0x5c, 5);
        sb[0x80..0x88].copy_from_slice(&2048u64.to_le_bytes());
        put32(sb, 0xa0, 3);
        put32(sb, 0xdc, 8);
        sb[0x100 + 6..0x100 + 8].copy_from_slice(&4u16.to_le_bytes());
        let c = checksum(&sb[..256 + 16]);
        put32(sb, 0xd8, c);
        img
    }

    #[test]
    fn reads_fields_and_role() {
        let sb = read_v12(&synthetic()).unwrap();
        assert_eq!(
            (sb.level, sb.layout, sb.chunk_sectors, sb.raid_disks),
            (6, 2, 128, 5)
        );
        assert_eq!((sb.size_sectors, sb.data_offset_sectors), (14336, 2048));
        assert_eq!((sb.dev_number, sb.role), (3, 4));
    }

    #[test]
    fn rejects_corruption() {
        let mut img = synthetic();
        img[SB_OFFSET_BYTES + 0x4c] ^= 1;
        assert!(matches!(
            read_v12(&img),
            Err(SuperblockError::BadChecksum { .. })
        ));
        let mut img = synthetic();
        img[SB_OFFSET_BYTES] ^= 1;
        assert!(matches!(
            read_v12(&img),
            Err(SuperblockError::BadMagic { .. })
        ));
        assert!(matches!(
            read_v12(&img[..100]),
            Err(SuperblockError::TooShort { .. })
        ));
    }
}
