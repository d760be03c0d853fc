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

use raidkit_oracle::check::{check_array, CheckOutcome};
use raidkit_oracle::matrix::parse_matrix;
use raidkit_oracle::plan::{make_plan, write_plan, Plan};
use raidkit_oracle::records::parse_records;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

const USAGE: &str = "usage:\n  raidkit-oracle plan --matrix FILE --work DIR [--full] [--only SUB,SUB] [--vms N]\n  raidkit-oracle check --work DIR [--started-at UNIX_SECONDS]";

struct Args {
    matrix: Option<PathBuf>,
    work: Option<PathBuf>,
    full: bool,
    only: Vec<String>,
    vms: usize,
    started_at: Option<u64>,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        matrix: None,
        work: None,
        full: false,
        only: Vec::new(),
        vms: 2,
        started_at: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--matrix" => a.matrix = Some(PathBuf::from(value()?)),
            "--work" => a.work = Some(PathBuf::from(value()?)),
            "--full" => a.full = true,
            "--only" => {
                a.only = value()?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            }
            "--vms" => {
                a.vms = value()?
                    .parse()
                    .map_err(|_| "--vms needs a positive number".to_string())?
            }
            "--started-at" => {
                a.started_at = Some(
                    value()?
                        .parse()
                        .map_err(|_| "--started-at needs seconds".to_string())?,
                )
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

fn plan_cmd(a: &Args) -> Result<ExitCode, String> {
    let (Some(matrix), Some(work)) = (&a.matrix, &a.work) else {
        return Err("plan needs --matrix and --work".into());
    };
    let text = std::fs::read_to_string(matrix).map_err(|e| format!("{}: {e}", matrix.display()))?;
    let rows = parse_matrix(&text).map_err(|e| e.to_string())?;
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| a.full || r.fast || !a.only.is_empty())
        .filter(|r| a.only.is_empty() || a.only.iter().any(|s| r.name.contains(s.as_str())))
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

fn check_cmd(a: &Args) -> Result<ExitCode, String> {
    let Some(work) = &a.work else {
        return Err("check needs --work".into());
    };
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
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = argv.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = parse_args(rest).and_then(|a| match cmd.as_str() {
        "plan" => plan_cmd(&a),
        "check" => check_cmd(&a),
        other => Err(format!("unknown command {other}")),
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("raidkit-oracle: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
