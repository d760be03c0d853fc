//! The deterministic data stream written into arrays inside the md oracle VM.
//!
//! Byte `p` (absolute device offset) of the stream for seed `s` is byte `p % 8` of the
//! little-endian word `mix64((p / 8) ^ mix64(s))`, where `mix64` is the SplitMix64 finaliser.
//! The same function is implemented in C by `tests/md-oracle/rkpattern.c`, which runs inside
//! the VM; the stream depends only on (seed, offset), so any range can be regenerated here
//! without replaying earlier bytes.

/// SplitMix64's output finaliser (a bijection on u64 with good avalanche).
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fill `buf` with the stream for `seed` starting at absolute byte `offset`.
pub fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    let key = mix64(seed);
    let mut pos = offset;
    let mut i = 0usize;
    while i < buf.len() {
        let word = mix64((pos / 8) ^ key).to_le_bytes();
        let in_word = (pos % 8) as usize; // below 8
        let take = (8 - in_word).min(buf.len() - i);
        buf[i..i + take].copy_from_slice(&word[in_word..in_word + take]);
        i += take;
        pos += take as u64;
    }
}

/// One write of the stream into an array: bytes `[offset_bytes, offset_bytes + len_bytes)` got
/// the stream for `seed` (at their absolute offsets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatternWrite {
    pub seed: u64,
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// The array contents expected after applying `writes` in order to an all-zero device of
/// `size_bytes` (bytes of a write beyond the end are ignored).
pub fn expected_contents(size_bytes: usize, writes: &[PatternWrite]) -> Vec<u8> {
    let mut out = vec![0u8; size_bytes];
    for w in writes {
        let start = usize::try_from(w.offset_bytes)
            .unwrap_or(usize::MAX)
            .min(size_bytes);
        let end_u64 = w.offset_bytes.saturating_add(w.len_bytes);
        let end = usize::try_from(end_u64)
            .unwrap_or(usize::MAX)
            .min(size_bytes);
        if start < end {
            fill(w.seed, start as u64, &mut out[start..end]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// First bytes of seed 1 at offset 0, as produced by rkpattern.c compiled with gcc
    /// (`rkpattern write f 1 0 4096; xxd f`), so the Rust and C generators cannot drift apart.
    #[test]
    fn matches_the_c_generator() {
        let mut buf = [0u8; 32];
        fill(1, 0, &mut buf);
        let want: [u8; 32] = [
            0x7d, 0x3a, 0x36, 0x0f, 0x09, 0x0e, 0xb4, 0x7a, 0x0a, 0x46, 0x00, 0x16, 0x6c, 0x68,
            0xec, 0x83, 0xeb, 0xae, 0x74, 0x29, 0x1c, 0xb0, 0x30, 0xef, 0x56, 0x89, 0xf3, 0x13,
            0xd1, 0x17, 0xbf, 0xd9,
        ];
        assert_eq!(buf, want);
    }

    #[test]
    fn any_subrange_equals_the_same_bytes_of_the_whole() {
        let mut whole = vec![0u8; 4096];
        fill(7, 1000, &mut whole);
        for (start, len) in [(0usize, 1usize), (3, 13), (8, 8), (1001, 77), (4095, 1)] {
            let mut part = vec![0u8; len];
            fill(7, 1000 + start as u64, &mut part);
            assert_eq!(
                part[..],
                whole[start..start + len],
                "start {start} len {len}"
            );
        }
    }

    #[test]
    fn seeds_differ() {
        let (mut a, mut b) = ([0u8; 64], [0u8; 64]);
        fill(1, 0, &mut a);
        fill(2, 0, &mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn later_writes_overwrite_earlier_ones() {
        let writes = [
            PatternWrite {
                seed: 1,
                offset_bytes: 0,
                len_bytes: 64,
            },
            PatternWrite {
                seed: 2,
                offset_bytes: 16,
                len_bytes: 8,
            },
        ];
        let got = expected_contents(80, &writes);
        let mut one = [0u8; 64];
        fill(1, 0, &mut one);
        let mut two = [0u8; 8];
        fill(2, 16, &mut two);
        assert_eq!(got[..16], one[..16]);
        assert_eq!(got[16..24], two);
        assert_eq!(got[24..64], one[24..]);
        assert_eq!(got[64..], [0u8; 16]);
    }
}
