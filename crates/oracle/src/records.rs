//! Result records written by the VM (tests/md-oracle/vm/vm-lib.sh) and their parsed form.
//!
//! The VM appends one line per fact: `<array-name> <key> <value...>`. Keys: `begin <type>`,
//! `write <seed> <offset> <len>`, `size_bytes`, `sha256`, `sysfs <attr> <value>`,
//! `mismatch_cnt`, `examine <serial> <line of mdadm --examine>`, `error <text>`, `end`; and for
//! arrays md assembles (raidkit -> md): `pre_examine <serial> <line>` (mdadm --examine before
//! md touched the members), `assemble_out <line>` (mdadm --assemble's messages),
//! `assembled <attr> <value>` (sysfs right after assembly), `detail <line>` (mdadm --detail
//! right after assembly), `region_sha256 <offset> <len> <sha>` (per-MiB hashes, only when the
//! whole-array hash differed from the host's), `dmesg <line>` (kernel messages of the array);
//! with a bitmap, `pre_bitmap <serial> <line>` and `bitmap <serial> <line>` (mdadm
//! --examine-bitmap before assembly and after the stop); when md resumes a recovery,
//! `held <attr> <value>` and `held_dev <serial> slot <n> state <s> recovery_start <r>` (sysfs
//! of the read-only assembly, before any recovery), the same as `recovering` and
//! `recovering_dev` (the recovery started and held by sync_max at its first step; also
//! `recovering hold <sectors>` and `recovering debug_messages on|off`) and as `rebuilt` and
//! `rebuilt_dev` (it finished), and `recovering_detail <line>` and `rebuilt_detail <line>`
//! (mdadm --detail then). Arrays md creates with a write journal also record `detail <line>`
//! (mdadm --detail before the stop) and `sysfs consistency_policy`; with a crash,
//! `crash <attr> <value>` (array_state and the journal's data offset when the members started
//! dropping writes) and `dm_table <line>` (the device-mapper tables then).
//! Lines of other shapes (`vm done`, timings) are ignored here. A report is complete only if
//! its `end` record arrived; a missing `end` means the VM died or timed out mid-array.

use crate::pattern::PatternWrite;
use std::collections::BTreeMap;

/// Everything the VM recorded about one array.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArrayReport {
    pub name: String,
    /// Scenario type from the `begin` record (`create`, `assemble`).
    pub kind: Option<String>,
    pub writes: Vec<PatternWrite>,
    pub size_bytes: Option<u64>,
    pub sha256: Option<String>,
    /// /sys/block/mdX/md/<attr> values.
    pub sysfs: BTreeMap<String, String>,
    /// md's own `check`: mismatch_cnt afterwards (absent for raid0).
    pub mismatch_cnt: Option<u64>,
    /// `mdadm --examine` of each member, by serial: (field, value) pairs in output order.
    pub examine: BTreeMap<String, Vec<(String, String)>>,
    /// `mdadm --examine` before assembly (raidkit -> md), like `examine`.
    pub pre_examine: BTreeMap<String, Vec<(String, String)>>,
    /// mdadm --assemble's output lines.
    pub assemble_out: Vec<String>,
    /// /sys/block/mdX/md/<attr> right after assembly.
    pub assembled: BTreeMap<String, String>,
    /// `mdadm --detail` right after assembly, raw lines.
    pub detail: Vec<String>,
    /// (offset, len, sha256) of array regions, reported when the whole-array hash differed.
    pub region_sha256: Vec<(u64, u64, String)>,
    /// Kernel messages logged while the array was assembled, checked and stopped.
    pub dmesg: Vec<String>,
    /// `mdadm --examine-bitmap` of each member before assembly, by serial: (field, value).
    pub pre_bitmap: BTreeMap<String, Vec<(String, String)>>,
    /// `mdadm --examine-bitmap` of each member after md stopped the array.
    pub bitmap: BTreeMap<String, Vec<(String, String)>>,
    /// sysfs of the read-only assembly, before md started the recovery.
    pub held: BTreeMap<String, String>,
    /// Per member then: slot, state, recovery_start.
    pub held_dev: BTreeMap<String, BTreeMap<String, String>>,
    /// sysfs once md's recovery runs, held at its first step (sync_action, sync_completed,
    /// hold, debug_messages).
    pub recovering: BTreeMap<String, String>,
    pub recovering_dev: BTreeMap<String, BTreeMap<String, String>>,
    /// `mdadm --detail` while the recovery runs, raw lines.
    pub recovering_detail: Vec<String>,
    /// sysfs after md finished the recovery.
    pub rebuilt: BTreeMap<String, String>,
    pub rebuilt_dev: BTreeMap<String, BTreeMap<String, String>>,
    /// `mdadm --detail` after md finished the recovery, raw lines.
    pub rebuilt_detail: Vec<String>,
    /// Journal crash rows md created: state when the members started dropping writes.
    pub crash: BTreeMap<String, String>,
    /// The device-mapper tables from then on.
    pub dm_table: Vec<String>,
    pub errors: Vec<String>,
    pub ended: bool,
}

impl ArrayReport {
    /// A field of one member's `mdadm --examine` output (e.g. "Data Offset").
    pub fn examine_field(&self, serial: &str, field: &str) -> Option<&str> {
        self.examine
            .get(serial)?
            .iter()
            .find(|(k, _)| k == field)
            .map(|(_, v)| v.as_str())
    }

    /// `detail` field (e.g. "State") from `mdadm --detail` after assembly.
    pub fn detail_field(&self, field: &str) -> Option<&str> {
        field_of(&self.detail, field)
    }

    /// A field of `mdadm --detail` after md finished a recovery.
    pub fn rebuilt_detail_field(&self, field: &str) -> Option<&str> {
        field_of(&self.rebuilt_detail, field)
    }

    /// A field of `mdadm --detail` while md's recovery runs.
    pub fn recovering_detail_field(&self, field: &str) -> Option<&str> {
        field_of(&self.recovering_detail, field)
    }
}

fn field_of<'a>(lines: &'a [String], field: &str) -> Option<&'a str> {
    lines.iter().find_map(|l| {
        let (k, v) = l.split_once(" : ")?;
        (k.trim() == field).then(|| v.trim())
    })
}

/// `slot 2 state spare recovery_start 2432` -> {slot: 2, state: spare, recovery_start: 2432}.
fn dev_attrs(text: &str) -> BTreeMap<String, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].to_string(), c[1].to_string()))
        .collect()
}

/// Parse the records of one VM run into reports, keyed by array name.
pub fn parse_records(text: &str) -> BTreeMap<String, ArrayReport> {
    let mut out: BTreeMap<String, ArrayReport> = BTreeMap::new();
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(' ') else {
            continue;
        };
        let (key, value) = rest.split_once(' ').unwrap_or((rest, ""));
        let known = matches!(
            key,
            "begin"
                | "write"
                | "size_bytes"
                | "sha256"
                | "sysfs"
                | "mismatch_cnt"
                | "examine"
                | "pre_examine"
                | "assemble_out"
                | "assembled"
                | "detail"
                | "region_sha256"
                | "dmesg"
                | "pre_bitmap"
                | "bitmap"
                | "held"
                | "held_dev"
                | "recovering"
                | "recovering_dev"
                | "recovering_detail"
                | "rebuilt"
                | "rebuilt_dev"
                | "rebuilt_detail"
                | "crash"
                | "dm_table"
                | "error"
                | "end"
        );
        if !known {
            continue;
        }
        let rep = out.entry(name.to_string()).or_insert_with(|| ArrayReport {
            name: name.to_string(),
            ..ArrayReport::default()
        });
        match key {
            "begin" => rep.kind = Some(value.trim().to_string()),
            "write" => {
                let nums: Vec<Option<u64>> =
                    value.split_whitespace().map(|v| v.parse().ok()).collect();
                match nums.as_slice() {
                    [Some(seed), Some(offset_bytes), Some(len_bytes)] => {
                        rep.writes.push(PatternWrite {
                            seed: *seed,
                            offset_bytes: *offset_bytes,
                            len_bytes: *len_bytes,
                        })
                    }
                    _ => rep.errors.push(format!("malformed write record: {value}")),
                }
            }
            "size_bytes" => match value.trim().parse() {
                Ok(v) => rep.size_bytes = Some(v),
                Err(_) => rep.errors.push(format!("malformed size_bytes: {value}")),
            },
            "sha256" => rep.sha256 = Some(value.trim().to_string()),
            "sysfs" => {
                let (attr, v) = value.split_once(' ').unwrap_or((value, ""));
                rep.sysfs.insert(attr.to_string(), v.trim().to_string());
            }
            "mismatch_cnt" => match value.trim().parse() {
                Ok(v) => rep.mismatch_cnt = Some(v),
                Err(_) => rep.errors.push(format!("malformed mismatch_cnt: {value}")),
            },
            "examine" | "pre_examine" | "bitmap" | "pre_bitmap" => {
                let (serial, line) = value.split_once(' ').unwrap_or((value, ""));
                if let Some((k, v)) = line.split_once(" : ") {
                    let map = match key {
                        "examine" => &mut rep.examine,
                        "pre_examine" => &mut rep.pre_examine,
                        "bitmap" => &mut rep.bitmap,
                        _ => &mut rep.pre_bitmap,
                    };
                    map.entry(serial.to_string())
                        .or_default()
                        .push((k.trim().to_string(), v.trim().to_string()));
                }
            }
            "assemble_out" => rep.assemble_out.push(value.to_string()),
            "assembled" => {
                let (attr, v) = value.split_once(' ').unwrap_or((value, ""));
                rep.assembled.insert(attr.to_string(), v.trim().to_string());
            }
            "detail" => rep.detail.push(value.to_string()),
            "rebuilt_detail" => rep.rebuilt_detail.push(value.to_string()),
            "recovering_detail" => rep.recovering_detail.push(value.to_string()),
            "dm_table" => rep.dm_table.push(value.to_string()),
            "held" | "recovering" | "rebuilt" | "crash" => {
                let (attr, v) = value.split_once(' ').unwrap_or((value, ""));
                let map = match key {
                    "held" => &mut rep.held,
                    "recovering" => &mut rep.recovering,
                    "crash" => &mut rep.crash,
                    _ => &mut rep.rebuilt,
                };
                map.insert(attr.to_string(), v.trim().to_string());
            }
            "held_dev" | "recovering_dev" | "rebuilt_dev" => {
                let (serial, rest) = value.split_once(' ').unwrap_or((value, ""));
                let map = match key {
                    "held_dev" => &mut rep.held_dev,
                    "recovering_dev" => &mut rep.recovering_dev,
                    _ => &mut rep.rebuilt_dev,
                };
                map.insert(serial.to_string(), dev_attrs(rest));
            }
            "dmesg" => rep.dmesg.push(value.to_string()),
            "region_sha256" => {
                let f: Vec<&str> = value.split_whitespace().collect();
                match f.as_slice() {
                    [off, len, sha] => match (off.parse(), len.parse()) {
                        (Ok(o), Ok(l)) => rep.region_sha256.push((o, l, sha.to_string())),
                        _ => rep.errors.push(format!("malformed region_sha256: {value}")),
                    },
                    _ => rep.errors.push(format!("malformed region_sha256: {value}")),
                }
            }
            "error" => rep.errors.push(value.to_string()),
            _ => rep.ended = true,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_report() {
        let text = "r5 begin create\n\
                    r5 write 1 0 4096\n\
                    r5 write 2 512 512\n\
                    r5 size_bytes 4096\n\
                    r5 sha256 abcd\n\
                    r5 sysfs layout 2\n\
                    r5 mismatch_cnt 0\n\
                    r5 examine rk0m0 /dev/vdc:\n\
                    r5 examine rk0m0     Data Offset : 2048 sectors\n\
                    r5 examine rk0m0    Device Role : Active device 0\n\
                    r5 end\n\
                    vm done\n";
        let map = parse_records(text);
        assert_eq!(map.len(), 1);
        let r = &map["r5"];
        assert_eq!(r.kind.as_deref(), Some("create"));
        assert_eq!(r.writes.len(), 2);
        assert_eq!(
            r.writes[1],
            PatternWrite {
                seed: 2,
                offset_bytes: 512,
                len_bytes: 512
            }
        );
        assert_eq!(r.size_bytes, Some(4096));
        assert_eq!(r.sysfs["layout"], "2");
        assert_eq!(r.mismatch_cnt, Some(0));
        assert_eq!(
            r.examine_field("rk0m0", "Data Offset"),
            Some("2048 sectors")
        );
        assert_eq!(
            r.examine_field("rk0m0", "Device Role"),
            Some("Active device 0")
        );
        assert!(r.ended);
        assert!(r.errors.is_empty());
    }

    #[test]
    fn parses_assembly_records() {
        let text = "a begin assemble\n\
                    a pre_examine rk0m1     Events : 7\n\
                    a assemble_out mdadm: /dev/md0 has been started with 3 drives (out of 4).\n\
                    a assembled resync_start none\n\
                    a detail           State : clean, degraded \n\
                    a region_sha256 1048576 1048576 abcd\n\
                    a dmesg md/raid:md0: raid level 5 active with 3 out of 4 devices\n\
                    a end\n";
        let r = &parse_records(text)["a"];
        assert_eq!(r.kind.as_deref(), Some("assemble"));
        assert_eq!(r.pre_examine["rk0m1"], vec![("Events".into(), "7".into())]);
        assert!(r.examine.is_empty());
        assert_eq!(r.assemble_out.len(), 1);
        assert_eq!(r.assembled["resync_start"], "none");
        assert_eq!(r.detail_field("State"), Some("clean, degraded"));
        assert_eq!(r.region_sha256, vec![(1 << 20, 1 << 20, "abcd".into())]);
        assert_eq!(r.dmesg.len(), 1);
        assert!(r.errors.is_empty() && r.ended);
    }

    #[test]
    fn parses_bitmap_and_recovery_records() {
        let text = "b pre_bitmap rk0m1           Chunksize : 64 KB\n\
                    b pre_bitmap rk0m1              Bitmap : 48 bits (chunks), 3 dirty (6.2%)\n\
                    b bitmap rk0m1           Chunksize : 64 KB\n\
                    b held_dev rk0m4 slot 3 state spare recovery_start 2432\n\
                    b recovering sync_completed 2432 / 6144\n\
                    b recovering_dev rk0m4 slot 3 state spare recovery_start 2432\n\
                    b rebuilt sync_action idle\n\
                    b rebuilt_detail           State : clean \n\
                    b crash journal_data_offset 2048\n\
                    b dm_table rk-rk0m0: 0 8192 flakey 254:32 0 0 1 1 drop_writes \n\
                    b end\n";
        let r = &parse_records(text)["b"];
        assert_eq!(
            r.pre_bitmap["rk0m1"],
            vec![
                ("Chunksize".into(), "64 KB".into()),
                ("Bitmap".into(), "48 bits (chunks), 3 dirty (6.2%)".into())
            ]
        );
        assert_eq!(r.bitmap["rk0m1"].len(), 1);
        assert_eq!(r.held_dev["rk0m4"]["state"], "spare");
        assert_eq!(r.recovering["sync_completed"], "2432 / 6144");
        assert_eq!(r.recovering_dev["rk0m4"]["recovery_start"], "2432");
        assert_eq!(r.recovering_dev["rk0m4"]["slot"], "3");
        assert_eq!(r.rebuilt["sync_action"], "idle");
        assert_eq!(r.rebuilt_detail_field("State"), Some("clean"));
        assert_eq!(r.crash["journal_data_offset"], "2048");
        assert_eq!(r.dm_table.len(), 1);
        assert!(r.errors.is_empty() && r.ended);
    }

    #[test]
    fn missing_end_and_errors_are_kept() {
        let map = parse_records("a begin create\na error mdadm failed\na write x y\n");
        let r = &map["a"];
        assert!(!r.ended);
        assert_eq!(r.errors.len(), 2);
    }
}
