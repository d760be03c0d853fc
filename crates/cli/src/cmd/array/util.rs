//! Flag parsing shared by the array subcommands: levels, layouts and sizes become plain numbers
//! before anything is opened.

use crate::CliError;
use raidkit_layout::{Raid0Layout, Raid10Layout, Raid5Algorithm, Raid6Algorithm};

/// "5", "raid5", "mirror" -> md level number. RAID 1E, 50 and 60 are not array levels of
/// their own in md and are refused here.
pub fn parse_level(text: &str) -> Result<i32, CliError> {
    let level: raidkit_layout::Level = text
        .parse()
        .map_err(|e| CliError::usage(format!("--level {text}: {e}")))?;
    use raidkit_layout::Level as L;
    match level {
        L::Raid0 | L::Raid1 | L::Raid4 | L::Raid5 | L::Raid6 | L::Raid10 => Ok(level.md_level()),
        _ => Err(CliError::usage(format!(
            "--level {text}: not an md array level (use 0, 1, 4, 5, 6 or 10)"
        ))),
    }
}

/// A layout name as mdadm spells it, or md's number, for `level`.
pub fn parse_layout(level: i32, text: &str) -> Result<u32, CliError> {
    let bad = |e: String| CliError::usage(format!("--layout {text} for RAID {level}: {e}"));
    let number = text
        .strip_prefix("0x")
        .map(|h| u32::from_str_radix(h, 16).ok())
        .unwrap_or_else(|| text.parse::<u32>().ok());
    match level {
        5 => match number {
            Some(n) => Raid5Algorithm::from_md(n).map(|a| a.md_layout()),
            None => text.parse::<Raid5Algorithm>().map(|a| a.md_layout()),
        }
        .map_err(|e| bad(e.to_string())),
        6 => match number {
            Some(n) => Raid6Algorithm::from_md(n).map(|a| a.md_layout()),
            None => text.parse::<Raid6Algorithm>().map(|a| a.md_layout()),
        }
        .map_err(|e| bad(e.to_string())),
        10 => text
            .parse::<Raid10Layout>()
            .map(|l| l.md_layout())
            .map_err(|e| bad(e.to_string())),
        0 => match number {
            Some(n) => Ok(Raid0Layout::from_md(n).md_layout()),
            None => text
                .parse::<Raid0Layout>()
                .map(|l| l.md_layout())
                .map_err(|e| bad(e.to_string())),
        },
        _ => match number {
            Some(0) => Ok(0),
            _ => Err(bad("this level has no layouts".into())),
        },
    }
}

/// A size with an optional K, M, G or T suffix (powers of 1024); a bare number is multiplied
/// by `bare_unit` (1 for byte offsets, 1024 for mdadm-style KiB sizes).
pub fn parse_size_bytes(text: &str, bare_unit: u64) -> Result<u64, CliError> {
    let t = text.trim();
    let bad = || {
        CliError::usage(format!(
            "invalid size '{text}' (examples: 4096, 64K, 64M, 1G)"
        ))
    };
    let (digits, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        Some('t' | 'T') => (&t[..t.len() - 1], 1 << 40),
        Some(c) if c.is_ascii_digit() => (t, bare_unit),
        _ => return Err(bad()),
    };
    let v: u64 = digits.parse().map_err(|_| bad())?;
    v.checked_mul(mult).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size_bytes("64M", 1024).unwrap(), 64 << 20);
        assert_eq!(parse_size_bytes("100", 1024).unwrap(), 102400);
        assert_eq!(parse_size_bytes("100", 1).unwrap(), 100);
        assert!(parse_size_bytes("x1", 1).is_err());
        assert!(parse_size_bytes("99999999999999999999G", 1).is_err());
    }

    #[test]
    fn levels_and_layouts() {
        assert_eq!(parse_level("raid6").unwrap(), 6);
        assert!(parse_level("50").is_err());
        assert_eq!(parse_layout(5, "left-symmetric").unwrap(), 2);
        assert_eq!(parse_layout(5, "ra").unwrap(), 1);
        assert_eq!(parse_layout(6, "left-symmetric-6").unwrap(), 18);
        assert_eq!(parse_layout(10, "f2").unwrap(), 0x201);
        assert_eq!(parse_layout(10, "o2").unwrap(), 0x10201);
        assert!(parse_layout(5, "bogus").is_err());
        assert!(parse_layout(1, "n2").is_err());
    }
}
