//! `raidkit-oracle`: the host side of tests/md-oracle/run.
//!
//! ```text
//! raidkit-oracle plan --matrix FILE --work DIR [--full] [--only SUB,SUB] [--vms N]
//!     write batch directories (job.sh, drives, member images: zeroed for arrays md creates,
//!     created and written by raidkit for arrays md assembles) and plan.json; prints the
//!     number of batches
//! raidkit-oracle check --work DIR [--started-at UNIX_SECONDS]
//!     check every planned array against its VM records; one line per array, then
//!     "md-oracle: N passed, M failed"; exit status 1 if any failed
//! ```
//!
//! Exit status: 0 all passed, 1 a check failed, 2 bad usage or unreadable input.
//! Arguments are parsed by clap, as the `raidkit` CLI's are.

use clap::{Args, Parser, Subcommand};
use raidkit_oracle::check::{check_array, CheckOutcome};
use raidkit_oracle::matrix::parse_matrix;
use raidkit_oracle::plan::{make_plan, write_plan, Plan};
use raidkit_oracle::records::parse_records;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

/// The host side of tests/md-oracle/run.
#[derive(Parser, Debug)]
#[command(name = "raidkit-oracle")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write batch directories (job.sh, drives, member images) and plan.json; print the number
    /// of batches.
    Plan(PlanArgs),
    /// Check every planned array against its VM records; exit status 1 if any failed.
    Check(CheckArgs),
}

#[derive(Args, Debug)]
struct PlanArgs {
    /// The matrix of arrays (tests/md-oracle/matrix).
    #[arg(long, value_name = "FILE")]
    matrix: PathBuf,
    /// Work directory the batches are written under.
    #[arg(long, value_name = "DIR")]
    work: PathBuf,
    /// Every row of the matrix, not only the fast ones.
    #[arg(long)]
    full: bool,
    /// Only rows whose name contains one of these substrings (comma-separated).
    #[arg(long, value_name = "SUB,SUB", value_delimiter = ',')]
    only: Vec<String>,
    /// VMs booted at once: the arrays are split into this many batches (at least 1).
    #[arg(long, value_name = "N", default_value_t = 2)]
    vms: usize,
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// Work directory `plan` wrote and the VMs filled.
    #[arg(long, value_name = "DIR")]
    work: PathBuf,
    /// When the run started (UNIX seconds): the wall time is reported.
    #[arg(long = "started-at", value_name = "UNIX_SECONDS")]
    started_at: Option<u64>,
}

fn plan_cmd(a: &PlanArgs) -> Result<ExitCode, String> {
    let (matrix, work) = (&a.matrix, &a.work);
    // `--only ""` (or a stray comma) selects nothing extra, as before.
    let only: Vec<&String> = a.only.iter().filter(|s| !s.is_empty()).collect();
    let text = std::fs::read_to_string(matrix).map_err(|e| format!("{}: {e}", matrix.display()))?;
    let rows = parse_matrix(&text).map_err(|e| e.to_string())?;
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| a.full || r.fast || !only.is_empty())
        .filter(|r| only.is_empty() || only.iter().any(|s| r.name.contains(s.as_str())))
        .collect();
    if rows.is_empty() {
        return Err("no matrix rows selected".into());
    }
    let mut plan = make_plan(&rows, work, a.vms.max(1));
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    write_plan(&mut plan, work, threads)
        .map_err(|e| format!("writing the plan under {}: {e}", work.display()))?;
    println!("{}", plan.batches);
    Ok(ExitCode::SUCCESS)
}

fn check_cmd(a: &CheckArgs) -> Result<ExitCode, String> {
    let work = &a.work;
    let plan_path = work.join("plan.json");
    let text =
        std::fs::read_to_string(&plan_path).map_err(|e| format!("{}: {e}", plan_path.display()))?;
    let plan: Plan =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", plan_path.display()))?;
    let mut reports = BTreeMap::new();
    for b in 0..plan.batches {
        let path = work.join(format!("batch{b}")).join("results");
        // A missing results file leaves its arrays without reports: they fail below.
        if let Ok(text) = std::fs::read_to_string(&path) {
            reports.extend(parse_records(&text));
        }
    }
    // Arrays are independent: check them on all cores, report in plan order.
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let outcomes = std::sync::Mutex::new(vec![None; plan.arrays.len()]);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(array) = plan.arrays.get(i) else {
                    break;
                };
                let outcome = check_array(array, reports.get(&array.name));
                if let Ok(mut v) = outcomes.lock() {
                    v[i] = Some(outcome);
                }
            });
        }
    });
    let outcomes = outcomes
        .into_inner()
        .map_err(|_| "a check thread panicked".to_string())?;
    let (mut passed, mut failed) = (0, 0);
    for (array, outcome) in plan.arrays.iter().zip(outcomes) {
        let outcome = outcome.unwrap_or_else(|| CheckOutcome {
            name: array.name.clone(),
            failures: vec!["host: the check did not run".into()],
            ..CheckOutcome::default()
        });
        if outcome.ok() {
            passed += 1;
            println!(
                "md-oracle: PASS {}: {} [{}]",
                outcome.name,
                outcome.description,
                outcome.passed.join(", ")
            );
        } else {
            failed += 1;
            println!(
                "md-oracle: FAIL {}: {} [passed: {}]",
                outcome.name,
                outcome.description,
                outcome.passed.join(", ")
            );
            for f in &outcome.failures {
                println!("md-oracle:     {f}");
            }
            if outcome.failures.is_empty() {
                println!("md-oracle:     no check ran");
            }
        }
    }
    if let Some(t0) = a.started_at {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        println!(
            "md-oracle: wall time {} s for {} arrays in {} VM boots",
            now.saturating_sub(t0),
            plan.arrays.len(),
            plan.batches
        );
    }
    println!("md-oracle: {passed} passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn main() -> ExitCode {
    // Bad usage: clap prints the error and usage and exits with status 2.
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Plan(a) => plan_cmd(a),
        Command::Check(a) => check_cmd(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("raidkit-oracle: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Parses a command line given as one string (no argument here holds a space).
    fn parse(line: &str) -> Command {
        let argv = std::iter::once("raidkit-oracle").chain(line.split_whitespace());
        Cli::try_parse_from(argv).unwrap().command
    }

    #[test]
    fn the_flags_tests_md_oracle_run_passes_parse() {
        Cli::command().debug_assert();
        let Command::Plan(p) = parse("plan --matrix m --work w --vms 3 --full --only raid5,raid6")
        else {
            panic!("not plan")
        };
        assert_eq!((p.matrix, p.work), ("m".into(), "w".into()));
        assert_eq!((p.vms, p.full), (3, true));
        assert_eq!(p.only, ["raid5", "raid6"]);
        let Command::Plan(p) = parse("plan --matrix m --work w") else {
            panic!("not plan")
        };
        assert_eq!((p.vms, p.full, p.only.len()), (2, false, 0));
        let Command::Check(c) = parse("check --work w --started-at 17") else {
            panic!("not check")
        };
        assert_eq!((c.work, c.started_at), ("w".into(), Some(17)));
    }

    #[test]
    fn bad_usage_is_refused_with_status_2() {
        for argv in [
            &["raidkit-oracle"][..],
            &["raidkit-oracle", "plan", "--work", "w"],
            &["raidkit-oracle", "check"],
            &[
                "raidkit-oracle",
                "check",
                "--work",
                "w",
                "--started-at",
                "soon",
            ],
            &[
                "raidkit-oracle",
                "plan",
                "--matrix",
                "m",
                "--work",
                "w",
                "--vms",
                "-1",
            ],
            &["raidkit-oracle", "frobnicate"],
        ] {
            let e = Cli::try_parse_from(argv).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{argv:?}: {e}");
        }
    }
}
