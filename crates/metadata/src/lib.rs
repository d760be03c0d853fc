//! raidkit-metadata (work in progress).
