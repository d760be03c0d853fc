//! Scheduled maintenance of served arrays (`serve --schedule check=first-sunday@01:00+6h`):
//! md's mdcheck (a check starting on the first Sunday of the month at 01:00, six hours a
//! night, continuing the next nights where it stopped until the whole array is checked), a
//! controller's patrol read and consistency check schedules, or plain intervals (`check=7d`).
//! A run falls due by its schedule; it is requested as a client's `raidkit task start`
//! requests it (queued behind a running task, such as a rebuild) and runs at the array's
//! task rates, beside the clients. A run with a budget still going when the budget is spent
//! is stopped; where it stopped is recorded, and the next window (the next night at the same
//! time, or the interval for interval schedules) continues from there. When each task last
//! started, and where a cut-short run goes on, are kept in a state file (JSON, written whole
//! through a temporary file and a rename), so a server that restarts neither starts every
//! task again at once nor forgets a check half done.

use super::export::{Backend, ServedArray};
use super::log::ServerLog;
use crate::error::CliError;
use raidkit_engine::TaskKind;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One scheduled task: what, when, and for how long at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub task: TaskKind,
    pub when: When,
    /// A time budget per run (mdcheck's `--duration`): a run still going after it is
    /// stopped, and the next window continues where it stopped until the whole range is
    /// done. `None`: a run goes to the end.
    pub budget: Option<Duration>,
}

/// When a scheduled task falls due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Once this long has passed since it last started (`7d`, `12h`, `90s`); a run cut
    /// short by its budget continues after the same interval.
    Every(Duration),
    /// At a local time of day on the days `day` names (`first-sunday@01:00`, md's
    /// mdcheck default); a run cut short by its budget continues the next night at the same
    /// time.
    At { day: Day, hour: u8, minute: u8 },
}

/// Which days a calendar schedule starts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Day {
    Daily,
    /// Every week on this weekday (0 = Sunday).
    Weekly(u8),
    /// On this weekday of the first seven days of each month (0 = Sunday).
    FirstOfMonth(u8),
}

const WEEKDAYS: [&str; 7] = [
    "sunday",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
];

/// Parses `TASK=WHEN[+BUDGET][,...]`: tasks check, repair, patrol; WHEN an interval (a
/// number with s, m, h or d: `7d`, `12h`, `90s`) or `DAY@HH:MM` with DAY `daily`, a weekday
/// (`sunday`, `sun`) or `first-WEEKDAY` (the first of the month); BUDGET an interval.
/// md's mdcheck default is `check=first-sunday@01:00+6h`.
pub fn parse_schedules(text: &str) -> Result<Vec<Schedule>, CliError> {
    let mut out: Vec<Schedule> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (task, rest) = item.split_once('=').ok_or_else(|| {
            CliError::usage(format!(
                "--schedule {item}: use TASK=WHEN[+BUDGET], e.g. check=7d or check=first-sunday@01:00+6h"
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
        let (when, budget) = match rest.split_once('+') {
            Some((w, b)) => (w, Some(parse_interval(b)?)),
            None => (rest, None),
        };
        let when = match when.split_once('@') {
            None => When::Every(parse_interval(when)?),
            Some((day, time)) => parse_calendar(item, day, time)?,
        };
        if out.iter().any(|s| s.task == task) {
            return Err(CliError::usage(format!(
                "--schedule: {} given twice",
                task.name()
            )));
        }
        out.push(Schedule { task, when, budget });
    }
    Ok(out)
}

fn parse_calendar(item: &str, day: &str, time: &str) -> Result<When, CliError> {
    let bad = |why: &str| CliError::usage(format!("--schedule {item}: {why}"));
    let weekday = |name: &str| {
        WEEKDAYS
            .iter()
            .position(|w| *w == name || (name.len() == 3 && w.starts_with(name)))
            .map(|i| i as u8)
    };
    let day = match day {
        "daily" => Day::Daily,
        d => match d.strip_prefix("first-") {
            Some(w) => Day::FirstOfMonth(
                weekday(w).ok_or_else(|| bad("a weekday after first- (first-sunday)"))?,
            ),
            None => Day::Weekly(
                weekday(d).ok_or_else(|| bad("daily, a weekday, or first-WEEKDAY before @"))?,
            ),
        },
    };
    let (h, m) = time
        .split_once(':')
        .ok_or_else(|| bad("a time of day HH:MM after @"))?;
    let (hour, minute) = match (h.parse::<u8>(), m.parse::<u8>()) {
        (Ok(h), Ok(m)) if h < 24 && m < 60 => (h, m),
        _ => return Err(bad("a time of day HH:MM (00:00 to 23:59) after @")),
    };
    Ok(When::At { day, hour, minute })
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

/// What the state file keeps, per array and task: when it last started (seconds since the
/// epoch), and, for a run its budget cut short, where the next one goes on (`TASK.resume`,
/// in the task's sectors): `{"md0": {"check": 1795820101, "check.resume": 524288}}`.
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

/// The local time `hour:minute` on the day of `t` (seconds since the epoch), with that day's
/// weekday and day of the month.
fn local_day_at(t: u64, hour: u8, minute: u8) -> Option<(u64, u8, u8)> {
    // SAFETY: localtime_r and mktime read and write only the `tm` given.
    unsafe {
        let secs = t as libc::time_t;
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return None;
        }
        tm.tm_hour = hour.into();
        tm.tm_min = minute.into();
        tm.tm_sec = 0;
        tm.tm_isdst = -1;
        let at = libc::mktime(&mut tm);
        (at >= 0).then_some((at as u64, tm.tm_wday as u8, tm.tm_mday as u8))
    }
}

impl When {
    /// The latest time at or before `now` this schedule fell due (calendar forms only).
    fn last_due(&self, now: u64) -> Option<u64> {
        let When::At { day, hour, minute } = *self else {
            return None;
        };
        // Every month has a first Sunday within 37 days back.
        (0..40u64).find_map(|k| {
            let (at, wday, mday) = local_day_at(now.checked_sub(k * 86400)?, hour, minute)?;
            let on = match day {
                Day::Daily => true,
                Day::Weekly(w) => wday == w,
                Day::FirstOfMonth(w) => wday == w && mday <= 7,
            };
            (on && at <= now).then_some(at)
        })
    }

    /// Whether a run falls due at `now`, given when the last started (`None`: never) and
    /// whether the last was cut short by its budget (then the next window continues it).
    fn due(&self, now: u64, last: Option<u64>, continuing: bool) -> bool {
        let Some(last) = last else { return true };
        match self {
            When::Every(every) => now.saturating_sub(last) >= every.as_secs(),
            When::At { hour, minute, .. } => {
                let window = if continuing {
                    When::At {
                        day: Day::Daily,
                        hour: *hour,
                        minute: *minute,
                    }
                    .last_due(now)
                } else {
                    self.last_due(now)
                };
                window.is_some_and(|w| w > last)
            }
        }
    }
}

/// A scheduled run going on now.
struct Session {
    started: std::time::Instant,
    /// Finished tasks the array had listed when the run was asked for: the run's report is
    /// the first one after them.
    reports_before: usize,
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
    let mut sessions: BTreeMap<(String, &'static str), Session> = BTreeMap::new();
    // Looked at every second, or more often for short test intervals and budgets.
    let tick = schedules
        .iter()
        .flat_map(|s| {
            let every = match s.when {
                When::Every(d) => d,
                When::At { .. } => Duration::from_secs(1),
            };
            [Some(every), s.budget].into_iter().flatten()
        })
        .map(|d| d / 4)
        .min()
        .unwrap_or(Duration::from_secs(1))
        .clamp(Duration::from_millis(100), Duration::from_secs(1));
    let save_or_warn = |last: &LastStarts, array: &str| {
        if let Err(e) = save(state, last) {
            log.warning(
                "schedule-state",
                Some(array),
                &format!("cannot record the schedule in {}: {e}", state.display()),
            );
        }
    };
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
                let name = sc.task.name();
                let resume_key = format!("{name}.resume");
                let key = (s.name.clone(), name);
                let kept = last.entry(s.name.clone()).or_default();
                if let Some(session) = sessions.get(&key) {
                    let status = array.status();
                    let report = status
                        .finished_tasks
                        .iter()
                        .skip(session.reports_before)
                        .find(|r| r.progress.kind == sc.task);
                    match report {
                        Some(r) => {
                            // The run ended: a budget's stop is continued at the next
                            // window, anything else closes the cycle.
                            if r.outcome == raidkit_engine::TaskOutcome::Stopped
                                && r.progress.position_sectors < r.progress.end_sectors
                            {
                                kept.insert(resume_key.clone(), r.progress.position_sectors);
                                log.info(
                                    "task-scheduled",
                                    Some(&s.name),
                                    &format!(
                                        "{name} stopped at {:.1} % by its time budget; the next window continues it",
                                        r.progress.percent
                                    ),
                                );
                            } else {
                                kept.remove(&resume_key);
                            }
                            sessions.remove(&key);
                            save_or_warn(&last, &s.name);
                        }
                        None => {
                            let over = sc.budget.is_some_and(|b| session.started.elapsed() >= b);
                            let ours = status.task.as_ref().is_some_and(|t| t.kind == sc.task);
                            if over && ours {
                                array.cancel_task();
                            }
                        }
                    }
                    continue;
                }
                let resume = kept.get(&resume_key).copied();
                if !sc.when.due(now, kept.get(name).copied(), resume.is_some()) {
                    continue;
                }
                if let Some(at) = resume {
                    // Where the cut-short run stopped (this assembly may not know it).
                    if array.set_task_start(sc.task, at).is_err() {
                        kept.remove(&resume_key);
                    }
                }
                let reports_before = array.status().finished_tasks.len();
                // Queued behind a running task, as a client's `task start` is.
                if array.request_task(sc.task).is_ok() {
                    kept.insert(name.to_string(), now);
                    save_or_warn(&last, &s.name);
                    sessions.insert(
                        key,
                        Session {
                            started: std::time::Instant::now(),
                            reports_before,
                        },
                    );
                    log.info(
                        "task-scheduled",
                        Some(&s.name),
                        &match resume {
                            Some(at) => format!(
                                "{name} continues by its schedule ({}) from sector {at}",
                                describe(sc)
                            ),
                            None => format!("{name} started by its schedule ({})", describe(sc)),
                        },
                    );
                }
            }
        }
        std::thread::sleep(tick);
    }
}

fn describe_interval(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s.is_multiple_of(86400) => format!("{}d", s / 86400),
        _ if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

/// `every 7d`, `first-sunday@01:00, 6h at a time`.
fn describe(sc: &Schedule) -> String {
    let when = match sc.when {
        When::Every(d) => format!("every {}", describe_interval(d)),
        When::At { day, hour, minute } => {
            let day = match day {
                Day::Daily => "daily".to_string(),
                Day::Weekly(w) => WEEKDAYS[w as usize].to_string(),
                Day::FirstOfMonth(w) => format!("first-{}", WEEKDAYS[w as usize]),
            };
            format!("{day}@{hour:02}:{minute:02}")
        }
    };
    match sc.budget {
        Some(b) => format!("{when}, {} at a time", describe_interval(b)),
        None => when,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_schedules("check=7d, patrol=12h+1h").unwrap(),
            vec![
                Schedule {
                    task: TaskKind::Check,
                    when: When::Every(Duration::from_secs(7 * 86400)),
                    budget: None,
                },
                Schedule {
                    task: TaskKind::Patrol,
                    when: When::Every(Duration::from_secs(12 * 3600)),
                    budget: Some(Duration::from_secs(3600)),
                },
            ]
        );
        let mdcheck = parse_schedules("check=first-sunday@01:00+6h").unwrap();
        assert_eq!(
            mdcheck[0].when,
            When::At {
                day: Day::FirstOfMonth(0),
                hour: 1,
                minute: 0
            }
        );
        assert_eq!(describe(&mdcheck[0]), "first-sunday@01:00, 6h at a time");
        assert_eq!(
            parse_schedules("patrol=sat@23:30").unwrap()[0].when,
            When::At {
                day: Day::Weekly(6),
                hour: 23,
                minute: 30
            }
        );
        for bad in [
            "check",
            "check=0d",
            "check=7w",
            "rebuild=1d",
            "check=1d,check=2d",
            "check=xd",
            "check=someday@01:00",
            "check=first-moon@01:00",
            "check=daily@25:00",
            "check=daily@0100",
            "check=daily@01:00+",
        ] {
            assert!(parse_schedules(bad).is_err(), "{bad}");
        }
        assert_eq!(describe_interval(Duration::from_secs(90)), "90s");
        assert_eq!(describe_interval(Duration::from_secs(7200)), "2h");
    }

    /// Calendar arithmetic in UTC (the tests' process sets TZ for itself).
    #[test]
    fn calendar_schedules_fall_due_on_their_days() {
        std::env::set_var("TZ", "UTC");
        // SAFETY: tzset reads TZ, set just above.
        unsafe { tzset() };
        // 2026-11-28 is a Saturday; 2026-11-01 was the month's first Sunday.
        let now = 1_795_863_600; // 2026-11-28 11:00 UTC
        let at = |d, h, m| When::At {
            day: d,
            hour: h,
            minute: m,
        };
        let first_sunday = at(Day::FirstOfMonth(0), 1, 0);
        assert_eq!(first_sunday.last_due(now), Some(1_793_494_800)); // 2026-11-01 01:00
        assert_eq!(at(Day::Daily, 1, 0).last_due(now), Some(1_795_827_600)); // today 01:00
        assert_eq!(at(Day::Daily, 12, 0).last_due(now), Some(1_795_780_800)); // yesterday 12:00
        assert_eq!(at(Day::Weekly(6), 10, 0).last_due(now), Some(1_795_860_000)); // today 10:00
                                                                                  // Started on the first Sunday: not due again this month; a cut-short run is due
                                                                                  // each night, once.
        let started = 1_793_494_800 + 5;
        assert!(!first_sunday.due(now, Some(started), false));
        assert!(first_sunday.due(now, Some(started), true));
        assert!(!first_sunday.due(now, Some(1_795_827_600 + 5), true));
        assert!(first_sunday.due(now, None, false));
        let every = When::Every(Duration::from_secs(60));
        assert!(!every.due(1000, Some(950), false));
        assert!(every.due(1000, Some(940), true));
    }

    extern "C" {
        fn tzset();
    }
}
