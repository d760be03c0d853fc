//! md's write journal closes the write hole for RAID 4, 5 and 6: a crash while partial-stripe
//! writes are in flight, then the loss of a member, must leave every sector outside those
//! writes as it was and every written sector wholly old or wholly new. Here the crash loses or
//! tears every write the members had not flushed; only the journal (synced before any member
//! write) remembers them, so after its replay every written sector reads new, even from a
//! member that is gone.

use raidkit_disk::Disk;
use raidkit_engine::{
    Array, ArrayEvent, AssembleOptions, ConsistencyPolicy, CreateOptions, EngineConfig,
};
use raidkit_metadata::SuperblockVersion;
use raidkit_sim::disk::CrashPolicy;
use raidkit_sim::model::{sector_pattern, SECTOR};
use raidkit_sim::{SimDisk, SimWorld};

const SIZE_SECTORS: u64 = 4 << 11;
const DISK_BYTES: u64 = (SIZE_SECTORS + 4096 + 128) * 512;
const JOURNAL_BYTES: u64 = 8 << 20;

fn create(world: &mut SimWorld, level: i32, n: usize) -> Array {
    let mut members: Vec<Box<dyn Disk>> = (0..n)
        .map(|_| Box::new(world.add_disk(DISK_BYTES)) as Box<dyn Disk>)
        .collect();
    members.push(Box::new(world.add_disk(JOURNAL_BYTES)));
    Array::create_with_policy(
        members,
        CreateOptions {
            level,
            layout: None,
            chunk_sectors: 128,
            raid_devices: n,
            metadata: SuperblockVersion::V1_2,
            size_sectors: Some(SIZE_SECTORS),
            name: "t:journal".into(),
            set_uuid: [3; 16],
            device_uuids: (0..=n as u8).map(|i| [40 + i; 16]).collect(),
            ctime_seconds: 0,
            init: raidkit_engine::Init::Zeroed,
            consistency: ConsistencyPolicy::Journal,
            config: EngineConfig::default(),
        },
        ConsistencyPolicy::Journal,
    )
    .unwrap()
}

fn pattern(id: u32, sectors: u64) -> Vec<u8> {
    let mut buf = vec![0u8; sectors as usize * SECTOR];
    for s in 0..sectors {
        sector_pattern(id, s, &mut buf[s as usize * SECTOR..][..SECTOR]);
    }
    buf
}

/// Writes pattern `first_id + i` at each (sector, sectors) of `writes`, unflushed, and applies
/// them to `expect`.
fn write_unflushed(array: &Array, writes: &[(u64, u64)], first_id: u32, expect: &mut [u8]) {
    for (i, &(sector, sectors)) in writes.iter().enumerate() {
        let data = pattern(first_id + i as u32, sectors);
        array.write_at(&data, sector * 512, false).unwrap();
        let at = sector as usize * SECTOR;
        expect[at..at + data.len()].copy_from_slice(&data);
    }
}

/// The first sector where the whole array differs from `expect`.
fn first_difference(array: &Array, expect: &[u8]) -> Option<usize> {
    let mut got = vec![0u8; expect.len()];
    array.read_at(&mut got, 0).unwrap();
    got.chunks(SECTOR)
        .zip(expect.chunks(SECTOR))
        .position(|(a, b)| a != b)
}

fn assemble(world: &SimWorld) -> (Array, Vec<ArrayEvent>) {
    let disks: Vec<Box<dyn Disk>> = world
        .surviving_disks()
        .into_iter()
        .map(|d| Box::new(d) as Box<dyn Disk>)
        .collect();
    // The survivors only: a member is lost on purpose.
    let opts = AssembleOptions {
        run: true,
        ..Default::default()
    };
    let (array, report) = Array::assemble(disks, opts).unwrap();
    (array, report.events)
}

/// Crashes `world` under `array` (dropped without a stop), kills member `lost` if any, and
/// assembles the survivors.
fn crash_and_assemble(
    world: &mut SimWorld,
    array: Array,
    lost: Option<usize>,
) -> (Array, Vec<ArrayEvent>) {
    drop(array);
    world.crash(&[]);
    world.power_on();
    if let Some(m) = lost {
        world.disk(m).update_faults(|f| f.dead = true);
    }
    assemble(world)
}

/// A world whose crashes lose or tear every unflushed member write, and a journal array in it
/// with a flushed base pattern everywhere (so "old" is known): the world, the array, and what
/// it holds.
fn based(seed: u64, level: i32, n: usize) -> (SimWorld, Array, Vec<u8>) {
    let mut world = SimWorld::new(seed);
    world.crash_policy = CrashPolicy {
        lost_per_mille: 700,
        torn_per_mille: 300,
    };
    let array = create(&mut world, level, n);
    let base = pattern(1, array.size_bytes() / 512);
    array.write_at(&base, 0, false).unwrap();
    array.flush().unwrap();
    (world, array, base)
}

/// Writes partial stripes (never flushed), crashes losing every unflushed member write, kills
/// member `lost`, and checks what the array reads.
fn crash_then_lose(level: i32, n: usize, lost: usize) {
    let (mut world, array, mut expect) = based(7 + level as u64, level, n);
    // Partial-stripe writes, 4 KiB aligned and not, none flushed.
    let writes: [(u64, u64); 6] = [
        (8, 8),
        (200, 24),
        (1000, 3),
        (4096 + 5, 130),
        (9000, 64),
        (12000, 1),
    ];
    write_unflushed(&array, &writes, 100, &mut expect);
    drop(array);
    world.crash(&[]);
    world.power_on();
    world.disk(lost).update_faults(|f| f.dead = true);
    let (array, events) = assemble(&world);
    assert!(
        events.iter().any(|e| matches!(
            e,
            ArrayEvent::JournalReplayed { log_writes, rows_replayed, .. }
                if *log_writes > 0 && *rows_replayed > 0
        )),
        "no replay reported: {events:?}"
    );
    let first_bad = first_difference(&array, &expect);
    assert_eq!(
        first_bad, None,
        "RAID {level}: sector {first_bad:?} differs after the crash and the loss of member {lost}"
    );
}

#[test]
fn raid5_journal_replays_unflushed_writes_after_a_crash_and_a_lost_member() {
    for lost in 0..4 {
        crash_then_lose(5, 4, lost);
    }
}

#[test]
fn raid6_journal_replays_unflushed_writes_after_a_crash_and_a_lost_member() {
    for lost in 0..5 {
        crash_then_lose(6, 5, lost);
    }
}

#[test]
fn raid4_journal_replays_unflushed_writes_after_a_crash_and_a_lost_member() {
    for lost in 0..4 {
        crash_then_lose(4, 4, lost);
    }
}

#[test]
fn an_array_with_a_journal_refuses_to_start_without_it() {
    let mut world = SimWorld::new(3);
    let array = create(&mut world, 5, 4);
    array.stop().unwrap();
    drop(array);
    let disks: Vec<Box<dyn Disk>> = world.disks()[..4]
        .iter()
        .map(|d: &SimDisk| Box::new(d.clone()) as Box<dyn Disk>)
        .collect();
    let err = Array::assemble(disks, AssembleOptions::default())
        .err()
        .expect("assembled without its journal");
    assert!(err.to_string().contains("write journal"), "{err}");
    // --force: read-only, as mdadm does; the data is there and nothing is written.
    let disks: Vec<Box<dyn Disk>> = world.disks()[..4]
        .iter()
        .map(|d: &SimDisk| Box::new(d.clone()) as Box<dyn Disk>)
        .collect();
    let before = world.counters().writes;
    let (array, report) = Array::assemble(
        disks,
        AssembleOptions {
            force: true,
            ..AssembleOptions::default()
        },
    )
    .unwrap();
    assert!(array.is_read_only());
    assert!(
        report.events.contains(&ArrayEvent::JournalMissing),
        "{:?}",
        report.events
    );
    let mut buf = vec![0u8; 4096];
    array.read_at(&mut buf, 0).unwrap();
    assert!(array.write_at(&buf, 0, false).is_err());
    drop(array);
    assert_eq!(
        world.counters().writes,
        before,
        "a forced read-only start wrote"
    );
}

#[test]
fn a_clean_stop_leaves_nothing_to_replay_and_the_ring_wraps() {
    let mut world = SimWorld::new(4);
    let array = create(&mut world, 6, 5);
    // More than the journal holds, so the ring wraps and the checkpoint moves many times.
    let chunk = pattern(9, 256);
    for i in 0..((JOURNAL_BYTES * 3) / chunk.len() as u64) {
        let at = (i * 7919 * 512) % (array.size_bytes() - chunk.len() as u64) / 512 * 512;
        array.write_at(&chunk, at, false).unwrap();
    }
    array.stop().unwrap();
    drop(array);
    let (array, events) = assemble(&world);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ArrayEvent::JournalClean { .. })),
        "{events:?}"
    );
    drop(array);
}

/// Writes while a member is already failed (its new data lives only in parity, and the
/// journal must log it too, also where a write covers only part of a 4 KiB page of it), then
/// a crash and the loss of a second member of the RAID 6.
#[test]
fn degraded_partial_page_writes_survive_a_crash_and_a_second_loss() {
    for failed in 0..5 {
        let mut world = SimWorld::new(11 + failed as u64);
        world.crash_policy = CrashPolicy {
            lost_per_mille: 700,
            torn_per_mille: 300,
        };
        let array = create(&mut world, 6, 5);
        let size = array.size_bytes();
        let base = pattern(1, size / 512);
        array.write_at(&base, 0, false).unwrap();
        array.flush().unwrap();
        array.fail_member(failed).unwrap();
        let mut expect = base.clone();
        let writes: [(u64, u64); 5] = [(3, 2), (130, 5), (255, 3), (1021, 7), (7000, 300)];
        write_unflushed(&array, &writes, 200, &mut expect);
        drop(array);
        world.crash(&[]);
        world.power_on();
        world.disk(failed).update_faults(|f| f.dead = true);
        let second = (failed + 2) % 5;
        world.disk(second).update_faults(|f| f.dead = true);
        let (array, _) = assemble(&world);
        let first_bad = first_difference(&array, &expect);
        assert_eq!(
            first_bad, None,
            "member {failed} failed, then a crash and the loss of member {second}"
        );
    }
}

/// A write whose two bands share a 4 KiB page of a member, and that member fails its write of
/// the first band (a band over every data member of its rows, written at once) while the
/// second band (over fewer, so it reads first) is still to be written: the journal logs the
/// page whole with the second band, and the sectors the first band gave it must be the new
/// data (which only parity holds once the member has failed), not what the failed member
/// still holds. A spare then takes the slot and is rebuilt; the replay after a crash writes
/// that page onto it. Slot 0 holds data of the write's stripe; slot 3 its parity, so a data
/// member is lost after the replay and read back through that page.
#[test]
fn a_page_logged_after_its_member_failed_in_the_same_request_holds_the_new_data() {
    // (the slot whose writes fail, a member lost after the replay)
    for (failing, lost) in [(0usize, None), (3, Some(1usize))] {
        let mut world = SimWorld::new(21 + failing as u64);
        let array = create(&mut world, 5, 4);
        let size = array.size_bytes();
        let base = pattern(1, size / 512);
        array.write_at(&base, 0, false).unwrap();
        array.flush().unwrap();
        world
            .disk(failing)
            .update_faults(|f| f.write_error_per_mille = 1000);
        // Stripe 0 (left-symmetric: data on slots 0, 1, 2, parity on slot 3) of 128-sector
        // chunks: array sectors [0, 260) are two bands, member sectors [0, 4) of slots 0, 1
        // and 2, then [4, 128) of slots 0 and 1; both touch the first page of every slot.
        let mut expect = base.clone();
        write_unflushed(&array, &[(0, 260)], 300, &mut expect);
        assert!(array.status().degraded, "slot {failing} did not fail");
        let spare = world.add_disk(DISK_BYTES);
        array.add_spare(Box::new(spare), [60; 16]).unwrap();
        let reports = array
            .run_pending(&mut |_| {}, &std::sync::atomic::AtomicBool::new(false))
            .unwrap();
        assert!(!reports.is_empty(), "no rebuild ran");
        assert!(!array.status().degraded, "the spare was not rebuilt");
        array.flush().unwrap();
        let (array, events) = crash_and_assemble(&mut world, array, lost);
        assert!(
            events
                .iter()
                .any(|e| matches!(e, ArrayEvent::JournalReplayed { .. })),
            "no replay reported: {events:?}"
        );
        let first_bad = first_difference(&array, &expect);
        assert_eq!(
            first_bad, None,
            "slot {failing} failed mid-request, a spare was rebuilt, then a crash (member lost afterwards: {lost:?})"
        );
    }
}

/// The whole array's parity disagrees with its data in this many sectors.
fn mismatches(array: &Array) -> u64 {
    array
        .run_task(
            raidkit_engine::TaskKind::Check,
            &mut |_| {},
            &std::sync::atomic::AtomicBool::new(false),
        )
        .unwrap()
        .progress
        .mismatch_sectors
}

/// Under write-back, writes return once the journal has them: a crash that loses every
/// member write (none was written back; `lost` set loses a member too) leaves md's data-only
/// rows in the log, which the next assembly logs anew and writes to the members.
fn write_back_crash(level: i32, n: usize, lost: Option<usize>) {
    let ctx = format!("RAID {level}, member lost: {lost:?}");
    let (mut world, array, mut expect) = based(70 + level as u64, level, n);
    array
        .set_write_policy(raidkit_engine::WritePolicy::Back)
        .unwrap();
    // Partial pages, whole pages, a page written twice, two rows of one stripe.
    let writes: [(u64, u64); 8] = [
        (8, 8),
        (200, 24),
        (1000, 3),
        (4096 + 5, 130),
        (9000, 64),
        (12000, 1),
        (200, 8),
        (136, 8),
    ];
    write_unflushed(&array, &writes, 100, &mut expect);
    let c = array.write_back_counters();
    assert_eq!(c.cached_writes, writes.len() as u64, "{ctx}: {c:?}");
    assert!(c.rewrites > 0 && c.destages == 0, "{ctx}: {c:?}");
    assert_eq!(
        first_difference(&array, &expect),
        None,
        "{ctx}: read before the crash"
    );
    let (array, events) = crash_and_assemble(&mut world, array, lost);
    assert!(
        events.iter().any(|e| matches!(
            e,
            ArrayEvent::JournalReplayed { data_only_rows, .. } if *data_only_rows > 0
        )),
        "{ctx}: no data-only rows replayed: {events:?}"
    );
    assert_eq!(array.write_back_counters().cached_bytes, 0, "{ctx}");
    let first_bad = first_difference(&array, &expect);
    assert_eq!(first_bad, None, "{ctx}: sector {first_bad:?} differs");
    if lost.is_none() {
        assert_eq!(
            mismatches(&array),
            0,
            "{ctx}: parity disagrees after the replay"
        );
    }
    // Nothing is replayed twice: a clean stop leaves the journal clean.
    array.stop().unwrap();
    drop(array);
    let (array, events) = assemble(&world);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ArrayEvent::JournalClean { .. })),
        "{ctx}: {events:?}"
    );
    assert_eq!(
        first_difference(&array, &expect),
        None,
        "{ctx}: after a clean stop"
    );
}

#[test]
fn write_back_keeps_acknowledged_writes_through_a_crash() {
    for (level, n) in [(4, 4), (5, 4), (6, 5)] {
        write_back_crash(level, n, None);
    }
}

#[test]
fn write_back_keeps_acknowledged_writes_through_a_crash_and_a_lost_member() {
    for lost in 0..4 {
        write_back_crash(5, 4, Some(lost));
    }
    for lost in [0, 3, 4] {
        write_back_crash(6, 5, Some(lost));
    }
}

/// More pages than the cache holds: writers write back the oldest stripes themselves (no
/// destage threads here), every read sees the newest data, and a stop writes the rest back
/// and leaves parity consistent and nothing to replay.
#[test]
fn write_back_writes_back_when_full_and_at_stop() {
    let mut world = SimWorld::new(11);
    let array = create(&mut world, 5, 4);
    let size = array.size_bytes();
    let mut expect = vec![0u8; size as usize];
    array
        .set_write_policy(raidkit_engine::WritePolicy::Back)
        .unwrap();
    let cap = array.write_back_counters().capacity_bytes;
    assert!(cap > 0 && cap < size, "capacity {cap}");
    let pages = size / 4096;
    let mut rng = 12345u64;
    let mut writes = Vec::new();
    for _ in 0..(2 * cap / 4096) {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        writes.push(((rng >> 33) % pages * 8, 8));
    }
    write_unflushed(&array, &writes, 1000, &mut expect);
    let c = array.write_back_counters();
    assert!(c.destages > 0 && c.waits > 0, "{c:?}");
    assert!(c.cached_bytes <= cap, "{c:?}");
    assert_eq!(first_difference(&array, &expect), None);
    // Back to write-through: everything cached goes to the members first.
    array
        .set_write_policy(raidkit_engine::WritePolicy::Through)
        .unwrap();
    assert_eq!(array.write_back_counters().cached_bytes, 0);
    assert_eq!(mismatches(&array), 0);
    array
        .set_write_policy(raidkit_engine::WritePolicy::Back)
        .unwrap();
    write_unflushed(&array, &writes[..50], 5000, &mut expect);
    array.stop().unwrap();
    drop(array);
    let (array, events) = assemble(&world);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ArrayEvent::JournalClean { .. })),
        "{events:?}"
    );
    assert_eq!(first_difference(&array, &expect), None);
    assert_eq!(mismatches(&array), 0);
}

#[test]
fn write_back_needs_a_write_journal() {
    let mut world = SimWorld::new(5);
    let members: Vec<Box<dyn Disk>> = (0..4)
        .map(|_| Box::new(world.add_disk(DISK_BYTES)) as Box<dyn Disk>)
        .collect();
    let array = Array::create(
        members,
        CreateOptions {
            level: 5,
            layout: None,
            chunk_sectors: 128,
            raid_devices: 4,
            metadata: SuperblockVersion::V1_2,
            size_sectors: Some(SIZE_SECTORS),
            name: "t:nojournal".into(),
            set_uuid: [4; 16],
            device_uuids: (0..4u8).map(|i| [60 + i; 16]).collect(),
            ctime_seconds: 0,
            init: raidkit_engine::Init::Zeroed,
            consistency: ConsistencyPolicy::Resync,
            config: EngineConfig::default(),
        },
    )
    .unwrap();
    let err = array
        .set_write_policy(raidkit_engine::WritePolicy::Back)
        .unwrap_err();
    assert!(err.to_string().contains("write journal"), "{err}");
    assert_eq!(array.write_policy(), raidkit_engine::WritePolicy::Through);
}
