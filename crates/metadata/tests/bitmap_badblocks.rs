//! Write-intent bitmap superblock and bits; bad-block log; examine report as JSON.

use proptest::prelude::*;
use raidkit_metadata::badblocks::{self, BadBlock};
use raidkit_metadata::bitmap::{bitmap_bits, BitmapBits, BitmapState, BitmapSuper, BitmapVersion};
use raidkit_metadata::{
    DataLayout, DevRole, ExamineReport, Level, MdTime, MetadataError, NewMember, SetName,
    Superblock, SuperblockVersion, Uuid, BITMAP_MAGIC,
};

fn bms() -> BitmapSuper {
    let mut b = BitmapSuper::new_internal(Uuid([7; 16]), 36864, 64 << 20, 5);
    b.events = 9;
    b.events_cleared = 8;
    b
}

#[test]
fn bitmap_super_layout() {
    let b = bms().encode();
    assert_eq!(&b[0..4], b"bitm");
    assert_eq!(u32::from_le_bytes([b[0], b[1], b[2], b[3]]), BITMAP_MAGIC);
    assert_eq!(u32::from_le_bytes([b[4], b[5], b[6], b[7]]), 4);
    assert_eq!(&b[8..24], &[7u8; 16]);
    assert_eq!(u64::from_le_bytes(b[24..32].try_into().unwrap()), 9);
    assert_eq!(u64::from_le_bytes(b[32..40].try_into().unwrap()), 8);
    assert_eq!(u64::from_le_bytes(b[40..48].try_into().unwrap()), 36864);
    assert_eq!(u32::from_le_bytes(b[52..56].try_into().unwrap()), 64 << 20);
    assert_eq!(u32::from_le_bytes(b[56..60].try_into().unwrap()), 5);
    assert_eq!(BitmapSuper::decode(&b).unwrap(), bms());
}

#[test]
fn bitmap_super_refusals() {
    let good = bms().encode();
    let mut b = good;
    b[0] = b'x';
    assert!(matches!(
        BitmapSuper::decode(&b),
        Err(MetadataError::BadMagic { .. })
    ));
    let mut b = good;
    b[4] = 7;
    let e = BitmapSuper::decode(&b).unwrap_err();
    assert!(e.to_string().contains("version"), "{e}");
    let mut b = good;
    b[52..56].copy_from_slice(&3000u32.to_le_bytes());
    let e = BitmapSuper::decode(&b).unwrap_err();
    assert!(e.to_string().contains("power of 2"), "{e}");
    let mut b = good;
    b[52..56].copy_from_slice(&256u32.to_le_bytes());
    assert!(BitmapSuper::decode(&b).is_err());
    let mut b = good;
    b[60..64].copy_from_slice(&20000u32.to_le_bytes());
    assert!(BitmapSuper::decode(&b).is_err());
    assert!(matches!(
        BitmapSuper::decode(&good[..255]),
        Err(MetadataError::Truncated { .. })
    ));
}

#[test]
fn bitmap_sizes() {
    assert_eq!(bitmap_bits(36864, 64 << 20), 1);
    // 1 GiB at 64 MiB per bit: 16 bits; one sector more needs a 17th.
    assert_eq!(bitmap_bits(1 << 21, 64 << 20), 16);
    assert_eq!(bitmap_bits((1 << 21) + 1, 64 << 20), 17);
    assert_eq!(bitmap_bits(100, 0), 0);
    let mut b = BitmapSuper::new_internal(Uuid([0; 16]), 1 << 31, 4096, 5);
    // 1 TiB at 4 KiB per bit = 2^28 bits = 32 MiB of bits.
    assert_eq!(b.bits(), 1 << 28);
    assert_eq!(b.bit_bytes(), 1 << 25);
    assert_eq!(b.space_sectors(), ((1u64 << 25) + 4096) / 512);
    b.version = BitmapVersion::Clustered;
    assert_eq!(
        BitmapSuper::decode(&b.encode()).unwrap().version,
        BitmapVersion::Clustered
    );
    assert!(bms().events_match(9));
    assert!(bms().events_match(10));
    assert!(!bms().events_match(11));
    assert!(!bms().events_match(8));
    assert!(!BitmapState(0).stale());
}

#[test]
fn bit_array() {
    let mut bits = BitmapBits::new_clear(21).unwrap();
    assert_eq!(bits.as_bytes().len(), 3);
    assert!(bits.set(0));
    assert!(bits.set(9));
    assert!(bits.set(20));
    assert!(!bits.set(21));
    // Little-endian bit order: bit 9 is byte 1, bit 1.
    assert_eq!(bits.as_bytes(), &[0x01, 0x02, 0x10]);
    assert_eq!(bits.count_dirty(), 3);
    assert!(bits.clear(9));
    assert!(!bits.test(9));
    assert!(bits.test(20));
    assert_eq!(bits.count_dirty(), 2);

    let full = BitmapBits::new_set(21).unwrap();
    assert_eq!(full.count_dirty(), 21);
    assert_eq!(full.as_bytes(), &[0xff, 0xff, 0x1f]);
    let back = BitmapBits::from_bytes(21, &[0xff, 0xff, 0xff, 0xff]).unwrap();
    assert_eq!(back.count_dirty(), 21, "bits past the end are not counted");
    assert!(BitmapBits::from_bytes(21, &[0, 0]).is_err());
    assert_eq!(BitmapBits::bit_for_sector(131_072 * 3 + 5, 64 << 20), 3);
}

#[test]
fn badblock_log_encoding() {
    let entries = [
        BadBlock {
            sector: 8,
            len_sectors: 8,
        },
        BadBlock {
            sector: 1 << 40,
            len_sectors: 512,
        },
    ];
    let page = badblocks::encode(&entries, 0, 8).unwrap();
    assert_eq!(page.len(), 4096);
    let e0 = u64::from_le_bytes(page[0..8].try_into().unwrap());
    assert_eq!(e0, (8 << 10) | 8);
    let e1 = u64::from_le_bytes(page[8..16].try_into().unwrap());
    assert_eq!(e1, (1 << 50) | 512);
    assert!(page[16..].iter().all(|&b| b == 0xff));
    assert_eq!(badblocks::decode(&page, 0).unwrap(), entries);

    // Shift 3: units of 8 sectors.
    let page = badblocks::encode(
        &[BadBlock {
            sector: 64,
            len_sectors: 16,
        }],
        3,
        1,
    )
    .unwrap();
    assert_eq!(
        u64::from_le_bytes(page[0..8].try_into().unwrap()),
        (8 << 10) | 2
    );
    assert_eq!(
        badblocks::decode(&page, 3).unwrap(),
        [BadBlock {
            sector: 64,
            len_sectors: 16
        }]
    );

    // Zero entries are skipped; all-ones terminates.
    let mut raw = Vec::new();
    raw.extend_from_slice(&0u64.to_le_bytes());
    raw.extend_from_slice(&((5u64 << 10) | 1).to_le_bytes());
    raw.extend_from_slice(&u64::MAX.to_le_bytes());
    raw.extend_from_slice(&((9u64 << 10) | 1).to_le_bytes());
    assert_eq!(
        badblocks::decode(&raw, 0).unwrap(),
        [BadBlock {
            sector: 5,
            len_sectors: 1
        }]
    );
}

#[test]
fn badblock_log_refusals() {
    assert!(matches!(
        badblocks::encode(
            &[BadBlock {
                sector: 1,
                len_sectors: 8
            }],
            3,
            8
        ),
        Err(MetadataError::BadBlockEntry { index: 0, .. })
    ));
    assert!(matches!(
        badblocks::encode(
            &[BadBlock {
                sector: 0,
                len_sectors: 513
            }],
            0,
            8
        ),
        Err(MetadataError::BadBlockEntry { .. })
    ));
    assert!(matches!(
        badblocks::encode(
            &[BadBlock {
                sector: 0,
                len_sectors: 0
            }],
            0,
            8
        ),
        Err(MetadataError::BadBlockEntry { .. })
    ));
    assert!(matches!(
        badblocks::encode(
            &[BadBlock {
                sector: 1 << 60,
                len_sectors: 1
            }],
            0,
            8
        ),
        Err(MetadataError::BadBlockEntry { .. })
    ));
    let many = vec![
        BadBlock {
            sector: 0,
            len_sectors: 1
        };
        65
    ];
    assert_eq!(
        badblocks::encode(&many, 0, 1),
        Err(MetadataError::BadBlockLogFull {
            entries: 65,
            capacity: 64
        })
    );
    assert!(badblocks::encode(&many[..64], 0, 1).is_ok());
    assert!(badblocks::encode(&[], 0, 9).is_err());
    assert!(badblocks::decode(&[0u8; 7], 0).is_err());
    assert!(badblocks::decode(&[0u8; 4104], 0).is_err());
    // A sector that overflows after the shift.
    let raw = ((u64::MAX >> 10) << 10 | 1).to_le_bytes();
    assert!(badblocks::decode(&raw, 20).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn badblock_round_trip(
        shift in 0u8..8,
        raw in proptest::collection::vec((0u64..(1 << 40), 1u64..=512), 0..=512),
    ) {
        let entries: Vec<BadBlock> = raw
            .iter()
            .map(|&(s, l)| BadBlock { sector: s << shift, len_sectors: l << shift })
            .collect();
        let page = badblocks::encode(&entries, shift, 8).unwrap();
        prop_assert_eq!(badblocks::decode(&page, shift).unwrap(), entries);
    }

    #[test]
    fn badblock_decode_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..4200), shift in any::<u8>()) {
        let _ = badblocks::decode(&raw, shift);
    }

    #[test]
    fn bitmap_super_decode_never_panics_and_round_trips(raw in proptest::collection::vec(any::<u8>(), 0..300), fix_magic in any::<bool>()) {
        let mut raw = raw;
        if fix_magic && raw.len() >= 8 {
            raw[0..4].copy_from_slice(b"bitm");
            raw[4] = 4; raw[5] = 0; raw[6] = 0; raw[7] = 0;
        }
        if let Ok(b) = BitmapSuper::decode(&raw) {
            prop_assert_eq!(&b.encode()[..], &raw[..256]);
        }
    }
}

#[test]
fn examine_report_serializes() {
    let dl = DataLayout::mdadm_default(SuperblockVersion::V1_2, 40960, 1024, false).unwrap();
    let sb = Superblock::new_member(&NewMember {
        set_uuid: Uuid([0x10; 16]),
        device_uuid: Uuid([0x20; 16]),
        set_name: SetName::new("box:data"),
        ctime: MdTime::new(0, 0),
        level: Level::Raid5,
        layout: 2,
        chunk_sectors: 1024,
        raid_disks: 3,
        max_dev: 128,
        dev_number: 0,
        role: DevRole::Active(0),
        roles: vec![(1, DevRole::Active(1))],
        size_sectors: dl.size_sectors,
        data_offset_sectors: dl.data_offset_sectors,
        data_size_sectors: dl.data_size_sectors,
        super_offset_sectors: dl.super_offset_sectors,
        bitmap_offset: None,
        bblog: Some((dl.bblog_offset, dl.bblog_size_sectors)),
        events: 3,
        clean: false,
    })
    .unwrap();
    let r = ExamineReport::from_superblock(&sb, Some(40960), None);
    assert_eq!(r.array_state, "AA.");
    assert_eq!(r.state, "active");
    assert_eq!(r.layout.as_deref(), Some("left-symmetric"));
    assert_eq!(r.chunk_size_kib, Some(512));
    assert_eq!(r.array_size_kib, Some(dl.size_sectors / 2 * 2));
    assert_eq!(r.creation_time, "Thu Jan  1 00:00:00 1970");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["raid_level"], "raid5");
    assert_eq!(json["data_offset_sectors"], 4096);
    assert_eq!(json["array_uuid"], "10101010:10101010:10101010:10101010");
    let text = r.to_text();
    assert!(text.contains("     Raid Level : raid5\n"), "{text}");
    assert!(
        text.contains("   Device Role : Active device 0\n"),
        "{text}"
    );
}

#[test]
fn hostile_bitmap_sizes_are_refused() {
    // A decoded bitmap superblock can claim any sync size; allocating for it must be bounded.
    let mut b = bms();
    b.sync_size_sectors = u64::MAX;
    b.chunk_bytes = 512;
    assert!(BitmapBits::new_clear(b.bits()).is_err());
    assert!(BitmapBits::new_set(u64::MAX).is_err());
    assert!(BitmapBits::from_bytes(u64::MAX, &[0; 8]).is_err());
    let _ = b.space_sectors();
}
