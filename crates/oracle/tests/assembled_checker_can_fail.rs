//! The raidkit -> md checker must fail when md's report and raidkit's array disagree. raidkit
//! prepares a real array (the same code as a `raidkit` matrix row); the VM records are written
//! here the way md and mdadm print them (sizes with their "(x MiB y MB)" suffix, "State : clean "
//! with its trailing blank). The checker passes them, then rejects each disagreement.

mod common;
use common::*;
use raidkit_oracle::check::check_array;
use raidkit_oracle::plan::PlannedArray;
use std::fmt::Write as _;

/// Records as the VM writes them when md agrees with raidkit in everything.
fn faithful_records(a: &PlannedArray) -> String {
    let e = a.expect.as_ref().unwrap();
    let name = &a.name;
    let mut r = String::new();
    let _ = writeln!(r, "{name} begin assemble");
    let mdadm_examine = |key: &str, r: &mut String, events_delta: u64| {
        for (i, m) in a.members.iter().enumerate() {
            let _ = writeln!(
                r,
                "{name} {key} {} /dev/vd{}:",
                m.serial,
                (b'c' + i as u8) as char
            );
            for (k, v) in &e.examine[&m.serial] {
                let v = match k.as_str() {
                    "Avail Dev Size" | "Used Dev Size" => with_human(v, 512),
                    "Array Size" => with_human(v, 1024),
                    "Events" => (v.parse::<u64>().unwrap() + events_delta).to_string(),
                    _ => v.clone(),
                };
                let _ = writeln!(r, "{name} {key} {} {k:>15} : {v}", m.serial);
            }
        }
    };
    mdadm_examine("pre_examine", &mut r, 0);
    let n = a.members.len();
    let _ = writeln!(
        r,
        "{name} assemble_out mdadm: /dev/md0 has been started with {n} drives."
    );
    for (k, v) in [
        ("array_state", "clean"),
        ("sync_action", "idle"),
        ("resync_start", "none"),
        ("degraded", "0"),
    ] {
        let _ = writeln!(r, "{name} assembled {k} {v}");
    }
    let ex = &e.examine[&a.members[0].serial];
    let get = |k: &str| {
        ex.iter()
            .find(|(f, _)| f == k)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    let kib = e.array_bytes / 1024;
    for (k, v) in [
        ("Version", get("Version")),
        ("Creation Time", get("Creation Time")),
        ("Raid Level", get("Raid Level")),
        ("Array Size", with_human(&kib.to_string(), 1024)),
        ("Used Dev Size", (e.member_data_sectors / 2).to_string()),
        ("Raid Devices", n.to_string()),
        ("Update Time", get("Update Time")),
        ("State", "clean ".to_string()),
        ("Active Devices", n.to_string()),
        ("Working Devices", n.to_string()),
        ("Layout", get("Layout")),
        ("Chunk Size", get("Chunk Size")),
        ("Name", get("Name")),
        ("UUID", get("Array UUID")),
        ("Events", get("Events")),
    ] {
        let _ = writeln!(r, "{name} detail {k:>18} : {v}");
    }
    let _ = writeln!(r, "{name} size_bytes {}", e.array_bytes);
    let _ = writeln!(r, "{name} sha256 {}", e.sha256);
    for (k, v) in [
        ("level", format!("raid{}", e.level)),
        ("layout", e.layout.to_string()),
        ("chunk_size", (e.chunk_sectors * 512).to_string()),
        ("raid_disks", n.to_string()),
        ("component_size", (e.member_data_sectors / 2).to_string()),
        ("degraded", "0".to_string()),
    ] {
        let _ = writeln!(r, "{name} sysfs {k} {v}");
    }
    let _ = writeln!(r, "{name} mismatch_cnt 0");
    mdadm_examine("examine", &mut r, 1);
    let _ = writeln!(
        r,
        "{name} dmesg [    3.92] md/raid:md0: raid level 5 active with {n} out of {n} devices, algorithm 2"
    );
    let _ = writeln!(r, "{name} end");
    r
}

const ROW: &str = "fast raidkit rk5 5 left-symmetric 16K 3x4M\n";

#[test]
fn a_faithful_report_passes_every_check() {
    let f = fixture("ok", ROW);
    let out = check(&f, &faithful_records(&f.array));
    assert_passed(
        &out,
        &[
            "raidkit",
            "assembled(clean, no resync)",
            "size",
            "sha256",
            "detail",
            "geometry",
            "md-check(mismatch_cnt 0)",
            "examine(",
            "after-md",
            "roundtrip",
        ],
    );
}

#[test]
fn a_different_sha_fails_and_names_the_region() {
    let f = fixture("sha", ROW);
    let e = f.array.expect.as_ref().unwrap();
    let bad = "0".repeat(64);
    let mut records = faithful_records(&f.array).replace(&e.sha256, &bad);
    // The VM adds per-MiB hashes when the whole-array hash differs; make the second one wrong.
    let data =
        raidkit_oracle::pattern::expected_contents(e.array_bytes as usize, &e.pattern_writes());
    for (i, region) in data.chunks(1 << 20).enumerate() {
        let sha = if i == 1 {
            bad.clone()
        } else {
            use sha2::Digest;
            sha2::Sha256::digest(region)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        records.push_str(&format!(
            "rk5 region_sha256 {} {} {sha}\n",
            i << 20,
            region.len()
        ));
    }
    let all = failures_of(&check(&f, &records));
    assert!(all.contains("sha256: md reads sha256 0000"), "{all}");
    assert!(
        all.contains("sha256: array bytes 1048576..2097152: md's data differs"),
        "{all}"
    );
    assert!(!all.contains("array bytes 0..1048576"), "{all}");
}

#[test]
fn a_nonzero_mismatch_cnt_fails() {
    let f = fixture("mismatch", ROW);
    let records = faithful_records(&f.array).replace("rk5 mismatch_cnt 0", "rk5 mismatch_cnt 128");
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains("md-check: md's own check: mismatch_cnt Some(128), want 0"),
        "{all}"
    );
    let records = faithful_records(&f.array).replace("rk5 mismatch_cnt 0\n", "");
    let all = failures_of(&check(&f, &records));
    assert!(all.contains("mismatch_cnt None"), "{all}");
}

#[test]
fn an_examine_field_disagreement_fails() {
    let f = fixture("examine", ROW);
    let serial = &f.array.members[1].serial;
    let good = format!("rk5 pre_examine {serial}     Data Offset : 2048 sectors");
    let records = faithful_records(&f.array);
    assert!(records.contains(&good), "fixture changed: {records}");
    let records = records.replace(
        &good,
        &format!("rk5 pre_examine {serial}     Data Offset : 4096 sectors"),
    );
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains(&format!(
            "examine: member {serial}: Data Offset: mdadm --examine says \"4096 sectors\", raidkit \"2048 sectors\""
        )),
        "{all}"
    );
    // A field only one side prints is a disagreement too.
    let records = faithful_records(&f.array).replace(
        &format!("rk5 pre_examine {serial}     Data Offset : 2048 sectors\n"),
        "",
    );
    let all = failures_of(&check(&f, &records));
    assert!(all.contains("mdadm --examine has no Data Offset"), "{all}");
}

#[test]
fn a_resync_on_assembly_fails() {
    let f = fixture("resync", ROW);
    let records = faithful_records(&f.array)
        .replace("assembled resync_start none", "assembled resync_start 0")
        .replace(
            "rk5 end",
            "rk5 dmesg md/raid:md0: not clean -- starting background reconstruction\nrk5 end",
        );
    let all = failures_of(&check(&f, &records));
    assert!(all.contains("assembly: resync_start 0"), "{all}");
    assert!(
        all.contains("assembly: kernel: md/raid:md0: not clean"),
        "{all}"
    );
}

#[test]
fn a_detail_time_disagreement_fails() {
    let f = fixture("detail", ROW);
    let e = f.array.expect.as_ref().unwrap();
    let ex = &e.examine[&f.array.members[0].serial];
    let utime = &ex.iter().find(|(k, _)| k == "Update Time").unwrap().1;
    let records = faithful_records(&f.array).replace(
        &format!("Update Time : {utime}\nrk5 detail"),
        "Update Time : Sun Feb  7 06:28:15 2106\nrk5 detail",
    );
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains("detail: mdadm --detail Update Time Some(\"Sun Feb  7 06:28:15 2106\")"),
        "{all}"
    );
}

#[test]
fn a_failed_assembly_and_a_missing_report_fail() {
    let f = fixture("noasm", ROW);
    let records = "rk5 begin assemble\nrk5 error mdadm --assemble failed: no superblock\nrk5 end\n";
    let all = failures_of(&check(&f, records));
    assert!(all.contains("vm: mdadm --assemble failed"), "{all}");
    assert!(all.contains("assembly: md did not assemble"), "{all}");
    let all = failures_of(&check_array(&f.array, None));
    assert!(all.contains("no records for this array"), "{all}");
}

#[test]
fn members_changed_after_md_fail_the_roundtrip() {
    let f = fixture("roundtrip", ROW);
    // Flip a byte in the first data chunk of member 0 (left-symmetric: stripe 0 has data there).
    let img = &f.array.members[0].image;
    let mut bytes = std::fs::read(img).unwrap();
    bytes[2048 * 512 + 10] ^= 0xff;
    std::fs::write(img, bytes).unwrap();
    let all = failures_of(&check(&f, &faithful_records(&f.array)));
    assert!(
        all.contains("roundtrip: after md, raidkit reads sha256"),
        "{all}"
    );
}

#[test]
fn a_degraded_array_must_run_degraded_without_check() {
    let f = fixture(
        "degraded",
        "fast raidkit rk5 5 left-symmetric 16K 3x4M fail=2\n",
    );
    // md reporting all members active (it took the failed one back in) is a disagreement.
    let all = failures_of(&check(&f, &faithful_records(&f.array)));
    assert!(
        all.contains("assembly: md runs with 0 members missing, want 1"),
        "{all}"
    );
    assert!(all.contains("Working Devices Some(\"3\"), want 2"), "{all}");
    // Survivors whose superblocks do not record the failed slot as missing.
    let records = faithful_records(&f.array).replace("Array State : AA. (", "Array State : AAA (");
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains("does not show slot 2 (failed by raidkit) missing"),
        "{all}"
    );
}
