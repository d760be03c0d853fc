//! mdadm's create-time placement rules against values worked out by hand from mdadm's
//! super1.c and Create.c (each expectation shows its arithmetic), and against the size bounds
//! of mdadm's own test suite (tests/func.sh `testdev`: the array must be no larger than
//! `mdsizeN` and at least 80% of it).

use raidkit_metadata::data_layout::{
    choose_bm_space, default_internal_bitmap_chunk_bytes, mdadm_default_data_offset,
    mdadm_headroom_sectors, CreateShape,
};
use raidkit_metadata::{DataLayout, Level, MetadataError, SuperblockVersion};

/// mdadm's test harness loop devices: 20000 KiB.
const LOOP_SECTORS: u64 = 20000 * 2;

#[test]
fn choose_bm_space_thresholds() {
    assert_eq!(choose_bm_space(127), 0);
    assert_eq!(choose_bm_space(128), 8);
    // "bigger than 8Gig": devsize - 8 > 16 GiB-of-sectors threshold.
    assert_eq!(choose_bm_space(8 * 1024 * 1024 * 2 + 8), 8);
    assert_eq!(choose_bm_space(8 * 1024 * 1024 * 2 + 9), 128);
    // "bigger than 200Gig": devsize - 128 >= 200 GiB.
    assert_eq!(choose_bm_space(200 * 1024 * 1024 * 2 + 127), 128);
    assert_eq!(choose_bm_space(200 * 1024 * 1024 * 2 + 128), 256);
}

#[test]
fn headroom_halves_to_one_thousandth_but_keeps_two_chunks() {
    // No chunk: halve while headroom*1024 > 40000 -> 32 (32768 <= 40000).
    assert_eq!(mdadm_headroom_sectors(LOOP_SECTORS, 0), 32);
    // 512 KiB chunk (1024 sectors): stop before going under two chunks: 2048.
    assert_eq!(mdadm_headroom_sectors(LOOP_SECTORS, 1024), 2048);
    // 64 KiB chunk: 256.
    assert_eq!(mdadm_headroom_sectors(LOOP_SECTORS, 128), 256);
    // Large disks keep the full 128 MiB.
    assert_eq!(mdadm_headroom_sectors(1 << 33, 1024), 262_144);
}

#[test]
fn data_offset_is_one_mib_on_small_devices() {
    // 24 + 8 + 32 = 64 -> rounded up to 2048.
    assert_eq!(
        mdadm_default_data_offset(SuperblockVersion::V1_2, LOOP_SECTORS, 0),
        2048
    );
    // 24 + 8 + 256 = 288 -> 2048 (64 KiB chunk).
    assert_eq!(
        mdadm_default_data_offset(SuperblockVersion::V1_2, LOOP_SECTORS, 128),
        2048
    );
    // 24 + 8 + 1024 = 1056 -> 2048 (256 KiB chunk).
    assert_eq!(
        mdadm_default_data_offset(SuperblockVersion::V1_1, LOOP_SECTORS, 512),
        2048
    );
    // 24 + 8 + 2048 = 2080 -> 4096 with mdadm's default 512 KiB chunk (mdadm >= 4.1 rounds up;
    // tests/19raid6repair's "default 2048 sectors" predates that and is marked broken).
    assert_eq!(
        mdadm_default_data_offset(SuperblockVersion::V1_2, LOOP_SECTORS, 1024),
        4096
    );
    // 1.0 keeps data at the start.
    assert_eq!(
        mdadm_default_data_offset(SuperblockVersion::V1_0, LOOP_SECTORS, 1024),
        0
    );
}

#[test]
fn large_disks_get_264192_sectors() {
    // A 4 TB disk: 24 + 256 + 262144 = 262424 -> 264192.
    let l = DataLayout::mdadm_default(SuperblockVersion::V1_2, 7_814_037_168, 1024, false).unwrap();
    assert_eq!(l.data_offset_sectors, 264_192);
    assert_eq!(l.data_size_sectors, 7_814_037_168 - 264_192);
    assert_eq!(l.bblog_offset, 8 + 256);
}

#[test]
fn v1_2_raid1_on_test_loops() {
    let l = DataLayout::mdadm_default(SuperblockVersion::V1_2, LOOP_SECTORS, 0, false).unwrap();
    assert_eq!(l.super_offset_sectors, 8);
    assert_eq!(l.data_offset_sectors, 2048);
    assert_eq!(l.data_size_sectors, 40000 - 2048);
    // 37952 sectors = 18976 KiB, raid1 rounds to 64 KiB: 18944 KiB.
    assert_eq!(l.size_sectors, 18944 * 2);
    // Bad-block log right after the 4 KiB reserved for a bitmap: 8 + 8.
    assert_eq!((l.bblog_offset, l.bblog_size_sectors), (16, 8));
    // mdadm's testdev bound with mdsize12 = 19988.
    let kib = l.size_sectors / 2;
    assert!(kib <= 19988 && kib * 5 >= 19988 * 4, "{kib} KiB");
}

#[test]
fn v1_2_raid5_default_chunk_on_test_loops() {
    let l = DataLayout::mdadm_default(SuperblockVersion::V1_2, LOOP_SECTORS, 1024, false).unwrap();
    assert_eq!(l.data_offset_sectors, 4096);
    assert_eq!(l.data_size_sectors, 35904);
    // 35904 sectors = 17952 KiB, rounded down to 512 KiB: 17920 KiB.
    assert_eq!(l.size_sectors, 17920 * 2);
}

#[test]
fn v1_0_raid1_on_test_loops() {
    let l = DataLayout::mdadm_default(SuperblockVersion::V1_0, LOOP_SECTORS, 0, false).unwrap();
    // (40000 - 16) & ~7.
    assert_eq!(l.super_offset_sectors, 39984);
    assert_eq!(l.data_offset_sectors, 0);
    // validate_geometry1 free: 40000 - (16 + 8 + 8) = 39968 = 19984 KiB -> raid1: 19968 KiB.
    assert_eq!(l.size_sectors, 19968 * 2);
    // write_init_super1: bm_space 8 + 8 (bblog): data_size = 39984 - 16.
    assert_eq!(l.data_size_sectors, 39968);
    assert_eq!((l.bblog_offset, l.bblog_size_sectors), (-8, 8));
    // mdsize1 = 19992 bound.
    let kib = l.size_sectors / 2;
    assert!(kib <= 19992 && kib * 5 >= 19992 * 4, "{kib} KiB");
}

#[test]
fn v1_0_raid0_leaves_size_to_the_kernel() {
    let l = DataLayout::mdadm_create(&CreateShape {
        version: SuperblockVersion::V1_0,
        device_sectors: LOOP_SECTORS,
        level: Level::Raid0,
        layout: 0,
        raid_disks: 2,
        chunk_sectors: 1024,
        with_bitmap: false,
    })
    .unwrap();
    assert_eq!(l.size_sectors, 0);
    // choose_bm_space(0) = 0, + 8 for the log: data_size = 39984 - 8.
    assert_eq!(l.data_size_sectors, 39976);
}

#[test]
fn v1_1_places_log_after_bitmap_space() {
    let l = DataLayout::mdadm_default(SuperblockVersion::V1_1, LOOP_SECTORS, 0, false).unwrap();
    assert_eq!(l.super_offset_sectors, 0);
    assert_eq!(l.data_offset_sectors, 2048);
    assert_eq!(l.data_size_sectors, 37952);
    assert_eq!((l.bblog_offset, l.bblog_size_sectors), (16, 8));
}

#[test]
fn internal_bitmap_defaults() {
    // 20 MiB members, 1.2, raid5 512K: size 36864 sectors; room 8 sectors; 64 MiB chunk;
    // 1 bit + 256-byte superblock -> one 4 KiB block.
    let l = DataLayout::mdadm_default(SuperblockVersion::V1_2, 40960, 1024, true).unwrap();
    let b = l.bitmap.unwrap();
    assert_eq!(b.offset_sectors, 8);
    assert_eq!(b.chunk_bytes, 64 << 20);
    assert_eq!(b.sync_size_sectors, 36864);
    assert_eq!(b.space_sectors, 8);
    assert_eq!(l.bblog_offset, 16);

    // 1.0: bitmap just before the 8-sector log that precedes the superblock.
    let l = DataLayout::mdadm_default(SuperblockVersion::V1_0, 40960, 1024, true).unwrap();
    let b = l.bitmap.unwrap();
    assert_eq!(b.offset_sectors, -16);
    assert_eq!(l.bblog_offset, -8);
    assert_eq!(l.data_size_sectors, l.super_offset_sectors - 16);

    // Huge arrays: 2^40 sectors must fit 128 KiB of bits -> 1 GiB chunks.
    assert_eq!(
        default_internal_bitmap_chunk_bytes(256, 1 << 40).unwrap(),
        1 << 30
    );
    // No room -> error.
    assert!(default_internal_bitmap_chunk_bytes(1, 1000).is_err());
}

#[test]
fn raid10_bitmap_covers_the_array() {
    let l = DataLayout::mdadm_create(&CreateShape {
        version: SuperblockVersion::V1_2,
        device_sectors: LOOP_SECTORS,
        level: Level::Raid10,
        layout: 0x102,
        raid_disks: 4,
        chunk_sectors: 1024,
        with_bitmap: true,
    })
    .unwrap();
    // size_kib * raid_disks / copies * 2.
    assert_eq!(
        l.bitmap.unwrap().sync_size_sectors,
        l.size_sectors / 2 * 4 / 2 * 2
    );
}

#[test]
fn tiny_devices_are_refused() {
    assert!(matches!(
        DataLayout::mdadm_default(SuperblockVersion::V1_2, 23, 0, false),
        Err(MetadataError::DeviceTooSmall { .. })
    ));
    assert!(matches!(
        DataLayout::mdadm_default(SuperblockVersion::V1_2, 2000, 0, false),
        Err(MetadataError::DeviceTooSmall { .. })
    ));
    assert!(matches!(
        DataLayout::mdadm_default(SuperblockVersion::V1_2, 1 << 20, 1000, false),
        Err(MetadataError::InvalidGeometry { .. })
    ));
}

#[test]
fn layouts_never_overlap_metadata() {
    for version in SuperblockVersion::ALL {
        for device_sectors in [4096u64, 40000, 40960, 1 << 21, 123_456_789, 1 << 34] {
            for chunk in [0u32, 8, 128, 1024, 8192] {
                for bitmap in [false, true] {
                    let Ok(l) = DataLayout::mdadm_default(version, device_sectors, chunk, bitmap)
                    else {
                        continue;
                    };
                    let sb = l.super_offset_sectors;
                    if version == SuperblockVersion::V1_0 {
                        assert!(l.data_size_sectors <= sb);
                        assert!(l.size_sectors <= l.data_size_sectors);
                        if l.bblog_size_sectors != 0 {
                            let log = sb as i64 + l.bblog_offset as i64;
                            assert!(log >= l.data_size_sectors as i64);
                        }
                    } else {
                        assert!(l.data_offset_sectors >= sb + 8);
                        assert!(l.data_offset_sectors + l.data_size_sectors <= device_sectors);
                        assert!(l.size_sectors <= l.data_size_sectors);
                        let log_end =
                            sb as i64 + l.bblog_offset as i64 + l.bblog_size_sectors as i64;
                        assert!(log_end <= l.data_offset_sectors as i64);
                        if let Some(b) = l.bitmap {
                            let end = sb as i64 + b.offset_sectors as i64 + b.space_sectors as i64;
                            assert!(end <= l.data_offset_sectors as i64);
                        }
                    }
                }
            }
        }
    }
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    fn level() -> impl Strategy<Value = Level> {
        prop_oneof![
            Just(Level::Raid0),
            Just(Level::Raid1),
            Just(Level::Raid4),
            Just(Level::Raid5),
            Just(Level::Raid6),
            Just(Level::Raid10),
            Just(Level::Linear),
            any::<i32>().prop_map(Level::from_md),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Any input gives a layout or an error, never a panic; layouts never overlap metadata.
        #[test]
        fn any_shape_is_an_answer_or_an_error(
            v in 0usize..3,
            device_sectors in prop_oneof![any::<u64>(), 0u64..100_000, (1u64 << 50)..u64::MAX],
            level in level(),
            layout in any::<u32>(),
            raid_disks in any::<u32>(),
            chunk_shift in prop_oneof![Just(None), (0u32..32).prop_map(Some)],
            with_bitmap in any::<bool>(),
            ppl in any::<bool>(),
        ) {
            let shape = CreateShape {
                version: SuperblockVersion::ALL[v],
                device_sectors,
                level,
                layout,
                raid_disks,
                chunk_sectors: chunk_shift.map(|s| 1u32 << s).unwrap_or(0),
                with_bitmap,
            };
            let r = if ppl { DataLayout::mdadm_create_ppl(&shape) } else { DataLayout::mdadm_create(&shape) };
            if let Ok(l) = r {
                if shape.version == SuperblockVersion::V1_0 {
                    prop_assert!(l.data_size_sectors <= l.super_offset_sectors);
                } else {
                    prop_assert!(l.data_offset_sectors + l.data_size_sectors <= device_sectors);
                    prop_assert!(l.data_offset_sectors >= l.super_offset_sectors + 8);
                }
                prop_assert!(l.size_sectors <= l.data_size_sectors);
            }
        }
    }
}
