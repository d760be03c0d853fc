//! Background work against a flat reference model: rebuild onto spares (also while writers
//! keep writing), rebuild resumed after a crash from md's recovery_offset, resync after an
//! unclean stop (also resumed from resync_offset), check and repair counting and fixing
//! planted inconsistencies, hot spares taking over on their own, and the background service.

use raidkit_disk::{Disk, MemDisk};
use raidkit_engine::{
    Array, ArrayEvent, AssembleOptions, ConsistencyPolicy, CreateOptions, EngineConfig,
    EngineError, TaskKind, TaskOutcome, TaskRates,
};
use raidkit_metadata::SuperblockVersion;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

fn boxed(disks: &[MemDisk]) -> Vec<Box<dyn Disk>> {
    disks
        .iter()
        .map(|d| Box::new(d.clone()) as Box<dyn Disk>)
        .collect()
}

const MEMBER_BYTES: u64 = 3 << 20;

fn config() -> EngineConfig {
    config_with(None)
}

/// `task_threads`: see [`EngineConfig::task_threads`]; the rebuild tests run with one
/// thread and with several (a burst: steps side by side, each thread doing its own I/O).
fn config_with(task_threads: Option<usize>) -> EngineConfig {
    EngineConfig {
        // Small enough that a rebuild takes many steps.
        stripe_cache_bytes: 1 << 20,
        max_inflight: 4,
        task_threads,
    }
}

/// The rebuild thread settings the rebuild tests run with.
const TASK_THREADS: [Option<usize>; 2] = [Some(1), Some(3)];

fn create(level: i32, layout: u32, n: usize, spares: usize, seed: u8) -> (Vec<MemDisk>, Array) {
    create_with(level, layout, n, spares, seed, None)
}

/// `policy` `None`: raidkit's default for the level (the partial parity log for RAID 5).
fn create_with(
    level: i32,
    layout: u32,
    n: usize,
    spares: usize,
    seed: u8,
    policy: Option<ConsistencyPolicy>,
) -> (Vec<MemDisk>, Array) {
    create_threads(level, layout, n, spares, seed, policy, None)
}

/// These tests' arrays: `n` active members and `spares` spares, 16 KiB chunks.
fn options(
    level: i32,
    layout: u32,
    n: usize,
    spares: usize,
    seed: u8,
    task_threads: Option<usize>,
) -> CreateOptions {
    CreateOptions {
        level,
        layout: Some(layout),
        chunk_sectors: 32,
        raid_devices: n,
        metadata: SuperblockVersion::V1_2,
        size_sectors: None,
        name: "health".into(),
        set_uuid: [seed; 16],
        device_uuids: (0..n + spares).map(|i| [i as u8 + 1; 16]).collect(),
        ctime_seconds: 1_700_000_000,
        init: raidkit_engine::Init::Zeroed,
        consistency: raidkit_engine::ConsistencyPolicy::Resync,
        config: config_with(task_threads),
    }
}

fn create_threads(
    level: i32,
    layout: u32,
    n: usize,
    spares: usize,
    seed: u8,
    policy: Option<ConsistencyPolicy>,
    task_threads: Option<usize>,
) -> (Vec<MemDisk>, Array) {
    let disks: Vec<MemDisk> = (0..n + spares)
        .map(|i| MemDisk::new(&format!("m{i}"), MEMBER_BYTES))
        .collect();
    let opts = options(level, layout, n, spares, seed, task_threads);
    let array = match policy {
        Some(p) => Array::create_with_policy(boxed(&disks), opts, p),
        None => Array::create(boxed(&disks), opts),
    }
    .unwrap_or_else(|e| panic!("create RAID {level} layout {layout:#x} n {n}: {e}"));
    // Full speed: these tests measure nothing and should not sleep.
    array.set_task_rates(TaskRates::full());
    (disks, array)
}

fn assemble(disks: &[MemDisk], force: bool) -> Array {
    assemble_threads(disks, force, None)
}

fn assemble_threads(disks: &[MemDisk], force: bool, task_threads: Option<usize>) -> Array {
    let (a, report) = Array::assemble(
        boxed(disks),
        AssembleOptions {
            force,
            config: config_with(task_threads),
            ..AssembleOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("assemble: {e}"));
    let _ = report;
    a.set_task_rates(TaskRates::full());
    a
}

fn write_random(array: &Array, model: &mut [u8], rng: &mut Rng, ops: usize) {
    let size = model.len() as u64;
    for _ in 0..ops {
        let len = (rng.below(96) + 1) * 512;
        let off = rng.below((size - len) / 512 + 1) * 512;
        let mut data = vec![0u8; len as usize];
        rng.fill(&mut data);
        array.write_at(&data, off, false).unwrap();
        model[off as usize..(off + len) as usize].copy_from_slice(&data);
    }
}

fn verify(array: &Array, model: &[u8], ctx: &str) {
    let mut buf = vec![0u8; model.len()];
    array
        .read_at(&mut buf, 0)
        .unwrap_or_else(|e| panic!("{ctx}: read: {e}"));
    if let Some(i) = (0..model.len()).find(|&i| buf[i] != model[i]) {
        panic!("{ctx}: first wrong byte at {i}");
    }
}

fn run(array: &Array, kind: TaskKind) -> raidkit_engine::TaskReport {
    let r = array
        .run_task(kind, &mut |_| {}, &AtomicBool::new(false))
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
    assert_eq!(r.outcome, TaskOutcome::Completed, "{kind}: {r:?}");
    r
}

fn check_clean(array: &Array, ctx: &str) {
    let r = run(array, TaskKind::Check);
    assert_eq!(
        r.progress.mismatch_sectors, 0,
        "{ctx}: check found mismatches"
    );
}

/// Every level and layout family, the members the level can lose failed, spares rebuilt
/// while a writer thread keeps writing; then every byte, md's check, and reads that must come
/// from the rebuilt members. With one rebuild thread, and with three running steps side by
/// side.
#[test]
fn rebuild_under_foreground_writes_loses_nothing() {
    for threads in TASK_THREADS {
        rebuild_under_foreground_writes(threads);
    }
}

fn rebuild_under_foreground_writes(threads: Option<usize>) {
    let cases: Vec<(i32, u32, usize, Vec<usize>)> = vec![
        (1, 0, 3, vec![0, 2]),
        (4, 0, 4, vec![3]),
        (4, 0, 5, vec![1]),
        (5, 0, 4, vec![1]),
        (5, 1, 5, vec![4]),
        (5, 2, 5, vec![0]),
        (5, 3, 6, vec![2]),
        (5, 4, 4, vec![0]),
        (5, 5, 5, vec![3]),
        (6, 2, 6, vec![1, 4]),
        (6, 0, 5, vec![0]),
        (6, 9, 7, vec![2, 6]),
        (6, 17, 6, vec![5, 0]),
        (10, 0x102, 4, vec![1]),
        (10, 0x102, 5, vec![0, 2]),
        (10, 0x201, 4, vec![3]),
        (10, 0x201, 5, vec![4]),
        (10, 0x10201, 6, vec![0]),
        (10, 0x103, 6, vec![1, 2]),
    ];
    for (level, layout, n, lose) in cases {
        let ctx =
            format!("RAID {level} layout {layout:#x} n {n} losing {lose:?}, {threads:?} threads");
        let (disks, array) = create_threads(level, layout, n, 0, 5, None, threads);
        let size = array.size_bytes() as usize;
        let mut rng = Rng(level as u64 * 131 + layout as u64 + n as u64);
        let mut model = vec![0u8; size];
        write_random(&array, &mut model, &mut rng, 40);
        for &m in &lose {
            array.fail_member(m).unwrap();
        }
        let spares: Vec<MemDisk> = lose
            .iter()
            .map(|i| MemDisk::new(&format!("spare{i}"), MEMBER_BYTES))
            .collect();
        for (k, s) in spares.iter().enumerate() {
            array
                .add_spare(Box::new(s.clone()), [0xb0 + k as u8; 16])
                .unwrap();
        }
        assert!(array.status().pending.contains(&TaskKind::Rebuild), "{ctx}");
        let model = Mutex::new(model);
        let writing = AtomicBool::new(true);
        let mut steps = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut rng = Rng(99 + n as u64);
                let mut k = 0;
                while writing.load(Ordering::Relaxed) || k < 20 {
                    let len = (rng.below(64) + 1) * 512;
                    let off = rng.below((size as u64 - len) / 512 + 1) * 512;
                    let mut data = vec![0u8; len as usize];
                    rng.fill(&mut data);
                    // Hold the model lock across the write so the model's order is the array's.
                    let mut m = model.lock().unwrap();
                    array.write_at(&data, off, false).unwrap();
                    m[off as usize..(off + len) as usize].copy_from_slice(&data);
                    k += 1;
                }
            });
            let r = array
                .run_task(
                    TaskKind::Rebuild,
                    &mut |_| steps += 1,
                    &AtomicBool::new(false),
                )
                .unwrap();
            writing.store(false, Ordering::Relaxed);
            assert_eq!(r.outcome, TaskOutcome::Completed, "{ctx}: {r:?}");
        });
        assert!(
            steps > 2,
            "{ctx}: rebuild took {steps} steps; the test wants several"
        );
        let model = model.into_inner().unwrap();
        let st = array.status();
        assert!(
            !st.degraded,
            "{ctx}: still degraded: {:?}",
            st.missing_slots
        );
        assert!(st.pending.is_empty(), "{ctx}: {:?}", st.pending);
        verify(&array, &model, &ctx);
        check_clean(&array, &ctx);
        array.stop().unwrap();
        drop(array);
        let mut set: Vec<MemDisk> = (0..n)
            .filter(|i| !lose.contains(i))
            .map(|i| disks[i].clone())
            .collect();
        set.extend(spares.iter().cloned());
        let array = assemble_threads(&set, false, threads);
        assert!(!array.status().degraded, "{ctx}: reassembled degraded");
        // Fail survivors so that reads must come from the rebuilt members.
        let survivors: Vec<usize> = array
            .status()
            .members
            .iter()
            .filter(|m| !m.name.starts_with("spare"))
            .map(|m| m.index)
            .collect();
        for &i in survivors.iter().take(lose.len()) {
            array.fail_member(i).unwrap();
        }
        verify(&array, &model, &format!("{ctx}, reading rebuilt members"));
    }
}

/// A rebuild interrupted by a crash resumes from the recovery_offset it recorded, also with
/// writes that went on during the rebuild (dirty and degraded: started with force, then the
/// resync makes parity agree again).
#[test]
fn rebuild_resumes_after_a_crash_from_recovery_offset() {
    for threads in TASK_THREADS {
        rebuild_resumes_after_a_crash(threads);
    }
}

fn rebuild_resumes_after_a_crash(threads: Option<usize>) {
    for (level, layout, n, writes_during) in [
        (5, 2, 5, false),
        (6, 2, 6, false),
        (10, 0x102, 4, false),
        (1, 0, 2, false),
        (5, 2, 5, true),
        (10, 0x201, 5, true),
    ] {
        let ctx = format!(
            "RAID {level} n {n} writes during rebuild {writes_during}, {threads:?} threads"
        );
        // md's rules without a write-hole guard (resync, force); the log is tested in ppl.rs.
        let policy = Some(ConsistencyPolicy::Resync);
        let (disks, array) = create_threads(level, layout, n, 0, 7, policy, threads);
        array.set_checkpoint_interval(Duration::ZERO);
        let mut rng = Rng(7 + level as u64);
        let mut model = vec![0u8; array.size_bytes() as usize];
        write_random(&array, &mut model, &mut rng, 30);
        array.stop().unwrap();
        array.fail_member(1).unwrap();
        let spare = MemDisk::new("spare", MEMBER_BYTES);
        array
            .add_spare(Box::new(spare.clone()), [0xcc; 16])
            .unwrap();
        let stop = AtomicBool::new(false);
        let r = array
            .run_task(
                TaskKind::Rebuild,
                // Early: a burst of three threads may finish a few steps after the stop.
                &mut |p| {
                    if p.percent >= 10.0 {
                        stop.store(true, Ordering::Relaxed);
                    }
                },
                &stop,
            )
            .unwrap();
        assert_eq!(r.outcome, TaskOutcome::Stopped, "{ctx}");
        let at = r.progress.position_sectors;
        assert!(
            at > 0 && at < r.progress.end_sectors,
            "{ctx}: stopped at {at}"
        );
        if writes_during {
            write_random(&array, &mut model, &mut rng, 30);
        }
        // Crash: no stop, the array is simply gone.
        drop(array);
        let mut set: Vec<MemDisk> = disks.iter().filter(|d| d.name() != "m1").cloned().collect();
        set.push(spare.clone());
        let parity = matches!(level, 4..=6);
        if writes_during && parity {
            let refused = Array::assemble(boxed(&set), AssembleOptions::default());
            assert!(
                matches!(refused, Err(EngineError::DirtyDegraded { .. })),
                "{ctx}: a dirty array with a member being rebuilt must need force"
            );
        }
        let array = assemble_threads(&set, writes_during && parity, threads);
        let st = array.status();
        assert!(
            st.pending.contains(&TaskKind::Rebuild),
            "{ctx}: {:?}",
            st.pending
        );
        let rebuilding = st.members.iter().find(|m| m.name == "spare").unwrap();
        assert_eq!(rebuilding.role, "rebuilding", "{ctx}");
        let reports = array
            .run_pending(&mut |_| {}, &AtomicBool::new(false))
            .unwrap();
        let rebuild = reports
            .iter()
            .find(|r| r.progress.kind == TaskKind::Rebuild)
            .unwrap();
        assert_eq!(rebuild.outcome, TaskOutcome::Completed, "{ctx}");
        assert!(
            rebuild.progress.start_sectors > 0,
            "{ctx}: resumed from {} instead of the checkpoint",
            rebuild.progress.start_sectors
        );
        assert_eq!(
            reports.iter().any(|r| r.progress.kind == TaskKind::Resync),
            writes_during,
            "{ctx}: {reports:?}"
        );
        verify(&array, &model, &ctx);
        check_clean(&array, &ctx);
        array.stop().unwrap();
        drop(array);
        let array = assemble(&set, false);
        let st = array.status();
        assert!(!st.degraded && st.pending.is_empty(), "{ctx}: {st:?}");
        verify(&array, &model, &ctx);
    }
}

/// Flips a byte of member `index` at member data sector `ms`.
fn corrupt(disks: &[MemDisk], array: &Array, index: usize, ms: u64) {
    let off = array.status().members[index].data_offset_sectors;
    let d = &disks[index];
    let at = (off + ms) * 512 + 17;
    let mut b = [0u8; 1];
    d.read_at(&mut b, at).unwrap();
    b[0] ^= 0x5a;
    d.write_at(&b, at).unwrap();
}

/// md's check counts planted inconsistencies (8 sectors per 4 KiB page) and changes nothing;
/// repair rewrites parity or the other copies; a second check finds nothing.
#[test]
fn check_counts_and_repair_fixes() {
    for threads in TASK_THREADS {
        check_counts_and_repair(threads);
    }
}

fn check_counts_and_repair(threads: Option<usize>) {
    for (level, layout, n) in [
        (5, 2, 4),
        (6, 5, 6),
        (4, 0, 4),
        (1, 0, 3),
        (10, 0x102, 4),
        (10, 0x201, 5),
    ] {
        let ctx = format!("RAID {level} layout {layout:#x} n {n}, {threads:?} threads");
        let (disks, array) = create_threads(level, layout, n, 0, 9, None, threads);
        let mut rng = Rng(3);
        let mut model = vec![0u8; array.size_bytes() as usize];
        write_random(&array, &mut model, &mut rng, 30);
        array.flush().unwrap();
        check_clean(&array, &ctx);
        let geo = array.geometry().clone();
        // Two places that hold no user-visible difference: parity (or a second copy).
        let targets: Vec<(usize, u64)> = match level {
            4..=6 => vec![
                (geo.stripe(0).p_member, 3),
                (geo.stripe(5).p_member, 5 * 32 + 20),
            ],
            _ => {
                let (c0, _) = geo.copies(0);
                let (c1, _) = geo.copies(64 * 32 + 9);
                vec![(c0[1].0, c0[1].1), (c1[1].0, c1[1].1)]
            }
        };
        for &(m, ms) in &targets {
            corrupt(&disks, &array, m, ms);
        }
        let before: Vec<Vec<u8>> = disks.iter().map(|d| d.snapshot()).collect();
        let r = run(&array, TaskKind::Check);
        assert_eq!(r.progress.mismatch_sectors, 16, "{ctx}: {r:?}");
        let after: Vec<Vec<u8>> = disks.iter().map(|d| d.snapshot()).collect();
        assert!(before == after, "{ctx}: check wrote to a member");
        let r = run(&array, TaskKind::Repair);
        assert_eq!(r.progress.mismatch_sectors, 16, "{ctx}");
        check_clean(&array, &ctx);
        verify(&array, &model, &ctx);
    }
}

/// An unclean stop leaves md's resync_offset at 0: the next assembly resyncs (making planted
/// parity damage consistent again); a resync stopped part-way records its cursor as
/// resync_offset at a clean stop and continues from there.
#[test]
fn resync_after_unclean_stop_and_resume() {
    for threads in TASK_THREADS {
        resync_after_unclean_stop(threads);
    }
}

fn resync_after_unclean_stop(threads: Option<usize>) {
    for (level, layout, n) in [(5, 2, 5), (6, 2, 6), (1, 0, 2), (10, 0x102, 5)] {
        let ctx = format!("RAID {level} n {n}, {threads:?} threads");
        let policy = Some(ConsistencyPolicy::Resync);
        let (disks, array) = create_threads(level, layout, n, 0, 11, policy, threads);
        let mut rng = Rng(5);
        let mut model = vec![0u8; array.size_bytes() as usize];
        write_random(&array, &mut model, &mut rng, 30);
        drop(array); // crash
        let geo = {
            let a = assemble_threads(&disks, false, threads);
            let g = a.geometry().clone();
            let st = a.status();
            assert_eq!(st.resync_from_sectors, Some(0), "{ctx}");
            assert_eq!(st.pending, vec![TaskKind::Resync], "{ctx}");
            // Stop part-way, cleanly.
            let stop = AtomicBool::new(false);
            let r = a
                .run_task(
                    TaskKind::Resync,
                    // Early: a burst of three threads may finish a few steps after the stop.
                    &mut |p| {
                        if p.percent >= 10.0 {
                            stop.store(true, Ordering::Relaxed);
                        }
                    },
                    &stop,
                )
                .unwrap();
            assert_eq!(r.outcome, TaskOutcome::Stopped, "{ctx}");
            a.stop().unwrap();
            g
        };
        // Damage past the resync cursor: the resumed resync must fix it.
        let last = geo.member_data_sectors - 40;
        let (m, ms) = match level {
            4..=6 => (geo.stripe(last / 32).p_member, last),
            _ => {
                let a = geo.array_sectors() - 40;
                let (c, _) = geo.copies(a);
                (c[1].0, c[1].1)
            }
        };
        {
            let a = assemble_threads(&disks, false, threads);
            let st = a.status();
            let from = st.resync_from_sectors.expect("resync still pending");
            assert!(
                from > 0,
                "{ctx}: resync restarted from 0 after a clean stop"
            );
            corrupt(&disks, &a, m, ms);
            let reports = a.run_pending(&mut |_| {}, &AtomicBool::new(false)).unwrap();
            assert_eq!(reports.len(), 1, "{ctx}");
            assert_eq!(reports[0].progress.start_sectors, from, "{ctx}");
            assert_eq!(reports[0].progress.mismatch_sectors, 8, "{ctx}");
            check_clean(&a, &ctx);
            verify(&a, &model, &ctx);
            a.stop().unwrap();
        }
        let a = assemble_threads(&disks, false, threads);
        let st = a.status();
        assert!(
            st.resync_from_sectors.is_none() && st.pending.is_empty(),
            "{ctx}: {st:?}"
        );
        assert_eq!(st.state, raidkit_engine::ArrayState::Clean, "{ctx}");
    }
}

/// A spare attached to the array takes a failed member's slot on its own, and the background
/// service rebuilds it without being asked.
#[test]
fn hot_spare_rebuilds_by_itself_under_the_background_service() {
    for (level, layout, n) in [(6, 2, 5), (10, 0x102, 4), (1, 0, 2)] {
        let ctx = format!("RAID {level}");
        let (_disks, array) = create(level, layout, n, 1, 13);
        let array = Arc::new(array);
        array.start_background().unwrap();
        let mut rng = Rng(13);
        let mut model = vec![0u8; array.size_bytes() as usize];
        write_random(&array, &mut model, &mut rng, 20);
        let spare = array
            .status()
            .members
            .iter()
            .find(|m| m.role == "spare")
            .map(|m| m.index)
            .expect("a spare");
        array.fail_member(0).unwrap();
        let st = array.status();
        let taken = st.members.iter().find(|m| m.index == spare).unwrap();
        assert!(
            taken.slot == Some(0) && (taken.role == "rebuilding" || taken.role == "active"),
            "{ctx}: {taken:?}"
        );
        let t = Instant::now();
        loop {
            let st = array.status();
            if !st.degraded && st.task.is_none() {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{ctx}: no rebuild: {st:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let st = array.status();
        assert!(
            st.finished_tasks.iter().any(
                |r| r.progress.kind == TaskKind::Rebuild && r.outcome == TaskOutcome::Completed
            ),
            "{ctx}: {:?}",
            st.finished_tasks
        );
        verify(&array, &model, &ctx);
        array.stop().unwrap();
    }
}

/// With foreground I/O present, a task at a 10 % share yields (and says so); the share is a
/// setting, and an explicit stop ends a task with its checkpoint.
#[test]
fn tasks_yield_to_foreground_io_and_refuse_to_run_twice() {
    let (_disks, array) = create(5, 2, 4, 0, 15);
    let array = Arc::new(array);
    array.set_task_rates(TaskRates {
        check_percent: 10,
        ..TaskRates::full()
    });
    let mut throttled = false;
    while_reading(&array, || {
        let inner = Arc::clone(&array);
        let r = array
            .run_task(
                TaskKind::Check,
                &mut |p| {
                    throttled |= p.throttled;
                    // A second task while one runs is refused.
                    if p.percent > 10.0 && p.percent < 20.0 {
                        let second =
                            inner.run_task(TaskKind::Repair, &mut |_| {}, &AtomicBool::new(false));
                        assert!(matches!(second, Err(EngineError::Busy(_))), "{second:?}");
                    }
                },
                &AtomicBool::new(false),
            )
            .unwrap();
        assert_eq!(r.outcome, TaskOutcome::Completed);
    });
    assert!(throttled, "the check never yielded to foreground reads");
    // RAID 0 has nothing to check.
    let (_d0, raid0) = create(0, 0, 3, 0, 16);
    assert!(matches!(
        raid0.run_task(TaskKind::Check, &mut |_| {}, &AtomicBool::new(false)),
        Err(EngineError::Invalid(_))
    ));
}

/// A member being rebuilt cannot be removed without failing it first (md's rule), and a
/// parity check on a degraded array is refused rather than reporting nonsense.
#[test]
fn refusals_while_rebuilding() {
    let (_disks, array) = create(5, 2, 4, 0, 17);
    array.fail_member(2).unwrap();
    array
        .add_spare(Box::new(MemDisk::new("spare", MEMBER_BYTES)), [0xdd; 16])
        .unwrap();
    let spare = array
        .status()
        .members
        .iter()
        .find(|m| m.name == "spare")
        .unwrap()
        .index;
    assert!(matches!(
        array.remove_member(spare),
        Err(EngineError::Invalid(_))
    ));
    let check = array.run_task(TaskKind::Check, &mut |_| {}, &AtomicBool::new(false));
    assert!(
        matches!(&check, Ok(r) if matches!(r.outcome, TaskOutcome::Failed { .. })),
        "{check:?}"
    );
}

/// A member whose reads fail in one byte range (a bad patch of media).
#[derive(Debug)]
struct BadPatch {
    inner: MemDisk,
    bad: std::ops::Range<u64>,
    refused: Arc<std::sync::atomic::AtomicU64>,
}

impl raidkit_disk::DiskWrapper for BadPatch {
    type Inner = MemDisk;
    fn inner(&self) -> &MemDisk {
        &self.inner
    }
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), raidkit_disk::DiskError> {
        let end = offset_bytes + buf.len() as u64;
        if offset_bytes < self.bad.end && self.bad.start < end {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(raidkit_disk::DiskError::io(
                self.inner.name(),
                "read",
                offset_bytes,
                std::io::Error::other("unreadable sector"),
            ));
        }
        self.inner.read_at(buf, offset_bytes)
    }
}

/// md's --replace: a member is copied onto a new one while writes go on; the new member takes
/// the slot, the old one is marked faulty, and reads served by the new member are right.
#[test]
fn replace_copies_a_member_in_service() {
    for threads in TASK_THREADS {
        replace_copies_a_member(threads);
    }
}

fn replace_copies_a_member(threads: Option<usize>) {
    for (level, layout, n, slot) in [
        (5, 2, 4, 1),
        (6, 3, 6, 5),
        (1, 0, 2, 0),
        (10, 0x102, 4, 2),
        (10, 0x10201, 5, 4),
    ] {
        let ctx =
            format!("RAID {level} layout {layout:#x} replacing slot {slot}, {threads:?} threads");
        let (disks, array) = create_threads(level, layout, n, 0, 21, None, threads);
        let size = array.size_bytes() as usize;
        let mut rng = Rng(21 + n as u64);
        let mut model = vec![0u8; size];
        write_random(&array, &mut model, &mut rng, 30);
        let new = MemDisk::new("new", MEMBER_BYTES);
        array
            .replace_member(slot, Box::new(new.clone()), [0xee; 16])
            .unwrap();
        let st = array.status();
        let r = st.members.iter().find(|m| m.name == "new").unwrap();
        assert_eq!(
            (r.role.as_str(), r.slot),
            ("replacement", Some(slot)),
            "{ctx}"
        );
        assert!(st.pending.contains(&TaskKind::Replace), "{ctx}");
        assert!(!st.degraded, "{ctx}: a replace keeps the array whole");
        let model = Mutex::new(model);
        let writing = AtomicBool::new(true);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut rng = Rng(5);
                let mut k = 0;
                while writing.load(Ordering::Relaxed) || k < 20 {
                    let len = (rng.below(64) + 1) * 512;
                    let off = rng.below((size as u64 - len) / 512 + 1) * 512;
                    let mut data = vec![0u8; len as usize];
                    rng.fill(&mut data);
                    let mut m = model.lock().unwrap();
                    array.write_at(&data, off, false).unwrap();
                    m[off as usize..(off + len) as usize].copy_from_slice(&data);
                    k += 1;
                }
            });
            let r = array
                .run_task(TaskKind::Replace, &mut |_| {}, &AtomicBool::new(false))
                .unwrap();
            writing.store(false, Ordering::Relaxed);
            assert_eq!(r.outcome, TaskOutcome::Completed, "{ctx}: {r:?}");
        });
        let model = model.into_inner().unwrap();
        let st = array.status();
        let r = st.members.iter().find(|m| m.name == "new").unwrap();
        assert_eq!((r.role.as_str(), r.slot), ("active", Some(slot)), "{ctx}");
        let old = st
            .members
            .iter()
            .find(|m| m.name == format!("m{slot}"))
            .unwrap();
        assert_eq!(old.role, "faulty", "{ctx}");
        verify(&array, &model, &ctx);
        check_clean(&array, &ctx);
        array.stop().unwrap();
        drop(array);
        // Offered again with the old member, the array uses the new one.
        let mut all = disks.clone();
        all.push(new.clone());
        let array = assemble_threads(&all, false, threads);
        let st = array.status();
        assert!(!st.degraded, "{ctx}");
        let r = st.members.iter().find(|m| m.name == "new").unwrap();
        assert_eq!(r.slot, Some(slot), "{ctx}");
        // Reads that need the new member: fail others the level can lose.
        let others: Vec<usize> = st
            .members
            .iter()
            .filter(|m| m.role == "active" && m.slot != Some(slot))
            .map(|m| m.index)
            .take(if level == 6 { 2 } else { 1 })
            .collect();
        for i in others {
            array.fail_member(i).unwrap();
        }
        verify(&array, &model, &format!("{ctx}, reading the new member"));
    }
}

/// A replace stopped by a crash resumes from the replacement's recovery_offset; a range the
/// old member cannot read is rebuilt from the others instead of failing the copy.
#[test]
fn replace_resumes_and_works_around_unreadable_sectors() {
    for threads in TASK_THREADS {
        replace_resumes_around_unreadable_sectors(threads);
    }
}

fn replace_resumes_around_unreadable_sectors(threads: Option<usize>) {
    for (level, layout, n) in [(5, 2, 5), (10, 0x102, 4)] {
        let ctx = format!("RAID {level}, {threads:?} threads");
        let (disks, array) = create_threads(level, layout, n, 0, 23, None, threads);
        array.set_checkpoint_interval(Duration::ZERO);
        let mut rng = Rng(23);
        let mut model = vec![0u8; array.size_bytes() as usize];
        write_random(&array, &mut model, &mut rng, 40);
        let new = MemDisk::new("new", MEMBER_BYTES);
        array
            .replace_member(0, Box::new(new.clone()), [0xef; 16])
            .unwrap();
        let stop = AtomicBool::new(false);
        let r = array
            .run_task(
                TaskKind::Replace,
                // Early: a burst of three threads may finish a few steps after the stop.
                &mut |p| {
                    if p.percent >= 10.0 {
                        stop.store(true, Ordering::Relaxed)
                    }
                },
                &stop,
            )
            .unwrap();
        assert_eq!(r.outcome, TaskOutcome::Stopped, "{ctx}");
        drop(array); // crash
                     // The old member now has a bad patch past the checkpoint.
        let sb = raidkit_engine::read_superblock(&disks[0]).unwrap().sb;
        let data_off = sb.data_offset_sectors * 512;
        let at = data_off + sb.size_sectors * 512 * 3 / 4;
        let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut members: Vec<Box<dyn Disk>> = vec![Box::new(BadPatch {
            inner: disks[0].clone(),
            bad: at..at + 8192,
            refused: refused.clone(),
        })];
        members.extend(
            disks[1..]
                .iter()
                .map(|d| Box::new(d.clone()) as Box<dyn Disk>),
        );
        members.push(Box::new(new.clone()));
        let (array, report) = Array::assemble(
            members,
            AssembleOptions {
                config: config_with(threads),
                ..AssembleOptions::default()
            },
        )
        .unwrap();
        array.set_task_rates(TaskRates::full());
        assert!(
            report.events.iter().any(|e| matches!(
                e,
                ArrayEvent::ReplaceResumes { member, slot: 0, copied_sectors }
                    if member == "new" && *copied_sectors > 0
            )),
            "{ctx}: {report:?}"
        );
        let reports = array
            .run_pending(&mut |_| {}, &AtomicBool::new(false))
            .unwrap();
        let rep = reports
            .iter()
            .find(|r| r.progress.kind == TaskKind::Replace)
            .unwrap();
        assert_eq!(rep.outcome, TaskOutcome::Completed, "{ctx}: {reports:?}");
        assert!(rep.progress.start_sectors > 0, "{ctx}: did not resume");
        assert!(
            refused.load(Ordering::Relaxed) > 0,
            "{ctx}: the copy never met the bad patch"
        );
        let st = array.status();
        assert!(!st.degraded, "{ctx}: {st:?}");
        // The old member's read errors did not fail the copy; reads via the new member are
        // right (fail another member so the new one is needed).
        let other = st
            .members
            .iter()
            .find(|m| m.role == "active" && m.name != "new" && m.slot != Some(0))
            .unwrap()
            .index;
        array.fail_member(other).unwrap();
        verify(&array, &model, &ctx);
    }
}

/// When the member being replaced fails, the replacement carries on as the slot's rebuild.
#[test]
fn replacement_becomes_a_rebuild_when_the_old_member_fails() {
    let (_disks, array) = create(6, 2, 5, 0, 25);
    let mut rng = Rng(25);
    let mut model = vec![0u8; array.size_bytes() as usize];
    write_random(&array, &mut model, &mut rng, 30);
    array
        .replace_member(3, Box::new(MemDisk::new("new", MEMBER_BYTES)), [0xfa; 16])
        .unwrap();
    array.fail_member(3).unwrap();
    let st = array.status();
    let r = st.members.iter().find(|m| m.name == "new").unwrap();
    assert_eq!((r.role.as_str(), r.slot), ("rebuilding", Some(3)), "{st:?}");
    assert_eq!(st.pending, vec![TaskKind::Rebuild]);
    let reports = array
        .run_pending(&mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert!(
        reports.iter().all(|r| r.outcome == TaskOutcome::Completed),
        "{reports:?}"
    );
    assert!(!array.status().degraded);
    verify(&array, &model, "replacement turned rebuild");
    check_clean(&array, "replacement turned rebuild");
}

/// A member with latent sector errors: reads of `bad` ranges fail; a write over a sector heals
/// it when `heals` (the drive remaps the sector), or not (the medium is gone).
#[derive(Debug)]
struct Latent {
    inner: MemDisk,
    bad: Arc<Mutex<Vec<std::ops::Range<u64>>>>,
    heals: bool,
}

impl raidkit_disk::DiskWrapper for Latent {
    type Inner = MemDisk;
    fn inner(&self) -> &MemDisk {
        &self.inner
    }
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), raidkit_disk::DiskError> {
        let end = offset_bytes + buf.len() as u64;
        if self
            .bad
            .lock()
            .unwrap()
            .iter()
            .any(|r| offset_bytes < r.end && r.start < end)
        {
            return Err(raidkit_disk::DiskError::io(
                self.inner.name(),
                "read",
                offset_bytes,
                std::io::Error::other("latent sector error"),
            ));
        }
        self.inner.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), raidkit_disk::DiskError> {
        if self.heals {
            // Sector by sector: what the write covers is good again.
            let end = offset_bytes + buf.len() as u64;
            let mut bad = self.bad.lock().unwrap();
            let mut left = Vec::new();
            for r in bad.drain(..) {
                if r.start < offset_bytes {
                    left.push(r.start..r.end.min(offset_bytes));
                }
                if r.end > end {
                    left.push(r.start.max(end)..r.end);
                }
            }
            *bad = left.into_iter().filter(|r| r.start < r.end).collect();
        }
        self.inner.write_at(buf, offset_bytes)
    }
}

type BadRanges = Arc<Mutex<Vec<std::ops::Range<u64>>>>;

fn with_latent(
    disks: &[MemDisk],
    victim: usize,
    ranges: Vec<std::ops::Range<u64>>,
    heals: bool,
) -> (Vec<Box<dyn Disk>>, BadRanges) {
    let bad = Arc::new(Mutex::new(ranges));
    let members = disks
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if i == victim {
                Box::new(Latent {
                    inner: d.clone(),
                    bad: bad.clone(),
                    heals,
                }) as Box<dyn Disk>
            } else {
                Box::new(d.clone()) as Box<dyn Disk>
            }
        })
        .collect();
    (members, bad)
}

/// Patrol read finds latent sector errors before a read does: a block that heals when written
/// is rewritten from redundancy (the member stays in the array); one that does not goes into
/// md's bad-block log, and reads of it come from redundancy, also after reassembly.
#[test]
fn patrol_rewrites_latent_errors_and_logs_what_stays_bad() {
    for threads in TASK_THREADS {
        patrol_rewrites_latent_errors(threads);
    }
}

fn patrol_rewrites_latent_errors(threads: Option<usize>) {
    for (level, layout, n) in [(5, 2, 4), (6, 2, 5), (1, 0, 2), (10, 0x102, 4)] {
        for heals in [true, false] {
            let ctx = format!("RAID {level} heals {heals}, {threads:?} threads");
            let (disks, array) = create(level, layout, n, 0, 27);
            let mut rng = Rng(27);
            let mut model = vec![0u8; array.size_bytes() as usize];
            write_random(&array, &mut model, &mut rng, 60);
            array.stop().unwrap();
            drop(array);
            let sb = raidkit_engine::read_superblock(&disks[1]).unwrap().sb;
            let base = sb.data_offset_sectors * 512;
            let data = sb.size_sectors * 512;
            let (third, half) = (data / 3 / 4096 * 4096, data / 2 / 4096 * 4096);
            // Two bad patches: 1 KiB inside one 4 KiB block and 6 KiB across two blocks.
            let ranges = vec![
                base + third + 1024..base + third + 2048,
                base + half + 512..base + half + 512 + 6144,
            ];
            let (members, bad) = with_latent(&disks, 1, ranges, heals);
            let (array, _) = Array::assemble(
                members,
                AssembleOptions {
                    config: config_with(threads),
                    ..AssembleOptions::default()
                },
            )
            .unwrap();
            array.set_task_rates(TaskRates::full());
            let r = run(&array, TaskKind::Patrol);
            let st = array.status();
            assert!(
                !st.degraded,
                "{ctx}: patrol failed the member: {:?}",
                st.log
            );
            // 1 KiB -> one 4 KiB block; 6 KiB at +512 -> two blocks.
            if heals {
                assert_eq!(r.progress.corrected_sectors, 24, "{ctx}: {r:?}");
                assert_eq!(r.progress.bad_block_sectors, 0, "{ctx}");
                assert!(bad.lock().unwrap().is_empty(), "{ctx}: not all healed");
            } else {
                assert_eq!(r.progress.corrected_sectors, 0, "{ctx}: {r:?}");
                assert_eq!(r.progress.bad_block_sectors, 24, "{ctx}");
            }
            // Reads of the whole array are right and fail nothing.
            verify(&array, &model, &ctx);
            assert!(!array.status().degraded, "{ctx}: a read failed the member");
            // Writes over the bad ranges keep working, and reads see them.
            write_random(&array, &mut model, &mut rng, 40);
            verify(&array, &model, &ctx);
            let again = run(&array, TaskKind::Patrol);
            assert_eq!(
                again.progress.corrected_sectors + again.progress.bad_block_sectors,
                0,
                "{ctx}: the second patrol found errors again: {again:?}"
            );
            array.stop().unwrap();
            drop(array);
            if !heals {
                // The log is on the member: md's BAD_BLOCKS feature and entries there.
                let f = raidkit_engine::read_superblock(&disks[1]).unwrap();
                assert!(
                    f.sb.feature_map
                        .contains(raidkit_metadata::FeatureMap::BAD_BLOCKS),
                    "{ctx}"
                );
                let (members, _) = with_latent(&disks, 1, bad.lock().unwrap().clone(), false);
                let (array, report) = Array::assemble(
                    members,
                    AssembleOptions {
                        config: config(),
                        ..AssembleOptions::default()
                    },
                )
                .unwrap();
                assert!(
                    report.events.iter().any(|e| matches!(
                        e,
                        ArrayEvent::BadBlocksListed { member, ranges }
                            if member == disks[1].name() && *ranges > 0
                    )),
                    "{ctx}: {report:?}"
                );
                verify(&array, &model, &format!("{ctx} after reassembly"));
                assert!(!array.status().degraded, "{ctx}");
            }
        }
    }
}

/// A spare that takes a slot while a rebuild pass runs is not counted as rebuilt by that pass
/// (it joined half-way): it gets a pass of its own. Found by the simulator (seed 1414).
#[test]
fn a_spare_joining_mid_rebuild_gets_its_own_pass() {
    let (_disks, array) = create(6, 2, 5, 0, 29);
    let mut rng = Rng(29);
    let mut model = vec![0u8; array.size_bytes() as usize];
    write_random(&array, &mut model, &mut rng, 40);
    array.fail_member(1).unwrap();
    array
        .add_spare(Box::new(MemDisk::new("s1", MEMBER_BYTES)), [0xd1; 16])
        .unwrap();
    array
        .add_spare(Box::new(MemDisk::new("s2", MEMBER_BYTES)), [0xd2; 16])
        .unwrap();
    let mut failed = false;
    let first = array
        .run_task(
            TaskKind::Rebuild,
            &mut |p| {
                if !failed && p.percent >= 30.0 {
                    failed = true;
                    array.fail_member(3).unwrap();
                }
            },
            &AtomicBool::new(false),
        )
        .unwrap();
    assert_eq!(first.outcome, TaskOutcome::Completed);
    let st = array.status();
    let s2 = st.members.iter().find(|m| m.name == "s2").unwrap();
    assert_eq!(
        (s2.role.as_str(), s2.slot),
        ("rebuilding", Some(3)),
        "the spare that joined half-way must still be rebuilding: {st:?}"
    );
    let rest = array
        .run_pending(&mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].progress.start_sectors, 0);
    assert!(!array.status().degraded);
    verify(&array, &model, "spare joining mid-rebuild");
    check_clean(&array, "spare joining mid-rebuild");
}

/// A MemDisk whose reads and writes fail once `reads_left` reads have been served, counted
/// from when `armed` is set.
#[derive(Debug, Clone)]
struct BreaksAfter {
    inner: MemDisk,
    armed: Arc<AtomicBool>,
    reads_left: Arc<std::sync::atomic::AtomicI64>,
}

impl BreaksAfter {
    fn new(inner: MemDisk) -> BreaksAfter {
        BreaksAfter {
            inner,
            armed: Arc::new(AtomicBool::new(false)),
            reads_left: Arc::new(std::sync::atomic::AtomicI64::new(i64::MAX)),
        }
    }

    /// Breaks after `reads` more reads.
    fn arm(&self, reads: i64) {
        self.reads_left.store(reads, Ordering::SeqCst);
        self.armed.store(true, Ordering::SeqCst);
    }

    fn broken(&self) -> bool {
        self.armed.load(Ordering::SeqCst) && self.reads_left.load(Ordering::SeqCst) <= 0
    }

    fn fail(&self, op: &'static str, off: u64) -> raidkit_disk::DiskError {
        raidkit_disk::DiskError::new(
            self.inner.name(),
            op,
            off,
            raidkit_disk::DiskErrorKind::Io(std::io::Error::other("injected medium error")),
        )
    }
}

impl raidkit_disk::DiskWrapper for BreaksAfter {
    type Inner = MemDisk;
    fn inner(&self) -> &MemDisk {
        &self.inner
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<(), raidkit_disk::DiskError> {
        if self.armed.load(Ordering::SeqCst) && self.reads_left.fetch_sub(1, Ordering::SeqCst) <= 0
        {
            return Err(self.fail("read", off));
        }
        self.inner.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> Result<(), raidkit_disk::DiskError> {
        if self.broken() {
            return Err(self.fail("write", off));
        }
        self.inner.write_at(buf, off)
    }
    fn flush(&self) -> Result<(), raidkit_disk::DiskError> {
        if self.broken() {
            return Err(self.fail("flush", 0));
        }
        Ok(())
    }
}

/// A source member dies in the middle of a rebuild, with one thread and with a burst of three
/// (whose other threads are mid-step when it happens): RAID 6 loses it too and finishes the
/// rebuild from what is left; RAID 5 and RAID 1 (two members) have nothing left to rebuild
/// from, and the rebuild ends with the array failed. Either way every read that succeeds
/// returns the model's bytes, and nothing is written after the array failed.
#[test]
fn a_source_member_dying_mid_rebuild() {
    for threads in TASK_THREADS {
        for (level, layout, n) in [(6, 2, 6), (5, 2, 4), (1, 0, 2), (10, 0x102, 4)] {
            let ctx = format!("RAID {level} n {n}, {threads:?} threads");
            let disks: Vec<BreaksAfter> = (0..n)
                .map(|i| BreaksAfter::new(MemDisk::new(&format!("m{i}"), MEMBER_BYTES)))
                .collect();
            let opts = options(level, layout, n, 0, 9, threads);
            let members: Vec<Box<dyn Disk>> = disks
                .iter()
                .map(|d| Box::new(d.clone()) as Box<dyn Disk>)
                .collect();
            let array = Array::create_with_policy(members, opts, ConsistencyPolicy::Resync)
                .unwrap_or_else(|e| panic!("{ctx}: create: {e}"));
            array.set_task_rates(TaskRates::full());
            let mut rng = Rng(31 + level as u64);
            let mut model = vec![0u8; array.size_bytes() as usize];
            write_random(&array, &mut model, &mut rng, 40);
            array.fail_member(0).unwrap();
            array
                .add_spare(Box::new(MemDisk::new("spare", MEMBER_BYTES)), [0xdd; 16])
                .unwrap();
            // The member every step reads from (RAID 10 near 2: slot 1 mirrors slot 0).
            let victim = 1;
            disks[victim].arm(6);
            let r = array.run_task(TaskKind::Rebuild, &mut |_| {}, &AtomicBool::new(false));
            let st = array.status();
            let victim_state = &st.members.iter().find(|m| m.index == victim).unwrap().role;
            assert_eq!(victim_state, "faulty", "{ctx}: {st:?}");
            if level == 6 {
                let r = r.unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert_eq!(r.outcome, TaskOutcome::Completed, "{ctx}: {r:?}");
                assert!(!st.failed, "{ctx}");
                assert_eq!(st.missing_slots, vec![victim], "{ctx}");
                verify(&array, &model, &ctx);
            } else {
                let failed = match &r {
                    Err(EngineError::ArrayFailed { .. }) => true,
                    Ok(r) => matches!(r.outcome, TaskOutcome::Failed { .. }),
                    Err(_) => false,
                };
                assert!(failed, "{ctx}: {r:?}");
                assert!(st.failed, "{ctx}: the array should have failed");
                assert!(array.write_at(&[1u8; 512], 0, false).is_err(), "{ctx}");
                // Reads that still succeed (sectors whose copies live) return the model's bytes.
                for off in (0..model.len()).step_by(64 << 10) {
                    let mut buf = vec![0u8; 4096];
                    if array.read_at(&mut buf, off as u64).is_ok() {
                        assert_eq!(buf, model[off..off + 4096], "{ctx}: offset {off}");
                    }
                }
            }
        }
    }
}

/// A stopped check (or repair, or patrol) goes on from where it stopped at its next run on the
/// same assembly, as md moves `sync_min` for an interrupted check; a run that completes starts
/// the next one from the beginning again; `set_task_start` sets the start (md's `sync_min`)
/// and refuses tasks that resume from the superblocks.
#[test]
fn a_stopped_check_goes_on_from_where_it_stopped() {
    for threads in TASK_THREADS {
        let ctx = format!("{threads:?} threads");
        let (disks, array) = create_threads(5, 2, 4, 0, 41, None, threads);
        let mut rng = Rng(41);
        let mut model = vec![0u8; array.size_bytes() as usize];
        write_random(&array, &mut model, &mut rng, 30);
        array.flush().unwrap();
        let geo = array.geometry().clone();
        let end = geo.member_data_sectors;
        let late = end / 32 * 32 - 32 + 5;
        corrupt(&disks, &array, geo.stripe(0).p_member, 3);
        corrupt(&disks, &array, geo.stripe(late / 32).p_member, late);
        let stop = AtomicBool::new(false);
        let first = array
            .run_task(
                TaskKind::Check,
                &mut |p| {
                    if p.percent >= 30.0 {
                        stop.store(true, Ordering::Relaxed);
                    }
                },
                &stop,
            )
            .unwrap();
        assert_eq!(first.outcome, TaskOutcome::Stopped, "{ctx}");
        let at = first.progress.position_sectors;
        assert!(at > 0 && at <= late, "{ctx}: stopped at {at}");
        assert_eq!(first.progress.mismatch_sectors, 8, "{ctx}: {first:?}");
        let second = run(&array, TaskKind::Check);
        assert_eq!(second.progress.start_sectors, at, "{ctx}: did not go on");
        assert_eq!(second.progress.mismatch_sectors, 8, "{ctx}: {second:?}");
        let third = run(&array, TaskKind::Check);
        assert_eq!(
            third.progress.start_sectors, 0,
            "{ctx}: a completed check starts over"
        );
        assert_eq!(third.progress.mismatch_sectors, 16, "{ctx}");
        // md's sync_min, set by hand: rounded down to 4 KiB.
        array.set_task_start(TaskKind::Check, late - 5).unwrap();
        let from = run(&array, TaskKind::Check);
        assert_eq!(from.progress.start_sectors, (late - 5) / 8 * 8, "{ctx}");
        assert_eq!(from.progress.mismatch_sectors, 8, "{ctx}");
        assert!(array.set_task_start(TaskKind::Check, end).is_err(), "{ctx}");
        for kind in [TaskKind::Rebuild, TaskKind::Resync, TaskKind::Replace] {
            assert!(
                matches!(array.set_task_start(kind, 0), Err(EngineError::Invalid(_))),
                "{ctx}: {kind} takes no start"
            );
        }
        // Patrol too.
        let stop = AtomicBool::new(false);
        let p = array
            .run_task(
                TaskKind::Patrol,
                &mut |p| {
                    if p.percent >= 30.0 {
                        stop.store(true, Ordering::Relaxed);
                    }
                },
                &stop,
            )
            .unwrap();
        assert_eq!(p.outcome, TaskOutcome::Stopped, "{ctx}");
        let again = run(&array, TaskKind::Patrol);
        assert_eq!(
            again.progress.start_sectors, p.progress.position_sectors,
            "{ctx}: patrol did not go on"
        );
        verify(&array, &model, &ctx);
    }
}

/// With the default `task_threads` (automatic), a full-rate rebuild over members whose I/O is
/// memory copies runs in bursts on every CPU once the member workers have measured that, and
/// the report says how many threads it used; with `Some(1)` it never does.
#[test]
fn the_automatic_choice_runs_bursts_on_memory_members() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (threads, want) in [(None, cpus), (Some(1), 1)] {
        let ctx = format!("task_threads {threads:?}, {cpus} CPUs");
        let n = 4;
        let member_bytes = 24 << 20;
        let disks: Vec<MemDisk> = (0..n)
            .map(|i| MemDisk::new(&format!("m{i}"), member_bytes))
            .collect();
        let opts = CreateOptions {
            level: 5,
            layout: Some(2),
            chunk_sectors: 128,
            raid_devices: n,
            metadata: SuperblockVersion::V1_2,
            size_sectors: None,
            name: "auto".into(),
            set_uuid: [43; 16],
            device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
            ctime_seconds: 1_700_000_000,
            init: raidkit_engine::Init::Zeroed,
            consistency: ConsistencyPolicy::Resync,
            config: config_with(threads),
        };
        let array = Array::create(boxed(&disks), opts).unwrap();
        array.set_task_rates(TaskRates::full());
        let mut rng = Rng(43);
        let mut model = vec![0u8; array.size_bytes() as usize];
        write_random(&array, &mut model, &mut rng, 60);
        array.fail_member(2).unwrap();
        array
            .add_spare(Box::new(MemDisk::new("spare", member_bytes)), [0xaa; 16])
            .unwrap();
        let r = run(&array, TaskKind::Rebuild);
        assert_eq!(r.progress.threads, want, "{ctx}: {r:?}");
        verify(&array, &model, &ctx);
        check_clean(&array, &ctx);
    }
}

/// A resync stopped cleanly part-way records its cursor; once the array is written again its
/// superblocks say dirty from 0 (md's super_1_sync writes resync_offset 0 while the array is
/// not in sync), so a crash then resyncs it all: writes below the cursor were in flight too.
#[test]
fn a_write_after_a_resync_stopped_part_way_records_the_array_dirty_from_0() {
    for (level, layout, n) in [(10, 0x102, 5), (5, 2, 4)] {
        let ctx = format!("RAID {level} n {n}");
        let policy = Some(ConsistencyPolicy::Resync);
        let (disks, array) = create_threads(level, layout, n, 0, 11, policy, None);
        let mut rng = Rng(7);
        let mut model = vec![0u8; array.size_bytes() as usize];
        write_random(&array, &mut model, &mut rng, 30);
        drop(array); // crash
        {
            let a = assemble_threads(&disks, false, None);
            let stop = AtomicBool::new(false);
            let mut at_tenth = |p: &raidkit_engine::TaskProgress| {
                if p.percent >= 10.0 {
                    stop.store(true, Ordering::Relaxed);
                }
            };
            let r = a.run_task(TaskKind::Resync, &mut at_tenth, &stop).unwrap();
            assert_eq!(r.outcome, TaskOutcome::Stopped, "{ctx}");
            a.stop().unwrap();
        }
        let a = assemble_threads(&disks, false, None);
        let from = a.status().resync_from_sectors;
        assert!(from.is_some_and(|f| f > 0), "{ctx}: {from:?}");
        write_random(&a, &mut model, &mut rng, 5);
        drop(a); // crash
        let a = assemble_threads(&disks, false, None);
        assert_eq!(a.status().resync_from_sectors, Some(0), "{ctx}");
        a.run_pending(&mut |_| {}, &AtomicBool::new(false)).unwrap();
        verify(&a, &model, &ctx);
        a.stop().unwrap();
    }
}

/// md's speed_limit_min: a floor above what the task can reach means it never yields,
/// however busy the foreground and however small its share.
#[test]
fn a_rate_floor_keeps_a_task_from_yielding() {
    let (_disks, array) = create(5, 2, 4, 0, 18);
    array.set_task_rates(TaskRates {
        check_percent: 1,
        min_bytes_per_s: Some(1 << 50),
        ..TaskRates::default()
    });
    let mut throttled = false;
    while_reading(&array, || {
        let r = array
            .run_task(
                TaskKind::Check,
                &mut |p| throttled |= p.throttled,
                &AtomicBool::new(false),
            )
            .unwrap();
        assert_eq!(r.outcome, TaskOutcome::Completed);
    });
    assert!(!throttled, "the check yielded below its floor");
}

/// Runs `f` while another thread keeps reading from `array` (foreground I/O present from
/// before `f` starts: on a loaded machine the reader thread may otherwise not run before a
/// short task is over).
fn while_reading(array: &Array, f: impl FnOnce()) {
    let busy = AtomicBool::new(true);
    let reads = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = vec![0u8; 4096];
            while busy.load(Ordering::Relaxed) {
                array.read_at(&mut buf, 0).unwrap();
                reads.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        while reads.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        f();
        busy.store(false, Ordering::Relaxed);
    });
}
