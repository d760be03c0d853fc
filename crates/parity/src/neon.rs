//! aarch64 NEON kernel (md's `raid6_neonx4` shape): 4 × 16 bytes per step, `vqtbl1q_u8`
//! nibble tables for constant multiplies. NEON is part of the aarch64 baseline, but the token
//! still asks the runtime so the dispatcher treats every SIMD kernel alike.
//!
//! The vector primitives are written once (`neon_primitives!`) over whatever provides the
//! `v…q_u8` intrinsics in scope: `std::arch::aarch64` on aarch64, and in x86-64 test builds a
//! scalar model of the same intrinsics (`model`), so the NEON kernel's logic is exercised
//! against the reference kernel on machines without NEON too.

macro_rules! neon_primitives {
    ($feat:literal) => {
        type V = uint8x16_t;
        const W: usize = 16;

        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn zero() -> V {
            vdupq_n_u8(0)
        }
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn ld(p: *const u8) -> V {
            vld1q_u8(p)
        }
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn st(p: *mut u8, v: V) {
            vst1q_u8(p, v)
        }
        /// NEON has no streaming-store intrinsic; a plain store keeps the shared bodies simple.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn st_nt(p: *mut u8, v: V) {
            vst1q_u8(p, v)
        }
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn fence() {}
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn xor(a: V, b: V) -> V {
            veorq_u8(a, b)
        }

        struct Consts {
            poly: V,
        }
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn consts() -> Consts {
            Consts {
                poly: vdupq_n_u8(crate::gf::POLY_LOW),
            }
        }
        /// An arithmetic shift by 7 spreads each top bit over its byte.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn mul2(v: V, k: &Consts) -> V {
            let top = vreinterpretq_u8_s8(vshrq_n_s8::<7>(vreinterpretq_s8_u8(v)));
            veorq_u8(vshlq_n_u8::<1>(v), vandq_u8(top, k.poly))
        }
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn mul2_xor(v: V, d: V, k: &Consts) -> V {
            veorq_u8(mul2(v, k), d)
        }

        struct MulC {
            lo: V,
            hi: V,
            mask: V,
        }
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn mulc_new(c: u8) -> MulC {
            let mut lo = [0u8; 16];
            let mut hi = [0u8; 16];
            for n in 0..16u8 {
                lo[n as usize] = crate::gf::mul(c, n);
                hi[n as usize] = crate::gf::mul(c, n << 4);
            }
            MulC {
                lo: vld1q_u8(lo.as_ptr()),
                hi: vld1q_u8(hi.as_ptr()),
                mask: vdupq_n_u8(0x0f),
            }
        }
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn mulc(m: &MulC, v: V) -> V {
            let l = vandq_u8(v, m.mask);
            let h = vshrq_n_u8::<4>(v);
            veorq_u8(vqtbl1q_u8(m.lo, l), vqtbl1q_u8(m.hi, h))
        }
    };
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    neon_primitives!("neon");
    crate::simd::simd_kernel!("neon");
}

#[cfg(target_arch = "aarch64")]
crate::simd::simd_token!(
    /// NEON: 4 × 16 bytes per step.
    Neon,
    neon,
    std::arch::is_aarch64_feature_detected!("neon")
);

/// A scalar model of the NEON intrinsics the kernel uses, following Arm's definitions.
#[cfg(all(test, target_arch = "x86_64"))]
#[allow(non_camel_case_types)]
mod model {
    #[derive(Clone, Copy, Debug)]
    pub struct uint8x16_t([u8; 16]);
    #[derive(Clone, Copy, Debug)]
    pub struct int8x16_t([i8; 16]);

    fn zip(a: uint8x16_t, b: uint8x16_t, f: impl Fn(u8, u8) -> u8) -> uint8x16_t {
        uint8x16_t(std::array::from_fn(|i| f(a.0[i], b.0[i])))
    }
    pub fn vdupq_n_u8(v: u8) -> uint8x16_t {
        uint8x16_t([v; 16])
    }
    pub unsafe fn vld1q_u8(p: *const u8) -> uint8x16_t {
        uint8x16_t(std::ptr::read_unaligned(p as *const [u8; 16]))
    }
    pub unsafe fn vst1q_u8(p: *mut u8, a: uint8x16_t) {
        std::ptr::write_unaligned(p as *mut [u8; 16], a.0)
    }
    pub fn veorq_u8(a: uint8x16_t, b: uint8x16_t) -> uint8x16_t {
        zip(a, b, |x, y| x ^ y)
    }
    pub fn vandq_u8(a: uint8x16_t, b: uint8x16_t) -> uint8x16_t {
        zip(a, b, |x, y| x & y)
    }
    pub fn vshlq_n_u8<const N: i32>(a: uint8x16_t) -> uint8x16_t {
        uint8x16_t(a.0.map(|x| x << N))
    }
    pub fn vshrq_n_u8<const N: i32>(a: uint8x16_t) -> uint8x16_t {
        uint8x16_t(a.0.map(|x| x >> N))
    }
    /// Arithmetic shift: the sign bit fills in.
    pub fn vshrq_n_s8<const N: i32>(a: int8x16_t) -> int8x16_t {
        int8x16_t(a.0.map(|x| x >> N))
    }
    pub fn vreinterpretq_u8_s8(a: int8x16_t) -> uint8x16_t {
        uint8x16_t(a.0.map(|x| x as u8))
    }
    pub fn vreinterpretq_s8_u8(a: uint8x16_t) -> int8x16_t {
        int8x16_t(a.0.map(|x| x as i8))
    }
    /// Table lookup; indices of 16 and above give 0.
    pub fn vqtbl1q_u8(t: uint8x16_t, idx: uint8x16_t) -> uint8x16_t {
        uint8x16_t(idx.0.map(|i| t.0.get(i as usize).copied().unwrap_or(0)))
    }
}

/// The NEON kernel's code over the model; "sse2" is only a target feature every x86-64 has.
#[cfg(all(test, target_arch = "x86_64"))]
mod neon_model {
    use super::model::*;

    neon_primitives!("sse2");
    crate::simd::simd_kernel!("sse2");
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::neon_model;
    use crate::{gf, portable, reference};

    fn rnd(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    fn block(state: &mut u64, len: usize) -> Vec<u8> {
        (0..len).map(|_| rnd(state) as u8).collect()
    }

    /// Every NEON body against the reference kernel, tails finished by the portable kernel as
    /// the real token does, over lengths that hit the streaming-store threshold too.
    #[test]
    fn neon_kernel_logic_matches_reference_on_a_model_of_its_intrinsics() {
        let mut st = 0x0123_4567_89ab_cdefu64;
        for round in 0..60usize {
            let len = match round % 6 {
                0 => (16 << 10) + 48,
                _ => (rnd(&mut st) % 3000) as usize,
            };
            let n = 1 + (rnd(&mut st) % 12) as usize;
            let data: Vec<Vec<u8>> = (0..n)
                .map(|z| {
                    if round % 3 == 0 && z == n / 2 {
                        Vec::new()
                    } else {
                        block(&mut st, len)
                    }
                })
                .collect();
            let refs: Vec<&[u8]> = data.iter().map(|b| b.as_slice()).collect();
            let (mut want_p, mut want_q) = (vec![0; len], vec![0; len]);
            reference::gen_syndrome(&refs, &mut want_p, &mut want_q, 0);

            let (mut p, mut q) = (vec![0xA5; len], vec![0xA5; len]);
            // SAFETY: every non-empty block is `len` bytes long; the model needs no CPU feature.
            let end = unsafe { neon_model::gen_syndrome(&refs, &mut p, &mut q, true) };
            portable::gen_syndrome(&refs, &mut p, &mut q, end);
            assert!(p == want_p && q == want_q, "gen_syndrome, len {len}, n {n}");

            let mut gp = vec![0xA5; len];
            // SAFETY: as above.
            let end = unsafe { neon_model::gen_p(&refs, &mut gp, false) };
            portable::gen_p(&refs, &mut gp, false, end);
            assert!(gp == want_p, "gen_p, len {len}");

            let start = (rnd(&mut st) as usize) % n;
            let stop = start + (rnd(&mut st) as usize) % (n - start);
            let (mut xp, mut xq) = (want_q.clone(), want_p.clone());
            let (mut rp, mut rq) = (want_q.clone(), want_p.clone());
            // SAFETY: as above; start <= stop < n.
            let end = unsafe { neon_model::xor_syndrome(&refs, start, stop, &mut xp, &mut xq) };
            portable::xor_syndrome(&refs, start, stop, &mut xp, &mut xq, end);
            reference::xor_syndrome(&refs, start, stop, &mut rp, &mut rq, 0);
            assert!(
                xp == rp && xq == rq,
                "xor_syndrome {start}..={stop}, len {len}"
            );

            let (a, b) = (0, 1 + (rnd(&mut st) as usize) % 20);
            let (pbmul, qmul) = (gf::EXI[b - a], gf::inv(gf::exp(a) ^ gf::exp(b)));
            let (mut dp, mut dq) = (block(&mut st, len), block(&mut st, len));
            let (mut rdp, mut rdq) = (dp.clone(), dq.clone());
            // SAFETY: as above.
            let end =
                unsafe { neon_model::recov_2data(pbmul, qmul, &want_p, &want_q, &mut dp, &mut dq) };
            portable::recov_2data(pbmul, qmul, &want_p, &want_q, &mut dp, &mut dq, end);
            reference::recov_2data(pbmul, qmul, &want_p, &want_q, &mut rdp, &mut rdq, 0);
            assert!(dp == rdp && dq == rdq, "recov_2data, len {len}");

            let (mut d, mut pp) = (dp.clone(), dq.clone());
            let (mut rd, mut rpp) = (dp.clone(), dq.clone());
            // SAFETY: as above.
            let end = unsafe { neon_model::recov_datap(qmul, &want_q, &mut d, &mut pp) };
            portable::recov_datap(qmul, &want_q, &mut d, &mut pp, end);
            reference::recov_datap(qmul, &want_q, &mut rd, &mut rpp, 0);
            assert!(d == rd && pp == rpp, "recov_datap, len {len}");
        }
    }
}
