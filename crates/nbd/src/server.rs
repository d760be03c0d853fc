//! The server driver: sockets, threads, TLS, limits and shutdown around the sans-IO codec.
//!
//! One thread per connection negotiates; in transmission a small pool of workers per
//! connection shares the socket in the leader/follower style nbdkit uses: a worker takes the
//! read lock, reads one request (header and any WRITE payload) through a shared read buffer,
//! releases the lock, calls the export, and sends its reply under the write lock with a single
//! vectored `sendmsg`. Reading the next request therefore overlaps with executing this one, and
//! up to `threads_per_connection` requests run at once.
//!
//! A connection is a `Link`: the plain socket, or the socket wrapped in a TLS session after
//! `NBD_OPT_STARTTLS` (crate::tls owns how workers share one). The plain link calls the socket
//! directly, so TLS costs the plain path one `match` per read and per reply, nothing more.
//!
//! Memory per connection is bounded by `inflight_bytes_per_connection`: every payload buffer a
//! request holds (a WRITE's data as it is read, a READ's data until its reply is sent) is
//! charged to the connection's `Buffers` from allocation until the reply is out, and so are
//! the buffers workers keep for reuse; a request that does not fit waits (under the read lock,
//! so the client is not read further) until replies free enough, after idle kept buffers were
//! freed first. One request larger than the cap runs alone. What is not charged is a small
//! constant per connection: the 128 KiB read buffer, each worker's reply scratch (headers and
//! error messages, a few KiB), and with TLS the 64 KiB ciphertext inbox and rustls' own
//! buffers (about 64 KiB out, 16 KiB records in, and each sender's 64 KiB encryption batch).
//!
//! Invariants: a connection never holds more payload bytes than its cap (or one oversized
//! request alone) plus that constant; a connection never touches another connection's state,
//! and a panic inside one is contained to it; a connection with no request in flight that
//! sends nothing for `idle_timeout` is closed; every refused or ended connection is reported
//! to the observer with its reason. Shutdown stops accepting, lets in-flight requests finish
//! and reply, closes every connection, flushes every export and returns.

use crate::escape::escape_for_log;
use crate::export::{write_zeroes_by_writing, BlockSizeError, Export};
use crate::handshake::{Catalog, ExportInfo, Handshake, HandshakeError, Outcome, TlsMode};
use crate::proto::{NbdError, REQUEST_HEADER_BYTES};
use crate::tls::{TlsConfig, TlsStream};
use crate::transmission::{
    error_reply, simple_reply, structured_done, structured_read_header, Command, Decision, Request,
    RequestHeader, Session,
};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a worker that is gathering a streaming client's writes waits for the next
/// request header to arrive (it holds the read lock meanwhile, as it would while reading).
const GATHER_WAIT: Duration = Duration::from_micros(200);

/// Worker buffers larger than this are freed after use instead of kept for the next request
/// (kept ones still count against `inflight_bytes_per_connection`).
pub const RETAINED_BUFFER_BYTES: usize = 4 << 20;
/// Mode of a unix socket made by [`Listener::bind_unix`]: owner and group may connect.
pub const DEFAULT_UNIX_SOCKET_MODE: u32 = 0o660;
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
    /// Binds a unix socket at `path` with mode [`DEFAULT_UNIX_SOCKET_MODE`] (0660) whatever
    /// the umask, replacing a stale socket file left by a previous run (but not one a live
    /// server still answers on: that is `AddrInUse`).
    pub fn bind_unix(path: &Path) -> io::Result<Listener> {
        Self::bind_unix_with(path, DEFAULT_UNIX_SOCKET_MODE, None)
    }

    /// Binds a unix socket at `path` with permission bits `mode` (only 0o777 is used) and,
    /// if `group` is given, that owning group.
    ///
    /// The socket file is never more open than asked, at no instant: the socket is given
    /// mode 0600 with `fchmod` before `bind` (Linux creates the file from the socket's mode,
    /// less the umask, so it starts owner-only whatever the umask), then the file is
    /// re-opened with `O_PATH | O_NOFOLLOW`, checked to be a socket we own (so a file swapped
    /// in meanwhile is never changed), given its group, and only then its final mode. The
    /// umask is not touched: it is process-wide, and changing it would race with every other
    /// thread creating files.
    pub fn bind_unix_with(path: &Path, mode: u32, group: Option<u32>) -> io::Result<Listener> {
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
        let listener = bind_owner_only(path)?;
        let bound = Listener::Unix {
            listener,
            path: path.to_path_buf(),
        };
        // From here on, dropping `bound` removes the file again if anything fails.
        set_socket_file_access(path, mode & 0o777, group)?;
        Ok(bound)
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

/// Creates a listening unix socket at `path` whose file starts with mode 0600 or less
/// (see [`Listener::bind_unix_with`]).
fn bind_owner_only(path: &Path) -> io::Result<UnixListener> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; zero is a valid value for every field.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: a unix socket path must be 1 to {} bytes without NUL",
                path.display(),
                addr.sun_path.len() - 1
            ),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    // SAFETY: plain system calls on a descriptor we own; `addr` outlives the bind call and
    // its size is passed.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = OwnedFd::from_raw_fd(fd);
        if libc::fchmod(fd.as_raw_fd(), 0o600) != 0 {
            return Err(io::Error::last_os_error());
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        if libc::bind(
            fd.as_raw_fd(),
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        let listener = UnixListener::from(fd);
        if libc::listen(listener.as_raw_fd(), 128) != 0 {
            let err = io::Error::last_os_error();
            let _ = std::fs::remove_file(path);
            return Err(err);
        }
        Ok(listener)
    }
}

/// Gives the socket file at `path` its group, then `mode`, acting only on the file if it is
/// still a socket owned by this process's user (opened with `O_PATH | O_NOFOLLOW`, so a
/// symlink or another file put there meanwhile is refused, not followed).
fn set_socket_file_access(path: &Path, mode: u32, group: Option<u32>) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: plain system calls; the path is NUL-terminated, the fd ours, `st` written by
    // fstat before it is read.
    unsafe {
        let fd = libc::open(
            c_path.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = OwnedFd::from_raw_fd(fd);
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK || st.st_uid != libc::geteuid() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} was replaced by something else while binding",
                    path.display()
                ),
            ));
        }
        if let Some(gid) = group {
            let empty = c"";
            if libc::fchownat(
                fd.as_raw_fd(),
                empty.as_ptr(),
                u32::MAX,
                gid,
                libc::AT_EMPTY_PATH,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        // fchmod does not work on an O_PATH descriptor; its /proc link names the same inode.
        let proc_path = std::ffi::CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        if libc::chmod(proc_path.as_ptr(), mode as libc::mode_t) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Listener {
    /// Accepts one connection and says who is on the other end.
    fn accept_peer(&self) -> io::Result<(Transport, Peer)> {
        let t = self.accept()?;
        let peer = t.peer();
        Ok((t, peer))
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

/// Who is at the other end of a connection, for logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    Tcp(SocketAddr),
    /// A unix socket peer's credentials, as the kernel recorded them at `connect`
    /// (`SO_PEERCRED`).
    Unix {
        pid: i32,
        uid: u32,
        gid: u32,
    },
    /// The address or credentials could not be read.
    Unknown,
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Unix { pid, uid, gid } => write!(f, "pid {pid} uid {uid} gid {gid}"),
            Peer::Unknown => write!(f, "unknown peer"),
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

    /// The peer's address (TCP) or credentials (unix).
    pub fn peer(&self) -> Peer {
        match self {
            Transport::Tcp(s) => s.peer_addr().map(Peer::Tcp).unwrap_or(Peer::Unknown),
            Transport::Unix(s) => {
                // SAFETY: ucred is plain data; getsockopt writes at most `len` bytes into it.
                let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
                let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
                let rc = unsafe {
                    libc::getsockopt(
                        s.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_PEERCRED,
                        &mut cred as *mut libc::ucred as *mut libc::c_void,
                        &mut len,
                    )
                };
                if rc != 0 {
                    return Peer::Unknown;
                }
                Peer::Unix {
                    pid: cred.pid,
                    uid: cred.uid,
                    gid: cred.gid,
                }
            }
        }
    }

    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
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
    pub(crate) fn send_all(&self, parts: &[&[u8]]) -> io::Result<()> {
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

/// A connection's byte stream: the socket itself, or the socket under TLS once the client
/// started it. Every read and reply goes through here.
pub(crate) enum Link<'a> {
    Plain(&'a Transport),
    Tls {
        t: &'a Transport,
        tls: &'a TlsStream,
    },
}

impl Link<'_> {
    fn transport(&self) -> &Transport {
        match self {
            Link::Plain(t) | Link::Tls { t, .. } => t,
        }
    }

    /// Reads what is available (blocking for at least one byte). `writer` is the
    /// connection's writer lock, which TLS needs to send what reading produced.
    #[inline]
    fn read(&self, buf: &mut [u8], writer: &Mutex<()>) -> io::Result<usize> {
        match self {
            Link::Plain(t) => t.read(buf),
            Link::Tls { t, tls } => tls.read(t, buf, writer),
        }
    }

    /// Sends every byte of `parts` in order; the caller holds the writer lock.
    #[inline]
    fn send(&self, parts: &[&[u8]]) -> io::Result<()> {
        match self {
            Link::Plain(t) => t.send_all(parts),
            Link::Tls { t, tls } => tls.send(t, parts),
        }
    }

    /// Whether a read would find input within `wait` (at once for zero).
    fn input_ready(&self, wait: Duration) -> bool {
        match self {
            Link::Plain(t) => wait_readable(t.fd(), wait),
            Link::Tls { t, tls } => tls.has_buffered_input() || wait_readable(t.fd(), wait),
        }
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
    /// threads_per_connection and max_connections must be at least 1 (an idle timeout, if
    /// set, longer than zero).
    ZeroLimit(&'static str),
    /// TLS mode `On` or `Require` needs a [`TlsConfig`].
    TlsNotConfigured(TlsMode),
    /// The listening socket failed.
    Io(io::Error),
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::NoExports => write!(f, "a server needs at least one export"),
            ServerError::DuplicateExport(n) => {
                write!(f, "export name \"{}\" is used twice", escape_for_log(n))
            }
            ServerError::BadExportName(n) => write!(
                f,
                "export name \"{}\" must be at most 4096 bytes and contain no NUL",
                escape_for_log(n)
            ),
            ServerError::UnknownDefaultExport(n) => write!(
                f,
                "default export \"{}\" is not one of the exports",
                escape_for_log(n)
            ),
            ServerError::BadBlockSize { export, error } => {
                write!(f, "export \"{}\": {error}", escape_for_log(export))
            }
            ServerError::ZeroLimit(what) => write!(f, "{what} must be at least 1"),
            ServerError::TlsNotConfigured(mode) => {
                write!(
                    f,
                    "TLS mode {mode:?} needs a certificate and key (TlsConfig)"
                )
            }
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
    /// Connections refused because TLS is required and they did not use it, or whose TLS
    /// handshake failed.
    pub tls_refusals: u64,
    /// Connections closed by `idle_timeout`.
    pub idle_timeouts: u64,
    /// The most payload buffer bytes any one connection held at once.
    pub peak_payload_bytes_per_connection: u64,
    pub flush_failures: Vec<(String, io::Error)>,
}

impl ServeReport {
    /// True if every export was flushed after the last connection closed.
    pub fn all_flushed(&self) -> bool {
        self.flush_failures.is_empty()
    }
}

/// Why the server turned a client away or closed it, for logs and counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefusalReason {
    /// `max_connections` were already open; the connection was closed at once.
    TooManyConnections { limit: usize },
    /// TLS is required and the client did not start it (it was answered
    /// `NBD_REP_ERR_TLS_REQD` and left, or asked for an export by `NBD_OPT_EXPORT_NAME`).
    TlsRequired,
    /// The TLS handshake failed (no client certificate, one from another CA, no common
    /// protocol version...): rustls' reason.
    TlsHandshake(String),
    /// No request in flight and nothing received for this long (`idle_timeout`).
    IdleTimeout { idle: Duration },
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefusalReason::TooManyConnections { limit } => {
                write!(f, "too many connections (limit {limit})")
            }
            RefusalReason::TlsRequired => {
                write!(f, "TLS is required and the client did not use it")
            }
            RefusalReason::TlsHandshake(why) => write!(f, "TLS handshake failed: {why}"),
            RefusalReason::IdleTimeout { idle } => {
                write!(
                    f,
                    "idle for {} s with no request in flight",
                    idle.as_secs_f64()
                )
            }
        }
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
    /// The client broke the transmission protocol (bad magic, unskippable payload) or the
    /// TLS layer failed.
    ProtocolViolation(String),
    /// Code inside the connection panicked; the panic was contained.
    Panicked,
    /// The server turned the client away (TLS required or failed, idle timeout).
    Refused(RefusalReason),
}

impl fmt::Display for ConnectionEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectionEnd::Closed => write!(f, "closed"),
            ConnectionEnd::Aborted => write!(f, "aborted by the client"),
            ConnectionEnd::HandshakeFailed(why) => write!(f, "negotiation failed: {why}"),
            ConnectionEnd::ProtocolViolation(why) => write!(f, "protocol violation: {why}"),
            ConnectionEnd::Panicked => write!(f, "panicked (contained)"),
            ConnectionEnd::Refused(reason) => write!(f, "refused: {reason}"),
        }
    }
}

/// What happened on the server, for a caller that wants to log it (the library itself never
/// prints). Connection ids count up from 0 per `serve` call.
#[derive(Debug)]
pub enum ServerEvent<'a> {
    /// A connection was accepted and is negotiating.
    Accepted { connection: u64, peer: &'a Peer },
    /// A client was turned away: at once (`connection` is `None`: too many connections), or
    /// during or after negotiation (followed by `Closed` with the same reason).
    Refused {
        connection: Option<u64>,
        peer: &'a Peer,
        reason: &'a RefusalReason,
    },
    /// A connection entered the transmission phase on `export`.
    Negotiated {
        connection: u64,
        export: &'a str,
        structured_replies: bool,
        tls: bool,
    },
    /// A connection's requests first had to wait for `inflight_bytes_per_connection` (the
    /// client sends faster than replies leave); reported once per connection.
    Throttled {
        connection: u64,
        inflight_bytes_limit: u64,
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
    /// Requests executed at once per connection (workers sharing the socket). Default 8.
    pub threads_per_connection: usize,
    /// Connections served at once; one more is closed on arrival and reported as
    /// [`RefusalReason::TooManyConnections`]. Default 64. Anyone who can connect can fill
    /// them all (and, each, hold `inflight_bytes_per_connection`): set it to what the
    /// machine can afford for the clients you expect.
    pub max_connections: usize,
    /// Payload buffer bytes one connection may hold at once: WRITE data read and READ data
    /// not yet sent, plus buffers kept for reuse. Default 32 MiB, which is also the
    /// largest payload exports advertise by default; a single larger request still runs,
    /// alone. A client that sends requests and never reads replies is held to this (plus
    /// the per-connection constant in the module documentation).
    pub inflight_bytes_per_connection: u64,
    /// How long a client may take over the whole negotiation (TLS handshake included).
    pub handshake_timeout: Duration,
    /// A negotiated connection with no request in flight that sends nothing for this long
    /// is closed ([`RefusalReason::IdleTimeout`]). Default `None`: a block device that is
    /// mounted but unused (an idle ext4 over nbdfuse or the kernel client) legitimately
    /// sends nothing for hours, and closing it would fail its next I/O; a client that
    /// wants to hold a slot can send a request now and then anyway. Set it where clients
    /// are short-lived tools (nbdcopy, qemu-img) and leaked connections must be reclaimed.
    pub idle_timeout: Option<Duration>,
    /// Whether TLS is off, offered or required (`On` and `Require` need `tls`).
    pub tls_mode: TlsMode,
    /// Certificates and client policy for TLS.
    pub tls: Option<Arc<TlsConfig>>,
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

/// Default `inflight_bytes_per_connection`: the default maximum payload (32 MiB), so one
/// largest request fits, and 64 connections hold at most 2 GiB of payload between them.
pub const DEFAULT_INFLIGHT_BYTES_PER_CONNECTION: u64 = 32 << 20;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            threads_per_connection: 8,
            max_connections: 64,
            inflight_bytes_per_connection: DEFAULT_INFLIGHT_BYTES_PER_CONNECTION,
            handshake_timeout: Duration::from_secs(30),
            idle_timeout: None,
            tls_mode: TlsMode::Off,
            tls: None,
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

    /// Payload bytes buffered at once per connection (see [`ServerConfig`]).
    pub fn inflight_bytes_per_connection(mut self, bytes: u64) -> Self {
        self.config.inflight_bytes_per_connection = bytes;
        self
    }

    /// Closes negotiated connections idle for `timeout` (`None`: never; see
    /// [`ServerConfig::idle_timeout`]).
    pub fn idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config.idle_timeout = timeout;
        self
    }

    /// TLS: `Off`, `On` (offered) or `Require`; the last two need `config`.
    pub fn tls(mut self, mode: TlsMode, config: Option<Arc<TlsConfig>>) -> Self {
        self.config.tls_mode = mode;
        self.config.tls = config;
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
        if self.config.idle_timeout == Some(Duration::ZERO) {
            return Err(ServerError::ZeroLimit("idle_timeout"));
        }
        if self.config.tls_mode != TlsMode::Off && self.config.tls.is_none() {
            return Err(ServerError::TlsNotConfigured(self.config.tls_mode));
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
            payload_bytes: AtomicU64::new(0),
        })
    }
}

/// An NBD server over a set of named exports.
pub struct Server {
    exports: BTreeMap<String, Arc<dyn Export>>,
    default_export: Option<String>,
    config: ServerConfig,
    observer: Option<Observer>,
    /// Payload buffer bytes held by all connections now.
    payload_bytes: AtomicU64,
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

    /// Payload buffer bytes all connections hold right now (what
    /// `inflight_bytes_per_connection` bounds per connection).
    pub fn payload_buffer_bytes(&self) -> u64 {
        self.payload_bytes.load(Ordering::Relaxed)
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
        let counters = Counters::default();
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
                let (transport, peer) = match listener.accept_peer() {
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
                if active.load(Ordering::SeqCst) >= self.config.max_connections {
                    counters.refused.fetch_add(1, Ordering::Relaxed);
                    self.notify(ServerEvent::Refused {
                        connection: None,
                        peer: &peer,
                        reason: &RefusalReason::TooManyConnections {
                            limit: self.config.max_connections,
                        },
                    });
                    continue;
                }
                if let Some(bytes) = self.config.unix_send_buffer_bytes {
                    transport.set_unix_send_buffer(bytes);
                }
                let Ok(handle) = transport.try_clone() else {
                    continue;
                };
                counters.accepted.fetch_add(1, Ordering::Relaxed);
                let id = next_id;
                next_id += 1;
                lock(&registry).insert(id, handle);
                active.fetch_add(1, Ordering::SeqCst);
                let (registry, active, counters) = (&registry, &active, &counters);
                let spawned = std::thread::Builder::new()
                    .name(format!("nbd-conn-{id}"))
                    .spawn_scoped(scope, move || {
                        self.notify(ServerEvent::Accepted {
                            connection: id,
                            peer: &peer,
                        });
                        let end = self.serve_connection_numbered(transport, id, &counters.peak);
                        match &end {
                            ConnectionEnd::HandshakeFailed(_) => {
                                counters.handshake_failures.fetch_add(1, Ordering::Relaxed);
                            }
                            ConnectionEnd::Refused(reason) => {
                                let counter = match reason {
                                    RefusalReason::IdleTimeout { .. } => &counters.idle_timeouts,
                                    _ => &counters.tls_refusals,
                                };
                                counter.fetch_add(1, Ordering::Relaxed);
                                self.notify(ServerEvent::Refused {
                                    connection: Some(id),
                                    peer: &peer,
                                    reason,
                                });
                            }
                            _ => {}
                        }
                        self.notify(ServerEvent::Closed {
                            connection: id,
                            end: &end,
                        });
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
            connections_accepted: counters.accepted.load(Ordering::Relaxed),
            connections_refused: counters.refused.load(Ordering::Relaxed),
            handshake_failures: counters.handshake_failures.load(Ordering::Relaxed),
            connections_cut: cut,
            tls_refusals: counters.tls_refusals.load(Ordering::Relaxed),
            idle_timeouts: counters.idle_timeouts.load(Ordering::Relaxed),
            peak_payload_bytes_per_connection: counters.peak.load(Ordering::Relaxed),
            flush_failures: self.flush_all(),
        })
    }

    /// Serves one already connected client to the end, containing any panic.
    pub fn serve_connection(&self, transport: Transport) -> ConnectionEnd {
        self.serve_connection_numbered(transport, u64::MAX, &AtomicU64::new(0))
    }

    fn serve_connection_numbered(
        &self,
        transport: Transport,
        id: u64,
        peak: &AtomicU64,
    ) -> ConnectionEnd {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.serve_connection_inner(&transport, id, peak)
        }));
        transport.shutdown(Shutdown::Both);
        result.unwrap_or(ConnectionEnd::Panicked)
    }

    fn serve_connection_inner(&self, t: &Transport, id: u64, peak: &AtomicU64) -> ConnectionEnd {
        let (negotiated, tls) = match self.negotiate(t) {
            Ok((Outcome::Transmission(n), tls)) => (n, tls),
            Ok((Outcome::Aborted, tls)) => {
                if let Some(tls) = &tls {
                    tls.close(t, &Mutex::new(()));
                }
                return ConnectionEnd::Aborted;
            }
            Err(end) => return end,
        };
        self.notify(ServerEvent::Negotiated {
            connection: id,
            export: &negotiated.export.name,
            structured_replies: negotiated.structured_replies,
            tls: negotiated.tls,
        });
        let Some((_, export)) = self.lookup(&negotiated.export.name) else {
            return ConnectionEnd::HandshakeFailed("export vanished".into());
        };
        if t.set_read_timeout(self.config.idle_timeout).is_err() {
            return ConnectionEnd::Closed;
        }
        let link = match &tls {
            Some(tls) => Link::Tls { t, tls },
            None => Link::Plain(t),
        };
        let conn = Connection {
            server: self,
            id,
            link: &link,
            export: export.as_ref(),
            session: Session::new(&negotiated),
            reader: Mutex::new(ReadBuffer::new()),
            writer: Mutex::new(()),
            stop: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            violation: Mutex::new(None),
            buffers: Buffers::new(
                self.config.inflight_bytes_per_connection,
                self.config.threads_per_connection,
                &self.payload_bytes,
            ),
            throttled: AtomicBool::new(false),
            idle: self.config.idle_timeout.map(IdleWatch::new),
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
        if let Some(tls) = &tls {
            tls.close(t, &conn.writer);
        }
        peak.fetch_max(conn.buffers.peak_bytes(), Ordering::Relaxed);
        if conn.panicked.load(Ordering::SeqCst) {
            return ConnectionEnd::Panicked;
        }
        if let Some(idle) = conn
            .idle
            .as_ref()
            .filter(|i| i.expired.load(Ordering::SeqCst))
        {
            return ConnectionEnd::Refused(RefusalReason::IdleTimeout { idle: idle.timeout });
        }
        let violation = lock(&conn.violation).take();
        match violation {
            Some(v) => ConnectionEnd::ProtocolViolation(v),
            None => ConnectionEnd::Closed,
        }
    }

    /// Runs the negotiation, including the TLS handshake if the client starts TLS; returns
    /// the outcome and the TLS session the connection continues on.
    fn negotiate(&self, t: &Transport) -> Result<(Outcome, Option<TlsStream>), ConnectionEnd> {
        let closed = |e: io::Error| ConnectionEnd::HandshakeFailed(e.to_string());
        // A client told that TLS is required which then leaves was refused for that.
        let left_without_tls = |hs: &Handshake, otherwise: ConnectionEnd| {
            if hs.tls_refusals() > 0 && !hs.tls_active() {
                ConnectionEnd::Refused(RefusalReason::TlsRequired)
            } else {
                otherwise
            }
        };
        // The whole negotiation must finish in time, so a client trickling bytes cannot hold
        // a connection slot forever.
        let deadline = Instant::now() + self.config.handshake_timeout;
        let mut hs = Handshake::with_tls(self.config.tls_mode);
        let mut tls: Option<TlsStream> = None;
        // Negotiation is one thread; TLS still wants a writer lock to send under.
        let writer = Mutex::new(());
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let out = hs.take_output();
            if !out.is_empty() {
                let sent = match &tls {
                    Some(tls) => {
                        let _writer = lock(&writer);
                        tls.send(t, &[&out])
                    }
                    None => t.send_all(&[&out]),
                };
                if let Err(e) = sent {
                    // A client may abort and close without waiting for the acknowledgement.
                    if hs.outcome() != Some(&Outcome::Aborted) {
                        return Err(left_without_tls(&hs, closed(e)));
                    }
                }
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
            if hs.poll_start_tls() {
                let Some(config) = &self.config.tls else {
                    // build() refuses On/Require without a config, and Off never acks.
                    return Err(ConnectionEnd::HandshakeFailed(
                        "TLS is not configured".into(),
                    ));
                };
                match TlsStream::accept(t, config) {
                    Ok(stream) => {
                        tls = Some(stream);
                        hs.tls_established();
                        continue;
                    }
                    Err(why) => {
                        return Err(ConnectionEnd::Refused(RefusalReason::TlsHandshake(why)))
                    }
                }
            }
            let want = hs.bytes_wanted().clamp(1, buf.len());
            let read = match &tls {
                Some(tls) => tls.read(t, &mut buf[..want], &writer),
                None => t.read(&mut buf[..want]),
            };
            let n = read.map_err(|e| left_without_tls(&hs, closed(e)))?;
            if n == 0 {
                return Err(left_without_tls(
                    &hs,
                    ConnectionEnd::HandshakeFailed(
                        "client closed the connection during negotiation".into(),
                    ),
                ));
            }
            match hs.receive(&buf[..n], self) {
                Ok(_) => {}
                Err(HandshakeError::TlsRequired) => {
                    return Err(ConnectionEnd::Refused(RefusalReason::TlsRequired))
                }
                Err(e) => return Err(handshake_failed(e)),
            }
        }
        match hs.outcome() {
            Some(Outcome::Aborted) if hs.tls_refusals() > 0 && !hs.tls_active() => {
                Err(ConnectionEnd::Refused(RefusalReason::TlsRequired))
            }
            _ => match hs.into_outcome() {
                Some(outcome) => Ok((outcome, tls)),
                None => Err(ConnectionEnd::HandshakeFailed("no outcome".into())),
            },
        }
    }
}

/// Counters one `serve` call keeps for its report.
#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    refused: AtomicU64,
    handshake_failures: AtomicU64,
    tls_refusals: AtomicU64,
    idle_timeouts: AtomicU64,
    peak: AtomicU64,
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

/// The idle-timeout rule of a connection: when the last reply left, and whether the
/// timeout fired.
struct IdleWatch {
    timeout: Duration,
    epoch: Instant,
    /// Nanoseconds from `epoch` to when the last reply was sent.
    last_reply_ns: AtomicU64,
    expired: AtomicBool,
}

impl IdleWatch {
    fn new(timeout: Duration) -> IdleWatch {
        IdleWatch {
            timeout,
            epoch: Instant::now(),
            last_reply_ns: AtomicU64::new(0),
            expired: AtomicBool::new(false),
        }
    }

    fn replied(&self) {
        let ns = self.epoch.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        self.last_reply_ns.store(ns, Ordering::Relaxed);
    }

    fn last_reply(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.last_reply_ns.load(Ordering::Relaxed))
    }
}

/// Where the reader gets request bytes: the link, with the idle-timeout rule applied.
///
/// The socket's receive timeout is the idle timeout (or what is left of it). When a read
/// times out, the connection is idle only if no request is in flight and neither a byte
/// arrived nor a reply left for the whole timeout; otherwise the read is retried with the
/// rest of the time. A connection with no idle timeout has no receive timeout at all.
struct Source<'a> {
    link: &'a Link<'a>,
    writer: &'a Mutex<()>,
    idle: Option<&'a IdleWatch>,
    in_flight: &'a AtomicUsize,
}

impl Source<'_> {
    #[inline]
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(idle) = self.idle else {
            return self.link.read(buf, self.writer);
        };
        let started = Instant::now();
        loop {
            match self.link.read(buf, self.writer) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    let quiet = started.max(idle.last_reply()).elapsed();
                    if self.in_flight.load(Ordering::SeqCst) > 0 || quiet < idle.timeout {
                        let rest = if quiet < idle.timeout {
                            idle.timeout - quiet
                        } else {
                            idle.timeout
                        };
                        let _ = self
                            .link
                            .transport()
                            .set_read_timeout(Some(rest.max(Duration::from_millis(1))));
                        continue;
                    }
                    idle.expired.store(true, Ordering::SeqCst);
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "idle timeout"));
                }
                other => return other,
            }
        }
    }
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

    fn fill(&mut self, src: &Source<'_>) -> io::Result<()> {
        self.start = 0;
        self.end = 0;
        let limit = if std::mem::take(&mut self.header_fill) {
            REQUEST_HEADER_BYTES
        } else {
            self.buf.len()
        };
        let n = src.read(&mut self.buf[..limit])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.end = n;
        Ok(())
    }

    fn read_exact(&mut self, src: &Source<'_>, dst: &mut [u8]) -> io::Result<()> {
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
                let n = src.read(&mut dst[filled..])?;
                if n == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                filled += n;
                self.header_fill = true;
            } else {
                self.fill(src)?;
            }
        }
        Ok(())
    }

    /// The next request header if its bytes have arrived, without waiting and without
    /// consuming it: what is buffered, topped up by at most one read of the missing header
    /// bytes when the socket already has data (so no payload is pulled into the buffer).
    fn peek_header(
        &mut self,
        src: &Source<'_>,
        wait: Duration,
    ) -> Option<[u8; REQUEST_HEADER_BYTES]> {
        if self.end - self.start < REQUEST_HEADER_BYTES {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if !src.link.input_ready(wait) {
                return None;
            }
            match src.read(&mut self.buf[self.end..REQUEST_HEADER_BYTES]) {
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

    fn discard(&mut self, src: &Source<'_>, mut len_bytes: u64) -> io::Result<()> {
        while len_bytes > 0 {
            if self.start == self.end {
                self.fill(src)?;
            }
            let n = ((self.end - self.start) as u64).min(len_bytes);
            self.start += n as usize;
            len_bytes -= n;
        }
        Ok(())
    }
}

/// The payload buffers of one connection and the budget they are charged to
/// (`inflight_bytes_per_connection`; see the module documentation).
///
/// Every buffer's capacity is charged from allocation until it is freed, including buffers
/// kept between requests (at most one per worker, none larger than
/// [`RETAINED_BUFFER_BYTES`]), so the charge is the connection's payload memory. A request
/// that does not fit first frees kept buffers, then waits for replies to free theirs; one
/// larger than the whole budget waits until nothing else is charged, then runs alone.
struct Buffers<'a> {
    state: Mutex<BufferState>,
    freed: Condvar,
    limit_bytes: u64,
    max_kept: usize,
    /// The server-wide gauge, kept equal to the sum of every connection's charge.
    server_bytes: &'a AtomicU64,
}

struct BufferState {
    charged_bytes: u64,
    peak_bytes: u64,
    kept: Vec<Vec<u8>>,
    waiters: usize,
    /// The connection is ending after a panic: nobody waits any more.
    abandoned: bool,
}

impl<'a> Buffers<'a> {
    fn new(limit_bytes: u64, max_kept: usize, server_bytes: &'a AtomicU64) -> Buffers<'a> {
        Buffers {
            state: Mutex::new(BufferState {
                charged_bytes: 0,
                peak_bytes: 0,
                kept: Vec::new(),
                waiters: 0,
                abandoned: false,
            }),
            freed: Condvar::new(),
            limit_bytes,
            max_kept,
            server_bytes,
        }
    }

    fn charge(&self, state: &mut BufferState, bytes: u64) {
        state.charged_bytes += bytes;
        state.peak_bytes = state.peak_bytes.max(state.charged_bytes);
        self.server_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn uncharge(&self, state: &mut BufferState, bytes: u64) {
        let bytes = bytes.min(state.charged_bytes);
        state.charged_bytes -= bytes;
        self.server_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// A buffer of at least `len` bytes (its length set to at least `len`), and whether the
    /// request had to wait for the budget. `None` if the connection was abandoned.
    fn take(&self, len: usize) -> Option<(Vec<u8>, bool)> {
        let mut waited = false;
        let mut dropped: Vec<Vec<u8>> = Vec::new();
        let mut state = lock(&self.state);
        loop {
            if state.abandoned {
                return None;
            }
            // A kept buffer that is large enough is already charged: the smallest one.
            let fit = (0..state.kept.len())
                .filter(|&i| state.kept[i].capacity() >= len)
                .min_by_key(|&i| state.kept[i].capacity());
            if let Some(i) = fit {
                let mut buf = state.kept.swap_remove(i);
                drop(state);
                if buf.len() < len {
                    buf.resize(len, 0);
                }
                return Some((buf, waited));
            }
            let wanted = len as u64;
            if state.charged_bytes == 0 || state.charged_bytes + wanted <= self.limit_bytes {
                self.charge(&mut state, wanted);
                drop(state);
                drop(dropped);
                return Some((vec![0u8; len], waited));
            }
            // Kept buffers are freed before anyone waits for in-flight ones.
            if let Some(buf) = state.kept.pop() {
                self.uncharge(&mut state, buf.capacity() as u64);
                dropped.push(buf);
                continue;
            }
            waited = true;
            state.waiters += 1;
            state = self.freed.wait(state).unwrap_or_else(|e| e.into_inner());
            state.waiters -= 1;
        }
    }

    /// Grows `buf` to `len` bytes if the budget has room now (never waits).
    fn try_grow(&self, buf: &mut Vec<u8>, len: usize) -> bool {
        if buf.capacity() >= len {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            return true;
        }
        let before = buf.capacity();
        let extra = (len - before) as u64;
        {
            let mut state = lock(&self.state);
            if state.charged_bytes + extra > self.limit_bytes {
                return false;
            }
            self.charge(&mut state, extra);
        }
        buf.reserve_exact(len - buf.len());
        buf.resize(len, 0);
        // reserve_exact may round up; charge what was really allocated.
        let actual = (buf.capacity() - before) as u64;
        if actual != extra {
            let mut state = lock(&self.state);
            if actual > extra {
                self.charge(&mut state, actual - extra);
            } else {
                self.uncharge(&mut state, extra - actual);
            }
        }
        true
    }

    /// A request's reply has been sent: its buffer is kept for the next one, or freed.
    fn give_back(&self, buf: Vec<u8>) {
        if buf.capacity() == 0 {
            return;
        }
        let mut state = lock(&self.state);
        let dropped = if buf.capacity() > RETAINED_BUFFER_BYTES
            || state.kept.len() >= self.max_kept
            || state.abandoned
        {
            self.uncharge(&mut state, buf.capacity() as u64);
            Some(buf)
        } else {
            state.kept.push(buf);
            None
        };
        if state.waiters > 0 {
            self.freed.notify_all();
        }
        drop(state);
        drop(dropped);
    }

    /// After a panic: wakes and turns away every waiter.
    fn abandon(&self) {
        let mut state = lock(&self.state);
        state.abandoned = true;
        self.freed.notify_all();
    }

    fn peak_bytes(&self) -> u64 {
        lock(&self.state).peak_bytes
    }
}

impl Drop for Buffers<'_> {
    fn drop(&mut self) {
        // Kept buffers go now, and any charge a panicking worker could not give back.
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        self.server_bytes
            .fetch_sub(state.charged_bytes, Ordering::Relaxed);
        state.charged_bytes = 0;
        state.kept.clear();
    }
}

enum Job {
    Execute {
        /// For a gathered write: the first request, its length grown to cover the others.
        request: Request,
        /// The payload (READ: room for the data; WRITE: the data); empty without one.
        buf: Vec<u8>,
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
    server: &'a Server,
    id: u64,
    link: &'a Link<'a>,
    export: &'a dyn Export,
    session: Session,
    reader: Mutex<ReadBuffer>,
    writer: Mutex<()>,
    stop: AtomicBool,
    panicked: AtomicBool,
    violation: Mutex<Option<String>>,
    buffers: Buffers<'a>,
    /// The Throttled event was sent.
    throttled: AtomicBool,
    idle: Option<IdleWatch>,
    /// End offset of the last write read on this connection (to tell a write stream).
    last_write_end: AtomicU64,
    /// Requests read whose reply has not been sent yet.
    in_flight: AtomicUsize,
}

impl Connection<'_> {
    fn source(&self) -> Source<'_> {
        Source {
            link: self.link,
            writer: &self.writer,
            idle: self.idle.as_ref(),
            in_flight: &self.in_flight,
        }
    }

    /// Runs a worker; if the export (or anything else) panics, ends this connection only:
    /// the socket is shut so the other workers wake up and leave.
    fn work_contained(&self) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.work()));
        if result.is_err() {
            self.panicked.store(true, Ordering::SeqCst);
            self.stop_with(None);
            // The panicking request may have held buffers; let no worker wait for them.
            self.buffers.abandon();
            self.link.transport().shutdown(Shutdown::Both);
        }
    }

    fn work(&self) {
        let mut reply: Vec<u8> = Vec::new();
        while let Some(job) = self.next_job() {
            let sent = match job {
                Job::Execute {
                    request,
                    mut buf,
                    gathered,
                } => {
                    let sent = self.execute(&request, &gathered, &mut buf, &mut reply);
                    self.buffers.give_back(buf);
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
            if sent.is_err() {
                self.stop_with(None);
                // Wake the worker blocked reading so the connection ends.
                self.link.transport().shutdown(Shutdown::Both);
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

    /// A read on the connection failed: the client left, the idle timeout fired (the
    /// source recorded that), or TLS failed (a protocol violation of its own kind).
    fn read_failed(&self, e: &io::Error) {
        let tls_failure =
            matches!(self.link, Link::Tls { .. }) && e.kind() == io::ErrorKind::InvalidData;
        self.stop_with(tls_failure.then(|| e.to_string()));
    }

    /// A payload buffer of `len` bytes, charged to the budget (waiting for room).
    fn payload_buffer(&self, len: usize) -> Option<Vec<u8>> {
        let (buf, waited) = self.buffers.take(len)?;
        if waited && !self.throttled.swap(true, Ordering::Relaxed) {
            self.server.notify(ServerEvent::Throttled {
                connection: self.id,
                inflight_bytes_limit: self.buffers.limit_bytes,
            });
        }
        Some(buf)
    }

    /// Reads the next request under the read lock. `None` ends this worker.
    fn next_job(&self) -> Option<Job> {
        let mut reader = lock(&self.reader);
        if self.stop.load(Ordering::SeqCst) {
            return None;
        }
        let src = self.source();
        let mut raw = [0u8; REQUEST_HEADER_BYTES];
        if let Err(e) = reader.read_exact(&src, &mut raw) {
            self.read_failed(&e);
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
                let mut buf = if payload && len > 0 {
                    match self.payload_buffer(len) {
                        Some(buf) => buf,
                        None => {
                            self.stop_with(None);
                            return None;
                        }
                    }
                } else {
                    Vec::new()
                };
                let mut request = request;
                let mut gathered = Vec::new();
                if let Command::Write { .. } = request.command {
                    if let Err(e) = reader.read_exact(&src, &mut buf[..len]) {
                        self.buffers.give_back(buf);
                        self.read_failed(&e);
                        return None;
                    }
                    if len <= RETAINED_BUFFER_BYTES {
                        if let Err(e) = self.gather_writes(
                            &src,
                            &mut reader,
                            &mut request,
                            &mut gathered,
                            &mut buf,
                        ) {
                            self.buffers.give_back(buf);
                            self.read_failed(&e);
                            return None;
                        }
                    }
                }
                self.in_flight
                    .fetch_add(1 + gathered.len(), Ordering::SeqCst);
                Some(Job::Execute {
                    request,
                    buf,
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
                if let Err(e) = reader.discard(&src, u64::from(discard_bytes)) {
                    self.read_failed(&e);
                    return None;
                }
                self.in_flight.fetch_add(1, Ordering::SeqCst);
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
    /// stays within [`RETAINED_BUFFER_BYTES`] and the connection's budget. Only requests
    /// whose header has already arrived are taken; the first one that does not qualify stays
    /// in the read buffer for the next worker. An error is a broken connection.
    fn gather_writes(
        &self,
        src: &Source<'_>,
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
            let Some(raw) = reader.peek_header(src, wait) else {
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
            if !self.buffers.try_grow(buf, have + more) {
                break Ok(());
            }
            reader.consume(REQUEST_HEADER_BYTES);
            if let Err(e) = reader.read_exact(src, &mut buf[have..have + more]) {
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
        self.link.send(parts)
    }

    /// Sends the replies to `requests` requests; they stop counting as in flight first, so a
    /// client that waits for each reply is never taken for one that streams.
    fn send_replies(&self, requests: usize, parts: &[&[u8]]) -> io::Result<()> {
        self.in_flight.fetch_sub(requests, Ordering::SeqCst);
        let sent = self.send(parts);
        if let Some(idle) = &self.idle {
            idle.replied();
        }
        sent
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
        let link = Link::Plain(&t);
        let writer_lock = Mutex::new(());
        let in_flight = AtomicUsize::new(0);
        let src = Source {
            link: &link,
            writer: &writer_lock,
            idle: None,
            in_flight: &in_flight,
        };
        let mut rb = ReadBuffer::new();
        let mut h = [0u8; REQUEST_HEADER_BYTES];
        let mut p = vec![0u8; 256 << 10];
        for round in 0..3 {
            rb.read_exact(&src, &mut h).unwrap();
            assert_eq!(h, [0xab; REQUEST_HEADER_BYTES]);
            if round > 0 {
                assert_eq!(
                    rb.end - rb.start,
                    0,
                    "round {round}: payload bytes were read into the shared buffer"
                );
            }
            rb.read_exact(&src, &mut p).unwrap();
            assert!(p.iter().enumerate().all(|(i, &b)| b == (i % 253) as u8));
        }
        let _client = writer.join().unwrap();
        for _ in 0..4 {
            rb.read_exact(&src, &mut h).unwrap();
            assert_eq!(h, [0xab; REQUEST_HEADER_BYTES]);
        }
    }

    /// The payload budget charges every buffer, kept ones included; a request that does not
    /// fit frees kept buffers before it waits, waits for in-flight ones otherwise, and one
    /// larger than the whole budget runs alone; abandoning wakes every waiter.
    #[test]
    fn buffers_charge_every_byte_and_never_wait_for_kept_ones() {
        let gauge = AtomicU64::new(0);
        let charged = || gauge.load(Ordering::Relaxed);
        let b = Buffers::new(4 << 20, 8, &gauge);
        let (x, waited) = b.take(1 << 20).unwrap();
        assert!(!waited);
        let (y, _) = b.take(1 << 20).unwrap();
        assert_eq!(charged(), 2 << 20);
        b.give_back(x);
        assert_eq!(charged(), 2 << 20, "a kept buffer stays charged");
        // A kept buffer that is large enough is reused, at no new charge.
        let (x, _) = b.take(512 << 10).unwrap();
        assert_eq!(x.capacity(), 1 << 20);
        assert_eq!(charged(), 2 << 20);
        b.give_back(x);
        // 3 MiB does not fit beside y and the kept 1 MiB: the kept one goes, nobody waits.
        let (z, waited) = b.take(3 << 20).unwrap();
        assert!(!waited);
        assert_eq!(charged(), 4 << 20);
        // Larger than the budget: waits for y and z, then runs alone.
        std::thread::scope(|scope| {
            let big = scope.spawn(|| b.take(8 << 20));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!big.is_finished());
            b.give_back(y);
            std::thread::sleep(Duration::from_millis(50));
            assert!(!big.is_finished(), "y came back but z is still in flight");
            b.give_back(z);
            let (big, waited) = big.join().unwrap().unwrap();
            assert!(waited);
            assert_eq!(charged(), 8 << 20, "kept y and z were freed for it");
            b.give_back(big);
        });
        assert_eq!(
            charged(),
            0,
            "a buffer over RETAINED_BUFFER_BYTES is not kept"
        );
        assert_eq!(b.peak_bytes(), 8 << 20);
        // Growing a buffer for write gathering never waits.
        let (mut g, _) = b.take(3 << 20).unwrap();
        assert!(!b.try_grow(&mut g, 5 << 20));
        assert!(b.try_grow(&mut g, 4 << 20));
        assert_eq!(charged(), 4 << 20);
        // After a panic, a waiter is turned away instead of waiting forever.
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| b.take(1 << 20));
            std::thread::sleep(Duration::from_millis(50));
            b.abandon();
            assert!(waiter.join().unwrap().is_none());
        });
        drop(g);
        drop(b);
        assert_eq!(
            charged(),
            0,
            "the server-wide gauge forgets a dropped connection"
        );
    }
}
