//! Errors of one member: what went wrong, on which member, doing what, where.

use crate::Holder;
use std::fmt;
use std::io;

/// What kind of failure a [`DiskError`] is.
#[derive(Debug)]
pub enum DiskErrorKind {
    /// The operating system reported an error.
    Io(io::Error),
    /// The request reaches past the end of the disk.
    OutOfRange { len_bytes: u64, size_bytes: u64 },
    /// The disk was opened read-only and the request would change it.
    ReadOnly,
    /// The path names neither a regular file nor a block device.
    NotADisk,
    /// Someone else holds the member ([`crate::Claim`]): for writing, or at all when
    /// `exclusive` (we wanted to write).
    Claimed { exclusive: bool, holder: Holder },
    /// The filesystem that holds the member (an image file) is full, or the user's quota
    /// on it is used up: not a fault of the member, and writing works again once there is
    /// room.
    NoSpace {
        /// Where the filesystem is mounted, and its type ("/mnt/small (ext4)").
        filesystem: String,
        /// Bytes still free on it for this user, when known.
        free_bytes: Option<u64>,
        /// EDQUOT rather than ENOSPC.
        quota: bool,
    },
    /// A member spelled in a form that names no device raidkit can open (an emulated
    /// drive not in the catalog, a bad option), with what was wrong.
    BadSpec(String),
}

/// An error on one member, naming it.
#[derive(Debug)]
pub struct DiskError {
    /// The member's name (its path for files).
    pub member: String,
    /// The operation: "read", "write", "flush", "discard", "write-zeroes", "open", "create".
    pub op: &'static str,
    /// Byte offset of the request (0 when not applicable).
    pub offset_bytes: u64,
    pub kind: DiskErrorKind,
}

impl DiskError {
    /// True for a full filesystem or quota ([`DiskErrorKind::NoSpace`]).
    pub fn is_no_space(&self) -> bool {
        matches!(self.kind, DiskErrorKind::NoSpace { .. })
    }

    pub fn new(member: &str, op: &'static str, offset_bytes: u64, kind: DiskErrorKind) -> Self {
        DiskError {
            member: member.to_string(),
            op,
            offset_bytes,
            kind,
        }
    }

    pub fn io(member: &str, op: &'static str, offset_bytes: u64, err: io::Error) -> Self {
        Self::new(member, op, offset_bytes, DiskErrorKind::Io(err))
    }
}

impl fmt::Display for DiskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            DiskErrorKind::Io(err) => write!(
                f,
                "{}: {} at byte {} failed: {}",
                self.member, self.op, self.offset_bytes, err
            ),
            DiskErrorKind::OutOfRange {
                len_bytes,
                size_bytes,
            } => write!(
                f,
                "{}: {} of {} bytes at byte {} reaches past the end of the member ({} bytes)",
                self.member, self.op, len_bytes, self.offset_bytes, size_bytes
            ),
            DiskErrorKind::ReadOnly => write!(
                f,
                "{}: {} refused: the member is open read-only",
                self.member, self.op
            ),
            DiskErrorKind::NotADisk => {
                write!(f, "{}: not a regular file or block device", self.member)
            }
            DiskErrorKind::BadSpec(why) => write!(f, "{}: {why}", self.member),
            DiskErrorKind::Claimed {
                exclusive: true,
                holder,
            } => write!(
                f,
                "{}: in use by {holder}; a member is changed by one process at a time, so nothing was done",
                self.member
            ),
            DiskErrorKind::NoSpace {
                filesystem,
                free_bytes,
                quota,
            } => write!(
                f,
                "{}: {} at byte {} failed: {} on its filesystem, {filesystem}{}; the member is fine, and writing works again once there is room",
                self.member,
                self.op,
                self.offset_bytes,
                if *quota { "disk quota exceeded" } else { "no space left" },
                free_bytes
                    .map(|b| format!(" ({b} bytes free)"))
                    .unwrap_or_default()
            ),
            DiskErrorKind::Claimed {
                exclusive: false,
                holder,
            } => write!(
                f,
                "{}: in use by {holder}, which may be writing it; what it holds is in flux, so nothing was read",
                self.member
            ),
        }
    }
}

impl std::error::Error for DiskError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            DiskErrorKind::Io(err) => Some(err),
            _ => None,
        }
    }
}

impl From<DiskError> for io::Error {
    fn from(err: DiskError) -> io::Error {
        let kind = match &err.kind {
            DiskErrorKind::Io(e) => e.kind(),
            DiskErrorKind::OutOfRange { .. } => io::ErrorKind::InvalidInput,
            DiskErrorKind::ReadOnly => io::ErrorKind::PermissionDenied,
            DiskErrorKind::NotADisk | DiskErrorKind::BadSpec(_) => io::ErrorKind::InvalidInput,
            DiskErrorKind::Claimed { .. } => io::ErrorKind::ResourceBusy,
            // The errno itself, so that callers (the NBD server's NBD_ENOSPC) can tell.
            DiskErrorKind::NoSpace { quota, .. } => {
                let errno = if *quota { libc::EDQUOT } else { libc::ENOSPC };
                let os = io::Error::from_raw_os_error(errno);
                return io::Error::new(os.kind(), format!("{err} ({os})"));
            }
        };
        io::Error::new(kind, err.to_string())
    }
}
