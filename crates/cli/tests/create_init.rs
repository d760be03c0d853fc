//! `create --init` and `--assume-clean` through the real binary, on members that held other
//! data: a background initialisation leaves the array usable and records md's initial resync,
//! which `rebuild` (or a server) runs; fast initialisation zeroes image files and is refused,
//! writing nothing, on emulated hard disks; `--assume-clean` writes nothing but metadata.

mod common;

use common::*;
use std::path::PathBuf;

const MEMBER: usize = 8 << 20;

/// `n` image files full of old data.
fn used(dir: &TempDir, n: usize) -> Vec<PathBuf> {
    let paths = dir.members("u", n);
    for (i, p) in paths.iter().enumerate() {
        // Seeds whose xor is not 0: the generator is linear, so members from seeds that
        // cancel would hold consistent parity.
        std::fs::write(p, pattern(MEMBER, 40 + 7 * i as u64)).unwrap();
    }
    paths
}

fn data_offset(member: &std::path::Path) -> usize {
    let out = ok(&["examine", "--json", s(member)]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let sectors = v[0]["superblock"]["data_offset_sectors"]
        .as_u64()
        .unwrap_or_else(|| panic!("no data offset in {out}"));
    sectors as usize * 512
}

#[test]
fn a_background_initialisation_is_usable_at_once_and_its_resync_makes_it_consistent() {
    let dir = TempDir::new("init-bg");
    let m = used(&dir, 5);
    let out = ok(&with(
        &[
            "create",
            "--level",
            "6",
            "--chunk",
            "64K",
            "--init",
            "background",
        ],
        &m,
        &[],
    ));
    assert!(out.contains("initialising in the background"), "{out}");
    let detail = ok(&with(&["detail"], &m, &[]));
    assert!(detail.contains("Pending : resync"), "{detail}");
    // Usable before the resync ran: written and read back.
    let input = dir.path("in.bin");
    let data = pattern(1 << 20, 9);
    std::fs::write(&input, &data).unwrap();
    ok(&with(&["write", "--input", s(&input)], &m, &[]));
    let back = dir.path("back.bin");
    ok(&with(
        &["read", "--length", "1048576", "-o", s(&back)],
        &m,
        &[],
    ));
    assert!(std::fs::read(&back).unwrap() == data);
    // The old data is not consistent parity: check says so until the resync ran.
    let (code, _) = exit_code(&with(&["check"], &m, &[]));
    assert_eq!(code, 5, "mismatches before the initialisation");
    ok(&with(&["rebuild"], &m, &[]));
    let (code, err) = exit_code(&with(&["check"], &m, &[]));
    assert_eq!(code, 0, "consistent after it: {err}");
    ok(&with(
        &["read", "--length", "1048576", "-o", s(&back)],
        &m,
        &[],
    ));
    assert!(std::fs::read(&back).unwrap() == data);
}

#[test]
fn fast_initialisation_zeroes_image_files_and_is_refused_on_emulated_hard_disks() {
    let dir = TempDir::new("init-fast");
    let m = used(&dir, 3);
    ok(&with(
        &["create", "--level", "5", "--init", "fast"],
        &m,
        &[],
    ));
    let at = data_offset(&m[0]);
    for p in &m {
        let bytes = std::fs::read(p).unwrap();
        assert!(
            bytes[at..at + (4 << 20)].iter().all(|&b| b == 0),
            "{}: data area zeroed",
            p.display()
        );
    }
    let (code, err) = exit_code(&with(&["check"], &m, &[]));
    assert_eq!(code, 0, "{err}");

    // An emulated hard disk writes every zero: refused before anything is written.
    let emu: Vec<String> = (0..3)
        .map(|i| {
            format!(
                "emu:hds72101:16M:{}",
                dir.path(&format!("e{i}.img")).display()
            )
        })
        .collect();
    let images: Vec<PathBuf> = (0..3).map(|i| dir.path(&format!("e{i}.img"))).collect();
    // Drives that held something (a drive whose image file create makes reads as zeroes).
    for (i, p) in images.iter().enumerate() {
        std::fs::write(p, pattern(16 << 20, 70 + 9 * i as u64)).unwrap();
    }
    let before = contents(&images);
    let mut args = vec!["create", "--level", "5", "--init", "fast"];
    args.extend(emu.iter().map(String::as_str));
    let (code, err) = fails(&args);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--init fast") && err.contains("nothing was written"),
        "{err}"
    );
    assert_unchanged(&images, &before, "the emulated drives' images");

    // Zeroed in the foreground instead, every byte written: with its progress shown.
    let emu_refs: Vec<&str> = emu.iter().map(String::as_str).collect();
    let out = raidkit(&with(
        &["create", "--level", "5", "--init", "zero"],
        &[],
        &emu_refs,
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("zeroing 100%"), "{err}");
    let (code, err) = exit_code(&with(&["check"], &[], &emu_refs));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn new_emulated_drives_need_no_initialisation() {
    let dir = TempDir::new("init-emu-new");
    let emu: Vec<String> = (0..3)
        .map(|i| {
            format!(
                "emu:hds72101:16M:{}",
                dir.path(&format!("n{i}.img")).display()
            )
        })
        .collect();
    let emu_refs: Vec<&str> = emu.iter().map(String::as_str).collect();
    let out = ok(&with(&["create", "--level", "5"], &[], &emu_refs));
    assert!(!out.contains("initialising"), "{out}");
    let detail = ok(&with(&["detail"], &[], &emu_refs));
    assert!(!detail.contains("Pending"), "{detail}");
    let (code, err) = exit_code(&with(&["check"], &[], &emu_refs));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn assume_clean_writes_nothing_but_metadata_and_conflicts_with_init() {
    let dir = TempDir::new("init-clean");
    let m = used(&dir, 4);
    let (code, err) = fails(&with(
        &["create", "--level", "5", "--assume-clean", "--init", "zero"],
        &m,
        &[],
    ));
    assert_eq!(code, 2, "{err}");
    let before = contents(&m);
    let out = ok(&with(
        &["create", "--level", "5", "--assume-clean"],
        &m,
        &[],
    ));
    assert!(out.contains("--assume-clean"), "{out}");
    let at = data_offset(&m[0]);
    for (p, b) in m.iter().zip(&before) {
        let now = std::fs::read(p).unwrap();
        assert!(now[at..] == b[at..], "{}: data area untouched", p.display());
    }
    let detail = ok(&with(&["detail"], &m, &[]));
    assert!(!detail.contains("Pending"), "{detail}");
    // What was there is no parity: check finds it, repair fixes it.
    let (code, _) = exit_code(&with(&["check"], &m, &[]));
    assert_eq!(code, 5);
    ok(&with(&["repair"], &m, &[]));
    let (code, _) = exit_code(&with(&["check"], &m, &[]));
    assert_eq!(code, 0);
}

#[test]
fn raid_1e_is_raid10_with_two_near_copies() {
    let dir = TempDir::new("create-1e");
    let m = dir.members("e", 3);
    ok(&with(
        &["create", "--level", "1E", "--image-size", "16M"],
        &m,
        &[],
    ));
    let detail = ok(&with(&["detail"], &m, &[]));
    assert!(
        detail.contains("raid10")
            && detail.contains("near=2")
            && detail.contains("Raid Devices : 3"),
        "{detail}"
    );
    let other = dir.members("f", 3);
    let (code, err) = fails(&with(
        &[
            "create",
            "--level",
            "1e",
            "--layout",
            "f2",
            "--image-size",
            "16M",
        ],
        &other,
        &[],
    ));
    assert_eq!(code, 2, "{err}");
    assert!(other.iter().all(|p| !p.exists()), "nothing created");
}
