//! Shared helpers for the integration tests: an in-process server on a unix socket in a temp
//! directory, real-client discovery, and a raw NBD client for hostile-input tests.

#![allow(dead_code)]

use raidkit_nbd::{Export, Listener, ServeReport, Server, ServerBuilder};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A unique temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::AtomicU64;
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("raidkit-nbd-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server running in a background thread; `stop` (or drop) shuts it down cleanly.
pub struct Running {
    /// The unix socket (for a TCP server, a path nobody listens on).
    pub socket: PathBuf,
    /// `host:port` of a TCP server.
    pub tcp: Option<String>,
    shutdown: Arc<AtomicBool>,
    thread: Option<JoinHandle<ServeReport>>,
    _dir: TempDir,
}

impl Running {
    pub fn start(exports: Vec<(&str, Arc<dyn Export>)>) -> Running {
        Self::start_with(exports, |b| b)
    }

    pub fn start_with(
        exports: Vec<(&str, Arc<dyn Export>)>,
        configure: impl FnOnce(ServerBuilder) -> ServerBuilder,
    ) -> Running {
        let dir = TempDir::new("srv");
        let socket = dir.path().join("nbd.sock");
        let listener = Listener::bind_unix(&socket).unwrap();
        Self::start_on(listener, dir, exports, configure)
    }

    /// A server on TCP at 127.0.0.1, on a free port.
    pub fn start_tcp_with(
        exports: Vec<(&str, Arc<dyn Export>)>,
        configure: impl FnOnce(ServerBuilder) -> ServerBuilder,
    ) -> Running {
        let listener = Listener::bind_localhost(0).unwrap();
        Self::start_on(listener, TempDir::new("srv-tcp"), exports, configure)
    }

    fn start_on(
        listener: Listener,
        dir: TempDir,
        exports: Vec<(&str, Arc<dyn Export>)>,
        configure: impl FnOnce(ServerBuilder) -> ServerBuilder,
    ) -> Running {
        let (socket, tcp) = match &listener {
            Listener::Unix { path, .. } => (path.clone(), None),
            Listener::Tcp(_) => (dir.path().join("not-listening"), Some(listener.describe())),
        };
        let mut builder = Server::builder();
        for (name, export) in exports {
            builder = builder.export(name, export);
        }
        let server = configure(builder).build().unwrap();
        let shutdown = Arc::new(AtomicBool::new(false));
        let flag = shutdown.clone();
        let thread = std::thread::spawn(move || server.serve(&listener, &flag).unwrap());
        Running {
            socket,
            tcp,
            shutdown,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// The nbd+unix URI of an export.
    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.socket.display())
    }

    /// The URI of an export with TLS (libnbd's `nbds`), trusting and presenting the
    /// certificates in `certs` (libnbd's layout: ca-cert.pem, client-cert.pem,
    /// client-key.pem).
    pub fn tls_uri(&self, export: &str, certs: &Path) -> String {
        match &self.tcp {
            Some(addr) => format!(
                "nbds://{addr}/{export}?tls-certificates={}",
                certs.display()
            ),
            None => format!(
                "nbds+unix:///{export}?socket={}&tls-certificates={}",
                self.socket.display(),
                certs.display()
            ),
        }
    }

    pub fn stop(mut self) -> ServeReport {
        self.stop_inner().expect("server thread")
    }

    fn stop_inner(&mut self) -> Option<ServeReport> {
        self.shutdown.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .map(|t| t.join().expect("server panicked"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// True if `tool` can run. If it cannot: with RAIDKIT_SKIP_CLIENTS=1 the caller skips,
/// otherwise the test fails naming the Debian package to install.
pub fn client_available(tool: &str, package: &str) -> bool {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if found {
        return true;
    }
    if std::env::var("RAIDKIT_SKIP_CLIENTS").as_deref() == Ok("1") {
        eprintln!("skipping: {tool} not installed (RAIDKIT_SKIP_CLIENTS=1)");
        return false;
    }
    panic!("{tool} is not installed: apt-get install {package} (or set RAIDKIT_SKIP_CLIENTS=1)");
}

/// Runs a command, failing the test with its output unless it succeeds; returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// FNV-1a 64, a checksum for comparing images.
pub fn checksum(data: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A hand-written NBD client that speaks raw bytes, for hostile-input tests.
pub struct RawClient {
    pub stream: UnixStream,
}

pub const NBD_OPT_GO: u32 = 7;
pub const NBD_OPT_STRUCTURED_REPLY: u32 = 8;

impl RawClient {
    pub fn connect(socket: &Path) -> RawClient {
        let stream = UnixStream::connect(socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        RawClient { stream }
    }

    /// Reads the greeting and sends client flags (FIXED_NEWSTYLE | NO_ZEROES).
    pub fn greet(&mut self) {
        let mut greeting = [0u8; 18];
        self.stream.read_exact(&mut greeting).unwrap();
        assert_eq!(&greeting[0..8], b"NBDMAGIC");
        assert_eq!(&greeting[8..16], b"IHAVEOPT");
        self.stream.write_all(&3u32.to_be_bytes()).unwrap();
    }

    pub fn send_option(&mut self, option: u32, data: &[u8]) {
        let mut v = b"IHAVEOPT".to_vec();
        v.extend_from_slice(&option.to_be_bytes());
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
        self.stream.write_all(&v).unwrap();
    }

    /// Reads one option reply: (option, type, data).
    pub fn option_reply(&mut self) -> (u32, u32, Vec<u8>) {
        let mut h = [0u8; 20];
        self.stream.read_exact(&mut h).unwrap();
        assert_eq!(
            u64::from_be_bytes(h[0..8].try_into().unwrap()),
            0x3e889045565a9
        );
        let opt = u32::from_be_bytes(h[8..12].try_into().unwrap());
        let typ = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
        let mut data = vec![0u8; len];
        self.stream.read_exact(&mut data).unwrap();
        (opt, typ, data)
    }

    /// Negotiates `export` with NBD_OPT_GO (optionally structured replies first); returns the
    /// transmission flags.
    pub fn go(&mut self, export: &str, structured: bool) -> u16 {
        self.greet();
        if structured {
            self.send_option(NBD_OPT_STRUCTURED_REPLY, &[]);
            assert_eq!(self.option_reply().1, 1);
        }
        let mut data = (export.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(export.as_bytes());
        data.extend_from_slice(&1u16.to_be_bytes());
        data.extend_from_slice(&3u16.to_be_bytes());
        self.send_option(NBD_OPT_GO, &data);
        let mut flags = None;
        loop {
            let (_, typ, data) = self.option_reply();
            match typ {
                1 => break,
                3 => {
                    if u16::from_be_bytes([data[0], data[1]]) == 0 {
                        flags = Some(u16::from_be_bytes([data[10], data[11]]));
                    }
                }
                other => panic!("NBD_OPT_GO failed with reply type {other:#x}"),
            }
        }
        flags.expect("NBD_INFO_EXPORT")
    }

    pub fn request(&mut self, flags: u16, command: u16, cookie: u64, offset: u64, len: u32) {
        let mut v = 0x25609513u32.to_be_bytes().to_vec();
        v.extend_from_slice(&flags.to_be_bytes());
        v.extend_from_slice(&command.to_be_bytes());
        v.extend_from_slice(&cookie.to_be_bytes());
        v.extend_from_slice(&offset.to_be_bytes());
        v.extend_from_slice(&len.to_be_bytes());
        self.stream.write_all(&v).unwrap();
    }

    /// Reads a simple reply: (error, cookie).
    pub fn simple_reply(&mut self) -> (u32, u64) {
        let mut h = [0u8; 16];
        self.stream.read_exact(&mut h).unwrap();
        assert_eq!(u32::from_be_bytes(h[0..4].try_into().unwrap()), 0x67446698);
        (
            u32::from_be_bytes(h[4..8].try_into().unwrap()),
            u64::from_be_bytes(h[8..16].try_into().unwrap()),
        )
    }

    /// Reads one structured reply chunk: (flags, type, cookie, payload).
    pub fn structured_chunk(&mut self) -> (u16, u16, u64, Vec<u8>) {
        let mut h = [0u8; 20];
        self.stream.read_exact(&mut h).unwrap();
        assert_eq!(u32::from_be_bytes(h[0..4].try_into().unwrap()), 0x668e33ef);
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
        let mut payload = vec![0u8; len];
        self.stream.read_exact(&mut payload).unwrap();
        (
            u16::from_be_bytes([h[4], h[5]]),
            u16::from_be_bytes([h[6], h[7]]),
            u64::from_be_bytes(h[8..16].try_into().unwrap()),
            payload,
        )
    }

    /// True once the server has closed the connection (read returns EOF or reset).
    pub fn closed_by_server(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.stream.read(&mut b), Ok(0) | Err(_))
    }
}

/// Test certificates made with the openssl CLI (EC P-256), in libnbd's and qemu's directory
/// layout: `ca` is the CA's own directory (ca-cert.pem, ca-key.pem, server-cert.pem,
/// server-key.pem); each client directory holds the CA certificate to check the server
/// with, and maybe a client certificate: `client` from the same CA, `rogue` from another CA,
/// `anonymous` none.
pub struct Pki {
    pub ca: PathBuf,
    pub client: PathBuf,
    pub rogue: PathBuf,
    pub anonymous: PathBuf,
    _dir: TempDir,
}

impl Pki {
    pub fn server_cert(&self) -> PathBuf {
        self.ca.join("server-cert.pem")
    }
    pub fn server_key(&self) -> PathBuf {
        self.ca.join("server-key.pem")
    }
    pub fn ca_cert(&self) -> PathBuf {
        self.ca.join("ca-cert.pem")
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    run(Command::new("openssl").current_dir(dir).args(args));
}

/// A self-signed CA in `dir` (ca-cert.pem, ca-key.pem).
fn make_ca(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca-key.pem",
            "-out",
            "ca-cert.pem",
            "-days",
            "3",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

/// A certificate `name`-cert.pem and key `name`-key.pem in `out`, issued by the CA in `ca`.
fn issue(ca: &Path, out: &Path, name: &str, subject: &str, extensions: &str, serial: u32) {
    std::fs::create_dir_all(out).unwrap();
    let ext = out.join(format!("{name}.ext"));
    std::fs::write(&ext, extensions).unwrap();
    let key = out.join(format!("{name}-key.pem"));
    let csr = out.join(format!("{name}.csr"));
    let cert = out.join(format!("{name}-cert.pem"));
    let p = |p: &Path| p.display().to_string();
    openssl(
        ca,
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &p(&key),
            "-out",
            &p(&csr),
            "-subj",
            subject,
        ],
    );
    openssl(
        ca,
        &[
            "x509",
            "-req",
            "-in",
            &p(&csr),
            "-CA",
            "ca-cert.pem",
            "-CAkey",
            "ca-key.pem",
            "-set_serial",
            &serial.to_string(),
            "-days",
            "3",
            "-out",
            &p(&cert),
            "-extfile",
            &p(&ext),
        ],
    );
}

const SERVER_EXTENSIONS: &str = "basicConstraints=critical,CA:FALSE\n\
    keyUsage=digitalSignature,keyEncipherment\n\
    extendedKeyUsage=serverAuth\n\
    subjectAltName=DNS:localhost,IP:127.0.0.1\n";
const CLIENT_EXTENSIONS: &str = "basicConstraints=critical,CA:FALSE\n\
    keyUsage=digitalSignature,keyEncipherment\n\
    extendedKeyUsage=clientAuth\n";

/// Makes the certificates, or `None` (skip) if openssl is missing and
/// RAIDKIT_SKIP_CLIENTS=1.
pub fn make_pki() -> Option<Pki> {
    if !client_available("openssl", "openssl") {
        return None;
    }
    let dir = TempDir::new("pki");
    let ca = dir.path().join("ca");
    let rogue_ca = dir.path().join("rogue-ca");
    make_ca(&ca, "raidkit test CA");
    make_ca(&rogue_ca, "someone else's CA");
    issue(&ca, &ca, "server", "/CN=localhost", SERVER_EXTENSIONS, 2);
    let client = dir.path().join("client");
    let rogue = dir.path().join("rogue");
    let anonymous = dir.path().join("anonymous");
    issue(
        &ca,
        &client,
        "client",
        "/CN=raidkit test client",
        CLIENT_EXTENSIONS,
        3,
    );
    issue(
        &rogue_ca,
        &rogue,
        "client",
        "/CN=rogue client",
        CLIENT_EXTENSIONS,
        4,
    );
    std::fs::create_dir_all(&anonymous).unwrap();
    for d in [&client, &anonymous] {
        std::fs::copy(ca.join("ca-cert.pem"), d.join("ca-cert.pem")).unwrap();
    }
    // The rogue client trusts both CAs: ours to check the server, its own because qemu
    // refuses to present a certificate its CA file cannot vouch for.
    let mut both = std::fs::read(ca.join("ca-cert.pem")).unwrap();
    both.extend(std::fs::read(rogue_ca.join("ca-cert.pem")).unwrap());
    std::fs::write(rogue.join("ca-cert.pem"), both).unwrap();
    Some(Pki {
        ca,
        client,
        rogue,
        anonymous,
        _dir: dir,
    })
}
