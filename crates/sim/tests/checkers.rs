//! The checkers must be able to fail: silent corruption of a member (data, P or Q) is found by
//! the independent encoder, and a wrong sector returned by a read is named by the model.

use raidkit_disk::Disk;
use raidkit_engine::{Array, CreateOptions, EngineConfig};
use raidkit_layout::{Geometry, MdParams};
use raidkit_metadata::SuperblockVersion;
use raidkit_sim::check::{check_members, SlotMember};
use raidkit_sim::model::{sector_pattern, Model, Verdict, SECTOR};
use raidkit_sim::{FaultRules, FaultyDisk, SimDisk, SimWorld};
use std::collections::BTreeSet;

const SIZE_SECTORS: u64 = 256;
const CHUNK: u32 = 16;

fn build(level: i32, layout: u32, n: usize) -> (SimWorld, Array, Model, Geometry) {
    let mut world = SimWorld::new(5);
    let members: Vec<Box<dyn Disk>> = (0..n)
        .map(|_| Box::new(world.add_disk((SIZE_SECTORS + 4096 + 128) * 512)) as Box<dyn Disk>)
        .collect();
    let array = Array::create(
        members,
        CreateOptions {
            level,
            layout: Some(layout),
            chunk_sectors: CHUNK,
            raid_devices: n,
            metadata: SuperblockVersion::V1_2,
            size_sectors: Some(SIZE_SECTORS),
            name: "t:0".into(),
            set_uuid: [1; 16],
            device_uuids: (0..n).map(|i| [i as u8 + 2; 16]).collect(),
            ctime_seconds: 0,
            init: raidkit_engine::Init::Zeroed,
            consistency: raidkit_engine::ConsistencyPolicy::Resync,
            config: EngineConfig::default(),
        },
    )
    .unwrap();
    let geo = Geometry::from_md(&MdParams {
        level,
        layout,
        raid_disks: n as u32,
        chunk_sectors: CHUNK,
        member_data_sectors: vec![SIZE_SECTORS; n],
    })
    .unwrap();
    let sectors = array.size_bytes() / 512;
    let mut model = Model::new(sectors);
    let mut buf = vec![0u8; sectors as usize * SECTOR];
    for s in 0..sectors {
        sector_pattern(
            7,
            s,
            &mut buf[s as usize * SECTOR..(s as usize + 1) * SECTOR],
        );
    }
    array.write_at(&buf, 0, false).unwrap();
    array.flush().unwrap();
    model.write_acked(0, sectors, 7, false);
    model.flushed();
    (world, array, model, geo)
}

fn slots(world: &SimWorld, array: &Array) -> Vec<(usize, u64)> {
    let st = array.status();
    let mut v = vec![(0, 0); st.raid_disks];
    for m in st.members {
        let idx: usize = m.name.trim_start_matches("sim").parse().unwrap();
        v[m.slot.unwrap()] = (idx, m.data_offset_sectors);
    }
    assert_eq!(v.len(), world.disks().len());
    v
}

fn check(world: &SimWorld, array: &Array, model: &Model, geo: &Geometry) -> Result<(), String> {
    let s = slots(world, array);
    let members: Vec<SlotMember<'_>> = s
        .iter()
        .map(|&(d, off)| SlotMember {
            disk: world.disk(d),
            data_offset_sectors: off,
        })
        .collect();
    check_members(geo, &members, model, &mut BTreeSet::new()).map(|_| ())
}

#[test]
fn encoder_check_finds_corrupt_data_p_and_q() {
    for (level, layout, n) in [(5, 2, 4), (6, 2, 5), (6, 9, 6), (10, 0x102, 4), (1, 0, 3)] {
        let (world, array, model, geo) = build(level, layout, n);
        check(&world, &array, &model, &geo)
            .unwrap_or_else(|e| panic!("level {level}: clean array flagged: {e}"));
        let s = slots(&world, &array);
        // Corrupt one byte in every member in turn (data, P and Q all get hit somewhere).
        for (slot, &(d, off)) in s.iter().enumerate() {
            let at = (off + 3) * 512 + 100;
            let old = world.disk(d).peek_live(at, 1);
            world.disk(d).scribble(at, &[old[0] ^ 0x40]);
            assert!(
                check(&world, &array, &model, &geo).is_err(),
                "level {level} layout {layout}: corruption on slot {slot} not found"
            );
            world.disk(d).scribble(at, &old);
        }
        check(&world, &array, &model, &geo).unwrap();
    }
}

#[test]
fn model_names_a_wrong_read() {
    let (world, array, model, _) = build(0, 0, 3);
    let s = slots(&world, &array);
    let (d, off) = s[1];
    world.disk(d).scribble(off * 512, &[0xff; 512]);
    let total = model.sectors();
    let mut buf = vec![0u8; total as usize * SECTOR];
    array.read_at(&mut buf, 0).unwrap();
    let mut scratch = vec![0u8; SECTOR];
    let wrong = (0..total)
        .filter(|&i| {
            let sec = &buf[i as usize * SECTOR..(i as usize + 1) * SECTOR];
            matches!(model.judge(i, sec, &mut scratch), Verdict::Wrong { .. })
        })
        .count();
    assert_eq!(wrong, 1);
}

#[test]
fn faulty_disk_under_an_array_fails_the_member_and_keeps_the_data() {
    let mut world = SimWorld::new(9);
    let mut members: Vec<Box<dyn Disk>> = Vec::new();
    for i in 0..3 {
        let d: SimDisk = world.add_disk((SIZE_SECTORS + 4096 + 128) * 512);
        if i == 2 {
            let rules = FaultRules {
                fail_after_requests: Some(40),
                ..FaultRules::default()
            };
            members.push(Box::new(FaultyDisk::new(d, rules, 1)));
        } else {
            members.push(Box::new(d));
        }
    }
    let array = Array::create(
        members,
        CreateOptions {
            level: 5,
            layout: None,
            chunk_sectors: CHUNK,
            raid_devices: 3,
            metadata: SuperblockVersion::V1_2,
            size_sectors: Some(SIZE_SECTORS),
            name: "t:1".into(),
            set_uuid: [3; 16],
            device_uuids: vec![[4; 16], [5; 16], [6; 16]],
            ctime_seconds: 0,
            init: raidkit_engine::Init::Zeroed,
            consistency: raidkit_engine::ConsistencyPolicy::Resync,
            config: EngineConfig::default(),
        },
    )
    .unwrap();
    let mut wrote = Vec::new();
    for k in 0..60u64 {
        let s = (k * 7) % (array.size_bytes() / 512 - 8);
        let mut buf = vec![0u8; 8 * SECTOR];
        for i in 0..8 {
            sector_pattern(
                k as u32 + 1,
                s + i,
                &mut buf[i as usize * SECTOR..][..SECTOR],
            );
        }
        array.write_at(&buf, s * 512, false).unwrap();
        wrote.push((s, buf));
    }
    assert!(array.status().degraded, "the countdown failed the member");
    let mut model_view = vec![0u8; array.size_bytes() as usize];
    for (s, buf) in &wrote {
        model_view[*s as usize * SECTOR..][..buf.len()].copy_from_slice(buf);
    }
    let mut got = vec![0u8; array.size_bytes() as usize];
    array.read_at(&mut got, 0).unwrap();
    assert!(got == model_view, "degraded reads return the written data");
}
