//! Predict before you buy: a performance and reliability model of raidkit arrays on the
//! drives of the catalog, and a planner that ranks configurations.
//!
//! Two methods give one answer format ([`analytic::Figure`]): the analytic one, closed forms
//! per level over each drive's service curves (instant), and the emulated one, raidkit's own
//! engine over emulated drives in real time ([`emulated`]).

pub mod analytic;
pub mod drive;
pub mod level;
pub mod system;

pub use analytic::{predict, Figure};
pub use level::{Level, Placement};
pub use system::{Load, RaidIn, System};
pub mod emulated;
pub mod reliability;
pub mod report;
pub mod validate;
