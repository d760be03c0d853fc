//! The data path: how one request becomes member I/O. A request is split into pieces (see
//! `plan.rs`), each piece is planned against the member states of the moment (with members
//! whose bad-block log covers the piece treated as lost), run phase by phase on the member
//! workers under its stripe lock, logged first where the array has a write log, and re-planned
//! when a member read fails; read errors that redundancy served are rewritten afterwards.

use super::*;

impl Array {
    /// Slot states and members, and for writes the members being copied onto per slot
    /// (empty when there are none), all under one lock.
    #[allow(clippy::type_complexity)]
    pub(crate) fn snapshot_for(
        &self,
        dir: Dir,
    ) -> (
        Vec<MemberState>,
        Vec<Option<Arc<Member>>>,
        Vec<Option<Arc<Member>>>,
    ) {
        let st = lock(&self.state);
        let members = st.slot_members();
        let replacements = if dir == Dir::Write
            && self
                .has_replacement
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            st.roster
                .replacement
                .iter()
                .map(|r| r.and_then(|i| st.members[i].clone()))
                .collect()
        } else {
            Vec::new()
        };
        (st.roster.slot_state.to_vec(), members, replacements)
    }

    /// Runs one request through the core: split, then batches of pieces phase by phase.
    pub(crate) fn run(
        &self,
        dir: Dir,
        array_sector: u64,
        user_ptr: *mut u8,
        user_len: usize,
        _fua: bool,
    ) -> Result<()> {
        self.bg.note_foreground();
        let sectors = (user_len / SECTOR) as u64;
        let mut suspects = Vec::new();
        // Writes are marked in the write-intent bitmap for as long as they run.
        let intent = self.bitmap.as_ref().filter(|_| dir == Dir::Write);
        if let Some(wi) = intent {
            wi.start_write(self, array_sector, sectors);
        }
        let r = match (&self.gather, dir) {
            (Some(g), Dir::Write) => {
                // SAFETY: the caller's buffer is valid for user_len bytes for the whole call,
                // and a write only reads it.
                let user = unsafe { std::slice::from_raw_parts(user_ptr as *const u8, user_len) };
                g.write(self, array_sector, sectors, user, &mut suspects)
            }
            _ => self.run_pieces(
                dir,
                array_sector,
                sectors,
                user_ptr,
                user_len,
                &mut suspects,
            ),
        };
        if let Some(wi) = intent {
            wi.end_write(self, array_sector, sectors);
        }
        if !suspects.is_empty() {
            self.fix_read_errors(suspects);
        }
        r
    }

    /// md's answer to a read error: the data was already served from redundancy; now the
    /// unreadable blocks are rewritten from redundancy and read back (patrol's repair), and
    /// what stays unreadable goes to the bad-block log. A member with more than
    /// [`MAX_CORRECTED_READ_ERRORS`] such errors, or whose repair fails, is failed.
    pub(crate) fn fix_read_errors(&self, suspects: Vec<(usize, u64, u64)>) {
        let layout = self.raid10_layout();
        for (slot, ms, n) in suspects {
            let slot = Slot(slot);
            let name = {
                let mut st = lock(&self.state);
                st.roster.read_errors[slot] += 1;
                let name = st.roster.slot_member[slot]
                    .and_then(|i| st.members[i].as_ref().map(|m| m.disk.name().to_string()));
                let Some(name) = name.filter(|_| st.roster.slot_state[slot].usable()) else {
                    continue; // failed or replaced meanwhile
                };
                if st.roster.read_errors[slot] > MAX_CORRECTED_READ_ERRORS {
                    drop(st);
                    self.member_failed(
                        slot,
                        &format!(
                            "more than {MAX_CORRECTED_READ_ERRORS} read errors corrected; failing it, as md does"
                        ),
                    );
                    continue;
                }
                st.events.push(ArrayEvent::ReadError {
                    member: name.clone(),
                    first_sector: ms,
                    end_sector: ms + n,
                    repaired: !self.read_only,
                });
                name
            };
            if self.read_only || self.check_writable().is_err() {
                continue;
            }
            match self.patrol_narrow(slot.0, ms, n, layout) {
                Ok((fixed, bad)) => {
                    let mut st = lock(&self.state);
                    st.events.push(ArrayEvent::ReadErrorsRepaired {
                        member: name,
                        rewritten_sectors: fixed,
                        bad_block_sectors: bad,
                    });
                }
                Err(e) => self.member_failed(slot, &format!("repairing a read error failed: {e}")),
            }
        }
    }

    /// Writes `[start, start + sectors)` from the front of `buf`.
    pub(crate) fn run_pieces_on(
        &self,
        start: u64,
        sectors: u64,
        buf: &[u8],
        suspects: &mut Vec<(usize, u64, u64)>,
    ) -> Result<()> {
        let len = sectors as usize * SECTOR;
        assert!(buf.len() >= len, "a write's buffer holds its sectors");
        // The pointer is only read from: the pieces of a write never write the user buffer.
        self.run_pieces(
            Dir::Write,
            start,
            sectors,
            buf.as_ptr() as *mut u8,
            len,
            suspects,
        )
    }

    pub(crate) fn run_pieces(
        &self,
        dir: Dir,
        array_sector: u64,
        sectors: u64,
        user_ptr: *mut u8,
        user_len: usize,
        suspects: &mut Vec<(usize, u64, u64)>,
    ) -> Result<()> {
        let pieces = plan::split(&self.geo, array_sector, sectors, self.max_band_sectors);
        // Cut before the batches are sized, so a write log's admission counts the pieces that
        // are logged; the cut under the locks below then only catches a range listed since.
        let pieces = self.cut_at_listed(&pieces).unwrap_or(pieces);
        let log = match dir {
            Dir::Write => self.log.as_deref(),
            Dir::Read => None,
        };
        let healthy = {
            let st = lock(&self.state);
            st.roster
                .slot_state
                .iter()
                .all(|s| *s == MemberState::InSync)
        };
        let mut i = 0;
        while i < pieces.len() {
            // One batch: consecutive pieces within the scratch budget (at least one).
            let mut j = i;
            let mut bytes = 0usize;
            let mut cut = write_log::PhaseCut::new(log, &self.geo);
            while j < pieces.len() {
                let b = piece_scratch_estimate(&self.geo, &pieces[j], healthy);
                let log_fits = cut.admit(&pieces[j]);
                if j > i && (bytes + b > self.batch_budget_bytes || !log_fits) {
                    break;
                }
                bytes += b;
                j += 1;
                if j - i >= 256 {
                    break;
                }
            }
            self.inflight.acquire();
            let mut keys: Vec<u64> = pieces[i..j].iter().map(|p| p.lock_key).collect();
            keys.sort_unstable();
            keys.dedup();
            self.locks.acquire(&keys);
            // Under the locks, so no step records a bad block in these stripes meanwhile.
            let cut = self.cut_at_listed(&pieces[i..j]);
            let batch = cut.as_deref().unwrap_or(&pieces[i..j]);
            let r = self.run_batch(dir, batch, user_ptr, user_len, suspects);
            self.locks.release(&keys);
            self.inflight.release();
            r?;
            i = j;
        }
        Ok(())
    }

    pub(crate) fn snapshot(&self) -> (Vec<MemberState>, Vec<Option<Arc<Member>>>) {
        let st = lock(&self.state);
        let members = st.slot_members();
        (st.roster.slot_state.to_vec(), members)
    }

    /// `pieces` cut where a member's bad-block log starts or ends a listed range inside one
    /// ([`plan::listed_edges`]); `None` when no piece needs it (no member lists anything
    /// there).
    fn cut_at_listed(&self, pieces: &[Piece]) -> Option<Vec<Piece>> {
        if !self.has_bad.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let st = lock(&self.state);
        let listed = |slot: usize| {
            st.roster.slot_member[Slot(slot)]
                .and_then(|i| st.bad.get(i))
                .map(Vec::as_slice)
        };
        let mut out: Option<Vec<Piece>> = None;
        for (k, p) in pieces.iter().enumerate() {
            let edges = plan::listed_edges(&self.geo, p, listed);
            if edges.is_empty() {
                if let Some(v) = &mut out {
                    v.push(p.clone());
                }
                continue;
            }
            out.get_or_insert_with(|| pieces[..k].to_vec())
                .extend(plan::cut(p, &edges));
        }
        out
    }

    /// Plans `piece` through the core ([`plan::plan_piece`]) with what the array knows now:
    /// whether a resync is pending, and which members' bad-block logs cover what.
    pub(crate) fn plan(
        &self,
        piece: &Piece,
        dir: Dir,
        states: &[MemberState],
        unreadable: &[usize],
        mirrors: Option<&plan::MirrorInputs>,
    ) -> Result<PieceOp> {
        let resync_pending = self
            .resync_pending
            .load(std::sync::atomic::Ordering::Relaxed);
        let unsynced_from = if resync_pending && dir == Dir::Write {
            lock(&self.state).resync_from
        } else {
            None
        };
        let guard = self
            .has_bad
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| lock(&self.state));
        let bad = |slot: usize, from: u64, n: u64| {
            guard.as_ref().is_some_and(|st| {
                st.roster.slot_member[Slot(slot)]
                    .and_then(|i| st.bad.get(i))
                    .is_some_and(|list| list.iter().any(|&(b, len)| b < from + n && from < b + len))
            })
        };
        let inputs = plan::PlanInputs {
            states,
            resync_pending,
            unsynced_from,
            unreadable,
            bad: guard
                .as_ref()
                .map(|_| &bad as &dyn Fn(usize, u64, u64) -> bool),
            mirrors,
        };
        let planned = plan::plan_piece(&self.geo, piece, dir, inputs);
        drop(guard);
        planned.map_err(|e| match e {
            PlanError::Unrecoverable { lost_members } => EngineError::ArrayFailed {
                detail: format!(
                    "RAID {} cannot {} this range without slots {:?}",
                    self.geo.md_level(),
                    if dir == Dir::Read { "read" } else { "write" },
                    lost_members
                ),
            },
        })
    }

    /// Runs a batch of pieces. A read error on a member during a read request does not fail
    /// the member: the piece is planned again without it (served from redundancy) and the
    /// range goes to `suspects`, repaired after the stripe locks are released. Read errors
    /// during a write, and write errors, fail the member.
    pub(crate) fn run_batch(
        &self,
        dir: Dir,
        pieces: &[Piece],
        user_ptr: *mut u8,
        user_len: usize,
        suspects: &mut Vec<(usize, u64, u64)>,
    ) -> Result<()> {
        // Members and replacements are taken together: a write planned against a slot's
        // member also reaches the replacement that may take the slot over meanwhile.
        let (mut states, mut members, mut replacements) = self.snapshot_for(dir);
        let mut mirrors = mirror_inputs(&self.geo, dir, &members);
        let mut ops: Vec<PieceOp> = Vec::with_capacity(pieces.len());
        for p in pieces {
            let op = self.plan(p, dir, &states, &[], mirrors.as_ref())?;
            // The request's next piece continues where this one leaves a copy's head.
            if let (Some(m), Some((slot, end))) = (mirrors.as_mut(), op.copy_read_end()) {
                if let Some(h) = m.heads.get_mut(slot) {
                    *h = end;
                }
            }
            ops.push(op);
        }
        let mut done = vec![false; ops.len()];
        // Per op: slots it must not read again (they returned a read error to it).
        let mut unreadable: Vec<Vec<usize>> = vec![Vec::new(); ops.len()];
        let _active = pool::ActiveGuard::enter();
        loop {
            // Collect the next phase of every op.
            let mut ios: Vec<(usize, plan::MemberIo)> = Vec::new();
            let mut phase_dir = vec![Dir::Read; ops.len()];
            for (k, op) in ops.iter_mut().enumerate() {
                if done[k] {
                    continue;
                }
                // SAFETY: no member I/O is in flight on the user buffer between phases; the
                // caller's buffer is valid for user_len bytes for the whole call.
                let user = unsafe {
                    match dir {
                        Dir::Read => {
                            UserBuf::Read(std::slice::from_raw_parts_mut(user_ptr, user_len))
                        }
                        Dir::Write => UserBuf::Write(std::slice::from_raw_parts(
                            user_ptr as *const u8,
                            user_len,
                        )),
                    }
                };
                match op.next(user) {
                    Step::Done => done[k] = true,
                    Step::Io { dir: d, ios: list } => {
                        phase_dir[k] = d;
                        ios.extend(list.into_iter().map(|io| (k, io)));
                    }
                }
            }
            if ios.is_empty() {
                return Ok(());
            }
            if mirrors.is_some() {
                // Where each copy's head will be: the next read of a stream continues there.
                for (_, io) in &ios {
                    if let (Dir::Read, Some(Some(m))) = (io.dir, members.get(io.member)) {
                        m.read_head.store(
                            io.member_sector + io.sectors,
                            std::sync::atomic::Ordering::Relaxed,
                        );
                    }
                }
            }
            // Space first: on sparse image files every block this phase writes is allocated
            // before anything is written, so a full filesystem fails the request here, with
            // every stripe whole, instead of half-way through a stripe (and it is not a member
            // failure: writing works again once there is room).
            if dir == Dir::Write {
                self.reserve_phase(&ios, &states, &members, &replacements)?;
            }
            // The write log goes first: what the phase writes is durable in the log before
            // any member is written.
            let hold = match (dir, self.log.as_deref()) {
                (Dir::Write, Some(log)) => {
                    let writing: Vec<bool> = (0..ops.len())
                        .map(|k| !done[k] && phase_dir[k] == Dir::Write)
                        .collect();
                    // SAFETY: as above; no member I/O of this phase has been issued yet.
                    let user =
                        unsafe { std::slice::from_raw_parts(user_ptr as *const u8, user_len) };
                    log.log_phase(
                        self,
                        write_log::Phase {
                            ops: &mut ops,
                            ios: &ios,
                            writing: &writing,
                            user,
                            states: &mut states,
                            members: &mut members,
                        },
                    )?
                }
                _ => None,
            };
            let batch = Batch::new();
            // (op, slot, to the slot's replacement, member sector, sectors, the device)
            let mut submitted: Vec<(usize, usize, bool, u64, u64, &Member)> =
                Vec::with_capacity(ios.len());
            let mut skipped_reads: Vec<usize> = Vec::new();
            // Members borrowed from the snapshot: no reference-count traffic per I/O. Members
            // being copied onto replacements get every write their slot gets.
            let mut jobs: Vec<(&Member, Job)> = Vec::with_capacity(ios.len());
            for (k, io) in &ios {
                let live = if io.dir == Dir::Read {
                    states[io.member].usable()
                } else {
                    states[io.member].writable()
                };
                let member = match (&members[io.member], live) {
                    (Some(m), true) => &**m,
                    _ => {
                        // The member went away after planning: a read must be replanned,
                        // a write to it is simply no longer needed.
                        if io.dir == Dir::Read {
                            skipped_reads.push(*k);
                        }
                        continue;
                    }
                };
                let len = io.sectors as usize * SECTOR;
                let ptr = match io.buf {
                    BufRef::User { offset_bytes } => {
                        debug_assert!(offset_bytes + len <= user_len);
                        // SAFETY: in bounds of the caller's buffer (the core plans within it).
                        unsafe { user_ptr.add(offset_bytes) }
                    }
                    BufRef::Scratch { index } => ops[*k].scratch_mut()[index].as_mut_ptr(),
                };
                if io.dir == Dir::Write {
                    if let Some(Some(r)) = replacements.get(io.member) {
                        submitted.push((*k, io.member, true, io.member_sector, io.sectors, r));
                        jobs.push((
                            &**r,
                            Job {
                                kind: JobKind::Write,
                                offset_bytes: r.data_offset_bytes
                                    + io.member_sector * SECTOR as u64,
                                ptr,
                                len,
                                batch: batch.clone(),
                                tag: submitted.len() - 1,
                                pieces: Vec::new(),
                            },
                        ));
                    }
                }
                let tag = submitted.len();
                submitted.push((*k, io.member, false, io.member_sector, io.sectors, member));
                jobs.push((
                    member,
                    Job {
                        kind: if io.dir == Dir::Read {
                            JobKind::Read
                        } else {
                            JobKind::Write
                        },
                        offset_bytes: member.data_offset_bytes + io.member_sector * SECTOR as u64,
                        ptr,
                        len,
                        batch: batch.clone(),
                        tag,
                        pieces: Vec::new(),
                    },
                ));
            }
            let (jobs, absorbed) =
                pool::merge_adjacent(jobs, user_ptr as usize..user_ptr as usize + user_len);
            batch.add(jobs.len());
            pool::run_phase(
                jobs.into_iter()
                    .map(|(m, job)| (&m.worker, m.disk.name(), job))
                    .collect(),
                &batch,
            );
            let errors = batch.wait();
            if let Some(hold) = hold {
                hold.written();
            }
            let mut replan: Vec<usize> = skipped_reads;
            let mut no_space = None;
            // A member or replacement failed by this phase: later phases must see it so.
            let mut membership_changed = false;
            for (first, err) in errors {
                // A merged command's error is the error of each piece it carried.
                let tags = std::iter::once(first).chain(
                    absorbed
                        .iter()
                        .filter(move |&&(kept, _)| kept == first)
                        .map(|&(_, tag)| tag),
                );
                let mut refused = false;
                // One suspect range per failed command: its pieces are contiguous on the
                // member, and a read error counts once against the member.
                let mut suspect: Option<(usize, u64, u64)> = None;
                for tag in tags {
                    let (k, slot, replacement, ms, n, device) = submitted[tag];
                    let action = plan::on_member_error(
                        &self.geo,
                        dir,
                        phase_dir[k],
                        err.is_no_space(),
                        replacement,
                        unreadable[k].contains(&slot),
                    );
                    match action {
                        plan::ErrorAction::ResyncAndRefuse => {
                            self.needs_resync_from(ms);
                            refused = true;
                        }
                        // The device that erred fails, in the role it has now: when a member
                        // fails, a spare may take its slot before the phase's other errors are
                        // seen, and a replacement may carry on as the slot's member.
                        plan::ErrorAction::FailReplacement => {
                            self.io_failed(device, &err.to_string());
                            membership_changed = true;
                        }
                        plan::ErrorAction::ReplanWithout => {
                            unreadable[k].push(slot);
                            match &mut suspect {
                                Some((_, _, total)) => *total += n,
                                None => suspect = Some((slot, ms, n)),
                            }
                            replan.push(k);
                        }
                        plan::ErrorAction::FailMember { replan: again } => {
                            self.io_failed(device, &err.to_string());
                            membership_changed = true;
                            if again {
                                replan.push(k);
                            }
                        }
                    }
                }
                suspects.extend(suspect);
                if refused {
                    self.report_no_space(&err);
                    no_space.get_or_insert(err);
                }
            }
            // The batch's later phases go by the members as they are now, not as planned: a
            // member whose write just failed holds stale data there, so it is neither read
            // nor written again (its reads replan the op, as below), and the write log fills
            // what it logs of it from redundancy instead (md's handle_stripe looks at each
            // device's Faulty bit every time it handles a stripe).
            if membership_changed || !replan.is_empty() {
                (states, members, replacements) = self.snapshot_for(dir);
            }
            if !replan.is_empty() {
                replan.sort_unstable();
                replan.dedup();
                for k in replan {
                    ops[k] =
                        self.plan(&pieces[k], dir, &states, &unreadable[k], mirrors.as_ref())?;
                    done[k] = false;
                }
            }
            if let Some(err) = no_space {
                return Err(EngineError::Disk(err));
            }
            if dir == Dir::Write {
                self.check_failed()?;
            }
        }
    }

    /// Reserves the space of a write phase on every member (and replacement) it writes; the
    /// first member without room ends the request with its [`DiskError`] (`NoSpace`), before
    /// anything of the phase is written. Other errors are left to the writes themselves.
    pub(crate) fn reserve_phase(
        &self,
        ios: &[(usize, plan::MemberIo)],
        states: &[MemberState],
        members: &[Option<Arc<Member>>],
        replacements: &[Option<Arc<Member>>],
    ) -> Result<()> {
        for (_, io) in ios {
            if io.dir != Dir::Write || !states[io.member].writable() {
                continue;
            }
            let len = io.sectors * SECTOR as u64;
            let targets = [
                &members[io.member],
                replacements.get(io.member).unwrap_or(&None),
            ];
            for m in targets.into_iter().flatten() {
                let at = m.data_offset_bytes + io.member_sector * SECTOR as u64;
                if let Err(e) = m.disk.reserve(at, len) {
                    if e.is_no_space() {
                        self.report_no_space(&e);
                        return Err(EngineError::Disk(e));
                    }
                }
            }
        }
        Ok(())
    }

    /// Records a write refused for want of space, once until writing works again (a client
    /// retrying into a full filesystem does not flood the log).
    pub(crate) fn report_no_space(&self, err: &raidkit_disk::DiskError) {
        if !self
            .no_space
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            lock(&self.state).events.push(ArrayEvent::NoSpace {
                member: err.member.clone(),
                detail: err.to_string(),
            });
        }
    }

    /// A write left stripes at member sector `ms` (array sector for RAID 10) possibly
    /// inconsistent without a crash: a resync from there is pending, as after an unclean stop.
    pub(crate) fn needs_resync_from(&self, ms: u64) {
        if self.geo.level() == RaidLevel::Raid0 {
            return;
        }
        let at = if self.geo.level() == RaidLevel::Raid10 {
            // RAID 10's resync runs over array sectors: from the start is always safe.
            0
        } else {
            ms
        };
        let mut st = lock(&self.state);
        st.resync_from = Some(st.resync_from.map_or(at, |r| r.min(at)));
        self.resync_pending
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Scratch bytes a piece's plan may allocate (see `PieceOp::plan_band_write`). On a healthy
/// array the plan is known from the piece's shape: a full-stripe write needs only new parity,
/// a read-modify-write the old data and old and new parity, a reconstruct-write the data it
/// does not write and new parity, whichever reads less. Degraded plans may need every block.
pub(crate) fn piece_scratch_estimate(geo: &Geo, p: &Piece, healthy: bool) -> usize {
    match &p.kind {
        PieceKind::Copies { .. } => 0,
        PieceKind::Band {
            sectors,
            dd_first,
            dd_last,
            ..
        } => {
            let (n, d) = (geo.raid_disks, geo.data_disks());
            let parity = n - d;
            let k = dd_last + 1 - dd_first;
            let blocks = if !healthy {
                n + 2
            } else if k >= d {
                parity
            } else if k + parity < d - k {
                k + 2 * parity
            } else {
                d - k + parity
            };
            blocks * *sectors as usize * SECTOR
        }
    }
}

pub(crate) fn aligned_window(offset: u64, len: usize) -> (u64, usize) {
    let s = SECTOR as u64;
    let start = offset / s * s;
    let end = (offset + len as u64).div_ceil(s) * s;
    (start, (end - start) as usize)
}

/// For a read of a mirror level with a spinning member: each slot's kind and load, for the
/// core's choice of copy ([`plan::choose_copy`]). `None` otherwise (no cost on other paths).
fn mirror_inputs(
    geo: &Geo,
    dir: Dir,
    members: &[Option<Arc<Member>>],
) -> Option<plan::MirrorInputs> {
    let copies = matches!(geo.scheme(), crate::geometry::Scheme::Copies { .. });
    let spinning = members.iter().flatten().any(|m| m.rotational);
    if dir != Dir::Read || !copies || !spinning {
        return None;
    }
    Some(plan::MirrorInputs {
        rotational: members
            .iter()
            .map(|m| m.as_ref().is_some_and(|m| m.rotational))
            .collect(),
        in_flight: members
            .iter()
            .map(|m| m.as_ref().map_or(0, |m| m.io.in_flight()))
            .collect(),
        heads: members
            .iter()
            .map(|m| {
                m.as_ref().map_or(u64::MAX, |m| {
                    m.read_head.load(std::sync::atomic::Ordering::Relaxed)
                })
            })
            .collect(),
    })
}
