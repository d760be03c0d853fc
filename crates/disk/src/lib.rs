//! raidkit-disk: the narrow `Disk` trait that the array engine drives, and its real backends.
//!
//! Owns: byte-addressed positional I/O on one member (image file, block device or memory), its
//! flush, discard and write-zeroes, and the errors that name the member. Invariants: every call
//! is positional (no shared cursor), so one `Disk` is used from many threads at once (`Send +
//! Sync`); a request outside `size_bytes()` is an error, never a short read or a silent extension;
//! a read-only disk refuses every mutation before touching the backing store.
//!
//! Backends:
//! - [`FileDisk`]: regular files and block devices through `pread`/`pwrite`. Block devices are
//!   opened with `O_DIRECT` where the kernel accepts it and fall back to buffered I/O where it is
//!   refused (tmpfs, some filesystems); with `O_DIRECT`, unaligned requests go through an
//!   [`AlignedBuf`] bounce buffer so callers never have to care. Long-lived users may ask for
//!   a fully allocated image file on tmpfs to be mapped into memory, which makes its I/O
//!   a memory copy (see `mapped.rs` for how a page that vanishes under the mapping is survived).
//!   Every open takes a claim on the member ([`Claim`], see `claim.rs`): exclusive for
//!   writing, shared for reading, so two processes never change one member at once.
//! - [`MemDisk`]: memory, a cheap cloneable handle (clones share the bytes), for tests and
//!   simulation.

mod aligned;
mod claim;
mod error;
mod file;
mod mapped;
mod mem;

pub use aligned::AlignedBuf;
pub use claim::{Claim, Holder};
pub use error::{DiskError, DiskErrorKind};
pub use file::{allocate_in_full, sparse_growth, DirectIo, FileDisk, OpenOptions, SparseGrowth};
pub use mem::MemDisk;

use std::fmt;

/// One member device as the engine sees it.
///
/// All offsets and lengths are in bytes. Implementations must be safe to call from many threads
/// at once; ordering between concurrent calls on overlapping ranges is not defined (as on a disk).
pub trait Disk: Send + Sync + fmt::Debug {
    /// Reads exactly `buf.len()` bytes at `offset_bytes`.
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError>;
    /// Writes all of `buf` at `offset_bytes`. Durable only after a later [`Disk::flush`].
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError>;
    /// Makes every completed write durable (fdatasync).
    fn flush(&self) -> Result<(), DiskError>;
    /// Tells the device the range is unused. Afterwards the range reads as zeroes on every
    /// backend here (hole punching, or explicit zeroes where punching is not supported), so the
    /// engine may rely on it for parity.
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError>;
    /// Makes the range read as zeroes.
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError>;
    /// Usable size in bytes.
    fn size_bytes(&self) -> u64;
    /// Smallest unit the device addresses (512 or 4096); superblocks are written in these units.
    fn logical_block_size(&self) -> u32;
    /// The member's name for messages (its path for files).
    fn name(&self) -> &str;
    /// True when opened read-only: every mutation fails with [`DiskErrorKind::ReadOnly`].
    fn is_read_only(&self) -> bool;
    /// Makes sure a later write of the range cannot fail for want of space: a sparse image
    /// file gets the blocks allocated now, so that a full filesystem is found (as
    /// [`DiskErrorKind::NoSpace`]) before anything is written rather than half-way through a
    /// stripe. Devices whose every block exists already do nothing (the default).
    fn reserve(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        let _ = (offset_bytes, len_bytes);
        Ok(())
    }
}

/// Checks that `[offset, offset+len)` lies inside a disk of `size` bytes.
pub(crate) fn check_range(
    name: &str,
    op: &'static str,
    offset_bytes: u64,
    len_bytes: u64,
    size_bytes: u64,
) -> Result<(), DiskError> {
    match offset_bytes.checked_add(len_bytes) {
        Some(end) if end <= size_bytes => Ok(()),
        _ => Err(DiskError::new(
            name,
            op,
            offset_bytes,
            DiskErrorKind::OutOfRange {
                len_bytes,
                size_bytes,
            },
        )),
    }
}

impl<D: Disk + ?Sized> Disk for Box<D> {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        (**self).read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        (**self).write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), DiskError> {
        (**self).flush()
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        (**self).discard(offset_bytes, len_bytes)
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        (**self).write_zeroes(offset_bytes, len_bytes)
    }
    fn size_bytes(&self) -> u64 {
        (**self).size_bytes()
    }
    fn logical_block_size(&self) -> u32 {
        (**self).logical_block_size()
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn is_read_only(&self) -> bool {
        (**self).is_read_only()
    }
    fn reserve(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        (**self).reserve(offset_bytes, len_bytes)
    }
}

impl<D: Disk + ?Sized> Disk for std::sync::Arc<D> {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        (**self).read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        (**self).write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), DiskError> {
        (**self).flush()
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        (**self).discard(offset_bytes, len_bytes)
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        (**self).write_zeroes(offset_bytes, len_bytes)
    }
    fn size_bytes(&self) -> u64 {
        (**self).size_bytes()
    }
    fn logical_block_size(&self) -> u32 {
        (**self).logical_block_size()
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn is_read_only(&self) -> bool {
        (**self).is_read_only()
    }
    fn reserve(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        (**self).reserve(offset_bytes, len_bytes)
    }
}
