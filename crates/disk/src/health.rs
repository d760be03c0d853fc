//! Drive health: what a member's drive says about itself through SMART, and when that is a
//! warning (the PERC6's "predictive failure": a drive still working that is likely to fail).
//!
//! Owns: [`DriveHealth`], read from `smartctl --json` (smartmontools; raidkit does not speak
//! ATA, SCSI or NVMe pass-through itself: smartctl knows every transport, its quirks database
//! and its JSON is documented and stable), the parse of that JSON, and [`Thresholds`] with the
//! warnings they give. A block device is asked through smartctl; an emulated drive reports
//! a healthy drive, or what a file in smartctl's JSON says (`emu:NAME,smart=FILE`), so the
//! whole path from a drive's report to a warning event is tested without a drive; image files,
//! memory and network members have no drive of their own ([`Health::Unavailable`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// A member's health as its drive reports it, or why there is no report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "health", rename_all = "kebab-case")]
pub enum Health {
    Report(Box<DriveHealth>),
    /// No report from a drive that was asked: smartctl is missing, or the device does not
    /// answer SMART (a loop device, a virtual disk).
    Unavailable {
        reason: String,
    },
    /// Nothing to ask: the member is no drive of its own (an image file, memory, a network
    /// member).
    NoDrive {
        reason: String,
    },
}

impl Health {
    pub fn unavailable(reason: impl Into<String>) -> Health {
        Health::Unavailable {
            reason: reason.into(),
        }
    }

    pub fn no_drive(reason: impl Into<String>) -> Health {
        Health::NoDrive {
            reason: reason.into(),
        }
    }

    /// The warnings this report gives under `t` (none without a report).
    pub fn warnings(&self, t: &Thresholds) -> Vec<HealthWarning> {
        match self {
            Health::Report(h) => h.warnings(t),
            Health::Unavailable { .. } | Health::NoDrive { .. } => Vec::new(),
        }
    }

    /// One line for `detail`: the figures, or why there are none.
    pub fn summary(&self) -> String {
        match self {
            Health::Report(h) => h.summary(),
            Health::Unavailable { reason } => format!("no SMART report: {reason}"),
            Health::NoDrive { reason } => format!("no drive to ask: {reason}"),
        }
    }
}

/// What SMART says about a drive. Every figure is optional: ATA, SCSI and NVMe drives report
/// different sets, and a drive may leave any of them out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DriveHealth {
    /// Where the report came from: `smartctl 7.3` or `emulated`.
    pub source: String,
    pub model: Option<String>,
    pub serial: Option<String>,
    /// The drive's own overall assessment (SMART's PASSED/FAILED).
    pub passed: Option<bool>,
    /// Sectors the drive has remapped to spares (ATA attribute 5; SCSI's grown defect list).
    pub reallocated_sectors: Option<u64>,
    /// Sectors waiting to be remapped, unreadable now (ATA attribute 197).
    pub pending_sectors: Option<u64>,
    /// Sectors found unreadable by the drive's own scans (ATA 198; NVMe media errors).
    pub uncorrectable_sectors: Option<u64>,
    pub temperature_c: Option<i64>,
    pub power_on_hours: Option<u64>,
    /// Pre-failure attributes at or below their threshold now, by name.
    pub failing_attributes: Vec<String>,
    /// The newest self-test in the drive's log.
    pub last_self_test: Option<SelfTest>,
    /// NVMe's critical warning bits (spare below threshold, temperature, reliability,
    /// read-only, backup failed); 0 when all is well.
    pub critical_warning: Option<u64>,
}

/// One self-test from a drive's log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SelfTest {
    /// "Short offline", "Extended offline", ...
    pub kind: String,
    /// "Completed without error", "Completed: read failure", ...
    pub status: String,
    pub passed: bool,
    pub lifetime_hours: Option<u64>,
}

/// When a report is a warning. A drive whose own assessment fails, whose pre-failure
/// attributes trip, whose last self-test failed or that raises an NVMe critical warning is
/// always one; the counts and the temperature warn at or above these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thresholds {
    pub reallocated_sectors: u64,
    pub pending_sectors: u64,
    pub uncorrectable_sectors: u64,
    pub temperature_c: i64,
}

impl Default for Thresholds {
    /// A few reallocated sectors are normal on an old drive; one pending or uncorrectable
    /// sector is not (smartd's `-C 197 -U 198` warn on any); 60 °C is above what desktop and
    /// enterprise drives alike are specified for.
    fn default() -> Thresholds {
        Thresholds {
            reallocated_sectors: 10,
            pending_sectors: 1,
            uncorrectable_sectors: 1,
            temperature_c: 60,
        }
    }
}

impl Thresholds {
    /// Parses `reallocated=N,pending=N,uncorrectable=N,temperature=C` (any subset; the rest
    /// keep their defaults).
    pub fn parse(text: &str) -> Result<Thresholds, String> {
        let mut t = Thresholds::default();
        for part in text.split([',', ' ']).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not KEY=VALUE"))?;
            let n = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| format!("{k}={v}: not a count"))
            };
            match k {
                "reallocated" => t.reallocated_sectors = n(v)?,
                "pending" => t.pending_sectors = n(v)?,
                "uncorrectable" => t.uncorrectable_sectors = n(v)?,
                "temperature" => {
                    t.temperature_c = v
                        .trim_end_matches('C')
                        .parse()
                        .map_err(|_| format!("temperature={v}: degrees Celsius"))?
                }
                _ => {
                    return Err(format!(
                        "unknown threshold {k:?}: reallocated, pending, uncorrectable, temperature"
                    ))
                }
            }
        }
        Ok(t)
    }
}

/// Which warning; one member raises each at most once until it clears.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WarningKind {
    AssessmentFailed,
    AttributeFailing,
    SelfTestFailed,
    CriticalWarning,
    Reallocated,
    Pending,
    Uncorrectable,
    Temperature,
}

/// One warning, with its sentence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthWarning {
    pub kind: WarningKind,
    pub text: String,
}

/// Keeps `raised` (the kinds already reported for one drive) up to date with `warnings`
/// (what it reports now) and returns the sentences of those not reported before: a warning
/// is raised once while it lasts, and again if it clears and comes back.
pub fn newly_raised(raised: &mut Vec<WarningKind>, warnings: &[HealthWarning]) -> Vec<String> {
    let new = warnings
        .iter()
        .filter(|w| !raised.contains(&w.kind))
        .map(|w| w.text.clone())
        .collect();
    *raised = warnings.iter().map(|w| w.kind).collect();
    new
}

impl DriveHealth {
    /// The warnings under `t`, most serious first.
    pub fn warnings(&self, t: &Thresholds) -> Vec<HealthWarning> {
        let mut out = Vec::new();
        let mut warn = |kind, text: String| out.push(HealthWarning { kind, text });
        if self.passed == Some(false) {
            warn(
                WarningKind::AssessmentFailed,
                "the drive's own SMART assessment is FAILED: it expects to fail".into(),
            );
        }
        if !self.failing_attributes.is_empty() {
            warn(
                WarningKind::AttributeFailing,
                format!(
                    "pre-failure attributes at their threshold: {}",
                    self.failing_attributes.join(", ")
                ),
            );
        }
        if let Some(st) = self.last_self_test.as_ref().filter(|s| !s.passed) {
            warn(
                WarningKind::SelfTestFailed,
                format!("last self-test ({}): {}", st.kind, st.status),
            );
        }
        if let Some(w) = self.critical_warning.filter(|&w| w != 0) {
            warn(
                WarningKind::CriticalWarning,
                format!("NVMe critical warning {w:#04x}"),
            );
        }
        let counts = [
            (
                WarningKind::Reallocated,
                self.reallocated_sectors,
                t.reallocated_sectors,
                "reallocated",
            ),
            (
                WarningKind::Pending,
                self.pending_sectors,
                t.pending_sectors,
                "pending (unreadable, not yet remapped)",
            ),
            (
                WarningKind::Uncorrectable,
                self.uncorrectable_sectors,
                t.uncorrectable_sectors,
                "uncorrectable",
            ),
        ];
        for (kind, value, limit, what) in counts {
            if let Some(n) = value.filter(|&n| n >= limit.max(1)) {
                warn(kind, format!("{n} sectors {what} (warns at {limit})"));
            }
        }
        if let Some(c) = self.temperature_c.filter(|&c| c >= t.temperature_c) {
            warn(
                WarningKind::Temperature,
                format!("{c} °C (warns at {} °C)", t.temperature_c),
            );
        }
        out
    }

    /// `PASSED, 0 reallocated, 0 pending, 0 uncorrectable, 34 °C, 1234 h, self-test passed`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        parts.push(match self.passed {
            Some(true) => "PASSED".to_string(),
            Some(false) => "FAILED".to_string(),
            None => "no assessment".to_string(),
        });
        for (v, what) in [
            (self.reallocated_sectors, "reallocated"),
            (self.pending_sectors, "pending"),
            (self.uncorrectable_sectors, "uncorrectable"),
        ] {
            if let Some(n) = v {
                parts.push(format!("{n} {what}"));
            }
        }
        if let Some(c) = self.temperature_c {
            parts.push(format!("{c} °C"));
        }
        if let Some(h) = self.power_on_hours {
            parts.push(format!("{h} h on"));
        }
        if let Some(st) = &self.last_self_test {
            parts.push(format!("last self-test: {}", st.status));
        }
        if !self.failing_attributes.is_empty() {
            parts.push(format!("failing: {}", self.failing_attributes.join(", ")));
        }
        parts.join(", ")
    }
}

/// smartctl's exit status bit 1: the device could not be opened, or does not answer SMART
/// commands (smartctl(8), RETURN VALUES).
const SMARTCTL_OPEN_FAILED: u64 = 1 << 1;
/// Bit 0: smartctl did not understand its command line.
const SMARTCTL_USAGE: u64 = 1 << 0;

/// Reads the health of `smartctl --json -a` output. An error (with smartctl's own messages)
/// when the output holds no report: the device could not be opened or has no SMART.
pub fn parse_smartctl(json: &str) -> Result<DriveHealth, String> {
    let v: Value =
        serde_json::from_str(json).map_err(|e| format!("smartctl's output is not JSON: {e}"))?;
    let exit = v["smartctl"]["exit_status"].as_u64().unwrap_or(0);
    let messages: Vec<&str> = v["smartctl"]["messages"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["string"].as_str()).collect())
        .unwrap_or_default();
    let has_report = v["smart_status"].is_object()
        || v["ata_smart_attributes"].is_object()
        || v["nvme_smart_health_information_log"].is_object();
    if exit & (SMARTCTL_USAGE | SMARTCTL_OPEN_FAILED) != 0 && !has_report {
        let why = if messages.is_empty() {
            format!("smartctl exit status {exit}")
        } else {
            messages.join("; ")
        };
        return Err(why);
    }
    if !has_report {
        return Err("smartctl printed no SMART data for this device".into());
    }
    let version = v["smartctl"]["version"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(Value::as_u64)
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(".")
        })
        .unwrap_or_default();
    let mut h = DriveHealth {
        source: format!("smartctl {version}").trim().to_string(),
        model: v["model_name"].as_str().map(str::to_string),
        serial: v["serial_number"].as_str().map(str::to_string),
        passed: v["smart_status"]["passed"].as_bool(),
        temperature_c: v["temperature"]["current"].as_i64(),
        power_on_hours: v["power_on_time"]["hours"].as_u64(),
        ..DriveHealth::default()
    };
    if let Some(table) = v["ata_smart_attributes"]["table"].as_array() {
        let raw = |id: u64| {
            table
                .iter()
                .find(|a| a["id"].as_u64() == Some(id))
                .and_then(|a| a["raw"]["value"].as_u64())
        };
        h.reallocated_sectors = raw(5);
        h.pending_sectors = raw(197);
        h.uncorrectable_sectors = raw(198);
        h.failing_attributes = table
            .iter()
            .filter(|a| {
                let prefail = a["flags"]["prefailure"].as_bool().unwrap_or(false);
                let now = a["when_failed"].as_str() == Some("now");
                let (value, thresh) = (a["value"].as_u64(), a["thresh"].as_u64());
                now || (prefail && matches!((value, thresh), (Some(v), Some(t)) if t > 0 && v <= t))
            })
            .filter_map(|a| a["name"].as_str().map(str::to_string))
            .collect();
    }
    if let Some(n) = v["scsi_grown_defect_list"].as_u64() {
        h.reallocated_sectors = Some(n);
    }
    let nvme = &v["nvme_smart_health_information_log"];
    if nvme.is_object() {
        h.uncorrectable_sectors = nvme["media_errors"].as_u64();
        h.critical_warning = nvme["critical_warning"].as_u64();
        h.temperature_c = h.temperature_c.or(nvme["temperature"].as_i64());
        h.power_on_hours = h.power_on_hours.or(nvme["power_on_hours"].as_u64());
    }
    h.last_self_test = v["ata_smart_self_test_log"]["standard"]["table"]
        .as_array()
        .and_then(|t| t.first())
        .or_else(|| {
            v["nvme_self_test_log"]["table"]
                .as_array()
                .and_then(|t| t.first())
        })
        .map(|t| SelfTest {
            kind: t["type"]["string"].as_str().unwrap_or("").to_string(),
            status: t["status"]["string"]
                .as_str()
                .or(t["self_test_result"]["string"].as_str())
                .unwrap_or("")
                .to_string(),
            passed: t["status"]["passed"]
                .as_bool()
                .or(t["self_test_result"]["value"].as_u64().map(|r| r == 0))
                .unwrap_or(true),
            lifetime_hours: t["lifetime_hours"]
                .as_u64()
                .or(t["power_on_hours"].as_u64()),
        });
    Ok(h)
}

/// Asks smartctl about the block device at `path` (`smartctl --json -a`).
pub fn smartctl(path: &Path) -> Health {
    // smartctl lives in /usr/sbin, which a user's PATH may leave out.
    let run = |prog: &str| {
        Command::new(prog)
            .arg("--json=c")
            .arg("-a")
            .arg(path)
            .output()
    };
    let out = match run("smartctl").or_else(|e| match e.kind() {
        std::io::ErrorKind::NotFound => run("/usr/sbin/smartctl"),
        _ => Err(e),
    }) {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Health::unavailable("smartctl is not installed (Debian: smartmontools)")
        }
        Err(e) => return Health::unavailable(format!("smartctl did not run: {e}")),
    };
    match parse_smartctl(&String::from_utf8_lossy(&out.stdout)) {
        Ok(h) => Health::Report(Box::new(h)),
        Err(why) => Health::unavailable(why),
    }
}

/// An emulated drive's health: healthy unless `file` (smartctl's JSON, re-read on each
/// call so that a test can change what the drive reports) says otherwise.
pub fn emulated(model: &str, file: Option<&Path>) -> Health {
    let Some(file) = file else {
        return Health::Report(Box::new(DriveHealth {
            source: "emulated".into(),
            model: Some(model.to_string()),
            passed: Some(true),
            reallocated_sectors: Some(0),
            pending_sectors: Some(0),
            uncorrectable_sectors: Some(0),
            ..DriveHealth::default()
        }));
    };
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => return Health::unavailable(format!("{}: {e}", file.display())),
    };
    match parse_smartctl(&text) {
        Ok(mut h) => {
            h.source = format!("emulated ({})", file.display());
            Health::Report(Box::new(h))
        }
        Err(why) => Health::unavailable(format!("{}: {why}", file.display())),
    }
}
