//! Throughput of the NBD server next to `nbdkit memory` (Debian's nbdkit) as the peer, both
//! serving memory on a unix socket, measured with the same real clients:
//!
//! - nbdcopy sequential write (a file from /dev/shm into the export) and read (to `null:`);
//! - fio ioengine=nbd, 4 KiB random read and random write at iodepth 32 (IOPS).
//!
//! Run with:
//!
//! ```text
//! cargo run --release -p raidkit-nbd --example bench -- [--size-mib N] [--runtime-s N] [--threads N] [--repeat N]
//! ```
//!
//! Prints one line per measurement with both figures and the ratio raidkit / nbdkit (best of
//! `--repeat` runs each, alternating the two servers so background load hits both alike).

use raidkit_nbd::{Listener, MemoryExport, Server};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Options {
    size_mib: u64,
    runtime_s: u64,
    threads: Option<usize>,
    repeat: usize,
}

fn parse_options() -> Options {
    let mut o = Options {
        size_mib: 1024,
        runtime_s: 10,
        threads: None,
        repeat: 2,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        let n: u64 = v.parse().unwrap_or_else(|_| {
            eprintln!("bench: {a} needs a number");
            std::process::exit(2)
        });
        match a.as_str() {
            "--size-mib" => o.size_mib = n,
            "--runtime-s" => o.runtime_s = n,
            "--threads" => o.threads = Some(n as usize),
            "--repeat" => o.repeat = n.max(1) as usize,
            _ => {
                eprintln!("bench: unknown option {a}");
                std::process::exit(2)
            }
        }
    }
    o
}

fn need(tool: &str, package: &str) {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("bench: {tool} is missing: apt-get install {package}");
        std::process::exit(2);
    }
}

fn uri(socket: &Path) -> String {
    format!("nbd+unix:///?socket={}", socket.display())
}

fn wait_for_socket(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        if Instant::now() > deadline {
            eprintln!("bench: {} never appeared", path.display());
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn timed(cmd: &mut Command) -> Duration {
    let start = Instant::now();
    let out = cmd.output().expect("run client");
    let elapsed = start.elapsed();
    if !out.status.success() {
        eprintln!(
            "bench: {cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::process::exit(1);
    }
    elapsed
}

fn fio_iops(socket: &Path, rw: &str, o: &Options) -> f64 {
    let out = Command::new("fio")
        .arg("--name=bench")
        .arg("--ioengine=nbd")
        .arg(format!("--uri={}", uri(socket)))
        .arg(format!("--rw={rw}"))
        .args(["--bs=4k", "--iodepth=32", "--time_based"])
        .arg(format!("--runtime={}", o.runtime_s))
        .arg(format!("--size={}M", o.size_mib))
        .arg("--output-format=terse")
        .output()
        .expect("run fio");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    let f: Vec<&str> = line.split(';').collect();
    if !out.status.success() || f.len() < 50 {
        eprintln!(
            "bench: fio failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::process::exit(1);
    }
    // Terse v3: field 8 read IOPS, field 49 write IOPS.
    let index = if rw.contains("read") { 7 } else { 48 };
    f[index].parse().unwrap_or(0.0)
}

/// User plus system CPU seconds of this process (the in-process server; the bench's own
/// thread only waits for clients meanwhile).
fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we pass; zero is a valid initial value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a local rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// User plus system CPU seconds of another process, from /proc/PID/stat.
fn process_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

struct Peer {
    child: Child,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn main() {
    let o = parse_options();
    need("nbdcopy", "libnbd-bin");
    need("fio", "fio");
    need("nbdkit", "nbdkit");
    let dir = PathBuf::from(format!("/dev/shm/raidkit-nbd-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let size_bytes = o.size_mib << 20;

    // Source data for sequential writes, in tmpfs so the source is not the bottleneck.
    let source = dir.join("source.img");
    {
        let mut data = vec![0u8; 1 << 20];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut f = std::fs::File::create(&source).expect("source");
        for _ in 0..o.size_mib {
            for chunk in data.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes());
            }
            std::io::Write::write_all(&mut f, &data).expect("write source");
        }
    }

    // raidkit server, in this process.
    let ours = dir.join("raidkit.sock");
    let listener = Listener::bind_unix(&ours).expect("bind");
    let mut builder = Server::builder().export("mem", Arc::new(MemoryExport::new(size_bytes)));
    if let Some(t) = o.threads {
        builder = builder.threads_per_connection(t);
    }
    let server = builder.build().expect("server");
    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = shutdown.clone();
    let server_thread = std::thread::spawn(move || server.serve(&listener, &flag));

    // nbdkit memory, the peer.
    let theirs = dir.join("nbdkit.sock");
    let _peer = Peer {
        child: Command::new("nbdkit")
            .args(["--foreground", "--exit-with-parent", "--unix"])
            .arg(&theirs)
            .arg("memory")
            .arg(format!("size={size_bytes}"))
            .stdout(Stdio::null())
            .spawn()
            .expect("start nbdkit"),
    };
    wait_for_socket(&theirs);

    println!(
        "NBD memory export, {} MiB, unix socket; best of {} runs; raidkit threads/connection: {}",
        o.size_mib,
        o.repeat,
        o.threads.map_or("default".to_string(), |t| t.to_string())
    );
    println!(
        "server CPU is user+system seconds the server process spent per run (lower is better)"
    );
    println!(
        "{:<30} {:>12} {:>12} {:>6} {:>11} {:>11}",
        "measurement", "raidkit", "nbdkit", "ratio", "raidkit CPU", "nbdkit CPU"
    );

    let peer_pid = _peer.child.id();
    let gbps = |d: Duration| size_bytes as f64 / d.as_secs_f64() / 1e9;
    let best = |name: &str, unit: &str, f: &mut dyn FnMut(&Path) -> f64| {
        let (mut a, mut b) = (0f64, 0f64);
        let (mut cpu_a, mut cpu_b) = (f64::MAX, f64::MAX);
        for _ in 0..o.repeat {
            let before = own_cpu_seconds();
            a = a.max(f(&ours));
            cpu_a = cpu_a.min(own_cpu_seconds() - before);
            let before = process_cpu_seconds(peer_pid);
            b = b.max(f(&theirs));
            cpu_b = cpu_b.min(process_cpu_seconds(peer_pid) - before);
        }
        println!(
            "{:<30} {:>7.2} {unit:<4} {:>7.2} {unit:<4} {:>6.2} {:>10.2}s {:>10.2}s",
            name,
            a,
            b,
            a / b,
            cpu_a,
            cpu_b
        );
    };
    best("nbdcopy sequential write", "GB/s", &mut |s| {
        gbps(timed(Command::new("nbdcopy").arg(&source).arg(uri(s))))
    });
    best("nbdcopy sequential read", "GB/s", &mut |s| {
        gbps(timed(Command::new("nbdcopy").arg(uri(s)).arg("null:")))
    });
    best("fio 4k randread iodepth=32", "kIOPS", &mut |s| {
        fio_iops(s, "randread", &o) / 1e3
    });
    best("fio 4k randwrite iodepth=32", "kIOPS", &mut |s| {
        fio_iops(s, "randwrite", &o) / 1e3
    });

    shutdown.store(true, Ordering::SeqCst);
    let _ = server_thread.join();
    let _ = std::fs::remove_dir_all(&dir);
}
