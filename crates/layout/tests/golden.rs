//! Golden layout tables: the files in tests/golden/ were written by hand from md's documented
//! layouts (md(4) for raid10 near/far/offset and RAID 1E, md's raid5.c rules for raid5/6) and
//! are compared token by token with the renderer's output, so column widths do not matter.

use raidkit_layout::{
    layout_table, Geometry, Raid0Layout, Raid10Layout, Raid5Algorithm, Raid6Algorithm,
};
use std::path::PathBuf;

const CHUNK: u32 = 128; // 64 KiB

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn tokens(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                vec![l.trim().to_string()]
            } else {
                l.split_whitespace().map(str::to_string).collect()
            }
        })
        .collect()
}

fn check(name: &str, geometry: &Geometry, rows: u64) {
    let expected = std::fs::read_to_string(golden_path(name))
        .unwrap_or_else(|e| panic!("reading golden file {name}: {e}"));
    let actual = layout_table(geometry, rows).unwrap().to_text();
    assert_eq!(
        tokens(&actual),
        tokens(&expected),
        "golden table {name} differs; rendered:\n{actual}"
    );
}

#[test]
fn raid5_all_algorithms_5_and_6_members() {
    for n in [5u32, 6] {
        for alg in Raid5Algorithm::ALL {
            let g = Geometry::raid5(alg, n, CHUNK, u64::from(CHUNK) * u64::from(n)).unwrap();
            check(&format!("raid5-{}-{n}.txt", alg.name()), &g, u64::from(n));
        }
    }
}

#[test]
fn raid4_parity_on_last_member() {
    let g = Geometry::raid4(5, CHUNK, u64::from(CHUNK) * 5).unwrap();
    check("raid4-5.txt", &g, 5);
}

#[test]
fn raid6_all_algorithms_5_members() {
    for alg in Raid6Algorithm::ALL {
        let g = Geometry::raid6(alg, 5, CHUNK, u64::from(CHUNK) * 5).unwrap();
        check(&format!("raid6-{}-5.txt", alg.name()), &g, 5);
    }
}

#[test]
fn raid6_rotations_6_members() {
    for alg in [
        Raid6Algorithm::LeftAsymmetric,
        Raid6Algorithm::RightAsymmetric,
        Raid6Algorithm::LeftSymmetric,
        Raid6Algorithm::RightSymmetric,
    ] {
        let g = Geometry::raid6(alg, 6, CHUNK, u64::from(CHUNK) * 6).unwrap();
        check(&format!("raid6-{}-6.txt", alg.name()), &g, 6);
    }
}

#[test]
fn raid10_md4_tables() {
    let four_chunks = u64::from(CHUNK) * 4;
    let n2 = Geometry::raid10(Raid10Layout::near(2), 4, CHUNK, four_chunks).unwrap();
    check("raid10-n2-4.txt", &n2, 10);
    let f2 = Geometry::raid10(Raid10Layout::far(2), 4, CHUNK, four_chunks).unwrap();
    check("raid10-f2-4.txt", &f2, 10);
    let o2 = Geometry::raid10(Raid10Layout::offset(2), 4, CHUNK, four_chunks).unwrap();
    check("raid10-o2-4.txt", &o2, 10);
    let n2_2 = Geometry::raid10(Raid10Layout::near(2), 2, CHUNK, four_chunks).unwrap();
    check("raid10-n2-2.txt", &n2_2, 10);
    let six_chunks = u64::from(CHUNK) * 6;
    let f2_2 = Geometry::raid10(Raid10Layout::far(2), 2, CHUNK, six_chunks).unwrap();
    check("raid10-f2-2.txt", &f2_2, 10);
    let f2_3 = Geometry::raid10(Raid10Layout::far(2), 3, CHUNK, six_chunks).unwrap();
    check("raid10-f2-3.txt", &f2_3, 10);
}

#[test]
fn raid1e_three_members() {
    let g = Geometry::raid1e(3, CHUNK, u64::from(CHUNK) * 4).unwrap();
    check("raid1e-3.txt", &g, 4);
}

#[test]
fn raid0_zones_original_and_alternate() {
    let c = u64::from(CHUNK);
    let sizes = [c, 2 * c, 2 * c];
    let orig = Geometry::raid0(Raid0Layout::Original, CHUNK, &sizes).unwrap();
    check("raid0-original-1-2-2.txt", &orig, 10);
    let alt = Geometry::raid0(Raid0Layout::AltMultizone, CHUNK, &sizes).unwrap();
    check("raid0-alternate-1-2-2.txt", &alt, 10);
}
