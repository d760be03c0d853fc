//! Turning matrix rows into VM batches: member images, job scripts and drive lists.
//!
//! A batch is one VM boot. Its directory holds `job.sh` (calls to the oracle_* functions of
//! tests/md-oracle/vm/vm-lib.sh), `drives` (one `serial image-path` line per member disk) and,
//! after the boot, `results`. `plan.json` in the work directory lists every array with its
//! batch and member images, which is all `check` needs besides the results.
//!
//! Two scenario types: [`Scenario::Create`] (md creates and writes in the VM; members start as
//! zeroed sparse images) and [`Scenario::Assemble`] (raidkit creates and writes the members on
//! the host before the boot, see [`crate::prepare`]; the VM assembles them with md). The
//! raidkit side's expectations (array size, data hash, its examine report) go into plan.json.
//!
//! Invariants: serials are unique within the plan and at most 20 bytes (virtio-blk's limit);
//! a batch never holds more than [`MAX_MEMBERS_PER_VM`] member disks (PCI slots).

use crate::matrix::{JournalMode, MatrixRow, PplMode, ReshapeSpec, Writer};
use crate::prepare::{prepare_array, RaidkitExpectation};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Member disks per VM. The run script puts eight virtio-blk functions in each PCI slot from
/// slot 2 on; in a VM with 128 disks, the functions in slots 15 and 16 were listed on the PCI
/// bus but never became block devices, while slots 2 to 14 (104 disks) always worked. 96
/// members plus the job and result disks stay inside slots 2 to 14.
pub const MAX_MEMBERS_PER_VM: usize = 96;

/// One member disk of a planned array.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedMember {
    pub serial: String,
    pub image: PathBuf,
    pub size_bytes: u64,
}

/// A write into the array (`len_bytes == None`: to the end): performed by the VM job
/// (create) or by raidkit on the host (assemble).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedWrite {
    pub seed: u64,
    pub offset_bytes: u64,
    pub len_bytes: Option<u64>,
    /// `journal=crash` and `journal=wb-crash` rows: made while the members drop every write,
    /// so only the write journal holds it (it comes after every other write).
    #[serde(default)]
    pub journal_only: bool,
}

/// The scenario type of an array: who writes it and who checks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// md creates and writes the array in the VM; raidkit checks the members on the host.
    Create,
    /// raidkit creates and writes the array on the host; md assembles and checks it in the VM.
    Assemble,
}

/// One array of the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedArray {
    pub name: String,
    pub kind: Scenario,
    pub level: u32,
    pub layout: Option<String>,
    pub chunk_kib: Option<u64>,
    pub batch: usize,
    pub md_device: String,
    pub members: Vec<PlannedMember>,
    pub writes: Vec<PlannedWrite>,
    /// Superblock version, mdadm's spelling ("1.2").
    #[serde(default = "default_metadata")]
    pub metadata: String,
    /// Assemble: the members raidkit fails after writing (ascending).
    #[serde(default)]
    pub fail_members: Vec<usize>,
    /// Assemble: spares raidkit adds for the failed members and rebuilds, stopping once the
    /// rebuild passed this percentage.
    #[serde(default)]
    pub rebuild_percent: Option<u8>,
    /// Assemble: the array has an internal write-intent bitmap of this chunk (0: mdadm's
    /// default).
    #[serde(default)]
    pub bitmap_chunk_bytes: Option<u64>,
    /// The last `spares` of `members` (before the journal) are the spares raidkit adds
    /// (rebuild); the others are the members the array is created with, in slot order.
    #[serde(default)]
    pub spares: usize,
    /// The array has a write journal: the last of `members` is the journal device.
    #[serde(default)]
    pub journal: Option<JournalMode>,
    /// raidkit rows: created with a background initialisation (its resync not run).
    #[serde(default)]
    pub init_background: bool,
    /// raidkit RAID 5 rows: the array has md's partial parity log.
    #[serde(default)]
    pub ppl: Option<PplMode>,
    /// Assemble: what raidkit wrote, for the check (set when the members were prepared).
    #[serde(default)]
    pub expect: Option<RaidkitExpectation>,
    /// raidkit rows: every member image grows by this many bytes and the array onto them.
    #[serde(default)]
    pub grow_bytes: Option<u64>,
    /// RAID 1 rows: the slot count raidkit grows the mirror to (the last `spares` members
    /// are the spares that take the new slots).
    #[serde(default)]
    pub mirrors: Option<usize>,
    /// raidkit rows: the level raidkit takes the array over as (the last `spares` members
    /// take a RAID 10's new copy slots).
    #[serde(default)]
    pub takeover: Option<u32>,
    /// RAID 0/4/5/6/10 rows: the reshape (the last `spares` members take the new slots) and
    /// where the side that starts it stops for the other to go on.
    #[serde(default)]
    pub reshape: Option<ReshapeSpec>,
    /// Reshape rows: bytes of each member the array is created with (mdadm's `--size`),
    /// leaving room behind the data.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// Assemble: why raidkit could not prepare the members.
    #[serde(default)]
    pub prepare_error: Option<String>,
    /// A RAID 50/60 stack of this many spans (`level` is the spans'): `md_device` is the
    /// RAID 0, the spans the md devices numbered after it.
    #[serde(default)]
    pub spans: Option<usize>,
}

fn default_metadata() -> String {
    "1.2".to_string()
}

impl PlannedArray {
    /// Members the array is created with (its raid devices).
    pub fn raid_devices(&self) -> usize {
        self.members.len() - self.spares - usize::from(self.journal.is_some())
    }

    /// The journal device, when the array has one (the last image).
    pub fn journal_member(&self) -> Option<&PlannedMember> {
        self.journal.and(self.members.last())
    }

    /// The writes every member received (all but the journal-only ones).
    pub fn member_writes(&self) -> usize {
        self.writes.iter().filter(|w| !w.journal_only).count()
    }

    /// Members that are part of the running array once raidkit is done: all but the failed
    /// ones (a rebuilt spare takes its failed member's place).
    pub fn working_members(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|i| !self.fail_members.contains(i))
            .collect()
    }

    /// Slots md must find without a member once done (failed and not being rebuilt; the
    /// parity slot of a RAID 0 md grew as a RAID 4).
    pub fn expected_missing(&self) -> usize {
        if let Some(r) = &self.reshape {
            r.missing_after(self.level)
        } else if self.rebuild_percent.is_some() {
            0
        } else {
            self.fail_members.len()
        }
    }

    /// A reshape to fewer members: the array's size once shrunk, in KiB (mdadm's
    /// `--array-size`): the new data members times what each member holds (`size_bytes`,
    /// whole chunks, as mdadm rounds `--size`).
    pub fn shrunk_array_kib(&self) -> Option<u64> {
        let r = self.reshape.as_ref()?;
        if !r.shrinks(self.raid_devices()) {
            return None;
        }
        let chunk = self.chunk_kib.unwrap_or(512);
        let member = self.size_bytes? / 1024 / chunk * chunk;
        Some(member * r.new_data_members(self.level) as u64)
    }

    /// The members md is given: every one, but for a RAID 10 taken over as a RAID 0, whose
    /// odd slots' members left the array with their superblocks as they were (as after
    /// mdadm's own takeover, whose --assemble refuses them beside the others: "superblock
    /// doesn't match others").
    pub fn md_members(&self) -> impl Iterator<Item = &PlannedMember> {
        let step = if self.level == 10 && self.takeover == Some(0) {
            2
        } else {
            1
        };
        self.members.iter().step_by(step)
    }

    /// The words telling the VM job what else to do and record for this array.
    pub fn vm_flags(&self) -> String {
        let mut f = Vec::new();
        if self.bitmap_chunk_bytes.is_some() {
            f.push("bitmap");
        }
        if self.rebuild_percent.is_some() {
            f.push("rebuild");
        }
        if self.reshape.is_some() {
            f.push("reshape");
        }
        // md rows: mdadm --create --size (KiB).
        let size = self
            .size_bytes
            .filter(|_| self.kind == Scenario::Create)
            .map(|b| format!("size={}", b / 1024));
        if let Some(size) = &size {
            f.push(size);
        }
        if self.kind == Scenario::Create {
            match self.ppl {
                Some(PplMode::Clean) => f.push("ppl"),
                Some(PplMode::Crash) => f.extend(["ppl", "crash"]),
                None => {}
            }
        }
        match self.journal {
            // The VM makes the crash of arrays md creates; raidkit made its own.
            Some(j) if j.crashes() && self.kind == Scenario::Create => {
                f.extend(["journal", "crash"])
            }
            Some(_) => f.push("journal"),
            None => {}
        }
        if f.is_empty() {
            "-".to_string()
        } else {
            f.join(",")
        }
    }
}

/// Image sizes of a row: its members, then (rebuild rows) one spare per failed member, of that
/// member's size, then (journal rows) the journal device, of the first member's size.
fn image_sizes(row: &MatrixRow) -> Vec<u64> {
    let mut v = row.member_bytes.clone();
    if row.rebuild_percent.is_some() {
        v.extend(row.fail_members.iter().map(|&m| row.member_bytes[m]));
    }
    if let Some(m) = row.with_spares() {
        v.extend((row.member_bytes.len()..m).map(|_| row.member_bytes[0]));
    }
    if row.journal.is_some() {
        v.push(row.member_bytes[0]);
    }
    v
}

/// The whole plan, as stored in `plan.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub batches: usize,
    pub arrays: Vec<PlannedArray>,
}

/// Bytes of array data per stripe, roughly (only used to place the partial writes inside the
/// second and third stripe; exactness does not matter, staying inside the array does).
fn stripe_bytes(row: &MatrixRow) -> u64 {
    let n = row.member_bytes.len() as u64;
    let chunk = row.chunk_kib.unwrap_or(64) * 1024;
    match row.level {
        0 => n * chunk,
        4 | 5 => (n - 1) * chunk,
        6 => n.saturating_sub(2).max(1) * chunk,
        10 => (n / 2).max(1) * chunk,
        _ => chunk,
    }
}

/// The writes of a `create` scenario: fill the whole array (seed 1), then a short write in the
/// middle of a data chunk of stripe 1 (seed 2) and one across a chunk boundary in stripe 2
/// (seed 3), so md's read-modify-write and reconstruct-write paths both leave their mark.
fn create_writes(row: &MatrixRow) -> Vec<PlannedWrite> {
    let chunk = row.chunk_kib.unwrap_or(64) * 1024;
    let stripe = stripe_bytes(row);
    vec![
        PlannedWrite {
            seed: 1,
            offset_bytes: 0,
            len_bytes: None,
            journal_only: false,
        },
        PlannedWrite {
            seed: 2,
            offset_bytes: stripe + chunk / 2,
            len_bytes: Some((chunk / 2).min(4096)),
            journal_only: false,
        },
        PlannedWrite {
            seed: 3,
            offset_bytes: 2 * stripe + chunk - 2048,
            len_bytes: Some(4096),
            journal_only: false,
        },
    ]
}

/// The writes only the journal keeps (`journal=crash`): made while the members drop every
/// write, one each in stripes 5, 6 and 7 (a 4 KiB write inside a chunk, a short one inside a
/// 4 KiB block, unaligned on raidkit rows, and a 4 KiB one across a chunk boundary). No two
/// share a stripe: each reads the old data of its stripe from the members, which the dropped
/// writes did not change.
fn crash_writes(row: &MatrixRow) -> Vec<PlannedWrite> {
    let chunk = row.chunk_kib.unwrap_or(64) * 1024;
    let stripe = stripe_bytes(row);
    // md rows write through rkpattern, which needs whole sectors.
    let (short_at, short_len) = match row.by {
        Writer::Md => (1024, 2048),
        Writer::Raidkit => (1000, 3000),
    };
    [
        (8, 5 * stripe + chunk / 2, 4096),
        (9, 6 * stripe + chunk + short_at, short_len),
        (10, 7 * stripe + chunk - 2048, 4096),
    ]
    .into_iter()
    .map(|(seed, offset_bytes, len)| PlannedWrite {
        seed,
        offset_bytes,
        len_bytes: Some(len),
        journal_only: true,
    })
    .collect()
}

/// The write md makes as it crashes (`ppl=crash` md rows): inside the first data chunk of
/// stripe 1, a quarter of a chunk in, half a chunk long (one data member: one log entry with
/// partial parity). Only its data member and md's log get it; its parity member drops it.
fn ppl_crash_write(row: &MatrixRow) -> PlannedWrite {
    let chunk = row.chunk_kib.unwrap_or(512) * 1024;
    PlannedWrite {
        seed: 61,
        offset_bytes: stripe_bytes(row) + chunk / 4,
        len_bytes: Some(chunk / 2),
        journal_only: true,
    }
}

/// The serial of the member holding the parity of the stripe `w` writes (md rows with
/// `ppl=crash`; md gives slots in the order of the members).
pub fn ppl_parity_serial(a: &PlannedArray, w: &PlannedWrite) -> Option<String> {
    let layout = crate::prepare::layout_number(a.level, a.layout.as_deref())
        .ok()?
        .unwrap_or(2);
    let n = a.raid_devices();
    let chunk_sectors = (a.chunk_kib.unwrap_or(512) * 2) as u32;
    let geo = raidkit_layout::Geometry::from_md(&raidkit_layout::MdParams {
        level: a.level as i32,
        layout,
        raid_disks: n as u32,
        chunk_sectors,
        member_data_sectors: vec![u64::from(chunk_sectors) * 64; n],
    })
    .ok()?;
    let data = (n - 1) as u64;
    let stripe = w.offset_bytes / 512 / u64::from(chunk_sectors) / data;
    let p = geo.stripe_map(stripe).ok()?.p_member as usize;
    a.members.get(p).map(|m| m.serial.clone())
}

/// The writes raidkit makes (assemble scenario): those of [`create_writes`] plus one that is
/// not sector aligned (raidkit reads, patches and writes back the edge sectors), in stripe 3.
fn raidkit_writes(row: &MatrixRow) -> Vec<PlannedWrite> {
    let mut w = create_writes(row);
    w.push(PlannedWrite {
        seed: 4,
        offset_bytes: 3 * stripe_bytes(row) + 777,
        len_bytes: Some(3000),
        journal_only: false,
    });
    w
}

/// Assign rows to batches (VM boots). `lanes` VMs run at a time (the run script starts the
/// batches in index order and the next one whenever a VM ends), so batch `b` runs in lane
/// `b % lanes`. There are at least `lanes` batches (to keep every core busy), more if the
/// member disks do not fit; a lane with k batches gets batches of about 1/k of the load of a
/// lane with one, so that the lanes end together. The biggest arrays go first, each to the
/// batch whose lane would end earliest.
pub fn make_plan(rows: &[MatrixRow], work: &Path, lanes: usize) -> Plan {
    let lanes = lanes.max(1);
    let total_members: usize = rows.iter().map(|r| image_sizes(r).len()).sum();
    let mut batches = lanes
        .max(total_members.div_ceil(MAX_MEMBERS_PER_VM))
        .min(rows.len().max(1));
    // Batches in the lane of batch b.
    let mut per_lane: Vec<u64> = (0..batches)
        .map(|b| ((batches - b % lanes.min(batches)).div_ceil(lanes.min(batches))) as u64)
        .collect();
    let mut order: Vec<usize> = (0..rows.len()).collect();
    let cost = |r: &MatrixRow| image_sizes(r).iter().sum::<u64>();
    order.sort_by_key(|&i| std::cmp::Reverse(cost(&rows[i])));
    let mut load = vec![(0u64, 0usize); batches];
    let mut batch_of = vec![0usize; rows.len()];
    for &i in &order {
        let disks = image_sizes(&rows[i]).len();
        let c = cost(&rows[i]);
        let pick = (0..batches)
            .filter(|&b| load[b].1 + disks <= MAX_MEMBERS_PER_VM)
            .min_by_key(|&b| (load[b].0 + c) * per_lane[b]);
        let b = match pick {
            Some(b) => b,
            None => {
                load.push((0, 0));
                per_lane.push(1);
                batches += 1;
                batches - 1
            }
        };
        load[b].0 += c;
        load[b].1 += disks;
        batch_of[i] = b;
    }
    let mut next_md = vec![0usize; batches];
    let arrays = rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let b = batch_of[i];
            let md_device = format!("md{}", next_md[b]);
            // A stack's spans take the md devices after its RAID 0's.
            next_md[b] += 1 + row.spans.unwrap_or(0);
            let members = image_sizes(row)
                .iter()
                .enumerate()
                .map(|(m, &size_bytes)| PlannedMember {
                    serial: format!("rk{i}m{m}"),
                    image: work
                        .join(format!("batch{b}"))
                        .join(format!("{}.m{m}.img", row.name)),
                    size_bytes,
                })
                .collect();
            let (kind, mut writes) = match row.by {
                Writer::Md => (Scenario::Create, create_writes(row)),
                Writer::Raidkit => (Scenario::Assemble, raidkit_writes(row)),
            };
            if row.journal.is_some_and(JournalMode::crashes) {
                writes.extend(crash_writes(row));
            }
            if row.ppl == Some(PplMode::Crash) && row.by == Writer::Md {
                writes.push(ppl_crash_write(row));
            }
            PlannedArray {
                name: row.name.clone(),
                kind,
                level: row.level,
                layout: row.layout.clone(),
                chunk_kib: row.chunk_kib,
                batch: b,
                md_device,
                members,
                writes,
                metadata: row.metadata.name().to_string(),
                fail_members: row.fail_members.clone(),
                rebuild_percent: row.rebuild_percent,
                bitmap_chunk_bytes: row.bitmap_chunk_bytes,
                spares: if row.rebuild_percent.is_some() {
                    row.fail_members.len()
                } else {
                    row.with_spares()
                        .map_or(0, |m| m.saturating_sub(row.member_bytes.len()))
                },
                journal: row.journal,
                init_background: row.init_background,
                ppl: row.ppl,
                grow_bytes: row.grow_bytes,
                mirrors: row.mirrors,
                takeover: row.takeover,
                reshape: row.reshape.clone(),
                size_bytes: row.size_bytes,
                expect: None,
                prepare_error: None,
                spans: row.spans,
            }
        })
        .collect();
    Plan { batches, arrays }
}

/// mdadm's `--grow` options of a reshape, for the VM job: a comma list of `option=value`
/// (`raid-devices=5,level=6`), each passed as `--option=value`. The member count is given when
/// it changes (mdadm's level change to 6 needs it), the chunk in KiB.
///
/// A RAID 0 reshapes in two `mdadm --grow` runs, `TAKEOVER/RESHAPE`: mdadm's single run takes
/// the RAID 0 over (a RAID 4, or a RAID 5 parity-last, with its parity slot empty) and
/// reshapes it at once, but a RAID 0 has no `sync_max` to hold md at, so the VM first has
/// mdadm make only the takeover (`--level=4`, `--level=5 --layout=parity-last`: mdadm
/// changes the level then and nothing else), sets `sync_max`, and asks for the rest (for a
/// RAID 0 growing `--level=0` and the RAID 0's new count, what mdadm's single run asks md
/// for after its takeover; the layout of a new RAID 5 named, mdadm's default
/// left-symmetric, for after the takeover mdadm would keep parity-last).
///
/// Fewer members (md's backwards reshape) are two runs too, `SHRINK/RESHAPE`: mdadm's
/// `--array-size` to the new size first (mdadm refuses to give up a member of an array
/// larger than what is left), then `--raid-devices`, after `direction=backwards` (not
/// mdadm's: the VM writes it to sysfs `reshape_direction` first, without which md refuses the
/// new offset mdadm 4.2 sets above the data offset).
pub fn grow_options(a: &PlannedArray, r: &ReshapeSpec) -> String {
    let mut o = Vec::new();
    if let Some(kib) = a.shrunk_array_kib() {
        return format!(
            "array-size={kib}/direction=backwards,raid-devices={}",
            r.devices
        );
    }
    if a.level == 0 {
        let (takeover, layout) = match r.level {
            None => ("level=4".to_string(), None),
            Some(4) => ("level=4".to_string(), None),
            Some(5) => (
                "level=5,layout=parity-last".to_string(),
                Some(r.layout.as_deref().unwrap_or("left-symmetric")),
            ),
            Some(l) => (
                format!("level={l},layout=parity-last"),
                Some(r.layout.as_deref().unwrap_or("left-symmetric")),
            ),
        };
        // mdadm changes a chunk alone ("Cannot change array level in the same operation as
        // changing chunk size").
        if r.level.is_some() || r.devices != a.raid_devices() {
            o.push(format!("level={}", r.level.unwrap_or(0)));
            o.push(format!("raid-devices={}", r.devices));
        }
        if let Some(l) = layout {
            o.push(format!("layout={l}"));
        }
        if let Some(c) = r.chunk_kib {
            o.push(format!("chunk={c}"));
        }
        return format!("{takeover}/{}", o.join(","));
    }
    if let Some(l) = r.level {
        o.push(format!("level={l}"));
    }
    if r.devices != a.raid_devices() {
        o.push(format!("raid-devices={}", r.devices));
    }
    if let Some(l) = &r.layout {
        o.push(format!("layout={l}"));
    }
    if let Some(c) = r.chunk_kib {
        o.push(format!("chunk={c}"));
    }
    o.join(",")
}

/// The job script lines of one array (none for an array raidkit could not prepare: its check
/// reports why).
pub fn job_lines(a: &PlannedArray) -> String {
    if let Some(spans) = a.spans {
        return stack_job_lines(a, spans);
    }
    let serials: Vec<&str> = a.md_members().map(|m| m.serial.as_str()).collect();
    // md rows that reshape: the array is created without the spares added for it.
    let (created, spares) = match (a.kind, &a.reshape) {
        (Scenario::Create, Some(_)) => serials.split_at(a.raid_devices()),
        _ => (&serials[..], &[][..]),
    };
    let (created, spares) = (created.join(" "), spares.join(" "));
    let serials = serials.join(" ");
    let mut s = String::new();
    // Writing to a String cannot fail.
    match a.kind {
        Scenario::Create => {
            let layout = a.layout.as_deref().unwrap_or("-");
            let chunk = a.chunk_kib.map_or("-".to_string(), |c| c.to_string());
            let _ = writeln!(
                s,
                "oracle_create {} {} {} {} {} {} {}",
                a.name,
                a.md_device,
                a.level,
                layout,
                chunk,
                a.vm_flags(),
                created
            );
            let ppl_crash = a.ppl == Some(PplMode::Crash);
            let write_back = a.journal.is_some_and(JournalMode::write_back);
            for (i, w) in a.writes.iter().enumerate() {
                if w.journal_only && (i == 0 || !a.writes[i - 1].journal_only) {
                    if ppl_crash {
                        // The parity member drops writes to its data area (dm-flakey).
                        let p = ppl_parity_serial(a, w).unwrap_or_else(|| "-".into());
                        let _ = writeln!(
                            s,
                            "oracle_ppl_crash_arm {} {} {p} {}",
                            a.name, a.md_device, serials
                        );
                    } else {
                        // From here on the members drop every write (dm-flakey under md).
                        let _ =
                            writeln!(s, "oracle_crash_arm {} {} {}", a.name, a.md_device, serials);
                        if write_back {
                            // The journal-only writes in md's write-back mode: logged as
                            // data alone, cached, not written back.
                            let _ = writeln!(
                                s,
                                "oracle_journal_mode {} {} write-back",
                                a.name, a.md_device
                            );
                        }
                    }
                }
                let len = w.len_bytes.map_or("rest".to_string(), |l| l.to_string());
                let _ = writeln!(
                    s,
                    "oracle_write {} {} {} {} {}",
                    a.name, a.md_device, w.seed, w.offset_bytes, len
                );
            }
            if ppl_crash || write_back {
                // Then every device drops every write (under write-back the journal too, or
                // md's stop would log the cached stripes' parity and write them back): md's
                // stop is a crash.
                let _ = writeln!(s, "dm_drop_writes {} - 0 {}", a.name, serials);
            }
            if let Some(r) = &a.reshape {
                let _ = writeln!(
                    s,
                    "oracle_reshape {} {} {} {} {spares}",
                    a.name,
                    a.md_device,
                    grow_options(a, r),
                    r.percent
                );
            }
        }
        Scenario::Assemble => {
            let Some(expect) = &a.expect else {
                return s;
            };
            let _ = writeln!(
                s,
                "oracle_assemble {} {} {} {} {}",
                a.name,
                a.md_device,
                expect.sha256,
                a.vm_flags(),
                serials
            );
        }
    }
    let _ = writeln!(
        s,
        "oracle_report {} {} {} {}",
        a.name,
        a.md_device,
        a.vm_flags(),
        serials
    );
    s
}

/// The job of a RAID 50/60 stack: md creates and writes it (the spans, then the RAID 0 on
/// them), or assembles raidkit's (the spans from their members, then the RAID 0); then
/// measures the RAID 0, checks every span and stops them all.
fn stack_job_lines(a: &PlannedArray, spans: usize) -> String {
    let serials: Vec<&str> = a.members.iter().map(|m| m.serial.as_str()).collect();
    let serials = serials.join(" ");
    let layout = a.layout.as_deref().unwrap_or("-");
    let chunk = a.chunk_kib.map_or("-".to_string(), |c| c.to_string());
    let mut s = String::new();
    match a.kind {
        Scenario::Create => {
            let _ = writeln!(
                s,
                "oracle_create_stack {} {} {} {} {} {spans} {serials}",
                a.name, a.md_device, a.level, layout, chunk
            );
            for w in &a.writes {
                let len = w.len_bytes.map_or("rest".to_string(), |l| l.to_string());
                let _ = writeln!(
                    s,
                    "oracle_write {} {} {} {} {}",
                    a.name, a.md_device, w.seed, w.offset_bytes, len
                );
            }
        }
        Scenario::Assemble => {
            let Some(expect) = &a.expect else {
                return s;
            };
            let _ = writeln!(
                s,
                "oracle_assemble_stack {} {} {} {spans} {serials}",
                a.name, a.md_device, expect.sha256
            );
        }
    }
    let _ = writeln!(s, "oracle_report_stack {} {} {spans}", a.name, a.md_device);
    s
}

/// Prepare the members of every assemble array with raidkit (in parallel, `threads` at a
/// time), recording the expectations or the error in the plan.
pub fn prepare_arrays(plan: &mut Plan, threads: usize) {
    let todo: Vec<usize> = (0..plan.arrays.len())
        .filter(|&i| plan.arrays[i].kind == Scenario::Assemble)
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    let arrays = &plan.arrays;
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&i) = todo.get(k) else {
                    break;
                };
                let r = prepare_array(&arrays[i]);
                if let Ok(mut v) = results.lock() {
                    v.push((i, r));
                }
            });
        }
    });
    let results = match results.into_inner() {
        Ok(v) => v,
        Err(p) => p.into_inner(),
    };
    let mut done = vec![false; plan.arrays.len()];
    for (i, r) in results {
        done[i] = true;
        match r {
            Ok(e) => plan.arrays[i].expect = Some(e),
            Err(e) => plan.arrays[i].prepare_error = Some(e.to_string()),
        }
    }
    for i in todo {
        if !done[i] {
            plan.arrays[i].prepare_error = Some("the preparing thread panicked".into());
        }
    }
}

/// Create the batch directories, member images (zeroed sparse files for create arrays;
/// raidkit-written ones for assemble arrays, [`prepare_arrays`]), job scripts, drive lists
/// and plan.json under `work`.
pub fn write_plan(plan: &mut Plan, work: &Path, threads: usize) -> io::Result<()> {
    for b in 0..plan.batches {
        fs::create_dir_all(work.join(format!("batch{b}")))?;
    }
    for a in plan.arrays.iter().filter(|a| a.kind == Scenario::Create) {
        for m in &a.members {
            let f = fs::File::create(&m.image)?;
            f.set_len(m.size_bytes)?;
        }
    }
    prepare_arrays(plan, threads);
    for b in 0..plan.batches {
        let dir = work.join(format!("batch{b}"));
        let mut job = String::new();
        let mut drives = String::new();
        for a in plan.arrays.iter().filter(|a| a.batch == b) {
            job.push_str(&job_lines(a));
            for m in &a.members {
                if m.image.exists() {
                    let _ = writeln!(drives, "{} {}", m.serial, m.image.display());
                }
            }
        }
        fs::write(dir.join("job.sh"), job)?;
        fs::write(dir.join("drives"), drives)?;
    }
    let json = serde_json::to_string_pretty(plan).map_err(io::Error::other)?;
    fs::write(work.join("plan.json"), json)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `oracle_reshape` line of array `i`'s job, if any.
    fn reshape_line(plan: &Plan, i: usize) -> Option<String> {
        job_lines(&plan.arrays[i])
            .lines()
            .find(|l| l.starts_with("oracle_reshape"))
            .map(str::to_string)
    }
    use crate::matrix::parse_matrix;

    #[test]
    fn batches_respect_the_disk_limit_and_serials_are_unique() {
        let mut text = String::new();
        for i in 0..40 {
            text.push_str(&format!("fast md a{i} 6 left-symmetric 64K 8x8M\n"));
        }
        let rows = parse_matrix(&text).unwrap();
        let plan = make_plan(&rows, Path::new("/w"), 2);
        assert!(plan.batches >= 320usize.div_ceil(MAX_MEMBERS_PER_VM));
        let mut serials = std::collections::BTreeSet::new();
        for b in 0..plan.batches {
            let disks: usize = plan
                .arrays
                .iter()
                .filter(|a| a.batch == b)
                .map(|a| a.members.len())
                .sum();
            assert!(disks <= MAX_MEMBERS_PER_VM, "batch {b} has {disks} disks");
        }
        for a in &plan.arrays {
            for m in &a.members {
                assert!(m.serial.len() <= 20);
                assert!(serials.insert(m.serial.clone()));
            }
        }
    }

    #[test]
    fn a_lane_with_two_boots_gets_two_half_batches() {
        // 212 disks: three boots for two VMs at a time. Batch 1 runs alone in its lane,
        // batches 0 and 2 one after the other in the other lane.
        let mut text = String::new();
        for i in 0..53 {
            text.push_str(&format!("fast md a{i} 5 left-symmetric 64K 4x4M\n"));
        }
        let rows = parse_matrix(&text).unwrap();
        let plan = make_plan(&rows, Path::new("/w"), 2);
        assert_eq!(plan.batches, 3);
        let disks = |b: usize| -> usize {
            plan.arrays
                .iter()
                .filter(|a| a.batch == b)
                .map(|a| a.members.len())
                .sum()
        };
        assert!(disks(1) <= MAX_MEMBERS_PER_VM);
        assert!(disks(1) > disks(0) && disks(1) > disks(2));
        assert!(disks(0) + disks(2) >= disks(1));
        assert_eq!(disks(0) + disks(1) + disks(2), 212);
    }

    #[test]
    fn job_lines_name_every_member_and_write() {
        let rows = parse_matrix("fast md r6 6 left-symmetric 64K 4x8M\n").unwrap();
        let plan = make_plan(&rows, Path::new("/w"), 2);
        let job = job_lines(&plan.arrays[0]);
        assert!(
            job.starts_with("oracle_create r6 md0 6 left-symmetric 64 - rk0m0 rk0m1 rk0m2 rk0m3\n")
        );
        assert!(job.contains("oracle_write r6 md0 1 0 rest\n"));
        assert!(job.contains("oracle_write r6 md0 2 163840 4096\n"));
        assert!(job.ends_with("oracle_report r6 md0 - rk0m0 rk0m1 rk0m2 rk0m3\n"));
    }

    #[test]
    fn reshape_rows_add_their_spares_and_tell_mdadm_what_changes() {
        let rows = parse_matrix(
            "fast md a 5 left-symmetric 64K 4x16M reshape=5@40
             fast md b 5 left-symmetric 64K 4x16M reshape=chunk:512K@40
             full md c 5 left-symmetric 64K 4x32M reshape=level:6,5@40
             full raidkit d 5 left-symmetric 64K 4x16M reshape=level:6@40
",
        )
        .unwrap();
        let plan = make_plan(&rows, Path::new("/w"), 1);
        let spares: Vec<usize> = plan.arrays.iter().map(|a| a.spares).collect();
        assert_eq!(spares, vec![1, 0, 1, 1]);
        for a in &plan.arrays {
            assert_eq!(a.raid_devices(), 4);
        }
        let line = |i: usize| reshape_line(&plan, i);
        assert_eq!(
            line(0).as_deref(),
            Some("oracle_reshape a md0 raid-devices=5 40 rk0m4")
        );
        assert_eq!(
            line(1).as_deref(),
            Some("oracle_reshape b md1 chunk=512 40 ")
        );
        assert_eq!(
            line(2).as_deref(),
            Some("oracle_reshape c md2 level=6,raid-devices=5 40 rk2m4")
        );
        // md creates the array without the spares, which oracle_reshape adds.
        assert!(job_lines(&plan.arrays[2]).starts_with(
            "oracle_create c md2 5 left-symmetric 64 reshape rk2m0 rk2m1 rk2m2 rk2m3\n"
        ));
        assert_eq!(plan.arrays[3].members.len(), 5);
    }

    #[test]
    fn shrink_rows_set_the_array_size_first() {
        let rows = parse_matrix(
            "full md a 5 left-symmetric 64K 5x16M size=12M reshape=4@40
             full md b 6 - 64K 6x16M size=12M reshape=5@40
             full raidkit c 5 left-symmetric 64K 5x16M size=12M reshape=4@40
",
        )
        .unwrap();
        let plan = make_plan(&rows, Path::new("/w"), 1);
        for (a, members) in plan.arrays.iter().zip([5, 6, 5]) {
            assert_eq!((a.spares, a.members.len()), (0, members));
            // 3 data members of 12 MiB each once shrunk.
            assert_eq!(a.shrunk_array_kib(), Some(3 * 12 * 1024));
        }
        let jobs = |i: usize| job_lines(&plan.arrays[i]);
        // md creates the array with --size (KiB), then shrinks it and gives up a member.
        assert!(jobs(0).starts_with(
            "oracle_create a md0 5 left-symmetric 64 reshape,size=12288 rk0m0 rk0m1 rk0m2 rk0m3 rk0m4\n"
        ));
        assert!(jobs(0).contains(
            "oracle_reshape a md0 array-size=36864/direction=backwards,raid-devices=4 40 \n"
        ));
        assert!(jobs(1).contains(
            "oracle_reshape b md1 array-size=36864/direction=backwards,raid-devices=5 40 \n"
        ));
        // raidkit makes the array itself: no size in the VM's flags.
        assert_eq!(plan.arrays[2].vm_flags(), "reshape");
    }

    #[test]
    fn raid0_and_raid10_reshape_rows() {
        let rows = parse_matrix(
            "full md a 0 - 64K 3x16M reshape=level:5@40
             full md b 0 - 64K 3x16M reshape=4@40
             full md c 10 n2 64K 4x16M reshape=6@40
             full raidkit d 0 - 64K 3x16M reshape=4@40
",
        )
        .unwrap();
        let plan = make_plan(&rows, Path::new("/w"), 1);
        let spares: Vec<usize> = plan.arrays.iter().map(|a| a.spares).collect();
        assert_eq!(spares, vec![1, 1, 2, 1]);
        let line = |i: usize| reshape_line(&plan, i);
        // A RAID 0: the takeover alone, then the reshape (its spares added with it).
        assert_eq!(
            line(0).as_deref(),
            Some("oracle_reshape a md0 level=5,layout=parity-last/level=5,raid-devices=4,layout=left-symmetric 40 rk0m3")
        );
        assert_eq!(
            line(1).as_deref(),
            Some("oracle_reshape b md1 level=4/level=0,raid-devices=4 40 rk1m3")
        );
        assert_eq!(
            line(2).as_deref(),
            Some("oracle_reshape c md2 raid-devices=6 40 rk2m4 rk2m5")
        );
        assert_eq!(plan.arrays[3].members.len(), 4);
    }

    #[test]
    fn journal_rows_add_the_journal_image_and_arm_the_crash_before_the_last_writes() {
        let rows = parse_matrix(
            "fast md j6 6 left-symmetric 32K 5x4M journal=crash\nfast md j5 5 ls 64K 4x4M journal\n",
        )
        .unwrap();
        let plan = make_plan(&rows, Path::new("/w"), 1);
        let a = &plan.arrays[0];
        assert_eq!(a.members.len(), 6);
        assert_eq!(a.raid_devices(), 5);
        assert_eq!(a.journal_member().map(|m| m.serial.as_str()), Some("rk0m5"));
        assert_eq!(a.member_writes(), 3);
        assert_eq!(a.writes.len(), 6);
        let job = job_lines(a);
        let serials = "rk0m0 rk0m1 rk0m2 rk0m3 rk0m4 rk0m5";
        assert!(job.starts_with(&format!(
            "oracle_create j6 md0 6 left-symmetric 32 journal,crash {serials}\n"
        )));
        let arm = job.find("oracle_crash_arm j6 md0").unwrap();
        assert!(job[..arm].contains("oracle_write j6 md0 3 "));
        assert!(!job[..arm].contains("oracle_write j6 md0 8 "));
        assert!(job[arm..].contains("oracle_write j6 md0 8 "));
        assert!(job[arm..].contains("oracle_write j6 md0 10 "));
        assert!(job.ends_with(&format!("oracle_report j6 md0 journal,crash {serials}\n")));
        // Crash writes: whole sectors on md rows, distinct stripes.
        for w in a.writes.iter().filter(|w| w.journal_only) {
            assert_eq!(w.offset_bytes % 512, 0);
            assert_eq!(w.len_bytes.unwrap() % 512, 0);
        }
        let b = &plan.arrays[1];
        assert_eq!(b.members.len(), 5);
        assert_eq!(b.raid_devices(), 4);
        assert!(!job_lines(b).contains("oracle_crash_arm"));
        assert!(job_lines(b).contains(" journal rk1m0 "));
    }

    #[test]
    fn write_back_rows_set_md_s_journal_mode_after_arming_and_drop_the_journal_s_writes_before_the_stop(
    ) {
        let rows = parse_matrix("fast md w6 6 left-symmetric 64K 5x4M journal=wb-crash\n").unwrap();
        let plan = make_plan(&rows, Path::new("/w"), 1);
        let a = &plan.arrays[0];
        assert_eq!(a.journal, Some(JournalMode::WriteBackCrash));
        assert_eq!(a.member_writes(), 3);
        assert_eq!(a.writes.len(), 6);
        let job = job_lines(a);
        let serials = "rk0m0 rk0m1 rk0m2 rk0m3 rk0m4 rk0m5";
        assert!(job.starts_with(&format!(
            "oracle_create w6 md0 6 left-symmetric 64 journal,crash {serials}\n"
        )));
        let arm = job.find("oracle_crash_arm w6 md0").unwrap();
        let mode = job.find("oracle_journal_mode w6 md0 write-back\n").unwrap();
        let first = job.find("oracle_write w6 md0 8 ").unwrap();
        let last = job.find("oracle_write w6 md0 10 ").unwrap();
        let drop = job
            .find(&format!("dm_drop_writes w6 - 0 {serials}\n"))
            .unwrap();
        assert!(arm < mode && mode < first && last < drop);
        assert!(job.ends_with(&format!(
            "dm_drop_writes w6 - 0 {serials}\noracle_report w6 md0 journal,crash {serials}\n"
        )));
        // The plan keeps the mode (plan.json).
        let json = serde_json::to_string(a).unwrap();
        assert!(json.contains("\"journal\":\"wb-crash\""));
        let back: PlannedArray = serde_json::from_str(&json).unwrap();
        assert_eq!(back.journal, Some(JournalMode::WriteBackCrash));
    }

    #[test]
    fn assemble_rows_are_prepared_by_raidkit_and_assembled_by_md() {
        let work = std::env::temp_dir().join(format!("raidkit-oracle-plan-{}", std::process::id()));
        let rows =
            parse_matrix("fast raidkit rk5 5 right-asymmetric 16K 3x1M fail=1 meta=1.0\n").unwrap();
        let mut plan = make_plan(&rows, &work, 1);
        assert_eq!(plan.arrays[0].kind, Scenario::Assemble);
        // No VM job before raidkit prepared the members.
        assert_eq!(job_lines(&plan.arrays[0]), "");
        write_plan(&mut plan, &work, 1).unwrap();
        let a = &plan.arrays[0];
        assert_eq!(a.prepare_error, None);
        let sha = &a.expect.as_ref().unwrap().sha256;
        let job = fs::read_to_string(work.join("batch0/job.sh")).unwrap();
        let _ = fs::remove_dir_all(&work);
        assert_eq!(
            job,
            format!(
                "oracle_assemble rk5 md0 {sha} - rk0m0 rk0m1 rk0m2\noracle_report rk5 md0 - rk0m0 rk0m1 rk0m2\n"
            )
        );
        assert!(!job.contains("oracle_write"));
    }
}
