//! md's order of data blocks in the RAID-6 Q syndrome, worked out by hand from raid5.c
//! (`raid6_d0`: start just after Q, or at 0 when Q is last; `raid6_idx_to_slot`: data disks take
//! slots 0, 1, ... in walk order; DDF layouts use the physical index and leave P/Q as zeros).

use raidkit_layout::{Geometry, Raid6Algorithm};

fn slots(alg: Raid6Algorithm, n: u32, stripe: u64) -> (Vec<Option<u32>>, Vec<u32>, u32, u32) {
    let g = Geometry::raid6(alg, n, 8, 8 * 64).unwrap();
    let sm = g.stripe_map(stripe).unwrap();
    (
        sm.syndrome_slots,
        sm.data_members,
        sm.p_member,
        sm.q_member.unwrap(),
    )
}

#[test]
fn left_asymmetric_walk_starts_after_q() {
    // 5 members, stripe 0: P on 4, Q on 0 -> walk 1,2,3 (slot order == dd order).
    let (s, d, p, q) = slots(Raid6Algorithm::LeftAsymmetric, 5, 0);
    assert_eq!((p, q), (4, 0));
    assert_eq!(s, vec![Some(1), Some(2), Some(3)]);
    assert_eq!(d, vec![1, 2, 3]);
    // Stripe 1: P on 3, Q on 4 (the last member) -> walk starts at 0.
    let (s, d, p, q) = slots(Raid6Algorithm::LeftAsymmetric, 5, 1);
    assert_eq!((p, q), (3, 4));
    assert_eq!(s, vec![Some(0), Some(1), Some(2)]);
    assert_eq!(d, vec![0, 1, 2]);
    // Stripe 2: P on 2, Q on 3 -> walk 4, 0, 1. Data dd order is 0, 1, 4, so the syndrome
    // order is NOT the logical order: slot 0 holds logical data index 2.
    let (s, d, p, q) = slots(Raid6Algorithm::LeftAsymmetric, 5, 2);
    assert_eq!((p, q), (2, 3));
    assert_eq!(s, vec![Some(4), Some(0), Some(1)]);
    assert_eq!(d, vec![0, 1, 4]);
    // Stripe 3: P on 1, Q on 2 -> walk 3, 4, 0; dd order 0, 3, 4.
    let (s, d, _, _) = slots(Raid6Algorithm::LeftAsymmetric, 5, 3);
    assert_eq!(s, vec![Some(3), Some(4), Some(0)]);
    assert_eq!(d, vec![0, 3, 4]);
}

#[test]
fn left_symmetric_slot_order_is_logical_order() {
    // 6 members, stripe 2: P on 3, Q on 4, data from 5 around: 5, 0, 1, 2.
    let (s, d, p, q) = slots(Raid6Algorithm::LeftSymmetric, 6, 2);
    assert_eq!((p, q), (3, 4));
    assert_eq!(d, vec![5, 0, 1, 2]);
    assert_eq!(s, vec![Some(5), Some(0), Some(1), Some(2)]);
}

#[test]
fn ddf_layouts_use_physical_slots_with_zero_blocks() {
    // ddf-N-continue, 5 members, stripe 1: P on 3, Q on 2; data D3 on 4, D4 on 0, D5 on 1.
    let (s, d, p, q) = slots(Raid6Algorithm::RotatingNContinue, 5, 1);
    assert_eq!((p, q), (3, 2));
    assert_eq!(d, vec![4, 0, 1]);
    assert_eq!(s, vec![Some(0), Some(1), None, None, Some(4)]);
    // ddf-zero-restart, stripe 0: P on 0, Q on 1.
    let (s, _, p, q) = slots(Raid6Algorithm::RotatingZeroRestart, 5, 0);
    assert_eq!((p, q), (0, 1));
    assert_eq!(s, vec![None, None, Some(2), Some(3), Some(4)]);
    // ddf-N-restart, stripe 0: D D D P Q.
    let (s, d, p, q) = slots(Raid6Algorithm::RotatingNRestart, 5, 0);
    assert_eq!((p, q), (3, 4));
    assert_eq!(d, vec![0, 1, 2]);
    assert_eq!(s, vec![Some(0), Some(1), Some(2), None, None]);
}

#[test]
fn q_on_last_layouts_walk_from_zero() {
    // left-asymmetric-6, 5 members, stripe 1: P on 2, Q on 4 -> slots 0, 1, 3.
    let (s, d, p, q) = slots(Raid6Algorithm::LeftAsymmetric6, 5, 1);
    assert_eq!((p, q), (2, 4));
    assert_eq!(d, vec![0, 1, 3]);
    assert_eq!(s, vec![Some(0), Some(1), Some(3)]);
    // left-symmetric-6, stripe 1: P on 2, data D3 on 3, D4 on 0, D5 on 1; walk is physical.
    let (s, d, _, _) = slots(Raid6Algorithm::LeftSymmetric6, 5, 1);
    assert_eq!(d, vec![3, 0, 1]);
    assert_eq!(s, vec![Some(0), Some(1), Some(3)]);
}

#[test]
fn raid5_has_no_syndrome_order() {
    let g = Geometry::raid5(raidkit_layout::Raid5Algorithm::LeftSymmetric, 4, 8, 64).unwrap();
    assert!(g.stripe_map(0).unwrap().syndrome_slots.is_empty());
}
