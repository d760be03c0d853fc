//! Superblocks and bitmaps written by the real mdadm and Linux md (fixtures in
//! tests/fixtures/md-written, see its README.md): every one must decode, re-encode to the very
//! bytes md wrote, sit exactly where `DataLayout` says mdadm puts things, and be reported by our
//! examine report the way `mdadm --examine` reports it.

use raidkit_metadata::data_layout::CreateShape;
use raidkit_metadata::{
    BitmapSuper, DataLayout, DevFlags, DevRole, ExamineReport, FeatureMap, Level, Location,
    Superblock, SuperblockVersion,
};
use std::path::PathBuf;
use std::process::Command;

struct Fixture {
    name: String,
    version: SuperblockVersion,
    device_sectors: u64,
    shape: CreateShape,
    ppl: bool,
    sb_bytes: Vec<u8>,
    bitmap_bytes: Option<Vec<u8>>,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/md-written")
}

fn fixtures() -> Vec<Fixture> {
    let manifest = std::fs::read_to_string(dir().join("manifest.txt")).unwrap();
    let mut out = Vec::new();
    for line in manifest
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        let version = match f[1] {
            "1.0" => SuperblockVersion::V1_0,
            "1.1" => SuperblockVersion::V1_1,
            _ => SuperblockVersion::V1_2,
        };
        let num = |i: usize| f[i].parse::<u64>().unwrap();
        let device_sectors = num(2);
        let shape = CreateShape {
            version,
            device_sectors,
            level: Level::from_md(f[3].parse().unwrap()),
            layout: num(4) as u32,
            raid_disks: num(5) as u32,
            chunk_sectors: num(6) as u32,
            with_bitmap: num(7) == 1,
        };
        let name = f[0].to_string();
        let sb_bytes = std::fs::read(dir().join(format!("{name}.sb"))).unwrap();
        let bitmap_bytes = std::fs::read(dir().join(format!("{name}.bitmap"))).ok();
        out.push(Fixture {
            name,
            version,
            device_sectors,
            shape,
            ppl: num(8) == 1,
            sb_bytes,
            bitmap_bytes,
        });
    }
    assert!(out.len() >= 17, "fixtures missing");
    out
}

#[test]
fn md_written_superblocks_decode_and_reencode_exactly() {
    for fx in fixtures() {
        let loc = Location::new(fx.version, fx.device_sectors);
        let sb = Superblock::decode(&fx.sb_bytes, loc)
            .unwrap_or_else(|e| panic!("{}: md-written superblock refused: {e}", fx.name));
        let enc = sb.encode();
        assert_eq!(
            &enc[..],
            &fx.sb_bytes[..enc.len()],
            "{}: re-encoding differs",
            fx.name
        );
        assert_eq!(
            sb.super_offset_sectors,
            loc.superblock_sector(),
            "{}",
            fx.name
        );
        assert_eq!(sb.level, fx.shape.level, "{}", fx.name);
        assert_eq!(sb.raid_disks, fx.shape.raid_disks, "{}", fx.name);
        assert_eq!(sb.chunk_sectors, fx.shape.chunk_sectors, "{}", fx.name);
        // Any single flipped bit in the checksummed range is caught.
        for byte in [0x10usize, 0x88, 0xc8, 0x100] {
            let mut bad = fx.sb_bytes.clone();
            bad[byte] ^= 0x40;
            assert!(
                Superblock::decode(&bad, loc).is_err(),
                "{}: flip at {byte}",
                fx.name
            );
        }
        // Read at the wrong placement, it is refused.
        for other in SuperblockVersion::ALL
            .into_iter()
            .filter(|v| *v != fx.version)
        {
            assert!(
                Superblock::decode(&fx.sb_bytes, Location::new(other, fx.device_sectors)).is_err()
            );
        }
    }
}

#[test]
fn md_written_layouts_match_mdadm_rules() {
    for fx in fixtures() {
        let loc = Location::new(fx.version, fx.device_sectors);
        let sb = Superblock::decode(&fx.sb_bytes, loc).unwrap();
        let dl = if fx.ppl {
            DataLayout::mdadm_create_ppl(&fx.shape)
        } else {
            DataLayout::mdadm_create(&fx.shape)
        }
        .unwrap();
        let n = &fx.name;
        assert_eq!(
            dl.super_offset_sectors, sb.super_offset_sectors,
            "{n} super_offset"
        );
        assert_eq!(
            dl.data_offset_sectors, sb.data_offset_sectors,
            "{n} data_offset"
        );
        assert_eq!(dl.data_size_sectors, sb.data_size_sectors, "{n} data_size");
        assert_eq!(dl.size_sectors, sb.size_sectors, "{n} size");
        assert_eq!(
            dl.bitmap.map(|b| b.offset_sectors),
            sb.bitmap_offset(),
            "{n} bitmap_offset"
        );
        assert_eq!(dl.ppl, sb.ppl(), "{n} ppl");
        assert_eq!(
            (dl.bblog_offset, dl.bblog_size_sectors),
            (sb.bblog_offset, sb.bblog_size_sectors),
            "{n} bblog"
        );
        if let (Some(bp), Some(raw)) = (dl.bitmap, &fx.bitmap_bytes) {
            let bms = BitmapSuper::decode(raw).unwrap();
            assert_eq!(&bms.encode()[..], &raw[..256], "{n} bitmap re-encoding");
            assert_eq!(
                u64::from(bms.chunk_bytes),
                bp.chunk_bytes,
                "{n} bitmap chunk"
            );
            assert_eq!(
                bms.sync_size_sectors, bp.sync_size_sectors,
                "{n} bitmap sync_size"
            );
            assert_eq!(bms.space_sectors(), bp.space_sectors, "{n} bitmap space");
            assert_eq!(bms.uuid, sb.set_uuid, "{n} bitmap uuid");
        }
    }
}

#[test]
fn md_written_states() {
    let all = fixtures();
    let get = |name: &str| {
        let fx = all.iter().find(|f| f.name == name).unwrap();
        Superblock::decode(&fx.sb_bytes, Location::new(fx.version, fx.device_sectors)).unwrap()
    };
    // A spare added at create time.
    assert_eq!(get("v12_r5_spare_3").role(), DevRole::Spare);
    // Created degraded with "missing", a write-mostly member, a member added later.
    let wm = get("v12_r1_deg_wm_1");
    assert_eq!(wm.devflags, DevFlags(DevFlags::WRITE_MOSTLY));
    assert!(wm.events > 1);
    // A RAID6 member failed while the array was written: the survivors record it as faulty
    // and newer events; the failed member kept its older, dirty view.
    let live = get("v12_r6_dirty_0");
    let failed = get("v12_r6_dirty_3");
    assert_eq!(live.role_of(3), DevRole::Faulty);
    assert_eq!(failed.role(), DevRole::Active(3));
    assert!(live.events > failed.events);
    assert!(live.is_clean());
    assert!(!failed.is_clean());
    // PPL lives in the bitmap_offset union.
    let ppl = get("v12_r5_ppl_0");
    assert!(ppl.feature_map.contains(FeatureMap::PPL));
    assert_eq!(ppl.bitmap_offset(), None);
    // mdadm 4.2 records raid0 layout 1 (original) without the RAID0_LAYOUT bit on
    // equal-sized members.
    let r0 = get("v12_r0_odd_c32_2");
    assert_eq!(
        (r0.layout, r0.feature_map.contains(FeatureMap::RAID0_LAYOUT)),
        (1, false)
    );
    assert_eq!(r0.size_sectors, 0);
}

/// Our examine report on md-written members agrees with `mdadm --examine`, line for line.
#[test]
fn examine_report_matches_mdadm_on_md_written_members() {
    if std::env::var("RAIDKIT_SKIP_MDADM").as_deref() == Ok("1") {
        return;
    }
    assert!(
        Command::new("mdadm").arg("--version").output().is_ok(),
        "mdadm is not installed: install it with `apt-get install -y mdadm` \
         (or set RAIDKIT_SKIP_MDADM=1 to skip the golden tests)"
    );
    for fx in fixtures() {
        let path = std::env::temp_dir().join(format!(
            "raidkit-metadata-mdw-{}-{}.img",
            std::process::id(),
            fx.name
        ));
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(fx.device_sectors * 512).unwrap();
        let loc = Location::new(fx.version, fx.device_sectors);
        let sb = Superblock::decode(&fx.sb_bytes, loc).unwrap();
        use std::os::unix::fs::FileExt;
        file.write_all_at(&fx.sb_bytes, loc.superblock_byte_offset())
            .unwrap();
        let bms = fx.bitmap_bytes.as_ref().map(|raw| {
            let at = sb
                .super_offset_sectors
                .wrapping_add_signed(i64::from(sb.bitmap_offset))
                * 512;
            file.write_all_at(raw, at).unwrap();
            BitmapSuper::decode(raw).unwrap()
        });
        drop(file);
        let out = Command::new("mdadm")
            .arg("--examine")
            .arg(&path)
            .env("TZ", "UTC")
            .output();
        let _ = std::fs::remove_file(&path);
        let out = out.unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{}: mdadm --examine failed", fx.name);
        let ours = ExamineReport::from_superblock(&sb, Some(fx.device_sectors), bms.as_ref());
        for l in ours
            .to_text()
            .lines()
            .filter(|l| !l.trim().starts_with(':'))
        {
            assert!(
                text.lines().any(|t| t.starts_with(l)),
                "{}: our line '{l}' is not in mdadm's output:\n{text}",
                fx.name
            );
        }
        // And every field mdadm prints (but the host-specific ones) is in ours.
        let our_text = ours.to_text();
        for t in text.lines().filter(|t| t.contains(" : ")) {
            let key = t.split(" : ").next().unwrap().trim();
            assert!(
                our_text
                    .lines()
                    .any(|l| l.split(" : ").next().unwrap().trim() == key),
                "{}: mdadm prints '{key}' and we do not:\n{text}",
                fx.name
            );
        }
    }
}

/// Bad-block logs the kernel wrote decode to the ranges given to sysfs, and our encoder
/// reproduces the page byte for byte.
#[test]
fn md_written_bad_block_logs() {
    use raidkit_metadata::badblocks;
    use raidkit_metadata::BadBlock;
    let all = fixtures();
    for (name, want) in [
        (
            "bb12_1",
            vec![
                BadBlock {
                    sector: 1000,
                    len_sectors: 8,
                },
                BadBlock {
                    sector: 5000,
                    len_sectors: 3,
                },
            ],
        ),
        (
            "bb10_0",
            vec![BadBlock {
                sector: 20000,
                len_sectors: 16,
            }],
        ),
    ] {
        let fx = all.iter().find(|f| f.name == name).unwrap();
        let sb =
            Superblock::decode(&fx.sb_bytes, Location::new(fx.version, fx.device_sectors)).unwrap();
        assert!(sb.feature_map.contains(FeatureMap::BAD_BLOCKS), "{name}");
        let raw = std::fs::read(dir().join(format!("{name}.bblog"))).unwrap();
        assert_eq!(raw.len(), usize::from(sb.bblog_size_sectors) * 512);
        let got = badblocks::decode(&raw, sb.bblog_shift).unwrap();
        assert_eq!(got, want, "{name}");
        let page = badblocks::encode(&got, sb.bblog_shift, sb.bblog_size_sectors).unwrap();
        assert_eq!(page, raw, "{name}: our log page differs from the kernel's");
    }
}

/// A recovery interrupted by a stop leaves RECOVERY_OFFSET and the checkpoint on the new
/// member.
#[test]
fn md_written_recovery_checkpoint() {
    let all = fixtures();
    let fx = all.iter().find(|f| f.name == "rec12_1").unwrap();
    let sb =
        Superblock::decode(&fx.sb_bytes, Location::new(fx.version, fx.device_sectors)).unwrap();
    let rec = sb.recovery_offset().expect("RECOVERY_OFFSET set");
    assert!(rec > 0 && rec < sb.size_sectors, "{rec}");
    assert_eq!(sb.role(), DevRole::Active(1));
    // Setting the same checkpoint on a copy reproduces the kernel's bytes.
    let mut copy = sb.clone();
    copy.clear_recovery_offset();
    assert_ne!(copy.encode(), sb.encode());
    copy.set_recovery_offset(rec);
    assert_eq!(copy.encode(), sb.encode());
}

/// `examine_bytes` reads what decode refuses, and says why, with mdadm's checksum wording.
#[test]
fn examine_bytes_reports_problems() {
    let all = fixtures();
    let fx = all.iter().find(|f| f.name == "v12_r5_20000_1").unwrap();
    let loc = Location::new(fx.version, fx.device_sectors);
    let mut bytes = fx.sb_bytes.clone();
    bytes[0xc8] ^= 1; // events, checksum not updated
    bytes[0x08] |= 0x80; // RECOVERY_BITMAP, fine; plus an unknown bit
    bytes[0x0a] |= 0x01;
    let ex = Superblock::examine_bytes(&bytes, Some(loc)).unwrap();
    assert_eq!(ex.problems.len(), 2, "{:?}", ex.problems);
    assert!(matches!(
        ex.problems[0],
        raidkit_metadata::MetadataError::ChecksumMismatch { .. }
    ));
    assert!(matches!(
        ex.problems[1],
        raidkit_metadata::MetadataError::UnknownFeatureBits { .. }
    ));
    let r = ExamineReport::from_examined(&ex, Some(fx.device_sectors), None);
    assert!(!r.checksum_correct);
    let text = r.to_text();
    let line = text.lines().find(|l| l.contains("Checksum")).unwrap();
    assert_eq!(
        line,
        format!(
            "       Checksum : {:x} - expected {:x}",
            ex.stored_checksum, ex.computed_checksum
        )
    );
    // A valid superblock examines clean and matches the strict decode.
    let ex = Superblock::examine_bytes(&fx.sb_bytes, Some(loc)).unwrap();
    assert!(ex.problems.is_empty());
    assert_eq!(
        ex.superblock,
        Superblock::decode(&fx.sb_bytes, loc).unwrap()
    );
    // Not a superblock at all: still an error.
    assert!(Superblock::examine_bytes(&[0u8; 512], None).is_err());
}

/// Assembly helpers agree with what md did: the survivors of the RAID6 failure are fresher
/// than the failed member, spares never win, and members of other arrays are told apart.
#[test]
fn freshest_and_same_array() {
    let all = fixtures();
    let get = |name: &str| {
        let fx = all.iter().find(|f| f.name == name).unwrap();
        Superblock::decode(&fx.sb_bytes, Location::new(fx.version, fx.device_sectors)).unwrap()
    };
    let failed = get("v12_r6_dirty_3");
    let live = get("v12_r6_dirty_0");
    assert!(failed.same_array_as(&live));
    assert_eq!(
        Superblock::freshest(&[failed.clone(), live.clone()]),
        Some(1)
    );
    assert_eq!(
        Superblock::freshest(&[live.clone(), failed.clone()]),
        Some(0)
    );
    let spare = get("v12_r5_spare_3");
    assert!(!spare.holds_a_slot());
    assert_eq!(Superblock::freshest(std::slice::from_ref(&spare)), None);
    assert!(!spare.same_array_as(&live));
    let member = get("v12_r5_20000_1");
    assert!(
        !member.same_array_as(&get("v12_r5_spare_3")),
        "different set_uuid"
    );
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Damaged md-written superblocks never panic the diagnostic path (examine_bytes,
        /// the report, its text and JSON).
        #[test]
        fn examine_never_panics(
            idx in 0usize..20,
            edits in proptest::collection::vec((0usize..512, any::<u8>()), 1..12),
            dev in proptest::option::of(any::<u64>()),
            fields in proptest::collection::vec(
                (prop::sample::select(vec![0x50usize, 0x58, 0x5c, 0x60, 0x68, 0x70, 0x7c,
                    0x80, 0x88, 0x90, 0x98, 0xa0, 0xbc, 0xc8, 0xd0]),
                 prop_oneof![Just(u64::MAX), Just(1u64 << 63), Just(0), any::<u64>()]),
                0..6),
        ) {
            let all = fixtures();
            let fx = &all[idx % all.len()];
            let mut bytes = fx.sb_bytes.clone();
            for (pos, val) in edits {
                let len = bytes.len();
                bytes[pos % len] = val;
            }
            for (off, val) in fields {
                let len = bytes.len();
                if off + 8 <= len {
                    bytes[off..off + 8].copy_from_slice(&val.to_le_bytes());
                }
            }
            let loc = dev.map(|d| Location::new(fx.version, d));
            if let Ok(ex) = Superblock::examine_bytes(&bytes, loc) {
                let r = ExamineReport::from_examined(&ex, dev, None);
                let _ = r.to_text();
                let _ = serde_json::to_string(&r).unwrap();
            }
        }
    }
}
