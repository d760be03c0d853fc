//! Rebuild speed against what one member gives a plain sequential read, and what a rebuild
//! costs foreground I/O.
//!
//! On member files (in /dev/shm for speed tests) the benchmark creates an array, fills it, and
//! per run: reads one member file sequentially in 1 MiB requests (what `dd bs=1M` does), fails
//! a member, adds a spare (the failed member's own file, already allocated, so the figure is
//! the rebuild's and not the file system's page allocation) and rebuilds it at full speed.
//! Runs alternate which side goes first; figures are medians. Then foreground sequential reads
//! through the array are timed alone and while a rebuild runs with the default adaptive rate.
//! Returns figures; prints nothing.

use raidkit_disk::{Disk, FileDisk, OpenOptions};
use raidkit_engine::bench::cpu_seconds;
use raidkit_engine::{
    Array, AssembleOptions, CreateOptions, EngineConfig, TaskKind, TaskOutcome, TaskRates,
};
use raidkit_metadata::SuperblockVersion;
use serde::Serialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct RebuildBenchConfig {
    pub dir: PathBuf,
    pub member_bytes: u64,
    pub level: i32,
    pub layout: Option<u32>,
    pub raid_devices: usize,
    pub chunk_sectors: u32,
    /// Timed runs (a warm-up run comes first and is discarded).
    pub runs: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct RebuildRun {
    pub member_read_mb_s: f64,
    pub rebuild_mb_s: f64,
    pub ratio: f64,
    /// CPUs the process kept busy while the rebuild ran (CPU seconds / wall seconds).
    pub rebuild_cpus: f64,
    /// One member's worth written into an allocated file of the same folder by one thread per
    /// CPU, nothing read: what any rebuild must at least do.
    pub member_write_mb_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RebuildBenchReport {
    pub level: i32,
    pub layout: u32,
    pub raid_devices: usize,
    pub chunk_kib: u64,
    pub member_mib: u64,
    pub parity_kernel: &'static str,
    pub runs: Vec<RebuildRun>,
    /// Medians over the runs.
    pub member_read_mb_s: f64,
    pub rebuild_mb_s: f64,
    /// Median of the per-run ratios rebuild / member read.
    pub ratio: f64,
    /// Median of the per-run ratios member write (all CPUs) / member read: the most any
    /// rebuild here can reach, since it must write the member.
    pub write_ceiling_ratio: f64,
    /// A check (md's "check") at full rate over the healthy array, MB/s per member, and the
    /// CPUs it kept busy.
    pub check_mb_s: f64,
    pub check_cpus: f64,
    /// Foreground sequential reads (1 MiB, 4 threads) with no background work.
    pub foreground_alone_mb_s: f64,
    /// The same with one member missing and no rebuild running (reads of the missing member
    /// are computed from the others).
    pub foreground_degraded_mb_s: f64,
    /// The same while a rebuild runs at the default rates (adaptive: 30 % while busy).
    pub foreground_during_rebuild_mb_s: f64,
    /// During the rebuild / healthy alone.
    pub foreground_fraction: f64,
    /// During the rebuild / degraded alone: what the rebuild itself costs the reads.
    pub foreground_fraction_of_degraded: f64,
    /// The rebuild's own rate while the foreground load runs.
    pub rebuild_under_load_mb_s: f64,
    pub peak_rss_mib: f64,
}

/// Puts every thread of this process (and the threads they start) under the normal
/// scheduling policy, whatever `chrt` started it with.
fn leave_real_time() {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    let param = libc::sched_param { sched_priority: 0 };
    for t in tasks.flatten() {
        if let Some(tid) = t
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        {
            // SAFETY: a valid sched_param on the stack; a thread id of this process.
            unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) };
        }
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn member_paths(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| dir.join(format!("rebuild-bench-{i}.img")))
        .collect()
}

fn open_all(paths: &[PathBuf]) -> Result<Vec<Box<dyn Disk>>, String> {
    paths
        .iter()
        .map(|p| {
            FileDisk::open(p, OpenOptions::default())
                .map(|d| Box::new(d) as Box<dyn Disk>)
                .map_err(err)
        })
        .collect()
}

/// What `dd if=FILE of=/dev/null bs=1M` measures.
fn read_file_mb_s(path: &Path) -> Result<f64, String> {
    let mut f = std::fs::File::open(path).map_err(err)?;
    let mut buf = vec![0u8; 1 << 20];
    let t = Instant::now();
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(err)?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    Ok(total as f64 / 1e6 / t.elapsed().as_secs_f64().max(1e-9))
}

/// Overwrites all of `path` (allocated) in 1 MiB writes from one thread per CPU; MB/s.
fn write_file_mb_s(path: &Path) -> Result<f64, String> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(err)?;
    let size = f.metadata().map_err(err)?.len();
    let req = 1u64 << 20;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let t = Instant::now();
    std::thread::scope(|s| -> Result<(), String> {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let f = &f;
                s.spawn(move || -> Result<(), String> {
                    let buf = vec![0x6bu8; req as usize];
                    let mut off = k * req;
                    while off < size {
                        let n = (size - off).min(req) as usize;
                        f.write_all_at(&buf[..n], off).map_err(err)?;
                        off += threads * req;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "writer panicked".to_string())??;
        }
        Ok(())
    })?;
    Ok(size as f64 / 1e6 / t.elapsed().as_secs_f64().max(1e-9))
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .and_then(|kib| kib.parse::<f64>().ok())
        .map(|kib| kib / 1024.0)
        .unwrap_or(0.0)
}

/// Fails slot `victim`'s member, detaches it and adds its file back as a fresh spare; the
/// rebuild is then pending.
fn replace_with_itself(array: &Array, paths: &[PathBuf], victim: usize) -> Result<(), String> {
    let path = fail_and_remove(array, paths, victim)?;
    add_back(array, &path, victim)
}

/// Fails slot `victim`'s member and detaches it (the array runs degraded); returns its file.
fn fail_and_remove(array: &Array, paths: &[PathBuf], victim: usize) -> Result<PathBuf, String> {
    let st = array.status();
    let m = st
        .members
        .iter()
        .find(|m| m.slot == Some(victim))
        .ok_or_else(|| format!("no member in slot {victim}"))?;
    let index = m.index;
    let name = m.name.clone();
    array.fail_member(index).map_err(err)?;
    array.remove_member(index).map_err(err)?;
    paths
        .iter()
        .find(|p| p.display().to_string() == name)
        .cloned()
        .ok_or_else(|| format!("{name}: not one of the benchmark's files"))
}

/// Adds `path` back as a fresh spare for slot `victim`; the rebuild is then pending.
fn add_back(array: &Array, path: &Path, victim: usize) -> Result<(), String> {
    let disk = FileDisk::open(path, OpenOptions::default()).map_err(err)?;
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&(victim as u64 + 1).to_le_bytes());
    uuid[8..].copy_from_slice(&(Instant::now().elapsed().as_nanos() as u64 ^ 0x5a5a).to_le_bytes());
    array.add_spare(Box::new(disk), uuid).map_err(err)?;
    Ok(())
}

/// Rebuilds at full speed; returns MB/s and the CPUs kept busy meanwhile.
fn timed_rebuild(array: &Array) -> Result<(f64, f64), String> {
    let (cpu0, t) = (cpu_seconds(), Instant::now());
    let mb_s = rebuild(array)?;
    let cpus = (cpu_seconds() - cpu0) / t.elapsed().as_secs_f64().max(1e-9);
    Ok((mb_s, cpus))
}

fn rebuild(array: &Array) -> Result<f64, String> {
    let r = array
        .run_task(TaskKind::Rebuild, &mut |_| {}, &AtomicBool::new(false))
        .map_err(err)?;
    if r.outcome != TaskOutcome::Completed {
        return Err(format!("rebuild ended: {:?}", r.outcome));
    }
    Ok(r.progress.bytes_per_s / 1e6)
}

/// Foreground: `threads` readers stream 1 MiB requests over their part of the array until
/// `until` says stop; returns MB/s.
fn foreground_reads(array: &Array, threads: usize, until: &dyn Fn() -> bool) -> f64 {
    let size = array.size_bytes();
    let req = 1u64 << 20;
    let per = size / threads as u64 / req * req;
    let stop = AtomicBool::new(false);
    let bytes = std::sync::atomic::AtomicU64::new(0);
    let t = Instant::now();
    std::thread::scope(|s| {
        for k in 0..threads {
            let (stop, bytes) = (&stop, &bytes);
            s.spawn(move || {
                let mut buf = vec![0u8; req as usize];
                let mut off = 0;
                while !stop.load(Ordering::Relaxed) {
                    if array.read_at(&mut buf, k as u64 * per + off).is_err() {
                        break;
                    }
                    bytes.fetch_add(req, Ordering::Relaxed);
                    off = (off + req) % per.max(req);
                }
            });
        }
        while !until() {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
    });
    bytes.load(Ordering::Relaxed) as f64 / 1e6 / t.elapsed().as_secs_f64()
}

pub fn run_rebuild_bench(
    cfg: &RebuildBenchConfig,
    mut on_run: impl FnMut(&RebuildRun),
) -> Result<RebuildBenchReport, String> {
    std::fs::create_dir_all(&cfg.dir).map_err(|e| format!("{}: {e}", cfg.dir.display()))?;
    let n = cfg.raid_devices;
    let paths = member_paths(&cfg.dir, n);
    // Allocate every member's pages up front (a real member is a device that exists), and
    // those of the file the write ceiling is measured on.
    let scratch = cfg.dir.join("rebuild-bench-scratch.img");
    let zeros = vec![0u8; 1 << 20];
    for p in paths.iter().chain([&scratch]) {
        let d = FileDisk::create(p, cfg.member_bytes).map_err(err)?;
        let mut off = 0;
        while off < cfg.member_bytes {
            let len = (cfg.member_bytes - off).min(zeros.len() as u64) as usize;
            d.write_at(&zeros[..len], off).map_err(err)?;
            off += len as u64;
        }
    }
    let result = (|| {
        let array = Array::create(
            open_all(&paths)?,
            CreateOptions {
                level: cfg.level,
                layout: cfg.layout,
                chunk_sectors: cfg.chunk_sectors,
                raid_devices: n,
                metadata: SuperblockVersion::V1_2,
                size_sectors: None,
                name: "rebuild-bench".into(),
                set_uuid: [0x42; 16],
                device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
                ctime_seconds: 1_700_000_000,
                init: raidkit_engine::Init::Zeroed,
                consistency: raidkit_engine::ConsistencyPolicy::Resync,
                config: EngineConfig::default(),
            },
        )
        .map_err(err)?;
        // Fill with data (full-stripe writes).
        raidkit_engine::bench::sequential(
            &array,
            raidkit_engine::bench::Direction::Write,
            1 << 20,
            4,
            array.size_bytes(),
        )
        .map_err(err)?;
        array.stop().map_err(err)?;
        drop(array);
        let (array, _) =
            Array::assemble(open_all(&paths)?, AssembleOptions::default()).map_err(err)?;
        array.set_task_rates(TaskRates::full());
        let mut runs = Vec::new();
        for run in 0..=cfg.runs {
            let victim = run % n;
            let read_path = &paths[(victim + 1) % n];
            replace_with_itself(&array, &paths, victim)?;
            let (read, (rebuilt, cpus)) = if run % 2 == 0 {
                let r = read_file_mb_s(read_path)?;
                (r, timed_rebuild(&array)?)
            } else {
                let b = timed_rebuild(&array)?;
                (read_file_mb_s(read_path)?, b)
            };
            let write = write_file_mb_s(&scratch)?;
            if run == 0 {
                continue; // warm-up
            }
            let row = RebuildRun {
                member_read_mb_s: read,
                rebuild_mb_s: rebuilt,
                ratio: rebuilt / read,
                rebuild_cpus: cpus,
                member_write_mb_s: write,
            };
            on_run(&row);
            runs.push(row);
        }
        // A check at full rate over the healthy array (reads every member, compares parity
        // or copies).
        let (cpu0, t) = (cpu_seconds(), Instant::now());
        let r = array
            .run_task(TaskKind::Check, &mut |_| {}, &AtomicBool::new(false))
            .map_err(err)?;
        let check_cpus = (cpu_seconds() - cpu0) / t.elapsed().as_secs_f64().max(1e-9);
        if r.outcome != TaskOutcome::Completed || r.progress.mismatch_sectors != 0 {
            return Err(format!(
                "check: {:?}, {} mismatched sectors",
                r.outcome, r.progress.mismatch_sectors
            ));
        }
        let check_mb_s = r.progress.bytes_per_s / 1e6;
        // Foreground reads alone, then during a rebuild at the default (adaptive) rates, under
        // the normal scheduler: run under real-time round robin (`chrt -r`, for steadier
        // figures above), a rebuild thread that paces itself by sleeping waits behind every
        // busy foreground thread's 100 ms time slice after each sleep, and crawls at a few
        // MB/s for a reason no real deployment has.
        leave_real_time();
        array.set_task_rates(TaskRates::default());
        let alone_for = Duration::from_secs(2);
        let t = Instant::now();
        let alone = foreground_reads(&array, 4, &|| t.elapsed() >= alone_for);
        // Degraded, no rebuild yet: what the missing member alone costs the reads.
        let victim = fail_and_remove(&array, &paths, 0)?;
        let t = Instant::now();
        let degraded = foreground_reads(&array, 4, &|| t.elapsed() >= alone_for);
        add_back(&array, &victim, 0)?;
        let done = AtomicBool::new(false);
        let mut under_load = 0.0;
        let during = std::thread::scope(|s| -> Result<f64, String> {
            let h = s.spawn(|| {
                let r = rebuild(&array);
                done.store(true, Ordering::Relaxed);
                r
            });
            let fg = foreground_reads(&array, 4, &|| done.load(Ordering::Relaxed));
            under_load = h
                .join()
                .map_err(|_| "rebuild thread panicked".to_string())??;
            Ok(fg)
        })?;
        array.stop().map_err(err)?;
        let st = array.status();
        Ok(RebuildBenchReport {
            level: cfg.level,
            layout: st.layout,
            raid_devices: n,
            chunk_kib: st.chunk_sectors / 2,
            member_mib: cfg.member_bytes >> 20,
            parity_kernel: raidkit_parity::selected_kernel().name(),
            member_read_mb_s: median(runs.iter().map(|r| r.member_read_mb_s).collect()),
            rebuild_mb_s: median(runs.iter().map(|r| r.rebuild_mb_s).collect()),
            ratio: median(runs.iter().map(|r| r.ratio).collect()),
            write_ceiling_ratio: median(
                runs.iter()
                    .map(|r| r.member_write_mb_s / r.member_read_mb_s)
                    .collect(),
            ),
            runs,
            check_mb_s,
            check_cpus,
            foreground_alone_mb_s: alone,
            foreground_degraded_mb_s: degraded,
            foreground_during_rebuild_mb_s: during,
            foreground_fraction: during / alone.max(1e-9),
            foreground_fraction_of_degraded: during / degraded.max(1e-9),
            rebuild_under_load_mb_s: under_load,
            peak_rss_mib: peak_rss_mib(),
        })
    })();
    for p in paths.iter().chain([&scratch]) {
        let _ = std::fs::remove_file(p);
    }
    result
}
