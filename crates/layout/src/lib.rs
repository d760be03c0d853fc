//! raidkit-layout: pure geometry for every Linux md personality and layout. No I/O.
//!
//! # Model
//!
//! A [`Geometry`] is built once from the numbers md keeps in its superblock ([`MdParams`]:
//! level, layout, raid_disks, chunk size, usable sectors per member) and is then only asked
//! questions. All sectors are 512 bytes; member sectors are relative to the member's
//! data_offset; array sectors count from the start of the assembled array.
//!
//! - [`Geometry::map`]: array sector -> every [`Placement`] (member, member sector) holding it,
//!   plus, for raid4/5/6, the stripe, data index, P member and Q member.
//! - [`Geometry::unmap`]: (member, member sector) -> [`MemberChunkRole`]: data (with its array
//!   sector and copy index), P, Q, or unused. `unmap(map(x)) == x` for every sector and copy.
//! - [`Geometry::stripe_map`]: for raid4/5/6, which member holds each data index, P and Q, and
//!   the order of data blocks in the Q syndrome exactly as md computes it.
//! - For planners that ask these questions on every request, the same answers without
//!   allocating: [`Geometry::placements`] (every copy of a sector, one at a time, and how far
//!   the run goes) and [`Geometry::stripe`] (a copyable [`Stripe`] that names the member of a
//!   data index, of a syndrome slot, and the slot of a member); [`Geometry::scheme`] (copies
//!   or parity) and [`Geometry::survives`] (is every sector still readable without these
//!   members).
//! - [`Geometry::segments`] / [`Geometry::stripe_spans`]: split a request into chunk-bounded
//!   pieces, or group it by stripe for full-stripe versus partial-write planning.
//! - [`Geometry::array_sectors`]: the array size md reports.
//!
//! Each level lives in its own module, and each of md's layout decisions is one function there,
//! named after md's (raid0.c `create_strip_zones`/`map_sector`; raid5.c
//! `raid5_compute_sector`/`raid5_compute_blocknr`/`raid6_d0`/`set_syndrome_sources`; raid10.c
//! `setup_geo`/`calc_sectors`/`__raid10_find_phys`/`raid10_find_virt`), so each can be checked
//! against md line by line and against a running md as an oracle.
//!
//! Levels md has no native form for are expressed with md's own means: RAID 1E is raid10 near-2
//! on any device count ([`Geometry::raid1e`]); RAID 50/60 is an md raid0 over equal md raid5/6
//! arrays ([`StackedGeometry`]).
//!
//! A reshape in progress is [`Reshape`]: old geometry, new geometry and md's cursor.
//!
//! Invalid input is a [`GeometryError`] naming the rule md or mdadm would apply; nothing here
//! panics on input.

mod error;
mod geometry;
mod names;
pub mod parity;
mod raid0;
mod raid10;
mod reshape;
mod stacked;
mod table;

pub use error::GeometryError;
pub use geometry::{
    Geometry, Mapping, MdParams, MemberChunkRole, ParityPlacement, Placement, Placements,
    Raid1Geometry, Scheme, Segment, Segments, StripeMap, StripeSpan, MAX_RAID_DISKS,
    MIN_CHUNK_SECTORS_PARITY_RAID10,
};
pub use names::{Level, Raid0Layout, Raid10Layout, Raid5Algorithm, Raid6Algorithm};
pub use parity::{ParityAlgorithm, ParityGeometry, ParityMembers, Stripe, SyndromeSlots};
pub use raid0::{Raid0Geometry, Raid0Zone};
pub use raid10::Raid10Geometry;
pub use reshape::{Reshape, ReshapeSide};
pub use stacked::{StackedGeometry, StackedMapping, StackedPlacement};
pub use table::{describe, layout_table, stacked_layout_table, LayoutRow, LayoutTable};
