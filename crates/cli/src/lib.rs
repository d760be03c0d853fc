//! raidkit-cli's library: what the `raidkit` binary's commands share, so that the binary keeps
//! only flag parsing and wiring.
//!
//! - [`common`]: opening members, assembling, the CLI's error mapping and exit codes, size,
//!   level, layout and chunk parsing;
//! - [`view`]: an array's status as `detail` prints it;
//! - [`server`]: the server behind `raidkit serve` (NBD export of arrays, control socket and
//!   its client, global spares, the server's log, the orderly shutdown);
//! - [`error`]: [`CliError`] and the documented [`ExitCode`]s.
//!
//! Modules here import downwards only (`server` uses `common` and `view`, which use `error`),
//! and the binary's command modules import from here rather than from each other.

pub mod common;
pub mod config;
pub mod error;
pub mod server;
pub mod view;

pub use error::{CliError, ExitCode};
