//! Every available kernel against the reference kernel, md's recovery cases into poisoned
//! buffers (like lib/raid6/test), hand-computed known answers, and argument errors.
//! Run with `--nocapture` to see which kernels ran and which this CPU skipped.

use raidkit_parity::{
    available_kernels, gf, select, Kernel, KernelId, ParityError, KERNEL_ENV_VAR,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const POISON: u8 = 0xA5;

fn reference() -> Kernel {
    Kernel::new(KernelId::Reference).expect("the reference kernel always exists")
}

/// The kernels this CPU runs, with a line saying which were skipped.
fn kernels(test: &str) -> Vec<Kernel> {
    let ks = available_kernels();
    let ran: Vec<&str> = ks.iter().map(|k| k.name()).collect();
    let skipped: Vec<&str> = KernelId::ALL
        .into_iter()
        .filter(|id| Kernel::new(*id).is_none())
        .map(KernelId::name)
        .collect();
    eprintln!(
        "{test}: parity kernels run: {ran:?}; kernels skipped as unsupported here: {skipped:?}"
    );
    ks
}

fn random_block(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.gen()).collect()
}

/// `count` blocks of `len` bytes starting at random offsets 0..64 inside bigger buffers, so
/// the kernels meet every alignment.
struct Blocks {
    bufs: Vec<Vec<u8>>,
    offs: Vec<usize>,
    len: usize,
}

impl Blocks {
    fn new(rng: &mut SmallRng, count: usize, len: usize) -> Blocks {
        let offs: Vec<usize> = (0..count).map(|_| rng.gen_range(0..64)).collect();
        let bufs = offs.iter().map(|o| random_block(rng, o + len)).collect();
        Blocks { bufs, offs, len }
    }
    fn get(&self, i: usize) -> &[u8] {
        &self.bufs[i][self.offs[i]..self.offs[i] + self.len]
    }
}

fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|b| b.as_slice()).collect()
}

fn random_len(rng: &mut SmallRng) -> usize {
    match rng.gen_range(0..10) {
        0 => rng.gen_range(0..16),
        1 => 4096,
        2 => 65536 + rng.gen_range(0..300),
        _ => rng.gen_range(0..3000),
    }
}

/// Data slot list with some empty (zero) slots, as md's DDF layouts produce.
fn slots<'a>(blocks: &'a Blocks, zero: &[bool]) -> Vec<&'a [u8]> {
    (0..zero.len())
        .map(|i| if zero[i] { &[][..] } else { blocks.get(i) })
        .collect()
}

#[test]
fn every_kernel_matches_reference_on_p_and_q() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0001);
    let ks = kernels("gen_p/xor_into/gen_syndrome");
    for round in 0..120 {
        let len = random_len(&mut rng);
        let n = rng.gen_range(1..=20);
        let blocks = Blocks::new(&mut rng, n, len);
        let zero: Vec<bool> = (0..n)
            .map(|_| round % 3 == 0 && rng.gen_bool(0.2))
            .collect();
        let data = slots(&blocks, &zero);
        let init_p = random_block(&mut rng, len);
        let init_q = random_block(&mut rng, len);

        let mut want_p = init_p.clone();
        let mut want_q = init_q.clone();
        reference()
            .gen_syndrome(&data, &mut want_p, &mut want_q)
            .unwrap();
        let mut want_acc = init_p.clone();
        reference().xor_into(&mut want_acc, &data).unwrap();
        let mut want_gp = init_q.clone();
        reference().gen_p(&data, &mut want_gp).unwrap();
        assert_eq!(want_gp, want_p, "gen_p and gen_syndrome's P agree");

        for k in &ks {
            let (off_p, off_q) = (rng.gen_range(0..64), rng.gen_range(0..64));
            let mut pbuf = vec![POISON; len + off_p];
            let mut qbuf = vec![POISON; len + off_q];
            let (p, q) = (&mut pbuf[off_p..], &mut qbuf[off_q..]);
            k.gen_syndrome(&data, p, q).unwrap();
            assert!(p == &want_p[..], "{} P, len {len}, n {n}", k.name());
            assert!(q == &want_q[..], "{} Q, len {len}, n {n}", k.name());

            let mut gp = vec![POISON; len];
            k.gen_p(&data, &mut gp).unwrap();
            assert!(gp == want_p, "{} gen_p, len {len}", k.name());

            let mut acc = init_p.clone();
            k.xor_into(&mut acc, &data).unwrap();
            assert!(acc == want_acc, "{} xor_into, len {len}", k.name());
        }
    }
}

#[test]
fn every_kernel_matches_reference_on_xor_syndrome() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0002);
    let ks = kernels("xor_syndrome");
    for round in 0..150 {
        let len = random_len(&mut rng);
        let n = rng.gen_range(1..=16);
        let blocks = Blocks::new(&mut rng, n, len);
        let zero: Vec<bool> = (0..n)
            .map(|_| round % 4 == 0 && rng.gen_bool(0.2))
            .collect();
        let mut data = slots(&blocks, &zero);
        let start = rng.gen_range(0..n);
        let stop = rng.gen_range(start..n);
        // Slots outside start..=stop are not read: prove it by making them empty.
        for (z, d) in data.iter_mut().enumerate() {
            if z < start || z > stop {
                *d = &[];
            }
        }
        let init_p = random_block(&mut rng, len);
        let init_q = random_block(&mut rng, len);
        let (mut want_p, mut want_q) = (init_p.clone(), init_q.clone());
        reference()
            .xor_syndrome(&data, start, stop, &mut want_p, &mut want_q)
            .unwrap();
        for k in &ks {
            let (mut p, mut q) = (init_p.clone(), init_q.clone());
            k.xor_syndrome(&data, start, stop, &mut p, &mut q).unwrap();
            assert!(p == want_p, "{} P, len {len}, {start}..={stop}", k.name());
            assert!(q == want_q, "{} Q, len {len}, {start}..={stop}", k.name());
        }
    }
}

/// Read-modify-write: syndrome(old) ⊕ xor_syndrome(old ⊕ new over the written range)
/// equals syndrome(new), for every kernel.
#[test]
fn xor_syndrome_turns_old_parity_into_new() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0003);
    for k in kernels("read-modify-write") {
        for _ in 0..20 {
            let len = rng.gen_range(1..2500);
            let n = rng.gen_range(1..=12);
            let old: Vec<Vec<u8>> = (0..n).map(|_| random_block(&mut rng, len)).collect();
            let start = rng.gen_range(0..n);
            let stop = rng.gen_range(start..n);
            let mut new = old.clone();
            for block in &mut new[start..=stop] {
                *block = random_block(&mut rng, len);
            }
            let delta: Vec<Vec<u8>> = (0..n)
                .map(|z| old[z].iter().zip(&new[z]).map(|(a, b)| a ^ b).collect())
                .collect();
            let (mut p, mut q) = (vec![0; len], vec![0; len]);
            k.gen_syndrome(&refs(&old), &mut p, &mut q).unwrap();
            k.xor_syndrome(&refs(&delta), start, stop, &mut p, &mut q)
                .unwrap();
            let (mut want_p, mut want_q) = (vec![0; len], vec![0; len]);
            k.gen_syndrome(&refs(&new), &mut want_p, &mut want_q)
                .unwrap();
            assert_eq!(p, want_p, "{}", k.name());
            assert_eq!(q, want_q, "{}", k.name());
        }
    }
}

/// Every single and every pair of missing blocks, for 4..=16 disks, rebuilt into buffers
/// filled with junk first, like md's lib/raid6/test, over several lengths and misaligned
/// buffers. Some stripes carry zero slots.
#[test]
fn recovers_every_single_and_pair_into_poisoned_buffers() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0004);
    // Lengths with SIMD bodies and odd tails, and buffers starting off any alignment.
    const LENS: [usize; 7] = [4096 + 40, 1, 31, 64 * 3 + 7, 4096, 65536 + 17, 513];
    for k in kernels("recover") {
        let mut cases = 0;
        for disks in 4..=16usize {
            let n = disks - 2;
            let len = LENS[disks % LENS.len()];
            let off = (disks * 5) % 64;
            let zero_slot = if disks % 3 == 0 {
                Some(disks / 3)
            } else {
                None
            };
            let data: Vec<Vec<u8>> = (0..n)
                .map(|z| {
                    if Some(z) == zero_slot {
                        Vec::new()
                    } else {
                        random_block(&mut rng, len)
                    }
                })
                .collect();
            let refs: Vec<&[u8]> = data.iter().map(|b| b.as_slice()).collect();
            let (mut p, mut q) = (vec![0; len], vec![0; len]);
            reference().gen_syndrome(&refs, &mut p, &mut q).unwrap();
            let mut full = data.clone();
            full.push(p);
            full.push(q);

            let mut sets: Vec<Vec<usize>> = (0..disks).map(|a| vec![a]).collect();
            for a in 0..disks {
                for b in a + 1..disks {
                    sets.push(vec![a, b]);
                    sets.push(vec![b, a]);
                }
            }
            for missing in sets {
                if missing.iter().any(|&m| Some(m) == zero_slot) {
                    continue;
                }
                // Each block `off` bytes into its allocation, so no block is aligned.
                let mut work: Vec<Vec<u8>> = full
                    .iter()
                    .map(|b| {
                        let mut v = vec![0xa5u8; off];
                        v.extend_from_slice(b);
                        v
                    })
                    .collect();
                for &m in &missing {
                    work[m][off..].fill(POISON);
                }
                let mut blocks: Vec<&mut [u8]> = work.iter_mut().map(|b| &mut b[off..]).collect();
                k.recover(&mut blocks, &missing).unwrap();
                for &m in &missing {
                    assert!(
                        work[m][off..] == full[m][..],
                        "{}: disks {disks}, len {len}, offset {off}, missing {missing:?}, block {m} wrong",
                        k.name()
                    );
                }
                for (w, f) in work.iter().zip(&full) {
                    assert!(
                        w[off..] == f[..] && w[..off].iter().all(|&b| b == 0xa5),
                        "{}: disks {disks}, len {len}: a surviving block or the bytes before one changed",
                        k.name()
                    );
                }
                cases += 1;
            }
        }
        eprintln!("recover: {} rebuilt {cases} failure sets", k.name());
        assert!(cases > 1000);
    }
}

/// Recovering Q alone must leave P untouched even when P disagrees with the data.
#[test]
fn recovering_q_alone_keeps_p_bit_exact() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0005);
    for k in kernels("recover Q alone") {
        let len = 777;
        let data: Vec<Vec<u8>> = (0..5).map(|_| random_block(&mut rng, len)).collect();
        let refs: Vec<&[u8]> = data.iter().map(|b| b.as_slice()).collect();
        let (mut p, mut q) = (vec![0; len], vec![0; len]);
        k.gen_syndrome(&refs, &mut p, &mut q).unwrap();
        let stale_p = random_block(&mut rng, len);
        let mut work = data.clone();
        work.push(stale_p.clone());
        work.push(vec![POISON; len]);
        let mut blocks: Vec<&mut [u8]> = work.iter_mut().map(|b| b.as_mut_slice()).collect();
        k.recover(&mut blocks, &[6]).unwrap();
        assert_eq!(work[5], stale_p, "{}", k.name());
        assert_eq!(work[6], q, "{}", k.name());
    }
}

#[test]
fn field_tables_match_hand_computed_values() {
    // g^i by repeated doubling modulo 0x11d, worked by hand.
    let powers = [
        0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x1d, 0x3a, 0x74, 0xe8, 0xcd, 0x87, 0x13,
    ];
    for (i, &v) in powers.iter().enumerate() {
        assert_eq!(gf::exp(i), v, "g^{i}");
        assert_eq!(gf::LOG[v as usize] as usize, i, "log {v:#x}");
    }
    assert_eq!(gf::exp(255), 1, "g has order 255");
    assert_eq!(gf::mul(3, 3), 5); // (x+1)^2 = x^2+1, no reduction
    assert_eq!(gf::mul(0x80, 2), 0x1d); // x^8 = x^4+x^3+x^2+1
    assert_eq!(gf::mul(0x80, 0x80), 0x13); // x^14 = g^14
    assert_eq!(gf::inv(2), 0x8e); // 0x8e·2 = 0x11c ⊕ 0x11d = 1
    assert_eq!(gf::EXI[1], gf::inv(3)); // (g^1 + 1)^-1
    for x in 1..=255u8 {
        assert_eq!(gf::mul(x, gf::inv(x)), 1, "inverse of {x:#x}");
        assert_eq!(gf::exp(gf::LOG[x as usize] as usize), x);
    }
    // md's period: every g^i for i < 255 is distinct.
    let mut seen = [false; 256];
    for i in 0..255 {
        assert!(!seen[gf::exp(i) as usize], "g^{i} repeats");
        seen[gf::exp(i) as usize] = true;
    }
}

/// The GFNI kernels stand on `affine_matrix`; check it against Intel's pseudocode model for
/// every constant and byte, so the matrix layout is proven even where GFNI cannot run.
#[test]
fn affine_matrices_multiply_in_mds_field() {
    for c in 0..=255u8 {
        let m = gf::affine_matrix(c);
        for x in 0..=255u8 {
            assert_eq!(gf::affine_byte(m, x), gf::mul(c, x), "c {c:#x}, x {x:#x}");
        }
    }
    // Multiply-by-2 as a matrix, written out by hand: rows are bytes 7..0 of the qword;
    // row i has bit j set when bit i of 2·2^j is set: bit 0 <- x7, bit 1 <- x0,
    // bit 2 <- x1 ^ x7, bit 3 <- x2 ^ x7, bit 4 <- x3 ^ x7, bit 5 <- x4, 6 <- x5, 7 <- x6.
    let rows: [u8; 8] = [0x80, 0x01, 0x82, 0x84, 0x88, 0x10, 0x20, 0x40];
    let mut want = 0u64;
    for (i, r) in rows.iter().enumerate() {
        want |= (*r as u64) << (8 * (7 - i));
    }
    assert_eq!(gf::affine_matrix(2), want);
}

/// D0 = 0x01, D1 = 0x02, D2 = 0x80: P = 0x83, Q = 1·1 ⊕ 2·2 ⊕ 4·0x80 = 0x01 ⊕ 0x04 ⊕ 0x3a
/// = 0x3f. Repeated over 1000 bytes so the SIMD bodies and the tail both see it.
#[test]
fn tiny_stripe_known_answer() {
    let len = 1000;
    let d = [vec![0x01u8; len], vec![0x02; len], vec![0x80; len]];
    let refs: Vec<&[u8]> = d.iter().map(|b| b.as_slice()).collect();
    for k in kernels("known answer") {
        let (mut p, mut q) = (vec![POISON; len], vec![POISON; len]);
        k.gen_syndrome(&refs, &mut p, &mut q).unwrap();
        assert!(p.iter().all(|&b| b == 0x83), "{} P", k.name());
        assert!(q.iter().all(|&b| b == 0x3f), "{} Q", k.name());
        // The same stripe with slot 1 a zero block: Q = 0x01 ⊕ 0x3a = 0x3b, P = 0x81.
        let with_zero: Vec<&[u8]> = vec![&d[0], &[], &d[2]];
        k.gen_syndrome(&with_zero, &mut p, &mut q).unwrap();
        assert!(
            p.iter().all(|&b| b == 0x81),
            "{} P with zero slot",
            k.name()
        );
        assert!(
            q.iter().all(|&b| b == 0x3b),
            "{} Q with zero slot",
            k.name()
        );
    }
}

#[test]
fn bad_arguments_are_typed_errors() {
    let k = reference();
    let a = vec![1u8; 16];
    let short = vec![1u8; 15];
    let (mut p, mut q) = (vec![0u8; 16], vec![0u8; 16]);
    assert_eq!(
        k.gen_syndrome(&[&a, &short], &mut p, &mut q),
        Err(ParityError::LengthMismatch {
            slot: 1,
            len_bytes: 15,
            expected_len_bytes: 16
        })
    );
    assert_eq!(
        k.gen_syndrome(&[], &mut p, &mut q),
        Err(ParityError::NoDataSlots)
    );
    assert_eq!(
        k.xor_syndrome(&[&a, &a], 1, 0, &mut p, &mut q),
        Err(ParityError::BadSlotRange {
            start: 1,
            stop: 0,
            slots: 2
        })
    );
    assert_eq!(
        k.xor_syndrome(&[&a, &a], 0, 2, &mut p, &mut q),
        Err(ParityError::BadSlotRange {
            start: 0,
            stop: 2,
            slots: 2
        })
    );
    let mut many = vec![0u8; 16];
    let too_many: Vec<&[u8]> = vec![&a; 256];
    assert!(matches!(
        k.gen_syndrome(&too_many, &mut many, &mut q),
        Err(ParityError::TooManyDataSlots { slots: 256, .. })
    ));
    assert_eq!(
        k.gen_p(&[&a, &short], &mut p),
        Err(ParityError::LengthMismatch {
            slot: 1,
            len_bytes: 15,
            expected_len_bytes: 16
        })
    );

    let mut d0 = vec![0u8; 16];
    let mut d1 = vec![0u8; 16];
    let mut blocks: Vec<&mut [u8]> = vec![&mut d0, &mut [], &mut d1, &mut p, &mut q];
    assert_eq!(
        k.recover(&mut blocks, &[0, 2, 3]),
        Err(ParityError::TooManyMissing { missing: 3 })
    );
    assert_eq!(
        k.recover(&mut blocks, &[5]),
        Err(ParityError::MissingOutOfRange {
            index: 5,
            blocks: 5
        })
    );
    assert_eq!(
        k.recover(&mut blocks, &[2, 2]),
        Err(ParityError::DuplicateMissing { index: 2 })
    );
    assert_eq!(
        k.recover(&mut blocks, &[1]),
        Err(ParityError::MissingIsZeroSlot { index: 1 })
    );
    let msg = ParityError::TooManyMissing { missing: 3 }.to_string();
    assert!(msg.contains("at most two"), "{msg}");
}

#[test]
fn dispatcher_honours_and_reports_requests() {
    assert_eq!(select(Some("portable")).kernel.id(), KernelId::Portable);
    assert_eq!(select(Some("REFERENCE")).kernel.id(), KernelId::Reference);
    assert!(select(Some("portable")).fallback_reason.is_none());
    let bogus = select(Some("bogus"));
    let reason = bogus.fallback_reason.expect("unknown names are reported");
    assert!(
        reason.contains(KERNEL_ENV_VAR) && reason.contains("bogus"),
        "{reason}"
    );
    assert_eq!(bogus.kernel.id(), raidkit_parity::best_kernel().id());
    for id in KernelId::ALL {
        let sel = select(Some(id.name()));
        match Kernel::new(id) {
            Some(_) => assert_eq!(sel.kernel.id(), id),
            None => assert!(
                sel.fallback_reason.is_some(),
                "{id} unsupported is reported"
            ),
        }
    }
}

/// The summary: which kernels this machine ran, which it skipped, and what the process-wide
/// dispatcher picked.
#[test]
fn summary_of_kernels() {
    let sel = raidkit_parity::selection();
    println!("parity kernels on this machine:");
    for id in KernelId::ALL {
        let state = if Kernel::new(id).is_some() {
            "ran"
        } else {
            "skipped (unsupported by this CPU or target)"
        };
        println!("  {:<12} {state}", id.name());
    }
    println!(
        "  dispatcher picks {} ({}={:?}{})",
        sel.kernel.name(),
        KERNEL_ENV_VAR,
        sel.requested,
        sel.fallback_reason
            .as_deref()
            .map(|r| format!("; {r}"))
            .unwrap_or_default()
    );
    assert!(available_kernels().len() >= 2);
}

/// Large blocks with 64-byte-aligned P and Q take the streaming-store path; check it (and
/// its tail) against the reference, with zero slots too.
#[test]
fn streaming_store_path_matches_reference() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0006);
    for k in kernels("streaming stores") {
        for len in [16 << 10, (64 << 10) + 96, (1 << 20) + 8] {
            let n = 8;
            let data: Vec<Vec<u8>> = (0..n).map(|_| random_block(&mut rng, len)).collect();
            let mut refs_: Vec<&[u8]> = refs(&data);
            refs_[3] = &[];
            let (mut want_p, mut want_q) = (vec![0; len], vec![0; len]);
            reference()
                .gen_syndrome(&refs_, &mut want_p, &mut want_q)
                .unwrap();
            let mut pbuf = vec![POISON; len + 64];
            let mut qbuf = vec![POISON; len + 64];
            let (op, oq) = (
                pbuf.as_ptr().align_offset(64),
                qbuf.as_ptr().align_offset(64),
            );
            let (p, q) = (&mut pbuf[op..op + len], &mut qbuf[oq..oq + len]);
            k.gen_syndrome(&refs_, p, q).unwrap();
            assert!(
                p == &want_p[..] && q == &want_q[..],
                "{} len {len}",
                k.name()
            );
            p.fill(POISON);
            k.gen_p(&refs_, p).unwrap();
            assert!(p == &want_p[..], "{} gen_p len {len}", k.name());
            // Every slot real: gen_p's fast path.
            let all = refs(&data);
            let mut want_all = vec![0; len];
            reference().gen_p(&all, &mut want_all).unwrap();
            p.fill(POISON);
            k.gen_p(&all, p).unwrap();
            assert!(
                p == &want_all[..],
                "{} gen_p (no empty slot) len {len}",
                k.name()
            );
        }
    }
}
