//! Continuing a recorded reshape: the plan its superblocks give, and the refusals every reshape shares.

use super::*;

/// The rule of a reshape from `old` to `new`: forward, or backward when `backward` (fewer
/// data members).
pub(super) fn way(old: &Geo, new: &Geo, diff: u64, backward: bool) -> Way {
    let rule = Rule {
        old: lay(old),
        new: lay(new),
        diff,
        end: new.array_sectors(),
    };
    if backward {
        Way::Backward(rule)
    } else {
        Way::Forward(rule)
    }
}

/// How a reshape starts.
pub(super) enum Plan {
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
pub(super) fn common_refusals(a: &Assembly, may_lose: usize) -> Result<()> {
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
pub(super) fn bblog_end(sb: &Superblock) -> Option<u64> {
    (sb.bblog_size_sectors > 0).then(|| {
        (sb.super_offset_sectors as i64 + sb.bblog_offset as i64 + sb.bblog_size_sectors as i64)
            .max(0) as u64
    })
}

/// Decides how a recorded reshape goes on (no I/O): both layouts from the superblocks, the
/// members by slot, each member's offsets, and the position to start from.
pub(in crate::array) fn resume_plan(
    a: &Assembly,
    found: &[FoundSuperblock],
) -> Result<(Shape, u64)> {
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
    let way = way(&old, &new, diff as u64, backward);
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
pub(super) fn raid0_growing(a: &Assembly) -> bool {
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
