//! Helpers of the array subcommands: looking for md superblocks the way `mdadm --examine`
//! does (damaged ones included), and the size-only device `create` rehearses on. (Flag parsing
//! shared with other commands is in `raidkit_cli::common`.)

use raidkit_cli::CliError;
use raidkit_disk::{Disk, DiskError, DiskErrorKind};
use raidkit_engine::{EngineError, FoundSuperblock};
use raidkit_metadata::{Examined, Location, Superblock, SuperblockVersion};

/// What a member holds, as `mdadm --examine` sees it.
pub enum Probe {
    /// A superblock md would accept.
    Valid(FoundSuperblock),
    /// A superblock with md's magic that breaks some of md's rules (wrong checksum, fields out
    /// of range): shown, never used to run an array.
    Damaged {
        examined: Examined,
        version: SuperblockVersion,
        device_sectors: u64,
    },
    /// No md v1.x superblock at all (why, per place looked at).
    Absent(EngineError),
}

/// Looks for a superblock on `disk`: a valid one first (as assembly does), else one with md's
/// magic at the 1.2, 1.1 or 1.0 place, in that order (as `mdadm --examine` does without `-e`).
/// Only an I/O error is an `Err`.
pub fn probe_superblock(disk: &dyn Disk) -> Result<Probe, CliError> {
    let why = match raidkit_engine::read_superblock(disk) {
        Ok(found) => return Ok(Probe::Valid(found)),
        Err(EngineError::Disk(e)) => return Err(CliError::failure(e.to_string())),
        Err(e) => e,
    };
    let size = disk.size_bytes();
    let device_sectors = size / 512;
    for version in [
        SuperblockVersion::V1_2,
        SuperblockVersion::V1_1,
        SuperblockVersion::V1_0,
    ] {
        let location = Location::new(version, device_sectors);
        let off = location.superblock_byte_offset();
        if device_sectors < 24 || off + 4096 > size {
            continue;
        }
        let mut buf = vec![0u8; 4096];
        disk.read_at(&mut buf, off)
            .map_err(|e| CliError::failure(e.to_string()))?;
        if let Ok(examined) = Superblock::examine_bytes(&buf, Some(location)) {
            return Ok(Probe::Damaged {
                examined,
                version,
                device_sectors,
            });
        }
    }
    Ok(Probe::Absent(why))
}

/// When `disk` holds an md superblock (valid or damaged): which array it belongs to, in a
/// phrase for messages.
pub fn md_owner(disk: &dyn Disk) -> Result<Option<String>, CliError> {
    let describe = |sb: &Superblock, version: SuperblockVersion, state: &str| {
        format!(
            "holds {state}md {} superblock: member of array UUID {} (name {}, raid level {}, events {})",
            version.name(),
            sb.set_uuid.to_mdadm_string(),
            sb.set_name.as_string(),
            sb.level.to_md(),
            sb.events
        )
    };
    Ok(match probe_superblock(disk)? {
        Probe::Valid(found) => Some(describe(&found.sb, found.version, "an ")),
        Probe::Damaged {
            examined, version, ..
        } => Some(describe(&examined.superblock, version, "a damaged ")),
        Probe::Absent(_) => None,
    })
}

/// What a device that holds no md superblock holds instead, if it is something create would
/// destroy: a filesystem, swap, an encrypted or LVM volume, or a partition table, by the
/// signatures blkid and mdadm look for (mdadm's create checks for filesystems and partition
/// tables the same way and asks before it goes on). Only the first 68 KiB are read.
pub fn foreign_content(disk: &dyn Disk) -> Result<Option<&'static str>, CliError> {
    const HEAD: usize = 68 << 10;
    let len = (disk.size_bytes() as usize).min(HEAD) / 512 * 512;
    let mut b = vec![0u8; len];
    disk.read_at(&mut b, 0)
        .map_err(|e| CliError::failure(e.to_string()))?;
    Ok(signature(&b))
}

/// The content `head` (the start of a device) announces, if any.
fn signature(head: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| head.get(off..off + magic.len()) == Some(magic);
    // (offset, magic, what): the magic numbers of the kernel and of libblkid.
    const SIGNATURES: &[(usize, &[u8], &str)] = &[
        (1080, &[0x53, 0xef], "an ext2/ext3/ext4 filesystem"),
        (0, b"XFSB", "an XFS filesystem"),
        (0x10040, b"_BHRfS_M", "a btrfs filesystem"),
        (4086, b"SWAPSPACE2", "a swap area"),
        (4086, b"SWAP-SPACE", "a swap area"),
        (0, b"LUKS\xba\xbe", "a LUKS encrypted volume"),
        (512, b"LABELONE", "an LVM physical volume"),
        (24, b"LABELONE", "an LVM physical volume"),
        (3, b"NTFS    ", "an NTFS filesystem"),
        (0x52, b"FAT32   ", "a FAT filesystem"),
        (0x36, b"FAT16   ", "a FAT filesystem"),
        (0x36, b"FAT12   ", "a FAT filesystem"),
        (0x8001, b"CD001", "an ISO 9660 filesystem"),
        (0, b"\x1f\x8b", "gzip data"),
        (512, b"EFI PART", "a GPT partition table"),
        (4096, b"EFI PART", "a GPT partition table"),
    ];
    if let Some((_, _, what)) = SIGNATURES.iter().find(|(off, magic, _)| at(*off, magic)) {
        return Some(what);
    }
    // An MBR: the boot signature and at least one partition entry with a type.
    if at(510, &[0x55, 0xaa]) && (0..4).any(|i| head.get(446 + 16 * i + 4).is_some_and(|&t| t != 0))
    {
        return Some("an MBR partition table");
    }
    None
}

/// A device that has only a name and a size: reads see zeroes and writes vanish. `create`
/// runs the engine's create on these before touching anything, so every rule the engine
/// checks is checked first.
#[derive(Debug)]
pub struct DryRunDisk {
    name: String,
    size_bytes: u64,
    logical_block_size: u32,
}

impl DryRunDisk {
    pub fn new(name: &str, size_bytes: u64, logical_block_size: u32) -> Self {
        DryRunDisk {
            name: name.to_string(),
            size_bytes,
            logical_block_size,
        }
    }

    fn check(&self, op: &'static str, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        match offset_bytes.checked_add(len_bytes) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(DiskError::new(
                &self.name,
                op,
                offset_bytes,
                DiskErrorKind::OutOfRange {
                    len_bytes,
                    size_bytes: self.size_bytes,
                },
            )),
        }
    }
}

impl Disk for DryRunDisk {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.check("read", offset_bytes, buf.len() as u64)?;
        buf.fill(0);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.check("write", offset_bytes, buf.len() as u64)
    }
    fn flush(&self) -> Result<(), DiskError> {
        Ok(())
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.check("discard", offset_bytes, len_bytes)
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.check("write-zeroes", offset_bytes, len_bytes)
    }
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn logical_block_size(&self) -> u32 {
        self.logical_block_size
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn is_read_only(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod signature_tests {
    use super::signature;

    #[test]
    fn signatures_are_found_at_their_places_and_zeroes_are_nothing() {
        let mut head = vec![0u8; 68 << 10];
        assert_eq!(signature(&head), None);
        head[1080] = 0x53;
        head[1081] = 0xef;
        assert_eq!(signature(&head), Some("an ext2/ext3/ext4 filesystem"));
        let mut head = vec![0u8; 68 << 10];
        head[510] = 0x55;
        head[511] = 0xaa;
        // A boot signature alone (an empty MBR) is not a partition table.
        assert_eq!(signature(&head), None);
        head[446 + 4] = 0x83;
        assert_eq!(signature(&head), Some("an MBR partition table"));
        // A short device does not read past its end.
        assert_eq!(signature(&head[..600]), Some("an MBR partition table"));
        assert_eq!(signature(&[0u8; 100]), None);
    }
}
