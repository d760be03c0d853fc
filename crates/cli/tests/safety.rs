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
