//! `raidkit model`, `raidkit model validate`, `raidkit plan`: predictions from the model
//! crate (raidkit_model), printed as tables, charts and JSON.

use raidkit_bench::lab::chart::{self, Axes, Series};
use raidkit_bench::lab::workload::{iometer_specs, Region};
use raidkit_cli::CliError;
use raidkit_disk::emu::catalog::{Catalog, DriveSpec};
use raidkit_model::emulated::{self, EmulatedOptions};
use raidkit_model::report::{analyze, seq_load, Prediction};
use raidkit_model::system::named_load;
use raidkit_model::system::CachePolicy;
use raidkit_model::validate::{self, Case, Predicted};
use raidkit_model::{Figure, Level, Load, RaidIn, System};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug, Default)]
pub struct ConfigArgs {
    /// A TOML file with any of these settings (the flags given win): drive, drives,
    /// levels, chunk, controller, host_link, raid_in, write_cache, cache_policy, workload,
    /// bs, read_pct,
    /// random_pct, qd, region, replace_hours, fleet, and an inline [drive_spec] table of the
    /// catalog's form.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The drive of the catalog (`hds72101`, `hds7k3000`, `cheetah15k5`, `fireball`,
    /// `sf2281`, `sata250`, or your own with --catalog).
    #[arg(long)]
    pub drive: Option<String>,
    /// Drive counts, comma-separated (`4,6,8`).
    #[arg(long)]
    pub drives: Option<String>,
    /// Levels, comma-separated: 0, 1, 1e, 4, 5, 6, 10, 10n2, 10o2, 10f2, 50, 50x3, 60.
    #[arg(long, short = 'l')]
    pub level: Option<String>,
    /// Chunk size (default 512K).
    #[arg(long)]
    pub chunk: Option<String>,
    /// The controller or enclosure of the catalog in front of the drives.
    #[arg(long)]
    pub controller: Option<String>,
    /// The host link the drives share without a controller (`pcie2x4`, `sata3`, `none`).
    #[arg(long)]
    pub host_link: Option<String>,
    /// Where the RAID runs: host (raidkit, md) or controller (hardware RAID).
    #[arg(long)]
    pub raid_in: Option<String>,
    /// The controller's cache policy, in the PERC 6's terms: wt-nora (default), wt-ra,
    /// wt-ara, wb-nora, wb-ra, wb-ara (write-back needs a controller with a cache).
    #[arg(long)]
    pub cache_policy: Option<String>,
    /// The drives' write cache: on or off (default: the catalog's).
    #[arg(long)]
    pub write_cache: Option<String>,
    /// Workload: an IOmeter specification's name, `video-editing`, `all` (the twelve) or
    /// `custom` (--bs, --read-pct, --random-pct).
    #[arg(long)]
    pub workload: Option<String>,
    /// Request size of a custom workload (default 4K).
    #[arg(long)]
    pub bs: Option<String>,
    /// Share of reads in percent, custom workload (default 100).
    #[arg(long)]
    pub read_pct: Option<u32>,
    /// Share of random requests in percent, custom workload (default 100).
    #[arg(long)]
    pub random_pct: Option<u32>,
    /// Outstanding requests (default 16).
    #[arg(long)]
    pub qd: Option<usize>,
    /// The part of the array the workload touches: all, first:N%, last:N%, A%..B%.
    #[arg(long)]
    pub region: Option<String>,
    /// Hours from a failure until its rebuild starts (0 with a hot spare; default 24).
    #[arg(long)]
    pub replace_hours: Option<f64>,
    /// Arrays in the fleet for the fleet's annual loss (default 1).
    #[arg(long)]
    pub fleet: Option<usize>,
    /// A catalog of your own drives and controllers beside the built-in one.
    #[arg(long)]
    pub catalog: Option<PathBuf>,
}

/// The settings of a TOML file.
#[derive(serde::Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    drive: Option<String>,
    drive_spec: Option<DriveSpec>,
    drives: Option<Vec<usize>>,
    levels: Option<Vec<String>>,
    chunk: Option<String>,
    controller: Option<String>,
    host_link: Option<String>,
    raid_in: Option<String>,
    write_cache: Option<bool>,
    cache_policy: Option<String>,
    workload: Option<String>,
    bs: Option<String>,
    read_pct: Option<u32>,
    random_pct: Option<u32>,
    qd: Option<usize>,
    region: Option<String>,
    replace_hours: Option<f64>,
    fleet: Option<usize>,
}

/// Everything a prediction needs, merged from file and flags.
pub struct Setup {
    pub systems: Vec<System>,
    pub loads: Vec<Load>,
    pub replace_hours: f64,
    pub fleet: usize,
    pub catalog: Catalog,
}

fn list<T: std::str::FromStr>(s: &str, what: &str) -> Result<Vec<T>, CliError> {
    s.split(',')
        .map(|t| {
            t.trim()
                .parse()
                .map_err(|_| CliError::usage(format!("{what}: {t:?} is not a number")))
        })
        .collect()
}

impl ConfigArgs {
    pub fn setup(&self, default_levels: &str, default_drives: &str) -> Result<Setup, CliError> {
        let file: ConfigFile = match &self.config {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| CliError::usage(format!("{}: {e}", p.display())))?;
                toml::from_str(&text)
                    .map_err(|e| CliError::usage(format!("{}: {e}", p.display())))?
            }
            None => ConfigFile::default(),
        };
        let catalog = catalog(self.catalog.as_deref())?;
        let drive = match (&self.drive, &file.drive, file.drive_spec) {
            (Some(name), _, _) | (None, Some(name), None) => {
                catalog.drive(name).cloned().ok_or_else(|| {
                    let known: Vec<&str> = catalog.drive.iter().map(|d| d.name.as_str()).collect();
                    CliError::usage(format!(
                        "no drive {name:?} in the catalog (known: {})",
                        known.join(", ")
                    ))
                })?
            }
            (None, _, Some(spec)) => spec,
            (None, None, None) => catalog.drive("hds72101").cloned().expect("built in"),
        };
        let drives: Vec<usize> = match (&self.drives, file.drives) {
            (Some(s), _) => list(s, "--drives")?,
            (None, Some(v)) => v,
            (None, None) => list(default_drives, "--drives")?,
        };
        let levels: Vec<Level> = match (&self.level, file.levels) {
            (Some(s), _) => s.split(',').map(str::to_string).collect(),
            (None, Some(v)) => v,
            (None, None) => default_levels.split(',').map(str::to_string).collect(),
        }
        .iter()
        .map(|l| Level::parse(l).map_err(CliError::usage))
        .collect::<Result<_, _>>()?;
        let chunk = self
            .chunk
            .clone()
            .or(file.chunk)
            .unwrap_or_else(|| "512K".into());
        let chunk_bytes = raidkit_disk::parse_size(&chunk)
            .map_err(|e| CliError::usage(format!("--chunk: {e}")))?;
        let controller = match self.controller.clone().or(file.controller) {
            Some(c) => Some(catalog.controller(&c).cloned().ok_or_else(|| {
                let known: Vec<&str> = catalog.controller.iter().map(|d| d.name.as_str()).collect();
                CliError::usage(format!(
                    "no controller {c:?} in the catalog (known: {})",
                    known.join(", ")
                ))
            })?),
            None => None,
        };
        let host_link = self
            .host_link
            .clone()
            .or(file.host_link)
            .unwrap_or_else(|| "none".into());
        let raid_in = match self.raid_in.clone().or(file.raid_in).as_deref() {
            None | Some("host") => RaidIn::Host,
            Some("controller") => RaidIn::Controller,
            Some(o) => {
                return Err(CliError::usage(format!(
                    "--raid-in {o}: host or controller"
                )))
            }
        };
        let write_cache = match self.write_cache.as_deref() {
            Some("on") => Some(true),
            Some("off") => Some(false),
            Some(o) => return Err(CliError::usage(format!("--write-cache {o}: on or off"))),
            None => file.write_cache,
        };
        let policy = match self.cache_policy.clone().or(file.cache_policy) {
            None => CachePolicy::NONE,
            Some(p) => {
                let c = controller.as_ref().ok_or_else(|| {
                    CliError::usage(format!(
                        "--cache-policy {p}: a controller's setting; name one with --controller"
                    ))
                })?;
                CachePolicy::parse(&p, c.cache_mib.unwrap_or(0.0)).map_err(CliError::usage)?
            }
        };
        let mut systems = Vec::new();
        for lv in &levels {
            for &n in &drives {
                let mut s = System::new(drive.clone(), n, *lv);
                s.chunk_bytes = chunk_bytes;
                s.controller = controller.clone();
                s.host_link = host_link.clone();
                s.raid_in = raid_in;
                s.write_cache = write_cache;
                s.policy = policy;
                if lv.check(n).is_ok() {
                    s.check().map_err(CliError::usage)?;
                    systems.push(s);
                }
            }
        }
        if systems.is_empty() {
            return Err(CliError::usage(
                "no level and drive count given fit together",
            ));
        }
        let qd = self.qd.or(file.qd).unwrap_or(16);
        let region = match self.region.clone().or(file.region) {
            Some(r) => Region::parse(&r).map_err(CliError::usage)?,
            None => Region::WHOLE,
        };
        let wl = self
            .workload
            .clone()
            .or(file.workload)
            .unwrap_or_else(|| "all".into());
        let mut loads = if wl == "all" {
            iometer_specs()
                .iter()
                .map(|w| named_load(&w.name, qd))
                .collect::<Result<Vec<_>, _>>()
                .map_err(CliError::usage)?
        } else if wl == "custom" {
            let bs = self.bs.clone().or(file.bs).unwrap_or_else(|| "4K".into());
            let bytes =
                raidkit_disk::parse_size(&bs).map_err(|e| CliError::usage(format!("--bs: {e}")))?;
            let w = raidkit_bench::lab::workload::Workload::custom(
                bytes,
                self.read_pct.or(file.read_pct).unwrap_or(100),
                self.random_pct.or(file.random_pct).unwrap_or(100),
                qd,
            );
            vec![Load::from_workload(&w)]
        } else {
            vec![named_load(&wl, qd).map_err(CliError::usage)?]
        };
        for l in &mut loads {
            l.region = region;
        }
        Ok(Setup {
            systems,
            loads,
            replace_hours: self.replace_hours.or(file.replace_hours).unwrap_or(24.0),
            fleet: self.fleet.or(file.fleet).unwrap_or(1),
            catalog,
        })
    }
}

#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// analytic (closed form, instant), emulated (raidkit's engine over emulated drives,
    /// time-boxed) or both.
    #[arg(long, default_value = "analytic")]
    pub method: String,
    /// Seconds each emulated run is measured.
    #[arg(long, default_value_t = 3.0)]
    pub time: f64,
    /// Each emulated member's size in memory (the drive's surface is laid over it).
    #[arg(long, default_value = "1G")]
    pub member_size: String,
    /// The share of the drives' time the workload takes during a rebuild.
    #[arg(long, default_value_t = 0.5)]
    pub load_share: f64,
    /// Write a chart (STEM.svg and STEM.png) when several levels or counts are given.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Print a JSON document instead of the tables.
    #[arg(long)]
    pub json: bool,
}

fn catalog(path: Option<&std::path::Path>) -> Result<Catalog, CliError> {
    Catalog::load(path).map_err(|e| CliError::usage(e.to_string()))
}

fn emulated_options(time: f64, member_size: &str) -> Result<EmulatedOptions, CliError> {
    if !(time > 0.0 && time <= 600.0) {
        return Err(CliError::usage("--time: seconds between 0 and 600"));
    }
    Ok(EmulatedOptions {
        member_bytes: raidkit_disk::parse_size(member_size)
            .map_err(|e| CliError::usage(format!("--member-size: {e}")))?,
        time: Duration::from_secs_f64(time),
    })
}

fn gb(bytes: u64) -> String {
    let g = bytes as f64 / 1e9;
    if g >= 1000.0 {
        format!("{:.1} TB", g / 1000.0)
    } else {
        format!("{g:.0} GB")
    }
}

fn print_figure(f: &Figure) {
    println!(
        "  {:<30} {:>9.1} MB/s {:>9.0} IOPS {:>9.2} ms  {}",
        f.what, f.mb_s, f.iops, f.latency_ms, f.limit
    );
}

fn print_prediction(p: &Prediction) {
    println!("{} ({} method)", p.system, p.method);
    println!(
        "  capacity {} ({:.0}% of the drives)",
        gb(p.capacity_bytes),
        p.efficiency * 100.0
    );
    for f in [
        &p.seq_read_outer,
        &p.seq_read_inner,
        &p.seq_write_outer,
        &p.seq_write_inner,
    ] {
        print_figure(f);
    }
    for f in &p.workloads {
        print_figure(f);
    }
    if let Some(d) = &p.degraded_seq_read {
        println!("  with one member missing:");
        print_figure(d);
        for f in &p.degraded_workloads {
            print_figure(f);
        }
    }
    if p.method == "emulated" {
        println!("  (rebuild and reliability: see the analytic method)");
        return;
    }
    let r = &p.reliability;
    println!(
        "  rebuild of one member: {:.1} h idle ({})",
        r.rebuild_hours, r.rebuild_limit
    );
    if let Some(u) = &p.rebuild_under_load {
        println!(
            "  rebuild beside the first workload at {:.0}% of its degraded rate ({:.1} MB/s, {:.0} IOPS): {:.1} h, the rebuild getting {:.0}% of the busiest drive; a request may wait {:.1} ms behind a rebuild step",
            u.load_share * 100.0,
            u.foreground_mb_s,
            u.foreground_iops,
            u.hours,
            u.rebuild_share * 100.0,
            u.step_wait_ms
        );
    }
    println!(
        "  reliability (AFR {:.2}%, 1 error in {:.0e} bits, repair {:.0} h + rebuild): MTTDL {:.3e} years; annual loss {:.2e}{}; a rebuild meets an unreadable sector with {:.1}%{}",
        r.afr_pct,
        r.ure_bits,
        r.replace_hours,
        r.mttdl_years,
        r.annual_loss,
        if r.fleet > 1 {
            format!(" ({:.2e} for a fleet of {})", r.fleet_annual_loss, r.fleet)
        } else {
            String::new()
        },
        r.ure_per_rebuild * 100.0,
        if r.ure_loses_data {
            format!(" (lost: {:.2e} a year)", r.annual_sector_loss)
        } else if r.tolerance >= 2 {
            " (repaired from the second redundancy)".to_string()
        } else {
            String::new()
        }
    );
}

/// The emulated counterpart of an analytic prediction: the same figures measured.
fn emulate_prediction(
    p: &Prediction,
    sys: &System,
    loads: &[Load],
    cat: &Catalog,
    opts: &EmulatedOptions,
) -> Result<Prediction, CliError> {
    let a = emulated::build(sys, cat, opts).map_err(CliError::failure)?;
    let degraded = match &p.degraded_seq_read {
        Some(_) => Some(
            emulated::build(
                &System {
                    missing: 1,
                    ..sys.clone()
                },
                cat,
                opts,
            )
            .map_err(CliError::failure)?,
        ),
        None => None,
    };
    let m_on = |e: &emulated::Emulated, l: &Load| -> Result<Figure, CliError> {
        eprintln!(
            "emulating {}: {} ({:.0} s)",
            sys.describe(),
            l.name,
            opts.time.as_secs_f64() * 1.25
        );
        emulated::measure(e, l, opts).map_err(CliError::failure)
    };
    let m = |l: &Load| m_on(&a, l);
    let (degraded_seq_read, degraded_workloads) = match &degraded {
        Some(d) => (
            Some(m_on(d, &seq_load(true, true))?),
            loads
                .iter()
                .map(|l| m_on(d, l))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        None => (None, Vec::new()),
    };
    Ok(Prediction {
        method: "emulated",
        seq_read_outer: m(&seq_load(true, true))?,
        seq_read_inner: m(&seq_load(true, false))?,
        seq_write_outer: m(&seq_load(false, true))?,
        seq_write_inner: m(&seq_load(false, false))?,
        workloads: loads.iter().map(m).collect::<Result<_, _>>()?,
        degraded_seq_read,
        degraded_workloads,
        rebuild_under_load: None,
        ..p.clone()
    })
}

pub fn run(args: ModelArgs) -> Result<(), CliError> {
    let setup = args.config.setup("5", "6")?;
    let (analytic, emulate) = match args.method.as_str() {
        "analytic" => (true, false),
        "emulated" => (false, true),
        "both" => (true, true),
        o => {
            return Err(CliError::usage(format!(
                "--method {o}: analytic, emulated or both"
            )))
        }
    };
    let opts = emulated_options(args.time, &args.member_size)?;
    let mut out = Vec::new();
    for sys in &setup.systems {
        let p = analyze(
            sys,
            &setup.loads,
            setup.replace_hours,
            setup.fleet,
            args.load_share,
        )
        .map_err(CliError::usage)?;
        if emulate {
            let e = emulate_prediction(&p, sys, &setup.loads, &setup.catalog, &opts)?;
            if !args.json {
                print_prediction(&e);
            }
            out.push(e);
        }
        if analytic {
            if !args.json {
                print_prediction(&p);
            }
            out.push(p);
        }
    }
    if out.len() > 1 && !args.json {
        print_table(&out);
    }
    if let Some(stem) = &args.chart {
        let files = chart_predictions(stem, &out)?;
        if !args.json {
            for f in files {
                println!("chart: {}", f.display());
            }
        }
    }
    if args.json {
        let doc = serde_json::json!({ "schema": "raidkit-model/1", "predictions": out });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| CliError::failure(e.to_string()))?
        );
    }
    Ok(())
}

/// The studies' table: one row per configuration.
fn print_table(ps: &[Prediction]) {
    let wl = ps
        .first()
        .and_then(|p| p.workloads.first())
        .map(|f| f.what.clone())
        .unwrap_or_default();
    println!();
    println!(
        "{:<10} {:<22} {:>3} {:>9} {:>5} {:>9} {:>9} {:>9} {:>11} {:>8} {:>10}",
        "method",
        "level",
        "n",
        "capacity",
        "eff",
        "write",
        "read",
        "read in",
        "first load",
        "rebuild",
        "loss/year"
    );
    println!(
        "{:<10} {:<22} {:>3} {:>9} {:>5} {:>9} {:>9} {:>9} {:>11} {:>8} {:>10}",
        "", "", "", "", "", "MB/s", "MB/s", "MB/s", "MB/s", "h", ""
    );
    for p in ps {
        println!(
            "{:<10} {:<22} {:>3} {:>9} {:>4.0}% {:>9.1} {:>9.1} {:>9.1} {:>11.1} {:>8.1} {:>10.2e}",
            p.method,
            p.level,
            p.drives,
            gb(p.capacity_bytes),
            p.efficiency * 100.0,
            p.seq_write_outer.mb_s,
            p.seq_read_outer.mb_s,
            p.seq_read_inner.mb_s,
            p.workloads.first().map_or(0.0, |f| f.mb_s),
            p.reliability.rebuild_hours,
            p.reliability.annual_loss
        );
    }
    if !wl.is_empty() {
        println!("(first load: {wl}; write and read: sequential 1 MiB at QD 4 over the outer 5%, read in: the inner 5%)");
    }
}

fn by_level(ps: &[Prediction], y: impl Fn(&Prediction) -> f64) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for p in ps {
        let name = format!("{} ({})", p.level, p.method);
        let point = (p.drives as f64, y(p));
        match out.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(point),
            None => out.push(Series {
                name,
                points: vec![point],
            }),
        }
    }
    out
}

/// Safety over speed, one point per configuration: -log10 of the annual chance of losing the
/// array (each step is ten times safer) against the first workload's MB/s, and capacity.
fn chart_tradeoff(
    stem: &std::path::Path,
    title: &str,
    ps: &[Prediction],
) -> Result<Vec<PathBuf>, CliError> {
    let point = |p: &Prediction, x: f64| Series {
        name: format!("{} x{}", p.level, p.drives),
        points: vec![(x, (-p.reliability.annual_loss.max(1e-15).log10()).min(15.0))],
    };
    let speed: Vec<Series> = ps
        .iter()
        .map(|p| point(p, p.workloads.first().map_or(0.0, |f| f.mb_s)))
        .collect();
    let capacity: Vec<Series> = ps
        .iter()
        .map(|p| point(p, p.capacity_bytes as f64 / 1e12))
        .collect();
    let wl = ps
        .first()
        .and_then(|p| p.workloads.first())
        .map_or(String::new(), |f| f.what.clone());
    let y = "safety: -log10(annual chance of loss)".to_string();
    let a1 = Axes {
        title: format!("safety against {wl} MB/s"),
        x: "MB/s".into(),
        y: y.clone(),
        log_x: false,
    };
    let a2 = Axes {
        title: "safety against capacity".into(),
        x: "TB".into(),
        y,
        log_x: false,
    };
    chart::pair(stem, title, (&a1, &speed), (&a2, &capacity)).map_err(CliError::failure)
}

fn chart_predictions(stem: &std::path::Path, ps: &[Prediction]) -> Result<Vec<PathBuf>, CliError> {
    let mut counts: Vec<usize> = ps.iter().map(|p| p.drives).collect();
    counts.sort_unstable();
    counts.dedup();
    if counts.len() < 2 {
        let title = ps.first().map(|p| p.system.clone()).unwrap_or_default();
        return chart_tradeoff(stem, &title, ps);
    }
    let w = by_level(ps, |p| p.seq_write_outer.mb_s);
    let r = by_level(ps, |p| p.seq_read_outer.mb_s);
    let axes = |t: &str| Axes {
        title: t.into(),
        x: "drives".into(),
        y: "MB/s".into(),
        log_x: false,
    };
    let (aw, ar) = (
        axes("sequential write, outer 5%"),
        axes("sequential read, outer 5%"),
    );
    let title = ps
        .first()
        .map(|p| format!("predicted: {}", p.system))
        .unwrap_or_default();
    chart::pair(stem, &title, (&aw, &w), (&ar, &r)).map_err(CliError::failure)
}

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// A measurements file of the same form as the studies' (default: the studies' own,
    /// built in).
    #[arg(long)]
    pub measurements: Option<PathBuf>,
    /// A catalog of your own drives and controllers beside the built-in one.
    #[arg(long)]
    pub catalog: Option<PathBuf>,
    /// analytic, emulated or both (emulated runs each cell that raidkit can build, in real
    /// time: about eight minutes for the studies' 55 cells at --time 2).
    #[arg(long, default_value = "analytic")]
    pub method: String,
    /// Seconds each emulated cell is measured.
    #[arg(long, default_value_t = 3.0)]
    pub time: f64,
    /// Each emulated member's size in memory.
    #[arg(long, default_value = "1G")]
    pub member_size: String,
    /// Draw predicted against measured MB/s, each method a colour, with the line where
    /// they are equal, to STEM.svg and STEM.png.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Only the cells whose label contains this text (`004`, `RAID5 x6`).
    #[arg(long)]
    pub only: Option<String>,
    /// Print a JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(serde::Serialize)]
struct Row {
    #[serde(flatten)]
    case: Case,
    analytic: Predicted,
    emulated: Option<Predicted>,
    /// The analytic method with the RAID in the host, as the emulated arrays run it, and
    /// its difference from the emulated figure.
    analytic_as_raidkit: Option<f64>,
    agreement: Option<f64>,
    explained: Option<&'static str>,
}

pub fn validate(args: ValidateArgs) -> Result<(), CliError> {
    let cat = catalog(args.catalog.as_deref())?;
    let text = match &args.measurements {
        Some(p) => std::fs::read_to_string(p)
            .map_err(|e| CliError::usage(format!("{}: {e}", p.display())))?,
        None => validate::SEED_MEASUREMENTS.to_string(),
    };
    let emulate = match args.method.as_str() {
        "analytic" => false,
        "emulated" | "both" => true,
        o => {
            return Err(CliError::usage(format!(
                "--method {o}: analytic, emulated or both"
            )))
        }
    };
    let opts = emulated_options(args.time, &args.member_size)?;
    let mut cases = validate::cases(&text, &cat).map_err(CliError::usage)?;
    if let Some(o) = &args.only {
        cases.retain(|c| c.label.contains(o.as_str()));
        if cases.is_empty() {
            return Err(CliError::usage(format!(
                "--only {o:?}: no cell's label contains it"
            )));
        }
    }
    let mut rows = Vec::new();
    for c in cases {
        let f = raidkit_model::predict(&c.system, &c.load).map_err(CliError::failure)?;
        let analytic = Predicted::of(&c, &f);
        let (mut emulated, mut as_raidkit, mut agreement) = (None, None, None);
        if emulate {
            eprintln!("emulating {}", c.label);
            match emulated::emulate(&c.system, &c.load, &cat, &opts) {
                Ok(e) => {
                    let pe = Predicted::of(&c, &e);
                    let host = System {
                        raid_in: RaidIn::Host,
                        ..c.system.clone()
                    };
                    let fh = raidkit_model::predict(&host, &c.load).map_err(CliError::failure)?;
                    let ph = Predicted::of(&c, &fh);
                    agreement = Some((ph.mb_s - pe.mb_s) / pe.mb_s);
                    as_raidkit = Some(ph.mb_s);
                    emulated = Some(pe);
                }
                Err(why) => eprintln!("  not emulated: {why}"),
            }
        }
        let explained = validate::explanation(&c);
        rows.push(Row {
            case: c,
            analytic,
            emulated,
            analytic_as_raidkit: as_raidkit,
            agreement,
            explained,
        });
    }
    let med_a = validate::median_abs(rows.iter().map(|r| r.analytic.error));
    let med_e = validate::median_abs(
        rows.iter()
            .filter_map(|r| r.emulated.as_ref().map(|e| e.error)),
    );
    let med_g = validate::median_abs(rows.iter().filter_map(|r| r.agreement));
    let outside = |f: &dyn Fn(&Row) -> Option<f64>| {
        rows.iter()
            .filter(|r| f(r).is_some_and(|e| e.abs() > 0.3))
            .count()
    };
    let out_a = outside(&|r| Some(r.analytic.error));
    let out_a_unexplained = rows
        .iter()
        .filter(|r| r.analytic.error.abs() > 0.3 && r.explained.is_none())
        .count();
    let out_e = outside(&|r| r.emulated.as_ref().map(|e| e.error));
    let mut charts = Vec::new();
    if let Some(stem) = &args.chart {
        // Logarithmic both ways would suit the range (1 to 1000 MB/s); the chart is linear,
        // so the ratio is drawn: predicted over measured, against measured.
        let ratio = |name: &str, f: &dyn Fn(&Row) -> Option<f64>| Series {
            name: name.into(),
            points: rows
                .iter()
                .filter_map(|r| {
                    f(r).map(|v| (r.case.measured.value(), v / r.case.measured.value()))
                })
                .collect(),
        };
        let top = rows
            .iter()
            .map(|r| r.case.measured.value())
            .fold(1.0, f64::max);
        let mut points = vec![ratio("analytic", &|r| Some(r.analytic.mb_s))];
        if emulate {
            points.push(ratio("emulated", &|r| r.emulated.as_ref().map(|e| e.mb_s)));
        }
        let lines = [
            Series {
                name: "equal".into(),
                points: vec![(0.0, 1.0), (top, 1.0)],
            },
            Series {
                name: "30% off".into(),
                points: vec![(0.0, 0.7), (top, 0.7), (top, 1.3), (0.0, 1.3)],
            },
        ];
        let axes = Axes {
            title: "predicted over measured, each cell of the studies".into(),
            x: "measured MB/s".into(),
            y: "predicted / measured".into(),
            log_x: false,
        };
        charts = chart::scatter(stem, &axes, &points, &lines).map_err(CliError::failure)?;
    }
    if args.json {
        let doc = serde_json::json!({
            "schema": "raidkit-model-validate/1",
            "cells": rows,
            "analytic": { "median_abs_error": med_a, "beyond_30pct": out_a, "beyond_30pct_unexplained": out_a_unexplained },
            "emulated": if emulate { serde_json::json!({ "median_abs_error": med_e, "beyond_30pct": out_e, "median_abs_disagreement_with_analytic": med_g }) } else { serde_json::Value::Null },
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| CliError::failure(e.to_string()))?
        );
        return Ok(());
    }
    print!(
        "{:<50} {:>9} {:>9} {:>6}",
        "cell", "measured", "analytic", "error"
    );
    if emulate {
        print!(
            " {:>9} {:>6} {:>9} {:>6}",
            "emulated", "error", "a(host)", "agree"
        );
    }
    println!("  what limits it (analytic)");
    for r in &rows {
        print!(
            "{:<50} {:>9.1} {:>9.1} {:>+5.0}%",
            r.case.label,
            r.case.measured.value(),
            r.analytic.mb_s,
            r.analytic.error * 100.0
        );
        if emulate {
            match (&r.emulated, r.analytic_as_raidkit, r.agreement) {
                (Some(e), Some(h), Some(g)) => print!(
                    " {:>9.1} {:>+5.0}% {:>9.1} {:>+5.0}%",
                    e.mb_s,
                    e.error * 100.0,
                    h,
                    g * 100.0
                ),
                _ => print!(" {:>9} {:>6} {:>9} {:>6}", "-", "", "-", ""),
            }
        }
        println!("  {}", r.analytic.limit);
    }
    println!();
    println!(
        "analytic: median absolute error {:.1}% over {} cells; {} beyond 30% ({} of them explained below)",
        med_a * 100.0,
        rows.len(),
        out_a,
        out_a - out_a_unexplained
    );
    if emulate {
        let n = rows.iter().filter(|r| r.emulated.is_some()).count();
        println!(
            "emulated: median absolute error {:.1}% over {n} cells; {out_e} beyond 30%; against the analytic method with the RAID in the host: median {:.1}% apart",
            med_e * 100.0,
            med_g * 100.0
        );
    }
    for r in rows.iter().filter(|r| r.explained.is_some()) {
        println!("- {}: {}", r.case.label, r.explained.unwrap_or_default());
    }
    for c in charts {
        println!("chart: {}", c.display());
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The most drives to buy (configurations of 2 up to this many are weighed, unless
    /// --drives names counts).
    #[arg(long, default_value_t = 8)]
    pub budget: usize,
    /// Capacity needed (`6T`, `500G`; decimal units as drives are sold).
    #[arg(long)]
    pub min_capacity: Option<String>,
    /// MB/s the workload needs.
    #[arg(long)]
    pub min_mb_s: Option<f64>,
    /// IOPS the workload needs.
    #[arg(long)]
    pub min_iops: Option<f64>,
    /// The highest acceptable annual chance of losing the array (`1e-4`).
    #[arg(long)]
    pub max_annual_loss: Option<f64>,
    /// Rank by speed (the workload's MB/s), capacity or risk.
    #[arg(long, default_value = "speed")]
    pub by: String,
    /// Write a chart (STEM.svg and STEM.png).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Print a JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn decimal_size(s: &str) -> Result<f64, CliError> {
    let t = s.trim().to_ascii_uppercase();
    let (num, mul) = match t.chars().last() {
        Some('T') => (&t[..t.len() - 1], 1e12),
        Some('G') => (&t[..t.len() - 1], 1e9),
        Some('M') => (&t[..t.len() - 1], 1e6),
        _ => (t.as_str(), 1.0),
    };
    num.trim_end_matches('B')
        .parse::<f64>()
        .map(|v| v * mul)
        .map_err(|_| CliError::usage(format!("{s:?}: a size such as 6T or 500G")))
}

#[derive(serde::Serialize)]
struct Candidate {
    prediction: Prediction,
    meets: bool,
    /// Why it does not.
    misses: Vec<String>,
}

pub fn plan(args: PlanArgs) -> Result<(), CliError> {
    let budget = args.budget.clamp(2, 64);
    let counts = (2..=budget)
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut cfg_args = args.config;
    if cfg_args.workload.is_none() {
        cfg_args.workload = Some("video-editing".into());
    }
    let setup = cfg_args.setup("0,1,5,6,10,10f2,50,60", &counts)?;
    let min_cap = args.min_capacity.as_deref().map(decimal_size).transpose()?;
    let mut cands = Vec::new();
    for sys in &setup.systems {
        let p = analyze(sys, &setup.loads, setup.replace_hours, setup.fleet, 0.5)
            .map_err(CliError::usage)?;
        let f = &p.workloads[0];
        let mut misses = Vec::new();
        if let Some(c) = min_cap {
            if (p.capacity_bytes as f64) < c {
                misses.push(format!(
                    "capacity {} < {}",
                    gb(p.capacity_bytes),
                    gb(c as u64)
                ));
            }
        }
        if let Some(m) = args.min_mb_s {
            if f.mb_s < m {
                misses.push(format!("{:.0} MB/s < {m:.0}", f.mb_s));
            }
        }
        if let Some(m) = args.min_iops {
            if f.iops < m {
                misses.push(format!("{:.0} IOPS < {m:.0}", f.iops));
            }
        }
        if let Some(m) = args.max_annual_loss {
            if p.reliability.annual_loss > m {
                misses.push(format!(
                    "annual loss {:.1e} > {m:.1e}",
                    p.reliability.annual_loss
                ));
            }
        }
        cands.push(Candidate {
            meets: misses.is_empty(),
            misses,
            prediction: p,
        });
    }
    let key = |c: &Candidate| -> f64 {
        let p = &c.prediction;
        match args.by.as_str() {
            "capacity" => p.capacity_bytes as f64,
            "risk" => -p.reliability.annual_loss,
            _ => p.workloads[0].mb_s,
        }
    };
    if !["speed", "capacity", "risk"].contains(&args.by.as_str()) {
        return Err(CliError::usage(format!(
            "--by {}: speed, capacity or risk",
            args.by
        )));
    }
    // Those that meet every constraint first; within each group, by the key, then fewer
    // drives.
    cands.sort_by(|a, b| {
        b.meets
            .cmp(&a.meets)
            .then(key(b).total_cmp(&key(a)))
            .then(a.prediction.drives.cmp(&b.prediction.drives))
    });
    let load = setup.loads[0].describe();
    let reason = cands.first().filter(|c| c.meets).map(|c| {
        let p = &c.prediction;
        let f = &p.workloads[0];
        format!(
            "{} of {} drives: {} at {:.0} MB/s for {} ({}), {} usable, annual loss {:.1e} with rebuilds of {:.1} h; the {} of the {} configurations that meet every constraint.",
            p.level,
            p.drives,
            match args.by.as_str() { "capacity" => "the most capacity", "risk" => "the least risk", _ => "the fastest" },
            f.mb_s,
            f.what,
            f.limit,
            gb(p.capacity_bytes),
            p.reliability.annual_loss,
            p.reliability.rebuild_hours,
            match args.by.as_str() { "capacity" => "largest", "risk" => "safest", _ => "fastest" },
            cands.iter().filter(|c| c.meets).count()
        )
    });
    if args.json {
        let doc = serde_json::json!({ "schema": "raidkit-plan/1", "load": load, "ranked": cands, "reason": reason });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| CliError::failure(e.to_string()))?
        );
    } else {
        println!(
            "plan for {} drives, workload {load}, ranked by {}",
            setup.systems[0].drive.name, args.by
        );
        println!(
            "{:>4} {:<20} {:>3} {:>9} {:>9} {:>9} {:>8} {:>10}  verdict",
            "rank", "level", "n", "capacity", "MB/s", "IOPS", "rebuild", "loss/year"
        );
        for (i, c) in cands.iter().enumerate().take(25) {
            let p = &c.prediction;
            println!(
                "{:>4} {:<20} {:>3} {:>9} {:>9.1} {:>9.0} {:>7.1}h {:>10.2e}  {}",
                i + 1,
                p.level,
                p.drives,
                gb(p.capacity_bytes),
                p.workloads[0].mb_s,
                p.workloads[0].iops,
                p.reliability.rebuild_hours,
                p.reliability.annual_loss,
                if c.meets {
                    "meets".to_string()
                } else {
                    c.misses.join("; ")
                }
            );
        }
        if cands.len() > 25 {
            println!("({} more)", cands.len() - 25);
        }
        match &reason {
            Some(r) => println!("\nchoice: {r}"),
            None => println!("\nno configuration meets every constraint; the closest come first"),
        }
    }
    if let Some(stem) = &args.chart {
        let ps: Vec<Prediction> = cands.iter().map(|c| c.prediction.clone()).collect();
        let title = format!("plan: {} drives, {}", setup.systems[0].drive.name, load);
        let files = chart_tradeoff(stem, &title, &ps)?;
        if !args.json {
            for f in files {
                println!("chart: {}", f.display());
            }
        }
    }
    Ok(())
}
