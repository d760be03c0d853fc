//! The catalog of emulated drives, controllers and links: `catalog.toml` in this crate (built
//! in), plus a user's own file of the same form (`RAIDKIT_CATALOG=path`, or given by the
//! caller), whose entries come first and so replace built-in ones of the same name.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The catalog built into raidkit.
pub const BUILT_IN: &str = include_str!("../../catalog.toml");

/// A hard disk's mechanics, as a datasheet gives them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HddSpec {
    pub rpm: f64,
    /// Sustained media rate at the outer and the inner diameter (MB/s, 10^6 bytes/s).
    pub outer_mbps: f64,
    pub inner_mbps: f64,
    /// Transfer-rate zones from outer to inner.
    pub zones: u32,
    pub track_to_track_ms: f64,
    /// Average read seek over random positions.
    pub average_seek_ms: f64,
    pub full_stroke_ms: f64,
    /// Extra settle time of a write seek.
    pub write_seek_extra_ms: f64,
    /// Controller time per command that does not overlap a queued one.
    pub command_overhead_us: f64,
    pub cache_mib: f64,
    /// How far the drive reads ahead of a sequential reader.
    pub read_ahead_kib: f64,
    /// Write-back cache on (as shipped).
    pub write_cache: bool,
    /// Time of a cache flush beyond writing the dirty data.
    pub flush_ms: f64,
    /// Commands the drive reorders among (NCQ/TCQ); 1 keeps arrival order.
    pub queue_depth: u32,
}

/// A solid-state drive's service times and rates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SsdSpec {
    pub read_latency_us: f64,
    pub write_latency_us: f64,
    pub read_mbps: f64,
    pub write_mbps: f64,
    /// Steady-state write rate once `burst_gib` was written at `write_mbps`.
    pub sustained_write_mbps: f64,
    pub burst_gib: f64,
    /// Requests served side by side inside the drive.
    pub channels: u32,
    pub flush_us: f64,
    pub queue_depth: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Mechanics {
    Hdd(HddSpec),
    Ssd(SsdSpec),
}

/// One drive of the catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriveSpec {
    /// Short name (`emu:NAME`).
    pub name: String,
    /// Maker and model.
    pub model: String,
    /// Nominal capacity (GB, 10^9 bytes); zones and seeks are laid over it.
    pub capacity_gb: f64,
    /// The drive's own link (`sata2`, `sas1`, `ata100`, ...): caps its transfers.
    pub interface: String,
    /// Where each figure comes from.
    pub source: String,
    /// Annualized failure rate (%), for the reliability model (`raidkit model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub afr_pct: Option<f64>,
    /// Bits read per unrecoverable read error (1e14 for desktop drives of the period).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ure_bits: Option<f64>,
    #[serde(flatten)]
    pub mechanics: Mechanics,
}

/// A controller or enclosure in front of several drives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerSpec {
    pub name: String,
    pub model: String,
    /// The link to the host (`thunderbolt1`, `pci32`, `pcie1x8`, ...).
    pub host_link: String,
    /// Ceilings reads and writes reach however many drives (MB/s).
    pub read_mbps: f64,
    pub write_mbps: f64,
    /// Controller time per request.
    pub per_request_us: f64,
    pub bays: u32,
    /// The controller's cache (MiB), for write-back policies in the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_mib: Option<f64>,
    pub source: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    #[serde(default)]
    pub drive: Vec<DriveSpec>,
    #[serde(default)]
    pub controller: Vec<ControllerSpec>,
}

/// A catalog that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogError(pub String);

impl std::fmt::Display for CatalogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CatalogError {}

impl Catalog {
    /// Parses a catalog file's text; `what` names it in errors.
    pub fn parse(text: &str, what: &str) -> Result<Catalog, CatalogError> {
        let c: Catalog = toml::from_str(text).map_err(|e| CatalogError(format!("{what}: {e}")))?;
        for d in &c.drive {
            d.check()
                .map_err(|e| CatalogError(format!("{what}: drive {}: {e}", d.name)))?;
        }
        for k in &c.controller {
            let ok = k.read_mbps > 0.0 && k.write_mbps > 0.0 && k.per_request_us >= 0.0;
            if !ok {
                return Err(CatalogError(format!(
                    "{what}: controller {}: read_mbps and write_mbps must be positive",
                    k.name
                )));
            }
            link_mbps(&k.host_link)
                .map_err(|e| CatalogError(format!("{what}: controller {}: {e}", k.name)))?;
        }
        Ok(c)
    }

    /// The built-in catalog.
    pub fn built_in() -> Catalog {
        Catalog::parse(BUILT_IN, "built-in catalog").expect("the built-in catalog parses")
    }

    /// The built-in catalog with a user's file (entries first, so they win), from `path` or
    /// else `RAIDKIT_CATALOG` when set.
    pub fn load(path: Option<&Path>) -> Result<Catalog, CatalogError> {
        let env = std::env::var_os("RAIDKIT_CATALOG");
        let user = path.or(env.as_deref().map(Path::new));
        let mut c = Catalog::built_in();
        if let Some(p) = user {
            let text = std::fs::read_to_string(p)
                .map_err(|e| CatalogError(format!("{}: {e}", p.display())))?;
            let mine = Catalog::parse(&text, &p.display().to_string())?;
            c.drive.splice(0..0, mine.drive);
            c.controller.splice(0..0, mine.controller);
        }
        Ok(c)
    }

    pub fn drive(&self, name: &str) -> Option<&DriveSpec> {
        self.drive
            .iter()
            .find(|d| d.name.eq_ignore_ascii_case(name))
    }

    pub fn controller(&self, name: &str) -> Option<&ControllerSpec> {
        self.controller
            .iter()
            .find(|d| d.name.eq_ignore_ascii_case(name))
    }
}

impl DriveSpec {
    /// Nominal capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        (self.capacity_gb * 1e9) as u64
    }

    fn check(&self) -> Result<(), String> {
        let pos = |what: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("{what} must be positive, not {v}"))
            }
        };
        let nonneg = |what: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!("{what} must be 0 or more, not {v}"))
            }
        };
        pos("capacity_gb", self.capacity_gb)?;
        if let Some(a) = self.afr_pct {
            if !(a.is_finite() && a > 0.0 && a < 100.0) {
                return Err(format!("afr_pct must be between 0 and 100, not {a}"));
            }
        }
        if let Some(u) = self.ure_bits {
            pos("ure_bits", u)?;
        }
        link_mbps(&self.interface)?;
        match &self.mechanics {
            Mechanics::Hdd(h) => {
                pos("rpm", h.rpm)?;
                pos("outer_mbps", h.outer_mbps)?;
                pos("inner_mbps", h.inner_mbps)?;
                if h.inner_mbps > h.outer_mbps {
                    return Err("inner_mbps is above outer_mbps".into());
                }
                if h.zones == 0 || h.queue_depth == 0 {
                    return Err("zones and queue_depth must be 1 or more".into());
                }
                nonneg("track_to_track_ms", h.track_to_track_ms)?;
                let ordered =
                    h.track_to_track_ms < h.average_seek_ms && h.average_seek_ms < h.full_stroke_ms;
                if !ordered {
                    return Err(
                        "seeks must order track_to_track_ms < average_seek_ms < full_stroke_ms"
                            .into(),
                    );
                }
                nonneg("write_seek_extra_ms", h.write_seek_extra_ms)?;
                nonneg("command_overhead_us", h.command_overhead_us)?;
                nonneg("cache_mib", h.cache_mib)?;
                nonneg("read_ahead_kib", h.read_ahead_kib)?;
                nonneg("flush_ms", h.flush_ms)
            }
            Mechanics::Ssd(s) => {
                nonneg("read_latency_us", s.read_latency_us)?;
                nonneg("write_latency_us", s.write_latency_us)?;
                pos("read_mbps", s.read_mbps)?;
                pos("write_mbps", s.write_mbps)?;
                pos("sustained_write_mbps", s.sustained_write_mbps)?;
                nonneg("burst_gib", s.burst_gib)?;
                nonneg("flush_us", s.flush_us)?;
                if s.channels == 0 || s.queue_depth == 0 {
                    return Err("channels and queue_depth must be 1 or more".into());
                }
                Ok(())
            }
        }
    }
}

/// The payload rate of a link by name, MB/s: drive links (SATA, SAS, parallel ATA and SCSI)
/// after their line coding, host buses (PCI, PCIe by generation and lanes, Thunderbolt 1)
/// as their usable data rate.
///
/// SATA/SAS use 8b/10b coding: 1.5, 3, 6 Gb/s carry 150, 300, 600 MB/s (SAS 12 Gb/s: 1200).
/// PCIe per lane: gen 1 250 MB/s (2.5 GT/s, 8b/10b), gen 2 500, gen 3 985 (8 GT/s, 128b/130b),
/// gen 4 1969, gen 5 3938. Conventional PCI: 4 bytes x 33.33 MHz = 133 MB/s (64-bit: 266).
/// Thunderbolt 1: one 10 Gb/s channel, 1250 MB/s.
pub fn link_mbps(name: &str) -> Result<f64, String> {
    let n = name.to_ascii_lowercase();
    let fixed = match n.as_str() {
        "sata1" => Some(150.0),
        "sata2" => Some(300.0),
        "sata3" => Some(600.0),
        "sas1" => Some(300.0),
        "sas2" => Some(600.0),
        "sas3" => Some(1200.0),
        "ata66" => Some(66.7),
        "ata100" => Some(100.0),
        "ata133" => Some(133.0),
        "u320" => Some(320.0),
        "pci32" => Some(133.3),
        "pci64" => Some(266.7),
        "thunderbolt1" | "tb1" => Some(1250.0),
        "none" => Some(f64::INFINITY),
        _ => None,
    };
    if let Some(v) = fixed {
        return Ok(v);
    }
    if let Some(rest) = n.strip_prefix("pcie") {
        if let Some((g, l)) = rest.split_once('x') {
            let per_lane = match g {
                "1" => Some(250.0),
                "2" => Some(500.0),
                "3" => Some(984.6),
                "4" => Some(1969.2),
                "5" => Some(3938.5),
                _ => None,
            };
            let lanes: Option<u32> = l.parse().ok().filter(|l| [1, 2, 4, 8, 16].contains(l));
            if let (Some(p), Some(l)) = (per_lane, lanes) {
                return Ok(p * f64::from(l));
            }
        }
    }
    Err(format!(
        "unknown link {name:?}: sata1-3, sas1-3, ata66/100/133, u320, pci32, pci64, pcieGxL (G 1-5, L 1/2/4/8/16), thunderbolt1, none"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_by_name() {
        assert_eq!(link_mbps("sata2").unwrap(), 300.0);
        assert_eq!(link_mbps("PCIe2x4").unwrap(), 2000.0);
        assert_eq!(link_mbps("pcie1x8").unwrap(), 2000.0);
        assert!(link_mbps("pcie9x4").is_err());
        assert!(link_mbps("pcie2x3").is_err());
        assert!(link_mbps("usb").unwrap_err().contains("unknown link"));
    }

    #[test]
    fn the_built_in_catalog_holds_the_studies_drives_and_controllers() {
        let c = Catalog::built_in();
        for d in ["hds72101", "hds7k3000", "cheetah15k5", "fireball", "sf2281"] {
            let spec = c.drive(d).unwrap_or_else(|| panic!("drive {d}"));
            assert!(
                !spec.source.trim().is_empty(),
                "{d} says where its figures come from"
            );
        }
        for k in ["pegasus-r6", "perc6", "3ware-5400"] {
            let spec = c.controller(k).unwrap_or_else(|| panic!("controller {k}"));
            assert!(!spec.source.trim().is_empty());
        }
    }

    #[test]
    fn a_bad_entry_is_refused_with_its_name() {
        let text = Catalog::built_in();
        let mut d = text.drive("hds72101").unwrap().clone();
        if let Mechanics::Hdd(h) = &mut d.mechanics {
            h.average_seek_ms = 100.0;
        }
        let bad = Catalog {
            drive: vec![d],
            controller: vec![],
        };
        let err = Catalog::parse(&toml::to_string(&bad).unwrap(), "mine.toml").unwrap_err();
        assert!(err.0.contains("mine.toml: drive hds72101: seeks"), "{err}");
        assert!(Catalog::parse("[[drive]]\nname = 3", "x").is_err());
    }
}
