//! `raidkit task`: background work on a served array, through the server's control socket:
//! start a check, repair, patrol, rebuild or resync (md's `sync_action`) while clients keep
//! using the array, stop the running one, change the task rates (a controller's percent of
//! the array's time per task, and md's byte-rate cap), and follow a task's progress.

use crate::cmd::array::tasks::ProgressBar;
use raidkit_cli::server::control::{ControlClient, Request};
use raidkit_cli::{CliError, ExitCode};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct TaskArgs {
    /// The server's control socket.
    #[arg(long, value_name = "SOCKET")]
    pub control: PathBuf,
    /// The export name, when the server serves several arrays.
    #[arg(long, value_name = "NAME")]
    pub array: Option<String>,
    #[command(subcommand)]
    pub action: Action,
}

#[derive(clap::Subcommand, Debug)]
pub enum Action {
    /// Start a task: check, repair, patrol, rebuild or resync.
    Start {
        /// check, repair, patrol, rebuild or resync.
        task: String,
        /// Follow its progress until it ends and report what it found (exit 5 when a check
        /// or repair found mismatches).
        #[arg(long)]
        wait: bool,
    },
    /// Stop the running task at its next step.
    Stop,
    /// The running task's progress and the last finished ones.
    Status,
    /// Set the read policy of the served array: none, always or adaptive (the PERC6's NORA,
    /// RA, ARA: no read-ahead, whole stripes ahead of every read that misses, or only for
    /// sequential streams).
    ReadAhead {
        /// none, always or adaptive (also nora, ra, ara).
        #[arg(value_name = "POLICY")]
        policy: String,
    },
    /// Set the write policy of the served array: through or back (the PERC6's WT, WB; md's
    /// journal_mode). Back needs the array's write journal; going back to through first
    /// writes everything cached to the members.
    WritePolicy {
        /// through or back (also wt, wb).
        #[arg(value_name = "POLICY")]
        policy: String,
    },
    /// Change the task rates: percent of the array's time each task takes while clients use
    /// it (1-100; idle, every task runs at full speed), and a cap.
    Rates {
        /// Rebuild and replace.
        #[arg(long, value_name = "PERCENT")]
        rebuild: Option<u8>,
        /// Resync after an unclean stop (md's background initialisation too).
        #[arg(long, value_name = "PERCENT")]
        resync: Option<u8>,
        /// Check and repair.
        #[arg(long, value_name = "PERCENT")]
        check: Option<u8>,
        /// Patrol read.
        #[arg(long, value_name = "PERCENT")]
        patrol: Option<u8>,
        /// An online reshape (`grow --control`; the PERC6's reconstruction rate).
        #[arg(long, value_name = "PERCENT")]
        reshape: Option<u8>,
        /// Cap every task at this many MB/s (md's speed_limit_max); 0 removes the cap.
        #[arg(long = "max-speed", value_name = "MB/s")]
        max_speed: Option<f64>,
        /// Keep every task at this many MB/s at least, however busy the array (md's
        /// speed_limit_min); 0 removes the floor.
        #[arg(long = "min-speed", value_name = "MB/s")]
        min_speed: Option<f64>,
    },
}

pub fn run(args: TaskArgs) -> Result<(), CliError> {
    let mut client = ControlClient::connect(&args.control)?;
    let array = args.array.clone();
    let status = |client: &mut ControlClient| -> Result<Value, CliError> {
        let mut r = client.call(&Request::Detail {
            array: array.clone(),
        })?;
        Ok(r["status"].take())
    };
    match args.action {
        Action::Start { task, wait } => {
            let before = status(&mut client)?["finished_tasks"]
                .as_array()
                .and_then(|t| t.last().cloned());
            client.call(&Request::StartTask {
                array: array.clone(),
                task: task.clone(),
            })?;
            println!("raidkit: {task} started");
            if !wait {
                return Ok(());
            }
            let label = raidkit_engine::TaskKind::from_name(&task).map_or("task", |k| k.name());
            let mut bar = ProgressBar::new(false);
            loop {
                std::thread::sleep(Duration::from_millis(200));
                let st = status(&mut client)?;
                let last = st["finished_tasks"]
                    .as_array()
                    .and_then(|t| t.last().cloned());
                if last != before && last.as_ref().is_some_and(|l| l["kind"] == task.as_str()) {
                    bar.finish();
                    return conclude(&last.unwrap_or_default());
                }
                let t = &st["task"];
                if t["kind"] == task.as_str() {
                    bar.draw(
                        label,
                        t["percent"].as_f64().unwrap_or(0.0),
                        t["bytes_per_s"].as_f64().unwrap_or(0.0),
                        t["eta_s"].as_f64(),
                        t["throttled"].as_bool().unwrap_or(false),
                    );
                }
            }
        }
        Action::ReadAhead { policy } => {
            let policy = raidkit_engine::ReadAhead::parse(&policy).ok_or_else(|| {
                CliError::usage(format!(
                    "read-ahead {policy}: none, always or adaptive (nora, ra, ara)"
                ))
            })?;
            client.call(&Request::ReadAhead { array, policy })?;
            println!("raidkit: read-ahead {}", policy.name());
            Ok(())
        }
        Action::WritePolicy { policy } => {
            let policy = raidkit_engine::WritePolicy::parse(&policy).ok_or_else(|| {
                CliError::usage(format!("write-policy {policy}: through or back (wt, wb)"))
            })?;
            client.call(&Request::WritePolicy { array, policy })?;
            println!("raidkit: write-{}", policy.name());
            Ok(())
        }
        Action::Stop => {
            client.call(&Request::StopTask { array })?;
            println!("raidkit: the running task stops at its next step");
            Ok(())
        }
        Action::Status => {
            let st = status(&mut client)?;
            match st["task"].as_object() {
                Some(t) => println!(
                    "raidkit: {} at {:.1}% ({:.0} MB/s)",
                    t["kind"].as_str().unwrap_or("?"),
                    t["percent"].as_f64().unwrap_or(0.0),
                    t["bytes_per_s"].as_f64().unwrap_or(0.0) / 1e6
                ),
                None => println!("raidkit: no task runs"),
            }
            for t in st["finished_tasks"].as_array().into_iter().flatten() {
                println!("raidkit: finished: {}", summary(t));
            }
            Ok(())
        }
        Action::Rates {
            rebuild,
            resync,
            check,
            patrol,
            reshape,
            max_speed,
            min_speed,
        } => {
            let r = client.call(&Request::Rates {
                array,
                rebuild_percent: rebuild,
                resync_percent: resync,
                check_percent: check,
                patrol_percent: patrol,
                reshape_percent: reshape,
                max_bytes_per_s: max_speed.map(|m| (m * 1e6) as u64),
                min_bytes_per_s: min_speed.map(|m| (m * 1e6) as u64),
            })?;
            let rates = &r["rates"];
            let speed = |v: &Value| {
                v.as_u64().map_or("none".to_string(), |b| {
                    format!("{:.1} MB/s", b as f64 / 1e6)
                })
            };
            println!(
                "raidkit: task rates: rebuild {}%, resync {}%, check {}%, patrol {}%, reshape {}% of the array's time while clients use it; floor {}, cap {}",
                rates["rebuild_percent"],
                rates["resync_percent"],
                rates["check_percent"],
                rates["patrol_percent"],
                rates["reshape_percent"],
                speed(&rates["min_bytes_per_s"]),
                speed(&rates["max_bytes_per_s"])
            );
            Ok(())
        }
    }
}

/// One finished task, in a line.
fn summary(t: &Value) -> String {
    format!(
        "{} {} in {:.1} s, {} sectors mismatched, {} corrected",
        t["kind"].as_str().unwrap_or("?"),
        t["outcome"].as_str().unwrap_or("ended"),
        t["elapsed_s"].as_f64().unwrap_or(0.0),
        t["mismatch_sectors"].as_u64().unwrap_or(0),
        t["corrected_sectors"].as_u64().unwrap_or(0),
    )
}

/// Reports a finished task; a check or repair that found mismatches exits 5, one that did
/// not complete exits 1.
fn conclude(t: &Value) -> Result<(), CliError> {
    let line = summary(t);
    if !matches!(t["outcome"].as_str(), Some("completed" | "nothing")) {
        return Err(CliError::failure(format!("task ended early: {line}")));
    }
    if t["mismatch_sectors"].as_u64().unwrap_or(0) > 0 {
        return Err(CliError::new(ExitCode::Mismatch, line));
    }
    println!("raidkit: {line}");
    Ok(())
}
