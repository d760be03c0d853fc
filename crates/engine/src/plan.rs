//! The sans-IO core: turns array requests into member I/O plans and computes parity, with no
//! threads, files or clock.
//!
//! A request is first split ([`split`]) into *pieces*, each confined to one lock unit: for RAID
//! 4/5/6 a *band* (one stripe, one range of in-chunk sectors over which the set of data chunks
//! the request touches is the same), for RAID 0/1/10 a run of sectors with the same copies. Each
//! piece becomes a [`PieceOp`], a small state machine (md's analyse_stripe then handle_stripe):
//! `new` analyses member states and picks the plan (direct, degraded read, full-stripe write,
//! reconstruct-write or read-modify-write by the fewest member reads); `next` hands out member
//! I/O phase by phase and, between phases, computes parity or recovers lost blocks.
//!
//! Invariants: a plan never reads from or writes to a member that is not `InSync`; a write plan
//! leaves data, P and Q of the band consistent on every in-sync member once all its writes
//! complete; the scratch memory of a piece is at most (raid_disks + 2) × band width, and band
//! width is capped by the caller's `max_band_sectors`, so memory does not depend on request size.

use crate::geometry::{Geo, Scheme, StripeInfo};
use raidkit_parity::ParityError;

pub const SECTOR: usize = 512;

/// Direction of a request or member I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

/// A member slot as the planner sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemberState {
    /// Present and holding current data.
    InSync,
    /// Marked faulty (by an I/O error or on request); never read or written again.
    Faulty,
    /// No device in this slot.
    Missing,
    /// Being rebuilt (md's recovery): never read, but every write that reaches the slot is
    /// written to it, so that the part the rebuild has already passed stays current.
    Rebuilding,
}

impl MemberState {
    /// Holds current data: may be read.
    pub fn usable(self) -> bool {
        self == MemberState::InSync
    }

    /// Receives writes (in sync, or being rebuilt).
    pub fn writable(self) -> bool {
        matches!(self, MemberState::InSync | MemberState::Rebuilding)
    }
}

/// Where the bytes of one member I/O live: in the caller's buffer or in a scratch block of the
/// piece. Length is always `sectors * 512`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufRef {
    User { offset_bytes: usize },
    Scratch { index: usize },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberIo {
    pub member: usize,
    pub dir: Dir,
    /// Sector relative to the member's data offset.
    pub member_sector: u64,
    pub sectors: u64,
    pub buf: BufRef,
}

/// One piece of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Pieces with the same key must not run at the same time (a stripe for parity levels).
    pub lock_key: u64,
    pub kind: PieceKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PieceKind {
    /// RAID 0/1/10: `sectors` at `copies`, to or from the user buffer at `user_offset_bytes`.
    Copies {
        copies: Vec<(usize, u64)>,
        sectors: u64,
        user_offset_bytes: usize,
        /// Which live copy a read prefers (spreads reads over mirrors).
        read_hint: usize,
    },
    /// RAID 4/5/6: in-chunk sectors `[lo, lo+sectors)` of `stripe`, data indices
    /// `dd_first..=dd_last` covered in full by the request.
    Band {
        stripe: u64,
        lo: u64,
        sectors: u64,
        dd_first: usize,
        dd_last: usize,
        /// User buffer offset of data index `dd_first` in this band; each further index is
        /// one chunk further on in the array, so `+ (dd - dd_first) * chunk` bytes.
        user_offset_bytes: usize,
    },
}

/// Why a piece cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// More members of this piece are lost than the level can rebuild from.
    Unrecoverable { lost_members: Vec<usize> },
}

/// Checks a parity kernel call on blocks the planner built. The kernels refuse only blocks of
/// unequal lengths, more syndrome slots than GF(2^8) has coefficients and impossible
/// recoveries: every block of a band has the band's length, [`Geo::new`] refuses stripes with
/// more slots than the kernels take, and [`PieceOp::new`] refuses bands with more lost members
/// than parity. A refusal is therefore a planner bug, and going on would hand out wrong data
/// or write wrong parity, so it stops here.
#[track_caller]
pub(crate) fn kernel_ok(result: Result<(), ParityError>) {
    if let Err(e) = result {
        panic!("the parity kernel refused blocks the planner built (a planner bug): {e}");
    }
}

/// The array sectors one lock key of a mirror level covers (`lock_key = sector / unit`).
pub fn copies_lock_unit(geo: &Geo) -> u64 {
    if geo.level() == raidkit_layout::Level::Raid1 {
        256
    } else {
        geo.chunk_sectors
    }
}

/// Splits `[array_sector, array_sector + sectors)` into pieces no wider than `max_band_sectors`.
pub fn split(geo: &Geo, array_sector: u64, sectors: u64, max_band_sectors: u64) -> Vec<Piece> {
    let mut out = Vec::new();
    let end = array_sector + sectors;
    let max_band = max_band_sectors.max(8);
    match geo.scheme() {
        Scheme::Copies { .. } => {
            let unit = copies_lock_unit(geo);
            let mut s = array_sector;
            while s < end {
                let (copies, run) = geo.copies(s);
                let unit_left = unit - s % unit;
                let n = run.min(unit_left).min(end - s).min(max_band);
                out.push(Piece {
                    lock_key: s / unit,
                    kind: PieceKind::Copies {
                        copies,
                        sectors: n,
                        user_offset_bytes: ((s - array_sector) as usize) * SECTOR,
                        read_hint: (s / unit) as usize,
                    },
                });
                s += n;
            }
        }
        Scheme::Parity { .. } => {
            let chunk = geo.chunk_sectors;
            let d = geo.data_disks() as u64;
            let mut s = array_sector;
            while s < end {
                let stripe = s / chunk / d;
                let base = stripe * d * chunk;
                let seg_end = end.min(base + d * chunk);
                let a = s - base;
                let b = seg_end - base;
                let (dd_a, off_a) = ((a / chunk) as usize, a % chunk);
                let (dd_b, off_b) = (((b - 1) / chunk) as usize, (b - 1) % chunk + 1);
                let mut bounds = vec![0, off_a, off_b, chunk];
                bounds.sort_unstable();
                bounds.dedup();
                for w in bounds.windows(2) {
                    let (lo, hi) = (w[0], w[1]);
                    let covers = |dd: usize| {
                        let from = if dd == dd_a { off_a } else { 0 };
                        let to = if dd == dd_b { off_b } else { chunk };
                        from <= lo && hi <= to
                    };
                    let dds: Vec<usize> = (dd_a..=dd_b).filter(|&dd| covers(dd)).collect();
                    let (Some(&first), Some(&last)) = (dds.first(), dds.last()) else {
                        continue;
                    };
                    let mut x = lo;
                    while x < hi {
                        let n = (hi - x).min(max_band);
                        let first_array_sector = base + first as u64 * chunk + x;
                        out.push(Piece {
                            lock_key: stripe,
                            kind: PieceKind::Band {
                                stripe,
                                lo: x,
                                sectors: n,
                                dd_first: first,
                                dd_last: last,
                                user_offset_bytes: ((first_array_sector - array_sector) as usize)
                                    * SECTOR,
                            },
                        });
                        x += n;
                    }
                }
                s = seg_end;
            }
        }
    }
    out
}

/// Partial parity log arrays: every band that writes more than one data member becomes one
/// band per data member, full-stripe bands too (mirror pieces are kept). The bands come out
/// in rounds: first each band's first data member, then each band's second, and so on, so
/// that one round's bands, all in different stripes or rows, can share a write phase.
///
/// Why: the log recomputes a stripe's parity from its partial parity and the modified data,
/// so it cannot recover a stripe whose modified data member is lost (md's own limit, and for
/// a full-stripe write, whose partial parity is empty, every data member is modified). When a
/// band modifies only one data member, that member's rows are parity XOR the untouched data,
/// and the untouched data did not change: after a crash they read back per sector as the
/// parity left them, old or new, never a mix of two members' states. The bands of one stripe
/// must then run one after another, each logged and written before the next is logged (the
/// caller's batches never hold two pieces with [`same_rows`]).
pub fn one_data_member_per_band(geo: &Geo, pieces: Vec<Piece>) -> Vec<Piece> {
    let chunk_bytes = geo.chunk_sectors as usize * SECTOR;
    let mut rounds: Vec<Vec<Piece>> = vec![Vec::new()];
    for p in pieces {
        match p.kind {
            PieceKind::Band {
                stripe,
                lo,
                sectors,
                dd_first,
                dd_last,
                user_offset_bytes,
            } if dd_last > dd_first => {
                for dd in dd_first..=dd_last {
                    let round = dd - dd_first;
                    if rounds.len() <= round {
                        rounds.push(Vec::new());
                    }
                    rounds[round].push(Piece {
                        lock_key: p.lock_key,
                        kind: PieceKind::Band {
                            stripe,
                            lo,
                            sectors,
                            dd_first: dd,
                            dd_last: dd,
                            user_offset_bytes: user_offset_bytes + (dd - dd_first) * chunk_bytes,
                        },
                    });
                }
            }
            _ => rounds[0].push(p),
        }
    }
    rounds.concat()
}

/// Whether two pieces are bands of the same stripe over overlapping in-chunk rows (they
/// share parity sectors).
pub fn same_rows(a: &Piece, b: &Piece) -> bool {
    match (&a.kind, &b.kind) {
        (
            PieceKind::Band {
                stripe: sa,
                lo: la,
                sectors: na,
                ..
            },
            PieceKind::Band {
                stripe: sb,
                lo: lb,
                sectors: nb,
                ..
            },
        ) => sa == sb && *la < lb + nb && *lb < la + na,
        _ => false,
    }
}

/// The plan chosen for a piece (reported for tests and statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanKind {
    /// Reads or writes straight to the members that hold the data (RAID 0/1/10, healthy reads).
    Direct,
    /// A read that rebuilds lost data from the survivors.
    DegradedRead,
    /// All data of the band is written: parity from new data only, no reads.
    FullStripe,
    /// Read the untouched data, compute parity from the whole band.
    ReconstructWrite,
    /// Read old data and parity, apply the difference.
    ReadModifyWrite,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpState {
    Start,
    Reading,
    Writing,
    Done,
}

/// The caller's buffer for a piece's request.
pub enum UserBuf<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

/// What the driver must do next for a piece.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Perform these member I/Os (in any order, in parallel), then call `next` again. Read
    /// phases can be retried from scratch after a member failure; write phases cannot.
    Io {
        dir: Dir,
        ios: Vec<MemberIo>,
    },
    Done,
}

/// What a RAID 4/5 band write writes ([`PieceOp::band_write`]).
#[derive(Debug)]
pub struct BandWriteView<'a> {
    pub stripe: u64,
    /// In-chunk sectors `[lo, lo + sectors)` of data indices `dd_first..=dd_last`.
    pub lo: u64,
    pub sectors: u64,
    pub dd_first: usize,
    pub dd_last: usize,
    /// Member of each data index of the stripe.
    pub data_members: &'a [usize],
    pub p_member: usize,
    /// False when the parity member could not be written when the band was planned.
    pub parity_written: bool,
    pub kind: PlanKind,
    /// Member sector (relative to the data offset) of row `lo` on every member of the band.
    pub member_sector: u64,
    /// User buffer offset of `dd_first`'s rows; each further index is `chunk_bytes` on.
    pub user_offset_bytes: usize,
    pub chunk_bytes: usize,
    /// The band's new parity (`sectors * 512` bytes).
    pub new_p: &'a [u8],
}

/// Band bookkeeping for parity levels.
#[derive(Debug)]
struct BandCtx {
    /// The stripe number.
    stripe: u64,
    info: StripeInfo,
    lo: u64,
    sectors: u64,
    dd_first: usize,
    dd_last: usize,
    user_offset_bytes: usize,
    chunk_bytes: usize,
    /// Members of the stripe that could not be written when the band was planned (a member
    /// being rebuilt is written but not read, so it is not among them).
    unwritable_members: Vec<usize>,
}

impl BandCtx {
    fn info_stripe(&self) -> u64 {
        self.stripe
    }
    fn len(&self) -> usize {
        self.sectors as usize * SECTOR
    }
    fn touched(&self, dd: usize) -> bool {
        dd >= self.dd_first && dd <= self.dd_last
    }
    fn user_off(&self, dd: usize) -> usize {
        self.user_offset_bytes + (dd - self.dd_first) * self.chunk_bytes
    }
    fn member_sector(&self) -> u64 {
        self.info.member_sector_start + self.lo
    }
    /// Slot of data index dd in the syndrome (identity for RAID 4/5).
    fn slots(&self) -> (Vec<Option<usize>>, usize) {
        if self.info.q_member.is_some() {
            (
                self.info.syndrome_slots.clone(),
                self.info.syndrome_slots.len(),
            )
        } else {
            let d = self.info.data_members.len();
            ((0..d).map(Some).collect(), d)
        }
    }
}

/// Where each data index's block lives during compute.
#[derive(Clone, Copy, Debug)]
enum Block {
    User(usize),
    Scratch(usize),
    /// Lost; recovered into this scratch index.
    Lost(usize),
    /// Not read: the plan does not need it.
    Unneeded,
}

#[derive(Debug)]
enum Plan {
    CopiesRead {
        member: usize,
        member_sector: u64,
        sectors: u64,
        user: usize,
    },
    CopiesWrite {
        targets: Vec<(usize, u64)>,
        sectors: u64,
        user: usize,
    },
    BandRead {
        ctx: BandCtx,
        data: Vec<Block>,
        p: Option<usize>,
        q: Option<usize>,
        /// Lost data indices to recover (empty when the read needs no recovery).
        lost: Vec<usize>,
    },
    BandWrite {
        ctx: BandCtx,
        kind: PlanKind,
        /// Old contents of data indices the plan reads (or recovers).
        old: Vec<Option<Block>>,
        /// Old P and Q, read for read-modify-write and for recovery.
        p: Option<usize>,
        q: Option<usize>,
        new_p: usize,
        new_q: Option<usize>,
        lost: Vec<usize>,
    },
}

/// One piece's state machine.
#[derive(Debug)]
pub struct PieceOp {
    plan: Plan,
    state: OpState,
    scratch: Vec<Vec<u8>>,
    kind: PlanKind,
}

impl Drop for PieceOp {
    fn drop(&mut self) {
        for b in self.scratch.drain(..) {
            crate::buffers::keep_buffer(b);
        }
    }
}

fn lost_error(members: impl IntoIterator<Item = usize>) -> PlanError {
    PlanError::Unrecoverable {
        lost_members: members.into_iter().collect(),
    }
}

impl PieceOp {
    /// Analyse: what is lost, what must be read; plan: the cheapest way to serve the piece.
    pub fn new(
        geo: &Geo,
        piece: &Piece,
        dir: Dir,
        states: &[MemberState],
    ) -> Result<PieceOp, PlanError> {
        let ok = |m: usize| states.get(m).is_some_and(|s| s.usable());
        match &piece.kind {
            PieceKind::Copies {
                copies,
                sectors,
                user_offset_bytes,
                read_hint,
            } => {
                let live: Vec<(usize, u64)> =
                    copies.iter().copied().filter(|&(m, _)| ok(m)).collect();
                if live.is_empty() {
                    return Err(lost_error(copies.iter().map(|c| c.0)));
                }
                let writable = |m: usize| states.get(m).is_some_and(|s| s.writable());
                let plan = match dir {
                    Dir::Read => {
                        let (member, member_sector) = live[read_hint % live.len()];
                        Plan::CopiesRead {
                            member,
                            member_sector,
                            sectors: *sectors,
                            user: *user_offset_bytes,
                        }
                    }
                    Dir::Write => Plan::CopiesWrite {
                        targets: copies
                            .iter()
                            .copied()
                            .filter(|&(m, _)| writable(m))
                            .collect(),
                        sectors: *sectors,
                        user: *user_offset_bytes,
                    },
                };
                Ok(PieceOp {
                    plan,
                    state: OpState::Start,
                    scratch: Vec::new(),
                    kind: PlanKind::Direct,
                })
            }
            PieceKind::Band {
                stripe,
                lo,
                sectors,
                dd_first,
                dd_last,
                user_offset_bytes,
            } => {
                let max_degraded = match geo.scheme() {
                    Scheme::Parity { max_degraded } => max_degraded as usize,
                    Scheme::Copies { .. } => 0,
                };
                let info = geo.stripe(*stripe);
                let mut members: Vec<usize> = info.data_members.clone();
                members.push(info.p_member);
                members.extend(info.q_member);
                let lost_members: Vec<usize> =
                    members.iter().copied().filter(|&m| !ok(m)).collect();
                if lost_members.len() > max_degraded {
                    return Err(lost_error(lost_members));
                }
                let unwritable_members: Vec<usize> = members
                    .iter()
                    .copied()
                    .filter(|&m| !states.get(m).is_some_and(|s| s.writable()))
                    .collect();
                let ctx = BandCtx {
                    stripe: *stripe,
                    info,
                    lo: *lo,
                    sectors: *sectors,
                    dd_first: *dd_first,
                    dd_last: *dd_last,
                    user_offset_bytes: *user_offset_bytes,
                    chunk_bytes: geo.chunk_sectors as usize * SECTOR,
                    unwritable_members,
                };
                match dir {
                    Dir::Read => Ok(Self::plan_band_read(ctx, &ok)),
                    Dir::Write => Ok(Self::plan_band_write(ctx, &ok)),
                }
            }
        }
    }

    fn plan_band_read(ctx: BandCtx, ok: &dyn Fn(usize) -> bool) -> PieceOp {
        let d = ctx.info.data_members.len();
        let lost: Vec<usize> = (0..d)
            .filter(|&dd| !ok(ctx.info.data_members[dd]))
            .collect();
        let lost_touched = lost.iter().any(|&dd| ctx.touched(dd));
        let mut scratch = Vec::new();
        let alloc = |scratch: &mut Vec<Vec<u8>>| {
            scratch.push(crate::buffers::take_zeroed(ctx.len()));
            scratch.len() - 1
        };
        let mut data = Vec::with_capacity(d);
        let (mut p, mut q) = (None, None);
        for dd in 0..d {
            let b = if lost.contains(&dd) {
                Block::Lost(alloc(&mut scratch))
            } else if ctx.touched(dd) {
                Block::User(ctx.user_off(dd))
            } else if lost_touched {
                Block::Scratch(alloc(&mut scratch))
            } else {
                Block::Unneeded
            };
            data.push(b);
        }
        let kind = if lost_touched {
            // One lost data block: P if it lives, else Q. Two: both (they live, or `new`
            // would have refused the piece).
            let p_ok = ok(ctx.info.p_member);
            if p_ok {
                p = Some(alloc(&mut scratch));
            }
            if let Some(qm) = ctx.info.q_member {
                if ok(qm) && (lost.len() == 2 || !p_ok) {
                    q = Some(alloc(&mut scratch));
                }
            }
            PlanKind::DegradedRead
        } else {
            PlanKind::Direct
        };
        PieceOp {
            plan: Plan::BandRead {
                ctx,
                data,
                p,
                q,
                lost: if lost_touched { lost } else { Vec::new() },
            },
            state: OpState::Start,
            scratch,
            kind,
        }
    }

    fn plan_band_write(ctx: BandCtx, ok: &dyn Fn(usize) -> bool) -> PieceOp {
        let d = ctx.info.data_members.len();
        let p_ok = ok(ctx.info.p_member);
        let q_ok = ctx.info.q_member.is_some_and(ok);
        let writes = |m: usize| !ctx.unwritable_members.contains(&m);
        let p_written = writes(ctx.info.p_member);
        let q_written = ctx.info.q_member.is_some_and(writes);
        let written: Vec<usize> = (ctx.dd_first..=ctx.dd_last).collect();
        let unwritten: Vec<usize> = (0..d).filter(|&dd| !ctx.touched(dd)).collect();
        let data_ok = |dd: usize| ok(ctx.info.data_members[dd]);
        let lost: Vec<usize> = (0..d).filter(|&dd| !data_ok(dd)).collect();
        let u_lost = unwritten.iter().any(|&dd| !data_ok(dd));
        let parity_live = p_ok as usize + q_ok as usize;
        let rcw_reads = if u_lost {
            (0..d).filter(|&dd| data_ok(dd)).count() + parity_live
        } else {
            unwritten.len()
        };
        // Read-modify-write derives new parity from old parity, so every parity member that
        // is written (a member being rebuilt is written, not read) must also be readable.
        let rmw_ok = written.iter().all(|&dd| data_ok(dd))
            && parity_live > 0
            && (!p_written || p_ok)
            && (!q_written || q_ok);
        let rmw_reads = written.len() + parity_live;
        let kind = if !p_written && !q_written {
            // No parity survives to keep consistent: only the data is written.
            PlanKind::Direct
        } else if unwritten.is_empty() {
            PlanKind::FullStripe
        } else if rmw_ok && rmw_reads < rcw_reads {
            PlanKind::ReadModifyWrite
        } else {
            PlanKind::ReconstructWrite
        };
        let mut scratch: Vec<Vec<u8>> = Vec::new();
        let len = ctx.len();
        let alloc = |scratch: &mut Vec<Vec<u8>>| {
            scratch.push(crate::buffers::take_zeroed(len));
            scratch.len() - 1
        };
        let mut old: Vec<Option<Block>> = vec![None; d];
        let (mut p, mut q) = (None, None);
        let mut lost_for_recovery = Vec::new();
        match kind {
            PlanKind::FullStripe | PlanKind::Direct => {}
            PlanKind::ReadModifyWrite => {
                for &dd in &written {
                    old[dd] = Some(Block::Scratch(alloc(&mut scratch)));
                }
            }
            _ => {
                if u_lost {
                    for (dd, slot) in old.iter_mut().enumerate() {
                        *slot = Some(if data_ok(dd) {
                            Block::Scratch(alloc(&mut scratch))
                        } else {
                            Block::Lost(alloc(&mut scratch))
                        });
                    }
                    lost_for_recovery = lost.clone();
                } else {
                    for &dd in &unwritten {
                        old[dd] = Some(Block::Scratch(alloc(&mut scratch)));
                    }
                }
            }
        }
        let need_old_parity =
            kind == PlanKind::ReadModifyWrite || (kind == PlanKind::ReconstructWrite && u_lost);
        if need_old_parity {
            if p_ok {
                p = Some(alloc(&mut scratch));
            }
            if q_ok {
                q = Some(alloc(&mut scratch));
            }
        }
        let new_p = alloc(&mut scratch);
        let new_q = if ctx.info.q_member.is_some() {
            Some(alloc(&mut scratch))
        } else {
            None
        };
        PieceOp {
            plan: Plan::BandWrite {
                ctx,
                kind,
                old,
                p,
                q,
                new_p,
                new_q,
                lost: lost_for_recovery,
            },
            state: OpState::Start,
            scratch,
            kind,
        }
    }

    pub fn kind(&self) -> PlanKind {
        self.kind
    }

    /// The shape and new parity of a RAID 4/5 band write, for the partial parity log. The
    /// parity is only meaningful once [`PieceOp::next`] has handed out the write phase (it is
    /// computed between the phases); `None` for other plans and for RAID 6.
    pub fn band_write(&self) -> Option<BandWriteView<'_>> {
        let Plan::BandWrite {
            ctx, kind, new_p, ..
        } = &self.plan
        else {
            return None;
        };
        if ctx.info.q_member.is_some() {
            return None;
        }
        Some(BandWriteView {
            stripe: ctx.info_stripe(),
            lo: ctx.lo,
            sectors: ctx.sectors,
            dd_first: ctx.dd_first,
            dd_last: ctx.dd_last,
            data_members: &ctx.info.data_members,
            p_member: ctx.info.p_member,
            parity_written: !ctx.unwritable_members.contains(&ctx.info.p_member),
            kind: *kind,
            member_sector: ctx.member_sector(),
            user_offset_bytes: ctx.user_offset_bytes,
            chunk_bytes: ctx.chunk_bytes,
            new_p: &self.scratch[*new_p],
        })
    }

    /// For a parity band being written: new data of the band that goes to no member because
    /// its member cannot be written (degraded), as (member, member sector of row `lo`, user
    /// buffer offset, bytes). Parity carries it; a write journal logs it too, as md does.
    pub fn unwritten_data(&self) -> Vec<(usize, u64, usize, usize)> {
        let Plan::BandWrite { ctx, .. } = &self.plan else {
            return Vec::new();
        };
        (ctx.dd_first..=ctx.dd_last)
            .filter_map(|dd| {
                let m = ctx.info.data_members[dd];
                ctx.unwritable_members
                    .contains(&m)
                    .then(|| (m, ctx.member_sector(), ctx.user_off(dd), ctx.len()))
            })
            .collect()
    }

    /// Scratch blocks, for the driver to read into and write from.
    pub fn scratch_mut(&mut self) -> &mut [Vec<u8>] {
        &mut self.scratch
    }

    pub fn scratch_bytes(&self) -> usize {
        self.scratch.iter().map(|s| s.len()).sum()
    }

    /// Advance: hand out the next phase's member I/O, computing between phases.
    pub fn next(&mut self, user: UserBuf<'_>) -> Step {
        loop {
            match self.state {
                OpState::Start => {
                    self.state = OpState::Reading;
                    let ios = self.read_ios();
                    if !ios.is_empty() {
                        return Step::Io {
                            dir: Dir::Read,
                            ios,
                        };
                    }
                }
                OpState::Reading => {
                    self.compute(user);
                    self.state = OpState::Writing;
                    let ios = self.write_ios();
                    if !ios.is_empty() {
                        return Step::Io {
                            dir: Dir::Write,
                            ios,
                        };
                    }
                    return self.finish();
                }
                OpState::Writing | OpState::Done => return self.finish(),
            }
        }
    }

    fn finish(&mut self) -> Step {
        self.state = OpState::Done;
        Step::Done
    }

    fn read_ios(&self) -> Vec<MemberIo> {
        let mut ios = Vec::new();
        let io = |member, member_sector, sectors, buf| MemberIo {
            member,
            dir: Dir::Read,
            member_sector,
            sectors,
            buf,
        };
        match &self.plan {
            Plan::CopiesRead {
                member,
                member_sector,
                sectors,
                user,
            } => {
                ios.push(io(
                    *member,
                    *member_sector,
                    *sectors,
                    BufRef::User {
                        offset_bytes: *user,
                    },
                ));
            }
            Plan::CopiesWrite { .. } => {}
            Plan::BandRead {
                ctx, data, p, q, ..
            } => {
                let ms = ctx.member_sector();
                for (dd, b) in data.iter().enumerate() {
                    let m = ctx.info.data_members[dd];
                    match *b {
                        Block::User(off) => {
                            ios.push(io(m, ms, ctx.sectors, BufRef::User { offset_bytes: off }))
                        }
                        Block::Scratch(i) => {
                            ios.push(io(m, ms, ctx.sectors, BufRef::Scratch { index: i }))
                        }
                        _ => {}
                    }
                }
                if let Some(i) = p {
                    ios.push(io(
                        ctx.info.p_member,
                        ms,
                        ctx.sectors,
                        BufRef::Scratch { index: *i },
                    ));
                }
                if let (Some(i), Some(qm)) = (q, ctx.info.q_member) {
                    ios.push(io(qm, ms, ctx.sectors, BufRef::Scratch { index: *i }));
                }
            }
            Plan::BandWrite { ctx, old, p, q, .. } => {
                let ms = ctx.member_sector();
                for (dd, b) in old.iter().enumerate() {
                    if let Some(Block::Scratch(i)) = b {
                        ios.push(io(
                            ctx.info.data_members[dd],
                            ms,
                            ctx.sectors,
                            BufRef::Scratch { index: *i },
                        ));
                    }
                }
                if let Some(i) = p {
                    ios.push(io(
                        ctx.info.p_member,
                        ms,
                        ctx.sectors,
                        BufRef::Scratch { index: *i },
                    ));
                }
                if let (Some(i), Some(qm)) = (q, ctx.info.q_member) {
                    ios.push(io(qm, ms, ctx.sectors, BufRef::Scratch { index: *i }));
                }
            }
        }
        ios
    }

    fn write_ios(&self) -> Vec<MemberIo> {
        let mut ios = Vec::new();
        let io = |member, member_sector, sectors, buf| MemberIo {
            member,
            dir: Dir::Write,
            member_sector,
            sectors,
            buf,
        };
        match &self.plan {
            Plan::CopiesWrite {
                targets,
                sectors,
                user,
            } => {
                for &(m, s) in targets {
                    ios.push(io(
                        m,
                        s,
                        *sectors,
                        BufRef::User {
                            offset_bytes: *user,
                        },
                    ));
                }
            }
            Plan::BandWrite {
                ctx,
                new_p,
                new_q,
                old,
                kind,
                ..
            } => {
                let _ = (old, kind);
                let ms = ctx.member_sector();
                // Writes go to every member that was writable when the band was planned (in
                // sync or being rebuilt).
                for dd in ctx.dd_first..=ctx.dd_last {
                    let m = ctx.info.data_members[dd];
                    if !self.member_lost(m) {
                        ios.push(io(
                            m,
                            ms,
                            ctx.sectors,
                            BufRef::User {
                                offset_bytes: ctx.user_off(dd),
                            },
                        ));
                    }
                }
                if !self.member_lost(ctx.info.p_member) {
                    ios.push(io(
                        ctx.info.p_member,
                        ms,
                        ctx.sectors,
                        BufRef::Scratch { index: *new_p },
                    ));
                }
                if let (Some(qm), Some(nq)) = (ctx.info.q_member, new_q) {
                    if !self.member_lost(qm) {
                        ios.push(io(qm, ms, ctx.sectors, BufRef::Scratch { index: *nq }));
                    }
                }
            }
            _ => {}
        }
        ios
    }

    fn member_lost(&self, member: usize) -> bool {
        match &self.plan {
            Plan::BandWrite { ctx, .. } => ctx.unwritable_members.contains(&member),
            _ => false,
        }
    }

    /// Between the read and the write phase: rebuilds lost data (degraded reads and writes)
    /// and computes new parity. Works in place on the user buffer and the scratch blocks:
    /// lost data a read returns is rebuilt straight into the user buffer, old parity is
    /// updated where it lies, and nothing is allocated or copied besides a few slice lists.
    fn compute(&mut self, user: UserBuf<'_>) {
        let scratch = &mut self.scratch;
        match &self.plan {
            Plan::BandRead {
                ctx,
                data,
                p,
                q,
                lost,
            } if !lost.is_empty() => {
                let UserBuf::Read(ubuf) = user else { return };
                let (slot_of, _) = ctx.slots();
                let mut user_blocks = carve(
                    ubuf,
                    ctx.user_offset_bytes,
                    ctx.chunk_bytes,
                    ctx.dd_last + 1 - ctx.dd_first,
                    ctx.len(),
                );
                let mut sc = scratch_slices(scratch);
                // Every data index's block; a lost one the request covers is rebuilt in the
                // user buffer, which frees its scratch block to serve as P's place when P is
                // lost too (recovery from Q needs one).
                let mut spare: Option<&mut [u8]> = None;
                let mut blocks: Vec<Option<&mut [u8]>> = Vec::with_capacity(data.len());
                for (dd, b) in data.iter().enumerate() {
                    let touched = ctx.touched(dd);
                    blocks.push(match *b {
                        Block::Lost(i) if touched => {
                            spare = sc[i].take();
                            user_blocks[dd - ctx.dd_first].take()
                        }
                        Block::User(_) => user_blocks[dd - ctx.dd_first].take(),
                        Block::Scratch(i) | Block::Lost(i) => sc[i].take(),
                        // Recovery reads every data block; the plan has them all.
                        Block::Unneeded => None,
                    });
                }
                let pb = p.and_then(|i| sc[i].take());
                let qb = q.and_then(|i| sc[i].take());
                rebuild(&slot_of, blocks, lost, pb, qb, spare);
            }
            Plan::BandWrite {
                ctx,
                kind,
                old,
                p,
                q,
                new_p,
                new_q,
                lost,
            } => {
                let UserBuf::Write(ubuf) = user else { return };
                let len = ctx.len();
                let new_data = |dd: usize| -> &[u8] {
                    let off = ctx.user_off(dd);
                    &ubuf[off..off + len]
                };
                match kind {
                    PlanKind::Direct => {}
                    PlanKind::ReadModifyWrite => {
                        // P' = P ^ old ^ new, Q' = Q ^ g^slot (old ^ new), in place in the
                        // old parity blocks, which then become the ones written.
                        let (slot_of, nslots) = ctx.slots();
                        let mut sc = scratch_slices(scratch);
                        let written: Vec<(usize, usize, usize)> = (ctx.dd_first..=ctx.dd_last)
                            .filter_map(|dd| match old[dd] {
                                Some(Block::Scratch(i)) => {
                                    let slot = slot_of.iter().position(|&e| e == Some(dd))?;
                                    Some((dd, i, slot))
                                }
                                _ => None,
                            })
                            .collect();
                        let pb = p.and_then(|i| sc[i].take());
                        let qb = q.and_then(|i| sc[i].take());
                        let olds: Vec<(usize, &[u8])> = written
                            .iter()
                            .filter_map(|&(_, i, slot)| {
                                let b: &[u8] = sc[i].take()?;
                                Some((slot, b))
                            })
                            .collect();
                        let news: Vec<(usize, &[u8])> = written
                            .iter()
                            .map(|&(dd, _, slot)| (slot, new_data(dd)))
                            .collect();
                        match (pb, qb) {
                            (Some(pb), None) => {
                                let srcs: Vec<&[u8]> =
                                    olds.iter().chain(&news).map(|&(_, b)| b).collect();
                                kernel_ok(raidkit_parity::xor_into(pb, &srcs));
                            }
                            (pb, Some(qb)) => {
                                // With P lost, new P's block takes the P side of the syndrome
                                // update; it is not written.
                                let pb = match pb {
                                    Some(pb) => pb,
                                    None => match sc[*new_p].take() {
                                        Some(b) => b,
                                        None => return,
                                    },
                                };
                                // The written slots, lowest to highest: md's xor_syndrome
                                // range (slots outside it are not read).
                                let first = written.iter().map(|w| w.2).min();
                                let last = written.iter().map(|w| w.2).max();
                                if let (Some(first), Some(last)) = (first, last) {
                                    for set in [&olds, &news] {
                                        let mut slots: Vec<&[u8]> = vec![&[]; nslots];
                                        for &(slot, b) in set.iter() {
                                            slots[slot] = b;
                                        }
                                        kernel_ok(raidkit_parity::xor_syndrome(
                                            &slots, first, last, pb, qb,
                                        ));
                                    }
                                }
                            }
                            (None, None) => {}
                        }
                        if let Some(i) = p {
                            scratch.swap(*i, *new_p);
                        }
                        if let (Some(i), Some(nq)) = (q, new_q) {
                            scratch.swap(*i, *nq);
                        }
                    }
                    _ => {
                        // Full stripe or reconstruct-write: parity of the whole new band,
                        // after rebuilding lost data the request does not overwrite.
                        let (slot_of, _) = ctx.slots();
                        if !lost.is_empty() {
                            let mut sc = scratch_slices(scratch);
                            let blocks: Vec<Option<&mut [u8]>> = old
                                .iter()
                                .map(|b| match b {
                                    Some(Block::Scratch(i)) | Some(Block::Lost(i)) => sc[*i].take(),
                                    _ => None,
                                })
                                .collect();
                            let pb = p.and_then(|i| sc[i].take());
                            let qb = q.and_then(|i| sc[i].take());
                            // New P is computed below; until then its block is free.
                            let spare = sc[*new_p].take();
                            rebuild(&slot_of, blocks, lost, pb, qb, spare);
                        }
                        let mut np = std::mem::take(&mut scratch[*new_p]);
                        let mut nq = new_q.map(|i| std::mem::take(&mut scratch[i]));
                        {
                            let scratch = &*scratch;
                            let block_of = |dd: usize| -> &[u8] {
                                if ctx.touched(dd) {
                                    new_data(dd)
                                } else {
                                    match old[dd] {
                                        Some(Block::Scratch(i)) | Some(Block::Lost(i)) => {
                                            &scratch[i]
                                        }
                                        _ => &[],
                                    }
                                }
                            };
                            if let Some(nq) = nq.as_deref_mut() {
                                // Zero slots (DDF) are empty blocks, as the kernels take them.
                                let refs: Vec<&[u8]> = slot_of
                                    .iter()
                                    .map(|e| e.map_or(&[][..], block_of))
                                    .collect();
                                kernel_ok(raidkit_parity::gen_syndrome(&refs, &mut np, nq));
                            } else {
                                let refs: Vec<&[u8]> =
                                    (0..ctx.info.data_members.len()).map(block_of).collect();
                                kernel_ok(raidkit_parity::gen_p(&refs, &mut np));
                            }
                        }
                        scratch[*new_p] = np;
                        if let (Some(nq), Some(iq)) = (nq, new_q) {
                            scratch[*iq] = nq;
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// Every scratch block as a separately borrowable slice.
fn scratch_slices(scratch: &mut [Vec<u8>]) -> Vec<Option<&mut [u8]>> {
    scratch.iter_mut().map(|b| Some(b.as_mut_slice())).collect()
}

/// `count` blocks of `len` bytes, `stride` bytes apart from `first` on, as disjoint slices
/// (the data indices of a band in the user buffer: one chunk apart, `len` ≤ chunk).
fn carve(
    buf: &mut [u8],
    first: usize,
    stride: usize,
    count: usize,
    len: usize,
) -> Vec<Option<&mut [u8]>> {
    let mut out = Vec::with_capacity(count);
    let mut rest: &mut [u8] = &mut buf[first..];
    for k in 0..count {
        let (blk, tail) = std::mem::take(&mut rest).split_at_mut(len);
        out.push(Some(blk));
        if k + 1 < count {
            rest = &mut tail[stride - len..];
        }
    }
    out
}

/// Rebuilds the lost data indices `lost` (one or two) in place. `blocks[dd]` is data index
/// dd's block (lost ones are the outputs); `slot_of[slot]` is the data index in syndrome slot
/// `slot` (`None`: a zero block). One lost block comes back from P by XOR; with P lost or two
/// blocks lost, md's RAID-6 recovery runs, which needs a block for P: the live P, else `spare`
/// (its contents are overwritten).
fn rebuild(
    slot_of: &[Option<usize>],
    mut blocks: Vec<Option<&mut [u8]>>,
    lost: &[usize],
    p: Option<&mut [u8]>,
    q: Option<&mut [u8]>,
    spare: Option<&mut [u8]>,
) {
    if let ([x], Some(p)) = (lost, p.as_deref()) {
        let Some(dst) = blocks[*x].take() else { return };
        let mut srcs: Vec<&[u8]> = blocks.iter().flatten().map(|b| &**b).collect();
        srcs.push(p);
        kernel_ok(raidkit_parity::gen_p(&srcs, dst));
        return;
    }
    let (Some(p), Some(q)) = (p.or(spare), q) else {
        // The planner refuses bands it cannot rebuild; nothing to do with what is left.
        return;
    };
    let n = slot_of.len();
    let slot = |dd: usize| slot_of.iter().position(|&e| e == Some(dd)).unwrap_or(n);
    let missing: Vec<usize> = match lost {
        [x] => vec![slot(*x), n],
        _ => lost.iter().map(|&dd| slot(dd)).collect(),
    };
    let mut list: Vec<&mut [u8]> = Vec::with_capacity(n + 2);
    for e in slot_of {
        list.push(e.and_then(|dd| blocks[dd].take()).unwrap_or_default());
    }
    list.push(p);
    list.push(q);
    kernel_ok(raidkit_parity::recover(&mut list, &missing));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_bands_become_one_band_per_data_member() {
        // RAID 5 over 5 members (4 data), 16-sector chunks: a write from the middle of data
        // index 1 of stripe 0 to the middle of data index 1 of stripe 2.
        let g = Geo::new(5, 2, 5, 16, 16 * 100).unwrap();
        let (start, len) = (16 + 4, 2 * 64 - 8);
        let pieces = one_data_member_per_band(&g, split(&g, start, len, 4096));
        let mut covered = vec![0u32; len as usize];
        for p in &pieces {
            let PieceKind::Band {
                stripe,
                lo,
                sectors,
                dd_first,
                dd_last,
                user_offset_bytes,
            } = p.kind
            else {
                panic!("{p:?}")
            };
            assert_eq!(dd_first, dd_last, "one data member per band: {p:?}");
            for dd in dd_first..=dd_last {
                let user = user_offset_bytes / SECTOR + (dd - dd_first) * 16;
                let array = stripe * 64 + dd as u64 * 16 + lo;
                assert_eq!(array - start, user as u64, "{p:?}");
                for k in 0..sectors as usize {
                    covered[user + k] += 1;
                }
            }
        }
        assert!(covered.iter().all(|&c| c == 1), "every sector exactly once");
        // Stripe 1, written whole, is split as well, into four bands that share rows and so
        // must run one after another. Batched as the driver does (a batch ends before a
        // piece sharing rows with one in it), the rounds make that four batches, the least
        // possible, and not one per band.
        let stripe1 = pieces
            .iter()
            .filter(|p| matches!(p.kind, PieceKind::Band { stripe: 1, .. }))
            .count();
        assert_eq!(stripe1, 4);
        let mut batches: Vec<Vec<&Piece>> = vec![Vec::new()];
        for p in &pieces {
            if batches.last().unwrap().iter().any(|q| same_rows(q, p)) {
                batches.push(Vec::new());
            }
            batches.last_mut().unwrap().push(p);
        }
        assert_eq!(batches.len(), 4, "{batches:?}");
    }

    fn plan_of(
        geo: &Geo,
        first_sector: u64,
        sectors: u64,
        states: &[MemberState],
    ) -> Vec<(PlanKind, usize)> {
        split(geo, first_sector, sectors, 4096)
            .iter()
            .map(|p| {
                let mut op = PieceOp::new(geo, p, Dir::Write, states).unwrap();
                let user = vec![0u8; sectors as usize * SECTOR];
                let reads = match op.next(UserBuf::Write(&user)) {
                    Step::Io {
                        dir: Dir::Read,
                        ios,
                    } => ios.len(),
                    _ => 0,
                };
                (op.kind(), reads)
            })
            .collect()
    }

    #[test]
    fn write_plans_take_the_fewest_reads() {
        let ok = vec![MemberState::InSync; 6];
        // RAID 6 on 6 members, chunk 16 sectors: 4 data chunks per stripe
        let g = Geo::new(6, 2, 6, 16, 16 * 100).unwrap();
        // whole stripe: no reads
        assert_eq!(plan_of(&g, 0, 64, &ok), vec![(PlanKind::FullStripe, 0)]);
        // one chunk: rmw reads old data + P + Q = 3, rcw reads the 3 other chunks = 3 -> rcw (md prefers rcw on ties)
        assert_eq!(
            plan_of(&g, 0, 16, &ok),
            vec![(PlanKind::ReconstructWrite, 3)]
        );
        // three chunks: rcw reads 1
        assert_eq!(
            plan_of(&g, 0, 48, &ok),
            vec![(PlanKind::ReconstructWrite, 1)]
        );
        // RAID 5 on 6 members (5 data): one chunk -> rmw reads 2 instead of 4
        let g5 = Geo::new(5, 2, 6, 16, 16 * 100).unwrap();
        assert_eq!(
            plan_of(&g5, 0, 16, &ok),
            vec![(PlanKind::ReadModifyWrite, 2)]
        );
        // a partial chunk splits into bands by the data it covers
        assert_eq!(
            plan_of(&g5, 8, 16, &ok),
            vec![
                (PlanKind::ReadModifyWrite, 2),
                (PlanKind::ReadModifyWrite, 2)
            ]
        );
    }

    #[test]
    fn degraded_plans_never_touch_lost_members() {
        let g = Geo::new(6, 2, 6, 16, 16 * 100).unwrap();
        for lost in 0..6 {
            for lost2 in lost..6 {
                let mut states = vec![MemberState::InSync; 6];
                states[lost] = MemberState::Faulty;
                states[lost2] = MemberState::Missing;
                for (start, len) in [(0u64, 64u64), (0, 16), (20, 30), (70, 5)] {
                    for dir in [Dir::Read, Dir::Write] {
                        for p in split(&g, start, len, 4096) {
                            let mut op = PieceOp::new(&g, &p, dir, &states).unwrap();
                            let mut user = vec![0u8; len as usize * SECTOR];
                            loop {
                                let ub = match dir {
                                    Dir::Read => UserBuf::Read(&mut user),
                                    Dir::Write => UserBuf::Write(&user),
                                };
                                match op.next(ub) {
                                    Step::Done => break,
                                    Step::Io { ios, .. } => {
                                        for io in ios {
                                            assert!(
                                                states[io.member].usable(),
                                                "I/O planned on lost member {}",
                                                io.member
                                            );
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        // three lost: refused
        let mut states = vec![MemberState::InSync; 6];
        states[0] = MemberState::Faulty;
        states[1] = MemberState::Faulty;
        states[2] = MemberState::Faulty;
        let p = &split(&g, 0, 64, 4096)[0];
        assert!(matches!(
            PieceOp::new(&g, p, Dir::Read, &states),
            Err(PlanError::Unrecoverable { .. })
        ));
    }

    #[test]
    fn a_member_being_rebuilt_is_written_never_read() {
        // RAID 5 and RAID 6: whatever the plan, no read touches the rebuilding member, every
        // write of the band that lands on it is issued, and the parity written is that of the
        // whole new band (checked by XOR over what the plan writes plus the untouched data).
        for (level, n) in [(5, 5), (6, 6)] {
            let g = Geo::new(level, 2, n, 16, 16 * 100).unwrap();
            for target in 0..n {
                let mut states = vec![MemberState::InSync; n];
                states[target] = MemberState::Rebuilding;
                for (start, len) in [(0u64, 16 * (n as u64 - 2)), (0, 16), (20, 30), (70, 5)] {
                    for p in split(&g, start, len, 4096) {
                        let mut op = PieceOp::new(&g, &p, Dir::Write, &states).unwrap();
                        let user = vec![7u8; len as usize * SECTOR];
                        let mut wrote = Vec::new();
                        loop {
                            match op.next(UserBuf::Write(&user)) {
                                Step::Done => break,
                                Step::Io { dir, ios } => {
                                    for io in ios {
                                        if dir == Dir::Read {
                                            assert_ne!(
                                                io.member, target,
                                                "read from a rebuilding member"
                                            );
                                        } else {
                                            wrote.push(io.member);
                                        }
                                    }
                                }
                            }
                        }
                        let PieceKind::Band {
                            stripe,
                            dd_first,
                            dd_last,
                            ..
                        } = p.kind
                        else {
                            unreachable!()
                        };
                        let info = g.stripe(stripe);
                        let touched_target = info.data_members[dd_first..=dd_last]
                            .contains(&target)
                            || info.p_member == target
                            || info.q_member == Some(target);
                        assert_eq!(
                            wrote.contains(&target),
                            touched_target,
                            "level {level} target {target} stripe {stripe}: {wrote:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn split_covers_the_request_exactly_once() {
        let g = Geo::new(5, 0, 5, 16, 16 * 100).unwrap();
        let (start, len) = (13u64, 200u64);
        let mut covered = vec![0u8; len as usize];
        for p in split(&g, start, len, 8) {
            let PieceKind::Band {
                sectors,
                dd_first,
                dd_last,
                user_offset_bytes,
                ..
            } = p.kind
            else {
                panic!()
            };
            assert!(sectors <= 8);
            for dd in dd_first..=dd_last {
                let off = user_offset_bytes / SECTOR + (dd - dd_first) * 16;
                for s in 0..sectors as usize {
                    covered[off + s] += 1;
                }
            }
        }
        assert!(covered.iter().all(|&c| c == 1), "{covered:?}");
    }
}
