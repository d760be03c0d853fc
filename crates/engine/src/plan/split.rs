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

/// Partial parity log arrays: every band that writes more than one data member becomes one
/// band per data member, full-stripe bands too (mirror pieces are kept). The bands come out
/// in rounds: first each band's first data member, then each band's second, and so on, so
/// that one round's bands, all in different stripes or rows, can share a write phase.
///
/// Why: the log recomputes a stripe's parity from its partial parity and the modified data,
/// so it cannot recover a stripe whose modified data member is lost (md's own limit, and for
/// a full-stripe write, whose partial parity is empty, every data member is modified). When a
/// band modifies only one data member, that member's rows are parity XOR the untouched data,
/// and the untouched data did not change: after a crash they read back per sector as the
/// parity left them, old or new, never a mix of two members' states. The bands of one stripe
/// must then run one after another, each logged and written before the next is logged (the
/// caller's batches never hold two pieces with [`same_rows`]).
pub fn one_data_member_per_band(geo: &Geo, pieces: Vec<Piece>) -> Vec<Piece> {
    let chunk_bytes = geo.chunk_sectors as usize * SECTOR;
    let mut rounds: Vec<Vec<Piece>> = vec![Vec::new()];
    for p in pieces {
        match p.kind {
            PieceKind::Band {
                stripe,
                lo,
                sectors,
                dd_first,
                dd_last,
                user_offset_bytes,
            } if dd_last > dd_first => {
                for dd in dd_first..=dd_last {
                    let round = dd - dd_first;
                    if rounds.len() <= round {
                        rounds.push(Vec::new());
                    }
                    rounds[round].push(Piece {
                        lock_key: p.lock_key,
                        kind: PieceKind::Band {
                            stripe,
                            lo,
                            sectors,
                            dd_first: dd,
                            dd_last: dd,
                            user_offset_bytes: user_offset_bytes + (dd - dd_first) * chunk_bytes,
                        },
                    });
                }
            }
            _ => rounds[0].push(p),
        }
    }
    rounds.concat()
}

/// Whether two pieces are bands of the same stripe over overlapping in-chunk rows (they
/// share parity sectors).
pub fn same_rows(a: &Piece, b: &Piece) -> bool {
    match (&a.kind, &b.kind) {
        (
            PieceKind::Band {
                stripe: sa,
                lo: la,
                sectors: na,
                ..
            },
            PieceKind::Band {
                stripe: sb,
                lo: lb,
                sectors: nb,
                ..
            },
        ) => sa == sb && *la < lb + nb && *lb < la + na,
        _ => false,
    }
}
