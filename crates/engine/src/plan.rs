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
//! Around the plan, the core also decides what a piece is planned against ([`plan_piece`]: a
//! pending resync sends mirror reads to the first copy, bad blocks and members that returned
//! a read error count as lost) and what a failed member I/O means ([`on_member_error`]); the
//! driver gathers the facts and carries the answer out.
//!
//! Invariants: a plan never reads from or writes to a member that is not `InSync`; a write plan
//! leaves data, P and Q of the band consistent on every in-sync member once all its writes
//! complete; the scratch memory of a piece is at most (raid_disks + 2) × band width, and band
//! width is capped by the caller's `max_band_sectors`, so memory does not depend on request size.

use crate::geometry::{Geo, Scheme, StripeInfo};
use raidkit_parity::ParityError;

mod compute;
mod decide;
pub mod reshape;
mod split;
pub mod step;
#[cfg(test)]
mod tests;
pub use decide::{
    choose_copy, on_member_error, plan_piece, ErrorAction, MirrorInputs, PlanInputs,
    STREAMING_SECTORS, STREAM_EXTENT_SECTORS,
};
pub use split::{copies_lock_unit, cut, listed_edges, split};

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

impl PieceOp {
    /// The member a mirror read goes to and the member sector it ends at (None for other
    /// plans): where that copy's head will be.
    pub fn copy_read_end(&self) -> Option<(usize, u64)> {
        match &self.plan {
            Plan::CopiesRead {
                member,
                member_sector,
                sectors,
                ..
            } => Some((*member, member_sector + sectors)),
            _ => None,
        }
    }
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
        Self::new_unsynced(geo, piece, dir, states, false)
    }

    /// As [`PieceOp::new`]; `unsynced`: the piece lies where a pending resync has not
    /// passed, so a parity write reconstructs its parity from the data (md forces
    /// reconstruct-write beyond `recovery_cp`): parity derived from old parity would stay as
    /// wrong as the old parity was, and a member lost before the resync passes would then
    /// reconstruct wrong data where the write had put good data.
    pub fn new_unsynced(
        geo: &Geo,
        piece: &Piece,
        dir: Dir,
        states: &[MemberState],
        unsynced: bool,
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
                // A read that touches only members that are there reads them directly
                // whatever else is lost (md reads an in-sync member's chunk directly too).
                let direct_read =
                    dir == Dir::Read && (*dd_first..=*dd_last).all(|dd| ok(info.data_members[dd]));
                if lost_members.len() > max_degraded && !direct_read {
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
                    Dir::Write => Ok(Self::plan_band_write(ctx, &ok, unsynced)),
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

    fn plan_band_write(ctx: BandCtx, ok: &dyn Fn(usize) -> bool, unsynced: bool) -> PieceOp {
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
        } else if rmw_ok && rmw_reads < rcw_reads && !unsynced {
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
}
