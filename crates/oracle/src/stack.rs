//! RAID 50/60 stacks (`spans=N` rows), both ways: md assembles the stack raidkit created
//! and wrote (each span from its members, then the RAID 0 on the spans) and reads it byte
//! for byte, and raidkit reads the stack md created and wrote (`Array::assemble_stack`).
//!
//! The checks: md and raidkit agree on the stack's size; md read the data raidkit wrote (or
//! raidkit reads what md wrote, which is also what the pattern writes md made leave); md's
//! `check` of every span finds 0 mismatches; md's top array is a RAID 0 over the spans;
//! raidkit reads the members md stopped and finds the same data (raidkit -> md); raidkit
//! reads md's stack with one member (RAID 5) or two (RAID 6) of every span left out and finds
//! the same data (md -> raidkit).

use crate::check::CheckOutcome;
use crate::pattern::expected_contents;
use crate::plan::{PlannedArray, Scenario};
use crate::prepare::readback_sha256;
use crate::records::ArrayReport;
use sha2::{Digest, Sha256};

fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Check one stack row against the VM's report.
pub fn check_stack(
    plan: &PlannedArray,
    spans: usize,
    report: Option<&ArrayReport>,
) -> CheckOutcome {
    let per_span = plan.members.len() / spans.max(1);
    let mut out = CheckOutcome {
        name: plan.name.clone(),
        description: format!(
            "raid{}0: raid0 over {spans} raid{} spans of {per_span} members{}",
            plan.level,
            plan.level,
            plan.chunk_kib
                .map_or(String::new(), |c| format!(", chunk {c}K"))
        ),
        ..CheckOutcome::default()
    };
    if let Some(e) = &plan.prepare_error {
        out.failures.push(format!("raidkit: {e}"));
        return out;
    }
    let Some(report) = report else {
        out.failures
            .push("vm: no records for this array (VM died or timed out?)".into());
        return out;
    };
    for e in &report.errors {
        out.failures.push(format!("vm: {e}"));
    }
    if !report.ended {
        out.failures
            .push("vm: report incomplete (no end record)".into());
    }
    let (Some(md_size), Some(md_sha)) = (report.size_bytes, report.sha256.as_deref()) else {
        out.failures
            .push("vm: no array size or sha256 reported".into());
        return out;
    };
    match report.sysfs.get("level").map(String::as_str) {
        Some("raid0") => {}
        other => out
            .failures
            .push(format!("geometry: md's top array is {other:?}, not raid0")),
    }
    if report.sysfs.get("raid_disks") != Some(&spans.to_string()) {
        out.failures.push(format!(
            "geometry: md's RAID 0 has {:?} members, not the {spans} spans",
            report.sysfs.get("raid_disks")
        ));
    }
    match report.mismatch_cnt {
        Some(0) => out.passed.push(format!("md-check ({spans} spans)")),
        other => out.failures.push(format!(
            "md-check: md's check of the spans found {other:?} mismatches"
        )),
    }
    match plan.kind {
        Scenario::Assemble => {
            let Some(expect) = &plan.expect else {
                out.failures.push("raidkit: no expectation recorded".into());
                return out;
            };
            if expect.readback_sha256 == expect.sha256 {
                out.passed.push("raidkit".into());
            } else {
                out.failures.push(format!(
                    "raidkit: reads back {} but wrote {}",
                    expect.readback_sha256, expect.sha256
                ));
            }
            if md_size == expect.array_bytes {
                out.passed.push("size".into());
            } else {
                out.failures.push(format!(
                    "size: md's stack is {md_size} bytes, raidkit's {}",
                    expect.array_bytes
                ));
            }
            if md_sha == expect.sha256 {
                out.passed.push("sha256".into());
            } else {
                out.failures.push(format!(
                    "sha256: md read {md_sha}, raidkit wrote {}",
                    expect.sha256
                ));
            }
            // After md checked and stopped it, raidkit reads the same.
            match readback_sha256(plan) {
                Ok(sha) if sha == expect.sha256 => out.passed.push("roundtrip".into()),
                Ok(sha) => out.failures.push(format!(
                    "roundtrip: raidkit reads {sha} after md, wrote {}",
                    expect.sha256
                )),
                Err(e) => out.failures.push(format!("roundtrip: {e}")),
            }
        }
        Scenario::Create => {
            let Ok(size) = usize::try_from(md_size) else {
                out.failures.push(format!("size: {md_size} bytes"));
                return out;
            };
            let want = sha256_hex(&expected_contents(size, &report.writes));
            if md_sha != want {
                out.failures.push(format!(
                    "sha256: md read {md_sha}, its pattern writes leave {want}"
                ));
            }
            match readback_sha256(plan) {
                Ok(sha) if sha == md_sha => {
                    out.passed.push("size".into());
                    out.passed.push("sha256".into());
                }
                Ok(sha) => out.failures.push(format!(
                    "sha256: raidkit reads {sha} from md's members, md read {md_sha}"
                )),
                Err(e) => out.failures.push(format!("raidkit: {e}")),
            }
            // Degraded: the first member (RAID 5) or two (RAID 6) of every span left out.
            let lost = if plan.level == 6 { 2 } else { 1 };
            let degraded = PlannedArray {
                members: plan
                    .members
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i % per_span >= lost)
                    .map(|(_, m)| m.clone())
                    .collect(),
                ..plan.clone()
            };
            match readback_sha256(&degraded) {
                Ok(sha) if sha == md_sha => out.passed.push(format!("degraded (-{lost} per span)")),
                Ok(sha) => out.failures.push(format!(
                    "degraded: raidkit reads {sha} from md's members without {lost} per span, md read {md_sha}"
                )),
                Err(e) => out.failures.push(format!("degraded: {e}")),
            }
        }
    }
    out
}
