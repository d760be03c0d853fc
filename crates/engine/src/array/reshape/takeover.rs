//! Takeovers that move nothing: what they report, mirror takeovers, and members left as spares.

use super::*;

/// What a takeover reports (it moves nothing): from the array `a` assembled to the geometry
/// `new` it runs as, with the slots to rebuild (a new parity member's).
pub(super) fn takeover_report(a: &Assembly, new: &Geo, rebuild: Vec<usize>) -> ReshapeReport {
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
pub(super) fn mirror_takeover(
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
pub(super) fn one_zone(a: &Assembly, found: &[FoundSuperblock], to: i32) -> Result<()> {
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
pub(super) fn leave_as_spares(
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
