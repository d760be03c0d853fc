//! Member I/O errors: the member is marked faulty (role 0xfffe in the survivors' superblocks,
//! events + 1) and the array goes on degraded; beyond what the level can lose, requests fail
//! with a clear error and nothing more is written.

use raidkit_disk::{Disk, DiskError, DiskErrorKind, MemDisk};
use raidkit_engine::{
    Array, ArrayEvent, AssembleOptions, CreateOptions, EngineConfig, EngineError,
};
use raidkit_metadata::SuperblockVersion;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A MemDisk that fails every I/O once `broken` is set (writes and flushes only, once
/// `writes_broken` is), and counts writes.
#[derive(Debug, Clone)]
struct Breakable {
    inner: MemDisk,
    broken: Arc<AtomicBool>,
    writes_broken: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
}

impl Breakable {
    fn err(&self, op: &'static str, off: u64) -> DiskError {
        DiskError::new(
            self.inner.name(),
            op,
            off,
            DiskErrorKind::Io(std::io::Error::other("injected medium error")),
        )
    }
}

impl raidkit_disk::DiskWrapper for Breakable {
    type Inner = MemDisk;
    fn inner(&self) -> &MemDisk {
        &self.inner
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<(), DiskError> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(self.err("read", off));
        }
        self.inner.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> Result<(), DiskError> {
        if self.broken.load(Ordering::SeqCst) || self.writes_broken.load(Ordering::SeqCst) {
            return Err(self.err("write", off));
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.write_at(buf, off)
    }
    fn flush(&self) -> Result<(), DiskError> {
        if self.broken.load(Ordering::SeqCst) || self.writes_broken.load(Ordering::SeqCst) {
            return Err(self.err("flush", 0));
        }
        Ok(())
    }
}

fn breakable(name: &str) -> Breakable {
    Breakable {
        inner: MemDisk::new(name, 4 << 20),
        broken: Arc::new(AtomicBool::new(false)),
        writes_broken: Arc::new(AtomicBool::new(false)),
        writes: Arc::new(AtomicU64::new(0)),
    }
}

fn setup(level: i32, n: usize) -> (Vec<Breakable>, Array) {
    let disks: Vec<Breakable> = (0..n).map(|i| breakable(&format!("d{i}"))).collect();
    let array = Array::create(
        disks
            .iter()
            .map(|d| Box::new(d.clone()) as Box<dyn Disk>)
            .collect(),
        CreateOptions {
            level,
            layout: None,
            chunk_sectors: 16,
            raid_devices: n,
            metadata: SuperblockVersion::V1_2,
            size_sectors: None,
            name: "f".into(),
            set_uuid: [9; 16],
            device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
            ctime_seconds: 1,
            init: raidkit_engine::Init::Zeroed,
            consistency: raidkit_engine::ConsistencyPolicy::Resync,
            config: EngineConfig::default(),
        },
    )
    .unwrap();
    (disks, array)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

#[test]
fn raid6_survives_two_member_errors_and_fails_cleanly_on_the_third() {
    let (disks, array) = setup(6, 5);
    let size = array.size_bytes() as usize;
    let data = pattern(size, 1);
    array.write_at(&data, 0, false).unwrap();
    let events_before = array.status().events;

    // first member breaks: a read notices, marks it faulty and reconstructs
    disks[1].broken.store(true, Ordering::SeqCst);
    let mut back = vec![0u8; size];
    array.read_at(&mut back, 0).unwrap();
    assert!(
        back == data,
        "read after one member error must still return the data"
    );
    let st = array.status();
    assert_eq!(st.missing_slots, vec![1]);
    assert!(st.events > events_before, "the failure bumps events");
    assert!(
        st.log.iter().any(|e| matches!(
            e,
            ArrayEvent::MemberFaulty { member, slot: Some(1), reason }
                if member == "d1" && reason.contains("injected")
        )),
        "{:?}",
        st.log
    );

    // second member breaks during a write
    disks[3].broken.store(true, Ordering::SeqCst);
    let data2 = pattern(size, 2);
    array.write_at(&data2, 0, false).unwrap();
    array.read_at(&mut back, 0).unwrap();
    assert!(back == data2);
    assert_eq!(array.status().missing_slots, vec![1, 3]);

    // the survivors' superblocks record both as faulty: reassemble from them
    let survivors: Vec<Box<dyn Disk>> = [0, 2, 4]
        .iter()
        .map(|&i| Box::new(disks[i].inner.clone()) as Box<dyn Disk>)
        .collect();
    let (re, _) = Array::assemble(
        survivors,
        AssembleOptions {
            read_only: true,
            force: true,
            ..Default::default()
        },
    )
    .unwrap();
    let mut again = vec![0u8; size];
    re.read_at(&mut again, 0).unwrap();
    assert!(again == data2);
    drop(re);

    // a third member breaks: beyond RAID 6's redundancy
    disks[0].broken.store(true, Ordering::SeqCst);
    let writes_before: Vec<u64> = disks
        .iter()
        .map(|d| d.writes.load(Ordering::SeqCst))
        .collect();
    let err = array.write_at(&pattern(65536, 3), 0, false).unwrap_err();
    assert!(matches!(err, EngineError::ArrayFailed { .. }), "{err}");
    assert!(err.to_string().contains("array failed"), "{err}");
    let st = array.status();
    assert!(st.failed);
    // nothing further is written
    let err = array.write_at(&pattern(512, 4), 0, false).unwrap_err();
    assert!(matches!(err, EngineError::ArrayFailed { .. }));
    // stopping a failed array reports the failure and writes no superblock
    assert!(matches!(array.stop(), Err(EngineError::ArrayFailed { .. })));
    let writes_after: Vec<u64> = disks
        .iter()
        .map(|d| d.writes.load(Ordering::SeqCst))
        .collect();
    // the failing write may have reached some members before the failure was seen; after it,
    // nothing (the stop above wrote nothing either)
    let after_fail = writes_after.clone();
    let _ = array.write_at(&pattern(512, 5), 4096, false);
    assert_eq!(
        disks
            .iter()
            .map(|d| d.writes.load(Ordering::SeqCst))
            .collect::<Vec<_>>(),
        after_fail
    );
    assert!(writes_after.iter().zip(&writes_before).all(|(a, b)| a >= b));
}

#[test]
fn raid1_read_error_falls_back_to_another_mirror() {
    let (disks, array) = setup(1, 2);
    let data = pattern(1 << 20, 7);
    array.write_at(&data, 0, false).unwrap();
    disks[0].broken.store(true, Ordering::SeqCst);
    let mut back = vec![0u8; 1 << 20];
    array.read_at(&mut back, 0).unwrap();
    assert!(back == data);
    assert_eq!(array.status().missing_slots, vec![0]);
    disks[1].broken.store(true, Ordering::SeqCst);
    assert!(matches!(
        array.read_at(&mut back, 0),
        Err(EngineError::ArrayFailed { .. })
    ));
}

/// A member whose filesystem is full where reservation cannot help (a copy-on-write
/// filesystem full on an overwrite): its writes fail with `NoSpace` while `full` is set.
#[derive(Debug, Clone)]
struct FullFs {
    inner: MemDisk,
    full: Arc<AtomicBool>,
}

impl raidkit_disk::DiskWrapper for FullFs {
    type Inner = MemDisk;
    fn inner(&self) -> &MemDisk {
        &self.inner
    }
    fn write_at(&self, buf: &[u8], off: u64) -> Result<(), DiskError> {
        if self.full.load(Ordering::SeqCst) {
            return Err(DiskError::new(
                self.inner.name(),
                "write",
                off,
                DiskErrorKind::NoSpace {
                    filesystem: "/full (btrfs)".into(),
                    free_bytes: Some(0),
                    quota: false,
                },
            ));
        }
        self.inner.write_at(buf, off)
    }
}

/// A write that meets a full filesystem on one member (past any reservation) fails with the
/// member's no-space error; no member is failed, the stripe is marked for resync (it may hold
/// new data beside old parity), reads still work, and once there is room the resync makes
/// the array consistent and writes go through again.
#[test]
fn a_member_out_of_space_fails_the_write_not_the_member() {
    let full = Arc::new(AtomicBool::new(false));
    let disks: Vec<FullFs> = (0..4)
        .map(|i| FullFs {
            inner: MemDisk::new(&format!("d{i}"), 4 << 20),
            full: full.clone(),
        })
        .collect();
    let array = Array::create(
        disks
            .iter()
            .map(|d| Box::new(d.clone()) as Box<dyn Disk>)
            .collect(),
        CreateOptions {
            level: 5,
            layout: None,
            chunk_sectors: 16,
            raid_devices: 4,
            metadata: SuperblockVersion::V1_2,
            size_sectors: None,
            name: "f".into(),
            set_uuid: [9; 16],
            device_uuids: (0..4).map(|i| [i as u8 + 1; 16]).collect(),
            ctime_seconds: 1,
            init: raidkit_engine::Init::Zeroed,
            consistency: raidkit_engine::ConsistencyPolicy::Resync,
            config: EngineConfig::default(),
        },
    )
    .unwrap();
    let old = pattern(64 << 10, 1);
    array.write_at(&old, 0, false).unwrap();
    full.store(true, Ordering::SeqCst);
    let err = array
        .write_at(&pattern(8 << 10, 2), 4096, false)
        .unwrap_err();
    match &err {
        EngineError::Disk(e) => assert!(e.is_no_space(), "{err}"),
        other => panic!("not the member's no-space error: {other}"),
    }
    let status = array.status();
    assert!(!status.degraded && !status.failed, "{:?}", status.log);
    assert!(
        array
            .pending_tasks()
            .contains(&raidkit_engine::TaskKind::Resync),
        "the stripe written half-way is not marked for resync"
    );
    assert!(
        status.log.iter().any(|e| matches!(
            e,
            ArrayEvent::NoSpace { member, .. } if member.starts_with('d')
        )),
        "{:?}",
        status.log
    );
    let mut back = vec![0u8; 4096];
    array.read_at(&mut back, 0).unwrap();
    assert_eq!(back, old[..4096]);
    // Room again: the resync runs, check finds nothing, and writes go through.
    full.store(false, Ordering::SeqCst);
    let stop = AtomicBool::new(false);
    let r = array
        .run_task(raidkit_engine::TaskKind::Resync, &mut |_| {}, &stop)
        .unwrap();
    assert_eq!(r.outcome, raidkit_engine::TaskOutcome::Completed);
    let r = array
        .run_task(raidkit_engine::TaskKind::Check, &mut |_| {}, &stop)
        .unwrap();
    assert_eq!(r.progress.mismatch_sectors, 0);
    array.write_at(&pattern(8 << 10, 3), 4096, false).unwrap();
    let mut back = vec![0u8; 8 << 10];
    array.read_at(&mut back, 4096).unwrap();
    assert_eq!(back, pattern(8 << 10, 3));
}

#[test]
fn a_spare_whose_superblock_cannot_be_written_is_refused_not_reported_added() {
    let (disks, array) = setup(1, 2);
    let spare = breakable("spare");
    spare.writes_broken.store(true, Ordering::SeqCst);
    let err = array
        .add_spare(Box::new(spare.clone()), [0x42; 16])
        .expect_err("a spare without a superblock is not added");
    assert!(err.to_string().contains("injected medium error"), "{err}");
    let st = array.status();
    let m = st
        .members
        .iter()
        .find(|m| m.name == "spare")
        .expect("the member is listed");
    assert_eq!(m.role, "faulty", "{m:?}");
    assert!(!st.degraded, "the array itself is untouched");
    // The next superblock update records it faulty on the members that took it.
    let data = pattern(4096, 3);
    array.write_at(&data, 0, true).unwrap();
    array.stop().unwrap();
    drop(array);
    let (again, _) = Array::assemble(
        disks
            .iter()
            .map(|d| Box::new(d.clone()) as Box<dyn Disk>)
            .collect(),
        AssembleOptions::default(),
    )
    .unwrap();
    let mut back = vec![0u8; 4096];
    again.read_at(&mut back, 0).unwrap();
    assert_eq!(back, data);
    assert!(again.status().members.iter().all(|m| m.role == "active"));
}

/// A write whose two pieces both write the member that breaks: its first error fails the member
/// and hands the slot to the waiting spare; the other errors of the same phase come from the
/// failed member too and must not fail the spare (md fails the device that erred).
#[test]
fn errors_of_a_failed_member_do_not_fail_the_spare_that_took_its_slot() {
    let (disks, array) = setup(5, 4);
    let spare = breakable("spare");
    array
        .add_spare(Box::new(spare.clone()), [0x43; 16])
        .unwrap();
    // The array is dirty already: the first error comes from a data write.
    array.write_at(&pattern(4096, 5), 1 << 20, false).unwrap();
    disks[0].writes_broken.store(true, Ordering::SeqCst);
    // Chunks of 16 sectors: sectors [0, 20) are two pieces, member sectors [0, 4) of slots 0
    // and 1 and [4, 16) of slot 0, which write slot 0 in the same phase.
    let data = pattern(20 * 512, 4);
    array.write_at(&data, 0, false).unwrap();
    let st = array.status();
    let faulty: Vec<&str> = st
        .log
        .iter()
        .filter_map(|e| match e {
            ArrayEvent::MemberFaulty { member, .. } => Some(member.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(faulty, vec!["d0"], "{:?}", st.log);
    let m = st.members.iter().find(|m| m.name == "spare").unwrap();
    assert_eq!((m.role.as_str(), m.slot), ("rebuilding", Some(0)), "{m:?}");
    let reports = array
        .run_pending(&mut |_| {}, &AtomicBool::new(false))
        .unwrap();
    assert!(!reports.is_empty(), "no rebuild ran");
    assert!(!array.status().degraded);
    let mut back = vec![0u8; data.len()];
    array.read_at(&mut back, 0).unwrap();
    assert!(back == data);
}
