//! Safety on a shared machine, through the real binary: one process owns a member at a time
//! (every command that opens members is refused, exit code 3, while a server or another
//! command has them, and nothing is written), read-only users share.

mod common;

use common::*;
use std::path::PathBuf;

/// A RAID 5 of four 8 MiB image files holding `data` at offset 0.
fn raid5(dir: &TempDir, data: &[u8]) -> Vec<PathBuf> {
    let m = dir.members("m", 4);
    ok(&with(
        &[
            "create",
            "--level",
            "5",
            "--chunk",
            "64K",
            "--image-size",
            "8M",
        ],
        &m,
        &[],
    ));
    let input = dir.0.join("data.bin");
    std::fs::write(&input, data).unwrap();
    ok(&with(&["write", "--input", s(&input)], &m, &[]));
    m
}

fn read_back(members: &[PathBuf], len: usize) -> Vec<u8> {
    let len = len.to_string();
    let out = raidkit(&with(&["read", "--length", &len], members, &[]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn members_of_a_served_array_are_refused_to_every_other_command() {
    let dir = TempDir::new("claims");
    let data = pattern(3 << 20, 5);
    let m = raid5(&dir, &data);
    let spare = dir.0.join("spare.img");
    let mut server = Server::start(&dir.0, "md0", &with(&["--name", "md0"], &m, &[]));
    let pid = server.pid().to_string();
    let before = contents(&m);
    let ctl = s(&server.control).to_string();
    let input = dir.0.join("data.bin");
    let m013 = vec![m[0].clone(), m[1].clone(), m[3].clone()];
    let second = dir.0.join("second.sock");
    let refused: Vec<Vec<&str>> = vec![
        // The probes that lost data or were undone by the server.
        with(&["add", "--member", s(&m[2])], &m013, &[]),
        with(&["serve", "--socket", s(&second)], &m, &[]),
        with(
            &["create", "--force", "--level", "5", "--chunk", "64K"],
            &m,
            &[],
        ),
        with(&["fail", "--member", s(&m[2])], &m, &[]),
        with(&["stop"], &m, &[]),
        // Every other command that opens members.
        with(&["write", "--input", s(&input)], &m, &[]),
        with(&["remove", "--member", s(&m[2])], &m, &[]),
        with(
            &["add", "--member", s(&spare), "--image-size", "8M"],
            &m,
            &[],
        ),
        with(
            &["replace", "--member", s(&m[1]), "--with", s(&spare)],
            &m,
            &["--image-size", "8M"],
        ),
        with(&["check"], &m, &[]),
        with(&["repair"], &m, &[]),
        with(&["rebuild"], &m, &[]),
        with(&["patrol"], &m, &[]),
        // Read-only commands take a shared claim: refused beside a writer.
        with(&["detail"], &m, &[]),
        with(&["examine"], &m[..1], &[]),
        with(&["read", "--length", "4096"], &m, &[]),
    ];
    for args in &refused {
        let (code, err) = fails(args);
        assert_eq!(code, 3, "raidkit {args:?}: exit {code}: {err}");
        assert!(
            err.contains("in use by process") && err.contains(&pid),
            "raidkit {args:?} does not name the server's pid {pid}: {err}"
        );
        assert!(
            err.contains(&format!("--control {ctl}")),
            "raidkit {args:?} does not say how to reach the served array: {err}"
        );
        assert!(
            m.iter().any(|p| err.contains(s(p))),
            "raidkit {args:?} names no member: {err}"
        );
        assert_unchanged(&m, &before, &format!("raidkit {args:?}"));
    }
    assert!(
        !spare.exists(),
        "a refused add or replace created the new member"
    );
    // The server still owns a whole array, which then stops clean with the data intact.
    let detail = ok(&["detail", "--control", &ctl, "--json"]);
    assert!(detail.contains("\"degraded\": false"), "{detail}");
    let (code, err) = server.stop();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(read_back(&m, data.len()), data);
}

#[test]
fn read_only_users_share_members_with_a_read_only_server() {
    let dir = TempDir::new("shared");
    let data = pattern(1 << 20, 9);
    let m = raid5(&dir, &data);
    let before = contents(&m);
    let mut server = Server::start(&dir.0, "ro", &with(&["--read-only"], &m, &[]));
    // detail, examine and read work beside it, and so does a second read-only server.
    ok(&with(&["detail"], &m, &[]));
    ok(&with(&["examine"], &m, &[]));
    assert_eq!(read_back(&m, data.len()), data);
    let mut second = Server::start(&dir.0, "ro2", &with(&["--read-only"], &m, &[]));
    // Writers are still refused.
    let input = dir.0.join("data.bin");
    let (code, err) = fails(&with(&["write", "--input", s(&input)], &m, &[]));
    assert_eq!(code, 3, "{err}");
    let rw = dir.0.join("rw.sock");
    let (code, err) = fails(&with(&["serve", "--socket", s(&rw)], &m, &[]));
    assert_eq!(code, 3, "{err}");
    assert_eq!(second.stop().0, Some(0));
    assert_eq!(server.stop().0, Some(0));
    assert_unchanged(&m, &before, "read-only users");
    // Once every server is gone, the members are free again.
    ok(&with(&["stop"], &m, &[]));
}

#[test]
fn directories_and_character_devices_are_refused_input() {
    let dir = TempDir::new("notdisk");
    let m = dir.members("m", 3);
    for bad in [s(&dir.0), "/dev/null"] {
        let (code, err) = fails(&["examine", bad]);
        assert_eq!(code, 3, "examine {bad}: {err}");
        let (code, err) = fails(&with(
            &["create", "--level", "1", "--image-size", "4M"],
            &m[..2],
            &[bad],
        ));
        assert_eq!(code, 3, "create with {bad}: {err}");
        assert!(!m[0].exists(), "a refused create left files behind");
    }
}

#[test]
fn a_forgotten_member_is_not_failed_for_good() {
    let dir = TempDir::new("forgotten");
    let data = pattern(2 << 20, 21);
    let m = raid5(&dir, &data);
    let before = contents(&m);
    let given = vec![m[0].clone(), m[1].clone(), m[3].clone()];
    let input = dir.0.join("data.bin");
    let new = dir.0.join("new.img");
    let other = dir.0.join("other.img");
    let writers: Vec<Vec<&str>> = vec![
        with(&["write", "--input", s(&input)], &given, &[]),
        with(&["patrol"], &given, &[]),
        with(&["rebuild"], &given, &[]),
        with(&["repair"], &given, &[]),
        with(&["stop"], &given, &[]),
        // --force: past the check that the array can lose it, to the assembly.
        with(&["fail", "--force", "--member", s(&m[0])], &given, &[]),
        with(&["remove", "--member", s(&m[0])], &given, &[]),
        with(
            &["add", "--member", s(&new), "--image-size", "8M"],
            &given,
            &[],
        ),
        with(
            &["replace", "--member", s(&m[0]), "--with", s(&other)],
            &given,
            &["--image-size", "8M"],
        ),
    ];
    for args in &writers {
        let (code, err) = fails(args);
        assert_eq!(code, 4, "raidkit {args:?}: {err}");
        assert!(
            err.contains("slot 2 (device 2)") && err.contains("--run"),
            "raidkit {args:?} does not say what is missing and how to insist: {err}"
        );
        assert!(
            err.contains(&format!("{} holds it", s(&m[2]))),
            "raidkit {args:?} does not point at the forgotten file: {err}"
        );
        assert_unchanged(&m, &before, &format!("raidkit {args:?}"));
        assert!(
            !new.exists() && !other.exists(),
            "raidkit {args:?} left a new member file"
        );
    }
    // A new member that is no disk is refused before anything else.
    let (code, err) = fails(&with(&["add", "--member", "/dev/null"], &given, &[]));
    assert_eq!(code, 3, "{err}");
    assert_unchanged(&m, &before, "add --member /dev/null");
    // Read-only commands run degraded and change nothing.
    assert_eq!(read_back(&given, data.len()), data);
    ok(&with(&["detail"], &given, &[]));
    // check needs every member (it compares parity with data), and says so.
    let (_, err) = fails(&with(&["check"], &given, &[]));
    assert!(err.contains("needs every member in sync"), "{err}");
    assert_unchanged(&m, &before, "read-only commands on three of four members");
    // Nothing was lost: all four are whole.
    let detail = ok(&with(&["detail", "--json"], &m, &[]));
    assert!(detail.contains("\"degraded\": false"), "{detail}");
    // With --run the user insists: the missing member is recorded faulty, as mdadm --run does.
    ok(&with(
        &["write", "--run", "--input", s(&input)],
        &given,
        &[],
    ));
    let detail = ok(&with(&["detail", "--json"], &m, &[]));
    assert!(detail.contains("\"degraded\": true"), "{detail}");
    assert_eq!(read_back(&m, data.len()), data);
}

/// Bytes of every member before and after each refused command (and every member's file
/// set): a refusal writes nothing, on a RAID 5 with its partial parity log and on a RAID 6
/// with a write-intent bitmap.
#[test]
fn refused_commands_write_nothing() {
    for (level, extra) in [("5", None), ("6", Some("--bitmap=internal"))] {
        let dir = TempDir::new(&format!("refusals{level}"));
        let m = dir.members("m", 5);
        let mut args = vec![
            "create",
            "--level",
            level,
            "--chunk",
            "64K",
            "--image-size",
            "8M",
        ];
        args.extend(extra);
        ok(&with(&args, &m, &[]));
        let data = pattern(1 << 20, 3);
        let input = dir.0.join("data.bin");
        std::fs::write(&input, &data).unwrap();
        ok(&with(&["write", "--input", s(&input)], &m, &[]));
        // A member of another array, a member too small, a file too big for the array.
        let foreign = dir.members("f", 2);
        ok(&with(
            &["create", "--level", "1", "--image-size", "8M"],
            &foreign,
            &[],
        ));
        let small = dir.0.join("small.img");
        std::fs::write(&small, vec![0u8; 1 << 20]).unwrap();
        let huge = dir.0.join("huge.bin");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let before = contents(&m);
        let foreign_before = contents(&foreign);
        let refusals: Vec<(Vec<&str>, i32)> = vec![
            (with(&["add", "--member", s(&foreign[0])], &m, &[]), 3),
            (with(&["add", "--member", s(&small)], &m, &[]), 3),
            (
                with(
                    &["replace", "--member", s(&m[1]), "--with", s(&small)],
                    &m,
                    &[],
                ),
                3,
            ),
            (with(&["remove", "--member", s(&m[1])], &m, &[]), 2),
            (with(&["write", "--input", s(&huge)], &m, &[]), 2),
            (
                with(&["write", "--offset", "1G", "--input", s(&input)], &m, &[]),
                2,
            ),
            (with(&["check", "--from", "999999999"], &m, &[]), 2),
        ];
        for (args, want) in &refusals {
            let (code, err) = fails(args);
            assert_eq!(code, *want, "level {level}: raidkit {args:?}: {err}");
            assert_unchanged(&m, &before, &format!("level {level}: raidkit {args:?}"));
            assert_unchanged(&foreign, &foreign_before, &format!("raidkit {args:?}"));
            assert_eq!(std::fs::read(&small).unwrap(), vec![0u8; 1 << 20]);
        }
        // Commands with nothing to do write nothing either.
        ok(&with(&["rebuild"], &m, &[]));
        ok(&with(&["check"], &m, &[]));
        assert_unchanged(&m, &before, &format!("level {level}: rebuild and check"));
        assert_eq!(read_back(&m, data.len()), data);
    }
}

#[test]
fn force_on_a_stale_member_does_what_it_says() {
    let dir = TempDir::new("stale");
    let m = raid5(&dir, &pattern(1 << 20, 1));
    let old3 = std::fs::read(&m[3]).unwrap();
    let data = pattern(1 << 20, 2);
    let input = dir.0.join("new.bin");
    std::fs::write(&input, &data).unwrap();
    ok(&with(&["write", "--input", s(&input)], &m, &[]));
    ok(&with(&["write", "--input", s(&input)], &m, &[]));
    std::fs::write(&m[3], &old3).unwrap();
    let (code, err) = fails(&with(&["detail"], &m, &[]));
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("--force") && err.contains("starts the array without it"),
        "{err}"
    );
    // --force: the array can run without the stale member, so it is left out, and says so.
    let out = raidkit(&with(&["detail", "--force"], &m, &[]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("{}: not used: stale", s(&m[3])))
            && err.contains("the array runs without it"),
        "{err}"
    );
    assert_eq!(read_back(&m[..3], data.len()), data);
}

#[test]
fn remove_after_an_offline_fail_removes() {
    let dir = TempDir::new("remove");
    let m = raid5(&dir, &pattern(1 << 20, 4));
    ok(&with(&["fail", "--member", s(&m[2])], &m, &[]));
    let out = ok(&with(&["remove", "--member", s(&m[2])], &m, &[]));
    assert!(out.contains("removed"), "{out}");
    // An active member is still not removed.
    let (code, err) = fails(&with(&["remove", "--member", s(&m[1])], &m, &[]));
    assert_eq!(code, 2, "{err}");
}

/// Remounts the tmpfs at `path` with a new size.
fn resize(fs: &SmallFs, bytes: u64) {
    let st = std::process::Command::new("mount")
        .args(["-o"])
        .arg(format!("remount,size={bytes}"))
        .arg(fs.path())
        .status()
        .unwrap();
    assert!(st.success(), "remount failed");
}

#[test]
fn a_full_filesystem_fails_the_write_not_the_members() {
    let Some(fs) = SmallFs::mount("fullfs", 12 << 20) else {
        return;
    };
    let m: Vec<PathBuf> = (0..4)
        .map(|i| fs.path().join(format!("m{i}.img")))
        .collect();
    let out = raidkit(&with(
        &[
            "create",
            "--level",
            "5",
            "--chunk",
            "64K",
            "--image-size",
            "8M",
        ],
        &m,
        &[],
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("could outgrow") && err.contains(s(fs.path())),
        "create does not warn that sparse members may not fit: {err}"
    );
    let dir = TempDir::new("fullfs-input");
    let data = pattern(16 << 20, 8);
    let input = dir.0.join("data.bin");
    std::fs::write(&input, &data).unwrap();
    let (code, err) = fails(&with(&["write", "--input", s(&input)], &m, &[]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no space left on its filesystem") && err.contains(s(fs.path())),
        "the error does not say the filesystem is full: {err}"
    );
    assert!(
        !err.contains("array failed") && !err.contains("faulty"),
        "{err}"
    );
    // Not one member was failed, and parity agrees with data where the write got to.
    let detail = ok(&with(&["detail", "--json"], &m, &[]));
    assert!(
        detail.contains("\"degraded\": false") && !detail.contains("\"faulty\""),
        "{detail}"
    );
    ok(&with(&["check"], &m, &[]));
    // Writing works again once there is room.
    resize(&fs, 64 << 20);
    ok(&with(&["write", "--input", s(&input)], &m, &[]));
    assert_eq!(read_back(&m, data.len()), data);
    ok(&with(&["check"], &m, &[]));
}

#[test]
fn a_served_array_on_a_full_filesystem_answers_enospc_and_stays_up() {
    let Some(fs) = SmallFs::mount("fullserve", 12 << 20) else {
        return;
    };
    let m: Vec<PathBuf> = (0..4)
        .map(|i| fs.path().join(format!("m{i}.img")))
        .collect();
    ok(&with(
        &[
            "create",
            "--level",
            "5",
            "--chunk",
            "64K",
            "--image-size",
            "8M",
        ],
        &m,
        &[],
    ));
    let dir = TempDir::new("fullserve-sock");
    let mut server = Server::start(&dir.0, "md0", &with(&["--name", "md0"], &m, &[]));
    let qemu_io = |cmd: &str| {
        std::process::Command::new("qemu-io")
            .arg("--image-opts")
            .arg(format!(
                "driver=raw,file.driver=nbd,file.server.type=unix,file.server.path={},file.export=md0",
                s(&server.socket)
            ))
            .args(["-c", cmd])
            .output()
            .expect("qemu-io runs (Debian package qemu-utils)")
    };
    // 1 MiB fits; 16 MiB does not.
    let out = qemu_io("write -P 0x61 0 1M");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = qemu_io("write -P 0x62 1M 16M");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("No space left on device"),
        "the client was not told ENOSPC: {text}"
    );
    // The array is up and whole, and what was written reads back.
    let detail = ok(&["detail", "--control", s(&server.control), "--json"]);
    assert!(
        detail.contains("\"degraded\": false") && detail.contains("\"failed\": false"),
        "{detail}"
    );
    let out = qemu_io("read -P 0x61 0 1M");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Room again: the same write goes through.
    resize(&fs, 64 << 20);
    let out = qemu_io("write -P 0x62 1M 16M");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = qemu_io("read -P 0x62 1M 16M");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("no space left on its filesystem") && log.contains("writes go through again"),
        "the server did not log the full filesystem and its end: {log}"
    );
    ok(&with(&["check"], &m, &[]));
}

#[test]
fn serve_logs_every_state_change_with_a_timestamp() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("serve-log");
    let m = raid5(&dir, &pattern(1 << 20, 12));
    let spare = dir.0.join("spare.img");
    let mut server = Server::start(
        &dir.0,
        "md0",
        &with(
            &[
                "--name",
                "md0",
                "--log-format",
                "json",
                "--max-connections",
                "1",
                "--spare",
                s(&spare),
                "--spare-size",
                "8M",
            ],
            &m,
            &[],
        ),
    );
    // The socket's mode is set, not left to the umask.
    let mode = std::fs::metadata(&server.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o660, "socket mode {mode:o}");
    // detail --control names where clients connect.
    let detail = ok(&["detail", "--control", s(&server.control)]);
    assert!(
        detail.contains(&format!("Served : md0 on {}", s(&server.socket))),
        "{detail}"
    );
    // One client holds the only slot (it never negotiates); the next is refused.
    let holder = std::os::unix::net::UnixStream::connect(&server.socket).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let refused = std::os::unix::net::UnixStream::connect(&server.socket).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    drop((holder, refused));
    // A member fails; the global spare takes its slot and is rebuilt.
    ok(&[
        "fail",
        "--control",
        s(&server.control),
        "--member",
        s(&m[2]),
    ]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let d = ok(&["detail", "--control", s(&server.control), "--json"]);
        if d.contains("\"degraded\": false") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never rebuilt: {d}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "{log}");
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for l in &lines {
        let time = l["time"].as_str().unwrap_or_default();
        assert!(
            time.len() == 24 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
            "no RFC 3339 time: {l}"
        );
        assert!(l["message"].is_string() && l["level"].is_string(), "{l}");
    }
    let find = |event: &str| -> Vec<&serde_json::Value> {
        lines.iter().filter(|l| l["event"] == event).collect()
    };
    let refusal = find("connection-refused");
    assert!(
        refusal.iter().any(|l| l["reason"]
            .as_str()
            .is_some_and(|r| r.contains("connections"))),
        "refused connection not logged with its reason: {log}"
    );
    let faulty = find("member-faulty");
    assert!(
        faulty
            .iter()
            .any(|l| l["member"].as_str() == Some(s(&m[2])) && l["level"] == "warning"),
        "member failure not logged: {log}"
    );
    assert!(!find("array-degraded").is_empty(), "{log}");
    assert!(
        find("spare-taken").len() >= 2,
        "the spare taken is logged by the pool and by the array: {log}"
    );
    assert!(
        find("task-started").iter().any(|l| l["task"] == "rebuild"),
        "{log}"
    );
    assert!(
        find("task-finished")
            .iter()
            .any(|l| l["task"] == "rebuild" && l["completed"] == true),
        "{log}"
    );
    assert!(!find("rebuilt").is_empty(), "{log}");
    assert!(!find("array-stopped").is_empty(), "{log}");
}

#[test]
fn create_over_a_filesystem_or_partition_table_needs_force() {
    let dir = TempDir::new("foreign");
    let m = dir.members("m", 3);
    for p in &m {
        std::fs::File::create(p).unwrap().set_len(16 << 20).unwrap();
    }
    // A real ext4 (mkfs.ext4), a real swap area (mkswap) and an MBR with one partition.
    let mkfs = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&m[0])
        .status()
        .expect("mkfs.ext4 runs (e2fsprogs)");
    assert!(mkfs.success());
    let mkswap = std::process::Command::new("mkswap")
        .arg(&m[1])
        .output()
        .expect("mkswap runs (util-linux)");
    assert!(mkswap.status.success());
    let mut mbr = vec![0u8; 512];
    mbr[446 + 4] = 0x83;
    mbr[446 + 8] = 0x08;
    mbr[446 + 12] = 0x00;
    mbr[446 + 13] = 0x40;
    mbr[510] = 0x55;
    mbr[511] = 0xaa;
    {
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&m[2])
            .unwrap()
            .write_all_at(&mbr, 0)
            .unwrap();
    }
    let before = contents(&m);
    let (code, err) = fails(&with(
        &["create", "--level", "5", "--chunk", "64K"],
        &m,
        &[],
    ));
    assert_eq!(code, 3, "{err}");
    for (p, what) in m.iter().zip([
        "an ext2/ext3/ext4 filesystem",
        "a swap area",
        "an MBR partition table",
    ]) {
        assert!(
            err.contains(&format!("{}: holds {what}", s(p))),
            "create does not name {what} on {}: {err}",
            s(p)
        );
    }
    assert_unchanged(&m, &before, "refused create");
    let out = raidkit(&with(
        &["create", "--force", "--level", "5", "--chunk", "64K"],
        &m,
        &[],
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("--force: overwriting what"), "{err}");
}

#[test]
fn a_closed_output_pipe_ends_the_command_quietly() {
    let dir = TempDir::new("pipe");
    let m = raid5(&dir, &pattern(1 << 20, 6));
    // A pipe whose reader is gone before the command writes a byte.
    let mut fds = [0; 2];
    // SAFETY: pipe fills two descriptors; the read end is closed at once, the write end is
    // handed to the child.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    unsafe { libc::close(fds[0]) };
    use std::os::unix::io::FromRawFd;
    let stdout = unsafe { std::process::Stdio::from_raw_fd(fds[1]) };
    let out = std::process::Command::new(RAIDKIT)
        .args(with(&["detail", "--json"], &m, &[]))
        .stdout(stdout)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.is_empty(), "{err}");
    assert_eq!(out.status.code(), Some(141));
}

#[test]
fn serving_beyond_loopback_without_tls_is_warned_about() {
    let dir = TempDir::new("bind");
    let m = raid5(&dir, &pattern(1 << 20, 13));
    let ctl = dir.path("c.ctl");
    let mut child = std::process::Command::new(RAIDKIT)
        .args(["serve", "--port", "0", "--bind", "0.0.0.0", "--control"])
        .arg(&ctl)
        .args(&m)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ctl.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: kill with our child's pid and a valid signal.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{err}");
    assert!(
        err.contains("warning: listening on 0.0.0.0 without --tls require"),
        "{err}"
    );
    // Bad TLS flags are refused before anything is opened.
    let (code, err) = fails(&with(
        &["serve", "--port", "0", "--tls", "require"],
        &m,
        &[],
    ));
    assert_eq!(code, 2, "{err}");
    let missing = dir.path("missing.pem");
    let (code, err) = fails(&with(
        &[
            "serve",
            "--port",
            "0",
            "--tls-cert",
            s(&missing),
            "--tls-key",
            s(&missing),
        ],
        &m,
        &[],
    ));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("missing.pem"), "{err}");
}
