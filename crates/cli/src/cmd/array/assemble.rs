//! `raidkit assemble`: bring stopped arrays to a consistent, clean state and say what each
//! is made of, as `mdadm --assemble [--scan]` does at boot.
//!
//! raidkit is no kernel driver: an array runs while a process serves it (`raidkit serve
//! --scan` serves what the configuration names). What assembling does here is everything
//! md's assembly does to the members before the array runs: pick the members by UUID and
//! event count, replay the write journal or the partial parity log, finish a superblock
//! round an unclean stop cut short, take back or leave out stale members; then the
//! superblocks are written clean, so the next `serve`, or md itself, starts from there.
//! `--read-only` looks without writing (what would come up). One line per array; with
//! `--scan` an array that cannot be assembled is reported and the others still are, and the
//! exit code is the first failure's.

use raidkit_cli::common::{assemble_volume, engine_error, print_json, report_notes, Insist};
use raidkit_cli::config::{Config, DEFAULT_CONFIG};
use raidkit_cli::CliError;
use raidkit_engine::{AssembleReport, Status};
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct AssembleArgs {
    /// The members of one array (without --scan).
    #[arg(required_unless_present = "scan", conflicts_with = "scan")]
    pub members: Vec<PathBuf>,
    /// Every array the configuration file names (its ARRAY lines; members found by UUID
    /// among the DEVICE candidates, or named by `devices=`), as mdadm --assemble --scan.
    #[arg(long)]
    pub scan: bool,
    /// The configuration file --scan reads.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_CONFIG, requires = "scan")]
    pub config: PathBuf,
    /// With --scan, only these arrays (by name; repeatable).
    #[arg(long = "array", value_name = "NAME", requires = "scan")]
    pub arrays: Vec<String>,
    /// Look only: assemble read-only and write nothing (no log replayed, nothing marked
    /// clean).
    #[arg(long)]
    pub read_only: bool,
    /// Accept stale members / a dirty degraded array, as mdadm --force.
    #[arg(long, short = 'f')]
    pub force: bool,
    #[arg(long, help = raidkit_cli::common::RUN_HELP)]
    pub run: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What assembling one array found.
#[derive(Serialize)]
struct Assembled {
    array: String,
    members: Vec<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    assembly: Option<AssembleReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub fn run(args: AssembleArgs) -> Result<(), CliError> {
    let mut todo: Vec<(String, Result<Vec<PathBuf>, CliError>)> = Vec::new();
    if args.scan {
        let cfg = Config::load(&args.config)?;
        for name in &args.arrays {
            if !cfg.arrays.iter().any(|a| &a.name == name) {
                return Err(CliError::usage(format!(
                    "{}: no ARRAY {name}",
                    args.config.display()
                )));
            }
        }
        if cfg.arrays.is_empty() {
            return Err(CliError::usage(format!(
                "{}: no ARRAY line (`raidkit scan` prints them)",
                args.config.display()
            )));
        }
        for a in &cfg.arrays {
            if args.arrays.is_empty() || args.arrays.contains(&a.name) {
                todo.push((a.name.clone(), cfg.members_of(a)));
            }
        }
    } else {
        todo.push(("array".to_string(), Ok(args.members.clone())));
    }
    let insist = Insist {
        force: args.force,
        run: args.run,
    };
    let mut results = Vec::new();
    let mut first_error: Option<CliError> = None;
    for (name, members) in todo {
        let done = members.and_then(|m| {
            let (array, report) = assemble_volume(&m, args.read_only, insist)?;
            if !args.read_only {
                array.stop().map_err(engine_error)?;
            }
            Ok((m, array.status(), report))
        });
        match done {
            Ok((members, status, report)) => {
                if !args.json {
                    report_notes(&report);
                    println!("{}", line(&name, &status, &report, args.read_only));
                }
                results.push(Assembled {
                    array: name,
                    members,
                    status: Some(status),
                    assembly: Some(report),
                    error: None,
                });
            }
            Err(e) => {
                if !args.json {
                    eprintln!("raidkit: {name}: not assembled: {}", e.message);
                }
                results.push(Assembled {
                    array: name,
                    members: Vec::new(),
                    status: None,
                    assembly: None,
                    error: Some(e.message.clone()),
                });
                first_error.get_or_insert(e);
            }
        }
    }
    if args.json {
        print_json(&results)?;
    }
    match first_error {
        None => Ok(()),
        Some(e) if results.len() == 1 => Err(e),
        Some(e) => Err(CliError::new(
            e.code,
            format!(
                "{} of {} arrays not assembled",
                results.iter().filter(|r| r.error.is_some()).count(),
                results.len()
            ),
        )),
    }
}

/// `raidkit: md0: raid6, 6 of 6 slots in sync, 1 spare; stopped clean (events 12)`, with
/// what is missing or pending.
fn line(name: &str, st: &Status, report: &AssembleReport, read_only: bool) -> String {
    if let Some(stack) = &st.stack {
        // `raidkit: md0: raid50 over 2 spans (span 0: raid5, 3 of 3 slots in sync; ...)`.
        let spans: Vec<String> = stack
            .spans
            .iter()
            .enumerate()
            .map(|(i, span)| line(&format!("span {i}"), span, report, read_only))
            .map(|l| l.trim_start_matches("raidkit: ").to_string())
            .collect();
        return format!(
            "raidkit: {name}: raid{} over {} spans; {}",
            stack.level,
            stack.spans.len(),
            spans.join("; ")
        );
    }
    let in_sync = st
        .members
        .iter()
        .filter(|m| m.role == "active" && m.slot.is_some())
        .count();
    let spares = st.members.iter().filter(|m| m.role == "spare").count();
    let mut out = format!(
        "raidkit: {name}: raid{}, {in_sync} of {} slots in sync",
        st.level, st.raid_disks
    );
    if spares > 0 {
        out.push_str(&format!(
            ", {spares} spare{}",
            if spares == 1 { "" } else { "s" }
        ));
    }
    if !st.missing_slots.is_empty() {
        out.push_str(&format!(
            ", degraded (slots {:?} missing)",
            st.missing_slots
        ));
    }
    if !st.pending.is_empty() {
        let pending: Vec<&str> = st.pending.iter().map(|t| t.name()).collect();
        out.push_str(&format!(
            ", {} pending (`raidkit serve` or `raidkit rebuild` runs it)",
            pending.join(", ")
        ));
    }
    out.push_str(&if read_only {
        format!(
            "; looked at read-only, {} (events {})",
            if report.was_dirty {
                "not stopped cleanly"
            } else {
                "clean"
            },
            st.events
        )
    } else {
        match st.resync_from_sectors {
            None => format!("; stopped clean (events {})", st.events),
            Some(at) => format!(
                "; stopped with a resync pending from sector {at} (events {})",
                st.events
            ),
        }
    });
    out
}
