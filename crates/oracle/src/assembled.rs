//! Cross-check 2 (raidkit -> md): md assembled an array raidkit created and wrote; compare what
//! md reports with what raidkit wrote.
//!
//! For one array the checks are (each failure is a precise line naming the field or region):
//! 1. `raidkit`: raidkit prepared the members, and reads back the data it was given;
//! 2. `assembly`: `mdadm --assemble` started the array without resync or recovery (resync_start
//!    none, sync_action idle, no "not clean" / "resync" / "recovery" kernel messages), with every
//!    member, or, after raidkit failed some, degraded by exactly those; after a rebuild raidkit
//!    stopped part way, with the spares recovering (and no resync);
//!    `recovery` (rebuild rows): md resumed the recovery where raidkit's superblocks say it
//!    stopped (each spare's recovery_start, sync_completed's start), not from the beginning;
//!    `rebuilt`: md finished it (every member in sync, nothing degraded);
//! 3. `size`: md's array size equals raidkit's;
//!    `detail`: `mdadm --detail` of the running array (identity, times, events, sizes, layout)
//!    agrees with raidkit's examine report of an active member;
//! 4. `sha256`: md reads the data raidkit was given (on a difference, the MiB regions that
//!    differ, with where raidkit-layout places their first sector);
//! 5. `geometry`: md's level, layout, chunk, raid disks and component size (sysfs) equal
//!    raidkit's;
//! 6. `md-check`: md's own `check` finds mismatch_cnt 0 (not run on raid0 nor degraded arrays);
//! 7. `examine`: `mdadm --examine` of every member before assembly agrees field by field with
//!    raidkit's examine report of the same bytes;
//! 8. `after-md`: after md checked and stopped the array, every member still carries the same
//!    identity and geometry, clean, with a correct checksum; md did not write to the member
//!    raidkit failed;
//! 9. `roundtrip`: raidkit assembles the members md stopped and reads the same data;
//! 10. `bitmap` (bitmap rows): `mdadm --examine-bitmap` of every working member shows the
//!     bitmap raidkit wrote (chunk, bits, sync size, events as the superblock's, UUID, state),
//!     with no dirty bits after a clean stop, or, after raidkit wrote while members were
//!     failed, exactly the bits raidkit counted; `mdadm --detail` says "Intent Bitmap :
//!     Internal"; after md stopped the array the bitmap is still there.

use crate::check::CheckOutcome;
use crate::pattern::expected_contents;
use crate::plan::PlannedArray;
use crate::prepare::{readback_sha256, BitmapExpectation, RaidkitExpectation};
use crate::records::ArrayReport;
use raidkit_layout::{Geometry, MdParams};
use sha2::{Digest, Sha256};

/// Failures kept per check; the rest are counted.
const MAX_FAILURES_PER_CHECK: usize = 6;

/// Kernel messages that mean md did not trust the array as clean and in sync.
const RESYNC_MESSAGES: [&str; 4] = [
    "not clean",
    "resync of RAID array",
    "recovery of RAID array",
    "reshape of RAID array",
];

/// The kernel message of a recovery; expected (only) when md resumes raidkit's rebuild.
const RECOVERY_MESSAGE: &str = "recovery of RAID array";

/// Fields md's finishing a reshape changes (checked on their own in the after-md check).
const RESHAPE_CHANGES: [&str; 7] = [
    "Feature Map",
    "Avail Dev Size",
    "Data Offset",
    "New Offset",
    "Reshape pos'n",
    "Delta Devices",
    "Unused Space",
];

/// Geometry fields of an examine report and the field giving their value once a reshape
/// recorded there is done.
const RESHAPE_GEOMETRY: [(&str, &str); 3] = [
    ("Raid Level", "New Level"),
    ("Layout", "New Layout"),
    ("Chunk Size", "New Chunksize"),
];

/// `field` of an examine report as it is once the reshape the report records is done: the
/// new level, layout or chunk where the reshape changes them.
fn reshaped<'a>(pairs: &'a [(String, String)], field: &str) -> Option<&'a str> {
    RESHAPE_GEOMETRY
        .iter()
        .find(|(f, _)| *f == field)
        .and_then(|(_, new)| get(pairs, new))
        .or_else(|| get(pairs, field))
}

/// Fields md's finishing a shrink changes: the members past the new count become spares, the
/// slots they held leave the Array State (checked on their own in the after-md check).
const SHRINK_CHANGES: [&str; 2] = ["Device Role", "Array State"];

/// Fields md may change when it runs and stops an array, left out of the after-md comparison.
const CHANGED_BY_MD: [&str; 4] = ["Update Time", "Events", "Checksum", "State"];

struct Failures<'a> {
    check: &'static str,
    out: &'a mut Vec<String>,
    count: usize,
}

impl<'a> Failures<'a> {
    fn new(check: &'static str, out: &'a mut Vec<String>) -> Failures<'a> {
        Failures {
            check,
            out,
            count: 0,
        }
    }

    fn push(&mut self, msg: String) {
        self.count += 1;
        if self.count <= MAX_FAILURES_PER_CHECK {
            self.out.push(format!("{}: {msg}", self.check));
        }
    }

    fn finish(self) -> bool {
        if self.count > MAX_FAILURES_PER_CHECK {
            self.out.push(format!(
                "{}: ... and {} more",
                self.check,
                self.count - MAX_FAILURES_PER_CHECK
            ));
        }
        self.count == 0
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// mdadm's value with its human-readable size suffix ("6144 sectors (3.00 MiB 3.15 MB)") and
/// its homehost note ("name  (local to host x)") removed, where raidkit prints neither.
fn normalise_mdadm(field: &str, md: &str, raidkit: &str) -> String {
    if field == "Name" && !raidkit.contains("(local to host") {
        // mdadm's homehost note, also after a name with parentheses of its own ("(none):0",
        // the name mdadm gives an array created without --name in the VM).
        if let Some(i) = md.find("  (local to host") {
            return md[..i].trim_end().to_string();
        }
    }
    let drop_paren = matches!(
        field,
        "Avail Dev Size" | "Array Size" | "Used Dev Size" | "Reshape pos'n"
    );
    if drop_paren && !raidkit.contains('(') {
        if let Some(i) = md.find(" (") {
            return md[..i].trim_end().to_string();
        }
    }
    md.to_string()
}

fn get<'a>(pairs: &'a [(String, String)], field: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == field)
        .map(|(_, v)| v.as_str())
}

/// Check one raidkit-written array against md's report.
pub fn check_assembled(plan: &PlannedArray, report: Option<&ArrayReport>) -> CheckOutcome {
    let mut out = CheckOutcome {
        name: plan.name.clone(),
        description: describe(plan, None),
        ..CheckOutcome::default()
    };
    if let Some(e) = &plan.prepare_error {
        out.failures.push(format!("raidkit: {e}"));
        return out;
    }
    let Some(expect) = &plan.expect else {
        out.failures
            .push("raidkit: the members were not prepared".into());
        return out;
    };
    out.description = describe(plan, Some(expect));
    if expect.readback_sha256 == expect.sha256 {
        out.passed.push("raidkit".into());
    } else {
        out.failures.push(format!(
            "raidkit: reads back sha256 {} after writing, the data written has {}",
            expect.readback_sha256, expect.sha256
        ));
    }
    let Some(report) = report else {
        out.failures
            .push("vm: no records for this array (VM died or timed out?)".into());
        return out;
    };
    for e in &report.errors {
        out.failures.push(format!("vm: {e}"));
    }
    if !report.ended {
        out.failures
            .push("vm: report incomplete (no end record)".into());
    }
    if plan.reshape.is_some() {
        check_reshape(plan, expect, report, &mut out);
    } else {
        check_assembly(plan, expect, report, &mut out);
    }
    // Without a running array md has no data, geometry or check to compare (the assembly
    // check has said so); the members' superblocks can still be compared.
    if !report.assembled.is_empty() {
        if plan.rebuild_percent.is_some() {
            check_recovery(plan, expect, report, &mut out);
            check_rebuilt(plan, expect, report, &mut out);
        }
        check_data(plan, expect, report, &mut out);
        check_detail(plan, expect, report, &mut out);
        check_geometry(plan, expect, report, &mut out);
        check_md_check(plan, expect, report, &mut out);
        if plan.journal.is_some() {
            crate::journal::check_raidkit_journal(plan, expect, report, &mut out);
        }
        if plan.ppl.is_some() {
            check_ppl(plan, expect, report, &mut out);
        }
    }
    check_examine(plan, expect, report, &mut out);
    check_after_md(plan, report, &mut out);
    if plan.bitmap_chunk_bytes.is_some() {
        check_bitmap(plan, expect, report, &mut out);
    }
    if report.ended {
        check_roundtrip(plan, expect, report, &mut out);
    }
    if !report.dmesg.is_empty() && !out.ok() {
        let lines = report.dmesg.iter().take(12);
        for l in lines {
            out.failures.push(format!("dmesg: {l}"));
        }
    }
    out
}

fn describe(plan: &PlannedArray, e: Option<&RaidkitExpectation>) -> String {
    let mut s = format!(
        "raidkit-written raid{}{} metadata {}",
        plan.level,
        plan.layout
            .as_deref()
            .map_or(String::new(), |l| format!(" {l}")),
        plan.metadata
    );
    if let Some(e) = e {
        s += &format!(
            " (layout {}) {} members, chunk {}K, {} KiB",
            e.layout,
            e.raid_disks,
            e.chunk_sectors / 2,
            e.array_bytes / 1024
        );
    }
    if !plan.fail_members.is_empty() {
        let list: Vec<String> = plan.fail_members.iter().map(|m| m.to_string()).collect();
        s += &format!(
            ", member{} {} failed by raidkit",
            if list.len() > 1 { "s" } else { "" },
            list.join(",")
        );
    }
    if let Some(p) = plan.rebuild_percent {
        s += &format!(
            ", rebuild onto {} spare{} stopped after {p} %",
            plan.spares,
            if plan.spares > 1 { "s" } else { "" }
        );
        if let Some(r) = e.and_then(|e| e.recovery.as_ref()) {
            let at: Vec<String> = r.offset_sectors.values().map(|v| v.to_string()).collect();
            s += &format!(" (recovery_offset {} of {})", at.join(","), r.end_sectors);
        }
    }
    if let Some(r) = &plan.reshape {
        s += &format!(
            ", reshape={r} (raidkit stopped at {} sectors)",
            e.and_then(|e| e.reshape_position_sectors)
                .map_or("?".to_string(), |p| p.to_string())
        );
    }
    match plan.journal {
        Some(crate::matrix::JournalMode::Clean) => s += ", write journal",
        Some(crate::matrix::JournalMode::Crash) => {
            s += &format!(
                ", write journal; crashed after {} writes only the journal got",
                plan.writes.len() - plan.member_writes()
            )
        }
        Some(crate::matrix::JournalMode::WriteBackCrash) => {
            s += &format!(
                ", write journal; crashed after {} writes only the journal got, in write-back mode",
                plan.writes.len() - plan.member_writes()
            )
        }
        None => {}
    }
    match plan.ppl {
        Some(crate::matrix::PplMode::Clean) => s += ", partial parity log",
        Some(crate::matrix::PplMode::Crash) => {
            s += ", partial parity log; crashed after a write whose parity never landed"
        }
        None => {}
    }
    match plan.bitmap_chunk_bytes {
        Some(0) => s += ", internal bitmap (default chunk)",
        Some(c) => s += &format!(", internal bitmap ({}K chunk)", c >> 10),
        None => {}
    }
    s
}

/// Slots md is missing right after assembly: the failed members, which spares are recovering
/// on rebuild rows.
fn expected_degraded(plan: &PlannedArray) -> u64 {
    plan.fail_members.len() as u64
}

fn check_assembly(
    plan: &PlannedArray,
    expect: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    let mut f = Failures::new("assembly", &mut out.failures);
    if report.assembled.is_empty() {
        f.push("md did not assemble the array (no state recorded after mdadm --assemble)".into());
        f.finish();
        return;
    }
    let rebuild = plan.rebuild_percent.is_some();
    let a = |k: &str| report.assembled.get(k).map(String::as_str);
    if plan.init_background {
        // raidkit recorded its initial resync not run: md must run it (from sector 0; it
        // may have got past the start by the time it is looked at, or finished a small
        // array's resync already: then dmesg says so), as after mdadm's own create, and
        // must not take the array for in sync.
        let resynced = report.dmesg.iter().any(|l| l.contains("resync done"));
        if a("resync_start") == Some("none") && a("sync_action") == Some("idle") && !resynced {
            f.push(
                "md took the array for in sync right after assembly (resync_start none, sync_action idle); want md's initial resync"
                    .into(),
            );
        }
        if !report
            .dmesg
            .iter()
            .any(|l| l.contains("resync of RAID array"))
        {
            f.push("md ran no resync of the array (no \"resync of RAID array\" in dmesg)".into());
        }
    } else {
        if let Some(v) = a("resync_start") {
            if v != "none" {
                f.push(format!(
                    "resync_start {v} right after assembly: md does not consider the array in sync (want none)"
                ));
            }
        }
        if let Some(v) = a("sync_action") {
            if v != "idle" {
                f.push(format!("sync_action {v} right after assembly (want idle)"));
            }
        }
    }
    // Rebuild rows are assembled read-only (the VM starts the recovery itself, held at its
    // first step, to see where md resumes).
    let want_array_state = if rebuild { "readonly" } else { "clean" };
    match a("array_state") {
        Some(v) if v == want_array_state => {}
        other => f.push(format!(
            "array_state {other:?} right after assembly (want {want_array_state})"
        )),
    }
    let want_degraded = expected_degraded(plan);
    let degraded: u64 = a("degraded").and_then(|v| v.parse().ok()).unwrap_or(0);
    if degraded != want_degraded {
        f.push(format!(
            "md runs with {degraded} members missing, want {want_degraded}{}",
            if rebuild {
                " (the spares raidkit was rebuilding)"
            } else {
                ""
            }
        ));
    }
    let n = expect.raid_disks;
    let want_active = n - want_degraded as usize;
    // mdadm counts a spare being recovered as working, not active, and the journal too.
    let want_working = if rebuild { n } else { want_active } + usize::from(plan.journal.is_some());
    match report.detail_field("Active Devices") {
        Some(v) if v == want_active.to_string() => {}
        other => f.push(format!(
            "mdadm --detail Active Devices {other:?}, want {want_active}"
        )),
    }
    match report.detail_field("Working Devices") {
        Some(v) if v == want_working.to_string() => {}
        other => f.push(format!(
            "mdadm --detail Working Devices {other:?}, want {want_working}"
        )),
    }
    let want_state = if want_degraded > 0 {
        "clean, degraded"
    } else {
        "clean"
    };
    match report.detail_field("State") {
        Some(v) if v == want_state => {}
        // md may still be running raidkit's initial resync when the state is read (it
        // finishes a small array's within a fraction of a second: then "clean").
        Some(v) if plan.init_background && v.starts_with("clean, resyncing") => {}
        other => f.push(format!("mdadm --detail State {other:?}, want {want_state}")),
    }
    // md announces a dirty start before its partial parity log replay, which then marks the
    // array clean: resync_start and sync_action above say whether a resync followed.
    let ppl_crash = plan.ppl == Some(crate::matrix::PplMode::Crash);
    for l in &report.dmesg {
        let expected_recovery = rebuild && l.contains(RECOVERY_MESSAGE);
        let expected_dirty_start = ppl_crash && l.contains("not clean");
        // The initial resync raidkit left to md: md's dirty start and its resync.
        let expected_resync =
            plan.init_background && (l.contains("not clean") || l.contains("resync of RAID array"));
        if RESYNC_MESSAGES.iter().any(|m| l.contains(m))
            && !expected_recovery
            && !expected_dirty_start
            && !expected_resync
        {
            f.push(format!("kernel: {l}"));
        }
    }
    if f.finish() {
        out.passed.push(match (want_degraded > 0, rebuild) {
            (_, true) => {
                format!("assembled(read-only, {want_degraded} spares to recover, no resync)")
            }
            (true, false) => "assembled(degraded, no resync)".into(),
            (false, false) if plan.init_background => {
                "assembled(md ran raidkit's initial resync)".into()
            }
            (false, false) => "assembled(clean, no resync)".into(),
        });
    }
}

/// md went on with a reshape raidkit stopped part way (reshape rows, in place of the
/// assembly check): right after `mdadm --assemble` md runs the array with every member and
/// the reshape recorded at or past raidkit's position (md moves it on its own checkpoints),
/// announces the reshape, and finishes it: no reshape left, nothing degraded, sync_action
/// idle. No resync or recovery is announced.
fn check_reshape(
    plan: &PlannedArray,
    expect: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    let mut f = Failures::new("reshape", &mut out.failures);
    let a = |k: &str| report.assembled.get(k).map(String::as_str);
    let want = expect.reshape_position_sectors.unwrap_or(0);
    match a("reshape_position").map(str::parse::<u64>) {
        Some(Ok(p)) if p >= want => {}
        other => f.push(format!(
            "reshape_position {other:?} right after assembly, want raidkit's {want} or past it"
        )),
    }
    // A RAID 4 or 5 becoming a RAID 6 takes its Q on a spare that only the reshape fills
    // (recorded recovering up to the position), as does a RAID 0 becoming a RAID 4, 5 or 6
    // its parity, and a RAID 0 growing (a RAID 4 whose parity slot is empty) its spare in the
    // old layout's parity slot: md counts them missing from the old layout until the reshape
    // is done (raid5_calc_degraded).
    let Some(r) = plan.reshape.as_ref() else {
        return;
    };
    // A shrink: mdadm --examine of raidkit's members mid-reshape (what md read) shows what
    // md itself records for one (check::shrink_examine_failures).
    if r.shrinks(plan.raid_devices()) {
        for m in &plan.members {
            let Some(pairs) = report.pre_examine.get(&m.serial) else {
                f.push(format!("member {}: no mdadm --examine", m.serial));
                continue;
            };
            for e in crate::check::shrink_examine_failures(pairs, Some(want)) {
                f.push(format!(
                    "mdadm --examine of member {} mid-shrink: {e}",
                    m.serial
                ));
            }
        }
    }
    let fresh = r.fresh_members(plan.level, plan.raid_devices());
    // A RAID 0 runs as a RAID 4 whose parity slot is empty (or its spare fresh).
    let degraded = if r.raid0_grows(plan.level) { 1 } else { fresh };
    if a("degraded") != Some(degraded.to_string().as_str()) {
        f.push(format!(
            "md runs degraded: {:?} right after assembly, want {degraded}",
            a("degraded")
        ));
    }
    if fresh > 0 {
        check_fresh_recovery_offset(plan, expect, want, &mut f);
    }
    // Once done md runs every slot, but the parity slot of a RAID 0 that grew: md, finishing
    // the reshape without mdadm (whose --grow would make it a RAID 0 again), leaves it a RAID
    // 4 without its parity member, raid disks one more than the RAID 0's.
    let missing = r.missing_after(plan.level).to_string();
    let done = |k: &str| report.rebuilt.get(k).map(String::as_str);
    for (k, want) in [
        ("sync_action", "idle"),
        ("reshape_position", "none"),
        ("degraded", missing.as_str()),
    ] {
        if done(k) != Some(want) {
            f.push(format!(
                "after md's reshape: {k} {:?}, want {want}",
                done(k)
            ));
        }
    }
    let want_disks = r.md_raid_devices(plan.level).to_string();
    if done("raid_disks") != Some(want_disks.as_str()) {
        f.push(format!(
            "after md's reshape: raid_disks {:?}, want {want_disks}",
            done("raid_disks")
        ));
    }
    let want_level = format!("raid{}", r.md_level(plan.level));
    if done("level").is_some_and(|l| l != want_level) {
        f.push(format!(
            "after md's reshape: level {:?}, want {want_level}",
            done("level")
        ));
    }
    if !report
        .dmesg
        .iter()
        .any(|l| l.contains("reshape of RAID array"))
    {
        f.push("md did not announce the reshape (\"reshape of RAID array\")".into());
    }
    // md's RAID 10 reshape resyncs the room it added once done (raid10_finish_reshape).
    let new_room = (!r.md_zeroes_new_room(plan.level)).then_some(RESYNC_MESSAGES[1]);
    let mut resynced = false;
    for l in &report.dmesg {
        if new_room.is_some_and(|m| l.contains(m)) {
            resynced = true;
            continue;
        }
        if RESYNC_MESSAGES[..3].iter().any(|m| l.contains(m)) {
            f.push(format!("kernel: {l}"));
        }
    }
    if f.finish() {
        let end = if r.missing_after(plan.level) > 0 {
            format!(
                ", finished as {} of {} raid disks, degraded {}",
                done("level").unwrap_or("?"),
                done("raid_disks").unwrap_or("?"),
                done("degraded").unwrap_or("?")
            )
        } else if resynced {
            ", finished, resynced the new room".to_string()
        } else {
            ", finished".to_string()
        };
        out.passed.push(format!(
            "reshape(md went on from {} sectors{end})",
            a("reshape_position").unwrap_or("?")
        ));
    }
}

/// The members a reshape fills in a slot of the old layout (a RAID 4 or 5 becoming a RAID 6:
/// its new Q; a RAID 0 becoming a RAID 4, 5 or 6: its parity; a RAID 0 growing: the spare in
/// the old layout's parity slot) are recorded recovering, and md keeps their recovery_offset
/// in member sectors: reshape_request sets it to the member sector the reshape reached, the
/// position over the new data members (seen on md's own RAID 5 -> 6, row r5-to-r6-reshape:
/// Reshape pos'n 76032 sectors, the Q member's Recovery Offset 25344 over 3 data members).
/// md trusts them below it as in sync (analyse_stripe), also in the old layout. They are the
/// first spares (the new slots in order).
fn check_fresh_recovery_offset(
    plan: &PlannedArray,
    expect: &RaidkitExpectation,
    position: u64,
    f: &mut Failures,
) {
    let Some(r) = &plan.reshape else {
        return;
    };
    let first = plan.raid_devices();
    let fresh = plan
        .members
        .iter()
        .skip(first)
        .take(r.fresh_members(plan.level, first));
    let data = r.new_data_members(plan.level) as u64;
    let want = position / data;
    for m in fresh {
        let got = expect
            .examine
            .get(&m.serial)
            .and_then(|p| get(p, "Recovery Offset"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok());
        if got != Some(want) {
            f.push(format!(
                "the member {} the reshape fills: raidkit's Recovery Offset {} sectors at reshape position {position}, md's would be {want} (the position over {data} data members: md records the member sector the reshape reached)",
                m.serial,
                got.map_or("(none)".to_string(), |g| g.to_string()),
            ));
        }
    }
}

/// `A / B` of sysfs sync_completed.
fn sync_completed(v: Option<&String>) -> Option<(u64, u64)> {
    let (a, b) = v?.split_once('/')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
}

/// md resumed raidkit's rebuild: md read each spare's recovery_offset from raidkit's superblock
/// (recovery_start of the read-only assembly) with the slot raidkit gave it, and once started
/// the recovery began there (sync_completed while md waits at a sync_max just below it; a
/// recovery started lower would have reached sync_max and stopped there instead), as md's
/// "resuming recovery" message also says.
fn check_recovery(
    plan: &PlannedArray,
    e: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    let mut f = Failures::new("recovery", &mut out.failures);
    let Some(r) = &e.recovery else {
        f.push("raidkit recorded no stopped rebuild".into());
        f.finish();
        return;
    };
    let Some(&offset) = r.offset_sectors.values().min() else {
        f.push("raidkit recorded no recovery offset".into());
        f.finish();
        return;
    };
    if report.held_dev.is_empty() || report.recovering.is_empty() {
        f.push("no md state recorded before and while the recovery ran".into());
        f.finish();
        return;
    }
    for (k, serial) in r.spares.iter().enumerate() {
        let Some(dev) = report.held_dev.get(serial) else {
            f.push(format!("spare {serial}: not a member of md's array"));
            continue;
        };
        let want_slot = r.slots[k].to_string();
        if dev.get("slot") != Some(&want_slot) {
            f.push(format!(
                "spare {serial}: md's slot {:?}, raidkit rebuilt it into slot {want_slot}",
                dev.get("slot")
            ));
        }
        if dev.get("state").map(String::as_str) != Some("spare") {
            f.push(format!(
                "spare {serial}: md's state {:?} before the recovery (want spare: not in sync)",
                dev.get("state")
            ));
        }
        let want = r
            .offset_sectors
            .get(serial)
            .copied()
            .unwrap_or(offset)
            .to_string();
        if dev.get("recovery_start") != Some(&want) {
            f.push(format!(
                "spare {serial}: md's recovery_start {:?}, raidkit's recovery_offset {want}",
                dev.get("recovery_start")
            ));
        }
    }
    for i in plan.working_members() {
        let serial = &plan.members[i].serial;
        if r.spares.contains(serial) {
            continue;
        }
        match report.held_dev.get(serial) {
            Some(d)
                if d.get("state").map(String::as_str) == Some("in_sync")
                    && d.get("recovery_start").map(String::as_str) == Some("none") => {}
            other => f.push(format!(
                "member {serial}: md's state {other:?}, raidkit left it in sync (want in_sync, recovery_start none)"
            )),
        }
    }
    let rec = |k: &str| report.recovering.get(k).map(String::as_str);
    if rec("sync_action") != Some("recover") {
        f.push(format!(
            "sync_action {:?} once md's recovery should run (want recover)",
            rec("sync_action")
        ));
    }
    let hold = rec("hold").unwrap_or("?");
    match sync_completed(report.recovering.get("sync_completed")) {
        Some((start, end)) => {
            if end != e.member_data_sectors {
                f.push(format!(
                    "sync_completed {start} / {end}: md recovers {end} sectors per member, raidkit's members hold {}",
                    e.member_data_sectors
                ));
            }
            if start < offset {
                f.push(format!(
                    "sync_completed {start} / {end} (sync_max {hold}): md's recovery started below raidkit's recovery_offset {offset}"
                ));
            } else if start > offset {
                f.push(format!(
                    "sync_completed {start} / {end} (sync_max {hold}): md's recovery started past raidkit's recovery_offset {offset}"
                ));
            }
        }
        None => f.push(format!(
            "sync_completed {:?} once md's recovery should run (want \"N / M\")",
            rec("sync_completed")
        )),
    }
    match report.recovering_detail_field("State") {
        Some("clean, degraded, recovering") => {}
        other => f.push(format!(
            "mdadm --detail State {other:?} while md recovers (want clean, degraded, recovering)"
        )),
    }
    let resumed = report
        .dmesg
        .iter()
        .find(|l| l.contains("resuming recovery"));
    let debug_on = rec("debug_messages") == Some("on");
    if debug_on && resumed.is_none() {
        f.push(
            "kernel: no \"resuming recovery ... from checkpoint\" message (md_do_sync's debug messages were on)"
                .into(),
        );
    }
    if f.finish() {
        let evidence = match resumed {
            Some(l) => format!("; kernel: {}", l.split("] ").nth(1).unwrap_or(l)),
            None => "; md's debug messages were off".into(),
        };
        out.passed.push(format!(
            "recovery(md resumed at {offset} of {} sectors where raidkit stopped{evidence})",
            e.member_data_sectors
        ));
    }
}

/// md finished the recovery it resumed: nothing degraded, every member in sync.
fn check_rebuilt(
    plan: &PlannedArray,
    e: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    let mut f = Failures::new("rebuilt", &mut out.failures);
    let b = |k: &str| report.rebuilt.get(k).map(String::as_str);
    if b("sync_action") != Some("idle") {
        f.push(format!(
            "sync_action {:?} after mdadm --wait (want idle)",
            b("sync_action")
        ));
    }
    if b("degraded") != Some("0") {
        f.push(format!(
            "degraded {:?} after md's recovery (want 0)",
            b("degraded")
        ));
    }
    let n = e.raid_disks.to_string();
    for field in ["Active Devices", "Working Devices"] {
        if report.rebuilt_detail_field(field) != Some(n.as_str()) {
            f.push(format!(
                "mdadm --detail {field} {:?} after the recovery, want {n}",
                report.rebuilt_detail_field(field)
            ));
        }
    }
    if report.rebuilt_detail_field("State") != Some("clean") {
        f.push(format!(
            "mdadm --detail State {:?} after the recovery, want clean",
            report.rebuilt_detail_field("State")
        ));
    }
    for i in plan.working_members() {
        let serial = &plan.members[i].serial;
        match report.rebuilt_dev.get(serial) {
            Some(d)
                if d.get("state").map(String::as_str) == Some("in_sync")
                    && d.get("recovery_start").map(String::as_str) == Some("none") => {}
            other => f.push(format!(
                "member {serial}: md's state after the recovery {other:?} (want in_sync, recovery_start none)"
            )),
        }
    }
    for l in &report.dmesg {
        if l.contains("recovery interrupted") {
            f.push(format!("kernel: {l}"));
        }
    }
    if f.finish() {
        out.passed.push("rebuilt".into());
    }
}

/// Where md's data is md's own: the room a RAID 10 reshape adds (from the array's old size),
/// which md does not write but resyncs from what the members held there (see
/// [`crate::matrix::ReshapeSpec::md_zeroes_new_room`]); raidkit wrote zeros there.
fn md_new_room(plan: &PlannedArray, expect: &RaidkitExpectation) -> Option<u64> {
    let r = plan.reshape.as_ref()?;
    if r.md_zeroes_new_room(plan.level) {
        return None;
    }
    expect
        .reshape_old_array_bytes
        .filter(|&old| old < expect.array_bytes)
}

fn check_data(
    plan: &PlannedArray,
    expect: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    let (Some(size), Some(sha)) = (report.size_bytes, report.sha256.as_deref()) else {
        out.failures
            .push("vm: no array size or sha256 reported".into());
        return;
    };
    if size != expect.array_bytes {
        out.failures.push(format!(
            "size: md's array is {size} bytes, raidkit's {}",
            expect.array_bytes
        ));
    } else {
        out.passed.push("size".into());
    }
    if sha == expect.sha256 {
        out.passed.push("sha256".into());
        return;
    }
    if let Some(old) = md_new_room(plan, expect) {
        check_data_below(expect, report, old, out);
        return;
    }
    let mut f = Failures::new("sha256", &mut out.failures);
    f.push(format!(
        "md reads sha256 {sha}, raidkit wrote data with sha256 {}",
        expect.sha256
    ));
    let Ok(size) = usize::try_from(expect.array_bytes) else {
        f.finish();
        return;
    };
    let data = expected_contents(size, &expect.pattern_writes());
    let geo = geometry(expect).ok();
    for (off, len, md_sha) in &report.region_sha256 {
        let lo = usize::try_from(*off).unwrap_or(usize::MAX);
        let hi = lo.saturating_add(usize::try_from(*len).unwrap_or(0));
        let Some(want) = data.get(lo..hi) else {
            f.push(format!(
                "md region at {off} of {len} bytes: beyond raidkit's array"
            ));
            continue;
        };
        if hex(&Sha256::digest(want)) != *md_sha {
            let place = geo
                .as_ref()
                .and_then(|g| g.map(off / 512).ok())
                .map(|m| {
                    m.placements
                        .iter()
                        .map(|p| format!("member {} sector {}", p.member, p.member_sector))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            f.push(format!(
                "array bytes {off}..{}: md's data differs (raidkit-layout places its first sector at {place})",
                off + len
            ));
        }
    }
    f.finish();
}

/// md's data below `old` bytes (the array before a reshape that adds room md does not write)
/// against raidkit's, by the VM's per-MiB hashes; past it md's is md's own.
fn check_data_below(
    expect: &RaidkitExpectation,
    report: &ArrayReport,
    old: u64,
    out: &mut CheckOutcome,
) {
    let mut f = Failures::new("sha256", &mut out.failures);
    let Ok(size) = usize::try_from(expect.array_bytes) else {
        f.push("raidkit's array does not fit in memory".into());
        f.finish();
        return;
    };
    let data = expected_contents(size, &expect.pattern_writes());
    let mut covered = 0;
    for (off, len, md_sha) in &report.region_sha256 {
        if *off >= old {
            continue;
        }
        if off + len > old {
            f.push(format!(
                "md region at {off} of {len} bytes straddles the old size {old}: cannot tell"
            ));
            continue;
        }
        let lo = *off as usize;
        if hex(&Sha256::digest(&data[lo..lo + *len as usize])) != *md_sha {
            f.push(format!(
                "array bytes {off}..{}: md's data differs from raidkit's below the old size {old}",
                off + len
            ));
        }
        covered += len;
    }
    if covered != old {
        f.push(format!(
            "md's region hashes cover {covered} of the {old} bytes below the old size"
        ));
    }
    if f.finish() {
        out.passed.push(format!(
            "sha256(below the old size {old}; past it md's RAID 10 reshape leaves what the members held and resyncs it, raidkit wrote zeros)"
        ));
    }
}

/// 2^32 - 1 seconds as ctime() prints it: the value md reports for a time it clamped.
const U32_MAX_CTIME: &str = "Sun Feb  7 06:28:15 2106";

/// `mdadm --detail` fields and the examine field (of an active member) each must equal.
const DETAIL_FROM_EXAMINE: [(&str, &str); 10] = [
    ("Version", "Version"),
    ("Creation Time", "Creation Time"),
    ("Raid Level", "Raid Level"),
    ("Raid Devices", "Raid Devices"),
    ("Update Time", "Update Time"),
    ("Layout", "Layout"),
    ("Chunk Size", "Chunk Size"),
    ("Name", "Name"),
    ("UUID", "Array UUID"),
    ("Events", "Events"),
];

fn check_detail(
    plan: &PlannedArray,
    e: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    let mut f = Failures::new("detail", &mut out.failures);
    // A member that was in sync when raidkit stopped (not failed, not a spare).
    let active = plan
        .members
        .iter()
        .enumerate()
        .take(plan.raid_devices())
        .find(|(i, _)| !plan.fail_members.contains(i))
        .and_then(|(_, m)| e.examine.get(&m.serial));
    let Some(rk) = active else {
        f.push("raidkit has no examine report of an active member".into());
        f.finish();
        return;
    };
    // md starting an array with a write journal moves journal_tail to the empty meta block it
    // writes (r5l_recovery_log -> r5l_write_super), which updates every superblock: events
    // one up and a new update time by the time mdadm --detail looks.
    // md starting a dirty array whose partial parity log it replayed marks it clean
    // (ppl_init_log: recovery_cp = MaxSector, MD_SB_CHANGE_CLEAN): the same one-up events.
    let journal = plan.journal.is_some() || plan.ppl == Some(crate::matrix::PplMode::Crash);
    let mut journal_events = None;
    // Reshape rows: the detail once md finished the reshape, whose checkpoints raised the
    // events and the update time.
    let reshape = plan.reshape.is_some();
    let detail = |field: &str| {
        if reshape {
            report.rebuilt_detail_field(field)
        } else {
            report.detail_field(field)
        }
    };
    for (detail_field, examine_field) in DETAIL_FROM_EXAMINE {
        // Reshape rows: md's detail once it finished, in the new geometry.
        let want = if reshape {
            reshaped(rk, examine_field)
        } else {
            get(rk, examine_field)
        };
        let Some(want) = want else {
            continue;
        };
        let got = detail(detail_field);
        // md's own resync (an initialisation raidkit left to it) writes superblocks too.
        let resynced = plan.init_background;
        if (journal || reshape || resynced) && detail_field == "Update Time" {
            continue;
        }
        if (reshape || resynced) && detail_field == "Events" {
            continue;
        }
        if journal && detail_field == "Events" {
            let next = want.parse::<u64>().map(|e| (e + 1).to_string()).ok();
            if got == Some(want) || got == next.as_deref() {
                journal_events = got.map(|g| format!("{want} -> {g}"));
                continue;
            }
        }
        let got_norm = got.map(|g| normalise_mdadm("Name", g, want));
        if got_norm.as_deref() != Some(want) {
            // md hands mdadm the array's times clamped to 32 bits.
            let note = if got == Some(U32_MAX_CTIME) {
                " (md clamped a time beyond 2^32 seconds: it read more than the seconds from the superblock field; tests/md-oracle/KNOWN_FAILURES.md)"
            } else {
                ""
            };
            f.push(format!(
                "mdadm --detail {detail_field} {got:?}, raidkit's examine {examine_field} \"{want}\"{note}"
            ));
        }
    }
    let kib = |v: Option<&str>| {
        v.and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    let want_kib = e.array_bytes / 1024;
    if kib(detail("Array Size")) != Some(want_kib) {
        f.push(format!(
            "mdadm --detail Array Size {:?}, raidkit's array is {want_kib} KiB",
            detail("Array Size")
        ));
    }
    if e.level != 0 {
        let want = e.member_data_sectors / 2;
        if kib(detail("Used Dev Size")) != Some(want) {
            f.push(format!(
                "mdadm --detail Used Dev Size {:?}, raidkit uses {want} KiB per member",
                detail("Used Dev Size")
            ));
        }
    }
    if f.finish() {
        out.passed.push(match journal_events {
            Some(ev) if plan.ppl.is_some() => {
                format!("detail(events {ev}: md's log replay marked the array clean)")
            }
            Some(ev) => format!("detail(events {ev}: md's journal start updated the superblocks)"),
            None => "detail".into(),
        });
    }
}

fn geometry(e: &RaidkitExpectation) -> Result<Geometry, String> {
    Geometry::from_md(&MdParams {
        level: e.level,
        layout: e.layout,
        raid_disks: e.raid_disks as u32,
        chunk_sectors: e.chunk_sectors as u32,
        member_data_sectors: vec![e.member_data_sectors; e.raid_disks],
    })
    .map_err(|x| x.to_string())
}

fn check_geometry(
    plan: &PlannedArray,
    e: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    let mut f = Failures::new("geometry", &mut out.failures);
    let sys = |k: &str| report.sysfs.get(k).map(String::as_str);
    let mut want: Vec<(&str, String)> = vec![
        ("level", format!("raid{}", e.level)),
        ("raid_disks", e.raid_disks.to_string()),
    ];
    if plan.level != 1 {
        want.push(("chunk_size", (e.chunk_sectors * 512).to_string()));
        // md shows layout -1 for a raid0 whose members are all one zone.
        let layout_ok = sys("layout") == Some(e.layout.to_string().as_str())
            || (e.level == 0 && sys("layout") == Some("-1"));
        if !layout_ok {
            f.push(format!(
                "sysfs layout {:?}, raidkit wrote {}",
                sys("layout"),
                e.layout
            ));
        }
    }
    if plan.level != 0 {
        want.push(("component_size", (e.member_data_sectors / 2).to_string()));
    }
    for (k, v) in want {
        if sys(k) != Some(v.as_str()) {
            f.push(format!("sysfs {k} {:?}, raidkit wrote {v}", sys(k)));
        }
    }
    if f.finish() {
        out.passed.push("geometry".into());
    }
}

fn check_md_check(
    plan: &PlannedArray,
    e: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    // With a member missing there is no redundancy to compare (a rebuilt array is whole).
    if e.level == 0 || plan.expected_missing() > 0 {
        return;
    }
    match report.mismatch_cnt {
        Some(0) => out.passed.push("md-check(mismatch_cnt 0)".into()),
        other => out.failures.push(format!(
            "md-check: md's own check: mismatch_cnt {other:?}, want 0"
        )),
    }
}

/// raidkit's examine report against `mdadm --examine` of the same device, field by field
/// (mdadm's size suffixes and homehost note left out where raidkit prints none): one message
/// per disagreement, a field only one side prints included. Counts compared fields in
/// `fields`.
pub fn compare_examine(
    rk: &[(String, String)],
    md: &[(String, String)],
    fields: &mut usize,
) -> Vec<String> {
    let mut out = Vec::new();
    for (k, rv) in rk {
        match get(md, k) {
            None => out.push(format!(
                "raidkit reports {k} : {rv}, mdadm --examine has no {k}"
            )),
            Some(mv) => {
                let mv = normalise_mdadm(k, mv, rv);
                if mv != *rv {
                    out.push(format!(
                        "{k}: mdadm --examine says \"{mv}\", raidkit \"{rv}\""
                    ));
                }
                *fields += 1;
            }
        }
    }
    for (k, mv) in md {
        if get(rk, k).is_none() {
            out.push(format!(
                "mdadm --examine reports {k} : {mv}, raidkit has no {k}"
            ));
        }
    }
    out
}

fn check_examine(
    plan: &PlannedArray,
    e: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    let mut f = Failures::new("examine", &mut out.failures);
    let mut fields = 0;
    for m in plan.md_members() {
        let Some(rk) = e.examine.get(&m.serial) else {
            f.push(format!(
                "member {}: raidkit has no examine report",
                m.serial
            ));
            continue;
        };
        let Some(md) = report.pre_examine.get(&m.serial) else {
            f.push(format!(
                "member {}: no mdadm --examine before assembly",
                m.serial
            ));
            continue;
        };
        for msg in compare_examine(rk, md, &mut fields) {
            f.push(format!("member {}: {msg}", m.serial));
        }
    }
    // md's view of raidkit's failures: the slots are missing in the others' Array State
    // (unless a spare took them: rebuild rows).
    let missing = if plan.rebuild_percent.is_some() {
        &[][..]
    } else {
        &plan.fail_members[..]
    };
    for &failed in missing {
        for (i, m) in plan.members.iter().enumerate() {
            if plan.fail_members.contains(&i) {
                continue;
            }
            let state = report
                .pre_examine
                .get(&m.serial)
                .and_then(|p| get(p, "Array State"));
            if state.and_then(|s| s.chars().nth(failed)) != Some('.') {
                f.push(format!(
                    "member {}: mdadm --examine Array State {state:?} does not show slot {failed} (failed by raidkit) missing",
                    m.serial
                ));
            }
        }
    }
    if f.finish() {
        out.passed.push(format!(
            "examine({fields} fields on {} members)",
            plan.md_members().count()
        ));
    }
}

/// Fields a finished recovery changes: the spare's recovery offset (and its feature bit) goes,
/// and every member's Array State shows the slot active again.
const RECOVERY_CHANGES: [&str; 3] = ["Feature Map", "Recovery Offset", "Array State"];

fn check_after_md(plan: &PlannedArray, report: &ArrayReport, out: &mut CheckOutcome) {
    let mut f = Failures::new("after-md", &mut out.failures);
    let rebuild = plan.rebuild_percent.is_some();
    // A shrink: the members from then on (the rest leave as spares).
    let shrinks = plan
        .reshape
        .as_ref()
        .filter(|r| r.shrinks(plan.raid_devices()))
        .map(|r| r.devices);
    for (i, m) in plan.md_members().enumerate() {
        let (Some(before), Some(after)) = (
            report.pre_examine.get(&m.serial),
            report.examine.get(&m.serial),
        ) else {
            f.push(format!(
                "member {}: mdadm --examine missing before or after md ran",
                m.serial
            ));
            continue;
        };
        if plan.fail_members.contains(&i) {
            // md must have left the member raidkit failed alone.
            if before != after {
                f.push(format!(
                    "member {} (failed by raidkit) changed while md ran: {:?} -> {:?}",
                    m.serial,
                    before.iter().find(|p| !after.contains(p)),
                    after.iter().find(|p| !before.contains(p))
                ));
            }
            continue;
        }
        for (k, v) in before {
            // A recovery md finished changes these (checked below).
            let recovered = rebuild && RECOVERY_CHANGES.contains(&k.as_str());
            let reshape_change = plan.reshape.is_some()
                && (RESHAPE_CHANGES.contains(&k.as_str())
                    || RESHAPE_GEOMETRY.iter().any(|(f, n)| k == f || k == n)
                    || k == "Recovery Offset");
            // A shrink ends with the members past the new count as spares (checked below).
            let shrink_change = shrinks.is_some() && SHRINK_CHANGES.contains(&k.as_str());
            if CHANGED_BY_MD.contains(&k.as_str()) || recovered || reshape_change || shrink_change {
                continue;
            }
            // mdadm creates a partial parity log array with MD_FEATURE_PPL (0x400), as raidkit
            // does; the kernel runs a log area with room for more than one log write as
            // multiple PPLs and records MD_FEATURE_MULTIPLE_PPLS (0x800) instead.
            if plan.ppl.is_some() && k == "Feature Map" && v == "0x400" {
                match get(after, k) {
                    Some("0x400") | Some("0x800") => continue,
                    _ => {}
                }
            }
            let got = get(after, k);
            if got != Some(v.as_str()) {
                f.push(format!(
                    "member {}: {k} was \"{v}\" before md ran, {got:?} after",
                    m.serial
                ));
            }
        }
        if plan.reshape.is_some() {
            // md finished the reshape: the data where raidkit's new offset said, no reshape
            // recorded.
            let new_offset = get(before, "New Offset");
            if new_offset.is_none() || get(after, "Data Offset") != new_offset {
                f.push(format!(
                    "member {}: Data Offset {:?} after md's reshape, raidkit's New Offset {new_offset:?}",
                    m.serial,
                    get(after, "Data Offset")
                ));
            }
            // The new level, layout and chunk where the reshape changed them.
            for (k, _) in RESHAPE_GEOMETRY {
                let want = reshaped(before, k);
                if get(after, k) != want {
                    f.push(format!(
                        "member {}: {k} {:?} after md's reshape, want {want:?} (before: {:?})",
                        m.serial,
                        get(after, k),
                        get(before, k)
                    ));
                }
            }
            for k in [
                "New Offset",
                "Reshape pos'n",
                "Delta Devices",
                "New Level",
                "New Layout",
                "New Chunksize",
                "Recovery Offset",
            ] {
                if let Some(v) = get(after, k) {
                    f.push(format!("member {}: {k} {v} after md's reshape", m.serial));
                }
            }
        }
        if let Some(n) = shrinks {
            // md's raid5_finish_reshape leaves the members past the new count as spares;
            // every member's Array State shows the new count of slots, all active.
            let role = get(after, "Device Role");
            let want_role = if i < n {
                get(before, "Device Role")
            } else {
                Some("spare")
            };
            if role != want_role {
                f.push(format!(
                    "member {}: Device Role {role:?} after md's shrink, want {want_role:?}",
                    m.serial
                ));
            }
            let state = get(after, "Array State").and_then(|s| s.split_whitespace().next());
            if state != Some("A".repeat(n).as_str()) {
                f.push(format!(
                    "member {}: Array State {state:?} after md's shrink (want {n} slots active)",
                    m.serial
                ));
            }
        }
        if rebuild {
            if let Some(r) = get(after, "Recovery Offset") {
                f.push(format!(
                    "member {}: Recovery Offset {r} after md finished the recovery",
                    m.serial
                ));
            }
            let n = plan.raid_devices();
            let state = get(after, "Array State").and_then(|s| s.split_whitespace().next());
            if state != Some("A".repeat(n).as_str()) {
                f.push(format!(
                    "member {}: Array State {state:?} after md finished the recovery (want every slot active)",
                    m.serial
                ));
            }
        }
        match get(after, "State") {
            Some("clean") => {}
            other => f.push(format!(
                "member {}: State {other:?} after md stopped the array (want clean)",
                m.serial
            )),
        }
        match get(after, "Checksum") {
            Some(c) if c.ends_with("- correct") => {}
            other => f.push(format!(
                "member {}: Checksum {other:?} after md stopped the array",
                m.serial
            )),
        }
        let ev = |p: &[(String, String)]| get(p, "Events").and_then(|v| v.parse::<u64>().ok());
        match (ev(before), ev(after)) {
            (Some(b), Some(a)) if a >= b => {}
            other => f.push(format!(
                "member {}: Events before/after md {other:?}",
                m.serial
            )),
        }
    }
    if f.finish() {
        out.passed.push("after-md".into());
    }
}

/// mdadm's "64 KB" / "4 MB" / "512 B" of `--examine-bitmap`'s Chunksize, in bytes.
pub fn parse_mdadm_chunksize(v: &str) -> Option<u64> {
    let mut w = v.split_whitespace();
    let n: u64 = w.next()?.parse().ok()?;
    let unit = match w.next()? {
        "B" => 1,
        "KB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        _ => return None,
    };
    Some(n * unit)
}

/// "48 bits (chunks), 3 dirty (6.2%)" -> (48, 3).
pub fn parse_mdadm_bits(v: &str) -> Option<(u64, u64)> {
    let (bits, rest) = v.split_once(" bits")?;
    let dirty = rest.split_once(", ")?.1.split_once(" dirty")?.0;
    Some((bits.trim().parse().ok()?, dirty.trim().parse().ok()?))
}

/// One member's `mdadm --examine-bitmap` against raidkit's bitmap on that member.
fn compare_bitmap(
    f: &mut Failures<'_>,
    serial: &str,
    md: &[(String, String)],
    rk: &BitmapExpectation,
    array_uuid: Option<&str>,
    superblock_events: Option<u64>,
    want_dirty: u64,
) {
    let field = |k: &str| get(md, k);
    let chunk = field("Chunksize").and_then(parse_mdadm_chunksize);
    if chunk != Some(rk.chunk_bytes) {
        f.push(format!(
            "member {serial}: mdadm -X Chunksize {:?}, raidkit's bitmap chunk is {} bytes",
            field("Chunksize"),
            rk.chunk_bytes
        ));
    }
    for (k, want) in [("Events", rk.events), ("Events Cleared", rk.events_cleared)] {
        if field(k).and_then(|v| v.parse::<u64>().ok()) != Some(want) {
            f.push(format!(
                "member {serial}: mdadm -X {k} {:?}, raidkit's bitmap has {want}",
                field(k)
            ));
        }
    }
    // md takes a bitmap whose events equal the superblock's or are one behind.
    if let (Some(sb), Some(ev)) = (
        superblock_events,
        field("Events").and_then(|v| v.parse::<u64>().ok()),
    ) {
        if ev != sb && ev + 1 != sb {
            f.push(format!(
                "member {serial}: mdadm -X Events {ev}, mdadm --examine Events {sb}: md would call the bitmap stale"
            ));
        }
    }
    let sync_kib =
        field("Sync Size").and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok());
    if sync_kib != Some(rk.sync_size_sectors / 2) {
        f.push(format!(
            "member {serial}: mdadm -X Sync Size {:?}, raidkit's bitmap covers {} KiB",
            field("Sync Size"),
            rk.sync_size_sectors / 2
        ));
    }
    match field("Bitmap").and_then(parse_mdadm_bits) {
        Some((bits, dirty)) => {
            if bits != rk.bits {
                f.push(format!(
                    "member {serial}: mdadm -X Bitmap {bits} bits, raidkit's has {}",
                    rk.bits
                ));
            }
            if dirty != want_dirty {
                f.push(format!(
                    "member {serial}: mdadm -X {dirty} dirty bits, raidkit left {want_dirty}"
                ));
            }
        }
        None => f.push(format!(
            "member {serial}: mdadm -X Bitmap {:?}",
            field("Bitmap")
        )),
    }
    if field("State") != Some("OK") {
        f.push(format!(
            "member {serial}: mdadm -X State {:?} (want OK)",
            field("State")
        ));
    }
    if let Some(u) = array_uuid {
        if field("UUID") != Some(u) {
            f.push(format!(
                "member {serial}: mdadm -X UUID {:?}, the array's is {u}",
                field("UUID")
            ));
        }
    }
}

/// The internal bitmap raidkit wrote, as md's tools read it, before and after md ran.
fn check_bitmap(
    plan: &PlannedArray,
    e: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    let mut f = Failures::new("bitmap", &mut out.failures);
    let degraded_writes = !plan.fail_members.is_empty() && plan.rebuild_percent.is_none();
    // What the bitmap must hold: nothing after a clean stop of a whole array; the bits of
    // the writes raidkit made while members were failed otherwise.
    let want_dirty = if degraded_writes {
        match e.bitmap_dirty_bits {
            Some(0) | None => {
                f.push(format!(
                    "raidkit counted {:?} dirty bits after writing while degraded (want some)",
                    e.bitmap_dirty_bits
                ));
                0
            }
            Some(d) => d,
        }
    } else {
        0
    };
    let mut dirty_seen = None;
    for i in plan.working_members() {
        let serial = &plan.members[i].serial;
        let Some(rk) = e.bitmap.get(serial) else {
            f.push(format!("member {serial}: raidkit wrote no bitmap"));
            continue;
        };
        if let Some(c) = plan.bitmap_chunk_bytes.filter(|&c| c > 0) {
            if rk.chunk_bytes != c {
                f.push(format!(
                    "member {serial}: raidkit's bitmap chunk is {} bytes, the row asked for {c}",
                    rk.chunk_bytes
                ));
            }
        }
        if rk.dirty != want_dirty {
            f.push(format!(
                "member {serial}: raidkit's bitmap on the member has {} dirty bits, raidkit counted {want_dirty}",
                rk.dirty
            ));
        }
        let uuid = e.examine.get(serial).and_then(|p| get(p, "Array UUID"));
        let sb_events = report
            .pre_examine
            .get(serial)
            .and_then(|p| get(p, "Events"))
            .and_then(|v| v.parse::<u64>().ok());
        match report.pre_bitmap.get(serial) {
            Some(md) => {
                compare_bitmap(&mut f, serial, md, rk, uuid, sb_events, want_dirty);
                dirty_seen = get(md, "Bitmap").and_then(parse_mdadm_bits).map(|b| b.1);
            }
            None => f.push(format!(
                "member {serial}: no mdadm --examine-bitmap before assembly"
            )),
        }
        // After md ran: the bitmap is still there with the same shape; md clears no bits
        // while degraded and has written nothing to set one otherwise.
        match report.bitmap.get(serial) {
            Some(md) => {
                let chunk = get(md, "Chunksize").and_then(parse_mdadm_chunksize);
                let bits = get(md, "Bitmap").and_then(parse_mdadm_bits);
                if chunk != Some(rk.chunk_bytes) || bits.map(|b| b.0) != Some(rk.bits) {
                    f.push(format!(
                        "member {serial}: after md, mdadm -X Chunksize {:?} Bitmap {:?}; raidkit wrote {} bytes, {} bits",
                        get(md, "Chunksize"),
                        get(md, "Bitmap"),
                        rk.chunk_bytes,
                        rk.bits
                    ));
                }
                let dirty_ok = match bits {
                    Some((_, d)) if degraded_writes => d >= want_dirty,
                    Some((_, d)) => d == 0,
                    None => false,
                };
                if !dirty_ok {
                    f.push(format!(
                        "member {serial}: after md stopped the array, mdadm -X Bitmap {:?} (raidkit left {want_dirty} dirty{})",
                        get(md, "Bitmap"),
                        if degraded_writes { "; md clears none while degraded" } else { "" }
                    ));
                }
            }
            None => f.push(format!(
                "member {serial}: no mdadm --examine-bitmap after md stopped the array"
            )),
        }
    }
    if report.detail_field("Intent Bitmap") != Some("Internal") {
        f.push(format!(
            "mdadm --detail Intent Bitmap {:?} (want Internal)",
            report.detail_field("Intent Bitmap")
        ));
    }
    if report.detail_field("Consistency Policy") != Some("bitmap") {
        f.push(format!(
            "mdadm --detail Consistency Policy {:?} (want bitmap)",
            report.detail_field("Consistency Policy")
        ));
    }
    if f.finish() {
        let chunk = e.bitmap.values().next().map_or(0, |b| b.chunk_bytes);
        out.passed.push(format!(
            "bitmap({}K chunk, {} dirty bits)",
            chunk >> 10,
            dirty_seen.unwrap_or(0)
        ));
    }
}

/// Partial parity log rows: md runs the array with the log raidkit made (mdadm --detail and
/// sysfs say ppl), and for `ppl=crash` raidkit's own replay recovered the entry. That md
/// replayed it too is what its check says: the stripe's parity was left stale on the member,
/// so without the replay md's check counts mismatches (`check_md_check`).
fn check_ppl(
    plan: &PlannedArray,
    expect: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    let mut f = Failures::new("ppl", &mut out.failures);
    match report.detail_field("Consistency Policy") {
        Some("ppl") => {}
        other => f.push(format!(
            "mdadm --detail Consistency Policy {other:?} (want ppl)"
        )),
    }
    match report.sysfs.get("consistency_policy").map(String::as_str) {
        Some("ppl") => {}
        other => f.push(format!("sysfs consistency_policy {other:?} (want ppl)")),
    }
    let Some(p) = &expect.ppl else {
        f.push("raidkit recorded nothing about its partial parity log".into());
        f.finish();
        return;
    };
    if p.policy != "ppl" {
        f.push(format!("raidkit ran with policy {} (want ppl)", p.policy));
    }
    let crash = plan.ppl == Some(crate::matrix::PplMode::Crash);
    let mut detail = String::from("md: Consistency Policy ppl");
    if crash {
        let replay = crate::prepare::ppl_replayed(&p.events);
        let replayed = replay.map(|(e, _, _)| e.to_string()).unwrap_or_default();
        if !matches!(replay, Some((_, recovered, 0)) if recovered > 0) {
            f.push(format!(
                "raidkit's own replay of the crashed array: {replayed:?} (want entries recovered, 0 mismatched)"
            ));
        }
        if let Some((offset, len, slot)) = p.stale_parity {
            detail += &format!(
                "; parity of the write at {offset}+{len} left stale on slot {slot}, md replayed its log (check below)"
            );
        }
        detail += &format!("; raidkit: {replayed}");
    }
    if f.finish() {
        out.passed.push(format!("ppl({detail})"));
    }
}

fn check_roundtrip(
    plan: &PlannedArray,
    e: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    // Past a RAID 10 reshape's old size md's data is md's own: raidkit must read what md
    // read there.
    let want = match (md_new_room(plan, e), report.sha256.as_deref()) {
        (Some(_), Some(md)) => md,
        _ => e.sha256.as_str(),
    };
    match readback_sha256(plan) {
        Ok(sha) if sha == want => out.passed.push(if want == e.sha256 {
            "roundtrip".into()
        } else {
            "roundtrip(md's data, new room included)".into()
        }),
        Ok(sha) => out.failures.push(format!(
            "roundtrip: after md, raidkit reads sha256 {sha}, want {want}"
        )),
        Err(x) => out
            .failures
            .push(format!("roundtrip: after md stopped the array, {x}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mdadm_bitmap_fields() {
        assert_eq!(parse_mdadm_chunksize("64 KB"), Some(64 << 10));
        assert_eq!(parse_mdadm_chunksize("64 MB"), Some(64 << 20));
        assert_eq!(parse_mdadm_chunksize("512 B"), Some(512));
        assert_eq!(parse_mdadm_chunksize("64K"), None);
        assert_eq!(
            parse_mdadm_bits("48 bits (chunks), 3 dirty (6.2%)"),
            Some((48, 3))
        );
        assert_eq!(
            parse_mdadm_bits("1 bits (chunks), 0 dirty (0.0%)"),
            Some((1, 0))
        );
        assert_eq!(parse_mdadm_bits("48 bits"), None);
        assert_eq!(
            sync_completed(Some(&"2560 / 6144".to_string())),
            Some((2560, 6144))
        );
        assert_eq!(sync_completed(Some(&"none".to_string())), None);
    }
}
