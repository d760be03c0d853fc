//! raidkit-disk (work in progress).
