//! What closing the write hole costs: RAID 5 over 4 file members (in /dev/shm by default),
//! created with the resync policy, with md's partial parity log and with md's write journal
//! (on a fifth file), and RAID 6 over 5 members with resync and with the journal, timed on
//! the same workloads side by side: 4 KiB random writes, 1 MiB sequential writes (a 1 MiB
//! write is a partial stripe of the 1.5 MiB stripe) and 6 MiB sequential writes (four full
//! stripes each). Prints the median of interleaved runs and each policy's ratio to resync.
//!
//! `cargo run --release -p raidkit-engine --example pplbench [DIR] [RUNS] [SETUPS]` (SETUPS:
//! comma-separated tags, e.g. `r6-resync,r6-journal`; default all)

use raidkit_disk::{Disk, FileDisk};
use raidkit_engine::{Array, ConsistencyPolicy, CreateOptions, EngineConfig};
use raidkit_metadata::SuperblockVersion;
use std::path::{Path, PathBuf};
use std::time::Instant;

const MEMBER_BYTES: u64 = 160 << 20;

const JOURNAL_BYTES: u64 = 64 << 20;

fn path(dir: &Path, tag: &str, i: usize) -> PathBuf {
    dir.join(format!("pplbench-{tag}-{i}.img"))
}

fn make(dir: &Path, tag: &str, level: i32, members: usize, policy: ConsistencyPolicy) -> Array {
    let mut disks: Vec<Box<dyn Disk>> = (0..members)
        .map(|i| {
            let p = path(dir, tag, i);
            let _ = std::fs::remove_file(&p);
            Box::new(FileDisk::create(&p, MEMBER_BYTES).unwrap()) as Box<dyn Disk>
        })
        .collect();
    if policy == ConsistencyPolicy::Journal {
        let p = path(dir, tag, members);
        let _ = std::fs::remove_file(&p);
        disks.push(Box::new(FileDisk::create(&p, JOURNAL_BYTES).unwrap()));
    }
    let n = disks.len();
    Array::create_with_policy(
        disks,
        CreateOptions {
            level,
            layout: None,
            chunk_sectors: 1024,
            raid_devices: members,
            metadata: SuperblockVersion::V1_2,
            size_sectors: None,
            name: "bench".into(),
            set_uuid: [tag.len() as u8; 16],
            device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
            ctime_seconds: 0,
            init: raidkit_engine::Init::Zeroed,
            consistency: raidkit_engine::ConsistencyPolicy::Auto,
            config: EngineConfig::default(),
        },
        policy,
    )
    .unwrap()
}

fn random_4k(array: &Array, ops: usize, seed: u64) -> f64 {
    let blocks = array.size_bytes() / 4096;
    let buf = vec![0x5au8; 4096];
    let mut x = seed | 1;
    let t = Instant::now();
    for _ in 0..ops {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        array.write_at(&buf, (x % blocks) * 4096, false).unwrap();
    }
    ops as f64 / t.elapsed().as_secs_f64()
}

fn sequential(array: &Array, bytes: u64, request: usize) -> f64 {
    let buf = vec![0xa5u8; request];
    let t = Instant::now();
    let mut at = 0;
    while at + buf.len() as u64 <= bytes.min(array.size_bytes()) {
        array.write_at(&buf, at, false).unwrap();
        at += buf.len() as u64;
    }
    array.flush().unwrap();
    at as f64 / t.elapsed().as_secs_f64() / (1 << 20) as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "/dev/shm".into()));
    let runs: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let setups: [(&str, i32, usize, ConsistencyPolicy); 5] = [
        ("r5-resync", 5, 4, ConsistencyPolicy::Resync),
        ("r5-ppl", 5, 4, ConsistencyPolicy::Ppl),
        ("r5-journal", 5, 4, ConsistencyPolicy::Journal),
        ("r6-resync", 6, 5, ConsistencyPolicy::Resync),
        ("r6-journal", 6, 5, ConsistencyPolicy::Journal),
    ];
    let only: Option<Vec<String>> = args
        .next()
        .map(|s| s.split(',').map(str::to_string).collect());
    let setups: Vec<_> = setups
        .into_iter()
        .filter(|(tag, ..)| only.as_ref().is_none_or(|o| o.iter().any(|t| t == tag)))
        .collect();
    let arrays: Vec<Array> = setups
        .iter()
        .map(|&(tag, level, n, policy)| make(&dir, tag, level, n, policy))
        .collect();
    let mut random: Vec<Vec<f64>> = vec![Vec::new(); arrays.len()];
    let mut seq: Vec<Vec<f64>> = vec![Vec::new(); arrays.len()];
    let mut full: Vec<Vec<f64>> = vec![Vec::new(); arrays.len()];
    for run in 0..runs {
        // Interleaved, so load from other work on the machine hits all alike.
        for (i, a) in arrays.iter().enumerate() {
            random[i].push(random_4k(a, 3000, run as u64 + 1));
            seq[i].push(sequential(a, 256 << 20, 1 << 20));
            full[i].push(sequential(a, 288 << 20, 6 << 20));
        }
    }
    println!(
        "members of {} MiB in {}, chunk 512 KiB, journal {} MiB, median of {runs} interleaved runs",
        MEMBER_BYTES >> 20,
        dir.display(),
        JOURNAL_BYTES >> 20
    );
    println!(
        "setup        4 KiB random writes       1 MiB sequential writes   6 MiB (full-stripe) writes"
    );
    let mut base = (f64::NAN, f64::NAN, f64::NAN);
    for (i, &(tag, _, _, policy)) in setups.iter().enumerate() {
        let (r, s, f) = (
            median(random[i].clone()),
            median(seq[i].clone()),
            median(full[i].clone()),
        );
        if policy == ConsistencyPolicy::Resync {
            base = (r, s, f);
        }
        println!(
            "{tag:<11} {r:>9.0} IOPS ({:.2}x)   {s:>9.1} MiB/s ({:.2}x)   {f:>9.1} MiB/s ({:.2}x)",
            r / base.0,
            s / base.1,
            f / base.2
        );
    }
    for (a, &(tag, _, n, _)) in arrays.iter().zip(&setups) {
        a.stop().unwrap();
        for i in 0..=n {
            let _ = std::fs::remove_file(path(&dir, tag, i));
        }
    }
}
