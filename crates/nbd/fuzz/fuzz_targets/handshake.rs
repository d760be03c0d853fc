//! Arbitrary bytes, in arbitrary chunks, into the sans-IO negotiation: it must never panic,
//! must keep its buffering bounded, and must consume nothing after negotiation ends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raidkit_nbd::handshake::{Catalog, ExportInfo, Handshake, MAX_OPTION_DATA_BYTES};
use raidkit_nbd::BlockSize;

struct One;

impl Catalog for One {
    fn find(&self, name: &str) -> Option<ExportInfo> {
        (name.is_empty() || name == "disk").then(|| ExportInfo {
            name: "disk".into(),
            description: None,
            size_bytes: 1 << 20,
            block_size: BlockSize::default(),
            read_only: false,
            can_flush: true,
            can_fua: true,
            can_trim: true,
            can_zero: true,
            can_multi_conn: true,
        })
    }
    fn list(&self) -> Vec<(String, Option<String>)> {
        vec![("disk".into(), None)]
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, mut rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1);
    let mut hs = Handshake::new();
    while !rest.is_empty() {
        let n = chunk.min(rest.len());
        match hs.receive(&rest[..n], &One) {
            Ok(used) => {
                assert!(used <= n);
                assert!(hs.buffered_bytes() <= MAX_OPTION_DATA_BYTES + 16);
                hs.take_output();
                if hs.outcome().is_some() {
                    return;
                }
                assert_eq!(used, n);
                rest = &rest[n..];
            }
            Err(_) => return,
        }
    }
});
