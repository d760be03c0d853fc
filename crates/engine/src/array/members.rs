//! Membership: failing, removing, adding, re-adding and replacing members, spares taking a
//! slot, bad blocks recorded, and the superblock writes each of those makes.

use super::*;

impl Array {
    /// Marks the member at `index` (in the order given at create/assemble) faulty.
    pub fn fail_member(&self, index: usize) -> Result<()> {
        let index = MemberId(index);
        let slot = {
            let st = lock(&self.state);
            if index.0 >= st.members.len() || st.members[index].is_none() {
                return Err(EngineError::Invalid(format!("no member {index}")));
            }
            st.roster.slot_member.find(&Some(index))
        };
        let replacing = lock(&self.state).roster.replacement.find(&Some(index));
        match (slot, replacing) {
            (Some(slot), _) => {
                self.member_failed(slot, "failed on request");
                Ok(())
            }
            (None, Some(slot)) => {
                self.replacement_failed(slot, "failed on request");
                Ok(())
            }
            (None, None) => {
                let st = lock(&self.state);
                let sb = &st.roster.sbs[index];
                if sb.role_of(sb.dev_number) == DevRole::Faulty {
                    // Already faulty: failing it again changes nothing.
                    return Ok(());
                }
                Err(EngineError::Invalid(format!(
                    "member {index} is not an active member (a spare); remove it instead"
                )))
            }
        }
    }

    /// Detaches a faulty member or a spare (md refuses to remove an active in-sync member).
    pub fn remove_member(&self, index: usize) -> Result<()> {
        let index = MemberId(index);
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        let names = Self::names(&st);
        let t = st.roster.remove(index, &names)?;
        if let Some(m) = st.members.get_mut(index) {
            *m = None;
        }
        self.apply(&mut st, t);
        Ok(())
    }

    /// Adds `disk` as a spare (it gets a superblock of this array with role spare). When a slot
    /// is missing, the spare takes it at once and is rebuilt by the rebuild task (the
    /// background service runs it by itself; otherwise call [`Array::run_pending`]).
    pub fn add_spare(&self, disk: Box<dyn Disk>, device_uuid: [u8; 16]) -> Result<()> {
        self.check_writable()?;
        let disk: Arc<dyn Disk> = Arc::from(disk);
        {
            let _g = lock(&self.sb_lock);
            let mut st = lock(&self.state);
            let (index, dev_number) = self.attach_locked(&mut st, disk.clone(), device_uuid)?;
            st.events.push(ArrayEvent::SpareAdded {
                member: disk.name().to_string(),
            });
            let names = Self::names(&st);
            let spare = Transition {
                roles: vec![(dev_number, DevRole::Spare)],
                write: true,
                ..Transition::default()
            };
            let t = spare.then(
                st.roster
                    .take_spares(&self.geo, &names, self.spares_allowed()),
            );
            let failed = self.apply(&mut st, t);
            // A spare whose superblock never reached it is no spare: say so, not success.
            if let Some((_, err)) = failed.into_iter().find(|(i, _)| *i == index) {
                return Err(err);
            }
        }
        self.bg.wake();
        Ok(())
    }

    /// Takes back a member that left the array (failed, or pulled) into its old slot, keeping
    /// its data: with a write-intent bitmap, only the regions written since it left are
    /// rebuilt (md's re-add). Refused, with the reason, when the array has no bitmap, the
    /// member belongs elsewhere, its slot is taken, or it left before the bitmap's bits were
    /// last cleared; then add it as a new spare instead.
    pub fn re_add(&self, disk: Box<dyn Disk>) -> Result<usize> {
        self.check_writable()?;
        let found = read_superblock(disk.as_ref())?;
        let name = disk.name().to_string();
        let Some(wi) = &self.bitmap else {
            return Err(EngineError::Invalid(format!(
                "{name}: the array has no write-intent bitmap, so a returning member cannot be brought up to date from it; add it as a new spare"
            )));
        };
        let disk: Arc<dyn Disk> = Arc::from(disk);
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        let Some(template) = st
            .roster
            .sbs
            .iter()
            .zip(&st.members)
            .find(|(_, m)| m.is_some())
            .map(|(sb, _)| sb.clone())
        else {
            return Err(EngineError::Invalid(
                "no member left to copy the superblock from".into(),
            ));
        };
        if found.sb.set_uuid != template.set_uuid {
            return Err(EngineError::Foreign {
                member: name,
                member_uuid: found.sb.set_uuid.to_mdadm_string(),
                array_uuid: template.set_uuid.to_mdadm_string(),
                reference: "the running array".into(),
            });
        }
        if let Some(i) = st.members.ids().find(|&i| {
            st.members[i].is_some() && st.roster.sbs[i].device_uuid == found.sb.device_uuid
        }) {
            let in_use = st.roster.slot_member.contains(&Some(i))
                || st.roster.replacement.contains(&Some(i));
            if in_use {
                return Err(EngineError::Duplicate {
                    member: name,
                    other: st.members[i]
                        .as_ref()
                        .map(|m| m.disk.name().to_string())
                        .unwrap_or_default(),
                    device_uuid: found.sb.device_uuid.to_mdadm_string(),
                });
            }
            // The same device is still attached as faulty: the returning copy replaces it.
            st.members[i] = None;
        }
        let DevRole::Active(slot) = found.sb.role() else {
            return Err(EngineError::Invalid(format!(
                "{name}: it was not an active member (role {:?}); add it as a spare",
                found.sb.role()
            )));
        };
        let slot = Slot(slot as usize);
        if slot.0 >= self.geo.raid_disks || st.roster.slot_state[slot].writable() {
            return Err(EngineError::Invalid(format!(
                "{name}: its slot {slot} is held by another member now; add it as a new spare"
            )));
        }
        let cleared = wi.events_cleared();
        if found.sb.events < cleared {
            return Err(EngineError::Invalid(format!(
                "{name}: it left at events {}, before the bitmap was last cleared (events {cleared}); the bitmap no longer shows everything it missed, so add it as a new spare (full rebuild)",
                found.sb.events
            )));
        }
        if found.sb.data_size_sectors < self.geo.member_data_sectors {
            return Err(EngineError::SizeMismatch {
                member: name,
                detail: "its data area is smaller than the array's members'".into(),
            });
        }
        let used: Vec<u32> = st
            .roster
            .sbs
            .iter()
            .zip(&st.members)
            .filter(|(_, m)| m.is_some())
            .map(|(sb, _)| sb.dev_number)
            .collect();
        let dev_number = if used.contains(&found.sb.dev_number) {
            (0..).find(|d| !used.contains(d)).unwrap_or(0)
        } else {
            found.sb.dev_number
        };
        let mut sb = template;
        sb.device_uuid = found.sb.device_uuid;
        sb.dev_number = dev_number;
        sb.data_offset_sectors = found.sb.data_offset_sectors;
        sb.data_size_sectors = found.sb.data_size_sectors;
        sb.super_offset_sectors = found.sb.super_offset_sectors;
        sb.bblog_offset = found.sb.bblog_offset;
        sb.bblog_size_sectors = found.sb.bblog_size_sectors;
        sb.bblog_shift = found.sb.bblog_shift;
        sb.feature_map.remove(FeatureMap::REPLACEMENT);
        sb.feature_map.remove(FeatureMap::BAD_BLOCKS);
        sb.set_role(dev_number, DevRole::Active(slot.0 as u16))
            .map_err(meta_err)?;
        sb.set_recovery_offset(0);
        sb.feature_map.insert(FeatureMap::RECOVERY_BITMAP);
        let member = Member::start(st.members.len(), disk, found.sb.data_offset_sectors * 512)?;
        st.members.push(Some(Arc::new(member)));
        st.roster.sbs.push(sb);
        let index = MemberId(st.members.len() - 1);
        let names = Self::names(&st);
        let t = st.roster.re_added(slot, index, wi.set_bits(), &names);
        self.apply(&mut st, t);
        Ok(slot.0)
    }

    /// Starts copying the active member at `index` onto `disk` while it stays in service
    /// (md's `--replace`): the new member is the slot's replacement, gets every write the slot
    /// gets, and is filled by the replace task; when the copy is complete it takes the slot
    /// and the old member is marked faulty. Should the old member fail first, the copy
    /// carries on as an ordinary rebuild.
    pub fn replace_member(
        &self,
        index: usize,
        disk: Box<dyn Disk>,
        device_uuid: [u8; 16],
    ) -> Result<()> {
        let index = MemberId(index);
        self.check_writable()?;
        if self.geo.level() == RaidLevel::Raid0 {
            return Err(EngineError::Invalid(
                "RAID 0 cannot replace a member in service (md has no replacement for it); copy the array instead".into(),
            ));
        }
        let disk: Arc<dyn Disk> = Arc::from(disk);
        {
            let _g = lock(&self.sb_lock);
            let mut st = lock(&self.state);
            let slot = match st.roster.slot_member.find(&Some(index)) {
                Some(slot) if st.roster.slot_state[slot].usable() => slot,
                _ => {
                    return Err(EngineError::Invalid(format!(
                        "member {index} is not an active member in sync; only those can be replaced (add a spare to rebuild a missing one)"
                    )))
                }
            };
            if st.roster.replacement[slot].is_some() {
                return Err(EngineError::Invalid(format!(
                    "slot {slot} is already being replaced"
                )));
            }
            let (new, _) = self.attach_locked(&mut st, disk.clone(), device_uuid)?;
            let names = Self::names(&st);
            let t = st.roster.replace_starts(slot, new, &names)?;
            self.apply(&mut st, t);
        }
        Ok(())
    }

    /// Attaches `disk` as a new member with a superblock of this array (role spare) and a
    /// worker; returns its index and device number. Caller holds `sb_lock`.
    pub(crate) fn attach_locked(
        &self,
        st: &mut State,
        disk: Arc<dyn Disk>,
        device_uuid: [u8; 16],
    ) -> Result<(MemberId, u32)> {
        let Some(template) = st
            .roster
            .sbs
            .iter()
            .zip(&st.members)
            .find(|(_, m)| m.is_some())
            .map(|(sb, _)| sb.clone())
        else {
            return Err(EngineError::Invalid(
                "no member left to copy the superblock from".into(),
            ));
        };
        let used: Vec<u32> = st
            .roster
            .sbs
            .iter()
            .zip(&st.members)
            .filter(|(_, m)| m.is_some())
            .map(|(sb, _)| sb.dev_number)
            .collect();
        let dev_number = (0..).find(|d| !used.contains(d)).unwrap_or(0);
        let shape = CreateShape {
            version: self.version,
            device_sectors: disk.size_bytes() / 512,
            level: level_from_md(self.geo.md_level()),
            layout: self.geo.md_layout(),
            raid_disks: self.geo.raid_disks as u32,
            chunk_sectors: self.geo.chunk_sectors as u32,
            with_bitmap: false,
        };
        // A member of an array with a partial parity log gets mdadm's placement for one, so
        // its log area stays clear of its data.
        let dl = if self.consistency_policy() == ConsistencyPolicy::Ppl {
            DataLayout::mdadm_create_ppl(&shape)
        } else {
            DataLayout::mdadm_create(&shape)
        }
        .map_err(meta_err)?;
        if dl.data_size_sectors < self.geo.member_data_sectors {
            return Err(EngineError::SizeMismatch {
                member: disk.name().to_string(),
                detail: format!(
                    "only {} data sectors, the array needs {} per member",
                    dl.data_size_sectors, self.geo.member_data_sectors
                ),
            });
        }
        // Space for all of it before anything is written: its metadata now, and the data a
        // rebuild onto it writes, so a full filesystem refuses the add rather than failing
        // the rebuild half-way.
        let used_end = (dl.data_offset_sectors + self.geo.member_data_sectors) * 512;
        disk.reserve(0, used_end.min(disk.size_bytes()))?;
        if dl.super_offset_sectors * 512 >= used_end {
            disk.reserve(used_end, disk.size_bytes() - used_end)?;
        }
        let mut sb = template;
        sb.device_uuid = Uuid(device_uuid);
        sb.dev_number = dev_number;
        sb.data_offset_sectors = dl.data_offset_sectors;
        sb.data_size_sectors = dl.data_size_sectors;
        sb.super_offset_sectors = dl.super_offset_sectors;
        sb.bblog_offset = dl.bblog_offset;
        sb.bblog_size_sectors = dl.bblog_size_sectors;
        sb.set_role(dev_number, DevRole::Spare).map_err(meta_err)?;
        sb.clear_recovery_offset();
        sb.feature_map.remove(FeatureMap::REPLACEMENT);
        sb.feature_map.remove(FeatureMap::BAD_BLOCKS);
        if let Some(log) = &self.log {
            log.member_joins(disk.as_ref(), &mut sb, &dl)?;
        }
        let member = Member::start(st.members.len(), disk, dl.data_offset_sectors * 512)?;
        st.members.push(Some(Arc::new(member)));
        st.roster.sbs.push(sb);
        Ok((MemberId(st.members.len() - 1), dev_number))
    }

    /// Carries out a membership decision: reports its events, writes the roles it records
    /// into every working member's superblock (events + 1), and wakes the task service when
    /// a slot is to be rebuilt. Caller holds `sb_lock` and passes the state guard. Returns
    /// the members whose superblock could not be written (see `update_superblocks`).
    pub(crate) fn apply(&self, st: &mut State, t: Transition) -> Vec<(MemberId, EngineError)> {
        for e in &t.events {
            st.events.push(e.clone());
        }
        self.note_replacements(st);
        let failed = if t.write {
            self.update_superblocks(st, |sb| t.apply_roles(sb))
        } else {
            Vec::new()
        };
        if t.wake {
            self.bg.wake();
        }
        failed
    }

    /// The name of every attached member, for membership decisions.
    pub(crate) fn names(st: &State) -> Names {
        ByMember::from_vec(
            st.members
                .iter()
                .map(|m| m.as_ref().map(|m| m.disk.name().to_string()))
                .collect(),
        )
    }

    /// Spares may take slots: the array is writable.
    fn spares_allowed(&self) -> bool {
        !self.read_only
    }

    /// Applies `change` to every working member's superblock, bumps events and writes them
    /// (then flushes). Caller holds `sb_lock` and passes the state guard.
    ///
    /// A member whose superblock cannot be written is one more membership decision: one in a
    /// slot is failed ([`Roster::fail`], which may hand its slot to a spare), one in no slot (a
    /// spare) is marked faulty in every superblock kept in memory ([`Roster::fail_spare`],
    /// written at the next update, as md does). What those decide is written in the next round
    /// of the same loop, until a round writes everywhere it should or there is nothing left to
    /// write. Returns each member that failed so (index as in `members`) with its error.
    pub(crate) fn update_superblocks(
        &self,
        st: &mut State,
        change: impl Fn(&mut Superblock),
    ) -> Vec<(MemberId, EngineError)> {
        let mut failed = Vec::new();
        let mut next = Transition::default();
        let mut first = true;
        loop {
            let t = now();
            for sb in st.roster.sbs.iter_mut() {
                if first {
                    change(sb);
                } else {
                    next.apply_roles(sb);
                }
                sb.bump_events(t);
            }
            first = false;
            if self.read_only || st.roster.failed.is_some() {
                return failed;
            }
            let failures = self.write_superblocks(st);
            self.intent_follow_events(st);
            if failures.is_empty() {
                return failed;
            }
            let names = Self::names(st);
            next = Transition::default();
            for (i, slot, err) in failures {
                let name = names[i].clone().unwrap_or_default();
                let why = format!("{name}: superblock write failed: {err}");
                let t = match slot {
                    Some(s) => st
                        .roster
                        .fail(&self.geo, s, &why, &names, self.spares_allowed()),
                    None => st.roster.fail_spare(i, &why, &names),
                };
                next = next.then(t);
                failed.push((i, err));
            }
            for e in &next.events {
                st.events.push(e.clone());
            }
            self.note_replacements(st);
            if next.wake {
                self.bg.wake();
            }
            if !next.write {
                return failed;
            }
        }
    }

    /// Writes (and flushes) the superblock of every member that gets one: those in a slot
    /// still written to, and those in no slot not recorded faulty. Returns each that failed,
    /// with its slot.
    fn write_superblocks(&self, st: &State) -> Vec<(MemberId, Option<Slot>, EngineError)> {
        let mut failures = Vec::new();
        if self.frozen {
            // A view of an online reshape: the reshape writes the superblocks.
            return failures;
        }
        for i in st.members.ids() {
            let Some(m) = st.members[i].clone() else {
                continue;
            };
            let slot = st.roster.slot_member.find(&Some(i));
            if let Some(s) = slot {
                if !st.roster.slot_state[s].writable() {
                    continue;
                }
            } else if st.roster.sbs[i].role_of(st.roster.sbs[i].dev_number) == DevRole::Faulty {
                continue;
            }
            let r = write_superblock(m.disk.as_ref(), &st.roster.sbs[i], self.version)
                .and_then(|_| m.disk.flush().map_err(EngineError::from));
            if let Err(e) = r {
                failures.push((i, slot, e));
            }
        }
        failures
    }

    /// Records `[ms, ms + n)` of member `index` in its md bad-block log (and in memory, so
    /// reads avoid it). Without a log, or with a full one, the member is failed instead, as
    /// md does. Caller holds no locks.
    pub(crate) fn record_bad_block(&self, index: MemberId, ms: u64, n: u64) -> Result<bool> {
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        let slot = st.roster.slot_member.find(&Some(index));
        let sb = st.roster.sbs[index].clone();
        let Some(member) = st.members[index].clone() else {
            return Ok(false);
        };
        let unit = 1u64 << sb.bblog_shift;
        let first = (sb.data_offset_sectors + ms) / unit * unit;
        let last = (sb.data_offset_sectors + ms + n).div_ceil(unit) * unit;
        let count = st.members.len();
        if st.bad.len() < count {
            st.bad.resize(count, Vec::new());
        }
        let mut list: Vec<raidkit_metadata::BadBlock> = st.bad[index]
            .iter()
            .map(|&(b, len)| raidkit_metadata::BadBlock {
                sector: sb.data_offset_sectors + b,
                len_sectors: len,
            })
            .collect();
        list.push(raidkit_metadata::BadBlock {
            sector: first,
            len_sectors: last - first,
        });
        list.sort();
        let list = merge_bad_blocks(list, unit);
        let encoded = if sb.bblog_offset != 0 && sb.bblog_size_sectors > 0 {
            raidkit_metadata::badblocks::encode(&list, sb.bblog_shift, sb.bblog_size_sectors).ok()
        } else {
            None
        };
        let Some(page) = encoded else {
            drop(st);
            drop(_g);
            if let Some(slot) = slot {
                self.member_failed(
                    slot,
                    "an unreadable range could not be rewritten and there is no room to record it as a bad block",
                );
            }
            return Ok(false);
        };
        let at = (sb.super_offset_sectors as i64 + sb.bblog_offset as i64) as u64 * 512;
        member.disk.write_at(&page, at)?;
        st.bad[index] = data_ranges(&list, sb.data_offset_sectors);
        st.roster.sbs[index]
            .feature_map
            .insert(FeatureMap::BAD_BLOCKS);
        self.has_bad
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let name = member.disk.name().to_string();
        st.events.push(ArrayEvent::BadBlocksRecorded {
            member: name,
            first_sector: first,
            last_sector: last,
        });
        self.update_superblocks(&mut st, |_| {});
        Ok(true)
    }

    /// Keeps the lock-free "any replacement?" flag in step with the state.
    pub(crate) fn note_replacements(&self, st: &State) {
        self.has_replacement.store(
            st.roster.replacement.iter().any(|r| r.is_some()),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The replacement of `slot` failed: it is marked faulty and the slot's member stays.
    pub(crate) fn replacement_failed(&self, slot: Slot, why: &str) {
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        let names = Self::names(&st);
        let t = st.roster.fail_replacement(slot, why, &names);
        self.apply(&mut st, t);
    }

    /// An I/O to `member` failed: fails it in whatever role it has now (see
    /// [`Roster::fail_member`]), not whoever fills the slot it was in when the I/O was issued.
    pub(crate) fn io_failed(&self, member: &Member, why: &str) {
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        let Some(id) = st
            .members
            .position(|m| m.as_deref().is_some_and(|m| std::ptr::eq(m, member)))
        else {
            return;
        };
        let names = Self::names(&st);
        let t = st
            .roster
            .fail_member(&self.geo, id, why, &names, self.spares_allowed());
        self.apply(&mut st, t);
    }

    /// Marks slot `slot` faulty after an error (or on request).
    pub(crate) fn member_failed(&self, slot: Slot, why: &str) {
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        self.fail_locked(&mut st, slot, why);
    }

    /// md skips a resync that cannot run because a parity array has lost as many members as
    /// its level can lose (`raid5_sync_request`: degraded >= max_degraded), and counts it done:
    /// parity is then the only record of the missing members' data, and recomputing it from
    /// the data left would destroy that. (Stripes a crash left inconsistent were made whole
    /// by the partial parity log or the journal where the array has one.)
    pub(crate) fn skip_resync_when_fully_degraded(&self, st: &mut State) {
        let Scheme::Parity { max_degraded } = self.geo.scheme() else {
            return;
        };
        let lost = st.roster.slot_state.iter().filter(|s| !s.usable()).count();
        if st.resync_from.is_some() && lost >= max_degraded as usize {
            st.resync_from = None;
            self.resync_pending
                .store(false, std::sync::atomic::Ordering::Relaxed);
            st.events.push(ArrayEvent::ResyncSkipped {
                missing_slots: lost,
            });
        }
    }

    /// Fails slot `slot`'s member ([`Roster::fail`]) and writes what that decided.
    pub(crate) fn fail_locked(&self, st: &mut State, slot: Slot, why: &str) {
        let names = Self::names(st);
        let t = st
            .roster
            .fail(&self.geo, slot, why, &names, self.spares_allowed());
        self.apply(st, t);
    }
}
