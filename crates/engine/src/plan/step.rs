//! What a background step (rebuild, replace, check, repair, resync, patrol) reads and where
//! each part of what it writes comes from, decided on slot states and bad-block lists alone.
//! The tasks (`tasks/`) gather those facts under the array's lock, ask here, and do the I/O;
//! when a read fails they report it and ask again ([`after_reads`]), as md's `md_do_sync`
//! and `handle_stripe` re-plan around a member that failed.
//!
//! Slots are positions in the stripe (`0..raid_disks`); `states` is indexed by slot.

use super::MemberState;

/// A slot's bad-block ranges within a step: (slot, [(member sector, sectors)]).
pub type BadRanges = (usize, Vec<(u64, u64)>);

/// The slots a step reads, to compute `targets` (the slots being rebuilt or reconstructed)
/// or to scan: every slot that can serve reads, except the targets and the slots whose
/// bad-block log lists part of the range (`listed`): what such a member holds there is not
/// data, however it reads.
pub fn sources(states: &[MemberState], targets: &[usize], listed: &[usize]) -> Vec<bool> {
    states
        .iter()
        .enumerate()
        .map(|(slot, s)| s.usable() && !targets.contains(&slot) && !listed.contains(&slot))
        .collect()
}

/// Whether `[a, a + a_len)` and `[b, b + b_len)` overlap.
pub fn overlaps(a: u64, a_len: u64, b: u64, b_len: u64) -> bool {
    a < b + b_len && b < a + a_len
}

/// Whether any of `ranges` (start, sectors) overlaps `[b, b + len)`.
fn any_overlaps(ranges: &[(u64, u64)], b: u64, len: u64) -> bool {
    ranges.iter().any(|&(s, l)| overlaps(s, l, b, len))
}

/// Whether a bad-block log of `bad` lists part of block `[b, b + len)`.
pub fn block_listed(bad: &[BadRanges], b: u64, len: u64) -> bool {
    bad.iter().any(|(_, ranges)| any_overlaps(ranges, b, len))
}

/// The sources of block `[b, b + len)` of a step that reads `sources`: those whose
/// bad-block log does not list the block.
pub fn block_sources(sources: &[bool], bad: &[BadRanges], b: u64, len: u64) -> Vec<bool> {
    let mut r = sources.to_vec();
    for (slot, ranges) in bad {
        if any_overlaps(ranges, b, len) {
            r[*slot] = false;
        }
    }
    r
}

/// The copy a range of slot `not` is filled from: the first of `copies` (slot, member
/// sector), in the layout's order, on another slot that can serve reads.
pub fn copy_source(
    copies: &[(usize, u64)],
    not: usize,
    can_read: impl Fn(usize) -> bool,
) -> Option<(usize, u64)> {
    copies
        .iter()
        .copied()
        .find(|&(slot, _)| slot != not && can_read(slot))
}

/// The copies a mirror check compares, as (index into `copies`, slot, member sector): those
/// that can serve reads, in the layout's order. The first is the reference, the copy md's
/// resync copies from; with fewer than two there is nothing to compare.
pub fn compared_copies(
    copies: &[(usize, u64)],
    can_read: impl Fn(usize) -> bool,
) -> Vec<(usize, usize, u64)> {
    copies
        .iter()
        .enumerate()
        .filter(|&(_, &(slot, _))| can_read(slot))
        .map(|(k, &(slot, ms))| (k, slot, ms))
        .collect()
}

/// Whether `slot` holds current data over member sectors below `end`: in sync, or being
/// rebuilt and recovered that far (`recovered`, per slot; md's R5_Insync).
pub fn current_below(states: &[MemberState], recovered: &[u64], slot: usize, end: u64) -> bool {
    match states.get(slot) {
        Some(MemberState::InSync) => true,
        Some(MemberState::Rebuilding) => recovered.get(slot).is_some_and(|&r| end <= r),
        _ => false,
    }
}

/// Whether parity can be compared with data: only while every slot can be read.
pub fn parity_comparable(states: &[MemberState]) -> bool {
    states.iter().all(|s| s.usable())
}

/// What a step does after a round of reads, given the slots whose read erred.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterReads {
    /// Every read returned data: go on with what was read.
    Proceed,
    /// Fail the members of these slots (md's answer to a read error in background work) and
    /// plan the reads again without them.
    FailAndReplan(Vec<usize>),
}

/// md's answer to read errors in background work, in one place.
pub fn after_reads(erred: &[usize]) -> AfterReads {
    if erred.is_empty() {
        AfterReads::Proceed
    } else {
        let mut slots = erred.to_vec();
        slots.sort_unstable();
        slots.dedup();
        AfterReads::FailAndReplan(slots)
    }
}

/// Where a replayed journal row's page of one data slot comes from, to complete the row's
/// parity (md's write-through journal logs every row whole; raidkit computes a parity page a
/// member could not take at the time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowSource {
    /// The row logs this slot's page.
    Logged,
    /// The slot's member holds it: read it there.
    Member,
    /// The slot is lost (or its read failed): rebuild it from the others.
    Rebuild,
}

/// The source of each data slot's page of a journal row: what the row logs, else the member
/// while it is in sync and attached, else reconstruction. A member read that then fails is
/// rebuilt instead (ask again with `read_failed`).
pub fn row_source(
    logged: bool,
    state: MemberState,
    attached: bool,
    read_failed: bool,
) -> RowSource {
    if logged {
        RowSource::Logged
    } else if state == MemberState::InSync && attached && !read_failed {
        RowSource::Member
    } else {
        RowSource::Rebuild
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MemberState::*;

    #[test]
    fn sources_leave_out_targets_lost_and_listed_slots() {
        let states = [InSync, Rebuilding, InSync, Faulty, InSync, Missing];
        assert_eq!(
            sources(&states, &[1], &[4]),
            vec![true, false, true, false, false, false]
        );
        // A target in sync (a check's reconstruction of one member) is not read either.
        assert_eq!(
            sources(&states, &[0], &[]),
            vec![false, false, true, false, true, false]
        );
    }

    #[test]
    fn block_sources_drop_only_the_slots_listing_that_block() {
        let bad = vec![(0, vec![(100, 8)]), (2, vec![(116, 4)])];
        let sources = [true, true, true];
        assert_eq!(block_sources(&sources, &bad, 88, 8), vec![true; 3]);
        assert_eq!(
            block_sources(&sources, &bad, 104, 8),
            vec![false, true, true]
        );
        assert_eq!(
            block_sources(&sources, &bad, 112, 8),
            vec![true, true, false]
        );
        assert!(!block_listed(&bad, 120, 8));
        assert!(block_listed(&bad, 119, 1));
        // A slot that was not a source stays one that is not.
        assert_eq!(
            block_sources(&[true, false, true], &bad, 104, 8),
            vec![false, false, true]
        );
    }

    #[test]
    fn copy_source_is_the_first_readable_copy_on_another_slot() {
        let copies = [(3, 10), (0, 20), (1, 30)];
        let readable = |s: usize| s != 0;
        assert_eq!(copy_source(&copies, 1, readable), Some((3, 10)));
        assert_eq!(copy_source(&copies, 3, readable), Some((1, 30)));
        assert_eq!(copy_source(&copies, 3, |s| s == 3), None);
    }

    #[test]
    fn compared_copies_keep_the_layout_order_with_the_first_as_reference() {
        let copies = [(2, 8), (3, 8), (0, 16)];
        assert_eq!(
            compared_copies(&copies, |s| s != 2),
            vec![(1, 3, 8), (2, 0, 16)]
        );
        assert_eq!(compared_copies(&copies, |_| false), vec![]);
    }

    #[test]
    fn a_slot_being_rebuilt_is_current_only_below_its_cursor() {
        let states = [InSync, Rebuilding, Faulty];
        let recovered = [0, 64, 0];
        assert!(current_below(&states, &recovered, 0, 1 << 20));
        assert!(current_below(&states, &recovered, 1, 64));
        assert!(!current_below(&states, &recovered, 1, 65));
        assert!(!current_below(&states, &recovered, 2, 1));
        assert!(!current_below(&states, &recovered, 3, 1), "no such slot");
    }

    #[test]
    fn parity_is_comparable_only_with_every_slot_readable() {
        assert!(parity_comparable(&[InSync, InSync, InSync]));
        assert!(!parity_comparable(&[InSync, Rebuilding, InSync]));
        assert!(!parity_comparable(&[InSync, Missing]));
    }

    #[test]
    fn read_errors_fail_each_slot_once_and_replan() {
        assert_eq!(after_reads(&[]), AfterReads::Proceed);
        assert_eq!(
            after_reads(&[4, 1, 4]),
            AfterReads::FailAndReplan(vec![1, 4])
        );
    }

    #[test]
    fn a_journal_row_takes_logged_pages_then_in_sync_members_then_rebuilds() {
        assert_eq!(row_source(true, Faulty, false, false), RowSource::Logged);
        assert_eq!(row_source(false, InSync, true, false), RowSource::Member);
        assert_eq!(row_source(false, InSync, true, true), RowSource::Rebuild);
        assert_eq!(row_source(false, InSync, false, false), RowSource::Rebuild);
        assert_eq!(
            row_source(false, Rebuilding, true, false),
            RowSource::Rebuild
        );
        assert_eq!(row_source(false, Missing, false, false), RowSource::Rebuild);
    }
}
