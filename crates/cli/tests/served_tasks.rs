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
    // The PERC6's reconstruction rate and md's floor, both kept.
    let out = ok(&[
        "task",
        "--control",
        &ctl,
        "rates",
        "--reshape",
        "60",
        "--min-speed",
        "5",
    ]);
    assert!(
        out.contains("reshape 60%") && out.contains("floor 5.0 MB/s") && out.contains("cap none"),
        "{out}"
    );
    // Bad input: an unknown task, a rate out of range, a floor above the cap.
    let (code, err) = fails(&["task", "--control", &ctl, "rates", "--max-speed", "2"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("min-speed 5 MB/s is above max-speed 2 MB/s"),
        "{err}"
    );
    let (code, err) = fails(&["task", "--control", &ctl, "start", "defrag"]);
    assert_eq!(code, 2, "{err}");
    let (code, err) = fails(&["task", "--control", &ctl, "rates", "--rebuild", "0"]);
    assert_eq!(code, 2, "{err}");
    // The client's data reads back whole, through the adaptive read-ahead.
    assert_eq!(
        ok(&["task", "--control", &ctl, "read-ahead", "adaptive"]).trim(),
        "raidkit: read-ahead adaptive"
    );
    let (code, err) = fails(&["task", "--control", &ctl, "read-ahead", "sometimes"]);
    assert_eq!(code, 2, "{err}");
    let back = dir.path("back.bin");
    let status = Command::new("nbdcopy")
        .args(["--connections=1", "--requests=1", &uri, s(&back)])
        .status()
        .unwrap();
    assert!(status.success());
    let got = std::fs::read(&back).unwrap();
    assert!(got[..data.len()] == data[..], "the data reads back");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["detail", "--control", &ctl, "--json"])).unwrap();
    let ra = &v["status"]["read_ahead"];
    assert_eq!(ra["policy"], "adaptive", "{ra}");
    assert!(ra["hits"].as_u64().unwrap() > 0, "{ra}");
    let text = ok(&["detail", "--control", &ctl]);
    assert!(text.contains("Read Ahead : adaptive"), "{text}");
}

#[test]
fn scheduled_checks_start_by_themselves_and_are_remembered_across_restarts() {
    let dir = TempDir::new("served-schedule");
    let members = dir.members("m", 3);
    ok(&with(
        &["create", "--level", "5", "--image-size", "16M"],
        &members,
        &[],
    ));
    let mut args = vec!["--name", "md0", "--schedule", "check=1s"];
    args.extend(members.iter().map(|p| s(p)));
    let mut server = Server::start(&dir.0, "nbd", &args);
    let ctl = s(&server.control).to_string();
    // Every second a check falls due and starts when the last one has finished.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let v: serde_json::Value =
            serde_json::from_str(&ok(&["detail", "--control", &ctl, "--json"])).unwrap();
        let checks = v["status"]["finished_tasks"]
            .as_array()
            .map_or(0, |t| t.iter().filter(|r| r["kind"] == "check").count());
        if checks >= 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{v}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (_, log) = server.stop();
    assert!(
        log.contains("check started by its schedule (every 1s)"),
        "{log}"
    );
    let state = format!("{}.schedule", ctl);
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert!(kept["md0"]["check"].as_u64().is_some(), "{kept}");

    // Served again with a daily check: the last one started seconds ago, so none starts.
    let mut args = vec!["--name", "md0", "--schedule", "check=1d"];
    args.extend(members.iter().map(|p| s(p)));
    let mut server = Server::start(&dir.0, "nbd", &args);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["detail", "--control", s(&server.control), "--json"])).unwrap();
    assert_eq!(v["status"]["finished_tasks"], serde_json::json!([]), "{v}");
    assert!(v["status"]["task"].is_null(), "{v}");
    server.stop();

    // Bad schedules are refused before anything is served.
    for bad in ["check", "rebuild=1d", "check=7w"] {
        let mut args = vec![
            "serve",
            "--socket",
            "/nonexistent/x.sock",
            "--schedule",
            bad,
        ];
        args.extend(members.iter().map(|p| s(p)));
        let (code, err) = fails(&args);
        assert_eq!(code, 2, "{bad}: {err}");
    }
}

/// mdcheck's way: a check with a time budget stops when the budget is spent and the next
/// window continues where it stopped, until the whole array is checked; where it stopped is
/// in the state file.
#[test]
fn a_scheduled_check_with_a_budget_continues_where_it_stopped() {
    let dir = TempDir::new("served-schedule-budget");
    let members = dir.members("m", 3);
    ok(&with(
        &["create", "--level", "5", "--image-size", "16M"],
        &members,
        &[],
    ));
    let mut args = vec!["--name", "md0", "--schedule", "check=2s+1s"];
    args.extend(members.iter().map(|p| s(p)));
    let mut server = Server::start(&dir.0, "nbd", &args);
    let ctl = s(&server.control).to_string();
    // Slow enough that one second covers a part of the array.
    ok(&["task", "--control", &ctl, "rates", "--max-speed", "2"]);
    let state = format!("{ctl}.schedule");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut resumed_at = Vec::new();
    loop {
        let kept: serde_json::Value = std::fs::read_to_string(&state)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        if let Some(at) = kept["md0"]["check.resume"].as_u64() {
            if resumed_at.last() != Some(&at) {
                resumed_at.push(at);
            }
        }
        let v: serde_json::Value =
            serde_json::from_str(&ok(&["detail", "--control", &ctl, "--json"])).unwrap();
        let reports = v["status"]["finished_tasks"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let completed_after_stops = reports
            .iter()
            .skip_while(|r| r["outcome"] != "stopped")
            .any(|r| r["kind"] == "check" && r["outcome"] == "completed");
        if completed_after_stops && resumed_at.len() >= 2 && kept["md0"]["check.resume"].is_null() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "resumed at {resumed_at:?}: {v}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        resumed_at.windows(2).all(|w| w[0] < w[1]),
        "each window goes on from where the last stopped: {resumed_at:?}"
    );
    let (_, log) = server.stop();
    assert!(log.contains("check stopped at"), "{log}");
    assert!(log.contains("by its time budget"), "{log}");
    assert!(
        log.contains("check continues by its schedule (every 2s, 1s at a time) from sector"),
        "{log}"
    );
}

#[test]
fn write_back_on_a_served_array_with_a_journal() {
    let dir = TempDir::new("served-wb");
    let members = dir.members("m", 4);
    let journal = dir.path("j.img");
    ok(&with(
        &[
            "create",
            "--level",
            "5",
            "--image-size",
            "64M",
            "--chunk",
            "64K",
            "--write-journal",
            s(&journal),
        ],
        &members,
        &[],
    ));
    let mut args = vec!["--name", "md0", "--write-policy", "back"];
    args.extend(members.iter().map(|p| s(p)));
    args.push(s(&journal));
    let mut server = Server::start(&dir.0, "nbd", &args);
    let ctl = s(&server.control).to_string();
    // A client writes in 4 KiB requests: each returns once the journal has it.
    let data = pattern(8 << 20, 33);
    let input = dir.path("data.bin");
    std::fs::write(&input, &data).unwrap();
    let uri = nbd(&server.socket);
    let status = Command::new("nbdcopy")
        .args(["--request-size=4096", s(&input), &uri])
        .status()
        .expect("nbdcopy (libnbd-bin) runs");
    assert!(status.success());
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["detail", "--control", &ctl, "--json"])).unwrap();
    let wb = &v["status"]["write_back"];
    assert_eq!(wb["policy"], "back", "{wb}");
    assert!(wb["cached_writes"].as_u64().unwrap() > 0, "{wb}");
    let text = ok(&["detail", "--control", &ctl]);
    assert!(text.contains("Write Policy : write-back"), "{text}");
    // Back to write-through: the cache is written to the members first.
    assert_eq!(
        ok(&["task", "--control", &ctl, "write-policy", "through"]).trim(),
        "raidkit: write-through"
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["detail", "--control", &ctl, "--json"])).unwrap();
    let wb = &v["status"]["write_back"];
    assert_eq!(
        (wb["policy"].as_str(), wb["cached_bytes"].as_u64()),
        (Some("through"), Some(0)),
        "{wb}"
    );
    ok(&["task", "--control", &ctl, "write-policy", "back"]);
    let (code, err) = fails(&["task", "--control", &ctl, "write-policy", "sometimes"]);
    assert_eq!(code, 2, "{err}");
    let back = dir.path("back.bin");
    let status = Command::new("nbdcopy")
        .args([&uri, s(&back)])
        .status()
        .unwrap();
    assert!(status.success());
    let got = std::fs::read(&back).unwrap();
    assert!(got[..data.len()] == data[..], "the data reads back");
    // A clean stop writes the cache back: the check (exit 0, else 5) finds parity consistent.
    let (code, out) = server.stop();
    assert_eq!(code, Some(0), "{out}");
    let mut check = vec!["check"];
    check.extend(members.iter().map(|p| s(p)));
    check.push(s(&journal));
    let out = ok(&check);
    assert!(out.contains(" 0 mismatched sectors"), "{out}");
    // Without a journal, write-back is refused, naming what it needs.
    let plain = dir.members("p", 3);
    ok(&with(
        &["create", "--level", "5", "--image-size", "16M"],
        &plain,
        &[],
    ));
    let mut args = vec![
        "serve",
        "--socket",
        "x.sock",
        "--write-policy",
        "back",
        "--name",
        "p0",
    ];
    args.extend(plain.iter().map(|p| s(p)));
    let (code, err) = fails(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("write journal"), "{err}");
}
