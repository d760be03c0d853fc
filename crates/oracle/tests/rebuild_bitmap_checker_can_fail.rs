//! The raidkit -> md checks of the rebuild and bitmap rows must fail when md disagrees: md
//! restarting a recovery from the start, ignoring raidkit's recovery offset, not finishing, or
//! leaving the offset behind; md's bitmap tools showing another chunk, other dirty bits, stale
//! events or no bitmap at all. raidkit prepares real arrays (the code of the matrix rows); the
//! VM records follow those of real runs (common/mod.rs).

mod common;
use common::*;

const REBUILD: &str = "fast raidkit rk6 6 left-symmetric 64K 5x4M fail=1,3 rebuild=40\n";
const BITMAP_DEGRADED: &str = "fast raidkit rk5b 5 left-symmetric 64K 4x4M bitmap=64K fail=2\n";
const BITMAP_CLEAN: &str = "fast raidkit rk1b 1 - - 2x4M bitmap\n";

fn offset_of(f: &Fixture) -> u64 {
    let r = f.array.expect.as_ref().unwrap().recovery.as_ref().unwrap();
    *r.offset_sectors.values().min().unwrap()
}

#[test]
fn a_faithful_rebuild_report_passes_every_check() {
    let f = fixture("rb-ok", REBUILD);
    let offset = offset_of(&f);
    // raidkit stopped its rebuild part way, past the row's 40 %.
    assert!(offset > 0 && offset < f.array.expect.as_ref().unwrap().member_data_sectors);
    let out = check(&f, &md_records(&f.array));
    assert_passed(
        &out,
        &[
            "raidkit",
            "assembled(read-only, 2 spares to recover",
            "recovery(md resumed at",
            "rebuilt",
            "sha256",
            "detail",
            "md-check(mismatch_cnt 0)",
            "examine(",
            "after-md",
            "roundtrip",
        ],
    );
}

#[test]
fn a_recovery_restarted_from_the_beginning_fails() {
    let f = fixture("rb-restart", REBUILD);
    let offset = offset_of(&f);
    let records = md_records(&f.array).replace(
        &format!("recovering sync_completed {offset} /"),
        "recovering sync_completed 0 /",
    );
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains(&format!(
            "md's recovery started below raidkit's recovery_offset {offset}"
        )),
        "{all}"
    );
    // md's resume message missing while its debug messages were on.
    let records =
        md_records(&f.array).replace("md: resuming recovery of md0 from checkpoint.\n", "\n");
    let all = failures_of(&check(&f, &records));
    assert!(all.contains("no \"resuming recovery"), "{all}");
}

#[test]
fn a_recovery_offset_md_did_not_read_fails() {
    let f = fixture("rb-offset", REBUILD);
    let offset = offset_of(&f);
    let spare = f.array.members[5].serial.clone();
    // md took the spare as in sync (it ignored the recovery offset) ...
    let records = md_records(&f.array).replace(
        &format!("held_dev {spare} slot 1 state spare recovery_start {offset}"),
        &format!("held_dev {spare} slot 1 state in_sync recovery_start none"),
    );
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains(&format!("spare {spare}: md's state Some(\"in_sync\")")),
        "{all}"
    );
    assert!(
        all.contains(&format!(
            "spare {spare}: md's recovery_start Some(\"none\"), raidkit's recovery_offset {offset}"
        )),
        "{all}"
    );
    // ... or put it into another slot.
    let records = md_records(&f.array).replace(
        &format!("held_dev {spare} slot 1 "),
        &format!("held_dev {spare} slot 3 "),
    );
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains(&format!(
            "spare {spare}: md's slot Some(\"3\"), raidkit rebuilt it into slot 1"
        )),
        "{all}"
    );
}

#[test]
fn an_unfinished_recovery_fails() {
    let f = fixture("rb-unfinished", REBUILD);
    let spare = f.array.members[6].serial.clone();
    let records = md_records(&f.array)
        .replace("rebuilt degraded 0", "rebuilt degraded 1")
        .replace(
            &format!("rebuilt_dev {spare} slot 3 state in_sync recovery_start none"),
            &format!("rebuilt_dev {spare} slot 3 state spare recovery_start 4096"),
        )
        .replace(
            "rk6 rebuilt_detail              State : clean ",
            "rk6 rebuilt_detail              State : clean, degraded ",
        )
        .replace("md: md0: recovery done.", "md: md0: recovery interrupted.");
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains("rebuilt: degraded Some(\"1\") after md's recovery"),
        "{all}"
    );
    assert!(
        all.contains(&format!(
            "rebuilt: member {spare}: md's state after the recovery"
        )),
        "{all}"
    );
    assert!(
        all.contains("State Some(\"clean, degraded\") after the recovery"),
        "{all}"
    );
    assert!(
        all.contains("kernel: [    4.10] md: md0: recovery interrupted."),
        "{all}"
    );
    // Without md's check after the rebuild, nothing says the rebuilt members are consistent.
    let records = md_records(&f.array).replace("rk6 mismatch_cnt 0\n", "");
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains("md-check: md's own check: mismatch_cnt None"),
        "{all}"
    );
}

#[test]
fn a_recovery_offset_left_after_md_fails() {
    let f = fixture("rb-after", REBUILD);
    let offset = offset_of(&f);
    let spare = f.array.members[5].serial.clone();
    let mut records = md_records(&f.array);
    let at = records
        .find(&format!("rk6 examine {spare}    Super Offset"))
        .unwrap();
    records.insert_str(
        at,
        &format!("rk6 examine {spare} Recovery Offset : {offset} sectors\n"),
    );
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains(&format!(
            "after-md: member {spare}: Recovery Offset {offset} sectors after md finished the recovery"
        )),
        "{all}"
    );
}

#[test]
fn faithful_bitmap_reports_pass() {
    for (tag, row, dirty) in [
        ("bm-ok-deg", BITMAP_DEGRADED, true),
        ("bm-ok", BITMAP_CLEAN, false),
    ] {
        let f = fixture(tag, row);
        let e = f.array.expect.as_ref().unwrap();
        if dirty {
            // raidkit wrote while member 2 was failed: its bits stay set.
            assert!(e.bitmap_dirty_bits.unwrap() > 0);
        }
        let out = check(&f, &md_records(&f.array));
        assert!(out.ok(), "{row}: {}", out.failures.join("\n"));
        assert!(
            out.passed.iter().any(|p| p.starts_with("bitmap(")),
            "{:?}",
            out.passed
        );
    }
}

#[test]
fn other_dirty_bits_than_raidkit_left_fail() {
    let f = fixture("bm-dirty", BITMAP_DEGRADED);
    let e = f.array.expect.as_ref().unwrap();
    let want = e.bitmap_dirty_bits.unwrap();
    let serial = f.array.members[0].serial.clone();
    let records = md_records(&f.array).replacen(
        &format!("{want} dirty ("),
        &format!("{} dirty (", want - 1),
        1,
    );
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains(&format!(
            "bitmap: member {serial}: mdadm -X {} dirty bits, raidkit left {want}",
            want - 1
        )),
        "{all}"
    );
    // A clean stop leaves no bit set.
    let f = fixture("bm-dirty-clean", BITMAP_CLEAN);
    let records = md_records(&f.array).replacen("0 dirty (0.0%)", "1 dirty (100.0%)", 1);
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains("mdadm -X 1 dirty bits, raidkit left 0"),
        "{all}"
    );
    // raidkit's own count must match what it left on the members.
    let f = fixture("bm-dirty-rk", BITMAP_DEGRADED);
    let mut array = f.array.clone();
    array.expect.as_mut().unwrap().bitmap_dirty_bits = Some(want + 1);
    let reports = raidkit_oracle::records::parse_records(&md_records(&f.array));
    let out = raidkit_oracle::check::check_array(&array, reports.get(&array.name));
    let all = failures_of(&out);
    assert!(
        all.contains(&format!(
            "raidkit's bitmap on the member has {want} dirty bits, raidkit counted {}",
            want + 1
        )),
        "{all}"
    );
}

#[test]
fn another_chunk_stale_events_or_no_bitmap_fail() {
    let f = fixture("bm-shape", BITMAP_DEGRADED);
    let serial = f.array.members[1].serial.clone();
    let records = md_records(&f.array).replacen("Chunksize : 64 KB", "Chunksize : 128 KB", 2);
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains("mdadm -X Chunksize Some(\"128 KB\"), raidkit's bitmap chunk is 65536 bytes"),
        "{all}"
    );
    // Bitmap events two behind the superblock's: md would not trust the bits.
    let e = f.array.expect.as_ref().unwrap();
    let ev = e.bitmap[&serial].events;
    let records = md_records(&f.array).replace(
        &format!("pre_bitmap {serial}           Events : {ev}"),
        &format!("pre_bitmap {serial}           Events : {}", ev - 2),
    );
    let all = failures_of(&check(&f, &records));
    assert!(all.contains("md would call the bitmap stale"), "{all}");
    assert!(
        all.contains(&format!(
            "mdadm -X Events Some(\"{}\"), raidkit's bitmap has {ev}",
            ev - 2
        )),
        "{all}"
    );
    // md without the bitmap: no Intent Bitmap in --detail ...
    let records: String = md_records(&f.array)
        .lines()
        .filter(|l| !l.contains("Intent Bitmap") && !l.contains("Consistency Policy"))
        .map(|l| format!("{l}\n"))
        .collect();
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains("mdadm --detail Intent Bitmap None (want Internal)"),
        "{all}"
    );
    assert!(
        all.contains("mdadm --detail Consistency Policy None (want bitmap)"),
        "{all}"
    );
    // ... nothing from --examine-bitmap.
    let records: String = md_records(&f.array)
        .lines()
        .filter(|l| !l.contains(" pre_bitmap ") && !l.contains(" bitmap "))
        .map(|l| format!("{l}\n"))
        .collect();
    let all = failures_of(&check(&f, &records));
    assert!(
        all.contains(&format!(
            "member {serial}: no mdadm --examine-bitmap before assembly"
        )),
        "{all}"
    );
    assert!(
        all.contains(&format!(
            "member {serial}: no mdadm --examine-bitmap after md stopped the array"
        )),
        "{all}"
    );
}
