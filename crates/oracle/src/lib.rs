//! raidkit-oracle (work in progress).
