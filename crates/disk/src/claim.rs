//! Claims: one owner per member across processes.
//!
//! Owns: taking and reporting the claim a [`crate::FileDisk`] holds on its member for as long as
//! it is open. Two raidkit processes writing the same members split their superblocks and
//! corrupt data, and a command that changes a served array's members is undone when the server
//! stops; a claim makes the second opener fail at open, before it reads a superblock.
//!
//! - Every member: `flock` on the open file description, exclusive for a read-write open and
//!   shared for a read-only one, so any number of read-only users may look at a member that no
//!   one writes, and no one may look while someone writes (what they would read is in flux).
//!   `flock` and not OFD (`fcntl`) locks: an OFD write lock needs a descriptor open for
//!   writing, and `/proc/locks` names the process that took a `flock`, which the error passes on.
//! - Block devices opened for writing are also opened with `O_EXCL`: the kernel then refuses a
//!   device that is mounted, assembled by md or dm, or opened exclusively by anyone else.
//!
//! Lifetime: the claim lives exactly as long as the open file description, so as long as the
//! `FileDisk`; it is dropped on exec (the descriptor is `O_CLOEXEC`, Rust's default). A fork
//! without exec would share it: raidkit never forks without exec.
//!
//! Limits: `flock` claims are advisory; a program that ignores them (dd, a text editor) is not
//! stopped, and on NFS they are emulated with byte-range locks by the client.

use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// What a member is claimed for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Claim {
    /// Exclusive when opened for writing, shared when read-only (the default).
    #[default]
    ByMode,
    /// No claim. Only for tools that look at members alongside their owner on purpose
    /// (tests that check an owner's bytes while it runs).
    Unclaimed,
}

/// Who holds a claim that refused ours, as far as it can be known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// A process holding a `flock` on the member: its PID and command line.
    Process {
        pid: u32,
        /// The holder's command line, when it is still there to be read.
        argv: Vec<String>,
    },
    /// The kernel holds the block device: mounted, or a member of md or dm.
    Kernel(String),
    /// The claim is held, but by whom cannot be told (another PID namespace, a vanished
    /// process that left its descriptor to a child, an exclusive opener other than raidkit).
    Unknown,
}

impl Holder {
    /// The holder's program name (`raidkit`), when it is a process whose command is known.
    pub fn program(&self) -> Option<&str> {
        match self {
            Holder::Process { argv, .. } => argv.first().map(|a| {
                Path::new(a)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or(a)
            }),
            _ => None,
        }
    }

    /// The value of `--flag VALUE` or `--flag=VALUE` on the holder's command line.
    pub fn argument(&self, flag: &str) -> Option<&str> {
        let Holder::Process { argv, .. } = self else {
            return None;
        };
        let mut it = argv.iter();
        while let Some(a) = it.next() {
            if a == flag {
                return it.next().map(String::as_str);
            }
            if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                return Some(v);
            }
        }
        None
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Process { pid, argv } if argv.is_empty() => write!(f, "process {pid}"),
            Holder::Process { pid, argv } => {
                let mut command = argv.join(" ");
                if command.len() > 200 {
                    let mut cut = 200;
                    while !command.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    command.truncate(cut);
                    command.push('…');
                }
                write!(f, "process {pid} ({command})")
            }
            Holder::Kernel(what) => write!(f, "the kernel ({what})"),
            Holder::Unknown => write!(f, "another process"),
        }
    }
}

/// Takes the claim on an open member: `Ok(())`, or `Err(holder)` when someone else has it.
/// `Err` for other errors of `flock` too: a member whose claim cannot be taken is not used.
pub(crate) fn take(
    file: &std::fs::File,
    exclusive: bool,
) -> Result<(), Result<Holder, std::io::Error>> {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    } | libc::LOCK_NB;
    // A child this process starts holds a copy of every descriptor from its fork to its exec
    // (close-on-exec closes them only then), and with it any claim: a conflict whose holder
    // is this very process (or gone by the time we look) is waited out this long.
    let patience = std::time::Duration::from_millis(500);
    let start = std::time::Instant::now();
    loop {
        // SAFETY: flock on a valid descriptor with a plain integer argument.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => {
                let holder = flock_holder(file);
                let ours = match &holder {
                    Holder::Process { pid, .. } => *pid == std::process::id(),
                    Holder::Unknown => true,
                    _ => false,
                };
                if !ours || start.elapsed() >= patience {
                    return Err(Ok(holder));
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            _ => return Err(Err(err)),
        }
    }
}

/// The process that holds a `flock` on `file`, from `/proc/locks`.
fn flock_holder(file: &std::fs::File) -> Holder {
    let Ok(meta) = file.metadata() else {
        return Holder::Unknown;
    };
    let own = std::process::id();
    // The holder may be letting go right now: a few looks, then Unknown.
    for _ in 0..3 {
        let Some(locks) = read_proc_locks() else {
            return Holder::Unknown;
        };
        let pid = locks_holding(&locks, meta.dev(), meta.ino())
            .into_iter()
            // Our own other opens of the member hold it too; another process is more telling.
            .max_by_key(|&p| p != own);
        if let Some(pid) = pid {
            return Holder::Process {
                pid,
                argv: command_line(pid),
            };
        }
    }
    Holder::Unknown
}

/// `/proc/locks` in one `read`: the kernel lists the locks under its lock-list lock within
/// one read call, while successive small reads (what `read_to_string` starts with) restart
/// the listing at an offset, and lines shift when other locks come and go in between.
fn read_proc_locks() -> Option<String> {
    use std::io::Read;
    let mut f = std::fs::File::open("/proc/locks").ok()?;
    let mut buf = vec![0u8; 1 << 20];
    let n = f.read(&mut buf).ok()?;
    buf.truncate(n);
    String::from_utf8(buf).ok()
}

/// PIDs of the `flock` holders of the inode `(dev, ino)` listed in `locks` (the text of
/// `/proc/locks`), waiters left out. Lines read
/// `1: FLOCK  ADVISORY  WRITE 1234 fe:00:5325234 0 EOF`, with the device as hexadecimal
/// major:minor. A filesystem whose `stat` device differs from its superblock's (btrfs
/// subvolumes) is matched by inode alone.
fn locks_holding(locks: &str, dev: u64, ino: u64) -> Vec<u32> {
    let want_dev = format!("{:02x}:{:02x}", libc::major(dev), libc::minor(dev));
    let mut exact = Vec::new();
    let mut by_inode = Vec::new();
    for line in locks.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // A waiter's line has "->" after the number.
        if fields.len() < 6 || fields[1] == "->" || fields[1] != "FLOCK" {
            continue;
        }
        let Ok(pid) = fields[4].parse::<u32>() else {
            continue;
        };
        let Some((devpart, inode)) = fields[5].rsplit_once(':') else {
            continue;
        };
        if inode.parse::<u64>().ok() != Some(ino) {
            continue;
        }
        if devpart == want_dev {
            exact.push(pid);
        } else {
            by_inode.push(pid);
        }
    }
    if exact.is_empty() {
        by_inode
    } else {
        exact
    }
}

/// A process's command line, empty when it cannot be read.
pub(crate) fn command_line(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Why the kernel refused an exclusive open of the block device at `path` (EBUSY): mounted
/// (from `/proc/self/mountinfo`), held by md or dm (`/sys/dev/block/M:N/holders`), or, failing
/// those, a raidkit process's `flock`.
pub(crate) fn block_device_holder(path: &Path) -> Holder {
    let Ok(meta) = std::fs::metadata(path) else {
        return Holder::Unknown;
    };
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    if let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") {
        let id = format!("{major}:{minor}");
        // Fields: id parent major:minor root mountpoint ...
        if let Some(point) = info.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 4 && f[2] == id).then(|| f[4].to_string())
        }) {
            return Holder::Kernel(format!("mounted at {point}"));
        }
    }
    let holders = format!("/sys/dev/block/{major}:{minor}/holders");
    if let Ok(entries) = std::fs::read_dir(&holders) {
        let names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if !names.is_empty() {
            return Holder::Kernel(format!("held by {}", names.join(", ")));
        }
    }
    // Another raidkit holds it open exclusively; its flock on the device node names it.
    if let Ok(f) = std::fs::File::open(path) {
        if let Holder::Process { pid, argv } = flock_holder(&f) {
            return Holder::Process { pid, argv };
        }
    }
    Holder::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines_name_their_holders() {
        let dev = libc::makedev(0xfe, 0);
        let text = "\
1: FLOCK  ADVISORY  WRITE 6100 fe:00:5325234 0 EOF
1: -> FLOCK  ADVISORY  WRITE 7000 fe:00:5325234 0 EOF
2: FLOCK  ADVISORY  READ 6101 fe:00:10133507 0 EOF
3: POSIX  ADVISORY  WRITE 6102 fe:00:5325234 0 EOF
4: FLOCK  ADVISORY  READ 6103 00:2d:5325234 0 EOF
";
        assert_eq!(locks_holding(text, dev, 5325234), vec![6100]);
        assert_eq!(locks_holding(text, dev, 10133507), vec![6101]);
        // Only the inode matches (a btrfs subvolume's stat device): matched by inode.
        assert_eq!(
            locks_holding(text, libc::makedev(0, 0x77), 5325234),
            vec![6100, 6103]
        );
        assert!(locks_holding(text, dev, 42).is_empty());
    }

    #[test]
    fn holder_arguments_are_read_both_ways() {
        let h = Holder::Process {
            pid: 1,
            argv: vec![
                "/usr/bin/raidkit".into(),
                "serve".into(),
                "--socket".into(),
                "/run/md0.sock".into(),
                "--control=/run/c".into(),
            ],
        };
        assert_eq!(h.program(), Some("raidkit"));
        assert_eq!(h.argument("--socket"), Some("/run/md0.sock"));
        assert_eq!(h.argument("--control"), Some("/run/c"));
        assert_eq!(h.argument("--port"), None);
        assert_eq!(Holder::Unknown.argument("--socket"), None);
    }
}
