//! raidkit-bench (work in progress).
