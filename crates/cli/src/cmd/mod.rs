//! One module per group of subcommands.

pub mod array;
pub mod bench;
pub mod layout;
pub mod model;
pub mod monitor;
pub mod scan;
pub mod serve;
pub mod sim;
pub mod task;
pub mod units;
