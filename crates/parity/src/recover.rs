//! Rebuilding missing blocks of a RAID-6 stripe in place, the way md's lib/raid6/recov.c
//! does it: the failed buffers first receive P and Q computed with the failed slots as zero
//! blocks, then one pass combines them with the surviving P and Q. No scratch buffer is
//! allocated; the only working memory is an array of slice references on the stack.
//!
//! Block indices: data slots `0..n`, P = `n`, Q = `n + 1`.

use crate::kernel::{Kernel, MAX_DATA_SLOTS};
use crate::{gf, ParityError};

/// The stripe split into read-only sources and the buffers that will be written.
struct Split<'a> {
    /// Data slots, with the holes as empty (zero) blocks; one spare entry for P as a source.
    srcs: [&'a [u8]; MAX_DATA_SLOTS + 1],
    p: &'a mut [u8],
    q: &'a mut [u8],
    /// The data blocks listed in `holes`, in that order.
    holes: [&'a mut [u8]; 2],
}

fn split<'a>(blocks: &'a mut [&mut [u8]], holes: &[usize]) -> Split<'a> {
    let n = blocks.len() - 2;
    let (data, pq) = blocks.split_at_mut(n);
    let (p, q) = pq.split_at_mut(1);
    let mut out = Split {
        srcs: [&[]; MAX_DATA_SLOTS + 1],
        p: &mut *p[0],
        q: &mut *q[0],
        holes: [&mut [], &mut []],
    };
    for (z, blk) in data.iter_mut().enumerate() {
        match holes.iter().position(|&h| h == z) {
            Some(h) => out.holes[h] = &mut **blk,
            None => out.srcs[z] = &**blk,
        }
    }
    out
}

pub(crate) fn recover(
    k: Kernel,
    blocks: &mut [&mut [u8]],
    missing: &[usize],
) -> Result<(), ParityError> {
    let total = blocks.len();
    if total < 3 {
        return Err(ParityError::NoDataSlots);
    }
    let n = total - 2;
    if n > MAX_DATA_SLOTS {
        return Err(ParityError::TooManyDataSlots {
            slots: n,
            max_slots: MAX_DATA_SLOTS,
        });
    }
    if missing.len() > 2 {
        return Err(ParityError::TooManyMissing {
            missing: missing.len(),
        });
    }
    let len_bytes = blocks[n].len();
    for (slot, blk) in blocks.iter().enumerate() {
        let may_be_zero_slot = slot < n;
        if blk.len() != len_bytes && !(may_be_zero_slot && blk.is_empty()) {
            return Err(ParityError::LengthMismatch {
                slot,
                len_bytes: blk.len(),
                expected_len_bytes: len_bytes,
            });
        }
    }
    for &m in missing {
        if m >= total {
            return Err(ParityError::MissingOutOfRange {
                index: m,
                blocks: total,
            });
        }
        if blocks[m].len() != len_bytes {
            return Err(ParityError::MissingIsZeroSlot { index: m });
        }
    }
    let (pi, qi) = (n, n + 1);
    match *missing {
        [] => Ok(()),
        [a, b] if a == b => Err(ParityError::DuplicateMissing { index: a }),
        [m] => {
            recover_one(k, blocks, m);
            Ok(())
        }
        [x, y] => {
            let (a, b) = (x.min(y), x.max(y));
            if b < n {
                // Two data blocks: md's raid6_2data_recov.
                let s = split(blocks, &[a, b]);
                let [dp, dq] = s.holes;
                k.raw_gen_syndrome(&s.srcs[..n], dp, dq, false);
                let pbmul = gf::EXI[b - a];
                let qmul = gf::inv(gf::exp(a) ^ gf::exp(b));
                k.raw_recov_2data(pbmul, qmul, s.p, s.q, dp, dq);
            } else if b == pi && a < n {
                // Data and P: md's raid6_datap_recov.
                let s = split(blocks, &[a]);
                let [dq, _] = s.holes;
                k.raw_gen_syndrome(&s.srcs[..n], s.p, dq, false);
                k.raw_recov_datap(gf::inv(gf::exp(a)), s.q, dq, s.p);
            } else if b == qi && a < n {
                // Data and Q: the data block from P, then Q (and P, which comes out the same,
                // because the rebuilt block makes the data XOR to P exactly).
                recover_one(k, blocks, a);
                let s = split(blocks, &[]);
                k.raw_gen_syndrome(&s.srcs[..n], s.p, s.q, true);
            } else {
                // P and Q.
                let s = split(blocks, &[]);
                k.raw_gen_syndrome(&s.srcs[..n], s.p, s.q, true);
            }
            Ok(())
        }
        _ => Err(ParityError::TooManyMissing {
            missing: missing.len(),
        }),
    }
}

/// One missing block; arguments already validated.
fn recover_one(k: Kernel, blocks: &mut [&mut [u8]], m: usize) {
    let n = blocks.len() - 2;
    if m < n {
        // A data block is the XOR of P and the other data blocks.
        let mut s = split(blocks, &[m]);
        let [dst, _] = s.holes;
        s.srcs[n] = &*s.p;
        k.raw_gen_p(&s.srcs[..n + 1], dst, false);
    } else if m == n {
        let s = split(blocks, &[]);
        k.raw_gen_p(&s.srcs[..n], s.p, false);
    } else {
        // Q alone, leaving P exactly as it was even if it disagrees with the data:
        // Q = 0, then (P, Q) ⊕= syndrome, then P ⊕= data again.
        let s = split(blocks, &[]);
        s.q.fill(0);
        k.raw_xor_syndrome(&s.srcs[..n], 0, n - 1, s.p, s.q);
        k.raw_gen_p(&s.srcs[..n], s.p, true);
    }
}
