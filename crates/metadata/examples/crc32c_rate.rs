//! How fast the partial parity log's checksum runs: `cargo run --release -p raidkit-metadata
//! --example crc32c_rate [SECONDS_PER_RUN]`.
//!
//! md checksums every partial parity buffer and every 4 KiB log header with crc32c
//! ([`raidkit_metadata::ppl`]), so this is the rate a PPL write path pays. Prints GB/s (10^9
//! bytes a second) for a 4 KiB header, a 64 KiB and a 1 MiB buffer, the median of seven runs.

use raidkit_metadata::ppl::crc32c;
use std::hint::black_box;
use std::time::{Duration, Instant};

const RUNS: usize = 7;

fn main() {
    let run_for = std::env::args()
        .nth(1)
        .map(|s| s.parse::<f64>().expect("SECONDS_PER_RUN is a number"))
        .unwrap_or(0.2);
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for len in [4096usize, 64 << 10, 1 << 20] {
        let buf = &data[..len];
        let mut rates: Vec<f64> = (0..RUNS)
            .map(|_| {
                let start = Instant::now();
                let mut bytes = 0u64;
                let mut acc = 0u32;
                while start.elapsed() < Duration::from_secs_f64(run_for) {
                    for _ in 0..64 {
                        acc ^= crc32c(black_box(buf));
                    }
                    bytes += 64 * len as u64;
                }
                black_box(acc);
                bytes as f64 / start.elapsed().as_secs_f64() / 1e9
            })
            .collect();
        rates.sort_by(|a, b| a.total_cmp(b));
        println!(
            "crc32c {:>8} bytes: {:6.2} GB/s (median of {RUNS}; min {:.2}, max {:.2})",
            len,
            rates[RUNS / 2],
            rates[0],
            rates[RUNS - 1]
        );
    }
}
