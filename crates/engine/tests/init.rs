//! How a new array is made consistent (`CreateOptions::init`): in the background (md's
//! initial resync: usable at once, parity and copies built behind the data, resumable), by
//! trusting the members (`--assume-clean`), and not at all for RAID 0. Members start full of
//! other data, as disks that held something before do.

use raidkit_disk::{Disk, MemDisk};
use raidkit_engine::{
    Array, AssembleOptions, ConsistencyPolicy, CreateOptions, EngineConfig, Init, TaskKind,
    TaskOutcome,
};
use raidkit_metadata::SuperblockVersion;
use std::sync::atomic::{AtomicBool, Ordering};

const MEMBER_BYTES: u64 = 6 << 20;

/// Bytes that are not zeroes and not consistent with any parity: a member's old contents.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn used_members(n: usize) -> Vec<MemDisk> {
    (0..n)
        .map(|i| {
            let d = MemDisk::new(&format!("m{i}"), MEMBER_BYTES);
            d.write_at(&noise(i as u64 + 11, MEMBER_BYTES as usize), 0)
                .unwrap();
            d
        })
        .collect()
}

fn boxed(disks: &[MemDisk]) -> Vec<Box<dyn Disk>> {
    disks
        .iter()
        .map(|d| Box::new(d.clone()) as Box<dyn Disk>)
        .collect()
}

fn create(disks: &[MemDisk], level: i32, n: usize, policy: ConsistencyPolicy, init: Init) -> Array {
    Array::create(
        boxed(disks),
        CreateOptions {
            level,
            layout: None,
            chunk_sectors: 32,
            raid_devices: n,
            metadata: SuperblockVersion::V1_2,
            size_sectors: None,
            name: "init".into(),
            set_uuid: [9; 16],
            device_uuids: (0..disks.len()).map(|i| [i as u8 + 1; 16]).collect(),
            ctime_seconds: 1_700_000_000,
            init,
            consistency: policy,
            config: one_task_thread(),
        },
    )
    .unwrap()
}

/// Tasks on the plain loop (one thread), where check, repair and resync of a parity level
/// read each step ahead while the last one is compared: the path they take on disks.
fn one_task_thread() -> EngineConfig {
    EngineConfig {
        task_threads: Some(1),
        ..EngineConfig::default()
    }
}

fn assemble(disks: &[MemDisk]) -> Array {
    let opts = AssembleOptions {
        config: one_task_thread(),
        ..AssembleOptions::default()
    };
    Array::assemble(boxed(disks), opts).unwrap().0
}

fn run(array: &Array, kind: TaskKind, stop: &AtomicBool) -> raidkit_engine::TaskReport {
    array.run_task(kind, &mut |_| {}, stop).unwrap()
}

fn mismatches(array: &Array) -> u64 {
    run(array, TaskKind::Check, &AtomicBool::new(false))
        .progress
        .mismatch_sectors
}

#[test]
fn a_background_initialisation_is_usable_at_once_resumes_and_ends_consistent() {
    let journal = || ConsistencyPolicy::Journal;
    let cases: Vec<(i32, usize, usize, ConsistencyPolicy)> = vec![
        (1, 2, 2, ConsistencyPolicy::Resync),
        (5, 4, 4, ConsistencyPolicy::Resync),
        (5, 4, 4, ConsistencyPolicy::Ppl),
        (
            5,
            4,
            4,
            ConsistencyPolicy::Bitmap {
                chunk_bytes: 64 << 10,
            },
        ),
        (5, 4, 5, journal()),
        (6, 5, 5, ConsistencyPolicy::Resync),
        (10, 4, 4, ConsistencyPolicy::Resync),
    ];
    for (level, n, given, policy) in cases {
        let what = format!("RAID {level} over {n}, {policy:?}");
        let disks = used_members(given);
        let array = create(&disks, level, n, policy, Init::Background);
        let status = array.status();
        assert_eq!(status.pending, vec![TaskKind::Resync], "{what}");
        // With the partial parity log, create did the first step (see
        // `a_crash_during_a_background_initialisation_with_the_log_keeps_it_to_do`).
        let first = status.resync_from_sectors;
        if policy == ConsistencyPolicy::Ppl {
            assert!(first.is_some_and(|f| f > 0), "{what}: {first:?}");
        } else {
            assert_eq!(first, Some(0), "{what}");
        }
        // Usable at once: what is written reads back before any resync ran.
        let data = noise(
            level as u64 * 7 + n as u64,
            (array.size_bytes() / 2) as usize,
        );
        array.write_at(&data, 4096, false).unwrap();
        array.flush().unwrap();
        let mut got = vec![0u8; data.len()];
        array.read_at(&mut got, 4096).unwrap();
        assert!(got == data, "{what}: reads before the resync");
        // Stopped and assembled again, the initialisation is still to do.
        array.stop().unwrap();
        let array = assemble(&disks);
        assert!(
            array.pending_tasks().contains(&TaskKind::Resync),
            "{what}: the initialisation survives a stop"
        );
        // Part of it, stopped at a checkpoint: it resumes from there.
        let stop = AtomicBool::new(false);
        let mut steps = 0;
        let first = array
            .run_task(
                TaskKind::Resync,
                &mut |_| {
                    steps += 1;
                    if steps == 3 {
                        stop.store(true, Ordering::SeqCst);
                    }
                },
                &stop,
            )
            .unwrap();
        assert_eq!(first.outcome, TaskOutcome::Stopped, "{what}");
        array.stop().unwrap();
        let array = assemble(&disks);
        let from = array.status().resync_from_sectors;
        assert!(
            from.is_some_and(|f| f > 0),
            "{what}: resumes past the start, from {from:?}"
        );
        let rest = run(&array, TaskKind::Resync, &AtomicBool::new(false));
        assert_eq!(rest.outcome, TaskOutcome::Completed, "{what}");
        assert_eq!(mismatches(&array), 0, "{what}: consistent after it");
        let mut got = vec![0u8; data.len()];
        array.read_at(&mut got, 4096).unwrap();
        assert!(got == data, "{what}: the data written during it");
        array.stop().unwrap();
    }
}

/// RAID 5 with the partial parity log, created over old data, written, then crashed (no
/// stop) before its initial resync ran: assembled again, the log is replayed and the
/// initialisation is still to do. md's rule takes a dirty array from 0 whose log replayed
/// cleanly as consistent; so the first write records the resync's cursor, past 0, and
/// create does the first step. Taken as consistent, the stripes never written would keep
/// the old data's parity, and a later partial write would update it as if it were right:
/// the check finds them, and a member lost then would read back wrong.
#[test]
fn a_crash_during_a_background_initialisation_with_the_log_keeps_it_to_do() {
    let disks = used_members(4);
    let array = create(&disks, 5, 4, ConsistencyPolicy::Ppl, Init::Background);
    let from = array.status().resync_from_sectors;
    assert!(
        from.is_some_and(|f| f > 0),
        "create did a first step: {from:?}"
    );
    let data = noise(11, 64 << 10);
    let at = array.size_bytes() - (256 << 10);
    array.write_at(&data, at, false).unwrap();
    drop(array);
    let array = assemble(&disks);
    let report = array.status();
    assert!(
        report.pending.contains(&TaskKind::Resync),
        "the initialisation survives the crash"
    );
    assert_eq!(report.resync_from_sectors, from, "from where it was");
    let mut got = vec![0u8; data.len()];
    array.read_at(&mut got, at).unwrap();
    assert!(got == data);
    let done = run(&array, TaskKind::Resync, &AtomicBool::new(false));
    assert_eq!(done.outcome, TaskOutcome::Completed);
    assert_eq!(mismatches(&array), 0, "consistent after it");
    array.stop().unwrap();
}

#[test]
fn assume_clean_writes_nothing_but_the_metadata() {
    let disks = used_members(4);
    let before: Vec<Vec<u8>> = disks.iter().map(|d| d.snapshot()).collect();
    let array = create(&disks, 5, 4, ConsistencyPolicy::Resync, Init::AssumeClean);
    assert!(array.pending_tasks().is_empty());
    let offset = raidkit_engine::read_superblock(&disks[0])
        .unwrap()
        .sb
        .data_offset_sectors as usize
        * 512;
    for (d, b) in disks.iter().zip(&before) {
        assert!(
            d.snapshot()[offset..] == b[offset..],
            "data areas untouched"
        );
    }
    // The members were not consistent: md's check says so, and repair makes them so.
    assert!(mismatches(&array) > 0);
    run(&array, TaskKind::Repair, &AtomicBool::new(false));
    assert_eq!(mismatches(&array), 0);
    array.stop().unwrap();
}

#[test]
fn a_raid0_has_nothing_to_initialise() {
    let disks = used_members(3);
    let before: Vec<Vec<u8>> = disks.iter().map(|d| d.snapshot()).collect();
    let array = create(&disks, 0, 3, ConsistencyPolicy::Resync, Init::Background);
    assert!(array.pending_tasks().is_empty());
    array.stop().unwrap();
    let offset = raidkit_engine::read_superblock(&disks[0])
        .unwrap()
        .sb
        .data_offset_sectors as usize
        * 512;
    for (d, b) in disks.iter().zip(&before) {
        assert!(
            d.snapshot()[offset..] == b[offset..],
            "data areas untouched"
        );
    }
    let array = assemble(&disks);
    assert_eq!(array.status().resync_from_sectors, None);
}

#[test]
fn what_is_written_before_the_initialisation_passes_survives_a_member_lost() {
    // RAID 5 over 6 members: a one-chunk write would read old data and parity and derive the
    // new parity from the old, which is wrong before the resync passes; written there, the
    // stripe's parity comes from its data (md's reconstruct-write beyond recovery_cp), so a
    // member lost before the resync passes still reads back what was written.
    let disks = used_members(6);
    let array = create(&disks, 5, 6, ConsistencyPolicy::Resync, Init::Background);
    let chunk = 32 * 512;
    let stripe = 5 * chunk as u64;
    let mut written = Vec::new();
    for k in 0..8u64 {
        let at = k * stripe + (k % 5) * chunk as u64;
        let data = noise(100 + k, 4096);
        array.write_at(&data, at, false).unwrap();
        written.push((at, data));
    }
    array.flush().unwrap();
    // Left-symmetric: stripe k's data chunk k mod 5 is on member 0.
    array.fail_member(0).unwrap();
    for (at, data) in &written {
        let mut got = vec![0u8; data.len()];
        array.read_at(&mut got, *at).unwrap();
        assert!(
            got == *data,
            "byte {at}: read back degraded before the resync"
        );
    }
    array.stop().unwrap();
}
