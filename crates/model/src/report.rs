//! A configuration's whole prediction: sequential rates at the outer and inner zone, the
//! workloads asked for, degraded figures, rebuild and reliability.

use crate::analytic::{predict, Figure};
use crate::drive::{DriveModel, OpKind, Service};
use crate::reliability::{reliability, Reliability};
use crate::system::{Load, System};
use raidkit_bench::lab::workload::Region;
use serde::Serialize;

/// The share of the array the outer and inner figures use.
pub const ZONE: f64 = 0.05;

#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    pub method: &'static str,
    pub system: String,
    pub level: String,
    pub drives: usize,
    pub capacity_bytes: u64,
    /// Capacity over the drives' raw size.
    pub efficiency: f64,
    pub seq_read_outer: Figure,
    pub seq_read_inner: Figure,
    pub seq_write_outer: Figure,
    pub seq_write_inner: Figure,
    /// Each workload asked for.
    pub workloads: Vec<Figure>,
    /// With one member missing (None where the level survives no failure).
    pub degraded_seq_read: Option<Figure>,
    pub degraded_workloads: Vec<Figure>,
    /// The rebuild while the first workload runs at `load_share` of what the degraded
    /// array can do.
    pub rebuild_under_load: Option<RebuildUnderLoad>,
    pub reliability: Reliability,
}

/// A rebuild beside a foreground load.
#[derive(Clone, Debug, Serialize)]
pub struct RebuildUnderLoad {
    /// The load's share of the degraded array's rate.
    pub load_share: f64,
    pub hours: f64,
    /// What the foreground keeps: its MB/s and IOPS (the share asked for) ...
    pub foreground_mb_s: f64,
    pub foreground_iops: f64,
    /// ... and the time a request may wait behind a rebuild step at its member (ms).
    pub step_wait_ms: f64,
    /// The share of the busiest member's time the rebuild gets.
    pub rebuild_share: f64,
}

/// The size of raidkit's rebuild steps on spinning members and on others (per member).
pub const REBUILD_STEP_HDD: u64 = 8 << 20;
pub const REBUILD_STEP_SSD: u64 = 1 << 20;

/// The rebuild beside `fg` (the degraded array's figure for the load) at `share` of its
/// rate: the rebuild gets the members' time the load leaves, less a return seek for every
/// foreground request that takes the head away from the rebuild's position.
fn under_load(
    sys: &System,
    load: &Load,
    fg: &Figure,
    share: f64,
    idle_hours: f64,
) -> RebuildUnderLoad {
    let d = DriveModel::new(&sys.drive, sys.write_cache);
    let piece = load.request_bytes.min(sys.chunk_bytes);
    let away = Service::new(&d, piece, 0.0, 1.0, true).busy(OpKind::Read, 1.0);
    let busiest_ops = fg
        .members_mb_s
        .iter()
        .map(|m| share * m * 1e6 / piece as f64)
        .fold(0.0, f64::max);
    let left = (1.0 - share - busiest_ops * away).max(0.02);
    let step = if d.is_hdd() {
        REBUILD_STEP_HDD
    } else {
        REBUILD_STEP_SSD
    };
    let rate = d.seq_rate(0.0, 1.0, false);
    RebuildUnderLoad {
        load_share: share,
        hours: idle_hours / left,
        foreground_mb_s: share * fg.mb_s,
        foreground_iops: share * fg.iops,
        step_wait_ms: step as f64 / rate / 2.0 * 1e3,
        rebuild_share: left,
    }
}

/// Sequential 1 MiB requests at queue depth 4 over the first or last `ZONE` of the array.
pub fn seq_load(read: bool, outer: bool) -> Load {
    let region = if outer {
        Region {
            start: 0.0,
            end: ZONE,
        }
    } else {
        Region {
            start: 1.0 - ZONE,
            end: 1.0,
        }
    };
    let mut l = Load::sequential(1 << 20, read, 4, region);
    l.name = format!(
        "sequential {}, {}",
        if read { "read" } else { "write" },
        if outer { "outer 5%" } else { "inner 5%" }
    );
    l
}

/// The analytic prediction of `sys` under `loads`.
pub fn analyze(
    sys: &System,
    loads: &[Load],
    replace_hours: f64,
    fleet: usize,
    load_share: f64,
) -> Result<Prediction, String> {
    sys.check()?;
    let seq = |read, outer| predict(sys, &seq_load(read, outer));
    let workloads = loads
        .iter()
        .map(|l| predict(sys, l))
        .collect::<Result<Vec<_>, _>>()?;
    let survives = sys.level.tolerance(sys.drives) >= 1;
    let degraded = System {
        missing: 1,
        ..sys.clone()
    };
    let (degraded_seq_read, degraded_workloads) = if survives {
        (
            Some(predict(&degraded, &seq_load(true, true))?),
            loads
                .iter()
                .map(|l| predict(&degraded, l))
                .collect::<Result<Vec<_>, _>>()?,
        )
    } else {
        (None, Vec::new())
    };
    let rel = reliability(sys, replace_hours, fleet);
    let share = load_share.clamp(0.0, 0.95);
    let rebuild_under_load = match (loads.first(), degraded_workloads.first()) {
        (Some(l), Some(fg)) => Some(under_load(sys, l, fg, share, rel.rebuild_hours)),
        _ => None,
    };
    let raw = sys.drive.capacity_bytes() as f64 * sys.drives as f64;
    Ok(Prediction {
        method: "analytic",
        system: sys.describe(),
        level: sys.level.label(),
        drives: sys.drives,
        capacity_bytes: sys.capacity_bytes(),
        efficiency: sys.capacity_bytes() as f64 / raw,
        seq_read_outer: seq(true, true)?,
        seq_read_inner: seq(true, false)?,
        seq_write_outer: seq(false, true)?,
        seq_write_inner: seq(false, false)?,
        workloads,
        degraded_seq_read,
        degraded_workloads,
        rebuild_under_load,
        reliability: rel,
    })
}
