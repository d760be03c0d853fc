//! Read-ahead: a controller's read policies (the PERC6's No Read Ahead, Read Ahead and
//! Adaptive Read Ahead) as a bounded cache of array data in front of the read path.
//!
//! A read the cache holds whole is copied from it. Otherwise, when the policy says so, the
//! read is extended ahead (one array read: on disks, one long transfer per member instead of
//! a seek per request), the request is served from the front and the rest kept for the reads
//! that follow. `Always` extends every read that misses to the end of its stripe and one
//! stripe more (what a controller's RA does, and why it costs random reads); `Adaptive`
//! extends only a read that continues a stream (one of the last few places reads ended) for
//! the third time running, by twice the request size and doubling with each continuation up
//! to two stripes (at least 1 MiB), and so drops back to plain reads on random access:
//! interleaved clients each keep their stream. A read that falls inside a read-ahead still in
//! flight waits for it instead of reading the same sectors again (several requests of one
//! stream are outstanding at once at a queue depth above 1).
//!
//! Coherence: every write (and write-zeroes, trim) drops the cached bytes it covers, before
//! it runs and again after, and is remembered with the write generation it moved on; a
//! read-ahead that saw writes come while it read keeps what it read except the bytes they
//! wrote (nothing, when more came than are remembered), so a write that raced it is never
//! hidden behind older data. The cache holds
//! array data (after any reconstruction), so a member failing or being rebuilt does not make
//! it wrong. Bounded: the least recently used ranges go first.

use super::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// A read policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadAhead {
    /// Every read goes to the members as asked (md's behaviour; the PERC6's NORA).
    #[default]
    None,
    /// Every read that misses the cache reads whole stripes ahead (RA).
    Always,
    /// Reads ahead for sequential streams only (ARA).
    Adaptive,
}

impl ReadAhead {
    pub fn name(self) -> &'static str {
        match self {
            ReadAhead::None => "none",
            ReadAhead::Always => "always",
            ReadAhead::Adaptive => "adaptive",
        }
    }

    pub fn parse(text: &str) -> Option<ReadAhead> {
        match text {
            "none" | "nora" | "off" => Some(ReadAhead::None),
            "always" | "ra" => Some(ReadAhead::Always),
            "adaptive" | "ara" => Some(ReadAhead::Adaptive),
            _ => None,
        }
    }

    fn from_u8(v: u8) -> ReadAhead {
        match v {
            1 => ReadAhead::Always,
            2 => ReadAhead::Adaptive,
            _ => ReadAhead::None,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            ReadAhead::None => 0,
            ReadAhead::Always => 1,
            ReadAhead::Adaptive => 2,
        }
    }
}

/// What the read cache has done since assembly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ReadAheadCounters {
    pub policy: ReadAhead,
    /// Reads served whole from the cache.
    pub hits: u64,
    /// Reads that went to the members.
    pub misses: u64,
    /// Of those, reads extended ahead, and the bytes read beyond what was asked.
    pub ahead_reads: u64,
    pub ahead_bytes: u64,
    /// Bytes held now, and the bound.
    pub cached_bytes: u64,
    pub capacity_bytes: u64,
}

/// Streams an adaptive policy follows at once.
const STREAMS: usize = 16;

#[derive(Default)]
struct CacheState {
    /// Cached ranges by their first byte; they never overlap.
    entries: BTreeMap<u64, Entry>,
    bytes: u64,
    tick: u64,
    /// Recent streams (for replacing the oldest).
    streams: Vec<Stream>,
    /// Read-aheads in flight: `[start, end)` and the signal of their end.
    inflight: Vec<(u64, u64, Arc<Fetch>)>,
    /// The latest writes, by the generation each made (`gen`, offset, length): a read-ahead
    /// that ran while some came keeps all but what they wrote.
    recent: std::collections::VecDeque<(u64, u64, u64)>,
}

/// Writes [`CacheState::recent`] remembers; a read-ahead that saw more come keeps nothing.
const RECENT_WRITES: usize = 1024;

/// One stream: where its last read ended, when, and how many reads in a row continued it.
#[derive(Clone, Copy)]
struct Stream {
    end: u64,
    tick: u64,
    run: u32,
}

/// A read-ahead in flight; waiters are woken when it is over (cached or not).
#[derive(Default)]
struct Fetch {
    done: Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Fetch {
    fn wait(&self) {
        let mut done = lock(&self.done);
        while !*done {
            done = match self.cv.wait(done) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
    }

    fn finish(&self) {
        *lock(&self.done) = true;
        self.cv.notify_all();
    }
}

/// Reads in a row that continue a stream before an adaptive policy reads ahead for it.
const ADAPTIVE_AFTER: u32 = 2;

struct Entry {
    data: Vec<u8>,
    used: u64,
}

/// The cache (see the module comment).
pub(crate) struct ReadCache {
    policy: AtomicU8,
    state: Mutex<CacheState>,
    write_gen: AtomicU64,
    capacity: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    ahead_reads: AtomicU64,
    ahead_bytes: AtomicU64,
}

impl ReadCache {
    /// A cache of at most `capacity` bytes, reading nothing ahead until told.
    pub(crate) fn new(capacity: u64) -> ReadCache {
        ReadCache {
            policy: AtomicU8::new(ReadAhead::None.to_u8()),
            state: Mutex::default(),
            write_gen: AtomicU64::new(0),
            capacity,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            ahead_reads: AtomicU64::new(0),
            ahead_bytes: AtomicU64::new(0),
        }
    }

    pub(crate) fn policy(&self) -> ReadAhead {
        ReadAhead::from_u8(self.policy.load(Ordering::Relaxed))
    }

    pub(crate) fn set_policy(&self, p: ReadAhead) {
        self.policy.store(p.to_u8(), Ordering::Relaxed);
        if p == ReadAhead::None {
            let mut st = lock(&self.state);
            st.entries.clear();
            st.bytes = 0;
            st.streams.clear();
        }
    }

    pub(crate) fn counters(&self) -> ReadAheadCounters {
        ReadAheadCounters {
            policy: self.policy(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            ahead_reads: self.ahead_reads.load(Ordering::Relaxed),
            ahead_bytes: self.ahead_bytes.load(Ordering::Relaxed),
            cached_bytes: lock(&self.state).bytes,
            capacity_bytes: self.capacity,
        }
    }

    /// Copies `[offset, offset + buf.len())` into `buf` when one cached range holds it whole.
    fn lookup(&self, buf: &mut [u8], offset: u64) -> bool {
        let mut st = lock(&self.state);
        st.tick += 1;
        let tick = st.tick;
        let Some((&start, entry)) = st.entries.range_mut(..=offset).next_back() else {
            return false;
        };
        let end = start + entry.data.len() as u64;
        if offset + buf.len() as u64 > end {
            return false;
        }
        let at = (offset - start) as usize;
        buf.copy_from_slice(&entry.data[at..at + buf.len()]);
        entry.used = tick;
        // A stream that reads on through the cache stays sequential.
        note_stream(&mut st, offset, offset + buf.len() as u64, tick);
        true
    }

    /// How far past `end` a read of `[offset, end)` that missed should read (0: not at
    /// all), given `stripe` bytes per stripe and `max` bytes at most; notes the stream.
    fn ahead_len(&self, policy: ReadAhead, offset: u64, end: u64, stripe: u64, max: u64) -> u64 {
        let mut st = lock(&self.state);
        st.tick += 1;
        let tick = st.tick;
        let run = note_stream(&mut st, offset, end, tick);
        match policy {
            ReadAhead::None => 0,
            // To the end of the stripe and one more.
            ReadAhead::Always => end.div_ceil(stripe) * stripe + stripe - end,
            ReadAhead::Adaptive if run < ADAPTIVE_AFTER => 0,
            ReadAhead::Adaptive => {
                let req = end - offset;
                let shift = (run - ADAPTIVE_AFTER + 1).min(16);
                let len = req.saturating_mul(1 << shift).min(max);
                if len >= stripe {
                    // Whole stripes from the members once the window is that long.
                    (end + len).div_ceil(stripe) * stripe - end
                } else {
                    len
                }
            }
        }
    }

    /// A read-ahead in flight that holds `[offset, end)`, to wait for.
    fn inflight_over(&self, offset: u64, end: u64) -> Option<Arc<Fetch>> {
        lock(&self.state)
            .inflight
            .iter()
            .find(|(s, e, _)| *s <= offset && end <= *e)
            .map(|(_, _, f)| f.clone())
    }

    /// Registers a read-ahead of `[offset, end)`.
    fn start_fetch(&self, offset: u64, end: u64) -> Arc<Fetch> {
        let f = Arc::new(Fetch::default());
        lock(&self.state).inflight.push((offset, end, f.clone()));
        f
    }

    fn end_fetch(&self, fetch: &Arc<Fetch>) {
        lock(&self.state)
            .inflight
            .retain(|(_, _, f)| !Arc::ptr_eq(f, fetch));
        fetch.finish();
    }

    /// Keeps `data` as the array's bytes from `offset`, unless a write came since
    /// generation `gen`.
    fn insert(&self, offset: u64, data: Vec<u8>, gen: u64) {
        if data.is_empty() || data.len() as u64 > self.capacity {
            return;
        }
        let mut st = lock(&self.state);
        // The policy went to none while it read: writes then skip the cache, so nothing
        // may be kept for a later policy to serve.
        if self.policy() == ReadAhead::None {
            return;
        }
        let now = self.write_gen.load(Ordering::Acquire);
        // Writes came while it read: kept only when every one is remembered, and without
        // what they wrote.
        let raced: Vec<(u64, u64)> = st
            .recent
            .iter()
            .filter(|w| w.0 > gen)
            .map(|w| (w.1, w.2))
            .collect();
        if raced.len() as u64 != now - gen {
            return;
        }
        let end = offset + data.len() as u64;
        drop_overlapping(&mut st, offset, end);
        st.tick += 1;
        let used = st.tick;
        st.bytes += data.len() as u64;
        st.entries.insert(offset, Entry { data, used });
        for (w_off, w_len) in raced {
            drop_overlapping(&mut st, w_off, w_off + w_len);
        }
        while st.bytes > self.capacity {
            let Some((&oldest, _)) = st.entries.iter().min_by_key(|(_, e)| e.used) else {
                break;
            };
            if let Some(e) = st.entries.remove(&oldest) {
                st.bytes -= e.data.len() as u64;
            }
        }
    }

    /// A write to `[offset, offset + len)`: what the cache holds there is dropped.
    pub(crate) fn invalidate(&self, offset: u64, len: u64) {
        if self.policy() == ReadAhead::None && self.write_gen.load(Ordering::Relaxed) == 0 {
            // Never used: nothing cached (a policy set later starts from an empty cache).
            return;
        }
        let mut st = lock(&self.state);
        let gen = self.write_gen.fetch_add(1, Ordering::AcqRel) + 1;
        drop_overlapping(&mut st, offset, offset + len);
        if st.recent.len() == RECENT_WRITES {
            st.recent.pop_front();
        }
        st.recent.push_back((gen, offset, len));
    }
}

/// Notes a read of `[offset, end)` in the stream table; returns how many reads in a row
/// continued its stream where the last ended (0: a new stream).
fn note_stream(st: &mut CacheState, offset: u64, end: u64, tick: u64) -> u32 {
    if let Some(s) = st.streams.iter_mut().find(|s| s.end == offset) {
        *s = Stream {
            end,
            tick,
            run: s.run.saturating_add(1),
        };
        return s.run;
    }
    let fresh = Stream { end, tick, run: 0 };
    if st.streams.len() < STREAMS {
        st.streams.push(fresh);
    } else if let Some(oldest) = st.streams.iter_mut().min_by_key(|s| s.tick) {
        *oldest = fresh;
    }
    0
}

/// Drops the cached bytes of `[offset, end)`; the parts of a range outside it stay (a
/// stream's occasional write costs the stream's read-ahead only the bytes written).
fn drop_overlapping(st: &mut CacheState, offset: u64, end: u64) {
    let doomed: Vec<u64> = st
        .entries
        .range(..end)
        .rev()
        // Ranges never overlap: the first from the top that ends before `offset` is the last.
        .take_while(|(&s, e)| s + e.data.len() as u64 > offset)
        .map(|(&s, _)| s)
        .collect();
    for s in doomed {
        let Some(mut e) = st.entries.remove(&s) else {
            continue;
        };
        st.bytes -= e.data.len() as u64;
        let e_end = s + e.data.len() as u64;
        if e_end > end {
            let tail = e.data.split_off((end - s) as usize);
            st.bytes += tail.len() as u64;
            st.entries.insert(
                end,
                Entry {
                    data: tail,
                    used: e.used,
                },
            );
        }
        if s < offset {
            e.data.truncate((offset - s) as usize);
            st.bytes += e.data.len() as u64;
            st.entries.insert(s, e);
        }
    }
}

impl Array {
    /// The read policy (see `array/read_ahead.rs`); `None` unless set.
    pub fn read_ahead_policy(&self) -> ReadAhead {
        self.read_cache.policy()
    }

    /// Sets the read policy; `None` empties the cache.
    pub fn set_read_ahead(&self, policy: ReadAhead) {
        self.read_cache.set_policy(policy);
    }

    /// What the read cache has done since assembly.
    pub fn read_ahead_counters(&self) -> ReadAheadCounters {
        self.read_cache.counters()
    }

    /// The most one read-ahead reads past the request: two whole stripes on parity levels
    /// (at least 1 MiB), 1 MiB where there are no stripes.
    fn max_ahead(&self) -> u64 {
        match self.full_stripe_bytes() {
            Some(stripe) => (2 * stripe).max((1u64 << 20).div_ceil(stripe) * stripe),
            None => 1 << 20,
        }
    }

    /// A read through the cache: served from it, extended ahead, or passed on as asked.
    pub(super) fn read_cached(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let cache = &self.read_cache;
        let policy = cache.policy();
        if policy == ReadAhead::None {
            return self.read_direct(buf, offset);
        }
        let end = offset + buf.len() as u64;
        // A read-ahead in flight holds it: wait, then look again (a write may have come).
        if let Some(f) = cache.inflight_over(offset, end) {
            f.wait();
        }
        if cache.lookup(buf, offset) {
            cache.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        cache.misses.fetch_add(1, Ordering::Relaxed);
        let stripe = self.full_stripe_bytes().unwrap_or(64 << 10);
        let ahead = cache.ahead_len(policy, offset, end, stripe, self.max_ahead());
        let until = (end + ahead).min(self.size_bytes());
        if until <= end {
            return self.read_direct(buf, offset);
        }
        let gen = cache.write_gen.load(Ordering::Acquire);
        let fetch = cache.start_fetch(offset, until);
        let mut data = vec![0u8; (until - offset) as usize];
        let read = self.read_direct(&mut data, offset);
        if read.is_ok() {
            buf.copy_from_slice(&data[..buf.len()]);
            cache.ahead_reads.fetch_add(1, Ordering::Relaxed);
            cache.ahead_bytes.fetch_add(until - end, Ordering::Relaxed);
            let rest = data.split_off(buf.len());
            cache.insert(end, rest, gen);
        }
        cache.end_fetch(&fetch);
        match read {
            Ok(()) => Ok(()),
            // What lies ahead may be unreadable where the request is not (past a rebuild's
            // cursor on a degraded array, a bad patch): the request alone, as asked.
            Err(_) => self.read_direct(buf, offset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_with(policy: ReadAhead, cap: u64) -> ReadCache {
        let c = ReadCache::new(cap);
        c.set_policy(policy);
        c
    }

    #[test]
    fn a_write_drops_what_it_overlaps_and_a_raced_fill_keeps_nothing() {
        let c = cache_with(ReadAhead::Always, 1 << 20);
        c.insert(4096, vec![7u8; 8192], 0);
        let mut buf = [0u8; 4096];
        assert!(c.lookup(&mut buf, 8192));
        assert_eq!(buf, [7u8; 4096]);
        c.invalidate(12287, 1);
        assert!(!c.lookup(&mut buf, 8192), "the overlapped byte is gone");
        assert!(c.lookup(&mut buf[..4095], 8192), "the bytes before it stay");
        assert_eq!(c.counters().cached_bytes, 8191);
        c.invalidate(0, 1 << 20);
        assert_eq!(c.counters().cached_bytes, 0);
        // A write inside a range keeps both ends.
        c.insert(0, (0..=255u8).cycle().take(16384).collect(), 2);
        c.invalidate(4096, 4096);
        let mut two = [0u8; 2];
        assert!(!c.lookup(&mut two, 4095) && c.lookup(&mut two, 4094) && c.lookup(&mut two, 8192));
        assert_eq!(two, [0, 1]);
        assert_eq!(c.counters().cached_bytes, 12288);
        c.invalidate(0, 1 << 20);
        // A fill that started before the writes (generation 0; they made it 4) keeps what
        // they did not write: the last one covered it all.
        c.insert(0, vec![1u8; 4096], 0);
        assert!(!c.lookup(&mut buf, 0));
        c.insert(0, vec![1u8; 4096], 4);
        assert!(c.lookup(&mut buf, 0));
        // A write elsewhere leaves it.
        c.invalidate(4096, 4096);
        c.insert(8192, vec![2u8; 4096], 5);
        assert!(c.lookup(&mut buf, 8192));
    }

    #[test]
    fn a_fill_that_writes_raced_keeps_all_but_what_they_wrote() {
        let c = cache_with(ReadAhead::Always, 1 << 20);
        let gen = c.write_gen.load(Ordering::Acquire);
        c.invalidate(4096, 4096); // a write in the middle of the fill's range
        c.insert(0, vec![9u8; 16384], gen);
        let mut buf = [0u8; 4096];
        assert!(c.lookup(&mut buf, 0) && c.lookup(&mut buf, 8192));
        assert!(!c.lookup(&mut buf, 4096), "the written bytes are not kept");
        // More writes than are remembered: nothing kept.
        let gen = c.write_gen.load(Ordering::Acquire);
        for i in 0..=RECENT_WRITES as u64 {
            c.invalidate((1 << 30) + i * 4096, 4096);
        }
        c.insert(65536, vec![9u8; 4096], gen);
        assert!(!c.lookup(&mut buf, 65536));
    }

    #[test]
    fn a_fill_that_ends_after_the_policy_went_to_none_keeps_nothing() {
        let c = cache_with(ReadAhead::Always, 1 << 20);
        let gen = c.write_gen.load(Ordering::Acquire);
        c.set_policy(ReadAhead::None);
        c.invalidate(0, 4096); // skipped: no cache in use
        c.insert(0, vec![1u8; 4096], gen);
        c.set_policy(ReadAhead::Always);
        let mut buf = [0u8; 4096];
        assert!(
            !c.lookup(&mut buf, 0),
            "data from before the write is not served"
        );
    }

    #[test]
    fn the_cache_stays_within_its_bound_dropping_the_least_recently_used() {
        let c = cache_with(ReadAhead::Always, 3 * 4096);
        for i in 0..3u64 {
            c.insert(i * 4096, vec![i as u8; 4096], 0);
        }
        let mut buf = [0u8; 4096];
        assert!(
            c.lookup(&mut buf, 0),
            "range 0 used: range 1 is now the oldest"
        );
        c.insert(3 * 4096, vec![3u8; 4096], 0);
        assert_eq!(c.counters().cached_bytes, 3 * 4096);
        assert!(!c.lookup(&mut buf, 4096));
        assert!(c.lookup(&mut buf, 0) && c.lookup(&mut buf, 8192));
        assert!(c.lookup(&mut buf, 12288));
    }

    #[test]
    fn adaptive_follows_streams_and_drops_back_on_random_reads() {
        let c = cache_with(ReadAhead::Adaptive, 1 << 20);
        let (stripe, max) = (256 << 10, 1 << 20);
        let ahead = |off: u64| c.ahead_len(ReadAhead::Adaptive, off, off + 4096, stripe, max);
        assert_eq!(ahead(0), 0, "a first read");
        assert_eq!(ahead(4096), 0, "once continued: not yet a stream");
        assert_eq!(ahead(8192), 8192, "twice: twice the request");
        // Another client's stream interleaved keeps the first one's.
        assert_eq!(ahead(1 << 30), 0);
        assert_eq!(ahead(12288), 16384, "the window doubles");
        assert_eq!(ahead(16384), 32768);
        for k in 5..12u64 {
            ahead(k * 4096);
        }
        // Grown past a stripe: to a stripe's end, never past the bound.
        let a = ahead(12 * 4096);
        assert!(a <= max + stripe && (13 * 4096 + a) % stripe == 0, "{a}");
        // Random reads are not followed.
        for i in 0..64u64 {
            assert_eq!(ahead(i * 7919 * 4096 + 17), 0);
        }
        // Always: to the end of the stripe and one more.
        assert_eq!(
            c.ahead_len(ReadAhead::Always, 3, 4, stripe, max),
            2 * stripe - 4
        );
    }
}
