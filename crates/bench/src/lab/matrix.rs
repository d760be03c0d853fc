//! The studies' table on the user's machine (seed 000): for each level and member count, an
//! array over image files (or given devices), written then read back with the dd method, with
//! its capacity, space efficiency, write and read MB/s and each member's load.

use super::run::{run, MemberLoad, RunOptions, RunResult};
use super::target::{drop_file_cache, is_memory_backed, ArrayTarget};
use super::workload::{Limit, Workload};
use super::LabError;
use raidkit_disk::{Disk, FileDisk, OpenOptions};
use raidkit_engine::{Array, ConsistencyPolicy, CreateOptions, EngineConfig};
use raidkit_metadata::SuperblockVersion;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A level (and layout) as the matrix names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LevelSpec {
    /// `0`, `1`, `1E`, `4`, `5`, `6`, `10 n2`, `10 o2`, `10 f2`.
    pub label: String,
    pub level: i32,
    /// md layout number (`None`: mdadm's default).
    pub layout: Option<u32>,
    pub min_members: usize,
    /// 1E is RAID 10 n2 on an odd number of members only.
    pub odd_only: bool,
}

impl LevelSpec {
    /// `0,1,1e,4,5,6,10` (10 is n2) or `10n2`, `10o2`, `10f2`.
    pub fn parse_list(s: &str) -> Result<Vec<LevelSpec>, String> {
        s.split(',').map(|t| LevelSpec::parse(t.trim())).collect()
    }

    pub fn parse(t: &str) -> Result<LevelSpec, String> {
        let spec = |label: &str, level, layout, min_members, odd_only| LevelSpec {
            label: label.into(),
            level,
            layout,
            min_members,
            odd_only,
        };
        Ok(match t.to_ascii_lowercase().as_str() {
            "0" => spec("0", 0, None, 2, false),
            "1" => spec("1", 1, None, 2, false),
            "1e" => spec("1E", 10, Some(0x102), 3, true),
            "4" => spec("4", 4, None, 3, false),
            "5" => spec("5", 5, None, 3, false),
            "6" => spec("6", 6, None, 4, false),
            "10" | "10n2" => spec("10 n2", 10, Some(0x102), 2, false),
            "10o2" => spec("10 o2", 10, Some(0x1_0201), 2, false),
            "10f2" => spec("10 f2", 10, Some(0x201), 2, false),
            _ => {
                return Err(format!(
                    "level {t:?}: the matrix knows 0, 1, 1e, 4, 5, 6, 10 (n2), 10n2, 10o2, 10f2"
                ))
            }
        })
    }

    pub fn fits(&self, n: usize) -> bool {
        n >= self.min_members && (!self.odd_only || n % 2 == 1)
    }
}

/// Told the cell and phase running (`RAID 5 x4 write`) and the share of it done.
pub type CellProgress = Arc<dyn Fn(&str, f64) + Send + Sync>;

/// What the matrix runs.
#[derive(Clone)]
pub struct MatrixConfig {
    pub levels: Vec<LevelSpec>,
    pub members: Vec<usize>,
    /// Folder for image files (created per cell, removed after), or given devices.
    pub place: Place,
    /// Size of each member image file.
    pub member_bytes: u64,
    /// Bytes written and read per cell (`None`: the whole array, dd's way).
    pub bytes: Option<u64>,
    pub request_bytes: u64,
    pub chunk_sectors: u32,
    pub progress: Option<CellProgress>,
}

#[derive(Clone, Debug)]
pub enum Place {
    Dir(PathBuf),
    /// Devices (or files) to use, the first N for an N-member cell. Their contents are lost.
    Devices(Vec<PathBuf>),
}

/// One cell of the table.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub level: String,
    pub members: usize,
    pub capacity_bytes: u64,
    /// Capacity over the members' raw size.
    pub efficiency: f64,
    pub write: RunResult,
    pub read: RunResult,
    /// Caches beneath the members were dropped between write and read.
    pub caches_dropped: bool,
}

impl Cell {
    /// Member load of the write and of the read (the whole phase).
    pub fn loads(&self) -> (&[MemberLoad], &[MemberLoad]) {
        (&self.write.members, &self.read.members)
    }
}

fn e(x: impl std::fmt::Display) -> LabError {
    LabError::Target(x.to_string())
}

/// Runs every (level, member count) that fits; cells that do not fit are skipped.
pub fn run_matrix(
    cfg: &MatrixConfig,
    mut on_cell: impl FnMut(&Cell),
) -> Result<Vec<Cell>, LabError> {
    let mut cells = Vec::new();
    for spec in &cfg.levels {
        for &n in &cfg.members {
            if !spec.fits(n) {
                continue;
            }
            let cell = run_cell(cfg, spec, n)?;
            on_cell(&cell);
            cells.push(cell);
        }
    }
    Ok(cells)
}

fn run_cell(cfg: &MatrixConfig, spec: &LevelSpec, n: usize) -> Result<Cell, LabError> {
    let (paths, made) = match &cfg.place {
        Place::Dir(dir) => {
            std::fs::create_dir_all(dir).map_err(|x| LabError::io(dir, x))?;
            let paths: Vec<PathBuf> = (0..n)
                .map(|i| dir.join(format!("matrix-{i}.img")))
                .collect();
            for p in &paths {
                if p.exists() {
                    return Err(LabError::Usage(format!(
                        "{} exists; the matrix makes its own image files and removes them, so give a folder without them",
                        p.display()
                    )));
                }
            }
            (paths, true)
        }
        Place::Devices(d) => {
            if d.len() < n {
                return Err(LabError::Usage(format!(
                    "{n} members asked for and {} devices given",
                    d.len()
                )));
            }
            (d[..n].to_vec(), false)
        }
    };
    let result = (|| {
        let mut disks: Vec<Box<dyn Disk>> = Vec::new();
        for p in &paths {
            let d = if made {
                FileDisk::create(p, cfg.member_bytes)
            } else {
                FileDisk::open(p, OpenOptions::default())
            }
            .map_err(e)?;
            disks.push(Box::new(d));
        }
        let raw: u64 = disks.iter().map(|d| d.size_bytes()).sum();
        let array = Array::create(
            disks,
            CreateOptions {
                level: spec.level,
                layout: spec.layout,
                chunk_sectors: cfg.chunk_sectors,
                raid_devices: n,
                metadata: SuperblockVersion::V1_2,
                size_sectors: None,
                name: "matrix".into(),
                set_uuid: [0x5a; 16],
                device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
                ctime_seconds: 1_700_000_000,
                // Fresh sparse image files read as zeroes; given devices are zeroed by create.
                init: if made {
                    raidkit_engine::Init::Zeroed
                } else {
                    raidkit_engine::Init::Zero
                },
                consistency: ConsistencyPolicy::Resync,
                config: EngineConfig::default(),
            },
        )
        .map_err(|x| LabError::Target(format!("create RAID {} over {n}: {x}", spec.label)))?;
        let array = Arc::new(array);
        let capacity = array.size_bytes();
        let bytes =
            cfg.bytes.unwrap_or(capacity).min(capacity) / cfg.request_bytes * cfg.request_bytes;
        let drop_paths = paths.clone();
        let mut target = ArrayTarget::new(
            array.clone(),
            format!("RAID {} over {n} members", spec.label),
        )
        .with_cache_dropper(Box::new(move || {
            drop_paths
                .iter()
                .map(|p| drop_file_cache(p))
                .fold(true, |a, b| a & b)
        }));
        let label = format!("RAID {} x{n}", spec.label);
        let opts = |phase: &'static str| RunOptions {
            flush_at_end: true,
            progress: cfg.progress.clone().map(|p| {
                let label = format!("{label} {phase}");
                Arc::new(move |f: f64| p(&label, f)) as Arc<dyn Fn(f64) + Send + Sync>
            }),
            ..RunOptions::default()
        };
        let write = run(
            &mut target,
            &Workload::sequential(cfg.request_bytes, false, Limit::Bytes(bytes)),
            &opts("write"),
        )?;
        let caches_dropped = super::target::Target::drop_caches(&mut target)?;
        let read = run(
            &mut target,
            &Workload::sequential(cfg.request_bytes, true, Limit::Bytes(bytes)),
            &opts("read"),
        )?;
        drop(target);
        array.stop().map_err(e)?;
        Ok(Cell {
            level: spec.label.clone(),
            members: n,
            capacity_bytes: capacity,
            efficiency: capacity as f64 / raw as f64,
            write,
            read,
            caches_dropped,
        })
    })();
    if made {
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
    }
    result
}

/// True when the members of the matrix live in memory (tmpfs): figures then say nothing
/// about disks.
pub fn place_in_memory(place: &Place) -> bool {
    match place {
        Place::Dir(d) => is_memory_backed(d),
        Place::Devices(d) => d.first().is_some_and(|p| is_memory_backed(p)),
    }
}

/// Chart: write and read MB/s by member count, one line per level.
pub fn chart(cells: &[Cell], stem: &Path, title: &str) -> Result<Vec<PathBuf>, String> {
    use super::chart::{pair, Axes, Series};
    let mut levels: Vec<&str> = Vec::new();
    for c in cells {
        if !levels.contains(&c.level.as_str()) {
            levels.push(&c.level);
        }
    }
    let series = |read: bool| -> Vec<Series> {
        levels
            .iter()
            .map(|l| Series {
                name: format!("RAID {l}"),
                points: cells
                    .iter()
                    .filter(|c| c.level == *l)
                    .map(|c| {
                        let r = if read { &c.read } else { &c.write };
                        (c.members as f64, r.mb_s)
                    })
                    .collect(),
            })
            .collect()
    };
    let axes = |what: &str| Axes {
        title: format!("{what}, dd method (MB/s)"),
        x: "members".into(),
        y: "MB/s".into(),
        log_x: false,
    };
    pair(
        stem,
        title,
        (&axes("sequential write"), &series(false)),
        (&axes("sequential read"), &series(true)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_fit_their_member_counts() {
        let l = LevelSpec::parse_list("0,1e,5,6,10,10f2").unwrap();
        assert_eq!(l.len(), 6);
        assert!(l[1].fits(3) && !l[1].fits(4), "1E is odd counts only");
        assert!(!l[3].fits(3) && l[3].fits(4));
        assert_eq!(l[5].layout, Some(0x201));
        assert!(LevelSpec::parse("7").is_err());
    }

    #[test]
    fn a_small_matrix_moves_the_bytes_the_layout_says() {
        let dir = std::env::temp_dir().join(format!("raidkit-matrix-{}", std::process::id()));
        let cfg = MatrixConfig {
            levels: LevelSpec::parse_list("0,5,10").unwrap(),
            members: vec![3, 4],
            place: Place::Dir(dir.clone()),
            member_bytes: 16 << 20,
            bytes: Some(12 << 20),
            request_bytes: 1 << 20,
            chunk_sectors: 128,
            progress: None,
        };
        let cells = run_matrix(&cfg, |_| {}).unwrap();
        assert_eq!(cells.len(), 6);
        for c in &cells {
            assert_eq!(c.write.write_bytes, 12 << 20, "{} x{}", c.level, c.members);
            assert_eq!(c.read.read_bytes, 12 << 20);
            let w: u64 = c.write.members.iter().map(|m| m.write_bytes).sum();
            let r: u64 = c.read.members.iter().map(|m| m.read_bytes).sum();
            let n = c.members as f64;
            // What the members must write for 12 MiB of data, before superblocks and
            // partial-stripe reads.
            let want = match c.level.as_str() {
                "0" => 1.0,
                "5" => n / (n - 1.0),
                _ => 2.0,
            } * (12 << 20) as f64;
            assert!(
                w as f64 >= want * 0.99 && (w as f64) < want * 1.1,
                "{} x{}: members wrote {w}, {want} expected",
                c.level,
                c.members
            );
            assert_eq!(
                r,
                12 << 20,
                "{} x{}: a healthy read reads each byte once",
                c.level,
                c.members
            );
            let eff = match c.level.as_str() {
                "0" => 1.0,
                "5" => (n - 1.0) / n,
                _ => 0.5,
            };
            // Less the superblock and data offset (1 MiB of each 16 MiB member here).
            let eff = eff * 15.0 / 16.0;
            assert!(
                (c.efficiency - eff).abs() < 0.01,
                "{} x{}: {}",
                c.level,
                c.members,
                c.efficiency
            );
        }
        let files = chart(&cells, &dir.join("matrix"), "test").unwrap();
        assert!(files.iter().all(|f| f.exists()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
