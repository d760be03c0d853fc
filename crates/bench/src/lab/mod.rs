//! The lab: measure arrays the way the reference studies do. A [`workload::Workload`] (the dd
//! method, IOmeter's access specifications, custom mixes, sweeps) runs against a
//! [`target::Target`] (a raidkit array in this process, a file or block device, an NBD
//! export) with real outstanding requests; [`run::run`] returns throughput, IOPS, latency
//! percentiles, CPU per GB and each member's load over time; [`chart`] draws them and
//! [`matrix`] builds the level-by-member-count table of the studies.

pub mod chart;
pub mod disks;
pub mod matrix;
pub mod run;
pub mod target;
pub mod workload;

use std::path::Path;

#[derive(Debug)]
pub enum LabError {
    /// The workload does not fit the target, or a flag is wrong.
    Usage(String),
    /// The target failed a request or could not be opened.
    Target(String),
}

impl LabError {
    pub fn io(path: &Path, e: std::io::Error) -> LabError {
        LabError::Target(format!("{}: {e}", path.display()))
    }
}

impl std::fmt::Display for LabError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LabError::Usage(s) | LabError::Target(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for LabError {}
