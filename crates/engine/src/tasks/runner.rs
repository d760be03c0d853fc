//! The task loop, written once for every task (md's `md_do_sync`): stop requests, single
//! steps or bursts, pacing against foreground I/O, checkpoints and progress. What a step does
//! and how the cursor is recorded is the task's ([`Task`]).

use super::burst::BurstSteps;
use super::{
    Cadence, StepCounts, StepResult, StepScratch, Task, TaskKind, TaskOutcome, TaskProgress,
    TaskRates, TaskReport, CHECKPOINT_EVERY, CHECKPOINT_SHARE, FOREGROUND_WINDOW, HISTORY,
};
use crate::array::{lock, Array, Member};
use crate::error::{EngineError, Result};
use crate::events::ArrayEvent;
use crate::plan::{MemberState, SECTOR};
use crate::pool;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The moving part of a task: cursor, counters, timing, the observer.
pub(super) struct Walk<'o> {
    pub(super) progress: TaskProgress,
    pub(super) started: Instant,
    /// When the task last recorded its cursor ([`Cadence::Timed`]).
    checkpointed: Instant,
    /// How long recording it took last time.
    checkpoint_took: Duration,
    observe: &'o mut (dyn FnMut(&TaskProgress) + Send),
}

impl Walk<'_> {
    pub(super) fn advance(&mut self, to: u64) {
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

    /// Adds what a step found to the counters.
    pub(super) fn count(&mut self, found: StepCounts) {
        let p = &mut self.progress;
        p.mismatch_sectors += found.mismatch_sectors;
        p.corrected_sectors += found.corrected_sectors;
        p.bad_block_sectors += found.bad_block_sectors;
    }
}

impl Array {
    /// Runs one task to its end on the calling thread, calling `observe` after every step.
    /// `stop` (or [`Array::stop`]) ends it at the next step with its checkpoint recorded. Only
    /// one task runs at a time per array.
    pub fn run_task(
        &self,
        kind: TaskKind,
        observe: &mut (dyn FnMut(&TaskProgress) + Send),
        stop: &AtomicBool,
    ) -> Result<TaskReport> {
        if kind.writes() {
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
        let now = Instant::now();
        let mut walk = Walk {
            progress,
            started: now,
            checkpointed: now,
            checkpoint_took: Duration::ZERO,
            observe,
        };
        let outcome = match self.run_kind(kind, &mut walk, stop) {
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
            bg.history.push_back(report.clone());
            while bg.history.len() > HISTORY {
                bg.history.pop_front();
            }
        }
        self.bg.wake();
        lock(&self.state).events.push(ArrayEvent::TaskFinished {
            task: kind,
            completed: report.outcome == TaskOutcome::Completed,
            summary: summary(&report),
        });
        Ok(report)
    }

    /// The loop: runs a task of type `T` over the walk's range, a step at a time or in
    /// bursts, until it ends, fails or is stopped.
    pub(super) fn drive<'a, T: Task<'a>>(
        &'a self,
        walk: &mut Walk<'_>,
        stop: &AtomicBool,
    ) -> Result<TaskOutcome> {
        let kind = walk.progress.kind;
        let Some(mut task) = T::open(self, kind)? else {
            return Ok(TaskOutcome::Nothing);
        };
        walk.progress.slots = task.slots();
        let end = walk.progress.end_sectors;
        let step = self.step_sectors();
        let mut scratch = StepScratch::default();
        let mut cursor = walk.progress.start_sectors;
        let dead = || TaskOutcome::Failed {
            error: T::DEAD.into(),
        };
        self.publish(walk);
        while cursor < end {
            if self.cancelled(stop) {
                task.settle();
                task.checkpoint(cursor)?;
                return Ok(TaskOutcome::Stopped);
            }
            let step_started = Instant::now();
            let n = step.min(end - cursor);
            if task.skip(cursor, n)? {
                // Nothing was read or written: only a cursor kept in memory moves along (a
                // record in the superblocks waits for a step that did something).
                cursor += n;
                if T::CADENCE == Cadence::EveryStep {
                    task.checkpoint(cursor)?;
                }
                walk.advance(cursor);
                continue;
            }
            let threads = self.burst_threads(kind);
            if threads > 1 {
                task.settle();
                let steps = BurstSteps::new(end, step, threads);
                let (reached, died) = self.burst(&task, walk, stop, cursor, &steps)?;
                if died {
                    return Ok(dead());
                }
                cursor = reached;
                continue;
            }
            match task.step_alone(cursor, n, &mut scratch)? {
                StepResult::Done(found) => walk.count(found),
                StepResult::Dead => return Ok(dead()),
            }
            cursor += n;
            self.record(&task, walk, cursor)?;
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
        task.settle();
        task.finish()?;
        Ok(TaskOutcome::Completed)
    }

    /// After a step, with everything below `at` done: records the cursor as the task's
    /// cadence asks.
    pub(super) fn record<'a, T: Task<'a>>(
        &self,
        task: &T,
        walk: &mut Walk<'_>,
        at: u64,
    ) -> Result<()> {
        match T::CADENCE {
            Cadence::AtStop => {}
            Cadence::EveryStep => task.checkpoint(at)?,
            Cadence::Timed => {
                if at < walk.progress.end_sectors
                    && self.checkpoint_due(walk.checkpointed, walk.checkpoint_took)
                {
                    let t = Instant::now();
                    task.checkpoint(at)?;
                    walk.checkpointed = Instant::now();
                    walk.checkpoint_took = t.elapsed();
                }
            }
        }
        Ok(())
    }

    /// Whether a task that last recorded its cursor at `last`, which took `took`, should
    /// record it again. By default at most every [`CHECKPOINT_EVERY`], and no more often than
    /// keeps recording under 1/[`CHECKPOINT_SHARE`] of the task's time: on spinning members
    /// a record flushes the drive's write cache (a fifth of a second with 32 MiB in it), and
    /// the task's reads wait meanwhile, which cost a rebuild a tenth of its rate every 2 s.
    /// md records its cursor far less often (every sixteenth of the array or 5 minutes).
    fn checkpoint_due(&self, last: Instant, took: Duration) -> bool {
        let every = lock(&self.bg.state)
            .checkpoint_every
            .unwrap_or_else(|| CHECKPOINT_EVERY.max(took * CHECKPOINT_SHARE));
        last.elapsed() >= every
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
        if self.yields(rates, kind) {
            sleep = step * (100 - share) / share;
            // Never so long that the walk falls below its floor.
            if let Some(min) = rates.min_bytes_per_s.filter(|&m| m > 0) {
                let allowed = Duration::from_secs_f64(covered_bytes as f64 / min as f64);
                sleep = sleep.min(allowed.saturating_sub(walk_started.elapsed()));
            }
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

    /// Whether the running task should stop (its caller's `stop`, or [`Array::cancel_task`]).
    pub(super) fn cancelled(&self, stop: &AtomicBool) -> bool {
        stop.load(Ordering::Relaxed) || self.bg.cancel.load(Ordering::Relaxed)
    }

    /// Shows the walk's progress in [`Array::status`] and to the observer.
    pub(super) fn publish(&self, walk: &mut Walk<'_>) {
        lock(&self.bg.state).running = Some(walk.progress.clone());
        (walk.observe)(&walk.progress);
    }

    /// Whether a task of `kind` yields to foreground I/O now under `rates`: it has less than
    /// the full rate and requests arrived lately.
    pub(super) fn yields(&self, rates: TaskRates, kind: TaskKind) -> bool {
        rates.share(kind) < 100 && self.bg.foreground_within(FOREGROUND_WINDOW)
    }

    /// How many threads steps of task `kind` may run on side by side right now, each thread
    /// doing its own member I/O (1: the plain loop). More than one only while the task runs
    /// at full rate and, unless [`crate::EngineConfig::task_threads`] says otherwise, every
    /// member involved does memory copies (tmpfs, page cache): there, handing a step's reads
    /// to the member workers costs a wake-up per member and step (tens of microseconds on a
    /// loaded machine, a third of a 1 MiB step's time) and a lone task thread keeps one CPU
    /// busy. Members that wait (disks) keep the plain loop, whose parallelism is across
    /// members.
    pub(super) fn burst_threads(&self, kind: TaskKind) -> usize {
        let threads = match self.config.task_threads {
            Some(k) => k,
            None => pool::cpus(),
        };
        if threads < 2 {
            return 1;
        }
        let rates = self.task_rates();
        if rates.max_bytes_per_s.is_some_and(|m| m > 0) || self.yields(rates, kind) {
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
            let slots = st
                .roster
                .slot_state
                .ids()
                .filter(|&s| {
                    st.roster.slot_state[s].usable()
                        || st.roster.slot_state[s] == MemberState::Rebuilding
                })
                .filter_map(|s| st.roster.slot_member[s]);
            slots
                .chain(st.roster.replacement.iter().flatten().copied())
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
}

/// The event log's line for a finished task.
fn summary(report: &TaskReport) -> String {
    let kind = report.progress.kind;
    let p = &report.progress;
    match &report.outcome {
        TaskOutcome::Completed => format!(
            "{kind} completed in {:.1} s ({:.0} MB/s){}",
            p.elapsed_s,
            p.bytes_per_s / 1e6,
            match kind {
                TaskKind::Check | TaskKind::Repair | TaskKind::Resync =>
                    format!(", {} mismatched sectors", p.mismatch_sectors),
                TaskKind::Patrol => format!(
                    ", {} sectors rewritten, {} to the bad-block log",
                    p.corrected_sectors, p.bad_block_sectors
                ),
                _ => String::new(),
            }
        ),
        TaskOutcome::Stopped => format!("{kind} stopped at {:.1} %", p.percent),
        TaskOutcome::Nothing => format!("{kind}: nothing to do"),
        TaskOutcome::Failed { error } => format!("{kind} failed: {error}"),
    }
}
