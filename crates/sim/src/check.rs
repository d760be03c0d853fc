//! The independent encoder check: at a quiet point, every member's bytes must equal what
//! raidkit-layout's placement and raidkit-parity's P/Q make of the reference model's contents.
//!
//! This shares no code with the engine's planner or its GF arithmetic, so a placement or parity
//! bug in the engine shows up as a disagreement here. Sectors the model is unsure of (in doubt
//! after a crash, or a failed write) are skipped, and so is every stripe (raid4/5/6) or copy
//! (raid1/10) that held such a sector at a crash: without a resync after an unclean stop, md's
//! own arrays may disagree there as well. Such a stripe or sector is still compared; once it
//! matches, it leaves the unsynced set and is checked strictly from then on (a correct engine
//! keeps a consistent stripe consistent).

use crate::disk::SimDisk;
use crate::model::{sector_pattern, Model, SECTOR};
use raidkit_layout::Geometry;
use std::collections::BTreeSet;

/// One active slot's member: the disk and where its data area starts.
pub struct SlotMember<'a> {
    pub disk: &'a SimDisk,
    pub data_offset_sectors: u64,
}

/// What the check covered.
#[derive(Clone, Copy, Debug, Default)]
pub struct CheckStats {
    pub sectors_checked: u64,
    pub sectors_skipped: u64,
    /// Sectors left unchecked because they still disagree since a crash (no resync yet).
    pub sectors_unsynced: u64,
}

fn expected_run(model: &Model, start: u64, n: u64, out: &mut [u8]) -> Vec<bool> {
    let mut known = Vec::with_capacity(n as usize);
    for i in 0..n {
        let s = start + i;
        let dst = &mut out[i as usize * SECTOR..(i as usize + 1) * SECTOR];
        match model.certain(s) {
            Some(id) => {
                sector_pattern(id, s, dst);
                known.push(true);
            }
            None => known.push(false),
        }
    }
    known
}

/// Compares every slot's data area with the independent encoding. `unsynced` holds array
/// sectors that were in doubt at a crash. Returns a description of the first disagreement.
pub fn check_members(
    geo: &Geometry,
    slots: &[SlotMember<'_>],
    model: &Model,
    unsynced: &mut BTreeSet<u64>,
) -> Result<CheckStats, String> {
    let mut stats = CheckStats::default();
    if geo.array_sectors() != model.sectors() {
        return Err(format!(
            "raidkit-layout gives {} array sectors, the engine {}",
            geo.array_sectors(),
            model.sectors()
        ));
    }
    let raw = |slot: u32, member_sector: u64, n: u64| -> Vec<u8> {
        let m = &slots[slot as usize];
        m.disk.peek_live(
            (m.data_offset_sectors + member_sector) * SECTOR as u64,
            n as usize * SECTOR,
        )
    };
    match geo {
        Geometry::Parity(_) => {
            let chunk = geo.chunk_sectors() as u64;
            let stripes = geo.stripe_count().map_err(|e| e.to_string())?;
            let mut block = vec![0u8; chunk as usize * SECTOR];
            for stripe in 0..stripes {
                let sm = geo.stripe_map(stripe).map_err(|e| e.to_string())?;
                let d = sm.data_members.len() as u64;
                let first = sm.array_sector_start;
                let span = d * chunk;
                if (first..first + span).any(|s| model.certain(s).is_none()) {
                    stats.sectors_skipped += span;
                    continue;
                }
                let was_unsynced = unsynced.range(first..first + span).next().is_some();
                let mut data: Vec<Vec<u8>> = Vec::with_capacity(d as usize);
                for (i, &member) in sm.data_members.iter().enumerate() {
                    expected_run(model, first + i as u64 * chunk, chunk, &mut block);
                    let got = raw(member, sm.member_sector_start, chunk);
                    if got != block {
                        if was_unsynced {
                            break;
                        }
                        let bad = first_bad_sector(&got, &block);
                        return Err(format!(
                            "stripe {stripe}: data index {i} on slot {member} differs from the model at array sector {}",
                            first + i as u64 * chunk + bad
                        ));
                    }
                    data.push(block.clone());
                }
                if data.len() != sm.data_members.len() {
                    stats.sectors_unsynced += span;
                    continue;
                }
                let refs: Vec<&[u8]> = data.iter().map(|b| b.as_slice()).collect();
                let mut parity_ok = true;
                let mut p = vec![0u8; block.len()];
                match sm.q_member {
                    None => {
                        raidkit_parity::gen_p(&refs, &mut p).map_err(|e| e.to_string())?;
                    }
                    Some(_) => {
                        let mut q = vec![0u8; block.len()];
                        let slots_data: Vec<&[u8]> = sm
                            .syndrome_slots
                            .iter()
                            .map(|s| match s {
                                Some(m) => sm
                                    .data_members
                                    .iter()
                                    .position(|x| x == m)
                                    .map(|i| refs[i])
                                    .unwrap_or(&[][..]),
                                None => &[][..],
                            })
                            .collect();
                        raidkit_parity::gen_syndrome(&slots_data, &mut p, &mut q)
                            .map_err(|e| e.to_string())?;
                        let qm = sm.q_member.unwrap_or(0);
                        if raw(qm, sm.member_sector_start, chunk) != q {
                            if !was_unsynced {
                                return Err(format!("stripe {stripe}: Q on slot {qm} is wrong"));
                            }
                            parity_ok = false;
                        }
                    }
                }
                if raw(sm.p_member, sm.member_sector_start, chunk) != p {
                    if !was_unsynced {
                        return Err(format!(
                            "stripe {stripe}: P on slot {} is wrong",
                            sm.p_member
                        ));
                    }
                    parity_ok = false;
                }
                if !parity_ok {
                    stats.sectors_unsynced += span;
                    continue;
                }
                if was_unsynced {
                    let gone: Vec<u64> = unsynced.range(first..first + span).copied().collect();
                    for s in gone {
                        unsynced.remove(&s);
                    }
                }
                stats.sectors_checked += span;
            }
        }
        _ => {
            let total = geo.array_sectors();
            let mut s = 0u64;
            while s < total {
                let m = geo.map(s).map_err(|e| e.to_string())?;
                let n = m.sectors_to_chunk_end.min(total - s).clamp(1, 1024);
                let mut want = vec![0u8; n as usize * SECTOR];
                let known = expected_run(model, s, n, &mut want);
                let copies: Vec<Vec<u8>> = m
                    .placements
                    .iter()
                    .map(|pl| raw(pl.member, pl.member_sector, n))
                    .collect();
                for (i, &is_known) in known.iter().enumerate() {
                    let a = s + i as u64;
                    let r = i * SECTOR..(i + 1) * SECTOR;
                    if !is_known {
                        stats.sectors_skipped += 1;
                        continue;
                    }
                    if unsynced.contains(&a) {
                        if copies.iter().all(|c| c[r.clone()] == want[r.clone()]) {
                            unsynced.remove(&a);
                        } else {
                            stats.sectors_unsynced += 1;
                            continue;
                        }
                    }
                    for (copy, (pl, got)) in m.placements.iter().zip(&copies).enumerate() {
                        if got[r.clone()] != want[r.clone()] {
                            return Err(format!(
                                "array sector {a}: copy {copy} on slot {} (member sector {}) differs from the model",
                                pl.member,
                                pl.member_sector + i as u64
                            ));
                        }
                        stats.sectors_checked += 1;
                    }
                }
                s += n;
            }
        }
    }
    Ok(stats)
}

fn first_bad_sector(a: &[u8], b: &[u8]) -> u64 {
    a.chunks(SECTOR)
        .zip(b.chunks(SECTOR))
        .position(|(x, y)| x != y)
        .unwrap_or(0) as u64
}
