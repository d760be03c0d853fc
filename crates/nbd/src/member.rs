//! An NBD export as an array member (`nbd://host[:port]/export`, `nbd+unix:///export?socket=`):
//! served by nbdkit, qemu-nbd or another `raidkit serve`, so an array can span machines over a
//! standard protocol.
//!
//! One connection, one request at a time (the engine gives each member one worker). When the
//! connection breaks or a wait passes the timeout, the request is retried on a new connection
//! for as long as the timeout allows (a server restarted in that time is picked up again, the
//! same size or refused); past it, the request fails with an I/O error and the engine fails
//! the member, as it would a disk that stopped answering, instead of hanging the array.
//! Once one request waited the whole timeout, later ones try the server once and fail at once
//! (until one gets through). Reads, writes and flushes are idempotent, so a retry after an unanswered request is safe;
//! a write is durable only after a flush answered, as on any disk.

use crate::client::{connect_timeout, ClientError, ExportInfo, NbdUri, Receiver, Sender};
use crate::proto::*;
use raidkit_disk::{Disk, DiskError, DiskErrorKind};
use std::io;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a member may not answer before it counts as failed, unless
/// `RAIDKIT_NBD_TIMEOUT` (seconds) says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// True when `s` spells an NBD member.
pub fn is_nbd(s: &str) -> bool {
    s.starts_with("nbd://") || s.starts_with("nbd+unix://")
}

/// The member timeout: `RAIDKIT_NBD_TIMEOUT` seconds, else [`DEFAULT_TIMEOUT`].
pub fn timeout_from_env() -> Duration {
    std::env::var("RAIDKIT_NBD_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0 && s.is_finite())
        .map(Duration::from_secs_f64)
        .unwrap_or(DEFAULT_TIMEOUT)
}

struct Conn {
    tx: Sender,
    rx: Receiver,
}

/// An NBD export used as a disk.
pub struct NbdDisk {
    uri: NbdUri,
    name: String,
    info: ExportInfo,
    timeout: Duration,
    read_only: bool,
    conn: Mutex<Option<Conn>>,
    cookie: std::sync::atomic::AtomicU64,
    /// A request already waited the whole timeout in vain: later ones try the server once
    /// and fail at once, so the requests queued behind do not each wait the timeout again.
    gone: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for NbdDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdDisk").field("name", &self.name).finish()
    }
}

fn io_error(e: ClientError) -> io::Error {
    match e {
        ClientError::Io(e) => e,
        other => io::Error::other(other.to_string()),
    }
}

impl NbdDisk {
    /// Connects to the export `uri` names; `read_only` never sends a write.
    pub fn open(uri: &str, read_only: bool, timeout: Duration) -> Result<NbdDisk, DiskError> {
        let parsed = NbdUri::parse(uri)
            .map_err(|e| DiskError::new(uri, "open", 0, DiskErrorKind::BadSpec(e.to_string())))?;
        let (info, tx, rx) = connect_timeout(&parsed, Some(timeout))
            .map_err(|e| DiskError::io(uri, "open", 0, io_error(e)))?;
        if !read_only && info.read_only() {
            return Err(DiskError::new(uri, "open", 0, DiskErrorKind::ReadOnly));
        }
        Ok(NbdDisk {
            uri: parsed,
            name: uri.to_string(),
            info,
            timeout,
            read_only,
            conn: Mutex::new(Some(Conn { tx, rx })),
            cookie: std::sync::atomic::AtomicU64::new(1),
            gone: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Option<Conn>> {
        match self.conn.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// One request on the connection: sent, its reply read (and a read's data into `data`).
    fn once(
        conn: &mut Conn,
        cookie: u64,
        command: u16,
        offset: u64,
        len: u32,
        data: Data<'_>,
    ) -> Result<(), ClientError> {
        let payload = match &data {
            Data::Out(b) => Some(*b),
            _ => None,
        };
        conn.tx.send(command, cookie, offset, len, payload)?;
        let (got, error) = conn.rx.reply()?;
        if got != cookie {
            return Err(ClientError::Protocol(format!(
                "a reply to request {got} while {cookie} was the only one outstanding"
            )));
        }
        if error != 0 {
            return Err(ClientError::Request { command, error });
        }
        if let Data::In(buf) = data {
            conn.rx.payload(buf)?;
        }
        Ok(())
    }

    /// Runs one request, reconnecting and retrying while the timeout allows. An error the
    /// server answered with (EIO on its disk, say) is not retried: it is the member's answer.
    fn request(
        &self,
        op: &'static str,
        command: u16,
        offset: u64,
        len: u32,
        mut data: Data<'_>,
    ) -> Result<(), DiskError> {
        use std::sync::atomic::Ordering::Relaxed;
        let gone = self.gone.load(Relaxed);
        let deadline = Instant::now() + if gone { Duration::ZERO } else { self.timeout };
        let mut g = self.lock();
        let mut last: Option<ClientError> = None;
        loop {
            if g.is_none() {
                match connect_timeout(&self.uri, Some(self.timeout)) {
                    Ok((info, tx, rx)) if info.size_bytes == self.info.size_bytes => {
                        *g = Some(Conn { tx, rx });
                    }
                    Ok((info, ..)) => {
                        return Err(DiskError::io(
                            &self.name,
                            op,
                            offset,
                            io::Error::other(format!(
                                "the export came back with {} bytes, not {}: not the same member",
                                info.size_bytes, self.info.size_bytes
                            )),
                        ))
                    }
                    Err(e) => last = Some(e),
                }
            }
            if let Some(conn) = g.as_mut() {
                let cookie = self
                    .cookie
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match Self::once(conn, cookie, command, offset, len, data.reborrow()) {
                    Ok(()) => {
                        self.gone.store(false, Relaxed);
                        return Ok(());
                    }
                    // The server is going away: as a broken connection, retried on a new one.
                    Err(ClientError::Request { error, .. })
                        if error == NbdError::Shutdown.wire_value() =>
                    {
                        *g = None;
                        last = Some(ClientError::Protocol("the server shut down".into()));
                    }
                    Err(ClientError::Request { error, .. }) => {
                        return Err(DiskError::io(
                            &self.name,
                            op,
                            offset,
                            io::Error::from_raw_os_error(nbd_errno(error)),
                        ))
                    }
                    Err(e) => {
                        // The connection is in an unknown state: a new one for the retry.
                        *g = None;
                        last = Some(e);
                    }
                }
            }
            if Instant::now() >= deadline {
                self.gone.store(true, Relaxed);
                let why = last.map_or_else(|| "no answer".to_string(), |e| e.to_string());
                return Err(DiskError::io(
                    &self.name,
                    op,
                    offset,
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{why}; no answer for {:?}", self.timeout),
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn check(&self, op: &'static str, offset: u64, len: u64) -> Result<(), DiskError> {
        raidkit_disk::check_range(&self.name, op, offset, len, self.info.size_bytes)
    }

    fn writable(&self, op: &'static str, offset: u64) -> Result<(), DiskError> {
        if self.read_only {
            return Err(DiskError::new(
                &self.name,
                op,
                offset,
                DiskErrorKind::ReadOnly,
            ));
        }
        Ok(())
    }

    /// `[offset, offset + len)` cut into requests the export takes: (offset, range of the
    /// caller's buffer).
    fn steps(&self, offset: u64, len: usize) -> Vec<(u64, std::ops::Range<usize>)> {
        let step = self.max_request();
        (0..len)
            .step_by(step)
            .map(|at| (offset + at as u64, at..(at + step).min(len)))
            .collect()
    }

    /// The largest request this export takes at once.
    fn max_request(&self) -> usize {
        (self.info.max_payload.clamp(4096, 32 << 20) as usize) / 4096 * 4096
    }
}

/// A request's data: sent with it, read into, or none.
enum Data<'a> {
    Out(&'a [u8]),
    In(&'a mut [u8]),
    None,
}

impl Data<'_> {
    fn reborrow(&mut self) -> Data<'_> {
        match self {
            Data::Out(b) => Data::Out(b),
            Data::In(b) => Data::In(b),
            Data::None => Data::None,
        }
    }
}

/// The errno an NBD error code stands for (the values [`NbdError`] sends).
fn nbd_errno(error: u32) -> i32 {
    let is = |e: NbdError| error == e.wire_value();
    if is(NbdError::Perm) {
        libc::EPERM
    } else if is(NbdError::Inval) {
        libc::EINVAL
    } else if is(NbdError::NoMem) {
        libc::ENOMEM
    } else if is(NbdError::NoSpc) {
        libc::ENOSPC
    } else {
        libc::EIO
    }
}

impl Disk for NbdDisk {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.check("read", offset_bytes, buf.len() as u64)?;
        for (at, r) in self.steps(offset_bytes, buf.len()) {
            self.request(
                "read",
                NBD_CMD_READ,
                at,
                r.len() as u32,
                Data::In(&mut buf[r]),
            )?;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.writable("write", offset_bytes)?;
        self.check("write", offset_bytes, buf.len() as u64)?;
        for (at, r) in self.steps(offset_bytes, buf.len()) {
            self.request(
                "write",
                NBD_CMD_WRITE,
                at,
                r.len() as u32,
                Data::Out(&buf[r]),
            )?;
        }
        Ok(())
    }

    /// One NBD read (or as few as the export's largest request allows) for all the pieces,
    /// not a round trip each.
    fn read_vectored_at(
        &self,
        bufs: &mut [std::io::IoSliceMut<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        raidkit_disk::read_gathered(bufs, offset_bytes, |b, at| self.read_at(b, at))
    }

    /// One NBD write for all the pieces (see `read_vectored_at`).
    fn write_vectored_at(
        &self,
        bufs: &mut [std::io::IoSlice<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        raidkit_disk::write_gathered(bufs, offset_bytes, |b, at| self.write_at(b, at))
    }

    fn flush(&self) -> Result<(), DiskError> {
        if self.read_only || !self.info.can_flush() {
            return Ok(());
        }
        self.request("flush", NBD_CMD_FLUSH, 0, 0, Data::None)
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        // The engine relies on a discarded range reading as zeroes: zeroes, trimmed where
        // the server can.
        self.write_zeroes(offset_bytes, len_bytes)
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.writable("write-zeroes", offset_bytes)?;
        self.check("write-zeroes", offset_bytes, len_bytes)?;
        let step = self.max_request() as u64;
        let zeroes_cmd = self.info.flags & NBD_FLAG_SEND_WRITE_ZEROES != 0;
        let zeros = if zeroes_cmd {
            Vec::new()
        } else {
            vec![0u8; step as usize]
        };
        let mut done = 0;
        while done < len_bytes {
            let n = (len_bytes - done).min(step);
            let at = offset_bytes + done;
            if zeroes_cmd {
                self.request(
                    "write-zeroes",
                    NBD_CMD_WRITE_ZEROES,
                    at,
                    n as u32,
                    Data::None,
                )?;
            } else {
                self.request(
                    "write-zeroes",
                    NBD_CMD_WRITE,
                    at,
                    n as u32,
                    Data::Out(&zeros[..n as usize]),
                )?;
            }
            done += n;
        }
        Ok(())
    }

    fn size_bytes(&self) -> u64 {
        self.info.size_bytes
    }

    fn logical_block_size(&self) -> u32 {
        self.info.min_block.clamp(512, 4096)
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn is_rotational(&self) -> bool {
        self.info.flags & NBD_FLAG_ROTATIONAL != 0
    }
}

impl Drop for NbdDisk {
    fn drop(&mut self) {
        if let Some(c) = self.lock().take() {
            c.tx.disconnect();
        }
    }
}
