//! Simulated member disks with a fault model, and the [`SimWorld`] that owns them.
//!
//! Each [`SimDisk`] keeps two images apart (as redb's crash test does): `live` bytes, which
//! reads return, and `durable` bytes, which survive a power loss; between them sits a volatile
//! write cache, the ordered list of writes completed since the last flush. Faults live in a
//! separate fault map (as TigerBeetle's testing storage does), never in the bytes: a dead
//! member, latent sector errors, write errors, fail-after-N operations, latency and stalls.
//!
//! A crash ([`SimWorld::crash`]) powers every disk off at once. For each cached write the seed
//! decides whether it reached the medium whole, not at all, or torn at sector granularity, in
//! any order (a write-back cache may reorder); the rest is lost, and `live` becomes `durable`.
//! A crash in the middle of an array operation is covered by this: the operation's member
//! writes are all still in the caches, and any subset of their sectors may survive.
//!
//! Determinism: every fault decision draws from the disk's own generator, advanced once per
//! operation on that disk. The engine drives each member from one worker thread in submission
//! order, so the per-disk operation sequence, and with it every decision, is fixed by the seed
//! even though members run concurrently. Latency is virtual (summed nanoseconds) unless a real
//! delay is configured, so the default path never sleeps.

use crate::rng::{mix, Rng};
use raidkit_disk::{Disk, DiskError, DiskErrorKind};
use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Sector size the fault model works in.
pub const SECTOR_BYTES: u64 = 512;

/// Faults configured on one disk. All rates are per mille per operation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultConfig {
    /// Every operation fails.
    pub dead: bool,
    /// Reads touching these sectors fail (latent sector errors); a write over a sector clears it
    /// (the drive remaps it), as a real drive does.
    pub bad_sectors: BTreeSet<u64>,
    /// Chance that a write fails; a failed write may still have landed in part (a prefix of its
    /// sectors), as after a real medium or transport error.
    pub write_error_per_mille: u32,
    /// Chance that a read fails.
    pub read_error_per_mille: u32,
    /// The disk dies after this many more operations.
    pub fail_after_ops: Option<u64>,
    /// Virtual latency per operation in nanoseconds, and a multiplier for a slow member.
    pub latency_ns: u64,
    pub slow_factor: u32,
    /// Chance that an operation stalls, and for how long (virtual nanoseconds).
    pub stall_per_mille: u32,
    pub stall_ns: u64,
    /// Real sleep per operation in microseconds (0: never sleep; the default).
    pub real_delay_us: u64,
}

/// How cached writes fare at a crash (per mille of cached writes; the rest land whole).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashPolicy {
    pub lost_per_mille: u32,
    pub torn_per_mille: u32,
}

impl Default for CrashPolicy {
    fn default() -> Self {
        CrashPolicy {
            lost_per_mille: 350,
            torn_per_mille: 300,
        }
    }
}

/// Counters of one disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskCounters {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub injected_errors: u64,
    pub virtual_ns: u64,
    pub stalls: u64,
    /// At crashes: cached writes that landed whole, were lost, or were torn.
    pub crash_landed: u64,
    pub crash_lost: u64,
    pub crash_torn: u64,
}

struct CachedWrite {
    offset_bytes: u64,
    data: Vec<u8>,
}

struct DiskState {
    live: Vec<u8>,
    durable: Vec<u8>,
    cache: Vec<CachedWrite>,
    cache_bytes: usize,
    faults: FaultConfig,
    rng: Rng,
    powered: bool,
    counters: DiskCounters,
    /// Bytes whose first write, while a power cut is armed, cuts the power (see
    /// [`SimWorld::arm_power_cut`]).
    cut_range: Option<(u64, u64)>,
}

/// A power cut shared by every disk of a world: armed, it fires at the first write into a
/// disk's cut range; fired, every operation on every disk fails until the world powers on.
#[derive(Default)]
struct PowerCut {
    armed: AtomicBool,
    fired: AtomicBool,
}

/// Bytes the volatile cache holds before it writes back its oldest half on its own (a real
/// cache writes back whenever it likes; hardening early is always allowed).
const CACHE_LIMIT_BYTES: usize = 8 << 20;

/// One simulated member. Cheap to clone: clones share the same state, so the world keeps a
/// handle while the array owns another.
#[derive(Clone)]
pub struct SimDisk {
    name: Arc<str>,
    size_bytes: u64,
    state: Arc<Mutex<DiskState>>,
    power: Arc<PowerCut>,
}

impl std::fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimDisk({}, {} bytes)", self.name, self.size_bytes)
    }
}

fn sim_error(name: &str, op: &'static str, offset_bytes: u64, why: &str) -> DiskError {
    DiskError::new(
        name,
        op,
        offset_bytes,
        DiskErrorKind::Io(io::Error::other(format!("simulated {why}"))),
    )
}

impl SimDisk {
    /// A zero-filled disk whose fault decisions come from `seed`.
    pub fn new(name: &str, size_bytes: u64, seed: u64) -> SimDisk {
        SimDisk {
            name: name.into(),
            size_bytes,
            state: Arc::new(Mutex::new(DiskState {
                live: vec![0; size_bytes as usize],
                durable: vec![0; size_bytes as usize],
                cache: Vec::new(),
                cache_bytes: 0,
                faults: FaultConfig::default(),
                rng: Rng::new(seed),
                powered: true,
                counters: DiskCounters::default(),
                cut_range: None,
            })),
            power: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, DiskState> {
        // A panic elsewhere leaves the state whole: every update below completes or not at all.
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Changes the disk's faults.
    pub fn set_faults(&self, faults: FaultConfig) {
        self.lock().faults = faults;
    }

    pub fn update_faults(&self, f: impl FnOnce(&mut FaultConfig)) {
        f(&mut self.lock().faults);
    }

    pub fn faults(&self) -> FaultConfig {
        self.lock().faults.clone()
    }

    pub fn counters(&self) -> DiskCounters {
        self.lock().counters
    }

    /// The bytes reads would return now, ignoring faults (for checkers).
    pub fn peek_live(&self, offset_bytes: u64, len_bytes: usize) -> Vec<u8> {
        let st = self.lock();
        let o = offset_bytes as usize;
        st.live[o..o + len_bytes].to_vec()
    }

    /// The bytes that would survive a crash now.
    pub fn peek_durable(&self, offset_bytes: u64, len_bytes: usize) -> Vec<u8> {
        let st = self.lock();
        let o = offset_bytes as usize;
        st.durable[o..o + len_bytes].to_vec()
    }

    /// Silent corruption: overwrites bytes in both images without any error, bypassing the
    /// cache and the faults (bit rot, a misdirected write by the drive). For checker tests.
    pub fn scribble(&self, offset_bytes: u64, data: &[u8]) {
        let mut st = self.lock();
        let o = offset_bytes as usize;
        st.live[o..o + data.len()].copy_from_slice(data);
        st.durable[o..o + data.len()].copy_from_slice(data);
    }

    /// The whole durable image: what the disk would hold after a crash now.
    pub fn durable_image(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }

    /// Writes back the whole cache (what a completed flush does).
    pub fn harden(&self) {
        let mut st = self.lock();
        harden_all(&mut st);
    }

    /// Power loss: cached writes land whole, torn or not at all as the crash generator says.
    fn crash(&self, policy: CrashPolicy, rng: &mut Rng) {
        let mut st = self.lock();
        let cache = std::mem::take(&mut st.cache);
        st.cache_bytes = 0;
        let mut touched: Vec<(usize, usize)> = Vec::with_capacity(cache.len());
        for w in cache {
            let o = w.offset_bytes as usize;
            let n = w.data.len();
            touched.push((o, n));
            let roll = rng.below(1000) as u32;
            if roll < policy.lost_per_mille {
                st.counters.crash_lost += 1;
            } else if roll < policy.lost_per_mille + policy.torn_per_mille {
                st.counters.crash_torn += 1;
                // Each sector independently: the cache may have written any of them.
                let sectors = n / SECTOR_BYTES as usize;
                for s in 0..sectors {
                    if rng.below(2) == 0 {
                        let a = s * SECTOR_BYTES as usize;
                        let b = a + SECTOR_BYTES as usize;
                        st.durable[o + a..o + b].copy_from_slice(&w.data[a..b]);
                    }
                }
            } else {
                st.counters.crash_landed += 1;
                st.durable[o..o + n].copy_from_slice(&w.data);
            }
        }
        let DiskState { live, durable, .. } = &mut *st;
        for (o, n) in touched {
            live[o..o + n].copy_from_slice(&durable[o..o + n]);
        }
        st.powered = false;
    }

    fn power_on(&self) {
        self.lock().powered = true;
    }

    /// Common entry of every operation: power, death, countdown, latency. Returns the state
    /// guard when the operation may proceed.
    fn begin(
        &self,
        op: &'static str,
        offset_bytes: u64,
    ) -> Result<MutexGuard<'_, DiskState>, DiskError> {
        let mut st = self.lock();
        if !st.powered || self.power.fired.load(Ordering::SeqCst) {
            return Err(sim_error(&self.name, op, offset_bytes, "power loss"));
        }
        if let Some(n) = st.faults.fail_after_ops {
            if n == 0 {
                st.faults.dead = true;
                st.faults.fail_after_ops = None;
            } else {
                st.faults.fail_after_ops = Some(n - 1);
            }
        }
        if st.faults.dead {
            st.counters.injected_errors += 1;
            return Err(sim_error(&self.name, op, offset_bytes, "dead member"));
        }
        let mut ns = st.faults.latency_ns * st.faults.slow_factor.max(1) as u64;
        let rate = st.faults.stall_per_mille;
        if rate > 0 && st.rng.chance(rate) {
            ns += st.faults.stall_ns;
            st.counters.stalls += 1;
        }
        st.counters.virtual_ns += ns;
        let delay = st.faults.real_delay_us;
        if delay > 0 {
            drop(st);
            std::thread::sleep(std::time::Duration::from_micros(delay));
            st = self.lock();
        }
        Ok(st)
    }

    fn check_range(&self, op: &'static str, offset_bytes: u64, len: u64) -> Result<(), DiskError> {
        match offset_bytes.checked_add(len) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(DiskError::new(
                &self.name,
                op,
                offset_bytes,
                DiskErrorKind::OutOfRange {
                    len_bytes: len,
                    size_bytes: self.size_bytes,
                },
            )),
        }
    }

    fn store(&self, op: &'static str, offset_bytes: u64, data: Vec<u8>) -> Result<(), DiskError> {
        self.check_range(op, offset_bytes, data.len() as u64)?;
        let mut st = self.begin(op, offset_bytes)?;
        if self.power.armed.load(Ordering::SeqCst) {
            let end = offset_bytes + data.len() as u64;
            if st
                .cut_range
                .is_some_and(|(a, b)| offset_bytes < b && a < end)
            {
                // The power goes before this write reaches the disk; nothing after it lands.
                self.power.armed.store(false, Ordering::SeqCst);
                self.power.fired.store(true, Ordering::SeqCst);
                return Err(sim_error(&self.name, op, offset_bytes, "power loss"));
            }
        }
        st.counters.writes += 1;
        let n = data.len();
        let first = offset_bytes / SECTOR_BYTES;
        let last = (offset_bytes + n as u64).div_ceil(SECTOR_BYTES);
        let rate = st.faults.write_error_per_mille;
        if rate > 0 && st.rng.chance(rate) {
            st.counters.injected_errors += 1;
            // Part of it may have landed: a random whole-sector prefix.
            let sectors = n as u64 / SECTOR_BYTES;
            let keep = (st.rng.below(sectors + 1) * SECTOR_BYTES) as usize;
            if keep > 0 {
                apply(&mut st, offset_bytes, data[..keep].to_vec());
            }
            return Err(sim_error(&self.name, op, offset_bytes, "write error"));
        }
        if !st.faults.bad_sectors.is_empty() {
            let remapped: Vec<u64> = st.faults.bad_sectors.range(first..last).copied().collect();
            for s in remapped {
                st.faults.bad_sectors.remove(&s);
            }
        }
        apply(&mut st, offset_bytes, data);
        Ok(())
    }
}

fn apply(st: &mut DiskState, offset_bytes: u64, data: Vec<u8>) {
    let o = offset_bytes as usize;
    st.live[o..o + data.len()].copy_from_slice(&data);
    st.cache_bytes += data.len();
    st.cache.push(CachedWrite { offset_bytes, data });
    if st.cache_bytes > CACHE_LIMIT_BYTES {
        let half = st.cache.len().div_ceil(2);
        let old: Vec<CachedWrite> = st.cache.drain(..half).collect();
        for w in old {
            let o = w.offset_bytes as usize;
            st.cache_bytes -= w.data.len();
            st.durable[o..o + w.data.len()].copy_from_slice(&w.data);
        }
    }
}

fn harden_all(st: &mut DiskState) {
    let cache = std::mem::take(&mut st.cache);
    st.cache_bytes = 0;
    for w in cache {
        let o = w.offset_bytes as usize;
        st.durable[o..o + w.data.len()].copy_from_slice(&w.data);
    }
}

impl Disk for SimDisk {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.check_range("read", offset_bytes, buf.len() as u64)?;
        let mut st = self.begin("read", offset_bytes)?;
        st.counters.reads += 1;
        let first = offset_bytes / SECTOR_BYTES;
        let last = (offset_bytes + buf.len() as u64).div_ceil(SECTOR_BYTES);
        if st.faults.bad_sectors.range(first..last).next().is_some() {
            st.counters.injected_errors += 1;
            return Err(sim_error(
                &self.name,
                "read",
                offset_bytes,
                "latent sector error",
            ));
        }
        let rate = st.faults.read_error_per_mille;
        if rate > 0 && st.rng.chance(rate) {
            st.counters.injected_errors += 1;
            return Err(sim_error(&self.name, "read", offset_bytes, "read error"));
        }
        let o = offset_bytes as usize;
        buf.copy_from_slice(&st.live[o..o + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.store("write", offset_bytes, buf.to_vec())
    }

    fn flush(&self) -> Result<(), DiskError> {
        let mut st = self.begin("flush", 0)?;
        st.counters.flushes += 1;
        harden_all(&mut st);
        Ok(())
    }

    /// The write lands on the media before it returns; other cached writes stay cached,
    /// but those it overlaps are written back first (a cache may write back whenever it
    /// likes), so an older one cannot land over it at a crash.
    fn write_fua(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.store("write", offset_bytes, buf.to_vec())?;
        let mut st = self.lock();
        let (a, b) = (offset_bytes, offset_bytes + buf.len() as u64);
        let DiskState {
            cache,
            cache_bytes,
            durable,
            ..
        } = &mut *st;
        // Everything up to and including this write (the newest cached write over its range).
        let last = cache
            .iter()
            .rposition(|w| w.offset_bytes < b && a < w.offset_bytes + w.data.len() as u64);
        if let Some(last) = last {
            let mut seen = 0;
            cache.retain(|w| {
                let keep = seen > last
                    || !(w.offset_bytes < b && a < w.offset_bytes + w.data.len() as u64);
                seen += 1;
                if !keep {
                    let o = w.offset_bytes as usize;
                    durable[o..o + w.data.len()].copy_from_slice(&w.data);
                    *cache_bytes -= w.data.len();
                }
                keep
            });
        }
        Ok(())
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.check_range("discard", offset_bytes, len_bytes)?;
        self.store("discard", offset_bytes, vec![0; len_bytes as usize])
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.check_range("write-zeroes", offset_bytes, len_bytes)?;
        self.store("write-zeroes", offset_bytes, vec![0; len_bytes as usize])
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn logical_block_size(&self) -> u32 {
        SECTOR_BYTES as u32
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn is_read_only(&self) -> bool {
        false
    }
}

/// Every simulated disk of one run, so a crash can take them all down at once.
pub struct SimWorld {
    seed: u64,
    disks: Vec<SimDisk>,
    crashes: u64,
    pub crash_policy: CrashPolicy,
    power: Arc<PowerCut>,
}

impl SimWorld {
    pub fn new(seed: u64) -> SimWorld {
        SimWorld {
            seed,
            disks: Vec::new(),
            crashes: 0,
            crash_policy: CrashPolicy::default(),
            power: Arc::default(),
        }
    }

    /// Creates a disk named `sim<index>`; its faults draw from the world's seed and its index.
    pub fn add_disk(&mut self, size_bytes: u64) -> SimDisk {
        let index = self.disks.len();
        let mut d = SimDisk::new(
            &format!("sim{index}"),
            size_bytes,
            mix(self.seed, 0x1000 + index as u64),
        );
        d.power = self.power.clone();
        self.disks.push(d.clone());
        d
    }

    /// Arms a power cut: the first write that touches `ranges[i]` (bytes `[start, end)`) of
    /// disk `i` never lands, and from then on every operation on every disk fails, as if the
    /// machine died just before it; what was cached is left for [`SimWorld::crash`] to decide.
    /// A disk without a range (`None`) does not fire it.
    pub fn arm_power_cut(&self, ranges: &[Option<(u64, u64)>]) {
        for (d, r) in self.disks.iter().zip(ranges) {
            d.lock().cut_range = *r;
        }
        self.power.fired.store(false, Ordering::SeqCst);
        self.power.armed.store(true, Ordering::SeqCst);
    }

    /// Disarms a power cut that has not fired.
    pub fn disarm_power_cut(&self) {
        self.power.armed.store(false, Ordering::SeqCst);
    }

    /// Whether an armed power cut has fired.
    pub fn power_was_cut(&self) -> bool {
        self.power.fired.load(Ordering::SeqCst)
    }

    /// Whether a power cut is armed and has not fired.
    pub fn power_cut_armed(&self) -> bool {
        self.power.armed.load(Ordering::SeqCst)
    }

    pub fn disks(&self) -> &[SimDisk] {
        &self.disks
    }

    pub fn disk(&self, index: usize) -> &SimDisk {
        &self.disks[index]
    }

    /// Power loss on every disk at once; afterwards each holds only its durable bytes and
    /// refuses I/O until [`SimWorld::power_on`]. `hardened` disks first write back their cache
    /// (a crash in the middle of a flush that reached only some members).
    pub fn crash(&mut self, hardened: &[usize]) {
        let mut rng = Rng::new(mix(self.seed, 0x2000 + self.crashes));
        self.crashes += 1;
        for &i in hardened {
            if let Some(d) = self.disks.get(i) {
                d.harden();
            }
        }
        for d in &self.disks {
            d.crash(self.crash_policy, &mut rng);
        }
    }

    /// Powers every disk on after a crash; an armed or fired power cut is cleared.
    pub fn power_on(&self) {
        self.power.armed.store(false, Ordering::SeqCst);
        self.power.fired.store(false, Ordering::SeqCst);
        for d in &self.disks {
            d.lock().cut_range = None;
            d.power_on();
        }
    }

    pub fn crashes(&self) -> u64 {
        self.crashes
    }

    /// Handles to every disk not dead, to reassemble from (a dead member is absent, as a
    /// vanished device is).
    pub fn surviving_disks(&self) -> Vec<SimDisk> {
        self.disks
            .iter()
            .filter(|d| !d.lock().faults.dead)
            .cloned()
            .collect()
    }

    /// Sum of every disk's counters.
    pub fn counters(&self) -> DiskCounters {
        let mut t = DiskCounters::default();
        for d in &self.disks {
            let c = d.counters();
            t.reads += c.reads;
            t.writes += c.writes;
            t.flushes += c.flushes;
            t.injected_errors += c.injected_errors;
            t.virtual_ns += c.virtual_ns;
            t.stalls += c.stalls;
            t.crash_landed += c.crash_landed;
            t.crash_lost += c.crash_lost;
            t.crash_torn += c.crash_torn;
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unflushed_writes_may_be_lost_flushed_ones_stay() {
        let mut w = SimWorld::new(7);
        w.crash_policy = CrashPolicy {
            lost_per_mille: 1000,
            torn_per_mille: 0,
        };
        let d = w.add_disk(8192);
        d.write_at(&[1u8; 512], 0).unwrap();
        d.flush().unwrap();
        d.write_at(&[2u8; 512], 512).unwrap();
        let mut b = [0u8; 1024];
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(&b[512..], &[2u8; 512][..]);
        w.crash(&[]);
        assert!(d.read_at(&mut b, 0).is_err(), "no I/O without power");
        w.power_on();
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(&b[..512], &[1u8; 512][..]);
        assert_eq!(&b[512..], &[0u8; 512][..]);
    }

    #[test]
    fn torn_writes_land_per_sector() {
        let mut w = SimWorld::new(3);
        w.crash_policy = CrashPolicy {
            lost_per_mille: 0,
            torn_per_mille: 1000,
        };
        let d = w.add_disk(64 * 512);
        d.write_at(&[9u8; 64 * 512], 0).unwrap();
        w.crash(&[]);
        w.power_on();
        let img = d.peek_live(0, 64 * 512);
        let landed = img.chunks(512).filter(|s| s[0] == 9).count();
        assert!(landed > 0 && landed < 64, "{landed} of 64 sectors landed");
        for s in img.chunks(512) {
            assert!(s.iter().all(|&b| b == s[0]), "a sector is never split");
        }
    }

    #[test]
    fn latent_errors_fail_reads_until_rewritten_and_dead_disks_fail_all() {
        let w = &mut SimWorld::new(1);
        let d = w.add_disk(4096);
        d.update_faults(|f| {
            f.bad_sectors.insert(3);
        });
        let mut b = [0u8; 512];
        assert!(d.read_at(&mut b, 3 * 512).is_err());
        assert!(d.read_at(&mut b, 2 * 512).is_ok());
        d.write_at(&[5u8; 512], 3 * 512).unwrap();
        assert!(d.read_at(&mut b, 3 * 512).is_ok());
        d.update_faults(|f| f.fail_after_ops = Some(1));
        assert!(d.read_at(&mut b, 0).is_ok());
        assert!(d.read_at(&mut b, 0).is_err());
        assert!(d.flush().is_err());
        assert!(d.counters().injected_errors >= 3);
    }

    #[test]
    fn an_armed_power_cut_fires_at_the_first_write_into_its_range_and_stops_every_disk() {
        let mut w = SimWorld::new(7);
        let a = w.add_disk(64 * 1024);
        let b = w.add_disk(64 * 1024);
        a.write_at(&[1; 512], 0).unwrap();
        a.flush().unwrap();
        w.arm_power_cut(&[Some((4096, 8192)), None]);
        // Writes outside the range and on a disk without one go on.
        a.write_at(&[2; 512], 0).unwrap();
        b.write_at(&[3; 512], 4096).unwrap();
        assert!(w.power_cut_armed() && !w.power_was_cut());
        // The write into the range never lands, and nothing after it does either.
        assert!(a.write_at(&[4; 512], 4096 + 512).is_err());
        assert!(w.power_was_cut() && !w.power_cut_armed());
        assert!(b.write_at(&[5; 512], 0).is_err());
        assert!(b.flush().is_err());
        let mut buf = [0u8; 512];
        assert!(a.read_at(&mut buf, 0).is_err());
        assert_eq!(a.peek_live(4096 + 512, 512), vec![0; 512]);
        assert_eq!(b.peek_live(0, 512), vec![0; 512]);
        // The crash then decides what the caches held; the flushed write is there for sure.
        w.crash(&[]);
        w.power_on();
        assert!(!w.power_was_cut());
        a.read_at(&mut buf, 4096 + 512).unwrap();
        assert_eq!(buf, [0; 512]);
        let first = a.peek_durable(0, 512);
        assert!(first.iter().all(|&x| x == 1 || x == 2), "{first:?}");
        // Powered on, the cut is gone: a write into the old range lands.
        a.write_at(&[6; 512], 4096).unwrap();
    }

    #[test]
    fn same_seed_same_crash() {
        let run = |seed| {
            let mut w = SimWorld::new(seed);
            let d = w.add_disk(32 * 512);
            for i in 0..32u64 {
                d.write_at(&[i as u8 + 1; 512], i * 512).unwrap();
            }
            w.crash(&[]);
            d.peek_durable(0, 32 * 512)
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
    }
}
