//! The one error type of the crate: arguments that break a rule of the parity API.

use std::fmt;

/// Why a parity call refused its arguments. Nothing is written when one is returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParityError {
    /// A block's length differs from the parity block's (empty slices mean zero blocks and
    /// are exempt).
    LengthMismatch {
        slot: usize,
        len_bytes: usize,
        expected_len_bytes: usize,
    },
    /// RAID-6 needs at least one data slot.
    NoDataSlots,
    /// More data slots than g has distinct powers (md allows at most 254 data members).
    TooManyDataSlots { slots: usize, max_slots: usize },
    /// `xor_syndrome` needs `start <= stop < data slots`.
    BadSlotRange {
        start: usize,
        stop: usize,
        slots: usize,
    },
    /// RAID-6 survives at most two missing blocks.
    TooManyMissing { missing: usize },
    /// A missing index is not a slot of the stripe (data 0..n-1, P = n, Q = n+1).
    MissingOutOfRange { index: usize, blocks: usize },
    /// The same block was listed as missing twice.
    DuplicateMissing { index: usize },
    /// A missing block was given as an empty slice, so it has nowhere to be rebuilt.
    MissingIsZeroSlot { index: usize },
}

impl fmt::Display for ParityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParityError::LengthMismatch {
                slot,
                len_bytes,
                expected_len_bytes,
            } => write!(
                f,
                "block {slot} is {len_bytes} bytes but every block must be {expected_len_bytes} bytes (or empty for a zero block)"
            ),
            ParityError::NoDataSlots => f.write_str("a RAID-6 stripe needs at least one data slot"),
            ParityError::TooManyDataSlots { slots, max_slots } => write!(
                f,
                "{slots} data slots exceed the {max_slots} distinct coefficients g^i of GF(2^8)"
            ),
            ParityError::BadSlotRange { start, stop, slots } => write!(
                f,
                "slot range {start}..={stop} must satisfy start <= stop < {slots} (the data slots)"
            ),
            ParityError::TooManyMissing { missing } => write!(
                f,
                "{missing} missing blocks: RAID-6 can rebuild at most two"
            ),
            ParityError::MissingOutOfRange { index, blocks } => write!(
                f,
                "missing block {index} is not one of the stripe's {blocks} blocks (data, then P, then Q)"
            ),
            ParityError::DuplicateMissing { index } => {
                write!(f, "block {index} is listed as missing twice")
            }
            ParityError::MissingIsZeroSlot { index } => write!(
                f,
                "missing block {index} is an empty zero slot and cannot receive rebuilt data"
            ),
        }
    }
}

impl std::error::Error for ParityError {}
