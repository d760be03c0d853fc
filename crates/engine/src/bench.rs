//! Sequential throughput of an assembled array: `inflight` threads each stream requests of
//! `request_bytes` over their own contiguous part of the array. Returns figures; prints
//! nothing (callers decide how to show them). Used by `examples/seqbench.rs` and available to
//! the CLI.

use crate::array::Array;
use crate::error::Result;
use std::time::Instant;

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
    let per_thread = per_thread_requests * request_bytes as u64;
    let start = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..inflight)
            .map(|t| {
                s.spawn(move || -> Result<()> {
                    let mut buf: Vec<u8> =
                        (0..request_bytes).map(|i| (i as u8) ^ (t as u8)).collect();
                    let base = t as u64 * per_thread;
                    for r in 0..per_thread_requests {
                        let off = base + r * request_bytes as u64;
                        match dir {
                            Direction::Write => array.write_at(&buf, off, false)?,
                            Direction::Read => array.read_at(&mut buf, off)?,
                        }
                    }
                    Ok(())
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
    if dir == Direction::Write {
        array.flush()?;
    }
    let seconds = start.elapsed().as_secs_f64();
    for r in results {
        r?;
    }
    Ok(Throughput {
        bytes: per_thread * inflight as u64,
        seconds,
    })
}
