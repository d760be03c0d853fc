//! Assembly against bad input and the host's mdadm: each refusal is a clear error naming the
//! member, and refused members are byte-identical afterwards; mdadm --examine reads raidkit's
//! members with a correct checksum and the same geometry.

use raidkit_disk::{Disk, FileDisk, OpenOptions};
use raidkit_engine::{
    Array, AssembleOptions, ConsistencyPolicy, CreateOptions, EngineConfig, EngineError,
};
use raidkit_metadata::SuperblockVersion;
use std::path::{Path, PathBuf};
use std::process::Command;

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!(
            "raidkit-engine-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn images(dir: &Path, prefix: &str, n: usize, bytes: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("{prefix}{i}.img"));
            drop(FileDisk::create(&p, bytes).unwrap());
            p
        })
        .collect()
}

/// Opens members without claims: the engine's own rules are under test here, and a claim
/// would refuse a member listed twice at open, before the engine sees it (claims are tested
/// in the disk crate and through the CLI).
fn open(paths: &[PathBuf], read_only: bool) -> Vec<Box<dyn Disk>> {
    paths
        .iter()
        .map(|p| {
            Box::new(
                FileDisk::open(
                    p,
                    OpenOptions {
                        read_only,
                        claim: raidkit_disk::Claim::Unclaimed,
                        ..Default::default()
                    },
                )
                .unwrap(),
            ) as Box<dyn Disk>
        })
        .collect()
}

fn create_on(
    paths: &[PathBuf],
    level: i32,
    layout: Option<u32>,
    version: SuperblockVersion,
    uuid: u8,
) -> Array {
    // md's own rules for arrays without a write-hole guard (dirty + degraded needs force);
    // arrays with a partial parity log are tested in ppl.rs.
    Array::create_with_policy(
        open(paths, false),
        CreateOptions {
            level,
            layout,
            chunk_sectors: 128,
            raid_devices: paths.len(),
            metadata: version,
            size_sectors: None,
            name: "host:t".into(),
            set_uuid: [uuid; 16],
            device_uuids: (0..paths.len())
                .map(|i| [uuid ^ (i as u8 + 1); 16])
                .collect(),
            ctime_seconds: 1_700_000_000,
            init: raidkit_engine::Init::Zeroed,
            consistency: raidkit_engine::ConsistencyPolicy::Resync,
            config: EngineConfig::default(),
        },
        ConsistencyPolicy::Resync,
    )
    .unwrap()
}

fn fill(array: &Array, seed: u8) {
    let data: Vec<u8> = (0..array.size_bytes().min(1 << 20))
        .map(|i| (i as u8).wrapping_mul(7) ^ seed)
        .collect();
    array.write_at(&data, 0, false).unwrap();
    array.stop().unwrap();
}

fn hashes(paths: &[PathBuf]) -> Vec<Vec<u8>> {
    // the whole bytes: members are small, so comparing contents is the strongest "hash"
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn assemble(paths: &[PathBuf], opts: AssembleOptions) -> Result<Array, EngineError> {
    Array::assemble(open(paths, false), opts).map(|(a, _)| a)
}

fn expect_refusal(
    paths: &[PathBuf],
    opts: AssembleOptions,
    check: impl Fn(&EngineError) -> bool,
    names: &str,
) {
    let before = hashes(paths);
    let err = match assemble(paths, opts) {
        Ok(_) => panic!("assembly of {paths:?} should have been refused"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(check(&err), "unexpected error kind: {msg}");
    assert!(msg.contains(names), "message should name {names}: {msg}");
    assert_eq!(
        hashes(paths),
        before,
        "refused assembly changed a member: {msg}"
    );
}

#[test]
fn bad_members_are_refused_and_left_untouched() {
    let dir = TempDir::new("bad");
    let a = images(&dir.0, "a", 4, 8 << 20);
    let b = images(&dir.0, "b", 4, 8 << 20);
    fill(&create_on(&a, 5, None, SuperblockVersion::V1_2, 0x11), 1);
    fill(&create_on(&b, 5, None, SuperblockVersion::V1_2, 0x22), 2);

    // a foreign member (from another array) among ours
    let mixed = vec![a[0].clone(), a[1].clone(), a[2].clone(), b[3].clone()];
    expect_refusal(
        &mixed,
        AssembleOptions::default(),
        |e| matches!(e, EngineError::Foreign { .. }),
        "b3.img",
    );

    // a member listed twice
    let twice = vec![a[0].clone(), a[1].clone(), a[2].clone(), a[2].clone()];
    expect_refusal(
        &twice,
        AssembleOptions::default(),
        |e| matches!(e, EngineError::Duplicate { .. }),
        "a2.img",
    );

    // the wrong level asked for
    expect_refusal(
        &a,
        AssembleOptions {
            level: Some(6),
            ..Default::default()
        },
        |e| matches!(e, EngineError::WrongLevel { asked: 6, found: 5 }),
        "RAID 6",
    );

    // a zeroed member: no superblock
    let z = dir.0.join("zero.img");
    std::fs::write(&z, vec![0u8; 8 << 20]).unwrap();
    let with_zero = vec![a[0].clone(), a[1].clone(), a[2].clone(), z.clone()];
    expect_refusal(
        &with_zero,
        AssembleOptions::default(),
        |e| matches!(e, EngineError::NoSuperblock { .. }),
        "zero.img",
    );

    // a truncated member: superblock intact but the data area cut short
    let t = dir.0.join("trunc.img");
    let mut bytes = std::fs::read(&a[3]).unwrap();
    bytes.truncate(4 << 20);
    std::fs::write(&t, &bytes).unwrap();
    let with_trunc = vec![a[0].clone(), a[1].clone(), a[2].clone(), t.clone()];
    expect_refusal(
        &with_trunc,
        AssembleOptions::default(),
        |e| matches!(e, EngineError::SizeMismatch { .. }),
        "trunc.img",
    );

    // a corrupted superblock (checksum no longer matches)
    let c = dir.0.join("csum.img");
    let mut bytes = std::fs::read(&a[3]).unwrap();
    bytes[4096 + 0x50] ^= 0xff;
    std::fs::write(&c, &bytes).unwrap();
    let with_bad = vec![a[0].clone(), a[1].clone(), a[2].clone(), c.clone()];
    expect_refusal(
        &with_bad,
        AssembleOptions::default(),
        |e| matches!(e, EngineError::NoSuperblock { .. }),
        "csum.img",
    );

    // a member of a different shape with the same UUID (mixed geometry)
    let d = images(&dir.0, "d", 4, 8 << 20);
    fill(&create_on(&d, 6, None, SuperblockVersion::V1_2, 0x11), 3);
    let shape = vec![a[0].clone(), a[1].clone(), a[2].clone(), d[3].clone()];
    expect_refusal(
        &shape,
        AssembleOptions::default(),
        |e| matches!(e, EngineError::Mismatched { .. }),
        "d3.img",
    );

    // too few members for RAID 5
    expect_refusal(
        &a[..2],
        AssembleOptions::default(),
        |e| matches!(e, EngineError::Unavailable { .. }),
        "RAID 5",
    );

    // the good set still assembles and reads the data back
    let array = assemble(&a, AssembleOptions::default()).unwrap();
    let mut buf = vec![0u8; 4096];
    array.read_at(&mut buf, 0).unwrap();
    assert!(buf
        .iter()
        .enumerate()
        .all(|(i, &x)| x == (i as u8).wrapping_mul(7) ^ 1));
}

#[test]
fn stale_member_needs_force_and_dirty_degraded_needs_force() {
    let dir = TempDir::new("stale");
    let a = images(&dir.0, "s", 4, 8 << 20);
    fill(&create_on(&a, 5, None, SuperblockVersion::V1_2, 0x33), 1);
    // keep an old copy of member 3, then move the array on without it
    let old3 = std::fs::read(&a[3]).unwrap();
    {
        let array = assemble(&a, AssembleOptions::default()).unwrap();
        array.write_at(&vec![9u8; 65536], 0, false).unwrap();
        array.stop().unwrap();
    }
    std::fs::write(&a[3], &old3).unwrap();
    expect_refusal(
        &a,
        AssembleOptions::default(),
        |e| matches!(e, EngineError::Stale { .. }),
        "s3.img",
    );
    // with force the stale member is left out (the array can run without it) and the data is
    // the newest
    let (array, report) = Array::assemble(
        open(&a, true),
        AssembleOptions {
            force: true,
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        report.excluded.iter().any(|(m, _)| m.ends_with("s3.img")),
        "{report:?}"
    );
    let mut buf = vec![0u8; 65536];
    array.read_at(&mut buf, 0).unwrap();
    assert!(buf.iter().all(|&x| x == 9));
    drop(array);

    // an unclean stop (drop without stop) is reported dirty; dirty + degraded refuses
    let b = images(&dir.0, "u", 4, 8 << 20);
    fill(&create_on(&b, 5, None, SuperblockVersion::V1_2, 0x44), 1);
    {
        let array = assemble(&b, AssembleOptions::default()).unwrap();
        array.write_at(&vec![5u8; 4096], 0, false).unwrap();
        // crash: no stop
    }
    let (array, report) = Array::assemble(
        open(&b, true),
        AssembleOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(report.was_dirty, "an unclean stop must be detected");
    drop(array);
    // Without its fourth member: refused before anything else, as mdadm refuses without
    // --run; with --run, dirty + degraded still needs --force.
    expect_refusal(
        &b[..3],
        AssembleOptions::default(),
        |e| matches!(e, EngineError::Incomplete { absent, .. } if absent.len() == 1 && absent[0].slot == 3),
        "--run",
    );
    expect_refusal(
        &b[..3],
        AssembleOptions {
            run: true,
            ..Default::default()
        },
        |e| matches!(e, EngineError::DirtyDegraded { .. }),
        "force",
    );
    let (array, _) = Array::assemble(
        open(&b[..3], true),
        AssembleOptions {
            force: true,
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    let mut buf = vec![0u8; 4096];
    array.read_at(&mut buf, 0).unwrap();
    assert!(buf.iter().all(|&x| x == 5));
}

#[test]
fn members_not_given_are_not_recorded_faulty_without_run() {
    let dir = TempDir::new("run");
    let a = images(&dir.0, "r", 4, 8 << 20);
    fill(&create_on(&a, 5, None, SuperblockVersion::V1_2, 0x66), 1);
    let given = vec![a[0].clone(), a[1].clone(), a[3].clone()];
    expect_refusal(
        &given,
        AssembleOptions::default(),
        |e| {
            matches!(e, EngineError::Incomplete { absent, .. }
                if absent == &[raidkit_engine::AbsentMember { slot: 2, dev_number: 2 }])
        },
        "slot 2 (device 2)",
    );
    // Read-only it runs degraded and writes nothing.
    let before = hashes(&a);
    let (array, _) = Array::assemble(
        open(&given, true),
        AssembleOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(array.status().degraded);
    drop(array);
    assert_eq!(hashes(&a), before);
    // All four again: whole, nothing was lost.
    let array = assemble(&a, AssembleOptions::default()).unwrap();
    assert!(!array.status().degraded);
    drop(array);
    // With run, the missing member is recorded faulty, as mdadm --run does.
    let array = assemble(
        &given,
        AssembleOptions {
            run: true,
            ..Default::default()
        },
    )
    .unwrap();
    array.stop().unwrap();
    drop(array);
    let (array, report) = Array::assemble(
        open(&a, true),
        AssembleOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(array.status().degraded, "{report:?}");
    assert!(
        report.excluded.iter().any(|(m, _)| m.ends_with("r2.img")),
        "{report:?}"
    );
}

#[test]
fn read_only_assembly_never_writes() {
    let dir = TempDir::new("ro");
    let a = images(&dir.0, "r", 4, 8 << 20);
    fill(&create_on(&a, 6, None, SuperblockVersion::V1_2, 0x55), 1);
    let before = hashes(&a);
    let (array, _) = Array::assemble(open(&a[1..], true), AssembleOptions::default()).unwrap();
    assert!(array.is_read_only());
    let mut buf = vec![0u8; 1 << 20];
    array.read_at(&mut buf, 0).unwrap();
    assert!(buf
        .iter()
        .enumerate()
        .all(|(i, &x)| x == (i as u8).wrapping_mul(7) ^ 1));
    assert!(matches!(
        array.write_at(&buf[..512], 0, false),
        Err(EngineError::ReadOnly)
    ));
    array.stop().unwrap();
    drop(array);
    assert_eq!(hashes(&a), before);
}

fn mdadm_field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(" : ")?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

#[test]
fn mdadm_examine_reads_raidkit_members() {
    if Command::new("mdadm").arg("--version").output().is_err() {
        if std::env::var("RAIDKIT_SKIP_MDADM").as_deref() == Ok("1") {
            eprintln!("mdadm missing; skipped because RAIDKIT_SKIP_MDADM=1");
            return;
        }
        panic!("mdadm is not installed (apt-get install -y mdadm), or set RAIDKIT_SKIP_MDADM=1");
    }
    let dir = TempDir::new("mdadm");
    for (k, (level, layout, version, expect_layout)) in [
        (6, Some(2), SuperblockVersion::V1_2, Some("left-symmetric")),
        (5, Some(0), SuperblockVersion::V1_1, Some("left-asymmetric")),
        (10, Some(0x201), SuperblockVersion::V1_0, Some("far=2")),
        (1, None, SuperblockVersion::V1_2, None),
        (0, None, SuperblockVersion::V1_2, None),
    ]
    .into_iter()
    .enumerate()
    {
        let paths = images(&dir.0, &format!("x{k}-"), 4, 16 << 20);
        let array = create_on(&paths, level, layout, version, 0x60 + k as u8);
        fill(&array, 4);
        let st = array.status();
        drop(array);
        for (i, p) in paths.iter().enumerate() {
            let out = Command::new("mdadm")
                .arg("--examine")
                .arg(p)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "mdadm --examine {p:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let csum = mdadm_field(&text, "Checksum").unwrap_or_default();
            assert!(csum.ends_with("- correct"), "checksum: {csum}\n{text}");
            assert_eq!(
                mdadm_field(&text, "Raid Level").as_deref(),
                Some(format!("raid{level}").as_str()),
                "{text}"
            );
            assert_eq!(
                mdadm_field(&text, "Raid Devices").as_deref(),
                Some("4"),
                "{text}"
            );
            assert_eq!(
                mdadm_field(&text, "Version").as_deref(),
                Some(version.name()),
                "{text}"
            );
            assert_eq!(
                mdadm_field(&text, "State").as_deref(),
                Some("clean"),
                "{text}"
            );
            assert_eq!(
                mdadm_field(&text, "Device Role").as_deref(),
                Some(format!("Active device {i}").as_str()),
                "{text}"
            );
            assert_eq!(
                mdadm_field(&text, "Array UUID").as_deref(),
                Some(st.uuid.as_str()),
                "{text}"
            );
            if level != 1 {
                assert_eq!(
                    mdadm_field(&text, "Chunk Size").as_deref(),
                    Some("64K"),
                    "{text}"
                );
            }
            if let Some(l) = expect_layout {
                let got = mdadm_field(&text, "Layout").unwrap_or_default();
                assert!(got.contains(l), "layout {got} for {l}\n{text}");
            }
            // mdadm prints no Data Offset line when data starts at sector 0 (1.0)
            let offset = mdadm_field(&text, "Data Offset").unwrap_or_else(|| "0 sectors".into());
            assert_eq!(
                offset,
                format!("{} sectors", st.members[i].data_offset_sectors),
                "{text}"
            );
            // mdadm's Array Size is in KiB
            if level == 0 {
                // raid0 superblocks leave `size` to the kernel (as mdadm writes them), so
                // mdadm --examine prints no array size for them
                continue;
            }
            let size = mdadm_field(&text, "Array Size").unwrap_or_default();
            assert!(
                size.starts_with(&format!("{} KiB", st.array_bytes / 1024)),
                "array size {size} vs {}\n{text}",
                st.array_bytes
            );
        }
    }
}

#[test]
fn failed_member_is_recorded_for_mdadm() {
    let dir = TempDir::new("fail");
    let paths = images(&dir.0, "f", 4, 16 << 20);
    let array = create_on(&paths, 5, None, SuperblockVersion::V1_2, 0x70);
    array.write_at(&vec![1u8; 8192], 0, false).unwrap();
    array.fail_member(2).unwrap();
    array.stop().unwrap();
    drop(array);
    let out = Command::new("mdadm")
        .arg("--examine")
        .arg(&paths[0])
        .output();
    let Ok(out) = out else {
        assert_eq!(
            std::env::var("RAIDKIT_SKIP_MDADM").as_deref(),
            Ok("1"),
            "mdadm is not installed"
        );
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        mdadm_field(&text, "Array State")
            .as_deref()
            .map(|s| &s[..4]),
        Some("AA.A"),
        "{text}"
    );
    assert_eq!(
        mdadm_field(&text, "State").as_deref(),
        Some("clean"),
        "{text}"
    );
}

/// md gives a removed member's device number to the next member added. When the removed disk
/// is still attached at a later assembly, it must be left out (never written again), or two
/// members end up holding one role and the array stops assembling (simulator seeds 4362, 4503,
/// 8879, 36367).
#[test]
fn removed_member_whose_device_number_was_reused_is_left_out() {
    let dir = TempDir::new("reused");
    let mut paths = images(&dir.0, "r", 3, 16 << 20);
    let spares = images(&dir.0, "s", 2, 16 << 20);
    let array = create_on(&paths, 5, None, SuperblockVersion::V1_2, 0x71);
    let data: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    array.write_at(&data, 0, false).unwrap();
    array.fail_member(0).unwrap();
    // The first spare takes slot 0; the second, added after r0 is removed, gets r0's device
    // number and waits as a spare.
    let disk = open(&spares[..1], false).remove(0);
    array.add_spare(disk, [0x5a; 16]).unwrap();
    array.remove_member(0).unwrap();
    let disk = open(&spares[1..], false).remove(0);
    array.add_spare(disk, [0x5b; 16]).unwrap();
    let never = std::sync::atomic::AtomicBool::new(false);
    array.run_pending(&mut |_| {}, &never).unwrap();
    assert!(!array.status().degraded);
    drop(array); // no clean stop: like a crash
    let removed = std::fs::read(&paths[0]).unwrap();
    paths.extend(spares);

    for round in 0..2 {
        let (array, report) = Array::assemble(open(&paths, false), AssembleOptions::default())
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let excluded: Vec<&String> = report
            .excluded
            .iter()
            .filter(|(m, _)| m.ends_with("r0.img"))
            .map(|(_, why)| why)
            .collect();
        assert_eq!(excluded.len(), 1, "round {round}: {report:?}");
        let st = array.status();
        assert!(!st.degraded, "round {round}: {st:?}");
        assert!(
            !st.members.iter().any(|m| m.name.ends_with("r0.img")),
            "round {round}: the removed member is attached: {st:?}"
        );
        let mut back = vec![0u8; data.len()];
        array.read_at(&mut back, 0).unwrap();
        assert!(back == data, "round {round}: data differs");
        array.run_pending(&mut |_| {}, &never).unwrap();
        array.stop().unwrap();
        drop(array);
        assert!(
            std::fs::read(&paths[0]).unwrap() == removed,
            "round {round}: the removed member was written"
        );
    }
}
