//! x86-64 kernels: AVX2 (md's `raid6_avx2x4`), AVX-512BW (`raid6_avx512x4`), and GFNI at
//! AVX2 and AVX-512 width. GFNI's `gf2p8mulb` works modulo AES's 0x11b, so these kernels use
//! `gf2p8affineqb` with the bit matrix of "multiply by c" in md's field (0x11d) instead, which
//! turns the four-instruction doubling into one instruction and a constant multiply into one.
//!
//! Each kernel is a module of vector primitives plus the shared bodies of `simd_kernel!`;
//! its token type (`Avx2`, …) can only be built after `is_x86_feature_detected!` says yes.

use crate::simd::simd_token;

/// Nibble tables for a constant multiply with `pshufb`: `c·n` and `c·(n << 4)`.
fn nibble_tables(c: u8) -> ([u8; 16], [u8; 16]) {
    let mut lo = [0u8; 16];
    let mut hi = [0u8; 16];
    for n in 0..16u8 {
        lo[n as usize] = crate::gf::mul(c, n);
        hi[n as usize] = crate::gf::mul(c, n << 4);
    }
    (lo, hi)
}

mod avx2 {
    use std::arch::x86_64::*;

    type V = __m256i;
    const W: usize = 32;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn zero() -> V {
        _mm256_setzero_si256()
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn ld(p: *const u8) -> V {
        _mm256_loadu_si256(p as *const V)
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn st(p: *mut u8, v: V) {
        _mm256_storeu_si256(p as *mut V, v)
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn st_nt(p: *mut u8, v: V) {
        _mm256_stream_si256(p as *mut V, v)
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn fence() {
        _mm_sfence()
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn xor(a: V, b: V) -> V {
        _mm256_xor_si256(a, b)
    }

    struct Consts {
        zero: V,
        poly: V,
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn consts() -> Consts {
        Consts {
            zero: _mm256_setzero_si256(),
            poly: _mm256_set1_epi8(crate::gf::POLY_LOW as i8),
        }
    }
    /// Bytes with the top bit set compare below zero; they get 0x1d folded in.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mul2(v: V, k: &Consts) -> V {
        let fold = _mm256_and_si256(_mm256_cmpgt_epi8(k.zero, v), k.poly);
        _mm256_xor_si256(_mm256_add_epi8(v, v), fold)
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mul2_xor(v: V, d: V, k: &Consts) -> V {
        _mm256_xor_si256(mul2(v, k), d)
    }

    struct MulC {
        lo: V,
        hi: V,
        mask: V,
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mulc_new(c: u8) -> MulC {
        let (lo, hi) = super::nibble_tables(c);
        MulC {
            lo: _mm256_broadcastsi128_si256(_mm_loadu_si128(lo.as_ptr() as *const __m128i)),
            hi: _mm256_broadcastsi128_si256(_mm_loadu_si128(hi.as_ptr() as *const __m128i)),
            mask: _mm256_set1_epi8(0x0f),
        }
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mulc(m: &MulC, v: V) -> V {
        let l = _mm256_and_si256(v, m.mask);
        let h = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m.mask);
        _mm256_xor_si256(_mm256_shuffle_epi8(m.lo, l), _mm256_shuffle_epi8(m.hi, h))
    }

    crate::simd::simd_kernel!("avx2");
}

mod avx512 {
    use std::arch::x86_64::*;

    type V = __m512i;
    const W: usize = 64;

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn zero() -> V {
        _mm512_setzero_si512()
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn ld(p: *const u8) -> V {
        _mm512_loadu_si512(p as *const V)
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn st(p: *mut u8, v: V) {
        _mm512_storeu_si512(p as *mut V, v)
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn st_nt(p: *mut u8, v: V) {
        _mm512_stream_si512(p as *mut V, v)
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn fence() {
        _mm_sfence()
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn xor(a: V, b: V) -> V {
        _mm512_xor_si512(a, b)
    }

    struct Consts {
        poly: V,
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn consts() -> Consts {
        Consts {
            poly: _mm512_set1_epi8(crate::gf::POLY_LOW as i8),
        }
    }
    /// `vpmovb2m` takes the top bits into a mask; the masked move supplies 0x1d there.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn mul2(v: V, k: &Consts) -> V {
        let fold = _mm512_maskz_mov_epi8(_mm512_movepi8_mask(v), k.poly);
        _mm512_xor_si512(_mm512_add_epi8(v, v), fold)
    }
    /// Three-way XOR in one `vpternlogd` (truth table 0x96).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn mul2_xor(v: V, d: V, k: &Consts) -> V {
        let fold = _mm512_maskz_mov_epi8(_mm512_movepi8_mask(v), k.poly);
        _mm512_ternarylogic_epi32::<0x96>(_mm512_add_epi8(v, v), fold, d)
    }

    struct MulC {
        lo: V,
        hi: V,
        mask: V,
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn mulc_new(c: u8) -> MulC {
        let (lo, hi) = super::nibble_tables(c);
        MulC {
            lo: _mm512_broadcast_i32x4(_mm_loadu_si128(lo.as_ptr() as *const __m128i)),
            hi: _mm512_broadcast_i32x4(_mm_loadu_si128(hi.as_ptr() as *const __m128i)),
            mask: _mm512_set1_epi8(0x0f),
        }
    }
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn mulc(m: &MulC, v: V) -> V {
        let l = _mm512_and_si512(v, m.mask);
        let h = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m.mask);
        _mm512_xor_si512(_mm512_shuffle_epi8(m.lo, l), _mm512_shuffle_epi8(m.hi, h))
    }

    crate::simd::simd_kernel!("avx512f,avx512bw");
}

mod gfni_avx2 {
    use std::arch::x86_64::*;

    type V = __m256i;
    const W: usize = 32;

    #[inline]
    #[target_feature(enable = "gfni,avx2")]
    unsafe fn zero() -> V {
        _mm256_setzero_si256()
    }
    #[inline]
    #[target_feature(enable = "gfni,avx2")]
    unsafe fn ld(p: *const u8) -> V {
        _mm256_loadu_si256(p as *const V)
    }
    #[inline]
    #[target_feature(enable = "gfni,avx2")]
    unsafe fn st(p: *mut u8, v: V) {
        _mm256_storeu_si256(p as *mut V, v)
    }
    #[inline]
    #[target_feature(enable = "gfni,avx2")]
    unsafe fn st_nt(p: *mut u8, v: V) {
        _mm256_stream_si256(p as *mut V, v)
    }
    #[inline]
    #[target_feature(enable = "gfni,avx2")]
    unsafe fn fence() {
        _mm_sfence()
    }
    #[inline]
    #[target_feature(enable = "gfni,avx2")]
    unsafe fn xor(a: V, b: V) -> V {
        _mm256_xor_si256(a, b)
    }

    struct Consts {
        m2: V,
    }
    #[inline]
    #[target_feature(enable = "gfni,avx2")]
    unsafe fn consts() -> Consts {
        Consts {
            m2: _mm256_set1_epi64x(crate::gf::affine_matrix(2) as i64),
        }
    }
    #[inline]
    #[target_feature(enable = "gfni,avx2")]
    unsafe fn mul2(v: V, k: &Consts) -> V {
        _mm256_gf2p8affine_epi64_epi8::<0>(v, k.m2)
    }
    #[inline]
    #[target_feature(enable = "gfni,avx2")]
    unsafe fn mul2_xor(v: V, d: V, k: &Consts) -> V {
        _mm256_xor_si256(mul2(v, k), d)
    }

    struct MulC {
        m: V,
    }
    #[inline]
    #[target_feature(enable = "gfni,avx2")]
    unsafe fn mulc_new(c: u8) -> MulC {
        MulC {
            m: _mm256_set1_epi64x(crate::gf::affine_matrix(c) as i64),
        }
    }
    #[inline]
    #[target_feature(enable = "gfni,avx2")]
    unsafe fn mulc(m: &MulC, v: V) -> V {
        _mm256_gf2p8affine_epi64_epi8::<0>(v, m.m)
    }

    crate::simd::simd_kernel!("gfni,avx2");
}

mod gfni_avx512 {
    use std::arch::x86_64::*;

    type V = __m512i;
    const W: usize = 64;

    #[inline]
    #[target_feature(enable = "gfni,avx512f,avx512bw")]
    unsafe fn zero() -> V {
        _mm512_setzero_si512()
    }
    #[inline]
    #[target_feature(enable = "gfni,avx512f,avx512bw")]
    unsafe fn ld(p: *const u8) -> V {
        _mm512_loadu_si512(p as *const V)
    }
    #[inline]
    #[target_feature(enable = "gfni,avx512f,avx512bw")]
    unsafe fn st(p: *mut u8, v: V) {
        _mm512_storeu_si512(p as *mut V, v)
    }
    #[inline]
    #[target_feature(enable = "gfni,avx512f,avx512bw")]
    unsafe fn st_nt(p: *mut u8, v: V) {
        _mm512_stream_si512(p as *mut V, v)
    }
    #[inline]
    #[target_feature(enable = "gfni,avx512f,avx512bw")]
    unsafe fn fence() {
        _mm_sfence()
    }
    #[inline]
    #[target_feature(enable = "gfni,avx512f,avx512bw")]
    unsafe fn xor(a: V, b: V) -> V {
        _mm512_xor_si512(a, b)
    }

    struct Consts {
        m2: V,
    }
    #[inline]
    #[target_feature(enable = "gfni,avx512f,avx512bw")]
    unsafe fn consts() -> Consts {
        Consts {
            m2: _mm512_set1_epi64(crate::gf::affine_matrix(2) as i64),
        }
    }
    #[inline]
    #[target_feature(enable = "gfni,avx512f,avx512bw")]
    unsafe fn mul2(v: V, k: &Consts) -> V {
        _mm512_gf2p8affine_epi64_epi8::<0>(v, k.m2)
    }
    #[inline]
    #[target_feature(enable = "gfni,avx512f,avx512bw")]
    unsafe fn mul2_xor(v: V, d: V, k: &Consts) -> V {
        _mm512_xor_si512(mul2(v, k), d)
    }

    struct MulC {
        m: V,
    }
    #[inline]
    #[target_feature(enable = "gfni,avx512f,avx512bw")]
    unsafe fn mulc_new(c: u8) -> MulC {
        MulC {
            m: _mm512_set1_epi64(crate::gf::affine_matrix(c) as i64),
        }
    }
    #[inline]
    #[target_feature(enable = "gfni,avx512f,avx512bw")]
    unsafe fn mulc(m: &MulC, v: V) -> V {
        _mm512_gf2p8affine_epi64_epi8::<0>(v, m.m)
    }

    crate::simd::simd_kernel!("gfni,avx512f,avx512bw");
}

simd_token!(
    /// md's AVX2 kernel shape: 4 × 32 bytes per step.
    Avx2,
    avx2,
    is_x86_feature_detected!("avx2")
);
simd_token!(
    /// AVX-512BW: 4 × 64 bytes per step, `vpternlogd` for the Horner step.
    Avx512,
    avx512,
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
);
simd_token!(
    /// GFNI affine multiplies at AVX2 width.
    GfniAvx2,
    gfni_avx2,
    is_x86_feature_detected!("gfni") && is_x86_feature_detected!("avx2")
);
simd_token!(
    /// GFNI affine multiplies at AVX-512 width.
    GfniAvx512,
    gfni_avx512,
    is_x86_feature_detected!("gfni")
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
);
