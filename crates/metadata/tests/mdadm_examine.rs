//! Golden tests against the real mdadm: superblocks (and bitmaps) built by this crate are
//! written into sparse member image files and read back with `mdadm --examine` and
//! `mdadm --examine-bitmap`, which work on plain files without kernel md.
//!
//! mdadm must be installed (`apt-get install -y mdadm`; scripts/test does it). Without it these
//! tests fail, unless RAIDKIT_SKIP_MDADM=1 is set.

use raidkit_metadata::bitmap::{BitmapBits, BitmapSuper};
use raidkit_metadata::data_layout::DEFAULT_BITMAP_DELAY_SECS;
use raidkit_metadata::{
    mdadm_max_dev, DataLayout, DevRole, ExamineReport, Level, Location, MdTime, NewMember, SetName,
    Superblock, SuperblockVersion, Uuid,
};
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

const MIB_SECTORS: u64 = 2048;

fn mdadm_available() -> bool {
    if std::env::var("RAIDKIT_SKIP_MDADM").as_deref() == Ok("1") {
        return false;
    }
    let found = Command::new("mdadm").arg("--version").output().is_ok();
    assert!(
        found,
        "mdadm is not installed: install it with `apt-get install -y mdadm` \
         (or set RAIDKIT_SKIP_MDADM=1 to skip the golden tests)"
    );
    true
}

struct TempImage(PathBuf);

impl TempImage {
    fn new(tag: &str, device_sectors: u64) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!(
            "raidkit-metadata-{}-{tag}-{n}.img",
            std::process::id()
        ));
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .unwrap();
        f.set_len(device_sectors * 512).unwrap();
        TempImage(path)
    }

    fn write_at(&self, sector: u64, bytes: &[u8]) {
        let mut f = OpenOptions::new().write(true).open(&self.0).unwrap();
        f.seek(SeekFrom::Start(sector * 512)).unwrap();
        f.write_all(bytes).unwrap();
    }
}

impl Drop for TempImage {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn run_mdadm(args: &[&str], path: &Path) -> (bool, String) {
    let out = Command::new("mdadm")
        .args(args)
        .arg(path)
        .env("TZ", "UTC")
        .output()
        .expect("running mdadm");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// "Name : value" lines of mdadm's output (human_size suffixes kept in the value).
fn fields(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(" : ")?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

struct Built {
    sb: Superblock,
    layout: DataLayout,
}

fn build(
    version: SuperblockVersion,
    level: Level,
    raid_disks: u32,
    dev: u32,
    bitmap: bool,
) -> Built {
    let device_sectors = 20 * MIB_SECTORS;
    let chunk = if level == Level::Raid1 { 0 } else { 1024 };
    let layout_word = match level {
        Level::Raid5 | Level::Raid6 => 2,
        Level::Raid10 => 0x102,
        _ => 0,
    };
    let dl = DataLayout::mdadm_create(&raidkit_metadata::CreateShape {
        version,
        device_sectors,
        level,
        layout: layout_word,
        raid_disks,
        chunk_sectors: chunk,
        with_bitmap: bitmap,
    })
    .unwrap();
    let roles: Vec<(u32, DevRole)> = (0..raid_disks)
        .map(|d| (d, DevRole::Active(d as u16)))
        .collect();
    let sb = Superblock::new_member(&NewMember {
        set_uuid: Uuid([
            0x3e, 0x1f, 0x9a, 0x22, 0x51, 0x07, 0xc4, 0x8d, 0x90, 0x11, 0x2b, 0x6e, 0xa7, 0x44,
            0x08, 0xf3,
        ]),
        device_uuid: Uuid([dev as u8 + 1; 16]),
        set_name: SetName::with_homehost("raidkit", "golden"),
        ctime: MdTime::new(1_790_000_000, 0),
        level,
        layout: layout_word,
        chunk_sectors: chunk,
        raid_disks,
        max_dev: mdadm_max_dev(raid_disks),
        dev_number: dev,
        role: DevRole::Active(dev as u16),
        roles,
        size_sectors: dl.size_sectors,
        data_offset_sectors: dl.data_offset_sectors,
        data_size_sectors: dl.data_size_sectors,
        super_offset_sectors: dl.super_offset_sectors,
        bitmap_offset: dl.bitmap.map(|b| b.offset_sectors),
        bblog: (dl.bblog_size_sectors != 0).then_some((dl.bblog_offset, dl.bblog_size_sectors)),
        events: 7,
        clean: true,
    })
    .unwrap();
    Built { sb, layout: dl }
}

fn write_member(img: &TempImage, b: &Built) -> Option<(BitmapSuper, u64)> {
    img.write_at(b.sb.super_offset_sectors, &b.sb.encode_padded(4096));
    let bp = b.layout.bitmap?;
    let mut bms = BitmapSuper::new_internal(
        b.sb.set_uuid,
        bp.sync_size_sectors,
        bp.chunk_bytes as u32,
        DEFAULT_BITMAP_DELAY_SECS,
    );
    bms.events = b.sb.events;
    bms.events_cleared = b.sb.events;
    let mut bits = BitmapBits::new_clear(bms.bits()).unwrap();
    bits.set(0);
    bits.set(bms.bits() - 1);
    let mut area = bms.encode().to_vec();
    area.extend_from_slice(bits.as_bytes());
    let sector =
        b.sb.super_offset_sectors
            .wrapping_add_signed(i64::from(bp.offset_sectors));
    img.write_at(sector, &area);
    Some((bms, bits.count_dirty()))
}

/// `mdadm --examine-bitmap` of the member's internal bitmap. mdadm only looks for an internal
/// bitmap on block devices (a regular file is taken to be an external bitmap file), so the
/// image is attached read-only to a loop device when possible; otherwise the bitmap area is
/// copied into a bitmap file of its own, which mdadm reads the same way.
fn examine_bitmap(img: &TempImage, b: &Built) -> String {
    let loop_dev = Command::new("losetup")
        .args(["--find", "--show", "--read-only"])
        .arg(&img.0)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|d| !d.is_empty());
    if let Some(dev) = loop_dev {
        let (ok, text) = run_mdadm(&["--examine-bitmap"], Path::new(&dev));
        let _ = Command::new("losetup").arg("-d").arg(&dev).status();
        assert!(ok, "mdadm -X {dev} failed:\n{text}");
        return text;
    }
    let bp = b.layout.bitmap.unwrap();
    let start =
        b.sb.super_offset_sectors
            .wrapping_add_signed(i64::from(bp.offset_sectors));
    let all = std::fs::read(&img.0).unwrap();
    let area = &all[(start * 512) as usize..((start + bp.space_sectors) * 512) as usize];
    let file = TempImage::new("bitmapfile", bp.space_sectors);
    file.write_at(0, area);
    let (ok, text) = run_mdadm(&["--examine-bitmap"], &file.0);
    assert!(ok, "mdadm -X (bitmap file) failed:\n{text}");
    text
}

fn check_examine(
    version: SuperblockVersion,
    level: Level,
    raid_disks: u32,
    dev: u32,
    bitmap: bool,
) {
    if !mdadm_available() {
        return;
    }
    let b = build(version, level, raid_disks, dev, bitmap);
    let img = TempImage::new(version.name(), b.layout.device_sectors);
    let written = write_member(&img, &b);
    let bms = written.as_ref().map(|w| w.0.clone());
    let (ok, text) = run_mdadm(&["--examine"], &img.0);
    assert!(ok, "mdadm --examine failed:\n{text}");
    if std::env::var("RAIDKIT_SHOW").is_ok() {
        eprintln!("{text}");
    }
    let f = fields(&text);
    let get = |k: &str| {
        f.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("no '{k}' in:\n{text}"))
    };

    assert!(
        get("Checksum").ends_with("- correct"),
        "checksum not correct:\n{text}"
    );
    assert_eq!(get("Version"), version.name());
    assert_eq!(get("Array UUID"), b.sb.set_uuid.to_mdadm_string());
    assert_eq!(get("Device UUID"), b.sb.device_uuid.to_mdadm_string());
    assert_eq!(
        get("Name").split_whitespace().next().unwrap(),
        "raidkit:golden"
    );
    assert_eq!(get("Raid Level"), level.mdadm_name().unwrap());
    assert_eq!(get("Raid Devices"), raid_disks.to_string());
    assert_eq!(get("Events"), "7");
    assert_eq!(get("State"), "clean");
    assert_eq!(
        get("Super Offset"),
        format!("{} sectors", b.layout.super_offset_sectors)
    );
    assert_eq!(get("Device Role"), format!("Active device {dev}"));
    assert_eq!(
        get("Array State").split_whitespace().next().unwrap(),
        "A".repeat(raid_disks as usize)
    );
    if b.layout.data_offset_sectors != 0 {
        assert_eq!(
            get("Data Offset"),
            format!("{} sectors", b.layout.data_offset_sectors)
        );
    }
    assert!(get("Avail Dev Size").starts_with(&format!("{} sectors", b.layout.data_size_sectors)));
    match level {
        Level::Raid5 | Level::Raid6 => {
            assert_eq!(get("Layout"), "left-symmetric");
            assert_eq!(get("Chunk Size"), "512K");
        }
        Level::Raid10 => {
            assert_eq!(get("Layout"), "near=2");
            assert_eq!(get("Chunk Size"), "512K");
        }
        _ => {}
    }
    if let Some(bp) = b.layout.bitmap {
        assert_eq!(
            get("Internal Bitmap"),
            format!("{} sectors from superblock", bp.offset_sectors)
        );
    }
    if b.layout.bblog_size_sectors != 0 {
        assert!(get("Bad Block Log").starts_with(&format!(
            "512 entries available at offset {} sectors",
            b.layout.bblog_offset
        )));
    }

    // Our own report must agree with mdadm on every field both print, down to the layout of
    // the line (mdadm may append a human-readable size or a note).
    let our_text =
        ExamineReport::from_superblock(&b.sb, Some(b.layout.device_sectors), bms.as_ref())
            .to_text();
    for l in our_text.lines().filter(|l| !l.trim().starts_with(':')) {
        assert!(
            text.lines().any(|t| t.starts_with(l)),
            "our line '{l}' is not in mdadm's output:\n{text}"
        );
    }
    let ours = fields(&our_text);
    for (k, v) in &ours {
        if k.is_empty() {
            continue;
        }
        let theirs = f
            .get(k)
            .unwrap_or_else(|| panic!("mdadm did not print '{k}':\n{text}"));
        // mdadm appends human-readable sizes and "(local to host ...)" notes; compare the
        // leading part, which is the value itself.
        assert!(
            theirs.starts_with(v.as_str()),
            "field '{k}': ours '{v}', mdadm '{theirs}'\n{text}"
        );
    }

    if let Some((bms, dirty)) = written {
        let text = examine_bitmap(&img, &b);
        let f = fields(&text);
        let get = |k: &str| {
            f.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("no '{k}' in:\n{text}"))
        };
        assert_eq!(get("Magic"), "6d746962");
        assert_eq!(get("Version"), "4");
        assert_eq!(get("Events"), "7");
        assert_eq!(get("Events Cleared"), "7");
        assert_eq!(get("Chunksize"), "64 MB");
        assert!(get("Sync Size").starts_with(&(bms.sync_size_sectors / 2).to_string()));
        let uuid = get("UUID").replace(':', "");
        assert_eq!(uuid, b.sb.set_uuid.to_mdadm_string().replace(':', ""));
        assert_eq!(
            get("Bitmap").split(" dirty").next().unwrap(),
            format!("{} bits (chunks), {dirty}", bms.bits())
        );
    }
}

#[test]
fn mdadm_examines_v1_2_raid5() {
    check_examine(SuperblockVersion::V1_2, Level::Raid5, 3, 1, false);
}

#[test]
fn mdadm_examines_v1_2_raid6_member_3() {
    check_examine(SuperblockVersion::V1_2, Level::Raid6, 5, 3, false);
}

#[test]
fn mdadm_examines_v1_1_raid10() {
    check_examine(SuperblockVersion::V1_1, Level::Raid10, 4, 2, false);
}

#[test]
fn mdadm_examines_v1_0_raid1() {
    check_examine(SuperblockVersion::V1_0, Level::Raid1, 2, 0, false);
}

#[test]
fn mdadm_examines_v1_2_with_bitmap() {
    check_examine(SuperblockVersion::V1_2, Level::Raid5, 4, 0, true);
}

#[test]
fn mdadm_examines_v1_1_with_bitmap() {
    check_examine(SuperblockVersion::V1_1, Level::Raid1, 2, 1, true);
}

#[test]
fn mdadm_examines_v1_0_with_bitmap() {
    check_examine(SuperblockVersion::V1_0, Level::Raid6, 4, 2, true);
}

/// A corrupted checksum must be reported by mdadm too (so the golden test can fail).
#[test]
fn mdadm_flags_a_corrupted_checksum() {
    if !mdadm_available() {
        return;
    }
    let b = build(SuperblockVersion::V1_2, Level::Raid5, 3, 0, false);
    let img = TempImage::new("badcsum", b.layout.device_sectors);
    let mut bytes = b.sb.encode_padded(4096);
    bytes[0xd8] ^= 0x01;
    img.write_at(b.sb.super_offset_sectors, &bytes);
    let (_, text) = run_mdadm(&["--examine"], &img.0);
    assert!(
        text.contains("expected"),
        "mdadm should report a wrong checksum:\n{text}"
    );
    // And our decoder refuses the same bytes, while the diagnostic report words the checksum
    // line exactly as mdadm does.
    let loc = Location::new(SuperblockVersion::V1_2, b.layout.device_sectors);
    assert!(Superblock::decode(&bytes, loc).is_err());
    let ex = Superblock::examine_bytes(&bytes, Some(loc)).unwrap();
    let ours = ExamineReport::from_examined(&ex, Some(b.layout.device_sectors), None).to_text();
    let line = ours.lines().find(|l| l.contains("Checksum")).unwrap();
    assert!(text.lines().any(|t| t == line), "'{line}' not in:\n{text}");
}

/// Reading back: what mdadm accepted decodes to the value we built.
#[test]
fn image_round_trips_through_decode() {
    for version in SuperblockVersion::ALL {
        let b = build(version, Level::Raid5, 3, 2, true);
        let loc = Location::new(version, b.layout.device_sectors);
        let bytes = b.sb.encode_padded(4096);
        let back = Superblock::decode(&bytes, loc).unwrap();
        assert_eq!(back, b.sb);
    }
}

/// A bad-block log we encode is listed by `mdadm --examine-badblocks`, entry for entry.
#[test]
fn mdadm_lists_our_bad_block_log() {
    use raidkit_metadata::badblocks;
    use raidkit_metadata::{BadBlock, FeatureMap};
    if !mdadm_available() {
        return;
    }
    for (version, shift) in [
        (SuperblockVersion::V1_2, 0u8),
        (SuperblockVersion::V1_1, 3),
        (SuperblockVersion::V1_0, 0),
    ] {
        let mut b = build(version, Level::Raid5, 3, 0, false);
        let unit = 1u64 << shift;
        let entries = [
            BadBlock {
                sector: 4096 * unit,
                len_sectors: 8 * unit,
            },
            BadBlock {
                sector: 12_345 * unit,
                len_sectors: unit,
            },
            BadBlock {
                sector: 30_000 * unit,
                len_sectors: 512 * unit,
            },
        ];
        b.sb.feature_map.insert(FeatureMap::BAD_BLOCKS);
        b.sb.bblog_shift = shift;
        let log = badblocks::encode(&entries, shift, b.sb.bblog_size_sectors).unwrap();
        let img = TempImage::new("bbl", b.layout.device_sectors);
        img.write_at(b.sb.super_offset_sectors, &b.sb.encode_padded(4096));
        let log_sector =
            b.sb.super_offset_sectors
                .wrapping_add_signed(i64::from(b.sb.bblog_offset));
        img.write_at(log_sector, &log);
        let (ok, text) = run_mdadm(&["--examine-badblocks"], &img.0);
        assert!(ok, "mdadm --examine-badblocks failed:\n{text}");
        let listed: Vec<(u64, u64)> = text
            .lines()
            .filter_map(|l| {
                let (s, rest) = l.trim().split_once(" for ")?;
                Some((
                    s.parse().ok()?,
                    rest.strip_suffix(" sectors")?.parse().ok()?,
                ))
            })
            .collect();
        let want: Vec<(u64, u64)> = entries.iter().map(|e| (e.sector, e.len_sectors)).collect();
        assert_eq!(listed, want, "{version}: mdadm listed:\n{text}");
        // The examine report notes that bad blocks are present, as mdadm does.
        let (_, text) = run_mdadm(&["--examine"], &img.0);
        assert!(text.contains("bad blocks present"), "{text}");
        // And our decoder reads back what mdadm read.
        assert_eq!(badblocks::decode(&log, shift).unwrap(), entries);
    }
}
