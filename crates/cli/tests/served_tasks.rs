//! Maintenance of a served array through its control socket (`raidkit task`), while a real
//! NBD client (nbdcopy) writes to it: check, repair and patrol run to completion and find
//! nothing wrong, a slowed check is stopped part way, the rates change, and the client's data
//! reads back whole.

mod common;

use common::*;
use std::process::Command;

fn nbd(socket: &std::path::Path) -> String {
    format!("nbd+unix:///md0?socket={}", socket.display())
}

#[test]
fn check_repair_patrol_and_stop_on_a_served_array_while_a_client_writes() {
    let dir = TempDir::new("served-tasks");
    let members = dir.members("m", 4);
    ok(&with(
        &["create", "--level", "5", "--image-size", "64M"],
        &members,
        &[],
    ));
    let mut args = vec!["--name", "md0"];
    args.extend(members.iter().map(|p| s(p)));
    let server = Server::start(&dir.0, "nbd", &args);
    let ctl = s(&server.control).to_string();
    let data = pattern(48 << 20, 21);
    let input = dir.path("data.bin");
    std::fs::write(&input, &data).unwrap();
    let uri = nbd(&server.socket);
    for task in ["check", "repair", "patrol"] {
        // The client writes while the task runs.
        let mut writer = Command::new("nbdcopy")
            .args([s(&input), &uri])
            .spawn()
            .expect("nbdcopy (libnbd-bin) runs");
        let out = ok(&["task", "--control", &ctl, "start", task, "--wait"]);
        assert!(
            out.contains(&format!("{task} completed")) && out.contains(" 0 sectors mismatched"),
            "{task}: {out}"
        );
        assert!(writer.wait().unwrap().success());
    }
    // A check slowed to 1 MB/s is stopped part way.
    let out = ok(&[
        "task",
        "--control",
        &ctl,
        "rates",
        "--check",
        "20",
        "--max-speed",
        "1",
    ]);
    assert!(
        out.contains("check 20%") && out.contains("cap 1.0 MB/s"),
        "{out}"
    );
    ok(&["task", "--control", &ctl, "start", "check"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    ok(&["task", "--control", &ctl, "stop"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let out = ok(&["task", "--control", &ctl, "status"]);
        if out.contains("finished: check stopped") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{out}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    ok(&["task", "--control", &ctl, "rates", "--max-speed", "0"]);
    // Bad input: an unknown task, a rate out of range.
    let (code, err) = fails(&["task", "--control", &ctl, "start", "defrag"]);
    assert_eq!(code, 2, "{err}");
    let (code, err) = fails(&["task", "--control", &ctl, "rates", "--rebuild", "0"]);
    assert_eq!(code, 2, "{err}");
    // The client's data reads back whole.
    let back = dir.path("back.bin");
    let status = Command::new("nbdcopy")
        .args([&uri, s(&back)])
        .status()
        .unwrap();
    assert!(status.success());
    let got = std::fs::read(&back).unwrap();
    assert!(got[..data.len()] == data[..], "the data reads back");
}
