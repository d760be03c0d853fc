//! One engine workload on member files in /dev/shm for a fixed time, without fio: the thing
//! to run under `perf record` or `strace -c` when seqbench shows a shortfall.
//!
//! Run: `cargo run --release -p raidkit-engine --example dataprobe -- LEVEL MEMBERS CHUNK_KIB
//! TEST [seconds] [threads] [failed] [map]` with TEST one of `write`, `read`, `rand4k` (through
//! the engine) or `raw-write`, `raw-read` (one thread per member file, no engine); `failed`
//! members (the second, then the last) are failed before the measured run; `map` opens the
//! members mapped into memory, as `raidkit serve` does (`OpenOptions::map_memory`: the member
//! files are written in full, so they qualify). Prints MB/s and MB per CPU second.

use raidkit_disk::{Disk, FileDisk, OpenOptions};
use raidkit_engine::bench::{
    cpu_seconds, files_for, random_writes_for, sequential_for, Direction, RawPattern,
};
use raidkit_engine::{Array, CreateOptions, EngineConfig};
use raidkit_metadata::SuperblockVersion;
use std::io::Write;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "dataprobe LEVEL MEMBERS CHUNK_KIB write|read|rand4k|raw-write|raw-read [seconds] [threads] [failed] [map]";
    let num = |i: usize, d: f64| -> f64 { args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d) };
    let (Some(level), Some(n), Some(chunk_kib), Some(test)) = (
        args.get(1).and_then(|s| s.parse::<i32>().ok()),
        args.get(2).and_then(|s| s.parse::<usize>().ok()),
        args.get(3).and_then(|s| s.parse::<u32>().ok()),
        args.get(4),
    ) else {
        eprintln!("usage: {usage}");
        std::process::exit(2);
    };
    let seconds = num(5, 3.0);
    let threads = num(6, 4.0) as usize;
    let failed = num(7, 0.0) as usize;
    let map_memory = args.get(8).is_some_and(|a| a == "map");
    let member_bytes: u64 = 256 << 20;
    let dir = std::path::PathBuf::from(format!("/dev/shm/raidkit-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let zeros = vec![0u8; 1 << 20];
    let files: Vec<_> = (0..n)
        .map(|i| {
            let p = dir.join(format!("m{i}.img"));
            let mut f = std::fs::File::create(&p).unwrap();
            for _ in 0..member_bytes >> 20 {
                f.write_all(&zeros).unwrap();
            }
            p
        })
        .collect();
    let disks: Vec<Box<dyn Disk>> = files
        .iter()
        .map(|p| {
            let d = FileDisk::open(
                p,
                OpenOptions {
                    map_memory,
                    ..Default::default()
                },
            )
            .unwrap();
            assert_eq!(d.is_mapped(), map_memory, "{}: mapped?", p.display());
            Box::new(d) as Box<dyn Disk>
        })
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
            name: "probe".into(),
            set_uuid: [7; 16],
            device_uuids: (0..n).map(|i| [i as u8; 16]).collect(),
            ctime_seconds: 0,
            init: raidkit_engine::Init::Zeroed,
            consistency: raidkit_engine::ConsistencyPolicy::Resync,
            config: EngineConfig::default(),
        },
    )
    .unwrap();
    let victims = [1, n - 1];
    for &m in victims.iter().take(failed) {
        array.fail_member(m).unwrap();
    }
    let d = Duration::from_secs_f64(seconds);
    let cpu0 = cpu_seconds();
    let t = match test.as_str() {
        "write" => sequential_for(&array, Direction::Write, 1 << 20, threads, d),
        "read" => sequential_for(&array, Direction::Read, 1 << 20, threads, d),
        "rand4k" => random_writes_for(&array, 4096, threads, d, 1),
        // What the member files give without the engine: one thread per file.
        "raw-write" => Ok(files_for(&files, RawPattern::SeqWrite, d).unwrap()),
        "raw-read" => Ok(files_for(&files, RawPattern::SeqRead, d).unwrap()),
        _ => {
            eprintln!("usage: {usage}");
            std::process::exit(2);
        }
    }
    .unwrap();
    let cpu = cpu_seconds() - cpu0;
    println!(
        "{test}: {:.0} MB/s, {:.0} MB per CPU second",
        t.mb_per_s(),
        t.bytes as f64 / 1e6 / cpu.max(1e-9)
    );
    drop(array);
    let _ = std::fs::remove_dir_all(&dir);
}
