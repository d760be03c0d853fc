//! `raidkit bench run` and `raidkit bench matrix`: the lab's measurements, printed as the
//! studies print them, with `--json` (schema in docs/bench-json.md) and charts.

use raidkit_bench::lab::chart::{self, Axes, Series};
use raidkit_bench::lab::matrix::{self, Cell, LevelSpec, MatrixConfig, Place};
use raidkit_bench::lab::run::{run, MemberLoad, RunOptions, RunResult, Spread};
use raidkit_bench::lab::target::{
    drop_file_cache, ArrayTarget, DiskSurface, FileTarget, InProcessTarget, MemberSource,
    NbdTarget, Target,
};
use raidkit_bench::lab::workload::{self, size_name, Limit, Region, Workload};
use raidkit_bench::lab::LabError;
use raidkit_cli::common::{assemble_volume, engine_error, Insist};
use raidkit_cli::server::control::ControlClient;
use raidkit_cli::CliError;
use raidkit_engine::MemberIoReading;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Version of the JSON documents `bench run --json` and `bench matrix --json` print.
pub const RUN_SCHEMA: &str = "raidkit-bench-run/1";
pub const MATRIX_SCHEMA: &str = "raidkit-bench-matrix/1";

fn lab(e: LabError) -> CliError {
    match e {
        LabError::Usage(m) => CliError::usage(m),
        LabError::Target(m) => CliError::failure(m),
    }
}

const RUN_EXAMPLES: &str = "\
Examples:
  raidkit bench run --workload db-oltp --qd 16 --allow-writes disk.img
  raidkit bench run --array --workload dd --size 1G --allow-writes m0.img m1.img m2.img m3.img
  raidkit bench run --workload custom --bs 4k,64k,1m --qd 1,8,32 --read-pct 100 --chart sweep nbd+unix:///?socket=/run/md0.sock
  raidkit bench run --workload stream --time 30 --control /run/md0.sock.ctl nbd+unix:///?socket=/run/md0.sock
Workloads: dd (write SIZE in blocks, flush, drop caches, read back), stream (sequential reads
like pv, per-member load every --sample seconds), seq-read, seq-write, custom (--bs, --read-pct,
--random-pct), iometer (all twelve specs), or one IOmeter spec by name:
  web-file-server-4k web-file-server-8k web-file-server-64k dss media-streaming
  sql-server-log os-paging web-server-log db-oltp exchange-email os-drive video-on-demand";

#[derive(clap::Args, Debug)]
#[command(after_help = RUN_EXAMPLES)]
pub struct RunArgs {
    /// What to measure: a file or block device, an NBD URI (nbd://HOST[:PORT]/EXPORT,
    /// nbd+unix:///EXPORT?socket=PATH), or with --array the members of a raidkit array.
    #[arg(required = true)]
    pub target: Vec<PathBuf>,
    /// The paths are members of a stopped raidkit array, assembled in this process.
    #[arg(long)]
    pub array: bool,
    /// With --array: the array's read policy (none, always, adaptive: the PERC6's NORA, RA,
    /// ARA).
    #[arg(long = "read-ahead", value_name = "POLICY", requires = "array")]
    pub read_ahead: Option<String>,

    /// With --array (and --allow-writes): its write policy, through or back (needs the
    /// array's write journal; see `serve --write-policy`).
    #[arg(long = "write-policy", value_name = "POLICY", requires = "array")]
    pub write_policy: Option<String>,
    /// Workload (see below).
    #[arg(long, short = 'w', default_value = "seq-read")]
    pub workload: String,
    /// Request size(s); several make a sweep (4k,64k,1m).
    #[arg(long, value_delimiter = ',')]
    pub bs: Vec<String>,
    /// Queue depth(s): requests kept outstanding; several make a sweep (1,8,32).
    #[arg(long, value_delimiter = ',')]
    pub qd: Vec<usize>,
    /// Share of reads in percent (custom workloads).
    #[arg(long)]
    pub read_pct: Option<u32>,
    /// Share of random requests in percent (custom workloads).
    #[arg(long)]
    pub random_pct: Option<u32>,
    /// Random offsets are multiples of this (default: the request size).
    #[arg(long)]
    pub align: Option<String>,
    /// Part of the target: all, first:10% (outer zone of a disk), last:10% (inner), A%..B%.
    #[arg(long, default_value = "all")]
    pub region: String,
    /// Seconds per run (default 10; the dd method moves --size instead).
    #[arg(long)]
    pub time: Option<f64>,
    /// Bytes per run instead of a time (the dd method's total; default 1G or the target).
    #[arg(long)]
    pub size: Option<String>,
    /// Seconds of warm-up before each run, not counted.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Runs of each workload; min, median and max are reported.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Seed of the request stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Per-member load sampling interval in seconds.
    #[arg(long, default_value_t = 1.0)]
    pub sample: f64,
    /// Ask for O_DIRECT on a file or block device (the default); --buffered goes through the
    /// page cache.
    #[arg(long)]
    pub buffered: bool,
    /// Write workloads destroy the target's data: say so.
    #[arg(long)]
    pub allow_writes: bool,
    /// A served array's control socket: per-member load of an NBD target from it.
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Draw charts to STEM.svg and STEM.png (a sweep, and per-member load over time).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Print a JSON document (schema raidkit-bench-run/1, see docs/bench-json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct MatrixArgs {
    /// Levels: 0, 1, 1e (RAID 10 n2 on odd counts), 4, 5, 6, 10 (n2), 10n2, 10o2, 10f2.
    #[arg(long, default_value = "0,1,1e,4,5,6,10n2,10o2,10f2")]
    pub levels: String,
    /// Member counts: 2..6 or a list (3,4,6).
    #[arg(long, default_value = "2..6")]
    pub members: String,
    /// Folder for the member image files (made and removed per cell).
    #[arg(long, default_value = "raidkit-matrix")]
    pub dir: PathBuf,
    /// Use these devices instead of image files (the first N for N members). Their data is
    /// destroyed; needs --allow-writes.
    #[arg(long, value_delimiter = ',')]
    pub devices: Vec<PathBuf>,
    /// Size of each member image file.
    #[arg(long, default_value = "256M")]
    pub size: String,
    /// Bytes written and read per cell (default: the whole array).
    #[arg(long)]
    pub bytes: Option<String>,
    /// Request size of the dd method.
    #[arg(long, default_value = "1M")]
    pub bs: String,
    /// Chunk size.
    #[arg(long, default_value = "512K")]
    pub chunk: String,
    /// Charts go to STEM.svg and STEM.png.
    #[arg(long, default_value = "raidkit-matrix")]
    pub chart: PathBuf,
    /// Needed with --devices.
    #[arg(long)]
    pub allow_writes: bool,
    /// Print a JSON document (schema raidkit-bench-matrix/1).
    #[arg(long)]
    pub json: bool,
}

fn size(s: &str) -> Result<u64, CliError> {
    workload::parse_size(s).map_err(CliError::usage)
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
fn bar(label: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(1000);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg:<28} [{bar:40}] {percent:>3}% eta {eta}")
            .expect("template")
            .progress_chars("=> "),
    );
    pb.set_message(label.to_string());
    pb
}

fn progress_of(pb: &indicatif::ProgressBar) -> Arc<dyn Fn(f64) + Send + Sync> {
    let pb = pb.clone();
    Arc::new(move |f: f64| pb.set_position((f * 1000.0) as u64))
}

/// Per-member counters of a served array, through its control socket.
fn control_source(path: &std::path::Path) -> Result<MemberSource, CliError> {
    let client = Mutex::new(ControlClient::connect(path)?);
    // One call now, so that a wrong socket is found before the run.
    let read = move || -> Vec<MemberIoReading> {
        let mut c = match client.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        let Ok(v) = c.call(&raidkit_cli::server::control::Request::Detail { array: None }) else {
            return Vec::new();
        };
        members_from_status(&v["status"])
    };
    let first = read();
    if first.is_empty() {
        return Err(CliError::failure(format!(
            "{}: the server reported no member counters",
            path.display()
        )));
    }
    Ok(Arc::new(read))
}

/// Member counters from a status's JSON (`detail --json`, the control socket).
pub fn members_from_status(status: &serde_json::Value) -> Vec<MemberIoReading> {
    status["members"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .filter_map(|m| {
                    Some(MemberIoReading {
                        index: m["index"].as_u64()? as usize,
                        slot: m["slot"].as_u64().map(|s| s as usize),
                        name: m["name"].as_str()?.to_string(),
                        io: serde_json::from_value(m["io"].clone()).ok()?,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The target, and the array behind it when it is one in this process (stopped at the end).
type Opened = (Box<dyn Target>, Option<Arc<raidkit_engine::Array>>);

fn open_target(args: &RunArgs) -> Result<Opened, CliError> {
    let first = args.target[0].to_string_lossy().into_owned();
    if args.array {
        // Without --allow-writes the array is assembled read-only: nothing is written to it.
        // A RAID 50/60 stack is one array here too; members left out are measured degraded.
        let insist = Insist {
            force: false,
            run: true,
        };
        let (array, report) = assemble_volume(&args.target, !args.allow_writes, insist)?;
        raidkit_cli::common::report_notes(&report);
        let array = Arc::new(array);
        if let Some(p) = &args.read_ahead {
            array.set_read_ahead(raidkit_engine::ReadAhead::parse(p).ok_or_else(|| {
                CliError::usage(format!("--read-ahead {p}: none, always or adaptive"))
            })?);
        }
        if let Some(p) = &args.write_policy {
            let policy = raidkit_engine::WritePolicy::parse(p)
                .ok_or_else(|| CliError::usage(format!("--write-policy {p}: through or back")))?;
            array
                .set_write_policy(policy)
                .map_err(|e| CliError::usage(format!("--write-policy {p}: {e}")))?;
            array.start_destaging();
        }
        let what = format!(
            "raidkit array (RAID {}, {} members{}{}) in this process",
            array.geometry().md_level(),
            args.target.len(),
            match array.read_ahead_policy() {
                raidkit_engine::ReadAhead::None => String::new(),
                p => format!(", read-ahead {}", p.name()),
            },
            match array.write_policy() {
                raidkit_engine::WritePolicy::Through => String::new(),
                p => format!(", write-{}", p.name()),
            }
        );
        let paths = args.target.clone();
        let target =
            ArrayTarget::new(array.clone(), what).with_cache_dropper(Box::new(move || {
                paths
                    .iter()
                    .map(|p| drop_file_cache(p))
                    .fold(true, |a, b| a & b)
            }));
        return Ok((Box::new(target), Some(array)));
    }
    if args.target.len() != 1 {
        return Err(CliError::usage(
            "one target (a file, a block device or an NBD URI), or --array with its members",
        ));
    }
    if first.starts_with("nbd://") || first.starts_with("nbd+unix://") {
        let mut t = NbdTarget::connect(&first).map_err(lab)?;
        if let Some(c) = &args.control {
            t = t.with_members(control_source(c)?);
        }
        return Ok((Box::new(t), None));
    }
    if args.control.is_some() {
        return Err(CliError::usage("--control goes with an NBD target"));
    }
    if raidkit_disk::emu::is_emu(&first) {
        let disk: Arc<dyn raidkit_disk::Disk> =
            Arc::from(raidkit_cli::common::open_emulated(&args.target[0], false)?);
        let what = format!("emulated drive {first}");
        let t = InProcessTarget::new(Arc::new(DiskSurface::new(disk)), what);
        return Ok((Box::new(t), None));
    }
    let t = FileTarget::open(&args.target[0], args.allow_writes, !args.buffered).map_err(lab)?;
    Ok((Box::new(t), None))
}

/// The workloads a `bench run` asks for, in order; `dd` is a write then a read.
fn workloads(args: &RunArgs, target_bytes: u64) -> Result<(Vec<Workload>, bool), CliError> {
    let region = Region::parse(&args.region).map_err(CliError::usage)?;
    let bss: Vec<u64> = args.bs.iter().map(|b| size(b)).collect::<Result<_, _>>()?;
    let qds = if args.qd.is_empty() {
        vec![1]
    } else {
        args.qd.clone()
    };
    let limit = match (args.size.as_deref(), args.time) {
        (Some(_), Some(_)) => return Err(CliError::usage("give --size or --time, not both")),
        (Some(s), None) => Limit::Bytes(size(s)?),
        (None, Some(t)) if t > 0.0 => Limit::Time(Duration::from_secs_f64(t)),
        (None, Some(_)) => return Err(CliError::usage("--time must be positive")),
        (None, None) => Limit::Time(Duration::from_secs(10)),
    };
    let warmup = Duration::from_secs_f64(args.warmup.max(0.0));
    let finish = |mut w: Workload| -> Result<Workload, CliError> {
        w.region = region;
        w.limit = limit;
        w.warmup = warmup;
        if let Some(a) = &args.align {
            w.align_bytes = size(a)?;
        }
        Ok(w)
    };
    let mut out = Vec::new();
    let mut dd = false;
    let bs_or = |d: u64| if bss.is_empty() { vec![d] } else { bss.clone() };
    match args.workload.as_str() {
        "dd" => {
            dd = true;
            let total = match args.size.as_deref() {
                Some(s) => size(s)?,
                None => (1u64 << 30).min(target_bytes),
            };
            for bs in bs_or(1 << 20) {
                let (lo, hi) = region.bytes(target_bytes, bs);
                let total = total.min(hi - lo) / bs * bs;
                for read in [false, true] {
                    let mut w = Workload::sequential(bs, read, Limit::Bytes(total));
                    w.region = region;
                    out.push(w);
                }
            }
        }
        "stream" | "seq-read" | "seq-write" => {
            let read = args.workload != "seq-write";
            for bs in bs_or(1 << 20) {
                for &qd in &qds {
                    let mut w = finish(Workload::sequential(bs, read, limit))?;
                    w.queue_depth = qd.max(1);
                    w.warmup = warmup;
                    if args.workload == "stream" {
                        w.name = "stream".into();
                    }
                    out.push(w);
                }
            }
        }
        "custom" => {
            for bs in bs_or(4096) {
                for &qd in &qds {
                    let w = Workload::custom(
                        bs,
                        args.read_pct.unwrap_or(100),
                        args.random_pct.unwrap_or(100),
                        qd,
                    );
                    out.push(finish(w)?);
                }
            }
        }
        "iometer" => {
            for spec in workload::iometer_specs() {
                for &qd in &qds {
                    out.push(finish(Workload {
                        queue_depth: qd.max(1),
                        ..spec.clone()
                    })?);
                }
            }
        }
        name => {
            for &qd in &qds {
                let mut w = Workload::iometer(name, qd).map_err(CliError::usage)?;
                if !bss.is_empty() {
                    return Err(CliError::usage(format!(
                        "{name} sets its own request size; --bs goes with custom, dd and sequential workloads"
                    )));
                }
                w = finish(w)?;
                out.push(w);
            }
        }
    }
    if args.workload != "custom" && (args.read_pct.is_some() || args.random_pct.is_some()) {
        return Err(CliError::usage(
            "--read-pct and --random-pct go with --workload custom",
        ));
    }
    for w in &out {
        w.check(target_bytes).map_err(CliError::usage)?;
    }
    Ok((out, dd))
}

#[derive(Serialize)]
struct RunDoc<'a> {
    schema: &'static str,
    target: String,
    target_bytes: u64,
    /// One entry per workload: its runs, and min/median/max when repeated.
    workloads: Vec<WorkloadDoc<'a>>,
    charts: Vec<PathBuf>,
}

#[derive(Serialize)]
struct WorkloadDoc<'a> {
    workload: &'a Workload,
    mb_s: Spread,
    iops: Spread,
    runs: &'a [RunResult],
}

pub fn run_cmd(args: RunArgs) -> Result<(), CliError> {
    if args.repeat == 0 {
        return Err(CliError::usage("--repeat must be at least 1"));
    }
    if args.sample <= 0.0 {
        return Err(CliError::usage("--sample must be positive"));
    }
    let (mut target, array) = open_target(&args)?;
    let target_bytes = target.size_bytes();
    let (list, dd) = workloads(&args, target_bytes)?;
    if list.iter().any(|w| w.read_pct < 100) && !args.allow_writes {
        return Err(CliError::usage(format!(
            "this workload writes to {} and destroys its data; add --allow-writes",
            target.describe()
        )));
    }
    let mut results: Vec<Vec<RunResult>> = Vec::new();
    for w in &list {
        let mut runs = Vec::new();
        for i in 0..args.repeat {
            let pb = bar(&format!(
                "{} {}{}",
                w.name,
                w.describe(),
                if args.repeat > 1 {
                    format!(" #{}", i + 1)
                } else {
                    String::new()
                }
            ));
            let opts = RunOptions {
                seed: args.seed + i as u64,
                sample_every: Duration::from_secs_f64(args.sample),
                flush_at_end: dd || w.read_pct < 100,
                progress: Some(progress_of(&pb)),
            };
            if dd && w.read_pct == 100 {
                let dropped = target.drop_caches().map_err(lab)?;
                if !args.json && !dropped {
                    eprintln!("note: caches beneath the target could not be dropped before the read (memory-backed, or not allowed)");
                }
            }
            let r = run(target.as_mut(), w, &opts).map_err(lab)?;
            pb.finish_and_clear();
            runs.push(r);
        }
        results.push(runs);
    }
    drop(target);
    if let Some(a) = array {
        a.stop().map_err(engine_error)?;
    }
    let charts = match &args.chart {
        Some(stem) => draw_run_charts(stem, &list, &results)?,
        None => Vec::new(),
    };
    let target_desc = results
        .first()
        .and_then(|r| r.first())
        .map(|r| r.target.clone())
        .unwrap_or_default();
    if args.json {
        let doc = RunDoc {
            schema: RUN_SCHEMA,
            target: target_desc,
            target_bytes,
            workloads: list
                .iter()
                .zip(&results)
                .map(|(w, runs)| WorkloadDoc {
                    workload: w,
                    mb_s: Spread::of(runs.iter().map(|r| r.mb_s)),
                    iops: Spread::of(runs.iter().map(|r| r.iops)),
                    runs,
                })
                .collect(),
            charts,
        };
        return raidkit_cli::common::print_json(&doc);
    }
    println!("target: {target_desc}");
    print_runs(&list, &results, args.repeat);
    for (w, runs) in list.iter().zip(&results) {
        let Some(r) = runs.last() else { continue };
        if r.members.is_empty() {
            continue;
        }
        println!(
            "\nper member, {} {} (last run, whole run):",
            w.name,
            w.describe()
        );
        print_members(&r.members);
        if w.name == "stream" {
            for s in &r.samples {
                println!("\nat {:.1} s:", s.t);
                print_members(&s.members);
            }
        }
    }
    for c in &charts {
        println!("chart: {}", c.display());
    }
    Ok(())
}

fn print_runs(list: &[Workload], results: &[Vec<RunResult>], repeat: usize) {
    println!(
        "{:<20} {:>7} {:>4} {:>5} {:>4} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "workload",
        "size",
        "R%",
        "rand%",
        "QD",
        "MB/s",
        "IOPS",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "CPU s/GB"
    );
    for (w, runs) in list.iter().zip(results) {
        let mb = Spread::of(runs.iter().map(|r| r.mb_s));
        let io = Spread::of(runs.iter().map(|r| r.iops));
        // The run whose MB/s is the median's (or nearest) gives the latency columns.
        let Some(mid) = runs.iter().min_by(|a, b| {
            (a.mb_s - mb.median)
                .abs()
                .total_cmp(&(b.mb_s - mb.median).abs())
        }) else {
            continue;
        };
        println!(
            "{:<20} {:>7} {:>4} {:>5} {:>4} {:>10.1} {:>10.0} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>8.2}",
            w.name,
            size_name(w.request_bytes),
            w.read_pct,
            w.random_pct,
            w.queue_depth,
            mb.median,
            io.median,
            mid.latency_us.p50,
            mid.latency_us.p99,
            mid.latency_us.p999,
            mid.latency_us.max,
            mid.cpu_s_per_gb
        );
        if repeat > 1 {
            println!(
                "{:<20} {:>24} MB/s min {:.1} median {:.1} max {:.1} over {} runs",
                "",
                "",
                mb.min,
                mb.median,
                mb.max,
                runs.len()
            );
        }
    }
}

/// `iostat -x`'s columns, one line per member.
pub fn print_members(ms: &[MemberLoad]) {
    println!(
        "  {:<28} {:>4} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7} {:>6}",
        "member", "slot", "rMB/s", "wMB/s", "r/s", "w/s", "areq KiB", "aqu-sz", "%util"
    );
    for m in ms {
        println!(
            "  {:<28} {:>4} {:>9.1} {:>9.1} {:>9.0} {:>9.0} {:>8.1} {:>7.2} {:>6.1}",
            m.name,
            m.slot.map_or("-".to_string(), |s| s.to_string()),
            m.read_mb_s,
            m.write_mb_s,
            m.reads_per_s,
            m.writes_per_s,
            m.avg_req_kib,
            m.queue,
            m.util_pct
        );
    }
}

fn draw_run_charts(
    stem: &std::path::Path,
    list: &[Workload],
    results: &[Vec<RunResult>],
) -> Result<Vec<PathBuf>, CliError> {
    let mut files = Vec::new();
    let median = |runs: &[RunResult]| Spread::of(runs.iter().map(|r| r.mb_s)).median;
    let mut bss: Vec<u64> = list.iter().map(|w| w.request_bytes).collect();
    bss.dedup();
    let mut qds: Vec<usize> = list.iter().map(|w| w.queue_depth).collect();
    qds.sort();
    qds.dedup();
    let draw_err = |e: String| CliError::failure(format!("chart: {e}"));
    if list.len() > 1 && (bss.len() > 1 || qds.len() > 1) {
        // A sweep: MB/s over request size, one line per queue depth (or over queue depth).
        let over_bs = bss.len() > 1;
        let keys: Vec<usize> = if over_bs { qds.clone() } else { vec![0] };
        let series: Vec<Series> = keys
            .iter()
            .map(|&k| Series {
                name: if over_bs {
                    format!("QD{k}")
                } else {
                    list[0].name.clone()
                },
                points: list
                    .iter()
                    .zip(results)
                    .filter(|(w, _)| !over_bs || w.queue_depth == k)
                    .map(|(w, r)| {
                        let x = if over_bs {
                            w.request_bytes as f64 / 1024.0
                        } else {
                            w.queue_depth as f64
                        };
                        (x, median(r))
                    })
                    .collect(),
            })
            .collect();
        let axes = Axes {
            title: format!(
                "{}: MB/s by {}",
                list[0].name,
                if over_bs {
                    "request size"
                } else {
                    "queue depth"
                }
            ),
            x: if over_bs {
                "request size (KiB)".into()
            } else {
                "queue depth".into()
            },
            y: "MB/s".into(),
            log_x: true,
        };
        let sweep = stem.with_file_name(format!(
            "{}-sweep",
            stem.file_name()
                .map(|f| f.to_string_lossy())
                .unwrap_or_default()
        ));
        files.extend(chart::lines(&sweep, &axes, &series).map_err(draw_err)?);
    }
    // Per-member load over time of the last workload that had members.
    if let Some((w, r)) = list.iter().zip(results).rev().find_map(|(w, runs)| {
        runs.last()
            .filter(|r| !r.samples.is_empty())
            .map(|r| (w, r))
    }) {
        let load = stem.with_file_name(format!(
            "{}-members",
            stem.file_name()
                .map(|f| f.to_string_lossy())
                .unwrap_or_default()
        ));
        files.extend(
            chart::member_load(
                &load,
                &format!("per-member load: {} {}", w.name, w.describe()),
                &r.samples,
            )
            .map_err(draw_err)?,
        );
    }
    Ok(files)
}

// ---------------------------------------------------------------------------------------

fn member_counts(s: &str) -> Result<Vec<usize>, CliError> {
    let bad = || CliError::usage(format!("--members {s:?}: say 2..6 or 3,4,6"));
    let v: Vec<usize> = if let Some((a, b)) = s.split_once("..") {
        let (a, b): (usize, usize) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        (a..=b).collect()
    } else {
        s.split(',')
            .map(|t| t.trim().parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?
    };
    if v.is_empty() || v.iter().any(|&n| !(2..=64).contains(&n)) {
        return Err(bad());
    }
    Ok(v)
}

#[derive(Serialize)]
struct MatrixDoc<'a> {
    schema: &'static str,
    members_in_memory: bool,
    cells: &'a [Cell],
    charts: Vec<PathBuf>,
}

pub fn matrix_cmd(args: MatrixArgs) -> Result<(), CliError> {
    let levels = LevelSpec::parse_list(&args.levels).map_err(CliError::usage)?;
    let members = member_counts(&args.members)?;
    let place = if args.devices.is_empty() {
        Place::Dir(args.dir.clone())
    } else {
        if !args.allow_writes {
            return Err(CliError::usage(
                "the matrix creates arrays on the --devices and destroys their data; add --allow-writes",
            ));
        }
        Place::Devices(args.devices.clone())
    };
    let chunk_sectors = raidkit_cli::common::parse_chunk_sectors(&args.chunk)?;
    let pb = bar("matrix");
    let pb2 = pb.clone();
    let cfg = MatrixConfig {
        levels,
        members,
        place: place.clone(),
        member_bytes: size(&args.size)?,
        bytes: args.bytes.as_deref().map(size).transpose()?,
        request_bytes: size(&args.bs)?,
        chunk_sectors,
        progress: Some(Arc::new(move |label: &str, f: f64| {
            pb2.set_message(label.to_string());
            pb2.set_position((f * 1000.0) as u64);
        })),
    };
    let in_memory = matrix::place_in_memory(&place);
    if !args.json {
        println!(
            "dd method: write the array in {} requests, flush, drop caches, read it back",
            args.bs
        );
        if in_memory {
            println!("note: the members are in memory (tmpfs): these figures are the engine's, not a disk's");
        }
        println!(
            "{:<8} {:>7} {:>10} {:>6} {:>10} {:>10}   per-member write / read MB/s",
            "RAID", "members", "capacity", "eff.", "write MB/s", "read MB/s"
        );
    }
    let json = args.json;
    let cells = matrix::run_matrix(&cfg, |c| {
        if json {
            return;
        }
        pb.suspend(|| print_cell(c));
    })
    .map_err(lab)?;
    pb.finish_and_clear();
    let charts = matrix::chart(
        &cells,
        &args.chart,
        "raidkit bench matrix: dd method by level and member count",
    )
    .map_err(|e| CliError::failure(format!("chart: {e}")))?;
    if json {
        return raidkit_cli::common::print_json(&MatrixDoc {
            schema: MATRIX_SCHEMA,
            members_in_memory: in_memory,
            cells: &cells,
            charts,
        });
    }
    for c in &charts {
        println!("chart: {}", c.display());
    }
    Ok(())
}

fn print_cell(c: &Cell) {
    let per = |ms: &[MemberLoad], read: bool| -> String {
        ms.iter()
            .map(|m| format!("{:.0}", if read { m.read_mb_s } else { m.write_mb_s }))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (w, r) = c.loads();
    println!(
        "{:<8} {:>7} {:>10} {:>5.0}% {:>10.1} {:>10.1}   w [{}] r [{}]{}",
        c.level,
        c.members,
        size_name(c.capacity_bytes / (1 << 20) * (1 << 20)),
        c.efficiency * 100.0,
        c.write.mb_s,
        c.read.mb_s,
        per(w, false),
        per(r, true),
        if c.caches_dropped {
            ""
        } else {
            "  (cache not dropped)"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_counts_parse() {
        assert_eq!(member_counts("3..6").unwrap(), vec![3, 4, 5, 6]);
        assert_eq!(member_counts("3,5").unwrap(), vec![3, 5]);
        assert!(member_counts("1..3").is_err());
        assert!(member_counts("x").is_err());
    }
}

// ---------------------------------------------------------------------------------------

#[derive(clap::Args, Debug)]
pub struct IostatArgs {
    /// The control socket of a running `raidkit serve`.
    #[arg(long, required = true)]
    pub control: PathBuf,
    /// Array to watch when the server serves several.
    #[arg(long)]
    pub array: Option<String>,
    /// Seconds between reports.
    #[arg(default_value_t = 1.0)]
    pub interval: f64,
    /// Number of reports (default: until interrupted).
    pub count: Option<u64>,
    /// One JSON object per report, one per line.
    #[arg(long)]
    pub json: bool,
}

/// `raidkit iostat --control SOCK [INTERVAL [COUNT]]`: each member's load of a served array
/// over each interval, in `iostat -x`'s columns (the first report covers the interval after
/// the command started, not the time since the array was assembled).
pub fn iostat_cmd(args: IostatArgs) -> Result<(), CliError> {
    use raidkit_cli::server::control::Request;
    if args.interval.is_nan() || args.interval <= 0.0 {
        return Err(CliError::usage("the interval must be positive"));
    }
    let mut client = ControlClient::connect(&args.control)?;
    let mut read = || -> Result<Vec<MemberIoReading>, CliError> {
        let v = client.call(&Request::Detail {
            array: args.array.clone(),
        })?;
        Ok(members_from_status(&v["status"]))
    };
    let mut last = read()?;
    if last.is_empty() {
        return Err(CliError::failure(format!(
            "{}: the server reported no member counters (an older raidkit?)",
            args.control.display()
        )));
    }
    let stop = raidkit_nbd::shutdown_on_signals()
        .map_err(|e| CliError::failure(format!("signals: {e}")))?;
    let mut n = 0u64;
    while args.count.is_none_or(|c| n < c) {
        let until = std::time::Instant::now() + Duration::from_secs_f64(args.interval);
        while std::time::Instant::now() < until {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let now = read()?;
        let loads = MemberLoad::all_between(&last, &now);
        if args.json {
            let line = serde_json::to_string(&serde_json::json!({
                "schema": "raidkit-iostat/1",
                "interval_s": args.interval,
                "members": loads,
            }))
            .map_err(|e| CliError::failure(e.to_string()))?;
            println!("{line}");
        } else {
            print_members(&loads);
            println!();
        }
        last = now;
        n += 1;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------

#[derive(clap::Args, Debug)]
pub struct SelftestArgs {
    /// Folder in memory for the test file and the served array's members.
    #[arg(long, default_value = "/dev/shm/raidkit-selftest")]
    pub dir: PathBuf,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    pub time: f64,
    /// Rounds; each round measures raidkit then fio (alternating which goes first) and the
    /// median ratio is reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Print a JSON document.
    #[arg(long)]
    pub json: bool,
}

/// One pattern of the selftest: (name, request bytes, read, random, queue depth).
const SELFTEST: [(&str, u64, bool, bool, usize); 6] = [
    ("1MiB seq read QD1", 1 << 20, true, false, 1),
    ("1MiB seq write QD1", 1 << 20, false, false, 1),
    ("4KiB rand read QD1", 4096, true, true, 1),
    ("4KiB rand write QD1", 4096, false, true, 1),
    ("4KiB rand read QD32", 4096, true, true, 32),
    ("4KiB rand write QD32", 4096, false, true, 32),
];

#[derive(Serialize)]
struct SelftestRow {
    target: &'static str,
    pattern: &'static str,
    raidkit_mb_s: Vec<f64>,
    fio_mb_s: Vec<f64>,
    /// Median over rounds of raidkit's figure over fio's, measured back to back.
    ratio: f64,
}

/// fio's MB/s for one pattern against a file (io_uring) or an NBD URI (fio's nbd engine).
fn fio_mb_s(
    what: &str,
    file_or_uri: &str,
    nbd: bool,
    pattern: (&str, u64, bool, bool, usize),
    seconds: f64,
) -> Result<f64, CliError> {
    let (_, bs, read, random, qd) = pattern;
    let rw = match (read, random) {
        (true, false) => "read",
        (false, false) => "write",
        (true, true) => "randread",
        (false, true) => "randwrite",
    };
    let mut cmd = std::process::Command::new("fio");
    cmd.args([
        "--name=selftest",
        &format!("--rw={rw}"),
        &format!("--bs={bs}"),
        &format!("--iodepth={qd}"),
        "--time_based",
        &format!("--runtime={}ms", (seconds * 1000.0) as u64),
        "--ramp_time=1",
        "--randrepeat=0",
        "--norandommap",
        "--output-format=json",
    ]);
    if nbd {
        cmd.args(["--ioengine=nbd", &format!("--uri={file_or_uri}")]);
    } else {
        cmd.args([
            "--ioengine=io_uring",
            "--direct=0",
            &format!("--filename={file_or_uri}"),
        ]);
    }
    let out = cmd
        .output()
        .map_err(|e| CliError::failure(format!("fio: {e} (apt-get install fio)")))?;
    if !out.status.success() {
        return Err(CliError::failure(format!(
            "fio against {what} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    // fio's engines may print notes before the JSON document.
    let start = out.stdout.iter().position(|&b| b == b'{').unwrap_or(0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout[start..])
        .map_err(|e| CliError::failure(format!("fio's JSON: {e}")))?;
    let job = &v["jobs"][0];
    let bw = job["read"]["bw_bytes"].as_f64().unwrap_or(0.0)
        + job["write"]["bw_bytes"].as_f64().unwrap_or(0.0);
    Ok(bw / 1e6)
}

pub fn selftest_cmd(args: SelftestArgs) -> Result<(), CliError> {
    if args.rounds == 0 || args.time.is_nan() || args.time <= 0.0 {
        return Err(CliError::usage("--rounds and --time must be positive"));
    }
    std::fs::create_dir_all(&args.dir)?;
    struct Cleanup(PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(args.dir.clone());
    // A file in memory, every page allocated.
    let file = args.dir.join("file.img");
    {
        std::fs::File::create(&file)?.set_len(512 << 20)?;
        raidkit_disk::allocate_in_full(&file)
            .map_err(|e| CliError::failure(format!("{}: {e}", file.display())))?;
    }
    // A raidkit array served over NBD: RAID 5 over four members in memory.
    let members: Vec<PathBuf> = (0..4).map(|i| args.dir.join(format!("m{i}.img"))).collect();
    let exe = std::env::current_exe()?;
    let created = std::process::Command::new(&exe)
        .args([
            "create",
            "--level",
            "5",
            "--raid-devices",
            "4",
            "--image-size",
            "192M",
        ])
        .args(&members)
        .output()?;
    if !created.status.success() {
        return Err(CliError::failure(format!(
            "creating the served array failed: {}",
            String::from_utf8_lossy(&created.stderr)
        )));
    }
    let sock = args.dir.join("nbd.sock");
    let mut server =
        super::nbd::spawn_raidkit_serve(&exe, &sock, &members, &args.dir.join("serve.log"))?;
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let mut rows = Vec::new();
    let quiet = args.json;
    for (tname, nbd) in [("file on tmpfs", false), ("raidkit serve (NBD)", true)] {
        for pat in SELFTEST {
            let (pname, bs, read, random, qd) = pat;
            let mut w = Workload::custom(
                bs,
                if read { 100 } else { 0 },
                if random { 100 } else { 0 },
                qd,
            );
            w.limit = Limit::Time(Duration::from_secs_f64(args.time));
            w.name = pname.into();
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            for round in 0..args.rounds {
                let measure_ours = || -> Result<f64, CliError> {
                    let mut t: Box<dyn Target> = if nbd {
                        Box::new(NbdTarget::connect(&uri).map_err(lab)?)
                    } else {
                        Box::new(FileTarget::open(&file, true, false).map_err(lab)?)
                    };
                    Ok(run(t.as_mut(), &w, &RunOptions::default())
                        .map_err(lab)?
                        .mb_s)
                };
                let target = if nbd {
                    uri.clone()
                } else {
                    file.display().to_string()
                };
                let fio = || fio_mb_s(tname, &target, nbd, pat, args.time);
                if round % 2 == 0 {
                    ours.push(measure_ours()?);
                    theirs.push(fio()?);
                } else {
                    theirs.push(fio()?);
                    ours.push(measure_ours()?);
                }
                server.check_alive()?;
            }
            let ratios: Vec<f64> = ours.iter().zip(&theirs).map(|(a, b)| a / b).collect();
            let row = SelftestRow {
                target: tname,
                pattern: pname,
                ratio: Spread::of(ratios).median,
                raidkit_mb_s: ours,
                fio_mb_s: theirs,
            };
            if !quiet {
                if rows.is_empty() {
                    println!(
                        "raidkit's load generator against fio on the same target, {} s per measurement, median of {} rounds",
                        args.time, args.rounds
                    );
                    println!(
                        "{:<22} {:<22} {:>12} {:>12} {:>7}  within 0.9-1.1x",
                        "target", "pattern", "raidkit MB/s", "fio MB/s", "ratio"
                    );
                }
                println!(
                    "{:<22} {:<22} {:>12.1} {:>12.1} {:>7.3}  {}",
                    row.target,
                    row.pattern,
                    Spread::of(row.raidkit_mb_s.iter().copied()).median,
                    Spread::of(row.fio_mb_s.iter().copied()).median,
                    row.ratio,
                    if (0.9..=1.1).contains(&row.ratio) {
                        "yes"
                    } else {
                        "NO"
                    }
                );
            }
            rows.push(row);
        }
    }
    server.check_alive()?;
    drop(server);
    if args.json {
        return raidkit_cli::common::print_json(&serde_json::json!({
            "schema": "raidkit-bench-selftest/1",
            "seconds": args.time,
            "rounds": args.rounds,
            "rows": rows,
        }));
    }
    Ok(())
}
