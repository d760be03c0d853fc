//! The emulated method: raidkit's own engine over emulated drives of the catalog, in real
//! time and time-boxed, measured by the lab's load generator (`raidkit bench run`'s), so
//! that a prediction uses raidkit's own I/O planning. The drives keep their bytes in memory;
//! each drive's whole surface (zones, seeks) is laid over `member_bytes`.
//!
//! Arrays are created without a write-hole log (md's `resync` policy), the way the
//! analytic method counts their I/O; a degraded one has member 0 failed (of the first span,
//! for RAID 50 and 60, which are built as md stacks them: RAID 5 or 6 spans under a RAID 0).

use crate::analytic::Figure;
use crate::level::Level;
use crate::system::{Load, System};
use raidkit_bench::lab::disks::emulated_drive;
use raidkit_bench::lab::run::{run, RunOptions};
use raidkit_bench::lab::target::ArrayTarget;
use raidkit_bench::lab::workload::{Limit, Workload};
use raidkit_disk::emu::catalog::Catalog;
use raidkit_disk::{Disk, EmuProbe};
use raidkit_engine::{Array, ConsistencyPolicy, CreateOptions, EngineConfig, StackOptions};
use raidkit_metadata::SuperblockVersion;
use std::sync::Arc;
use std::time::Duration;

/// How an emulated run is carried out.
#[derive(Clone, Debug)]
pub struct EmulatedOptions {
    /// Each member's size in memory.
    pub member_bytes: u64,
    /// Measured time of each run (after a warm-up of a quarter of it, at most 1 s).
    pub time: Duration,
}

impl Default for EmulatedOptions {
    fn default() -> Self {
        EmulatedOptions {
            member_bytes: 1 << 30,
            time: Duration::from_secs(3),
        }
    }
}

/// An array on emulated drives, and a watch on each drive.
pub struct Emulated {
    pub array: Arc<Array>,
    pub probes: Vec<EmuProbe>,
}

/// An array of `sys` on emulated drives, created clean.
pub fn build(sys: &System, catalog: &Catalog, opts: &EmulatedOptions) -> Result<Emulated, String> {
    sys.check()?;
    let spans = match sys.level {
        Level::Raid50 { spans } => Some((50, spans as usize)),
        Level::Raid60 { spans } => Some((60, spans as usize)),
        _ => None,
    };
    let (level, layout) = match spans {
        Some((level, _)) => (level, None),
        None => sys
            .level
            .md()
            .ok_or_else(|| format!("{} has no md level", sys.level.label()))?,
    };
    let behind = match &sys.controller {
        Some(c) => Some(c.name.clone()),
        None if sys.host_link != "none" => Some(sys.host_link.clone()),
        None => None,
    };
    let mut drive = sys.drive.clone();
    if let (Some(wc), raidkit_disk::emu::catalog::Mechanics::Hdd(h)) =
        (sys.write_cache, &mut drive.mechanics)
    {
        h.write_cache = wc;
    }
    let n = sys.drives;
    let mut disks: Vec<Box<dyn Disk>> = Vec::with_capacity(n);
    let mut probes = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("emu:{}#{i}", drive.name);
        let d = emulated_drive(&drive, catalog, &name, opts.member_bytes, behind.as_deref())
            .map_err(|e| e.to_string())?;
        probes.push(d.probe());
        disks.push(Box::new(d));
    }
    let create = CreateOptions {
        level,
        layout,
        chunk_sectors: (sys.chunk_bytes / 512) as u32,
        raid_devices: n,
        metadata: SuperblockVersion::V1_2,
        size_sectors: None,
        name: "model".into(),
        set_uuid: [0x4d; 16],
        device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
        ctime_seconds: 1_700_000_000,
        init: raidkit_engine::Init::Zeroed,
        consistency: ConsistencyPolicy::Resync,
        config: EngineConfig::default(),
    };
    let a = match spans {
        Some((_, spans)) => Array::create_stack(
            disks,
            create,
            StackOptions {
                spans,
                span_set_uuids: (0..spans).map(|i| [0x50 + i as u8; 16]).collect(),
                span_device_uuids: (0..spans).map(|i| [0x70 + i as u8; 16]).collect(),
            },
            &|_, _| {},
        ),
        None => Array::create(disks, create),
    }
    .map_err(|e| format!("create {}: {e}", sys.describe()))?;
    // A degraded array: member 0 failed (of the first span), as the analytic method has it.
    let array = Arc::new(a);
    let first = array
        .spans()
        .first()
        .cloned()
        .unwrap_or_else(|| array.clone());
    for i in 0..sys.missing {
        first
            .fail_member(i)
            .map_err(|e| format!("fail member {i}: {e}"))?;
    }
    Ok(Emulated { array, probes })
}

/// The lab's workload for `load`, time-boxed.
pub fn workload(load: &Load, time: Duration) -> Result<Workload, String> {
    if load.streams > 1 {
        return Err("several independent streams are not emulated".into());
    }
    let mut w = Workload::custom(
        load.request_bytes,
        load.read_pct,
        load.random_pct,
        load.queue_depth,
    );
    w.name = load.name.clone();
    w.region = load.region;
    w.limit = Limit::Time(time);
    w.warmup = (time / 4).min(Duration::from_secs(1));
    Ok(w)
}

/// A sequential load runs once over its region, dd's way, when the region is a small part
/// of the array: run again and again, a region the drives' buffers hold would be read from
/// them.
pub fn one_pass(w: &mut Workload, array_bytes: u64) {
    let share = w.region.end - w.region.start;
    let span = (share * array_bytes as f64) as u64;
    if w.random_pct == 0 && share <= ONE_PASS_SHARE && span < ONE_PASS_MAX {
        w.limit = Limit::Bytes(span / w.request_bytes.max(1) * w.request_bytes.max(1));
        w.warmup = Duration::ZERO;
    }
}

/// Regions up to this share of the array, and below this size, are run once.
const ONE_PASS_SHARE: f64 = 0.25;
const ONE_PASS_MAX: u64 = 8 << 30;

/// The longest a load with writes runs unmeasured to fill the drives' write caches.
const FILL_MAX: Duration = Duration::from_secs(60);

/// Measures `load` on an emulated array of `sys` (built once by [`build`]). A load with
/// writes first runs unmeasured until every drive's write cache is nine-tenths full (or a
/// minute passed): measured from empty caches, a short run would time the caches, not the
/// drives, where the studies ran for minutes.
pub fn measure(e: &Emulated, load: &Load, opts: &EmulatedOptions) -> Result<Figure, String> {
    let a = &e.array;
    let mut w = workload(load, opts.time)?;
    one_pass(&mut w, a.size_bytes());
    let full = || {
        e.probes.iter().all(|p| {
            p.write_cache_fill()
                .is_none_or(|(held, size)| held * 10 >= size * 9)
        })
    };
    if matches!(w.limit, Limit::Bytes(_)) {
        // A single pass has no warm-up of its own: the engine's threads and buffers are
        // warmed on another part of the array first (the first pass of a process ran at
        // half speed), and that part's writes flushed.
        let mut warm = w.clone();
        let (lo, hi) = if w.region.start < 0.5 {
            (0.6, 0.7)
        } else {
            (0.2, 0.3)
        };
        warm.region = raidkit_bench::lab::workload::Region { start: lo, end: hi };
        warm.limit = Limit::Time(Duration::from_millis(300));
        warm.warmup = Duration::ZERO;
        let mut t = ArrayTarget::new(a.clone(), "model".into());
        let flush = RunOptions {
            flush_at_end: true,
            ..RunOptions::default()
        };
        run(&mut t, &warm, &flush).map_err(|e| e.to_string())?;
    }
    if load.read_pct < 100 && matches!(w.limit, Limit::Time(_)) {
        let started = std::time::Instant::now();
        let mut fill = w.clone();
        fill.limit = Limit::Time(Duration::from_millis(500));
        fill.warmup = Duration::ZERO;
        while !full() && started.elapsed() < FILL_MAX {
            let mut t = ArrayTarget::new(a.clone(), "model".into());
            run(&mut t, &fill, &RunOptions::default()).map_err(|e| e.to_string())?;
        }
    }
    let mut t = ArrayTarget::new(a.clone(), "model".into());
    // A single pass that writes ends with a flush inside the timed part (dd's
    // conv=fdatasync): what the drives' caches took is written before the figure counts it.
    let opts = RunOptions {
        flush_at_end: load.read_pct < 100 && matches!(w.limit, Limit::Bytes(_)),
        ..RunOptions::default()
    };
    let r = run(&mut t, &w, &opts).map_err(|e| e.to_string())?;
    Ok(Figure {
        what: load.name.clone(),
        load: load.describe(),
        mb_s: r.mb_s,
        iops: r.iops,
        latency_ms: r.latency_us.mean / 1e3,
        limit: format!(
            "measured: p99 {:.1} ms, busiest member {:.0}% busy",
            r.latency_us.p99 / 1e3,
            r.members.iter().map(|m| m.util_pct).fold(0.0, f64::max)
        ),
        members_mb_s: r
            .members
            .iter()
            .map(|m| m.read_mb_s + m.write_mb_s)
            .collect(),
    })
}

/// Builds the array and measures `load` on it.
pub fn emulate(
    sys: &System,
    load: &Load,
    catalog: &Catalog,
    opts: &EmulatedOptions,
) -> Result<Figure, String> {
    let e = build(sys, catalog, opts)?;
    measure(&e, load, opts)
}
