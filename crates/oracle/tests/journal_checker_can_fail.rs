//! The write journal checks must fail when md and raidkit disagree about a journal: md not
//! replaying what only the journal holds after raidkit's crash (or replaying other rows, or
//! finding data without parity), md running the array without the journal policy or device,
//! md replaying after raidkit's clean stop; and, the other way, raidkit not taking up a log
//! it should replay. raidkit prepares real arrays (the code of the matrix rows); the VM records
//! follow those of real runs (common/mod.rs).

mod common;
use common::*;
use raidkit_oracle::check::check_array;
use raidkit_oracle::plan::{PlannedArray, Scenario};
use raidkit_oracle::records::parse_records;
use std::fmt::Write as _;

const CLEAN: &str = "fast raidkit rk5j 5 left-symmetric 64K 4x4M journal\n";
const CRASH: &str = "fast raidkit rk6j 6 left-symmetric 32K 5x4M journal=crash\n";

fn replayed(f: &Fixture) -> u64 {
    let j = f.array.expect.as_ref().unwrap().journal.as_ref().unwrap();
    raidkit_oracle::prepare::journal_rows_replayed(&j.events).unwrap() as u64
}

#[test]
fn faithful_journal_reports_pass_every_check() {
    let f = fixture("j-clean", CLEAN);
    assert_passed(
        &check(&f, &md_records(&f.array)),
        &[
            "raidkit",
            "assembled(clean, no resync)",
            "sha256",
            "detail(events",
            "md-check(mismatch_cnt 0)",
            "journal(md: md/raid:md0: starting from clean shutdown",
            "examine(",
            "after-md",
            "roundtrip",
        ],
    );
    let f = fixture("j-crash", CRASH);
    let e = f.array.expect.as_ref().unwrap();
    let j = e.journal.as_ref().unwrap();
    // The members alone hold the data from before the journal-only writes; raidkit's own
    // replay of copies reads every write.
    assert_ne!(j.members_sha256.as_deref(), Some(e.sha256.as_str()));
    assert_eq!(e.readback_sha256, e.sha256);
    assert!(replayed(&f) > 0);
    // Without md's replay, the images still lack those writes: raidkit's read-back after md
    // (roundtrip) catches it.
    let all = failures_of(&check(&f, &md_records(&f.array)));
    assert!(all.contains("roundtrip: after md, raidkit reads"), "{all}");
    md_replays(&f.array);
    assert_passed(
        &check(&f, &md_records(&f.array)),
        &[
            "raidkit",
            "sha256",
            "journal(md: md/raid:md0: recovering 0 data-only",
        ],
    );
}

/// What md's assembly does to the images after the crash: the journal's rows written back
/// to the members (here by raidkit, which replays the same log), then a clean stop.
fn md_replays(a: &PlannedArray) {
    let disks: Vec<Box<dyn raidkit_disk::Disk>> = a
        .members
        .iter()
        .map(|m| {
            Box::new(
                raidkit_disk::FileDisk::open(
                    &m.image,
                    raidkit_disk::OpenOptions {
                        read_only: false,
                        direct: raidkit_disk::DirectIo::Never,
                        map_memory: false,
                        ..Default::default()
                    },
                )
                .unwrap(),
            ) as Box<dyn raidkit_disk::Disk>
        })
        .collect();
    let (array, _) =
        raidkit_engine::Array::assemble(disks, raidkit_engine::AssembleOptions::default()).unwrap();
    array.stop().unwrap();
}

#[test]
fn md_replaying_nothing_after_the_crash_fails() {
    let f = fixture("j-noreplay", CRASH);
    let e = f.array.expect.as_ref().unwrap();
    let members = e.journal.as_ref().unwrap().members_sha256.clone().unwrap();
    let rows = replayed(&f);
    // md started the array as if the journal were clean and read what the members hold.
    let records = md_records(&f.array)
        .replace(
            &format!("recovering 0 data-only stripes and {rows} data-parity stripes"),
            "starting from clean shutdown",
        )
        .replace(
            &format!("sha256 {}", e.sha256),
            &format!("sha256 {members}"),
        );
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains("md must replay what only the journal holds"),
        "{all}"
    );
    assert!(all.contains(&format!("md reads sha256 {members}")), "{all}");
}

#[test]
fn md_replaying_other_rows_or_data_without_parity_fails() {
    let f = fixture("j-rows", CRASH);
    let rows = replayed(&f);
    let faithful = md_records(&f.array);
    let from = format!("recovering 0 data-only stripes and {rows} data-parity stripes");
    let records = faithful.replace(
        &from,
        &format!(
            "recovering 0 data-only stripes and {} data-parity stripes",
            rows - 1
        ),
    );
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains("raidkit's own replay of the same log"),
        "{all}"
    );
    let records = faithful.replace(
        &from,
        &format!("recovering 2 data-only stripes and {rows} data-parity stripes"),
    );
    let all = failures_of(&check(&f, &records));
    assert!(all.contains("data logged without its parity"), "{all}");
}

#[test]
fn md_without_the_journal_policy_or_device_fails() {
    let f = fixture("j-policy", CLEAN);
    let faithful = md_records(&f.array);
    let records = faithful
        .replace(
            "Consistency Policy : journal",
            "Consistency Policy : resync",
        )
        .replace("consistency_policy journal", "consistency_policy resync");
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains("mdadm --detail Consistency Policy Some(\"resync\"), want journal"),
        "{all}"
    );
    assert!(all.contains("sysfs consistency_policy"), "{all}");
    let records: String = faithful
        .lines()
        .filter(|l| !l.contains("journal   /dev/"))
        .map(|l| format!("{l}\n"))
        .collect();
    let all = failures_of(&check(&f, &records));
    assert!(all.contains("lists 0 journal devices"), "{all}");
}

#[test]
fn md_replaying_after_a_clean_stop_fails() {
    let f = fixture("j-cleanreplay", CLEAN);
    let records = md_records(&f.array).replace(
        "starting from clean shutdown",
        "recovering 0 data-only stripes and 3 data-parity stripes",
    );
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains("want \"starting from clean shutdown\""),
        "{all}"
    );
}

/// The same images seen as an array md created and crashed (the md -> raidkit rows):
/// records as the VM writes them for such a row, md's sha256 taken before the crash.
fn as_md_row(f: &Fixture) -> (PlannedArray, String) {
    let mut a = f.array.clone();
    a.kind = Scenario::Create;
    a.expect = None;
    let e = f.array.expect.as_ref().unwrap();
    let name = &a.name;
    let n = a.raid_devices();
    let mut r = String::new();
    let _ = writeln!(r, "{name} begin create");
    for &(seed, off, len) in &e.writes {
        let _ = writeln!(r, "{name} write {seed} {off} {len}");
    }
    let _ = writeln!(r, "{name} size_bytes {}", e.array_bytes);
    let members = e.journal.as_ref().unwrap().members_sha256.clone().unwrap();
    let _ = writeln!(r, "{name} sha256 {members}");
    for (k, v) in [
        ("level", format!("raid{}", e.level)),
        ("layout", e.layout.to_string()),
        ("chunk_size", (e.chunk_sectors * 512).to_string()),
        ("raid_disks", n.to_string()),
        ("consistency_policy", "journal".to_string()),
    ] {
        let _ = writeln!(r, "{name} sysfs {k} {v}");
    }
    let _ = writeln!(r, "{name} mismatch_cnt 0");
    let _ = writeln!(r, "{name} detail Consistency Policy : journal");
    let _ = writeln!(
        r,
        "{name} detail        0     254       96        -      journal   /dev/vdh"
    );
    let _ = writeln!(r, "{name} crash array_state clean");
    for (i, m) in a.members.iter().enumerate() {
        let _ = writeln!(
            r,
            "{name} examine {} /dev/vd{}:",
            m.serial,
            (b'c' + i as u8) as char
        );
        for (k, v) in &e.examine[&m.serial] {
            let v = match k.as_str() {
                "Avail Dev Size" | "Used Dev Size" => with_human(v, 512),
                "Array Size" => with_human(v, 1024),
                _ => v.clone(),
            };
            let _ = writeln!(r, "{name} examine {} {k:>15} : {v}", m.serial);
        }
    }
    let _ = writeln!(r, "{name} end");
    (a, r)
}

#[test]
fn raidkit_reading_a_crashed_journal_array_passes_and_fails_without_the_log() {
    let f = fixture("j-mdrow", CRASH);
    let (a, records) = as_md_row(&f);
    let reports = parse_records(&records);
    let out = check_array(&a, reports.get(&a.name));
    assert_passed(
        &out,
        &[
            "metadata",
            "sha256",
            "map(",
            "parity(",
            "journal(md:",
            "examine(",
        ],
    );
    // The journal device in another role.
    let j = &a.members[a.raid_devices()].serial;
    let wrong = records.replace(
        &format!("{j}     Device Role : Journal"),
        &format!("{j}     Device Role : spare"),
    );
    let reports = parse_records(&wrong);
    let all = failures_of(&check_array(&a, reports.get(&a.name)));
    assert!(
        all.contains("mdadm --examine Device Role Some(\"spare\"), want Journal"),
        "{all}"
    );
    // No log at journal_tail any more: raidkit starts the journal empty, replays nothing and
    // reads the members' old data.
    let img = &a.members[a.raid_devices()].image;
    let mut bytes = std::fs::read(img).unwrap();
    let sb = 4096;
    let tail = u64::from_le_bytes(bytes[sb + 0x98..sb + 0xa0].try_into().unwrap());
    let data_offset = u64::from_le_bytes(bytes[sb + 0x80..sb + 0x88].try_into().unwrap());
    let at = ((data_offset + tail) * 512) as usize;
    bytes[at..at + 4096].fill(0);
    std::fs::write(img, &bytes).unwrap();
    let reports = parse_records(&records);
    let all = failures_of(&check_array(&a, reports.get(&a.name)));
    assert!(all.contains("nothing replayed"), "{all}");
    assert!(all.contains("md's chain from journal_tail"), "{all}");
}
