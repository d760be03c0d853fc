//! Helpers shared by the property tests (each test file uses some of them).
#![allow(dead_code)]

use proptest::prelude::*;
use raidkit_layout::Raid10Layout;

/// Proptest settings for `cases` cases.
pub fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Failures print the minimal input; nothing is written into the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A sector inside chunk `c`, varied so that offsets other than 0 are exercised.
pub fn sector_in_chunk(c: u64, chunk: u64) -> u64 {
    c * chunk + (c.wrapping_mul(7919) % chunk)
}

/// RAID 10 layouts (up to 4 near x 4 far copies, offset or not, every far-set mode) with a
/// member count from 2 to 16 that holds their copies.
pub fn raid10_layouts() -> impl Strategy<Value = (u32, Raid10Layout)> {
    (2u32..=16, 1u8..=4, 1u8..=4, any::<bool>(), 0u8..=2).prop_filter_map(
        "copies within 2..=disks",
        |(n, nc, fc, offset, mode)| {
            let l = Raid10Layout {
                near: nc,
                far: fc,
                offset,
                far_set_mode: mode,
            };
            let copies = l.copies();
            (2..=n).contains(&copies).then_some((n, l))
        },
    )
}

/// md's own arithmetic places two chunks on one member chunk, or disagrees between find_phys
/// and find_virt, for some raid10 shapes, so the bijection cannot hold there (see raid10.rs):
/// - offset layouts whose near copies wrap around the device count mid-row;
/// - far sets (modes 1 and 2) that do not divide the devices evenly, with near copies > 1:
///   find_phys moves a far copy across into the last, larger set while find_virt looks for it
///   inside its own set;
/// - mode 1 (md's abandoned "buggy" layout) with sets smaller than the copies.
pub fn md_raid10_is_consistent(n: u32, l: Raid10Layout) -> bool {
    let nc = u32::from(l.near);
    let fc = u32::from(l.far);
    if l.offset && nc > 1 && !n.is_multiple_of(nc) {
        return false;
    }
    let far_set_size = match l.far_set_mode {
        0 => n,
        1 => n / fc,
        _ => nc * fc,
    };
    if l.far_set_mode != 0 && nc > 1 && !n.is_multiple_of(far_set_size) {
        return false;
    }
    if l.far_set_mode == 1 && far_set_size < l.copies() {
        return false;
    }
    true
}
