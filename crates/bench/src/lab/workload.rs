//! What a run asks of a target: request size, read and random shares, queue depth, alignment,
//! the region of the target it touches, and how long it lasts; the twelve IOmeter access
//! specifications of the PERC6 report by name; and the request stream a workload makes.

use std::time::Duration;

/// The twelve IOmeter access specifications (name, request size, read %, random %).
const IOMETER_CSV: &str = include_str!("../../data/iometer-access-specs.csv");

/// How much a run does: a number of bytes, or a time.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    Bytes(u64),
    Time(Duration),
}

/// The part of the target a run touches, as shares of its size: `0.0..0.1` is the first 10%
/// (a disk's outer zone), `0.9..1.0` the last (inner).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Region {
    pub start: f64,
    pub end: f64,
}

impl Region {
    pub const WHOLE: Region = Region {
        start: 0.0,
        end: 1.0,
    };

    /// `first:10%`, `last:10%`, `10%..20%` or `all`.
    pub fn parse(s: &str) -> Result<Region, String> {
        let pct = |t: &str| -> Result<f64, String> {
            let v: f64 = t
                .trim()
                .trim_end_matches('%')
                .parse()
                .map_err(|_| format!("{t:?} is not a percentage"))?;
            if !(0.0..=100.0).contains(&v) {
                return Err(format!("{t:?} is not between 0% and 100%"));
            }
            Ok(v / 100.0)
        };
        let r = if s == "all" {
            Region::WHOLE
        } else if let Some(p) = s.strip_prefix("first:") {
            Region {
                start: 0.0,
                end: pct(p)?,
            }
        } else if let Some(p) = s.strip_prefix("last:") {
            Region {
                start: 1.0 - pct(p)?,
                end: 1.0,
            }
        } else if let Some((a, b)) = s.split_once("..") {
            Region {
                start: pct(a)?,
                end: pct(b)?,
            }
        } else {
            return Err(format!(
                "region {s:?}: say all, first:N%, last:N% or A%..B%"
            ));
        };
        if r.end <= r.start {
            return Err(format!("region {s:?} is empty"));
        }
        Ok(r)
    }

    /// The byte range of a target of `size` bytes, aligned to `align`.
    pub fn bytes(&self, size: u64, align: u64) -> (u64, u64) {
        let a = align.max(1);
        let lo = (size as f64 * self.start) as u64 / a * a;
        let hi = (size as f64 * self.end) as u64 / a * a;
        (lo, hi.max(lo))
    }

    pub fn describe(&self) -> String {
        if *self == Region::WHOLE {
            "all".into()
        } else if self.start == 0.0 {
            format!("first {:.0}%", self.end * 100.0)
        } else if self.end == 1.0 {
            format!("last {:.0}%", (1.0 - self.start) * 100.0)
        } else {
            format!("{:.0}%..{:.0}%", self.start * 100.0, self.end * 100.0)
        }
    }
}

/// One access pattern at one queue depth.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Workload {
    /// A name for tables (`seq-write-1m`, an IOmeter spec's name, `custom`).
    pub name: String,
    pub request_bytes: u64,
    /// Share of requests that are reads, 0..=100.
    pub read_pct: u32,
    /// Share of requests at a random offset, 0..=100; the rest follow on from the last.
    pub random_pct: u32,
    /// Requests kept outstanding at once.
    pub queue_depth: usize,
    /// Random offsets are multiples of this (defaults to the request size, IOmeter's default).
    pub align_bytes: u64,
    pub region: Region,
    pub limit: Limit,
    /// Time run first and not counted (caches and queues filled).
    pub warmup: Duration,
}

impl Workload {
    pub fn custom(request_bytes: u64, read_pct: u32, random_pct: u32, queue_depth: usize) -> Self {
        Workload {
            name: "custom".into(),
            request_bytes,
            read_pct: read_pct.min(100),
            random_pct: random_pct.min(100),
            queue_depth: queue_depth.max(1),
            align_bytes: request_bytes,
            region: Region::WHOLE,
            limit: Limit::Time(Duration::from_secs(10)),
            warmup: Duration::from_secs(1),
        }
    }

    /// Sequential writes (`read`: reads) of `request_bytes` at queue depth 1: dd's way.
    pub fn sequential(request_bytes: u64, read: bool, limit: Limit) -> Self {
        Workload {
            name: format!(
                "seq-{}-{}",
                if read { "read" } else { "write" },
                size_name(request_bytes)
            ),
            limit,
            warmup: Duration::ZERO,
            ..Workload::custom(request_bytes, if read { 100 } else { 0 }, 0, 1)
        }
    }

    /// An IOmeter access specification by name (see [`iometer_specs`]).
    pub fn iometer(name: &str, queue_depth: usize) -> Result<Self, String> {
        let specs = iometer_specs();
        let spec = specs.iter().find(|w| w.name == name).ok_or_else(|| {
            let names: Vec<&str> = specs.iter().map(|w| w.name.as_str()).collect();
            format!("no IOmeter spec {name:?} (known: {})", names.join(", "))
        })?;
        Ok(Workload {
            queue_depth: queue_depth.max(1),
            ..spec.clone()
        })
    }

    /// Short description for tables: `4KiB 70%R 100%rand QD16`.
    pub fn describe(&self) -> String {
        format!(
            "{} {}%R {}%rand QD{}",
            size_name(self.request_bytes),
            self.read_pct,
            self.random_pct,
            self.queue_depth
        )
    }

    pub fn check(&self, target_bytes: u64) -> Result<(), String> {
        if self.request_bytes == 0 || !self.request_bytes.is_multiple_of(512) {
            return Err(format!(
                "request size {} is not a positive multiple of 512 bytes",
                self.request_bytes
            ));
        }
        if self.align_bytes == 0 || !self.align_bytes.is_multiple_of(512) {
            return Err(format!(
                "alignment {} is not a positive multiple of 512 bytes",
                self.align_bytes
            ));
        }
        let (lo, hi) = self.region.bytes(target_bytes, self.align_bytes);
        if hi - lo < self.request_bytes {
            return Err(format!(
                "the region {} of the target ({} bytes) is smaller than one request of {}",
                self.region.describe(),
                hi - lo,
                self.request_bytes
            ));
        }
        Ok(())
    }
}

/// The twelve IOmeter access specifications, queue depth 1, 10 s each.
pub fn iometer_specs() -> Vec<Workload> {
    IOMETER_CSV
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("name,") && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let size = parse_size(f[1]).expect("the embedded IOmeter table is well formed");
            Workload {
                name: f[0].to_string(),
                ..Workload::custom(
                    size,
                    f[2].parse().expect("read %"),
                    f[3].parse().expect("random %"),
                    1,
                )
            }
        })
        .collect()
}

pub use raidkit_disk::parse_size;

/// `4KiB`, `1MiB`, `512B`.
pub fn size_name(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{}GiB", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}KiB", b >> 10)
    } else {
        format!("{b}B")
    }
}

/// One request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub offset: u64,
    pub len: u64,
    pub write: bool,
}

/// The request stream of a workload over a region: a seeded generator (the same seed makes
/// the same stream), so two targets measured with one seed see the same offsets.
pub struct Requests {
    lo: u64,
    hi: u64,
    len: u64,
    align: u64,
    read_pct: u32,
    random_pct: u32,
    next_seq: u64,
    rng: u64,
}

impl Requests {
    pub fn new(w: &Workload, target_bytes: u64, seed: u64) -> Requests {
        let (lo, hi) = w.region.bytes(target_bytes, w.align_bytes);
        Requests {
            lo,
            hi,
            len: w.request_bytes,
            align: w.align_bytes,
            read_pct: w.read_pct,
            random_pct: w.random_pct,
            next_seq: lo,
            rng: seed | 1,
        }
    }

    fn rand(&mut self) -> u64 {
        // xorshift64*: fast and good enough to spread offsets; not for anything secret.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn next_request(&mut self) -> Request {
        let write = (self.rand() % 100) as u32 >= self.read_pct;
        let random = (self.rand() % 100) < self.random_pct as u64;
        let offset = if random {
            let slots = (self.hi - self.len - self.lo) / self.align + 1;
            self.lo + (self.rand() % slots) * self.align
        } else {
            if self.next_seq + self.len > self.hi {
                self.next_seq = self.lo;
            }
            self.next_seq
        };
        self.next_seq = offset + self.len;
        Request {
            offset,
            len: self.len,
            write,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_twelve_iometer_specs_are_read() {
        let s = iometer_specs();
        assert_eq!(s.len(), 12);
        let oltp = Workload::iometer("db-oltp", 16).unwrap();
        assert_eq!(
            (
                oltp.request_bytes,
                oltp.read_pct,
                oltp.random_pct,
                oltp.queue_depth
            ),
            (8192, 70, 100, 16)
        );
        assert!(Workload::iometer("nope", 1).is_err());
    }

    #[test]
    fn regions_and_sizes_parse() {
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("x").is_err());
        let r = Region::parse("last:10%").unwrap();
        assert_eq!(r.bytes(1000 << 20, 1 << 20), (900 << 20, 1000 << 20));
        assert_eq!(Region::parse("first:25%").unwrap().describe(), "first 25%");
        assert!(Region::parse("50%..10%").is_err());
        assert!(Region::parse("200%..300%").is_err());
    }

    #[test]
    fn requests_follow_the_mix_and_stay_in_the_region() {
        let mut w = Workload::custom(4096, 70, 100, 1);
        w.region = Region::parse("last:50%").unwrap();
        let size = 64 << 20;
        let mut g = Requests::new(&w, size, 42);
        let (mut reads, n) = (0, 100_000);
        for _ in 0..n {
            let r = g.next_request();
            assert!(r.offset >= size / 2 && r.offset + r.len <= size, "{r:?}");
            assert_eq!(r.offset % 4096, 0);
            reads += !r.write as u32;
        }
        let share = reads as f64 / n as f64;
        assert!((share - 0.7).abs() < 0.01, "read share {share}");
        // Sequential: each request follows the last, wrapping at the region's end.
        let mut g = Requests::new(
            &Workload::sequential(1 << 20, true, Limit::Bytes(0)),
            4 << 20,
            1,
        );
        let offs: Vec<u64> = (0..6).map(|_| g.next_request().offset >> 20).collect();
        assert_eq!(offs, [0, 1, 2, 3, 0, 1]);
    }
}
