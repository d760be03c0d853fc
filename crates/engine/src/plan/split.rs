//! Where a request's pieces begin and end: lock units for mirror levels, bands (one stripe,
//! one set of touched data chunks) for parity levels, and the order that keeps two pieces of
//! one request from sharing parity in one round.

use super::*;

/// The array sectors one lock key of a mirror level covers (`lock_key = sector / unit`).
pub fn copies_lock_unit(geo: &Geo) -> u64 {
    if geo.level() == raidkit_layout::Level::Raid1 {
        256
    } else {
        geo.chunk_sectors
    }
}

/// Splits `[array_sector, array_sector + sectors)` into pieces no wider than `max_band_sectors`.
pub fn split(geo: &Geo, array_sector: u64, sectors: u64, max_band_sectors: u64) -> Vec<Piece> {
    let mut out = Vec::new();
    let end = array_sector + sectors;
    let max_band = max_band_sectors.max(8);
    match geo.scheme() {
        Scheme::Copies { .. } => {
            let unit = copies_lock_unit(geo);
            let mut s = array_sector;
            while s < end {
                let (copies, run) = geo.copies(s);
                let unit_left = unit - s % unit;
                let n = run.min(unit_left).min(end - s).min(max_band);
                out.push(Piece {
                    lock_key: s / unit,
                    kind: PieceKind::Copies {
                        copies,
                        sectors: n,
                        user_offset_bytes: ((s - array_sector) as usize) * SECTOR,
                        read_hint: (s / unit) as usize,
                    },
                });
                s += n;
            }
        }
        Scheme::Parity { .. } => {
            let chunk = geo.chunk_sectors;
            let d = geo.data_disks() as u64;
            let mut s = array_sector;
            while s < end {
                let stripe = s / chunk / d;
                let base = stripe * d * chunk;
                let seg_end = end.min(base + d * chunk);
                let a = s - base;
                let b = seg_end - base;
                let (dd_a, off_a) = ((a / chunk) as usize, a % chunk);
                let (dd_b, off_b) = (((b - 1) / chunk) as usize, (b - 1) % chunk + 1);
                let mut bounds = vec![0, off_a, off_b, chunk];
                bounds.sort_unstable();
                bounds.dedup();
                for w in bounds.windows(2) {
                    let (lo, hi) = (w[0], w[1]);
                    let covers = |dd: usize| {
                        let from = if dd == dd_a { off_a } else { 0 };
                        let to = if dd == dd_b { off_b } else { chunk };
                        from <= lo && hi <= to
                    };
                    let dds: Vec<usize> = (dd_a..=dd_b).filter(|&dd| covers(dd)).collect();
                    let (Some(&first), Some(&last)) = (dds.first(), dds.last()) else {
                        continue;
                    };
                    let mut x = lo;
                    while x < hi {
                        let n = (hi - x).min(max_band);
                        let first_array_sector = base + first as u64 * chunk + x;
                        out.push(Piece {
                            lock_key: stripe,
                            kind: PieceKind::Band {
                                stripe,
                                lo: x,
                                sectors: n,
                                dd_first: first,
                                dd_last: last,
                                user_offset_bytes: ((first_array_sector - array_sector) as usize)
                                    * SECTOR,
                            },
                        });
                        x += n;
                    }
                }
                s = seg_end;
            }
        }
    }
    out
}

/// Where a member range listed in a bad-block log (`listed(slot)`: (member sector, sectors)
/// ranges) starts or ends inside `piece`, as sector offsets from the piece's start. A slot
/// whose log covers part of a piece is lost for the whole piece; were the piece written so,
/// the slot's unlisted sectors in it would keep old data that still reads directly, so a
/// write piece must be cut at these offsets first ([`cut`]): md decides per 4 KiB page.
pub fn listed_edges<'a>(
    geo: &Geo,
    piece: &Piece,
    listed: impl Fn(usize) -> Option<&'a [(u64, u64)]>,
) -> Vec<u64> {
    let (starts, sectors) = member_ranges(geo, piece);
    let mut edges: Vec<u64> = Vec::new();
    for (slot, from) in starts {
        for &(b, len) in listed(slot).unwrap_or(&[]) {
            for edge in [b, b + len] {
                if edge > from && edge < from + sectors {
                    edges.push(edge - from);
                }
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    edges
}

/// The member sector where `piece` starts on each slot it spans, as (slot, sector), and its
/// length in sectors: a band spans every slot at the same member sectors, copies their own.
pub(super) fn member_ranges(geo: &Geo, piece: &Piece) -> (Vec<(usize, u64)>, u64) {
    match &piece.kind {
        PieceKind::Copies {
            copies, sectors, ..
        } => (copies.clone(), *sectors),
        PieceKind::Band {
            stripe,
            lo,
            sectors,
            ..
        } => {
            let from = stripe * geo.chunk_sectors + lo;
            ((0..geo.raid_disks).map(|s| (s, from)).collect(), *sectors)
        }
    }
}

/// `piece` cut at `offsets` (sectors from its start, ascending; those outside
/// `1..sectors` are ignored) into pieces that together cover the same sectors and user
/// bytes, under the same lock.
pub fn cut(piece: &Piece, offsets: &[u64]) -> Vec<Piece> {
    let sectors = match &piece.kind {
        PieceKind::Copies { sectors, .. } | PieceKind::Band { sectors, .. } => *sectors,
    };
    let mut bounds: Vec<u64> = offsets
        .iter()
        .copied()
        .filter(|&o| o > 0 && o < sectors)
        .collect();
    if bounds.is_empty() {
        return vec![piece.clone()];
    }
    bounds.push(sectors);
    let mut out = Vec::with_capacity(bounds.len());
    let mut at = 0;
    for end in bounds {
        if end <= at {
            continue;
        }
        let n = end - at;
        let shift = at as usize * SECTOR;
        let kind = match &piece.kind {
            PieceKind::Copies {
                copies,
                user_offset_bytes,
                read_hint,
                ..
            } => PieceKind::Copies {
                copies: copies.iter().map(|&(m, s)| (m, s + at)).collect(),
                sectors: n,
                user_offset_bytes: user_offset_bytes + shift,
                read_hint: *read_hint,
            },
            PieceKind::Band {
                stripe,
                lo,
                dd_first,
                dd_last,
                user_offset_bytes,
                ..
            } => PieceKind::Band {
                stripe: *stripe,
                lo: lo + at,
                sectors: n,
                dd_first: *dd_first,
                dd_last: *dd_last,
                user_offset_bytes: user_offset_bytes + shift,
            },
        };
        out.push(Piece {
            lock_key: piece.lock_key,
            kind,
        });
        at = end;
    }
    out
}
