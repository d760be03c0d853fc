//! The `Export` trait: what the server needs from something it serves, plus two exports,
//! [`MemoryExport`] and [`FileExport`].
//!
//! Like an nbdkit plugin, an export only moves bytes and declares its capabilities. The server
//! validates every request (range, alignment, read-only, advertised capabilities) before calling
//! the export, so an export may assume `offset + len <= size_bytes()` and that writes only
//! arrive when `read_only()` is false. Exports are shared by many connections at once, hence
//! `Send + Sync` and `&self` methods.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::{Arc, RwLock};

/// Size constraints advertised with `NBD_INFO_BLOCK_SIZE` and enforced on every request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSize {
    /// Smallest addressable unit; offsets and lengths must be multiples of it.
    pub minimum_bytes: u32,
    /// Size at which aligned I/O avoids read-modify-write.
    pub preferred_bytes: u32,
    /// Largest payload of a READ or WRITE the server accepts.
    pub maximum_payload_bytes: u32,
}

impl Default for BlockSize {
    fn default() -> Self {
        BlockSize {
            minimum_bytes: 512,
            preferred_bytes: 4096,
            maximum_payload_bytes: 32 << 20,
        }
    }
}

/// Why a [`BlockSize`] breaks the spec's rules ("Size constraints" in proto.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockSizeError {
    /// The minimum block size must be a power of two no larger than 65,536.
    Minimum(u32),
    /// The preferred block size must be a power of two at least max(minimum, 512).
    Preferred(u32),
    /// The maximum payload must be at least the preferred block size and at most
    /// [`MAX_PAYLOAD_LIMIT_BYTES`] (the server buffers a whole payload per request).
    Maximum(u32),
}

/// Largest maximum payload an export may advertise: each in-flight READ or WRITE is buffered
/// whole, so this bounds memory per request.
pub const MAX_PAYLOAD_LIMIT_BYTES: u32 = 256 << 20;

impl fmt::Display for BlockSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockSizeError::Minimum(v) => write!(
                f,
                "minimum block size {v} must be a power of two no larger than 65536"
            ),
            BlockSizeError::Preferred(v) => write!(
                f,
                "preferred block size {v} must be a power of two at least the minimum and 512"
            ),
            BlockSizeError::Maximum(v) => write!(
                f,
                "maximum payload {v} must be at least the preferred block size and at most {MAX_PAYLOAD_LIMIT_BYTES}"
            ),
        }
    }
}

impl std::error::Error for BlockSizeError {}

impl BlockSize {
    /// Checks the rules the spec sets for advertised constraints.
    pub fn validate(&self) -> Result<(), BlockSizeError> {
        if !self.minimum_bytes.is_power_of_two() || self.minimum_bytes > 65536 {
            return Err(BlockSizeError::Minimum(self.minimum_bytes));
        }
        if !self.preferred_bytes.is_power_of_two()
            || self.preferred_bytes < self.minimum_bytes.max(512)
        {
            return Err(BlockSizeError::Preferred(self.preferred_bytes));
        }
        if self.maximum_payload_bytes < self.preferred_bytes
            || self.maximum_payload_bytes > MAX_PAYLOAD_LIMIT_BYTES
        {
            return Err(BlockSizeError::Maximum(self.maximum_payload_bytes));
        }
        Ok(())
    }
}

/// A byte range the server serves. See the module documentation for the contract.
pub trait Export: Send + Sync {
    /// Size of the export in bytes.
    fn size_bytes(&self) -> u64;

    /// Size constraints; must pass [`BlockSize::validate`].
    fn block_size(&self) -> BlockSize {
        BlockSize::default()
    }

    /// A short human-readable description for `NBD_OPT_LIST` and `NBD_INFO_DESCRIPTION`.
    fn description(&self) -> Option<String> {
        None
    }

    /// True if writes, trims and zeroing must be refused with `NBD_EPERM`.
    fn read_only(&self) -> bool {
        false
    }

    /// True if [`Export::flush`] makes completed writes durable.
    fn can_flush(&self) -> bool {
        true
    }

    /// True if the `fua` argument of writes is honoured.
    fn can_fua(&self) -> bool {
        true
    }

    /// True if [`Export::trim`] does something useful.
    fn can_trim(&self) -> bool {
        false
    }

    /// True if [`Export::write_zeroes`] is cheaper than writing a buffer of zeroes. If false,
    /// the server still offers zeroing to clients (as nbdkit does) and performs it with
    /// [`Export::write_at`] from a small buffer of zeroes, never calling `write_zeroes`.
    fn can_zero(&self) -> bool {
        false
    }

    /// True if a flush or FUA on one connection covers writes completed on every connection
    /// (`NBD_FLAG_CAN_MULTI_CONN`).
    fn can_multi_conn(&self) -> bool {
        false
    }

    /// Bytes of the write unit that costs least when written whole (a parity array's full
    /// stripe), or 0. When it is not 0 the server gathers a write and the contiguous writes
    /// queued right behind it on the same connection into one [`Export::write_at`], up to the
    /// end of such a unit, as the kernel's block layer merges requests before md sees them.
    fn write_gather_bytes(&self) -> u64 {
        0
    }

    /// Fills `buf` with the bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;

    /// Writes `data` at `offset`; with `fua`, returns only once the data is durable.
    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()>;

    /// Makes every completed write durable.
    fn flush(&self) -> io::Result<()>;

    /// Hint that the range is no longer needed; its contents become unspecified.
    fn trim(&self, offset: u64, len_bytes: u64, fua: bool) -> io::Result<()> {
        let _ = (offset, len_bytes, fua);
        Ok(())
    }

    /// Makes the range read back as zeroes. With `may_trim` false (`NBD_CMD_FLAG_NO_HOLE`),
    /// the range must stay provisioned.
    fn write_zeroes(
        &self,
        offset: u64,
        len_bytes: u64,
        fua: bool,
        may_trim: bool,
    ) -> io::Result<()> {
        let _ = may_trim;
        write_zeroes_by_writing(self, offset, len_bytes, fua)
    }
}

/// Zeroes a range with plain writes from a small buffer of zeroes (bounded memory).
pub fn write_zeroes_by_writing<E: Export + ?Sized>(
    export: &E,
    offset: u64,
    len_bytes: u64,
    fua: bool,
) -> io::Result<()> {
    const ZERO_CHUNK_BYTES: usize = 1 << 20;
    let zeroes = vec![0u8; ZERO_CHUNK_BYTES.min(len_bytes as usize)];
    let mut done = 0u64;
    while done < len_bytes {
        let n = (len_bytes - done).min(zeroes.len() as u64) as usize;
        export.write_at(offset + done, &zeroes[..n], false)?;
        done += n as u64;
    }
    if fua {
        export.flush()?;
    }
    Ok(())
}

impl<E: Export + ?Sized> Export for Arc<E> {
    fn size_bytes(&self) -> u64 {
        (**self).size_bytes()
    }
    fn block_size(&self) -> BlockSize {
        (**self).block_size()
    }
    fn description(&self) -> Option<String> {
        (**self).description()
    }
    fn read_only(&self) -> bool {
        (**self).read_only()
    }
    fn can_flush(&self) -> bool {
        (**self).can_flush()
    }
    fn can_fua(&self) -> bool {
        (**self).can_fua()
    }
    fn can_trim(&self) -> bool {
        (**self).can_trim()
    }
    fn can_zero(&self) -> bool {
        (**self).can_zero()
    }
    fn can_multi_conn(&self) -> bool {
        (**self).can_multi_conn()
    }
    fn write_gather_bytes(&self) -> u64 {
        (**self).write_gather_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        (**self).write_at(offset, data, fua)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn trim(&self, offset: u64, len_bytes: u64, fua: bool) -> io::Result<()> {
        (**self).trim(offset, len_bytes, fua)
    }
    fn write_zeroes(
        &self,
        offset: u64,
        len_bytes: u64,
        fua: bool,
        may_trim: bool,
    ) -> io::Result<()> {
        (**self).write_zeroes(offset, len_bytes, fua, may_trim)
    }
}

/// Serves any export read-only: a wrapper rather than a flag inside each export, so the
/// server (and the CLI's `--read-only`) can apply it to arrays, files and memory alike.
pub struct ReadOnly<E: ?Sized>(pub Arc<E>);

impl<E: Export + ?Sized> Export for ReadOnly<E> {
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn block_size(&self) -> BlockSize {
        self.0.block_size()
    }
    fn description(&self) -> Option<String> {
        self.0.description()
    }
    fn read_only(&self) -> bool {
        true
    }
    fn can_flush(&self) -> bool {
        self.0.can_flush()
    }
    fn can_fua(&self) -> bool {
        false
    }
    fn can_multi_conn(&self) -> bool {
        self.0.can_multi_conn()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, _offset: u64, _data: &[u8], _fua: bool) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EROFS))
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, _offset: u64, _len_bytes: u64, _fua: bool) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EROFS))
    }
    fn write_zeroes(&self, _: u64, _: u64, _: bool, _: bool) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EROFS))
    }
}

fn out_of_range() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

fn check_range(size_bytes: u64, offset: u64, len_bytes: u64) -> io::Result<()> {
    match offset.checked_add(len_bytes) {
        Some(end) if end <= size_bytes => Ok(()),
        _ => Err(out_of_range()),
    }
}

/// Bytes per page of a [`MemoryExport`]: pages are allocated on first write, so an untouched
/// export costs only its page table (one lock and pointer per page).
pub const MEMORY_PAGE_BYTES: u64 = 256 << 10;

/// A sparse in-memory export. Pages are allocated on first write and freed by trim or
/// whole-page zeroing; each page has its own lock, so connections touching different pages
/// never contend. Memory is volatile, so flush is a no-op and multi-connection is safe.
pub struct MemoryExport {
    size_bytes: u64,
    pages: Vec<RwLock<Option<Box<[u8]>>>>,
    block_size: BlockSize,
    read_only: bool,
}

impl MemoryExport {
    /// A zero-filled export of `size_bytes` (rounded up to nothing: the size is exact).
    pub fn new(size_bytes: u64) -> Self {
        let pages = size_bytes.div_ceil(MEMORY_PAGE_BYTES) as usize;
        MemoryExport {
            size_bytes,
            pages: (0..pages).map(|_| RwLock::new(None)).collect(),
            block_size: BlockSize::default(),
            read_only: false,
        }
    }

    /// Replaces the advertised size constraints.
    pub fn with_block_size(mut self, block_size: BlockSize) -> Result<Self, BlockSizeError> {
        block_size.validate()?;
        self.block_size = block_size;
        Ok(self)
    }

    /// Serves the export read-only.
    pub fn with_read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Bytes of page memory currently allocated.
    pub fn allocated_bytes(&self) -> u64 {
        self.pages
            .iter()
            .filter(|p| p.read().map(|g| g.is_some()).unwrap_or(true))
            .count() as u64
            * MEMORY_PAGE_BYTES
    }

    fn page_len(&self, index: usize) -> usize {
        let start = index as u64 * MEMORY_PAGE_BYTES;
        (self.size_bytes - start).min(MEMORY_PAGE_BYTES) as usize
    }

    /// Calls `f(page_index, offset_in_page, range_in_caller)` for each page piece of a range.
    fn for_each_piece(
        offset: u64,
        len_bytes: u64,
        mut f: impl FnMut(usize, usize, std::ops::Range<usize>) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut done = 0u64;
        while done < len_bytes {
            let pos = offset + done;
            let index = (pos / MEMORY_PAGE_BYTES) as usize;
            let in_page = (pos % MEMORY_PAGE_BYTES) as usize;
            let n = (len_bytes - done).min(MEMORY_PAGE_BYTES - in_page as u64) as usize;
            f(index, in_page, done as usize..done as usize + n)?;
            done += n as u64;
        }
        Ok(())
    }

    fn zero_range(&self, offset: u64, len_bytes: u64, may_free: bool) -> io::Result<()> {
        check_range(self.size_bytes, offset, len_bytes)?;
        let mut done = 0u64;
        while done < len_bytes {
            let pos = offset + done;
            let index = (pos / MEMORY_PAGE_BYTES) as usize;
            let in_page = (pos % MEMORY_PAGE_BYTES) as usize;
            let page_len = self.page_len(index);
            let n = (len_bytes - done).min((page_len - in_page) as u64) as usize;
            let mut guard = self.pages[index].write().unwrap_or_else(|e| e.into_inner());
            if in_page == 0 && n == page_len && may_free {
                *guard = None;
            } else if let Some(page) = guard.as_mut() {
                page[in_page..in_page + n].fill(0);
            }
            done += n as u64;
        }
        Ok(())
    }
}

impl Export for MemoryExport {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn block_size(&self) -> BlockSize {
        self.block_size
    }
    fn description(&self) -> Option<String> {
        Some(format!("memory export of {} bytes", self.size_bytes))
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn can_trim(&self) -> bool {
        true
    }
    fn can_zero(&self) -> bool {
        true
    }
    fn can_multi_conn(&self) -> bool {
        true
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(self.size_bytes, offset, buf.len() as u64)?;
        Self::for_each_piece(offset, buf.len() as u64, |index, in_page, range| {
            // A poisoned lock only means another thread panicked mid-copy; bytes stay bytes.
            let guard = self.pages[index].read().unwrap_or_else(|e| e.into_inner());
            match guard.as_ref() {
                Some(page) => {
                    buf[range.clone()].copy_from_slice(&page[in_page..in_page + range.len()])
                }
                None => buf[range].fill(0),
            }
            Ok(())
        })
    }

    fn write_at(&self, offset: u64, data: &[u8], _fua: bool) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        check_range(self.size_bytes, offset, data.len() as u64)?;
        Self::for_each_piece(offset, data.len() as u64, |index, in_page, range| {
            let mut guard = self.pages[index].write().unwrap_or_else(|e| e.into_inner());
            let page_len = self.page_len(index);
            let page = guard.get_or_insert_with(|| vec![0u8; page_len].into_boxed_slice());
            page[in_page..in_page + range.len()].copy_from_slice(&data[range]);
            Ok(())
        })
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn trim(&self, offset: u64, len_bytes: u64, _fua: bool) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        self.zero_range(offset, len_bytes, true)
    }

    fn write_zeroes(
        &self,
        offset: u64,
        len_bytes: u64,
        _fua: bool,
        may_trim: bool,
    ) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        self.zero_range(offset, len_bytes, may_trim)
    }
}

/// An export backed by an image file (or block device): `pread`/`pwrite` through the page
/// cache, `fdatasync` for flush and FUA, `fallocate` for trim and zeroing where the file
/// system supports it. The page cache is shared by all connections, so multi-connection is
/// safe.
pub struct FileExport {
    file: File,
    size_bytes: u64,
    block_size: BlockSize,
    read_only: bool,
}

impl FileExport {
    /// Opens `path` read-write (or read-only) and serves its current length.
    pub fn open(path: &Path, read_only: bool) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(!read_only).open(path)?;
        Self::from_file(file, read_only)
    }

    /// Serves an already open file. Block devices are sized by seeking to their end.
    pub fn from_file(file: File, read_only: bool) -> io::Result<Self> {
        let meta = file.metadata()?;
        let size_bytes = if meta.is_file() {
            meta.len()
        } else {
            use std::io::Seek;
            let mut f = &file;
            f.seek(io::SeekFrom::End(0))?
        };
        Ok(FileExport {
            file,
            size_bytes,
            block_size: BlockSize::default(),
            read_only,
        })
    }

    /// Replaces the advertised size constraints.
    pub fn with_block_size(mut self, block_size: BlockSize) -> Result<Self, BlockSizeError> {
        block_size.validate()?;
        self.block_size = block_size;
        Ok(self)
    }

    fn fallocate(&self, mode: libc::c_int, offset: u64, len_bytes: u64) -> io::Result<()> {
        // SAFETY: plain syscall on a file descriptor we own; no memory is passed.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                mode,
                offset as libc::off_t,
                len_bytes as libc::off_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

fn unsupported(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL) | Some(libc::ENODEV)
    )
}

impl Export for FileExport {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn block_size(&self) -> BlockSize {
        self.block_size
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn can_trim(&self) -> bool {
        !self.read_only
    }
    fn can_zero(&self) -> bool {
        !self.read_only
    }
    fn can_multi_conn(&self) -> bool {
        true
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(self.size_bytes, offset, buf.len() as u64)?;
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        check_range(self.size_bytes, offset, data.len() as u64)?;
        self.file.write_all_at(data, offset)?;
        if fua {
            self.file.sync_data()?;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.file.sync_data()
    }

    fn trim(&self, offset: u64, len_bytes: u64, fua: bool) -> io::Result<()> {
        check_range(self.size_bytes, offset, len_bytes)?;
        match self.fallocate(
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len_bytes,
        ) {
            // Trim is advisory: a file system that cannot punch holes simply keeps the data.
            Err(e) if unsupported(&e) => return Ok(()),
            other => other?,
        }
        if fua {
            self.file.sync_data()?;
        }
        Ok(())
    }

    fn write_zeroes(
        &self,
        offset: u64,
        len_bytes: u64,
        fua: bool,
        may_trim: bool,
    ) -> io::Result<()> {
        check_range(self.size_bytes, offset, len_bytes)?;
        if len_bytes == 0 {
            return Ok(());
        }
        let mode = if may_trim {
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
        } else {
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE
        };
        match self.fallocate(mode, offset, len_bytes) {
            Ok(()) => {
                if fua {
                    self.file.sync_data()?;
                }
                Ok(())
            }
            Err(e) if unsupported(&e) => write_zeroes_by_writing(self, offset, len_bytes, fua),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_rules() {
        assert!(BlockSize::default().validate().is_ok());
        let bad_min = BlockSize {
            minimum_bytes: 3,
            ..BlockSize::default()
        };
        assert_eq!(bad_min.validate(), Err(BlockSizeError::Minimum(3)));
        let bad_pref = BlockSize {
            minimum_bytes: 4096,
            preferred_bytes: 512,
            maximum_payload_bytes: 1 << 20,
        };
        assert_eq!(bad_pref.validate(), Err(BlockSizeError::Preferred(512)));
        let bad_max = BlockSize {
            maximum_payload_bytes: 1024,
            ..BlockSize::default()
        };
        assert_eq!(bad_max.validate(), Err(BlockSizeError::Maximum(1024)));
    }

    fn exercise(export: &dyn Export) {
        let size = export.size_bytes();
        let pattern: Vec<u8> = (0..3 * MEMORY_PAGE_BYTES as usize / 2)
            .map(|i| (i * 7 + 3) as u8)
            .collect();
        // Straddles a page boundary.
        let offset = MEMORY_PAGE_BYTES / 2;
        export.write_at(offset, &pattern, false).unwrap();
        let mut back = vec![0u8; pattern.len()];
        export.read_at(offset, &mut back).unwrap();
        assert_eq!(back, pattern);
        // Untouched bytes read as zero.
        let mut head = vec![1u8; 512];
        export.read_at(0, &mut head).unwrap();
        assert!(head.iter().all(|&b| b == 0));
        // Zeroing in the middle, keeping provisioned.
        export
            .write_zeroes(offset + 4096, 8192, false, false)
            .unwrap();
        export.read_at(offset, &mut back).unwrap();
        assert!(back[4096..4096 + 8192].iter().all(|&b| b == 0));
        assert_eq!(&back[..4096], &pattern[..4096]);
        assert_eq!(&back[4096 + 8192..], &pattern[4096 + 8192..]);
        // Zeroing with holes allowed over whole pages.
        export
            .write_zeroes(0, 2 * MEMORY_PAGE_BYTES, false, true)
            .unwrap();
        export.read_at(offset, &mut back).unwrap();
        assert!(back[..(3 * MEMORY_PAGE_BYTES / 2) as usize]
            .iter()
            .all(|&b| b == 0));
        // Range checks are the export's last line of defence.
        let mut one = [0u8; 1];
        assert!(export.read_at(size, &mut one).is_err());
        assert!(export.write_at(u64::MAX, &one, false).is_err());
        export.flush().unwrap();
    }

    #[test]
    fn memory_export_round_trip() {
        let export = MemoryExport::new(4 * MEMORY_PAGE_BYTES + 512);
        exercise(&export);
        assert!(export.allocated_bytes() <= 4 * MEMORY_PAGE_BYTES + MEMORY_PAGE_BYTES);
        // The last, short page works.
        let tail_offset = 4 * MEMORY_PAGE_BYTES;
        export.write_at(tail_offset, &[9u8; 512], false).unwrap();
        let mut tail = [0u8; 512];
        export.read_at(tail_offset, &mut tail).unwrap();
        assert_eq!(tail, [9u8; 512]);
        export.trim(0, export.size_bytes(), false).unwrap();
        assert_eq!(export.allocated_bytes(), 0);
    }

    #[test]
    fn read_only_wrapper_refuses_writes_and_forwards_reads() {
        let inner = Arc::new(MemoryExport::new(1 << 20));
        inner.write_at(0, &[5u8; 512], false).unwrap();
        let ro = ReadOnly(inner.clone());
        assert!(ro.read_only() && !ro.can_fua());
        assert!(ro.write_at(0, &[1u8; 512], false).is_err());
        assert!(ro.trim(0, 512, false).is_err());
        assert!(ro.write_zeroes(0, 512, false, true).is_err());
        let mut back = [0u8; 512];
        ro.read_at(0, &mut back).unwrap();
        assert_eq!(back, [5u8; 512]);
        assert_eq!(ro.size_bytes(), 1 << 20);
    }

    #[test]
    fn memory_export_read_only_refuses_writes() {
        let export = MemoryExport::new(1 << 20).with_read_only(true);
        assert!(export.write_at(0, &[1u8; 512], false).is_err());
        assert!(export.trim(0, 512, false).is_err());
    }

    #[test]
    fn file_export_round_trip() {
        let dir = std::env::temp_dir().join(format!("raidkit-nbd-export-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("image");
        let file = File::create(&path).unwrap();
        file.set_len(4 * MEMORY_PAGE_BYTES).unwrap();
        drop(file);
        let export = FileExport::open(&path, false).unwrap();
        assert_eq!(export.size_bytes(), 4 * MEMORY_PAGE_BYTES);
        exercise(&export);
        export.trim(0, 4096, true).unwrap();
        let ro = FileExport::open(&path, true).unwrap();
        assert!(ro.read_only());
        assert!(ro.write_at(0, &[1u8; 512], false).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
