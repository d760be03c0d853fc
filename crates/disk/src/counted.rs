//! Per-device I/O counters, as the kernel keeps them for `/proc/diskstats` and `iostat -x`
//! reads them: requests and bytes per direction, time spent in requests, and the time the device
//! had at least one request in progress.
//!
//! [`Counted`] wraps a disk and counts every call that reaches it; [`IoCounters`] is shared
//! (`Arc`) so the owner of the disk and a reader of the figures need not be the same.
//! [`IoSnapshot`] is one reading; [`IoRates::between`] turns two readings into `iostat -x`'s
//! columns. Counting costs two clock readings and a short uncontended lock per request.
//!
//! Queue depth here is what the device itself holds: requests inside its `read_at`/`write_at`
//! calls at once (iostat's `aqu-sz` counts the same way, from the time each request spent in
//! flight).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use crate::{Disk, DiskError, DiskWrapper};

/// Nanoseconds since the first call in this process (a monotonic clock).
pub fn mono_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[derive(Default)]
struct Busy {
    in_flight: u32,
    /// When `busy_ns` was last brought up to date.
    stamp_ns: u64,
    busy_ns: u64,
}

/// Counters of one device. Readers take [`IoCounters::snapshot`].
#[derive(Default)]
pub struct IoCounters {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    read_ns: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    write_ns: AtomicU64,
    flushes: AtomicU64,
    flush_ns: AtomicU64,
    errors: AtomicU64,
    busy: Mutex<Busy>,
}

/// Which counters a finished request adds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoDir {
    Read,
    Write,
    Flush,
}

impl std::fmt::Debug for IoCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

impl IoCounters {
    fn busy(&self) -> std::sync::MutexGuard<'_, Busy> {
        match self.busy.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// A request starts now; returns its start time for [`IoCounters::end`].
    pub fn start(&self) -> u64 {
        let now = mono_ns();
        let mut b = self.busy();
        if b.in_flight > 0 {
            b.busy_ns += now.saturating_sub(b.stamp_ns);
        }
        b.stamp_ns = now;
        b.in_flight += 1;
        now
    }

    /// The request started at `start_ns` ended, having moved `bytes` (0 for a flush).
    pub fn end(&self, start_ns: u64, dir: IoDir, bytes: u64, ok: bool) {
        let now = mono_ns();
        {
            let mut b = self.busy();
            b.busy_ns += now.saturating_sub(b.stamp_ns);
            b.stamp_ns = now;
            b.in_flight = b.in_flight.saturating_sub(1);
        }
        let took = now.saturating_sub(start_ns);
        let (n, by, t) = match dir {
            IoDir::Read => (&self.reads, Some(&self.read_bytes), &self.read_ns),
            IoDir::Write => (&self.writes, Some(&self.write_bytes), &self.write_ns),
            IoDir::Flush => (&self.flushes, None, &self.flush_ns),
        };
        if !ok {
            self.errors.fetch_add(1, Relaxed);
            return;
        }
        n.fetch_add(1, Relaxed);
        if let Some(by) = by {
            by.fetch_add(bytes, Relaxed);
        }
        t.fetch_add(took, Relaxed);
    }

    /// Requests started and not yet ended.
    pub fn in_flight(&self) -> u32 {
        self.busy().in_flight
    }

    /// The counters now.
    pub fn snapshot(&self) -> IoSnapshot {
        let (busy_ns, in_flight) = {
            let mut b = self.busy();
            let now = mono_ns();
            if b.in_flight > 0 {
                b.busy_ns += now.saturating_sub(b.stamp_ns);
            }
            b.stamp_ns = now;
            (b.busy_ns, b.in_flight)
        };
        IoSnapshot {
            at_ns: mono_ns(),
            reads: self.reads.load(Relaxed),
            read_bytes: self.read_bytes.load(Relaxed),
            read_ns: self.read_ns.load(Relaxed),
            writes: self.writes.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            write_ns: self.write_ns.load(Relaxed),
            flushes: self.flushes.load(Relaxed),
            flush_ns: self.flush_ns.load(Relaxed),
            errors: self.errors.load(Relaxed),
            busy_ns,
            in_flight,
        }
    }
}

/// One reading of a device's counters (totals since it was opened).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IoSnapshot {
    /// When it was read ([`mono_ns`]).
    pub at_ns: u64,
    pub reads: u64,
    pub read_bytes: u64,
    /// Sum of the reads' times in flight.
    pub read_ns: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub write_ns: u64,
    pub flushes: u64,
    pub flush_ns: u64,
    /// Requests that failed (not in the other counts).
    pub errors: u64,
    /// Time with at least one request in flight.
    pub busy_ns: u64,
    /// Requests in flight when read.
    pub in_flight: u32,
}

impl IoSnapshot {
    /// Field-wise sum (for a whole array's member traffic).
    pub fn add(&self, o: &IoSnapshot) -> IoSnapshot {
        IoSnapshot {
            at_ns: self.at_ns.max(o.at_ns),
            reads: self.reads + o.reads,
            read_bytes: self.read_bytes + o.read_bytes,
            read_ns: self.read_ns + o.read_ns,
            writes: self.writes + o.writes,
            write_bytes: self.write_bytes + o.write_bytes,
            write_ns: self.write_ns + o.write_ns,
            flushes: self.flushes + o.flushes,
            flush_ns: self.flush_ns + o.flush_ns,
            errors: self.errors + o.errors,
            busy_ns: self.busy_ns + o.busy_ns,
            in_flight: self.in_flight + o.in_flight,
        }
    }
}

/// `iostat -x`'s columns for one device over an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IoRates {
    pub seconds: f64,
    /// Reads and writes per second (`r/s`, `w/s`).
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    /// MB/s (10^6 bytes) read and written (`rMB/s`, `wMB/s`).
    pub read_mb_s: f64,
    pub write_mb_s: f64,
    /// Average request size in KiB (`rareq-sz`, `wareq-sz`); 0 with no requests.
    pub read_req_kib: f64,
    pub write_req_kib: f64,
    /// Average time per request in ms (`r_await`, `w_await`).
    pub read_await_ms: f64,
    pub write_await_ms: f64,
    /// Average requests in flight (`aqu-sz`): time in flight over the interval.
    pub queue: f64,
    /// Share of the interval with a request in flight, in percent (`%util`).
    pub util_pct: f64,
}

impl IoRates {
    /// Rates between an earlier and a later reading of the same device.
    pub fn between(a: &IoSnapshot, b: &IoSnapshot) -> IoRates {
        let dt_ns = b.at_ns.saturating_sub(a.at_ns).max(1) as f64;
        let s = dt_ns / 1e9;
        let reads = b.reads.saturating_sub(a.reads) as f64;
        let writes = b.writes.saturating_sub(a.writes) as f64;
        let rb = b.read_bytes.saturating_sub(a.read_bytes) as f64;
        let wb = b.write_bytes.saturating_sub(a.write_bytes) as f64;
        let rns = b.read_ns.saturating_sub(a.read_ns) as f64;
        let wns = b.write_ns.saturating_sub(a.write_ns) as f64;
        let fns = b.flush_ns.saturating_sub(a.flush_ns) as f64;
        let per = |total: f64, n: f64| if n > 0.0 { total / n } else { 0.0 };
        IoRates {
            seconds: s,
            reads_per_s: reads / s,
            writes_per_s: writes / s,
            read_mb_s: rb / s / 1e6,
            write_mb_s: wb / s / 1e6,
            read_req_kib: per(rb, reads) / 1024.0,
            write_req_kib: per(wb, writes) / 1024.0,
            read_await_ms: per(rns, reads) / 1e6,
            write_await_ms: per(wns, writes) / 1e6,
            queue: (rns + wns + fns) / dt_ns,
            util_pct: (b.busy_ns.saturating_sub(a.busy_ns) as f64 / dt_ns * 100.0).min(100.0),
        }
    }
}

/// A disk whose every read, write and flush is counted in an [`IoCounters`].
#[derive(Debug)]
pub struct Counted<D: Disk + ?Sized> {
    counters: Arc<IoCounters>,
    inner: Arc<D>,
}

impl<D: Disk + ?Sized> Counted<D> {
    pub fn new(inner: Arc<D>) -> Counted<D> {
        Counted {
            counters: Arc::new(IoCounters::default()),
            inner,
        }
    }

    /// The counters (shared: they stay readable after the disk is gone).
    pub fn counters(&self) -> &Arc<IoCounters> {
        &self.counters
    }
}

impl<D: Disk + ?Sized> DiskWrapper for Counted<D> {
    type Inner = D;
    fn inner(&self) -> &D {
        &self.inner
    }
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        let t = self.counters.start();
        let r = Disk::read_at(&*self.inner, buf, offset_bytes);
        self.counters
            .end(t, IoDir::Read, buf.len() as u64, r.is_ok());
        r
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        let t = self.counters.start();
        let r = Disk::write_at(&*self.inner, buf, offset_bytes);
        self.counters
            .end(t, IoDir::Write, buf.len() as u64, r.is_ok());
        r
    }
    fn flush(&self) -> Result<(), DiskError> {
        let t = self.counters.start();
        let r = Disk::flush(&*self.inner);
        self.counters.end(t, IoDir::Flush, 0, r.is_ok());
        r
    }
    fn write_fua(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        let t = self.counters.start();
        let r = Disk::write_fua(&*self.inner, buf, offset_bytes);
        self.counters
            .end(t, IoDir::Write, buf.len() as u64, r.is_ok());
        r
    }
    /// One request of all the pieces' bytes, as `iostat` counts a request of several
    /// segments.
    fn read_vectored_at(
        &self,
        bufs: &mut [std::io::IoSliceMut<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        let len = crate::pieces_len(bufs);
        let t = self.counters.start();
        let r = Disk::read_vectored_at(&*self.inner, bufs, offset_bytes);
        self.counters.end(t, IoDir::Read, len, r.is_ok());
        r
    }
    fn write_vectored_at(
        &self,
        bufs: &mut [std::io::IoSlice<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        let len = crate::pieces_len(bufs);
        let t = self.counters.start();
        let r = Disk::write_vectored_at(&*self.inner, bufs, offset_bytes);
        self.counters.end(t, IoDir::Write, len, r.is_ok());
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDisk;

    #[test]
    fn counts_requests_and_bytes_per_direction() {
        let counted = Counted::new(Arc::new(MemDisk::new("m", 1 << 20)));
        let d: &dyn Disk = &counted;
        let mut buf = vec![0u8; 4096];
        d.write_at(&buf, 0).unwrap();
        d.write_at(&buf[..512], 8192).unwrap();
        d.read_at(&mut buf, 0).unwrap();
        d.flush().unwrap();
        assert!(d.read_at(&mut buf, 1 << 20).is_err());
        let s = counted.counters().snapshot();
        assert_eq!((s.reads, s.read_bytes), (1, 4096));
        assert_eq!((s.writes, s.write_bytes), (2, 4608));
        assert_eq!((s.flushes, s.errors, s.in_flight), (1, 1, 0));
        assert!(s.busy_ns >= s.read_ns, "busy {s:?}");
    }

    #[test]
    fn rates_follow_iostat_definitions() {
        let a = IoSnapshot {
            at_ns: 1_000_000_000,
            ..IoSnapshot::default()
        };
        // Two seconds later: 100 reads of 64 KiB, 50 writes of 4 KiB, 300 ms of reads in
        // flight, 100 ms of writes, busy half the time.
        let b = IoSnapshot {
            at_ns: 3_000_000_000,
            reads: 100,
            read_bytes: 100 * 65536,
            read_ns: 300_000_000,
            writes: 50,
            write_bytes: 50 * 4096,
            write_ns: 100_000_000,
            busy_ns: 1_000_000_000,
            ..IoSnapshot::default()
        };
        let r = IoRates::between(&a, &b);
        assert_eq!(r.reads_per_s, 50.0);
        assert_eq!(r.writes_per_s, 25.0);
        assert!((r.read_mb_s - 3.2768).abs() < 1e-9);
        assert_eq!(r.read_req_kib, 64.0);
        assert_eq!(r.write_req_kib, 4.0);
        assert_eq!(r.read_await_ms, 3.0);
        assert_eq!(r.write_await_ms, 2.0);
        assert!((r.queue - 0.2).abs() < 1e-12);
        assert_eq!(r.util_pct, 50.0);
    }

    #[test]
    fn overlapping_requests_count_busy_time_once() {
        let c = IoCounters::default();
        let t1 = c.start();
        let t2 = c.start();
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.end(t1, IoDir::Read, 512, true);
        c.end(t2, IoDir::Read, 512, true);
        let s = c.snapshot();
        // Two requests of at least 20 ms each in flight together: queue time is their sum,
        // busy time the span they overlapped in.
        assert!(s.read_ns >= 40_000_000, "{s:?}");
        assert!(s.busy_ns >= 20_000_000 && s.busy_ns < s.read_ns, "{s:?}");
    }
}
