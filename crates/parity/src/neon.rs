//! aarch64 NEON kernel (md's `raid6_neonx4` shape): 4 × 16 bytes per step, `vqtbl1q_u8`
//! nibble tables for constant multiplies. NEON is part of the aarch64 baseline, but the token
//! still asks the runtime so the dispatcher treats every SIMD kernel alike.

use crate::simd::simd_token;

mod neon {
    use std::arch::aarch64::*;

    type V = uint8x16_t;
    const W: usize = 16;

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn zero() -> V {
        vdupq_n_u8(0)
    }
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn ld(p: *const u8) -> V {
        vld1q_u8(p)
    }
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn st(p: *mut u8, v: V) {
        vst1q_u8(p, v)
    }
    /// NEON has no streaming-store intrinsic; a plain store keeps the shared bodies simple.
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn st_nt(p: *mut u8, v: V) {
        vst1q_u8(p, v)
    }
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn fence() {}
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn xor(a: V, b: V) -> V {
        veorq_u8(a, b)
    }

    struct Consts {
        poly: V,
    }
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn consts() -> Consts {
        Consts {
            poly: vdupq_n_u8(crate::gf::POLY_LOW),
        }
    }
    /// An arithmetic shift by 7 spreads each top bit over its byte.
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn mul2(v: V, k: &Consts) -> V {
        let top = vreinterpretq_u8_s8(vshrq_n_s8::<7>(vreinterpretq_s8_u8(v)));
        veorq_u8(vshlq_n_u8::<1>(v), vandq_u8(top, k.poly))
    }
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn mul2_xor(v: V, d: V, k: &Consts) -> V {
        veorq_u8(mul2(v, k), d)
    }

    struct MulC {
        lo: V,
        hi: V,
        mask: V,
    }
    #[inline]
    #[target_feature(enable = "neon")]
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
    #[target_feature(enable = "neon")]
    unsafe fn mulc(m: &MulC, v: V) -> V {
        let l = vandq_u8(v, m.mask);
        let h = vshrq_n_u8::<4>(v);
        veorq_u8(vqtbl1q_u8(m.lo, l), vqtbl1q_u8(m.hi, h))
    }

    crate::simd::simd_kernel!("neon");
}

simd_token!(
    /// NEON: 4 × 16 bytes per step.
    Neon,
    neon,
    std::arch::is_aarch64_feature_detected!("neon")
);
