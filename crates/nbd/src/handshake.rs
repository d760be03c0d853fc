//! Sans-IO fixed newstyle negotiation (the handshake phase), server side.
//!
//! [`Handshake`] is a state machine: the driver feeds it whatever bytes arrived
//! ([`Handshake::receive`]), sends what it produced ([`Handshake::take_output`]) and stops when
//! it reports an [`Outcome`]. It never touches a socket or a clock, so it can be fed byte by
//! byte, or with fuzzed input, in tests.
//!
//! Invariants: the bytes it holds for a partial unit never exceed
//! [`MAX_OPTION_DATA_BYTES`] + header; option data it does not want (unknown options, oversized
//! options, options refused until TLS is up) is skipped without being stored; it consumes no
//! byte beyond the option that ends negotiation, or beyond an acknowledged
//! `NBD_OPT_STARTTLS`, so whatever follows belongs to the next layer (the transmission phase,
//! or the TLS handshake).
//!
//! TLS (`NBD_OPT_STARTTLS`), following the spec's server modes, chosen with [`TlsMode`]:
//! `Off` is NOTLS (STARTTLS is answered `NBD_REP_ERR_POLICY`); `On` is SELECTIVETLS with no
//! TLS-only export (a client may upgrade or not); `Require` is FORCEDTLS (until TLS is up,
//! every option other than STARTTLS and ABORT is answered `NBD_REP_ERR_TLS_REQD` and its data
//! skipped, and `NBD_OPT_EXPORT_NAME`, which cannot be answered with an error, ends the
//! session). An acknowledged STARTTLS pauses the machine ([`Handshake::poll_start_tls`]): the
//! driver sends the `NBD_REP_ACK`, runs the TLS handshake, and calls
//! [`Handshake::tls_established`]; negotiation then goes on over TLS, a second STARTTLS is
//! `NBD_REP_ERR_INVALID`, and structured replies negotiated in clear must be asked for again
//! (the spec's rule, so a man in the middle cannot have changed them).
//!
//! Block sizes: an export whose minimum block size is larger than 1 (every raidkit array: 512)
//! cannot honour the spec's default of byte-granular requests, so `NBD_OPT_GO` and
//! `NBD_OPT_INFO` without an `NBD_INFO_BLOCK_SIZE` request are answered
//! `NBD_REP_ERR_BLOCK_SIZE_REQD`: the client learns at negotiation that it must align its
//! requests (libnbd and qemu always ask, so they are unaffected). `NBD_OPT_EXPORT_NAME`
//! cannot carry that error (its only failure is a hang-up) and cannot learn the constraints,
//! so old-style clients are still let in, and a misaligned request from one is refused
//! with `NBD_EINVAL` by [`crate::transmission::Session::decide`], as it is for everyone.
//! Hanging up on them would refuse clients (the kernel's `nbd-client` of old, which sends
//! whole 512-byte sectors anyway) that never send a misaligned request in practice.

use crate::escape::escape_for_log;
use crate::export::BlockSize;
use crate::proto::*;
use std::fmt;

/// Largest option payload the server buffers. The largest legitimate one is `NBD_OPT_GO` with
/// a 4096-byte name and a handful of information requests.
pub const MAX_OPTION_DATA_BYTES: usize = 16 << 10;
/// Largest option payload the server skips over before deciding the client is hostile.
pub const MAX_OPTION_DISCARD_BYTES: u64 = 1 << 20;
/// Most options one negotiation may send before the server hangs up.
pub const MAX_OPTIONS: u32 = 4096;

const UNSUPPORTED_MESSAGE: &str = "option not supported by this server";
const TLS_REQUIRED_MESSAGE: &str = "this server requires TLS: send NBD_OPT_STARTTLS first";

/// Whether the server offers TLS, and whether it insists on it (the spec's NOTLS,
/// SELECTIVETLS and FORCEDTLS modes; qemu-nbd's and nbdkit's `--tls=off|on|require`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TlsMode {
    /// No TLS: `NBD_OPT_STARTTLS` is answered `NBD_REP_ERR_POLICY`.
    #[default]
    Off,
    /// TLS is offered; a client may use it or not.
    On,
    /// Every client must start TLS before anything else.
    Require,
}

/// What the negotiation needs to know about an export, and what it advertises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    /// The canonical name.
    pub name: String,
    /// Shown by `NBD_OPT_LIST` and `NBD_INFO_DESCRIPTION`.
    pub description: Option<String>,
    pub size_bytes: u64,
    /// Advertised with `NBD_INFO_BLOCK_SIZE` and enforced on every request.
    pub block_size: BlockSize,
    /// `NBD_FLAG_READ_ONLY`; also withdraws FUA, trim and zeroing.
    pub read_only: bool,
    /// `NBD_FLAG_SEND_FLUSH`.
    pub can_flush: bool,
    /// `NBD_FLAG_SEND_FUA`.
    pub can_fua: bool,
    /// `NBD_FLAG_SEND_TRIM`.
    pub can_trim: bool,
    /// The export zeroes cheaply (zeroing is offered to clients either way when writable).
    pub can_zero: bool,
    /// `NBD_FLAG_CAN_MULTI_CONN`.
    pub can_multi_conn: bool,
}

impl ExportInfo {
    /// Describes `export` under `name`.
    pub fn of(name: &str, export: &dyn crate::Export) -> ExportInfo {
        let read_only = export.read_only();
        ExportInfo {
            name: name.to_string(),
            description: export.description(),
            size_bytes: export.size_bytes(),
            block_size: export.block_size(),
            read_only,
            can_flush: export.can_flush(),
            can_fua: export.can_fua() && !read_only,
            can_trim: export.can_trim() && !read_only,
            can_zero: export.can_zero() && !read_only,
            can_multi_conn: export.can_multi_conn(),
        }
    }

    /// The transmission flags advertised for this export. `NBD_FLAG_SEND_DF` depends on
    /// structured replies having been negotiated (the spec forbids it otherwise).
    pub fn transmission_flags(&self, structured_replies: bool) -> u16 {
        let mut flags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_CACHE;
        if self.read_only {
            flags |= NBD_FLAG_READ_ONLY;
        }
        if self.can_flush {
            flags |= NBD_FLAG_SEND_FLUSH;
        }
        if self.can_fua {
            flags |= NBD_FLAG_SEND_FUA;
        }
        if self.can_trim {
            flags |= NBD_FLAG_SEND_TRIM;
        }
        // Zeroing is always offered on writable exports: an export without a cheap way
        // falls back to writing zeroes from a small buffer.
        if !self.read_only {
            flags |= NBD_FLAG_SEND_WRITE_ZEROES;
        }
        if structured_replies {
            flags |= NBD_FLAG_SEND_DF;
        }
        if self.can_multi_conn {
            flags |= NBD_FLAG_CAN_MULTI_CONN;
        }
        flags
    }
}

/// The server's exports, as the negotiation sees them.
pub trait Catalog {
    /// The export a client asked for by name (the empty name is the default export).
    fn find(&self, name: &str) -> Option<ExportInfo>;
    /// Every export, for `NBD_OPT_LIST`: (name, description).
    fn list(&self) -> Vec<(String, Option<String>)>;
}

/// The result of a successful negotiation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The export chosen, under its canonical name.
    pub export: ExportInfo,
    /// `NBD_OPT_STRUCTURED_REPLY` was acknowledged.
    pub structured_replies: bool,
    /// The flags sent to the client with this export.
    pub transmission_flags: u16,
    /// True if the client asked for `NBD_INFO_BLOCK_SIZE` in `NBD_OPT_GO`, and so promised to
    /// honour the constraints.
    pub block_size_agreed: bool,
    /// The negotiation ended over TLS (the transmission phase continues over it).
    pub tls: bool,
}

/// How negotiation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Enter the transmission phase.
    Transmission(Box<Negotiated>),
    /// The client sent `NBD_OPT_ABORT`; the server acknowledged and closes.
    Aborted,
}

/// Why the server must hang up during negotiation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeError {
    /// The client set a flag the server does not know or did not offer.
    UnknownClientFlags(u32),
    /// An option did not start with `IHAVEOPT`.
    BadOptionMagic(u64),
    /// `NBD_OPT_EXPORT_NAME` named an export that does not exist (this option cannot error).
    UnknownExport(String),
    /// `NBD_OPT_EXPORT_NAME` carried a name longer than the spec's 4096-byte limit.
    ExportNameTooLong(u32),
    /// An option carried more data than the server will skip.
    OptionTooLong { option: u32, len_bytes: u32 },
    /// More than [`MAX_OPTIONS`] options.
    TooManyOptions,
    /// Bytes arrived after negotiation had ended.
    AlreadyFinished,
    /// The server requires TLS and the client asked for an export without it by
    /// `NBD_OPT_EXPORT_NAME` (which cannot be refused with an error), or cannot start TLS
    /// because it did not negotiate fixed newstyle.
    TlsRequired,
    /// Plaintext bytes were fed after `NBD_OPT_STARTTLS` was acknowledged and before
    /// [`Handshake::tls_established`]: they belong to the TLS handshake.
    TlsPending,
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::UnknownClientFlags(v) => {
                write!(f, "client flags {v:#x} include bits the server did not offer")
            }
            HandshakeError::BadOptionMagic(v) => {
                write!(f, "option magic {v:#018x} is not IHAVEOPT")
            }
            HandshakeError::UnknownExport(name) => write!(
                f,
                "NBD_OPT_EXPORT_NAME asked for unknown export \"{}\"",
                escape_for_log(name)
            ),
            HandshakeError::ExportNameTooLong(n) => {
                write!(f, "export name of {n} bytes exceeds the 4096-byte string limit")
            }
            HandshakeError::OptionTooLong { option, len_bytes } => write!(
                f,
                "option {option} carries {len_bytes} bytes, more than the {MAX_OPTION_DISCARD_BYTES} the server skips"
            ),
            HandshakeError::TooManyOptions => {
                write!(f, "more than {MAX_OPTIONS} options in one negotiation")
            }
            HandshakeError::AlreadyFinished => write!(f, "data after negotiation ended"),
            HandshakeError::TlsRequired => {
                write!(f, "TLS is required and the client entered without it")
            }
            HandshakeError::TlsPending => {
                write!(f, "plaintext option data after NBD_OPT_STARTTLS was acknowledged")
            }
        }
    }
}

impl std::error::Error for HandshakeError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    ClientFlags,
    OptionHeader,
    OptionData {
        option: u32,
        len_bytes: u32,
    },
    Discard {
        option: u32,
        remaining_bytes: u64,
        reply: u32,
    },
    /// `NBD_OPT_STARTTLS` was acknowledged; waiting for the driver to bring TLS up.
    StartTls,
    Finished,
}

/// Server side of the fixed newstyle negotiation. See the module documentation.
pub struct Handshake {
    state: State,
    unit: Vec<u8>,
    out: Vec<u8>,
    no_zeroes: bool,
    fixed_newstyle: bool,
    structured_replies: bool,
    options_seen: u32,
    outcome: Option<Outcome>,
    tls_mode: TlsMode,
    tls_active: bool,
    tls_refusals: u32,
}

impl Default for Handshake {
    fn default() -> Self {
        Self::new()
    }
}

impl Handshake {
    /// A new negotiation without TLS; the greeting (`NBDMAGIC`, `IHAVEOPT`, handshake flags)
    /// is already queued as output.
    pub fn new() -> Handshake {
        Handshake::with_tls(TlsMode::Off)
    }

    /// A new negotiation in the given TLS mode (see the module documentation).
    pub fn with_tls(tls_mode: TlsMode) -> Handshake {
        let mut out = Vec::with_capacity(18);
        out.extend_from_slice(&NBDMAGIC.to_be_bytes());
        out.extend_from_slice(&IHAVEOPT.to_be_bytes());
        out.extend_from_slice(&(NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES).to_be_bytes());
        Handshake {
            state: State::ClientFlags,
            unit: Vec::new(),
            out,
            no_zeroes: false,
            fixed_newstyle: false,
            structured_replies: false,
            options_seen: 0,
            outcome: None,
            tls_mode,
            tls_active: false,
            tls_refusals: 0,
        }
    }

    /// True once `NBD_OPT_STARTTLS` has been acknowledged (the `NBD_REP_ACK` is in the
    /// output): the driver sends the output in clear, runs the TLS handshake on the same
    /// stream, then calls [`Handshake::tls_established`]. Until then nothing more is consumed.
    pub fn poll_start_tls(&self) -> bool {
        self.state == State::StartTls
    }

    /// The TLS handshake the driver ran after [`Handshake::poll_start_tls`] succeeded;
    /// negotiation continues with the bytes that arrive over TLS.
    pub fn tls_established(&mut self) {
        if self.state == State::StartTls {
            self.tls_active = true;
            self.state = State::OptionHeader;
        }
    }

    /// True once TLS is up on this connection.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// How many options were refused with `NBD_REP_ERR_TLS_REQD` (a client that leaves after
    /// one was turned away for not using TLS).
    pub fn tls_refusals(&self) -> u32 {
        self.tls_refusals
    }

    /// Bytes queued for the client; the caller sends them all.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// How negotiation ended, once it has.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }

    /// Consumes the handshake, returning its outcome.
    pub fn into_outcome(self) -> Option<Outcome> {
        self.outcome
    }

    /// Bytes of input held for an incomplete message (bounded; see module docs).
    pub fn buffered_bytes(&self) -> usize {
        self.unit.len()
    }

    /// How many more bytes complete the current step. A driver that reads at most this many
    /// never reads past the end of negotiation. Zero once finished.
    pub fn bytes_wanted(&self) -> usize {
        match self.state {
            State::ClientFlags => 4 - self.unit.len(),
            State::OptionHeader => OPTION_HEADER_BYTES - self.unit.len(),
            State::OptionData { len_bytes, .. } => len_bytes as usize - self.unit.len(),
            State::Discard {
                remaining_bytes, ..
            } => remaining_bytes.min(64 << 10) as usize,
            State::StartTls | State::Finished => 0,
        }
    }

    /// Feeds received bytes; returns how many were consumed. Stops consuming when negotiation
    /// ends, so unconsumed bytes belong to the next phase. An error means: hang up.
    pub fn receive(
        &mut self,
        input: &[u8],
        catalog: &dyn Catalog,
    ) -> Result<usize, HandshakeError> {
        let mut used = 0;
        while used < input.len() {
            match self.state {
                State::Finished => {
                    if used == 0 {
                        return Err(HandshakeError::AlreadyFinished);
                    }
                    break;
                }
                State::StartTls => {
                    if used == 0 {
                        return Err(HandshakeError::TlsPending);
                    }
                    break;
                }
                State::Discard {
                    option,
                    remaining_bytes,
                    reply,
                } => {
                    let n = remaining_bytes.min((input.len() - used) as u64);
                    used += n as usize;
                    let remaining_bytes = remaining_bytes - n;
                    if remaining_bytes == 0 {
                        self.reply(option, reply, refusal_message(reply).as_bytes());
                        self.state = State::OptionHeader;
                    } else {
                        self.state = State::Discard {
                            option,
                            remaining_bytes,
                            reply,
                        };
                    }
                }
                _ => {
                    let want = self.bytes_wanted();
                    let n = want.min(input.len() - used);
                    self.unit.extend_from_slice(&input[used..used + n]);
                    used += n;
                    if n == want {
                        self.step(catalog)?;
                    }
                }
            }
        }
        // An option with no data completes without another byte arriving.
        while let State::OptionData { len_bytes: 0, .. } = self.state {
            self.step(catalog)?;
        }
        Ok(used)
    }

    /// Handles one complete unit held in `self.unit`.
    fn step(&mut self, catalog: &dyn Catalog) -> Result<(), HandshakeError> {
        let unit = std::mem::take(&mut self.unit);
        match self.state {
            State::ClientFlags => {
                let flags = u32::from_be_bytes([unit[0], unit[1], unit[2], unit[3]]);
                if flags & !(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES) != 0 {
                    return Err(HandshakeError::UnknownClientFlags(flags));
                }
                self.no_zeroes = flags & NBD_FLAG_C_NO_ZEROES != 0;
                self.fixed_newstyle = flags & NBD_FLAG_C_FIXED_NEWSTYLE != 0;
                // TLS needs fixed newstyle; a client without it could never start TLS.
                if self.tls_mode == TlsMode::Require && !self.fixed_newstyle {
                    return Err(HandshakeError::TlsRequired);
                }
                self.state = State::OptionHeader;
            }
            State::OptionHeader => {
                let magic = u64::from_be_bytes(unit[0..8].try_into().unwrap_or_default());
                if magic != IHAVEOPT {
                    return Err(HandshakeError::BadOptionMagic(magic));
                }
                self.options_seen += 1;
                if self.options_seen > MAX_OPTIONS {
                    return Err(HandshakeError::TooManyOptions);
                }
                let option = u32::from_be_bytes([unit[8], unit[9], unit[10], unit[11]]);
                let len_bytes = u32::from_be_bytes([unit[12], unit[13], unit[14], unit[15]]);
                self.state = self.plan_option(option, len_bytes)?;
            }
            State::OptionData { option, .. } => {
                self.state = State::OptionHeader;
                self.handle_option(option, &unit, catalog)?;
            }
            State::Discard { .. } | State::StartTls | State::Finished => {}
        }
        // Keep the allocation for the next unit.
        self.unit = unit;
        self.unit.clear();
        Ok(())
    }

    fn plan_option(&mut self, option: u32, len_bytes: u32) -> Result<State, HandshakeError> {
        let known = matches!(
            option,
            NBD_OPT_EXPORT_NAME
                | NBD_OPT_ABORT
                | NBD_OPT_LIST
                | NBD_OPT_STARTTLS
                | NBD_OPT_INFO
                | NBD_OPT_GO
                | NBD_OPT_STRUCTURED_REPLY
        );
        if option == NBD_OPT_EXPORT_NAME && len_bytes as usize > MAX_STRING_BYTES {
            return Err(HandshakeError::ExportNameTooLong(len_bytes));
        }
        // FORCEDTLS: before TLS only STARTTLS and ABORT are served. EXPORT_NAME cannot be
        // answered with an error, so the spec has the server end the session.
        let tls_refused = self.tls_mode == TlsMode::Require
            && !self.tls_active
            && !matches!(option, NBD_OPT_STARTTLS | NBD_OPT_ABORT);
        if tls_refused && option == NBD_OPT_EXPORT_NAME {
            return Err(HandshakeError::TlsRequired);
        }
        if tls_refused || !known || len_bytes as usize > MAX_OPTION_DATA_BYTES {
            if u64::from(len_bytes) > MAX_OPTION_DISCARD_BYTES {
                return Err(HandshakeError::OptionTooLong { option, len_bytes });
            }
            let reply = if tls_refused {
                self.tls_refusals += 1;
                NBD_REP_ERR_TLS_REQD
            } else if known {
                NBD_REP_ERR_TOO_BIG
            } else {
                NBD_REP_ERR_UNSUP
            };
            if len_bytes == 0 {
                self.reply(option, reply, refusal_message(reply).as_bytes());
                return Ok(State::OptionHeader);
            }
            return Ok(State::Discard {
                option,
                remaining_bytes: u64::from(len_bytes),
                reply,
            });
        }
        Ok(State::OptionData { option, len_bytes })
    }

    fn reply(&mut self, option: u32, reply_type: u32, data: &[u8]) {
        self.out
            .extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
        self.out.extend_from_slice(&option.to_be_bytes());
        self.out.extend_from_slice(&reply_type.to_be_bytes());
        self.out
            .extend_from_slice(&(data.len() as u32).to_be_bytes());
        self.out.extend_from_slice(data);
    }

    fn handle_option(
        &mut self,
        option: u32,
        data: &[u8],
        catalog: &dyn Catalog,
    ) -> Result<(), HandshakeError> {
        match option {
            NBD_OPT_EXPORT_NAME => {
                let name = String::from_utf8_lossy(data).into_owned();
                let info = match catalog.find(&name) {
                    Some(info) => info,
                    None => return Err(HandshakeError::UnknownExport(name)),
                };
                let flags = info.transmission_flags(self.structured_replies);
                self.out.extend_from_slice(&info.size_bytes.to_be_bytes());
                self.out.extend_from_slice(&flags.to_be_bytes());
                if !self.no_zeroes {
                    self.out.extend_from_slice(&[0u8; 124]);
                }
                self.finish(Outcome::Transmission(Box::new(Negotiated {
                    export: info,
                    structured_replies: self.structured_replies,
                    transmission_flags: flags,
                    block_size_agreed: false,
                    tls: self.tls_active,
                })));
            }
            NBD_OPT_STARTTLS => self.start_tls(option, data),
            NBD_OPT_ABORT => {
                // The spec asks the server to ignore any data sent with ABORT.
                self.reply(option, NBD_REP_ACK, &[]);
                self.finish(Outcome::Aborted);
            }
            NBD_OPT_LIST => {
                if !data.is_empty() {
                    self.reply(option, NBD_REP_ERR_INVALID, b"NBD_OPT_LIST takes no data");
                    return Ok(());
                }
                for (name, description) in catalog.list() {
                    let mut body = Vec::with_capacity(4 + name.len());
                    body.extend_from_slice(&(name.len() as u32).to_be_bytes());
                    body.extend_from_slice(name.as_bytes());
                    if let Some(d) = description {
                        body.extend_from_slice(truncate_str(&d).as_bytes());
                    }
                    self.reply(option, NBD_REP_SERVER, &body);
                }
                self.reply(option, NBD_REP_ACK, &[]);
            }
            NBD_OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    self.reply(
                        option,
                        NBD_REP_ERR_INVALID,
                        b"NBD_OPT_STRUCTURED_REPLY takes no data",
                    );
                    return Ok(());
                }
                self.structured_replies = true;
                self.reply(option, NBD_REP_ACK, &[]);
            }
            NBD_OPT_INFO | NBD_OPT_GO => self.info_or_go(option, data, catalog),
            // plan_option sends every other option to Discard; answer defensively anyway.
            _ => self.reply(option, NBD_REP_ERR_UNSUP, b"option not supported"),
        }
        Ok(())
    }

    fn start_tls(&mut self, option: u32, data: &[u8]) {
        if !data.is_empty() {
            self.reply(
                option,
                NBD_REP_ERR_INVALID,
                b"NBD_OPT_STARTTLS takes no data",
            );
        } else if self.tls_active {
            self.reply(option, NBD_REP_ERR_INVALID, b"TLS is already active");
        } else if self.tls_mode == TlsMode::Off || !self.fixed_newstyle {
            // NOTLS (by configuration, or because the client did not negotiate fixed
            // newstyle, which the spec makes a condition for TLS).
            self.reply(
                option,
                NBD_REP_ERR_POLICY,
                b"TLS is not enabled on this server",
            );
        } else {
            self.reply(option, NBD_REP_ACK, &[]);
            // Whatever was negotiated in clear is forgotten (the spec asks clients to
            // negotiate structured replies again after STARTTLS).
            self.structured_replies = false;
            self.state = State::StartTls;
        }
    }

    fn info_or_go(&mut self, option: u32, data: &[u8], catalog: &dyn Catalog) {
        let Some(request) = parse_info_request(data) else {
            self.reply(
                option,
                NBD_REP_ERR_INVALID,
                b"malformed NBD_OPT_INFO/NBD_OPT_GO data",
            );
            return;
        };
        let Some(info) = catalog.find(&request.name) else {
            let message = format!("no export named \"{}\"", escape_for_log(&request.name));
            self.reply(
                option,
                NBD_REP_ERR_UNKNOWN,
                truncate_str(&message).as_bytes(),
            );
            return;
        };
        if info.block_size.minimum_bytes > 1 && !request.wants_block_size {
            // The client did not promise to honour block sizes; this export cannot take
            // byte-granular requests (see the module documentation).
            let message = format!(
                "export \"{}\" needs requests aligned to {} bytes: ask for NBD_INFO_BLOCK_SIZE",
                escape_for_log(&info.name),
                info.block_size.minimum_bytes
            );
            self.reply(
                option,
                NBD_REP_ERR_BLOCK_SIZE_REQD,
                truncate_str(&message).as_bytes(),
            );
            return;
        }
        let flags = info.transmission_flags(self.structured_replies);
        let mut body = Vec::with_capacity(14);
        body.extend_from_slice(&NBD_INFO_EXPORT.to_be_bytes());
        body.extend_from_slice(&info.size_bytes.to_be_bytes());
        body.extend_from_slice(&flags.to_be_bytes());
        self.reply(option, NBD_REP_INFO, &body);

        // Sent whether or not requested: the server enforces these constraints either way,
        // and the spec lets a server send information the client did not ask for.
        body.clear();
        body.extend_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
        body.extend_from_slice(&info.block_size.minimum_bytes.to_be_bytes());
        body.extend_from_slice(&info.block_size.preferred_bytes.to_be_bytes());
        body.extend_from_slice(&info.block_size.maximum_payload_bytes.to_be_bytes());
        self.reply(option, NBD_REP_INFO, &body);

        if request.wants_name {
            body.clear();
            body.extend_from_slice(&NBD_INFO_NAME.to_be_bytes());
            body.extend_from_slice(info.name.as_bytes());
            self.reply(option, NBD_REP_INFO, &body);
        }
        if request.wants_description {
            if let Some(description) = &info.description {
                body.clear();
                body.extend_from_slice(&NBD_INFO_DESCRIPTION.to_be_bytes());
                body.extend_from_slice(truncate_str(description).as_bytes());
                self.reply(option, NBD_REP_INFO, &body);
            }
        }
        self.reply(option, NBD_REP_ACK, &[]);
        if option == NBD_OPT_GO {
            self.finish(Outcome::Transmission(Box::new(Negotiated {
                export: info,
                structured_replies: self.structured_replies,
                transmission_flags: flags,
                block_size_agreed: request.wants_block_size,
                tls: self.tls_active,
            })));
        }
    }

    fn finish(&mut self, outcome: Outcome) {
        self.state = State::Finished;
        self.outcome = Some(outcome);
    }
}

/// The message sent with an option refused before its data was read.
fn refusal_message(reply: u32) -> &'static str {
    match reply {
        NBD_REP_ERR_TLS_REQD => TLS_REQUIRED_MESSAGE,
        NBD_REP_ERR_TOO_BIG => "option data too large",
        _ => UNSUPPORTED_MESSAGE,
    }
}

struct InfoRequest {
    name: String,
    wants_name: bool,
    wants_description: bool,
    wants_block_size: bool,
}

/// Parses `NBD_OPT_INFO`/`NBD_OPT_GO` data: name length, name, request count, requests.
/// `None` if lengths disagree or the name is not a valid string.
fn parse_info_request(data: &[u8]) -> Option<InfoRequest> {
    let name_len = u32::from_be_bytes(data.get(0..4)?.try_into().ok()?) as usize;
    if name_len > MAX_STRING_BYTES || data.len() < 6 || name_len > data.len() - 6 {
        return None;
    }
    let name_bytes = &data[4..4 + name_len];
    let rest = &data[4 + name_len..];
    let count = u16::from_be_bytes([rest[0], rest[1]]) as usize;
    let requests = &rest[2..];
    if requests.len() != count * 2 {
        return None;
    }
    let name = std::str::from_utf8(name_bytes).ok()?;
    if name.contains('\0') {
        return None;
    }
    let mut request = InfoRequest {
        name: name.to_string(),
        wants_name: false,
        wants_description: false,
        wants_block_size: false,
    };
    for pair in requests.chunks_exact(2) {
        match u16::from_be_bytes([pair[0], pair[1]]) {
            NBD_INFO_NAME => request.wants_name = true,
            NBD_INFO_DESCRIPTION => request.wants_description = true,
            NBD_INFO_BLOCK_SIZE => request.wants_block_size = true,
            // NBD_INFO_EXPORT is always sent; unknown requests must be ignored.
            _ => {}
        }
    }
    Some(request)
}

/// Cuts a string to the spec's 4096-byte limit on a character boundary.
fn truncate_str(s: &str) -> &str {
    if s.len() <= MAX_STRING_BYTES {
        return s;
    }
    let mut end = MAX_STRING_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    struct OneExport(ExportInfo);

    impl Catalog for OneExport {
        fn find(&self, name: &str) -> Option<ExportInfo> {
            (name.is_empty() || name == self.0.name).then(|| self.0.clone())
        }
        fn list(&self) -> Vec<(String, Option<String>)> {
            vec![(self.0.name.clone(), self.0.description.clone())]
        }
    }

    fn catalog() -> OneExport {
        OneExport(ExportInfo {
            name: "disk".into(),
            description: Some("a test disk".into()),
            size_bytes: 1 << 20,
            block_size: BlockSize::default(),
            read_only: false,
            can_flush: true,
            can_fua: true,
            can_trim: true,
            can_zero: true,
            can_multi_conn: true,
        })
    }

    fn option(option: u32, data: &[u8]) -> Vec<u8> {
        let mut v = IHAVEOPT.to_be_bytes().to_vec();
        v.extend_from_slice(&option.to_be_bytes());
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
        v
    }

    fn go_data(name: &str, infos: &[u16]) -> Vec<u8> {
        let mut v = (name.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(name.as_bytes());
        v.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            v.extend_from_slice(&i.to_be_bytes());
        }
        v
    }

    /// Parses option replies: (option, type, data).
    fn replies(mut out: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
        let mut v = Vec::new();
        while !out.is_empty() {
            assert_eq!(
                u64::from_be_bytes(out[0..8].try_into().unwrap()),
                OPTION_REPLY_MAGIC
            );
            let opt = u32::from_be_bytes(out[8..12].try_into().unwrap());
            let typ = u32::from_be_bytes(out[12..16].try_into().unwrap());
            let len = u32::from_be_bytes(out[16..20].try_into().unwrap()) as usize;
            v.push((opt, typ, out[20..20 + len].to_vec()));
            out = &out[20 + len..];
        }
        v
    }

    #[test]
    fn greeting_is_fixed_newstyle_with_no_zeroes() {
        let mut hs = Handshake::new();
        let out = hs.take_output();
        assert_eq!(&out[0..8], b"NBDMAGIC");
        assert_eq!(&out[8..16], b"IHAVEOPT");
        assert_eq!(u16::from_be_bytes([out[16], out[17]]), 3);
        assert_eq!(hs.bytes_wanted(), 4);
    }

    #[test]
    fn go_byte_by_byte_reaches_transmission_and_stops_consuming() {
        let cat = catalog();
        let mut hs = Handshake::new();
        hs.take_output();
        let mut input = 3u32.to_be_bytes().to_vec();
        input.extend(option(NBD_OPT_STRUCTURED_REPLY, &[]));
        input.extend(option(
            NBD_OPT_GO,
            &go_data(
                "disk",
                &[NBD_INFO_BLOCK_SIZE, NBD_INFO_NAME, NBD_INFO_DESCRIPTION],
            ),
        ));
        input.extend_from_slice(b"trailing request bytes");
        let mut consumed = 0;
        while hs.outcome().is_none() {
            consumed += hs.receive(&input[consumed..consumed + 1], &cat).unwrap();
        }
        assert_eq!(consumed, input.len() - b"trailing request bytes".len());
        let r = replies(&hs.take_output());
        assert_eq!(r[0], (NBD_OPT_STRUCTURED_REPLY, NBD_REP_ACK, vec![]));
        let export = &r[1];
        assert_eq!(export.1, NBD_REP_INFO);
        assert_eq!(
            u16::from_be_bytes([export.2[0], export.2[1]]),
            NBD_INFO_EXPORT
        );
        assert_eq!(
            u64::from_be_bytes(export.2[2..10].try_into().unwrap()),
            1 << 20
        );
        let flags = u16::from_be_bytes([export.2[10], export.2[11]]);
        assert_ne!(flags & NBD_FLAG_SEND_DF, 0);
        assert_ne!(flags & NBD_FLAG_CAN_MULTI_CONN, 0);
        assert_eq!(flags & NBD_FLAG_READ_ONLY, 0);
        let block = &r[2].2;
        assert_eq!(
            u16::from_be_bytes([block[0], block[1]]),
            NBD_INFO_BLOCK_SIZE
        );
        assert_eq!(u32::from_be_bytes(block[2..6].try_into().unwrap()), 512);
        assert_eq!(&r[3].2[2..], b"disk");
        assert_eq!(&r[4].2[2..], b"a test disk");
        assert_eq!(r.last().unwrap().1, NBD_REP_ACK);
        match hs.outcome() {
            Some(Outcome::Transmission(n)) => {
                assert!(n.structured_replies);
                assert!(n.block_size_agreed);
                assert_eq!(n.transmission_flags, flags);
            }
            other => panic!("unexpected outcome {other:?}"),
        }
        assert_eq!(hs.receive(b"x", &cat), Err(HandshakeError::AlreadyFinished));
    }

    #[test]
    fn unknown_options_are_unsupported_and_skipped() {
        let cat = catalog();
        let mut hs = Handshake::new();
        hs.take_output();
        let mut input = 1u32.to_be_bytes().to_vec();
        input.extend(option(NBD_OPT_STARTTLS, &[]));
        input.extend(option(0xdead, &[7u8; 3000]));
        input.extend(option(NBD_OPT_SET_META_CONTEXT, &[1, 2, 3]));
        input.extend(option(NBD_OPT_LIST, &[1]));
        input.extend(option(NBD_OPT_LIST, &[]));
        input.extend(option(NBD_OPT_INFO, &go_data("nope", &[])));
        input.extend(option(NBD_OPT_INFO, &[0, 0, 0, 9, 1]));
        let used = hs.receive(&input, &cat).unwrap();
        assert_eq!(used, input.len());
        assert!(hs.buffered_bytes() == 0);
        let r = replies(&hs.take_output());
        let types: Vec<(u32, u32)> = r.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(
            types,
            vec![
                (NBD_OPT_STARTTLS, NBD_REP_ERR_POLICY),
                (0xdead, NBD_REP_ERR_UNSUP),
                (NBD_OPT_SET_META_CONTEXT, NBD_REP_ERR_UNSUP),
                (NBD_OPT_LIST, NBD_REP_ERR_INVALID),
                (NBD_OPT_LIST, NBD_REP_SERVER),
                (NBD_OPT_LIST, NBD_REP_ACK),
                (NBD_OPT_INFO, NBD_REP_ERR_UNKNOWN),
                (NBD_OPT_INFO, NBD_REP_ERR_INVALID),
            ]
        );
        assert_eq!(&r[4].2[0..4], &4u32.to_be_bytes());
        assert_eq!(&r[4].2[4..8], b"disk");
        assert!(hs.outcome().is_none());
    }

    #[test]
    fn export_name_honours_no_zeroes() {
        let cat = catalog();
        for (client_flags, expect_len) in [(1u32, 8 + 2 + 124), (3u32, 8 + 2)] {
            let mut hs = Handshake::new();
            hs.take_output();
            let mut input = client_flags.to_be_bytes().to_vec();
            input.extend(option(NBD_OPT_EXPORT_NAME, b"disk"));
            hs.receive(&input, &cat).unwrap();
            assert_eq!(hs.take_output().len(), expect_len);
            assert!(matches!(hs.outcome(), Some(Outcome::Transmission(_))));
        }
    }

    #[test]
    fn hostile_input_is_refused() {
        let cat = catalog();
        let mut hs = Handshake::new();
        assert_eq!(
            hs.receive(&8u32.to_be_bytes(), &cat),
            Err(HandshakeError::UnknownClientFlags(8))
        );
        let mut hs = Handshake::new();
        let mut input = 1u32.to_be_bytes().to_vec();
        input.extend_from_slice(b"GARBAGE!GARBAGE!");
        assert!(matches!(
            hs.receive(&input, &cat),
            Err(HandshakeError::BadOptionMagic(_))
        ));
        let mut hs = Handshake::new();
        let mut input = 1u32.to_be_bytes().to_vec();
        input.extend(option(NBD_OPT_EXPORT_NAME, b"missing"));
        assert!(matches!(
            hs.receive(&input, &cat),
            Err(HandshakeError::UnknownExport(_))
        ));
        let mut hs = Handshake::new();
        let mut input = 1u32.to_be_bytes().to_vec();
        input.extend_from_slice(&IHAVEOPT.to_be_bytes());
        input.extend_from_slice(&NBD_OPT_GO.to_be_bytes());
        input.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            hs.receive(&input, &cat),
            Err(HandshakeError::OptionTooLong { .. })
        ));
    }

    #[test]
    fn abort_is_acknowledged() {
        let cat = catalog();
        let mut hs = Handshake::new();
        hs.take_output();
        let mut input = 1u32.to_be_bytes().to_vec();
        input.extend(option(NBD_OPT_ABORT, &[1, 2]));
        hs.receive(&input, &cat).unwrap();
        let r = replies(&hs.take_output());
        assert_eq!(r, vec![(NBD_OPT_ABORT, NBD_REP_ACK, vec![])]);
        assert_eq!(hs.outcome(), Some(&Outcome::Aborted));
    }

    #[test]
    fn read_only_exports_advertise_no_writes() {
        let mut info = catalog().0;
        info.read_only = true;
        info.can_trim = false;
        info.can_fua = false;
        let flags = info.transmission_flags(false);
        assert_ne!(flags & NBD_FLAG_READ_ONLY, 0);
        assert_eq!(
            flags & (NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_DF),
            0
        );
    }

    fn negotiate_flags(hs: &mut Handshake, cat: &OneExport, flags: u32) {
        hs.take_output();
        assert_eq!(hs.receive(&flags.to_be_bytes(), cat), Ok(4));
    }

    fn types(out: &[u8]) -> Vec<(u32, u32)> {
        replies(out).iter().map(|r| (r.0, r.1)).collect()
    }

    #[test]
    fn go_and_info_without_a_block_size_request_are_refused_for_aligned_exports() {
        let cat = catalog();
        assert_eq!(cat.0.block_size.minimum_bytes, 512);
        let mut hs = Handshake::new();
        negotiate_flags(&mut hs, &cat, 3);
        let mut input = option(NBD_OPT_INFO, &go_data("disk", &[NBD_INFO_NAME]));
        input.extend(option(NBD_OPT_GO, &go_data("disk", &[])));
        hs.receive(&input, &cat).unwrap();
        let r = replies(&hs.take_output());
        assert_eq!(
            r.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(),
            vec![
                (NBD_OPT_INFO, NBD_REP_ERR_BLOCK_SIZE_REQD),
                (NBD_OPT_GO, NBD_REP_ERR_BLOCK_SIZE_REQD)
            ]
        );
        let message = String::from_utf8(r[1].2.clone()).unwrap();
        assert!(message.contains("512"), "{message}");
        assert!(hs.outcome().is_none(), "negotiation goes on");
        // Asking for block sizes gets the export.
        hs.receive(
            &option(NBD_OPT_GO, &go_data("disk", &[NBD_INFO_BLOCK_SIZE])),
            &cat,
        )
        .unwrap();
        assert_eq!(
            types(&hs.take_output()).last(),
            Some(&(NBD_OPT_GO, NBD_REP_ACK))
        );
        assert!(matches!(hs.outcome(), Some(Outcome::Transmission(n)) if n.block_size_agreed));

        // An export that takes byte-granular requests does not insist.
        let mut bytewise = catalog();
        bytewise.0.block_size.minimum_bytes = 1;
        let mut hs = Handshake::new();
        negotiate_flags(&mut hs, &bytewise, 3);
        hs.receive(&option(NBD_OPT_GO, &go_data("disk", &[])), &bytewise)
            .unwrap();
        assert!(matches!(hs.outcome(), Some(Outcome::Transmission(n)) if !n.block_size_agreed));
    }

    #[test]
    fn starttls_when_off_is_refused_by_policy() {
        let cat = catalog();
        let mut hs = Handshake::new();
        negotiate_flags(&mut hs, &cat, 3);
        hs.receive(&option(NBD_OPT_STARTTLS, &[]), &cat).unwrap();
        assert_eq!(
            types(&hs.take_output()),
            vec![(NBD_OPT_STARTTLS, NBD_REP_ERR_POLICY)]
        );
        assert!(!hs.poll_start_tls());
    }

    #[test]
    fn starttls_pauses_then_negotiation_continues_over_tls() {
        let cat = catalog();
        for mode in [TlsMode::On, TlsMode::Require] {
            let mut hs = Handshake::with_tls(mode);
            negotiate_flags(&mut hs, &cat, 3);
            let mut input = Vec::new();
            if mode == TlsMode::On {
                // Structured replies negotiated in clear do not survive STARTTLS.
                input.extend(option(NBD_OPT_STRUCTURED_REPLY, &[]));
            }
            input.extend(option(NBD_OPT_STARTTLS, &[]));
            let tls_hello = b"\x16\x03\x01 client hello";
            input.extend_from_slice(tls_hello);
            let used = hs.receive(&input, &cat).unwrap();
            assert_eq!(used, input.len() - tls_hello.len(), "stops at STARTTLS");
            assert!(hs.poll_start_tls());
            assert_eq!(hs.bytes_wanted(), 0);
            assert_eq!(
                types(&hs.take_output()).last(),
                Some(&(NBD_OPT_STARTTLS, NBD_REP_ACK))
            );
            assert_eq!(hs.receive(tls_hello, &cat), Err(HandshakeError::TlsPending));
            hs.tls_established();
            assert!(hs.tls_active() && !hs.poll_start_tls());
            let mut input = option(NBD_OPT_STARTTLS, &[]);
            input.extend(option(NBD_OPT_LIST, &[]));
            input.extend(option(NBD_OPT_GO, &go_data("disk", &[NBD_INFO_BLOCK_SIZE])));
            hs.receive(&input, &cat).unwrap();
            let t = types(&hs.take_output());
            assert_eq!(t[0], (NBD_OPT_STARTTLS, NBD_REP_ERR_INVALID), "{mode:?}");
            assert_eq!(t[1], (NBD_OPT_LIST, NBD_REP_SERVER));
            assert!(!t.iter().any(|&(_, typ)| typ == NBD_REP_ERR_TLS_REQD));
            match hs.outcome() {
                Some(Outcome::Transmission(n)) => {
                    assert!(n.tls);
                    assert!(!n.structured_replies);
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(hs.tls_refusals(), 0);
        }
    }

    #[test]
    fn required_tls_refuses_everything_but_starttls_and_abort() {
        let cat = catalog();
        let mut hs = Handshake::with_tls(TlsMode::Require);
        negotiate_flags(&mut hs, &cat, 3);
        let mut input = option(NBD_OPT_LIST, &[]);
        input.extend(option(NBD_OPT_GO, &go_data("disk", &[NBD_INFO_BLOCK_SIZE])));
        input.extend(option(NBD_OPT_STRUCTURED_REPLY, &[]));
        input.extend(option(0x4242, &[9u8; 5000]));
        input.extend(option(NBD_OPT_INFO, &[1, 2, 3]));
        let used = hs.receive(&input, &cat).unwrap();
        assert_eq!(used, input.len());
        assert_eq!(
            hs.buffered_bytes(),
            0,
            "refused option data is skipped, not held"
        );
        let r = replies(&hs.take_output());
        assert_eq!(r.len(), 5);
        for (reply, opt) in r.iter().zip([
            NBD_OPT_LIST,
            NBD_OPT_GO,
            NBD_OPT_STRUCTURED_REPLY,
            0x4242,
            NBD_OPT_INFO,
        ]) {
            assert_eq!((reply.0, reply.1), (opt, NBD_REP_ERR_TLS_REQD));
            assert_eq!(reply.2, TLS_REQUIRED_MESSAGE.as_bytes());
        }
        assert_eq!(hs.tls_refusals(), 5);
        assert!(hs.outcome().is_none());
        // EXPORT_NAME cannot be refused with an error: the session ends.
        let mut ended = Handshake::with_tls(TlsMode::Require);
        negotiate_flags(&mut ended, &cat, 3);
        assert_eq!(
            ended.receive(&option(NBD_OPT_EXPORT_NAME, b"disk"), &cat),
            Err(HandshakeError::TlsRequired)
        );
        // A client without fixed newstyle can never start TLS.
        let mut old = Handshake::with_tls(TlsMode::Require);
        old.take_output();
        assert_eq!(
            old.receive(&0u32.to_be_bytes(), &cat),
            Err(HandshakeError::TlsRequired)
        );
        // ABORT is still served.
        hs.receive(&option(NBD_OPT_ABORT, &[]), &cat).unwrap();
        assert_eq!(types(&hs.take_output()), vec![(NBD_OPT_ABORT, NBD_REP_ACK)]);
        assert_eq!(hs.outcome(), Some(&Outcome::Aborted));
    }

    #[test]
    fn optional_tls_lets_clear_clients_in() {
        let cat = catalog();
        let mut hs = Handshake::with_tls(TlsMode::On);
        negotiate_flags(&mut hs, &cat, 3);
        hs.receive(
            &option(NBD_OPT_GO, &go_data("disk", &[NBD_INFO_BLOCK_SIZE])),
            &cat,
        )
        .unwrap();
        assert!(matches!(hs.outcome(), Some(Outcome::Transmission(n)) if !n.tls));
        // Without fixed newstyle, TLS cannot be started; the client may go on in clear.
        let mut hs = Handshake::with_tls(TlsMode::On);
        hs.take_output();
        hs.receive(&0u32.to_be_bytes(), &cat).unwrap();
        hs.receive(&option(NBD_OPT_STARTTLS, &[]), &cat).unwrap();
        assert_eq!(
            types(&hs.take_output()),
            vec![(NBD_OPT_STARTTLS, NBD_REP_ERR_POLICY)]
        );
        // STARTTLS with data is malformed.
        let mut hs = Handshake::with_tls(TlsMode::On);
        negotiate_flags(&mut hs, &cat, 3);
        hs.receive(&option(NBD_OPT_STARTTLS, &[0]), &cat).unwrap();
        assert_eq!(
            types(&hs.take_output()),
            vec![(NBD_OPT_STARTTLS, NBD_REP_ERR_INVALID)]
        );
        assert!(!hs.poll_start_tls());
    }

    #[test]
    fn hostile_export_names_are_escaped_in_messages() {
        let cat = catalog();
        let mut hs = Handshake::new();
        negotiate_flags(&mut hs, &cat, 3);
        hs.receive(
            &option(
                NBD_OPT_INFO,
                &go_data("x\n\u{1b}[31m\"", &[NBD_INFO_BLOCK_SIZE]),
            ),
            &cat,
        )
        .unwrap();
        let r = replies(&hs.take_output());
        assert_eq!(r[0].1, NBD_REP_ERR_UNKNOWN);
        assert_eq!(
            String::from_utf8(r[0].2.clone()).unwrap(),
            "no export named \"x\\n\\u{1b}[31m\\\"\""
        );
        let e = HandshakeError::UnknownExport("a\nb".into()).to_string();
        assert!(!e.contains('\n'), "{e}");
    }
}
