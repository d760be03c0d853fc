//! The md write-intent bitmap: its 256-byte superblock (`bitmap_super_t`, mdadm bitmap.h,
//! kernel md-bitmap.h) and the on-disk bit array that follows it.
//!
//! Byte diagram (little-endian):
//!
//! ```text
//! 0   magic u32 "bitm"   4  version u32     8  uuid [16]        24 events u64
//! 32  events_cleared u64 40 sync_size u64   48 state u32        52 chunksize u32 (bytes)
//! 56  daemon_sleep u32   60 write_behind u32 64 sectors_reserved u32  68 nodes u32
//! 72  cluster_name [64]  136 pad [120]  -> 256
//! ```
//!
//! The bit array starts right after the 256-byte superblock: one bit per bitmap chunk of the
//! sync range, bit `n` in byte `n / 8` at bit position `n % 8` (md's little-endian bit order).
//! Decoding checks magic, version and the ranges md-bitmap.c's `md_bitmap_read_sb` enforces;
//! anything that decodes re-encodes to the same 256 bytes.

use crate::error::MetadataError;
use crate::superblock::Uuid;
use serde::{Deserialize, Serialize};

/// "bitm" (`BITMAP_MAGIC`).
pub const BITMAP_MAGIC: u32 = 0x6d74_6962;
/// Size of `bitmap_super_t`.
pub const BITMAP_SUPER_BYTES: usize = 256;
/// Most bits a [`BitmapBits`] holds (512 MiB of bits; a 4 KiB chunk over 16 TiB).
pub const MAX_BITMAP_BITS: u64 = 1 << 32;
/// md's largest write-behind count (`COUNTER_MAX`, 14-bit counters).
pub const BITMAP_MAX_WRITE_BEHIND: u32 = (1 << 14) - 1;

/// Bitmap format versions (`BITMAP_MAJOR_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BitmapVersion {
    /// 3: host-endian bits (old).
    Lo,
    /// 4: little-endian bits (what mdadm writes for internal bitmaps).
    Hi,
    /// 5: clustered md.
    Clustered,
    /// 6: lockless bitmap (llbitmap).
    Lockless,
}

impl BitmapVersion {
    /// On-disk number.
    pub fn to_raw(self) -> u32 {
        match self {
            Self::Lo => 3,
            Self::Hi => 4,
            Self::Clustered => 5,
            Self::Lockless => 6,
        }
    }

    /// From the on-disk number.
    pub fn from_raw(v: u32) -> Option<Self> {
        match v {
            3 => Some(Self::Lo),
            4 => Some(Self::Hi),
            5 => Some(Self::Clustered),
            6 => Some(Self::Lockless),
            _ => None,
        }
    }
}

/// `state` bits (`enum bitmap_state` in bitmap.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct BitmapState(pub u32);

impl BitmapState {
    /// The bitmap is out of date.
    pub const STALE: u32 = 1 << 1;
    /// A write error happened.
    pub const WRITE_ERROR: u32 = 1 << 2;
    /// First use (lockless bitmap).
    pub const FIRST_USE: u32 = 1 << 3;
    /// Clean (lockless bitmap).
    pub const CLEAN: u32 = 1 << 4;
    /// Bits are host-endian.
    pub const HOSTENDIAN: u32 = 1 << 15;

    /// True when the stale bit is set.
    pub fn stale(self) -> bool {
        self.0 & Self::STALE != 0
    }
}

/// A decoded bitmap superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitmapSuper {
    /// Format version.
    pub version: BitmapVersion,
    /// Must equal the array's `set_uuid`.
    pub uuid: Uuid,
    /// Event count of the bitmap.
    pub events: u64,
    /// Event count when bits were last cleared.
    pub events_cleared: u64,
    /// Sectors the bitmap covers.
    pub sync_size_sectors: u64,
    /// State bits.
    pub state: BitmapState,
    /// Bytes of data per bit.
    pub chunk_bytes: u32,
    /// Seconds between bitmap flushes.
    pub daemon_sleep_secs: u32,
    /// Outstanding write-behind writes allowed.
    pub write_behind: u32,
    /// Sectors reserved for the bitmap (0 = not recorded).
    pub sectors_reserved: u32,
    /// Cluster nodes (0 = not clustered).
    pub nodes: u32,
    /// Cluster name, NUL padded.
    pub cluster_name: [u8; 64],
    /// The trailing 120 bytes (zero when mdadm or md write them), kept for exact round trip.
    pub pad: [u8; 120],
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

impl BitmapSuper {
    /// A version-4 (`BITMAP_MAJOR_HI`) bitmap superblock as mdadm's `add_internal_bitmap1`
    /// fills it in; the kernel initialises the events when the array starts.
    pub fn new_internal(
        uuid: Uuid,
        sync_size_sectors: u64,
        chunk_bytes: u32,
        daemon_sleep_secs: u32,
    ) -> Self {
        Self {
            version: BitmapVersion::Hi,
            uuid,
            events: 0,
            events_cleared: 0,
            sync_size_sectors,
            state: BitmapState::default(),
            chunk_bytes,
            daemon_sleep_secs,
            write_behind: 0,
            sectors_reserved: 0,
            nodes: 0,
            cluster_name: [0; 64],
            pad: [0; 120],
        }
    }

    /// Decodes the first 256 bytes of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<Self, MetadataError> {
        if bytes.len() < BITMAP_SUPER_BYTES {
            return Err(MetadataError::Truncated {
                what: "bitmap superblock",
                needed_bytes: BITMAP_SUPER_BYTES,
                got_bytes: bytes.len(),
            });
        }
        let magic = le32(bytes, 0);
        if magic != BITMAP_MAGIC {
            return Err(MetadataError::BadMagic {
                what: "bitmap superblock",
                expected: BITMAP_MAGIC,
                found: magic,
            });
        }
        let raw_version = le32(bytes, 4);
        let version = BitmapVersion::from_raw(raw_version).ok_or(MetadataError::Bitmap {
            rule: "version must be 3..=6 (BITMAP_MAJOR_LO..BITMAP_MAJOR_LOCKLESS)",
            value: u64::from(raw_version),
        })?;
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&bytes[8..24]);
        let mut cluster_name = [0u8; 64];
        cluster_name.copy_from_slice(&bytes[72..136]);
        let mut pad = [0u8; 120];
        pad.copy_from_slice(&bytes[136..256]);
        let sb = Self {
            version,
            uuid: Uuid(uuid),
            events: le64(bytes, 24),
            events_cleared: le64(bytes, 32),
            sync_size_sectors: le64(bytes, 40),
            state: BitmapState(le32(bytes, 48)),
            chunk_bytes: le32(bytes, 52),
            daemon_sleep_secs: le32(bytes, 56),
            write_behind: le32(bytes, 60),
            sectors_reserved: le32(bytes, 64),
            nodes: le32(bytes, 68),
            cluster_name,
            pad,
        };
        sb.check()?;
        Ok(sb)
    }

    /// md-bitmap.c `md_bitmap_read_sb`'s range checks.
    pub fn check(&self) -> Result<(), MetadataError> {
        if !self.chunk_bytes.is_power_of_two() {
            return Err(MetadataError::Bitmap {
                rule: "chunksize is not a power of 2",
                value: u64::from(self.chunk_bytes),
            });
        }
        if self.chunk_bytes < 512 {
            return Err(MetadataError::Bitmap {
                rule: "chunksize is below 512 bytes",
                value: u64::from(self.chunk_bytes),
            });
        }
        if self.version != BitmapVersion::Lockless && self.daemon_sleep_secs == 0 {
            return Err(MetadataError::Bitmap {
                rule: "daemon_sleep out of range",
                value: 0,
            });
        }
        if self.write_behind > BITMAP_MAX_WRITE_BEHIND {
            return Err(MetadataError::Bitmap {
                rule: "write_behind above COUNTER_MAX",
                value: u64::from(self.write_behind),
            });
        }
        Ok(())
    }

    /// The 256-byte encoding.
    pub fn encode(&self) -> [u8; BITMAP_SUPER_BYTES] {
        let mut b = [0u8; BITMAP_SUPER_BYTES];
        b[0..4].copy_from_slice(&BITMAP_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.version.to_raw().to_le_bytes());
        b[8..24].copy_from_slice(&self.uuid.0);
        b[24..32].copy_from_slice(&self.events.to_le_bytes());
        b[32..40].copy_from_slice(&self.events_cleared.to_le_bytes());
        b[40..48].copy_from_slice(&self.sync_size_sectors.to_le_bytes());
        b[48..52].copy_from_slice(&self.state.0.to_le_bytes());
        b[52..56].copy_from_slice(&self.chunk_bytes.to_le_bytes());
        b[56..60].copy_from_slice(&self.daemon_sleep_secs.to_le_bytes());
        b[60..64].copy_from_slice(&self.write_behind.to_le_bytes());
        b[64..68].copy_from_slice(&self.sectors_reserved.to_le_bytes());
        b[68..72].copy_from_slice(&self.nodes.to_le_bytes());
        b[72..136].copy_from_slice(&self.cluster_name);
        b[136..256].copy_from_slice(&self.pad);
        b
    }

    /// Bits in the bitmap: one per chunk of the sync range.
    pub fn bits(&self) -> u64 {
        bitmap_bits(self.sync_size_sectors, u64::from(self.chunk_bytes))
    }

    /// Bytes of bits (without the superblock).
    pub fn bit_bytes(&self) -> u64 {
        self.bits().div_ceil(8)
    }

    /// Superblock plus bits, rounded up to 4 KiB, in sectors (`calc_bitmap_size(bms, 4096)`).
    pub fn space_sectors(&self) -> u64 {
        crate::data_layout::calc_bitmap_size_bytes(
            self.sync_size_sectors,
            u64::from(self.chunk_bytes),
            4096,
        ) / 512
    }

    /// md accepts a bitmap whose events equal the superblock's or are one behind it
    /// (the superblock is written after the bitmap on a clean shutdown) — md-bitmap.c.
    pub fn events_match(&self, superblock_events: u64) -> bool {
        self.events == superblock_events || self.events.wrapping_add(1) == superblock_events
    }
}

/// Bits for `sync_size_sectors` at `chunk_bytes` per bit (mdadm's `bitmap_bits`, rounding up).
/// A chunk size of 0 gives 0 bits.
pub fn bitmap_bits(sync_size_sectors: u64, chunk_bytes: u64) -> u64 {
    if chunk_bytes == 0 {
        return 0;
    }
    (u128::from(sync_size_sectors) * 512).div_ceil(u128::from(chunk_bytes)) as u64
}

/// The bit array that follows the bitmap superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitmapBits {
    bits: u64,
    bytes: Vec<u8>,
}

impl BitmapBits {
    /// `bits` bits, all clear. At most [`MAX_BITMAP_BITS`], so a hostile `sync_size` cannot
    /// make it allocate without bound.
    pub fn new_clear(bits: u64) -> Result<Self, MetadataError> {
        Ok(Self {
            bits,
            bytes: vec![0; Self::check_len(bits)?],
        })
    }

    /// `bits` bits, all set (mdadm's `write_bitmap1` fills a new bitmap with 0xff so the
    /// first assembly resyncs everything).
    pub fn new_set(bits: u64) -> Result<Self, MetadataError> {
        let mut b = Self {
            bits,
            bytes: vec![0xff; Self::check_len(bits)?],
        };
        b.clear_tail();
        Ok(b)
    }

    fn check_len(bits: u64) -> Result<usize, MetadataError> {
        if bits > MAX_BITMAP_BITS {
            return Err(MetadataError::Bitmap {
                rule: "more bits than raidkit holds in memory (2^32)",
                value: bits,
            });
        }
        Ok(bits.div_ceil(8) as usize)
    }

    /// Reads `bits` bits from `bytes` (which must hold at least `ceil(bits/8)` bytes).
    pub fn from_bytes(bits: u64, bytes: &[u8]) -> Result<Self, MetadataError> {
        let need = Self::check_len(bits)?;
        if bytes.len() < need {
            return Err(MetadataError::Truncated {
                what: "bitmap bits",
                needed_bytes: need,
                got_bytes: bytes.len(),
            });
        }
        Ok(Self {
            bits,
            bytes: bytes[..need].to_vec(),
        })
    }

    fn clear_tail(&mut self) {
        let used = (self.bits % 8) as u32;
        if used != 0 {
            if let Some(last) = self.bytes.last_mut() {
                *last &= (1u8 << used) - 1;
            }
        }
    }

    /// Number of bits.
    pub fn len(&self) -> u64 {
        self.bits
    }

    /// True for a bitmap with no bits.
    pub fn is_empty(&self) -> bool {
        self.bits == 0
    }

    /// The bytes as stored on disk.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Bit `n` (false beyond the end).
    pub fn test(&self, n: u64) -> bool {
        n < self.bits && self.bytes[(n / 8) as usize] & (1 << (n % 8)) != 0
    }

    /// Sets bit `n`; returns false (and does nothing) beyond the end.
    pub fn set(&mut self, n: u64) -> bool {
        if n >= self.bits {
            return false;
        }
        self.bytes[(n / 8) as usize] |= 1 << (n % 8);
        true
    }

    /// Clears bit `n`; returns false (and does nothing) beyond the end.
    pub fn clear(&mut self, n: u64) -> bool {
        if n >= self.bits {
            return false;
        }
        self.bytes[(n / 8) as usize] &= !(1 << (n % 8));
        true
    }

    /// Number of set ("dirty") bits, as mdadm -X reports.
    pub fn count_dirty(&self) -> u64 {
        let full = (self.bits / 8) as usize;
        let mut n: u64 = self.bytes[..full]
            .iter()
            .map(|b| u64::from(b.count_ones()))
            .sum();
        let rem = (self.bits % 8) as u32;
        if rem != 0 {
            n += u64::from((self.bytes[full] & ((1u8 << rem) - 1)).count_ones());
        }
        n
    }

    /// The bit covering array (or member) sector `sector` at `chunk_bytes` per bit.
    pub fn bit_for_sector(sector: u64, chunk_bytes: u32) -> u64 {
        if chunk_bytes < 512 {
            return sector;
        }
        sector / (u64::from(chunk_bytes) / 512)
    }
}
