//! `raidkit bench disks`: arrays on emulated drives against one drive of the same model,
//! side by side in one run (see raidkit_bench::lab::disks), with each figure's bar.

use raidkit_bench::lab::disks::{run_disks, DisksConfig, Figure};
use raidkit_cli::common::parse_chunk_sectors;
use raidkit_cli::CliError;
use raidkit_disk::emu::catalog::Catalog;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct DisksArgs {
    /// The drive of the catalog (`raidkit bench disks --drive cheetah15k5`); RAIDKIT_CATALOG
    /// adds your own.
    #[arg(long, default_value = "hds72101")]
    pub drive: String,
    /// Each member's size (the drive's whole surface is laid over it).
    #[arg(long, default_value = "1G")]
    pub size: String,
    /// Seconds per timed run.
    #[arg(long, default_value_t = 4.0)]
    pub time: f64,
    /// Members of the wide arrays (the bars are set for 6).
    #[arg(long, default_value_t = 6)]
    pub members: usize,
    /// Chunk size.
    #[arg(long, default_value = "512K")]
    pub chunk: String,
    /// Print a JSON document (schema raidkit-bench-disks/1, see docs/bench-json.md).
    #[arg(long)]
    pub json: bool,
}

fn print_figure(f: &Figure) {
    println!(
        "{:<46} {:>9.1} {:<4}  {:<38} {:>9.1}  {:>5.2}x  {}{:.2}  {}{}",
        f.what,
        f.value,
        f.unit,
        f.baseline_what,
        f.baseline,
        f.ratio,
        if f.strict { ">" } else { ">=" },
        f.bar,
        if f.met { "met" } else { "SHORT" },
        if f.note.is_empty() {
            String::new()
        } else {
            format!("  ({})", f.note)
        }
    );
}

pub fn disks_cmd(args: DisksArgs) -> Result<(), CliError> {
    let catalog = Catalog::load(None).map_err(|e| CliError::usage(e.to_string()))?;
    let drive = catalog.drive(&args.drive).cloned().ok_or_else(|| {
        let known: Vec<&str> = catalog.drive.iter().map(|d| d.name.as_str()).collect();
        CliError::usage(format!(
            "--drive {}: not in the catalog (known: {})",
            args.drive,
            known.join(", ")
        ))
    })?;
    let member_bytes = raidkit_disk::parse_size(&args.size).map_err(CliError::usage)?;
    if member_bytes < 64 << 20 || args.members < 4 || args.time.is_nan() || args.time <= 0.0 {
        return Err(CliError::usage(
            "--size must be at least 64M, --members at least 4 and --time positive",
        ));
    }
    let json = args.json;
    let cfg = DisksConfig {
        drive,
        catalog,
        member_bytes,
        time: Duration::from_secs_f64(args.time),
        members: args.members,
        chunk_sectors: parse_chunk_sectors(&args.chunk)?,
        progress: Some(Arc::new(move |what: &str| {
            if !json {
                eprintln!("bench disks: {what}");
            }
        })),
    };
    if !json {
        println!(
            "Emulated {} ({}), members of {}, 1 MiB requests at QD 4 unless said, {} s per run",
            cfg.drive.name, cfg.drive.model, args.size, args.time
        );
        println!(
            "{:<46} {:>9}       {:<38} {:>9}  {:>6}  bar",
            "figure", "value", "baseline", "value", "ratio"
        );
    }
    let (base, figures) = run_disks(&cfg, |f| {
        if !json {
            print_figure(f);
        }
    })
    .map_err(|e| CliError::failure(e.to_string()))?;
    if json {
        let doc = serde_json::json!({
            "schema": "raidkit-bench-disks/1",
            "drive": base,
            "member_bytes": member_bytes,
            "seconds_per_run": args.time,
            "figures": figures,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("JSON of plain values")
        );
    } else {
        println!(
            "one drive: sequential read {:.1} MB/s, write {:.1} MB/s, whole-span write (flushed) {:.1} MB/s, 4 KiB random read at QD 16 {:.0} IOPS",
            base.seq_read_mb_s, base.seq_write_mb_s, base.span_write_mb_s, base.rand_read_iops_qd16
        );
        let short = figures.iter().filter(|f| !f.met).count();
        println!(
            "{} of {} figures meet their bar",
            figures.len() - short,
            figures.len()
        );
    }
    Ok(())
}
