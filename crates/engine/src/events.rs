//! What happened to an array, as typed events: members failing, spares taken, tasks started
//! and finished, writes refused for want of space.
//!
//! Owns the event log of one [`crate::Array`]: a bounded ring of numbered events that the CLI
//! prints, a server logs as it happens (with a timestamp of its own: the engine keeps no
//! clock) and tests assert on. Events are values, not sentences: [`ArrayEvent`]'s `Display`
//! gives the sentence, `Serialize` the fields.
//!
//! Invariants: sequence numbers only grow, from 0, and are never reused; the ring keeps the
//! newest [`EVENTS_KEPT`] events, so memory stays bounded however long an array runs, and a
//! reader that fell further behind learns how many it missed.

use crate::TaskKind;
use serde::Serialize;
use std::collections::VecDeque;
use std::fmt;

/// Events kept for readers that come late (`raidkit detail`, a server's logger).
pub const EVENTS_KEPT: usize = 1024;

/// One thing that happened to an array.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum ArrayEvent {
    /// A member left the array: an I/O error, a failed log write, or the operator.
    MemberFaulty {
        member: String,
        slot: Option<usize>,
        reason: String,
    },
    /// More members are gone than the level can lose: no more writes.
    ArrayFailed { detail: String },
    /// The array runs without some of its slots.
    ArrayDegraded { missing_slots: Vec<usize> },
    /// A member was attached as a spare.
    SpareAdded { member: String },
    /// A spare took a missing slot; a rebuild brings it in sync.
    SpareTaken { member: String, slot: usize },
    /// A member was detached.
    MemberRemoved { member: String },
    /// A former member came back; only what the bitmap marks is rebuilt.
    ReAdded {
        member: String,
        slot: usize,
        bitmap_regions: u64,
    },
    /// A copy onto a new member started (md's replace).
    ReplaceStarted { member: String, slot: usize },
    /// A replacement whose source failed carries on as the slot's rebuild.
    ReplacementContinuesAsRebuild { slot: usize },
    /// A replacement is complete; the old member is faulty.
    Replaced {
        member: String,
        old: String,
        slot: usize,
    },
    /// A member being rebuilt is in sync now.
    Rebuilt { member: String, slot: usize },
    /// A background task began.
    TaskStarted { task: TaskKind },
    /// A background task ended; `summary` says how.
    TaskFinished {
        task: TaskKind,
        completed: bool,
        summary: String,
    },
    /// A read failed and was served from redundancy.
    ReadError {
        member: String,
        first_sector: u64,
        end_sector: u64,
        repaired: bool,
    },
    /// Sectors that read errors left were rewritten, or sent to the bad-block log.
    ReadErrorsRepaired {
        member: String,
        rewritten_sectors: u64,
        bad_block_sectors: u64,
    },
    /// Sectors recorded in a member's bad-block log.
    BadBlocksRecorded {
        member: String,
        first_sector: u64,
        last_sector: u64,
    },
    /// A write was refused because a member's filesystem is full; the member is fine.
    NoSpace { member: String, detail: String },
    /// Anything else worth a line (resync skipped, a log that could not be written).
    Note { text: String },
}

impl fmt::Display for ArrayEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArrayEvent::MemberFaulty { member, reason, .. } => {
                write!(f, "{member}: marked faulty ({reason})")
            }
            ArrayEvent::ArrayFailed { detail } => write!(f, "{detail}"),
            ArrayEvent::ArrayDegraded { missing_slots } => {
                write!(f, "array degraded: slots {missing_slots:?} missing")
            }
            ArrayEvent::SpareAdded { member } => write!(f, "{member}: added as spare"),
            ArrayEvent::SpareTaken { member, slot } => {
                write!(f, "{member}: spare takes slot {slot}; rebuild pending")
            }
            ArrayEvent::MemberRemoved { member } => write!(f, "{member}: removed"),
            ArrayEvent::ReAdded {
                member,
                slot,
                bitmap_regions,
            } => write!(
                f,
                "{member}: re-added into slot {slot}; {bitmap_regions} bitmap regions to bring up to date"
            ),
            ArrayEvent::ReplaceStarted { member, slot } => {
                write!(f, "{member}: replaces slot {slot}; the copy starts")
            }
            ArrayEvent::ReplacementContinuesAsRebuild { slot } => {
                write!(f, "replacement for slot {slot} continues as its rebuild")
            }
            ArrayEvent::Replaced { member, old, slot } => write!(
                f,
                "{member}: replaced {old} in slot {slot}; the old member is marked faulty"
            ),
            ArrayEvent::Rebuilt { member, slot } => write!(f, "{member}: rebuilt into slot {slot}"),
            ArrayEvent::TaskStarted { task } => write!(f, "{task} started"),
            ArrayEvent::TaskFinished { summary, .. } => write!(f, "{summary}"),
            ArrayEvent::ReadError {
                member,
                first_sector,
                end_sector,
                repaired,
            } => write!(
                f,
                "{member}: read error in member sectors {first_sector}..{end_sector}; served from redundancy{}",
                if *repaired { "" } else { " (read-only: not rewritten)" }
            ),
            ArrayEvent::ReadErrorsRepaired {
                member,
                rewritten_sectors,
                bad_block_sectors,
            } => write!(
                f,
                "{member}: {rewritten_sectors} sectors rewritten and readable again, {bad_block_sectors} sent to the bad-block log"
            ),
            ArrayEvent::BadBlocksRecorded {
                member,
                first_sector,
                last_sector,
            } => write!(
                f,
                "{member}: sectors {first_sector}..{last_sector} recorded in the bad-block log; served from redundancy"
            ),
            ArrayEvent::NoSpace { detail, .. } => write!(f, "{detail}"),
            ArrayEvent::Note { text } => write!(f, "{text}"),
        }
    }
}

/// The bounded, numbered event log of one array.
#[derive(Debug, Default)]
pub(crate) struct EventLog {
    /// Sequence number of the next event.
    next: u64,
    ring: VecDeque<ArrayEvent>,
    /// Woken at every push; waited on with the lock of the state that holds this log.
    pub(crate) pushed: std::sync::Arc<std::sync::Condvar>,
}

impl EventLog {
    pub(crate) fn push(&mut self, event: ArrayEvent) {
        if self.ring.len() == EVENTS_KEPT {
            self.ring.pop_front();
        }
        self.ring.push_back(event);
        self.next += 1;
        self.pushed.notify_all();
    }

    /// The sequence number the next event will get.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next
    }

    /// Events numbered `since` and later that are still kept, with the first one's number
    /// (greater than `since` when older ones were dropped from the ring).
    pub(crate) fn since(&self, since: u64) -> (u64, Vec<ArrayEvent>) {
        let oldest = self.next - self.ring.len() as u64;
        let from = since.clamp(oldest, self.next);
        let skip = (from - oldest) as usize;
        (from, self.ring.iter().skip(skip).cloned().collect())
    }

    /// The kept events as sentences, oldest first.
    pub(crate) fn sentences(&self) -> Vec<String> {
        self.ring.iter().map(ToString::to_string).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(i: usize) -> ArrayEvent {
        ArrayEvent::Note {
            text: format!("n{i}"),
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_and_numbers_never_repeat() {
        let mut log = EventLog::default();
        for i in 0..EVENTS_KEPT + 10 {
            log.push(note(i));
        }
        assert_eq!(log.next_seq(), (EVENTS_KEPT + 10) as u64);
        // A reader at 0 fell behind: it gets the oldest kept, numbered 10.
        let (first, events) = log.since(0);
        assert_eq!(first, 10);
        assert_eq!(events.len(), EVENTS_KEPT);
        assert_eq!(events[0], note(10));
        // A reader that is up to date gets nothing; one a step behind gets one.
        assert!(log.since(log.next_seq()).1.is_empty());
        let (first, events) = log.since(log.next_seq() - 1);
        assert_eq!(
            (first, events),
            (log.next_seq() - 1, vec![note(EVENTS_KEPT + 9)])
        );
        assert_eq!(log.sentences().len(), EVENTS_KEPT);
    }

    #[test]
    fn events_serialize_with_their_kind_and_fields() {
        let e = ArrayEvent::MemberFaulty {
            member: "m2.img".into(),
            slot: Some(2),
            reason: "write error".into(),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "member-faulty");
        assert_eq!(v["member"], "m2.img");
        assert_eq!(v["slot"], 2);
        assert_eq!(e.to_string(), "m2.img: marked faulty (write error)");
    }
}
