//! Shared by the raidkit -> md checker tests: a real array prepared by raidkit (the code of a
//! `raidkit` matrix row), the checker's verdict, and VM records written the way md and mdadm
//! print them (sizes with their "(x MiB y MB)" suffix, "State : clean " with its trailing
//! blank, `mdadm --examine-bitmap`'s "64 KB" chunks), following the records of real runs.
// Each test binary uses part of this.
#![allow(dead_code)]

use raidkit_oracle::check::{check_array, CheckOutcome};
use raidkit_oracle::matrix::parse_matrix;
use raidkit_oracle::plan::{make_plan, write_plan, PlannedArray};
use raidkit_oracle::records::parse_records;
use std::fmt::Write as _;
use std::path::PathBuf;

pub struct Fixture {
    pub work: PathBuf,
    pub array: PlannedArray,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// raidkit prepares the array of one matrix row (members under a fresh temporary directory).
pub fn fixture(tag: &str, row: &str) -> Fixture {
    let work = std::env::temp_dir().join(format!(
        "raidkit-oracle-assembled-{}-{tag}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&work);
    let rows = parse_matrix(row).unwrap();
    let mut plan = make_plan(&rows, &work, 1);
    write_plan(&mut plan, &work, 1).unwrap();
    let array = plan.arrays.remove(0);
    assert_eq!(array.prepare_error, None);
    Fixture { work, array }
}

/// mdadm's human-readable suffix for a size in KiB or sectors.
pub fn with_human(value: &str, unit_bytes: u64) -> String {
    let n: u64 = value.split_whitespace().next().unwrap().parse().unwrap();
    let bytes = n * unit_bytes;
    format!(
        "{value} ({:.2} MiB {:.2} MB)",
        bytes as f64 / 1048576.0,
        bytes as f64 / 1e6
    )
}

pub fn check(f: &Fixture, records: &str) -> CheckOutcome {
    let reports = parse_records(records);
    check_array(&f.array, reports.get(&f.array.name))
}

pub fn failures_of(out: &CheckOutcome) -> String {
    assert!(!out.ok(), "passed although it should not: {:?}", out.passed);
    out.failures.join("\n")
}

/// mdadm's `--examine-bitmap` spelling of a chunk size.
fn chunksize(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MB", bytes >> 20)
    } else if bytes >= 1 << 10 {
        format!("{} KB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

/// The records of a VM run in which md agrees with raidkit in everything, for any row
/// (clean, failed members, a rebuild md resumes, a bitmap, a write journal: md's start moves
/// journal_tail, so mdadm --detail shows the events one up, and after raidkit's crash md
/// replays as many stripe rows as raidkit's own replay did).
pub fn md_records(a: &PlannedArray) -> String {
    let e = a.expect.as_ref().unwrap();
    let name = &a.name;
    let n = a.raid_devices();
    let journal = a.journal.is_some();
    let rebuild = a.rebuild_percent.is_some();
    let failed = a.fail_members.len();
    let missing = a.expected_missing();
    let spares: Vec<String> = e
        .recovery
        .as_ref()
        .map(|r| r.spares.clone())
        .unwrap_or_default();
    let mut r = String::new();
    let _ = writeln!(r, "{name} begin assemble");
    // after: md recovered the spares and stopped the array (events move on).
    let examine = |key: &str, r: &mut String, after: bool| {
        for (i, m) in a.members.iter().enumerate() {
            let _ = writeln!(
                r,
                "{name} {key} {} /dev/vd{}:",
                m.serial,
                (b'c' + i as u8) as char
            );
            let working = !a.fail_members.contains(&i);
            for (k, v) in &e.examine[&m.serial] {
                let v = match k.as_str() {
                    "Avail Dev Size" | "Used Dev Size" => with_human(v, 512),
                    "Array Size" => with_human(v, 1024),
                    "Events" if after && working => (v.parse::<u64>().unwrap() + 1).to_string(),
                    // A finished recovery drops the spare's recovery offset.
                    "Feature Map" if after && working && rebuild => {
                        let bits = u32::from_str_radix(v.trim_start_matches("0x"), 16).unwrap();
                        format!("0x{:x}", bits & !2)
                    }
                    "Recovery Offset" if after && working => continue,
                    _ => v.clone(),
                };
                let _ = writeln!(r, "{name} {key} {} {k:>15} : {v}", m.serial);
            }
        }
    };
    let bitmaps = |key: &str, r: &mut String| {
        for (i, m) in a.members.iter().enumerate() {
            let Some(b) = e.bitmap.get(&m.serial) else {
                continue;
            };
            let uuid = &e.examine[&m.serial]
                .iter()
                .find(|(k, _)| k == "Array UUID")
                .unwrap()
                .1;
            for (k, v) in [
                ("Filename", format!("/dev/vd{}", (b'c' + i as u8) as char)),
                ("Magic", "6d746962".to_string()),
                ("Version", "4".to_string()),
                ("UUID", uuid.clone()),
                ("Events", b.events.to_string()),
                ("Events Cleared", b.events_cleared.to_string()),
                ("State", "OK".to_string()),
                ("Chunksize", chunksize(b.chunk_bytes)),
                ("Daemon", "5s flush period".to_string()),
                ("Write Mode", "Normal".to_string()),
                ("Sync Size", (b.sync_size_sectors / 2).to_string()),
                (
                    "Bitmap",
                    format!(
                        "{} bits (chunks), {} dirty ({:.1}%)",
                        b.bits,
                        b.dirty,
                        b.dirty as f64 * 100.0 / b.bits as f64
                    ),
                ),
            ] {
                let _ = writeln!(r, "{name} {key} {} {k:>16} : {v}", m.serial);
            }
        }
    };
    examine("pre_examine", &mut r, false);
    bitmaps("pre_bitmap", &mut r);
    let _ = writeln!(
        r,
        "{name} assemble_out mdadm: /dev/md0 has been started with {} drives (out of {n}).",
        n - failed
    );
    for (k, v) in [
        (
            "array_state",
            if rebuild { "readonly" } else { "clean" }.to_string(),
        ),
        ("sync_action", "idle".to_string()),
        ("resync_start", "none".to_string()),
        ("degraded", failed.to_string()),
    ] {
        let _ = writeln!(r, "{name} assembled {k} {v}");
    }
    let ex = &e.examine[&a.members[a.working_members()[0]].serial];
    // None for fields raidkit (like mdadm) does not print for the level (RAID 1's layout).
    let get = |k: &str| ex.iter().find(|(f, _)| f == k).map(|(_, v)| v.clone());
    let kib = e.array_bytes / 1024;
    let detail = |key: &str, r: &mut String, state: &str, active: usize, working: usize| {
        let mut fields = vec![
            ("Version", get("Version")),
            ("Creation Time", get("Creation Time")),
            ("Raid Level", get("Raid Level")),
            ("Array Size", Some(with_human(&kib.to_string(), 1024))),
            (
                "Used Dev Size",
                Some((e.member_data_sectors / 2).to_string()),
            ),
            ("Raid Devices", Some(n.to_string())),
        ];
        if a.bitmap_chunk_bytes.is_some() {
            fields.push(("Intent Bitmap", Some("Internal".to_string())));
        }
        let spare = working - active;
        // mdadm counts the journal among the working devices.
        let working = working + usize::from(journal);
        let events = get("Events").map(|v| {
            if journal {
                (v.parse::<u64>().unwrap() + 1).to_string()
            } else {
                v
            }
        });
        fields.extend([
            ("Update Time", get("Update Time")),
            ("State", Some(format!("{state} "))),
            ("Active Devices", Some(active.to_string())),
            ("Working Devices", Some(working.to_string())),
            ("Spare Devices", Some(spare.to_string())),
            ("Layout", get("Layout")),
            ("Chunk Size", get("Chunk Size")),
            (
                "Consistency Policy",
                Some(
                    if a.bitmap_chunk_bytes.is_some() {
                        "bitmap"
                    } else if journal {
                        "journal"
                    } else {
                        "resync"
                    }
                    .to_string(),
                ),
            ),
            ("Name", get("Name")),
            ("UUID", get("Array UUID")),
            ("Events", events),
        ]);
        let fields = fields.into_iter().filter_map(|(k, v)| Some((k, v?)));
        for (k, v) in fields {
            let _ = writeln!(r, "{name} {key} {k:>18} : {v}");
        }
        if journal {
            // mdadm's device table (only the journal rows look at it).
            let _ = writeln!(r, "{name} {key}");
            let _ = writeln!(
                r,
                "{name} {key}     Number   Major   Minor   RaidDevice State"
            );
            for i in 0..n {
                let _ = writeln!(
                    r,
                    "{name} {key}        {}     254       {}        {i}      active sync   /dev/vd{}",
                    i + 1,
                    32 + 16 * i,
                    (b'c' + i as u8) as char
                );
            }
            let _ = writeln!(r, "{name} {key}");
            let _ = writeln!(
                r,
                "{name} {key}        0     254       {}        -      journal   /dev/vd{}",
                32 + 16 * n,
                (b'c' + n as u8) as char
            );
        }
    };
    let state = if failed > 0 {
        "clean, degraded"
    } else {
        "clean"
    };
    let working = if rebuild { n } else { n - failed };
    detail("detail", &mut r, state, n - failed, working);
    if let Some(rec) = &e.recovery {
        let offset = *rec.offset_sectors.values().min().unwrap();
        let dev = |key: &str, r: &mut String, recovering: bool| {
            for i in a.working_members() {
                let m = &a.members[i];
                let (slot, state, start) = match spares.iter().position(|s| *s == m.serial) {
                    Some(k) if recovering => {
                        (rec.slots[k], "spare".to_string(), offset.to_string())
                    }
                    Some(k) => (rec.slots[k], "in_sync".to_string(), "none".to_string()),
                    None => (i, "in_sync".to_string(), "none".to_string()),
                };
                let _ = writeln!(
                    r,
                    "{name} {key} {} slot {slot} state {state} recovery_start {start}",
                    m.serial
                );
            }
        };
        let _ = writeln!(r, "{name} held array_state readonly");
        let _ = writeln!(r, "{name} held sync_completed none");
        dev("held_dev", &mut r, true);
        let _ = writeln!(r, "{name} recovering debug_messages on");
        let _ = writeln!(r, "{name} recovering hold {}", offset - 64);
        let _ = writeln!(r, "{name} recovering sync_action recover");
        let _ = writeln!(
            r,
            "{name} recovering sync_completed {offset} / {}",
            e.member_data_sectors
        );
        dev("recovering_dev", &mut r, true);
        detail(
            "recovering_detail",
            &mut r,
            "clean, degraded, recovering",
            n - failed,
            n,
        );
        let _ = writeln!(r, "{name} rebuilt sync_action idle");
        let _ = writeln!(r, "{name} rebuilt degraded 0");
        dev("rebuilt_dev", &mut r, false);
        detail("rebuilt_detail", &mut r, "clean", n, n);
    }
    let _ = writeln!(r, "{name} size_bytes {}", e.array_bytes);
    let _ = writeln!(r, "{name} sha256 {}", e.sha256);
    for (k, v) in [
        ("level", format!("raid{}", e.level)),
        ("layout", e.layout.to_string()),
        ("chunk_size", (e.chunk_sectors * 512).to_string()),
        ("raid_disks", n.to_string()),
        ("component_size", (e.member_data_sectors / 2).to_string()),
        ("degraded", missing.to_string()),
    ] {
        let _ = writeln!(r, "{name} sysfs {k} {v}");
    }
    if journal {
        let _ = writeln!(r, "{name} sysfs consistency_policy journal");
    }
    if missing == 0 {
        let _ = writeln!(r, "{name} mismatch_cnt 0");
    }
    examine("examine", &mut r, true);
    bitmaps("bitmap", &mut r);
    let _ = writeln!(
        r,
        "{name} dmesg [    3.92] md/raid:md0: raid level {} active",
        e.level
    );
    if let Some(j) = &e.journal {
        let rows = raidkit_oracle::prepare::journal_rows_replayed(&j.events);
        let _ = match rows {
            Some(rows) => writeln!(
                r,
                "{name} dmesg [    3.93] md/raid:md0: recovering 0 data-only stripes and {rows} data-parity stripes"
            ),
            None => writeln!(
                r,
                "{name} dmesg [    3.93] md/raid:md0: starting from clean shutdown"
            ),
        };
    }
    if rebuild {
        for l in [
            "md: recovery of RAID array md0",
            "md: resuming recovery of md0 from checkpoint.",
            "md: md0: recovery done.",
        ] {
            let _ = writeln!(r, "{name} dmesg [    4.10] {l}");
        }
    }
    let _ = writeln!(r, "{name} end");
    r
}

/// Asserts that `out` passed, and that each of `names` (a prefix) is among its passed checks.
pub fn assert_passed(out: &CheckOutcome, names: &[&str]) {
    assert!(out.ok(), "{}", out.failures.join("\n"));
    for name in names {
        assert!(
            out.passed.iter().any(|p| p.starts_with(name)),
            "{name} did not run: {:?}",
            out.passed
        );
    }
}
