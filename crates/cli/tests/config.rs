//! The saved configuration: `raidkit scan` finds the arrays among image files (and nothing in
//! a file that is no member) and prints ARRAY lines; a configuration file made of them brings
//! both arrays up with `raidkit serve --scan`, no member path typed; `raidkit monitor --scan`
//! takes the control socket from it; an ARRAY whose members are nowhere is refused.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The UUID `raidkit detail --json` reports for the array on `members`.
fn uuid_of(members: &[std::path::PathBuf]) -> String {
    let out = ok(&with(&["detail", "--json"], members, &[]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["status"]["uuid"].as_str().unwrap().to_string()
}

/// A RAID 5 `alpha` of three image files a0..a2 and a RAID 1 `beta` of two, b0 and b1.
fn alpha_and_beta(dir: &TempDir) -> (Vec<std::path::PathBuf>, Vec<std::path::PathBuf>) {
    let a = dir.members("a", 3);
    let b = dir.members("b", 2);
    for (members, level, name) in [(&a, "5", "alpha"), (&b, "1", "beta")] {
        ok(&with(
            &[
                "create",
                "--level",
                level,
                "--name",
                name,
                "--image-size",
                "16M",
            ],
            members,
            &[],
        ));
    }
    (a, b)
}

#[test]
fn scan_finds_both_arrays_and_serve_scan_brings_them_up() {
    let dir = TempDir::new("config-scan");
    let (a, b) = alpha_and_beta(&dir);
    std::fs::write(dir.path("not-a-member.img"), vec![0u8; 1 << 20]).unwrap();
    let pattern = format!("{}/*.img", dir.0.display());
    let lines = ok(&["scan", &pattern]);
    let (ua, ub) = (uuid_of(&a), uuid_of(&b));
    assert!(
        lines.contains(&format!(
            "ARRAY alpha level=raid5 metadata=1.2 num-devices=3 UUID={ua}"
        )),
        "{lines}"
    );
    assert!(
        lines.contains(&format!(
            "ARRAY beta level=raid1 metadata=1.2 num-devices=2 UUID={ub}"
        )),
        "{lines}"
    );
    assert!(!lines.contains("not-a-member"), "{lines}");
    assert_eq!(lines.matches("ARRAY ").count(), 2, "{lines}");

    // A configuration made of the scan's lines, with DEVICE candidates instead of the lists.
    let socket = dir.path("nbd.sock");
    let control = dir.path("nbd.sock.ctl");
    let conf = dir.path("raidkit.conf");
    std::fs::write(
        &conf,
        format!(
            "DEVICE {pattern}\nARRAY alpha UUID={ua}\nARRAY beta UUID={ub}\nCONTROL {}\n\
             RATES check=20 max-speed=1\n",
            control.display()
        ),
    )
    .unwrap();
    let mut server = Command::new(RAIDKIT)
        .args([
            "serve",
            "--scan",
            "--config",
            s(&conf),
            "--socket",
            s(&socket),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !control.exists() {
        assert!(
            Instant::now() < deadline && server.try_wait().unwrap().is_none(),
            "raidkit serve --scan did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for (name, n) in [("alpha", 3), ("beta", 2)] {
        let out = ok(&[
            "detail",
            "--control",
            s(&control),
            "--array",
            name,
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let status = if v["status"].is_null() {
            &v
        } else {
            &v["status"]
        };
        assert_eq!(status["raid_disks"], n, "{name}: {out}");
        assert_eq!(status["degraded"], false, "{name}: {out}");
        // The file's RATES, on every array it serves.
        let rates = ok(&["task", "--control", s(&control), "--array", name, "rates"]);
        assert!(
            rates.contains("check 20%") && rates.contains("cap 1.0 MB/s"),
            "{name}: {rates}"
        );
    }
    // The monitor finds the server through the same file.
    let out = ok(&[
        "monitor",
        "--scan",
        "--config",
        s(&conf),
        "--oneshot",
        "--test",
    ]);
    assert_eq!(out.matches("TestMessage event on").count(), 2, "{out}");
    let _ = server.kill();
    let _ = server.wait();

    // An ARRAY whose UUID no candidate carries: refused before anything is served.
    let missing = dir.path("missing.conf");
    std::fs::write(
        &missing,
        format!("DEVICE {pattern}\nARRAY gamma UUID=01234567:89abcdef:01234567:89abcdef\n"),
    )
    .unwrap();
    let (code, err) = fails(&[
        "serve",
        "--scan",
        "--config",
        s(&missing),
        "--socket",
        s(&dir.path("other.sock")),
    ]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("ARRAY gamma"), "{err}");
    assert!(!dir.path("other.sock").exists());
    // A malformed file names its line.
    std::fs::write(&missing, "DEVICE x\nARRAY\n").unwrap();
    let (code, err) = fails(&[
        "serve",
        "--scan",
        "--config",
        s(&missing),
        "--socket",
        "/tmp/x",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("line 2"), "{err}");
}

/// Members written by the real mdadm and md (two members of one RAID 6, superblocks kept as
/// fixtures from the md VM), placed on image files as md placed them: `raidkit scan` finds
/// them as one array, with md's UUID.
#[test]
fn scan_finds_an_array_mdadm_wrote() {
    use raidkit_metadata::{Location, Superblock, SuperblockVersion};
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../metadata/tests/fixtures/md-written");
    let dir = TempDir::new("config-md-scan");
    let device_sectors = 81920u64;
    let mut uuid = None;
    for n in [0, 3] {
        let bytes = std::fs::read(fixtures.join(format!("v12_r6_dirty_{n}.sb"))).unwrap();
        let loc = Location::new(SuperblockVersion::V1_2, device_sectors);
        let sb = Superblock::decode(&bytes, loc).unwrap();
        uuid = Some(sb.set_uuid.to_mdadm_string());
        let image = dir.path(&format!("md{n}.img"));
        let f = std::fs::File::create(&image).unwrap();
        f.set_len(device_sectors * 512).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&bytes, sb.super_offset_sectors * 512)
            .unwrap();
    }
    let out = ok(&["scan", &format!("{}/md*.img", dir.0.display())]);
    let uuid = uuid.unwrap();
    assert!(
        out.starts_with("ARRAY ")
            && out.contains(&format!(
                "level=raid6 metadata=1.2 num-devices=4 UUID={uuid}"
            )),
        "{out}"
    );
    assert_eq!(out.matches("ARRAY ").count(), 1, "{out}");
    assert!(out.contains("md0.img") && out.contains("md3.img"), "{out}");
}

/// The scenario: a configuration with two arrays in one spare group brings both up;
/// the one that loses a member gets the other's spare (mdadm's MoveSpare), rebuilt in the
/// background; after a restart the spare is still where it went.
#[test]
fn a_spare_group_moves_the_spare_to_the_array_that_lost_a_member() {
    let dir = TempDir::new("config-spare-group");
    let a = dir.members("a", 4); // three members and a spare
    let b = dir.members("b", 3);
    ok(&with(
        &[
            "create",
            "--level",
            "5",
            "--raid-devices",
            "3",
            "--spare-devices",
            "1",
            "--name",
            "alpha",
            "--image-size",
            "16M",
        ],
        &a,
        &[],
    ));
    ok(&with(
        &[
            "create",
            "--level",
            "5",
            "--name",
            "beta",
            "--image-size",
            "16M",
        ],
        &b,
        &[],
    ));
    let (ua, ub) = (uuid_of(&a), uuid_of(&b));
    let conf = dir.path("raidkit.conf");
    std::fs::write(
        &conf,
        format!(
            "DEVICE {}/*.img\nARRAY alpha UUID={ua} spare-group=shelf\nARRAY beta UUID={ub} spare-group=shelf spares=1\n",
            dir.0.display()
        ),
    )
    .unwrap();
    let serve = |tag: &str| Server::start(&dir.0, tag, &["--scan", "--config", s(&conf)]);
    let mut server = serve("one");
    let ctl = s(&server.control).to_string();
    let detail = |name: &str| -> serde_json::Value {
        let out = ok(&["detail", "--control", &ctl, "--array", name, "--json"]);
        let mut v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["status"].take()
    };
    let roles = |v: &serde_json::Value| -> Vec<(String, String)> {
        v["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let name = m["name"].as_str().unwrap();
                let file = name.rsplit('/').next().unwrap().to_string();
                (file, m["role"].as_str().unwrap().to_string())
            })
            .collect()
    };
    assert!(roles(&detail("alpha")).contains(&("a3.img".into(), "spare".into())));
    // The monitor, told by the file: beta lacks the spare its line asks for (SparesMissing);
    // the spare's move is MoveSpare.
    let events = dir.path("events.log");
    let hook = hook(&dir, "hook.sh", &events);
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _monitor = Killed(
        Command::new(RAIDKIT)
            .args(["monitor", "--scan", "--config", s(&conf), "--control", &ctl])
            .args(["--program", s(&hook)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let wait_for = |what: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&events).unwrap_or_default();
            if text.lines().any(|l| l.starts_with(what)) || Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let text = wait_for("SparesMissing");
    assert!(
        text.lines()
            .any(|l| l == format!("SparesMissing {ctl}:beta")),
        "{text}"
    );
    std::thread::sleep(Duration::from_millis(300));
    ok(&[
        "fail",
        "--control",
        &ctl,
        "--array",
        "beta",
        "--member",
        s(&b[1]),
    ]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (va, vb) = (detail("alpha"), detail("beta"));
        let moved = roles(&vb)
            .iter()
            .any(|(f, r)| f == "a3.img" && r == "active");
        if moved && !vb["degraded"].as_bool().unwrap() {
            assert!(
                !roles(&va).iter().any(|(f, _)| f == "a3.img"),
                "alpha gave its spare away: {:?}",
                roles(&va)
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "alpha {:?}, beta {:?}",
            roles(&va),
            roles(&vb)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = wait_for("MoveSpare");
    assert!(
        text.lines()
            .any(|l| l == format!("MoveSpare {ctl}:beta {}", a[3].display())),
        "{text}"
    );
    assert!(!text.contains(":alpha"), "alpha asks for no spares: {text}");
    server.stop();
    // After a restart the spare is beta's: its superblock says so.
    let server = serve("two");
    let ctl = s(&server.control).to_string();
    let out = ok(&["detail", "--control", &ctl, "--array", "beta", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"]["degraded"], false, "{out}");
    assert!(out.contains("a3.img"), "{out}");
}

#[test]
fn monitor_scan_watches_stopped_arrays_through_their_members() {
    let dir = TempDir::new("config-monitor-stopped");
    let a = dir.members("a", 3);
    ok(&with(
        &[
            "create",
            "--level",
            "5",
            "--name",
            "alpha",
            "--image-size",
            "16M",
        ],
        &a,
        &[],
    ));
    let conf = dir.path("raidkit.conf");
    std::fs::write(
        &conf,
        format!(
            "DEVICE {}/*.img\nARRAY alpha UUID={}\n",
            dir.0.display(),
            uuid_of(&a)
        ),
    )
    .unwrap();
    let label = format!("{}:alpha", conf.display());
    let oneshot = || {
        ok(&[
            "monitor",
            "--scan",
            "--config",
            s(&conf),
            "--oneshot",
            "--test",
        ])
    };
    // Whole: only the test message.
    let out = oneshot();
    assert!(
        out.contains(&format!("TestMessage event on {label}")),
        "{out}"
    );
    assert!(!out.contains("DegradedArray"), "{out}");
    // The monitor reads superblocks only: nothing on the members changed.
    let before = contents(&a);
    oneshot();
    assert_unchanged(&a, &before, "the members after monitoring");

    // Watching: a member taken away is DegradedArray; a second, DeviceDisappeared.
    let mut monitor = Command::new(RAIDKIT)
        .args(["monitor", "--scan", "--config", s(&conf), "--delay", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let away = dir.path("away.bin");
    std::fs::rename(&a[1], &away).unwrap();
    let out = oneshot();
    assert!(
        out.contains(&format!("DegradedArray event on {label}")),
        "{out}"
    );
    std::thread::sleep(Duration::from_millis(2500));
    std::fs::rename(&a[2], dir.path("away2.bin")).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let _ = monitor.kill();
    let out = monitor.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let degraded = text
        .find("DegradedArray")
        .unwrap_or_else(|| panic!("{text}"));
    let gone = text
        .find("DeviceDisappeared")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(degraded < gone, "{text}");
}

/// `raidkit assemble --scan`: every ARRAY of the file assembled and left clean, one line
/// each; an array that cannot be assembled is reported and the others still are; a look
/// with --read-only writes nothing and sees an unclean stop; --array picks one.
#[test]
fn assemble_scan_brings_each_array_to_a_clean_state_and_reports_it() {
    let dir = TempDir::new("config-assemble");
    let (a, b) = alpha_and_beta(&dir);
    let conf = dir.path("raidkit.conf");
    std::fs::write(
        &conf,
        format!(
            "DEVICE {}/*.img\nARRAY alpha UUID={}\nARRAY beta UUID={}\n",
            dir.0.display(),
            uuid_of(&a),
            uuid_of(&b)
        ),
    )
    .unwrap();
    let conf = s(&conf).to_string();
    let out = ok(&["assemble", "--scan", "--config", &conf]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with("raidkit: alpha: raid5, 3 of 3 slots in sync; stopped clean"),
        "{out}"
    );
    assert!(
        lines[1].starts_with("raidkit: beta: raid1, 2 of 2 slots in sync; stopped clean"),
        "{out}"
    );

    // alpha written and dropped without a stop: its superblocks say dirty.
    {
        let disks = raidkit_cli::common::open_members(&a, false).unwrap();
        let (array, _) =
            raidkit_engine::Array::assemble(disks, raidkit_engine::AssembleOptions::default())
                .unwrap();
        array.write_at(&pattern(65536, 7), 0, false).unwrap();
        array.flush().unwrap();
    }
    let before = contents(&a);
    let out = ok(&[
        "assemble",
        "--scan",
        "--config",
        &conf,
        "--array",
        "alpha",
        "--read-only",
    ]);
    assert!(
        out.contains("looked at read-only, not stopped cleanly"),
        "{out}"
    );
    assert!(!out.contains("beta"), "--array picks one: {out}");
    assert_unchanged(&a, &before, "assemble --read-only");

    // beta loses a member: not assembled without --run (and nothing written), alpha is.
    let gone = dir.path("b1.away");
    std::fs::rename(&b[1], &gone).unwrap();
    let before_b0 = contents(&b[..1]);
    let run = raidkit(&["assemble", "--scan", "--config", &conf]);
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(run.status.code(), Some(4), "{out}");
    // Dirty with an empty partial parity log: md resyncs such an array, and so does raidkit.
    assert!(
        out.contains(
            "raidkit: alpha: raid5, 3 of 3 slots in sync, resync pending (`raidkit serve` or `raidkit rebuild` runs it); stopped with a resync pending from sector 0"
        ),
        "{out}"
    );
    assert!(out.contains("raidkit: beta: not assembled"), "{out}");
    assert!(out.contains("1 of 2 arrays not assembled"), "{out}");
    assert_unchanged(&b[..1], &before_b0, "a refused assembly");
    ok(&with(&["rebuild"], &a, &[]));
    // alpha is consistent again, from its own superblocks' view.
    let v: serde_json::Value = serde_json::from_str(&ok(&[
        "assemble", "--scan", "--config", &conf, "--array", "alpha", "--json",
    ]))
    .unwrap();
    assert_eq!(v[0]["array"], "alpha");
    assert_eq!(v[0]["assembly"]["was_dirty"], false, "{v}");
    let out = ok(&[
        "assemble", "--scan", "--config", &conf, "--array", "beta", "--run",
    ]);
    assert!(
        out.contains("1 of 2 slots in sync, degraded (slots [1] missing)"),
        "{out}"
    );
    // Members given instead of a file; a name the file does not have is refused.
    std::fs::rename(&gone, &b[1]).unwrap();
    let (code, err) = fails(&["assemble", "--scan", "--config", &conf, "--array", "gamma"]);
    assert_eq!(code, 2, "{err}");
    let out = ok(&with(&["assemble"], &a, &[]));
    assert!(
        out.starts_with("raidkit: array: raid5, 3 of 3 slots in sync"),
        "{out}"
    );
}

/// `create --read-ahead --config` keeps the read policy where md's superblock cannot: on the
/// new array's ARRAY line (absolute member paths, as `raidkit scan` prints them), which
/// `serve --scan` applies. Without `--config` the option is refused and nothing is created;
/// `--write-policy back` without a journal is refused before anything is written.
#[test]
fn create_records_the_read_policy_on_the_array_line_and_serve_applies_it() {
    let dir = TempDir::new("create-policy");
    let members = dir.members("p", 3);
    let (code, err) = fails(&with(
        &[
            "create",
            "--level",
            "5",
            "--image-size",
            "16M",
            "--read-ahead",
            "adaptive",
        ],
        &members,
        &[],
    ));
    assert_eq!(code, 2, "{err}");
    assert!(members.iter().all(|m| !m.exists()), "nothing created");
    let conf = dir.path("made.conf");
    let (code, err) = fails(&with(
        &[
            "create",
            "--level",
            "5",
            "--image-size",
            "16M",
            "--write-policy",
            "back",
            "--config",
            s(&conf),
        ],
        &members,
        &[],
    ));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--write-journal"), "{err}");
    assert!(!conf.exists() && members.iter().all(|m| !m.exists()));
    let out = ok(&with(
        &[
            "create",
            "--level",
            "5",
            "--image-size",
            "16M",
            "--name",
            "pol",
            "--read-ahead",
            "adaptive",
            "--config",
            s(&conf),
        ],
        &members,
        &[],
    ));
    let text = std::fs::read_to_string(&conf).unwrap();
    assert!(out.contains("added to"), "{out}");
    assert!(
        text.starts_with("ARRAY pol ") && text.contains("read-ahead=adaptive"),
        "{text}"
    );
    let first = std::fs::canonicalize(&members[0]).unwrap();
    assert!(text.contains(&first.display().to_string()), "{text}");
    let server = Server::start(&dir.0, "pol", &["--scan", "--config", s(&conf)]);
    let d: serde_json::Value =
        serde_json::from_str(&ok(&["detail", "--control", s(&server.control), "--json"])).unwrap();
    assert_eq!(d["status"]["read_ahead"]["policy"], "adaptive", "{d}");
}
