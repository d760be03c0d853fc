//! RAID 50 and 60 stacks: created, stopped, assembled again from their members in any order,
//! read back exactly, whole and with each span degraded as far as its level allows; the
//! RAID 0's superblock sits at the start of each span array, as md's does.

use raidkit_disk::{Disk, MemDisk};
use raidkit_engine::array::{split_stack, StackSplit};
use raidkit_engine::{
    read_superblock, Array, AssembleOptions, ConsistencyPolicy, CreateOptions, EngineConfig,
    EngineError, Init, StackOptions,
};

const MEMBER_BYTES: u64 = 16 << 20;

fn members(count: usize) -> Vec<MemDisk> {
    (0..count)
        .map(|i| MemDisk::new(&format!("m{i}"), MEMBER_BYTES))
        .collect()
}

fn boxed(disks: &[MemDisk]) -> Vec<Box<dyn Disk>> {
    disks
        .iter()
        .map(|d| Box::new(d.clone()) as Box<dyn Disk>)
        .collect()
}

fn create(level: i32, disks: &[MemDisk], spans: usize) -> raidkit_engine::Result<Array> {
    create_with(level, disks, spans, ConsistencyPolicy::Auto)
}

fn create_with(
    level: i32,
    disks: &[MemDisk],
    spans: usize,
    consistency: ConsistencyPolicy,
) -> raidkit_engine::Result<Array> {
    let n = disks.len();
    Array::create_stack(
        boxed(disks),
        CreateOptions {
            level,
            layout: None,
            chunk_sectors: 128,
            raid_devices: n,
            metadata: raidkit_metadata::SuperblockVersion::V1_2,
            size_sectors: None,
            name: "host:stack".into(),
            set_uuid: [0xa0; 16],
            device_uuids: (0..n).map(|i| [i as u8 + 1; 16]).collect(),
            ctime_seconds: 1_700_000_000,
            init: Init::Zeroed,
            consistency,
            config: EngineConfig::default(),
        },
        StackOptions {
            spans,
            span_set_uuids: (0..spans).map(|i| [0xb0 + i as u8; 16]).collect(),
            span_device_uuids: (0..spans).map(|i| [0xc0 + i as u8; 16]).collect(),
        },
        &|_, _| {},
    )
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn assemble(disks: Vec<Box<dyn Disk>>, read_only: bool) -> Array {
    Array::assemble_stack(
        disks,
        AssembleOptions {
            read_only,
            ..Default::default()
        },
    )
    .unwrap()
    .0
}

/// Creates, writes the whole array, stops; assembles again (members in reverse order) and
/// reads it back, then with `lost` members of each span left out.
fn round_trip(level: i32, count: usize, spans: usize, lost: usize) {
    let disks = members(count);
    let array = create(level, &disks, spans).unwrap();
    assert_eq!(array.stack_level(), Some(level));
    assert_eq!(array.spans().len(), spans);
    let size = array.size_bytes() as usize;
    // Each span gives the RAID 0 what it holds past the RAID 0's data offset.
    let span_bytes = array.spans()[0].size_bytes();
    assert!(
        size as u64 > (spans as u64 - 1) * span_bytes && size as u64 <= spans as u64 * span_bytes
    );
    let data = pattern(size, level as u64);
    // Unaligned pieces too: the edges are read, patched and written through both levels.
    array.write_at(&data[..1000], 0, false).unwrap();
    array.write_at(&data[1000..], 1000, false).unwrap();
    array.stop().unwrap();

    // md's RAID 0 superblock on each span, at 4 KiB into the span array (v1.2).
    for span in array.spans() {
        let mut page = vec![0u8; 4];
        span.read_at(&mut page, 4096).unwrap();
        assert_eq!(u32::from_le_bytes(page.try_into().unwrap()), 0xa92b4efc);
    }
    drop(array);

    let mut order = boxed(&disks);
    order.reverse();
    let again = assemble(order, false);
    assert_eq!(again.stack_level(), Some(level));
    let status = again.status();
    let stack = status.stack.as_ref().expect("a stack's status");
    assert_eq!(stack.level, level);
    assert_eq!(stack.spans.len(), spans);
    assert!(!status.degraded);
    let mut back = vec![0u8; size];
    again.read_at(&mut back, 0).unwrap();
    assert!(back == data, "RAID {level} read back differs");
    again.stop().unwrap();
    drop(again);

    // Leave out `lost` members of every span (the first ones of each).
    let per_span = count / spans;
    let kept: Vec<MemDisk> = disks
        .iter()
        .enumerate()
        .filter(|(i, _)| i % per_span >= lost)
        .map(|(_, d)| d.clone())
        .collect();
    let degraded = assemble(boxed(&kept), true);
    let status = degraded.status();
    assert!(status.degraded);
    for span in &status.stack.as_ref().unwrap().spans {
        assert_eq!(span.missing_slots.len(), lost);
    }
    let mut back = vec![0u8; size];
    degraded.read_at(&mut back, 0).unwrap();
    assert!(back == data, "degraded RAID {level} read back differs");
}

#[test]
fn raid50_of_six_in_two_spans_round_trips_whole_and_degraded() {
    round_trip(50, 6, 2, 1);
}

#[test]
fn raid60_of_eight_in_two_spans_round_trips_whole_and_degraded() {
    round_trip(60, 8, 2, 2);
}

#[test]
fn raid50_of_nine_in_three_spans_round_trips() {
    round_trip(50, 9, 3, 1);
}

#[test]
fn one_member_too_many_lost_in_a_span_fails_the_stack() {
    let disks = members(6);
    create(50, &disks, 2).unwrap().stop().unwrap();
    // Two members of span 0 gone: that span cannot start, so neither can the stack.
    let kept = boxed(&disks[2..]);
    assert!(Array::assemble_stack(
        kept,
        AssembleOptions {
            read_only: true,
            ..Default::default()
        }
    )
    .is_err());
}

#[test]
fn span_members_carry_their_own_array_uuids_and_the_stack_is_recognised() {
    let disks = members(6);
    create(50, &disks, 2).unwrap().stop().unwrap();
    let found: Vec<_> = disks.iter().map(|d| read_superblock(d).unwrap()).collect();
    for (i, f) in found.iter().enumerate() {
        assert_eq!(f.sb.set_uuid.0, [0xb0 + (i / 3) as u8; 16]);
        assert_eq!(f.sb.raid_disks, 3);
        assert_eq!(f.sb.level.to_md(), 5);
    }
    assert!(raidkit_engine::array::looks_stacked(&found));
    assert!(!raidkit_engine::array::looks_stacked(&found[..3]));
}

#[test]
fn bad_splits_are_refused_before_anything_is_written() {
    assert_eq!(
        split_stack(50, 7, 2),
        Err(StackSplit::NotDivisible {
            members: 7,
            spans: 2
        })
    );
    assert_eq!(
        split_stack(50, 4, 2),
        Err(StackSplit::TooFewPerSpan {
            span_level: 5,
            per_span: 2,
            least: 3
        })
    );
    assert_eq!(
        split_stack(60, 6, 2),
        Err(StackSplit::TooFewPerSpan {
            span_level: 6,
            per_span: 3,
            least: 4
        })
    );
    assert_eq!(
        split_stack(50, 6, 1),
        Err(StackSplit::TooFewSpans { spans: 1 })
    );
    assert_eq!(split_stack(60, 8, 2), Ok((6, 4)));
    let disks = members(7);
    match create(50, &disks, 2) {
        Err(EngineError::Stack(StackSplit::NotDivisible { .. })) => {}
        other => panic!("7 members in 2 spans: {:?}", other.err()),
    }
    // Nothing was written: no member holds a superblock.
    assert!(disks.iter().all(|d| read_superblock(d).is_err()));
}

/// A RAID 50 request that covers whole stripes of both spans reaches each span as one
/// request (the RAID 0's chunks for a span gathered), so the spans write whole stripes and
/// read nothing, one command to each span member (spans without a log, whose writes would
/// count too).
#[test]
fn a_requests_chunks_reach_each_span_as_one_request() {
    let disks = members(6);
    let a = create_with(50, &disks, 2, ConsistencyPolicy::Resync).unwrap();
    // 2 spans of 3 members with 64 KiB chunks: a span's stripe holds 128 KiB, the stack's
    // 256 KiB; 1 MiB gives each span 512 KiB, four whole stripes.
    let data = pattern(1 << 20, 50);
    let totals = |a: &Array| -> (u64, u64, u64) {
        a.spans()
            .iter()
            .flat_map(|s| s.member_io())
            .fold((0, 0, 0), |acc, m| {
                (
                    acc.0 + m.io.reads,
                    acc.1 + m.io.writes,
                    acc.2 + m.io.read_bytes,
                )
            })
    };
    a.write_at(&data, 0, false).unwrap();
    let before = totals(&a);
    a.write_at(&data, 1 << 20, false).unwrap();
    let after = totals(&a);
    assert_eq!(after.0, before.0, "whole stripes read nothing");
    assert_eq!(after.1 - before.1, 6, "one command to each span member");
    let mut back = vec![0u8; 1 << 20];
    a.read_at(&mut back, 1 << 20).unwrap();
    assert!(back == data);
    let read = totals(&a);
    assert_eq!(read.2 - after.2, 1 << 20);
    a.stop().unwrap();
}
