//! raidkit-metadata: Linux md v1.x on-disk metadata as typed values, and back to bytes.
//!
//! Owns the byte formats that make raidkit arrays interchangeable with Linux md:
//! - [`superblock`]: `struct mdp_superblock_1` for the 1.0, 1.1 and 1.2 placements, decoded in
//!   md's fixed order of checks and re-encoded byte for byte with md's checksum;
//! - [`data_layout`]: mdadm's create-time rules for data offset, data size, bitmap and
//!   bad-block-log placement (a pure function of device size and array shape);
//! - [`bitmap`]: the write-intent bitmap superblock (`bitmap_super_t`) and its bit array;
//! - [`badblocks`]: the bad-block log page;
//! - [`ppl`]: the partial parity log header (`struct ppl_header`) with md's crc32c checksums;
//! - [`journal`]: the RAID 4/5/6 write journal's meta blocks (`struct r5l_meta_block`);
//! - [`examine`]: an `mdadm --examine`-style report as plain serialisable data.
//!
//! Nothing here does I/O, reads a clock or draws random numbers: UUIDs and times come from
//! the caller. Malformed input is a [`MetadataError`] naming the field or rule, never a panic.

pub mod badblocks;
pub mod bitmap;
pub mod data_layout;
pub mod error;
pub mod examine;
pub mod journal;
pub mod ppl;
pub mod superblock;

pub use badblocks::BadBlock;
pub use bitmap::{BitmapBits, BitmapSuper, BitmapVersion, BITMAP_MAGIC};
pub use data_layout::{BitmapPlacement, CreateShape, DataLayout};
pub use error::MetadataError;
pub use examine::ExamineReport;
pub use ppl::{PplEntry, PplHeader};
pub use superblock::{
    calc_sb_1_csum, mdadm_max_dev, DevFlags, DevRole, Examined, FeatureMap, Level, Location,
    MdTime, NewMember, PplArea, ReshapeFields, SetName, Superblock, SuperblockVersion, Uuid,
    MAX_DEV_LIMIT, MD_SB_MAGIC, RESYNC_CLEAN,
};
