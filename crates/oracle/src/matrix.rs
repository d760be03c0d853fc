//! The scenario matrix (tests/md-oracle/matrix): which arrays the oracle builds, and who writes
//! them.
//!
//! One row per array, whitespace separated, `#` starts a comment:
//!
//! ```text
//! # set  by       name              level  layout          chunk  members   [options]
//! fast   md       r5-ls-4x64k       5      left-symmetric  64K    4x8M
//! full   md       r0-unequal        0      original        32K    8M,6M,4M
//! fast   raidkit  rk-r6-ls-5x64k-f2 6      left-symmetric  64K    5x4M      fail=2
//! full   raidkit  rk-r1-2x-v10      1      -               -      2x4M      meta=1.0
//! ```
//!
//! `set` is `fast` (run by default and by `--full`) or `full` (only `--full`). `by` is the
//! direction: `md` rows are created and written by md in the VM and checked by raidkit on the
//! host; `raidkit` rows are created and written by raidkit on the host and assembled and checked
//! by md in the VM. `layout` and `chunk` are mdadm's spellings or `-` for the default / not
//! applicable (raid1). `members` is `NxSIZE` or a comma list of sizes; sizes take K or M
//! suffixes. Names must be unique, because records, member images and report lines are keyed by
//! them.
//!
//! Options (raidkit rows only, but for `reshape=` and `size=`; a new raidkit-side scenario is a new
//! option):
//! - `meta=1.0|1.1|1.2`: superblock placement (default 1.2);
//! - `fail=N` or `fail=N,M`: after writing, raidkit fails these members (`raidkit fail`); md
//!   must assemble the array degraded and read the same data;
//! - `rebuild=P` (1 to 99): after failing the members (`fail=`, or the last member when none is
//!   given), raidkit adds one new spare per failed member, rebuilds and stops the rebuild once
//!   it passed P percent, then stops the array cleanly: the spares carry md's recovery_offset.
//!   md must resume the recovery from there, finish it and read the same data;
//! - `bitmap` or `bitmap=SIZE`: raidkit creates the array with an internal write-intent bitmap
//!   (SIZE per bit, a power of two of at least 4K; `bitmap` alone takes mdadm's default). With
//!   `fail=`, raidkit also writes while the member is failed, so bits stay set; md must find
//!   the bitmap (`mdadm -X`) as raidkit left it.
//!
//! - `grow=SIZE`: after writing and stopping, every member image grows by SIZE and raidkit
//!   grows the array onto the new room (`raidkit grow --size max`: zeroed first, then the
//!   size recorded); md must assemble the larger array, read the data and zeros beyond it,
//!   and find parity and copies consistent. RAID 1, 4, 5, 6 and 10 (not far), alone.
//! - `reshape=SPEC@P` (RAID 0/4/5/6/10, alone; md and raidkit rows, see [`ReshapeSpec`]):
//!   SPEC is a comma list of what changes, as mdadm's `--grow` options: `N`
//!   (`--raid-devices`), `chunk:SIZE` (`--chunk`), `layout:NAME` (`--layout`, at the new
//!   level) and `level:L` (`--level`: 5 from 4, given a layout; 6 from 4 or 5, one member
//!   more by default, md's `*-6` takeover; 4, 5 or 6 from 0, one (two) members more by
//!   default, md's takeover with the parity last on the spares). `reshape=5@40` adds a
//!   member, `reshape=chunk:512K@40` changes the chunk, `reshape=level:6,5@40` makes a RAID
//!   5 of 4 members a RAID 6 of 5, `reshape=level:5@40` a RAID 0 of 3 members a RAID 5 of 4.
//!   A RAID 0 otherwise only gets more members (`reshape=4@40`: mdadm runs it as a RAID 4
//!   whose parity member is missing); a RAID 10 more members or another chunk, its layout
//!   kept. One spare is added per new member. raidkit rows: after writing and stopping, raidkit reshapes (`raidkit grow
//!   ... --pause-at`), stopping once P percent of the old array is reshaped; md assembles the
//!   array mid-reshape and finishes it, and raidkit finishes a copy of the same images, whose
//!   contents must match. md rows: md writes, `mdadm --grow` reshapes (moving the data offset,
//!   no backup file), md stops at P percent of each member (of the array for a RAID 10:
//!   sync_max) and is frozen there; raidkit goes on with md's reshape (`raidkit grow
//!   --continue`) and must read md's data. A RAID 0 is taken over by one `mdadm --grow` and
//!   reshaped by a second (see `plan::grow_options`). `N` one below the member count of a
//!   RAID 4, 5 or 6 (level, layout and chunk kept) is md's backwards reshape: it needs
//!   `size=`, the array is shrunk to its new size first (`--array-size`, what the data past
//!   it held is not checked), the data offset moves up, the reshape runs from the new end
//!   down and the last member leaves as a spare.
//! - `size=SIZE` (with `reshape=`, md and raidkit rows): each member's share of the array
//!   (mdadm's and raidkit's `create --size`), in 64K units below every member's size: the
//!   room behind the data a shrink moves it into.
//! - `mirrors=N` (RAID 1, alone, N above the member count): after writing and stopping,
//!   raidkit adds one spare per new slot, changes the slot count to N (`raidkit grow
//!   --raid-devices N`) and rebuilds the spares; md must assemble N members in sync.
//! - `init=background` (RAID 1, 4, 5, 6, 10): raidkit creates the array with a background
//!   initialisation (`raidkit create --init background`: md's initial resync, recorded from
//!   sector 0; with `ppl`, from past the first step, which create does), writes and stops
//!   it before the resync ran; md must assemble it, run the resync itself, read the data and
//!   find parity and copies consistent.
//! - `takeover=L` (alone): md's takeovers, where no data moves: a RAID 1 or 5 of two members
//!   to RAID 5 or 1, a RAID 0 to RAID 10 (one spare per member is added first and takes the
//!   new copy slots, rebuilt), a RAID 10 `n2` of an even count to RAID 0 (the odd slots'
//!   members leave as spares). After writing and stopping, raidkit takes the array over
//!   (`raidkit grow --level L`); md must assemble the new level and read the same data.
//!
//! The write journal (RAID 4, 5 and 6; md and raidkit rows; not with the other options): one
//! more image, of the first member's size, is the journal device (`--write-journal`):
//! - `journal`: the array is created with the journal, written and stopped cleanly; the other
//!   side assembles it with the journal and must read the same data;
//! - `journal=crash`: after the writes and a flush, the members silently drop every write (in
//!   the VM: dm-flakey maps under md; on the host: a wrapper around raidkit's member disks),
//!   a few more partial-stripe writes are made, so only the journal holds them, and the array
//!   is stopped without its members hearing of it (a crash); the other side must replay the
//!   journal and read every write.
//! - `journal=wb-crash`: as `journal=crash`, but the journal-only writes are made in md's
//!   write-back mode (md: `journal_mode` write-back; raidkit: `WritePolicy::Back`), so the
//!   log holds their pages as data alone (md's data-only stripes), and once they are
//!   acknowledged the journal drops every write too: the stop cannot write them back. The
//!   other side must find data-only stripes in the log, write them back and read every write.
//!
//! md's partial parity log (RAID 5, not with the other options):
//! - `ppl`: the writer creates the array with the log (`--consistency-policy=ppl`), writes it
//!   and stops it cleanly; the other side must run it with the log and read the same data;
//! - `ppl=crash`: after the writes, one more write inside one data chunk lands on its data
//!   member and in the log but not in its parity, as a power failure leaves it, and the array
//!   stops without a stop. raidkit rows: the array is dropped dirty and the stripe's parity is
//!   put back as it was; md must replay raidkit's log at assembly (no resync, and its check
//!   finds the stripe consistent). md rows: the parity member drops writes to its data area
//!   (dm-flakey) for the write, then every member drops every write and md stops; raidkit must
//!   replay md's log (and reads every write, with parity consistent).

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// Who creates and writes the array, and so which side checks the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// md creates and writes in the VM; raidkit checks the member bytes on the host.
    Md,
    /// raidkit creates and writes on the host; md assembles and checks in the VM.
    Raidkit,
}

/// md superblock placement (mdadm's `--metadata`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetadataVersion {
    V1_0,
    V1_1,
    V1_2,
}

impl MetadataVersion {
    /// mdadm's spelling.
    pub fn name(self) -> &'static str {
        match self {
            MetadataVersion::V1_0 => "1.0",
            MetadataVersion::V1_1 => "1.1",
            MetadataVersion::V1_2 => "1.2",
        }
    }

    pub fn parse(s: &str) -> Option<MetadataVersion> {
        match s {
            "1.0" => Some(MetadataVersion::V1_0),
            "1.1" => Some(MetadataVersion::V1_1),
            "1.2" => Some(MetadataVersion::V1_2),
            _ => None,
        }
    }
}

/// The write journal of a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JournalMode {
    /// Created with the journal, written, stopped cleanly.
    Clean,
    /// Written, then more writes reach only the journal before a crash.
    Crash,
    /// As `Crash`, the last writes made in write-back mode: the journal holds their pages
    /// as data alone (md's data-only stripes), and the crash comes before a write-back.
    #[serde(rename = "wb-crash")]
    WriteBackCrash,
}

impl JournalMode {
    /// Whether the array crashes after writes only the journal got.
    pub fn crashes(self) -> bool {
        matches!(self, JournalMode::Crash | JournalMode::WriteBackCrash)
    }

    /// Whether those writes are made in write-back mode.
    pub fn write_back(self) -> bool {
        self == JournalMode::WriteBackCrash
    }
}

/// The partial parity log of a raidkit RAID 5 row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PplMode {
    /// Created with the log, written, stopped cleanly.
    Clean,
    /// Written, then one more write lands on its data member and in the log but not in
    /// parity, and the array stops without a stop: md must replay the log.
    Crash,
}

/// One array of the matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatrixRow {
    pub fast: bool,
    pub by: Writer,
    pub name: String,
    /// md level number (0, 1, 4, 5, 6, 10).
    pub level: u32,
    /// mdadm's --layout argument, if any.
    pub layout: Option<String>,
    /// mdadm's --chunk in KiB, if any.
    pub chunk_kib: Option<u64>,
    /// Member image sizes, in member order.
    pub member_bytes: Vec<u64>,
    /// Superblock placement (always 1.2 for md rows).
    pub metadata: MetadataVersion,
    /// raidkit rows: the members raidkit fails after writing (ascending).
    pub fail_members: Vec<usize>,
    /// raidkit rows: replace the failed members by spares and stop their rebuild once it
    /// passed this percentage.
    pub rebuild_percent: Option<u8>,
    /// raidkit rows: create with an internal write-intent bitmap of this chunk (0: mdadm's
    /// default).
    pub bitmap_chunk_bytes: Option<u64>,
    /// The array has a write journal on one more image (of the first member's size).
    pub journal: Option<JournalMode>,
    /// raidkit RAID 5 rows: created with md's partial parity log.
    pub ppl: Option<PplMode>,
    /// raidkit rows: grow every member image by this many bytes and the array onto them.
    pub grow_bytes: Option<u64>,
    /// raidkit RAID 1 rows: the slot count raidkit grows the mirror to, with a spare per new
    /// slot.
    pub mirrors: Option<usize>,
    /// raidkit rows: the level raidkit takes the array over as (`takeover=L`).
    pub takeover: Option<u32>,
    /// RAID 0/4/5/6/10 rows: the reshape one side starts and stops part way, the other goes
    /// on.
    pub reshape: Option<ReshapeSpec>,
    /// Reshape rows: the array is created using this many bytes of each member (mdadm's
    /// `--size`), leaving room behind the data (a shrinking reshape moves the data there).
    pub size_bytes: Option<u64>,
    /// raidkit rows (`init=background`): created with a background initialisation, written
    /// and stopped before its resync ran.
    pub init_background: bool,
    /// RAID 5/6 rows (`spans=N`, alone): a RAID 50/60 stack, N span arrays of the level on
    /// runs of the members and a RAID 0 over them with the same chunk, as md stacks them.
    pub spans: Option<usize>,
}

impl MatrixRow {
    /// Members and the spares added to take new slots, when the row adds any: the slot
    /// count a mirror grows to, the member count a reshape ends with, a spare per member of a
    /// RAID 0 taken over as a RAID 10.
    pub fn with_spares(&self) -> Option<usize> {
        let n = self.member_bytes.len();
        self.mirrors
            .or(self.reshape.as_ref().map(|r| r.devices))
            .or((self.level == 0 && self.takeover == Some(10)).then_some(2 * n))
    }
}

/// What a reshape row changes (`reshape=SPEC@P`), as mdadm's `--grow` options: the member
/// count, the level, the layout, the chunk; and where the side that starts it stops.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReshapeSpec {
    /// Members once reshaped (`--raid-devices`): the row's, one more for a RAID 4 or 5 that
    /// becomes a RAID 6 (its Q) or a RAID 0 that becomes a RAID 4 or 5 (two for a RAID 6),
    /// or as the row says. One spare is added per new member.
    pub devices: usize,
    /// The new level (`--level`), when it changes: 5 (from 4), 6 (from 4 or 5), 4, 5 or 6
    /// (from 0).
    pub level: Option<u32>,
    /// The new layout (`--layout`, mdadm's name at the new level), when given.
    pub layout: Option<String>,
    /// The new chunk in KiB (`--chunk`), when given.
    pub chunk_kib: Option<u64>,
    /// raidkit rows: stop once this percent of the old array is reshaped; md rows: freeze
    /// md's reshape once it passed this percent of each member.
    pub percent: u8,
}

impl ReshapeSpec {
    /// Parses `SPEC@P` (the value of `reshape=`) for a row of `level` with `members`
    /// members. SPEC is a comma list of `N` (members), `level:N`, `layout:NAME` and
    /// `chunk:SIZE`; at least one of them must change the array.
    pub fn parse(
        v: &str,
        level: u32,
        members: usize,
        chunk_kib: Option<u64>,
    ) -> Result<ReshapeSpec, String> {
        let (spec, percent) = v
            .split_once('@')
            .ok_or_else(|| "SPEC@PERCENT".to_string())?;
        let percent = match percent.parse::<u8>() {
            Ok(p @ 1..=99) => p,
            _ => return Err(format!("@{percent}: use a percentage from 1 to 99")),
        };
        let (mut devices, mut new_level, mut layout, mut chunk) = (None, None, None, None);
        for item in spec.split(',') {
            match item.split_once(':') {
                None => match item.parse::<usize>() {
                    Ok(n) if devices.is_none() => devices = Some(n),
                    _ => return Err(format!("{item}: a member count, once")),
                },
                Some(("level", l)) => match l.trim_start_matches("raid").parse::<u32>() {
                    Ok(l) if new_level.is_none() => new_level = Some(l),
                    _ => return Err(format!("{item}: a level number, once")),
                },
                Some(("layout", l)) if !l.is_empty() && layout.is_none() => {
                    layout = Some(l.to_string())
                }
                Some(("chunk", c)) => match parse_size(c) {
                    Some(b) if b >= 4096 && b.is_power_of_two() && chunk.is_none() => {
                        chunk = Some(b / 1024)
                    }
                    _ => return Err(format!("{item}: a power of two of at least 4K, once")),
                },
                _ => return Err(format!("{item}: use N, level:N, layout:NAME or chunk:SIZE")),
            }
        }
        if !matches!(level, 0 | 4..=6 | 10) {
            return Err(format!(
                "RAID {level}: reshapes are for RAID 0, 4, 5, 6 and 10"
            ));
        }
        let new_level = new_level.filter(|&l| l != level);
        // md's takeovers: a RAID 4 becomes a RAID 5 (given a layout), a RAID 4 or 5 becomes a
        // RAID 6 with its Q on one more member, a RAID 0 a RAID 4, 5 or 6 with its parity on
        // one (two) more. A RAID 0 otherwise grows or changes its chunk (mdadm runs it as a
        // RAID 4 without its parity member), a RAID 10 keeps its level and layout.
        let parity_added = match new_level {
            None if level == 0 && layout.is_some() => {
                return Err("RAID 0: more members, chunk:SIZE, or level:4, 5 or 6".into())
            }
            // md reshapes a RAID 10's near and offset layouts into each other (the same
            // number of copies), never a far one.
            None if level == 10
                && layout
                    .as_deref()
                    .is_some_and(|l| !(l.starts_with('n') || l.starts_with('o'))) =>
            {
                return Err(
                    "RAID 10: more members, chunk:SIZE or layout:nN/oN (md reshapes no far layout)"
                        .into(),
                )
            }
            None => 0,
            Some(4) if level == 0 && layout.is_some() => return Err("level:4 has no layout".into()),
            Some(4 | 5) if level == 0 => 1,
            Some(6) if level == 0 => 2,
            Some(5) if level == 4 && layout.is_some() => 0,
            Some(5) if level == 4 => return Err("level:5 from RAID 4 needs a layout".into()),
            Some(6) if matches!(level, 4 | 5) => 1,
            Some(l) => {
                return Err(format!(
                    "level:{l}: RAID {level} reshapes to {}",
                    match level {
                        0 => "4, 5 or 6",
                        4 | 5 => "5 or 6",
                        _ => "no other level",
                    }
                ))
            }
        };
        let devices = devices.unwrap_or(members + parity_added);
        // Fewer members: md's backwards reshape of a RAID 4, 5 or 6 (one member less, the
        // level, layout and chunk kept), after mdadm's --array-size to the new size.
        let least = match level {
            6 => 4,
            _ => 3,
        };
        let shrinks = devices < members
            && matches!(level, 4..=6)
            && new_level.is_none()
            && layout.is_none()
            && chunk_kib_unchanged(chunk, chunk_kib);
        if devices < members && !shrinks {
            return Err(format!(
                "{devices} members: fewer than the row's {members} only for a RAID 4, 5 or 6 keeping its level, layout and chunk"
            ));
        }
        if shrinks && (devices + 1 != members || devices < least) {
            return Err(format!(
                "{devices} members: a RAID {level} gives up one member at a time, keeping at least {least}"
            ));
        }
        if devices < members + parity_added && !shrinks {
            return Err(format!(
                "{devices} members: at least the row's {members}{}",
                if parity_added > 0 {
                    " and one for Q"
                } else {
                    ""
                }
            ));
        }
        let chunk = chunk.filter(|&c| Some(c) != chunk_kib);
        if devices == members && new_level.is_none() && layout.is_none() && chunk.is_none() {
            return Err("nothing to change".into());
        }
        if level == 0 && new_level.is_none() && chunk.is_some() && devices != members {
            // mdadm: "Cannot change array level in the same operation as changing chunk size".
            return Err("RAID 0: more members or chunk:SIZE, one at a time".into());
        }
        Ok(ReshapeSpec {
            devices,
            level: new_level,
            layout,
            chunk_kib: chunk,
            percent,
        })
    }
}

/// Whether `chunk` (a `chunk:` of the SPEC) leaves the row's chunk as it is.
fn chunk_kib_unchanged(chunk: Option<u64>, row: Option<u64>) -> bool {
    chunk.is_none() || chunk == row
}

impl ReshapeSpec {
    /// Fewer members than the row's `members` (a RAID 4, 5 or 6 giving one up): md's
    /// backwards reshape, the array shrunk first to the new size (mdadm's `--array-size`),
    /// the data offset moved up into the room behind the data (the row's `size=`).
    pub fn shrinks(&self, members: usize) -> bool {
        self.devices < members
    }

    /// A RAID 0 (`level`, the row's) getting more members and staying a RAID 0: mdadm runs it
    /// as a RAID 4 whose parity member is missing (md takes the RAID 0 over so), the spares in
    /// the new slots, and makes it a RAID 0 again at the end.
    pub fn raid0_grows(&self, level: u32) -> bool {
        level == 0 && self.level.is_none()
    }

    /// Members md counts missing from the old layout until the reshape has filled them
    /// (recorded recovering up to the reshape position): the new parity of a level change
    /// (md's takeover puts it on spares), and the spare of a RAID 0 growing (it takes the
    /// RAID 4's missing parity slot of the old layout and is a data member of the new; a
    /// RAID 0 of `members` changing only its chunk has none).
    pub fn fresh_members(&self, level: u32, members: usize) -> usize {
        match (level, self.level) {
            (0, None) => usize::from(self.devices > members),
            (0, Some(6)) => 2,
            (0, Some(_)) => 1,
            (4 | 5, Some(6)) => 1,
            _ => 0,
        }
    }

    /// Slots md runs without a member once the reshape is done: the parity of a RAID 0 that
    /// grew (md, finishing the reshape without mdadm, leaves it a RAID 4).
    pub fn missing_after(&self, level: u32) -> usize {
        usize::from(self.raid0_grows(level))
    }

    /// The raid devices md's superblocks record while it runs: the row's count, and the
    /// missing parity slot of a RAID 0 growing.
    pub fn md_raid_devices(&self, level: u32) -> usize {
        self.devices + self.missing_after(level)
    }

    /// The level md runs the reshape at: the new one, or (a RAID 0 growing) a RAID 4.
    pub fn md_level(&self, level: u32) -> u32 {
        match self.level {
            Some(l) => l,
            None if level == 0 => 4,
            None => level,
        }
    }

    /// Whether md's reshape leaves zeros in the room it adds. md's RAID 4/5/6 reshape writes
    /// zeros there (reshape_request clears the blocks past the old size); its RAID 10 reshape
    /// moves the old data only, and once done resyncs the new room (raid10_finish_reshape sets
    /// recovery_cp to the old size) from whatever the members held there: old-layout data
    /// the move left behind, zeros on new members.
    pub fn md_zeroes_new_room(&self, level: u32) -> bool {
        self.md_level(level) != 10
    }

    /// Data members of the new layout of a RAID 4, 5 or 6 (a RAID 0 growing counted as the
    /// RAID 4 md runs).
    pub fn new_data_members(&self, level: u32) -> usize {
        let n = self.md_raid_devices(level);
        match self.md_level(level) {
            4 | 5 => n - 1,
            6 => n - 2,
            _ => n,
        }
    }
}

impl fmt::Display for ReshapeSpec {
    /// The option's value: `5@40`, `4,chunk:512K@40`, `5,level:6@40`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.devices)?;
        if let Some(l) = self.level {
            write!(f, ",level:{l}")?;
        }
        if let Some(l) = &self.layout {
            write!(f, ",layout:{l}")?;
        }
        if let Some(c) = self.chunk_kib {
            write!(f, ",chunk:{c}K")?;
        }
        write!(f, "@{}", self.percent)
    }
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
        if f.len() < 7 {
            return Err(err(format!(
                "expected at least 7 fields, found {}",
                f.len()
            )));
        }
        let (set, by, name, level, layout, chunk, members) =
            (f[0], f[1], f[2], f[3], f[4], f[5], f[6]);
        let options = &f[7..];
        let fast = match set {
            "fast" => true,
            "full" => false,
            other => return Err(err(format!("set must be fast or full, not {other}"))),
        };
        let by = match by {
            "md" => Writer::Md,
            "raidkit" => Writer::Raidkit,
            other => return Err(err(format!("by must be md or raidkit, not {other}"))),
        };
        let level: u32 = match level.trim_start_matches("raid").parse() {
            Ok(l @ (0 | 1 | 4 | 5 | 6 | 10)) => l,
            _ => return Err(err(format!("unsupported level {level}"))),
        };
        let chunk_kib = match chunk {
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
        if name.len() > 31 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            // 31 bytes: raidkit stores the row name as the md set name.
            return Err(err(format!("name {name}: use up to 31 of [A-Za-z0-9-]")));
        }
        let mut metadata = MetadataVersion::V1_2;
        let mut fail_members: Vec<usize> = Vec::new();
        let mut rebuild_percent = None;
        let mut bitmap_chunk_bytes = None;
        let mut journal = None;
        let mut ppl = None;
        let mut grow_bytes = None;
        let mut mirrors = None;
        let mut takeover = None;
        let mut reshape = None;
        let mut size_bytes = None;
        let mut init_background = false;
        let mut spans = None;
        for opt in options {
            let journal_opt = *opt == "journal" || opt.starts_with("journal=");
            let ppl_opt = *opt == "ppl" || *opt == "ppl=crash";
            let reshape_opt = opt.starts_with("reshape=") || opt.starts_with("size=");
            let spans_opt = opt.starts_with("spans=");
            if by == Writer::Md && !journal_opt && !ppl_opt && !reshape_opt && !spans_opt {
                return Err(err(format!(
                    "option {opt}: md rows take only journal options, ppl, reshape=, size= and spans="
                )));
            }
            match opt.split_once('=') {
                Some(("spans", v)) => {
                    let n = member_bytes.len();
                    let least = if level == 6 { 4 } else { 3 };
                    match v.parse::<usize>() {
                        Ok(k)
                            if (level == 5 || level == 6)
                                && k >= 2
                                && n % k == 0
                                && n / k >= least
                                && options.len() == 1 =>
                        {
                            spans = Some(k)
                        }
                        _ => {
                            return Err(err(format!(
                                "spans={v}: RAID 5 or 6 alone, 2 or more spans of equal count, at least {least} members each"
                            )))
                        }
                    }
                }
                Some(("meta", v)) => {
                    metadata = MetadataVersion::parse(v)
                        .ok_or_else(|| err(format!("meta={v}: use 1.0, 1.1 or 1.2")))?
                }
                Some(("fail", v)) => {
                    for m in v.split(',') {
                        match m.parse::<usize>() {
                            Ok(m) if m < member_bytes.len() && !fail_members.contains(&m) => {
                                fail_members.push(m)
                            }
                            _ => {
                                return Err(err(format!(
                                    "fail={v}: needs distinct member indices below {}",
                                    member_bytes.len()
                                )))
                            }
                        }
                    }
                    fail_members.sort_unstable();
                }
                Some(("rebuild", v)) => match v.parse::<u8>() {
                    Ok(p @ 1..=99) => rebuild_percent = Some(p),
                    _ => return Err(err(format!("rebuild={v}: use a percentage from 1 to 99"))),
                },
                Some(("bitmap", v)) => match parse_size(v) {
                    Some(b) if b >= 4096 && b.is_power_of_two() => bitmap_chunk_bytes = Some(b),
                    _ => {
                        return Err(err(format!(
                            "bitmap={v}: use a power of two of at least 4K"
                        )))
                    }
                },
                Some(("mirrors", v)) => match v.parse::<usize>() {
                    Ok(m) if level == 1 && m > member_bytes.len() && options.len() == 1 => {
                        mirrors = Some(m)
                    }
                    _ => {
                        return Err(err(format!(
                            "mirrors={v}: RAID 1 alone, more slots than its {} members",
                            member_bytes.len()
                        )))
                    }
                },
                Some(("takeover", v)) => {
                    let n = member_bytes.len();
                    let to = v.trim_start_matches("raid").parse::<u32>().ok();
                    match (level, to) {
                        (1, Some(5)) | (5, Some(1)) if n == 2 && options.len() == 1 => {
                            takeover = to
                        }
                        (0, Some(10)) if options.len() == 1 => takeover = to,
                        (10, Some(0))
                            if n.is_multiple_of(2) && layout == "n2" && options.len() == 1 =>
                        {
                            takeover = to
                        }
                        _ => {
                            return Err(err(format!(
                                "takeover={v}: alone; RAID 1 or 5 of two members to 5 or 1, RAID 0 to 10, RAID 10 n2 of an even count to 0"
                            )))
                        }
                    }
                }
                Some(("reshape", v)) => {
                    let others = options.iter().filter(|o| !o.starts_with("size="));
                    if others.count() != 1 {
                        return Err(err(format!("reshape={v}: alone (but for size=)")));
                    }
                    let spec = ReshapeSpec::parse(v, level, member_bytes.len(), chunk_kib)
                        .map_err(|e| err(format!("reshape={v}: {e}")))?;
                    reshape = Some(spec);
                }
                Some(("size", v)) => match parse_size(v) {
                    Some(b)
                        if b > 0
                            && b % 65536 == 0
                            && member_bytes.iter().all(|&m| b < m)
                            && options.iter().any(|o| o.starts_with("reshape=")) =>
                    {
                        size_bytes = Some(b)
                    }
                    _ => {
                        return Err(err(format!(
                            "size={v}: with reshape=, in 64K units below every member's size"
                        )))
                    }
                },
                Some(("grow", v)) => match parse_size(v) {
                    Some(b) if b > 0 && b % 4096 == 0 => grow_bytes = Some(b),
                    _ => return Err(err(format!("grow={v}: use a size in 4K units"))),
                },
                None if *opt == "bitmap" => bitmap_chunk_bytes = Some(0),
                Some(("init", "background")) => init_background = true,
                None if *opt == "journal" => journal = Some(JournalMode::Clean),
                Some(("journal", "crash")) => journal = Some(JournalMode::Crash),
                Some(("journal", "wb-crash")) => journal = Some(JournalMode::WriteBackCrash),
                None if *opt == "ppl" => ppl = Some(PplMode::Clean),
                Some(("ppl", "crash")) => ppl = Some(PplMode::Crash),
                _ => return Err(err(format!("unknown option {opt}"))),
            }
        }
        if (rebuild_percent.is_some() || bitmap_chunk_bytes.is_some()) && level == 0 {
            return Err(err(
                "rebuild and bitmap need a level with redundancy (not 0)".to_string(),
            ));
        }
        if journal.is_some() {
            if !matches!(level, 4..=6) {
                return Err(err(
                    "journal: the write journal is for RAID 4, 5 and 6 (as in md)".to_string(),
                ));
            }
            if rebuild_percent.is_some() || bitmap_chunk_bytes.is_some() || !fail_members.is_empty()
            {
                return Err(err(
                    "journal does not combine with fail=, rebuild= or bitmap (md refuses a bitmap with a journal)"
                        .to_string(),
                ));
            }
        }
        if ppl.is_some()
            && (level != 5
                || journal.is_some()
                || rebuild_percent.is_some()
                || bitmap_chunk_bytes.is_some()
                || !fail_members.is_empty())
        {
            return Err(err(
                "ppl: the partial parity log is for RAID 5 alone, without fail=, rebuild=, a bitmap or a journal (as in md)"
                    .to_string(),
            ));
        }
        if grow_bytes.is_some()
            && (level == 0
                || (level == 10 && layout.starts_with('f'))
                || journal.is_some()
                || ppl == Some(PplMode::Crash)
                || rebuild_percent.is_some()
                || bitmap_chunk_bytes.is_some()
                || !fail_members.is_empty())
        {
            return Err(err(
                "grow: RAID 1, 4, 5, 6 or 10 (not far), without fail=, rebuild=, a bitmap, a journal or ppl=crash (raidkit grows only whole, clean arrays without a bitmap)"
                    .to_string(),
            ));
        }
        if reshape
            .as_ref()
            .is_some_and(|r| r.shrinks(member_bytes.len()))
            && size_bytes.is_none()
        {
            return Err(err(
                "reshape to fewer members: needs size= (room behind the data, where the shrink moves it)"
                    .to_string(),
            ));
        }
        if rebuild_percent.is_some() && fail_members.is_empty() {
            // Rebuild the last member unless the row names the ones to fail.
            fail_members.push(member_bytes.len() - 1);
        }
        if !names.insert(name.to_string()) {
            return Err(err(format!("duplicate name {name}")));
        }
        rows.push(MatrixRow {
            fast,
            by,
            name: name.to_string(),
            level,
            layout: (layout != "-").then(|| layout.to_string()),
            chunk_kib,
            member_bytes,
            metadata,
            fail_members,
            rebuild_percent,
            bitmap_chunk_bytes,
            ppl,
            journal,
            grow_bytes,
            mirrors,
            takeover,
            reshape,
            size_bytes,
            init_background,
            spans,
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
            "# comment\nfast md r5 5 left-symmetric 64K 4x8M\n\nfull md r0 0 - 4K 8M,6M # tail\n\
             fast raidkit rk6 6 ls 64K 5x4M fail=2 meta=1.1\n",
        )
        .unwrap();
        assert_eq!(rows.len(), 3);
        assert!(rows[0].fast);
        assert_eq!(rows[0].by, Writer::Md);
        assert_eq!(rows[0].layout.as_deref(), Some("left-symmetric"));
        assert_eq!(rows[0].chunk_kib, Some(64));
        assert_eq!(rows[0].member_bytes, vec![8 << 20; 4]);
        assert_eq!(rows[0].metadata, MetadataVersion::V1_2);
        assert!(!rows[1].fast);
        assert_eq!(rows[1].layout, None);
        assert_eq!(rows[1].member_bytes, vec![8 << 20, 6 << 20]);
        assert_eq!(rows[2].by, Writer::Raidkit);
        assert_eq!(rows[2].fail_members, vec![2]);
        assert_eq!(rows[2].metadata, MetadataVersion::V1_1);
        assert_eq!(rows[2].rebuild_percent, None);
        assert_eq!(rows[2].bitmap_chunk_bytes, None);
    }

    #[test]
    fn parses_rebuild_and_bitmap_options() {
        let rows = parse_matrix(
            "fast raidkit a 6 ls 64K 5x4M fail=3,1 rebuild=40
             fast raidkit b 5 ls 64K 4x4M rebuild=60
             fast raidkit c 1 - - 2x4M bitmap
             fast raidkit d 10 n2 64K 4x4M bitmap=64K fail=1
",
        )
        .unwrap();
        assert_eq!(rows[0].fail_members, vec![1, 3]);
        assert_eq!(rows[0].rebuild_percent, Some(40));
        // Without fail=, the last member is the one rebuilt.
        assert_eq!(rows[1].fail_members, vec![3]);
        assert_eq!(rows[2].bitmap_chunk_bytes, Some(0));
        assert_eq!(rows[3].bitmap_chunk_bytes, Some(64 << 10));
        assert_eq!(rows[3].fail_members, vec![1]);
    }

    #[test]
    fn parses_journal_options() {
        let rows = parse_matrix(
            "fast md a 5 ls 64K 4x4M journal
             fast md b 6 ls 64K 5x4M journal=crash
             fast raidkit c 4 - 64K 4x4M journal
             fast raidkit d 6 ls 64K 5x4M journal=crash
             fast raidkit e 5 ls 64K 4x4M
             fast md f 6 ls 64K 5x4M journal=wb-crash
             full raidkit g 4 - 32K 4x4M journal=wb-crash
",
        )
        .unwrap();
        assert_eq!(rows[0].journal, Some(JournalMode::Clean));
        assert_eq!(rows[1].journal, Some(JournalMode::Crash));
        assert_eq!(rows[2].journal, Some(JournalMode::Clean));
        assert_eq!(rows[3].journal, Some(JournalMode::Crash));
        assert_eq!(rows[4].journal, None);
        assert_eq!(rows[5].journal, Some(JournalMode::WriteBackCrash));
        assert_eq!(rows[6].journal, Some(JournalMode::WriteBackCrash));
        assert!(rows[1].journal.unwrap().crashes() && !rows[1].journal.unwrap().write_back());
        assert!(rows[5].journal.unwrap().crashes() && rows[5].journal.unwrap().write_back());
        assert!(!rows[0].journal.unwrap().crashes());
    }

    #[test]
    fn parses_ppl_options() {
        let rows = parse_matrix(
            "fast raidkit a 5 ls 64K 4x4M ppl
             fast raidkit b 5 ra 32K 5x4M ppl=crash
             fast raidkit c 5 ls 64K 4x4M
             fast md d 5 ls 64K 4x4M ppl
             fast md e 5 ls 64K 4x4M ppl=crash
",
        )
        .unwrap();
        assert_eq!(rows[0].ppl, Some(PplMode::Clean));
        assert_eq!(rows[1].ppl, Some(PplMode::Crash));
        assert_eq!(rows[2].ppl, None);
        assert_eq!(rows[3].ppl, Some(PplMode::Clean));
        assert_eq!(rows[4].ppl, Some(PplMode::Crash));
    }

    #[test]
    fn parses_reshape_options() {
        let rows = parse_matrix(
            "fast raidkit a 5 ls 64K 4x16M reshape=5@40
             fast md b 5 ls 64K 4x16M reshape=chunk:512K@40
             full raidkit c 5 ls 64K 4x16M reshape=level:6,5@40
             full md d 5 ls 64K 4x16M reshape=level:6@30
             full raidkit e 4 - 64K 3x16M reshape=level:5,layout:left-symmetric@25
             full md f 6 - 64K 5x16M reshape=6,layout:right-symmetric,chunk:128K@50
",
        )
        .unwrap();
        let r: Vec<&ReshapeSpec> = rows.iter().map(|r| r.reshape.as_ref().unwrap()).collect();
        assert_eq!(
            *r[0],
            ReshapeSpec {
                devices: 5,
                level: None,
                layout: None,
                chunk_kib: None,
                percent: 40
            }
        );
        assert_eq!(
            (r[1].devices, r[1].chunk_kib, r[1].level),
            (4, Some(512), None)
        );
        assert_eq!((r[2].devices, r[2].level), (5, Some(6)));
        // A RAID 5 becoming a RAID 6 takes one more member unless the row says otherwise.
        assert_eq!((r[3].devices, r[3].level, r[3].percent), (5, Some(6), 30));
        assert_eq!((r[4].devices, r[4].level), (3, Some(5)));
        assert_eq!(r[4].layout.as_deref(), Some("left-symmetric"));
        assert_eq!(
            (r[5].devices, r[5].layout.as_deref(), r[5].chunk_kib),
            (6, Some("right-symmetric"), Some(128))
        );
        // The option's value as the row would spell it.
        assert_eq!(r[0].to_string(), "5@40");
        assert_eq!(r[1].to_string(), "4,chunk:512K@40");
        assert_eq!(r[2].to_string(), "5,level:6@40");
        round_trips(&rows, &r);
    }

    /// Each spec reads back from the text it prints.
    fn round_trips(rows: &[MatrixRow], specs: &[&ReshapeSpec]) {
        for (row, spec) in rows.iter().zip(specs) {
            let again = ReshapeSpec::parse(
                &spec.to_string(),
                row.level,
                row.member_bytes.len(),
                row.chunk_kib,
            );
            assert_eq!(again.as_ref(), Ok(*spec), "{spec}");
        }
    }

    #[test]
    fn parses_shrinks() {
        let rows = parse_matrix(
            "fast raidkit a 5 ls 64K 5x16M size=12M reshape=4@40
             full md b 6 - 64K 6x16M size=12M reshape=5@40
             full md c 4 - 64K 4x16M reshape=size=8M reshape=3@30
",
        );
        // c: reshape= twice is not alone.
        assert!(rows.is_err());
        let rows = parse_matrix(
            "fast raidkit a 5 ls 64K 5x16M size=12M reshape=4@40
             full md b 6 - 64K 6x16M size=12M reshape=5@40
",
        )
        .unwrap();
        let r = rows[0].reshape.as_ref().unwrap();
        assert_eq!((r.devices, r.level, r.percent), (4, None, 40));
        assert!(r.shrinks(5) && !r.shrinks(4));
        assert_eq!(rows[0].size_bytes, Some(12 << 20));
        assert_eq!(rows[1].reshape.as_ref().unwrap().devices, 5);
        assert_eq!(r.new_data_members(5), 3);
        for bad in [
            // Room behind the data is needed.
            "full raidkit a 5 ls 64K 5x16M reshape=4@40",
            // One member at a time.
            "full raidkit a 5 ls 64K 5x16M size=12M reshape=3@40",
            // Not while changing the level, layout or chunk, nor for a RAID 0 or 10.
            "full raidkit a 5 ls 64K 5x16M size=12M reshape=4,chunk:128K@40",
            "full raidkit a 0 - 64K 4x16M size=12M reshape=3@40",
            "full raidkit a 10 n2 64K 6x16M size=12M reshape=4@40",
            // A RAID 5 keeps 3 members, a RAID 6 4.
            "full raidkit a 5 ls 64K 3x16M size=12M reshape=2@40",
            "full raidkit a 6 - 64K 4x16M size=12M reshape=3@40",
            // size= only with reshape=, below the members' size.
            "full raidkit a 5 ls 64K 5x16M size=12M",
            "full raidkit a 5 ls 64K 5x16M size=16M reshape=4@40",
        ] {
            assert!(parse_matrix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_raid0_and_raid10_reshapes() {
        let rows = parse_matrix(
            "fast raidkit a 10 n2 64K 4x4M reshape=6@40
             full md b 10 n2 64K 4x16M reshape=6,chunk:128K@40
             full raidkit c 0 - 64K 3x16M reshape=level:5@40
             full md d 0 - 64K 3x16M reshape=level:5,4@40
             full raidkit e 0 - 64K 3x16M reshape=4@40
             full raidkit f 0 - 64K 3x16M reshape=level:6@40
",
        )
        .unwrap();
        let r: Vec<&ReshapeSpec> = rows.iter().map(|r| r.reshape.as_ref().unwrap()).collect();
        assert_eq!((r[0].devices, r[0].level, r[0].chunk_kib), (6, None, None));
        assert_eq!((r[1].devices, r[1].chunk_kib), (6, Some(128)));
        // A RAID 0 becoming a RAID 5 takes one more member (its parity) by default.
        assert_eq!((r[2].devices, r[2].level), (4, Some(5)));
        assert_eq!(r[2], r[3]);
        assert_eq!((r[4].devices, r[4].level), (4, None));
        assert_eq!((r[5].devices, r[5].level), (5, Some(6)));
        // What md records and counts while it runs them.
        let md = |i: usize| {
            let (spec, level) = (r[i], rows[i].level);
            (
                spec.md_level(level),
                spec.md_raid_devices(level),
                spec.fresh_members(level, rows[i].member_bytes.len()),
                spec.missing_after(level),
            )
        };
        assert_eq!(md(0), (10, 6, 0, 0));
        assert_eq!(md(2), (5, 4, 1, 0));
        // A RAID 0 growing runs as a RAID 4 with its parity slot empty, its spare recovering
        // in the old layout's parity slot; md leaves the parity slot empty at the end.
        assert_eq!(md(4), (4, 5, 1, 1));
        assert!(r[4].raid0_grows(0) && !r[2].raid0_grows(0) && !r[0].raid0_grows(10));
        assert_eq!(r[4].new_data_members(0), 4);
        assert_eq!(r[2].new_data_members(0), 3);
        assert_eq!(md(5), (6, 5, 2, 0));
        round_trips(&rows, &r);
    }

    #[test]
    fn takeover_rows_add_a_spare_per_member_only_for_raid0_to_10() {
        let rows = parse_matrix(
            "fast raidkit a 1 - - 2x8M takeover=5\nfast raidkit b 0 - 64K 3x8M takeover=10\n\
             fast raidkit c 10 n2 64K 4x8M takeover=raid0\nfast raidkit d 5 ls 64K 2x8M takeover=1\n",
        )
        .unwrap();
        let got: Vec<(Option<u32>, Option<usize>)> =
            rows.iter().map(|r| (r.takeover, r.with_spares())).collect();
        assert_eq!(
            got,
            vec![
                (Some(5), None),
                (Some(10), Some(6)),
                (Some(0), None),
                (Some(1), None)
            ]
        );
    }

    #[test]
    fn rejects_bad_rows() {
        for bad in [
            "fast md r5 5 ls 64K",
            "slow md r5 5 ls 64K 4x8M",
            "fast mdadm r5 5 ls 64K 4x8M",
            "fast md r5 7 ls 64K 4x8M",
            "fast md r5 5 ls 3K 4x8M",
            "fast md r5 5 ls 64K 1x8M",
            "fast md r_5 5 ls 64K 4x8M",
            "fast md r5 5 ls 64K 4x8M\nfast md r5 5 ls 64K 4x8M",
            "fast md r5 5 ls 64K 4x8M fail=1",
            "fast raidkit r5 5 ls 64K 4x8M fail=4",
            "fast raidkit r5 5 ls 64K 4x8M meta=0.9",
            "fast raidkit r5 5 ls 64K 4x8M bogus",
            "fast raidkit r5 5 ls 64K 4x8M fail=1,1",
            "fast raidkit r5 5 ls 64K 4x8M rebuild=0",
            "fast raidkit r5 5 ls 64K 4x8M rebuild=100",
            "fast raidkit r5 5 ls 64K 4x8M bitmap=3K",
            "fast raidkit r5 5 ls 64K 4x8M bitmap=48K",
            "fast raidkit r0 0 - 64K 4x8M bitmap",
            "fast raidkit r0 0 - 64K 4x8M rebuild=50",
            "fast md r5 5 ls 64K 4x8M bitmap",
            "fast md r1 1 - - 2x8M journal",
            "fast raidkit r10 10 n2 64K 4x8M journal",
            "fast raidkit r5 5 ls 64K 4x8M journal=maybe",
            "fast raidkit r5 5 ls 64K 4x8M journal=wb",
            "fast md r1 1 - - 2x8M journal=wb-crash",
            "fast raidkit r5 5 ls 64K 4x8M journal=wb-crash fail=1",
            "fast raidkit r5 5 ls 64K 4x8M journal bitmap",
            "fast raidkit r5 5 ls 64K 4x8M journal fail=1",
            "fast md r5 5 ls 64K 4x8M journal meta=1.0",
            "fast raidkit r6 6 ls 64K 5x8M ppl",
            "fast raidkit r4 4 - 64K 4x8M ppl=crash",
            "fast raidkit r5 5 ls 64K 4x8M ppl journal",
            "fast raidkit r5 5 ls 64K 4x8M ppl bitmap",
            "fast raidkit r5 5 ls 64K 4x8M ppl=crash fail=1",
            "fast raidkit r5 5 ls 64K 4x8M ppl=maybe",
            "fast raidkit r5 5 ls 64K 4x8M takeover=1",
            "fast raidkit r1 1 - - 3x8M takeover=5",
            "fast raidkit r10 10 n2 64K 3x8M takeover=0",
            "fast raidkit r10 10 f2 64K 4x8M takeover=0",
            "fast raidkit r0 0 - 64K 3x8M takeover=5",
            "fast md r1 1 - - 2x8M takeover=5",
            "fast raidkit r1 1 - - 2x8M takeover=5 meta=1.0",
            "fast raidkit r5 5 ls 64K 4x8M reshape=5",
            "fast raidkit r5 5 ls 64K 4x8M reshape=5@0",
            "fast raidkit r5 5 ls 64K 4x8M reshape=5@100",
            "fast raidkit r5 5 ls 64K 4x8M reshape=4@40",
            "fast raidkit r5 5 ls 64K 4x8M reshape=3@40",
            "fast raidkit r5 5 ls 64K 4x8M reshape=chunk:64K@40",
            "fast raidkit r5 5 ls 64K 4x8M reshape=chunk:48K@40",
            "fast raidkit r5 5 ls 64K 4x8M reshape=level:6,4@40",
            "fast raidkit r5 5 ls 64K 4x8M reshape=level:4@40",
            "fast raidkit r5 5 ls 64K 4x8M reshape=level:0@40",
            "fast raidkit r4 4 - 64K 4x8M reshape=level:5@40",
            "fast raidkit r5 5 ls 64K 4x8M reshape=5,5@40",
            "fast raidkit r5 5 ls 64K 4x8M reshape=size:1M@40",
            "fast raidkit r5 5 ls 64K 4x8M reshape=5@40 meta=1.0",
            "fast raidkit r1 1 - - 2x8M reshape=3@40",
            "fast md r10 10 n2 64K 4x8M reshape=3@40",
            "fast md r10 10 n2 64K 4x8M reshape=level:5,5@40",
            "fast md r10 10 n2 64K 4x8M reshape=layout:f2,6@40",
            "fast md r0 0 - 64K 3x8M reshape=3@40",
            "fast md r0 0 - 64K 3x8M reshape=chunk:128K,4@40",
            "fast md r0 0 - 64K 3x8M reshape=layout:left-symmetric,4@40",
            "fast md r0 0 - 64K 3x8M reshape=level:5,3@40",
            "fast md r0 0 - 64K 3x8M reshape=level:4,layout:parity-last@40",
            "fast md r0 0 - 64K 3x8M reshape=level:10,6@40",
        ] {
            assert!(parse_matrix(bad).is_err(), "accepted: {bad}");
        }
    }
}
