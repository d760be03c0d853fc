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
