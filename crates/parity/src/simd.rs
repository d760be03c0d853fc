//! The loop bodies shared by every SIMD kernel, written once over a small vocabulary of
//! vector operations that each kernel module defines for its own instruction set:
//!
//! - `V`, `W`: the vector type and its width in bytes;
//! - `zero()`, `ld(ptr)`, `st(ptr, v)` (unaligned), `xor(a, b)`;
//! - `st_nt(ptr, v)` (streaming store, `W`-aligned) and `fence()` to order streaming stores;
//! - `Consts`, `consts()`: whatever `mul2` needs, built once per call;
//! - `mul2_xor(q, d, &Consts)`: `q·g ⊕ d`, the Horner step of md's `gen_syndrome`;
//! - `mul2(q, &Consts)`: `q·g`, for zero slots and md's "left side" of `xor_syndrome`;
//! - `MulC`, `mulc_new(c)`, `mulc(&MulC, v)`: multiply by a constant, for recovery.
//!
//! Every generated function processes a whole number of steps (`UNROLL` vectors, 2 or more
//! cache lines) from offset 0 and returns where it stopped; the caller finishes the tail with
//! the portable kernel. Callers guarantee that every non-empty slice is exactly as long as P
//! (and Q), which is what makes the raw pointer reads below in bounds, and that the target
//! features named in `$feat` are present on the running CPU.

macro_rules! simd_kernel {
    ($feat:literal) => {
        const UNROLL: usize = 4;
        const STEP: usize = UNROLL * W;

        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn ld_n(ptr: *const u8) -> [V; UNROLL] {
            let mut v = [zero(); UNROLL];
            for (u, x) in v.iter_mut().enumerate() {
                *x = ld(ptr.add(u * W));
            }
            v
        }

        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn st_n(ptr: *mut u8, v: [V; UNROLL]) {
            for (u, x) in v.iter().enumerate() {
                st(ptr.add(u * W), *x);
            }
        }

        /// Stores that bypass the cache when `nt` (the pointer is then `W`-aligned).
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn st_n_maybe_nt(ptr: *mut u8, v: [V; UNROLL], nt: bool) {
            if nt {
                for (u, x) in v.iter().enumerate() {
                    st_nt(ptr.add(u * W), *x);
                }
            } else {
                st_n(ptr, v);
            }
        }

        /// Whether parity written to `ptrs` over `len_bytes` should use non-temporal stores:
        /// large blocks (parity goes to a member device next, not back through the CPU),
        /// and every pointer aligned as the streaming store requires.
        fn want_nt(ptrs: &[*mut u8], len_bytes: usize) -> bool {
            len_bytes >= crate::simd::NT_MIN_BYTES && ptrs.iter().all(|p| (*p as usize) % W == 0)
        }

        /// P = ⊕ sources (or P ⊕= … when `accumulate`), for bytes `0..returned`.
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn gen_p(srcs: &[&[u8]], p: &mut [u8], accumulate: bool) -> usize {
            let end = p.len() / STEP * STEP;
            let pp = p.as_mut_ptr();
            let nt = !accumulate && end >= crate::simd::NT_MIN_BYTES_P && want_nt(&[pp], end);
            let mut i = 0;
            // Fast path for the usual case, every source real and P overwritten: start from
            // the first source and keep the zero-slot test out of the inner loop (at L2
            // speed the loop overhead per source shows).
            if let (false, Some((top, rest))) = (accumulate, srcs.split_last()) {
                if srcs.iter().all(|s| !s.is_empty()) {
                    // Source pointers in a plain array, highest first (as `gen_syndrome`
                    // walks them), two sources per pass. The order matters more than it
                    // should: on an AMD EPYC (Zen 4) 8 x 64 KiB in L2 ran at 110 GB/s
                    // lowest-first and 195 GB/s highest-first.
                    let mut ptrs = [std::ptr::null::<u8>(); 32];
                    if rest.len() <= ptrs.len() {
                        for (d, s) in ptrs.iter_mut().zip(rest.iter().rev()) {
                            *d = s.as_ptr();
                        }
                        let ptrs = &ptrs[..rest.len()];
                        let pairs = ptrs.len() / 2 * 2;
                        while i < end {
                            let mut acc = ld_n(top.as_ptr().add(i));
                            let mut j = 0;
                            while j < pairs {
                                let a = ld_n(ptrs[j].add(i));
                                let b = ld_n(ptrs[j + 1].add(i));
                                for u in 0..UNROLL {
                                    acc[u] = xor(acc[u], xor(a[u], b[u]));
                                }
                                j += 2;
                            }
                            if pairs < ptrs.len() {
                                let a = ld_n(ptrs[pairs].add(i));
                                for u in 0..UNROLL {
                                    acc[u] = xor(acc[u], a[u]);
                                }
                            }
                            st_n_maybe_nt(pp.add(i), acc, nt);
                            i += STEP;
                        }
                    }
                }
            }
            while i < end {
                let mut acc = if accumulate {
                    ld_n(pp.add(i))
                } else {
                    [zero(); UNROLL]
                };
                for s in srcs.iter().filter(|s| !s.is_empty()) {
                    let d = ld_n(s.as_ptr().add(i));
                    for u in 0..UNROLL {
                        acc[u] = xor(acc[u], d[u]);
                    }
                }
                st_n_maybe_nt(pp.add(i), acc, nt);
                i += STEP;
            }
            if nt {
                fence();
            }
            end
        }

        /// md's `gen_syndrome`: Horner's rule from the highest slot down.
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn gen_syndrome(
            data: &[&[u8]],
            p: &mut [u8],
            q: &mut [u8],
            streaming: bool,
        ) -> usize {
            let end = p.len() / STEP * STEP;
            let Some((top, rest)) = data.split_last() else {
                return 0;
            };
            let k = consts();
            let (pp, qp) = (p.as_mut_ptr(), q.as_mut_ptr());
            let nt = streaming && want_nt(&[pp, qp], end);
            let mut i = 0;
            // Fast path without zero slots (see `gen_p`).
            if data.iter().all(|s| !s.is_empty()) {
                while i < end {
                    let mut wp = ld_n(top.as_ptr().add(i));
                    let mut wq = wp;
                    for s in rest.iter().rev() {
                        let d = ld_n(s.as_ptr().add(i));
                        for u in 0..UNROLL {
                            wp[u] = xor(wp[u], d[u]);
                            wq[u] = mul2_xor(wq[u], d[u], &k);
                        }
                    }
                    st_n_maybe_nt(pp.add(i), wp, nt);
                    st_n_maybe_nt(qp.add(i), wq, nt);
                    i += STEP;
                }
            }
            while i < end {
                let mut wp = if top.is_empty() {
                    [zero(); UNROLL]
                } else {
                    ld_n(top.as_ptr().add(i))
                };
                let mut wq = wp;
                for s in rest.iter().rev() {
                    if s.is_empty() {
                        for x in wq.iter_mut() {
                            *x = mul2(*x, &k);
                        }
                        continue;
                    }
                    let d = ld_n(s.as_ptr().add(i));
                    for u in 0..UNROLL {
                        wp[u] = xor(wp[u], d[u]);
                        wq[u] = mul2_xor(wq[u], d[u], &k);
                    }
                }
                st_n_maybe_nt(pp.add(i), wp, nt);
                st_n_maybe_nt(qp.add(i), wq, nt);
                i += STEP;
            }
            if nt {
                fence();
            }
            end
        }

        /// md's `xor_syndrome(start, stop)`: P ⊕= ⊕ D_z and Q ⊕= ⊕ g^z·D_z over slots
        /// `start..=stop`; slots outside the range are not read.
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn xor_syndrome(
            data: &[&[u8]],
            start_slot: usize,
            stop_slot: usize,
            p: &mut [u8],
            q: &mut [u8],
        ) -> usize {
            let end = p.len() / STEP * STEP;
            let k = consts();
            let (pp, qp) = (p.as_mut_ptr(), q.as_mut_ptr());
            let top = data[stop_slot];
            let rest = &data[start_slot..stop_slot];
            let mut i = 0;
            while i < end {
                let mut wp = if top.is_empty() {
                    [zero(); UNROLL]
                } else {
                    ld_n(top.as_ptr().add(i))
                };
                let mut wq = wp;
                for s in rest.iter().rev() {
                    if s.is_empty() {
                        for x in wq.iter_mut() {
                            *x = mul2(*x, &k);
                        }
                        continue;
                    }
                    let d = ld_n(s.as_ptr().add(i));
                    for u in 0..UNROLL {
                        wp[u] = xor(wp[u], d[u]);
                        wq[u] = mul2_xor(wq[u], d[u], &k);
                    }
                }
                for _ in 0..start_slot {
                    for x in wq.iter_mut() {
                        *x = mul2(*x, &k);
                    }
                }
                let (op, oq) = (ld_n(pp.add(i)), ld_n(qp.add(i)));
                for u in 0..UNROLL {
                    wp[u] = xor(wp[u], op[u]);
                    wq[u] = xor(wq[u], oq[u]);
                }
                st_n(pp.add(i), wp);
                st_n(qp.add(i), wq);
                i += STEP;
            }
            end
        }

        /// See `reference::recov_2data`.
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn recov_2data(
            pbmul: u8,
            qmul: u8,
            p: &[u8],
            q: &[u8],
            dp: &mut [u8],
            dq: &mut [u8],
        ) -> usize {
            let end = p.len() / STEP * STEP;
            let (pbm, qm) = (mulc_new(pbmul), mulc_new(qmul));
            let (dpp, dqp) = (dp.as_mut_ptr(), dq.as_mut_ptr());
            let mut i = 0;
            while i < end {
                let (vp, vq) = (ld_n(p.as_ptr().add(i)), ld_n(q.as_ptr().add(i)));
                let (vdp, vdq) = (ld_n(dpp.add(i)), ld_n(dqp.add(i)));
                let mut a = [zero(); UNROLL];
                let mut b = [zero(); UNROLL];
                for u in 0..UNROLL {
                    let px = xor(vp[u], vdp[u]);
                    let qx = mulc(&qm, xor(vq[u], vdq[u]));
                    b[u] = xor(mulc(&pbm, px), qx);
                    a[u] = xor(b[u], px);
                }
                st_n(dpp.add(i), a);
                st_n(dqp.add(i), b);
                i += STEP;
            }
            end
        }

        /// See `reference::recov_datap`.
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn recov_datap(qmul: u8, q: &[u8], dq: &mut [u8], p: &mut [u8]) -> usize {
            let end = p.len() / STEP * STEP;
            let qm = mulc_new(qmul);
            let (dqp, pp) = (dq.as_mut_ptr(), p.as_mut_ptr());
            let mut i = 0;
            while i < end {
                let (vq, vdq, vp) = (ld_n(q.as_ptr().add(i)), ld_n(dqp.add(i)), ld_n(pp.add(i)));
                let mut d = [zero(); UNROLL];
                let mut np = [zero(); UNROLL];
                for u in 0..UNROLL {
                    d[u] = mulc(&qm, xor(vq[u], vdq[u]));
                    np[u] = xor(vp[u], d[u]);
                }
                st_n(dqp.add(i), d);
                st_n(pp.add(i), np);
                i += STEP;
            }
            end
        }
    };
}

pub(crate) use simd_kernel;

/// Smallest block for which `gen_p` and `gen_syndrome` write parity with non-temporal
/// (streaming) stores. Below it parity stays in cache, which wins for 4 KiB blocks; above it
/// streaming avoids reading each parity line before overwriting it and keeps the data in
/// cache (ISA-L streams always; measured with `raidkit bench parity`).
pub(crate) const NT_MIN_BYTES: usize = 16 << 10;

/// The same threshold for P alone (`gen_p`), higher: with one output stream the saved
/// read-for-ownership matters less, and on an AMD EPYC (Zen 4) streaming 64 KiB of P that is
/// read again soon cost 5 % (8 x 64 KiB warm: 0.87x ISA-L streaming, 0.92x cached); from
/// 1 MiB on streaming wins (cold 1.2x).
pub(crate) const NT_MIN_BYTES_P: usize = 128 << 10;

/// A safe handle for one SIMD kernel module: constructing it proves the CPU has the features
/// (`$detect`), and each method runs the SIMD body and finishes the tail portably.
macro_rules! simd_token {
    ($(#[$doc:meta])* $name:ident, $module:ident, $detect:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub(crate) struct $name(());

        impl $name {
            /// `Some` only when the running CPU has every feature the kernel uses.
            pub(crate) fn new() -> Option<Self> {
                if $detect {
                    Some($name(()))
                } else {
                    None
                }
            }

            pub(crate) fn gen_p(self, srcs: &[&[u8]], p: &mut [u8], accumulate: bool) {
                // SAFETY: `self` exists only if `new` detected the features; lengths were
                // validated by the dispatcher.
                let end = unsafe { $module::gen_p(srcs, p, accumulate) };
                crate::portable::gen_p(srcs, p, accumulate, end);
            }

            pub(crate) fn gen_syndrome(
                self,
                data: &[&[u8]],
                p: &mut [u8],
                q: &mut [u8],
                streaming: bool,
            ) {
                // SAFETY: as in `gen_p`.
                let end = unsafe { $module::gen_syndrome(data, p, q, streaming) };
                crate::portable::gen_syndrome(data, p, q, end);
            }

            pub(crate) fn xor_syndrome(
                self,
                data: &[&[u8]],
                start_slot: usize,
                stop_slot: usize,
                p: &mut [u8],
                q: &mut [u8],
            ) {
                // SAFETY: as in `gen_p`; the slot range was validated too.
                let end = unsafe { $module::xor_syndrome(data, start_slot, stop_slot, p, q) };
                crate::portable::xor_syndrome(data, start_slot, stop_slot, p, q, end);
            }

            pub(crate) fn recov_2data(
                self,
                pbmul: u8,
                qmul: u8,
                p: &[u8],
                q: &[u8],
                dp: &mut [u8],
                dq: &mut [u8],
            ) {
                // SAFETY: as in `gen_p`.
                let end = unsafe { $module::recov_2data(pbmul, qmul, p, q, dp, dq) };
                crate::portable::recov_2data(pbmul, qmul, p, q, dp, dq, end);
            }

            pub(crate) fn recov_datap(self, qmul: u8, q: &[u8], dq: &mut [u8], p: &mut [u8]) {
                // SAFETY: as in `gen_p`.
                let end = unsafe { $module::recov_datap(qmul, q, dq, p) };
                crate::portable::recov_datap(qmul, q, dq, p, end);
            }
        }
    };
}

pub(crate) use simd_token;
