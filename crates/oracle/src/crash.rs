//! A crash the members do not survive, for `journal=crash` rows on the raidkit side: member
//! disks that, once armed, acknowledge every write without storing it.
//!
//! raidkit's write journal logs each write phase (data and parity of every 4 KiB stripe row)
//! and syncs the journal before it writes the members. With the members wrapped in
//! [`DropWrites`] and armed after a flush, the writes that follow reach only the journal; the
//! array is then dropped without a stop, so the members keep their state from before the
//! writes and the journal's checkpoint still points at the log that holds them. Whoever
//! assembles the array next (md in the VM) must replay the journal to read them.
//!
//! Reads always reach the disk: raidkit's read-modify-write reads the members' old data,
//! which is what a real crash leaves there too.

use raidkit_disk::{Disk, DiskError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A disk that drops writes (and discards, and zeroing) once `armed` is set, and reports them
/// done. Everything else (reads, flushes: there is nothing new to flush; space reservation)
/// reaches the disk beneath.
#[derive(Debug)]
pub struct DropWrites {
    inner: Box<dyn Disk>,
    armed: Arc<AtomicBool>,
}

impl DropWrites {
    pub fn new(inner: Box<dyn Disk>, armed: Arc<AtomicBool>) -> DropWrites {
        DropWrites { inner, armed }
    }

    fn dropping(&self) -> bool {
        self.armed.load(Ordering::SeqCst)
    }
}

impl raidkit_disk::DiskWrapper for DropWrites {
    type Inner = dyn Disk;

    fn inner(&self) -> &Self::Inner {
        &*self.inner
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        if self.dropping() {
            return Ok(());
        }
        self.inner().write_at(buf, offset_bytes)
    }

    fn write_fua(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        if self.dropping() {
            return Ok(());
        }
        self.inner().write_fua(buf, offset_bytes)
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        if self.dropping() {
            return Ok(());
        }
        self.inner().discard(offset_bytes, len_bytes)
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        if self.dropping() {
            return Ok(());
        }
        self.inner().write_zeroes(offset_bytes, len_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidkit_disk::MemDisk;

    #[test]
    fn writes_are_dropped_once_armed_and_reads_see_the_old_data() {
        let armed = Arc::new(AtomicBool::new(false));
        let d = DropWrites::new(Box::new(MemDisk::new("m", 8192)), armed.clone());
        d.write_at(&[1u8; 512], 0).unwrap();
        armed.store(true, Ordering::SeqCst);
        d.write_at(&[2u8; 512], 0).unwrap();
        d.write_zeroes(0, 512).unwrap();
        d.discard(0, 512).unwrap();
        d.flush().unwrap();
        let mut b = [0u8; 512];
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(b, [1u8; 512]);
    }
}
