//! raidkit-nbd (work in progress).
