//! The RAID 5 write hole, closed by md's partial parity log: crash in the middle of
//! partial-stripe writes, lose a member, and check every sector.
//!
//! Members are [`CrashDisk`]s: a volatile write cache in front of durable bytes. At a crash
//! every write not covered by a flush lands whole, not at all, or sector by sector at random
//! (a torn write; a write-back cache may also reorder), which covers a crash at any point of
//! the writes in flight. The engine's own log writes are flushed, as md writes them with FUA.
//!
//! After the crash one member is lost and the array is assembled dirty and degraded. With the
//! log every sector no write was in flight over reads back exactly, and every sector a write
//! was in flight over reads back as its old or its new contents. Without the log (the resync
//! policy, started with force as md would need) the same schedule returns wrong data for
//! sectors no write touched: the write hole.

use raidkit_disk::Disk;
use raidkit_engine::{
    Array, ArrayEvent, AssembleOptions, ConsistencyPolicy, CreateOptions, EngineConfig, EngineError,
};
use raidkit_metadata::SuperblockVersion;
mod common;
use common::crash::{CrashDisk, Rng};

/// Sector contents named by (write id, array sector): every sector of every write differs.
fn sector_bytes(id: u32, sector: u64) -> Vec<u8> {
    let mut b = vec![0u8; 512];
    let mut h = (u64::from(id) << 40) ^ sector ^ 0x9e37_79b9_7f4a_7c15;
    for c in b.chunks_mut(8) {
        h = h.wrapping_mul(0x2545_f491_4f6c_dd1d).rotate_left(29) ^ sector;
        c.copy_from_slice(&h.to_le_bytes());
    }
    b
}

const CHUNK: u64 = 16;
const MEMBER_BYTES: usize = 6 << 20;

fn boxed(disks: &[CrashDisk]) -> Vec<Box<dyn Disk>> {
    disks
        .iter()
        .map(|d| Box::new(d.clone()) as Box<dyn Disk>)
        .collect()
}

/// What one crash-then-lose run found.
struct Outcome {
    /// Sectors no write was in flight over that read back wrong.
    wrong_outside: usize,
    /// Sectors a write was in flight over that read back as neither old nor new.
    wrong_inflight: usize,
    inflight: usize,
    /// Sectors that read as an error: outside the writes (data lost), and in flight (a
    /// missing member's sectors written together with other members, given up as lost).
    unreadable_outside: usize,
    unreadable_inflight: usize,
}

/// RAID 5 over `n` members with `policy`: fill, flush, then `writes` partial-stripe writes
/// (each inside one chunk, so each stripe write modifies one data member; some span chunks
/// when `spanning`) with no flush, a crash at a random point of their member writes, then
/// member `lost` is gone.
fn crash_then_lose(
    policy: ConsistencyPolicy,
    n: usize,
    layout: u32,
    seed: u64,
    spanning: bool,
) -> Outcome {
    let mut rng = Rng(seed * 0x9e37_79b9 + 1);
    let disks: Vec<CrashDisk> = (0..n)
        .map(|i| CrashDisk::new(&format!("c{i}"), MEMBER_BYTES))
        .collect();
    let opts = CreateOptions {
        level: 5,
        layout: Some(layout),
        chunk_sectors: CHUNK as u32,
        raid_devices: n,
        metadata: SuperblockVersion::V1_2,
        size_sectors: Some(CHUNK * 40),
        name: "crash".into(),
        set_uuid: [seed as u8 ^ 0x5a; 16],
        device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
        ctime_seconds: 1_700_000_000,
        init: raidkit_engine::Init::Zeroed,
        consistency: raidkit_engine::ConsistencyPolicy::Auto,
        config: EngineConfig {
            stripe_cache_bytes: 1 << 20,
            max_inflight: 2,
            task_threads: None,
        },
    };
    let array = Array::create_with_policy(boxed(&disks), opts, policy).unwrap();
    assert_eq!(array.consistency_policy(), policy);
    let sectors = array.size_bytes() / 512;
    // Everything written once and flushed: write id 1.
    let mut all = Vec::with_capacity(sectors as usize * 512);
    for s in 0..sectors {
        all.extend_from_slice(&sector_bytes(1, s));
    }
    array.write_at(&all, 0, false).unwrap();
    array.flush().unwrap();
    // candidates[s]: what sector s may read back as after the crash.
    let mut candidates: Vec<Vec<u32>> = vec![vec![1]; sectors as usize];
    let writes = 2 + rng.below(6);
    for w in 0..writes {
        let id = 2 + w as u32;
        let (start, len) = if spanning && rng.below(2) == 0 {
            // Over a chunk boundary, shorter than a stripe (never a full-stripe write).
            let data = n as u64 - 1;
            let start = rng.below(sectors - data * CHUNK);
            (start, CHUNK + 1 + rng.below((data - 1) * CHUNK - 1))
        } else {
            let chunk = rng.below(sectors / CHUNK);
            let off = rng.below(CHUNK);
            (chunk * CHUNK + off, 1 + rng.below(CHUNK - off))
        };
        let mut buf = Vec::with_capacity(len as usize * 512);
        for s in start..start + len {
            buf.extend_from_slice(&sector_bytes(id, s));
            candidates[s as usize].push(id);
        }
        array.write_at(&buf, start * 512, false).unwrap();
    }
    // Power loss: the array is gone without a stop; every unflushed member write is in doubt.
    drop(array);
    for d in &disks {
        d.crash(&mut rng);
    }
    let lost = rng.below(n as u64) as usize;
    let survivors: Vec<CrashDisk> = disks
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != lost)
        .map(|(_, d)| d.clone())
        .collect();
    // md starts a dirty degraded array that has a partial parity log without force; without
    // one it needs force.
    let force = policy == ConsistencyPolicy::Resync;
    let (array, report) = Array::assemble(
        boxed(&survivors),
        AssembleOptions {
            force,
            run: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("seed {seed}: assembly refused: {e}"));
    assert!(report.was_dirty, "{:?}", report.events);
    let mut out = Outcome {
        wrong_outside: 0,
        wrong_inflight: 0,
        inflight: 0,
        unreadable_outside: 0,
        unreadable_inflight: 0,
    };
    let mut got = vec![0u8; 512];
    for s in 0..sectors {
        let c = &candidates[s as usize];
        let inflight = c.len() > 1;
        out.inflight += inflight as usize;
        if array.read_at(&mut got, s * 512).is_err() {
            if inflight {
                out.unreadable_inflight += 1;
            } else {
                out.unreadable_outside += 1;
                if std::env::var("PPL_DEBUG").is_ok() {
                    eprintln!(
                        "outside unreadable {s} cands {c:?} events {:?}",
                        report.events
                    );
                }
            }
            continue;
        }
        let ok = c.iter().any(|&id| sector_bytes(id, s) == got);
        if inflight {
            out.wrong_inflight += !ok as usize;
        } else {
            out.wrong_outside += !ok as usize;
        }
    }
    out
}

/// Runs [`crash_then_lose`] with the log for each seed (`(seed, members, layout)`) and asserts
/// that no sector reads back wrong: untouched ones as they were, in-flight ones old or new or,
/// where a missing member was written together with others, an error. Returns the in-flight
/// sectors that read as errors.
fn every_sector_old_or_new(runs: impl Iterator<Item = (u64, usize, u32)>, spanning: bool) -> usize {
    let (mut inflight, mut unreadable) = (0, 0);
    for (seed, n, layout) in runs {
        let o = crash_then_lose(ConsistencyPolicy::Ppl, n, layout, seed, spanning);
        assert_eq!(
            (o.wrong_outside, o.wrong_inflight, o.unreadable_outside),
            (0, 0, 0),
            "seed {seed}: RAID 5 n {n} layout {layout}: sectors read back wrong or not at all ({} in flight)",
            o.inflight
        );
        inflight += o.inflight;
        unreadable += o.unreadable_inflight;
    }
    assert!(
        inflight > 1000,
        "writes were in flight at the crashes ({inflight} sectors)"
    );
    unreadable
}

#[test]
fn crash_then_member_loss_keeps_data_with_the_log() {
    // Each write modifies one data member of its stripe: in-flight sectors read old or new
    // even on the lost member, never an error.
    let unreadable = every_sector_old_or_new(
        (0..120u64).map(|seed| {
            let layout = [0u32, 1, 2, 3, 4, 5][(seed / 4 % 6) as usize];
            (seed, 3 + (seed % 4) as usize, layout)
        }),
        false,
    );
    assert_eq!(unreadable, 0, "one-member writes are never given up");
}

#[test]
fn writes_across_chunks_read_back_old_or_new_or_fail() {
    // Partial-stripe writes over several data members of a stripe, logged as md logs them
    // (one entry, written together): data no write touched survives (md's guarantee); the
    // in-flight sectors of a lost member that was written together with another member
    // read as errors (recorded as bad blocks on the parity member), where md returns
    // whatever parity and the other member make of them.
    let unreadable = every_sector_old_or_new(
        (0..80u64).map(|seed| (1000 + seed, 3 + (seed % 4) as usize, 2)),
        true,
    );
    println!("in-flight sectors given up as unreadable: {unreadable}");
    assert!(
        unreadable > 0,
        "some crashes lose a member written with another"
    );
}

#[test]
fn the_same_crashes_lose_data_without_the_log() {
    // The write hole: without the log some schedule corrupts sectors no write touched.
    let mut wrong = 0;
    for seed in 0..120u64 {
        let n = 3 + (seed % 4) as usize;
        let layout = [0u32, 1, 2, 3, 4, 5][(seed / 4 % 6) as usize];
        wrong += crash_then_lose(ConsistencyPolicy::Resync, n, layout, seed, false).wrong_outside;
    }
    assert!(
        wrong > 0,
        "without the log the crashes should corrupt data outside the writes"
    );
}

/// RAID 5 over 4 members with the default consistency policy (the partial parity log).
fn default_raid5(name: &str, set_uuid: [u8; 16]) -> CreateOptions {
    CreateOptions {
        level: 5,
        layout: None,
        chunk_sectors: CHUNK as u32,
        raid_devices: 4,
        metadata: SuperblockVersion::V1_2,
        size_sectors: None,
        name: name.into(),
        set_uuid,
        device_uuids: (0..4).map(|i| [i as u8 + 1; 16]).collect(),
        ctime_seconds: 1_700_000_000,
        init: raidkit_engine::Init::Zeroed,
        consistency: raidkit_engine::ConsistencyPolicy::Auto,
        config: EngineConfig::default(),
    }
}

#[test]
fn log_is_md_shaped_on_the_members() {
    use raidkit_metadata::ppl::{ppl_signature, PplHeader};
    let disks: Vec<CrashDisk> = (0..4)
        .map(|i| CrashDisk::new(&format!("c{i}"), MEMBER_BYTES))
        .collect();
    let uuid = [9u8; 16];
    let opts = default_raid5("shape", uuid);
    // RAID 5 gets the log by default.
    let array = Array::create(boxed(&disks), opts.clone()).unwrap();
    assert_eq!(array.consistency_policy(), ConsistencyPolicy::Ppl);
    assert_eq!(array.status().consistency_policy, ConsistencyPolicy::Ppl);
    // Stripe 0's parity is on member 3 (left-symmetric): a write to its first chunk logs there.
    array.write_at(&[0xabu8; 4096], 0, false).unwrap();
    let sb = raidkit_engine::read_superblock(&disks[3]).unwrap().sb;
    let area = sb.ppl().expect("PPL area in the superblock");
    assert_eq!(area.size_sectors, 2048);
    let at = (sb.super_offset_sectors as i64 + i64::from(area.offset_sectors)) as u64 * 512;
    let mut page = vec![0u8; 4096];
    disks[3].read_at(&mut page, at).unwrap();
    let h = PplHeader::decode(&page, ppl_signature(&uuid)).unwrap();
    assert_eq!(h.entries.len(), 1);
    let e = h.entries[0];
    assert_eq!(
        (
            e.data_sector,
            e.pp_size_bytes,
            e.data_size_bytes,
            e.parity_disk
        ),
        (0, 4096, 4096, 3)
    );
    // Partial parity = XOR of the untouched data (zeroes here) follows the header.
    let mut pp = vec![0u8; 4096];
    disks[3].read_at(&mut pp, at + 4096).unwrap();
    assert!(pp.iter().all(|&b| b == 0));
    assert_eq!(e.checksum, raidkit_metadata::ppl::pp_checksum(&pp));
    array.stop().unwrap();
    // Other levels refuse it, as mdadm does; RAID 6 defaults to resync.
    let mut o6 = opts;
    o6.level = 6;
    let d6: Vec<CrashDisk> = (0..4)
        .map(|i| CrashDisk::new(&format!("d{i}"), MEMBER_BYTES))
        .collect();
    assert!(matches!(
        Array::create_with_policy(boxed(&d6), o6.clone(), ConsistencyPolicy::Ppl),
        Err(EngineError::Invalid(_))
    ));
    let a6 = Array::create(boxed(&d6), o6).unwrap();
    assert_eq!(a6.consistency_policy(), ConsistencyPolicy::Resync);
}

/// The kernel records a log area with room for more than one log write as
/// MD_FEATURE_MULTIPLE_PPLS (0x800) in place of mdadm's MD_FEATURE_PPL (0x400) once it ran the
/// array; such an array still runs with the log, and a crash is still replayed (the md oracle's
/// md-created `ppl` row found raidkit running one as `resync`).
#[test]
fn an_array_md_switched_to_multiple_ppls_keeps_its_log() {
    use raidkit_metadata::FeatureMap;
    let disks: Vec<CrashDisk> = (0..4)
        .map(|i| CrashDisk::new(&format!("m{i}"), MEMBER_BYTES))
        .collect();
    let array = Array::create(boxed(&disks), default_raid5("multi", [7u8; 16])).unwrap();
    array.stop().unwrap();
    drop(array);
    for d in &disks {
        let found = raidkit_engine::read_superblock(d).unwrap();
        let mut sb = found.sb;
        sb.feature_map.remove(FeatureMap::PPL);
        sb.feature_map.insert(FeatureMap::MULTIPLE_PPLS);
        raidkit_engine::write_superblock(d, &sb, found.version).unwrap();
        d.flush().unwrap();
    }
    let (array, _) = Array::assemble(boxed(&disks), AssembleOptions::default()).unwrap();
    assert_eq!(array.consistency_policy(), ConsistencyPolicy::Ppl);
    // A write logs on stripe 0's parity member; dropped without a stop, the next assembly
    // replays it.
    array.write_at(&[0x5au8; 4096], 0, false).unwrap();
    drop(array);
    let (array, report) = Array::assemble(boxed(&disks), AssembleOptions::default()).unwrap();
    assert!(
        report.events.iter().any(|e| matches!(
            e,
            ArrayEvent::PplReplayed {
                recovered: 1,
                mismatched: 0
            }
        )),
        "{:?}",
        report.events
    );
    // The array's event log holds what assembly found, in the same order.
    let (first, logged) = array.events_since(0, std::time::Duration::ZERO);
    assert_eq!((first, &logged), (0, &report.events));
    let mut back = vec![0u8; 4096];
    array.read_at(&mut back, 0).unwrap();
    assert!(back.iter().all(|&b| b == 0x5a));
    array.stop().unwrap();
}

/// Whole-stripe writes follow one another in the parity member's log area (md's chain of
/// logs, the newest of which md replays) without a flush of the members between them; the
/// newest log names every stripe written since, so a crash that leaves the first stripe's
/// parity stale is still made whole by the replay. A partial-stripe write on that member
/// starts the log over at the area's start, after a flush.
#[test]
fn whole_stripes_chain_their_logs_and_the_newest_names_them_all() {
    use raidkit_engine::ppl::newest_header;
    use raidkit_metadata::ppl::ppl_signature;
    let disks: Vec<CrashDisk> = (0..4)
        .map(|i| CrashDisk::new(&format!("w{i}"), MEMBER_BYTES))
        .collect();
    let uuid = [5u8; 16];
    let array = Array::create(boxed(&disks), default_raid5("chain", uuid)).unwrap();
    let stripe_bytes = (3 * CHUNK * 512) as usize;
    // Left-symmetric over 4: stripes 0, 4 and 8 keep their parity on member 3.
    let whole = |s: u64, id: u32| -> Vec<u8> {
        (0..stripe_bytes as u64 / 512)
            .flat_map(|i| sector_bytes(id, s * 3 * CHUNK + i))
            .collect()
    };
    array.write_at(&whole(0, 1), 0, false).unwrap();
    array
        .write_at(&whole(4, 2), 4 * stripe_bytes as u64, false)
        .unwrap();
    let sb = raidkit_engine::read_superblock(&disks[3]).unwrap().sb;
    let area = sb.ppl().unwrap();
    let at = (sb.super_offset_sectors as i64 + i64::from(area.offset_sectors)) as u64 * 512;
    let read_area = || {
        let mut a = vec![0u8; area.size_sectors as usize * 512];
        disks[3].read_at(&mut a, at).unwrap();
        a
    };
    let (offset, h) = newest_header(&read_area(), ppl_signature(&uuid)).unwrap();
    assert_eq!(offset, 8, "the second log follows the first (4 KiB on)");
    let stripes: Vec<u64> = h
        .entries
        .iter()
        .map(|e| e.data_sector / (3 * CHUNK))
        .collect();
    assert_eq!(stripes, [0, 4], "the newest log names both stripes");
    assert!(h.entries.iter().all(|e| e.pp_size_bytes == 0));
    // A crash leaves stripe 0's parity stale (as if its write never reached member 3).
    drop(array);
    let parity_at = raidkit_engine::read_superblock(&disks[3])
        .unwrap()
        .sb
        .data_offset_sectors
        * 512;
    disks[3]
        .write_at(&vec![0u8; (CHUNK * 512) as usize], parity_at)
        .unwrap();
    let (array, report) = Array::assemble(boxed(&disks), AssembleOptions::default()).unwrap();
    assert!(
        report.events.iter().any(|e| matches!(
            e,
            ArrayEvent::PplReplayed {
                recovered: 2,
                mismatched: 0
            }
        )),
        "{:?}",
        report.events
    );
    let check = array
        .run_task(
            raidkit_engine::TaskKind::Check,
            &mut |_| {},
            &std::sync::atomic::AtomicBool::new(false),
        )
        .unwrap();
    assert_eq!(
        check.progress.mismatch_sectors, 0,
        "the replay made stripe 0 whole"
    );
    let mut back = vec![0u8; stripe_bytes];
    array.read_at(&mut back, 0).unwrap();
    assert!(back == whole(0, 1));
    // Now two whole stripes again, then a write inside one chunk of stripe 8: its log has
    // partial parity and goes to the start of the area, naming only itself.
    array.write_at(&whole(0, 3), 0, false).unwrap();
    array
        .write_at(&whole(4, 4), 4 * stripe_bytes as u64, false)
        .unwrap();
    array
        .write_at(&[0x77u8; 4096], 8 * stripe_bytes as u64, false)
        .unwrap();
    let (offset, h) = newest_header(&read_area(), ppl_signature(&uuid)).unwrap();
    assert_eq!(offset, 0);
    assert_eq!(h.entries.len(), 1);
    assert_eq!(h.entries[0].pp_size_bytes, 4096);
    array.stop().unwrap();
}
