//! `FileDisk`: a regular file (image) or a block device, through positional `pread`/`pwrite`.
//!
//! Invariants: the size is fixed at open (an image file is never extended by a write); with
//! `O_DIRECT` active every system call uses an offset, length and buffer aligned to the logical
//! block size (unaligned requests are bounced through an [`AlignedBuf`] the thread keeps; a
//! write reads first only the blocks it covers in part, so a request whose range is aligned
//! and only its buffer is not, the usual case, costs a copy and never a read); `O_DIRECT` is
//! only ever an optimisation: where the kernel refuses it (EINVAL, e.g.
//! tmpfs) the disk is reopened buffered.
//!
//! Asked to ([`OpenOptions::map_memory`]), a fully allocated image file on tmpfs is mapped and
//! its reads and writes become memory copies ([`crate::mapped`]); once a copy meets a page
//! that vanished, the disk goes back to `pread`/`pwrite` for good. Discard still punches holes
//! (freeing the memory); touching a punched page through the mapping allocates it again.

use crate::claim::{self, Claim};
use crate::mapped::Mapping;
use crate::{check_range, AlignedBuf, Disk, DiskError, DiskErrorKind};
use std::fs::{File, OpenOptions as StdOpenOptions};
use std::io::{IoSlice, IoSliceMut};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Whether to bypass the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DirectIo {
    /// `O_DIRECT` for block devices, buffered for regular files (the default).
    #[default]
    Auto,
    /// Try `O_DIRECT` for every kind of member; fall back to buffered where refused.
    Prefer,
    /// Never use `O_DIRECT`.
    Never,
}

/// How to open a member.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenOptions {
    pub read_only: bool,
    pub direct: DirectIo,
    /// Map a fully allocated image file on tmpfs and copy to and from the mapping instead of
    /// calling `pread`/`pwrite` (about 1.5 times as fast; costs 0.12 s per GiB at open, so meant
    /// for long-lived users such as a server). Ignored for anything else.
    pub map_memory: bool,
    /// The claim taken on the member for as long as it is open (see [`Claim`]).
    pub claim: Claim,
}

#[derive(Debug)]
pub struct FileDisk {
    file: File,
    name: String,
    size_bytes: u64,
    logical_block_size: u32,
    read_only: bool,
    direct: bool,
    is_block_device: bool,
    /// A block device whose queue says it spins (`/sys/dev/block/M:m/queue/rotational`).
    rotational: bool,
    /// `write_zeroes` writes no data: an image file (a zeroed extent or a hole), or a block
    /// device whose queue offloads zeroing (`queue/write_zeroes_max_bytes` > 0).
    zeroes_offloaded: bool,
    /// Cleared once hole punching is refused, so later discards go straight to zeroes.
    punch_supported: AtomicBool,
    /// The file's pages mapped into memory ([`OpenOptions::map_memory`]).
    map: Option<Mapping>,
    /// Regions of a writable image file known to have their blocks allocated
    /// ([`Disk::reserve`]); `None` for block devices and read-only opens.
    allocated: Option<Regions>,
}

/// Bytes per region of [`Regions`]: a reservation allocates whole regions, so a sparse image
/// costs one `fallocate` per MiB written for the first time, and nothing after.
const REGION_BYTES: u64 = 1 << 20;

/// One bit per [`REGION_BYTES`] of an image file: set once the region's blocks are known to
/// be allocated. Lock-free, so a reservation of allocated space is a few loads.
#[derive(Debug)]
struct Regions {
    bits: Box<[AtomicU64]>,
    /// `fallocate` is not supported by the filesystem: nothing can be reserved (writes then
    /// find out on their own).
    unsupported: AtomicBool,
}

impl Regions {
    fn new(size_bytes: u64, all_set: bool) -> Regions {
        let regions = size_bytes.div_ceil(REGION_BYTES);
        let words = regions.div_ceil(64) as usize;
        let fill = if all_set { u64::MAX } else { 0 };
        Regions {
            bits: (0..words).map(|_| AtomicU64::new(fill)).collect(),
            unsupported: AtomicBool::new(false),
        }
    }

    fn is_set(&self, region: u64) -> bool {
        self.bits[(region / 64) as usize].load(Ordering::Relaxed) & (1 << (region % 64)) != 0
    }

    fn set(&self, region: u64) {
        self.bits[(region / 64) as usize].fetch_or(1 << (region % 64), Ordering::Relaxed);
    }

    fn clear(&self, region: u64) {
        self.bits[(region / 64) as usize].fetch_and(!(1 << (region % 64)), Ordering::Relaxed);
    }

    /// The regions `[offset, offset + len)` touches.
    fn span(offset: u64, len: u64) -> std::ops::Range<u64> {
        offset / REGION_BYTES..(offset + len).div_ceil(REGION_BYTES)
    }
}

const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
const BLKSSZGET: libc::c_ulong = 0x1268;
const BLKZEROOUT: libc::c_ulong = 0x127f;

impl FileDisk {
    /// Opens an existing image file or block device and takes its claim ([`Claim`]) before
    /// anything is read from it: a member another process holds is refused with
    /// [`DiskErrorKind::Claimed`].
    pub fn open(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Self, DiskError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|e| DiskError::io(&name, "open", 0, e))?;
        let is_block_device = meta.file_type().is_block_device();
        if !is_block_device && !meta.file_type().is_file() {
            return Err(DiskError::new(&name, "open", 0, DiskErrorKind::NotADisk));
        }
        let claimed = opts.claim == Claim::ByMode;
        let exclusive = claimed && !opts.read_only;
        let claim_error = |holder| {
            DiskError::new(
                &name,
                "open",
                0,
                DiskErrorKind::Claimed { exclusive, holder },
            )
        };
        let want_direct = match opts.direct {
            DirectIo::Auto => is_block_device,
            DirectIo::Prefer => true,
            DirectIo::Never => false,
        };
        let open = |direct: bool| {
            let mut o = StdOpenOptions::new();
            o.read(true).write(!opts.read_only);
            let mut flags = 0;
            if direct {
                flags |= libc::O_DIRECT;
            }
            if is_block_device && exclusive {
                // The kernel's own claim: refused while mounted or held by md, dm or
                // another exclusive opener.
                flags |= libc::O_EXCL;
            }
            o.custom_flags(flags);
            o.open(path).map_err(|e| {
                if is_block_device && exclusive && e.raw_os_error() == Some(libc::EBUSY) {
                    claim_error(claim::block_device_holder(path))
                } else {
                    DiskError::io(&name, "open", 0, e)
                }
            })
        };
        let (mut file, mut direct) = if want_direct {
            match open(true) {
                Ok(f) => (f, true),
                Err(DiskError {
                    kind: DiskErrorKind::Io(e),
                    ..
                }) if e.raw_os_error() == Some(libc::EINVAL) => (open(false)?, false),
                Err(e) => return Err(e),
            }
        } else {
            (open(false)?, false)
        };
        let (size_bytes, logical_block_size) = if is_block_device {
            let mut size: u64 = 0;
            // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which is valid.
            let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut size) };
            if rc != 0 {
                return Err(DiskError::io(
                    &name,
                    "open",
                    0,
                    std::io::Error::last_os_error(),
                ));
            }
            let mut lbs: libc::c_int = 0;
            // SAFETY: BLKSSZGET writes one int through the pointer, which is valid.
            let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKSSZGET as _, &mut lbs) };
            let lbs = if rc == 0 && lbs > 0 { lbs as u32 } else { 512 };
            (size, lbs)
        } else {
            (meta.len(), 512)
        };
        if direct {
            // O_DIRECT may open fine yet fail on the first I/O (some filesystems): probe once.
            let align = (logical_block_size as usize).max(512);
            let mut probe = AlignedBuf::new(align, align)
                .ok_or_else(|| DiskError::new(&name, "open", 0, DiskErrorKind::NotADisk))?;
            if size_bytes >= probe.len() as u64 {
                if let Err(e) = file.read_exact_at(&mut probe, 0) {
                    if e.raw_os_error() != Some(libc::EINVAL) {
                        return Err(DiskError::io(&name, "open", 0, e));
                    }
                    // Closed first: an exclusive open of a block device excludes our own
                    // second one too.
                    drop(file);
                    file = open(false)?;
                    direct = false;
                }
            }
        }
        if claimed {
            claim::take(&file, exclusive).map_err(|r| match r {
                Ok(holder) => claim_error(holder),
                Err(e) => DiskError::io(&name, "open", 0, e),
            })?;
        }
        let mut disk = FileDisk {
            file,
            name,
            size_bytes,
            logical_block_size,
            read_only: opts.read_only,
            direct,
            is_block_device,
            rotational: is_block_device && block_device_rotational(meta.rdev()),
            zeroes_offloaded: !is_block_device || block_device_zeroes_offloaded(meta.rdev()),
            punch_supported: AtomicBool::new(true),
            map: None,
            allocated: None,
        };
        if !is_block_device && !opts.read_only {
            // Every block allocated already (a written or fallocated image): nothing to reserve
            // until a discard punches a hole.
            let all = (meta.blocks()).saturating_mul(512) >= size_bytes;
            disk.allocated = Some(Regions::new(size_bytes, all));
        }
        if opts.map_memory && !is_block_device && !disk.direct {
            disk.map =
                Mapping::of_tmpfs_file(disk.file.as_raw_fd(), disk.size_bytes, !disk.read_only);
        }
        Ok(disk)
    }

    /// Opens an image file, creating it (sparse) when missing and extending it (sparse) to
    /// `size_bytes` when it is shorter (only once its claim is held). An existing longer file
    /// keeps its size.
    pub fn create(path: impl AsRef<Path>, size_bytes: u64) -> Result<Self, DiskError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        drop(
            StdOpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(|e| DiskError::io(&name, "create", 0, e))?,
        );
        let mut disk = Self::open(path, OpenOptions::default())?;
        if !disk.is_block_device && disk.size_bytes < size_bytes {
            disk.file
                .set_len(size_bytes)
                .map_err(|e| DiskError::io(&name, "create", 0, e))?;
            let before = disk.size_bytes;
            disk.size_bytes = size_bytes;
            // The old last region and everything past it are holes now.
            let regions = Regions::new(size_bytes, false);
            if let Some(old) = &disk.allocated {
                for r in 0..before / REGION_BYTES {
                    if old.is_set(r) {
                        regions.set(r);
                    }
                }
            }
            disk.allocated = Some(regions);
        }
        Ok(disk)
    }

    /// True when `O_DIRECT` is in use.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    pub fn is_block_device(&self) -> bool {
        self.is_block_device
    }

    /// True while reads and writes are memory copies ([`OpenOptions::map_memory`]).
    pub fn is_mapped(&self) -> bool {
        self.map.as_ref().is_some_and(|m| !m.faulted())
    }

    /// Runs `call` (`preadv` or `pwritev`: iovecs, their count, offset) until every piece is
    /// done, going on after a short transfer and an interrupted call.
    fn vectored<T>(
        &self,
        mut bufs: &mut [T],
        offset: u64,
        call: impl Fn(*const libc::iovec, libc::c_int, libc::off_t) -> isize,
        advance: impl Fn(&mut &mut [T], usize),
    ) -> std::io::Result<()> {
        // Linux takes at most IOV_MAX (1024) iovecs a call.
        const IOV_MAX: usize = 1024;
        // Empty pieces first (advance skips them).
        advance(&mut bufs, 0);
        let mut at = offset;
        while !bufs.is_empty() {
            let n = bufs.len().min(IOV_MAX) as libc::c_int;
            let done = call(bufs.as_ptr() as *const libc::iovec, n, at as libc::off_t);
            if done < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if done == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the device ended before the pieces did",
                ));
            }
            at += done as u64;
            advance(&mut bufs, done as usize);
        }
        Ok(())
    }

    fn direct_align(&self) -> usize {
        (self.logical_block_size as usize).max(512)
    }

    fn needs_bounce(&self, buf: &[u8], offset: u64) -> bool {
        if !self.direct {
            return false;
        }
        let a = self.direct_align();
        !(buf.as_ptr() as usize).is_multiple_of(a)
            || !buf.len().is_multiple_of(a)
            || !offset.is_multiple_of(a as u64)
    }

    fn bounce_window(&self, offset: u64, len: usize) -> (u64, usize) {
        let a = self.direct_align() as u64;
        let start = offset / a * a;
        let end = (offset + len as u64).div_ceil(a) * a;
        (start, (end - start) as usize)
    }

    /// Reads the aligned block at `at` into `block` (a read-modify-write's edge).
    fn read_block_into(&self, block: &mut [u8], at: u64, offset: u64) -> Result<(), DiskError> {
        self.file
            .read_exact_at(block, at)
            .map_err(|e| DiskError::io(&self.name, "write", offset, e))
    }

    /// The error when no aligned bounce buffer could be had (an impossible alignment).
    fn no_bounce(&self, op: &'static str, offset: u64) -> DiskError {
        DiskError::new(&self.name, op, offset, DiskErrorKind::NotADisk)
    }

    fn refuse_if_read_only(&self, op: &'static str, offset: u64) -> Result<(), DiskError> {
        if self.read_only {
            Err(DiskError::new(
                &self.name,
                op,
                offset,
                DiskErrorKind::ReadOnly,
            ))
        } else {
            Ok(())
        }
    }

    fn zero_fill(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        const STEP: usize = 1 << 20;
        let zeros = AlignedBuf::new(STEP, self.direct_align()).ok_or_else(|| {
            DiskError::new(
                &self.name,
                "write-zeroes",
                offset_bytes,
                DiskErrorKind::NotADisk,
            )
        })?;
        let mut done = 0u64;
        while done < len_bytes {
            let n = ((len_bytes - done) as usize).min(STEP);
            self.write_at(&zeros[..n], offset_bytes + done)?;
            done += n as u64;
        }
        Ok(())
    }

    /// The error of a write-like `op` that failed with `err`: a full filesystem or quota
    /// becomes [`DiskErrorKind::NoSpace`], naming the filesystem; anything else stays I/O.
    /// A write, with `RWF_DSYNC` when `dsync` (see `write_fua`).
    fn write_with(&self, buf: &[u8], offset_bytes: u64, dsync: bool) -> Result<(), DiskError> {
        self.refuse_if_read_only("write", offset_bytes)?;
        check_range(
            &self.name,
            "write",
            offset_bytes,
            buf.len() as u64,
            self.size_bytes,
        )?;
        if let Some(map) = &self.map {
            if map.write(buf, offset_bytes) {
                return Ok(());
            }
        }
        if self.needs_bounce(buf, offset_bytes) {
            let (start, len) = self.bounce_window(offset_bytes, buf.len());
            let skip = (offset_bytes - start) as usize;
            return with_bounce(len, self.direct_align(), |bounce| {
                // Only the blocks the write covers in part are read first: when just the
                // buffer's address is unaligned (the usual case: a caller's Vec), the window
                // is the request itself and nothing is read.
                let a = self.direct_align();
                let end = skip + buf.len();
                if skip != 0 {
                    self.read_block_into(&mut bounce[..a], start, offset_bytes)?;
                }
                if !end.is_multiple_of(a) && (skip == 0 || len > a) {
                    self.read_block_into(
                        &mut bounce[len - a..],
                        start + (len - a) as u64,
                        offset_bytes,
                    )?;
                }
                bounce[skip..end].copy_from_slice(buf);
                self.pwrite_all(bounce, start, dsync)
                    .map_err(|e| self.write_error("write", offset_bytes, e))
            })
            .unwrap_or_else(|| Err(self.no_bounce("write", offset_bytes)));
        }
        self.pwrite_all(buf, offset_bytes, dsync)
            .map_err(|e| self.write_error("write", offset_bytes, e))
    }

    /// `pwrite` of all of `buf`, each call with `RWF_DSYNC` when `dsync`. A kernel without
    /// `pwritev2` flags gets the write and then `fdatasync`.
    fn pwrite_all(&self, buf: &[u8], offset: u64, dsync: bool) -> std::io::Result<()> {
        if !dsync {
            return self.file.write_all_at(buf, offset);
        }
        let mut done = 0usize;
        while done < buf.len() {
            let iov = libc::iovec {
                iov_base: buf[done..].as_ptr() as *mut libc::c_void,
                iov_len: buf.len() - done,
            };
            // SAFETY: the iovec points into `buf`, which outlives the call; the kernel only
            // reads it.
            let n = unsafe {
                libc::pwritev2(
                    self.file.as_raw_fd(),
                    &iov,
                    1,
                    (offset + done as u64) as libc::off_t,
                    libc::RWF_DSYNC,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)
                        if done == 0 =>
                    {
                        self.file.write_all_at(buf, offset)?;
                        return self.file.sync_data();
                    }
                    _ => return Err(e),
                }
            }
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    "pwritev2 wrote nothing",
                ));
            }
            done += n as usize;
        }
        Ok(())
    }

    fn write_error(&self, op: &'static str, offset: u64, err: std::io::Error) -> DiskError {
        let quota = match err.raw_os_error() {
            Some(libc::ENOSPC) => false,
            Some(libc::EDQUOT) => true,
            _ => return DiskError::io(&self.name, op, offset, err),
        };
        let (filesystem, free_bytes) = filesystem_of(&self.file);
        DiskError::new(
            &self.name,
            op,
            offset,
            DiskErrorKind::NoSpace {
                filesystem,
                free_bytes,
                quota,
            },
        )
    }

    /// Forgets that `[offset, offset + len)` is allocated (a hole was punched there).
    fn forget_allocated(&self, offset: u64, len: u64) {
        if let Some(regions) = &self.allocated {
            for r in Regions::span(offset, len) {
                regions.clear(r);
            }
        }
    }

    fn block_range_ioctl(&self, req: libc::c_ulong, offset: u64, len: u64) -> bool {
        let range: [u64; 2] = [offset, len];
        // SAFETY: the ioctl reads two u64s from a valid pointer.
        unsafe { libc::ioctl(self.file.as_raw_fd(), req as _, range.as_ptr()) == 0 }
    }
}

/// The largest bounce buffer a thread keeps between requests (larger ones are made and freed
/// per request).
const KEPT_BOUNCE_BYTES: usize = 8 << 20;

thread_local! {
    static BOUNCE: std::cell::RefCell<Option<AlignedBuf>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` on an aligned buffer of exactly `len` bytes, the one this thread keeps when it is
/// large enough and aligned as asked (a fresh allocation per request faulted in its pages
/// every time, which cost more than the copy). `None` when no buffer can be made.
fn with_bounce<R>(len: usize, align: usize, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
    let kept = BOUNCE.with(|b| {
        b.borrow_mut()
            .take()
            .filter(|k| k.len() >= len && k.align() >= align)
    });
    let mut buf = match kept {
        Some(b) => b,
        None => AlignedBuf::new(len.max(64 << 10), align.max(4096))?,
    };
    let r = f(&mut buf[..len]);
    if buf.len() <= KEPT_BOUNCE_BYTES {
        BOUNCE.with(|b| {
            let mut b = b.borrow_mut();
            if b.as_ref().is_none_or(|k| k.len() < buf.len()) {
                *b = Some(buf);
            }
        });
    }
    Some(r)
}

/// The block device `rdev`'s queue attribute `name` (a partition's queue is its disk's).
fn queue_attribute(rdev: u64, name: &str) -> Option<String> {
    let base = format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev));
    ["queue", "../queue"]
        .iter()
        .find_map(|q| std::fs::read_to_string(format!("{base}/{q}/{name}")).ok())
        .map(|v| v.trim().to_string())
}

/// Whether the kernel says the block device `rdev` spins (its queue's `rotational`). False
/// when unknown.
fn block_device_rotational(rdev: u64) -> bool {
    queue_attribute(rdev, "rotational").is_some_and(|v| v == "1")
}

/// Whether the kernel offloads zeroing on the block device `rdev` (its queue's
/// `write_zeroes_max_bytes`). False when unknown.
fn block_device_zeroes_offloaded(rdev: u64) -> bool {
    queue_attribute(rdev, "write_zeroes_max_bytes")
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|v| v > 0)
}

/// Allocates every page of the image file at `path` (contents unchanged): on tmpfs this is
/// what makes a file eligible for [`OpenOptions::map_memory`].
pub fn allocate_in_full(path: impl AsRef<Path>) -> std::io::Result<()> {
    let f = StdOpenOptions::new().write(true).open(path)?;
    let len = f.metadata()?.len();
    // SAFETY: fallocate on a valid descriptor with plain integer arguments.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len as libc::off_t) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// How far an image file may still grow into its filesystem ([`sparse_growth`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SparseGrowth {
    /// The filesystem's device number: images with the same one share its free space.
    pub device: u64,
    /// Where it is mounted and its type ("/mnt/small (ext4)").
    pub filesystem: String,
    /// Bytes free on it for this user.
    pub free_bytes: u64,
    /// Bytes of the file not allocated yet (its holes), which writes will allocate.
    pub unallocated_bytes: u64,
}

/// For a regular file: its filesystem, the space free there and how much of the file is
/// still holes. `None` for anything else (a block device's blocks all exist).
pub fn sparse_growth(path: impl AsRef<Path>) -> Option<SparseGrowth> {
    let file = File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.file_type().is_file() {
        return None;
    }
    let (filesystem, free) = filesystem_of(&file);
    Some(SparseGrowth {
        device: meta.dev(),
        filesystem,
        free_bytes: free?,
        unallocated_bytes: meta.len().saturating_sub(meta.blocks().saturating_mul(512)),
    })
}

/// Where the filesystem holding `file` is mounted and its type ("/mnt/small (ext4)", from
/// `/proc/self/mountinfo`), and the bytes free on it for this user (`fstatvfs`).
fn filesystem_of(file: &File) -> (String, Option<u64>) {
    let free = {
        // SAFETY: fstatvfs writes one struct through a valid pointer.
        let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
        (unsafe { libc::fstatvfs(file.as_raw_fd(), &mut vfs) } == 0)
            .then(|| (vfs.f_bavail as u64).saturating_mul(vfs.f_frsize as u64))
    };
    let Ok(meta) = file.metadata() else {
        return ("(unknown)".into(), free);
    };
    let id = format!("{}:{}", libc::major(meta.dev()), libc::minor(meta.dev()));
    let described = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|info| {
            // Fields: id parent major:minor root mountpoint options ... - fstype source ...
            info.lines().find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() < 5 || f[2] != id {
                    return None;
                }
                let fstype = f
                    .iter()
                    .position(|&x| x == "-")
                    .and_then(|dash| f.get(dash + 1))
                    .copied()
                    .unwrap_or("?");
                Some(format!("{} ({fstype})", f[4]))
            })
        });
    (described.unwrap_or_else(|| format!("device {id}")), free)
}

impl Disk for FileDisk {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        check_range(
            &self.name,
            "read",
            offset_bytes,
            buf.len() as u64,
            self.size_bytes,
        )?;
        if let Some(map) = &self.map {
            if map.read(buf, offset_bytes) {
                return Ok(());
            }
        }
        if self.needs_bounce(buf, offset_bytes) {
            let (start, len) = self.bounce_window(offset_bytes, buf.len());
            let skip = (offset_bytes - start) as usize;
            return with_bounce(len, self.direct_align(), |bounce| {
                self.file
                    .read_exact_at(bounce, start)
                    .map_err(|e| DiskError::io(&self.name, "read", offset_bytes, e))?;
                buf.copy_from_slice(&bounce[skip..skip + buf.len()]);
                Ok(())
            })
            .unwrap_or_else(|| Err(self.no_bounce("read", offset_bytes)));
        }
        self.file
            .read_exact_at(buf, offset_bytes)
            .map_err(|e| DiskError::io(&self.name, "read", offset_bytes, e))
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.write_with(buf, offset_bytes, false)
    }

    /// One `preadv` where the pieces need no bounce (else piece by piece).
    fn read_vectored_at(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        let total = crate::pieces_len(bufs);
        check_range(&self.name, "read", offset_bytes, total, self.size_bytes)?;
        if self.map.is_some() || bufs.iter().any(|b| self.needs_bounce(b, offset_bytes)) {
            return crate::read_pieces(bufs, offset_bytes, |b, at| self.read_at(b, at));
        }
        self.vectored(
            bufs,
            offset_bytes,
            |iov, n, at| {
                // SAFETY: `iov` points at `n` live IoSliceMut, which are iovecs on Unix; the
                // kernel writes only into the buffers they describe, which we hold mutably.
                unsafe { libc::preadv(self.file.as_raw_fd(), iov, n, at) }
            },
            IoSliceMut::advance_slices,
        )
        .map_err(|e| DiskError::io(&self.name, "read", offset_bytes, e))
    }

    /// One `pwritev` where the pieces need no bounce (else piece by piece).
    fn write_vectored_at(
        &self,
        bufs: &mut [IoSlice<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        self.refuse_if_read_only("write", offset_bytes)?;
        let total = crate::pieces_len(bufs);
        check_range(&self.name, "write", offset_bytes, total, self.size_bytes)?;
        if self.map.is_some() || bufs.iter().any(|b| self.needs_bounce(b, offset_bytes)) {
            return crate::write_pieces(bufs, offset_bytes, |b, at| self.write_at(b, at));
        }
        self.vectored(
            bufs,
            offset_bytes,
            |iov, n, at| {
                // SAFETY: `iov` points at `n` live IoSlice, which are iovecs on Unix; the
                // kernel only reads the buffers they describe.
                unsafe { libc::pwritev(self.file.as_raw_fd(), iov, n, at) }
            },
            IoSlice::advance_slices,
        )
        .map_err(|e| self.write_error("write", offset_bytes, e))
    }

    /// With `RWF_DSYNC` (`pwritev2`): the write alone is durable when it returns; on a block
    /// device the kernel sends it with FUA where the device has it, else a flush follows.
    fn write_fua(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        if self.map.is_some() {
            self.write_at(buf, offset_bytes)?;
            return self.flush();
        }
        self.write_with(buf, offset_bytes, true)
    }

    fn flush(&self) -> Result<(), DiskError> {
        if self.read_only {
            return Ok(());
        }
        self.file
            .sync_data()
            .map_err(|e| DiskError::io(&self.name, "flush", 0, e))
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.refuse_if_read_only("discard", offset_bytes)?;
        check_range(
            &self.name,
            "discard",
            offset_bytes,
            len_bytes,
            self.size_bytes,
        )?;
        if len_bytes == 0 {
            return Ok(());
        }
        if self.is_block_device {
            // BLKDISCARD does not promise zeroes; BLKZEROOUT does (and may unmap).
            if self.block_range_ioctl(BLKZEROOUT, offset_bytes, len_bytes) {
                return Ok(());
            }
            return self.zero_fill(offset_bytes, len_bytes);
        }
        if self.punch_supported.load(Ordering::Relaxed) {
            // SAFETY: fallocate on a valid descriptor with plain integer arguments.
            let rc = unsafe {
                libc::fallocate(
                    self.file.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset_bytes as libc::off_t,
                    len_bytes as libc::off_t,
                )
            };
            if rc == 0 {
                self.forget_allocated(offset_bytes, len_bytes);
                return Ok(());
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(DiskError::io(&self.name, "discard", offset_bytes, err));
            }
            self.punch_supported.store(false, Ordering::Relaxed);
        }
        self.zero_fill(offset_bytes, len_bytes)
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.refuse_if_read_only("write-zeroes", offset_bytes)?;
        check_range(
            &self.name,
            "write-zeroes",
            offset_bytes,
            len_bytes,
            self.size_bytes,
        )?;
        if len_bytes == 0 {
            return Ok(());
        }
        if self.is_block_device {
            if self.block_range_ioctl(BLKZEROOUT, offset_bytes, len_bytes) {
                return Ok(());
            }
            return self.zero_fill(offset_bytes, len_bytes);
        }
        // SAFETY: fallocate on a valid descriptor with plain integer arguments.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                offset_bytes as libc::off_t,
                len_bytes as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if matches!(err.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) {
            return Err(self.write_error("write-zeroes", offset_bytes, err));
        }
        // Not every filesystem zeroes ranges; punching a hole reads back as zeroes too.
        self.discard(offset_bytes, len_bytes)
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn logical_block_size(&self) -> u32 {
        self.logical_block_size
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn is_rotational(&self) -> bool {
        self.rotational
    }

    fn zeroes_cheaply(&self) -> bool {
        self.zeroes_offloaded
    }

    fn health(&self) -> crate::Health {
        if self.is_block_device {
            crate::health::smartctl(Path::new(&self.name))
        } else {
            crate::Health::no_drive("an image file (the drive beneath is the filesystem's)")
        }
    }

    fn reserve(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.refuse_if_read_only("reserve", offset_bytes)?;
        check_range(
            &self.name,
            "reserve",
            offset_bytes,
            len_bytes,
            self.size_bytes,
        )?;
        let Some(regions) = &self.allocated else {
            return Ok(());
        };
        if len_bytes == 0 || regions.unsupported.load(Ordering::Relaxed) {
            return Ok(());
        }
        let span = Regions::span(offset_bytes, len_bytes);
        let mut r = span.start;
        while r < span.end {
            if regions.is_set(r) {
                r += 1;
                continue;
            }
            // A run of regions not known allocated, in one call.
            let first = r;
            while r < span.end && !regions.is_set(r) {
                r += 1;
            }
            let start = first * REGION_BYTES;
            let end = (r * REGION_BYTES).min(self.size_bytes);
            // SAFETY: fallocate on a valid descriptor with plain integer arguments; mode 0
            // inside the file's size allocates without changing the size or the contents.
            let rc = unsafe {
                libc::fallocate(
                    self.file.as_raw_fd(),
                    0,
                    start as libc::off_t,
                    (end - start) as libc::off_t,
                )
            };
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                if matches!(
                    err.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
                ) {
                    regions.unsupported.store(true, Ordering::Relaxed);
                    return Ok(());
                }
                return Err(self.write_error("reserve", offset_bytes, err));
            }
            for k in first..r {
                regions.set(k);
            }
        }
        Ok(())
    }
}
