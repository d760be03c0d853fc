//! The saved configuration, in mdadm.conf's spirit, and the scan that finds md members.
//!
//! A configuration file names arrays by UUID, where to look for their members, and where the
//! monitor's events go, so that no command needs every member path typed again:
//!
//! ```text
//! DEVICE /srv/raid/*.img /dev/sd*       # where members may be (globs; default: every block device)
//! ARRAY md0 UUID=6b833081:84bc422c:84c6994c:8e74448e   # export name, the array's UUID
//! ARRAY md1 UUID=... devices=/srv/b0.img,/srv/b1.img   # or its members, named
//! ARRAY md2 UUID=... spare-group=shelf1 # arrays of a group lend each other their spares
//! MAILADDR root                         # raidkit monitor --mail
//! PROGRAM /usr/local/bin/raid-alert     # raidkit monitor --program
//! CONTROL /run/raidkit/nbd.sock.ctl     # raidkit monitor watches these servers
//! SCHEDULE check=30d patrol=7d          # raidkit serve --scan --schedule
//! RATES rebuild=50 check=20 max-speed=200 # task rates (`raidkit task rates`) at serve --scan
//! HEALTH every=30m temperature=55       # drive health: how often, what warns (serve, monitor)
//! ```
//!
//! Keywords are mdadm's (case does not matter; lines continue when the next starts with
//! white space; `#` starts a comment). `raidkit scan` prints the ARRAY lines of what it
//! finds; `raidkit serve --scan` serves the file's arrays, each with the candidates whose
//! superblock carries its UUID.

use crate::common::open_members;
use crate::error::CliError;
use raidkit_metadata::{DevRole, Uuid};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where `--config` looks when not told.
pub const DEFAULT_CONFIG: &str = "/etc/raidkit/raidkit.conf";

/// One ARRAY line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayLine {
    /// The export name (mdadm's device name; a `/dev/md/` prefix is dropped).
    pub name: String,
    pub uuid: Uuid,
    /// Members named on the line (`devices=`), instead of the DEVICE candidates.
    pub devices: Vec<PathBuf>,
    /// mdadm's `spare-group=`: arrays of one group lend each other their spares.
    pub spare_group: Option<String>,
    /// mdadm's `spares=`: the spares the array should have; the monitor reports
    /// SparesMissing when it first sees the array with fewer.
    pub spares: Option<usize>,
    /// `read-ahead=none|always|adaptive`: the array's read policy when `serve --scan` serves
    /// it (md's superblock has no place for one, so the configuration keeps it).
    pub read_ahead: Option<raidkit_engine::ReadAhead>,
    /// `write-policy=through|back`: the array's write policy when `serve --scan` serves it
    /// (md keeps its journal_mode in memory only, so the configuration keeps it).
    pub write_policy: Option<raidkit_engine::WritePolicy>,
}

/// A parsed configuration file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// DEVICE patterns; empty: every block device.
    pub devices: Vec<String>,
    pub arrays: Vec<ArrayLine>,
    pub mailaddr: Option<String>,
    pub program: Option<PathBuf>,
    pub controls: Vec<PathBuf>,
    /// SCHEDULE: the maintenance `serve --scan` starts on a schedule (`serve --schedule`'s
    /// TASK=INTERVAL items).
    pub schedule: Vec<String>,
    /// RATES: the task rates `serve --scan` gives its arrays (checked when the file is read).
    pub rates: RatesSpec,
    /// HEALTH: how often `serve --scan` and `monitor --scan` ask the members' drives for
    /// their health, and what is a warning.
    pub health: Option<crate::server::health::HealthWatch>,
}

/// Task rates as given (`raidkit task rates`, the configuration's RATES line): each task's
/// percent of the array's time while clients use it, and a cap; what is not given stays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RatesSpec {
    pub rebuild_percent: Option<u8>,
    pub resync_percent: Option<u8>,
    pub check_percent: Option<u8>,
    pub patrol_percent: Option<u8>,
    /// An online reshape's share (the PERC6's reconstruction rate).
    pub reshape_percent: Option<u8>,
    /// Bytes per second; 0 removes the cap.
    pub max_bytes_per_s: Option<u64>,
    /// Bytes per second a task keeps however busy the array (md's speed_limit_min); 0
    /// removes the floor.
    pub min_bytes_per_s: Option<u64>,
}

impl RatesSpec {
    /// Parses RATES items: `rebuild=50 resync=30 check=20 patrol=10 reshape=30 min-speed=5
    /// max-speed=200` (percent from 1 to 100; speeds in MB/s, 0 for none).
    pub fn parse(items: &[&str]) -> Result<RatesSpec, String> {
        let mut r = RatesSpec::default();
        for item in items {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("{item}: use TASK=PERCENT or max-speed=MB/s"))?;
            let n: u64 = value
                .parse()
                .map_err(|_| format!("{item}: {value} is not a whole number"))?;
            let percent = || match u8::try_from(n) {
                Ok(p @ 1..=100) => Ok(Some(p)),
                _ => Err(format!("{item}: a rate is 1 to 100 percent")),
            };
            match key {
                "rebuild" => r.rebuild_percent = percent()?,
                "resync" => r.resync_percent = percent()?,
                "check" => r.check_percent = percent()?,
                "patrol" => r.patrol_percent = percent()?,
                "reshape" => r.reshape_percent = percent()?,
                "max-speed" => r.max_bytes_per_s = Some(n * 1_000_000),
                "min-speed" => r.min_bytes_per_s = Some(n * 1_000_000),
                other => {
                    return Err(format!(
                    "{other}: one of rebuild, resync, check, patrol, reshape, min-speed, max-speed"
                ))
                }
            }
        }
        Ok(r)
    }

    /// `rates` with what this gives changed; percentages out of 1..=100 are refused.
    pub fn apply(
        &self,
        mut rates: raidkit_engine::TaskRates,
    ) -> Result<raidkit_engine::TaskRates, CliError> {
        for (given, field) in [
            (self.rebuild_percent, &mut rates.rebuild_percent),
            (self.resync_percent, &mut rates.resync_percent),
            (self.check_percent, &mut rates.check_percent),
            (self.patrol_percent, &mut rates.patrol_percent),
            (self.reshape_percent, &mut rates.reshape_percent),
        ] {
            if let Some(p) = given {
                if !(1..=100).contains(&p) {
                    return Err(CliError::usage(format!("rate {p}%: use 1 to 100")));
                }
                *field = p;
            }
        }
        if let Some(b) = self.max_bytes_per_s {
            rates.max_bytes_per_s = (b > 0).then_some(b);
        }
        if let Some(b) = self.min_bytes_per_s {
            rates.min_bytes_per_s = (b > 0).then_some(b);
        }
        if let (Some(min), Some(max)) = (rates.min_bytes_per_s, rates.max_bytes_per_s) {
            if min > max {
                return Err(CliError::usage(format!(
                    "min-speed {} MB/s is above max-speed {} MB/s",
                    min / 1_000_000,
                    max / 1_000_000
                )));
            }
        }
        Ok(rates)
    }
}

impl Config {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Config, CliError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            CliError::usage(format!(
                "{}: cannot read the configuration: {e}",
                path.display()
            ))
        })?;
        Config::parse(&text).map_err(|e| CliError::usage(format!("{}: {e}", path.display())))
    }

    /// Parses the text of a configuration file; an error names the line.
    pub fn parse(text: &str) -> Result<Config, String> {
        let mut cfg = Config::default();
        // Logical lines: a line starting with white space continues the one before.
        let mut lines: Vec<(usize, String)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("");
            if line.trim().is_empty() {
                continue;
            }
            match lines.last_mut() {
                Some((_, prev)) if line.starts_with([' ', '\t']) => {
                    prev.push(' ');
                    prev.push_str(line.trim());
                }
                _ => lines.push((i + 1, line.trim().to_string())),
            }
        }
        for (n, line) in lines {
            let mut words = line.split_whitespace();
            let keyword = words.next().unwrap_or("").to_ascii_uppercase();
            let rest: Vec<&str> = words.collect();
            let bad = |why: String| format!("line {n}: {why}");
            match keyword.as_str() {
                "DEVICE" | "DEVICES" => cfg.devices.extend(rest.iter().map(|s| s.to_string())),
                "ARRAY" => {
                    let Some((first, fields)) = rest.split_first() else {
                        return Err(bad("ARRAY needs a name".into()));
                    };
                    let name = first.trim_start_matches("/dev/md/").to_string();
                    if name.is_empty() || name.contains('=') {
                        return Err(bad(format!("ARRAY {first}: give the export name first")));
                    }
                    let mut uuid = None;
                    let mut devices = Vec::new();
                    let mut spare_group = None;
                    let mut spares = None;
                    let mut read_ahead = None;
                    let mut write_policy = None;
                    for f in fields {
                        let (k, v) = f.split_once('=').unwrap_or((f, ""));
                        match k.to_ascii_lowercase().as_str() {
                            "uuid" => {
                                uuid = Some(
                                    Uuid::parse(v)
                                        .ok_or_else(|| bad(format!("UUID={v}: not a UUID")))?,
                                )
                            }
                            "spare-group" if !v.is_empty() => spare_group = Some(v.to_string()),
                            "read-ahead" => {
                                read_ahead =
                                    Some(raidkit_engine::ReadAhead::parse(v).ok_or_else(|| {
                                        bad(format!("read-ahead={v}: none, always or adaptive"))
                                    })?)
                            }
                            "write-policy" => {
                                write_policy =
                                    Some(raidkit_engine::WritePolicy::parse(v).ok_or_else(
                                        || bad(format!("write-policy={v}: through or back")),
                                    )?)
                            }
                            "spares" => {
                                spares = Some(v.parse().map_err(|_| {
                                    bad(format!("spares={v}: not a number of spares"))
                                })?)
                            }
                            "devices" => devices
                                .extend(v.split(',').filter(|d| !d.is_empty()).map(PathBuf::from)),
                            // mdadm's other words (metadata=, name=, level=, num-devices=)
                            // describe the array; the UUID decides.
                            _ => {}
                        }
                    }
                    let uuid = uuid.ok_or_else(|| bad(format!("ARRAY {name}: no UUID=")))?;
                    if cfg.arrays.iter().any(|a| a.name == name) {
                        return Err(bad(format!("ARRAY {name} is named twice")));
                    }
                    cfg.arrays.push(ArrayLine {
                        name,
                        uuid,
                        devices,
                        spare_group,
                        spares,
                        read_ahead,
                        write_policy,
                    });
                }
                "MAILADDR" => cfg.mailaddr = rest.first().map(|s| s.to_string()),
                "PROGRAM" => cfg.program = rest.first().map(PathBuf::from),
                "CONTROL" => cfg.controls.extend(rest.iter().map(PathBuf::from)),
                "SCHEDULE" => cfg.schedule.extend(rest.iter().map(|s| s.to_string())),
                "RATES" => {
                    cfg.rates = RatesSpec::parse(&rest).map_err(|e| bad(format!("RATES {e}")))?
                }
                "HEALTH" => {
                    cfg.health = Some(
                        crate::server::health::HealthWatch::parse(&rest.join(" "))
                            .map_err(|e| bad(format!("HEALTH: {}", e.message)))?,
                    )
                }
                // mdadm's keywords raidkit has no use for yet.
                "HOMEHOST" | "AUTO" | "CREATE" | "MAILFROM" | "POLICY" | "PART-POLICY" => {}
                other => return Err(bad(format!("unknown keyword {other}"))),
            }
        }
        Ok(cfg)
    }

    /// The members of `array`: its `devices=`, or the DEVICE candidates whose superblock
    /// carries its UUID (spares too), in the order found.
    pub fn members_of(&self, array: &ArrayLine) -> Result<Vec<PathBuf>, CliError> {
        if !array.devices.is_empty() {
            return Ok(array.devices.clone());
        }
        let scanned = scan(&candidates(&self.devices)?);
        let mut found: Vec<PathBuf> = scanned
            .iter()
            .filter(|m| m.uuid == array.uuid)
            .map(|m| m.path.clone())
            .collect();
        if found.is_empty() {
            // A RAID 50/60 stack: its UUID is the RAID 0's, on no member.
            found = group_stacks(group(scanned))
                .into_iter()
                .find(|a| a.uuid == array.uuid && a.level >= 50)
                .map(|a| a.members.into_iter().map(|m| m.path).collect())
                .unwrap_or_default();
        }
        if found.is_empty() {
            return Err(CliError::new(
                crate::error::ExitCode::Unavailable,
                format!(
                    "ARRAY {}: no member with UUID {} among the DEVICE candidates",
                    array.name, array.uuid
                ),
            ));
        }
        Ok(found)
    }
}

/// The paths `patterns` name (globs expanded; a pattern naming nothing is skipped), or every
/// block device (whole disks and partitions) when there are none.
pub fn candidates(patterns: &[String]) -> Result<Vec<PathBuf>, CliError> {
    if patterns.is_empty() {
        let mut out: Vec<PathBuf> = std::fs::read_dir("/sys/class/block")
            .map(|d| {
                d.flatten()
                    .map(|e| Path::new("/dev").join(e.file_name()))
                    .filter(|p| p.exists())
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        return Ok(out);
    }
    let mut out = Vec::new();
    for p in patterns {
        let matches = glob::glob(p).map_err(|e| CliError::usage(format!("{p}: {e}")))?;
        for m in matches.flatten() {
            if !out.contains(&m) {
                out.push(m);
            }
        }
    }
    Ok(out)
}

/// A member found by a scan.
#[derive(Clone, Debug, Serialize)]
pub struct Found {
    pub path: PathBuf,
    pub uuid: Uuid,
    pub name: String,
    pub level: i32,
    pub raid_disks: u32,
    pub metadata: String,
    pub events: u64,
    /// "active N", "spare", "faulty", "journal".
    pub role: String,
}

/// The md members among `paths` (read-only; a path that cannot be opened, is held by a
/// writer, or has no superblock is skipped).
pub fn scan(paths: &[PathBuf]) -> Vec<Found> {
    let mut out = Vec::new();
    for p in paths {
        let Ok(mut disks) = open_members(std::slice::from_ref(p), true) else {
            continue;
        };
        let Some(disk) = disks.pop() else { continue };
        let Ok(found) = raidkit_engine::read_superblock(disk.as_ref()) else {
            continue;
        };
        let sb = &found.sb;
        out.push(Found {
            path: p.clone(),
            uuid: sb.set_uuid,
            name: sb.set_name.as_string(),
            level: sb.level.to_md(),
            raid_disks: sb.raid_disks,
            metadata: found.version.to_string(),
            events: sb.events,
            role: match sb.role() {
                DevRole::Active(r) => format!("active {r}"),
                other => format!("{other:?}").to_ascii_lowercase(),
            },
        });
    }
    out
}

/// One array of a scan: its members grouped, the freshest superblock's description.
#[derive(Clone, Debug, Serialize)]
pub struct ScannedArray {
    /// The export name its ARRAY line gives it: the set name without its host part, with
    /// the UUID's first group added where two arrays found share a name.
    pub export: String,
    pub uuid: Uuid,
    pub name: String,
    pub level: i32,
    pub raid_disks: u32,
    pub metadata: String,
    pub members: Vec<Found>,
}

impl ScannedArray {
    /// The set name without its host part (the UUID's first group for an unnamed array).
    fn short_name(&self) -> String {
        let short = self.name.rsplit(':').next().unwrap_or("").trim();
        if short.is_empty() {
            self.uuid.to_mdadm_string()[..8].to_string()
        } else {
            short.to_string()
        }
    }

    /// mdadm's `--examine --scan --verbose` line, with the export name.
    pub fn config_line(&self) -> String {
        let devices: Vec<String> = self
            .members
            .iter()
            .map(|m| m.path.display().to_string())
            .collect();
        format!(
            "ARRAY {} level=raid{} metadata={} num-devices={} UUID={} name={}\n   devices={}",
            self.export,
            self.level,
            self.metadata,
            self.raid_disks,
            self.uuid,
            self.name,
            devices.join(",")
        )
    }
}

/// Groups found members by array UUID (in the order first found).
pub fn group(found: Vec<Found>) -> Vec<ScannedArray> {
    let mut out: Vec<ScannedArray> = Vec::new();
    for f in found {
        match out.iter_mut().find(|a| a.uuid == f.uuid) {
            Some(a) => {
                // The freshest superblock describes the array.
                if f.events > a.members.iter().map(|m| m.events).max().unwrap_or(0) {
                    (a.name, a.level, a.raid_disks, a.metadata) =
                        (f.name.clone(), f.level, f.raid_disks, f.metadata.clone());
                }
                a.members.push(f);
            }
            None => out.push(ScannedArray {
                export: String::new(),
                uuid: f.uuid,
                name: f.name.clone(),
                level: f.level,
                raid_disks: f.raid_disks,
                metadata: f.metadata.clone(),
                members: vec![f],
            }),
        }
    }
    name_exports(&mut out);
    out
}

/// Each array's export name: its short name, with the UUID's first group added where two
/// arrays share one.
fn name_exports(out: &mut [ScannedArray]) {
    let shorts: Vec<String> = out.iter().map(ScannedArray::short_name).collect();
    for (i, a) in out.iter_mut().enumerate() {
        let shared = shorts.iter().filter(|s| **s == shorts[i]).count() > 1;
        a.export = if shared {
            format!("{}-{}", shorts[i], &a.uuid.to_mdadm_string()[..8])
        } else {
            shorts[i].clone()
        };
    }
}

/// RAID 50/60 stacks among `arrays`: the RAID 5/6 arrays that hold a RAID 0 superblock at
/// their start (md's stack: a RAID 0 on the spans) become one entry with the RAID 0's UUID
/// and name, level 50 or 60, and every span's members, spans in the RAID 0's slot order and
/// members in their slot order within each. Each RAID 5/6 array is assembled read-only to
/// look: nothing is written.
pub fn group_stacks(arrays: Vec<ScannedArray>) -> Vec<ScannedArray> {
    let mut out: Vec<ScannedArray> = Vec::new();
    // (the RAID 0's UUID and name, the span's slot in it, the span)
    let mut spans: Vec<(Uuid, String, u16, ScannedArray)> = Vec::new();
    for a in arrays {
        match (a.level == 5 || a.level == 6)
            .then(|| stack_above(&a))
            .flatten()
        {
            Some((uuid, name, slot)) => spans.push((uuid, name, slot, a)),
            None => out.push(a),
        }
    }
    let mut tops: Vec<Uuid> = Vec::new();
    for (uuid, ..) in &spans {
        if !tops.contains(uuid) {
            tops.push(*uuid);
        }
    }
    for top in tops {
        let mut parts: Vec<&(Uuid, String, u16, ScannedArray)> =
            spans.iter().filter(|s| s.0 == top).collect();
        parts.sort_by_key(|p| p.2);
        let (_, name, _, first) = parts[0];
        let slot_of = |f: &Found| {
            f.role
                .strip_prefix("active ")
                .and_then(|r| r.parse::<u32>().ok())
                .unwrap_or(u32::MAX)
        };
        let mut members = Vec::new();
        for p in &parts {
            let mut m = p.3.members.clone();
            m.sort_by_key(slot_of);
            members.extend(m);
        }
        out.push(ScannedArray {
            export: String::new(),
            uuid: top,
            name: name.clone(),
            level: first.level * 10,
            raid_disks: first.raid_disks * parts.len() as u32,
            metadata: first.metadata.clone(),
            members,
        });
    }
    name_exports(&mut out);
    out
}

/// The RAID 0 on the array `a` (its UUID, name and the array's slot in it), when there is
/// one: `a` assembled read-only, its start read as a member's.
fn stack_above(a: &ScannedArray) -> Option<(Uuid, String, u16)> {
    let paths: Vec<PathBuf> = a.members.iter().map(|m| m.path.clone()).collect();
    let disks = open_members(&paths, true).ok()?;
    let (array, _) = raidkit_engine::Array::assemble(
        disks,
        raidkit_engine::AssembleOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .ok()?;
    let disk = raidkit_engine::array::ArrayDisk::new(std::sync::Arc::new(array), a.export.clone());
    let found = raidkit_engine::read_superblock(&disk).ok()?;
    match (found.sb.level, found.sb.role()) {
        (raidkit_metadata::Level::Raid0, DevRole::Active(slot)) => {
            Some((found.sb.set_uuid, found.sb.set_name.as_string(), slot))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mdadm_style_lines() {
        let cfg = Config::parse(
            "# raidkit\nDEVICE /srv/*.img\n  /dev/sd*\narray /dev/md/md0 metadata=1.2 \
             UUID=6b833081:84bc422c:84c6994c:8e74448e name=h:md0\n   devices=/a.img,/b.img\n\
             ARRAY md1 UUID=6b833081-84bc-422c-84c6-994c8e74448f spare-group=g spares=2 read-ahead=adaptive write-policy=back\nMAILADDR root\n\
             PROGRAM /bin/alert\nCONTROL /run/a.ctl /run/b.ctl\nSCHEDULE check=30d patrol=7d\n\
             RATES rebuild=50 max-speed=200 reshape=40 min-speed=5\nHEALTH every=1h temperature=55\n",
        )
        .unwrap();
        assert_eq!(cfg.devices, vec!["/srv/*.img", "/dev/sd*"]);
        assert_eq!(cfg.arrays.len(), 2);
        assert_eq!(cfg.arrays[0].name, "md0");
        assert_eq!(
            cfg.arrays[0].devices,
            vec![PathBuf::from("/a.img"), PathBuf::from("/b.img")]
        );
        assert_eq!(
            cfg.arrays[1].uuid.to_mdadm_string(),
            "6b833081:84bc422c:84c6994c:8e74448f"
        );
        assert_eq!(cfg.arrays[1].spare_group.as_deref(), Some("g"));
        assert_eq!(
            (cfg.arrays[0].write_policy, cfg.arrays[1].write_policy),
            (None, Some(raidkit_engine::WritePolicy::Back))
        );
        assert_eq!(
            (cfg.arrays[0].spares, cfg.arrays[1].spares),
            (None, Some(2))
        );
        assert_eq!(cfg.schedule, vec!["check=30d", "patrol=7d"]);
        assert_eq!(
            cfg.rates,
            RatesSpec {
                rebuild_percent: Some(50),
                reshape_percent: Some(40),
                max_bytes_per_s: Some(200_000_000),
                min_bytes_per_s: Some(5_000_000),
                ..RatesSpec::default()
            }
        );
        let health = cfg.health.expect("a HEALTH line");
        assert_eq!(health.every, Some(std::time::Duration::from_secs(3600)));
        assert_eq!(health.thresholds.temperature_c, 55);
        assert_eq!(health.thresholds.pending_sectors, 1, "the default stays");
        for bad in [
            "HEALTH every=soon\n",
            "ARRAY md0 UUID=6b833081:84bc422c:84c6994c:8e74448e read-ahead=maybe\n",
            "ARRAY md0 UUID=6b833081:84bc422c:84c6994c:8e74448e write-policy=sometimes\n",
            "ARRAY md0 UUID=6b833081:84bc422c:84c6994c:8e74448e spares=two\n",
            "HEALTH heat=3\n",
            "RATES rebuild=0\n",
            "RATES check=101\n",
            "RATES defrag=5\n",
            "RATES check\n",
        ] {
            assert!(Config::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(cfg.arrays[0].spare_group, None);
        assert_eq!(cfg.mailaddr.as_deref(), Some("root"));
        assert_eq!(cfg.program, Some(PathBuf::from("/bin/alert")));
        assert_eq!(cfg.controls.len(), 2);
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        for bad in [
            "ARRAY md0\n",
            "ARRAY md0 UUID=12\n",
            "ARRAY UUID=6b833081:84bc422c:84c6994c:8e74448e\n",
            "ARRAY a UUID=6b833081:84bc422c:84c6994c:8e74448e\nARRAY a UUID=6b833081:84bc422c:84c6994c:8e74448f\n",
            "FROBNICATE x\n",
        ] {
            assert!(Config::parse(bad).is_err(), "{bad:?}");
        }
        let err = Config::parse("DEVICE a\n\nBOGUS\n").unwrap_err();
        assert!(err.starts_with("line 3:"), "{err}");
    }
}
