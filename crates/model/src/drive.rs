//! One drive's service times in closed form, from the same catalog figures and geometry the
//! emulated drives use ([`raidkit_disk::emu::drive::HddGeometry`]): the sequential rate over
//! a region of the surface, and the time a random request takes when `k` requests wait at the
//! drive (shortest positioning first among them, as NCQ firmware reorders).

use raidkit_disk::emu::catalog::{link_mbps, DriveSpec, Mechanics};
use raidkit_disk::emu::drive::HddGeometry;

/// The longest queue the service curves are computed for.
pub const MAX_QUEUE: usize = 64;

/// What a member does for one piece of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    /// A write to the sectors the drive has just read (read-modify-write): the platter must
    /// come round once more.
    Rewrite,
}

/// A drive's service model.
#[derive(Clone, Debug)]
pub struct DriveModel {
    pub spec: DriveSpec,
    /// Bytes of the drive in use (a member may be a partition of it).
    pub capacity: u64,
    /// Its link's rate, bytes/s.
    pub link: f64,
    pub write_cache: bool,
    hdd: Option<Hdd>,
}

#[derive(Clone, Debug)]
struct Hdd {
    geo: HddGeometry,
    overhead: f64,
    rev: f64,
    queue_depth: usize,
    cache_bytes: f64,
}

/// Seconds from nanoseconds.
fn s(ns: f64) -> f64 {
    ns * 1e-9
}

impl DriveModel {
    /// `write_cache`: the drive's setting where it differs from the catalog's.
    pub fn new(spec: &DriveSpec, write_cache: Option<bool>) -> DriveModel {
        let capacity = spec.capacity_bytes();
        let link = link_mbps(&spec.interface).unwrap_or(f64::INFINITY) * 1e6;
        let (hdd, wc) = match &spec.mechanics {
            Mechanics::Hdd(h) => (
                Some(Hdd {
                    geo: HddGeometry::new(h, capacity),
                    overhead: h.command_overhead_us * 1e-6,
                    rev: 60.0 / h.rpm,
                    queue_depth: h.queue_depth.max(1) as usize,
                    cache_bytes: h.cache_mib * f64::from(1u32 << 20),
                }),
                write_cache.unwrap_or(h.write_cache),
            ),
            // An SSD acknowledges from its buffer either way.
            Mechanics::Ssd(_) => (None, true),
        };
        DriveModel {
            spec: spec.clone(),
            capacity,
            link,
            write_cache: wc,
            hdd,
        }
    }

    /// Writes taken by a controller's write-back cache of `cache_bytes` for this drive and
    /// written to it later in the order the controller chooses (as a drive's own cache).
    pub fn behind_write_back(mut self, cache_bytes: f64) -> DriveModel {
        self.write_cache = true;
        if let Some(h) = &mut self.hdd {
            h.cache_bytes = h.cache_bytes.max(cache_bytes);
        }
        self
    }

    pub fn is_hdd(&self) -> bool {
        self.hdd.is_some()
    }

    /// One revolution (s); 0 for an SSD.
    pub fn revolution(&self) -> f64 {
        self.hdd.as_ref().map_or(0.0, |h| h.rev)
    }

    /// Moving between a member's near and far copy areas: a seek of half the stroke and
    /// half a rotation (s).
    pub fn half_stroke_positioning(&self) -> f64 {
        match &self.hdd {
            Some(h) => s(h.geo.seek_ns(self.off(0.0), self.off(0.5), true)) + h.rev / 2.0,
            None => 0.0,
        }
    }

    /// Writes of `piece` bytes the drive holds and orders before writing them out: its
    /// queue depth, as far as its cache holds them (1 without a write cache).
    pub fn write_batch(&self, piece: f64) -> f64 {
        match &self.hdd {
            Some(h) if self.write_cache => (h.cache_bytes / piece.max(1.0))
                .floor()
                .clamp(1.0, h.queue_depth as f64),
            Some(_) => 1.0,
            None => 1.0,
        }
    }

    fn off(&self, frac: f64) -> u64 {
        (self.capacity as f64 * frac.clamp(0.0, 1.0)) as u64
    }

    /// Media rate at the fraction `f` of the surface, bytes/s (its link's at most).
    pub fn rate_at(&self, f: f64, write: bool) -> f64 {
        let media = match (&self.hdd, &self.spec.mechanics) {
            (Some(h), _) => h.geo.rate(self.off(f)) * 1e9,
            (None, Mechanics::Ssd(s)) => {
                if write {
                    s.write_mbps * 1e6
                } else {
                    s.read_mbps * 1e6
                }
            }
            _ => unreachable!("a drive is a hard disk or an SSD"),
        };
        media.min(self.link)
    }

    /// The sequential rate over the fractions `lo..hi` of the surface (bytes/s): the bytes
    /// over the time to pass them, zone by zone.
    pub fn seq_rate(&self, lo: f64, hi: f64, write: bool) -> f64 {
        let (lo, hi) = (lo.clamp(0.0, 1.0), hi.clamp(0.0, 1.0).max(lo));
        if hi - lo < 1e-9 {
            return self.rate_at(lo, write);
        }
        const STEPS: usize = 64;
        let mut time = 0.0;
        for i in 0..STEPS {
            let f = lo + (hi - lo) * (i as f64 + 0.5) / STEPS as f64;
            time += 1.0 / self.rate_at(f, write);
        }
        let mut rate = STEPS as f64 / time;
        // An SSD writing more than its burst settles at its sustained rate.
        if let (Mechanics::Ssd(sp), true) = (&self.spec.mechanics, write) {
            let bytes = (hi - lo) * self.capacity as f64;
            let burst = sp.burst_gib * f64::from(1u32 << 30);
            if bytes > burst {
                let sustained = sp.sustained_write_mbps * 1e6;
                let t = burst / rate + (bytes - burst) / sustained;
                rate = bytes / t;
            }
        }
        rate
    }

    /// Positioning (seek and rotation) of a random request in `lo..hi` when the drive chooses
    /// among `k` waiting ones, for k = 1..=MAX_QUEUE (index k-1), seconds. A drive that takes
    /// one command at a time is handed them in a sweep by the host (shorter seeks, a half
    /// rotation each).
    fn positioning(&self, lo: f64, hi: f64, write: bool) -> Vec<f64> {
        let Some(h) = &self.hdd else {
            return vec![0.0; MAX_QUEUE];
        };
        const HEADS: usize = 24;
        const TARGETS: usize = 48;
        const STEPS: usize = 240;
        let at = |i: usize, n: usize| self.off(lo + (hi - lo) * (i as f64 + 0.5) / n as f64);
        let rev = h.rev;
        let mut sums = vec![0.0; MAX_QUEUE];
        for hi_ in 0..HEADS {
            let head = at(hi_, HEADS);
            let seeks: Vec<f64> = (0..TARGETS)
                .map(|t| s(h.geo.seek_ns(head, at(t, TARGETS), write)))
                .collect();
            if h.queue_depth == 1 {
                // The sweep: with k waiting, the next is about 1/(k+1) of the region away.
                for (k, sum) in sums.iter_mut().enumerate() {
                    let mean_seek = if k == 0 {
                        seeks.iter().sum::<f64>() / TARGETS as f64
                    } else {
                        let span = (hi - lo) / (k as f64 + 2.0);
                        s(h.geo.seek_ns(self.off(lo), self.off(lo + span), write))
                    };
                    *sum += mean_seek + rev / 2.0;
                }
                continue;
            }
            // P(positioning > t) for one random target; the soonest of k has P^k.
            let top = seeks.iter().copied().fold(0.0, f64::max) + rev;
            let dt = top / STEPS as f64;
            for step in 0..STEPS {
                let t = (step as f64 + 0.5) * dt;
                let p: f64 = seeks
                    .iter()
                    .map(|&sk| (1.0 - (t - sk) / rev).clamp(0.0, 1.0))
                    .sum::<f64>()
                    / TARGETS as f64;
                let mut pk = 1.0;
                for sum in sums.iter_mut() {
                    pk *= p;
                    *sum += pk * dt;
                }
            }
        }
        let mut out: Vec<f64> = sums.iter().map(|v| v / HEADS as f64).collect();
        if h.queue_depth > 1 {
            let cap = h.queue_depth.min(MAX_QUEUE);
            for k in cap..MAX_QUEUE {
                out[k] = out[cap - 1];
            }
        }
        out
    }
}

/// Service times of random requests of one size over one region: `time(kind, k)` is the
/// time one request of `kind` takes at the drive when `k` requests wait there.
#[derive(Clone, Debug)]
pub struct Service {
    read: Vec<f64>,
    write: Vec<f64>,
    transfer: f64,
    overhead: f64,
    rev: f64,
    link_time: f64,
    /// Writes the drive's cache holds and reorders while it writes them out.
    cached_writes: Option<usize>,
    /// SSD: requests served side by side.
    parallel: usize,
}

impl Service {
    pub fn new(d: &DriveModel, len: u64, lo: f64, hi: f64, random: bool) -> Service {
        let rate = d.seq_rate(lo, hi, false);
        let wrate = d.seq_rate(lo, hi, true);
        let mut read = if random {
            d.positioning(lo, hi, false)
        } else {
            vec![0.0; MAX_QUEUE]
        };
        let mut write = if random {
            d.positioning(lo, hi, true)
        } else {
            vec![0.0; MAX_QUEUE]
        };
        let (overhead, parallel) = match (&d.hdd, &d.spec.mechanics) {
            (Some(h), _) => (h.overhead, 1),
            (None, Mechanics::Ssd(sp)) => {
                // Latency in place of positioning; a request of `len` spreads over its pages.
                let pages = len.div_ceil(16 << 10).max(1) as usize;
                let ch = sp.channels.max(1) as usize;
                read.iter_mut().for_each(|v| *v = sp.read_latency_us * 1e-6);
                write
                    .iter_mut()
                    .for_each(|v| *v = sp.write_latency_us * 1e-6);
                (0.0, (ch / pages.min(ch)).max(1))
            }
            _ => unreachable!("a drive is a hard disk or an SSD"),
        };
        let cached_writes = match &d.hdd {
            Some(h) if d.write_cache => {
                Some(((h.cache_bytes / len.max(1) as f64) as usize).clamp(1, h.queue_depth))
            }
            _ => None,
        };
        let transfer_r = len as f64 / rate;
        let transfer_w = len as f64 / wrate;
        read.iter_mut().for_each(|v| *v += transfer_r);
        write.iter_mut().for_each(|v| *v += transfer_w);
        Service {
            read,
            write,
            transfer: transfer_w,
            overhead,
            rev: d.revolution(),
            link_time: len as f64 / d.link,
            cached_writes,
            parallel: if d.is_hdd() { 1 } else { parallel },
        }
    }

    fn at(v: &[f64], k: f64) -> f64 {
        let k = k.clamp(1.0, MAX_QUEUE as f64);
        let i = (k.floor() as usize).clamp(1, MAX_QUEUE);
        let j = (i + 1).min(MAX_QUEUE);
        let w = k - i as f64;
        v[i - 1] * (1.0 - w) + v[j - 1] * w
    }

    /// The drive's busy time for one request of `kind` with `k` waiting (its demand).
    pub fn busy(&self, kind: OpKind, k: f64) -> f64 {
        // Controller time is hidden behind the previous command once commands queue.
        let overhead = self.overhead * (2.0 - k.clamp(1.0, 2.0));
        let t = match (kind, self.cached_writes) {
            (OpKind::Read, _) => Self::at(&self.read, k),
            // The cache writes them out among the oldest it holds.
            (_, Some(c)) => Self::at(&self.write, c as f64),
            (OpKind::Write, None) => Self::at(&self.write, k),
            // Back to the same sectors: one revolution (the head has just passed them).
            (OpKind::Rewrite, None) => self.rev + self.transfer,
        };
        (t + overhead) / self.parallel as f64
    }

    /// What the requester waits for one request of `kind` at an idle drive beyond the
    /// drive's busy time: a cached write is done once it crossed the link.
    pub fn acknowledged(&self, kind: OpKind) -> Option<f64> {
        match (kind, self.cached_writes) {
            (OpKind::Read, _) | (_, None) => None,
            _ => Some(self.overhead + self.link_time),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidkit_disk::emu::catalog::Catalog;

    /// The closed form meets the datasheet the emulated drive is checked against: random
    /// 4 KiB reads at QD 1 in 1 / (average seek + half a rotation + transfer + overhead),
    /// sequential at the outer and inner rates.
    #[test]
    fn a_drive_in_closed_form_meets_its_datasheet() {
        let c = Catalog::built_in();
        for name in ["hds72101", "hds7k3000", "cheetah15k5"] {
            let spec = c.drive(name).unwrap();
            let Mechanics::Hdd(h) = &spec.mechanics else {
                panic!()
            };
            let d = DriveModel::new(spec, None);
            let outer = d.seq_rate(0.0, 0.01, false) / 1e6;
            let inner = d.seq_rate(0.99, 1.0, false) / 1e6;
            assert!((outer / h.outer_mbps - 1.0).abs() < 0.02, "{name} {outer}");
            assert!((inner / h.inner_mbps - 1.0).abs() < 0.03, "{name} {inner}");
            let sv = Service::new(&d, 4096, 0.0, 1.0, true);
            let t = sv.busy(OpKind::Read, 1.0);
            let want = (h.average_seek_ms + 30e3 / h.rpm) * 1e-3
                + 4096.0 / (h.outer_mbps * 1e6)
                + h.command_overhead_us * 1e-6;
            assert!((t / want - 1.0).abs() < 0.06, "{name}: {t} against {want}");
            // Reordering among 16 shortens positioning, and more so than among 4.
            let (t4, t16) = (sv.busy(OpKind::Read, 4.0), sv.busy(OpKind::Read, 16.0));
            assert!(t16 < t4 && t4 < t * 0.8, "{t} {t4} {t16}");
        }
    }
}
