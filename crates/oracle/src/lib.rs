//! raidkit-oracle: Linux md as the compatibility oracle for raidkit.
//!
//! Real md runs in a small qemu VM (tests/md-oracle/run). This crate is the host side:
//! - [`matrix`]: the scenario rows (which arrays, written by md or by raidkit);
//! - [`plan`]: batches of arrays per VM boot, member images, job scripts;
//! - [`prepare`]: the raidkit side of the raidkit -> md direction (create, write, fail, stop);
//! - [`crash`]: member disks that drop writes, for the write journal's crash rows;
//! - [`pattern`]: the deterministic data stream, identical to the VM's rkpattern;
//! - [`records`]: the result records the VM writes back;
//! - [`superblock`]: the few v1.2 superblock fields needed, read from the member bytes;
//! - [`check`]: rebuilding md's arrays with raidkit-layout and raidkit-parity and comparing;
//! - [`assembled`]: comparing what md reports about raidkit's arrays with what raidkit wrote;
//! - [`journal`]: the write journal, both ways (md's journal read and replayed by raidkit,
//!   raidkit's by md);
//! - [`stack`]: RAID 50/60 stacks, both ways (md assembles raidkit's, raidkit reads md's).
//!
//! Nothing here prints; the `raidkit-oracle` binary does.

pub mod assembled;
pub mod check;
pub mod crash;
pub mod journal;
pub mod matrix;
pub mod pattern;
pub mod plan;
pub mod prepare;
pub mod records;
pub mod stack;
pub mod superblock;
