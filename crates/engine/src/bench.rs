//! Throughput of an assembled array under simple workloads: sequential streams and random
//! small writes, `inflight` threads each over their own part of the array. Returns figures;
//! prints nothing (callers decide how to show them). Used by `examples/seqbench.rs` and
//! available to the CLI.
//!
//! The timed forms run for a fixed wall time rather than a fixed byte count, so a run lasts as
//! long on a fast array as on a slow one and short runs do not drown in timer and start-up
//! noise; sequential streams wrap around their part of the array.

use crate::array::Array;
use crate::error::Result;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Write,
    Read,
}

#[derive(Clone, Copy, Debug)]
pub struct Throughput {
    pub bytes: u64,
    pub seconds: f64,
}

impl Throughput {
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }
}

/// User + system CPU seconds of this process so far (all its threads), for figures in MB per
/// CPU second and CPUs kept busy.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes one rusage through a valid pointer; zeroed is a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Streams the first `total_bytes` of the array (rounded down to whole requests per thread).
pub fn sequential(
    array: &Array,
    dir: Direction,
    request_bytes: usize,
    inflight: usize,
    total_bytes: u64,
) -> Result<Throughput> {
    let inflight = inflight.max(1);
    let total = total_bytes.min(array.size_bytes());
    let per_thread_requests = total / request_bytes as u64 / inflight as u64;
    run_threads(
        array,
        dir == Direction::Write,
        inflight,
        |t, buf| {
            let base = t as u64 * per_thread_requests * request_bytes as u64;
            for r in 0..per_thread_requests {
                let off = base + r * request_bytes as u64;
                io(array, dir, buf, off)?;
            }
            Ok(per_thread_requests * request_bytes as u64)
        },
        request_bytes,
    )
}

/// Streams for `duration`: thread `t` of `inflight` runs through its contiguous share of the
/// array request after request, starting over at the end of it.
pub fn sequential_for(
    array: &Array,
    dir: Direction,
    request_bytes: usize,
    inflight: usize,
    duration: Duration,
) -> Result<Throughput> {
    let inflight = inflight.max(1);
    let per_thread_requests = (array.size_bytes() / request_bytes as u64 / inflight as u64).max(1);
    let start = Instant::now();
    run_threads(
        array,
        dir == Direction::Write,
        inflight,
        |t, buf| {
            let base = t as u64 * per_thread_requests * request_bytes as u64;
            let mut done = 0u64;
            while start.elapsed() < duration {
                let off = base + (done % per_thread_requests) * request_bytes as u64;
                io(array, dir, buf, off)?;
                done += 1;
            }
            Ok(done * request_bytes as u64)
        },
        request_bytes,
    )
}

/// Random writes of `request_bytes` at `request_bytes`-aligned offsets for `duration`; the
/// offsets come from a fixed xorshift sequence per thread (`seed`), so runs are repeatable.
pub fn random_writes_for(
    array: &Array,
    request_bytes: usize,
    inflight: usize,
    duration: Duration,
    seed: u64,
) -> Result<Throughput> {
    let inflight = inflight.max(1);
    let slots = (array.size_bytes() / request_bytes as u64).max(1);
    let start = Instant::now();
    run_threads(
        array,
        true,
        inflight,
        |t, buf| {
            let mut x = (seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
            let mut done = 0u64;
            while start.elapsed() < duration {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                io(
                    array,
                    Direction::Write,
                    buf,
                    (x % slots) * request_bytes as u64,
                )?;
                done += 1;
            }
            Ok(done * request_bytes as u64)
        },
        request_bytes,
    )
}

fn io(array: &Array, dir: Direction, buf: &mut [u8], off: u64) -> Result<()> {
    match dir {
        Direction::Write => array.write_at(buf, off, false),
        Direction::Read => array.read_at(buf, off),
    }
}

/// Runs `body(thread, buffer)` on `inflight` threads, each with its own request buffer; the
/// bodies return the bytes they moved. Writes end with a flush, inside the timed span.
fn run_threads<F>(
    array: &Array,
    flush: bool,
    inflight: usize,
    body: F,
    request_bytes: usize,
) -> Result<Throughput>
where
    F: Fn(usize, &mut [u8]) -> Result<u64> + Sync,
{
    let start = Instant::now();
    let results: Vec<Result<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..inflight)
            .map(|t| {
                let body = &body;
                s.spawn(move || -> Result<u64> {
                    let mut buf: Vec<u8> =
                        (0..request_bytes).map(|i| (i as u8) ^ (t as u8)).collect();
                    body(t, &mut buf)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(crate::EngineError::Invalid(
                        "benchmark thread panicked".into(),
                    ))
                })
            })
            .collect()
    });
    if flush {
        array.flush()?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut bytes = 0;
    for r in results {
        bytes += r?;
    }
    Ok(Throughput { bytes, seconds })
}

/// What the member files themselves give, without the engine: the reference for how much
/// of a benchmark's cost is the engine's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawPattern {
    /// 1 MiB `pwrite`s front to back, starting over at the end.
    SeqWrite,
    /// 1 MiB `pread`s front to back, starting over at the end.
    SeqRead,
    /// 4 KiB at random 4 KiB-aligned offsets, alternately read and written.
    RandReadWrite4k,
}

/// Runs `pattern` on every file at once, one thread per file (fio's psync jobs, in process),
/// for `duration`; returns bytes moved over all files.
pub fn files_for(
    paths: &[std::path::PathBuf],
    pattern: RawPattern,
    duration: Duration,
) -> std::io::Result<Throughput> {
    use std::os::unix::fs::FileExt;
    let start = Instant::now();
    let results: Vec<std::io::Result<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = paths
            .iter()
            .enumerate()
            .map(|(t, path)| {
                s.spawn(move || -> std::io::Result<u64> {
                    let f = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(path)?;
                    let bs: usize = if pattern == RawPattern::RandReadWrite4k {
                        4096
                    } else {
                        1 << 20
                    };
                    let blocks = (f.metadata()?.len() / bs as u64).max(1);
                    let mut buf = vec![t as u8; bs];
                    let mut x = (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    let mut done = 0u64;
                    while start.elapsed() < duration {
                        match pattern {
                            RawPattern::SeqWrite => {
                                f.write_all_at(&buf, (done % blocks) * bs as u64)?
                            }
                            RawPattern::SeqRead => {
                                f.read_exact_at(&mut buf, (done % blocks) * bs as u64)?
                            }
                            RawPattern::RandReadWrite4k => {
                                x ^= x << 13;
                                x ^= x >> 7;
                                x ^= x << 17;
                                let off = (x % blocks) * bs as u64;
                                if done.is_multiple_of(2) {
                                    f.read_exact_at(&mut buf, off)?
                                } else {
                                    f.write_all_at(&buf, off)?
                                }
                            }
                        }
                        done += 1;
                    }
                    Ok(done * bs as u64)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("benchmark thread panicked")))
            })
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let mut bytes = 0;
    for r in results {
        bytes += r?;
    }
    Ok(Throughput { bytes, seconds })
}
