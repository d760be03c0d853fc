//! The stack rows' checker must fail when md and raidkit disagree: a RAID 50 stack is made by
//! raidkit's own preparation (as for a `rk-` row), the VM's records are written by hand as md
//! would report it, and the checker passes them, then rejects each disagreement.

use raidkit_oracle::check::check_array;
use raidkit_oracle::plan::{PlannedArray, PlannedMember, PlannedWrite, Scenario};
use raidkit_oracle::prepare::prepare_array;
use raidkit_oracle::records::parse_records;
use std::path::PathBuf;

fn plan(dir: &std::path::Path) -> PlannedArray {
    PlannedArray {
        name: "rk-r50".into(),
        kind: Scenario::Assemble,
        level: 5,
        layout: None,
        chunk_kib: Some(64),
        batch: 0,
        md_device: "md0".into(),
        members: (0..6)
            .map(|m| PlannedMember {
                serial: format!("s{m}"),
                image: dir.join(format!("m{m}.img")),
                size_bytes: 8 << 20,
            })
            .collect(),
        writes: vec![
            PlannedWrite {
                seed: 1,
                offset_bytes: 0,
                len_bytes: None,
                journal_only: false,
            },
            PlannedWrite {
                seed: 2,
                offset_bytes: 70000,
                len_bytes: Some(5000),
                journal_only: false,
            },
        ],
        metadata: "1.2".into(),
        fail_members: Vec::new(),
        rebuild_percent: None,
        bitmap_chunk_bytes: None,
        spares: 0,
        journal: None,
        init_background: false,
        ppl: None,
        expect: None,
        grow_bytes: None,
        mirrors: None,
        takeover: None,
        reshape: None,
        size_bytes: None,
        prepare_error: None,
        spans: Some(2),
    }
}

/// What md reports for the stack: its size and sha256, a RAID 0 of `raid_disks`, the spans'
/// check.
fn records(size: u64, sha: &str, level: &str, raid_disks: usize, mismatches: u64) -> String {
    format!(
        "rk-r50 begin assemble\nrk-r50 size_bytes {size}\nrk-r50 sha256 {sha}\n\
         rk-r50 sysfs level {level}\nrk-r50 sysfs raid_disks {raid_disks}\n\
         rk-r50 mismatch_cnt {mismatches}\nrk-r50 end\n"
    )
}

#[test]
fn the_stack_check_passes_agreement_and_fails_each_disagreement() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("raidkit-oracle-stack-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut a = plan(&dir);
    let expect = prepare_array(&a).unwrap();
    assert_eq!(expect.readback_sha256, expect.sha256);
    a.expect = Some(expect.clone());
    let (size, sha) = (expect.array_bytes, expect.sha256.clone());
    let check = |text: String| {
        let reports = parse_records(&text);
        check_array(&a, reports.get("rk-r50"))
    };

    let good = check(records(size, &sha, "raid0", 2, 0));
    assert!(good.ok(), "{:?}", good.failures);
    assert!(good.passed.contains(&"roundtrip".to_string()));

    let other_sha = format!("{:064x}", 1);
    for (text, what) in [
        (records(size, &other_sha, "raid0", 2, 0), "sha256"),
        (records(size - 512, &sha, "raid0", 2, 0), "size"),
        (records(size, &sha, "raid0", 2, 8), "md-check"),
        (records(size, &sha, "raid5", 2, 0), "geometry"),
        (records(size, &sha, "raid0", 3, 0), "geometry"),
    ] {
        let out = check(text);
        assert!(
            out.failures.iter().any(|f| f.starts_with(what)),
            "{what}: {:?}",
            out.failures
        );
    }
    assert!(!check("rk-r50 begin assemble\n".into()).ok());

    // A member's data changed after md stopped the stack: raidkit's read differs (three
    // chunks of member 0 from 6 MiB on: two of them are data, whichever holds the parity).
    let m0 = &a.members[0].image;
    let mut img = std::fs::read(m0).unwrap();
    let at = (6 << 20) as usize;
    for b in &mut img[at..at + (192 << 10)] {
        *b ^= 0xff;
    }
    std::fs::write(m0, &img).unwrap();
    let out = check(records(size, &sha, "raid0", 2, 0));
    assert!(
        out.failures.iter().any(|f| f.starts_with("roundtrip")),
        "{:?}",
        out.failures
    );
    let _ = std::fs::remove_dir_all(&dir);
}
