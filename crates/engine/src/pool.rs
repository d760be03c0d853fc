//! The driver's concurrency pieces: one worker thread per member with a queue, completion
//! batches, per-stripe locks, an in-flight limit, and the choice between handing member I/O
//! to the workers and doing it on the calling thread.
//!
//! Invariants: a [`Batch`] is only waited on by the thread that created and filled it, and that
//! thread does not touch the buffers of its jobs until `wait` returns (this is what makes the
//! raw pointers in [`Job`] sound); every job submitted completes its batch exactly once (run by
//! the worker, taken back by the submitter with [`Worker::steal`], or failed when the worker
//! is gone); stripe locks are taken as a set, all at once, so two requests that need
//! overlapping sets can never deadlock; no lock here is held across member I/O except the
//! stripe locks, which only serialise requests on the same stripes.
//!
//! Why the caller often does the I/O itself: on files in the page cache or tmpfs, a member
//! I/O is a memory copy that keeps a CPU busy for its whole duration. Handing it to a worker
//! costs two thread wake-ups (tens of microseconds on a loaded machine) and gains nothing
//! when every CPU already runs a request. So each member keeps a running estimate of whether
//! its I/O waits ([`Worker::cpu_bound`]: did the thread sleep during sampled jobs), and
//! [`inline_all`] keeps a phase on the calling thread when the member I/O does not wait and
//! either the phase is small or there are at least as many requests running as CPUs. Devices
//! that wait (disks, O_DIRECT) always get their I/O spread over the workers, which is where
//! the parallelism across members comes from. Two callers writing one member file at once
//! meet on the file's inode lock in the kernel, which spins while the holder runs; measured
//! on 2 CPUs that costs less than any hand-over in user space (a per-member combining queue
//! was tried and lost), and when it does make writers sleep, the samples say "waits" and the
//! phases go back to the workers, which write each member one job at a time.
//!
//! Wake-ups are only paid when someone sleeps: a worker is signalled only when it waits for
//! work, a batch's waiter is unparked only by the last completion, and the lock and semaphore
//! wake waiters only when there are any.

use raidkit_disk::{Disk, DiskError};
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{JoinHandle, Thread};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves only counters and queues behind;
    // continuing with them is sound.
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    match cv.wait(g) {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    Read,
    Write,
    /// A write durable when it completes ([`raidkit_disk::Disk::write_fua`]).
    WriteFua,
    Flush,
}

/// Completion of a set of jobs, waited on by the thread that created it.
pub struct Batch {
    pending: AtomicUsize,
    errors: Mutex<Vec<(usize, DiskError)>>,
    waiter: Thread,
}

impl Batch {
    pub fn new() -> Arc<Batch> {
        Arc::new(Batch {
            pending: AtomicUsize::new(0),
            errors: Mutex::new(Vec::new()),
            waiter: std::thread::current(),
        })
    }

    pub fn add(&self, n: usize) {
        self.pending.fetch_add(n, Ordering::AcqRel);
    }

    fn complete(&self, tag: usize, result: Result<(), DiskError>) {
        if let Err(e) = result {
            lock(&self.errors).push((tag, e));
        }
        // The waiter may return as soon as this reaches zero; `self` stays alive through
        // the job's Arc until this function returns.
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.waiter.unpark();
        }
    }

    /// Waits for every job added so far; returns the failed ones as (tag, error).
    pub fn wait(&self) -> Vec<(usize, DiskError)> {
        // park() may return spuriously or for an older batch's unpark; the count decides.
        while self.pending.load(Ordering::Acquire) > 0 {
            std::thread::park();
        }
        std::mem::take(&mut *lock(&self.errors))
    }
}

/// One member I/O for a worker.
pub struct Job {
    pub kind: JobKind,
    pub offset_bytes: u64,
    pub ptr: *mut u8,
    /// Bytes on the member (all the pieces' when `pieces` is not empty).
    pub len: usize,
    pub batch: Arc<Batch>,
    pub tag: usize,
    /// Empty for one buffer (`ptr`, `len`); else the buffers, in member order, of a command
    /// [`merge_adjacent`] made of pieces that follow each other on the member but not in
    /// memory (sent as one vectored command). The first starts at `ptr`.
    pub pieces: Vec<(*mut u8, usize)>,
}

// SAFETY: the pointer refers to a buffer that the submitting thread keeps alive and untouched
// until the batch completes (module invariant).
unsafe impl Send for Job {}

/// Performs one job on `disk` and completes it.
pub fn execute(disk: &dyn Disk, job: Job) {
    let result = match job.kind {
        JobKind::Read if !job.pieces.is_empty() => {
            let mut bufs: Vec<std::io::IoSliceMut<'_>> = job
                .pieces
                .iter()
                // SAFETY: see Job; each piece is a distinct part of a buffer that is
                // exclusively ours until completion.
                .map(|&(p, l)| {
                    std::io::IoSliceMut::new(unsafe { std::slice::from_raw_parts_mut(p, l) })
                })
                .collect();
            disk.read_vectored_at(&mut bufs, job.offset_bytes)
        }
        JobKind::Write if !job.pieces.is_empty() => {
            let mut bufs: Vec<std::io::IoSlice<'_>> = job
                .pieces
                .iter()
                // SAFETY: see Job; the buffers are only read.
                .map(|&(p, l)| {
                    std::io::IoSlice::new(unsafe { std::slice::from_raw_parts(p as *const u8, l) })
                })
                .collect();
            disk.write_vectored_at(&mut bufs, job.offset_bytes)
        }
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
        JobKind::WriteFua => {
            // SAFETY: see Job; the buffer is only read.
            let buf = unsafe { std::slice::from_raw_parts(job.ptr as *const u8, job.len) };
            disk.write_fua(buf, job.offset_bytes)
        }
        JobKind::Flush => disk.flush(),
    };
    job.batch.complete(job.tag, result);
}

/// The queued job a spinning member runs next: of the jobs before the first flush (a flush
/// is a barrier: what was queued before it runs before it, what after, after), the one that
/// starts at or after `head` with the lowest offset, else the lowest offset of all (one sweep
/// across the disk, then back: C-SCAN), as the kernel's scheduler would order them beneath a
/// disk. A job never passes an earlier one whose range it overlaps (the later write must
/// land last): then the earliest of those runs first. With one worker per member, the disk
/// sees one request at a time, so this is where several streams' requests are put in the
/// order that spares the head; without it, two streams interleaved cost a seek and a
/// rotation per request.
fn elevator_pick(jobs: &VecDeque<Job>, head: u64) -> Option<usize> {
    let barrier = jobs
        .iter()
        .position(|j| j.kind == JobKind::Flush)
        .unwrap_or(jobs.len());
    if barrier == 0 {
        return (!jobs.is_empty()).then_some(0);
    }
    let key = |j: &Job| (j.offset_bytes < head, j.offset_bytes);
    let best = (0..barrier).min_by_key(|&i| key(&jobs[i]))?;
    let (a, b) = (
        jobs[best].offset_bytes,
        jobs[best].offset_bytes + jobs[best].len as u64,
    );
    let earlier_overlap = (0..best).find(|&i| {
        let j = &jobs[i];
        j.offset_bytes < b && a < j.offset_bytes + j.len as u64
    });
    Some(earlier_overlap.unwrap_or(best))
}

/// CPUs this process may run on (read once).
pub fn cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Request batches running in the process, over all arrays (they share the CPUs).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Counts a running request batch for [`inline_all`] while it lives.
pub struct ActiveGuard(());

impl ActiveGuard {
    pub fn enter() -> ActiveGuard {
        ACTIVE.fetch_add(1, Ordering::Relaxed);
        ActiveGuard(())
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Phases of at most this many bytes of CPU-bound member I/O run on the calling thread even
/// when CPUs are idle: copying them takes about as long as waking a worker and being woken.
pub const SMALL_PHASE_BYTES: usize = 128 << 10;

/// Whether the calling thread should do all of a phase's member I/O itself (see the module
/// doc): `cpu_bound` is true when every member involved does CPU-bound I/O.
pub fn inline_all(jobs: usize, phase_bytes: usize, cpu_bound: bool) -> bool {
    jobs <= 1
        || (cpu_bound
            && (phase_bytes <= SMALL_PHASE_BYTES || ACTIVE.load(Ordering::Relaxed) >= cpus()))
}

/// Whether a member's I/O waits, sampled every [`SAMPLE_EVERY`]th job: a job during which
/// the thread gave up the CPU of its own accord (a voluntary context switch: it slept on the
/// device or on a lock) waited; one that only ran, or was preempted, was CPU work.
struct Stats {
    jobs: AtomicU64,
    /// Share of recent sampled jobs that did not wait, in 1/1024 (exponential average);
    /// starts at 0: a member counts as CPU-bound only once measured so.
    cpu_share_1024: AtomicU32,
    /// Share of recent flushes that returned within [`FAST_FLUSH`], in 1/1024 (exponential
    /// average, starts at 0). A page-cache file's writes do not wait but its flush does (it
    /// writes the file back); a tmpfs or memory member's flush is a system call and no more.
    fast_flush_1024: AtomicU32,
}

/// A flush that returns within this did not wait for a device.
const FAST_FLUSH: std::time::Duration = std::time::Duration::from_micros(50);

const SAMPLE_EVERY: u64 = 8;
/// Above this share of non-waiting jobs a member's I/O counts as CPU-bound.
const CPU_BOUND_1024: u32 = 512;

/// Voluntary context switches of the calling thread so far.
fn voluntary_switches() -> Option<i64> {
    // SAFETY: getrusage writes one rusage through a valid pointer; zeroed is a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    (rc == 0).then_some(ru.ru_nvcsw as i64)
}

impl Stats {
    fn cpu_bound(&self) -> bool {
        self.cpu_share_1024.load(Ordering::Relaxed) >= CPU_BOUND_1024
    }

    fn fast_flush(&self) -> bool {
        self.fast_flush_1024.load(Ordering::Relaxed) >= CPU_BOUND_1024
    }

    fn run(&self, disk: &dyn Disk, job: Job) {
        if job.kind == JobKind::Flush {
            let t = std::time::Instant::now();
            execute(disk, job);
            let sample = if t.elapsed() <= FAST_FLUSH { 1024 } else { 0 };
            let old = self.fast_flush_1024.load(Ordering::Relaxed);
            self.fast_flush_1024
                .store((old * 7 + sample) / 8, Ordering::Relaxed);
            return;
        }
        let n = self.jobs.fetch_add(1, Ordering::Relaxed);
        if !n.is_multiple_of(SAMPLE_EVERY) {
            return execute(disk, job);
        }
        let before = voluntary_switches();
        execute(disk, job);
        let (Some(before), Some(after)) = (before, voluntary_switches()) else {
            return;
        };
        let sample = if after == before { 1024 } else { 0 };
        let old = self.cpu_share_1024.load(Ordering::Relaxed);
        // Weight 1/8: a run of samples decides, one odd sample does not.
        let new = (old * 7 + sample) / 8;
        self.cpu_share_1024.store(new, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct QueueState {
    jobs: VecDeque<Job>,
    /// The worker waits on the condvar and needs a signal.
    sleeping: bool,
    /// No more jobs: set by `Worker::drop`, or by the worker itself when it dies.
    closed: bool,
}

struct Queue {
    state: Mutex<QueueState>,
    cv: Condvar,
}

pub struct Worker {
    queue: Arc<Queue>,
    stats: Arc<Stats>,
    disk: Arc<dyn Disk>,
    handle: Option<JoinHandle<()>>,
}

/// Fails every queued job and closes the queue when the worker thread ends, however it ends.
struct Closer(Arc<Queue>, String);

impl Drop for Closer {
    fn drop(&mut self) {
        let left: Vec<Job> = {
            let mut st = lock(&self.0.state);
            st.closed = true;
            st.jobs.drain(..).collect()
        };
        for job in left {
            job.batch.complete(job.tag, Err(gone(&self.1)));
        }
    }
}

impl Worker {
    pub fn spawn(name: String, disk: Arc<dyn Disk>) -> std::io::Result<Worker> {
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState::default()),
            cv: Condvar::new(),
        });
        let stats = Arc::new(Stats {
            jobs: AtomicU64::new(0),
            cpu_share_1024: AtomicU32::new(0),
            fast_flush_1024: AtomicU32::new(0),
        });
        let (q, s, d) = (queue.clone(), stats.clone(), disk.clone());
        let rotational = disk.is_rotational();
        let handle = std::thread::Builder::new().name(name).spawn(move || {
            let _closer = Closer(q.clone(), d.name().to_string());
            // Where the last job ended: a spinning member takes its queue in ascending
            // order from there ([`elevator_pick`]).
            let mut head = 0u64;
            loop {
                let job = {
                    let mut st = lock(&q.state);
                    loop {
                        let next = if rotational {
                            elevator_pick(&st.jobs, head).and_then(|i| st.jobs.remove(i))
                        } else {
                            st.jobs.pop_front()
                        };
                        if let Some(job) = next {
                            if job.kind != JobKind::Flush {
                                head = job.offset_bytes + job.len as u64;
                            }
                            break job;
                        }
                        if st.closed {
                            return;
                        }
                        st.sleeping = true;
                        st = wait(&q.cv, st);
                        st.sleeping = false;
                    }
                };
                s.run(d.as_ref(), job);
            }
        })?;
        Ok(Worker {
            queue,
            stats,
            disk,
            handle: Some(handle),
        })
    }

    /// Queues a job; if the worker is gone the job completes at once with an error.
    pub fn submit(&self, job: Job, member_name: &str) {
        let mut st = lock(&self.queue.state);
        if st.closed {
            drop(st);
            job.batch.complete(job.tag, Err(gone(member_name)));
            return;
        }
        st.jobs.push_back(job);
        let wake = std::mem::take(&mut st.sleeping);
        drop(st);
        if wake {
            self.queue.cv.notify_one();
        }
    }

    /// Takes back one queued job of `batch` that the worker has not started, if any.
    pub fn steal(&self, batch: &Arc<Batch>) -> Option<Job> {
        let mut st = lock(&self.queue.state);
        let i = st.jobs.iter().position(|j| Arc::ptr_eq(&j.batch, batch))?;
        st.jobs.remove(i)
    }

    /// Performs a job of this member on the calling thread.
    pub fn execute_here(&self, job: Job) {
        self.stats.run(self.disk.as_ref(), job)
    }

    /// True once any read or write of this member has been measured.
    pub fn measured(&self) -> bool {
        self.stats.jobs.load(Ordering::Relaxed) > 0
    }

    /// True when this member's recent I/O did not wait (page cache, tmpfs).
    pub fn cpu_bound(&self) -> bool {
        self.stats.cpu_bound()
    }

    /// True when this member's recent flushes did not wait (tmpfs, memory).
    pub fn fast_flush(&self) -> bool {
        self.stats.fast_flush()
    }

    /// Whether `kind` on this member does not wait, by recent measurements.
    pub fn does_not_wait(&self, kind: JobKind) -> bool {
        match kind {
            JobKind::Flush => self.fast_flush(),
            JobKind::Read | JobKind::Write => self.cpu_bound(),
            JobKind::WriteFua => self.cpu_bound() && self.fast_flush(),
        }
    }
}

/// A job [`merge_adjacent`] joined to an earlier one: (tag kept, tag absorbed).
pub type Absorbed = (usize, usize);

/// The most bytes [`merge_adjacent`] puts in one command.
pub const MERGE_MAX_BYTES: usize = 4 << 20;

/// The most buffers [`merge_adjacent`] puts in one command.
pub const MERGE_MAX_PIECES: usize = 256;

/// Joins each job to the previous job of the same device (`key`) when it continues it on the
/// device, with the same kind: one command for a run the planner cut into pieces (a mirror's
/// lock units, a RAID 10 copy's chunks, a RAID 0 or parity member's chunks of one request,
/// data and parity alike), as the block layer merges them beneath md. Pieces that also
/// follow each other in memory, inside `within` (the request's buffer), become one
/// buffer; others stay pieces of one vectored command (`preadv`/`pwritev`), as a bio
/// carries several segments. One buffer is never made of two allocations that happen to lie
/// side by side. A disk then reads or writes the run in one pass; as pieces, the queue could
/// take them out of order, each out-of-order piece costing a rotation, and each command pays
/// the device's per-command time. Returns the jobs and, for each job absorbed, `(tag kept,
/// tag absorbed)`: an error of the kept job is an error of every job it absorbed. Call
/// before the jobs' batch counts them.
pub fn merge_adjacent<K: ?Sized>(
    mut jobs: Vec<(&K, Job)>,
    within: std::ops::Range<usize>,
) -> (Vec<(&K, Job)>, Vec<Absorbed>) {
    // Both buffers inside `within`: one allocation.
    let inside = |p: *mut u8, l: usize| {
        within.start <= p as usize && (p as usize).saturating_add(l) <= within.end
    };
    let one_allocation =
        |a: *mut u8, a_len: usize, b: *mut u8, b_len: usize| inside(a, a_len) && inside(b, b_len);
    // Compacted in place (no second vector per phase): `jobs[..kept]` are the commands so
    // far; a job joined to one of them is left behind and dropped with the tail.
    let mut kept = 0;
    let mut absorbed = Vec::new();
    for i in 0..jobs.len() {
        let (key, ref job) = jobs[i];
        let (kind, offset, ptr, len, tag) = (job.kind, job.offset_bytes, job.ptr, job.len, job.tag);
        let joinable = matches!(kind, JobKind::Read | JobKind::Write) && job.pieces.is_empty();
        let prev = (0..kept)
            .rev()
            .find(|&j| std::ptr::addr_eq(jobs[j].0 as *const K, key as *const K));
        if let Some(j) = prev.filter(|_| joinable) {
            let p = &mut jobs[j].1;
            if p.kind == kind
                && p.offset_bytes + p.len as u64 == offset
                && p.len + len <= MERGE_MAX_BYTES
            {
                let (last_ptr, last_len) = p.pieces.last().copied().unwrap_or((p.ptr, p.len));
                if last_ptr.wrapping_add(last_len) == ptr
                    && one_allocation(last_ptr, last_len, ptr, len)
                {
                    if let Some(last) = p.pieces.last_mut() {
                        last.1 += len;
                    }
                    p.len += len;
                    absorbed.push((p.tag, tag));
                    continue;
                }
                if p.pieces.len() < MERGE_MAX_PIECES {
                    if p.pieces.is_empty() {
                        p.pieces.push((p.ptr, p.len));
                    }
                    p.pieces.push((ptr, len));
                    p.len += len;
                    absorbed.push((p.tag, tag));
                    continue;
                }
            }
        }
        jobs.swap(kept, i);
        kept += 1;
    }
    jobs.truncate(kept);
    (jobs, absorbed)
}

/// Runs one phase of member jobs that complete `batch` (already counted with
/// [`Batch::add`]); the caller then waits on the batch. When the jobs do not wait and
/// [`inline_all`] says so, the calling thread does them all; otherwise the workers get all but
/// the first, the caller does that one and then takes back whatever the workers have not
/// started instead of sleeping while they get a CPU.
/// `jobs` are (worker, member name, job).
pub fn run_phase(mut jobs: Vec<(&Worker, &str, Job)>, batch: &Arc<Batch>) {
    let phase_bytes: usize = jobs.iter().map(|(_, _, j)| j.len).sum();
    let no_wait = jobs.iter().all(|(w, _, j)| w.does_not_wait(j.kind));
    if inline_all(jobs.len(), phase_bytes, no_wait) {
        for (w, _, job) in jobs {
            w.execute_here(job);
        }
        return;
    }
    // The caller takes the first job: where a member has several, the lowest, which its
    // disk wants first (the rest follow from the worker's queue in the elevator's order).
    let inline = (!jobs.is_empty()).then(|| jobs.remove(0));
    let mut helped = Vec::with_capacity(jobs.len());
    for (w, name, job) in jobs {
        w.submit(job, name);
        helped.push(w);
    }
    if let Some((w, _, job)) = inline {
        w.execute_here(job);
    }
    for w in helped {
        while let Some(job) = w.steal(batch) {
            w.execute_here(job);
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
        lock(&self.queue.state).closed = true;
        self.queue.cv.notify_one();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Per-stripe locks, taken as a set.
#[derive(Default)]
pub struct StripeLocks {
    held: Mutex<(HashSet<u64>, usize)>,
    cv: Condvar,
}

impl StripeLocks {
    pub fn acquire(&self, keys: &[u64]) {
        let mut g = lock(&self.held);
        while keys.iter().any(|k| g.0.contains(k)) {
            g.1 += 1;
            g = wait(&self.cv, g);
            g.1 -= 1;
        }
        g.0.extend(keys.iter().copied());
    }

    pub fn release(&self, keys: &[u64]) {
        let mut g = lock(&self.held);
        for k in keys {
            g.0.remove(k);
        }
        let waiters = g.1 > 0;
        drop(g);
        if waiters {
            self.cv.notify_all();
        }
    }
}

/// A counting semaphore bounding requests in flight (and so the scratch memory they hold).
pub struct Semaphore {
    /// (free permits, waiting threads)
    state: Mutex<(usize, usize)>,
    cv: Condvar,
}

impl Semaphore {
    pub fn new(n: usize) -> Self {
        Semaphore {
            state: Mutex::new((n.max(1), 0)),
            cv: Condvar::new(),
        }
    }
    pub fn acquire(&self) {
        let mut g = lock(&self.state);
        while g.0 == 0 {
            g.1 += 1;
            g = wait(&self.cv, g);
            g.1 -= 1;
        }
        g.0 -= 1;
    }
    pub fn release(&self) {
        let mut g = lock(&self.state);
        g.0 += 1;
        let waiters = g.1 > 0;
        drop(g);
        if waiters {
            self.cv.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidkit_disk::MemDisk;

    #[test]
    fn a_spinning_member_takes_its_queue_in_one_sweep_with_flushes_as_barriers() {
        let batch = Batch::new();
        let job = |kind: JobKind, offset_bytes: u64, len: usize| Job {
            kind,
            offset_bytes,
            ptr: std::ptr::null_mut(),
            len,
            batch: batch.clone(),
            tag: 0,
            pieces: Vec::new(),
        };
        let q: VecDeque<Job> = [
            job(JobKind::Read, 900, 10),
            job(JobKind::Read, 100, 10),
            job(JobKind::Read, 500, 10),
            job(JobKind::Flush, 0, 0),
            job(JobKind::Read, 200, 10),
        ]
        .into();
        // From 400: the lowest at or after it, then the sweep starts again from the lowest.
        assert_eq!(elevator_pick(&q, 400), Some(2));
        assert_eq!(elevator_pick(&q, 950), Some(1));
        // Nothing passes the flush: 200 is behind it.
        assert_eq!(elevator_pick(&q, 150), Some(2));
        let flush_first: VecDeque<Job> =
            [job(JobKind::Flush, 0, 0), job(JobKind::Read, 5, 1)].into();
        assert_eq!(elevator_pick(&flush_first, 0), Some(0));
        // A write never passes an earlier one it overlaps.
        let w: VecDeque<Job> = [
            job(JobKind::Write, 1000, 100),
            job(JobKind::Write, 1050, 10),
            job(JobKind::Write, 300, 10),
        ]
        .into();
        assert_eq!(elevator_pick(&w, 1040), Some(0));
        assert_eq!(elevator_pick(&w, 200), Some(2));
        assert_eq!(elevator_pick(&VecDeque::new(), 0), None);
    }

    #[test]
    fn a_members_pieces_that_continue_each_other_go_as_one_command() {
        let batch = Batch::new();
        let mut mem = vec![0u8; 64];
        let base = mem.as_mut_ptr();
        let job = |kind: JobKind, offset_bytes: u64, at: usize, len: usize, tag: usize| Job {
            kind,
            offset_bytes,
            ptr: base.wrapping_add(at),
            len,
            batch: batch.clone(),
            tag,
            pieces: Vec::new(),
        };
        let (a, b) = ("member a", "member b");
        let jobs: Vec<(&str, Job)> = vec![
            (a, job(JobKind::Read, 1000, 0, 8, 0)),
            (b, job(JobKind::Read, 1000, 0, 8, 1)),
            // Continues a's first on the member and in memory: joined.
            (a, job(JobKind::Read, 1008, 8, 8, 2)),
            // And again, past b's job in between.
            (a, job(JobKind::Read, 1016, 16, 8, 3)),
            // Continues a on the member, not in memory (another chunk's buffer): a second
            // piece of the same command.
            (a, job(JobKind::Read, 1024, 40, 8, 4)),
            // Continues b in memory, but a gap on the member: apart.
            (b, job(JobKind::Read, 1010, 8, 8, 5)),
            // A write after a read: apart.
            (a, job(JobKind::Write, 1032, 48, 8, 6)),
        ];
        let all = base as usize..base as usize + mem.len();
        let (out, absorbed) = merge_adjacent(jobs, all.clone());
        let shape: Vec<(&str, u64, usize, usize)> = out
            .iter()
            .map(|(k, j)| (*k, j.offset_bytes, j.len, j.tag))
            .collect();
        assert_eq!(
            shape,
            vec![
                (a, 1000, 32, 0),
                (b, 1000, 8, 1),
                (b, 1010, 8, 5),
                (a, 1032, 8, 6),
            ]
        );
        assert_eq!(absorbed, vec![(0, 2), (0, 3), (0, 4)]);
        let pieces: Vec<(usize, usize)> = out[0]
            .1
            .pieces
            .iter()
            .map(|&(p, l)| (p as usize - base as usize, l))
            .collect();
        assert_eq!(pieces, vec![(0, 24), (40, 8)]);
        assert!(out[1].1.pieces.is_empty());
        // Another allocation's buffer (a parity's scratch) joins as a piece of its own.
        let mut scratch = vec![0u8; 8];
        let other = vec![
            (a, job(JobKind::Write, 0, 0, 8, 0)),
            (
                a,
                Job {
                    ptr: scratch.as_mut_ptr(),
                    ..job(JobKind::Write, 8, 0, 8, 1)
                },
            ),
        ];
        let (out, _) = merge_adjacent(other, all.clone());
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].1.pieces.len(), 2);
        // Nothing grows past the bound.
        let big = vec![
            (a, job(JobKind::Write, 0, 0, MERGE_MAX_BYTES - 8, 0)),
            (
                a,
                job(
                    JobKind::Write,
                    (MERGE_MAX_BYTES - 8) as u64,
                    MERGE_MAX_BYTES - 8,
                    16,
                    1,
                ),
            ),
        ];
        assert_eq!(merge_adjacent(big, 0..usize::MAX).0.len(), 2);
        // Outside the request's buffer (another allocation that happens to follow): one
        // command, but never one buffer over both.
        let beyond = vec![
            (a, job(JobKind::Read, 0, 0, 8, 0)),
            (a, job(JobKind::Read, 8, 8, 8, 1)),
        ];
        let (out, _) = merge_adjacent(beyond, all.start..all.start + 8);
        assert_eq!((out.len(), out[0].1.pieces.len()), (1, 2));
    }

    /// A command of pieces reads and writes each piece at its place on the member.
    #[test]
    fn a_command_of_pieces_moves_each_piece_to_its_place() {
        let disk = MemDisk::new("m", 4096);
        let mut mem: Vec<u8> = (0..64).collect();
        let base = mem.as_mut_ptr();
        let batch = Batch::new();
        let job = |kind, pieces: Vec<(*mut u8, usize)>| Job {
            kind,
            offset_bytes: 100,
            ptr: pieces[0].0,
            len: pieces.iter().map(|p| p.1).sum(),
            batch: batch.clone(),
            tag: 0,
            pieces,
        };
        batch.add(2);
        let w = vec![
            (base.wrapping_add(40), 8),
            (base, 4),
            (base.wrapping_add(10), 2),
        ];
        execute(&disk, job(JobKind::Write, w));
        let mut back = [0u8; 14];
        disk.read_at(&mut back, 100).unwrap();
        assert_eq!(back, [40, 41, 42, 43, 44, 45, 46, 47, 0, 1, 2, 3, 10, 11]);
        let r = vec![(base.wrapping_add(20), 10), (base.wrapping_add(50), 4)];
        execute(&disk, job(JobKind::Read, r));
        assert!(batch.wait().is_empty());
        assert_eq!(&mem[20..30], &[40, 41, 42, 43, 44, 45, 46, 47, 0, 1]);
        assert_eq!(&mem[50..54], &[2, 3, 10, 11]);
    }

    /// A member whose reads sleep, as a disk's do (the thread gives up its CPU).
    #[derive(Debug)]
    struct Sleepy(MemDisk);

    impl Disk for Sleepy {
        fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
            std::thread::sleep(std::time::Duration::from_micros(200));
            self.0.read_at(buf, offset_bytes)
        }
        fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
            self.0.write_at(buf, offset_bytes)
        }
        fn flush(&self) -> Result<(), DiskError> {
            self.0.flush()
        }
        fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
            self.0.discard(offset_bytes, len_bytes)
        }
        fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
            self.0.write_zeroes(offset_bytes, len_bytes)
        }
        fn size_bytes(&self) -> u64 {
            self.0.size_bytes()
        }
        fn logical_block_size(&self) -> u32 {
            self.0.logical_block_size()
        }
        fn name(&self) -> &str {
            self.0.name()
        }
        fn is_read_only(&self) -> bool {
            self.0.is_read_only()
        }
    }

    fn job(
        kind: JobKind,
        buf: &mut [u8],
        offset_bytes: u64,
        batch: &Arc<Batch>,
        tag: usize,
    ) -> Job {
        Job {
            kind,
            offset_bytes,
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            batch: batch.clone(),
            tag,
            pieces: Vec::new(),
        }
    }

    #[test]
    fn every_job_completes_once_whoever_runs_it() {
        let disk = Arc::new(MemDisk::new("m0", 1 << 20));
        let w = Worker::spawn("t-m0".into(), disk.clone()).unwrap();
        let mut bufs: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 4096]).collect();
        let batch = Batch::new();
        batch.add(bufs.len());
        for (i, b) in bufs.iter_mut().enumerate() {
            w.submit(job(JobKind::Write, b, i as u64 * 4096, &batch, i), "m0");
        }
        // Take back what the worker has not started and run it here; the count decides
        // when wait returns, so a job run twice or never would hang or underflow.
        let mut stolen = 0;
        while let Some(j) = w.steal(&batch) {
            w.execute_here(j);
            stolen += 1;
        }
        assert!(batch.wait().is_empty());
        assert_eq!(batch.pending.load(Ordering::Acquire), 0);
        let image = disk.snapshot();
        for i in 0..64 {
            assert!(image[i * 4096..(i + 1) * 4096]
                .iter()
                .all(|&b| b == i as u8));
        }
        assert!(stolen <= 64);
    }

    #[test]
    fn failures_come_back_with_their_tags() {
        let disk = Arc::new(MemDisk::new("m0", 8192));
        let w = Worker::spawn("t-m0".into(), disk).unwrap();
        let mut ok = vec![0u8; 4096];
        let mut past_end = vec![0u8; 4096];
        let batch = Batch::new();
        batch.add(2);
        w.submit(job(JobKind::Read, &mut ok, 0, &batch, 7), "m0");
        w.submit(job(JobKind::Read, &mut past_end, 8192, &batch, 9), "m0");
        let errors = batch.wait();
        assert_eq!(errors.iter().map(|e| e.0).collect::<Vec<_>>(), vec![9]);
    }

    #[test]
    fn jobs_queued_at_shutdown_still_complete() {
        let disk = Arc::new(MemDisk::new("m0", 1 << 20));
        let w = Worker::spawn("t-m0".into(), disk).unwrap();
        let mut bufs: Vec<Vec<u8>> = (0..32).map(|_| vec![1u8; 4096]).collect();
        let batch = Batch::new();
        batch.add(bufs.len());
        for (i, b) in bufs.iter_mut().enumerate() {
            w.submit(job(JobKind::Write, b, i as u64 * 4096, &batch, i), "m0");
        }
        drop(w);
        assert!(batch.wait().is_empty());
    }

    #[test]
    fn waiting_members_are_told_apart_from_memory_copies() {
        let mem = Arc::new(MemDisk::new("mem", 1 << 20));
        let sleepy = Arc::new(Sleepy(MemDisk::new("sleepy", 1 << 20)));
        let wm = Worker::spawn("t-mem".into(), mem).unwrap();
        let ws = Worker::spawn("t-sleepy".into(), sleepy).unwrap();
        assert!(
            !wm.cpu_bound() && !ws.cpu_bound(),
            "unmeasured members count as waiting"
        );
        let mut buf = vec![0u8; 4096];
        for _ in 0..SAMPLE_EVERY * 64 {
            for w in [&wm, &ws] {
                let batch = Batch::new();
                batch.add(1);
                w.execute_here(job(JobKind::Read, &mut buf, 0, &batch, 0));
                assert!(batch.wait().is_empty());
            }
        }
        assert!(wm.cpu_bound(), "reads from memory never sleep");
        assert!(!ws.cpu_bound(), "reads that sleep wait");
    }

    #[test]
    fn small_or_crowded_cpu_work_stays_on_the_caller() {
        assert!(
            inline_all(1, 1 << 20, false),
            "one job: no one to share it with"
        );
        assert!(inline_all(4, SMALL_PHASE_BYTES, true));
        assert!(
            !inline_all(4, SMALL_PHASE_BYTES, false),
            "waiting devices fan out"
        );
        let guards: Vec<ActiveGuard> = (0..cpus()).map(|_| ActiveGuard::enter()).collect();
        assert!(
            inline_all(4, 4 << 20, true),
            "every CPU already runs a request"
        );
        drop(guards);
    }
}
