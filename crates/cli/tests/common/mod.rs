//! Helpers the CLI's integration tests share: temporary folders, running the real binary,
//! member digests, and a `raidkit serve` child that is stopped however a test ends.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

/// A folder removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        Self::new_in(&std::env::temp_dir(), tag)
    }

    pub fn new_in(parent: &Path, tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let p = parent.join(format!("raidkit-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// `n` member paths named `{prefix}{i}.img` in the folder.
    pub fn members(&self, prefix: &str, n: usize) -> Vec<PathBuf> {
        (0..n)
            .map(|i| self.path(&format!("{prefix}{i}.img")))
            .collect()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The path of `name` in the folder, as a string.
    pub fn file(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// File names in the folder, sorted.
    pub fn listing(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs the binary (in UTC, so printed times compare with mdadm's).
pub fn raidkit(args: &[&str]) -> Output {
    Command::new(RAIDKIT)
        .args(args)
        .env("TZ", "UTC")
        .output()
        .unwrap()
}

/// Runs raidkit and fails the test unless it exits 0; returns stdout.
pub fn ok(args: &[&str]) -> String {
    let out = raidkit(args);
    assert!(
        out.status.success(),
        "raidkit {args:?} exited {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs raidkit; returns its exit code (-1 when a signal ended it) and stderr.
pub fn exit_code(args: &[&str]) -> (i32, String) {
    let out = raidkit(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs raidkit expecting a failure; returns its exit code and stderr.
pub fn fails(args: &[&str]) -> (i32, String) {
    let out = raidkit(args);
    assert!(
        !out.status.success(),
        "raidkit {args:?} succeeded but should have failed\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `head`, then the members' paths, then `tail`.
pub fn with<'a>(head: &[&'a str], members: &'a [PathBuf], tail: &[&'a str]) -> Vec<&'a str> {
    let mut v = head.to_vec();
    v.extend(members.iter().map(|p| s(p)));
    v.extend_from_slice(tail);
    v
}

/// Deterministic bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Every byte of each file, to compare before and after a command.
pub fn contents(paths: &[PathBuf]) -> Vec<Vec<u8>> {
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// Asserts that every member holds the same bytes as `before`, naming the first that changed.
pub fn assert_unchanged(paths: &[PathBuf], before: &[Vec<u8>], what: &str) {
    for (p, b) in paths.iter().zip(before) {
        let now = std::fs::read(p).unwrap();
        if &now != b {
            let at = now.iter().zip(b).position(|(x, y)| x != y).unwrap_or(0);
            panic!(
                "{what}: {} changed (first differing byte {at} of {})",
                p.display(),
                now.len()
            );
        }
    }
}

/// `raidkit serve` as a child process, killed when dropped.
pub struct Server {
    pub child: Option<Child>,
    pub socket: PathBuf,
    pub control: PathBuf,
}

impl Server {
    /// Starts `raidkit serve --socket DIR/NAME.sock ARGS…` and waits for its control socket.
    pub fn start(dir: &Path, name: &str, args: &[&str]) -> Server {
        let socket = dir.join(format!("{name}.sock"));
        let control = dir.join(format!("{name}.sock.ctl"));
        let child = Command::new(RAIDKIT)
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut server = Server {
            child: Some(child),
            socket,
            control,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !server.control.exists() {
            let child = server.child.as_mut().unwrap();
            if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                let (code, err) = server.stop();
                panic!("raidkit serve did not start (exit {code:?}): {err}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGTERM (if still running); returns the exit code and everything it wrote to stderr.
    pub fn stop(&mut self) -> (Option<i32>, String) {
        let child = self.child.take().expect("server running");
        // SAFETY: kill with the pid of our own child and a valid signal.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A tmpfs of `bytes` mounted on a fresh folder (a filesystem that fills up on purpose),
/// unmounted when dropped. `None`, with a note, where mounting needs root and we are not.
pub struct SmallFs {
    pub dir: TempDir,
}

impl SmallFs {
    pub fn mount(tag: &str, bytes: u64) -> Option<SmallFs> {
        let dir = TempDir::new(tag);
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes}"))
            .arg("raidkit-test")
            .arg(&dir.0)
            .output()
            .unwrap();
        if !out.status.success() {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                eprintln!("skipped: mounting a small tmpfs needs root");
                return None;
            }
            panic!(
                "mount tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Some(SmallFs { dir })
    }

    pub fn path(&self) -> &Path {
        &self.dir.0
    }

    /// Fills the filesystem to the brim with a file `name`; returns its path.
    pub fn fill(&self, name: &str) -> PathBuf {
        let p = self.dir.0.join(name);
        let mut f = std::fs::File::create(&p).unwrap();
        let chunk = vec![0x5au8; 64 << 10];
        loop {
            use std::io::Write;
            if f.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = f.sync_all();
        p
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir.0).status();
    }
}

/// A `--program` hook at `dir/NAME` that appends its arguments, one call per line, to `log`.
#[allow(dead_code)]
pub fn hook(dir: &TempDir, name: &str, log: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.path(name);
    std::fs::write(
        &path,
        format!("#!/bin/sh\necho \"$*\" >> '{}'\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}
