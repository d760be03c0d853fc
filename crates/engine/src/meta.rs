//! Reading and writing md v1.x superblocks on members (the byte format itself is
//! raidkit-metadata's). Owns where a superblock is looked for (1.2, then 1.1, then 1.0, as
//! `mdadm --examine` does without `-e`) and that it is written in whole logical blocks.

use crate::error::{EngineError, Result};
use raidkit_disk::Disk;
use raidkit_metadata::{Location, Superblock, SuperblockVersion};

/// A superblock found on a member, with where it was found.
#[derive(Clone, Debug)]
pub struct FoundSuperblock {
    pub sb: Superblock,
    pub version: SuperblockVersion,
    pub device_sectors: u64,
}

/// Looks for a v1.2, v1.1 or v1.0 superblock on `disk`.
pub fn read_superblock(disk: &dyn Disk) -> Result<FoundSuperblock> {
    let device_sectors = disk.size_bytes() / 512;
    let mut reasons = Vec::new();
    let mut read_error = None;
    for version in [
        SuperblockVersion::V1_2,
        SuperblockVersion::V1_1,
        SuperblockVersion::V1_0,
    ] {
        let loc = Location::new(version, device_sectors);
        let off = loc.superblock_byte_offset();
        if device_sectors < 24 || off + 4096 > disk.size_bytes() {
            reasons.push(format!(
                "{}: member too small ({} bytes)",
                version.name(),
                disk.size_bytes()
            ));
            continue;
        }
        let mut buf = vec![0u8; 4096];
        if let Err(e) = disk.read_at(&mut buf, off) {
            // An unreadable sector where another version would keep its superblock says
            // nothing about this member's own (a v1.0 member with a bad first sector still
            // has its superblock at the end): look on, and report the error only if no
            // superblock turns up.
            reasons.push(format!("{}: {e}", version.name()));
            read_error.get_or_insert(e);
            continue;
        }
        match Superblock::decode(&buf, loc) {
            Ok(sb) => {
                return Ok(FoundSuperblock {
                    sb,
                    version,
                    device_sectors,
                })
            }
            Err(e) => {
                // 1.1 and 1.2 sit at fixed places: a superblock that decodes when the device
                // is assumed large enough belongs to a member that has been cut short.
                if version != SuperblockVersion::V1_0 {
                    if let Ok(sb) = Superblock::decode(&buf, Location::new(version, u64::MAX >> 12))
                    {
                        return Err(EngineError::SizeMismatch {
                            member: disk.name().to_string(),
                            detail: format!(
                                "truncated: its md {} superblock places data up to sector {}, but the member has only {} sectors",
                                version.name(),
                                sb.data_offset_sectors + sb.data_size_sectors,
                                device_sectors
                            ),
                        });
                    }
                }
                reasons.push(format!("{}: {e}", version.name()))
            }
        }
    }
    if let Some(e) = read_error {
        return Err(EngineError::Disk(e));
    }
    Err(EngineError::NoSuperblock {
        member: disk.name().to_string(),
        detail: reasons.join("; "),
    })
}

/// Writes `sb` at its place for `version` on `disk`, padded to the logical block size.
pub fn write_superblock(
    disk: &dyn Disk,
    sb: &Superblock,
    version: SuperblockVersion,
) -> Result<()> {
    let loc = Location::new(version, disk.size_bytes() / 512);
    let block = (disk.logical_block_size() as usize).max(512);
    let bytes = sb.encode_padded(block);
    disk.write_at(&bytes, loc.superblock_byte_offset())?;
    Ok(())
}
