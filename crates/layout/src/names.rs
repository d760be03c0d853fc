//! Levels and layout names: md's numbers parsed once into enums, with mdadm's names.
//!
//! Every enum converts both ways: `from_md(number)` / `md_layout()` for the superblock, and
//! `FromStr` / `Display` with the spellings mdadm accepts on its command line and prints in
//! `--detail`. A number that md would refuse is a `GeometryError`, never a panic.

use crate::GeometryError;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// A RAID level as a user names it. md's own levels plus the three raidkit expresses with md's
/// means: RAID 1E (raid10 near-2 on any number of devices) and RAID 50/60 (raid0 over raid5/6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Raid0,
    Raid1,
    Raid4,
    Raid5,
    Raid6,
    Raid10,
    Raid1E,
    Raid50,
    Raid60,
}

impl Level {
    /// The md level number stored in the superblock (raid1e is written as raid10; the outer
    /// array of raid50/60 is raid0, so those return 0).
    pub fn md_level(self) -> i32 {
        match self {
            Level::Raid0 | Level::Raid50 | Level::Raid60 => 0,
            Level::Raid1 => 1,
            Level::Raid4 => 4,
            Level::Raid5 => 5,
            Level::Raid6 => 6,
            Level::Raid10 | Level::Raid1E => 10,
        }
    }

    /// The md level of an array that is exactly this level, or `None` for the levels raidkit
    /// builds from md parts (RAID 1E is raid10 with layout n2; RAID 50/60 are a raid0 over
    /// several raid5/6 arrays), which have no level number of their own.
    pub fn md_native_level(self) -> Option<i32> {
        match self {
            Level::Raid1E | Level::Raid50 | Level::Raid60 => None,
            other => Some(other.md_level()),
        }
    }

    /// The level of an md superblock's `level` field.
    pub fn from_md(level: i32) -> Result<Level, GeometryError> {
        match level {
            0 => Ok(Level::Raid0),
            1 => Ok(Level::Raid1),
            4 => Ok(Level::Raid4),
            5 => Ok(Level::Raid5),
            6 => Ok(Level::Raid6),
            10 => Ok(Level::Raid10),
            _ => Err(GeometryError::UnsupportedLevel { level }),
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Raid0 => "raid0",
            Level::Raid1 => "raid1",
            Level::Raid4 => "raid4",
            Level::Raid5 => "raid5",
            Level::Raid6 => "raid6",
            Level::Raid10 => "raid10",
            Level::Raid1E => "raid1e",
            Level::Raid50 => "raid50",
            Level::Raid60 => "raid60",
        })
    }
}

impl FromStr for Level {
    type Err = GeometryError;
    fn from_str(s: &str) -> Result<Level, GeometryError> {
        let lower = s.trim().to_ascii_lowercase();
        let bare = lower.strip_prefix("raid").unwrap_or(&lower);
        match bare {
            "0" | "stripe" => Ok(Level::Raid0),
            "1" | "mirror" => Ok(Level::Raid1),
            "4" => Ok(Level::Raid4),
            "5" => Ok(Level::Raid5),
            "6" => Ok(Level::Raid6),
            "10" => Ok(Level::Raid10),
            "1e" => Ok(Level::Raid1E),
            "50" => Ok(Level::Raid50),
            "60" => Ok(Level::Raid60),
            _ => Err(GeometryError::UnknownLevel {
                name: s.to_string(),
            }),
        }
    }
}

/// md's raid5 parity algorithms (`ALGORITHM_*` in drivers/md/raid5.h), numbered as in the
/// superblock's `layout` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Raid5Algorithm {
    LeftAsymmetric = 0,
    RightAsymmetric = 1,
    /// md's and mdadm's default.
    LeftSymmetric = 2,
    RightSymmetric = 3,
    /// ALGORITHM_PARITY_0: parity on the first device, like RAID 4 mirrored.
    ParityFirst = 4,
    /// ALGORITHM_PARITY_N: parity on the last device (RAID 4's placement).
    ParityLast = 5,
}

impl Raid5Algorithm {
    pub const ALL: [Raid5Algorithm; 6] = [
        Raid5Algorithm::LeftAsymmetric,
        Raid5Algorithm::RightAsymmetric,
        Raid5Algorithm::LeftSymmetric,
        Raid5Algorithm::RightSymmetric,
        Raid5Algorithm::ParityFirst,
        Raid5Algorithm::ParityLast,
    ];

    pub fn from_md(layout: u32) -> Result<Raid5Algorithm, GeometryError> {
        Raid5Algorithm::ALL
            .into_iter()
            .find(|a| a.md_layout() == layout)
            .ok_or(GeometryError::InvalidRaid5Layout { layout })
    }

    pub fn md_layout(self) -> u32 {
        self as u32
    }

    /// mdadm's name.
    pub fn name(self) -> &'static str {
        match self {
            Raid5Algorithm::LeftAsymmetric => "left-asymmetric",
            Raid5Algorithm::RightAsymmetric => "right-asymmetric",
            Raid5Algorithm::LeftSymmetric => "left-symmetric",
            Raid5Algorithm::RightSymmetric => "right-symmetric",
            Raid5Algorithm::ParityFirst => "parity-first",
            Raid5Algorithm::ParityLast => "parity-last",
        }
    }
}

impl fmt::Display for Raid5Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Raid5Algorithm {
    type Err = GeometryError;
    /// mdadm's names and short forms (`la`, `ra`, `ls`, `rs`, `default`, and the DDF aliases
    /// `ddf-zero-restart`, `ddf-N-restart`, `ddf-N-continue`), or md's number.
    fn from_str(s: &str) -> Result<Raid5Algorithm, GeometryError> {
        let lower = s.trim().to_ascii_lowercase();
        if let Ok(n) = lower.parse::<u32>() {
            return Raid5Algorithm::from_md(n);
        }
        // mdadm's r5layout also names the DDF raid5 layouts after the md algorithm they equal.
        let alias = match lower.as_str() {
            "la" | "ddf-n-restart" => Some(Raid5Algorithm::LeftAsymmetric),
            "ra" | "ddf-zero-restart" => Some(Raid5Algorithm::RightAsymmetric),
            "ls" | "default" | "ddf-n-continue" => Some(Raid5Algorithm::LeftSymmetric),
            "rs" => Some(Raid5Algorithm::RightSymmetric),
            _ => None,
        };
        alias
            .or_else(|| Raid5Algorithm::ALL.into_iter().find(|a| a.name() == lower))
            .ok_or(GeometryError::UnknownLayout {
                level: "raid5".into(),
                name: s.to_string(),
            })
    }
}

/// md's raid6 algorithms: the six raid5 rotations with Q after P, the three DDF layouts, and the
/// five "raid5 plus Q on the last device" layouts used while converting raid5 to raid6.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Raid6Algorithm {
    LeftAsymmetric = 0,
    RightAsymmetric = 1,
    /// md's and mdadm's default.
    LeftSymmetric = 2,
    RightSymmetric = 3,
    ParityFirst = 4,
    ParityLast = 5,
    /// ALGORITHM_ROTATING_ZERO_RESTART (DDF PRL=6 RLQ=1).
    #[serde(rename = "ddf-zero-restart")]
    RotatingZeroRestart = 8,
    /// ALGORITHM_ROTATING_N_RESTART (DDF PRL=6 RLQ=2).
    #[serde(rename = "ddf-N-restart")]
    RotatingNRestart = 9,
    /// ALGORITHM_ROTATING_N_CONTINUE (DDF PRL=6 RLQ=3).
    #[serde(rename = "ddf-N-continue")]
    RotatingNContinue = 10,
    #[serde(rename = "left-asymmetric-6")]
    LeftAsymmetric6 = 16,
    #[serde(rename = "right-asymmetric-6")]
    RightAsymmetric6 = 17,
    #[serde(rename = "left-symmetric-6")]
    LeftSymmetric6 = 18,
    #[serde(rename = "right-symmetric-6")]
    RightSymmetric6 = 19,
    #[serde(rename = "parity-first-6")]
    ParityFirst6 = 20,
}

impl Raid6Algorithm {
    pub const ALL: [Raid6Algorithm; 14] = [
        Raid6Algorithm::LeftAsymmetric,
        Raid6Algorithm::RightAsymmetric,
        Raid6Algorithm::LeftSymmetric,
        Raid6Algorithm::RightSymmetric,
        Raid6Algorithm::ParityFirst,
        Raid6Algorithm::ParityLast,
        Raid6Algorithm::RotatingZeroRestart,
        Raid6Algorithm::RotatingNRestart,
        Raid6Algorithm::RotatingNContinue,
        Raid6Algorithm::LeftAsymmetric6,
        Raid6Algorithm::RightAsymmetric6,
        Raid6Algorithm::LeftSymmetric6,
        Raid6Algorithm::RightSymmetric6,
        Raid6Algorithm::ParityFirst6,
    ];

    pub fn from_md(layout: u32) -> Result<Raid6Algorithm, GeometryError> {
        Raid6Algorithm::ALL
            .into_iter()
            .find(|a| a.md_layout() == layout)
            .ok_or(GeometryError::InvalidRaid6Layout { layout })
    }

    pub fn md_layout(self) -> u32 {
        self as u32
    }

    /// The DDF layouts (8, 9, 10) order the Q syndrome by physical device, with zero blocks in
    /// the P and Q positions (md's `sh->ddf_layout`).
    pub fn is_ddf(self) -> bool {
        matches!(
            self,
            Raid6Algorithm::RotatingZeroRestart
                | Raid6Algorithm::RotatingNRestart
                | Raid6Algorithm::RotatingNContinue
        )
    }

    /// mdadm's name.
    pub fn name(self) -> &'static str {
        match self {
            Raid6Algorithm::LeftAsymmetric => "left-asymmetric",
            Raid6Algorithm::RightAsymmetric => "right-asymmetric",
            Raid6Algorithm::LeftSymmetric => "left-symmetric",
            Raid6Algorithm::RightSymmetric => "right-symmetric",
            Raid6Algorithm::ParityFirst => "parity-first",
            Raid6Algorithm::ParityLast => "parity-last",
            Raid6Algorithm::RotatingZeroRestart => "ddf-zero-restart",
            Raid6Algorithm::RotatingNRestart => "ddf-N-restart",
            Raid6Algorithm::RotatingNContinue => "ddf-N-continue",
            Raid6Algorithm::LeftAsymmetric6 => "left-asymmetric-6",
            Raid6Algorithm::RightAsymmetric6 => "right-asymmetric-6",
            Raid6Algorithm::LeftSymmetric6 => "left-symmetric-6",
            Raid6Algorithm::RightSymmetric6 => "right-symmetric-6",
            Raid6Algorithm::ParityFirst6 => "parity-first-6",
        }
    }
}

impl fmt::Display for Raid6Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Raid6Algorithm {
    type Err = GeometryError;
    /// mdadm's names (case-insensitive) and short forms, or md's number.
    fn from_str(s: &str) -> Result<Raid6Algorithm, GeometryError> {
        let lower = s.trim().to_ascii_lowercase();
        if let Ok(n) = lower.parse::<u32>() {
            return Raid6Algorithm::from_md(n);
        }
        let alias = match lower.as_str() {
            "la" => Some(Raid6Algorithm::LeftAsymmetric),
            "ra" => Some(Raid6Algorithm::RightAsymmetric),
            "ls" | "default" => Some(Raid6Algorithm::LeftSymmetric),
            "rs" => Some(Raid6Algorithm::RightSymmetric),
            _ => None,
        };
        alias
            .or_else(|| {
                Raid6Algorithm::ALL
                    .into_iter()
                    .find(|a| a.name().to_ascii_lowercase() == lower)
            })
            .ok_or(GeometryError::UnknownLayout {
                level: "raid6".into(),
                name: s.to_string(),
            })
    }
}

/// md's raid10 layout word, unpacked (raid10.c `setup_geo`): `near = layout & 0xff`,
/// `far = (layout >> 8) & 0xff`, `offset = layout & 0x10000`, `far_set_mode = layout >> 17`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Raid10Layout {
    pub near: u8,
    pub far: u8,
    /// The far copies are one chunk below their original, rotated ("offset" layout).
    pub offset: bool,
    /// 0: one far set spanning all devices; 1: md's abandoned "improved" sets of raid_disks/far;
    /// 2: sets of near×far devices.
    pub far_set_mode: u8,
}

impl Raid10Layout {
    /// `near` copies side by side (mdadm `n<copies>`).
    pub fn near(copies: u8) -> Raid10Layout {
        Raid10Layout {
            near: copies,
            far: 1,
            offset: false,
            far_set_mode: 0,
        }
    }

    /// `far` copies in separate areas of every device (mdadm `f<copies>`).
    pub fn far(copies: u8) -> Raid10Layout {
        Raid10Layout {
            near: 1,
            far: copies,
            offset: false,
            far_set_mode: 0,
        }
    }

    /// Rotated copies in the next chunk rows (mdadm `o<copies>`).
    pub fn offset(copies: u8) -> Raid10Layout {
        Raid10Layout {
            near: 1,
            far: copies,
            offset: true,
            far_set_mode: 0,
        }
    }

    /// Unpack md's layout word, refusing what `setup_geo` refuses (layout bits beyond 18,
    /// far-set mode 3, zero near or far copies).
    pub fn from_md(layout: u32) -> Result<Raid10Layout, GeometryError> {
        if layout >> 19 != 0 {
            return Err(GeometryError::InvalidRaid10Layout {
                layout,
                reason: "bits above 18 are set",
            });
        }
        let far_set_mode = (layout >> 17) as u8;
        if far_set_mode > 2 {
            return Err(GeometryError::InvalidRaid10Layout {
                layout,
                reason: "far-set mode 3 does not exist",
            });
        }
        let near = (layout & 0xff) as u8;
        let far = ((layout >> 8) & 0xff) as u8;
        if near == 0 || far == 0 {
            return Err(GeometryError::InvalidRaid10Layout {
                layout,
                reason: "near and far copies must both be at least 1",
            });
        }
        Ok(Raid10Layout {
            near,
            far,
            offset: layout & 0x10000 != 0,
            far_set_mode,
        })
    }

    pub fn md_layout(self) -> u32 {
        u32::from(self.near)
            | (u32::from(self.far) << 8)
            | (u32::from(self.offset) << 16)
            | (u32::from(self.far_set_mode) << 17)
    }

    /// Total number of copies of every chunk.
    pub fn copies(self) -> u32 {
        u32::from(self.near) * u32::from(self.far)
    }
}

impl fmt::Display for Raid10Layout {
    /// mdadm's form: `n2`, `f2`, `o3`; combinations as `n2f2` / `n2o2`; a far-set mode as a
    /// `s1`/`s2` suffix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let far_letter = if self.offset { 'o' } else { 'f' };
        match (self.near, self.far) {
            (n, 1) if !self.offset => write!(f, "n{n}")?,
            (1, fc) => write!(f, "{far_letter}{fc}")?,
            (n, fc) => write!(f, "n{n}{far_letter}{fc}")?,
        }
        if self.far_set_mode != 0 {
            write!(f, "s{}", self.far_set_mode)?;
        }
        Ok(())
    }
}

impl FromStr for Raid10Layout {
    type Err = GeometryError;
    /// `n2`, `f2`, `o2` (mdadm), combinations `n2f2`, `n2o2`, an optional `s1`/`s2` far-set
    /// suffix, or md's layout number (decimal or `0x` hex).
    fn from_str(s: &str) -> Result<Raid10Layout, GeometryError> {
        let unknown = || GeometryError::UnknownLayout {
            level: "raid10".into(),
            name: s.to_string(),
        };
        let lower = s.trim().to_ascii_lowercase();
        if let Some(hex) = lower.strip_prefix("0x") {
            let n = u32::from_str_radix(hex, 16).map_err(|_| unknown())?;
            return Raid10Layout::from_md(n);
        }
        if let Ok(n) = lower.parse::<u32>() {
            return Raid10Layout::from_md(n);
        }
        let mut near: Option<u8> = None;
        let mut far: Option<(u8, bool)> = None;
        let mut set_mode: Option<u8> = None;
        let mut rest = lower.as_str();
        while let Some(letter) = rest.chars().next() {
            let digits_end = rest[1..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(rest.len(), |i| i + 1);
            let value: u8 = rest[1..digits_end].parse().map_err(|_| unknown())?;
            match letter {
                'n' if near.is_none() => near = Some(value),
                'f' if far.is_none() => far = Some((value, false)),
                'o' if far.is_none() => far = Some((value, true)),
                's' if set_mode.is_none() && value <= 2 => set_mode = Some(value),
                _ => return Err(unknown()),
            }
            rest = &rest[digits_end..];
        }
        if near.is_none() && far.is_none() {
            return Err(unknown());
        }
        let (far_copies, offset) = far.unwrap_or((1, false));
        let layout = Raid10Layout {
            near: near.unwrap_or(1),
            far: far_copies,
            offset,
            far_set_mode: set_mode.unwrap_or(0),
        };
        // Round-trip through md's rules so "n0" is refused like md refuses it.
        Raid10Layout::from_md(layout.md_layout())
    }
}

/// md's raid0 layouts (`RAID0_ORIG_LAYOUT`, `RAID0_ALT_MULTIZONE_LAYOUT`). They differ only when
/// members have different sizes (more than one zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Raid0Layout {
    /// No layout recorded (superblocks without the RAID0_LAYOUT feature bit); fine for one zone.
    Unset,
    /// Layout 1: the device in a zone is chosen from the absolute array sector (kernels < 3.14).
    Original,
    /// Layout 2: the device is chosen from the zone-relative sector (kernels 3.14 to 5.3).
    AltMultizone,
}

impl Raid0Layout {
    pub fn from_md(layout: u32) -> Raid0Layout {
        match layout {
            1 => Raid0Layout::Original,
            2 => Raid0Layout::AltMultizone,
            _ => Raid0Layout::Unset,
        }
    }

    /// The number written to the superblock; `Unset` is written as 0.
    pub fn md_layout(self) -> u32 {
        match self {
            Raid0Layout::Unset => 0,
            Raid0Layout::Original => 1,
            Raid0Layout::AltMultizone => 2,
        }
    }
}

impl fmt::Display for Raid0Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Raid0Layout::Unset => "unset",
            Raid0Layout::Original => "original",
            Raid0Layout::AltMultizone => "alternate",
        })
    }
}

impl FromStr for Raid0Layout {
    type Err = GeometryError;
    /// mdadm's `original`/`alternate`/`dangerous` (also `o`, `a`, `alt-multizone`, `unset`), or
    /// md's number.
    fn from_str(s: &str) -> Result<Raid0Layout, GeometryError> {
        let lower = s.trim().to_ascii_lowercase();
        match lower.as_str() {
            "original" | "o" | "orig" | "1" => Ok(Raid0Layout::Original),
            "alternate" | "a" | "alt" | "alt-multizone" | "2" => Ok(Raid0Layout::AltMultizone),
            "unset" | "dangerous" | "0" => Ok(Raid0Layout::Unset),
            _ => Err(GeometryError::UnknownLayout {
                level: "raid0".into(),
                name: s.to_string(),
            }),
        }
    }
}
