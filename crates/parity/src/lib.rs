//! raidkit-parity: XOR parity (P) and RAID-6 P+Q over GF(2^8), byte-exact with Linux md.
//!
//! What it owns: the arithmetic of md's lib/raid6 — `gen_syndrome`, `xor_syndrome` (the
//! read-modify-write form) and recovery of any one or two missing blocks of a stripe — and
//! the choice of the fastest correct way to compute it on the running CPU.
//!
//! Conventions (the same for every function and every kernel):
//! - Q = ⊕ g^z · D_z over data slots z = 0, 1, …, with g = 2 in GF(2^8) modulo 0x11d. The
//!   slot of each member comes from the layout crate (md's `raid6_idx_to_slot`).
//! - An empty slice in a data position is an all-zero block (md's DDF layouts put zero pages
//!   where P and Q sit inside the syndrome's data range); it is never read.
//! - Blocks may have any length and alignment; md passes pages, the engine 4 KiB multiples.
//!   SIMD kernels run whole steps of 2–4 cache lines and finish the tail with the portable
//!   kernel. `gen_p` and `gen_syndrome` write P and Q with streaming (non-temporal) stores
//!   when a block is at least 16 KiB and P/Q are vector-aligned: parity then goes to a member
//!   device without displacing the data from cache.
//! - Recovery addresses blocks as data `0..n`, P = `n`, Q = `n + 1`.
//! - Bad arguments (mismatched lengths, slot ranges, impossible recoveries) are a
//!   [`ParityError`]; nothing is written then.
//!
//! Kernels ([`KernelId`]): a byte-at-a-time reference, a portable 64-bit SWAR kernel, and
//! SIMD kernels (AVX2, AVX-512BW, GFNI at both widths, NEON) that exist only when the CPU
//! has the features. The free functions use the kernel chosen once per process
//! ([`selection`]): the fastest available, or the one named by `RAIDKIT_PARITY`.

mod error;
pub mod gf;
mod kernel;
#[cfg(any(target_arch = "aarch64", all(test, target_arch = "x86_64")))]
mod neon;
mod portable;
mod recover;
mod reference;
mod simd;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use error::ParityError;
pub use kernel::{
    available_kernels, best_kernel, select, selected_kernel, selection, Kernel, KernelId,
    KernelSelection, KERNEL_ENV_VAR, MAX_DATA_SLOTS,
};

/// P = ⊕ `sources` with the selected kernel. See [`Kernel::gen_p`].
pub fn gen_p(sources: &[&[u8]], p: &mut [u8]) -> Result<(), ParityError> {
    selected_kernel().gen_p(sources, p)
}

/// `dest ⊕= ⊕ sources` with the selected kernel. See [`Kernel::xor_into`].
pub fn xor_into(dest: &mut [u8], sources: &[&[u8]]) -> Result<(), ParityError> {
    selected_kernel().xor_into(dest, sources)
}

/// md's `gen_syndrome` with the selected kernel. See [`Kernel::gen_syndrome`].
pub fn gen_syndrome(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) -> Result<(), ParityError> {
    selected_kernel().gen_syndrome(data, p, q)
}

/// md's `xor_syndrome(start, stop)` with the selected kernel. See [`Kernel::xor_syndrome`].
pub fn xor_syndrome(
    data: &[&[u8]],
    start: usize,
    stop: usize,
    p: &mut [u8],
    q: &mut [u8],
) -> Result<(), ParityError> {
    selected_kernel().xor_syndrome(data, start, stop, p, q)
}

/// Rebuild up to two missing blocks in place with the selected kernel. See
/// [`Kernel::recover`].
pub fn recover(blocks: &mut [&mut [u8]], missing: &[usize]) -> Result<(), ParityError> {
    selected_kernel().recover(blocks, missing)
}
