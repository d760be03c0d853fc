//! A small NBD client: fixed-newstyle negotiation with `NBD_OPT_GO` (simple replies only, no
//! TLS), then requests and replies on one connection, split into a sending and a receiving
//! half so that many requests can be outstanding at once (a benchmark's queue depth).
//!
//! URIs as the NBD URI specification writes them (and nbdinfo, nbdcopy and fio take them):
//! `nbd://host[:port][/export]` and `nbd+unix:///[export]?socket=PATH`.

use crate::proto::*;
use crate::transmission::RequestHeader;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;

/// Where an export is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NbdUri {
    Tcp {
        host: String,
        port: u16,
        export: String,
    },
    Unix {
        socket: String,
        export: String,
    },
}

impl NbdUri {
    pub fn parse(s: &str) -> Result<NbdUri, ClientError> {
        let bad = |why: &str| ClientError::Uri(format!("{s:?}: {why}"));
        if let Some(rest) = s.strip_prefix("nbd+unix://") {
            let (path, query) = rest.split_once('?').ok_or_else(|| bad("no ?socket=PATH"))?;
            let export = path.trim_start_matches('/').to_string();
            let socket = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("socket="))
                .ok_or_else(|| bad("no socket= in the query"))?;
            Ok(NbdUri::Unix {
                socket: socket.to_string(),
                export,
            })
        } else if let Some(rest) = s.strip_prefix("nbd://") {
            let (authority, export) = match rest.split_once('/') {
                Some((a, e)) => (a, e.to_string()),
                None => (rest, String::new()),
            };
            let (host, port) = match authority.rsplit_once(':') {
                Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (
                    h.trim_start_matches('[').trim_end_matches(']'),
                    p.parse().map_err(|_| bad("the port is not a number"))?,
                ),
                _ => (authority, 10809),
            };
            if host.is_empty() {
                return Err(bad("no host"));
            }
            Ok(NbdUri::Tcp {
                host: host.to_string(),
                port,
                export,
            })
        } else {
            Err(bad("not an nbd:// or nbd+unix:// URI"))
        }
    }

    pub fn export(&self) -> &str {
        match self {
            NbdUri::Tcp { export, .. } | NbdUri::Unix { export, .. } => export,
        }
    }
}

impl fmt::Display for NbdUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NbdUri::Tcp { host, port, export } => write!(f, "nbd://{host}:{port}/{export}"),
            NbdUri::Unix { socket, export } => write!(f, "nbd+unix:///{export}?socket={socket}"),
        }
    }
}

#[derive(Debug)]
pub enum ClientError {
    Uri(String),
    Io(io::Error),
    /// The server said something the protocol does not allow, or refused the export.
    Protocol(String),
    /// A request failed with this NBD error code.
    Request {
        command: u16,
        error: u32,
    },
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Uri(s) => write!(f, "bad NBD URI {s}"),
            ClientError::Io(e) => write!(f, "NBD connection: {e}"),
            ClientError::Protocol(s) => write!(f, "NBD server: {s}"),
            ClientError::Request { command, error } => {
                write!(f, "NBD command {command} failed with error {error}")
            }
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }
    fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn read_u16(s: &mut impl Read) -> io::Result<u16> {
    let mut b = [0u8; 2];
    s.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}
fn read_u32(s: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}
fn read_u64(s: &mut impl Read) -> io::Result<u64> {
    let mut b = [0u8; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

/// The export a connection reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportInfo {
    pub size_bytes: u64,
    /// Transmission flags (`NBD_FLAG_*`).
    pub flags: u16,
    /// Block sizes the server asked for (`NBD_INFO_BLOCK_SIZE`; the spec's defaults when it
    /// sent none): requests must be multiples of the minimum and at most the maximum payload.
    pub min_block: u32,
    pub preferred_block: u32,
    pub max_payload: u32,
}

impl ExportInfo {
    pub fn read_only(&self) -> bool {
        self.flags & NBD_FLAG_READ_ONLY != 0
    }
    pub fn can_flush(&self) -> bool {
        self.flags & NBD_FLAG_SEND_FLUSH != 0
    }
}

/// Connects and negotiates the export the URI names.
pub fn connect(uri: &NbdUri) -> Result<(ExportInfo, Sender, Receiver), ClientError> {
    connect_timeout(uri, None)
}

/// As [`connect`], with every wait (the connection, each read and write of the socket) cut
/// off after `timeout`: a vanished server is then an error, not a hang.
pub fn connect_timeout(
    uri: &NbdUri,
    timeout: Option<std::time::Duration>,
) -> Result<(ExportInfo, Sender, Receiver), ClientError> {
    let mut s = match uri {
        NbdUri::Tcp { host, port, .. } => {
            let t = match timeout {
                None => TcpStream::connect((host.as_str(), *port))?,
                Some(d) => {
                    use std::net::ToSocketAddrs;
                    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
                    let mut found = None;
                    for a in (host.as_str(), *port).to_socket_addrs()? {
                        match TcpStream::connect_timeout(&a, d) {
                            Ok(t) => {
                                found = Some(t);
                                break;
                            }
                            Err(e) => last = e,
                        }
                    }
                    found.ok_or(last)?
                }
            };
            t.set_nodelay(true)?;
            t.set_read_timeout(timeout)?;
            t.set_write_timeout(timeout)?;
            Stream::Tcp(t)
        }
        NbdUri::Unix { socket, .. } => {
            let u = UnixStream::connect(socket)?;
            u.set_read_timeout(timeout)?;
            u.set_write_timeout(timeout)?;
            Stream::Unix(u)
        }
    };
    let info = negotiate(&mut s, uri.export())?;
    let r = s.try_clone()?;
    Ok((info, Sender { s }, Receiver { s: r }))
}

fn negotiate(s: &mut Stream, export: &str) -> Result<ExportInfo, ClientError> {
    let proto = |m: String| ClientError::Protocol(m);
    if read_u64(s)? != NBDMAGIC {
        return Err(proto("no NBDMAGIC greeting".into()));
    }
    if read_u64(s)? != IHAVEOPT {
        return Err(proto(
            "not a newstyle server (oldstyle negotiation is not supported)".into(),
        ));
    }
    let hflags = read_u16(s)?;
    if hflags & NBD_FLAG_FIXED_NEWSTYLE == 0 {
        return Err(proto("the server does not speak fixed newstyle".into()));
    }
    let mut cflags = NBD_FLAG_C_FIXED_NEWSTYLE;
    if hflags & NBD_FLAG_NO_ZEROES != 0 {
        cflags |= NBD_FLAG_C_NO_ZEROES;
    }
    let mut out = cflags.to_be_bytes().to_vec();
    // NBD_OPT_GO: export name length, name, and one information request: the block sizes
    // (which tells the server this client honours them).
    let name = export.as_bytes();
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&NBD_OPT_GO.to_be_bytes());
    out.extend_from_slice(&((4 + name.len() + 2 + 2) as u32).to_be_bytes());
    out.extend_from_slice(&(name.len() as u32).to_be_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
    s.write_all(&out)?;
    let mut info: Option<ExportInfo> = None;
    let mut sizes = (1, 4096, 32 << 20);
    loop {
        if read_u64(s)? != OPTION_REPLY_MAGIC {
            return Err(proto("bad option reply magic".into()));
        }
        let opt = read_u32(s)?;
        let kind = read_u32(s)?;
        let len = read_u32(s)? as usize;
        if opt != NBD_OPT_GO {
            return Err(proto(format!("reply to option {opt}, not to NBD_OPT_GO")));
        }
        if len > 1 << 20 {
            return Err(proto(format!("option reply of {len} bytes")));
        }
        let mut body = vec![0u8; len];
        s.read_exact(&mut body)?;
        match kind {
            NBD_REP_ACK => break,
            NBD_REP_INFO if len >= 2 => {
                let what = u16::from_be_bytes([body[0], body[1]]);
                let be32 =
                    |i: usize| u32::from_be_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
                if what == NBD_INFO_EXPORT && len >= 12 {
                    let mut size = [0u8; 8];
                    size.copy_from_slice(&body[2..10]);
                    info = Some(ExportInfo {
                        size_bytes: u64::from_be_bytes(size),
                        flags: u16::from_be_bytes([body[10], body[11]]),
                        ..info.unwrap_or_default()
                    });
                } else if what == NBD_INFO_BLOCK_SIZE && len >= 14 {
                    sizes = (be32(2), be32(6), be32(10));
                }
            }
            k if k & (1 << 31) != 0 => {
                return Err(proto(format!(
                    "export {export:?} refused (reply {k:#x}): {}",
                    crate::escape_for_log(&String::from_utf8_lossy(&body))
                )))
            }
            _ => {}
        }
    }
    let mut info =
        info.ok_or_else(|| proto("NBD_OPT_GO succeeded without NBD_INFO_EXPORT".into()))?;
    (info.min_block, info.preferred_block, info.max_payload) = sizes;
    Ok(info)
}

fn header(command: u16, cookie: u64, offset: u64, len_bytes: u32) -> [u8; REQUEST_HEADER_BYTES] {
    RequestHeader {
        flags: 0,
        command,
        cookie,
        offset,
        len_bytes,
    }
    .encode()
}

/// The sending half: requests go out in order, each with the caller's cookie.
pub struct Sender {
    s: Stream,
}

impl Sender {
    /// Sends one request, blocking until it is written; a WRITE's payload follows its header.
    /// With requests outstanding, use [`Sender::send_with`].
    pub fn send(
        &mut self,
        command: u16,
        cookie: u64,
        offset: u64,
        len_bytes: u32,
        payload: Option<&[u8]>,
    ) -> Result<(), ClientError> {
        self.s
            .write_all(&header(command, cookie, offset, len_bytes))?;
        if let Some(p) = payload {
            self.s.write_all(p)?;
        }
        Ok(())
    }

    /// As [`Sender::send`], but never blocks while replies wait to be read: whenever the
    /// socket cannot take more and the server has a reply ready, `on_reply_ready` is called
    /// (it should read one with the [`Receiver`]). A client that keeps many requests
    /// outstanding on one thread needs this: a server blocked writing replies nobody reads
    /// may stop reading requests.
    pub fn send_with(
        &mut self,
        command: u16,
        cookie: u64,
        offset: u64,
        len_bytes: u32,
        payload: Option<&[u8]>,
        on_reply_ready: &mut dyn FnMut() -> Result<(), ClientError>,
    ) -> Result<(), ClientError> {
        let h = header(command, cookie, offset, len_bytes);
        let fd = self.s.fd();
        for part in [&h[..], payload.unwrap_or(&[])] {
            let mut done = 0;
            while done < part.len() {
                // SAFETY: send on our own socket from a live buffer.
                let n = unsafe {
                    libc::send(
                        fd,
                        part[done..].as_ptr().cast(),
                        part.len() - done,
                        libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    )
                };
                if n >= 0 {
                    done += n as usize;
                    continue;
                }
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => {
                        let mut p = libc::pollfd {
                            fd,
                            events: libc::POLLIN | libc::POLLOUT,
                            revents: 0,
                        };
                        // SAFETY: poll on one valid pollfd.
                        if unsafe { libc::poll(&mut p, 1, -1) } < 0 {
                            let e = io::Error::last_os_error();
                            if e.kind() != io::ErrorKind::Interrupted {
                                return Err(e.into());
                            }
                        }
                        if p.revents & libc::POLLIN != 0 {
                            on_reply_ready()?;
                        }
                    }
                    _ => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Says goodbye (`NBD_CMD_DISC`) and closes both halves.
    pub fn disconnect(mut self) {
        let _ = self.send(NBD_CMD_DISC, 0, 0, 0, None);
        self.s.shutdown();
    }
}

/// The receiving half: replies come back in whatever order the server finishes them.
pub struct Receiver {
    s: Stream,
}

impl Receiver {
    /// Reads the next reply's header: its cookie and error (0 is success). A successful
    /// READ's data follows: take it with [`Receiver::payload`] before the next header.
    pub fn reply(&mut self) -> Result<(u64, u32), ClientError> {
        let mut b = [0u8; SIMPLE_REPLY_BYTES];
        self.s.read_exact(&mut b)?;
        let magic = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        if magic != NBD_SIMPLE_REPLY_MAGIC {
            return Err(ClientError::Protocol(format!(
                "reply magic {magic:#010x} is not a simple reply"
            )));
        }
        let error = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        let mut c = [0u8; 8];
        c.copy_from_slice(&b[8..16]);
        Ok((u64::from_be_bytes(c), error))
    }

    /// True when a reply (or the end of the connection) can be read without waiting.
    pub fn ready(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.s.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one valid pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents != 0 }
    }

    /// Reads a READ reply's data.
    pub fn payload(&mut self, buf: &mut [u8]) -> Result<(), ClientError> {
        self.s.read_exact(buf)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_as_the_nbd_uri_spec_writes_them() {
        assert_eq!(
            NbdUri::parse("nbd://localhost").unwrap(),
            NbdUri::Tcp {
                host: "localhost".into(),
                port: 10809,
                export: String::new()
            }
        );
        assert_eq!(
            NbdUri::parse("nbd://127.0.0.1:10810/disk").unwrap(),
            NbdUri::Tcp {
                host: "127.0.0.1".into(),
                port: 10810,
                export: "disk".into()
            }
        );
        assert_eq!(
            NbdUri::parse("nbd+unix:///a?socket=/tmp/s.sock").unwrap(),
            NbdUri::Unix {
                socket: "/tmp/s.sock".into(),
                export: "a".into()
            }
        );
        assert!(NbdUri::parse("nbd+unix:///a").is_err());
        assert!(NbdUri::parse("http://x").is_err());
        assert!(NbdUri::parse("nbd://:10809").is_err());
        assert!(NbdUri::parse("nbd://h:port").is_err());
    }
}
