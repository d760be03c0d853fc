//! Write gathering: contiguous WRITEs queued on one connection reach an export that asks for
//! it (a parity array's full stripe) as fewer, larger writes, and every request still gets
//! its own reply, with the export's error when the gathered write fails. Anything else
//! between the writes (a read, a write elsewhere) is never folded in.

mod common;

use common::*;
use raidkit_nbd::{Export, MemoryExport};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

const READ: u16 = 0;
const WRITE: u16 = 1;
const SIZE: u64 = 16 << 20;
const UNIT: u64 = 1 << 20;
const EIO: u32 = 5;

/// A memory export that asks for 1 MiB gathering, records every write it gets, and fails
/// writes that touch `[fail_from, fail_to)`.
struct Recording {
    inner: MemoryExport,
    writes: Mutex<Vec<(u64, usize)>>,
    fail: (u64, u64),
}

impl Export for Recording {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn write_gather_bytes(&self) -> u64 {
        UNIT
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> std::io::Result<()> {
        self.writes.lock().unwrap().push((offset, data.len()));
        if offset < self.fail.1 && self.fail.0 < offset + data.len() as u64 {
            return Err(std::io::Error::other("injected write error"));
        }
        self.inner.write_at(offset, data, fua)
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

fn recording(fail: (u64, u64)) -> Arc<Recording> {
    Arc::new(Recording {
        inner: MemoryExport::new(SIZE),
        writes: Mutex::new(Vec::new()),
        fail,
    })
}

/// Sends `count` WRITEs of `len` bytes from `offset` on, back to back, before reading any
/// reply; returns the replies as (error, cookie), cookies `first..first+count`.
fn pipelined_writes(
    c: &mut RawClient,
    first: u64,
    offset: u64,
    len: usize,
    count: usize,
    seed: u64,
) -> Vec<(u32, u64)> {
    let data = pattern(len * count, seed);
    let writer = c.stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut w = writer;
        for i in 0..count {
            let mut v = 0x25609513u32.to_be_bytes().to_vec();
            v.extend_from_slice(&0u16.to_be_bytes());
            v.extend_from_slice(&WRITE.to_be_bytes());
            v.extend_from_slice(&(first + i as u64).to_be_bytes());
            v.extend_from_slice(&(offset + (i * len) as u64).to_be_bytes());
            v.extend_from_slice(&(len as u32).to_be_bytes());
            v.extend_from_slice(&data[i * len..(i + 1) * len]);
            w.write_all(&v).unwrap();
        }
    });
    let replies: Vec<(u32, u64)> = (0..count).map(|_| c.simple_reply()).collect();
    sender.join().unwrap();
    replies
}

fn read_back(c: &mut RawClient, cookie: u64, offset: u64, len: usize) -> Vec<u8> {
    c.request(0, READ, cookie, offset, len as u32);
    assert_eq!(c.simple_reply(), (0, cookie));
    let mut back = vec![0u8; len];
    c.stream.read_exact(&mut back).unwrap();
    back
}

#[test]
fn contiguous_writes_are_gathered_and_each_gets_its_reply() {
    let export = recording((u64::MAX, u64::MAX));
    let server = Running::start(vec![("g", export.clone() as Arc<dyn Export>)]);
    let mut c = RawClient::connect(&server.socket);
    c.go("g", false);
    let len = 128 << 10;
    let mut gathered_seen = false;
    // Gathering takes only requests that have arrived; on a loaded machine a round may see
    // none, so a few rounds are run and at least one must gather.
    for round in 0..8u64 {
        let offset = round * 2 * UNIT;
        let count = 16;
        let replies = pipelined_writes(&mut c, round * 100 + 1, offset, len, count, round);
        let cookies: BTreeSet<u64> = replies.iter().map(|r| r.1).collect();
        let expected: BTreeSet<u64> = (0..count as u64).map(|i| round * 100 + 1 + i).collect();
        assert_eq!(cookies, expected, "one reply per request");
        assert!(replies.iter().all(|r| r.0 == 0), "{replies:?}");
        let back = read_back(&mut c, 9999, offset, len * count);
        assert_eq!(back, pattern(len * count, round), "round {round}: data");
        let writes = export.writes.lock().unwrap().clone();
        let this_round: Vec<_> = writes
            .iter()
            .filter(|(o, _)| (offset..offset + 2 * UNIT).contains(o))
            .collect();
        let bytes: usize = this_round.iter().map(|(_, l)| l).sum();
        assert_eq!(bytes, len * count, "every byte written once");
        for &&(o, l) in &this_round {
            // A gathered write never runs past the end of the gather unit it started in.
            assert!(
                l == len || (o + l as u64).div_ceil(UNIT) - o / UNIT <= 1,
                "write {o}+{l} crosses a unit end"
            );
        }
        gathered_seen |= this_round.len() < count;
        if gathered_seen && round >= 2 {
            break;
        }
    }
    assert!(gathered_seen, "no writes were gathered");
}

#[test]
fn only_contiguous_writes_are_gathered() {
    let export = recording((u64::MAX, u64::MAX));
    let server = Running::start(vec![("g", export.clone() as Arc<dyn Export>)]);
    let mut c = RawClient::connect(&server.socket);
    c.go("g", false);
    let len = 64 << 10;
    let data = pattern(len * 16, 3);
    // Writes that leave a gap between each other, then contiguous writes with a read of
    // another region between each two: all sent before any reply is read.
    let mut sent = Vec::new();
    for i in 0..16usize {
        let gapped = i < 8;
        let offset = if gapped {
            i * 2 * len
        } else {
            (8 << 20) + i * len
        } as u64;
        c.request(0, WRITE, 10 + i as u64, offset, len as u32);
        c.stream.write_all(&data[i * len..(i + 1) * len]).unwrap();
        sent.push((offset, i));
        if !gapped {
            c.request(0, READ, 100 + i as u64, 12 << 20, 4096);
        }
    }
    let mut got = BTreeSet::new();
    for _ in 0..24 {
        let (err, cookie) = c.simple_reply();
        assert_eq!(err, 0);
        if cookie >= 100 {
            let mut back = vec![0u8; 4096];
            c.stream.read_exact(&mut back).unwrap();
            assert!(back.iter().all(|&b| b == 0), "read {cookie}");
        }
        got.insert(cookie);
    }
    assert_eq!(got.len(), 24);
    for (offset, i) in sent {
        let back = read_back(&mut c, 9999, offset, len);
        assert_eq!(back, data[i * len..(i + 1) * len], "write {i}");
    }
    let writes = export.writes.lock().unwrap().clone();
    assert_eq!(writes.len(), 16, "nothing was bridged: {writes:?}");
    assert!(writes.iter().all(|&(_, l)| l == len));
}

#[test]
fn a_failed_gathered_write_fails_every_request_in_it() {
    // Writes into [UNIT/2, UNIT) fail.
    let export = recording((UNIT / 2, UNIT));
    let server = Running::start(vec![("g", export.clone() as Arc<dyn Export>)]);
    let mut c = RawClient::connect(&server.socket);
    c.go("g", false);
    let len = 64 << 10;
    let replies = pipelined_writes(&mut c, 1, 0, len, 16, 5);
    let writes = export.writes.lock().unwrap().clone();
    for (err, cookie) in replies {
        let offset = (cookie - 1) * len as u64;
        // The request's outcome is that of the write that carried it.
        let (o, l) = writes
            .iter()
            .copied()
            .find(|&(o, l)| (o..o + l as u64).contains(&offset))
            .expect("every request was written");
        let failed = o < UNIT && UNIT / 2 < o + l as u64;
        assert_eq!(err, if failed { EIO } else { 0 }, "cookie {cookie}");
    }
}
