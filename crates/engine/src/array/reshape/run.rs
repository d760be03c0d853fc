//! A reshape run: steps that read the old layout and write the new one, checkpoints, and member failures along the way.

use super::*;

/// A reshape run's state: the members, who is written, the superblocks, what happened.
pub(super) struct Run<'r> {
    members: &'r [Box<dyn Disk>],
    found: &'r [FoundSuperblock],
    shape: Shape,
    sbs: Vec<Superblock>,
    /// Members whose superblocks are written: those assembly uses, but for the lost.
    written: Vec<bool>,
    events: u64,
    report: ReshapeReport,
}

impl Run<'_> {
    /// md's answer to a member failing in a reshape: faulty, and the reshape goes on without
    /// it while the array survives (recorded at the next round of superblocks).
    fn lose(&mut self, slot: usize, err: EngineError) -> Result<()> {
        // The new layout must survive the loss, and so must the old one still to be read
        // (where a fresh slot already counts as lost).
        if !self.shape.survives_losing(Some(slot)) {
            return Err(err);
        }
        let i = self.shape.slot_member[slot].expect("a slot being written has a member");
        self.shape.lost[slot] = true;
        self.written[i] = false;
        let dev = self.found[i].sb.dev_number;
        for sb in self.sbs.iter_mut() {
            sb.set_role(dev, DevRole::Faulty)
                .map_err(|e| EngineError::Metadata(e.to_string()))?;
        }
        self.report
            .failed_members
            .push(self.members[i].name().to_string());
        Ok(())
    }

    /// Flushes every member, then records the reshape at `pos` in every superblock; a
    /// member that fails either is lost and the round made again without it.
    fn checkpoint(&mut self, pos: u64) -> Result<()> {
        loop {
            let mut failed = None;
            for slot in 0..self.shape.slot_member.len() {
                if let Some(m) = self.shape.member(self.members, slot) {
                    if let Err(e) = m.flush() {
                        failed = Some((slot, EngineError::from(e)));
                        break;
                    }
                }
            }
            if failed.is_none() {
                for (i, sb) in self.sbs.iter_mut().enumerate() {
                    record(sb, &self.shape, i, pos);
                }
                failed = self.round().err().map(|(i, e)| {
                    let slot = self.shape.slot_of(i).expect("written members have slots");
                    (slot, e)
                });
            }
            match failed {
                None => break,
                Some((slot, e)) => self.lose(slot, e)?,
            }
        }
        self.report.checkpoints += 1;
        Ok(())
    }

    /// One round of superblocks (events one past the last); the member that failed, if one.
    fn round(&mut self) -> std::result::Result<(), (usize, EngineError)> {
        let t = now();
        for (i, sb) in self.sbs.iter_mut().enumerate() {
            if !self.written[i] {
                continue;
            }
            sb.events = self.events;
            sb.bump_events(t);
            let disk = self.members[i].as_ref();
            write_superblock(disk, sb, self.found[i].version)
                .and_then(|_| disk.flush().map_err(EngineError::from))
                .map_err(|e| (i, e))?;
        }
        self.events += 1;
        Ok(())
    }
}

/// Moves the data from `start` to the end, recording progress, then writes the superblocks
/// of the finished array.
pub(super) fn run(
    members: &[Box<dyn Disk>],
    found: &[FoundSuperblock],
    a: &Assembly,
    shape: Shape,
    sbs: Vec<Superblock>,
    start: Start,
    ctl: &ReshapeControl,
) -> Result<ReshapeReport> {
    let mut written: Vec<bool> = (0..members.len())
        .map(|i| a.use_member[MemberId(i)])
        .collect();
    for (slot, m) in shape.slot_member.iter().enumerate() {
        if let (true, Some(i)) = (shape.lost[slot], m) {
            written[*i] = false;
        }
    }
    let progress = ctl.progress;
    let f = shape.way;
    let start_at = match start {
        Start::Fresh => f.first(),
        Start::At(pos) => pos,
    };
    let total = f.end() * SECTOR as u64;
    let old_end = shape.old.array_sectors();
    let max_step = MAX_STEP_BYTES / SECTOR as u64;
    let first = (0..shape.lost.len()).find(|&s| !shape.lost[s]).unwrap_or(0);
    let report = ReshapeReport {
        old_raid_devices: shape.old.raid_disks,
        new_raid_devices: shape.new.raid_disks,
        old_level: shape.old.md_level(),
        new_level: shape.new.md_level(),
        old_layout: shape.old.md_layout(),
        new_layout: shape.new.md_layout(),
        old_chunk_sectors: shape.old.chunk_sectors,
        new_chunk_sectors: shape.new.chunk_sectors,
        new_members: Vec::new(),
        old_array_bytes: old_end * SECTOR as u64,
        new_array_bytes: total,
        started_at_sectors: start_at,
        checkpoints: 0,
        read_bytes: 0,
        written_bytes: 0,
        old_data_offset: shape.old_offset[first],
        new_data_offset: shape.new_offset[first],
        failed_members: Vec::new(),
        finished: false,
        position_sectors: start_at,
        backwards: matches!(f, Way::Backward(_)),
        rebuild_slots: Vec::new(),
        left_members: Vec::new(),
    };
    let mut run = Run {
        members,
        found,
        shape,
        sbs,
        written,
        events: a.nsb.events,
        report,
    };
    if let Start::Fresh = start {
        for (i, sb) in run.sbs.iter_mut().enumerate() {
            record(sb, &run.shape, i, start_at);
        }
        // Members before it may have recorded the start: a member failing here is lost as
        // anywhere in the reshape (recorded faulty, the round made again without it), and
        // the reshape goes on while both layouts survive; nothing has moved yet.
        while let Err((i, e)) = run.round() {
            let Some(slot) = run.shape.slot_of(i) else {
                return Err(e);
            };
            run.lose(slot, e)?;
        }
    }
    let (mut pos, mut recorded) = (start_at, start_at);
    let mut last = Instant::now();
    let mut bufs = StepBuffers::default();
    progress(f.done(pos) * SECTOR as u64, total);
    let pause = ctl.pause_at_bytes.map_or(u64::MAX, |b| b / SECTOR as u64);
    // Two sets of old-layout buffers: this step's, and the next step's, read while this one
    // is laid out and written (the drives stay busy; the read is of old rows the rule keeps
    // this step's writes away from).
    let (mut old, mut spare): (Vec<Vec<u8>>, Vec<Vec<u8>>) = Default::default();
    type Ahead<'s> = std::thread::ScopedJoinHandle<'s, (Vec<Vec<u8>>, StepRead)>;
    let stopped = std::thread::scope(|sc| -> Result<bool> {
        // The read of the next step: its range, the slots lost when it began, its thread.
        let mut ahead: Option<((u64, u64), Vec<bool>, Ahead<'_>)> = None;
        let join = |h: Ahead<'_>| {
            h.join().unwrap_or_else(|_| {
                let panicked = EngineError::Invalid("a reshape read thread panicked".into());
                (Vec::new(), Err(StepError::Other(panicked)))
            })
        };
        while pos != f.last() {
            if ctl.stop.load(Ordering::Relaxed) || f.done(pos) >= pause {
                if let Some((.., h)) = ahead.take() {
                    // Its data is not used.
                    let _ = join(h);
                }
                run.checkpoint(pos)?;
                return Ok(true);
            }
            // Up to the pause at most (a step moves one unit at least).
            let cap = max_step.min(pause - f.done(pos));
            let mut range = f.step(pos, recorded, cap);
            if range.0 == range.1 || last.elapsed() >= CHECKPOINT_EVERY {
                run.checkpoint(pos)?;
                (recorded, last) = (pos, Instant::now());
                range = f.step(pos, recorded, cap);
                if range.0 == range.1 {
                    return Err(EngineError::Invalid(format!(
                        "reshape: no new stripe fits at array sector {pos} (data offsets moved by {} sectors)",
                        f.diff()
                    )));
                }
            }
            let (from, to) = range;
            // This step's old data: the read ahead when it read this range with the same
            // slots lost, else read now.
            let mut read = None;
            if let Some((r, lost, h)) = ahead.take() {
                let (got, result) = join(h);
                if r == range && lost == run.shape.lost {
                    (old, read) = (got, Some(result));
                } else {
                    spare = got;
                }
            }
            let read = match read {
                Some(r) => r,
                None => read_old(members, &run.shape, &mut old, from, to, old_end),
            };
            let next_pos = f.after(range);
            let result = read.and_then(|r| {
                // The next step's read, on its way while this step is written.
                let next_cap = max_step.min(pause.saturating_sub(f.done(next_pos)));
                if next_pos != f.last() && next_cap > 0 {
                    let here = f.step(next_pos, recorded, next_cap);
                    let rec = if here.0 < here.1 { recorded } else { next_pos };
                    let next = f.step(next_pos, rec, next_cap);
                    if next.0 < next.1 {
                        let shape = run.shape.clone();
                        let mut into = std::mem::take(&mut spare);
                        let h = sc.spawn(move || {
                            let r = read_old(members, &shape, &mut into, next.0, next.1, old_end);
                            (into, r)
                        });
                        ahead = Some((next, run.shape.lost.clone(), h));
                    }
                }
                let w = write_new(members, &run.shape, &old, &mut bufs, from, to, old_end)?;
                Ok((r, w))
            });
            match result {
                Ok((r, w)) => {
                    run.report.read_bytes += r;
                    run.report.written_bytes += w;
                    pos = next_pos;
                    progress(f.done(pos) * SECTOR as u64, total);
                    // This step's buffers take the read after next.
                    if spare.is_empty() {
                        spare = std::mem::take(&mut old);
                    }
                }
                Err(StepError::Other(e)) => return Err(e),
                Err(StepError::Member(slot, e)) => {
                    // Recorded before the step runs again from `pos` (the read ahead, made
                    // with the member, is not used).
                    run.lose(slot, e)?;
                    run.checkpoint(pos)?;
                    (recorded, last) = (pos, Instant::now());
                }
            }
        }
        if let Some((.., h)) = ahead.take() {
            let _ = join(h);
        }
        Ok(false)
    })?;
    if stopped {
        run.report.position_sectors = pos;
        return Ok(run.report);
    }
    // Everything moved: recorded as such first, so a member that misses the last round
    // below still says where its data is.
    run.checkpoint(f.last())?;
    let shape = &run.shape;
    let (level, layout, count) = shape.finish_as.unwrap_or((
        shape.new.md_level(),
        shape.new.md_layout(),
        shape.new.raid_disks,
    ));
    for (i, sb) in run.sbs.iter_mut().enumerate() {
        sb.level = raidkit_metadata::Level::from_md(level);
        sb.layout = layout;
        sb.raid_disks = count as u32;
        sb.chunk_sectors = shape.new.chunk_sectors as u32;
        let Some(slot) = shape.slot_of(i) else {
            // Spares stay spares; their placement stays their own.
            finish_fields(sb);
            continue;
        };
        // The data area starts where the new layout does: lower by the move (more room),
        // or higher (less).
        let (o, n) = (shape.old_offset[slot], shape.new_offset[slot]);
        sb.data_offset_sectors = n;
        sb.data_size_sectors = (sb.data_size_sectors + o).saturating_sub(n);
        if shape.fresh[slot] {
            sb.clear_recovery_offset();
        }
        finish_fields(sb);
    }
    leave_as_spares(&mut run.sbs, &shape.slot_member, run.found, count)?;
    // A member failing now is recorded faulty by the round made without it.
    while let Err((i, e)) = run.round() {
        let slot = run.shape.slot_of(i).expect("written members have slots");
        run.lose(slot, e)?;
    }
    run.report.finished = true;
    run.report.position_sectors = f.last();
    (
        run.report.new_level,
        run.report.new_layout,
        run.report.new_raid_devices,
    ) = (level, layout, count);
    Ok(run.report)
}

/// md's fields once a reshape is over: no reshape, no new offset.
pub(super) fn finish_fields(sb: &mut Superblock) {
    sb.reshape = ReshapeFields::default();
    for flag in [
        FeatureMap::RESHAPE_ACTIVE,
        FeatureMap::NEW_OFFSET,
        FeatureMap::RESHAPE_BACKWARDS,
    ] {
        sb.feature_map.remove(flag);
    }
}

/// Buffers reused from one step to the next: the new layout's member ranges and parity
/// scratch (the old layout's ranges travel between the reader and the step, see `run`).
#[derive(Default)]
pub(super) struct StepBuffers {
    new: Vec<Vec<u8>>,
    scratch: (Vec<u8>, Vec<u8>),
}

/// What reading a step's old data gave: the bytes read.
type StepRead = std::result::Result<u64, StepError>;

/// Why a step stopped.
pub(super) enum StepError {
    /// The member of this slot failed a read or write.
    Member(usize, EngineError),
    Other(EngineError),
}

/// The old layout's member sectors (from the data offset) holding array sectors
/// `[from, to)`: whole old rows (a striped level's stripes, a RAID 10 offset layout's groups
/// of rows), none past the old end.
pub(super) fn old_range(shape: &Shape, from: u64, to: u64, old_end: u64) -> (u64, u64) {
    if from >= old_end {
        return (0, 0);
    }
    let old = super::lay(&shape.old);
    (old.first_dev(from), old.last_dev(to.min(old_end)))
}

/// Reads the old layout's part of array sectors `[from, to)` from every slot that can be
/// read, all at once, into `old` (one buffer per old slot); a lost slot's part of a parity
/// level is rebuilt from parity (a fresh slot's, only the old Q, is not needed). Returns the
/// bytes read.
pub(super) fn read_old(
    members: &[Box<dyn Disk>],
    shape: &Shape,
    old: &mut Vec<Vec<u8>>,
    from: u64,
    to: u64,
    old_end: u64,
) -> std::result::Result<u64, StepError> {
    let (o0, o1) = old_range(shape, from, to, old_end);
    let len = (o1 - o0) as usize * SECTOR;
    old.resize_with(shape.old.raid_disks, Vec::new);
    for b in old.iter_mut() {
        b.resize(len, 0);
    }
    if len == 0 {
        return Ok(0);
    }
    let read = |slot: usize, buf: &mut Vec<u8>| -> std::result::Result<(), StepError> {
        let Some(disk) = shape.member(members, slot).filter(|_| !shape.fresh[slot]) else {
            return Ok(());
        };
        let at = (shape.old_offset[slot] + o0) * SECTOR as u64;
        disk.read_at(buf, at)
            .map_err(|e| StepError::Member(slot, EngineError::from(e)))
    };
    all_slots(old, read)?;
    let parity = shape.old.level() != RaidLevel::Raid10;
    if parity && (0..shape.old.raid_disks).any(|s| shape.lost[s]) {
        let readable: Vec<bool> = (0..shape.old.raid_disks)
            .map(|s| shape.old_readable(s))
            .collect();
        crate::recon::parity_recover(&shape.old, o0, o1 - o0, old, &readable).map_err(|e| {
            StepError::Other(EngineError::Invalid(format!(
                "reshape: rebuilding a lost member: {e}"
            )))
        })?;
    }
    let readable = (0..shape.old.raid_disks)
        .filter(|&s| shape.old_readable(s))
        .count();
    Ok(len as u64 * readable as u64)
}

/// Lays array sectors `[from, to)` out in the new layout from `old` (as [`read_old`] read
/// it; zeros past the old end), with fresh parity or every copy, and writes the new
/// layout's rows, every member at once (but the lost). Returns the bytes written.
pub(super) fn write_new(
    members: &[Box<dyn Disk>],
    shape: &Shape,
    old: &[Vec<u8>],
    bufs: &mut StepBuffers,
    from: u64,
    to: u64,
    old_end: u64,
) -> std::result::Result<u64, StepError> {
    let (oc, nc) = (shape.old.chunk_sectors, shape.new.chunk_sectors);
    let (od, nd) = (shape.old.data_disks() as u64, shape.new.data_disks() as u64);
    // New rows [n0, n1) in member sectors from the data offset; old rows from `o0`.
    let new_lay = super::lay(&shape.new);
    let (n0, n1) = (new_lay.first_dev(from), new_lay.last_dev(to));
    let (o0, _) = old_range(shape, from, to, old_end);
    let new_len = (n1 - n0) as usize * SECTOR;
    // What each member writes of those rows, [start, end) in member sectors: every row of a
    // striped level; of RAID 10 copies only the cells the step's chunks fill (with near
    // copies over members that are not a whole number of copies, a step's first and last
    // rows hold chunks of the steps beside it too).
    let mut spans = vec![(n0, n1); shape.new.raid_disks];
    bufs.new.resize_with(shape.new.raid_disks, Vec::new);
    // Every byte of a new buffer is written below (data, zeros past the old end, parity),
    // so what the last step left there is not cleared.
    for b in &mut bufs.new {
        b.resize(new_len, 0);
    }
    // A piece of the smaller chunk at a time (chunks are powers of two: a piece never
    // crosses a chunk of either layout).
    let piece = oc.min(nc);
    let piece_bytes = piece as usize * SECTOR;
    if shape.new.level() == RaidLevel::Raid10 {
        spans.fill((u64::MAX, 0));
        for at in (from..to).step_by(piece as usize) {
            let (targets, _) = shape.new.copies(at);
            for &(slot, ms) in &targets {
                let span = &mut spans[slot];
                *span = (span.0.min(ms), span.1.max(ms + piece));
            }
            if at >= old_end {
                for (slot, ms) in targets {
                    let dst = (ms - n0) as usize * SECTOR;
                    bufs.new[slot][dst..dst + piece_bytes].fill(0);
                }
                continue;
            }
            let (sources, _) = shape.old.copies(at);
            let Some(&(src_slot, src_ms)) = sources.iter().find(|(s, _)| shape.old_readable(*s))
            else {
                return Err(StepError::Other(EngineError::Invalid(format!(
                    "reshape: no copy of array sector {at} left to read"
                ))));
            };
            let src = (src_ms - o0) as usize * SECTOR;
            for (slot, ms) in targets {
                let dst = (ms - n0) as usize * SECTOR;
                bufs.new[slot][dst..dst + piece_bytes]
                    .copy_from_slice(&old[src_slot][src..src + piece_bytes]);
            }
        }
    } else {
        let os0 = o0 / oc;
        for ns in from / (nc * nd)..to / (nc * nd) {
            let info = shape.new.stripe(ns);
            for (dd, &slot) in info.data_members.iter().enumerate() {
                let chunk_start = (ns * nd + dd as u64) * nc;
                for at in (chunk_start..chunk_start + nc).step_by(piece as usize) {
                    let dst = (ns * nc - n0 + at % nc) as usize * SECTOR;
                    let dst = &mut bufs.new[slot][dst..dst + piece_bytes];
                    if at >= old_end {
                        dst.fill(0);
                        continue;
                    }
                    let chunk = at / oc;
                    let (os, odd) = (chunk / od, (chunk % od) as usize);
                    let from_slot = shape.old.stripe(os).data_members[odd];
                    let src = ((os - os0) * oc + at % oc) as usize * SECTOR;
                    dst.copy_from_slice(&old[from_slot][src..src + piece_bytes]);
                }
            }
        }
        crate::recon::parity_check(
            &shape.new,
            n0,
            n1 - n0,
            &mut bufs.new,
            true,
            &mut bufs.scratch,
        )
        .map_err(|e| {
            StepError::Other(EngineError::Invalid(format!(
                "reshape: parity of the new stripes: {e}"
            )))
        })?;
    }
    let write = |slot: usize, buf: &mut Vec<u8>| -> std::result::Result<(), StepError> {
        let (start, end) = spans[slot];
        let Some(disk) = shape.member(members, slot).filter(|_| start < end) else {
            return Ok(());
        };
        let at = (shape.new_offset[slot] + start) * SECTOR as u64;
        let part = (start - n0) as usize * SECTOR..(end - n0) as usize * SECTOR;
        disk.write_at(&buf[part], at)
            .map_err(|e| StepError::Member(slot, EngineError::from(e)))
    };
    all_slots(&mut bufs.new, write)?;
    let rows: u64 = spans.iter().map(|&(s, e)| e.saturating_sub(s)).sum();
    Ok(rows * SECTOR as u64)
}

/// Runs `io` on every slot's buffer at once, one thread each; the first error wins.
pub(super) fn all_slots<F>(bufs: &mut [Vec<u8>], io: F) -> std::result::Result<(), StepError>
where
    F: Fn(usize, &mut Vec<u8>) -> std::result::Result<(), StepError> + Sync,
{
    let io = &io;
    std::thread::scope(|s| {
        let jobs: Vec<_> = bufs
            .iter_mut()
            .enumerate()
            .map(|(slot, buf)| s.spawn(move || io(slot, buf)))
            .collect();
        let mut first = Ok(());
        for j in jobs {
            let r = j.join().unwrap_or_else(|_| {
                Err(StepError::Other(EngineError::Invalid(
                    "a reshape I/O thread panicked".into(),
                )))
            });
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}
