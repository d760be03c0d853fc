//! Gathering a sequential stream's partial-stripe writes into whole stripes, as md's stripe
//! cache does with plugging and delayed stripes (`raid5_activate_delayed`).
//!
//! On RAID 4/5/6 a write that covers part of a stripe must first read old data or parity;
//! a write of the whole stripe reads nothing. A client streaming 1 MiB requests at queue
//! depth 4 over a 2.5 MiB stripe sends mostly partial stripes, and each alone would be a
//! read-modify-write: on a hard disk every read costs a seek and a rotation, and the stream
//! ran at a quarter of what the drives write. Here the partial stripe at the end of a request
//! that continues a stream waits, while other writes are still running, for the requests that
//! fill the rest of it; then one whole-stripe write serves them all.
//!
//! Rules:
//! - Only a request that continues a stream (it starts shortly after a recent write's end or
//!   ends shortly before a recent write's start, and that write continued another in the
//!   same way; or its stripe is already gathering) leads
//!   a gathering, and only while another write is in
//!   flight: a lone writer (queue depth 1) never waits, since nothing could arrive to fill
//!   the stripe before it returns.
//! - The leader writes what it has as soon as the stripe is whole, or no other write has been
//!   doing member I/O for a short grace (the time a client takes to send its next request
//!   once one completes), or a deadline passes. Grace and deadline follow the time whole
//!   stripes take here, so memory and disks both get what suits them.
//! - A request that joins copies its data into the stripe's buffer and waits for the leader.
//!   Nothing is acknowledged before the member writes that carry it completed. Requests
//!   gathered together were all in flight at once, so any order among them is correct. If the
//!   leader's write fails, each joiner writes its own part again by itself, so that it gets
//!   its own answer.
//! - Whole stripes in the middle of a request, and parts that cannot be gathered, run at once
//!   as before.

use super::{lock, Array, Result, SECTOR};
use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Recent writes remembered for stream detection.
const RECENT_WRITES: usize = 32;
/// Bounds of the grace after the last member I/O before a leader writes what it has.
const GRACE_MIN: Duration = Duration::from_micros(50);
const GRACE_MAX: Duration = Duration::from_millis(2);
/// Bounds of the longest a leader waits.
const DEADLINE_MIN: Duration = Duration::from_millis(1);
const DEADLINE_MAX: Duration = Duration::from_millis(50);

/// The array's gathering state (parity levels only).
pub(crate) struct Gather {
    st: Mutex<GatherState>,
    cv: Condvar,
    /// Data sectors of one stripe.
    stripe_sectors: u64,
}

struct GatherState {
    /// Write requests in this array's data path now.
    writers: usize,
    /// Of those, the ones waiting here (leading or joined) rather than doing member I/O.
    waiting: usize,
    /// Recent writes (first sector, end, how many writes in a row it continues), newest
    /// last.
    recent: VecDeque<(u64, u64, u32)>,
    /// Stripes being gathered, by stripe number.
    open: HashMap<u64, Open>,
    /// Gatherings written, by id: whether the write succeeded, and joiners yet to look.
    done: HashMap<u64, (bool, usize)>,
    next_id: u64,
    /// The last time a write arrived or finished its member I/O.
    last_event: Instant,
    /// Smoothed time one stripe's write takes (nanoseconds).
    stripe_ns: f64,
    /// Stripes written whole from gathered requests, and requests that joined one.
    gathered_stripes: u64,
    joined: u64,
    opened: u64,
}

struct Open {
    id: u64,
    buf: Vec<u8>,
    /// Stripe-relative sector ranges the gathered requests cover, sorted and merged.
    covered: Vec<(u64, u64)>,
    joiners: usize,
}

/// Counters of the gathering, for tests and statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatherCounters {
    /// Stripes written whole after requests were gathered into them.
    pub whole_stripes: u64,
    /// Request parts that joined a stripe another request was gathering.
    pub joined: u64,
    /// Gatherings opened (each one request's partial stripe waiting for others).
    pub opened: u64,
}

fn add_range(covered: &mut Vec<(u64, u64)>, from: u64, to: u64) {
    covered.push((from, to));
    covered.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(covered.len());
    for &(a, b) in covered.iter() {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    *covered = merged;
}

impl Open {
    fn whole(&self, stripe_sectors: u64) -> bool {
        self.covered == [(0, stripe_sectors)]
    }
}

/// What a request's partial stripe does.
#[derive(Clone, Copy)]
enum Role {
    Joined(u64),
    Lead,
    Direct,
}

/// One request's part within a stripe.
#[derive(Clone, Copy)]
struct Part {
    stripe: u64,
    /// Stripe-relative sectors.
    from: u64,
    to: u64,
    /// Offset of the part in the request's buffer.
    user_offset: usize,
}

impl Gather {
    pub(crate) fn new(stripe_sectors: u64) -> Gather {
        Gather {
            st: Mutex::new(GatherState {
                writers: 0,
                waiting: 0,
                recent: VecDeque::with_capacity(RECENT_WRITES),
                open: HashMap::new(),
                done: HashMap::new(),
                next_id: 0,
                last_event: Instant::now(),
                stripe_ns: 1e6,
                gathered_stripes: 0,
                joined: 0,
                opened: 0,
            }),
            cv: Condvar::new(),
            stripe_sectors,
        }
    }

    pub(crate) fn counters(&self) -> GatherCounters {
        let st = lock(&self.st);
        GatherCounters {
            whole_stripes: st.gathered_stripes,
            joined: st.joined,
            opened: st.opened,
        }
    }

    fn grace(st: &GatherState) -> Duration {
        Duration::from_nanos((st.stripe_ns / 4.0) as u64).clamp(GRACE_MIN, GRACE_MAX)
    }

    fn deadline(st: &GatherState) -> Duration {
        Duration::from_nanos((st.stripe_ns * 4.0) as u64).clamp(DEADLINE_MIN, DEADLINE_MAX)
    }

    /// Runs `[array_sector, +sectors)` of `user` on `array`, gathering partial stripes.
    pub(crate) fn write(
        &self,
        array: &Array,
        array_sector: u64,
        sectors: u64,
        user: &[u8],
        suspects: &mut Vec<(usize, u64, u64)>,
    ) -> Result<()> {
        let ss = self.stripe_sectors;
        let end = array_sector + sectors;
        let first = array_sector / ss;
        let last = (end - 1) / ss;
        let part = |stripe: u64| -> Part {
            let base = stripe * ss;
            let from = array_sector.max(base) - base;
            let to = end.min(base + ss) - base;
            Part {
                stripe,
                from,
                to,
                user_offset: ((base + from - array_sector) as usize) * SECTOR,
            }
        };
        let head = part(first);
        let tail = part(last);
        let head_partial = head.from > 0 || head.to < ss;
        let tail_partial = last != first && tail.to < ss;
        let (sequential, others) = {
            let mut st = lock(&self.st);
            st.writers += 1;
            st.last_event = Instant::now();
            // A stream's requests arrive out of order when several are in flight: one that
            // starts within a few of its own lengths after a recent write's end, or ends
            // that close before a recent write's start, continues that write. It counts as
            // a stream's once the write it continues continued another (its run is 2 or
            // more). A random write comes that close to a recent one only by chance, and
            // twice in a row hardly ever; each that leads holds its writer until the
            // deadline, and with one chance contact enough, 4 KiB random writes on memory
            // lost 60 % of their rate to such waits.
            let reach = 4 * sectors;
            let run = st
                .recent
                .iter()
                .filter(|&&(s, e, _)| {
                    (e..=e + reach).contains(&array_sector)
                        || (s.saturating_sub(reach)..=s).contains(&end)
                })
                .map(|&(_, _, run)| run.saturating_add(1))
                .max()
                .unwrap_or(0);
            let sequential =
                run >= 2 || st.open.contains_key(&first) || st.open.contains_key(&last);
            if st.recent.len() == RECENT_WRITES {
                st.recent.pop_front();
            }
            st.recent.push_back((array_sector, end, run));
            (sequential, st.writers > 1)
        };
        let r = self.write_parts(
            array,
            user,
            suspects,
            (head, head_partial),
            (tail, tail_partial),
            sequential && others,
        );
        let mut st = lock(&self.st);
        st.writers -= 1;
        st.last_event = Instant::now();
        self.wake(st);
        r
    }

    /// Wakes whoever waits here, if anyone does: a wake is a system call, and random writes,
    /// which never wait, would pay it twice each.
    fn wake(&self, st: std::sync::MutexGuard<'_, GatherState>) {
        let waiters = st.waiting > 0;
        drop(st);
        if waiters {
            self.cv.notify_all();
        }
    }

    fn write_parts(
        &self,
        array: &Array,
        user: &[u8],
        suspects: &mut Vec<(usize, u64, u64)>,
        (head, head_partial): (Part, bool),
        (tail, tail_partial): (Part, bool),
        may_lead: bool,
    ) -> Result<()> {
        let ss = self.stripe_sectors;
        // A partial stripe joins the stripe's gathering, or leads one, or runs at once.
        let head_role = head_partial.then(|| self.join_or_lead(&head, user, may_lead));
        if let Some(Role::Direct) = head_role {
            self.direct(array, &head, user, suspects)?;
        }
        // Whole stripes between head and tail.
        let mid_from = if head_partial {
            head.stripe + 1
        } else {
            head.stripe
        };
        let mid_to = if tail_partial {
            tail.stripe
        } else {
            tail.stripe + 1
        };
        let mut first_err = Ok(());
        if mid_from < mid_to {
            let start = mid_from * ss;
            let off = ((start - (head.stripe * ss + head.from)) as usize) * SECTOR;
            let n = (mid_to - mid_from) * ss;
            first_err = self.timed(n, || array.run_pieces_on(start, n, &user[off..], suspects));
        }
        // After a failure the tail opens or joins nothing, but a head that leads or joined a
        // gathering still sees it through: others wait on it.
        let tail_role =
            (tail_partial && first_err.is_ok()).then(|| self.join_or_lead(&tail, user, may_lead));
        // Leads first (each waits a bounded time), then joined parts: no request waits on a
        // joined part while it holds a gathering others wait on.
        if let Some(Role::Direct) = tail_role {
            first_err = self.direct(array, &tail, user, suspects);
        }
        for (p, role) in [(tail, tail_role), (head, head_role)] {
            if let Some(Role::Lead) = role {
                let r = self.lead(array, &p, user, suspects);
                if first_err.is_ok() {
                    first_err = r;
                }
            }
        }
        for (p, role) in [(tail, tail_role), (head, head_role)] {
            if let Some(Role::Joined(id)) = role {
                if !self.await_joined(id) {
                    let r = self.direct(array, &p, user, suspects);
                    if first_err.is_ok() {
                        first_err = r;
                    }
                }
            }
        }
        first_err
    }

    /// Copies `p` into its stripe's gathering if there is one (joined), else opens one when
    /// `may_lead` (lead), else leaves it to run at once (direct).
    fn join_or_lead(&self, p: &Part, user: &[u8], may_lead: bool) -> Role {
        let mut st = lock(&self.st);
        let st = &mut *st;
        let n = ((p.to - p.from) as usize) * SECTOR;
        let at = p.from as usize * SECTOR;
        let data = &user[p.user_offset..p.user_offset + n];
        if let Some(open) = st.open.get_mut(&p.stripe) {
            open.buf[at..at + n].copy_from_slice(data);
            add_range(&mut open.covered, p.from, p.to);
            open.joiners += 1;
            let id = open.id;
            st.joined += 1;
            self.cv.notify_all();
            return Role::Joined(id);
        }
        if !may_lead {
            return Role::Direct;
        }
        let bytes = self.stripe_sectors as usize * SECTOR;
        let mut buf = crate::buffers::take_buffer(bytes);
        buf.resize(bytes, 0);
        buf[at..at + n].copy_from_slice(data);
        let id = st.next_id;
        st.next_id += 1;
        st.opened += 1;
        st.open.insert(
            p.stripe,
            Open {
                id,
                buf,
                covered: vec![(p.from, p.to)],
                joiners: 0,
            },
        );
        Role::Lead
    }

    /// Waits for the gathering `id` a part joined; whether its write succeeded.
    fn await_joined(&self, id: u64) -> bool {
        let mut st = lock(&self.st);
        st.waiting += 1;
        self.cv.notify_all();
        loop {
            if let Some(entry) = st.done.get_mut(&id) {
                let ok = entry.0;
                entry.1 -= 1;
                if entry.1 == 0 {
                    st.done.remove(&id);
                }
                st.waiting -= 1;
                return ok;
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits for the gathering `p` leads to fill (see the module's rules), then writes it.
    fn lead(
        &self,
        array: &Array,
        p: &Part,
        user: &[u8],
        suspects: &mut Vec<(usize, u64, u64)>,
    ) -> Result<()> {
        let ss = self.stripe_sectors;
        let mut st = lock(&self.st);
        st.waiting += 1;
        let deadline = Instant::now() + Self::deadline(&st);
        loop {
            let now = Instant::now();
            let whole = st.open[&p.stripe].whole(ss);
            let busy = st.writers > st.waiting;
            let quiet_for = now.saturating_duration_since(st.last_event);
            let grace = Self::grace(&st);
            if whole || now >= deadline || (!busy && quiet_for >= grace) {
                break;
            }
            let until = if busy {
                deadline
            } else {
                (st.last_event + grace).min(deadline)
            };
            let wait = until
                .saturating_duration_since(now)
                .max(Duration::from_micros(10));
            st = self
                .cv
                .wait_timeout(st, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let open = st
            .open
            .remove(&p.stripe)
            .expect("the leader's gathering is open");
        st.waiting -= 1;
        let whole = open.whole(ss);
        if whole {
            st.gathered_stripes += 1;
        }
        drop(st);
        let base = p.stripe * ss;
        let mut r = Ok(());
        for &(a, b) in &open.covered {
            let at = a as usize * SECTOR;
            r = self.timed(b - a, || {
                array.run_pieces_on(base + a, b - a, &open.buf[at..], suspects)
            });
            if r.is_err() {
                break;
            }
        }
        crate::buffers::keep_buffer(open.buf);
        let mut st = lock(&self.st);
        if open.joiners > 0 {
            st.done.insert(open.id, (r.is_ok(), open.joiners));
        }
        drop(st);
        self.cv.notify_all();
        if r.is_err() && !whole {
            // The leader's own part may be what failed; its own error is the answer.
            return self.direct(array, p, user, suspects);
        }
        r
    }

    fn direct(
        &self,
        array: &Array,
        p: &Part,
        user: &[u8],
        suspects: &mut Vec<(usize, u64, u64)>,
    ) -> Result<()> {
        let start = p.stripe * self.stripe_sectors + p.from;
        self.timed(p.to - p.from, || {
            array.run_pieces_on(start, p.to - p.from, &user[p.user_offset..], suspects)
        })
    }

    /// Runs member I/O over `sectors`, counting it as activity and, when it covers whole
    /// stripes, timing it per stripe (a small write's time says little about a stripe's: it
    /// is mostly fixed costs, and scaled up it made the deadline far too long).
    fn timed(&self, sectors: u64, f: impl FnOnce() -> Result<()>) -> Result<()> {
        let t = Instant::now();
        let r = f();
        let mut st = lock(&self.st);
        if sectors >= self.stripe_sectors {
            let ns = t.elapsed().as_nanos() as f64 * self.stripe_sectors as f64 / sectors as f64;
            st.stripe_ns = st.stripe_ns * 0.875 + ns * 0.125;
        }
        st.last_event = Instant::now();
        self.wake(st);
        r
    }
}
