//! raidkit-sim (work in progress).
