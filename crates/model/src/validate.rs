//! Predictions set against the studies' published measurements
//! (`data/seed-measurements.csv`, a copy of the reference table, or a file of the same form):
//! each cell's system, drives, level and load as the study describes them, predicted by
//! each method, with the error.

use crate::level::Level;
use crate::system::{Load, RaidIn, System};
use raidkit_bench::lab::workload::Region;
use raidkit_disk::emu::catalog::Catalog;
use serde::Serialize;

/// The studies' measurements as shipped.
pub const SEED_MEASUREMENTS: &str = include_str!("../data/seed-measurements.csv");

/// What a cell measured: the array's MB/s, or only each member's (then the sum is compared).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measured {
    Array(f64),
    MemberSum(f64),
}

impl Measured {
    pub fn value(&self) -> f64 {
        match self {
            Measured::Array(v) | Measured::MemberSum(v) => *v,
        }
    }
}

/// One cell of the table, ready to predict.
#[derive(Clone, Debug, Serialize)]
pub struct Case {
    /// `000 RAID5 x6 write 1MiB seq outer`.
    pub label: String,
    pub source: String,
    pub system: System,
    pub load: Load,
    pub measured: Measured,
    /// The study's own remark.
    pub note: String,
}

fn drive_for(disks: &str) -> Option<&'static str> {
    let d = disks.to_ascii_lowercase();
    Some(if d.contains("hds72101") {
        "hds72101"
    } else if d.contains("7k3000") {
        "hds7k3000"
    } else if d.contains("sf-2281") {
        "sf2281"
    } else if d.contains("fireball") {
        "fireball"
    } else if d.contains("cheetah") {
        "cheetah15k5"
    } else if d.contains("250gb") {
        "sata250"
    } else {
        return None;
    })
}

fn controller_for(system: &str) -> Option<&'static str> {
    let s = system.to_ascii_lowercase();
    if s.contains("pegasus") {
        Some("pegasus-r6")
    } else if s.contains("perc") {
        Some("perc6")
    } else if s.contains("3ware") {
        Some("3ware-5400")
    } else {
        None
    }
}

/// The level of a cell, and the drives that set its speed: a host stripe over unequal
/// enclosure stripes (`RAID0 over RAID0(4)+RAID0(2)`) runs at twice its smaller one's pace.
fn level_for(level: &str, layout: &str, drives: usize) -> Result<(Level, usize), String> {
    let l = level.to_ascii_lowercase().replace(' ', "");
    if let Some(rest) = l.strip_prefix("raid0over") {
        let sizes: Vec<usize> = rest
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|t| t.parse().ok())
            .filter(|&v| v != 0)
            .collect();
        if rest.starts_with("2xraid0") {
            return Ok((Level::Raid0, drives));
        }
        let small = sizes.iter().copied().min().unwrap_or(drives);
        return Ok((Level::Raid0, 2 * small));
    }
    let lay = layout.to_ascii_lowercase();
    let spec = match l.as_str() {
        "raid10" => format!("10{}", lay.split_whitespace().next().unwrap_or("n2")),
        "raid50" => {
            let spans = lay
                .split_whitespace()
                .next()
                .and_then(|s| s.parse::<u32>().ok())
                .unwrap_or(2);
            format!("50x{spans}")
        }
        other => other.trim_start_matches("raid").to_string(),
    };
    Ok((Level::parse(&spec)?, drives))
}

fn size_of(io: &str, method: &str) -> u64 {
    let io = io.to_ascii_lowercase();
    let m = method.to_ascii_lowercase();
    if io.starts_with("4kib") {
        4 << 10
    } else if io.starts_with("2mib") {
        2 << 20
    } else if io.starts_with("1mib") || m.contains("bs=1mib") {
        1 << 20
    } else if m.contains("64kb") {
        64 << 10
    } else {
        // pv and unnamed sizes: the kernel hands md large merged requests.
        1 << 20
    }
}

/// The region of the array a cell touched: the method's "100GB" or "1TB" at the start
/// (outer) or end (inner) of the array, or the first tenth where it says only "outer".
fn region_of(where_: &str, method: &str, capacity: u64) -> Region {
    let m = method.to_ascii_lowercase();
    let span = if m.contains("100gb") {
        100e9
    } else if m.contains("1tb") {
        1e12
    } else {
        0.0
    };
    let frac = if span > 0.0 {
        (span / capacity as f64).min(1.0)
    } else {
        0.1
    };
    match where_ {
        "outer" => Region {
            start: 0.0,
            end: frac,
        },
        "inner" => Region {
            start: 1.0 - frac,
            end: 1.0,
        },
        // pv with iostat sampled every 3 s (seed 004): the figures come from the start of
        // the array.
        _ if m.starts_with("pv") || m.contains("; pv") || m.contains("readers") => Region {
            start: 0.0,
            end: frac,
        },
        _ => Region::WHOLE,
    }
}

/// The cells of a measurements file (the studies' by default).
pub fn cases(text: &str, catalog: &Catalog) -> Result<Vec<Case>, String> {
    let mut out = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("source,") {
            continue;
        }
        let f: Vec<&str> = line.splitn(14, ',').collect();
        if f.len() < 14 {
            return Err(format!("line {}: {} fields, not 14", no + 1, f.len()));
        }
        let bad = |what: &str| format!("line {}: {what}", no + 1);
        let (source, system, disks, method, level, layout) = (f[0], f[1], f[2], f[3], f[4], f[5]);
        let drives: usize = f[6].parse().map_err(|_| bad("drives"))?;
        let (op, io, qd, where_) = (f[7], f[8], f[9], f[10]);
        let measured = if !f[11].is_empty() {
            Measured::Array(f[11].parse().map_err(|_| bad("mbps"))?)
        } else if !f[12].is_empty() {
            let sum: Result<Vec<f64>, _> = f[12].split(';').map(str::parse::<f64>).collect();
            Measured::MemberSum(sum.map_err(|_| bad("per_disk"))?.iter().sum())
        } else {
            continue;
        };
        let drive_name =
            drive_for(disks).ok_or_else(|| bad(&format!("no catalog drive for {disks:?}")))?;
        let drive = catalog
            .drive(drive_name)
            .ok_or_else(|| bad(&format!("{drive_name} not in the catalog")))?
            .clone();
        let (lv, speed_drives) = level_for(level, layout, drives).map_err(|e| bad(&e))?;
        let mut sys = System::new(drive, speed_drives, lv);
        if let Some(c) = controller_for(system) {
            sys.controller = Some(
                catalog
                    .controller(c)
                    .ok_or_else(|| bad(&format!("{c} not in the catalog")))?
                    .clone(),
            );
            sys.raid_in = RaidIn::Controller;
            // Hardware RAID of the period: 64 KiB stripes unless told.
            sys.chunk_bytes = 64 << 10;
        }
        if method.contains("512K") {
            sys.chunk_bytes = 512 << 10;
        }
        let read = op == "read";
        let random = io.contains("rand");
        let mut qd_n: usize = qd.parse().unwrap_or(1);
        let method_l = method.to_ascii_lowercase();
        if method_l.contains("deep") {
            qd_n = qd_n.max(8);
        }
        // pv writes to /dev/md1 through Linux's page cache: write-back keeps several
        // requests in flight. (dd on the Pegasus is taken at the table's depth of 1: its
        // write plateau is what one request at a time gives.)
        if method_l.contains("pv") && op == "write" {
            qd_n = qd_n.max(8);
        }
        let streams = if method_l.contains("parallel readers") {
            qd_n
        } else {
            1
        };
        let region = region_of(where_, method, sys.capacity_bytes());
        let size = size_of(io, method);
        let mut load = Load::sequential(size, read, qd_n, region);
        if random {
            load.random_pct = 100;
            load.name = format!("rand-{op}");
        }
        load.streams = streams;
        let label = format!(
            "{} {}{} x{} {} {}{}",
            &source[..3.min(source.len())],
            level,
            if layout.is_empty() || layout.contains(' ') && !level.contains("10") {
                String::new()
            } else {
                format!(" {layout}")
            },
            drives,
            op,
            io,
            if where_.is_empty() {
                String::new()
            } else {
                format!(" {where_}")
            }
        );
        out.push(Case {
            label,
            source: source.to_string(),
            system: sys,
            load,
            measured,
            note: f[13].to_string(),
        });
    }
    Ok(out)
}

/// A cell's prediction by one method.
#[derive(Clone, Debug, Serialize)]
pub struct Predicted {
    pub mb_s: f64,
    /// (predicted - measured) / measured.
    pub error: f64,
    pub limit: String,
}

impl Predicted {
    pub fn of(case: &Case, f: &crate::analytic::Figure) -> Predicted {
        let v = match case.measured {
            Measured::Array(_) => f.mb_s,
            Measured::MemberSum(_) => f.members_mb_s.iter().sum(),
        };
        let m = case.measured.value();
        Predicted {
            mb_s: v,
            error: (v - m) / m,
            limit: f.limit.clone(),
        }
    }
}

/// Why a cell is off, where the studies themselves say so: the cells the report explains
/// rather than fits.
pub fn explanation(case: &Case) -> Option<&'static str> {
    let l = case.label.to_ascii_lowercase();
    let pegasus = case.source.starts_with("000");
    if pegasus && l.contains("raid1e") && l.contains("write") {
        return Some("the Pegasus writes RAID 1E at a third of its mirror's pace; the study gives no cause and no drive or link figure predicts it");
    }
    if case.source.starts_with("001") && l.contains("4kib rand") && l.contains("read") {
        return Some("the Pegasus serves 4 KiB random reads at QD 16 at about 52 a drive each second, 19 ms each: slower than one drive's own seek and rotation at QD 1 (13 ms), so the enclosure adds time per request that no figure of the study or the datasheets gives");
    }
    None
}

/// The median of absolute errors.
pub fn median_abs(errors: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = errors.into_iter().map(f64::abs).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cell_of_the_studies_maps_to_a_system_and_a_load() {
        let c = Catalog::built_in();
        let cases = cases(SEED_MEASUREMENTS, &c).unwrap();
        assert!(cases.len() >= 50, "{} cells", cases.len());
        let r1e = cases
            .iter()
            .find(|k| k.label.contains("RAID1E") && k.label.contains("write"))
            .unwrap();
        assert!(explanation(r1e).is_some());
        let inner = cases
            .iter()
            .find(|k| k.label.contains("000") && k.label.ends_with("inner"))
            .unwrap();
        assert!(inner.load.region.start > 0.97, "{:?}", inner.load.region);
        assert_eq!(median_abs([0.1, -0.3, 0.2]), 0.2);
    }
}
