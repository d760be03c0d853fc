//! `raidkit layout`: print which member holds which chunk of each stripe.
//!
//! Parse, then act: the flags become a `LayoutRequest` (plain values, checked against md's and
//! mdadm's rules by raidkit-layout), and only then is a table rendered. The members are given
//! just enough sectors to hold the requested rows, so far and offset copies show up too, or
//! for RAID 0 the sizes given with `--member-sizes`, so md's zones show up. Rows are capped at
//! [`MAX_STRIPES`]: a table is for reading, and an unbounded one only fills memory.

use raidkit_cli::common::{parse_chunk_sectors, parse_size_bytes};
use raidkit_cli::CliError;
use raidkit_layout::{
    layout_table, stacked_layout_table, Geometry, Level, MdParams, Raid0Layout, Raid10Layout,
    Raid5Algorithm, Raid6Algorithm, StackedGeometry,
};
use serde::Serialize;

#[derive(clap::Args, Debug)]
pub struct LayoutArgs {
    /// RAID level: 0, 1, 4, 5, 6, 10, 1e (raid10 near-2), 50 or 60 (raid0 over raid5/6 sets).
    #[arg(long, short = 'l')]
    pub level: String,
    /// Layout, as mdadm names it or as md's number: left-symmetric, la, parity-first,
    /// ddf-N-restart, left-symmetric-6, n2, f2, o3, original, alternate, ...
    #[arg(long, short = 'p')]
    pub layout: Option<String>,
    /// Number of member devices (for 50/60: all members of all sets together).
    #[arg(long = "raid-devices", short = 'n')]
    pub raid_devices: u32,
    /// Chunk size with a K, M or G suffix; a bare number is KiB, as in mdadm.
    #[arg(long, short = 'c', default_value = "512K")]
    pub chunk: String,
    /// Number of raid5/raid6 sets for level 50/60.
    #[arg(long, default_value_t = 2)]
    pub sets: u32,
    /// Rows (stripes) to show, at most 4096; default twice the number of devices (with
    /// --member-sizes: every row of the members, up to 4096).
    #[arg(long)]
    pub stripes: Option<u64>,
    /// RAID 0 only: the size of each member, comma separated (K, M, G suffix; a bare number
    /// is KiB), to show md's zones when members differ in size.
    #[arg(long = "member-sizes", value_delimiter = ',', value_name = "SIZE,...")]
    pub member_sizes: Vec<String>,
    /// Print the table as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Most rows a table may show.
pub const MAX_STRIPES: u64 = 4096;

/// `--member-sizes` in sectors, checked against the level and member count.
fn member_sizes_sectors(args: &LayoutArgs, level: Level) -> Result<Option<Vec<u64>>, CliError> {
    if args.member_sizes.is_empty() {
        return Ok(None);
    }
    if level != Level::Raid0 {
        return Err(CliError::usage(format!(
            "--member-sizes applies to RAID 0 (md builds zones from unequal members); {level} uses the smallest member's size on every member"
        )));
    }
    if args.member_sizes.len() != args.raid_devices as usize {
        return Err(CliError::usage(format!(
            "--member-sizes lists {} sizes for {} raid devices; give one per member",
            args.member_sizes.len(),
            args.raid_devices
        )));
    }
    args.member_sizes
        .iter()
        .map(|t| parse_size_bytes(t, 1024).map(|b| b / 512))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// What to draw, after parsing.
enum LayoutRequest {
    Plain(Geometry),
    Stacked(StackedGeometry),
}

fn usage<E: std::fmt::Display>(err: E) -> CliError {
    CliError::usage(err.to_string())
}

fn build(args: &LayoutArgs, rows: u64) -> Result<LayoutRequest, CliError> {
    let level: Level = args.level.parse().map_err(usage)?;
    let chunk_sectors = parse_chunk_sectors(&args.chunk)?;
    let n = args.raid_devices;
    let dev_sectors = u64::from(chunk_sectors)
        .checked_mul(rows.max(1))
        .ok_or_else(|| CliError::usage("too many rows for this chunk size"))?;
    let layout_or = |default: &str| args.layout.clone().unwrap_or_else(|| default.to_string());
    let sizes = member_sizes_sectors(args, level)?;
    let md = |level: i32, layout: u32| MdParams {
        level,
        layout,
        raid_disks: n,
        chunk_sectors,
        member_data_sectors: sizes
            .clone()
            .unwrap_or_else(|| vec![dev_sectors; n as usize]),
    };
    let plain = |params: MdParams| {
        Geometry::from_md(&params)
            .map(LayoutRequest::Plain)
            .map_err(usage)
    };
    match level {
        Level::Raid0 => {
            // mdadm creates raid0 with the original layout unless told otherwise.
            let layout: Raid0Layout = layout_or("original").parse().map_err(usage)?;
            plain(md(0, layout.md_layout()))
        }
        Level::Raid1 => {
            if args.layout.is_some() {
                return Err(CliError::usage("raid1 has no layout"));
            }
            plain(md(1, 0))
        }
        Level::Raid4 => {
            if let Some(l) = &args.layout {
                if !matches!(l.to_ascii_lowercase().as_str(), "parity-last" | "5" | "0") {
                    return Err(CliError::usage(format!(
                        "raid4 keeps parity on the last device; layout '{l}' is not available"
                    )));
                }
            }
            plain(md(4, Raid5Algorithm::ParityLast.md_layout()))
        }
        Level::Raid5 => {
            let alg: Raid5Algorithm = layout_or("left-symmetric").parse().map_err(usage)?;
            plain(md(5, alg.md_layout()))
        }
        Level::Raid6 => {
            let alg: Raid6Algorithm = layout_or("left-symmetric").parse().map_err(usage)?;
            plain(md(6, alg.md_layout()))
        }
        Level::Raid10 => {
            let layout: Raid10Layout = layout_or("n2").parse().map_err(usage)?;
            plain(md(10, layout.md_layout()))
        }
        Level::Raid1E => {
            let layout: Raid10Layout = layout_or("n2").parse().map_err(usage)?;
            if layout != Raid10Layout::near(2) {
                return Err(CliError::usage("RAID 1E is raid10 with layout n2"));
            }
            Geometry::raid1e(n, chunk_sectors, dev_sectors)
                .map(LayoutRequest::Plain)
                .map_err(usage)
        }
        Level::Raid50 | Level::Raid60 => {
            let sets = args.sets;
            if sets < 2 {
                return Err(CliError::usage(format!(
                    "a stacked array needs at least 2 sets, got {sets}"
                )));
            }
            if !n.is_multiple_of(sets) {
                return Err(CliError::usage(format!(
                    "{n} raid-devices cannot be split into {sets} equal sets"
                )));
            }
            let per_set = n / sets;
            let stacked = if level == Level::Raid50 {
                let alg: Raid5Algorithm = layout_or("left-symmetric").parse().map_err(usage)?;
                StackedGeometry::raid50(alg, sets, per_set, chunk_sectors, dev_sectors)
            } else {
                let alg: Raid6Algorithm = layout_or("left-symmetric").parse().map_err(usage)?;
                StackedGeometry::raid60(alg, sets, per_set, chunk_sectors, dev_sectors)
            };
            stacked.map(LayoutRequest::Stacked).map_err(usage)
        }
    }
}

#[derive(Serialize)]
struct JsonOutput<'a> {
    level: String,
    md_level: i32,
    md_layout: u32,
    raid_devices: u32,
    chunk_bytes: u64,
    table: &'a raidkit_layout::LayoutTable,
}

/// Render the requested table as text or JSON.
pub fn render(args: &LayoutArgs) -> Result<String, CliError> {
    let rows = match args.stripes {
        Some(0) => return Err(CliError::usage("--stripes must be at least 1")),
        Some(r) if r > MAX_STRIPES => {
            return Err(CliError::usage(format!(
                "--stripes {r} is more than a table can usefully show (at most {MAX_STRIPES})"
            )))
        }
        Some(r) => r,
        None if !args.member_sizes.is_empty() => MAX_STRIPES,
        None => (2 * u64::from(args.raid_devices)).min(MAX_STRIPES),
    };
    let request = build(args, rows)?;
    let (table, level, md_level, md_layout, chunk_sectors) = match &request {
        LayoutRequest::Plain(g) => (
            layout_table(g, rows).map_err(usage)?,
            g.level(),
            g.md_level(),
            g.md_layout(),
            g.chunk_sectors(),
        ),
        LayoutRequest::Stacked(s) => (
            stacked_layout_table(s, rows).map_err(usage)?,
            s.level(),
            s.set_geometry().md_level(),
            s.set_geometry().md_layout(),
            s.set_geometry().chunk_sectors(),
        ),
    };
    if args.json {
        let out = JsonOutput {
            level: level.to_string(),
            md_level,
            md_layout,
            raid_devices: args.raid_devices,
            chunk_bytes: u64::from(chunk_sectors) * 512,
            table: &table,
        };
        serde_json::to_string_pretty(&out)
            .map(|s| s + "\n")
            .map_err(|e| CliError::failure(e.to_string()))
    } else {
        Ok(table.to_text())
    }
}

pub fn run(args: LayoutArgs) -> Result<(), CliError> {
    let text = render(&args)?;
    print!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use raidkit_cli::ExitCode;

    #[derive(Parser, Debug)]
    struct Wrapper {
        #[command(flatten)]
        args: LayoutArgs,
    }

    fn parse(argv: &[&str]) -> LayoutArgs {
        let mut full = vec!["layout"];
        full.extend_from_slice(argv);
        Wrapper::try_parse_from(full).expect("valid arguments").args
    }

    #[test]
    fn parses_flags_and_defaults() {
        let a = parse(&[
            "--level",
            "6",
            "--layout",
            "left-asymmetric",
            "--raid-devices",
            "5",
            "--chunk",
            "64K",
        ]);
        assert_eq!(a.level, "6");
        assert_eq!(a.layout.as_deref(), Some("left-asymmetric"));
        assert_eq!(a.raid_devices, 5);
        assert_eq!(a.chunk, "64K");
        assert!(!a.json);
        let d = parse(&["--level", "5", "--raid-devices", "3"]);
        assert_eq!(d.chunk, "512K");
        assert_eq!(d.sets, 2);
        assert_eq!(d.stripes, None);
    }

    #[test]
    fn missing_raid_devices_is_a_parse_error() {
        assert!(Wrapper::try_parse_from(["layout", "--level", "5"]).is_err());
    }

    #[test]
    fn chunk_sizes_parse_like_mdadm() {
        assert_eq!(parse_chunk_sectors("64K").unwrap(), 128);
        assert_eq!(parse_chunk_sectors("64").unwrap(), 128);
        assert_eq!(parse_chunk_sectors("1M").unwrap(), 2048);
        assert_eq!(parse_chunk_sectors("4m").unwrap(), 8192);
        assert!(parse_chunk_sectors("0").is_err());
        assert!(parse_chunk_sectors("12Q").is_err());
        assert!(parse_chunk_sectors("").is_err());
    }

    #[test]
    fn renders_raid6_left_asymmetric() {
        let a = parse(&[
            "--level",
            "6",
            "--layout",
            "la",
            "-n",
            "5",
            "--chunk",
            "64K",
            "--stripes",
            "2",
        ]);
        let text = render(&a).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "raid6 left-asymmetric, 5 members, chunk 64K");
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["0", "Q", "D0", "D1", "D2", "P"]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["1", "D3", "D4", "D5", "P", "Q"]
        );
    }

    #[test]
    fn invalid_geometry_is_a_usage_error() {
        let a = parse(&["--level", "6", "-n", "3"]);
        let err = render(&a).unwrap_err();
        assert_eq!(err.code, ExitCode::Usage);
        assert!(err.message.contains("at least 4"), "{}", err.message);
        let b = parse(&["--level", "5", "-n", "4", "--chunk", "96K"]);
        assert_eq!(render(&b).unwrap_err().code, ExitCode::Usage);
        let c = parse(&["--level", "5", "-n", "4", "--layout", "sideways"]);
        assert_eq!(render(&c).unwrap_err().code, ExitCode::Usage);
    }

    #[test]
    fn json_output_is_valid() {
        let a = parse(&["--level", "10", "--layout", "f2", "-n", "4", "--json"]);
        let text = render(&a).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["md_level"], 10);
        assert_eq!(v["md_layout"], 0x201);
        assert_eq!(v["table"]["columns"].as_array().unwrap().len(), 4);
        let r0 = parse(&["--level", "0", "-n", "3", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&render(&r0).unwrap()).unwrap();
        assert_eq!(v["md_layout"], 1, "mdadm default raid0 layout is original");
    }

    #[test]
    fn raid60_splits_devices_into_sets() {
        let a = parse(&["--level", "60", "-n", "8", "--sets", "2", "--stripes", "1"]);
        let text = render(&a).unwrap();
        assert!(text.starts_with("raid60 over 2 sets"), "{text}");
        let bad = parse(&["--level", "60", "-n", "9", "--sets", "2"]);
        assert_eq!(render(&bad).unwrap_err().code, ExitCode::Usage);
    }

    #[test]
    fn stripes_are_capped() {
        let a = parse(&["--level", "5", "-n", "4", "--stripes", "99999999999"]);
        let err = render(&a).unwrap_err();
        assert_eq!(err.code, ExitCode::Usage);
        assert!(err.message.contains("at most 4096"), "{}", err.message);
        let zero = parse(&["--level", "5", "-n", "4", "--stripes", "0"]);
        assert_eq!(render(&zero).unwrap_err().code, ExitCode::Usage);
        let most = parse(&[
            "--level",
            "5",
            "-n",
            "4",
            "--stripes",
            "4096",
            "--chunk",
            "4K",
        ]);
        assert_eq!(render(&most).unwrap().lines().count(), 2 + 4096);
    }

    #[test]
    fn raid0_member_sizes_show_zones() {
        // Members of 2, 4 and 8 chunks: zone 0 stripes all three for 2 rows, zone 1 the two
        // larger ones for 2 more, zone 2 the largest alone for its last 4.
        let a = parse(&[
            "--level",
            "0",
            "-n",
            "3",
            "--chunk",
            "4K",
            "--member-sizes",
            "8K,16K,32K",
        ]);
        let text = render(&a).unwrap();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(2)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert!(text.lines().next().unwrap().contains("3 zones"), "{text}");
        assert_eq!(rows.len(), 8, "{text}");
        assert_eq!(rows[0], ["0", "D0", "D1", "D2"]);
        assert_eq!(rows[2], ["2", "-", "D6", "D7"]);
        assert_eq!(rows[7], ["7", "-", "-", "D13"]);
        let wrong_level = parse(&["--level", "5", "-n", "3", "--member-sizes", "8K,8K,8K"]);
        assert_eq!(render(&wrong_level).unwrap_err().code, ExitCode::Usage);
        let wrong_count = parse(&["--level", "0", "-n", "3", "--member-sizes", "8K,8K"]);
        assert_eq!(render(&wrong_count).unwrap_err().code, ExitCode::Usage);
    }
}
