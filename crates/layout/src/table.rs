//! Layout tables: rows of member chunks, one column per member, each cell naming what the chunk
//! holds. Built only from `unmap`, so a table shows exactly what the geometry computes.
//!
//! Cells: striped and parity levels show `D<n>` for logical chunk `n` of the array, `P` and `Q`
//! for parity; mirrored levels (raid1, raid10, RAID 1E) show the bare chunk number, as md(4)
//! draws them ("0 0 1 1"); `-` is a chunk outside the array.

use crate::{Geometry, GeometryError, MemberChunkRole, StackedGeometry};
use serde::Serialize;
use std::fmt::Write;

/// Rows drawn for raid1 use this block size, since raid1 has no chunk.
pub const RAID1_TABLE_BLOCK_SECTORS: u32 = 128;

/// One row of a layout table: the same chunk row on every member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LayoutRow {
    /// Row number (the stripe number for raid4/5/6).
    pub row: u64,
    /// Member sector where this row starts, relative to data_offset.
    pub member_sector_start: u64,
    pub cells: Vec<String>,
}

/// A rendered layout table, serializable to JSON and printable as text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LayoutTable {
    /// e.g. "raid5 left-symmetric, 5 members, chunk 64K".
    pub title: String,
    /// Header of the first column: "stripe" for raid4/5/6, "row" otherwise.
    pub row_label: String,
    /// Column headers, one per member ("m0", "m1", ... or "s0m1" for stacked sets).
    pub columns: Vec<String>,
    /// Size of one cell in sectors.
    pub unit_sectors: u32,
    pub rows: Vec<LayoutRow>,
}

fn format_size(sectors: u64) -> String {
    let bytes = sectors * 512;
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}M", bytes >> 20)
    } else if bytes.is_multiple_of(1024) {
        format!("{}K", bytes >> 10)
    } else {
        format!("{bytes}B")
    }
}

/// A short description of a geometry ("raid6 left-asymmetric, 5 members, chunk 64K").
pub fn describe(geometry: &Geometry) -> String {
    let n = geometry.raid_disks();
    match geometry {
        Geometry::Raid0(g) => {
            let zones = g.zones().len();
            let layout = if zones > 1 {
                format!(" {}", g.layout())
            } else {
                String::new()
            };
            format!(
                "raid0{layout}, {n} members, chunk {}, {zones} zone{}",
                format_size(u64::from(geometry.chunk_sectors())),
                if zones == 1 { "" } else { "s" }
            )
        }
        Geometry::Raid1(_) => format!("raid1, {n} members"),
        Geometry::Parity(g) => {
            let alg = match g.algorithm() {
                crate::ParityAlgorithm::Raid4 => String::new(),
                crate::ParityAlgorithm::Raid5(a) => format!(" {a}"),
                crate::ParityAlgorithm::Raid6(a) => format!(" {a}"),
            };
            format!(
                "{}{alg}, {n} members, chunk {}",
                geometry.level(),
                format_size(u64::from(geometry.chunk_sectors()))
            )
        }
        Geometry::Raid10(g) => format!(
            "raid10 {}, {n} members, chunk {}",
            g.layout(),
            format_size(u64::from(geometry.chunk_sectors()))
        ),
    }
}

fn cell(role: MemberChunkRole, unit: u64, mirrored: bool) -> String {
    match role {
        MemberChunkRole::Data { array_sector, .. } if mirrored => (array_sector / unit).to_string(),
        MemberChunkRole::Data { array_sector, .. } => format!("D{}", array_sector / unit),
        MemberChunkRole::Parity { .. } => "P".to_string(),
        MemberChunkRole::Q { .. } => "Q".to_string(),
        MemberChunkRole::Unused => "-".to_string(),
    }
}

/// The layout table of the first `max_rows` chunk rows of `geometry` (fewer if the members are
/// smaller).
pub fn layout_table(geometry: &Geometry, max_rows: u64) -> Result<LayoutTable, GeometryError> {
    let n = geometry.raid_disks();
    let unit = match geometry {
        Geometry::Raid1(_) => RAID1_TABLE_BLOCK_SECTORS,
        _ => geometry.chunk_sectors(),
    };
    let unit64 = u64::from(unit);
    let used_rows = (0..n)
        .map(|m| geometry.member_used_sectors(m).div_ceil(unit64))
        .max()
        .unwrap_or(0);
    let mirrored = matches!(geometry, Geometry::Raid1(_) | Geometry::Raid10(_));
    let mut rows = Vec::new();
    for row in 0..max_rows.min(used_rows) {
        let member_sector_start = row * unit64;
        let cells = (0..n)
            .map(|m| {
                Ok(cell(
                    geometry.unmap(m, member_sector_start)?,
                    unit64,
                    mirrored,
                ))
            })
            .collect::<Result<Vec<_>, GeometryError>>()?;
        rows.push(LayoutRow {
            row,
            member_sector_start,
            cells,
        });
    }
    Ok(LayoutTable {
        title: describe(geometry),
        row_label: if matches!(geometry, Geometry::Parity(_)) {
            "stripe".into()
        } else {
            "row".into()
        },
        columns: (0..n).map(|m| format!("m{m}")).collect(),
        unit_sectors: unit,
        rows,
    })
}

/// The layout table of a RAID 50/60 stack: columns are every member of every set, cells number
/// the stack's logical chunks in units of the sets' chunk.
pub fn stacked_layout_table(
    geometry: &StackedGeometry,
    max_rows: u64,
) -> Result<LayoutTable, GeometryError> {
    let set = geometry.set_geometry();
    let unit = set.chunk_sectors();
    let unit64 = u64::from(unit);
    let disks = set.raid_disks();
    let used_rows = set.member_used_sectors(0).div_ceil(unit64);
    let mut rows = Vec::new();
    for row in 0..max_rows.min(used_rows) {
        let member_sector_start = row * unit64;
        let mut cells = Vec::new();
        for s in 0..geometry.sets() {
            for m in 0..disks {
                cells.push(cell(
                    geometry.unmap(s, m, member_sector_start)?,
                    unit64,
                    false,
                ));
            }
        }
        rows.push(LayoutRow {
            row,
            member_sector_start,
            cells,
        });
    }
    let mut columns = Vec::new();
    for s in 0..geometry.sets() {
        for m in 0..disks {
            columns.push(format!("s{s}m{m}"));
        }
    }
    Ok(LayoutTable {
        title: format!(
            "{} over {} sets of {}, outer chunk {}",
            geometry.level(),
            geometry.sets(),
            describe(set),
            format_size(u64::from(geometry.outer_geometry().chunk_sectors()))
        ),
        row_label: "row".into(),
        columns,
        unit_sectors: unit,
        rows,
    })
}

impl LayoutTable {
    /// Plain text: a title line, a header line, then one right-aligned line per row.
    pub fn to_text(&self) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.len()).collect();
        for row in &self.rows {
            for (w, c) in widths.iter_mut().zip(&row.cells) {
                *w = (*w).max(c.len());
            }
        }
        let label_width = self
            .rows
            .iter()
            .map(|r| r.row.to_string().len())
            .max()
            .unwrap_or(0)
            .max(self.row_label.len());
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(out, "{}", self.title);
        let _ = write!(out, "{:>label_width$}", self.row_label);
        for (c, w) in self.columns.iter().zip(&widths) {
            let _ = write!(out, "  {c:>w$}");
        }
        out.push('\n');
        for row in &self.rows {
            let _ = write!(out, "{:>label_width$}", row.row);
            for (c, w) in row.cells.iter().zip(&widths) {
                let _ = write!(out, "  {c:>w$}");
            }
            out.push('\n');
        }
        out
    }
}
