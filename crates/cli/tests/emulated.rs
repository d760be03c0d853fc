//! Emulated drives through the real binary: an array created, written, read back and
//! examined on `emu:` members held in image files; a single emulated drive measured by
//! `bench run`, its outer zone faster than its inner one; and the refusals of spellings that
//! name no drive.

mod common;

use common::*;
use serde_json::Value;

#[test]
fn an_array_on_emulated_drives_keeps_its_data_across_commands() {
    let dir = TempDir::new("emu-array");
    let members: Vec<String> = (0..4)
        .map(|i| {
            format!(
                "emu:sf2281:32M:{}",
                dir.path(&format!("d{i}.img")).display()
            )
        })
        .collect();
    let m: Vec<&str> = members.iter().map(String::as_str).collect();
    let mut create = vec!["create", "--level", "5", "--chunk", "64K"];
    create.extend(&m);
    ok(&create);
    let input = dir.path("in.bin");
    let data: Vec<u8> = (0..3 << 20).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&input, &data).unwrap();
    let mut write = vec!["write", "--input", input.to_str().unwrap()];
    write.extend(&m);
    ok(&write);
    let out = dir.path("out.bin");
    let len = (3u64 << 20).to_string();
    let mut read = vec!["read", "--length", &len, "-o", out.to_str().unwrap()];
    read.extend(&m);
    ok(&read);
    assert_eq!(std::fs::read(&out).unwrap(), data);
    // The members are md members in their image files.
    let mut detail = vec!["detail"];
    detail.extend(&m);
    let text = ok(&detail);
    assert!(text.contains("raid5"), "{text}");
}

fn mb_s(v: &Value) -> f64 {
    v["workloads"][0]["runs"][0]["mb_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("no mb_s in {v}"))
}

#[test]
fn an_emulated_hard_disk_is_faster_outside_than_inside_and_shows_its_load() {
    let run = |region: &str| -> Value {
        let out = ok(&[
            "bench",
            "run",
            "emu:hds72101:4G",
            "--workload",
            "seq-read",
            "--bs",
            "1m",
            "--qd",
            "2",
            "--region",
            region,
            "--time",
            "1",
            "--warmup",
            "0",
            "--json",
        ]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"))
    };
    let (outer, inner) = (run("first:10%"), run("last:10%"));
    let (o, i) = (mb_s(&outer), mb_s(&inner));
    // The catalog's drive: 184 MB/s outside, 60 inside; a second of real time is noisy,
    // the order and a wide margin are not. The regions (400 MiB) are larger than the
    // drive's buffer and than what a second reads, so nothing is read twice.
    assert!(o > 1.8 * i, "outer {o:.1} MB/s, inner {i:.1} MB/s");
    assert!(o < 200.0, "faster than the drive's media: {o:.1} MB/s");
    let members = &outer["workloads"][0]["runs"][0]["members"];
    assert_eq!(members.as_array().map(Vec::len), Some(1), "{members}");
}

#[test]
fn spellings_that_name_no_drive_are_refused_and_create_nothing() {
    let dir = TempDir::new("emu-bad");
    let img = dir.path("x.img");
    for bad in [
        format!("emu:nosuch:32M:{}", img.display()),
        format!("emu:hds72101,wce=maybe:32M:{}", img.display()),
        "emu:hds72101".to_string(),
    ] {
        let (code, err) = fails(&["create", "--level", "1", "--raid-devices", "2", &bad, &bad]);
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(!img.exists(), "{bad}: an image file was created");
    }
}
