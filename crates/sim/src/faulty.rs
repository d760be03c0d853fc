//! [`FaultyDisk`]: a fault-injecting wrapper around any [`Disk`] (like nbdkit's error filter),
//! for real backends under the server or the CLI.
//!
//! Owns: deciding, per request, whether to fail it instead of passing it through. Rules
//! ([`FaultRules`]): per-operation error rates, sector ranges that always fail, and a countdown
//! after which every request fails (redb's countdown backend). Invariant: a request that is
//! failed never reaches the inner disk, so the inner bytes only ever see requests that
//! "succeeded". Decisions draw from a seeded generator, so a run with a seed repeats.

use crate::rng::Rng;
use raidkit_disk::{Disk, DiskError, DiskErrorKind};
use std::io;
use std::ops::Range;
use std::sync::Mutex;

/// Which requests fail. Rates are per mille.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultRules {
    pub read_error_per_mille: u32,
    pub write_error_per_mille: u32,
    pub flush_error_per_mille: u32,
    /// Byte ranges where every read fails.
    pub bad_read_ranges: Vec<Range<u64>>,
    /// Byte ranges where every write fails.
    pub bad_write_ranges: Vec<Range<u64>>,
    /// After this many requests pass, every request fails.
    pub fail_after_requests: Option<u64>,
}

#[derive(Debug)]
struct FaultState {
    rng: Rng,
    passed: u64,
    injected: u64,
}

/// A [`Disk`] that fails requests by [`FaultRules`] and passes the rest to `inner`.
#[derive(Debug)]
pub struct FaultyDisk<D: Disk> {
    inner: D,
    rules: FaultRules,
    state: Mutex<FaultState>,
}

fn overlaps(ranges: &[Range<u64>], offset: u64, len: u64) -> bool {
    let end = offset.saturating_add(len.max(1));
    ranges.iter().any(|r| r.start < end && offset < r.end)
}

impl<D: Disk> FaultyDisk<D> {
    pub fn new(inner: D, rules: FaultRules, seed: u64) -> Self {
        FaultyDisk {
            inner,
            rules,
            state: Mutex::new(FaultState {
                rng: Rng::new(seed),
                passed: 0,
                injected: 0,
            }),
        }
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Requests failed so far.
    pub fn injected(&self) -> u64 {
        self.lock().injected
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        // The state is two counters and a generator; a poisoned lock leaves them usable.
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn decide(
        &self,
        op: &'static str,
        offset: u64,
        len: u64,
        rate: u32,
        ranges: &[Range<u64>],
    ) -> Result<(), DiskError> {
        let mut st = self.lock();
        let why = if self
            .rules
            .fail_after_requests
            .is_some_and(|n| st.passed >= n)
        {
            Some("failure after the request countdown")
        } else if overlaps(ranges, offset, len) {
            Some("error in a bad range")
        } else if rate > 0 && st.rng.chance(rate) {
            Some("random error")
        } else {
            None
        };
        match why {
            Some(w) => {
                st.injected += 1;
                Err(DiskError::new(
                    self.inner.name(),
                    op,
                    offset,
                    DiskErrorKind::Io(io::Error::other(format!("injected {w}"))),
                ))
            }
            None => {
                st.passed += 1;
                Ok(())
            }
        }
    }
}

impl<D: Disk> Disk for FaultyDisk<D> {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.decide(
            "read",
            offset_bytes,
            buf.len() as u64,
            self.rules.read_error_per_mille,
            &self.rules.bad_read_ranges,
        )?;
        self.inner.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.decide(
            "write",
            offset_bytes,
            buf.len() as u64,
            self.rules.write_error_per_mille,
            &self.rules.bad_write_ranges,
        )?;
        self.inner.write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), DiskError> {
        self.decide("flush", 0, 0, self.rules.flush_error_per_mille, &[])?;
        self.inner.flush()
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.decide(
            "discard",
            offset_bytes,
            len_bytes,
            self.rules.write_error_per_mille,
            &self.rules.bad_write_ranges,
        )?;
        self.inner.discard(offset_bytes, len_bytes)
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.decide(
            "write-zeroes",
            offset_bytes,
            len_bytes,
            self.rules.write_error_per_mille,
            &self.rules.bad_write_ranges,
        )?;
        self.inner.write_zeroes(offset_bytes, len_bytes)
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn logical_block_size(&self) -> u32 {
        self.inner.logical_block_size()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn is_read_only(&self) -> bool {
        self.inner.is_read_only()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidkit_disk::MemDisk;

    #[test]
    fn ranges_countdown_and_rates() {
        let rules = FaultRules {
            bad_read_ranges: vec![Range {
                start: 1024,
                end: 2048,
            }],
            fail_after_requests: Some(4),
            ..FaultRules::default()
        };
        let d = FaultyDisk::new(MemDisk::new("m", 8192), rules, 1);
        let mut b = [0u8; 512];
        assert!(d.read_at(&mut b, 1536).is_err());
        assert!(d.read_at(&mut b, 0).is_ok());
        d.write_at(&[7u8; 512], 1024).unwrap(); // writes are not in the bad read range
        assert!(d.read_at(&mut b, 512).is_ok());
        assert!(d.flush().is_ok());
        assert!(d.read_at(&mut b, 0).is_err(), "countdown reached");
        assert_eq!(d.injected(), 2);
        let mut all = FaultyDisk::new(
            MemDisk::new("n", 4096),
            FaultRules {
                write_error_per_mille: 1000,
                ..FaultRules::default()
            },
            2,
        );
        assert!(all.write_at(&[1u8; 512], 0).is_err());
        let mut z = [9u8; 512];
        all.inner.read_at(&mut z, 0).unwrap();
        assert_eq!(z, [0u8; 512], "a failed write never reaches the inner disk");
        all.rules.write_error_per_mille = 0;
        assert!(all.write_at(&[1u8; 512], 0).is_ok());
    }
}
