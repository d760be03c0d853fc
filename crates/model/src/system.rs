//! What is modelled: the drives, how many, the level, chunk, what sits between the drives and
//! the host, and where the RAID runs; and the load put on it.

use crate::level::Level;
use raidkit_bench::lab::workload::{Region, Workload};
use raidkit_disk::emu::catalog::{link_mbps, ControllerSpec, DriveSpec};
use serde::Serialize;

/// Where parity and mirroring are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RaidIn {
    /// In the host (raidkit, Linux md): every member's bytes cross the controller and the
    /// host link, and the host's CPU computes parity.
    Host,
    /// In the controller or enclosure (a hardware RAID): only the array's bytes cross the
    /// host link.
    Controller,
}

/// One array on one kind of drive.
#[derive(Clone, Debug, Serialize)]
pub struct System {
    pub drive: DriveSpec,
    pub drives: usize,
    pub level: Level,
    pub chunk_bytes: u64,
    /// The controller or enclosure in front of the drives (its ceilings and host link).
    pub controller: Option<ControllerSpec>,
    /// Without a controller: the host link the drives share (`none` for a drive per port).
    pub host_link: String,
    pub raid_in: RaidIn,
    /// The drives' write cache where it differs from the catalog's.
    pub write_cache: Option<bool>,
    /// The host's parity rate per core (GB/s) for XOR and for P+Q.
    pub xor_gbps: f64,
    pub pq_gbps: f64,
    /// Members lost (0 healthy; 1 degraded).
    pub missing: usize,
    /// The controller's cache policy (a RAID controller's WB/WT and NORA/RA/ARA).
    pub policy: CachePolicy,
}

/// A RAID controller's cache settings, in the PERC 6's terms.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CachePolicy {
    /// Write-back: the controller's battery-backed cache acknowledges writes and writes
    /// them to the drives later, in the order it chooses (WB); else write-through (WT).
    pub write_back: bool,
    /// The controller's cache in MiB (for write-back).
    pub cache_mib: f64,
    /// Read-ahead (RA, or ARA on a sequential stream): the controller reads the next
    /// stripes before the host asks, so requests that come one at a time still stream.
    pub read_ahead: bool,
}

impl CachePolicy {
    /// Write-through, no read-ahead: what a host's own RAID has.
    pub const NONE: CachePolicy = CachePolicy {
        write_back: false,
        cache_mib: 0.0,
        read_ahead: false,
    };

    /// `wt-nora`, `wt-ra`, `wt-ara`, `wb-nora`, `wb-ra`, `wb-ara` (ARA counts as RA for
    /// the sequential streams it detects), with the controller's cache size.
    pub fn parse(s: &str, cache_mib: f64) -> Result<CachePolicy, String> {
        let t = s.to_ascii_lowercase();
        let (w, r) = t.split_once('-').ok_or_else(|| {
            format!("cache policy {s:?}: wt-nora, wt-ra, wt-ara, wb-nora, wb-ra or wb-ara")
        })?;
        let write_back = match w {
            "wb" => true,
            "wt" => false,
            _ => return Err(format!("cache policy {s:?}: WB or WT first")),
        };
        let read_ahead = match r {
            "nora" => false,
            "ra" | "ara" => true,
            _ => return Err(format!("cache policy {s:?}: NORA, RA or ARA second")),
        };
        if write_back && cache_mib <= 0.0 {
            return Err(format!(
                "cache policy {s:?}: write-back needs a controller with a cache"
            ));
        }
        Ok(CachePolicy {
            write_back,
            cache_mib,
            read_ahead,
        })
    }
}

/// The host's parity rates assumed when none is given: one core of a 2015-or-later x86 CPU
/// with SSE2/AVX2 (XOR runs at memory speed, P+Q at about a third of it). `raidkit bench
/// parity` measures this machine's.
pub const DEFAULT_XOR_GBPS: f64 = 8.0;
pub const DEFAULT_PQ_GBPS: f64 = 3.0;

impl System {
    pub fn new(drive: DriveSpec, drives: usize, level: Level) -> System {
        System {
            drive,
            drives,
            level,
            chunk_bytes: 512 << 10,
            controller: None,
            host_link: "none".into(),
            raid_in: RaidIn::Host,
            write_cache: None,
            xor_gbps: DEFAULT_XOR_GBPS,
            pq_gbps: DEFAULT_PQ_GBPS,
            missing: 0,
            policy: CachePolicy::NONE,
        }
    }

    pub fn check(&self) -> Result<(), String> {
        self.level.check(self.drives)?;
        if self.chunk_bytes < 4096 || !self.chunk_bytes.is_power_of_two() {
            return Err(format!(
                "chunk of {} bytes: a power of two of 4 KiB or more",
                self.chunk_bytes
            ));
        }
        if self.missing > self.level.tolerance(self.drives).min(1) {
            return Err(format!(
                "{} with {} of {} members missing is not modelled (one at most, on a level that survives it)",
                self.level.label(),
                self.missing,
                self.drives
            ));
        }
        if let Some(c) = &self.controller {
            if self.drives > c.bays as usize {
                return Err(format!(
                    "{} drives do not fit the {} bays of {}",
                    self.drives, c.bays, c.name
                ));
            }
        }
        link_mbps(&self.host_link)?;
        Ok(())
    }

    /// Bytes of user data the array holds.
    pub fn capacity_bytes(&self) -> u64 {
        let member = self.drive.capacity_bytes() as f64;
        (member * self.level.data_members(self.drives)) as u64
    }

    /// `6 x hds72101 RAID 5, 512 KiB chunk, behind pegasus-r6`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} x {} {}, {} KiB chunk",
            self.drives,
            self.drive.name,
            self.level.label(),
            self.chunk_bytes >> 10
        );
        if let Some(c) = &self.controller {
            s += &format!(", behind {}", c.name);
        } else if self.host_link != "none" {
            s += &format!(", over {}", self.host_link);
        }
        if self.raid_in == RaidIn::Controller {
            s += ", RAID in the controller";
        }
        if self.missing > 0 {
            s += ", one member missing";
        }
        if self.policy.write_back || self.policy.read_ahead {
            s += &format!(
                ", {}-{}",
                if self.policy.write_back { "WB" } else { "WT" },
                if self.policy.read_ahead { "RA" } else { "NORA" }
            );
        }
        s
    }
}

/// The load: a workload (request size, read and random shares, queue depth, region) and how
/// many independent sequential streams make it up.
#[derive(Clone, Debug, Serialize)]
pub struct Load {
    pub name: String,
    pub request_bytes: u64,
    pub read_pct: u32,
    pub random_pct: u32,
    /// Requests outstanding at once, over all streams.
    pub queue_depth: usize,
    /// Independent sequential readers or writers (pv run three times, say).
    pub streams: usize,
    pub region: Region,
}

impl Load {
    pub fn from_workload(w: &Workload) -> Load {
        Load {
            name: w.name.clone(),
            request_bytes: w.request_bytes,
            read_pct: w.read_pct,
            random_pct: w.random_pct,
            queue_depth: w.queue_depth.max(1),
            streams: 1,
            region: w.region,
        }
    }

    /// Sequential reads or writes of `request_bytes` at `qd` over `region`.
    pub fn sequential(request_bytes: u64, read: bool, qd: usize, region: Region) -> Load {
        Load {
            name: format!("seq-{}", if read { "read" } else { "write" }),
            request_bytes,
            read_pct: if read { 100 } else { 0 },
            random_pct: 0,
            queue_depth: qd.max(1),
            streams: 1,
            region,
        }
    }

    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} {}%R {}%rand QD{}",
            raidkit_bench::lab::workload::size_name(self.request_bytes),
            self.read_pct,
            self.random_pct,
            self.queue_depth
        );
        if self.streams > 1 {
            s += &format!(" x{} streams", self.streams);
        }
        if self.region != Region::WHOLE {
            s += &format!(" {}", self.region.describe());
        }
        s
    }
}

/// Loads by name: the twelve IOmeter access specifications, and `video-editing` (1 MiB
/// requests, 70 % reads, 10 % random: a few streams of footage read and rendered, with
/// jumps between clips; assumed, no study measured it).
pub fn named_load(name: &str, qd: usize) -> Result<Load, String> {
    if name == "video-editing" {
        return Ok(Load {
            name: name.into(),
            request_bytes: 1 << 20,
            read_pct: 70,
            random_pct: 10,
            queue_depth: qd.max(1),
            streams: 1,
            region: Region::WHOLE,
        });
    }
    let w = Workload::iometer(name, qd).map_err(|e| format!("{e}, video-editing"))?;
    Ok(Load::from_workload(&w))
}
