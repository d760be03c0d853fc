//! The parity benchmark: P (XOR), P+Q and two-data-block recovery, in GB/s of stripe data per
//! core (one thread), raidkit's kernels side by side with ISA-L in the same run.
//!
//! Method. Time is the benchmarking thread's CPU time, so GB/s is per core even on a busy
//! machine. Stripes are 8 data members plus P and Q, 64-byte aligned, in one pool filled with
//! pseudo-random bytes. "warm" repeats the operation on one stripe (the cache keeps it);
//! "cold" walks every stripe of a pool much larger than the last-level cache (256 MiB by
//! default), so each stripe comes from memory. Each case runs one warm-up sample, then
//! `runs` short samples, alternating raidkit and ISA-L so both see the same machine load; the
//! medians are reported, and the ratio is the median of the per-run ratios. Throughput counts data bytes only (8 × block per operation), as md's
//! boot-time raid6 benchmark and ISA-L's perf tests do.
//!
//! Comparisons. XOR: ISA-L `xor_gen`. P+Q: ISA-L `pq_gen`. Recovery: ISA-L has no md-style
//! two-failure recovery, so its side is `ec_encode_data` with the 2 × 8 decode matrix that
//! rebuilds the same two data blocks from the six surviving data blocks, P and Q (md's
//! `raid6_2data_recov` algebra written as a matrix). Before timing, every ISA-L output is
//! compared with raidkit's, byte for byte.

use std::fmt;
use std::time::{Duration, Instant};

use raidkit_parity::{gf, Kernel, KernelId, ParityError};
use serde::Serialize;

use crate::isal::Isal;

/// Data members per stripe in every case.
pub const DATA_MEMBERS: usize = 8;
/// The two data slots the recovery case rebuilds.
pub const FAILED_SLOTS: [usize; 2] = [2, 5];
const BLOCKS_PER_STRIPE: usize = DATA_MEMBERS + 2;
const ALIGN_BYTES: usize = 64;

/// What to measure.
#[derive(Clone, Debug)]
pub struct ParityBenchConfig {
    /// The raidkit kernel; `None` means the process-wide dispatcher's choice.
    pub kernel: Option<KernelId>,
    /// Timed samples per case (at least 5); one untimed warm-up sample comes first.
    pub runs: usize,
    /// Bytes of the cold stripe pool; should be far above the last-level cache.
    pub cold_pool_bytes: usize,
    /// Block sizes (bytes per member), each a multiple of 64 for ISA-L.
    pub block_bytes: Vec<usize>,
    /// Approximate duration of one warm sample.
    pub warm_sample: Duration,
    /// Stripe bytes (data and parity) one cold sample walks through.
    pub cold_sample_bytes: usize,
}

impl Default for ParityBenchConfig {
    fn default() -> Self {
        ParityBenchConfig {
            kernel: None,
            runs: 21,
            cold_pool_bytes: 256 << 20,
            block_bytes: vec![4 << 10, 64 << 10, 1 << 20],
            warm_sample: Duration::from_millis(5),
            cold_sample_bytes: 20 << 20,
        }
    }
}

/// Why the benchmark could not run.
#[derive(Debug)]
pub enum ParityBenchError {
    /// The requested kernel cannot run on this CPU.
    KernelUnsupported(KernelId),
    /// Fewer than 5 timed runs were asked for.
    TooFewRuns { runs: usize },
    /// A block size is zero or not a multiple of 64 bytes (ISA-L's requirement).
    BadBlockSize { block_bytes: usize },
    /// raidkit refused its own arguments (a bug in the benchmark).
    Parity(ParityError),
    /// raidkit's recovery did not rebuild the original blocks.
    RecoveryWrong { block_bytes: usize },
}

impl fmt::Display for ParityBenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParityBenchError::KernelUnsupported(id) => {
                write!(f, "kernel {id} is not supported by this CPU")
            }
            ParityBenchError::TooFewRuns { runs } => {
                write!(f, "{runs} runs: the median needs at least 5")
            }
            ParityBenchError::BadBlockSize { block_bytes } => write!(
                f,
                "block size {block_bytes} must be a non-zero multiple of 64 bytes"
            ),
            ParityBenchError::Parity(e) => write!(f, "parity: {e}"),
            ParityBenchError::RecoveryWrong { block_bytes } => write!(
                f,
                "raidkit recovery produced wrong data at block size {block_bytes}"
            ),
        }
    }
}

impl std::error::Error for ParityBenchError {}

impl From<ParityError> for ParityBenchError {
    fn from(e: ParityError) -> Self {
        ParityBenchError::Parity(e)
    }
}

/// The operations measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParityOp {
    /// P = XOR of 8 data blocks.
    Xor,
    /// P and Q of 8 data blocks.
    Pq,
    /// Rebuild two data blocks from 6 data blocks, P and Q.
    Recover2Data,
}

impl ParityOp {
    pub const ALL: [ParityOp; 3] = [ParityOp::Xor, ParityOp::Pq, ParityOp::Recover2Data];

    pub fn name(self) -> &'static str {
        match self {
            ParityOp::Xor => "xor",
            ParityOp::Pq => "pq",
            ParityOp::Recover2Data => "recover-2data",
        }
    }

    /// The ISA-L function on the other side of the comparison.
    pub fn isal_function(self) -> &'static str {
        match self {
            ParityOp::Xor => "xor_gen",
            ParityOp::Pq => "pq_gen",
            ParityOp::Recover2Data => "ec_encode_data (2x8 decode matrix)",
        }
    }
}

/// One line of the result table.
#[derive(Clone, Debug, Serialize)]
pub struct ParityRow {
    pub op: &'static str,
    pub case: String,
    pub raidkit_gbps: f64,
    /// `None` when ISA-L is not installed.
    pub isal_gbps: Option<f64>,
    /// Median over runs of raidkit's GB/s divided by ISA-L's in the same (adjacent) run;
    /// `None` when ISA-L is not installed.
    pub ratio: Option<f64>,
    pub raidkit_kernel: &'static str,
    pub isal_function: Option<&'static str>,
    /// Whether ISA-L's output equalled raidkit's byte for byte (checked before timing).
    pub outputs_match: Option<bool>,
    /// Every timed sample, GB/s, in run order.
    pub raidkit_runs_gbps: Vec<f64>,
    pub isal_runs_gbps: Vec<f64>,
}

/// Everything the benchmark learned.
#[derive(Clone, Debug, Serialize)]
pub struct ParityReport {
    pub raidkit_kernel: &'static str,
    /// Why `RAIDKIT_PARITY` was not honoured, if it was set and not honoured.
    pub kernel_note: Option<String>,
    /// The ISA-L soname that was loaded, or why none was.
    pub isal: Result<&'static str, String>,
    pub rows: Vec<ParityRow>,
}

/// Choose the kernel: the requested one, or the dispatcher's.
pub fn choose_kernel(requested: Option<KernelId>) -> Result<Kernel, ParityBenchError> {
    match requested {
        Some(id) => Kernel::new(id).ok_or(ParityBenchError::KernelUnsupported(id)),
        None => Ok(raidkit_parity::selected_kernel()),
    }
}

/// One 64-byte-aligned pool of stripes; block `b` of stripe `s` is at
/// `base + (s · BLOCKS_PER_STRIPE + b) · block_bytes`. Blocks never overlap, which is what
/// makes the slices built from `ptr` below disjoint.
struct Pool {
    mem: Vec<u8>,
    base: usize,
    block_bytes: usize,
    stripes: usize,
}

impl Pool {
    fn new(block_bytes: usize, stripes: usize) -> Pool {
        let len = stripes * BLOCKS_PER_STRIPE * block_bytes + ALIGN_BYTES;
        let mut mem = vec![0u8; len];
        let base = mem.as_ptr().align_offset(ALIGN_BYTES);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for chunk in mem.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_ne_bytes());
        }
        Pool {
            mem,
            base,
            block_bytes,
            stripes,
        }
    }

    fn ptrs(&mut self, stripe: usize) -> [*mut u8; BLOCKS_PER_STRIPE] {
        let first = self.base + stripe * BLOCKS_PER_STRIPE * self.block_bytes;
        let start = self.mem.as_mut_ptr();
        // SAFETY: stripe < self.stripes, so every block lies inside `mem` (see `new`).
        std::array::from_fn(|b| unsafe { start.add(first + b * self.block_bytes) })
    }

    fn block(&self, stripe: usize, b: usize) -> &[u8] {
        let at = self.base + (stripe * BLOCKS_PER_STRIPE + b) * self.block_bytes;
        &self.mem[at..at + self.block_bytes]
    }
}

/// The 2 × 8 matrix over (surviving data in slot order, P, Q) that yields the two failed
/// data blocks a < b: D_b = pbmul·P_xy ⊕ qmul·Q_xy and D_a = D_b ⊕ P_xy, with
/// P_xy = P ⊕ Σ D_i and Q_xy = Q ⊕ Σ g^i·D_i over the survivors (md's raid6_2data_recov).
fn decode_matrix(a: usize, b: usize) -> [[u8; DATA_MEMBERS]; 2] {
    let pbmul = gf::EXI[b - a];
    let qmul = gf::inv(gf::exp(a) ^ gf::exp(b));
    let mut rows = [[0u8; DATA_MEMBERS]; 2];
    let survivors = (0..DATA_MEMBERS).filter(|&z| z != a && z != b);
    for (col, z) in survivors.enumerate() {
        let cb = pbmul ^ gf::mul(qmul, gf::exp(z));
        rows[1][col] = cb;
        rows[0][col] = cb ^ 1;
    }
    let p_col = DATA_MEMBERS - 2;
    rows[1][p_col] = pbmul;
    rows[0][p_col] = pbmul ^ 1;
    rows[1][p_col + 1] = qmul;
    rows[0][p_col + 1] = qmul;
    rows
}

/// The work of one side of one case, on one stripe.
trait Side {
    fn run(&mut self, ptrs: [*mut u8; BLOCKS_PER_STRIPE]) -> Result<(), ParityBenchError>;
}

struct RaidkitSide {
    kernel: Kernel,
    op: ParityOp,
    len: usize,
}

impl Side for RaidkitSide {
    fn run(&mut self, ptrs: [*mut u8; BLOCKS_PER_STRIPE]) -> Result<(), ParityBenchError> {
        let len = self.len;
        // SAFETY: the pointers address disjoint `len`-byte blocks of a live pool (Pool).
        let mut blocks: [&mut [u8]; BLOCKS_PER_STRIPE] =
            ptrs.map(|p| unsafe { std::slice::from_raw_parts_mut(p, len) });
        match self.op {
            ParityOp::Recover2Data => self.kernel.recover(&mut blocks, &FAILED_SLOTS)?,
            ParityOp::Xor | ParityOp::Pq => {
                let (data, pq) = blocks.split_at_mut(DATA_MEMBERS);
                let data: [&[u8]; DATA_MEMBERS] = std::array::from_fn(|i| &*data[i]);
                let (p, q) = pq.split_at_mut(1);
                if self.op == ParityOp::Xor {
                    self.kernel.gen_p(&data, p[0])?;
                } else {
                    self.kernel.gen_syndrome(&data, p[0], q[0])?;
                }
            }
        }
        Ok(())
    }
}

struct IsalSide {
    isal: Isal,
    op: ParityOp,
    len: usize,
    tables: Vec<u8>,
}

impl Side for IsalSide {
    fn run(&mut self, ptrs: [*mut u8; BLOCKS_PER_STRIPE]) -> Result<(), ParityBenchError> {
        // SAFETY (all three): the pointers address disjoint, 64-byte aligned blocks of `len`
        // bytes, a multiple of 64 (checked by the config), as ISA-L requires.
        unsafe {
            match self.op {
                ParityOp::Xor => {
                    let mut v = ptrs;
                    self.isal.xor_gen(&mut v[..DATA_MEMBERS + 1], self.len);
                }
                ParityOp::Pq => {
                    let mut v = ptrs;
                    self.isal.pq_gen(&mut v, self.len);
                }
                ParityOp::Recover2Data => {
                    let [a, b] = FAILED_SLOTS;
                    let mut src: Vec<*mut u8> = (0..BLOCKS_PER_STRIPE)
                        .filter(|&i| i != a && i != b)
                        .map(|i| ptrs[i])
                        .collect();
                    let mut out = [ptrs[a], ptrs[b]];
                    self.isal
                        .ec_encode_data(self.len, &mut self.tables, &mut src, &mut out);
                }
            }
        }
        Ok(())
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Temperature {
    Warm,
    Cold,
}

/// One timed sample: `warm_iters` operations on stripe 0 (warm), or `cold_ops` stripes from
/// `cursor` on, wrapping around the pool (cold). Returns GB/s of data.
fn sample(
    side: &mut dyn Side,
    pool: &mut Pool,
    temp: Temperature,
    warm_iters: usize,
    cold_ops: usize,
    cursor: &mut usize,
) -> Result<f64, ParityBenchError> {
    let ops = match temp {
        Temperature::Warm => warm_iters,
        Temperature::Cold => cold_ops,
    };
    let start = ThreadClock::now();
    for _ in 0..ops {
        let stripe = match temp {
            Temperature::Warm => 0,
            Temperature::Cold => {
                let s = *cursor;
                *cursor = (s + 1) % pool.stripes;
                s
            }
        };
        side.run(pool.ptrs(stripe))?;
    }
    let secs = start.elapsed_secs().max(1e-9);
    Ok((ops * DATA_MEMBERS * pool.block_bytes) as f64 / secs / 1e9)
}

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`), falling back to wall time if
/// the clock is unavailable. Throughput per core counts only the time the thread ran, so
/// other processes on a shared machine do not show up as slowness of either library.
struct ThreadClock {
    cpu_ns: Option<u128>,
    wall: Instant,
}

impl ThreadClock {
    fn cpu_ns() -> Option<u128> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid out-pointer for clock_gettime.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128)
    }

    fn now() -> ThreadClock {
        ThreadClock {
            cpu_ns: Self::cpu_ns(),
            wall: Instant::now(),
        }
    }

    fn elapsed_secs(&self) -> f64 {
        match (self.cpu_ns, Self::cpu_ns()) {
            (Some(a), Some(b)) if b >= a => (b - a) as f64 / 1e9,
            _ => self.wall.elapsed().as_secs_f64(),
        }
    }
}

/// How many warm operations fill roughly `target`.
fn calibrate(
    side: &mut dyn Side,
    pool: &mut Pool,
    target: Duration,
) -> Result<usize, ParityBenchError> {
    let probe = 16;
    let start = ThreadClock::now();
    for _ in 0..probe {
        side.run(pool.ptrs(0))?;
    }
    let per_op = start.elapsed_secs().max(1e-9) / probe as f64;
    Ok(((target.as_secs_f64() / per_op) as usize).clamp(16, 10_000_000))
}

/// Compare ISA-L's output with raidkit's on stripe 0 (and prove raidkit's recovery right).
fn outputs_agree(
    op: ParityOp,
    pool: &mut Pool,
    raidkit: &mut RaidkitSide,
    isal: &mut IsalSide,
) -> Result<bool, ParityBenchError> {
    let outputs: Vec<usize> = match op {
        ParityOp::Xor => vec![DATA_MEMBERS],
        ParityOp::Pq => vec![DATA_MEMBERS, DATA_MEMBERS + 1],
        ParityOp::Recover2Data => FAILED_SLOTS.to_vec(),
    };
    // Make P and Q consistent with the data first, so recovery has a true answer.
    RaidkitSide {
        kernel: raidkit.kernel,
        op: ParityOp::Pq,
        len: raidkit.len,
    }
    .run(pool.ptrs(0))?;
    let truth: Vec<Vec<u8>> = outputs.iter().map(|&b| pool.block(0, b).to_vec()).collect();
    let poison = |pool: &mut Pool| {
        for &b in &outputs {
            // SAFETY: block b of stripe 0 is `block_bytes` long inside the pool.
            unsafe { std::ptr::write_bytes(pool.ptrs(0)[b], 0xA5, pool.block_bytes) };
        }
    };
    poison(pool);
    raidkit.run(pool.ptrs(0))?;
    let raidkit_out: Vec<Vec<u8>> = outputs.iter().map(|&b| pool.block(0, b).to_vec()).collect();
    if op == ParityOp::Recover2Data && raidkit_out != truth {
        return Err(ParityBenchError::RecoveryWrong {
            block_bytes: pool.block_bytes,
        });
    }
    poison(pool);
    isal.run(pool.ptrs(0))?;
    let isal_out: Vec<Vec<u8>> = outputs.iter().map(|&b| pool.block(0, b).to_vec()).collect();
    Ok(isal_out == raidkit_out)
}

/// Run every case; `on_row` sees each row as soon as it is measured.
pub fn run_parity_bench(
    cfg: &ParityBenchConfig,
    mut on_row: impl FnMut(&ParityRow),
) -> Result<ParityReport, ParityBenchError> {
    if cfg.runs < 5 {
        return Err(ParityBenchError::TooFewRuns { runs: cfg.runs });
    }
    if let Some(&bad) = cfg.block_bytes.iter().find(|&&b| b == 0 || b % 64 != 0) {
        return Err(ParityBenchError::BadBlockSize { block_bytes: bad });
    }
    let kernel = choose_kernel(cfg.kernel)?;
    let kernel_note = match cfg.kernel {
        Some(_) => None,
        None => raidkit_parity::selection().fallback_reason.clone(),
    };
    let isal = Isal::load();
    let mut rows = Vec::new();
    for &block_bytes in &cfg.block_bytes {
        let stripe_bytes = BLOCKS_PER_STRIPE * block_bytes;
        let stripes = (cfg.cold_pool_bytes / stripe_bytes).max(2);
        let mut pool = Pool::new(block_bytes, stripes);
        for temp in [Temperature::Warm, Temperature::Cold] {
            for op in ParityOp::ALL {
                let case = format!(
                    "{DATA_MEMBERS}x{} {}",
                    size_name(block_bytes),
                    if temp == Temperature::Warm {
                        "warm"
                    } else {
                        "cold"
                    }
                );
                let mut rk = RaidkitSide {
                    kernel,
                    op,
                    len: block_bytes,
                };
                let mut theirs = match &isal {
                    Ok(lib) => Some(IsalSide {
                        isal: *lib,
                        op,
                        len: block_bytes,
                        tables: lib
                            .ec_init_tables(&decode_matrix(FAILED_SLOTS[0], FAILED_SLOTS[1])),
                    }),
                    Err(_) => None,
                };
                let outputs_match = match theirs.as_mut() {
                    Some(t) => Some(outputs_agree(op, &mut pool, &mut rk, t)?),
                    None => None,
                };
                let rk_iters = calibrate(&mut rk, &mut pool, cfg.warm_sample)?;
                let their_iters = match theirs.as_mut() {
                    Some(t) => calibrate(t, &mut pool, cfg.warm_sample)?,
                    None => 0,
                };
                // Cold: each side walks its own cursor, half a pool apart, so every stripe
                // it meets was last touched a whole pool (far more than the LLC) earlier.
                let cold_ops = (cfg.cold_sample_bytes / stripe_bytes).clamp(1, stripes / 2);
                let (mut rk_cursor, mut their_cursor) = (1, 1 + stripes / 2);
                let (mut rk_runs, mut their_runs) = (Vec::new(), Vec::new());
                for run in 0..=cfg.runs {
                    // Alternate who goes first, so neither side always inherits the other's
                    // cache and frequency state.
                    let isal_first = run % 2 == 1;
                    let mut t = None;
                    if isal_first {
                        if let Some(side) = theirs.as_mut() {
                            let c = &mut their_cursor;
                            t = Some(sample(side, &mut pool, temp, their_iters, cold_ops, c)?);
                        }
                    }
                    let r = sample(&mut rk, &mut pool, temp, rk_iters, cold_ops, &mut rk_cursor)?;
                    if !isal_first {
                        if let Some(side) = theirs.as_mut() {
                            let c = &mut their_cursor;
                            t = Some(sample(side, &mut pool, temp, their_iters, cold_ops, c)?);
                        }
                    }
                    if run > 0 {
                        rk_runs.push(r);
                        their_runs.extend(t);
                    }
                }
                let raidkit_gbps = median(&rk_runs);
                let isal_gbps = theirs.as_ref().map(|_| median(&their_runs));
                // Paired runs saw the same machine load; the median of their ratios is the
                // steadiest comparison on a shared machine.
                let ratio = theirs.as_ref().map(|_| {
                    let pairs: Vec<f64> = rk_runs
                        .iter()
                        .zip(&their_runs)
                        .map(|(r, t)| r / t)
                        .collect();
                    median(&pairs)
                });
                let row = ParityRow {
                    op: op.name(),
                    case,
                    raidkit_gbps,
                    isal_gbps,
                    ratio,
                    raidkit_kernel: kernel.name(),
                    isal_function: theirs.as_ref().map(|_| op.isal_function()),
                    outputs_match,
                    raidkit_runs_gbps: rk_runs,
                    isal_runs_gbps: their_runs,
                };
                on_row(&row);
                rows.push(row);
            }
        }
    }
    Ok(ParityReport {
        raidkit_kernel: kernel.name(),
        kernel_note,
        isal: isal.map(|l| l.soname()).map_err(|e| e.to_string()),
        rows,
    })
}

/// "4KiB", "64KiB", "1MiB".
pub fn size_name(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{}KiB", bytes >> 10)
    } else {
        format!("{bytes}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_matrix_rebuilds_the_failed_blocks() {
        // Apply the matrix with table arithmetic to one byte column and compare.
        let data: [u8; DATA_MEMBERS] = [0x11, 0x22, 0x93, 0x44, 0xf5, 0x06, 0x77, 0xe8];
        let p = data.iter().fold(0, |acc, d| acc ^ d);
        let q = data
            .iter()
            .enumerate()
            .fold(0, |acc, (z, &d)| acc ^ gf::mul(gf::exp(z), d));
        for a in 0..DATA_MEMBERS {
            for b in a + 1..DATA_MEMBERS {
                let m = decode_matrix(a, b);
                let mut src: Vec<u8> = (0..DATA_MEMBERS)
                    .filter(|&z| z != a && z != b)
                    .map(|z| data[z])
                    .collect();
                src.push(p);
                src.push(q);
                let out: Vec<u8> = m
                    .iter()
                    .map(|row| {
                        row.iter()
                            .zip(&src)
                            .fold(0, |acc, (&c, &s)| acc ^ gf::mul(c, s))
                    })
                    .collect();
                assert_eq!(out, vec![data[a], data[b]], "failed {a}, {b}");
            }
        }
    }

    #[test]
    fn median_and_size_names() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(size_name(4096), "4KiB");
        assert_eq!(size_name(1 << 20), "1MiB");
        assert_eq!(size_name(100), "100B");
    }

    #[test]
    fn tiny_bench_runs_and_checks_against_isal_when_present() {
        let cfg = ParityBenchConfig {
            kernel: Some(KernelId::Portable),
            runs: 5,
            cold_pool_bytes: 1 << 20,
            block_bytes: vec![4096],
            warm_sample: Duration::from_millis(1),
            cold_sample_bytes: 256 << 10,
        };
        let report = run_parity_bench(&cfg, |_| {}).unwrap();
        assert_eq!(report.rows.len(), 6);
        for row in &report.rows {
            assert!(row.raidkit_gbps > 0.0, "{row:?}");
            assert_eq!(row.raidkit_runs_gbps.len(), 5);
            if report.isal.is_ok() {
                assert_eq!(row.outputs_match, Some(true), "{row:?}");
            }
        }
    }

    #[test]
    fn bad_configs_are_refused() {
        let cfg = ParityBenchConfig {
            runs: 3,
            ..ParityBenchConfig::default()
        };
        assert!(matches!(
            run_parity_bench(&cfg, |_| {}),
            Err(ParityBenchError::TooFewRuns { runs: 3 })
        ));
        let cfg = ParityBenchConfig {
            block_bytes: vec![100],
            ..ParityBenchConfig::default()
        };
        assert!(matches!(
            run_parity_bench(&cfg, |_| {}),
            Err(ParityBenchError::BadBlockSize { block_bytes: 100 })
        ));
    }
}
