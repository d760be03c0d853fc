//! Starting a reshape: md's takeovers and restripes decided from the assembled array, and the
//! superblocks that record them.

use super::*;

/// Where a run starts.
#[derive(Clone, Copy)]
pub(super) enum Start {
    /// A new reshape: recorded at 0 on every member first (nothing moves before).
    Fresh,
    /// A recorded reshape, at this array sector.
    At(u64),
}

/// Member `i`'s superblock with the reshape recorded at `pos`.
pub(super) fn record(sb: &mut Superblock, shape: &Shape, i: usize, pos: u64) {
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
pub(super) fn raid6_takeover_layout(level: i32, layout: u32) -> Option<u32> {
    match (level, layout) {
        (4, _) | (5, 5) => Some(5),
        (5, l @ 0..=4) => Some(16 + l),
        _ => None,
    }
}

/// How the level changes, as md does it: the level the reshape runs at (md's `re->level`),
/// the old layout at that level, and how many parity members it adds. md takes a RAID 0 over
/// as a RAID 4, 5 or 6 with its parity last (`raid45_takeover_raid0`), on new members.
pub(super) fn level_change(a: &Assembly, to: i32) -> Result<(i32, u32, usize)> {
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
pub(super) fn raid10_reshapable(
    layout: u32,
    raid_disks: usize,
    target: &ReshapeTarget,
) -> Result<()> {
    // md reshapes near and offset layouts, and one into the other, keeping the number of
    // copies (mdadm's `reshape_super`: "Cannot reshape RAID10 in far-mode", "Cannot change
    // number of copies when reshaping RAID10").
    let split = |l: u32| (l & 0xff, (l >> 8) & 0xff, l & 0x10000 != 0);
    let not_yet = |what: String| Err(EngineError::CannotGrow(GrowRefusal::ReshapeNotYet { what }));
    let (near, far, offset) = split(layout);
    let new_layout = target.layout.unwrap_or(layout);
    let (new_near, new_far, new_offset) = split(new_layout);
    if (far > 1 && !offset) || (new_far > 1 && !new_offset) {
        return Err(EngineError::CannotGrow(GrowRefusal::FarLayout));
    }
    let copies = near * far.max(1);
    if new_near * new_far.max(1) != copies {
        return Err(EngineError::Invalid(format!(
            "md cannot change a RAID 10's number of copies ({copies} to {}) in a reshape",
            new_near * new_far.max(1)
        )));
    }
    // Near copies go over any number of members (md's `first_dev_address` rule, which the
    // reshape's steps follow chunk by chunk). An offset layout's row groups over a count
    // that is not a whole number of its near copies would need a larger move of the data
    // offset than md makes.
    let n = target.raid_devices.unwrap_or(raid_disks);
    let whole = |n: usize, near: u32| near > 0 && n.is_multiple_of(near as usize);
    if (offset || new_offset) && (!whole(raid_disks, near) || !whole(n, new_near)) {
        return not_yet(format!(
            "a RAID 10 offset layout over {raid_disks} to {n} members, a count that is not a whole number of its near copies"
        ));
    }
    Ok(())
}

/// Decides the start of a reshape on an assembly's decision alone (no I/O): both layouts,
/// the new slots' members, the new offsets, every member's superblock from now on.
pub(super) fn start_plan(
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
    let new = match Geo::new(new_level, new_layout, new_count, new_chunk, used) {
        Ok(g) => g,
        // A RAID 10 offset layout's groups of rows (the chunk times its far copies) larger
        // than what each member holds: the array would hold nothing.
        Err(crate::geometry::GeoError::Md(raidkit_layout::GeometryError::MemberTooSmall {
            ..
        })) if level == 10 && new_chunk > old_chunk => {
            return refuse(GrowRefusal::WouldShrink {
                array_sectors: old.array_sectors(),
                new_sectors: 0,
            })
        }
        Err(e) => return Err(invalid(e)),
    };
    let (od, nd) = (old.data_disks() as u64, new.data_disks() as u64);
    // A RAID 10 offset layout holds whole groups of rows only: on members with an odd number
    // of chunks it holds less than a near layout of the same copies, and a larger chunk can
    // leave it less too. A forward reshape would drop what lies past the smaller end: refused
    // (md's raid10 refuses to reduce the array's size as well).
    if level == 10 && new.array_sectors() < old.array_sectors() {
        return refuse(GrowRefusal::WouldShrink {
            array_sectors: old.array_sectors(),
            new_sectors: new.array_sectors(),
        });
    }
    // With the members it has, a RAID 10's chunk or layout change keeps its size (larger
    // only with more members, whose new room md resyncs).
    if level == 10 && new_count == old_count && new.array_sectors() != old.array_sectors() {
        return refuse(GrowRefusal::ReshapeNotYet {
            what: format!(
                "a RAID 10 chunk or layout change that makes the array {} sectors instead of {}",
                new.array_sectors(),
                old.array_sectors()
            ),
        });
    }
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
    // mdadm: a RAID 10 moves by one chunk (the larger), for it reads and writes whole rows;
    // an offset layout's rows come in groups of its far copies (md's raid10_run refuses a
    // smaller change: "Reshape needs a larger data_offset change").
    let (old_lay, new_lay) = (lay(&old), lay(&new));
    let min = if level == 10 {
        (old_lay.chunk * old_lay.far).max(new_lay.chunk * new_lay.far)
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
        } else if new_lay.wider_than(&old_lay) {
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
    let way = way(&old, &new, diff, shrinks);
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
