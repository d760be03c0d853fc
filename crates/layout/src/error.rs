//! `GeometryError`: every reason a geometry or a request against it is refused.
//!
//! Each variant names the rule that was broken, in md's or mdadm's words where they have one, so
//! that a user who sees the message knows what Linux md would have said about the same array.

use std::fmt;

/// Why a geometry cannot be built, or why a request does not fit the geometry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GeometryError {
    /// md has no personality with this level number (md's levels: 0, 1, 4, 5, 6, 10).
    UnsupportedLevel { level: i32 },
    /// The number of member sizes given does not match `raid_disks`.
    MemberCountMismatch { raid_disks: u32, members: usize },
    /// Fewer member devices than the level needs (mdadm: "at least N raid-devices needed").
    TooFewDisks {
        level: i32,
        raid_disks: u32,
        min: u32,
    },
    /// More member devices than an md superblock can describe.
    TooManyDisks { raid_disks: u32, max: u32 },
    /// A striped level was given a chunk size of zero (md: "chunk size must be set").
    ChunkNotSet { level: i32 },
    /// The chunk is not a power of two (md raid4/5/6/10 refuse it; mdadm and raidkit refuse it
    /// for raid0 too, although md's raid0 could use it).
    ChunkNotPowerOfTwo { level: i32, chunk_sectors: u32 },
    /// The chunk is smaller than md's minimum for the level (raid4/5/6/10: one 4 KiB page).
    ChunkTooSmall {
        level: i32,
        chunk_sectors: u32,
        min_sectors: u32,
    },
    /// A raid5 layout number that md does not know (valid: 0..=5).
    InvalidRaid5Layout { layout: u32 },
    /// A raid6 layout number that md does not know (valid: 0..=5, 8..=10, 16..=20).
    InvalidRaid6Layout { layout: u32 },
    /// A raid10 layout word md's setup_geo refuses; `reason` says which part.
    InvalidRaid10Layout { layout: u32, reason: &'static str },
    /// raid10 copies (near × far) must be at least 2 and at most raid_disks.
    Raid10CopiesOutOfRange { copies: u32, raid_disks: u32 },
    /// A raid0 with members of different sizes has several zones, and md refuses to assemble it
    /// unless the layout says how the zones are striped (RAID0_ORIG_LAYOUT=1 or ALT_MULTIZONE=2).
    Raid0MultiZoneNeedsLayout { layout: u32, zones: usize },
    /// A member holds less than one chunk (or nothing), so it cannot carry data.
    MemberTooSmall {
        member: u32,
        sectors: u64,
        min_sectors: u64,
    },
    /// The sizes given would make the array larger than 2^64 sectors.
    SizeOverflow,
    /// A request starts or ends beyond the end of the array.
    ArraySectorOutOfRange {
        array_sector: u64,
        len_sectors: u64,
        array_sectors: u64,
    },
    /// A member index beyond raid_disks.
    MemberOutOfRange { member: u32, raid_disks: u32 },
    /// A stripe number beyond the last stripe.
    StripeOutOfRange { stripe: u64, stripe_count: u64 },
    /// The operation only exists for raid4/5/6 (stripes with parity).
    NotAParityLevel { level: i32 },
    /// A level name that is not one of 0, 1, 4, 5, 6, 10, 1e, 50, 60.
    UnknownLevel { name: String },
    /// A layout name or number that the level does not have.
    UnknownLayout { level: String, name: String },
    /// RAID 50/60 need at least two equal sets.
    TooFewSets { sets: u32 },
    /// A stacked array's sets must all be raid5 (RAID 50) or all raid6 (RAID 60) and equal.
    UnequalSets,
}

impl fmt::Display for GeometryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use GeometryError::*;
        match self {
            UnsupportedLevel { level } => write!(
                f,
                "md has no personality for level {level} (supported: 0, 1, 4, 5, 6, 10)"
            ),
            MemberCountMismatch {
                raid_disks,
                members,
            } => write!(
                f,
                "raid_disks is {raid_disks} but {members} member sizes were given"
            ),
            TooFewDisks {
                level,
                raid_disks,
                min,
            } => write!(
                f,
                "at least {min} raid-devices needed for level {level} (got {raid_disks})"
            ),
            TooManyDisks { raid_disks, max } => write!(
                f,
                "{raid_disks} raid-devices is more than md supports ({max})"
            ),
            ChunkNotSet { level } => write!(f, "level {level} needs a chunk size, but it is 0"),
            ChunkNotPowerOfTwo {
                level,
                chunk_sectors,
            } => {
                write!(
                    f,
                    "chunk size of {} bytes is not a power of two (required for level {level}",
                    u64::from(*chunk_sectors) * 512
                )?;
                if *level == 0 {
                    // md itself accepts such raid0 chunks; mdadm never creates them.
                    f.write_str(" by raidkit and by mdadm")?;
                }
                f.write_str(")")
            }
            ChunkTooSmall {
                level,
                chunk_sectors,
                min_sectors,
            } => write!(
                f,
                "chunk size of {} bytes is below the minimum of {} bytes for level {level} \
                 (md needs at least one page)",
                u64::from(*chunk_sectors) * 512,
                u64::from(*min_sectors) * 512
            ),
            InvalidRaid5Layout { layout } => write!(
                f,
                "raid5 layout {layout} not supported by md (valid: 0..=5)"
            ),
            InvalidRaid6Layout { layout } => write!(
                f,
                "raid6 layout {layout} not supported by md (valid: 0..=5, 8..=10, 16..=20)"
            ),
            InvalidRaid10Layout { layout, reason } => {
                write!(f, "unsupported raid10 layout 0x{layout:x}: {reason}")
            }
            Raid10CopiesOutOfRange { copies, raid_disks } => write!(
                f,
                "raid10 layout with {copies} copies (near x far) on {raid_disks} devices: md \
                 needs 2 <= copies <= devices"
            ),
            Raid0MultiZoneNeedsLayout { layout, zones } => write!(
                f,
                "raid0 with members of different sizes has {zones} zones and needs layout 1 \
                 (original) or 2 (alt-multizone); md refuses to assemble it with layout {layout}"
            ),
            MemberTooSmall {
                member,
                sectors,
                min_sectors,
            } => write!(
                f,
                "member {member} has {sectors} usable sectors, less than the {min_sectors} \
                 sectors (one chunk) it must hold"
            ),
            SizeOverflow => write!(
                f,
                "member sizes are too large: the array would exceed 2^64 sectors"
            ),
            ArraySectorOutOfRange {
                array_sector,
                len_sectors,
                array_sectors,
            } => write!(
                f,
                "array sectors {array_sector}+{len_sectors} are beyond the end of the array \
                 ({array_sectors} sectors)"
            ),
            MemberOutOfRange { member, raid_disks } => write!(
                f,
                "member {member} does not exist (the array has {raid_disks} raid-devices)"
            ),
            StripeOutOfRange {
                stripe,
                stripe_count,
            } => write!(
                f,
                "stripe {stripe} is beyond the last stripe (the array has {stripe_count})"
            ),
            NotAParityLevel { level } => {
                write!(f, "level {level} has no parity stripes (only raid4/5/6 do)")
            }
            UnknownLevel { name } => write!(
                f,
                "unknown level '{name}' (known: 0, 1, 4, 5, 6, 10, 1e, 50, 60)"
            ),
            UnknownLayout { level, name } => {
                write!(f, "unknown layout '{name}' for level {level}")
            }
            TooFewSets { sets } => write!(
                f,
                "a stacked array (RAID 50/60) needs at least 2 sets, got {sets}"
            ),
            UnequalSets => write!(
                f,
                "the sets of a stacked array must be equal raid5 or raid6 arrays"
            ),
        }
    }
}

impl std::error::Error for GeometryError {}
