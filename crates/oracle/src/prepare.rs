//! The raidkit side of the raidkit -> md direction: create, write, (fail) and stop an array on
//! member image files with raidkit-engine, the way the `raidkit` CLI does (`create`, `write`,
//! `fail`, each ending in a clean stop), and record what md must find there.
//!
//! The expected data is computed from the pattern writes alone ([`expected_contents`]), never
//! read back through raidkit, so a raidkit bug cannot make its own expectation. raidkit's read
//! of the whole array is recorded beside it (`readback_sha256`) to tell "raidkit wrote the wrong
//! bytes" from "md reads raidkit's bytes differently". The examine report is raidkit-metadata's
//! ([`ExamineReport`], what `raidkit examine` prints), taken from the members after the last
//! stop, before md sees them.
//!
//! Scenarios after the writes (each ends in a clean stop, as the CLI's commands do):
//! - failed members (`fail=`): assemble, fail them, stop; with a bitmap, raidkit then writes
//!   while degraded, so the bitmap keeps those bits set (recorded: raidkit's own count and the
//!   bits read back from every member);
//! - rebuild (`rebuild=P`): after failing, add one spare per failed member, run the rebuild
//!   with every step recording its cursor, stop it once it passed P percent and stop the
//!   array: the spares keep md's recovery_offset, which is recorded for md to resume from.
//!
//! With a write journal (`journal`), the journal device is the last image, given last to
//! `Array::create_with_policy` (as `raidkit create --write-journal` does). `journal=crash`:
//! after the writes and a flush the members start dropping every write ([`DropWrites`]),
//! raidkit makes the journal-only writes and the array is dropped without a stop. raidkit's
//! own read-back then assembles copies of the images read-write, so that its journal replay
//! runs (a read-only assembly replays nothing), and records what the replay reported.
//! `journal=wb-crash`: the same, the journal-only writes made under `WritePolicy::Back` (each
//! returns once its pages are logged as data alone; nothing reaches the members before a
//! write-back, and destaging is never started), and the journal too drops every write once
//! they returned, so nothing after them (a write-back's parity) reaches the log: the log ends
//! with data-only rows, as md's write-back mode leaves it at a crash.
//!
//! UUIDs are derived from the array name, so a run is reproducible apart from the times.

use crate::crash::DropWrites;
use crate::matrix::{JournalMode, MetadataVersion, PplMode};
use crate::pattern::{expected_contents, fill, PatternWrite};
use crate::plan::{PlannedArray, PlannedMember, PlannedWrite};
use raidkit_disk::{DirectIo, Disk, FileDisk, OpenOptions};
use raidkit_engine::{
    Array, ArrayEvent, AssembleOptions, ConsistencyPolicy, CreateOptions, DirtyDegradedStart,
    EngineConfig, EngineError, GrowSize, ReshapeControl, ReshapeTarget, TaskKind, TaskOutcome,
    WritePolicy,
};
use raidkit_layout::{Raid0Layout, Raid10Layout, Raid5Algorithm, Raid6Algorithm};
use raidkit_metadata::{BitmapBits, BitmapSuper, ExamineReport, SuperblockVersion};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes per raidkit write call when filling (the CLI's `write` uses 4 MiB).
const WRITE_STEP_BYTES: usize = 1 << 20;

/// What raidkit wrote, as md must find it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaidkitExpectation {
    /// raidkit's array size.
    pub array_bytes: u64,
    /// sha256 of the data the pattern writes leave (computed, not read).
    pub sha256: String,
    /// sha256 of the whole array as raidkit itself reads it back after the last stop.
    pub readback_sha256: String,
    pub level: i32,
    pub layout: u32,
    pub chunk_sectors: u64,
    pub raid_disks: usize,
    /// Sectors of each member used for data (md's component size).
    pub member_data_sectors: u64,
    /// The writes raidkit made, resolved to lengths.
    pub writes: Vec<(u64, u64, u64)>,
    /// raidkit's examine report of each member by serial: (field, value) in mdadm's order.
    pub examine: BTreeMap<String, Vec<(String, String)>>,
    /// Rebuild rows: where raidkit stopped the rebuild.
    #[serde(default)]
    pub recovery: Option<RecoveryExpectation>,
    /// Bitmap rows: each member's internal bitmap as raidkit left it, read back from the
    /// member, by serial.
    #[serde(default)]
    pub bitmap: BTreeMap<String, BitmapExpectation>,
    /// Bitmap rows: `Array::bitmap_dirty_bits` just before the last stop.
    #[serde(default)]
    pub bitmap_dirty_bits: Option<u64>,
    /// Journal rows: raidkit's consistency policy and the role it gives the journal device
    /// (`Status`), and what its own assembly said about the journal (for `journal=crash`, the
    /// replay of the copies its read-back assembled).
    #[serde(default)]
    pub journal: Option<JournalExpectation>,
    /// Partial parity log rows: raidkit's consistency policy while the array ran, and what
    /// its own assembly said about the log (for `ppl=crash`, the replay of the copies its
    /// read-back assembled).
    #[serde(default)]
    pub ppl: Option<PplExpectation>,
    /// Reshape rows: the array sector where raidkit stopped its reshape, recorded for md to go
    /// on from.
    #[serde(default)]
    pub reshape_position_sectors: Option<u64>,
    /// Reshape rows: the array's size before the reshape (bytes); past it is the new room.
    #[serde(default)]
    pub reshape_old_array_bytes: Option<u64>,
}

/// What raidkit says about its own partial parity log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PplExpectation {
    /// `Status::consistency_policy` while the array ran ("ppl").
    pub policy: String,
    /// What raidkit's assembly said about the log at its read-back ([`is_ppl_event`]).
    pub events: Vec<ArrayEvent>,
    /// `ppl=crash`: the write whose parity was left stale (array byte offset, length) and the
    /// slot holding that stripe's parity and log.
    #[serde(default)]
    pub stale_parity: Option<(u64, u64, usize)>,
}

/// Whether an assembly event is about the partial parity log.
pub fn is_ppl_event(e: &ArrayEvent) -> bool {
    matches!(
        e,
        ArrayEvent::PplReplayed { .. }
            | ArrayEvent::PplMadeConsistent
            | ArrayEvent::PplNotReplayed
            | ArrayEvent::PplUnreadable { .. }
            | ArrayEvent::PplNoValidHeader { .. }
            | ArrayEvent::PplEntryRefused { .. }
            | ArrayEvent::PplRowsLost { .. }
            | ArrayEvent::PplReplayReadFailed { .. }
            | ArrayEvent::PplReplayWriteFailed { .. }
            | ArrayEvent::PplResetFailed { .. }
            | ArrayEvent::DirtyDegradedStarted {
                by: DirtyDegradedStart::PartialParityLog
            }
    )
}

/// Whether an assembly event is about the write journal.
pub fn is_journal_event(e: &ArrayEvent) -> bool {
    matches!(
        e,
        ArrayEvent::AssembledJournal { .. }
            | ArrayEvent::JournalMissing
            | ArrayEvent::JournalStartedEmpty { .. }
            | ArrayEvent::JournalClean { .. }
            | ArrayEvent::JournalReplayed { .. }
            | ArrayEvent::JournalMadeConsistent { .. }
            | ArrayEvent::DirtyDegradedStarted {
                by: DirtyDegradedStart::WriteJournal
            }
    )
}

/// raidkit's partial parity log replay in its assembly events: the event, entries recovered
/// and entries mismatched; `None` when the log was not replayed.
pub fn ppl_replayed(events: &[ArrayEvent]) -> Option<(&ArrayEvent, usize, usize)> {
    events.iter().find_map(|e| match e {
        ArrayEvent::PplReplayed {
            recovered,
            mismatched,
        } => Some((e, *recovered, *mismatched)),
        _ => None,
    })
}

/// The stripe rows raidkit's replay of its write journal wrote back, from its assembly events;
/// `None` when the journal was clean or started empty.
pub fn journal_rows_replayed(events: &[ArrayEvent]) -> Option<usize> {
    events.iter().find_map(|e| match e {
        ArrayEvent::JournalReplayed { rows_replayed, .. } => Some(*rows_replayed),
        _ => None,
    })
}

/// The rows raidkit's replay of its write journal found logged as data alone (md's data-only
/// stripes, which write-back mode leaves), from its assembly events; `None` when the journal
/// was clean or started empty.
pub fn journal_data_only_rows(events: &[ArrayEvent]) -> Option<usize> {
    events.iter().find_map(|e| match e {
        ArrayEvent::JournalReplayed { data_only_rows, .. } => Some(*data_only_rows),
        _ => None,
    })
}

/// Events as their sentences, for messages.
pub fn sentences(events: &[ArrayEvent]) -> Vec<String> {
    events.iter().map(ToString::to_string).collect()
}

/// What raidkit says about its own write journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalExpectation {
    /// `Status::consistency_policy` while the array ran ("journal").
    pub policy: String,
    /// `MemberStatus::role` of the journal device ("journal").
    pub role: String,
    /// What raidkit's assembly said about the journal at its read-back
    /// ([`is_journal_event`]).
    pub events: Vec<ArrayEvent>,
    /// `journal=crash`: sha256 of the array as the members alone hold it (a read-only
    /// assembly, which replays nothing; `journal=wb-crash`: one without the journal, whose
    /// cache would serve the data-only rows): the data before the journal-only writes.
    #[serde(default)]
    pub members_sha256: Option<String>,
}

/// A rebuild raidkit stopped part way.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecoveryExpectation {
    /// Serials of the spares being rebuilt, in slot order.
    pub spares: Vec<String>,
    /// The slots they rebuild.
    pub slots: Vec<usize>,
    /// md's recovery_offset in each spare's superblock (member data sectors), by serial.
    pub offset_sectors: BTreeMap<String, u64>,
    /// The end of the rebuild (member data sectors).
    pub end_sectors: u64,
    /// Percent done when raidkit's rebuild stopped.
    pub percent: f64,
}

impl Eq for RecoveryExpectation {}

/// One member's internal bitmap as read from its bytes after raidkit stopped the array.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BitmapExpectation {
    pub chunk_bytes: u64,
    pub events: u64,
    pub events_cleared: u64,
    pub sync_size_sectors: u64,
    pub bits: u64,
    pub dirty: u64,
    /// The array superblock's events on the same member.
    pub superblock_events: u64,
}

impl RaidkitExpectation {
    pub fn pattern_writes(&self) -> Vec<PatternWrite> {
        self.writes
            .iter()
            .map(|&(seed, offset_bytes, len_bytes)| PatternWrite {
                seed,
                offset_bytes,
                len_bytes,
            })
            .collect()
    }
}

/// Why raidkit could not prepare an array (a raidkit refusal is a finding in its own right).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareError {
    pub step: &'static str,
    pub detail: String,
}

impl fmt::Display for PrepareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raidkit {}: {}", self.step, self.detail)
    }
}

impl std::error::Error for PrepareError {}

fn err(step: &'static str) -> impl Fn(String) -> PrepareError {
    move |detail| PrepareError { step, detail }
}

/// md's layout number for a matrix layout name at `level` (`None`: raidkit's default).
pub fn layout_number(level: u32, name: Option<&str>) -> Result<Option<u32>, PrepareError> {
    let Some(name) = name else {
        return Ok(None);
    };
    let e = |x: String| PrepareError {
        step: "layout",
        detail: format!("{name} for raid{level}: {x}"),
    };
    let n = match level {
        0 => name
            .parse::<Raid0Layout>()
            .map(Raid0Layout::md_layout)
            .map_err(|x| e(x.to_string()))?,
        5 => name
            .parse::<Raid5Algorithm>()
            .map(Raid5Algorithm::md_layout)
            .map_err(|x| e(x.to_string()))?,
        6 => name
            .parse::<Raid6Algorithm>()
            .map(Raid6Algorithm::md_layout)
            .map_err(|x| e(x.to_string()))?,
        10 => name
            .parse::<Raid10Layout>()
            .map(Raid10Layout::md_layout)
            .map_err(|x| e(x.to_string()))?,
        _ => return Err(e("this level has no layouts".into())),
    };
    Ok(Some(n))
}

fn uuid_from(name: &str, what: &str) -> [u8; 16] {
    let d = Sha256::digest(format!("raidkit-oracle {name} {what}").as_bytes());
    let mut u = [0u8; 16];
    u.copy_from_slice(&d[..16]);
    u
}

fn superblock_version(text: &str) -> Result<SuperblockVersion, PrepareError> {
    match MetadataVersion::parse(text) {
        Some(MetadataVersion::V1_0) => Ok(SuperblockVersion::V1_0),
        Some(MetadataVersion::V1_1) => Ok(SuperblockVersion::V1_1),
        Some(MetadataVersion::V1_2) => Ok(SuperblockVersion::V1_2),
        None => Err(err("metadata")(format!("unknown version {text}"))),
    }
}

pub(crate) fn open_members(
    members: &[PlannedMember],
    read_only: bool,
) -> Result<Vec<Box<dyn Disk>>, PrepareError> {
    members
        .iter()
        .map(|m| {
            FileDisk::open(
                &m.image,
                OpenOptions {
                    read_only,
                    direct: DirectIo::Never,
                    map_memory: false,
                    ..Default::default()
                },
            )
            .map(|d| Box::new(d) as Box<dyn Disk>)
            .map_err(|e| err("open")(e.to_string()))
        })
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `(field, value)` pairs of an examine text ("  Field : value" lines; blank fields skipped).
pub fn examine_pairs(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(" : "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// Engine settings for a rebuild the oracle stops part way: small steps (64 KiB per member),
/// so a rebuild of a few MiB passes many checkpoints and stops close to the row's percentage.
fn rebuild_config(raid_devices: usize) -> EngineConfig {
    EngineConfig {
        stripe_cache_bytes: (64 << 10) * (raid_devices + 2),
        ..EngineConfig::default()
    }
}

fn write_pattern(
    array: &Array,
    w: &PlannedWrite,
    writes: &mut Vec<(u64, u64, u64)>,
) -> Result<(), PrepareError> {
    let size = array.size_bytes();
    let len = w
        .len_bytes
        .unwrap_or(size.saturating_sub(w.offset_bytes))
        .min(size.saturating_sub(w.offset_bytes));
    let mut done = 0u64;
    let mut buf = vec![0u8; WRITE_STEP_BYTES];
    while done < len {
        let k = ((len - done) as usize).min(WRITE_STEP_BYTES);
        let off = w.offset_bytes + done;
        fill(w.seed, off, &mut buf[..k]);
        array
            .write_at(&buf[..k], off, false)
            .map_err(|e| err("write")(format!("{k} bytes at {off}: {e}")))?;
        done += k as u64;
    }
    writes.push((w.seed, w.offset_bytes, len));
    Ok(())
}

/// Writes raidkit makes while members are failed (bitmap rows with `fail=`): the first
/// sectors, an unaligned piece in the middle and one just before the end, so several bitmap
/// chunks far apart stay dirty.
pub fn degraded_writes(array_bytes: u64) -> Vec<PlannedWrite> {
    let mid = array_bytes / 2 / 4096 * 4096 + 1000;
    vec![
        PlannedWrite {
            seed: 5,
            offset_bytes: 0,
            len_bytes: Some(8192),
            journal_only: false,
        },
        PlannedWrite {
            seed: 6,
            offset_bytes: mid,
            len_bytes: Some(5000),
            journal_only: false,
        },
        PlannedWrite {
            seed: 7,
            offset_bytes: array_bytes.saturating_sub(5000),
            len_bytes: Some(4096),
            journal_only: false,
        },
    ]
}

/// Create, write, optionally fail members (then write degraded, or rebuild part way), stop;
/// then read back and examine.
pub fn prepare_array(a: &PlannedArray) -> Result<RaidkitExpectation, PrepareError> {
    if let Some(spans) = a.spans {
        return prepare_stack(a, spans);
    }
    let level = a.level as i32;
    let layout = layout_number(a.level, a.layout.as_deref())?;
    let metadata = superblock_version(&a.metadata)?;
    // mdadm's default chunk (512K) when the row gives none.
    let chunk_sectors = a.chunk_kib.map_or(1024, |k| (k * 2) as u32);
    let n = a.raid_devices();
    let mut disks: Vec<Box<dyn Disk>> = Vec::new();
    for m in &a.members {
        let _ = std::fs::remove_file(&m.image);
    }
    let crash = a.journal.is_some_and(JournalMode::crashes);
    let write_back = a.journal.is_some_and(JournalMode::write_back);
    // Set once the members must drop every write (journal=crash, journal=wb-crash).
    let armed = Arc::new(AtomicBool::new(false));
    // Set once the journal must drop every write too (journal=wb-crash).
    let journal_armed = Arc::new(AtomicBool::new(false));
    for m in &a.members[..n] {
        let d =
            FileDisk::create(&m.image, m.size_bytes).map_err(|e| err("create")(e.to_string()))?;
        if crash {
            disks.push(Box::new(DropWrites::new(Box::new(d), armed.clone())));
        } else {
            disks.push(Box::new(d));
        }
    }
    if let Some(j) = a.journal_member() {
        // The journal goes last, after the members (and never drops a write).
        let d =
            FileDisk::create(&j.image, j.size_bytes).map_err(|e| err("create")(e.to_string()))?;
        if write_back {
            disks.push(Box::new(DropWrites::new(
                Box::new(d),
                journal_armed.clone(),
            )));
        } else {
            disks.push(Box::new(d));
        }
    }
    let created_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let consistency = match (a.bitmap_chunk_bytes, a.journal, a.ppl) {
        (Some(chunk_bytes), _, _) => ConsistencyPolicy::Bitmap { chunk_bytes },
        (None, Some(_), _) => ConsistencyPolicy::Journal,
        (None, None, Some(_)) => ConsistencyPolicy::Ppl,
        (None, None, None) => ConsistencyPolicy::Resync,
    };
    let device_count = disks.len();
    let array = Array::create_with_policy(
        disks,
        CreateOptions {
            level,
            layout,
            chunk_sectors,
            raid_devices: n,
            metadata,
            size_sectors: a.size_bytes.map(|b| b / 512),
            name: a.name.clone(),
            set_uuid: uuid_from(&a.name, "array"),
            device_uuids: (0..device_count)
                .map(|i| {
                    if i < n {
                        uuid_from(&a.name, &format!("member {i}"))
                    } else {
                        uuid_from(&a.name, "journal")
                    }
                })
                .collect(),
            ctime_seconds: created_at,
            // Fresh sparse image files read as zeroes; `init=background` rows are recorded
            // not in sync all the same (md's initial resync).
            init: if a.init_background {
                raidkit_engine::Init::Background
            } else {
                raidkit_engine::Init::Zeroed
            },
            consistency,
            config: EngineConfig::default(),
        },
        consistency,
    )
    .map_err(|e| err("create")(e.to_string()))?;
    let mut size = array.size_bytes();
    let mut writes = Vec::new();
    for w in a.writes.iter().filter(|w| !w.journal_only) {
        write_pattern(&array, w, &mut writes)?;
    }
    let mut bitmap_dirty_bits = None;
    let mut stale_parity = None;
    let status = if crash {
        // The crash: flush, then the members drop every write; the journal-only writes reach
        // the journal alone, and the array goes without a stop.
        array.flush().map_err(|e| err("flush")(e.to_string()))?;
        if write_back {
            // md's write-back mode: each write returns once its pages are logged as data
            // alone and stays cached (no destaging started).
            array
                .set_write_policy(WritePolicy::Back)
                .map_err(|e| err("write-back")(e.to_string()))?;
        }
        armed.store(true, Ordering::SeqCst);
        for w in a.writes.iter().filter(|w| w.journal_only) {
            write_pattern(&array, w, &mut writes)?;
        }
        // The crash comes right after the last write returned: under write-back the journal
        // keeps nothing more either (a write-back would log the rows' parity first).
        journal_armed.store(true, Ordering::SeqCst);
        let status = array.status();
        drop(array);
        status
    } else if a.ppl == Some(PplMode::Crash) {
        let status = array.status();
        stale_parity = Some(crash_before_parity(a, array, &mut writes)?);
        status
    } else {
        array.stop().map_err(|e| err("stop")(e.to_string()))?;
        let status = array.status();
        // Releases the members' claims: they are opened again below.
        drop(array);
        status
    };
    if a.init_background {
        // What md is to finish: the superblocks record the initial resync from its start;
        // with the partial parity log, from past its first step, which create did (so that
        // a crash cannot pass for a clean replay from 0), and short of the end.
        for disk in open_members(&a.members[..n], true)? {
            let found = raidkit_engine::read_superblock(disk.as_ref())
                .map_err(|e| err("init")(e.to_string()))?;
            let at = found.sb.resync_offset_sectors;
            let right = if a.ppl.is_some() {
                at > 0 && !found.sb.is_clean()
            } else {
                at == 0
            };
            if !right {
                return Err(err("init")(format!(
                    "{}: resync_offset {at} after a background initialisation that never ran, want {}",
                    disk.name(),
                    if a.ppl.is_some() { "past 0 and not clean" } else { "0" }
                )));
            }
        }
    }
    let journal_status = a.journal.map(|_| {
        let role = status
            .members
            .iter()
            .find(|m| m.index == n)
            .map_or_else(|| "(none)".to_string(), |m| m.role.clone());
        (status.consistency_policy.name().to_string(), role)
    });
    let mut recovery = None;
    if !a.fail_members.is_empty() {
        // As `raidkit fail` (then `raidkit add` and a rebuild): assemble, mark the members
        // faulty, ..., stop cleanly.
        let config = if a.rebuild_percent.is_some() {
            rebuild_config(n)
        } else {
            EngineConfig::default()
        };
        let (array, _) = Array::assemble(
            open_members(&a.members[..n], false)?,
            AssembleOptions {
                config,
                ..AssembleOptions::default()
            },
        )
        .map_err(|e| err("assemble for fail")(e.to_string()))?;
        for &index in &a.fail_members {
            array
                .fail_member(index)
                .map_err(|e| err("fail")(format!("member {index}: {e}")))?;
        }
        if a.bitmap_chunk_bytes.is_some() && a.rebuild_percent.is_none() {
            for w in degraded_writes(size) {
                write_pattern(&array, &w, &mut writes)?;
            }
        }
        if let Some(percent) = a.rebuild_percent {
            recovery = Some(rebuild_part_way(a, &array, percent)?);
        }
        bitmap_dirty_bits = array.bitmap_dirty_bits();
        array
            .stop()
            .map_err(|e| err("stop after fail")(e.to_string()))?;
    }
    let mut status = status;
    if let Some(slots) = a.mirrors {
        status = grow_mirrors(a, slots)?;
    }
    if let Some(to) = a.takeover {
        status = take_over(a, to)?;
    }
    let mut reshape_position_sectors = None;
    let mut reshape_old_array_bytes = None;
    // Reshape rows: the geometry md must end with (level, layout, chunk, members).
    let mut reshaped = None;
    if let Some(r) = &a.reshape {
        // As `raidkit add` of a spare per new member, then `raidkit grow [--raid-devices N]
        // [--level L] [--layout NAME] [--chunk SIZE] --pause-at PERCENT%`: md finishes it.
        if r.devices > n {
            add_spares(a)?;
        }
        let new_level = r.level.unwrap_or(a.level);
        let target = ReshapeTarget {
            raid_devices: Some(r.devices),
            level: r.level.map(|l| l as i32),
            layout: layout_number(new_level, r.layout.as_deref())?,
            chunk_sectors: r.chunk_kib.map(|k| k * 2),
            // Fewer members: `raidkit grow --array-size` the new size.
            array_sectors: a.shrunk_array_kib().map(|k| k * 2),
        };
        // A shrink runs from the new end down, over the new size.
        let covered = a.shrunk_array_kib().map_or(size, |k| k * 1024);
        let never = AtomicBool::new(false);
        let ctl = ReshapeControl {
            progress: &|_, _| {},
            stop: &never,
            pause_at_bytes: Some(covered / 100 * r.percent as u64),
        };
        let report = Array::reshape(
            open_members(&a.members, false)?,
            &target,
            &AssembleOptions::default(),
            &ctl,
        )
        .map_err(|e| err("reshape")(e.to_string()))?;
        if report.finished || report.new_members.len() != r.devices.saturating_sub(n) {
            return Err(err("reshape")(format!(
                "finished {}, new members {:?}",
                report.finished, report.new_members
            )));
        }
        size = report.new_array_bytes;
        reshape_position_sectors = Some(report.position_sectors);
        reshape_old_array_bytes = Some(report.old_array_bytes);
        reshaped = Some((
            report.new_level,
            report.new_layout,
            report.new_chunk_sectors,
            report.new_raid_devices,
        ));
    }
    let mut member_data_sectors = status.member_data_sectors;
    if let Some(more) = a.grow_bytes {
        // As `raidkit grow --size max` after the members' devices grew.
        for m in &a.members[..n] {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&m.image)
                .and_then(|f| f.set_len(m.size_bytes + more))
                .map_err(|e| err("grow")(format!("{}: {e}", m.image.display())))?;
        }
        let report = Array::grow_size(
            open_members(&a.members[..n], false)?,
            GrowSize::Max,
            &AssembleOptions::default(),
            &|_, _| {},
        )
        .map_err(|e| err("grow")(e.to_string()))?;
        size = report.new_array_bytes;
        member_data_sectors = report.new_member_sectors;
    }
    let pattern: Vec<PatternWrite> = writes
        .iter()
        .map(|&(seed, offset_bytes, len_bytes)| PatternWrite {
            seed,
            offset_bytes,
            len_bytes,
        })
        .collect();
    let size_usize =
        usize::try_from(size).map_err(|_| err("size")(format!("{size} bytes do not fit")))?;
    let sha256 = hex(&Sha256::digest(expected_contents(size_usize, &pattern)));
    let ppl_crash = a.ppl == Some(PplMode::Crash);
    let members_sha256 = if write_back {
        // A read-only assembly with the journal replays nothing but serves the data-only
        // rows it finds from its cache: the members alone are read without the journal.
        Some(members_alone_sha256(a)?)
    } else if crash {
        Some(readback(a, false)?.0)
    } else {
        None
    };
    let (readback_sha256, readback_events) = readback(a, crash || ppl_crash)?;
    let ppl = a.ppl.map(|_| PplExpectation {
        policy: status.consistency_policy.name().to_string(),
        events: readback_events
            .iter()
            .filter(|e| is_ppl_event(e))
            .cloned()
            .collect(),
        stale_parity,
    });
    let journal = journal_status.map(|(policy, role)| JournalExpectation {
        policy,
        role,
        members_sha256,
        events: readback_events
            .into_iter()
            .filter(is_journal_event)
            .collect(),
    });
    let mut examine = BTreeMap::new();
    let mut bitmap = BTreeMap::new();
    for (m, disk) in a.members.iter().zip(open_members(&a.members, true)?) {
        let found = raidkit_engine::read_superblock(disk.as_ref())
            .map_err(|e| err("examine")(format!("{}: {e}", m.serial)))?;
        let bsb = match found.sb.bitmap_offset() {
            Some(_) if a.bitmap_chunk_bytes.is_some() => {
                let (bsb, expect) = read_bitmap(disk.as_ref(), &found.sb)
                    .map_err(|e| err("bitmap")(format!("{}: {e}", m.serial)))?;
                bitmap.insert(m.serial.clone(), expect);
                Some(bsb)
            }
            _ => None,
        };
        let report =
            ExamineReport::from_superblock(&found.sb, Some(found.device_sectors), bsb.as_ref());
        examine.insert(m.serial.clone(), examine_pairs(&report.to_text()));
    }
    if let Some(r) = &mut recovery {
        for serial in &r.spares {
            let offset = examine
                .get(serial)
                .and_then(|p| p.iter().find(|(k, _)| k == "Recovery Offset"))
                .and_then(|(_, v)| v.split_whitespace().next()?.parse::<u64>().ok())
                .ok_or_else(|| {
                    err("rebuild")(format!(
                        "spare {serial} has no recovery offset after the rebuild stopped at {:.1} %",
                        r.percent
                    ))
                })?;
            r.offset_sectors.insert(serial.clone(), offset);
        }
    }
    Ok(RaidkitExpectation {
        array_bytes: size,
        sha256,
        readback_sha256,
        level: reshaped.map_or(status.level, |r| r.0),
        layout: reshaped.map_or(status.layout, |r| r.1),
        chunk_sectors: reshaped.map_or(status.chunk_sectors, |r| r.2),
        raid_disks: reshaped.map_or(status.raid_disks, |r| r.3),
        member_data_sectors,
        writes,
        examine,
        recovery,
        bitmap,
        bitmap_dirty_bits,
        journal,
        ppl,
        reshape_position_sectors,
        reshape_old_array_bytes,
    })
}

/// A RAID 50/60 stack (`spans=N`), as `raidkit create --level 50|60 --spans N` makes it:
/// `spans` RAID 5/6 arrays on runs of the members and a RAID 0 over them with the same chunk
/// (`Array::create_stack`), written with the pattern and stopped cleanly. The expectation's
/// level, layout and raid disks are the spans'; its examine report is the span members'.
fn prepare_stack(a: &PlannedArray, spans: usize) -> Result<RaidkitExpectation, PrepareError> {
    let layout = layout_number(a.level, a.layout.as_deref())?;
    let metadata = superblock_version(&a.metadata)?;
    let chunk_sectors = a.chunk_kib.map_or(1024, |k| (k * 2) as u32);
    let n = a.members.len();
    let mut disks: Vec<Box<dyn Disk>> = Vec::new();
    for m in &a.members {
        let _ = std::fs::remove_file(&m.image);
        disks.push(Box::new(
            FileDisk::create(&m.image, m.size_bytes).map_err(|e| err("create")(e.to_string()))?,
        ));
    }
    let created_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let array = Array::create_stack(
        disks,
        CreateOptions {
            level: a.level as i32 * 10,
            layout,
            chunk_sectors,
            raid_devices: n,
            metadata,
            size_sectors: None,
            name: a.name.clone(),
            set_uuid: uuid_from(&a.name, "array"),
            device_uuids: (0..n)
                .map(|i| uuid_from(&a.name, &format!("member {i}")))
                .collect(),
            ctime_seconds: created_at,
            init: raidkit_engine::Init::Zeroed,
            consistency: ConsistencyPolicy::Resync,
            config: EngineConfig::default(),
        },
        raidkit_engine::StackOptions {
            spans,
            span_set_uuids: (0..spans)
                .map(|i| uuid_from(&a.name, &format!("span {i}")))
                .collect(),
            span_device_uuids: (0..spans)
                .map(|i| uuid_from(&a.name, &format!("span member {i}")))
                .collect(),
        },
        &|_, _| {},
    )
    .map_err(|e| err("create")(e.to_string()))?;
    let size = array.size_bytes();
    let mut writes = Vec::new();
    for w in &a.writes {
        write_pattern(&array, w, &mut writes)?;
    }
    array.stop().map_err(|e| err("stop")(e.to_string()))?;
    let span = array.spans()[0].status();
    drop(array);
    let pattern: Vec<PatternWrite> = writes
        .iter()
        .map(|&(seed, offset_bytes, len_bytes)| PatternWrite {
            seed,
            offset_bytes,
            len_bytes,
        })
        .collect();
    let size_usize =
        usize::try_from(size).map_err(|_| err("size")(format!("{size} bytes do not fit")))?;
    let sha256 = hex(&Sha256::digest(expected_contents(size_usize, &pattern)));
    let readback_sha256 = readback_sha256(a)?;
    let mut examine = BTreeMap::new();
    for (m, disk) in a.members.iter().zip(open_members(&a.members, true)?) {
        let found = raidkit_engine::read_superblock(disk.as_ref())
            .map_err(|e| err("examine")(format!("{}: {e}", m.serial)))?;
        let report = ExamineReport::from_superblock(&found.sb, Some(found.device_sectors), None);
        examine.insert(m.serial.clone(), examine_pairs(&report.to_text()));
    }
    Ok(RaidkitExpectation {
        array_bytes: size,
        sha256,
        readback_sha256,
        level: span.level,
        layout: span.layout,
        chunk_sectors: span.chunk_sectors,
        raid_disks: span.raid_disks,
        member_data_sectors: span.member_data_sectors,
        writes,
        examine,
        recovery: None,
        bitmap: BTreeMap::new(),
        bitmap_dirty_bits: None,
        journal: None,
        ppl: None,
        reshape_position_sectors: None,
        reshape_old_array_bytes: None,
    })
}

/// `ppl=crash`: one more write, inside one data chunk of the array's second stripe (its first
/// when it has one), as a power failure leaves it when the log entry and the data reached the
/// members but the new parity did not. raidkit makes the write (logging it first), the array
/// is dropped without a stop (dirty, the log in place), and the parity rows of that stripe are
/// put back as they were before the write. md, assembling the dirty array, must replay the log
/// (parity = partial parity XOR the data now there), or its check finds the stripe
/// inconsistent. Returns the write (offset, length) and the parity slot.
fn crash_before_parity(
    a: &PlannedArray,
    array: Array,
    writes: &mut Vec<(u64, u64, u64)>,
) -> Result<(u64, u64, usize), PrepareError> {
    use std::os::unix::fs::FileExt;
    array.flush().map_err(|e| err("flush")(e.to_string()))?;
    let geo = array.geometry().clone();
    let chunk_bytes = geo.chunk_sectors * 512;
    let stripe_data_bytes = chunk_bytes * geo.data_disks() as u64;
    let stripe = u64::from(array.size_bytes() >= 2 * stripe_data_bytes);
    let info = geo.stripe(stripe);
    let slot = info.p_member;
    let data_offset = array
        .status()
        .members
        .iter()
        .find(|m| m.slot == Some(slot))
        .map(|m| m.data_offset_sectors)
        .ok_or_else(|| err("ppl crash")(format!("no member in slot {slot}")))?;
    let parity_at = (data_offset + info.member_sector_start) * 512;
    let open_slot = |slot: usize, write: bool| {
        let image = &a.members[slot].image;
        std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(image)
            .map_err(|e| err("ppl crash")(format!("{}: {e}", image.display())))
    };
    let open = |write: bool| open_slot(slot, write);
    let mut old_parity = vec![0u8; chunk_bytes as usize];
    open(false)?
        .read_exact_at(&mut old_parity, parity_at)
        .map_err(|e| err("ppl crash")(format!("read parity: {e}")))?;
    // Two whole stripes with one parity member (another than the last write's): raidkit logs
    // the second after the first in that member's log area, naming both (md's chain of logs),
    // without a flush between. The second's parity is put back too, so md must find the newest
    // log of the chain, past the start of the area, to make that stripe whole again.
    let stripes = array.size_bytes() / stripe_data_bytes;
    let chain = (stripe + 1..stripes)
        .filter(|&s| geo.stripe(s).p_member != slot)
        .find_map(|s| {
            let p = geo.stripe(s).p_member;
            (s + 1..stripes)
                .find(|&t| geo.stripe(t).p_member == p)
                .map(|t| (s, t, p))
        });
    let mut chained_parity = None;
    if let Some((first, second, p)) = chain {
        let at = (array
            .status()
            .members
            .iter()
            .find(|m| m.slot == Some(p))
            .map(|m| m.data_offset_sectors)
            .ok_or_else(|| err("ppl crash")(format!("no member in slot {p}")))?
            + geo.stripe(second).member_sector_start)
            * 512;
        let mut before = vec![0u8; chunk_bytes as usize];
        open_slot(p, false)?
            .read_exact_at(&mut before, at)
            .map_err(|e| err("ppl crash")(format!("read parity: {e}")))?;
        for (seed, s) in [(62, first), (63, second)] {
            let w = PlannedWrite {
                seed,
                offset_bytes: s * stripe_data_bytes,
                len_bytes: Some(stripe_data_bytes),
                journal_only: false,
            };
            write_pattern(&array, &w, writes)?;
        }
        chained_parity = Some((p, at, before));
    }
    // A quarter into the stripe's first data chunk, half a chunk long: one data member, so
    // one log entry with partial parity.
    let offset = stripe * stripe_data_bytes + chunk_bytes / 4;
    let len = chunk_bytes / 2;
    let w = PlannedWrite {
        seed: 61,
        offset_bytes: offset,
        len_bytes: Some(len),
        journal_only: false,
    };
    write_pattern(&array, &w, writes)?;
    drop(array);
    let f = open(true)?;
    let mut written = vec![0u8; chunk_bytes as usize];
    f.read_exact_at(&mut written, parity_at)
        .map_err(|e| err("ppl crash")(format!("read parity: {e}")))?;
    if written == old_parity {
        return Err(err("ppl crash")(
            "the write did not change the stripe's parity".into(),
        ));
    }
    f.write_all_at(&old_parity, parity_at)
        .and_then(|_| f.sync_all())
        .map_err(|e| err("ppl crash")(format!("put back parity: {e}")))?;
    if let Some((p, at, before)) = chained_parity {
        let f = open_slot(p, true)?;
        let mut now = vec![0u8; before.len()];
        f.read_exact_at(&mut now, at)
            .map_err(|e| err("ppl crash")(format!("read parity: {e}")))?;
        if now == before {
            return Err(err("ppl crash")(
                "the second whole-stripe write did not change its parity".into(),
            ));
        }
        f.write_all_at(&before, at)
            .and_then(|_| f.sync_all())
            .map_err(|e| err("ppl crash")(format!("put back parity: {e}")))?;
    }
    Ok((offset, len, slot))
}

/// As `raidkit add` of a spare per new slot, then `raidkit grow --raid-devices SLOTS` (which
/// rebuilds them): the status after the last stop.
fn grow_mirrors(a: &PlannedArray, slots: usize) -> Result<raidkit_engine::Status, PrepareError> {
    let n = a.raid_devices();
    add_spares(a)?;
    let report = Array::grow_mirrors(
        open_members(&a.members, false)?,
        slots,
        &AssembleOptions::default(),
    )
    .map_err(|e| err("grow mirrors")(e.to_string()))?;
    if report.new_slots.len() != slots - n {
        return Err(err("grow mirrors")(format!(
            "spares took {:?}",
            report.new_slots
        )));
    }
    rebuilt(a, true, "assemble after grow")
}

/// Assembles the row's members, rebuilds what is to rebuild (`rebuild`: which must complete),
/// stops the array; its status then.
fn rebuilt(
    a: &PlannedArray,
    rebuild: bool,
    what: &'static str,
) -> Result<raidkit_engine::Status, PrepareError> {
    let (array, _) = Array::assemble(open_members(&a.members, false)?, AssembleOptions::default())
        .map_err(|e| err(what)(e.to_string()))?;
    if rebuild {
        let r = array
            .run_task(TaskKind::Rebuild, &mut |_| {}, &AtomicBool::new(false))
            .map_err(|e| err("rebuild")(e.to_string()))?;
        if r.outcome != TaskOutcome::Completed {
            return Err(err("rebuild")(format!("{:?}", r.outcome)));
        }
    }
    array.stop().map_err(|e| err("stop")(e.to_string()))?;
    Ok(array.status())
}

/// As `raidkit grow --level TO` (after `raidkit add` of the row's spares, if any): md's
/// takeover, nothing moved, then the spares in the new copy slots rebuilt.
fn take_over(a: &PlannedArray, to: u32) -> Result<raidkit_engine::Status, PrepareError> {
    if a.spares > 0 {
        add_spares(a)?;
    }
    let never = AtomicBool::new(false);
    let ctl = ReshapeControl {
        progress: &|_, _| {},
        stop: &never,
        pause_at_bytes: None,
    };
    let target = ReshapeTarget {
        level: Some(to as i32),
        ..Default::default()
    };
    let report = Array::reshape(
        open_members(&a.members, false)?,
        &target,
        &AssembleOptions::default(),
        &ctl,
    )
    .map_err(|e| err("takeover")(e.to_string()))?;
    if !report.finished || report.written_bytes != 0 || report.rebuild_slots.len() != a.spares {
        return Err(err("takeover")(format!(
            "finished {}, {} bytes written, rebuilding {:?}",
            report.finished, report.written_bytes, report.rebuild_slots
        )));
    }
    rebuilt(a, a.spares > 0, "assemble after takeover")
}

/// As `raidkit add` of the row's spares (its members after the first `raid_devices`) to the
/// stopped array.
fn add_spares(a: &PlannedArray) -> Result<(), PrepareError> {
    let n = a.raid_devices();
    let (array, _) = Array::assemble(
        open_members(&a.members[..n], false)?,
        AssembleOptions::default(),
    )
    .map_err(|e| err("assemble to add spares")(e.to_string()))?;
    for (k, m) in a.members[n..].iter().enumerate() {
        let d =
            FileDisk::create(&m.image, m.size_bytes).map_err(|e| err("create")(e.to_string()))?;
        array
            .add_spare(Box::new(d), uuid_from(&a.name, &format!("spare {k}")))
            .map_err(|e| err("add spare")(format!("{}: {e}", m.serial)))?;
    }
    array.stop().map_err(|e| err("stop")(e.to_string()))
}

/// Adds a spare per failed member and runs the rebuild until it passed `percent`.
fn rebuild_part_way(
    a: &PlannedArray,
    array: &Array,
    percent: u8,
) -> Result<RecoveryExpectation, PrepareError> {
    let n = a.raid_devices();
    let spares = &a.members[n..];
    for (k, m) in spares.iter().enumerate() {
        let d =
            FileDisk::create(&m.image, m.size_bytes).map_err(|e| err("create")(e.to_string()))?;
        array
            .add_spare(Box::new(d), uuid_from(&a.name, &format!("spare {k}")))
            .map_err(|e| err("add spare")(format!("{}: {e}", m.serial)))?;
    }
    // Every step records its cursor, so the superblocks say where the rebuild stood.
    array.set_checkpoint_interval(Duration::ZERO);
    let stop = AtomicBool::new(false);
    let mut observe = |p: &raidkit_engine::TaskProgress| {
        if p.percent >= f64::from(percent) {
            stop.store(true, Ordering::Relaxed);
        }
    };
    let report = array
        .run_task(TaskKind::Rebuild, &mut observe, &stop)
        .map_err(|e| err("rebuild")(e.to_string()))?;
    if report.outcome != TaskOutcome::Stopped {
        return Err(err("rebuild")(format!(
            "wanted a rebuild stopped at {percent} %, it ended {:?} at {:.1} %",
            report.outcome, report.progress.percent
        )));
    }
    let status = array.status();
    // The spares are the last attached members (index as given: members, then spares).
    let mut slots = Vec::new();
    for (k, m) in spares.iter().enumerate() {
        let slot = status
            .members
            .iter()
            .find(|s| s.index == n + k)
            .and_then(|s| s.slot)
            .ok_or_else(|| err("rebuild")(format!("spare {} took no slot", m.serial)))?;
        slots.push(slot);
    }
    Ok(RecoveryExpectation {
        spares: spares.iter().map(|m| m.serial.clone()).collect(),
        slots,
        offset_sectors: BTreeMap::new(),
        end_sectors: report.progress.end_sectors,
        percent: report.progress.percent,
    })
}

/// The internal bitmap of one member, read from its bytes (superblock and bits).
fn read_bitmap(
    disk: &dyn Disk,
    sb: &raidkit_metadata::Superblock,
) -> Result<(BitmapSuper, BitmapExpectation), String> {
    let offset = sb.bitmap_offset().ok_or("no bitmap offset")?;
    let at = (sb.super_offset_sectors as i64 + i64::from(offset)) as u64 * 512;
    let mut head = vec![0u8; 4096];
    disk.read_at(&mut head, at).map_err(|e| e.to_string())?;
    let bsb = BitmapSuper::decode(&head).map_err(|e| e.to_string())?;
    let bits = bsb.bits();
    let mut image = vec![0u8; (256 + bits.div_ceil(8) as usize).div_ceil(4096) * 4096];
    disk.read_at(&mut image, at).map_err(|e| e.to_string())?;
    let dirty = BitmapBits::from_bytes(bits, &image[256..])
        .map_err(|e| e.to_string())?
        .count_dirty();
    let expect = BitmapExpectation {
        chunk_bytes: u64::from(bsb.chunk_bytes),
        events: bsb.events,
        events_cleared: bsb.events_cleared,
        sync_size_sectors: bsb.sync_size_sectors,
        bits,
        dirty,
        superblock_events: sb.events,
    };
    Ok((bsb, expect))
}

/// sha256 of the whole array as its raid members alone hold it: a read-only assembly without
/// the journal (md's `--force`: "Journal is missing or stale, starting array read only").
fn members_alone_sha256(a: &PlannedArray) -> Result<String, PrepareError> {
    let (array, report) = Array::assemble(
        open_members(&a.members[..a.raid_devices()], true)?,
        AssembleOptions {
            read_only: true,
            force: true,
            ..AssembleOptions::default()
        },
    )
    .map_err(|e| err("read-only assemble without the journal")(e.to_string()))?;
    if !report
        .events
        .iter()
        .any(|e| matches!(e, ArrayEvent::JournalMissing))
    {
        return Err(err("read-only assemble without the journal")(format!(
            "no JournalMissing event: {:?}",
            sentences(&report.events)
        )));
    }
    read_all(&array)
}

/// sha256 of the whole array as raidkit reads it (read-only assembly of every member given).
pub fn readback_sha256(a: &PlannedArray) -> Result<String, PrepareError> {
    readback(a, false).map(|(sha, _)| sha)
}

/// sha256 of the whole array as raidkit reads it, and its assembly events. `replay`: assemble
/// copies of the images read-write, so that raidkit replays a write journal (left in place
/// for the next reader), and stop that array cleanly; so too for a reshape stopped part way,
/// which raidkit finishes on the copies; otherwise a read-only assembly of the images
/// themselves.
pub fn readback(a: &PlannedArray, replay: bool) -> Result<(String, Vec<ArrayEvent>), PrepareError> {
    if a.spans.is_some() || (!replay && a.reshape.is_none()) {
        let opts = AssembleOptions {
            read_only: true,
            ..AssembleOptions::default()
        };
        let members = open_members(&a.members, true)?;
        let (array, report) = if a.spans.is_some() {
            // A RAID 50/60 stack: its spans, then the RAID 0 on them.
            Array::assemble_stack(members, opts)
        } else {
            Array::assemble(members, opts)
        }
        .map_err(|e| err("read-only assemble")(e.to_string()))?;
        return Ok((read_all(&array)?, report.events));
    }
    with_assembled_copies(&a.members, |array, report| {
        Ok((read_all(array)?, report.events.clone()))
    })
    .map_err(|e| err("assemble copies")(e))?
}

/// Assembles copies of `members` read-write, so that a replay of the array's log runs while
/// the images stay as they are, hands the array and its assembly report to `f`, stops the
/// array and removes the copies. `Err` says why the copies could not be made, assembled or
/// stopped.
pub fn with_assembled_copies<T>(
    members: &[PlannedMember],
    f: impl FnOnce(&Array, &raidkit_engine::AssembleReport) -> T,
) -> Result<T, String> {
    let copies = copy_images(members).map_err(|e| e.to_string())?;
    let result = (|| {
        let disks = open_members(&copies, false).map_err(|e| e.to_string())?;
        let (array, report) = match Array::assemble(disks, AssembleOptions::default()) {
            // A reshape stopped part way: raidkit finishes it on the copies first.
            Err(EngineError::ReshapeInProgress { .. }) => {
                let never = AtomicBool::new(false);
                let ctl = ReshapeControl {
                    progress: &|_, _| {},
                    stop: &never,
                    pause_at_bytes: None,
                };
                let disks = open_members(&copies, false).map_err(|e| e.to_string())?;
                Array::continue_reshape(disks, &AssembleOptions::default(), &ctl)
                    .map_err(|e| format!("continue the reshape: {e}"))?;
                let disks = open_members(&copies, false).map_err(|e| e.to_string())?;
                Array::assemble(disks, AssembleOptions::default())
            }
            other => other,
        }
        .map_err(|e| e.to_string())?;
        let out = f(&array, &report);
        array.stop().map_err(|e| format!("stop: {e}"))?;
        Ok(out)
    })();
    for c in &copies {
        let _ = std::fs::remove_file(&c.image);
    }
    result
}

/// Copies of the images beside them (`<image>.copy`), for an assembly that must not change
/// the images themselves.
pub fn copy_images(members: &[PlannedMember]) -> Result<Vec<PlannedMember>, PrepareError> {
    let mut copies = Vec::new();
    for m in members {
        let mut image = m.image.clone().into_os_string();
        image.push(".copy");
        let c = PlannedMember {
            image: image.into(),
            ..m.clone()
        };
        if let Err(e) = std::fs::copy(&m.image, &c.image) {
            for done in &copies {
                let done: &PlannedMember = done;
                let _ = std::fs::remove_file(&done.image);
            }
            return Err(err("copy")(format!("{}: {e}", m.image.display())));
        }
        copies.push(c);
    }
    Ok(copies)
}

pub(crate) fn read_all(array: &Array) -> Result<String, PrepareError> {
    let size = array.size_bytes();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; WRITE_STEP_BYTES];
    let mut done = 0u64;
    while done < size {
        let k = ((size - done) as usize).min(WRITE_STEP_BYTES);
        array
            .read_at(&mut buf[..k], done)
            .map_err(|e| err("read")(format!("{k} bytes at {done}: {e}")))?;
        h.update(&buf[..k]);
        done += k as u64;
    }
    Ok(hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_names_become_md_numbers() {
        assert_eq!(layout_number(5, Some("right-asymmetric")).unwrap(), Some(1));
        assert_eq!(layout_number(6, Some("parity-first-6")).unwrap(), Some(20));
        assert_eq!(layout_number(6, Some("ddf-N-continue")).unwrap(), Some(10));
        assert_eq!(layout_number(10, Some("o3")).unwrap(), Some(0x10301));
        assert_eq!(layout_number(10, Some("n2")).unwrap(), Some(0x102));
        assert_eq!(layout_number(0, Some("alternate")).unwrap(), Some(2));
        assert_eq!(layout_number(1, None).unwrap(), None);
        assert!(layout_number(1, Some("n2")).is_err());
        assert!(layout_number(5, Some("bogus")).is_err());
    }

    #[test]
    fn examine_text_becomes_pairs() {
        let p = examine_pairs(
            "          Magic : a92b4efc\n                : \n   Device Role : Active device 1\n",
        );
        assert_eq!(
            p,
            vec![
                ("Magic".to_string(), "a92b4efc".to_string()),
                ("Device Role".to_string(), "Active device 1".to_string())
            ]
        );
    }
}
