//! Drive health of the served arrays' members: every member's drive is asked (SMART, see
//! `raidkit_disk::health`) at start and then every `--health every=` (30 minutes unless
//! told), and a drive reporting trouble it did not report before becomes the array's
//! `drive-health-warning` event, which the log shows and `raidkit monitor` turns into its
//! DriveHealthWarning (mailed, as the PERC6 alerts a predictive failure). `detail` shows
//! each member's last answer.

use super::export::{Backend, ServedArray};
use crate::error::CliError;
use raidkit_disk::Thresholds;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often drives are asked, and when an answer is a warning: `serve --health`,
/// `monitor --health`, the configuration's HEALTH line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthWatch {
    /// `None`: never asked (`--health off`).
    pub every: Option<Duration>,
    pub thresholds: Thresholds,
}

impl Default for HealthWatch {
    /// Every 30 minutes, smartd's default interval.
    fn default() -> HealthWatch {
        HealthWatch {
            every: Some(Duration::from_secs(30 * 60)),
            thresholds: Thresholds::default(),
        }
    }
}

impl HealthWatch {
    /// Parses `off`, or items `every=30m reallocated=10 pending=1 uncorrectable=1
    /// temperature=60` (commas or spaces between; what is not given keeps its default).
    pub fn parse(text: &str) -> Result<HealthWatch, CliError> {
        let mut watch = HealthWatch::default();
        if text.trim() == "off" {
            watch.every = None;
            return Ok(watch);
        }
        let mut rest = Vec::new();
        for item in text.split([',', ' ']).filter(|s| !s.is_empty()) {
            match item.strip_prefix("every=") {
                Some("off") => watch.every = None,
                Some(every) => watch.every = Some(super::schedule::parse_interval(every)?),
                None => rest.push(item),
            }
        }
        watch.thresholds = Thresholds::parse(&rest.join(","))
            .map_err(|e| CliError::usage(format!("health {text}: {e}")))?;
        Ok(watch)
    }
}

/// Asks the served arrays' drives at once and then every `watch.every`, until `shutdown`.
/// An array in an online reshape is asked once it is whole again.
pub fn run(watch: &HealthWatch, served: &[ServedArray], shutdown: &AtomicBool) {
    let Some(every) = watch.every else { return };
    let mut due = Instant::now();
    while !shutdown.load(Ordering::SeqCst) {
        if Instant::now() >= due {
            for s in served {
                if let Backend::Array(array) = s.slot.get() {
                    array.poll_health(&watch.thresholds);
                }
            }
            due = Instant::now() + every;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_settings_parse_and_bad_ones_are_refused() {
        assert_eq!(HealthWatch::parse("off").unwrap().every, None);
        let w = HealthWatch::parse("every=90s,temperature=55 pending=2").unwrap();
        assert_eq!(w.every, Some(Duration::from_secs(90)));
        assert_eq!(w.thresholds.temperature_c, 55);
        assert_eq!(w.thresholds.pending_sectors, 2);
        assert_eq!(
            w.thresholds.reallocated_sectors,
            Thresholds::default().reallocated_sectors
        );
        for bad in ["every=0s", "every=5w", "heat=3", "pending"] {
            assert!(HealthWatch::parse(bad).is_err(), "{bad}");
        }
    }
}
