//! One module per group of subcommands.

pub mod array;
pub mod bench;
pub mod control;
pub mod layout;
pub mod log;
pub mod serve;
pub mod sim;
pub mod spares;
