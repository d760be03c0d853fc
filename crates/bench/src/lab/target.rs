//! What a run measures: a raidkit array in this process, a file or block device, or an NBD
//! export (raidkit's own server, another server). Each keeps real requests outstanding:
//! - a file or block device through io_uring (one thread, `queue_depth` requests in the
//!   kernel at once), with `O_DIRECT` where the kernel accepts it;
//! - an NBD export on one connection, requests pipelined (a sender and a receiver);
//! - an array in this process: the array takes requests from any number of threads and has no
//!   asynchronous submission, so each outstanding request is one thread inside
//!   `Array::read_at`/`write_at` (as each NBD request is in `raidkit serve`); at queue depth 1
//!   the request runs on the caller's thread.
//!
//! Per-member load comes from the array's own counters, or from `/sys/block/*/stat` for a
//! block device.

use super::workload::Request;
use super::LabError;
use raidkit_disk::AlignedBuf;
use raidkit_engine::{Array, MemberIo, MemberIoReading};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;

/// Reads every member's counters (for per-member load sampled over a run).
pub type MemberSource = Arc<dyn Fn() -> Vec<MemberIoReading> + Send + Sync>;

/// A device under test.
pub trait Target {
    fn describe(&self) -> String;
    fn size_bytes(&self) -> u64;
    /// Gets `slots` request buffers of `max_len` bytes ready; a write sends a fixed pattern.
    fn prepare(&mut self, slots: usize, max_len: usize) -> Result<(), LabError>;
    /// Starts a request in `slot` (free: its last request completed).
    fn submit(&mut self, slot: usize, req: Request) -> Result<(), LabError>;
    /// Waits for a request to complete and returns its slot.
    fn wait(&mut self) -> Result<usize, LabError>;
    /// A request that has completed already, if any (never blocks).
    fn poll(&mut self) -> Result<Option<usize>, LabError> {
        Ok(None)
    }
    /// Makes completed writes durable; called with nothing outstanding.
    fn flush(&mut self) -> Result<(), LabError>;
    /// Drops what a cache between here and the media holds of the target, where that is
    /// possible (page cache of a buffered file); true when done.
    fn drop_caches(&mut self) -> Result<bool, LabError> {
        Ok(false)
    }
    /// Per-member counters, when the target has members (or is a block device).
    fn members(&self) -> Option<MemberSource> {
        None
    }
}

fn pattern(len: usize) -> AlignedBuf {
    let mut b = AlignedBuf::new(len.max(4096), 4096).expect("buffer allocation");
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for c in b.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
    }
    b
}

// ---------------------------------------------------------------------------------------

/// A file or block device, through io_uring.
pub struct FileTarget {
    path: PathBuf,
    file: std::fs::File,
    size: u64,
    direct: bool,
    ring: io_uring::IoUring,
    bufs: Vec<AlignedBuf>,
    write_buf: AlignedBuf,
    lens: Vec<u32>,
    block: Option<String>,
    /// Requests queued in the ring that the kernel has not been told of.
    unsubmitted: bool,
}

impl FileTarget {
    /// Opens `path` for reading and writing (`writes`: false opens it read-only). `direct`:
    /// ask for `O_DIRECT`; where the filesystem refuses it (tmpfs), buffered I/O is used and
    /// [`FileTarget::direct`] says so.
    pub fn open(path: &Path, writes: bool, direct: bool) -> Result<FileTarget, LabError> {
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        let open = |flags: i32| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(writes)
                .custom_flags(flags)
                .open(path)
        };
        let (file, direct) = match direct {
            true => match open(libc::O_DIRECT) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    (open(0).map_err(|e| LabError::io(path, e))?, false)
                }
                Err(e) => return Err(LabError::io(path, e)),
            },
            false => (open(0).map_err(|e| LabError::io(path, e))?, false),
        };
        let meta = file.metadata().map_err(|e| LabError::io(path, e))?;
        let (size, block) = if meta.file_type().is_block_device() {
            let mut size = 0u64;
            // BLKGETSIZE64
            let r = unsafe { libc::ioctl(file.as_raw_fd(), 0x8008_1272, &mut size) };
            if r != 0 {
                return Err(LabError::io(path, std::io::Error::last_os_error()));
            }
            let name = std::fs::canonicalize(path)
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
            (size, name)
        } else {
            (meta.len(), None)
        };
        let ring = ring(64).map_err(|e| LabError::io(path, e))?;
        Ok(FileTarget {
            path: path.to_path_buf(),
            file,
            size,
            direct,
            ring,
            bufs: Vec::new(),
            write_buf: pattern(4096),
            lens: Vec::new(),
            block,
            unsubmitted: false,
        })
    }

    /// True when the file was opened with `O_DIRECT`.
    pub fn direct(&self) -> bool {
        self.direct
    }
}

/// A ring with one submitter whose completions run when it reaps them (as fio's io_uring
/// engine sets it up where the kernel can), else a plain one.
fn ring(entries: u32) -> std::io::Result<io_uring::IoUring> {
    io_uring::IoUring::builder()
        .setup_coop_taskrun()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| io_uring::IoUring::new(entries))
}

impl Target for FileTarget {
    fn describe(&self) -> String {
        format!(
            "{} ({}{})",
            self.path.display(),
            if self.block.is_some() {
                "block device"
            } else {
                "file"
            },
            if self.direct {
                ", O_DIRECT"
            } else {
                ", buffered"
            }
        )
    }
    fn size_bytes(&self) -> u64 {
        self.size
    }
    fn prepare(&mut self, slots: usize, max_len: usize) -> Result<(), LabError> {
        if slots > 64 {
            self.ring =
                ring(slots.next_power_of_two() as u32).map_err(|e| LabError::io(&self.path, e))?;
        }
        self.bufs = (0..slots)
            .map(|_| AlignedBuf::new(max_len, 4096).expect("buffer allocation"))
            .collect();
        self.lens = vec![0; slots];
        self.write_buf = pattern(max_len);
        Ok(())
    }
    fn submit(&mut self, slot: usize, req: Request) -> Result<(), LabError> {
        use io_uring::{opcode, types};
        let fd = types::Fd(self.file.as_raw_fd());
        let len = req.len as u32;
        self.lens[slot] = len;
        let e = if req.write {
            opcode::Write::new(fd, self.write_buf.as_ptr(), len)
                .offset(req.offset)
                .build()
        } else {
            opcode::Read::new(fd, self.bufs[slot].as_mut_ptr(), len)
                .offset(req.offset)
                .build()
        }
        .user_data(slot as u64);
        // SAFETY: the buffers live in `self` until the request completes (`wait` is called
        // for every submitted request before `prepare` replaces them or `self` drops).
        unsafe {
            self.ring
                .submission()
                .push(&e)
                .map_err(|_| LabError::Target("io_uring submission queue full".into()))?;
        }
        // Submitted to the kernel by the next `wait`, together with any others queued since
        // (one system call per request at queue depth 1, as fio's io_uring engine makes).
        self.unsubmitted = true;
        Ok(())
    }
    fn wait(&mut self) -> Result<usize, LabError> {
        loop {
            if std::mem::take(&mut self.unsubmitted) {
                let ready = !self.ring.completion().is_empty();
                self.ring
                    .submit_and_wait(if ready { 0 } else { 1 })
                    .map_err(|e| LabError::io(&self.path, e))?;
            }
            if let Some(slot) = self.poll()? {
                return Ok(slot);
            }
            self.ring
                .submit_and_wait(1)
                .map_err(|e| LabError::io(&self.path, e))?;
        }
    }
    fn poll(&mut self) -> Result<Option<usize>, LabError> {
        let Some(c) = self.ring.completion().next() else {
            return Ok(None);
        };
        let slot = c.user_data() as usize;
        let res = c.result();
        if res < 0 {
            return Err(LabError::io(
                &self.path,
                std::io::Error::from_raw_os_error(-res),
            ));
        }
        if res as u32 != self.lens[slot] {
            return Err(LabError::Target(format!(
                "{}: short transfer ({res} of {} bytes)",
                self.path.display(),
                self.lens[slot]
            )));
        }
        Ok(Some(slot))
    }
    fn flush(&mut self) -> Result<(), LabError> {
        self.file
            .sync_data()
            .map_err(|e| LabError::io(&self.path, e))
    }
    fn drop_caches(&mut self) -> Result<bool, LabError> {
        if self.direct {
            return Ok(true);
        }
        self.flush()?;
        let r =
            unsafe { libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        Ok(r == 0)
    }
    fn members(&self) -> Option<MemberSource> {
        let name = self.block.clone()?;
        let path = format!("/sys/block/{name}/stat");
        std::fs::metadata(&path).ok()?;
        Some(Arc::new(move || {
            sysfs_stat(&path)
                .map(|io| MemberIoReading {
                    index: 0,
                    slot: None,
                    name: name.clone(),
                    io,
                })
                .into_iter()
                .collect()
        }))
    }
}

/// A block device's counters from `/sys/block/NAME/stat` (the kernel's own accounting,
/// documented in the kernel's `Documentation/block/stat.rst`), in [`MemberIo`]'s units.
pub fn sysfs_stat(path: &str) -> Option<MemberIo> {
    let text = std::fs::read_to_string(path).ok()?;
    let f: Vec<u64> = text
        .split_whitespace()
        .map(|t| t.parse().unwrap_or(0))
        .collect();
    if f.len() < 11 {
        return None;
    }
    let ms = 1_000_000u64;
    Some(MemberIo {
        at_ns: raidkit_disk::mono_ns(),
        reads: f[0],
        read_bytes: f[2] * 512,
        read_ns: f[3] * ms,
        writes: f[4],
        write_bytes: f[6] * 512,
        write_ns: f[7] * ms,
        flushes: f.get(15).copied().unwrap_or(0),
        flush_ns: f.get(16).copied().unwrap_or(0) * ms,
        errors: 0,
        busy_ns: f[9] * ms,
        in_flight: f[8] as u32,
    })
}

// ---------------------------------------------------------------------------------------

/// What an in-process target reads and writes: a raidkit array, or one disk (an emulated
/// drive, say) through the engine's `Disk` trait.
pub trait Surface: Send + Sync + 'static {
    fn size_bytes(&self) -> u64;
    fn read(&self, buf: &mut [u8], offset: u64) -> Result<(), String>;
    fn write(&self, buf: &[u8], offset: u64) -> Result<(), String>;
    fn flush(&self) -> Result<(), String>;
    /// Per-member counters, when the surface has members.
    fn members(self: Arc<Self>) -> Option<MemberSource>;
}

impl Surface for Array {
    fn size_bytes(&self) -> u64 {
        Array::size_bytes(self)
    }
    fn read(&self, buf: &mut [u8], offset: u64) -> Result<(), String> {
        self.read_at(buf, offset).map_err(|e| e.to_string())
    }
    fn write(&self, buf: &[u8], offset: u64) -> Result<(), String> {
        self.write_at(buf, offset, false).map_err(|e| e.to_string())
    }
    fn flush(&self) -> Result<(), String> {
        Array::flush(self).map_err(|e| e.to_string())
    }
    fn members(self: Arc<Self>) -> Option<MemberSource> {
        Some(Arc::new(move || self.member_io()))
    }
}

/// One disk in this process, counted like an array's member (its load is shown as the one
/// member's).
pub struct DiskSurface(pub raidkit_disk::Counted<dyn raidkit_disk::Disk>);

impl DiskSurface {
    pub fn new(d: Arc<dyn raidkit_disk::Disk>) -> DiskSurface {
        DiskSurface(raidkit_disk::Counted::new(d))
    }
}

impl Surface for DiskSurface {
    fn size_bytes(&self) -> u64 {
        raidkit_disk::Disk::size_bytes(&self.0)
    }
    fn read(&self, buf: &mut [u8], offset: u64) -> Result<(), String> {
        raidkit_disk::Disk::read_at(&self.0, buf, offset).map_err(|e| e.to_string())
    }
    fn write(&self, buf: &[u8], offset: u64) -> Result<(), String> {
        raidkit_disk::Disk::write_at(&self.0, buf, offset).map_err(|e| e.to_string())
    }
    fn flush(&self) -> Result<(), String> {
        raidkit_disk::Disk::flush(&self.0).map_err(|e| e.to_string())
    }
    fn members(self: Arc<Self>) -> Option<MemberSource> {
        Some(Arc::new(move || {
            vec![MemberIoReading {
                index: 0,
                slot: Some(0),
                name: raidkit_disk::Disk::name(&self.0).to_string(),
                io: self.0.counters().snapshot(),
            }]
        }))
    }
}

/// A target in this process (a raidkit array, or one disk): one thread per outstanding
/// request.
pub struct InProcessTarget<S: Surface> {
    array: Arc<S>,
    what: String,
    to: Vec<mpsc::Sender<Request>>,
    done_tx: mpsc::Sender<(usize, Result<(), String>)>,
    done: mpsc::Receiver<(usize, Result<(), String>)>,
    dropper: Option<Box<dyn FnMut() -> bool>>,
    /// At queue depth 1: the write pattern and read buffer used on the caller's thread, and
    /// the request done there.
    inline: Option<(Arc<AlignedBuf>, Vec<u8>)>,
    inline_done: Option<Result<usize, String>>,
}

/// A raidkit array in this process.
pub type ArrayTarget = InProcessTarget<Array>;

fn array_io<S: Surface>(a: &S, r: &Request, w: &[u8], buf: &mut [u8]) -> Result<(), String> {
    let len = r.len as usize;
    if r.write {
        a.write(&w[..len], r.offset)
    } else {
        a.read(&mut buf[..len], r.offset)
    }
}

impl<S: Surface> InProcessTarget<S> {
    pub fn new(array: Arc<S>, what: String) -> InProcessTarget<S> {
        let (done_tx, done) = mpsc::channel();
        InProcessTarget {
            array,
            what,
            to: Vec::new(),
            done_tx,
            done,
            dropper: None,
            inline: None,
            inline_done: None,
        }
    }

    /// How to drop the caches beneath the members (the page cache of their image files, say).
    pub fn with_cache_dropper(mut self, f: Box<dyn FnMut() -> bool>) -> InProcessTarget<S> {
        self.dropper = Some(f);
        self
    }
}

/// Drops the page cache of a file's clean pages (after its writes were flushed); false where
/// the kernel keeps the data in memory anyway (tmpfs) or refuses.
pub fn drop_file_cache(path: &Path) -> bool {
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    if is_memory_backed(path) {
        return false;
    }
    // SAFETY: plain syscall on an open descriptor.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) == 0 }
}

/// True for files on tmpfs or ramfs, where a file's pages are its storage.
pub fn is_memory_backed(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs fills the struct it is given.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    matches!(st.f_type as i64, TMPFS_MAGIC | RAMFS_MAGIC)
}

impl<S: Surface> Target for InProcessTarget<S> {
    fn describe(&self) -> String {
        self.what.clone()
    }
    fn size_bytes(&self) -> u64 {
        self.array.size_bytes()
    }
    fn prepare(&mut self, slots: usize, max_len: usize) -> Result<(), LabError> {
        self.to.clear(); // ends the threads of an earlier run
        let write = Arc::new(pattern(max_len));
        if slots == 1 {
            // One request at a time: it runs on the caller's thread, with no hand-over.
            self.inline = Some((write, vec![0u8; max_len]));
            return Ok(());
        }
        self.inline = None;
        for slot in 0..slots {
            let (tx, rx) = mpsc::channel::<Request>();
            let (a, done, w) = (self.array.clone(), self.done_tx.clone(), write.clone());
            std::thread::Builder::new()
                .name(format!("bench-q{slot}"))
                .spawn(move || {
                    let mut buf = vec![0u8; max_len];
                    for r in rx {
                        let res = array_io(&*a, &r, &w, &mut buf);
                        if done.send((slot, res)).is_err() {
                            return;
                        }
                    }
                })
                .map_err(|e| LabError::Target(format!("cannot start a thread: {e}")))?;
            self.to.push(tx);
        }
        Ok(())
    }
    fn submit(&mut self, slot: usize, req: Request) -> Result<(), LabError> {
        if let Some((w, buf)) = &mut self.inline {
            self.inline_done = Some(array_io(&*self.array, &req, w, buf).map(|()| slot));
            return Ok(());
        }
        self.to[slot]
            .send(req)
            .map_err(|_| LabError::Target("a request thread ended".into()))
    }
    fn wait(&mut self) -> Result<usize, LabError> {
        if let Some(r) = self.inline_done.take() {
            return r.map_err(LabError::Target);
        }
        let (slot, r) = self
            .done
            .recv()
            .map_err(|_| LabError::Target("every request thread ended".into()))?;
        r.map_err(LabError::Target)?;
        Ok(slot)
    }
    fn poll(&mut self) -> Result<Option<usize>, LabError> {
        match self.done.try_recv() {
            Ok((slot, r)) => r.map(|()| Some(slot)).map_err(LabError::Target),
            Err(_) => Ok(None),
        }
    }
    fn flush(&mut self) -> Result<(), LabError> {
        self.array.flush().map_err(LabError::Target)
    }
    fn drop_caches(&mut self) -> Result<bool, LabError> {
        self.flush()?;
        Ok(self.dropper.as_mut().is_some_and(|f| f()))
    }
    fn members(&self) -> Option<MemberSource> {
        self.array.clone().members()
    }
}

// ---------------------------------------------------------------------------------------

/// An NBD export over one connection, requests pipelined on this thread (no hand-over
/// between threads: replies are read as they are waited for, and while a request cannot be
/// sent for want of room, as libnbd does).
pub struct NbdTarget {
    uri: raidkit_nbd::client::NbdUri,
    info: raidkit_nbd::client::ExportInfo,
    tx: Option<raidkit_nbd::client::Sender>,
    rx: raidkit_nbd::client::Receiver,
    /// Per slot: the length of its request, with [`READ_FLAG`] for a READ (whose reply
    /// carries that much data). The last slot is the flush's.
    lens: Vec<u32>,
    /// Replies read while sending, not yet waited for.
    ready: std::collections::VecDeque<usize>,
    read_buf: Vec<u8>,
    write_buf: AlignedBuf,
    members: Option<MemberSource>,
}

/// Marks a READ in the per-slot lengths.
const READ_FLAG: u32 = 1 << 31;

/// Reads one reply; returns its slot.
fn nbd_reply(
    rx: &mut raidkit_nbd::client::Receiver,
    lens: &[u32],
    buf: &mut [u8],
) -> Result<usize, raidkit_nbd::client::ClientError> {
    use raidkit_nbd::client::ClientError;
    let (cookie, error) = rx.reply()?;
    let slot = cookie as usize;
    let len = *lens.get(slot).ok_or_else(|| {
        ClientError::Protocol(format!("reply for cookie {cookie}, which no request had"))
    })?;
    if error != 0 {
        return Err(ClientError::Request {
            command: if len & READ_FLAG != 0 { 0 } else { 1 },
            error,
        });
    }
    if len & READ_FLAG != 0 {
        rx.payload(&mut buf[..(len & !READ_FLAG) as usize])?;
    }
    Ok(slot)
}

impl NbdTarget {
    pub fn connect(uri: &str) -> Result<NbdTarget, LabError> {
        use raidkit_nbd::client;
        let uri = client::NbdUri::parse(uri).map_err(|e| LabError::Target(e.to_string()))?;
        let (info, tx, rx) =
            client::connect(&uri).map_err(|e| LabError::Target(format!("{uri}: {e}")))?;
        Ok(NbdTarget {
            uri,
            info,
            tx: Some(tx),
            rx,
            lens: vec![0],
            ready: Default::default(),
            read_buf: Vec::new(),
            write_buf: pattern(4096),
            members: None,
        })
    }

    /// Per-member counters from elsewhere (a served array's control socket).
    pub fn with_members(mut self, m: MemberSource) -> NbdTarget {
        self.members = Some(m);
        self
    }

    fn err(&self, e: raidkit_nbd::client::ClientError) -> LabError {
        LabError::Target(format!("{}: {e}", self.uri))
    }

    fn send(
        &mut self,
        command: u16,
        slot: usize,
        offset: u64,
        len: u32,
        write: bool,
    ) -> Result<(), LabError> {
        let NbdTarget {
            tx,
            rx,
            lens,
            ready,
            read_buf,
            write_buf,
            ..
        } = self;
        let payload = write.then(|| &write_buf[..len as usize]);
        let r = tx.as_mut().expect("connected").send_with(
            command,
            slot as u64,
            offset,
            len,
            payload,
            &mut || {
                ready.push_back(nbd_reply(rx, lens, read_buf)?);
                Ok(())
            },
        );
        r.map_err(|e| self.err(e))
    }
}

impl Target for NbdTarget {
    fn describe(&self) -> String {
        format!("{} (NBD)", self.uri)
    }
    fn size_bytes(&self) -> u64 {
        self.info.size_bytes
    }
    fn prepare(&mut self, slots: usize, max_len: usize) -> Result<(), LabError> {
        if max_len as u64 > self.info.max_payload as u64 {
            return Err(LabError::Usage(format!(
                "{}: requests of {max_len} bytes are over the server's maximum of {}",
                self.uri, self.info.max_payload
            )));
        }
        self.write_buf = pattern(max_len);
        self.read_buf = vec![0; max_len];
        self.lens = vec![0; slots + 1];
        self.ready.clear();
        Ok(())
    }
    fn submit(&mut self, slot: usize, req: Request) -> Result<(), LabError> {
        use raidkit_nbd::proto::{NBD_CMD_READ, NBD_CMD_WRITE};
        let len = req.len as u32;
        self.lens[slot] = if req.write { len } else { len | READ_FLAG };
        let cmd = if req.write {
            NBD_CMD_WRITE
        } else {
            NBD_CMD_READ
        };
        self.send(cmd, slot, req.offset, len, req.write)
    }
    fn wait(&mut self) -> Result<usize, LabError> {
        if let Some(s) = self.ready.pop_front() {
            return Ok(s);
        }
        nbd_reply(&mut self.rx, &self.lens, &mut self.read_buf).map_err(|e| self.err(e))
    }
    fn poll(&mut self) -> Result<Option<usize>, LabError> {
        if let Some(s) = self.ready.pop_front() {
            return Ok(Some(s));
        }
        if !self.rx.ready() {
            return Ok(None);
        }
        self.wait().map(Some)
    }
    fn flush(&mut self) -> Result<(), LabError> {
        if !self.info.can_flush() {
            return Ok(());
        }
        use raidkit_nbd::proto::NBD_CMD_FLUSH;
        // The last slot is the flush's: its length stays 0, so its reply carries no data.
        let slot = self.lens.len() - 1;
        self.lens[slot] = 0;
        self.send(NBD_CMD_FLUSH, slot, 0, 0, false)?;
        while self.wait()? != slot {}
        Ok(())
    }
    fn members(&self) -> Option<MemberSource> {
        self.members.clone()
    }
}

impl Drop for NbdTarget {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            tx.disconnect();
        }
    }
}
