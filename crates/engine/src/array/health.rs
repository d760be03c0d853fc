//! Background work on an assembled array: rebuild (md's recovery onto a spare), replace (copy
//! a still-working member onto a new one while it stays in service), resync after an unclean
//! stop, check and repair (md's `mismatch_cnt`), and patrol read.
//!
//! Each task is a cursor over a range (member sectors for rebuild, replace, patrol and the
//! parity levels' check/repair/resync; array sectors for RAID 10 resync/check, as md counts
//! them) that advances in steps. A step takes the same stripe locks foreground requests take
//! for the sectors it covers, so a step and a request on the same stripes never overlap: the
//! step reads a consistent stripe and writes what it computed before any request sees it.
//! Foreground writes keep a member being rebuilt current on their own (it is `Rebuilding`:
//! written, never read), so the part behind the cursor never goes stale.
//!
//! Checkpoints: a rebuild records its cursor as md's `recovery_offset` in the superblock of
//! the member being rebuilt (after flushing that member) every couple of seconds and when
//! stopped; resync records md's `resync_offset` at a clean stop. Both are what md itself
//! reads, so a stopped task resumes in raidkit or in md.
//!
//! Rates: a task takes a share of the array's time (`TaskRates`, percent, like a hardware
//! controller's task rates) while foreground I/O is present and runs at full speed when the
//! array is idle, so nobody has to hand-tune limits; an optional byte-rate cap applies always.
//!
//! Bursts: at full speed over members whose I/O is memory copies, a task runs its steps on
//! several threads at once, each doing its own steps' member I/O (handing it to the member
//! workers costs a wake-up per member and step, a third of a step there). Steps are claimed in
//! order, at most one per thread ahead of the frontier below which every step is done; only
//! the frontier is checkpointed or reported, so a crash or stop never skips an unfinished
//! step. A burst ends within a few steps when foreground I/O arrives, a member starts to wait,
//! or the task is stopped.
//!
//! The library never prints: progress is a [`TaskProgress`] value handed to an observer after
//! every step and kept for [`Array::status`].

use super::*;
use crate::recon::{self, ReconError};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Weak};
use std::time::{Duration, Instant};

/// The kinds of background work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskKind {
    /// Rebuild slots whose member is being recovered (md's "recover").
    Rebuild,
    /// Copy members marked for replacement onto their replacements (md's `--replace`).
    Replace,
    /// Make parity (or mirror copies) agree with data after an unclean stop (md's "resync").
    Resync,
    /// Count stripes whose parity or copies disagree, changing nothing (md's "check").
    Check,
    /// Like check, and rewrite parity (or copies) that disagree (md's "repair").
    Repair,
    /// Read every member; rewrite unreadable sectors from redundancy (a controller's patrol).
    Patrol,
}

impl TaskKind {
    pub const ALL: [TaskKind; 6] = [
        TaskKind::Rebuild,
        TaskKind::Replace,
        TaskKind::Resync,
        TaskKind::Check,
        TaskKind::Repair,
        TaskKind::Patrol,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Rebuild => "rebuild",
            TaskKind::Replace => "replace",
            TaskKind::Resync => "resync",
            TaskKind::Check => "check",
            TaskKind::Repair => "repair",
            TaskKind::Patrol => "patrol",
        }
    }

    pub fn from_name(name: &str) -> Option<TaskKind> {
        TaskKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for TaskKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How much of the array's time each task may take while foreground I/O is present, in
/// percent (1–100); with no foreground I/O every task runs at full speed. Defaults follow
/// common hardware controllers (30 % for every task).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TaskRates {
    pub rebuild_percent: u8,
    pub resync_percent: u8,
    pub check_percent: u8,
    pub patrol_percent: u8,
    /// A hard cap in bytes per second of range covered, idle or not (md's speed_limit_max).
    pub max_bytes_per_s: Option<u64>,
}

impl TaskRates {
    /// Every task at full speed, busy or not, with no byte-rate cap.
    pub fn full() -> TaskRates {
        TaskRates {
            rebuild_percent: 100,
            resync_percent: 100,
            check_percent: 100,
            patrol_percent: 100,
            max_bytes_per_s: None,
        }
    }
}

impl Default for TaskRates {
    fn default() -> Self {
        TaskRates {
            rebuild_percent: 30,
            resync_percent: 30,
            check_percent: 30,
            patrol_percent: 30,
            max_bytes_per_s: None,
        }
    }
}

impl TaskRates {
    fn share(&self, kind: TaskKind) -> u8 {
        let p = match kind {
            TaskKind::Rebuild | TaskKind::Replace => self.rebuild_percent,
            TaskKind::Resync => self.resync_percent,
            TaskKind::Check | TaskKind::Repair => self.check_percent,
            TaskKind::Patrol => self.patrol_percent,
        };
        p.clamp(1, 100)
    }
}

/// Where a running task is.
#[derive(Clone, Debug, Serialize)]
pub struct TaskProgress {
    pub kind: TaskKind,
    /// Slots the task writes whole (rebuild and replace targets).
    pub slots: Vec<usize>,
    /// The cursor, in `unit`.
    pub position_sectors: u64,
    pub start_sectors: u64,
    pub end_sectors: u64,
    /// "member sectors" or "array sectors".
    pub unit: &'static str,
    pub percent: f64,
    /// Range covered per second since the task started (bytes of one member for member
    /// ranges), including time spent yielding to foreground I/O.
    pub bytes_per_s: f64,
    pub eta_s: Option<f64>,
    pub elapsed_s: f64,
    /// Sectors found inconsistent (check, repair, resync), counted as md's mismatch_cnt.
    pub mismatch_sectors: u64,
    /// Unreadable sectors rewritten from redundancy (patrol).
    pub corrected_sectors: u64,
    /// Sectors that could not be rewritten and went to the bad-block log (patrol).
    pub bad_block_sectors: u64,
    /// The last step yielded to foreground I/O.
    pub throttled: bool,
    /// The most threads the task has run its steps on so far (more than one in a burst).
    pub threads: usize,
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum TaskOutcome {
    /// The whole range is done.
    Completed,
    /// Stopped on request at `position_sectors`; it resumes from its checkpoint.
    Stopped,
    /// Nothing to do (no member to rebuild, no resync pending).
    Nothing,
    /// Ended by an error (the array failed, or the member being written failed).
    Failed { error: String },
}

/// A finished task.
#[derive(Clone, Debug, Serialize)]
pub struct TaskReport {
    #[serde(flatten)]
    pub progress: TaskProgress,
    #[serde(flatten)]
    pub outcome: TaskOutcome,
}

/// Background state shared by the array, its task runner and an optional service thread.
pub(super) struct Bg {
    state: Mutex<BgState>,
    cv: Condvar,
    /// Asks the running task to stop at its next step (set by `stop`).
    cancel: AtomicBool,
    origin: Instant,
    /// Nanoseconds after `origin` of the last foreground request.
    last_foreground_ns: AtomicU64,
}

#[derive(Default)]
struct BgState {
    running: Option<TaskProgress>,
    history: VecDeque<TaskReport>,
    requested: VecDeque<TaskKind>,
    rates: TaskRates,
    service: bool,
    shutdown: bool,
    /// Ask for a patrol when this much time has passed since the last one.
    patrol_interval: Option<Duration>,
    last_patrol: Option<Instant>,
    /// How often a rebuild records its cursor; `None` for the default.
    checkpoint_every: Option<Duration>,
    /// Members the running rebuild pass brings in sync (a spare that takes a slot during the
    /// pass is rebuilt by the next pass, from its own start).
    rebuild_pass: Option<Vec<usize>>,
    /// Where the next check, repair or patrol starts: where the last one was stopped, or what
    /// [`Array::set_task_start`] set (md's `sync_min`, which md also moves to where an
    /// interrupted check stopped). Kept in memory only: md's superblock has no field for it.
    resume_from: std::collections::HashMap<TaskKind, u64>,
}

impl Bg {
    pub(super) fn new() -> Bg {
        Bg {
            state: Mutex::new(BgState::default()),
            cv: Condvar::new(),
            cancel: AtomicBool::new(false),
            origin: Instant::now(),
            last_foreground_ns: AtomicU64::new(0),
        }
    }

    /// Called for every foreground request.
    pub(super) fn note_foreground(&self) {
        let ns = self.origin.elapsed().as_nanos() as u64;
        self.last_foreground_ns.store(ns.max(1), Ordering::Relaxed);
    }

    fn foreground_within(&self, window: Duration) -> bool {
        let last = self.last_foreground_ns.load(Ordering::Relaxed);
        let now = self.origin.elapsed().as_nanos() as u64;
        last != 0 && now.saturating_sub(last) <= window.as_nanos() as u64
    }

    pub(super) fn wake(&self) {
        self.cv.notify_all();
    }

    pub(super) fn running(&self) -> Option<TaskProgress> {
        lock(&self.state).running.clone()
    }

    pub(super) fn history(&self) -> Vec<TaskReport> {
        lock(&self.state).history.iter().cloned().collect()
    }
}

const HISTORY: usize = 16;
/// How long after a foreground request a task still yields.
const FOREGROUND_WINDOW: Duration = Duration::from_millis(250);
/// How often a rebuild records its cursor in the superblocks, by default.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(2);

/// (slot, member index, member) of each slot being rebuilt; slot states; slot members.
type RebuildView = (
    Vec<(usize, usize, Arc<Member>)>,
    Vec<MemberState>,
    Vec<Option<Arc<Member>>>,
);

/// (slot, replacement index, replacement member, member being replaced).
type Replacing = (usize, usize, Arc<Member>, Option<Arc<Member>>);

/// A rebuild step whose reads are in flight: it holds the step's stripe locks, and its buffers
/// stay untouched until the batch completes.
struct Prefetch {
    ms: u64,
    n: u64,
    keys: Vec<u64>,
    bufs: Vec<Vec<u8>>,
    batch: Arc<Batch>,
    /// Slot states the reads were planned with.
    states: Vec<MemberState>,
}

impl Prefetch {
    /// Waits for the reads and lets the locks go without using them.
    fn abandon(self, array: &Array) {
        let _ = self.batch.wait();
        array.locks.release(&self.keys);
    }
}

/// The rebuild's prefetch slot: whatever way the rebuild loop ends (an error included), a
/// prefetch still in it is abandoned, so its stripe locks are never left held.
struct Ahead<'a> {
    array: &'a Array,
    p: Option<Prefetch>,
}

impl Drop for Ahead<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.p.take() {
            p.abandon(self.array);
        }
    }
}

/// One member I/O of a background step.
struct RangeIo<'a> {
    slot: usize,
    member: Arc<Member>,
    write: bool,
    member_sector: u64,
    buf: &'a mut [u8],
}

thread_local! {
    /// Set while a thread runs steps of a burst: its steps do every member I/O on the thread
    /// itself instead of handing it to the member workers.
    static IO_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as a burst thread while it lives.
struct IoHere(());

impl IoHere {
    fn enter() -> IoHere {
        IO_HERE.with(|h| h.set(true));
        IoHere(())
    }
}

impl Drop for IoHere {
    fn drop(&mut self) {
        IO_HERE.with(|h| h.set(false));
    }
}

/// What the threads of a burst share: the next step to claim, and which claimed steps are
/// done, so the cursor only ever moves over finished steps.
struct Burst {
    quit: AtomicBool,
    done: Mutex<Frontier>,
    /// Signalled when the frontier moves or the burst quits.
    moved: Condvar,
    /// A step found every target failed.
    dead: AtomicBool,
    error: Mutex<Option<EngineError>>,
}

impl Burst {
    fn quit(&self) {
        self.quit.store(true, Ordering::Relaxed);
        let _g = lock(&self.done);
        self.moved.notify_all();
    }
}

/// Ends a burst when the thread holding it leaves, however it leaves.
struct QuitOnExit<'a>(&'a Burst);

impl Drop for QuitOnExit<'_> {
    fn drop(&mut self) {
        self.0.quit();
    }
}

/// Steps claimed and done: everything below `at` is done, `ahead` lists the steps done beyond
/// it (start -> sectors), and `next` is the next step to claim.
struct Frontier {
    at: u64,
    next: u64,
    ahead: std::collections::BTreeMap<u64, u64>,
}

impl Frontier {
    fn complete(&mut self, ms: u64, n: u64) {
        if ms != self.at {
            self.ahead.insert(ms, n);
            return;
        }
        self.at += n;
        while let Some(n) = self.ahead.remove(&self.at) {
            self.at += n;
        }
    }
}

/// The range and step of a burst.
struct BurstSteps {
    end: u64,
    step: u64,
    /// How far beyond the frontier steps may be claimed.
    window_sectors: u64,
}

impl BurstSteps {
    fn new(end: u64, step: u64, threads: usize) -> BurstSteps {
        BurstSteps {
            end,
            step,
            // One step in flight per thread, and one more done ahead of the frontier.
            window_sectors: step * (threads as u64 + 1),
        }
    }
}

/// What one step of a burst did.
enum StepResult {
    /// Done, with what it found.
    Done(StepCounts),
    /// Every member the task writes to has failed.
    Dead,
}

/// What a step found, added to the task's progress.
#[derive(Clone, Copy, Default)]
struct StepCounts {
    mismatch_sectors: u64,
    corrected_sectors: u64,
    bad_block_sectors: u64,
}

impl StepCounts {
    fn mismatches(mismatch_sectors: u64) -> StepCounts {
        StepCounts {
            mismatch_sectors,
            ..StepCounts::default()
        }
    }
}

/// A burst thread's buffers, kept from step to step.
#[derive(Default)]
struct StepScratch {
    bufs: Vec<Vec<u8>>,
    buf: Vec<u8>,
    parity: (Vec<u8>, Vec<u8>),
}

/// The moving part of a task: cursor, counters, timing, the observer.
struct Walk<'o> {
    progress: TaskProgress,
    started: Instant,
    observe: &'o mut (dyn FnMut(&TaskProgress) + Send),
}

impl Walk<'_> {
    fn advance(&mut self, to: u64) {
        let p = &mut self.progress;
        p.position_sectors = to;
        let span = p.end_sectors.saturating_sub(p.start_sectors).max(1);
        let done = to.saturating_sub(p.start_sectors);
        p.percent = (done as f64 * 100.0 / span as f64).min(100.0);
        p.elapsed_s = self.started.elapsed().as_secs_f64();
        p.bytes_per_s = if p.elapsed_s > 0.0 {
            done as f64 * SECTOR as f64 / p.elapsed_s
        } else {
            0.0
        };
        p.eta_s = (p.bytes_per_s > 0.0)
            .then(|| p.end_sectors.saturating_sub(to) as f64 * SECTOR as f64 / p.bytes_per_s);
    }
}

impl Array {
    /// Sets the task rates.
    pub fn set_task_rates(&self, rates: TaskRates) {
        lock(&self.bg.state).rates = rates;
    }

    /// Where the next check, repair or patrol starts (md's `sync_min`), in the task's unit
    /// (member sectors; array sectors for a RAID 10 check or repair), rounded down to 4 KiB.
    /// A stopped check, repair or patrol sets this itself, so the next run on this assembly
    /// goes on from there; a run that completes clears it. Rebuild, replace and resync
    /// resume from the superblocks instead and take no start.
    pub fn set_task_start(&self, kind: TaskKind, sectors: u64) -> Result<()> {
        if !matches!(kind, TaskKind::Check | TaskKind::Repair | TaskKind::Patrol) {
            return Err(EngineError::Invalid(format!(
                "{kind} resumes from the superblocks (recovery_offset, resync_offset) and takes no start; only check, repair and patrol do"
            )));
        }
        let (unit, _, end) = self.task_range(kind)?;
        if sectors >= end {
            return Err(EngineError::Invalid(format!(
                "{kind} start {sectors} is past the end ({end} {unit})"
            )));
        }
        lock(&self.bg.state)
            .resume_from
            .insert(kind, sectors / 8 * 8);
        Ok(())
    }

    pub fn task_rates(&self) -> TaskRates {
        lock(&self.bg.state).rates
    }

    /// How often a rebuild records its cursor (md's recovery_offset) in the superblocks; each
    /// record costs a superblock write and a flush on every member. Default 2 s.
    pub fn set_checkpoint_interval(&self, every: Duration) {
        lock(&self.bg.state).checkpoint_every = Some(every);
    }

    /// Whether a rebuild or replace that last recorded its cursor at `last` should record it
    /// again.
    fn checkpoint_due(&self, last: Instant) -> bool {
        let every = lock(&self.bg.state)
            .checkpoint_every
            .unwrap_or(CHECKPOINT_EVERY);
        last.elapsed() >= every
    }

    /// Work the array needs, most urgent first: rebuilds of members being recovered,
    /// replacements, a resync after an unclean stop (when it can run). A read-only array
    /// reports what it needs but cannot run it.
    pub fn pending_tasks(&self) -> Vec<TaskKind> {
        let st = lock(&self.state);
        let mut out = Vec::new();
        if st.failed.is_none() {
            if st.slot_state.contains(&MemberState::Rebuilding) {
                out.push(TaskKind::Rebuild);
            }
            if st.replacement.iter().any(|r| r.is_some()) {
                out.push(TaskKind::Replace);
            }
            if st.resync_from.is_some() && self.resync_can_run(&st) {
                out.push(TaskKind::Resync);
            }
        }
        out
    }

    /// Resync of a parity level needs every member readable; a mirror needs two copies.
    fn resync_can_run(&self, st: &State) -> bool {
        match self.geo.scheme() {
            Scheme::Parity { .. } => st.slot_state.iter().all(|s| s.usable()),
            Scheme::Copies { .. } => self.geo.level() != RaidLevel::Raid0,
        }
    }

    /// Runs every pending task in turn on the calling thread (see [`Array::run_task`]);
    /// returns their reports. Stops early when `stop` is set.
    pub fn run_pending(
        &self,
        observe: &mut (dyn FnMut(&TaskProgress) + Send),
        stop: &AtomicBool,
    ) -> Result<Vec<TaskReport>> {
        let mut reports = Vec::new();
        let mut last: Option<TaskKind> = None;
        while let Some(kind) = self.pending_tasks().first().copied() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let report = self.run_task(kind, observe, stop)?;
            let again = last == Some(kind) && report.outcome != TaskOutcome::Completed;
            let ended = !matches!(report.outcome, TaskOutcome::Completed);
            reports.push(report);
            if again || ended {
                break;
            }
            last = Some(kind);
        }
        Ok(reports)
    }

    /// Runs one task to its end on the calling thread, calling `observe` after every step.
    /// `stop` (or [`Array::stop`]) ends it at the next step with its checkpoint recorded. Only
    /// one task runs at a time per array.
    pub fn run_task(
        &self,
        kind: TaskKind,
        observe: &mut (dyn FnMut(&TaskProgress) + Send),
        stop: &AtomicBool,
    ) -> Result<TaskReport> {
        let writes = !matches!(kind, TaskKind::Check | TaskKind::Patrol);
        if writes {
            self.check_writable()?;
        }
        let (unit, start, end) = self.task_range(kind)?;
        let progress = TaskProgress {
            kind,
            slots: Vec::new(),
            position_sectors: start,
            start_sectors: start,
            end_sectors: end,
            unit,
            percent: 0.0,
            bytes_per_s: 0.0,
            eta_s: None,
            elapsed_s: 0.0,
            mismatch_sectors: 0,
            corrected_sectors: 0,
            bad_block_sectors: 0,
            throttled: false,
            threads: 1,
        };
        {
            let mut bg = lock(&self.bg.state);
            if let Some(r) = &bg.running {
                return Err(EngineError::Busy(format!(
                    "{} is running ({:.1} %); one background task at a time",
                    r.kind, r.percent
                )));
            }
            bg.running = Some(progress.clone());
        }
        lock(&self.state)
            .events
            .push(ArrayEvent::TaskStarted { task: kind });
        self.bg.cancel.store(false, Ordering::Relaxed);
        let mut walk = Walk {
            progress,
            started: Instant::now(),
            observe,
        };
        let result = match kind {
            TaskKind::Rebuild => self.rebuild_task(&mut walk, stop),
            TaskKind::Replace => self.replace_task(&mut walk, stop),
            TaskKind::Resync | TaskKind::Check | TaskKind::Repair => {
                self.scrub_task(&mut walk, stop)
            }
            TaskKind::Patrol => self.patrol_task(&mut walk, stop),
        };
        let outcome = match result {
            Ok(o) => o,
            Err(e) => TaskOutcome::Failed {
                error: e.to_string(),
            },
        };
        let report = TaskReport {
            progress: walk.progress,
            outcome,
        };
        {
            let mut bg = lock(&self.bg.state);
            bg.running = None;
            if kind == TaskKind::Patrol {
                bg.last_patrol = Some(Instant::now());
            }
            if matches!(kind, TaskKind::Check | TaskKind::Repair | TaskKind::Patrol) {
                match report.outcome {
                    TaskOutcome::Stopped => {
                        bg.resume_from
                            .insert(kind, report.progress.position_sectors);
                    }
                    TaskOutcome::Completed => {
                        bg.resume_from.remove(&kind);
                    }
                    _ => {}
                }
            }
            bg.history.push_back(report.clone());
            while bg.history.len() > HISTORY {
                bg.history.pop_front();
            }
        }
        self.bg.wake();
        {
            let mut st = lock(&self.state);
            let line = match &report.outcome {
                TaskOutcome::Completed => format!(
                    "{kind} completed in {:.1} s ({:.0} MB/s){}",
                    report.progress.elapsed_s,
                    report.progress.bytes_per_s / 1e6,
                    match kind {
                        TaskKind::Check | TaskKind::Repair | TaskKind::Resync =>
                            format!(", {} mismatched sectors", report.progress.mismatch_sectors),
                        TaskKind::Patrol => format!(
                            ", {} sectors rewritten, {} to the bad-block log",
                            report.progress.corrected_sectors, report.progress.bad_block_sectors
                        ),
                        _ => String::new(),
                    }
                ),
                TaskOutcome::Stopped => {
                    format!("{kind} stopped at {:.1} %", report.progress.percent)
                }
                TaskOutcome::Nothing => format!("{kind}: nothing to do"),
                TaskOutcome::Failed { error } => format!("{kind} failed: {error}"),
            };
            st.events.push(ArrayEvent::TaskFinished {
                task: kind,
                completed: report.outcome == TaskOutcome::Completed,
                summary: line,
            });
        }
        Ok(report)
    }

    fn task_range(&self, kind: TaskKind) -> Result<(&'static str, u64, u64)> {
        let member_end = self.geo.member_data_sectors;
        let resume = lock(&self.bg.state).resume_from.get(&kind).copied();
        let st = lock(&self.state);
        Ok(match kind {
            TaskKind::Rebuild => {
                let start = st
                    .slot_state
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| **s == MemberState::Rebuilding)
                    .filter_map(|(slot, _)| st.slot_member[slot])
                    .map(|i| st.sbs[i].recovery_offset().unwrap_or(0))
                    .min()
                    .unwrap_or(member_end);
                ("member sectors", start.min(member_end), member_end)
            }
            TaskKind::Replace => {
                let start = st
                    .replacement
                    .iter()
                    .flatten()
                    .map(|&i| st.sbs[i].recovery_offset().unwrap_or(0))
                    .min()
                    .unwrap_or(member_end);
                ("member sectors", start.min(member_end), member_end)
            }
            TaskKind::Patrol => (
                "member sectors",
                resume.unwrap_or(0).min(member_end),
                member_end,
            ),
            TaskKind::Resync | TaskKind::Check | TaskKind::Repair => {
                if self.geo.level() == RaidLevel::Raid0 {
                    return Err(EngineError::Invalid(format!(
                        "{kind}: RAID 0 has no redundancy to compare"
                    )));
                }
                let (unit, end) = self.scrub_space();
                let start = if kind == TaskKind::Resync {
                    st.resync_from.unwrap_or(end).min(end)
                } else {
                    resume.unwrap_or(0).min(end)
                };
                (unit, start, end)
            }
        })
    }

    /// The space check, repair and resync walk: member sectors for parity levels and RAID 1,
    /// array sectors for RAID 10 (md's raid10 resyncs by virtual address).
    pub(super) fn scrub_space(&self) -> (&'static str, u64) {
        match self.geo.level() {
            RaidLevel::Raid10 => ("array sectors", self.geo.array_sectors()),
            _ => ("member sectors", self.geo.member_data_sectors),
        }
    }

    /// Step size in sectors: up to 1 MiB per member, bounded by the stripe cache setting.
    /// Larger is not faster: measured on tmpfs members (RAID 5 over 4, 512 KiB chunks), a
    /// rebuild ran at 3.4-4.4 GB/s with 1 MiB steps, 3.5-4.2 with 2 MiB and 2.6-2.9 with
    /// 4 MiB, whose buffers (two steps over every member, the next one being read ahead) no
    /// longer stay in the CPU caches between the reads, the parity and the write.
    fn step_sectors(&self) -> u64 {
        let per_member =
            (self.config.stripe_cache_bytes / (self.geo.raid_disks + 2)).clamp(64 << 10, 1 << 20);
        let mut s = (per_member / SECTOR) as u64;
        let chunk = self.geo.chunk_sectors.max(8);
        if s >= chunk {
            s = s / chunk * chunk;
        } else {
            s = s / 8 * 8;
        }
        s.max(8)
    }

    /// Lock keys (as `plan::split` assigns them) covering member sectors `[ms, ms + n)` of a
    /// parity level, or array sectors `[s, s + n)` of a mirror level.
    fn keys_for_parity_range(&self, ms: u64, n: u64) -> Vec<u64> {
        let chunk = self.geo.chunk_sectors.max(1);
        (ms / chunk..=(ms + n - 1) / chunk).collect()
    }

    fn keys_for_array_range(&self, s: u64, n: u64) -> Vec<u64> {
        let unit = plan::copies_lock_unit(&self.geo);
        let mut keys: Vec<u64> = (s / unit..=(s + n - 1) / unit).collect();
        keys.dedup();
        keys
    }

    /// Runs member I/O of one step in parallel on the members' workers and waits; returns the
    /// failed ones as (index into `ios`, error).
    fn range_io(&self, ios: &mut [RangeIo<'_>]) -> Vec<(usize, raidkit_disk::DiskError)> {
        if ios.is_empty() {
            return Vec::new();
        }
        let batch = Batch::new();
        batch.add(ios.len());
        let mut jobs: Vec<(Arc<Member>, Job)> = ios
            .iter_mut()
            .enumerate()
            .map(|(tag, io)| {
                (
                    io.member.clone(),
                    Job {
                        kind: if io.write {
                            JobKind::Write
                        } else {
                            JobKind::Read
                        },
                        offset_bytes: io.member.data_offset_bytes
                            + io.member_sector * SECTOR as u64,
                        ptr: io.buf.as_mut_ptr(),
                        len: io.buf.len(),
                        batch: batch.clone(),
                        tag,
                    },
                )
            })
            .collect();
        if IO_HERE.with(|h| h.get()) {
            for (m, job) in jobs {
                m.worker.execute_here(job);
            }
            return batch.wait();
        }
        let inline = jobs.pop();
        for (m, job) in jobs {
            m.worker.submit(job, m.disk.name());
        }
        if let Some((m, job)) = inline {
            // Through the worker's sampling, so a member only ever written here (a rebuild's
            // target) still learns whether its I/O waits.
            m.worker.execute_here(job);
        }
        // The buffers stay borrowed (through `ios`) until every job has completed.
        batch.wait()
    }

    /// Yields to foreground I/O according to the task's rate; returns whether it slept.
    fn pace(
        &self,
        kind: TaskKind,
        step: Duration,
        walk_started: Instant,
        covered_bytes: u64,
        stop: &AtomicBool,
    ) -> bool {
        let rates = self.task_rates();
        let share = rates.share(kind) as u32;
        let mut sleep = Duration::ZERO;
        if share < 100 && self.bg.foreground_within(FOREGROUND_WINDOW) {
            sleep = step * (100 - share) / share;
        }
        if let Some(max) = rates.max_bytes_per_s.filter(|&m| m > 0) {
            let due = Duration::from_secs_f64(covered_bytes as f64 / max as f64);
            let spent = walk_started.elapsed();
            if due > spent {
                sleep = sleep.max(due - spent);
            }
        }
        let slept = !sleep.is_zero();
        let until = Instant::now() + sleep;
        while Instant::now() < until {
            if self.cancelled(stop) {
                break;
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(20)));
        }
        slept
    }

    fn cancelled(&self, stop: &AtomicBool) -> bool {
        stop.load(Ordering::Relaxed) || self.bg.cancel.load(Ordering::Relaxed)
    }

    fn publish(&self, walk: &mut Walk<'_>) {
        lock(&self.bg.state).running = Some(walk.progress.clone());
        (walk.observe)(&walk.progress);
    }

    /// Slots being rebuilt with their member, and the members able to serve reads.
    fn rebuild_view(&self) -> RebuildView {
        let pass = lock(&self.bg.state).rebuild_pass.clone();
        let st = lock(&self.state);
        let targets = (0..self.geo.raid_disks)
            .filter(|&s| st.slot_state[s] == MemberState::Rebuilding)
            .filter_map(|s| {
                let i = st.slot_member[s]?;
                if pass.as_ref().is_some_and(|p| !p.contains(&i)) {
                    return None;
                }
                Some((s, i, st.members[i].clone()?))
            })
            .collect();
        let members = st
            .slot_member
            .iter()
            .map(|m| m.and_then(|i| st.members[i].clone()))
            .collect();
        (targets, st.slot_state.clone(), members)
    }

    /// Every member being rebuilt came back (re-add) and needs only bitmap-marked regions.
    fn bitmap_only_recovery(&self) -> bool {
        let st = lock(&self.state);
        let mut any = false;
        for slot in 0..self.geo.raid_disks {
            if st.slot_state[slot] == MemberState::Rebuilding {
                if !st.bitmap_recovery[slot] {
                    return false;
                }
                any = true;
            }
        }
        any && self.bitmap.is_some()
    }

    /// Whether the bitmap marks any part of member range `[ms, ms + n)` (of any slot).
    fn member_range_marked(
        &self,
        ms: u64,
        n: u64,
        layout: Option<&raidkit_layout::Geometry>,
    ) -> Result<bool> {
        match (self.geo.scheme(), layout) {
            (Scheme::Copies { .. }, Some(layout)) => {
                // RAID 10's bitmap covers array sectors: look at what every slot holds here.
                for slot in 0..self.geo.raid_disks {
                    for (_, len, a) in self.mirror_pieces(Some(layout), slot, ms, n)? {
                        if a.is_some_and(|a| self.intent_covers(a, len)) {
                            return Ok(true);
                        }
                    }
                }
                Ok(false)
            }
            _ => Ok(self.intent_covers(ms, n)),
        }
    }

    /// md's recovery: rebuilds every slot in the `Rebuilding` state from the others.
    fn rebuild_task(&self, walk: &mut Walk<'_>, stop: &AtomicBool) -> Result<TaskOutcome> {
        lock(&self.bg.state).rebuild_pass = None;
        let (targets, _, _) = self.rebuild_view();
        if targets.is_empty() {
            return Ok(TaskOutcome::Nothing);
        }
        lock(&self.bg.state).rebuild_pass = Some(targets.iter().map(|t| t.1).collect());
        let r = self.rebuild_pass(walk, stop, &targets);
        lock(&self.bg.state).rebuild_pass = None;
        r
    }

    fn rebuild_pass(
        &self,
        walk: &mut Walk<'_>,
        stop: &AtomicBool,
        targets: &[(usize, usize, Arc<Member>)],
    ) -> Result<TaskOutcome> {
        walk.progress.slots = targets.iter().map(|t| t.0).collect();
        let end = walk.progress.end_sectors;
        let step = self.step_sectors();
        let mut bufs: Vec<Vec<u8>> = Vec::new();
        let mut cursor = walk.progress.start_sectors;
        let mut last_checkpoint = Instant::now();
        let layout = self.raid10_layout();
        self.publish(walk);
        let parity = matches!(self.geo.scheme(), Scheme::Parity { .. });
        let bitmap_only = self.bitmap_only_recovery();
        // Reads of the next step run on the member workers while this thread computes and
        // writes the current one (only while nothing else uses the array: a prefetch holds
        // the next step's stripe locks).
        let mut ahead = Ahead {
            array: self,
            p: None,
        };
        while cursor < end {
            if self.cancelled(stop) {
                if let Some(p) = ahead.p.take() {
                    p.abandon(self);
                }
                self.checkpoint_recovery(cursor, false)?;
                return Ok(TaskOutcome::Stopped);
            }
            let step_started = Instant::now();
            let n = step.min(end - cursor);
            if bitmap_only && !self.member_range_marked(cursor, n, layout)? {
                // Members that came back need only what the bitmap marks as written since.
                cursor += n;
                walk.advance(cursor);
                continue;
            }
            let threads = self.burst_threads(TaskKind::Rebuild);
            if threads > 1 {
                if let Some(p) = ahead.p.take() {
                    p.abandon(self);
                }
                let run = |ms: u64, n: u64, sc: &mut StepScratch| -> Result<StepResult> {
                    if bitmap_only && !self.member_range_marked(ms, n, layout)? {
                        return Ok(StepResult::Done(StepCounts::default()));
                    }
                    let live = match self.geo.scheme() {
                        Scheme::Parity { .. } => self.rebuild_parity_step(ms, n, &mut sc.bufs)?,
                        Scheme::Copies { .. } => {
                            self.rebuild_copies_step(ms, n, &mut sc.bufs, layout)?
                        }
                    };
                    Ok(if live == 0 {
                        StepResult::Dead
                    } else {
                        StepResult::Done(StepCounts::default())
                    })
                };
                let checkpoint = |at: u64| self.checkpoint_recovery(at, false);
                let (reached, dead) = self.checkpointed_burst(
                    walk,
                    stop,
                    TaskKind::Rebuild,
                    cursor,
                    (end, step, threads),
                    &run,
                    &mut last_checkpoint,
                    &checkpoint,
                )?;
                if dead {
                    return Ok(TaskOutcome::Failed {
                        error: "every member being rebuilt failed".into(),
                    });
                }
                cursor = reached;
                continue;
            }
            let pipelined = parity
                && !bitmap_only
                && (self.task_rates().share(TaskKind::Rebuild) == 100
                    || !self.bg.foreground_within(FOREGROUND_WINDOW));
            let live = if pipelined {
                let current = match ahead.p.take() {
                    Some(p) if p.ms == cursor => p,
                    other => {
                        if let Some(p) = other {
                            p.abandon(self);
                        }
                        self.prefetch(cursor, n, Vec::new())
                    }
                };
                let next = cursor + n;
                if next < end && current.keys.last() < Some(&(next / self.geo.chunk_sectors.max(1)))
                {
                    let spare = std::mem::take(&mut bufs);
                    ahead.p = Some(self.prefetch(next, step.min(end - next), spare));
                }
                let (live, used) = self.finish_prefetch(current)?;
                bufs = used;
                live
            } else {
                if let Some(p) = ahead.p.take() {
                    p.abandon(self);
                }
                match self.geo.scheme() {
                    Scheme::Parity { .. } => self.rebuild_parity_step(cursor, n, &mut bufs)?,
                    Scheme::Copies { .. } => {
                        self.rebuild_copies_step(cursor, n, &mut bufs, layout)?
                    }
                }
            };
            if live == 0 {
                return Ok(TaskOutcome::Failed {
                    error: "every member being rebuilt failed".into(),
                });
            }
            cursor += n;
            walk.advance(cursor);
            walk.progress.throttled = self.pace(
                TaskKind::Rebuild,
                step_started.elapsed(),
                walk.started,
                (cursor - walk.progress.start_sectors) * SECTOR as u64,
                stop,
            );
            self.publish(walk);
            if self.checkpoint_due(last_checkpoint) && cursor < end {
                self.checkpoint_recovery(cursor, false)?;
                last_checkpoint = Instant::now();
            }
        }
        if let Some(p) = ahead.p.take() {
            p.abandon(self);
        }
        self.checkpoint_recovery(end, true)?;
        Ok(TaskOutcome::Completed)
    }

    /// How many threads steps of task `kind` may run on side by side right now, each thread
    /// doing its own member I/O (1: the plain loop). More than one only while the task runs
    /// at full rate and, unless [`EngineConfig::task_threads`] says otherwise, every member
    /// involved does memory copies (tmpfs, page cache): there, handing a step's reads to the
    /// member workers costs a wake-up per member and step (tens of microseconds on a loaded
    /// machine, a third of a 1 MiB step's time) and a lone task thread keeps one CPU busy.
    /// Members that wait (disks) keep the plain loop, whose parallelism is across members.
    fn burst_threads(&self, kind: TaskKind) -> usize {
        let threads = match self.config.task_threads {
            Some(k) => k,
            None => pool::cpus(),
        };
        if threads < 2 {
            return 1;
        }
        let rates = self.task_rates();
        if rates.max_bytes_per_s.is_some_and(|m| m > 0)
            || (rates.share(kind) < 100 && self.bg.foreground_within(FOREGROUND_WINDOW))
        {
            return 1;
        }
        if self.config.task_threads.is_some() {
            return threads;
        }
        // A member not measured yet has had no I/O (a mirror's copies other than the one
        // read from): it does not count; if a step turns to it and it waits, that step's
        // samples end the burst.
        let involved: Vec<Arc<Member>> = {
            let st = lock(&self.state);
            let slots = (0..self.geo.raid_disks)
                .filter(|&s| {
                    st.slot_state[s].usable() || st.slot_state[s] == MemberState::Rebuilding
                })
                .filter_map(|s| st.slot_member[s]);
            slots
                .chain(st.replacement.iter().flatten().copied())
                .filter_map(|i| st.members[i].clone())
                .collect()
        };
        let mut any = false;
        for m in &involved {
            if m.worker.cpu_bound() {
                any = true;
            } else if m.worker.measured() {
                return 1;
            }
        }
        if any {
            threads
        } else {
            1
        }
    }

    /// Runs steps of task `kind` from `cursor` on `threads` threads until the range ends, the
    /// task is stopped, or [`Self::burst_threads`] says 1. The calling thread takes part.
    /// `run` does one step; what it found is added to `walk`'s counters, and `at_frontier`
    /// runs after every step (under a lock, so one at a time) with the frontier (every sector
    /// below it is done) to keep checkpoints up to date; an error from either ends the burst.
    /// Returns the frontier and whether a step reported [`StepResult::Dead`].
    #[allow(clippy::too_many_arguments)]
    fn burst(
        &self,
        walk: &mut Walk<'_>,
        stop: &AtomicBool,
        kind: TaskKind,
        cursor: u64,
        threads: usize,
        steps: &BurstSteps,
        run: &(dyn Fn(u64, u64, &mut StepScratch) -> Result<StepResult> + Sync),
        at_frontier: &(dyn Fn(&mut Walk<'_>, u64) -> Result<()> + Sync),
    ) -> Result<(u64, bool)> {
        let b = Burst {
            quit: AtomicBool::new(false),
            done: Mutex::new(Frontier {
                at: cursor,
                next: cursor,
                ahead: Default::default(),
            }),
            moved: Condvar::new(),
            dead: AtomicBool::new(false),
            error: Mutex::new(None),
        };
        walk.progress.throttled = false;
        walk.progress.threads = walk.progress.threads.max(threads);
        // Whichever thread finishes a step publishes the progress, so the observer still
        // sees every step.
        let shared = Mutex::new(walk);
        let after_step = |found: StepCounts| -> Result<()> {
            let mut walk = lock(&shared);
            let at = lock(&b.done).at;
            let p = &mut walk.progress;
            p.mismatch_sectors += found.mismatch_sectors;
            p.corrected_sectors += found.corrected_sectors;
            p.bad_block_sectors += found.bad_block_sectors;
            at_frontier(&mut walk, at)?;
            walk.advance(at);
            self.publish(&mut walk);
            Ok(())
        };
        let thread = || self.burst_steps(&b, stop, kind, steps, run, &after_step);
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(thread);
            }
            thread();
        });
        let walk = shared.into_inner().unwrap_or_else(|p| p.into_inner());
        let reached = lock(&b.done).at;
        walk.advance(reached);
        self.publish(walk);
        if let Some(e) = lock(&b.error).take() {
            return Err(e);
        }
        Ok((reached, b.dead.load(Ordering::Relaxed)))
    }

    /// [`Self::burst`] for a task that records its cursor (rebuild, replace): `checkpoint`
    /// records the frontier whenever the checkpoint interval has passed since
    /// `last_checkpoint`, which it then moves. The range is (end, step, threads).
    #[allow(clippy::too_many_arguments)]
    fn checkpointed_burst(
        &self,
        walk: &mut Walk<'_>,
        stop: &AtomicBool,
        kind: TaskKind,
        cursor: u64,
        (end, step, threads): (u64, u64, usize),
        run: &(dyn Fn(u64, u64, &mut StepScratch) -> Result<StepResult> + Sync),
        last_checkpoint: &mut Instant,
        checkpoint: &(dyn Fn(u64) -> Result<()> + Sync),
    ) -> Result<(u64, bool)> {
        let last = Mutex::new(&mut *last_checkpoint);
        let at_frontier = |_: &mut Walk<'_>, at: u64| -> Result<()> {
            let mut last = lock(&last);
            if self.checkpoint_due(**last) && at < end {
                checkpoint(at)?;
                **last = Instant::now();
            }
            Ok(())
        };
        let steps = BurstSteps::new(end, step, threads);
        self.burst(walk, stop, kind, cursor, threads, &steps, run, &at_frontier)
    }

    /// One thread of a burst: claims and runs steps until told to quit.
    fn burst_steps(
        &self,
        b: &Burst,
        stop: &AtomicBool,
        kind: TaskKind,
        steps: &BurstSteps,
        run: &(dyn Fn(u64, u64, &mut StepScratch) -> Result<StepResult> + Sync),
        after_step: &(dyn Fn(StepCounts) -> Result<()> + Sync),
    ) {
        let _here = IoHere::enter();
        // However this thread leaves (a panic included), the others stop claiming, so the
        // steps claimed stay contiguous from the cursor, and stop waiting for a frontier this
        // thread would have moved.
        let _quit = QuitOnExit(b);
        let mut scratch = StepScratch::default();
        let fail = |e: EngineError| {
            lock(&b.error).get_or_insert(e);
            b.quit();
        };
        while let Some(ms) = self.claim_step(b, stop, kind, steps) {
            let n = steps.step.min(steps.end - ms);
            let found = match run(ms, n, &mut scratch) {
                Ok(StepResult::Dead) => {
                    b.dead.store(true, Ordering::Relaxed);
                    return b.quit();
                }
                Ok(StepResult::Done(found)) => {
                    let mut f = lock(&b.done);
                    f.complete(ms, n);
                    b.moved.notify_all();
                    found
                }
                Err(e) => return fail(e),
            };
            if let Err(e) = after_step(found) {
                return fail(e);
            }
        }
    }

    /// The next step for a burst thread, or `None` when the burst is over. Steps are claimed
    /// at most a window ahead of the frontier, so the cursor (what a checkpoint records, what
    /// progress shows) trails the work by a few steps at most and a stop takes effect within
    /// a few steps.
    fn claim_step(
        &self,
        b: &Burst,
        stop: &AtomicBool,
        kind: TaskKind,
        steps: &BurstSteps,
    ) -> Option<u64> {
        let mut f = lock(&b.done);
        loop {
            if b.quit.load(Ordering::Relaxed)
                || self.cancelled(stop)
                || f.next >= steps.end
                || self.burst_threads(kind) < 2
            {
                return None;
            }
            if f.next < f.at + steps.window_sectors {
                let ms = f.next;
                f.next += steps.step;
                return Some(ms);
            }
            f = b.moved.wait(f).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Takes the stripe locks of member range `[ms, ms + n)` and starts reading it from every
    /// readable member on their workers.
    fn prefetch(&self, ms: u64, n: u64, mut bufs: Vec<Vec<u8>>) -> Prefetch {
        let len = n as usize * SECTOR;
        bufs.resize_with(self.geo.raid_disks, Vec::new);
        for b in bufs.iter_mut() {
            b.resize(len, 0);
        }
        let keys = self.keys_for_parity_range(ms, n);
        self.locks.acquire(&keys);
        let (states, members) = self.snapshot();
        let batch = Batch::new();
        let mut slots = Vec::new();
        for (slot, b) in bufs.iter_mut().enumerate() {
            if let (true, Some(m)) = (states[slot].usable(), &members[slot]) {
                slots.push(slot);
                batch.add(1);
                m.worker.submit(
                    Job {
                        kind: JobKind::Read,
                        offset_bytes: m.data_offset_bytes + ms * SECTOR as u64,
                        ptr: b.as_mut_ptr(),
                        len,
                        batch: batch.clone(),
                        tag: slot,
                    },
                    m.disk.name(),
                );
            }
        }
        Prefetch {
            ms,
            n,
            keys,
            bufs,
            batch,
            states,
        }
    }

    /// Completes a prefetched rebuild step: waits for its reads, computes the members being
    /// rebuilt, writes them and releases the locks. Falls back to the plain step when a
    /// member failed or changed state meanwhile. Returns (targets alive, the buffers).
    fn finish_prefetch(&self, p: Prefetch) -> Result<(usize, Vec<Vec<u8>>)> {
        let Prefetch {
            ms,
            n,
            keys,
            mut bufs,
            batch,
            states,
        } = p;
        let errors = batch.wait();
        let (targets, now, _) = self.rebuild_view();
        if !errors.is_empty() || now != states {
            self.locks.release(&keys);
            for (slot, e) in errors {
                self.member_failed(slot, &e.to_string());
            }
            let live = self.rebuild_parity_step(ms, n, &mut bufs)?;
            return Ok((live, bufs));
        }
        let r = (|| -> Result<usize> {
            if targets.is_empty() {
                return Ok(0);
            }
            self.check_failed()?;
            let readable: Vec<bool> = states.iter().map(|s| s.usable()).collect();
            self.recover_and_write(ms, n, &mut bufs, &readable, &targets)
        })();
        self.locks.release(&keys);
        Ok((r?, bufs))
    }

    /// Computes the members being rebuilt over `[ms, ms + n)` from what `bufs` holds of the
    /// `readable` ones and writes them. Returns how many targets are still alive.
    fn recover_and_write(
        &self,
        ms: u64,
        n: u64,
        bufs: &mut [Vec<u8>],
        readable: &[bool],
        targets: &[(usize, usize, Arc<Member>)],
    ) -> Result<usize> {
        // What a member's bad-block log lists is not its data, whatever a read returns there.
        let bad = self.bad_slots_in(ms, n);
        if bad.iter().any(|&(slot, _)| readable[slot]) {
            return self.recover_and_write_around_bad_blocks(ms, n, bufs, readable, targets, &bad);
        }
        recon::parity_recover(&self.geo, ms, n, bufs, readable).map_err(|e| match e {
            ReconError::TooManyLost { .. } => EngineError::ArrayFailed {
                detail: e.to_string(),
            },
            other => EngineError::Invalid(other.to_string()),
        })?;
        Ok(self.write_targets(ms, n, bufs, targets))
    }

    /// Writes what `bufs` holds for each target over `[ms, ms + n)`; fails targets whose write
    /// fails. Returns how many targets are still alive.
    fn write_targets(
        &self,
        ms: u64,
        n: u64,
        bufs: &mut [Vec<u8>],
        targets: &[(usize, usize, Arc<Member>)],
    ) -> usize {
        let len = n as usize * SECTOR;
        let mut writes: Vec<RangeIo<'_>> = Vec::new();
        for (slot, buf) in bufs.iter_mut().enumerate() {
            if let Some((_, _, m)) = targets.iter().find(|t| t.0 == slot) {
                writes.push(RangeIo {
                    slot,
                    member: m.clone(),
                    write: true,
                    member_sector: ms,
                    buf: &mut buf[..len],
                });
            }
        }
        let errors = self.range_io(&mut writes);
        let failed: Vec<usize> = errors.iter().map(|(k, _)| writes[*k].slot).collect();
        drop(writes);
        for ((_, e), slot) in errors.into_iter().zip(&failed) {
            self.member_failed(*slot, &format!("rebuild write: {e}"));
        }
        targets.len() - failed.len()
    }

    /// Slots whose member's bad-block log lists part of `[ms, ms + n)`, with those ranges.
    fn bad_slots_in(&self, ms: u64, n: u64) -> Vec<(usize, Vec<(u64, u64)>)> {
        if !self.has_bad.load(std::sync::atomic::Ordering::Relaxed) {
            return Vec::new();
        }
        let st = lock(&self.state);
        (0..self.geo.raid_disks)
            .filter_map(|slot| {
                let i = st.slot_member[slot]?;
                let hits: Vec<(u64, u64)> = st
                    .bad
                    .get(i)?
                    .iter()
                    .copied()
                    .filter(|&(b, len)| b < ms + n && ms < b + len)
                    .collect();
                (!hits.is_empty()).then_some((slot, hits))
            })
            .collect()
    }

    /// [`Self::recover_and_write`] for a range where some readable members list bad blocks:
    /// 4 KiB at a time, those members count as lost where their log lists the block; a block
    /// that then has too few sources is not made up but recorded in each target's bad-block
    /// log (md does the same when recovery meets an unreadable source), so reads of it fail
    /// instead of returning wrong data.
    fn recover_and_write_around_bad_blocks(
        &self,
        ms: u64,
        n: u64,
        bufs: &mut [Vec<u8>],
        readable: &[bool],
        targets: &[(usize, usize, Arc<Member>)],
        bad: &[(usize, Vec<(u64, u64)>)],
    ) -> Result<usize> {
        const BLOCK: u64 = 8;
        let mut lost_blocks: Vec<(u64, u64)> = Vec::new();
        let mut b = ms;
        while b < ms + n {
            let len = BLOCK.min(ms + n - b);
            let mut r = readable.to_vec();
            for (slot, ranges) in bad {
                if ranges.iter().any(|&(s, l)| s < b + len && b < s + l) {
                    r[*slot] = false;
                }
            }
            let off = ((b - ms) as usize) * SECTOR;
            let bytes = len as usize * SECTOR;
            let mut block: Vec<Vec<u8>> =
                bufs.iter().map(|v| v[off..off + bytes].to_vec()).collect();
            match recon::parity_recover(&self.geo, b, len, &mut block, &r) {
                Ok(()) => {
                    for (slot, ..) in targets {
                        bufs[*slot][off..off + bytes].copy_from_slice(&block[*slot]);
                    }
                }
                Err(ReconError::TooManyLost { .. }) => lost_blocks.push((b, len)),
                Err(e) => return Err(EngineError::Invalid(e.to_string())),
            }
            b += len;
        }
        for &(b, len) in &lost_blocks {
            // Zeroes, never another member's data, where nothing could be computed.
            let off = ((b - ms) as usize) * SECTOR;
            for (slot, ..) in targets {
                bufs[*slot][off..off + len as usize * SECTOR].fill(0);
            }
        }
        let alive = self.write_targets(ms, n, bufs, targets);
        for &(b, len) in &lost_blocks {
            for (_, index, _) in targets {
                if !self.record_bad_block(*index, b, len)? {
                    break;
                }
            }
        }
        if !lost_blocks.is_empty() {
            let text = format!(
                "rebuild: {} sectors near member sector {ms} have no readable source left (bad blocks); recorded as bad blocks on the rebuilt member",
                lost_blocks.iter().map(|(_, l)| l).sum::<u64>()
            );
            lock(&self.state).events.push(ArrayEvent::Note { text });
        }
        Ok(alive)
    }

    /// One rebuild step of a parity level: read `[ms, ms + n)` from every readable member,
    /// compute the rebuilding ones, write them. Returns how many targets are still alive.
    fn rebuild_parity_step(&self, ms: u64, n: u64, bufs: &mut Vec<Vec<u8>>) -> Result<usize> {
        let len = n as usize * SECTOR;
        bufs.resize_with(self.geo.raid_disks, Vec::new);
        for b in bufs.iter_mut() {
            b.resize(len, 0);
        }
        let keys = self.keys_for_parity_range(ms, n);
        self.locks.acquire(&keys);
        let r = (|| loop {
            let (targets, states, members) = self.rebuild_view();
            if targets.is_empty() {
                return Ok(0);
            }
            self.check_failed()?;
            let readable: Vec<bool> = states.iter().map(|s| s.usable()).collect();
            let mut ios: Vec<RangeIo<'_>> = Vec::new();
            for (slot, buf) in bufs.iter_mut().enumerate() {
                if let (true, Some(m)) = (readable[slot], &members[slot]) {
                    ios.push(RangeIo {
                        slot,
                        member: m.clone(),
                        write: false,
                        member_sector: ms,
                        buf: &mut buf[..len],
                    });
                }
            }
            let errors = self.range_io(&mut ios);
            if !errors.is_empty() {
                let slots: Vec<usize> = errors.iter().map(|(k, _)| ios[*k].slot).collect();
                drop(ios);
                for ((_, e), slot) in errors.into_iter().zip(slots) {
                    self.member_failed(slot, &e.to_string());
                }
                continue;
            }
            drop(ios);
            return self.recover_and_write(ms, n, bufs, &readable, &targets);
        })();
        self.locks.release(&keys);
        r
    }

    /// RAID 10's geometry, which maps a member range back to the array sectors it holds
    /// (`unmap`); `None` for the other levels (RAID 1's member sectors are array sectors).
    pub(super) fn raid10_layout(&self) -> Option<&raidkit_layout::Geometry> {
        (self.geo.level() == RaidLevel::Raid10).then(|| self.geo.geometry())
    }

    /// Where each part of member range `[ms, ms + n)` of `slot` lives in the array: (member
    /// sector, sectors, array sector or None when the member range holds no array data).
    fn mirror_pieces(
        &self,
        layout: Option<&raidkit_layout::Geometry>,
        slot: usize,
        ms: u64,
        n: u64,
    ) -> Result<Vec<(u64, u64, Option<u64>)>> {
        let Some(layout) = layout else {
            // RAID 1: member sector = array sector.
            return Ok(vec![(ms, n, Some(ms))]);
        };
        let chunk = self.geo.chunk_sectors;
        let mut out = Vec::new();
        let mut s = ms;
        while s < ms + n {
            let len = (chunk - s % chunk).min(ms + n - s);
            let a = match layout.unmap(slot as u32, s) {
                Ok(raidkit_layout::MemberChunkRole::Data { array_sector, .. })
                    if array_sector < self.geo.array_sectors() =>
                {
                    Some(array_sector)
                }
                Ok(_) => None,
                Err(e) => return Err(EngineError::Invalid(e.to_string())),
            };
            out.push((s, len, a));
            s += len;
        }
        Ok(out)
    }

    /// Lock keys of the array sectors that `pieces` (of [`Self::mirror_pieces`]) hold.
    fn keys_for_mirror_pieces(&self, pieces: &[(u64, u64, Option<u64>)]) -> Vec<u64> {
        let mut keys: Vec<u64> = pieces
            .iter()
            .filter_map(|(_, len, a)| a.map(|a| self.keys_for_array_range(a, *len)))
            .flatten()
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// One rebuild step of RAID 1/10: copy every rebuilding slot's range from a live copy.
    fn rebuild_copies_step(
        &self,
        ms: u64,
        n: u64,
        bufs: &mut Vec<Vec<u8>>,
        layout: Option<&raidkit_layout::Geometry>,
    ) -> Result<usize> {
        let len = n as usize * SECTOR;
        bufs.resize_with(1, Vec::new);
        bufs[0].resize(len, 0);
        let (targets, _, _) = self.rebuild_view();
        let mut alive = 0;
        for (slot, _, _) in targets {
            let pieces = self.mirror_pieces(layout, slot, ms, n)?;
            let keys = self.keys_for_mirror_pieces(&pieces);
            self.locks.acquire(&keys);
            let r = self.copy_into_slot(slot, ms, &pieces, &mut bufs[0][..len], true);
            self.locks.release(&keys);
            if r? {
                alive += 1;
            }
        }
        Ok(alive)
    }

    /// Fills `buf` (member range starting at `ms` of `slot`) from live copies other than
    /// `slot` and writes it to `slot` (or, with `to_rebuilding`, only while the slot is still
    /// being rebuilt). Returns whether the slot's member is still alive.
    fn copy_into_slot(
        &self,
        slot: usize,
        ms: u64,
        pieces: &[(u64, u64, Option<u64>)],
        buf: &mut [u8],
        to_rebuilding: bool,
    ) -> Result<bool> {
        loop {
            let (states, members) = self.snapshot();
            let target_ok = if to_rebuilding {
                states[slot] == MemberState::Rebuilding
            } else {
                states[slot].writable()
            };
            let Some(target) = members[slot].clone().filter(|_| target_ok) else {
                return Ok(false);
            };
            self.check_failed()?;
            let mut ios: Vec<RangeIo<'_>> = Vec::new();
            let mut rest: &mut [u8] = buf;
            let mut missing_source = None;
            for &(s, len, a) in pieces {
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len as usize * SECTOR);
                rest = tail;
                let Some(a) = a else {
                    piece.fill(0);
                    continue;
                };
                let (copies, _) = self.geo.copies(a);
                let src = copies
                    .iter()
                    .find(|&&(m, _)| m != slot && states[m].usable() && members[m].is_some());
                match src {
                    Some(&(m, src_sector)) => ios.push(RangeIo {
                        slot: m,
                        member: members[m].clone().expect("checked above"),
                        write: false,
                        member_sector: src_sector,
                        buf: piece,
                    }),
                    None => missing_source = Some((s, a)),
                }
            }
            if let Some((s, a)) = missing_source {
                drop(ios);
                return Err(EngineError::ArrayFailed {
                    detail: format!(
                        "no live copy of array sector {a} (member sector {s} of slot {slot}) to rebuild from"
                    ),
                });
            }
            let errors = self.range_io(&mut ios);
            if !errors.is_empty() {
                let slots: Vec<usize> = errors.iter().map(|(k, _)| ios[*k].slot).collect();
                drop(ios);
                for ((_, e), s) in errors.into_iter().zip(slots) {
                    self.member_failed(s, &e.to_string());
                }
                continue;
            }
            drop(ios);
            let mut w = [RangeIo {
                slot,
                member: target,
                write: true,
                member_sector: ms,
                buf: &mut *buf,
            }];
            let errors = self.range_io(&mut w);
            if let Some((_, e)) = errors.into_iter().next() {
                self.member_failed(slot, &format!("rebuild write: {e}"));
                return Ok(false);
            }
            return Ok(true);
        }
    }

    /// Records the rebuild cursor in the superblocks of the members being rebuilt (after
    /// flushing them); with `done`, they become in sync.
    fn checkpoint_recovery(&self, cursor: u64, done: bool) -> Result<()> {
        let (targets, _, _) = self.rebuild_view();
        let mut ok = Vec::new();
        for (slot, index, m) in targets {
            match m.disk.flush() {
                Ok(()) => ok.push((slot, index)),
                Err(e) => self.member_failed(slot, &format!("flush after rebuild: {e}")),
            }
        }
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        for (slot, index) in ok {
            if st.slot_state[slot] != MemberState::Rebuilding || st.slot_member[slot] != Some(index)
            {
                continue;
            }
            if done {
                st.sbs[index].clear_recovery_offset();
                st.slot_state[slot] = MemberState::InSync;
                st.bitmap_recovery[slot] = false;
                let name = st.members[index]
                    .as_ref()
                    .map(|m| m.disk.name().to_string())
                    .unwrap_or_default();
                st.events.push(ArrayEvent::Rebuilt { member: name, slot });
            } else {
                st.sbs[index].set_recovery_offset(cursor);
            }
        }
        if !self.read_only {
            self.update_superblocks(&mut st, |_| {});
        }
        Ok(())
    }

    /// (slot, replacement index, replacement member, old member) of every replacement.
    fn replace_view(&self) -> Vec<Replacing> {
        let st = lock(&self.state);
        (0..self.geo.raid_disks)
            .filter_map(|slot| {
                let r = st.replacement[slot]?;
                let old = st.slot_member[slot].and_then(|i| st.members[i].clone());
                Some((slot, r, st.members[r].clone()?, old))
            })
            .collect()
    }

    /// md's replace: copies each replaced member onto its replacement while it stays in
    /// service; a range the old member cannot read is rebuilt from the others instead.
    fn replace_task(&self, walk: &mut Walk<'_>, stop: &AtomicBool) -> Result<TaskOutcome> {
        if self.replace_view().is_empty() {
            return Ok(TaskOutcome::Nothing);
        }
        walk.progress.slots = self.replace_view().iter().map(|r| r.0).collect();
        let end = walk.progress.end_sectors;
        let step = self.step_sectors();
        let mut scratch = StepScratch::default();
        let layout = self.raid10_layout();
        let no_replacement_left = || TaskOutcome::Failed {
            error: "no replacement left to copy to (failed, or continued as a rebuild)".into(),
        };
        let mut cursor = walk.progress.start_sectors;
        let mut last_checkpoint = Instant::now();
        self.publish(walk);
        while cursor < end {
            if self.cancelled(stop) {
                self.checkpoint_replacements(cursor, false)?;
                return Ok(TaskOutcome::Stopped);
            }
            let threads = self.burst_threads(TaskKind::Replace);
            if threads > 1 {
                let run =
                    |ms: u64, n: u64, sc: &mut StepScratch| self.replace_step(ms, n, sc, layout);
                let checkpoint = |at: u64| self.checkpoint_replacements(at, false);
                let (reached, dead) = self.checkpointed_burst(
                    walk,
                    stop,
                    TaskKind::Replace,
                    cursor,
                    (end, step, threads),
                    &run,
                    &mut last_checkpoint,
                    &checkpoint,
                )?;
                if dead {
                    return Ok(no_replacement_left());
                }
                cursor = reached;
                continue;
            }
            let step_started = Instant::now();
            let n = step.min(end - cursor);
            if let StepResult::Dead = self.replace_step(cursor, n, &mut scratch, layout)? {
                return Ok(no_replacement_left());
            }
            cursor += n;
            walk.advance(cursor);
            walk.progress.throttled = self.pace(
                TaskKind::Replace,
                step_started.elapsed(),
                walk.started,
                (cursor - walk.progress.start_sectors) * SECTOR as u64,
                stop,
            );
            self.publish(walk);
            if self.checkpoint_due(last_checkpoint) && cursor < end {
                self.checkpoint_replacements(cursor, false)?;
                last_checkpoint = Instant::now();
            }
        }
        self.checkpoint_replacements(end, true)?;
        Ok(TaskOutcome::Completed)
    }

    /// One replace step: copies `[cursor, cursor + n)` of every replaced member onto its
    /// replacement (rebuilding what the old member cannot read). `Dead` when no replacement
    /// is left (every one failed, or took over its slot as a rebuild).
    fn replace_step(
        &self,
        cursor: u64,
        n: u64,
        sc: &mut StepScratch,
        layout: Option<&raidkit_layout::Geometry>,
    ) -> Result<StepResult> {
        let view = self.replace_view();
        if view.is_empty() {
            return Ok(StepResult::Dead);
        }
        let StepScratch { bufs, buf, .. } = sc;
        for (slot, r_index, r_member, old) in view {
            let done_to = lock(&self.state).sbs[r_index]
                .recovery_offset()
                .unwrap_or(0);
            if done_to >= cursor + n {
                continue;
            }
            let len = n as usize * SECTOR;
            buf.resize(len, 0);
            let keys = match self.geo.scheme() {
                Scheme::Parity { .. } => self.keys_for_parity_range(cursor, n),
                Scheme::Copies { .. } => {
                    self.keys_for_mirror_pieces(&self.mirror_pieces(layout, slot, cursor, n)?)
                }
            };
            self.locks.acquire(&keys);
            let r = (|| -> Result<()> {
                let mut got = false;
                if let Some(old) = old {
                    let mut io = [RangeIo {
                        slot,
                        member: old,
                        write: false,
                        member_sector: cursor,
                        buf: &mut buf[..len],
                    }];
                    got = self.range_io(&mut io).is_empty();
                }
                if !got {
                    // The old member cannot give this range: rebuild it from the others.
                    match self.geo.scheme() {
                        Scheme::Parity { .. } => {
                            self.reconstruct_parity_range(slot, cursor, n, bufs)?;
                            buf[..len].copy_from_slice(&bufs[slot][..len]);
                        }
                        Scheme::Copies { .. } => {
                            let pieces = self.mirror_pieces(layout, slot, cursor, n)?;
                            self.fill_from_other_copies(slot, &pieces, &mut buf[..len])?;
                        }
                    }
                }
                let mut w = [RangeIo {
                    slot,
                    member: r_member,
                    write: true,
                    member_sector: cursor,
                    buf: &mut buf[..len],
                }];
                if let Some((_, e)) = self.range_io(&mut w).into_iter().next() {
                    self.replacement_failed(slot, &format!("replacement write: {e}"));
                }
                Ok(())
            })();
            self.locks.release(&keys);
            r?;
        }
        Ok(StepResult::Done(StepCounts::default()))
    }

    /// Reads every other readable member over `[ms, ms + n)` and computes what `slot` holds
    /// there into `bufs[slot]`.
    pub(super) fn reconstruct_parity_range(
        &self,
        slot: usize,
        ms: u64,
        n: u64,
        bufs: &mut Vec<Vec<u8>>,
    ) -> Result<()> {
        let len = n as usize * SECTOR;
        bufs.resize_with(self.geo.raid_disks, Vec::new);
        for b in bufs.iter_mut() {
            b.resize(len, 0);
        }
        loop {
            let (states, members) = self.snapshot();
            self.check_failed()?;
            let mut readable: Vec<bool> = states.iter().map(|s| s.usable()).collect();
            readable[slot] = false;
            let mut ios: Vec<RangeIo<'_>> = Vec::new();
            for (m, b) in bufs.iter_mut().enumerate() {
                if let (true, Some(member)) = (readable[m], &members[m]) {
                    ios.push(RangeIo {
                        slot: m,
                        member: member.clone(),
                        write: false,
                        member_sector: ms,
                        buf: &mut b[..len],
                    });
                }
            }
            let errors = self.range_io(&mut ios);
            if !errors.is_empty() {
                let slots: Vec<usize> = errors.iter().map(|(k, _)| ios[*k].slot).collect();
                drop(ios);
                for ((_, e), s) in errors.into_iter().zip(slots) {
                    self.member_failed(s, &e.to_string());
                }
                continue;
            }
            drop(ios);
            return recon::parity_recover(&self.geo, ms, n, bufs, &readable).map_err(|e| {
                EngineError::ArrayFailed {
                    detail: e.to_string(),
                }
            });
        }
    }

    /// Fills `buf` (the pieces of a member range of `slot`) from live copies on other slots.
    fn fill_from_other_copies(
        &self,
        slot: usize,
        pieces: &[(u64, u64, Option<u64>)],
        buf: &mut [u8],
    ) -> Result<()> {
        loop {
            let (states, members) = self.snapshot();
            self.check_failed()?;
            let mut ios: Vec<RangeIo<'_>> = Vec::new();
            let mut rest: &mut [u8] = buf;
            for &(s, len, a) in pieces {
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len as usize * SECTOR);
                rest = tail;
                let Some(a) = a else {
                    piece.fill(0);
                    continue;
                };
                let (copies, _) = self.geo.copies(a);
                let Some(&(m, src)) = copies
                    .iter()
                    .find(|&&(m, _)| m != slot && states[m].usable() && members[m].is_some())
                else {
                    return Err(EngineError::ArrayFailed {
                        detail: format!(
                            "no other live copy of array sector {a} (member sector {s} of slot {slot})"
                        ),
                    });
                };
                ios.push(RangeIo {
                    slot: m,
                    member: members[m].clone().expect("checked"),
                    write: false,
                    member_sector: src,
                    buf: piece,
                });
            }
            let errors = self.range_io(&mut ios);
            if errors.is_empty() {
                return Ok(());
            }
            let slots: Vec<usize> = errors.iter().map(|(k, _)| ios[*k].slot).collect();
            drop(ios);
            for ((_, e), s) in errors.into_iter().zip(slots) {
                self.member_failed(s, &e.to_string());
            }
        }
    }

    /// Records the replacements' progress; with `done`, each replacement takes its slot and
    /// the member it replaced is marked faulty (md's end of a replace).
    fn checkpoint_replacements(&self, cursor: u64, done: bool) -> Result<()> {
        let view = self.replace_view();
        let mut ok = Vec::new();
        for (slot, r, m, _) in view {
            match m.disk.flush() {
                Ok(()) => ok.push((slot, r)),
                Err(e) => self.replacement_failed(slot, &format!("flush: {e}")),
            }
        }
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        let mut roles: Vec<(u32, DevRole)> = Vec::new();
        for (slot, r) in ok {
            if st.replacement[slot] != Some(r) {
                continue;
            }
            if done {
                let old = st.slot_member[slot];
                st.replacement[slot] = None;
                st.slot_member[slot] = Some(r);
                st.slot_state[slot] = MemberState::InSync;
                st.sbs[r].clear_recovery_offset();
                st.sbs[r].feature_map.remove(FeatureMap::REPLACEMENT);
                roles.push((st.sbs[r].dev_number, DevRole::Active(slot as u16)));
                if let Some(o) = old {
                    roles.push((st.sbs[o].dev_number, DevRole::Faulty));
                }
                let name = |i: usize| {
                    st.members[i]
                        .as_ref()
                        .map(|m| m.disk.name().to_string())
                        .unwrap_or_default()
                };
                let event = ArrayEvent::Replaced {
                    member: name(r),
                    old: old.map(name).unwrap_or_default(),
                    slot,
                };
                st.events.push(event);
            } else {
                st.sbs[r].set_recovery_offset(cursor);
            }
        }
        self.note_replacements(&st);
        if !self.read_only {
            self.update_superblocks(&mut st, |sb| {
                for &(d, role) in &roles {
                    let _ = sb.set_role(d, role);
                }
            });
        }
        Ok(())
    }

    /// Check, repair and resync: compare parity (or copies) with data; repair and resync
    /// rewrite what disagrees.
    fn scrub_task(&self, walk: &mut Walk<'_>, stop: &AtomicBool) -> Result<TaskOutcome> {
        let kind = walk.progress.kind;
        let fix = kind != TaskKind::Check;
        {
            let st = lock(&self.state);
            if kind == TaskKind::Resync && st.resync_from.is_none() {
                return Ok(TaskOutcome::Nothing);
            }
            if matches!(self.geo.scheme(), Scheme::Parity { .. })
                && !st.slot_state.iter().all(|s| s.usable())
            {
                let missing: Vec<usize> = (0..self.geo.raid_disks)
                    .filter(|&s| !st.slot_state[s].usable())
                    .collect();
                return Err(EngineError::Invalid(format!(
                    "{kind} compares parity with data and needs every member in sync; slots {missing:?} are missing or being rebuilt"
                )));
            }
        }
        let end = walk.progress.end_sectors;
        let step = self.step_sectors();
        let mut bufs: Vec<Vec<u8>> = Vec::new();
        let mut scratch = (Vec::new(), Vec::new());
        let mut cursor = walk.progress.start_sectors;
        self.publish(walk);
        while cursor < end {
            if self.cancelled(stop) {
                if kind == TaskKind::Resync {
                    lock(&self.state).resync_from = Some(cursor);
                }
                return Ok(TaskOutcome::Stopped);
            }
            let threads = self.burst_threads(kind);
            if threads > 1 {
                let run = |s: u64, n: u64, sc: &mut StepScratch| -> Result<StepResult> {
                    if kind == TaskKind::Resync && !self.intent_covers(s, n) {
                        return Ok(StepResult::Done(StepCounts::default()));
                    }
                    Ok(StepResult::Done(StepCounts::mismatches(
                        match self.geo.scheme() {
                            Scheme::Parity { .. } => {
                                self.scrub_parity_step(s, n, fix, &mut sc.bufs, &mut sc.parity)?
                            }
                            Scheme::Copies { .. } => {
                                self.scrub_copies_step(s, n, fix, &mut sc.bufs)?
                            }
                        },
                    )))
                };
                let at_frontier = |_: &mut Walk<'_>, at: u64| -> Result<()> {
                    if kind == TaskKind::Resync {
                        lock(&self.state).resync_from = Some(at);
                    }
                    Ok(())
                };
                let steps = BurstSteps::new(end, step, threads);
                let (reached, _) = self.burst(
                    walk,
                    stop,
                    kind,
                    cursor,
                    threads,
                    &steps,
                    &run,
                    &at_frontier,
                )?;
                cursor = reached;
                continue;
            }
            let step_started = Instant::now();
            let n = step.min(end - cursor);
            if kind == TaskKind::Resync && !self.intent_covers(cursor, n) {
                // The write-intent bitmap says nothing was written here: nothing to resync.
                cursor += n;
                lock(&self.state).resync_from = Some(cursor);
                walk.advance(cursor);
                continue;
            }
            let found = match self.geo.scheme() {
                Scheme::Parity { .. } => {
                    self.scrub_parity_step(cursor, n, fix, &mut bufs, &mut scratch)?
                }
                Scheme::Copies { .. } => self.scrub_copies_step(cursor, n, fix, &mut bufs)?,
            };
            walk.progress.mismatch_sectors += found;
            cursor += n;
            if kind == TaskKind::Resync {
                lock(&self.state).resync_from = Some(cursor);
            }
            walk.advance(cursor);
            walk.progress.throttled = self.pace(
                kind,
                step_started.elapsed(),
                walk.started,
                (cursor - walk.progress.start_sectors) * SECTOR as u64,
                stop,
            );
            self.publish(walk);
        }
        if kind == TaskKind::Resync {
            self.flush()?;
            let mut st = lock(&self.state);
            st.resync_from = None;
            self.resync_pending.store(false, Ordering::Relaxed);
        }
        Ok(TaskOutcome::Completed)
    }

    fn scrub_parity_step(
        &self,
        ms: u64,
        n: u64,
        fix: bool,
        bufs: &mut Vec<Vec<u8>>,
        scratch: &mut (Vec<u8>, Vec<u8>),
    ) -> Result<u64> {
        let len = n as usize * SECTOR;
        bufs.resize_with(self.geo.raid_disks, Vec::new);
        for b in bufs.iter_mut() {
            b.resize(len, 0);
        }
        let keys = self.keys_for_parity_range(ms, n);
        // A member that cannot read part of the range has those sectors rebuilt from the
        // others and rewritten, as md does during check, repair and resync, and the step is
        // read again; one that still fails is failed. (After a crash with the partial parity
        // log, the only stripes whose parity may be stale are those the replay could not
        // read a modified member of: rebuilding that member's sectors from parity gives what
        // the crash left there, old or new.)
        let mut narrowed = false;
        loop {
            self.locks.acquire(&keys);
            let r = self.scrub_parity_locked(ms, n, fix, bufs, scratch, len, !narrowed);
            self.locks.release(&keys);
            match r {
                Err(ScrubError::Unreadable(slots)) => {
                    narrowed = true;
                    for slot in slots {
                        if let Err(e) = self.patrol_narrow(slot, ms, n, None) {
                            self.member_failed(
                                slot,
                                &format!("repairing a read error failed: {e}"),
                            );
                        }
                    }
                }
                Err(ScrubError::Engine(e)) => return Err(e),
                Ok(m) => return Ok(m),
            }
        }
    }

    /// [`Self::scrub_parity_step`] with the range's stripe locks held. With `narrow`, read
    /// errors are handed back (to be narrowed and repaired without the locks) instead of
    /// failing their members.
    #[allow(clippy::too_many_arguments)]
    fn scrub_parity_locked(
        &self,
        ms: u64,
        n: u64,
        fix: bool,
        bufs: &mut [Vec<u8>],
        scratch: &mut (Vec<u8>, Vec<u8>),
        len: usize,
        narrow: bool,
    ) -> std::result::Result<u64, ScrubError> {
        loop {
            let (states, members) = self.snapshot();
            self.check_failed()?;
            if !states.iter().all(|s| s.usable()) {
                return Err(EngineError::Invalid(
                    "a member failed: parity can no longer be compared with data".into(),
                )
                .into());
            }
            let mut ios: Vec<RangeIo<'_>> = bufs
                .iter_mut()
                .enumerate()
                .filter_map(|(slot, buf)| {
                    Some(RangeIo {
                        slot,
                        member: members[slot].clone()?,
                        write: false,
                        member_sector: ms,
                        buf: &mut buf[..len],
                    })
                })
                .collect();
            let errors = self.range_io(&mut ios);
            if !errors.is_empty() {
                let slots: Vec<usize> = errors.iter().map(|(k, _)| ios[*k].slot).collect();
                drop(ios);
                if narrow {
                    return Err(ScrubError::Unreadable(slots));
                }
                for ((_, e), slot) in errors.into_iter().zip(slots) {
                    self.member_failed(slot, &e.to_string());
                }
                continue;
            }
            drop(ios);
            let bad = self.bad_slots_in(ms, n);
            if !bad.is_empty() {
                return Ok(self.scrub_blocks_around_bad(ms, n, fix, bufs, scratch, &members, &bad)?);
            }
            let out = recon::parity_check(&self.geo, ms, n, bufs, fix, scratch)
                .map_err(|e| EngineError::Invalid(e.to_string()))?;
            if !out.rewrite.is_empty() {
                // One write per slot and stripe segment; parity members differ per stripe.
                let mut rest: Vec<Option<&mut [u8]>> =
                    bufs.iter_mut().map(|b| Some(&mut b[..])).collect();
                let mut writes: Vec<RangeIo<'_>> = Vec::new();
                // Segments of one slot are disjoint and in order: cut them off front to back.
                let mut taken: Vec<usize> = vec![0; self.geo.raid_disks];
                for &(slot, sector, sectors, offset) in &out.rewrite {
                    let Some(m) = members[slot].clone() else {
                        continue;
                    };
                    let whole = rest[slot].take().unwrap_or(&mut []);
                    let (_, from) = whole.split_at_mut(offset - taken[slot]);
                    let (seg, tail) = from.split_at_mut(sectors as usize * SECTOR);
                    taken[slot] = offset + seg.len();
                    rest[slot] = Some(tail);
                    writes.push(RangeIo {
                        slot,
                        member: m,
                        write: true,
                        member_sector: sector,
                        buf: seg,
                    });
                }
                let errors = self.range_io(&mut writes);
                let slots: Vec<usize> = errors.iter().map(|(k, _)| writes[*k].slot).collect();
                drop(writes);
                for ((_, e), slot) in errors.into_iter().zip(slots) {
                    self.member_failed(slot, &format!("parity rewrite: {e}"));
                }
            }
            return Ok(out.mismatch_sectors);
        }
    }

    /// [`Self::scrub_parity_step`] where members list bad blocks in the range: 4 KiB at a
    /// time, a block some member's bad-block log lists is left alone (what the member holds
    /// there is not data: comparing or recomputing parity from it would write garbage into
    /// parity); the others are checked and, with `fix`, repaired as usual.
    #[allow(clippy::too_many_arguments)]
    fn scrub_blocks_around_bad(
        &self,
        ms: u64,
        n: u64,
        fix: bool,
        bufs: &[Vec<u8>],
        scratch: &mut (Vec<u8>, Vec<u8>),
        members: &[Option<Arc<Member>>],
        bad: &[(usize, Vec<(u64, u64)>)],
    ) -> Result<u64> {
        const BLOCK: u64 = 8;
        let mut mismatched = 0;
        let mut b = ms;
        while b < ms + n {
            let len = BLOCK.min(ms + n - b);
            let listed = bad
                .iter()
                .any(|(_, r)| r.iter().any(|&(s, l)| s < b + len && b < s + l));
            if !listed {
                let off = ((b - ms) as usize) * SECTOR;
                let bytes = len as usize * SECTOR;
                let mut block: Vec<Vec<u8>> =
                    bufs.iter().map(|v| v[off..off + bytes].to_vec()).collect();
                let out = recon::parity_check(&self.geo, b, len, &mut block, fix, scratch)
                    .map_err(|e| EngineError::Invalid(e.to_string()))?;
                mismatched += out.mismatch_sectors;
                for &(slot, sector, sectors, offset) in &out.rewrite {
                    let Some(m) = members[slot].clone() else {
                        continue;
                    };
                    let mut w = [RangeIo {
                        slot,
                        member: m,
                        write: true,
                        member_sector: sector,
                        buf: &mut block[slot][offset..offset + sectors as usize * SECTOR],
                    }];
                    if let Some((_, e)) = self.range_io(&mut w).into_iter().next() {
                        self.member_failed(slot, &format!("parity rewrite: {e}"));
                    }
                }
            }
            b += len;
        }
        Ok(mismatched)
    }

    /// Check/repair/resync of RAID 1/10 over `[s, s + n)` of the scrub space (member sectors
    /// for RAID 1, array sectors for RAID 10): every live copy is compared with the first
    /// live copy, which is what md's resync copies from.
    fn scrub_copies_step(&self, s: u64, n: u64, fix: bool, bufs: &mut Vec<Vec<u8>>) -> Result<u64> {
        let mut mismatched = 0;
        let mut a = s;
        while a < s + n {
            let (copies, run) = self.geo.copies(a);
            let len_sectors = run.min(s + n - a);
            let len = len_sectors as usize * SECTOR;
            bufs.resize_with(copies.len(), Vec::new);
            for b in bufs.iter_mut() {
                b.resize(len, 0);
            }
            let keys = self.keys_for_array_range(a, len_sectors);
            self.locks.acquire(&keys);
            let r: Result<u64> = (|| loop {
                let (states, members) = self.snapshot();
                self.check_failed()?;
                let live: Vec<(usize, usize, u64)> = copies
                    .iter()
                    .enumerate()
                    .filter(|(_, (m, _))| states[*m].usable() && members[*m].is_some())
                    .map(|(k, &(m, ms))| (k, m, ms))
                    .collect();
                if live.len() < 2 {
                    return Ok(0);
                }
                let mut ios: Vec<RangeIo<'_>> = Vec::new();
                for (k, buf) in bufs.iter_mut().enumerate() {
                    if let Some(&(_, m, ms)) = live.iter().find(|l| l.0 == k) {
                        ios.push(RangeIo {
                            slot: m,
                            member: members[m].clone().expect("live"),
                            write: false,
                            member_sector: ms,
                            buf: &mut buf[..len],
                        });
                    }
                }
                let errors = self.range_io(&mut ios);
                if !errors.is_empty() {
                    let slots: Vec<usize> = errors.iter().map(|(k, _)| ios[*k].slot).collect();
                    drop(ios);
                    for ((_, e), slot) in errors.into_iter().zip(slots) {
                        self.member_failed(slot, &e.to_string());
                    }
                    continue;
                }
                drop(ios);
                let first = live[0].0;
                let (head, tail) = bufs.split_at_mut(first + 1);
                let reference = &head[first][..len];
                let mut found = 0;
                let mut writes: Vec<RangeIo<'_>> = Vec::new();
                for (k, buf) in tail.iter_mut().enumerate() {
                    let k = k + first + 1;
                    let Some(&(_, m, ms)) = live.iter().find(|l| l.0 == k) else {
                        continue;
                    };
                    let d = recon::copies_mismatch_sectors(reference, &buf[..len]);
                    if d > 0 {
                        found = found.max(d);
                        if fix {
                            buf[..len].copy_from_slice(reference);
                            writes.push(RangeIo {
                                slot: m,
                                member: members[m].clone().expect("live"),
                                write: true,
                                member_sector: ms,
                                buf: &mut buf[..len],
                            });
                        }
                    }
                }
                let errors = self.range_io(&mut writes);
                let slots: Vec<usize> = errors.iter().map(|(k, _)| writes[*k].slot).collect();
                drop(writes);
                for ((_, e), slot) in errors.into_iter().zip(slots) {
                    self.member_failed(slot, &format!("copy rewrite: {e}"));
                }
                return Ok(found);
            })();
            self.locks.release(&keys);
            mismatched += r?;
            a += len_sectors;
        }
        Ok(mismatched)
    }

    /// Patrol read: every member in sync is read in full; a range that does not read is
    /// narrowed to 4 KiB blocks, each rebuilt from redundancy and rewritten; a block that still
    /// does not read back goes into the member's bad-block log (reads then avoid it).
    fn patrol_task(&self, walk: &mut Walk<'_>, stop: &AtomicBool) -> Result<TaskOutcome> {
        let end = walk.progress.end_sectors;
        let step = self.step_sectors();
        let mut scratch = StepScratch::default();
        let layout = self.raid10_layout();
        let mut cursor = walk.progress.start_sectors;
        self.publish(walk);
        while cursor < end {
            if self.cancelled(stop) {
                return Ok(TaskOutcome::Stopped);
            }
            let threads = self.burst_threads(TaskKind::Patrol);
            if threads > 1 {
                let run = |ms: u64, n: u64, sc: &mut StepScratch| -> Result<StepResult> {
                    self.patrol_step(ms, n, &mut sc.bufs, layout)
                        .map(StepResult::Done)
                };
                let at_frontier = |_: &mut Walk<'_>, _: u64| -> Result<()> { Ok(()) };
                let steps = BurstSteps::new(end, step, threads);
                let kind = TaskKind::Patrol;
                let (reached, _) = self.burst(
                    walk,
                    stop,
                    kind,
                    cursor,
                    threads,
                    &steps,
                    &run,
                    &at_frontier,
                )?;
                cursor = reached;
                continue;
            }
            let step_started = Instant::now();
            let n = step.min(end - cursor);
            let found = self.patrol_step(cursor, n, &mut scratch.bufs, layout)?;
            walk.progress.corrected_sectors += found.corrected_sectors;
            walk.progress.bad_block_sectors += found.bad_block_sectors;
            cursor += n;
            walk.advance(cursor);
            walk.progress.throttled = self.pace(
                TaskKind::Patrol,
                step_started.elapsed(),
                walk.started,
                (cursor - walk.progress.start_sectors) * SECTOR as u64,
                stop,
            );
            self.publish(walk);
        }
        Ok(TaskOutcome::Completed)
    }

    /// One patrol step: reads `[cursor, cursor + n)` of every readable member and repairs
    /// what a member cannot read.
    fn patrol_step(
        &self,
        cursor: u64,
        n: u64,
        bufs: &mut Vec<Vec<u8>>,
        layout: Option<&raidkit_layout::Geometry>,
    ) -> Result<StepCounts> {
        let len = n as usize * SECTOR;
        let (states, members) = self.snapshot();
        bufs.resize_with(self.geo.raid_disks, Vec::new);
        let mut ios: Vec<RangeIo<'_>> = Vec::new();
        for (slot, b) in bufs.iter_mut().enumerate() {
            if let (true, Some(m)) = (states[slot].usable(), &members[slot]) {
                b.resize(len, 0);
                ios.push(RangeIo {
                    slot,
                    member: m.clone(),
                    write: false,
                    member_sector: cursor,
                    buf: &mut b[..len],
                });
            }
        }
        let errors = self.range_io(&mut ios);
        let suspects: Vec<usize> = errors.iter().map(|(k, _)| ios[*k].slot).collect();
        drop(ios);
        let mut found = StepCounts::default();
        for slot in suspects {
            let (fixed, bad) = self.patrol_narrow(slot, cursor, n, layout)?;
            found.corrected_sectors += fixed;
            found.bad_block_sectors += bad;
        }
        Ok(found)
    }

    /// Finds the unreadable 4 KiB blocks of `[ms, ms + n)` on `slot` and repairs each.
    /// Returns (sectors rewritten and readable again, sectors sent to the bad-block log).
    pub(super) fn patrol_narrow(
        &self,
        slot: usize,
        ms: u64,
        n: u64,
        layout: Option<&raidkit_layout::Geometry>,
    ) -> Result<(u64, u64)> {
        const BLOCK: u64 = 8;
        let mut fixed = 0;
        let mut bad = 0;
        let mut probe = vec![0u8; BLOCK as usize * SECTOR];
        // Unreadable blocks next to each other go to the bad-block log as one range: one
        // log entry and one superblock update instead of one per block.
        let mut pending: Option<(usize, u64, u64)> = None;
        let mut b = ms;
        while b < ms + n {
            let len = BLOCK.min(ms + n - b);
            let (states, members) = self.snapshot();
            let Some(member) = members[slot].clone().filter(|_| states[slot].usable()) else {
                break; // the member failed meanwhile
            };
            let (index, known) = {
                let st = lock(&self.state);
                let index = st.slot_member[slot];
                let known = index
                    .and_then(|i| st.bad.get(i))
                    .is_some_and(|list| list.iter().any(|&(s, l)| s <= b && b + len <= s + l));
                (index, known)
            };
            if known {
                // Already in the bad-block log: served from redundancy, nothing to find.
                b += len;
                continue;
            }
            let mut io = [RangeIo {
                slot,
                member: member.clone(),
                write: false,
                member_sector: b,
                buf: &mut probe[..len as usize * SECTOR],
            }];
            if !self.range_io(&mut io).is_empty() {
                match self.rewrite_block(slot, member, b, len, layout)? {
                    true => fixed += len,
                    false => {
                        bad += len;
                        if let Some(i) = index {
                            match pending {
                                Some((pi, from, to)) if pi == i && to == b => {
                                    pending = Some((i, from, b + len));
                                }
                                _ => {
                                    if let Some((pi, from, to)) = pending.take() {
                                        self.record_bad_block(pi, from, to - from)?;
                                    }
                                    pending = Some((i, b, b + len));
                                }
                            }
                        }
                    }
                }
            }
            b += len;
        }
        if let Some((i, from, to)) = pending {
            self.record_bad_block(i, from, to - from)?;
        }
        Ok((fixed, bad))
    }

    /// Rebuilds `[ms, ms + n)` of `slot` from redundancy, writes it and reads it back.
    /// Returns whether the block reads again.
    fn rewrite_block(
        &self,
        slot: usize,
        member: Arc<Member>,
        ms: u64,
        n: u64,
        layout: Option<&raidkit_layout::Geometry>,
    ) -> Result<bool> {
        let len = n as usize * SECTOR;
        let mut buf = vec![0u8; len];
        let keys = match self.geo.scheme() {
            Scheme::Parity { .. } => self.keys_for_parity_range(ms, n),
            Scheme::Copies { .. } if self.geo.level() == RaidLevel::Raid0 => return Ok(false),
            Scheme::Copies { .. } => {
                self.keys_for_mirror_pieces(&self.mirror_pieces(layout, slot, ms, n)?)
            }
        };
        self.locks.acquire(&keys);
        let r = (|| -> Result<bool> {
            let rebuilt = match self.geo.scheme() {
                Scheme::Parity { .. } => {
                    let mut bufs = Vec::new();
                    match self.reconstruct_parity_range(slot, ms, n, &mut bufs) {
                        Ok(()) => {
                            buf.copy_from_slice(&bufs[slot][..len]);
                            true
                        }
                        Err(_) => false,
                    }
                }
                Scheme::Copies { .. } => {
                    let pieces = self.mirror_pieces(layout, slot, ms, n)?;
                    self.fill_from_other_copies(slot, &pieces, &mut buf).is_ok()
                }
            };
            if !rebuilt {
                return Ok(false);
            }
            let mut w = [RangeIo {
                slot,
                member: member.clone(),
                write: true,
                member_sector: ms,
                buf: &mut buf,
            }];
            if !self.range_io(&mut w).is_empty() {
                return Ok(false);
            }
            let mut check = vec![0u8; len];
            let mut r = [RangeIo {
                slot,
                member,
                write: false,
                member_sector: ms,
                buf: &mut check,
            }];
            Ok(self.range_io(&mut r).is_empty() && check == buf)
        })();
        self.locks.release(&keys);
        r
    }

    /// Asks the background service (when running) for a task.
    pub fn request_task(&self, kind: TaskKind) -> Result<()> {
        let mut bg = lock(&self.bg.state);
        if !bg.service {
            return Err(EngineError::Invalid(
                "no background service runs for this array; run the task directly".into(),
            ));
        }
        if !bg.requested.contains(&kind) {
            bg.requested.push_back(kind);
        }
        drop(bg);
        self.bg.wake();
        Ok(())
    }

    /// Stops the running task at its next step (its checkpoint is recorded).
    pub fn cancel_task(&self) {
        self.bg.cancel.store(true, Ordering::Relaxed);
        self.bg.wake();
    }

    /// Waits until no task runs.
    pub(super) fn wait_task_idle(&self) {
        let mut bg = lock(&self.bg.state);
        while bg.running.is_some() {
            bg = match self.bg.cv.wait_timeout(bg, Duration::from_millis(50)) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// Schedules a patrol read every `interval` while the background service runs.
    pub fn set_patrol_interval(&self, interval: Option<Duration>) {
        lock(&self.bg.state).patrol_interval = interval;
        self.bg.wake();
    }

    /// Starts the background service: a thread that runs pending work (rebuilds onto spares
    /// as soon as a member fails and a spare is there, resync after an unclean stop), tasks
    /// asked for with [`Array::request_task`], and scheduled patrols. It holds the array only
    /// weakly and ends when the array is stopped or dropped.
    pub fn start_background(self: &Arc<Self>) -> Result<()> {
        {
            let mut bg = lock(&self.bg.state);
            if bg.service {
                return Ok(());
            }
            bg.service = true;
            bg.shutdown = false;
        }
        let weak: Weak<Array> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("raidkit-bg".into())
            .spawn(move || service(weak))
            .map_err(|e| {
                EngineError::Invalid(format!("cannot start the background thread: {e}"))
            })?;
        Ok(())
    }

    /// Ends the background service (the running task stops at its next step).
    pub(super) fn stop_background(&self) {
        {
            let mut bg = lock(&self.bg.state);
            bg.shutdown = true;
        }
        self.cancel_task();
        self.wait_task_idle();
        let mut bg = lock(&self.bg.state);
        bg.service = false;
    }

    /// The next thing the service should do.
    fn next_service_task(&self) -> Option<TaskKind> {
        if !self.read_only {
            if let Some(k) = self.pending_tasks().first() {
                return Some(*k);
            }
        }
        let mut bg = lock(&self.bg.state);
        if let Some(k) = bg.requested.pop_front() {
            return Some(k);
        }
        if let Some(every) = bg.patrol_interval {
            let due = bg.last_patrol.is_none_or(|t| t.elapsed() >= every);
            if due {
                bg.last_patrol = Some(Instant::now());
                return Some(TaskKind::Patrol);
            }
        }
        None
    }
}

fn service(weak: Weak<Array>) {
    let never = AtomicBool::new(false);
    let mut failures: u32 = 0;
    loop {
        let Some(array) = weak.upgrade() else { return };
        if lock(&array.bg.state).shutdown {
            return;
        }
        let next = if failures > 0 {
            None
        } else {
            array.next_service_task()
        };
        if let Some(kind) = next {
            match array.run_task(kind, &mut |_| {}, &never) {
                Ok(r) if matches!(r.outcome, TaskOutcome::Failed { .. }) => failures = 1,
                Err(_) => failures = 1,
                _ => failures = 0,
            }
            continue;
        }
        // Idle: clear write-intent bits that have been idle long enough, then wait for a
        // wake-up (a failure, a spare, a request) or re-check periodically.
        array.intent_sweep(super::bitmap::CLEAR_AFTER, false);
        let bg = lock(&array.bg.state);
        let _unused = array.bg.cv.wait_timeout(bg, Duration::from_millis(500));
        drop(_unused);
        drop(array);
        // A failed task is retried only after something changes (the next wake-up or tick).
        failures = failures.saturating_sub(1);
    }
}

/// Why a locked parity scrub step gave up.
enum ScrubError {
    /// These slots could not read part of the range (repaired without the locks).
    Unreadable(Vec<usize>),
    Engine(EngineError),
}

impl From<EngineError> for ScrubError {
    fn from(e: EngineError) -> ScrubError {
        ScrubError::Engine(e)
    }
}
