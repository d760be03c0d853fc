//! Property tests: for every level, layout, disk count (2..=16 where valid) and chunk size
//! (4K, 64K, 512K, 4M), the forward map and its inverse agree on every array chunk, no member
//! chunk is used twice, every parity stripe has one P (and one Q) on distinct members, the Q
//! syndrome order is a permutation of the data members, and array_sectors matches md's formula
//! for unequal members. Case counts are bounded so the suite stays fast.

use proptest::prelude::*;
use raidkit_layout::{
    Geometry, MemberChunkRole, Raid0Layout, Raid10Layout, Raid5Algorithm, Raid6Algorithm,
    StackedGeometry,
};
use std::collections::HashSet;

mod common;
use common::{md_raid10_is_consistent, raid10_layouts, sector_in_chunk};

const CHUNKS: [u32; 4] = [8, 128, 1024, 8192];

fn chunk_strategy() -> impl Strategy<Value = u32> {
    prop::sample::select(CHUNKS.to_vec())
}

/// Walk every array chunk: unmap(map(x)) == x for every copy, copies keep the offset within the
/// chunk, lie in the used area, and no member chunk holds two things. Returns the member
/// chunks used.
fn check_bijection(g: &Geometry) -> HashSet<(u32, u64)> {
    let chunk = u64::from(g.chunk_sectors());
    let array_chunks = g.array_sectors() / chunk;
    assert_eq!(g.array_sectors() % chunk, 0, "array size is whole chunks");
    let mut used: HashSet<(u32, u64)> = HashSet::new();
    for c in 0..array_chunks {
        let x = sector_in_chunk(c, chunk);
        let m = g.map(x).unwrap();
        assert_eq!(m.array_sector, x);
        assert_eq!(m.sectors_to_chunk_end, chunk - x % chunk);
        for (copy, p) in m.placements.iter().enumerate() {
            assert!(p.member < g.raid_disks());
            assert_eq!(p.member_sector % chunk, x % chunk, "offset kept in chunk");
            assert!(
                p.member_sector < g.member_used_sectors(p.member),
                "copy {copy} of {x} at {p:?} is beyond the used area"
            );
            assert_eq!(
                g.unmap(p.member, p.member_sector).unwrap(),
                MemberChunkRole::Data {
                    array_sector: x,
                    copy: copy as u32
                },
                "unmap(map({x})) copy {copy} at {p:?}"
            );
            assert!(
                used.insert((p.member, p.member_sector / chunk)),
                "member chunk {p:?} used twice (array sector {x})"
            );
        }
    }
    used
}

fn check_parity(g: &Geometry) {
    let mut used = check_bijection(g);
    let n = g.raid_disks();
    let stripes = g.stripe_count().unwrap();
    let chunk = u64::from(g.chunk_sectors());
    let is_raid6 = g.md_level() == 6;
    for s in 0..stripes {
        let sm = g.stripe_map(s).unwrap();
        assert_eq!(sm.member_sector_start, s * chunk);
        assert!(sm.p_member < n);
        assert_eq!(sm.q_member.is_some(), is_raid6);
        assert!(used.insert((sm.p_member, s)), "P of stripe {s} collides");
        assert_eq!(
            g.unmap(sm.p_member, s * chunk + 1 % chunk).unwrap(),
            MemberChunkRole::Parity { stripe: s }
        );
        if let Some(q) = sm.q_member {
            assert_ne!(q, sm.p_member);
            assert!(used.insert((q, s)), "Q of stripe {s} collides");
            assert_eq!(
                g.unmap(q, s * chunk).unwrap(),
                MemberChunkRole::Q { stripe: s }
            );
        }
        // Data members in dd order are where map() puts the stripe's chunks.
        let data_disks = sm.data_members.len() as u64;
        assert_eq!(data_disks, u64::from(n - if is_raid6 { 2 } else { 1 }));
        for (dd, &member) in sm.data_members.iter().enumerate() {
            let x = (s * data_disks + dd as u64) * chunk;
            let m = g.map(x).unwrap();
            assert_eq!(m.placements[0].member, member);
            let par = m.parity.unwrap();
            assert_eq!(
                (par.stripe, par.data_index, par.p_member, par.q_member),
                (s, dd as u32, sm.p_member, sm.q_member)
            );
        }
        check_syndrome_slots(g, &sm);
    }
    // Every member chunk of the used area is data, P or Q exactly once.
    assert_eq!(used.len() as u64, u64::from(n) * stripes);
}

fn check_syndrome_slots(g: &Geometry, sm: &raidkit_layout::StripeMap) {
    let n = g.raid_disks() as usize;
    let Geometry::Parity(pg) = g else {
        unreachable!("only parity geometries have stripes")
    };
    let data: HashSet<u32> = sm.data_members.iter().copied().collect();
    match pg.algorithm() {
        raidkit_layout::ParityAlgorithm::Raid6(alg) if alg.is_ddf() => {
            assert_eq!(sm.syndrome_slots.len(), n);
            for (i, slot) in sm.syndrome_slots.iter().enumerate() {
                let i = i as u32;
                if i == sm.p_member || Some(i) == sm.q_member {
                    assert_eq!(*slot, None, "DDF: zero block at P/Q position {i}");
                } else {
                    assert_eq!(*slot, Some(i), "DDF: slot is the physical index");
                }
            }
        }
        raidkit_layout::ParityAlgorithm::Raid6(alg) => {
            assert_eq!(sm.syndrome_slots.len(), n - 2);
            let slots: Vec<u32> = sm.syndrome_slots.iter().map(|s| s.unwrap()).collect();
            let as_set: HashSet<u32> = slots.iter().copied().collect();
            assert_eq!(as_set, data, "syndrome slots are a permutation of the data");
            assert_eq!(slots.len(), as_set.len());
            if matches!(
                alg,
                Raid6Algorithm::LeftSymmetric | Raid6Algorithm::RightSymmetric
            ) {
                // For the symmetric layouts md's walk from raid6_d0 meets the data in dd order.
                assert_eq!(slots, sm.data_members);
            }
        }
        _ => assert!(sm.syndrome_slots.is_empty()),
    }
}

proptest! {
    #![proptest_config(common::config(512))]

    #[test]
    fn raid5_bijection(alg in 0usize..6, n in 2u32..=16, chunk in chunk_strategy(),
                       rows in 1u64..=24, extra in 0u64..8192) {
        let alg = Raid5Algorithm::ALL[alg];
        let dev = rows * u64::from(chunk) + extra % u64::from(chunk);
        let g = Geometry::raid5(alg, n, chunk, dev).unwrap();
        prop_assert_eq!(g.array_sectors(), u64::from(n - 1) * rows * u64::from(chunk));
        check_parity(&g);
    }

    #[test]
    fn raid4_bijection(n in 2u32..=16, chunk in chunk_strategy(), rows in 1u64..=24) {
        let g = Geometry::raid4(n, chunk, rows * u64::from(chunk)).unwrap();
        check_parity(&g);
    }

    #[test]
    fn raid6_bijection(alg in 0usize..14, n in 4u32..=16, chunk in chunk_strategy(),
                       rows in 1u64..=24, extra in 0u64..8192) {
        let alg = Raid6Algorithm::ALL[alg];
        let dev = rows * u64::from(chunk) + extra % u64::from(chunk);
        let g = Geometry::raid6(alg, n, chunk, dev).unwrap();
        prop_assert_eq!(g.array_sectors(), u64::from(n - 2) * rows * u64::from(chunk));
        check_parity(&g);
    }

    #[test]
    fn raid0_bijection(layout in prop::sample::select(vec![Raid0Layout::Original, Raid0Layout::AltMultizone]),
                       chunk in chunk_strategy(),
                       sizes in prop::collection::vec((1u64..=12, 0u64..8192), 1..=16)) {
        let c = u64::from(chunk);
        let members: Vec<u64> = sizes.iter().map(|&(rows, extra)| rows * c + extra % c).collect();
        let g = Geometry::raid0(layout, chunk, &members).unwrap();
        // md's raid0_size: each member rounded down to the chunk, summed.
        let expected: u64 = members.iter().map(|s| s / c * c).sum();
        prop_assert_eq!(g.array_sectors(), expected);
        let Geometry::Raid0(r0) = &g else { unreachable!() };
        let mut distinct: Vec<u64> = members.iter().map(|s| s / c).collect();
        distinct.sort_unstable();
        distinct.dedup();
        prop_assert_eq!(r0.zones().len(), distinct.len());
        let used = check_bijection(&g);
        prop_assert_eq!(used.len() as u64, expected / c);
        // Chunks beyond a member's rounded size are unused.
        for (m, s) in members.iter().enumerate() {
            prop_assert_eq!(g.unmap(m as u32, s / c * c).unwrap(), MemberChunkRole::Unused);
        }
    }

    #[test]
    fn raid10_bijection((n, layout) in raid10_layouts(), chunk in chunk_strategy(),
                        rows in 1u64..=24, extra in 0u64..8192) {
        prop_assume!(md_raid10_is_consistent(n, layout));
        let c = u64::from(chunk);
        let dev = rows * c + extra % c;
        let g = match Geometry::raid10(layout, n, chunk, dev) {
            Ok(g) => g,
            // Too small for one chunk per far copy: must be the documented error.
            Err(e) => {
                prop_assert!(matches!(e, raidkit_layout::GeometryError::MemberTooSmall { .. }), "{e}");
                return Ok(());
            }
        };
        let copies = u64::from(layout.copies());
        // md's calc_sectors: chunks in the array from the smallest member.
        let expected_chunks = (rows / u64::from(layout.far)) * u64::from(n) / u64::from(layout.near);
        prop_assert_eq!(g.array_sectors(), expected_chunks * c);
        let used = check_bijection(&g);
        prop_assert_eq!(used.len() as u64, expected_chunks * copies);
        for m in 0..n {
            prop_assert!(g.member_used_sectors(m) <= rows * c);
        }
    }

    #[test]
    fn raid1_copies(n in 1u32..=16, dev in 1u64..1_000_000, x in any::<u64>()) {
        let g = Geometry::raid1(n, dev).unwrap();
        prop_assert_eq!(g.array_sectors(), dev);
        let x = x % dev;
        let m = g.map(x).unwrap();
        prop_assert_eq!(m.placements.len(), n as usize);
        for (copy, p) in m.placements.iter().enumerate() {
            prop_assert_eq!(p.member, copy as u32);
            prop_assert_eq!(g.unmap(p.member, p.member_sector).unwrap(),
                            MemberChunkRole::Data { array_sector: x, copy: copy as u32 });
        }
        prop_assert_eq!(g.unmap(0, dev).unwrap(), MemberChunkRole::Unused);
    }

    #[test]
    fn unequal_members_use_the_smallest(alg in 0usize..14, n in 4u32..=16, chunk in chunk_strategy(),
                                        sizes in prop::collection::vec(1u64..=40_000, 16)) {
        let c = u64::from(chunk);
        let members: Vec<u64> = sizes[..n as usize].iter().map(|s| s * 8 + c).collect();
        let min = *members.iter().min().unwrap();
        let r6 = Geometry::from_md(&raidkit_layout::MdParams {
            level: 6, layout: Raid6Algorithm::ALL[alg].md_layout(), raid_disks: n,
            chunk_sectors: chunk, member_data_sectors: members.clone() }).unwrap();
        prop_assert_eq!(r6.array_sectors(), u64::from(n - 2) * (min / c * c));
        let r5 = Geometry::from_md(&raidkit_layout::MdParams {
            level: 5, layout: 2, raid_disks: n, chunk_sectors: chunk,
            member_data_sectors: members.clone() }).unwrap();
        prop_assert_eq!(r5.array_sectors(), u64::from(n - 1) * (min / c * c));
        let r1 = Geometry::from_md(&raidkit_layout::MdParams {
            level: 1, layout: 0, raid_disks: n, chunk_sectors: 0,
            member_data_sectors: members.clone() }).unwrap();
        prop_assert_eq!(r1.array_sectors(), min);
        let r10 = Geometry::from_md(&raidkit_layout::MdParams {
            level: 10, layout: 0x102, raid_disks: n, chunk_sectors: chunk,
            member_data_sectors: members }).unwrap();
        prop_assert_eq!(r10.array_sectors(), (min / c) * u64::from(n) / 2 * c);
    }

    #[test]
    fn segments_cover_requests(alg in 0usize..14, n in 4u32..=8, chunk in chunk_strategy(),
                               start in any::<u64>(), len in 1u64..100_000) {
        let c = u64::from(chunk);
        let g = Geometry::raid6(Raid6Algorithm::ALL[alg], n, chunk, 16 * c).unwrap();
        let start = start % g.array_sectors();
        let len = len.min(g.array_sectors() - start);
        let mut next = start;
        for seg in g.segments(start, len).unwrap() {
            prop_assert_eq!(seg.array_sector, next);
            prop_assert!(seg.len_sectors >= 1 && seg.len_sectors <= c);
            prop_assert_eq!(seg.array_sector / c, (seg.array_sector + seg.len_sectors - 1) / c,
                            "segment crosses a chunk boundary");
            prop_assert_eq!(&seg.placements, &g.map(seg.array_sector).unwrap().placements);
            next += seg.len_sectors;
        }
        prop_assert_eq!(next, start + len);
        let spans = g.stripe_spans(start, len).unwrap();
        let stripe_data = c * u64::from(n - 2);
        let mut total = 0;
        for span in &spans {
            let covered: u64 = span.segments.iter().map(|s| s.len_sectors).sum();
            total += covered;
            let s0 = span.stripe.stripe * stripe_data;
            let full = start <= s0 && start + len >= s0 + stripe_data;
            prop_assert_eq!(span.full_stripe, full);
            for seg in &span.segments {
                prop_assert_eq!(seg.parity.unwrap().stripe, span.stripe.stripe);
            }
        }
        prop_assert_eq!(total, len);
    }

    #[test]
    fn stacked_bijection(raid6 in any::<bool>(), alg in 0usize..6, sets in 2u32..=4,
                         per_set in 4u32..=6, chunk in chunk_strategy(), rows in 1u64..=8,
                         outer_chunk in chunk_strategy(), offset_chunks in 0u64..2) {
        let c = u64::from(chunk);
        let set = if raid6 {
            Geometry::raid6(Raid6Algorithm::ALL[alg], per_set, chunk, rows * c).unwrap()
        } else {
            Geometry::raid5(Raid5Algorithm::ALL[alg], per_set, chunk, rows * c).unwrap()
        };
        let oc = u64::from(outer_chunk);
        prop_assume!(set.array_sectors() >= offset_chunks * c + oc);
        let st = StackedGeometry::new(set.clone(), sets, outer_chunk, offset_chunks * c).unwrap();
        let outer_member = (set.array_sectors() - offset_chunks * c) / oc * oc;
        prop_assert_eq!(st.array_sectors(), outer_member * u64::from(sets));
        let unit = c.min(oc);
        let mut used = HashSet::new();
        for ch in 0..st.array_sectors() / unit {
            let x = sector_in_chunk(ch, unit);
            let m = st.map(x).unwrap();
            for p in m.placements() {
                prop_assert!(used.insert((p.set, p.member, p.member_sector / unit)));
                prop_assert_eq!(st.unmap(p.set, p.member, p.member_sector).unwrap(),
                                MemberChunkRole::Data { array_sector: x, copy: 0 });
            }
        }
    }
}

#[test]
fn raid10_md_quirk_shapes_are_reported_unused_not_wrong() {
    // o2 with near 2 on 3 devices: md's find_phys wraps the near copy into the next row, where
    // another chunk's offset copy lives. unmap must never claim a wrong array sector.
    let layout = Raid10Layout {
        near: 2,
        far: 2,
        offset: true,
        far_set_mode: 0,
    };
    let g = Geometry::raid10(layout, 5, 8, 8 * 12).unwrap();
    for x in (0..g.array_sectors()).step_by(8) {
        for (copy, p) in g.map(x).unwrap().placements.iter().enumerate() {
            match g.unmap(p.member, p.member_sector).unwrap() {
                MemberChunkRole::Data {
                    array_sector,
                    copy: k,
                } => {
                    let back = g.map(array_sector).unwrap();
                    assert_eq!(back.placements[k as usize], *p);
                    if array_sector == x {
                        assert_eq!(k as usize, copy);
                    }
                }
                MemberChunkRole::Unused => {}
                other => panic!("raid10 member chunk cannot be {other:?}"),
            }
        }
    }
}
