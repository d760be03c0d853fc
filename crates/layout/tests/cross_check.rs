//! Cross-check against a second, independent statement of md's layouts: mdadm's restripe.c
//! `geo_map` (block -> device per stripe, -1 = P, -2 = Q) and the Q-syndrome source order that
//! restripe.c's `save_stripes` builds for recovery. That code was written separately from the
//! kernel's raid5.c, which the crate follows; the two must agree for every raid4/5/6 layout,
//! every disk count and every stripe of a full rotation. raid10 is checked against md(4)'s
//! description of near, far and offset copies.

use raidkit_layout::{Geometry, Raid5Algorithm, Raid6Algorithm};

/// mdadm restripe.c geo_map, restated. `block` is the logical data index, or -1 for P, -2 for Q.
fn geo_map(block: i64, stripe: u64, raid_disks: i64, level: u32, layout: u32) -> i64 {
    let n = raid_disks;
    let s = stripe as i64;
    let layout = if level == 4 { 0 } else { layout };
    let asym = |pd: i64, block: i64| if block >= pd { block + 1 } else { block };
    // raid6 layouts 0/1/8/9: Q after P; P on the last device pushes data up by one.
    let asym6 = |pd: i64, block: i64| -> i64 {
        match block {
            -1 => pd,
            -2 => (pd + 1) % n,
            b if pd == n - 1 => b + 1,
            b if b >= pd => b + 2,
            b => b,
        }
    };
    match (level, layout) {
        (4, _) | (5, 5) => {
            if block == -1 {
                n - 1
            } else {
                block
            }
        }
        (5, 0) | (5, 1) => {
            let pd = if layout == 0 { n - 1 - s % n } else { s % n };
            if block == -1 {
                pd
            } else {
                asym(pd, block)
            }
        }
        (5, 2) | (5, 3) => {
            let pd = if layout == 2 { n - 1 - s % n } else { s % n };
            if block == -1 {
                pd
            } else {
                (pd + 1 + block) % n
            }
        }
        (5, 4) => block + 1,
        (6, 5) => match block {
            -2 => n - 1,
            -1 => n - 2,
            b => b,
        },
        (6, 16..=19) => {
            if block == -2 {
                return n - 1;
            }
            let m = n - 1;
            let pd = if layout == 16 || layout == 18 {
                m - 1 - s % m
            } else {
                s % m
            };
            match (block, layout) {
                (-1, _) => pd,
                (b, 16 | 17) => asym(pd, b),
                (b, _) => (pd + 1 + b) % m,
            }
        }
        (6, 20) => {
            if block == -2 {
                n - 1
            } else {
                block + 1
            }
        }
        (6, 4) => match block {
            -1 => 0,
            -2 => 1,
            b => b + 2,
        },
        (6, 0) => asym6(n - 1 - s % n, block),
        (6, 1) | (6, 8) => asym6(s % n, block),
        (6, 9) => asym6(n - 1 - (s + 1) % n, block),
        (6, 2) | (6, 3) => {
            let pd = if layout == 2 { n - 1 - s % n } else { s % n };
            match block {
                -1 => pd,
                -2 => (pd + 1) % n,
                b => (pd + 2 + b) % n,
            }
        }
        (6, 10) => {
            let pd = n - 1 - s % n;
            match block {
                -1 => pd,
                -2 => (pd + n - 1) % n,
                b => (pd + 1 + b) % n,
            }
        }
        _ => panic!("geo_map has no case for level {level} layout {layout}"),
    }
}

fn is_ddf(layout: u32) -> bool {
    matches!(layout, 8..=10)
}

/// save_stripes' syndrome sources: DDF uses the physical device as the slot; md's own layouts
/// start right after Q and skip P and Q.
fn mdadm_syndrome_order(stripe: u64, n: i64, layout: u32) -> Vec<Option<u32>> {
    let p = geo_map(-1, stripe, n, 6, layout);
    let q = geo_map(-2, stripe, n, 6, layout);
    if is_ddf(layout) {
        (0..n)
            .map(|d| (d != p && d != q).then_some(d as u32))
            .collect()
    } else {
        (0..n)
            .map(|j| (q + 1 + j) % n)
            .filter(|&d| d != p && d != q)
            .map(|d| Some(d as u32))
            .collect()
    }
}

fn compare(g: &Geometry, level: u32, layout: u32) {
    let n = g.raid_disks();
    let stripes = g.stripe_count().unwrap();
    for stripe in 0..stripes {
        let sm = g.stripe_map(stripe).unwrap();
        let ctx = format!("level {level} layout {layout} n {n} stripe {stripe}");
        assert_eq!(
            geo_map(-1, stripe, i64::from(n), level, layout),
            i64::from(sm.p_member),
            "P: {ctx}"
        );
        if level == 6 {
            assert_eq!(
                Some(geo_map(-2, stripe, i64::from(n), level, layout) as u32),
                sm.q_member,
                "Q: {ctx}"
            );
            assert_eq!(
                mdadm_syndrome_order(stripe, i64::from(n), layout),
                sm.syndrome_slots,
                "syndrome order: {ctx}"
            );
        }
        for (dd, &member) in sm.data_members.iter().enumerate() {
            assert_eq!(
                geo_map(dd as i64, stripe, i64::from(n), level, layout),
                i64::from(member),
                "data {dd}: {ctx}"
            );
        }
    }
}

#[test]
fn raid4_and_raid5_agree_with_mdadm() {
    for n in 2u32..=16 {
        // Two full rotations of the parity.
        let dev = 8 * 2 * u64::from(n);
        compare(&Geometry::raid4(n, 8, dev).unwrap(), 4, 0);
        for alg in Raid5Algorithm::ALL {
            compare(
                &Geometry::raid5(alg, n, 8, dev).unwrap(),
                5,
                alg.md_layout(),
            );
        }
    }
}

#[test]
fn raid6_agrees_with_mdadm() {
    for n in 4u32..=16 {
        let dev = 8 * 2 * u64::from(n);
        for alg in Raid6Algorithm::ALL {
            compare(
                &Geometry::raid6(alg, n, 8, dev).unwrap(),
                6,
                alg.md_layout(),
            );
        }
    }
}

/// md(4)'s description of the three raid10 layouts mdadm creates (one of near, far or offset
/// copies, one far set), written as plain chunk arithmetic: near copies fill rows left to right;
/// far copy k sits k devices to the right, k "stride" rows down; offset copy k sits k devices to
/// the right in the k-th row after the chunk's own.
fn md4_raid10_copies(
    kind: char,
    copies: u64,
    n: u64,
    stride_rows: u64,
    chunk_no: u64,
) -> Vec<(u32, u64)> {
    (0..copies)
        .map(|k| match kind {
            'n' => {
                let pos = chunk_no * copies + k;
                ((pos % n) as u32, pos / n)
            }
            'f' => (
                ((chunk_no % n + k) % n) as u32,
                chunk_no / n + k * stride_rows,
            ),
            _ => (((chunk_no % n + k) % n) as u32, (chunk_no / n) * copies + k),
        })
        .collect()
}

#[test]
fn raid10_agrees_with_md4_description() {
    use raidkit_layout::Raid10Layout;
    for n in 2u32..=16 {
        for copies in 2u8..=4 {
            if u32::from(copies) > n {
                continue;
            }
            for (kind, layout) in [
                ('n', Raid10Layout::near(copies)),
                ('f', Raid10Layout::far(copies)),
                ('o', Raid10Layout::offset(copies)),
            ] {
                let rows = 12u64;
                let g = Geometry::raid10(layout, n, 8, rows * 8).unwrap();
                let Geometry::Raid10(r10) = &g else {
                    unreachable!()
                };
                let stride_rows = r10.stride_sectors() / 8;
                for c in 0..g.array_sectors() / 8 {
                    let m = g.map(c * 8).unwrap();
                    let got: Vec<(u32, u64)> = m
                        .placements
                        .iter()
                        .map(|p| (p.member, p.member_sector / 8))
                        .collect();
                    let want =
                        md4_raid10_copies(kind, u64::from(copies), u64::from(n), stride_rows, c);
                    assert_eq!(got, want, "{layout} on {n} devices, chunk {c}");
                }
            }
        }
    }
}
