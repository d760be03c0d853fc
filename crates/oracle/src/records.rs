//! Result records written by the VM (tests/md-oracle/vm/vm-lib.sh) and their parsed form.
//!
//! The VM appends one line per fact: `<array-name> <key> <value...>`. Keys: `begin <type>`,
//! `write <seed> <offset> <len>`, `size_bytes`, `sha256`, `sysfs <attr> <value>`,
//! `mismatch_cnt`, `examine <serial> <line of mdadm --examine>`, `error <text>`, `end`.
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
            "examine" => {
                let (serial, line) = value.split_once(' ').unwrap_or((value, ""));
                if let Some((k, v)) = line.split_once(" : ") {
                    rep.examine
                        .entry(serial.to_string())
                        .or_default()
                        .push((k.trim().to_string(), v.trim().to_string()));
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
    fn missing_end_and_errors_are_kept() {
        let map = parse_records("a begin create\na error mdadm failed\na write x y\n");
        let r = &map["a"];
        assert!(!r.ended);
        assert_eq!(r.errors.len(), 2);
    }
}
