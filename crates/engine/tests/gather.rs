//! Gathering a sequential stream's partial stripes into whole ones (RAID 5 and 6): requests
//! of a stream written from several threads at once (queue depth 4, requests that do not
//! divide the stripe) read back byte for byte, a check finds parity consistent, and the
//! members read far less than the same stream written one request at a time, where every
//! partial stripe is a read-modify-write.

use raidkit_disk::emu::catalog::Catalog;
use raidkit_disk::{Disk, EmuDisk, MemDisk};
use raidkit_engine::{Array, ConsistencyPolicy, CreateOptions, EngineConfig, TaskKind};
use raidkit_metadata::SuperblockVersion;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const MEMBER_BYTES: u64 = 16 << 20;
const CHUNK_SECTORS: u32 = 128; // 64 KiB
const STREAM_BYTES: u64 = 24 << 20;
const REQUEST: u64 = 96 << 10;

/// Members are emulated hard disks (in memory, delayed in real time by the drive model), as
/// the gathering is for: a read-modify-write costs them a rotation, and the pauses between a
/// request's completion and the next one's arrival are small beside a stripe's write time.
fn create(level: i32, n: usize, emulated: bool) -> Array {
    let catalog = Catalog::load(None).unwrap();
    let drive = catalog.drive("hds72101").unwrap().clone();
    let disks: Vec<Box<dyn Disk>> = (0..n)
        .map(|i| {
            let name = format!("emu{i}");
            let inner = Box::new(MemDisk::new(&name, MEMBER_BYTES));
            if !emulated {
                return inner as Box<dyn Disk>;
            }
            Box::new(EmuDisk::wrap(inner, &drive, &name, None, &catalog).unwrap()) as Box<dyn Disk>
        })
        .collect();
    Array::create(
        disks,
        CreateOptions {
            level,
            layout: None,
            chunk_sectors: CHUNK_SECTORS,
            raid_devices: n,
            metadata: SuperblockVersion::V1_2,
            size_sectors: None,
            name: "gather".into(),
            set_uuid: [9; 16],
            device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
            ctime_seconds: 1_700_000_000,
            init: raidkit_engine::Init::Zeroed,
            consistency: ConsistencyPolicy::Resync,
            config: EngineConfig::default(),
        },
    )
    .unwrap_or_else(|e| panic!("create RAID {level} over {n}: {e}"))
}

fn pattern(pass: u8, off: u64, len: u64) -> Vec<u8> {
    (off..off + len)
        .map(|i| (i / 4096 % 251) as u8 ^ pass.wrapping_mul(37) ^ (i % 7) as u8)
        .collect()
}

fn member_reads(a: &Array) -> u64 {
    a.member_io().iter().map(|m| m.io.read_bytes).sum()
}

/// Writes the stream with `threads` writers taking the next request in turn (a client at
/// queue depth `threads`); returns the bytes the members read meanwhile.
fn stream(a: &Array, threads: usize, pass: u8) -> u64 {
    let before = member_reads(a);
    let next = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let off = next.fetch_add(REQUEST, Ordering::SeqCst);
                if off >= STREAM_BYTES {
                    break;
                }
                let len = REQUEST.min(STREAM_BYTES - off);
                a.write_at(&pattern(pass, off, len), off, false)
                    .unwrap_or_else(|e| panic!("write at {off}: {e}"));
            });
        }
    });
    a.flush().unwrap();
    member_reads(a) - before
}

fn verify(a: &Array, pass: u8) {
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < STREAM_BYTES {
        let n = (STREAM_BYTES - off).min(buf.len() as u64);
        a.read_at(&mut buf[..n as usize], off).unwrap();
        assert!(
            buf[..n as usize] == pattern(pass, off, n)[..],
            "pass {pass}: data differs in the MiB at {off}"
        );
        off += n;
    }
    let report = a
        .run_task(TaskKind::Check, &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(
        report.progress.mismatch_sectors, 0,
        "pass {pass}: parity disagrees after the stream"
    );
}

/// The tests of this file run one at a time: gathering depends on the writers getting a CPU
/// when a request completes, which two CPUs shared with the other tests do not promise.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn gathers(level: i32, n: usize) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let a = create(level, n, true);
    let alone = stream(&a, 1, 1);
    verify(&a, 1);
    let before = a.gather_counters();
    let together = stream(&a, 4, 2);
    verify(&a, 2);
    let after = a.gather_counters();
    let whole = after.whole_stripes - before.whole_stripes;
    println!(
        "RAID {level} over {n}: members read {} KiB one request at a time, {} KiB at queue depth 4 ({whole} stripes gathered whole, {} parts joined)",
        alone >> 10,
        together >> 10,
        after.joined - before.joined
    );
    assert!(
        alone >= STREAM_BYTES / 4,
        "one request at a time, partial stripes read old data ({alone} bytes read)"
    );
    assert!(whole > 0, "no stripe was gathered whole");
    assert!(
        together * 10 <= alone,
        "at queue depth 4 the members read {together} bytes, against {alone} one at a time"
    );
}

#[test]
fn a_raid5_stream_at_queue_depth_4_is_written_in_whole_stripes() {
    gathers(5, 4);
}

#[test]
fn a_raid6_stream_at_queue_depth_4_is_written_in_whole_stripes() {
    gathers(6, 5);
}

#[test]
fn random_writes_from_several_threads_are_not_held_back() {
    // Random 4 KiB writes from 8 threads: none continues a stream, so few wait for others to
    // fill its stripe (a wait costs a random write up to a stripe's write time). Some land
    // by chance within four request lengths of one of the 32 writes remembered: on this
    // 24 MiB range about one in twenty; leading needs that twice in a row.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // Memory members: what is measured is which writes wait, not what the disks do.
    let a = create(5, 4, false);
    let blocks = STREAM_BYTES / 4096;
    let writes_per_thread = 400u64;
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let a = &a;
            s.spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                for _ in 0..writes_per_thread {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let off = (x % blocks) * 4096;
                    a.write_at(&pattern(3, off, 4096), off, false).unwrap();
                }
            });
        }
    });
    let c = a.gather_counters();
    let writes = 8 * writes_per_thread;
    println!("{writes} random writes: {} gatherings opened", c.opened);
    assert!(
        c.opened * 100 <= writes,
        "{} of {writes} random writes waited to gather a stripe",
        c.opened
    );
}
