//! `raidkit grow --size` through the real binary: members whose devices grew give the array
//! their room (data kept, check clean, JSON report); refusals exit 3 and write nothing.

mod common;

use common::*;

fn enlarge(paths: &[std::path::PathBuf], bytes: u64) {
    for p in paths {
        std::fs::OpenOptions::new()
            .write(true)
            .open(p)
            .unwrap()
            .set_len(bytes)
            .unwrap();
    }
}

#[test]
fn grow_takes_the_new_room_and_refuses_what_it_cannot_do() {
    let dir = TempDir::new("grow");
    let m = dir.members("m", 4);
    ok(&with(
        &[
            "create",
            "--level",
            "6",
            "--raid-devices",
            "4",
            "--chunk",
            "64K",
            "--image-size",
            "8M",
        ],
        &m,
        &[],
    ));
    let data = pattern(3 << 20, 7);
    let input = dir.file("in.bin");
    std::fs::write(&input, &data).unwrap();
    ok(&with(&["write", "--input", &input], &m, &[]));

    // Nothing to grow yet: refused, nothing written.
    let before = contents(&m);
    let (code, err) = fails(&with(&["grow", "--size", "max"], &m, &[]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("nothing to grow"), "{err}");
    assert_unchanged(&m, &before, "grow with no room");

    enlarge(&m, 16 << 20);
    // Below the current size: refused, nothing written.
    let before = contents(&m);
    let (code, err) = fails(&with(&["grow", "--size", "1M"], &m, &[]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("shrinking"), "{err}");
    assert_unchanged(&m, &before, "grow below the current size");

    let out = ok(&with(&["grow", "--size", "max", "--json"], &m, &[]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let (old, new) = (
        v["old_array_bytes"].as_u64().unwrap(),
        v["new_array_bytes"].as_u64().unwrap(),
    );
    // Two data members of RAID 6 over four: 8 MiB more per member, 16 MiB more data.
    assert_eq!(new - old, 16 << 20, "{v}");
    assert_eq!(v["zeroed_bytes"].as_u64().unwrap(), 4 * (8 << 20), "{v}");

    let detail = ok(&with(&["detail", "--json"], &m, &[]));
    let d: serde_json::Value = serde_json::from_str(&detail).unwrap();
    assert_eq!(d["status"]["array_bytes"].as_u64().unwrap(), new, "{d}");
    ok(&with(&["check"], &m, &[]));
    let back = dir.file("back.bin");
    ok(&with(
        &[
            "read",
            "--length",
            &data.len().to_string(),
            "--output",
            &back,
        ],
        &m,
        &[],
    ));
    assert!(std::fs::read(&back).unwrap() == data, "data kept");
}

#[test]
fn grow_reshapes_a_raid5_onto_a_spare_pausing_and_continuing() {
    let dir = TempDir::new("reshape");
    let m = dir.members("m", 5);
    ok(&with(
        &[
            "create",
            "--level",
            "5",
            "--raid-devices",
            "4",
            "--chunk",
            "64K",
            "--image-size",
            "16M",
            "--consistency-policy",
            "resync",
        ],
        &m[..4],
        &[],
    ));
    let data = pattern(24 << 20, 11);
    let input = dir.file("in.bin");
    std::fs::write(&input, &data).unwrap();
    ok(&with(&["write", "--input", &input], &m[..4], &[]));

    // No spare for the new slot: refused, nothing written.
    let before = contents(&m[..4]);
    let (code, err) = fails(&with(&["grow", "--raid-devices", "5"], &m[..4], &[]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("spare"), "{err}");
    assert_unchanged(&m[..4], &before, "reshape without a spare");

    let m4 = m[4].to_str().unwrap();
    ok(&with(
        &["add", "--member", m4, "--image-size", "16M"],
        &m[..4],
        &[],
    ));
    // Stopped part way: recorded, refused by assemble, shown by detail, continued.
    let out = ok(&with(
        &["grow", "--raid-devices", "5", "--pause-at", "10M", "--json"],
        &m,
        &[],
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["finished"], false, "{v}");
    let (code, err) = fails(&with(&["check"], &m, &[]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("grow --continue"), "{err}");
    let detail = ok(&with(&["detail"], &m, &[]));
    assert!(detail.contains("reshaping from 4"), "{detail}");
    let out = ok(&with(&["grow", "--continue", "--json"], &m, &[]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["finished"], true, "{v}");
    assert_eq!(
        v["new_array_bytes"].as_u64().unwrap(),
        4 * (15 << 20),
        "{v}"
    );

    ok(&with(&["check"], &m, &[]));
    let back = dir.file("back.bin");
    ok(&with(
        &[
            "read",
            "--length",
            &data.len().to_string(),
            "--output",
            &back,
        ],
        &m,
        &[],
    ));
    assert!(std::fs::read(&back).unwrap() == data, "data kept");
}
