//! RAID levels as the model sees them: how many members hold data, how the members share a
//! request's work, and which failures lose data.

use serde::{Deserialize, Serialize};

/// How RAID 10 places its copies (md's near, offset and far layouts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    Near,
    Offset,
    Far,
}

/// A level and its layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "level", rename_all = "lowercase")]
pub enum Level {
    Raid0,
    /// Every member a full copy.
    Raid1,
    /// RAID 10 near 2 on any member count (md's layout on an odd count; a controller's 1E).
    Raid1E,
    Raid4,
    Raid5,
    Raid6,
    Raid10 {
        placement: Placement,
        copies: u32,
    },
    /// A RAID 0 over `spans` RAID 5 arrays of equal size.
    Raid50 {
        spans: u32,
    },
    /// A RAID 0 over `spans` RAID 6 arrays.
    Raid60 {
        spans: u32,
    },
}

impl Level {
    /// `0`, `1`, `1e`, `4`, `5`, `6`, `10` (near 2), `10n2`, `10o2`, `10f3`, `50`, `50x3`
    /// (three spans), `60`, `60x2`.
    pub fn parse(s: &str) -> Result<Level, String> {
        let t = s.trim().to_ascii_lowercase();
        let t = t.strip_prefix("raid").unwrap_or(&t).trim();
        let spans = |rest: &str| -> Result<u32, String> {
            if rest.is_empty() {
                return Ok(2);
            }
            rest.strip_prefix('x')
                .and_then(|n| n.parse().ok())
                .filter(|&n: &u32| n >= 2)
                .ok_or_else(|| format!("level {s:?}: spans are written 50x2, 60x3 (2 or more)"))
        };
        Ok(match t {
            "0" => Level::Raid0,
            "1" => Level::Raid1,
            "1e" => Level::Raid1E,
            "4" => Level::Raid4,
            "5" => Level::Raid5,
            "6" => Level::Raid6,
            "10" => Level::Raid10 {
                placement: Placement::Near,
                copies: 2,
            },
            _ if t.starts_with("50") => Level::Raid50 {
                spans: spans(&t[2..])?,
            },
            _ if t.starts_with("60") => Level::Raid60 {
                spans: spans(&t[2..])?,
            },
            _ if t.starts_with("10") && t.len() == 4 => {
                let placement = match &t[2..3] {
                    "n" => Placement::Near,
                    "o" => Placement::Offset,
                    "f" => Placement::Far,
                    _ => return Err(format!("level {s:?}: RAID 10 layouts are n, o and f")),
                };
                let copies = t[3..]
                    .parse()
                    .ok()
                    .filter(|c| (2..=4).contains(c))
                    .ok_or_else(|| format!("level {s:?}: 2 to 4 copies"))?;
                Level::Raid10 { placement, copies }
            }
            _ => {
                return Err(format!(
                    "level {s:?}: 0, 1, 1e, 4, 5, 6, 10, 10n2, 10o2, 10f2, 50, 50x3, 60, 60x2"
                ))
            }
        })
    }

    /// The name tables print: `RAID 5`, `RAID 10 f2`, `RAID 50 (2 spans)`.
    pub fn label(&self) -> String {
        match self {
            Level::Raid0 => "RAID 0".into(),
            Level::Raid1 => "RAID 1".into(),
            Level::Raid1E => "RAID 1E".into(),
            Level::Raid4 => "RAID 4".into(),
            Level::Raid5 => "RAID 5".into(),
            Level::Raid6 => "RAID 6".into(),
            Level::Raid10 { placement, copies } => {
                let p = match placement {
                    Placement::Near => 'n',
                    Placement::Offset => 'o',
                    Placement::Far => 'f',
                };
                format!("RAID 10 {p}{copies}")
            }
            Level::Raid50 { spans } => format!("RAID 50 ({spans} spans)"),
            Level::Raid60 { spans } => format!("RAID 60 ({spans} spans)"),
        }
    }

    /// Whether `n` members make this level, and why not.
    pub fn check(&self, n: usize) -> Result<(), String> {
        let min = match self {
            Level::Raid0 | Level::Raid1 => 2,
            Level::Raid1E | Level::Raid4 | Level::Raid5 => 3,
            Level::Raid6 => 4,
            Level::Raid10 { copies, .. } => *copies as usize,
            Level::Raid50 { spans } => 3 * *spans as usize,
            Level::Raid60 { spans } => 4 * *spans as usize,
        };
        if n < min {
            return Err(format!(
                "{} needs {min} or more members, not {n}",
                self.label()
            ));
        }
        if let Level::Raid50 { spans } | Level::Raid60 { spans } = self {
            if !n.is_multiple_of(*spans as usize) {
                return Err(format!(
                    "{}: {n} members do not split into {spans} equal spans",
                    self.label()
                ));
            }
        }
        Ok(())
    }

    /// Members' worth of user data in an array of `n`.
    pub fn data_members(&self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Level::Raid0 => n,
            Level::Raid1 => 1.0,
            Level::Raid1E => n / 2.0,
            Level::Raid4 | Level::Raid5 => n - 1.0,
            Level::Raid6 => n - 2.0,
            Level::Raid10 { copies, .. } => n / f64::from(*copies),
            Level::Raid50 { spans } => n - f64::from(*spans),
            Level::Raid60 { spans } => n - 2.0 * f64::from(*spans),
        }
    }

    /// Parity members per stripe group and the group's width: (1, n) for RAID 5, (2, n/2)
    /// for RAID 60 of two spans; None for levels without parity.
    pub fn parity_group(&self, n: usize) -> Option<(usize, usize)> {
        match self {
            Level::Raid4 | Level::Raid5 => Some((1, n)),
            Level::Raid6 => Some((2, n)),
            Level::Raid50 { spans } => Some((1, n / *spans as usize)),
            Level::Raid60 { spans } => Some((2, n / *spans as usize)),
            _ => None,
        }
    }

    /// Copies of each block (1 for striping and parity levels).
    pub fn copies(&self, n: usize) -> usize {
        match self {
            Level::Raid1 => n,
            Level::Raid1E => 2,
            Level::Raid10 { copies, .. } => *copies as usize,
            _ => 1,
        }
    }

    /// The failures any one stripe survives.
    pub fn tolerance(&self, n: usize) -> usize {
        match self {
            Level::Raid0 => 0,
            Level::Raid1 => n - 1,
            Level::Raid1E => 1,
            Level::Raid4 | Level::Raid5 | Level::Raid50 { .. } => 1,
            Level::Raid6 | Level::Raid60 { .. } => 2,
            Level::Raid10 { copies, .. } => *copies as usize - 1,
        }
    }

    /// After one member failed: the other members of whose failure (`tolerance` of them,
    /// within one repair) data is lost. RAID 10 near on a member count that the copies
    /// divide: the member's mirror partners; other RAID 10 and 1E layouts shift each copy one
    /// member on, so the neighbours on either side.
    pub fn exposed_members(&self, n: usize) -> usize {
        match self {
            Level::Raid0 => 0,
            Level::Raid1 | Level::Raid4 | Level::Raid5 | Level::Raid6 => n - 1,
            Level::Raid50 { spans } | Level::Raid60 { spans } => n / *spans as usize - 1,
            Level::Raid1E => 2.min(n - 1),
            Level::Raid10 { placement, copies } => {
                let c = *copies as usize;
                if *placement == Placement::Near && n.is_multiple_of(c) {
                    c - 1
                } else {
                    (2 * (c - 1)).min(n - 1)
                }
            }
        }
    }

    /// md's level number and layout for the engine (RAID 50/60 have none: md stacks them).
    pub fn md(&self) -> Option<(i32, Option<u32>)> {
        Some(match self {
            Level::Raid0 => (0, None),
            Level::Raid1 => (1, None),
            Level::Raid1E => (10, Some(0x102)),
            Level::Raid4 => (4, None),
            Level::Raid5 => (5, None),
            Level::Raid6 => (6, None),
            Level::Raid10 { placement, copies } => {
                let c = *copies;
                let layout = match placement {
                    Placement::Near => 0x100 | c,
                    Placement::Far => (c << 8) | 1,
                    Placement::Offset => 0x1_0000 | (c << 8) | 1,
                };
                (10, Some(layout))
            }
            Level::Raid50 { .. } | Level::Raid60 { .. } => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_say_their_shape() {
        assert_eq!(Level::parse("RAID5").unwrap(), Level::Raid5);
        assert_eq!(
            Level::parse("10f2").unwrap(),
            Level::Raid10 {
                placement: Placement::Far,
                copies: 2
            }
        );
        assert_eq!(Level::parse("50x3").unwrap(), Level::Raid50 { spans: 3 });
        assert!(Level::parse("7").is_err());
        assert!(Level::parse("50x1").is_err());
        assert!(Level::Raid6.check(3).is_err());
        assert!(Level::Raid50 { spans: 2 }.check(7).is_err());
        assert_eq!(Level::Raid6.data_members(6), 4.0);
        assert_eq!(Level::Raid50 { spans: 2 }.data_members(6), 4.0);
        assert_eq!(
            Level::Raid10 {
                placement: Placement::Near,
                copies: 2
            }
            .exposed_members(4),
            1
        );
        assert_eq!(
            Level::Raid10 {
                placement: Placement::Far,
                copies: 2
            }
            .exposed_members(4),
            2
        );
        assert_eq!(Level::Raid5.exposed_members(6), 5);
        assert_eq!(
            Level::parse("10o2").unwrap().md(),
            Some((10, Some(0x1_0201)))
        );
    }
}
