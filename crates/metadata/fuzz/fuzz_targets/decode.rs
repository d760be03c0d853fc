//! Fuzz target: every md metadata decoder either refuses its input with an error or accepts
//! it and re-encodes exactly the bytes it read (superblock, bitmap superblock), and never
//! panics (bad-block log, the examine report of a damaged superblock).
//!
//! Run from crates/metadata/fuzz: `cargo +nightly fuzz run decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raidkit_metadata::{
    badblocks, BitmapSuper, ExamineReport, Location, Superblock, SuperblockVersion,
};

fuzz_target!(|data: &[u8]| {
    // The first 9 bytes choose where the superblock is taken to have been read from.
    if data.len() < 9 {
        return;
    }
    let version = SuperblockVersion::ALL[usize::from(data[0]) % 3];
    let mut dev = [0u8; 8];
    dev.copy_from_slice(&data[1..9]);
    let location = Location::new(version, u64::from_le_bytes(dev));
    let body = &data[9..];

    if let Ok(sb) = Superblock::decode(body, location) {
        let enc = sb.encode();
        assert_eq!(&enc[..], &body[..enc.len()], "superblock re-encoding differs");
    }
    if let Ok(bms) = BitmapSuper::decode(body) {
        assert_eq!(&bms.encode()[..], &body[..256], "bitmap superblock re-encoding differs");
    }
    let _ = badblocks::decode(&body[..body.len().min(4096) & !7], data[0]);
    // The diagnostic path accepts more; it must still never panic.
    if let Ok(ex) = Superblock::examine_bytes(body, Some(location)) {
        let _ = ExamineReport::from_examined(&ex, Some(location.device_sectors), None).to_text();
    }
});
