//! A member with a volatile write cache in front of durable bytes, for crash tests: at a
//! crash every write not covered by a flush lands whole, not at all, or sector by sector
//! (torn), in any order. Members may share a power budget: after that many writes and
//! flushes every read, write and flush fails, as when the power goes (or, for a budget of
//! its own, as when one member dies), until [`CrashDisk::crash`].
#![allow(dead_code)]

use raidkit_disk::{Disk, DiskError, DiskErrorKind};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub struct CrashState {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// Writes since the last flush, in order.
    cache: Vec<(u64, Vec<u8>)>,
}

#[derive(Clone)]
pub struct CrashDisk {
    name: String,
    st: Arc<Mutex<CrashState>>,
    /// Writes and flushes left before the power goes (shared between members).
    power: Arc<AtomicI64>,
}

impl std::fmt::Debug for CrashDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CrashDisk({})", self.name)
    }
}

impl CrashDisk {
    pub fn new(name: &str, bytes: usize) -> CrashDisk {
        CrashDisk {
            name: name.into(),
            st: Arc::new(Mutex::new(CrashState {
                live: vec![0; bytes],
                durable: vec![0; bytes],
                cache: Vec::new(),
            })),
            power: Arc::new(AtomicI64::new(i64::MAX)),
        }
    }

    /// Shares `power` (writes and flushes left) with the other members given it.
    pub fn on_power(mut self, power: &Arc<AtomicI64>) -> CrashDisk {
        self.power = power.clone();
        self
    }

    /// Takes one unit of power, or fails as a member that lost it.
    fn draw(&self, op: &'static str, at: u64) -> Result<(), DiskError> {
        if self.power.fetch_sub(1, Ordering::SeqCst) <= 0 {
            let err = std::io::Error::other("power lost");
            return Err(DiskError::new(&self.name, op, at, DiskErrorKind::Io(err)));
        }
        Ok(())
    }

    /// Power loss: each cached write lands whole, not at all, or torn (a random subset of its
    /// sectors), in a random order; what is durable becomes what reads return.
    pub fn crash(&self, rng: &mut Rng) {
        let mut st = self.st.lock().unwrap();
        let mut cache = std::mem::take(&mut st.cache);
        // A write-back cache may write back in any order.
        for i in (1..cache.len()).rev() {
            cache.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for (at, data) in cache {
            match rng.below(3) {
                0 => {}
                1 => st.durable[at as usize..at as usize + data.len()].copy_from_slice(&data),
                _ => {
                    for (k, sector) in data.chunks(512).enumerate() {
                        if rng.below(2) == 0 {
                            let o = at as usize + k * 512;
                            st.durable[o..o + sector.len()].copy_from_slice(sector);
                        }
                    }
                }
            }
        }
        st.live = st.durable.clone();
    }
}

impl Disk for CrashDisk {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        if self.power.load(Ordering::SeqCst) <= 0 {
            let err = std::io::Error::other("power lost");
            return Err(DiskError::new(
                &self.name,
                "read",
                offset_bytes,
                DiskErrorKind::Io(err),
            ));
        }
        let st = self.st.lock().unwrap();
        let o = offset_bytes as usize;
        buf.copy_from_slice(&st.live[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.draw("write", offset_bytes)?;
        let mut st = self.st.lock().unwrap();
        let o = offset_bytes as usize;
        st.live[o..o + buf.len()].copy_from_slice(buf);
        st.cache.push((offset_bytes, buf.to_vec()));
        Ok(())
    }
    fn flush(&self) -> Result<(), DiskError> {
        self.draw("flush", 0)?;
        let mut st = self.st.lock().unwrap();
        for (at, data) in std::mem::take(&mut st.cache) {
            st.durable[at as usize..at as usize + data.len()].copy_from_slice(&data);
        }
        Ok(())
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.write_zeroes(offset_bytes, len_bytes)
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.write_at(&vec![0; len_bytes as usize], offset_bytes)
    }
    fn size_bytes(&self) -> u64 {
        self.st.lock().unwrap().live.len() as u64
    }
    fn logical_block_size(&self) -> u32 {
        512
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn is_read_only(&self) -> bool {
        false
    }
}

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
