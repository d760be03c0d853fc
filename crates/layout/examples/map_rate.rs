//! Prints how many `map` and `unmap` calls per second this machine does for a few geometries
//! (one thread, 4 KiB steps across a 1 TiB-per-member array), and what the planner's
//! allocation-free questions cost: `placements` (every copy and the run) and, for raid4/5/6,
//! `stripe` (walking its data members and syndrome slots). A figure, not a test.
//!
//! Run: `cargo run --release -p raidkit-layout --example map_rate`

use raidkit_layout::{Geometry, Raid10Layout, Raid5Algorithm, Raid6Algorithm};
use std::hint::black_box;
use std::time::Instant;

fn rate(name: &str, g: &Geometry) {
    const CALLS: u64 = 2_000_000;
    let step = 8u64;
    let span = g.array_sectors() / step;
    let start = Instant::now();
    let mut acc = 0u64;
    for i in 0..CALLS {
        // Spread the sectors over the whole array with a multiplicative step.
        let x = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % span) * step;
        if let Ok(m) = g.map(black_box(x)) {
            acc = acc.wrapping_add(m.placements[0].member_sector);
        }
    }
    let map_ns = start.elapsed().as_nanos() as f64 / CALLS as f64;
    let start = Instant::now();
    let n = u64::from(g.raid_disks());
    let used = g.member_used_sectors(0) / step;
    for i in 0..CALLS {
        let ms = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % used) * step;
        if let Ok(r) = g.unmap(black_box((i % n) as u32), ms) {
            acc = acc.wrapping_add(matches!(r, raidkit_layout::MemberChunkRole::Unused) as u64);
        }
    }
    let unmap_ns = start.elapsed().as_nanos() as f64 / CALLS as f64;
    // The planner's questions, answered without allocating: every copy and the run length,
    // and (raid4/5/6) the stripe with its members in data and syndrome order.
    let start = Instant::now();
    for i in 0..CALLS {
        let x = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % span) * step;
        if let Ok(p) = g.placements(black_box(x)) {
            acc = acc.wrapping_add(p.run_sectors());
            for place in p {
                acc = acc.wrapping_add(place.member_sector);
            }
        }
    }
    let placements_ns = start.elapsed().as_nanos() as f64 / CALLS as f64;
    let stripes = g.stripe_count().unwrap_or(0);
    let stripe = if stripes > 0 {
        let start = Instant::now();
        for i in 0..CALLS {
            let s = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % stripes;
            if let Ok(st) = g.stripe(black_box(s)) {
                acc = acc.wrapping_add(st.data_members().map(u64::from).sum::<u64>());
                for slot in st.syndrome_slots().flatten() {
                    acc = acc.wrapping_add(u64::from(slot));
                }
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / CALLS as f64;
        format!("   stripe {ns:6.1} ns/call")
    } else {
        String::new()
    };
    println!(
        "{name:<28} map {map_ns:6.1} ns/call ({:5.1} M/s)   unmap {unmap_ns:6.1} ns/call ({:5.1} M/s)   [{}]   placements {placements_ns:6.1} ns/call{stripe}",
        1e3 / map_ns,
        1e3 / unmap_ns,
        acc % 10
    );
}

fn main() {
    let tib = 1u64 << 31; // sectors per member
    let chunk = 1024; // 512 KiB
    let cases: Vec<(&str, Result<Geometry, _>)> = vec![
        (
            "raid0 x8",
            Geometry::raid0(raidkit_layout::Raid0Layout::Original, chunk, &[tib; 8]),
        ),
        ("raid1 x2", Geometry::raid1(2, tib)),
        (
            "raid5 ls x8",
            Geometry::raid5(Raid5Algorithm::LeftSymmetric, 8, chunk, tib),
        ),
        (
            "raid6 ls x10",
            Geometry::raid6(Raid6Algorithm::LeftSymmetric, 10, chunk, tib),
        ),
        (
            "raid6 ddf-N-continue x10",
            Geometry::raid6(Raid6Algorithm::RotatingNContinue, 10, chunk, tib),
        ),
        (
            "raid10 n2 x8",
            Geometry::raid10(Raid10Layout::near(2), 8, chunk, tib),
        ),
        (
            "raid10 f2 x8",
            Geometry::raid10(Raid10Layout::far(2), 8, chunk, tib),
        ),
        ("raid1e x5", Geometry::raid1e(5, chunk, tib)),
    ];
    for (name, g) in cases {
        match g {
            Ok(g) => rate(name, &g),
            Err(e) => println!("{name}: {e}"),
        }
    }
}
