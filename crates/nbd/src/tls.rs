//! TLS for `NBD_OPT_STARTTLS`: certificates loaded from PEM files, the TLS handshake the
//! driver runs when negotiation asks for it, and the encrypted stream that the transmission
//! phase's workers then share.
//!
//! The cryptography is rustls with its ring provider (no cmake, no prebuilt library, no
//! process-wide default provider: the provider is passed in explicitly); this module only
//! moves bytes between a socket and a `rustls::ServerConnection`. TLS 1.2 and 1.3 are
//! offered, as the spec asks (1.2 at least). With a client CA, every client must present a
//! certificate that chains to it (rustls' `WebPkiClientVerifier`); a client without one is
//! refused during the TLS handshake. Session tickets and resumption are off: a connection is
//! long-lived and the server keeps no per-client state between connections.
//!
//! Sharing one TLS connection between workers. A `ServerConnection` needs `&mut` both to
//! decrypt and to encrypt, so it sits in a mutex that is held only to move bytes in or out,
//! never across a socket call:
//! - the one reader (the worker holding the connection's read lock) reads ciphertext from
//!   the socket into its own inbox without the TLS lock, then locks to feed it
//!   (`read_tls`, `process_new_packets`) and take plaintext out;
//! - a sender, already holding the connection's writer lock, locks the TLS state, encrypts
//!   up to the buffer limit (64 KiB), drains the records into its own buffer, unlocks, and
//!   writes that buffer to the socket; it repeats until its reply is out.
//!
//! Invariant: TLS output is drained only under the connection's writer lock, and sent
//! before that lock is released, so records reach the socket in the order rustls produced
//! them (TLS would fail otherwise). When reading produces output of its own (a TLS 1.3
//! key update answer, an alert), the reader takes the writer lock to send it: lock order is
//! always read lock, then writer lock, then TLS lock, and no writer takes the read lock, so
//! this cannot deadlock. An error from rustls or a `close_notify` ends the stream: reads
//! return an error or end-of-file, and the connection closes like any other.
//!
//! One wait is new with TLS: a reader that must send a key update answer waits for the
//! writer lock, so while a sender is blocked on a client that is not reading, the reader
//! stops reading too. A client that neither reads nor lets the server read is stuck either
//! way (in clear the server stops reading once every worker waits to send); clients that
//! read and write at once (libnbd, qemu) are not affected.

pub use crate::handshake::TlsMode;
use crate::server::Transport;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConnection};
use std::fmt;
use std::io::{self, IoSlice, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Ciphertext read from the socket per `read` call.
const INBOX_BYTES: usize = 64 << 10;

/// A server's TLS identity and client policy, built once and shared by every connection.
#[derive(Clone)]
pub struct TlsConfig {
    server: Arc<rustls::ServerConfig>,
    client_certificates_required: bool,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field(
                "client_certificates_required",
                &self.client_certificates_required,
            )
            .finish_non_exhaustive()
    }
}

/// Why a [`TlsConfig`] could not be built; each names the file it is about.
#[derive(Debug)]
pub enum TlsError {
    /// The file does not exist.
    Missing { path: PathBuf },
    /// The file exists but could not be read.
    Unreadable { path: PathBuf, error: io::Error },
    /// The file is not valid PEM.
    BadPem { path: PathBuf, message: String },
    /// The certificate chain file holds no certificate.
    NoCertificate { path: PathBuf },
    /// The key file holds no private key (PKCS#8, PKCS#1 or SEC1).
    NoPrivateKey { path: PathBuf },
    /// The private key is not the key of the first certificate in the chain.
    KeyMismatch { cert_chain: PathBuf, key: PathBuf },
    /// A client CA certificate could not be used as a trust anchor.
    BadCaCertificate { path: PathBuf, message: String },
    /// rustls refused the certificate or key (for example an unsupported key type).
    Rejected { path: PathBuf, message: String },
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Missing { path } => write!(f, "{}: no such file", path.display()),
            TlsError::Unreadable { path, error } => {
                write!(f, "{}: cannot read: {error}", path.display())
            }
            TlsError::BadPem { path, message } => {
                write!(f, "{}: not valid PEM: {message}", path.display())
            }
            TlsError::NoCertificate { path } => {
                write!(f, "{}: holds no certificate", path.display())
            }
            TlsError::NoPrivateKey { path } => {
                write!(f, "{}: holds no private key", path.display())
            }
            TlsError::KeyMismatch { cert_chain, key } => write!(
                f,
                "{}: the private key does not match the certificate in {}",
                key.display(),
                cert_chain.display()
            ),
            TlsError::BadCaCertificate { path, message } => {
                write!(f, "{}: unusable CA certificate: {message}", path.display())
            }
            TlsError::Rejected { path, message } => write!(f, "{}: {message}", path.display()),
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsError::Unreadable { error, .. } => Some(error),
            _ => None,
        }
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| match error.kind() {
        io::ErrorKind::NotFound => TlsError::Missing {
            path: path.to_path_buf(),
        },
        _ => TlsError::Unreadable {
            path: path.to_path_buf(),
            error,
        },
    })
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_file(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, pem::Error>>()
        .map_err(|e| TlsError::BadPem {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_file(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoPrivateKey {
            path: path.to_path_buf(),
        },
        other => TlsError::BadPem {
            path: path.to_path_buf(),
            message: other.to_string(),
        },
    })
}

impl TlsConfig {
    /// Loads the server's certificate chain (leaf first) and private key from PEM files.
    /// With `client_ca`, clients must present a certificate issued by one of the CA
    /// certificates in that file, and are refused at the TLS handshake otherwise.
    pub fn from_pem_files(
        cert_chain: &Path,
        key: &Path,
        client_ca: Option<&Path>,
    ) -> Result<TlsConfig, TlsError> {
        let chain = certificates(cert_chain)?;
        let private_key = private_key(key)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let rejected = |path: &Path, e: &dyn fmt::Display| TlsError::Rejected {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(rustls::ALL_VERSIONS)
            .map_err(|e| rejected(cert_chain, &e))?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca_path) => {
                let mut roots = RootCertStore::empty();
                for ca in certificates(ca_path)? {
                    roots.add(ca).map_err(|e| TlsError::BadCaCertificate {
                        path: ca_path.to_path_buf(),
                        message: e.to_string(),
                    })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| TlsError::BadCaCertificate {
                            path: ca_path.to_path_buf(),
                            message: e.to_string(),
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut server = builder
            .with_single_cert(chain, private_key)
            .map_err(|e| match e {
                rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
                    cert_chain: cert_chain.to_path_buf(),
                    key: key.to_path_buf(),
                },
                other => rejected(key, &other),
            })?;
        server.send_tls13_tickets = 0;
        server.session_storage = Arc::new(NoServerSessionStorage {});
        Ok(TlsConfig {
            server: Arc::new(server),
            client_certificates_required: client_ca.is_some(),
        })
    }

    /// True if clients must present a certificate from the configured CA.
    pub fn client_certificates_required(&self) -> bool {
        self.client_certificates_required
    }
}

/// Why the TLS handshake failed, for the connection's end report.
fn handshake_failure(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            "the TLS handshake did not finish within the handshake timeout".into()
        }
        _ => e.to_string(),
    }
}

/// Ciphertext read from the socket and not yet handed to rustls.
struct Inbox {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Inbox {
    fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// One connection's TLS session, shared by its workers (see the module documentation).
pub(crate) struct TlsStream {
    conn: Mutex<ServerConnection>,
    /// Only the reader (under the connection's read lock) touches this.
    inbox: Mutex<Inbox>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

impl TlsStream {
    /// Runs the server side of the TLS handshake on `t` (blocking, within whatever read
    /// timeout the socket has). On failure the alert rustls produced is sent (best effort)
    /// and the reason returned.
    pub(crate) fn accept(t: &Transport, config: &TlsConfig) -> Result<TlsStream, String> {
        let conn = ServerConnection::new(config.server.clone()).map_err(|e| e.to_string())?;
        let stream = TlsStream {
            conn: Mutex::new(conn),
            inbox: Mutex::new(Inbox {
                buf: vec![0u8; INBOX_BYTES].into_boxed_slice(),
                start: 0,
                end: 0,
            }),
        };
        // Nobody else uses the socket yet; a private writer lock keeps the helpers' rules.
        let writer = Mutex::new(());
        loop {
            stream
                .flush_output(t, &writer)
                .map_err(|e| handshake_failure(&e))?;
            if !lock(&stream.conn).is_handshaking() {
                return Ok(stream);
            }
            match stream.pull(t, &writer) {
                Ok(true) => {}
                Ok(false) => {
                    return Err("client closed the connection during the TLS handshake".into())
                }
                Err(e) => return Err(handshake_failure(&e)),
            }
        }
    }

    /// Reads ciphertext from the socket (if the inbox is empty) and feeds it to rustls until
    /// it yields plaintext or the inbox is used up. Sends any output reading produced.
    /// `Ok(false)` is the end of the socket.
    fn pull(&self, t: &Transport, writer: &Mutex<()>) -> io::Result<bool> {
        let mut inbox = lock(&self.inbox);
        if inbox.is_empty() {
            let n = t.read(&mut inbox.buf)?;
            inbox.start = 0;
            inbox.end = n;
            if n == 0 {
                let mut conn = lock(&self.conn);
                // Tells rustls the stream ended, so a missing close_notify is reported.
                let _ = conn.read_tls(&mut io::empty());
                return Ok(false);
            }
        }
        let mut failure = None;
        {
            let mut conn = lock(&self.conn);
            while !inbox.is_empty() {
                let mut pending = &inbox.buf[inbox.start..inbox.end];
                let used = conn.read_tls(&mut pending)?;
                if used == 0 {
                    break;
                }
                inbox.start += used;
                match conn.process_new_packets() {
                    Ok(state) if state.plaintext_bytes_to_read() > 0 => break,
                    Ok(state) if state.peer_has_closed() => break,
                    Ok(_) => {}
                    Err(e) => {
                        failure = Some(tls_error(e));
                        break;
                    }
                }
            }
        }
        // Output produced by reading (handshake messages, a key update, an alert).
        self.flush_output(t, writer)?;
        match failure {
            Some(e) => Err(e),
            None => Ok(true),
        }
    }

    /// Reads decrypted bytes into `dst`. `Ok(0)` once the client sent `close_notify` (or
    /// `dst` is empty); an error for a TLS failure or a socket that ended without one.
    /// Only one thread at a time may read (the connection's read lock).
    pub(crate) fn read(
        &self,
        t: &Transport,
        dst: &mut [u8],
        writer: &Mutex<()>,
    ) -> io::Result<usize> {
        if dst.is_empty() {
            return Ok(0);
        }
        loop {
            {
                let mut conn = lock(&self.conn);
                match io::Read::read(&mut conn.reader(), dst) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            if !self.pull(t, writer)? {
                // End of socket: let the reader report it (clean close or truncation).
                let mut conn = lock(&self.conn);
                return match io::Read::read(&mut conn.reader(), dst) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        Err(io::ErrorKind::UnexpectedEof.into())
                    }
                    other => other,
                };
            }
        }
    }

    /// True if a read would find bytes without waiting on the socket.
    pub(crate) fn has_buffered_input(&self) -> bool {
        if !lock(&self.inbox).is_empty() {
            return true;
        }
        let mut conn = lock(&self.conn);
        conn.process_new_packets()
            .map(|s| s.plaintext_bytes_to_read() > 0)
            .unwrap_or(true)
    }

    /// Encrypts and sends every byte of `parts`, in order. The caller holds the connection's
    /// writer lock.
    pub(crate) fn send(&self, t: &Transport, parts: &[&[u8]]) -> io::Result<()> {
        let mut part = 0usize;
        let mut offset = 0usize;
        let mut records: Vec<u8> = Vec::new();
        loop {
            while part < parts.len() && offset == parts[part].len() {
                part += 1;
                offset = 0;
            }
            if part >= parts.len() {
                return Ok(());
            }
            let slices: Vec<IoSlice<'_>> = std::iter::once(&parts[part][offset..])
                .chain(parts[part + 1..].iter().copied())
                .map(IoSlice::new)
                .collect();
            records.clear();
            {
                let mut conn = lock(&self.conn);
                let mut accepted = conn.writer().write_vectored(&slices)?;
                while conn.wants_write() {
                    conn.write_tls(&mut records)?;
                }
                drop(conn);
                while accepted > 0 {
                    let left = parts[part].len() - offset;
                    if accepted >= left {
                        accepted -= left;
                        part += 1;
                        offset = 0;
                    } else {
                        offset += accepted;
                        accepted = 0;
                    }
                }
            }
            t.send_all(&[&records])?;
        }
    }

    /// Sends whatever rustls has queued (under `writer`, so records stay in order).
    fn flush_output(&self, t: &Transport, writer: &Mutex<()>) -> io::Result<()> {
        let _writer = lock(writer);
        let mut records = Vec::new();
        {
            let mut conn = lock(&self.conn);
            while conn.wants_write() {
                conn.write_tls(&mut records)?;
            }
        }
        if records.is_empty() {
            return Ok(());
        }
        t.send_all(&[&records])
    }

    /// Sends `close_notify` (best effort): the spec asks the server to shut TLS down before
    /// closing the connection.
    pub(crate) fn close(&self, t: &Transport, writer: &Mutex<()>) {
        lock(&self.conn).send_close_notify();
        let _ = self.flush_output(t, writer);
    }
}
