//! What happened to an array, as typed events: what assembly found (spares, a log replayed, a
//! resync needed), members failing, spares taken, tasks started and finished, writes refused
//! for want of space.
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
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fmt;

/// Events kept for readers that come late (`raidkit detail`, a server's logger).
pub const EVENTS_KEPT: usize = 1024;

/// One thing that happened to an array.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// A spare came from another array of its spare group (mdadm's MoveSpare; recorded by
    /// the server that moved it, through [`crate::Array::record_event`]).
    SpareMoved { member: String, from: String },
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
    /// A member's drive reports trouble it did not report before (SMART: a failing
    /// assessment or self-test, reallocated or pending sectors, heat): it still works, and
    /// is likely to fail (the PERC6's predictive failure).
    DriveHealthWarning {
        member: String,
        warnings: Vec<String>,
    },
    /// A write was refused because a member's filesystem is full; the member is fine.
    NoSpace { member: String, detail: String },
    /// Writes go through again after some were refused for want of space.
    SpaceAgain,
    /// A resync was skipped: a parity array has lost as many members as it can, and parity
    /// is their only copy (md skips it too).
    ResyncSkipped { missing_slots: usize },
    /// A rebuild found sectors with no readable source left (bad blocks on every source);
    /// they are recorded as bad blocks on the rebuilt member.
    RebuildUnreadable { member_sector: u64, sectors: u64 },

    // What assembly found. [`crate::AssembleReport::events`] lists them, and they are the
    // first events of the array's log.
    /// A member the newest superblock lists as a spare.
    AssembledSpare { member: String },
    /// The member holding the array's write journal.
    AssembledJournal { member: String },
    /// A member stopped part way through its rebuild; the rebuild resumes where it stopped.
    RebuildResumes {
        member: String,
        slot: usize,
        done_sectors: u64,
        member_sectors: u64,
    },
    /// A stale member taken back because the array cannot start without it (`--force`); its
    /// events are raised to the array's.
    StaleTakenBack {
        member: String,
        member_events: u64,
        array_events: u64,
    },
    /// A replacement stopped part way; its copy resumes.
    ReplaceResumes {
        member: String,
        slot: usize,
        copied_sectors: u64,
    },
    /// A replacement whose slot lost its member carries on as the slot's rebuild.
    ReplacementRebuilds { member: String, slot: usize },
    /// RAID 0 over members of different sizes: only the first zone is served.
    Raid0FirstZoneOnly { served_bytes: u64 },
    /// The superblocks say dirty: the array was not stopped cleanly.
    NotStoppedCleanly,
    /// A dirty degraded parity array started anyway, and what makes that safe (or `--force`).
    DirtyDegradedStarted { by: DirtyDegradedStart },
    /// The array runs without some of its slots (missing or failed at assembly).
    RunningDegraded { missing_slots: Vec<usize> },
    /// The write journal device was not given (or is stale): assembled read-only (`--force`).
    JournalMissing,
    /// The internal write-intent bitmap was loaded.
    BitmapLoaded { bytes_per_bit: u64, bits_set: u64 },
    /// The internal bitmap is out of date: every region counts as written.
    BitmapOutOfDate {
        bitmap_events: u64,
        array_events: u64,
    },
    /// A member's bad-block log lists ranges; reads there come from redundancy.
    BadBlocksListed { member: String, ranges: usize },
    /// A resync is needed from this sector on (member or array sectors, as the resync counts).
    ResyncNeeded { from_sector: u64 },
    /// The partial parity logs were replayed after an unclean stop: entries recovered, and
    /// entries that could not be (their stripes are resynced).
    PplReplayed { recovered: usize, mismatched: usize },
    /// The partial parity log replay left every stripe consistent: no resync.
    PplMadeConsistent,
    /// Read-only after an unclean stop: the partial parity log was not replayed.
    PplNotReplayed,
    /// A member's partial parity log area could not be read.
    PplUnreadable { member: String, error: String },
    /// A member's partial parity log has no valid header.
    PplNoValidHeader { member: String },
    /// A partial parity log entry that does not fit the array was not replayed.
    PplEntryRefused {
        member: String,
        array_sector: u64,
        reason: String,
    },
    /// A logged write modified a member now missing together with other data members of
    /// the same rows: neither its old nor its new contents can be recomputed there, so the
    /// parity member's rows are recorded as bad blocks and the missing member's sectors
    /// (`array_sector`, `sectors`) read as errors, never as a mix of versions.
    PplRowsLost {
        member: String,
        missing_slot: usize,
        array_sector: u64,
        sectors: u64,
    },
    /// A data member could not be read while a log entry was replayed: it counts as missing
    /// for that entry.
    PplReplayReadFailed { member: String, error: String },
    /// Parity could not be written while the log was replayed; the member is faulty.
    PplReplayWriteFailed { member: String, error: String },
    /// An empty partial parity log could not be written; the member is faulty.
    PplResetFailed { member: String, error: String },
    /// The write journal had no chain (new, or never written): a new one starts.
    JournalStartedEmpty { member: String },
    /// The write journal holds nothing to replay.
    JournalClean { member: String },
    /// The write journal's log writes were replayed onto the members.
    JournalReplayed {
        member: String,
        log_writes: usize,
        rows_replayed: usize,
        /// Rows with data but no parity (md's data-only stripes, which its write-back mode
        /// leaves): logged anew and written to the members from the write-back cache.
        data_only_rows: usize,
    },
    /// After an unclean stop the journal's replay left every stripe consistent: no resync.
    JournalMadeConsistent { rows_replayed: usize },
}

/// What lets a dirty degraded parity array start ([`ArrayEvent::DirtyDegradedStarted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirtyDegradedStart {
    /// The partial parity log makes every stripe written at the crash consistent (as md).
    PartialParityLog,
    /// The write journal's replay makes every stripe written at the crash whole.
    WriteJournal,
    /// Nothing: the operator's `--force`.
    Force,
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
            ArrayEvent::SpareMoved { member, from } => write!(
                f,
                "{member}: spare moved here from {from} (spare group)"
            ),
            ArrayEvent::DriveHealthWarning { member, warnings } => write!(
                f,
                "{member}: drive health warning: {}; replace it before it fails",
                warnings.join("; ")
            ),
            ArrayEvent::NoSpace { detail, .. } => write!(f, "{detail}"),
            ArrayEvent::SpaceAgain => write!(
                f,
                "writes go through again: there is room on the members' filesystems"
            ),
            ArrayEvent::ResyncSkipped { missing_slots } => write!(
                f,
                "resync skipped: {missing_slots} member(s) missing, parity is their only copy (md skips it too)"
            ),
            ArrayEvent::RebuildUnreadable {
                member_sector,
                sectors,
            } => write!(
                f,
                "rebuild: {sectors} sectors near member sector {member_sector} have no readable source left (bad blocks); recorded as bad blocks on the rebuilt member"
            ),
            ArrayEvent::AssembledSpare { member } => write!(f, "{member}: spare"),
            ArrayEvent::AssembledJournal { member } => write!(f, "{member}: write journal"),
            ArrayEvent::RebuildResumes {
                member,
                slot,
                done_sectors,
                member_sectors,
            } => write!(
                f,
                "{member}: being rebuilt into slot {slot}, {done_sectors} of {member_sectors} sectors done; the rebuild resumes there"
            ),
            ArrayEvent::StaleTakenBack {
                member,
                member_events,
                array_events,
            } => write!(
                f,
                "{member}: stale (events {member_events} < {array_events}) but taken back because of --force (the array cannot start without it; its events are raised to the array's, as mdadm does)"
            ),
            ArrayEvent::ReplaceResumes {
                member,
                slot,
                copied_sectors,
            } => write!(
                f,
                "{member}: replacing slot {slot}, {copied_sectors} sectors copied; the copy resumes"
            ),
            ArrayEvent::ReplacementRebuilds { member, slot } => write!(
                f,
                "{member}: was replacing slot {slot}, whose member is gone; it continues as the slot's rebuild"
            ),
            ArrayEvent::Raid0FirstZoneOnly { served_bytes } => write!(
                f,
                "RAID 0 over members of different sizes: only the first zone ({served_bytes} bytes, where md's ORIGINAL and ALTERNATE layouts agree) is served"
            ),
            ArrayEvent::NotStoppedCleanly => {
                write!(f, "the array was not stopped cleanly (superblock dirty)")
            }
            ArrayEvent::DirtyDegradedStarted { by } => match by {
                DirtyDegradedStart::PartialParityLog => write!(
                    f,
                    "dirty and degraded, started with the partial parity log (as md does)"
                ),
                DirtyDegradedStart::WriteJournal => write!(
                    f,
                    "dirty and degraded, started with the write journal (its replay makes every stripe written at the crash whole)"
                ),
                DirtyDegradedStart::Force => {
                    write!(f, "dirty and degraded, started because of --force")
                }
            },
            ArrayEvent::RunningDegraded { missing_slots } => {
                write!(f, "running degraded: slots {missing_slots:?} missing or failed")
            }
            ArrayEvent::JournalMissing => write!(
                f,
                "the write journal is missing: assembled read-only (--force), as mdadm does; writes logged only in the journal are not on the members"
            ),
            ArrayEvent::BitmapLoaded {
                bytes_per_bit,
                bits_set,
            } => write!(
                f,
                "internal write-intent bitmap: {} KiB per bit, {bits_set} bits set",
                bytes_per_bit / 1024
            ),
            ArrayEvent::BitmapOutOfDate {
                bitmap_events,
                array_events,
            } => write!(
                f,
                "the internal bitmap is out of date (events {bitmap_events} for the array's {array_events}): every region counts as written"
            ),
            ArrayEvent::BadBlocksListed { member, ranges } => write!(
                f,
                "{member}: {ranges} bad-block ranges recorded; reads there come from redundancy"
            ),
            ArrayEvent::ResyncNeeded { from_sector } => write!(
                f,
                "a resync is needed from sector {from_sector} (parity or copies may disagree where writes were in flight at an unclean stop, or where a background initialisation has not passed yet)"
            ),
            ArrayEvent::PplReplayed {
                recovered,
                mismatched,
            } => write!(
                f,
                "partial parity log replayed: {recovered} entries recovered, {mismatched} mismatched"
            ),
            ArrayEvent::PplMadeConsistent => write!(
                f,
                "the partial parity log made every stripe written at the crash consistent; no resync is needed"
            ),
            ArrayEvent::PplNotReplayed => write!(
                f,
                "read-only: the partial parity log was not replayed; degraded reads of stripes written at the crash may be wrong"
            ),
            ArrayEvent::PplUnreadable { member, error } => write!(
                f,
                "{member}: partial parity log unreadable ({error}); its stripes are resynced"
            ),
            ArrayEvent::PplNoValidHeader { member } => {
                write!(f, "{member}: no valid partial parity log header")
            }
            ArrayEvent::PplEntryRefused {
                member,
                array_sector,
                reason,
            } => write!(
                f,
                "{member}: partial parity log entry at array sector {array_sector} refused: {reason}"
            ),
            ArrayEvent::PplRowsLost {
                member,
                missing_slot,
                array_sector,
                sectors,
            } => write!(
                f,
                "{member}: a write in flight at the crash modified missing slot {missing_slot} with other members; its {sectors} sectors from array sector {array_sector} cannot be recomputed and now read as errors (bad blocks on the parity member)"
            ),
            ArrayEvent::PplReplayReadFailed { member, error } => write!(
                f,
                "{member}: unreadable while replaying the partial parity log ({error}); its rows of the entry are treated as missing"
            ),
            ArrayEvent::PplReplayWriteFailed { member, error } => write!(
                f,
                "{member}: writing parity while replaying the partial parity log failed ({error}); marked faulty"
            ),
            ArrayEvent::PplResetFailed { member, error } => write!(
                f,
                "{member}: writing an empty partial parity log failed ({error}); marked faulty"
            ),
            ArrayEvent::JournalStartedEmpty { member } => {
                write!(f, "{member}: write journal started empty")
            }
            ArrayEvent::JournalClean { member } => write!(f, "{member}: write journal clean"),
            ArrayEvent::JournalReplayed {
                member,
                log_writes,
                rows_replayed,
                data_only_rows,
            } => {
                write!(
                    f,
                    "{member}: write journal held {log_writes} log writes; {rows_replayed} stripe rows replayed onto the members"
                )?;
                if *data_only_rows > 0 {
                    write!(
                        f,
                        "; {data_only_rows} rows of cached writes (data without parity) taken into the write-back cache"
                    )?;
                }
                Ok(())
            }
            ArrayEvent::JournalMadeConsistent { rows_replayed } => write!(
                f,
                "the write journal made every stripe written at the crash consistent ({rows_replayed} stripe rows replayed); no resync is needed"
            ),
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

    /// The kept events, oldest first.
    pub(crate) fn kept(&self) -> Vec<ArrayEvent> {
        self.ring.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(i: usize) -> ArrayEvent {
        ArrayEvent::ResyncSkipped { missing_slots: i }
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
        assert_eq!(log.kept().len(), EVENTS_KEPT);
        assert_eq!(log.kept()[0], note(10));
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

    #[test]
    fn events_read_back_from_their_json() {
        let events = vec![
            ArrayEvent::PplReplayed {
                recovered: 3,
                mismatched: 0,
            },
            ArrayEvent::NotStoppedCleanly,
            ArrayEvent::DirtyDegradedStarted {
                by: DirtyDegradedStart::WriteJournal,
            },
            ArrayEvent::JournalReplayed {
                member: "j.img".into(),
                log_writes: 2,
                rows_replayed: 5,
                data_only_rows: 0,
            },
            ArrayEvent::TaskStarted {
                task: TaskKind::Resync,
            },
        ];
        let text = serde_json::to_string(&events).unwrap();
        let back: Vec<ArrayEvent> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, events);
        let v = serde_json::to_value(&events[2]).unwrap();
        assert_eq!(v["event"], "dirty-degraded-started");
        assert_eq!(v["by"], "write-journal");
        assert_eq!(
            events[3].to_string(),
            "j.img: write journal held 2 log writes; 5 stripe rows replayed onto the members"
        );
    }
}
