//! Arbitrary bytes, in arbitrary chunks, into the sans-IO negotiation in any TLS mode: it
//! must never panic, must keep its buffering bounded, must consume nothing after negotiation
//! ends or after acknowledging STARTTLS (the fuzzer then plays a TLS handshake that
//! succeeded), and with TLS required must never reach the transmission phase without TLS.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raidkit_nbd::handshake::{
    Catalog, ExportInfo, Handshake, Outcome, TlsMode, MAX_OPTION_DATA_BYTES,
};
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
    // Low bits: chunk size; the two top bits: the TLS mode.
    let tls = [
        TlsMode::Off,
        TlsMode::On,
        TlsMode::Require,
        TlsMode::Require,
    ][usize::from(chunk >> 6)];
    let chunk = usize::from(chunk & 0x3f).max(1);
    let mut hs = Handshake::with_tls(tls);
    while !rest.is_empty() {
        let n = chunk.min(rest.len());
        match hs.receive(&rest[..n], &One) {
            Ok(used) => {
                assert!(used <= n);
                assert!(hs.buffered_bytes() <= MAX_OPTION_DATA_BYTES + 16);
                hs.take_output();
                if let Some(outcome) = hs.outcome() {
                    if let Outcome::Transmission(negotiated) = outcome {
                        assert!(tls != TlsMode::Require || negotiated.tls);
                        assert!(tls != TlsMode::Off || !negotiated.tls);
                    }
                    return;
                }
                if hs.poll_start_tls() {
                    assert!(tls != TlsMode::Off && !hs.tls_active());
                    hs.tls_established();
                    rest = &rest[used..];
                    continue;
                }
                assert_eq!(used, n);
                rest = &rest[n..];
            }
            Err(_) => return,
        }
    }
});
