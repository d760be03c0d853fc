//! Turning matrix rows into VM batches: member images, job scripts and drive lists.
//!
//! A batch is one VM boot. Its directory holds `job.sh` (calls to the oracle_* functions of
//! tests/md-oracle/vm/vm-lib.sh), `drives` (one `serial image-path` line per member disk) and,
//! after the boot, `results`. `plan.json` in the work directory lists every array with its
//! batch and member images, which is all `check` needs besides the results.
//!
//! Invariants: serials are unique within the plan and at most 20 bytes (virtio-blk's limit);
//! a batch never holds more than [`MAX_MEMBERS_PER_VM`] member disks (PCI slots).

use crate::matrix::MatrixRow;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Member disks per VM. The run script puts eight virtio-blk functions in each PCI slot
/// (30 usable slots, two disks for the job and the results); 120 keeps well inside that
/// while letting the default matrix fit in two boots.
pub const MAX_MEMBERS_PER_VM: usize = 120;

/// One member disk of a planned array.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedMember {
    pub serial: String,
    pub image: PathBuf,
    pub size_bytes: u64,
}

/// A write the job performs after creating the array (`len_bytes == None`: to the end).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedWrite {
    pub seed: u64,
    pub offset_bytes: u64,
    pub len_bytes: Option<u64>,
}

/// One array of the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedArray {
    pub name: String,
    /// Scenario type: `create` (md creates, raidkit checks).
    pub kind: String,
    pub level: u32,
    pub layout: Option<String>,
    pub chunk_kib: Option<u64>,
    pub batch: usize,
    pub md_device: String,
    pub members: Vec<PlannedMember>,
    pub writes: Vec<PlannedWrite>,
}

/// The whole plan, as stored in `plan.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub batches: usize,
    pub arrays: Vec<PlannedArray>,
}

/// Bytes of array data per stripe, roughly (only used to place the partial writes inside the
/// second and third stripe; exactness does not matter, staying inside the array does).
fn stripe_bytes(row: &MatrixRow) -> u64 {
    let n = row.member_bytes.len() as u64;
    let chunk = row.chunk_kib.unwrap_or(64) * 1024;
    match row.level {
        0 => n * chunk,
        4 | 5 => (n - 1) * chunk,
        6 => n.saturating_sub(2).max(1) * chunk,
        10 => (n / 2).max(1) * chunk,
        _ => chunk,
    }
}

/// The writes of a `create` scenario: fill the whole array (seed 1), then a short write in the
/// middle of a data chunk of stripe 1 (seed 2) and one across a chunk boundary in stripe 2
/// (seed 3), so md's read-modify-write and reconstruct-write paths both leave their mark.
fn create_writes(row: &MatrixRow) -> Vec<PlannedWrite> {
    let chunk = row.chunk_kib.unwrap_or(64) * 1024;
    let stripe = stripe_bytes(row);
    vec![
        PlannedWrite {
            seed: 1,
            offset_bytes: 0,
            len_bytes: None,
        },
        PlannedWrite {
            seed: 2,
            offset_bytes: stripe + chunk / 2,
            len_bytes: Some((chunk / 2).min(4096)),
        },
        PlannedWrite {
            seed: 3,
            offset_bytes: 2 * stripe + chunk - 2048,
            len_bytes: Some(4096),
        },
    ]
}

/// Assign rows to batches: at least `min_batches` (to keep every core busy), more if the
/// member disks do not fit; the biggest arrays first, each to the least loaded batch.
pub fn make_plan(rows: &[MatrixRow], work: &Path, min_batches: usize) -> Plan {
    let total_members: usize = rows.iter().map(|r| r.member_bytes.len()).sum();
    let mut batches = min_batches
        .max(total_members.div_ceil(MAX_MEMBERS_PER_VM))
        .min(rows.len().max(1));
    let mut order: Vec<usize> = (0..rows.len()).collect();
    let cost = |r: &MatrixRow| r.member_bytes.iter().sum::<u64>();
    order.sort_by_key(|&i| std::cmp::Reverse(cost(&rows[i])));
    let mut load = vec![(0u64, 0usize); batches];
    let mut batch_of = vec![0usize; rows.len()];
    for &i in &order {
        let disks = rows[i].member_bytes.len();
        let pick = (0..batches)
            .filter(|&b| load[b].1 + disks <= MAX_MEMBERS_PER_VM)
            .min_by_key(|&b| load[b].0);
        let b = match pick {
            Some(b) => b,
            None => {
                load.push((0, 0));
                batches += 1;
                batches - 1
            }
        };
        load[b].0 += cost(&rows[i]);
        load[b].1 += disks;
        batch_of[i] = b;
    }
    let mut next_md = vec![0usize; batches];
    let arrays = rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let b = batch_of[i];
            let md_device = format!("md{}", next_md[b]);
            next_md[b] += 1;
            let members = row
                .member_bytes
                .iter()
                .enumerate()
                .map(|(m, &size_bytes)| PlannedMember {
                    serial: format!("rk{i}m{m}"),
                    image: work
                        .join(format!("batch{b}"))
                        .join(format!("{}.m{m}.img", row.name)),
                    size_bytes,
                })
                .collect();
            PlannedArray {
                name: row.name.clone(),
                kind: "create".to_string(),
                level: row.level,
                layout: row.layout.clone(),
                chunk_kib: row.chunk_kib,
                batch: b,
                md_device,
                members,
                writes: create_writes(row),
            }
        })
        .collect();
    Plan { batches, arrays }
}

/// The job script lines of one array.
pub fn job_lines(a: &PlannedArray) -> String {
    let serials: Vec<&str> = a.members.iter().map(|m| m.serial.as_str()).collect();
    let serials = serials.join(" ");
    let mut s = String::new();
    let layout = a.layout.as_deref().unwrap_or("-");
    let chunk = a.chunk_kib.map_or("-".to_string(), |c| c.to_string());
    // Writing to a String cannot fail.
    let _ = writeln!(
        s,
        "oracle_create {} {} {} {} {} {}",
        a.name, a.md_device, a.level, layout, chunk, serials
    );
    for w in &a.writes {
        let len = w.len_bytes.map_or("rest".to_string(), |l| l.to_string());
        let _ = writeln!(
            s,
            "oracle_write {} {} {} {} {}",
            a.name, a.md_device, w.seed, w.offset_bytes, len
        );
    }
    let _ = writeln!(s, "oracle_report {} {} {}", a.name, a.md_device, serials);
    s
}

/// Create the batch directories, zeroed (sparse) member images, job scripts, drive lists and
/// plan.json under `work`.
pub fn write_plan(plan: &Plan, work: &Path) -> io::Result<()> {
    for b in 0..plan.batches {
        let dir = work.join(format!("batch{b}"));
        fs::create_dir_all(&dir)?;
        let mut job = String::new();
        let mut drives = String::new();
        for a in plan.arrays.iter().filter(|a| a.batch == b) {
            job.push_str(&job_lines(a));
            for m in &a.members {
                let f = fs::File::create(&m.image)?;
                f.set_len(m.size_bytes)?;
                let _ = writeln!(drives, "{} {}", m.serial, m.image.display());
            }
        }
        fs::write(dir.join("job.sh"), job)?;
        fs::write(dir.join("drives"), drives)?;
    }
    let json = serde_json::to_string_pretty(plan).map_err(io::Error::other)?;
    fs::write(work.join("plan.json"), json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::parse_matrix;

    #[test]
    fn batches_respect_the_disk_limit_and_serials_are_unique() {
        let mut text = String::new();
        for i in 0..40 {
            text.push_str(&format!("fast a{i} 6 left-symmetric 64K 8x8M\n"));
        }
        let rows = parse_matrix(&text).unwrap();
        let plan = make_plan(&rows, Path::new("/w"), 2);
        assert!(plan.batches >= 320usize.div_ceil(MAX_MEMBERS_PER_VM));
        let mut serials = std::collections::BTreeSet::new();
        for b in 0..plan.batches {
            let disks: usize = plan
                .arrays
                .iter()
                .filter(|a| a.batch == b)
                .map(|a| a.members.len())
                .sum();
            assert!(disks <= MAX_MEMBERS_PER_VM, "batch {b} has {disks} disks");
        }
        for a in &plan.arrays {
            for m in &a.members {
                assert!(m.serial.len() <= 20);
                assert!(serials.insert(m.serial.clone()));
            }
        }
    }

    #[test]
    fn job_lines_name_every_member_and_write() {
        let rows = parse_matrix("fast r6 6 left-symmetric 64K 4x8M\n").unwrap();
        let plan = make_plan(&rows, Path::new("/w"), 2);
        let job = job_lines(&plan.arrays[0]);
        assert!(
            job.starts_with("oracle_create r6 md0 6 left-symmetric 64 rk0m0 rk0m1 rk0m2 rk0m3\n")
        );
        assert!(job.contains("oracle_write r6 md0 1 0 rest\n"));
        assert!(job.contains("oracle_write r6 md0 2 163840 4096\n"));
        assert!(job.ends_with("oracle_report r6 md0 rk0m0 rk0m1 rk0m2 rk0m3\n"));
    }
}
