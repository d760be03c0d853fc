//! The portable kernel: 64-bit SWAR, eight bytes per word, four words per step, as md's
//! lib/raid6/int.uc does it (`int64x4`). Multiplying a word by g = 2 doubles every byte and
//! folds 0x1d into the bytes whose top bit fell out. Runs on any target; SIMD kernels hand it
//! their tails. Each function covers bytes `start..len`; the last `len % 8` bytes go to the
//! reference kernel.
//!
//! Callers have validated that every non-empty source is as long as P (and Q).

use crate::{gf, reference};

const STEP: usize = 32;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
const LOW7_SHIFTED: u64 = 0xfefe_fefe_fefe_fefe;
const POLY: u64 = 0x1d1d_1d1d_1d1d_1d1d;

/// Multiply each byte of `v` by g = 2 (md's `SHLBYTE` and `MASK`).
#[inline(always)]
fn mul2(v: u64) -> u64 {
    let hi = v & HIGH_BITS;
    // 0xff in every byte whose top bit is set: (hi << 1) - (hi >> 7), borrow-free per byte.
    let mask = (hi << 1).wrapping_sub(hi >> 7);
    ((v << 1) & LOW7_SHIFTED) ^ (mask & POLY)
}

#[inline(always)]
fn load4(s: &[u8], i: usize) -> [u64; 4] {
    let mut w = [0u64; 4];
    for (k, word) in w.iter_mut().enumerate() {
        let at = i + 8 * k;
        let mut b = [0u8; 8];
        b.copy_from_slice(&s[at..at + 8]);
        *word = u64::from_ne_bytes(b);
    }
    w
}

#[inline(always)]
fn store4(s: &mut [u8], i: usize, w: [u64; 4]) {
    for (k, word) in w.iter().enumerate() {
        let at = i + 8 * k;
        s[at..at + 8].copy_from_slice(&word.to_ne_bytes());
    }
}

/// End of the SWAR-covered part of `start..len`.
fn body_end(start: usize, len: usize) -> usize {
    start + (len - start) / STEP * STEP
}

pub(crate) fn gen_p(srcs: &[&[u8]], p: &mut [u8], accumulate: bool, start: usize) {
    let end = body_end(start, p.len());
    let mut i = start;
    while i < end {
        let mut acc = if accumulate { load4(p, i) } else { [0; 4] };
        for s in srcs.iter().filter(|s| !s.is_empty()) {
            let d = load4(s, i);
            for k in 0..4 {
                acc[k] ^= d[k];
            }
        }
        store4(p, i, acc);
        i += STEP;
    }
    reference::gen_p(srcs, p, accumulate, end);
}

pub(crate) fn gen_syndrome(data: &[&[u8]], p: &mut [u8], q: &mut [u8], start: usize) {
    let end = body_end(start, p.len());
    let Some((top, rest)) = data.split_last() else {
        return;
    };
    let mut i = start;
    while i < end {
        let mut wp = if top.is_empty() {
            [0; 4]
        } else {
            load4(top, i)
        };
        let mut wq = wp;
        for s in rest.iter().rev() {
            if s.is_empty() {
                for w in wq.iter_mut() {
                    *w = mul2(*w);
                }
                continue;
            }
            let d = load4(s, i);
            for k in 0..4 {
                wp[k] ^= d[k];
                wq[k] = mul2(wq[k]) ^ d[k];
            }
        }
        store4(p, i, wp);
        store4(q, i, wq);
        i += STEP;
    }
    reference::gen_syndrome(data, p, q, end);
}

pub(crate) fn xor_syndrome(
    data: &[&[u8]],
    start_slot: usize,
    stop_slot: usize,
    p: &mut [u8],
    q: &mut [u8],
    start: usize,
) {
    let end = body_end(start, p.len());
    let mut i = start;
    while i < end {
        let top = data[stop_slot];
        let mut wp = if top.is_empty() {
            [0; 4]
        } else {
            load4(top, i)
        };
        let mut wq = wp;
        for s in data[start_slot..stop_slot].iter().rev() {
            if s.is_empty() {
                for w in wq.iter_mut() {
                    *w = mul2(*w);
                }
                continue;
            }
            let d = load4(s, i);
            for k in 0..4 {
                wp[k] ^= d[k];
                wq[k] = mul2(wq[k]) ^ d[k];
            }
        }
        // md's "left side optimisation": slots below start only shift Q.
        for _ in 0..start_slot {
            for w in wq.iter_mut() {
                *w = mul2(*w);
            }
        }
        let (op, oq) = (load4(p, i), load4(q, i));
        for k in 0..4 {
            wp[k] ^= op[k];
            wq[k] ^= oq[k];
        }
        store4(p, i, wp);
        store4(q, i, wq);
        i += STEP;
    }
    reference::xor_syndrome(data, start_slot, stop_slot, p, q, end);
}

/// Table-driven like md's `raid6_recov_intx1`: one row of the multiplication table per
/// constant, one lookup per byte.
pub(crate) fn recov_2data(
    pbmul: u8,
    qmul: u8,
    p: &[u8],
    q: &[u8],
    dp: &mut [u8],
    dq: &mut [u8],
    start: usize,
) {
    let pbt = &gf::MUL[pbmul as usize];
    let qt = &gf::MUL[qmul as usize];
    let len = p.len();
    let (p, q, dp, dq) = (
        &p[start..len],
        &q[start..len],
        &mut dp[start..len],
        &mut dq[start..len],
    );
    for (((&pb, &qb), dpb), dqb) in p.iter().zip(q).zip(dp.iter_mut()).zip(dq.iter_mut()) {
        let px = pb ^ *dpb;
        let db = pbt[px as usize] ^ qt[(qb ^ *dqb) as usize];
        *dqb = db;
        *dpb = db ^ px;
    }
}

pub(crate) fn recov_datap(qmul: u8, q: &[u8], dq: &mut [u8], p: &mut [u8], start: usize) {
    let qt = &gf::MUL[qmul as usize];
    let len = p.len();
    let (q, dq, p) = (&q[start..len], &mut dq[start..len], &mut p[start..len]);
    for ((&qb, dqb), pb) in q.iter().zip(dq.iter_mut()).zip(p.iter_mut()) {
        let d = qt[(qb ^ *dqb) as usize];
        *dqb = d;
        *pb ^= d;
    }
}
