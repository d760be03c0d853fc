//! Cross-check 1 (md -> raidkit): rebuild an md-written array from its raw member images with
//! raidkit-layout and raidkit-parity, and compare with what md reported. (Arrays of the other
//! direction are handed to [`crate::assembled`].)
//!
//! For one array the checks are, in order (each failure is a precise line: stripe, member,
//! byte, expected versus got):
//! 1. the VM's report is complete, md's own `check` found no mismatch;
//! 2. every member's superblock (read from its bytes) agrees with the others, with
//!    `mdadm --examine` (data offset, role) and with sysfs (level, layout, chunk, disks);
//! 3. the array md exported has the pattern the VM wrote (its sha256 equals the host's);
//! 4. `map`: every array chunk, every copy, read from the member where raidkit says it lives,
//!    equals the written data; `unmap` of every member chunk agrees the other way round;
//! 5. parity: in every stripe, md's P (and Q) equal raidkit's over md's data blocks, in the
//!    Q-syndrome slot order raidkit-layout gives;
//! 6. degraded: the whole array rebuilt without each single member (levels with redundancy)
//!    and, for raid6, without each pair, equals the written data.

use crate::matrix::PplMode;
use crate::pattern::{expected_contents, PatternWrite};
use crate::plan::{PlannedArray, Scenario};
use crate::records::ArrayReport;
use crate::superblock::{read_v12, MemberSuperblock};
use raidkit_layout::{Geometry, MdParams, MemberChunkRole, StripeMap};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::fs;

const SECTOR: usize = 512;
/// Failures kept per check; the rest are counted.
const MAX_FAILURES_PER_CHECK: usize = 4;

/// The verdict on one array.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckOutcome {
    pub name: String,
    /// What the array is (level, layout, members, chunk, size) once known.
    pub description: String,
    /// Checks that ran and passed, with counts.
    pub passed: Vec<String>,
    /// Precise failure lines; empty means the array passed.
    pub failures: Vec<String>,
}

impl CheckOutcome {
    pub fn ok(&self) -> bool {
        self.failures.is_empty() && !self.passed.is_empty()
    }
}

/// Collects failures of one check, keeping the first few.
pub(crate) struct Failures<'a> {
    check: &'static str,
    out: &'a mut Vec<String>,
    count: usize,
}

impl<'a> Failures<'a> {
    pub(crate) fn new(check: &'static str, out: &'a mut Vec<String>) -> Failures<'a> {
        Failures {
            check,
            out,
            count: 0,
        }
    }

    pub(crate) fn push(&mut self, msg: String) {
        self.count += 1;
        if self.count <= MAX_FAILURES_PER_CHECK {
            self.out.push(format!("{}: {msg}", self.check));
        }
    }

    /// Closes the check: records the overflow count; true if nothing failed.
    pub(crate) fn finish(self) -> bool {
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
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

/// First differing byte of two equal-length slices, with 8 bytes of each from there.
fn first_diff(want: &[u8], got: &[u8]) -> Option<(usize, String, String)> {
    let i = want.iter().zip(got).position(|(a, b)| a != b)?;
    let end = (i + 8).min(want.len());
    Some((i, hex(&want[i..end]), hex(&got[i..end])))
}

fn sha256_hex(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}

/// The array's member data areas, indexed by md role.
struct Members<'a> {
    data: Vec<&'a [u8]>,
}

impl Members<'_> {
    /// `len_sectors` from `member_sector` of role `member` (relative to its data offset).
    fn get(&self, member: u32, member_sector: u64, len_sectors: u64) -> Option<&[u8]> {
        let d = self.data.get(member as usize)?;
        let start = usize::try_from(member_sector).ok()?.checked_mul(SECTOR)?;
        let len = usize::try_from(len_sectors).ok()?.checked_mul(SECTOR)?;
        d.get(start..start.checked_add(len)?)
    }
}

fn level_name(level: i32, layout: Option<&str>) -> String {
    match layout {
        Some(l) => format!("raid{level} {l}"),
        None => format!("raid{level}"),
    }
}

/// Check one array of the plan against the VM's report.
pub fn check_array(plan: &PlannedArray, report: Option<&ArrayReport>) -> CheckOutcome {
    if let Some(spans) = plan.spans {
        return crate::stack::check_stack(plan, spans, report);
    }
    if plan.kind == Scenario::Assemble {
        return crate::assembled::check_assembled(plan, report);
    }
    let mut out = CheckOutcome {
        name: plan.name.clone(),
        description: level_name(plan.level as i32, plan.layout.as_deref()),
        ..CheckOutcome::default()
    };
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
    let (Some(size_bytes), Some(md_sha)) = (report.size_bytes, report.sha256.as_deref()) else {
        out.failures
            .push("vm: no array size or sha256 reported".into());
        return out;
    };
    if let Some(r) = &plan.reshape {
        out.description += &format!(", reshape={r}");
        check_md_reshape(plan, report, size_bytes, md_sha, &mut out);
        return out;
    }
    // With a write journal, the last image is the journal device: the checks of md's layout
    // and parity look at the raid members only, against the data they hold (a crash row's
    // last writes reached only the journal); crate::journal checks the journal.
    let raid_plan;
    let (plan, full_plan) = if plan.journal.is_some() {
        raid_plan = PlannedArray {
            members: plan.members[..plan.raid_devices()].to_vec(),
            journal: None,
            ..plan.clone()
        };
        (&raid_plan, plan)
    } else {
        (plan, plan)
    };
    let mut images = Vec::new();
    for m in &plan.members {
        match fs::read(&m.image) {
            Ok(b) => images.push(b),
            Err(e) => {
                out.failures
                    .push(format!("host: cannot read {}: {e}", m.image.display()));
                return out;
            }
        }
    }
    let Some((geo, members, sbs)) = check_metadata(plan, report, &images, &mut out) else {
        return out;
    };
    check_scan(plan, report, &mut out);
    let chunk_kib = u64::from(sbs[0].chunk_sectors) / 2;
    out.description = format!(
        "{} (layout {}) {} members, chunk {}K, {} KiB, data_offset {}",
        level_name(sbs[0].level, plan.layout.as_deref()),
        sbs[0].layout,
        plan.members.len(),
        chunk_kib,
        size_bytes / 1024,
        sbs[0].data_offset_sectors
    );
    let array_sectors = geo.array_sectors();
    if array_sectors * SECTOR as u64 != size_bytes {
        out.failures.push(format!(
            "size: md's array is {size_bytes} bytes, raidkit-layout computes {} sectors = {} bytes",
            array_sectors,
            array_sectors * SECTOR as u64
        ));
        return out;
    }
    let Ok(size) = usize::try_from(size_bytes) else {
        out.failures.push("size: does not fit in memory".into());
        return out;
    };
    check_writes(full_plan, &report.writes, size_bytes, &mut out);
    let on_members = &report.writes[..full_plan.member_writes().min(report.writes.len())];
    let expected = expected_contents(size, on_members);
    let host_sha = sha256_hex(&expected);
    if host_sha != md_sha {
        out.failures.push(format!(
            "pattern: md's array sha256 {md_sha} != sha256 {host_sha} of the data the VM wrote"
        ));
    } else {
        out.passed.push("sha256".into());
    }
    let ppl_crash = full_plan.ppl == Some(PplMode::Crash);
    if ppl_crash {
        // md's last write reached its data member and md's log but not its parity: the
        // members hold every write's data, and that stripe's parity is stale until a replay.
        let all = expected_contents(size, &report.writes);
        check_map(&geo, &members, &all, &mut out);
        check_unmap(&geo, &members, &all, &mut out);
        let mut stale = CheckOutcome::default();
        check_parity(&geo, &members, &mut stale);
        if stale.failures.is_empty() {
            out.failures.push(
                "parity: every stripe is consistent on the members after the crash: md's last write reached its parity, so the replay shows nothing"
                    .into(),
            );
        } else {
            out.passed
                .push("parity(stale under md's last, logged write, as the crash left it)".into());
        }
        check_md_ppl(full_plan, &sha256_hex(&all), true, &mut out);
        return out;
    }
    check_map(&geo, &members, &expected, &mut out);
    check_unmap(&geo, &members, &expected, &mut out);
    if matches!(geo, Geometry::Parity(_)) {
        check_parity(&geo, &members, &mut out);
    }
    check_degraded(&geo, &members, &expected, &mut out);
    if full_plan.journal.is_some() {
        crate::journal::check_md_journal(full_plan, report, size, &mut out);
    }
    if full_plan.ppl.is_some() {
        check_md_ppl(full_plan, &host_sha, false, &mut out);
    }
    out
}

/// `raidkit scan` on md's members finds md's array: one array, the UUID `mdadm --examine`
/// printed, every member.
fn check_scan(plan: &PlannedArray, report: &ArrayReport, out: &mut CheckOutcome) {
    let paths: Vec<std::path::PathBuf> = plan.members.iter().map(|m| m.image.clone()).collect();
    let found = raidkit_cli::config::group(raidkit_cli::config::scan(&paths));
    let md_uuid = plan
        .members
        .first()
        .and_then(|m| report.examine_field(&m.serial, "Array UUID"));
    match (found.as_slice(), md_uuid) {
        ([a], Some(uuid)) if a.uuid.to_mdadm_string() == uuid && a.members.len() == paths.len() => {
            out.passed.push("scan".into())
        }
        (_, None) => out
            .failures
            .push("scan: mdadm --examine printed no Array UUID".into()),
        (arrays, Some(uuid)) => out.failures.push(format!(
            "scan: md's array {uuid} on {} members; raidkit scan found {:?}",
            paths.len(),
            arrays
                .iter()
                .map(|a| (a.uuid.to_mdadm_string(), a.members.len()))
                .collect::<Vec<_>>()
        )),
    }
}

/// md rows that reshape (md -> raidkit for a reshape): md read the pattern (sha256), grew the
/// array and its reshape was frozen part way (`held` records; md's reads of a frozen
/// reshape's region wait for it, so md reads before). raidkit then
/// goes on with md's reshape on copies of the members (`Array::continue_reshape`, from the
/// position md's superblocks record), assembles them and must read the same data, zeros in
/// the new room, and its check must find no parity mismatch.
fn check_md_reshape(
    plan: &PlannedArray,
    report: &ArrayReport,
    size_bytes: u64,
    md_sha: &str,
    out: &mut CheckOutcome,
) {
    use raidkit_engine::{Array, AssembleOptions, ReshapeControl, TaskKind};
    let Ok(size) = usize::try_from(size_bytes) else {
        out.failures.push("size: does not fit in memory".into());
        return;
    };
    let host_sha = sha256_hex(&expected_contents(size, &report.writes));
    if host_sha != md_sha {
        out.failures.push(format!(
            "pattern: md's array sha256 {md_sha} before its reshape != sha256 {host_sha} of the data the VM wrote"
        ));
    } else {
        out.passed.push("sha256(md, before its reshape)".into());
    }
    match report.held.get("reshape_position").map(String::as_str) {
        Some(p) if p.parse::<u64>().is_ok() => {}
        other => {
            out.failures.push(format!(
                "md: reshape_position {other:?} when frozen: md finished (or never started) the reshape, nothing left for raidkit to go on with"
            ));
            return;
        }
    }
    // A shrink: what md recorded when frozen, on every member (mdadm --examine).
    if plan
        .reshape
        .as_ref()
        .is_some_and(|r| r.shrinks(plan.raid_devices()))
    {
        let position = report
            .held
            .get("reshape_position")
            .and_then(|p| p.parse::<u64>().ok());
        let mut bad = Vec::new();
        for m in &plan.members {
            match report.examine.get(&m.serial) {
                Some(pairs) => bad.extend(
                    shrink_examine_failures(pairs, position)
                        .into_iter()
                        .map(|e| format!("member {}: {e}", m.serial)),
                ),
                None => bad.push(format!("member {}: no mdadm --examine", m.serial)),
            }
        }
        if bad.is_empty() {
            out.passed.push(format!(
                "shrink-examine({} members: Delta Devices -1, New Offset above Data Offset, RESHAPE_BACKWARDS clear)",
                plan.members.len()
            ));
        }
        out.failures
            .extend(bad.into_iter().map(|e| format!("shrink-examine: {e}")));
    }
    let copies = match crate::prepare::copy_images(&plan.members) {
        Ok(c) => c,
        Err(e) => {
            out.failures.push(format!("host: copies: {e}"));
            return;
        }
    };
    let want_geo = reshape_target(plan);
    let mut geo_failures = Vec::new();
    let result = (|| -> Result<(u64, u64, u64, String, u64), String> {
        let open = || crate::prepare::open_members(&copies, false).map_err(|e| e.to_string());
        let opts = AssembleOptions::default();
        let status = Array::reshape_status(&open()?, &opts)
            .map_err(|e| format!("reshape status: {e}"))?
            .ok_or("raidkit finds no reshape recorded on md's members")?;
        // What md recorded, as raidkit reads it: the reshape the row asked md for.
        let recorded = (
            status.new_level,
            status.new_layout,
            status.new_chunk_sectors,
            status.new_raid_devices,
        );
        if let Some(msg) =
            geometry_mismatch("md's superblocks record a reshape to", recorded, want_geo)
        {
            geo_failures.push(msg);
        }
        let never = std::sync::atomic::AtomicBool::new(false);
        let ctl = ReshapeControl {
            progress: &|_, _| {},
            stop: &never,
            pause_at_bytes: None,
        };
        let done = Array::continue_reshape(open()?, &opts, &ctl)
            .map_err(|e| format!("continue md's reshape: {e}"))?;
        let (array, _) = Array::assemble(open()?, opts).map_err(|e| format!("assemble: {e}"))?;
        let st = array.status();
        let now = (st.level, st.layout, st.chunk_sectors, st.raid_disks);
        // A RAID 0 growing is a RAID 0 again at the end (mdadm's, after md's RAID 4 reshape).
        let want_done = match plan.reshape.as_ref() {
            Some(r) if r.raid0_grows(plan.level) => (0, None, recorded.2, r.devices),
            _ => (recorded.0, Some(recorded.1), recorded.2, recorded.3),
        };
        if let Some(msg) = geometry_mismatch("raidkit's array once done is", now, want_done) {
            geo_failures.push(msg);
        }
        let sha = crate::prepare::read_all(&array).map_err(|e| e.to_string())?;
        // A RAID 0 (one that grew) has no redundancy to check.
        let mismatches = if st.level == 0 {
            0
        } else {
            array
                .run_task(TaskKind::Check, &mut |_| {}, &never)
                .map_err(|e| format!("check: {e}"))?
                .progress
                .mismatch_sectors
        };
        array.stop().map_err(|e| format!("stop: {e}"))?;
        Ok((
            status.position_sectors,
            status.end_sectors,
            done.new_array_bytes,
            sha,
            mismatches,
        ))
    })();
    for c in &copies {
        let _ = fs::remove_file(&c.image);
    }
    let frozen = md_frozen(report);
    let (from, end, new_bytes, sha, mismatches) = match result {
        Ok(r) => r,
        Err(e) => {
            out.failures
                .push(format!("raidkit: {e} (md froze its reshape at {frozen})"));
            return;
        }
    };
    for msg in &geo_failures {
        out.failures.push(format!("geometry: {msg}"));
    }
    if geo_failures.is_empty() {
        out.passed.push(format!("geometry(md froze {frozen})"));
    }
    let Ok(new_size) = usize::try_from(new_bytes) else {
        out.failures.push("size: does not fit in memory".into());
        return;
    };
    let want = sha256_hex(&expected_contents(new_size, &report.writes));
    if sha != want {
        out.failures.push(format!(
            "raidkit-continued: raidkit reads sha256 {sha} after going on with md's reshape, want {want} (md's data, zeros after)"
        ));
    }
    if mismatches != 0 {
        out.failures.push(format!(
            "raidkit-continued: raidkit's check finds {mismatches} mismatched sectors"
        ));
    }
    if sha == want && mismatches == 0 {
        let check = if plan
            .reshape
            .as_ref()
            .is_some_and(|r| r.raid0_grows(plan.level))
        {
            "a RAID 0 again"
        } else {
            "check 0"
        };
        out.passed.push(format!(
            "raidkit-continued(md's reshape from {from} of {end} sectors; data, zeros, {check})"
        ));
    }
}

/// md's superblock feature bits of a reshape (md_p.h).
const MD_FEATURE_RESHAPE_ACTIVE: u32 = 0x4;
const MD_FEATURE_RESHAPE_BACKWARDS: u32 = 0x20;
const MD_FEATURE_NEW_OFFSET: u32 = 0x40;

/// What `mdadm --examine` of a member (`pairs`) must show of a shrink (one member less)
/// stopped at array sector `position`: Reshape pos'n there (mdadm prints KiB), Delta
/// Devices -1, the New Offset above the Data Offset (moved up into the room behind the
/// data), and the feature bits md's super_1_sync writes then: RESHAPE_ACTIVE and NEW_OFFSET,
/// and not RESHAPE_BACKWARDS, which md records only when delta_disks is 0 (a shrink is
/// backwards by its negative delta: super_1_validate sets reshape_backwards for either).
/// Returns what differs.
pub(crate) fn shrink_examine_failures(
    pairs: &[(String, String)],
    position: Option<u64>,
) -> Vec<String> {
    let get = |k: &str| pairs.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
    let first = |k: &str| get(k).and_then(|v| v.split_whitespace().next());
    let num = |k: &str| first(k).and_then(|v| v.parse::<i64>().ok());
    let mut f = Vec::new();
    if let Some(p) = position {
        if num("Reshape pos'n") != Some((p / 2) as i64) {
            f.push(format!(
                "Reshape pos'n {:?}, want {} (KiB: array sector {p})",
                get("Reshape pos'n"),
                p / 2
            ));
        }
    }
    if num("Delta Devices") != Some(-1) {
        f.push(format!("Delta Devices {:?}, want -1", get("Delta Devices")));
    }
    match (num("Data Offset"), num("New Offset")) {
        (Some(d), Some(n)) if n > d => {}
        (d, n) => f.push(format!(
            "New Offset {n:?} not above the Data Offset {d:?} (a shrink moves the data up)"
        )),
    }
    let map =
        first("Feature Map").and_then(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok());
    let want = MD_FEATURE_RESHAPE_ACTIVE | MD_FEATURE_NEW_OFFSET;
    let bits = MD_FEATURE_RESHAPE_ACTIVE | MD_FEATURE_RESHAPE_BACKWARDS | MD_FEATURE_NEW_OFFSET;
    if map.map(|m| m & bits) != Some(want) {
        f.push(format!(
            "Feature Map {:?}: want RESHAPE_ACTIVE and NEW_OFFSET (0x{want:x}) without RESHAPE_BACKWARDS (0x{MD_FEATURE_RESHAPE_BACKWARDS:x}), as md's super_1_sync writes a shrink (the bit only with Delta Devices 0)",
            get("Feature Map")
        ));
    }
    f
}

/// (level, layout, chunk sectors, members) of a reshape row once reshaped, as md numbers
/// them; the layout `None` where the row keeps md's default and does not change it.
type ReshapeGeometry = (i32, u32, u64, usize);

/// What md's superblocks record a row's reshape to: the row's new geometry; for a RAID 0
/// growing the RAID 4 md runs it as (mdadm's takeover), with one slot more for its parity.
fn reshape_target(plan: &PlannedArray) -> (i32, Option<u32>, u64, usize) {
    let r = plan.reshape.as_ref();
    let level = r.map_or(plan.level, |r| r.md_level(plan.level));
    let name = r.and_then(|r| r.layout.as_deref());
    let layout = match name {
        Some(name) => crate::prepare::layout_number(level, Some(name))
            .ok()
            .flatten(),
        // A RAID 4 has the one layout (parity last), whatever number md keeps; a RAID 0
        // becoming a RAID 5 or 6 takes mdadm's default, left-symmetric (2).
        None if plan.level == 0 => (level != 4).then_some(2),
        // md keeps the RAID 5 layout's number when it becomes a RAID 6 (left-symmetric, 2,
        // md's default, stays 2).
        None => crate::prepare::layout_number(plan.level, plan.layout.as_deref())
            .ok()
            .flatten()
            .or((plan.level == 5).then_some(2)),
    };
    let chunk_kib = r
        .and_then(|r| r.chunk_kib)
        .or(plan.chunk_kib)
        .unwrap_or(512);
    let devices = r.map_or(plan.raid_devices(), |r| r.md_raid_devices(plan.level));
    (level as i32, layout, chunk_kib * 2, devices)
}

/// Why `got` (level, layout, chunk sectors, members) is not `want`, if it is not.
fn geometry_mismatch(
    what: &str,
    got: ReshapeGeometry,
    want: (i32, Option<u32>, u64, usize),
) -> Option<String> {
    let (level, layout, chunk, devices) = want;
    let ok =
        got.0 == level && layout.is_none_or(|l| l == got.1) && got.2 == chunk && got.3 == devices;
    (!ok).then(|| {
        format!(
            "{what} raid{} layout {} chunk {}K on {} members, want raid{level} layout {} chunk {}K on {devices}",
            got.0,
            got.1,
            got.2 / 2,
            got.3,
            layout.map_or("(md's default)".to_string(), |l| l.to_string()),
            chunk / 2
        )
    })
}

/// md's reshape as its superblocks recorded it when frozen (`mdadm --examine` of the first
/// member): "raid6 left-symmetric-6 -> left-symmetric, chunk 64K, ... at 54016K".
fn md_frozen(report: &ArrayReport) -> String {
    let Some(ex) = report.examine.values().next() else {
        return "(no mdadm --examine)".into();
    };
    let get = |k: &str| {
        ex.iter()
            .find(|(f, _)| f == k)
            .map(|(_, v)| v.split(" (").next().unwrap_or(v).trim().to_string())
    };
    let mut parts = Vec::new();
    // A RAID 0's takeover, made before the reshape (vm-lib.sh oracle_reshape).
    if let Some(t) = report.held.get("takeover") {
        let h = |k: &str| report.held.get(k).map_or("?", String::as_str);
        parts.push(format!(
            "after mdadm --grow {t} md ran {} layout {} on {} raid disks, degraded {}",
            h("takeover_level"),
            h("takeover_layout"),
            h("takeover_raid_disks"),
            h("takeover_degraded")
        ));
    }
    if report.held.contains_key("stopped") {
        parts.push("mdadm's --grow process waiting to make it a RAID 0 stopped first".into());
    }
    for (k, new) in [
        ("Raid Level", "New Level"),
        ("Layout", "New Layout"),
        ("Chunk Size", "New Chunksize"),
        ("Data Offset", "New Offset"),
    ] {
        match (get(k), get(new)) {
            (Some(a), Some(b)) => parts.push(format!("{k} {a} -> {b}")),
            (Some(a), None) => parts.push(format!("{k} {a}")),
            _ => {}
        }
    }
    for k in ["Raid Devices", "Delta Devices", "Reshape pos'n"] {
        if let Some(v) = get(k) {
            parts.push(format!("{k} {v}"));
        }
    }
    if let Some(r) = report.held_dev.iter().find_map(|(serial, d)| {
        d.get("recovery_start")
            .filter(|v| v.as_str() != "none")
            .map(|v| format!("{serial} recovering from {v}"))
    }) {
        parts.push(r);
    }
    parts.join(", ")
}

/// md rows with the partial parity log: raidkit assembles copies of md's members read-write
/// (so it reads md's log areas and, as md does at every start, writes them empty), runs with
/// the log, and reads the data md wrote. After md's crash (`crash`) raidkit must replay md's
/// log (entries recovered, none mismatched), start without a resync, and its check must find
/// parity consistent again.
fn check_md_ppl(plan: &PlannedArray, want_sha: &str, crash: bool, out: &mut CheckOutcome) {
    use crate::prepare::{ppl_replayed, read_all, sentences, with_assembled_copies};
    use raidkit_engine::ArrayEvent;
    use raidkit_engine::{ConsistencyPolicy, TaskKind, TaskOutcome};
    let mut failures = Vec::new();
    let result = with_assembled_copies(&plan.members, |array, asm| {
        let policy = array.consistency_policy();
        if policy != ConsistencyPolicy::Ppl {
            failures.push(format!(
                "raidkit's consistency policy {}, want ppl",
                policy.name()
            ));
        }
        match read_all(array) {
            Ok(sha) if sha == want_sha => {}
            Ok(sha) => failures.push(format!(
                "raidkit reads sha256 {sha}, md's data has {want_sha}"
            )),
            Err(e) => failures.push(format!("raidkit read: {e}")),
        }
        let mut note = if asm.was_dirty { "dirty" } else { "clean" }.to_string();
        if crash {
            let replay = ppl_replayed(&asm.events);
            if !asm.was_dirty || !matches!(replay, Some((_, recovered, 0)) if recovered > 0) {
                failures.push(format!(
                    "raidkit's assembly after md's crash says {:?} (want dirty, entries recovered, 0 mismatched)",
                    sentences(&asm.events)
                ));
            }
            if asm
                .events
                .iter()
                .any(|e| matches!(e, ArrayEvent::ResyncNeeded { .. }))
            {
                failures.push(format!(
                    "raidkit wants a resync after replaying md's log: {:?}",
                    sentences(&asm.events)
                ));
            }
            let replayed = replay.map(|(e, _, _)| e.to_string()).unwrap_or_default();
            let stop = std::sync::atomic::AtomicBool::new(false);
            match array.run_task(TaskKind::Check, &mut |_| {}, &stop) {
                Ok(r)
                    if r.outcome == TaskOutcome::Completed && r.progress.mismatch_sectors == 0 => {}
                Ok(r) => failures.push(format!(
                    "raidkit's check after the replay: {:?}, {} mismatched sectors",
                    r.outcome, r.progress.mismatch_sectors
                )),
                Err(e) => failures.push(format!("raidkit's check: {e}")),
            }
            note = format!("{note}, {replayed}, check 0 mismatched");
        }
        note
    });
    match result {
        Ok(note) if failures.is_empty() => out.passed.push(format!(
            "ppl(raidkit runs md's log, {note}, reads md's data)"
        )),
        Ok(_) => out
            .failures
            .extend(failures.into_iter().map(|f| format!("ppl: {f}"))),
        Err(e) => out.failures.push(format!(
            "ppl: raidkit cannot assemble md's array with its partial parity log: {e}"
        )),
    }
}

/// Superblocks, examine and sysfs; returns the geometry and member data views by role.
fn check_metadata<'a>(
    plan: &PlannedArray,
    report: &ArrayReport,
    images: &'a [Vec<u8>],
    out: &mut CheckOutcome,
) -> Option<(Geometry, Members<'a>, Vec<MemberSuperblock>)> {
    let mut f = Failures::new("metadata", &mut out.failures);
    let mut sbs = Vec::new();
    for (m, img) in plan.members.iter().zip(images) {
        match read_v12(img) {
            Ok(sb) => sbs.push(sb),
            Err(e) => f.push(format!("member {}: {e}", m.serial)),
        }
    }
    if sbs.len() != plan.members.len() {
        f.finish();
        return None;
    }
    let first = sbs[0].clone();
    let raid_disks = first.raid_disks as usize;
    if raid_disks != plan.members.len() || first.level != plan.level as i32 {
        f.push(format!(
            "superblock says raid{} on {} disks, requested raid{} on {}",
            first.level,
            raid_disks,
            plan.level,
            plan.members.len()
        ));
        f.finish();
        return None;
    }
    let mut by_role: Vec<Option<usize>> = vec![None; raid_disks];
    for (i, sb) in sbs.iter().enumerate() {
        let serial = &plan.members[i].serial;
        if (sb.level, sb.layout, sb.chunk_sectors, sb.raid_disks)
            != (
                first.level,
                first.layout,
                first.chunk_sectors,
                first.raid_disks,
            )
        {
            f.push(format!(
                "member {serial}: level/layout/chunk/disks differ from member 0"
            ));
        }
        match by_role.get_mut(usize::from(sb.role)) {
            Some(slot @ None) => *slot = Some(i),
            _ => f.push(format!(
                "member {serial}: role {:#x} invalid or duplicate",
                sb.role
            )),
        }
        let want_offset = format!("{} sectors", sb.data_offset_sectors);
        match report.examine_field(serial, "Data Offset") {
            Some(v) if v == want_offset => {}
            other => f.push(format!(
                "member {serial}: mdadm --examine Data Offset {other:?}, superblock {want_offset}"
            )),
        }
        let want_role = format!("Active device {}", sb.role);
        match report.examine_field(serial, "Device Role") {
            Some(v) if v == want_role => {}
            other => f.push(format!(
                "member {serial}: mdadm --examine Device Role {other:?}, superblock {want_role}"
            )),
        }
        if plan.level != 1 {
            let want_chunk = format!("{}K", sb.chunk_sectors / 2);
            match report.examine_field(serial, "Chunk Size") {
                Some(v) if v == want_chunk => {}
                other => f.push(format!(
                    "member {serial}: mdadm --examine Chunk Size {other:?}, superblock {want_chunk}"
                )),
            }
        }
        if let (Some(want), Some(got)) = (
            plan.layout.as_deref(),
            report.examine_field(serial, "Layout"),
        ) {
            // mdadm prints raid10 layouts as "near=2" / "far=2" / "offset=2".
            let got_short = got
                .replace("near=", "n")
                .replace("far=", "f")
                .replace("offset=", "o");
            if got != want && got_short != want {
                f.push(format!(
                    "member {serial}: mdadm --examine Layout {got}, requested {want}"
                ));
            }
        }
    }
    let sys = |k: &str| report.sysfs.get(k).map(String::as_str);
    let want_level = format!("raid{}", first.level);
    if sys("level") != Some(want_level.as_str()) {
        f.push(format!(
            "sysfs level {:?}, superblock {want_level}",
            sys("level")
        ));
    }
    if sys("raid_disks") != Some(first.raid_disks.to_string().as_str()) {
        f.push(format!(
            "sysfs raid_disks {:?}, superblock {}",
            sys("raid_disks"),
            raid_disks
        ));
    }
    if plan.level != 1 {
        let want_layout = first.layout.to_string();
        // md shows layout -1 for a raid0 whose members are all the same size (one zone,
        // where the multi-zone layout does not apply) although the superblock keeps it.
        let chunk = u64::from(first.chunk_sectors.max(1));
        let one_zone = first.level == 0
            && sbs
                .iter()
                .all(|sb| sb.data_size_sectors / chunk == first.data_size_sectors / chunk);
        let layout_ok = sys("layout") == Some(want_layout.as_str())
            || (one_zone && sys("layout") == Some("-1"));
        if !layout_ok {
            f.push(format!(
                "sysfs layout {:?}, superblock {want_layout}",
                sys("layout")
            ));
        }
        let want_chunk = (u64::from(first.chunk_sectors) * 512).to_string();
        if sys("chunk_size") != Some(want_chunk.as_str()) {
            f.push(format!(
                "sysfs chunk_size {:?}, superblock {want_chunk}",
                sys("chunk_size")
            ));
        }
    }
    if plan.level != 0 {
        match report.mismatch_cnt {
            Some(0) => {}
            other => f.push(format!("md's own check: mismatch_cnt {other:?}, want 0")),
        }
    }
    let roles: Option<Vec<usize>> = by_role.iter().copied().collect();
    let Some(roles) = roles else {
        f.push("not every role has a member".into());
        f.finish();
        return None;
    };
    let member_data_sectors = roles
        .iter()
        .map(|&i| {
            if first.level == 0 {
                sbs[i].data_size_sectors
            } else {
                sbs[i].size_sectors
            }
        })
        .collect();
    let params = MdParams {
        level: first.level,
        layout: first.layout,
        raid_disks: first.raid_disks,
        chunk_sectors: first.chunk_sectors,
        member_data_sectors,
    };
    let geo = match Geometry::from_md(&params) {
        Ok(g) => g,
        Err(e) => {
            f.push(format!(
                "raidkit-layout rejects md's geometry {params:?}: {e}"
            ));
            f.finish();
            return None;
        }
    };
    let mut data = Vec::new();
    for &i in &roles {
        let start = usize::try_from(sbs[i].data_offset_sectors).unwrap_or(usize::MAX);
        match images[i].get(start.saturating_mul(SECTOR)..) {
            Some(d) => data.push(d),
            None => {
                f.push(format!(
                    "member {}: data offset beyond the image",
                    plan.members[i].serial
                ));
                f.finish();
                return None;
            }
        }
    }
    if !f.finish() {
        return None;
    }
    out.passed.push("metadata".into());
    Some((geo, Members { data }, sbs))
}

/// The VM performed exactly the planned writes.
fn check_writes(
    plan: &PlannedArray,
    done: &[PatternWrite],
    size_bytes: u64,
    out: &mut CheckOutcome,
) {
    let planned: Vec<PatternWrite> = plan
        .writes
        .iter()
        .map(|w| PatternWrite {
            seed: w.seed,
            offset_bytes: w.offset_bytes,
            len_bytes: w
                .len_bytes
                .unwrap_or(size_bytes.saturating_sub(w.offset_bytes)),
        })
        .collect();
    if planned != done {
        out.failures.push(format!(
            "vm: writes done {done:?} differ from the plan {planned:?}"
        ));
    }
}

/// Every array chunk, every copy, is where raidkit-layout's `map` says.
fn check_map(geo: &Geometry, members: &Members, expected: &[u8], out: &mut CheckOutcome) {
    let mut f = Failures::new("map", &mut out.failures);
    let total = geo.array_sectors();
    let (mut s, mut pieces) = (0u64, 0u64);
    while s < total {
        let m = match geo.map(s) {
            Ok(m) => m,
            Err(e) => {
                f.push(format!("array sector {s}: raidkit-layout error {e}"));
                break;
            }
        };
        let len = m.sectors_to_chunk_end.clamp(1, total - s);
        let lo = s as usize * SECTOR;
        let want = &expected[lo..lo + len as usize * SECTOR];
        let stripe = m
            .parity
            .map_or(String::new(), |p| format!(" (stripe {})", p.stripe));
        for (copy, pl) in m.placements.iter().enumerate() {
            match members.get(pl.member, pl.member_sector, len) {
                None => f.push(format!(
                    "array sector {s}{stripe} copy {copy}: member {} sector {} is beyond the image",
                    pl.member, pl.member_sector
                )),
                Some(got) => {
                    if let Some((i, w, g)) = first_diff(want, got) {
                        f.push(format!(
                            "array byte {}{stripe} copy {copy} -> member {} sector {}: expected {w} got {g}",
                            lo + i,
                            pl.member,
                            pl.member_sector + (i / SECTOR) as u64
                        ));
                    }
                }
            }
        }
        s += len;
        pieces += 1;
    }
    if f.finish() {
        out.passed.push(format!("map({pieces} chunks)"));
    }
}

/// Every member chunk holds what raidkit-layout's `unmap` says, and `map` agrees.
fn check_unmap(geo: &Geometry, members: &Members, expected: &[u8], out: &mut CheckOutcome) {
    let mut f = Failures::new("unmap", &mut out.failures);
    let total = geo.array_sectors();
    let step = match geo.chunk_sectors() {
        0 => 128,
        c => u64::from(c),
    };
    let mut data_chunks = 0u64;
    for member in 0..geo.raid_disks() {
        let used = geo.member_used_sectors(member);
        let mut ms = 0;
        while ms < used {
            let len = step.min(used - ms);
            match geo.unmap(member, ms) {
                Err(e) => f.push(format!(
                    "member {member} sector {ms}: raidkit-layout error {e}"
                )),
                Ok(MemberChunkRole::Data { array_sector, copy }) => {
                    data_chunks += 1;
                    let len = len.min(total.saturating_sub(array_sector));
                    let back = geo.map(array_sector).ok().and_then(|m| {
                        m.placements
                            .get(copy as usize)
                            .map(|p| (p.member, p.member_sector))
                    });
                    if back != Some((member, ms)) {
                        f.push(format!(
                            "member {member} sector {ms} -> array sector {array_sector} copy {copy}, but map gives {back:?}"
                        ));
                    }
                    let lo = array_sector as usize * SECTOR;
                    let want = expected.get(lo..lo + len as usize * SECTOR);
                    match (want, members.get(member, ms, len)) {
                        (Some(w), Some(g)) => {
                            if let Some((i, we, ge)) = first_diff(w, g) {
                                f.push(format!(
                                    "member {member} sector {} (array byte {}): expected {we} got {ge}",
                                    ms + (i / SECTOR) as u64,
                                    lo + i
                                ));
                            }
                        }
                        _ => f.push(format!(
                            "member {member} sector {ms} -> array sector {array_sector}: out of range"
                        )),
                    }
                }
                Ok(_) => {}
            }
            ms += len;
        }
    }
    if f.finish() {
        out.passed.push(format!("unmap({data_chunks} chunks)"));
    }
}

/// The data blocks of a stripe in syndrome order (`None` slots are empty = zero blocks).
fn syndrome_sources<'a>(sm: &StripeMap, chunk: u64, members: &'a Members) -> Option<Vec<&'a [u8]>> {
    sm.syndrome_slots
        .iter()
        .map(|slot| match slot {
            Some(m) => members.get(*m, sm.member_sector_start, chunk),
            None => Some(&[][..]),
        })
        .collect()
}

/// md's P and Q equal raidkit-parity's over md's data, stripe by stripe.
fn check_parity(geo: &Geometry, members: &Members, out: &mut CheckOutcome) {
    let mut f = Failures::new("parity", &mut out.failures);
    let chunk = u64::from(geo.chunk_sectors());
    let stripes = geo.stripe_count().unwrap_or(0);
    let len = chunk as usize * SECTOR;
    let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
    for stripe in 0..stripes {
        let sm = match geo.stripe_map(stripe) {
            Ok(sm) => sm,
            Err(e) => {
                f.push(format!("stripe {stripe}: raidkit-layout error {e}"));
                continue;
            }
        };
        let start = sm.member_sector_start;
        let md_p = members.get(sm.p_member, start, chunk);
        let result = match sm.q_member {
            None => {
                let data: Option<Vec<&[u8]>> = sm
                    .data_members
                    .iter()
                    .map(|&m| members.get(m, start, chunk))
                    .collect();
                data.map(|d| raidkit_parity::gen_p(&d, &mut p))
            }
            Some(_) => syndrome_sources(&sm, chunk, members)
                .map(|d| raidkit_parity::gen_syndrome(&d, &mut p, &mut q)),
        };
        match result {
            None => {
                f.push(format!(
                    "stripe {stripe}: a member chunk is beyond its image"
                ));
                continue;
            }
            Some(Err(e)) => {
                f.push(format!("stripe {stripe}: raidkit-parity error {e}"));
                continue;
            }
            Some(Ok(())) => {}
        }
        let layout_note = format!(
            "data members {:?}, P {}, Q {:?}, syndrome slots {:?}",
            sm.data_members, sm.p_member, sm.q_member, sm.syndrome_slots
        );
        if let Some(md_p) = md_p {
            if let Some((i, w, g)) = first_diff(&p, md_p) {
                f.push(format!(
                    "stripe {stripe} P on member {} byte {i}: raidkit {w}, md wrote {g} ({layout_note})",
                    sm.p_member
                ));
            }
        }
        if let Some(qm) = sm.q_member {
            if let Some(md_q) = members.get(qm, start, chunk) {
                if let Some((i, w, g)) = first_diff(&q, md_q) {
                    f.push(format!(
                        "stripe {stripe} Q on member {qm} byte {i}: raidkit {w}, md wrote {g} ({layout_note})"
                    ));
                }
            }
        }
    }
    if f.finish() {
        out.passed.push(format!("parity({stripes} stripes)"));
    }
}

/// Rebuild the whole array without the `missing` members; None if raidkit cannot.
fn rebuild(
    geo: &Geometry,
    members: &Members,
    missing: &[u32],
    size: usize,
) -> Result<Vec<u8>, String> {
    let mut arr = vec![0u8; size];
    let total = geo.array_sectors();
    if let Geometry::Parity(_) = geo {
        let chunk = u64::from(geo.chunk_sectors());
        let len = chunk as usize * SECTOR;
        let stripes = geo.stripe_count().map_err(|e| e.to_string())?;
        for stripe in 0..stripes {
            let sm = geo.stripe_map(stripe).map_err(|e| e.to_string())?;
            let start = sm.member_sector_start;
            let read = |m: u32| -> Result<Vec<u8>, String> {
                if missing.contains(&m) {
                    return Ok(vec![0u8; len]);
                }
                members
                    .get(m, start, chunk)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| format!("stripe {stripe}: member {m} beyond its image"))
            };
            // Data blocks by member role, rebuilt where missing.
            let mut by_member: Vec<Option<Vec<u8>>> = vec![None; geo.raid_disks() as usize];
            match sm.q_member {
                None => {
                    let mut lost = None;
                    let mut others = Vec::new();
                    for &m in sm.data_members.iter().chain([&sm.p_member]) {
                        if missing.contains(&m) {
                            lost = Some(m);
                        } else {
                            others.push(read(m)?);
                        }
                    }
                    for &m in &sm.data_members {
                        if Some(m) != lost {
                            by_member[m as usize] = Some(read(m)?);
                        }
                    }
                    if let Some(m) = lost {
                        if sm.data_members.contains(&m) {
                            let mut b = vec![0u8; len];
                            let srcs: Vec<&[u8]> = others.iter().map(Vec::as_slice).collect();
                            raidkit_parity::gen_p(&srcs, &mut b).map_err(|e| e.to_string())?;
                            by_member[m as usize] = Some(b);
                        }
                    }
                }
                Some(qm) => {
                    let mut blocks: Vec<Vec<u8>> = Vec::new();
                    let mut lost = Vec::new();
                    for slot in &sm.syndrome_slots {
                        match slot {
                            Some(m) => {
                                if missing.contains(m) {
                                    lost.push(blocks.len());
                                }
                                blocks.push(read(*m)?);
                            }
                            None => blocks.push(Vec::new()),
                        }
                    }
                    let n = sm.syndrome_slots.len();
                    blocks.push(read(sm.p_member)?);
                    blocks.push(read(qm)?);
                    if missing.contains(&sm.p_member) {
                        lost.push(n);
                    }
                    if missing.contains(&qm) {
                        lost.push(n + 1);
                    }
                    if !lost.is_empty() {
                        let mut refs: Vec<&mut [u8]> =
                            blocks.iter_mut().map(Vec::as_mut_slice).collect();
                        raidkit_parity::recover(&mut refs, &lost).map_err(|e| {
                            format!("stripe {stripe}: raidkit-parity recover {lost:?}: {e}")
                        })?;
                    }
                    for (slot, b) in sm.syndrome_slots.iter().zip(blocks) {
                        if let Some(m) = slot {
                            by_member[*m as usize] = Some(b);
                        }
                    }
                }
            }
            for (dd, &m) in sm.data_members.iter().enumerate() {
                let lo = (sm.array_sector_start + dd as u64 * chunk) as usize * SECTOR;
                let dst = arr
                    .get_mut(lo..lo + len)
                    .ok_or_else(|| format!("stripe {stripe}: data index {dd} beyond the array"))?;
                match &by_member[m as usize] {
                    Some(b) => dst.copy_from_slice(b),
                    None => return Err(format!("stripe {stripe}: member {m} not rebuilt")),
                }
            }
        }
        return Ok(arr);
    }
    let mut s = 0u64;
    while s < total {
        let m = geo.map(s).map_err(|e| e.to_string())?;
        let len = m.sectors_to_chunk_end.clamp(1, total - s);
        let pl = m
            .placements
            .iter()
            .find(|p| !missing.contains(&p.member))
            .ok_or_else(|| format!("array sector {s}: no surviving copy"))?;
        let src = members
            .get(pl.member, pl.member_sector, len)
            .ok_or_else(|| format!("array sector {s}: member {} beyond its image", pl.member))?;
        let lo = s as usize * SECTOR;
        arr[lo..lo + src.len()].copy_from_slice(src);
        s += len;
    }
    Ok(arr)
}

/// Every single member (and for raid6 every pair) lost: the rebuilt array is still the data.
fn check_degraded(geo: &Geometry, members: &Members, expected: &[u8], out: &mut CheckOutcome) {
    let n = geo.raid_disks();
    let mut sets: Vec<Vec<u32>> = Vec::new();
    if geo.max_degraded() >= 1 {
        sets.extend((0..n).map(|a| vec![a]));
    }
    if matches!(geo, Geometry::Parity(_)) && geo.max_degraded() >= 2 {
        for a in 0..n {
            sets.extend((a + 1..n).map(|b| vec![a, b]));
        }
    }
    if sets.is_empty() {
        return;
    }
    let mut f = Failures::new("degraded", &mut out.failures);
    for set in &sets {
        match rebuild(geo, members, set, expected.len()) {
            Err(e) => f.push(format!("without members {set:?}: {e}")),
            Ok(arr) => {
                if let Some((i, w, g)) = first_diff(expected, &arr) {
                    let chunk_bytes = (u64::from(geo.chunk_sectors()).max(1) as usize) * SECTOR;
                    f.push(format!(
                        "without members {set:?}: array byte {i} (array chunk {}): expected {w} got {g}",
                        i / chunk_bytes
                    ));
                }
            }
        }
    }
    if f.finish() {
        out.passed
            .push(format!("degraded({} member sets)", sets.len()));
    }
}
