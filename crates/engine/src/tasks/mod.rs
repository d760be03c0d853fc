//! Background work on an assembled array: rebuild (md's recovery onto a spare), replace (copy
//! a still-working member onto a new one while it stays in service), resync after an unclean
//! stop, check and repair (md's `mismatch_cnt`), and patrol read.
//!
//! Each task is a type implementing [`Task`]: where its cursor starts and what it means
//! (member sectors for rebuild, replace, patrol and the parity levels' check/repair/resync;
//! array sectors for RAID 10 resync/check, as md counts them), one step over `[s, s + n)`, how
//! the cursor is recorded, and what happens at the end. One loop runs them all
//! (`runner.rs`, md's `md_do_sync`): stop requests, single steps or bursts on several threads,
//! pacing against foreground I/O, checkpoints and progress. A step takes the same stripe locks
//! foreground requests take for the sectors it covers, so a step and a request on the same
//! stripes never overlap: the step reads a consistent stripe and writes what it computed
//! before any request sees it. Foreground writes keep a member being rebuilt current on their
//! own (it is `Rebuilding`: written, never read), so the part behind the cursor never goes
//! stale.
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
//! Bursts (`burst.rs`): at full speed over members whose I/O is memory copies, a task runs its
//! steps on several threads at once, each doing its own steps' member I/O (handing it to the
//! member workers costs a wake-up per member and step, a third of a step there). Steps are
//! claimed in order, at most one per thread ahead of the frontier below which every step is
//! done; only the frontier is checkpointed or reported, so a crash or stop never skips an
//! unfinished step. A burst ends within a few steps when foreground I/O arrives, a member
//! starts to wait, or the task is stopped.
//!
//! The library never prints: progress is a [`TaskProgress`] value handed to an observer after
//! every step and kept for [`Array::status`].
//!
//! Files: `runner.rs` the loop, `burst.rs` its threads, `service.rs` what runs when (pending
//! work, requests, the service thread), `io.rs` the member I/O steps share, and one file per
//! task: `rebuild.rs`, `replace.rs`, `scrub.rs` (check, repair, resync), `patrol.rs`.

mod burst;
mod io;
mod patrol;
mod rebuild;
mod replace;
mod runner;
mod scrub;
mod service;

use crate::array::{lock, Array, MemberId, State};
use crate::error::{EngineError, Result};
use patrol::Patrol;
use rebuild::Rebuild;
use replace::Replace;
use scrub::{Resync, Scrub};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The kinds of background work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

    /// Whether the task writes to the array (check and patrol only read, patrol's repairs of
    /// unreadable sectors aside).
    pub fn writes(self) -> bool {
        !matches!(self, TaskKind::Check | TaskKind::Patrol)
    }

    /// Whether the task takes a start ([`Array::set_task_start`]): its cursor lives in memory
    /// only (md's `sync_min`), where rebuild, replace and resync keep theirs in the
    /// superblocks.
    fn takes_start(self) -> bool {
        matches!(self, TaskKind::Check | TaskKind::Repair | TaskKind::Patrol)
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
    /// An online reshape's share (the PERC6's reconstruction rate), paced by the server
    /// that drives it.
    pub reshape_percent: u8,
    /// A hard cap in bytes per second of range covered, idle or not (md's speed_limit_max).
    pub max_bytes_per_s: Option<u64>,
    /// A floor in bytes per second of range covered that yielding to clients never goes
    /// below (md's speed_limit_min): a busy array still gets its rebuild done.
    pub min_bytes_per_s: Option<u64>,
}

impl TaskRates {
    /// Every task at full speed, busy or not, with no byte-rate cap.
    pub fn full() -> TaskRates {
        TaskRates {
            rebuild_percent: 100,
            resync_percent: 100,
            check_percent: 100,
            patrol_percent: 100,
            reshape_percent: 100,
            max_bytes_per_s: None,
            min_bytes_per_s: None,
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
            reshape_percent: 30,
            max_bytes_per_s: None,
            min_bytes_per_s: None,
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

/// One kind of background work, as the loop in `runner.rs` runs it (md's `sync_request` to
/// that loop's `md_do_sync`). A task is made for one run (after the array agreed to run it)
/// and dropped at its end, whatever the outcome.
///
/// A trait rather than one enum matched in every phase: the loop is generic over it
/// (monomorphised, so a step costs no dispatch, as when each task had its own loop), and each
/// task's state lives in its own type and file; another task (reshape) is one more type, one
/// more [`TaskKind`] and an arm in each of the two matches below.
trait Task<'a>: Sync + Sized {
    /// How the cursor is recorded.
    const CADENCE: Cadence;

    /// The failure when a step finds every member the task writes to gone
    /// ([`StepResult::Dead`]).
    const DEAD: &'static str = "every member the task writes to failed";

    /// The range a run of `kind` would walk now, in the task's unit: where its cursor starts
    /// (for check, repair and patrol, `resume`: where the last one stopped, or the start set)
    /// and where it ends. Asked before the run (for its progress, and by
    /// [`Array::set_task_start`]).
    fn range(array: &Array, kind: TaskKind, resume: Option<u64>) -> Result<TaskRange>;

    /// Sets up a run of `kind`, once the array agreed to run it; `None` when there is nothing
    /// to do, an error when the task cannot run now.
    fn open(array: &'a Array, kind: TaskKind) -> Result<Option<Self>>;

    /// Slots the task writes whole (shown in its progress).
    fn slots(&self) -> Vec<usize> {
        Vec::new()
    }

    /// Whether `[s, s + n)` needs nothing (the write-intent bitmap marks none of it): the
    /// loop moves on without reading, pacing or publishing.
    fn skip(&self, _s: u64, _n: u64) -> Result<bool> {
        Ok(false)
    }

    /// One step over `[s, s + n)`. Several burst threads run steps at once, each with its own
    /// scratch.
    fn step(&self, s: u64, n: u64, scratch: &mut StepScratch) -> Result<StepResult>;

    /// A step while the task runs alone on the loop's thread: [`Task::step`], unless the task
    /// overlaps steps of its own (a rebuild reads the next step while writing this one).
    fn step_alone(&mut self, s: u64, n: u64, scratch: &mut StepScratch) -> Result<StepResult> {
        self.step(s, n, scratch)
    }

    /// Lets go of whatever [`Task::step_alone`] holds from one step to the next (a rebuild's
    /// read-ahead and its stripe locks): called before a burst, a stop and the end.
    fn settle(&mut self) {}

    /// Records the cursor: everything below `at` is done (see [`Task::CADENCE`] for when).
    fn checkpoint(&self, at: u64) -> Result<()>;

    /// The whole range is done: the task's end (members in sync, the resync cleared).
    fn finish(&mut self) -> Result<()>;
}

/// When a task records its cursor: always at a stop, and besides that:
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cadence {
    /// Never (check, repair, patrol: where a stopped one got to is kept in memory, as md's
    /// `sync_min`).
    AtStop,
    /// After every step, in memory (resync: md's `resync_offset`, written at a clean stop).
    EveryStep,
    /// Every checkpoint interval, in the superblocks (rebuild and replace: md's
    /// `recovery_offset`, each record a superblock write and a flush).
    Timed,
}

/// What one step did.
enum StepResult {
    /// Done, with what it found.
    Done(StepCounts),
    /// Every member the task writes to has failed.
    Dead,
}

impl StepResult {
    fn done() -> StepResult {
        StepResult::Done(StepCounts::default())
    }
}

/// What a step found, added to the task's progress.
#[derive(Clone, Copy, Default)]
struct StepCounts {
    mismatch_sectors: u64,
    corrected_sectors: u64,
    bad_block_sectors: u64,
}

/// A step's buffers, kept from step to step (one set per thread).
#[derive(Default)]
struct StepScratch {
    bufs: Vec<Vec<u8>>,
    buf: Vec<u8>,
    parity: (Vec<u8>, Vec<u8>),
}

/// A task's range in its unit: (unit, start, end), the cursor starting at `start`.
type TaskRange = (&'static str, u64, u64);

/// Background state shared by the array, its task runner and an optional service thread.
pub(crate) struct Bg {
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
    rebuild_pass: Option<Vec<MemberId>>,
    /// Where the next check, repair or patrol starts: where the last one was stopped, or what
    /// [`Array::set_task_start`] set (md's `sync_min`, which md also moves to where an
    /// interrupted check stopped). Kept in memory only: md's superblock has no field for it.
    resume_from: HashMap<TaskKind, u64>,
}

impl Bg {
    pub(crate) fn new() -> Bg {
        Bg {
            state: Mutex::new(BgState::default()),
            cv: Condvar::new(),
            cancel: AtomicBool::new(false),
            origin: Instant::now(),
            last_foreground_ns: AtomicU64::new(0),
        }
    }

    /// Called for every foreground request.
    pub(crate) fn note_foreground(&self) {
        let ns = self.origin.elapsed().as_nanos() as u64;
        self.last_foreground_ns.store(ns.max(1), Ordering::Relaxed);
    }

    fn foreground_within(&self, window: Duration) -> bool {
        let last = self.last_foreground_ns.load(Ordering::Relaxed);
        let now = self.origin.elapsed().as_nanos() as u64;
        last != 0 && now.saturating_sub(last) <= window.as_nanos() as u64
    }

    pub(crate) fn wake(&self) {
        self.cv.notify_all();
    }

    pub(crate) fn running(&self) -> Option<TaskProgress> {
        lock(&self.state).running.clone()
    }

    pub(crate) fn history(&self) -> Vec<TaskReport> {
        lock(&self.state).history.iter().cloned().collect()
    }
}

const HISTORY: usize = 16;
/// How long after a foreground request a task still yields.
const FOREGROUND_WINDOW: Duration = Duration::from_millis(250);
/// How often a rebuild records its cursor in the superblocks, by default.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(2);
/// A task spends at most about 1/CHECKPOINT_SHARE of its time recording its cursor.
const CHECKPOINT_SHARE: u32 = 50;

impl Array {
    /// Sets the task rates.
    pub fn set_task_rates(&self, rates: TaskRates) {
        lock(&self.bg.state).rates = rates;
    }

    pub fn task_rates(&self) -> TaskRates {
        lock(&self.bg.state).rates
    }

    /// Where the next check, repair or patrol starts (md's `sync_min`), in the task's unit
    /// (member sectors; array sectors for a RAID 10 check or repair), rounded down to 4 KiB.
    /// A stopped check, repair or patrol sets this itself, so the next run on this assembly
    /// goes on from there; a run that completes clears it. Rebuild, replace and resync
    /// resume from the superblocks instead and take no start.
    pub fn set_task_start(&self, kind: TaskKind, sectors: u64) -> Result<()> {
        if !kind.takes_start() {
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
        self.set_resume_from(kind, Some(sectors / 8 * 8));
        Ok(())
    }

    /// Where the next check, repair or patrol of `kind` starts (`None`: at 0).
    fn set_resume_from(&self, kind: TaskKind, at: Option<u64>) {
        let mut bg = lock(&self.bg.state);
        match at {
            Some(at) => bg.resume_from.insert(kind, at),
            None => bg.resume_from.remove(&kind),
        };
    }

    /// How often a rebuild records its cursor (md's recovery_offset) in the superblocks; each
    /// record costs a superblock write and a flush on every member. Default 2 s.
    pub fn set_checkpoint_interval(&self, every: Duration) {
        lock(&self.bg.state).checkpoint_every = Some(every);
    }

    /// The range of task `kind` as it would run now, each task saying where its cursor
    /// starts.
    fn task_range(&self, kind: TaskKind) -> Result<TaskRange> {
        let resume = lock(&self.bg.state).resume_from.get(&kind).copied();
        match kind {
            TaskKind::Rebuild => Rebuild::range(self, kind, resume),
            TaskKind::Replace => Replace::range(self, kind, resume),
            TaskKind::Resync => Resync::range(self, kind, resume),
            TaskKind::Check | TaskKind::Repair => Scrub::range(self, kind, resume),
            TaskKind::Patrol => Patrol::range(self, kind, resume),
        }
    }

    /// The range of a task that writes members whole (rebuild, replace): member sectors from
    /// the lowest `recovery_offset` of `written` (member indices), md's resume point for
    /// both, to the end.
    fn recovery_range(&self, st: &State, written: impl Iterator<Item = MemberId>) -> TaskRange {
        let end = self.geo.member_data_sectors;
        let start = written
            .map(|i| st.roster.sbs[i].recovery_offset().unwrap_or(0))
            .min()
            .unwrap_or(end);
        ("member sectors", start.min(end), end)
    }

    /// Runs task `kind` to its end on the calling thread, each kind as its type.
    fn run_kind(
        &self,
        kind: TaskKind,
        walk: &mut runner::Walk<'_>,
        stop: &AtomicBool,
    ) -> Result<TaskOutcome> {
        match kind {
            TaskKind::Rebuild => self.drive::<Rebuild>(walk, stop),
            TaskKind::Replace => self.drive::<Replace>(walk, stop),
            TaskKind::Resync => self.drive::<Resync>(walk, stop),
            TaskKind::Check | TaskKind::Repair => self.drive::<Scrub>(walk, stop),
            TaskKind::Patrol => self.drive::<Patrol>(walk, stop),
        }
    }
}
