//! A drive's timing, sans-IO: requests go in with their arrival time, completion times come
//! out, all in nanoseconds of one clock. Nothing here sleeps or touches data; the real-time
//! driver (`super::EmuDisk`) and the tests feed it.
//!
//! Hard disk: one head assembly serving one command at a time. A command costs its controller
//! overhead (unless it was queued while the previous one ran), a seek (a curve through the
//! datasheet's track-to-track, average and full-stroke times), the rotation until its first
//! sector comes under the head (the platter's angle is a function of time, a sector's angle a
//! function of its position), and the transfer at its zone's rate (outer to inner tracks, the
//! rate falling with the radius). Among queued commands the drive picks the one it reaches
//! soonest (shortest positioning time first, as NCQ/TCQ firmware does), unless one has waited
//! too long. A sequential reader is served from read-ahead: after a read the drive keeps
//! reading into its buffer, so the next read of the following sectors finds them there or
//! arriving. With the write cache on, a write is acknowledged once in the buffer and the
//! buffer is written out in the background (reordered too), ahead of reads only when full or
//! asked to by a flush.
//!
//! Solid-state drive: `channels` channels side by side, a request spread over as many as it
//! has 16 KiB pages, costing its latency plus its transfer at those channels' share of the rate; writes at the burst rate until `burst_gib`
//! was written, then at the sustained rate (the budget comes back while the drive is idle).
//!
//! Both: the drive's own link caps every transfer.

use super::catalog::{link_mbps, DriveSpec, HddSpec, Mechanics, SsdSpec};
use std::collections::VecDeque;

/// Nanoseconds.
pub type Ns = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    /// A write with FUA: it goes to the media (past the write cache) before it completes.
    WriteFua,
    Flush,
}

/// One request as the drive sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub id: u64,
    pub op: Op,
    pub offset: u64,
    pub len: u64,
    pub arrival: Ns,
}

/// Bytes per nanosecond from MB/s.
fn per_ns(mbps: f64) -> f64 {
    mbps * 1e6 / 1e9
}

fn ns(ms: f64) -> f64 {
    ms * 1e6
}

/// The unit an SSD spreads a request over its channels in.
const SSD_PAGE: u64 = 16 << 10;

/// A request that waited this long is served next, whatever is closer.
const STARVATION_NS: Ns = 200_000_000;

/// The hard disk's geometry derived from its spec.
#[derive(Debug, Clone)]
pub struct HddGeometry {
    spec: HddSpec,
    capacity: u64,
    /// One revolution.
    rev_ns: f64,
    /// Inner over outer radius (from the rates: constant linear density).
    k: f64,
    /// Exponent of the seek curve, fitted so that random seeks average the datasheet's.
    seek_power: f64,
}

impl HddGeometry {
    pub fn new(spec: &HddSpec, capacity: u64) -> HddGeometry {
        let mut g = HddGeometry {
            spec: spec.clone(),
            capacity: capacity.max(1),
            rev_ns: 60e9 / spec.rpm,
            k: (spec.inner_mbps / spec.outer_mbps).clamp(0.05, 1.0),
            seek_power: 1.0,
        };
        g.seek_power = g.fit_seek_power();
        g
    }

    /// Fraction of the capacity at byte `off`.
    fn frac(&self, off: u64) -> f64 {
        (off as f64 / self.capacity as f64).clamp(0.0, 1.0)
    }

    /// Radial position of the fraction `f` of the capacity, 0 at the outer edge of the data
    /// area and 1 at its inner edge: with constant linear density, capacity outside radius r
    /// grows with r_out^2 - r^2.
    fn radius(&self, f: f64) -> f64 {
        if self.k >= 1.0 {
            return f;
        }
        let r = (1.0 - f * (1.0 - self.k * self.k)).sqrt();
        (1.0 - r) / (1.0 - self.k)
    }

    /// Media rate (bytes/ns) at byte `off`: its zone's. Zones split the capacity evenly from
    /// outer to inner; with constant linear density the rate is proportional to the radius,
    /// and the first and last zone run at exactly the datasheet's outer and inner rates.
    pub fn rate(&self, off: u64) -> f64 {
        let zones = self.spec.zones.max(1);
        let z = ((self.frac(off) * f64::from(zones)) as u32).min(zones - 1);
        let f = if zones == 1 {
            0.0
        } else {
            f64::from(z) / f64::from(zones - 1)
        };
        per_ns(self.spec.outer_mbps) * (1.0 - f * (1.0 - self.k * self.k)).sqrt()
    }

    /// Bytes on one track at `off`.
    fn track_bytes(&self, off: u64) -> f64 {
        self.rate(off) * self.rev_ns
    }

    /// The seek time between two radial positions.
    fn seek_of(&self, dr: f64, power: f64) -> f64 {
        if dr <= 0.0 {
            return 0.0;
        }
        let s = &self.spec;
        ns(s.track_to_track_ms) + ns(s.full_stroke_ms - s.track_to_track_ms) * dr.powf(power)
    }

    /// The seek time from byte `from` to byte `to` (0 on the same track).
    pub fn seek_ns(&self, from: u64, to: u64, write: bool) -> f64 {
        if from.abs_diff(to) as f64 <= self.track_bytes(from) {
            return 0.0;
        }
        let dr = (self.radius(self.frac(from)) - self.radius(self.frac(to))).abs();
        let extra = if write {
            ns(self.spec.write_seek_extra_ms)
        } else {
            0.0
        };
        self.seek_of(dr, self.seek_power) + extra
    }

    /// Average seek over pairs of uniformly random positions for a curve exponent.
    fn average_seek(&self, power: f64) -> f64 {
        const N: usize = 96;
        let r: Vec<f64> = (0..N)
            .map(|i| self.radius((i as f64 + 0.5) / N as f64))
            .collect();
        let mut sum = 0.0;
        for a in &r {
            for b in &r {
                sum += self.seek_of((a - b).abs(), power);
            }
        }
        sum / (N * N) as f64
    }

    /// The exponent p of `t(d) = t_track + (t_full - t_track) d^p` whose average over random
    /// positions is the datasheet's average seek (bisection: the average falls as p grows).
    fn fit_seek_power(&self) -> f64 {
        let want = ns(self.spec.average_seek_ms);
        let (mut lo, mut hi) = (0.01f64, 8.0f64);
        for _ in 0..50 {
            let mid = (lo + hi) / 2.0;
            if self.average_seek(mid) > want {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (lo + hi) / 2.0
    }

    /// Time until byte `off` comes under the head, from time `t`.
    fn rotation_ns(&self, t: f64, off: u64) -> f64 {
        let platter = (t / self.rev_ns).fract();
        let sector = (off as f64 / self.track_bytes(off)).fract();
        let mut wait = sector - platter;
        if wait < 0.0 {
            wait += 1.0;
        }
        // Within a nanosecond: already there.
        if wait * self.rev_ns > self.rev_ns - 1.0 {
            wait = 0.0;
        }
        wait * self.rev_ns
    }

    pub fn rev_ns(&self) -> f64 {
        self.rev_ns
    }
}

/// The sequential stream the drive is reading ahead of.
#[derive(Debug, Clone, Copy)]
struct Stream {
    /// The buffer holds what the media read from `origin` on (bounded by the buffer's size
    /// behind the host's furthest read).
    origin: u64,
    /// The media had read up to `p0` at time `t0` and keeps reading at `rate`.
    p0: u64,
    t0: f64,
    rate: f64,
    /// The furthest the host has read.
    consumed: u64,
}

impl Stream {
    /// Whether a read at `offset` is served from this stream (in the buffer, or arriving
    /// into it) up to the read-ahead limit.
    fn covers(&self, offset: u64, read_ahead: u64) -> bool {
        offset >= self.origin && offset <= self.consumed + read_ahead
    }
}

#[derive(Debug)]
struct Hdd {
    geo: HddGeometry,
    link: f64,
    /// Byte under the head when the media is idle.
    head: u64,
    /// The media is busy until then.
    busy_until: f64,
    /// The link is busy until then.
    link_free: f64,
    pending: Vec<Request>,
    /// Written to the buffer, not yet to the media: (offset, len, when it came in).
    dirty: VecDeque<(u64, u64, f64)>,
    dirty_bytes: u64,
    /// Writes waiting for room in the buffer.
    waiting: VecDeque<Request>,
    stream: Option<Stream>,
    /// The media's current operation: (request it completes, if any, finish time).
    current: Option<(Option<u64>, f64)>,
}

#[derive(Debug)]
struct Ssd {
    spec: SsdSpec,
    link: f64,
    channels: Vec<f64>,
    link_free: f64,
    /// Bytes that may still be written at the burst rate, as of `budget_at`.
    budget: f64,
    budget_at: f64,
}

/// One emulated drive's timing state.
#[derive(Debug)]
pub struct Drive {
    kind: Kind,
    /// Completions decided but not yet handed out: (time, id).
    done: Vec<(f64, u64)>,
}

#[derive(Debug)]
enum Kind {
    Hdd(Box<Hdd>),
    Ssd(Ssd),
}

impl Drive {
    /// A drive of `spec` with `capacity` bytes laid over its zones and seeks.
    pub fn new(spec: &DriveSpec, capacity: u64) -> Drive {
        let link = per_ns(link_mbps(&spec.interface).unwrap_or(f64::INFINITY));
        let kind = match &spec.mechanics {
            Mechanics::Hdd(h) => Kind::Hdd(Box::new(Hdd {
                geo: HddGeometry::new(h, capacity),
                link,
                head: 0,
                busy_until: 0.0,
                link_free: 0.0,
                pending: Vec::new(),
                dirty: VecDeque::new(),
                dirty_bytes: 0,
                waiting: VecDeque::new(),
                stream: None,
                current: None,
            })),
            Mechanics::Ssd(s) => Kind::Ssd(Ssd {
                spec: s.clone(),
                link,
                channels: vec![0.0; s.channels as usize],
                link_free: 0.0,
                budget: s.burst_gib * (1u64 << 30) as f64,
                budget_at: 0.0,
            }),
        };
        Drive {
            kind,
            done: Vec::new(),
        }
    }

    /// The hard disk's geometry (None for an SSD).
    pub fn hdd_geometry(&self) -> Option<&HddGeometry> {
        match &self.kind {
            Kind::Hdd(h) => Some(&h.geo),
            Kind::Ssd(_) => None,
        }
    }

    /// A hard disk with its write cache on: bytes held for writing (buffered or waiting for
    /// room) and the cache's size. None otherwise.
    pub fn write_cache_fill(&self) -> Option<(u64, u64)> {
        match &self.kind {
            Kind::Hdd(h) if h.geo.spec.write_cache => {
                let waiting: u64 = h.waiting.iter().map(|r| r.len).sum();
                let cache = (h.geo.spec.cache_mib * (1 << 20) as f64) as u64;
                Some((h.dirty_bytes + waiting, cache))
            }
            _ => None,
        }
    }

    /// A request arrives. Its arrival must not be earlier than any time already handed out
    /// by [`Drive::next_event`] and fired.
    pub fn submit(&mut self, r: Request) {
        match &mut self.kind {
            Kind::Ssd(s) => {
                let t = s.serve(&r);
                self.done.push((t, r.id));
            }
            Kind::Hdd(h) => {
                let cache = (h.geo.spec.cache_mib * (1 << 20) as f64) as u64;
                if r.op == Op::Write && h.geo.spec.write_cache && r.len <= cache {
                    if h.waiting.is_empty() && h.dirty_bytes + r.len <= cache {
                        let t = h.accept(&r, r.arrival as f64);
                        self.done.push((t, r.id));
                    } else {
                        h.waiting.push_back(r);
                    }
                } else {
                    h.pending.push(r);
                }
            }
        }
    }

    /// The time of the next thing the drive does (a completion handed out, or the end of a
    /// media operation), deciding the media's next operation when it is idle. None when the
    /// drive has nothing to do.
    pub fn next_event(&mut self) -> Option<Ns> {
        if let Kind::Hdd(h) = &mut self.kind {
            if h.current.is_none() {
                h.current = h.decide();
            }
        }
        let media = match &self.kind {
            Kind::Hdd(h) => h.current.map(|c| c.1),
            Kind::Ssd(_) => None,
        };
        let first_done = self.done.iter().map(|d| d.0).reduce(f64::min);
        let t = match (media, first_done) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(t.ceil() as Ns)
    }

    /// Everything that happens up to `now`: returns the ids completed, in completion order.
    pub fn fire(&mut self, now: Ns) -> Vec<u64> {
        let now_f = now as f64;
        while let Kind::Hdd(h) = &mut self.kind {
            let Some((id, t)) = h.current else { break };
            if t > now_f {
                break;
            }
            h.current = None;
            if let Some(id) = id {
                self.done.push((t, id));
            }
            // Room in the buffer: waiting writes go in, in order.
            let cache = (h.geo.spec.cache_mib * (1 << 20) as f64) as u64;
            while let Some(w) = h.waiting.front().copied() {
                if h.dirty_bytes + w.len > cache {
                    break;
                }
                h.waiting.pop_front();
                let at = t.max(w.arrival as f64);
                let done = h.accept(&w, at);
                self.done.push((done, w.id));
            }
            h.current = h.decide();
        }
        self.done.sort_by(|a, b| a.0.total_cmp(&b.0));
        let n = self.done.iter().take_while(|d| d.0 <= now_f).count();
        self.done.drain(..n).map(|d| d.1).collect()
    }
}

impl Ssd {
    fn serve(&mut self, r: &Request) -> f64 {
        let arrival = r.arrival as f64;
        if r.op == Op::Flush {
            let idle = self.channels.iter().copied().fold(arrival, f64::max);
            return idle + self.spec.flush_us * 1e3;
        }
        let n = self.channels.len() as f64;
        let (latency, rate) = match r.op {
            Op::Read => (self.spec.read_latency_us, per_ns(self.spec.read_mbps) / n),
            _ => {
                // The burst budget comes back at the sustained rate while channels are idle.
                let idle_since = self.channels.iter().copied().fold(0.0, f64::max);
                if arrival > idle_since {
                    let back = (arrival - idle_since.max(self.budget_at))
                        * per_ns(self.spec.sustained_write_mbps);
                    let full = self.spec.burst_gib * (1u64 << 30) as f64;
                    self.budget = (self.budget + back.max(0.0)).min(full);
                }
                self.budget_at = arrival;
                let burst = self.budget >= r.len as f64;
                self.budget = (self.budget - r.len as f64).max(0.0);
                let mbps = if burst {
                    self.spec.write_mbps
                } else {
                    self.spec.sustained_write_mbps
                };
                // A write with FUA is programmed before it completes, as a flush would.
                let fua = if r.op == Op::WriteFua {
                    self.spec.flush_us
                } else {
                    0.0
                };
                (self.spec.write_latency_us + fua, per_ns(mbps) / n)
            }
        };
        // A request is spread over as many channels as it has flash pages, up to all.
        let used = (r.len.div_ceil(SSD_PAGE) as usize).clamp(1, self.channels.len());
        let mut order: Vec<usize> = (0..self.channels.len()).collect();
        order.sort_by(|&a, &b| self.channels[a].total_cmp(&self.channels[b]));
        let chosen = &order[..used];
        let free = chosen.iter().map(|&i| self.channels[i]).fold(0.0, f64::max);
        let start = arrival.max(free);
        let end = start + latency * 1e3 + r.len as f64 / (rate * used as f64);
        for &i in chosen {
            self.channels[i] = end;
        }
        // The link carries the transfer (the read's after it, the write's before it; the
        // difference does not change the rate).
        let link_end =
            (end - r.len as f64 / self.link).max(self.link_free) + r.len as f64 / self.link;
        self.link_free = link_end;
        end.max(link_end)
    }
}

impl Hdd {
    /// A write taken into the buffer at `at`: acknowledged once it crossed the link.
    fn accept(&mut self, r: &Request, at: f64) -> f64 {
        let overhead = self.geo.spec.command_overhead_us * 1e3;
        let start = at.max(self.link_free);
        let done = start + overhead + r.len as f64 / self.link;
        self.link_free = done;
        self.dirty.push_back((r.offset, r.len, start));
        self.dirty_bytes += r.len;
        // The buffer is written, so anything read ahead of it may be stale.
        self.stream = None;
        done
    }

    /// Positioning time (seek and rotation) from the head's position at `t` to `off`.
    fn positioning(&self, t: f64, off: u64, write: bool) -> f64 {
        let seek = self.geo.seek_ns(self.head, off, write);
        seek + self.geo.rotation_ns(t + seek, off)
    }

    /// The media's next operation, decided now: a queued command, else a buffer write-out.
    fn decide(&mut self) -> Option<(Option<u64>, f64)> {
        let first_arrival = self.pending.iter().map(|r| r.arrival).min();
        let flush_waits = self.pending.iter().any(|r| r.op == Op::Flush);
        let must_drain = !self.waiting.is_empty() || flush_waits;
        if !self.dirty.is_empty() && (must_drain || first_arrival.is_none()) {
            return Some((None, self.write_out()));
        }
        let first = first_arrival?;
        let d = self.busy_until.max(first as f64);
        let qd = self.geo.spec.queue_depth as usize;
        // The commands the drive holds at `d`, oldest first, up to its queue depth.
        let mut held: Vec<usize> = (0..self.pending.len())
            .filter(|&i| self.pending[i].arrival as f64 <= d)
            .collect();
        held.sort_by_key(|&i| (self.pending[i].arrival, self.pending[i].id));
        held.truncate(qd);
        let oldest = held[0];
        // A flush runs when everything before it is done (the buffer is empty here).
        let starved = d - self.pending[oldest].arrival as f64 > STARVATION_NS as f64;
        let pick = if self.pending[oldest].op == Op::Flush || starved {
            oldest
        } else if qd == 1 {
            // A drive that takes one command at a time is given them by the host's
            // scheduler, in one sweep across the disk from the head (C-SCAN), not in the
            // order they came. Everything pending is in the host's queue, beyond the
            // drive's depth.
            (0..self.pending.len())
                .filter(|&i| self.pending[i].arrival as f64 <= d && self.pending[i].op != Op::Flush)
                .min_by_key(|&i| {
                    let r = &self.pending[i];
                    (r.offset < self.head, r.offset, r.arrival)
                })
                .unwrap_or(oldest)
        } else {
            held.iter()
                .copied()
                .filter(|&i| self.pending[i].op != Op::Flush)
                .min_by(|&a, &b| {
                    let pa = self.cost_hint(d, &self.pending[a]);
                    let pb = self.cost_hint(d, &self.pending[b]);
                    pa.total_cmp(&pb)
                })
                .unwrap_or(oldest)
        };
        let r = self.pending.swap_remove(pick);
        let finish = self.serve(&r, d);
        Some((Some(r.id), finish))
    }

    /// How soon the drive could start transferring `r` at `d` (for the reordering).
    fn cost_hint(&self, d: f64, r: &Request) -> f64 {
        if let Some(s) = self.stream {
            if r.op == Op::Read && s.covers(r.offset, self.read_ahead()) {
                return 0.0;
            }
        }
        self.positioning(d, r.offset, r.op != Op::Read)
    }

    fn read_ahead(&self) -> u64 {
        (self.geo.spec.read_ahead_kib * 1024.0) as u64
    }

    fn stream_limit(&self, s: &Stream) -> u64 {
        s.consumed + self.read_ahead()
    }

    /// Where the buffer's oldest kept byte is once the host has read up to `consumed`.
    fn kept_from(&self, origin: u64, consumed: u64) -> u64 {
        let cache = (self.geo.spec.cache_mib * (1 << 20) as f64) as u64;
        origin.max(consumed.saturating_sub(cache.saturating_sub(self.read_ahead())))
    }

    /// Serves `r` on the media from decision time `d`: returns its finish.
    fn serve(&mut self, r: &Request, d: f64) -> f64 {
        // Controller time, unless the command was queued while the media was busy.
        let overhead = if (r.arrival as f64) < self.busy_until {
            0.0
        } else {
            self.geo.spec.command_overhead_us * 1e3
        };
        let finish = match r.op {
            Op::Flush => d + overhead + ns(self.geo.spec.flush_ms),
            Op::Read => self.read(r, d, overhead),
            Op::Write | Op::WriteFua => {
                let t = d + overhead;
                let t = t + self.positioning(t, r.offset, true);
                self.stream = None;
                let end = t + r.len as f64 / self.geo.rate(r.offset);
                self.head = r.offset + r.len;
                // The data crossed the link before the media wrote it.
                end.max(d + r.len as f64 / self.link)
            }
        };
        self.busy_until = finish;
        finish
    }

    fn read(&mut self, r: &Request, d: f64, overhead: f64) -> f64 {
        let end_byte = r.offset + r.len;
        let link_time = r.len as f64 / self.link;
        if let Some(s) = self
            .stream
            .filter(|s| s.covers(r.offset, self.read_ahead()))
        {
            // The media has read (or is reading) these bytes ahead of the host; it had
            // stopped once the buffer's read-ahead was full.
            let limit = self.stream_limit(&s);
            let stalled_at = s.t0 + (limit.saturating_sub(s.p0)) as f64 / s.rate;
            let consumed = s.consumed.max(end_byte);
            let origin = self.kept_from(s.origin, consumed);
            let (ready, stream) = if d > stalled_at && end_byte > limit {
                let ready = d + (end_byte - limit) as f64 / s.rate;
                let st = Stream {
                    origin,
                    p0: end_byte,
                    t0: ready,
                    rate: self.geo.rate(end_byte),
                    consumed,
                };
                (ready, st)
            } else {
                // Bytes already read came in the past (the sign matters).
                let ready = s.t0 + (end_byte as f64 - s.p0 as f64) / s.rate;
                // Anchored again where the media is now, at that zone's rate.
                let st = if end_byte > s.p0 {
                    Stream {
                        origin,
                        p0: end_byte,
                        t0: ready,
                        rate: self.geo.rate(end_byte),
                        consumed,
                    }
                } else {
                    Stream {
                        origin,
                        consumed,
                        ..s
                    }
                };
                (ready, st)
            };
            self.stream = Some(stream);
            self.head = end_byte.max(self.head);
            return ready.max(d + overhead + link_time);
        }
        let t = d + overhead;
        let t = t + self.positioning(t, r.offset, false);
        let rate = self.geo.rate(r.offset);
        let end = t + r.len as f64 / rate;
        self.head = end_byte;
        self.stream = (self.geo.spec.read_ahead_kib > 0.0).then_some(Stream {
            origin: r.offset,
            p0: end_byte,
            t0: end,
            rate,
            consumed: end_byte,
        });
        end.max(d + link_time)
    }

    /// Writes one buffered write to the media (the one reached soonest among the oldest
    /// few), from when the media is free; returns its finish.
    fn write_out(&mut self) -> f64 {
        // Not before the oldest buffered write came in (the media may have been idle).
        let came = self.dirty.iter().map(|w| w.2).fold(f64::INFINITY, f64::min);
        let d = self.busy_until.max(came);
        let qd = self.geo.spec.queue_depth as usize;
        let came_by = |i: &usize| self.dirty[*i].2 <= d;
        let pick = if qd == 1 {
            // The host's scheduler handed the writes over in one sweep (see `decide`).
            (0..self.dirty.len())
                .filter(came_by)
                .min_by_key(|&i| (self.dirty[i].0 < self.head, self.dirty[i].0))
                .unwrap_or(0)
        } else {
            (0..self.dirty.len())
                .filter(came_by)
                .take(qd)
                .min_by(|&a, &b| {
                    let pa = self.positioning(d, self.dirty[a].0, true);
                    let pb = self.positioning(d, self.dirty[b].0, true);
                    pa.total_cmp(&pb)
                })
                .unwrap_or(0)
        };
        let (off, len, _) = self.dirty.remove(pick).expect("picked a buffered write");
        self.dirty_bytes -= len;
        let t = d + self.positioning(d, off, true);
        let finish = t + len as f64 / self.geo.rate(off);
        self.head = off + len;
        self.busy_until = finish;
        finish
    }
}

#[cfg(test)]
mod tests {
    use super::super::catalog::Catalog;
    use super::*;

    /// Runs requests one at a time (QD 1) in virtual time: each arrives when the previous
    /// completed. Returns the total time.
    fn qd1(drive: &mut Drive, reqs: impl IntoIterator<Item = (Op, u64, u64)>) -> Ns {
        let mut now = 0;
        for (id, (op, offset, len)) in reqs.into_iter().enumerate() {
            drive.submit(Request {
                id: id as u64,
                op,
                offset,
                len,
                arrival: now,
            });
            loop {
                let t = drive.next_event().expect("something to do");
                let done = drive.fire(t);
                now = t;
                if done.contains(&(id as u64)) {
                    break;
                }
            }
        }
        now
    }

    fn hdd(name: &str) -> (DriveSpec, HddSpec) {
        let c = Catalog::built_in();
        let d = c.drive(name).unwrap().clone();
        let Mechanics::Hdd(h) = d.mechanics.clone() else {
            panic!("{name} is a hard disk")
        };
        (d, h)
    }

    /// A small deterministic generator.
    fn lcg(state: &mut u64) -> u64 {
        *state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        *state >> 11
    }

    /// The emulated drive against its datasheet: sequential reads at the outer and inner
    /// zone run at the datasheet's rates, random 4 KiB reads at QD 1 take
    /// 1 / (average seek + half a rotation + transfer + command overhead).
    #[test]
    fn a_hard_disk_meets_its_datasheet() {
        for name in ["hds72101", "hds7k3000", "cheetah15k5", "fireball"] {
            let (spec, h) = hdd(name);
            let cap = spec.capacity_bytes();
            let mib = 1u64 << 20;
            let span = 256 * mib;
            for (at, want) in [(0, h.outer_mbps), (cap - span, h.inner_mbps)] {
                let mut d = Drive::new(&spec, cap);
                let t = qd1(
                    &mut d,
                    (0..span / mib).map(|i| (Op::Read, at + i * mib, mib)),
                );
                let mbps = span as f64 / t as f64 * 1e3;
                let ratio = mbps / want;
                assert!(
                    (0.93..=1.01).contains(&ratio),
                    "{name}: sequential read at {at}: {mbps:.1} MB/s, datasheet {want}"
                );
            }
            let mut d = Drive::new(&spec, cap);
            let mut s = 42;
            let n = 4000;
            let t = qd1(
                &mut d,
                (0..n).map(|_| (Op::Read, lcg(&mut s) % (cap / 4096) * 4096, 4096)),
            );
            let iops = n as f64 / (t as f64 / 1e9);
            let rev_ms = 60e3 / h.rpm;
            let transfer_ms = 4096.0 / (h.outer_mbps * 1e3);
            let want = 1e3
                / (h.average_seek_ms + rev_ms / 2.0 + transfer_ms + h.command_overhead_us / 1e3);
            let ratio = iops / want;
            assert!(
                (0.94..=1.06).contains(&ratio),
                "{name}: random 4 KiB QD 1: {iops:.1} IOPS, datasheet {want:.1}"
            );
        }
    }

    #[test]
    fn queued_random_reads_are_reordered() {
        let (spec, _) = hdd("hds72101");
        let cap = spec.capacity_bytes();
        let run = |qd: usize| {
            let mut d = Drive::new(&spec, cap);
            let mut s = 7;
            let mut issued = 0u64;
            let total = 2000u64;
            let mut now = 0;
            let mut in_flight = 0;
            let mut finished = 0;
            while finished < total {
                while in_flight < qd && issued < total {
                    d.submit(Request {
                        id: issued,
                        op: Op::Read,
                        offset: lcg(&mut s) % (cap / 4096) * 4096,
                        len: 4096,
                        arrival: now,
                    });
                    issued += 1;
                    in_flight += 1;
                }
                let t = d.next_event().unwrap();
                let done = d.fire(t).len();
                now = t;
                in_flight -= done;
                finished += done as u64;
            }
            total as f64 / (now as f64 / 1e9)
        };
        let (one, sixteen) = (run(1), run(16));
        assert!(
            sixteen > one * 1.5,
            "QD 16 {sixteen:.0} IOPS against QD 1 {one:.0}"
        );
    }

    #[test]
    fn a_write_with_fua_goes_to_the_media_past_the_cache() {
        let (spec, h) = hdd("hds72101");
        let cap = spec.capacity_bytes();
        // 4 KiB at mid-stroke from a head parked at 0: cached, it is done in microseconds;
        // with FUA it waits for a seek and part of a rotation, never a whole buffer's drain.
        let rotation_ns = 60e9 / h.rpm;
        let mut d = Drive::new(&spec, cap);
        let cached = qd1(&mut d, [(Op::Write, cap / 2, 4096)]);
        let mut d = Drive::new(&spec, cap);
        let fua = qd1(&mut d, [(Op::WriteFua, cap / 2, 4096)]);
        assert!(cached < 1_000_000, "a cached write took {cached} ns");
        assert!(
            fua as f64 > 2e6 && (fua as f64) < 25e6 + rotation_ns,
            "a write with FUA took {fua} ns"
        );
        // Behind 16 MiB of cached writes it goes next, after at most the 1 MiB being
        // written out: it does not wait for the buffer to drain.
        let mut d = Drive::new(&spec, cap);
        let before = qd1(&mut d, (0..16u64).map(|i| (Op::Write, i << 20, 1 << 20)));
        let t = qd1(&mut d, [(Op::WriteFua, cap / 2, 4096)]);
        let drain_ns = (16u64 << 20) as f64 / (h.outer_mbps * 1e-3);
        let took = (t - before) as f64;
        assert!(
            took < drain_ns / 2.0,
            "the FUA write waited for the buffer: {took:.0} ns, draining takes {drain_ns:.0}"
        );
    }

    #[test]
    fn the_write_cache_takes_writes_at_link_speed_until_full_and_a_flush_drains_it() {
        let (spec, h) = hdd("hds72101");
        let cap = spec.capacity_bytes();
        let mut d = Drive::new(&spec, cap);
        // Well inside the buffer: acknowledged at about the link's rate.
        let small = (h.cache_mib as u64 / 2) << 20;
        let t = qd1(
            &mut d,
            (0..small >> 20).map(|i| (Op::Write, i << 20, 1 << 20)),
        );
        let mbps = small as f64 / t as f64 * 1e3;
        assert!(mbps > h.outer_mbps * 1.3, "cached writes at {mbps:.0} MB/s");
        // A flush waits for the buffer to reach the media (written out meanwhile in the
        // background, at the media's rate, as far as it got).
        let before = t;
        let t = qd1(&mut d, [(Op::Flush, 0, 0)]);
        let media_ns = small as f64 / (h.outer_mbps * 1e-3);
        assert!(
            (t - before) as f64 >= (media_ns - before as f64) * 0.9 && t as f64 >= media_ns,
            "flush took {} ns",
            t - before
        );
        // Long sequential writes run at the media rate.
        let mut d = Drive::new(&spec, cap);
        let total = 512u64 << 20;
        let t = qd1(
            &mut d,
            (0..total >> 20).map(|i| (Op::Write, i << 20, 1 << 20)),
        );
        let mbps = total as f64 / t as f64 * 1e3;
        assert!(
            (0.9..=1.15).contains(&(mbps / h.outer_mbps)),
            "sequential writes at {mbps:.0} MB/s"
        );
    }

    #[test]
    fn an_ssd_serves_in_parallel_and_slows_after_its_burst() {
        let c = Catalog::built_in();
        let spec = c.drive("sf2281").unwrap();
        let Mechanics::Ssd(s) = &spec.mechanics else {
            panic!()
        };
        let mut d = Drive::new(spec, spec.capacity_bytes());
        let t = qd1(&mut d, (0..1000).map(|i| (Op::Read, i * 4096 * 7, 4096)));
        let per = t as f64 / 1000.0 / 1e3;
        assert!(
            per >= s.read_latency_us && per < s.read_latency_us * 1.5 + 10.0,
            "{per} us"
        );
        let mut d = Drive::new(spec, spec.capacity_bytes());
        let burst = (s.burst_gib * (1u64 << 30) as f64) as u64;
        let total = burst + (1 << 30);
        let t = qd1(
            &mut d,
            (0..total >> 20).map(|i| (Op::Write, (i << 20) % (100 << 30), 1 << 20)),
        );
        let mbps = total as f64 / t as f64 * 1e3;
        assert!(
            mbps < s.write_mbps && mbps > s.sustained_write_mbps,
            "{mbps}"
        );
    }
}
