//! md's internal write-intent bitmap: written the way mdadm reads it, bits set before writes
//! and cleared after they settle, resync after a crash limited to the marked regions, and a
//! member that comes back (re-add) brought up to date from the bits alone.

use raidkit_disk::{Disk, MemDisk};
use raidkit_engine::{
    Array, AssembleOptions, ConsistencyPolicy, CreateOptions, EngineConfig, TaskKind, TaskOutcome,
    TaskRates,
};
use raidkit_metadata::SuperblockVersion;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const MEMBER_BYTES: u64 = 8 << 20;
/// 64 KiB per bit: many bits over an 8 MiB member.
const BITMAP_CHUNK: u64 = 64 << 10;

fn boxed(disks: &[MemDisk]) -> Vec<Box<dyn Disk>> {
    disks
        .iter()
        .map(|d| Box::new(d.clone()) as Box<dyn Disk>)
        .collect()
}

fn config() -> EngineConfig {
    EngineConfig {
        stripe_cache_bytes: 1 << 20,
        max_inflight: 4,
        task_threads: None,
    }
}

fn create(level: i32, layout: u32, n: usize) -> (Vec<MemDisk>, Array) {
    let disks: Vec<MemDisk> = (0..n)
        .map(|i| MemDisk::new(&format!("b{i}"), MEMBER_BYTES))
        .collect();
    let array = Array::create(
        boxed(&disks),
        CreateOptions {
            level,
            layout: Some(layout),
            chunk_sectors: 64,
            raid_devices: n,
            metadata: SuperblockVersion::V1_2,
            size_sectors: None,
            name: "bitmap".into(),
            set_uuid: [0x5b; 16],
            device_uuids: (0..n).map(|i| [0x30 + i as u8; 16]).collect(),
            ctime_seconds: 1_700_000_000,
            init: raidkit_engine::Init::Zeroed,
            consistency: ConsistencyPolicy::Bitmap {
                chunk_bytes: BITMAP_CHUNK,
            },
            config: config(),
        },
    )
    .unwrap_or_else(|e| panic!("create RAID {level}: {e}"));
    array.set_task_rates(TaskRates::full());
    (disks, array)
}

fn assemble(disks: &[MemDisk], force: bool) -> (Array, raidkit_engine::AssembleReport) {
    let (a, r) = Array::assemble(
        boxed(disks),
        AssembleOptions {
            force,
            // Members are left out on purpose (lost, then re-added).
            run: true,
            config: config(),
            ..AssembleOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("assemble: {e}"));
    a.set_task_rates(TaskRates::full());
    (a, r)
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
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

/// `mdadm --examine-bitmap` of the bitmap area of a member, copied into a file of its own
/// (mdadm reads a regular file as a bitmap file).
fn mdadm_examine_bitmap(disk: &MemDisk) -> Option<String> {
    if std::env::var("RAIDKIT_SKIP_MDADM").as_deref() == Ok("1") {
        return None;
    }
    let f = raidkit_engine::read_superblock(disk).unwrap();
    let off = f.sb.bitmap_offset().expect("a bitmap");
    let start = (f.sb.super_offset_sectors as i64 + off as i64) as u64 * 512;
    let image = disk.snapshot();
    let path = std::env::temp_dir().join(format!(
        "raidkit-bitmap-{}-{}.bin",
        std::process::id(),
        disk.name()
    ));
    std::fs::write(&path, &image[start as usize..start as usize + 64 * 1024]).unwrap();
    let out = Command::new("mdadm")
        .arg("--examine-bitmap")
        .arg(&path)
        .output()
        .expect("mdadm is installed (apt-get install mdadm, or RAIDKIT_SKIP_MDADM=1)");
    let _ = std::fs::remove_file(&path);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mdadm -X failed: {text}");
    Some(text)
}

fn field<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(" : ")?;
            (k.trim() == name).then_some(v.trim())
        })
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// The bitmap raidkit writes is one mdadm reads: magic, chunk, events following the
/// superblock, and the dirty count raidkit reports, before and after bits are cleared.
#[test]
fn bitmap_is_what_mdadm_reads() {
    let (disks, array) = create(5, 2, 4);
    array
        .write_at(&pattern(1, 256 << 10), 1 << 20, false)
        .unwrap();
    let dirty = array.bitmap_dirty_bits().unwrap();
    assert!(dirty > 0, "a write left no bit set");
    let events = raidkit_engine::read_superblock(&disks[0])
        .unwrap()
        .sb
        .events;
    if let Some(text) = mdadm_examine_bitmap(&disks[0]) {
        assert_eq!(field(&text, "Chunksize"), "64 KB", "{text}");
        let ev: u64 = field(&text, "Events").parse().unwrap();
        assert!(ev == events || ev + 1 == events, "{text}");
        assert!(
            field(&text, "Bitmap").contains(&format!("{dirty} dirty")),
            "raidkit says {dirty} dirty bits:\n{text}"
        );
    }
    array.stop().unwrap();
    assert_eq!(
        array.bitmap_dirty_bits(),
        Some(0),
        "a clean stop clears the bits"
    );
    if let Some(text) = mdadm_examine_bitmap(&disks[1]) {
        assert!(field(&text, "Bitmap").contains(" 0 dirty"), "{text}");
    }
}

/// After a crash, the resync covers only regions the bitmap marks: planted damage where
/// nothing was written stays (a later check counts it), damage under a set bit is repaired.
#[test]
fn resync_after_a_crash_covers_only_marked_regions() {
    for (level, layout, n) in [(5, 2, 4), (6, 2, 5), (1, 0, 2), (10, 0x102, 4)] {
        let ctx = format!("RAID {level}");
        let (disks, array) = create(level, layout, n);
        let data = pattern(2, 128 << 10);
        array.write_at(&data, 0, false).unwrap();
        array.flush().unwrap();
        drop(array); // crash: the bits of the write stay set
        let (array, report) = assemble(&disks, false);
        assert!(report.was_dirty, "{ctx}");
        let marked = array.bitmap_dirty_bits().unwrap();
        assert!(marked > 0, "{ctx}: {report:?}");
        let geo = array.geometry().clone();
        drop(array);
        // Damage a copy or parity inside the marked region and far outside it.
        let damage = |member_sector: u64, slot: usize| {
            let f = raidkit_engine::read_superblock(&disks[slot]).unwrap();
            let at = (f.sb.data_offset_sectors + member_sector) * 512 + 3;
            let mut b = [0u8; 1];
            disks[slot].read_at(&mut b, at).unwrap();
            b[0] ^= 0xff;
            disks[slot].write_at(&b, at).unwrap();
        };
        let far = geo.member_data_sectors - 256;
        match level {
            4..=6 => {
                damage(8, geo.stripe(0).p_member);
                damage(far, geo.stripe(far / 64).p_member);
            }
            _ => {
                let (c, _) = geo.copies(8);
                damage(c[1].1, c[1].0);
                let a = geo.array_sectors() - 256;
                let (c, _) = geo.copies(a);
                damage(c[1].1, c[1].0);
            }
        }
        let (array, _) = assemble(&disks, false);
        let reports = array
            .run_pending(&mut |_| {}, &AtomicBool::new(false))
            .unwrap();
        assert_eq!(reports.len(), 1, "{ctx}: {reports:?}");
        assert_eq!(reports[0].progress.kind, TaskKind::Resync);
        assert_eq!(
            reports[0].progress.mismatch_sectors, 8,
            "{ctx}: the resync should have seen only the damage under a set bit"
        );
        let check = array
            .run_task(TaskKind::Check, &mut |_| {}, &AtomicBool::new(false))
            .unwrap();
        assert_eq!(
            check.progress.mismatch_sectors, 8,
            "{ctx}: the damage outside the marked regions is still there (the resync skipped it)"
        );
        let mut back = vec![0u8; data.len()];
        array.read_at(&mut back, 0).unwrap();
        assert!(back == data, "{ctx}");
    }
}

/// Counts bytes written to a member.
#[derive(Debug)]
struct Counting {
    inner: MemDisk,
    written: Arc<AtomicU64>,
}

impl raidkit_disk::DiskWrapper for Counting {
    type Inner = MemDisk;
    fn inner(&self) -> &MemDisk {
        &self.inner
    }
    fn write_at(&self, buf: &[u8], o: u64) -> Result<(), raidkit_disk::DiskError> {
        self.written.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.write_at(buf, o)
    }
}

/// A member that was pulled and comes back is re-added into its slot and rebuilt only where
/// the array was written while it was away; the result is right (reads that need it agree),
/// and md's check finds nothing. Once the bits have been cleared after the array was whole
/// again, a re-add is refused with the reason.
#[test]
fn re_add_rebuilds_only_what_was_written_while_away() {
    for (level, layout, n, away) in [(5, 2, 4, 2), (6, 2, 5, 0), (1, 0, 2, 1), (10, 0x102, 4, 3)] {
        let ctx = format!("RAID {level}");
        let (disks, array) = create(level, layout, n);
        let size = array.size_bytes() as usize;
        let mut model = pattern(3, size);
        array.write_at(&model, 0, false).unwrap();
        array.stop().unwrap();
        drop(array);
        // The member is pulled; the array runs degraded and is written in one small place.
        let present: Vec<MemDisk> = (0..n)
            .filter(|&i| i != away)
            .map(|i| disks[i].clone())
            .collect();
        let (array, _) = assemble(&present, false);
        assert!(array.status().degraded, "{ctx}");
        let new = pattern(4, 96 << 10);
        let at = size / 2 / 4096 * 4096;
        array.write_at(&new, at as u64, false).unwrap();
        model[at..at + new.len()].copy_from_slice(&new);
        array.stop().unwrap();
        let marked = array.bitmap_dirty_bits().unwrap();
        assert!(marked > 0, "{ctx}: degraded writes must keep their bits");
        drop(array);
        // It comes back.
        let (array, _) = assemble(&present, false);
        assert_eq!(
            array.bitmap_dirty_bits(),
            Some(marked),
            "{ctx}: bits survive a stop"
        );
        let written = Arc::new(AtomicU64::new(0));
        let slot = array
            .re_add(Box::new(Counting {
                inner: disks[away].clone(),
                written: written.clone(),
            }))
            .unwrap_or_else(|e| panic!("{ctx}: re-add: {e}"));
        assert_eq!(slot, away, "{ctx}");
        let reports = array
            .run_pending(&mut |_| {}, &AtomicBool::new(false))
            .unwrap();
        assert!(
            reports.iter().all(|r| r.outcome == TaskOutcome::Completed),
            "{ctx}: {reports:?}"
        );
        let rebuilt = written.load(Ordering::Relaxed);
        let member_bytes = array.geometry().member_data_sectors * 512;
        assert!(
            rebuilt > 0 && rebuilt <= marked * BITMAP_CHUNK + (1 << 20),
            "{ctx}: re-add wrote {rebuilt} bytes for {marked} marked bits (member holds {member_bytes})"
        );
        assert!(!array.status().degraded, "{ctx}");
        let check = array
            .run_task(TaskKind::Check, &mut |_| {}, &AtomicBool::new(false))
            .unwrap();
        assert_eq!(check.progress.mismatch_sectors, 0, "{ctx}");
        // Reads that need the returned member.
        let others: Vec<usize> = array
            .status()
            .members
            .iter()
            .filter(|m| m.slot.is_some() && m.slot != Some(away))
            .map(|m| m.index)
            .take(if level == 6 { 2 } else { 1 })
            .collect();
        for i in others {
            array.fail_member(i).unwrap();
        }
        let mut back = vec![0u8; size];
        array.read_at(&mut back, 0).unwrap();
        assert!(back == model, "{ctx}: wrong data after the re-add");
        drop(array);
    }

    // Too late: the array became whole with a new member and cleared its bits.
    let (disks, array) = create(5, 2, 4);
    array.fail_member(1).unwrap();
    array.write_at(&pattern(5, 64 << 10), 0, false).unwrap();
    array.remove_member(1).unwrap();
    array
        .add_spare(Box::new(MemDisk::new("spare", MEMBER_BYTES)), [0x77; 16])
        .unwrap();
    array
        .run_pending(&mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    array.stop().unwrap(); // whole: the bits are cleared
    let err = array.re_add(Box::new(disks[1].clone())).unwrap_err();
    assert!(
        err.to_string().contains("slot") || err.to_string().contains("cleared"),
        "{err}"
    );
}

/// A re-add interrupted by a crash (the array dropped without a stop, part way through the
/// bitmap-driven rebuild, with writes going on): the next assembly resumes bringing the member
/// up to date, and afterwards the data is right also where only the re-added member has it.
#[test]
fn re_add_interrupted_by_a_crash_resumes() {
    for (level, layout, n, away) in [(5, 2, 4, 1), (6, 2, 5, 3), (1, 0, 2, 0)] {
        let ctx = format!("RAID {level}");
        let (disks, array) = create(level, layout, n);
        let size = array.size_bytes() as usize;
        let mut model = pattern(7, size);
        array.write_at(&model, 0, false).unwrap();
        array.stop().unwrap();
        drop(array);
        let present: Vec<MemDisk> = (0..n)
            .filter(|&i| i != away)
            .map(|i| disks[i].clone())
            .collect();
        let (array, _) = assemble(&present, false);
        // Most of the array changes while the member is away: many bits, many rebuild steps.
        let new = pattern(8, size / 4 * 3 / 4096 * 4096);
        array.write_at(&new, 0, false).unwrap();
        model[..new.len()].copy_from_slice(&new);
        array.stop().unwrap();
        drop(array);

        let (array, _) = assemble(&present, false);
        array.re_add(Box::new(disks[away].clone())).unwrap();
        let stop = AtomicBool::new(false);
        let mut steps = 0;
        let report = array
            .run_task(
                TaskKind::Rebuild,
                &mut |_| {
                    steps += 1;
                    if steps >= 2 {
                        stop.store(true, Ordering::Relaxed);
                    }
                },
                &stop,
            )
            .unwrap();
        assert_ne!(report.outcome, TaskOutcome::Completed, "{ctx}: {report:?}");
        // Writes during the interrupted recovery, then the crash.
        let more = pattern(9, 128 << 10);
        let at = size / 3 / 4096 * 4096;
        array.write_at(&more, at as u64, false).unwrap();
        array.flush().unwrap();
        model[at..at + more.len()].copy_from_slice(&more);
        drop(array);

        // Dirty and (until the member is up to date) degraded: a parity array needs --force,
        // as md refuses a dirty degraded array; without it nothing starts.
        if level != 1 {
            assert!(
                Array::assemble(
                    boxed(&disks),
                    AssembleOptions {
                        config: config(),
                        ..AssembleOptions::default()
                    }
                )
                .is_err(),
                "{ctx}: a dirty degraded parity array started without --force"
            );
        }
        let (array, report) = assemble(&disks, level != 1);
        assert!(
            array.status().degraded,
            "{ctx}: the re-added member is not up to date yet: {report:?}"
        );
        let reports = array
            .run_pending(&mut |_| {}, &AtomicBool::new(false))
            .unwrap();
        assert!(
            reports.iter().all(|r| r.outcome == TaskOutcome::Completed),
            "{ctx}: {reports:?}"
        );
        let st = array.status();
        assert!(!st.degraded, "{ctx}: {st:?}");
        let check = array
            .run_task(TaskKind::Check, &mut |_| {}, &AtomicBool::new(false))
            .unwrap();
        assert_eq!(check.progress.mismatch_sectors, 0, "{ctx}");
        // Leave out as many other members as the level allows: the re-added one must serve.
        let others: Vec<usize> = st
            .members
            .iter()
            .filter(|m| m.slot.is_some() && m.slot != Some(away))
            .map(|m| m.index)
            .take(if level == 6 { 2 } else { 1 })
            .collect();
        for i in others {
            array.fail_member(i).unwrap();
        }
        let mut back = vec![0u8; size];
        array.read_at(&mut back, 0).unwrap();
        assert!(back == model, "{ctx}: wrong data after the resumed re-add");
        drop(array);
    }
}
