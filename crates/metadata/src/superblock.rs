//! The md v1.x superblock (`struct mdp_superblock_1`, include/uapi/linux/raid/md_p.h).
//!
//! Owns: placement of the superblock for 1.0 / 1.1 / 1.2, the typed form of every field, and
//! the exact byte encoding with md's checksum (`calc_sb_1_csum`).
//!
//! Byte diagram (all little-endian; offsets derived field by field and asserted below):
//!
//! ```text
//! 0x000 magic u32        0x004 major_version u32  0x008 feature_map u32   0x00c pad0 u32
//! 0x010 set_uuid [16]    0x020 set_name [32]
//! 0x040 ctime u64        0x048 level u32          0x04c layout u32        0x050 size u64
//! 0x058 chunksize u32    0x05c raid_disks u32     0x060 bitmap_offset s32 (union ppl {s16 offset, u16 size})
//! 0x064 new_level u32    0x068 reshape_position u64  0x070 delta_disks u32
//! 0x074 new_layout u32   0x078 new_chunk u32      0x07c new_offset s32
//! 0x080 data_offset u64  0x088 data_size u64      0x090 super_offset u64
//! 0x098 recovery_offset u64 (union journal_tail)  0x0a0 dev_number u32    0x0a4 cnt_corrected_read u32
//! 0x0a8 device_uuid [16] 0x0b8 devflags u8        0x0b9 bblog_shift u8    0x0ba bblog_size u16
//! 0x0bc bblog_offset s32 0x0c0 utime u64          0x0c8 events u64        0x0d0 resync_offset u64
//! 0x0d8 sb_csum u32      0x0dc max_dev u32        0x0e0 pad3 [32]
//! 0x100 dev_roles [u16; max_dev]
//! ```
//!
//! Invariants of a [`Superblock`] value: `dev_roles.len() == max_dev <= 1920`, so the encoding
//! is always `256 + 2*max_dev` bytes and fits in the 4 KiB md reads. Decoding checks, in this
//! order: length, magic, major version, max_dev bound, length again, checksum, super_offset
//! against the location it was read from, unknown feature bits, non-zero padding, then ranges
//! (data_size >= 10, data inside the device, bad-block log fields). Anything that decodes
//! re-encodes to the same `256 + 2*max_dev` bytes (every byte is either a field or a padding
//! that must be zero).

use crate::error::MetadataError;
use serde::{Deserialize, Serialize};
use std::fmt;

/// md's superblock magic (`MD_SB_MAGIC`).
pub const MD_SB_MAGIC: u32 = 0xa92b_4efc;
/// Size of the fixed part of the superblock.
pub const SB_FIXED_BYTES: usize = 256;
/// The kernel's bound on `max_dev`: (4096 - 256) / 2 (`super_1_load`).
pub const MAX_DEV_LIMIT: u32 = ((4096 - SB_FIXED_BYTES) / 2) as u32;
/// md reads 4 KiB at the superblock location; the superblock never extends past it.
pub const SB_AREA_BYTES: usize = 4096;
/// `resync_offset` value meaning "in sync" (md's `MaxSector`).
pub const RESYNC_CLEAN: u64 = u64::MAX;
/// Highest value that is an ordinary role (`MD_DISK_ROLE_MAX`); values from here up are special.
pub const MD_DISK_ROLE_MAX: u16 = 0xff00;

// Field offsets, each derived from the previous one.
const OFF_MAGIC: usize = 0x000;
const OFF_MAJOR: usize = OFF_MAGIC + 4;
const OFF_FEATURE: usize = OFF_MAJOR + 4;
const OFF_PAD0: usize = OFF_FEATURE + 4;
const OFF_SET_UUID: usize = OFF_PAD0 + 4;
const OFF_SET_NAME: usize = OFF_SET_UUID + 16;
const OFF_CTIME: usize = OFF_SET_NAME + 32;
const OFF_LEVEL: usize = OFF_CTIME + 8;
const OFF_LAYOUT: usize = OFF_LEVEL + 4;
const OFF_SIZE: usize = OFF_LAYOUT + 4;
const OFF_CHUNK: usize = OFF_SIZE + 8;
const OFF_RAID_DISKS: usize = OFF_CHUNK + 4;
const OFF_BITMAP_OFFSET: usize = OFF_RAID_DISKS + 4;
const OFF_NEW_LEVEL: usize = OFF_BITMAP_OFFSET + 4;
const OFF_RESHAPE_POS: usize = OFF_NEW_LEVEL + 4;
const OFF_DELTA_DISKS: usize = OFF_RESHAPE_POS + 8;
const OFF_NEW_LAYOUT: usize = OFF_DELTA_DISKS + 4;
const OFF_NEW_CHUNK: usize = OFF_NEW_LAYOUT + 4;
const OFF_NEW_OFFSET: usize = OFF_NEW_CHUNK + 4;
const OFF_DATA_OFFSET: usize = OFF_NEW_OFFSET + 4;
const OFF_DATA_SIZE: usize = OFF_DATA_OFFSET + 8;
const OFF_SUPER_OFFSET: usize = OFF_DATA_SIZE + 8;
const OFF_RECOVERY_OFFSET: usize = OFF_SUPER_OFFSET + 8;
const OFF_DEV_NUMBER: usize = OFF_RECOVERY_OFFSET + 8;
const OFF_CNT_CORRECTED: usize = OFF_DEV_NUMBER + 4;
const OFF_DEVICE_UUID: usize = OFF_CNT_CORRECTED + 4;
const OFF_DEVFLAGS: usize = OFF_DEVICE_UUID + 16;
const OFF_BBLOG_SHIFT: usize = OFF_DEVFLAGS + 1;
const OFF_BBLOG_SIZE: usize = OFF_BBLOG_SHIFT + 1;
const OFF_BBLOG_OFFSET: usize = OFF_BBLOG_SIZE + 2;
const OFF_UTIME: usize = OFF_BBLOG_OFFSET + 4;
const OFF_EVENTS: usize = OFF_UTIME + 8;
const OFF_RESYNC_OFFSET: usize = OFF_EVENTS + 8;
const OFF_SB_CSUM: usize = OFF_RESYNC_OFFSET + 8;
const OFF_MAX_DEV: usize = OFF_SB_CSUM + 4;
const OFF_PAD3: usize = OFF_MAX_DEV + 4;
const OFF_DEV_ROLES: usize = OFF_PAD3 + 32;

// The same checks mdadm's calc_sb_1_csum makes ("make sure I can count...").
const _: () = assert!(OFF_DATA_OFFSET == 128);
const _: () = assert!(OFF_UTIME == 192);
const _: () = assert!(OFF_DEV_ROLES == SB_FIXED_BYTES);
const _: () = assert!(OFF_SB_CSUM == 0xd8);
const _: () = assert!(OFF_BBLOG_OFFSET == 0xbc);

/// Which v1.x placement: where on the member the superblock lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SuperblockVersion {
    /// 1.0: at the end, 8 KiB to 12 KiB before the end, 4 KiB aligned.
    V1_0,
    /// 1.1: at sector 0.
    V1_1,
    /// 1.2: 4 KiB from the start (sector 8).
    V1_2,
}

impl SuperblockVersion {
    /// All three placements, in md's minor-version order.
    pub const ALL: [SuperblockVersion; 3] = [Self::V1_0, Self::V1_1, Self::V1_2];

    /// md's minor version number (0, 1 or 2).
    pub fn minor(self) -> u32 {
        match self {
            Self::V1_0 => 0,
            Self::V1_1 => 1,
            Self::V1_2 => 2,
        }
    }

    /// The placement for a minor version number.
    pub fn from_minor(minor: u32) -> Option<Self> {
        match minor {
            0 => Some(Self::V1_0),
            1 => Some(Self::V1_1),
            2 => Some(Self::V1_2),
            _ => None,
        }
    }

    /// Sector of the superblock on a device of `device_sectors` 512-byte sectors
    /// (`super_1_load` in md.c; `load_super1` in mdadm super1.c). For 1.0 a device smaller than
    /// 16 sectors has no valid location; this saturates at 0 and decoding then refuses it.
    pub fn superblock_sector(self, device_sectors: u64) -> u64 {
        match self {
            Self::V1_0 => device_sectors.saturating_sub(16) & !7,
            Self::V1_1 => 0,
            Self::V1_2 => 8,
        }
    }

    /// mdadm's name ("1.0", "1.1", "1.2").
    pub fn name(self) -> &'static str {
        match self {
            Self::V1_0 => "1.0",
            Self::V1_1 => "1.1",
            Self::V1_2 => "1.2",
        }
    }

    /// The version mdadm's `examine_super1` infers from `super_offset` alone.
    pub fn guess_from_super_offset(super_offset_sectors: u64) -> Self {
        if super_offset_sectors <= 4 {
            Self::V1_1
        } else if super_offset_sectors <= 8 {
            Self::V1_2
        } else {
            Self::V1_0
        }
    }
}

impl fmt::Display for SuperblockVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a superblock was read from: needed to check `super_offset` and the data ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// Placement being tried.
    pub version: SuperblockVersion,
    /// Size of the member device in 512-byte sectors.
    pub device_sectors: u64,
}

impl Location {
    /// A location for `version` on a device of `device_sectors`.
    pub fn new(version: SuperblockVersion, device_sectors: u64) -> Self {
        Self {
            version,
            device_sectors,
        }
    }

    /// Sector of the superblock.
    pub fn superblock_sector(&self) -> u64 {
        self.version.superblock_sector(self.device_sectors)
    }

    /// Byte offset of the superblock on the device.
    pub fn superblock_byte_offset(&self) -> u64 {
        self.superblock_sector() * 512
    }
}

/// A 128-bit md UUID (array `set_uuid` or per-device `device_uuid`), kept as the 16 raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// mdadm's `--examine` form: four groups of 8 hex digits separated by ':'.
    pub fn to_mdadm_string(&self) -> String {
        let mut s = String::with_capacity(35);
        for (i, b) in self.0.iter().enumerate() {
            if i != 0 && i % 4 == 0 {
                s.push(':');
            }
            s.push_str(&format!("{b:02x}"));
        }
        s
    }

    /// Parse mdadm's form or plain 32 hex digits (':', '-', ' ' separators ignored).
    pub fn parse(text: &str) -> Option<Self> {
        let hex: Vec<u8> = text
            .bytes()
            .filter(|c| !matches!(c, b':' | b'-' | b' ' | b'.'))
            .collect();
        if hex.len() != 32 {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, pair) in hex.chunks(2).enumerate() {
            let s = std::str::from_utf8(pair).ok()?;
            out[i] = u8::from_str_radix(s, 16).ok()?;
        }
        Some(Self(out))
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_mdadm_string())
    }
}

impl Serialize for Uuid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_mdadm_string())
    }
}

impl<'de> Deserialize<'de> for Uuid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Uuid::parse(&s).ok_or_else(|| serde::de::Error::custom("expected 32 hex digits"))
    }
}

/// The 32-byte `set_name` field ("homehost:name" when mdadm writes it), kept raw so that bytes
/// after the first NUL survive a round trip.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SetName(pub [u8; 32]);

impl SetName {
    /// A name from text, truncated to 31 bytes as mdadm's `init_super1` does (NUL padded).
    pub fn new(name: &str) -> Self {
        let mut raw = [0u8; 32];
        let bytes = name.as_bytes();
        let n = bytes.len().min(31);
        raw[..n].copy_from_slice(&bytes[..n]);
        Self(raw)
    }

    /// mdadm's `homehost:name` form when it fits (`init_super1`), else the bare name.
    pub fn with_homehost(homehost: &str, name: &str) -> Self {
        if !name.contains(':') && homehost.len() + 1 + name.len() < 32 {
            Self::new(&format!("{homehost}:{name}"))
        } else {
            Self::new(name)
        }
    }

    /// The text up to the first NUL (lossy for non-UTF-8 bytes).
    pub fn as_string(&self) -> String {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(32);
        String::from_utf8_lossy(&self.0[..end]).into_owned()
    }
}

impl Serialize for SetName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_string())
    }
}

impl fmt::Debug for SetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SetName({:?})", self.as_string())
    }
}

/// md's timestamp: low 40 bits seconds since the epoch, top 24 bits microseconds (md_p.h:
/// "lo 40 bits are seconds, top 24 are microseconds or 0"). Any u64 is a valid encoding, so
/// the raw value is kept and the parts are derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MdTime(pub u64);

impl MdTime {
    const SECONDS_MASK: u64 = (1 << 40) - 1;

    /// From seconds (truncated to 40 bits) and microseconds (truncated to 24 bits).
    pub fn new(seconds: u64, micros: u32) -> Self {
        Self((seconds & Self::SECONDS_MASK) | ((u64::from(micros) & 0xff_ffff) << 40))
    }

    /// Seconds since the Unix epoch (40 bits).
    pub fn seconds(self) -> u64 {
        self.0 & Self::SECONDS_MASK
    }

    /// Microseconds part (24 bits; md writes 0 or < 1_000_000).
    pub fn micros(self) -> u32 {
        (self.0 >> 40) as u32
    }

    /// `ctime(3)`-style text in UTC, as mdadm prints it ("Sun Nov 22 22:04:00 2026").
    pub fn to_ctime_string(self) -> String {
        format_ctime_utc(self.seconds())
    }
}

impl Serialize for MdTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("MdTime", 2)?;
        st.serialize_field("seconds", &self.seconds())?;
        st.serialize_field("micros", &self.micros())?;
        st.end()
    }
}

/// Formats seconds since the epoch like C's `ctime()` in UTC, without the trailing newline.
pub fn format_ctime_utc(seconds: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = seconds / 86_400;
    let rem = seconds % 86_400;
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil-from-days (Howard Hinnant's algorithm), for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{} {} {:>2} {:02}:{:02}:{:02} {}",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        day,
        h,
        m,
        s,
        year
    )
}

/// md's RAID level numbers (`level` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Level {
    /// -5, the "faulty" test personality.
    Faulty,
    /// -4, multipath.
    Multipath,
    /// -1, linear concatenation.
    Linear,
    /// 0, striping.
    Raid0,
    /// 1, mirroring.
    Raid1,
    /// 4, dedicated parity.
    Raid4,
    /// 5, distributed parity.
    Raid5,
    /// 6, P+Q.
    Raid6,
    /// 10, md's raid10 (near/far/offset).
    Raid10,
    /// Any other value: kept so that decode then encode is exact.
    Other(i32),
}

impl Level {
    /// From md's number.
    pub fn from_md(level: i32) -> Self {
        match level {
            -5 => Self::Faulty,
            -4 => Self::Multipath,
            -1 => Self::Linear,
            0 => Self::Raid0,
            1 => Self::Raid1,
            4 => Self::Raid4,
            5 => Self::Raid5,
            6 => Self::Raid6,
            10 => Self::Raid10,
            other => Self::Other(other),
        }
    }

    /// md's number.
    pub fn to_md(self) -> i32 {
        match self {
            Self::Faulty => -5,
            Self::Multipath => -4,
            Self::Linear => -1,
            Self::Raid0 => 0,
            Self::Raid1 => 1,
            Self::Raid4 => 4,
            Self::Raid5 => 5,
            Self::Raid6 => 6,
            Self::Raid10 => 10,
            Self::Other(n) => n,
        }
    }

    /// mdadm's name (`pers` table in maps.c), None for unknown levels.
    pub fn mdadm_name(self) -> Option<&'static str> {
        Some(match self {
            Self::Faulty => "faulty",
            Self::Multipath => "multipath",
            Self::Linear => "linear",
            Self::Raid0 => "raid0",
            Self::Raid1 => "raid1",
            Self::Raid4 => "raid4",
            Self::Raid5 => "raid5",
            Self::Raid6 => "raid6",
            Self::Raid10 => "raid10",
            Self::Other(_) => return None,
        })
    }
}

/// The `feature_map` bits (md_p.h `MD_FEATURE_*`), as a typed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct FeatureMap(u32);

impl FeatureMap {
    /// `bitmap_offset` is valid: an internal write-intent bitmap exists.
    pub const BITMAP_OFFSET: Self = Self(1);
    /// `recovery_offset` is valid and must be honoured.
    pub const RECOVERY_OFFSET: Self = Self(2);
    /// A reshape is in progress: the reshape fields are valid.
    pub const RESHAPE_ACTIVE: Self = Self(4);
    /// The bad-block list is not empty.
    pub const BAD_BLOCKS: Self = Self(8);
    /// This device replaces an active device with the same role.
    pub const REPLACEMENT: Self = Self(16);
    /// Reshape without device-count change going backwards.
    pub const RESHAPE_BACKWARDS: Self = Self(32);
    /// `new_offset` must be honoured.
    pub const NEW_OFFSET: Self = Self(64);
    /// Recovery is bitmap-based (kernel `MD_FEATURE_RECOVERY_BITMAP`).
    pub const RECOVERY_BITMAP: Self = Self(128);
    /// Clustered md.
    pub const CLUSTERED: Self = Self(256);
    /// The array has a write journal.
    pub const JOURNAL: Self = Self(512);
    /// Partial parity log.
    pub const PPL: Self = Self(1024);
    /// Multiple partial parity logs.
    pub const MULTIPLE_PPLS: Self = Self(2048);
    /// `layout` is meaningful for RAID0.
    pub const RAID0_LAYOUT: Self = Self(4096);
    /// Every bit the kernel knows (`MD_FEATURE_ALL`).
    pub const ALL: Self = Self(0x1fff);

    /// Named bits, for reports.
    pub const NAMES: [(Self, &'static str); 13] = [
        (Self::BITMAP_OFFSET, "BITMAP_OFFSET"),
        (Self::RECOVERY_OFFSET, "RECOVERY_OFFSET"),
        (Self::RESHAPE_ACTIVE, "RESHAPE_ACTIVE"),
        (Self::BAD_BLOCKS, "BAD_BLOCKS"),
        (Self::REPLACEMENT, "REPLACEMENT"),
        (Self::RESHAPE_BACKWARDS, "RESHAPE_BACKWARDS"),
        (Self::NEW_OFFSET, "NEW_OFFSET"),
        (Self::RECOVERY_BITMAP, "RECOVERY_BITMAP"),
        (Self::CLUSTERED, "CLUSTERED"),
        (Self::JOURNAL, "JOURNAL"),
        (Self::PPL, "PPL"),
        (Self::MULTIPLE_PPLS, "MULTIPLE_PPLS"),
        (Self::RAID0_LAYOUT, "RAID0_LAYOUT"),
    ];

    /// The empty set.
    pub const fn empty() -> Self {
        Self(0)
    }

    /// From raw bits, refusing bits outside [`FeatureMap::ALL`].
    pub fn from_bits(bits: u32) -> Result<Self, MetadataError> {
        let unknown = bits & !Self::ALL.0;
        if unknown != 0 {
            return Err(MetadataError::UnknownFeatureBits { bits: unknown });
        }
        Ok(Self(bits))
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// True when every bit of `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Sets the bits of `other`.
    pub fn insert(&mut self, other: Self) {
        self.0 |= other.0;
    }

    /// Clears the bits of `other`.
    pub fn remove(&mut self, other: Self) {
        self.0 &= !other.0;
    }

    /// Sets or clears the bits of `other`.
    pub fn set(&mut self, other: Self, on: bool) {
        if on {
            self.insert(other)
        } else {
            self.remove(other)
        }
    }

    /// Names of the bits that are set.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES
            .iter()
            .filter(|(f, _)| self.contains(*f))
            .map(|(_, n)| *n)
            .collect()
    }
}

impl std::ops::BitOr for FeatureMap {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// A device's role in `dev_roles[]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DevRole {
    /// An active slot 0..0xff00 (`raid_disk`).
    Active(u16),
    /// 0xffff: spare.
    Spare,
    /// 0xfffe: faulty.
    Faulty,
    /// 0xfffd: write journal.
    Journal,
    /// 0xff00..=0xfffc: reserved values, kept so decode then encode is exact.
    Reserved(u16),
}

impl DevRole {
    /// From the on-disk u16.
    pub fn from_raw(raw: u16) -> Self {
        match raw {
            0xffff => Self::Spare,
            0xfffe => Self::Faulty,
            0xfffd => Self::Journal,
            r if r < MD_DISK_ROLE_MAX => Self::Active(r),
            r => Self::Reserved(r),
        }
    }

    /// The on-disk u16.
    pub fn to_raw(self) -> u16 {
        match self {
            Self::Active(r) | Self::Reserved(r) => r,
            Self::Spare => 0xffff,
            Self::Faulty => 0xfffe,
            Self::Journal => 0xfffd,
        }
    }

    /// An active role, refusing values that collide with md's special roles.
    pub fn active(slot: u32) -> Result<Self, MetadataError> {
        if slot >= u32::from(MD_DISK_ROLE_MAX) {
            return Err(MetadataError::RoleOutOfRange { role: slot });
        }
        Ok(Self::Active(slot as u16))
    }
}

/// `devflags` bits (`WriteMostly1`, `FailFast1`); unknown bits are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct DevFlags(pub u8);

impl DevFlags {
    /// Reads should avoid this device (`WriteMostly1`).
    pub const WRITE_MOSTLY: u8 = 1;
    /// Fail fast on errors (`FailFast1`).
    pub const FAIL_FAST: u8 = 2;

    /// Write-mostly flag.
    pub fn write_mostly(self) -> bool {
        self.0 & Self::WRITE_MOSTLY != 0
    }

    /// Fail-fast flag.
    pub fn fail_fast(self) -> bool {
        self.0 & Self::FAIL_FAST != 0
    }
}

/// The reshape fields; meaningful only when `RESHAPE_ACTIVE` is set, but always kept so the
/// encoding is exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct ReshapeFields {
    /// Level being reshaped to (md number).
    pub new_level: i32,
    /// Next array sector to reshape.
    pub reshape_position_sectors: u64,
    /// New raid_disks minus old.
    pub delta_disks: i32,
    /// Layout being reshaped to.
    pub new_layout: u32,
    /// Chunk size being reshaped to, in sectors.
    pub new_chunk_sectors: u32,
    /// Signed sectors added to data_offset for the new layout (with `NEW_OFFSET`).
    pub new_offset_sectors: i32,
}

/// The partial parity log area, which shares storage with `bitmap_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PplArea {
    /// Signed sectors from the superblock.
    pub offset_sectors: i16,
    /// Size in sectors.
    pub size_sectors: u16,
}

/// A decoded md v1.x superblock: every field of `struct mdp_superblock_1`, typed. Serialises
/// (for `--json` output) with UUIDs and the name as text and times as seconds + micros.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Superblock {
    /// `feature_map`.
    pub feature_map: FeatureMap,
    /// `set_uuid`: the array UUID.
    pub set_uuid: Uuid,
    /// `set_name`.
    pub set_name: SetName,
    /// `ctime`: array creation time.
    pub ctime: MdTime,
    /// `level`.
    pub level: Level,
    /// `layout` (raid5/6 algorithm, raid10 word, raid0 layout with `RAID0_LAYOUT`).
    pub layout: u32,
    /// `size`: sectors of each member used by the array.
    pub size_sectors: u64,
    /// `chunksize` in sectors (rounding for linear).
    pub chunk_sectors: u32,
    /// `raid_disks`.
    pub raid_disks: u32,
    /// `bitmap_offset` (signed sectors from the superblock); the same 4 bytes hold the PPL
    /// area when a PPL feature bit is set (see [`Superblock::ppl`]).
    pub bitmap_offset: i32,
    /// The reshape fields.
    pub reshape: ReshapeFields,
    /// `data_offset`: sector on this device where data starts.
    pub data_offset_sectors: u64,
    /// `data_size`: sectors usable for data after `data_offset`.
    pub data_size_sectors: u64,
    /// `super_offset`: sector of this superblock.
    pub super_offset_sectors: u64,
    /// `recovery_offset` (with `RECOVERY_OFFSET`), or `journal_tail` on a journal device.
    pub recovery_offset_sectors: u64,
    /// `dev_number`: this device's index in `dev_roles`.
    pub dev_number: u32,
    /// `cnt_corrected_read`.
    pub cnt_corrected_read: u32,
    /// `device_uuid`.
    pub device_uuid: Uuid,
    /// `devflags`.
    pub devflags: DevFlags,
    /// `bblog_shift`: bad blocks are recorded in units of 2^shift sectors.
    pub bblog_shift: u8,
    /// `bblog_size` in sectors (mdadm reserves 8).
    pub bblog_size_sectors: u16,
    /// `bblog_offset`: signed sectors from the superblock (0 = no log).
    pub bblog_offset: i32,
    /// `utime`: last update time.
    pub utime: MdTime,
    /// `events`.
    pub events: u64,
    /// `resync_offset`: in sync up to here; [`RESYNC_CLEAN`] means clean.
    pub resync_offset_sectors: u64,
    /// `dev_roles[0..max_dev]`; its length is `max_dev`.
    dev_roles: Vec<DevRole>,
}

fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}
fn arr16(b: &[u8], off: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    a
}

/// md's `calc_sb_1_csum` over `256 + 2*max_dev` bytes of `sb`, treating `sb_csum` as zero.
/// `sb` must be at least that long (callers check); `max_dev` is taken from the bytes.
pub fn calc_sb_1_csum(sb: &[u8]) -> u32 {
    let max_dev = le32(sb, OFF_MAX_DEV) as usize;
    let mut size = SB_FIXED_BYTES + 2 * max_dev;
    let mut sum: u64 = 0;
    let mut off = 0;
    while size >= 4 {
        if off != OFF_SB_CSUM {
            sum += u64::from(le32(sb, off));
        }
        off += 4;
        size -= 4;
    }
    if size == 2 {
        sum += u64::from(le16(sb, off));
    }
    ((sum & 0xffff_ffff) + (sum >> 32)) as u32
}

/// Bytes occupied by a superblock with `max_dev` role slots.
pub fn encoded_len(max_dev: u32) -> usize {
    SB_FIXED_BYTES + 2 * max_dev as usize
}

/// What a caller supplies to build a new member's superblock (everything mdadm's
/// `init_super1` + `write_init_super1` would otherwise take from the clock, the random
/// generator or the devices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMember {
    /// Array UUID.
    pub set_uuid: Uuid,
    /// This device's UUID.
    pub device_uuid: Uuid,
    /// Array name (already in "homehost:name" form if wanted).
    pub set_name: SetName,
    /// Creation time; also used as the first update time.
    pub ctime: MdTime,
    /// RAID level.
    pub level: Level,
    /// md layout number.
    pub layout: u32,
    /// Chunk size in sectors.
    pub chunk_sectors: u32,
    /// Number of slots in the array.
    pub raid_disks: u32,
    /// Role-table slots; mdadm uses raid_disks + spares rounded so the superblock fills
    /// whole 512-byte sectors (see [`mdadm_max_dev`]).
    pub max_dev: u32,
    /// This device's index in the role table.
    pub dev_number: u32,
    /// This device's role.
    pub role: DevRole,
    /// Every device's role: `(dev_number, role)`; unlisted slots are spare, as mdadm writes.
    pub roles: Vec<(u32, DevRole)>,
    /// Used sectors per member (`size`).
    pub size_sectors: u64,
    /// Placement and reserved areas (from [`crate::DataLayout`]).
    pub data_offset_sectors: u64,
    /// `data_size`.
    pub data_size_sectors: u64,
    /// `super_offset`.
    pub super_offset_sectors: u64,
    /// Internal bitmap offset from the superblock, if the array has one.
    pub bitmap_offset: Option<i32>,
    /// Bad-block log `(offset from superblock, size in sectors)`, if reserved.
    pub bblog: Option<(i32, u16)>,
    /// Event count to start from (mdadm writes 0 on create; the kernel bumps it on start).
    pub events: u64,
    /// True to mark the array clean (`--assume-clean`); false means a full resync is needed.
    pub clean: bool,
}

/// mdadm's `max_dev` for `devices` total devices: the role table is padded so that the
/// superblock is a whole number of 512-byte sectors (`init_super1`).
pub fn mdadm_max_dev(devices: u32) -> u32 {
    let sbsize = SB_FIXED_BYTES as u32 + 2 * devices;
    let rounded = sbsize.div_ceil(512) * 512;
    ((rounded - SB_FIXED_BYTES as u32) / 2).min(MAX_DEV_LIMIT)
}

/// A superblock read for diagnosis by [`Superblock::examine_bytes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Examined {
    /// The fields as found (feature bits kept even when unknown).
    pub superblock: Superblock,
    /// `sb_csum` as stored.
    pub stored_checksum: u32,
    /// `calc_sb_1_csum` of the bytes.
    pub computed_checksum: u32,
    /// Every rule of [`Superblock::decode`] the bytes break, in decode's order.
    pub problems: Vec<MetadataError>,
}

impl Superblock {
    /// Builds a member superblock for a new array. No clock and no randomness: the caller
    /// supplies UUIDs and times.
    pub fn new_member(p: &NewMember) -> Result<Self, MetadataError> {
        if p.max_dev > MAX_DEV_LIMIT {
            return Err(MetadataError::MaxDevTooLarge {
                max_dev: p.max_dev,
                limit: MAX_DEV_LIMIT,
            });
        }
        let mut sb = Superblock {
            feature_map: FeatureMap::empty(),
            set_uuid: p.set_uuid,
            set_name: p.set_name,
            ctime: p.ctime,
            level: p.level,
            layout: p.layout,
            size_sectors: p.size_sectors,
            chunk_sectors: p.chunk_sectors,
            raid_disks: p.raid_disks,
            bitmap_offset: 0,
            reshape: ReshapeFields::default(),
            data_offset_sectors: p.data_offset_sectors,
            data_size_sectors: p.data_size_sectors,
            super_offset_sectors: p.super_offset_sectors,
            recovery_offset_sectors: 0,
            dev_number: 0,
            cnt_corrected_read: 0,
            device_uuid: p.device_uuid,
            devflags: DevFlags::default(),
            bblog_shift: 0,
            bblog_size_sectors: 0,
            bblog_offset: 0,
            utime: p.ctime,
            events: p.events,
            resync_offset_sectors: if p.clean { RESYNC_CLEAN } else { 0 },
            dev_roles: vec![DevRole::Spare; p.max_dev as usize],
        };
        if let Some(off) = p.bitmap_offset {
            sb.bitmap_offset = off;
            sb.feature_map.insert(FeatureMap::BITMAP_OFFSET);
        }
        if let Some((off, size)) = p.bblog {
            sb.bblog_offset = off;
            sb.bblog_size_sectors = size;
        }
        if p.level == Level::Raid0 && p.layout != 0 {
            // Since Linux 5.4 mdadm always records a RAID0 layout when one is set
            // (write_init_super1, has_raid0_layout).
            sb.feature_map.insert(FeatureMap::RAID0_LAYOUT);
        }
        for &(n, role) in &p.roles {
            sb.set_role(n, role)?;
        }
        sb.set_role(p.dev_number, p.role)?;
        sb.dev_number = p.dev_number;
        Ok(sb)
    }

    /// `max_dev`: number of role slots.
    pub fn max_dev(&self) -> u32 {
        self.dev_roles.len() as u32
    }

    /// All role slots.
    pub fn dev_roles(&self) -> &[DevRole] {
        &self.dev_roles
    }

    /// Role of slot `dev_number`; slots beyond `max_dev` are spare (md's `role_from_sb`).
    pub fn role_of(&self, dev_number: u32) -> DevRole {
        self.dev_roles
            .get(dev_number as usize)
            .copied()
            .unwrap_or(DevRole::Spare)
    }

    /// This device's role.
    pub fn role(&self) -> DevRole {
        self.role_of(self.dev_number)
    }

    /// Sets the role of slot `dev_number`, growing `max_dev` (up to 1920) as mdadm's
    /// `add_to_super1` does.
    pub fn set_role(&mut self, dev_number: u32, role: DevRole) -> Result<(), MetadataError> {
        if dev_number >= MAX_DEV_LIMIT {
            return Err(MetadataError::DevNumberOutOfRange {
                dev_number,
                max_dev: MAX_DEV_LIMIT,
            });
        }
        if let DevRole::Active(r) = role {
            if r >= MD_DISK_ROLE_MAX {
                return Err(MetadataError::RoleOutOfRange { role: u32::from(r) });
            }
        }
        let idx = dev_number as usize;
        if idx >= self.dev_roles.len() {
            self.dev_roles.resize(idx + 1, DevRole::Spare);
        }
        self.dev_roles[idx] = role;
        Ok(())
    }

    /// Sets the number of role slots; new slots are spare. Refuses to drop a non-spare slot.
    pub fn set_max_dev(&mut self, max_dev: u32) -> Result<(), MetadataError> {
        if max_dev > MAX_DEV_LIMIT {
            return Err(MetadataError::MaxDevTooLarge {
                max_dev,
                limit: MAX_DEV_LIMIT,
            });
        }
        if let Some(pos) = self
            .dev_roles
            .iter()
            .skip(max_dev as usize)
            .position(|r| *r != DevRole::Spare)
        {
            return Err(MetadataError::DevNumberOutOfRange {
                dev_number: max_dev + pos as u32,
                max_dev,
            });
        }
        self.dev_roles.resize(max_dev as usize, DevRole::Spare);
        Ok(())
    }

    /// True when `other` describes the same array: md's `super_1_load` compares `set_uuid`,
    /// `level`, `layout` and `chunksize` against the reference member and refuses a
    /// "strangely different superblock" otherwise.
    pub fn same_array_as(&self, other: &Superblock) -> bool {
        self.set_uuid == other.set_uuid
            && self.level == other.level
            && self.layout == other.layout
            && self.chunk_sectors == other.chunk_sectors
    }

    /// True when this device holds a slot (an active role or the journal): md's
    /// `super_1_load` lets only such devices, never spares or faulty ones, supply the
    /// array's state.
    pub fn holds_a_slot(&self) -> bool {
        matches!(self.role(), DevRole::Active(_) | DevRole::Journal)
    }

    /// Index of the superblock assembly should trust, as md's `super_1_load` chooses its
    /// reference: the first member holding a slot, replaced by any later one holding a slot
    /// with strictly more events. `None` when no member holds a slot.
    pub fn freshest(members: &[Superblock]) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, sb) in members.iter().enumerate() {
            if !sb.holds_a_slot() {
                continue;
            }
            match best {
                Some(b) if members[b].events >= sb.events => {}
                _ => best = Some(i),
            }
        }
        best
    }

    /// Increments `events` (every superblock update does) and sets `utime`.
    pub fn bump_events(&mut self, now: MdTime) {
        self.events = self.events.wrapping_add(1);
        self.utime = now;
    }

    /// True when `resync_offset` is ~0 (md's "clean").
    pub fn is_clean(&self) -> bool {
        self.resync_offset_sectors == RESYNC_CLEAN
    }

    /// Marks the array clean (`resync_offset = MaxSector`).
    pub fn mark_clean(&mut self) {
        self.resync_offset_sectors = RESYNC_CLEAN;
    }

    /// Marks the array dirty: in sync only below `resync_offset_sectors` (0 = resync all).
    pub fn mark_dirty(&mut self, resync_offset_sectors: u64) {
        self.resync_offset_sectors = resync_offset_sectors;
    }

    /// Records a partially recovered device: `recovery_offset` with `RECOVERY_OFFSET` set
    /// (as `super_1_sync` does for a device with a role that is not yet in sync).
    pub fn set_recovery_offset(&mut self, sectors: u64) {
        self.recovery_offset_sectors = sectors;
        self.feature_map.insert(FeatureMap::RECOVERY_OFFSET);
    }

    /// Marks recovery complete: clears `RECOVERY_OFFSET` (and `RECOVERY_BITMAP`) and zeroes
    /// the offset, as `super_1_sync` writes for an in-sync device.
    pub fn clear_recovery_offset(&mut self) {
        self.recovery_offset_sectors = 0;
        self.feature_map.remove(FeatureMap::RECOVERY_OFFSET);
        self.feature_map.remove(FeatureMap::RECOVERY_BITMAP);
    }

    /// `recovery_offset` when `RECOVERY_OFFSET` is set.
    pub fn recovery_offset(&self) -> Option<u64> {
        self.feature_map
            .contains(FeatureMap::RECOVERY_OFFSET)
            .then_some(self.recovery_offset_sectors)
    }

    /// `journal_tail` (shares storage with `recovery_offset`) when this is a journal device.
    pub fn journal_tail(&self) -> Option<u64> {
        (self.role() == DevRole::Journal).then_some(self.recovery_offset_sectors)
    }

    /// Internal bitmap offset from the superblock, when `BITMAP_OFFSET` is set.
    pub fn bitmap_offset(&self) -> Option<i32> {
        self.feature_map
            .contains(FeatureMap::BITMAP_OFFSET)
            .then_some(self.bitmap_offset)
    }

    /// The PPL area when `PPL` or `MULTIPLE_PPLS` is set (union with `bitmap_offset`).
    pub fn ppl(&self) -> Option<PplArea> {
        if self.feature_map.bits() & (FeatureMap::PPL.bits() | FeatureMap::MULTIPLE_PPLS.bits())
            == 0
        {
            return None;
        }
        let raw = self.bitmap_offset as u32;
        Some(PplArea {
            offset_sectors: (raw & 0xffff) as u16 as i16,
            size_sectors: (raw >> 16) as u16,
        })
    }

    /// Stores a PPL area in the `bitmap_offset` union (feature bits are the caller's choice).
    pub fn set_ppl_area(&mut self, area: PplArea) {
        let raw = u32::from(area.offset_sectors as u16) | (u32::from(area.size_sectors) << 16);
        self.bitmap_offset = raw as i32;
    }

    /// The reshape fields when `RESHAPE_ACTIVE` is set.
    pub fn reshape(&self) -> Option<&ReshapeFields> {
        self.feature_map
            .contains(FeatureMap::RESHAPE_ACTIVE)
            .then_some(&self.reshape)
    }

    /// Number of bytes [`Superblock::encode`] produces: `256 + 2*max_dev`.
    pub fn encoded_len(&self) -> usize {
        encoded_len(self.max_dev())
    }

    /// Sectors occupied by the superblock on a device with 512-byte logical blocks (md's
    /// `sb_size` rounded to the block size).
    pub fn sb_size_sectors(&self) -> u64 {
        (self.encoded_len() as u64).div_ceil(512)
    }

    /// Decodes a superblock read at `location`. `bytes` starts at the superblock and must hold
    /// at least `256 + 2*max_dev` bytes (4096 is always enough).
    pub fn decode(bytes: &[u8], location: Location) -> Result<Superblock, MetadataError> {
        if bytes.len() < SB_FIXED_BYTES {
            return Err(MetadataError::Truncated {
                what: "superblock",
                needed_bytes: SB_FIXED_BYTES,
                got_bytes: bytes.len(),
            });
        }
        let magic = le32(bytes, OFF_MAGIC);
        if magic != MD_SB_MAGIC {
            return Err(MetadataError::BadMagic {
                what: "md superblock",
                expected: MD_SB_MAGIC,
                found: magic,
            });
        }
        let major = le32(bytes, OFF_MAJOR);
        if major != 1 {
            return Err(MetadataError::UnsupportedMajorVersion { found: major });
        }
        let max_dev = le32(bytes, OFF_MAX_DEV);
        if max_dev > MAX_DEV_LIMIT {
            return Err(MetadataError::MaxDevTooLarge {
                max_dev,
                limit: MAX_DEV_LIMIT,
            });
        }
        let len = encoded_len(max_dev);
        if bytes.len() < len {
            return Err(MetadataError::Truncated {
                what: "superblock role table",
                needed_bytes: len,
                got_bytes: bytes.len(),
            });
        }
        let stored = le32(bytes, OFF_SB_CSUM);
        let computed = calc_sb_1_csum(bytes);
        if stored != computed {
            return Err(MetadataError::ChecksumMismatch { stored, computed });
        }
        let super_offset = le64(bytes, OFF_SUPER_OFFSET);
        let expected = location.superblock_sector();
        if super_offset != expected
            || (location.version == SuperblockVersion::V1_0 && location.device_sectors < 16)
        {
            return Err(MetadataError::SuperOffsetMismatch {
                recorded_sector: super_offset,
                expected_sector: expected,
            });
        }
        let feature_map = FeatureMap::from_bits(le32(bytes, OFF_FEATURE))?;
        if le32(bytes, OFF_PAD0) != 0 {
            return Err(MetadataError::NonZeroPadding { field: "pad0" });
        }
        if bytes[OFF_PAD3..OFF_PAD3 + 32].iter().any(|&b| b != 0) {
            return Err(MetadataError::NonZeroPadding { field: "pad3" });
        }

        let sb = Self::parse_fields(bytes, max_dev, feature_map);
        sb.check_ranges(location)?;
        Ok(sb)
    }

    /// Reads every field without checking anything; callers have checked the length
    /// (`256 + 2*max_dev`).
    fn parse_fields(bytes: &[u8], max_dev: u32, feature_map: FeatureMap) -> Superblock {
        let super_offset = le64(bytes, OFF_SUPER_OFFSET);
        let mut name = [0u8; 32];
        name.copy_from_slice(&bytes[OFF_SET_NAME..OFF_SET_NAME + 32]);
        let dev_roles = (0..max_dev as usize)
            .map(|i| DevRole::from_raw(le16(bytes, OFF_DEV_ROLES + 2 * i)))
            .collect();
        Superblock {
            feature_map,
            set_uuid: Uuid(arr16(bytes, OFF_SET_UUID)),
            set_name: SetName(name),
            ctime: MdTime(le64(bytes, OFF_CTIME)),
            level: Level::from_md(le32(bytes, OFF_LEVEL) as i32),
            layout: le32(bytes, OFF_LAYOUT),
            size_sectors: le64(bytes, OFF_SIZE),
            chunk_sectors: le32(bytes, OFF_CHUNK),
            raid_disks: le32(bytes, OFF_RAID_DISKS),
            bitmap_offset: le32(bytes, OFF_BITMAP_OFFSET) as i32,
            reshape: ReshapeFields {
                new_level: le32(bytes, OFF_NEW_LEVEL) as i32,
                reshape_position_sectors: le64(bytes, OFF_RESHAPE_POS),
                delta_disks: le32(bytes, OFF_DELTA_DISKS) as i32,
                new_layout: le32(bytes, OFF_NEW_LAYOUT),
                new_chunk_sectors: le32(bytes, OFF_NEW_CHUNK),
                new_offset_sectors: le32(bytes, OFF_NEW_OFFSET) as i32,
            },
            data_offset_sectors: le64(bytes, OFF_DATA_OFFSET),
            data_size_sectors: le64(bytes, OFF_DATA_SIZE),
            super_offset_sectors: super_offset,
            recovery_offset_sectors: le64(bytes, OFF_RECOVERY_OFFSET),
            dev_number: le32(bytes, OFF_DEV_NUMBER),
            cnt_corrected_read: le32(bytes, OFF_CNT_CORRECTED),
            device_uuid: Uuid(arr16(bytes, OFF_DEVICE_UUID)),
            devflags: DevFlags(bytes[OFF_DEVFLAGS]),
            bblog_shift: bytes[OFF_BBLOG_SHIFT],
            bblog_size_sectors: le16(bytes, OFF_BBLOG_SIZE),
            bblog_offset: le32(bytes, OFF_BBLOG_OFFSET) as i32,
            utime: MdTime(le64(bytes, OFF_UTIME)),
            events: le64(bytes, OFF_EVENTS),
            resync_offset_sectors: le64(bytes, OFF_RESYNC_OFFSET),
            dev_roles,
        }
    }

    /// Reads a superblock for diagnosis, the way `mdadm --examine` does: only the length,
    /// magic, major version and `max_dev` bound must hold; every other rule that
    /// [`Superblock::decode`] enforces is reported in [`Examined::problems`] instead, and the
    /// stored and computed checksums are both kept. Never use the result to run an array.
    pub fn examine_bytes(
        bytes: &[u8],
        location: Option<Location>,
    ) -> Result<Examined, MetadataError> {
        if bytes.len() < SB_FIXED_BYTES {
            return Err(MetadataError::Truncated {
                what: "superblock",
                needed_bytes: SB_FIXED_BYTES,
                got_bytes: bytes.len(),
            });
        }
        let magic = le32(bytes, OFF_MAGIC);
        if magic != MD_SB_MAGIC {
            return Err(MetadataError::BadMagic {
                what: "md superblock",
                expected: MD_SB_MAGIC,
                found: magic,
            });
        }
        let major = le32(bytes, OFF_MAJOR);
        if major != 1 {
            return Err(MetadataError::UnsupportedMajorVersion { found: major });
        }
        let max_dev = le32(bytes, OFF_MAX_DEV);
        if max_dev > MAX_DEV_LIMIT {
            return Err(MetadataError::MaxDevTooLarge {
                max_dev,
                limit: MAX_DEV_LIMIT,
            });
        }
        let len = encoded_len(max_dev);
        if bytes.len() < len {
            return Err(MetadataError::Truncated {
                what: "superblock role table",
                needed_bytes: len,
                got_bytes: bytes.len(),
            });
        }
        let stored_checksum = le32(bytes, OFF_SB_CSUM);
        let computed_checksum = calc_sb_1_csum(bytes);
        let raw_features = le32(bytes, OFF_FEATURE);
        let mut problems = Vec::new();
        if stored_checksum != computed_checksum {
            problems.push(MetadataError::ChecksumMismatch {
                stored: stored_checksum,
                computed: computed_checksum,
            });
        }
        if let Err(e) = FeatureMap::from_bits(raw_features) {
            problems.push(e);
        }
        if le32(bytes, OFF_PAD0) != 0 {
            problems.push(MetadataError::NonZeroPadding { field: "pad0" });
        }
        if bytes[OFF_PAD3..OFF_PAD3 + 32].iter().any(|&b| b != 0) {
            problems.push(MetadataError::NonZeroPadding { field: "pad3" });
        }
        let sb = Self::parse_fields(bytes, max_dev, FeatureMap(raw_features));
        if let Some(location) = location {
            let expected = location.superblock_sector();
            if sb.super_offset_sectors != expected {
                problems.push(MetadataError::SuperOffsetMismatch {
                    recorded_sector: sb.super_offset_sectors,
                    expected_sector: expected,
                });
            }
            if let Err(e) = sb.check_ranges(location) {
                problems.push(e);
            }
        }
        Ok(Examined {
            superblock: sb,
            stored_checksum,
            computed_checksum,
            problems,
        })
    }

    /// The range checks of md's `super_1_load` and mdadm's `load_super1`, against the device
    /// the superblock was read from.
    pub fn check_ranges(&self, location: Location) -> Result<(), MetadataError> {
        // super_1_load: "data_size too small".
        if self.data_size_sectors < 10 {
            return Err(MetadataError::DataSizeTooSmall {
                data_size_sectors: self.data_size_sectors,
            });
        }
        let sb_start = location.superblock_sector();
        let device = location.device_sectors;
        if location.version != SuperblockVersion::V1_0 {
            // super_1_load: data (and the reshape's new data) must start after the superblock.
            let sb_end = sb_start + self.sb_size_sectors();
            if self.data_offset_sectors < sb_end {
                return Err(MetadataError::DataOffsetOverlapsSuperblock {
                    field: "data_offset",
                    data_offset_sectors: self.data_offset_sectors,
                    superblock_end_sector: sb_end,
                });
            }
            if self.feature_map.contains(FeatureMap::RESHAPE_ACTIVE)
                && self.feature_map.contains(FeatureMap::NEW_OFFSET)
            {
                let new = self
                    .data_offset_sectors
                    .checked_add_signed(i64::from(self.reshape.new_offset_sectors))
                    .unwrap_or(0);
                if new < sb_end {
                    return Err(MetadataError::DataOffsetOverlapsSuperblock {
                        field: "data_offset + new_offset",
                        data_offset_sectors: new,
                        superblock_end_sector: sb_end,
                    });
                }
            }
            // super_1_load: sectors = device - data_offset must hold data_size.
            let data_end = self
                .data_offset_sectors
                .saturating_add(self.data_size_sectors);
            if data_end > device {
                return Err(MetadataError::BeyondDevice {
                    field: "data_offset + data_size",
                    end_sector: data_end,
                    limit_sectors: device,
                });
            }
            // mdadm load_super1: a non-journal member must hold data_offset + size.
            let used_end = self.data_offset_sectors.saturating_add(self.size_sectors);
            if self.role() != DevRole::Journal && used_end > device {
                return Err(MetadataError::BeyondDevice {
                    field: "data_offset + size",
                    end_sector: used_end,
                    limit_sectors: device,
                });
            }
        } else if self.data_size_sectors > sb_start {
            // super_1_load for 1.0: the data must fit below the superblock.
            return Err(MetadataError::BeyondDevice {
                field: "data_size",
                end_sector: self.data_size_sectors,
                limit_sectors: sb_start,
            });
        }
        // super_1_load: RAID0_LAYOUT is only valid on raid0.
        if self.feature_map.contains(FeatureMap::RAID0_LAYOUT) && self.level != Level::Raid0 {
            return Err(MetadataError::Raid0LayoutOnNonRaid0 {
                level: self.level.to_md(),
            });
        }
        // super_1_load: a recorded bad-block list must fit one page and have a location.
        if self.feature_map.contains(FeatureMap::BAD_BLOCKS) {
            if self.bblog_size_sectors > 8 {
                return Err(MetadataError::BadBlockLogField {
                    rule: "bblog_size exceeds one 4 KiB page (8 sectors)",
                });
            }
            if self.bblog_offset == 0 {
                return Err(MetadataError::BadBlockLogField {
                    rule: "BAD_BLOCKS is set but bblog_offset is 0",
                });
            }
        }
        Ok(())
    }

    /// Encodes the superblock: `256 + 2*max_dev` bytes with a fresh `sb_csum`.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.encoded_len()];
        let put32 =
            |b: &mut Vec<u8>, off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_le_bytes());
        let put64 =
            |b: &mut Vec<u8>, off: usize, v: u64| b[off..off + 8].copy_from_slice(&v.to_le_bytes());
        put32(&mut b, OFF_MAGIC, MD_SB_MAGIC);
        put32(&mut b, OFF_MAJOR, 1);
        put32(&mut b, OFF_FEATURE, self.feature_map.bits());
        b[OFF_SET_UUID..OFF_SET_UUID + 16].copy_from_slice(&self.set_uuid.0);
        b[OFF_SET_NAME..OFF_SET_NAME + 32].copy_from_slice(&self.set_name.0);
        put64(&mut b, OFF_CTIME, self.ctime.0);
        put32(&mut b, OFF_LEVEL, self.level.to_md() as u32);
        put32(&mut b, OFF_LAYOUT, self.layout);
        put64(&mut b, OFF_SIZE, self.size_sectors);
        put32(&mut b, OFF_CHUNK, self.chunk_sectors);
        put32(&mut b, OFF_RAID_DISKS, self.raid_disks);
        put32(&mut b, OFF_BITMAP_OFFSET, self.bitmap_offset as u32);
        put32(&mut b, OFF_NEW_LEVEL, self.reshape.new_level as u32);
        put64(
            &mut b,
            OFF_RESHAPE_POS,
            self.reshape.reshape_position_sectors,
        );
        put32(&mut b, OFF_DELTA_DISKS, self.reshape.delta_disks as u32);
        put32(&mut b, OFF_NEW_LAYOUT, self.reshape.new_layout);
        put32(&mut b, OFF_NEW_CHUNK, self.reshape.new_chunk_sectors);
        put32(
            &mut b,
            OFF_NEW_OFFSET,
            self.reshape.new_offset_sectors as u32,
        );
        put64(&mut b, OFF_DATA_OFFSET, self.data_offset_sectors);
        put64(&mut b, OFF_DATA_SIZE, self.data_size_sectors);
        put64(&mut b, OFF_SUPER_OFFSET, self.super_offset_sectors);
        put64(&mut b, OFF_RECOVERY_OFFSET, self.recovery_offset_sectors);
        put32(&mut b, OFF_DEV_NUMBER, self.dev_number);
        put32(&mut b, OFF_CNT_CORRECTED, self.cnt_corrected_read);
        b[OFF_DEVICE_UUID..OFF_DEVICE_UUID + 16].copy_from_slice(&self.device_uuid.0);
        b[OFF_DEVFLAGS] = self.devflags.0;
        b[OFF_BBLOG_SHIFT] = self.bblog_shift;
        b[OFF_BBLOG_SIZE..OFF_BBLOG_SIZE + 2]
            .copy_from_slice(&self.bblog_size_sectors.to_le_bytes());
        put32(&mut b, OFF_BBLOG_OFFSET, self.bblog_offset as u32);
        put64(&mut b, OFF_UTIME, self.utime.0);
        put64(&mut b, OFF_EVENTS, self.events);
        put64(&mut b, OFF_RESYNC_OFFSET, self.resync_offset_sectors);
        put32(&mut b, OFF_MAX_DEV, self.max_dev());
        for (i, role) in self.dev_roles.iter().enumerate() {
            let off = OFF_DEV_ROLES + 2 * i;
            b[off..off + 2].copy_from_slice(&role.to_raw().to_le_bytes());
        }
        let csum = calc_sb_1_csum(&b);
        put32(&mut b, OFF_SB_CSUM, csum);
        b
    }

    /// The encoding padded to a whole number of `block_bytes` (512 or 4096) as written to
    /// disk. Like mdadm's buffer, the bytes after the role table are 0xff (unused role slots
    /// read as spare). `block_bytes` of 0 is treated as 512.
    pub fn encode_padded(&self, block_bytes: usize) -> Vec<u8> {
        let block = if block_bytes == 0 { 512 } else { block_bytes };
        let mut b = self.encode();
        let padded = b.len().div_ceil(block) * block;
        b.resize(padded, 0xff);
        b
    }
}
