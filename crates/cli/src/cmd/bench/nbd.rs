//! `raidkit bench nbd`: a raidkit array served by `raidkit serve` next to `nbdkit memory`,
//! measured with the same real clients in the same run.
//!
//! For each level asked for, an array of image files in tmpfs (so the members cost little and
//! the figures show the server and the engine) is created, served by this binary's `serve` on a
//! unix socket, and `nbdkit memory` of the same size is served beside it. Then, alternating the
//! two servers run by run so background load on a shared machine hits both alike:
//!
//! - nbdcopy sequential write (a file of random bytes in the same tmpfs into the export) and
//!   read (export to `null:`), `--no-extents` so both servers move every byte;
//! - fio ioengine=nbd, 4 KiB random read and random write at iodepth 32 (one job).
//!
//! Member images are allocated in full before `raidkit serve` starts, so it maps them into
//! memory (tmpfs), as a long-lived server does with fully allocated tmpfs members.
//!
//! The sequential measurements also run against `nbdkit file` on one image file in the same
//! folder: the same storage medium as raidkit's members, where `nbdkit memory` keeps its data
//! in anonymous memory (writing tmpfs pages costs more CPU than copying into anonymous memory,
//! so that column tells the server apart from the medium).
//!
//! The first run of each measurement is a warm-up and is discarded; figures are medians of the
//! rest, the ratio is the median of the per-run ratios raidkit / nbdkit, and CPU is the user +
//! system seconds the server process spent per GB moved (read from /proc, steadier than
//! throughput when the machine is shared).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use raidkit_engine::EngineConfig;
use raidkit_metadata::SuperblockVersion;
use serde::Serialize;

use crate::cmd::array::create::{create_array, CreatePlan};
use raidkit_cli::common::{engine_error, parse_chunk_sectors, parse_level, parse_size_bytes};
use raidkit_cli::CliError;

#[derive(clap::Args, Debug)]
pub struct NbdArgs {
    /// RAID levels to measure, comma-separated (0, 1, 4, 5, 6, 10).
    #[arg(long, default_value = "0,5,6", value_delimiter = ',')]
    pub levels: Vec<String>,
    /// Members per array.
    #[arg(long = "raid-devices", short = 'n', default_value_t = 4)]
    pub raid_devices: usize,
    /// Usable size of each array, and of the nbdkit peer (K, M, G suffix).
    #[arg(long, default_value = "1G")]
    pub size: String,
    /// Chunk size.
    #[arg(long, short = 'c', default_value = "512K")]
    pub chunk: String,
    /// Where member images, the peer and the source file live (tmpfs keeps the disks out of
    /// the figures).
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Timed runs per measurement and server (the median is reported; one warm-up run more
    /// comes first and is discarded).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(3..=101))]
    pub runs: u32,
    /// Seconds per fio run.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub runtime_s: u32,
    /// NBD requests raidkit serve executes at once per connection (serve --threads).
    #[arg(long, default_value_t = 8)]
    pub threads: u16,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// One measurement of one level: medians and the per-run figures behind them.
#[derive(Debug, Serialize)]
pub struct Row {
    pub level: i32,
    pub measurement: &'static str,
    pub unit: &'static str,
    pub raidkit: f64,
    pub nbdkit: f64,
    /// Median of the per-run ratios raidkit / nbdkit.
    pub ratio: f64,
    /// The ratio the measurement should reach.
    pub bar: f64,
    pub raidkit_cpu_s_per_gb: f64,
    pub nbdkit_cpu_s_per_gb: f64,
    pub raidkit_runs: Vec<f64>,
    pub nbdkit_runs: Vec<f64>,
    /// Sequential rows: `nbdkit file` on one file in the same folder as the members, the
    /// same storage medium as raidkit's (tmpfs pages rather than nbdkit's anonymous memory).
    pub nbdkit_file: Option<f64>,
    /// Median of the per-run ratios raidkit / nbdkit file.
    pub ratio_to_file: Option<f64>,
}

struct Measurement {
    name: &'static str,
    unit: &'static str,
    bar: f64,
    kind: Kind,
}

#[derive(Clone, Copy)]
enum Kind {
    SeqWrite,
    SeqRead,
    Fio(&'static str),
}

const MEASUREMENTS: [Measurement; 4] = [
    Measurement {
        name: "nbdcopy sequential write",
        unit: "GB/s",
        bar: 1.0,
        kind: Kind::SeqWrite,
    },
    Measurement {
        name: "nbdcopy sequential read",
        unit: "GB/s",
        bar: 1.0,
        kind: Kind::SeqRead,
    },
    Measurement {
        name: "fio 4k randread iodepth=32",
        unit: "kIOPS",
        bar: 0.8,
        kind: Kind::Fio("randread"),
    },
    Measurement {
        name: "fio 4k randwrite iodepth=32",
        unit: "kIOPS",
        bar: 0.8,
        kind: Kind::Fio("randwrite"),
    },
];

fn need(tool: &str, package: &str) -> Result<(), CliError> {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(CliError::failure(format!(
            "{tool} is missing: apt-get install {package}"
        )))
    }
}

fn uri(socket: &Path) -> String {
    format!("nbd+unix:///?socket={}", socket.display())
}

/// `nbdkit` serving `plugin_args` (the plugin and its parameters) on unix socket `socket`;
/// `what` names it in errors.
fn spawn_nbdkit(
    what: &'static str,
    socket: &Path,
    plugin_args: &[String],
) -> Result<Proc, CliError> {
    let child = Command::new("nbdkit")
        .args(["--foreground", "--exit-with-parent", "--unix"])
        .arg(socket)
        .args(plugin_args)
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| CliError::failure(format!("cannot start {what}: {e}")))?;
    Ok(Proc { child, what })
}

/// `raidkit serve` (export "bench", no control socket) over `members` on unix socket
/// `socket`, its log in `log`; returns once the socket is there.
fn spawn_serve(
    exe: &Path,
    socket: &Path,
    members: &[PathBuf],
    log: &Path,
    extra: &[String],
) -> Result<Proc, CliError> {
    let mut server = Proc {
        child: Command::new(exe)
            .arg("serve")
            .arg("--socket")
            .arg(socket)
            .arg("--no-control")
            .args(extra)
            .arg("--name")
            .arg("bench")
            .args(members)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .spawn()
            .map_err(|e| CliError::failure(format!("cannot start raidkit serve: {e}")))?,
        what: "raidkit serve",
    };
    wait_for_socket(socket, &mut server).map_err(|e| {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        CliError::new(e.code, format!("{}; its log:\n{text}", e.message))
    })?;
    Ok(server)
}

/// `raidkit serve` for the lab's selftest.
pub(super) fn spawn_raidkit_serve(
    exe: &Path,
    socket: &Path,
    members: &[PathBuf],
    log: &Path,
) -> Result<Proc, CliError> {
    spawn_serve(exe, socket, members, log, &[])
}

/// A server process, killed when dropped.
pub(super) struct Proc {
    child: Child,
    what: &'static str,
}

impl Proc {
    /// User + system CPU seconds so far, from /proc/PID/stat (all threads).
    fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command name (which may hold spaces) start after the last ')'.
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

    pub(super) fn check_alive(&mut self) -> Result<(), CliError> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(CliError::failure(format!(
                "{} exited during the benchmark ({status})",
                self.what
            ))),
            Err(e) => Err(CliError::failure(format!("{}: {e}", self.what))),
        }
    }

    /// SIGTERM, then wait; the server's own exit status.
    fn terminate(mut self) -> Result<std::process::ExitStatus, CliError> {
        // SAFETY: kill with the pid of our own child and a valid signal.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait()?;
        // Already reaped: nothing left for Drop to do.
        std::mem::forget(self);
        Ok(status)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for_socket(path: &Path, server: &mut Proc) -> Result<(), CliError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        server.check_alive()?;
        if Instant::now() > deadline {
            return Err(CliError::failure(format!(
                "{}: {} never appeared",
                server.what,
                path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Runs a client; fails with its stderr unless it succeeds. Returns wall time and stdout.
fn run_client(cmd: &mut Command) -> Result<(Duration, String), CliError> {
    let start = Instant::now();
    let out = cmd
        .output()
        .map_err(|e| CliError::failure(format!("{cmd:?}: {e}")))?;
    let elapsed = start.elapsed();
    if !out.status.success() {
        return Err(CliError::failure(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok((elapsed, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// One run of one measurement against one server: (figure in the row's unit, bytes moved).
fn run_once(
    kind: Kind,
    socket: &Path,
    source: &Path,
    size_bytes: u64,
    runtime_s: u32,
) -> Result<(f64, f64), CliError> {
    match kind {
        Kind::SeqWrite => {
            let (t, _) = run_client(
                Command::new("nbdcopy")
                    .arg("--no-extents")
                    .arg(source)
                    .arg(uri(socket)),
            )?;
            Ok((size_bytes as f64 / t.as_secs_f64() / 1e9, size_bytes as f64))
        }
        Kind::SeqRead => {
            let (t, _) = run_client(
                Command::new("nbdcopy")
                    .arg("--no-extents")
                    .arg(uri(socket))
                    .arg("null:"),
            )?;
            Ok((size_bytes as f64 / t.as_secs_f64() / 1e9, size_bytes as f64))
        }
        Kind::Fio(rw) => {
            let (_, text) = run_client(
                Command::new("fio")
                    .arg("--name=bench")
                    .arg("--ioengine=nbd")
                    .arg(format!("--uri={}", uri(socket)))
                    .arg(format!("--rw={rw}"))
                    .args(["--bs=4k", "--iodepth=32", "--time_based"])
                    .arg(format!("--runtime={runtime_s}"))
                    .arg(format!("--size={size_bytes}"))
                    .arg("--output-format=terse"),
            )?;
            let line = text.lines().last().unwrap_or_default();
            let f: Vec<&str> = line.split(';').collect();
            // Terse v3: field 8 is read IOPS, field 49 write IOPS.
            let index = if rw.contains("read") { 7 } else { 48 };
            let iops: f64 = f
                .get(index)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| CliError::failure(format!("fio output not understood: {line}")))?;
            Ok((iops / 1e3, iops * 4096.0 * runtime_s as f64))
        }
    }
}

/// The ratio the chart's full width stands for, and its width in characters.
const CHART_MAX: f64 = 1.5;
const CHART_WIDTH: usize = 45;

/// A horizontal bar of `width` characters for `ratio` on a scale of 0 to [`CHART_MAX`], in
/// eighths of a character, with '|' where `bar` falls (drawn over the bar when the ratio
/// passes it).
fn ratio_bar(ratio: f64, bar: f64, width: usize) -> String {
    const EIGHTHS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let cells =
        |v: f64| (v.clamp(0.0, CHART_MAX) / CHART_MAX * width as f64 * 8.0).round() as usize;
    let filled = cells(ratio);
    let mark = (cells(bar) / 8).min(width - 1);
    (0..width)
        .map(|i| {
            if i == mark {
                '|'
            } else if (i + 1) * 8 <= filled {
                '█'
            } else if i * 8 < filled {
                EIGHTHS[filled - i * 8]
            } else {
                ' '
            }
        })
        .collect()
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Writes `size_bytes` of xorshift bytes (no zero blocks a client could skip).
fn write_source(path: &Path, size_bytes: u64) -> Result<(), CliError> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut block = vec![0u8; 1 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut left = size_bytes;
    while left > 0 {
        for c in block.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.copy_from_slice(&x.to_le_bytes());
        }
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    Ok(())
}

/// Allocates every page of an image file (contents unchanged).
fn allocate_in_full(path: &Path) -> Result<(), CliError> {
    raidkit_disk::allocate_in_full(path)
        .map_err(|e| CliError::failure(format!("{}: cannot allocate: {e}", path.display())))
}

/// Member image size for a level so the array holds at least `array_bytes` (plus room for the
/// superblock and md's data offset).
fn member_bytes(level: i32, raid_devices: usize, array_bytes: u64) -> Result<u64, CliError> {
    let data_members = match level {
        0 => raid_devices,
        1 => 1,
        4 | 5 => raid_devices.saturating_sub(1),
        6 => raid_devices.saturating_sub(2),
        10 => raid_devices / 2,
        _ => 0,
    };
    if data_members == 0 {
        return Err(CliError::usage(format!(
            "RAID {level} needs more than {raid_devices} members"
        )));
    }
    let per = array_bytes.div_ceil(data_members as u64);
    Ok(per + (per / 64).max(8 << 20))
}

pub fn run(args: NbdArgs) -> Result<(), CliError> {
    // Parse, then act.
    let mut levels = Vec::new();
    for l in &args.levels {
        levels.push(parse_level(l)?);
    }
    let array_bytes = parse_size_bytes(&args.size, 1024)?;
    let chunk_sectors = parse_chunk_sectors(&args.chunk)?;
    if args.threads == 0 {
        return Err(CliError::usage("--threads must be at least 1"));
    }
    need("nbdcopy", "libnbd-bin")?;
    need("fio", "fio")?;
    need("nbdkit", "nbdkit")?;
    let exe = std::env::current_exe()?;

    let dir = args
        .dir
        .join(format!("raidkit-bench-nbd-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::failure(format!("{}: {e}", dir.display())))?;
    struct Cleanup(PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(dir.clone());

    if !args.json {
        println!(
            "raidkit serve (unix socket, {} threads/connection) vs nbdkit {} memory, same clients, same run",
            args.threads,
            nbdkit_version()
        );
        println!(
            "arrays of {} image files in {}, chunk {}; median of {} runs after 1 warm-up; raidkit and nbdkit alternate",
            args.raid_devices,
            args.dir.display(),
            args.chunk,
            args.runs
        );
        println!("ratio = median of per-run ratios raidkit/nbdkit; CPU = server user+system seconds per GB moved");
        println!("nbdkit file = nbdkit's file plugin on one image file beside the members (the same medium), with raidkit's ratio to it");
    }
    let mut all_rows = Vec::new();
    for level in levels {
        let rows = bench_level(&args, &exe, &dir, level, array_bytes, chunk_sectors)?;
        all_rows.extend(rows);
    }
    if args.json {
        let text = serde_json::to_string_pretty(&all_rows)
            .map_err(|e| CliError::failure(e.to_string()))?;
        println!("{text}");
    }
    Ok(())
}

fn nbdkit_version() -> String {
    Command::new("nbdkit")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .nth(1)
                .map(str::to_string)
        })
        .unwrap_or_default()
}

fn bench_level(
    args: &NbdArgs,
    exe: &Path,
    dir: &Path,
    level: i32,
    array_bytes: u64,
    chunk_sectors: u32,
) -> Result<Vec<Row>, CliError> {
    let level_dir = dir.join(format!("raid{level}"));
    std::fs::create_dir_all(&level_dir)?;
    let members: Vec<PathBuf> = (0..args.raid_devices)
        .map(|i| level_dir.join(format!("m{i}.img")))
        .collect();
    let plan = CreatePlan {
        level,
        layout: None,
        chunk_sectors,
        raid_devices: args.raid_devices,
        metadata: SuperblockVersion::V1_2,
        image_bytes: Some(member_bytes(level, args.raid_devices, array_bytes)?),
        name: format!("bench-raid{level}"),
    };
    let size_bytes = {
        let array = create_array(&members, &plan, EngineConfig::default())?;
        array.stop().map_err(engine_error)?;
        // Every page allocated, as nbdkit memory's are after the warm-up run: `raidkit serve`
        // then maps the members (see `raidkit_disk::OpenOptions::map_memory`).
        for m in &members {
            allocate_in_full(m)?;
        }
        // Both servers export the same number of bytes: the requested size.
        array.size_bytes().min(array_bytes)
    };
    let source = dir.join("source.bin");
    if std::fs::metadata(&source).map(|m| m.len()).ok() != Some(size_bytes) {
        write_source(&source, size_bytes)?;
    }

    let ours = level_dir.join("raidkit.sock");
    let mut raidkit = spawn_serve(
        exe,
        &ours,
        &members,
        &level_dir.join("serve.log"),
        &["--threads".into(), args.threads.to_string()],
    )?;
    let theirs = level_dir.join("nbdkit.sock");
    let mut nbdkit = spawn_nbdkit(
        "nbdkit",
        &theirs,
        &["memory".into(), format!("size={size_bytes}")],
    )?;
    wait_for_socket(&theirs, &mut nbdkit)?;
    let peer_file = level_dir.join("nbdkit-file.img");
    std::fs::File::create(&peer_file)?.set_len(size_bytes)?;
    allocate_in_full(&peer_file)?;
    let file_socket = level_dir.join("nbdkit-file.sock");
    let mut nbdkit_file = spawn_nbdkit(
        "nbdkit file",
        &file_socket,
        &["file".into(), peer_file.display().to_string()],
    )?;
    wait_for_socket(&file_socket, &mut nbdkit_file)?;

    if !args.json {
        println!(
            "\nRAID {level}: {} members, {} MiB exported",
            args.raid_devices,
            size_bytes >> 20
        );
        println!(
            "{:<28} {:>14} {:>14} {:>6} {:>5}  {:>16} {:>15}  {:>14} {:>6}",
            "measurement",
            "raidkit",
            "nbdkit",
            "ratio",
            "bar",
            "raidkit CPU s/GB",
            "nbdkit CPU s/GB",
            "nbdkit file",
            "ratio"
        );
    }
    let mut rows = Vec::new();
    for m in &MEASUREMENTS {
        let mut ours_runs = Vec::new();
        let mut theirs_runs = Vec::new();
        let mut ratios = Vec::new();
        let mut ours_cpu = Vec::new();
        let mut theirs_cpu = Vec::new();
        let with_file = matches!(m.kind, Kind::SeqWrite | Kind::SeqRead);
        let mut file_runs = Vec::new();
        let mut file_ratios = Vec::new();
        for run in 0..=args.runs {
            let one = |p: &mut Proc, socket: &Path| -> Result<(f64, f64), CliError> {
                let before = p.cpu_seconds();
                let (figure, bytes) =
                    run_once(m.kind, socket, &source, size_bytes, args.runtime_s)?;
                let cpu = p.cpu_seconds() - before;
                p.check_alive()?;
                Ok((figure, cpu / (bytes / 1e9)))
            };
            // Alternate which server goes first, so drift in background load evens out.
            let ((a, ca), (b, cb)) = if run % 2 == 0 {
                let a = one(&mut raidkit, &ours)?;
                (a, one(&mut nbdkit, &theirs)?)
            } else {
                let b = one(&mut nbdkit, &theirs)?;
                (one(&mut raidkit, &ours)?, b)
            };
            let file = if with_file {
                Some(one(&mut nbdkit_file, &file_socket)?.0)
            } else {
                None
            };
            if run == 0 {
                continue; // warm-up
            }
            if let Some(f) = file {
                file_runs.push(f);
                file_ratios.push(a / f);
            }
            ours_runs.push(a);
            theirs_runs.push(b);
            ratios.push(a / b);
            ours_cpu.push(ca);
            theirs_cpu.push(cb);
        }
        let row = Row {
            level,
            measurement: m.name,
            unit: m.unit,
            raidkit: median(&ours_runs),
            nbdkit: median(&theirs_runs),
            ratio: median(&ratios),
            bar: m.bar,
            raidkit_cpu_s_per_gb: median(&ours_cpu),
            nbdkit_cpu_s_per_gb: median(&theirs_cpu),
            raidkit_runs: ours_runs,
            nbdkit_runs: theirs_runs,
            nbdkit_file: with_file.then(|| median(&file_runs)),
            ratio_to_file: with_file.then(|| median(&file_ratios)),
        };
        if !args.json {
            let file = match (row.nbdkit_file, row.ratio_to_file) {
                (Some(f), Some(r)) => format!("{f:>8.2} {:<5} {r:>6.2}", row.unit),
                _ => String::new(),
            };
            println!(
                "{:<28} {:>8.2} {:<5} {:>8.2} {:<5} {:>6.2} {:>5}  {:>16.2} {:>15.2}  {}",
                row.measurement,
                row.raidkit,
                row.unit,
                row.nbdkit,
                row.unit,
                row.ratio,
                format!("{}{}", if row.ratio >= row.bar { "" } else { "<" }, row.bar),
                row.raidkit_cpu_s_per_gb,
                row.nbdkit_cpu_s_per_gb,
                file
            );
        }
        rows.push(row);
    }
    if !args.json {
        println!("\nraidkit / nbdkit memory, 0 to {CHART_MAX}x ('|' marks the bar):");
        for row in &rows {
            println!(
                "{:<28} {} {:.2}",
                row.measurement,
                ratio_bar(row.ratio, row.bar, CHART_WIDTH),
                row.ratio
            );
        }
    }
    let status = raidkit.terminate()?;
    if !status.success() {
        let log = std::fs::read_to_string(level_dir.join("serve.log")).unwrap_or_default();
        return Err(CliError::failure(format!(
            "raidkit serve exited with {status} after the RAID {level} runs; its log:\n{log}"
        )));
    }
    drop(nbdkit);
    drop(nbdkit_file);
    let _ = std::fs::remove_dir_all(&level_dir);
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_bars_scale_and_mark_the_bar() {
        let w = 30;
        let full = |s: &str| s.chars().filter(|&c| c == '█').count();
        let empty = ratio_bar(0.0, 1.0, w);
        assert_eq!(empty.chars().count(), w);
        assert_eq!(full(&empty), 0);
        // The bar of 1.0 sits two thirds of the way along a 0 to 1.5 scale.
        assert_eq!(empty.chars().position(|c| c == '|'), Some(20));
        let half = ratio_bar(0.75, 1.0, w);
        assert_eq!(full(&half), 15);
        assert_eq!(half.chars().count(), w);
        // Past the scale it is full (but for the mark), never longer.
        let over = ratio_bar(9.0, 1.0, w);
        assert_eq!(over.chars().count(), w);
        assert_eq!(full(&over), w - 1);
        // A partial cell shows an eighth block.
        let part = ratio_bar(0.025, 1.0, w);
        assert!(part.starts_with('▌'), "{part}");
    }

    #[test]
    fn medians_and_member_sizes() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        // RAID 6 over 4: two data members, each holds half the array plus headroom.
        let m = member_bytes(6, 4, 1 << 30).unwrap();
        assert!((512 << 20..600 << 20).contains(&m), "{m}");
        assert!(member_bytes(6, 2, 1 << 30).is_err());
    }
}
