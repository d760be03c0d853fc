//! The driver's concurrency pieces: one worker thread per member with a queue, completion
//! batches, per-stripe locks and an in-flight limit.
//!
//! Invariants: a [`Batch`] is only waited on by the thread that filled it, and that thread does
//! not touch the buffers of its jobs until `wait` returns (this is what makes the raw pointers
//! in [`Job`] sound); stripe locks are taken as a set, all at once, so two requests that need
//! overlapping sets can never deadlock; no lock here is held across member I/O except the
//! stripe locks, which only serialise requests on the same stripes.

use raidkit_disk::{Disk, DiskError};
use std::collections::HashSet;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves only counters behind; continuing with
    // them is sound.
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    Read,
    Write,
    Flush,
}

/// Completion of a set of jobs.
pub struct Batch {
    state: Mutex<(usize, Vec<(usize, DiskError)>)>,
    cv: Condvar,
}

impl Batch {
    pub fn new() -> Arc<Batch> {
        Arc::new(Batch {
            state: Mutex::new((0, Vec::new())),
            cv: Condvar::new(),
        })
    }

    pub fn add(&self, n: usize) {
        lock(&self.state).0 += n;
    }

    fn complete(&self, tag: usize, result: Result<(), DiskError>) {
        let mut g = lock(&self.state);
        if let Err(e) = result {
            g.1.push((tag, e));
        }
        g.0 -= 1;
        if g.0 == 0 {
            self.cv.notify_all();
        }
    }

    /// Waits for every job added so far; returns the failed ones as (tag, error).
    pub fn wait(&self) -> Vec<(usize, DiskError)> {
        let mut g = lock(&self.state);
        while g.0 > 0 {
            g = match self.cv.wait(g) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        std::mem::take(&mut g.1)
    }
}

/// One member I/O for a worker.
pub struct Job {
    pub kind: JobKind,
    pub offset_bytes: u64,
    pub ptr: *mut u8,
    pub len: usize,
    pub batch: Arc<Batch>,
    pub tag: usize,
}

// SAFETY: the pointer refers to a buffer that the submitting thread keeps alive and untouched
// until the batch completes (module invariant).
unsafe impl Send for Job {}

/// Performs one job on `disk` and completes it (on a worker, or inline on the submitting
/// thread, which saves a thread handoff).
pub fn execute(disk: &dyn Disk, job: Job) {
    let result = match job.kind {
        JobKind::Read => {
            // SAFETY: see Job; the buffer is exclusively ours until completion.
            let buf = unsafe { std::slice::from_raw_parts_mut(job.ptr, job.len) };
            disk.read_at(buf, job.offset_bytes)
        }
        JobKind::Write => {
            // SAFETY: see Job; the buffer is only read.
            let buf = unsafe { std::slice::from_raw_parts(job.ptr as *const u8, job.len) };
            disk.write_at(buf, job.offset_bytes)
        }
        JobKind::Flush => disk.flush(),
    };
    job.batch.complete(job.tag, result);
}

pub struct Worker {
    tx: Option<mpsc::Sender<Job>>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    pub fn spawn(name: String, disk: Arc<dyn Disk>) -> std::io::Result<Worker> {
        let (tx, rx) = mpsc::channel::<Job>();
        let handle = std::thread::Builder::new().name(name).spawn(move || {
            for job in rx {
                execute(disk.as_ref(), job);
            }
        })?;
        Ok(Worker {
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    /// Queues a job; if the worker is gone the job completes at once with an error.
    pub fn submit(&self, job: Job, member_name: &str) {
        let Some(tx) = &self.tx else {
            job.batch.complete(job.tag, Err(gone(member_name)));
            return;
        };
        if let Err(mpsc::SendError(job)) = tx.send(job) {
            job.batch.complete(job.tag, Err(gone(member_name)));
        }
    }
}

fn gone(member: &str) -> DiskError {
    DiskError::io(
        member,
        "submit",
        0,
        std::io::Error::other("member worker has stopped"),
    )
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Per-stripe locks, taken as a set.
#[derive(Default)]
pub struct StripeLocks {
    held: Mutex<HashSet<u64>>,
    cv: Condvar,
}

impl StripeLocks {
    pub fn acquire(&self, keys: &[u64]) {
        let mut g = lock(&self.held);
        while keys.iter().any(|k| g.contains(k)) {
            g = match self.cv.wait(g) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        g.extend(keys.iter().copied());
    }

    pub fn release(&self, keys: &[u64]) {
        let mut g = lock(&self.held);
        for k in keys {
            g.remove(k);
        }
        drop(g);
        self.cv.notify_all();
    }
}

/// A counting semaphore bounding requests in flight (and so the scratch memory they hold).
pub struct Semaphore {
    free: Mutex<usize>,
    cv: Condvar,
}

impl Semaphore {
    pub fn new(n: usize) -> Self {
        Semaphore {
            free: Mutex::new(n.max(1)),
            cv: Condvar::new(),
        }
    }
    pub fn acquire(&self) {
        let mut g = lock(&self.free);
        while *g == 0 {
            g = match self.cv.wait(g) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        *g -= 1;
    }
    pub fn release(&self) {
        *lock(&self.free) += 1;
        self.cv.notify_one();
    }
}
