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
//!   ones included.
//!
//! raidkit -> md ([`check_raidkit_journal`]): raidkit created the array with a journal,
//! wrote it and stopped it (or crashed it, the members dropping the last writes); md
//! assembled it with the journal. Checked: raidkit's own view (policy, role, its read-back;
//! after the crash the members alone hold exactly the data before the journal-only writes),
//! md's `mdadm --detail` (Consistency Policy journal, the journal device listed), sysfs, and
//! the kernel's journal message: "starting from clean shutdown" after a clean stop,
//! "recovering 0 data-only stripes and N data-parity stripes" (N > 0, and N equal to the rows
//! raidkit's own replay of the same log wrote back) after the crash. That
//! md then reads exactly the expected data and its `check` finds nothing is checked by
//! crate::assembled as for every raidkit row.

use crate::assembled::compare_examine;
use crate::check::{CheckOutcome, Failures};
use crate::matrix::JournalMode;
use crate::pattern::expected_contents;
use crate::plan::PlannedArray;
use crate::prepare::{
    examine_pairs, is_journal_event, journal_rows_replayed, open_members, read_all, sentences,
    with_assembled_copies, RaidkitExpectation,
};
use crate::records::ArrayReport;
use crate::superblock::read_v12;
use raidkit_engine::{ArrayEvent, ConsistencyPolicy};
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

/// md's log chain as r5l_recovery_log walks it, read straight from the journal device's bytes
/// (independent of raidkit-metadata): meta blocks from `tail` on while magic, version 1, the
/// sequence number (+1 each) and the position follow on and meta_size fits the 4 KiB block,
/// each followed by its payload pages. Page checksums are not verified (md wrote them).
/// Returns (meta blocks, meta blocks with payloads, payload pages).
pub fn walk_md_log(
    image: &[u8],
    data_offset: u64,
    data_size: u64,
    tail: u64,
) -> (usize, usize, u64) {
    let ring = data_size / 8 * 8;
    let le32 = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let le64 = |b: &[u8], o: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(w)
    };
    let (mut blocks, mut with_payloads, mut pages) = (0usize, 0usize, 0u64);
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
                0 | 1 => {
                    n += size / 8;
                    off += 16 + 4 * (size / 8) as usize;
                }
                2 => off += 8 + size as usize,
                _ => break,
            }
        }
        blocks += 1;
        if meta_size > 32 {
            with_payloads += 1;
        }
        pages += n;
        let span = 8 * (1 + n);
        scanned += span;
        pos = (pos + span) % ring;
        seq = Some(this_seq + 1);
    }
    (blocks, with_payloads, pages)
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
            ..
        }) => format!(
            "write journal held {log_writes} log writes; {rows_replayed} stripe rows replayed onto the members"
        ),
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
    let crash = plan.journal == Some(JournalMode::Crash);
    let journal_only = plan.writes.len() - plan.member_writes();
    out.description += &if crash {
        format!(", write journal; crashed after {journal_only} writes only the journal got")
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
        let clean = events
            .iter()
            .any(|e| matches!(e, ArrayEvent::JournalClean { .. }));
        let want_held = chain.map(|c| c.1);
        let ok = match want_held {
            Some(0) => clean && !crash,
            Some(w) => held == Some(w) && replayed.is_some_and(|r| r > 0),
            None => false,
        };
        if !ok {
            f.push(format!(
                "raidkit's assembly says {:?}; md's chain from journal_tail {tail:?} holds {} log writes with payloads (meta blocks, with payloads, pages: {chain:?}){}",
                sentences(&events),
                want_held.map_or("?".into(), |w| w.to_string()),
                if crash { "; after the crash md's log holds the writes the members lack" } else { "" }
            ));
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
    });
    if let Err(e) = assembled {
        f.push(format!(
            "raidkit cannot assemble md's array with its journal: {e}"
        ));
    }
    if f.finish() {
        let (blocks, _, pages) = chain.unwrap_or_default();
        out.passed.push(format!(
            "journal(md: Consistency Policy journal, journal_tail {} with {blocks} meta blocks and {pages} pages chained from it; raidkit: {note}, reads all {} writes)",
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
    let crash = plan.journal == Some(JournalMode::Crash);
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
                if journal_rows_replayed(&j.events).is_none_or(|r| r == 0) {
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
    match (crash, msg.and_then(md_recovering)) {
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
        let clean = [ArrayEvent::JournalClean {
            member: "/x/j.img".into(),
        }];
        assert_eq!(journal_said(&clean), "write journal clean");
        assert_eq!(journal_rows_replayed(&clean), None);
    }
}
