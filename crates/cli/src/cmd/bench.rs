//! `raidkit bench …`: benchmarks that print figures. Each variant parses its flags into plain
//! values, calls a benchmark in the raidkit-bench crate (or, for `nbd`, drives the real
//! server and real clients as processes), and prints what it returns.

mod disks;
mod lab;
pub use lab::IostatArgs;

/// `raidkit iostat`.
pub fn iostat(args: IostatArgs) -> Result<(), CliError> {
    lab::iostat_cmd(args)
}
mod nbd;

use std::io::Write;

use raidkit_bench::parity::{self, ParityBenchConfig, ParityRow};
use raidkit_parity::KernelId;

use raidkit_cli::CliError;

#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Measure a target the way the reference studies do: the dd method, streaming, the
    /// twelve IOmeter access specifications, custom mixes and sweeps over request size and
    /// queue depth, with latency percentiles, CPU per GB and each member's load.
    Run(lab::RunArgs),
    /// The studies' table on this machine: for each level and member count, an array over
    /// image files (or given devices) written and read back with the dd method; capacity,
    /// space efficiency, MB/s, each member's load, and a chart.
    Matrix(lab::MatrixArgs),
    /// The lab's load generator against fio on the same targets (a file in memory, a
    /// `raidkit serve` export through fio's nbd engine): MB/s side by side and their ratio.
    Selftest(lab::SelftestArgs),
    /// Arrays on emulated drives (each level's default protection) against one drive of the
    /// same model, side by side in one run: sequential read and write, random reads, a
    /// rebuild idle and under reads, each with its ratio and the bar it is held to.
    Disks(disks::DisksArgs),
    /// Parity kernels (P, P+Q, two-failure recovery) in GB/s per core, side by side with
    /// ISA-L's xor_gen, pq_gen and ec_encode_data when libisal is installed.
    Parity(ParityArgs),
    /// A raidkit array (RAID 0, 5, 6 over image files in tmpfs) served by `raidkit serve` next
    /// to `nbdkit memory`: nbdcopy sequential write and read, fio 4 KiB random read and write
    /// at iodepth 32; medians, ratios and server CPU seconds per GB.
    Nbd(nbd::NbdArgs),
    /// Rebuild speed against a plain sequential read of one member file, and foreground
    /// throughput while a rebuild runs, on member files (use a folder in /dev/shm).
    Rebuild(RebuildArgs),
}

#[derive(clap::Args, Debug)]
pub struct RebuildArgs {
    /// Folder for the member files (created; the files are removed afterwards).
    #[arg(long, default_value = "/dev/shm/raidkit-bench")]
    pub dir: std::path::PathBuf,
    /// RAID level: 1, 4, 5, 6, 10.
    #[arg(long, short = 'l', default_value = "5")]
    pub level: String,
    /// Members.
    #[arg(long = "raid-devices", short = 'n', default_value_t = 4)]
    pub raid_devices: usize,
    /// Layout (mdadm name or md number).
    #[arg(long, short = 'p')]
    pub layout: Option<String>,
    /// Chunk size.
    #[arg(long, short = 'c', default_value = "512K")]
    pub chunk: String,
    /// Size of each member file.
    #[arg(long, short = 'z', default_value = "512M")]
    pub size: String,
    /// Timed runs (the median is reported; one warm-up run comes first).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct ParityArgs {
    /// raidkit kernel to measure: reference, portable, avx2, avx512, gfni-avx2, gfni-avx512,
    /// neon [default: the dispatcher's choice, see RAIDKIT_PARITY].
    #[arg(long, value_parser = parse_kernel)]
    pub kernel: Option<KernelId>,
    /// Print a JSON array of result objects instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Timed runs per case; the median is reported (at least 5; one warm-up run comes first).
    #[arg(long, default_value_t = 21, value_parser = parse_runs)]
    pub runs: usize,
    /// Size of the cold buffer set in MiB (keep it far above the last-level cache).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub cold_mib: u32,
}

fn parse_kernel(name: &str) -> Result<KernelId, String> {
    KernelId::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = KernelId::ALL.iter().map(|k| k.name()).collect();
        format!("unknown kernel {name:?} (known: {})", known.join(", "))
    })
}

fn parse_runs(s: &str) -> Result<usize, String> {
    let runs: usize = s.parse().map_err(|e| format!("{e}"))?;
    if runs < 5 {
        return Err(format!("{runs} runs: the median needs at least 5"));
    }
    Ok(runs)
}

pub fn run(cmd: BenchCommand) -> Result<(), CliError> {
    match cmd {
        BenchCommand::Run(args) => lab::run_cmd(args),
        BenchCommand::Matrix(args) => lab::matrix_cmd(args),
        BenchCommand::Selftest(args) => lab::selftest_cmd(args),
        BenchCommand::Disks(args) => disks::disks_cmd(args),
        BenchCommand::Parity(args) => run_parity(args),
        BenchCommand::Rebuild(args) => run_rebuild(args),
        BenchCommand::Nbd(args) => nbd::run(args),
    }
}

fn run_rebuild(args: RebuildArgs) -> Result<(), CliError> {
    use raidkit_cli::common::{parse_chunk_sectors, parse_layout, parse_level, parse_size_bytes};
    let level = parse_level(&args.level)?;
    if level == 0 {
        return Err(CliError::usage("RAID 0 has nothing to rebuild"));
    }
    let layout = match &args.layout {
        Some(l) => Some(parse_layout(level, l)?),
        None => None,
    };
    let cfg = raidkit_bench::rebuild::RebuildBenchConfig {
        dir: args.dir.clone(),
        member_bytes: parse_size_bytes(&args.size, 1024)?,
        level,
        layout,
        raid_devices: args.raid_devices,
        chunk_sectors: parse_chunk_sectors(&args.chunk)?,
        runs: args.runs.max(1),
    };
    let mut out = std::io::stdout().lock();
    if !args.json {
        writeln!(
            out,
            "rebuild of one member of RAID {level} over {} members of {} in {}; member read = one file read sequentially in 1 MiB requests (dd bs=1M)",
            args.raid_devices,
            args.size,
            args.dir.display()
        )?;
        writeln!(
            out,
            "{:>5} {:>16} {:>12} {:>7} {:>13} {:>21}",
            "run", "member read MB/s", "rebuild MB/s", "ratio", "rebuild CPUs", "member write MB/s"
        )?;
    }
    let mut k = 0;
    let report = raidkit_bench::rebuild::run_rebuild_bench(&cfg, |r| {
        k += 1;
        if !args.json {
            let _ = writeln!(
                std::io::stdout(),
                "{k:>5} {:>16.0} {:>12.0} {:>6.2}x {:>13.2} {:>21.0}",
                r.member_read_mb_s,
                r.rebuild_mb_s,
                r.ratio,
                r.rebuild_cpus,
                r.member_write_mb_s
            );
        }
    })
    .map_err(CliError::failure)?;
    if args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| CliError::failure(format!("json: {e}")))?;
        writeln!(out, "{text}")?;
        return Ok(());
    }
    writeln!(
        out,
        "median: member read {:.0} MB/s, rebuild {:.0} MB/s per member, ratio {:.2}x (parity kernel {})",
        report.member_read_mb_s, report.rebuild_mb_s, report.ratio, report.parity_kernel
    )?;
    writeln!(
        out,
        "check at full rate: {:.0} MB/s per member, {:.2} CPUs busy, 0 mismatches",
        report.check_mb_s, report.check_cpus
    )?;
    writeln!(
        out,
        "ceiling: writing one member's worth on every CPU, reading nothing, runs at {:.2}x of the member read (median); no rebuild here can beat it",
        report.write_ceiling_ratio
    )?;
    writeln!(
        out,
        "foreground sequential reads: {:.0} MB/s healthy, {:.0} MB/s degraded, {:.0} MB/s during a rebuild at default rates ({:.0} % of healthy, {:.0} % of degraded), while the rebuild ran at {:.0} MB/s",
        report.foreground_alone_mb_s,
        report.foreground_degraded_mb_s,
        report.foreground_during_rebuild_mb_s,
        report.foreground_fraction * 100.0,
        report.foreground_fraction_of_degraded * 100.0,
        report.rebuild_under_load_mb_s
    )?;
    writeln!(out, "peak RSS {:.0} MiB", report.peak_rss_mib)?;
    Ok(())
}

fn run_parity(args: ParityArgs) -> Result<(), CliError> {
    let cfg = ParityBenchConfig {
        kernel: args.kernel,
        runs: args.runs,
        cold_pool_bytes: (args.cold_mib as usize) << 20,
        ..ParityBenchConfig::default()
    };
    // Refuse an unsupported kernel before allocating anything.
    let kernel = parity::choose_kernel(cfg.kernel).map_err(|e| CliError::usage(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    if !args.json {
        writeln!(out, "raidkit parity kernel: {}", kernel.name())?;
        if let Some(note) = raidkit_parity::selection().fallback_reason.as_deref() {
            writeln!(out, "note: {note}")?;
        }
        match raidkit_bench::isal::Isal::load() {
            Ok(lib) => writeln!(out, "ISA-L: {} (loaded at run time)", lib.soname())?,
            Err(e) => writeln!(out, "{e}; printing raidkit's figures alone")?,
        }
        writeln!(
            out,
            "GB/s of data per core (thread CPU time), one thread, median of {} alternating runs after a warm-up run; {} data members per stripe; ratio = median of per-run ratios",
            cfg.runs,
            parity::DATA_MEMBERS
        )?;
        writeln!(
            out,
            "recover-2data rebuilds data slots {:?}; ISA-L side: ec_encode_data with the 2x8 decode matrix of the same recovery\n",
            parity::FAILED_SLOTS
        )?;
        writeln!(out, "{}", header())?;
        out.flush()?;
    }
    // Rows are printed as they are measured; the first write error stops the printing and
    // is reported once the benchmark returns.
    let mut last_case = String::new();
    let mut write_result: std::io::Result<()> = Ok(());
    let report = parity::run_parity_bench(&cfg, |row| {
        if args.json || write_result.is_err() {
            return;
        }
        let gap = if !last_case.is_empty() && row.case != last_case {
            "\n"
        } else {
            ""
        };
        last_case = row.case.clone();
        write_result = writeln!(out, "{gap}{}", table_line(row)).and_then(|()| out.flush());
    })
    .map_err(|e| CliError::failure(e.to_string()))?;
    write_result?;
    if args.json {
        if let Err(e) = &report.isal {
            eprintln!("raidkit: {e}; ISA-L figures are null");
        }
        let text = serde_json::to_string_pretty(&report.rows)
            .map_err(|e| CliError::failure(format!("json: {e}")))?;
        writeln!(out, "{text}")?;
    } else if report.rows.iter().any(|r| r.outputs_match == Some(false)) {
        writeln!(
            out,
            "\nwarning: some ISA-L outputs differ from raidkit's (see 'same' column)"
        )?;
    }
    Ok(())
}

fn header() -> String {
    format!(
        "{:<14} {:<16} {:>12} {:>10} {:>7}  {}",
        "op", "case", "raidkit GB/s", "ISA-L GB/s", "ratio", "same"
    )
}

fn table_line(row: &ParityRow) -> String {
    let isal = row
        .isal_gbps
        .map(|g| format!("{g:.2}"))
        .unwrap_or_else(|| "-".into());
    let ratio = row
        .ratio
        .map(|r| format!("{r:.2}x"))
        .unwrap_or_else(|| "-".into());
    let same = match row.outputs_match {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    };
    format!(
        "{:<14} {:<16} {:>12.2} {:>10} {:>7}  {}",
        row.op, row.case, row.raidkit_gbps, isal, ratio, same
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Wrap {
        #[command(subcommand)]
        cmd: BenchCommand,
    }

    fn parse(args: &[&str]) -> Result<ParityArgs, clap::Error> {
        let mut full = vec!["bench", "parity"];
        full.extend_from_slice(args);
        Wrap::try_parse_from(full).map(|w| match w.cmd {
            BenchCommand::Parity(p) => p,
            other => unreachable!("parsed as parity: {other:?}"),
        })
    }

    #[test]
    fn parity_flags_parse_and_validate() {
        let p = parse(&["--kernel", "portable", "--json", "--runs", "9"]).unwrap();
        assert_eq!(p.kernel, Some(KernelId::Portable));
        assert!(p.json);
        assert_eq!(p.runs, 9);
        assert_eq!(p.cold_mib, 256);
        let d = parse(&[]).unwrap();
        assert_eq!((d.kernel, d.json, d.runs), (None, false, 21));
        assert!(parse(&["--kernel", "sse9"]).is_err());
        assert!(parse(&["--runs", "4"]).is_err());
        assert!(parse(&["--cold-mib", "0"]).is_err());
    }

    #[test]
    fn table_line_shows_missing_isal_as_dashes() {
        let row = ParityRow {
            op: "pq",
            case: "8x64KiB warm".into(),
            raidkit_gbps: 12.5,
            isal_gbps: None,
            ratio: None,
            raidkit_kernel: "avx2",
            isal_function: None,
            outputs_match: None,
            raidkit_runs_gbps: vec![],
            isal_runs_gbps: vec![],
        };
        let line = table_line(&row);
        assert!(line.starts_with("pq"), "{line}");
        assert!(line.contains("12.50") && line.contains(" - "), "{line}");
    }
}
