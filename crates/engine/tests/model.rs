//! The engine against a flat reference model (a Vec<u8>): random reads, writes and flushes for
//! every level and layout, healthy and with every combination of failed members the level
//! can lose; after each phase the array is stopped, reassembled from its members and compared
//! byte for byte.

use raidkit_disk::{Disk, MemDisk};
use raidkit_engine::{Array, AssembleOptions, CreateOptions, EngineConfig};
use raidkit_metadata::SuperblockVersion;

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

/// A small stripe cache and few requests in flight, so the tests reach their limits.
fn config() -> EngineConfig {
    EngineConfig {
        stripe_cache_bytes: 1 << 20,
        max_inflight: 4,
        task_threads: None,
    }
}

fn create(
    level: i32,
    layout: u32,
    n: usize,
    chunk_sectors: u32,
    member_bytes: u64,
    version: SuperblockVersion,
    seed: u64,
) -> (Vec<MemDisk>, Array) {
    let disks: Vec<MemDisk> = (0..n)
        .map(|i| MemDisk::new(&format!("m{i}"), member_bytes))
        .collect();
    let array = create_on(boxed(&disks), level, layout, chunk_sectors, version, seed);
    (disks, array)
}

/// An array of `members` (all of them active).
fn create_on(
    members: Vec<Box<dyn Disk>>,
    level: i32,
    layout: u32,
    chunk_sectors: u32,
    version: SuperblockVersion,
    seed: u64,
) -> Array {
    let n = members.len();
    Array::create(
        members,
        CreateOptions {
            level,
            layout: Some(layout),
            chunk_sectors,
            raid_devices: n,
            metadata: version,
            size_sectors: None,
            name: "test".into(),
            set_uuid: [seed as u8; 16],
            device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
            ctime_seconds: 1_700_000_000,
            init: raidkit_engine::Init::Zeroed,
            consistency: raidkit_engine::ConsistencyPolicy::Resync,
            config: config(),
        },
    )
    .unwrap_or_else(|e| panic!("create RAID {level} layout {layout} n {n}: {e}"))
}

fn random_phase(array: &Array, model: &mut [u8], rng: &mut Rng, ops: usize, ctx: &str) {
    let size = array.size_bytes();
    assert_eq!(size as usize, model.len());
    for _ in 0..ops {
        let max_len = (size / 4).min(192 * 1024);
        let aligned = rng.below(4) != 0;
        let (off, len) = if aligned {
            let len = (rng.below(max_len / 512) + 1) * 512;
            (rng.below((size - len) / 512 + 1) * 512, len)
        } else {
            let len = rng.below(max_len) + 1;
            (rng.below(size - len + 1), len)
        };
        match rng.below(5) {
            0 | 1 => {
                let mut data = vec![0u8; len as usize];
                rng.fill(&mut data);
                array
                    .write_at(&data, off, rng.below(8) == 0)
                    .unwrap_or_else(|e| panic!("{ctx}: write {off}+{len}: {e}"));
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
            }
            2 => array
                .flush()
                .unwrap_or_else(|e| panic!("{ctx}: flush: {e}")),
            _ => {
                let mut buf = vec![0u8; len as usize];
                array
                    .read_at(&mut buf, off)
                    .unwrap_or_else(|e| panic!("{ctx}: read {off}+{len}: {e}"));
                assert!(
                    buf == model[off as usize..(off + len) as usize],
                    "{ctx}: read {off}+{len} differs from the model"
                );
            }
        }
    }
}

fn verify_all(array: &Array, model: &[u8], ctx: &str) {
    let mut buf = vec![0u8; model.len()];
    array
        .read_at(&mut buf, 0)
        .unwrap_or_else(|e| panic!("{ctx}: full read: {e}"));
    if buf != model {
        let first = buf.iter().zip(model).position(|(a, b)| a != b).unwrap();
        panic!("{ctx}: array differs from the model first at byte {first}");
    }
}

fn reassemble(disks: &[MemDisk], ctx: &str) -> Array {
    reassemble_from(boxed(disks), ctx)
}

fn reassemble_from(members: Vec<Box<dyn Disk>>, ctx: &str) -> Array {
    let (array, _report) = Array::assemble(
        members,
        AssembleOptions {
            config: config(),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{ctx}: reassemble: {e}"));
    array
}

/// Failure sets the level can survive (exhaustive for the small member counts used here).
fn survivable_sets(level: i32, layout: u32, n: usize) -> Vec<Vec<usize>> {
    let mut sets = Vec::new();
    for mask in 1u32..(1 << n) {
        let set: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
        let ok = match level {
            0 => false,
            1 => set.len() < n,
            4 | 5 => set.len() == 1,
            6 => set.len() <= 2,
            _ => {
                let g = raidkit_engine::Geo::new(10, layout, n, 8, 8 * 64).unwrap();
                let failed: Vec<bool> = (0..n).map(|i| set.contains(&i)).collect();
                g.survives(&failed) && set.len() <= 2
            }
        };
        if ok {
            sets.push(set);
        }
    }
    sets
}

fn run_level(level: i32, layouts: &[u32], n: usize, chunk_sectors: u32) {
    for &layout in layouts {
        let member_bytes = 2 << 20;
        let seed = (level as u64) << 32 | (layout as u64) << 8 | n as u64;
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let ctx = format!("RAID {level} layout {layout:#x} n {n} chunk {chunk_sectors}");
        let (disks, array) = create(
            level,
            layout,
            n,
            chunk_sectors,
            member_bytes,
            SuperblockVersion::V1_2,
            seed,
        );
        let mut model = vec![0u8; array.size_bytes() as usize];
        verify_all(&array, &model, &ctx);
        random_phase(&array, &mut model, &mut rng, 30, &ctx);
        verify_all(&array, &model, &ctx);
        array.stop().unwrap();
        drop(array);
        let array = reassemble(&disks, &ctx);
        verify_all(&array, &model, &format!("{ctx} after reassembly"));
        array.stop().unwrap();
        drop(array);
        let pristine: Vec<Vec<u8>> = disks.iter().map(|d| d.snapshot()).collect();
        for set in survivable_sets(level, layout, n) {
            // fresh copy of the healthy members for every failure set
            let copies: Vec<MemDisk> = pristine
                .iter()
                .enumerate()
                .map(|(i, bytes)| {
                    let d = MemDisk::new(&format!("m{i}"), bytes.len() as u64);
                    d.write_at(bytes, 0).unwrap();
                    d
                })
                .collect();
            let ctx = format!("{ctx} failed {set:?}");
            let array = reassemble(&copies, &ctx);
            let mut model = model.clone();
            for &m in &set {
                array.fail_member(m).unwrap();
            }
            assert!(array.status().degraded);
            verify_all(&array, &model, &ctx);
            random_phase(&array, &mut model, &mut rng, 8, &ctx);
            verify_all(&array, &model, &ctx);
            array.stop().unwrap();
            drop(array);
            // reassemble with every member given: the failed ones are recognised as faulty
            let array = reassemble(&copies, &ctx);
            let st = array.status();
            assert_eq!(st.missing_slots, set, "{ctx}: the failed members stay out");
            verify_all(&array, &model, &format!("{ctx} after reassembly"));
            drop(array);
        }
    }
}

#[test]
fn raid0_model() {
    run_level(0, &[0], 3, 16);
    run_level(0, &[0], 1, 8);
}

#[test]
fn raid1_model() {
    run_level(1, &[0], 3, 0);
}

#[test]
fn raid4_model() {
    run_level(4, &[0], 4, 16);
}

#[test]
fn raid5_model() {
    run_level(5, &[0, 1, 2, 3, 4, 5], 4, 16);
    run_level(5, &[2], 3, 128);
}

#[test]
fn raid6_model() {
    run_level(6, &[0, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 18, 19, 20], 5, 16);
    run_level(6, &[2], 6, 64);
}

#[test]
fn raid10_model() {
    run_level(10, &[0x102, 0x201, 0x10201], 4, 16);
    run_level(10, &[0x102, 0x201, 0x10201, 0x103], 5, 16);
}

#[test]
fn other_metadata_versions() {
    for version in [SuperblockVersion::V1_0, SuperblockVersion::V1_1] {
        let ctx = format!("RAID 5 {version:?}");
        let (disks, array) = create(5, 2, 4, 16, 3 << 20, version, 7);
        let mut rng = Rng(99);
        let mut model = vec![0u8; array.size_bytes() as usize];
        random_phase(&array, &mut model, &mut rng, 20, &ctx);
        array.stop().unwrap();
        drop(array);
        let array = reassemble(&disks, &ctx);
        verify_all(&array, &model, &ctx);
    }
}

#[test]
fn spares_rebuild_failed_slots() {
    // (chunk 16 keeps the band wider than a chunk; the chunk-128 cases below make the rebuild
    // step narrower than a chunk with this test's 1 MiB stripe cache)
    for (level, layout, n, lose) in [
        (1, 0u32, 3usize, vec![0usize, 2]),
        (5, 2, 4, vec![1]),
        (6, 2, 5, vec![0, 3]),
        (6, 9, 5, vec![2, 4]),
        (10, 0x102, 4, vec![1, 2]),
        (10, 0x201, 5, vec![0]),
        (4, 0, 4, vec![3]),
    ] {
        let ctx = format!("rebuild RAID {level} layout {layout:#x} n {n} losing {lose:?}");
        let (disks, array) = create(
            level,
            layout,
            n,
            if level == 1 {
                0
            } else if n >= 5 {
                128
            } else {
                16
            },
            2 << 20,
            SuperblockVersion::V1_2,
            5,
        );
        let mut rng = Rng(level as u64 * 31 + 7);
        let mut model = vec![0u8; array.size_bytes() as usize];
        random_phase(&array, &mut model, &mut rng, 20, &ctx);
        for &m in &lose {
            array.fail_member(m).unwrap();
        }
        let spares: Vec<MemDisk> = lose
            .iter()
            .map(|i| MemDisk::new(&format!("spare{i}"), 2 << 20))
            .collect();
        for (k, s) in spares.iter().enumerate() {
            array
                .add_spare(Box::new(s.clone()), [0xa0 + k as u8; 16])
                .unwrap_or_else(|e| panic!("{ctx}: add: {e}"));
        }
        let reports = array
            .run_pending(&mut |_| {}, &std::sync::atomic::AtomicBool::new(false))
            .unwrap_or_else(|e| panic!("{ctx}: rebuild: {e}"));
        assert!(
            reports
                .iter()
                .all(|r| r.outcome == raidkit_engine::TaskOutcome::Completed),
            "{ctx}: {reports:?}"
        );
        let st = array.status();
        assert!(
            !st.degraded,
            "{ctx}: still degraded after rebuild: {:?}",
            st.missing_slots
        );
        verify_all(&array, &model, &ctx);
        array.stop().unwrap();
        drop(array);
        // the rebuilt members alone (with the survivors) form a whole array
        let mut set: Vec<MemDisk> = (0..n)
            .filter(|i| !lose.contains(i))
            .map(|i| disks[i].clone())
            .collect();
        set.extend(spares.iter().cloned());
        let array = reassemble(&set, &ctx);
        assert!(
            !array.status().degraded,
            "{ctx}: reassembled rebuilt array is degraded"
        );
        verify_all(&array, &model, &format!("{ctx} after reassembly"));
        // and reads that must use the rebuilt members (fail the survivors the level can lose)
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
        verify_all(
            &array,
            &model,
            &format!("{ctx} reading from rebuilt members"),
        );
    }
}

/// Many threads write at once into the same stripes (each owns every T-th chunk, so their
/// bytes never overlap but their parity does); afterwards data must match and parity must be
/// consistent, which degraded reads with failed members prove.
#[test]
fn concurrent_writers_share_stripes_safely() {
    for (level, n, lose) in [
        (5, 4usize, vec![2usize]),
        (6, 5, vec![0, 3]),
        (10, 4, vec![1]),
    ] {
        let ctx = format!("concurrent RAID {level}");
        let (_disks, array) = create(
            level,
            if level == 10 { 0x102 } else { 2 },
            n,
            16,
            2 << 20,
            SuperblockVersion::V1_2,
            3,
        );
        let size = array.size_bytes() as usize;
        let chunk = 16 * 512;
        let threads = 4;
        let model = std::sync::Mutex::new(vec![0u8; size]);
        std::thread::scope(|s| {
            for t in 0..threads {
                let array = &array;
                let model = &model;
                s.spawn(move || {
                    let mut rng = Rng(0x1234 + t as u64);
                    for _ in 0..300 {
                        // the first few stripes only, to make writers meet
                        let chunks = (size / chunk).min(12);
                        let mut c = rng.below(chunks as u64) as usize;
                        c = c - c % threads + t;
                        if c >= chunks {
                            continue;
                        }
                        let off = rng.below(chunk as u64 / 512) as usize * 512;
                        let len = (rng.below(((chunk - off) / 512) as u64) as usize + 1) * 512;
                        let mut data = vec![0u8; len];
                        rng.fill(&mut data);
                        let at = c * chunk + off;
                        array.write_at(&data, at as u64, false).unwrap();
                        model.lock().unwrap()[at..at + len].copy_from_slice(&data);
                    }
                });
            }
        });
        let model = model.into_inner().unwrap();
        verify_all(&array, &model, &ctx);
        for &m in &lose {
            array.fail_member(m).unwrap();
        }
        verify_all(
            &array,
            &model,
            &format!("{ctx} degraded (parity consistent)"),
        );
    }
}

/// A removed member still offered at assembly loses its slot to its replacement (which reused
/// its device number, as md does) instead of blocking the array.
#[test]
fn replaced_member_offered_again_is_left_out() {
    let (disks, array) = create(6, 2, 5, 16, 2 << 20, SuperblockVersion::V1_2, 9);
    let mut rng = Rng(77);
    let mut model = vec![0u8; array.size_bytes() as usize];
    random_phase(&array, &mut model, &mut rng, 10, "replace");
    array.fail_member(1).unwrap();
    array.remove_member(1).unwrap();
    let spare = MemDisk::new("spare", 2 << 20);
    array
        .add_spare(Box::new(spare.clone()), [0xee; 16])
        .unwrap();
    array
        .run_pending(&mut |_| {}, &std::sync::atomic::AtomicBool::new(false))
        .unwrap();
    random_phase(&array, &mut model, &mut rng, 10, "replace");
    array.stop().unwrap();
    drop(array);
    let mut all = disks.clone();
    all.push(spare);
    let (array, report) = Array::assemble(boxed(&all), AssembleOptions::default()).unwrap();
    assert!(!array.status().degraded, "{report:?}");
    assert!(
        report
            .excluded
            .iter()
            .any(|(m, why)| m == "m1" && why.contains("replaced")),
        "{report:?}"
    );
    verify_all(&array, &model, "replace");
}

/// Members that are fully allocated tmpfs files mapped into memory (as `raidkit serve` opens
/// them): random I/O from several threads at once, each on its own range, matches the model;
/// then the files, opened again with pread/pwrite, hold exactly that, also degraded.
#[test]
fn mapped_tmpfs_members_match_the_model() {
    use raidkit_disk::{FileDisk, OpenOptions};
    let shm = std::path::Path::new("/dev/shm");
    let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
    let path_c = std::ffi::CString::new("/dev/shm").unwrap();
    // SAFETY: statfs writes one struct through a valid pointer.
    if unsafe { libc::statfs(path_c.as_ptr(), &mut sf) } != 0 || sf.f_type != 0x0102_1994 {
        eprintln!("skipped: /dev/shm is not tmpfs here");
        return;
    }
    let dir = shm.join(format!("raidkit-model-mapped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (level, layout, n, lose) in [
        (0, 0u32, 3usize, vec![]),
        (5, 2, 4, vec![1usize]),
        (6, 2, 5, vec![0, 3]),
        (10, 0x102, 4, vec![2]),
    ] {
        let ctx = format!("mapped RAID {level}");
        let paths: Vec<_> = (0..n).map(|i| dir.join(format!("l{level}-m{i}"))).collect();
        let open = |map_memory: bool| -> Vec<Box<dyn Disk>> {
            paths
                .iter()
                .map(|p| {
                    let d = FileDisk::open(
                        p,
                        OpenOptions {
                            map_memory,
                            ..Default::default()
                        },
                    )
                    .unwrap();
                    assert_eq!(d.is_mapped(), map_memory, "{ctx}: {}", p.display());
                    Box::new(d) as Box<dyn Disk>
                })
                .collect()
        };
        for p in &paths {
            std::fs::File::create(p).unwrap().set_len(3 << 20).unwrap();
            raidkit_disk::allocate_in_full(p).unwrap();
        }
        let array = create_on(open(true), level, layout, 16, SuperblockVersion::V1_2, 9);
        let size = array.size_bytes() as usize;
        let threads = 3;
        let part = size / threads / 512 * 512;
        let model = std::sync::Mutex::new(vec![0u8; size]);
        std::thread::scope(|s| {
            for t in 0..threads {
                let (array, model, ctx) = (&array, &model, &ctx);
                s.spawn(move || {
                    let mut rng = Rng(0x5eed + t as u64);
                    let mut mine = vec![0u8; part];
                    let base = t * part;
                    for _ in 0..150 {
                        let len = rng.below(64 << 10) as usize + 1;
                        let off = rng.below((part - len) as u64 + 1) as usize;
                        if rng.below(3) == 0 {
                            let mut buf = vec![0u8; len];
                            array.read_at(&mut buf, (base + off) as u64).unwrap();
                            assert!(buf == mine[off..off + len], "{ctx}: read {off}+{len}");
                        } else {
                            rng.fill(&mut mine[off..off + len]);
                            array
                                .write_at(&mine[off..off + len], (base + off) as u64, false)
                                .unwrap_or_else(|e| panic!("{ctx}: write: {e}"));
                        }
                    }
                    model.lock().unwrap()[base..base + part].copy_from_slice(&mine);
                });
            }
        });
        let model = model.into_inner().unwrap();
        verify_all(&array, &model, &ctx);
        array.stop().unwrap();
        drop(array);
        // The same files through pread/pwrite: what the mappings wrote is in them.
        let array = reassemble_from(open(false), &ctx);
        verify_all(&array, &model, &format!("{ctx}, files read back"));
        for &m in &lose {
            array.fail_member(m).unwrap();
        }
        verify_all(&array, &model, &format!("{ctx}, degraded"));
        drop(array);
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
