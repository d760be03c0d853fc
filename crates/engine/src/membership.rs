//! The two index spaces of an array's membership, as types.
//!
//! A *slot* is a position in the stripe (md's role, `0..raid_disks`); a *member* is a device
//! attached to the array, in the order attached (spares, replacements and faulty ones too). A
//! slot is filled by at most one member at a time, and the member filling it changes as members
//! fail and spares take over, so the two numbers are different things that are both small
//! integers. [`Slot`] and [`MemberId`] keep them apart, and [`BySlot`] and [`ByMember`] are
//! vectors that can be indexed only by their own kind: `state.slot_state[member]` does not
//! compile.
//!
//! Invariants: an [`IdVec`] never shrinks except by [`IdVec::clear`]; ids handed out by
//! [`IdVec::push`] stay valid (removed members are `None`, not deleted).

use crate::plan::MemberState;
use raidkit_metadata::Superblock;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

/// Who fills which slot, in what state, and every member's superblock as it will next be
/// written: what membership changes decide on. Holds no device and does no I/O.
#[derive(Clone, Debug)]
pub(crate) struct Roster {
    /// Each attached member's superblock (kept in memory, written on every change).
    pub(crate) sbs: ByMember<Superblock>,
    /// Per slot: the member filling it, if any.
    pub(crate) slot_member: BySlot<Option<MemberId>>,
    pub(crate) slot_state: BySlot<MemberState>,
    /// Per slot: a member being copied from the slot's member (md's replacement).
    pub(crate) replacement: BySlot<Option<MemberId>>,
    /// Per slot: read errors corrected from redundancy since the slot's member joined; past
    /// `MAX_CORRECTED_READ_ERRORS` the member is failed (md's max_corrected_read_errors).
    pub(crate) read_errors: BySlot<u32>,
    /// Per slot: the member being rebuilt came back and only needs what the write-intent
    /// bitmap marks (md's bitmap-based recovery after a re-add).
    pub(crate) bitmap_recovery: BySlot<bool>,
    /// More members are lost than the level can lose: why. No further writes.
    pub(crate) failed: Option<String>,
}

/// A position in the stripe (md's role number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(pub usize);

/// A device attached to the array, numbered in the order attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(pub usize);

/// An index space: a small number with a type of its own.
pub trait Id: Copy {
    fn from_index(i: usize) -> Self;
    fn index(self) -> usize;
}

impl Id for Slot {
    fn from_index(i: usize) -> Self {
        Slot(i)
    }
    fn index(self) -> usize {
        self.0
    }
}

impl Id for MemberId {
    fn from_index(i: usize) -> Self {
        MemberId(i)
    }
    fn index(self) -> usize {
        self.0
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A vector indexed by one kind of id only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdVec<I, T> {
    items: Vec<T>,
    _id: PhantomData<I>,
}

/// Per slot (`0..raid_disks`).
pub type BySlot<T> = IdVec<Slot, T>;
/// Per attached member.
pub type ByMember<T> = IdVec<MemberId, T>;

impl<I: Id, T> IdVec<I, T> {
    pub fn from_vec(items: Vec<T>) -> Self {
        IdVec {
            items,
            _id: PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Every id, in order.
    pub fn ids(&self) -> impl Iterator<Item = I> + use<I, T> {
        (0..self.items.len()).map(I::from_index)
    }

    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.items.iter_mut()
    }

    /// Each item with its id.
    pub fn enumerate(&self) -> impl Iterator<Item = (I, &T)> {
        self.items
            .iter()
            .enumerate()
            .map(|(i, t)| (I::from_index(i), t))
    }

    pub fn get(&self, id: I) -> Option<&T> {
        self.items.get(id.index())
    }

    pub fn get_mut(&mut self, id: I) -> Option<&mut T> {
        self.items.get_mut(id.index())
    }

    /// The id of the first item for which `f` holds.
    pub fn position(&self, f: impl FnMut(&T) -> bool) -> Option<I> {
        self.items.iter().position(f).map(I::from_index)
    }

    /// Appends an item and returns its id.
    pub fn push(&mut self, item: T) -> I {
        self.items.push(item);
        I::from_index(self.items.len() - 1)
    }

    pub fn first(&self) -> Option<&T> {
        self.items.first()
    }

    pub fn clear(&mut self) {
        self.items.clear()
    }

    /// The items in id order, for code that takes a plain slice indexed by position (the
    /// planner's member states, one per slot).
    pub fn as_slice(&self) -> &[T] {
        &self.items
    }
}

impl<I: Id, T: PartialEq> IdVec<I, T> {
    pub fn contains(&self, x: &T) -> bool {
        self.items.contains(x)
    }

    /// The id of the first item equal to `x`.
    pub fn find(&self, x: &T) -> Option<I> {
        self.position(|t| t == x)
    }
}

impl<I: Id, T: Clone> IdVec<I, T> {
    /// `n` copies of `item`.
    pub fn filled(item: T, n: usize) -> Self {
        Self::from_vec(vec![item; n])
    }

    /// Grows (or shrinks) to `n` items, new ones copies of `item`.
    pub fn resize(&mut self, n: usize, item: T) {
        self.items.resize(n, item)
    }

    pub fn to_vec(&self) -> Vec<T> {
        self.items.clone()
    }
}

impl<I: Id, T> Index<I> for IdVec<I, T> {
    type Output = T;
    fn index(&self, id: I) -> &T {
        &self.items[id.index()]
    }
}

impl<I: Id, T> IndexMut<I> for IdVec<I, T> {
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.items[id.index()]
    }
}

impl<'a, I: Id, T> IntoIterator for &'a IdVec<I, T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl<'a, I: Id, T> IntoIterator for &'a mut IdVec<I, T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_index_only_their_own_vector_and_push_hands_out_the_next_id() {
        let mut members: ByMember<&str> = ByMember::from_vec(vec!["a", "b"]);
        assert_eq!(members.push("c"), MemberId(2));
        let mut slots: BySlot<Option<MemberId>> = BySlot::filled(None, 3);
        slots[Slot(1)] = Some(MemberId(2));
        assert_eq!(slots.find(&Some(MemberId(2))), Some(Slot(1)));
        assert_eq!(members[slots[Slot(1)].unwrap()], "c");
        assert_eq!(
            slots.enumerate().map(|(s, _)| s).collect::<Vec<_>>(),
            vec![Slot(0), Slot(1), Slot(2)]
        );
        assert_eq!(slots.find(&Some(MemberId(0))), None);
    }
}
