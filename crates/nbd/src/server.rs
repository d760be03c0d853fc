//! The server driver: sockets, threads and shutdown around the sans-IO codec.
//!
//! One thread per connection negotiates; in transmission a small pool of workers per
//! connection shares the socket in the leader/follower style nbdkit uses: a worker takes the
//! read lock, reads one request (header and any WRITE payload) through a shared read buffer,
//! releases the lock, calls the export, and sends its reply under the write lock with a single
//! vectored `sendmsg`. Reading the next request therefore overlaps with executing this one, and
//! up to `threads_per_connection` requests run at once.
//!
//! Invariants: a connection holds at most its read buffer, one buffer per worker of at most
//! [`RETAINED_BUFFER_BYTES`], and payloads larger than that only within
//! `inflight_bytes_per_connection` (one request larger than the budget runs alone); a
//! connection never touches another connection's state, and a panic inside one is contained to
//! it. Shutdown stops accepting, lets in-flight requests finish and reply, closes every
//! connection, flushes every export and returns.

use crate::export::{write_zeroes_by_writing, BlockSizeError, Export};
use crate::handshake::{Catalog, ExportInfo, Handshake, HandshakeError, Outcome};
use crate::proto::{NbdError, REQUEST_HEADER_BYTES};
use crate::transmission::{
    error_reply, simple_reply, structured_done, structured_read_header, Command, Decision, Request,
    RequestHeader, Session,
};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a worker that is gathering a streaming client's writes waits for the next
/// request header to arrive (it holds the read lock meanwhile, as it would while reading).
const GATHER_WAIT: Duration = Duration::from_micros(200);

/// Worker buffers larger than this are freed after use instead of kept for the next request.
pub const RETAINED_BUFFER_BYTES: usize = 4 << 20;
/// Size of the per-connection read buffer that lets one `read` pick up several requests.
const READ_BUFFER_BYTES: usize = 128 << 10;

/// A listening socket: a unix socket (removed again when dropped) or TCP.
pub enum Listener {
    Unix {
        listener: UnixListener,
        path: PathBuf,
    },
    Tcp(TcpListener),
}

impl Listener {
    /// Binds a unix socket at `path`, replacing a stale socket file left by a previous run
    /// (but not one a live server still answers on: that is `AddrInUse`).
    pub fn bind_unix(path: &Path) -> io::Result<Listener> {
        use std::os::unix::fs::FileTypeExt;
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if meta.file_type().is_socket() {
                if UnixStream::connect(path).is_ok() {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("{} is in use by a running server", path.display()),
                    ));
                }
                std::fs::remove_file(path)?;
            }
        }
        Ok(Listener::Unix {
            listener: UnixListener::bind(path)?,
            path: path.to_path_buf(),
        })
    }

    /// Binds TCP at `addr` (use 127.0.0.1 unless exposing the export is intended).
    pub fn bind_tcp(addr: SocketAddr) -> io::Result<Listener> {
        Ok(Listener::Tcp(TcpListener::bind(addr)?))
    }

    /// Binds TCP on 127.0.0.1 at `port` (0 picks a free port).
    pub fn bind_localhost(port: u16) -> io::Result<Listener> {
        Self::bind_tcp(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// Where clients connect, for messages: a socket path or an address.
    pub fn describe(&self) -> String {
        match self {
            Listener::Unix { path, .. } => path.display().to_string(),
            Listener::Tcp(l) => l
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "tcp".into()),
        }
    }

    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Listener::Unix { listener, .. } => listener.set_nonblocking(true),
            Listener::Tcp(l) => l.set_nonblocking(true),
        }
    }

    fn accept(&self) -> io::Result<Transport> {
        match self {
            Listener::Unix { listener, .. } => {
                let (s, _) = listener.accept()?;
                s.set_nonblocking(false)?;
                Ok(Transport::Unix(s))
            }
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                Ok(Transport::Tcp(s))
            }
        }
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Listener::Unix { listener, .. } => listener.as_raw_fd(),
            Listener::Tcp(l) => l.as_raw_fd(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix { path, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A connected stream socket.
pub enum Transport {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl From<UnixStream> for Transport {
    fn from(s: UnixStream) -> Self {
        Transport::Unix(s)
    }
}

impl From<TcpStream> for Transport {
    fn from(s: TcpStream) -> Self {
        Transport::Tcp(s)
    }
}

impl Transport {
    fn fd(&self) -> RawFd {
        match self {
            Transport::Unix(s) => s.as_raw_fd(),
            Transport::Tcp(s) => s.as_raw_fd(),
        }
    }

    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let r = match self {
                Transport::Unix(s) => (&*s).read(buf),
                Transport::Tcp(s) => (&*s).read(buf),
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    /// Sends every byte of `parts` in order, with `sendmsg` (one system call when the socket
    /// has room) and `MSG_NOSIGNAL` so a vanished client is an error, not a SIGPIPE.
    fn send_all(&self, parts: &[&[u8]]) -> io::Result<()> {
        const MAX_PARTS: usize = 4;
        let mut part = 0usize;
        let mut offset = 0usize;
        loop {
            while part < parts.len() && offset == parts[part].len() {
                part += 1;
                offset = 0;
            }
            if part >= parts.len() {
                return Ok(());
            }
            // SAFETY: iovec is plain data; every entry used is filled in below.
            let mut iov: [libc::iovec; MAX_PARTS] = unsafe { std::mem::zeroed() };
            let mut count = 0;
            for (i, p) in parts[part..].iter().enumerate().take(MAX_PARTS) {
                let start = if i == 0 { offset } else { 0 };
                if p.len() > start {
                    iov[count] = libc::iovec {
                        iov_base: p[start..].as_ptr() as *mut libc::c_void,
                        iov_len: p.len() - start,
                    };
                    count += 1;
                }
            }
            // SAFETY: msghdr is plain data; zero is a valid value for every field.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = count as _;
            // SAFETY: the iovecs point into `parts`, which outlive the call; the kernel only
            // reads from them.
            let sent = unsafe { libc::sendmsg(self.fd(), &msg, libc::MSG_NOSIGNAL) };
            if sent < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            let mut sent = sent as usize;
            while sent > 0 && part < parts.len() {
                let left = parts[part].len() - offset;
                if sent >= left {
                    sent -= left;
                    part += 1;
                    offset = 0;
                } else {
                    offset += sent;
                    sent = 0;
                }
            }
        }
    }

    fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Transport::Unix(s) => s.shutdown(how),
            Transport::Tcp(s) => s.shutdown(how),
        };
    }

    /// Asks for a send buffer of `bytes` on a unix socket (best effort; TCP is left alone).
    fn set_unix_send_buffer(&self, bytes: usize) {
        if let Transport::Unix(s) = self {
            let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
            // SAFETY: valid fd; the option value is a c_int on the stack, its size passed.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_SNDBUF,
                    &value as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Transport::Unix(s) => s.set_read_timeout(timeout),
            Transport::Tcp(s) => s.set_read_timeout(timeout),
        }
    }

    fn try_clone(&self) -> io::Result<Transport> {
        Ok(match self {
            Transport::Unix(s) => Transport::Unix(s.try_clone()?),
            Transport::Tcp(s) => Transport::Tcp(s.try_clone()?),
        })
    }
}

/// Why a server could not be built or run.
#[derive(Debug)]
pub enum ServerError {
    /// A server needs at least one export.
    NoExports,
    /// Two exports share a name.
    DuplicateExport(String),
    /// Export names are NBD strings: at most 4096 bytes, no NUL.
    BadExportName(String),
    /// The named default export does not exist.
    UnknownDefaultExport(String),
    /// An export advertises size constraints the spec forbids.
    BadBlockSize {
        export: String,
        error: BlockSizeError,
    },
    /// threads_per_connection and max_connections must be at least 1.
    ZeroLimit(&'static str),
    /// The listening socket failed.
    Io(io::Error),
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::NoExports => write!(f, "a server needs at least one export"),
            ServerError::DuplicateExport(n) => write!(f, "export name {n:?} is used twice"),
            ServerError::BadExportName(n) => write!(
                f,
                "export name {n:?} must be at most 4096 bytes and contain no NUL"
            ),
            ServerError::UnknownDefaultExport(n) => {
                write!(f, "default export {n:?} is not one of the exports")
            }
            ServerError::BadBlockSize { export, error } => {
                write!(f, "export {export:?}: {error}")
            }
            ServerError::ZeroLimit(what) => write!(f, "{what} must be at least 1"),
            ServerError::Io(e) => write!(f, "listening socket: {e}"),
        }
    }
}

impl std::error::Error for ServerError {}

/// What a finished `serve` did; `flush_failures` empty means every export was flushed, so the
/// caller may mark its arrays clean.
#[derive(Debug, Default)]
pub struct ServeReport {
    pub connections_accepted: u64,
    /// Connections closed at once because `max_connections` were already open.
    pub connections_refused: u64,
    /// Connections that ended in negotiation because of a protocol violation.
    pub handshake_failures: u64,
    /// Connections that were still busy when the shutdown grace period ran out.
    pub connections_cut: u64,
    pub flush_failures: Vec<(String, io::Error)>,
}

impl ServeReport {
    /// True if every export was flushed after the last connection closed.
    pub fn all_flushed(&self) -> bool {
        self.flush_failures.is_empty()
    }
}

/// How one connection ended (for tests and counters).
#[derive(Debug, PartialEq, Eq)]
pub enum ConnectionEnd {
    /// The client closed the socket or sent `NBD_CMD_DISC` (or the server shut down).
    Closed,
    /// The client sent `NBD_OPT_ABORT`.
    Aborted,
    /// Negotiation failed (protocol violation or timeout).
    HandshakeFailed(String),
    /// The client broke the transmission protocol (bad magic, unskippable payload).
    ProtocolViolation(String),
    /// Code inside the connection panicked; the panic was contained.
    Panicked,
}

/// What happened on the server, for a caller that wants to log it (the library itself never
/// prints). Connection ids count up from 0 per `serve` call.
#[derive(Debug)]
pub enum ServerEvent<'a> {
    /// A connection was accepted and is negotiating.
    Accepted { connection: u64 },
    /// A connection was closed at once because `max_connections` were open.
    Refused,
    /// A connection entered the transmission phase on `export`.
    Negotiated {
        connection: u64,
        export: &'a str,
        structured_replies: bool,
    },
    /// A connection ended.
    Closed {
        connection: u64,
        end: &'a ConnectionEnd,
    },
}

/// Receives [`ServerEvent`]s; called from connection threads, so it must be quick.
pub type Observer = Arc<dyn Fn(&ServerEvent<'_>) + Send + Sync>;

/// Tunables, with defaults suited to a two-core machine and fio at queue depth 32.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub threads_per_connection: usize,
    pub max_connections: usize,
    pub inflight_bytes_per_connection: u64,
    pub handshake_timeout: Duration,
    pub shutdown_grace: Duration,
    /// `SO_SNDBUF` asked for on accepted unix sockets (the kernel caps it at
    /// `net.core.wmem_max`); `None` keeps the system default. TCP keeps the kernel's
    /// autotuning, which a fixed size would switch off.
    pub unix_send_buffer_bytes: Option<usize>,
}

/// Default `SO_SNDBUF` for unix connections. With the usual 208 KiB default a 256 KiB read
/// reply (nbdcopy's request size) does not fit, so every reply's `sendmsg` sleeps until the
/// client has drained part of it, holding the connection's write lock meanwhile. Measured on
/// a RAID 0 export with nbdcopy reads: 512 KiB to 2 MiB cut the server's context switches about
/// four times and its CPU per GB by about 15%; 4 MiB was no better than 1 MiB.
pub const DEFAULT_UNIX_SEND_BUFFER_BYTES: usize = 1 << 20;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            threads_per_connection: 8,
            max_connections: 64,
            inflight_bytes_per_connection: 64 << 20,
            handshake_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            unix_send_buffer_bytes: Some(DEFAULT_UNIX_SEND_BUFFER_BYTES),
        }
    }
}

/// Builds a [`Server`].
pub struct ServerBuilder {
    exports: Vec<(String, Arc<dyn Export>)>,
    default_export: Option<String>,
    config: ServerConfig,
    observer: Option<Observer>,
}

impl ServerBuilder {
    /// Adds an export under `name`.
    pub fn export(mut self, name: impl Into<String>, export: Arc<dyn Export>) -> Self {
        self.exports.push((name.into(), export));
        self
    }

    /// The export a client gets when it asks for the empty name. Without this, the empty name
    /// selects the only export if there is exactly one.
    pub fn default_export(mut self, name: impl Into<String>) -> Self {
        self.default_export = Some(name.into());
        self
    }

    /// Requests executed at once per connection (workers sharing the socket).
    pub fn threads_per_connection(mut self, threads: usize) -> Self {
        self.config.threads_per_connection = threads;
        self
    }

    /// Connections served at once; more are closed on arrival.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.config.max_connections = connections;
        self
    }

    /// Payload bytes buffered at once per connection.
    pub fn inflight_bytes_per_connection(mut self, bytes: u64) -> Self {
        self.config.inflight_bytes_per_connection = bytes;
        self
    }

    /// How long a client may take over the whole negotiation.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.config.handshake_timeout = timeout;
        self
    }

    /// `SO_SNDBUF` for accepted unix connections (`None`: the system default).
    pub fn unix_send_buffer_bytes(mut self, bytes: Option<usize>) -> Self {
        self.config.unix_send_buffer_bytes = bytes;
        self
    }

    /// How long shutdown waits for connections to finish before cutting them.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.config.shutdown_grace = grace;
        self
    }

    /// Calls `observer` for every [`ServerEvent`].
    pub fn observer(mut self, observer: Observer) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Checks the exports and limits.
    pub fn build(self) -> Result<Server, ServerError> {
        if self.exports.is_empty() {
            return Err(ServerError::NoExports);
        }
        if self.config.threads_per_connection == 0 {
            return Err(ServerError::ZeroLimit("threads_per_connection"));
        }
        if self.config.max_connections == 0 {
            return Err(ServerError::ZeroLimit("max_connections"));
        }
        let mut exports = BTreeMap::new();
        for (name, export) in self.exports {
            if name.len() > crate::proto::MAX_STRING_BYTES || name.contains('\0') {
                return Err(ServerError::BadExportName(name));
            }
            if let Err(error) = export.block_size().validate() {
                return Err(ServerError::BadBlockSize {
                    export: name,
                    error,
                });
            }
            if exports.contains_key(&name) {
                return Err(ServerError::DuplicateExport(name));
            }
            exports.insert(name, export);
        }
        let default_export = match self.default_export {
            Some(name) if !exports.contains_key(&name) => {
                return Err(ServerError::UnknownDefaultExport(name))
            }
            Some(name) => Some(name),
            None if exports.len() == 1 => exports.keys().next().cloned(),
            None => None,
        };
        Ok(Server {
            exports,
            default_export,
            config: self.config,
            observer: self.observer,
        })
    }
}

/// An NBD server over a set of named exports.
pub struct Server {
    exports: BTreeMap<String, Arc<dyn Export>>,
    default_export: Option<String>,
    config: ServerConfig,
    observer: Option<Observer>,
}

impl Catalog for Server {
    fn find(&self, name: &str) -> Option<ExportInfo> {
        let (name, export) = self.lookup(name)?;
        Some(ExportInfo::of(name, export.as_ref()))
    }

    fn list(&self) -> Vec<(String, Option<String>)> {
        self.exports
            .iter()
            .map(|(name, e)| (name.clone(), e.description()))
            .collect()
    }
}

/// Serves `exports` on `listener` until `shutdown` becomes true, then stops accepting, lets
/// in-flight requests finish, closes connections, flushes every export and returns.
pub fn serve(
    listener: &Listener,
    exports: impl IntoIterator<Item = (String, Arc<dyn Export>)>,
    shutdown: &AtomicBool,
) -> Result<ServeReport, ServerError> {
    let mut builder = Server::builder();
    for (name, export) in exports {
        builder = builder.export(name, export);
    }
    builder.build()?.serve(listener, shutdown)
}

impl Server {
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            exports: Vec::new(),
            default_export: None,
            config: ServerConfig::default(),
            observer: None,
        }
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    fn notify(&self, event: ServerEvent<'_>) {
        if let Some(observer) = &self.observer {
            observer(&event);
        }
    }

    fn lookup(&self, name: &str) -> Option<(&String, &Arc<dyn Export>)> {
        let name = if name.is_empty() {
            self.default_export.as_deref()?
        } else {
            name
        };
        self.exports.get_key_value(name)
    }

    /// Flushes every writable export; returns the failures.
    pub fn flush_all(&self) -> Vec<(String, io::Error)> {
        let mut failures = Vec::new();
        for (name, export) in &self.exports {
            if export.read_only() {
                continue;
            }
            if let Err(e) = export.flush() {
                failures.push((name.clone(), e));
            }
        }
        failures
    }

    /// Accepts and serves connections until `shutdown` is set. See [`serve`].
    pub fn serve(
        &self,
        listener: &Listener,
        shutdown: &AtomicBool,
    ) -> Result<ServeReport, ServerError> {
        let registry: Mutex<HashMap<u64, Transport>> = Mutex::new(HashMap::new());
        let active = AtomicUsize::new(0);
        let accepted = AtomicU64::new(0);
        let refused = AtomicU64::new(0);
        let handshake_failures = AtomicU64::new(0);
        let mut cut = 0u64;
        let mut next_id = 0u64;
        // Non-blocking, so a client that vanishes between poll and accept cannot stall us.
        listener.set_nonblocking().map_err(ServerError::Io)?;
        let result: io::Result<()> = std::thread::scope(|scope| {
            let mut fatal = None;
            while !shutdown.load(Ordering::SeqCst) {
                match poll_readable(listener.as_raw_fd(), 100) {
                    Ok(false) => continue,
                    Ok(true) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        fatal = Some(e);
                        break;
                    }
                }
                let transport = match listener.accept() {
                    Ok(t) => t,
                    Err(e) if transient_accept_error(&e) => {
                        // Out of descriptors or a client gone before accept: back off briefly
                        // rather than spin.
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    Err(e) => {
                        fatal = Some(e);
                        break;
                    }
                };
                if let Some(bytes) = self.config.unix_send_buffer_bytes {
                    transport.set_unix_send_buffer(bytes);
                }
                if active.load(Ordering::SeqCst) >= self.config.max_connections {
                    refused.fetch_add(1, Ordering::Relaxed);
                    self.notify(ServerEvent::Refused);
                    continue;
                }
                let Ok(handle) = transport.try_clone() else {
                    continue;
                };
                accepted.fetch_add(1, Ordering::Relaxed);
                let id = next_id;
                next_id += 1;
                lock(&registry).insert(id, handle);
                active.fetch_add(1, Ordering::SeqCst);
                let (registry, active, handshake_failures) =
                    (&registry, &active, &handshake_failures);
                let spawned = std::thread::Builder::new()
                    .name(format!("nbd-conn-{id}"))
                    .spawn_scoped(scope, move || {
                        self.notify(ServerEvent::Accepted { connection: id });
                        let end = self.serve_connection_numbered(transport, id);
                        self.notify(ServerEvent::Closed {
                            connection: id,
                            end: &end,
                        });
                        if matches!(end, ConnectionEnd::HandshakeFailed(_)) {
                            handshake_failures.fetch_add(1, Ordering::Relaxed);
                        }
                        lock(registry).remove(&id);
                        active.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    lock(registry).remove(&id);
                    active.fetch_sub(1, Ordering::SeqCst);
                }
            }
            // Stop reading new requests everywhere; in-flight ones still reply.
            for t in lock(&registry).values() {
                t.shutdown(Shutdown::Read);
            }
            let deadline = Instant::now() + self.config.shutdown_grace;
            while active.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            for t in lock(&registry).values() {
                cut += 1;
                t.shutdown(Shutdown::Both);
            }
            fatal.map_or(Ok(()), Err)
        });
        result.map_err(ServerError::Io)?;
        Ok(ServeReport {
            connections_accepted: accepted.load(Ordering::Relaxed),
            connections_refused: refused.load(Ordering::Relaxed),
            handshake_failures: handshake_failures.load(Ordering::Relaxed),
            connections_cut: cut,
            flush_failures: self.flush_all(),
        })
    }

    /// Serves one already connected client to the end, containing any panic.
    pub fn serve_connection(&self, transport: Transport) -> ConnectionEnd {
        self.serve_connection_numbered(transport, u64::MAX)
    }

    fn serve_connection_numbered(&self, transport: Transport, id: u64) -> ConnectionEnd {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.serve_connection_inner(&transport, id)
        }));
        transport.shutdown(Shutdown::Both);
        result.unwrap_or(ConnectionEnd::Panicked)
    }

    fn serve_connection_inner(&self, t: &Transport, id: u64) -> ConnectionEnd {
        let negotiated = match self.negotiate(t) {
            Ok(Outcome::Transmission(n)) => n,
            Ok(Outcome::Aborted) => return ConnectionEnd::Aborted,
            Err(end) => return end,
        };
        self.notify(ServerEvent::Negotiated {
            connection: id,
            export: &negotiated.export.name,
            structured_replies: negotiated.structured_replies,
        });
        let Some((_, export)) = self.lookup(&negotiated.export.name) else {
            return ConnectionEnd::HandshakeFailed("export vanished".into());
        };
        if t.set_read_timeout(None).is_err() {
            return ConnectionEnd::Closed;
        }
        let conn = Connection {
            t,
            export: export.as_ref(),
            session: Session::new(&negotiated),
            reader: Mutex::new(ReadBuffer::new()),
            writer: Mutex::new(()),
            stop: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            violation: Mutex::new(None),
            budget: Budget::new(self.config.inflight_bytes_per_connection),
            last_write_end: AtomicU64::new(u64::MAX),
            in_flight: AtomicUsize::new(0),
        };
        std::thread::scope(|scope| {
            for _ in 1..self.config.threads_per_connection {
                let conn = &conn;
                let _ = std::thread::Builder::new()
                    .name("nbd-worker".into())
                    .spawn_scoped(scope, move || conn.work_contained());
            }
            conn.work_contained();
        });
        if conn.panicked.load(Ordering::SeqCst) {
            return ConnectionEnd::Panicked;
        }
        let violation = lock(&conn.violation).take();
        match violation {
            Some(v) => ConnectionEnd::ProtocolViolation(v),
            None => ConnectionEnd::Closed,
        }
    }

    fn negotiate(&self, t: &Transport) -> Result<Outcome, ConnectionEnd> {
        let closed = |e: io::Error| ConnectionEnd::HandshakeFailed(e.to_string());
        // The whole negotiation must finish in time, so a client trickling bytes cannot hold
        // a connection slot forever.
        let deadline = Instant::now() + self.config.handshake_timeout;
        let mut hs = Handshake::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let out = hs.take_output();
            if !out.is_empty() {
                t.send_all(&[&out]).map_err(closed)?;
            }
            if hs.outcome().is_some() {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ConnectionEnd::HandshakeFailed(
                    "negotiation took longer than the handshake timeout".into(),
                ));
            }
            t.set_read_timeout(Some(left)).map_err(closed)?;
            let want = hs.bytes_wanted().clamp(1, buf.len());
            let n = t.read(&mut buf[..want]).map_err(closed)?;
            if n == 0 {
                return Err(ConnectionEnd::HandshakeFailed(
                    "client closed the connection during negotiation".into(),
                ));
            }
            if let Err(e) = hs.receive(&buf[..n], self) {
                return Err(handshake_failed(e));
            }
        }
        hs.into_outcome()
            .ok_or_else(|| ConnectionEnd::HandshakeFailed("no outcome".into()))
    }
}

fn handshake_failed(e: HandshakeError) -> ConnectionEnd {
    ConnectionEnd::HandshakeFailed(e.to_string())
}

fn transient_accept_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR)
            | Some(libc::ECONNABORTED)
            | Some(libc::EMFILE)
            | Some(libc::ENFILE)
            | Some(libc::ENOBUFS)
            | Some(libc::ENOMEM)
            | Some(libc::EAGAIN)
            | Some(libc::EPROTO)
    )
}

fn poll_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc > 0)
}

/// Whether `fd` has data (or an end) to read within `wait` (no wait for zero).
fn wait_readable(fd: RawFd, wait: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: wait.as_secs() as libc::time_t,
        tv_nsec: wait.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd and timespec on the stack for the duration of the call; no
    // signal mask is given.
    let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    rc > 0
}

/// Locks a mutex, ignoring poisoning: every value guarded here stays valid if a holder
/// panicked (counters, buffers whose contents are re-read, a unit value).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The shared read side of a connection: buffered so one `read` can pick up several small
/// requests, bypassed for large payloads.
///
/// After a large payload went straight into a worker's buffer, the next fill reads only one
/// request header: a client streaming large writes (nbdcopy sends 256 KiB requests) would
/// otherwise have the next payload pulled into this buffer and copied a second time.
struct ReadBuffer {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The next fill reads one request header only.
    header_fill: bool,
}

impl ReadBuffer {
    fn new() -> ReadBuffer {
        ReadBuffer {
            buf: vec![0u8; READ_BUFFER_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            header_fill: false,
        }
    }

    fn fill(&mut self, t: &Transport) -> io::Result<()> {
        self.start = 0;
        self.end = 0;
        let limit = if std::mem::take(&mut self.header_fill) {
            REQUEST_HEADER_BYTES
        } else {
            self.buf.len()
        };
        let n = t.read(&mut self.buf[..limit])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.end = n;
        Ok(())
    }

    fn read_exact(&mut self, t: &Transport, dst: &mut [u8]) -> io::Result<()> {
        // A large destination is read into directly to its end, even when the last piece is
        // small: filling the buffer then would pull in (and later copy) the next payload.
        let direct = dst.len() >= self.buf.len() / 2;
        let mut filled = 0;
        while filled < dst.len() {
            if self.start < self.end {
                let n = (self.end - self.start).min(dst.len() - filled);
                dst[filled..filled + n].copy_from_slice(&self.buf[self.start..self.start + n]);
                self.start += n;
                filled += n;
            } else if direct {
                let n = t.read(&mut dst[filled..])?;
                if n == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                filled += n;
                self.header_fill = true;
            } else {
                self.fill(t)?;
            }
        }
        Ok(())
    }

    /// The next request header if its bytes have arrived, without waiting and without
    /// consuming it: what is buffered, topped up by at most one read of the missing header
    /// bytes when the socket already has data (so no payload is pulled into the buffer).
    fn peek_header(&mut self, t: &Transport, wait: Duration) -> Option<[u8; REQUEST_HEADER_BYTES]> {
        if self.end - self.start < REQUEST_HEADER_BYTES {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if !wait_readable(t.fd(), wait) {
                return None;
            }
            match t.read(&mut self.buf[self.end..REQUEST_HEADER_BYTES]) {
                Ok(n) if n > 0 => self.end += n,
                // End of stream or an error: the blocking read that comes next reports it.
                _ => return None,
            }
            if self.end < REQUEST_HEADER_BYTES {
                return None;
            }
        }
        let mut raw = [0u8; REQUEST_HEADER_BYTES];
        raw.copy_from_slice(&self.buf[self.start..self.start + REQUEST_HEADER_BYTES]);
        Some(raw)
    }

    fn consume(&mut self, n: usize) {
        self.start += n.min(self.end - self.start);
    }

    fn discard(&mut self, t: &Transport, mut len_bytes: u64) -> io::Result<()> {
        while len_bytes > 0 {
            if self.start == self.end {
                self.fill(t)?;
            }
            let n = ((self.end - self.start) as u64).min(len_bytes);
            self.start += n as usize;
            len_bytes -= n;
        }
        Ok(())
    }
}

/// Payload bytes a connection may hold at once.
struct Budget {
    used: Mutex<u64>,
    freed: Condvar,
    limit: u64,
}

impl Budget {
    fn new(limit: u64) -> Budget {
        Budget {
            used: Mutex::new(0),
            freed: Condvar::new(),
            limit,
        }
    }

    /// Waits until `n` more bytes fit (a request larger than the limit waits to run alone).
    fn acquire(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mut used = lock(&self.used);
        while *used > 0 && *used + n > self.limit {
            used = self.freed.wait(used).unwrap_or_else(|e| e.into_inner());
        }
        *used += n;
    }

    fn release(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mut used = lock(&self.used);
        *used -= n.min(*used);
        self.freed.notify_all();
    }
}

enum Job {
    Execute {
        /// For a gathered write: the first request, its length grown to cover the others.
        request: Request,
        budget_bytes: u64,
        /// Cookies of further writes gathered into `request` (they get the same reply).
        gathered: Vec<u64>,
    },
    Reject {
        cookie: u64,
        error: NbdError,
        message: &'static str,
    },
}

struct Connection<'a> {
    t: &'a Transport,
    export: &'a dyn Export,
    session: Session,
    reader: Mutex<ReadBuffer>,
    writer: Mutex<()>,
    stop: AtomicBool,
    panicked: AtomicBool,
    violation: Mutex<Option<String>>,
    budget: Budget,
    /// End offset of the last write read on this connection (to tell a write stream).
    last_write_end: AtomicU64,
    /// Requests read whose reply has not been sent yet.
    in_flight: AtomicUsize,
}

impl Connection<'_> {
    /// Runs a worker; if the export (or anything else) panics, ends this connection only:
    /// the socket is shut so the other workers wake up and leave.
    fn work_contained(&self) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.work()));
        if result.is_err() {
            self.panicked.store(true, Ordering::SeqCst);
            self.stop_with(None);
            // The panicking request may have held budget; free it all so no worker waits.
            self.budget.release(u64::MAX);
            self.t.shutdown(Shutdown::Both);
        }
    }

    fn work(&self) {
        let mut buf: Vec<u8> = Vec::new();
        let mut reply: Vec<u8> = Vec::new();
        while let Some(job) = self.next_job(&mut buf) {
            let sent = match job {
                Job::Execute {
                    request,
                    budget_bytes,
                    gathered,
                } => {
                    let sent = self.execute(&request, &gathered, &mut buf, &mut reply);
                    self.budget.release(budget_bytes);
                    sent
                }
                Job::Reject {
                    cookie,
                    error,
                    message,
                } => {
                    reply.clear();
                    error_reply(&self.session, cookie, error, message, &mut reply);
                    self.send_replies(1, &[&reply])
                }
            };
            if buf.capacity() > RETAINED_BUFFER_BYTES {
                buf = Vec::new();
            }
            if sent.is_err() {
                self.stop_with(None);
                // Wake the worker blocked reading so the connection ends.
                self.t.shutdown(Shutdown::Both);
                break;
            }
        }
    }

    fn stop_with(&self, violation: Option<String>) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(v) = violation {
            lock(&self.violation).get_or_insert(v);
        }
    }

    /// Reads the next request under the read lock. `None` ends this worker.
    fn next_job(&self, buf: &mut Vec<u8>) -> Option<Job> {
        let mut reader = lock(&self.reader);
        if self.stop.load(Ordering::SeqCst) {
            return None;
        }
        let mut raw = [0u8; REQUEST_HEADER_BYTES];
        if reader.read_exact(self.t, &mut raw).is_err() {
            self.stop_with(None);
            return None;
        }
        let header = match RequestHeader::parse(&raw) {
            Ok(h) => h,
            Err(e) => {
                self.stop_with(Some(e.to_string()));
                return None;
            }
        };
        match self.session.decide(&header) {
            Decision::Execute(request) => {
                let payload = matches!(request.command, Command::Read | Command::Write { .. });
                let len = request.len_bytes as usize;
                // Payloads up to the retained size are already bounded by the worker count;
                // only larger ones draw on the budget (which costs a wake-up per request).
                let budget_bytes = if payload && len > RETAINED_BUFFER_BYTES {
                    len as u64
                } else {
                    0
                };
                self.budget.acquire(budget_bytes);
                if buf.len() < len && payload {
                    buf.resize(len, 0);
                }
                let mut request = request;
                let mut gathered = Vec::new();
                if let Command::Write { .. } = request.command {
                    if reader.read_exact(self.t, &mut buf[..len]).is_err() {
                        self.budget.release(budget_bytes);
                        self.stop_with(None);
                        return None;
                    }
                    if budget_bytes == 0
                        && self
                            .gather_writes(&mut reader, &mut request, &mut gathered, buf)
                            .is_err()
                    {
                        self.stop_with(None);
                        return None;
                    }
                }
                self.in_flight
                    .fetch_add(1 + gathered.len(), Ordering::Relaxed);
                Some(Job::Execute {
                    request,
                    budget_bytes,
                    gathered,
                })
            }
            Decision::Reject {
                cookie,
                error,
                reason,
                discard_bytes,
                ..
            } => {
                if reader.discard(self.t, u64::from(discard_bytes)).is_err() {
                    self.stop_with(None);
                    return None;
                }
                self.in_flight.fetch_add(1, Ordering::Relaxed);
                Some(Job::Reject {
                    cookie,
                    error,
                    message: reason.message(),
                })
            }
            Decision::Disconnect(reason) => {
                let violation = match reason {
                    crate::transmission::DisconnectReason::ClientRequested => None,
                    crate::transmission::DisconnectReason::PayloadTooLarge(n) => {
                        Some(format!("WRITE payload of {n} bytes is too large to skip"))
                    }
                };
                self.stop_with(violation);
                None
            }
        }
    }

    /// After a WRITE (already in `buf`): takes the WRITEs queued right behind it that continue
    /// it, while the gathered range has not reached the end of the export's gather unit and
    /// stays within [`RETAINED_BUFFER_BYTES`]. Only requests whose header has already arrived
    /// are taken; the first one that does not qualify stays in the read buffer for the next
    /// worker. An error is a broken connection.
    fn gather_writes(
        &self,
        reader: &mut ReadBuffer,
        request: &mut Request,
        gathered: &mut Vec<u64>,
        buf: &mut Vec<u8>,
    ) -> io::Result<()> {
        let unit = self.export.write_gather_bytes();
        if unit == 0 {
            return Ok(());
        }
        // A client streaming writes (each one starting where the last one read here ended)
        // with more requests outstanding is given a moment to send the next header; others
        // are never waited for (a client that waits for each reply would only lose the time).
        let streaming = self.last_write_end.load(Ordering::Relaxed) == request.offset
            && request.offset > 0
            && self.in_flight.load(Ordering::Relaxed) > 0;
        let wait = if streaming {
            GATHER_WAIT
        } else {
            Duration::ZERO
        };
        let result = loop {
            let end = request.offset + u64::from(request.len_bytes);
            if end.is_multiple_of(unit) {
                break Ok(());
            }
            let Some(raw) = reader.peek_header(self.t, wait) else {
                break Ok(());
            };
            let Ok(header) = RequestHeader::parse(&raw) else {
                break Ok(());
            };
            let Decision::Execute(next) = self.session.decide(&header) else {
                break Ok(());
            };
            let (Command::Write { fua: next_fua }, Command::Write { fua }) =
                (next.command, request.command)
            else {
                break Ok(());
            };
            let have = request.len_bytes as usize;
            let more = next.len_bytes as usize;
            if next.offset != end || next.len_bytes == 0 || have + more > RETAINED_BUFFER_BYTES {
                break Ok(());
            }
            reader.consume(REQUEST_HEADER_BYTES);
            if buf.len() < have + more {
                buf.resize(have + more, 0);
            }
            if let Err(e) = reader.read_exact(self.t, &mut buf[have..have + more]) {
                break Err(e);
            }
            request.len_bytes += next.len_bytes;
            request.command = Command::Write {
                fua: fua || next_fua,
            };
            gathered.push(next.cookie);
        };
        self.last_write_end.store(
            request.offset + u64::from(request.len_bytes),
            Ordering::Relaxed,
        );
        result
    }

    fn send(&self, parts: &[&[u8]]) -> io::Result<()> {
        let _guard = lock(&self.writer);
        self.t.send_all(parts)
    }

    /// Sends the replies to `requests` requests; they stop counting as in flight first, so a
    /// client that waits for each reply is never taken for one that streams.
    fn send_replies(&self, requests: usize, parts: &[&[u8]]) -> io::Result<()> {
        self.in_flight.fetch_sub(requests, Ordering::Relaxed);
        self.send(parts)
    }

    fn execute(
        &self,
        request: &Request,
        gathered: &[u64],
        buf: &mut [u8],
        reply: &mut Vec<u8>,
    ) -> io::Result<()> {
        let len = request.len_bytes as usize;
        let cookie = request.cookie;
        let n = 1 + gathered.len();
        let result = match request.command {
            Command::Read => match self.export.read_at(request.offset, &mut buf[..len]) {
                Ok(()) => {
                    return if !self.session.structured_replies {
                        self.send_replies(n, &[&simple_reply(cookie, None), &buf[..len]])
                    } else if len == 0 {
                        self.send_replies(n, &[&structured_done(cookie)])
                    } else {
                        let header = structured_read_header(cookie, request.offset, len as u32);
                        self.send_replies(n, &[&header, &buf[..len]])
                    };
                }
                Err(e) => Err(e),
            },
            Command::Write { fua } => self.export.write_at(request.offset, &buf[..len], fua),
            Command::Flush => self.export.flush(),
            Command::Trim { fua } => self.export.trim(request.offset, len as u64, fua),
            Command::Cache => Ok(()),
            // As in nbdkit, zeroing is offered even when the export has no cheap way to do
            // it; the server then writes zeroes from a small buffer.
            Command::WriteZeroes { fua, may_trim } if self.export.can_zero() => self
                .export
                .write_zeroes(request.offset, len as u64, fua, may_trim),
            Command::WriteZeroes { fua, .. } => {
                write_zeroes_by_writing(self.export, request.offset, len as u64, fua)
            }
        };
        // One reply per request, gathered writes included, in one send.
        reply.clear();
        for &c in std::iter::once(&cookie).chain(gathered) {
            match &result {
                Ok(()) => reply.extend_from_slice(&simple_reply(c, None)),
                Err(e) => {
                    let message = e.to_string();
                    error_reply(&self.session, c, NbdError::from_io(e), &message, reply);
                }
            }
        }
        self.send_replies(n, &[reply])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Large payloads go straight to the worker's buffer, and the header after one is read
    /// alone, so the next payload is not pulled into the shared buffer and copied twice.
    #[test]
    fn large_payloads_bypass_the_read_buffer() {
        let (client, server) = UnixStream::pair().unwrap();
        let t = Transport::Unix(server);
        let payload: Vec<u8> = (0..256u32 << 10).map(|i| (i % 253) as u8).collect();
        let header = [0xabu8; REQUEST_HEADER_BYTES];
        let writer = std::thread::spawn(move || {
            let mut c = &client;
            for _ in 0..3 {
                std::io::Write::write_all(&mut c, &header).unwrap();
                std::io::Write::write_all(&mut c, &payload).unwrap();
            }
            // Several small requests in a row: one fill picks them all up.
            for _ in 0..4 {
                std::io::Write::write_all(&mut c, &header).unwrap();
            }
            client
        });
        let mut rb = ReadBuffer::new();
        let mut h = [0u8; REQUEST_HEADER_BYTES];
        let mut p = vec![0u8; 256 << 10];
        for round in 0..3 {
            rb.read_exact(&t, &mut h).unwrap();
            assert_eq!(h, [0xab; REQUEST_HEADER_BYTES]);
            if round > 0 {
                assert_eq!(
                    rb.end - rb.start,
                    0,
                    "round {round}: payload bytes were read into the shared buffer"
                );
            }
            rb.read_exact(&t, &mut p).unwrap();
            assert!(p.iter().enumerate().all(|(i, &b)| b == (i % 253) as u8));
        }
        let _client = writer.join().unwrap();
        for _ in 0..4 {
            rb.read_exact(&t, &mut h).unwrap();
            assert_eq!(h, [0xab; REQUEST_HEADER_BYTES]);
        }
    }
}
