//! Assembling an array: reads the members' superblocks, asks `membership::assembly` (md's
//! rules, decided without I/O) who fills which slot, then attaches the members, loads the
//! bitmap and bad-block logs, replays the write log and records what the decision says.

use super::*;

impl Array {
    /// Assembles an array from its members, validating them the way md and mdadm do.
    pub fn assemble(
        members: Vec<Box<dyn Disk>>,
        opts: AssembleOptions,
    ) -> Result<(Array, AssembleReport)> {
        if members.is_empty() {
            return Err(EngineError::Invalid("no members given".into()));
        }
        // 1. Superblocks.
        let mut found = Vec::with_capacity(members.len());
        for m in &members {
            found.push(read_superblock(m.as_ref())?);
        }
        let names: Vec<String> = members.iter().map(|m| m.name().to_string()).collect();
        let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let member_read_only = members.iter().any(|m| m.is_read_only());
        let decided = assembly::decide(&name_refs, &found, member_read_only, &opts)?;
        if let Some(r) = &decided.reshape {
            return Err(EngineError::ReshapeInProgress {
                position_sectors: r.reshape_position_sectors,
                old_raid_disks: decided.nsb.raid_disks as i64 - r.delta_disks as i64,
                new_raid_disks: decided.nsb.raid_disks,
            });
        }
        let Assembly {
            geo,
            version,
            newest,
            nsb,
            sbs,
            slot_member,
            slot_state,
            use_member,
            keep_replacing,
            displaced,
            forced_back,
            degraded,
            resync_offset,
            read_only,
            mut report,
            reshape: _,
        } = decided;
        let mut array = Self::build(
            geo,
            version,
            read_only,
            opts.config,
            members,
            sbs,
            slot_member,
            slot_state,
            // A resync stopped cleanly part-way is recorded at its cursor; the first write
            // records the array dirty from 0 again (md's super_1_sync writes resync_offset 0
            // while the array is not in sync), or a crash would leave writes below the
            // cursor unresynced.
            report.was_dirty && nsb.resync_offset_sectors == 0,
        )?;
        if nsb.bitmap_offset().is_some() {
            let disk = lock(&array.state).members[newest].clone();
            if let Some(m) = disk {
                let (_, space) = array.scrub_space();
                let (wi, out_of_date) = bitmap::WriteIntent::load(
                    m.disk.as_ref(),
                    &found[newest.0].sb,
                    nsb.events,
                    space,
                )?;
                report.events.push(ArrayEvent::BitmapLoaded {
                    bytes_per_bit: wi.sectors_per_bit * crate::plan::SECTOR as u64,
                    bits_set: wi.set_bits(),
                });
                report.events.extend(out_of_date);
                array.bitmap = Some(wi);
            }
        }
        {
            let mut st = lock(&array.state);
            // Members left out are not attached: nothing is ever written to them.
            for (i, &used) in use_member.enumerate() {
                if !used {
                    st.members[i] = None;
                }
            }
            for (i, slot) in keep_replacing {
                st.roster.replacement[slot] = Some(i);
            }
            for slot in st.roster.slot_state.ids() {
                if let (MemberState::Rebuilding, Some(i)) =
                    (st.roster.slot_state[slot], st.roster.slot_member[slot])
                {
                    st.roster.bitmap_recovery[slot] = array.bitmap.is_some()
                        && st.roster.sbs[i]
                            .feature_map
                            .contains(FeatureMap::RECOVERY_BITMAP);
                    st.roster.sbs[i].feature_map.remove(FeatureMap::REPLACEMENT);
                    if st.roster.sbs[i].recovery_offset().is_none() {
                        st.roster.sbs[i].set_recovery_offset(0);
                    }
                }
            }
            array.note_replacements(&st);
            // md's bad-block logs: reads avoid what they list.
            let count = st.members.len();
            st.bad = ByMember::filled(Vec::new(), count);
            for i in st.members.ids() {
                let sb = st.roster.sbs[i].clone();
                let Some(m) = st.members[i].clone() else {
                    continue;
                };
                if !sb.feature_map.contains(FeatureMap::BAD_BLOCKS)
                    || sb.bblog_offset == 0
                    || sb.bblog_size_sectors == 0
                {
                    continue;
                }
                let at = (sb.super_offset_sectors as i64 + sb.bblog_offset as i64) as u64 * 512;
                let mut page = vec![0u8; sb.bblog_size_sectors as usize * 512];
                m.disk.read_at(&mut page, at)?;
                let list =
                    raidkit_metadata::badblocks::decode(&page, sb.bblog_shift).map_err(|e| {
                        EngineError::Metadata(format!("{}: bad-block log: {e}", m.disk.name()))
                    })?;
                if !list.is_empty() {
                    report.events.push(ArrayEvent::BadBlocksListed {
                        member: m.disk.name().into(),
                        ranges: list.len(),
                    });
                    array
                        .has_bad
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
                st.bad[i] = data_ranges(&list, sb.data_offset_sectors);
            }
        }
        let consistent = array.start_log(
            write_log::LogStart::Assembled {
                dirty: report.was_dirty,
                resync_offset: nsb.resync_offset_sectors,
            },
            &mut report.events,
        )?;
        if report.was_dirty && array.geo.level() != RaidLevel::Raid0 && !consistent {
            // md's resync_offset: in sync below it (0 after a crash, the cursor when a resync
            // was stopped cleanly part-way).
            let (_, space) = array.scrub_space();
            let from = resync_offset.min(space);
            lock(&array.state).resync_from = Some(from);
            array
                .resync_pending
                .store(true, std::sync::atomic::Ordering::Relaxed);
            report
                .events
                .push(ArrayEvent::ResyncNeeded { from_sector: from });
        }
        if forced_back && !read_only {
            // mdadm's force_array writes the raised event count at once, so the next
            // assembly takes the member without --force.
            let _g = lock(&array.sb_lock);
            let mut st = lock(&array.state);
            array.update_superblocks(&mut st, |_| {});
        }
        if (degraded || !displaced.is_empty()) && !read_only {
            // Record the lost slots as faulty in the survivors, as md does when it starts
            // degraded (super_1_sync writes 0xfffe for every device it does not have).
            // A slot whose member was not given at all is named by the device number that
            // holds its role; md's super_1_sync marks every device it does not have faulty,
            // so such a member, offered again later with an event count one behind, is not
            // taken back as in sync.
            let st = lock(&array.state);
            let roles = st
                .roster
                .sbs
                .iter()
                .find(|sb| sb.events == nsb.events)
                .unwrap_or(&nsb);
            let mut lost: Vec<u32> = st
                .roster
                .slot_state
                .enumerate()
                .filter(|(_, s)| !s.writable())
                .flat_map(|(slot, _)| match st.roster.slot_member[slot] {
                    Some(i) => vec![st.roster.sbs[i].dev_number],
                    None => (0..roles.max_dev())
                        .filter(|&d| roles.role_of(d) == DevRole::Active(slot.0 as u16))
                        .filter(|&d| !st.roster.sbs.iter().any(|sb| sb.dev_number == d))
                        .collect(),
                })
                .collect();
            lost.extend(displaced);
            // Only what the superblocks do not say already: assembling an array that is
            // known degraded writes nothing.
            lost.retain(|&d| {
                st.roster
                    .sbs
                    .iter()
                    .any(|sb| sb.role_of(d) != DevRole::Faulty)
            });
            if !lost.is_empty() {
                drop(st);
                let _g = lock(&array.sb_lock);
                let mut st = lock(&array.state);
                array.update_superblocks(&mut st, |sb| {
                    for &d in &lost {
                        let _ = sb.set_role(d, DevRole::Faulty);
                    }
                });
            }
        }
        // What assembly found goes into the array's event log too, after what it logged
        // itself (a member failed while a log was replayed).
        let mut st = lock(&array.state);
        for event in &report.events {
            st.events.push(event.clone());
        }
        drop(st);
        // Data-only rows the journal held (cached writes) go to the members now: the array
        // starts write-through.
        array.drain_write_back()?;
        Ok((array, report))
    }
}
