//! Growing the space an array uses on each member (md's `mdadm --grow --size`): after every
//! member was replaced by a larger one, or its device grew, the array takes the new room.
//!
//! md records the new size and resyncs the new region (its `recovery_cp` drops to the old
//! size). raidkit instead zeroes the new region of every member in sync first and only then
//! records the size: zeroed data chunks have zero P and Q and equal copies, so the region is
//! consistent before the array can use it, with no resync to finish and nothing for a crash to
//! interrupt. A crash while zeroing leaves the old size recorded (the command is run again);
//! the superblocks are then written in two rounds, each member's own `data_size` first and the
//! array's `size` (with the event count raised) second, so a crash between the two, or part
//! way through the second, leaves every member able to hold the size that the newest
//! superblock records.

use super::*;
use crate::error::GrowRefusal;
use crate::meta::FoundSuperblock;
use std::sync::atomic::{AtomicU64, Ordering};

/// How much of each member `grow --size` should use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrowSize {
    /// All the room every member in sync has (md's `--size max`).
    Max,
    /// This many data sectors per member (rounded down to whole chunks).
    Sectors(u64),
}

/// What a size grow did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GrowSizeReport {
    pub old_member_sectors: u64,
    pub new_member_sectors: u64,
    pub old_array_bytes: u64,
    pub new_array_bytes: u64,
    /// Bytes of new room zeroed on the members, summed over the members.
    pub zeroed_bytes: u64,
}

/// Bytes written per zeroing request.
const ZERO_CHUNK: usize = 1 << 20;

impl Array {
    /// Grows the space the stopped array on `members` uses on each of them to `size`,
    /// zeroing the new room first (see the module's notes). `progress` is called with
    /// (bytes zeroed so far, bytes to zero). Refuses, writing nothing, where md would refuse
    /// or where the array is not whole and clean: [`EngineError::CannotGrow`].
    pub fn grow_size(
        members: Vec<Box<dyn Disk>>,
        size: GrowSize,
        opts: &AssembleOptions,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<GrowSizeReport> {
        let (found, names, decided) = decide_stopped(&members, opts)?;
        let plan = size_plan(&decided, &names, &found, size)?;
        let old_array_bytes = decided.geo.array_sectors() * SECTOR as u64;
        let new_geo = Geo::new(
            decided.nsb.level.to_md(),
            decided.nsb.layout,
            decided.geo.raid_disks,
            decided.geo.chunk_sectors,
            plan.new_sectors,
        )
        .map_err(|e| EngineError::Invalid(e.to_string()))?;

        // 1. Zero the new room of every member in sync, all members at once.
        let region = (plan.new_sectors - plan.old_sectors) * SECTOR as u64;
        let in_sync: Vec<usize> = decided.slot_member.iter().flatten().map(|i| i.0).collect();
        let total = region * in_sync.len() as u64;
        let done = AtomicU64::new(0);
        let zeroed: Vec<Result<()>> = std::thread::scope(|scope| {
            let jobs: Vec<_> = in_sync
                .iter()
                .map(|&i| {
                    let (disk, sb, done) = (&members[i], &found[i].sb, &done);
                    let from = (sb.data_offset_sectors + plan.old_sectors) * SECTOR as u64;
                    scope.spawn(move || zero_range(disk.as_ref(), from, region, done))
                })
                .collect();
            while jobs.iter().any(|j| !j.is_finished()) {
                progress(done.load(Ordering::Relaxed), total);
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            jobs.into_iter()
                .map(|j| j.join().unwrap_or_else(|_| Err(panicked())))
                .collect()
        });
        zeroed.into_iter().collect::<Result<Vec<()>>>()?;
        progress(total, total);

        // 2. Each member's own room (`data_size`), where its device grew. Members assembly
        // leaves out (stale, faulty, replaced) are never written, as mdadm never writes them.
        let used = |i: usize| decided.use_member[MemberId(i)];
        let mut sbs: Vec<Superblock> = decided.sbs.to_vec();
        for (i, sb) in sbs.iter_mut().enumerate().filter(|(i, _)| used(*i)) {
            if let Some(room) = plan.data_size[i] {
                if room != sb.data_size_sectors {
                    sb.data_size_sectors = room;
                    write_superblock(members[i].as_ref(), sb, found[i].version)?;
                    members[i].flush()?;
                }
            }
        }
        // 3. The array's size, with the event count one past the newest.
        let t = now();
        for (i, sb) in sbs.iter_mut().enumerate().filter(|(i, _)| used(*i)) {
            sb.size_sectors = plan.new_sectors;
            sb.events = decided.nsb.events;
            sb.bump_events(t);
            write_superblock(members[i].as_ref(), sb, found[i].version)?;
            members[i].flush()?;
        }
        Ok(GrowSizeReport {
            old_member_sectors: plan.old_sectors,
            new_member_sectors: plan.new_sectors,
            old_array_bytes,
            new_array_bytes: new_geo.array_sectors() * SECTOR as u64,
            zeroed_bytes: total,
        })
    }
}

/// The sizes a grow goes between, and each member's `data_size` from now on (`None`: left
/// as it is: a journal, or metadata 1.0, whose superblock sits at the device's old end).
struct SizePlan {
    old_sectors: u64,
    new_sectors: u64,
    data_size: Vec<Option<u64>>,
}

/// Decides a size grow on an assembly's decision alone (no I/O).
fn size_plan(
    a: &Assembly,
    names: &[String],
    found: &[FoundSuperblock],
    size: GrowSize,
) -> Result<SizePlan> {
    let refuse = |why| Err(EngineError::CannotGrow(why));
    let level = a.geo.level();
    if level == RaidLevel::Raid0 {
        return refuse(GrowRefusal::StripeLevel);
    }
    if level == RaidLevel::Raid10 {
        let (far, offset) = ((a.nsb.layout >> 8) & 0xff, a.nsb.layout & (1 << 16) != 0);
        if far > 1 && !offset {
            return refuse(GrowRefusal::FarLayout);
        }
    }
    if a.nsb.bitmap_offset().is_some() {
        return refuse(GrowRefusal::Bitmap);
    }
    let not_whole = a.slots_not_in_sync();
    if !not_whole.is_empty() {
        return refuse(GrowRefusal::NotWhole { slots: not_whole });
    }
    let what = if a.reshape.is_some() {
        Some("a reshape (`raidkit grow --continue`)".to_string())
    } else if a.report.was_dirty {
        Some("the array was not stopped cleanly: its resync or log replay".to_string())
    } else if !a.keep_replacing.is_empty() {
        Some("a replacement's copy".to_string())
    } else {
        None
    };
    if let Some(what) = what {
        return refuse(GrowRefusal::WorkPending { what });
    }
    let in_sync: Vec<usize> = a.slot_member.iter().flatten().map(|i| i.0).collect();
    // Room per member: up to the device's end behind the data offset (1.1 and 1.2 keep
    // everything else in front of the data); metadata 1.0 keeps its superblock, bitmap and
    // bad-block log behind the data, at the device's end as it was when they were written.
    let room = |f: &FoundSuperblock| match f.version {
        SuperblockVersion::V1_0 => None,
        _ => Some(f.device_sectors.saturating_sub(f.sb.data_offset_sectors)),
    };
    let data_size: Vec<Option<u64>> = found
        .iter()
        .map(|f| (f.sb.role() != DevRole::Journal).then(|| room(f)).flatten())
        .collect();
    let available = |i: usize| data_size[i].unwrap_or(found[i].sb.data_size_sectors);
    let unit = if level == RaidLevel::Raid1 {
        8
    } else {
        a.geo.chunk_sectors.max(8)
    };
    let old_sectors = a.geo.member_data_sectors;
    let most = in_sync.iter().map(|&i| available(i)).min().unwrap_or(0) / unit * unit;
    let asked = match size {
        GrowSize::Max => most,
        GrowSize::Sectors(s) => s / unit * unit,
    };
    if asked < old_sectors {
        return refuse(GrowRefusal::Shrink {
            current_sectors: old_sectors,
            asked_sectors: asked,
        });
    }
    if let Some(&i) = in_sync.iter().find(|&&i| available(i) < asked) {
        return refuse(GrowRefusal::NoRoom {
            member: names[i].clone(),
            available_sectors: available(i),
            asked_sectors: asked,
        });
    }
    if asked == old_sectors {
        return refuse(GrowRefusal::AlreadyThatSize {
            sectors: old_sectors,
        });
    }
    Ok(SizePlan {
        old_sectors,
        new_sectors: asked,
        data_size,
    })
}

/// The superblocks of the stopped array on `members`, their names, and what assembly
/// decides on them; refuses read-only members (a grow writes).
pub(super) fn decide_stopped(
    members: &[Box<dyn Disk>],
    opts: &AssembleOptions,
) -> Result<(Vec<FoundSuperblock>, Vec<String>, Assembly)> {
    if members.is_empty() {
        return Err(EngineError::Invalid("no members given".into()));
    }
    if opts.read_only || members.iter().any(|m| m.is_read_only()) {
        return Err(EngineError::ReadOnly);
    }
    read_and_decide(members, false, opts)
}

/// The superblocks on `members`, their names, and what assembly decides on them
/// (`read_only`: one of them cannot be written).
pub(super) fn read_and_decide(
    members: &[Box<dyn Disk>],
    read_only: bool,
    opts: &AssembleOptions,
) -> Result<(Vec<FoundSuperblock>, Vec<String>, Assembly)> {
    let found: Vec<FoundSuperblock> = members
        .iter()
        .map(|m| read_superblock(m.as_ref()))
        .collect::<Result<_>>()?;
    let names: Vec<String> = members.iter().map(|m| m.name().to_string()).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let decided = assembly::decide(&refs, &found, read_only, opts)?;
    Ok((found, names, decided))
}

/// Writes zeros over `len` bytes of `disk` from `from`, adding each write's bytes to `done`.
fn zero_range(disk: &dyn Disk, from: u64, len: u64, done: &AtomicU64) -> Result<()> {
    let zeros = vec![0u8; ZERO_CHUNK];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(ZERO_CHUNK as u64);
        disk.write_at(&zeros[..n as usize], from + at)?;
        at += n;
        done.fetch_add(n, Ordering::Relaxed);
    }
    disk.flush()?;
    Ok(())
}

fn panicked() -> EngineError {
    EngineError::Invalid("a zeroing thread panicked".into())
}

/// What a change of a mirror's member count did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GrowMirrorsReport {
    pub old_raid_devices: usize,
    pub new_raid_devices: usize,
    /// Spares given that took a new slot, by name, with the slot: they are rebuilt at the
    /// next assembly (`raidkit grow` runs it at once).
    pub new_slots: Vec<(String, usize)>,
    /// Members moved to a lower slot as the slots above the new count went (md's
    /// raid1_reshape does the same): (name, old slot, new slot).
    pub moved: Vec<(String, usize, usize)>,
    /// New slots no spare was given for: the array runs degraded until one is added.
    pub empty_slots: Vec<usize>,
}

impl Array {
    /// Changes the number of slots of the stopped RAID 1 on `members` to `raid_devices`
    /// (`mdadm --grow --raid-devices`). More slots: spares among `members` take the new
    /// slots (to be rebuilt), and slots no spare fills stay missing. Fewer slots: only once
    /// no more members than that fill slots (fail and remove the others first); members above
    /// the new count move down into free slots. Writes only superblocks (every member's, the
    /// event count raised once); refuses, writing nothing, with [`EngineError::CannotGrow`].
    pub fn grow_mirrors(
        members: Vec<Box<dyn Disk>>,
        raid_devices: usize,
        opts: &AssembleOptions,
    ) -> Result<GrowMirrorsReport> {
        let (found, names, a) = decide_stopped(&members, opts)?;
        let (sbs, report) = mirror_plan(&a, &names, &found, raid_devices)?;
        for (i, sb) in sbs.iter().enumerate() {
            if a.use_member[MemberId(i)] {
                write_superblock(members[i].as_ref(), sb, found[i].version)?;
                members[i].flush()?;
            }
        }
        Ok(report)
    }
}

/// Decides a change of a mirror's slot count on an assembly's decision alone (no I/O):
/// every member's superblock from now on, and what changed.
fn mirror_plan(
    a: &Assembly,
    names: &[String],
    found: &[FoundSuperblock],
    new: usize,
) -> Result<(Vec<Superblock>, GrowMirrorsReport)> {
    let refuse = |why| Err(EngineError::CannotGrow(why));
    let level = a.nsb.level.to_md();
    if a.geo.level() != RaidLevel::Raid1 {
        return refuse(GrowRefusal::CountNotMirror { level });
    }
    let old = a.geo.raid_disks;
    if new == old {
        return refuse(GrowRefusal::SameCount { raid_devices: old });
    }
    if new < 2 {
        return refuse(GrowRefusal::TooFew { asked: new });
    }
    let rebuilding: Vec<usize> = a
        .slot_state
        .enumerate()
        .filter(|(_, s)| matches!(s, MemberState::Rebuilding | MemberState::Faulty))
        .map(|(s, _)| s.0)
        .collect();
    let pending = if a.reshape.is_some() {
        Some("a reshape (`raidkit grow --continue`)".to_string())
    } else if a.report.was_dirty {
        Some("the array was not stopped cleanly: its resync".to_string())
    } else if !rebuilding.is_empty() {
        Some(format!("the rebuild of slots {rebuilding:?}"))
    } else if !a.keep_replacing.is_empty() {
        Some("a replacement's copy".to_string())
    } else {
        None
    };
    if let Some(what) = pending {
        return refuse(GrowRefusal::WorkPending { what });
    }
    // Slot of each member (by member index) from now on.
    let mut slot_of: Vec<Option<usize>> = vec![None; found.len()];
    let mut report = GrowMirrorsReport {
        old_raid_devices: old,
        new_raid_devices: new,
        new_slots: Vec::new(),
        moved: Vec::new(),
        empty_slots: Vec::new(),
    };
    let mut rebuilt: Vec<usize> = Vec::new();
    for (slot, m) in a.slot_member.enumerate() {
        if let Some(i) = m {
            slot_of[i.0] = Some(slot.0);
        }
    }
    if new > old {
        let spares: Vec<usize> = (0..found.len())
            .filter(|&i| {
                a.use_member[MemberId(i)]
                    && slot_of[i].is_none()
                    && found[i].sb.role() == DevRole::Spare
            })
            .collect();
        let mut free = old..new;
        for i in spares {
            let Some(slot) = free.next() else { break };
            slot_of[i] = Some(slot);
            rebuilt.push(i);
            report.new_slots.push((names[i].clone(), slot));
        }
        report.empty_slots = free.collect();
    } else {
        let in_use = slot_of.iter().flatten().count();
        if in_use > new {
            return refuse(GrowRefusal::MembersInUse { in_use, asked: new });
        }
        let taken: Vec<usize> = slot_of
            .iter()
            .flatten()
            .copied()
            .filter(|&s| s < new)
            .collect();
        let mut free = (0..new).filter(|s| !taken.contains(s));
        for (i, slot) in slot_of.iter_mut().enumerate() {
            if let Some(s) = *slot {
                if s >= new {
                    // `in_use <= new` leaves a free slot for every member above the count.
                    let to = free.next().expect("a free slot below the new count");
                    *slot = Some(to);
                    report.moved.push((names[i].clone(), s, to));
                }
            }
        }
    }
    let t = now();
    let mut sbs: Vec<Superblock> = a.sbs.to_vec();
    for sb in sbs.iter_mut() {
        sb.raid_disks = new as u32;
        // Roles: a member given takes its slot from now on; a device not given that the
        // table still lists in a slot that goes is recorded faulty.
        for d in 0..sb.max_dev() {
            if let DevRole::Active(s) = sb.role_of(d) {
                let given = found.iter().any(|f| f.sb.dev_number == d);
                if !given && s as usize >= new {
                    let _ = sb.set_role(d, DevRole::Faulty);
                }
            }
        }
        for (i, f) in found.iter().enumerate() {
            if let Some(s) = slot_of[i] {
                sb.set_role(f.sb.dev_number, DevRole::Active(s as u16))
                    .map_err(|e| EngineError::Metadata(e.to_string()))?;
            }
        }
        sb.events = a.nsb.events;
        sb.bump_events(t);
    }
    for i in rebuilt {
        // Rebuilt from the start at the next assembly.
        sbs[i].set_recovery_offset(0);
    }
    Ok((sbs, report))
}
