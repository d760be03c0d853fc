//! raidkit-engine: the array engine, on-disk compatible with Linux md.
//!
//! - [`plan`]: the sans-IO core. Requests are split into per-stripe pieces and each piece is a
//!   small state machine that hands out member I/O and computes parity with
//!   `raidkit_parity`'s kernels (their only user in the engine); no threads, files or
//!   clock, so simulated drivers can reuse it unchanged.
//! - [`geometry`]: the array's geometry as the planner asks it, a thin wrapper around
//!   `raidkit_layout`'s typed geometry, where md's placement formulas live.
//! - [`mod@array`]: the real driver: [`Array`] runs the core on worker threads over [`Disk`]s and
//!   keeps md's superblocks (create, assemble, clean/dirty, faulty members, spares).
//! - `tasks`: background work (rebuild, replace, check/repair/resync, patrol), one type per
//!   task run by one loop; its public types are re-exported here.
//!
//! [`Disk`]: raidkit_disk::Disk

pub mod array;
pub mod bench;
mod buffers;
pub mod error;
pub mod events;
pub mod geometry;
mod membership;
mod meta;
pub mod plan;
mod pool;
pub mod ppl;
pub mod recon;
mod tasks;

pub use array::{
    shared_disks, Array, ArrayState, AssembleOptions, AssembleReport, ConsistencyPolicy,
    CreateOptions, EngineConfig, GatherCounters, GrowMirrorsReport, GrowSize, GrowSizeReport, Init,
    MemberHealth, MemberIo, MemberIoReading, MemberStatus, OnlineReshape, ReadAhead,
    ReadAheadCounters, ReshapeControl, ReshapeReport, ReshapeStatus, ReshapeTarget, StackOptions,
    StackSplit, StackStatus, Status, TaskKind, TaskOutcome, TaskProgress, TaskRates, TaskReport,
    WriteBackCounters, WritePolicy,
};
pub use error::{AbsentMember, EngineError, GrowRefusal, Result};
pub use events::{ArrayEvent, DirtyDegradedStart};
pub use geometry::Geo;
pub use meta::{read_superblock, write_superblock, FoundSuperblock};
