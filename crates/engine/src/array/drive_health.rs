//! Drive health: asking each member's drive how it is (SMART, through
//! [`raidkit_disk::Disk::health`]) and raising [`ArrayEvent::DriveHealthWarning`] when one
//! reports trouble it did not report before.
//!
//! Asking a drive can take a while (smartctl runs a process and talks to the drive), so the
//! drives are asked outside the array's state lock and one at a time; the caller decides how
//! often (the server polls on a timer). A warning is raised once per member and kind until
//! the drive stops reporting it: a drive at 61 °C is one event, not one per poll.

use super::*;
use raidkit_disk::{Health, Thresholds, WarningKind};

/// What one member's drive said last, and the warnings raised for it since.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) last: Option<Health>,
    /// The warnings `last` gave, in sentences.
    pub(crate) warnings: Vec<String>,
    raised: Vec<WarningKind>,
}

/// One member's answer to [`Array::poll_health`].
#[derive(Clone, Debug, Serialize)]
pub struct MemberHealth {
    /// Member index (as in [`MemberStatus::index`]).
    pub index: usize,
    pub name: String,
    pub health: Health,
    /// The warnings the report gives under the thresholds asked with (raised before or now).
    pub warnings: Vec<raidkit_disk::HealthWarning>,
}

impl Array {
    /// Asks every member's drive (spares too) for its health, keeps the answers for
    /// [`Array::status`], and records a [`ArrayEvent::DriveHealthWarning`] for each member
    /// with a warning under `thresholds` not raised before. Returns every answer.
    pub fn poll_health(&self, thresholds: &Thresholds) -> Vec<MemberHealth> {
        let members: Vec<(MemberId, Arc<Member>)> = lock(&self.state)
            .members
            .enumerate()
            .filter_map(|(i, m)| Some((i, m.clone()?)))
            .collect();
        let mut out = Vec::with_capacity(members.len());
        let mut events = Vec::new();
        for (i, m) in members {
            let health = m.disk.health();
            let warnings = health.warnings(thresholds);
            let mut seen = lock(&m.health);
            let new = raidkit_disk::health::newly_raised(&mut seen.raised, &warnings);
            seen.last = Some(health.clone());
            seen.warnings = warnings.iter().map(|w| w.text.clone()).collect();
            drop(seen);
            if !new.is_empty() {
                events.push(ArrayEvent::DriveHealthWarning {
                    member: m.disk.name().to_string(),
                    warnings: new,
                });
            }
            out.push(MemberHealth {
                index: i.0,
                name: m.disk.name().to_string(),
                health,
                warnings,
            });
        }
        if !events.is_empty() {
            let mut st = lock(&self.state);
            for e in events {
                st.events.push(e);
            }
        }
        out
    }
}
