//! Fuzz-style property tests: random and mutated byte streams through the sans-IO codec and
//! through a whole connection, asserting no panic, bounded buffering, that every request
//! the codec lets through is one the export can take, and that with TLS required no
//! negotiation reaches the transmission phase without TLS.

mod common;

use proptest::prelude::*;
use raidkit_nbd::handshake::{
    Catalog, ExportInfo, Handshake, Outcome, TlsMode, MAX_OPTION_DATA_BYTES,
};
use raidkit_nbd::proto::*;
use raidkit_nbd::transmission::{Command, Decision, RequestHeader, Session, MAX_DISCARD_BYTES};
use raidkit_nbd::{BlockSize, ConnectionEnd, Export, MemoryExport, Server};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

struct Fixed(Vec<ExportInfo>);

impl Catalog for Fixed {
    fn find(&self, name: &str) -> Option<ExportInfo> {
        if name.is_empty() {
            return self.0.first().cloned();
        }
        self.0.iter().find(|e| e.name == name).cloned()
    }
    fn list(&self) -> Vec<(String, Option<String>)> {
        self.0
            .iter()
            .map(|e| (e.name.clone(), e.description.clone()))
            .collect()
    }
}

fn info(name: &str, read_only: bool) -> ExportInfo {
    ExportInfo {
        name: name.into(),
        description: Some("fuzz".into()),
        size_bytes: 1 << 20,
        block_size: BlockSize::default(),
        read_only,
        can_flush: true,
        can_fua: !read_only,
        can_trim: !read_only,
        can_zero: !read_only,
        can_multi_conn: true,
    }
}

fn catalog() -> Fixed {
    Fixed(vec![info("disk", false), info("ro", true)])
}

fn option(opt: u32, data: &[u8]) -> Vec<u8> {
    let mut v = IHAVEOPT.to_be_bytes().to_vec();
    v.extend_from_slice(&opt.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

fn go(name: &str) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&2u16.to_be_bytes());
    d.extend_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
    d.extend_from_slice(&NBD_INFO_NAME.to_be_bytes());
    d
}

/// A valid negotiation transcript, the seed the mutations start from.
fn valid_transcript() -> Vec<u8> {
    let mut v = 3u32.to_be_bytes().to_vec();
    v.extend(option(NBD_OPT_LIST, &[]));
    v.extend(option(NBD_OPT_STRUCTURED_REPLY, &[]));
    v.extend(option(NBD_OPT_INFO, &go("ro")));
    v.extend(option(0x77, &[1, 2, 3, 4]));
    v.extend(option(NBD_OPT_GO, &go("disk")));
    v
}

/// The same, with TLS started first (what a client of a TLS server sends in clear, then
/// over TLS).
fn valid_tls_transcript() -> Vec<u8> {
    let mut v = 3u32.to_be_bytes().to_vec();
    v.extend(option(NBD_OPT_STARTTLS, &[]));
    v.extend(valid_transcript()[4..].iter().copied());
    v
}

fn mode(n: u8) -> TlsMode {
    [TlsMode::Off, TlsMode::On, TlsMode::Require][usize::from(n % 3)]
}

/// Feeds `input` in the given chunk sizes; checks the invariants after every step.
fn feed(input: &[u8], chunks: &[usize]) -> Option<Outcome> {
    feed_with_tls(input, chunks, TlsMode::Off)
}

/// Feeds `input` to a negotiation in TLS mode `tls`; when it acknowledges STARTTLS, the TLS
/// handshake is taken to succeed and the rest of the input is what arrived over TLS.
fn feed_with_tls(input: &[u8], chunks: &[usize], tls: TlsMode) -> Option<Outcome> {
    let cat = catalog();
    let mut hs = Handshake::with_tls(tls);
    let mut pos = 0;
    let mut chunk = chunks.iter().cycle();
    while pos < input.len() {
        let n = (*chunk.next().unwrap_or(&1)).max(1).min(input.len() - pos);
        match hs.receive(&input[pos..pos + n], &cat) {
            Ok(used) => {
                assert!(used <= n);
                pos += used;
                assert!(
                    hs.buffered_bytes() <= MAX_OPTION_DATA_BYTES + OPTION_HEADER_BYTES,
                    "buffered {} bytes",
                    hs.buffered_bytes()
                );
                // Output is replies to at most the options seen so far: bounded by input.
                let out = hs.take_output();
                assert!(out.len() <= 64 + 64 * input.len() + 8 * 4096);
                if hs.outcome().is_some() {
                    assert_eq!(hs.bytes_wanted(), 0);
                    if let Some(Outcome::Transmission(n)) = hs.outcome() {
                        assert_eq!(n.tls, hs.tls_active());
                        match tls {
                            TlsMode::Off => assert!(!n.tls, "TLS without TLS configured"),
                            TlsMode::Require => assert!(n.tls, "transmission without TLS"),
                            TlsMode::On => {}
                        }
                    }
                    return hs.into_outcome();
                }
                if hs.poll_start_tls() {
                    assert_ne!(tls, TlsMode::Off, "STARTTLS acknowledged with TLS off");
                    assert!(!hs.tls_active(), "a second STARTTLS acknowledged");
                    assert_eq!(hs.bytes_wanted(), 0);
                    hs.tls_established();
                    continue;
                }
                if used < n {
                    panic!("consumed {used} of {n} bytes without finishing");
                }
            }
            Err(_) => return None,
        }
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..4096),
                                chunks in proptest::collection::vec(1usize..64, 1..8)) {
        feed(&input, &chunks);
    }

    #[test]
    fn mutated_transcripts_never_panic(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 0..6),
        chunks in proptest::collection::vec(1usize..32, 1..8),
    ) {
        let mut t = valid_transcript();
        for (at, byte, kind) in edits {
            let at = at % (t.len() + 1);
            match kind {
                0 if at < t.len() => t[at] = byte,
                1 => t.insert(at, byte),
                _ if at < t.len() => { t.remove(at); }
                _ => {}
            }
        }
        if let Some(Outcome::Transmission(n)) = feed(&t, &chunks) {
            // Whatever the mutation, a negotiated export is a real one with consistent flags.
            let cat = catalog();
            let real = cat.find(&n.export.name).expect("negotiated export exists");
            prop_assert_eq!(&real, &n.export);
            prop_assert_eq!(n.transmission_flags, real.transmission_flags(n.structured_replies));
        }
    }

    #[test]
    fn random_bytes_never_panic_in_any_tls_mode(
        input in proptest::collection::vec(any::<u8>(), 0..4096),
        chunks in proptest::collection::vec(1usize..64, 1..8),
        tls in any::<u8>(),
    ) {
        let mut input = input;
        // Often a valid start, so the random part reaches option handling.
        if input.first().is_some_and(|b| b % 2 == 0) {
            let mut v = valid_tls_transcript()[..20].to_vec();
            v.extend(input);
            input = v;
        }
        feed_with_tls(&input, &chunks, mode(tls));
    }

    #[test]
    fn mutated_tls_transcripts_never_panic_nor_skip_tls(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 0..6),
        chunks in proptest::collection::vec(1usize..32, 1..8),
        tls in any::<u8>(),
        with_starttls in any::<bool>(),
    ) {
        let mut t = if with_starttls { valid_tls_transcript() } else { valid_transcript() };
        for (at, byte, kind) in edits {
            let at = at % (t.len() + 1);
            match kind {
                0 if at < t.len() => t[at] = byte,
                1 => t.insert(at, byte),
                _ if at < t.len() => { t.remove(at); }
                _ => {}
            }
        }
        // feed_with_tls asserts the TLS invariants at the outcome.
        if let Some(Outcome::Transmission(n)) = feed_with_tls(&t, &chunks, mode(tls)) {
            let real = catalog().find(&n.export.name).expect("negotiated export exists");
            prop_assert_eq!(&real, &n.export);
        }
    }

    #[test]
    fn unmutated_tls_transcript_negotiates_in_every_mode(
        chunks in proptest::collection::vec(1usize..40, 1..8),
    ) {
        for tls in [TlsMode::On, TlsMode::Require] {
            match feed_with_tls(&valid_tls_transcript(), &chunks, tls) {
                Some(Outcome::Transmission(n)) => {
                    prop_assert!(n.tls);
                    prop_assert!(n.structured_replies, "asked for again over TLS");
                    prop_assert_eq!(n.export.name.as_str(), "disk");
                }
                other => prop_assert!(false, "unexpected {:?}", other),
            }
        }
        // Without TLS configured, STARTTLS is refused and the clear negotiation goes on.
        match feed_with_tls(&valid_tls_transcript(), &chunks, TlsMode::Off) {
            Some(Outcome::Transmission(n)) => prop_assert!(!n.tls),
            other => prop_assert!(false, "unexpected {:?}", other),
        }
        // A client that never starts TLS never gets in when it is required.
        prop_assert!(feed_with_tls(&valid_transcript(), &chunks, TlsMode::Require).is_none());
    }

    #[test]
    fn unmutated_transcript_negotiates_in_any_chunking(chunks in proptest::collection::vec(1usize..40, 1..8)) {
        match feed(&valid_transcript(), &chunks) {
            Some(Outcome::Transmission(n)) => {
                prop_assert_eq!(n.export.name.as_str(), "disk");
                prop_assert!(n.structured_replies);
                prop_assert!(n.block_size_agreed);
            }
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }

    #[test]
    fn decide_only_executes_what_the_export_can_take(
        raw in proptest::collection::vec(any::<u8>(), REQUEST_HEADER_BYTES),
        command in 0u16..10,
        flags in 0u16..64,
        offset_blocks in 0u64..2100,
        len_blocks in 0u32..300,
        odd in any::<bool>(),
        flags_bits in any::<u16>(),
        structured in any::<bool>(),
        min_shift in 0u32..13,
    ) {
        let session = Session {
            size_bytes: 1 << 20,
            minimum_block_bytes: 1 << min_shift,
            maximum_payload_bytes: 64 << 10,
            transmission_flags: flags_bits | NBD_FLAG_HAS_FLAGS,
            structured_replies: structured,
        };
        let mut headers = vec![];
        let mut fixed = [0u8; REQUEST_HEADER_BYTES];
        fixed.copy_from_slice(&raw);
        fixed[0..4].copy_from_slice(&NBD_REQUEST_MAGIC.to_be_bytes());
        headers.push(RequestHeader::parse(&fixed).unwrap());
        headers.push(RequestHeader {
            flags,
            command,
            cookie: 5,
            offset: offset_blocks * 512 + u64::from(odd),
            len_bytes: len_blocks * 512,
        });
        for h in headers {
            match session.decide(&h) {
                Decision::Execute(r) => {
                    prop_assert_eq!(r.cookie, h.cookie);
                    let end = r.offset.checked_add(u64::from(r.len_bytes));
                    prop_assert!(end.is_some_and(|e| e <= session.size_bytes));
                    prop_assert_eq!(r.offset % u64::from(session.minimum_block_bytes), 0);
                    prop_assert_eq!(u64::from(r.len_bytes) % u64::from(session.minimum_block_bytes), 0);
                    if matches!(r.command, Command::Read | Command::Write { .. }) {
                        prop_assert!(r.len_bytes <= session.maximum_payload_bytes);
                    }
                    if matches!(r.command, Command::Write { .. } | Command::Trim { .. } | Command::WriteZeroes { .. }) {
                        prop_assert_eq!(session.transmission_flags & NBD_FLAG_READ_ONLY, 0);
                    }
                }
                Decision::Reject { discard_bytes, cookie, .. } => {
                    prop_assert_eq!(cookie, h.cookie);
                    prop_assert!(discard_bytes <= MAX_DISCARD_BYTES);
                    if h.command != NBD_CMD_WRITE {
                        prop_assert_eq!(discard_bytes, 0);
                    }
                }
                Decision::Disconnect(_) => {
                    prop_assert!(h.command == NBD_CMD_DISC || h.len_bytes > MAX_DISCARD_BYTES);
                }
            }
        }
    }
}

/// A valid handshake followed by `tail` (random requests) against a real connection over a
/// socket pair: the connection must end without panicking and the export stays usable.
fn run_stream(server: &Server, tail: Vec<u8>) -> ConnectionEnd {
    let (a, b) = UnixStream::pair().unwrap();
    b.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let reader = b.try_clone().unwrap();
    let drain = std::thread::spawn(move || {
        let mut reader = reader;
        let mut sink = vec![0u8; 1 << 16];
        let mut total = 0usize;
        while let Ok(n) = reader.read(&mut sink) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    let writer = std::thread::spawn(move || {
        let mut b = b;
        let mut input = 3u32.to_be_bytes().to_vec();
        input.extend(option(NBD_OPT_GO, &go("disk")));
        input.extend(tail);
        let _ = b.write_all(&input);
        let _ = b.shutdown(std::net::Shutdown::Write);
    });
    let end = server.serve_connection(a.into());
    writer.join().unwrap();
    drain.join().unwrap();
    end
}

fn request(flags: u16, command: u16, offset: u64, len: u32) -> Vec<u8> {
    RequestHeader {
        flags,
        command,
        cookie: 1,
        offset,
        len_bytes: len,
    }
    .encode()
    .to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn whole_connection_survives_hostile_streams(
        pieces in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..64),
                (0u16..3, 0u16..9, 0u64..(2 << 20), 0u32..(1 << 17))
                    .prop_map(|(f, c, o, l)| request(f, c, o & !511, l & !511)),
                (0u64..(1 << 20), 1u32..16).prop_map(|(o, blocks)| {
                    let mut v = request(0, NBD_CMD_WRITE, o & !511, blocks * 512);
                    v.extend(std::iter::repeat_n(0x5a, blocks as usize * 512));
                    v
                }),
            ],
            0..24,
        )
    ) {
        let export = Arc::new(MemoryExport::new(1 << 20));
        let server = Server::builder()
            .export("disk", export.clone())
            .threads_per_connection(4)
            .build()
            .unwrap();
        let tail: Vec<u8> = pieces.into_iter().flatten().collect();
        let end = run_stream(&server, tail);
        prop_assert!(end != ConnectionEnd::Panicked);
        // The export still serves.
        export.write_at(0, &[1u8; 512], false).unwrap();
        let mut back = [0u8; 512];
        export.read_at(0, &mut back).unwrap();
        prop_assert_eq!(back, [1u8; 512]);
    }
}
