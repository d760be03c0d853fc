//! Reshaping an array that stays in use ([`OnlineReshape`]): the served array keeps serving
//! reads and writes while every stripe moves to the new layout.
//!
//! The reshape runs in steps, each the offline reshape of `reshape.rs` from the recorded
//! position to a pause a few megabytes on, which records its new position in md's fields
//! before it returns (so between steps the members are exactly an array stopped mid-reshape,
//! which md or `grow --continue` goes on with after a crash). Between steps the array serves
//! requests through two views of the members: the new layout below the position (what the
//! steps have moved), the old layout from it on, each an `Array` over the same disks with its
//! layout's data offsets, which writes no superblock (`Array::frozen`). A request that
//! crosses the position is split there. A write lands in the layout that holds its sectors
//! at that moment and is never lost in between: a step holds the views exclusively (requests
//! wait; the views are flushed first), and what it moves it reads from the old layout as the
//! requests left it. The rule every step keeps (it writes the new layout only over old rows
//! it has already moved, see `plan::reshape`) holds for the requests' writes too: a write to
//! the old layout lands on rows not moved yet, a write to the new layout on rows no old data
//! lives in any more.
//!
//! A member failing in a view is failed there (in memory); the request still completes on the
//! others as a degraded write would. From the next step on the member is left out, as md
//! goes on with a reshape degraded: the steps and the views assemble the others alone (the
//! member's last writes are missing, so nothing is read from it again), and the superblocks
//! the steps write leave it behind, so it is stale if it comes back. The reshape fails only
//! when the array could not lose it. Fewer data members (md's backwards reshape, which also
//! shrinks the array under its clients) runs online too, once the caller gave the smaller
//! size (mdadm's `--array-size`): clients see that size from the start, the reshape moves
//! from the new end down to 0, and the moved part, in the new layout, is the one above the
//! position.

use super::grow::decide_stopped;
use super::reshape::{resume_plan, Shape};
use super::*;
use crate::membership::{ByMember, BySlot, MemberId};
use crate::plan::reshape::Way;
use std::sync::RwLock;

/// Boxed disks over shared ones (to assemble an array whose disks are held elsewhere too).
pub fn shared_disks(disks: &[Arc<dyn Disk>]) -> Vec<Box<dyn Disk>> {
    boxed(disks)
}

fn boxed(disks: &[Arc<dyn Disk>]) -> Vec<Box<dyn Disk>> {
    disks
        .iter()
        .map(|d| Box::new(d.clone()) as Box<dyn Disk>)
        .collect()
}

/// The two layouts' views, and the array sector the moved part ends at (starts at, for a
/// backward reshape, which moves from the end down).
struct Views {
    old: Array,
    new: Array,
    position: u64,
    backward: bool,
}

impl Views {
    /// Array sectors moved, of a new layout of `end` sectors.
    fn moved(&self, end: u64) -> u64 {
        if self.backward {
            end.saturating_sub(self.position)
        } else {
            self.position
        }
    }
}

/// A reshape of an array that stays in use (see the module's notes).
pub struct OnlineReshape {
    disks: Vec<Arc<dyn Disk>>,
    opts: AssembleOptions,
    step_bytes: u64,
    /// What clients see meanwhile: the old layout's size.
    size_bytes: u64,
    /// Array sectors of the new layout.
    end_sectors: u64,
    /// `None` once the last step is done.
    views: RwLock<Option<Views>>,
    /// The first step's report (the shapes, the new members), then each step's.
    report: Mutex<ReshapeReport>,
    /// The new layout's view's status when the views were last there (for `detail`).
    last_status: Mutex<Option<Status>>,
    /// Why the reshape stopped going on, if it did (the caller's word, see [`Self::set_error`]).
    error: Mutex<Option<String>>,
    /// Per disk: failed while the array was served, left out from then on.
    left_out: Mutex<Vec<bool>>,
}

impl OnlineReshape {
    /// Starts reshaping the (stopped) array on `disks` to `target`: records the start and
    /// moves the first `step_bytes`, then serves requests between steps ([`Self::step`]).
    /// A change that moves nothing (md's takeovers) is done at once ([`Self::finished`]).
    /// Refuses, writing nothing, what `Array::reshape` refuses, and fewer data members.
    pub fn start(
        disks: Vec<Arc<dyn Disk>>,
        target: &ReshapeTarget,
        opts: AssembleOptions,
        step_bytes: u64,
    ) -> Result<OnlineReshape> {
        let step_bytes = step_bytes.max(1 << 20);
        let never = AtomicBool::new(false);
        let ctl = ReshapeControl {
            progress: &|_, _| {},
            stop: &never,
            pause_at_bytes: Some(step_bytes),
        };
        let report = Array::reshape(boxed(&disks), target, &opts, &ctl)?;
        let finished = report.finished;
        let online = OnlineReshape::new(disks, opts, step_bytes, report);
        if !finished {
            *online.write_views() = Some(online.views()?);
        }
        Ok(online)
    }

    /// Goes on, serving, with the reshape the (stopped) array on `disks` records (started
    /// online or offline, by raidkit or md), as a server does when it finds one at start.
    pub fn resume(
        disks: Vec<Arc<dyn Disk>>,
        opts: AssembleOptions,
        step_bytes: u64,
    ) -> Result<OnlineReshape> {
        let status = Array::reshape_status(&boxed(&disks), &opts)?.ok_or(
            EngineError::CannotGrow(crate::error::GrowRefusal::NoReshape),
        )?;
        if let Some(why) = status.refusal {
            return Err(EngineError::Invalid(why));
        }
        let report = ReshapeReport {
            old_raid_devices: status.old_raid_devices,
            new_raid_devices: status.new_raid_devices,
            old_level: status.level,
            new_level: status.new_level,
            old_layout: status.layout,
            new_layout: status.new_layout,
            old_chunk_sectors: status.chunk_sectors,
            new_chunk_sectors: status.new_chunk_sectors,
            new_members: Vec::new(),
            old_array_bytes: status.old_array_bytes,
            new_array_bytes: status.new_array_bytes,
            started_at_sectors: status.position_sectors,
            checkpoints: 0,
            read_bytes: 0,
            written_bytes: 0,
            old_data_offset: status.old_data_offset,
            new_data_offset: status.new_data_offset,
            failed_members: Vec::new(),
            finished: false,
            position_sectors: status.position_sectors,
            backwards: status.backwards,
            rebuild_slots: Vec::new(),
            left_members: Vec::new(),
        };
        let online = OnlineReshape::new(disks, opts, step_bytes, report);
        *online.write_views() = Some(online.views()?);
        Ok(online)
    }

    /// A reshape on `disks` whose first step (or recorded state) `report` describes; its
    /// views are made by the caller.
    fn new(
        disks: Vec<Arc<dyn Disk>>,
        opts: AssembleOptions,
        step_bytes: u64,
        report: ReshapeReport,
    ) -> OnlineReshape {
        let n = disks.len();
        OnlineReshape {
            // A shrink's clients see the smaller size from the start (what lay past it is
            // gone: the caller said so); a growth's, the old size until it is done.
            size_bytes: if report.backwards {
                report.new_array_bytes
            } else {
                report.old_array_bytes
            },
            end_sectors: report.new_array_bytes / SECTOR as u64,
            views: RwLock::new(None),
            disks,
            opts,
            step_bytes: step_bytes.max(1 << 20),
            report: Mutex::new(report),
            last_status: Mutex::new(None),
            error: Mutex::new(None),
            left_out: Mutex::new(vec![false; n]),
        }
    }

    /// The disks the steps and views use: all but those left out.
    fn members(&self) -> Vec<Box<dyn Disk>> {
        let out = lock(&self.left_out);
        let kept: Vec<Arc<dyn Disk>> = self
            .disks
            .iter()
            .zip(out.iter())
            .filter(|(_, &o)| !o)
            .map(|(d, _)| d.clone())
            .collect();
        boxed(&kept)
    }

    /// The assembly options of the steps: with a member left out, the array runs degraded.
    fn opts(&self) -> AssembleOptions {
        let mut o = self.opts.clone();
        o.run |= lock(&self.left_out).iter().any(|&x| x);
        o
    }

    /// The status of the new layout's view (members, their states), for `detail`; its last
    /// one once the views are gone.
    pub fn status(&self) -> Option<Status> {
        match self.read_views().as_ref() {
            Some(v) => Some(v.new.status()),
            None => lock(&self.last_status).clone(),
        }
    }

    /// Why the reshape does not go on, once the caller said so.
    pub fn error(&self) -> Option<String> {
        lock(&self.error).clone()
    }

    pub fn set_error(&self, why: String) {
        *lock(&self.error) = Some(why);
    }

    fn write_views(&self) -> std::sync::RwLockWriteGuard<'_, Option<Views>> {
        self.views.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read_views(&self) -> std::sync::RwLockReadGuard<'_, Option<Views>> {
        self.views.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The two views of the reshape the superblocks record now.
    fn views(&self) -> Result<Views> {
        let members = self.members();
        let (found, _, a) = decide_stopped(&members, &self.opts())?;
        let (shape, position) = resume_plan(&a, &found)?;
        let version = found[0].version;
        let view = |geo: &Geo, offsets: &[u64], missing: &dyn Fn(usize) -> bool| {
            let mut sbs: Vec<Superblock> = found.iter().map(|f| f.sb.clone()).collect();
            let mut slot_member = Vec::with_capacity(geo.raid_disks);
            let mut slot_state = Vec::with_capacity(geo.raid_disks);
            for (s, &offset) in offsets.iter().enumerate().take(geo.raid_disks) {
                let m = shape.slot_member[s].filter(|_| !missing(s));
                if let Some(i) = m {
                    sbs[i].data_offset_sectors = offset;
                }
                slot_member.push(m.map(MemberId));
                slot_state.push(if m.is_some() {
                    MemberState::InSync
                } else {
                    MemberState::Missing
                });
            }
            let array = Array::build(
                geo.clone(),
                version,
                false,
                self.opts.config,
                self.members(),
                ByMember::from_vec(sbs),
                BySlot::from_vec(slot_member),
                BySlot::from_vec(slot_state),
                // Never marks itself dirty: the reshape's superblocks say what is recorded.
                true,
            )?;
            Ok::<Array, EngineError>(array)
        };
        let backward = matches!(shape.way, Way::Backward(_));
        let shape: &Shape = &shape;
        let mut old = view(&shape.old, &shape.old_offset, &|s| {
            shape.lost[s] || shape.fresh[s]
        })?;
        let mut new = view(&shape.new, &shape.new_offset, &|s| shape.lost[s])?;
        old.frozen = true;
        new.frozen = true;
        Ok(Views {
            old,
            new,
            position,
            backward,
        })
    }

    /// Bytes clients see while it runs (the old layout's; the new size once it is done and
    /// the array is assembled again).
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Array sectors moved so far, and the new layout's.
    pub fn progress(&self) -> (u64, u64) {
        let done = self
            .read_views()
            .as_ref()
            .map_or(self.end_sectors, |v| v.moved(self.end_sectors));
        (done, self.end_sectors)
    }

    /// The array sector the reshape is at (it runs down from the end when it shrinks).
    pub fn position(&self) -> u64 {
        let last = if lock(&self.report).backwards {
            0
        } else {
            self.end_sectors
        };
        self.read_views().as_ref().map_or(last, |v| v.position)
    }

    /// Whether the last step is done (the array is then assembled again, [`Self::assemble`]).
    pub fn finished(&self) -> bool {
        self.read_views().is_none()
    }

    /// The report of the last step: what changed, members that failed, bytes moved by it.
    pub fn report(&self) -> ReshapeReport {
        lock(&self.report).clone()
    }

    /// Moves the next `step_bytes` while requests wait (at most one step's time), recorded
    /// before it returns. `Ok(true)` once the reshape is done.
    pub fn step(&self) -> Result<bool> {
        self.step_by(self.step_bytes)
    }

    /// [`Self::step`] of `bytes` (at least 1 MiB): larger steps while nobody waits spread
    /// the fixed cost of a step (superblocks read and written, members flushed) thinner.
    pub fn step_by(&self, bytes: u64) -> Result<bool> {
        let bytes = bytes.max(1 << 20);
        let mut guard = self.write_views();
        let Some(views) = guard.as_ref() else {
            return Ok(true);
        };
        // A flush that fails fails its member in the view, as a request's write does.
        let _ = views.old.flush();
        let _ = views.new.flush();
        // Members a view failed (a request's write or the flush above) are left out.
        let mut failed: Vec<String> = Vec::new();
        for v in [&views.old, &views.new] {
            for m in v.status().members {
                if m.role == "faulty" && !failed.contains(&m.name) {
                    failed.push(m.name);
                }
            }
        }
        if !failed.is_empty() {
            {
                let mut out = lock(&self.left_out);
                for (d, o) in self.disks.iter().zip(out.iter_mut()) {
                    *o |= failed.iter().any(|f| f == d.name());
                }
            }
            let position = views.position;
            *guard = Some(self.views().map_err(|e| {
                EngineError::Invalid(format!(
                    "{} failed while the array was reshaped online (recorded at array sector {position}), and the array cannot go on without: {e}",
                    failed.join(", ")
                ))
            })?);
            let mut r = lock(&self.report);
            r.failed_members.extend(failed);
        }
        let Some(views) = guard.as_ref() else {
            return Ok(true);
        };
        let done = views.moved(self.end_sectors) * SECTOR as u64;
        let never = AtomicBool::new(false);
        let ctl = ReshapeControl {
            progress: &|_, _| {},
            stop: &never,
            pause_at_bytes: Some(done + bytes),
        };
        let mut report = Array::continue_reshape(self.members(), &self.opts(), &ctl)?;
        let finished = report.finished;
        let lost = !report.failed_members.is_empty();
        let position = report.position_sectors;
        {
            let mut r = lock(&self.report);
            // Members left out before this step stay reported.
            let before: Vec<String> = r
                .failed_members
                .iter()
                .filter(|m| !report.failed_members.contains(m))
                .cloned()
                .collect();
            report.failed_members.splice(0..0, before);
            *r = report;
        }
        if finished {
            if let Some(v) = guard.as_ref() {
                *lock(&self.last_status) = Some(v.new.status());
            }
            *guard = None;
            return Ok(true);
        }
        if lost {
            // A member the step lost is not used by the views either.
            *guard = Some(self.views()?);
        } else if let Some(v) = guard.as_mut() {
            v.position = position;
        }
        Ok(false)
    }

    /// Runs `io` on each part of `[offset, offset + len)` in its layout's view: `(view,
    /// offset, range in the request)`.
    fn route(
        &self,
        offset: u64,
        len: usize,
        mut io: impl FnMut(&Array, u64, std::ops::Range<usize>) -> Result<()>,
    ) -> Result<()> {
        let guard = self.read_views();
        let Some(v) = guard.as_ref() else {
            return Err(EngineError::Busy(
                "the online reshape is done; the array is being assembled again".into(),
            ));
        };
        let boundary = v.position * SECTOR as u64;
        let end = offset + len as u64;
        if end > self.size_bytes {
            return Err(EngineError::Invalid(format!(
                "{len} bytes at {offset} reach past the array's {} bytes",
                self.size_bytes
            )));
        }
        // Below the position, and above it: the moved part is below when the reshape runs
        // forward, above when it runs down from the end.
        let (below, above) = if v.backward {
            (&v.old, &v.new)
        } else {
            (&v.new, &v.old)
        };
        if offset < boundary {
            let cut = end.min(boundary);
            io(below, offset, 0..(cut - offset) as usize)?;
        }
        if end > boundary {
            let from = offset.max(boundary);
            io(above, from, (from - offset) as usize..len)?;
        }
        Ok(())
    }

    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let len = buf.len();
        self.route(offset, len, |view, at, r| view.read_at(&mut buf[r], at))
    }

    pub fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()> {
        self.route(offset, buf.len(), |view, at, r| {
            view.write_at(&buf[r], at, fua)
        })
    }

    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        let zeros = vec![0u8; len.min(1 << 20) as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(zeros.len() as u64) as usize;
            self.write_at(&zeros[..n], offset + done, false)?;
            done += n as u64;
        }
        Ok(())
    }

    pub fn flush(&self) -> Result<()> {
        let guard = self.read_views();
        if let Some(v) = guard.as_ref() {
            v.new.flush()?;
            v.old.flush()?;
        }
        Ok(())
    }

    /// Assembles the reshaped array (after the last step).
    pub fn assemble(&self) -> Result<(Array, AssembleReport)> {
        if !self.finished() {
            return Err(EngineError::Busy("the online reshape is not done".into()));
        }
        Array::assemble(self.members(), self.opts())
    }
}
