//! Per-member I/O counters against what the layout predicts: RAID 5 full-stripe writes put
//! n/(n-1) of the data on the members, RAID 10 n2 and RAID 1 write every byte twice (or n
//! times), RAID 0 once; reads of a healthy array read each byte once, and the split across a
//! RAID 1's members is what it is (printed, and bounded).

use raidkit_disk::{Disk, IoSnapshot, MemDisk};
use raidkit_engine::{Array, ConsistencyPolicy, CreateOptions, EngineConfig, MemberIoReading};
use raidkit_metadata::SuperblockVersion;

const MEMBER_BYTES: u64 = 8 << 20;
const CHUNK_SECTORS: u32 = 128; // 64 KiB

fn create(level: i32, layout: Option<u32>, n: usize) -> Array {
    let disks: Vec<Box<dyn Disk>> = (0..n)
        .map(|i| Box::new(MemDisk::new(&format!("m{i}"), MEMBER_BYTES)) as Box<dyn Disk>)
        .collect();
    create_on(disks, level, layout)
}

fn create_on(disks: Vec<Box<dyn Disk>>, level: i32, layout: Option<u32>) -> Array {
    let n = disks.len();
    Array::create(
        disks,
        CreateOptions {
            level,
            layout,
            chunk_sectors: CHUNK_SECTORS,
            raid_devices: n,
            metadata: SuperblockVersion::V1_2,
            size_sectors: None,
            name: "io".into(),
            set_uuid: [7; 16],
            device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
            ctime_seconds: 1_700_000_000,
            init: raidkit_engine::Init::Zeroed,
            consistency: ConsistencyPolicy::Resync,
            config: EngineConfig::default(),
        },
    )
    .unwrap_or_else(|e| panic!("create RAID {level} n {n}: {e}"))
}

fn totals(r: &[MemberIoReading]) -> IoSnapshot {
    r.iter()
        .fold(IoSnapshot::default(), |acc, m| acc.add(&m.io))
}

/// Member bytes written and read while `f` ran, per member and in all.
fn measure(a: &Array, f: impl FnOnce(&Array)) -> (Vec<(u64, u64)>, u64, u64) {
    let before = a.member_io();
    f(a);
    let after = a.member_io();
    let per: Vec<(u64, u64)> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| {
            assert_eq!(a.index, b.index);
            (
                a.io.write_bytes - b.io.write_bytes,
                a.io.read_bytes - b.io.read_bytes,
            )
        })
        .collect();
    let (tb, ta) = (totals(&before), totals(&after));
    (
        per,
        ta.write_bytes - tb.write_bytes,
        ta.read_bytes - tb.read_bytes,
    )
}

/// Writes `len` bytes of a pattern from offset 0 in requests of `req` bytes, then flushes.
fn write_seq(a: &Array, len: u64, req: usize) {
    let buf: Vec<u8> = (0..req).map(|i| (i % 251) as u8).collect();
    let mut off = 0;
    while off < len {
        let n = (len - off).min(buf.len() as u64) as usize;
        a.write_at(&buf[..n], off, false).unwrap();
        off += n as u64;
    }
    a.flush().unwrap();
}

fn read_seq(a: &Array, len: u64) {
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(buf.len() as u64) as usize;
        a.read_at(&mut buf[..n], off).unwrap();
        off += n as u64;
    }
}

#[test]
fn raid5_full_stripe_writes_put_n_over_n_minus_1_on_the_members() {
    for n in [3usize, 4, 5] {
        let a = create(5, None, n);
        let stripe = a.full_stripe_bytes().unwrap();
        let len = (4 << 20) / stripe * stripe; // whole stripes only
        let (per, written, read) = measure(&a, |a| write_seq(a, len, stripe as usize));
        // Data plus parity, nothing read back (every stripe written whole); superblock
        // updates (the array going dirty) add a few KiB per member.
        let want = len * n as u64 / (n as u64 - 1);
        let extra = written - want;
        assert!(
            written >= want && extra <= n as u64 * 16384,
            "RAID 5 n{n}: {written} written for {len} ({want} expected)"
        );
        assert_eq!(read, 0, "RAID 5 n{n}: full-stripe writes read nothing");
        // Parity rotates: every member carries its share.
        for (i, (w, _)) in per.iter().enumerate() {
            let share = want / n as u64;
            assert!(
                w.abs_diff(share) <= stripe,
                "RAID 5 n{n} member {i}: {w} of {written}"
            );
        }
        a.stop().unwrap();
    }
}

#[test]
fn mirrors_write_every_byte_once_per_copy_and_reads_read_it_once() {
    // (level, layout, members, copies)
    for (level, layout, n, copies) in [
        (1, None, 2u64, 2u64),
        (1, None, 3, 3),
        (10, Some(0x102), 4, 2),
        (10, Some(0x102), 3, 2),
        (0, None, 4, 1),
    ] {
        let a = create(level, layout, n as usize);
        let len = 4u64 << 20;
        let (_, written, _) = measure(&a, |a| write_seq(a, len, 1 << 20));
        assert!(
            written >= len * copies && written - len * copies <= n * 16384,
            "RAID {level} n{n}: {written} written for {len}"
        );
        let (per, _, read) = measure(&a, |a| read_seq(a, len));
        assert_eq!(read, len, "RAID {level} n{n}: each byte read once");
        println!(
            "RAID {level} n{n}: sequential read of {len} bytes per member: {:?}",
            per.iter().map(|p| p.1).collect::<Vec<_>>()
        );
        // No member reads more than its copies hold.
        for (i, (_, r)) in per.iter().enumerate() {
            assert!(*r <= len, "member {i} read {r}");
        }
        a.stop().unwrap();
    }
}

#[test]
fn counters_show_requests_time_and_in_status() {
    let a = create(5, None, 4);
    write_seq(&a, 1 << 20, 1 << 20);
    let s = a.status();
    for m in &s.members {
        assert!(m.io.writes > 0, "{}: {:?}", m.name, m.io);
        assert!(
            m.io.write_ns > 0 && m.io.busy_ns > 0,
            "{}: {:?}",
            m.name,
            m.io
        );
        assert!(m.io.flushes > 0, "the flush reaches {}", m.name);
        assert_eq!(m.io.in_flight, 0);
    }
    a.stop().unwrap();
}

/// A disk in memory that says it spins, so mirror reads keep a stream on one copy.
#[derive(Debug)]
struct Spinning(MemDisk);

impl raidkit_disk::DiskWrapper for Spinning {
    type Inner = MemDisk;
    fn inner(&self) -> &MemDisk {
        &self.0
    }
    fn is_rotational(&self) -> bool {
        true
    }
}

/// A request's pieces that follow each other on a member go to it as one command (md gets
/// this from the block layer's merging): a RAID 1 write of 1 MiB is one command per copy,
/// not one per 128 KiB lock unit, and a read of a stream on spinning copies one command;
/// RAID 10 n2 over two members with 64 KiB chunks, the same; RAID 0 over two members, whose
/// chunks of one member lie apart in the request's buffer, one vectored command per member;
/// RAID 5 over three, a whole-stripe write, one command per member for data and parity.
#[test]
fn a_requests_pieces_on_one_member_go_as_one_command() {
    for (level, layout, n) in [
        (1, None, 2usize),
        (1, None, 3),
        (10, Some(0x102), 2),
        (0, None, 2),
        (5, None, 3),
    ] {
        let disks: Vec<Box<dyn Disk>> = (0..n)
            .map(|i| {
                Box::new(Spinning(MemDisk::new(&format!("m{i}"), MEMBER_BYTES))) as Box<dyn Disk>
            })
            .collect();
        let a = create_on(disks, level, layout);
        let counts = |a: &Array| totals(&a.member_io());
        let buf: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
        // Past the superblock updates that the first write makes.
        a.write_at(&buf, 0, false).unwrap();
        let c0 = counts(&a);
        a.write_at(&buf, 1 << 20, false).unwrap();
        let c1 = counts(&a);
        let what = format!("RAID {level} n{n}");
        assert_eq!(c1.reads, c0.reads, "{what}: the write read something");
        // Bytes written to the members for 1 MiB: every copy's, or the data and its parity.
        let written: u64 = match level {
            1 | 10 => n as u64 * (1 << 20),
            0 => 1 << 20,
            _ => (1 << 20) * n as u64 / (n as u64 - 1),
        };
        assert_eq!(c1.write_bytes - c0.write_bytes, written, "{what}");
        assert_eq!(
            c1.writes - c0.writes,
            n as u64,
            "{what}: 1 MiB to {n} members, a command each"
        );
        let mut back = vec![0u8; 1 << 20];
        a.read_at(&mut back, 1 << 20).unwrap();
        let c2 = counts(&a);
        assert!(back == buf, "{what}: read back differs");
        assert_eq!(c2.read_bytes - c1.read_bytes, 1 << 20, "{what}");
        // A mirror's stream stays on one copy; RAID 0 reads every member; RAID 5 skips
        // each member's parity chunks, so its reads are runs between them.
        let most = match level {
            1 | 10 => 1,
            0 => n as u64,
            _ => 1 + (1 << 20) / (CHUNK_SECTORS as u64 * 512 * (n as u64 - 1)),
        };
        assert!(
            c2.reads - c1.reads <= most,
            "{what}: 1 MiB read in {} commands, at most {most}",
            c2.reads - c1.reads
        );
        a.stop().unwrap();
    }
}
