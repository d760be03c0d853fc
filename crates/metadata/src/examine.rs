//! An `mdadm --examine`-style report of one member's superblock, as plain data.
//!
//! Owns: the mapping from a [`Superblock`] to the fields mdadm's `examine_super1` prints, with
//! mdadm's names for levels, layouts and states. The report is a plain `Serialize` struct so the
//! CLI can print it as text ([`ExamineReport::to_text`], mdadm's layout) or JSON; this crate
//! never prints. Times are rendered in UTC (mdadm uses local time).

use crate::bitmap::BitmapSuper;
use crate::superblock::{DevRole, Examined, FeatureMap, Level, Superblock, MD_SB_MAGIC};
use serde::Serialize;

/// mdadm's name for a raid5 layout (`r5layout` in maps.c).
pub fn raid5_layout_name(layout: u32) -> Option<&'static str> {
    Some(match layout {
        0 => "left-asymmetric",
        1 => "right-asymmetric",
        2 => "left-symmetric",
        3 => "right-symmetric",
        4 => "parity-first",
        5 => "parity-last",
        _ => return None,
    })
}

/// mdadm's name for a raid6 layout (`r6layout` in maps.c).
pub fn raid6_layout_name(layout: u32) -> Option<&'static str> {
    Some(match layout {
        8 => "ddf-zero-restart",
        9 => "ddf-N-restart",
        10 => "ddf-N-continue",
        16 => "left-asymmetric-6",
        17 => "right-asymmetric-6",
        18 => "left-symmetric-6",
        19 => "right-symmetric-6",
        20 => "parity-first-6",
        other => return raid5_layout_name(other),
    })
}

/// mdadm's `print_r10_layout` text (without the leading space), e.g. "near=2".
pub fn raid10_layout_name(layout: u32) -> String {
    let near = layout & 255;
    let far = (layout >> 8) & 255;
    let offset = layout & 0x10000 != 0;
    let mut s = String::new();
    let mut sep = "";
    if near != 1 {
        s.push_str(&format!("{sep} near={near}"));
        sep = ",";
    }
    if far != 1 {
        s.push_str(&format!(
            "{sep} {}={far}",
            if offset { "offset" } else { "far" }
        ));
    }
    if near * far == 1 {
        s.push_str("NO REDUNDANCY");
    }
    s.trim_start().to_string()
}

/// mdadm's name for a raid0 layout (`r0layout`).
pub fn raid0_layout_name(layout: u32) -> Option<&'static str> {
    Some(match layout {
        1 => "original",
        2 => "alternate",
        _ => return None,
    })
}

/// mdadm's reshape lines of `--examine`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExamineReshape {
    /// "Reshape pos'n" in KiB of the array.
    pub position_kib: u64,
    /// "Delta Devices": (delta, old count, new count), when the count changes.
    pub delta_devices: Option<(i32, i64, u32)>,
    /// "New Level", "New Layout", "New Chunksize" (KiB), where they change.
    pub new_level: Option<String>,
    pub new_layout: Option<String>,
    pub new_chunk_kib: Option<u32>,
}

/// The fields of `mdadm --examine` for a v1.x member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExamineReport {
    /// "Magic", e.g. "a92b4efc".
    pub magic: String,
    /// "Version", e.g. "1.2".
    pub version: String,
    /// "Feature Map", e.g. "0x1".
    pub feature_map: String,
    /// Names of the feature bits set.
    pub features: Vec<&'static str>,
    /// "Array UUID".
    pub array_uuid: String,
    /// "Name".
    pub name: String,
    /// "Creation Time" (UTC).
    pub creation_time: String,
    /// "Raid Level".
    pub raid_level: String,
    /// "Raid Devices".
    pub raid_devices: u32,
    /// "Avail Dev Size" in sectors (`data_size`).
    pub avail_dev_size_sectors: u64,
    /// "Array Size" in KiB, for levels with a data-disk count.
    pub array_size_kib: Option<u64>,
    /// "Used Dev Size" in sectors, when it differs from the available size.
    pub used_dev_size_sectors: Option<u64>,
    /// "Data Offset" in sectors.
    pub data_offset_sectors: u64,
    /// "New Offset" in sectors, during a reshape that moves data.
    pub new_offset_sectors: Option<u64>,
    /// "Super Offset" in sectors.
    pub super_offset_sectors: u64,
    /// "Recovery Offset" in sectors, when set.
    pub recovery_offset_sectors: Option<u64>,
    /// "Unused Space" before data, in sectors.
    pub unused_space_before_sectors: Option<u64>,
    /// "Unused Space" after data, in sectors (1.1/1.2 with a known device size).
    pub unused_space_after_sectors: Option<u64>,
    /// "State": "clean" or "active".
    pub state: String,
    /// "Device UUID".
    pub device_uuid: String,
    /// "Internal Bitmap": sectors from the superblock.
    pub internal_bitmap_offset: Option<i32>,
    /// "PPL": `(size in sectors, offset from the superblock)`.
    pub ppl: Option<(u16, i16)>,
    /// The reshape lines, while one is in progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reshape: Option<ExamineReshape>,
    /// "Flags": "write-mostly", "failfast".
    pub flags: Vec<&'static str>,
    /// "Update Time" (UTC).
    pub update_time: String,
    /// "Bad Block Log": entries available.
    pub bad_block_log_entries: Option<u32>,
    /// "Bad Block Log" offset in sectors from the superblock.
    pub bad_block_log_offset: Option<i32>,
    /// BAD_BLOCKS is set: the log holds entries.
    pub bad_blocks_present: bool,
    /// "Checksum" as stored.
    pub checksum: String,
    /// Whether the checksum is correct ("- correct" vs "- expected ...").
    pub checksum_correct: bool,
    /// The checksum the bytes should carry, when the stored one is wrong.
    pub checksum_expected: Option<String>,
    /// Rules of a strict decode that the superblock breaks (empty for a decoded superblock).
    pub problems: Vec<String>,
    /// "Events".
    pub events: u64,
    /// "Layout", for raid0 (with RAID0_LAYOUT), raid5, raid6 and raid10.
    pub layout: Option<String>,
    /// "Chunk Size" in KiB (or "Rounding" for linear).
    pub chunk_size_kib: Option<u32>,
    /// "Device Role", e.g. "Active device 0", "spare".
    pub device_role: String,
    /// "Array State", e.g. "AAA" ('A' active, '.' missing, 'R' replacing).
    pub array_state: String,
    /// Bitmap fields when a bitmap superblock was supplied.
    pub bitmap: Option<BitmapReport>,
}

/// Fields of `mdadm --examine-bitmap` for an internal bitmap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BitmapReport {
    /// "Version".
    pub version: u32,
    /// "Events".
    pub events: u64,
    /// "Events Cleared".
    pub events_cleared: u64,
    /// "Chunksize" in bytes.
    pub chunk_bytes: u32,
    /// "Daemon" flush period in seconds.
    pub daemon_sleep_secs: u32,
    /// "Sync Size" in KiB.
    pub sync_size_kib: u64,
    /// Total bits.
    pub bits: u64,
}

impl ExamineReport {
    /// Builds the report from a decoded (hence valid) superblock. `device_sectors`, when
    /// known, gives the unused space after the data.
    pub fn from_superblock(
        sb: &Superblock,
        device_sectors: Option<u64>,
        bitmap: Option<&BitmapSuper>,
    ) -> Self {
        let encoded = sb.encode();
        let csum = u32::from_le_bytes([encoded[0xd8], encoded[0xd9], encoded[0xda], encoded[0xdb]]);
        let level = sb.level.to_md();
        let raid_disks = sb.raid_disks;
        let array_size_kib = {
            let (num, den): (u64, u64) = match sb.level {
                Level::Raid1 => (1, 1),
                Level::Raid4 | Level::Raid5 => (u64::from(raid_disks.saturating_sub(1)), 1),
                Level::Raid6 => (u64::from(raid_disks.saturating_sub(2)), 1),
                Level::Raid10 => (
                    u64::from(raid_disks),
                    u64::from(sb.layout & 255) * u64::from((sb.layout >> 8) & 255),
                ),
                _ => (0, 1),
            };
            if level > 0 && num > 0 && den > 0 {
                Some(
                    ((u128::from(sb.size_sectors) * 512 * u128::from(num) / u128::from(den)) >> 10)
                        as u64,
                )
            } else {
                None
            }
        };
        let used =
            (level > 0 && sb.size_sectors != sb.data_size_sectors).then_some(sb.size_sectors);
        let new_offset = (sb.reshape.new_offset_sectors != 0
            && sb.feature_map.contains(FeatureMap::NEW_OFFSET))
        .then(|| {
            sb.data_offset_sectors
                .wrapping_add_signed(i64::from(sb.reshape.new_offset_sectors))
        });
        let (before, after) = unused_space(sb, device_sectors, bitmap);
        let layout = match sb.level {
            Level::Raid0 if sb.feature_map.contains(FeatureMap::RAID0_LAYOUT) => Some(
                raid0_layout_name(sb.layout)
                    .unwrap_or("-unknown-")
                    .to_string(),
            ),
            Level::Raid5 => Some(
                raid5_layout_name(sb.layout)
                    .unwrap_or("-unknown-")
                    .to_string(),
            ),
            Level::Raid6 => Some(
                raid6_layout_name(sb.layout)
                    .unwrap_or("-unknown-")
                    .to_string(),
            ),
            Level::Raid10 => Some(raid10_layout_name(sb.layout)),
            _ => None,
        };
        let chunk_size_kib = matches!(
            sb.level,
            Level::Raid0
                | Level::Raid4
                | Level::Raid5
                | Level::Raid6
                | Level::Raid10
                | Level::Linear
        )
        .then_some(sb.chunk_sectors / 2);
        let device_role = match sb.role() {
            DevRole::Spare | DevRole::Faulty => "spare".to_string(),
            DevRole::Journal => "Journal".to_string(),
            DevRole::Active(r) | DevRole::Reserved(r) => {
                if sb.feature_map.contains(FeatureMap::REPLACEMENT) {
                    format!("Replacement device {r}")
                } else {
                    format!("Active device {r}")
                }
            }
        };
        let delta_extra =
            if sb.feature_map.contains(FeatureMap::RESHAPE_ACTIVE) && sb.reshape.delta_disks < 0 {
                sb.reshape.delta_disks.unsigned_abs()
            } else {
                0
            };
        // How many devices claim each slot (mdadm counts per slot; counting once keeps a
        // hostile raid_disks from costing slots x max_dev).
        let slots = raid_disks.saturating_add(delta_extra).min(0xff00) as usize;
        let mut claims = vec![0u32; slots];
        for r in sb.dev_roles() {
            if let DevRole::Active(x) = r {
                if let Some(c) = claims.get_mut(usize::from(*x)) {
                    *c += 1;
                }
            }
        }
        let mut array_state = String::with_capacity(slots);
        for cnt in claims {
            array_state.push(match cnt {
                2 if level > 0 => 'R',
                1 => 'A',
                0 => '.',
                _ => '?',
            });
        }
        let mut flags = Vec::new();
        if sb.devflags.write_mostly() {
            flags.push("write-mostly");
        }
        if sb.devflags.fail_fast() {
            flags.push("failfast");
        }
        let has_bblog = sb.bblog_size_sectors != 0 && sb.bblog_offset != 0;
        ExamineReport {
            magic: format!("{MD_SB_MAGIC:08x}"),
            version: format!(
                "1.{}",
                crate::SuperblockVersion::guess_from_super_offset(sb.super_offset_sectors).minor()
            ),
            feature_map: format!("0x{:x}", sb.feature_map.bits()),
            features: sb.feature_map.names(),
            array_uuid: sb.set_uuid.to_mdadm_string(),
            name: sb.set_name.as_string(),
            creation_time: sb.ctime.to_ctime_string(),
            raid_level: sb.level.mdadm_name().unwrap_or("-unknown-").to_string(),
            raid_devices: raid_disks,
            avail_dev_size_sectors: sb.data_size_sectors,
            array_size_kib,
            used_dev_size_sectors: used,
            data_offset_sectors: sb.data_offset_sectors,
            new_offset_sectors: new_offset,
            super_offset_sectors: sb.super_offset_sectors,
            recovery_offset_sectors: sb.recovery_offset(),
            unused_space_before_sectors: before,
            unused_space_after_sectors: after,
            state: if sb.is_clean() { "clean" } else { "active" }.to_string(),
            device_uuid: sb.device_uuid.to_mdadm_string(),
            internal_bitmap_offset: sb.bitmap_offset(),
            reshape: sb.reshape().map(|r| ExamineReshape {
                position_kib: r.reshape_position_sectors / 2,
                delta_devices: (r.delta_disks != 0).then(|| {
                    (
                        r.delta_disks,
                        i64::from(sb.raid_disks) - i64::from(r.delta_disks),
                        sb.raid_disks,
                    )
                }),
                new_level: (r.new_level != sb.level.to_md()).then(|| {
                    Level::from_md(r.new_level)
                        .mdadm_name()
                        .unwrap_or("-unknown-")
                        .to_string()
                }),
                new_layout: (r.new_layout != sb.layout).then(|| match r.new_level {
                    // mdadm's print_r10_layout, as for "Layout".
                    10 => raid10_layout_name(r.new_layout),
                    5 => raid5_layout_name(r.new_layout)
                        .map_or_else(|| r.new_layout.to_string(), str::to_string),
                    6 => raid6_layout_name(r.new_layout)
                        .map_or_else(|| r.new_layout.to_string(), str::to_string),
                    _ => r.new_layout.to_string(),
                }),
                new_chunk_kib: (r.new_chunk_sectors != sb.chunk_sectors)
                    .then_some(r.new_chunk_sectors / 2),
            }),
            ppl: if sb.bitmap_offset().is_none() {
                sb.ppl().map(|p| (p.size_sectors, p.offset_sectors))
            } else {
                None
            },
            flags,
            update_time: sb.utime.to_ctime_string(),
            bad_block_log_entries: has_bblog.then(|| u32::from(sb.bblog_size_sectors) * 512 / 8),
            bad_block_log_offset: has_bblog.then_some(sb.bblog_offset),
            bad_blocks_present: sb.feature_map.contains(FeatureMap::BAD_BLOCKS),
            checksum: format!("{csum:x}"),
            checksum_correct: true,
            checksum_expected: None,
            problems: Vec::new(),
            events: sb.events,
            layout,
            chunk_size_kib,
            device_role,
            array_state,
            bitmap: bitmap.map(|b| BitmapReport {
                version: b.version.to_raw(),
                events: b.events,
                events_cleared: b.events_cleared,
                chunk_bytes: b.chunk_bytes,
                daemon_sleep_secs: b.daemon_sleep_secs,
                sync_size_kib: b.sync_size_sectors / 2,
                bits: b.bits(),
            }),
        }
    }

    /// Builds the report from a superblock read by [`Superblock::examine_bytes`], which may
    /// break md's rules: the stored checksum is shown, with the expected one when they differ
    /// (as mdadm does), and every broken rule is listed in `problems`.
    pub fn from_examined(
        ex: &Examined,
        device_sectors: Option<u64>,
        bitmap: Option<&BitmapSuper>,
    ) -> Self {
        let mut r = Self::from_superblock(&ex.superblock, device_sectors, bitmap);
        r.checksum = format!("{:x}", ex.stored_checksum);
        r.checksum_correct = ex.stored_checksum == ex.computed_checksum;
        r.checksum_expected = (!r.checksum_correct).then(|| format!("{:x}", ex.computed_checksum));
        r.problems = ex.problems.iter().map(|p| p.to_string()).collect();
        r
    }

    /// The report in mdadm's `--examine` text layout (field names right-aligned before " : ").
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        // mdadm pads names to 15 columns, except "Device Role" and "Array State" (14).
        let mut line = |name: &str, value: &str| {
            let width = if matches!(name, "Device Role" | "Array State") {
                14
            } else {
                15
            };
            out.push_str(&format!("{name:>width$} : {value}\n"));
        };
        line("Magic", &self.magic);
        line("Version", &self.version);
        line("Feature Map", &self.feature_map);
        line("Array UUID", &self.array_uuid);
        line("Name", &self.name);
        line("Creation Time", &self.creation_time);
        line("Raid Level", &self.raid_level);
        line("Raid Devices", &self.raid_devices.to_string());
        line("", "");
        line(
            "Avail Dev Size",
            &format!("{} sectors", self.avail_dev_size_sectors),
        );
        if let Some(a) = self.array_size_kib {
            line("Array Size", &format!("{a} KiB"));
        }
        if let Some(u) = self.used_dev_size_sectors {
            line("Used Dev Size", &format!("{u} sectors"));
        }
        if self.data_offset_sectors != 0 {
            line(
                "Data Offset",
                &format!("{} sectors", self.data_offset_sectors),
            );
        }
        if let Some(n) = self.new_offset_sectors {
            line("New Offset", &format!("{n} sectors"));
        }
        line(
            "Super Offset",
            &format!("{} sectors", self.super_offset_sectors),
        );
        if let Some(r) = self.recovery_offset_sectors {
            line("Recovery Offset", &format!("{r} sectors"));
        }
        if let (Some(b), Some(a)) = (
            self.unused_space_before_sectors,
            self.unused_space_after_sectors,
        ) {
            line(
                "Unused Space",
                &format!("before={b} sectors, after={a} sectors"),
            );
        }
        line("State", &self.state);
        line("Device UUID", &self.device_uuid);
        line("", "");
        if let Some(o) = self.internal_bitmap_offset {
            line("Internal Bitmap", &format!("{o} sectors from superblock"));
        }
        if let Some((size, offset)) = self.ppl {
            line(
                "PPL",
                &format!("{size} sectors at offset {offset} sectors from superblock"),
            );
        }
        if let Some(r) = &self.reshape {
            line("Reshape pos'n", &r.position_kib.to_string());
            if let Some((d, from, to)) = r.delta_devices {
                line("Delta Devices", &format!("{d} ({from}->{to})"));
            }
            if let Some(l) = &r.new_level {
                line("New Level", l);
            }
            if let Some(l) = &r.new_layout {
                line("New Layout", l);
            }
            if let Some(c) = r.new_chunk_kib {
                line("New Chunksize", &format!("{c}K"));
            }
            line("", "");
        }
        if !self.flags.is_empty() {
            line("Flags", &self.flags.join(" "));
        }
        line("Update Time", &self.update_time);
        if let (Some(n), Some(o)) = (self.bad_block_log_entries, self.bad_block_log_offset) {
            line(
                "Bad Block Log",
                &format!(
                    "{n} entries available at offset {o} sectors{}",
                    if self.bad_blocks_present {
                        " - bad blocks present."
                    } else {
                        ""
                    }
                ),
            );
        }
        line(
            "Checksum",
            &match (&self.checksum_expected, self.checksum_correct) {
                (_, true) => format!("{} - correct", self.checksum),
                (Some(e), false) => format!("{} - expected {e}", self.checksum),
                (None, false) => format!("{} - wrong", self.checksum),
            },
        );
        line("Events", &self.events.to_string());
        line("", "");
        if let Some(l) = &self.layout {
            line("Layout", l);
        }
        if let Some(c) = self.chunk_size_kib {
            let name = if self.raid_level == "linear" {
                "Rounding"
            } else {
                "Chunk Size"
            };
            line(name, &format!("{c}K"));
        }
        line("", "");
        line("Device Role", &self.device_role);
        line(
            "Array State",
            &format!(
                "{} ('A' == active, '.' == missing, 'R' == replacing)",
                self.array_state
            ),
        );
        out
    }
}

/// mdadm's "Unused Space" (`getinfo_super1`'s space_before / space_after), restated with its
/// quirks (for 1.1/1.2 the bitmap end is measured from sector 0, not from the superblock).
/// Returns `(None, None)` when mdadm would not print the line or the device size is needed but
/// unknown.
fn unused_space(
    sb: &Superblock,
    device_sectors: Option<u64>,
    bitmap: Option<&BitmapSuper>,
) -> (Option<u64>, Option<u64>) {
    let data_size = if sb.level.to_md() <= 0 {
        sb.data_size_sectors
    } else {
        sb.size_sectors
    };
    let data_offset = sb.data_offset_sectors;
    let super_offset = sb.super_offset_sectors;
    let bitmap_offset = i64::from(sb.bitmap_offset().unwrap_or(0));
    let (ppl_offset, ppl_size) = sb
        .ppl()
        .map(|p| (i64::from(p.offset_sectors), u64::from(p.size_sectors)))
        .unwrap_or((0, 0));
    let has_bblog = sb.bblog_offset != 0 && sb.bblog_size_sectors != 0;
    let (before, after) = if data_offset < super_offset {
        let mut end = super_offset;
        if has_bblog {
            let bb = super_offset.wrapping_add_signed(i64::from(sb.bblog_offset));
            end = end.min(bb);
        }
        end = end.min(super_offset.wrapping_add_signed(bitmap_offset + ppl_offset));
        // mdadm's unsigned arithmetic, without its wrap-around on hostile values.
        let after = end.saturating_sub(data_offset.saturating_add(data_size));
        (data_offset, after)
    } else {
        let mut earliest = super_offset.saturating_add((32 + 4) * 2);
        if bitmap_offset > 0 {
            let space = bitmap.map(|b| b.space_sectors()).unwrap_or(8);
            earliest = earliest.max((bitmap_offset as u64).saturating_add(space));
        } else if ppl_offset > 0 {
            earliest = earliest.max((ppl_offset as u64).saturating_add(ppl_size));
        }
        if has_bblog {
            let bbend = super_offset
                .wrapping_add_signed(i64::from(sb.bblog_offset))
                .wrapping_add(u64::from(sb.bblog_size_sectors));
            earliest = earliest.max(bbend);
        }
        let before = data_offset.saturating_sub(earliest);
        let Some(device) = device_sectors else {
            return (None, None);
        };
        (
            before,
            device.wrapping_sub(data_size).wrapping_sub(data_offset),
        )
    };
    let mut after = if before == 0 && after == 0 { 1 } else { after };
    if sb.role() == DevRole::Journal {
        match device_sectors {
            Some(d) => after = d.wrapping_sub(data_offset) % 8,
            None => return (None, None),
        }
    }
    if after == 1 || sb.feature_map.contains(FeatureMap::NEW_OFFSET) {
        return (None, None);
    }
    (Some(before), Some(after))
}
