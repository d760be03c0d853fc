//! The decisions around a piece's plan that depend on more than its member states: what a
//! piece is planned against ([`plan_piece`]: a pending resync's mirror reads, bad blocks,
//! members that returned a read error to this piece) and what a failed member I/O means
//! ([`on_member_error`]). The driver gathers the facts and carries the answers out.

use super::*;

/// What the array knows besides slot states when it plans a piece.
#[derive(Clone, Copy)]
pub struct PlanInputs<'a> {
    /// Slot states of the moment.
    pub states: &'a [MemberState],
    /// A resync after an unclean stop is pending: mirror reads go to the first live copy (the
    /// one the resync copies from), as md's do, so a read never sees two different versions
    /// of a sector the crash left unsynced.
    pub resync_pending: bool,
    /// Where a pending resync has not passed yet (member sectors of a parity level), `None`
    /// with none pending: parity writes there reconstruct (see [`PieceOp::new_unsynced`]).
    pub unsynced_from: Option<u64>,
    /// Slots that returned a read error to this piece: it is planned without them (served
    /// from redundancy).
    pub unreadable: &'a [usize],
    /// `bad(slot, sector, sectors)`: the slot's bad-block log covers part of those sectors
    /// (member sectors for parity levels, copy sectors for mirrors); the piece is planned as
    /// if the slot were lost there. `None` when no member has bad blocks.
    pub bad: Option<&'a dyn Fn(usize, u64, u64) -> bool>,
    /// What the mirror members are, for choosing the copy a read goes to
    /// ([`choose_copy`]); `None` keeps the pieces' interleave.
    pub mirrors: Option<&'a MirrorInputs>,
}

/// Per slot: whether the member is a spinning disk (seeks and rotation cost; its read
/// position matters) and how many requests it has in flight.
#[derive(Clone, Debug, Default)]
pub struct MirrorInputs {
    pub rotational: Vec<bool>,
    pub in_flight: Vec<u32>,
    /// The member sector where the last read sent to each slot ended (`u64::MAX`: none).
    pub heads: Vec<u64>,
}

/// A sequential stream over mirrors of spinning disks moves to the next copy after this
/// many member sectors (1 MiB): each disk reads whole extents and skips the others' with one short
/// seek, so a single stream reads from every copy at once (3ware's TwinStor) instead of one
/// disk (md's rule) or a seek-bound interleave of small pieces.
pub const STREAM_EXTENT_SECTORS: u64 = 2048;

/// Reads of at least this many sectors (64 KiB) count as streaming; smaller ones go to
/// the least busy copy.
pub const STREAMING_SECTORS: u64 = 128;

/// The index into the piece's live copies (those `ok`) a read of spinning disks goes to, or
/// `None` to keep the interleave (solid-state members, where the position costs nothing).
///
/// - Copies at different addresses (RAID 10 far and offset layouts): the lowest address,
///   md's rule: the near copies lie in the outer, faster half and together read like RAID 0,
///   where alternating near and far copies cost a seek per chunk.
/// - Copies at one address (RAID 1, RAID 10 near): a streaming read that continues where
///   the last read of an idle copy ended stays on that copy (md's rule: one request at a
///   time cannot keep two disks busy, and a disk that skips the others' extents waits for
///   them to pass under its head). Otherwise, with three copies or more, a streaming
///   read goes to copy `(member sector / STREAM_EXTENT_SECTORS) mod copies`, whole extents
///   of each disk (with two, the disk would read through the extent it skips: the
///   interleave stays); a small read to the copy with the
///   fewest requests in flight (the first of those on a tie).
pub fn choose_copy(
    copies: &[(usize, u64)],
    sectors: u64,
    ok: impl Fn(usize) -> bool,
    m: &MirrorInputs,
) -> Option<usize> {
    let live: Vec<(usize, u64)> = copies.iter().copied().filter(|&(s, _)| ok(s)).collect();
    let spinning = |s: usize| m.rotational.get(s).copied().unwrap_or(false);
    if live.len() < 2 || !live.iter().all(|&(s, _)| spinning(s)) {
        return None;
    }
    let lowest = live.iter().map(|c| c.1).min()?;
    if live.iter().any(|c| c.1 != lowest) {
        return live.iter().position(|c| c.1 == lowest);
    }
    let busy = |s: usize| m.in_flight.get(s).copied().unwrap_or(0);
    if sectors >= STREAMING_SECTORS {
        let head = |s: usize| m.heads.get(s).copied().unwrap_or(u64::MAX);
        if let Some(i) = live
            .iter()
            .position(|c| head(c.0) == lowest && busy(c.0) == 0)
        {
            return Some(i);
        }
        // Two copies: the extent each disk skips is no longer than what it reads ahead
        // anyway, so it reads through it; the interleave costs the same and spreads better.
        if live.len() < 3 {
            return None;
        }
        return Some((lowest / STREAM_EXTENT_SECTORS) as usize % live.len());
    }
    live.iter()
        .enumerate()
        .min_by_key(|(_, c)| busy(c.0))
        .map(|(i, _)| i)
}

/// Plans `piece` for `dir` with what [`PlanInputs`] says.
pub fn plan_piece(
    geo: &Geo,
    piece: &Piece,
    dir: Dir,
    inputs: PlanInputs<'_>,
) -> Result<PieceOp, PlanError> {
    let first_copy;
    let piece = match &piece.kind {
        PieceKind::Copies { .. } if dir == Dir::Read && inputs.resync_pending => {
            let mut p = piece.clone();
            if let PieceKind::Copies { read_hint, .. } = &mut p.kind {
                *read_hint = 0;
            }
            first_copy = p;
            &first_copy
        }
        _ => piece,
    };
    let mut local: Option<Vec<MemberState>> = None;
    let mut lose = |slot: usize| {
        let v = local.get_or_insert_with(|| inputs.states.to_vec());
        if v[slot].usable() {
            v[slot] = MemberState::Faulty;
        }
    };
    for &slot in inputs.unreadable {
        lose(slot);
    }
    if let Some(bad) = inputs.bad {
        let (starts, sectors) = super::split::member_ranges(geo, piece);
        for (slot, from) in starts {
            if bad(slot, from, sectors) {
                lose(slot);
            }
        }
    }
    let states = local.as_deref().unwrap_or(inputs.states);
    let chosen;
    let piece = match (&piece.kind, inputs.mirrors) {
        (
            PieceKind::Copies {
                copies,
                sectors,
                read_hint,
                ..
            },
            Some(m),
        ) if dir == Dir::Read && !inputs.resync_pending => {
            let ok = |s: usize| states.get(s).is_some_and(|st| st.usable());
            match choose_copy(copies, *sectors, ok, m) {
                Some(i) if i != *read_hint => {
                    let mut p = piece.clone();
                    if let PieceKind::Copies { read_hint, .. } = &mut p.kind {
                        *read_hint = i;
                    }
                    chosen = p;
                    &chosen
                }
                _ => piece,
            }
        }
        _ => piece,
    };
    let unsynced = match (&piece.kind, inputs.unsynced_from) {
        (
            PieceKind::Band {
                stripe,
                lo,
                sectors,
                ..
            },
            Some(at),
        ) if dir == Dir::Write => stripe * geo.chunk_sectors + lo + sectors > at,
        _ => false,
    };
    PieceOp::new_unsynced(geo, piece, dir, states, unsynced)
}

/// What a failed member I/O of a request means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorAction {
    /// No space could be reserved (a copy-on-write filesystem full on an overwrite): the
    /// member is fine, but the stripe may hold new data beside old parity, so it is resynced
    /// as after a crash, and the request fails with the error.
    ResyncAndRefuse,
    /// The replacement being copied onto failed: it leaves; the slot's member stays.
    FailReplacement,
    /// A read error in a read request: the piece is planned again without that slot (served
    /// from redundancy) and the range is rewritten afterwards (md's read-error repair).
    ReplanWithout,
    /// The member failed; a piece that was reading is planned again.
    FailMember { replan: bool },
}

/// Decides what a failed member I/O means. `to_replacement`: it went to a slot's
/// replacement; `already_unreadable`: the slot returned a read error to this piece before;
/// `phase`: the direction of the piece's phase the I/O belonged to.
pub fn on_member_error(
    geo: &Geo,
    request: Dir,
    phase: Dir,
    no_space: bool,
    to_replacement: bool,
    already_unreadable: bool,
) -> ErrorAction {
    if no_space {
        ErrorAction::ResyncAndRefuse
    } else if to_replacement {
        ErrorAction::FailReplacement
    } else if request == Dir::Read
        && geo.level() != raidkit_layout::Level::Raid0
        && !already_unreadable
    {
        ErrorAction::ReplanWithout
    } else {
        ErrorAction::FailMember {
            replan: phase == Dir::Read,
        }
    }
}
