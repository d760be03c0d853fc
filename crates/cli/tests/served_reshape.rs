//! Online reshapes through the control socket (`raidkit grow --control`): a served RAID 5
//! grows from 4 to 5 members while a real NBD client (nbdcopy) writes to it, and every byte
//! reads back; the array is consistent afterwards (md's check, offline); a server stopped
//! mid-reshape leaves it recorded and goes on with it when it serves the array again; a
//! reshape the engine refuses leaves the array served as it was; a served RAID 5 shrinks to
//! fewer members once given the smaller size.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

fn nbd(socket: &std::path::Path) -> String {
    format!("nbd+unix:///md0?socket={}", socket.display())
}

fn readback(dir: &TempDir, socket: &std::path::Path, len: usize) -> Vec<u8> {
    let back = dir.path("back.bin");
    let _ = std::fs::remove_file(&back);
    let ok = Command::new("nbdcopy")
        .args([&nbd(socket), s(&back)])
        .status()
        .expect("nbdcopy (libnbd-bin) runs")
        .success();
    assert!(ok);
    let mut got = std::fs::read(&back).unwrap();
    got.truncate(len);
    got
}

fn raid5(dir: &TempDir, policy: &str) -> Vec<std::path::PathBuf> {
    raid5_with(dir, policy, &[])
}

/// A RAID 5 of four 64 MiB members with 64 KiB chunks and `policy`, `more` create options.
fn raid5_with(dir: &TempDir, policy: &str, more: &[&str]) -> Vec<std::path::PathBuf> {
    let members = dir.members("m", 4);
    let mut args = vec![
        "create",
        "--level",
        "5",
        "--chunk",
        "64K",
        "--consistency-policy",
        policy,
        "--image-size",
        "64M",
    ];
    args.extend_from_slice(more);
    ok(&with(&args, &members, &[]));
    members
}

fn detail_json(ctl: &str) -> serde_json::Value {
    serde_json::from_str(&ok(&["detail", "--control", ctl, "--json"])).unwrap()
}

#[test]
fn a_served_raid5_grows_online_while_a_client_writes() {
    let dir = TempDir::new("served-reshape");
    let members = raid5(&dir, "resync");
    let mut args = vec!["--name", "md0"];
    args.extend(members.iter().map(|p| s(p)));
    let mut server = Server::start(&dir.0, "nbd", &args);
    let ctl = s(&server.control).to_string();
    let spare = dir.path("m4.img");
    ok(&[
        "add",
        "--control",
        &ctl,
        "--member",
        s(&spare),
        "--image-size",
        "64M",
    ]);
    let data = pattern(120 << 20, 7);
    let input = dir.path("data.bin");
    std::fs::write(&input, &data).unwrap();
    let mut writer = Command::new("nbdcopy")
        .args([s(&input), &nbd(&server.socket)])
        .spawn()
        .expect("nbdcopy (libnbd-bin) runs");
    std::thread::sleep(Duration::from_millis(100));
    let out = ok(&["grow", "--control", &ctl, "--raid-devices", "5", "--wait"]);
    assert!(out.contains("reshaped online"), "{out}");
    assert!(writer.wait().unwrap().success());
    let d = detail_json(&ctl);
    assert_eq!(d["status"]["raid_disks"], 5, "{d}");
    assert!(
        readback(&dir, &server.socket, data.len()) == data,
        "the client's data"
    );
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("online reshape: 4 to 5 members"), "{log}");
    // md's check, offline, on the members as the server left them.
    let mut all = members.clone();
    all.push(spare);
    let out = ok(&with(&["check"], &all, &[]));
    assert!(
        out.contains("0 mismatch") || out.contains("no mismatch"),
        "{out}"
    );
}

#[test]
fn a_server_stopped_mid_reshape_goes_on_with_it_when_it_serves_again() {
    let dir = TempDir::new("served-reshape-resume");
    let members = raid5(&dir, "resync");
    let data = pattern(100 << 20, 9);
    let input = dir.path("data.bin");
    std::fs::write(&input, &data).unwrap();
    ok(&with(&["write", "--input", s(&input)], &members, &[]));
    let spare = dir.path("m4.img");
    let mut all = members.clone();
    all.push(spare.clone());
    // Slow members, so the reshape is mid-way when the server is told to stop.
    let slow: Vec<String> = members
        .iter()
        .map(|m| format!("{}=delay=1ms", m.display()))
        .collect();
    let start = |tag: &str, with_spare: bool| {
        let mut args = vec!["--name", "md0"];
        for sl in &slow {
            args.extend(["--inject", sl.as_str()]);
        }
        let list = if with_spare { &all } else { &members };
        args.extend(list.iter().map(|p| s(p)));
        Server::start(&dir.0, tag, &args)
    };
    let mut server = start("one", false);
    let ctl = s(&server.control).to_string();
    ok(&[
        "add",
        "--control",
        &ctl,
        "--member",
        s(&spare),
        "--image-size",
        "64M",
    ]);
    // Capped, so that it is surely mid-way when the server is told to stop.
    ok(&["task", "--control", &ctl, "rates", "--max-speed", "20"]);
    ok(&["grow", "--control", &ctl, "--raid-devices", "5"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let d = detail_json(&ctl);
        let pct = d["reshape"]["percent"].as_f64().unwrap_or(100.0);
        if pct > 5.0 {
            assert!(pct < 100.0, "{d}");
            break;
        }
        assert!(Instant::now() < deadline, "{d}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("reshape is recorded"), "{log}");
    // Served again: it goes on, and the data is whole.
    let server = start("two", true);
    let ctl = s(&server.control).to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let d = detail_json(&ctl);
        if d["reshape"].is_null() {
            assert_eq!(d["status"]["raid_disks"], 5, "{d}");
            break;
        }
        assert!(d["reshape"]["error"].is_null(), "{d}");
        assert!(Instant::now() < deadline, "{d}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(readback(&dir, &server.socket, data.len()) == data);
}

#[test]
fn a_refused_online_reshape_leaves_the_array_served() {
    let dir = TempDir::new("served-reshape-refused");
    // The partial parity log: md refuses reshapes with a write log, so does raidkit.
    let members = raid5(&dir, "ppl");
    let mut args = vec!["--name", "md0"];
    args.extend(members.iter().map(|p| s(p)));
    let server = Server::start(&dir.0, "nbd", &args);
    let ctl = s(&server.control).to_string();
    let (code, err) = fails(&["grow", "--control", &ctl, "--chunk", "128K"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("ppl"), "{err}");
    let d = detail_json(&ctl);
    assert!(
        d["reshape"].is_null() && d["status"]["raid_disks"] == 4,
        "{d}"
    );
    // Still served: a write and a read go through.
    let data = pattern(1 << 20, 3);
    let input = dir.path("one.bin");
    std::fs::write(&input, &data).unwrap();
    assert!(Command::new("nbdcopy")
        .args([s(&input), &nbd(&server.socket)])
        .status()
        .unwrap()
        .success());
    assert!(readback(&dir, &server.socket, data.len()) == data);
}

/// A served RAID 5 of 4 shrinks to 3 members online (md's backward reshape): refused
/// without `--array-size`, then given it, the reshape runs to its end while the array is
/// served; what lies below the new size reads back through NBD, the array is RAID 5 over 3
/// with the fourth member a spare.
#[test]
fn a_served_raid5_shrinks_online_once_given_the_smaller_size() {
    let dir = TempDir::new("served-reshape-shrink");
    // Room behind the data on each member: a shrink moves the data offset up.
    let members = raid5_with(&dir, "resync", &["--size", "60M"]);
    let mut args = vec!["--name", "md0"];
    args.extend(members.iter().map(|p| s(p)));
    let server = Server::start(&dir.0, "nbd", &args);
    let ctl = s(&server.control).to_string();
    let (code, err) = fails(&["grow", "--control", &ctl, "--raid-devices", "3"]);
    assert_eq!(code, 3, "{err}");
    let d = detail_json(&ctl);
    assert!(
        d["reshape"].is_null() && d["status"]["raid_disks"] == 4,
        "{d}"
    );
    // Two data members of 60 MiB: 100 MiB is below the new size.
    let keep = 100usize << 20;
    let data = pattern(keep, 9);
    let input = dir.path("data.bin");
    std::fs::write(&input, &data).unwrap();
    assert!(Command::new("nbdcopy")
        .args([s(&input), &nbd(&server.socket)])
        .status()
        .unwrap()
        .success());
    let out = ok(&[
        "grow",
        "--control",
        &ctl,
        "--raid-devices",
        "3",
        "--array-size",
        &format!("{}K", keep >> 10),
        "--wait",
    ]);
    assert!(out.contains("reshaped online"), "{out}");
    let d = detail_json(&ctl);
    assert!(d["reshape"].is_null(), "{d}");
    assert_eq!(d["status"]["raid_disks"], 3, "{d}");
    assert!(
        d["status"]["members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "spare"),
        "{d}"
    );
    assert!(readback(&dir, &server.socket, data.len()) == data);
}
