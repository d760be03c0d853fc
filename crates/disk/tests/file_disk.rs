//! FileDisk against real files (temp dir, tmpfs) and, as root, a loop device.

use raidkit_disk::{
    AlignedBuf, Claim, DirectIo, Disk, DiskErrorKind, FileDisk, Holder, OpenOptions,
};
use std::io::{IoSlice, IoSliceMut};
use std::path::PathBuf;
use std::process::Command;

fn temp_path(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!("raidkit-disk-{tag}-{}-{nanos}", std::process::id()))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn exercise(disk: &dyn Disk) {
    let size = disk.size_bytes();
    assert!(size >= 1 << 20);
    // aligned and unaligned I/O round-trips
    for (off, len, seed) in [
        (0u64, 4096usize, 1u8),
        (4097, 3000, 2),
        (65536 + 17, 70000, 3),
    ] {
        let data = pattern(len, seed);
        disk.write_at(&data, off).unwrap();
        let mut back = vec![0u8; len];
        disk.read_at(&mut back, off).unwrap();
        assert_eq!(back, data, "round trip at {off}");
    }
    // writes with FUA (RWF_DSYNC) land the same way, aligned or not
    for (off, len, seed) in [(131072u64, 8192usize, 4u8), (200_003, 5000, 5)] {
        let data = pattern(len, seed);
        disk.write_fua(&data, off).unwrap();
        let mut back = vec![0u8; len];
        disk.read_at(&mut back, off).unwrap();
        assert_eq!(back, data, "FUA round trip at {off}");
    }
    let err = disk.write_fua(&[0u8; 4096], size - 1).unwrap_err();
    assert!(matches!(err.kind, DiskErrorKind::OutOfRange { .. }));
    // neighbours of an unaligned write are preserved
    let mut around = vec![0u8; 8192];
    disk.read_at(&mut around, 0).unwrap();
    assert_eq!(&around[..4096], &pattern(4096, 1)[..]);
    assert_eq!(&around[4097..7097], &pattern(3000, 2)[..]);
    disk.flush().unwrap();
    // discard and write_zeroes read back as zeroes
    disk.discard(65536, 65536).unwrap();
    disk.write_zeroes(0, 4096).unwrap();
    let mut z = vec![1u8; 65536];
    disk.read_at(&mut z, 65536).unwrap();
    assert!(z.iter().all(|&b| b == 0));
    let mut z = vec![1u8; 4096];
    disk.read_at(&mut z, 0).unwrap();
    assert!(z.iter().all(|&b| b == 0));
    // past the end is an error naming the member
    let mut b = [0u8; 2];
    let err = disk.read_at(&mut b, size - 1).unwrap_err();
    assert!(matches!(err.kind, DiskErrorKind::OutOfRange { .. }));
    assert!(err.to_string().contains(disk.name()));
    vectored(disk);
}

/// Pieces that follow each other on the disk from buffers apart in memory, aligned (one
/// `preadv`/`pwritev` on O_DIRECT) and not (each piece bounced), read back both ways.
fn vectored(disk: &dyn Disk) {
    let mut aligned: Vec<AlignedBuf> = (0..3)
        .map(|i| {
            let mut b = AlignedBuf::new(8192 * (i + 1), 4096).unwrap();
            b.copy_from_slice(&pattern(8192 * (i + 1), 40 + i as u8));
            b
        })
        .collect();
    let unaligned: Vec<Vec<u8>> = (0..3).map(|i| pattern(1000 + i, 50 + i as u8)).collect();
    for (pieces, off) in [
        (
            aligned.iter().map(|b| &b[..]).collect::<Vec<_>>(),
            1u64 << 19,
        ),
        (unaligned.iter().map(|b| &b[..]).collect(), (1 << 19) + 3),
    ] {
        let whole: Vec<u8> = pieces.concat();
        let mut slices: Vec<IoSlice> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        disk.write_vectored_at(&mut slices, off).unwrap();
        let mut back = vec![0u8; whole.len()];
        disk.read_at(&mut back, off).unwrap();
        assert!(back == whole, "vectored write at {off} reads back");
        disk.write_at(&pattern(whole.len(), 9), off).unwrap();
        let mut into: Vec<AlignedBuf> = pieces
            .iter()
            .map(|p| AlignedBuf::new(p.len(), 4096).unwrap())
            .collect();
        // An AlignedBuf rounds its length up: each piece is its first p.len() bytes.
        let mut slices: Vec<IoSliceMut> = into
            .iter_mut()
            .zip(&pieces)
            .map(|(b, p)| IoSliceMut::new(&mut b[..p.len()]))
            .collect();
        disk.read_vectored_at(&mut slices, off).unwrap();
        let got: Vec<u8> = into
            .iter()
            .zip(&pieces)
            .flat_map(|(b, p)| b[..p.len()].iter().copied())
            .collect();
        assert!(got == pattern(whole.len(), 9), "vectored read at {off}");
    }
    aligned.clear();
    let err = disk
        .write_vectored_at(
            &mut [IoSlice::new(&[0u8; 4096]); 2],
            disk.size_bytes() - 4096,
        )
        .unwrap_err();
    assert!(matches!(err.kind, DiskErrorKind::OutOfRange { .. }));
}

#[test]
fn image_file_create_open_and_io() {
    let path = temp_path("img");
    let disk = FileDisk::create(&path, 4 << 20).unwrap();
    assert_eq!(disk.size_bytes(), 4 << 20);
    exercise(&disk);
    drop(disk);
    // sparse: created with a size but little allocated
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), 4 << 20);
    // reopen read-only: reads work, writes are refused and change nothing
    let ro = FileDisk::open(
        &path,
        OpenOptions {
            read_only: true,
            direct: DirectIo::Never,
            map_memory: false,
            ..Default::default()
        },
    )
    .unwrap();
    let before = std::fs::read(&path).unwrap();
    assert!(matches!(
        ro.write_at(b"x", 0).unwrap_err().kind,
        DiskErrorKind::ReadOnly
    ));
    assert!(matches!(
        ro.discard(0, 4096).unwrap_err().kind,
        DiskErrorKind::ReadOnly
    ));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn direct_io_preference_on_tmpfs() {
    // Older kernels refuse O_DIRECT on tmpfs (the disk then falls back to buffered I/O); newer
    // ones accept it. Either way the bytes must round-trip, unaligned requests included.
    let path = PathBuf::from(format!(
        "/dev/shm/raidkit-disk-direct-{}",
        std::process::id()
    ));
    let disk = FileDisk::create(&path, 2 << 20).unwrap();
    drop(disk);
    let disk = FileDisk::open(
        &path,
        OpenOptions {
            read_only: false,
            direct: DirectIo::Prefer,
            map_memory: false,
            ..Default::default()
        },
    )
    .unwrap();
    exercise(&disk);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn direct_io_on_a_regular_filesystem() {
    // /var/tmp is on a disk-backed filesystem here; O_DIRECT either works or falls back, and
    // both must give the same bytes, including unaligned requests.
    let path = PathBuf::from(format!(
        "/var/tmp/raidkit-disk-odirect-{}",
        std::process::id()
    ));
    drop(FileDisk::create(&path, 2 << 20).unwrap());
    let disk = FileDisk::open(
        &path,
        OpenOptions {
            read_only: false,
            direct: DirectIo::Prefer,
            map_memory: false,
            ..Default::default()
        },
    )
    .unwrap();
    exercise(&disk);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn not_a_disk_is_refused() {
    let err = FileDisk::open(std::env::temp_dir(), OpenOptions::default()).unwrap_err();
    assert!(matches!(err.kind, DiskErrorKind::NotADisk), "{err}");
    let err = FileDisk::open("/nonexistent/raidkit", OpenOptions::default()).unwrap_err();
    assert!(matches!(err.kind, DiskErrorKind::Io(_)), "{err}");
}

fn read_only() -> OpenOptions {
    OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    }
}

/// The holder named by a refused claim, and whether we wanted to write.
fn refused(result: Result<FileDisk, raidkit_disk::DiskError>) -> (bool, Holder) {
    match result {
        Err(e) => match e.kind {
            DiskErrorKind::Claimed { exclusive, holder } => (exclusive, holder),
            other => panic!("refused for another reason: {other:?}"),
        },
        Ok(_) => panic!("opened a member someone else holds"),
    }
}

#[test]
fn a_member_is_claimed_for_writing_by_one_and_for_reading_by_many() {
    let path = temp_path("claim");
    drop(FileDisk::create(&path, 1 << 20).unwrap());
    let own = std::process::id();
    {
        let writer = FileDisk::open(&path, OpenOptions::default()).unwrap();
        // A second writer and a reader are refused while the writer has it; the error names
        // this process.
        let (exclusive, holder) = refused(FileDisk::open(&path, OpenOptions::default()));
        assert!(exclusive);
        assert!(
            matches!(&holder, Holder::Process { pid, argv } if *pid == own && !argv.is_empty()),
            "{holder:?}"
        );
        let (exclusive, _) = refused(FileDisk::open(&path, read_only()));
        assert!(!exclusive);
        // create of an existing member is an open like any other: refused, file untouched.
        refused(FileDisk::create(&path, 2 << 20));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
        drop(writer);
    }
    {
        // Readers share; a writer waits for all of them to go.
        let r1 = FileDisk::open(&path, read_only()).unwrap();
        let r2 = FileDisk::open(&path, read_only()).unwrap();
        refused(FileDisk::open(&path, OpenOptions::default()));
        drop(r1);
        refused(FileDisk::open(&path, OpenOptions::default()));
        drop(r2);
    }
    // Unclaimed opens neither take nor respect claims.
    let writer = FileDisk::open(&path, OpenOptions::default()).unwrap();
    let watcher = FileDisk::open(
        &path,
        OpenOptions {
            claim: Claim::Unclaimed,
            ..read_only()
        },
    )
    .unwrap();
    drop((writer, watcher));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_claim_held_by_another_process_names_it_and_is_not_passed_on_to_children() {
    let path = temp_path("claim-proc");
    drop(FileDisk::create(&path, 1 << 20).unwrap());
    // util-linux flock(1) takes flock(2) on the file, as a raidkit process would (-o: the
    // command it runs does not inherit the descriptor, so killing flock frees the file).
    let mut holder = Command::new("flock")
        .args(["-o", "-x"])
        .arg(&path)
        .args(["sleep", "60"])
        .spawn()
        .expect("flock(1) runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (exclusive, who) = loop {
        match FileDisk::open(&path, OpenOptions::default()) {
            Ok(d) => {
                drop(d);
                assert!(std::time::Instant::now() < deadline, "flock never took it");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => match e.kind {
                DiskErrorKind::Claimed { exclusive, holder } => break (exclusive, holder),
                other => panic!("{other:?}"),
            },
        }
    };
    assert!(exclusive);
    match &who {
        Holder::Process { pid, argv } => {
            assert_eq!(*pid, holder.id(), "{who:?}");
            assert_eq!(argv.first().map(String::as_str), Some("flock"), "{who:?}");
        }
        other => panic!("holder not named: {other:?}"),
    }
    let text = FileDisk::open(&path, read_only()).unwrap_err().to_string();
    assert!(text.contains(&holder.id().to_string()), "{text}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    // Our own claim does not outlive us into a program we start: the child's exec closes it.
    let disk = FileDisk::open(&path, OpenOptions::default()).unwrap();
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    drop(disk);
    // Other tests in this binary start programs too: between their fork and exec a child
    // briefly holds a copy of every descriptor, ours included. Such a copy is gone within
    // milliseconds; a claim `sleep` inherited would last its whole minute.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let again = loop {
        let attempt = FileDisk::open(&path, OpenOptions::default());
        if attempt.is_ok() || std::time::Instant::now() > deadline {
            break attempt;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(again.is_ok(), "a child kept the claim: {:?}", again.err());
    std::fs::remove_file(&path).unwrap();
}

/// Runs `f` on a fresh 8 MiB loop device, detaching it however `f` ends.
fn with_loop_device(tag: &str, f: impl FnOnce(&str) + std::panic::UnwindSafe) {
    // The machine has loop devices and tests run as root; a failure to set one up is a failure.
    let backing = PathBuf::from(format!(
        "/var/tmp/raidkit-disk-{tag}-{}",
        std::process::id()
    ));
    drop(FileDisk::create(&backing, 8 << 20).unwrap());
    let out = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&backing)
        .output()
        .expect("losetup runs");
    assert!(
        out.status.success(),
        "losetup failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let result = std::panic::catch_unwind(|| f(&dev));
    let _ = Command::new("losetup").arg("-d").arg(&dev).status();
    std::fs::remove_file(&backing).unwrap();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

#[test]
fn a_block_device_is_opened_exclusively_for_writing() {
    with_loop_device("excl", |dev| {
        let disk = FileDisk::open(dev, OpenOptions::default()).unwrap();
        let (exclusive, holder) = refused(FileDisk::open(dev, OpenOptions::default()));
        assert!(exclusive);
        assert!(
            matches!(holder, Holder::Process { pid, .. } if pid == std::process::id()),
            "{holder:?}"
        );
        drop(disk);
        // Mounted: the kernel holds it, and says where.
        let fs = Command::new("mkfs.ext4").args(["-q", "-F", dev]).status();
        assert!(fs.expect("mkfs.ext4 runs").success());
        let point = temp_path("mnt");
        std::fs::create_dir_all(&point).unwrap();
        assert!(Command::new("mount")
            .arg(dev)
            .arg(&point)
            .status()
            .unwrap()
            .success());
        let result = FileDisk::open(dev, OpenOptions::default());
        let _ = Command::new("umount").arg(&point).status();
        let _ = std::fs::remove_dir(&point);
        let (_, holder) = refused(result);
        assert!(
            matches!(&holder, Holder::Kernel(what) if what.contains(point.to_str().unwrap())),
            "{holder:?}"
        );
    });
}

#[test]
fn loop_device_with_o_direct() {
    // The machine has loop devices and tests run as root; a failure to set one up is a failure.
    let backing = PathBuf::from(format!("/var/tmp/raidkit-disk-loop-{}", std::process::id()));
    drop(FileDisk::create(&backing, 8 << 20).unwrap());
    let out = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&backing)
        .output()
        .expect("losetup runs");
    assert!(
        out.status.success(),
        "losetup failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let result = std::panic::catch_unwind(|| {
        let disk = FileDisk::open(&dev, OpenOptions::default()).unwrap();
        assert!(disk.is_block_device());
        assert_eq!(disk.size_bytes(), 8 << 20);
        assert!(disk.is_direct(), "a loop device accepts O_DIRECT");
        exercise(&disk);
        // A loop device has no drive to answer SMART: smartctl (scripts/test installs it)
        // says why, and the member reports no health rather than a made-up one.
        match disk.health() {
            raidkit_disk::Health::Unavailable { reason } => assert!(
                reason.contains("Unable to detect device type"),
                "smartctl's reason for a loop device: {reason}"
            ),
            other => panic!("a loop device reported health: {other:?}"),
        }
    });
    let _ = Command::new("losetup").arg("-d").arg(&dev).status();
    std::fs::remove_file(&backing).unwrap();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

/// A file in /dev/shm when it is tmpfs (where mapping applies), else None and a note.
fn shm_path(tag: &str) -> Option<PathBuf> {
    let shm = std::path::Path::new("/dev/shm");
    let out = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(shm)
        .output()
        .ok()?;
    if String::from_utf8_lossy(&out.stdout).trim() != "tmpfs" {
        eprintln!("skipped: /dev/shm is not tmpfs here");
        return None;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    Some(shm.join(format!("raidkit-disk-{tag}-{}-{nanos}", std::process::id())))
}

fn mapped(read_only: bool) -> OpenOptions {
    OpenOptions {
        read_only,
        direct: DirectIo::Auto,
        map_memory: true,
        ..Default::default()
    }
}

fn allocated_bytes(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn a_fully_allocated_tmpfs_file_is_mapped_and_reads_and_writes_the_file() {
    use std::os::unix::fs::FileExt;
    let Some(path) = shm_path("map") else { return };
    let size = 4usize << 20;
    std::fs::write(&path, pattern(size, 9)).unwrap();
    let disk = FileDisk::open(&path, mapped(false)).unwrap();
    assert!(disk.is_mapped(), "a fully written tmpfs file is mapped");
    exercise(&disk);
    // What the disk writes is in the file, what the file gets is what the disk reads.
    let other = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    disk.write_at(&pattern(100_000, 4), 1 << 20).unwrap();
    let mut back = vec![0u8; 100_000];
    other.read_exact_at(&mut back, 1 << 20).unwrap();
    assert_eq!(back, pattern(100_000, 4));
    other.write_all_at(&pattern(5000, 5), 3 << 20).unwrap();
    let mut seen = vec![0u8; 5000];
    disk.read_at(&mut seen, 3 << 20).unwrap();
    assert_eq!(seen, pattern(5000, 5));
    // Discard freed the pages (punched a hole) and the mapping stays in use.
    let before = allocated_bytes(&path);
    disk.discard(2 << 20, 1 << 20).unwrap();
    assert!(allocated_bytes(&path) <= before - (1 << 20));
    let mut z = vec![1u8; 1 << 20];
    disk.read_at(&mut z, 2 << 20).unwrap();
    assert!(z.iter().all(|&x| x == 0));
    assert!(disk.is_mapped());
    // Read-only: mapped too, and still refuses writes (opened beside the writer on purpose,
    // so without a claim).
    let ro = FileDisk::open(
        &path,
        OpenOptions {
            claim: Claim::Unclaimed,
            ..mapped(true)
        },
    )
    .unwrap();
    assert!(ro.is_mapped());
    let mut first = vec![0u8; 4096];
    ro.read_at(&mut first, 1 << 20).unwrap();
    assert_eq!(first, pattern(100_000, 4)[..4096]);
    assert!(matches!(
        ro.write_at(&first, 0).unwrap_err().kind,
        DiskErrorKind::ReadOnly
    ));
    drop((disk, ro));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn sparse_files_and_files_not_asked_for_are_not_mapped() {
    let Some(path) = shm_path("sparse") else {
        return;
    };
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(4 << 20).unwrap();
    drop(f);
    let disk = FileDisk::open(&path, mapped(false)).unwrap();
    assert!(!disk.is_mapped(), "a sparse file keeps pread/pwrite");
    assert_eq!(
        allocated_bytes(&path),
        0,
        "nothing was allocated by opening it"
    );
    let mut b = vec![1u8; 1 << 20];
    disk.read_at(&mut b, 0).unwrap();
    assert!(b.iter().all(|&x| x == 0));
    assert_eq!(
        allocated_bytes(&path),
        0,
        "reading a hole allocated nothing"
    );
    drop(disk);
    // Allocated in full by fallocate (never written: tmpfs calls those pages holes for
    // SEEK_HOLE, yet they exist): mapped, and reads zeroes.
    raidkit_disk::allocate_in_full(&path).unwrap();
    let disk = FileDisk::open(&path, mapped(false)).unwrap();
    assert!(disk.is_mapped(), "a file allocated in full is mapped");
    let mut b = vec![1u8; 1 << 20];
    disk.read_at(&mut b, 3 << 20).unwrap();
    assert!(b.iter().all(|&x| x == 0));
    drop(disk);
    std::fs::write(&path, pattern(1 << 20, 1)).unwrap();
    let plain = FileDisk::open(&path, OpenOptions::default()).unwrap();
    assert!(!plain.is_mapped(), "mapping is only done when asked for");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_file_truncated_under_its_mapping_gives_errors_and_right_bytes_not_a_crash() {
    let Some(path) = shm_path("trunc") else {
        return;
    };
    let size = 4usize << 20;
    std::fs::write(&path, pattern(size, 3)).unwrap();
    let disk = FileDisk::open(&path, mapped(false)).unwrap();
    assert!(disk.is_mapped());
    // A SIGBUS sent to the process (not raised by an access) is not taken for a vanished page,
    // and does not leave the mapping unprotected (Rust's handler resets the action).
    // SAFETY: raise with a valid signal; Rust's runtime handles SIGBUS in test binaries.
    unsafe { libc::raise(libc::SIGBUS) };
    assert!(disk.is_mapped());
    // Someone else cuts the file in half: the mapping's upper pages are gone (SIGBUS).
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(size as u64 / 2)
        .unwrap();
    let mut b = vec![0u8; 8192];
    let err = disk.read_at(&mut b, 3 << 20).unwrap_err();
    assert!(matches!(err.kind, DiskErrorKind::Io(_)), "{err}");
    assert!(!disk.is_mapped(), "a faulted mapping is not used again");
    // What is still there reads right, through the system calls now.
    let mut low = vec![0u8; 8192];
    disk.read_at(&mut low, 4096).unwrap();
    assert_eq!(low, pattern(size, 3)[4096..4096 + 8192]);
    disk.write_at(&pattern(4096, 8), 0).unwrap();
    let mut w = vec![0u8; 4096];
    disk.read_at(&mut w, 0).unwrap();
    assert_eq!(w, pattern(4096, 8));
    drop(disk);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_full_filesystem_is_found_when_space_is_reserved() {
    // A 4 MiB tmpfs holding a 16 MiB sparse image.
    let point = temp_path("smallfs");
    std::fs::create_dir_all(&point).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "raidkit-test"])
        .arg(&point)
        .status()
        .expect("mount runs");
    assert!(
        mounted.success(),
        "mounting a tmpfs failed (tests run as root)"
    );
    let result = std::panic::catch_unwind(|| {
        let path = point.join("m.img");
        let disk = FileDisk::create(&path, 16 << 20).unwrap();
        // 2 MiB fit: reserved, then written without allocating anything more.
        disk.reserve(1 << 20, 2 << 20).unwrap();
        disk.write_at(&pattern(2 << 20, 1), 1 << 20).unwrap();
        // 8 MiB do not: refused before a byte is written, naming the filesystem.
        let err = disk.reserve(4 << 20, 8 << 20).unwrap_err();
        match &err.kind {
            DiskErrorKind::NoSpace {
                filesystem, quota, ..
            } => {
                assert!(filesystem.contains(point.to_str().unwrap()), "{err}");
                assert!(filesystem.contains("tmpfs"), "{err}");
                assert!(!quota);
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("no space left"), "{err}");
        // As an io::Error it keeps its meaning (what an NBD server turns into NBD_ENOSPC).
        let io: std::io::Error = err.into();
        assert_eq!(io.kind(), std::io::ErrorKind::StorageFull);
        // Freed space (a discard punches a hole) is found again on the next reservation.
        disk.discard(1 << 20, 2 << 20).unwrap();
        disk.reserve(4 << 20, 3 << 20).unwrap();
        let full = disk.reserve(1 << 20, 2 << 20).unwrap_err();
        assert!(full.is_no_space(), "{full}");
        drop(disk);
        let _ = std::fs::remove_file(&path);
    });
    let _ = Command::new("umount").arg(&point).status();
    let _ = std::fs::remove_dir(&point);
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

/// The fields of /sys/block/NAME/stat of a block device.
fn block_stat(dev: &str) -> Vec<u64> {
    let name = std::path::Path::new(dev)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
    stat.split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect()
}

/// Sectors read and written so far on a block device.
fn sectors_read_written(dev: &str) -> (u64, u64) {
    let f = block_stat(dev);
    (f[2], f[6])
}

#[test]
fn an_o_direct_write_reads_only_the_blocks_it_covers_in_part() {
    with_loop_device("bounce", |dev| {
        let disk = FileDisk::open(dev, OpenOptions::default()).unwrap();
        assert!(disk.is_direct());
        let a = disk.logical_block_size() as usize;
        // A buffer whose address is not aligned (a caller's Vec, offset by one byte).
        let backing = pattern(256 * 1024 + 1, 3);
        let data = &backing[1..];
        assert!(!(data.as_ptr() as usize).is_multiple_of(a));
        let before = sectors_read_written(dev);
        disk.write_at(data, 1 << 20).unwrap();
        let after = sectors_read_written(dev);
        assert_eq!(
            after.0, before.0,
            "an aligned range was read before writing"
        );
        assert_eq!(after.1 - before.1, (data.len() / 512) as u64);
        let mut back = vec![0u8; data.len()];
        disk.read_at(&mut back, 1 << 20).unwrap();
        assert_eq!(back, data);

        // An unaligned range: only its two edge blocks are read, and the bytes around it
        // are kept.
        let before = sectors_read_written(dev);
        disk.write_at(&data[..10_000], (2 << 20) + 100).unwrap();
        let after = sectors_read_written(dev);
        assert_eq!(after.0 - before.0, (2 * a / 512) as u64);
        let mut around = vec![0u8; 10_200];
        disk.read_at(&mut around, 2 << 20).unwrap();
        assert_eq!(&around[100..10_100], &data[..10_000]);
        // Inside one block: one block read.
        let before = sectors_read_written(dev);
        disk.write_at(&data[..10], (3 << 20) + 7).unwrap();
        let after = sectors_read_written(dev);
        assert_eq!(after.0 - before.0, (a / 512) as u64);
        let mut one = vec![0u8; 10];
        disk.read_at(&mut one, (3 << 20) + 7).unwrap();
        assert_eq!(one, &data[..10]);
    });
}

/// Reads and writes completed so far on a block device.
fn requests_read_written(dev: &str) -> (u64, u64) {
    let f = block_stat(dev);
    (f[0], f[4])
}

/// Aligned pieces that follow each other on the device go down as one request each way
/// (one `pwritev`, one `preadv`), not one per piece.
#[test]
fn aligned_vectored_pieces_are_one_request_on_a_block_device() {
    with_loop_device("vectored", |dev| {
        let disk = FileDisk::open(dev, OpenOptions::default()).unwrap();
        assert!(disk.is_direct());
        let mut pieces: Vec<AlignedBuf> = (0..8)
            .map(|i| {
                let mut b = AlignedBuf::new(16 << 10, 4096).unwrap();
                b.fill(i as u8 + 1);
                b
            })
            .collect();
        let before = requests_read_written(dev);
        let mut slices: Vec<IoSlice> = pieces.iter().map(|b| IoSlice::new(b)).collect();
        disk.write_vectored_at(&mut slices, 1 << 20).unwrap();
        let mid = requests_read_written(dev);
        assert_eq!(mid.0, before.0, "the write read nothing");
        assert_eq!(
            mid.1 - before.1,
            1,
            "8 pieces of 16 KiB written in one request"
        );
        for p in pieces.iter_mut() {
            p.fill(0);
        }
        let mut slices: Vec<IoSliceMut> = pieces.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        disk.read_vectored_at(&mut slices, 1 << 20).unwrap();
        let after = requests_read_written(dev);
        assert_eq!(after.0 - mid.0, 1, "8 pieces read in one request");
        for (i, p) in pieces.iter().enumerate() {
            assert!(p.iter().all(|&b| b == i as u8 + 1), "piece {i}");
        }
    });
}
