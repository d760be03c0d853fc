//! `MemDisk`: a member held in memory. Clones share the same bytes, so a test can hand one clone
//! to an array, drop the array, and reassemble from another clone. Invariant: the byte vector's
//! length never changes after creation.

use crate::{check_range, Disk, DiskError, DiskErrorKind};
use std::sync::{Arc, RwLock};

#[derive(Clone, Debug)]
pub struct MemDisk {
    name: Arc<str>,
    bytes: Arc<RwLock<Vec<u8>>>,
    read_only: bool,
    logical_block_size: u32,
}

impl MemDisk {
    /// A zero-filled disk of `size_bytes`.
    pub fn new(name: &str, size_bytes: u64) -> Self {
        MemDisk {
            name: name.into(),
            bytes: Arc::new(RwLock::new(vec![0u8; size_bytes as usize])),
            read_only: false,
            logical_block_size: 512,
        }
    }

    /// A handle to the same bytes that refuses every mutation.
    pub fn read_only(&self) -> Self {
        MemDisk {
            read_only: true,
            ..self.clone()
        }
    }

    /// A copy of the whole contents (for hashing and comparison in tests).
    pub fn snapshot(&self) -> Vec<u8> {
        match self.bytes.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn mutate(
        &self,
        op: &'static str,
        offset: u64,
        len: u64,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<(), DiskError> {
        if self.read_only {
            return Err(DiskError::new(
                &self.name,
                op,
                offset,
                DiskErrorKind::ReadOnly,
            ));
        }
        let mut g = match self.bytes.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        check_range(&self.name, op, offset, len, g.len() as u64)?;
        f(&mut g[offset as usize..(offset + len) as usize]);
        Ok(())
    }
}

impl Disk for MemDisk {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        let g = match self.bytes.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        check_range(
            &self.name,
            "read",
            offset_bytes,
            buf.len() as u64,
            g.len() as u64,
        )?;
        let start = offset_bytes as usize;
        buf.copy_from_slice(&g[start..start + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.mutate("write", offset_bytes, buf.len() as u64, |dst| {
            dst.copy_from_slice(buf)
        })
    }

    fn flush(&self) -> Result<(), DiskError> {
        if self.read_only {
            return Ok(());
        }
        Ok(())
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.mutate("discard", offset_bytes, len_bytes, |dst| dst.fill(0))
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.mutate("write-zeroes", offset_bytes, len_bytes, |dst| dst.fill(0))
    }

    fn size_bytes(&self) -> u64 {
        match self.bytes.read() {
            Ok(g) => g.len() as u64,
            Err(p) => p.into_inner().len() as u64,
        }
    }

    fn logical_block_size(&self) -> u32 {
        self.logical_block_size
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_bytes_and_ranges_are_checked() {
        let a = MemDisk::new("m0", 4096);
        let b = a.clone();
        a.write_at(b"hello", 100).unwrap();
        let mut buf = [0u8; 5];
        b.read_at(&mut buf, 100).unwrap();
        assert_eq!(&buf, b"hello");
        assert!(matches!(
            a.read_at(&mut buf, 4094).unwrap_err().kind,
            DiskErrorKind::OutOfRange { .. }
        ));
        let ro = a.read_only();
        assert!(matches!(
            ro.write_at(b"x", 0).unwrap_err().kind,
            DiskErrorKind::ReadOnly
        ));
        a.discard(100, 5).unwrap();
        b.read_at(&mut buf, 100).unwrap();
        assert_eq!(buf, [0u8; 5]);
    }
}
