//! Background work from the command line, with the process killed (SIGKILL) in the middle:
//! a rebuild resumes from the recovery_offset it recorded, a replace from its replacement's,
//! a resync after an unclean stop runs again to the end; afterwards every byte reads back
//! and md's check finds nothing. A check stopped by a signal says where to go on with
//! `--from`.

mod common;

use common::*;
use raidkit_disk::{FileDisk, OpenOptions};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MEMBER_BYTES: u64 = 24 << 20;

fn images(dir: &TempDir, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| {
            let p = dir.file(n);
            std::fs::File::create(&p)
                .unwrap()
                .set_len(MEMBER_BYTES)
                .unwrap();
            p
        })
        .collect()
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn args<'a>(head: &[&'a str], members: &'a [String], tail: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = head.to_vec();
    v.extend(members.iter().map(String::as_str));
    v.extend_from_slice(tail);
    v
}

/// The superblock of a member, read without writing anything (None while unreadable), and
/// without a claim: it watches members while the command under test owns them.
fn superblock(path: &str) -> Option<raidkit_metadata::Superblock> {
    Some(raidkit_engine::read_superblock(&watch(path)?).ok()?.sb)
}

/// A member opened to look at, read-only and without a claim.
fn watch(path: &str) -> Option<FileDisk> {
    FileDisk::open(
        Path::new(path),
        OpenOptions {
            read_only: true,
            claim: raidkit_disk::Claim::Unclaimed,
            ..OpenOptions::default()
        },
    )
    .ok()
}

/// Whether the member's partial parity log area starts with a header naming entries: a log
/// write of the running array is on disk, so a kill now leaves something to replay.
fn ppl_logged(path: &str) -> bool {
    let read = || -> Option<bool> {
        let d = watch(path)?;
        let sb = raidkit_engine::read_superblock(&d).ok()?.sb;
        let area = sb.ppl()?;
        let at = sb
            .super_offset_sectors
            .checked_add_signed(i64::from(area.offset_sectors))?;
        let mut buf = vec![0u8; 4096];
        raidkit_disk::Disk::read_at(&d, &mut buf, at * 512).ok()?;
        let signature = raidkit_metadata::ppl::ppl_signature(sb.set_uuid.as_bytes());
        let header = raidkit_metadata::PplHeader::decode(&buf, signature).ok()?;
        Some(!header.entries.is_empty())
    };
    read().unwrap_or(false)
}

fn recovery_offset(path: &str) -> Option<u64> {
    superblock(path)?.recovery_offset()
}

/// Starts `raidkit ARGS`, waits until `ready()` or the process ends, then SIGKILLs it.
/// Returns whether it was still running when killed.
fn kill_when(args: &[&str], ready: impl Fn() -> bool) -> bool {
    let mut child = Command::new(RAIDKIT)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        if ready() {
            child.kill().unwrap();
            child.wait().unwrap();
            return true;
        }
        assert!(t.elapsed() < Duration::from_secs(120), "never got ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn json_tasks(text: &str) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    v["tasks"].as_array().cloned().unwrap_or_default()
}

fn read_back(members: &[String], len: usize) -> Vec<u8> {
    let out = raidkit(&args(&["read"], members, &["--length", &len.to_string()]));
    assert!(
        out.status.success(),
        "read: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `raidkit add` rebuilds a RAID 6 member, is killed after its first checkpoint, and
/// `raidkit rebuild` resumes from there; a `raidkit replace` is killed the same way and
/// resumes too.
#[test]
fn killed_rebuild_and_replace_resume_from_their_checkpoints() {
    let dir = TempDir::new("rebuild");
    let members = images(&dir, &["a", "b", "c", "d", "e"]);
    ok(&args(
        &["create", "--level", "6", "--chunk", "64K"],
        &members,
        &[],
    ));
    let input = dir.file("input");
    let payload = data(9, 20 << 20);
    std::fs::write(&input, &payload).unwrap();
    ok(&args(&["write"], &members, &["--input", &input]));
    ok(&args(&["fail"], &members, &["--member", &members[1]]));
    let spare = images(&dir, &["f"]).remove(0);
    let mut live: Vec<String> = members
        .iter()
        .filter(|m| *m != &members[1])
        .cloned()
        .collect();
    // Slow enough to be killed between checkpoints (every 2 s).
    let killed = kill_when(
        &args(&["add"], &live, &["--member", &spare, "--max-speed", "3"]),
        || recovery_offset(&spare).is_some_and(|o| o > 0),
    );
    assert!(killed, "the rebuild finished before it could be killed");
    let at = recovery_offset(&spare).unwrap();
    live.push(spare.clone());
    let detail = ok(&args(&["detail"], &live, &[]));
    assert!(detail.contains("rebuilding"), "{detail}");
    let out = ok(&args(&["rebuild", "--json"], &live, &[]));
    let tasks = json_tasks(&out);
    let rebuild = tasks
        .iter()
        .find(|t| t["kind"] == "rebuild")
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(rebuild["outcome"], "completed", "{out}");
    let start = rebuild["start_sectors"].as_u64().unwrap();
    assert!(
        start >= at && start > 0,
        "resumed from {start}, checkpoint was {at}"
    );
    assert!(read_back(&live, payload.len()) == payload);
    ok(&args(&["check"], &live, &[]));

    // Replace a member in service, killed mid-copy, resumed by `raidkit rebuild`.
    let new = images(&dir, &["g"]).remove(0);
    let killed = kill_when(
        &args(
            &["replace"],
            &live,
            &["--member", &live[0], "--with", &new, "--max-speed", "3"],
        ),
        || recovery_offset(&new).is_some_and(|o| o > 0),
    );
    assert!(killed, "the replace finished before it could be killed");
    let mut with_new = live.clone();
    with_new.push(new.clone());
    let out = ok(&args(&["rebuild", "--json"], &with_new, &[]));
    let tasks = json_tasks(&out);
    let replace = tasks
        .iter()
        .find(|t| t["kind"] == "replace")
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(replace["outcome"], "completed", "{out}");
    assert!(replace["start_sectors"].as_u64().unwrap() > 0, "{out}");
    // The old member is now faulty and left out; the data is whole without it.
    let rest: Vec<String> = with_new[1..].to_vec();
    assert!(read_back(&rest, payload.len()) == payload);
    ok(&args(&["check"], &rest, &[]));
}

/// A write killed mid-way leaves the array dirty; the resync `raidkit rebuild` then runs is
/// killed too, and the next run does it all again (md's rule: a dirty array's resync_offset
/// is 0) and leaves parity consistent with the data.
#[test]
fn killed_write_then_killed_resync_end_consistent() {
    let dir = TempDir::new("resync");
    let members = images(&dir, &["a", "b", "c", "d"]);
    ok(&args(
        &[
            "create",
            "--level",
            "5",
            "--chunk",
            "16K",
            "--consistency-policy",
            "resync",
        ],
        &members,
        &[],
    ));
    // A writer killed once the array is marked dirty (in the middle of its writes).
    let input = dir.file("input");
    std::fs::write(&input, data(3, 60 << 20)).unwrap();
    let first = members[0].clone();
    let killed = kill_when(&args(&["write"], &members, &["--input", &input]), || {
        superblock(&first).is_some_and(|sb| !sb.is_clean())
    });
    assert!(killed, "the write finished before it could be killed");
    let detail = ok(&args(&["detail"], &members, &[]));
    assert!(detail.contains("Resync From"), "{detail}");
    let killed = kill_when(
        &args(&["rebuild", "--max-speed", "2"], &members, &[]),
        || {
            // Killed a moment after it starts.
            std::thread::sleep(Duration::from_millis(400));
            true
        },
    );
    assert!(killed, "the resync finished before it could be killed");
    let out = ok(&args(&["rebuild", "--json"], &members, &[]));
    let tasks = json_tasks(&out);
    assert!(
        tasks
            .iter()
            .any(|t| t["kind"] == "resync" && t["outcome"] == "completed"),
        "{out}"
    );
    ok(&args(&["check"], &members, &[]));
    let detail = ok(&args(&["detail"], &members, &[]));
    assert!(detail.contains("State : clean"), "{detail}");
}

/// With RAID 5's default partial parity log, a write killed mid-way needs no resync: the
/// next read-write assembly replays the log, and md's check then finds parity consistent.
#[test]
fn killed_write_on_a_ppl_array_is_replayed_at_assembly() {
    let dir = TempDir::new("ppl");
    let members = images(&dir, &["a", "b", "c", "d"]);
    ok(&args(
        &["create", "--level", "5", "--chunk", "16K"],
        &members,
        &[],
    ));
    let examined = ok(&args(&["examine"], &members[..1], &[]));
    assert!(
        examined.contains("PPL"),
        "RAID 5 should get the log by default:\n{examined}"
    );
    let input = dir.file("input");
    std::fs::write(&input, data(5, 40 << 20)).unwrap();
    // Killed only once some member's log names a stripe: before the first log write lands
    // there is nothing to replay, and md's rule then asks for a resync instead.
    let killed = kill_when(&args(&["write"], &members, &["--input", &input]), || {
        members.iter().any(|m| ppl_logged(m))
    });
    assert!(killed, "the write finished before it could be killed");
    // A read-write assembly replays the log and leaves nothing pending.
    let out = ok(&args(&["rebuild", "--json"], &members, &[]));
    assert!(json_tasks(&out).is_empty(), "{out}");
    ok(&args(&["check"], &members, &[]));
}

/// `raidkit check` stopped by SIGINT says where it stopped and how to go on (md's superblock
/// keeps no checkpoint for a check); `--from` starts there, rounded down to 4 KiB; a start past
/// the end is a usage error, and rebuild takes no `--from`.
#[test]
fn a_stopped_check_says_where_to_go_on_and_from_starts_there() {
    let dir = TempDir::new("from");
    let members = images(&dir, &["a", "b", "c", "d"]);
    ok(&args(
        &["create", "--level", "5", "--chunk", "16K"],
        &members,
        &[],
    ));
    let input = dir.file("input");
    std::fs::write(&input, data(9, 8 << 20)).unwrap();
    ok(&args(&["write"], &members, &["--input", &input]));
    // Slow enough to be caught running: 1 MB/s over ~23 MiB of member range.
    let child = Command::new(RAIDKIT)
        .args(args(
            &["check", "--max-speed", "1", "--quiet"],
            &members,
            &[],
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stdout}\n{stderr}");
    let at: u64 = stdout
        .split("go on with --from ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no --from in: {stdout}"));
    assert!(at > 0, "{stdout}");
    assert!(stderr.contains("--from"), "{stderr}");
    let from = (at + 3).to_string();
    let report = ok(&args(&["check", "--json", "--from", &from], &members, &[]));
    let tasks = json_tasks(&report);
    assert_eq!(tasks[0]["start_sectors"], (at + 3) / 8 * 8, "{report}");
    assert_eq!(tasks[0]["outcome"], "completed", "{report}");
    let past = raidkit(&args(&["check", "--from", "999999999999"], &members, &[]));
    assert_eq!(past.status.code(), Some(2), "{past:?}");
    assert!(
        String::from_utf8_lossy(&past.stderr).contains("past the end"),
        "{past:?}"
    );
    let rebuild = raidkit(&args(&["rebuild", "--from", "0"], &members, &[]));
    assert_eq!(rebuild.status.code(), Some(2), "{rebuild:?}");
}

/// Without a terminal, progress is a line per tenth that logs and scripts can read
/// (`raidkit: check 40% (812 MB/s, ETA 0:00:03)`), ending at 100 %; `--quiet` prints none.
#[test]
fn progress_without_a_terminal_is_a_line_per_tenth_and_quiet_is_quiet() {
    let dir = TempDir::new("progress-lines");
    let members = images(&dir, &["a", "b", "c", "d"]);
    ok(&args(
        &["create", "--level", "5", "--chunk", "16K"],
        &members,
        &[],
    ));
    let out = raidkit(&args(&["check"], &members, &[]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let percents: Vec<u64> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("raidkit: check "))
        .map(|rest| {
            let (percent, tail) = rest.split_once("% (").unwrap_or_else(|| panic!("{rest}"));
            assert!(tail.contains(", ETA ") && tail.ends_with(')'), "{rest}");
            percent.parse().unwrap_or_else(|_| panic!("{rest}"))
        })
        .collect();
    assert_eq!(percents.last(), Some(&100), "{stderr}");
    let tenths: Vec<u64> = percents.iter().map(|p| p / 10).collect();
    assert!(tenths.windows(2).all(|w| w[0] < w[1]), "{stderr}");
    let quiet = raidkit(&args(&["check", "--quiet"], &members, &[]));
    assert!(quiet.status.success(), "{quiet:?}");
    assert!(quiet.stderr.is_empty(), "{quiet:?}");
}
