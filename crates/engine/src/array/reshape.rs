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
//! RAID 10 reshapes its near and offset layouts and one into the other, keeping the number
//! of copies as md does. Near copies go over any number of members (5 members of 2 copies
//! hold 5 chunks in two rows): the steps go chunk by chunk, each copy written only where the
//! old layout's cell holds nothing still needed ([`plan::reshape::Rule::step_end`]), so the
//! data offset moves by one chunk, as mdadm moves it. An offset layout's rows go in groups
//! of its far copies ([`lay`]), and its data offset moves by its chunk times those copies
//! (mdadm's `min_offset_change`, which md's `raid10_run` checks). Arrays in use are
//! reshaped by `online.rs`, step by step. (RAID 0 and RAID 10 of two near copies become each
//! other by md's takeovers, `takeover.rs`, nothing moving.) A new chunk for an offset layout
//! keeps the array's size or is refused: its groups of rows are the chunk times the far
//! copies, so a larger chunk can hold less of each member (`WouldShrink`, as md's "cannot
//! reduce size of array"). Not yet: fewer members for RAID 0 and 10, an offset layout over a
//! count that is not a whole number of its near copies, a RAID 10 change that would make the
//! array larger with the same members (md resyncs that room; refused here).

use super::grow::{decide_stopped, read_and_decide};
use super::*;
use crate::error::GrowRefusal;
use crate::membership::assembly::Assembly;
use crate::meta::FoundSuperblock;
use crate::plan::reshape::{self as rules, Rule, Way};
use raidkit_metadata::ReshapeFields;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod resume;
mod run;
mod start;
mod takeover;
pub(super) use resume::resume_plan;
use resume::*;
use run::*;
use start::*;
use takeover::*;

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

/// Where a geometry puts array sectors on its members, as the reshape's rules reason
/// ([`rules::Lay`]): a striped level's stripes over its data members, a RAID 10's near copies
/// over any number of members (not only a whole number of copies), an offset layout's rows in
/// groups of its far copies (a row of chunks, then the same row shifted by one member).
fn lay(geo: &Geo) -> rules::Lay {
    if geo.level() != RaidLevel::Raid10 {
        return rules::Lay::striped(geo.chunk_sectors, geo.data_disks() as u64);
    }
    // The geometry was built from this layout word, so it decodes.
    let l = raidkit_layout::Raid10Layout::from_md(geo.md_layout())
        .expect("a RAID 10 geometry's layout decodes");
    // A far (not offset) layout is never reshaped (refused first); its far rows are not a
    // group here.
    let far = if l.offset { u64::from(l.far) } else { 1 };
    rules::Lay::mirrored(
        geo.chunk_sectors,
        u64::from(l.near),
        geo.raid_disks as u64,
        far,
    )
}
