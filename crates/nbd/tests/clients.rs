//! The server against real NBD clients no one here wrote: nbdinfo and nbdcopy (libnbd-bin),
//! qemu-io (qemu-utils) and fio's nbd engine (fio). A missing client fails the test with the
//! Debian package to install, unless RAIDKIT_SKIP_CLIENTS=1.

mod common;

use common::*;
use raidkit_nbd::{BlockSize, Export, FileExport, MemoryExport};
use std::process::Command;
use std::sync::Arc;

fn memory(size: u64) -> Arc<dyn Export> {
    Arc::new(MemoryExport::new(size))
}

fn field<'a>(info: &'a str, key: &str) -> &'a str {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("nbdinfo output lacks {key}:\n{info}"))
}

#[test]
fn nbdinfo_reports_size_flags_and_block_sizes() {
    if !client_available("nbdinfo", "libnbd-bin") {
        return;
    }
    let four_k = BlockSize {
        minimum_bytes: 4096,
        preferred_bytes: 4096,
        maximum_payload_bytes: 8 << 20,
    };
    let disk: Arc<dyn Export> =
        Arc::new(MemoryExport::new(96 << 20).with_block_size(four_k).unwrap());
    let ro: Arc<dyn Export> = Arc::new(MemoryExport::new(1 << 20).with_read_only(true));
    let server = Running::start(vec![("disk", disk), ("ro", ro)]);

    let info = run(Command::new("nbdinfo").arg(server.uri("disk")));
    assert_eq!(field(&info, "export-size"), "100663296 (96M)");
    assert_eq!(field(&info, "block_size_minimum"), "4096");
    assert_eq!(field(&info, "block_size_preferred"), "4096");
    assert_eq!(field(&info, "block_size_maximum"), "8388608");
    assert_eq!(field(&info, "is_read_only"), "false");
    assert_eq!(field(&info, "can_flush"), "true");
    assert_eq!(field(&info, "can_fua"), "true");
    assert_eq!(field(&info, "can_trim"), "true");
    assert_eq!(field(&info, "can_zero"), "true");
    assert_eq!(field(&info, "can_multi_conn"), "true");
    assert!(info.contains("using structured packets"), "{info}");

    let info = run(Command::new("nbdinfo").arg(server.uri("ro")));
    assert_eq!(field(&info, "export-size"), "1048576 (1M)");
    assert_eq!(field(&info, "is_read_only"), "true");
    assert_eq!(field(&info, "can_trim"), "false");
    assert_eq!(field(&info, "can_zero"), "false");
    assert_eq!(field(&info, "can_fua"), "false");

    let list = run(Command::new("nbdinfo").arg("--list").arg(server.uri("")));
    assert!(list.contains("export=\"disk\""), "{list}");
    assert!(list.contains("export=\"ro\""), "{list}");

    // An unknown export is an error the client reports, not a hang or a crash.
    let out = Command::new("nbdinfo")
        .arg(server.uri("missing"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let report = server.stop();
    assert!(report.all_flushed());
    assert!(report.connections_accepted >= 4);
}

#[test]
fn qemu_io_writes_and_verifies_patterns() {
    if !client_available("qemu-io", "qemu-utils") {
        return;
    }
    let dir = TempDir::new("qemu");
    let image = dir.path().join("file.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let file: Arc<dyn Export> = Arc::new(FileExport::open(&image, false).unwrap());
    let server = Running::start(vec![("mem", memory(16 << 20)), ("file", file)]);
    for export in ["mem", "file"] {
        let out = run(Command::new("qemu-io")
            .args(["-f", "raw"])
            .args(["-c", "write -P 0xab 0 1M"])
            .args(["-c", "write -P 0xcd -f 1M 512k"])
            .args(["-c", "write -z 2M 1M"])
            .args(["-c", "discard 3M 64k"])
            .args(["-c", "flush"])
            .args(["-c", "read -P 0xab 0 1M"])
            .args(["-c", "read -P 0xcd 1M 512k"])
            .args(["-c", "read -P 0 2M 1M"])
            .args(["-c", "read -P 0 15M 1M"])
            .arg(server.uri(export)));
        assert!(!out.contains("Pattern verification failed"), "{out}");
        assert!(!out.contains("failed"), "{out}");
        assert_eq!(out.matches("read ").count(), 4, "{out}");
    }
    // The file export really wrote the file.
    let report = server.stop();
    assert!(report.all_flushed());
    let bytes = std::fs::read(&image).unwrap();
    assert!(bytes[..1 << 20].iter().all(|&b| b == 0xab));
    assert!(bytes[1 << 20..(1 << 20) + (512 << 10)]
        .iter()
        .all(|&b| b == 0xcd));
}

#[test]
fn qemu_io_sees_read_only_refusal() {
    if !client_available("qemu-io", "qemu-utils") {
        return;
    }
    let ro: Arc<dyn Export> = Arc::new(MemoryExport::new(1 << 20).with_read_only(true));
    let server = Running::start(vec![("ro", ro)]);
    let out = Command::new("qemu-io")
        .args(["-f", "raw", "-c", "write -P 0x11 0 4k"])
        .arg(server.uri("ro"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("wrote 4096"), "{text}");
    // The data is unchanged.
    run(Command::new("qemu-io")
        .args(["-f", "raw", "-r", "-c", "read -P 0 0 4k"])
        .arg(server.uri("ro")));
}

#[test]
fn nbdcopy_round_trips_a_file() {
    if !client_available("nbdcopy", "libnbd-bin") {
        return;
    }
    let dir = TempDir::new("copy");
    let source = dir.path().join("source.img");
    let back = dir.path().join("back.img");
    let data = pattern(48 << 20, 42);
    std::fs::write(&source, &data).unwrap();
    let target = dir.path().join("target.img");
    std::fs::File::create(&target)
        .unwrap()
        .set_len(48 << 20)
        .unwrap();
    let file: Arc<dyn Export> = Arc::new(FileExport::open(&target, false).unwrap());
    let server = Running::start(vec![("mem", memory(48 << 20)), ("file", file)]);
    for export in ["mem", "file"] {
        run(Command::new("nbdcopy")
            .arg("--flush")
            .arg(&source)
            .arg(server.uri(export)));
        run(Command::new("nbdcopy").arg(server.uri(export)).arg(&back));
        let copied = std::fs::read(&back).unwrap();
        assert_eq!(copied.len(), data.len());
        assert_eq!(checksum(&copied), checksum(&data), "export {export}");
        std::fs::remove_file(&back).unwrap();
    }
    server.stop();
    assert_eq!(checksum(&std::fs::read(&target).unwrap()), checksum(&data));
}

#[test]
fn fio_nbd_engine_verifies_random_writes() {
    if !client_available("fio", "fio") {
        return;
    }
    let server = Running::start(vec![("disk", memory(64 << 20))]);
    // fio leaves verify state files in its working directory.
    let dir = TempDir::new("fio");
    let out = run(Command::new("fio")
        .current_dir(dir.path())
        .arg("--name=verify")
        .arg("--ioengine=nbd")
        .arg(format!("--uri={}", server.uri("disk")))
        .args(["--rw=randwrite", "--bs=4k", "--iodepth=32", "--size=32M"])
        .args(["--verify=crc32c", "--do_verify=1", "--verify_fatal=1"])
        .arg("--output-format=terse"));
    // Terse format: field 5 is the error code of the job.
    let line = out.lines().last().unwrap_or_default();
    let fields: Vec<&str> = line.split(';').collect();
    assert!(fields.len() > 5, "{out}");
    assert_eq!(fields[4], "0", "fio job error: {out}");
    // Terse v3: field 6 is read KiB, field 47 write KiB (41 fields per direction).
    let written_kib: u64 = fields[46].parse().unwrap_or(0);
    assert_eq!(written_kib, 32 << 10, "{out}");
    let read_kib: u64 = fields[5].parse().unwrap_or(0);
    assert_eq!(read_kib, 32 << 10, "verify read everything back: {out}");
}

#[test]
fn tcp_listener_serves_qemu_io() {
    if !client_available("qemu-io", "qemu-utils") {
        return;
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    let listener = raidkit_nbd::Listener::bind_localhost(0).unwrap();
    let addr = listener.describe();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let server = raidkit_nbd::Server::builder()
        .export("disk", memory(4 << 20))
        .build()
        .unwrap();
    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = shutdown.clone();
    let thread = std::thread::spawn(move || server.serve(&listener, &flag).unwrap());
    let out = run(Command::new("qemu-io")
        .args(["-f", "raw"])
        .args(["-c", "write -P 0x5a 1M 1M"])
        .args(["-c", "read -P 0x5a 1M 1M"])
        .arg(format!("nbd://{addr}/disk")));
    assert!(out.contains("read 1048576/1048576"), "{out}");
    shutdown.store(true, Ordering::SeqCst);
    let report = thread.join().unwrap();
    assert_eq!(report.connections_accepted, 1);
    assert!(report.all_flushed());
}

#[test]
fn qemu_img_converts_and_compares() {
    if !client_available("qemu-img", "qemu-utils") {
        return;
    }
    let dir = TempDir::new("qemu-img");
    let image = dir.path().join("a.img");
    // Data, then a zero tail qemu-img may send as WRITE_ZEROES.
    let mut data = pattern(8 << 20, 77);
    data.resize(16 << 20, 0);
    std::fs::write(&image, &data).unwrap();
    let server = Running::start(vec![("disk", memory(16 << 20))]);
    let info = run(Command::new("qemu-img").arg("info").arg(server.uri("disk")));
    assert!(info.contains("16 MiB (16777216 bytes)"), "{info}");
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&image)
        .arg(server.uri("disk")));
    let out = run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&image)
        .arg(server.uri("disk")));
    assert!(out.contains("Images are identical"), "{out}");
}
