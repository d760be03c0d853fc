//! Write-back: md's write journal in write-back mode (`journal_mode write-back`,
//! raid5-cache.c's r5c), the PERC6's battery-backed cache with the journal device as the
//! battery. A write is acknowledged once its 4 KiB pages are logged as data alone and the
//! journal device synced; the pages stay in a bounded cache in memory, from which reads are
//! served, and are written to the members later, by destage threads or by the writer that finds
//! the cache full. Write-through stays the default (the PERC6's WT, md's default mode).
//!
//! The unit is the stripe, as md's stripe head is: a write marks the stripes it touches busy,
//! and a destage takes every cached page of a stripe at once, as one write through the normal
//! write path (data and parity of its rows logged whole, then the members written). So the
//! log never holds parity for a row while another cached page of that row waits, and md's
//! replay (data-only rows are cached again, rows with parity are written) finds every row
//! consistent, whoever replays it: md replays raidkit's log and raidkit md's
//! (`array/journal.rs`, `analyze_log`).
//!
//! The journal's checkpoint stays at or before the oldest log write holding a cached page
//! (its floor). A write waits, destaging, while the log since the floor and what writing back
//! every cached stripe may log take three quarters of the ring, or the cache (at most a fifth
//! of the ring) is full: a destage always finds room for its own log writes, and after a crash
//! the replay finds room to log the cached pages anew before it writes them.
//!
//! Flush and FUA: an acknowledged write is already durable in the journal, so both are
//! honoured by the log write; a flush still syncs the members (what was written back).
//! Writes of a whole stripe or more, and every write under write-through, go straight through
//! after the cached pages of their stripes are written back.

use super::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Weak};
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
const PAGE_SECTORS: u64 = 8;

/// The write cache's bound (the PERC6 has 256 MiB for reads and writes together); no more than
/// a fifth of the journal either.
const WRITE_CACHE_BYTES: u64 = 64 << 20;

/// Destage threads at most.
const DESTAGERS: usize = 16;

/// How long a page stays cached before a destage thread takes it, unless the cache is under
/// pressure: long enough for a sequential stream to fill its stripe.
const DESTAGE_AGE: Duration = Duration::from_millis(20);

/// A write policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WritePolicy {
    /// A write returns once the members have it (md's default; the PERC6's WT).
    #[default]
    Through,
    /// A write returns once the write journal has it (md's write-back mode; the PERC6's WB).
    Back,
}

impl WritePolicy {
    pub fn name(self) -> &'static str {
        match self {
            WritePolicy::Through => "through",
            WritePolicy::Back => "back",
        }
    }

    pub fn parse(text: &str) -> Option<WritePolicy> {
        match text {
            "through" | "wt" | "write-through" => Some(WritePolicy::Through),
            "back" | "wb" | "write-back" => Some(WritePolicy::Back),
            _ => None,
        }
    }
}

impl std::fmt::Display for WritePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the write cache has done since assembly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct WriteBackCounters {
    pub policy: WritePolicy,
    /// Writes acknowledged from the journal.
    pub cached_writes: u64,
    /// Pages written again while still cached (each saves a member write).
    pub rewrites: u64,
    /// Stripes written back, and their pages.
    pub destages: u64,
    pub destaged_pages: u64,
    /// Writes that waited for the cache or the journal to make room.
    pub waits: u64,
    /// Bytes held now, and the bound.
    pub cached_bytes: u64,
    pub capacity_bytes: u64,
}

struct Page {
    data: Vec<u8>,
    /// The log write that holds it.
    seq: u64,
    at: Instant,
}

/// The stripe shape a destage's log writes follow.
#[derive(Clone, Copy, Default)]
pub(super) struct Shape {
    /// Array pages per stripe, and per chunk (a stripe's rows).
    stripe_pages: u64,
    chunk_pages: u64,
    /// Parity pages per row.
    parity: u64,
}

impl Shape {
    /// Journal sectors the destage of pages `[lo, hi)` of one stripe logs at most: its data,
    /// each row's parity, the meta blocks, and one meta block more (a write of one stripe or
    /// less is one write phase, logged in one log write, unless the planner cuts its batch).
    fn destage_sectors(&self, lo: u64, hi: u64) -> u64 {
        let pages = hi - lo;
        let rows = pages.min(self.chunk_pages);
        let meta_bytes = pages * 20 + rows * (16 + 4 * self.parity);
        (pages + rows * self.parity + meta_bytes.div_ceil(4064) + 1) * PAGE_SECTORS
    }
}

#[derive(Default)]
struct Cache {
    shape: Shape,
    /// Cached pages by array page number.
    pages: BTreeMap<u64, Page>,
    /// Stripes with cached pages: (first page, end, journal sectors their destage may log).
    stripes: BTreeMap<u64, (u64, u64, u64)>,
    /// The sum of those: journal room kept for writing the cache back.
    reserve: u64,
    /// (log write, page) of every cached page: the oldest first.
    by_seq: BTreeSet<(u64, u64)>,
    /// Stripes a write or a destage works on.
    busy: BTreeSet<u64>,
    capacity: u64,
    /// Where the destage sweep goes on (a stripe number).
    cursor: u64,
    destagers: usize,
    shutdown: bool,
    counters: WriteBackCounters,
}

/// The write cache of an array (present on every array; only a journal array uses it).
pub(super) struct WriteBack {
    back: AtomicBool,
    /// Pages cached (read without the lock on every request).
    cached: AtomicU64,
    st: Mutex<Cache>,
    /// Signalled when a stripe stops being busy (a write or a destage ended): writers
    /// waiting for a stripe or for room wait on it.
    cv: Condvar,
    /// Signalled when the destage threads have work: the cache needs room.
    work: Condvar,
}

/// Stripes marked busy; unmarked when dropped.
struct Held<'a> {
    wb: &'a WriteBack,
    stripes: Vec<u64>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.wb.st);
        for s in &self.stripes {
            st.busy.remove(s);
        }
        drop(st);
        self.wb.cv.notify_all();
    }
}

impl WriteBack {
    pub(super) fn new() -> WriteBack {
        WriteBack {
            back: AtomicBool::new(false),
            cached: AtomicU64::new(0),
            st: Mutex::new(Cache::default()),
            cv: Condvar::new(),
            work: Condvar::new(),
        }
    }

    fn policy(&self) -> WritePolicy {
        if self.back.load(Ordering::Relaxed) {
            WritePolicy::Back
        } else {
            WritePolicy::Through
        }
    }

    /// Whether a write must pass through the cache's bookkeeping.
    fn active(&self) -> bool {
        self.back.load(Ordering::Relaxed) || self.cached.load(Ordering::Relaxed) > 0
    }

    /// Puts pages found in the log at assembly (data-only rows, logged anew at `seq`) in the
    /// cache.
    pub(super) fn load(&self, shape: Shape, pages: Vec<(u64, Vec<u8>)>, seq: u64) {
        let mut st = lock(&self.st);
        st.shape = shape;
        let now = Instant::now();
        for (a, data) in pages {
            let pg = a / PAGE_SECTORS;
            st.insert(pg, data, seq, now);
        }
        self.cached.store(st.pages.len() as u64, Ordering::Relaxed);
    }

    /// Copies of the cached pages overlapping `[offset, offset + len)` bytes.
    fn snapshot(&self, offset: u64, len: u64) -> Vec<(u64, Vec<u8>)> {
        let first = offset / PAGE as u64;
        let end = (offset + len).div_ceil(PAGE as u64);
        let st = lock(&self.st);
        st.pages
            .range(first..end)
            .map(|(pg, p)| (*pg, p.data.clone()))
            .collect()
    }

    /// Marks `stripes` busy, waiting while any of them is.
    fn hold(&self, stripes: std::ops::RangeInclusive<u64>) -> Held<'_> {
        let mut st = lock(&self.st);
        while stripes.clone().any(|s| st.busy.contains(&s)) {
            st = wait(&self.cv, st, Duration::from_millis(50));
        }
        st.busy.extend(stripes.clone());
        Held {
            wb: self,
            stripes: stripes.collect(),
        }
    }
}

impl Cache {
    fn insert(&mut self, pg: u64, data: Vec<u8>, seq: u64, at: Instant) {
        if let Some(old) = self.pages.insert(pg, Page { data, seq, at }) {
            self.by_seq.remove(&(old.seq, pg));
            self.counters.rewrites += 1;
        }
        self.by_seq.insert((seq, pg));
        let stripe = pg / self.shape.stripe_pages;
        let (lo, hi) = match self.stripes.get(&stripe) {
            Some(&(lo, hi, cost)) => {
                self.reserve -= cost;
                (lo.min(pg), hi.max(pg + 1))
            }
            None => (pg, pg + 1),
        };
        let cost = self.shape.destage_sectors(lo, hi);
        self.stripes.insert(stripe, (lo, hi, cost));
        self.reserve += cost;
    }

    /// The reserve with pages `[first, last]` cached too.
    fn reserve_with(&self, first: u64, last: u64) -> u64 {
        let sp = self.shape.stripe_pages;
        let mut reserve = self.reserve;
        for stripe in first / sp..=last / sp {
            let (a, b) = (first.max(stripe * sp), (last + 1).min((stripe + 1) * sp));
            let (lo, hi) = match self.stripes.get(&stripe) {
                Some(&(lo, hi, cost)) => {
                    reserve -= cost;
                    (lo.min(a), hi.max(b))
                }
                None => (a, b),
            };
            reserve += self.shape.destage_sectors(lo, hi);
        }
        reserve
    }

    /// Drops `pg` (written back as logged at `seq`) unless it was written again since.
    fn written_back(&mut self, pg: u64, seq: u64) {
        if self.pages.get(&pg).is_some_and(|p| p.seq == seq) {
            self.pages.remove(&pg);
            self.by_seq.remove(&(seq, pg));
        }
        let sp = self.shape.stripe_pages;
        let stripe = pg / sp;
        if let Some((_, _, cost)) = self.stripes.remove(&stripe) {
            self.reserve -= cost;
        }
        let range = self.pages.range(stripe * sp..(stripe + 1) * sp);
        let (lo, hi) = (
            range.clone().next().map(|(p, _)| *p),
            range.last().map(|(p, _)| *p + 1),
        );
        if let (Some(lo), Some(hi)) = (lo, hi) {
            let cost = self.shape.destage_sectors(lo, hi);
            self.stripes.insert(stripe, (lo, hi, cost));
            self.reserve += cost;
        }
    }

    fn floor(&self) -> u64 {
        self.by_seq.first().map_or(u64::MAX, |(s, _)| *s)
    }
}

fn wait<'a, T>(
    cv: &Condvar,
    g: std::sync::MutexGuard<'a, T>,
    d: Duration,
) -> std::sync::MutexGuard<'a, T> {
    match cv.wait_timeout(g, d) {
        Ok((g, _)) => g,
        Err(p) => p.into_inner().0,
    }
}

impl Array {
    fn journal(&self) -> Option<&journal::Journal> {
        self.log.as_ref().and_then(|l| l.journal())
    }

    /// Array pages (4 KiB) per stripe of data.
    fn stripe_pages(&self) -> u64 {
        (self.geo.chunk_sectors * self.geo.data_disks() as u64 / PAGE_SECTORS).max(1)
    }

    pub(super) fn write_back_shape(&self) -> Shape {
        Shape {
            stripe_pages: self.stripe_pages(),
            chunk_pages: (self.geo.chunk_sectors / PAGE_SECTORS).max(1),
            parity: match self.geo.scheme() {
                crate::geometry::Scheme::Parity { max_degraded } => max_degraded as u64,
                crate::geometry::Scheme::Copies { .. } => 0,
            },
        }
    }

    /// What one whole stripe's destage may log (sectors).
    fn destage_log_sectors(&self) -> u64 {
        self.write_back_shape()
            .destage_sectors(0, self.stripe_pages())
    }

    /// Sets the write policy. Write-back needs md's write journal (it is where an
    /// acknowledged write lives until the members have it) with room for sixteen stripes'
    /// destages; going back to write-through first writes every cached page to the members.
    pub fn set_write_policy(&self, policy: WritePolicy) -> Result<()> {
        match policy {
            WritePolicy::Through => {
                self.write_back.back.store(false, Ordering::Relaxed);
                self.drain_write_back()
            }
            WritePolicy::Back => {
                let Some(j) = self.journal() else {
                    return Err(EngineError::Invalid(
                        "write-back needs md's write journal, where a write waits until the members have it: create the array with --write-journal DEVICE".into(),
                    ));
                };
                self.check_writable()?;
                if !self.geo.array_sectors().is_multiple_of(PAGE_SECTORS) {
                    return Err(EngineError::Invalid(
                        "write-back caches 4 KiB pages; this array's size is not a multiple of 4 KiB".into(),
                    ));
                }
                let (_, ring) = j.usage();
                let need = 16 * self.destage_log_sectors();
                if ring < need {
                    return Err(EngineError::Invalid(format!(
                        "write-back needs a write journal of at least {} KiB for this array's stripes (room for sixteen stripes written back at once); it has {} KiB",
                        need / 2,
                        ring / 2
                    )));
                }
                let capacity = WRITE_CACHE_BYTES.min(ring * SECTOR as u64 / 5);
                let mut st = lock(&self.write_back.st);
                st.capacity = capacity;
                st.shape = self.write_back_shape();
                drop(st);
                self.write_back.back.store(true, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    pub fn write_policy(&self) -> WritePolicy {
        self.write_back.policy()
    }

    pub fn write_back_counters(&self) -> WriteBackCounters {
        let st = lock(&self.write_back.st);
        WriteBackCounters {
            policy: self.write_back.policy(),
            cached_bytes: st.pages.len() as u64 * PAGE as u64,
            capacity_bytes: st.capacity,
            ..st.counters
        }
    }

    /// Starts the destage threads (once): cached pages then reach the members in the
    /// background, oldest first. Without them (the simulator, which replays each seed the
    /// same way), a writer that finds the cache full writes back itself.
    pub fn start_destaging(self: &Arc<Self>) {
        let Some(j) = self.journal() else { return };
        let (_, ring) = j.usage();
        let n = ((ring / 4 / self.destage_log_sectors().max(1)) as usize).clamp(1, DESTAGERS);
        let mut st = lock(&self.write_back.st);
        if st.destagers > 0 || self.read_only {
            return;
        }
        st.destagers = n;
        st.shutdown = false;
        drop(st);
        for i in 0..n {
            let weak = Arc::downgrade(self);
            let spawned = std::thread::Builder::new()
                .name(format!("raidkit-wb{i}"))
                .spawn(move || destager(weak));
            if spawned.is_err() {
                lock(&self.write_back.st).destagers -= 1;
            }
        }
    }

    /// Writes every page the write-back cache holds to the members now (what a stop, and a
    /// change to write-through, do first).
    pub fn write_back_now(&self) -> Result<()> {
        self.drain_write_back()
    }

    /// Writes every cached page to the members (at a stop, a change to write-through, the end
    /// of an assembly that found data-only rows).
    pub(super) fn drain_write_back(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        while self.write_back.cached.load(Ordering::Relaxed) > 0 {
            if !self.destage_next(false, true)? {
                let st = lock(&self.write_back.st);
                drop(wait(&self.write_back.cv, st, Duration::from_millis(20)));
            }
        }
        Ok(())
    }

    /// Stops the destage threads (after a drain).
    pub(super) fn stop_destaging(&self) {
        lock(&self.write_back.st).shutdown = true;
        self.write_back.work.notify_all();
    }

    /// Whether [`Array::write_at`] goes through [`Array::write_back_at`].
    pub(super) fn write_back_active(&self) -> bool {
        self.write_back.active()
    }

    /// Copies of the cached pages overlapping `len` bytes at `offset` (none, without taking
    /// the lock, when the cache is empty).
    pub(super) fn cached_snapshot(&self, offset: u64, len: u64) -> Vec<(u64, Vec<u8>)> {
        if self.write_back.cached.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        self.write_back.snapshot(offset, len)
    }

    /// Overlays cached pages on `buf`, read from the members at `offset` (`cached`: the
    /// cache's copies, taken before the members were read).
    pub(super) fn overlay(buf: &mut [u8], offset: u64, cached: &[(u64, Vec<u8>)]) {
        let end = offset + buf.len() as u64;
        for (pg, data) in cached {
            let p0 = pg * PAGE as u64;
            let lo = offset.max(p0);
            let hi = end.min(p0 + PAGE as u64);
            if lo < hi {
                buf[(lo - offset) as usize..(hi - offset) as usize]
                    .copy_from_slice(&data[(lo - p0) as usize..(hi - p0) as usize]);
            }
        }
    }

    /// A write while the cache is in use (see the module comment).
    pub(super) fn write_back_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()> {
        let len = buf.len() as u64;
        let first = offset / PAGE as u64;
        let last = (offset + len - 1) / PAGE as u64;
        let sp = self.stripe_pages();
        let stripes = first / sp..=last / sp;
        let full = self.full_stripe_bytes().unwrap_or(u64::MAX);
        let cache = self.write_back.back.load(Ordering::Relaxed) && len < full;
        let Some(journal) = self.journal().filter(|_| cache) else {
            // Through: what the cache holds of these stripes goes first. Its log writes stay
            // behind the cache's floor: without room for them beside the cache's reserve,
            // the whole cache is written back first.
            if let Some(j) = self.journal() {
                let (pinned, ring) = j.pinned();
                let reserve = lock(&self.write_back.st).reserve;
                let cost = (last - first + 1) * PAGE_SECTORS * self.geo.raid_disks as u64;
                if pinned + reserve + cost > ring * 3 / 4 {
                    self.drain_write_back()?;
                }
            }
            let _held = self.write_back.hold(stripes.clone());
            for s in stripes {
                self.destage_held(s)?;
            }
            return self.write_uncached(buf, offset, fua);
        };
        self.admit(journal, first, last)?;
        let _held = self.write_back.hold(stripes);
        let mut pages: Vec<(u64, Vec<u8>)> = Vec::with_capacity((last - first + 1) as usize);
        for pg in first..=last {
            let p0 = pg * PAGE as u64;
            let lo = offset.max(p0);
            let hi = (offset + len).min(p0 + PAGE as u64);
            let mut data = if hi - lo == PAGE as u64 {
                vec![0u8; PAGE]
            } else {
                let cached = lock(&self.write_back.st)
                    .pages
                    .get(&pg)
                    .map(|p| p.data.clone());
                match cached {
                    Some(d) => d,
                    None => {
                        let mut d = vec![0u8; PAGE];
                        self.read_direct(&mut d, p0)?;
                        d
                    }
                }
            };
            data[(lo - p0) as usize..(hi - p0) as usize]
                .copy_from_slice(&buf[(lo - offset) as usize..(hi - offset) as usize]);
            pages.push((pg * PAGE_SECTORS, data));
        }
        let refs: Vec<(u64, &[u8])> = pages.iter().map(|(a, d)| (*a, d.as_slice())).collect();
        let seq = journal.log_data(self, &refs)?;
        let mut st = lock(&self.write_back.st);
        let now = Instant::now();
        for (a, data) in pages {
            st.insert(a / PAGE_SECTORS, data, seq, now);
        }
        st.counters.cached_writes += 1;
        self.write_back
            .cached
            .store(st.pages.len() as u64, Ordering::Relaxed);
        let floor = st.floor();
        drop(st);
        journal.set_floor(floor);
        Ok(())
    }

    /// Waits (destaging itself without destage threads) until `pages` more fit the cache
    /// and the journal's half for cached data.
    fn admit(&self, journal: &journal::Journal, first: u64, last: u64) -> Result<()> {
        let pages = last - first + 1;
        let need = (pages + pages.div_ceil(200)) * PAGE_SECTORS;
        let mut waited = false;
        loop {
            let (pinned, ring) = journal.pinned();
            let (fits, journal_full, threads) = {
                let st = lock(&self.write_back.st);
                let bytes = (st.pages.len() as u64 + pages) * PAGE as u64;
                let reserve = st.reserve_with(first, last);
                let journal_full = pinned + need + reserve > ring * 3 / 4 && !st.pages.is_empty();
                (
                    !journal_full && bytes <= st.capacity.max(PAGE as u64 * pages),
                    journal_full,
                    st.destagers > 0 && !st.shutdown,
                )
            };
            if fits {
                if waited {
                    lock(&self.write_back.st).counters.waits += 1;
                }
                return Ok(());
            }
            waited = true;
            if threads {
                // A destage ending (its stripe no longer busy) wakes this.
                self.write_back.work.notify_all();
                let st = lock(&self.write_back.st);
                drop(wait(&self.write_back.cv, st, Duration::from_millis(50)));
            } else if !self.destage_next(journal_full, true)? {
                let st = lock(&self.write_back.st);
                drop(wait(&self.write_back.cv, st, Duration::from_millis(5)));
            }
        }
    }

    /// Destages one stripe no one works on. Under journal pressure (`oldest`) the stripe of
    /// the oldest cached page, which lets the checkpoint move; otherwise the next stripe
    /// from where the last destage left off (a sweep in address order, as an elevator: the
    /// members' heads move little between destages), of pages cached for a while unless
    /// `pressed`. False when there was none.
    fn destage_next(&self, oldest: bool, pressed: bool) -> Result<bool> {
        let sp = self.stripe_pages();
        let held = {
            let mut st = lock(&self.write_back.st);
            let now = Instant::now();
            let aged = |st: &Cache, s: u64| {
                pressed
                    || st
                        .pages
                        .range(s * sp..(s + 1) * sp)
                        .all(|(_, p)| now.duration_since(p.at) >= DESTAGE_AGE)
            };
            let swept = if oldest {
                None
            } else {
                let cursor = st.cursor;
                st.stripes
                    .range(cursor..)
                    .chain(st.stripes.range(..cursor))
                    .map(|(s, _)| *s)
                    .take(256)
                    .find(|s| !st.busy.contains(s) && aged(&st, *s))
            };
            let stripe = swept.or_else(|| {
                st.by_seq
                    .iter()
                    .map(|(_, pg)| pg / sp)
                    .find(|s| !st.busy.contains(s) && (oldest || aged(&st, *s)))
            });
            let Some(s) = stripe else {
                return Ok(false);
            };
            st.busy.insert(s);
            st.cursor = s + 1;
            Held {
                wb: &self.write_back,
                stripes: vec![s],
            }
        };
        self.destage_held(held.stripes[0])?;
        Ok(true)
    }

    /// Writes every cached page of `stripe` (marked busy by the caller) to the members.
    /// Runs of cached pages that share no row (4 KiB at one offset of every chunk) are
    /// written apart; runs that share one are written as one, from the first to the last,
    /// the pages between read from the members: a row's parity is logged with all of its
    /// cached pages, so a replay never pairs one with parity computed without it.
    fn destage_held(&self, stripe: u64) -> Result<()> {
        let sp = self.stripe_pages();
        let chunk_pages = (self.geo.chunk_sectors / PAGE_SECTORS).max(1);
        let pages: Vec<(u64, Vec<u8>, u64)> = lock(&self.write_back.st)
            .pages
            .range(stripe * sp..(stripe + 1) * sp)
            .map(|(pg, p)| (*pg, p.data.clone(), p.seq))
            .collect();
        // Spans (first page, end) of runs, merged while two share a row.
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for (pg, _, _) in &pages {
            match spans.last_mut() {
                Some(last) if last.1 == *pg => last.1 = pg + 1,
                _ => spans.push((*pg, pg + 1)),
            }
        }
        let rows = |(lo, hi): (u64, u64)| -> Vec<bool> {
            let mut r = vec![false; chunk_pages as usize];
            for pg in lo..hi.min(lo + chunk_pages) {
                r[(pg % chunk_pages) as usize] = true;
            }
            r
        };
        loop {
            let mut merged = false;
            'outer: for i in 0..spans.len() {
                for j in i + 1..spans.len() {
                    let (a, b) = (rows(spans[i]), rows(spans[j]));
                    if a.iter().zip(&b).any(|(x, y)| *x && *y) {
                        let to = spans[j].1;
                        spans[i].1 = to;
                        spans.drain(i + 1..=j);
                        merged = true;
                        break 'outer;
                    }
                }
            }
            if !merged {
                break;
            }
        }
        for (lo, hi) in spans {
            let mut buf = vec![0u8; ((hi - lo) * PAGE as u64) as usize];
            let mut next = lo;
            for (pg, data, _) in pages.iter().filter(|p| p.0 >= lo && p.0 < hi) {
                if *pg > next {
                    let from = ((next - lo) * PAGE as u64) as usize;
                    let to = ((pg - lo) * PAGE as u64) as usize;
                    self.read_direct(&mut buf[from..to], next * PAGE as u64)?;
                }
                let at = ((pg - lo) * PAGE as u64) as usize;
                buf[at..at + PAGE].copy_from_slice(data);
                next = pg + 1;
            }
            self.write_uncached(&buf, lo * PAGE as u64, false)?;
        }
        let mut st = lock(&self.write_back.st);
        for (pg, _, seq) in &pages {
            st.written_back(*pg, *seq);
        }
        st.counters.destages += 1;
        st.counters.destaged_pages += pages.len() as u64;
        self.write_back
            .cached
            .store(st.pages.len() as u64, Ordering::Relaxed);
        let floor = st.floor();
        drop(st);
        if let Some(j) = self.journal() {
            j.set_floor(floor);
        }
        Ok(())
    }
}

/// A destage thread: writes back stripes ([`Array::destage_next`]: the sweep's next aged one,
/// any under cache pressure, the oldest under journal pressure) until the array is gone or
/// stops.
fn destager(weak: Weak<Array>) {
    loop {
        let Some(array) = weak.upgrade() else { return };
        let (oldest, pressed) = {
            let st = lock(&array.write_back.st);
            if st.shutdown {
                return;
            }
            let bytes = st.pages.len() as u64 * PAGE as u64;
            let journal_full = array.journal().is_some_and(|j| {
                let (pinned, ring) = j.pinned();
                pinned > ring / 2
            });
            (journal_full, bytes > st.capacity / 2)
        };
        match array.destage_next(oldest, pressed) {
            Ok(true) => {}
            Ok(false) => {
                let st = lock(&array.write_back.st);
                drop(wait(&array.write_back.work, st, DESTAGE_AGE / 2));
            }
            Err(_) => {
                // The array failed or refuses writes: the pages stay cached (and logged);
                // try again later rather than spin.
                let st = lock(&array.write_back.st);
                drop(wait(&array.write_back.work, st, Duration::from_millis(200)));
            }
        }
    }
}
