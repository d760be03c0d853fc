//! A configuration's whole prediction: sequential rates at the outer and inner zone, the
//! workloads asked for, degraded figures, rebuild and reliability.

use crate::analytic::{predict, Figure};
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
    /// The rebuild while the first workload uses `load_share` of the drives' time (hours).
    pub rebuild_under_load_hours: Option<f64>,
    pub load_share: f64,
    pub reliability: Reliability,
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
    let rebuild_under_load_hours =
        (survives && !loads.is_empty()).then(|| rel.rebuild_hours / (1.0 - share));
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
        rebuild_under_load_hours,
        load_share: share,
        reliability: rel,
    })
}
