//! Bursts: a task's steps on several threads at once, each doing its own steps' member I/O.
//! Steps are claimed in order, at most a window ahead of the frontier below which every step
//! is done; only the frontier is recorded or reported.

use super::io::IoHere;
use super::runner::Walk;
use super::{StepCounts, StepResult, StepScratch, Task, TaskKind};
use crate::array::{lock, Array};
use crate::error::{EngineError, Result};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

/// What the threads of a burst share: the task's range and step, the next step to claim, and
/// which claimed steps are done, so the cursor only ever moves over finished steps.
struct Burst<'s> {
    kind: TaskKind,
    steps: &'s BurstSteps,
    /// The caller's stop request.
    stop: &'s AtomicBool,
    quit: AtomicBool,
    done: Mutex<Frontier>,
    /// Signalled when the frontier moves or the burst quits.
    moved: Condvar,
    /// A step found every target failed.
    dead: AtomicBool,
    error: Mutex<Option<EngineError>>,
}

impl Burst<'_> {
    fn quit(&self) {
        self.quit.store(true, Ordering::Relaxed);
        let _g = lock(&self.done);
        self.moved.notify_all();
    }
}

/// Ends a burst when the thread holding it leaves, however it leaves.
struct QuitOnExit<'a>(&'a Burst<'a>);

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
    ahead: BTreeMap<u64, u64>,
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

/// The range, step and threads of a burst.
pub(super) struct BurstSteps {
    end: u64,
    step: u64,
    threads: usize,
    /// How far beyond the frontier steps may be claimed.
    window_sectors: u64,
}

impl BurstSteps {
    pub(super) fn new(end: u64, step: u64, threads: usize) -> BurstSteps {
        BurstSteps {
            end,
            step,
            threads,
            // One step in flight per thread, and one more done ahead of the frontier.
            window_sectors: step * (threads as u64 + 1),
        }
    }
}

impl Array {
    /// Runs steps of `task` from `cursor` on the burst's threads until the range ends, the
    /// task is stopped, or [`Self::burst_threads`] says 1. The calling thread takes part.
    /// What a step found is added to `walk`'s counters, and after every step (under a lock,
    /// so one at a time) the frontier (every sector below it is done) is recorded as the
    /// task's cadence asks and published; an error from a step or a record ends the burst.
    /// Returns the frontier and whether a step reported [`StepResult::Dead`].
    pub(super) fn burst<'a, T: Task<'a>>(
        &self,
        task: &T,
        walk: &mut Walk<'_>,
        stop: &AtomicBool,
        cursor: u64,
        steps: &BurstSteps,
    ) -> Result<(u64, bool)> {
        let b = Burst {
            kind: walk.progress.kind,
            steps,
            stop,
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
        walk.progress.threads = walk.progress.threads.max(steps.threads);
        // Whichever thread finishes a step publishes the progress, so the observer still
        // sees every step.
        let shared = Mutex::new(walk);
        let after_step = |found: StepCounts| -> Result<()> {
            let mut walk = lock(&shared);
            let at = lock(&b.done).at;
            walk.count(found);
            self.record(task, &mut walk, at)?;
            walk.advance(at);
            self.publish(&mut walk);
            Ok(())
        };
        let thread = || self.burst_steps(&b, task, &after_step);
        std::thread::scope(|scope| {
            for _ in 1..steps.threads {
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

    /// One thread of a burst: claims and runs steps until told to quit.
    fn burst_steps<'a, T: Task<'a>>(
        &self,
        b: &Burst<'_>,
        task: &T,
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
        while let Some(ms) = self.claim_step(b) {
            let n = b.steps.step.min(b.steps.end - ms);
            let result = match task.skip(ms, n) {
                Ok(true) => Ok(StepResult::done()),
                Ok(false) => task.step(ms, n, &mut scratch),
                Err(e) => Err(e),
            };
            let found = match result {
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
    fn claim_step(&self, b: &Burst<'_>) -> Option<u64> {
        let mut f = lock(&b.done);
        loop {
            if b.quit.load(Ordering::Relaxed)
                || self.cancelled(b.stop)
                || f.next >= b.steps.end
                || self.burst_threads(b.kind) < 2
            {
                return None;
            }
            if f.next < f.at + b.steps.window_sectors {
                let ms = f.next;
                f.next += b.steps.step;
                return Some(ms);
            }
            f = b.moved.wait(f).unwrap_or_else(|p| p.into_inner());
        }
    }
}
