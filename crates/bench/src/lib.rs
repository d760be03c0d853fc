//! raidkit-bench: benchmarks that measure and return figures; the CLI prints them.
//!
//! - [`parity`]: raidkit's parity kernels against Intel ISA-L, which is loaded at run time
//!   ([`isal`]) so that nothing in raidkit links it.

pub mod isal;
pub mod parity;
