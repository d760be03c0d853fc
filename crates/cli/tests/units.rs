//! The systemd units (`raidkit install-units`): systemd's own checker accepts them, and the
//! commands they run, run as written: the server brings up the configuration's array, the
//! monitor reports a member failed in it, and SIGTERM (the unit's stop) leaves it clean.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The ExecStart command of a unit file, split into words.
fn exec_start(unit: &str) -> Vec<String> {
    unit.lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn units_verify_and_their_commands_serve_and_monitor() {
    let dir = TempDir::new("units");
    let members = dir.members("m", 3);
    ok(&with(
        &[
            "create",
            "--level",
            "5",
            "--name",
            "md0",
            "--image-size",
            "16M",
        ],
        &members,
        &[],
    ));
    let conf = dir.path("raidkit.conf");
    let lines = ok(&with(&["scan"], &members, &[]));
    std::fs::write(&conf, lines).unwrap();
    let socket = dir.path("run/nbd.sock");
    ok(&[
        "install-units",
        "--dir",
        s(&dir.0),
        "--config",
        s(&conf),
        "--socket",
        s(&socket),
    ]);
    let serve_unit = std::fs::read_to_string(dir.path("raidkit-serve.service")).unwrap();
    let monitor_unit = std::fs::read_to_string(dir.path("raidkit-monitor.service")).unwrap();
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.path("raidkit-serve.service"))
        .arg(dir.path("raidkit-monitor.service"))
        .output()
        .expect("systemd-analyze (package systemd) runs");
    assert!(
        verify.status.success(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&verify.stderr)
    );
    // The commands as the units run them.
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let serve = exec_start(&serve_unit);
    let mut server = Command::new(&serve[0])
        .args(&serve[1..])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let control = dir.path("run/nbd.sock.ctl");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !control.exists() {
        assert!(Instant::now() < deadline, "the unit's server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let monitor = exec_start(&monitor_unit);
    let mut watcher = Command::new(&monitor[0])
        .args(&monitor[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    ok(&["fail", "--control", s(&control), "--member", s(&members[2])]);
    let mut out = BufReader::new(watcher.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(
        line.contains("Fail event on") && line.contains("m2.img"),
        "{line}"
    );
    let _ = watcher.kill();
    let _ = watcher.wait();
    // systemd's stop: SIGTERM; the array is stopped cleanly.
    // SAFETY: kill with our own child's pid and a valid signal.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    assert!(server.wait().unwrap().success());
    let detail = ok(&with(&["detail"], &members[..2], &[]));
    assert!(detail.contains("State : clean"), "{detail}");
}
