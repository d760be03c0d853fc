//! Reliability: mean time to data loss, the chance of an unreadable sector during a rebuild,
//! and the annual chance of losing data (Backblaze's per-repair-window binomial method), for
//! one array and for a fleet of them.

use crate::drive::DriveModel;
use crate::system::System;
use serde::Serialize;

/// Hours in a year (365.25 days).
pub const YEAR_HOURS: f64 = 8766.0;

/// Assumed where the catalog gives none.
pub const DEFAULT_AFR_PCT: f64 = 2.0;
pub const DEFAULT_URE_BITS: f64 = 1e14;

#[derive(Clone, Debug, Serialize)]
pub struct Reliability {
    pub afr_pct: f64,
    pub ure_bits: f64,
    /// Failures any stripe survives.
    pub tolerance: usize,
    /// A rebuild onto a new member, idle (hours), and what sets its pace.
    pub rebuild_hours: f64,
    pub rebuild_limit: String,
    /// Hours from a failure until the rebuild starts (0 with a hot spare).
    pub replace_hours: f64,
    /// Mean time to data loss from drive failures alone (years).
    pub mttdl_years: f64,
    /// The chance that a rebuild meets at least one unreadable sector.
    pub ure_per_rebuild: f64,
    /// Whether such a sector is lost (no redundancy left while rebuilding).
    pub ure_loses_data: bool,
    /// The chance of losing the array to drive failures in a year (per-window binomial).
    pub annual_loss: f64,
    /// The chance of losing at least one sector to an unreadable one during a rebuild in a
    /// year.
    pub annual_sector_loss: f64,
    pub fleet: usize,
    pub fleet_annual_loss: f64,
}

/// P(X >= k) for X ~ Binomial(n, p), summed over the upper tail itself (precise when the
/// chance is tiny, where 1 - P(X < k) would round to 0).
pub fn binomial_at_least(n: usize, p: f64, k: usize) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n {
        return 0.0;
    }
    let mut c = 1.0f64; // C(n, i), built up to i = k first
    for i in 1..=k {
        c = c * (n - i + 1) as f64 / i as f64;
    }
    let mut sum = 0.0;
    for i in k..=n {
        if i > k {
            c = c * (n - i + 1) as f64 / i as f64;
        }
        sum += c * p.powi(i as i32) * (1.0 - p).powi((n - i) as i32);
    }
    sum.clamp(0.0, 1.0)
}

/// 1 - e^-x, precise for small x.
fn one_minus_exp(x: f64) -> f64 {
    -(-x).exp_m1()
}

/// The rebuild of one member, idle: every surviving member it reads streams its whole
/// surface and the new member is written at its zones' rates. Returns (hours, limit).
pub fn rebuild_hours(sys: &System) -> (f64, String) {
    let d = DriveModel::new(&sys.drive, sys.write_cache);
    let read = d.seq_rate(0.0, 1.0, false);
    let write = d.seq_rate(0.0, 1.0, true);
    let cap = d.capacity as f64;
    // Bytes that cross a controller: every surviving member read plus the new one written.
    let readers = match sys.level.parity_group(sys.drives) {
        Some((_, g)) => g - 1,
        None => 1,
    };
    let mut rate = read.min(write);
    let mut limit = format!(
        "the drives' sequential rate ({:.0} MB/s over the whole surface)",
        rate / 1e6
    );
    if let Some(c) = &sys.controller {
        let through = (c.read_mbps * 1e6 / readers as f64).min(c.write_mbps * 1e6);
        if through < rate {
            rate = through;
            limit = format!(
                "controller {} ({} members read through it)",
                c.name, readers
            );
        }
    }
    (cap / rate / 3600.0, limit)
}

/// The reliability of `sys`; `fleet` arrays of it.
pub fn reliability(sys: &System, replace_hours: f64, fleet: usize) -> Reliability {
    let n = sys.drives;
    let afr_pct = sys.drive.afr_pct.unwrap_or(DEFAULT_AFR_PCT);
    let ure_bits = sys.drive.ure_bits.unwrap_or(DEFAULT_URE_BITS);
    let afr = afr_pct / 100.0;
    // A drive's failure rate per hour from its annual probability.
    let lambda = -(1.0 - afr).ln() / YEAR_HOURS;
    let (rebuild, limit) = rebuild_hours(sys);
    let mttr = rebuild + replace_hours;
    let t = sys.level.tolerance(n);
    let f = sys.level.exposed_members(n);
    let mttdl_hours = if t == 0 {
        1.0 / (n as f64 * lambda)
    } else {
        // Markov chain, failures independent: mu^t / (lambda^(t+1) n f (f-1) ...).
        let mu = 1.0 / mttr;
        let mut denom = n as f64 * lambda;
        for j in 0..t {
            denom *= (f.saturating_sub(j)).max(1) as f64 * lambda;
        }
        mu.powi(t as i32) / denom
    };
    // A rebuild reads each surviving member of the group (parity) or one copy.
    let readers = match sys.level.parity_group(n) {
        Some((_, g)) => g - 1,
        None if t == 0 => 0,
        None => 1,
    };
    let bits = readers as f64 * sys.drive.capacity_bytes() as f64 * 8.0;
    let ure = one_minus_exp(bits / ure_bits);
    let ure_loses_data = t == 1;
    // Backblaze: a failure opens a repair window; data is lost when `t` more of the exposed
    // members fail within it (each with the chance its AFR gives for the window's length).
    let failures_per_year = n as f64 * afr;
    let (annual_loss, annual_sector_loss) = if t == 0 {
        (1.0 - (1.0 - afr).powi(n as i32), 0.0)
    } else {
        let p_window = one_minus_exp(lambda * mttr);
        let per_failure = binomial_at_least(f, p_window, t);
        let sector = if ure_loses_data { ure } else { 0.0 };
        (
            one_minus_exp(failures_per_year * per_failure),
            one_minus_exp(failures_per_year * sector),
        )
    };
    let fleet = fleet.max(1);
    Reliability {
        afr_pct,
        ure_bits,
        tolerance: t,
        rebuild_hours: rebuild,
        rebuild_limit: limit,
        replace_hours,
        mttdl_years: mttdl_hours / YEAR_HOURS,
        ure_per_rebuild: ure,
        ure_loses_data,
        annual_loss,
        annual_sector_loss,
        fleet,
        fleet_annual_loss: one_minus_exp(-(fleet as f64) * (-annual_loss).ln_1p()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::level::Level;
    use raidkit_disk::emu::catalog::Catalog;

    #[test]
    fn binomial_tails() {
        assert!((binomial_at_least(5, 0.1, 1) - (1.0 - 0.9f64.powi(5))).abs() < 1e-12);
        let two = 1.0 - 0.9f64.powi(5) - 5.0 * 0.1 * 0.9f64.powi(4);
        assert!((binomial_at_least(5, 0.1, 2) - two).abs() < 1e-12);
        assert_eq!(binomial_at_least(3, 0.5, 4), 0.0);
        // Tiny chances keep their size: five of five at 1e-4 is 1e-20, not 0.
        let tiny = binomial_at_least(5, 1e-4, 5);
        assert!((tiny / 1e-20 - 1.0).abs() < 1e-9, "{tiny}");
    }

    /// The textbook orders: RAID 6 outlives RAID 5 by orders of magnitude, RAID 0 dies
    /// with its first drive, a 12 TB RAID 5 read of 1e14-bit drives likely meets a bad
    /// sector, and the closed form matches MTTF^2 / (n (n-1) MTTR) for RAID 5.
    #[test]
    fn levels_rank_as_the_textbooks_say() {
        let c = Catalog::built_in();
        let d = c.drive("hds7k3000").unwrap().clone();
        let r5 = reliability(&System::new(d.clone(), 6, Level::Raid5), 24.0, 1);
        let r6 = reliability(&System::new(d.clone(), 6, Level::Raid6), 24.0, 1);
        let r0 = reliability(&System::new(d.clone(), 6, Level::Raid0), 24.0, 1);
        assert!(r6.mttdl_years > 100.0 * r5.mttdl_years);
        assert!(r0.mttdl_years < 20.0);
        assert!(r5.annual_loss > r6.annual_loss && r0.annual_loss > r5.annual_loss);
        // 5 x 2 TB read: 8e13 bits at 1e14 -> 1 - e^-0.8.
        assert!((r5.ure_per_rebuild - (1.0 - (-0.8f64).exp())).abs() < 0.01);
        assert!(r5.ure_loses_data && !r6.ure_loses_data);
        let mttf = YEAR_HOURS / (-(1.0 - 0.015f64).ln());
        let mttr = r5.rebuild_hours + 24.0;
        let want = mttf * mttf / (6.0 * 5.0 * mttr) / YEAR_HOURS;
        assert!(
            (r5.mttdl_years / want - 1.0).abs() < 1e-6,
            "{} {want}",
            r5.mttdl_years
        );
        // A fleet of 100 loses more often than one array.
        let f = reliability(&System::new(d, 6, Level::Raid5), 24.0, 100);
        assert!(f.fleet_annual_loss > 50.0 * r5.annual_loss);
    }
}
