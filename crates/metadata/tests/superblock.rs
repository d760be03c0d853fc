//! Superblock codec: round trips (property tests), refusal of malformed input with the right
//! error, hostile bytes never panicking, and the engine-facing helpers.

use proptest::prelude::*;
use raidkit_metadata::superblock::{encoded_len, format_ctime_utc};
use raidkit_metadata::{
    calc_sb_1_csum, mdadm_max_dev, DataLayout, DevRole, FeatureMap, Level, Location, MdTime,
    MetadataError, NewMember, PplArea, SetName, Superblock, SuperblockVersion, Uuid, MAX_DEV_LIMIT,
    RESYNC_CLEAN,
};

const DEV_SECTORS: u64 = 40960;

fn sample(version: SuperblockVersion) -> Superblock {
    let dl = DataLayout::mdadm_default(version, DEV_SECTORS, 128, false).unwrap();
    Superblock::new_member(&NewMember {
        set_uuid: Uuid([0xab; 16]),
        device_uuid: Uuid([0x11; 16]),
        set_name: SetName::new("host:md0"),
        ctime: MdTime::new(1_700_000_000, 123_456),
        level: Level::Raid6,
        layout: 2,
        chunk_sectors: 128,
        raid_disks: 4,
        max_dev: mdadm_max_dev(5),
        dev_number: 1,
        role: DevRole::Active(1),
        roles: vec![
            (0, DevRole::Active(0)),
            (2, DevRole::Active(2)),
            (3, DevRole::Active(3)),
            (4, DevRole::Spare),
        ],
        size_sectors: dl.size_sectors,
        data_offset_sectors: dl.data_offset_sectors,
        data_size_sectors: dl.data_size_sectors,
        super_offset_sectors: dl.super_offset_sectors,
        bitmap_offset: None,
        bblog: Some((dl.bblog_offset, dl.bblog_size_sectors)),
        events: 42,
        clean: false,
    })
    .unwrap()
}

fn loc(version: SuperblockVersion) -> Location {
    Location::new(version, DEV_SECTORS)
}

/// Re-seals a hand-edited superblock with a valid checksum.
fn reseal(bytes: &mut [u8]) {
    let c = calc_sb_1_csum(bytes);
    bytes[0xd8..0xdc].copy_from_slice(&c.to_le_bytes());
}

#[test]
fn placement() {
    assert_eq!(SuperblockVersion::V1_2.superblock_sector(DEV_SECTORS), 8);
    assert_eq!(SuperblockVersion::V1_1.superblock_sector(DEV_SECTORS), 0);
    // At least 8 KiB, less than 12 KiB from the end, 4 KiB aligned.
    for dev in [40000u64, 40001, 40007, 40008, 40015] {
        let s = SuperblockVersion::V1_0.superblock_sector(dev);
        assert_eq!(s % 8, 0);
        assert!(dev - s >= 16 && dev - s < 24, "dev {dev} sb {s}");
    }
    assert_eq!(SuperblockVersion::V1_0.superblock_sector(40000), 39984);
}

#[test]
fn sample_round_trips_and_has_mdadm_max_dev() {
    for v in SuperblockVersion::ALL {
        let sb = sample(v);
        let bytes = sb.encode();
        // 5 devices: 256 + 10 bytes rounded to 512 -> 128 role slots.
        assert_eq!(sb.max_dev(), 128);
        assert_eq!(bytes.len(), 512);
        let back = Superblock::decode(&bytes, loc(v)).unwrap();
        assert_eq!(back, sb);
        assert_eq!(back.encode(), bytes);
        assert_eq!(back.role(), DevRole::Active(1));
        assert_eq!(back.role_of(4), DevRole::Spare);
        assert_eq!(back.role_of(1000), DevRole::Spare);
        assert_eq!(back.ctime.micros(), 123_456);
        assert_eq!(back.ctime.seconds(), 1_700_000_000);
        assert_eq!(back.set_name.as_string(), "host:md0");
    }
}

#[test]
fn known_checksum() {
    // A zeroed 256-byte superblock with magic, major 1 and max_dev 0: sum of the words.
    let mut b = vec![0u8; 256];
    b[0..4].copy_from_slice(&0xa92b_4efcu32.to_le_bytes());
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(calc_sb_1_csum(&b), 0xa92b_4efd);
    // Carry folding: two words summing past 2^32.
    b[0x40..0x44].copy_from_slice(&0xffff_ffffu32.to_le_bytes());
    assert_eq!(
        calc_sb_1_csum(&b),
        0xa92b_4efd_u32.wrapping_add(0xffff_ffff) + 1
    );
    // An odd max_dev adds the trailing u16.
    b[0xdc..0xe0].copy_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&[0x34, 0x12]);
    let with = calc_sb_1_csum(&b);
    b[256] = 0;
    b[257] = 0;
    assert_eq!(with.wrapping_sub(calc_sb_1_csum(&b)), 0x1234);
}

#[test]
fn refuses_bad_magic() {
    let mut b = sample(SuperblockVersion::V1_2).encode();
    b[0] ^= 0xff;
    let e = Superblock::decode(&b, loc(SuperblockVersion::V1_2)).unwrap_err();
    assert!(matches!(e, MetadataError::BadMagic { .. }), "{e}");
    assert!(e.to_string().contains("magic"));
}

#[test]
fn refuses_bad_major_version() {
    let mut b = sample(SuperblockVersion::V1_2).encode();
    b[4] = 2;
    reseal(&mut b);
    let e = Superblock::decode(&b, loc(SuperblockVersion::V1_2)).unwrap_err();
    assert_eq!(e, MetadataError::UnsupportedMajorVersion { found: 2 });
}

#[test]
fn refuses_bad_checksum() {
    let mut b = sample(SuperblockVersion::V1_2).encode();
    b[0x10] ^= 1; // set_uuid, checksum not updated
    let e = Superblock::decode(&b, loc(SuperblockVersion::V1_2)).unwrap_err();
    assert!(matches!(e, MetadataError::ChecksumMismatch { .. }), "{e}");
    assert!(e.to_string().contains("sb_csum"));
}

#[test]
fn refuses_unknown_feature_bit() {
    let mut b = sample(SuperblockVersion::V1_2).encode();
    b[0x08..0x0c].copy_from_slice(&0x2000u32.to_le_bytes());
    reseal(&mut b);
    let e = Superblock::decode(&b, loc(SuperblockVersion::V1_2)).unwrap_err();
    assert_eq!(e, MetadataError::UnknownFeatureBits { bits: 0x2000 });
    assert!(e.to_string().contains("feature_map"));
}

#[test]
fn refuses_wrong_super_offset() {
    let sb = sample(SuperblockVersion::V1_2);
    let b = sb.encode();
    // Same bytes presented as a 1.1 superblock (sector 0).
    let e = Superblock::decode(&b, loc(SuperblockVersion::V1_1)).unwrap_err();
    assert_eq!(
        e,
        MetadataError::SuperOffsetMismatch {
            recorded_sector: 8,
            expected_sector: 0
        }
    );
    assert!(e.to_string().contains("super_offset"));
    // 1.0 on a device of a different size.
    let b = sample(SuperblockVersion::V1_0).encode();
    let e = Superblock::decode(&b, Location::new(SuperblockVersion::V1_0, DEV_SECTORS + 8))
        .unwrap_err();
    assert!(matches!(e, MetadataError::SuperOffsetMismatch { .. }));
}

#[test]
fn refuses_max_dev_too_big() {
    let mut b = sample(SuperblockVersion::V1_2).encode();
    b.resize(4096 + 64, 0);
    b[0xdc..0xe0].copy_from_slice(&(MAX_DEV_LIMIT + 1).to_le_bytes());
    reseal(&mut b);
    let e = Superblock::decode(&b, loc(SuperblockVersion::V1_2)).unwrap_err();
    assert_eq!(
        e,
        MetadataError::MaxDevTooLarge {
            max_dev: 1921,
            limit: 1920
        }
    );
}

#[test]
fn refuses_truncated_buffers() {
    let b = sample(SuperblockVersion::V1_2).encode();
    for len in [0usize, 1, 100, 255, 256, 300, 511] {
        let e = Superblock::decode(&b[..len], loc(SuperblockVersion::V1_2)).unwrap_err();
        assert!(
            matches!(e, MetadataError::Truncated { .. }),
            "len {len}: {e}"
        );
    }
}

#[test]
fn refuses_nonzero_padding() {
    let mut b = sample(SuperblockVersion::V1_2).encode();
    b[0xe5] = 1;
    reseal(&mut b);
    let e = Superblock::decode(&b, loc(SuperblockVersion::V1_2)).unwrap_err();
    assert_eq!(e, MetadataError::NonZeroPadding { field: "pad3" });
}

#[test]
fn refuses_bad_ranges() {
    let v = SuperblockVersion::V1_2;
    let mut sb = sample(v);
    sb.data_size_sectors = 9;
    let e = Superblock::decode(&sb.encode(), loc(v)).unwrap_err();
    assert_eq!(
        e,
        MetadataError::DataSizeTooSmall {
            data_size_sectors: 9
        }
    );

    let mut sb = sample(v);
    sb.data_size_sectors += 1;
    let e = Superblock::decode(&sb.encode(), loc(v)).unwrap_err();
    assert!(matches!(
        e,
        MetadataError::BeyondDevice {
            field: "data_offset + data_size",
            ..
        }
    ));

    let mut sb = sample(v);
    sb.data_offset_sectors = 8;
    let e = Superblock::decode(&sb.encode(), loc(v)).unwrap_err();
    assert!(
        matches!(e, MetadataError::DataOffsetOverlapsSuperblock { .. }),
        "{e}"
    );

    let mut sb = sample(SuperblockVersion::V1_0);
    sb.data_size_sectors = sb.super_offset_sectors + 1;
    let e = Superblock::decode(&sb.encode(), loc(SuperblockVersion::V1_0)).unwrap_err();
    assert!(matches!(
        e,
        MetadataError::BeyondDevice {
            field: "data_size",
            ..
        }
    ));

    let mut sb = sample(v);
    sb.feature_map.insert(FeatureMap::RAID0_LAYOUT);
    let e = Superblock::decode(&sb.encode(), loc(v)).unwrap_err();
    assert_eq!(e, MetadataError::Raid0LayoutOnNonRaid0 { level: 6 });

    let mut sb = sample(v);
    sb.feature_map.insert(FeatureMap::BAD_BLOCKS);
    sb.bblog_offset = 0;
    let e = Superblock::decode(&sb.encode(), loc(v)).unwrap_err();
    assert!(matches!(e, MetadataError::BadBlockLogField { .. }));
}

#[test]
fn helpers_for_the_engine() {
    let mut sb = sample(SuperblockVersion::V1_2);
    assert!(!sb.is_clean());
    sb.mark_clean();
    assert!(sb.is_clean());
    assert_eq!(sb.resync_offset_sectors, RESYNC_CLEAN);
    sb.mark_dirty(1234);
    assert_eq!(sb.resync_offset_sectors, 1234);

    sb.bump_events(MdTime::new(1_800_000_000, 0));
    assert_eq!(sb.events, 43);
    assert_eq!(sb.utime.seconds(), 1_800_000_000);

    assert_eq!(sb.recovery_offset(), None);
    sb.set_recovery_offset(4096);
    assert!(sb.feature_map.contains(FeatureMap::RECOVERY_OFFSET));
    assert_eq!(sb.recovery_offset(), Some(4096));
    let back = Superblock::decode(&sb.encode(), loc(SuperblockVersion::V1_2)).unwrap();
    assert_eq!(back.recovery_offset(), Some(4096));
    sb.clear_recovery_offset();
    assert_eq!(sb.recovery_offset(), None);

    sb.set_role(1, DevRole::Faulty).unwrap();
    assert_eq!(sb.role(), DevRole::Faulty);
    sb.set_role(200, DevRole::Active(4)).unwrap();
    assert_eq!(sb.max_dev(), 201);
    assert!(sb.set_role(1920, DevRole::Spare).is_err());
    assert!(matches!(
        sb.set_role(3, DevRole::Active(0xff00)),
        Err(MetadataError::RoleOutOfRange { .. })
    ));
    assert!(sb.set_max_dev(100).is_err(), "slot 200 is not spare");
    sb.set_role(200, DevRole::Spare).unwrap();
    sb.set_max_dev(100).unwrap();
    assert_eq!(sb.encode().len(), encoded_len(100));

    sb.feature_map.insert(FeatureMap::PPL);
    sb.set_ppl_area(PplArea {
        offset_sectors: -2056,
        size_sectors: 2048,
    });
    let back = Superblock::decode(&sb.encode(), loc(SuperblockVersion::V1_2)).unwrap();
    assert_eq!(
        back.ppl(),
        Some(PplArea {
            offset_sectors: -2056,
            size_sectors: 2048
        })
    );
    assert_eq!(back.bitmap_offset(), None);
}

#[test]
fn padded_encoding_reads_spare_beyond_max_dev() {
    let sb = sample(SuperblockVersion::V1_2);
    let b = sb.encode_padded(4096);
    assert_eq!(b.len(), 4096);
    assert!(b[sb.encoded_len()..].iter().all(|&x| x == 0xff));
    assert_eq!(
        Superblock::decode(&b, loc(SuperblockVersion::V1_2)).unwrap(),
        sb
    );
}

#[test]
fn superblock_serializes_to_json() {
    let sb = sample(SuperblockVersion::V1_2);
    let v = serde_json::to_value(&sb).unwrap();
    assert_eq!(v["set_uuid"], "abababab:abababab:abababab:abababab");
    assert_eq!(v["set_name"], "host:md0");
    assert_eq!(v["level"], "Raid6");
    assert_eq!(v["ctime"]["micros"], 123_456);
    assert_eq!(v["events"], 42);
    assert_eq!(v["dev_roles"][1]["Active"], 1);
    assert_eq!(v["dev_roles"].as_array().unwrap().len(), 128);
}

#[test]
fn ctime_text() {
    assert_eq!(format_ctime_utc(0), "Thu Jan  1 00:00:00 1970");
    assert_eq!(format_ctime_utc(1_790_000_000), "Mon Sep 21 14:13:20 2026");
    assert_eq!(format_ctime_utc(951_782_400), "Tue Feb 29 00:00:00 2000");
}

#[test]
fn uuid_text() {
    let u = Uuid([
        0x3e, 0x1f, 0x9a, 0x22, 0x51, 0x07, 0xc4, 0x8d, 0x90, 0x11, 0x2b, 0x6e, 0xa7, 0x44, 0x08,
        0xf3,
    ]);
    assert_eq!(u.to_mdadm_string(), "3e1f9a22:5107c48d:90112b6e:a74408f3");
    assert_eq!(Uuid::parse("3e1f9a22:5107c48d:90112b6e:a74408f3"), Some(u));
    assert_eq!(Uuid::parse("3e1f9a22"), None);
}

// ---------------------------------------------------------------------------------------
// Property tests.

fn arb_role() -> impl Strategy<Value = DevRole> {
    prop_oneof![
        (0u16..0xff00).prop_map(DevRole::Active),
        Just(DevRole::Spare),
        Just(DevRole::Faulty),
        Just(DevRole::Journal),
        (0xff00u16..0xfffd).prop_map(DevRole::Reserved),
    ]
}

prop_compose! {
    fn arb_superblock()(
        version_idx in 0usize..3,
        device_sectors in 4096u64..(1 << 40),
        features in 0u32..0x1000,
        uuids in any::<([u8; 16], [u8; 16])>(),
        name in proptest::collection::vec(any::<u8>(), 32),
        times in any::<(u64, u64)>(),
        level in prop_oneof![Just(1i32), Just(5), Just(6), Just(10), Just(-1), any::<i32>()],
        small in any::<(u32, u32, u32, u32, i32)>(),
        reshape in any::<(i32, u64, i32, u32, u32, i32)>(),
        counters in any::<(u64, u64, u32, u32, u8, u8, u16, i32)>(),
        roles in proptest::collection::vec(arb_role(), 0..300),
        data_frac in 0.0f64..1.0,
        size_frac in 0.0f64..1.0,
    ) -> (Superblock, Location) {
        let version = SuperblockVersion::ALL[version_idx];
        let location = Location::new(version, device_sectors);
        let sb_sector = location.superblock_sector();
        let mut sb = sample(SuperblockVersion::V1_2);
        sb.set_max_dev(0).ok();
        sb.feature_map = FeatureMap::from_bits(features).unwrap();
        sb.set_uuid = Uuid(uuids.0);
        sb.device_uuid = Uuid(uuids.1);
        let mut n = [0u8; 32];
        n.copy_from_slice(&name);
        sb.set_name = SetName(n);
        sb.ctime = MdTime(times.0);
        sb.utime = MdTime(times.1);
        sb.level = Level::from_md(level);
        sb.layout = small.0;
        sb.chunk_sectors = small.1;
        sb.raid_disks = small.2;
        sb.cnt_corrected_read = small.3;
        sb.bitmap_offset = small.4;
        sb.reshape.new_level = reshape.0;
        sb.reshape.reshape_position_sectors = reshape.1;
        sb.reshape.delta_disks = reshape.2;
        sb.reshape.new_layout = reshape.3;
        sb.reshape.new_chunk_sectors = reshape.4;
        sb.reshape.new_offset_sectors = reshape.5;
        sb.events = counters.0;
        sb.resync_offset_sectors = counters.1;
        sb.dev_number = counters.2 % 400;
        sb.recovery_offset_sectors = u64::from(counters.3);
        sb.devflags.0 = counters.4;
        sb.bblog_shift = counters.5;
        sb.bblog_size_sectors = counters.6 % 9;
        sb.bblog_offset = if counters.7 == 0 { 1 } else { counters.7 };
        for (i, r) in roles.iter().enumerate() {
            sb.set_role(i as u32, *r).unwrap();
        }
        sb.super_offset_sectors = sb_sector;
        // Keep the new data offset from landing inside the superblock.
        sb.feature_map.remove(FeatureMap::NEW_OFFSET);
        if sb.level != Level::Raid0 {
            sb.feature_map.remove(FeatureMap::RAID0_LAYOUT);
        }
        match version {
            SuperblockVersion::V1_0 => {
                sb.data_offset_sectors = 0;
                sb.data_size_sectors = 10 + ((sb_sector - 10) as f64 * data_frac) as u64;
            }
            _ => {
                let start = sb_sector + sb.sb_size_sectors();
                sb.data_offset_sectors = start + ((device_sectors - start - 10) as f64 * data_frac) as u64;
                let room = device_sectors - sb.data_offset_sectors;
                sb.data_size_sectors = 10 + ((room - 10) as f64 * size_frac) as u64;
            }
        }
        sb.size_sectors = (sb.data_size_sectors as f64 * size_frac) as u64;
        (sb, location)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Any valid superblock encodes, decodes to itself, and re-encodes to the same bytes.
    #[test]
    fn round_trip((sb, location) in arb_superblock()) {
        let bytes = sb.encode();
        prop_assert_eq!(bytes.len(), 256 + 2 * sb.max_dev() as usize);
        let back = Superblock::decode(&bytes, location).unwrap();
        prop_assert_eq!(&back, &sb);
        prop_assert_eq!(back.encode(), bytes);
    }

    /// Mutated valid superblocks (with and without a repaired checksum) never panic the
    /// decoder, and whatever it accepts re-encodes to exactly the bytes it read.
    #[test]
    fn mutations_never_panic(
        (sb, location) in arb_superblock(),
        edits in proptest::collection::vec((0usize..4096, any::<u8>()), 1..8),
        reseal_sum in any::<bool>(),
        cut in proptest::option::of(0usize..4096),
    ) {
        let mut bytes = sb.encode_padded(4096);
        for (pos, val) in edits {
            let len = bytes.len();
            bytes[pos % len] = val;
        }
        if reseal_sum {
            let max_dev = u32::from_le_bytes([bytes[0xdc], bytes[0xdd], bytes[0xde], bytes[0xdf]]);
            if max_dev <= MAX_DEV_LIMIT {
                reseal(&mut bytes);
            }
        }
        if let Some(c) = cut {
            bytes.truncate(c);
        }
        if let Ok(got) = Superblock::decode(&bytes, location) {
            let enc = got.encode();
            prop_assert_eq!(&enc[..], &bytes[..enc.len()]);
        }
    }

    /// Random bytes: never a panic.
    #[test]
    fn random_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..4200),
        version_idx in 0usize..3,
        device_sectors in any::<u64>(),
    ) {
        let location = Location::new(SuperblockVersion::ALL[version_idx], device_sectors);
        if let Ok(got) = Superblock::decode(&bytes, location) {
            let enc = got.encode();
            prop_assert_eq!(&enc[..], &bytes[..enc.len()]);
        }
    }
}
