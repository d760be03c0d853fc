//! raidkit-engine (work in progress).
