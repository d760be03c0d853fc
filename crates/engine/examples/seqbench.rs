//! Sequential 1 MiB writes then reads through the engine, against what `fio` (psync, one job
//! per file, all files at once) gets from the same member files in /dev/shm.
//!
//! Run: `cargo run --release -p raidkit-engine --example seqbench [member_MiB] [inflight]`
//! Needs fio on the PATH (apt-get install -y fio). Prints one table (best of 3 interleaved runs each); nothing is asserted.

use raidkit_disk::{Disk, FileDisk, OpenOptions};
use raidkit_engine::bench::{sequential, Direction};
use raidkit_engine::{Array, CreateOptions, EngineConfig};
use raidkit_metadata::SuperblockVersion;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fio_aggregate(files: &[PathBuf], rw: &str, size_bytes: u64) -> f64 {
    let mut cmd = Command::new("fio");
    cmd.args([
        "--output-format=json",
        "--ioengine=psync",
        "--bs=1M",
        "--invalidate=0",
    ]);
    cmd.arg(format!("--rw={rw}"));
    cmd.arg(format!("--size={size_bytes}"));
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
    let section = if rw.contains("read") { "read" } else { "write" };
    let total: f64 = v["jobs"]
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .map(|j| j[section]["bw_bytes"].as_f64().unwrap_or(0.0))
                .sum()
        })
        .unwrap_or(0.0);
    total / 1e6
}

const REPEAT: usize = 3;

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

fn make_files(dir: &Path, n: usize, bytes: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("m{i}.img"));
            let _ = std::fs::remove_file(&p);
            drop(FileDisk::create(&p, bytes).expect("create member"));
            p
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let member_mib: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(256);
    let inflight: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
    let dir = PathBuf::from(format!("/dev/shm/raidkit-seqbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let member_bytes = member_mib << 20;
    println!("seqbench: members of {member_mib} MiB in /dev/shm, 1 MiB requests, {inflight} in flight, parity kernel {}", raidkit_parity::selected_kernel().name());
    println!(
        "{:<28} {:>10} {:>10} {:>12} {:>12} {:>8} {:>8}",
        "array", "eng W MB/s", "eng R MB/s", "fio W aggr", "fio R aggr", "W ratio", "R ratio"
    );
    for (level, n, chunk_kib) in [(0, 4usize, 512u32), (5, 5, 256), (6, 6, 256)] {
        let files = make_files(&dir, n, member_bytes);
        // fio twice over the whole files: the first pass allocates the tmpfs pages, the
        // second measures overwrite, the state the engine runs in afterwards.
        let _ = fio_aggregate(&files, "write", member_bytes);
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
                // the benchmark overwrites whole stripes, which makes parity consistent; no
                // need to zero first
                members_zeroed: true,
                config: EngineConfig {
                    stripe_cache_bytes: 64 << 20,
                    max_inflight: inflight.max(1) * 2,
                },
            },
        )
        .unwrap();
        let total = array.size_bytes();
        // The machine is shared: interleave fio and engine runs and keep the best of each.
        let (mut fio_w, mut fio_r, mut w, mut r) = (0f64, 0f64, 0f64, 0f64);
        for _ in 0..REPEAT {
            fio_w = fio_w.max(fio_aggregate(&files, "write", member_bytes));
            w = w.max(
                sequential(&array, Direction::Write, 1 << 20, inflight, total)
                    .unwrap()
                    .mb_per_s(),
            );
            fio_r = fio_r.max(fio_aggregate(&files, "read", member_bytes));
            r = r.max(
                sequential(&array, Direction::Read, 1 << 20, inflight, total)
                    .unwrap()
                    .mb_per_s(),
            );
        }
        array.stop().unwrap();
        drop(array);
        let data_share = match level {
            0 => 1.0,
            5 => (n - 1) as f64 / n as f64,
            _ => (n - 2) as f64 / n as f64,
        };
        let name = format!("RAID {level} n={n} chunk {chunk_kib}K");
        println!(
            "{:<28} {:>10.0} {:>10.0} {:>12.0} {:>12.0} {:>8.2} {:>8.2}",
            name,
            w,
            r,
            fio_w,
            fio_r,
            w / (fio_w * data_share),
            r / (fio_r * data_share)
        );
        for f in &files {
            let _ = std::fs::remove_file(f);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("ratios: engine MB/s (array data) / (fio aggregate MB/s x data share: 1 for RAID 0, (n-1)/n for RAID 5, (n-2)/n for RAID 6)");
    println!("peak RSS: {} MiB", peak_rss_kib() / 1024);
}
