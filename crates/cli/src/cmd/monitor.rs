//! `raidkit monitor`: watches served arrays through their control sockets and reports what
//! happens to them in mdadm `--monitor`'s vocabulary, so a failed member is heard of at once
//! instead of sitting in a log until a second failure loses data.
//!
//! Each array is read by its own thread: it long-polls the server's `events` request (the
//! array's numbered event log, see `server/control.rs`), turns array events into monitor
//! events (Fail, FailSpare, DegradedArray, SpareActive, RebuildStarted, RebuildNN,
//! RebuildFinished, MoveSpare, SparesMissing, DeviceDisappeared, NewArray, TestMessage, and
//! raidkit's own: SpareTaken, BadBlocks, CheckMismatches, DriveHealthWarning, ArrayFailed,
//! EventsMissed), and, while a task runs, reads
//! its progress for the RebuildNN steps. A socket that stops answering is DeviceDisappeared;
//! the thread then tries again every `--delay`. Every event goes, in this order, to standard
//! output (one line, or JSON with `--json`), to syslog (`--syslog`), to the program
//! (`--program PROG EVENT ARRAY [MEMBER]`, as mdadm runs it) and, for the events mdadm mails
//! (Fail, FailSpare, DegradedArray, TestMessage, and raidkit's ArrayFailed and
//! DriveHealthWarning), to the mail
//! address through the local `sendmail -t` interface (`--mail`). One thread writes them, so
//! the program runs once at a time, in the order events happened to each array.
//!
//! With `--scan`, the configuration's arrays that no server serves are watched too: every
//! `--delay` a read-only assembly of the members found for them (nothing written) says which
//! slots lack a member in sync, and every `--health every=` their drives are asked for their
//! health (served arrays' drives are asked by their server). An ARRAY line's `spares=N` gives
//! SparesMissing when an array is first seen with fewer spares.

use raidkit_cli::server::control::{ControlClient, Request};
use raidkit_cli::CliError;
use serde::Serialize;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct MonitorArgs {
    /// Control socket of a `raidkit serve` to watch (every array it serves); repeat for more.
    #[arg(long, value_name = "SOCKET", required_unless_present = "scan")]
    pub control: Vec<PathBuf>,
    /// Take the control sockets (CONTROL), --mail (MAILADDR) and --program (PROGRAM) the
    /// configuration file names, where not given here; its ARRAY lines no server serves are
    /// watched through their members' superblocks (read-only, every --delay): DegradedArray,
    /// DeviceDisappeared, NewArray.
    #[arg(long)]
    pub scan: bool,
    /// The configuration file --scan reads.
    #[arg(long, value_name = "PATH", default_value = raidkit_cli::config::DEFAULT_CONFIG, requires = "scan")]
    pub config: PathBuf,
    /// Run PROG EVENT ARRAY [MEMBER] for each event, as mdadm's --program does.
    #[arg(long, value_name = "PROG")]
    pub program: Option<PathBuf>,
    /// Mail Fail, FailSpare, DegradedArray, TestMessage, ArrayFailed and DriveHealthWarning
    /// events to this address through the local sendmail interface (`sendmail -t`), as mdadm's --mail does.
    #[arg(long, value_name = "ADDRESS")]
    pub mail: Option<String>,
    /// The sendmail program (the MTA's `sendmail -t` interface).
    #[arg(long, value_name = "PATH", default_value = "/usr/sbin/sendmail")]
    pub sendmail: PathBuf,
    /// Also write every event to syslog (facility daemon; journald reads it too).
    #[arg(long)]
    pub syslog: bool,
    /// Send a TestMessage event for every array at start, to check the program and the mail.
    #[arg(long, short = 't')]
    pub test: bool,
    /// Check once, report DegradedArray for each degraded array, SparesMissing, each drive
    /// health warning (and TestMessage with --test), and exit, as mdadm's --oneshot for cron.
    #[arg(long, short = '1')]
    pub oneshot: bool,
    /// Seconds between attempts to reach a control socket that stopped answering.
    #[arg(long, short = 'd', default_value_t = 5)]
    pub delay: u64,
    /// Progress steps of RebuildNN events, in percent (mdadm's --increment).
    #[arg(long, short = 'r', default_value_t = 20, value_parser = clap::value_parser!(u8).range(1..=99))]
    pub increment: u8,
    /// Print events as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Drive health of the stopped arrays' members (served ones are asked by their server):
    /// how often and what warns, as `serve --health` (`every=30m,temperature=60`, `off`)
    /// [default: the configuration's HEALTH, or every 30 minutes]. `--oneshot` asks once.
    #[arg(long, value_name = "SETTINGS")]
    pub health: Option<String>,
}

/// One monitor event, as mdadm names them (and raidkit's own).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MonitorEvent {
    /// mdadm's event name: Fail, DegradedArray, RebuildStarted, Rebuild40, ...
    pub event: String,
    /// The array: `SOCKET:NAME`, the control socket and the export name.
    pub array: String,
    /// The member concerned, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// What happened, in a sentence.
    pub detail: String,
}

impl MonitorEvent {
    fn new(event: &str, array: &str, member: Option<&str>, detail: String) -> MonitorEvent {
        MonitorEvent {
            event: event.to_string(),
            array: array.to_string(),
            member: member.map(str::to_string),
            detail,
        }
    }

    /// Whether mdadm mails this event (and raidkit's ArrayFailed, worse than any of them).
    fn mailed(&self) -> bool {
        matches!(
            self.event.as_str(),
            "Fail"
                | "FailSpare"
                | "DegradedArray"
                | "TestMessage"
                | "ArrayFailed"
                | "DriveHealthWarning"
        )
    }

    /// syslog priority: mdadm's crit for failures and degradation, info otherwise.
    fn priority(&self) -> libc::c_int {
        match self.event.as_str() {
            "Fail" | "FailSpare" | "DegradedArray" | "ArrayFailed" | "DeviceDisappeared" => {
                libc::LOG_CRIT
            }
            "BadBlocks" | "CheckMismatches" | "SparesMissing" | "DriveHealthWarning" => {
                libc::LOG_WARNING
            }
            _ => libc::LOG_INFO,
        }
    }
}

/// The monitor events of one array event (none for most; see the module's notes).
pub fn translate(array: &str, event: &Value) -> Vec<MonitorEvent> {
    let kind = event["event"].as_str().unwrap_or("");
    let member = event["member"].as_str();
    let text = |k: &str| event[k].as_str().unwrap_or("").to_string();
    let one = |name: &str, member: Option<&str>, detail: String| {
        vec![MonitorEvent::new(name, array, member, detail)]
    };
    match kind {
        "member-faulty" => {
            // A spare that fails is mdadm's FailSpare; a member in a slot, Fail.
            let name = if event["slot"].is_null() {
                "FailSpare"
            } else {
                "Fail"
            };
            one(name, member, text("reason"))
        }
        "array-degraded" | "running-degraded" => one(
            "DegradedArray",
            None,
            format!("slots without a member in sync: {}", event["missing_slots"]),
        ),
        "array-failed" => one("ArrayFailed", None, text("detail")),
        "rebuilt" => one(
            "SpareActive",
            member,
            format!("in sync in slot {}", event["slot"]),
        ),
        "spare-moved" => one(
            "MoveSpare",
            member,
            format!("moved here from {}", text("from")),
        ),
        "spare-taken" => one(
            "SpareTaken",
            member,
            format!("takes slot {} and is rebuilt", event["slot"]),
        ),
        "task-started" => one("RebuildStarted", None, format!("{} started", text("task"))),
        "task-finished" => one(
            "RebuildFinished",
            None,
            format!("{}: {}", text("task"), text("summary")),
        ),
        "bad-blocks-recorded" => one("BadBlocks", member, format!("bad blocks recorded: {event}")),
        "drive-health-warning" => one(
            "DriveHealthWarning",
            member,
            event["warnings"]
                .as_array()
                .map(|w| {
                    w.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .unwrap_or_default(),
        ),
        _ => Vec::new(),
    }
}

pub fn run(mut args: MonitorArgs) -> Result<(), CliError> {
    let mut config = None;
    if args.scan {
        let cfg = raidkit_cli::config::Config::load(&args.config)?;
        args.control.extend(cfg.controls.iter().cloned());
        args.mail = args.mail.or(cfg.mailaddr.clone());
        args.program = args.program.or(cfg.program.clone());
        if args.control.is_empty() && cfg.arrays.is_empty() {
            return Err(CliError::usage(format!(
                "{}: no CONTROL and no ARRAY line, and no --control: nothing to watch",
                args.config.display()
            )));
        }
        config = Some(cfg);
    }
    if args.program.is_none() && args.mail.is_none() && !args.syslog {
        eprintln!(
            "raidkit: monitor: no --program, --mail or --syslog: events go to standard output only"
        );
    }
    let sink = Sink::new(&args)?;
    let health = match &args.health {
        Some(text) => raidkit_cli::server::health::HealthWatch::parse(text)?,
        None => config.as_ref().and_then(|c| c.health).unwrap_or_default(),
    };
    // The configuration's arrays no server named here serves: watched through their
    // members' superblocks.
    let stopped = match &config {
        Some(cfg) => stopped_arrays(cfg, &args.config, &args.control),
        None => Vec::new(),
    };
    if args.test {
        for (_, label) in &stopped {
            sink.emit(&MonitorEvent::new(
                "TestMessage",
                label,
                None,
                "test message from raidkit monitor".into(),
            ));
        }
    }
    if args.oneshot {
        for (line, label) in &stopped {
            let cfg = config
                .as_ref()
                .expect("stopped arrays come from a configuration");
            let thresholds = health.every.map(|_| health.thresholds);
            match stopped_view(cfg, line, thresholds.as_ref()) {
                Ok(view) => {
                    if !view.missing.is_empty() {
                        sink.emit(&degraded(label, &view.missing));
                    }
                    if let Some(e) = spares_missing(label, line.spares, view.spares) {
                        sink.emit(&e);
                    }
                    for m in &view.health {
                        let now: Vec<String> = m.warnings.iter().map(|w| w.text.clone()).collect();
                        if !now.is_empty() {
                            sink.emit(&health_warning(label, &m.name, &now));
                        }
                    }
                }
                Err(Some(e)) => sink.emit(&MonitorEvent::new("DeviceDisappeared", label, None, e)),
                Err(None) => {}
            }
        }
        return oneshot(&args, config.as_ref(), &sink);
    }
    let (tx, rx) = mpsc::channel::<MonitorEvent>();
    for (line, label) in stopped {
        let tx = tx.clone();
        let cfg = config
            .clone()
            .expect("stopped arrays come from a configuration");
        let delay = Duration::from_secs(args.delay.max(1));
        std::thread::spawn(move || watch_stopped(&cfg, &line, &label, delay, health, &tx));
    }
    for control in &args.control {
        for (name, label) in arrays_of(control, args.test, &sink)? {
            if let Some(e) = config
                .as_ref()
                .and_then(|c| served_spares_missing(c, control, &name, &label))
            {
                sink.emit(&e);
            }
            let tx = tx.clone();
            let control = control.clone();
            let (delay, increment) = (Duration::from_secs(args.delay.max(1)), args.increment);
            std::thread::spawn(move || watch(&control, &name, &label, delay, increment, &tx));
        }
    }
    drop(tx);
    // Every watcher runs until the process ends; events arrive here one at a time.
    for event in rx {
        sink.emit(&event);
    }
    Ok(())
}

/// The ARRAY lines of `cfg` that none of the servers at `controls` serves (by UUID), with
/// the label their events carry (`CONFIG:NAME`).
fn stopped_arrays(
    cfg: &raidkit_cli::config::Config,
    path: &Path,
    controls: &[PathBuf],
) -> Vec<(raidkit_cli::config::ArrayLine, String)> {
    let mut served = Vec::new();
    for control in controls {
        for name in list(control).unwrap_or_default() {
            if let Ok(st) = detail(control, &name) {
                served.extend(st["uuid"].as_str().map(str::to_string));
            }
        }
    }
    cfg.arrays
        .iter()
        .filter(|a| !served.contains(&a.uuid.to_mdadm_string()))
        .map(|a| (a.clone(), format!("{}:{}", path.display(), a.name)))
        .collect()
}

/// What a look at a stopped array finds.
struct StoppedView {
    /// Slots without a member in sync.
    missing: Vec<usize>,
    /// Spares attached.
    spares: usize,
    /// Each member's drive health, when asked.
    health: Vec<raidkit_engine::MemberHealth>,
}

/// A stopped array's slots without a member in sync, and with `health` its members' drive
/// health, as a read-only assembly of the members the configuration finds for it says
/// (nothing is written); otherwise why it cannot be assembled (no member found, too few
/// members), or `None` when another process holds a member (a server that started serving
/// it: not this watcher's to report).
fn stopped_view(
    cfg: &raidkit_cli::config::Config,
    line: &raidkit_cli::config::ArrayLine,
    health: Option<&raidkit_disk::Thresholds>,
) -> Result<StoppedView, Option<String>> {
    let members = cfg.members_of(line).map_err(|e| Some(e.message))?;
    let disks = raidkit_cli::common::open_members(&members, true)
        .map_err(|e| (!e.message.contains(": in use by ")).then_some(e.message))?;
    let opts = raidkit_engine::AssembleOptions {
        read_only: true,
        run: true,
        ..Default::default()
    };
    let (array, _) =
        raidkit_engine::Array::assemble(disks, opts).map_err(|e| Some(e.to_string()))?;
    let status = array.status();
    Ok(StoppedView {
        spares: spare_count(
            &status
                .members
                .iter()
                .map(|m| m.role.as_str())
                .collect::<Vec<_>>(),
        ),
        missing: status.missing_slots,
        health: health.map(|t| array.poll_health(t)).unwrap_or_default(),
    })
}

fn spare_count(roles: &[&str]) -> usize {
    roles.iter().filter(|r| **r == "spare").count()
}

/// mdadm's SparesMissing: the configuration's `spares=` asks for more spares than the
/// array has when first seen.
fn spares_missing(label: &str, want: Option<usize>, have: usize) -> Option<MonitorEvent> {
    let want = want.filter(|&w| w > have)?;
    Some(MonitorEvent::new(
        "SparesMissing",
        label,
        None,
        format!("{have} spares where the configuration asks for {want}"),
    ))
}

/// SparesMissing for the arrays a server serves, by their UUID's line in `cfg`.
fn served_spares_missing(
    cfg: &raidkit_cli::config::Config,
    control: &Path,
    name: &str,
    label: &str,
) -> Option<MonitorEvent> {
    let status = detail(control, name).ok()?;
    let uuid = status["uuid"].as_str()?;
    let line = cfg
        .arrays
        .iter()
        .find(|a| a.uuid.to_mdadm_string() == uuid)?;
    let roles: Vec<&str> = status["members"]
        .as_array()?
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    spares_missing(label, line.spares, spare_count(&roles))
}

fn health_warning(label: &str, member: &str, warnings: &[String]) -> MonitorEvent {
    MonitorEvent::new(
        "DriveHealthWarning",
        label,
        Some(member),
        warnings.join("; "),
    )
}

fn degraded(label: &str, missing: &[usize]) -> MonitorEvent {
    MonitorEvent::new(
        "DegradedArray",
        label,
        None,
        format!("slots without a member in sync: {missing:?}"),
    )
}

/// Looks at a stopped array every `delay`: DegradedArray when slots go missing (and at the
/// first look when some are), DeviceDisappeared when it can no longer be assembled (no
/// member found, too few), NewArray when it can again, SpareActive when a slot is whole
/// again.
fn watch_stopped(
    cfg: &raidkit_cli::config::Config,
    line: &raidkit_cli::config::ArrayLine,
    label: &str,
    delay: Duration,
    health: raidkit_cli::server::health::HealthWatch,
    tx: &mpsc::Sender<MonitorEvent>,
) {
    let mut last: Option<Result<Vec<usize>, String>> = None;
    // When the drives are asked next, and the warnings raised for each member so far.
    let mut health_due = std::time::Instant::now();
    let mut raised: std::collections::HashMap<String, Vec<raidkit_disk::WarningKind>> =
        std::collections::HashMap::new();
    loop {
        let ask = health
            .every
            .filter(|_| std::time::Instant::now() >= health_due);
        let now = match stopped_view(cfg, line, ask.map(|_| &health.thresholds)) {
            Ok(view) => {
                if let Some(every) = ask {
                    health_due = std::time::Instant::now() + every;
                }
                for m in &view.health {
                    let new = raidkit_disk::health::newly_raised(
                        raised.entry(m.name.clone()).or_default(),
                        &m.warnings,
                    );
                    if !new.is_empty() && tx.send(health_warning(label, &m.name, &new)).is_err() {
                        return;
                    }
                }
                if last.is_none() {
                    if let Some(e) = spares_missing(label, line.spares, view.spares) {
                        if tx.send(e).is_err() {
                            return;
                        }
                    }
                }
                Ok(view.missing)
            }
            Err(Some(e)) => Err(e),
            // Served by another process now: looked at again later.
            Err(None) => {
                std::thread::sleep(delay);
                continue;
            }
        };
        let events = match (&last, &now) {
            (None | Some(Err(_)), Ok(missing)) => {
                let mut out = Vec::new();
                if matches!(last, Some(Err(_))) {
                    out.push(MonitorEvent::new(
                        "NewArray",
                        label,
                        None,
                        "its members are there again".into(),
                    ));
                }
                if !missing.is_empty() {
                    out.push(degraded(label, missing));
                }
                out
            }
            (None | Some(Ok(_)), Err(e)) => {
                vec![MonitorEvent::new(
                    "DeviceDisappeared",
                    label,
                    None,
                    e.clone(),
                )]
            }
            (Some(Ok(before)), Ok(missing)) => {
                let mut out = Vec::new();
                if missing.iter().any(|s| !before.contains(s)) {
                    out.push(degraded(label, missing));
                }
                for slot in before.iter().filter(|s| !missing.contains(s)) {
                    out.push(MonitorEvent::new(
                        "SpareActive",
                        label,
                        None,
                        format!("slot {slot} has a member in sync again"),
                    ));
                }
                out
            }
            (Some(Err(_)), Err(_)) => Vec::new(),
        };
        for e in events {
            if tx.send(e).is_err() {
                return;
            }
        }
        last = Some(now);
        std::thread::sleep(delay);
    }
}

/// `--oneshot`: DegradedArray for each degraded array, TestMessage with --test.
fn oneshot(
    args: &MonitorArgs,
    config: Option<&raidkit_cli::config::Config>,
    sink: &Sink,
) -> Result<(), CliError> {
    for control in &args.control {
        for (name, label) in arrays_of(control, args.test, sink)? {
            if let Some(e) = config.and_then(|c| served_spares_missing(c, control, &name, &label)) {
                sink.emit(&e);
            }
            let status = detail(control, &name).map_err(|e| CliError::failure(e.message))?;
            // The warnings the server's last look at each drive gave.
            for m in status["members"].as_array().into_iter().flatten() {
                let warnings: Vec<String> = m["health_warnings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|w| w.as_str().map(str::to_string))
                    .collect();
                if !warnings.is_empty() {
                    let member = m["name"].as_str().unwrap_or("?");
                    sink.emit(&health_warning(&label, member, &warnings));
                }
            }
            if status["degraded"].as_bool() == Some(true) {
                sink.emit(&MonitorEvent::new(
                    "DegradedArray",
                    &label,
                    None,
                    format!(
                        "slots without a member in sync: {}",
                        status["missing_slots"]
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The arrays `control` serves: export name and the label events carry; a TestMessage for
/// each when `test`.
fn arrays_of(control: &Path, test: bool, sink: &Sink) -> Result<Vec<(String, String)>, CliError> {
    let names =
        list(control).map_err(|e| CliError::failure(format!("{}: {e}", control.display())))?;
    let mut out = Vec::new();
    for name in names {
        let label = format!("{}:{name}", control.display());
        if test {
            sink.emit(&MonitorEvent::new(
                "TestMessage",
                &label,
                None,
                "test message from raidkit monitor".into(),
            ));
        }
        out.push((name, label));
    }
    Ok(out)
}

/// The export names a control socket serves, each followed by its spans when it is a RAID
/// 50/60 stack (`NAME/spanN`: a member that fails, a spare taken, a rebuild happen in a span).
fn list(control: &Path) -> Result<Vec<String>, CliError> {
    let listed = ControlClient::connect(control)?.call(&Request::List)?;
    Ok(listed["arrays"]
        .as_array()
        .map(|a| {
            a.iter()
                .flat_map(|x| {
                    let spans = x["spans"].as_array().cloned().unwrap_or_default();
                    x["name"].as_str().map(str::to_string).into_iter().chain(
                        spans
                            .into_iter()
                            .filter_map(|s| s.as_str().map(str::to_string)),
                    )
                })
                .collect()
        })
        .unwrap_or_default())
}

/// The array's status, as `detail` reports it.
fn detail(control: &Path, name: &str) -> Result<Value, CliError> {
    let mut reply = ControlClient::connect(control)?.call(&Request::Detail {
        array: Some(name.to_string()),
    })?;
    Ok(reply["status"].take())
}

/// Reads one array's events until the process ends; sends what they mean on `tx`.
fn watch(
    control: &Path,
    name: &str,
    label: &str,
    delay: Duration,
    increment: u8,
    tx: &mpsc::Sender<MonitorEvent>,
) {
    let mut next: Option<u64> = None;
    // The last RebuildNN step reported for the running task.
    let mut step = 0u8;
    let mut gone = false;
    loop {
        let polled = (|| -> Result<Vec<MonitorEvent>, CliError> {
            let mut client = ControlClient::connect(control)?;
            let mut out = Vec::new();
            if gone {
                out.push(MonitorEvent::new(
                    "NewArray",
                    label,
                    None,
                    "the control socket answers again".into(),
                ));
                gone = false;
            }
            loop {
                let reply = client.call(&Request::Events {
                    array: Some(name.to_string()),
                    since: next,
                    wait_ms: Some(1000),
                })?;
                let first = reply["first"].as_u64().unwrap_or(0);
                if next.is_some_and(|n| first < n) {
                    // The array was assembled again (after an online reshape): its events
                    // are numbered from 0 again.
                    next = Some(0);
                    continue;
                }
                if let Some(n) = next.filter(|&n| first > n) {
                    out.push(MonitorEvent::new(
                        "EventsMissed",
                        label,
                        None,
                        format!("{} events were dropped before they were read", first - n),
                    ));
                }
                let mut checked = false;
                for e in reply["events"].as_array().into_iter().flatten() {
                    if e["event"] == "task-started" {
                        step = 0;
                    }
                    checked |= e["event"] == "task-finished"
                        && matches!(e["task"].as_str(), Some("check" | "repair"));
                    out.extend(translate(label, e));
                }
                next = reply["next"].as_u64();
                // Progress of a running task: RebuildNN at each increment passed.
                let status = client
                    .call(&Request::Detail {
                        array: Some(name.to_string()),
                    })?
                    .get_mut("status")
                    .map(Value::take)
                    .unwrap_or(Value::Null);
                let last = status["finished_tasks"]
                    .as_array()
                    .and_then(|t| t.last())
                    .cloned()
                    .unwrap_or(Value::Null);
                if let Some(n) = last["mismatch_sectors"]
                    .as_u64()
                    .filter(|&n| checked && n > 0)
                {
                    out.push(MonitorEvent::new(
                        "CheckMismatches",
                        label,
                        None,
                        format!(
                            "{} found {n} sectors whose parity or copies disagree",
                            last["kind"].as_str().unwrap_or("check")
                        ),
                    ));
                }
                if let Some(pct) = status["task"]["percent"].as_f64() {
                    let reached = ((pct as u8) / increment) * increment;
                    if reached > step && reached < 100 {
                        step = reached;
                        out.push(MonitorEvent::new(
                            &format!("Rebuild{reached:02}"),
                            label,
                            None,
                            format!(
                                "{} at {pct:.0}%",
                                status["task"]["kind"].as_str().unwrap_or("task")
                            ),
                        ));
                    }
                }
                if !out.is_empty() {
                    return Ok(out);
                }
            }
        })();
        match polled {
            Ok(events) => {
                for e in events {
                    if tx.send(e).is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                if !gone {
                    gone = true;
                    let _ = tx.send(MonitorEvent::new(
                        "DeviceDisappeared",
                        label,
                        None,
                        e.message,
                    ));
                }
                std::thread::sleep(delay);
            }
        }
    }
}

/// Where events go.
struct Sink {
    json: bool,
    program: Option<PathBuf>,
    mail: Option<String>,
    sendmail: PathBuf,
    syslog: bool,
    host: String,
}

impl Sink {
    fn new(args: &MonitorArgs) -> Result<Sink, CliError> {
        if let Some(p) = &args.program {
            if !p.exists() {
                return Err(CliError::usage(format!(
                    "--program {}: no such file",
                    p.display()
                )));
            }
        }
        if args.mail.is_some() && !args.sendmail.exists() {
            return Err(CliError::usage(format!(
                "--mail needs a local MTA's sendmail interface; {} does not exist (install one, e.g. exim4-daemon-light, or give --sendmail)",
                args.sendmail.display()
            )));
        }
        if args.syslog {
            // SAFETY: the identity is a static C string that lives as long as the process.
            unsafe { libc::openlog(c"raidkit-monitor".as_ptr(), libc::LOG_PID, libc::LOG_DAEMON) };
        }
        Ok(Sink {
            json: args.json,
            program: args.program.clone(),
            mail: args.mail.clone(),
            sendmail: args.sendmail.clone(),
            syslog: args.syslog,
            host: hostname(),
        })
    }

    fn emit(&self, e: &MonitorEvent) {
        let line = format!(
            "{} event on {}{}: {}",
            e.event,
            e.array,
            e.member
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default(),
            e.detail
        );
        if self.json {
            println!("{}", serde_json::to_string(e).unwrap_or_default());
        } else {
            println!("raidkit: {line}");
        }
        let _ = std::io::stdout().flush();
        if self.syslog {
            // syslog formats with "%s", so the event's text is never read as a format.
            if let Ok(msg) = std::ffi::CString::new(line.replace('\0', " ")) {
                // SAFETY: both strings are valid, NUL-terminated, and outlive the call.
                unsafe { libc::syslog(e.priority(), c"%s".as_ptr(), msg.as_ptr()) };
            }
        }
        if let Some(p) = &self.program {
            let mut cmd = Command::new(p);
            cmd.arg(&e.event).arg(&e.array);
            if let Some(m) = &e.member {
                cmd.arg(m);
            }
            match cmd.stdin(Stdio::null()).status() {
                Ok(s) if !s.success() => {
                    eprintln!("raidkit: monitor: {} {}: {s}", p.display(), e.event)
                }
                Ok(_) => {}
                Err(err) => eprintln!("raidkit: monitor: cannot run {}: {err}", p.display()),
            }
        }
        if let (Some(to), true) = (&self.mail, e.mailed()) {
            if let Err(err) = self.send_mail(to, e, &line) {
                eprintln!("raidkit: monitor: cannot mail {to}: {err}");
            }
        }
    }

    /// Hands a message to the MTA (`sendmail -t` reads the recipients from the headers).
    fn send_mail(&self, to: &str, e: &MonitorEvent, line: &str) -> std::io::Result<()> {
        let mut child = Command::new(&self.sendmail)
            .arg("-t")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()?;
        let body = format!(
            "From: raidkit monitor <root>\nTo: {to}\nSubject: {} event on {}:{}\n\n\
             This is an automatically generated mail message from raidkit monitor\n\
             running on {}\n\n{line}\n",
            e.event, e.array, self.host, self.host
        );
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(body.as_bytes())?;
        }
        let status = child.wait()?;
        if !status.success() {
            return Err(std::io::Error::other(format!(
                "{} exited with {status}",
                self.sendmail.display()
            )));
        }
        Ok(())
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn array_events_become_mdadm_events() {
        let name = |v: Value| -> Vec<(String, Option<String>)> {
            translate("s:md0", &v)
                .into_iter()
                .map(|e| (e.event, e.member))
                .collect()
        };
        assert_eq!(
            name(json!({"event":"member-faulty","member":"m1.img","slot":1,"reason":"operator"})),
            vec![("Fail".to_string(), Some("m1.img".to_string()))]
        );
        assert_eq!(
            name(json!({"event":"member-faulty","member":"s.img","slot":null,"reason":"io"})),
            vec![("FailSpare".to_string(), Some("s.img".to_string()))]
        );
        assert_eq!(
            name(json!({"event":"array-degraded","missing_slots":[1]})),
            vec![("DegradedArray".to_string(), None)]
        );
        assert_eq!(
            name(json!({"event":"rebuilt","member":"n.img","slot":1})),
            vec![("SpareActive".to_string(), Some("n.img".to_string()))]
        );
        assert!(name(json!({"event":"bitmap-loaded","bytes_per_bit":1,"bits_set":0})).is_empty());
        let fail = &translate("s:md0", &json!({"event":"array-failed","detail":"x"}))[0];
        assert!(fail.mailed() && fail.priority() == libc::LOG_CRIT);
        let started = &translate("s:md0", &json!({"event":"task-started","task":"rebuild"}))[0];
        assert!(!started.mailed());
    }
}
