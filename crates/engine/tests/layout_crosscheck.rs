//! The engine plans with raidkit-layout's geometry; these tests check what the engine adds on
//! top, over geometries larger than the unit tests reach (up to 24 members, every RAID 5 and
//! RAID 6 algorithm, RAID 10 near, far and offset with two to four copies and far sets):
//!
//! 1. its planning view ([`Geo::copies`], [`Geo::stripe`] with syndrome slots named by data
//!    index, [`Geo::data_disks`], [`Geo::survives`]) agrees with the layout crate's `map`,
//!    `stripe_map` and `unmap`;
//! 2. the planner itself (`plan::split` and `PieceOp`, run here over in-memory members) puts
//!    every written byte where the layout crate's `map` says, with P and Q that
//!    raidkit-parity's kernels compute from the layout crate's stripe map (slots named by
//!    member), and reads everything back with up to `max_degraded` members gone.

use raidkit_engine::geometry::Scheme;
use raidkit_engine::plan::{split, BufRef, Dir, MemberState, PieceOp, Step, UserBuf, SECTOR};
use raidkit_engine::Geo;
use raidkit_layout::{Geometry, MdParams};

const RAID5: [u32; 6] = [0, 1, 2, 3, 4, 5];
const RAID6: [u32; 14] = [0, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 18, 19, 20];
/// n2, n3, n4, f2, f3, f4, o2, o3, o4, n2f2, n2o2, and far sets of near x far members (mode 2).
const RAID10: [u32; 12] = [
    0x102, 0x103, 0x104, 0x201, 0x301, 0x401, 0x10201, 0x10301, 0x10401, 0x202, 0x10202, 0x40201,
];

fn layout_geometry(level: i32, layout: u32, n: usize, chunk: u64, member: u64) -> Geometry {
    Geometry::from_md(&MdParams {
        level,
        layout,
        raid_disks: n as u32,
        chunk_sectors: chunk as u32,
        member_data_sectors: vec![member; n],
    })
    .unwrap_or_else(|e| panic!("RAID {level} layout {layout:#x} n {n}: {e}"))
}

/// Every shape the tests run: (level, layout, members).
fn shapes() -> Vec<(i32, u32, usize)> {
    let mut out = vec![(0, 0, 16), (0, 0, 7), (1, 0, 5), (4, 0, 9)];
    for layout in RAID5 {
        for n in [3, 8, 13, 16] {
            out.push((5, layout, n));
        }
    }
    for layout in RAID6 {
        for n in [4, 7, 12, 16, 24] {
            out.push((6, layout, n));
        }
    }
    for layout in RAID10 {
        let copies = (layout & 0xff) * ((layout >> 8) & 0xff);
        for n in [4, 5, 8, 9, 12, 16] {
            // md's find_phys and find_virt disagree when offset copies wrap around a row
            // with near copies > 1, and far sets must hold every copy (see raid10.rs).
            let offset_wraps = layout & 0x10000 != 0 && layout & 0xff > 1 && n % 2 != 0;
            if n as u32 >= copies && !offset_wraps {
                out.push((10, layout, n));
            }
        }
    }
    out
}

#[test]
fn the_engine_view_agrees_with_the_layout_crate() {
    for (level, layout, n) in shapes() {
        let ctx = format!("RAID {level} layout {layout:#x} n {n}");
        let chunk = if level == 1 { 0 } else { 16 };
        let member = 16 * 4 * n as u64 + 5;
        let geo =
            Geo::new(level, layout, n, chunk, member).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let theirs = layout_geometry(level, layout, n, chunk, member);
        assert_eq!(geo.array_sectors(), theirs.array_sectors(), "{ctx}");
        assert_eq!(
            geo.member_data_sectors,
            theirs.member_used_sectors(0),
            "{ctx}"
        );
        assert_eq!((geo.md_level(), geo.md_layout()), (level, layout), "{ctx}");
        match geo.scheme() {
            Scheme::Copies { copies } => {
                assert_eq!(copies, theirs.copies(), "{ctx}");
                let step = if level == 1 { 61 } else { chunk };
                for s in (0..geo.array_sectors()).step_by(step as usize) {
                    let s = s + s / step % step.min(7);
                    let (copies, run) = geo.copies(s);
                    let m = theirs.map(s).unwrap();
                    let want: Vec<(usize, u64)> = m
                        .placements
                        .iter()
                        .map(|p| (p.member as usize, p.member_sector))
                        .collect();
                    assert_eq!(copies, want, "{ctx}: copies of {s}, in md's order");
                    assert_eq!(run, m.sectors_to_chunk_end, "{ctx}: run from {s}");
                }
            }
            Scheme::Parity { max_degraded } => {
                assert_eq!(geo.data_disks(), n - max_degraded as usize, "{ctx}");
                let stripes = theirs.stripe_count().unwrap();
                for st in 0..stripes {
                    let a = geo.stripe(st);
                    let b = theirs.stripe_map(st).unwrap();
                    let members = |v: &[u32]| v.iter().map(|&m| m as usize).collect::<Vec<usize>>();
                    assert_eq!(a.member_sector_start, b.member_sector_start, "{ctx} {st}");
                    assert_eq!(a.data_members, members(&b.data_members), "{ctx} {st}");
                    assert_eq!(a.p_member, b.p_member as usize, "{ctx} {st}");
                    assert_eq!(a.q_member, b.q_member.map(|q| q as usize), "{ctx} {st}");
                    // The engine names slots by data index, the layout crate by member.
                    let slots: Vec<Option<usize>> = a
                        .syndrome_slots
                        .iter()
                        .map(|s| s.map(|dd| a.data_members[dd]))
                        .collect();
                    let want: Vec<Option<usize>> = b
                        .syndrome_slots
                        .iter()
                        .map(|s| s.map(|m| m as usize))
                        .collect();
                    assert_eq!(slots, want, "{ctx} {st}: Q slots");
                }
            }
        }
        for mask in [0u64, 1, 3, 5, 0x11, 0x88, 0x111, (1 << n) - 1] {
            let failed: Vec<bool> = (0..n).map(|m| mask & (1 << m) != 0).collect();
            assert_eq!(geo.survives(&failed), theirs.survives(&failed), "{ctx}");
        }
    }
}

/// Runs one request through the planner over in-memory members, as a driver would.
fn run(
    geo: &Geo,
    members: &mut [Vec<u8>],
    states: &[MemberState],
    dir: Dir,
    start: u64,
    buf: &mut [u8],
) {
    let sectors = (buf.len() / SECTOR) as u64;
    for piece in split(geo, start, sectors, 64) {
        let mut op =
            PieceOp::new(geo, &piece, dir, states).unwrap_or_else(|e| panic!("{piece:?}: {e:?}"));
        loop {
            let step = match dir {
                Dir::Read => op.next(UserBuf::Read(buf)),
                Dir::Write => op.next(UserBuf::Write(buf)),
            };
            let Step::Io { dir: io_dir, ios } = step else {
                break;
            };
            for io in ios {
                let ok = match io_dir {
                    Dir::Read => states[io.member].usable(),
                    Dir::Write => states[io.member].writable(),
                };
                assert!(ok, "{io_dir:?} planned on lost member {}", io.member);
                let at = io.member_sector as usize * SECTOR;
                let len = io.sectors as usize * SECTOR;
                let member = &mut members[io.member][at..at + len];
                match (io_dir, io.buf) {
                    (Dir::Read, BufRef::User { offset_bytes }) => {
                        buf[offset_bytes..offset_bytes + len].copy_from_slice(member)
                    }
                    (Dir::Read, BufRef::Scratch { index }) => {
                        op.scratch_mut()[index][..len].copy_from_slice(member)
                    }
                    (Dir::Write, BufRef::User { offset_bytes }) => {
                        member.copy_from_slice(&buf[offset_bytes..offset_bytes + len])
                    }
                    (Dir::Write, BufRef::Scratch { index }) => {
                        member.copy_from_slice(&op.scratch_mut()[index][..len])
                    }
                }
            }
        }
    }
}

/// Bytes that differ from sector to sector and from seed to seed (a multiplicative hash).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let key = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len as u64)
        .map(|i| ((i ^ key).wrapping_mul(0xD6E8_FEB8_6659_FD93) >> 56) as u8)
        .collect()
}

/// Every byte of `data` is where the layout crate's map puts it (on members not failed), and
/// every stripe's P and Q are what raidkit-parity computes from the members in the layout
/// crate's slot order.
fn check_members(ctx: &str, theirs: &Geometry, members: &[Vec<u8>], data: &[u8]) {
    let unit = u64::from(theirs.chunk_sectors()).max(8);
    for s in (0..theirs.array_sectors()).step_by(unit as usize) {
        let len = unit as usize * SECTOR;
        let want = &data[s as usize * SECTOR..][..len];
        for p in theirs.map(s).unwrap().placements {
            let at = p.member_sector as usize * SECTOR;
            assert!(
                &members[p.member as usize][at..at + len] == want,
                "{ctx}: array sector {s} on member {} sector {}",
                p.member,
                p.member_sector
            );
        }
    }
    let Ok(stripes) = theirs.stripe_count() else {
        return;
    };
    let len = unit as usize * SECTOR;
    for st in 0..stripes {
        let sm = theirs.stripe_map(st).unwrap();
        let at = sm.member_sector_start as usize * SECTOR;
        let block = |m: u32| &members[m as usize][at..at + len];
        let mut p = vec![0u8; len];
        let mut q = vec![0u8; len];
        match sm.q_member {
            None => {
                let data: Vec<&[u8]> = sm.data_members.iter().map(|&m| block(m)).collect();
                raidkit_parity::gen_p(&data, &mut p).unwrap();
            }
            Some(qm) => {
                let slots: Vec<&[u8]> = sm
                    .syndrome_slots
                    .iter()
                    .map(|s| s.map_or(&[][..], block))
                    .collect();
                raidkit_parity::gen_syndrome(&slots, &mut p, &mut q).unwrap();
                assert!(q == block(qm), "{ctx}: Q of stripe {st}");
            }
        }
        assert!(p == block(sm.p_member), "{ctx}: P of stripe {st}");
    }
}

#[test]
fn the_planner_writes_where_the_layout_crate_maps_and_reads_back_degraded() {
    for (level, layout, n) in shapes() {
        let ctx = format!("RAID {level} layout {layout:#x} n {n}");
        let chunk = if level == 1 { 0 } else { 8 };
        let member = 8 * 2 * n as u64;
        let geo = Geo::new(level, layout, n, chunk, member).unwrap();
        let theirs = layout_geometry(level, layout, n, chunk, member);
        let bytes = geo.array_sectors() as usize * SECTOR;
        let mut members = vec![vec![0u8; member as usize * SECTOR]; n];
        let healthy = vec![MemberState::InSync; n];
        // The whole array in one request, then a request that starts and ends mid-chunk.
        let mut data = pattern(bytes, n as u64 + layout as u64);
        run(
            &geo,
            &mut members,
            &healthy,
            Dir::Write,
            0,
            &mut data.clone(),
        );
        let (start, len) = (3u64, geo.array_sectors() - 11);
        let part = pattern(len as usize * SECTOR, 7);
        run(
            &geo,
            &mut members,
            &healthy,
            Dir::Write,
            start,
            &mut part.clone(),
        );
        data[start as usize * SECTOR..][..part.len()].copy_from_slice(&part);
        check_members(&ctx, &theirs, &members, &data);
        // Members gone, as many as the level survives: every sector reads back, and a write
        // over them reads back too.
        let gone_sets: Vec<Vec<usize>> = vec![vec![0], vec![n - 1], vec![1, n / 2], vec![2, 3]];
        for gone in gone_sets {
            let mut states = healthy.clone();
            let failed: Vec<bool> = (0..n).map(|m| gone.contains(&m)).collect();
            if gone.iter().any(|&m| m >= n) || !geo.survives(&failed) {
                continue;
            }
            for &m in &gone {
                states[m] = MemberState::Faulty;
            }
            let mut back = vec![0u8; bytes];
            run(&geo, &mut members, &states, Dir::Read, 0, &mut back);
            assert!(back == data, "{ctx}: read without members {gone:?}");
            let mut members_after = members.clone();
            let (start, len) = (5u64, geo.array_sectors() / 2);
            let mut new = pattern(len as usize * SECTOR, 99);
            run(
                &geo,
                &mut members_after,
                &states,
                Dir::Write,
                start,
                &mut new,
            );
            let mut back = vec![0u8; len as usize * SECTOR];
            run(
                &geo,
                &mut members_after,
                &states,
                Dir::Read,
                start,
                &mut back,
            );
            assert!(
                back == new,
                "{ctx}: degraded write without members {gone:?}"
            );
        }
    }
}
