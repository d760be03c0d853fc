//! raidkit-nbd: serves byte ranges (arrays, files, memory) as Network Block Device exports.
//!
//! Layers, following the NBD protocol (NetworkBlockDevice/nbd doc/proto.md):
//! - [`proto`]: wire constants and the NBD error values;
//! - [`handshake`]: sans-IO fixed newstyle negotiation (`NBD_OPT_GO`, `INFO`, `LIST`,
//!   `EXPORT_NAME`, `ABORT`, `STRUCTURED_REPLY`; anything else is `NBD_REP_ERR_UNSUP`);
//! - [`transmission`]: sans-IO request validation and reply encoding;
//! - [`export`]: the [`Export`] trait an array implements, with [`MemoryExport`] and
//!   [`FileExport`];
//! - [`server`]: sockets and threads around the codec: [`Server::builder`] and [`serve`],
//!   limits (connections, in-flight bytes, idle time) and the events that report refusals;
//! - [`tls`]: `NBD_OPT_STARTTLS` with rustls: [`TlsConfig`] from PEM files, the TLS stream
//!   the workers of a connection share;
//! - [`escape`]: [`escape_for_log`], the one way client-supplied text reaches a message;
//! - [`signal`]: SIGINT/SIGTERM as a shutdown flag.
//!
//! The codec never does I/O, so it is tested by feeding it bytes, including fuzzed ones; the
//! server is tested against real clients (nbdinfo, qemu-io, nbdcopy, fio).
//!
//! Serving exports until SIGINT/SIGTERM, then flushing them (what `raidkit serve` does):
//!
//! ```no_run
//! use raidkit_nbd::{Export, Listener, MemoryExport, Server};
//! use std::sync::Arc;
//!
//! let listener = Listener::bind_unix("/run/raidkit/nbd.sock".as_ref())?;
//! let array: Arc<dyn Export> = Arc::new(MemoryExport::new(1 << 30));
//! let server = Server::builder()
//!     .export("md0", array)
//!     .threads_per_connection(8)
//!     .build()?;
//! let shutdown = raidkit_nbd::shutdown_on_signals()?;
//! let report = server.serve(&listener, shutdown)?;
//! if report.all_flushed() {
//!     // every export was flushed after the last connection closed: mark arrays clean
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Requiring TLS with client certificates, closing idle connections, and logging every
//! refusal with its reason and peer:
//!
//! ```no_run
//! use raidkit_nbd::{Listener, MemoryExport, Server, ServerEvent, TlsConfig, TlsMode};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let tls = TlsConfig::from_pem_files(
//!     "/etc/pki/nbd/server-cert.pem".as_ref(),
//!     "/etc/pki/nbd/server-key.pem".as_ref(),
//!     Some("/etc/pki/nbd/ca-cert.pem".as_ref()),
//! )?;
//! let listener = Listener::bind_unix_with("/run/raidkit/nbd.sock".as_ref(), 0o660, Some(6))?;
//! let server = Server::builder()
//!     .export("md0", Arc::new(MemoryExport::new(1 << 30)))
//!     .tls(TlsMode::Require, Some(Arc::new(tls)))
//!     .idle_timeout(Some(Duration::from_secs(600)))
//!     .observer(Arc::new(|event: &ServerEvent<'_>| {
//!         if let ServerEvent::Refused { peer, reason, .. } = event {
//!             eprintln!("refused {peer}: {reason}");
//!         }
//!     }))
//!     .build()?;
//! server.serve(&listener, raidkit_nbd::shutdown_on_signals()?)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod client;
pub mod escape;
pub mod export;
pub mod handshake;
pub mod member;
pub mod proto;
pub mod server;
pub mod signal;
pub mod tls;
pub mod transmission;

pub use escape::escape_for_log;
pub use export::{BlockSize, BlockSizeError, Export, FileExport, MemoryExport, ReadOnly};
pub use handshake::TlsMode;
pub use proto::NbdError;
pub use server::{
    serve, ConnectionEnd, Listener, Observer, Peer, RefusalReason, ServeReport, Server,
    ServerBuilder, ServerConfig, ServerError, ServerEvent, Transport,
};
pub use signal::shutdown_on_signals;
pub use tls::{TlsConfig, TlsError};
