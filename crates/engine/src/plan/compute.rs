//! Between a piece's read and write phases: rebuilding lost data and computing new parity,
//! in place, through `raidkit_parity`'s kernels.

use super::*;

impl PieceOp {
    /// Between the read and the write phase: rebuilds lost data (degraded reads and writes)
    /// and computes new parity. Works in place on the user buffer and the scratch blocks:
    /// lost data a read returns is rebuilt straight into the user buffer, old parity is
    /// updated where it lies, and nothing is allocated or copied besides a few slice lists.
    pub(super) fn compute(&mut self, user: UserBuf<'_>) {
        let scratch = &mut self.scratch;
        match &self.plan {
            Plan::BandRead {
                ctx,
                data,
                p,
                q,
                lost,
            } if !lost.is_empty() => {
                let UserBuf::Read(ubuf) = user else { return };
                let (slot_of, _) = ctx.slots();
                let mut user_blocks = carve(
                    ubuf,
                    ctx.user_offset_bytes,
                    ctx.chunk_bytes,
                    ctx.dd_last + 1 - ctx.dd_first,
                    ctx.len(),
                );
                let mut sc = scratch_slices(scratch);
                // Every data index's block; a lost one the request covers is rebuilt in the
                // user buffer, which frees its scratch block to serve as P's place when P is
                // lost too (recovery from Q needs one).
                let mut spare: Option<&mut [u8]> = None;
                let mut blocks: Vec<Option<&mut [u8]>> = Vec::with_capacity(data.len());
                for (dd, b) in data.iter().enumerate() {
                    let touched = ctx.touched(dd);
                    blocks.push(match *b {
                        Block::Lost(i) if touched => {
                            spare = sc[i].take();
                            user_blocks[dd - ctx.dd_first].take()
                        }
                        Block::User(_) => user_blocks[dd - ctx.dd_first].take(),
                        Block::Scratch(i) | Block::Lost(i) => sc[i].take(),
                        // Recovery reads every data block; the plan has them all.
                        Block::Unneeded => None,
                    });
                }
                let pb = p.and_then(|i| sc[i].take());
                let qb = q.and_then(|i| sc[i].take());
                rebuild(&slot_of, blocks, lost, pb, qb, spare);
            }
            Plan::BandWrite {
                ctx,
                kind,
                old,
                p,
                q,
                new_p,
                new_q,
                lost,
            } => {
                let UserBuf::Write(ubuf) = user else { return };
                let len = ctx.len();
                let new_data = |dd: usize| -> &[u8] {
                    let off = ctx.user_off(dd);
                    &ubuf[off..off + len]
                };
                match kind {
                    PlanKind::Direct => {}
                    PlanKind::ReadModifyWrite => {
                        // P' = P ^ old ^ new, Q' = Q ^ g^slot (old ^ new), in place in the
                        // old parity blocks, which then become the ones written.
                        let (slot_of, nslots) = ctx.slots();
                        let mut sc = scratch_slices(scratch);
                        let written: Vec<(usize, usize, usize)> = (ctx.dd_first..=ctx.dd_last)
                            .filter_map(|dd| match old[dd] {
                                Some(Block::Scratch(i)) => {
                                    let slot = slot_of.iter().position(|&e| e == Some(dd))?;
                                    Some((dd, i, slot))
                                }
                                _ => None,
                            })
                            .collect();
                        let pb = p.and_then(|i| sc[i].take());
                        let qb = q.and_then(|i| sc[i].take());
                        let olds: Vec<(usize, &[u8])> = written
                            .iter()
                            .filter_map(|&(_, i, slot)| {
                                let b: &[u8] = sc[i].take()?;
                                Some((slot, b))
                            })
                            .collect();
                        let news: Vec<(usize, &[u8])> = written
                            .iter()
                            .map(|&(dd, _, slot)| (slot, new_data(dd)))
                            .collect();
                        match (pb, qb) {
                            (Some(pb), None) => {
                                let srcs: Vec<&[u8]> =
                                    olds.iter().chain(&news).map(|&(_, b)| b).collect();
                                kernel_ok(raidkit_parity::xor_into(pb, &srcs));
                            }
                            (pb, Some(qb)) => {
                                // With P lost, new P's block takes the P side of the syndrome
                                // update; it is not written.
                                let pb = match pb {
                                    Some(pb) => pb,
                                    None => match sc[*new_p].take() {
                                        Some(b) => b,
                                        None => return,
                                    },
                                };
                                // The written slots, lowest to highest: md's xor_syndrome
                                // range (slots outside it are not read).
                                let first = written.iter().map(|w| w.2).min();
                                let last = written.iter().map(|w| w.2).max();
                                if let (Some(first), Some(last)) = (first, last) {
                                    for set in [&olds, &news] {
                                        let mut slots: Vec<&[u8]> = vec![&[]; nslots];
                                        for &(slot, b) in set.iter() {
                                            slots[slot] = b;
                                        }
                                        kernel_ok(raidkit_parity::xor_syndrome(
                                            &slots, first, last, pb, qb,
                                        ));
                                    }
                                }
                            }
                            (None, None) => {}
                        }
                        if let Some(i) = p {
                            scratch.swap(*i, *new_p);
                        }
                        if let (Some(i), Some(nq)) = (q, new_q) {
                            scratch.swap(*i, *nq);
                        }
                    }
                    _ => {
                        // Full stripe or reconstruct-write: parity of the whole new band,
                        // after rebuilding lost data the request does not overwrite.
                        let (slot_of, _) = ctx.slots();
                        if !lost.is_empty() {
                            let mut sc = scratch_slices(scratch);
                            let blocks: Vec<Option<&mut [u8]>> = old
                                .iter()
                                .map(|b| match b {
                                    Some(Block::Scratch(i)) | Some(Block::Lost(i)) => sc[*i].take(),
                                    _ => None,
                                })
                                .collect();
                            let pb = p.and_then(|i| sc[i].take());
                            let qb = q.and_then(|i| sc[i].take());
                            // New P is computed below; until then its block is free.
                            let spare = sc[*new_p].take();
                            rebuild(&slot_of, blocks, lost, pb, qb, spare);
                        }
                        let mut np = std::mem::take(&mut scratch[*new_p]);
                        let mut nq = new_q.map(|i| std::mem::take(&mut scratch[i]));
                        {
                            let scratch = &*scratch;
                            let block_of = |dd: usize| -> &[u8] {
                                if ctx.touched(dd) {
                                    new_data(dd)
                                } else {
                                    match old[dd] {
                                        Some(Block::Scratch(i)) | Some(Block::Lost(i)) => {
                                            &scratch[i]
                                        }
                                        _ => &[],
                                    }
                                }
                            };
                            if let Some(nq) = nq.as_deref_mut() {
                                // Zero slots (DDF) are empty blocks, as the kernels take them.
                                let refs: Vec<&[u8]> = slot_of
                                    .iter()
                                    .map(|e| e.map_or(&[][..], block_of))
                                    .collect();
                                kernel_ok(raidkit_parity::gen_syndrome(&refs, &mut np, nq));
                            } else {
                                let refs: Vec<&[u8]> =
                                    (0..ctx.info.data_members.len()).map(block_of).collect();
                                kernel_ok(raidkit_parity::gen_p(&refs, &mut np));
                            }
                        }
                        scratch[*new_p] = np;
                        if let (Some(nq), Some(iq)) = (nq, new_q) {
                            scratch[*iq] = nq;
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// Every scratch block as a separately borrowable slice.
pub(super) fn scratch_slices(scratch: &mut [Vec<u8>]) -> Vec<Option<&mut [u8]>> {
    scratch.iter_mut().map(|b| Some(b.as_mut_slice())).collect()
}

/// `count` blocks of `len` bytes, `stride` bytes apart from `first` on, as disjoint slices
/// (the data indices of a band in the user buffer: one chunk apart, `len` ≤ chunk).
pub(super) fn carve(
    buf: &mut [u8],
    first: usize,
    stride: usize,
    count: usize,
    len: usize,
) -> Vec<Option<&mut [u8]>> {
    let mut out = Vec::with_capacity(count);
    let mut rest: &mut [u8] = &mut buf[first..];
    for k in 0..count {
        let (blk, tail) = std::mem::take(&mut rest).split_at_mut(len);
        out.push(Some(blk));
        if k + 1 < count {
            rest = &mut tail[stride - len..];
        }
    }
    out
}

/// Rebuilds the lost data indices `lost` (one or two) in place. `blocks[dd]` is data index
/// dd's block (lost ones are the outputs); `slot_of[slot]` is the data index in syndrome slot
/// `slot` (`None`: a zero block). One lost block comes back from P by XOR; with P lost or two
/// blocks lost, md's RAID-6 recovery runs, which needs a block for P: the live P, else `spare`
/// (its contents are overwritten).
pub(super) fn rebuild(
    slot_of: &[Option<usize>],
    mut blocks: Vec<Option<&mut [u8]>>,
    lost: &[usize],
    p: Option<&mut [u8]>,
    q: Option<&mut [u8]>,
    spare: Option<&mut [u8]>,
) {
    if let ([x], Some(p)) = (lost, p.as_deref()) {
        let Some(dst) = blocks[*x].take() else { return };
        let mut srcs: Vec<&[u8]> = blocks.iter().flatten().map(|b| &**b).collect();
        srcs.push(p);
        kernel_ok(raidkit_parity::gen_p(&srcs, dst));
        return;
    }
    let (Some(p), Some(q)) = (p.or(spare), q) else {
        // The planner refuses bands it cannot rebuild; nothing to do with what is left.
        return;
    };
    let n = slot_of.len();
    let slot = |dd: usize| slot_of.iter().position(|&e| e == Some(dd)).unwrap_or(n);
    let missing: Vec<usize> = match lost {
        [x] => vec![slot(*x), n],
        _ => lost.iter().map(|&dd| slot(dd)).collect(),
    };
    let mut list: Vec<&mut [u8]> = Vec::with_capacity(n + 2);
    for e in slot_of {
        list.push(e.and_then(|dd| blocks[dd].take()).unwrap_or_default());
    }
    list.push(p);
    list.push(q);
    kernel_ok(raidkit_parity::recover(&mut list, &missing));
}
