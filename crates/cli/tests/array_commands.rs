//! The array commands driven through the real binary on image files in a temporary folder:
//! refusals change nothing (no member written, no file left behind), `--size` is mdadm's
//! per-member used size (checked with `mdadm --examine`), `fail` keeps the array within its
//! redundancy, `examine` prints damaged superblocks as `mdadm --examine` does, `write` streams
//! a pipe in bounded memory, and every subcommand's `--help` documents the exit codes.
//!
//! mdadm must be installed (`apt-get install -y mdadm`; scripts/test does it).

mod common;

use common::*;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn with_members<'a>(args: &[&'a str], members: &'a [PathBuf]) -> Vec<&'a str> {
    let mut v = args.to_vec();
    v.extend(members.iter().map(|p| s(p)));
    v
}

/// `raidkit create` of image files of `image_size` at `level` with `chunk`; must succeed.
fn create(members: &[PathBuf], level: &str, chunk: &str, image_size: &str) -> String {
    ok(&with_members(
        &[
            "create",
            "--level",
            level,
            "--chunk",
            chunk,
            "--image-size",
            image_size,
        ],
        members,
    ))
}

/// FNV-1a of a file's bytes: members are compared before and after a refused command.
fn digest(path: &Path) -> u64 {
    let mut f = std::fs::File::open(path).unwrap();
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return h;
        }
        for &b in &buf[..n] {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

fn digests(paths: &[PathBuf]) -> Vec<u64> {
    paths.iter().map(|p| digest(p)).collect()
}

/// The array UUID `create --json` reports.
fn create_json(args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_str(&ok(&a)).unwrap()
}

fn mdadm_examine(path: &Path) -> (bool, String) {
    let out = Command::new("mdadm")
        .arg("--examine")
        .arg(path)
        .env("TZ", "UTC")
        .output()
        .expect("mdadm is not installed: apt-get install -y mdadm (scripts/test does it)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// "Name : value" lines of an examine report.
fn fields(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(" : ")?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// Flips the low bit of the byte at `offset` of a file.
fn flip_byte(path: &Path, offset: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0] ^= 0x01;
    f.write_all_at(&b, offset).unwrap();
}

#[test]
fn create_refuses_members_of_arrays_without_force() {
    let dir = TempDir::new("inuse");
    let a = dir.members("a", 3);
    let uuid_a = create_json(&with_members(
        &[
            "create",
            "--level",
            "5",
            "--image-size",
            "8M",
            "--chunk",
            "64K",
        ],
        &a,
    ))["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let before = digests(&a);

    // The same array's members again: refused, each named with the array's UUID.
    let (code, err) = fails(&with_members(
        &["create", "--level", "1", "--image-size", "8M"],
        &a,
    ));
    assert_eq!(code, 3, "{err}");
    for m in &a {
        assert!(
            err.contains(&format!("{}: holds an md 1.2 superblock", s(m))),
            "{err}"
        );
    }
    assert!(err.contains(&uuid_a), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(digests(&a), before, "a refused create wrote to a member");

    // One member of another array among new files: refused before any file is created.
    let fresh = dir.members("new", 2);
    let mut mixed = fresh.clone();
    mixed.push(a[1].clone());
    let (code, err) = fails(&with_members(
        &["create", "--level", "5", "--image-size", "8M"],
        &mixed,
    ));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains(s(&a[1])) && err.contains(&uuid_a), "{err}");
    assert!(
        !err.contains(s(&a[0])),
        "only the member given is named: {err}"
    );
    assert!(fresh.iter().all(|p| !p.exists()), "{:?}", dir.listing());
    assert_eq!(digests(&a), before);

    // A member whose superblock is damaged (wrong checksum) still names its array.
    let damaged = dir.path("damaged.img");
    std::fs::copy(&a[2], &damaged).unwrap();
    flip_byte(&damaged, 4096 + 192);
    let mut with_damaged = dir.members("w", 2);
    with_damaged.push(damaged.clone());
    let (code, err) = fails(&with_members(
        &["create", "--level", "5", "--image-size", "8M"],
        &with_damaged,
    ));
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("holds a damaged md 1.2 superblock") && err.contains(&uuid_a),
        "{err}"
    );
    assert_eq!(
        dir.listing().iter().filter(|n| n.starts_with('w')).count(),
        0
    );

    // With --force the members are overwritten: a new array with its own UUID.
    let forced = create_json(&with_members(
        &["create", "--level", "5", "--force", "--image-size", "8M"],
        &mixed,
    ));
    let uuid_b = forced["uuid"].as_str().unwrap();
    assert_ne!(uuid_b, uuid_a);
    let (ok_md, text) = mdadm_examine(&a[1]);
    assert!(ok_md, "{text}");
    assert!(text.contains(uuid_b), "{text}");
}

#[test]
fn refused_create_leaves_no_new_files() {
    let dir = TempDir::new("nofiles");
    // A blank file that exists: used as a member, never removed, never written on refusal.
    let blank = dir.path("blank.img");
    std::fs::File::create(&blank)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let blank_digest = digest(&blank);
    let new = dir.members("m", 3);
    let mut members = vec![blank.clone()];
    members.extend(new.iter().cloned());

    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        // Too few members for the level.
        (vec!["--level", "6", "-n", "3", "-x", "1"], 2, "at least 4"),
        // A chunk md refuses (not a multiple of 4 KiB).
        (vec!["--level", "5", "--chunk", "6K"], 2, "chunk"),
        // A RAID 10 layout with more copies than members.
        (vec!["--level", "10", "--layout", "n5"], 2, "layout"),
        // Members too small to hold the metadata and one chunk.
        (vec!["--level", "5", "--image-size", "1M"], 0, ""),
        // A used size (--size) larger than the members.
        (vec!["--level", "5", "--size", "64M"], 3, "does not fit"),
        // Counts that do not add up.
        (
            vec!["--level", "5", "-n", "3", "-x", "2"],
            2,
            "members given",
        ),
    ];
    for (flags, want_code, want_text) in cases {
        let mut args = vec!["create"];
        args.extend(&flags);
        if !flags.contains(&"--image-size") {
            args.extend(["--image-size", "8M"]);
        }
        let args = with_members(&args, &members);
        let (code, err) = fails(&args);
        if want_code != 0 {
            assert_eq!(code, want_code, "{flags:?}: {err}");
        }
        assert!(err.contains(want_text), "{flags:?}: {err}");
        assert_eq!(
            dir.listing(),
            ["blank.img"],
            "{flags:?} left files behind ({err})"
        );
        assert_eq!(digest(&blank), blank_digest, "{flags:?} wrote to a member");
    }

    // A failure after files were created (the last member's folder does not exist): the
    // files this command created are removed, the one that existed stays.
    let mut late = members.clone();
    late.push(dir.path("no-such-folder/m9.img"));
    let (code, err) = fails(&with_members(
        &["create", "--level", "6", "--image-size", "8M"],
        &late,
    ));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no-such-folder"), "{err}");
    assert_eq!(dir.listing(), ["blank.img"], "{err}");
    assert_eq!(digest(&blank), blank_digest);

    // A missing member without --image-size is a usage error naming the flag.
    let (code, err) = fails(&with_members(
        &["create", "--level", "5", "--size", "4M"],
        &members,
    ));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--image-size"), "{err}");
    assert_eq!(dir.listing(), ["blank.img"]);
}

#[test]
fn size_is_the_per_member_used_size_like_mdadm() {
    let dir = TempDir::new("size");
    let m = dir.members("m", 3);
    let v = create_json(&with_members(
        &[
            "create",
            "--level",
            "5",
            "--chunk",
            "64K",
            "--size",
            "4M",
            "--image-size",
            "16M",
        ],
        &m,
    ));
    assert_eq!(v["array_bytes"], 2 * (4 << 20), "{v}");
    assert_eq!(v["member_data_sectors"], 8192, "{v}");
    for p in &m {
        assert_eq!(std::fs::metadata(p).unwrap().len(), 16 << 20);
    }
    let (ok_md, text) = mdadm_examine(&m[0]);
    assert!(ok_md, "{text}");
    let f = fields(&text);
    let get = |k: &str| f.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("Used Dev Size"), Some("8192 sectors"), "{text}");
    assert!(
        get("Array Size").is_some_and(|v| v.starts_with("8192 KiB")),
        "{text}"
    );
    // "max" is all that fits, as in mdadm.
    let d = dir.members("d", 3);
    let v = create_json(&with_members(
        &[
            "create",
            "--level",
            "5",
            "--size",
            "max",
            "--image-size",
            "16M",
        ],
        &d,
    ));
    assert!(v["member_data_sectors"].as_u64().unwrap() > 8192, "{v}");
}

#[test]
fn fail_refuses_to_go_past_redundancy() {
    let dir = TempDir::new("fail");
    let m = dir.members("m", 3);
    create(&m, "5", "64K", "8M");
    ok(&with_members(&["fail", "--member", s(&m[0])], &m));
    let before = digests(&m);
    let (code, err) = fails(&with_members(&["fail", "--member", s(&m[1])], &m));
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(&format!("refusing to fail {}", s(&m[1]))) && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        err.lines().count(),
        1,
        "the error once, nothing else: {err}"
    );
    assert_eq!(digests(&m), before, "a refused fail wrote to a member");
    // The array still reads (degraded).
    let detail: serde_json::Value =
        serde_json::from_str(&ok(&with_members(&["detail", "--json"], &m))).unwrap();
    assert_eq!(detail["status"]["degraded"], true);
    assert_eq!(detail["status"]["failed"], false);
    // --force does it, and says the array has failed (exit 4).
    let (code, err) = fails(&with_members(
        &["fail", "--force", "--member", s(&m[1])],
        &m,
    ));
    assert_eq!(code, 4, "{err}");

    // RAID 0 can lose nothing; RAID 10 near-2 can lose one member of each mirror pair.
    let r0 = dir.members("z", 2);
    ok(&with_members(
        &["create", "--level", "0", "--image-size", "8M"],
        &r0,
    ));
    let (code, _) = fails(&with_members(&["fail", "--member", s(&r0[0])], &r0));
    assert_eq!(code, 3);
    let r10 = dir.members("t", 4);
    ok(&with_members(
        &["create", "--level", "10", "--image-size", "8M"],
        &r10,
    ));
    ok(&with_members(&["fail", "--member", s(&r10[0])], &r10));
    let (code, _) = fails(&with_members(&["fail", "--member", s(&r10[1])], &r10));
    assert_eq!(code, 3, "slot 1 mirrors slot 0");
    ok(&with_members(&["fail", "--member", s(&r10[2])], &r10));
}

#[test]
fn examine_prints_a_damaged_superblock_like_mdadm() {
    let dir = TempDir::new("examine");
    let m = dir.members("m", 3);
    create(&m, "5", "64K", "8M");
    // A copy of member 0 with one byte of the superblock's update time changed (1.2: the
    // superblock is at 4 KiB; utime at byte 192 of it): the checksum no longer matches.
    let bad = dir.path("bad.img");
    std::fs::copy(&m[0], &bad).unwrap();
    flip_byte(&bad, 4096 + 192);
    let (md_ok, md_text) = mdadm_examine(&bad);
    assert!(md_ok, "{md_text}");
    let md_checksum = md_text
        .lines()
        .find(|l| l.contains("Checksum :"))
        .unwrap_or_else(|| panic!("no Checksum line from mdadm:\n{md_text}"));
    assert!(md_checksum.contains("- expected"), "{md_text}");

    let out = raidkit(&["examine", s(&bad)]);
    let ours = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{ours}\n{err}");
    assert!(
        ours.lines().any(|l| l == md_checksum),
        "'{md_checksum}' not in:\n{ours}"
    );
    // Every field we print, mdadm prints with the same value (mdadm adds sizes in MiB/MB
    // and "(local to host ...)" after some of them).
    let md_fields = fields(&md_text);
    let our_fields = fields(&ours);
    assert!(our_fields.len() >= 15, "{ours}");
    for (k, v) in &our_fields {
        let theirs = md_fields
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("mdadm has no '{k}':\n{md_text}"));
        assert!(
            theirs.starts_with(v.as_str()),
            "{k}: ours '{v}', mdadm '{theirs}'"
        );
    }
    assert_eq!(err.lines().count(), 1, "one error line: {err}");
    assert!(err.contains("damaged") && err.contains("sb_csum"), "{err}");

    // JSON names the problem too.
    let out = raidkit(&["examine", "--json", s(&bad)]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["superblock"]["checksum_correct"], false, "{v}");

    // Errors are printed once each: a good member, a damaged one and a file with no
    // superblock give two error lines, and the good member's report is printed.
    let junk = dir.path("junk.img");
    std::fs::write(&junk, vec![0x5au8; 1 << 20]).unwrap();
    let out = raidkit(&["examine", s(&m[1]), s(&bad), s(&junk)]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let ours = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(err.lines().count(), 2, "{err}");
    assert_eq!(err.matches(s(&junk)).count(), 1, "{err}");
    assert_eq!(ours.matches("Checksum :").count(), 2, "{ours}");
    let (code, err) = fails(&["examine", s(&junk)]);
    assert_eq!(code, 3);
    assert_eq!(err.lines().count(), 1, "printed once: {err}");
}

/// Deterministic bytes for block `i` of the streamed input.
fn block(i: u64, buf: &mut [u8]) {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for c in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
    }
}

/// Runs `raidkit write --input -` with `total` bytes piped in; returns its exit code,
/// stderr and peak resident memory in KiB (from wait4, for this child alone).
// The child is reaped by wait4 rather than Child::wait, which has no resource usage.
#[allow(clippy::zombie_processes)]
fn write_from_pipe(members: &[PathBuf], offset: &str, total: u64) -> (i32, String, i64) {
    let mut args = vec!["write", "--input", "-", "--offset", offset];
    args.extend(members.iter().map(|p| s(p)));
    let mut child = Command::new(RAIDKIT)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        let mut sent = 0u64;
        let mut i = 0;
        while sent < total {
            let n = (total - sent).min(buf.len() as u64) as usize;
            block(i, &mut buf[..n]);
            if stdin.write_all(&buf[..n]).is_err() {
                break; // the writer stopped reading (refused input)
            }
            sent += n as u64;
            i += 1;
        }
    });
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain data, zeroed is a valid value; wait4 reaps only this child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t);
    feeder.join().unwrap();
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, err, usage.ru_maxrss)
}

#[test]
fn write_on_a_parity_array_reads_back_from_an_unaligned_offset() {
    // RAID 5 over 4 members with 64 KiB chunks: 192 KiB stripes, which `write` lines its
    // requests up with; the offset starts inside a stripe, and the input is not a multiple of
    // anything.
    let dir = TempDir::new("stripes");
    let m = dir.members("m", 4);
    create(&m, "5", "64K", "24M");
    let total: u64 = (40 << 20) + 3 * 512;
    let (code, err, _) = write_from_pipe(&m, "70000", total);
    assert_eq!(code, 0, "{err}");
    let out = dir.path("out.bin");
    let len = (total + 4096).to_string();
    ok(&with_members(
        &[
            "read",
            "--offset",
            "65904",
            "--length",
            &len,
            "--output",
            s(&out),
        ],
        &m,
    ));
    let back = std::fs::read(&out).unwrap();
    // 4096 bytes before the offset were never written: zeroes.
    assert!(back[..4096].iter().all(|&b| b == 0));
    let mut want = vec![0u8; 1 << 20];
    let mut at = 4096usize;
    let mut i = 0;
    while (at - 4096) < total as usize {
        let n = ((total as usize) - (at - 4096)).min(1 << 20);
        block(i, &mut want[..n]);
        assert!(back[at..at + n] == want[..n], "block {i} differs");
        at += n;
        i += 1;
    }
    // Parity agrees with the data everywhere.
    ok(&with_members(&["check"], &m));
}

#[test]
fn write_streams_a_pipe_in_bounded_memory() {
    let dir = TempDir::new("stream");
    let m = dir.members("m", 2);
    create(&m, "0", "64K", "200M");
    let total: u64 = 320 << 20;
    let (code, err, peak_kib) = write_from_pipe(&m, "4096", total);
    assert_eq!(code, 0, "{err}");
    println!(
        "raidkit write of {} MiB from a pipe: peak RSS {} MiB",
        total >> 20,
        peak_kib >> 10
    );
    // Reading the whole input first would need more than 320 MiB; streaming needs the 4 MiB
    // block and the engine's own bounded buffers.
    assert!(
        peak_kib < 160 << 10,
        "peak RSS {peak_kib} KiB for a {total}-byte input: not streamed"
    );
    // What was written reads back.
    let out = dir.path("out.bin");
    let len = total.to_string();
    ok(&with_members(
        &[
            "read",
            "--offset",
            "4096",
            "--length",
            &len,
            "--output",
            s(&out),
        ],
        &m,
    ));
    let mut f = std::fs::File::open(&out).unwrap();
    let mut want = vec![0u8; 1 << 20];
    let mut got = vec![0u8; 1 << 20];
    for i in 0..(total >> 20) {
        block(i, &mut want);
        f.read_exact(&mut got).unwrap();
        assert!(got == want, "block {i} differs");
    }

    // A regular file that does not fit is refused before anything is written.
    let before = digests(&m);
    let big = dir.path("big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(500 << 20)
        .unwrap();
    let (code, err) = fails(&with_members(&["write", "--input", s(&big)], &m));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nothing was written"), "{err}");
    assert_eq!(digests(&m), before);

    // A pipe that turns out too long stops at the end of the array and says how much it
    // wrote.
    let array_bytes: u64 = {
        let v: serde_json::Value =
            serde_json::from_str(&ok(&with_members(&["detail", "--json"], &m))).unwrap();
        v["status"]["array_bytes"].as_u64().unwrap()
    };
    let offset = array_bytes - (6 << 20);
    let (code, err, _) = write_from_pipe(&m, &offset.to_string(), 10 << 20);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the first 4194304 bytes were written"),
        "{err}"
    );
}

/// Every subcommand (and bench's) shows the exit codes in its --help.
#[test]
fn every_subcommand_help_shows_exit_codes() {
    fn subcommands(help: &str) -> Vec<String> {
        help.lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .filter(|c| c != "help")
            .collect()
    }
    let top = ok(&["--help"]);
    assert!(top.contains("Exit codes:"), "{top}");
    let mut paths: Vec<Vec<String>> = subcommands(&top).into_iter().map(|c| vec![c]).collect();
    assert!(paths.len() >= 15, "{top}");
    let mut checked = 0;
    while let Some(path) = paths.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = ok(&args);
        assert!(help.contains("Exit codes:"), "`raidkit {path:?}`:\n{help}");
        for sub in subcommands(&help) {
            let mut p = path.clone();
            p.push(sub);
            paths.push(p);
        }
        checked += 1;
    }
    assert!(checked >= 17, "checked only {checked} commands");
}
