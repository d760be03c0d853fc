//! md's RAID 4/5/6 write journal (drivers/md/raid5-cache.c): the meta block that heads each
//! log write, its payload descriptors, and the crc32c checksums md computes over them.
//!
//! Owns: `struct r5l_meta_block` and the `r5l_payload_*` descriptors as bytes and back. The
//! log itself is a ring of 4 KiB blocks on the journal device, starting at its data offset:
//! a meta block, then the pages its payloads describe, then the next meta block.
//!
//! ```text
//! meta block (one 4 KiB block, little-endian)
//! 0x00 magic u32 = 0x6433c509   0x04 checksum u32   0x08 version u8 = 1   0x09 pad u8, u16
//! 0x0c meta_size u32 (bytes of the block in use)    0x10 seq u64    0x18 position u64 (sector)
//! 0x20 payloads, each:
//!      type u16 (0 data, 1 parity, 2 flush)   flags u16
//!      data/parity: size u32 (sectors)   location u64   checksum u32 per 4 KiB page
//!      flush:       size u32 (bytes)     stripe sectors u64 × size/8
//! ```
//!
//! Checksums use the kernel's `crc32c_le` (no inversion): the seed is
//! `crc32c_le(~0, set_uuid)`, the meta block's checksum covers the whole 4 KiB with the
//! checksum field zero, and each payload page has its own.

use crate::error::MetadataError;
use crate::ppl::{crc32c_update, get32, get64, put32, put64};

/// `R5LOG_MAGIC`.
pub const JOURNAL_MAGIC: u32 = 0x6433_c509;
/// `R5LOG_VERSION`.
pub const JOURNAL_VERSION: u8 = 1;
/// Size of a meta block and of a payload page (md's `PAGE_SIZE` on x86).
pub const JOURNAL_BLOCK_BYTES: usize = 4096;
/// Sectors per block (`BLOCK_SECTORS`).
pub const JOURNAL_BLOCK_SECTORS: u64 = 8;
const HEADER_BYTES: usize = 32;
const DATA_PARITY_FIXED_BYTES: usize = 16;

/// What a payload carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Data pages: `location` is the array sector of the first; one checksum per page.
    Data {
        flags: u16,
        location: u64,
        checksums: Vec<u32>,
    },
    /// Parity pages of one stripe: `location` is the stripe's member sector; P's checksum,
    /// then Q's for RAID 6.
    Parity {
        flags: u16,
        location: u64,
        checksums: Vec<u32>,
    },
    /// Stripes (member sectors) written back and no longer needed from the log.
    Flush { flags: u16, stripes: Vec<u64> },
}

impl Payload {
    /// Bytes of the descriptor in the meta block.
    pub fn descriptor_bytes(&self) -> usize {
        match self {
            Payload::Data { checksums, .. } | Payload::Parity { checksums, .. } => {
                DATA_PARITY_FIXED_BYTES + 4 * checksums.len()
            }
            Payload::Flush { stripes, .. } => 8 + 8 * stripes.len(),
        }
    }

    /// Pages that follow the meta block for this payload.
    pub fn pages(&self) -> u64 {
        match self {
            Payload::Data { checksums, .. } | Payload::Parity { checksums, .. } => {
                checksums.len() as u64
            }
            Payload::Flush { .. } => 0,
        }
    }
}

/// One meta block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaBlock {
    pub seq: u64,
    /// Sector of this block in the log (relative to the journal device's data offset).
    pub position: u64,
    pub payloads: Vec<Payload>,
}

/// `log->uuid_checksum`: `crc32c_le(~0, set_uuid)`, the seed of every journal checksum.
pub fn uuid_checksum(set_uuid: &[u8; 16]) -> u32 {
    crc32c_update(!0, set_uuid)
}

/// A payload page's checksum: `crc32c_le(uuid_checksum, page)`.
pub fn page_checksum(seed: u32, page: &[u8]) -> u32 {
    crc32c_update(seed, page)
}

impl MetaBlock {
    /// Bytes of the block in use (`meta_size`).
    pub fn meta_size(&self) -> usize {
        HEADER_BYTES
            + self
                .payloads
                .iter()
                .map(Payload::descriptor_bytes)
                .sum::<usize>()
    }

    /// Whether one more payload descriptor of `bytes` still fits the block.
    pub fn fits(&self, bytes: usize) -> bool {
        self.meta_size() + bytes <= JOURNAL_BLOCK_BYTES
    }

    /// Pages following the block.
    pub fn pages(&self) -> u64 {
        self.payloads.iter().map(Payload::pages).sum()
    }

    /// The 4 KiB block with md's checksum.
    pub fn encode(&self, seed: u32) -> Result<Vec<u8>, MetadataError> {
        let size = self.meta_size();
        if size > JOURNAL_BLOCK_BYTES {
            return Err(MetadataError::Journal {
                rule: "payload descriptors exceed the 4 KiB meta block",
            });
        }
        let mut b = vec![0u8; JOURNAL_BLOCK_BYTES];
        put32(&mut b, 0, JOURNAL_MAGIC);
        b[8] = JOURNAL_VERSION;
        put32(&mut b, 12, size as u32);
        put64(&mut b, 16, self.seq);
        put64(&mut b, 24, self.position);
        let mut at = HEADER_BYTES;
        for p in &self.payloads {
            match p {
                Payload::Data {
                    flags,
                    location,
                    checksums,
                }
                | Payload::Parity {
                    flags,
                    location,
                    checksums,
                } => {
                    let kind = if matches!(p, Payload::Data { .. }) {
                        0
                    } else {
                        1
                    };
                    put16(&mut b, at, kind);
                    put16(&mut b, at + 2, *flags);
                    put32(
                        &mut b,
                        at + 4,
                        (checksums.len() as u64 * JOURNAL_BLOCK_SECTORS) as u32,
                    );
                    put64(&mut b, at + 8, *location);
                    for (i, c) in checksums.iter().enumerate() {
                        put32(&mut b, at + 16 + 4 * i, *c);
                    }
                }
                Payload::Flush { flags, stripes } => {
                    put16(&mut b, at, 2);
                    put16(&mut b, at + 2, *flags);
                    put32(&mut b, at + 4, (stripes.len() * 8) as u32);
                    for (i, s) in stripes.iter().enumerate() {
                        put64(&mut b, at + 8 + 8 * i, *s);
                    }
                }
            }
            at += p.descriptor_bytes();
        }
        let csum = crc32c_update(seed, &b);
        put32(&mut b, 4, csum);
        Ok(b)
    }

    /// Decodes a 4 KiB block as md's recovery reads it (`r5l_recovery_read_meta_block`):
    /// magic, version, checksum and a meta size within the block; the caller checks the
    /// sequence number and position it expects.
    pub fn decode(block: &[u8], seed: u32) -> Result<MetaBlock, MetadataError> {
        if block.len() < JOURNAL_BLOCK_BYTES {
            return Err(MetadataError::Journal {
                rule: "a meta block is 4 KiB",
            });
        }
        let b = &block[..JOURNAL_BLOCK_BYTES];
        if get32(b, 0) != JOURNAL_MAGIC {
            return Err(MetadataError::Journal {
                rule: "magic is not 0x6433c509",
            });
        }
        if b[8] != JOURNAL_VERSION {
            return Err(MetadataError::Journal {
                rule: "version is not 1",
            });
        }
        let stored = get32(b, 4);
        let computed = crc32c_update(
            crc32c_update(crc32c_update(seed, &b[..4]), &[0; 4]),
            &b[8..],
        );
        if stored != computed {
            return Err(MetadataError::Journal {
                rule: "meta block checksum does not match",
            });
        }
        let size = get32(b, 12) as usize;
        if !(HEADER_BYTES..=JOURNAL_BLOCK_BYTES).contains(&size) {
            return Err(MetadataError::Journal {
                rule: "meta_size is outside the block",
            });
        }
        let mut payloads = Vec::new();
        let mut at = HEADER_BYTES;
        while at < size {
            if at + 8 > size {
                return Err(MetadataError::Journal {
                    rule: "a payload descriptor runs past meta_size",
                });
            }
            let kind = get16(b, at);
            let flags = get16(b, at + 2);
            let len = get32(b, at + 4) as usize;
            match kind {
                0 | 1 => {
                    let sectors = len as u64;
                    if sectors == 0 || !sectors.is_multiple_of(JOURNAL_BLOCK_SECTORS) {
                        return Err(MetadataError::Journal {
                            rule: "a data or parity payload is not whole 4 KiB pages",
                        });
                    }
                    let pages = (sectors / JOURNAL_BLOCK_SECTORS) as usize;
                    let end = at + DATA_PARITY_FIXED_BYTES + 4 * pages;
                    if end > size {
                        return Err(MetadataError::Journal {
                            rule: "a payload's checksums run past meta_size",
                        });
                    }
                    let location = get64(b, at + 8);
                    let checksums = (0..pages).map(|i| get32(b, at + 16 + 4 * i)).collect();
                    payloads.push(if kind == 0 {
                        Payload::Data {
                            flags,
                            location,
                            checksums,
                        }
                    } else {
                        Payload::Parity {
                            flags,
                            location,
                            checksums,
                        }
                    });
                    at = end;
                }
                2 => {
                    if !len.is_multiple_of(8) || at + 8 + len > size {
                        return Err(MetadataError::Journal {
                            rule: "a flush payload runs past meta_size",
                        });
                    }
                    let stripes = (0..len / 8).map(|i| get64(b, at + 8 + 8 * i)).collect();
                    payloads.push(Payload::Flush { flags, stripes });
                    at += 8 + len;
                }
                _ => {
                    return Err(MetadataError::Journal {
                        rule: "unknown payload type",
                    })
                }
            }
        }
        Ok(MetaBlock {
            seq: get64(b, 16),
            position: get64(b, 24),
            payloads,
        })
    }
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meta_block_round_trips_and_any_flipped_bit_is_refused() {
        let seed = uuid_checksum(&[7; 16]);
        let mb = MetaBlock {
            seq: 0x1234_5678_9abc,
            position: 4096,
            payloads: vec![
                Payload::Data {
                    flags: 0,
                    location: 80,
                    checksums: vec![1],
                },
                Payload::Parity {
                    flags: 0,
                    location: 16,
                    checksums: vec![2, 3],
                },
                Payload::Flush {
                    flags: 0,
                    stripes: vec![8, 16],
                },
            ],
        };
        let b = mb.encode(seed).unwrap();
        assert_eq!(mb.meta_size(), 32 + 20 + 24 + 24);
        assert_eq!(MetaBlock::decode(&b, seed).unwrap(), mb);
        assert_eq!(mb.pages(), 3);
        for bit in [0usize, 40, 8 * 20, 8 * 100] {
            let mut bad = b.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(MetaBlock::decode(&bad, seed).is_err(), "bit {bit}");
        }
        assert!(
            MetaBlock::decode(&b, seed ^ 1).is_err(),
            "another array's seed"
        );
    }
}
