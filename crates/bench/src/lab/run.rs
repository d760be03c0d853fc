//! One run of a workload against a target: keeps `queue_depth` requests outstanding, times
//! each from submission to completion into a histogram, counts bytes and CPU time, and samples
//! every member's counters over the run (per-member load as `iostat -x` shows it).

use super::target::{MemberSource, Target};
use super::workload::{Limit, Requests, Workload};
use super::LabError;
use hdrhistogram::Histogram;
use raidkit_disk::IoRates;
use raidkit_engine::MemberIoReading;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Latency of the measured requests, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        let us = |ns: u64| ns as f64 / 1000.0;
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            mean: h.mean() / 1000.0,
            p50: us(h.value_at_quantile(0.50)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

/// One member's load over an interval, in `iostat -x`'s terms.
#[derive(Clone, Debug, Serialize)]
pub struct MemberLoad {
    pub name: String,
    /// Slot in the array (`None`: a spare, or not an array member).
    pub slot: Option<usize>,
    pub read_mb_s: f64,
    pub write_mb_s: f64,
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    /// Average request size in KiB (reads and writes together).
    pub avg_req_kib: f64,
    /// Average requests in flight (`aqu-sz`).
    pub queue: f64,
    pub util_pct: f64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl MemberLoad {
    pub fn between(a: &MemberIoReading, b: &MemberIoReading) -> MemberLoad {
        let (sa, sb) = (a.io, b.io);
        let r = IoRates::between(&sa, &sb);
        let n = r.reads_per_s + r.writes_per_s;
        MemberLoad {
            name: b.name.clone(),
            slot: b.slot,
            read_mb_s: r.read_mb_s,
            write_mb_s: r.write_mb_s,
            reads_per_s: r.reads_per_s,
            writes_per_s: r.writes_per_s,
            avg_req_kib: if n > 0.0 {
                (r.read_req_kib * r.reads_per_s + r.write_req_kib * r.writes_per_s) / n
            } else {
                0.0
            },
            queue: r.queue,
            util_pct: r.util_pct,
            read_bytes: sb.read_bytes.saturating_sub(sa.read_bytes),
            write_bytes: sb.write_bytes.saturating_sub(sa.write_bytes),
        }
    }

    /// Loads between two readings of all members, matched by member index.
    pub fn all_between(a: &[MemberIoReading], b: &[MemberIoReading]) -> Vec<MemberLoad> {
        b.iter()
            .filter_map(|m| {
                let before = a.iter().find(|x| x.index == m.index && x.name == m.name)?;
                Some(MemberLoad::between(before, m))
            })
            .collect()
    }
}

/// Per-member load in one sampling interval.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds from the start of the measured part to the end of this interval.
    pub t: f64,
    pub members: Vec<MemberLoad>,
}

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub workload: Workload,
    pub target: String,
    /// Length of the measured part (warm-up excluded), including the final flush if asked.
    pub seconds: f64,
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// MB/s (10^6 bytes) read and written together.
    pub mb_s: f64,
    pub iops: f64,
    pub latency_us: Latency,
    /// CPU time of this whole process (user + system; with an array in process, its threads
    /// too) per GB (10^9 bytes) moved.
    pub cpu_s_per_gb: f64,
    /// Each member's load over the measured part.
    pub members: Vec<MemberLoad>,
    pub samples: Vec<Sample>,
}

/// How a run is carried out, beyond the workload.
#[derive(Clone)]
pub struct RunOptions {
    /// Seed of the request stream (the same seed gives the same offsets).
    pub seed: u64,
    /// Per-member load is sampled this often.
    pub sample_every: Duration,
    /// Flush at the end, inside the timed part (dd's `conv=fdatasync`).
    pub flush_at_end: bool,
    /// Called now and then with the share of the run done (0.0..=1.0).
    pub progress: Option<Arc<dyn Fn(f64) + Send + Sync>>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            seed: 1,
            sample_every: Duration::from_secs(1),
            flush_at_end: false,
            progress: None,
        }
    }
}

fn cpu_seconds() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Every member's counters, read at one time.
type Reading = (Instant, Vec<MemberIoReading>);

/// Samples member counters every `every` on a thread until stopped.
struct Sampler {
    every: Duration,
    stop: Arc<AtomicBool>,
    readings: Arc<Mutex<Vec<Reading>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(source: Option<MemberSource>, every: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let readings = Arc::new(Mutex::new(Vec::new()));
        let handle = source.map(|src| {
            let (stop, readings) = (stop.clone(), readings.clone());
            readings.lock().unwrap().push((Instant::now(), src()));
            std::thread::spawn(move || {
                let mut next = Instant::now() + every;
                loop {
                    // Short sleeps so that stopping is prompt.
                    while Instant::now() < next {
                        if stop.load(Ordering::Relaxed) {
                            readings.lock().unwrap().push((Instant::now(), src()));
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(5).min(every));
                    }
                    readings.lock().unwrap().push((Instant::now(), src()));
                    next += every;
                }
            })
        });
        Sampler {
            every,
            stop,
            readings,
            handle,
        }
    }

    fn finish(mut self, t0: Instant) -> (Vec<MemberLoad>, Vec<Sample>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let r = std::mem::take(&mut *self.readings.lock().unwrap());
        let (Some(first), Some(last)) = (r.first(), r.last()) else {
            return (Vec::new(), Vec::new());
        };
        let whole = MemberLoad::all_between(&first.1, &last.1);
        // The last interval ends when the run does; a sliver of one says nothing.
        let samples = r
            .windows(2)
            .filter(|w| w[1].0.duration_since(w[0].0) >= self.every / 4)
            .map(|w| Sample {
                t: w[1].0.saturating_duration_since(t0).as_secs_f64(),
                members: MemberLoad::all_between(&w[0].1, &w[1].1),
            })
            .collect();
        (whole, samples)
    }
}

/// Runs `w` against `target`.
pub fn run(
    target: &mut dyn Target,
    w: &Workload,
    opts: &RunOptions,
) -> Result<RunResult, LabError> {
    let size = target.size_bytes();
    w.check(size).map_err(LabError::Usage)?;
    let qd = w.queue_depth.max(1);
    target.prepare(qd, w.request_bytes as usize)?;
    let mut gen = Requests::new(w, size, opts.seed);
    let mut started = vec![Instant::now(); qd];
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
        .map_err(|e| LabError::Target(format!("histogram: {e}")))?;
    let mut outstanding = 0usize;
    let mut free: Vec<usize> = (0..qd).rev().collect();

    // Warm-up: the same pipeline, not counted.
    let warm_end = Instant::now() + w.warmup;
    while Instant::now() < warm_end {
        while let Some(slot) = free.pop() {
            target.submit(slot, gen.next_request())?;
            outstanding += 1;
        }
        free.push(target.wait()?);
        outstanding -= 1;
    }
    while outstanding > 0 {
        free.push(target.wait()?);
        outstanding -= 1;
    }

    let sampler = Sampler::start(target.members(), opts.sample_every);
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let (mut reads, mut writes, mut rb, mut wb, mut submitted) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut kinds = vec![false; qd];
    let mut last_progress = t0;
    let done_submitting = |submitted: u64, now: Instant| match w.limit {
        Limit::Bytes(n) => submitted >= n,
        Limit::Time(d) => now.duration_since(t0) >= d,
    };
    loop {
        let now = Instant::now();
        if !done_submitting(submitted, now) {
            while let Some(slot) = free.pop() {
                let r = gen.next_request();
                started[slot] = Instant::now();
                kinds[slot] = r.write;
                target.submit(slot, r)?;
                submitted += r.len;
                outstanding += 1;
                if done_submitting(submitted, now) {
                    break;
                }
            }
        }
        if outstanding == 0 {
            break;
        }
        // One completion, then every other one already there (reaped together and refilled
        // together, as fio does, so a deep queue is not one system call per request).
        let mut next = Some(target.wait()?);
        while let Some(slot) = next {
            let took = started[slot].elapsed();
            hist.saturating_record(took.as_nanos().max(1) as u64);
            outstanding -= 1;
            if kinds[slot] {
                writes += 1;
                wb += w.request_bytes;
            } else {
                reads += 1;
                rb += w.request_bytes;
            }
            free.push(slot);
            next = if outstanding > 0 {
                target.poll()?
            } else {
                None
            };
        }
        if let Some(p) = &opts.progress {
            let now = Instant::now();
            if now.duration_since(last_progress) >= Duration::from_millis(100) {
                last_progress = now;
                p(match w.limit {
                    Limit::Bytes(n) => (rb + wb) as f64 / n.max(1) as f64,
                    Limit::Time(d) => now.duration_since(t0).as_secs_f64() / d.as_secs_f64(),
                }
                .min(1.0));
            }
        }
    }
    if opts.flush_at_end {
        target.flush()?;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let (members, samples) = sampler.finish(t0);
    if let Some(p) = &opts.progress {
        p(1.0);
    }
    let bytes = (rb + wb) as f64;
    Ok(RunResult {
        workload: w.clone(),
        target: target.describe(),
        seconds,
        reads,
        writes,
        read_bytes: rb,
        write_bytes: wb,
        mb_s: bytes / seconds / 1e6,
        iops: (reads + writes) as f64 / seconds,
        latency_us: Latency::of(&hist),
        cpu_s_per_gb: if bytes > 0.0 {
            cpu / (bytes / 1e9)
        } else {
            0.0
        },
        members,
        samples,
    })
}

/// Min, median and max of a figure over repeated runs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Spread {
                min: 0.0,
                median: 0.0,
                max: 0.0,
            };
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Spread {
            min: v[0],
            median,
            max: v[n - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::workload::Request;
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// Every request takes exactly `latency`, however many are outstanding: a device with
    /// unlimited parallelism.
    struct Fixed {
        latency: Duration,
        pending: BinaryHeap<Reverse<(Instant, usize)>>,
        max_outstanding: usize,
    }

    impl Target for Fixed {
        fn describe(&self) -> String {
            "fixed".into()
        }
        fn size_bytes(&self) -> u64 {
            1 << 30
        }
        fn prepare(&mut self, _: usize, _: usize) -> Result<(), LabError> {
            Ok(())
        }
        fn submit(&mut self, slot: usize, _: Request) -> Result<(), LabError> {
            self.pending
                .push(Reverse((Instant::now() + self.latency, slot)));
            self.max_outstanding = self.max_outstanding.max(self.pending.len());
            Ok(())
        }
        fn wait(&mut self) -> Result<usize, LabError> {
            let Reverse((at, slot)) = self.pending.pop().expect("a request outstanding");
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            Ok(slot)
        }
        fn flush(&mut self) -> Result<(), LabError> {
            Ok(())
        }
    }

    #[test]
    fn a_fixed_latency_target_gives_queue_depth_over_latency() {
        let mut t = Fixed {
            latency: Duration::from_millis(4),
            pending: BinaryHeap::new(),
            max_outstanding: 0,
        };
        let mut w = Workload::custom(4096, 50, 100, 8);
        w.warmup = Duration::from_millis(50);
        w.limit = Limit::Time(Duration::from_millis(600));
        let r = run(&mut t, &w, &RunOptions::default()).unwrap();
        assert_eq!(t.max_outstanding, 8, "real outstanding requests");
        // 8 outstanding, 4 ms each: 2,000 IOPS (sleeps overshoot a little, never undershoot).
        assert!(r.iops > 1600.0 && r.iops <= 2000.0, "{} IOPS", r.iops);
        assert!(
            r.latency_us.p50 >= 4000.0 && r.latency_us.p50 < 5000.0,
            "{:?}",
            r.latency_us
        );
        assert!(r.latency_us.max >= r.latency_us.p999 && r.latency_us.p999 >= r.latency_us.p99);
        let share = r.reads as f64 / (r.reads + r.writes) as f64;
        assert!((share - 0.5).abs() < 0.1, "read share {share}");
        assert!((r.mb_s - r.iops * 4096.0 / 1e6).abs() < 1e-6);
    }

    #[test]
    fn a_byte_limit_moves_exactly_that_many_bytes() {
        let mut t = Fixed {
            latency: Duration::from_micros(100),
            pending: BinaryHeap::new(),
            max_outstanding: 0,
        };
        let w = Workload::sequential(1 << 20, false, Limit::Bytes(64 << 20));
        let r = run(&mut t, &w, &RunOptions::default()).unwrap();
        assert_eq!((r.writes, r.write_bytes, r.reads), (64, 64 << 20, 0));
        assert_eq!(t.max_outstanding, 1);
    }

    #[test]
    fn percentiles_of_known_values() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap(); // 1..=1000 µs
        }
        let l = Latency::of(&h);
        assert!((l.p50 - 500.0).abs() <= 1.0, "{l:?}");
        assert!((l.p99 - 990.0).abs() <= 1.0, "{l:?}");
        assert!((l.p999 - 999.0).abs() <= 1.0, "{l:?}");
        assert!((l.max - 1000.0).abs() <= 1.0, "{l:?}");
        assert!((l.mean - 500.5).abs() <= 1.0, "{l:?}");
        assert_eq!(
            Spread::of([3.0, 1.0, 2.0, f64::NAN]),
            Spread {
                min: 1.0,
                median: 2.0,
                max: 3.0
            }
        );
        assert_eq!(Spread::of([4.0, 1.0]).median, 2.5);
    }
}
