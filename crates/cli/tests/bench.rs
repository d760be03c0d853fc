//! The lab through the real binary: `bench run` on a file, on an array in process and on a
//! `raidkit serve` export (with per-member load from its control socket), `bench matrix`,
//! `iostat`, and the refusals (a write workload without --allow-writes writes nothing).

mod common;

use common::*;
use serde_json::Value;

fn json(args: &[&str]) -> Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}\n{out}"))
}

fn create(members: &[std::path::PathBuf], level: &str, size: &str) {
    ok(&with(
        &[
            "create",
            "--level",
            level,
            "--chunk",
            "64K",
            "--image-size",
            size,
        ],
        members,
        &[],
    ));
}

#[test]
fn dd_on_a_file_moves_the_bytes_asked_for_and_reports_them() {
    let dir = TempDir::new("bench-file");
    let f = dir.path("t.img");
    std::fs::File::create(&f)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let v = json(&[
        "bench",
        "run",
        "--workload",
        "dd",
        "--size",
        "32M",
        "--allow-writes",
        "--json",
        s(&f),
    ]);
    assert_eq!(v["schema"], "raidkit-bench-run/1");
    assert_eq!(v["target_bytes"], 64u64 << 20);
    let w = v["workloads"].as_array().unwrap();
    assert_eq!(w.len(), 2, "dd is a write then a read");
    let write = &w[0]["runs"][0];
    let read = &w[1]["runs"][0];
    assert_eq!(write["write_bytes"], 32u64 << 20);
    assert_eq!(write["read_bytes"], 0);
    assert_eq!(read["read_bytes"], 32u64 << 20);
    assert_eq!(read["reads"], 32);
    for r in [write, read] {
        let l = &r["latency_us"];
        assert!(l["p50"].as_f64().unwrap() > 0.0);
        assert!(l["max"].as_f64().unwrap() >= l["p999"].as_f64().unwrap());
        assert!(r["mb_s"].as_f64().unwrap() > 0.0);
    }
    // The pattern written is not zeroes.
    let data = std::fs::read(&f).unwrap();
    assert!(data[..1 << 20].iter().any(|&b| b != 0));
}

#[test]
fn writes_need_allow_writes_and_refusing_changes_nothing() {
    let dir = TempDir::new("bench-refuse");
    let members = dir.members("m", 3);
    create(&members, "5", "16M");
    let before = contents(&members);
    let (code, err) = fails(&with(
        &[
            "bench",
            "run",
            "--array",
            "--workload",
            "db-oltp",
            "--time",
            "0.2",
        ],
        &members,
        &[],
    ));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--allow-writes"), "{err}");
    assert_unchanged(&members, &before, "a refused bench run");
    // Reads only: the array is assembled read-only and nothing changes either.
    ok(&with(
        &[
            "bench",
            "run",
            "--array",
            "--workload",
            "dss",
            "--time",
            "0.3",
            "--warmup",
            "0",
        ],
        &members,
        &[],
    ));
    assert_unchanged(&members, &before, "a read-only bench run");
    let (code, err) = fails(&[
        "bench",
        "run",
        "--workload",
        "nope",
        "--allow-writes",
        s(&members[0]),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("db-oltp"),
        "the error lists the IOmeter specs: {err}"
    );
}

#[test]
fn an_array_in_process_shows_each_members_share() {
    let dir = TempDir::new("bench-array");
    let members = dir.members("m", 4);
    create(&members, "10", "24M");
    let v = json(&with(
        &[
            "bench",
            "run",
            "--array",
            "--workload",
            "seq-write",
            "--bs",
            "1M",
            "--size",
            "16M",
            "--allow-writes",
            "--json",
            "--warmup",
            "0",
        ],
        &members,
        &[],
    ));
    let run = &v["workloads"][0]["runs"][0];
    let ms = run["members"].as_array().unwrap();
    assert_eq!(ms.len(), 4);
    let written: u64 = ms.iter().map(|m| m["write_bytes"].as_u64().unwrap()).sum();
    // RAID 10 n2 writes every byte twice (plus superblock updates).
    assert!(
        (32 << 20..(32 << 20) + (1 << 20)).contains(&written),
        "members wrote {written}"
    );
}

#[test]
fn a_served_array_is_measured_over_nbd_with_member_load_from_its_control_socket() {
    let dir = TempDir::new("bench-nbd");
    let members = dir.members("m", 3);
    create(&members, "5", "24M");
    let args: Vec<&str> = members.iter().map(|p| s(p)).collect();
    let server = Server::start(dir.path("").as_path(), "s", &args);
    let uri = format!("nbd+unix:///?socket={}", server.socket.display());
    let ctl = server.control.display().to_string();
    let v = json(&[
        "bench",
        "run",
        "--workload",
        "custom",
        "--bs",
        "4k,64k",
        "--qd",
        "1,8",
        "--read-pct",
        "50",
        "--time",
        "0.5",
        "--warmup",
        "0.1",
        "--sample",
        "0.25",
        "--allow-writes",
        "--control",
        &ctl,
        "--chart",
        s(&dir.path("c")),
        "--json",
        &uri,
    ]);
    let w = v["workloads"].as_array().unwrap();
    assert_eq!(w.len(), 4, "two sizes by two queue depths");
    for x in w {
        let r = &x["runs"][0];
        assert!(r["reads"].as_u64().unwrap() > 0 && r["writes"].as_u64().unwrap() > 0);
        assert_eq!(r["members"].as_array().unwrap().len(), 3);
        let moved: u64 = r["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["read_bytes"].as_u64().unwrap() + m["write_bytes"].as_u64().unwrap())
            .sum();
        assert!(moved > 0, "the members did the work: {r}");
    }
    let charts: Vec<&str> = v["charts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        charts.iter().any(|c| c.ends_with("c-sweep.svg")),
        "{charts:?}"
    );
    assert!(
        charts.iter().any(|c| c.ends_with("c-members.png")),
        "{charts:?}"
    );
    for c in &charts {
        assert!(std::fs::metadata(c).unwrap().len() > 1000, "{c}");
    }
    // iostat: one JSON line per interval, a line per member.
    let out = ok(&["iostat", "--control", &ctl, "--json", "0.2", "2"]);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["members"].as_array().unwrap().len(), 3);
}

#[test]
fn the_matrix_runs_each_level_and_count_and_draws_its_chart() {
    let dir = TempDir::new("bench-matrix");
    let v = json(&[
        "bench",
        "matrix",
        "--levels",
        "0,5,1e",
        "--members",
        "3..4",
        "--size",
        "16M",
        "--bytes",
        "8M",
        "--dir",
        s(&dir.path("mx")),
        "--chart",
        s(&dir.path("chart")),
        "--json",
    ]);
    assert_eq!(v["schema"], "raidkit-bench-matrix/1");
    let cells = v["cells"].as_array().unwrap();
    // 0 and 5 at 3 and 4 members, 1E at 3 only (odd counts).
    let got: Vec<(String, u64)> = cells
        .iter()
        .map(|c| {
            (
                c["level"].as_str().unwrap().to_string(),
                c["members"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("0".into(), 3),
            ("0".into(), 4),
            ("5".into(), 3),
            ("5".into(), 4),
            ("1E".into(), 3)
        ]
    );
    for c in cells {
        assert_eq!(c["write"]["write_bytes"], 8u64 << 20);
        assert_eq!(c["read"]["read_bytes"], 8u64 << 20);
    }
    assert!(dir.path("chart.svg").exists() && dir.path("chart.png").exists());
    // Its image files are gone.
    assert_eq!(std::fs::read_dir(dir.path("mx")).unwrap().count(), 0);
}
