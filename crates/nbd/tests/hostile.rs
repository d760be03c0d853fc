//! Hostile and broken clients over a raw socket: every bad request gets the protocol's error,
//! protocol violations close only that connection, and a well-behaved client (and the data)
//! is unaffected throughout.

mod common;

use common::*;
use raidkit_nbd::handshake::{Catalog, ExportInfo};
use raidkit_nbd::{ConnectionEnd, Export, MemoryExport, Server};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

const READ: u16 = 0;
const WRITE: u16 = 1;
const DISC: u16 = 2;
const FLUSH: u16 = 3;
const TRIM: u16 = 4;
const WRITE_ZEROES: u16 = 6;
const EPERM: u32 = 1;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;
const EOVERFLOW: u32 = 75;
const SIZE: u64 = 8 << 20;

type Exports = Vec<(&'static str, Arc<dyn Export>)>;

fn exports() -> (Arc<MemoryExport>, Exports) {
    let disk = Arc::new(MemoryExport::new(SIZE));
    disk.write_at(0, &pattern(1 << 20, 7), false).unwrap();
    let ro: Arc<dyn Export> = Arc::new(MemoryExport::new(SIZE).with_read_only(true));
    (
        disk.clone(),
        vec![("disk", disk as Arc<dyn Export>), ("ro", ro)],
    )
}

/// A good client: writes, reads back and checks, on its own connection.
fn good_client_works(socket: &std::path::Path, offset: u64, seed: u64) {
    let mut c = RawClient::connect(socket);
    c.go("disk", false);
    let data = pattern(64 << 10, seed);
    c.request(0, WRITE, 1, offset, data.len() as u32);
    c.stream.write_all(&data).unwrap();
    assert_eq!(c.simple_reply(), (0, 1));
    c.request(0, READ, 2, offset, data.len() as u32);
    assert_eq!(c.simple_reply(), (0, 2));
    let mut back = vec![0u8; data.len()];
    c.stream.read_exact(&mut back).unwrap();
    assert_eq!(back, data);
    c.request(0, DISC, 3, 0, 0);
    assert!(c.closed_by_server());
}

#[test]
fn bad_requests_get_spec_errors_and_the_connection_survives() {
    let (disk, exports) = exports();
    let server = Running::start(exports);
    let mut c = RawClient::connect(&server.socket);
    c.go("disk", false);
    let cases: &[(u16, u16, u64, u32, u32)] = &[
        // (flags, command, offset, len, expected error)
        (0, READ, SIZE, 512, EINVAL),            // beyond the end
        (0, READ, SIZE - 512, 1024, EINVAL),     // straddles the end
        (0, READ, u64::MAX - 511, 1024, EINVAL), // offset + len overflows
        (0, READ, 1, 512, EINVAL),               // misaligned offset
        (0, READ, 0, 100, EINVAL),               // misaligned length
        (0, READ, 0, 64 << 20, EINVAL),          // longer than the maximum payload
        (0, 99, 0, 0, EINVAL),                   // unknown command
        (0, 7, 0, 512, EINVAL),                  // block status without a context
        (0x80, READ, 0, 512, EINVAL),            // unknown flag
        (4, READ, 0, 512, EINVAL),               // DF without structured replies
        (0, FLUSH, 512, 0, EINVAL),              // flush with a range
        (0, TRIM, SIZE, 512, EINVAL),            // trim beyond the end
        (0, WRITE_ZEROES, SIZE, 512, ENOSPC),    // zeroes beyond the end
        (0x10, WRITE_ZEROES, 0, 512, EINVAL),    // FAST_ZERO not advertised
    ];
    for (i, &(flags, command, offset, len, error)) in cases.iter().enumerate() {
        let cookie = 100 + i as u64;
        c.request(flags, command, cookie, offset, len);
        assert_eq!(c.simple_reply(), (error, cookie), "case {i}");
    }
    // Writes beyond the end: ENOSPC, and the payload is skipped so the stream stays in step.
    c.request(0, WRITE, 200, SIZE - 512, 4096);
    c.stream.write_all(&[0xee; 4096]).unwrap();
    assert_eq!(c.simple_reply(), (ENOSPC, 200));
    // An oversized write within the discard bound: refused, payload skipped.
    let oversized = (32 << 20) + 512;
    c.request(0, WRITE, 201, 0, oversized);
    let junk = vec![0xee; 1 << 20];
    let mut left = oversized as usize;
    while left > 0 {
        let n = left.min(junk.len());
        c.stream.write_all(&junk[..n]).unwrap();
        left -= n;
    }
    assert_eq!(c.simple_reply(), (EINVAL, 201));
    // Still in step: a valid read returns the original data.
    c.request(0, READ, 202, 0, 4096);
    assert_eq!(c.simple_reply(), (0, 202));
    let mut back = vec![0u8; 4096];
    c.stream.read_exact(&mut back).unwrap();
    assert_eq!(back, pattern(1 << 20, 7)[..4096]);
    // A zero-length read is answered without data and without a hang-up.
    c.request(0, READ, 203, 0, 0);
    assert_eq!(c.simple_reply(), (0, 203));

    good_client_works(&server.socket, 2 << 20, 1);

    // A WRITE whose payload the server will not skip ends the connection.
    c.request(0, WRITE, 204, 0, !511u32);
    assert!(c.closed_by_server());
    good_client_works(&server.socket, 3 << 20, 2);

    let mut after = vec![0u8; 1 << 20];
    disk.read_at(0, &mut after).unwrap();
    assert_eq!(
        after,
        pattern(1 << 20, 7),
        "no rejected write touched the export"
    );
    assert!(server.stop().all_flushed());
}

#[test]
fn read_only_export_refuses_writes_with_eperm() {
    let (_, exports) = exports();
    let server = Running::start(exports);
    let mut c = RawClient::connect(&server.socket);
    let flags = c.go("ro", false);
    assert_ne!(flags & 2, 0, "NBD_FLAG_READ_ONLY");
    c.request(0, WRITE, 1, 0, 512);
    c.stream.write_all(&[1u8; 512]).unwrap();
    assert_eq!(c.simple_reply(), (EPERM, 1));
    c.request(0, TRIM, 2, 0, 512);
    assert_eq!(c.simple_reply(), (EPERM, 2));
    c.request(0, WRITE_ZEROES, 3, 0, 512);
    assert_eq!(c.simple_reply(), (EPERM, 3));
    c.request(0, READ, 4, 0, 512);
    assert_eq!(c.simple_reply(), (0, 4));
    let mut back = [1u8; 512];
    c.stream.read_exact(&mut back).unwrap();
    assert_eq!(back, [0u8; 512]);
}

#[test]
fn structured_replies_carry_errors_and_data() {
    let (_, exports) = exports();
    let server = Running::start(exports);
    let mut c = RawClient::connect(&server.socket);
    let flags = c.go("disk", true);
    assert_ne!(
        flags & (1 << 7),
        0,
        "NBD_FLAG_SEND_DF with structured replies"
    );
    c.request(4, READ, 9, 4096, 4096);
    let (chunk_flags, kind, cookie, payload) = c.structured_chunk();
    assert_eq!((chunk_flags, kind, cookie), (1, 1, 9));
    assert_eq!(u64::from_be_bytes(payload[..8].try_into().unwrap()), 4096);
    assert_eq!(&payload[8..], &pattern(1 << 20, 7)[4096..8192]);
    // An oversized read is refused with EOVERFLOW in an error chunk.
    c.request(0, READ, 10, 0, 64 << 20);
    let (chunk_flags, kind, cookie, payload) = c.structured_chunk();
    assert_eq!((chunk_flags, kind, cookie), (1, 0x8001, 10));
    assert_eq!(
        u32::from_be_bytes(payload[..4].try_into().unwrap()),
        EOVERFLOW
    );
    let message_len = u16::from_be_bytes([payload[4], payload[5]]) as usize;
    assert_eq!(payload.len(), 6 + message_len);
    assert!(message_len > 0);
    // Out of range: EINVAL in an error chunk.
    c.request(0, READ, 11, SIZE, 512);
    let (_, kind, _, payload) = c.structured_chunk();
    assert_eq!(kind, 0x8001);
    assert_eq!(u32::from_be_bytes(payload[..4].try_into().unwrap()), EINVAL);
}

#[test]
fn garbage_and_broken_clients_only_close_their_own_connection() {
    let (disk, exports) = exports();
    let server = Running::start(exports);

    // A good client stays connected throughout.
    let mut good = RawClient::connect(&server.socket);
    good.go("disk", false);

    // Garbage instead of client flags / options.
    for garbage in [
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        vec![0xff; 4],
        pattern(4096, 3),
    ] {
        let mut c = RawClient::connect(&server.socket);
        let mut greeting = [0u8; 18];
        c.stream.read_exact(&mut greeting).unwrap();
        let _ = c.stream.write_all(&garbage);
        assert!(c.closed_by_server());
    }
    // Valid flags, then an option with a bad magic.
    let mut c = RawClient::connect(&server.socket);
    c.greet();
    c.stream.write_all(b"IHAVEOPX\0\0\0\x07\0\0\0\0").unwrap();
    assert!(c.closed_by_server());
    // An option claiming 4 GiB of data.
    let mut c = RawClient::connect(&server.socket);
    c.greet();
    c.stream
        .write_all(b"IHAVEOPT\0\0\0\x07\xff\xff\xff\xff")
        .unwrap();
    assert!(c.closed_by_server());
    // An unknown option is answered with NBD_REP_ERR_UNSUP and negotiation continues.
    let mut c = RawClient::connect(&server.socket);
    c.greet();
    c.send_option(0x4242, b"whatever");
    assert_eq!(
        c.option_reply(),
        (
            0x4242,
            0x8000_0001,
            b"option not supported by this server".to_vec()
        )
    );
    c.send_option(2, &[]);
    assert_eq!(c.option_reply().1, 1, "NBD_OPT_ABORT acknowledged");
    assert!(c.closed_by_server());

    // Bad request magic in transmission.
    let mut c = RawClient::connect(&server.socket);
    c.go("disk", false);
    c.stream.write_all(&[0x55; 28]).unwrap();
    assert!(c.closed_by_server());

    // Disconnect in the middle of a write payload.
    let mut c = RawClient::connect(&server.socket);
    c.go("disk", false);
    c.request(0, WRITE, 1, 0, 1 << 20);
    c.stream.write_all(&[0xee; 1000]).unwrap();
    drop(c);
    // Disconnect in the middle of a header.
    let mut c = RawClient::connect(&server.socket);
    c.go("disk", false);
    c.stream.write_all(&[0x25, 0x60, 0x95]).unwrap();
    drop(c);
    // Many requests in flight, then vanish without reading replies.
    let mut c = RawClient::connect(&server.socket);
    c.go("disk", false);
    for cookie in 0..64 {
        c.request(0, READ, cookie, 0, 1 << 20);
    }
    drop(c);

    // The good client, connected all along, still works; so does a new one.
    good.request(0, READ, 77, 0, 4096);
    assert_eq!(good.simple_reply(), (0, 77));
    let mut back = vec![0u8; 4096];
    good.stream.read_exact(&mut back).unwrap();
    assert_eq!(back, pattern(1 << 20, 7)[..4096]);
    good_client_works(&server.socket, 4 << 20, 3);

    let mut after = vec![0u8; 1 << 20];
    disk.read_at(0, &mut after).unwrap();
    assert_eq!(
        after,
        pattern(1 << 20, 7),
        "the half-sent write never reached the export"
    );
    let report = server.stop();
    assert!(report.handshake_failures >= 5, "{report:?}");
}

#[test]
fn serve_connection_reports_how_it_ended() {
    let server = Server::builder()
        .export("disk", Arc::new(MemoryExport::new(1 << 20)))
        .build()
        .unwrap();
    assert!(server.find("").is_some(), "one export is the default");
    assert_eq!(
        server.find("disk").map(|i: ExportInfo| i.size_bytes),
        Some(1 << 20)
    );

    let (a, b) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || {
        let mut c = RawClient { stream: b };
        c.stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        c.go("disk", false);
        c.stream.write_all(&[0u8; 28]).unwrap();
        assert!(c.closed_by_server());
    });
    let end = server.serve_connection(a.into());
    t.join().unwrap();
    assert!(
        matches!(end, ConnectionEnd::ProtocolViolation(_)),
        "{end:?}"
    );

    let (a, b) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || {
        let mut c = RawClient { stream: b };
        c.go("disk", false);
        c.request(0, DISC, 1, 0, 0);
        assert!(c.closed_by_server());
    });
    assert_eq!(server.serve_connection(a.into()), ConnectionEnd::Closed);
    t.join().unwrap();
}

#[test]
fn too_many_connections_are_refused_without_harming_the_others() {
    use raidkit_nbd::{Peer, RefusalReason, ServerEvent};
    use std::sync::Mutex;
    type Seen = Vec<(Option<u64>, Peer, RefusalReason)>;
    let refusals: Arc<Mutex<Seen>> = Arc::default();
    let sink = refusals.clone();
    let (_, exports) = exports();
    let server = Running::start_with(exports, move |b| {
        b.max_connections(2)
            .observer(Arc::new(move |e: &ServerEvent<'_>| {
                if let ServerEvent::Refused {
                    connection,
                    peer,
                    reason,
                } = e
                {
                    sink.lock()
                        .unwrap()
                        .push((*connection, (*peer).clone(), (*reason).clone()));
                }
            }))
    });
    let mut first = RawClient::connect(&server.socket);
    first.go("disk", false);
    let mut second = RawClient::connect(&server.socket);
    second.go("disk", false);
    let mut third = RawClient::connect(&server.socket);
    assert!(
        third.closed_by_server(),
        "a third connection is closed at once"
    );
    first.request(0, READ, 1, 0, 512);
    assert_eq!(first.simple_reply(), (0, 1));
    drop(first);
    drop(second);
    std::thread::sleep(Duration::from_millis(300));
    good_client_works(&server.socket, 0, 9);
    let report = server.stop();
    assert_eq!(report.connections_refused, 1);
    let refusals = refusals.lock().unwrap().clone();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    let (connection, peer, reason) = &refusals[0];
    assert_eq!(*connection, None, "refused before it got an id");
    assert_eq!(*reason, RefusalReason::TooManyConnections { limit: 2 });
    assert!(
        matches!(peer, Peer::Unix { pid, .. } if *pid == std::process::id() as i32),
        "the refusal says who: {peer}"
    );
}

#[test]
fn shutdown_finishes_in_flight_requests_and_flushes() {
    let (disk, exports) = exports();
    let server = Running::start(exports);
    let mut c = RawClient::connect(&server.socket);
    c.go("disk", false);
    let data = pattern(256 << 10, 11);
    for cookie in 0..8u64 {
        c.request(0, WRITE, cookie, cookie * (256 << 10), data.len() as u32);
        c.stream.write_all(&data).unwrap();
    }
    // Every write is answered, even though shutdown begins right away.
    let report = std::thread::spawn(move || server.stop());
    let mut cookies: Vec<u64> = (0..8)
        .map(|_| c.simple_reply())
        .map(|(e, k)| {
            assert_eq!(e, 0);
            k
        })
        .collect();
    cookies.sort();
    assert_eq!(cookies, (0..8).collect::<Vec<_>>());
    assert!(c.closed_by_server());
    let report = report.join().unwrap();
    assert!(report.all_flushed());
    let mut back = vec![0u8; data.len()];
    disk.read_at(7 * (256 << 10), &mut back).unwrap();
    assert_eq!(back, data);
}

/// An export with no cheap zeroing: the server must emulate WRITE_ZEROES with writes.
struct NoZero(MemoryExport);

impl Export for NoZero {
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> std::io::Result<()> {
        self.0.write_at(offset, data, fua)
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn write_zeroes(&self, _: u64, _: u64, _: bool, _: bool) -> std::io::Result<()> {
        Err(std::io::Error::other(
            "write_zeroes must not be called when can_zero is false",
        ))
    }
}

#[test]
fn write_zeroes_is_emulated_when_the_export_cannot_zero() {
    let inner = MemoryExport::new(SIZE);
    inner.write_at(0, &[0xaa; 8192], false).unwrap();
    let server = Running::start(vec![("nz", Arc::new(NoZero(inner)) as Arc<dyn Export>)]);
    let mut c = RawClient::connect(&server.socket);
    let flags = c.go("nz", false);
    assert_ne!(flags & (1 << 6), 0, "NBD_FLAG_SEND_WRITE_ZEROES offered");
    assert_eq!(
        flags & (1 << 5),
        0,
        "no NBD_FLAG_SEND_TRIM without can_trim"
    );
    c.request(0, WRITE_ZEROES, 1, 4096, 4096);
    assert_eq!(c.simple_reply(), (0, 1));
    c.request(0, READ, 2, 0, 8192);
    assert_eq!(c.simple_reply(), (0, 2));
    let mut back = vec![0u8; 8192];
    c.stream.read_exact(&mut back).unwrap();
    assert!(back[..4096].iter().all(|&b| b == 0xaa));
    assert!(back[4096..].iter().all(|&b| b == 0));
}

#[test]
fn shutdown_cuts_a_client_that_never_reads_its_replies() {
    let (_, exports) = exports();
    let server = Running::start_with(exports, |b| b.shutdown_grace(Duration::from_millis(300)));
    let mut stalled = RawClient::connect(&server.socket);
    stalled.go("disk", false);
    // 64 MiB of read replies that the client never reads: the server blocks sending them.
    for cookie in 0..64 {
        stalled.request(0, READ, cookie, 0, 1 << 20);
    }
    std::thread::sleep(Duration::from_millis(200));
    // Other clients are unaffected while it stalls.
    good_client_works(&server.socket, 5 << 20, 4);
    let start = std::time::Instant::now();
    let report = server.stop();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(report.connections_cut, 1, "{report:?}");
    assert!(report.all_flushed());
}

/// An export with a bug: it panics when reading its last block.
struct Buggy(MemoryExport);

impl Export for Buggy {
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        if offset + buf.len() as u64 == self.0.size_bytes() {
            panic!("deliberate export bug");
        }
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> std::io::Result<()> {
        self.0.write_at(offset, data, fua)
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_panicking_export_ends_only_the_connection_that_hit_it() {
    let buggy: Arc<dyn Export> = Arc::new(Buggy(MemoryExport::new(SIZE)));
    let (_, mut exports) = exports();
    exports.push(("buggy", buggy));
    let server = Running::start(exports);
    let mut bystander = RawClient::connect(&server.socket);
    bystander.go("buggy", false);
    let mut victim = RawClient::connect(&server.socket);
    victim.go("buggy", false);
    victim.request(0, READ, 1, SIZE - 4096, 4096);
    assert!(victim.closed_by_server());
    // The same export still serves other connections and new ones.
    bystander.request(0, READ, 2, 0, 4096);
    assert_eq!(bystander.simple_reply(), (0, 2));
    let mut back = vec![1u8; 4096];
    bystander.stream.read_exact(&mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    good_client_works(&server.socket, 0, 5);
    assert!(server.stop().all_flushed());
}

#[test]
fn binding_over_a_live_socket_is_refused_but_a_stale_one_is_replaced() {
    let (_, exports) = exports();
    let server = Running::start(exports);
    let err = raidkit_nbd::Listener::bind_unix(&server.socket).err();
    assert_eq!(err.map(|e| e.kind()), Some(std::io::ErrorKind::AddrInUse));
    good_client_works(&server.socket, 0, 6);
    drop(server);

    let dir = TempDir::new("stale");
    let path = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists(), "a stale socket file is left behind");
    let listener = raidkit_nbd::Listener::bind_unix(&path).unwrap();
    assert_eq!(listener.describe(), path.display().to_string());
}

#[test]
fn a_client_trickling_its_handshake_is_timed_out() {
    let (_, exports) = exports();
    let server = Running::start_with(exports, |b| b.handshake_timeout(Duration::from_millis(400)));
    let mut c = RawClient::connect(&server.socket);
    c.greet();
    // One byte of an option header every 100 ms: each read is quick, the whole is too slow.
    let start = std::time::Instant::now();
    let mut closed = false;
    for &b in b"IHAVEOPT\0\0\0\x03\0\0\0\0" {
        if c.stream.write_all(&[b]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(closed || c.closed_by_server());
    assert!(start.elapsed() < Duration::from_secs(5));
    good_client_works(&server.socket, 0, 8);
}

#[test]
fn the_observer_sees_each_connection_from_accept_to_close() {
    use std::sync::Mutex;
    let log: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    let (_, exports) = exports();
    let server = Running::start_with(exports, move |b| {
        b.observer(Arc::new(move |e: &raidkit_nbd::ServerEvent<'_>| {
            let line = match e {
                raidkit_nbd::ServerEvent::Accepted { connection, peer } => {
                    // The client is this process, and the kernel says so.
                    let me = raidkit_nbd::Peer::Unix {
                        pid: std::process::id() as i32,
                        uid: unsafe { libc::geteuid() },
                        gid: unsafe { libc::getegid() },
                    };
                    assert_eq!(**peer, me);
                    format!("accepted {connection}")
                }
                raidkit_nbd::ServerEvent::Negotiated {
                    connection, export, ..
                } => {
                    format!("negotiated {connection} {export}")
                }
                raidkit_nbd::ServerEvent::Closed { connection, end } => {
                    format!("closed {connection} {end:?}")
                }
                raidkit_nbd::ServerEvent::Refused { reason, .. } => format!("refused {reason}"),
                raidkit_nbd::ServerEvent::Throttled { connection, .. } => {
                    format!("throttled {connection}")
                }
            };
            sink.lock().unwrap().push(line);
        }))
    });
    good_client_works(&server.socket, 0, 10);
    server.stop();
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        vec!["accepted 0", "negotiated 0 disk", "closed 0 Closed"],
        "{log:?}"
    );
}

/// An export with a 512-byte minimum block size refuses a client that did not ask for block
/// sizes (NBD_REP_ERR_BLOCK_SIZE_REQD), over a real socket; the same client asking again with
/// NBD_INFO_BLOCK_SIZE gets in.
#[test]
fn go_without_a_block_size_request_is_refused_at_negotiation() {
    const NBD_REP_ERR_BLOCK_SIZE_REQD: u32 = 0x8000_0008;
    let (_, exports) = exports();
    let server = Running::start(exports);
    let mut c = RawClient::connect(&server.socket);
    c.greet();
    let go = |infos: &[u16]| {
        let mut data = 4u32.to_be_bytes().to_vec();
        data.extend_from_slice(b"disk");
        data.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            data.extend_from_slice(&i.to_be_bytes());
        }
        data
    };
    c.send_option(NBD_OPT_GO, &go(&[]));
    let (option, reply, message) = c.option_reply();
    assert_eq!((option, reply), (NBD_OPT_GO, NBD_REP_ERR_BLOCK_SIZE_REQD));
    let message = String::from_utf8(message).unwrap();
    assert!(
        message.contains("512") && message.contains("disk"),
        "{message}"
    );
    // Negotiation goes on; asking for block sizes gets the export.
    c.send_option(NBD_OPT_GO, &go(&[1, 3]));
    loop {
        let (_, reply, _) = c.option_reply();
        match reply {
            1 => break,
            3 => {}
            other => panic!("NBD_OPT_GO failed with {other:#x}"),
        }
    }
    c.request(0, READ, 1, 512, 512);
    assert_eq!(c.simple_reply(), (0, 1));
}
