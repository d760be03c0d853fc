//! Background work from the command line: `check`, `repair`, `rebuild` (whatever is pending:
//! recovery onto spares, replacement, resync after an unclean stop), `patrol`, and the
//! progress display `add` and `fail` share with them.
//!
//! These commands assemble the array, run the task in this process with a progress bar on
//! stderr (an `indicatif` bar on a terminal, a line per 10 % otherwise), and stop the array
//! cleanly. SIGINT or SIGTERM stops the task at its next step with its checkpoint recorded
//! (md's recovery_offset / resync_offset), so running the same command again resumes it.

use raidkit_cli::common::{
    assemble_volume, engine_error, print_json, report_notes, Insist, MembersArgs,
};
use raidkit_cli::{CliError, ExitCode};
use raidkit_engine::{Array, TaskKind, TaskOutcome, TaskProgress, TaskRates, TaskReport};
use std::io::{IsTerminal, Write};
use std::sync::atomic::AtomicBool;

#[derive(clap::Args, Debug)]
pub struct TaskArgs {
    #[command(flatten)]
    pub array: MembersArgs,
    #[command(flatten)]
    pub speed: SpeedArgs,
}

/// Check, repair and patrol: a task that keeps no checkpoint in the superblocks.
#[derive(clap::Args, Debug)]
pub struct ScanArgs {
    #[command(flatten)]
    pub task: TaskArgs,
    /// Start at this sector (member sectors; array sectors for a RAID 10 check or repair),
    /// such as where a stopped run said it stopped: md's sync_min. md's superblock keeps no
    /// checkpoint for these tasks, so by default a run starts at 0.
    #[arg(long, value_name = "SECTOR")]
    pub from: Option<u64>,
}

/// Rate settings shared by every command that runs background work.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SpeedArgs {
    /// Cap the task at this many MB/s of member range (md's speed_limit_max); by default a
    /// task runs as fast as the members allow when nothing else uses the array.
    #[arg(long = "max-speed", value_name = "MB/s")]
    pub max_speed: Option<f64>,
    /// No progress display.
    #[arg(long)]
    pub quiet: bool,
    /// Run at full rate even right after foreground I/O (the demo: its own verification reads
    /// would otherwise hold the task at its busy share for their first 250 ms).
    #[arg(skip)]
    pub full_rate: bool,
}

impl SpeedArgs {
    fn rates(&self) -> Result<TaskRates, CliError> {
        let mut rates = if self.full_rate {
            TaskRates::full()
        } else {
            TaskRates::default()
        };
        if let Some(mbps) = self.max_speed {
            if !(mbps > 0.0 && mbps.is_finite()) {
                return Err(CliError::usage(format!(
                    "--max-speed {mbps}: give a positive number of MB/s"
                )));
            }
            rates.max_bytes_per_s = Some((mbps * 1e6) as u64);
        }
        Ok(rates)
    }
}

/// Draws task progress on stderr: an `indicatif` bar on a terminal, a plain line per 10 %
/// otherwise (logs and tests read those lines), nothing with `--quiet`.
///
/// The percentage, rate and ETA are the engine's ([`TaskProgress`]): its rate counts bytes of
/// one member's range including time spent yielding to foreground I/O, which a bar's own
/// estimate from position updates would not know. indicatif only draws (rate-limited redraws,
/// terminal width, clearing), which is the part worth not writing by hand.
pub struct ProgressBar {
    quiet: bool,
    tty: bool,
    /// The bar of the task being drawn on a terminal; a new one per task.
    bar: Option<indicatif::ProgressBar>,
    plain: PlainLines,
}

impl ProgressBar {
    pub fn new(quiet: bool) -> Self {
        ProgressBar {
            quiet,
            tty: std::io::stderr().is_terminal(),
            bar: None,
            plain: PlainLines::default(),
        }
    }

    pub fn update(&mut self, p: &TaskProgress) {
        self.draw(
            p.kind.name(),
            p.percent,
            p.bytes_per_s,
            p.eta_s,
            p.throttled,
        );
    }

    /// Draws work that is not an engine task (`name`: what is done), `percent` done at
    /// `bytes_per_s`, with `eta_s` to go.
    pub fn draw(
        &mut self,
        name: &'static str,
        percent: f64,
        bytes_per_s: f64,
        eta_s: Option<f64>,
        throttled: bool,
    ) {
        if self.quiet {
            return;
        }
        if self.tty {
            let bar = self.bar.get_or_insert_with(|| new_bar(name));
            bar.set_position(per_mille(percent));
            bar.set_message(bar_message(percent, bytes_per_s, eta_s, throttled));
        } else if let Some(line) = self.plain.line(name, percent, bytes_per_s, eta_s) {
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    }

    /// Ends the task's display: the bar stays on screen with its last state; the plain lines
    /// start again from 0 % for the next task.
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish();
        }
        self.plain = PlainLines::default();
    }
}

/// A terminal bar for one task: `rebuild [####......]  42.0%  1.20 GB/s  ETA 0:00:13`.
fn new_bar(task: &'static str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(1000),
        indicatif::ProgressDrawTarget::stderr(),
    );
    // The template is a constant: it parses, and a test says so.
    if let Ok(style) = indicatif::ProgressStyle::with_template(BAR_TEMPLATE) {
        bar.set_style(style.progress_chars("#>."));
    }
    bar.set_prefix(task);
    bar
}

const BAR_TEMPLATE: &str = "{prefix:<7} [{bar:30}] {msg}";

fn per_mille(percent: f64) -> u64 {
    (percent.clamp(0.0, 100.0) * 10.0).round() as u64
}

/// What follows the bar: percent, rate, ETA, and whether the task is yielding to I/O.
fn bar_message(percent: f64, bytes_per_s: f64, eta_s: Option<f64>, throttled: bool) -> String {
    format!(
        "{percent:5.1}%  {}  ETA {}{}",
        rate(bytes_per_s),
        eta(eta_s),
        if throttled { "  (yielding to I/O)" } else { "" }
    )
}

/// The lines written when stderr is not a terminal: `raidkit: rebuild 40% (812 MB/s, ETA
/// 0:00:03)`, one each time the task enters a new tenth.
#[derive(Default)]
struct PlainLines {
    /// The last tenth a line was written for.
    last_tenth: Option<i64>,
}

impl PlainLines {
    fn line(
        &mut self,
        task: &str,
        percent: f64,
        bytes_per_s: f64,
        eta_s: Option<f64>,
    ) -> Option<String> {
        let tenth = (percent / 10.0).floor() as i64;
        if self.last_tenth.is_some_and(|last| tenth <= last) {
            return None;
        }
        self.last_tenth = Some(tenth);
        Some(format!(
            "raidkit: {task} {percent:.0}% ({}, ETA {})",
            rate(bytes_per_s),
            eta(eta_s)
        ))
    }
}

fn rate(bytes_per_s: f64) -> String {
    if bytes_per_s >= 1e9 {
        format!("{:.2} GB/s", bytes_per_s / 1e9)
    } else {
        format!("{:.0} MB/s", bytes_per_s / 1e6)
    }
}

fn eta(s: Option<f64>) -> String {
    match s {
        Some(s) if s.is_finite() => {
            let s = s.round() as u64;
            format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
        }
        _ => "-".into(),
    }
}

/// SIGINT/SIGTERM set this flag; tasks stop at their next step.
pub(crate) fn stop_flag() -> Result<&'static AtomicBool, CliError> {
    raidkit_nbd::signal::shutdown_on_signals()
        .map_err(|e| CliError::failure(format!("cannot install signal handlers: {e}")))
}

/// One sentence about a finished task.
pub fn describe(r: &TaskReport) -> String {
    let p = &r.progress;
    match &r.outcome {
        TaskOutcome::Completed => {
            let mut s = format!(
                "{} completed: {:.1} s, {}",
                p.kind,
                p.elapsed_s,
                rate(p.bytes_per_s)
            );
            match p.kind {
                TaskKind::Check | TaskKind::Repair | TaskKind::Resync => {
                    s += &format!(", {} mismatched sectors", p.mismatch_sectors);
                    if p.kind == TaskKind::Repair && p.mismatch_sectors > 0 {
                        s += " (rewritten)";
                    }
                }
                TaskKind::Patrol => {
                    s += &format!(
                        ", {} unreadable sectors rewritten, {} to the bad-block log",
                        p.corrected_sectors, p.bad_block_sectors
                    )
                }
                TaskKind::Rebuild | TaskKind::Replace => {
                    s += &format!(" per member, slots {:?}", p.slots)
                }
            }
            if p.threads > 1 {
                s += &format!(", on {} threads", p.threads);
            }
            s
        }
        TaskOutcome::Stopped if keeps_no_checkpoint(p.kind) => format!(
            "{} stopped at {:.1}% ({} {} of {}); go on with --from {} (md's superblock keeps no checkpoint for a {})",
            p.kind, p.percent, p.position_sectors, p.unit, p.end_sectors, p.position_sectors, p.kind
        ),
        TaskOutcome::Stopped => format!(
            "{} stopped at {:.1}% ({} {} of {}); run the command again to resume",
            p.kind, p.percent, p.position_sectors, p.unit, p.end_sectors
        ),
        TaskOutcome::Nothing => format!("{}: nothing to do", p.kind),
        TaskOutcome::Failed { error } => format!("{} failed: {error}", p.kind),
    }
}

/// Runs `kinds` (or whatever is pending, when `None`) with a progress bar, then stops the array
/// cleanly. Returns the reports.
pub fn run_with_progress(
    array: &Array,
    kind: Option<TaskKind>,
    speed: &SpeedArgs,
) -> Result<Vec<TaskReport>, CliError> {
    array.set_task_rates(speed.rates()?);
    let stop = stop_flag()?;
    let mut bar = ProgressBar::new(speed.quiet);
    let mut reports = Vec::new();
    match kind {
        Some(k) => {
            let r = array
                .run_task(k, &mut |p| bar.update(p), stop)
                .map_err(engine_error);
            bar.finish();
            reports.push(r?);
        }
        None => {
            let mut pending = array.pending_tasks();
            // A spare that took a slot during a rebuild pass gets its own pass; the cap only
            // guards against a task that keeps reporting itself pending.
            let mut passes = 0;
            while let Some(k) = pending.first().copied() {
                passes += 1;
                if passes > 16 {
                    break;
                }
                let r = array
                    .run_task(k, &mut |p| bar.update(p), stop)
                    .map_err(engine_error);
                bar.finish();
                let r = r?;
                let go_on = r.outcome == TaskOutcome::Completed;
                reports.push(r);
                if !go_on {
                    break;
                }
                pending = array.pending_tasks();
            }
        }
    }
    Ok(reports)
}

/// Check, repair and patrol: md's superblock keeps no checkpoint for them.
fn keeps_no_checkpoint(kind: TaskKind) -> bool {
    matches!(kind, TaskKind::Check | TaskKind::Repair | TaskKind::Patrol)
}

/// Prints the reports (or JSON) and turns their outcome into an exit code.
pub fn conclude(
    array: &Array,
    reports: &[TaskReport],
    json: bool,
    mismatch_fails: bool,
) -> Result<(), CliError> {
    let stopped = reports.iter().any(|r| r.outcome == TaskOutcome::Stopped);
    array.stop().map_err(engine_error)?;
    if json {
        print_json(&serde_json::json!({ "tasks": reports, "status": array.status() }))?;
    } else {
        for r in reports {
            println!("raidkit: {}", describe(r));
        }
    }
    if let Some(TaskOutcome::Failed { error }) = reports
        .iter()
        .map(|r| &r.outcome)
        .find(|o| matches!(o, TaskOutcome::Failed { .. }))
    {
        return Err(CliError::failure(error.clone()));
    }
    if stopped {
        let recorded = reports
            .iter()
            .any(|r| r.outcome == TaskOutcome::Stopped && !keeps_no_checkpoint(r.progress.kind));
        return Err(CliError::new(
            ExitCode::Interrupted,
            if recorded {
                "stopped by a signal; the checkpoint is recorded in the superblocks"
            } else {
                "stopped by a signal; --from continues where it stopped"
            },
        ));
    }
    let mismatches: u64 = reports.iter().map(|r| r.progress.mismatch_sectors).sum();
    if mismatch_fails && mismatches > 0 {
        return Err(CliError::new(
            ExitCode::Mismatch,
            format!("{mismatches} mismatched sectors (md's mismatch_cnt)"),
        ));
    }
    Ok(())
}

/// `raidkit check|repair|patrol|rebuild`.
/// Check, repair or patrol, from `--from` or the start.
pub fn run_scan_command(kind: TaskKind, args: ScanArgs) -> Result<(), CliError> {
    run_task_command_from(Some(kind), args.task, args.from)
}

pub fn run_task_command(kind: Option<TaskKind>, args: TaskArgs) -> Result<(), CliError> {
    run_task_command_from(kind, args, None)
}

fn run_task_command_from(
    kind: Option<TaskKind>,
    args: TaskArgs,
    from: Option<u64>,
) -> Result<(), CliError> {
    let read_only = kind == Some(TaskKind::Check);
    let insist = Insist {
        force: args.array.force,
        run: args.array.run,
    };
    let (array, report) = assemble_volume(&args.array.members, read_only, insist)?;
    report_notes(&report);
    if !array.spans().is_empty() {
        return run_on_spans(&array, kind, &args, from);
    }
    if let (Some(k), Some(from)) = (kind, from) {
        if let Err(e) = array.set_task_start(k, from) {
            let _ = array.stop();
            return Err(CliError::usage(format!("--from {from}: {e}")));
        }
    }
    if kind.is_none() && array.pending_tasks().is_empty() {
        array.stop().map_err(engine_error)?;
        if args.array.json {
            return print_json(&serde_json::json!({ "tasks": [], "status": array.status() }));
        }
        println!("raidkit: nothing pending: no member to rebuild or replace, no resync needed");
        return Ok(());
    }
    let reports = run_with_progress(&array, kind, &args.speed)?;
    conclude(
        &array,
        &reports,
        args.array.json,
        kind == Some(TaskKind::Check),
    )
}

/// A task on a RAID 50/60 stack runs in its spans, one after the other (a rebuild or resync
/// in those that need one; check, repair and patrol in all of them); the mismatches found
/// are the sum over the spans.
fn run_on_spans(
    array: &Array,
    kind: Option<TaskKind>,
    args: &TaskArgs,
    from: Option<u64>,
) -> Result<(), CliError> {
    if let Some(from) = from {
        let _ = array.stop();
        return Err(CliError::usage(format!(
            "--from {from}: a stack's spans are scanned one after the other, each from its start; give one span's members to start a span's scan elsewhere"
        )));
    }
    let mut reports = Vec::new();
    for span in array.spans() {
        if kind.is_none() && span.pending_tasks().is_empty() {
            continue;
        }
        let done = run_with_progress(span, kind, &args.speed)?;
        let interrupted = done.iter().any(|r| r.outcome == TaskOutcome::Stopped);
        reports.extend(done);
        if interrupted {
            break;
        }
    }
    if kind.is_none() && reports.is_empty() {
        array.stop().map_err(engine_error)?;
        if args.array.json {
            return print_json(&serde_json::json!({ "tasks": [], "status": array.status() }));
        }
        println!("raidkit: nothing pending in any span: no member to rebuild or replace, no resync needed");
        return Ok(());
    }
    conclude(
        array,
        &reports,
        args.array.json,
        kind == Some(TaskKind::Check),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_output_is_a_line_per_tenth() {
        let mut plain = PlainLines::default();
        let lines: Vec<String> = [0.0, 3.0, 9.9, 10.0, 10.5, 41.2, 45.0, 99.0, 100.0]
            .iter()
            .filter_map(|&p| plain.line("rebuild", p, 812e6, Some(3.4)))
            .collect();
        assert_eq!(
            lines,
            [
                "raidkit: rebuild 0% (812 MB/s, ETA 0:00:03)",
                "raidkit: rebuild 10% (812 MB/s, ETA 0:00:03)",
                "raidkit: rebuild 41% (812 MB/s, ETA 0:00:03)",
                "raidkit: rebuild 99% (812 MB/s, ETA 0:00:03)",
                "raidkit: rebuild 100% (812 MB/s, ETA 0:00:03)",
            ]
        );
        assert_eq!(
            PlainLines::default().line("check", 50.0, 2.5e9, None),
            Some("raidkit: check 50% (2.50 GB/s, ETA -)".to_string())
        );
    }

    #[test]
    fn the_bar_shows_percent_rate_eta_and_yielding() {
        assert!(indicatif::ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
        assert_eq!(
            bar_message(42.0, 1.2e9, Some(3725.0), false),
            " 42.0%  1.20 GB/s  ETA 1:02:05"
        );
        assert_eq!(
            bar_message(7.25, 30e6, None, true),
            "  7.2%  30 MB/s  ETA -  (yielding to I/O)"
        );
        assert_eq!(per_mille(42.04), 420);
        assert_eq!(per_mille(100.0), 1000);
        assert_eq!(per_mille(-1.0), 0);
        assert_eq!(per_mille(250.0), 1000);
    }
}
