//! raidkit-bench: benchmarks that measure and return figures; the CLI prints them.
//!
//! - [`parity`]: raidkit's parity kernels against Intel ISA-L, which is loaded at run time
//!   ([`isal`]) so that nothing in raidkit links it.
//! - [`rebuild`]: rebuild speed against a plain sequential read of one member, and the share
//!   of foreground throughput left while a rebuild runs.

pub mod isal;
pub mod lab;
pub mod parity;
pub mod rebuild;
