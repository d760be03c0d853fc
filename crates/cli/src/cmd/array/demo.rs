//! `raidkit demo`: a guided tour on image files in a local folder, no root needed.
//!
//! Creates an array (RAID 6 over six 64 MiB images by default), fills it with deterministic
//! pseudo-random data, reads it back and checks every byte, stops it, reassembles it from the
//! files, fails as many members as the level can lose (two for RAID 6), checks degraded reads
//! and a degraded write, reassembles the degraded array, and finally adds fresh members to
//! rebuild it. Each step prints what it did with figures (MB/s). A mismatch exits with 5.

use super::create::{create_array, CreatePlan};
use raidkit_cli::common::{
    disk_error, engine_error, parse_chunk_sectors, parse_layout, parse_level, parse_size_bytes,
    random_uuid,
};
use raidkit_cli::{CliError, ExitCode};
use raidkit_disk::{Disk, FileDisk, OpenOptions};
use raidkit_engine::{Array, AssembleOptions, EngineConfig};
use raidkit_metadata::SuperblockVersion;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Folder for the member image files (created if missing; only demo-*.img files in it
    /// are replaced).
    #[arg(long, default_value = "demo")]
    pub dir: PathBuf,
    /// RAID level: 0, 1, 4, 5, 6, 10.
    #[arg(long, short = 'l', default_value = "6")]
    pub level: String,
    /// Number of members.
    #[arg(long = "raid-devices", short = 'n', default_value_t = 6)]
    pub raid_devices: usize,
    /// Size of each member image (K, M, G suffix).
    #[arg(long, short = 'z', default_value = "64M")]
    pub size: String,
    /// Chunk size.
    #[arg(long, short = 'c', default_value = "512K")]
    pub chunk: String,
    /// Layout (mdadm name or md number).
    #[arg(long, short = 'p')]
    pub layout: Option<String>,
    /// Seed of the pseudo-random data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the steps as one JSON document instead of sentences.
    #[arg(long)]
    pub json: bool,
}

/// Prints each step as a sentence, or collects them for one JSON document at the end.
struct Reporter {
    json: bool,
    steps: Vec<serde_json::Value>,
}

impl Reporter {
    fn say(&mut self, text: String, figures: serde_json::Value) {
        if self.json {
            self.steps
                .push(serde_json::json!({ "text": text, "figures": figures }));
        } else {
            println!("{text}");
        }
    }

    fn finish(self) -> Result<(), CliError> {
        if self.json {
            let doc = serde_json::json!({ "steps": self.steps });
            let text =
                serde_json::to_string_pretty(&doc).map_err(|e| CliError::failure(e.to_string()))?;
            println!("{text}");
        }
        Ok(())
    }
}

const BLOCK: usize = 1 << 20;

/// The last step: a short `raidkit bench matrix` (RAID 0, 5, 6 and 10 over 4 and 6 members of
/// 32 MiB, dd method) on image files in the demo's folder, and its chart.
fn short_matrix(args: &DemoArgs, out: &mut Reporter) -> Result<(), CliError> {
    use raidkit_bench::lab::matrix::{chart, run_matrix, LevelSpec, MatrixConfig, Place};
    let cfg = MatrixConfig {
        levels: LevelSpec::parse_list("0,5,6,10").map_err(CliError::failure)?,
        members: vec![4, 6],
        place: Place::Dir(args.dir.clone()),
        member_bytes: 32 << 20,
        bytes: None,
        request_bytes: 1 << 20,
        chunk_sectors: 1024,
        progress: None,
    };
    let cells = run_matrix(&cfg, |_| {}).map_err(|e| CliError::failure(e.to_string()))?;
    let stem = args.dir.join("matrix");
    let drawn = chart(
        &cells,
        &stem,
        "raidkit demo: dd method by level and member count",
    );
    let rows: Vec<String> = cells
        .iter()
        .map(|c| {
            format!(
                "    RAID {:<6} x{}  {:>3.0}% of raw  write {:>6.0} MB/s  read {:>6.0} MB/s",
                c.level,
                c.members,
                c.efficiency * 100.0,
                c.write.mb_s,
                c.read.mb_s
            )
        })
        .collect();
    let chart_text = match &drawn {
        Ok(files) => format!(
            "chart: {}",
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        Err(why) => format!("no chart: {why}"),
    };
    out.say(
        format!(
            "Last, a short matrix (`raidkit bench matrix` for the full one): each level written and read back in 1 MiB requests on 32 MiB image files{}:\n{}\n  {chart_text}",
            if raidkit_bench::lab::matrix::place_in_memory(&cfg.place) {
                " (in memory: the engine's speed, not a disk's)"
            } else {
                ""
            },
            rows.join("\n")
        ),
        serde_json::json!({ "step": "matrix", "cells": cells.iter().map(|c| serde_json::json!({
            "level": c.level, "members": c.members, "efficiency": c.efficiency,
            "write_mb_s": c.write.mb_s, "read_mb_s": c.read.mb_s })).collect::<Vec<_>>(),
            "charts": drawn.unwrap_or_default() }),
    );
    Ok(())
}

/// Deterministic data for array block `index` (xorshift seeded by seed and index).
fn fill_block(seed: u64, index: u64, buf: &mut [u8]) {
    let mut x = (seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
    for c in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = x.to_le_bytes();
        c.copy_from_slice(&v[..c.len()]);
    }
}

/// FNV-1a over 64-bit words: a checksum to print, not a security measure.
fn checksum(acc: &mut u64, buf: &[u8]) {
    for c in buf.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        *acc ^= u64::from_le_bytes(w);
        *acc = acc.wrapping_mul(0x100_0000_01b3);
    }
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs.max(1e-9)
}

struct Outcome {
    bytes: u64,
    secs: f64,
    sum: u64,
    bad_blocks: u64,
}

fn write_all(array: &Array, seed: u64, from_block: u64, blocks: u64) -> Result<Outcome, CliError> {
    let mut buf = vec![0u8; BLOCK];
    let mut sum = 0xcbf2_9ce4_8422_2325u64;
    let t = Instant::now();
    for i in from_block..from_block + blocks {
        fill_block(seed, i, &mut buf);
        checksum(&mut sum, &buf);
        array
            .write_at(&buf, i * BLOCK as u64, false)
            .map_err(engine_error)?;
    }
    array.flush().map_err(engine_error)?;
    Ok(Outcome {
        bytes: blocks * BLOCK as u64,
        secs: t.elapsed().as_secs_f64(),
        sum,
        bad_blocks: 0,
    })
}

fn verify_all(array: &Array, seed: u64, from_block: u64, blocks: u64) -> Result<Outcome, CliError> {
    let mut buf = vec![0u8; BLOCK];
    let mut want = vec![0u8; BLOCK];
    let mut sum = 0xcbf2_9ce4_8422_2325u64;
    let mut bad = 0;
    let mut read_secs = 0.0;
    for i in from_block..from_block + blocks {
        let t = Instant::now();
        array
            .read_at(&mut buf, i * BLOCK as u64)
            .map_err(engine_error)?;
        read_secs += t.elapsed().as_secs_f64();
        fill_block(seed, i, &mut want);
        checksum(&mut sum, &buf);
        if buf != want {
            bad += 1;
        }
    }
    Ok(Outcome {
        bytes: blocks * BLOCK as u64,
        secs: read_secs,
        sum,
        bad_blocks: bad,
    })
}

fn member_paths(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n).map(|i| dir.join(format!("demo-{i}.img"))).collect()
}

fn open_rw(paths: &[PathBuf]) -> Result<Vec<Box<dyn Disk>>, CliError> {
    paths
        .iter()
        .map(|p| {
            FileDisk::open(p, OpenOptions::default())
                .map(|d| Box::new(d) as Box<dyn Disk>)
                .map_err(disk_error)
        })
        .collect()
}

fn check(o: &Outcome, expect_sum: u64, what: &str) -> Result<(), CliError> {
    if o.bad_blocks > 0 || o.sum != expect_sum {
        return Err(CliError::new(
            ExitCode::Mismatch,
            format!("{what}: {} of {} MiB blocks differ from what was written (checksum {:016x}, expected {:016x})", o.bad_blocks, o.bytes >> 20, o.sum, expect_sum),
        ));
    }
    Ok(())
}

pub fn run(args: DemoArgs) -> Result<(), CliError> {
    // Parse, then act.
    let mut out = Reporter {
        json: args.json,
        steps: Vec::new(),
    };
    let level = parse_level(&args.level)?;
    let layout = match &args.layout {
        Some(l) => Some(parse_layout(level, l)?),
        None => None,
    };
    let chunk_sectors = parse_chunk_sectors(&args.chunk)?;
    let image_bytes = parse_size_bytes(&args.size, 1024)?;
    let n = args.raid_devices;
    let min = match level {
        0 | 1 => 1,
        4 | 5 | 10 => 2,
        _ => 4,
    };
    if n < min {
        return Err(CliError::usage(format!(
            "RAID {level} needs at least {min} members"
        )));
    }
    let can_lose = match level {
        0 => 0,
        1 => (n - 1).min(2),
        4 | 5 => 1,
        6 => 2,
        _ => 1,
    };
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| CliError::failure(format!("{}: {e}", args.dir.display())))?;
    let paths = member_paths(&args.dir, n);
    for p in &paths {
        if p.exists() {
            std::fs::remove_file(p)
                .map_err(|e| CliError::failure(format!("{}: {e}", p.display())))?;
        }
    }
    for i in n..n + 2 {
        let p = args.dir.join(format!("demo-{i}.img"));
        if p.exists() {
            let _ = std::fs::remove_file(&p);
        }
    }

    out.say(
        format!(
            "raidkit demo: RAID {level} over {n} image files of {} MiB in {}",
            image_bytes >> 20,
            args.dir.display()
        ),
        serde_json::json!({}),
    );
    let config = EngineConfig::default();
    let plan = CreatePlan {
        level,
        layout,
        chunk_sectors,
        raid_devices: n,
        metadata: SuperblockVersion::V1_2,
        image_bytes: Some(image_bytes),
        name: "demo".into(),
    };
    let t = Instant::now();
    let array = create_array(&paths, &plan, config)?;
    let st = array.status();
    out.say(format!(
        "1. created: md v1.2 superblocks on {} members, layout {}, chunk {} KiB, {} MiB usable, data at sector {} of each member ({:.0} ms)",
        n,
        st.layout,
        st.chunk_sectors / 2,
        st.array_bytes >> 20,
        st.members.first().map(|m| m.data_offset_sectors).unwrap_or(0),
        t.elapsed().as_secs_f64() * 1e3
    ), serde_json::json!({}));
    out.say(
        format!(
            "   array UUID {} (check it with: mdadm --examine {})",
            st.uuid,
            paths[0].display()
        ),
        serde_json::json!({}),
    );

    let blocks = array.size_bytes() / BLOCK as u64;
    if blocks < 4 {
        return Err(CliError::usage(
            "members too small for the demo: give --size of at least a few MiB",
        ));
    }
    let w = write_all(&array, args.seed, 0, blocks)?;
    out.say(format!(
        "2. wrote {} MiB of pseudo-random data in 1 MiB requests: {:.0} MB/s (checksum {:016x})",
        w.bytes >> 20,
        mbps(w.bytes, w.secs),
        w.sum
    ), serde_json::json!({ "step": "write", "bytes": w.bytes, "mb_per_s": mbps(w.bytes, w.secs), "checksum": format!("{:016x}", w.sum) }));
    let r = verify_all(&array, args.seed, 0, blocks)?;
    check(&r, w.sum, "read back")?;
    out.say(
        format!(
            "3. read it back and compared every byte: {:.0} MB/s, all {} MiB match",
            mbps(r.bytes, r.secs),
            r.bytes >> 20
        ),
        serde_json::json!({ "step": "read", "bytes": r.bytes, "mb_per_s": mbps(r.bytes, r.secs) }),
    );
    array.stop().map_err(engine_error)?;
    out.say(
        format!(
            "4. stopped cleanly (superblocks marked clean, events {})",
            array.status().events
        ),
        serde_json::json!({}),
    );
    drop(array);

    let (array, report) = Array::assemble(
        open_rw(&paths)?,
        AssembleOptions {
            config,
            ..Default::default()
        },
    )
    .map_err(engine_error)?;
    let r = verify_all(&array, args.seed, 0, blocks)?;
    check(&r, w.sum, "after reassembly")?;
    out.say(format!(
        "5. reassembled from the files ({}), data verified: {:.0} MB/s",
        if report.was_dirty {
            "was dirty"
        } else {
            "was clean"
        },
        mbps(r.bytes, r.secs)
    ), serde_json::json!({ "step": "reassembled-read", "bytes": r.bytes, "mb_per_s": mbps(r.bytes, r.secs) }));

    if can_lose == 0 {
        array.stop().map_err(engine_error)?;
        out.say(
            "RAID 0 has no redundancy, so the demo skips failures: losing any member loses the array."
                .to_string(),
            serde_json::json!({}),
        );
        short_matrix(&args, &mut out)?;
        return out.finish();
    }
    // Fail members spread over the array: the second and the last.
    let mut victims = vec![1.min(n - 1)];
    if can_lose >= 2 {
        victims.push(n - 1);
    }
    for &v in &victims {
        array.fail_member(v).map_err(engine_error)?;
    }
    let st = array.status();
    out.say(
        format!(
        "6. failed {} member(s): {} — the other superblocks now record them as faulty (events {})",
        victims.len(),
        victims
            .iter()
            .map(|&v| paths[v].display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        st.events
    ),
        serde_json::json!({}),
    );
    let r = verify_all(&array, args.seed, 0, blocks)?;
    check(&r, w.sum, "degraded read")?;
    out.say(format!("7. degraded read of all {} MiB, rebuilt from parity/copies on the fly: {:.0} MB/s, every byte matches", r.bytes >> 20, mbps(r.bytes, r.secs)), serde_json::json!({ "step": "degraded-read", "bytes": r.bytes, "mb_per_s": mbps(r.bytes, r.secs) }));
    let seed2 = args.seed.wrapping_add(1000);
    let half = blocks / 2;
    let w2 = write_all(&array, seed2, half, blocks - half)?;
    let r2 = verify_all(&array, seed2, half, blocks - half)?;
    check(&r2, w2.sum, "degraded write")?;
    out.say(format!(
        "8. degraded write of {} MiB (new data over the second half): {:.0} MB/s, read back and verified",
        w2.bytes >> 20,
        mbps(w2.bytes, w2.secs)
    ), serde_json::json!({ "step": "degraded-write", "bytes": w2.bytes, "mb_per_s": mbps(w2.bytes, w2.secs) }));
    array.stop().map_err(engine_error)?;
    drop(array);

    let (array, report) = Array::assemble(
        open_rw(&paths)?,
        AssembleOptions {
            config,
            ..Default::default()
        },
    )
    .map_err(engine_error)?;
    let first = verify_all(&array, args.seed, 0, half)?;
    let second = verify_all(&array, seed2, half, blocks - half)?;
    let mut expect_first = 0xcbf2_9ce4_8422_2325u64;
    let mut buf = vec![0u8; BLOCK];
    for i in 0..half {
        fill_block(args.seed, i, &mut buf);
        checksum(&mut expect_first, &buf);
    }
    check(&first, expect_first, "degraded reassembly (first half)")?;
    check(&second, w2.sum, "degraded reassembly (second half)")?;
    out.say(format!(
        "9. reassembled from all {} files: {} left out as faulty, array runs degraded, all data verified",
        n,
        report.excluded.len()
    ), serde_json::json!({}));

    // Replace the failed members with new images and rebuild them, both in one pass.
    let mut new_paths = Vec::new();
    for (k, _) in victims.iter().enumerate() {
        let p = args.dir.join(format!("demo-{}.img", n + k));
        let disk = FileDisk::create(&p, image_bytes).map_err(disk_error)?;
        array
            .add_spare(Box::new(disk), random_uuid()?)
            .map_err(engine_error)?;
        new_paths.push(p);
    }
    // Nothing else uses the array while the demo waits for the rebuild and the check.
    let quiet = super::tasks::SpeedArgs {
        quiet: args.json,
        full_rate: true,
        ..Default::default()
    };
    let reports = super::tasks::run_with_progress(&array, None, &quiet)?;
    let rebuild = reports
        .iter()
        .find(|r| r.progress.kind == raidkit_engine::TaskKind::Rebuild)
        .ok_or_else(|| CliError::failure("the new members did not start a rebuild"))?;
    if rebuild.outcome != raidkit_engine::TaskOutcome::Completed {
        return Err(CliError::failure(super::tasks::describe(rebuild)));
    }
    let rebuilt = array.status();
    let secs = rebuild.progress.elapsed_s;
    let per_member = rebuild.progress.bytes_per_s / 1e6;
    let r1 = verify_all(&array, args.seed, 0, half)?;
    let r2 = verify_all(&array, seed2, half, blocks - half)?;
    check(&r1, expect_first, "after rebuild (first half)")?;
    check(&r2, w2.sum, "after rebuild (second half)")?;
    out.say(format!(
        "10. added {} new member(s) and rebuilt them in one pass at full rate in {:.2} s ({:.0} MB/s per member, slots {:?}); array {}; data verified",
        new_paths.len(),
        secs,
        per_member,
        rebuild.progress.slots,
        if rebuilt.degraded { "still degraded" } else { "whole again" }
    ), serde_json::json!({ "step": "rebuild", "seconds": secs, "members": new_paths.len(), "mb_per_s_per_member": per_member }));
    // md's check: parity and copies must agree with the data everywhere.
    if level != 0 {
        let stop = std::sync::atomic::AtomicBool::new(false);
        let r = array
            .run_task(raidkit_engine::TaskKind::Check, &mut |_| {}, &stop)
            .map_err(engine_error)?;
        if r.outcome != raidkit_engine::TaskOutcome::Completed || r.progress.mismatch_sectors > 0 {
            return Err(CliError::new(
                ExitCode::Mismatch,
                format!("check after rebuild: {}", super::tasks::describe(&r)),
            ));
        }
        out.say(
            format!(
                "11. check (md's mismatch_cnt): read every stripe at {:.0} MB/s per member, {} mismatched sectors",
                r.progress.bytes_per_s / 1e6,
                r.progress.mismatch_sectors
            ),
            serde_json::json!({ "step": "check", "mismatch_sectors": r.progress.mismatch_sectors, "mb_per_s_per_member": r.progress.bytes_per_s / 1e6 }),
        );
    }
    array.stop().map_err(engine_error)?;
    short_matrix(&args, &mut out)?;
    out.say(format!("Done. Members are in {}; inspect them with `raidkit examine {}/demo-*.img` or mdadm --examine.", args.dir.display(), args.dir.display()), serde_json::json!({}));
    out.finish()
}
