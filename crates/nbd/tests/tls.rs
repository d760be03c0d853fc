//! TLS (NBD_OPT_STARTTLS) against real TLS clients: libnbd's nbdinfo and nbdcopy (GnuTLS)
//! over a unix socket, qemu-img and qemu-io (GnuTLS) over TCP. Certificates are made for
//! each run with the openssl CLI. A missing client or openssl fails the test with the
//! Debian package to install, unless RAIDKIT_SKIP_CLIENTS=1.

mod common;

use common::*;
use raidkit_nbd::{
    ConnectionEnd, Export, MemoryExport, RefusalReason, Server, ServerError, ServerEvent,
    TlsConfig, TlsError, TlsMode,
};
use std::process::Command;
use std::sync::{Arc, Mutex};

fn memory(size: u64) -> Arc<dyn Export> {
    Arc::new(MemoryExport::new(size))
}

fn tls_config(pki: &Pki, client_ca: bool) -> Arc<TlsConfig> {
    let ca = pki.ca_cert();
    Arc::new(
        TlsConfig::from_pem_files(
            &pki.server_cert(),
            &pki.server_key(),
            client_ca.then_some(ca.as_path()),
        )
        .unwrap(),
    )
}

/// What the observer saw, one line per event of interest.
type Seen = Arc<Mutex<Vec<String>>>;

fn observe(seen: &Seen) -> raidkit_nbd::Observer {
    let sink = seen.clone();
    Arc::new(move |e: &ServerEvent<'_>| {
        let line = match e {
            ServerEvent::Negotiated { export, tls, .. } => format!("negotiated {export} tls={tls}"),
            ServerEvent::Refused { reason, .. } => match reason {
                RefusalReason::TlsHandshake(_) => "refused: TLS handshake".to_string(),
                other => format!("refused: {other:?}"),
            },
            ServerEvent::Closed {
                end: ConnectionEnd::Closed,
                ..
            } => "closed".to_string(),
            ServerEvent::Closed { end, .. } => format!("closed: {end}"),
            _ => return,
        };
        sink.lock().unwrap().push(line);
    })
}

fn failure_text(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        !out.status.success(),
        "{cmd:?} was expected to fail:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn required_tls_carries_data_both_ways() {
    if !client_available("nbdcopy", "libnbd-bin") {
        return;
    }
    let Some(pki) = make_pki() else { return };
    let seen = Seen::default();
    let disk = Arc::new(MemoryExport::new(16 << 20));
    let server = Running::start_with(vec![("disk", disk.clone() as Arc<dyn Export>)], |b| {
        b.tls(TlsMode::Require, Some(tls_config(&pki, true)))
            .observer(observe(&seen))
    });
    let dir = TempDir::new("tls-copy");
    let source = dir.path().join("source.img");
    let back = dir.path().join("back.img");
    let data = pattern(16 << 20, 99);
    std::fs::write(&source, &data).unwrap();
    let uri = server.tls_uri("disk", &pki.client);
    run(Command::new("nbdcopy")
        .arg("--flush")
        .arg(&source)
        .arg(&uri));
    run(Command::new("nbdcopy").arg(&uri).arg(&back));
    assert_eq!(checksum(&std::fs::read(&back).unwrap()), checksum(&data));
    // What the export holds is what was sent, not ciphertext.
    let mut held = vec![0u8; data.len()];
    disk.read_at(0, &mut held).unwrap();
    assert_eq!(checksum(&held), checksum(&data));
    let report = server.stop();
    assert_eq!(report.tls_refusals, 0);
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .filter(|l| *l == "negotiated disk tls=true")
            .count()
            >= 2,
        "{seen:?}"
    );
    assert!(!seen.iter().any(|l| l.contains("tls=false")), "{seen:?}");
}

#[test]
fn required_tls_refuses_a_client_without_it() {
    if !client_available("nbdinfo", "libnbd-bin") {
        return;
    }
    let Some(pki) = make_pki() else { return };
    let seen = Seen::default();
    let server = Running::start_with(vec![("disk", memory(1 << 20))], |b| {
        b.tls(TlsMode::Require, Some(tls_config(&pki, false)))
            .observer(observe(&seen))
    });
    // libnbd 1.14 turns NBD_REP_ERR_TLS_REQD into "Operation not supported".
    failure_text(Command::new("nbdinfo").arg(server.uri("disk")));
    // The same client with TLS gets in.
    let info = run(Command::new("nbdinfo").arg(server.tls_uri("disk", &pki.anonymous)));
    assert!(info.contains("export-size: 1048576"), "{info}");
    let report = server.stop();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(report.tls_refusals, 1, "{seen:?}");
    assert_eq!(seen[0], "refused: TlsRequired", "{seen:?}");
    assert!(
        seen.contains(&"negotiated disk tls=true".to_string()),
        "{seen:?}"
    );
}

#[test]
fn client_certificates_from_the_configured_ca_are_required() {
    if !client_available("nbdinfo", "libnbd-bin") {
        return;
    }
    let Some(pki) = make_pki() else { return };
    let seen = Seen::default();
    let server = Running::start_with(vec![("disk", memory(1 << 20))], |b| {
        b.tls(TlsMode::Require, Some(tls_config(&pki, true)))
            .observer(observe(&seen))
    });
    let info = run(Command::new("nbdinfo").arg(server.tls_uri("disk", &pki.client)));
    assert!(info.contains("export-size: 1048576"), "{info}");
    // No certificate, and a certificate from another CA: refused at the TLS handshake.
    for dir in [&pki.anonymous, &pki.rogue] {
        failure_text(Command::new("nbdinfo").arg(server.tls_uri("disk", dir)));
    }
    let report = server.stop();
    assert_eq!(report.tls_refusals, 2);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter()
            .filter(|l| *l == "refused: TLS handshake")
            .count(),
        2,
        "{seen:?}"
    );
    assert_eq!(
        seen.iter().filter(|l| l.starts_with("negotiated")).count(),
        1,
        "{seen:?}"
    );
}

#[test]
fn the_handshake_failure_says_why() {
    let Some(pki) = make_pki() else { return };
    if !client_available("nbdinfo", "libnbd-bin") {
        return;
    }
    let reasons: Seen = Seen::default();
    let sink = reasons.clone();
    let server = Running::start_with(vec![("disk", memory(1 << 20))], |b| {
        b.tls(TlsMode::Require, Some(tls_config(&pki, true)))
            .observer(Arc::new(move |e: &ServerEvent<'_>| {
                if let ServerEvent::Refused {
                    reason: RefusalReason::TlsHandshake(why),
                    ..
                } = e
                {
                    sink.lock().unwrap().push(why.clone());
                }
            }))
    });
    failure_text(Command::new("nbdinfo").arg(server.tls_uri("disk", &pki.anonymous)));
    failure_text(Command::new("nbdinfo").arg(server.tls_uri("disk", &pki.rogue)));
    server.stop();
    let reasons = reasons.lock().unwrap().clone();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons[0].to_lowercase().contains("certificate"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].to_lowercase().contains("issuer") || reasons[1].contains("certificate"),
        "{reasons:?}"
    );
}

#[test]
fn optional_tls_lets_plain_and_tls_clients_in() {
    if !client_available("nbdinfo", "libnbd-bin") {
        return;
    }
    let Some(pki) = make_pki() else { return };
    let seen = Seen::default();
    let server = Running::start_with(vec![("disk", memory(1 << 20))], |b| {
        b.tls(TlsMode::On, Some(tls_config(&pki, false)))
            .observer(observe(&seen))
    });
    let plain = run(Command::new("nbdinfo").arg(server.uri("disk")));
    let tls = run(Command::new("nbdinfo").arg(server.tls_uri("disk", &pki.anonymous)));
    for info in [&plain, &tls] {
        assert!(info.contains("export-size: 1048576"), "{info}");
    }
    server.stop();
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.contains(&"negotiated disk tls=false".to_string()),
        "{seen:?}"
    );
    assert!(
        seen.contains(&"negotiated disk tls=true".to_string()),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|l| l.starts_with("refused")), "{seen:?}");
}

#[test]
fn libnbd_over_tcp_with_tls_round_trips() {
    if !client_available("nbdcopy", "libnbd-bin") {
        return;
    }
    let Some(pki) = make_pki() else { return };
    let server = Running::start_tcp_with(vec![("disk", memory(4 << 20))], |b| {
        b.tls(TlsMode::Require, Some(tls_config(&pki, true)))
    });
    let dir = TempDir::new("tls-tcp");
    let source = dir.path().join("source.img");
    let back = dir.path().join("back.img");
    let data = pattern(4 << 20, 5);
    std::fs::write(&source, &data).unwrap();
    // nbds://127.0.0.1:PORT: the certificate names 127.0.0.1.
    let uri = server.tls_uri("disk", &pki.client);
    assert!(uri.starts_with("nbds://127.0.0.1:"), "{uri}");
    run(Command::new("nbdcopy").arg(&source).arg(&uri));
    run(Command::new("nbdcopy").arg(&uri).arg(&back));
    assert_eq!(std::fs::read(&back).unwrap(), data);
}

fn qemu_tls_object(dir: &std::path::Path) -> String {
    format!(
        "tls-creds-x509,id=tls0,dir={},endpoint=client",
        dir.display()
    )
}

fn qemu_image_opts(addr: &str) -> String {
    let (host, port) = addr.rsplit_once(':').unwrap();
    format!(
        "driver=nbd,server.type=inet,server.host={host},server.port={port},export=disk,tls-creds=tls0"
    )
}

#[test]
fn qemu_over_tcp_with_tls_and_client_certificates() {
    if !client_available("qemu-io", "qemu-utils") || !client_available("qemu-img", "qemu-utils") {
        return;
    }
    let Some(pki) = make_pki() else { return };
    let seen = Seen::default();
    let server = Running::start_tcp_with(vec![("disk", memory(8 << 20))], |b| {
        b.tls(TlsMode::Require, Some(tls_config(&pki, true)))
            .observer(observe(&seen))
    });
    let addr = server.tcp.clone().unwrap();
    let info = run(Command::new("qemu-img")
        .arg("info")
        .args(["--object", &qemu_tls_object(&pki.client)])
        .args(["--image-opts", &qemu_image_opts(&addr)]));
    assert!(info.contains("8 MiB (8388608 bytes)"), "{info}");
    let out = run(Command::new("qemu-io")
        .args(["--object", &qemu_tls_object(&pki.client)])
        .arg("--image-opts")
        .args(["-c", "write -P 0x5a 1M 2M"])
        .args(["-c", "read -P 0x5a 1M 2M"])
        .args(["-c", "read -P 0 0 1M"])
        .arg(qemu_image_opts(&addr)));
    assert!(!out.contains("failed"), "{out}");
    assert!(out.contains("read 2097152/2097152"), "{out}");
    // A certificate from another CA is refused; so is qemu without TLS.
    let stderr = failure_text(
        Command::new("qemu-img")
            .arg("info")
            .args(["--object", &qemu_tls_object(&pki.rogue)])
            .args(["--image-opts", &qemu_image_opts(&addr)]),
    );
    eprintln!("qemu-img with a rogue certificate: {stderr}");
    failure_text(
        Command::new("qemu-img")
            .arg("info")
            .arg(format!("nbd://{addr}/disk")),
    );
    let report = server.stop();
    assert_eq!(report.tls_refusals, 2, "{report:?}");
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.contains(&"refused: TLS handshake".to_string()),
        "{seen:?}"
    );
    assert!(
        seen.contains(&"refused: TlsRequired".to_string()),
        "{seen:?}"
    );
}

#[test]
fn tls_configuration_errors_name_the_file() {
    let Some(pki) = make_pki() else { return };
    let dir = TempDir::new("tls-errors");
    let missing = dir.path().join("missing.pem");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let client_key = pki.client.join("client-key.pem");
    let client_cert = pki.client.join("client-cert.pem");

    let err = TlsConfig::from_pem_files(&missing, &pki.server_key(), None).unwrap_err();
    assert!(
        matches!(&err, TlsError::Missing { path } if *path == missing),
        "{err}"
    );
    assert!(err.to_string().contains("missing.pem"), "{err}");

    let err = TlsConfig::from_pem_files(&garbage, &pki.server_key(), None).unwrap_err();
    assert!(
        matches!(&err, TlsError::NoCertificate { path } if *path == garbage),
        "{err}"
    );

    // A certificate where the key should be: no private key in it.
    let err = TlsConfig::from_pem_files(&pki.server_cert(), &pki.server_cert(), None).unwrap_err();
    assert!(matches!(&err, TlsError::NoPrivateKey { .. }), "{err}");

    // The client's key with the server's certificate.
    let err = TlsConfig::from_pem_files(&pki.server_cert(), &client_key, None).unwrap_err();
    assert!(
        matches!(&err, TlsError::KeyMismatch { key, .. } if *key == client_key),
        "{err}"
    );
    assert!(err.to_string().contains("does not match"), "{err}");

    let err = TlsConfig::from_pem_files(&pki.server_cert(), &pki.server_key(), Some(&garbage))
        .unwrap_err();
    assert!(
        matches!(&err, TlsError::NoCertificate { path } if *path == garbage),
        "{err}"
    );

    // Unreadable: a directory where a file should be.
    let err = TlsConfig::from_pem_files(dir.path(), &pki.server_key(), None).unwrap_err();
    assert!(matches!(&err, TlsError::Unreadable { .. }), "{err}");

    // And the good ones load, with or without a client CA.
    assert!(
        !TlsConfig::from_pem_files(&pki.server_cert(), &pki.server_key(), None)
            .unwrap()
            .client_certificates_required()
    );
    assert!(
        TlsConfig::from_pem_files(&client_cert, &client_key, Some(&pki.ca_cert()))
            .unwrap()
            .client_certificates_required()
    );
}

#[test]
fn tls_on_or_required_without_certificates_is_a_build_error() {
    for mode in [TlsMode::On, TlsMode::Require] {
        let err = Server::builder()
            .export("disk", memory(1 << 20))
            .tls(mode, None)
            .build()
            .err();
        assert!(
            matches!(err, Some(ServerError::TlsNotConfigured(m)) if m == mode),
            "{err:?}"
        );
    }
    assert!(Server::builder()
        .export("disk", memory(1 << 20))
        .tls(TlsMode::Off, None)
        .build()
        .is_ok());
}
