//! The scenario matrix (tests/md-oracle/matrix): which arrays md creates in the VM.
//!
//! One row per array, whitespace separated, `#` starts a comment:
//!
//! ```text
//! # set  name           level  layout            chunk  members
//! fast   r5-ls-4x64k    5      left-symmetric    64K    4x8M
//! full   r0-unequal     0      original          32K    8M,6M,4M
//! ```
//!
//! `set` is `fast` (run by default and by `--full`) or `full` (only `--full`). `layout` and
//! `chunk` are mdadm's spellings or `-` for md's default / not applicable (raid1). `members`
//! is `NxSIZE` or a comma list of sizes; sizes take K or M suffixes. Names must be unique,
//! because records, member images and report lines are keyed by them.

use std::collections::BTreeSet;
use std::fmt;

/// One array of the matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatrixRow {
    pub fast: bool,
    pub name: String,
    /// md level number (0, 1, 4, 5, 6, 10).
    pub level: u32,
    /// mdadm's --layout argument, if any.
    pub layout: Option<String>,
    /// mdadm's --chunk in KiB, if any.
    pub chunk_kib: Option<u64>,
    /// Member image sizes, in member order.
    pub member_bytes: Vec<u64>,
}

/// A row that cannot be used, with its 1-based line number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatrixError {
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for MatrixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "matrix line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for MatrixError {}

fn parse_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1u64 << 20),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

fn parse_members(s: &str) -> Option<Vec<u64>> {
    if let Some((count, size)) = s.split_once('x') {
        let count: usize = count.parse().ok()?;
        let size = parse_size(size)?;
        return Some(vec![size; count]);
    }
    s.split(',').map(parse_size).collect()
}

/// Parse the matrix text.
pub fn parse_matrix(text: &str) -> Result<Vec<MatrixRow>, MatrixError> {
    let mut rows = Vec::new();
    let mut names = BTreeSet::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |reason: String| MatrixError {
            line: i + 1,
            reason,
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        let [set, name, level, layout, chunk, members] = f.as_slice() else {
            return Err(err(format!("expected 6 fields, found {}", f.len())));
        };
        let fast = match *set {
            "fast" => true,
            "full" => false,
            other => return Err(err(format!("set must be fast or full, not {other}"))),
        };
        let level: u32 = match level.trim_start_matches("raid").parse() {
            Ok(l @ (0 | 1 | 4 | 5 | 6 | 10)) => l,
            _ => return Err(err(format!("unsupported level {level}"))),
        };
        let chunk_kib = match *chunk {
            "-" => None,
            c => match parse_size(c) {
                Some(b) if b >= 4096 && b % 1024 == 0 => Some(b / 1024),
                _ => return Err(err(format!("bad chunk {c}"))),
            },
        };
        let Some(member_bytes) = parse_members(members) else {
            return Err(err(format!("bad members {members}")));
        };
        if member_bytes.len() < 2 || member_bytes.iter().any(|&b| b % 4096 != 0 || b == 0) {
            return Err(err(format!(
                "members {members}: need 2 or more sizes in 4K units"
            )));
        }
        if name.len() > 40 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(err(format!("name {name}: use up to 40 of [A-Za-z0-9-]")));
        }
        if !names.insert(name.to_string()) {
            return Err(err(format!("duplicate name {name}")));
        }
        rows.push(MatrixRow {
            fast,
            name: name.to_string(),
            level,
            layout: (*layout != "-").then(|| layout.to_string()),
            chunk_kib,
            member_bytes,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rows() {
        let rows = parse_matrix(
            "# comment\nfast r5 5 left-symmetric 64K 4x8M\n\nfull r0 0 - 4K 8M,6M # tail\n",
        )
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert!(rows[0].fast);
        assert_eq!(rows[0].layout.as_deref(), Some("left-symmetric"));
        assert_eq!(rows[0].chunk_kib, Some(64));
        assert_eq!(rows[0].member_bytes, vec![8 << 20; 4]);
        assert!(!rows[1].fast);
        assert_eq!(rows[1].layout, None);
        assert_eq!(rows[1].member_bytes, vec![8 << 20, 6 << 20]);
    }

    #[test]
    fn rejects_bad_rows() {
        for bad in [
            "fast r5 5 ls 64K",
            "slow r5 5 ls 64K 4x8M",
            "fast r5 7 ls 64K 4x8M",
            "fast r5 5 ls 3K 4x8M",
            "fast r5 5 ls 64K 1x8M",
            "fast r_5 5 ls 64K 4x8M",
            "fast r5 5 ls 64K 4x8M\nfast r5 5 ls 64K 4x8M",
        ] {
            assert!(parse_matrix(bad).is_err(), "accepted: {bad}");
        }
    }
}
