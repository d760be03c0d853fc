//! The TLS stream the workers of a connection share, driven byte by byte by a rustls client
//! in this process (the real clients in tls.rs cannot be made to do these things on
//! purpose): a second STARTTLS over TLS is refused, pipelined requests with TLS 1.3 key
//! updates in between all come back intact (the server's reader answers a key update under
//! the writer lock while workers send), `close_notify` ends the connection cleanly and is
//! answered, and bytes that are not TLS end it as a protocol violation.

mod common;

use common::*;
use raidkit_nbd::{ConnectionEnd, Export, MemoryExport, ServerEvent, TlsConfig, TlsMode};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const NBD_OPT_STARTTLS: u32 = 5;
const NBD_REP_ACK: u32 = 1;
const NBD_REP_INFO: u32 = 3;
const NBD_REP_ERR_INVALID: u32 = 0x8000_0003;
const READ: u16 = 0;
const WRITE: u16 = 1;
const DISC: u16 = 2;

type Ends = Arc<Mutex<Vec<String>>>;

fn server(pki: &Pki) -> (Running, Ends) {
    let ends: Ends = Arc::default();
    let sink = ends.clone();
    let config =
        Arc::new(TlsConfig::from_pem_files(&pki.server_cert(), &pki.server_key(), None).unwrap());
    let disk: Arc<dyn Export> = Arc::new(MemoryExport::new(16 << 20));
    let running = Running::start_with(vec![("disk", disk)], move |b| {
        b.tls(TlsMode::Require, Some(config))
            .observer(Arc::new(move |e: &ServerEvent<'_>| {
                if let ServerEvent::Closed { end, .. } = e {
                    let line = match end {
                        ConnectionEnd::Closed => "closed".to_string(),
                        ConnectionEnd::ProtocolViolation(why) => format!("violation: {why}"),
                        other => format!("{other:?}"),
                    };
                    sink.lock().unwrap().push(line);
                }
            }))
    });
    (running, ends)
}

fn client_config(pki: &Pki) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(pki.ca_cert()).unwrap())
        .unwrap();
    Arc::new(
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

fn option(option: u32, data: &[u8]) -> Vec<u8> {
    let mut v = b"IHAVEOPT".to_vec();
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

fn option_reply(s: &mut impl Read) -> (u32, u32, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).unwrap();
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
    let mut data = vec![0u8; len];
    s.read_exact(&mut data).unwrap();
    (
        u32::from_be_bytes(h[8..12].try_into().unwrap()),
        u32::from_be_bytes(h[12..16].try_into().unwrap()),
        data,
    )
}

fn request(flags: u16, command: u16, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
    let mut v = 0x25609513u32.to_be_bytes().to_vec();
    v.extend_from_slice(&flags.to_be_bytes());
    v.extend_from_slice(&command.to_be_bytes());
    v.extend_from_slice(&cookie.to_be_bytes());
    v.extend_from_slice(&offset.to_be_bytes());
    v.extend_from_slice(&len.to_be_bytes());
    v
}

fn simple_reply(s: &mut impl Read) -> (u32, u64) {
    let mut h = [0u8; 16];
    s.read_exact(&mut h).unwrap();
    assert_eq!(u32::from_be_bytes(h[0..4].try_into().unwrap()), 0x67446698);
    (
        u32::from_be_bytes(h[4..8].try_into().unwrap()),
        u64::from_be_bytes(h[8..16].try_into().unwrap()),
    )
}

/// Greets, asks for STARTTLS in clear, and runs the TLS handshake.
fn start_tls(socket: &std::path::Path, pki: &Pki) -> StreamOwned<ClientConnection, UnixStream> {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    s.write_all(&3u32.to_be_bytes()).unwrap();
    s.write_all(&option(NBD_OPT_STARTTLS, &[])).unwrap();
    assert_eq!(
        option_reply(&mut s),
        (NBD_OPT_STARTTLS, NBD_REP_ACK, vec![])
    );
    let name = ServerName::try_from("localhost").unwrap();
    let conn = ClientConnection::new(client_config(pki), name).unwrap();
    let mut tls = StreamOwned::new(conn, s);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).unwrap();
    }
    tls
}

fn go(tls: &mut StreamOwned<ClientConnection, UnixStream>) {
    let mut data = 4u32.to_be_bytes().to_vec();
    data.extend_from_slice(b"disk");
    data.extend_from_slice(&1u16.to_be_bytes());
    data.extend_from_slice(&3u16.to_be_bytes());
    tls.write_all(&option(7, &data)).unwrap();
    loop {
        match option_reply(tls).1 {
            NBD_REP_ACK => break,
            NBD_REP_INFO => {}
            other => panic!("NBD_OPT_GO failed with {other:#x}"),
        }
    }
}

#[test]
fn key_updates_between_pipelined_requests_and_close_notify() {
    let Some(pki) = make_pki() else { return };
    let (server, ends) = server(&pki);
    let mut tls = start_tls(&server.socket, &pki);
    // Over TLS, a second STARTTLS is invalid and negotiation goes on.
    tls.write_all(&option(NBD_OPT_STARTTLS, &[])).unwrap();
    assert_eq!(option_reply(&mut tls).1, NBD_REP_ERR_INVALID);
    go(&mut tls);

    // Rounds of pipelined writes (more than the workers), a key update asked of the server
    // in the middle of each round, then reads of everything back.
    let chunk = 192 << 10;
    for round in 0..3u64 {
        let data = pattern(16 * chunk, round);
        for i in 0..16 {
            let cookie = round * 100 + i as u64;
            tls.write_all(&request(0, WRITE, cookie, (i * chunk) as u64, chunk as u32))
                .unwrap();
            tls.write_all(&data[i * chunk..(i + 1) * chunk]).unwrap();
            if i == 7 {
                tls.conn.refresh_traffic_keys().unwrap();
            }
        }
        tls.flush().unwrap();
        let mut cookies: Vec<u64> = (0..16)
            .map(|_| simple_reply(&mut tls))
            .map(|(e, c)| {
                assert_eq!(e, 0);
                c
            })
            .collect();
        cookies.sort();
        assert_eq!(
            cookies,
            (0..16).map(|i| round * 100 + i).collect::<Vec<_>>()
        );
        for i in 0..16 {
            tls.write_all(&request(
                0,
                READ,
                i as u64,
                (i * chunk) as u64,
                chunk as u32,
            ))
            .unwrap();
        }
        tls.conn.refresh_traffic_keys().unwrap();
        tls.flush().unwrap();
        for _ in 0..16 {
            let (error, cookie) = simple_reply(&mut tls);
            assert_eq!(error, 0);
            let i = cookie as usize;
            let mut back = vec![0u8; chunk];
            tls.read_exact(&mut back).unwrap();
            assert!(
                back == data[i * chunk..(i + 1) * chunk],
                "round {round} chunk {i}"
            );
        }
    }
    // close_notify: the server ends the connection cleanly and answers with its own.
    tls.conn.send_close_notify();
    tls.flush().unwrap();
    let mut rest = Vec::new();
    assert_eq!(tls.read_to_end(&mut rest).unwrap(), 0, "clean end, no data");

    // Another client says goodbye with NBD_CMD_DISC and also gets close_notify.
    let mut tls = start_tls(&server.socket, &pki);
    go(&mut tls);
    tls.write_all(&request(0, DISC, 1, 0, 0)).unwrap();
    tls.flush().unwrap();
    let mut rest = Vec::new();
    assert_eq!(tls.read_to_end(&mut rest).unwrap(), 0);
    server.stop();
    assert_eq!(*ends.lock().unwrap(), vec!["closed", "closed"]);
}

#[test]
fn bytes_that_are_not_tls_end_the_connection() {
    let Some(pki) = make_pki() else { return };
    let (server, ends) = server(&pki);
    let mut tls = start_tls(&server.socket, &pki);
    go(&mut tls);
    // A forged record: right header, garbage inside.
    let mut forged = vec![0x17, 0x03, 0x03, 0x00, 0x40];
    forged.extend_from_slice(&[0x5a; 0x40]);
    tls.sock.write_all(&forged).unwrap();
    let mut rest = Vec::new();
    let _ = tls.sock.read_to_end(&mut rest);
    // A client whose TLS handshake is garbage.
    let mut s = UnixStream::connect(&server.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    s.write_all(&3u32.to_be_bytes()).unwrap();
    s.write_all(&option(NBD_OPT_STARTTLS, &[])).unwrap();
    assert_eq!(option_reply(&mut s).1, NBD_REP_ACK);
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let _ = s.read_to_end(&mut rest);
    let report = server.stop();
    assert_eq!(report.tls_refusals, 1, "the garbage handshake");
    let ends = ends.lock().unwrap().clone();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(
        ends.iter().any(|e| e.starts_with("violation: TLS")),
        "{ends:?}"
    );
}
