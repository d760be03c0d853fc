//! Kernel identities, the checked entry points every kernel shares, and the dispatcher.
//!
//! A [`Kernel`] is a copyable handle that can only exist for an implementation the running
//! CPU supports. Its public methods validate arguments once and then call the implementation,
//! so the implementations never see a length mismatch. The process-wide choice is made once
//! ([`selection`], a `OnceLock`): the fastest supported kernel, unless the environment
//! variable `RAIDKIT_PARITY` names one (`reference`, `portable`, `avx2`, `avx512`,
//! `gfni-avx2`, `gfni-avx512`, `neon`).

use std::fmt;
use std::sync::OnceLock;

use crate::{portable, reference, ParityError};

#[cfg(target_arch = "aarch64")]
use crate::neon;
#[cfg(target_arch = "x86_64")]
use crate::x86;

/// The environment variable that forces a kernel.
pub const KERNEL_ENV_VAR: &str = "RAIDKIT_PARITY";

/// Most data slots a RAID-6 stripe may have: g = 2 has 255 distinct powers.
pub const MAX_DATA_SLOTS: usize = 255;

/// Every kernel this crate knows, whether or not this CPU or target can run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelId {
    /// Byte at a time from the definitions; the yardstick for the others.
    Reference,
    /// 64-bit SWAR, any target.
    Portable,
    /// x86-64 AVX2.
    Avx2,
    /// x86-64 AVX-512F + AVX-512BW.
    Avx512,
    /// x86-64 GFNI with AVX2-width vectors.
    GfniAvx2,
    /// x86-64 GFNI with AVX-512-width vectors.
    GfniAvx512,
    /// aarch64 NEON.
    Neon,
}

impl KernelId {
    /// All kernels, slowest first.
    pub const ALL: [KernelId; 7] = [
        KernelId::Reference,
        KernelId::Portable,
        KernelId::Neon,
        KernelId::Avx2,
        KernelId::GfniAvx2,
        KernelId::Avx512,
        KernelId::GfniAvx512,
    ];

    /// The name used by `RAIDKIT_PARITY` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            KernelId::Reference => "reference",
            KernelId::Portable => "portable",
            KernelId::Avx2 => "avx2",
            KernelId::Avx512 => "avx512",
            KernelId::GfniAvx2 => "gfni-avx2",
            KernelId::GfniAvx512 => "gfni-avx512",
            KernelId::Neon => "neon",
        }
    }

    /// Parse a name as printed by [`KernelId::name`] (case-insensitive).
    pub fn from_name(name: &str) -> Option<KernelId> {
        KernelId::ALL
            .into_iter()
            .find(|id| id.name().eq_ignore_ascii_case(name.trim()))
    }
}

impl fmt::Display for KernelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug)]
enum Imp {
    Reference,
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2(x86::Avx2),
    #[cfg(target_arch = "x86_64")]
    Avx512(x86::Avx512),
    #[cfg(target_arch = "x86_64")]
    GfniAvx2(x86::GfniAvx2),
    #[cfg(target_arch = "x86_64")]
    GfniAvx512(x86::GfniAvx512),
    #[cfg(target_arch = "aarch64")]
    Neon(neon::Neon),
}

/// A parity kernel the running CPU supports. All methods check their arguments and return
/// [`ParityError`] without writing anything when a rule is broken.
///
/// Conventions shared by every method:
/// - all blocks have one length, any length (no alignment or multiple needed);
/// - an empty slice in a data position is a zero block (md's DDF layouts place P and Q inside
///   the data range of the Q syndrome as zero pages); it costs nothing to read;
/// - data slot `z` has coefficient g^z in Q (md's `raid6_idx_to_slot` order; the layout
///   crate gives the slot of each member).
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    imp: Imp,
}

impl Kernel {
    /// The kernel `id`, if this CPU and target can run it.
    pub fn new(id: KernelId) -> Option<Kernel> {
        let imp = match id {
            KernelId::Reference => Some(Imp::Reference),
            KernelId::Portable => Some(Imp::Portable),
            #[cfg(target_arch = "x86_64")]
            KernelId::Avx2 => x86::Avx2::new().map(Imp::Avx2),
            #[cfg(target_arch = "x86_64")]
            KernelId::Avx512 => x86::Avx512::new().map(Imp::Avx512),
            #[cfg(target_arch = "x86_64")]
            KernelId::GfniAvx2 => x86::GfniAvx2::new().map(Imp::GfniAvx2),
            #[cfg(target_arch = "x86_64")]
            KernelId::GfniAvx512 => x86::GfniAvx512::new().map(Imp::GfniAvx512),
            #[cfg(target_arch = "aarch64")]
            KernelId::Neon => neon::Neon::new().map(Imp::Neon),
            #[allow(unreachable_patterns)]
            _ => None,
        };
        imp.map(|imp| Kernel { imp })
    }

    /// Which kernel this is.
    pub fn id(self) -> KernelId {
        match self.imp {
            Imp::Reference => KernelId::Reference,
            Imp::Portable => KernelId::Portable,
            #[cfg(target_arch = "x86_64")]
            Imp::Avx2(_) => KernelId::Avx2,
            #[cfg(target_arch = "x86_64")]
            Imp::Avx512(_) => KernelId::Avx512,
            #[cfg(target_arch = "x86_64")]
            Imp::GfniAvx2(_) => KernelId::GfniAvx2,
            #[cfg(target_arch = "x86_64")]
            Imp::GfniAvx512(_) => KernelId::GfniAvx512,
            #[cfg(target_arch = "aarch64")]
            Imp::Neon(_) => KernelId::Neon,
        }
    }

    /// The kernel's name, as [`KernelId::name`].
    pub fn name(self) -> &'static str {
        self.id().name()
    }

    /// P = ⊕ `sources` (md's RAID-4/5 parity). An empty `sources` list gives zeros.
    pub fn gen_p(self, sources: &[&[u8]], p: &mut [u8]) -> Result<(), ParityError> {
        check_sources(sources, p.len())?;
        self.raw_gen_p(sources, p, false);
        Ok(())
    }

    /// `dest ⊕= ⊕ sources`: accumulate sources into an existing block (read-modify-write of P).
    pub fn xor_into(self, dest: &mut [u8], sources: &[&[u8]]) -> Result<(), ParityError> {
        check_sources(sources, dest.len())?;
        self.raw_gen_p(sources, dest, true);
        Ok(())
    }

    /// md's `gen_syndrome`: P = ⊕ D_z and Q = ⊕ g^z·D_z over data slots `z = 0..data.len()`.
    pub fn gen_syndrome(
        self,
        data: &[&[u8]],
        p: &mut [u8],
        q: &mut [u8],
    ) -> Result<(), ParityError> {
        check_syndrome(data, p, q)?;
        self.raw_gen_syndrome(data, p, q, true);
        Ok(())
    }

    /// md's `xor_syndrome(disks, start, stop, …)`: P ⊕= ⊕ D_z and Q ⊕= ⊕ g^z·D_z for
    /// `z` in `start..=stop`, for read-modify-write: pass the XOR of old and new data (or old
    /// data, then new data) of the written slots. Slots outside `start..=stop` are not read
    /// and may be empty.
    pub fn xor_syndrome(
        self,
        data: &[&[u8]],
        start: usize,
        stop: usize,
        p: &mut [u8],
        q: &mut [u8],
    ) -> Result<(), ParityError> {
        check_syndrome(data, p, q)?;
        if start > stop || stop >= data.len() {
            return Err(ParityError::BadSlotRange {
                start,
                stop,
                slots: data.len(),
            });
        }
        self.raw_xor_syndrome(data, start, stop, p, q);
        Ok(())
    }

    /// Rebuild up to two missing blocks of a RAID-6 stripe in place. `blocks` holds the data
    /// slots `0..n`, then P (index `n`), then Q (index `n + 1`); `missing` lists the indices
    /// to rebuild, whose contents are ignored and overwritten. Every pair md can recover is
    /// handled the way md does: two data (`raid6_2data_recov`), data + P
    /// (`raid6_datap_recov`), data + Q and a single data block (from P), P and/or Q
    /// (regenerated). Empty data slots are zero blocks and cannot be missing.
    pub fn recover(self, blocks: &mut [&mut [u8]], missing: &[usize]) -> Result<(), ParityError> {
        crate::recover::recover(self, blocks, missing)
    }

    pub(crate) fn raw_gen_p(self, srcs: &[&[u8]], p: &mut [u8], accumulate: bool) {
        match self.imp {
            Imp::Reference => reference::gen_p(srcs, p, accumulate, 0),
            Imp::Portable => portable::gen_p(srcs, p, accumulate, 0),
            #[cfg(target_arch = "x86_64")]
            Imp::Avx2(k) => k.gen_p(srcs, p, accumulate),
            #[cfg(target_arch = "x86_64")]
            Imp::Avx512(k) => k.gen_p(srcs, p, accumulate),
            #[cfg(target_arch = "x86_64")]
            Imp::GfniAvx2(k) => k.gen_p(srcs, p, accumulate),
            #[cfg(target_arch = "x86_64")]
            Imp::GfniAvx512(k) => k.gen_p(srcs, p, accumulate),
            #[cfg(target_arch = "aarch64")]
            Imp::Neon(k) => k.gen_p(srcs, p, accumulate),
        }
    }

    /// `streaming`: large outputs may bypass the cache (final parity); pass `false` when
    /// the outputs are read again at once (recovery's intermediate P and Q).
    pub(crate) fn raw_gen_syndrome(
        self,
        data: &[&[u8]],
        p: &mut [u8],
        q: &mut [u8],
        streaming: bool,
    ) {
        match self.imp {
            Imp::Reference => reference::gen_syndrome(data, p, q, 0),
            Imp::Portable => portable::gen_syndrome(data, p, q, 0),
            #[cfg(target_arch = "x86_64")]
            Imp::Avx2(k) => k.gen_syndrome(data, p, q, streaming),
            #[cfg(target_arch = "x86_64")]
            Imp::Avx512(k) => k.gen_syndrome(data, p, q, streaming),
            #[cfg(target_arch = "x86_64")]
            Imp::GfniAvx2(k) => k.gen_syndrome(data, p, q, streaming),
            #[cfg(target_arch = "x86_64")]
            Imp::GfniAvx512(k) => k.gen_syndrome(data, p, q, streaming),
            #[cfg(target_arch = "aarch64")]
            Imp::Neon(k) => k.gen_syndrome(data, p, q, streaming),
        }
    }

    pub(crate) fn raw_xor_syndrome(
        self,
        data: &[&[u8]],
        start: usize,
        stop: usize,
        p: &mut [u8],
        q: &mut [u8],
    ) {
        match self.imp {
            Imp::Reference => reference::xor_syndrome(data, start, stop, p, q, 0),
            Imp::Portable => portable::xor_syndrome(data, start, stop, p, q, 0),
            #[cfg(target_arch = "x86_64")]
            Imp::Avx2(k) => k.xor_syndrome(data, start, stop, p, q),
            #[cfg(target_arch = "x86_64")]
            Imp::Avx512(k) => k.xor_syndrome(data, start, stop, p, q),
            #[cfg(target_arch = "x86_64")]
            Imp::GfniAvx2(k) => k.xor_syndrome(data, start, stop, p, q),
            #[cfg(target_arch = "x86_64")]
            Imp::GfniAvx512(k) => k.xor_syndrome(data, start, stop, p, q),
            #[cfg(target_arch = "aarch64")]
            Imp::Neon(k) => k.xor_syndrome(data, start, stop, p, q),
        }
    }

    pub(crate) fn raw_recov_2data(
        self,
        pbmul: u8,
        qmul: u8,
        p: &[u8],
        q: &[u8],
        dp: &mut [u8],
        dq: &mut [u8],
    ) {
        match self.imp {
            Imp::Reference => reference::recov_2data(pbmul, qmul, p, q, dp, dq, 0),
            Imp::Portable => portable::recov_2data(pbmul, qmul, p, q, dp, dq, 0),
            #[cfg(target_arch = "x86_64")]
            Imp::Avx2(k) => k.recov_2data(pbmul, qmul, p, q, dp, dq),
            #[cfg(target_arch = "x86_64")]
            Imp::Avx512(k) => k.recov_2data(pbmul, qmul, p, q, dp, dq),
            #[cfg(target_arch = "x86_64")]
            Imp::GfniAvx2(k) => k.recov_2data(pbmul, qmul, p, q, dp, dq),
            #[cfg(target_arch = "x86_64")]
            Imp::GfniAvx512(k) => k.recov_2data(pbmul, qmul, p, q, dp, dq),
            #[cfg(target_arch = "aarch64")]
            Imp::Neon(k) => k.recov_2data(pbmul, qmul, p, q, dp, dq),
        }
    }

    pub(crate) fn raw_recov_datap(self, qmul: u8, q: &[u8], dq: &mut [u8], p: &mut [u8]) {
        match self.imp {
            Imp::Reference => reference::recov_datap(qmul, q, dq, p, 0),
            Imp::Portable => portable::recov_datap(qmul, q, dq, p, 0),
            #[cfg(target_arch = "x86_64")]
            Imp::Avx2(k) => k.recov_datap(qmul, q, dq, p),
            #[cfg(target_arch = "x86_64")]
            Imp::Avx512(k) => k.recov_datap(qmul, q, dq, p),
            #[cfg(target_arch = "x86_64")]
            Imp::GfniAvx2(k) => k.recov_datap(qmul, q, dq, p),
            #[cfg(target_arch = "x86_64")]
            Imp::GfniAvx512(k) => k.recov_datap(qmul, q, dq, p),
            #[cfg(target_arch = "aarch64")]
            Imp::Neon(k) => k.recov_datap(qmul, q, dq, p),
        }
    }
}

fn check_sources(sources: &[&[u8]], len_bytes: usize) -> Result<(), ParityError> {
    match sources
        .iter()
        .position(|s| !s.is_empty() && s.len() != len_bytes)
    {
        Some(slot) => Err(ParityError::LengthMismatch {
            slot,
            len_bytes: sources[slot].len(),
            expected_len_bytes: len_bytes,
        }),
        None => Ok(()),
    }
}

fn check_syndrome(data: &[&[u8]], p: &[u8], q: &[u8]) -> Result<(), ParityError> {
    if data.is_empty() {
        return Err(ParityError::NoDataSlots);
    }
    if data.len() > MAX_DATA_SLOTS {
        return Err(ParityError::TooManyDataSlots {
            slots: data.len(),
            max_slots: MAX_DATA_SLOTS,
        });
    }
    if q.len() != p.len() {
        return Err(ParityError::LengthMismatch {
            slot: data.len() + 1,
            len_bytes: q.len(),
            expected_len_bytes: p.len(),
        });
    }
    check_sources(data, p.len())
}

/// Every kernel this CPU can run, slowest first (the reference and portable kernels always).
pub fn available_kernels() -> Vec<Kernel> {
    KernelId::ALL.into_iter().filter_map(Kernel::new).collect()
}

/// The fastest kernel this CPU can run, ignoring `RAIDKIT_PARITY`.
pub fn best_kernel() -> Kernel {
    available_kernels()
        .into_iter()
        .last()
        .unwrap_or(Kernel { imp: Imp::Portable })
}

/// How the process-wide kernel was chosen.
#[derive(Clone, Debug)]
pub struct KernelSelection {
    /// The kernel every free function of this crate uses.
    pub kernel: Kernel,
    /// The value of `RAIDKIT_PARITY`, if set.
    pub requested: Option<String>,
    /// Why the request was not honoured (unknown name or unsupported CPU), if it was not.
    pub fallback_reason: Option<String>,
}

/// Choose a kernel from an optional request, as the dispatcher does with `RAIDKIT_PARITY`.
pub fn select(requested: Option<&str>) -> KernelSelection {
    let best = best_kernel();
    let (kernel, fallback_reason) = match requested {
        None => (best, None),
        Some(name) => match KernelId::from_name(name) {
            None => (
                best,
                Some(format!(
                    "{KERNEL_ENV_VAR}={name:?} names no kernel (known: {}); using {}",
                    KernelId::ALL.map(KernelId::name).join(", "),
                    best.name()
                )),
            ),
            Some(id) => match Kernel::new(id) {
                Some(k) => (k, None),
                None => (
                    best,
                    Some(format!(
                        "{KERNEL_ENV_VAR}={name}: this CPU does not support {id}; using {}",
                        best.name()
                    )),
                ),
            },
        },
    };
    KernelSelection {
        kernel,
        requested: requested.map(str::to_owned),
        fallback_reason,
    }
}

/// The process-wide choice, made once on first use.
pub fn selection() -> &'static KernelSelection {
    static SELECTION: OnceLock<KernelSelection> = OnceLock::new();
    SELECTION.get_or_init(|| select(std::env::var(KERNEL_ENV_VAR).ok().as_deref()))
}

/// The kernel the free functions of this crate use.
pub fn selected_kernel() -> Kernel {
    selection().kernel
}
