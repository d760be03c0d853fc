//! [`FaultyDisk`]: a fault-injecting wrapper around any [`Disk`] (like nbdkit's error filter),
//! for real backends under the server or the CLI.
//!
//! Owns: deciding, per request, whether to fail it instead of passing it through. Rules
//! ([`FaultRules`]): per-operation error rates, sector ranges that always fail, a countdown
//! after which every request fails (redb's countdown backend), and a delay before every request
//! (a slow member). Rules can be written as text (`read-error=5,fail-after=2000,delay=2ms`, see
//! [`FaultSpec`]) for `raidkit serve --inject`. Invariant: a request that is
//! failed never reaches the inner disk, so the inner bytes only ever see requests that
//! "succeeded". Decisions draw from a seeded generator, so a run with a seed repeats.

use crate::rng::Rng;
use raidkit_disk::{Disk, DiskError, DiskErrorKind};
use std::io;
use std::ops::Range;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

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
    /// Every request waits this long before it is decided (a slow member).
    pub delay: Option<Duration>,
}

/// Fault rules and the seed of their random decisions, parsed from text: comma-separated
/// `key=value` items, e.g. `read-error=5,bad-read=1M-2M,fail-after=2000,delay=2ms,seed=7`.
///
/// | key | value |
/// |---|---|
/// | `read-error`, `write-error`, `flush-error` | rate per mille (0–1000) |
/// | `bad-read`, `bad-write` | byte range `START-END` (suffixes K, M, G; repeatable) |
/// | `fail-after` | requests that pass before every request fails |
/// | `delay` | wait before every request: `500us`, `2ms`, `1s` |
/// | `seed` | seed of the random decisions (default 1) |
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSpec {
    pub rules: FaultRules,
    pub seed: u64,
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("{t}: unknown size suffix {c} (K, M or G)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{t}: not a byte count"))
}

fn parse_range(text: &str) -> Result<Range<u64>, String> {
    let (a, b) = text
        .split_once('-')
        .ok_or_else(|| format!("{text}: a range is START-END"))?;
    let (start, end) = (parse_bytes(a)?, parse_bytes(b)?);
    if start >= end {
        return Err(format!("{text}: the range is empty"));
    }
    Ok(start..end)
}

fn parse_delay(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{t}: give a unit (us, ms or s)"))?;
    let n: u64 = t[..split]
        .parse()
        .map_err(|_| format!("{t}: not a duration"))?;
    let d = match &t[split..] {
        "us" => Duration::from_micros(n),
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        u => return Err(format!("{t}: unknown unit {u} (us, ms or s)")),
    };
    if d > Duration::from_secs(10) {
        return Err(format!("{t}: longer than 10 s"));
    }
    Ok(d)
}

impl FromStr for FaultSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<FaultSpec, String> {
        let mut spec = FaultSpec {
            rules: FaultRules::default(),
            seed: 1,
        };
        if text.trim().is_empty() {
            return Err("no fault rules given".into());
        }
        for item in text.split(',') {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("{item}: expected key=value"))?;
            let rate = |v: &str| -> Result<u32, String> {
                match v.trim().parse::<u32>() {
                    Ok(r) if r <= 1000 => Ok(r),
                    _ => Err(format!("{key}={v}: a rate is per mille, 0 to 1000")),
                }
            };
            let count = |v: &str| -> Result<u64, String> {
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("{key}={v}: not a whole number"))
            };
            match key.trim() {
                "read-error" => spec.rules.read_error_per_mille = rate(value)?,
                "write-error" => spec.rules.write_error_per_mille = rate(value)?,
                "flush-error" => spec.rules.flush_error_per_mille = rate(value)?,
                "bad-read" => spec.rules.bad_read_ranges.push(parse_range(value)?),
                "bad-write" => spec.rules.bad_write_ranges.push(parse_range(value)?),
                "fail-after" => spec.rules.fail_after_requests = Some(count(value)?),
                "delay" => spec.rules.delay = Some(parse_delay(value)?),
                "seed" => spec.seed = count(value)?,
                k => {
                    return Err(format!(
                        "{k}: unknown fault rule (read-error, write-error, flush-error, \
                         bad-read, bad-write, fail-after, delay, seed)"
                    ))
                }
            }
        }
        Ok(spec)
    }
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
        if let Some(d) = self.rules.delay {
            std::thread::sleep(d);
        }
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

impl<D: Disk> raidkit_disk::DiskWrapper for FaultyDisk<D> {
    type Inner = D;

    fn inner(&self) -> &D {
        &self.inner
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.decide(
            "read",
            offset_bytes,
            buf.len() as u64,
            self.rules.read_error_per_mille,
            &self.rules.bad_read_ranges,
        )?;
        self.inner().read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.decide(
            "write",
            offset_bytes,
            buf.len() as u64,
            self.rules.write_error_per_mille,
            &self.rules.bad_write_ranges,
        )?;
        self.inner().write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), DiskError> {
        self.decide("flush", 0, 0, self.rules.flush_error_per_mille, &[])?;
        self.inner().flush()
    }
    fn write_fua(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.decide(
            "write",
            offset_bytes,
            buf.len() as u64,
            self.rules.write_error_per_mille,
            &self.rules.bad_write_ranges,
        )?;
        self.inner().write_fua(buf, offset_bytes)
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.decide(
            "discard",
            offset_bytes,
            len_bytes,
            self.rules.write_error_per_mille,
            &self.rules.bad_write_ranges,
        )?;
        self.inner().discard(offset_bytes, len_bytes)
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.decide(
            "write-zeroes",
            offset_bytes,
            len_bytes,
            self.rules.write_error_per_mille,
            &self.rules.bad_write_ranges,
        )?;
        self.inner().write_zeroes(offset_bytes, len_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidkit_disk::MemDisk;

    #[test]
    fn fault_specs_parse_and_bad_ones_are_refused() {
        let spec: FaultSpec =
            "read-error=5,bad-read=1M-2M,bad-write=4096-8192,fail-after=2000,delay=2ms,seed=7"
                .parse()
                .unwrap();
        assert_eq!(spec.seed, 7);
        assert_eq!(spec.rules.read_error_per_mille, 5);
        assert_eq!(spec.rules.bad_read_ranges, vec![(1 << 20)..(2 << 20)]);
        assert_eq!(spec.rules.bad_write_ranges, vec![4096..8192]);
        assert_eq!(spec.rules.fail_after_requests, Some(2000));
        assert_eq!(spec.rules.delay, Some(Duration::from_millis(2)));
        for bad in [
            "",
            "read-error",
            "read-error=1001",
            "read-error=-1",
            "bad-read=2M-1M",
            "bad-read=1X-2M",
            "delay=5",
            "delay=1h",
            "delay=11s",
            "fail-after=many",
            "explode=1",
        ] {
            assert!(bad.parse::<FaultSpec>().is_err(), "{bad:?} was accepted");
        }
    }

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
