//! `raidkit sim`: the seeded simulator with fault injection.
//!
//! `--seed N` runs one seed with a step-by-step trace; `--seeds A..B` runs a range;
//! `--soak --duration 10m` runs fresh seeds until the time is up, printing progress. Any
//! failure prints its seed and what went wrong and exits with code 5 (mismatch).

use raidkit_cli::{CliError, ExitCode};
use raidkit_sim::{run_seed, SeedReport, SimOptions, Totals};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Run one seed and print its trace.
    #[arg(long, conflicts_with_all = ["seeds", "soak"])]
    seed: Option<u64>,
    /// Run a half-open range of seeds, e.g. 0..1000.
    #[arg(long, value_parser = parse_range, conflicts_with = "soak")]
    seeds: Option<std::ops::Range<u64>>,
    /// Run fresh seeds until --duration is up.
    #[arg(long, requires = "duration")]
    soak: bool,
    /// Soak time: 90s, 10m, 1h or plain seconds.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// First seed of a soak (default: from the clock; printed so the run can be repeated).
    #[arg(long)]
    start: Option<u64>,
    /// Workload operations per seed.
    #[arg(long, default_value_t = 120)]
    ops: u32,
    /// Allow crash-then-degrade on RAID 4/5/6 arrays with neither a write journal nor a partial
    /// parity log (the write hole, which md has no means to close there; seeds with either
    /// always allow it).
    #[arg(long)]
    write_hole: bool,
    /// Leave removed members attached at every later assembly (by default half the seeds do,
    /// drawn per seed).
    #[arg(long)]
    keep_removed: bool,
    /// Threads rebuild, replace, check, repair, resync and patrol run their steps on. 1 keeps every seed
    /// exactly reproducible; more tests those tasks' bursts (steps side by side), whose member
    /// I/O order varies from run to run, so a failure found that way may not replay.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    task_threads: u32,
}

fn parse_range(s: &str) -> Result<std::ops::Range<u64>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("'{s}': expected A..B"))?;
    let a: u64 = a.parse().map_err(|_| format!("'{a}': not a seed"))?;
    let b: u64 = b.parse().map_err(|_| format!("'{b}': not a seed"))?;
    if b <= a {
        return Err(format!("'{s}': the range is empty"));
    }
    Ok(a..b)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, mult) = match s.char_indices().last() {
        Some((i, 's')) => (&s[..i], 1),
        Some((i, 'm')) => (&s[..i], 60),
        Some((i, 'h')) => (&s[..i], 3600),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}': expected a duration such as 90s, 10m or 1h"))?;
    if n == 0 {
        return Err("the duration must be positive".into());
    }
    Ok(Duration::from_secs(n * mult))
}

fn print_failure(r: &SeedReport) {
    if let Some(f) = &r.failure {
        println!("FAIL seed {}: {f}", r.seed);
        println!("     scenario: {}", r.scenario);
    }
}

fn summary(t: &Totals, elapsed: Duration, opts: &SimOptions) -> Result<(), CliError> {
    println!(
        "seeds {}  ops {}  faults injected {}  crashes {} (at a superblock write {})  rebuilds {}  resyncs {}  checks {}  patrols {}  member checks {}  reshapes {}  over-budget seeds {}  seeds with write-hole exclusions {}{}  failures {}  time {:.1}s",
        t.seeds,
        t.ops,
        t.faults,
        t.crashes,
        t.superblock_cuts,
        t.rebuilds,
        t.resyncs,
        t.scrubs,
        t.patrols,
        t.member_checks,
        t.reshapes,
        t.over_budget,
        t.write_hole_excluded,
        if opts.write_hole { " (--write-hole: none excluded)" } else { "" },
        t.failures.len(),
        elapsed.as_secs_f64()
    );
    if t.failures.is_empty() {
        Ok(())
    } else {
        let seeds: Vec<String> = t.failures.iter().map(|(s, _)| s.to_string()).collect();
        Err(CliError::new(
            ExitCode::Mismatch,
            format!("{} failing seed(s): {}", seeds.len(), seeds.join(" ")),
        ))
    }
}

pub fn run(args: SimArgs) -> Result<(), CliError> {
    let opts = SimOptions {
        write_hole: args.write_hole,
        ops: args.ops,
        trace: args.seed.is_some(),
        keep_removed: args.keep_removed,
        task_threads: args.task_threads as usize,
    };
    let began = Instant::now();
    if let Some(seed) = args.seed {
        let r = run_seed(seed, &opts);
        println!("seed {seed}: {}", r.scenario);
        for line in &r.trace {
            println!("{line}");
        }
        for e in &r.excluded {
            println!("excluded: {e}");
        }
        print_failure(&r);
        let mut t = Totals::default();
        t.add(&r);
        return summary(&t, began.elapsed(), &opts);
    }
    if let Some(range) = args.seeds {
        let mut t = Totals::default();
        for seed in range {
            let r = run_seed(seed, &opts);
            print_failure(&r);
            t.add(&r);
        }
        return summary(&t, began.elapsed(), &opts);
    }
    if args.soak {
        let Some(duration) = args.duration else {
            return Err(CliError::usage("--soak needs --duration"));
        };
        let start = args.start.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() << 20)
                .unwrap_or(0)
        });
        println!(
            "soak from seed {start} for {}s{}",
            duration.as_secs(),
            if opts.write_hole {
                " with --write-hole"
            } else {
                ""
            }
        );
        let mut t = Totals::default();
        let mut seed = start;
        let mut last = Instant::now();
        while began.elapsed() < duration {
            let r = run_seed(seed, &opts);
            print_failure(&r);
            t.add(&r);
            seed += 1;
            if last.elapsed() >= Duration::from_secs(10) {
                last = Instant::now();
                eprintln!(
                    "[{:>5.0}s] seeds {}..{}  ops {}  faults {}  crashes {}  failures {}",
                    began.elapsed().as_secs_f64(),
                    start,
                    seed,
                    t.ops,
                    t.faults,
                    t.crashes,
                    t.failures.len()
                );
            }
        }
        println!("seeds run: {start}..{seed}");
        return summary(&t, began.elapsed(), &opts);
    }
    Err(CliError::usage(
        "sim needs --seed N, --seeds A..B or --soak --duration D",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ranges_parse() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("0m").is_err());
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_range("3..9"), Ok(3..9));
        assert!(parse_range("9..3").is_err());
        assert!(parse_range("9").is_err());
    }
}
