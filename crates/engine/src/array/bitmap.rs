//! md's internal write-intent bitmap, kept the way md keeps it: a bit per bitmap chunk of the
//! resync space (member sectors for RAID 1/4/5/6, array sectors for RAID 10) says "writes may
//! have been in flight here".
//!
//! Invariants (md-bitmap.c's): a bit is set and on every member's copy of the bitmap, flushed,
//! before the first write to its region starts; it is cleared only after the writes to its
//! region have completed and been flushed, the region has been idle for a while (md's
//! daemon_sleep), and the array is whole: while the array is degraded nothing is cleared, so
//! the bits then describe everything a missing member has missed, and a member that comes back
//! (md's re-add) is brought up to date from them alone. `events_cleared` records the events
//! count when bits were last cleared; a returning member whose events are older cannot use the
//! bits. The bitmap superblock's events follow the array superblock's.
//!
//! Lock order: the array state lock may be held when the bitmap lock is taken, never the other
//! way round (member lists are taken from the state before the bitmap lock).

use super::write_log::IntentHooks;
use super::*;
use raidkit_metadata::{BitmapBits, BitmapSuper};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// md's default daemon_sleep: bits idle this long are cleared.
pub(crate) const CLEAR_AFTER: Duration = Duration::from_secs(5);

pub(super) struct WriteIntent {
    inner: Mutex<Wi>,
    /// Serialises bitmap writes (so a bit is durable before any write under it starts, and
    /// an older image never overwrites a newer one).
    io: Mutex<()>,
    /// Offset of the bitmap from each member's superblock, in sectors (signed, md's field).
    offset_sectors: i32,
    /// Resync-space sectors per bit.
    pub(super) sectors_per_bit: u64,
}

struct Wi {
    sb: BitmapSuper,
    /// What is (or is about to be) on disk.
    bits: BitmapBits,
    /// Writes in flight per bit.
    inflight: HashMap<u64, u32>,
    /// Bits set on disk with nothing in flight, and since when.
    idle: BTreeMap<u64, Instant>,
}

/// Where a member's copy of the bitmap starts, in bytes.
fn bitmap_byte_offset(sb: &Superblock, offset_sectors: i32) -> u64 {
    (sb.super_offset_sectors as i64 + offset_sectors as i64).max(0) as u64 * SECTOR as u64
}

impl WriteIntent {
    /// A new bitmap for a new array: all bits clear (the array is created consistent), or
    /// with `all_set` every bit set (initialised in the background: every chunk is to be
    /// resynced, as mdadm writes a new bitmap).
    pub(super) fn create(
        set_uuid: [u8; 16],
        offset_sectors: i32,
        sync_size_sectors: u64,
        chunk_bytes: u64,
        events: u64,
        all_set: bool,
    ) -> Result<WriteIntent> {
        let mut sb = BitmapSuper::new_internal(
            Uuid(set_uuid),
            sync_size_sectors,
            chunk_bytes as u32,
            CLEAR_AFTER.as_secs() as u32,
        );
        sb.events = events;
        sb.events_cleared = events;
        let bits = if all_set {
            BitmapBits::new_set(sb.bits())
        } else {
            BitmapBits::new_clear(sb.bits())
        }
        .map_err(meta_err)?;
        Ok(WriteIntent {
            inner: Mutex::new(Wi {
                sb,
                bits,
                inflight: HashMap::new(),
                idle: BTreeMap::new(),
            }),
            io: Mutex::new(()),
            offset_sectors,
            sectors_per_bit: chunk_bytes / SECTOR as u64,
        })
    }

    /// Reads the bitmap of an assembled array from `disk` (the newest member). A bitmap md
    /// would call stale (wrong array, events too far behind) comes back with every bit set, and
    /// the event that says so.
    pub(super) fn load(
        disk: &dyn Disk,
        sb_of_disk: &Superblock,
        array_events: u64,
        sync_size_sectors: u64,
    ) -> Result<(WriteIntent, Option<ArrayEvent>)> {
        let offset_sectors = sb_of_disk.bitmap_offset().unwrap_or(0);
        let at = bitmap_byte_offset(sb_of_disk, offset_sectors);
        let mut head = vec![0u8; 4096];
        disk.read_at(&mut head, at)?;
        let mut bsb = BitmapSuper::decode(&head)
            .map_err(|e| EngineError::Metadata(format!("{}: internal bitmap: {e}", disk.name())))?;
        if bsb.chunk_bytes < 512 || !bsb.chunk_bytes.is_power_of_two() {
            return Err(EngineError::Metadata(format!(
                "{}: internal bitmap chunk of {} bytes is not a power of two of at least 512",
                disk.name(),
                bsb.chunk_bytes
            )));
        }
        let nbits =
            raidkit_metadata::bitmap::bitmap_bits(sync_size_sectors, bsb.chunk_bytes as u64);
        let need = 256 + nbits.div_ceil(8) as usize;
        let mut image = vec![0u8; need.div_ceil(4096) * 4096];
        disk.read_at(&mut image, at)?;
        let mut out_of_date = None;
        let mut bits = BitmapBits::from_bytes(nbits, &image[256..]).map_err(meta_err)?;
        let stale = bsb.uuid.0 != sb_of_disk.set_uuid.0
            || !bsb.events_match(array_events)
            || bsb.state.stale();
        if stale {
            out_of_date = Some(ArrayEvent::BitmapOutOfDate {
                bitmap_events: bsb.events,
                array_events,
            });
            bits = BitmapBits::new_set(nbits).map_err(meta_err)?;
            bsb.uuid = sb_of_disk.set_uuid;
            bsb.state = raidkit_metadata::bitmap::BitmapState::default();
            bsb.events_cleared = 0;
        }
        bsb.sync_size_sectors = sync_size_sectors;
        let sectors_per_bit = bsb.chunk_bytes as u64 / SECTOR as u64;
        let mut idle = BTreeMap::new();
        let now = Instant::now();
        for b in 0..nbits {
            if bits.test(b) {
                idle.insert(b, now);
            }
        }
        Ok((
            WriteIntent {
                inner: Mutex::new(Wi {
                    sb: bsb,
                    bits,
                    inflight: HashMap::new(),
                    idle,
                }),
                io: Mutex::new(()),
                offset_sectors,
                sectors_per_bit,
            },
            out_of_date,
        ))
    }

    fn image(wi: &Wi) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + wi.bits.as_bytes().len());
        out.extend_from_slice(&wi.sb.encode());
        out.extend_from_slice(wi.bits.as_bytes());
        let len = out.len().div_ceil(SECTOR) * SECTOR;
        out.resize(len, 0);
        out
    }

    /// The image a new array writes to every member.
    pub(super) fn image_for_create(&self) -> Vec<u8> {
        Self::image(&lock(&self.inner))
    }

    pub(super) fn offset_sectors(&self) -> i32 {
        self.offset_sectors
    }

    /// Bits covering resync-space sectors `[s, s + n)`.
    fn bit_range(&self, s: u64, n: u64) -> std::ops::RangeInclusive<u64> {
        s / self.sectors_per_bit..=(s + n.max(1) - 1) / self.sectors_per_bit
    }

    /// Whether any bit of `[s, s + n)` is set.
    pub(super) fn any_set(&self, s: u64, n: u64) -> bool {
        let wi = lock(&self.inner);
        self.bit_range(s, n).any(|b| wi.bits.test(b))
    }

    pub(super) fn events_cleared(&self) -> u64 {
        lock(&self.inner).sb.events_cleared
    }

    /// Sets bits (counted) and returns the image to write when one was not on disk yet.
    fn start(&self, s: u64, n: u64) -> Option<Vec<u8>> {
        let mut wi = lock(&self.inner);
        let mut new = false;
        for b in self.bit_range(s, n) {
            *wi.inflight.entry(b).or_insert(0) += 1;
            wi.idle.remove(&b);
            if !wi.bits.test(b) {
                wi.bits.set(b);
                new = true;
            }
        }
        new.then(|| Self::image(&wi))
    }

    fn end(&self, s: u64, n: u64) {
        let mut wi = lock(&self.inner);
        let now = Instant::now();
        for b in self.bit_range(s, n) {
            let left = match wi.inflight.get_mut(&b) {
                Some(c) => {
                    *c = c.saturating_sub(1);
                    *c
                }
                None => 0,
            };
            if left == 0 {
                wi.inflight.remove(&b);
                wi.idle.insert(b, now);
            }
        }
    }

    /// Clears idle bits (idle at least `after`, or all idle ones with `all`); returns the
    /// image to write, or `None` when nothing changed. `events` becomes `events_cleared`.
    fn clear_idle(
        &self,
        after: Duration,
        all: bool,
        events: u64,
        unsynced_from: Option<u64>,
    ) -> Option<Vec<u8>> {
        let mut wi = lock(&self.inner);
        let now = Instant::now();
        let passed = |b: u64| unsynced_from.is_none_or(|at| (b + 1) * self.sectors_per_bit <= at);
        let ready: Vec<u64> = wi
            .idle
            .iter()
            .filter(|(b, t)| passed(**b) && (all || now.duration_since(**t) >= after))
            .map(|(b, _)| *b)
            .collect();
        if ready.is_empty() {
            return None;
        }
        for b in ready {
            wi.idle.remove(&b);
            wi.bits.clear(b);
        }
        wi.sb.events_cleared = events;
        Some(Self::image(&wi))
    }

    /// Follows the array's events (written with the superblocks).
    fn set_events(&self, events: u64) -> Vec<u8> {
        let mut wi = lock(&self.inner);
        wi.sb.events = events;
        Self::image(&wi)
    }

    pub(super) fn set_bits(&self) -> u64 {
        let wi = lock(&self.inner);
        (0..wi.bits.len()).filter(|&b| wi.bits.test(b)).count() as u64
    }
}

impl Array {
    /// The resync-space range a write of array sectors `[a, a + n)` touches (coarsely: whole
    /// stripes for parity levels).
    pub(super) fn intent_range(&self, a: u64, n: u64) -> (u64, u64) {
        match self.geo.scheme() {
            Scheme::Parity { .. } => {
                let chunk = self.geo.chunk_sectors;
                let per_stripe = chunk * self.geo.data_disks() as u64;
                let first = a / per_stripe;
                let last = (a + n.max(1) - 1) / per_stripe;
                (first * chunk, (last - first + 1) * chunk)
            }
            // RAID 1: member sector = array sector; RAID 10: md's bitmap covers the array.
            Scheme::Copies { .. } => (a, n),
        }
    }

    /// Members that get bitmap writes (those that get superblock writes), with the byte
    /// offset of their bitmap copy.
    fn bitmap_targets(&self, wi: &WriteIntent) -> Vec<(MemberId, Arc<Member>, u64)> {
        let st = lock(&self.state);
        st.members
            .ids()
            .filter_map(|i| {
                let m = st.members[i].clone()?;
                let slot = st.roster.slot_member.find(&Some(i));
                let gets = match slot {
                    Some(s) => st.roster.slot_state[s].writable(),
                    None => {
                        st.roster.sbs[i].role_of(st.roster.sbs[i].dev_number) != DevRole::Faulty
                    }
                };
                gets.then(|| {
                    (
                        i,
                        m,
                        bitmap_byte_offset(&st.roster.sbs[i], wi.offset_sectors()),
                    )
                })
            })
            .collect()
    }

    /// Writes (and flushes) a bitmap image to `targets`; returns the indices that failed.
    fn write_bitmap(
        targets: &[(MemberId, Arc<Member>, u64)],
        image: &[u8],
    ) -> Vec<(MemberId, String)> {
        let mut failed = Vec::new();
        for (i, m, at) in targets {
            if let Err(e) = m.disk.write_at(image, *at).and_then(|_| m.disk.flush()) {
                failed.push((*i, format!("{}: bitmap write failed: {e}", m.disk.name())));
            }
        }
        failed
    }

    fn fail_indices(&self, failed: Vec<(MemberId, String)>) {
        for (i, why) in failed {
            let slot = lock(&self.state).roster.slot_member.find(&Some(i));
            if let Some(s) = slot {
                self.member_failed(s, &why);
            }
        }
    }

    /// Clears bits idle for `after` (all idle bits with `all`) once the data under them is
    /// flushed, unless the array is degraded (then the bits are what a returning member
    /// needs). Called by the background service and at a clean stop.
    pub(crate) fn intent_sweep(&self, after: Duration, all: bool) {
        let Some(wi) = &self.bitmap else { return };
        if self.read_only {
            return;
        }
        // A pending resync has not passed its cursor: the bits there stay (md's NEEDED
        // bits), or a resync guided by the bitmap would skip what it still has to do.
        let unsynced_from = {
            let st = lock(&self.state);
            if st.roster.failed.is_some()
                || st
                    .roster
                    .slot_state
                    .iter()
                    .any(|s| *s != MemberState::InSync)
            {
                return;
            }
            st.resync_from
        };
        let events = {
            let st = lock(&self.state);
            st.roster.sbs.iter().map(|sb| sb.events).max().unwrap_or(0)
        };
        let targets = self.bitmap_targets(wi);
        // Data first: only flushed writes may lose their bits.
        for (_, m, _) in &targets {
            if m.disk.flush().is_err() {
                return;
            }
        }
        let _serial = lock(&wi.io);
        if let Some(image) = wi.clear_idle(after, all, events, unsynced_from) {
            let failed = Self::write_bitmap(&targets, &image);
            drop(_serial);
            self.fail_indices(failed);
        }
    }

    /// With the superblocks: the bitmap superblock follows the array's events. Called from
    /// `update_superblocks` with the state lock held (state before bitmap lock).
    pub(super) fn intent_follow_events(&self, st: &State) {
        let Some(wi) = &self.bitmap else { return };
        let events = st.roster.sbs.iter().map(|sb| sb.events).max().unwrap_or(0);
        // Serialised with intent_start, so an older image never lands over a newer one.
        let _serial = lock(&wi.io);
        let image = wi.set_events(events);
        for i in st.members.ids() {
            let Some(m) = st.members[i].clone() else {
                continue;
            };
            let slot = st.roster.slot_member.find(&Some(i));
            let gets = match slot {
                Some(s) => st.roster.slot_state[s].writable(),
                None => st.roster.sbs[i].role_of(st.roster.sbs[i].dev_number) != DevRole::Faulty,
            };
            if gets {
                // A failure here shows up at the next bitmap or superblock write.
                let _ = m.disk.write_at(
                    &image,
                    bitmap_byte_offset(&st.roster.sbs[i], wi.offset_sectors()),
                );
            }
        }
    }

    /// Bits set in the write-intent bitmap (`None` without a bitmap).
    pub fn bitmap_dirty_bits(&self) -> Option<u64> {
        self.bitmap.as_ref().map(|w| w.set_bits())
    }

    /// Whether resync-space range `[s, s + n)` may hold inconsistent or missed writes:
    /// always without a bitmap, else when a bit of it is set.
    pub(crate) fn intent_covers(&self, s: u64, n: u64) -> bool {
        match &self.bitmap {
            Some(wi) => wi.any_set(s, n),
            None => true,
        }
    }
}

impl IntentHooks for WriteIntent {
    /// Before a write of array sectors `[a, a + n)`: its bits are set and durable.
    fn start_write(&self, array: &Array, a: u64, n: u64) {
        let (s, len) = array.intent_range(a, n);
        let targets = array.bitmap_targets(self);
        // Holding the bitmap lock across the write keeps a later writer of the same bit
        // from starting before the bit is on disk.
        let _serial = lock(&self.io);
        if let Some(image) = self.start(s, len) {
            let failed = Array::write_bitmap(&targets, &image);
            drop(_serial);
            array.fail_indices(failed);
        }
    }

    /// After a write of array sectors `[a, a + n)` completed (or failed).
    fn end_write(&self, array: &Array, a: u64, n: u64) {
        let (s, len) = array.intent_range(a, n);
        self.end(s, len);
    }
}
