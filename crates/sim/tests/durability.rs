//! A write with FUA (and a flush) must be durable on every member that receives writes, not
//! only on the members in sync: a member being rebuilt counts as current below its recorded
//! recovery offset after a crash, and a replacement takes over its slot's data. The simulated
//! disks keep what was written apart from what would survive a power cut, so a missed flush
//! shows as a difference between the two.

use raidkit_disk::Disk;
use raidkit_engine::plan::MemberState;
use raidkit_engine::{Array, CreateOptions, EngineConfig, TaskKind};
use raidkit_metadata::SuperblockVersion;
use raidkit_sim::model::{sector_pattern, SECTOR};
use raidkit_sim::{SimDisk, SimWorld};
use std::sync::atomic::{AtomicBool, Ordering};

/// Data sectors per member: large enough that a rebuild takes many steps.
const SIZE_SECTORS: u64 = 64 << 11;
const DISK_BYTES: u64 = (SIZE_SECTORS + 4096 + 128) * 512;

fn mirror(world: &mut SimWorld) -> Array {
    let members: Vec<Box<dyn Disk>> = (0..2)
        .map(|_| Box::new(world.add_disk(DISK_BYTES)) as Box<dyn Disk>)
        .collect();
    Array::create(
        members,
        CreateOptions {
            level: 1,
            layout: None,
            chunk_sectors: 0,
            raid_devices: 2,
            metadata: SuperblockVersion::V1_2,
            size_sectors: Some(SIZE_SECTORS),
            name: "t:fua".into(),
            set_uuid: [8; 16],
            device_uuids: vec![[9; 16], [10; 16]],
            ctime_seconds: 0,
            init: raidkit_engine::Init::Zeroed,
            consistency: raidkit_engine::ConsistencyPolicy::Resync,
            config: EngineConfig::default(),
        },
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

/// Runs `kind` for a few steps only, so it stops part way with its checkpoint recorded.
fn run_part_way(array: &Array, kind: TaskKind) {
    let stop = AtomicBool::new(false);
    let mut steps = 0;
    array
        .run_task(
            kind,
            &mut |_| {
                steps += 1;
                if steps >= 3 {
                    stop.store(true, Ordering::Relaxed);
                }
            },
            &stop,
        )
        .unwrap();
}

/// The member's data area: what a crash now would leave must equal what was written.
fn assert_durable(disk: &SimDisk, data_offset_sectors: u64, what: &str) {
    let off = data_offset_sectors * 512;
    let len = (SIZE_SECTORS * 512) as usize;
    let live = disk.peek_live(off, len);
    let durable = disk.peek_durable(off, len);
    let first = live
        .chunks(SECTOR)
        .zip(durable.chunks(SECTOR))
        .position(|(a, b)| a != b);
    assert_eq!(
        first, None,
        "{what}: acknowledged FUA data is not durable from sector {first:?}"
    );
}

fn data_offset(array: &Array, name: &str) -> u64 {
    array
        .status()
        .members
        .iter()
        .find(|m| m.name == name)
        .unwrap()
        .data_offset_sectors
}

#[test]
fn fua_reaches_a_member_being_rebuilt() {
    let mut world = SimWorld::new(21);
    let array = mirror(&mut world);
    array.fail_member(1).unwrap();
    array.remove_member(1).unwrap();
    let spare = world.add_disk(DISK_BYTES);
    array.add_spare(Box::new(spare.clone()), [11; 16]).unwrap();
    run_part_way(&array, TaskKind::Rebuild);
    let st = array.status();
    let rebuilding = st
        .members
        .iter()
        .find(|m| m.name == "sim2")
        .expect("the spare is a member");
    assert_eq!(
        rebuilding.state,
        Some(MemberState::Rebuilding),
        "the rebuild stopped part way: {st:?}"
    );

    array.write_at(&pattern(5, SIZE_SECTORS), 0, true).unwrap();
    assert_durable(&spare, data_offset(&array, "sim2"), "member being rebuilt");
    assert_durable(world.disk(0), data_offset(&array, "sim0"), "member in sync");
}

#[test]
fn fua_reaches_a_replacement() {
    let mut world = SimWorld::new(22);
    let array = mirror(&mut world);
    let new = world.add_disk(DISK_BYTES);
    array
        .replace_member(0, Box::new(new.clone()), [12; 16])
        .unwrap();
    run_part_way(&array, TaskKind::Replace);
    let st = array.status();
    assert!(
        st.members
            .iter()
            .any(|m| m.name == "sim2" && m.role.contains("replacement")),
        "the copy stopped part way: {st:?}"
    );

    array.write_at(&pattern(6, SIZE_SECTORS), 0, true).unwrap();
    assert_durable(&new, data_offset(&array, "sim2"), "replacement");

    // A plain write followed by a flush is the other way to ask for durability.
    array.write_at(&pattern(7, SIZE_SECTORS), 0, false).unwrap();
    array.flush().unwrap();
    assert_durable(&new, data_offset(&array, "sim2"), "replacement after flush");
}
