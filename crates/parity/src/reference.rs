//! The reference kernel: one byte at a time, straight from the definitions
//! P = ⊕ D_z and Q = ⊕ g^z·D_z, with table multiplies and no Horner scheme, so it shares no
//! trick with the fast kernels it checks. Every function works on bytes `start..len`.
//!
//! Callers (the dispatcher) have validated lengths; an empty source is a zero block.

use crate::gf;

pub(crate) fn gen_p(srcs: &[&[u8]], p: &mut [u8], accumulate: bool, start: usize) {
    for i in start..p.len() {
        let mut acc = if accumulate { p[i] } else { 0 };
        for s in srcs.iter().filter(|s| !s.is_empty()) {
            acc ^= s[i];
        }
        p[i] = acc;
    }
}

pub(crate) fn gen_syndrome(data: &[&[u8]], p: &mut [u8], q: &mut [u8], start: usize) {
    for i in start..p.len() {
        let (mut wp, mut wq) = (0u8, 0u8);
        for (z, d) in data.iter().enumerate().filter(|(_, d)| !d.is_empty()) {
            wp ^= d[i];
            wq ^= gf::mul(gf::exp(z), d[i]);
        }
        p[i] = wp;
        q[i] = wq;
    }
}

pub(crate) fn xor_syndrome(
    data: &[&[u8]],
    start_slot: usize,
    stop_slot: usize,
    p: &mut [u8],
    q: &mut [u8],
    start: usize,
) {
    for i in start..p.len() {
        let in_range =
            |(z, d): &(usize, &&[u8])| (start_slot..=stop_slot).contains(z) && !d.is_empty();
        for (z, d) in data.iter().enumerate().filter(in_range) {
            p[i] ^= d[i];
            q[i] ^= gf::mul(gf::exp(z), d[i]);
        }
    }
}

/// On entry `dp`, `dq` hold P and Q computed with both failed data slots as zero; on exit
/// they hold the failed blocks a (lower slot) and b. `pbmul = (g^(b-a) + 1)^-1`,
/// `qmul = (g^a + g^b)^-1`, as in md's `raid6_2data_recov`.
pub(crate) fn recov_2data(
    pbmul: u8,
    qmul: u8,
    p: &[u8],
    q: &[u8],
    dp: &mut [u8],
    dq: &mut [u8],
    start: usize,
) {
    for i in start..p.len() {
        let px = p[i] ^ dp[i];
        let qx = gf::mul(qmul, q[i] ^ dq[i]);
        let db = gf::mul(pbmul, px) ^ qx;
        dq[i] = db;
        dp[i] = db ^ px;
    }
}

/// On entry `dq` holds Q computed with the failed slot as zero and `p` holds P computed the
/// same way; on exit `dq` is the failed block and `p` the full P (md's `raid6_datap_recov`).
pub(crate) fn recov_datap(qmul: u8, q: &[u8], dq: &mut [u8], p: &mut [u8], start: usize) {
    for i in start..p.len() {
        let d = gf::mul(qmul, q[i] ^ dq[i]);
        dq[i] = d;
        p[i] ^= d;
    }
}
