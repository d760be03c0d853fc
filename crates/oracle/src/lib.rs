//! raidkit-oracle: Linux md as the compatibility oracle for raidkit.
//!
//! Real md runs in a small qemu VM (tests/md-oracle/run). This crate is the host side:
//! - [`matrix`]: the scenario rows (which arrays md creates);
//! - [`plan`]: batches of arrays per VM boot, member images, job scripts;
//! - [`pattern`]: the deterministic data stream, identical to the VM's rkpattern;
//! - [`records`]: the result records the VM writes back;
//! - [`superblock`]: the few v1.2 superblock fields needed, read from the member bytes;
//! - [`check`]: rebuilding md's arrays with raidkit-layout and raidkit-parity and comparing.
//!
//! Nothing here prints; the `raidkit-oracle` binary does.

pub mod check;
pub mod matrix;
pub mod pattern;
pub mod plan;
pub mod records;
pub mod superblock;
