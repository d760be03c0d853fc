//! Read policies (no read-ahead, always, adaptive): a sequential stream is served from whole
//! stripes read ahead (fewer, longer member reads), random reads are left alone by the
//! adaptive policy, and no read ever returns data older than a write acknowledged before it
//! started, with writers and read-ahead racing (the cache's coherence).

use raidkit_disk::{Disk, MemDisk};
use raidkit_engine::{Array, ConsistencyPolicy, CreateOptions, EngineConfig, ReadAhead};
use raidkit_metadata::SuperblockVersion;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const MEMBER_BYTES: u64 = 16 << 20;
const BLOCK: usize = 4096;

fn raid5(n: usize) -> Array {
    let disks: Vec<Box<dyn Disk>> = (0..n)
        .map(|i| Box::new(MemDisk::new(&format!("m{i}"), MEMBER_BYTES)) as Box<dyn Disk>)
        .collect();
    Array::create(
        disks,
        CreateOptions {
            level: 5,
            layout: None,
            chunk_sectors: 128,
            raid_devices: n,
            metadata: SuperblockVersion::V1_2,
            size_sectors: None,
            name: "ra".into(),
            set_uuid: [5; 16],
            device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
            ctime_seconds: 1_700_000_000,
            init: raidkit_engine::Init::Zeroed,
            consistency: ConsistencyPolicy::Resync,
            config: EngineConfig::default(),
        },
    )
    .unwrap()
}

fn block(i: u64, version: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    b[..8].copy_from_slice(&i.to_le_bytes());
    b[8..16].copy_from_slice(&version.to_le_bytes());
    b
}

fn member_reads(a: &Array) -> (u64, u64) {
    a.member_io()
        .iter()
        .fold((0, 0), |(n, b), m| (n + m.io.reads, b + m.io.read_bytes))
}

#[test]
fn a_sequential_stream_reads_whole_stripes_ahead_and_random_reads_do_not() {
    let a = raid5(5);
    let blocks = 2048u64; // 8 MiB
    for i in 0..blocks {
        a.write_at(&block(i, 1), i * BLOCK as u64, false).unwrap();
    }
    let read_all = |a: &Array| {
        let before = member_reads(a);
        let mut buf = vec![0u8; BLOCK];
        for i in 0..blocks {
            a.read_at(&mut buf, i * BLOCK as u64).unwrap();
            assert_eq!(buf, block(i, 1), "block {i}");
        }
        let after = member_reads(a);
        (after.0 - before.0, after.1 - before.1)
    };
    let (plain, _) = read_all(&a);
    a.set_read_ahead(ReadAhead::Adaptive);
    let (ahead, bytes) = read_all(&a);
    let c = a.read_ahead_counters();
    println!("member reads: {plain} without read-ahead, {ahead} adaptive ({bytes} bytes); {c:?}");
    assert!(
        c.hits > blocks * 9 / 10,
        "most reads come from the cache: {c:?}"
    );
    assert!(ahead * 10 < plain, "{ahead} member reads against {plain}");
    assert!(
        bytes <= blocks * BLOCK as u64 + (4 << 20),
        "no more than a window past the end"
    );

    // Random reads: the adaptive policy reads nothing ahead; always does.
    let random = |a: &Array| {
        let mut buf = vec![0u8; BLOCK];
        let mut x = 12345u64;
        for _ in 0..200 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (x >> 33) % blocks;
            a.read_at(&mut buf, i * BLOCK as u64).unwrap();
            assert_eq!(buf, block(i, 1));
        }
    };
    let before = a.read_ahead_counters().ahead_reads;
    random(&a);
    assert_eq!(
        a.read_ahead_counters().ahead_reads,
        before,
        "adaptive on random reads"
    );
    // Always reads ahead on a random read that misses (from an empty cache: none empties it).
    a.set_read_ahead(ReadAhead::None);
    a.set_read_ahead(ReadAhead::Always);
    random(&a);
    assert!(a.read_ahead_counters().ahead_reads > before);
    a.set_read_ahead(ReadAhead::None);
    assert_eq!(
        a.read_ahead_counters().cached_bytes,
        0,
        "none empties the cache"
    );
}

/// Writers overwrite blocks with rising versions while readers read through an `Always`
/// cache: a read never returns a version older than the one acknowledged before it began.
#[test]
fn a_read_never_returns_data_older_than_an_acknowledged_write() {
    let a = raid5(4);
    let blocks = 512u64; // 2 MiB, a few read-ahead windows
    let acked: Vec<AtomicU64> = (0..blocks).map(|_| AtomicU64::new(0)).collect();
    for i in 0..blocks {
        a.write_at(&block(i, 0), i * BLOCK as u64, false).unwrap();
    }
    a.set_read_ahead(ReadAhead::Always);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for w in 0..2u64 {
            let (a, acked, stop) = (&a, &acked, &stop);
            s.spawn(move || {
                let mut x = w + 1;
                let mut version = 0;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    // Each writer owns the blocks of its parity (even, odd).
                    let i = ((x >> 33) % (blocks / 2)) * 2 + w;
                    version += 1;
                    a.write_at(&block(i, version), i * BLOCK as u64, false)
                        .unwrap();
                    acked[i as usize].store(version, Ordering::SeqCst);
                }
            });
        }
        let readers: Vec<_> = (0..2u64)
            .map(|r| {
                let (a, acked) = (&a, &acked);
                s.spawn(move || {
                    let mut buf = vec![0u8; BLOCK];
                    for round in 0..20 {
                        for k in 0..blocks {
                            let i = (k + r * 97 + round * 13) % blocks;
                            let floor = acked[i as usize].load(Ordering::SeqCst);
                            a.read_at(&mut buf, i * BLOCK as u64).unwrap();
                            let got_i = u64::from_le_bytes(buf[..8].try_into().unwrap());
                            let got_v = u64::from_le_bytes(buf[8..16].try_into().unwrap());
                            assert_eq!(got_i, i, "block {i} holds another block's data");
                            assert!(
                            got_v >= floor,
                            "block {i}: read version {got_v} after version {floor} was acknowledged"
                        );
                        }
                    }
                })
            })
            .collect();
        // The readers end by themselves; then the writers stop.
        let results: Vec<_> = readers.into_iter().map(|h| h.join()).collect();
        stop.store(true, Ordering::Relaxed);
        for r in results {
            if let Err(p) = r {
                std::panic::resume_unwind(p);
            }
        }
    });
    assert!(
        a.read_ahead_counters().hits > 0,
        "the cache served reads meanwhile"
    );
}
