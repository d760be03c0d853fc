//! Typed errors for everything this crate parses or computes.
//!
//! Every variant names the on-disk field or the md/mdadm rule that was broken, so a caller can
//! tell a corrupt member from a wrong guess of the superblock version. Bad input is always an
//! `Err`, never a panic.

use std::fmt;

/// What went wrong while decoding, encoding or planning md v1.x metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataError {
    /// The buffer is shorter than the structure needs.
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        needed_bytes: usize,
        /// Bytes supplied.
        got_bytes: usize,
    },
    /// `magic` is not 0xa92b4efc (md) / 0x6d746962 (bitmap).
    BadMagic {
        /// Which structure.
        what: &'static str,
        /// Expected magic value.
        expected: u32,
        /// Value found on disk.
        found: u32,
    },
    /// `major_version` is not 1.
    UnsupportedMajorVersion {
        /// Value found on disk.
        found: u32,
    },
    /// `max_dev` exceeds the kernel's limit of (4096-256)/2 = 1920 role slots.
    MaxDevTooLarge {
        /// Value found (or requested).
        max_dev: u32,
        /// The limit.
        limit: u32,
    },
    /// `sb_csum` does not match `calc_sb_1_csum`.
    ChecksumMismatch {
        /// Checksum stored in the superblock.
        stored: u32,
        /// Checksum computed over 256 + 2*max_dev bytes.
        computed: u32,
    },
    /// `super_offset` does not equal the sector the superblock was read from.
    SuperOffsetMismatch {
        /// Value recorded in the superblock.
        recorded_sector: u64,
        /// Sector implied by the version and device size.
        expected_sector: u64,
    },
    /// `feature_map` has bits outside MD_FEATURE_ALL.
    UnknownFeatureBits {
        /// The unknown bits.
        bits: u32,
    },
    /// A padding field (`pad0`, `pad3`) is non-zero: md treats that as an unknown feature.
    NonZeroPadding {
        /// Which padding field.
        field: &'static str,
    },
    /// `data_size` is below md's minimum of 10 sectors.
    DataSizeTooSmall {
        /// Value found.
        data_size_sectors: u64,
    },
    /// For 1.1/1.2, data (or the reshape's new data offset) starts inside the superblock.
    DataOffsetOverlapsSuperblock {
        /// Which offset field.
        field: &'static str,
        /// Data offset in sectors.
        data_offset_sectors: u64,
        /// First sector after the superblock.
        superblock_end_sector: u64,
    },
    /// A region described by the superblock runs past the end of the device (or into the 1.0
    /// superblock).
    BeyondDevice {
        /// Which field (or rule) failed.
        field: &'static str,
        /// End sector (exclusive) of the region.
        end_sector: u64,
        /// Sectors available.
        limit_sectors: u64,
    },
    /// MD_FEATURE_RAID0_LAYOUT is set on an array that is not RAID0 (the kernel refuses it).
    Raid0LayoutOnNonRaid0 {
        /// md level number.
        level: i32,
    },
    /// The bad-block log fields are unusable (`bblog_size` above one page, zero offset, ...).
    BadBlockLogField {
        /// Which rule.
        rule: &'static str,
    },
    /// A bad-block entry cannot be represented on disk.
    BadBlockEntry {
        /// Index of the entry.
        index: usize,
        /// Which rule.
        rule: &'static str,
    },
    /// More bad-block entries than the log can hold.
    BadBlockLogFull {
        /// Entries supplied.
        entries: usize,
        /// Capacity of the log.
        capacity: usize,
    },
    /// A role index is outside the superblock's role table.
    DevNumberOutOfRange {
        /// Index requested.
        dev_number: u32,
        /// Role slots available (at most 1920).
        max_dev: u32,
    },
    /// An active role value collides with md's special values (>= 0xff00).
    RoleOutOfRange {
        /// Role requested.
        role: u32,
    },
    /// The device is too small for md metadata with this version.
    DeviceTooSmall {
        /// Device size in sectors.
        device_sectors: u64,
        /// Sectors needed.
        needed_sectors: u64,
    },
    /// Geometry or parameters rejected (by mdadm's rule named in the message).
    InvalidGeometry {
        /// Which rule.
        rule: &'static str,
    },
    /// The write-intent bitmap superblock failed a check.
    Bitmap {
        /// Which rule.
        rule: &'static str,
        /// Offending value.
        value: u64,
    },
    /// A partial parity log header (`struct ppl_header`) failed a check.
    Ppl {
        /// Which rule.
        rule: &'static str,
        /// Offending value.
        value: u64,
    },
    /// A write journal meta block or payload breaks one of md's rules.
    Journal { rule: &'static str },
}

impl fmt::Display for MetadataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use MetadataError::*;
        match self {
            Truncated {
                what,
                needed_bytes,
                got_bytes,
            } => write!(
                f,
                "{what} truncated: need {needed_bytes} bytes, got {got_bytes}"
            ),
            BadMagic {
                what,
                expected,
                found,
            } => write!(
                f,
                "{what}: bad magic 0x{found:08x} (expected 0x{expected:08x})"
            ),
            UnsupportedMajorVersion { found } => {
                write!(
                    f,
                    "superblock major_version is {found}, only 1 is supported"
                )
            }
            MaxDevTooLarge { max_dev, limit } => {
                write!(
                    f,
                    "superblock max_dev {max_dev} exceeds the limit of {limit}"
                )
            }
            ChecksumMismatch { stored, computed } => write!(
                f,
                "superblock sb_csum 0x{stored:08x} is wrong (computed 0x{computed:08x})"
            ),
            SuperOffsetMismatch {
                recorded_sector,
                expected_sector,
            } => write!(
                f,
                "superblock super_offset {recorded_sector} does not match its location \
                 (sector {expected_sector})"
            ),
            UnknownFeatureBits { bits } => {
                write!(f, "superblock feature_map has unknown bits 0x{bits:x}")
            }
            NonZeroPadding { field } => {
                write!(
                    f,
                    "superblock padding field {field} is not zero (unknown feature)"
                )
            }
            DataSizeTooSmall { data_size_sectors } => write!(
                f,
                "superblock data_size {data_size_sectors} is below md's minimum of 10 sectors"
            ),
            DataOffsetOverlapsSuperblock {
                field,
                data_offset_sectors,
                superblock_end_sector,
            } => {
                write!(
                    f,
                    "superblock {field} {data_offset_sectors} starts inside the superblock \
                     (which ends at sector {superblock_end_sector})"
                )
            }
            BeyondDevice {
                field,
                end_sector,
                limit_sectors,
            } => write!(
                f,
                "superblock {field} ends at sector {end_sector}, beyond the {limit_sectors} \
                 sectors available"
            ),
            Raid0LayoutOnNonRaid0 { level } => write!(
                f,
                "feature_map has RAID0_LAYOUT but level is {level} (only valid for raid0)"
            ),
            BadBlockLogField { rule } => write!(f, "bad-block log: {rule}"),
            BadBlockEntry { index, rule } => write!(f, "bad-block entry {index}: {rule}"),
            BadBlockLogFull { entries, capacity } => write!(
                f,
                "bad-block log full: {entries} entries, capacity {capacity}"
            ),
            DevNumberOutOfRange {
                dev_number,
                max_dev,
            } => write!(
                f,
                "dev_number {dev_number} is outside the role table (max_dev {max_dev})"
            ),
            RoleOutOfRange { role } => {
                write!(f, "active role {role} is not below md's limit 0xff00")
            }
            DeviceTooSmall {
                device_sectors,
                needed_sectors,
            } => write!(
                f,
                "device of {device_sectors} sectors is too small for md metadata \
                 (needs {needed_sectors})"
            ),
            InvalidGeometry { rule } => write!(f, "invalid geometry: {rule}"),
            Bitmap { rule, value } => write!(f, "bitmap superblock: {rule} (value {value})"),
            Ppl { rule, value } => write!(f, "partial parity log header: {rule} (value {value})"),
            Journal { rule } => write!(f, "write journal: {rule}"),
        }
    }
}

impl std::error::Error for MetadataError {}
