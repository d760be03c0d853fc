//! Reshaping RAID 4/5/6: adding members (`grow --raid-devices`), chunk size and layout
//! changes, RAID 4 to 5 and RAID 5 to 6. The data reads back the same, new room reads zeros,
//! parity is consistent; a power loss at a random point of the reshape (every write not
//! flushed then lands whole, torn or not at all) is followed by `continue_reshape`, with the
//! same result; refusals write nothing.

mod common;
use common::crash::{CrashDisk, Rng};
use raidkit_disk::Disk;
use raidkit_engine::{
    Array, AssembleOptions, ConsistencyPolicy, CreateOptions, EngineConfig, EngineError,
    GrowRefusal, ReshapeControl, ReshapeReport, ReshapeTarget, TaskKind,
};
use raidkit_metadata::SuperblockVersion;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

const MEMBER_BYTES: usize = 3 << 20;
const CHUNK: u32 = 16;

fn boxed(disks: &[CrashDisk]) -> Vec<Box<dyn Disk>> {
    disks
        .iter()
        .map(|d| Box::new(d.clone()) as Box<dyn Disk>)
        .collect()
}

fn create_opts(level: i32, n: usize, policy: ConsistencyPolicy, chunk: u32) -> CreateOptions {
    CreateOptions {
        level,
        layout: None,
        chunk_sectors: chunk,
        raid_devices: n,
        metadata: SuperblockVersion::V1_2,
        size_sectors: None,
        name: "reshape".into(),
        set_uuid: [7; 16],
        device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
        ctime_seconds: 1_700_000_000,
        init: raidkit_engine::Init::Zeroed,
        consistency: policy,
        config: EngineConfig::default(),
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// RAID `level` over `n` members full of a pattern, with `spares` spares added: the members
/// (spares last) and the array's contents.
fn written_array(
    level: i32,
    n: usize,
    spares: usize,
    policy: ConsistencyPolicy,
) -> (Vec<CrashDisk>, Vec<u8>) {
    written_array_chunk(level, n, spares, policy, CHUNK)
}

fn written_array_chunk(
    level: i32,
    n: usize,
    spares: usize,
    policy: ConsistencyPolicy,
    chunk: u32,
) -> (Vec<CrashDisk>, Vec<u8>) {
    written_array_layout(level, None, n, spares, policy, chunk)
}

/// [`written_array_chunk`] with md's `layout` (the level's default when `None`).
fn written_array_layout(
    level: i32,
    layout: Option<u32>,
    n: usize,
    spares: usize,
    policy: ConsistencyPolicy,
    chunk: u32,
) -> (Vec<CrashDisk>, Vec<u8>) {
    let disks: Vec<CrashDisk> = (0..n + spares)
        .map(|i| CrashDisk::new(&format!("m{i}"), MEMBER_BYTES))
        .collect();
    let mut opts = create_opts(level, n, policy, chunk);
    opts.layout = layout;
    let array = Array::create(boxed(&disks[..n]), opts).unwrap();
    let data = pattern(level as u64 * 31 + n as u64, array.size_bytes() as usize);
    for (k, piece) in data.chunks(1 << 20).enumerate() {
        array.write_at(piece, (k << 20) as u64, false).unwrap();
    }
    for (s, d) in disks[n..].iter().enumerate() {
        array
            .add_spare(Box::new(d.clone()), [0x40 + s as u8; 16])
            .unwrap();
    }
    array.stop().unwrap();
    for d in &disks {
        d.flush().unwrap();
    }
    (disks, data)
}

/// Assembles the members and checks: the old contents first, zeros after, `raid_devices`
/// slots, no parity mismatch.
fn verify(disks: &[CrashDisk], data: &[u8], raid_devices: usize) {
    verify_with(disks, data, raid_devices, true)
}

fn verify_with(disks: &[CrashDisk], data: &[u8], raid_devices: usize, check: bool) {
    let (array, _) = Array::assemble(boxed(disks), AssembleOptions::default()).unwrap();
    assert_eq!(array.geometry().raid_disks, raid_devices);
    let size = array.size_bytes() as usize;
    assert!(size > data.len(), "the array grew ({size} bytes)");
    array.stop().unwrap();
    verify_contents(disks, data, check);
}

/// md's level, layout, chunk (sectors) and member count.
type Want = (i32, u32, u64, usize);

/// The members assemble with the geometry `want` and hold `data` (then zeros), consistent.
fn verify_shape(disks: &[CrashDisk], data: &[u8], want: Want) {
    let (array, _) = Array::assemble(boxed(disks), AssembleOptions::default()).unwrap();
    let g = array.geometry();
    assert_eq!(
        (g.md_level(), g.md_layout(), g.chunk_sectors, g.raid_disks),
        want
    );
    assert!(!array.status().degraded, "every member has its slot");
    array.stop().unwrap();
    // A RAID 0 has no redundancy to check.
    verify_contents(disks, data, want.0 != 0);
}

fn verify_contents(disks: &[CrashDisk], data: &[u8], check: bool) {
    let (array, _) = Array::assemble(boxed(disks), AssembleOptions::default()).unwrap();
    let size = array.size_bytes() as usize;
    assert!(size >= data.len());
    let mut got = vec![0u8; size];
    for (k, piece) in got.chunks_mut(1 << 20).enumerate() {
        array.read_at(piece, (k << 20) as u64).unwrap();
    }
    let first_bad = got[..data.len()].iter().zip(data).position(|(a, b)| a != b);
    assert_eq!(
        first_bad, None,
        "old contents differ from byte {first_bad:?}"
    );
    assert!(
        got[data.len()..].iter().all(|&b| b == 0),
        "new room reads zeros"
    );
    if !check {
        array.stop().unwrap();
        return;
    }
    let mismatches = array
        .run_task(TaskKind::Check, &mut |_| {}, &AtomicBool::new(false))
        .unwrap()
        .progress
        .mismatch_sectors;
    assert_eq!(mismatches, 0);
    array.stop().unwrap();
}

/// Every member's bytes, whole.
fn snapshot(disks: &[CrashDisk]) -> Vec<Vec<u8>> {
    disks
        .iter()
        .map(|d| {
            let mut b = vec![0u8; MEMBER_BYTES];
            d.read_at(&mut b, 0).unwrap();
            b
        })
        .collect()
}

fn control(pause_at_bytes: Option<u64>) -> ReshapeControl<'static> {
    static NEVER: AtomicBool = AtomicBool::new(false);
    ReshapeControl {
        progress: &|_, _| {},
        stop: &NEVER,
        pause_at_bytes,
    }
}

fn grow(disks: &[CrashDisk], n: usize) -> Result<raidkit_engine::ReshapeReport, EngineError> {
    Array::grow_members(boxed(disks), n, &AssembleOptions::default(), &control(None))
}

fn continue_reshape(disks: &[CrashDisk]) -> Result<raidkit_engine::ReshapeReport, EngineError> {
    Array::continue_reshape(boxed(disks), &AssembleOptions::default(), &control(None))
}

#[test]
fn raid5_4_to_5_and_raid6_5_to_7_keep_their_data() {
    for (level, n, add) in [(5, 4, 1), (6, 5, 2), (4, 3, 1)] {
        let (disks, data) = written_array(level, n, add, ConsistencyPolicy::Resync);
        let report = grow(&disks, n + add).unwrap();
        assert_eq!(report.new_raid_devices, n + add);
        assert_eq!(report.old_array_bytes as usize, data.len());
        assert_eq!(report.new_members.len(), add);
        assert!(report.new_data_offset < report.old_data_offset);
        verify(&disks, &data, n + add);
    }
}

#[test]
fn a_power_loss_anywhere_in_a_reshape_is_continued() {
    // Writes and flushes one uninterrupted reshape makes, to draw crash points from.
    let (disks, data) = written_array(5, 4, 1, ConsistencyPolicy::Resync);
    let power = Arc::new(AtomicI64::new(i64::MAX));
    let counted: Vec<CrashDisk> = disks.iter().map(|d| d.clone().on_power(&power)).collect();
    grow(&counted, 5).unwrap();
    let budget = i64::MAX - power.load(Ordering::SeqCst);
    verify(&disks, &data, 5);
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for round in 0..40 {
        let (disks, data) = written_array(5, 4, 1, ConsistencyPolicy::Resync);
        let power = Arc::new(AtomicI64::new(rng.below(budget as u64) as i64));
        let cut: Vec<CrashDisk> = disks.iter().map(|d| d.clone().on_power(&power)).collect();
        let first = grow(&cut, 5);
        assert!(
            first.is_err(),
            "round {round}: the power went before the end"
        );
        for d in &disks {
            d.crash(&mut rng);
        }
        // The members record a reshape to continue, or none: the power went in the first
        // superblock round (grow again) or in the last (it is finished).
        match continue_reshape(&disks) {
            Ok(_) => {}
            Err(EngineError::CannotGrow(GrowRefusal::NoReshape)) => match grow(&disks, 5) {
                Ok(_) | Err(EngineError::CannotGrow(GrowRefusal::SameCount { .. })) => {}
                Err(e) => panic!("round {round}: grow again failed: {e}"),
            },
            Err(e) => panic!("round {round}: continue failed: {e}"),
        }
        verify(&disks, &data, 5);
    }
}

#[test]
fn an_array_with_a_reshape_in_progress_is_not_served() {
    let (disks, _) = written_array(5, 4, 1, ConsistencyPolicy::Resync);
    let power = Arc::new(AtomicI64::new(60));
    let cut: Vec<CrashDisk> = disks.iter().map(|d| d.clone().on_power(&power)).collect();
    assert!(grow(&cut, 5).is_err());
    for d in &disks {
        d.crash(&mut Rng(3));
    }
    match Array::assemble(boxed(&disks), AssembleOptions::default()) {
        Err(EngineError::ReshapeInProgress {
            new_raid_disks,
            old_raid_disks,
            ..
        }) => {
            assert_eq!((old_raid_disks, new_raid_disks), (4, 5));
        }
        other => panic!("assembled: {:?}", other.map(|_| ())),
    }
}

#[test]
fn refusals_write_nothing() {
    // No spare given for the new slot.
    let (disks, _) = written_array(5, 4, 0, ConsistencyPolicy::Resync);
    let before = snapshot(&disks);
    match grow(&disks, 5) {
        Err(EngineError::CannotGrow(GrowRefusal::NoSpare {
            needed: 1,
            given: 0,
        })) => {}
        other => panic!("{other:?}"),
    }
    assert!(snapshot(&disks) == before);
    // md does not reshape with a partial parity log.
    let (disks, _) = written_array(5, 4, 1, ConsistencyPolicy::Ppl);
    let before = snapshot(&disks);
    match grow(&disks, 5) {
        Err(EngineError::CannotGrow(GrowRefusal::WriteLog { policy: "ppl" })) => {}
        other => panic!("{other:?}"),
    }
    assert!(snapshot(&disks) == before);
    // Fewer members without the word that the array may shrink, and no reshape to continue.
    let (disks, _) = written_array(5, 4, 1, ConsistencyPolicy::Resync);
    let before = snapshot(&disks);
    assert!(matches!(
        grow(&disks, 3),
        Err(EngineError::CannotGrow(GrowRefusal::WouldShrink { .. }))
    ));
    assert!(matches!(
        continue_reshape(&disks),
        Err(EngineError::CannotGrow(GrowRefusal::NoReshape))
    ));
    assert!(snapshot(&disks) == before);
}

#[test]
fn a_paused_reshape_is_recorded_and_continued() {
    let (disks, data) = written_array(6, 4, 1, ConsistencyPolicy::Resync);
    let paused = Array::grow_members(
        boxed(&disks),
        5,
        &AssembleOptions::default(),
        &control(Some(data.len() as u64 / 2)),
    )
    .unwrap();
    assert!(!paused.finished);
    assert!(paused.position_sectors * 512 >= data.len() as u64 / 2);
    let sb = raidkit_engine::read_superblock(&disks[0]).unwrap().sb;
    let r = sb.reshape().expect("the reshape is recorded");
    assert_eq!(r.reshape_position_sectors, paused.position_sectors);
    assert_eq!((sb.raid_disks, r.delta_disks), (5, 1));
    assert!(r.new_offset_sectors < 0, "data moves down");
    let done = continue_reshape(&disks).unwrap();
    assert!(done.finished);
    assert_eq!(done.started_at_sectors, paused.position_sectors);
    verify(&disks, &data, 5);
}

#[test]
fn a_member_failing_during_a_reshape_degrades_it_and_it_finishes() {
    for (level, n, dies, after) in [(5, 4, 2, 40), (6, 5, 4, 25), (6, 5, 5, 10)] {
        let (mut disks, data) = written_array(level, n, 1, ConsistencyPolicy::Resync);
        // One member dies after `after` writes and flushes of the reshape.
        let power = Arc::new(AtomicI64::new(after));
        disks[dies] = disks[dies].clone().on_power(&power);
        let report = grow(&disks, n + 1).unwrap();
        assert!(report.finished, "RAID {level}");
        assert_eq!(
            report.failed_members,
            vec![format!("m{dies}")],
            "RAID {level}"
        );
        // The dead member stays dead; the others assemble degraded and read it all.
        let alive: Vec<CrashDisk> = disks
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != dies)
            .map(|(_, d)| d.clone())
            .collect();
        verify_with(&alive, &data, n + 1, false);
        let (array, _) = Array::assemble(boxed(&alive), AssembleOptions::default()).unwrap();
        assert!(array.status().degraded, "RAID {level}");
        array.stop().unwrap();
    }
}

#[test]
fn a_second_failure_on_raid5_stops_the_reshape_and_continue_refuses() {
    let (mut disks, _) = written_array(5, 4, 1, ConsistencyPolicy::Resync);
    let power = Arc::new(AtomicI64::new(30));
    disks[1] = disks[1].clone().on_power(&power);
    disks[3] = disks[3].clone().on_power(&power);
    assert!(grow(&disks, 5).is_err());
    // The three members left cannot carry a RAID 5 over five: refused, nothing written.
    let alive: Vec<CrashDisk> = [0, 2, 4].iter().map(|&i| disks[i].clone()).collect();
    let before = snapshot(&alive);
    match continue_reshape(&alive) {
        Err(EngineError::Unavailable { detail }) => assert!(detail.contains("1, 3"), "{detail}"),
        other => panic!("{:?}", other.map(|r| r.finished)),
    }
    assert!(snapshot(&alive) == before, "a refusal wrote");
}

#[test]
fn a_degraded_reshape_is_continued_without_its_dead_member() {
    let (mut disks, data) = written_array(6, 5, 1, ConsistencyPolicy::Resync);
    let power = Arc::new(AtomicI64::new(12));
    disks[1] = disks[1].clone().on_power(&power);
    let paused = Array::grow_members(
        boxed(&disks),
        6,
        &AssembleOptions::default(),
        &control(Some(data.len() as u64 / 2)),
    )
    .unwrap();
    assert!(!paused.finished);
    assert_eq!(paused.failed_members, vec!["m1".to_string()]);
    let alive: Vec<CrashDisk> = [0, 2, 3, 4, 5].iter().map(|&i| disks[i].clone()).collect();
    let done = continue_reshape(&alive).unwrap();
    assert!(done.finished && done.failed_members.is_empty());
    verify_with(&alive, &data, 6, false);
}

fn reshape(disks: &[CrashDisk], target: &ReshapeTarget) -> Result<ReshapeReport, EngineError> {
    Array::reshape(
        boxed(disks),
        target,
        &AssembleOptions::default(),
        &control(None),
    )
}

fn target(level: Option<i32>, layout: Option<u32>, chunk: Option<u64>) -> ReshapeTarget {
    ReshapeTarget {
        raid_devices: None,
        level,
        layout,
        chunk_sectors: chunk,
        array_sectors: None,
    }
}

/// The restripes: (level, members, spares, chunk, target, geometry after).
fn restripes() -> Vec<(i32, usize, usize, u32, ReshapeTarget, Want)> {
    const LS: u32 = 2;
    vec![
        // Chunk 8 KiB -> 32 KiB and back down, RAID 5 and 6.
        (5, 4, 0, 16, target(None, None, Some(64)), (5, LS, 64, 4)),
        (5, 4, 0, 64, target(None, None, Some(16)), (5, LS, 16, 4)),
        (6, 5, 0, 16, target(None, None, Some(32)), (6, LS, 32, 5)),
        // Layout: left-symmetric -> right-asymmetric; RAID 6 to parity-first-6.
        (5, 4, 0, 16, target(None, Some(1), None), (5, 1, 16, 4)),
        (6, 5, 0, 16, target(None, Some(20), None), (6, 20, 16, 5)),
        // RAID 4 -> 5 (left-symmetric), RAID 5 -> 6 (its Q on the spare), RAID 4 -> 6.
        (4, 4, 0, 16, target(Some(5), Some(LS), None), (5, LS, 16, 4)),
        (5, 4, 1, 16, target(Some(6), None, None), (6, LS, 16, 5)),
        (4, 3, 1, 16, target(Some(6), Some(LS), None), (6, LS, 16, 4)),
        // RAID 0 -> 5 and 6 (md's takeover as parity-last on the spares, then a restripe).
        (0, 3, 1, 16, target(Some(5), None, None), (5, LS, 16, 4)),
        (0, 3, 2, 16, target(Some(6), None, None), (6, LS, 16, 5)),
        // RAID 6 -> 5: restriped to left-symmetric-6, its Q member left as a spare.
        (6, 5, 0, 16, target(Some(5), None, None), (5, LS, 16, 4)),
        // RAID 5 -> 4 and -> 0: restriped to parity-last; for RAID 0 its parity member left.
        (5, 4, 0, 16, target(Some(4), None, None), (4, 0, 16, 4)),
        (5, 4, 0, 16, target(Some(0), None, None), (0, 0, 16, 3)),
        // RAID 10, 2 near copies, from 4 to 6 members; a new chunk size.
        (10, 4, 2, 16, ReshapeTarget::members(6), (10, 0x102, 16, 6)),
        (
            10,
            4,
            0,
            16,
            target(None, None, Some(64)),
            (10, 0x102, 64, 4),
        ),
        // RAID 10 near copies over counts that are not a whole number of copies (md's
        // raid10 steps chunk by chunk; 5 members of 2 copies hold 5 chunks in two rows).
        (10, 4, 1, 16, ReshapeTarget::members(5), (10, 0x102, 16, 5)),
        (10, 3, 2, 16, ReshapeTarget::members(5), (10, 0x102, 16, 5)),
        (
            10,
            5,
            0,
            16,
            target(None, None, Some(32)),
            (10, 0x102, 32, 5),
        ),
        // RAID 0 from 3 to 5 members (md's way: a RAID 4 without its parity in between), a
        // RAID 0's chunk, and both.
        (0, 3, 2, 16, ReshapeTarget::members(5), (0, 0, 16, 5)),
        (0, 3, 0, 16, target(None, None, Some(64)), (0, 0, 64, 3)),
        (
            0,
            3,
            1,
            64,
            ReshapeTarget {
                raid_devices: Some(4),
                chunk_sectors: Some(32),
                ..Default::default()
            },
            (0, 0, 32, 4),
        ),
        // RAID 5 -> 6 with one more data member too, and a new chunk.
        (
            5,
            4,
            2,
            16,
            ReshapeTarget {
                raid_devices: Some(6),
                level: Some(6),
                layout: None,
                chunk_sectors: Some(32),
                array_sectors: None,
            },
            (6, LS, 32, 6),
        ),
    ]
}

#[test]
fn chunk_layout_and_level_changes_keep_the_data() {
    for (level, n, spares, chunk, t, want) in restripes() {
        let (disks, data) = written_array_chunk(level, n, spares, ConsistencyPolicy::Resync, chunk);
        let report = reshape(&disks, &t).unwrap_or_else(|e| panic!("{t:?}: {e}"));
        assert!(report.finished, "{t:?}");
        assert!(report.new_data_offset < report.old_data_offset, "{t:?}");
        verify_shape(&disks, &data, want);
    }
}

#[test]
fn a_power_loss_in_a_restripe_is_continued() {
    let mut rng = Rng(0x0dd_ba11_5eed_0002);
    for (k, (level, n, spares, chunk, t, want)) in restripes().into_iter().enumerate() {
        let make = || written_array_chunk(level, n, spares, ConsistencyPolicy::Resync, chunk);
        crash_rounds(k, level, &make, &t, want, &mut rng);
    }
}

/// Six runs of the reshape `t` on arrays `make` writes, each cut by a power loss at a random
/// point of one uninterrupted run's writes and flushes, then continued: the result holds the
/// data in the shape `want`.
fn crash_rounds(
    k: usize,
    level: i32,
    make: &dyn Fn() -> (Vec<CrashDisk>, Vec<u8>),
    t: &ReshapeTarget,
    want: Want,
    rng: &mut Rng,
) {
    // The writes and flushes of one uninterrupted run, to draw crash points from.
    let (disks, _) = make();
    let power = Arc::new(AtomicI64::new(i64::MAX));
    let counted: Vec<CrashDisk> = disks.iter().map(|d| d.clone().on_power(&power)).collect();
    reshape(&counted, t).unwrap();
    let budget = i64::MAX - power.load(Ordering::SeqCst);
    for round in 0..6 {
        let (disks, data) = make();
        let power = Arc::new(AtomicI64::new(rng.below(budget as u64) as i64));
        let cut: Vec<CrashDisk> = disks.iter().map(|d| d.clone().on_power(&power)).collect();
        assert!(reshape(&cut, t).is_err(), "case {k} round {round}");
        for d in &disks {
            d.crash(rng);
        }
        match continue_reshape(&disks) {
            Ok(_) => {}
            // The power went in the first superblock round (start again) or the last
            // (finished).
            Err(EngineError::CannotGrow(GrowRefusal::NoReshape)) => match reshape(&disks, t) {
                Ok(_)
                | Err(EngineError::CannotGrow(
                    GrowRefusal::NothingToChange | GrowRefusal::SameCount { .. },
                )) => {}
                Err(e) => panic!("case {k} round {round}: again: {e}"),
            },
            Err(e) => panic!("case {k} round {round}: continue: {e}"),
        }
        // A RAID 6 to 5 that was continued ends in its RAID 5 form (md's `*-6` layout:
        // the superblocks record no more than that); asked again, the Q member leaves.
        if t.level.is_some_and(|l| l < level) {
            match reshape(&disks, t) {
                Ok(_) | Err(EngineError::CannotGrow(GrowRefusal::NothingToChange)) => {}
                Err(e) => panic!("case {k} round {round}: to RAID 5: {e}"),
            }
        }
        verify_shape(&disks, &data, want);
    }
}

/// RAID 10 with 2 offset copies (md's o2, layout 0x10201), as md reshapes it: more members,
/// and near to offset and back (md keeps the number of copies); each whole and
/// each cut by power losses and continued.
#[test]
fn raid10_offset_layouts_reshape_and_change_to_and_from_near() {
    const O2: u32 = 0x10201;
    const N2: u32 = 0x102;
    let cases: Vec<(u32, usize, usize, ReshapeTarget, Want)> = vec![
        (O2, 4, 2, ReshapeTarget::members(6), (10, O2, 16, 6)),
        (N2, 4, 0, target(None, Some(O2), None), (10, O2, 16, 4)),
        (O2, 4, 0, target(None, Some(N2), None), (10, N2, 16, 4)),
        // A new chunk for an offset layout, larger and smaller (its groups of rows are the
        // chunk times the far copies).
        (O2, 4, 0, target(None, None, Some(32)), (10, O2, 32, 4)),
        (O2, 5, 0, target(None, None, Some(8)), (10, O2, 8, 5)),
        (
            N2,
            4,
            2,
            ReshapeTarget {
                raid_devices: Some(6),
                layout: Some(O2),
                ..Default::default()
            },
            (10, O2, 16, 6),
        ),
    ];
    let mut rng = Rng(0x000f_f5e7_0002);
    for (k, (layout, n, spares, t, want)) in cases.into_iter().enumerate() {
        let make = || written_raid10(layout, n, spares);
        let (disks, data) = make();
        let report = reshape(&disks, &t).unwrap_or_else(|e| panic!("{t:?}: {e}"));
        assert!(report.finished, "{t:?}");
        verify_shape(&disks, &data, want);
        crash_rounds(k, 10, &make, &t, want, &mut rng);
    }
    // md keeps the number of copies, and does not reshape to or from far layouts.
    let (disks, _) = written_raid10(O2, 4, 0);
    let before = snapshot(&disks);
    assert!(reshape(&disks, &target(None, Some(0x202), None)).is_err());
    assert!(reshape(&disks, &target(None, Some(0x103), None)).is_err());
    assert!(snapshot(&disks) == before);
    // An offset layout holds whole groups of rows only: on members of an odd number of
    // chunks it would hold less than the near layout does, so the change is refused rather
    // than dropping the array's end.
    let disks: Vec<CrashDisk> = (0..4)
        .map(|i| CrashDisk::new(&format!("q{i}"), MEMBER_BYTES))
        .collect();
    let mut opts = create_opts(10, 4, ConsistencyPolicy::Resync, CHUNK);
    opts.size_sectors = Some(CHUNK as u64 * 65);
    Array::create(boxed(&disks), opts).unwrap().stop().unwrap();
    let before = snapshot(&disks);
    assert!(matches!(
        refused_on(&disks, target(None, Some(O2), None)),
        GrowRefusal::WouldShrink { .. }
    ));
    assert!(snapshot(&disks) == before, "a refusal wrote");
    // So too a larger chunk for an offset layout: 66 chunks of 8 KiB hold 33 groups of two
    // rows, 33 chunks of 16 KiB only 16.
    let disks: Vec<CrashDisk> = (0..4)
        .map(|i| CrashDisk::new(&format!("r{i}"), MEMBER_BYTES))
        .collect();
    let mut opts = create_opts(10, 4, ConsistencyPolicy::Resync, CHUNK);
    opts.layout = Some(O2);
    opts.size_sectors = Some(CHUNK as u64 * 66);
    Array::create(boxed(&disks), opts).unwrap().stop().unwrap();
    let before = snapshot(&disks);
    assert!(matches!(
        refused_on(&disks, target(None, None, Some(32))),
        GrowRefusal::WouldShrink { .. }
    ));
    assert!(snapshot(&disks) == before, "a refusal wrote");
    // And a chunk whose groups of rows are larger than what each member holds (64 sectors,
    // chunk 64 times 2 far copies): the array would hold nothing.
    let disks: Vec<CrashDisk> = (0..4)
        .map(|i| CrashDisk::new(&format!("s{i}"), MEMBER_BYTES))
        .collect();
    let mut opts = create_opts(10, 4, ConsistencyPolicy::Resync, CHUNK);
    opts.layout = Some(O2);
    opts.size_sectors = Some(64);
    Array::create(boxed(&disks), opts).unwrap().stop().unwrap();
    let before = snapshot(&disks);
    assert!(matches!(
        refused_on(&disks, target(None, None, Some(64))),
        GrowRefusal::WouldShrink { new_sectors: 0, .. }
    ));
    assert!(snapshot(&disks) == before, "a refusal wrote");
}

/// Three near copies over 4 members, grown to 5 and then 7: no count a whole number of
/// copies; each whole and cut by power losses and continued. An offset layout over such a
/// count is refused (md would move the data offset less than its groups of rows need).
#[test]
fn raid10_three_near_copies_grow_over_any_count() {
    const N3: u32 = 0x103;
    let cases: Vec<(usize, usize, ReshapeTarget, Want)> = vec![
        (4, 1, ReshapeTarget::members(5), (10, N3, 16, 5)),
        (5, 2, ReshapeTarget::members(7), (10, N3, 16, 7)),
    ];
    let mut rng = Rng(0x000f_f5e7_0003);
    for (k, (n, spares, t, want)) in cases.into_iter().enumerate() {
        let make = || written_raid10(N3, n, spares);
        let (disks, data) = make();
        let report = reshape(&disks, &t).unwrap_or_else(|e| panic!("{t:?}: {e}"));
        assert!(
            report.finished && report.new_raid_devices == want.3,
            "{t:?}"
        );
        verify_shape(&disks, &data, want);
        crash_rounds(k, 10, &make, &t, want, &mut rng);
    }
    let (disks, _) = written_raid10(0x102, 3, 1);
    let before = snapshot(&disks);
    assert!(matches!(
        refused_on(
            &disks,
            ReshapeTarget {
                raid_devices: Some(4),
                layout: Some(0x10201),
                ..Default::default()
            }
        ),
        GrowRefusal::ReshapeNotYet { .. }
    ));
    assert!(snapshot(&disks) == before, "a refusal wrote");
}

/// A RAID 10 of `layout` over `n` members full of a pattern, `spares` spares added.
fn written_raid10(layout: u32, n: usize, spares: usize) -> (Vec<CrashDisk>, Vec<u8>) {
    written_array_layout(
        10,
        Some(layout),
        n,
        spares,
        ConsistencyPolicy::Resync,
        CHUNK,
    )
}

#[test]
fn a_raid5_becoming_raid6_records_its_new_q_as_md_does_and_survives_a_failure() {
    // Paused half way: the new Q member is recorded recovered up to the position.
    let (disks, data) = written_array(5, 4, 1, ConsistencyPolicy::Resync);
    let paused = Array::reshape(
        boxed(&disks),
        &target(Some(6), None, None),
        &AssembleOptions::default(),
        &control(Some(data.len() as u64 / 2)),
    )
    .unwrap();
    assert!(!paused.finished);
    let sb = raidkit_engine::read_superblock(&disks[4]).unwrap().sb;
    let r = sb.reshape().expect("recorded");
    assert_eq!((sb.level.to_md(), sb.layout, r.new_layout), (6, 18, 2));
    assert_eq!((sb.raid_disks, r.delta_disks), (5, 0));
    // In member sectors, as md: the position over the 3 data members.
    assert_eq!(sb.recovery_offset(), Some(paused.position_sectors / 3));
    assert_eq!(
        raidkit_engine::read_superblock(&disks[0])
            .unwrap()
            .sb
            .recovery_offset(),
        None
    );
    // A data member dies while it goes on: the old half is read from P alone.
    let mut disks = disks;
    let power = Arc::new(AtomicI64::new(5));
    disks[1] = disks[1].clone().on_power(&power);
    let done = continue_reshape(&disks).unwrap();
    assert!(done.finished);
    assert_eq!(done.failed_members, vec!["m1".to_string()]);
    let alive: Vec<CrashDisk> = [0, 2, 3, 4].iter().map(|&i| disks[i].clone()).collect();
    let (array, _) = Array::assemble(boxed(&alive), AssembleOptions::default()).unwrap();
    let g = array.geometry();
    assert_eq!((g.md_level(), g.md_layout(), g.raid_disks), (6, 2, 5));
    let mut got = vec![0u8; data.len()];
    array.read_at(&mut got, 0).unwrap();
    assert!(got == data, "RAID 6 missing a member reads the data");
    array.stop().unwrap();
}

#[test]
fn level_and_chunk_refusals_write_nothing() {
    let (disks, _) = written_array(5, 4, 1, ConsistencyPolicy::Resync);
    let before = snapshot(&disks);
    let refused = |t: ReshapeTarget| refused_on(&disks, t);
    assert!(matches!(
        refused(target(Some(10), None, None)),
        GrowRefusal::LevelImpossible {
            from: 5,
            to: 10,
            ..
        }
    ));
    assert!(matches!(
        refused(ReshapeTarget {
            raid_devices: Some(5),
            ..target(Some(4), None, None)
        }),
        GrowRefusal::ReshapeNotYet { .. }
    ));
    assert!(matches!(
        refused(target(None, Some(2), Some(CHUNK as u64))),
        GrowRefusal::NothingToChange
    ));
    // A chunk the members' data is not a whole number of.
    let used = raidkit_engine::read_superblock(&disks[0])
        .unwrap()
        .sb
        .size_sectors;
    let big = (used + 1).next_power_of_two();
    assert!(matches!(
        refused(target(None, None, Some(big))),
        GrowRefusal::ChunkNotDividing { .. }
    ));
    assert!(snapshot(&disks) == before);
    // A member too small for the reshape never becomes a spare to take a new slot.
    let disks: Vec<CrashDisk> = (0..5)
        .map(|i| CrashDisk::new(&format!("m{i}"), if i < 4 { MEMBER_BYTES } else { 2 << 20 }))
        .collect();
    let array = Array::create(
        boxed(&disks[..4]),
        create_opts(5, 4, ConsistencyPolicy::Resync, CHUNK),
    )
    .unwrap();
    let whole = |d: &CrashDisk| {
        let mut b = vec![0u8; 2 << 20];
        d.read_at(&mut b, 0).unwrap();
        b
    };
    let small = whole(&disks[4]);
    assert!(matches!(
        array.add_spare(Box::new(disks[4].clone()), [0x40; 16]),
        Err(EngineError::SizeMismatch { .. })
    ));
    assert!(whole(&disks[4]) == small, "nothing written on it");
    array.stop().unwrap();
    // A RAID 6 missing a member is not restriped (it would run without redundancy).
    let (disks, _) = written_array(6, 5, 0, ConsistencyPolicy::Resync);
    let alive: Vec<CrashDisk> = disks[1..].to_vec();
    let before = snapshot(&alive);
    let run = AssembleOptions {
        run: true,
        ..Default::default()
    };
    match Array::reshape(
        boxed(&alive),
        &target(None, None, Some(32)),
        &run,
        &control(None),
    ) {
        Err(EngineError::CannotGrow(GrowRefusal::NotWhole { slots })) => {
            assert_eq!(slots, vec![0])
        }
        other => panic!("{:?}", other.map(|r| r.finished)),
    }
    assert!(snapshot(&alive) == before);
}

#[test]
fn a_level_change_that_moves_nothing_takes_over_and_rebuilds_the_new_parity() {
    // RAID 0 -> 4, RAID 5 -> 6 keeping the layout (left-symmetric-6), RAID 4 -> 5 as
    // parity-last: md changes only the level, then recovers the new parity member.
    for (level, n, spares, t, want) in [
        (0, 3, 1, target(Some(4), None, None), (4, 0, 16, 4)),
        (5, 4, 1, target(Some(6), Some(18), None), (6, 18, 16, 5)),
        (4, 4, 0, target(Some(5), None, None), (5, 5, 16, 4)),
        // RAID 4 -> 0: the parity member leaves.
        (4, 4, 0, target(Some(0), None, None), (0, 0, 16, 3)),
    ] {
        let (disks, data) = written_array(level, n, spares, ConsistencyPolicy::Resync);
        let report = reshape(&disks, &t).unwrap();
        assert_eq!(report.rebuild_slots, (n..n + spares).collect::<Vec<_>>());
        assert_eq!(report.written_bytes, 0, "nothing moves");
        let (array, _) = Array::assemble(boxed(&disks), AssembleOptions::default()).unwrap();
        assert_eq!(array.status().degraded, spares > 0, "{t:?}");
        if want.0 == 0 {
            array.stop().unwrap();
            verify_shape(&disks, &data, want);
            continue;
        }
        let rebuilt = array
            .run_task(TaskKind::Rebuild, &mut |_| {}, &AtomicBool::new(false))
            .unwrap();
        use raidkit_engine::TaskOutcome;
        let done = if spares > 0 {
            TaskOutcome::Completed
        } else {
            TaskOutcome::Nothing
        };
        assert_eq!(rebuilt.outcome, done, "{t:?}");
        array.stop().unwrap();
        verify_shape(&disks, &data, want);
    }
}

#[test]
fn a_raid6_in_its_raid5_form_becomes_a_raid5_at_once() {
    // RAID 5 -> 6 keeping the layout (left-symmetric-6, the new Q rebuilt), then back.
    let (disks, data) = written_array(5, 4, 1, ConsistencyPolicy::Resync);
    reshape(&disks, &target(Some(6), Some(18), None)).unwrap();
    let (array, _) = Array::assemble(boxed(&disks), AssembleOptions::default()).unwrap();
    array
        .run_task(TaskKind::Rebuild, &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    array.stop().unwrap();
    let report = reshape(&disks, &target(Some(5), None, None)).unwrap();
    assert_eq!(report.written_bytes, 0, "nothing moves");
    assert_eq!((report.new_level, report.new_raid_devices), (5, 4));
    verify_shape(&disks, &data, (5, 2, 16, 4));
    let sb = raidkit_engine::read_superblock(&disks[4]).unwrap().sb;
    assert_eq!(
        sb.role(),
        raidkit_metadata::DevRole::Spare,
        "the Q member left"
    );
}

/// The refusal of `t` on `disks` (panics if it is not refused).
fn refused_on(disks: &[CrashDisk], t: ReshapeTarget) -> GrowRefusal {
    match reshape(disks, &t) {
        Err(EngineError::CannotGrow(why)) => why,
        other => panic!("{t:?}: {:?}", other.map(|r| r.finished)),
    }
}

/// RAID `level` over `n` members using `size` sectors of each (room left behind the data),
/// holding a pattern in its first `keep` bytes, zeros after: the members and that pattern.
fn written_small(level: i32, n: usize, size: u64, keep: usize) -> (Vec<CrashDisk>, Vec<u8>) {
    let disks: Vec<CrashDisk> = (0..n)
        .map(|i| CrashDisk::new(&format!("m{i}"), MEMBER_BYTES))
        .collect();
    let mut opts = create_opts(level, n, ConsistencyPolicy::Resync, CHUNK);
    opts.size_sectors = Some(size);
    let array = Array::create(boxed(&disks), opts).unwrap();
    let data = pattern(size + n as u64, keep);
    array.write_at(&data, 0, false).unwrap();
    array.stop().unwrap();
    for d in &disks {
        d.flush().unwrap();
    }
    (disks, data)
}

#[test]
fn fewer_members_shrink_the_array_backwards_as_md() {
    const SIZE: u64 = 3072;
    for (level, n) in [(5, 5), (6, 6), (4, 4)] {
        let parity = if level == 6 { 2 } else { 1 };
        let keep = ((n - 1 - parity) as u64 * SIZE * 512) as usize;
        let (disks, data) = written_small(level, n, SIZE, keep);
        let fewer = ReshapeTarget {
            raid_devices: Some(n - 1),
            ..Default::default()
        };
        // Refused without the caller's word on the new size, nothing written.
        let before = snapshot(&disks);
        assert!(matches!(
            refused_on(&disks, fewer.clone()),
            GrowRefusal::WouldShrink { .. }
        ));
        assert!(snapshot(&disks) == before, "RAID {level}: a refusal wrote");
        let t = ReshapeTarget {
            array_sectors: Some(keep as u64 / 512),
            ..fewer
        };
        let report = reshape(&disks, &t).unwrap();
        assert!(report.finished, "RAID {level}");
        assert!(
            report.new_data_offset > report.old_data_offset,
            "data moves up"
        );
        assert_eq!(report.new_raid_devices, n - 1);
        let layout = if level == 4 { 0 } else { 2 };
        verify_shape(&disks, &data, (level, layout, CHUNK as u64, n - 1));
        let sb = raidkit_engine::read_superblock(&disks[n - 1]).unwrap().sb;
        assert_eq!(sb.role(), raidkit_metadata::DevRole::Spare, "RAID {level}");
    }
}

#[test]
fn a_power_loss_in_a_shrinking_reshape_is_continued() {
    const SIZE: u64 = 3072;
    let keep = (3 * SIZE * 512) as usize;
    let t = ReshapeTarget {
        raid_devices: Some(4),
        array_sectors: Some(keep as u64 / 512),
        ..Default::default()
    };
    let (disks, _) = written_small(5, 5, SIZE, keep);
    let power = Arc::new(AtomicI64::new(i64::MAX));
    let counted: Vec<CrashDisk> = disks.iter().map(|d| d.clone().on_power(&power)).collect();
    reshape(&counted, &t).unwrap();
    let budget = i64::MAX - power.load(Ordering::SeqCst);
    let mut rng = Rng(0x0bac_4a2d_5eed_0001);
    for round in 0..20 {
        let (disks, data) = written_small(5, 5, SIZE, keep);
        let power = Arc::new(AtomicI64::new(rng.below(budget as u64) as i64));
        let cut: Vec<CrashDisk> = disks.iter().map(|d| d.clone().on_power(&power)).collect();
        assert!(reshape(&cut, &t).is_err(), "round {round}");
        for d in &disks {
            d.crash(&mut rng);
        }
        match continue_reshape(&disks) {
            Ok(_) => {}
            Err(EngineError::CannotGrow(GrowRefusal::NoReshape)) => match reshape(&disks, &t) {
                Ok(_) | Err(EngineError::CannotGrow(GrowRefusal::SameCount { .. })) => {}
                Err(e) => panic!("round {round}: again: {e}"),
            },
            Err(e) => panic!("round {round}: continue: {e}"),
        }
        verify_shape(&disks, &data, (5, 2, CHUNK as u64, 4));
    }
}

/// The role `disk`'s own superblock records.
fn role_of(disk: &CrashDisk) -> raidkit_metadata::DevRole {
    raidkit_engine::read_superblock(disk).unwrap().sb.role()
}

/// Rebuilds what the array on `disks` has to rebuild; the outcome.
fn rebuild(disks: &[CrashDisk]) -> raidkit_engine::TaskOutcome {
    let (array, _) = Array::assemble(boxed(disks), AssembleOptions::default()).unwrap();
    let r = array
        .run_task(TaskKind::Rebuild, &mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    array.stop().unwrap();
    r.outcome
}

#[test]
fn a_two_member_raid1_becomes_raid5_and_back_moving_nothing() {
    let (disks, data) = written_array(1, 2, 0, ConsistencyPolicy::Resync);
    let before = snapshot(&disks);
    let r = reshape(&disks, &target(Some(5), None, None)).unwrap();
    assert_eq!((r.old_level, r.new_level, r.new_layout), (1, 5, 2));
    assert_eq!(r.written_bytes, 0, "nothing moves");
    // md's raid5_takeover_raid1: the largest chunk up to 64 KiB dividing the size.
    let chunk = r.new_chunk_sectors;
    assert!(chunk.is_power_of_two() && (8..=128).contains(&chunk));
    let used = raidkit_engine::read_superblock(&disks[0])
        .unwrap()
        .sb
        .size_sectors;
    assert_eq!(used % chunk, 0);
    assert!(chunk == 128 || !used.is_multiple_of(2 * chunk));
    verify_shape(&disks, &data, (5, 2, chunk, 2));
    // Only superblocks changed: every data sector is where it was.
    let sb = raidkit_engine::read_superblock(&disks[0]).unwrap().sb;
    let data_at = (sb.data_offset_sectors * 512) as usize;
    let end = data_at + data.len();
    assert!(snapshot(&disks)
        .iter()
        .zip(&before)
        .all(|(a, b)| a[data_at..end] == b[data_at..end]));
    let back = reshape(&disks, &target(Some(1), None, None)).unwrap();
    assert_eq!((back.new_level, back.new_raid_devices), (1, 2));
    verify_shape(&disks, &data, (1, 0, 0, 2));
}

#[test]
fn a_raid0_becomes_raid10_near2_on_spares_and_back() {
    // Three members and three spares: member k takes slot 2k, the spares the odd slots,
    // rebuilt from their pairs.
    let (disks, data) = written_array(0, 3, 3, ConsistencyPolicy::Resync);
    let r = reshape(&disks, &target(Some(10), None, None)).unwrap();
    assert_eq!(r.rebuild_slots, vec![1, 3, 5]);
    assert_eq!(
        (r.new_level, r.new_layout, r.new_raid_devices),
        (10, 0x102, 6)
    );
    assert_eq!(r.written_bytes, 0, "nothing moves");
    assert_eq!(
        rebuild(&disks),
        raidkit_engine::TaskOutcome::Completed,
        "the copies are rebuilt"
    );
    verify_shape(&disks, &data, (10, 0x102, CHUNK as u64, 6));
    // Back: one member of each pair stays (slot 2k becomes k); the other leaves, removed as
    // mdadm removes it (a RAID 0 holds no spares): recorded faulty by the others, its own
    // superblock untouched.
    let leaving: Vec<Vec<u8>> = snapshot(&disks[3..]);
    let back = reshape(&disks, &target(Some(0), None, None)).unwrap();
    assert_eq!((back.new_level, back.new_raid_devices), (0, 3));
    assert_eq!(back.left_members, vec!["m3", "m4", "m5"]);
    assert!(
        snapshot(&disks[3..]) == leaving,
        "the leaving members are not written"
    );
    verify_shape(&disks, &data, (0, 0, CHUNK as u64, 3));
    let newest = raidkit_engine::read_superblock(&disks[0]).unwrap().sb;
    for (i, d) in disks.iter().enumerate() {
        let own = raidkit_engine::read_superblock(d).unwrap().sb;
        let want = if i < 3 {
            raidkit_metadata::DevRole::Active(i as u16)
        } else {
            raidkit_metadata::DevRole::Faulty
        };
        assert_eq!(newest.role_of(own.dev_number), want, "member {i}");
    }
}

#[test]
fn a_raid0_with_fewer_spares_than_members_becomes_a_raid10_missing_copies() {
    let (disks, data) = written_array(0, 2, 1, ConsistencyPolicy::Resync);
    let r = reshape(&disks, &target(Some(10), None, None)).unwrap();
    assert_eq!(r.rebuild_slots, vec![1]);
    assert_eq!(rebuild(&disks), raidkit_engine::TaskOutcome::Completed);
    let (array, _) = Array::assemble(boxed(&disks), AssembleOptions::default()).unwrap();
    assert!(array.status().degraded, "slot 3 has no member");
    let mut got = vec![0u8; data.len()];
    array.read_at(&mut got, 0).unwrap();
    assert!(got == data);
    array.stop().unwrap();
    // Slot 0's copy lost as well: its pair (slot 1, rebuilt) serves it, and the RAID 10
    // still goes back to a RAID 0 of the members left.
    let alive = vec![disks[1].clone(), disks[2].clone()];
    let run = AssembleOptions {
        run: true,
        ..Default::default()
    };
    let back = Array::reshape(
        boxed(&alive),
        &target(Some(0), None, None),
        &run,
        &control(None),
    )
    .unwrap();
    assert_eq!((back.new_level, back.new_raid_devices), (0, 2));
    verify_shape(&alive, &data, (0, 0, CHUNK as u64, 2));
    assert_eq!(role_of(&disks[2]), raidkit_metadata::DevRole::Active(0));
    // The member lost before is no member of the RAID 0: given back, it is left out.
    let (array, _) = Array::assemble(boxed(&disks), AssembleOptions::default()).unwrap();
    assert_eq!(array.geometry().raid_disks, 2);
    assert!(!array.status().degraded);
    array.stop().unwrap();
}

/// RAID 5 over four members and a spare, reshaped to RAID 6 in its RAID 5 form
/// (left-symmetric-6) and rebuilt: a RAID 6 that becomes a RAID 5 by a takeover.
fn raid6_in_raid5_form() -> (Vec<CrashDisk>, Vec<u8>) {
    let (disks, data) = written_array(5, 4, 1, ConsistencyPolicy::Resync);
    reshape(&disks, &target(Some(6), Some(18), None)).unwrap();
    assert_eq!(rebuild(&disks), raidkit_engine::TaskOutcome::Completed);
    (disks, data)
}

#[test]
fn a_power_loss_in_a_takeovers_superblock_round_is_finished() {
    // A takeover writes the new level in every member's superblock, member by member: cut at
    // each of its writes and flushes, the members disagree on the level. Continuing finishes
    // the round (the data never moved); the array is whole in its new shape.
    type Setup = fn() -> (Vec<CrashDisk>, Vec<u8>);
    let cases: [(Setup, ReshapeTarget, Want); 5] = [
        (
            || written_array(5, 4, 1, ConsistencyPolicy::Resync),
            target(Some(6), Some(18), None),
            (6, 18, 16, 5),
        ),
        (
            raid6_in_raid5_form,
            target(Some(5), None, None),
            (5, 2, 16, 4),
        ),
        (
            || written_array(4, 4, 0, ConsistencyPolicy::Resync),
            target(Some(5), None, None),
            (5, 5, 16, 4),
        ),
        (
            || written_array(0, 3, 3, ConsistencyPolicy::Resync),
            target(Some(10), None, None),
            (10, 0x102, 16, 6),
        ),
        (
            || written_array(1, 2, 0, ConsistencyPolicy::Resync),
            target(Some(5), None, None),
            (5, 2, 0, 2),
        ),
    ];
    let mut rng = Rng(0x7a4e_0ce5_0000_0013);
    for (k, (setup, t, mut want)) in cases.into_iter().enumerate() {
        let (disks, _) = setup();
        let power = Arc::new(AtomicI64::new(i64::MAX));
        let counted: Vec<CrashDisk> = disks.iter().map(|d| d.clone().on_power(&power)).collect();
        reshape(&counted, &t).unwrap();
        let budget = i64::MAX - power.load(Ordering::SeqCst);
        assert!(budget >= 2, "case {k}: a round of superblock writes");
        let mut disagreed = 0;
        for cut_at in 1..budget {
            let (disks, data) = setup();
            let power = Arc::new(AtomicI64::new(cut_at));
            let cut: Vec<CrashDisk> = disks.iter().map(|d| d.clone().on_power(&power)).collect();
            assert!(reshape(&cut, &t).is_err(), "case {k} cut at {cut_at}");
            for d in &disks {
                d.crash(&mut rng);
            }
            let levels: std::collections::BTreeSet<u32> = disks
                .iter()
                .map(|d| raidkit_engine::read_superblock(d).unwrap().sb.level.to_md() as u32)
                .collect();
            if levels.len() > 1 {
                disagreed += 1;
            }
            match continue_reshape(&disks) {
                Ok(r) => assert!(r.finished && r.written_bytes == 0, "case {k}: {r:?}"),
                // Cut before the first member was written (the takeover is made again), or
                // at the last flush with every write landed (nothing left to do).
                Err(EngineError::CannotGrow(GrowRefusal::NoReshape)) => match reshape(&disks, &t) {
                    Ok(_) | Err(EngineError::CannotGrow(GrowRefusal::NothingToChange)) => {}
                    Err(e) => panic!("case {k} cut at {cut_at}: again: {e}"),
                },
                Err(e) => panic!("case {k} cut at {cut_at}: continue: {e}"),
            }
            let (array, _) = Array::assemble(boxed(&disks), AssembleOptions::default()).unwrap();
            let g = array.geometry();
            if want.2 == 0 {
                // RAID 1 to 5: md picks the chunk.
                want.2 = g.chunk_sectors;
            }
            array.stop().unwrap();
            rebuild(&disks);
            verify_shape(&disks, &data, want);
        }
        assert!(
            disagreed > 0,
            "case {k}: no cut left the members disagreeing"
        );
    }
}

#[test]
fn takeovers_md_cannot_make_are_refused_writing_nothing() {
    let (three, _) = written_array(1, 3, 0, ConsistencyPolicy::Resync);
    let before = snapshot(&three);
    assert!(matches!(
        refused_on(&three, target(Some(5), None, None)),
        GrowRefusal::LevelImpossible { from: 1, to: 5, .. }
    ));
    assert!(snapshot(&three) == before);
    let (two, _) = written_array(1, 2, 1, ConsistencyPolicy::Resync);
    let before = snapshot(&two);
    assert!(matches!(
        refused_on(
            &two,
            ReshapeTarget {
                raid_devices: Some(3),
                ..target(Some(5), None, None)
            }
        ),
        GrowRefusal::ReshapeNotYet { .. }
    ));
    assert!(snapshot(&two) == before);
    // A RAID 10 of an odd member count has no RAID 0 form.
    let (odd, _) = written_array(10, 3, 0, ConsistencyPolicy::Resync);
    let before = snapshot(&odd);
    assert!(matches!(
        refused_on(&odd, target(Some(0), None, None)),
        GrowRefusal::LevelImpossible {
            from: 10,
            to: 0,
            ..
        }
    ));
    assert!(snapshot(&odd) == before);
}

fn shared(disks: &[CrashDisk]) -> Vec<Arc<dyn Disk>> {
    disks
        .iter()
        .map(|d| Arc::new(d.clone()) as Arc<dyn Disk>)
        .collect()
}

/// Writes `len` bytes of fresh pattern at `at` through `online` and into `model`.
fn online_write(
    online: &raidkit_engine::OnlineReshape,
    model: &mut [u8],
    rng: &mut Rng,
    at: usize,
    len: usize,
) {
    let bytes = pattern(rng.next(), len);
    online.write_at(&bytes, at as u64, false).unwrap();
    model[at..at + len].copy_from_slice(&bytes);
}

/// A RAID 5 grows from 4 to 5 members and changes its chunk, and a RAID 10 of 2 near copies
/// grows from 4 to 5 members (chunk by chunk), while in use: between
/// steps, writes below the moved part, above it and across it, and reads of every kind,
/// must match the model; at the end the array holds the model, consistent, in the new shape;
/// a stop between steps (a crash: nothing more recorded) is continued offline with the
/// acknowledged, flushed writes kept.
#[test]
fn an_online_reshape_serves_reads_and_writes_between_its_steps() {
    for (level, spares, t, want) in [
        (5, 1, ReshapeTarget::members(5), (5, 2, 16, 5)),
        (5, 0, target(None, None, Some(64)), (5, 2, 64, 4)),
        (10, 1, ReshapeTarget::members(5), (10, 0x102, 16, 5)),
    ] {
        let (disks, data) = written_array(level, 4, spares, ConsistencyPolicy::Resync);
        let mut model = data.clone();
        let mut rng = Rng(0x0411_11e0 + spares as u64 + level as u64);
        let online = raidkit_engine::OnlineReshape::start(
            shared(&disks),
            &t,
            AssembleOptions::default(),
            1 << 20,
        )
        .unwrap();
        assert_eq!(online.size_bytes() as usize, data.len());
        let mut steps = 0;
        loop {
            let (pos, _) = online.progress();
            let size = model.len();
            // The position runs on past the old size (the new layout is larger).
            let boundary = ((pos * 512) as usize).min(size);
            // Below, across and above the moved part, sector-aligned, up to 192 KiB.
            for around in [boundary / 2, boundary, boundary + (size - boundary) / 2] {
                let len = 512 * (1 + rng.below(384) as usize);
                let at = (around.saturating_sub(len / 2) / 512 * 512).min(size - len);
                online_write(&online, &mut model, &mut rng, at, len);
                let mut got = vec![0u8; len];
                online.read_at(&mut got, at as u64).unwrap();
                assert!(
                    got == model[at..at + len],
                    "read back at {at}+{len}, position {pos}"
                );
            }
            let mut whole = vec![0u8; size];
            online.read_at(&mut whole, 0).unwrap();
            assert!(whole == model, "whole array at position {pos}");
            steps += 1;
            if online.step().unwrap() {
                break;
            }
        }
        assert!(steps > 3, "{steps} steps");
        drop(online);
        verify_shape(&disks, &model, want);
    }
    // A stop between steps: the superblocks record the last step; acknowledged and flushed
    // writes in either layout survive, and the offline continue finishes it.
    let (disks, data) = written_array(5, 4, 1, ConsistencyPolicy::Resync);
    let mut model = data.clone();
    let mut rng = Rng(0xdead_0411);
    let online = raidkit_engine::OnlineReshape::start(
        shared(&disks),
        &ReshapeTarget::members(5),
        AssembleOptions::default(),
        1 << 20,
    )
    .unwrap();
    for _ in 0..3 {
        online.step().unwrap();
    }
    let (pos, _) = online.progress();
    let b = ((pos * 512) as usize).min(model.len());
    online_write(&online, &mut model, &mut rng, b - 4096, 8192);
    online_write(&online, &mut model, &mut rng, 512, 1024);
    let last = model.len() - 4096;
    online_write(&online, &mut model, &mut rng, last, 4096);
    online.flush().unwrap();
    drop(online);
    for d in &disks {
        d.crash(&mut rng);
    }
    continue_reshape(&disks).unwrap();
    verify_shape(&disks, &model, (5, 2, 16, 5));
}

/// A writer keeps writing (and checking what it wrote) while the steps run on another
/// thread: nothing is lost at the moving boundary.
#[test]
fn an_online_reshape_keeps_a_concurrent_writer_whole() {
    let (disks, data) = written_array(5, 4, 1, ConsistencyPolicy::Resync);
    let online = Arc::new(
        raidkit_engine::OnlineReshape::start(
            shared(&disks),
            &ReshapeTarget::members(5),
            AssembleOptions::default(),
            1 << 20,
        )
        .unwrap(),
    );
    let model = std::sync::Mutex::new(data.clone());
    let done = AtomicBool::new(false);
    let positions = std::sync::Mutex::new(std::collections::BTreeSet::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = Rng(0x5eed_0412);
            let mut writes = 0;
            while !done.load(Ordering::SeqCst) || writes < 50 {
                let size = data.len();
                let len = 512 * (1 + rng.below(128) as usize);
                let at = (rng.below((size - len) as u64) as usize) / 512 * 512;
                let bytes = pattern(rng.next(), len);
                {
                    let mut m = model.lock().unwrap();
                    match online.write_at(&bytes, at as u64, false) {
                        Ok(()) => m[at..at + len].copy_from_slice(&bytes),
                        // The last step is done: the server assembles the array again.
                        Err(EngineError::Busy(_)) => break,
                        Err(e) => panic!("write at {at}+{len}: {e}"),
                    }
                    positions.lock().unwrap().insert(online.progress().0);
                }
                let mut got = vec![0u8; len];
                if online.read_at(&mut got, at as u64).is_ok() {
                    assert!(got == model.lock().unwrap()[at..at + len], "at {at}+{len}");
                }
                writes += 1;
            }
        });
        // Room for the writer between steps, as a server paces its steps.
        while !online.step().unwrap() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        done.store(true, Ordering::SeqCst);
    });
    let seen = positions.into_inner().unwrap().len();
    assert!(seen > 2, "the writer ran beside {seen} positions only");
    let model = model.into_inner().unwrap();
    drop(online);
    verify_shape(&disks, &model, (5, 2, 16, 5));
}

/// A member dies while a served RAID 5 grows from 4 to 5 members: the reshape goes on
/// degraded, as md's does, and finishes; every write acknowledged before and after the
/// failure reads back from the reshaped array without that member, and the member, left
/// behind by the superblocks, is stale.
#[test]
fn a_member_failing_in_an_online_reshape_degrades_it_and_it_finishes() {
    let (mut disks, data) = written_array(5, 4, 1, ConsistencyPolicy::Resync);
    // Member 2 dies when its budget of writes and flushes is spent (set below).
    let budget = Arc::new(AtomicI64::new(i64::MAX));
    disks[2] = disks[2].clone().on_power(&budget);
    let mut model = data.clone();
    let mut rng = Rng(0x0de9_7ade);
    let online = raidkit_engine::OnlineReshape::start(
        shared(&disks),
        &ReshapeTarget::members(5),
        AssembleOptions::default(),
        1 << 20,
    )
    .unwrap();
    for _ in 0..2 {
        assert!(!online.step().unwrap());
    }
    budget.store(0, Ordering::SeqCst);
    let mut steps = 0;
    loop {
        let size = model.len();
        let (pos, _) = online.progress();
        let boundary = ((pos * 512) as usize).min(size);
        for around in [boundary / 2, boundary, boundary + (size - boundary) / 2] {
            let len = 512 * (1 + rng.below(256) as usize);
            let at = (around.saturating_sub(len / 2) / 512 * 512).min(size - len);
            online_write(&online, &mut model, &mut rng, at, len);
        }
        let mut whole = vec![0u8; size];
        online.read_at(&mut whole, 0).unwrap();
        assert!(whole == model, "whole array at position {pos}");
        steps += 1;
        if online.step().unwrap() {
            break;
        }
    }
    assert!(steps > 2, "{steps} steps after the failure");
    let report = online.report();
    assert_eq!(report.failed_members, vec!["m2".to_string()]);
    let (array, _) = online.assemble().unwrap();
    assert_eq!(array.geometry().raid_disks, 5);
    assert!(array.status().degraded);
    let mut got = vec![0u8; model.len()];
    array.read_at(&mut got, 0).unwrap();
    assert!(
        got == model,
        "the reshaped array holds every acknowledged write"
    );
    array.stop().unwrap();
    drop(array);
    drop(online);
    // With every member given again, the dead one is not taken back as current.
    budget.store(i64::MAX, Ordering::SeqCst);
    let (array, report) = Array::assemble(
        boxed(&disks),
        AssembleOptions {
            run: true,
            ..AssembleOptions::default()
        },
    )
    .unwrap();
    assert!(
        report.excluded.iter().any(|(m, _)| m == "m2")
            || array
                .status()
                .members
                .iter()
                .all(|m| m.name != "m2" || m.role != "active"),
        "{:?} {:?}",
        report.excluded,
        array.status().members
    );
    let mut got = vec![0u8; model.len()];
    array.read_at(&mut got, 0).unwrap();
    assert!(got == model);
}

/// A served RAID 5 shrinks from 5 members to 4 (md's backward reshape) once given the
/// smaller size: clients see that size from the start, the reshape runs down from the new
/// end, and between steps writes below the position (old layout), above it (new layout) and
/// across it read back as written; at the end the array holds them in the new shape, and
/// the member left over is a spare.
#[test]
fn a_served_raid5_shrinks_online_backwards_while_it_is_written() {
    const SIZE: u64 = 3072;
    let keep = (3 * SIZE * 512) as usize;
    let (disks, data) = written_small(5, 5, SIZE, keep);
    let fewer = ReshapeTarget {
        raid_devices: Some(4),
        ..Default::default()
    };
    // Refused without the caller's word on the size, online as offline.
    assert!(raidkit_engine::OnlineReshape::start(
        shared(&disks),
        &fewer,
        AssembleOptions::default(),
        1 << 20
    )
    .is_err());
    let mut model = data.clone();
    let mut rng = Rng(0x0541_124e);
    let online = raidkit_engine::OnlineReshape::start(
        shared(&disks),
        &ReshapeTarget {
            array_sectors: Some(keep as u64 / 512),
            ..fewer
        },
        AssembleOptions::default(),
        1 << 20,
    )
    .unwrap();
    assert_eq!(
        online.size_bytes() as usize,
        keep,
        "the smaller size at once"
    );
    let mut past = vec![0u8; 4096];
    assert!(online.read_at(&mut past, keep as u64).is_err());
    let mut positions = Vec::new();
    loop {
        let size = model.len();
        let pos = online.position();
        positions.push(pos);
        let boundary = ((pos * 512) as usize).min(size);
        for around in [boundary / 2, boundary, boundary + (size - boundary) / 2] {
            let len = 512 * (1 + rng.below(256) as usize);
            let at = (around.saturating_sub(len / 2) / 512 * 512).min(size - len);
            online_write(&online, &mut model, &mut rng, at, len);
            let mut got = vec![0u8; len];
            online.read_at(&mut got, at as u64).unwrap();
            assert!(got == model[at..at + len], "at {at}+{len}, position {pos}");
        }
        let mut whole = vec![0u8; size];
        online.read_at(&mut whole, 0).unwrap();
        assert!(whole == model, "whole array at position {pos}");
        if online.step().unwrap() {
            break;
        }
    }
    assert!(positions.len() > 2, "{positions:?}");
    assert!(
        positions.windows(2).all(|w| w[1] < w[0]),
        "the position runs down: {positions:?}"
    );
    let (array, _) = online.assemble().unwrap();
    assert_eq!(array.geometry().raid_disks, 4);
    let mut got = vec![0u8; model.len()];
    array.read_at(&mut got, 0).unwrap();
    assert!(got == model);
    array.stop().unwrap();
    drop(array);
    drop(online);
    verify_shape(&disks[..4], &model, (5, 2, CHUNK as u64, 4));
    let sb = raidkit_engine::read_superblock(&disks[4]).unwrap().sb;
    assert_eq!(sb.role(), raidkit_metadata::DevRole::Spare);
}
