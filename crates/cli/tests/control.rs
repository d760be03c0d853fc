//! The control socket of `raidkit serve`, driven through the real binary: the array commands
//! with `--control` manage a served array (fail, remove, add with rebuild, detail), garbage and
//! hostile clients get error replies or a closed connection without touching the array, only
//! the owner may connect, and after SIGTERM the members are clean and hold what was written.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A RAID 6 of five 16 MiB image files holding `data` at offset 0, and `raidkit serve` on it.
struct Served {
    dir: TempDir,
    members: Vec<PathBuf>,
    control: PathBuf,
    server: Option<Child>,
    data: Vec<u8>,
}

impl Served {
    fn start(tag: &str) -> Served {
        let dir = TempDir::new(tag);
        let members: Vec<PathBuf> = (0..5).map(|i| dir.0.join(format!("m{i}.img"))).collect();
        let mut args = vec![
            "create",
            "--level",
            "6",
            "--image-size",
            "16M",
            "--chunk",
            "64K",
        ];
        args.extend(members.iter().map(|p| s(p)));
        ok(&args);
        let data = pattern(5 << 20, 11);
        let input = dir.0.join("data.bin");
        std::fs::write(&input, &data).unwrap();
        let mut args = vec!["write", "--input", s(&input)];
        args.extend(members.iter().map(|p| s(p)));
        ok(&args);

        let socket = dir.0.join("nbd.sock");
        let control = dir.0.join("nbd.sock.ctl");
        let server = Command::new(RAIDKIT)
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .arg("--name")
            .arg("md0")
            .args(&members)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut served = Served {
            dir,
            members,
            control,
            server: Some(server),
            data,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !served.control.exists() {
            if Instant::now() > deadline {
                let out = served.server.take().unwrap().wait_with_output().unwrap();
                panic!(
                    "no control socket appeared; server said: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        served
    }

    fn ctl(&self) -> &str {
        s(&self.control)
    }

    fn detail(&self) -> serde_json::Value {
        serde_json::from_str(&ok(&["detail", "--control", self.ctl(), "--json"])).unwrap()
    }

    /// SIGTERM; returns the server's exit status and stderr.
    fn stop(&mut self) -> (Option<i32>, String) {
        let child = self.server.take().expect("server running");
        // SAFETY: kill with the pid of our own child and a valid signal.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn role_of<'a>(detail: &'a serde_json::Value, member: &Path) -> &'a str {
    let name = s(member);
    detail["status"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| {
            let n = m["name"].as_str().unwrap();
            n == name || Path::new(n).canonicalize().ok() == member.canonicalize().ok()
        })
        .map(|m| m["role"].as_str().unwrap())
        .unwrap_or("absent")
}

#[test]
fn control_socket_manages_a_served_array() {
    let mut a = Served::start("manage");
    let mode = std::fs::metadata(&a.control).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "control socket mode");

    let d = a.detail();
    assert_eq!(d["array"], "md0");
    assert_eq!(d["status"]["level"], 6);
    assert_eq!(d["status"]["degraded"], false);
    let text = ok(&["detail", "--control", a.ctl()]);
    assert!(text.contains("Raid Level : raid6"), "{text}");

    // Fail a member named by a relative path from another directory's view: the server
    // compares canonical paths.
    let m1 = a.members[1].clone();
    ok(&["fail", "--control", a.ctl(), "--member", s(&m1)]);
    let d = a.detail();
    assert_eq!(d["status"]["degraded"], true);
    assert_eq!(d["status"]["missing_slots"], serde_json::json!([1]));
    assert_eq!(role_of(&d, &m1), "faulty");
    let again = ok(&["fail", "--control", a.ctl(), "--member", s(&m1)]);
    assert!(again.contains("was faulty already"), "{again}");

    // An active member cannot be removed (usage error); a non-member is a usage error too.
    let (code, err) = exit_code(&["remove", "--control", a.ctl(), "--member", s(&a.members[0])]);
    assert_eq!(code, 2, "{err}");
    let stranger = a.dir.0.join("stranger.img");
    let (code, err) = exit_code(&["fail", "--control", a.ctl(), "--member", s(&stranger)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a member"), "{err}");
    // An unknown array name, and --array without --control.
    let (code, _) = exit_code(&["detail", "--control", a.ctl(), "--array", "md9"]);
    assert_eq!(code, 2);
    let (code, _) = exit_code(&["detail", "--array", "md0"]);
    assert_eq!(code, 2);

    ok(&["remove", "--control", a.ctl(), "--member", s(&m1)]);
    assert_eq!(role_of(&a.detail(), &m1), "absent");

    // Adding a member of the array is refused; a missing file without --size is a usage error.
    let (code, err) = exit_code(&["add", "--control", a.ctl(), "--member", s(&a.members[2])]);
    assert_eq!(code, 3, "{err}");
    let new = a.dir.0.join("new.img");
    let (code, _) = exit_code(&["add", "--control", a.ctl(), "--member", s(&new)]);
    assert_eq!(code, 2);
    assert!(!new.exists());

    let out = ok(&[
        "add",
        "--control",
        a.ctl(),
        "--member",
        s(&new),
        "--image-size",
        "16M",
        "--wait",
    ]);
    assert!(out.contains("rebuilt"), "{out}");
    let d = a.detail();
    assert_eq!(d["status"]["degraded"], false);
    assert_eq!(role_of(&d, &new), "active");

    let (code, err) = a.stop();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("flushed and marked clean"), "{err}");
    assert!(!a.control.exists(), "the control socket is removed at exit");

    // Offline: the members in use say clean, and the data reads back, also with two of the
    // original members left out (so the rebuilt member's contents are used).
    let live: Vec<PathBuf> = vec![
        a.members[0].clone(),
        a.members[2].clone(),
        a.members[3].clone(),
        a.members[4].clone(),
        new.clone(),
    ];
    let mut args = vec!["examine", "--json"];
    args.extend(live.iter().map(|p| s(p)));
    let examined: serde_json::Value = serde_json::from_str(&ok(&args)).unwrap();
    for m in examined.as_array().unwrap() {
        assert_eq!(
            m["superblock"]["state"], "clean",
            "{} is not clean: {}",
            m["member"], m["superblock"]
        );
    }
    for subset in [
        &live[..],
        &[live[2].clone(), live[3].clone(), live[4].clone()][..],
    ] {
        let out = a.dir.0.join("out.bin");
        let len = a.data.len().to_string();
        let mut args = vec!["read", "--length", &len, "--output", s(&out)];
        args.extend(subset.iter().map(|p| s(p)));
        ok(&args);
        assert!(
            std::fs::read(&out).unwrap() == a.data,
            "array contents differ (members {subset:?})"
        );
    }
}

/// Sends raw bytes, returns the reply lines until the server closes or goes quiet.
fn raw_exchange(control: &Path, bytes: &[u8]) -> Vec<serde_json::Value> {
    let mut stream = UnixStream::connect(control).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // A refused connection may be closed before the request is written; its reply is still
    // there to read.
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut replies = Vec::new();
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        replies.push(serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!("reply is not JSON ({e}): {line}");
        }));
    }
    replies
}

/// Whether the server answered a connection that sent nothing (only a refusal does that).
fn was_refused(stream: &UnixStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let mut buf = [0u8; 512];
    match (&*stream).read(&mut buf) {
        Ok(n) => {
            let text = String::from_utf8_lossy(&buf[..n]);
            assert!(
                n == 0 || text.contains("connections"),
                "an idle connection got an unexpected reply: {text}"
            );
            true
        }
        Err(e) => {
            assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "{e}"
            );
            false
        }
    }
}

#[test]
fn hostile_clients_get_errors_and_the_array_is_unaffected() {
    let mut a = Served::start("hostile");
    let members_before: Vec<Vec<u8>> = a
        .members
        .iter()
        .map(|m| std::fs::read(m).unwrap())
        .collect();

    // One line each: garbage, wrong types, unknown operations and fields, relative paths.
    let bad: &[&[u8]] = &[
        b"hello\n",
        b"\xff\xfe\xfd\n",
        b"{}\n",
        b"[1,2,3]\n",
        b"{\"op\":\"format\"}\n",
        b"{\"op\":\"fail\"}\n",
        b"{\"op\":\"fail\",\"member\":{\"x\":1}}\n",
        b"{\"op\":\"detail\",\"array\":\"md0\",\"rm\":\"-rf\"}\n",
        b"{\"op\":\"add\",\"path\":\"relative.img\",\"size_bytes\":1}\n",
        b"{\"op\":\"add\",\"path\":\"/proc/self/mem\"}\n",
        b"{\"op\":\"fail\",\"array\":\"md0\",\"member\":\"/etc/passwd\"}\n",
        b"\n",
    ];
    let mut all = Vec::new();
    for b in bad {
        all.extend_from_slice(b);
    }
    let replies = raw_exchange(&a.control, &all);
    assert_eq!(replies.len(), bad.len(), "one reply per line: {replies:?}");
    for (r, b) in replies.iter().zip(bad) {
        assert_eq!(r["ok"], false, "{:?} -> {r}", String::from_utf8_lossy(b));
        assert!(r["code"].as_u64().unwrap() >= 1, "{r}");
        assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()), "{r}");
    }

    // A good request on the same connection after garbage still works.
    let replies = raw_exchange(&a.control, b"nonsense\n{\"op\":\"list\"}\n");
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[1]["ok"], true);
    assert_eq!(replies[1]["result"]["arrays"][0]["name"], "md0");

    // An endless line: one error reply, then the connection is closed (the rest unread).
    let mut huge = vec![b'x'; 200 << 10];
    huge.extend_from_slice(b"\n{\"op\":\"list\"}\n");
    let mut stream = UnixStream::connect(&a.control).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = stream.write_all(&huge);
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    let lines: Vec<&str> = reply.lines().collect();
    assert_eq!(lines.len(), 1, "{reply}");
    assert!(lines[0].contains("longer than"), "{reply}");

    // Half a request, then the client vanishes.
    let mut stream = UnixStream::connect(&a.control).unwrap();
    stream.write_all(b"{\"op\":\"fail\",\"member\":").unwrap();
    drop(stream);

    // Many idle connections: the ones over the limit get an error and are closed; the others
    // are served normally once the idle ones go.
    // A connection from above may still hold a slot for a moment on a loaded machine, so an
    // idle one can be refused too: those are replaced until 16 idle ones are held.
    let mut idle: Vec<UnixStream> = Vec::new();
    for _round in 0..20 {
        while idle.len() < 16 {
            idle.push(UnixStream::connect(&a.control).unwrap());
        }
        std::thread::sleep(Duration::from_millis(300));
        idle.retain(|s| !was_refused(s));
        if idle.len() == 16 {
            break;
        }
    }
    assert_eq!(idle.len(), 16, "could not hold 16 idle connections");
    let replies = raw_exchange(&a.control, b"{\"op\":\"list\"}\n");
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0]["ok"], false, "{:?}", replies[0]);
    assert!(replies[0]["error"]
        .as_str()
        .unwrap()
        .contains("connections"));
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = raw_exchange(&a.control, b"{\"op\":\"list\"}\n");
        if r.first().is_some_and(|r| r["ok"] == true) {
            break;
        }
        assert!(Instant::now() < deadline, "slots never freed: {r:?}");
        std::thread::sleep(Duration::from_millis(50));
    }

    // The array noticed nothing: whole, no log entries, and after a clean stop the members
    // differ from before only in their superblocks' clean/dirty stamps (the data is the same).
    let d = a.detail();
    assert_eq!(d["status"]["degraded"], false);
    assert_eq!(d["status"]["log"], serde_json::json!([]));
    let (code, err) = a.stop();
    assert_eq!(code, Some(0), "{err}");
    for (m, before) in a.members.iter().zip(&members_before) {
        let after = std::fs::read(m).unwrap();
        // Data area from 1 MiB on (v1.2 data offset is at least that for these sizes).
        assert!(
            after[1 << 20..] == before[1 << 20..],
            "{}: data changed",
            m.display()
        );
    }
    let out = a.dir.0.join("out.bin");
    let len = a.data.len().to_string();
    let mut args = vec!["read", "--length", &len, "--output", s(&out)];
    args.extend(a.members.iter().map(|p| s(p)));
    ok(&args);
    assert!(std::fs::read(&out).unwrap() == a.data);
}

#[test]
fn only_the_owner_may_use_the_control_socket() {
    // SAFETY: geteuid has no memory effects.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: needs root to run a client as another user");
        return;
    }
    let a = Served::start("owner");
    // Open the file mode wide so only the peer-uid check stands between nobody and the
    // arrays, and give nobody a copy of the binary it can run.
    std::fs::set_permissions(&a.control, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&a.dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = a.dir.0.join("raidkit-copy");
    std::fs::copy(RAIDKIT, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    use std::os::unix::process::CommandExt;
    let out = Command::new(&bin)
        .args(["fail", "--control", a.ctl(), "--member", s(&a.members[0])])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("may not use this control socket"), "{err}");
    assert_eq!(
        a.detail()["status"]["degraded"],
        false,
        "nothing was failed"
    );
}

#[test]
fn serve_refuses_bad_fault_rules_and_unusable_global_spares() {
    let dir = TempDir::new("serve-refusals");
    let members: Vec<PathBuf> = (0..3).map(|i| dir.0.join(format!("m{i}.img"))).collect();
    let mut args = vec!["create", "--level", "5", "--image-size", "8M"];
    args.extend(members.iter().map(|p| s(p)));
    ok(&args);
    let other: Vec<PathBuf> = (0..2).map(|i| dir.0.join(format!("o{i}.img"))).collect();
    let mut args = vec!["create", "--level", "1", "--image-size", "8M"];
    args.extend(other.iter().map(|p| s(p)));
    ok(&args);
    let before: Vec<Vec<u8>> = members.iter().map(|m| std::fs::read(m).unwrap()).collect();
    let socket = dir.0.join("nbd.sock");
    let outsider = dir.0.join("outsider.img");
    std::fs::write(&outsider, vec![0u8; 1 << 20]).unwrap();
    let missing = dir.0.join("missing.img");

    let inject_m1 = |rules: &str| format!("{}={rules}", s(&members[1]));
    let inject_outsider = format!("{}=fail-after=1", s(&outsider));
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            vec!["--inject".into(), inject_m1("explode=1")],
            2,
            "unknown fault rule",
        ),
        (
            vec!["--inject".into(), inject_m1("read-error=2000")],
            2,
            "per mille",
        ),
        (
            vec!["--inject".into(), s(&members[1]).into()],
            2,
            "MEMBER=RULES",
        ),
        (
            vec!["--inject".into(), inject_outsider],
            2,
            "not a member of a served array",
        ),
        (
            vec![
                "--inject".into(),
                inject_m1("delay=1ms"),
                "--inject".into(),
                inject_m1("fail-after=9"),
            ],
            2,
            "given twice",
        ),
        (
            vec!["--spare".into(), s(&members[2]).into()],
            3,
            "member of a served array",
        ),
        (
            vec!["--spare".into(), s(&other[0]).into()],
            3,
            "carries an md superblock",
        ),
        (
            vec!["--spare".into(), s(&missing).into()],
            2,
            "--spare-size",
        ),
        (
            vec![
                "--spare".into(),
                s(&outsider).into(),
                "--spare".into(),
                s(&outsider).into(),
            ],
            2,
            "given twice",
        ),
    ];
    for (extra, code, says) in cases {
        let mut cmd = vec!["serve", "--socket", s(&socket)];
        cmd.extend(members.iter().map(|p| s(p)));
        cmd.extend(extra.iter().map(String::as_str));
        let (got, err) = exit_code(&cmd);
        assert_eq!(got, code, "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(!socket.exists(), "{extra:?}: the server started listening");
    }
    assert!(!missing.exists(), "a refused start created a spare file");
    for (m, b) in members.iter().zip(&before) {
        assert!(std::fs::read(m).unwrap() == *b, "{} changed", m.display());
    }
}

#[test]
fn serve_maps_fully_allocated_tmpfs_members_unless_told_not_to() {
    let shm = Path::new("/dev/shm");
    let fs_type = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(shm)
        .output()
        .unwrap();
    if String::from_utf8_lossy(&fs_type.stdout).trim() != "tmpfs" {
        eprintln!("skipped: /dev/shm is not tmpfs here");
        return;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = TempDir(shm.join(format!("raidkit-map-{}-{nanos}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let members: Vec<PathBuf> = (0..3).map(|i| dir.0.join(format!("m{i}.img"))).collect();
    let mut args = vec!["create", "--level", "0", "--image-size", "8M"];
    args.extend(members.iter().map(|p| s(p)));
    ok(&args);
    // Sparse images (as created) stay unmapped; m0 and m1 are then allocated in full.
    for m in &members[..2] {
        raidkit_disk::allocate_in_full(m).unwrap();
    }
    let serve = |extra: &[&str]| -> String {
        let socket = dir.0.join("nbd.sock");
        let log = dir.0.join("serve.log");
        let _ = std::fs::remove_file(&socket);
        let mut child = Command::new(RAIDKIT)
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .arg("--no-control")
            .args(extra)
            .args(&members)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "no socket appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: kill with the pid of our own child and a valid signal.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        assert!(child.wait().unwrap().success());
        std::fs::read_to_string(&log).unwrap()
    };
    let log = serve(&[]);
    let mapped: Vec<&str> = log.lines().filter(|l| l.contains("mapped")).collect();
    assert_eq!(mapped.len(), 2, "{log}");
    assert!(
        mapped[0].contains("m0.img") && mapped[1].contains("m1.img"),
        "{log}"
    );
    let log = serve(&["--no-map"]);
    assert!(!log.contains("mapped"), "{log}");
}
