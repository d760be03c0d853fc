//! The questions a planner asks on every request, answered without allocating:
//! [`Geometry::placements`] (every copy of a sector and how far the run goes),
//! [`Geometry::stripe`] (a stripe's data, P and Q members and md's Q-syndrome slots, both ways),
//! [`Geometry::scheme`] and [`Geometry::survives`].
//!
//! `map` and `stripe_map` are built from these, so the golden tables, the cross-check with
//! mdadm's restripe.c and the property tests already cover their forward answers. Here each is
//! checked against something written separately: placements against `unmap` (md's
//! raid10_find_virt and raid5_compute_blocknr), a stripe's slot of a member against md's own
//! walk (`raid6_idx_to_slot` counting along `set_syndrome_sources`), `survives` against trying
//! every chunk, over every level, every raid4/5/6 algorithm and raid10 shapes with up to four
//! near and four far copies on up to 16 members.

use proptest::prelude::*;
use raidkit_layout::parity::raid6_d0;
use raidkit_layout::{
    Geometry, MemberChunkRole, ParityAlgorithm, Raid0Layout, Raid10Layout, Raid5Algorithm,
    Raid6Algorithm, Scheme,
};

mod common;
use common::{md_raid10_is_consistent, raid10_layouts, sector_in_chunk};

/// Every chunk of the array: `placements` hands out what `map` reports, as many as its
/// length says, with the run to the chunk end, and (where md's inverse is consistent) each
/// place unmaps back to the sector and the copy number.
fn check_placements(g: &Geometry, inverse_holds: bool) {
    let chunk = u64::from(g.chunk_sectors()).max(64);
    let copies = g.copies() as usize;
    for c in 0..g.array_sectors() / chunk {
        let x = sector_in_chunk(c, chunk);
        let mut p = g.placements(x).unwrap();
        assert_eq!(p.len(), copies, "sector {x}");
        let m = g.map(x).unwrap();
        assert_eq!(p.run_sectors(), m.sectors_to_chunk_end, "sector {x}");
        let run_end = match g.chunk_sectors() {
            0 => g.array_sectors(),
            c => (x / u64::from(c) + 1) * u64::from(c),
        };
        assert_eq!(x + p.run_sectors(), run_end, "sector {x}");
        let mut handed = Vec::new();
        while let Some(place) = p.next() {
            handed.push(place);
            assert_eq!(p.len(), copies - handed.len(), "exact length after a copy");
        }
        assert_eq!(p.next(), None, "fused");
        assert_eq!(handed, m.placements, "sector {x}");
        if inverse_holds {
            for (copy, place) in handed.iter().enumerate() {
                assert_eq!(
                    g.unmap(place.member, place.member_sector).unwrap(),
                    MemberChunkRole::Data {
                        array_sector: x,
                        copy: copy as u32
                    },
                    "sector {x} copy {copy} at {place:?}"
                );
            }
        }
    }
    assert!(g.placements(g.array_sectors()).is_err(), "past the end");
}

/// md's raid6_idx_to_slot, called along set_syndrome_sources' walk from raid6_d0: the slot of
/// every member, `syndrome_disks` for P and `syndrome_disks + 1` for Q (as md returns them).
fn md_idx_to_slot(g: &Geometry, stripe: u64) -> Vec<u32> {
    let Geometry::Parity(pg) = g else {
        unreachable!()
    };
    let alg = pg.algorithm();
    let n = g.raid_disks();
    let pm = pg.parity_members(stripe);
    let ddf = alg.is_ddf();
    let syndrome_disks = if ddf { n } else { n - 2 };
    let d0 = raid6_d0(alg, n, pm);
    let mut slot_of = vec![u32::MAX; n as usize];
    let mut count = 0;
    let mut i = d0;
    loop {
        let slot = count;
        if ddf {
            count += 1;
        }
        slot_of[i as usize] = if i == pm.p {
            syndrome_disks
        } else if Some(i) == pm.q {
            syndrome_disks + 1
        } else {
            if !ddf {
                count += 1;
            }
            slot
        };
        i = (i + 1) % n;
        if i == d0 {
            break;
        }
    }
    slot_of
}

/// Every stripe of two full rotations: the `Stripe` agrees with `stripe_map`, with `unmap`
/// for each data index, P and Q, and with md's own slot walk.
fn check_stripes(g: &Geometry) {
    let n = g.raid_disks();
    let chunk = u64::from(g.chunk_sectors());
    let stripes = g.stripe_count().unwrap();
    for s in 0..stripes.min(2 * u64::from(n)) {
        let st = g.stripe(s).unwrap();
        let sm = g.stripe_map(s).unwrap();
        assert_eq!(st.number(), s);
        assert_eq!(st.member_sector_start(), sm.member_sector_start);
        assert_eq!(st.array_sector_start(), sm.array_sector_start);
        assert_eq!((st.p_member(), st.q_member()), (sm.p_member, sm.q_member));
        let data: Vec<u32> = st.data_members().collect();
        assert_eq!(data, sm.data_members);
        assert_eq!(data.len() as u32, st.data_disks());
        assert_eq!(g.data_disks(), Some(st.data_disks()));
        for (dd, &m) in data.iter().enumerate() {
            let dd = dd as u32;
            assert_eq!(st.data_member(dd), Some(m));
            assert_eq!(st.data_index_of(m), Some(dd), "stripe {s} member {m}");
            assert_eq!(
                g.unmap(m, st.member_sector_start() + 1 % chunk).unwrap(),
                MemberChunkRole::Data {
                    array_sector: st.array_sector_start() + u64::from(dd) * chunk + 1 % chunk,
                    copy: 0
                }
            );
        }
        assert_eq!(st.data_member(st.data_disks()), None);
        assert_eq!(st.data_index_of(st.p_member()), None);
        assert_eq!(
            g.unmap(st.p_member(), st.member_sector_start()).unwrap(),
            MemberChunkRole::Parity { stripe: s }
        );
        if let Some(q) = st.q_member() {
            assert_eq!(st.data_index_of(q), None);
            assert_eq!(
                g.unmap(q, st.member_sector_start()).unwrap(),
                MemberChunkRole::Q { stripe: s }
            );
        }
        assert_eq!(st.data_index_of(n), None);
        let slots: Vec<Option<u32>> = st.syndrome_slots().collect();
        assert_eq!(slots, sm.syndrome_slots);
        assert_eq!(slots.len() as u32, st.syndrome_slot_count());
        assert_eq!(st.syndrome_slots().len(), slots.len());
        match g.md_level() {
            6 => {
                let md = md_idx_to_slot(g, s);
                for m in 0..n {
                    let want = (md[m as usize] < st.syndrome_slot_count() && data.contains(&m))
                        .then_some(md[m as usize]);
                    assert_eq!(st.syndrome_slot_of(m), want, "stripe {s} member {m}");
                    if let Some(k) = want {
                        assert_eq!(slots[k as usize], Some(m), "stripe {s} slot {k}");
                    }
                }
                for (k, entry) in slots.iter().enumerate() {
                    if let Some(m) = entry {
                        assert_eq!(st.syndrome_slot_of(*m), Some(k as u32));
                    }
                }
            }
            _ => {
                assert!(slots.is_empty());
                assert!((0..n).all(|m| st.syndrome_slot_of(m).is_none()));
            }
        }
    }
    assert!(g.stripe(stripes).is_err(), "past the last stripe");
}

/// `survives` by brute force: every array chunk keeps a copy on a present member (raid0/1/10),
/// or no stripe has more members gone than parity (raid4/5/6).
fn survives_by_trying_every_chunk(g: &Geometry, failed: &[bool]) -> bool {
    let gone = |m: u32| failed.get(m as usize).copied().unwrap_or(false);
    match g.scheme() {
        Scheme::Parity { max_degraded } => {
            (0..g.raid_disks()).filter(|&m| gone(m)).count() as u32 <= max_degraded
        }
        Scheme::Copies { .. } => {
            let chunk = u64::from(g.chunk_sectors()).max(1);
            let step = if g.md_level() == 1 {
                g.array_sectors()
            } else {
                chunk
            };
            (0..g.array_sectors())
                .step_by(step as usize)
                .all(|x| g.map(x).unwrap().placements.iter().any(|p| !gone(p.member)))
        }
    }
}

fn failed_set(n: u32, mask: u32) -> Vec<bool> {
    (0..n).map(|m| mask & (1 << m) != 0).collect()
}

proptest! {
    #![proptest_config(common::config(256))]

    #[test]
    fn raid10_placements_and_survival((n, layout) in raid10_layouts(),
                                      chunk in prop::sample::select(vec![8u32, 128]),
                                      rows in 1u64..=12, mask in any::<u32>()) {
        let Ok(g) = Geometry::raid10(layout, n, chunk, rows * u64::from(chunk)) else {
            return Ok(());
        };
        check_placements(&g, md_raid10_is_consistent(n, layout));
        let failed = failed_set(n, mask);
        prop_assert_eq!(g.survives(&failed), survives_by_trying_every_chunk(&g, &failed),
                        "{} on {} members, failed {:?}", layout, n, failed);
        prop_assert_eq!(g.scheme(), Scheme::Copies { copies: layout.copies() });
    }

    #[test]
    fn parity_placements_and_stripes(raid6 in any::<bool>(), alg in 0usize..14,
                                     n in 4u32..=16, chunk in prop::sample::select(vec![8u32, 128]),
                                     rows in 1u64..=12, mask in any::<u32>()) {
        let dev = rows * u64::from(chunk);
        let g = if raid6 {
            Geometry::raid6(Raid6Algorithm::ALL[alg], n, chunk, dev).unwrap()
        } else {
            Geometry::raid5(Raid5Algorithm::ALL[alg % 6], n, chunk, dev).unwrap()
        };
        check_placements(&g, true);
        check_stripes(&g);
        let failed = failed_set(n, mask);
        prop_assert_eq!(g.survives(&failed), survives_by_trying_every_chunk(&g, &failed));
    }

    #[test]
    fn raid0_and_raid1_placements(chunk in prop::sample::select(vec![8u32, 128]),
                                  sizes in prop::collection::vec(1u64..=12, 1..=8),
                                  n in 1u32..=8, mask in any::<u32>()) {
        let c = u64::from(chunk);
        let members: Vec<u64> = sizes.iter().map(|rows| rows * c).collect();
        let g = Geometry::raid0(Raid0Layout::AltMultizone, chunk, &members).unwrap();
        check_placements(&g, true);
        let failed = failed_set(members.len() as u32, mask);
        prop_assert_eq!(g.survives(&failed), survives_by_trying_every_chunk(&g, &failed));
        let g = Geometry::raid1(n, 64 * 16).unwrap();
        check_placements(&g, true);
        let failed = failed_set(n, mask);
        prop_assert_eq!(g.survives(&failed), survives_by_trying_every_chunk(&g, &failed));
    }
}

#[test]
fn raid4_stripes_keep_parity_last() {
    let g = Geometry::raid4(5, 8, 8 * 16).unwrap();
    check_placements(&g, true);
    check_stripes(&g);
    let st = g.stripe(3).unwrap();
    assert_eq!((st.p_member(), st.q_member()), (4, None));
    assert_eq!(st.data_members().collect::<Vec<_>>(), [0, 1, 2, 3]);
}

#[test]
fn every_raid6_algorithm_on_large_arrays() {
    // Far more members than the property tests reach, every algorithm, a full rotation.
    for alg in Raid6Algorithm::ALL {
        for n in [17u32, 32, 64] {
            let g = Geometry::raid6(alg, n, 8, 8 * 4 * u64::from(n)).unwrap();
            check_stripes(&g);
        }
    }
    for alg in Raid5Algorithm::ALL {
        for n in [17u32, 33, 64] {
            let g = Geometry::raid5(alg, n, 8, 8 * 4 * u64::from(n)).unwrap();
            check_stripes(&g);
        }
    }
}

#[test]
fn schemes() {
    let g = Geometry::raid0(Raid0Layout::Unset, 8, &[64; 3]).unwrap();
    assert_eq!(g.scheme(), Scheme::Copies { copies: 1 });
    assert_eq!(
        Geometry::raid1(3, 64).unwrap().scheme(),
        Scheme::Copies { copies: 3 }
    );
    let g = Geometry::raid10(Raid10Layout::far(3), 5, 8, 8 * 9).unwrap();
    assert_eq!(g.scheme(), Scheme::Copies { copies: 3 });
    for (g, max_degraded) in [
        (Geometry::raid4(4, 8, 64).unwrap(), 1),
        (
            Geometry::raid5(Raid5Algorithm::LeftSymmetric, 4, 8, 64).unwrap(),
            1,
        ),
        (
            Geometry::raid6(Raid6Algorithm::RotatingNContinue, 5, 8, 64).unwrap(),
            2,
        ),
    ] {
        assert_eq!(g.scheme(), Scheme::Parity { max_degraded });
        assert!(matches!(
            g.stripe(0).unwrap().algorithm(),
            ParityAlgorithm::Raid4 | ParityAlgorithm::Raid5(_) | ParityAlgorithm::Raid6(_)
        ));
    }
    assert!(Geometry::raid1(2, 64).unwrap().stripe(0).is_err());
}

#[test]
fn which_losses_raid10_survives() {
    // md.4's pictures: n2 on 4 members mirrors pairs (0,1) and (2,3).
    let n2 = Geometry::raid10(Raid10Layout::near(2), 4, 8, 8 * 8).unwrap();
    assert!(n2.survives(&[true, false, true, false]));
    assert!(!n2.survives(&[true, true, false, false]));
    // f2 on 4: chunk k on member k and, in the far half, on member k + 1.
    let f2 = Geometry::raid10(Raid10Layout::far(2), 4, 8, 8 * 8).unwrap();
    assert!(f2.survives(&[true, false, true, false]));
    assert!(!f2.survives(&[false, true, true, false]));
    // RAID 1E (n2 on 5): any two members apart survive, any two neighbours do not.
    let r1e = Geometry::raid1e(5, 8, 8 * 10).unwrap();
    assert!(r1e.survives(&[true, false, true, false, false]));
    assert!(!r1e.survives(&[false, false, false, true, true]));
    assert!(!r1e.survives(&[true, false, false, false, true]));
    // Entries past raid_disks, and a short list, name no member.
    assert!(r1e.survives(&[false, false, false, false, false, true, true]));
    assert!(r1e.survives(&[true]));
}
