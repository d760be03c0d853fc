//! Reshapes of a stopped array, as md's (`mdadm --grow`): more members for RAID 0, 4, 5, 6
//! and 10 (near copies), fewer for RAID 4, 5 and 6, another chunk size or layout, and level changes through md's
//! takeovers (RAID 0 to 4/5/6, 4 to 0 or 5, 5 to 0, 4 or 6, 6 to 5). Every stripe is rewritten in the new
//! layout; a level change that moves nothing only writes superblocks and leaves the new
//! parity to rebuild.
//!
//! Crash-safe without a backup file, as md with `new_offset`: the new layout is written
//! below the old one (each member's data offset moves down by mdadm's `min_offset_change`,
//! or about half the room there is when the number of data members stays), and progress is
//! recorded in md's own superblock fields (`reshape_position`, `new_level`, `new_layout`,
//! `new_chunk`, `delta_disks`, `new_offset`, `MD_FEATURE_RESHAPE_ACTIVE`/`NEW_OFFSET`). A
//! step writes only where the old layout holds no sector at or above the position the
//! superblocks record ([`plan::reshape::Rule::step_end`]); when the next step needs more
//! room, every member is flushed and the position recorded first. After a crash,
//! `continue_reshape` (or md, which reads the same fields) starts again from the recorded
//! position; md's own reshapes resume here the same way. The last position recorded is the
//! end, before the superblocks take the new data offset and shape, so members a crash leaves
//! one round behind still assemble. Fewer data members run the other way, as md's
//! `reshape_backwards`: the data offset moves up, the reshape runs from the new end down to 0
//! ([`plan::reshape::Rule::step_start`]), and only once the caller gave the smaller array size
//! (mdadm's `--array-size`): what lay past it is gone.
//!
//! md's takeovers, recorded as md records them: a RAID 5 becoming a RAID 6 runs as a RAID 6
//! of md's `*-6` layout (Q on the last member, a spare) and a RAID 0 as a RAID 4/5/6 with its
//! parity last on spares; those new members hold nothing of the old layout ("fresh" slots:
//! not read, written, their `recovery_offset` following the position in member sectors). A
//! RAID 0 growing runs as a RAID 4 whose parity member is missing and is a RAID 0 again at
//! the end. A member failing during a reshape is recorded faulty and the reshape goes on
//! while both layouts still have every sector.
//!
//! A RAID 6 becoming a RAID 5 is restriped to its RAID 5 form (the `*-6` layout) and the Q
//! member leaves as a spare at the end; continued after a crash, it ends in that form (the
//! superblocks record no more, as md's), and `grow --level 5` then drops the Q at once.
//!
//! Not yet: reshapes while the array serves I/O, fewer members for RAID 0 and 10, RAID 0 to
//! 10, RAID 10 offset layouts or counts that are not a
//! whole number of copies.

use super::grow::{decide_stopped, read_and_decide};
use super::*;
use crate::error::GrowRefusal;
use crate::membership::assembly::Assembly;
use crate::meta::FoundSuperblock;
use crate::plan::reshape::{self as rules, Rule, Way};
use raidkit_metadata::ReshapeFields;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a reshape did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReshapeReport {
    pub old_raid_devices: usize,
    pub new_raid_devices: usize,
    /// Old and new geometry: md's level and layout numbers, chunk sizes (sectors). A run
    /// that continues a reshape knows the old only as the level the reshape runs at (a RAID
    /// 5 becoming a RAID 6 runs as md's `*-6`).
    pub old_level: i32,
    pub new_level: i32,
    pub old_layout: u32,
    pub new_layout: u32,
    pub old_chunk_sectors: u64,
    pub new_chunk_sectors: u64,
    /// Spares that took the new slots: (name, slot).
    pub new_members: Vec<(String, usize)>,
    pub old_array_bytes: u64,
    pub new_array_bytes: u64,
    /// Where this run started (array sectors; 0 unless it continued a reshape).
    pub started_at_sectors: u64,
    /// Superblock rounds that recorded progress.
    pub checkpoints: u64,
    /// Member bytes read and written.
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// Data offset (sectors) before and after, of the first member.
    pub old_data_offset: u64,
    pub new_data_offset: u64,
    /// Members that failed during this run: recorded faulty, the reshape went on without
    /// them (as md's does), the array degraded.
    pub failed_members: Vec<String>,
    /// Whether the reshape is over; otherwise it stopped (asked to) at `position_sectors`,
    /// recorded there, to go on with [`Array::continue_reshape`].
    pub finished: bool,
    pub position_sectors: u64,
    /// Whether it runs down from the end (fewer data members, md's reshape_backwards): the
    /// array sectors reshaped are then those from `position_sectors` on.
    pub backwards: bool,
    /// Slots a level change gave new parity to rebuild (md's takeover then recovery): the
    /// array runs degraded until they are (`raidkit rebuild`).
    pub rebuild_slots: Vec<usize>,
    /// Members that left the array (a RAID 10 taken over as a RAID 0: the other copy of each
    /// pair, and spares), recorded faulty by the others, their own superblocks untouched.
    pub left_members: Vec<String>,
}

/// How a caller steers a reshape: progress, stop, pause.
pub struct ReshapeControl<'a> {
    /// Called with (array bytes reshaped, array bytes to reshape).
    pub progress: &'a (dyn Fn(u64, u64) + Sync),
    /// Set to stop: the position reached is recorded and the run returns (`finished` false).
    pub stop: &'a AtomicBool,
    /// Stop once this many array bytes are reshaped (md's `sync_max`), recorded the same way.
    pub pause_at_bytes: Option<u64>,
}

/// Array data moved per step at most (whole units; at least one). RAID 5 from 4 to 5
/// emulated hard disks (`scripts/bench/reshape-disks.sh`, 2G images in memory): with the next
/// step's old rows read while this step is laid out and written, 41-42 s where reading,
/// computing and writing one after the other took 45-55 s (0.86x and 0.99x of what the
/// members' sequential reads and writes allow, against 0.65x and 0.80x, in the same runs).
/// 16 MiB steps ran slower than 64 MiB (more seeks between the old and the new region); a
/// flush after each step's writes too. Two steps' old buffers and one step's new buffers
/// take about 3.5 times this.
const MAX_STEP_BYTES: u64 = 64 << 20;
/// How often progress is recorded when the rule does not ask for it sooner (md: 10 s).
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);

/// A reshape of a stopped array: both layouts, members by new slot, offsets.
#[derive(Clone)]
pub(super) struct Shape {
    pub(super) old: Geo,
    pub(super) new: Geo,
    pub(super) way: Way,
    /// Member index (in the members given) of each new slot; `None`: missing.
    pub(super) slot_member: Vec<Option<usize>>,
    /// Slots without a member to read or write (missing, or failed during the reshape): the
    /// old layout's data there is rebuilt from parity, the new layout's is not written.
    pub(super) lost: Vec<bool>,
    /// Slots of the old layout whose member holds nothing of it yet: a RAID 5 becoming a
    /// RAID 6 takes over with its Q on a new member (md's `*-6` layouts), which only the new
    /// layout fills. Not read; written; recorded in md's way as a member being recovered up
    /// to the reshape's position (`recovery_offset`).
    pub(super) fresh: Vec<bool>,
    /// The level, layout and member count at the end when they are not the new layout's: a
    /// RAID 0 that grew as a RAID 4 without its parity member is a RAID 0 again.
    finish_as: Option<(i32, u32, usize)>,
    /// Data offsets of each slot's member, old and new layout (0 for a missing member).
    pub(super) old_offset: Vec<u64>,
    pub(super) new_offset: Vec<u64>,
}

impl Shape {
    /// The slot member `i` fills, if any.
    fn slot_of(&self, i: usize) -> Option<usize> {
        self.slot_member.iter().position(|&m| m == Some(i))
    }

    /// The member of `slot` while it is there to read and write.
    fn member<'m>(&self, members: &'m [Box<dyn Disk>], slot: usize) -> Option<&'m dyn Disk> {
        match (self.lost[slot], self.slot_member[slot]) {
            (false, Some(i)) => Some(members[i].as_ref()),
            _ => None,
        }
    }

    /// Whether the old layout's part on `slot` can be read.
    fn old_readable(&self, slot: usize) -> bool {
        !self.lost[slot] && !self.fresh[slot]
    }

    /// Whether both layouts still have all their data with `slot` lost too (`None`: as
    /// things are): the new one without its lost slots, the old one without those it cannot
    /// read.
    fn survives_losing(&self, slot: Option<usize>) -> bool {
        let gone = |s: usize| Some(s) == slot;
        let new: Vec<bool> = (0..self.new.raid_disks)
            .map(|s| self.lost[s] || gone(s))
            .collect();
        let old: Vec<bool> = (0..self.old.raid_disks)
            .map(|s| !self.old_readable(s) || gone(s))
            .collect();
        self.new.survives(&new) && self.old.survives(&old)
    }
}

/// What a reshape changes (mdadm's `--grow` options); `None`: as it is, or as the level
/// change needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReshapeTarget {
    /// Members from now on (`--raid-devices`); a RAID 5 becoming a RAID 6 takes one more by
    /// default, as mdadm.
    pub raid_devices: Option<usize>,
    /// md's level number (`--level`): 4 to 5, 4 or 5 to 6, or the same.
    pub level: Option<i32>,
    /// md's layout number (`--layout`), of the new level.
    pub layout: Option<u32>,
    /// Chunk size in sectors (`--chunk`).
    pub chunk_sectors: Option<u64>,
    /// The array's size from now on, in sectors (mdadm's `--array-size`): a reshape that
    /// shrinks the array (fewer data members) needs it at or below the new size, the caller's
    /// word that nothing past it is needed.
    pub array_sectors: Option<u64>,
}

impl ReshapeTarget {
    /// Only the number of members changes.
    pub fn members(raid_devices: usize) -> Self {
        ReshapeTarget {
            raid_devices: Some(raid_devices),
            ..Default::default()
        }
    }
}

impl Array {
    /// Adds members to the stopped RAID 4/5/6 on `members` until it has `raid_devices`
    /// slots (see [`Array::reshape`]).
    pub fn grow_members(
        members: Vec<Box<dyn Disk>>,
        raid_devices: usize,
        opts: &AssembleOptions,
        ctl: &ReshapeControl,
    ) -> Result<ReshapeReport> {
        Array::reshape(members, &ReshapeTarget::members(raid_devices), opts, ctl)
    }

    /// Reshapes the stopped RAID 4/5/6 on `members` to `target`: more members (the spares
    /// among `members` take the new slots), another chunk size or layout, RAID 4 to 5 and
    /// RAID 4 or 5 to 6 (the new Q on a spare). Every stripe is rewritten in the new layout
    /// (see the module's notes), as `ctl` steers. Refuses, writing nothing, with
    /// [`EngineError::CannotGrow`].
    pub fn reshape(
        members: Vec<Box<dyn Disk>>,
        target: &ReshapeTarget,
        opts: &AssembleOptions,
        ctl: &ReshapeControl,
    ) -> Result<ReshapeReport> {
        let (found, names, a) = decide_stopped(&members, opts)?;
        match start_plan(&a, &names, &found, target)? {
            Plan::Restripe {
                shape,
                sbs,
                new_members,
            } => {
                let start = Start::Fresh;
                let mut report = run(&members, &found, &a, *shape, sbs, start, ctl)?;
                report.new_members = new_members;
                // As the user knew it (a level taken over runs as the new level).
                report.old_raid_devices = a.geo.raid_disks;
                report.old_level = a.nsb.level.to_md();
                report.old_layout = a.nsb.layout;
                Ok(report)
            }
            Plan::Takeover {
                sbs,
                new_members,
                old,
                rebuild,
                leave,
            } => {
                for (i, sb) in sbs.iter().enumerate() {
                    if a.use_member[MemberId(i)] && !leave.contains(&i) {
                        write_superblock(members[i].as_ref(), sb, found[i].version)?;
                        members[i].flush()?;
                    }
                }
                let mut report = takeover_report(&a, &old, rebuild);
                report.new_members = new_members;
                report.left_members = leave.iter().map(|&i| names[i].clone()).collect();
                Ok(report)
            }
        }
    }

    /// Goes on with the reshape recorded on the stopped array's `members` (started by
    /// raidkit or by md) from the position the superblocks record.
    pub fn continue_reshape(
        members: Vec<Box<dyn Disk>>,
        opts: &AssembleOptions,
        ctl: &ReshapeControl,
    ) -> Result<ReshapeReport> {
        let (found, _, a) = decide_stopped(&members, opts)?;
        if a.reshape.is_none() {
            // A takeover whose superblock round a crash cut short: the members behind it
            // are written now, and the takeover is done (it moves nothing).
            let behind: Vec<usize> = (0..found.len())
                .filter(|&i| {
                    a.use_member[MemberId(i)]
                        && crate::membership::assembly::took_over_behind(&found[i].sb, &a.nsb)
                })
                .collect();
            if !behind.is_empty() {
                for &i in &behind {
                    write_superblock(members[i].as_ref(), &a.sbs[MemberId(i)], found[i].version)?;
                    members[i].flush()?;
                }
                let old_level = found[behind[0]].sb.level.to_md();
                let mut report = takeover_report(&a, &a.geo, Vec::new());
                report.old_level = old_level;
                report.old_layout = found[behind[0]].sb.layout;
                report.old_raid_devices = found[behind[0]].sb.raid_disks as usize;
                report.old_chunk_sectors = found[behind[0]].sb.chunk_sectors as u64;
                return Ok(report);
            }
        }
        let (shape, pos) = resume_plan(&a, &found)?;
        let sbs = a.sbs.to_vec();
        run(&members, &found, &a, shape, sbs, Start::At(pos), ctl)
    }
}

/// A reshape in progress as the superblocks record it (`raidkit detail`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReshapeStatus {
    /// Old geometry (the superblocks' level, layout and chunk) and new (md's `new_*`).
    pub level: i32,
    pub layout: u32,
    pub chunk_sectors: u64,
    pub new_level: i32,
    pub new_layout: u32,
    pub new_chunk_sectors: u64,
    pub old_raid_devices: usize,
    pub new_raid_devices: usize,
    /// md's reshape_position: array sectors below it are in the new layout (at or above it,
    /// when `backwards`).
    pub position_sectors: u64,
    /// Whether it runs down from the end (fewer data members, md's reshape_backwards).
    pub backwards: bool,
    /// Array sectors the reshape covers (the new layout's size).
    pub end_sectors: u64,
    pub old_array_bytes: u64,
    pub new_array_bytes: u64,
    /// Data offsets (sectors) of the first slot's member, old and new layout.
    pub old_data_offset: u64,
    pub new_data_offset: u64,
    /// Whether raidkit can go on with it (`grow --continue`), and why not.
    pub refusal: Option<String>,
}

impl Array {
    /// The reshape the stopped array on `members` records, if any (read-only: writes
    /// nothing).
    pub fn reshape_status(
        members: &[Box<dyn Disk>],
        opts: &AssembleOptions,
    ) -> Result<Option<ReshapeStatus>> {
        let (found, _, a) = read_and_decide(members, true, opts)?;
        let Some(r) = a.reshape else {
            return Ok(None);
        };
        let old_count = (a.geo.raid_disks as i64 - r.delta_disks as i64).max(0) as usize;
        let mut status = ReshapeStatus {
            level: a.nsb.level.to_md(),
            layout: a.nsb.layout,
            chunk_sectors: a.geo.chunk_sectors,
            new_level: r.new_level,
            new_layout: r.new_layout,
            new_chunk_sectors: r.new_chunk_sectors as u64,
            old_raid_devices: old_count,
            new_raid_devices: a.geo.raid_disks,
            position_sectors: r.reshape_position_sectors,
            backwards: a.nsb.feature_map.contains(FeatureMap::RESHAPE_BACKWARDS)
                || r.delta_disks < 0,
            end_sectors: a.geo.array_sectors(),
            old_array_bytes: 0,
            new_array_bytes: a.geo.array_sectors() * SECTOR as u64,
            old_data_offset: 0,
            new_data_offset: 0,
            refusal: None,
        };
        match resume_plan(&a, &found) {
            Ok((shape, _)) => {
                status.old_array_bytes = shape.old.array_sectors() * SECTOR as u64;
                status.new_array_bytes = shape.new.array_sectors() * SECTOR as u64;
                status.end_sectors = shape.new.array_sectors();
                status.old_data_offset = shape.old_offset[0];
                status.new_data_offset = shape.new_offset[0];
            }
            Err(e) => status.refusal = Some(e.to_string()),
        }
        Ok(Some(status))
    }
}

/// Where a run starts.
#[derive(Clone, Copy)]
enum Start {
    /// A new reshape: recorded at 0 on every member first (nothing moves before).
    Fresh,
    /// A recorded reshape, at this array sector.
    At(u64),
}

/// Member `i`'s superblock with the reshape recorded at `pos`.
fn record(sb: &mut Superblock, shape: &Shape, i: usize, pos: u64) {
    let slot = shape.slot_of(i);
    sb.raid_disks = shape.new.raid_disks as u32;
    sb.reshape = ReshapeFields {
        new_level: shape.new.md_level(),
        reshape_position_sectors: pos,
        delta_disks: shape.new.raid_disks as i32 - shape.old.raid_disks as i32,
        new_layout: shape.new.md_layout(),
        new_chunk_sectors: shape.new.chunk_sectors as u32,
        new_offset_sectors: slot.map_or(0, |s| {
            shape.new_offset[s] as i64 - shape.old_offset[s] as i64
        }) as i32,
    };
    sb.feature_map.insert(FeatureMap::RESHAPE_ACTIVE);
    sb.feature_map
        .set(FeatureMap::NEW_OFFSET, sb.reshape.new_offset_sectors != 0);
    // md's super_1_sync: the bit only where the member count stays; fewer members say
    // backwards by their negative delta.
    sb.feature_map.set(
        FeatureMap::RESHAPE_BACKWARDS,
        matches!(shape.way, Way::Backward(_)) && sb.reshape.delta_disks == 0,
    );
    // A fresh slot holds the new layout up to the position (md's reshape_request moves a
    // recovering member's recovery_offset along with it, in member sectors: the position
    // over the new layout's data members).
    if slot.is_some_and(|s| shape.fresh[s]) {
        sb.set_recovery_offset(pos / shape.new.data_disks() as u64);
    }
}

/// md's `*-6` layout of a RAID 5 layout: the same RAID 5 with Q on one more member, the last
/// (mdadm's `analyse_change`); a RAID 4 is a RAID 5 with its parity last.
fn raid6_takeover_layout(level: i32, layout: u32) -> Option<u32> {
    match (level, layout) {
        (4, _) | (5, 5) => Some(5),
        (5, l @ 0..=4) => Some(16 + l),
        _ => None,
    }
}

/// How the level changes, as md does it: the level the reshape runs at (md's `re->level`),
/// the old layout at that level, and how many parity members it adds. md takes a RAID 0 over
/// as a RAID 4, 5 or 6 with its parity last (`raid45_takeover_raid0`), on new members.
fn level_change(a: &Assembly, to: i32) -> Result<(i32, u32, usize)> {
    let from = a.nsb.level.to_md();
    let layout = a.nsb.layout;
    let refuse = |why| Err(EngineError::CannotGrow(why));
    match (from, to) {
        (0, 0) => refuse(GrowRefusal::ReshapeNotYet {
            what: "fewer members for a RAID 0".into(),
        }),
        (f, t) if f == t => Ok((f, layout, 0)),
        (0, 4) => Ok((4, 0, 1)),
        (0, 5) => Ok((5, 5, 1)),
        (0, 6) => Ok((6, 5, 2)),
        // md first takes a RAID 4 over as a RAID 5 with its parity last.
        (4, 5) => Ok((5, 5, 0)),
        (4 | 5, 6) => match raid6_takeover_layout(from, layout) {
            Some(l) => Ok((6, l, 1)),
            None => refuse(GrowRefusal::LevelImpossible {
                from,
                to,
                why: format!("layout {layout} has no RAID 6 form with Q last"),
            }),
        },
        // md can, through parity-last layouts and a member less; raidkit not yet.
        (6, 4) => refuse(GrowRefusal::ReshapeNotYet {
            what: format!("RAID {from} to RAID {to}"),
        }),
        _ => refuse(GrowRefusal::LevelImpossible {
            from,
            to,
            why: "md has no such reshape".into(),
        }),
    }
}

/// What raidkit reshapes of a RAID 10 (`layout`, `raid_disks`): more members, or another
/// chunk size, of a near layout whose member count is a whole number of its copies before
/// and after (md also reshapes offset layouts and other counts; md refuses far layouts).
fn raid10_reshapable(layout: u32, raid_disks: usize, target: &ReshapeTarget) -> Result<()> {
    let (near, far, offset) = (layout & 0xff, (layout >> 8) & 0xff, layout & 0x10000 != 0);
    let not_yet = |what: String| Err(EngineError::CannotGrow(GrowRefusal::ReshapeNotYet { what }));
    if far > 1 && !offset {
        return Err(EngineError::CannotGrow(GrowRefusal::FarLayout));
    }
    if offset || far > 1 {
        return not_yet("a RAID 10 with an offset layout".into());
    }
    if target.layout.is_some_and(|l| l != layout) {
        return not_yet("a RAID 10's layout change".into());
    }
    let n = target.raid_devices.unwrap_or(raid_disks);
    let whole = |n: usize| near > 0 && n.is_multiple_of(near as usize);
    if !whole(raid_disks) || !whole(n) {
        return not_yet(format!(
            "a RAID 10 of {near} near copies over {raid_disks} to {n} members (a count that is not a whole number of copies)"
        ));
    }
    Ok(())
}

/// Decides the start of a reshape on an assembly's decision alone (no I/O): both layouts,
/// the new slots' members, the new offsets, every member's superblock from now on.
fn start_plan(
    a: &Assembly,
    names: &[String],
    found: &[FoundSuperblock],
    target: &ReshapeTarget,
) -> Result<Plan> {
    let refuse = |why| Err(EngineError::CannotGrow(why));
    let level = a.nsb.level.to_md();
    let only_count = target.level.is_none() && target.layout.is_none();
    let takes_over_raid0 = level == 0 && target.level.is_some_and(|l| l != 0);
    // More members for a RAID 0, as mdadm: taken over as a RAID 4 whose parity member is
    // missing, reshaped, and a RAID 0 again at the end.
    // So too a RAID 0's chunk size (mdadm's way: the same takeover, a restripe, back).
    let raid0_grows = level == 0
        && target.level.is_none_or(|l| l == 0)
        && target.layout.is_none()
        && target.raid_devices.is_none_or(|n| n >= a.geo.raid_disks)
        && (target.raid_devices.is_some_and(|n| n > a.geo.raid_disks)
            || target
                .chunk_sectors
                .is_some_and(|c| c != a.geo.chunk_sectors));
    let unchanged = target.raid_devices.is_none()
        && target.level.is_none_or(|l| l == level)
        && target.layout.is_none_or(|l| l == a.nsb.layout)
        && target
            .chunk_sectors
            .is_none_or(|c| c == a.geo.chunk_sectors);
    if unchanged && a.reshape.is_none() {
        return refuse(GrowRefusal::NothingToChange);
    }
    if level == 0
        && only_count
        && target.raid_devices == Some(a.geo.raid_disks)
        && target
            .chunk_sectors
            .is_none_or(|c| c == a.geo.chunk_sectors)
    {
        return refuse(GrowRefusal::SameCount {
            raid_devices: a.geo.raid_disks,
        });
    }
    if let Some(plan) = mirror_takeover(a, names, found, target)? {
        return Ok(plan);
    }
    let raid10_grows = level == 10 && target.level.is_none_or(|l| l == 10);
    if raid10_grows {
        raid10_reshapable(a.nsb.layout, a.geo.raid_disks, target)?;
    }
    if !(matches!(level, 4..=6) || takes_over_raid0 || raid0_grows || raid10_grows) {
        if only_count && target.chunk_sectors.is_none() {
            return refuse(GrowRefusal::CountNotMirror { level });
        }
        return refuse(GrowRefusal::ReshapeNotYet {
            what: format!("a level, layout or chunk change of a RAID {level}"),
        });
    }
    if a.reshape.is_some() {
        return refuse(GrowRefusal::WorkPending {
            what: "a reshape (`raidkit grow --continue`)".into(),
        });
    }
    // Levels down, as mdadm: restriped to the form whose last member holds only the parity
    // that goes (RAID 6 to 5: the RAID 5 layout's `*-6` form, Q alone on the last member;
    // RAID 5 to 4 or 0: parity-last), then the level changes (md's takeovers) and that
    // member leaves as a spare (not for RAID 5 to 4, which keeps its parity).
    let n = a.geo.raid_disks;
    let reduce: Option<(u32, (i32, u32, usize))> = match (level, target.level) {
        (6, Some(5)) => {
            let r5 = match target.layout {
                Some(l) => l,
                None => match a.nsb.layout {
                    l @ 0..=5 => l,
                    l @ 16..=20 => l - 16,
                    l => {
                        return refuse(GrowRefusal::LevelImpossible {
                            from: 6,
                            to: 5,
                            why: format!("layout {l} has no RAID 5 form (give --layout)"),
                        })
                    }
                },
            };
            let Some(form) = raid6_takeover_layout(5, r5) else {
                return refuse(GrowRefusal::LevelImpossible {
                    from: 6,
                    to: 5,
                    why: format!("RAID 5 layout {r5} has no RAID 6 form with Q last"),
                });
            };
            Some((form, (5, r5, n - 1)))
        }
        (5, Some(4)) => Some((5, (4, 0, n))),
        (5, Some(0)) => Some((5, (0, 0, n - 1))),
        (4, Some(0)) => Some((a.nsb.layout, (0, 0, n - 1))),
        _ => None,
    };
    let to5 = reduce.is_some();
    let mut finish_as = reduce.map(|(_, f)| f);
    if let Some((_, (to, _, count))) = reduce {
        if target.raid_devices.is_some_and(|k| k != count)
            || (target.layout.is_some() && level != 6)
        {
            return refuse(GrowRefusal::ReshapeNotYet {
                what: format!(
                    "RAID {level} to RAID {to} with another number of data members or layout"
                ),
            });
        }
    }
    let r6_form = reduce.map(|(form, _)| form);
    let new_level = if raid0_grows {
        4
    } else if to5 {
        level
    } else {
        target.level.unwrap_or(level)
    };
    let (run_level, old_layout, added_parity) = level_change(a, new_level)?;
    let old_count = a.geo.raid_disks;
    // The old layout at the level the reshape runs at: a new Q member is its last slot.
    let run_count = old_count + added_parity;
    // A RAID 0 growing runs with one slot more than its members: the missing parity.
    let asked = if to5 {
        run_count
    } else if raid0_grows {
        target.raid_devices.unwrap_or(old_count)
    } else {
        target.raid_devices.unwrap_or(run_count)
    };
    let new_count = asked + usize::from(raid0_grows);
    if raid0_grows {
        finish_as = Some((0, a.nsb.layout, asked));
    }
    let old_chunk = a.geo.chunk_sectors;
    let new_chunk = target.chunk_sectors.unwrap_or(old_chunk);
    let new_layout = r6_form
        .or(target.layout)
        .unwrap_or(match (level, new_level) {
            // md keeps the layout's number: left-symmetric stays left-symmetric.
            (5, 6) => a.nsb.layout,
            // mdadm's defaults for the new level: left-symmetric.
            (0, 5 | 6) => 2,
            _ => old_layout,
        });
    let shrinks = new_count < run_count;
    if shrinks && !(matches!(level, 4..=6) && run_level == level && added_parity == 0) {
        return refuse(GrowRefusal::ReshapeNotYet {
            what: format!("removing members from a RAID {level} while changing its level"),
        });
    }
    let takeover = new_count == run_count && new_layout == old_layout && new_chunk == old_chunk;
    if takeover && run_level == level && !to5 {
        return refuse(match (target.raid_devices, only_count) {
            (Some(n), true) if target.chunk_sectors.is_none() => {
                GrowRefusal::SameCount { raid_devices: n }
            }
            _ => GrowRefusal::NothingToChange,
        });
    }
    common_refusals(a, 0)?;
    let used = a.geo.member_data_sectors;
    if level == 0 {
        one_zone(a, found, new_level)?;
    }
    if !new_chunk.is_power_of_two() || new_chunk < 8 {
        return Err(EngineError::Invalid(format!(
            "chunk size {} KiB: md needs a power of two of 4 KiB or more",
            new_chunk / 2
        )));
    }
    if !used.is_multiple_of(new_chunk) {
        return refuse(GrowRefusal::ChunkNotDividing {
            chunk_sectors: new_chunk,
            member_sectors: used,
        });
    }
    let invalid = |e: crate::geometry::GeoError| EngineError::Invalid(e.to_string());
    let old = Geo::new(run_level, old_layout, run_count, old_chunk, used).map_err(invalid)?;
    let new = Geo::new(new_level, new_layout, new_count, new_chunk, used).map_err(invalid)?;
    let (od, nd) = (old.data_disks() as u64, new.data_disks() as u64);
    if nd < od {
        // The array shrinks: what lies past its new end goes, so only when the caller said
        // the array holds nothing it needs there (mdadm's `--array-size` first).
        let keep = new.array_sectors();
        if target.array_sectors.is_none_or(|s| s > keep) {
            return refuse(GrowRefusal::WouldShrink {
                array_sectors: old.array_sectors(),
                new_sectors: keep,
            });
        }
    }
    let spares: Vec<usize> = (0..found.len())
        .filter(|&i| a.use_member[MemberId(i)] && found[i].sb.role() == DevRole::Spare)
        .filter(|&i| !a.slot_member.iter().any(|m| *m == Some(MemberId(i))))
        .collect();
    let adding = asked.saturating_sub(old_count);
    if spares.len() < adding {
        return refuse(GrowRefusal::NoSpare {
            needed: adding,
            given: spares.len(),
        });
    }
    // Every slot has its member (refused above otherwise).
    let mut slot_member: Vec<Option<usize>> =
        a.slot_member.iter().map(|m| m.map(|m| m.0)).collect();
    slot_member.extend(spares[..adding].iter().map(|&i| Some(i)));
    if raid0_grows {
        slot_member.push(None);
    }
    // Each new member holds as much as every other (md refuses a smaller one too).
    for &i in &spares[..adding] {
        let room = found[i].sb.data_size_sectors;
        if room < used {
            return refuse(GrowRefusal::NoRoom {
                member: names[i].clone(),
                available_sectors: room,
                asked_sectors: used,
            });
        }
    }
    let new_members: Vec<(String, usize)> = spares[..adding]
        .iter()
        .enumerate()
        .map(|(k, &i)| (names[i].clone(), old_count + k))
        .collect();
    // The new parity members (md's takeover): a RAID 5's new Q, a RAID 0's new P (and Q).
    let fresh_slots = old_count..old_count + added_parity;
    // Every member's superblock: the new members take their slots (in sync at once, as md
    // marks members beyond the old count: the reshape writes all of them; new parity members
    // are recorded being recovered, see `record`), and the level and layout the reshape runs
    // at (md's takeover of a RAID 0, 4 or 5).
    let mut sbs = a.sbs.to_vec();
    for sb in sbs.iter_mut() {
        sb.level = raidkit_metadata::Level::from_md(run_level);
        sb.layout = old_layout;
        // A RAID 0's superblocks record no size; the level taken over uses `used`.
        sb.size_sectors = used;
        for (k, &i) in spares[..adding].iter().enumerate() {
            sb.set_role(
                found[i].sb.dev_number,
                DevRole::Active((old_count + k) as u16),
            )
            .map_err(|e| EngineError::Metadata(e.to_string()))?;
        }
    }
    if takeover && to5 {
        // Already in the `*-6` form: the Q member leaves as a spare; nothing moves.
        let (l5, r5, n5) = finish_as.expect("RAID 6 to 5 finishes as a RAID 5");
        let t = now();
        for sb in sbs.iter_mut() {
            sb.level = raidkit_metadata::Level::from_md(l5);
            sb.layout = r5;
            sb.raid_disks = n5 as u32;
            sb.events = a.nsb.events;
            sb.bump_events(t);
        }
        leave_as_spares(&mut sbs, &slot_member, found, n5)?;
        let geo = Geo::new(l5, r5, n5, old_chunk, used).map_err(invalid)?;
        return Ok(Plan::Takeover {
            sbs,
            new_members,
            old: geo,
            rebuild: Vec::new(),
            leave: Vec::new(),
        });
    }
    if takeover {
        // Nothing moves: the level changes now and the new parity is rebuilt (as md's
        // takeover, then recovery).
        let t = now();
        for (i, sb) in sbs.iter_mut().enumerate() {
            if slot_member
                .iter()
                .position(|&m| m == Some(i))
                .is_some_and(|s| fresh_slots.contains(&s))
            {
                sb.set_recovery_offset(0);
            }
            sb.raid_disks = run_count as u32;
            sb.events = a.nsb.events;
            sb.bump_events(t);
        }
        return Ok(Plan::Takeover {
            sbs,
            new_members,
            old,
            rebuild: fresh_slots.collect(),
            leave: Vec::new(),
        });
    }
    // mdadm: a RAID 10 moves by one chunk (the larger), for it reads and writes whole rows.
    let min = if level == 10 {
        old_chunk.max(new_chunk)
    } else {
        rules::min_offset_change(old_chunk, od, new_chunk, nd)
    };
    // Every member must have room for its data to move by `min`: down (md's head-space), or
    // up when the array shrinks (behind the data; mdadm moves the offset up by `min`).
    let mut before = u64::MAX;
    for &i in slot_member.iter().flatten() {
        let sb = &found[i].sb;
        let room = if shrinks {
            sb.data_size_sectors.saturating_sub(used)
        } else {
            rules::space_before(
                sb.data_offset_sectors,
                sb.super_offset_sectors,
                bblog_end(sb),
            )
        };
        if room < min {
            return refuse(if shrinks {
                GrowRefusal::NoTailroom {
                    member: names[i].clone(),
                    available_sectors: room,
                    needed_sectors: min,
                }
            } else {
                GrowRefusal::NoHeadroom {
                    member: names[i].clone(),
                    available_sectors: room,
                    needed_sectors: min,
                }
            });
        }
        before = before.min(room);
    }
    let mut old_offset = Vec::with_capacity(new_count);
    let mut new_offset = Vec::with_capacity(new_count);
    for m in &slot_member {
        let Some(i) = *m else {
            // The missing parity of a RAID 0 growing.
            old_offset.push(0);
            new_offset.push(0);
            continue;
        };
        let off = found[i].sb.data_offset_sectors;
        old_offset.push(off);
        // mdadm: more data members move by the least; the same number by about half the
        // room there is (each step may then move that much before progress is recorded).
        new_offset.push(if shrinks {
            off + min
        } else if nd > od {
            off - min
        } else {
            rules::choose_offset(off - before, off, off - before, off - min)
        });
    }
    let diff = old_offset
        .iter()
        .zip(&new_offset)
        .zip(&slot_member)
        .filter(|(_, m)| m.is_some())
        .map(|((&o, &n), _)| o.abs_diff(n))
        .min()
        .unwrap_or(0);
    let way = way(
        old_chunk,
        od,
        new_chunk,
        nd,
        diff,
        new.array_sectors(),
        shrinks,
    );
    let slots = new_count.max(old_count);
    let mut fresh = vec![false; slots];
    for s in fresh_slots {
        fresh[s] = true;
    }
    let lost = slot_member.iter().map(Option::is_none).collect();
    if shrinks {
        // The members past the new count leave as spares at the end.
        finish_as = Some((level, new_layout, new_count));
    }
    let shape = Shape {
        old,
        new,
        way,
        lost,
        fresh,
        finish_as,
        slot_member,
        old_offset,
        new_offset,
    };
    Ok(Plan::Restripe {
        shape: Box::new(shape),
        sbs,
        new_members,
    })
}

/// What a takeover reports (it moves nothing): from the array `a` assembled to the geometry
/// `new` it runs as, with the slots to rebuild (a new parity member's).
fn takeover_report(a: &Assembly, new: &Geo, rebuild: Vec<usize>) -> ReshapeReport {
    let bytes = new.array_sectors() * SECTOR as u64;
    let offset = a.nsb.data_offset_sectors;
    ReshapeReport {
        old_raid_devices: a.geo.raid_disks,
        new_raid_devices: new.raid_disks,
        old_level: a.nsb.level.to_md(),
        new_level: new.md_level(),
        old_layout: a.nsb.layout,
        new_layout: new.md_layout(),
        old_chunk_sectors: a.geo.chunk_sectors,
        new_chunk_sectors: new.chunk_sectors,
        new_members: Vec::new(),
        old_array_bytes: bytes,
        new_array_bytes: bytes,
        started_at_sectors: 0,
        checkpoints: 1,
        read_bytes: 0,
        written_bytes: 0,
        old_data_offset: offset,
        new_data_offset: offset,
        failed_members: Vec::new(),
        finished: true,
        position_sectors: 0,
        backwards: false,
        rebuild_slots: rebuild,
        left_members: Vec::new(),
    }
}

/// md's takeovers between a level with copies and one without, where no data moves (each
/// member already holds what the new level puts there): a two-member RAID 1 and RAID 5
/// (`raid5_takeover_raid1`, `raid1_takeover`), a RAID 0 and a RAID 10 of two near copies
/// (`raid10_takeover_raid0`: member `k` becomes slot `2k`, spares given take the odd slots
/// and are rebuilt; `raid0_takeover_raid10`: one in-sync member of each pair stays, as slot
/// `k / 2`, the other leaves as a spare). `None` for every other change.
fn mirror_takeover(
    a: &Assembly,
    names: &[String],
    found: &[FoundSuperblock],
    target: &ReshapeTarget,
) -> Result<Option<Plan>> {
    let refuse = |why| Err(EngineError::CannotGrow(why));
    let from = a.nsb.level.to_md();
    let Some(to) = target.level.filter(|&t| t != from) else {
        return Ok(None);
    };
    let n = a.geo.raid_disks;
    let used = a.geo.member_data_sectors;
    let chunk = a.geo.chunk_sectors;
    let near2 = raidkit_layout::Raid10Layout::near(2).md_layout();
    // What the takeover itself sets: anything else asked for is a second step.
    let (count, layout, new_chunk) = match (from, to) {
        (1, 5) => {
            if n != 2 {
                return refuse(GrowRefusal::LevelImpossible {
                    from,
                    to,
                    why: format!(
                        "md takes over a RAID 1 of two members only; it has {n} (`--raid-devices 2` first)"
                    ),
                });
            }
            // md's raid5_takeover_raid1: the largest chunk up to 64 KiB dividing the size.
            let mut c = 128u64;
            while c > 0 && !used.is_multiple_of(c) {
                c >>= 1;
            }
            if c < 8 {
                return refuse(GrowRefusal::LevelImpossible {
                    from,
                    to,
                    why: format!("its size ({used} sectors) is not a whole number of 4 KiB"),
                });
            }
            (2, default_layout(5), c)
        }
        (5, 1) => {
            if n != 2 {
                return refuse(GrowRefusal::LevelImpossible {
                    from,
                    to,
                    why: format!("md takes over a RAID 5 of two members only; it has {n}"),
                });
            }
            (2, 0, 0)
        }
        (0, 10) => (2 * n, near2, chunk),
        (10, 0) => {
            if a.nsb.layout != near2 || !n.is_multiple_of(2) {
                return refuse(GrowRefusal::LevelImpossible {
                    from,
                    to,
                    why: "md takes over a RAID 10 of two near copies on an even number of members only"
                        .into(),
                });
            }
            (n / 2, 0, chunk)
        }
        _ => return Ok(None),
    };
    if target.raid_devices.is_some_and(|k| k != count)
        || target.layout.is_some_and(|l| l != layout)
        || target.chunk_sectors.is_some_and(|c| c != new_chunk)
    {
        return refuse(GrowRefusal::ReshapeNotYet {
            what: format!(
                "RAID {from} to RAID {to} with another member count, layout or chunk in one step (change the level first)"
            ),
        });
    }
    if a.reshape.is_some() {
        return refuse(GrowRefusal::WorkPending {
            what: "a reshape (`raidkit grow --continue`)".into(),
        });
    }
    if from == 0 {
        one_zone(a, found, to)?;
    }
    // A RAID 10 going to RAID 0 keeps one in-sync member of each pair: the other may be
    // missing or failed already (md's "all mirrors must be already degraded", which mdadm
    // arranges by removing them).
    common_refusals(a, if from == 10 { n / 2 } else { 0 })?;
    let in_sync = |s: usize| !a.slots_not_in_sync().contains(&s);
    let old_slots: Vec<Option<usize>> = a.slot_member.iter().map(|m| m.map(|m| m.0)).collect();
    // The slot each member takes; `None`: it leaves as a spare.
    let mut new_slot: Vec<(usize, Option<usize>)> = Vec::new();
    let mut rebuild = Vec::new();
    let mut new_members = Vec::new();
    let mut recovering = Vec::new();
    match (from, to) {
        (0, 10) => {
            for (k, m) in old_slots.iter().enumerate() {
                new_slot.extend(m.map(|i| (i, Some(2 * k))));
            }
            let spares = (0..found.len())
                .filter(|&i| a.use_member[MemberId(i)] && found[i].sb.role() == DevRole::Spare)
                .filter(|&i| !old_slots.contains(&Some(i)));
            for (k, i) in spares.take(n).enumerate() {
                if found[i].sb.data_size_sectors < used {
                    return refuse(GrowRefusal::NoRoom {
                        member: names[i].clone(),
                        available_sectors: found[i].sb.data_size_sectors,
                        asked_sectors: used,
                    });
                }
                new_slot.push((i, Some(2 * k + 1)));
                rebuild.push(2 * k + 1);
                recovering.push(i);
                new_members.push((names[i].clone(), 2 * k + 1));
            }
        }
        (10, 0) => {
            let spares = (0..found.len())
                .filter(|&i| a.use_member[MemberId(i)] && found[i].sb.role() == DevRole::Spare)
                .filter(|&i| !old_slots.contains(&Some(i)));
            new_slot.extend(spares.map(|i| (i, None)));
            for k in 0..n / 2 {
                let keep = [2 * k, 2 * k + 1]
                    .into_iter()
                    .find(|&s| in_sync(s) && old_slots[s].is_some());
                let Some(keep) = keep else {
                    return refuse(GrowRefusal::NotWhole {
                        slots: vec![2 * k, 2 * k + 1],
                    });
                };
                for s in [2 * k, 2 * k + 1] {
                    if let Some(i) = old_slots[s] {
                        new_slot.push((i, (s == keep).then_some(k)));
                    }
                }
            }
        }
        _ => {
            for (k, m) in old_slots.iter().enumerate() {
                new_slot.extend(m.map(|i| (i, Some(k))));
            }
        }
    }
    let t = now();
    let mut sbs = a.sbs.to_vec();
    for sb in sbs.iter_mut() {
        sb.level = raidkit_metadata::Level::from_md(to);
        sb.layout = layout;
        sb.chunk_sectors = new_chunk as u32;
        sb.raid_disks = count as u32;
        sb.size_sectors = used;
        sb.feature_map.remove(FeatureMap::RAID0_LAYOUT);
        sb.events = a.nsb.events;
        sb.bump_events(t);
        // A member missing now (failed, or not given) held a slot of the old level: it holds
        // none of the new one (md removed it before; mdadm's takeover needs it gone).
        let kept: Vec<u32> = new_slot
            .iter()
            .map(|&(i, _)| found[i].sb.dev_number)
            .collect();
        let gone: Vec<u32> = (0..sb.dev_roles().len() as u32)
            .filter(|d| matches!(sb.role_of(*d), DevRole::Active(_)) && !kept.contains(d))
            .collect();
        for d in gone {
            sb.set_role(d, DevRole::Faulty)
                .map_err(|e| EngineError::Metadata(e.to_string()))?;
        }
        for &(i, slot) in &new_slot {
            // A RAID 0 holds no spares (md refuses to run one with any): the members that
            // leave are removed as mdadm removes them (failed, then taken out), recorded
            // faulty, and their own superblocks stay as they were, the array's older state.
            let role = slot.map_or(DevRole::Faulty, |s| DevRole::Active(s as u16));
            sb.set_role(found[i].sb.dev_number, role)
                .map_err(|e| EngineError::Metadata(e.to_string()))?;
        }
    }
    for &i in &recovering {
        sbs[i].set_recovery_offset(0);
    }
    let leave = new_slot
        .iter()
        .filter(|(_, s)| s.is_none())
        .map(|&(i, _)| i)
        .collect();
    let invalid = |e: crate::geometry::GeoError| EngineError::Invalid(e.to_string());
    let geo = Geo::new(to, layout, count, new_chunk, used).map_err(invalid)?;
    Ok(Some(Plan::Takeover {
        sbs,
        new_members,
        old: geo,
        rebuild,
        leave,
    }))
}

/// md takes over a RAID 0 of one zone only: members of one size (whole chunks).
fn one_zone(a: &Assembly, found: &[FoundSuperblock], to: i32) -> Result<()> {
    let chunk = a.geo.chunk_sectors;
    let sizes = a.slot_member.iter().flatten().map(|m| {
        let sb = &found[m.0].sb;
        sb.data_size_sectors / chunk * chunk
    });
    if sizes.clone().min() != sizes.max() {
        return Err(EngineError::CannotGrow(GrowRefusal::LevelImpossible {
            from: 0,
            to,
            why: "its members differ in size (md takes over a RAID 0 of one zone only)".into(),
        }));
    }
    Ok(())
}

/// The members of slots `from` on leave the array as spares (every superblock says so).
fn leave_as_spares(
    sbs: &mut [Superblock],
    slot_member: &[Option<usize>],
    found: &[FoundSuperblock],
    from: usize,
) -> Result<()> {
    for &i in slot_member.iter().skip(from).flatten() {
        for sb in sbs.iter_mut() {
            sb.set_role(found[i].sb.dev_number, DevRole::Spare)
                .map_err(|e| EngineError::Metadata(e.to_string()))?;
        }
    }
    Ok(())
}

/// The rule of a reshape from `od` to `nd` data members: forward, or backward when
/// `backward` (fewer).
fn way(oc: u64, od: u64, nc: u64, nd: u64, diff: u64, end: u64, backward: bool) -> Way {
    let rule = Rule {
        old_chunk: oc,
        old_data: od,
        new_chunk: nc,
        new_data: nd,
        diff,
        end,
    };
    if backward {
        Way::Backward(rule)
    } else {
        Way::Forward(rule)
    }
}

/// How a reshape starts.
enum Plan {
    /// Every stripe is rewritten in the new layout.
    Restripe {
        shape: Box<Shape>,
        sbs: Vec<Superblock>,
        new_members: Vec<(String, usize)>,
    },
    /// Only the level changes (md's takeover): the superblocks are written and the new
    /// parity slots are rebuilt.
    Takeover {
        sbs: Vec<Superblock>,
        new_members: Vec<(String, usize)>,
        /// The geometry from now on.
        old: Geo,
        rebuild: Vec<usize>,
        /// Members that leave the array with their superblocks untouched (removed, as md
        /// removes a member: the others record it faulty).
        leave: Vec<usize>,
    },
}

/// What refuses a reshape whether it starts or goes on: with more than `may_lose` slots not
/// in sync, among others (a reshape starts on a whole array; one md or raidkit began goes on
/// degraded, as md's does).
fn common_refusals(a: &Assembly, may_lose: usize) -> Result<()> {
    let refuse = |why| Err(EngineError::CannotGrow(why));
    if a.nsb.bitmap_offset().is_some() {
        return refuse(GrowRefusal::Bitmap);
    }
    for (flag, policy) in [(FeatureMap::PPL, "ppl"), (FeatureMap::JOURNAL, "journal")] {
        if a.nsb.feature_map.contains(flag) {
            return refuse(GrowRefusal::WriteLog { policy });
        }
    }
    let not_whole = a.slots_not_in_sync();
    if not_whole.len() > may_lose {
        return refuse(GrowRefusal::NotWhole { slots: not_whole });
    }
    if a.report.was_dirty && a.reshape.is_none() {
        return refuse(GrowRefusal::WorkPending {
            what: "the array was not stopped cleanly: its resync".into(),
        });
    }
    Ok(())
}

/// Where the bad-block log of a member ends (sectors from the device's start), if it has one.
fn bblog_end(sb: &Superblock) -> Option<u64> {
    (sb.bblog_size_sectors > 0).then(|| {
        (sb.super_offset_sectors as i64 + sb.bblog_offset as i64 + sb.bblog_size_sectors as i64)
            .max(0) as u64
    })
}

/// Decides how a recorded reshape goes on (no I/O): both layouts from the superblocks, the
/// members by slot, each member's offsets, and the position to start from.
pub(super) fn resume_plan(a: &Assembly, found: &[FoundSuperblock]) -> Result<(Shape, u64)> {
    let refuse = |why| Err(EngineError::CannotGrow(why));
    let Some(r) = a.reshape else {
        return refuse(GrowRefusal::NoReshape);
    };
    // The sections are counted apart below (md's raid5_calc_degraded).
    common_refusals(a, usize::MAX)?;
    let md_level = a.nsb.level.to_md();
    let new_count = a.geo.raid_disks;
    let old_count = new_count as i64 - r.delta_disks as i64;
    let unsupported = |what: String| refuse(GrowRefusal::ReshapeNotYet { what });
    if !matches!(md_level, 4..=6 | 10) || r.new_level != md_level {
        return unsupported(format!(
            "a reshape from RAID {md_level} to RAID {}",
            r.new_level
        ));
    }
    if old_count < 2 || (r.delta_disks < 0 && !matches!(md_level, 4..=6)) {
        return unsupported(format!("a reshape by {} members", r.delta_disks));
    }
    if md_level == 10 {
        let target = ReshapeTarget {
            raid_devices: Some(new_count),
            layout: Some(r.new_layout),
            ..Default::default()
        };
        raid10_reshapable(a.nsb.layout, old_count as usize, &target)?;
    }
    let used = a.geo.member_data_sectors;
    let invalid = |e: crate::geometry::GeoError| EngineError::Invalid(e.to_string());
    let (old_chunk, new_chunk) = (a.nsb.chunk_sectors as u64, r.new_chunk_sectors as u64);
    let old =
        Geo::new(md_level, a.nsb.layout, old_count as usize, old_chunk, used).map_err(invalid)?;
    let new = Geo::new(r.new_level, r.new_layout, new_count, new_chunk, used).map_err(invalid)?;
    let (od, nd) = (old.data_disks() as u64, new.data_disks() as u64);
    let backward = nd < od;
    if backward && r.delta_disks >= 0 {
        return unsupported(format!(
            "going from {od} to {nd} data members without fewer members"
        ));
    }
    let pos = r.reshape_position_sectors;
    let slot_member: Vec<Option<usize>> = a.slot_member.iter().map(|m| m.map(|m| m.0)).collect();
    // A member being recovered in a slot of the old layout is one the reshape fills (md's new
    // Q member): fresh, when it is recovered as far as the reshape went. One superblock round
    // behind counts: every member was flushed up to the position before any recorded it.
    let slots = slot_member.len();
    let mut fresh = vec![false; slots];
    let mut lost = vec![false; slots];
    for (slot, state) in a.slot_state.iter().enumerate() {
        let sb = slot_member[slot].map(|i| &found[i].sb);
        let current = sb.is_some_and(|sb| {
            sb.recovery_offset().is_some_and(|at| at >= pos / nd) || sb.events + 1 >= a.nsb.events
        });
        match *state {
            MemberState::InSync => {}
            MemberState::Rebuilding if slot < old.raid_disks && current => fresh[slot] = true,
            _ => lost[slot] = true,
        }
    }
    let mut old_offset = Vec::with_capacity(new_count);
    let mut new_offset = Vec::with_capacity(new_count);
    for (slot, m) in slot_member.iter().enumerate() {
        let Some(i) = m.filter(|_| !lost[slot]) else {
            old_offset.push(0);
            new_offset.push(0);
            continue;
        };
        let sb = &found[i].sb;
        // A member one round behind the start records no reshape yet (nothing moved before
        // every member recorded it): it moves as the newest does, which its room allows
        // (every member had the room for the move chosen).
        let own = if sb.reshape().is_some() { sb } else { &a.nsb };
        let moved = if own.feature_map.contains(FeatureMap::NEW_OFFSET) {
            own.reshape.new_offset_sectors as i64
        } else {
            0
        };
        old_offset.push(sb.data_offset_sectors);
        new_offset.push((sb.data_offset_sectors as i64 + moved).max(0) as u64);
    }
    // md's min_offset_diff: the least move over the members, down (up when the array
    // shrinks, md's reshape_backwards); a reshape moving data the other way, or not at all,
    // is md's backup-file kind.
    let sign = if backward { -1 } else { 1 };
    let diff = old_offset
        .iter()
        .zip(&new_offset)
        .zip(&lost)
        .filter(|(_, &gone)| !gone)
        .map(|((&o, &n), _)| (o as i64 - n as i64) * sign)
        .min()
        .unwrap_or(0);
    if diff <= 0 {
        return unsupported(
            "a reshape that does not move the data offset (md's backup-file reshapes)".into(),
        );
    }
    let way = way(
        old_chunk,
        od,
        new_chunk,
        nd,
        diff as u64,
        new.array_sectors(),
        backward,
    );
    if !way.can_resume(pos) {
        return refuse(GrowRefusal::TooEarly { position: pos });
    }
    let finish_as = if backward {
        Some((md_level, r.new_layout, new_count))
    } else {
        raid0_growing(a).then_some((0, 0, new_count - 1))
    };
    let shape = Shape {
        old,
        new,
        way,
        slot_member,
        lost,
        fresh,
        finish_as,
        old_offset,
        new_offset,
    };
    if !shape.survives_losing(None) {
        let slots = (0..slots)
            .filter(|&s| shape.lost[s] || (s < shape.old.raid_disks && !shape.old_readable(s)))
            .collect();
        return refuse(GrowRefusal::NotWhole { slots });
    }
    Ok((shape, pos))
}

/// Whether a recorded reshape is a RAID 0 growing (mdadm's way: a RAID 4 whose parity slot,
/// the last, no device was ever given), to be a RAID 0 again at its end.
fn raid0_growing(a: &Assembly) -> bool {
    let last = a.geo.raid_disks.saturating_sub(1) as u16;
    // A chunk change keeps the count: then only a parity slot nobody ever held (no member
    // recorded faulty) says so, where a RAID 4 that lost its parity member records it.
    let roles = || (0..a.nsb.max_dev()).map(|d| a.nsb.role_of(d));
    a.nsb.level.to_md() == 4
        && a.reshape.is_some_and(|r| {
            r.delta_disks > 0 || (r.delta_disks == 0 && roles().all(|r| r != DevRole::Faulty))
        })
        && roles().all(|r| r != DevRole::Active(last))
}

/// A reshape run's state: the members, who is written, the superblocks, what happened.
struct Run<'r> {
    members: &'r [Box<dyn Disk>],
    found: &'r [FoundSuperblock],
    shape: Shape,
    sbs: Vec<Superblock>,
    /// Members whose superblocks are written: those assembly uses, but for the lost.
    written: Vec<bool>,
    events: u64,
    report: ReshapeReport,
}

impl Run<'_> {
    /// md's answer to a member failing in a reshape: faulty, and the reshape goes on without
    /// it while the array survives (recorded at the next round of superblocks).
    fn lose(&mut self, slot: usize, err: EngineError) -> Result<()> {
        // The new layout must survive the loss, and so must the old one still to be read
        // (where a fresh slot already counts as lost).
        if !self.shape.survives_losing(Some(slot)) {
            return Err(err);
        }
        let i = self.shape.slot_member[slot].expect("a slot being written has a member");
        self.shape.lost[slot] = true;
        self.written[i] = false;
        let dev = self.found[i].sb.dev_number;
        for sb in self.sbs.iter_mut() {
            sb.set_role(dev, DevRole::Faulty)
                .map_err(|e| EngineError::Metadata(e.to_string()))?;
        }
        self.report
            .failed_members
            .push(self.members[i].name().to_string());
        Ok(())
    }

    /// Flushes every member, then records the reshape at `pos` in every superblock; a
    /// member that fails either is lost and the round made again without it.
    fn checkpoint(&mut self, pos: u64) -> Result<()> {
        loop {
            let mut failed = None;
            for slot in 0..self.shape.slot_member.len() {
                if let Some(m) = self.shape.member(self.members, slot) {
                    if let Err(e) = m.flush() {
                        failed = Some((slot, EngineError::from(e)));
                        break;
                    }
                }
            }
            if failed.is_none() {
                for (i, sb) in self.sbs.iter_mut().enumerate() {
                    record(sb, &self.shape, i, pos);
                }
                failed = self.round().err().map(|(i, e)| {
                    let slot = self.shape.slot_of(i).expect("written members have slots");
                    (slot, e)
                });
            }
            match failed {
                None => break,
                Some((slot, e)) => self.lose(slot, e)?,
            }
        }
        self.report.checkpoints += 1;
        Ok(())
    }

    /// One round of superblocks (events one past the last); the member that failed, if one.
    fn round(&mut self) -> std::result::Result<(), (usize, EngineError)> {
        let t = now();
        for (i, sb) in self.sbs.iter_mut().enumerate() {
            if !self.written[i] {
                continue;
            }
            sb.events = self.events;
            sb.bump_events(t);
            let disk = self.members[i].as_ref();
            write_superblock(disk, sb, self.found[i].version)
                .and_then(|_| disk.flush().map_err(EngineError::from))
                .map_err(|e| (i, e))?;
        }
        self.events += 1;
        Ok(())
    }
}

/// Moves the data from `start` to the end, recording progress, then writes the superblocks
/// of the finished array.
fn run(
    members: &[Box<dyn Disk>],
    found: &[FoundSuperblock],
    a: &Assembly,
    shape: Shape,
    sbs: Vec<Superblock>,
    start: Start,
    ctl: &ReshapeControl,
) -> Result<ReshapeReport> {
    let mut written: Vec<bool> = (0..members.len())
        .map(|i| a.use_member[MemberId(i)])
        .collect();
    for (slot, m) in shape.slot_member.iter().enumerate() {
        if let (true, Some(i)) = (shape.lost[slot], m) {
            written[*i] = false;
        }
    }
    let progress = ctl.progress;
    let f = shape.way;
    let start_at = match start {
        Start::Fresh => f.first(),
        Start::At(pos) => pos,
    };
    let total = f.end() * SECTOR as u64;
    let old_end = shape.old.array_sectors();
    let max_step = MAX_STEP_BYTES / SECTOR as u64;
    let first = (0..shape.lost.len()).find(|&s| !shape.lost[s]).unwrap_or(0);
    let report = ReshapeReport {
        old_raid_devices: shape.old.raid_disks,
        new_raid_devices: shape.new.raid_disks,
        old_level: shape.old.md_level(),
        new_level: shape.new.md_level(),
        old_layout: shape.old.md_layout(),
        new_layout: shape.new.md_layout(),
        old_chunk_sectors: shape.old.chunk_sectors,
        new_chunk_sectors: shape.new.chunk_sectors,
        new_members: Vec::new(),
        old_array_bytes: old_end * SECTOR as u64,
        new_array_bytes: total,
        started_at_sectors: start_at,
        checkpoints: 0,
        read_bytes: 0,
        written_bytes: 0,
        old_data_offset: shape.old_offset[first],
        new_data_offset: shape.new_offset[first],
        failed_members: Vec::new(),
        finished: false,
        position_sectors: start_at,
        backwards: matches!(f, Way::Backward(_)),
        rebuild_slots: Vec::new(),
        left_members: Vec::new(),
    };
    let mut run = Run {
        members,
        found,
        shape,
        sbs,
        written,
        events: a.nsb.events,
        report,
    };
    if let Start::Fresh = start {
        for (i, sb) in run.sbs.iter_mut().enumerate() {
            record(sb, &run.shape, i, start_at);
        }
        // Members before it may have recorded the start: a member failing here is lost as
        // anywhere in the reshape (recorded faulty, the round made again without it), and
        // the reshape goes on while both layouts survive; nothing has moved yet.
        while let Err((i, e)) = run.round() {
            let Some(slot) = run.shape.slot_of(i) else {
                return Err(e);
            };
            run.lose(slot, e)?;
        }
    }
    let (mut pos, mut recorded) = (start_at, start_at);
    let mut last = Instant::now();
    let mut bufs = StepBuffers::default();
    progress(f.done(pos) * SECTOR as u64, total);
    let pause = ctl.pause_at_bytes.map_or(u64::MAX, |b| b / SECTOR as u64);
    // Two sets of old-layout buffers: this step's, and the next step's, read while this one
    // is laid out and written (the drives stay busy; the read is of old rows the rule keeps
    // this step's writes away from).
    let (mut old, mut spare): (Vec<Vec<u8>>, Vec<Vec<u8>>) = Default::default();
    type Ahead<'s> = std::thread::ScopedJoinHandle<'s, (Vec<Vec<u8>>, StepRead)>;
    let stopped = std::thread::scope(|sc| -> Result<bool> {
        // The read of the next step: its range, the slots lost when it began, its thread.
        let mut ahead: Option<((u64, u64), Vec<bool>, Ahead<'_>)> = None;
        let join = |h: Ahead<'_>| {
            h.join().unwrap_or_else(|_| {
                let panicked = EngineError::Invalid("a reshape read thread panicked".into());
                (Vec::new(), Err(StepError::Other(panicked)))
            })
        };
        while pos != f.last() {
            if ctl.stop.load(Ordering::Relaxed) || f.done(pos) >= pause {
                if let Some((.., h)) = ahead.take() {
                    // Its data is not used.
                    let _ = join(h);
                }
                run.checkpoint(pos)?;
                return Ok(true);
            }
            // Up to the pause at most (a step moves one unit at least).
            let cap = max_step.min(pause - f.done(pos));
            let mut range = f.step(pos, recorded, cap);
            if range.0 == range.1 || last.elapsed() >= CHECKPOINT_EVERY {
                run.checkpoint(pos)?;
                (recorded, last) = (pos, Instant::now());
                range = f.step(pos, recorded, cap);
                if range.0 == range.1 {
                    return Err(EngineError::Invalid(format!(
                        "reshape: no new stripe fits at array sector {pos} (data offsets moved by {} sectors)",
                        f.diff()
                    )));
                }
            }
            let (from, to) = range;
            // This step's old data: the read ahead when it read this range with the same
            // slots lost, else read now.
            let mut read = None;
            if let Some((r, lost, h)) = ahead.take() {
                let (got, result) = join(h);
                if r == range && lost == run.shape.lost {
                    (old, read) = (got, Some(result));
                } else {
                    spare = got;
                }
            }
            let read = match read {
                Some(r) => r,
                None => read_old(members, &run.shape, &mut old, from, to, old_end),
            };
            let next_pos = f.after(range);
            let result = read.and_then(|r| {
                // The next step's read, on its way while this step is written.
                let next_cap = max_step.min(pause.saturating_sub(f.done(next_pos)));
                if next_pos != f.last() && next_cap > 0 {
                    let here = f.step(next_pos, recorded, next_cap);
                    let rec = if here.0 < here.1 { recorded } else { next_pos };
                    let next = f.step(next_pos, rec, next_cap);
                    if next.0 < next.1 {
                        let shape = run.shape.clone();
                        let mut into = std::mem::take(&mut spare);
                        let h = sc.spawn(move || {
                            let r = read_old(members, &shape, &mut into, next.0, next.1, old_end);
                            (into, r)
                        });
                        ahead = Some((next, run.shape.lost.clone(), h));
                    }
                }
                let w = write_new(members, &run.shape, &old, &mut bufs, from, to, old_end)?;
                Ok((r, w))
            });
            match result {
                Ok((r, w)) => {
                    run.report.read_bytes += r;
                    run.report.written_bytes += w;
                    pos = next_pos;
                    progress(f.done(pos) * SECTOR as u64, total);
                    // This step's buffers take the read after next.
                    if spare.is_empty() {
                        spare = std::mem::take(&mut old);
                    }
                }
                Err(StepError::Other(e)) => return Err(e),
                Err(StepError::Member(slot, e)) => {
                    // Recorded before the step runs again from `pos` (the read ahead, made
                    // with the member, is not used).
                    run.lose(slot, e)?;
                    run.checkpoint(pos)?;
                    (recorded, last) = (pos, Instant::now());
                }
            }
        }
        if let Some((.., h)) = ahead.take() {
            let _ = join(h);
        }
        Ok(false)
    })?;
    if stopped {
        run.report.position_sectors = pos;
        return Ok(run.report);
    }
    // Everything moved: recorded as such first, so a member that misses the last round
    // below still says where its data is.
    run.checkpoint(f.last())?;
    let shape = &run.shape;
    let (level, layout, count) = shape.finish_as.unwrap_or((
        shape.new.md_level(),
        shape.new.md_layout(),
        shape.new.raid_disks,
    ));
    for (i, sb) in run.sbs.iter_mut().enumerate() {
        sb.level = raidkit_metadata::Level::from_md(level);
        sb.layout = layout;
        sb.raid_disks = count as u32;
        sb.chunk_sectors = shape.new.chunk_sectors as u32;
        let Some(slot) = shape.slot_of(i) else {
            // Spares stay spares; their placement stays their own.
            finish_fields(sb);
            continue;
        };
        // The data area starts where the new layout does: lower by the move (more room),
        // or higher (less).
        let (o, n) = (shape.old_offset[slot], shape.new_offset[slot]);
        sb.data_offset_sectors = n;
        sb.data_size_sectors = (sb.data_size_sectors + o).saturating_sub(n);
        if shape.fresh[slot] {
            sb.clear_recovery_offset();
        }
        finish_fields(sb);
    }
    leave_as_spares(&mut run.sbs, &shape.slot_member, run.found, count)?;
    // A member failing now is recorded faulty by the round made without it.
    while let Err((i, e)) = run.round() {
        let slot = run.shape.slot_of(i).expect("written members have slots");
        run.lose(slot, e)?;
    }
    run.report.finished = true;
    run.report.position_sectors = f.last();
    (
        run.report.new_level,
        run.report.new_layout,
        run.report.new_raid_devices,
    ) = (level, layout, count);
    Ok(run.report)
}

/// md's fields once a reshape is over: no reshape, no new offset.
fn finish_fields(sb: &mut Superblock) {
    sb.reshape = ReshapeFields::default();
    for flag in [
        FeatureMap::RESHAPE_ACTIVE,
        FeatureMap::NEW_OFFSET,
        FeatureMap::RESHAPE_BACKWARDS,
    ] {
        sb.feature_map.remove(flag);
    }
}

/// Buffers reused from one step to the next: the new layout's member ranges and parity
/// scratch (the old layout's ranges travel between the reader and the step, see `run`).
#[derive(Default)]
struct StepBuffers {
    new: Vec<Vec<u8>>,
    scratch: (Vec<u8>, Vec<u8>),
}

/// What reading a step's old data gave: the bytes read.
type StepRead = std::result::Result<u64, StepError>;

/// Why a step stopped.
enum StepError {
    /// The member of this slot failed a read or write.
    Member(usize, EngineError),
    Other(EngineError),
}

/// The old layout's member sectors (from the data offset) holding array sectors
/// `[from, to)`: whole old stripes (rows), none past the old end.
fn old_range(shape: &Shape, from: u64, to: u64, old_end: u64) -> (u64, u64) {
    let (oc, od) = (shape.old.chunk_sectors, shape.old.data_disks() as u64);
    if from >= old_end {
        return (0, 0);
    }
    let unit = oc * od;
    (from / unit * oc, to.min(old_end).div_ceil(unit) * oc)
}

/// Reads the old layout's part of array sectors `[from, to)` from every slot that can be
/// read, all at once, into `old` (one buffer per old slot); a lost slot's part of a parity
/// level is rebuilt from parity (a fresh slot's, only the old Q, is not needed). Returns the
/// bytes read.
fn read_old(
    members: &[Box<dyn Disk>],
    shape: &Shape,
    old: &mut Vec<Vec<u8>>,
    from: u64,
    to: u64,
    old_end: u64,
) -> std::result::Result<u64, StepError> {
    let (o0, o1) = old_range(shape, from, to, old_end);
    let len = (o1 - o0) as usize * SECTOR;
    old.resize_with(shape.old.raid_disks, Vec::new);
    for b in old.iter_mut() {
        b.resize(len, 0);
    }
    if len == 0 {
        return Ok(0);
    }
    let read = |slot: usize, buf: &mut Vec<u8>| -> std::result::Result<(), StepError> {
        let Some(disk) = shape.member(members, slot).filter(|_| !shape.fresh[slot]) else {
            return Ok(());
        };
        let at = (shape.old_offset[slot] + o0) * SECTOR as u64;
        disk.read_at(buf, at)
            .map_err(|e| StepError::Member(slot, EngineError::from(e)))
    };
    all_slots(old, read)?;
    let parity = shape.old.level() != RaidLevel::Raid10;
    if parity && (0..shape.old.raid_disks).any(|s| shape.lost[s]) {
        let readable: Vec<bool> = (0..shape.old.raid_disks)
            .map(|s| shape.old_readable(s))
            .collect();
        crate::recon::parity_recover(&shape.old, o0, o1 - o0, old, &readable).map_err(|e| {
            StepError::Other(EngineError::Invalid(format!(
                "reshape: rebuilding a lost member: {e}"
            )))
        })?;
    }
    let readable = (0..shape.old.raid_disks)
        .filter(|&s| shape.old_readable(s))
        .count();
    Ok(len as u64 * readable as u64)
}

/// Lays array sectors `[from, to)` out in the new layout from `old` (as [`read_old`] read
/// it; zeros past the old end), with fresh parity or every copy, and writes the new
/// layout's rows, every member at once (but the lost). Returns the bytes written.
fn write_new(
    members: &[Box<dyn Disk>],
    shape: &Shape,
    old: &[Vec<u8>],
    bufs: &mut StepBuffers,
    from: u64,
    to: u64,
    old_end: u64,
) -> std::result::Result<u64, StepError> {
    let (oc, nc) = (shape.old.chunk_sectors, shape.new.chunk_sectors);
    let (od, nd) = (shape.old.data_disks() as u64, shape.new.data_disks() as u64);
    // New rows [n0, n1) in member sectors from the data offset; old rows from `o0`.
    let (n0, n1) = (from / nd, to / nd);
    let (o0, _) = old_range(shape, from, to, old_end);
    let new_len = (n1 - n0) as usize * SECTOR;
    bufs.new.resize_with(shape.new.raid_disks, Vec::new);
    // Every byte of a new buffer is written below (data, zeros past the old end, parity),
    // so what the last step left there is not cleared.
    for b in &mut bufs.new {
        b.resize(new_len, 0);
    }
    // A piece of the smaller chunk at a time (chunks are powers of two: a piece never
    // crosses a chunk of either layout).
    let piece = oc.min(nc);
    let piece_bytes = piece as usize * SECTOR;
    if shape.new.level() == RaidLevel::Raid10 {
        for at in (from..to).step_by(piece as usize) {
            let (targets, _) = shape.new.copies(at);
            if at >= old_end {
                for (slot, ms) in targets {
                    let dst = (ms - n0) as usize * SECTOR;
                    bufs.new[slot][dst..dst + piece_bytes].fill(0);
                }
                continue;
            }
            let (sources, _) = shape.old.copies(at);
            let Some(&(src_slot, src_ms)) = sources.iter().find(|(s, _)| shape.old_readable(*s))
            else {
                return Err(StepError::Other(EngineError::Invalid(format!(
                    "reshape: no copy of array sector {at} left to read"
                ))));
            };
            let src = (src_ms - o0) as usize * SECTOR;
            for (slot, ms) in targets {
                let dst = (ms - n0) as usize * SECTOR;
                bufs.new[slot][dst..dst + piece_bytes]
                    .copy_from_slice(&old[src_slot][src..src + piece_bytes]);
            }
        }
    } else {
        let os0 = o0 / oc;
        for ns in from / (nc * nd)..to / (nc * nd) {
            let info = shape.new.stripe(ns);
            for (dd, &slot) in info.data_members.iter().enumerate() {
                let chunk_start = (ns * nd + dd as u64) * nc;
                for at in (chunk_start..chunk_start + nc).step_by(piece as usize) {
                    let dst = (ns * nc - n0 + at % nc) as usize * SECTOR;
                    let dst = &mut bufs.new[slot][dst..dst + piece_bytes];
                    if at >= old_end {
                        dst.fill(0);
                        continue;
                    }
                    let chunk = at / oc;
                    let (os, odd) = (chunk / od, (chunk % od) as usize);
                    let from_slot = shape.old.stripe(os).data_members[odd];
                    let src = ((os - os0) * oc + at % oc) as usize * SECTOR;
                    dst.copy_from_slice(&old[from_slot][src..src + piece_bytes]);
                }
            }
        }
        crate::recon::parity_check(
            &shape.new,
            n0,
            n1 - n0,
            &mut bufs.new,
            true,
            &mut bufs.scratch,
        )
        .map_err(|e| {
            StepError::Other(EngineError::Invalid(format!(
                "reshape: parity of the new stripes: {e}"
            )))
        })?;
    }
    let write = |slot: usize, buf: &mut Vec<u8>| -> std::result::Result<(), StepError> {
        let Some(disk) = shape.member(members, slot) else {
            return Ok(());
        };
        let at = (shape.new_offset[slot] + n0) * SECTOR as u64;
        disk.write_at(buf, at)
            .map_err(|e| StepError::Member(slot, EngineError::from(e)))
    };
    all_slots(&mut bufs.new, write)?;
    Ok(new_len as u64 * shape.new.raid_disks as u64)
}

/// Runs `io` on every slot's buffer at once, one thread each; the first error wins.
fn all_slots<F>(bufs: &mut [Vec<u8>], io: F) -> std::result::Result<(), StepError>
where
    F: Fn(usize, &mut Vec<u8>) -> std::result::Result<(), StepError> + Sync,
{
    let io = &io;
    std::thread::scope(|s| {
        let jobs: Vec<_> = bufs
            .iter_mut()
            .enumerate()
            .map(|(slot, buf)| s.spawn(move || io(slot, buf)))
            .collect();
        let mut first = Ok(());
        for j in jobs {
            let r = j.join().unwrap_or_else(|_| {
                Err(StepError::Other(EngineError::Invalid(
                    "a reshape I/O thread panicked".into(),
                )))
            });
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}
