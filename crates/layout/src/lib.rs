//! raidkit-layout (work in progress).
