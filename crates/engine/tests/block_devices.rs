//! The block-device path, counted by the kernel: arrays on loop devices (opened with
//! `O_DIRECT`), each device's sectors read and written taken from /sys/block/NAME/stat.
//!
//! A sequential write of whole stripes to RAID 1, 5, 6 and 10 reads nothing from any member
//! (the engine's buffers are not aligned, and a bounce that read the range before writing it
//! once doubled the I/O), and a rebuild reads nothing from the member it writes.
//!
//! Needs root and loop devices, which the test machines have: a failure to set one up is a
//! failure, not a skip.

use raidkit_disk::{Disk, FileDisk, OpenOptions};
use raidkit_engine::{Array, ConsistencyPolicy, CreateOptions, EngineConfig, TaskKind};
use raidkit_metadata::SuperblockVersion;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicBool;

const MEMBER_BYTES: u64 = 24 << 20;
const CHUNK_SECTORS: u32 = 128; // 64 KiB
const WRITE_BYTES: u64 = 8 << 20;

/// A loop device over a sparse file in /var/tmp, detached and removed on drop.
struct Loop {
    dev: String,
    backing: PathBuf,
}

impl Loop {
    fn new(tag: &str) -> Loop {
        let backing = PathBuf::from(format!(
            "/var/tmp/raidkit-engine-{tag}-{}",
            std::process::id()
        ));
        let f = std::fs::File::create(&backing).unwrap();
        f.set_len(MEMBER_BYTES).unwrap();
        drop(f);
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&backing)
            .output()
            .expect("losetup runs");
        assert!(
            out.status.success(),
            "losetup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
        Loop { dev, backing }
    }

    fn open(&self) -> Box<dyn Disk> {
        let d = FileDisk::open(&self.dev, OpenOptions::default()).unwrap();
        assert!(d.is_direct(), "{}: a loop device takes O_DIRECT", self.dev);
        Box::new(d)
    }

    /// Sectors read and written so far, by the kernel's count.
    fn sectors(&self) -> (u64, u64) {
        let name = self.dev.trim_start_matches("/dev/");
        let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
        let f: Vec<u64> = stat
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        (f[2], f[6])
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        let _ = std::fs::remove_file(&self.backing);
    }
}

fn loops(tag: &str, n: usize) -> Vec<Loop> {
    (0..n).map(|i| Loop::new(&format!("{tag}{i}"))).collect()
}

fn create(
    level: i32,
    layout: Option<u32>,
    members: &[Loop],
    consistency: ConsistencyPolicy,
) -> Array {
    let n = members.len();
    Array::create(
        members.iter().map(Loop::open).collect(),
        CreateOptions {
            level,
            layout,
            chunk_sectors: CHUNK_SECTORS,
            raid_devices: n,
            metadata: SuperblockVersion::V1_2,
            size_sectors: None,
            name: "blk".into(),
            set_uuid: [9; 16],
            device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
            ctime_seconds: 1_700_000_000,
            // Sparse backing files read as zeroes.
            init: raidkit_engine::Init::Zeroed,
            consistency,
            config: EngineConfig::default(),
        },
    )
    .unwrap_or_else(|e| panic!("create RAID {level}: {e}"))
}

/// A pattern for the byte at array offset `i`.
fn byte(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Writes `WRITE_BYTES` from offset 0 in 1 MiB requests from a buffer whose address is not
/// aligned (as a client's buffer may be), then flushes.
fn write_seq(a: &Array) {
    let req = 1u64 << 20;
    let mut backing = vec![0u8; req as usize + 1];
    let mut off = 0;
    while off < WRITE_BYTES {
        let buf = &mut backing[1..];
        for (k, b) in buf.iter_mut().enumerate() {
            *b = byte(off + k as u64);
        }
        a.write_at(buf, off, false).unwrap();
        off += req;
    }
    a.flush().unwrap();
}

fn check_seq(a: &Array) {
    let mut buf = vec![0u8; WRITE_BYTES as usize];
    a.read_at(&mut buf, 0).unwrap();
    let bad = (0..WRITE_BYTES).find(|&i| buf[i as usize] != byte(i));
    assert_eq!(bad, None, "first wrong byte");
}

fn sum(members: &[Loop]) -> (u64, u64) {
    members
        .iter()
        .map(Loop::sectors)
        .fold((0, 0), |(r, w), (a, b)| (r + a, w + b))
}

/// (level, layout, members, policy): every level with redundancy, in a shape where 1 MiB
/// requests cover whole stripes (64 KiB chunks). RAID 5 runs with a write-intent bitmap here;
/// its default, the partial parity log, is checked below.
const CASES: [(i32, Option<u32>, usize, ConsistencyPolicy); 5] = [
    (1, None, 3, ConsistencyPolicy::Auto),
    (5, None, 5, BITMAP),
    (6, None, 4, ConsistencyPolicy::Auto),
    (10, Some(0x102), 4, ConsistencyPolicy::Auto),
    (10, Some(0x201), 4, ConsistencyPolicy::Auto),
];

const BITMAP: ConsistencyPolicy = ConsistencyPolicy::Bitmap {
    chunk_bytes: 1 << 20,
};

#[test]
fn whole_stripe_writes_read_nothing_from_the_members() {
    for (level, layout, n, policy) in CASES {
        let ctx = format!("RAID {level} layout {layout:?} on {n} loop devices");
        let members = loops(&format!("w{level}-{}-", layout.unwrap_or(0)), n);
        let a = create(level, layout, &members, policy);
        let (r0, w0) = sum(&members);
        write_seq(&a);
        let (r1, w1) = sum(&members);
        let data_sectors = WRITE_BYTES / 512;
        eprintln!(
            "{ctx}: {} MiB written: members read {} KiB, wrote {} KiB",
            WRITE_BYTES >> 20,
            (r1 - r0) / 2,
            (w1 - w0) / 2
        );
        assert_eq!(r1 - r0, 0, "{ctx}: a write read from the members");
        // Every byte reaches the members as often as the level stores it (plus metadata).
        let copies = match level {
            1 => n as u64,
            5 => n as u64 * 1000 / (n as u64 - 1),
            6 => n as u64 * 1000 / (n as u64 - 2),
            _ => 2,
        };
        let expect = if level == 5 || level == 6 {
            data_sectors * copies / 1000
        } else {
            data_sectors * copies
        };
        assert!(w1 - w0 >= expect, "{ctx}: wrote {} < {expect}", w1 - w0);
        check_seq(&a);
        a.stop().unwrap();
    }
}

#[test]
fn a_rebuild_reads_nothing_from_the_member_it_writes() {
    for (level, layout, n, policy) in CASES {
        let ctx = format!("RAID {level} layout {layout:?} on {n} loop devices");
        let tag = format!("r{level}-{}-", layout.unwrap_or(0));
        let members = loops(&tag, n);
        let spare = Loop::new(&format!("{tag}spare"));
        let a = create(level, layout, &members, policy);
        write_seq(&a);
        a.fail_member(1).unwrap();
        a.add_spare(spare.open(), [0xee; 16]).unwrap();
        assert!(a.status().pending.contains(&TaskKind::Rebuild), "{ctx}");
        let (sr0, sw0) = spare.sectors();
        let (r0, _) = sum(&members);
        a.run_pending(&mut |_| {}, &AtomicBool::new(false))
            .unwrap_or_else(|e| panic!("{ctx}: rebuild: {e}"));
        let (sr1, sw1) = spare.sectors();
        let (r1, _) = sum(&members);
        eprintln!(
            "{ctx}: rebuild wrote {} KiB to the new member, read {} KiB from it and {} KiB from the others",
            (sw1 - sw0) / 2,
            (sr1 - sr0) / 2,
            (r1 - r0) / 2
        );
        assert_eq!(sr1 - sr0, 0, "{ctx}: the rebuild read the member it writes");
        let data_area = a.status().member_data_sectors;
        assert!(
            sw1 - sw0 >= data_area,
            "{ctx}: rebuilt {} of {data_area} sectors",
            sw1 - sw0
        );
        check_seq(&a);
        a.stop().unwrap();
    }
}

/// RAID 5 with its default, the partial parity log: a whole-stripe write is logged as md logs
/// it (one entry, no partial parity) and reads nothing from the members either.
#[test]
fn raid5_with_the_partial_parity_log_on_block_devices() {
    let members = loops("ppl", 5);
    let a = create(5, None, &members, ConsistencyPolicy::Auto);
    assert_eq!(a.status().consistency_policy, ConsistencyPolicy::Ppl);
    let (r0, w0) = sum(&members);
    write_seq(&a);
    let (r1, w1) = sum(&members);
    eprintln!(
        "RAID 5 + partial parity log on 5 loop devices: {} MiB written: members read {} KiB, wrote {} KiB",
        WRITE_BYTES >> 20,
        (r1 - r0) / 2,
        (w1 - w0) / 2
    );
    assert_eq!(r1 - r0, 0, "a whole-stripe write read {} sectors", r1 - r0);
    check_seq(&a);
    a.stop().unwrap();
}
