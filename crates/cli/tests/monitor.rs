//! `raidkit monitor` against a real `raidkit serve`: a member failed through the control
//! socket reaches the `--program` hook as mdadm's Fail and DegradedArray within 2 seconds, in
//! order, with the member; `--test` sends a TestMessage per array; `--oneshot` reports a
//! degraded array and exits; a server that goes away is DeviceDisappeared. (Mail through a
//! real MTA is tested by tests/ops/monitor-mail.sh, which needs root to add a mailbox.)

mod common;

use common::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A RAID 5 of three image files served as `md0`.
fn served(dir: &TempDir) -> (Server, Vec<std::path::PathBuf>) {
    let members = dir.members("m", 3);
    ok(&with(
        &["create", "--level", "5", "--image-size", "16M"],
        &members,
        &[],
    ));
    let mut args = vec!["--name", "md0"];
    args.extend(members.iter().map(|p| s(p)));
    (Server::start(&dir.0, "nbd", &args), members)
}

/// `raidkit monitor ARGS…`, killed when the test ends.
struct Monitor(Child);

impl Monitor {
    fn start(args: &[&str]) -> Monitor {
        Monitor(
            Command::new(RAIDKIT)
                .arg("monitor")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The hook's lines once `want` of them start with the given events, or all it got by the
/// deadline.
fn wait_for(log: &Path, want: &[&str], within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let lines: Vec<String> = std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        let seen = want
            .iter()
            .all(|w| lines.iter().any(|l| l.split(' ').next() == Some(*w)));
        if seen || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_failed_member_reaches_the_program_within_two_seconds() {
    let dir = TempDir::new("monitor-fail");
    let (mut server, members) = served(&dir);
    let log = dir.path("events.log");
    let prog = hook(&dir, "hook.sh", &log);
    let ctl = s(&server.control).to_string();
    let _monitor = Monitor::start(&["--control", &ctl, "--program", s(&prog), "--test"]);
    let array = format!("{ctl}:md0");
    let lines = wait_for(&log, &["TestMessage"], Duration::from_secs(10));
    assert_eq!(lines, vec![format!("TestMessage {array}")]);
    // The monitor reads the array's events from now on; give its first poll a moment.
    std::thread::sleep(Duration::from_millis(300));
    let failed = Instant::now();
    ok(&["fail", "--control", &ctl, "--member", s(&members[1])]);
    let lines = wait_for(&log, &["Fail", "DegradedArray"], Duration::from_secs(2));
    let took = failed.elapsed();
    let name = members[1].file_name().unwrap().to_string_lossy();
    let fail = lines.iter().position(|l| l.starts_with("Fail "));
    let degraded = lines.iter().position(|l| l.starts_with("DegradedArray "));
    assert!(
        fail.is_some() && degraded.is_some() && took < Duration::from_secs(2),
        "after {took:?}: {lines:?}"
    );
    assert!(fail < degraded, "Fail first, as it happened: {lines:?}");
    let fail_line = &lines[fail.unwrap()];
    assert!(
        fail_line == &format!("Fail {array} {name}")
            || fail_line == &format!("Fail {array} {}", members[1].display()),
        "{fail_line}"
    );
    // The server goes away: DeviceDisappeared.
    server.stop();
    let lines = wait_for(&log, &["DeviceDisappeared"], Duration::from_secs(10));
    assert!(
        lines
            .iter()
            .any(|l| l == &format!("DeviceDisappeared {array}")),
        "{lines:?}"
    );
}

#[test]
fn oneshot_reports_a_degraded_array_and_exits() {
    let dir = TempDir::new("monitor-oneshot");
    let (_server, members) = served(&dir);
    let ctl = _server.control.clone();
    let log = dir.path("events.log");
    let prog = hook(&dir, "hook.sh", &log);
    let args = [
        "monitor",
        "--oneshot",
        "--control",
        s(&ctl),
        "--program",
        s(&prog),
    ];
    ok(&args);
    assert_eq!(std::fs::read_to_string(&log).unwrap_or_default(), "");
    ok(&["fail", "--control", s(&ctl), "--member", s(&members[0])]);
    let out = ok(&args);
    assert!(out.contains("DegradedArray event on"), "{out}");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        format!("DegradedArray {}:md0\n", ctl.display())
    );
    // Refusals: no socket, no program.
    let (code, err) = fails(&[
        "monitor",
        "--oneshot",
        "--control",
        s(&dir.path("none.ctl")),
    ]);
    assert_eq!(code, 1, "{err}");
    let (code, err) = fails(&[
        "monitor",
        "--control",
        s(&ctl),
        "--program",
        s(&dir.path("missing.sh")),
    ]);
    assert_eq!(code, 2, "{err}");
}

/// smartctl's report of qemu's emulated ATA disk (captured by tests/smart/capture.sh), and
/// the same report turned into a dying drive's: assessment FAILED, 12 sectors reallocated.
fn smart_reports() -> (String, String) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../disk/tests/data/smartctl-qemu-ata.json"
    );
    let healthy = std::fs::read_to_string(path).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&healthy).unwrap();
    v["smart_status"]["passed"] = false.into();
    for a in v["ata_smart_attributes"]["table"].as_array_mut().unwrap() {
        if a["id"] == 5 {
            a["raw"]["value"] = 12.into();
        }
    }
    (healthy, v.to_string())
}

#[test]
fn a_drive_reporting_trouble_reaches_the_program_detail_and_oneshot() {
    let dir = TempDir::new("monitor-health");
    let (healthy, dying) = smart_reports();
    let reports = [dir.path("smart0.json"), dir.path("smart1.json")];
    for r in &reports {
        std::fs::write(r, &healthy).unwrap();
    }
    // Two emulated drives that report their health from those files.
    let members: Vec<String> = (0..2)
        .map(|i| {
            format!(
                "emu:hds72101,smart={}:16M:{}",
                reports[i].display(),
                dir.path(&format!("m{i}.img")).display()
            )
        })
        .collect();
    let m: Vec<&str> = members.iter().map(String::as_str).collect();
    ok(&[&["create", "--level", "1"][..], &m].concat());
    // Offline, detail asks the drives.
    let out = ok(&[&["detail"][..], &m].concat());
    assert!(out.contains("Drive Health"), "{out}");
    assert!(out.contains("PASSED, 0 reallocated, 31 °C"), "{out}");
    assert!(!out.contains("WARNING"), "{out}");

    let server = Server::start(
        &dir.0,
        "nbd",
        &[&["--name", "md0", "--health", "every=1s"][..], &m].concat(),
    );
    let ctl = s(&server.control).to_string();
    let log = dir.path("events.log");
    let prog = hook(&dir, "hook.sh", &log);
    let _monitor = Monitor::start(&["--control", &ctl, "--program", s(&prog)]);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&reports[1], &dying).unwrap();
    let lines = wait_for(&log, &["DriveHealthWarning"], Duration::from_secs(5));
    let array = format!("{ctl}:md0");
    assert_eq!(
        lines,
        vec![format!("DriveHealthWarning {array} {}", members[1])],
        "one warning, for the drive that reports trouble"
    );
    // Raised once while it lasts, not at every look.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1);
    let out = ok(&["detail", "--control", &ctl]);
    assert!(out.contains("FAILED, 12 reallocated"), "{out}");
    assert!(
        out.contains("WARNING: the drive's own SMART assessment is FAILED"),
        "{out}"
    );
    assert!(
        out.contains("WARNING: 12 sectors reallocated (warns at 10)"),
        "{out}"
    );
    // A cron run reports what the server last saw.
    let once = dir.path("oneshot.log");
    let prog1 = hook(&dir, "hook1.sh", &once);
    ok(&[
        "monitor",
        "--oneshot",
        "--control",
        &ctl,
        "--program",
        s(&prog1),
    ]);
    assert_eq!(
        std::fs::read_to_string(&once).unwrap(),
        format!("DriveHealthWarning {array} {}\n", members[1])
    );
}

/// A RAID 50 stack's spans are watched as arrays of their own (`NAME/spanN`, as the server's
/// log names them): a member failing in span 1 reaches the program as Fail and DegradedArray
/// of that span, and `--oneshot` reports the span degraded.
#[test]
fn a_stacks_spans_are_watched_and_a_failure_in_one_is_reported_for_it() {
    let dir = TempDir::new("monitor-stack");
    let members = dir.members("m", 6);
    ok(&with(
        &[
            "create",
            "--level",
            "50",
            "--spans",
            "2",
            "--image-size",
            "16M",
        ],
        &members,
        &[],
    ));
    let mut args = vec!["--name", "md0"];
    args.extend(members.iter().map(|p| s(p)));
    let server = Server::start(&dir.0, "nbd", &args);
    let log = dir.path("events.log");
    let prog = hook(&dir, "hook.sh", &log);
    let ctl = s(&server.control).to_string();
    let _monitor = Monitor::start(&["--control", &ctl, "--program", s(&prog), "--test"]);
    let lines = wait_for(&log, &["TestMessage"], Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let lines = if lines.len() < 3 {
        wait_for(&log, &["TestMessage"], Duration::from_secs(1))
    } else {
        lines
    };
    for name in ["md0", "md0/span0", "md0/span1"] {
        assert!(
            lines.contains(&format!("TestMessage {ctl}:{name}")),
            "{name}: {lines:?}"
        );
    }
    ok(&["fail", "--control", &ctl, "--member", s(&members[4])]);
    let lines = wait_for(&log, &["Fail", "DegradedArray"], Duration::from_secs(5));
    let span1 = format!("{ctl}:md0/span1");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("Fail {span1} ")) && l.contains("m4")),
        "{lines:?}"
    );
    assert!(
        lines.contains(&format!("DegradedArray {span1}")),
        "{lines:?}"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.contains(":md0/span0") && !l.starts_with("TestMessage")),
        "span 0 lost nothing: {lines:?}"
    );
    let out = ok(&["monitor", "--oneshot", "--control", &ctl]);
    assert!(
        out.contains("DegradedArray event on") && out.contains("md0/span1"),
        "{out}"
    );
    assert!(!out.contains("md0/span0"), "{out}");
}
