//! Arrays on emulated disks against one emulated drive, side by side in one run: the speed
//! that real media allow, and how much of it each level keeps. Every member is an emulated
//! drive in memory ([`raidkit_disk::EmuDisk`]), so the run needs no files and no devices;
//! each figure is measured, its baseline measured on one drive of the same model in the same
//! run, and the ratio set against the bar the project holds the level to.

use super::run::{run, RunOptions, RunResult};
use super::target::{ArrayTarget, DiskSurface, InProcessTarget};
use super::workload::{Limit, Workload};
use super::LabError;
use raidkit_disk::emu::catalog::{Catalog, DriveSpec};
use raidkit_disk::{Disk, EmuDisk, MemDisk};
use raidkit_engine::{Array, ConsistencyPolicy, CreateOptions, EngineConfig};
use raidkit_metadata::SuperblockVersion;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Told what runs now.
pub type Say = Arc<dyn Fn(&str) + Send + Sync>;

/// A rebuild's member rate (MB/s), and with foreground reads: their healthy run, their run
/// during the rebuild, and whether the rebuild was still running when they ended.
type RebuildRun = (f64, Option<(RunResult, RunResult, bool)>);

/// What the comparison runs.
#[derive(Clone)]
pub struct DisksConfig {
    /// The drive of the catalog every member and the baseline are.
    pub drive: DriveSpec,
    pub catalog: Catalog,
    /// Each member's (and the baseline drive's) size; the drive's whole surface is laid
    /// over it.
    pub member_bytes: u64,
    /// Seconds per timed run.
    pub time: Duration,
    /// Members of the wide arrays (the bars are set for 6).
    pub members: usize,
    pub chunk_sectors: u32,
    /// Told what runs now.
    pub progress: Option<Say>,
}

/// One figure: what was measured, against what, and the bar.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    /// What was measured (`RAID 0 x6 sequential read`).
    pub what: String,
    pub value: f64,
    /// `MB/s` or `IOPS`.
    pub unit: &'static str,
    /// The baseline it is compared with (`6 x one drive`).
    pub baseline_what: String,
    pub baseline: f64,
    pub ratio: f64,
    /// The ratio the project asks for (`>= bar`; `> bar` when `strict`).
    pub bar: f64,
    pub strict: bool,
    pub met: bool,
    /// What else the reader should know (the write-hole protection in use, say).
    pub note: String,
}

/// One emulated drive's own figures, the baselines.
#[derive(Clone, Debug, Serialize)]
pub struct DriveFigures {
    pub drive: String,
    pub model: String,
    pub seq_read_mb_s: f64,
    pub seq_write_mb_s: f64,
    pub rand_read_iops_qd16: f64,
    /// Sequential write over a member's whole span (the rebuild's baseline).
    pub span_write_mb_s: f64,
}

fn e(x: impl std::fmt::Display) -> LabError {
    LabError::Target(x.to_string())
}

/// An emulated `drive` of `bytes` in memory named `name` (behind a controller or link of
/// `catalog`), its pages touched now: the kernel's first-touch zeroing of six members'
/// memory would otherwise be timed with the first writes (it took the CPUs).
pub fn emulated_drive(
    drive: &DriveSpec,
    catalog: &Catalog,
    name: &str,
    bytes: u64,
    behind: Option<&str>,
) -> Result<EmuDisk, LabError> {
    let mem = MemDisk::new(name, bytes);
    // Zeroes written (not a hole left): every page is touched.
    mem.write_zeroes(0, bytes).map_err(e)?;
    EmuDisk::wrap(Box::new(mem), drive, name, behind, catalog).map_err(e)
}

impl DisksConfig {
    fn say(&self, what: &str) {
        if let Some(p) = &self.progress {
            p(what);
        }
    }

    fn drive(&self, name: &str) -> Result<EmuDisk, LabError> {
        emulated_drive(&self.drive, &self.catalog, name, self.member_bytes, None)
    }

    fn array(
        &self,
        level: i32,
        layout: Option<u32>,
        n: usize,
    ) -> Result<(Arc<Array>, ConsistencyPolicy), LabError> {
        let disks = (0..n)
            .map(|i| {
                self.drive(&format!("emu:{}#{i}", self.drive.name))
                    .map(|d| Box::new(d) as Box<dyn Disk>)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let a = Array::create(
            disks,
            CreateOptions {
                level,
                layout,
                chunk_sectors: self.chunk_sectors,
                raid_devices: n,
                metadata: SuperblockVersion::V1_2,
                size_sectors: None,
                name: "disks".into(),
                set_uuid: [0x44; 16],
                device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
                ctime_seconds: 1_700_000_000,
                init: raidkit_engine::Init::Zeroed,
                // Each level's default write-hole protection (raidkit create's).
                consistency: ConsistencyPolicy::Auto,
                config: EngineConfig::default(),
            },
        )
        .map_err(|x| LabError::Target(format!("create RAID {level} over {n}: {x}")))?;
        let policy = a.status().consistency_policy;
        Ok((Arc::new(a), policy))
    }

    fn seq(&self, read: bool) -> Workload {
        Workload {
            queue_depth: 4,
            ..Workload::sequential(1 << 20, read, Limit::Time(self.time))
        }
    }

    fn random_reads(&self) -> Workload {
        Workload {
            name: "rand-read-4KiB".into(),
            limit: Limit::Time(self.time),
            warmup: Duration::from_millis(500),
            ..Workload::custom(4096, 100, 100, 16)
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Work {
    SeqRead,
    SeqWrite,
    RandRead,
}

/// One measurement of an array: what, the workload, the baseline (what, value) and the bar.
struct Check {
    what: &'static str,
    work: Work,
    base: (String, f64),
    bar: f64,
    strict: bool,
    /// The figure names the write-hole protection in use.
    protected: bool,
}

impl Check {
    fn new(what: &'static str, work: Work, base: (String, f64), bar: f64) -> Check {
        Check {
            what,
            work,
            base,
            bar,
            strict: false,
            protected: false,
        }
    }

    fn protected(self) -> Check {
        Check {
            protected: true,
            ..self
        }
    }
}

fn measure_array(a: &Arc<Array>, what: &str, w: &Workload) -> Result<RunResult, LabError> {
    let mut t = ArrayTarget::new(a.clone(), what.to_string());
    run(&mut t, w, &RunOptions::default())
}

/// A figure of `r` (its IOPS when `iops`, else MB/s) against `baseline` (what, value),
/// held to `ratio >= bar`.
fn figure(what: String, r: &RunResult, iops: bool, baseline: (String, f64), bar: f64) -> Figure {
    let value = if iops { r.iops } else { r.mb_s };
    let ratio = if baseline.1 > 0.0 {
        value / baseline.1
    } else {
        0.0
    };
    Figure {
        what,
        value,
        unit: if iops { "IOPS" } else { "MB/s" },
        baseline_what: baseline.0,
        baseline: baseline.1,
        ratio,
        bar,
        strict: false,
        met: ratio >= bar,
        note: String::new(),
    }
}

impl Figure {
    fn noted(mut self, note: String) -> Figure {
        self.note = note;
        self
    }

    /// Held to `ratio > bar` instead.
    fn strictly(mut self) -> Figure {
        self.strict = true;
        self.met = self.ratio > self.bar;
        self
    }
}

fn policy_note(p: ConsistencyPolicy) -> String {
    match p {
        ConsistencyPolicy::Ppl => "default protection: partial parity log".into(),
        ConsistencyPolicy::Resync => "default protection: resync after an unclean stop".into(),
        other => format!("protection: {other:?}"),
    }
}

/// Measures one drive, then every array of the comparison; `on_figure` sees each figure as
/// it is made.
pub fn run_disks(
    cfg: &DisksConfig,
    mut on_figure: impl FnMut(&Figure),
) -> Result<(DriveFigures, Vec<Figure>), LabError> {
    let name = format!("emu:{}", cfg.drive.name);
    let one_with = |w: &Workload, opts: &RunOptions| -> Result<RunResult, LabError> {
        let d: Arc<dyn Disk> = Arc::new(cfg.drive(&name)?);
        let mut t = InProcessTarget::new(Arc::new(DiskSurface::new(d)), name.clone());
        run(&mut t, w, opts)
    };
    let one = |w: &Workload| one_with(w, &RunOptions::default());
    cfg.say(
        "one drive: sequential read, sequential write, random reads at QD 16, a whole-span write",
    );
    let r1 = one(&cfg.seq(true))?;
    let w1 = one(&cfg.seq(false))?;
    let i1 = one(&cfg.random_reads())?;
    let span = Workload {
        queue_depth: 4,
        ..Workload::sequential(1 << 20, false, Limit::Bytes(cfg.member_bytes))
    };
    // Flushed at the end, as a rebuild is: until then part of the span is only in the
    // drive's write cache (32 MiB on the HDS72101, half a second to drain at the inner zone).
    let s1 = one_with(
        &span,
        &RunOptions {
            flush_at_end: true,
            ..RunOptions::default()
        },
    )?;
    let base = DriveFigures {
        drive: cfg.drive.name.clone(),
        model: cfg.drive.model.clone(),
        seq_read_mb_s: r1.mb_s,
        seq_write_mb_s: w1.mb_s,
        rand_read_iops_qd16: i1.iops,
        span_write_mb_s: s1.mb_s,
    };
    let n = cfg.members;
    let nf = n as f64;
    let mut out = Vec::new();
    let mut push = |f: Figure| {
        on_figure(&f);
        out.push(f);
    };

    let drives = |k: usize| match k {
        1 => "one drive".to_string(),
        k => format!("{k} drives"),
    };
    let seq_read = |k: usize| (drives(k), k as f64 * base.seq_read_mb_s);
    let seq_write = |k: usize| (drives(k), k as f64 * base.seq_write_mb_s);
    let plans = [
        (
            "RAID 0",
            0,
            None,
            n,
            vec![
                Check::new("sequential read", Work::SeqRead, seq_read(n), 0.95),
                Check::new("sequential write", Work::SeqWrite, seq_write(n), 0.95),
            ],
        ),
        (
            "RAID 5",
            5,
            None,
            n,
            vec![
                Check::new("sequential write", Work::SeqWrite, seq_write(n - 1), 0.9).protected(),
                Check::new(
                    "4 KiB random read QD 16",
                    Work::RandRead,
                    (
                        format!("{n} x one drive at QD 16"),
                        nf * base.rand_read_iops_qd16,
                    ),
                    0.8,
                ),
            ],
        ),
        (
            "RAID 6",
            6,
            None,
            n,
            vec![Check::new("sequential write", Work::SeqWrite, seq_write(n - 2), 0.9).protected()],
        ),
        (
            "RAID 10 f2",
            10,
            Some(0x201),
            n,
            vec![Check::new(
                "sequential read",
                Work::SeqRead,
                seq_read(n),
                0.9,
            )],
        ),
        (
            "RAID 1",
            1,
            None,
            3,
            vec![Check {
                strict: true,
                ..Check::new(
                    "single-stream read (ratio in drives)",
                    Work::SeqRead,
                    seq_read(1),
                    1.5,
                )
            }],
        ),
    ];
    for (label, level, layout, members, checks) in plans {
        cfg.say(&format!("{label} x{members}"));
        let (a, policy) = cfg.array(level, layout, members)?;
        for c in checks {
            let w = match c.work {
                Work::SeqRead => cfg.seq(true),
                Work::SeqWrite => cfg.seq(false),
                Work::RandRead => cfg.random_reads(),
            };
            let r = measure_array(&a, label, &w)?;
            let what = format!("{label} x{members} {}", c.what);
            let mut f = figure(what, &r, c.work == Work::RandRead, c.base, c.bar);
            if c.strict {
                f = f.strictly();
            }
            if c.protected {
                f = f.noted(policy_note(policy));
            }
            push(f);
        }
        a.stop().map_err(e)?;
    }

    cfg.say(&format!("RAID 5 x{n} rebuild"));
    let (f_idle, f_busy) = rebuild_figures(cfg, &base)?;
    push(f_idle);
    push(f_busy);
    Ok((base, out))
}

/// The rebuild of one member of a RAID 5: idle, against the drive's own write over the same
/// span; and the foreground's sequential reads while it runs, against their healthy rate.
fn rebuild_figures(cfg: &DisksConfig, base: &DriveFigures) -> Result<(Figure, Figure), LabError> {
    let n = cfg.members;
    let rebuild = |foreground: bool| -> Result<RebuildRun, LabError> {
        let (a, _) = cfg.array(5, None, n)?;
        let healthy = if foreground {
            Some(measure_array(&a, "RAID 5", &cfg.seq(true))?)
        } else {
            None
        };
        a.fail_member(1).map_err(e)?;
        a.remove_member(1).map_err(e)?;
        let spare = cfg.drive(&format!("emu:{}#spare", cfg.drive.name))?;
        a.add_spare(Box::new(spare), [0xee; 16]).map_err(e)?;
        let span = a.status().member_data_sectors * 512;
        let started = Instant::now();
        let done = Arc::new(AtomicBool::new(false));
        let (a2, d2) = (a.clone(), done.clone());
        let worker = std::thread::spawn(move || {
            let r = a2.run_pending(&mut |_| {}, &AtomicBool::new(false));
            d2.store(true, Ordering::SeqCst);
            r
        });
        let during = if foreground {
            let r = measure_array(
                &a,
                "RAID 5 rebuilding",
                &Workload {
                    warmup: Duration::ZERO,
                    ..cfg.seq(true)
                },
            )?;
            Some(r)
        } else {
            None
        };
        let still_running = !done.load(Ordering::SeqCst);
        worker
            .join()
            .map_err(|_| LabError::Target("the rebuild thread panicked".into()))?
            .map_err(e)?;
        let secs = started.elapsed().as_secs_f64();
        a.stop().map_err(e)?;
        // Shadowed bindings live to the end of the block: each array's memory goes now.
        drop(a);
        let rate = span as f64 / secs / 1e6;
        Ok((
            rate,
            healthy.zip(during).map(|(h, d)| (h, d, still_running)),
        ))
    };
    let (idle_rate, _) = rebuild(false)?;
    let idle = Figure {
        what: format!("RAID 5 x{n} rebuild of one member, foreground idle"),
        value: idle_rate,
        unit: "MB/s",
        baseline_what: "the drive's sequential write over the same span, flushed".into(),
        baseline: base.span_write_mb_s,
        ratio: idle_rate / base.span_write_mb_s,
        bar: 0.95,
        strict: false,
        met: idle_rate / base.span_write_mb_s >= 0.95,
        note: "member bytes rebuilt / wall time".into(),
    };
    let (_, fg) = rebuild(true)?;
    let (healthy, during, still) = fg.expect("measured with foreground reads");
    let mut busy = figure(
        format!("RAID 5 x{n} sequential read during a rebuild"),
        &during,
        false,
        ("the same reads, healthy".into(), healthy.mb_s),
        0.6,
    );
    busy.note = if still {
        "default task share; the rebuild ran throughout".into()
    } else {
        "default task share; the rebuild finished before the reads did (figure flattered)".into()
    };
    Ok((idle, busy))
}
