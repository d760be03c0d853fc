//! Arbitrary request headers against an arbitrary session: anything the codec lets through
//! must be in range, aligned and within the payload limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raidkit_nbd::proto::{NBD_FLAG_HAS_FLAGS, NBD_FLAG_READ_ONLY, REQUEST_HEADER_BYTES};
use raidkit_nbd::transmission::{Command, Decision, RequestHeader, Session, MAX_DISCARD_BYTES};

fuzz_target!(|data: &[u8]| {
    if data.len() < REQUEST_HEADER_BYTES + 12 {
        return;
    }
    let mut raw = [0u8; REQUEST_HEADER_BYTES];
    raw.copy_from_slice(&data[..REQUEST_HEADER_BYTES]);
    let Ok(header) = RequestHeader::parse(&raw) else {
        return;
    };
    let extra = &data[REQUEST_HEADER_BYTES..];
    let session = Session {
        size_bytes: u64::from(u32::from_be_bytes([extra[0], extra[1], extra[2], extra[3]])) << 9,
        minimum_block_bytes: 1 << (extra[4] % 17),
        maximum_payload_bytes: u32::from_be_bytes([extra[5], extra[6], extra[7], extra[8]]).max(1),
        transmission_flags: u16::from_be_bytes([extra[9], extra[10]]) | NBD_FLAG_HAS_FLAGS,
        structured_replies: extra[11] & 1 != 0,
    };
    match session.decide(&header) {
        Decision::Execute(r) => {
            let end = r.offset.checked_add(u64::from(r.len_bytes)).unwrap();
            assert!(end <= session.size_bytes);
            assert_eq!(r.offset % u64::from(session.minimum_block_bytes), 0);
            if matches!(r.command, Command::Read | Command::Write { .. }) {
                assert!(r.len_bytes <= session.maximum_payload_bytes);
            }
            if matches!(r.command, Command::Write { .. }) {
                assert_eq!(session.transmission_flags & NBD_FLAG_READ_ONLY, 0);
            }
        }
        Decision::Reject { discard_bytes, .. } => assert!(discard_bytes <= MAX_DISCARD_BYTES),
        Decision::Disconnect(_) => {}
    }
});
