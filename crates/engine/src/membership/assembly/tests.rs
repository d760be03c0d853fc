//! Assembly decisions: which members fill which slots, and what is refused.

use super::*;
use crate::error::EngineError;
use raidkit_metadata::{mdadm_max_dev, Level, MdTime, NewMember, SetName};

const SIZE: u64 = 8192;

/// The superblocks of a RAID 5 (left-symmetric, 64 KiB chunks) over `n` members at
/// `events`, clean, as create writes them.
fn raid5(n: u32, events: u64) -> Vec<FoundSuperblock> {
    let roles: Vec<(u32, DevRole)> = (0..n).map(|i| (i, DevRole::Active(i as u16))).collect();
    (0..n)
        .map(|i| {
            let mut sb = Superblock::new_member(&NewMember {
                set_uuid: Uuid([7; 16]),
                device_uuid: Uuid([i as u8 + 1; 16]),
                set_name: SetName::new("t"),
                ctime: MdTime::new(1, 0),
                level: Level::from_md(5),
                layout: 2,
                chunk_sectors: 128,
                raid_disks: n,
                max_dev: mdadm_max_dev(n),
                dev_number: i,
                role: DevRole::Active(i as u16),
                roles: roles.clone(),
                size_sectors: SIZE,
                data_offset_sectors: 2048,
                data_size_sectors: SIZE,
                super_offset_sectors: 8,
                bitmap_offset: None,
                bblog: None,
                events,
                clean: true,
            })
            .unwrap();
            sb.events = events;
            FoundSuperblock {
                sb,
                version: SuperblockVersion::V1_2,
                device_sectors: 2048 + SIZE,
            }
        })
        .collect()
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("m{i}")).collect()
}

fn decide_with(found: &[FoundSuperblock], opts: &AssembleOptions) -> Result<Assembly> {
    let names = names(found.len());
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    decide(&refs, found, false, opts)
}

fn states(a: &Assembly) -> Vec<MemberState> {
    a.slot_state.to_vec()
}

#[test]
fn a_healthy_set_fills_every_slot_in_order_given() {
    let mut found = raid5(4, 10);
    found.reverse();
    let a = decide_with(&found, &AssembleOptions::default()).unwrap();
    assert_eq!(states(&a), vec![MemberState::InSync; 4]);
    // Given in reverse: slot 0 is the last member given.
    assert_eq!(a.slot_member[Slot(0)], Some(MemberId(3)));
    assert_eq!(a.slot_member[Slot(3)], Some(MemberId(0)));
    assert!(!a.degraded && !a.report.was_dirty && !a.forced_back);
    assert!(a.use_member.iter().all(|&u| u));
    assert_eq!(a.geo.array_sectors(), 3 * SIZE);
}

#[test]
fn an_absent_member_needs_run_and_then_the_array_is_degraded() {
    let found = raid5(4, 10)[..3].to_vec();
    match decide_with(&found, &AssembleOptions::default()) {
        Err(EngineError::Incomplete { absent, .. }) => {
            assert_eq!(absent.len(), 1);
            assert_eq!((absent[0].slot, absent[0].dev_number), (3, 3));
        }
        other => panic!("expected Incomplete, got {other:?}"),
    }
    let run = AssembleOptions {
        run: true,
        ..Default::default()
    };
    let a = decide_with(&found, &run).unwrap();
    assert!(a.degraded);
    assert_eq!(a.slot_state[Slot(3)], MemberState::Missing);
    assert!(a.report.events.contains(&ArrayEvent::RunningDegraded {
        missing_slots: vec![3]
    }));
    // Read-only needs no --run: nothing would be recorded.
    let ro = AssembleOptions {
        read_only: true,
        ..Default::default()
    };
    assert!(decide_with(&found, &ro).unwrap().read_only);
}

#[test]
fn a_stale_member_is_refused_then_left_out_with_force() {
    let mut found = raid5(4, 10);
    found[2].sb.events = 8;
    match decide_with(&found, &AssembleOptions::default()) {
        Err(EngineError::Stale {
            member,
            events,
            newest_events,
        }) => assert_eq!((member.as_str(), events, newest_events), ("m2", 8, 10)),
        other => panic!("expected Stale, got {other:?}"),
    }
    let force = AssembleOptions {
        force: true,
        ..Default::default()
    };
    let a = decide_with(&found, &force).unwrap();
    // The array runs without it: --force does not take it back.
    assert_eq!(a.slot_state[Slot(2)], MemberState::Faulty);
    assert!(a.degraded && !a.forced_back);
    assert!(a
        .report
        .excluded
        .iter()
        .any(|(m, why)| m == "m2" && why.contains("stale")));
    // One event behind is an interrupted superblock update, not a stale member.
    let mut found = raid5(4, 10);
    found[2].sb.events = 9;
    let a = decide_with(&found, &AssembleOptions::default()).unwrap();
    assert_eq!(a.slot_state[Slot(2)], MemberState::InSync);
}

#[test]
fn force_takes_the_newest_stale_member_back_only_where_the_array_needs_it() {
    let mut found = raid5(4, 10);
    found[1].sb.events = 7;
    found[2].sb.events = 8;
    let force = AssembleOptions {
        force: true,
        ..Default::default()
    };
    let a = decide_with(&found, &force).unwrap();
    assert!(a.forced_back);
    assert_eq!(a.slot_state[Slot(2)], MemberState::InSync, "the newer one");
    assert_eq!(a.slot_state[Slot(1)], MemberState::Faulty);
    assert!(a.report.events.iter().any(|e| matches!(
        e,
        ArrayEvent::StaleTakenBack { member, member_events: 8, array_events: 10 } if member == "m2"
    )));
}

#[test]
fn two_members_in_one_slot_the_older_was_replaced_equal_ones_are_refused() {
    let mut found = raid5(4, 10);
    // An old member of slot 1, left behind by a replacement (its own device number).
    let mut old = found[1].clone();
    old.sb.device_uuid = Uuid([99; 16]);
    old.sb.dev_number = 4;
    old.sb.events = 6;
    for f in found.iter_mut() {
        f.sb.set_role(4, DevRole::Active(1)).unwrap();
    }
    old.sb.set_role(4, DevRole::Active(1)).unwrap();
    found.push(old.clone());
    let force = AssembleOptions {
        force: true,
        ..Default::default()
    };
    let a = decide_with(&found, &force).unwrap();
    assert_eq!(a.slot_member[Slot(1)], Some(MemberId(1)));
    assert!(!a.use_member[MemberId(4)]);
    assert!(a
        .report
        .excluded
        .iter()
        .any(|(m, why)| m == "m4" && why.contains("replaced")));
    // At the same events neither can be told apart: refused.
    found[4].sb.events = 10;
    match decide_with(&found, &force) {
        Err(EngineError::DuplicateRole { slot: 1, .. }) => {}
        other => panic!("expected DuplicateRole, got {other:?}"),
    }
}

#[test]
fn dirty_and_degraded_parity_needs_force() {
    let mut found = raid5(4, 10);
    for f in found.iter_mut() {
        f.sb.mark_dirty(0);
    }
    let found = found[..3].to_vec();
    let run = AssembleOptions {
        run: true,
        ..Default::default()
    };
    assert!(matches!(
        decide_with(&found, &run),
        Err(EngineError::DirtyDegraded { .. })
    ));
    let forced = AssembleOptions { force: true, ..run };
    let a = decide_with(&found, &forced).unwrap();
    assert!(a.report.was_dirty && a.degraded);
    assert_eq!(a.resync_offset, 0);
    assert!(a.report.events.contains(&ArrayEvent::DirtyDegradedStarted {
        by: DirtyDegradedStart::Force
    }));
}

#[test]
fn a_foreign_or_mismatched_member_is_named() {
    let mut found = raid5(4, 10);
    found[3].sb.set_uuid = Uuid([8; 16]);
    match decide_with(&found, &AssembleOptions::default()) {
        Err(EngineError::Foreign { member, .. }) => assert_eq!(member, "m3"),
        other => panic!("expected Foreign, got {other:?}"),
    }
    let mut found = raid5(4, 10);
    found[0].sb.chunk_sectors = 256;
    match decide_with(&found, &AssembleOptions::default()) {
        Err(EngineError::Mismatched { member, field, .. }) => {
            // The shape most members share is the reference: the odd one is named.
            assert_eq!((member.as_str(), field), ("m0", "chunk size (sectors)"));
        }
        other => panic!("expected Mismatched, got {other:?}"),
    }
}
