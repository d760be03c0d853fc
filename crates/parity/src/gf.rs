//! Arithmetic in GF(2^8) with md's RAID-6 field: polynomial x^8+x^4+x^3+x^2+1 (0x11d),
//! generator g = 2 (`{02}`), exactly as Linux lib/raid6/mktables.c builds `raid6_gfmul`,
//! `raid6_gfexp`, `raid6_gfinv` and `raid6_gfexi`.
//!
//! Every table is computed at compile time from the bit-level definition in [`mul_slow`], so
//! nothing here is transcribed by hand. Invariants: `EXP[LOG[x]] == x` for x != 0,
//! `mul(x, inv(x)) == 1` for x != 0, and `EXP` has period 255.

/// The reduction polynomial without its x^8 term, as md writes it (`0x1d`).
pub const POLY_LOW: u8 = 0x1d;

/// Carry-less multiply and reduce modulo 0x11d, one bit at a time: the definition.
pub const fn mul_slow(a: u8, b: u8) -> u8 {
    let mut a = a;
    let mut b = b;
    let mut r = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            r ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= POLY_LOW;
        }
        b >>= 1;
    }
    r
}

const fn build_exp() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut v = 1u8;
    let mut i = 0;
    while i < 256 {
        t[i] = v;
        v = mul_slow(v, 2);
        i += 1;
    }
    t
}

const fn build_log() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[EXP[i] as usize] = i as u8;
        i += 1;
    }
    t
}

const fn build_mul() -> [[u8; 256]; 256] {
    let mut t = [[0u8; 256]; 256];
    let mut a = 0;
    while a < 256 {
        let mut b = 0;
        while b < 256 {
            t[a][b] = mul_slow(a as u8, b as u8);
            b += 1;
        }
        a += 1;
    }
    t
}

const fn build_inv() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut x = 1;
    while x < 256 {
        // x^-1 = g^(255 - log x); inv(0) stays 0 as in md's table.
        t[x] = EXP[(255 - LOG[x] as usize) % 255];
        x += 1;
    }
    t
}

const fn build_exi() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = INV[(EXP[i] ^ 1) as usize];
        i += 1;
    }
    t
}

/// `EXP[i] = g^i` (md's `raid6_gfexp`); `EXP[255] == EXP[0]`.
pub static EXP: [u8; 256] = build_exp();
/// `LOG[g^i] = i` (md's `raid6_gflog`); `LOG[0]` is meaningless and set to 0.
pub static LOG: [u8; 256] = build_log();
/// `MUL[a][b] = a·b` (md's `raid6_gfmul`).
pub static MUL: [[u8; 256]; 256] = build_mul();
/// `INV[x] = x^-1`, `INV[0] = 0` (md's `raid6_gfinv`).
pub static INV: [u8; 256] = build_inv();
/// `EXI[i] = (g^i + 1)^-1` (md's `raid6_gfexi`), used by two-data recovery.
pub static EXI: [u8; 256] = build_exi();

/// `a · b` in the field.
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    MUL[a as usize][b as usize]
}

/// `g^i` for any exponent (reduced modulo 255).
#[inline]
pub fn exp(i: usize) -> u8 {
    EXP[i % 255]
}

/// Multiplicative inverse; `inv(0)` is 0 (there is none).
#[inline]
pub fn inv(x: u8) -> u8 {
    INV[x as usize]
}

/// The 8×8 bit matrix of "multiply by `c`" in the layout `gf2p8affineqb` expects: byte
/// `7 - i` of the qword holds row `i`, whose bit `j` is bit `i` of `c · 2^j`. GFNI's own
/// `gf2p8mulb` reduces modulo 0x11b (AES), not md's 0x11d, so RAID-6 uses the affine form.
pub const fn affine_matrix(c: u8) -> u64 {
    let mut a = 0u64;
    let mut i = 0;
    while i < 8 {
        let mut row = 0u8;
        let mut j = 0;
        while j < 8 {
            if (mul_slow(c, 1 << j) >> i) & 1 == 1 {
                row |= 1 << j;
            }
            j += 1;
        }
        a |= (row as u64) << (8 * (7 - i));
        i += 1;
    }
    a
}

/// Scalar model of one byte of `gf2p8affineqb(x, A, 0)`, following Intel's pseudocode
/// (`affine_byte`): bit `i` of the result is the parity of `A.byte[7-i] & x`. Used by the
/// tests to prove [`affine_matrix`] right on machines without GFNI.
pub const fn affine_byte(a: u64, x: u8) -> u8 {
    let mut r = 0u8;
    let mut i = 0;
    while i < 8 {
        let row = (a >> (8 * (7 - i))) as u8;
        r |= (((row & x).count_ones() & 1) as u8) << i;
        i += 1;
    }
    r
}
