//! The engine's planning view (a wrapper over raidkit-layout, where md's placement is written
//! and tested): array size, every copy of every chunk, every stripe's P, Q, data order and
//! Q-syndrome slot order must agree for every level and layout.

use raidkit_engine::Geo;
use raidkit_layout::{Geometry, MdParams};

fn check(level: i32, layout: u32, n: usize, chunk_sectors: u64, member_sectors: u64) {
    let ctx = format!("RAID {level} layout {layout:#x} n {n} chunk {chunk_sectors}");
    let mine = Geo::new(level, layout, n, chunk_sectors, member_sectors)
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let theirs = Geometry::from_md(&MdParams {
        level,
        layout,
        raid_disks: n as u32,
        chunk_sectors: chunk_sectors as u32,
        member_data_sectors: vec![member_sectors; n],
    })
    .unwrap_or_else(|e| panic!("{ctx}: layout crate: {e}"));
    assert_eq!(
        mine.array_sectors(),
        theirs.array_sectors(),
        "{ctx}: array size"
    );
    match mine.scheme() {
        raidkit_engine::geometry::Scheme::Copies { .. } => {
            let step = if level == 1 { 64 } else { chunk_sectors };
            let mut s = 0;
            while s < mine.array_sectors() {
                let (copies, _) = mine.copies(s);
                let m = theirs.map(s).unwrap();
                let theirs_copies: Vec<(usize, u64)> = m
                    .placements
                    .iter()
                    .map(|p| (p.member as usize, p.member_sector))
                    .collect();
                let mut a = copies.clone();
                let mut b = theirs_copies.clone();
                a.sort_unstable();
                b.sort_unstable();
                assert_eq!(a, b, "{ctx}: copies of array sector {s}");
                s += step;
            }
        }
        raidkit_engine::geometry::Scheme::Parity { .. } => {
            let stripes = theirs.stripe_count().unwrap();
            for st in 0..stripes.min(64) {
                let a = mine.stripe(st);
                let b = theirs.stripe_map(st).unwrap();
                assert_eq!(
                    a.member_sector_start, b.member_sector_start,
                    "{ctx}: stripe {st} start"
                );
                assert_eq!(
                    a.data_members,
                    b.data_members
                        .iter()
                        .map(|&m| m as usize)
                        .collect::<Vec<_>>(),
                    "{ctx}: stripe {st} data"
                );
                assert_eq!(a.p_member, b.p_member as usize, "{ctx}: stripe {st} P");
                assert_eq!(
                    a.q_member,
                    b.q_member.map(|q| q as usize),
                    "{ctx}: stripe {st} Q"
                );
                // engine slots name data indices; the layout crate's name members
                let slots: Vec<Option<usize>> = a
                    .syndrome_slots
                    .iter()
                    .map(|s| s.map(|dd| a.data_members[dd]))
                    .collect();
                assert_eq!(
                    slots,
                    b.syndrome_slots
                        .iter()
                        .map(|s| s.map(|m| m as usize))
                        .collect::<Vec<_>>(),
                    "{ctx}: stripe {st} Q slots"
                );
            }
        }
    }
}

#[test]
fn engine_geometry_agrees_with_the_layout_crate() {
    check(0, 0, 3, 16, 4096);
    check(0, 0, 4, 1024, 1 << 16);
    check(1, 0, 3, 0, 4096);
    check(4, 0, 4, 16, 4096);
    for layout in 0..=5 {
        for n in [3, 4, 5] {
            check(5, layout, n, 16, 4096);
        }
    }
    for layout in [0, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 18, 19, 20] {
        for n in [4, 5, 6, 7] {
            check(6, layout, n, 16, 4096);
        }
    }
    for layout in [0x102, 0x103, 0x201, 0x202, 0x10201, 0x20201] {
        for n in [4, 5, 6] {
            if layout == 0x103 && n < 3 {
                continue;
            }
            check(10, layout, n, 16, 4096);
        }
    }
}
