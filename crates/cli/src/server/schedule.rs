//! Scheduled maintenance of served arrays (`serve --schedule check=7d,patrol=1d`): md's
//! monthly `checkarray` from cron, a controller's patrol read and consistency check
//! schedules. A task falls due once its interval has passed since it was last started; it is
//! requested as a client's `raidkit task start` requests it (queued behind a running task,
//! such as a rebuild) and runs at the array's task rates, beside the clients. When each task last started is kept in a state
//! file (JSON, written whole through a temporary file and a rename), so a server that
//! restarts does not start every task again at once.

use super::export::{Backend, ServedArray};
use super::log::ServerLog;
use crate::error::CliError;
use raidkit_engine::TaskKind;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One scheduled task: what and how often.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub task: TaskKind,
    pub every: Duration,
}

/// Parses `TASK=INTERVAL[,TASK=INTERVAL...]`: tasks check, repair, patrol; intervals a
/// number with s, m, h or d (`7d`, `12h`, `90s`).
pub fn parse_schedules(text: &str) -> Result<Vec<Schedule>, CliError> {
    let mut out: Vec<Schedule> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (task, every) = item.split_once('=').ok_or_else(|| {
            CliError::usage(format!(
                "--schedule {item}: use TASK=INTERVAL, e.g. check=7d"
            ))
        })?;
        let task = match task {
            "check" => TaskKind::Check,
            "repair" => TaskKind::Repair,
            "patrol" => TaskKind::Patrol,
            other => {
                return Err(CliError::usage(format!(
                    "--schedule {other}: check, repair or patrol can be scheduled (rebuild and resync start by themselves)"
                )))
            }
        };
        let every = parse_interval(every)?;
        if out.iter().any(|s| s.task == task) {
            return Err(CliError::usage(format!(
                "--schedule: {} given twice",
                task.name()
            )));
        }
        out.push(Schedule { task, every });
    }
    Ok(out)
}

pub(crate) fn parse_interval(text: &str) -> Result<Duration, CliError> {
    let bad = || {
        CliError::usage(format!(
            "interval {text}: a whole number with s, m, h or d, at least 1s (7d, 12h, 90s)"
        ))
    };
    let (num, unit) = text.split_at(text.len().saturating_sub(1));
    let n: u64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        _ => return Err(bad()),
    };
    if secs == 0 {
        return Err(bad());
    }
    Ok(Duration::from_secs(secs))
}

/// When each array's tasks last started (seconds since the epoch), as the state file keeps
/// it: `{"md0": {"check": 1795820101}}`.
type LastStarts = BTreeMap<String, BTreeMap<String, u64>>;

fn load(path: &Path) -> LastStarts {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn save(path: &Path, last: &LastStarts) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(last)?)?;
    std::fs::rename(&tmp, path)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs the schedules over `served` until `shutdown`, recording starts in `state`.
pub fn run(
    schedules: &[Schedule],
    state: &Path,
    served: &[ServedArray],
    log: &ServerLog,
    shutdown: &AtomicBool,
) {
    let mut last = load(state);
    // Looked at every second, or more often for short test intervals.
    let tick = schedules
        .iter()
        .map(|s| s.every / 4)
        .min()
        .unwrap_or(Duration::from_secs(1))
        .clamp(Duration::from_millis(100), Duration::from_secs(1));
    while !shutdown.load(Ordering::SeqCst) {
        let now = now_secs();
        for s in served {
            let Backend::Array(array) = s.slot.get() else {
                continue;
            };
            for sc in schedules {
                if s.read_only && sc.task.writes() {
                    continue;
                }
                let name = sc.task.name().to_string();
                let due = last
                    .get(&s.name)
                    .and_then(|m| m.get(&name))
                    .is_none_or(|&at| now.saturating_sub(at) >= sc.every.as_secs());
                // Queued behind a running task, as a client's `task start` is.
                if due && array.request_task(sc.task).is_ok() {
                    last.entry(s.name.clone()).or_default().insert(name, now);
                    if let Err(e) = save(state, &last) {
                        log.warning(
                            "schedule-state",
                            Some(&s.name),
                            &format!("cannot record the schedule in {}: {e}", state.display()),
                        );
                    }
                    log.info(
                        "task-scheduled",
                        Some(&s.name),
                        &format!(
                            "{} started by its schedule (every {})",
                            sc.task.name(),
                            describe(sc.every)
                        ),
                    );
                }
            }
        }
        std::thread::sleep(tick);
    }
}

fn describe(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s.is_multiple_of(86400) => format!("{}d", s / 86400),
        _ if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_schedules("check=7d, patrol=12h").unwrap(),
            vec![
                Schedule {
                    task: TaskKind::Check,
                    every: Duration::from_secs(7 * 86400)
                },
                Schedule {
                    task: TaskKind::Patrol,
                    every: Duration::from_secs(12 * 3600)
                },
            ]
        );
        for bad in [
            "check",
            "check=0d",
            "check=7w",
            "rebuild=1d",
            "check=1d,check=2d",
            "check=xd",
        ] {
            assert!(parse_schedules(bad).is_err(), "{bad}");
        }
        assert_eq!(describe(Duration::from_secs(90)), "90s");
        assert_eq!(describe(Duration::from_secs(7200)), "2h");
    }
}
