//! How an array's status is shown: the parts of an engine [`raidkit_engine::Status`] that
//! `detail` prints, and the printer, which lays them out as `mdadm --detail` does.
//!
//! Owns the detail text. It reads the status back from its JSON form so that one printer serves
//! stopped arrays (the engine's status) and served ones (the control socket's reply).

use crate::error::CliError;

/// The parts of an engine [`raidkit_engine::Status`] that `detail` prints, read back from its
/// JSON form: the same printer serves stopped arrays and (through the control socket) served
/// ones.
#[derive(Debug, serde::Deserialize)]
pub struct StatusView {
    pub uuid: String,
    pub name: String,
    pub level: i32,
    pub layout: u32,
    pub raid_disks: usize,
    pub chunk_sectors: u64,
    pub array_bytes: u64,
    pub state: String,
    pub degraded: bool,
    pub failed: bool,
    pub events: u64,
    pub missing_slots: Vec<usize>,
    pub members: Vec<MemberView>,
    #[serde(default)]
    pub resync_from_sectors: Option<u64>,
    /// Background work the array needs ("rebuild", "replace", "resync").
    #[serde(default)]
    pub pending: Vec<String>,
    /// The read policy and what its cache did.
    #[serde(default)]
    pub read_ahead: Option<raidkit_engine::ReadAheadCounters>,
    /// The write policy and what its cache did.
    #[serde(default)]
    pub write_back: Option<raidkit_engine::WriteBackCounters>,
    /// The background task running now.
    #[serde(default)]
    pub task: Option<TaskView>,
    /// "resync", "ppl", "journal", or {"bitmap": {...}}.
    #[serde(default)]
    pub consistency_policy: serde_json::Value,
    /// A RAID 50/60 stack: this is the RAID 0 over the spans.
    #[serde(default)]
    pub stack: Option<StackView>,
}

/// A stack's level and its spans, each a whole array, in the RAID 0's slot order.
#[derive(Debug, serde::Deserialize)]
pub struct StackView {
    pub level: i32,
    pub spans: Vec<StatusView>,
}

impl StatusView {
    /// The consistency policy by mdadm's name.
    fn policy_name(&self) -> String {
        match &self.consistency_policy {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Object(o) => o.keys().next().cloned().unwrap_or_default(),
            _ => "unknown".into(),
        }
    }
}

impl StatusView {
    pub fn of(status: &raidkit_engine::Status) -> Result<StatusView, CliError> {
        serde_json::to_value(status)
            .and_then(serde_json::from_value)
            .map_err(|e| CliError::failure(format!("status: {e}")))
    }

    /// "whole", "degraded" or "FAILED".
    pub fn health(&self) -> &'static str {
        if self.failed {
            "FAILED"
        } else if self.degraded {
            "degraded"
        } else {
            "whole"
        }
    }

    /// The State line of a running array (written since assembly: active).
    pub fn state_text(&self) -> String {
        let mut s = if self.state == "clean" {
            "clean".to_string()
        } else {
            "active".to_string()
        };
        if self.failed {
            s.push_str(", FAILED");
        } else if self.degraded {
            s.push_str(", degraded");
        }
        s
    }
}

/// The parts of a running task that `detail` prints.
#[derive(Debug, serde::Deserialize)]
pub struct TaskView {
    pub kind: String,
    pub percent: f64,
    pub bytes_per_s: f64,
    pub eta_s: Option<f64>,
}

#[derive(Debug, serde::Deserialize)]
pub struct MemberView {
    pub index: usize,
    pub name: String,
    pub slot: Option<usize>,
    pub role: String,
    /// What its drive said when last asked (SMART), and the warnings that gave.
    #[serde(default)]
    pub health: Option<raidkit_disk::Health>,
    #[serde(default)]
    pub health_warnings: Vec<String>,
}

/// md's name of a layout of `level`, where the level has layouts.
pub fn layout_name(level: i32, layout: u32) -> Option<String> {
    match level {
        5 => raidkit_metadata::examine::raid5_layout_name(layout).map(str::to_string),
        6 => raidkit_metadata::examine::raid6_layout_name(layout).map(str::to_string),
        10 => Some(raidkit_metadata::examine::raid10_layout_name(layout)),
        _ => None,
    }
}

/// Prints a status the way mdadm --detail lays it out.
pub fn print_detail(status: &StatusView, state: &str) {
    match &status.stack {
        Some(stack) => {
            let per_span = stack.spans.first().map_or(0, |s| s.raid_disks);
            println!(
                "     Raid Level : raid{} (a RAID 0 over {} RAID {} spans)",
                stack.level,
                stack.spans.len(),
                stack.level / 10
            );
            println!(
                "     Array Size : {} bytes ({:.2} MiB)",
                status.array_bytes,
                status.array_bytes as f64 / 1048576.0
            );
            println!(
                "   Raid Devices : {} ({} spans of {per_span})",
                stack.spans.len() * per_span,
                stack.spans.len()
            );
        }
        None => {
            println!("     Raid Level : raid{}", status.level);
            println!(
                "     Array Size : {} bytes ({:.2} MiB)",
                status.array_bytes,
                status.array_bytes as f64 / 1048576.0
            );
            println!("   Raid Devices : {}", status.raid_disks);
        }
    }
    if let Some(name) = layout_name(status.level, status.layout) {
        println!("         Layout : {name}");
    }
    println!("     Chunk Size : {}K", status.chunk_sectors / 2);
    println!("           UUID : {}", status.uuid);
    println!("           Name : {}", status.name);
    println!("         Events : {}", status.events);
    println!("          State : {state}");
    println!("Consistency Policy : {}", status.policy_name());
    if let Some(at) = status.resync_from_sectors {
        println!("   Resync From : sector {at} (a resync is pending; `raidkit rebuild` runs it)");
    }
    for m in status.members.iter().filter(|m| m.role == "rebuilding") {
        println!(
            " Rebuild Status : {} rebuilding into slot {} (`raidkit rebuild` continues it)",
            m.name,
            m.slot.map(|s| s.to_string()).unwrap_or_default()
        );
    }
    if let Some(t) = &status.task {
        println!(
            "  Running Task : {} {:.1}% at {:.0} MB/s{}",
            t.kind,
            t.percent,
            t.bytes_per_s / 1e6,
            t.eta_s
                .map(|s| format!(", {s:.0} s to go"))
                .unwrap_or_default()
        );
    }
    if !status.pending.is_empty() {
        println!("        Pending : {}", status.pending.join(", "));
    }
    if let Some(ra) = status
        .read_ahead
        .filter(|r| r.policy != raidkit_engine::ReadAhead::None)
    {
        println!(
            "     Read Ahead : {} ({} reads from the cache, {} from the members, {} of them read ahead; {:.1} of {:.0} MiB held)",
            ra.policy.name(),
            ra.hits,
            ra.misses,
            ra.ahead_reads,
            ra.cached_bytes as f64 / 1048576.0,
            ra.capacity_bytes as f64 / 1048576.0
        );
    }
    if let Some(wb) = status
        .write_back
        .filter(|w| w.policy != raidkit_engine::WritePolicy::Through || w.cached_writes > 0)
    {
        println!(
            "   Write Policy : write-{} ({} writes returned from the journal, {} pages written again while cached, {} stripes written back; {:.1} of {:.0} MiB held)",
            wb.policy.name(),
            wb.cached_writes,
            wb.rewrites,
            wb.destages,
            wb.cached_bytes as f64 / 1048576.0,
            wb.capacity_bytes as f64 / 1048576.0
        );
    }
    println!();
    println!("    Number   RaidDevice State");
    for m in &status.members {
        let slot = m.slot.map(|s| s.to_string()).unwrap_or_else(|| "-".into());
        println!("    {:>6}   {:>10} {:<8} {}", m.index, slot, m.role, m.name);
    }
    for s in &status.missing_slots {
        if !status.members.iter().any(|m| m.slot == Some(*s)) {
            println!("    {:>6}   {:>10} {:<8}", "-", s, "removed");
        }
    }
    print_health(&status.members);
    if let Some(stack) = &status.stack {
        for (i, span) in stack.spans.iter().enumerate() {
            println!();
            println!(
                "  Span {i} : RAID {} of {} members, UUID {} ({})",
                span.level,
                span.raid_disks,
                span.uuid,
                span.health()
            );
            print_detail(span, &span.state_text());
        }
    }
}

/// Each member's drive health, where it has a drive to ask: its figures, then a line per
/// warning.
fn print_health(members: &[MemberView]) {
    let asked: Vec<(&MemberView, &raidkit_disk::Health)> = members
        .iter()
        .filter_map(|m| match &m.health {
            Some(raidkit_disk::Health::NoDrive { .. }) | None => None,
            Some(h) => Some((m, h)),
        })
        .collect();
    if asked.is_empty() {
        return;
    }
    println!();
    println!("   Drive Health :");
    for (m, h) in asked {
        println!("    {}: {}", m.name, h.summary());
        for w in &m.health_warnings {
            println!("      WARNING: {w}");
        }
    }
}
