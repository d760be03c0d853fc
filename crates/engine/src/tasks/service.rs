//! What runs when: the work an array needs (pending tasks), tasks asked for, scheduled
//! patrols, and the service thread that runs them in the background.

use super::{TaskKind, TaskOutcome, TaskProgress, TaskReport};
use crate::array::{lock, Array};
use crate::error::{EngineError, Result};
use crate::geometry::Scheme;
use crate::plan::MemberState;
use raidkit_layout::Level as RaidLevel;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

impl Array {
    /// Work the array needs, most urgent first: rebuilds of members being recovered,
    /// replacements, a resync after an unclean stop (when it can run). A read-only array
    /// reports what it needs but cannot run it.
    pub fn pending_tasks(&self) -> Vec<TaskKind> {
        let st = lock(&self.state);
        let mut out = Vec::new();
        if st.roster.failed.is_none() {
            if st.roster.slot_state.contains(&MemberState::Rebuilding) {
                out.push(TaskKind::Rebuild);
            }
            if st.roster.replacement.iter().any(|r| r.is_some()) {
                out.push(TaskKind::Replace);
            }
            if st.resync_from.is_some() && self.resync_can_run(st.roster.slot_state.as_slice()) {
                out.push(TaskKind::Resync);
            }
        }
        out
    }

    /// Resync of a parity level needs every member readable; a mirror needs two copies.
    fn resync_can_run(&self, states: &[MemberState]) -> bool {
        match self.geo.scheme() {
            Scheme::Parity { .. } => crate::plan::step::parity_comparable(states),
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
    fn wait_task_idle(&self) {
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
    pub(crate) fn stop_background(&self) {
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
        array.intent_sweep(crate::array::bitmap::CLEAR_AFTER, false);
        let bg = lock(&array.bg.state);
        let _unused = array.bg.cv.wait_timeout(bg, Duration::from_millis(500));
        drop(_unused);
        drop(array);
        // A failed task is retried only after something changes (the next wake-up or tick).
        failures = failures.saturating_sub(1);
    }
}
