//! Sans-IO transmission phase: request headers in, decisions out, reply bytes encoded.
//!
//! [`Session::decide`] validates a request header once, against the negotiated export, and
//! says what the driver must do: execute a request that is known to be in range, aligned,
//! within the payload limit and allowed on this export; or reject it with the protocol's
//! error (after skipping any WRITE payload without storing it); or hang up.
//!
//! Invariants: an `Execute` decision never lets an offset or length reach the export that lies
//! outside the export, breaks alignment, or (for READ/WRITE) exceeds the advertised maximum
//! payload; a `Reject` never asks the driver to skip more than [`MAX_DISCARD_BYTES`].

use crate::handshake::Negotiated;
use crate::proto::*;
use std::fmt;

/// Largest WRITE payload the server reads and throws away to answer an invalid WRITE with an
/// error; a longer one is treated as an attack and the connection is closed.
pub const MAX_DISCARD_BYTES: u32 = 64 << 20;

/// A request header as sent by the client (28 bytes, big-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub command: u16,
    pub cookie: u64,
    pub offset: u64,
    pub len_bytes: u32,
}

/// The request magic was wrong: the stream is out of step and cannot be resynchronised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadRequestMagic(pub u32);

impl fmt::Display for BadRequestMagic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "request magic {:#010x} is not NBD_REQUEST_MAGIC {NBD_REQUEST_MAGIC:#010x}",
            self.0
        )
    }
}

impl std::error::Error for BadRequestMagic {}

impl RequestHeader {
    /// Parses a request header.
    pub fn parse(bytes: &[u8; REQUEST_HEADER_BYTES]) -> Result<RequestHeader, BadRequestMagic> {
        let magic = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if magic != NBD_REQUEST_MAGIC {
            return Err(BadRequestMagic(magic));
        }
        let mut cookie = [0u8; 8];
        cookie.copy_from_slice(&bytes[8..16]);
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&bytes[16..24]);
        Ok(RequestHeader {
            flags: u16::from_be_bytes([bytes[4], bytes[5]]),
            command: u16::from_be_bytes([bytes[6], bytes[7]]),
            cookie: u64::from_be_bytes(cookie),
            offset: u64::from_be_bytes(offset),
            len_bytes: u32::from_be_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]),
        })
    }

    /// Encodes the header (what a client sends); used by tests and tools.
    pub fn encode(&self) -> [u8; REQUEST_HEADER_BYTES] {
        let mut b = [0u8; REQUEST_HEADER_BYTES];
        b[0..4].copy_from_slice(&NBD_REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.command.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.len_bytes.to_be_bytes());
        b
    }
}

/// A validated command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Read,
    /// The payload of `len_bytes` follows the header.
    Write {
        fua: bool,
    },
    Flush,
    Trim {
        fua: bool,
    },
    /// A prefetch hint; answered with success and no effect.
    Cache,
    WriteZeroes {
        fua: bool,
        may_trim: bool,
    },
}

/// A validated request: the export can be called with it as is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub cookie: u64,
    pub command: Command,
    pub offset: u64,
    pub len_bytes: u32,
}

/// Why a request was rejected (the rule it broke), for the structured error message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectReason {
    UnknownCommand,
    UnknownFlags,
    NotAdvertised,
    ReadOnly,
    Misaligned,
    TooLong,
    OutOfRange,
    NonZeroFlushRange,
}

impl RejectReason {
    /// A message for the human at the client.
    pub fn message(self) -> &'static str {
        match self {
            RejectReason::UnknownCommand => "unknown command",
            RejectReason::UnknownFlags => "command flags not valid for this command",
            RejectReason::NotAdvertised => "command not advertised by this export",
            RejectReason::ReadOnly => "export is read-only",
            RejectReason::Misaligned => "offset or length not a multiple of the minimum block size",
            RejectReason::TooLong => "length exceeds the maximum payload size",
            RejectReason::OutOfRange => "request extends beyond the end of the export",
            RejectReason::NonZeroFlushRange => "flush offset and length must be zero",
        }
    }
}

/// Why the connection must close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisconnectReason {
    /// `NBD_CMD_DISC`: finish what is in flight, then close.
    ClientRequested,
    /// A WRITE announced more payload than the server will skip.
    PayloadTooLarge(u32),
}

/// What the driver does with a request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Execute(Request),
    /// Skip `discard_bytes` of payload (without storing it), then send an error reply.
    Reject {
        cookie: u64,
        command: u16,
        error: NbdError,
        reason: RejectReason,
        discard_bytes: u32,
    },
    Disconnect(DisconnectReason),
}

/// The negotiated parameters the transmission phase checks requests against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Session {
    /// Requests must end at or before this offset.
    pub size_bytes: u64,
    /// Offsets and lengths must be multiples of this.
    pub minimum_block_bytes: u32,
    /// READ and WRITE lengths must not exceed this.
    pub maximum_payload_bytes: u32,
    /// The flags advertised; commands and flags not advertised are refused.
    pub transmission_flags: u16,
    /// READ replies (and error replies) use structured chunks.
    pub structured_replies: bool,
}

impl Session {
    /// The session a negotiation produced.
    pub fn new(negotiated: &Negotiated) -> Session {
        Session {
            size_bytes: negotiated.export.size_bytes,
            minimum_block_bytes: negotiated.export.block_size.minimum_bytes.max(1),
            maximum_payload_bytes: negotiated.export.block_size.maximum_payload_bytes,
            transmission_flags: negotiated.transmission_flags,
            structured_replies: negotiated.structured_replies,
        }
    }

    fn has(&self, flag: u16) -> bool {
        self.transmission_flags & flag != 0
    }

    /// Validates one request header. See the module documentation.
    pub fn decide(&self, header: &RequestHeader) -> Decision {
        let discard_bytes = if header.command == NBD_CMD_WRITE {
            header.len_bytes
        } else {
            0
        };
        let reject = |error: NbdError, reason: RejectReason| {
            if discard_bytes > MAX_DISCARD_BYTES {
                // The payload cannot be skipped cheaply; the spec lets the server hang up.
                return Decision::Disconnect(DisconnectReason::PayloadTooLarge(discard_bytes));
            }
            Decision::Reject {
                cookie: header.cookie,
                command: header.command,
                error,
                reason,
                discard_bytes,
            }
        };

        let fua_allowed = if self.has(NBD_FLAG_SEND_FUA) {
            NBD_CMD_FLAG_FUA
        } else {
            0
        };
        let (allowed_flags, writes, advertised) = match header.command {
            NBD_CMD_DISC => return Decision::Disconnect(DisconnectReason::ClientRequested),
            NBD_CMD_READ => {
                let df = if self.has(NBD_FLAG_SEND_DF) {
                    NBD_CMD_FLAG_DF
                } else {
                    0
                };
                (fua_allowed | df, false, true)
            }
            NBD_CMD_WRITE => (fua_allowed, true, true),
            NBD_CMD_FLUSH => (fua_allowed, false, self.has(NBD_FLAG_SEND_FLUSH)),
            NBD_CMD_TRIM => (fua_allowed, true, self.has(NBD_FLAG_SEND_TRIM)),
            NBD_CMD_CACHE => (fua_allowed, false, self.has(NBD_FLAG_SEND_CACHE)),
            NBD_CMD_WRITE_ZEROES => (
                fua_allowed | NBD_CMD_FLAG_NO_HOLE,
                true,
                self.has(NBD_FLAG_SEND_WRITE_ZEROES),
            ),
            _ => return reject(NbdError::Inval, RejectReason::UnknownCommand),
        };
        if header.flags & !allowed_flags != 0 {
            return reject(NbdError::Inval, RejectReason::UnknownFlags);
        }
        if writes && self.has(NBD_FLAG_READ_ONLY) {
            return reject(NbdError::Perm, RejectReason::ReadOnly);
        }
        if !advertised {
            return reject(NbdError::Inval, RejectReason::NotAdvertised);
        }
        let fua = header.flags & NBD_CMD_FLAG_FUA != 0;
        if header.command == NBD_CMD_FLUSH {
            if header.offset != 0 || header.len_bytes != 0 {
                return reject(NbdError::Inval, RejectReason::NonZeroFlushRange);
            }
            return Decision::Execute(Request {
                cookie: header.cookie,
                command: Command::Flush,
                offset: 0,
                len_bytes: 0,
            });
        }
        let block = u64::from(self.minimum_block_bytes);
        if !header.offset.is_multiple_of(block)
            || !u64::from(header.len_bytes).is_multiple_of(block)
        {
            return reject(NbdError::Inval, RejectReason::Misaligned);
        }
        let carries_payload = matches!(header.command, NBD_CMD_READ | NBD_CMD_WRITE);
        if carries_payload && header.len_bytes > self.maximum_payload_bytes {
            // Structured replies let the server refuse a large read with EOVERFLOW; otherwise
            // the spec's answer for a request the client must not send is EINVAL.
            let error = if header.command == NBD_CMD_READ && self.structured_replies {
                NbdError::Overflow
            } else {
                NbdError::Inval
            };
            return reject(error, RejectReason::TooLong);
        }
        let in_range = header
            .offset
            .checked_add(u64::from(header.len_bytes))
            .is_some_and(|end| end <= self.size_bytes);
        if !in_range {
            let error = match header.command {
                NBD_CMD_WRITE | NBD_CMD_WRITE_ZEROES => NbdError::NoSpc,
                _ => NbdError::Inval,
            };
            return reject(error, RejectReason::OutOfRange);
        }
        let command = match header.command {
            NBD_CMD_READ => Command::Read,
            NBD_CMD_WRITE => Command::Write { fua },
            NBD_CMD_TRIM => Command::Trim { fua },
            NBD_CMD_CACHE => Command::Cache,
            _ => Command::WriteZeroes {
                fua,
                may_trim: header.flags & NBD_CMD_FLAG_NO_HOLE == 0,
            },
        };
        Decision::Execute(Request {
            cookie: header.cookie,
            command,
            offset: header.offset,
            len_bytes: header.len_bytes,
        })
    }
}

/// A simple reply (16 bytes); READ data, if any, follows it.
pub fn simple_reply(cookie: u64, error: Option<NbdError>) -> [u8; SIMPLE_REPLY_BYTES] {
    let mut b = [0u8; SIMPLE_REPLY_BYTES];
    b[0..4].copy_from_slice(&NBD_SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.map_or(0, NbdError::wire_value).to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

fn structured_header(cookie: u64, flags: u16, kind: u16, len_bytes: u32) -> [u8; 20] {
    let mut b = [0u8; STRUCTURED_REPLY_HEADER_BYTES];
    b[0..4].copy_from_slice(&NBD_STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&len_bytes.to_be_bytes());
    b
}

/// The header of a final `NBD_REPLY_TYPE_OFFSET_DATA` chunk (28 bytes: chunk header and
/// offset); `data_len_bytes` of data follow it. The data is read completely before this is
/// sent, so no error can follow, and the chunk may carry `NBD_REPLY_FLAG_DONE`.
pub fn structured_read_header(cookie: u64, offset: u64, data_len_bytes: u32) -> [u8; 28] {
    let mut b = [0u8; 28];
    let header = structured_header(
        cookie,
        NBD_REPLY_FLAG_DONE,
        NBD_REPLY_TYPE_OFFSET_DATA,
        data_len_bytes.saturating_add(8),
    );
    b[0..20].copy_from_slice(&header);
    b[20..28].copy_from_slice(&offset.to_be_bytes());
    b
}

/// A final `NBD_REPLY_TYPE_NONE` chunk (success without data).
pub fn structured_done(cookie: u64) -> [u8; 20] {
    structured_header(cookie, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, 0)
}

/// A final `NBD_REPLY_TYPE_ERROR` chunk with a message, appended to `out`.
pub fn structured_error(cookie: u64, error: NbdError, message: &str, out: &mut Vec<u8>) {
    let message = &message.as_bytes()[..message.len().min(MAX_STRING_BYTES)];
    let len = 6 + message.len() as u32;
    out.extend_from_slice(&structured_header(
        cookie,
        NBD_REPLY_FLAG_DONE,
        NBD_REPLY_TYPE_ERROR,
        len,
    ));
    out.extend_from_slice(&error.wire_value().to_be_bytes());
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(message);
}

/// The whole error reply for a request, in the form the session requires (structured when
/// negotiated, which the spec prefers and demands for READ), appended to `out`.
pub fn error_reply(
    session: &Session,
    cookie: u64,
    error: NbdError,
    message: &str,
    out: &mut Vec<u8>,
) {
    if session.structured_replies {
        structured_error(cookie, error, message, out);
    } else {
        out.extend_from_slice(&simple_reply(cookie, Some(error)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(flags: u16, structured: bool) -> Session {
        Session {
            size_bytes: 1 << 20,
            minimum_block_bytes: 512,
            maximum_payload_bytes: 1 << 16,
            transmission_flags: NBD_FLAG_HAS_FLAGS | flags,
            structured_replies: structured,
        }
    }

    fn all_flags() -> u16 {
        NBD_FLAG_SEND_FLUSH
            | NBD_FLAG_SEND_FUA
            | NBD_FLAG_SEND_TRIM
            | NBD_FLAG_SEND_WRITE_ZEROES
            | NBD_FLAG_SEND_CACHE
    }

    fn header(command: u16, flags: u16, offset: u64, len_bytes: u32) -> RequestHeader {
        RequestHeader {
            flags,
            command,
            cookie: 0x1234,
            offset,
            len_bytes,
        }
    }

    fn rejected(d: Decision) -> (NbdError, u32) {
        match d {
            Decision::Reject {
                error,
                discard_bytes,
                cookie,
                ..
            } => {
                assert_eq!(cookie, 0x1234);
                (error, discard_bytes)
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn header_round_trip_and_bad_magic() {
        let h = header(NBD_CMD_WRITE, 1, 4096, 512);
        assert_eq!(RequestHeader::parse(&h.encode()), Ok(h));
        let mut bytes = h.encode();
        bytes[0] ^= 1;
        assert!(RequestHeader::parse(&bytes).is_err());
    }

    #[test]
    fn valid_requests_execute() {
        let s = session(all_flags(), false);
        assert_eq!(
            s.decide(&header(NBD_CMD_WRITE, NBD_CMD_FLAG_FUA, 512, 1024)),
            Decision::Execute(Request {
                cookie: 0x1234,
                command: Command::Write { fua: true },
                offset: 512,
                len_bytes: 1024
            })
        );
        assert!(matches!(
            s.decide(&header(
                NBD_CMD_WRITE_ZEROES,
                NBD_CMD_FLAG_NO_HOLE,
                0,
                1 << 20
            )),
            Decision::Execute(Request {
                command: Command::WriteZeroes {
                    fua: false,
                    may_trim: false
                },
                ..
            })
        ));
        // Trim and zeroing have no payload, so the payload limit does not apply to them.
        assert!(matches!(
            s.decide(&header(NBD_CMD_TRIM, 0, 0, 1 << 20)),
            Decision::Execute(_)
        ));
        assert!(matches!(
            s.decide(&header(NBD_CMD_FLUSH, 0, 0, 0)),
            Decision::Execute(_)
        ));
        assert_eq!(
            s.decide(&header(NBD_CMD_DISC, 0, 0, 0)),
            Decision::Disconnect(DisconnectReason::ClientRequested)
        );
    }

    #[test]
    fn spec_errors() {
        let s = session(all_flags(), false);
        // Range: reads and trims EINVAL, writes ENOSPC.
        assert_eq!(
            rejected(s.decide(&header(NBD_CMD_READ, 0, 1 << 20, 512))),
            (NbdError::Inval, 0)
        );
        assert_eq!(
            rejected(s.decide(&header(NBD_CMD_TRIM, 0, 1 << 20, 512))),
            (NbdError::Inval, 0)
        );
        assert_eq!(
            rejected(s.decide(&header(NBD_CMD_WRITE, 0, (1 << 20) - 512, 1024))),
            (NbdError::NoSpc, 1024)
        );
        assert_eq!(
            rejected(s.decide(&header(NBD_CMD_WRITE_ZEROES, 0, u64::MAX - 511, 1024))),
            (NbdError::NoSpc, 0)
        );
        // Alignment.
        assert_eq!(
            rejected(s.decide(&header(NBD_CMD_READ, 0, 1, 512))),
            (NbdError::Inval, 0)
        );
        assert_eq!(
            rejected(s.decide(&header(NBD_CMD_WRITE, 0, 0, 100))),
            (NbdError::Inval, 100)
        );
        // Unknown command and flags.
        assert_eq!(
            rejected(s.decide(&header(99, 0, 0, 0))),
            (NbdError::Inval, 0)
        );
        assert_eq!(
            rejected(s.decide(&header(NBD_CMD_BLOCK_STATUS, 0, 0, 512))),
            (NbdError::Inval, 0)
        );
        assert_eq!(
            rejected(s.decide(&header(NBD_CMD_READ, NBD_CMD_FLAG_NO_HOLE, 0, 512))),
            (NbdError::Inval, 0)
        );
        assert_eq!(
            rejected(s.decide(&header(NBD_CMD_READ, NBD_CMD_FLAG_DF, 0, 512))),
            (NbdError::Inval, 0),
            "DF without structured replies"
        );
        assert_eq!(
            rejected(s.decide(&header(
                NBD_CMD_WRITE_ZEROES,
                NBD_CMD_FLAG_FAST_ZERO,
                0,
                512
            ))),
            (NbdError::Inval, 0)
        );
        // Oversized: EINVAL for simple-reply reads, EOVERFLOW with structured replies.
        assert_eq!(
            rejected(s.decide(&header(NBD_CMD_READ, 0, 0, 1 << 17))),
            (NbdError::Inval, 0)
        );
        let st = session(all_flags() | NBD_FLAG_SEND_DF, true);
        assert_eq!(
            rejected(st.decide(&header(NBD_CMD_READ, 0, 0, 1 << 17))),
            (NbdError::Overflow, 0)
        );
        assert!(matches!(
            st.decide(&header(NBD_CMD_READ, NBD_CMD_FLAG_DF, 0, 512)),
            Decision::Execute(_)
        ));
        assert_eq!(
            rejected(s.decide(&header(NBD_CMD_WRITE, 0, 0, 1 << 17))),
            (NbdError::Inval, 1 << 17)
        );
        assert_eq!(
            s.decide(&header(NBD_CMD_WRITE, 0, 0, MAX_DISCARD_BYTES + 512)),
            Decision::Disconnect(DisconnectReason::PayloadTooLarge(MAX_DISCARD_BYTES + 512))
        );
        assert_eq!(
            rejected(s.decide(&header(NBD_CMD_FLUSH, 0, 0, 512))),
            (NbdError::Inval, 0)
        );
    }

    #[test]
    fn read_only_and_unadvertised() {
        let ro = session(NBD_FLAG_READ_ONLY | NBD_FLAG_SEND_FLUSH, false);
        assert_eq!(
            rejected(ro.decide(&header(NBD_CMD_WRITE, 0, 0, 512))),
            (NbdError::Perm, 512)
        );
        assert_eq!(
            rejected(ro.decide(&header(NBD_CMD_TRIM, 0, 0, 512))),
            (NbdError::Perm, 0)
        );
        assert_eq!(
            rejected(ro.decide(&header(NBD_CMD_WRITE_ZEROES, 0, 0, 512))),
            (NbdError::Perm, 0)
        );
        // FUA not advertised: the flag is unknown.
        assert_eq!(
            rejected(ro.decide(&header(NBD_CMD_READ, NBD_CMD_FLAG_FUA, 0, 512))),
            (NbdError::Inval, 0)
        );
        let bare = session(0, false);
        assert_eq!(
            rejected(bare.decide(&header(NBD_CMD_FLUSH, 0, 0, 0))),
            (NbdError::Inval, 0)
        );
        assert_eq!(
            rejected(bare.decide(&header(NBD_CMD_TRIM, 0, 0, 512))),
            (NbdError::Inval, 0)
        );
    }

    #[test]
    fn reply_encodings() {
        let r = simple_reply(7, Some(NbdError::NoSpc));
        assert_eq!(&r[0..4], &NBD_SIMPLE_REPLY_MAGIC.to_be_bytes());
        assert_eq!(u32::from_be_bytes(r[4..8].try_into().unwrap()), 28);
        assert_eq!(u64::from_be_bytes(r[8..16].try_into().unwrap()), 7);
        let h = structured_read_header(9, 4096, 512);
        assert_eq!(u16::from_be_bytes([h[4], h[5]]), NBD_REPLY_FLAG_DONE);
        assert_eq!(u16::from_be_bytes([h[6], h[7]]), NBD_REPLY_TYPE_OFFSET_DATA);
        assert_eq!(u32::from_be_bytes(h[16..20].try_into().unwrap()), 520);
        assert_eq!(u64::from_be_bytes(h[20..28].try_into().unwrap()), 4096);
        let mut e = Vec::new();
        structured_error(9, NbdError::Inval, "bad", &mut e);
        assert_eq!(e.len(), 20 + 6 + 3);
        assert_eq!(u16::from_be_bytes([e[6], e[7]]), NBD_REPLY_TYPE_ERROR);
        assert_eq!(u32::from_be_bytes(e[20..24].try_into().unwrap()), 22);
        assert_eq!(&e[26..], b"bad");
    }
}
