//! `grow --size` on image files whose devices grew: the array takes the new room, keeps its
//! data, reads zeros in the new region, finds parity and copies consistent, survives a member
//! loss there; refusals write nothing; an interrupted superblock update still assembles.

use raidkit_disk::{Disk, FileDisk, OpenOptions};
use raidkit_engine::{
    read_superblock, write_superblock, Array, AssembleOptions, ConsistencyPolicy, CreateOptions,
    EngineConfig, EngineError, GrowRefusal, GrowSize, TaskKind,
};
use raidkit_metadata::SuperblockVersion;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

const MIB: u64 = 1 << 20;

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p =
            std::env::temp_dir().join(format!("raidkit-grow-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn images(dir: &Path, n: usize, bytes: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("m{i}.img"));
            drop(FileDisk::create(&p, bytes).unwrap());
            p
        })
        .collect()
}

fn open(paths: &[PathBuf]) -> Vec<Box<dyn Disk>> {
    paths
        .iter()
        .map(|p| {
            Box::new(
                FileDisk::open(
                    p,
                    OpenOptions {
                        claim: raidkit_disk::Claim::Unclaimed,
                        ..Default::default()
                    },
                )
                .unwrap(),
            ) as Box<dyn Disk>
        })
        .collect()
}

fn create(
    paths: &[PathBuf],
    level: i32,
    layout: Option<u32>,
    policy: ConsistencyPolicy,
    version: SuperblockVersion,
) -> Array {
    Array::create_with_policy(
        open(paths),
        CreateOptions {
            level,
            layout,
            chunk_sectors: 128,
            raid_devices: paths.len(),
            metadata: version,
            size_sectors: None,
            name: "host:grow".into(),
            set_uuid: [9; 16],
            device_uuids: (0..paths.len()).map(|i| [i as u8 + 20; 16]).collect(),
            ctime_seconds: 1_700_000_000,
            init: raidkit_engine::Init::Zeroed,
            consistency: policy,
            config: EngineConfig::default(),
        },
        policy,
    )
    .unwrap()
}

fn pattern(len: u64, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 2654435761) >> 13) as u8 ^ seed)
        .collect()
}

fn enlarge(paths: &[PathBuf], bytes: u64) {
    for p in paths {
        std::fs::OpenOptions::new()
            .write(true)
            .open(p)
            .unwrap()
            .set_len(bytes)
            .unwrap();
    }
}

/// Fills the member images' new room with garbage, as a larger replacement disk holds.
fn garbage_beyond(paths: &[PathBuf], from: u64, to: u64) {
    use std::os::unix::fs::FileExt;
    for (k, p) in paths.iter().enumerate() {
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.write_all_at(&pattern(to - from, 0x5a ^ k as u8), from)
            .unwrap();
    }
}

fn assemble(paths: &[PathBuf]) -> Array {
    Array::assemble(open(paths), AssembleOptions::default())
        .unwrap()
        .0
}

fn check(array: &Array) -> u64 {
    array
        .run_task(TaskKind::Check, &mut |_| {}, &AtomicBool::new(false))
        .unwrap()
        .progress
        .mismatch_sectors
}

fn grow(paths: &[PathBuf], size: GrowSize) -> Result<raidkit_engine::GrowSizeReport, EngineError> {
    Array::grow_size(open(paths), size, &AssembleOptions::default(), &|_, _| {})
}

#[test]
fn grown_arrays_keep_their_data_read_zeros_beyond_and_stay_consistent() {
    // (level, layout, members, policy)
    let cases: [(i32, Option<u32>, usize, ConsistencyPolicy); 6] = [
        (1, None, 2, ConsistencyPolicy::Resync),
        (4, None, 3, ConsistencyPolicy::Resync),
        (5, None, 4, ConsistencyPolicy::Ppl),
        (6, None, 5, ConsistencyPolicy::Resync),
        (10, Some(0x102), 4, ConsistencyPolicy::Resync),
        (10, Some(0x10201), 3, ConsistencyPolicy::Resync),
    ];
    for (level, layout, n, policy) in cases {
        let ctx = format!("RAID {level} layout {layout:?} x{n}");
        let dir = TempDir::new(&format!("ok{level}"));
        let paths = images(&dir.0, n, 8 * MIB);
        let array = create(&paths, level, layout, policy, SuperblockVersion::V1_2);
        let old_size = array.size_bytes();
        let data = pattern(old_size, level as u8);
        array.write_at(&data, 0, false).unwrap();
        array.stop().unwrap();
        drop(array);

        enlarge(&paths, 12 * MIB);
        garbage_beyond(&paths, 8 * MIB, 12 * MIB);
        let calls = std::sync::atomic::AtomicU64::new(0);
        let report = Array::grow_size(
            open(&paths),
            GrowSize::Max,
            &AssembleOptions::default(),
            &|done, total| {
                assert!(done <= total);
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            },
        )
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert!(calls.into_inner() >= 1, "{ctx}: progress reported");
        // 4 MiB more per member, in whole chunks.
        assert_eq!(
            report.new_member_sectors - report.old_member_sectors,
            8192,
            "{ctx}: {report:?}"
        );
        assert_eq!(report.zeroed_bytes, 4 * MIB * n as u64, "{ctx}");

        let array = assemble(&paths);
        assert_eq!(array.size_bytes(), report.new_array_bytes, "{ctx}");
        assert!(array.size_bytes() > old_size, "{ctx}");
        let mut all = vec![0u8; array.size_bytes() as usize];
        array.read_at(&mut all, 0).unwrap();
        assert!(all[..old_size as usize] == data[..], "{ctx}: old data kept");
        assert!(
            all[old_size as usize..].iter().all(|&b| b == 0),
            "{ctx}: the new region reads zeros"
        );
        assert_eq!(check(&array), 0, "{ctx}: parity and copies consistent");
        // Written in the new region, then read with a member lost: redundancy covers it.
        let more = pattern(array.size_bytes() - old_size, 0x33);
        array.write_at(&more, old_size, false).unwrap();
        array.fail_member(0).unwrap();
        let mut back = vec![0u8; more.len()];
        array.read_at(&mut back, old_size).unwrap();
        assert!(back == more, "{ctx}: new region read degraded");
        array.stop().unwrap();
    }
}

#[test]
fn refusals_name_the_reason_and_write_nothing() {
    let dir = TempDir::new("refuse");
    let cases: [(i32, Option<u32>, usize, ConsistencyPolicy, &str); 3] = [
        (0, None, 3, ConsistencyPolicy::Resync, "RAID 0"),
        (10, Some(0x201), 4, ConsistencyPolicy::Resync, "far layout"),
        (
            5,
            None,
            3,
            ConsistencyPolicy::Bitmap {
                chunk_bytes: 1 << 20,
            },
            "bitmap",
        ),
    ];
    for (k, (level, layout, n, policy, what)) in cases.into_iter().enumerate() {
        let sub = dir.0.join(k.to_string());
        std::fs::create_dir_all(&sub).unwrap();
        let paths = images(&sub, n, 8 * MIB);
        create(&paths, level, layout, policy, SuperblockVersion::V1_2)
            .stop()
            .unwrap();
        enlarge(&paths, 12 * MIB);
        let before: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
        let err = grow(&paths, GrowSize::Max).expect_err(what);
        assert!(matches!(err, EngineError::CannotGrow(_)), "{what}: {err}");
        assert!(err.to_string().contains(what), "{what}: {err}");
        let after: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
        assert!(before == after, "{what}: nothing written");
    }

    // A RAID 5 whose members did not grow, one that asks for less, one degraded.
    let paths = images(&dir.0, 4, 8 * MIB);
    create(
        &paths,
        5,
        None,
        ConsistencyPolicy::Resync,
        SuperblockVersion::V1_2,
    )
    .stop()
    .unwrap();
    assert!(matches!(
        grow(&paths, GrowSize::Max),
        Err(EngineError::CannotGrow(GrowRefusal::AlreadyThatSize { .. }))
    ));
    enlarge(&paths[..3], 12 * MIB);
    match grow(&paths, GrowSize::Sectors(20 * 1024)) {
        Err(EngineError::CannotGrow(GrowRefusal::NoRoom { member, .. })) => {
            assert!(member.ends_with("m3.img"), "{member}")
        }
        other => panic!("expected NoRoom, got {other:?}"),
    }
    assert!(matches!(
        grow(&paths, GrowSize::Sectors(1024)),
        Err(EngineError::CannotGrow(GrowRefusal::Shrink { .. }))
    ));
    let array = assemble(&paths);
    array.fail_member(1).unwrap();
    array.stop().unwrap();
    drop(array);
    enlarge(&paths, 12 * MIB);
    let opts = AssembleOptions {
        run: true,
        ..Default::default()
    };
    let without_1 = [&paths[..1], &paths[2..]].concat();
    match Array::grow_size(open(&without_1), GrowSize::Max, &opts, &|_, _| {}) {
        Err(EngineError::CannotGrow(GrowRefusal::NotWhole { slots })) => {
            assert_eq!(slots, vec![1])
        }
        other => panic!("expected NotWhole, got {other:?}"),
    }
}

#[test]
fn a_superblock_update_cut_short_still_assembles_at_one_size() {
    let dir = TempDir::new("cut");
    let paths = images(&dir.0, 4, 8 * MIB);
    let array = create(
        &paths,
        5,
        None,
        ConsistencyPolicy::Resync,
        SuperblockVersion::V1_2,
    );
    let data = pattern(array.size_bytes(), 1);
    array.write_at(&data, 0, false).unwrap();
    array.stop().unwrap();
    drop(array);
    let old: Vec<_> = open(&paths)
        .iter()
        .map(|d| read_superblock(d.as_ref()).unwrap())
        .collect();
    enlarge(&paths, 12 * MIB);
    grow(&paths, GrowSize::Max).unwrap();
    // As if the power went after the first member's size update: the others still hold the
    // old size and events, with their new data_size already written (the first round).
    let disks = open(&paths);
    for (d, o) in disks.iter().zip(&old).skip(1) {
        let mut sb = read_superblock(d.as_ref()).unwrap().sb;
        sb.size_sectors = o.sb.size_sectors;
        sb.events = o.sb.events;
        write_superblock(d.as_ref(), &sb, o.version).unwrap();
    }
    drop(disks);
    // One event behind is an interrupted update, not a stale member: no --force needed.
    let array = assemble(&paths);
    assert!(array.size_bytes() > data.len() as u64);
    let mut back = vec![0u8; data.len()];
    array.read_at(&mut back, 0).unwrap();
    assert!(back == data);
}

#[test]
fn a_mirror_gains_slots_from_spares_and_loses_them_once_they_are_empty() {
    let dir = TempDir::new("mirrors");
    let paths = images(&dir.0, 4, 8 * MIB);
    let array = create(
        &paths[..2],
        1,
        None,
        ConsistencyPolicy::Resync,
        SuperblockVersion::V1_2,
    );
    let data = pattern(array.size_bytes(), 4);
    array.write_at(&data, 0, false).unwrap();
    array
        .add_spare(open(&paths[2..3]).remove(0), [77; 16])
        .unwrap();
    array.stop().unwrap();
    drop(array);

    // 2 -> 4 slots with one spare: it takes slot 2, slot 3 stays empty.
    let r = Array::grow_mirrors(open(&paths[..3]), 4, &AssembleOptions::default()).unwrap();
    assert_eq!((r.old_raid_devices, r.new_raid_devices), (2, 4));
    assert_eq!(r.new_slots.len(), 1);
    assert_eq!(r.new_slots[0].1, 2);
    assert_eq!(r.empty_slots, vec![3]);
    let opts = AssembleOptions {
        run: true,
        ..Default::default()
    };
    let (array, _) = Array::assemble(open(&paths[..3]), opts.clone()).unwrap();
    assert_eq!(array.geometry().raid_disks, 4);
    assert!(array.pending_tasks().contains(&TaskKind::Rebuild));
    array
        .run_task(TaskKind::Rebuild, &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(check(&array), 0);
    // The new member alone holds the data.
    array.fail_member(0).unwrap();
    array.fail_member(1).unwrap();
    let mut back = vec![0u8; data.len()];
    array.read_at(&mut back, 0).unwrap();
    assert!(back == data, "the rebuilt slot holds the data");
    array.stop().unwrap();
    drop(array);

    // Members 0 and 1 are faulty now; 4 -> 2 slots moves member 2 from slot 2 to slot 0.
    let before: Vec<Vec<u8>> = paths[..3]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert!(matches!(
        Array::grow_mirrors(open(&paths[..3]), 1, &opts),
        Err(EngineError::CannotGrow(GrowRefusal::TooFew { asked: 1 }))
    ));
    let after: Vec<Vec<u8>> = paths[..3]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert!(before == after, "a refusal writes nothing");
    let r = Array::grow_mirrors(open(&paths[2..3]), 2, &opts).unwrap();
    assert_eq!(r.moved.len(), 1);
    assert_eq!((r.moved[0].1, r.moved[0].2), (2, 0));
    let (array, _) = Array::assemble(open(&paths[2..3]), opts.clone()).unwrap();
    assert_eq!(array.geometry().raid_disks, 2);
    let mut back = vec![0u8; data.len()];
    array.read_at(&mut back, 0).unwrap();
    assert!(back == data);
    array.stop().unwrap();
    drop(array);

    // Not a mirror: a change of member count is a reshape, refused.
    let sub = dir.0.join("r5");
    std::fs::create_dir_all(&sub).unwrap();
    let r5 = images(&sub, 3, 8 * MIB);
    create(
        &r5,
        5,
        None,
        ConsistencyPolicy::Resync,
        SuperblockVersion::V1_2,
    )
    .stop()
    .unwrap();
    assert!(matches!(
        Array::grow_mirrors(open(&r5), 4, &AssembleOptions::default()),
        Err(EngineError::CannotGrow(GrowRefusal::CountNotMirror {
            level: 5
        }))
    ));
}

#[test]
fn a_member_assembly_leaves_out_is_not_written() {
    let dir = TempDir::new("left-out");
    let paths = images(&dir.0, 4, 8 * MIB);
    let array = create(
        &paths[..3],
        5,
        None,
        ConsistencyPolicy::Resync,
        SuperblockVersion::V1_2,
    );
    array.write_at(&pattern(1 << 20, 9), 0, false).unwrap();
    // Member 2 fails and a new member takes its slot.
    array.fail_member(2).unwrap();
    array
        .add_spare(open(&paths[3..]).remove(0), [55; 16])
        .unwrap();
    array
        .run_task(TaskKind::Rebuild, &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    array.stop().unwrap();
    drop(array);
    enlarge(&paths, 12 * MIB);
    let old = std::fs::read(&paths[2]).unwrap();
    // Given with the others, the failed member is left out by assembly: the grow goes on
    // without it and never writes it.
    grow(&paths, GrowSize::Max).unwrap();
    assert!(std::fs::read(&paths[2]).unwrap() == old, "left alone");
    let without = [&paths[..2], &paths[3..]].concat();
    let array = assemble(&without);
    assert_eq!(check(&array), 0);
    array.stop().unwrap();
}
