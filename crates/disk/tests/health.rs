//! Drive health read from real smartctl output: captured by smartmontools 7.3 from qemu's
//! emulated ATA and NVMe disks and a loop device (`tests/smart/capture.sh` makes them again),
//! and from an emulated drive told what to report.

use raidkit_disk::emu::catalog::Catalog;
use raidkit_disk::health::parse_smartctl;
use raidkit_disk::{Disk, EmuDisk, Health, Thresholds, WarningKind};
use serde_json::Value;

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn kinds(h: &raidkit_disk::DriveHealth, t: &Thresholds) -> Vec<WarningKind> {
    h.warnings(t).iter().map(|w| w.kind).collect()
}

#[test]
fn an_ata_disk_reports_its_assessment_counts_and_temperature() {
    let h = parse_smartctl(&fixture("smartctl-qemu-ata.json")).unwrap();
    assert_eq!(h.source, "smartctl 7.3");
    assert_eq!(h.model.as_deref(), Some("QEMU HARDDISK"));
    assert_eq!(h.serial.as_deref(), Some("RKSMART0001"));
    assert_eq!(h.passed, Some(true));
    assert_eq!(h.reallocated_sectors, Some(0));
    // qemu's drive has no attributes 197 and 198: unknown, not zero.
    assert_eq!(h.pending_sectors, None);
    assert_eq!(h.uncorrectable_sectors, None);
    assert_eq!(h.temperature_c, Some(31));
    assert_eq!(h.power_on_hours, Some(1));
    assert!(h.failing_attributes.is_empty());
    assert_eq!(h.last_self_test, None);
    assert!(kinds(&h, &Thresholds::default()).is_empty());
    assert_eq!(
        h.summary(),
        "PASSED, 0 reallocated, 31 °C, 1 h on",
        "the line detail prints"
    );
}

#[test]
fn a_self_test_in_the_log_is_the_last_self_test() {
    let h = parse_smartctl(&fixture("smartctl-qemu-ata-selftest.json")).unwrap();
    let st = h.last_self_test.expect("one self-test in the log");
    assert_eq!(st.kind, "Short offline");
    assert_eq!(st.status, "Completed without error");
    assert!(st.passed);
}

#[test]
fn an_nvme_drive_reports_media_errors_and_critical_warnings() {
    let h = parse_smartctl(&fixture("smartctl-qemu-nvme.json")).unwrap();
    assert_eq!(h.model.as_deref(), Some("QEMU NVMe Ctrl"));
    assert_eq!(h.passed, Some(true));
    assert_eq!(h.uncorrectable_sectors, Some(0));
    assert_eq!(h.critical_warning, Some(0));
    assert_eq!(h.temperature_c, Some(50));
    assert!(kinds(&h, &Thresholds::default()).is_empty());
}

#[test]
fn a_device_without_smart_gives_smartctls_reason() {
    let e = parse_smartctl(&fixture("smartctl-loop.json")).unwrap_err();
    assert!(e.contains("Unable to detect device type"), "{e}");
    assert!(parse_smartctl("not json").is_err());
    assert!(
        parse_smartctl("{}").is_err(),
        "no report in an empty object"
    );
}

/// The ATA capture, changed the way a dying drive changes it.
fn dying_ata() -> String {
    let mut v: Value = serde_json::from_str(&fixture("smartctl-qemu-ata.json")).unwrap();
    v["smart_status"]["passed"] = Value::Bool(false);
    let table = v["ata_smart_attributes"]["table"].as_array_mut().unwrap();
    let realloc = table.iter_mut().find(|a| a["id"] == 5).unwrap();
    realloc["raw"]["value"] = 12.into();
    realloc["value"] = 30.into(); // at or below its threshold (36): tripped
    let mut pending = realloc.clone();
    pending["id"] = 197.into();
    pending["name"] = "Current_Pending_Sector".into();
    pending["value"] = 100.into();
    pending["thresh"] = 0.into();
    pending["raw"]["value"] = 3.into();
    table.push(pending);
    v["temperature"]["current"] = 64.into();
    v["ata_smart_self_test_log"]["standard"]["table"] = serde_json::json!([{
        "type": {"value": 2, "string": "Extended offline"},
        "status": {"value": 121, "string": "Completed: read failure", "passed": false},
        "lifetime_hours": 900
    }]);
    v.to_string()
}

#[test]
fn a_dying_drive_gives_every_warning_and_thresholds_decide_the_counts() {
    let h = parse_smartctl(&dying_ata()).unwrap();
    assert_eq!(h.failing_attributes, ["Reallocated_Sector_Ct"]);
    assert_eq!(
        kinds(&h, &Thresholds::default()),
        [
            WarningKind::AssessmentFailed,
            WarningKind::AttributeFailing,
            WarningKind::SelfTestFailed,
            WarningKind::Reallocated,
            WarningKind::Pending,
            WarningKind::Temperature,
        ]
    );
    let lenient = Thresholds::parse("reallocated=20,pending=5,temperature=70").unwrap();
    assert_eq!(
        kinds(&h, &lenient),
        [
            WarningKind::AssessmentFailed,
            WarningKind::AttributeFailing,
            WarningKind::SelfTestFailed,
        ]
    );
    let text: Vec<String> = h
        .warnings(&Thresholds::default())
        .into_iter()
        .map(|w| w.text)
        .collect();
    assert!(
        text.contains(&"12 sectors reallocated (warns at 10)".to_string()),
        "{text:?}"
    );
    assert!(
        text.contains(&"64 °C (warns at 60 °C)".to_string()),
        "{text:?}"
    );
}

#[test]
fn thresholds_refuse_what_they_do_not_know() {
    assert_eq!(Thresholds::parse("").unwrap(), Thresholds::default());
    assert_eq!(
        Thresholds::parse("temperature=55C").unwrap().temperature_c,
        55
    );
    assert!(Thresholds::parse("pending=-1").is_err());
    assert!(Thresholds::parse("heat=3").is_err());
    assert!(Thresholds::parse("pending").is_err());
}

#[test]
fn an_emulated_drive_reports_what_its_file_says_each_time_it_is_asked() {
    let catalog = Catalog::load(None).unwrap();
    let healthy = EmuDisk::open("emu:hds72101:8M", &catalog).unwrap();
    match healthy.health() {
        Health::Report(h) => {
            assert_eq!(h.source, "emulated");
            assert_eq!(h.passed, Some(true));
            assert!(h.warnings(&Thresholds::default()).is_empty());
        }
        other => panic!("an emulated drive reports: {other:?}"),
    }
    let file = std::env::temp_dir().join(format!("raidkit-smart-{}.json", std::process::id()));
    std::fs::write(&file, fixture("smartctl-qemu-ata.json")).unwrap();
    let d = EmuDisk::open(
        &format!("emu:hds72101,smart={}:8M", file.display()),
        &catalog,
    )
    .unwrap();
    let warnings = |d: &EmuDisk| d.health().warnings(&Thresholds::default()).len();
    assert_eq!(warnings(&d), 0);
    std::fs::write(&file, dying_ata()).unwrap();
    assert_eq!(warnings(&d), 6, "the drive reads its file again");
    std::fs::write(&file, "garbled").unwrap();
    assert!(matches!(d.health(), Health::Unavailable { .. }));
    std::fs::remove_file(&file).unwrap();
    assert!(EmuDisk::open("emu:hds72101,smart=:8M", &catalog).is_err());
}
