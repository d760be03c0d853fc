//! What the partial parity log costs: RAID 5 over 4 file members (in /dev/shm by default),
//! created once with md's partial parity log and once with the resync policy, timed on the
//! same workloads side by side: 4 KiB random writes and 1 MiB sequential writes. Prints the
//! median of interleaved runs and the ratio.
//!
//! `cargo run --release -p raidkit-engine --example pplbench [DIR] [RUNS]`

use raidkit_disk::{Disk, FileDisk};
use raidkit_engine::{Array, ConsistencyPolicy, CreateOptions, EngineConfig};
use raidkit_metadata::SuperblockVersion;
use std::path::{Path, PathBuf};
use std::time::Instant;

const MEMBER_BYTES: u64 = 160 << 20;
const MEMBERS: usize = 4;

fn make(dir: &Path, tag: &str, policy: ConsistencyPolicy) -> Array {
    let disks: Vec<Box<dyn Disk>> = (0..MEMBERS)
        .map(|i| {
            let p = dir.join(format!("pplbench-{tag}-{i}.img"));
            let _ = std::fs::remove_file(&p);
            Box::new(FileDisk::create(&p, MEMBER_BYTES).unwrap()) as Box<dyn Disk>
        })
        .collect();
    Array::create_with_policy(
        disks,
        CreateOptions {
            level: 5,
            layout: None,
            chunk_sectors: 1024,
            raid_devices: MEMBERS,
            metadata: SuperblockVersion::V1_2,
            size_sectors: None,
            name: "bench".into(),
            set_uuid: [tag.len() as u8; 16],
            device_uuids: (0..MEMBERS).map(|i| [i as u8 + 1; 16]).collect(),
            ctime_seconds: 0,
            members_zeroed: true,
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

fn sequential(array: &Array, bytes: u64) -> f64 {
    let buf = vec![0xa5u8; 1 << 20];
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
    let ppl = make(&dir, "ppl", ConsistencyPolicy::Ppl);
    let plain = make(&dir, "resync", ConsistencyPolicy::Resync);
    assert_eq!(ppl.consistency_policy(), ConsistencyPolicy::Ppl);
    let (mut r_ppl, mut r_plain, mut s_ppl, mut s_plain) = (vec![], vec![], vec![], vec![]);
    for run in 0..runs {
        // Interleaved, so load from other work on the machine hits both alike.
        r_plain.push(random_4k(&plain, 3000, run as u64 + 1));
        r_ppl.push(random_4k(&ppl, 3000, run as u64 + 1));
        s_plain.push(sequential(&plain, 256 << 20));
        s_ppl.push(sequential(&ppl, 256 << 20));
    }
    let (rp, rr, sp, sr) = (
        median(r_ppl),
        median(r_plain),
        median(s_ppl),
        median(s_plain),
    );
    println!("RAID 5, {MEMBERS} members of {} MiB in {}, chunk 512 KiB, median of {runs} interleaved runs", MEMBER_BYTES >> 20, dir.display());
    println!(
        "4 KiB random writes   resync {rr:>9.0} IOPS   ppl {rp:>9.0} IOPS   ppl/resync {:.2}",
        rp / rr
    );
    println!(
        "1 MiB sequential      resync {sr:>9.1} MiB/s  ppl {sp:>9.1} MiB/s  ppl/resync {:.2}",
        sp / sr
    );
    ppl.stop().unwrap();
    plain.stop().unwrap();
    for tag in ["ppl", "resync"] {
        for i in 0..MEMBERS {
            let _ = std::fs::remove_file(dir.join(format!("pplbench-{tag}-{i}.img")));
        }
    }
}
