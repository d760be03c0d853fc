//! Parity arithmetic the planner needs: XOR (P) and md's RAID-6 Q syndrome over GF(2^8) with
//! polynomial 0x11d and generator 2 (lib/raid6), plus recovery of one or two lost blocks.
//!
//! Owns only the math on equal-length byte blocks; which block is which is the caller's (slots
//! in md's Q order). Invariants: every block passed to one call has the same length; a `None`
//! slot is an all-zero block (DDF layouts). The word-wise multiply-by-2 is the SWAR form of
//! lib/raid6 int.uc, so it is exact, not an approximation.

const LOW: u64 = 0x0101_0101_0101_0101;

#[inline]
fn mul2(v: u64) -> u64 {
    let hi = (v >> 7) & LOW;
    ((v << 1) & !LOW) ^ (hi * 0x1d)
}

/// dst ^= src (through raidkit-parity's dispatched kernel; the word loop is the fallback).
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    if raidkit_parity::xor_into(dst, &[src]).is_ok() {
        return;
    }
    xor_into_words(dst, src)
}

fn xor_into_words(dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    let (d8, dr) = dst.split_at_mut(dst.len() / 8 * 8);
    let (s8, sr) = src.split_at(src.len() / 8 * 8);
    for (d, s) in d8.chunks_exact_mut(8).zip(s8.chunks_exact(8)) {
        let v = u64::from_ne_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
            ^ u64::from_ne_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]);
        d.copy_from_slice(&v.to_ne_bytes());
    }
    for (d, s) in dr.iter_mut().zip(sr) {
        *d ^= s;
    }
}

#[inline]
fn load(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[i..i + 8]);
    u64::from_ne_bytes(w)
}

/// P and Q of `slots` (md's slot order; `None` is a zero block). `q` may be `None` (RAID 4/5).
/// Uses raidkit-parity's dispatched (SIMD) kernels; the portable word loop below is the
/// fallback and the reference the tests compare with.
pub fn gen_pq(slots: &[Option<&[u8]>], p: &mut [u8], q: Option<&mut [u8]>) {
    let data: Vec<&[u8]> = slots.iter().map(|s| s.unwrap_or(&[])).collect();
    let done = match q {
        Some(q) => {
            if raidkit_parity::gen_syndrome(&data, p, q).is_ok() {
                return;
            }
            gen_pq_words(slots, p, Some(q));
            true
        }
        None => raidkit_parity::gen_p(&data, p).is_ok(),
    };
    if !done {
        gen_pq_words(slots, p, None);
    }
}

/// The portable word-at-a-time P+Q (lib/raid6 int.uc).
pub fn gen_pq_words(slots: &[Option<&[u8]>], p: &mut [u8], mut q: Option<&mut [u8]>) {
    let len = p.len();
    let words = len / 8 * 8;
    let mut i = 0;
    while i < words {
        let mut wp = 0u64;
        let mut wq = 0u64;
        for s in slots.iter().rev() {
            wq = mul2(wq);
            if let Some(b) = s {
                let v = load(b, i);
                wp ^= v;
                wq ^= v;
            }
        }
        p[i..i + 8].copy_from_slice(&wp.to_ne_bytes());
        if let Some(q) = q.as_deref_mut() {
            q[i..i + 8].copy_from_slice(&wq.to_ne_bytes());
        }
        i += 8;
    }
    for i in words..len {
        let mut wp = 0u8;
        let mut wq = 0u8;
        for s in slots.iter().rev() {
            wq = gf_mul(wq, 2);
            if let Some(b) = s {
                wp ^= b[i];
                wq ^= b[i];
            }
        }
        p[i] = wp;
        if let Some(q) = q.as_deref_mut() {
            q[i] = wq;
        }
    }
}

/// XOR of the slots only (P); faster than [`gen_pq`] when there is no Q.
pub fn gen_p(blocks: &[&[u8]], p: &mut [u8]) {
    if raidkit_parity::gen_p(blocks, p).is_ok() {
        return;
    }
    p.fill(0);
    for b in blocks {
        xor_into(p, b);
    }
}

/// dst ^= every source, in one pass over dst (the dispatched kernel; word loop as fallback).
pub fn xor_sources_into(dst: &mut [u8], sources: &[&[u8]]) {
    if raidkit_parity::xor_into(dst, sources).is_ok() {
        return;
    }
    for s in sources {
        xor_into_words(dst, s);
    }
}

/// P ^= the data slots and Q ^= g^slot times each (md's `xor_syndrome`, the read-modify-write
/// step); empty slots are zero and skipped.
pub fn xor_syndrome_into(slots: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    let Some(start) = slots.iter().position(|s| !s.is_empty()) else {
        return;
    };
    let stop = slots.iter().rposition(|s| !s.is_empty()).unwrap_or(start);
    if raidkit_parity::xor_syndrome(slots, start, stop, p, q).is_ok() {
        return;
    }
    for (slot, s) in slots.iter().enumerate().filter(|(_, s)| !s.is_empty()) {
        xor_into_words(p, s);
        mul_xor_into(q, s, gf_pow2(slot));
    }
}

/// Rebuilds the `missing` blocks of `blocks` (data slots, then P, then Q, as
/// [`raidkit_parity::recover`]) in place.
///
/// Panics when the blocks break the kernel's rules (unequal lengths, more than two missing):
/// the planner builds them from one band, so that would be a bug here, and going on would
/// hand out wrong data.
pub fn recover_in_place(blocks: &mut [&mut [u8]], missing: &[usize]) {
    if let Err(e) = raidkit_parity::recover(blocks, missing) {
        panic!("band recovery refused by the parity kernel: {e}");
    }
}

/// Multiplication in GF(2^8) mod 0x11d.
pub fn gf_mul(mut a: u8, mut b: u8) -> u8 {
    let mut r = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            r ^= a;
        }
        a = (a << 1) ^ if a & 0x80 != 0 { 0x1d } else { 0 };
        b >>= 1;
    }
    r
}

fn gf_pow2(e: usize) -> u8 {
    let mut r = 1u8;
    for _ in 0..(e % 255) {
        r = gf_mul(r, 2);
    }
    r
}

fn gf_inv(a: u8) -> u8 {
    // a^254 = a^-1 for a != 0
    let mut r = 1u8;
    for _ in 0..254 {
        r = gf_mul(r, a);
    }
    r
}

/// dst ^= c * src, byte-wise through a 256-entry table for `c`.
pub fn mul_xor_into(dst: &mut [u8], src: &[u8], c: u8) {
    if c == 0 {
        return;
    }
    if c == 1 {
        xor_into(dst, src);
        return;
    }
    let mut table = [0u8; 256];
    for (x, t) in table.iter_mut().enumerate() {
        *t = gf_mul(x as u8, c);
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= table[*s as usize];
    }
}

/// dst = c * dst
pub fn mul_in_place(dst: &mut [u8], c: u8) {
    let mut table = [0u8; 256];
    for (x, t) in table.iter_mut().enumerate() {
        *t = gf_mul(x as u8, c);
    }
    for d in dst.iter_mut() {
        *d = table[*d as usize];
    }
}

/// Read-modify-write update of P and Q for data in slot `slot` changing by `delta` (old ^ new).
pub fn apply_delta(delta: &[u8], slot: usize, p: Option<&mut [u8]>, q: Option<&mut [u8]>) {
    let (p, q) = match (p, q) {
        (Some(p), Some(q)) => {
            let data: Vec<&[u8]> = (0..=slot)
                .map(|i| if i == slot { delta } else { &[][..] })
                .collect();
            if raidkit_parity::xor_syndrome(&data, slot, slot, p, q).is_ok() {
                return;
            }
            (Some(p), Some(q))
        }
        other => other,
    };
    if let Some(p) = p {
        xor_into(p, delta);
    }
    if let Some(q) = q {
        mul_xor_into(q, delta, gf_pow2(slot));
    }
}

/// What is lost in one stripe band, in md's slot terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// One data slot; recovered from P.
    DataViaP(usize),
    /// One data slot; recovered from Q (P is gone too, or this is the choice).
    DataViaQ(usize),
    /// Two data slots `a < b`; recovered from P and Q.
    TwoData(usize, usize),
}

/// Recovers lost data slots in place. `slots[i]` holds slot i's bytes (lost slots hold anything,
/// they are overwritten); zero slots (DDF) are `None` entries in `zero`. `p`/`q` are the surviving
/// parity blocks the recovery needs.
pub fn recover(
    slots: &mut [Vec<u8>],
    zero: &[bool],
    lost: Lost,
    p: Option<&[u8]>,
    q: Option<&[u8]>,
) {
    if recover_dispatched(slots, zero, lost, p, q) {
        return;
    }
    recover_portable(slots, zero, lost, p, q)
}

/// Recovery through raidkit-parity's dispatched kernels (md's raid6 recovery routines). Its
/// block list is data slots (zero slots as empty slices), then P, then Q; a missing parity
/// block is regenerated, which is how RAID 4/5 (no Q) uses it.
fn recover_dispatched(
    slots: &mut [Vec<u8>],
    zero: &[bool],
    lost: Lost,
    p: Option<&[u8]>,
    q: Option<&[u8]>,
) -> bool {
    let len = slots.iter().map(|s| s.len()).max().unwrap_or(0);
    let n = slots.len();
    let mut pbuf = p.map(|b| b.to_vec()).unwrap_or_else(|| vec![0u8; len]);
    let mut qbuf = q.map(|b| b.to_vec()).unwrap_or_else(|| vec![0u8; len]);
    let missing: Vec<usize> = match lost {
        Lost::DataViaP(x) if q.is_some() => vec![x],
        Lost::DataViaP(x) => vec![x, n + 1],
        Lost::DataViaQ(x) => vec![x, n],
        Lost::TwoData(a, b) => vec![a, b],
    };
    for &m in &missing {
        if m < n {
            slots[m].resize(len, 0);
        }
    }
    let mut blocks: Vec<&mut [u8]> = Vec::with_capacity(n + 2);
    for (i, s) in slots.iter_mut().enumerate() {
        if zero[i] {
            blocks.push(&mut []);
        } else {
            blocks.push(&mut s[..]);
        }
    }
    blocks.push(&mut pbuf);
    blocks.push(&mut qbuf);
    raidkit_parity::recover(&mut blocks, &missing).is_ok()
}

fn recover_portable(
    slots: &mut [Vec<u8>],
    zero: &[bool],
    lost: Lost,
    p: Option<&[u8]>,
    q: Option<&[u8]>,
) {
    let len = slots.iter().map(|s| s.len()).max().unwrap_or(0);
    match lost {
        Lost::DataViaP(x) => {
            // p is required for this case by construction in the planner.
            let Some(p) = p else { return };
            let mut acc = p.to_vec();
            for (i, s) in slots.iter().enumerate() {
                if i != x && !zero[i] {
                    xor_into(&mut acc, s);
                }
            }
            slots[x] = acc;
        }
        Lost::DataViaQ(x) => {
            let Some(q) = q else { return };
            slots[x] = vec![0; len];
            let mut qx = vec![0u8; len];
            {
                let refs: Vec<Option<&[u8]>> = slots
                    .iter()
                    .enumerate()
                    .map(|(i, s)| if zero[i] { None } else { Some(s.as_slice()) })
                    .collect();
                let mut pdummy = vec![0u8; len];
                gen_pq(&refs, &mut pdummy, Some(&mut qx));
            }
            xor_into(&mut qx, q);
            mul_in_place(&mut qx, gf_inv(gf_pow2(x)));
            slots[x] = qx;
        }
        Lost::TwoData(a, b) => {
            let (Some(p), Some(q)) = (p, q) else { return };
            slots[a] = vec![0; len];
            slots[b] = vec![0; len];
            let mut pxy = vec![0u8; len];
            let mut qxy = vec![0u8; len];
            {
                let refs: Vec<Option<&[u8]>> = slots
                    .iter()
                    .enumerate()
                    .map(|(i, s)| if zero[i] { None } else { Some(s.as_slice()) })
                    .collect();
                gen_pq(&refs, &mut pxy, Some(&mut qxy));
            }
            xor_into(&mut pxy, p); // P + Pxy
            xor_into(&mut qxy, q); // Q + Qxy
            let ga = gf_pow2(a);
            let gb = gf_pow2(b);
            let pmul = gf_inv(gf_pow2(b - a) ^ 1); // gfexi[b-a]
            let qmul = gf_inv(ga ^ gb);
            let mut ptab = [0u8; 256];
            let mut qtab = [0u8; 256];
            for x in 0..256 {
                ptab[x] = gf_mul(x as u8, pmul);
                qtab[x] = gf_mul(x as u8, qmul);
            }
            let mut db = vec![0u8; len];
            let mut da = vec![0u8; len];
            for i in 0..len {
                // md: Db = pbmul[P+Pxy] ^ qmul[Q+Qxy] with the multipliers for slots a < b
                db[i] = ptab[pxy[i] as usize] ^ qtab[qxy[i] as usize];
                da[i] = db[i] ^ pxy[i];
            }
            slots[a] = da;
            slots[b] = db;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn reference_q(slots: &[Vec<u8>]) -> Vec<u8> {
        let len = slots[0].len();
        (0..len)
            .map(|i| {
                slots
                    .iter()
                    .enumerate()
                    .fold(0u8, |acc, (s, b)| acc ^ gf_mul(gf_pow2(s), b[i]))
            })
            .collect()
    }

    #[test]
    fn q_matches_the_definition() {
        let slots: Vec<Vec<u8>> = (0..6).map(|s| block(s, 37)).collect();
        let refs: Vec<Option<&[u8]>> = slots.iter().map(|s| Some(s.as_slice())).collect();
        let mut p = vec![0; 37];
        let mut q = vec![0; 37];
        gen_pq(&refs, &mut p, Some(&mut q));
        assert_eq!(q, reference_q(&slots));
        let mut p3 = vec![0; 37];
        let mut q3 = vec![0; 37];
        gen_pq_words(&refs, &mut p3, Some(&mut q3));
        assert_eq!(
            (&p3, &q3),
            (&p, &q),
            "portable loop and dispatched kernel agree"
        );
        let mut p2 = vec![0; 37];
        gen_p(
            &slots.iter().map(|s| s.as_slice()).collect::<Vec<_>>(),
            &mut p2,
        );
        assert_eq!(p, p2);
    }

    #[test]
    fn recover_every_single_and_pair() {
        let n = 5;
        let len = 29;
        let orig: Vec<Vec<u8>> = (0..n).map(|s| block(s as u64 + 10, len)).collect();
        let zero = vec![false; n];
        let refs: Vec<Option<&[u8]>> = orig.iter().map(|s| Some(s.as_slice())).collect();
        let mut p = vec![0; len];
        let mut q = vec![0; len];
        gen_pq(&refs, &mut p, Some(&mut q));
        for a in 0..n {
            for lost in [Lost::DataViaP(a), Lost::DataViaQ(a)] {
                let mut s = orig.clone();
                s[a] = vec![0xee; len];
                assert!(
                    recover_dispatched(&mut s, &zero, lost, Some(&p), Some(&q)),
                    "the dispatched kernel handles {lost:?}"
                );
                assert_eq!(s, orig, "{lost:?}");
                let mut s = orig.clone();
                s[a] = vec![0xee; len];
                recover_portable(&mut s, &zero, lost, Some(&p), Some(&q));
                assert_eq!(s, orig, "portable {lost:?}");
            }
            for b in a + 1..n {
                let mut s = orig.clone();
                s[a] = vec![0x55; len];
                s[b] = vec![0xaa; len];
                assert!(recover_dispatched(
                    &mut s,
                    &zero,
                    Lost::TwoData(a, b),
                    Some(&p),
                    Some(&q)
                ));
                assert_eq!(s, orig, "pair {a},{b}");
            }
        }
    }

    #[test]
    fn delta_update_equals_regeneration() {
        let len = 40;
        let mut slots: Vec<Vec<u8>> = (0..4).map(|s| block(s, len)).collect();
        let refs: Vec<Option<&[u8]>> = slots.iter().map(|s| Some(s.as_slice())).collect();
        let mut p = vec![0; len];
        let mut q = vec![0; len];
        gen_pq(&refs, &mut p, Some(&mut q));
        let new = block(99, len);
        let mut delta = slots[2].clone();
        xor_into(&mut delta, &new);
        apply_delta(&delta, 2, Some(&mut p), Some(&mut q));
        slots[2] = new;
        assert_eq!(q, reference_q(&slots));
    }
}
