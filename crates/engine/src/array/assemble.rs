//! Assembling an array from its members' superblocks, the way mdadm and md do: which
//! members belong, which are stale, what was in flight at an unclean stop, what is left to do.

use super::*;

impl Array {
    /// Assembles an array from its members, validating them the way md and mdadm do.
    pub fn assemble(
        members: Vec<Box<dyn Disk>>,
        opts: AssembleOptions,
    ) -> Result<(Array, AssembleReport)> {
        let mut report = AssembleReport::default();
        if members.is_empty() {
            return Err(EngineError::Invalid("no members given".into()));
        }
        // 1. Superblocks.
        let mut found = Vec::with_capacity(members.len());
        for m in &members {
            found.push(read_superblock(m.as_ref())?);
        }
        // 2. Same member twice.
        for i in 0..members.len() {
            for j in 0..i {
                if members[i].name() == members[j].name()
                    || found[i].sb.device_uuid == found[j].sb.device_uuid
                {
                    return Err(EngineError::Duplicate {
                        member: members[i].name().to_string(),
                        other: members[j].name().to_string(),
                        device_uuid: found[i].sb.device_uuid.to_mdadm_string(),
                    });
                }
            }
        }
        // 3. One array: the given UUID or the first member's.
        let (ref_uuid, ref_name) = match opts.uuid {
            Some(u) => (Uuid(u), "the UUID asked for".to_string()),
            None => (found[0].sb.set_uuid, members[0].name().to_string()),
        };
        for (m, f) in members.iter().zip(&found) {
            if f.sb.set_uuid != ref_uuid {
                return Err(EngineError::Foreign {
                    member: m.name().to_string(),
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
        let shape = |f: &crate::meta::FoundSuperblock| {
            (
                f.sb.level.to_md(),
                f.sb.layout,
                f.sb.chunk_sectors,
                f.sb.raid_disks,
                f.version.name(),
            )
        };
        let count =
            |k: &(i32, u32, u32, u32, &str)| found.iter().filter(|f| shape(f) == *k).count();
        let mut reference = newest;
        for i in 0..found.len() {
            if count(&shape(&found[i])) > count(&shape(&found[reference])) {
                reference = i;
            }
        }
        let rsb = found[reference].sb.clone();
        let rname = members[reference].name().to_string();
        for (m, f) in members.iter().zip(&found) {
            let s = &f.sb;
            let checks: [(&'static str, String, String); 5] = [
                (
                    "level",
                    s.level.to_md().to_string(),
                    rsb.level.to_md().to_string(),
                ),
                ("layout", s.layout.to_string(), rsb.layout.to_string()),
                (
                    "chunk size (sectors)",
                    s.chunk_sectors.to_string(),
                    rsb.chunk_sectors.to_string(),
                ),
                (
                    "raid devices",
                    s.raid_disks.to_string(),
                    rsb.raid_disks.to_string(),
                ),
                (
                    "metadata version",
                    f.version.name().to_string(),
                    found[reference].version.name().to_string(),
                ),
            ];
            for (field, a, b) in checks {
                if a != b {
                    return Err(EngineError::Mismatched {
                        member: m.name().to_string(),
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
        if nsb.reshape().is_some() {
            return Err(EngineError::Invalid(
                "a reshape is in progress on these members; raidkit does not continue reshapes"
                    .into(),
            ));
        }
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
        for (m, f) in members.iter().zip(&found) {
            if is_journal(f) {
                if f.sb.data_offset_sectors + f.sb.data_size_sectors > f.device_sectors {
                    return Err(EngineError::SizeMismatch {
                        member: m.name().to_string(),
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
                    member: m.name().to_string(),
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
        let mut slot_member: Vec<Option<usize>> = vec![None; raid_disks];
        let mut slot_state = vec![MemberState::Missing; raid_disks];
        let mut stale: Vec<usize> = Vec::new();
        let mut use_member = vec![true; members.len()];
        // Newest members first, so that when two claim one slot (a removed member whose
        // device number was reused for its replacement), the newer keeps it, as mdadm does.
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(found[i].sb.events));
        // Members being copied onto (md's replacement) share their slot's role number.
        let mut replacements: Vec<(usize, usize)> = Vec::new();
        // Device numbers already claimed, by member: md reuses the number of a removed member
        // for the next one added, so an old member may carry its successor's number.
        let mut dev_owner: std::collections::HashMap<u32, usize> = Default::default();
        for i in order {
            let (m, f) = (&members[i], &found[i]);
            if let Some(&newer) = dev_owner.get(&f.sb.dev_number) {
                if f.sb.events < found[newer].sb.events {
                    report.excluded.push((
                        m.name().into(),
                        format!(
                            "device number {} now belongs to {} (events {} > {}); this member was replaced",
                            f.sb.dev_number,
                            members[newer].name(),
                            found[newer].sb.events,
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
                    m.name(),
                    members[newer].name(),
                    f.sb.dev_number,
                    f.sb.events
                )));
            }
            dev_owner.insert(f.sb.dev_number, i);
            let role = nsb.role_of(f.sb.dev_number);
            match role {
                DevRole::Active(slot)
                    if f.sb.feature_map.contains(FeatureMap::REPLACEMENT)
                        && (slot as usize) < raid_disks =>
                {
                    if f.sb.events < nsb.events {
                        report.excluded.push((
                            m.name().into(),
                            format!(
                                "replacement for slot {slot} is out of date (events {} < {}); left out",
                                f.sb.events, nsb.events
                            ),
                        ));
                        use_member[i] = false;
                    } else {
                        replacements.push((i, slot as usize));
                    }
                }
                DevRole::Active(slot) => {
                    let slot = slot as usize;
                    if slot >= raid_disks {
                        report.excluded.push((
                            m.name().into(),
                            format!("role {slot} is beyond raid devices"),
                        ));
                        use_member[i] = false;
                        continue;
                    }
                    if let Some(other) = slot_member[slot] {
                        if f.sb.events < found[other].sb.events {
                            report.excluded.push((
                                m.name().into(),
                                format!(
                                    "slot {slot} is held by {} (events {} > {}); this member was replaced",
                                    members[other].name(),
                                    found[other].sb.events,
                                    f.sb.events
                                ),
                            ));
                            // Left out entirely, as mdadm does: it must never be written with
                            // the array's superblock (its device number may be its successor's).
                            use_member[i] = false;
                            continue;
                        }
                        return Err(EngineError::DuplicateRole {
                            member: m.name().to_string(),
                            other: members[other].name().to_string(),
                            slot,
                        });
                    }
                    if f.sb.events < nsb.events && f.sb.role() != DevRole::Active(slot as u16) {
                        report.excluded.push((
                            m.name().into(),
                            "its own superblock no longer gives it this slot".into(),
                        ));
                        use_member[i] = false;
                        continue;
                    }
                    slot_member[slot] = Some(i);
                    // mdadm's event margin: one event behind is an interrupted superblock
                    // update (they are written member by member), not missed data.
                    if f.sb.events + 1 < nsb.events {
                        stale.push(i);
                        slot_state[slot] = MemberState::Faulty;
                    } else if let Some(at) = f.sb.recovery_offset() {
                        report.events.push(ArrayEvent::RebuildResumes {
                            member: m.name().into(),
                            slot,
                            done_sectors: at,
                            member_sectors: used,
                        });
                        slot_state[slot] = MemberState::Rebuilding;
                    } else {
                        slot_state[slot] = MemberState::InSync;
                    }
                }
                DevRole::Faulty => {
                    report.excluded.push((
                        m.name().into(),
                        "marked faulty in the newest superblock".into(),
                    ));
                    use_member[i] = false;
                }
                DevRole::Spare => {
                    report.events.push(ArrayEvent::AssembledSpare {
                        member: m.name().into(),
                    });
                }
                DevRole::Journal if nsb.feature_map.contains(FeatureMap::JOURNAL) => {
                    if f.sb.events + 1 < nsb.events && opts.force {
                        report.excluded.push((
                            m.name().into(),
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
                            member: m.name().to_string(),
                            events: f.sb.events,
                            newest_events: nsb.events,
                        });
                    }
                    report.events.push(ArrayEvent::AssembledJournal {
                        member: m.name().into(),
                    });
                }
                other => {
                    report
                        .excluded
                        .push((m.name().into(), format!("role {other:?} is not supported")));
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
                let i = stale[0];
                return Err(EngineError::Stale {
                    member: members[i].name().to_string(),
                    events: found[i].sb.events,
                    newest_events: nsb.events,
                });
            }
            if geo.survives(&failed_now(&slot_state)) {
                for &i in &stale {
                    report.excluded.push((
                        members[i].name().into(),
                        format!(
                            "stale (events {} < {}); left out: the array runs without it, and --force takes a stale member back only where the array cannot start otherwise (as mdadm --force); `raidkit add` brings it back up to date",
                            found[i].sb.events, nsb.events
                        ),
                    ));
                }
            } else {
                // md --force: take stale members back, newest first, until the array can run.
                let mut by_events = stale.clone();
                by_events.sort_by_key(|&i| std::cmp::Reverse(found[i].sb.events));
                for i in by_events {
                    if geo.survives(&failed_now(&slot_state)) {
                        report.excluded.push((
                            members[i].name().into(),
                            "stale; left out (the array can start without it)".into(),
                        ));
                        continue;
                    }
                    if let Some(slot) = slot_member.iter().position(|&m| m == Some(i)) {
                        slot_state[slot] = MemberState::InSync;
                        forced_back = true;
                        report.events.push(ArrayEvent::StaleTakenBack {
                            member: members[i].name().into(),
                            member_events: found[i].sb.events,
                            array_events: nsb.events,
                        });
                    }
                }
            }
        }
        // A replacement whose slot has no member in sync carries on as the slot's rebuild;
        // otherwise it stays the slot's replacement and the copy resumes.
        let mut keep_replacing: Vec<(usize, usize)> = Vec::new();
        let mut displaced: Vec<u32> = Vec::new();
        for (i, slot) in replacements {
            if slot_state[slot] == MemberState::InSync {
                report.events.push(ArrayEvent::ReplaceResumes {
                    member: members[i].name().into(),
                    slot,
                    copied_sectors: found[i].sb.recovery_offset().unwrap_or(0),
                });
                keep_replacing.push((i, slot));
            } else if slot_member[slot].is_none() || slot_state[slot] != MemberState::Rebuilding {
                report.events.push(ArrayEvent::ReplacementRebuilds {
                    member: members[i].name().into(),
                    slot,
                });
                if let Some(old) = slot_member[slot] {
                    displaced.push(found[old].sb.dev_number);
                }
                slot_member[slot] = Some(i);
                slot_state[slot] = MemberState::Rebuilding;
            } else {
                report.excluded.push((
                    members[i].name().into(),
                    format!("replacement for slot {slot}, which another member is rebuilding"),
                ));
                use_member[i] = false;
            }
        }
        // Members not in use (stale/faulty) keep their place in the members list but never
        // get I/O: only slots in sync are planned with.
        let failed = failed_now(&slot_state);
        let degraded = failed.iter().any(|&f| f);
        if !geo.survives(&failed) {
            let missing: Vec<String> = (0..raid_disks)
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
        if !(opts.read_only || opts.run || members.iter().any(|m| m.is_read_only())) {
            let nsb = &nsb;
            let absent: Vec<AbsentMember> = (0..raid_disks)
                .filter(|&slot| slot_member[slot].is_none())
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
        let read_only = opts.read_only || members.iter().any(|m| m.is_read_only());
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
        let mut array = Self::build(
            geo,
            version,
            read_only,
            opts.config,
            members,
            sbs,
            slot_member,
            slot_state,
            report.was_dirty,
        )?;
        if nsb.bitmap_offset().is_some() {
            let disk = lock(&array.state).members[MemberId(newest)].clone();
            if let Some(m) = disk {
                let (_, space) = array.scrub_space();
                let (wi, out_of_date) = bitmap::WriteIntent::load(
                    m.disk.as_ref(),
                    &found[newest].sb,
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
            for (i, used) in use_member.iter().enumerate() {
                if !used {
                    st.members[MemberId(i)] = None;
                }
            }
            for (i, slot) in keep_replacing {
                st.roster.replacement[Slot(slot)] = Some(MemberId(i));
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
        Ok((array, report))
    }
}
