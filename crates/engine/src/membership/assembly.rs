//! md's assembly rules, decided on the members' superblocks alone (no I/O): which members
//! belong to the array and which slot each fills, which are stale, replaced, faulty or spare,
//! whether the array can start (degraded, dirty, without its journal) and what each member's
//! superblock says from now on. `Array::assemble` reads the superblocks, asks [`decide`], and
//! then attaches the members and carries the decision out.

use super::{ByMember, BySlot, MemberId, Slot};
use crate::array::{AssembleOptions, AssembleReport};
use crate::error::{AbsentMember, EngineError, Result};
use crate::events::{ArrayEvent, DirtyDegradedStart};
use crate::geometry::{Geo, Scheme};
use crate::meta::FoundSuperblock;
use crate::plan::MemberState;
use raidkit_layout::Level as RaidLevel;
use raidkit_metadata::{DevRole, FeatureMap, ReshapeFields, Superblock, SuperblockVersion, Uuid};

/// What assembly decided, for the driver to carry out.
#[derive(Debug)]
pub(crate) struct Assembly {
    pub(crate) geo: Geo,
    pub(crate) version: SuperblockVersion,
    /// The member with the newest superblock, which speaks for the array.
    pub(crate) newest: MemberId,
    /// That superblock.
    pub(crate) nsb: Superblock,
    /// Each member's superblock as it will next be written: the newest one's shared state,
    /// with the member's own identity and placement.
    pub(crate) sbs: ByMember<Superblock>,
    pub(crate) slot_member: BySlot<Option<MemberId>>,
    pub(crate) slot_state: BySlot<MemberState>,
    /// Members left out (stale, faulty, replaced): never attached, never written.
    pub(crate) use_member: ByMember<bool>,
    /// Replacements whose copy resumes beside their slot's member.
    pub(crate) keep_replacing: Vec<(MemberId, Slot)>,
    /// Device numbers of members a replacement displaced (recorded faulty).
    pub(crate) displaced: Vec<u32>,
    /// `--force` took stale members back: their superblocks get the array's events at once.
    pub(crate) forced_back: bool,
    /// A slot has no member in sync.
    pub(crate) degraded: bool,
    /// md's resync_offset: the lowest among the members that are current.
    pub(crate) resync_offset: u64,
    pub(crate) read_only: bool,
    pub(crate) report: AssembleReport,
    /// The reshape the newest superblock records in progress, if any: only `raidkit grow
    /// --continue` goes on from here.
    pub(crate) reshape: Option<ReshapeFields>,
}

impl Assembly {
    /// The slots without a member in sync (missing, faulty or being rebuilt).
    pub(crate) fn slots_not_in_sync(&self) -> Vec<usize> {
        self.slot_state
            .enumerate()
            .filter(|(_, s)| **s != MemberState::InSync)
            .map(|(s, _)| s.0)
            .collect()
    }
}

/// Decides an assembly from the superblocks `found` on members named `names` (in the order
/// given); `member_read_only`: one of the members cannot be written.
pub(crate) fn decide(
    names: &[&str],
    found: &[FoundSuperblock],
    member_read_only: bool,
    opts: &AssembleOptions,
) -> Result<Assembly> {
    let mut report = AssembleReport::default();
    // 2. Same member twice.
    for i in 0..found.len() {
        for j in 0..i {
            if names[i] == names[j] || found[i].sb.device_uuid == found[j].sb.device_uuid {
                return Err(EngineError::Duplicate {
                    member: names[i].to_string(),
                    other: names[j].to_string(),
                    device_uuid: found[i].sb.device_uuid.to_mdadm_string(),
                });
            }
        }
    }
    // 3. One array: the given UUID or the first member's.
    let (ref_uuid, ref_name) = match opts.uuid {
        Some(u) => (Uuid(u), "the UUID asked for".to_string()),
        None => (found[0].sb.set_uuid, names[0].to_string()),
    };
    for (m, f) in names.iter().zip(found) {
        if f.sb.set_uuid != ref_uuid {
            return Err(EngineError::Foreign {
                member: m.to_string(),
                member_uuid: f.sb.set_uuid.to_mdadm_string(),
                array_uuid: ref_uuid.to_mdadm_string(),
                reference: ref_name,
            });
        }
    }
    // 4. The members must agree on the array's shape. The shape most members share is
    //    the reference (ties go to the newest), so the odd member out is the one named.
    let newest = (0..found.len())
        .max_by_key(|&i| found[i].sb.events)
        .unwrap_or(0);
    // A member one superblock round behind the start of a reshape the newest records still
    // has the old member count, and the old level and layout where the reshape takes a RAID
    // 4 or 5 over (nothing moves before every member records the start): it counts as
    // having the newest's shape. So does a member one round behind a reshape's end, which
    // records the reshape finished (see `finished_behind`).
    let nsb0 = &found[newest].sb;
    let behind_start = |s: &Superblock| {
        nsb0.reshape().is_some_and(|r| {
            let added_q = match (s.level.to_md(), nsb0.level.to_md()) {
                (a, b) if a == b => Some(0),
                (4, 5) => Some(0),
                (4 | 5, 6) | (0, 4 | 5) => Some(1),
                (0, 6) => Some(2),
                _ => None,
            };
            s.reshape().is_none()
                && s.events + 1 == nsb0.events
                && added_q.is_some_and(|q| {
                    s.raid_disks as i64 + q == nsb0.raid_disks as i64 - r.delta_disks as i64
                })
        })
    };
    let shape = |f: &crate::meta::FoundSuperblock| {
        let s = &f.sb;
        match s.reshape() {
            // The shape the newest records: the start's, or the end's (which may differ
            // from the reshape's new layout: a RAID 0 that grew as a RAID 4 is a RAID 0
            // again).
            _ if behind_start(s)
                || finished_behind(s, nsb0).is_some()
                || took_over_behind(s, nsb0) =>
            {
                (
                    nsb0.level.to_md(),
                    nsb0.layout,
                    nsb0.chunk_sectors,
                    nsb0.raid_disks,
                    f.version.name(),
                )
            }
            _ => (
                s.level.to_md(),
                s.layout,
                s.chunk_sectors,
                s.raid_disks,
                f.version.name(),
            ),
        }
    };
    let count = |k: &(i32, u32, u32, u32, &str)| found.iter().filter(|f| shape(f) == *k).count();
    let mut reference = newest;
    for i in 0..found.len() {
        if count(&shape(&found[i])) > count(&shape(&found[reference])) {
            reference = i;
        }
    }
    let rname = names[reference].to_string();
    let rshape = shape(&found[reference]);
    for (m, f) in names.iter().zip(found) {
        let own = shape(f);
        // An older member the newest superblock does not give a slot, or whose device
        // number a newer member holds now (failed or removed before a reshape changed the
        // shape), is left out below by its role, not refused here: the array it left is not
        // its shape any more.
        let replaced = found
            .iter()
            .any(|o| o.sb.dev_number == f.sb.dev_number && o.sb.events > f.sb.events);
        if f.sb.events < nsb0.events
            && (replaced || !matches!(nsb0.role_of(f.sb.dev_number), DevRole::Active(_)))
        {
            continue;
        }
        let checks: [(&'static str, String, String); 5] = [
            ("level", own.0.to_string(), rshape.0.to_string()),
            ("layout", own.1.to_string(), rshape.1.to_string()),
            (
                "chunk size (sectors)",
                own.2.to_string(),
                rshape.2.to_string(),
            ),
            ("raid devices", own.3.to_string(), rshape.3.to_string()),
            ("metadata version", own.4.to_string(), rshape.4.to_string()),
        ];
        for (field, a, b) in checks {
            if a != b {
                return Err(EngineError::Mismatched {
                    member: m.to_string(),
                    field,
                    member_value: a,
                    array_value: b,
                    reference: rname.clone(),
                });
            }
        }
    }
    // The newest superblock speaks for the array's state.
    let nsb = found[newest].sb.clone();
    let version = found[newest].version;
    let level = nsb.level.to_md();
    if let Some(asked) = opts.level {
        if asked != level {
            return Err(EngineError::WrongLevel {
                asked,
                found: level,
            });
        }
    }
    let reshape = nsb.reshape().cloned();
    let raid_disks = nsb.raid_disks as usize;
    // 5. Sizes.
    let is_journal = |f: &crate::meta::FoundSuperblock| f.sb.role() == DevRole::Journal;
    let used = if nsb.size_sectors > 0 {
        nsb.size_sectors
    } else {
        let min = found
            .iter()
            .filter(|f| !is_journal(f))
            .map(|f| f.sb.data_size_sectors)
            .min()
            .unwrap_or(0);
        if nsb.chunk_sectors > 0 {
            min / nsb.chunk_sectors as u64 * nsb.chunk_sectors as u64
        } else {
            min
        }
    };
    for (m, f) in names.iter().zip(found) {
        if is_journal(f) {
            if f.sb.data_offset_sectors + f.sb.data_size_sectors > f.device_sectors {
                return Err(EngineError::SizeMismatch {
                    member: m.to_string(),
                    detail: format!(
                        "the journal's data area ends at sector {} of a {}-sector device",
                        f.sb.data_offset_sectors + f.sb.data_size_sectors,
                        f.device_sectors
                    ),
                });
            }
            continue;
        }
        let need = f.sb.data_offset_sectors + used;
        if f.sb.data_size_sectors < used || need > f.device_sectors {
            return Err(EngineError::SizeMismatch {
                member: m.to_string(),
                detail: format!(
                    "holds {} data sectors from sector {} on a {}-sector device, the array needs {} per member; the member is too small or truncated",
                    f.sb.data_size_sectors, f.sb.data_offset_sectors, f.device_sectors, used
                ),
            });
        }
    }
    let geo = Geo::new(
        level,
        nsb.layout,
        raid_disks,
        nsb.chunk_sectors as u64,
        used,
    )
    .map_err(|e| EngineError::Invalid(e.to_string()))?;
    // 6. Roles from the newest superblock.
    // While a reshape that removes members runs, the members leaving keep their slots past
    // the new count (md's previous_raid_disks).
    let slots = reshape.as_ref().map_or(raid_disks, |r| {
        raid_disks.max((raid_disks as i64 - r.delta_disks as i64).max(0) as usize)
    });
    let mut slot_member: BySlot<Option<MemberId>> = BySlot::filled(None, slots);
    let mut slot_state = BySlot::filled(MemberState::Missing, slots);
    let mut stale: Vec<MemberId> = Vec::new();
    let mut use_member = ByMember::filled(true, found.len());
    // Newest members first, so that when two claim one slot (a removed member whose
    // device number was reused for its replacement), the newer keeps it, as mdadm does.
    let mut order: Vec<MemberId> = (0..found.len()).map(MemberId).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(found[i.0].sb.events));
    // Members being copied onto (md's replacement) share their slot's role number.
    let mut replacements: Vec<(MemberId, Slot)> = Vec::new();
    // Device numbers already claimed, by member: md reuses the number of a removed member
    // for the next one added, so an old member may carry its successor's number.
    let mut dev_owner: std::collections::HashMap<u32, MemberId> = Default::default();
    for i in order {
        let (m, f) = (&names[i.0], &found[i.0]);
        if let Some(&newer) = dev_owner.get(&f.sb.dev_number) {
            if f.sb.events < found[newer.0].sb.events {
                report.excluded.push((
                    (*m).into(),
                    format!(
                        "device number {} now belongs to {} (events {} > {}); this member was replaced",
                        f.sb.dev_number,
                        names[newer.0],
                        found[newer.0].sb.events,
                        f.sb.events
                    ),
                ));
                // Never written again: its number is its successor's.
                use_member[i] = false;
                continue;
            }
            return Err(EngineError::Invalid(format!(
                "{} and {} both claim device number {} at the same events ({}); \
                 leave out the one that no longer belongs to the array",
                m, names[newer.0], f.sb.dev_number, f.sb.events
            )));
        }
        dev_owner.insert(f.sb.dev_number, i);
        let role = nsb.role_of(f.sb.dev_number);
        match role {
            DevRole::Active(slot)
                if f.sb.feature_map.contains(FeatureMap::REPLACEMENT)
                    && (slot as usize) < slots =>
            {
                if f.sb.events < nsb.events {
                    report.excluded.push((
                        (*m).into(),
                        format!(
                            "replacement for slot {slot} is out of date (events {} < {}); left out",
                            f.sb.events, nsb.events
                        ),
                    ));
                    use_member[i] = false;
                } else {
                    replacements.push((i, Slot(slot as usize)));
                }
            }
            DevRole::Active(slot) => {
                let slot = slot as usize;
                if slot >= slots {
                    report
                        .excluded
                        .push(((*m).into(), format!("role {slot} is beyond raid devices")));
                    use_member[i] = false;
                    continue;
                }
                if let Some(other) = slot_member[Slot(slot)] {
                    if f.sb.events < found[other.0].sb.events {
                        report.excluded.push((
                            (*m).into(),
                            format!(
                                "slot {slot} is held by {} (events {} > {}); this member was replaced",
                                names[other.0],
                                found[other.0].sb.events,
                                f.sb.events
                            ),
                        ));
                        // Left out entirely, as mdadm does: it must never be written with
                        // the array's superblock (its device number may be its successor's).
                        use_member[i] = false;
                        continue;
                    }
                    return Err(EngineError::DuplicateRole {
                        member: m.to_string(),
                        other: names[other.0].to_string(),
                        slot,
                    });
                }
                // A spare one round behind the start of a reshape that gives it a slot: it
                // takes the slot (nothing moved before every member recorded the start).
                let joins_reshape = behind_start(&f.sb) && f.sb.role() == DevRole::Spare;
                // A member one round behind a takeover (see `took_over_behind`) holds what
                // its new slot holds: the takeover moved nothing (a RAID 0 member k is a
                // RAID 10's slot 2k); a spare the takeover gave a slot holds nothing yet.
                let took_over = took_over_behind(&f.sb, &nsb);
                if f.sb.events < nsb.events
                    && f.sb.role() != DevRole::Active(slot as u16)
                    && !joins_reshape
                    && !took_over
                {
                    report.excluded.push((
                        (*m).into(),
                        "its own superblock no longer gives it this slot".into(),
                    ));
                    use_member[i] = false;
                    continue;
                }
                slot_member[Slot(slot)] = Some(i);
                // mdadm's event margin: one event behind is an interrupted superblock
                // update (they are written member by member), not missed data.
                let old_slots = reshape.as_ref().map_or(raid_disks as i64, |r| {
                    raid_disks as i64 - r.delta_disks as i64
                });
                if f.sb.events + 1 < nsb.events {
                    stale.push(i);
                    slot_state[Slot(slot)] = MemberState::Faulty;
                } else if took_over && f.sb.role() == DevRole::Spare {
                    report.events.push(ArrayEvent::RebuildResumes {
                        member: (*m).into(),
                        slot,
                        done_sectors: 0,
                        member_sectors: used,
                    });
                    slot_state[Slot(slot)] = MemberState::Rebuilding;
                } else if joins_reshape && (slot as i64) < old_slots {
                    // A slot of the old layout given to a spare: a RAID 5's new Q, which
                    // holds nothing yet (see the reshape's `fresh` slots).
                    slot_state[Slot(slot)] = MemberState::Rebuilding;
                } else if let Some(at) =
                    f.sb.recovery_offset()
                        // A reshape's new parity member that missed only the reshape's last
                        // round: its own superblock records the reshape at its end, every member
                        // flushed up to there, so it is in sync.
                        .filter(|_| finished_behind(&f.sb, &nsb).is_none())
                {
                    report.events.push(ArrayEvent::RebuildResumes {
                        member: (*m).into(),
                        slot,
                        done_sectors: at,
                        member_sectors: used,
                    });
                    slot_state[Slot(slot)] = MemberState::Rebuilding;
                } else {
                    slot_state[Slot(slot)] = MemberState::InSync;
                }
            }
            DevRole::Faulty => {
                report
                    .excluded
                    .push(((*m).into(), "marked faulty in the newest superblock".into()));
                use_member[i] = false;
            }
            DevRole::Spare => {
                report.events.push(ArrayEvent::AssembledSpare {
                    member: (*m).into(),
                });
            }
            DevRole::Journal if nsb.feature_map.contains(FeatureMap::JOURNAL) => {
                if f.sb.events + 1 < nsb.events && opts.force {
                    report.excluded.push((
                        (*m).into(),
                        format!(
                            "stale write journal (events {} < {}); left out",
                            f.sb.events, nsb.events
                        ),
                    ));
                    use_member[i] = false;
                    continue;
                }
                if f.sb.events + 1 < nsb.events {
                    return Err(EngineError::Stale {
                        member: m.to_string(),
                        events: f.sb.events,
                        newest_events: nsb.events,
                    });
                }
                report.events.push(ArrayEvent::AssembledJournal {
                    member: (*m).into(),
                });
            }
            other => {
                report
                    .excluded
                    .push(((*m).into(), format!("role {other:?} is not supported")));
                use_member[i] = false;
            }
        }
    }
    let failed_now =
        |states: &[MemberState]| states.iter().map(|s| !s.usable()).collect::<Vec<bool>>();
    // Stale members --force took back: their superblocks get the array's events.
    let mut forced_back = false;
    if !stale.is_empty() {
        if !opts.force {
            let i = stale[0].0;
            return Err(EngineError::Stale {
                member: names[i].to_string(),
                events: found[i].sb.events,
                newest_events: nsb.events,
            });
        }
        if geo.survives(&failed_now(slot_state.as_slice())) {
            for &i in &stale {
                report.excluded.push((
                    names[i.0].into(),
                    format!(
                        "stale (events {} < {}); left out: the array runs without it, and --force takes a stale member back only where the array cannot start otherwise (as mdadm --force); `raidkit add` brings it back up to date",
                        found[i.0].sb.events, nsb.events
                    ),
                ));
            }
        } else {
            // md --force: take stale members back, newest first, until the array can run.
            let mut by_events = stale.clone();
            by_events.sort_by_key(|&i| std::cmp::Reverse(found[i.0].sb.events));
            for i in by_events {
                if geo.survives(&failed_now(slot_state.as_slice())) {
                    report.excluded.push((
                        names[i.0].into(),
                        "stale; left out (the array can start without it)".into(),
                    ));
                    continue;
                }
                if let Some(slot) = slot_member.position(|&m| m == Some(i)) {
                    slot_state[slot] = MemberState::InSync;
                    forced_back = true;
                    report.events.push(ArrayEvent::StaleTakenBack {
                        member: names[i.0].into(),
                        member_events: found[i.0].sb.events,
                        array_events: nsb.events,
                    });
                }
            }
        }
    }
    // A replacement whose slot has no member in sync carries on as the slot's rebuild;
    // otherwise it stays the slot's replacement and the copy resumes.
    let mut keep_replacing: Vec<(MemberId, Slot)> = Vec::new();
    let mut displaced: Vec<u32> = Vec::new();
    for (i, slot) in replacements {
        if slot_state[slot] == MemberState::InSync {
            report.events.push(ArrayEvent::ReplaceResumes {
                member: names[i.0].into(),
                slot: slot.0,
                copied_sectors: found[i.0].sb.recovery_offset().unwrap_or(0),
            });
            keep_replacing.push((i, slot));
        } else if slot_member[slot].is_none() || slot_state[slot] != MemberState::Rebuilding {
            report.events.push(ArrayEvent::ReplacementRebuilds {
                member: names[i.0].into(),
                slot: slot.0,
            });
            if let Some(old) = slot_member[slot] {
                displaced.push(found[old.0].sb.dev_number);
            }
            slot_member[slot] = Some(i);
            slot_state[slot] = MemberState::Rebuilding;
        } else {
            report.excluded.push((
                names[i.0].into(),
                format!("replacement for slot {slot}, which another member is rebuilding"),
            ));
            use_member[i] = false;
        }
    }
    // Members not in use (stale/faulty) keep their place in the members list but never
    // get I/O: only slots in sync are planned with.
    let failed = failed_now(slot_state.as_slice());
    let degraded = failed.iter().any(|&f| f);
    // During a reshape that adds members, md counts the old and the new section apart
    // (raid5_calc_degraded): a member the reshape is filling counts against the old section
    // only.
    let survives = match reshape.as_ref().filter(|r| r.delta_disks != 0) {
        None => geo.survives(&failed),
        Some(r) => {
            let old = (raid_disks as i64 - r.delta_disks as i64).max(0) as usize;
            let new_failed: Vec<bool> = (0..raid_disks)
                .map(|s| {
                    failed[s]
                        && (r.delta_disks < 0 || slot_state[Slot(s)] != MemberState::Rebuilding)
                })
                .collect();
            let old_failed = (0..old).filter(|&s| failed[s]).count();
            geo.survives(&new_failed) && old_failed <= geo.geometry().max_degraded() as usize
        }
    };
    if !survives {
        let missing: Vec<String> = (0..slots)
            .filter(|&s| failed[s])
            .map(|s| s.to_string())
            .collect();
        return Err(EngineError::Unavailable {
            detail: format!(
                "RAID {level} over {raid_disks} devices cannot run without slots {}",
                missing.join(", ")
            ),
        });
    }
    // mdadm's --run: members the superblocks list as active but that were not given are
    // not assumed dead. Writing would record them faulty for good (they could then only
    // come back through a full rebuild), so a writable assembly without them needs `run`.
    if !(opts.read_only || opts.run || member_read_only) {
        let nsb = &nsb;
        let absent: Vec<AbsentMember> = (0..slots)
            .filter(|&slot| slot_member[Slot(slot)].is_none())
            .flat_map(|slot| {
                (0..nsb.max_dev())
                    .filter(move |&d| nsb.role_of(d) == DevRole::Active(slot as u16))
                    .map(move |d| AbsentMember {
                        slot,
                        dev_number: d,
                    })
            })
            .filter(|a| !found.iter().any(|f| f.sb.dev_number == a.dev_number))
            .collect();
        if !absent.is_empty() {
            return Err(EngineError::Incomplete {
                level,
                raid_disks,
                set_uuid: nsb.set_uuid.0,
                absent,
            });
        }
    }
    if geo.level() == RaidLevel::Raid0 && nsb.chunk_sectors > 0 {
        let sizes: Vec<u64> = found
            .iter()
            .map(|f| f.sb.data_size_sectors / nsb.chunk_sectors as u64)
            .collect();
        if sizes.iter().min() != sizes.iter().max() {
            report.events.push(ArrayEvent::Raid0FirstZoneOnly {
                served_bytes: geo.array_sectors() * 512,
            });
        }
    }
    // Dirty if any member in use says so: an update interrupted half-way may have left
    // the newest superblock clean and an older one dirty, or the other way round.
    let current = |f: &crate::meta::FoundSuperblock| f.sb.events + 1 >= nsb.events;
    let resync_offset = found
        .iter()
        .filter(|f| current(f))
        .map(|f| f.sb.resync_offset_sectors)
        .min()
        .unwrap_or(nsb.resync_offset_sectors);
    report.was_dirty = found
        .iter()
        .filter(|f| current(f))
        .any(|f| !f.sb.is_clean());
    if report.was_dirty {
        report.events.push(ArrayEvent::NotStoppedCleanly);
        if degraded && matches!(geo.scheme(), Scheme::Parity { .. }) && nsb.ppl().is_some() {
            // md starts a dirty degraded array with a partial parity log: the log makes
            // the parity of every stripe written at the crash agree with its data.
            report.events.push(ArrayEvent::DirtyDegradedStarted {
                by: DirtyDegradedStart::PartialParityLog,
            });
        } else if degraded
            && matches!(geo.scheme(), Scheme::Parity { .. })
            && nsb.feature_map.contains(FeatureMap::JOURNAL)
        {
            // The write journal holds data and parity of every stripe written at the
            // crash; its replay makes them whole before anything reads them.
            report.events.push(ArrayEvent::DirtyDegradedStarted {
                by: DirtyDegradedStart::WriteJournal,
            });
        } else if degraded && matches!(geo.scheme(), Scheme::Parity { .. }) {
            if !opts.force {
                return Err(EngineError::DirtyDegraded {
                    detail: format!(
                        "missing slots {:?}",
                        (0..raid_disks).filter(|&s| failed[s]).collect::<Vec<_>>()
                    ),
                });
            }
            report.events.push(ArrayEvent::DirtyDegradedStarted {
                by: DirtyDegradedStart::Force,
            });
        }
    }
    if degraded {
        report.events.push(ArrayEvent::RunningDegraded {
            missing_slots: (0..raid_disks).filter(|&s| failed[s]).collect(),
        });
    }
    let read_only = opts.read_only || member_read_only;
    // Superblocks in memory follow the newest one's shared state; each keeps its own
    // identity and placement.
    let sbs: Vec<Superblock> = found
        .iter()
        .map(|f| {
            let mut sb = nsb.clone();
            sb.device_uuid = f.sb.device_uuid;
            sb.dev_number = f.sb.dev_number;
            sb.data_offset_sectors = f.sb.data_offset_sectors;
            sb.data_size_sectors = f.sb.data_size_sectors;
            sb.super_offset_sectors = f.sb.super_offset_sectors;
            sb.bblog_offset = f.sb.bblog_offset;
            sb.bblog_size_sectors = f.sb.bblog_size_sectors;
            sb.bblog_shift = f.sb.bblog_shift;
            sb.bitmap_offset = f.sb.bitmap_offset;
            sb.recovery_offset_sectors = f.sb.recovery_offset_sectors;
            // A reshape's new offset is the member's own; a member that missed the round
            // after its reshape was recorded complete has its data at the new offset.
            sb.reshape.new_offset_sectors = f.sb.reshape.new_offset_sectors;
            sb.feature_map.set(
                FeatureMap::NEW_OFFSET,
                f.sb.feature_map.contains(FeatureMap::NEW_OFFSET) && nsb.reshape().is_some(),
            );
            if let Some(moved) = finished_behind(&f.sb, &nsb) {
                sb.data_offset_sectors = (sb.data_offset_sectors as i64 + moved) as u64;
                sb.data_size_sectors = (sb.data_size_sectors as i64 - moved) as u64;
            }
            // Feature bits that describe the device, not the array, stay the member's own.
            for own in [
                FeatureMap::RECOVERY_OFFSET,
                FeatureMap::REPLACEMENT,
                FeatureMap::RECOVERY_BITMAP,
                FeatureMap::BAD_BLOCKS,
            ] {
                sb.feature_map.set(own, f.sb.feature_map.contains(own));
            }
            sb.devflags = f.sb.devflags;
            sb.cnt_corrected_read = f.sb.cnt_corrected_read;
            // A spare a cut-short takeover gave a slot (a new parity member) is recovered
            // from the start, as the takeover records it.
            if took_over_behind(&f.sb, &nsb)
                && f.sb.role() == DevRole::Spare
                && matches!(nsb.role_of(f.sb.dev_number), DevRole::Active(_))
            {
                sb.set_recovery_offset(0);
            }
            sb
        })
        .collect();
    // md's journal rule: without its journal (or with a stale one) the array does not
    // start, except read-only with --force (mdadm: "Journal is missing or stale, starting
    // array read only").
    let mut sbs = sbs;
    let mut read_only = read_only;
    if nsb.feature_map.contains(FeatureMap::JOURNAL)
        && !found
            .iter()
            .zip(&use_member)
            .any(|(f, &used)| used && f.sb.role() == DevRole::Journal)
    {
        if !opts.force {
            return Err(EngineError::Invalid(
                "the array has a write journal but its journal device was not given (or is stale); md does not start it either. Give the journal device too, or --force to assemble read-only without it".into(),
            ));
        }
        read_only = true;
        for sb in &mut sbs {
            sb.feature_map.remove(FeatureMap::JOURNAL);
        }
        report.events.push(ArrayEvent::JournalMissing);
    }
    Ok(Assembly {
        geo,
        version,
        newest: MemberId(newest),
        nsb,
        sbs: ByMember::from_vec(sbs),
        slot_member,
        slot_state,
        use_member,
        keep_replacing,
        displaced,
        forced_back,
        degraded,
        resync_offset,
        read_only,
        report,
        reshape,
    })
}

/// True when `own` is one superblock round behind a takeover `newest` records: a level
/// change that moves no data (md's takeovers: RAID 6 of a `*-6` layout to 5, RAID 4 or 5 to
/// parity-last 5 or 6, RAID 1 to 5 and back on two members, RAID 0 to 10 and back), written
/// member by member in one round and cut short. Nothing else changes the level without a
/// reshape recorded: a restripe's first round records one. The array is the newest's; the
/// next superblock write finishes the round.
pub(crate) fn took_over_behind(own: &Superblock, newest: &Superblock) -> bool {
    own.reshape().is_none()
        && newest.reshape().is_none()
        && own.events + 1 == newest.events
        && own.level != newest.level
        && own.ctime == newest.ctime
        && own.data_offset_sectors == newest.data_offset_sectors
}

/// For a member whose superblock records a reshape complete (its position at the new
/// layout's end, or at 0 for one running backwards) while the newest records none: it missed the reshape's last round, and its
/// data is `new_offset` sectors from where its superblock says.
fn finished_behind(own: &Superblock, newest: &Superblock) -> Option<i64> {
    let r = own.reshape()?;
    if newest.reshape().is_some() || !own.feature_map.contains(FeatureMap::NEW_OFFSET) {
        return None;
    }
    let data = match Geo::new(
        r.new_level,
        r.new_layout,
        own.raid_disks as usize,
        r.new_chunk_sectors as u64,
        own.size_sectors,
    ) {
        Ok(g) => g.array_sectors(),
        Err(_) => return None,
    };
    // A reshape running backwards (fewer data members, md's reshape_backwards) ends at 0.
    let done = if own.feature_map.contains(FeatureMap::RESHAPE_BACKWARDS) || r.delta_disks < 0 {
        r.reshape_position_sectors == 0
    } else {
        r.reshape_position_sectors >= data
    };
    done.then_some(r.new_offset_sectors as i64)
}

#[cfg(test)]
mod tests;
