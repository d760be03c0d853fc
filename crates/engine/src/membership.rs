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
//! Membership changes are decided here, on a [`Roster`] alone: [`Roster::fail`] (a slot's
//! member failed, a replacement carries on or a spare takes the slot), [`Roster::take_spares`],
//! [`Roster::fail_replacement`] and [`Roster::fail_spare`]. Each changes only memory and
//! returns a [`Transition`]: the roles every superblock records from now on and the events to
//! report. The driver (`array/members.rs`) writes the superblocks and wakes the task service;
//! should a superblock write fail, that is one more decision here, applied in the same loop
//! (md's `md_error` then `md_update_sb`), so nothing recurses and a crash can fall between
//! any decision and its superblock write.
//!
//! Invariants: an [`IdVec`] never shrinks except by [`IdVec::clear`]; ids handed out by
//! [`IdVec::push`] stay valid (removed members are `None`, not deleted). A transition never
//! makes a slot's state `InSync` or `Rebuilding` for a member that is not attached.

pub(crate) mod assembly;

use crate::error::{EngineError, Result};
use crate::events::ArrayEvent;
use crate::geometry::Geo;
use crate::plan::MemberState;
use raidkit_layout::Level as RaidLevel;
use raidkit_metadata::{DevRole, FeatureMap, Superblock};
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

/// The name of every attached member (`None`: not attached, or removed).
pub(crate) type Names = ByMember<Option<String>>;

/// The name of `member`, or nothing when it is not attached.
fn name_of(names: &Names, member: MemberId) -> String {
    names.get(member).cloned().flatten().unwrap_or_default()
}

/// What a membership change decided, for the driver to carry out.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Transition {
    /// `(device number, role)` every superblock records from now on.
    pub(crate) roles: Vec<(u32, DevRole)>,
    /// The superblocks must be written (events + 1) even if `roles` is empty.
    pub(crate) write: bool,
    pub(crate) events: Vec<ArrayEvent>,
    /// A slot is being rebuilt now: the task service has work.
    pub(crate) wake: bool,
}

impl Transition {
    /// `other` after `self`.
    pub(crate) fn then(mut self, other: Transition) -> Transition {
        self.roles.extend(other.roles);
        self.write |= other.write;
        self.events.extend(other.events);
        self.wake |= other.wake;
        self
    }

    /// Sets the roles in `sb`.
    pub(crate) fn apply_roles(&self, sb: &mut Superblock) {
        for &(d, role) in &self.roles {
            // A device number past the role table cannot be in it: nothing to record.
            let _ = sb.set_role(d, role);
        }
    }
}

impl Roster {
    /// The slots being rebuilt and the member rebuilding each; with `pass`, only those
    /// members (a rebuild pass keeps to the members it started with: a spare that takes a
    /// slot meanwhile is rebuilt by the next pass, from its own start).
    pub(crate) fn rebuilding(&self, pass: Option<&[MemberId]>) -> Vec<(Slot, MemberId)> {
        self.slot_state
            .ids()
            .filter(|&s| self.slot_state[s] == MemberState::Rebuilding)
            .filter_map(|s| Some((s, self.slot_member[s]?)))
            .filter(|(_, i)| pass.is_none_or(|p| p.contains(i)))
            .collect()
    }

    /// Slot `slot`'s member failed (an I/O error, a failed log or superblock write, or on
    /// request). The slot is faulty; if that is more than the level can lose, the array is
    /// failed. A replacement being copied from the member carries on as the slot's rebuild
    /// from where the copy got to (md does the same); otherwise a spare takes the slot when
    /// `spares` allows. Nothing happens to a slot that is not written to any more.
    pub(crate) fn fail(
        &mut self,
        geo: &Geo,
        slot: Slot,
        why: &str,
        names: &Names,
        spares: bool,
    ) -> Transition {
        let mut t = Transition::default();
        if !self.slot_state[slot].writable() {
            return t;
        }
        self.slot_state[slot] = MemberState::Faulty;
        let member = self.slot_member[slot];
        let name = match member {
            Some(i) => name_of(names, i),
            None => format!("slot {slot}"),
        };
        t.events.push(ArrayEvent::MemberFaulty {
            member: name,
            slot: Some(slot.0),
            reason: why.to_string(),
        });
        self.read_errors[slot] = 0; // the count belongs to the member leaving the slot
        let lost: Vec<bool> = self.slot_state.iter().map(|s| !s.usable()).collect();
        let lost_slots: Vec<usize> = (0..lost.len()).filter(|&s| lost[s]).collect();
        if !geo.survives(&lost) && self.failed.is_none() {
            let detail = format!(
                "RAID {} over {} devices has lost slots {:?}, more than it can; no further writes",
                geo.md_level(),
                geo.raid_disks,
                lost_slots
            );
            t.events.push(ArrayEvent::ArrayFailed {
                detail: detail.clone(),
            });
            self.failed = Some(detail);
        }
        if self.failed.is_none() {
            t.events.push(ArrayEvent::ArrayDegraded {
                missing_slots: lost_slots,
            });
        }
        self.slot_member[slot] = None;
        if let Some(i) = member {
            t.roles.push((self.sbs[i].dev_number, DevRole::Faulty));
        }
        if let Some(r) = self.replacement[slot].take() {
            let sb = &mut self.sbs[r];
            sb.feature_map.remove(FeatureMap::REPLACEMENT);
            if sb.recovery_offset().is_none() {
                sb.set_recovery_offset(0);
            }
            t.roles
                .push((sb.dev_number, DevRole::Active(slot.0 as u16)));
            self.slot_member[slot] = Some(r);
            self.slot_state[slot] = MemberState::Rebuilding;
            t.events
                .push(ArrayEvent::ReplacementContinuesAsRebuild { slot: slot.0 });
            t.wake = true;
        }
        let t = t.then(self.take_spares(geo, names, spares));
        Transition {
            write: !t.roles.is_empty(),
            ..t
        }
    }

    /// Gives every slot without a working member an attached spare, if there is one: the
    /// spare becomes `Rebuilding` in that slot with recovery from sector 0 (md's recovery
    /// start). Nothing when `spares` is false (a read-only array), the array failed, or the
    /// level has no redundancy to rebuild from.
    pub(crate) fn take_spares(&mut self, geo: &Geo, names: &Names, spares: bool) -> Transition {
        let mut t = Transition::default();
        if !spares || self.failed.is_some() || geo.level() == RaidLevel::Raid0 {
            return t;
        }
        for slot in self.slot_state.ids() {
            if self.slot_state[slot].writable() {
                continue;
            }
            let in_use = |r: &Roster, i: MemberId| {
                r.slot_member.contains(&Some(i)) || r.replacement.contains(&Some(i))
            };
            let Some(i) = self.sbs.ids().find(|&i| {
                names.get(i).is_some_and(Option::is_some)
                    && !in_use(self, i)
                    && self.sbs[i].role_of(self.sbs[i].dev_number) == DevRole::Spare
            }) else {
                break;
            };
            let d = self.sbs[i].dev_number;
            let role = DevRole::Active(slot.0 as u16);
            if self.sbs[i].set_role(d, role).is_err() {
                continue;
            }
            self.sbs[i].set_recovery_offset(0);
            self.slot_member[slot] = Some(i);
            self.slot_state[slot] = MemberState::Rebuilding;
            self.bitmap_recovery[slot] = false;
            t.events.push(ArrayEvent::SpareTaken {
                member: names[i].clone().unwrap_or_default(),
                slot: slot.0,
            });
            t.roles.push((d, role));
            t.write = true;
            t.wake = true;
        }
        t
    }

    /// An I/O to `member` failed (md's `md_error` on that device): fails the role it has
    /// now, the slot it fills ([`Roster::fail`]) or the slot it is copied into
    /// ([`Roster::fail_replacement`]). Nothing when it has neither (it failed already, or
    /// left): the error says nothing about whoever fills its slot since, such as a spare that
    /// took the slot when it failed.
    pub(crate) fn fail_member(
        &mut self,
        geo: &Geo,
        member: MemberId,
        why: &str,
        names: &Names,
        spares: bool,
    ) -> Transition {
        if let Some(slot) = self.slot_member.find(&Some(member)) {
            self.fail(geo, slot, why, names, spares)
        } else if let Some(slot) = self.replacement.find(&Some(member)) {
            self.fail_replacement(slot, why, names)
        } else {
            Transition::default()
        }
    }

    /// The replacement being copied into `slot` failed: it is faulty, and the slot's member
    /// stays.
    pub(crate) fn fail_replacement(&mut self, slot: Slot, why: &str, names: &Names) -> Transition {
        let Some(r) = self.replacement[slot].take() else {
            return Transition::default();
        };
        Transition {
            roles: vec![(self.sbs[r].dev_number, DevRole::Faulty)],
            write: true,
            events: vec![ArrayEvent::MemberFaulty {
                member: name_of(names, r),
                slot: None,
                reason: format!("replacement: {why}"),
            }],
            wake: false,
        }
    }

    /// The rebuild of `slot` onto `member` has reached member sector `cursor`; with `done`
    /// the member is in sync. Nothing when the slot has changed hands meanwhile.
    pub(crate) fn rebuild_progress(
        &mut self,
        slot: Slot,
        member: MemberId,
        cursor: u64,
        done: bool,
        names: &Names,
    ) -> Transition {
        let mut t = Transition::default();
        if self.slot_state[slot] != MemberState::Rebuilding
            || self.slot_member[slot] != Some(member)
        {
            return t;
        }
        if done {
            self.sbs[member].clear_recovery_offset();
            self.slot_state[slot] = MemberState::InSync;
            self.bitmap_recovery[slot] = false;
            t.events.push(ArrayEvent::Rebuilt {
                member: name_of(names, member),
                slot: slot.0,
            });
        } else {
            self.sbs[member].set_recovery_offset(cursor);
        }
        t
    }

    /// The copy of `slot` onto its replacement `member` has reached member sector `cursor`;
    /// with `done` the replacement takes the slot and the member it replaced is faulty (md's
    /// end of a replace). Nothing when the replacement has changed meanwhile.
    pub(crate) fn copy_progress(
        &mut self,
        slot: Slot,
        member: MemberId,
        cursor: u64,
        done: bool,
        names: &Names,
    ) -> Transition {
        let mut t = Transition::default();
        if self.replacement[slot] != Some(member) {
            return t;
        }
        if !done {
            self.sbs[member].set_recovery_offset(cursor);
            return t;
        }
        let old = self.slot_member[slot];
        self.replacement[slot] = None;
        self.slot_member[slot] = Some(member);
        self.slot_state[slot] = MemberState::InSync;
        self.sbs[member].clear_recovery_offset();
        self.sbs[member].feature_map.remove(FeatureMap::REPLACEMENT);
        t.roles
            .push((self.sbs[member].dev_number, DevRole::Active(slot.0 as u16)));
        if let Some(o) = old {
            t.roles.push((self.sbs[o].dev_number, DevRole::Faulty));
        }
        t.events.push(ArrayEvent::Replaced {
            member: name_of(names, member),
            old: old.map(|o| name_of(names, o)).unwrap_or_default(),
            slot: slot.0,
        });
        t.write = true;
        t
    }

    /// Takes `member` out of the array: a spare, or a member whose slot no longer counts on
    /// it (faulty). md refuses to remove a member in service, and so does this, with why. A
    /// member no longer attached is out already if every attached member's superblock
    /// records it faulty (what md writes for a removed device too).
    pub(crate) fn remove(&mut self, member: MemberId, names: &Names) -> Result<Transition> {
        let refuse = |why: String| Err(EngineError::Invalid(why));
        if member.0 >= self.sbs.len() {
            return refuse(format!("no member {member}"));
        }
        let dev_number = self.sbs[member].dev_number;
        let Some(name) = names.get(member).cloned().flatten() else {
            let recorded_faulty = self
                .sbs
                .enumerate()
                .filter(|(i, _)| names.get(*i).is_some_and(Option::is_some))
                .all(|(_, sb)| sb.role_of(dev_number) == DevRole::Faulty);
            if !recorded_faulty {
                return refuse(format!(
                    "member {member} was left out of the array at assembly and is not recorded faulty; nothing to remove"
                ));
            }
            return Ok(Transition {
                events: vec![ArrayEvent::MemberRemoved {
                    member: format!("member {member}"),
                }],
                ..Transition::default()
            });
        };
        if let Some(slot) = self.replacement.find(&Some(member)) {
            return refuse(format!(
                "member {member} is replacing slot {slot}; fail it first to stop the replacement"
            ));
        }
        if let Some(slot) = self.slot_member.find(&Some(member)) {
            let state = self.slot_state[slot];
            if state.writable() {
                return refuse(format!(
                    "member {member} is {} in slot {slot}; fail it first (md refuses to remove an active member)",
                    if state.usable() { "active" } else { "being rebuilt" }
                ));
            }
            self.slot_member[slot] = None;
            self.slot_state[slot] = MemberState::Missing;
        }
        Ok(Transition {
            roles: vec![(dev_number, DevRole::Faulty)],
            write: true,
            events: vec![ArrayEvent::MemberRemoved { member: name }],
            wake: false,
        })
    }

    /// `member`, attached just now with its old superblock, takes back `slot`, which no member
    /// holds now; with a write-intent bitmap only what it marks is rebuilt (md's re-add).
    pub(crate) fn re_added(
        &mut self,
        slot: Slot,
        member: MemberId,
        bitmap_regions: u64,
        names: &Names,
    ) -> Transition {
        self.slot_member[slot] = Some(member);
        self.slot_state[slot] = MemberState::Rebuilding;
        self.bitmap_recovery[slot] = true;
        Transition {
            roles: vec![(self.sbs[member].dev_number, DevRole::Active(slot.0 as u16))],
            write: true,
            events: vec![ArrayEvent::ReAdded {
                member: name_of(names, member),
                slot: slot.0,
                bitmap_regions,
            }],
            wake: true,
        }
    }

    /// `member`, attached just now as a spare, starts being copied from the member in service
    /// in `slot` (md's replace): it is the slot's replacement, with recovery from sector 0.
    /// Refused when the slot has no member in sync or is being replaced already.
    pub(crate) fn replace_starts(
        &mut self,
        slot: Slot,
        member: MemberId,
        names: &Names,
    ) -> Result<Transition> {
        if self.replacement[slot].is_some() {
            return Err(EngineError::Invalid(format!(
                "slot {slot} is already being replaced"
            )));
        }
        let sb = &mut self.sbs[member];
        let d = sb.dev_number;
        let role = DevRole::Active(slot.0 as u16);
        sb.set_role(d, role)
            .map_err(|e| EngineError::Metadata(e.to_string()))?;
        sb.feature_map.insert(FeatureMap::REPLACEMENT);
        sb.set_recovery_offset(0);
        self.replacement[slot] = Some(member);
        Ok(Transition {
            roles: vec![(d, role)],
            write: true,
            events: vec![ArrayEvent::ReplaceStarted {
                member: name_of(names, member),
                slot: slot.0,
            }],
            wake: true,
        })
    }

    /// A member in no slot (a spare) could not take a superblock write: it is faulty in every
    /// superblock kept here, written with the next update (as md does).
    pub(crate) fn fail_spare(&mut self, member: MemberId, why: &str, names: &Names) -> Transition {
        let d = self.sbs[member].dev_number;
        for sb in self.sbs.iter_mut() {
            let _ = sb.set_role(d, DevRole::Faulty);
        }
        Transition {
            events: vec![ArrayEvent::MemberFaulty {
                member: name_of(names, member),
                slot: None,
                reason: why.to_string(),
            }],
            ..Transition::default()
        }
    }
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
    use raidkit_metadata::{Level, MdTime, NewMember, SetName, Uuid};

    /// A RAID 5 roster (left-symmetric, `slots` members in sync) with `spares` spares
    /// attached after them, all named `m0`, `m1`, ...
    fn raid5(slots: usize, spares: usize) -> (Geo, Roster, Names) {
        let geo = Geo::new(5, 2, slots, 128, 1 << 20).unwrap();
        let n = slots + spares;
        let roles: Vec<(u32, DevRole)> = (0..n)
            .map(|i| {
                let role = if i < slots {
                    DevRole::Active(i as u16)
                } else {
                    DevRole::Spare
                };
                (i as u32, role)
            })
            .collect();
        let sbs = (0..n)
            .map(|i| {
                Superblock::new_member(&NewMember {
                    set_uuid: Uuid([7; 16]),
                    device_uuid: Uuid([i as u8; 16]),
                    set_name: SetName::new("t"),
                    ctime: MdTime::new(1, 0),
                    level: Level::from_md(5),
                    layout: 2,
                    chunk_sectors: 128,
                    raid_disks: slots as u32,
                    max_dev: 32,
                    dev_number: i as u32,
                    role: roles[i].1,
                    roles: roles.clone(),
                    size_sectors: 1 << 20,
                    data_offset_sectors: 2048,
                    data_size_sectors: 1 << 20,
                    super_offset_sectors: 8,
                    bitmap_offset: None,
                    bblog: None,
                    events: 0,
                    clean: true,
                })
                .unwrap()
            })
            .collect();
        let roster = Roster {
            sbs: ByMember::from_vec(sbs),
            slot_member: BySlot::from_vec((0..slots).map(|i| Some(MemberId(i))).collect()),
            slot_state: BySlot::filled(MemberState::InSync, slots),
            replacement: BySlot::filled(None, slots),
            read_errors: BySlot::filled(0, slots),
            bitmap_recovery: BySlot::filled(false, slots),
            failed: None,
        };
        let names = ByMember::from_vec((0..n).map(|i| Some(format!("m{i}"))).collect());
        (geo, roster, names)
    }

    #[test]
    fn a_failed_member_is_recorded_faulty_and_a_spare_takes_its_slot() {
        let (geo, mut r, names) = raid5(4, 1);
        r.read_errors[Slot(1)] = 3;
        let t = r.fail(&geo, Slot(1), "I/O error", &names, true);
        assert_eq!(
            t.roles,
            vec![(1, DevRole::Faulty), (4, DevRole::Active(1))],
            "the failed device is faulty, the spare active in its slot, in every superblock"
        );
        assert!(t.write && t.wake);
        assert_eq!(
            t.events,
            vec![
                ArrayEvent::MemberFaulty {
                    member: "m1".into(),
                    slot: Some(1),
                    reason: "I/O error".into(),
                },
                ArrayEvent::ArrayDegraded {
                    missing_slots: vec![1],
                },
                ArrayEvent::SpareTaken {
                    member: "m4".into(),
                    slot: 1,
                },
            ]
        );
        assert_eq!(r.slot_member[Slot(1)], Some(MemberId(4)));
        assert_eq!(r.slot_state[Slot(1)], MemberState::Rebuilding);
        assert_eq!(r.read_errors[Slot(1)], 0);
        assert_eq!(r.sbs[MemberId(4)].recovery_offset(), Some(0));
        assert_eq!(r.failed, None);
        // Failing a slot that is no longer written to decides nothing.
        let (geo, mut r, names) = raid5(4, 0);
        r.fail(&geo, Slot(2), "x", &names, true);
        assert_eq!(
            r.fail(&geo, Slot(2), "again", &names, true),
            Transition::default()
        );
    }

    #[test]
    fn losing_more_than_the_level_can_fails_the_array_and_takes_no_spare() {
        let (geo, mut r, names) = raid5(4, 1);
        r.fail(&geo, Slot(0), "first", &names, false);
        assert_eq!(r.slot_member[Slot(0)], None, "read-only: no spare taken");
        let t = r.fail(&geo, Slot(3), "second", &names, true);
        assert!(r.failed.is_some());
        assert!(
            matches!(t.events[1], ArrayEvent::ArrayFailed { .. }),
            "{t:?}"
        );
        assert!(!t.events.iter().any(|e| matches!(
            e,
            ArrayEvent::ArrayDegraded { .. } | ArrayEvent::SpareTaken { .. }
        )));
        assert_eq!(t.roles, vec![(3, DevRole::Faulty)]);
    }

    #[test]
    fn a_replacement_carries_on_as_the_rebuild_of_a_slot_whose_member_fails() {
        let (geo, mut r, names) = raid5(3, 1);
        r.replacement[Slot(2)] = Some(MemberId(3));
        r.sbs[MemberId(3)]
            .feature_map
            .insert(FeatureMap::REPLACEMENT);
        r.sbs[MemberId(3)].set_recovery_offset(4096);
        let t = r.fail(&geo, Slot(2), "gone", &names, true);
        assert_eq!(t.roles, vec![(2, DevRole::Faulty), (3, DevRole::Active(2))]);
        assert!(t
            .events
            .contains(&ArrayEvent::ReplacementContinuesAsRebuild { slot: 2 }));
        assert_eq!(r.slot_member[Slot(2)], Some(MemberId(3)));
        assert_eq!(r.replacement[Slot(2)], None);
        assert_eq!(
            r.sbs[MemberId(3)].recovery_offset(),
            Some(4096),
            "the rebuild goes on from where the copy got to"
        );
        assert!(!r.sbs[MemberId(3)]
            .feature_map
            .contains(FeatureMap::REPLACEMENT));
    }

    #[test]
    fn a_spare_that_cannot_take_a_write_is_faulty_in_memory_until_the_next_write() {
        let (_, mut r, names) = raid5(3, 1);
        let t = r.fail_spare(MemberId(3), "write failed", &names);
        assert!(!t.write && t.roles.is_empty());
        assert!(r.sbs.iter().all(|sb| sb.role_of(3) == DevRole::Faulty));
        // A replacement that fails is faulty and the slot keeps its member.
        let (_, mut r, names) = raid5(3, 1);
        r.replacement[Slot(0)] = Some(MemberId(3));
        let t = r.fail_replacement(Slot(0), "copy failed", &names);
        assert_eq!(t.roles, vec![(3, DevRole::Faulty)]);
        assert_eq!(r.slot_member[Slot(0)], Some(MemberId(0)));
        assert_eq!(r.replacement[Slot(0)], None);
    }

    #[test]
    fn an_error_fails_the_member_it_came_from_not_the_one_that_took_its_slot() {
        let (geo, mut r, names) = raid5(4, 1);
        r.fail_member(&geo, MemberId(0), "write error", &names, true);
        assert_eq!(
            r.slot_member[Slot(0)],
            Some(MemberId(4)),
            "the spare took slot 0"
        );
        // A second error of the same phase from the member that failed: the spare stays.
        let t = r.fail_member(&geo, MemberId(0), "write error", &names, true);
        assert_eq!(t, Transition::default());
        assert_eq!(r.slot_member[Slot(0)], Some(MemberId(4)));
        assert_eq!(r.slot_state[Slot(0)], MemberState::Rebuilding);
        // The spare's own error fails it.
        let t = r.fail_member(&geo, MemberId(4), "write error", &names, true);
        assert_eq!(t.roles, vec![(4, DevRole::Faulty)]);
        assert_eq!(r.slot_state[Slot(0)], MemberState::Faulty);

        // A replacement fails as a replacement, and once it carries on as the slot's
        // rebuild, as the slot's member (no spares here: these superblocks still call the
        // replacement one, as the driver would have rewritten them).
        let (geo, mut r, names) = raid5(3, 1);
        r.replacement[Slot(2)] = Some(MemberId(3));
        let t = r.fail_member(&geo, MemberId(3), "copy failed", &names, false);
        assert_eq!(t.roles, vec![(3, DevRole::Faulty)]);
        assert_eq!(r.slot_member[Slot(2)], Some(MemberId(2)));
        let (geo, mut r, names) = raid5(3, 1);
        r.replacement[Slot(2)] = Some(MemberId(3));
        r.fail_member(&geo, MemberId(2), "gone", &names, false);
        assert_eq!(r.slot_member[Slot(2)], Some(MemberId(3)));
        let t = r.fail_member(&geo, MemberId(3), "write error", &names, false);
        assert_eq!(t.roles, vec![(3, DevRole::Faulty)]);
        assert_eq!(r.slot_state[Slot(2)], MemberState::Faulty);
    }

    #[test]
    fn a_member_in_service_is_not_removed_and_a_finished_copy_takes_the_slot() {
        let (geo, mut r, names) = raid5(3, 1);
        let refused = r.remove(MemberId(1), &names).unwrap_err();
        assert!(refused.to_string().contains("fail it first"), "{refused}");
        assert_eq!(
            r.slot_state[Slot(1)],
            MemberState::InSync,
            "refusal changes nothing"
        );
        r.fail(&geo, Slot(1), "x", &names, false);
        let t = r.remove(MemberId(1), &names).unwrap();
        assert_eq!(t.roles, vec![(1, DevRole::Faulty)]);
        assert!(t.events.contains(&ArrayEvent::MemberRemoved {
            member: "m1".into()
        }));
        assert_eq!(r.slot_member[Slot(1)], None);

        let (_, mut r, names) = raid5(3, 1);
        r.replacement[Slot(0)] = Some(MemberId(3));
        assert!(
            r.remove(MemberId(3), &names).is_err(),
            "a replacement is in service"
        );
        let t = r.copy_progress(Slot(0), MemberId(3), 100, false, &names);
        assert_eq!(
            (t.write, r.sbs[MemberId(3)].recovery_offset()),
            (false, Some(100))
        );
        let t = r.copy_progress(Slot(0), MemberId(3), 0, true, &names);
        assert_eq!(t.roles, vec![(3, DevRole::Active(0)), (0, DevRole::Faulty)]);
        assert_eq!(r.slot_member[Slot(0)], Some(MemberId(3)));
        assert_eq!(r.replacement[Slot(0)], None);
        // The same completion again finds no replacement: nothing more to do.
        assert_eq!(
            r.copy_progress(Slot(0), MemberId(3), 0, true, &names),
            Transition::default()
        );
    }

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
