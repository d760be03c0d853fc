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
    /// Slots that returned a read error to this piece: it is planned without them (served
    /// from redundancy).
    pub unreadable: &'a [usize],
    /// `bad(slot, sector, sectors)`: the slot's bad-block log covers part of those sectors
    /// (member sectors for parity levels, copy sectors for mirrors); the piece is planned as
    /// if the slot were lost there. `None` when no member has bad blocks.
    pub bad: Option<&'a dyn Fn(usize, u64, u64) -> bool>,
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
        match &piece.kind {
            PieceKind::Copies {
                copies, sectors, ..
            } => {
                for &(m, s) in copies {
                    if bad(m, s, *sectors) {
                        lose(m);
                    }
                }
            }
            PieceKind::Band {
                stripe,
                lo,
                sectors,
                ..
            } => {
                let from = stripe * geo.chunk_sectors + lo;
                for slot in 0..geo.raid_disks {
                    if bad(slot, from, *sectors) {
                        lose(slot);
                    }
                }
            }
        }
    }
    let states = local.as_deref().unwrap_or(inputs.states);
    PieceOp::new(geo, piece, dir, states)
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
