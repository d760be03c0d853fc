//! The checker must fail when md's bytes and raidkit disagree. A small raid5 left-symmetric
//! array is encoded here independently of raidkit (md's formulas written out by hand), with
//! v1.2 superblocks and VM records; the checker passes it, then rejects each corruption.

use raidkit_oracle::check::check_array;
use raidkit_oracle::pattern::{expected_contents, PatternWrite};
use raidkit_oracle::plan::{PlannedArray, PlannedMember, PlannedWrite, Scenario};
use raidkit_oracle::records::parse_records;
use raidkit_oracle::superblock::{checksum, SB_OFFSET_BYTES};
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};

const N: usize = 3;
const CHUNK: usize = 4096;
const DATA_OFFSET_SECTORS: u64 = 16;
const STRIPES: usize = 12;

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Member images of raid5 left-symmetric (md layout 2) holding `data`.
/// The array's UUID in its superblocks, and as `mdadm --examine` prints it.
const SET_UUID: [u8; 16] = [0xab; 16];
const SET_UUID_TEXT: &str = "abababab:abababab:abababab:abababab";

fn encode(data: &[u8], layout: u32) -> Vec<Vec<u8>> {
    let member_len = DATA_OFFSET_SECTORS as usize * 512 + STRIPES * CHUNK;
    let mut m = vec![vec![0u8; member_len]; N];
    let base = DATA_OFFSET_SECTORS as usize * 512;
    for s in 0..STRIPES {
        let pd = (N - 1) - s % N;
        let mut p = vec![0u8; CHUNK];
        for dd in 0..N - 1 {
            let disk = (pd + 1 + dd) % N;
            let src = &data[(s * (N - 1) + dd) * CHUNK..][..CHUNK];
            m[disk][base + s * CHUNK..][..CHUNK].copy_from_slice(src);
            p.iter_mut().zip(src).for_each(|(a, b)| *a ^= b);
        }
        m[pd][base + s * CHUNK..][..CHUNK].copy_from_slice(&p);
    }
    for (role, img) in m.iter_mut().enumerate() {
        let sb = &mut img[SB_OFFSET_BYTES..SB_OFFSET_BYTES + 256 + 2 * N];
        put32(sb, 0, 0xa92b_4efc);
        put32(sb, 4, 1);
        put32(sb, 0x48, 5);
        put32(sb, 0x4c, layout);
        sb[0x10..0x20].copy_from_slice(&SET_UUID);
        put64(sb, 0x50, (STRIPES * CHUNK / 512) as u64);
        put32(sb, 0x58, (CHUNK / 512) as u32);
        put32(sb, 0x5c, N as u32);
        put64(sb, 0x80, DATA_OFFSET_SECTORS);
        put64(sb, 0x88, (STRIPES * CHUNK / 512) as u64);
        put64(sb, 0x90, (SB_OFFSET_BYTES / 512) as u64);
        put32(sb, 0xa0, role as u32);
        put32(sb, 0xdc, N as u32);
        for r in 0..N {
            sb[0x100 + 2 * r..0x102 + 2 * r].copy_from_slice(&(r as u16).to_le_bytes());
        }
        let c = checksum(sb);
        put32(sb, 0xd8, c);
    }
    m
}

fn records(size: usize, sha: &str, writes: &[PatternWrite]) -> String {
    let mut r = String::from("a begin create\n");
    for w in writes {
        r += &format!("a write {} {} {}\n", w.seed, w.offset_bytes, w.len_bytes);
    }
    r += &format!("a size_bytes {size}\na sha256 {sha}\n");
    r += "a sysfs level raid5\na sysfs layout 2\na sysfs chunk_size 4096\na sysfs raid_disks 3\n";
    r += "a mismatch_cnt 0\n";
    for m in 0..N {
        r += &format!("a examine s{m} /dev/vd{m}:\n");
        r += &format!("a examine s{m}      Array UUID : {SET_UUID_TEXT}\n");
        r += &format!("a examine s{m}     Data Offset : {DATA_OFFSET_SECTORS} sectors\n");
        r += &format!("a examine s{m}     Device Role : Active device {m}\n");
        r += &format!("a examine s{m}      Chunk Size : 4K\n");
        r += &format!("a examine s{m}          Layout : left-symmetric\n");
    }
    r + "a end\n"
}

struct Fixture {
    dir: PathBuf,
    plan: PlannedArray,
    text: String,
    images: Vec<Vec<u8>>,
}

fn fixture(tag: &str) -> Fixture {
    let dir =
        std::env::temp_dir().join(format!("raidkit-oracle-test-{}-{tag}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let size = STRIPES * (N - 1) * CHUNK;
    let writes = [
        PatternWrite {
            seed: 1,
            offset_bytes: 0,
            len_bytes: size as u64,
        },
        PatternWrite {
            seed: 2,
            offset_bytes: 10240,
            len_bytes: 2048,
        },
    ];
    let data = expected_contents(size, &writes);
    let sha: String = Sha256::digest(&data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let plan = PlannedArray {
        name: "a".into(),
        kind: Scenario::Create,
        level: 5,
        layout: Some("left-symmetric".into()),
        chunk_kib: Some(4),
        batch: 0,
        md_device: "md0".into(),
        members: (0..N)
            .map(|m| PlannedMember {
                serial: format!("s{m}"),
                image: dir.join(format!("m{m}.img")),
                size_bytes: 0,
            })
            .collect(),
        writes: vec![
            PlannedWrite {
                seed: 1,
                offset_bytes: 0,
                len_bytes: None,
                journal_only: false,
            },
            PlannedWrite {
                seed: 2,
                offset_bytes: 10240,
                len_bytes: Some(2048),
                journal_only: false,
            },
        ],
        metadata: "1.2".into(),
        fail_members: Vec::new(),
        rebuild_percent: None,
        bitmap_chunk_bytes: None,
        spares: 0,
        journal: None,
        init_background: false,
        ppl: None,
        expect: None,
        grow_bytes: None,
        mirrors: None,
        takeover: None,
        reshape: None,
        size_bytes: None,
        prepare_error: None,
        spans: None,
    };
    Fixture {
        text: records(size, &sha, &writes),
        images: encode(&data, 2),
        plan,
        dir,
    }
}

fn run(f: &Fixture) -> raidkit_oracle::check::CheckOutcome {
    for (m, img) in f.images.iter().enumerate() {
        fs::write(f.plan.members[m].image.as_path(), img).unwrap();
    }
    let reports = parse_records(&f.text);
    let out = check_array(&f.plan, reports.get("a"));
    let _ = fs::remove_dir_all(Path::new(&f.dir));
    out
}

fn data_byte(stripe: usize) -> usize {
    DATA_OFFSET_SECTORS as usize * 512 + stripe * CHUNK + 100
}

#[test]
fn a_faithful_array_passes() {
    let out = run(&fixture("ok"));
    assert!(out.ok(), "{:?}", out.failures);
    for check in [
        "metadata",
        "sha256",
        "scan",
        "map(",
        "unmap(",
        "parity(",
        "degraded(",
    ] {
        assert!(
            out.passed.iter().any(|p| p.starts_with(check)),
            "{check} missing: {:?}",
            out.passed
        );
    }
}

#[test]
fn a_scan_that_finds_another_array_fails() {
    let mut f = fixture("scan");
    f.text = f
        .text
        .replace(SET_UUID_TEXT, "abababab:abababab:abababab:abababac");
    let out = run(&f);
    let all = out.failures.join("\n");
    assert!(
        all.contains("scan: md's array abababab:abababab:abababab:abababac on 3 members"),
        "{all}"
    );
}

#[test]
fn a_flipped_data_byte_fails_map_and_parity() {
    let mut f = fixture("data");
    // Stripe 3: P on member (2 - 3 % 3) = 2, so member 0 holds data.
    f.images[0][data_byte(3)] ^= 0x40;
    let out = run(&f);
    assert!(!out.ok());
    let all = out.failures.join("\n");
    assert!(all.contains("map:"), "{all}");
    assert!(all.contains("parity: stripe 3 P on member 2"), "{all}");
}

#[test]
fn a_flipped_parity_byte_fails_parity_and_degraded() {
    let mut f = fixture("parity");
    f.images[2][data_byte(3)] ^= 1;
    let out = run(&f);
    let all = out.failures.join("\n");
    assert!(
        all.contains("parity: stripe 3 P on member 2 byte 100"),
        "{all}"
    );
    assert!(all.contains("degraded: without members [0]"), "{all}");
    assert!(!all.contains("map:"), "{all}");
}

#[test]
fn data_placed_by_another_layout_is_caught() {
    // Every piece of metadata says right-symmetric (3), but the bytes are left-symmetric:
    // exactly what a raidkit layout bug looks like from the checker's side.
    let mut f = fixture("layout");
    for img in &mut f.images {
        let sb = &mut img[SB_OFFSET_BYTES..SB_OFFSET_BYTES + 256 + 2 * N];
        put32(sb, 0x4c, 3);
        let c = checksum(sb);
        put32(sb, 0xd8, c);
    }
    f.text = f
        .text
        .replace("sysfs layout 2", "sysfs layout 3")
        .replace("Layout : left-symmetric", "Layout : right-symmetric");
    f.plan.layout = Some("right-symmetric".into());
    let out = run(&f);
    let all = out.failures.join("\n");
    assert!(!all.contains("metadata:"), "{all}");
    assert!(all.contains("map: array byte"), "{all}");
    assert!(all.contains("unmap: member"), "{all}");
    // (No parity failure is expected: with three members any one is the XOR of the other
    // two, whichever raid5 layout names it P.)
    assert!(all.contains("degraded: without members"), "{all}");
}

#[test]
fn missing_records_fail() {
    let mut f = fixture("records");
    f.text = f.text.replace("a end\n", "");
    let out = run(&f);
    assert!(
        out.failures.iter().any(|l| l.contains("no end record")),
        "{:?}",
        out.failures
    );
}
