//! The write journal (RAID 4/5/6 `--write-journal`), both ways.
//!
//! md -> raidkit ([`check_md_journal`]): md created the array with a journal in the VM, wrote
//! it and stopped it (or, `journal=crash`, crashed it after writes only the journal got).
//! Checked, besides md's layout and parity (crate::check, on the raid members, against the
//! data they hold):
//! - md's superblocks: every device carries the JOURNAL feature bit (0x200), the journal
//!   device has role 0xfffd; its journal_tail is reported;
//! - mdadm: `--examine` of the journal says "Device Role : Journal", `--detail` says
//!   "Consistency Policy : journal" and lists the journal device, sysfs consistency_policy;
//! - `examine`: raidkit-metadata's examine report of every device (the journal too) equals
//!   `mdadm --examine` field by field;
//! - raidkit assembles copies of all the images read-write (so its replay runs): consistency
//!   policy journal, the journal device in role "journal", and it takes up exactly the log
//!   writes chained from md's journal_tail (walked here from the bytes; after md's clean stop
//!   the tail is md's last log write, which md replays at its next start too, so raidkit
//!   replays it as well); the whole array reads the data of every write, the journal-only
//!   ones included; after a crash raidkit's own check of the array finds no mismatch.
//! - `journal=wb-crash`: md made the journal-only writes in write-back mode (sysfs
//!   journal_mode said "[write-back]"), so its log holds them as data alone; raidkit's
//!   replay must report data-only rows (`data_only_rows` > 0), write them back and read them.
//!
//! raidkit -> md ([`check_raidkit_journal`]): raidkit created the array with a journal,
//! wrote it and stopped it (or crashed it, the members dropping the last writes); md
//! assembled it with the journal. Checked: raidkit's own view (policy, role, its read-back;
//! after the crash the members alone hold exactly the data before the journal-only writes),
//! md's `mdadm --detail` (Consistency Policy journal, the journal device listed), sysfs, and
//! the kernel's journal message: "starting from clean shutdown" after a clean stop,
//! "recovering 0 data-only stripes and N data-parity stripes" (N > 0, and N equal to the rows
//! raidkit's own replay of the same log wrote back) after the crash; after the write-back
//! crash (`journal=wb-crash`) "recovering N data-only stripes and M data-parity stripes"
//! with N > 0, N equal to the data-only rows raidkit's own replay of the same log found and M
//! to the rows it wrote back with parity. That md then reads exactly the expected data and
//! its `check` finds nothing is checked by crate::assembled as for every raidkit row.

use crate::assembled::compare_examine;
use crate::check::{CheckOutcome, Failures};
use crate::matrix::JournalMode;
use crate::pattern::expected_contents;
use crate::plan::PlannedArray;
use crate::prepare::{
    examine_pairs, is_journal_event, journal_data_only_rows, journal_rows_replayed, open_members,
    read_all, sentences, with_assembled_copies, RaidkitExpectation,
};
use crate::records::ArrayReport;
use crate::superblock::read_v12;
use raidkit_engine::{ArrayEvent, ConsistencyPolicy, TaskKind, TaskOutcome};
use raidkit_metadata::ExamineReport;
use sha2::{Digest, Sha256};

/// md's feature bit for an array with a write journal.
const FEATURE_JOURNAL: u32 = 0x200;
/// md's role of the journal device.
const ROLE_JOURNAL: u16 = 0xfffd;

fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// The device lines of `mdadm --detail` whose state is "journal"
/// ("   0   254   96   -   journal   /dev/vdg").
fn detail_journal_lines(detail: &[String]) -> Vec<&str> {
    detail
        .iter()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() >= 6 && w[4] == "journal" && w[5].starts_with("/dev/")
        })
        .map(String::as_str)
        .collect()
}

/// "md/raid:md3: recovering 0 data-only stripes and 5 data-parity stripes" -> (0, 5).
pub fn md_recovering(line: &str) -> Option<(u64, u64)> {
    let rest = line.split("recovering ").nth(1)?;
    let mut w = rest.split_whitespace();
    let data_only = w.next()?.parse().ok()?;
    let rest = rest.split(" and ").nth(1)?;
    let data_parity = rest.split_whitespace().next()?.parse().ok()?;
    Some((data_only, data_parity))
}

const R5LOG_MAGIC: u32 = 0x6433_c509;

/// A payload of md's log (r5l_payload_data, _parity, _flush): a data page at an array sector,
/// parity pages (P, or P and Q) of the stripe at a member sector, or the stripes at these
/// member sectors written to the members (md drops them from its replay).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MdPayload {
    Data(u64),
    Parity(u64),
    Flush(Vec<u64>),
}

/// md's log chain from a journal_tail ([`walk_md_log`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MdLog {
    /// Meta blocks, those with payloads, and payload pages.
    pub blocks: usize,
    pub with_payloads: usize,
    pub pages: u64,
    /// Every payload in log order.
    pub payloads: Vec<MdPayload>,
}

/// md's log chain as r5l_recovery_log walks it, read straight from the journal device's bytes
/// (independent of raidkit-metadata): meta blocks from `tail` on while magic, version 1, the
/// sequence number (+1 each) and the position follow on and meta_size fits the 4 KiB block,
/// each followed by its payload pages. Page checksums are not verified (md wrote them).
pub fn walk_md_log(image: &[u8], data_offset: u64, data_size: u64, tail: u64) -> MdLog {
    let ring = data_size / 8 * 8;
    let le32 = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let le64 = |b: &[u8], o: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(w)
    };
    let mut log = MdLog::default();
    let (mut pos, mut seq, mut scanned) = (tail, None, 0u64);
    while ring > 0 && scanned < ring {
        let at = ((data_offset + pos) * 512) as usize;
        let Some(b) = image.get(at..at + 4096) else {
            break;
        };
        let meta_size = le32(b, 12) as usize;
        let this_seq = le64(b, 16);
        if le32(b, 0) != R5LOG_MAGIC
            || b[8] != 1
            || seq.is_some_and(|s| s != this_seq)
            || le64(b, 24) != pos
            || !(32..=4096).contains(&meta_size)
        {
            break;
        }
        let mut off = 32;
        let mut n = 0u64;
        while off + 8 <= meta_size {
            let kind = u16::from_le_bytes([b[off], b[off + 1]]);
            let size = u64::from(le32(b, off + 4));
            match kind {
                0 | 1 if off + 16 <= meta_size => {
                    let at = le64(b, off + 8);
                    log.payloads.push(if kind == 0 {
                        MdPayload::Data(at)
                    } else {
                        MdPayload::Parity(at)
                    });
                    n += size / 8;
                    off += 16 + 4 * (size / 8) as usize;
                }
                2 => {
                    let stripes = (0..size as usize / 8)
                        .map(|i| off + 8 + 8 * i)
                        .take_while(|&o| o + 8 <= meta_size)
                        .map(|o| le64(b, o))
                        .collect();
                    log.payloads.push(MdPayload::Flush(stripes));
                    off += 8 + size as usize;
                }
                _ => break,
            }
        }
        log.blocks += 1;
        if meta_size > 32 {
            log.with_payloads += 1;
        }
        log.pages += n;
        let span = 8 * (1 + n);
        scanned += span;
        pos = (pos + span) % ring;
        seq = Some(this_seq + 1);
    }
    log
}

/// What md's recovery makes of the stripes of a log chain (r5c_recovery_analyze_meta_block
/// and r5c_recovery_flush_log): (data-only stripes, data-parity stripes), the two numbers of
/// its "recovering N data-only stripes and M data-parity stripes". A stripe head is a member
/// sector: a parity payload's location, or that of a data page's array sector
/// (raid5_compute_sector: the stripe's number times the chunk plus the offset in the chunk,
/// whatever the layout). Data after the stripe's parity replays what came before (one
/// data-parity stripe if it held data) and starts the stripe again; a flush drops its
/// stripes; at the end the stripes with parity are replayed (counted if they hold data) and
/// the rest, data alone, are data-only. Page checksums are not verified.
pub fn md_log_stripes(
    payloads: &[MdPayload],
    chunk_sectors: u64,
    data_disks: u64,
) -> (usize, usize) {
    use std::collections::BTreeMap;
    // Per stripe head: (data pages logged, parity logged).
    let mut stripes: BTreeMap<u64, (usize, bool)> = BTreeMap::new();
    let mut data_parity = 0;
    let per_stripe = chunk_sectors * data_disks;
    if per_stripe == 0 {
        return (0, 0);
    }
    for p in payloads {
        match p {
            MdPayload::Data(a) => {
                let s = stripes
                    .entry(a / per_stripe * chunk_sectors + a % chunk_sectors)
                    .or_default();
                if s.1 {
                    data_parity += usize::from(s.0 > 0);
                    *s = (0, false);
                }
                s.0 += 1;
            }
            MdPayload::Parity(at) => stripes.entry(*at).or_default().1 = true,
            MdPayload::Flush(at) => {
                for a in at {
                    stripes.remove(a);
                }
            }
        }
    }
    data_parity += stripes.values().filter(|s| s.1 && s.0 > 0).count();
    let data_only = stripes.values().filter(|s| !s.1).count();
    (data_only, data_parity)
}

/// What raidkit's assembly events say it did with the journal, in a few words: the last
/// journal event's sentence without the journal device's name.
fn journal_said(events: &[ArrayEvent]) -> String {
    match events.iter().rev().find(|e| is_journal_event(e)) {
        Some(ArrayEvent::JournalClean { .. }) => "write journal clean".into(),
        Some(ArrayEvent::JournalStartedEmpty { .. }) => "write journal started empty".into(),
        Some(ArrayEvent::JournalReplayed {
            log_writes,
            rows_replayed,
            data_only_rows,
            ..
        }) => {
            let mut s = format!(
                "write journal held {log_writes} log writes; {rows_replayed} stripe rows replayed onto the members"
            );
            if *data_only_rows > 0 {
                s += &format!(", {data_only_rows} data-only rows written back");
            }
            s
        }
        Some(e) => e.to_string(),
        None => String::new(),
    }
}

/// md's view of its journal and the kernel's journal message, common to both directions.
fn check_md_view(f: &mut Failures<'_>, report: &ArrayReport) {
    match report.detail_field("Consistency Policy") {
        Some("journal") => {}
        other => f.push(format!(
            "mdadm --detail Consistency Policy {other:?}, want journal"
        )),
    }
    let lines = detail_journal_lines(&report.detail);
    if lines.len() != 1 {
        f.push(format!(
            "mdadm --detail lists {} journal devices, want 1",
            lines.len()
        ));
    }
    match report.sysfs.get("consistency_policy").map(String::as_str) {
        Some("journal") => {}
        other => f.push(format!("sysfs consistency_policy {other:?}, want journal")),
    }
}

/// The kernel's journal message at the start of the array (md's r5l_recovery_log).
fn journal_message(report: &ArrayReport) -> Option<&str> {
    report
        .dmesg
        .iter()
        .find(|l| l.contains("starting from clean shutdown") || md_recovering(l).is_some())
        .map(|l| l.split("] ").nth(1).unwrap_or(l).trim())
}

/// md created the array with a journal: see the module comment.
pub fn check_md_journal(
    plan: &PlannedArray,
    report: &ArrayReport,
    size: usize,
    out: &mut CheckOutcome,
) {
    let crash = plan.journal.is_some_and(JournalMode::crashes);
    let write_back = plan.journal.is_some_and(JournalMode::write_back);
    let journal_only = plan.writes.len() - plan.member_writes();
    out.description += &if crash {
        format!(
            ", write journal; crashed after {journal_only} writes only the journal got{}",
            if write_back {
                " (in write-back mode)"
            } else {
                ""
            }
        )
    } else {
        ", write journal".to_string()
    };
    let n = plan.raid_devices();
    let Some(j) = plan.journal_member() else {
        out.failures
            .push("journal: the plan has no journal device".into());
        return;
    };
    let mut f = Failures::new("journal", &mut out.failures);
    // md's superblocks, from the bytes; md's log chain from journal_tail.
    let mut tail = None;
    let mut chain = None;
    for (i, m) in plan.members.iter().enumerate() {
        let img = std::fs::read(&m.image).map_err(|e| e.to_string());
        let sb = img
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|img| read_v12(img).map_err(|e| e.to_string()));
        match sb {
            Err(e) => f.push(format!("device {}: {e}", m.serial)),
            Ok(sb) => {
                if sb.feature_map & FEATURE_JOURNAL == 0 {
                    f.push(format!(
                        "device {}: feature map {:#x} lacks md's JOURNAL bit {FEATURE_JOURNAL:#x}",
                        m.serial, sb.feature_map
                    ));
                }
                if i == n {
                    if sb.role != ROLE_JOURNAL {
                        f.push(format!(
                            "journal {}: role {:#x} in its superblock, want {ROLE_JOURNAL:#x}",
                            m.serial, sb.role
                        ));
                    }
                    tail = Some(sb.recovery_offset_sectors);
                    if let Ok(img) = &img {
                        chain = Some(walk_md_log(
                            img,
                            sb.data_offset_sectors,
                            sb.data_size_sectors,
                            sb.recovery_offset_sectors,
                        ));
                    }
                }
            }
        }
    }
    // md's recovery of that chain, as it would sort its stripes.
    let chunk_sectors = plan.chunk_kib.unwrap_or(512) * 2;
    let data_disks = (n - if plan.level == 6 { 2 } else { 1 }) as u64;
    let md_stripes = chain
        .as_ref()
        .map(|c| md_log_stripes(&c.payloads, chunk_sectors, data_disks));
    if write_back && md_stripes.is_none_or(|(d, _)| d == 0) {
        f.push(format!(
            "md's log from journal_tail {tail:?} holds no data-only stripes ({md_stripes:?} data-only, data-parity): md wrote the journal-only writes back (their parity logged) before the crash"
        ));
    }
    match report.examine_field(&j.serial, "Device Role") {
        Some("Journal") => {}
        other => f.push(format!(
            "journal {}: mdadm --examine Device Role {other:?}, want Journal",
            j.serial
        )),
    }
    check_md_view(&mut f, report);
    if crash {
        match report.crash.get("array_state").map(String::as_str) {
            Some("clean") => {}
            other => f.push(format!(
                "array_state {other:?} when the members started dropping writes (want clean: no superblock write in flight)"
            )),
        }
    }
    if write_back {
        // sysfs journal_mode brackets the mode in force: "write-through [write-back]".
        match report.crash.get("journal_mode").map(String::as_str) {
            Some(m) if m.contains("[write-back]") => {}
            other => f.push(format!(
                "sysfs journal_mode {other:?} for the journal-only writes, want [write-back]"
            )),
        }
    }
    // raidkit assembles copies of md's images read-write, so that its replay runs.
    let all = expected_contents(size, &report.writes);
    let want = sha256_hex(&all);
    let before = sha256_hex(&expected_contents(
        size,
        &report.writes[..plan.member_writes().min(report.writes.len())],
    ));
    if crash && want == before {
        f.push(
            "the journal-only writes change no byte of the array: the crash shows nothing".into(),
        );
    }
    let mut note = String::new();
    let assembled = with_assembled_copies(&plan.members, |array, asm| {
        let status = array.status();
        if status.consistency_policy != ConsistencyPolicy::Journal {
            f.push(format!(
                "raidkit's consistency policy {}, want journal",
                status.consistency_policy.name()
            ));
        }
        let role = status.members.iter().find(|m| m.index == n);
        if role.map(|m| m.role.as_str()) != Some("journal") {
            f.push(format!(
                "raidkit's role of the journal device {:?}, want journal",
                role.map(|m| &m.role)
            ));
        }
        // raidkit must take up exactly md's chain: the log writes from
        // journal_tail on (after md's clean stop, the last one md wrote: md
        // replays it at its next start too), or call the journal clean when
        // they hold nothing.
        let events: Vec<ArrayEvent> = asm
            .events
            .iter()
            .filter(|e| is_journal_event(e))
            .cloned()
            .collect();
        let held = events.iter().find_map(|e| match e {
            ArrayEvent::JournalReplayed { log_writes, .. } => Some(*log_writes),
            _ => None,
        });
        let replayed = journal_rows_replayed(&events);
        let data_only = journal_data_only_rows(&events);
        let clean = events
            .iter()
            .any(|e| matches!(e, ArrayEvent::JournalClean { .. }));
        let want_held = chain.as_ref().map(|c| c.with_payloads);
        // After md's write-back crash the journal-only writes are data-only rows (md wrote
        // no parity for them); raidkit may find rows with parity too, older ones from
        // journal_tail on.
        let ok = match want_held {
            Some(0) => clean && !crash,
            Some(w) if write_back => held == Some(w) && data_only.is_some_and(|d| d > 0),
            Some(w) => held == Some(w) && replayed.is_some_and(|r| r > 0),
            None => false,
        };
        let counts = chain.as_ref().map(|c| (c.blocks, c.with_payloads, c.pages));
        if !ok {
            f.push(format!(
                "raidkit's assembly says {:?}; md's chain from journal_tail {tail:?} holds {} log writes with payloads (meta blocks, with payloads, pages: {counts:?}){}",
                sentences(&events),
                want_held.map_or("?".into(), |w| w.to_string()),
                if write_back {
                    "; after the write-back crash md's log holds the writes the members lack as data-only rows"
                } else if crash {
                    "; after the crash md's log holds the writes the members lack"
                } else {
                    ""
                }
            ));
        }
        // The rows raidkit found as md's recovery would: its data-only and data-parity
        // stripes of the same chain, walked here from the bytes.
        if let (Some(stripes), Some(_)) = (md_stripes, held) {
            let found = (data_only.unwrap_or(0), replayed.unwrap_or(0));
            if found != stripes {
                f.push(format!(
                    "raidkit's replay found {} data-only rows and replayed {} rows with parity; md's recovery of the chain from journal_tail {tail:?} finds {} data-only and {} data-parity stripes",
                    found.0, found.1, stripes.0, stripes.1
                ));
            }
        }
        note = journal_said(&events);
        match read_all(array) {
            Ok(sha) if sha == want => {}
            Ok(sha) => f.push(format!(
                "raidkit reads sha256 {sha}, the data of all {} writes has {want}{}",
                report.writes.len(),
                if sha == before {
                    " (it read the members as they were before the journal-only writes: nothing replayed)"
                } else {
                    ""
                }
            )),
            Err(e) => f.push(format!("raidkit read: {e}")),
        }
        if crash {
            // What the replay wrote leaves every stripe consistent.
            let stop = std::sync::atomic::AtomicBool::new(false);
            match array.run_task(TaskKind::Check, &mut |_| {}, &stop) {
                Ok(r)
                    if r.outcome == TaskOutcome::Completed && r.progress.mismatch_sectors == 0 =>
                {
                    note += ", check 0 mismatched";
                }
                Ok(r) => f.push(format!(
                    "raidkit's check after the replay: {:?}, {} mismatched sectors",
                    r.outcome, r.progress.mismatch_sectors
                )),
                Err(e) => f.push(format!("raidkit's check after the replay: {e}")),
            }
        }
    });
    if let Err(e) = assembled {
        f.push(format!(
            "raidkit cannot assemble md's array with its journal: {e}"
        ));
    }
    if f.finish() {
        let (blocks, pages) = chain.as_ref().map_or((0, 0), |c| (c.blocks, c.pages));
        let (d, dp) = md_stripes.unwrap_or_default();
        out.passed.push(format!(
            "journal(md: Consistency Policy journal, journal_tail {} with {blocks} meta blocks and {pages} pages chained from it, {d} data-only and {dp} data-parity stripes; raidkit: {note}, reads all {} writes)",
            tail.map_or("?".into(), |t| t.to_string()),
            report.writes.len()
        ));
    }
    check_md_examine(plan, report, out);
}

/// raidkit-metadata's examine report of every device md wrote (the journal too) against
/// `mdadm --examine` after md stopped the array.
fn check_md_examine(plan: &PlannedArray, report: &ArrayReport, out: &mut CheckOutcome) {
    let mut f = Failures::new("examine", &mut out.failures);
    let mut fields = 0;
    let disks = match open_members(&plan.members, true) {
        Ok(d) => d,
        Err(e) => {
            f.push(format!("host: {e}"));
            f.finish();
            return;
        }
    };
    for (m, disk) in plan.members.iter().zip(disks) {
        let found = match raidkit_engine::read_superblock(disk.as_ref()) {
            Ok(found) => found,
            Err(e) => {
                f.push(format!(
                    "device {}: raidkit finds no superblock: {e}",
                    m.serial
                ));
                continue;
            }
        };
        let rk = examine_pairs(
            &ExamineReport::from_superblock(&found.sb, Some(found.device_sectors), None).to_text(),
        );
        let Some(md) = report.examine.get(&m.serial) else {
            f.push(format!("device {}: no mdadm --examine", m.serial));
            continue;
        };
        for msg in compare_examine(&rk, md, &mut fields) {
            f.push(format!("device {}: {msg}", m.serial));
        }
    }
    if f.finish() {
        out.passed.push(format!(
            "examine({fields} fields on {} devices)",
            plan.members.len()
        ));
    }
}

/// raidkit created the array with a journal; md assembled it: see the module comment.
pub fn check_raidkit_journal(
    plan: &PlannedArray,
    e: &RaidkitExpectation,
    report: &ArrayReport,
    out: &mut CheckOutcome,
) {
    let crash = plan.journal.is_some_and(JournalMode::crashes);
    let write_back = plan.journal.is_some_and(JournalMode::write_back);
    let mut f = Failures::new("journal", &mut out.failures);
    let n = plan.raid_devices();
    match &e.journal {
        None => f.push("raidkit recorded nothing about its journal".into()),
        Some(j) => {
            if j.policy != "journal" || j.role != "journal" {
                f.push(format!(
                    "raidkit ran the array with consistency policy {} and the journal device in role {} (want journal, journal)",
                    j.policy, j.role
                ));
            }
            if crash {
                let before = expected_contents(
                    usize::try_from(e.array_bytes).unwrap_or(0),
                    &e.pattern_writes()[..plan.member_writes().min(e.writes.len())],
                );
                let before = sha256_hex(&before);
                if j.members_sha256.as_deref() != Some(before.as_str()) {
                    f.push(format!(
                        "the members alone read sha256 {:?}, the data before the journal-only writes has {before}: the crash did not leave the members as intended",
                        j.members_sha256
                    ));
                }
                if before == e.sha256 {
                    f.push("the journal-only writes change no byte of the array: the crash shows nothing".into());
                }
                if write_back {
                    if journal_data_only_rows(&j.events).is_none_or(|r| r == 0) {
                        f.push(format!(
                            "raidkit's own assembly of copies found no data-only rows after its write-back crash: {:?}",
                            sentences(&j.events)
                        ));
                    }
                } else if journal_rows_replayed(&j.events).is_none_or(|r| r == 0) {
                    f.push(format!(
                        "raidkit's own assembly of copies replayed nothing: {:?}",
                        sentences(&j.events)
                    ));
                }
            }
        }
    }
    if let Some(jm) = plan.members.get(n) {
        match report
            .pre_examine
            .get(&jm.serial)
            .and_then(|p| p.iter().find(|(k, _)| k == "Device Role"))
        {
            Some((_, r)) if r == "Journal" => {}
            other => f.push(format!(
                "journal {}: mdadm --examine Device Role {other:?} before assembly, want Journal",
                jm.serial
            )),
        }
    }
    check_md_view(&mut f, report);
    let msg = journal_message(report);
    // Both replay the same log: md counts a stripe row each time it writes one back with its
    // data, raidkit each row with data of each log write, which comes to the same number.
    let raidkit_rows = e
        .journal
        .as_ref()
        .and_then(|j| journal_rows_replayed(&j.events))
        .map(|r| r as u64);
    // md counts its stripe heads (4 KiB rows) still caching at the end of its log (data-only)
    // and those it wrote back with parity (data-parity); raidkit's replay counts the same
    // rows of the same log.
    let raidkit_data_only = e
        .journal
        .as_ref()
        .and_then(|j| journal_data_only_rows(&j.events))
        .map(|r| r as u64);
    match (crash, msg.and_then(md_recovering)) {
        (true, Some((d, dp))) if write_back && d > 0 => {
            if raidkit_data_only != Some(d) || raidkit_rows != Some(dp) {
                f.push(format!(
                    "md recovered {d} data-only and {dp} data-parity stripes, raidkit's own replay of the same log found {raidkit_data_only:?} data-only rows and wrote back {raidkit_rows:?} rows with parity"
                ));
            }
        }
        (true, other) if write_back => f.push(format!(
            "kernel: {:?} (want \"recovering N data-only stripes and M data-parity stripes\" with N > 0: md must find the writes raidkit's write-back left in the journal as data alone){}",
            msg.unwrap_or("no journal message"),
            match other {
                Some((0, _)) => " - no data-only stripes: the log holds parity for the journal-only writes",
                _ => "",
            }
        )),
        (true, Some((0, dp))) if dp > 0 => {
            if raidkit_rows != Some(dp) {
                f.push(format!(
                    "md replayed {dp} data-parity stripes, raidkit's own replay of the same log {raidkit_rows:?} stripe rows"
                ));
            }
        }
        (true, other) => f.push(format!(
            "kernel: {:?} (want \"recovering 0 data-only stripes and N data-parity stripes\" with N > 0: md must replay what only the journal holds){}",
            msg.unwrap_or("no journal message"),
            match other {
                Some((d, _)) if d > 0 => " - data-only stripes mean data logged without its parity",
                _ => "",
            }
        )),
        (false, _) => {
            if !msg.is_some_and(|m| m.contains("starting from clean shutdown")) {
                f.push(format!(
                    "kernel: {:?} (want \"starting from clean shutdown\" after raidkit's clean stop)",
                    msg.unwrap_or("no journal message")
                ));
            }
        }
    }
    if f.finish() {
        let raidkit_note = e
            .journal
            .as_ref()
            .map(|j| journal_said(&j.events))
            .unwrap_or_default();
        out.passed.push(format!(
            "journal(md: {}, Consistency Policy journal; raidkit: {raidkit_note})",
            msg.unwrap_or("?")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_journal_messages() {
        assert_eq!(
            md_recovering(
                "[    8.03] md/raid:md1: recovering 0 data-only stripes and 5 data-parity stripes"
            ),
            Some((0, 5))
        );
        assert_eq!(
            md_recovering(
                "[   11.2] md/raid:md0: recovering 4 data-only stripes and 0 data-parity stripes"
            ),
            Some((4, 0))
        );
        assert_eq!(
            md_recovering("md/raid:md1: starting from clean shutdown"),
            None
        );
        let detail = vec![
            "Consistency Policy : journal".to_string(),
            "       1     254       32        0      active sync   /dev/vdc".to_string(),
            "       0     254       96        -      journal   /dev/vdg".to_string(),
        ];
        assert_eq!(detail_journal_lines(&detail).len(), 1);
    }

    /// A meta block at `pos` (sectors) with these payloads: (kind, location or flushed
    /// stripes, pages).
    fn put_meta(image: &mut [u8], pos: u64, seq: u64, payloads: &[(u16, Vec<u64>, u32)]) {
        let mut b = vec![0u8; 32];
        for (kind, at, pages) in payloads {
            b.extend(kind.to_le_bytes());
            b.extend(0u16.to_le_bytes());
            if *kind == 2 {
                b.extend((8 * at.len() as u32).to_le_bytes());
                at.iter().for_each(|a| b.extend(a.to_le_bytes()));
            } else {
                b.extend((8 * pages).to_le_bytes());
                b.extend(at[0].to_le_bytes());
                b.extend(vec![0u8; 4 * *pages as usize]);
            }
        }
        let size = b.len() as u32;
        b[0..4].copy_from_slice(&R5LOG_MAGIC.to_le_bytes());
        b[8] = 1;
        b[12..16].copy_from_slice(&size.to_le_bytes());
        b[16..24].copy_from_slice(&seq.to_le_bytes());
        b[24..32].copy_from_slice(&pos.to_le_bytes());
        let at = pos as usize * 512;
        image[at..at + b.len()].copy_from_slice(&b);
    }

    #[test]
    fn sorts_md_s_log_into_data_only_and_data_parity_stripes() {
        // RAID 5 of 3 data members, chunk 16 sectors: 48 array sectors per stripe.
        let mut image = vec![0u8; 256 * 512];
        // Stripe 0: two data pages and parity; stripe 24: parity alone.
        put_meta(
            &mut image,
            0,
            10,
            &[
                (0, vec![0], 1),
                (0, vec![16], 1),
                (1, vec![0], 1),
                (1, vec![24], 1),
            ],
        );
        // Data alone: array sector 8 (stripe 8) and 48 (second stripe: stripe 16).
        put_meta(&mut image, 40, 11, &[(0, vec![8], 1), (0, vec![48], 1)]);
        // Data after stripe 0's parity: md replays what it had, then caches the new page.
        put_meta(&mut image, 64, 12, &[(0, vec![0], 1)]);
        // Stripe 16 was written back.
        put_meta(&mut image, 80, 13, &[(2, vec![16], 0)]);
        let log = walk_md_log(&image, 0, 256, 0);
        assert_eq!((log.blocks, log.with_payloads, log.pages), (4, 4, 7));
        assert_eq!(
            log.payloads,
            vec![
                MdPayload::Data(0),
                MdPayload::Data(16),
                MdPayload::Parity(0),
                MdPayload::Parity(24),
                MdPayload::Data(8),
                MdPayload::Data(48),
                MdPayload::Data(0),
                MdPayload::Flush(vec![16]),
            ]
        );
        // Data-only: stripes 0 (its last page) and 8; data-parity: stripe 0 once (stripe 24
        // holds no data, stripe 16 was flushed).
        assert_eq!(md_log_stripes(&log.payloads, 16, 3), (2, 1));
        // A chain cut short: a wrong sequence number ends it.
        put_meta(&mut image, 64, 99, &[(0, vec![0], 1)]);
        let log = walk_md_log(&image, 0, 256, 0);
        assert_eq!((log.blocks, log.pages), (2, 6));
        assert_eq!(md_log_stripes(&log.payloads, 16, 3), (2, 1));
    }

    #[test]
    fn says_what_raidkit_did_with_the_journal() {
        let replayed = [ArrayEvent::JournalReplayed {
            member: "/x/j.img".into(),
            log_writes: 8,
            rows_replayed: 48,
            data_only_rows: 0,
        }];
        assert_eq!(
            journal_said(&replayed),
            "write journal held 8 log writes; 48 stripe rows replayed onto the members"
        );
        assert_eq!(journal_rows_replayed(&replayed), Some(48));
        let data_only = [ArrayEvent::JournalReplayed {
            member: "/x/j.img".into(),
            log_writes: 3,
            rows_replayed: 0,
            data_only_rows: 4,
        }];
        assert_eq!(
            journal_said(&data_only),
            "write journal held 3 log writes; 0 stripe rows replayed onto the members, 4 data-only rows written back"
        );
        assert_eq!(journal_data_only_rows(&data_only), Some(4));
        assert_eq!(journal_data_only_rows(&replayed), Some(0));
        let clean = [ArrayEvent::JournalClean {
            member: "/x/j.img".into(),
        }];
        assert_eq!(journal_said(&clean), "write journal clean");
        assert_eq!(journal_rows_replayed(&clean), None);
    }
}
