//! raidkit-parity (work in progress).
