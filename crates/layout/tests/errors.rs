//! Invalid geometry: each case must be refused with the variant naming md's or mdadm's rule.

use raidkit_layout::{
    Geometry, GeometryError, Level, MdParams, Raid10Layout, Raid5Algorithm, Raid6Algorithm,
    StackedGeometry,
};

fn md(level: i32, layout: u32, raid_disks: u32, chunk_sectors: u32) -> MdParams {
    MdParams {
        level,
        layout,
        raid_disks,
        chunk_sectors,
        member_data_sectors: vec![1 << 20; raid_disks as usize],
    }
}

fn err(p: MdParams) -> GeometryError {
    Geometry::from_md(&p).expect_err("geometry must be refused")
}

#[test]
fn unknown_levels() {
    assert_eq!(
        err(md(-1, 0, 2, 128)),
        GeometryError::UnsupportedLevel { level: -1 }
    );
    assert_eq!(
        err(md(3, 0, 3, 128)),
        GeometryError::UnsupportedLevel { level: 3 }
    );
    assert!(matches!(
        "7".parse::<Level>(),
        Err(GeometryError::UnknownLevel { .. })
    ));
}

#[test]
fn too_few_disks() {
    assert_eq!(
        err(md(6, 2, 3, 128)),
        GeometryError::TooFewDisks {
            level: 6,
            raid_disks: 3,
            min: 4
        }
    );
    assert_eq!(
        err(md(5, 2, 1, 128)),
        GeometryError::TooFewDisks {
            level: 5,
            raid_disks: 1,
            min: 2
        }
    );
    assert!(matches!(
        err(md(10, 0x102, 1, 128)),
        GeometryError::TooFewDisks { .. }
    ));
    assert!(matches!(
        err(md(0, 0, 0, 128)),
        GeometryError::TooFewDisks { .. }
    ));
}

#[test]
fn chunk_rules() {
    // raid4/5/6 and raid10 need a power of two of at least one 4 KiB page.
    assert_eq!(
        err(md(5, 2, 4, 192)),
        GeometryError::ChunkNotPowerOfTwo {
            level: 5,
            chunk_sectors: 192
        }
    );
    assert_eq!(
        err(md(6, 2, 4, 4)),
        GeometryError::ChunkTooSmall {
            level: 6,
            chunk_sectors: 4,
            min_sectors: 8
        }
    );
    assert!(matches!(
        err(md(10, 0x102, 4, 4)),
        GeometryError::ChunkTooSmall { .. }
    ));
    assert!(matches!(
        err(md(10, 0x102, 4, 24)),
        GeometryError::ChunkNotPowerOfTwo { .. }
    ));
    assert_eq!(err(md(0, 0, 2, 0)), GeometryError::ChunkNotSet { level: 0 });
    assert_eq!(err(md(4, 0, 3, 0)), GeometryError::ChunkNotSet { level: 4 });
    // 4 KiB to 4 MiB and beyond are fine.
    for chunk in [8u32, 128, 1024, 8192, 16384] {
        Geometry::from_md(&md(6, 2, 6, chunk)).unwrap();
    }
}

#[test]
fn layout_numbers() {
    assert_eq!(
        err(md(5, 6, 4, 128)),
        GeometryError::InvalidRaid5Layout { layout: 6 }
    );
    for bad in [6u32, 7, 11, 15, 21, 100] {
        assert_eq!(
            err(md(6, bad, 6, 128)),
            GeometryError::InvalidRaid6Layout { layout: bad }
        );
    }
    assert!(matches!(
        err(md(10, 0x102 | (3 << 17), 4, 128)),
        GeometryError::InvalidRaid10Layout { .. }
    ));
    assert!(matches!(
        err(md(10, 1 << 19 | 0x102, 4, 128)),
        GeometryError::InvalidRaid10Layout { .. }
    ));
    assert!(matches!(
        err(md(10, 0x100, 4, 128)),
        GeometryError::InvalidRaid10Layout { .. }
    ));
}

#[test]
fn raid10_copies() {
    assert_eq!(
        err(md(10, 0x101, 4, 128)),
        GeometryError::Raid10CopiesOutOfRange {
            copies: 1,
            raid_disks: 4
        }
    );
    assert_eq!(
        err(md(10, 0x103, 2, 128)),
        GeometryError::Raid10CopiesOutOfRange {
            copies: 3,
            raid_disks: 2
        }
    );
    assert_eq!(
        err(md(10, 0x202, 3, 128)),
        GeometryError::Raid10CopiesOutOfRange {
            copies: 4,
            raid_disks: 3
        }
    );
}

#[test]
fn raid0_multizone_needs_a_layout() {
    let p = MdParams {
        level: 0,
        layout: 0,
        raid_disks: 2,
        chunk_sectors: 128,
        member_data_sectors: vec![1280, 2560],
    };
    assert_eq!(
        err(p.clone()),
        GeometryError::Raid0MultiZoneNeedsLayout {
            layout: 0,
            zones: 2
        }
    );
    // md writes -1 when the superblock has no layout.
    assert!(matches!(
        err(MdParams {
            layout: u32::MAX,
            ..p.clone()
        }),
        GeometryError::Raid0MultiZoneNeedsLayout { .. }
    ));
    // One zone: the layout does not matter.
    Geometry::from_md(&MdParams {
        member_data_sectors: vec![1280, 1300],
        ..p
    })
    .unwrap();
}

#[test]
fn sizes() {
    let mut p = md(5, 2, 3, 128);
    p.member_data_sectors = vec![1 << 20, 100, 1 << 20];
    assert!(matches!(err(p), GeometryError::MemberTooSmall { .. }));
    let mut p = md(0, 0, 2, 128);
    p.member_data_sectors = vec![1 << 20];
    assert_eq!(
        err(p),
        GeometryError::MemberCountMismatch {
            raid_disks: 2,
            members: 1
        }
    );
    let mut p = md(0, 1, 3, 128);
    p.member_data_sectors = vec![u64::MAX, u64::MAX, u64::MAX];
    assert_eq!(err(p), GeometryError::SizeOverflow);
    assert!(matches!(
        err(md(1, 0, 5000, 0)),
        GeometryError::TooManyDisks { .. }
    ));
}

#[test]
fn requests_out_of_range() {
    let g = Geometry::raid5(Raid5Algorithm::LeftSymmetric, 4, 8, 80).unwrap();
    assert_eq!(g.array_sectors(), 240);
    assert!(matches!(
        g.map(240),
        Err(GeometryError::ArraySectorOutOfRange { .. })
    ));
    assert!(matches!(
        g.segments(200, 41),
        Err(GeometryError::ArraySectorOutOfRange { .. })
    ));
    assert!(matches!(
        g.segments(u64::MAX, 2),
        Err(GeometryError::ArraySectorOutOfRange { .. })
    ));
    assert_eq!(
        g.unmap(4, 0),
        Err(GeometryError::MemberOutOfRange {
            member: 4,
            raid_disks: 4
        })
    );
    assert_eq!(
        g.stripe_map(10),
        Err(GeometryError::StripeOutOfRange {
            stripe: 10,
            stripe_count: 10
        })
    );
    let r10 = Geometry::raid10(Raid10Layout::near(2), 4, 8, 80).unwrap();
    assert_eq!(
        r10.stripe_map(0),
        Err(GeometryError::NotAParityLevel { level: 10 })
    );
}

#[test]
fn stacked_rules() {
    let set = Geometry::raid6(Raid6Algorithm::LeftSymmetric, 4, 8, 80).unwrap();
    assert_eq!(
        StackedGeometry::new(set, 1, 8, 0).unwrap_err(),
        GeometryError::TooFewSets { sets: 1 }
    );
    let mirror = Geometry::raid1(2, 80).unwrap();
    assert_eq!(
        StackedGeometry::new(mirror, 2, 8, 0).unwrap_err(),
        GeometryError::UnequalSets
    );
}

#[test]
fn names_parse_and_round_trip() {
    for alg in Raid5Algorithm::ALL {
        assert_eq!(alg.name().parse::<Raid5Algorithm>().unwrap(), alg);
        assert_eq!(Raid5Algorithm::from_md(alg.md_layout()).unwrap(), alg);
    }
    for alg in Raid6Algorithm::ALL {
        assert_eq!(alg.name().parse::<Raid6Algorithm>().unwrap(), alg);
        assert_eq!(
            alg.md_layout()
                .to_string()
                .parse::<Raid6Algorithm>()
                .unwrap(),
            alg
        );
    }
    assert_eq!(
        "ls".parse::<Raid5Algorithm>().unwrap(),
        Raid5Algorithm::LeftSymmetric
    );
    assert_eq!(
        "DDF-N-Restart".parse::<Raid6Algorithm>().unwrap(),
        Raid6Algorithm::RotatingNRestart
    );
    assert!("left-symmetric-6".parse::<Raid5Algorithm>().is_err());
    for (text, word) in [
        ("n2", 0x102u32),
        ("f2", 0x201),
        ("o3", 0x10301),
        ("n2f2", 0x202),
        ("f2s2", 0x40201),
    ] {
        let l: Raid10Layout = text.parse().unwrap();
        assert_eq!(l.md_layout(), word, "{text}");
        assert_eq!(l.to_string(), text);
        assert_eq!(Raid10Layout::from_md(word).unwrap(), l);
    }
    for bad in ["", "x2", "n", "n0", "n2n2", "f2o2", "s3n2"] {
        assert!(bad.parse::<Raid10Layout>().is_err(), "{bad}");
    }
    for (text, level) in [
        ("raid6", Level::Raid6),
        ("1E", Level::Raid1E),
        ("50", Level::Raid50),
    ] {
        assert_eq!(text.parse::<Level>().unwrap(), level);
    }
}

#[test]
fn display_names_the_rule() {
    let e = err(md(6, 2, 3, 128));
    assert_eq!(
        e.to_string(),
        "at least 4 raid-devices needed for level 6 (got 3)"
    );
    let e = err(md(10, 0x103, 2, 128));
    assert!(e.to_string().contains("copies"), "{e}");
    let e = err(md(5, 2, 4, 192));
    assert!(e.to_string().contains("power of two"), "{e}");
}

#[test]
fn reshape_cursor_picks_the_side_like_md() {
    use raidkit_layout::{Reshape, ReshapeSide};
    let old = Geometry::raid5(Raid5Algorithm::LeftSymmetric, 4, 8, 800).unwrap();
    let new = Geometry::raid5(Raid5Algorithm::LeftSymmetric, 5, 8, 800).unwrap();
    let growing = Reshape {
        old: old.clone(),
        new: new.clone(),
        reshape_position: 96,
        backwards: false,
    };
    assert_eq!(growing.side_of(95), ReshapeSide::New);
    assert_eq!(growing.side_of(96), ReshapeSide::Old);
    let (side, m) = growing.map(100).unwrap();
    assert_eq!(side, ReshapeSide::Old);
    assert_eq!(m, old.map(100).unwrap());
    let shrinking = Reshape {
        old: new,
        new: old,
        reshape_position: 96,
        backwards: true,
    };
    assert_eq!(shrinking.side_of(95), ReshapeSide::Old);
    assert_eq!(shrinking.side_of(96), ReshapeSide::New);
}

#[test]
fn composite_levels_have_no_native_md_level() {
    assert_eq!(Level::Raid1E.md_native_level(), None);
    assert_eq!(Level::Raid50.md_native_level(), None);
    assert_eq!(Level::Raid60.md_native_level(), None);
    assert_eq!(Level::Raid10.md_native_level(), Some(10));
    assert_eq!(Level::Raid0.md_native_level(), Some(0));
    let r10 = Geometry::raid10(Raid10Layout::far(3), 4, 8, 800).unwrap();
    assert_eq!((r10.copies(), r10.data_disks()), (3, None));
    let r6 = Geometry::raid6(Raid6Algorithm::LeftSymmetric, 7, 8, 800).unwrap();
    assert_eq!((r6.copies(), r6.data_disks()), (1, Some(5)));
}

#[test]
fn geometry_and_tables_serialize() {
    let g = Geometry::raid6(Raid6Algorithm::RotatingNContinue, 5, 8, 80).unwrap();
    let v = serde_json::to_value(&g).unwrap();
    assert_eq!(v["kind"], "parity");
    assert_eq!(v["algorithm"]["algorithm"], "ddf-N-continue");
    let sm = serde_json::to_value(g.stripe_map(1).unwrap()).unwrap();
    assert_eq!(
        sm["syndrome_slots"],
        serde_json::json!([0, 1, null, null, 4])
    );
    let role = serde_json::to_value(g.unmap(3, 8).unwrap()).unwrap();
    assert_eq!(role, serde_json::json!({"role": "parity", "stripe": 1}));
    let t = raidkit_layout::layout_table(&g, 2).unwrap();
    let tv = serde_json::to_value(&t).unwrap();
    assert_eq!(
        tv["rows"][1]["cells"],
        serde_json::json!(["D4", "D5", "Q", "P", "D3"])
    );
    let e = err(md(0, 1, 2, 24));
    assert!(e.to_string().contains("by raidkit and by mdadm"), "{e}");
}

#[test]
fn mdadm_raid5_ddf_aliases_and_raid0_names() {
    use raidkit_layout::Raid0Layout;
    assert_eq!(
        "ddf-zero-restart".parse::<Raid5Algorithm>().unwrap(),
        Raid5Algorithm::RightAsymmetric
    );
    assert_eq!(
        "ddf-N-restart".parse::<Raid5Algorithm>().unwrap(),
        Raid5Algorithm::LeftAsymmetric
    );
    assert_eq!(
        "ddf-N-continue".parse::<Raid5Algorithm>().unwrap(),
        Raid5Algorithm::LeftSymmetric
    );
    assert_eq!("original".parse::<Raid0Layout>().unwrap().md_layout(), 1);
    assert_eq!("alternate".parse::<Raid0Layout>().unwrap().md_layout(), 2);
    assert_eq!(
        "dangerous".parse::<Raid0Layout>().unwrap(),
        Raid0Layout::Unset
    );
}

#[test]
fn stacked_outer_size_can_be_given() {
    let set = Geometry::raid5(Raid5Algorithm::LeftSymmetric, 4, 8, 800).unwrap();
    assert_eq!(set.array_sectors(), 2400);
    let full = StackedGeometry::new(set.clone(), 3, 16, 32).unwrap();
    // (2400 - 32) rounded down to the 16-sector outer chunk, on each of 3 sets.
    assert_eq!(full.array_sectors(), 3 * 2368);
    let exact = StackedGeometry::with_outer_member_sectors(set.clone(), 3, 16, 32, 1000).unwrap();
    assert_eq!(exact.array_sectors(), 3 * 992);
    // Asking for more than the set holds is capped at what it holds.
    let capped = StackedGeometry::with_outer_member_sectors(set, 3, 16, 32, 1 << 40).unwrap();
    assert_eq!(capped.array_sectors(), full.array_sectors());
    // Outer sector 0 lives in set 0 at set sector 32 (after the outer data offset).
    let m = exact.map(0).unwrap();
    assert_eq!((m.set, m.set_sector), (0, 32));
    let m = exact.map(16).unwrap();
    assert_eq!((m.set, m.set_sector), (1, 32));
}
