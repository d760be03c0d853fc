//! Members across machines: a RAID 5 whose members are NBD exports served by nbdkit (over
//! Unix sockets here; TCP is the same client). One server is killed in the middle of a write:
//! the member fails once it has not answered for RAIDKIT_NBD_TIMEOUT, the write completes
//! degraded, and every acknowledged byte reads back. The server comes back on the same file
//! and the member is re-added from the write-intent bitmap.
//!
//! Needs nbdkit (scripts/test installs it): its absence is a failure, not a skip.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

struct Nbdkit {
    sock: std::path::PathBuf,
    pidfile: std::path::PathBuf,
    pid: String,
}

impl Nbdkit {
    /// Serves `file` on a Unix socket; writes wait `wdelay` (so a write is still running
    /// when the server is killed).
    fn start(dir: &TempDir, i: usize, wdelay: &str) -> Nbdkit {
        let sock = dir.path(&format!("s{i}.sock"));
        let pidfile = dir.path(&format!("p{i}.pid"));
        let _ = std::fs::remove_file(&sock);
        let file = dir.path(&format!("d{i}.img"));
        if !file.exists() {
            std::fs::File::create(&file)
                .unwrap()
                .set_len(32 << 20)
                .unwrap();
        }
        let st = Command::new("nbdkit")
            .arg("--unix")
            .arg(&sock)
            .arg("--pidfile")
            .arg(&pidfile)
            .arg("--filter=delay")
            .arg("file")
            .arg(&file)
            .arg(format!("wdelay={wdelay}"))
            .stdin(Stdio::null())
            .status()
            .expect("nbdkit runs (scripts/test installs it)");
        assert!(st.success(), "nbdkit did not start");
        for _ in 0..100 {
            let pid_written = std::fs::read_to_string(&pidfile).is_ok_and(|p| !p.trim().is_empty());
            if pid_written && sock.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let pid = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .to_string();
        Nbdkit { sock, pidfile, pid }
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.sock.display())
    }

    fn kill(&mut self) {
        if !self.pid.is_empty() {
            let _ = Command::new("kill").arg("-9").arg(&self.pid).status();
            self.pid.clear();
        }
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        self.kill();
    }
}

fn run_env(args: &[&str]) -> std::process::Output {
    Command::new(RAIDKIT)
        .args(args)
        .env("RAIDKIT_NBD_TIMEOUT", "1")
        .output()
        .unwrap()
}

#[test]
fn an_nbd_member_that_vanishes_mid_write_fails_and_comes_back_by_re_add() {
    let dir = TempDir::new("nbd-members");
    let mut servers: Vec<Nbdkit> = (0..3).map(|i| Nbdkit::start(&dir, i, "0")).collect();
    let uris: Vec<String> = servers.iter().map(Nbdkit::uri).collect();
    let u: Vec<&str> = uris.iter().map(String::as_str).collect();
    let mut create = vec![
        "create",
        "--level",
        "5",
        "--chunk",
        "64K",
        "--consistency-policy",
        "bitmap",
    ];
    create.extend(&u);
    ok(&create);
    // Server 1 again, slow to write: the write below is still running when it is killed.
    // A request's chunks on a member go to it as one NBD write, so the 12 MiB are only a few
    // writes to server 1: each waits 600 ms (at 40 ms the whole write took under 700 ms).
    servers[1].kill();
    let _ = std::fs::remove_file(&servers[1].pidfile);
    servers[1] = Nbdkit::start(&dir, 1, "600ms");

    let input = dir.path("in.bin");
    let data = pattern(12 << 20, 5);
    std::fs::write(&input, &data).unwrap();
    let mut write = vec!["write", "--input", s(&input)];
    write.extend(&u);
    let writer = {
        let args: Vec<String> = write.iter().map(|a| a.to_string()).collect();
        std::thread::spawn(move || {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            run_env(&a)
        })
    };
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        !writer.is_finished(),
        "the write ended before the server was killed"
    );
    servers[1].kill();
    let out = writer.join().unwrap();
    assert!(
        out.status.success(),
        "the write did not complete degraded: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Every acknowledged byte is there, read from the two servers left.
    let left = [u[0], u[2]];
    let back = dir.path("back.bin");
    let len = data.len().to_string();
    let mut read = vec!["read", "--length", &len, "-o", s(&back)];
    read.extend(&left);
    let out = run_env(&read);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read(&back).unwrap() == data, "data lost");
    let mut detail = vec!["detail"];
    detail.extend(&left);
    let text = String::from_utf8_lossy(&run_env(&detail).stdout).into_owned();
    assert!(text.contains("degraded"), "{text}");

    // The server comes back on its file; the member returns through the bitmap.
    let _ = std::fs::remove_file(&servers[1].pidfile);
    servers[1] = Nbdkit::start(&dir, 1, "0");
    let mut add = vec!["add", "--member", u[1]];
    add.extend(&left);
    let out = run_env(&add);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("re-added"), "not a re-add: {said}");
    let mut detail = vec!["detail"];
    detail.extend(&u);
    let text = ok(&detail);
    assert!(
        text.contains("State : clean") && !text.contains("degraded"),
        "{text}"
    );
    let mut read = vec!["read", "--length", &len, "-o", s(&back)];
    read.extend(&u);
    ok(&read);
    assert!(std::fs::read(&back).unwrap() == data);
}
