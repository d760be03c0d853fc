//! raidkit-disk: the narrow `Disk` trait that the array engine drives, and its real backends.
//!
//! Owns: byte-addressed positional I/O on one member (image file, block device or memory), its
//! flush, discard and write-zeroes, and the errors that name the member. Invariants: every call
//! is positional (no shared cursor), so one `Disk` is used from many threads at once (`Send +
//! Sync`); a request outside `size_bytes()` is an error, never a short read or a silent extension;
//! a read-only disk refuses every mutation before touching the backing store.
//!
//! Backends:
//! - [`FileDisk`]: regular files and block devices through `pread`/`pwrite`. Block devices are
//!   opened with `O_DIRECT` where the kernel accepts it and fall back to buffered I/O where it is
//!   refused (tmpfs, some filesystems); with `O_DIRECT`, unaligned requests go through an
//!   [`AlignedBuf`] bounce buffer so callers never have to care (a write reads only the
//!   blocks it covers in part: an unaligned buffer alone costs a copy, not a read). Long-lived users may ask for
//!   a fully allocated image file on tmpfs to be mapped into memory, which makes its I/O
//!   a memory copy (see `mapped.rs` for how a page that vanishes under the mapping is survived).
//!   Every open takes a claim on the member ([`Claim`], see `claim.rs`): exclusive for
//!   writing, shared for reading, so two processes never change one member at once.
//! - [`MemDisk`]: memory, a cheap cloneable handle (clones share the bytes), for tests and
//!   simulation.
//! - [`EmuDisk`]: an emulated hard disk or SSD from the catalog (`emu:hds72101:1G`): data in
//!   memory or a sparse image file, each request delayed in real time by the drive's
//!   mechanics, optionally behind a shared controller or link ceiling (see `emu/`).
//!
//! Wrappers that change one or two methods of a disk beneath (fault injection, counting, a
//! crash) implement [`DiskWrapper`], which forwards everything they do not write; `Box<D>` and
//! `Arc<D>` are disks through it.

mod aligned;
mod claim;
mod counted;
pub mod emu;
mod error;
mod file;
pub mod health;
mod mapped;
mod mem;
mod size;

pub use aligned::AlignedBuf;
pub use claim::{Claim, Holder};
pub use counted::{mono_ns, Counted, IoCounters, IoDir, IoRates, IoSnapshot};
pub use emu::{EmuDisk, EmuProbe};
pub use error::{DiskError, DiskErrorKind};
pub use file::{allocate_in_full, sparse_growth, DirectIo, FileDisk, OpenOptions, SparseGrowth};
pub use health::{DriveHealth, Health, HealthWarning, Thresholds, WarningKind};
pub use mem::MemDisk;
pub use size::parse_size;

use std::fmt;
use std::io::{IoSlice, IoSliceMut};

/// One member device as the engine sees it.
///
/// All offsets and lengths are in bytes. Implementations must be safe to call from many threads
/// at once; ordering between concurrent calls on overlapping ranges is not defined (as on a disk).
pub trait Disk: Send + Sync + fmt::Debug {
    /// Reads exactly `buf.len()` bytes at `offset_bytes`.
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError>;
    /// Writes all of `buf` at `offset_bytes`. Durable only after a later [`Disk::flush`].
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError>;
    /// Makes every completed write durable (fdatasync).
    fn flush(&self) -> Result<(), DiskError>;
    /// Writes all of `buf` at `offset_bytes`, durable when it returns, as a write with FUA
    /// (force unit access): other writes still in the device's cache need not be. md writes
    /// its partial parity log headers this way. The default writes, then flushes everything.
    fn write_fua(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.write_at(buf, offset_bytes)?;
        self.flush()
    }
    /// Reads `bufs.len()` pieces that lie one after the other on the device from
    /// `offset_bytes` on, into buffers that need not lie one after the other in memory: one
    /// command (`preadv`) where the device takes one, as the block layer sends a request's
    /// segments. The default reads the pieces one by one. The list itself may be left
    /// advanced past what was done (as `Write::write_all_vectored` leaves its list): a
    /// caller that needs the pieces' length takes it first.
    fn read_vectored_at(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        read_pieces(bufs, offset_bytes, |b, at| self.read_at(b, at))
    }
    /// Writes pieces that follow each other on the device from `offset_bytes` on (see
    /// [`Disk::read_vectored_at`], also for the list being left advanced); `pwritev` where
    /// the device takes one command. The default writes the pieces one by one.
    fn write_vectored_at(
        &self,
        bufs: &mut [IoSlice<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        write_pieces(bufs, offset_bytes, |b, at| self.write_at(b, at))
    }
    /// Tells the device the range is unused. Afterwards the range reads as zeroes on every
    /// backend here (hole punching, or explicit zeroes where punching is not supported), so the
    /// engine may rely on it for parity.
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError>;
    /// Makes the range read as zeroes.
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError>;
    /// Usable size in bytes.
    fn size_bytes(&self) -> u64;
    /// Smallest unit the device addresses (512 or 4096); superblocks are written in these units.
    fn logical_block_size(&self) -> u32;
    /// The member's name for messages (its path for files).
    fn name(&self) -> &str;
    /// True when opened read-only: every mutation fails with [`DiskErrorKind::ReadOnly`].
    fn is_read_only(&self) -> bool;
    /// Makes sure a later write of the range cannot fail for want of space: a sparse image
    /// file gets the blocks allocated now, so that a full filesystem is found (as
    /// [`DiskErrorKind::NoSpace`]) before anything is written rather than half-way through a
    /// stripe. Devices whose every block exists already do nothing (the default).
    fn reserve(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        let _ = (offset_bytes, len_bytes);
        Ok(())
    }
    /// True for a spinning disk, where a request's cost depends on where the head is (the
    /// kernel's `queue/rotational`, or the emulated drive's model): mirror reads then go
    /// where the head is cheapest. False (the default) for memory, SSDs and unknown devices.
    fn is_rotational(&self) -> bool {
        false
    }
    /// True when [`Disk::write_zeroes`] costs next to nothing however long the range: an
    /// image file (a hole or a zeroed extent, no data written) or a block device that offloads
    /// zeroing (the kernel's `queue/write_zeroes_max_bytes`: a loop device, NVMe's Write
    /// Zeroes). Create's fast initialisation relies on it. False (the default) where zeroing
    /// means writing every byte: a hard disk, an emulated drive, unknown devices.
    fn zeroes_cheaply(&self) -> bool {
        false
    }
    /// What the member's drive says about its health (SMART; see [`health`]). The default:
    /// no drive of its own to ask (memory, a network member).
    fn health(&self) -> Health {
        Health::no_drive("memory or a network member")
    }
}

/// Checks that `[offset, offset+len)` lies inside a disk of `size` bytes (the error names
/// the member, the operation and the sizes).
pub fn check_range(
    name: &str,
    op: &'static str,
    offset_bytes: u64,
    len_bytes: u64,
    size_bytes: u64,
) -> Result<(), DiskError> {
    match offset_bytes.checked_add(len_bytes) {
        Some(end) if end <= size_bytes => Ok(()),
        _ => Err(DiskError::new(
            name,
            op,
            offset_bytes,
            DiskErrorKind::OutOfRange {
                len_bytes,
                size_bytes,
            },
        )),
    }
}

/// Reads vectored pieces one by one with `read` (buffer, device offset): the default of
/// [`Disk::read_vectored_at`].
pub fn read_pieces(
    bufs: &mut [IoSliceMut<'_>],
    offset_bytes: u64,
    mut read: impl FnMut(&mut [u8], u64) -> Result<(), DiskError>,
) -> Result<(), DiskError> {
    let mut at = offset_bytes;
    for b in bufs.iter_mut() {
        read(b, at)?;
        at += b.len() as u64;
    }
    Ok(())
}

/// Writes vectored pieces one by one with `write`: the default of
/// [`Disk::write_vectored_at`].
pub fn write_pieces(
    bufs: &mut [IoSlice<'_>],
    offset_bytes: u64,
    mut write: impl FnMut(&[u8], u64) -> Result<(), DiskError>,
) -> Result<(), DiskError> {
    let mut at = offset_bytes;
    for b in bufs {
        write(b, at)?;
        at += b.len() as u64;
    }
    Ok(())
}

/// A vectored read as one read of the whole range into a buffer of the calling thread's,
/// then copied to the pieces: for devices where one request costs a round trip or a
/// stripe's planning (an NBD export, an array beneath another) and a copy costs less. One
/// piece is read in place.
pub fn read_gathered(
    bufs: &mut [IoSliceMut<'_>],
    offset_bytes: u64,
    read: impl Fn(&mut [u8], u64) -> Result<(), DiskError>,
) -> Result<(), DiskError> {
    if bufs.len() < 2 {
        return read_pieces(bufs, offset_bytes, read);
    }
    with_gather(pieces_len(bufs) as usize, |whole| {
        read(whole, offset_bytes)?;
        let mut at = 0;
        for b in bufs.iter_mut() {
            let n = b.len();
            b.copy_from_slice(&whole[at..at + n]);
            at += n;
        }
        Ok(())
    })
}

/// A vectored write as one write of the pieces gathered in a buffer of the calling thread's
/// (see [`read_gathered`]). One piece is written in place.
pub fn write_gathered(
    bufs: &mut [IoSlice<'_>],
    offset_bytes: u64,
    write: impl Fn(&[u8], u64) -> Result<(), DiskError>,
) -> Result<(), DiskError> {
    if bufs.len() < 2 {
        return write_pieces(bufs, offset_bytes, write);
    }
    with_gather(pieces_len(bufs) as usize, |whole| {
        let mut at = 0;
        for b in bufs {
            whole[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
        write(whole, offset_bytes)
    })
}

/// Runs `f` on `len` bytes kept by the calling thread from one call to the next (a member
/// worker gathers each command's pieces there without allocating each time).
fn with_gather<T>(len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
    thread_local! {
        static GATHER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    GATHER.with(|g| match g.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            f(&mut buf[..len])
        }
        // Re-entered on this thread (an array over an array): a buffer of its own.
        Err(_) => f(&mut vec![0u8; len]),
    })
}

/// Total bytes of vectored pieces.
pub fn pieces_len(bufs: &[impl std::ops::Deref<Target = [u8]>]) -> u64 {
    bufs.iter().map(|b| b.len() as u64).sum()
}

/// A disk that wraps another and changes only some of what it does: fault injection, a
/// crash that drops writes, counting, a read that fails in a bad patch.
///
/// Every method of [`Disk`] has a default here that forwards to [`DiskWrapper::inner`], and
/// every `DiskWrapper` is a `Disk` (a blanket impl below), so a wrapper writes `inner` and the
/// methods it changes, nothing else. A hand-written forwarder had to repeat every method and
/// could silently miss one that has a default in `Disk` ([`Disk::reserve`]: the default does
/// nothing, so a wrapper that forgot it stopped reserving space on the disk beneath); here the
/// forward is the default. `Box<D>` and `Arc<D>` are wrappers too.
///
/// The forwarding is static: `Inner` is a type, not `dyn Disk`, unless the wrapper holds a
/// `Box<dyn Disk>` (then `type Inner = dyn Disk` and the one virtual call is the one it already
/// had), and the defaults are `#[inline]`, so a wrapper costs the engine's per-I/O path nothing
/// over a hand-written one.
///
/// Implement it by its path (`impl raidkit_disk::DiskWrapper for X`) rather than importing
/// it: its methods share `Disk`'s names, and with both traits in scope a call such as
/// `x.read_at(..)` on a wrapper is ambiguous (a compile error, not a wrong call). Inside the
/// impl, reach the disk beneath through `self.inner()`; when that is itself a wrapper (the
/// trait is in scope inside its own impl), name the trait: `Disk::read_at(self.inner(), ..)`.
///
/// A method added to `Disk` gets a forwarding default here, a line in the blanket impl, and
/// a line in the test `a_wrapper_forwards_every_method`. Vectored reads and writes are the
/// exception: their default goes piece by piece through the wrapper's own `read_at` and
/// `write_at`, so that a wrapper that changes those (faults, a crash) is never passed by
/// one; a wrapper that leaves them alone forwards the vectored call (`Box`, `Arc`, the
/// counters, the emulated drive).
pub trait DiskWrapper: Send + Sync + fmt::Debug {
    /// The disk beneath (`dyn Disk` for a boxed one).
    type Inner: Disk + ?Sized;

    /// The disk every method not written here goes to.
    fn inner(&self) -> &Self::Inner;

    #[inline]
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.inner().read_at(buf, offset_bytes)
    }
    #[inline]
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.inner().write_at(buf, offset_bytes)
    }
    #[inline]
    fn flush(&self) -> Result<(), DiskError> {
        self.inner().flush()
    }
    #[inline]
    fn write_fua(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        self.inner().write_fua(buf, offset_bytes)
    }
    /// Piece by piece through this wrapper's own `read_at` (not forwarded: a wrapper that
    /// changes reads must not be passed by a vectored one). A wrapper that leaves reads alone
    /// forwards it with [`DiskWrapper::forward_read_vectored`].
    #[inline]
    fn read_vectored_at(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        read_pieces(bufs, offset_bytes, |b, at| {
            DiskWrapper::read_at(self, b, at)
        })
    }
    /// Piece by piece through this wrapper's own `write_at` (see `read_vectored_at`).
    #[inline]
    fn write_vectored_at(
        &self,
        bufs: &mut [IoSlice<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        write_pieces(bufs, offset_bytes, |b, at| {
            DiskWrapper::write_at(self, b, at)
        })
    }
    /// The disk beneath's vectored read, for wrappers that leave reads alone.
    #[inline]
    fn forward_read_vectored(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        self.inner().read_vectored_at(bufs, offset_bytes)
    }
    /// The disk beneath's vectored write, for wrappers that leave writes alone.
    #[inline]
    fn forward_write_vectored(
        &self,
        bufs: &mut [IoSlice<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        self.inner().write_vectored_at(bufs, offset_bytes)
    }
    #[inline]
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.inner().discard(offset_bytes, len_bytes)
    }
    #[inline]
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.inner().write_zeroes(offset_bytes, len_bytes)
    }
    #[inline]
    fn size_bytes(&self) -> u64 {
        self.inner().size_bytes()
    }
    #[inline]
    fn logical_block_size(&self) -> u32 {
        self.inner().logical_block_size()
    }
    #[inline]
    fn name(&self) -> &str {
        self.inner().name()
    }
    #[inline]
    fn is_read_only(&self) -> bool {
        self.inner().is_read_only()
    }
    #[inline]
    fn reserve(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        self.inner().reserve(offset_bytes, len_bytes)
    }
    #[inline]
    fn is_rotational(&self) -> bool {
        self.inner().is_rotational()
    }
    #[inline]
    fn zeroes_cheaply(&self) -> bool {
        self.inner().zeroes_cheaply()
    }
    #[inline]
    fn health(&self) -> Health {
        self.inner().health()
    }
}

/// Every wrapper is a disk: each method is the wrapper's (its own or the forwarding default).
impl<W: DiskWrapper> Disk for W {
    #[inline]
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        DiskWrapper::read_at(self, buf, offset_bytes)
    }
    #[inline]
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        DiskWrapper::write_at(self, buf, offset_bytes)
    }
    #[inline]
    fn flush(&self) -> Result<(), DiskError> {
        DiskWrapper::flush(self)
    }
    #[inline]
    fn write_fua(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        DiskWrapper::write_fua(self, buf, offset_bytes)
    }
    #[inline]
    fn read_vectored_at(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        DiskWrapper::read_vectored_at(self, bufs, offset_bytes)
    }
    #[inline]
    fn write_vectored_at(
        &self,
        bufs: &mut [IoSlice<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        DiskWrapper::write_vectored_at(self, bufs, offset_bytes)
    }
    #[inline]
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        DiskWrapper::discard(self, offset_bytes, len_bytes)
    }
    #[inline]
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        DiskWrapper::write_zeroes(self, offset_bytes, len_bytes)
    }
    #[inline]
    fn size_bytes(&self) -> u64 {
        DiskWrapper::size_bytes(self)
    }
    #[inline]
    fn logical_block_size(&self) -> u32 {
        DiskWrapper::logical_block_size(self)
    }
    #[inline]
    fn name(&self) -> &str {
        DiskWrapper::name(self)
    }
    #[inline]
    fn is_read_only(&self) -> bool {
        DiskWrapper::is_read_only(self)
    }
    #[inline]
    fn reserve(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        DiskWrapper::reserve(self, offset_bytes, len_bytes)
    }
    #[inline]
    fn is_rotational(&self) -> bool {
        DiskWrapper::is_rotational(self)
    }
    #[inline]
    fn zeroes_cheaply(&self) -> bool {
        DiskWrapper::zeroes_cheaply(self)
    }
    #[inline]
    fn health(&self) -> Health {
        DiskWrapper::health(self)
    }
}

/// `Box` and `Arc` of a disk are the disk: every call forwarded, vectored ones whole.
macro_rules! pointer_to_disk {
    ($($p:ident)::+) => {
        impl<D: Disk + ?Sized> DiskWrapper for $($p)::+<D> {
            type Inner = D;
            #[inline]
            fn inner(&self) -> &D {
                self
            }
            #[inline]
            fn read_vectored_at(
                &self,
                bufs: &mut [IoSliceMut<'_>],
                offset_bytes: u64,
            ) -> Result<(), DiskError> {
                self.forward_read_vectored(bufs, offset_bytes)
            }
            #[inline]
            fn write_vectored_at(
                &self,
                bufs: &mut [IoSlice<'_>],
                offset_bytes: u64,
            ) -> Result<(), DiskError> {
                self.forward_write_vectored(bufs, offset_bytes)
            }
        }
    };
}

pointer_to_disk!(Box);
pointer_to_disk!(std::sync::Arc);

#[cfg(test)]
mod tests {
    use super::{Disk, DiskError};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    /// Every method of `Disk`, in declaration order: the counting disk counts calls by index.
    const METHODS: [&str; 16] = [
        "read_at",
        "write_at",
        "flush",
        "write_fua",
        "read_vectored_at",
        "write_vectored_at",
        "discard",
        "write_zeroes",
        "size_bytes",
        "logical_block_size",
        "name",
        "is_read_only",
        "reserve",
        "is_rotational",
        "zeroes_cheaply",
        "health",
    ];

    /// A disk that counts calls of each method and answers with values no default would give.
    #[derive(Debug, Default)]
    struct Counting {
        calls: [AtomicU64; 16],
    }

    impl Counting {
        fn hit(&self, method: &str) {
            let i = METHODS.iter().position(|m| *m == method).unwrap();
            self.calls[i].fetch_add(1, Ordering::SeqCst);
        }
        fn counts(&self) -> Vec<(&'static str, u64)> {
            METHODS
                .iter()
                .zip(&self.calls)
                .map(|(m, c)| (*m, c.load(Ordering::SeqCst)))
                .collect()
        }
    }

    impl Disk for Counting {
        fn read_at(&self, _: &mut [u8], _: u64) -> Result<(), DiskError> {
            self.hit("read_at");
            Ok(())
        }
        fn write_at(&self, _: &[u8], _: u64) -> Result<(), DiskError> {
            self.hit("write_at");
            Ok(())
        }
        fn flush(&self) -> Result<(), DiskError> {
            self.hit("flush");
            Ok(())
        }
        fn write_fua(&self, _: &[u8], _: u64) -> Result<(), DiskError> {
            self.hit("write_fua");
            Ok(())
        }
        fn read_vectored_at(
            &self,
            _: &mut [std::io::IoSliceMut<'_>],
            _: u64,
        ) -> Result<(), DiskError> {
            self.hit("read_vectored_at");
            Ok(())
        }
        fn write_vectored_at(
            &self,
            _: &mut [std::io::IoSlice<'_>],
            _: u64,
        ) -> Result<(), DiskError> {
            self.hit("write_vectored_at");
            Ok(())
        }
        fn discard(&self, _: u64, _: u64) -> Result<(), DiskError> {
            self.hit("discard");
            Ok(())
        }
        fn write_zeroes(&self, _: u64, _: u64) -> Result<(), DiskError> {
            self.hit("write_zeroes");
            Ok(())
        }
        fn size_bytes(&self) -> u64 {
            self.hit("size_bytes");
            12345
        }
        fn logical_block_size(&self) -> u32 {
            self.hit("logical_block_size");
            4096
        }
        fn name(&self) -> &str {
            self.hit("name");
            "counting"
        }
        fn is_read_only(&self) -> bool {
            self.hit("is_read_only");
            true
        }
        fn reserve(&self, _: u64, _: u64) -> Result<(), DiskError> {
            self.hit("reserve");
            Ok(())
        }
        fn is_rotational(&self) -> bool {
            self.hit("is_rotational");
            true
        }
        fn zeroes_cheaply(&self) -> bool {
            self.hit("zeroes_cheaply");
            true
        }
        fn health(&self) -> super::Health {
            self.hit("health");
            super::Health::unavailable("counted")
        }
    }

    /// A wrapper that writes nothing but `inner`.
    #[derive(Debug)]
    struct Bare(Counting);

    impl super::DiskWrapper for Bare {
        type Inner = Counting;
        fn inner(&self) -> &Counting {
            &self.0
        }
    }

    /// Calls every method of `Disk` once on `disk`; checks the answers came from beneath.
    fn call_every_method(disk: &dyn Disk) {
        let mut buf = [0u8; 8];
        disk.read_at(&mut buf, 0).unwrap();
        disk.write_at(&buf, 0).unwrap();
        disk.flush().unwrap();
        disk.write_fua(&buf, 0).unwrap();
        let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
        let mut pieces = [
            std::io::IoSliceMut::new(&mut a),
            std::io::IoSliceMut::new(&mut b),
        ];
        disk.read_vectored_at(&mut pieces, 0).unwrap();
        disk.write_vectored_at(
            &mut [
                std::io::IoSlice::new(&buf[..4]),
                std::io::IoSlice::new(&buf[4..]),
            ],
            0,
        )
        .unwrap();
        disk.discard(0, 8).unwrap();
        disk.write_zeroes(0, 8).unwrap();
        assert_eq!(disk.size_bytes(), 12345);
        assert_eq!(disk.logical_block_size(), 4096);
        assert_eq!(disk.name(), "counting");
        assert!(disk.is_read_only());
        disk.reserve(0, 8).unwrap();
        assert!(disk.is_rotational());
        assert!(disk.zeroes_cheaply());
        assert_eq!(disk.health(), super::Health::unavailable("counted"));
    }

    /// Every method once, except that a plain wrapper takes a vectored read or write of two
    /// pieces as two calls of its own `read_at` or `write_at`.
    fn by_pieces(times: u64) -> Vec<(&'static str, u64)> {
        METHODS
            .iter()
            .map(|m| match *m {
                "read_at" | "write_at" => (*m, 3 * times),
                "read_vectored_at" | "write_vectored_at" => (*m, 0),
                _ => (*m, times),
            })
            .collect()
    }

    #[test]
    fn a_wrapper_forwards_every_method() {
        let bare = Bare(Counting::default());
        call_every_method(&bare);
        assert_eq!(bare.0.counts(), by_pieces(1));

        // Box and Arc forward vectored calls whole.
        let arc = Arc::new(Counting::default());
        call_every_method(&arc);
        let boxed: Box<dyn Disk> = Box::new(arc.clone());
        call_every_method(&boxed);
        let twice: Vec<_> = METHODS.iter().map(|m| (*m, 2)).collect();
        assert_eq!(arc.counts(), twice);

        let nested = Box::new(Bare(Counting::default()));
        call_every_method(&nested);
        assert_eq!(nested.0.counts(), by_pieces(1));
    }

    /// A wrapper that changes writes sees a vectored write's pieces (it is not passed).
    #[test]
    fn a_vectored_write_goes_through_the_wrappers_own_write() {
        #[derive(Debug)]
        struct Dropping(Bare, AtomicU64);
        impl super::DiskWrapper for Dropping {
            type Inner = Bare;
            fn inner(&self) -> &Bare {
                &self.0
            }
            fn write_at(&self, b: &[u8], _: u64) -> Result<(), DiskError> {
                self.1.fetch_add(b.len() as u64, Ordering::SeqCst);
                Ok(())
            }
        }
        let d = Dropping(Bare(Counting::default()), AtomicU64::new(0));
        let (a, b) = ([1u8; 3], [2u8; 5]);
        d.write_vectored_at(
            &mut [std::io::IoSlice::new(&a), std::io::IoSlice::new(&b)],
            0,
        )
        .unwrap();
        assert_eq!(d.1.load(Ordering::SeqCst), 8);
        assert!((d.0).0.counts().iter().all(|c| c.1 == 0));
    }

    /// A wrapper changes what it writes (the disk beneath never sees that call) and forwards
    /// the rest.
    #[test]
    fn a_wrapper_overrides_only_what_it_writes() {
        #[derive(Debug)]
        struct Smaller(Bare);
        impl super::DiskWrapper for Smaller {
            type Inner = Bare;
            fn inner(&self) -> &Bare {
                &self.0
            }
            fn size_bytes(&self) -> u64 {
                // The disk beneath is a wrapper too: say which trait's method.
                Disk::size_bytes(self.inner()) / 2 - 1
            }
            fn write_at(&self, _: &[u8], _: u64) -> Result<(), DiskError> {
                Ok(())
            }
        }
        let s = Smaller(Bare(Counting::default()));
        assert_eq!(s.size_bytes(), 6171);
        s.write_at(&[7u8; 512], 1024).unwrap();
        assert_eq!(s.name(), "counting");
        s.reserve(0, 512).unwrap();
        let counts = (s.0).0.counts();
        let called: Vec<&str> = counts.iter().filter(|c| c.1 > 0).map(|c| c.0).collect();
        assert_eq!(called, ["size_bytes", "name", "reserve"]);
    }
}
