//! The engine's data path against what `fio` (psync, one job per member file, all files at
//! once) gets from the same member files in /dev/shm: 1 MiB sequential writes and reads,
//! degraded reads and writes (RAID 5 with one member failed, RAID 6 with two), and 4 KiB
//! random writes that go through read-modify-write / reconstruct-write.
//!
//! Run: `cargo run --release -p raidkit-engine --example seqbench [member_MiB] [threads]
//! [rounds] [seconds]` (defaults 256, as many threads as the array has members, 5 rounds of
//! 1 s). Needs fio on the PATH (apt-get install -y fio). Prints one table; nothing is
//! asserted.
//!
//! Method, so that figures from a shared, noisy machine can be trusted:
//! - every member file is written in full before anything is measured, so fio and the engine
//!   both overwrite allocated tmpfs pages (a first write into a sparse tmpfs file costs page
//!   allocation and runs at about half the speed of an overwrite);
//! - every measurement runs for the same wall time (fio `time_based`, the engine the same),
//!   and the engine runs as many threads as fio runs jobs (one per member) unless told;
//! - fio's sequential aggregate counts only the span in which all its jobs ran ("at once"):
//!   fio's own figure divides every job's bytes by one job's runtime although the jobs start
//!   one after another, which overstated the files' aggregate by 10-25% (see [`FioWindow`]).
//!   The corrected figure agrees with fio's pattern run in this process (`dataprobe ...
//!   raw-write`: 22.4, 21.9, 23.3 GB/s against fio's 22.6, 22.5, 22.8 for six files; fio's
//!   own figure said 24.8-26.2);
//! - one discarded warm-up round, then `rounds` rounds in which fio, the engine and the raw
//!   reference (below) take turns, in an order that rotates from round to round;
//! - figures are medians; a ratio is the median of the per-round ratios (each engine run
//!   against the runs next to it), shown with their spread;
//! - besides MB/s, MB per CPU second: what the work costs, whatever share of the CPUs other
//!   processes left to it. fio's own CPU figures count its start-up and come out 20-30% too
//!   high for one-second runs, so the CPU reference is "raw": fio's pattern (one thread per
//!   member file, psync-style `pread`/`pwrite`) run in this process, measured with
//!   getrusage like the engine.
//!
//! On a machine shared with other busy processes, MB/s says more about the scheduler than
//! about the engine: a side that sleeps even briefly (the engine waiting for a member worker)
//! loses its CPU share to the other processes, a side that never sleeps (fio) keeps it. For
//! figures that show what the engine would do on the machine alone, run the benchmark under
//! round-robin real-time priority, which fio inherits: `chrt -r 1 target/release/examples/
//! seqbench` (root; the kernel still leaves 5% of each second to everything else).

use raidkit_disk::{Disk, FileDisk, OpenOptions};
use raidkit_engine::bench::{
    cpu_seconds, files_for, random_writes_for, sequential_for, Direction, RawPattern, Throughput,
};
use raidkit_engine::{Array, CreateOptions, EngineConfig};
use raidkit_metadata::SuperblockVersion;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// One run's figures: MB/s, and MB per CPU second spent on them (fio: not measured, 0).
#[derive(Clone, Copy, Default)]
struct Figure {
    mb_per_s: f64,
    mb_per_cpu_s: f64,
    /// fio only: the aggregate fio itself reports for the same run ([`FioWindow::Reported`]).
    fio_own_mb_per_s: f64,
}

impl Figure {
    fn scaled(self, k: f64) -> Figure {
        Figure {
            mb_per_s: self.mb_per_s * k,
            mb_per_cpu_s: self.mb_per_cpu_s * k,
            fio_own_mb_per_s: self.fio_own_mb_per_s * k,
        }
    }
}

/// Runs a workload in this process and measures its CPU time.
fn measured(run: impl FnOnce() -> Throughput) -> Figure {
    let cpu0 = cpu_seconds();
    let t = run();
    let cpu = (cpu_seconds() - cpu0).max(1e-9);
    Figure {
        mb_per_s: t.mb_per_s(),
        mb_per_cpu_s: t.bytes as f64 / 1e6 / cpu,
        fio_own_mb_per_s: 0.0,
    }
}

/// How fio's aggregate is taken.
#[derive(Clone, Copy, PartialEq)]
enum FioWindow {
    /// fio's own figure: all jobs' bytes over the longest job's runtime. Each job's runtime
    /// starts when that job starts, and jobs start one after another (under `chrt -r` a job
    /// that never sleeps holds its CPU for a whole 100 ms round-robin slice before the next
    /// one starts), so this counts bytes that were not written "at once" and overstates the
    /// aggregate: measured 31-35 GB/s for six 1 s jobs whose files take 25-26 GB/s together.
    Reported,
    /// Only the time in which every job ran: each I/O's completion is logged with a wall
    /// clock time stamp (`--write_iops_log`, `--log_unix_epoch`), and the aggregate is the
    /// bytes completed between the last job's first completion and the first job's last one
    /// over that span. Logging every I/O costs nothing measurable at 1 MiB; at 4 KiB it costs
    /// fio about 9%, so random tests keep `Reported` (which then favours fio).
    AllRunning,
}

/// Aggregate fio throughput over all jobs (see [`FioWindow`]).
fn fio(
    files: &[PathBuf],
    args: &[&str],
    size_bytes: u64,
    seconds: f64,
    window: FioWindow,
) -> Figure {
    let log_dir = files[0].with_file_name("fio-log");
    let mut cmd = Command::new("fio");
    cmd.args([
        "--output-format=json",
        "--ioengine=psync",
        "--invalidate=0",
        "--time_based",
    ]);
    // When only the span in which all jobs run counts, run long enough that it lasts
    // `seconds` even if each job starts a round-robin slice after the one before.
    let runtime = match window {
        FioWindow::Reported => seconds,
        FioWindow::AllRunning => seconds + 0.1 * files.len() as f64,
    };
    cmd.arg(format!("--runtime={}ms", (runtime * 1000.0) as u64));
    cmd.arg(format!("--size={size_bytes}"));
    if window == FioWindow::AllRunning {
        let _ = std::fs::remove_dir_all(&log_dir);
        std::fs::create_dir_all(&log_dir).expect("fio log folder");
        cmd.arg(format!("--write_iops_log={}", log_dir.join("io").display()));
        cmd.arg("--log_unix_epoch=1");
    }
    cmd.args(args);
    for (i, f) in files.iter().enumerate() {
        cmd.arg(format!("--name=m{i}"));
        cmd.arg(format!("--filename={}", f.display()));
    }
    let out = cmd.output().expect("fio runs (apt-get install -y fio)");
    assert!(
        out.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("fio prints JSON");
    let (mut bytes, mut runtime_ms) = (0f64, 0f64);
    for j in v["jobs"].as_array().into_iter().flatten() {
        for dir in ["read", "write"] {
            let d = &j[dir];
            bytes += d["io_bytes"].as_f64().unwrap_or(0.0);
            runtime_ms = runtime_ms.max(d["runtime"].as_f64().unwrap_or(0.0));
        }
    }
    let own = bytes / 1e6 / (runtime_ms / 1000.0).max(1e-9);
    let figure = match window {
        FioWindow::Reported => own,
        FioWindow::AllRunning => {
            let mb_per_s = all_running_mb_per_s(&log_dir, files.len());
            let _ = std::fs::remove_dir_all(&log_dir);
            mb_per_s
        }
    };
    Figure {
        mb_per_s: figure,
        mb_per_cpu_s: 0.0,
        fio_own_mb_per_s: own,
    }
}

/// MB/s over the span in which every job of a fio run was completing I/O, from per-I/O logs
/// (`io_iops.N.log`, one line per I/O: epoch milliseconds, value, direction, bytes, ...).
fn all_running_mb_per_s(log_dir: &Path, jobs: usize) -> f64 {
    let per_job: Vec<Vec<(u64, u64)>> = (1..=jobs)
        .map(|j| {
            let path = log_dir.join(format!("io_iops.{j}.log"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("fio log {}: {e}", path.display()));
            text.lines()
                .filter_map(|l| {
                    let mut f = l.split(',').map(str::trim);
                    let t = f.next()?.parse().ok()?;
                    let bytes = f.nth(2)?.parse().ok()?;
                    Some((t, bytes))
                })
                .collect()
        })
        .collect();
    let first = per_job.iter().filter_map(|v| v.first()).map(|e| e.0).max();
    let last = per_job.iter().filter_map(|v| v.last()).map(|e| e.0).min();
    let (Some(lo), Some(hi)) = (first, last) else {
        panic!("fio logged no I/O for a job");
    };
    assert!(
        hi > lo + 100,
        "fio's jobs ran together for {} ms only",
        hi.saturating_sub(lo)
    );
    let bytes: u64 = per_job
        .iter()
        .flatten()
        .filter(|e| e.0 > lo && e.0 <= hi)
        .map(|e| e.1)
        .sum();
    bytes as f64 / 1e6 / ((hi - lo) as f64 / 1000.0)
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse()
                    .unwrap_or(0)
            })
        })
        .unwrap_or(0)
}

/// Resets the peak RSS figure (Linux: "5" to clear_refs), so each array reports its own.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Member files written in full (zeroes: the array starts consistent, and every tmpfs page
/// exists before either side measures).
fn make_files(dir: &Path, n: usize, bytes: u64) -> Vec<PathBuf> {
    let zeros = vec![0u8; 1 << 20];
    (0..n)
        .map(|i| {
            let p = dir.join(format!("m{i}.img"));
            let _ = std::fs::remove_file(&p);
            let mut f = std::fs::File::create(&p).expect("create member");
            let mut left = bytes;
            while left > 0 {
                let k = left.min(zeros.len() as u64) as usize;
                f.write_all(&zeros[..k]).expect("preallocate member");
                left -= k as u64;
            }
            p
        })
        .collect()
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

/// One round of one table row: the engine, fio and the raw reference, already scaled to
/// array data (data share; member I/Os per write for random writes).
#[derive(Clone, Copy)]
struct Round {
    engine: Figure,
    fio: Figure,
    raw: Figure,
}

#[derive(Default)]
struct Row {
    rounds: Vec<Round>,
}

impl Row {
    fn median_of(&self, f: impl Fn(&Round) -> f64) -> f64 {
        median(&self.rounds.iter().map(f).collect::<Vec<_>>())
    }
    fn print(&self, array: &str, test: &str, healthy: Option<&Row>) {
        let ratio = |r: &Round| r.engine.mb_per_s / r.fio.mb_per_s.max(1e-9);
        let lo = self.rounds.iter().map(ratio).fold(f64::INFINITY, f64::min);
        let hi = self.rounds.iter().map(ratio).fold(0.0, f64::max);
        let eng = self.median_of(|r| r.engine.mb_per_s);
        let of_healthy = healthy
            .map(|h| format!("{:.2}", eng / h.median_of(|r| r.engine.mb_per_s).max(1e-9)))
            .unwrap_or_default();
        println!(
            "{:<16} {:<15} {:>8.0} {:>8.0} {:>8.0} {:>5.2} {:>9} {:>8.0} {:>8.0} {:>5.2} {:>7}",
            array,
            test,
            eng,
            self.median_of(|r| r.fio.mb_per_s),
            self.median_of(|r| r.fio.fio_own_mb_per_s),
            self.median_of(ratio),
            format!("{lo:.2}-{hi:.2}"),
            self.median_of(|r| r.engine.mb_per_cpu_s),
            self.median_of(|r| r.raw.mb_per_cpu_s),
            self.median_of(|r| r.engine.mb_per_cpu_s / r.raw.mb_per_cpu_s.max(1e-9)),
            of_healthy
        );
    }
}

struct Bench {
    dir: PathBuf,
    member_bytes: u64,
    /// Engine threads; `None`: one per member, as fio runs one job per member.
    threads: Option<usize>,
    rounds: usize,
    seconds: f64,
}

/// The three runs of a round, in an order that rotates with the round number.
fn round_of(
    round: usize,
    engine: &mut dyn FnMut() -> Figure,
    fio: &mut dyn FnMut() -> Figure,
    raw: &mut dyn FnMut() -> Figure,
) -> Round {
    let mut out = [Figure::default(); 3];
    for k in 0..3 {
        let which = (round + k) % 3;
        out[which] = match which {
            0 => engine(),
            1 => fio(),
            _ => raw(),
        };
    }
    Round {
        engine: out[0],
        fio: out[1],
        raw: out[2],
    }
}

impl Bench {
    fn dur(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }

    fn run_level(&self, level: i32, n: usize, chunk_kib: u32) {
        reset_peak_rss();
        let files = make_files(&self.dir, n, self.member_bytes);
        let disks: Vec<Box<dyn Disk>> = files
            .iter()
            .map(|p| Box::new(FileDisk::open(p, OpenOptions::default()).unwrap()) as Box<dyn Disk>)
            .collect();
        let array = Array::create(
            disks,
            CreateOptions {
                level,
                layout: None,
                chunk_sectors: chunk_kib * 2,
                raid_devices: n,
                metadata: SuperblockVersion::V1_2,
                size_sectors: None,
                name: "bench".into(),
                set_uuid: [7; 16],
                device_uuids: (0..n).map(|i| [i as u8; 16]).collect(),
                ctime_seconds: 0,
                // the files were written with zeroes
                init: raidkit_engine::Init::Zeroed,
                consistency: raidkit_engine::ConsistencyPolicy::Resync,
                config: EngineConfig::default(),
            },
        )
        .unwrap();
        let parity = match level {
            5 => 1,
            6 => 2,
            _ => 0,
        };
        let share = (n - parity) as f64 / n as f64;
        // RAID 5 read-modify-write costs 2 reads + 2 writes per 4 KiB write; RAID 6 (on 6
        // members, one chunk: reconstruct-write) 3 reads + 3 writes: member I/Os per write.
        let per_write = 1.0 / (2.0 * (1.0 + parity as f64));
        let (mb, secs, threads) = (self.member_bytes, self.seconds, self.threads.unwrap_or(n));
        let fio_seq = |rw: &str| {
            let args = ["--bs=1M", &format!("--rw={rw}")];
            fio(&files, &args, mb, secs, FioWindow::AllRunning).scaled(share)
        };
        let fio_rand = || {
            let args = ["--bs=4k", "--rw=randrw", "--rwmixread=50"];
            fio(&files, &args, mb, secs, FioWindow::Reported).scaled(per_write)
        };
        let raw = |p: RawPattern, k: f64| {
            measured(|| files_for(&files, p, self.dur()).unwrap()).scaled(k)
        };
        let eng_seq =
            |dir| measured(|| sequential_for(&array, dir, 1 << 20, threads, self.dur()).unwrap());
        let (mut w, mut r, mut rmw) = (Row::default(), Row::default(), Row::default());
        for round in 0..=self.rounds {
            let rw = [
                round_of(
                    round,
                    &mut || eng_seq(Direction::Write),
                    &mut || fio_seq("write"),
                    &mut || raw(RawPattern::SeqWrite, share),
                ),
                round_of(
                    round,
                    &mut || eng_seq(Direction::Read),
                    &mut || fio_seq("read"),
                    &mut || raw(RawPattern::SeqRead, share),
                ),
            ];
            let rand = (parity > 0).then(|| {
                round_of(
                    round,
                    &mut || {
                        measured(|| {
                            random_writes_for(&array, 4096, threads, self.dur(), round as u64)
                                .unwrap()
                        })
                    },
                    &mut || fio_rand(),
                    &mut || raw(RawPattern::RandReadWrite4k, per_write),
                )
            });
            if round > 0 {
                w.rounds.push(rw[0]);
                r.rounds.push(rw[1]);
                rmw.rounds.extend(rand);
            }
        }
        let name = format!("RAID {level} n={n} {chunk_kib}K");
        w.print(&name, "seq write", None);
        r.print(&name, "seq read", None);
        if parity > 0 {
            rmw.print(&name, "4K rand write", None);
            // Fail the second member and, for RAID 6, the last one too (as `raidkit demo`).
            let failed: Vec<usize> = if parity == 2 { vec![1, n - 1] } else { vec![1] };
            for &m in &failed {
                array.fail_member(m).unwrap();
            }
            let (mut dr, mut dw) = (Row::default(), Row::default());
            for round in 0..=self.rounds {
                let rr = round_of(
                    round,
                    &mut || eng_seq(Direction::Read),
                    &mut || fio_seq("read"),
                    &mut || raw(RawPattern::SeqRead, share),
                );
                let ww = round_of(
                    round,
                    &mut || eng_seq(Direction::Write),
                    &mut || fio_seq("write"),
                    &mut || raw(RawPattern::SeqWrite, share),
                );
                if round > 0 {
                    dr.rounds.push(rr);
                    dw.rounds.push(ww);
                }
            }
            let what = format!("{} failed", failed.len());
            dr.print(&name, &format!("read, {what}"), Some(&r));
            dw.print(&name, &format!("write, {what}"), Some(&w));
        }
        array.stop().unwrap();
        drop(array);
        for f in &files {
            let _ = std::fs::remove_file(f);
        }
        println!("{:<16} peak RSS {} MiB", name, peak_rss_kib() / 1024);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: f64| -> f64 {
        args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
    };
    let bench = Bench {
        dir: PathBuf::from(format!("/dev/shm/raidkit-seqbench-{}", std::process::id())),
        member_bytes: (arg(1, 256.0) as u64) << 20,
        threads: args.get(2).and_then(|s| s.parse().ok()),
        rounds: (arg(3, 5.0) as usize).max(1),
        seconds: arg(4, 1.0).max(0.1),
    };
    std::fs::create_dir_all(&bench.dir).unwrap();
    println!(
        "seqbench: members of {} MiB in /dev/shm, engine threads: {}, {} rounds of {} s after one warm-up, parity kernel {}, {} CPUs",
        bench.member_bytes >> 20,
        bench
            .threads
            .map_or("one per member".to_string(), |t| t.to_string()),
        bench.rounds,
        bench.seconds,
        raidkit_parity::selected_kernel().name(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<16} {:<15} {:>8} {:>8} {:>8} {:>5} {:>9} {:>8} {:>8} {:>5} {:>7}",
        "array",
        "test",
        "eng MB/s",
        "fio MB/s",
        "fio own",
        "ratio",
        "spread",
        "eng/cpus",
        "raw/cpus",
        "cpu r",
        "healthy"
    );
    for (level, n, chunk_kib) in [(0, 4usize, 512u32), (5, 5, 256), (6, 6, 256)] {
        bench.run_level(level, n, chunk_kib);
    }
    let _ = std::fs::remove_dir_all(&bench.dir);
    println!("fio MB/s: fio aggregate over all member files at once x data share (1 RAID 0, (n-1)/n RAID 5, (n-2)/n RAID 6); 4K random writes: fio 4K randrw 50/50 MB/s / member I/Os per write (4 RAID 5, 6 RAID 6)");
    println!("fio own: what fio itself reports for the same runs (bytes over one job's runtime, though its jobs start one after another); sequential fio MB/s counts only the span in which every job ran, from per-I/O logs");
    println!("ratio: median over rounds of engine / fio MB/s of the same round; spread: lowest-highest of those");
    println!("eng/cpus, raw/cpus: MB per CPU second of the engine and of fio's pattern run in process (scaled as fio MB/s); cpu r: median of their per-round ratios");
    println!("healthy: engine MB/s degraded / healthy (medians)");
}
