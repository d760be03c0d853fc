//! Wire constants of the NBD protocol (NetworkBlockDevice/nbd doc/proto.md), named as the spec
//! names them so a reader can grep the spec for each one.
//!
//! Invariant: every value here is copied from the spec's "Values" section; nothing else in the
//! crate writes a magic number or flag bit literally.

/// `NBDMAGIC`, the first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`, sent by the server after `NBDMAGIC` and by the client before every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply in fixed newstyle negotiation.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;

/// Handshake flags (16 bits, server to client).
pub const NBD_FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const NBD_FLAG_NO_ZEROES: u16 = 1 << 1;

/// Client flags (32 bits, client to server).
pub const NBD_FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const NBD_FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Transmission flags (16 bits).
pub const NBD_FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const NBD_FLAG_READ_ONLY: u16 = 1 << 1;
pub const NBD_FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const NBD_FLAG_SEND_FUA: u16 = 1 << 3;
pub const NBD_FLAG_ROTATIONAL: u16 = 1 << 4;
pub const NBD_FLAG_SEND_TRIM: u16 = 1 << 5;
pub const NBD_FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const NBD_FLAG_SEND_DF: u16 = 1 << 7;
pub const NBD_FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const NBD_FLAG_SEND_CACHE: u16 = 1 << 10;

/// Option types.
pub const NBD_OPT_EXPORT_NAME: u32 = 1;
pub const NBD_OPT_ABORT: u32 = 2;
pub const NBD_OPT_LIST: u32 = 3;
pub const NBD_OPT_STARTTLS: u32 = 5;
pub const NBD_OPT_INFO: u32 = 6;
pub const NBD_OPT_GO: u32 = 7;
pub const NBD_OPT_STRUCTURED_REPLY: u32 = 8;
pub const NBD_OPT_LIST_META_CONTEXT: u32 = 9;
pub const NBD_OPT_SET_META_CONTEXT: u32 = 10;
pub const NBD_OPT_EXTENDED_HEADERS: u32 = 11;

/// Option reply types.
pub const NBD_REP_ACK: u32 = 1;
pub const NBD_REP_SERVER: u32 = 2;
pub const NBD_REP_INFO: u32 = 3;
const NBD_REP_FLAG_ERROR: u32 = 1 << 31;
pub const NBD_REP_ERR_UNSUP: u32 = NBD_REP_FLAG_ERROR | 1;
pub const NBD_REP_ERR_POLICY: u32 = NBD_REP_FLAG_ERROR | 2;
pub const NBD_REP_ERR_INVALID: u32 = NBD_REP_FLAG_ERROR | 3;
pub const NBD_REP_ERR_PLATFORM: u32 = NBD_REP_FLAG_ERROR | 4;
pub const NBD_REP_ERR_TLS_REQD: u32 = NBD_REP_FLAG_ERROR | 5;
pub const NBD_REP_ERR_UNKNOWN: u32 = NBD_REP_FLAG_ERROR | 6;
pub const NBD_REP_ERR_SHUTDOWN: u32 = NBD_REP_FLAG_ERROR | 7;
pub const NBD_REP_ERR_BLOCK_SIZE_REQD: u32 = NBD_REP_FLAG_ERROR | 8;
pub const NBD_REP_ERR_TOO_BIG: u32 = NBD_REP_FLAG_ERROR | 9;

/// Information types of `NBD_REP_INFO`.
pub const NBD_INFO_EXPORT: u16 = 0;
pub const NBD_INFO_NAME: u16 = 1;
pub const NBD_INFO_DESCRIPTION: u16 = 2;
pub const NBD_INFO_BLOCK_SIZE: u16 = 3;

/// Transmission phase magics.
pub const NBD_REQUEST_MAGIC: u32 = 0x2560_9513;
pub const NBD_SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const NBD_STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Command flags.
pub const NBD_CMD_FLAG_FUA: u16 = 1 << 0;
pub const NBD_CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const NBD_CMD_FLAG_DF: u16 = 1 << 2;
pub const NBD_CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const NBD_CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

/// Request types.
pub const NBD_CMD_READ: u16 = 0;
pub const NBD_CMD_WRITE: u16 = 1;
pub const NBD_CMD_DISC: u16 = 2;
pub const NBD_CMD_FLUSH: u16 = 3;
pub const NBD_CMD_TRIM: u16 = 4;
pub const NBD_CMD_CACHE: u16 = 5;
pub const NBD_CMD_WRITE_ZEROES: u16 = 6;
pub const NBD_CMD_BLOCK_STATUS: u16 = 7;

/// Structured reply flags and types.
pub const NBD_REPLY_FLAG_DONE: u16 = 1 << 0;
pub const NBD_REPLY_TYPE_NONE: u16 = 0;
pub const NBD_REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const NBD_REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const NBD_REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;
pub const NBD_REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) | 2;

/// Sizes of the fixed parts of messages, in bytes.
pub const REQUEST_HEADER_BYTES: usize = 28;
pub const SIMPLE_REPLY_BYTES: usize = 16;
pub const STRUCTURED_REPLY_HEADER_BYTES: usize = 20;
pub const OPTION_HEADER_BYTES: usize = 16;
pub const OPTION_REPLY_HEADER_BYTES: usize = 20;

/// Longest string (export name, description, message) the spec allows.
pub const MAX_STRING_BYTES: usize = 4096;

/// Error values of the transmission phase. Only the values the spec defines are representable,
/// so a reply can never carry a host `errno` that a client would misread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NbdError {
    /// `NBD_EPERM` (1): write or trim on a read-only export.
    Perm,
    /// `NBD_EIO` (5): the export failed the I/O.
    Io,
    /// `NBD_ENOMEM` (12).
    NoMem,
    /// `NBD_EINVAL` (22): bad request (range, alignment, unknown command or flag).
    Inval,
    /// `NBD_ENOSPC` (28): write beyond the end of the export, or the backing store is full.
    NoSpc,
    /// `NBD_EOVERFLOW` (75): a request longer than the server is willing to handle.
    Overflow,
    /// `NBD_ENOTSUP` (95).
    NotSup,
    /// `NBD_ESHUTDOWN` (108): the server is shutting down.
    Shutdown,
}

impl NbdError {
    /// The value sent on the wire.
    pub fn wire_value(self) -> u32 {
        match self {
            NbdError::Perm => 1,
            NbdError::Io => 5,
            NbdError::NoMem => 12,
            NbdError::Inval => 22,
            NbdError::NoSpc => 28,
            NbdError::Overflow => 75,
            NbdError::NotSup => 95,
            NbdError::Shutdown => 108,
        }
    }

    /// Maps an error from an export to the closest NBD error, as the spec asks (`EDQUOT` and
    /// `EFBIG` become `NBD_ENOSPC`; anything unknown becomes `NBD_EIO`).
    pub fn from_io(err: &std::io::Error) -> NbdError {
        match err.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EROFS) | Some(libc::EACCES) => NbdError::Perm,
            Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG) => NbdError::NoSpc,
            Some(libc::EINVAL) => NbdError::Inval,
            Some(libc::ENOMEM) => NbdError::NoMem,
            Some(libc::EOVERFLOW) => NbdError::Overflow,
            Some(libc::EOPNOTSUPP) => NbdError::NotSup,
            Some(libc::ESHUTDOWN) => NbdError::Shutdown,
            Some(_) => NbdError::Io,
            None => match err.kind() {
                std::io::ErrorKind::PermissionDenied => NbdError::Perm,
                std::io::ErrorKind::InvalidInput => NbdError::Inval,
                std::io::ErrorKind::OutOfMemory => NbdError::NoMem,
                std::io::ErrorKind::Unsupported => NbdError::NotSup,
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                    NbdError::NoSpc
                }
                _ => NbdError::Io,
            },
        }
    }
}

impl std::fmt::Display for NbdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            NbdError::Perm => "NBD_EPERM: operation not permitted",
            NbdError::Io => "NBD_EIO: input/output error",
            NbdError::NoMem => "NBD_ENOMEM: cannot allocate memory",
            NbdError::Inval => "NBD_EINVAL: invalid argument",
            NbdError::NoSpc => "NBD_ENOSPC: no space left on device",
            NbdError::Overflow => "NBD_EOVERFLOW: value too large",
            NbdError::NotSup => "NBD_ENOTSUP: operation not supported",
            NbdError::Shutdown => "NBD_ESHUTDOWN: server is shutting down",
        };
        f.write_str(text)
    }
}
